"""Reverse-mode autograd: backward engine, ``grad``, custom ``Function``, checks and modes."""
from .._core.grad_mode import (enable_grad, inference_mode, is_grad_enabled, no_grad,
                               set_grad_enabled)
from .anomaly import detect_anomaly, is_anomaly_enabled, set_detect_anomaly
from .engine import queue_callback
from .function import Function, FunctionCtx, NestedIOFunction, once_differentiable
from .grad import backward, grad
from .gradcheck import GradcheckError, gradcheck, gradgradcheck
from . import forward_ad, functional  # noqa: E402  (use lucid.func; import after the core)
from .checkpoint import checkpoint  # noqa: E402
from . import graph  # noqa: E402
from .functional import hessian, jacobian, jvp, vjp  # noqa: E402  (Lucid 3 exports them here)
from .variable import Variable  # noqa: E402
from .._core.hooks import RemovableHandle  # noqa: E402
from ._flags import is_multithreading_enabled, is_view_replay_enabled, set_multithreading_enabled  # noqa: E402

__all__ = [
    "Function", "FunctionCtx", "NestedIOFunction", "once_differentiable", "grad", "backward", "gradcheck",
    "gradgradcheck", "GradcheckError", "no_grad", "enable_grad", "set_grad_enabled",
    "inference_mode", "is_grad_enabled", "detect_anomaly", "set_detect_anomaly",
    "is_anomaly_enabled", "forward_ad", "functional", "checkpoint", "queue_callback",
    "graph", "jacobian", "hessian", "vjp", "jvp", "Variable", "RemovableHandle",
    "is_multithreading_enabled", "set_multithreading_enabled", "is_view_replay_enabled",
]


def __getattr__(name):
    if name == "profiler":  # lucid.autograd.profiler: the same objects as lucid.profiler
        import importlib

        return importlib.import_module(".profiler", __name__)
    raise AttributeError(f"module 'lucid.autograd' has no attribute {name!r}")
