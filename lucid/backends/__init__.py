"""``lucid.backends``: the backend flags PyTorch code sets, answered for a CPU-only build.

``cudnn`` and ``mps`` report that they are unavailable; their flags can be read and set
(so ``lucid.backends.cudnn.benchmark = True`` in a training script is harmless) but do
nothing here. See NOTE [Devices] in ``lucid/_core/backend.py``.

Examples
--------
>>> import lucid
>>> lucid.backends.mps.is_available(), lucid.backends.cudnn.is_available()
(False, False)
>>> lucid.backends.cudnn.deterministic = True
"""
from . import cuda, cudnn, mps  # noqa: F401
