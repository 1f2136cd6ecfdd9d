"""``lucid._C``: the names PyTorch code reaches through ``torch._C`` for the ``__torch_function__``
protocol (NOTE [Torch function] in lucid/overrides.py)."""
from ._core.tensor import _disabled_torch_function_impl  # noqa: F401
from .overrides import DisableTorchFunction, DisableTorchFunctionSubclass  # noqa: F401


def _log_api_usage_once(event):
    """``torch._C._log_api_usage_once``: PyTorch records ``event`` (a str) for its API-usage logging,
    torchvision calls it from every model and op (``torchvision.utils._log_api_usage_once``); Lucid
    keeps no such log, so it does nothing."""
    if not isinstance(event, str):
        raise TypeError(f"_log_api_usage_once(): argument 'event' must be str, not {type(event).__name__}")


def _get_tracing_state():
    """``torch._C._get_tracing_state``: the active JIT tracer's state, None when not tracing, which
    Lucid never is (NOTE [No TorchScript] in lucid/jit.py); torchvision's detection code asks it."""
    return None
