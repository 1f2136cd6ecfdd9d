"""``lucid.backends``: the backend flags PyTorch code sets.

``cpu``, ``mkl``, ``openmp`` and ``opt_einsum`` answer for lucid's CPU engine (NumPy and its
BLAS, read from ``numpy.show_config``). ``cudnn`` is the CUDA backend's cuDNN (NOTE [cuDNN
convolutions] in ``lucid/_core/cudnn.py``): unavailable without a GPU, where its flags can be
read and set and change nothing. ``mkldnn`` and ``mps`` report that they are unavailable; their
flags can be read and set (so a training script that sets them is harmless). See NOTE [Devices]
in ``lucid/_core/backend.py``.

Examples
--------
>>> import lucid
>>> lucid.backends.mps.is_available(), lucid.backends.cudnn.is_available()
(False, False)
>>> lucid.backends.cudnn.deterministic = True
"""
from . import cpu, cuda, cudnn, mkl, mkldnn, mps, openmp, opt_einsum  # noqa: F401
