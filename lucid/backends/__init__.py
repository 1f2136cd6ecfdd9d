"""``lucid.backends``: the backend flags PyTorch code sets, answered for a CPU-only build.

``cpu``, ``mkl``, ``openmp`` and ``opt_einsum`` answer for lucid's CPU engine (NumPy and its
BLAS, read from ``numpy.show_config``). ``cudnn``, ``mkldnn`` and ``mps`` report that they are unavailable; their flags can be read and set
(so ``lucid.backends.cudnn.benchmark = True`` in a training script is harmless) but do
nothing here. See NOTE [Devices] in ``lucid/_core/backend.py``.

Examples
--------
>>> import lucid
>>> lucid.backends.mps.is_available(), lucid.backends.cudnn.is_available()
(False, False)
>>> lucid.backends.cudnn.deterministic = True
"""
from . import cpu, cuda, cudnn, mkl, mkldnn, mps, openmp, opt_einsum  # noqa: F401
