"""lucid.utils."""
from . import data  # noqa: F401


def __getattr__(name):  # ``lucid.utils.checkpoint`` / ``.benchmark`` after ``import lucid``, as in PyTorch
    if name in ("checkpoint", "benchmark", "tensorboard", "dlpack", "hooks", "_pytree", "flop_counter",
                "module_tracker"):
        import importlib

        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
