"""``lucid.backends.openmp`` (``torch.backends.openmp``)."""
from __future__ import annotations

from ._numpy_build import blas


def is_available() -> bool:
    """Whether lucid's multithreaded work (NumPy's BLAS, the one parallel part) runs on OpenMP:
    True only when the BLAS reports an OpenMP build; lucid itself has no OpenMP code, and the
    pthreads builds of OpenBLAS that NumPy wheels ship say False."""
    info = blas()
    text = f"{info.get('openblas configuration', '')} {info.get('name', '')}".upper()
    return "USE_OPENMP" in text or "OPENMP" in text.replace("NO_OPENMP", "")
