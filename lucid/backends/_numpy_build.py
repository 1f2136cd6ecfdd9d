"""What NumPy (lucid's CPU engine) was built with, read once from ``numpy.show_config``."""
from __future__ import annotations

import functools


@functools.lru_cache(maxsize=None)
def config() -> dict:
    """NumPy's build configuration as a dict ({} where this NumPy cannot report it)."""
    import numpy as np

    try:
        return np.show_config(mode="dicts") or {}
    except Exception:  # NumPy < 1.26 only prints it
        return {}


def blas() -> dict:
    """The BLAS entry of the build dependencies (name, version, configuration)."""
    return config().get("Build Dependencies", {}).get("blas", {}) or {}


def simd() -> list:
    """The SIMD targets NumPy's kernels use on this CPU (its baseline and the dispatched ones found)."""
    ext = config().get("SIMD Extensions", {}) or {}
    return list(ext.get("baseline", []) or []) + list(ext.get("found", []) or [])
