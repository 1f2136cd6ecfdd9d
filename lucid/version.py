"""``lucid.version`` (PyTorch's ``torch.version``): the version strings scripts print.

Examples
--------
>>> import lucid
>>> lucid.version.__version__ == lucid.__version__, lucid.version.debug, lucid.version.hip
(True, False, None)
"""
from __future__ import annotations

from . import __version__  # noqa: F401

git_version = "unknown"  # Lucid is installed from a checkout or a wheel; no commit is recorded
debug = False
hip = None
rocm = None
xpu = None


def __getattr__(name):
    # ``cuda``: the CUDA runtime the optional CuPy backend uses ("12.4"), None without it. Read
    # on first access, so ``import lucid.version`` never imports CuPy.
    if name == "cuda":
        try:
            import cupy

            v = cupy.cuda.runtime.runtimeGetVersion()
        except Exception:  # not installed, or no CUDA runtime library
            return None
        return f"{v // 1000}.{v % 1000 // 10}"
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
