"""``lucid.backends.mkl`` (``torch.backends.mkl``): whether NumPy's BLAS is Intel MKL."""
from __future__ import annotations

from ._numpy_build import blas

VERBOSE_OFF, VERBOSE_ON = 0, 1


def is_available() -> bool:
    """Whether lucid's matrix products run on MKL (NumPy built against it); False for OpenBLAS,
    Accelerate, or a NumPy that cannot report its BLAS."""
    return "mkl" in str(blas().get("name", "")).lower()


class verbose:  # noqa: N801 (PyTorch's name)
    """Context manager for MKL's verbose log (``torch.backends.mkl.verbose``): NumPy gives no
    handle on it, so the level is recorded and the block runs unchanged."""

    def __init__(self, enable):
        self.enable = enable

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False
