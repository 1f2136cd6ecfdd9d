"""``lucid.__config__`` (``torch.__config__``): how this Lucid is built and what it runs on.

Examples
--------
>>> import lucid
>>> "NumPy" in lucid.__config__.show() and "threads" in lucid.__config__.parallel_info()
True
"""
from __future__ import annotations

import importlib.util
import platform

import numpy as np

__all__ = ["show", "parallel_info"]


def _blas():
    """NumPy's BLAS/LAPACK libraries, as ``numpy.show_config`` reports them."""
    try:
        info = np.show_config(mode="dicts")
    except TypeError:  # NumPy < 1.26: no dict mode
        return "unknown"
    deps = info.get("Build Dependencies", {})
    parts = [f"{k}: {v.get('name', '?')} {v.get('version', '')}".strip() for k, v in deps.items()
             if isinstance(v, dict)]
    return "; ".join(parts) or "unknown"


def show() -> str:
    """A description of this build (PyTorch's lists compilers and MKL; Lucid's backends are
    NumPy, optional SciPy and CuPy, and the Python it runs on)."""
    from . import __version__

    extras = {name: importlib.util.find_spec(name) is not None for name in ("scipy", "cupy", "mpi4py")}
    lines = [f"Lucid {__version__} built with:",
             f"  - Python {platform.python_version()} ({platform.python_implementation()})",
             f"  - NumPy {np.__version__} ({_blas()})"]
    lines += [f"  - {name}: {'installed' if found else 'not installed'}" for name, found in extras.items()]
    return "\n".join(lines) + "\n"


def parallel_info() -> str:
    """The thread pools ops run on (PyTorch's ATen/OpenMP report; Lucid's is the BLAS pool)."""
    from ._runtime import get_num_interop_threads, get_num_threads

    return ("Lucid/Parallel:\n"
            f"\tlucid.get_num_threads() : {get_num_threads()}\n"
            f"\tlucid.get_num_interop_threads() : {get_num_interop_threads()}\n"
            "\tops run in the calling thread; matrix products use the BLAS pool's threads\n")
