"""Signal processing, as ``torch.signal``: the window functions of :mod:`lucid.signal.windows`.

Examples
--------
>>> import lucid
>>> lucid.signal.windows.bartlett(3)
tensor([0., 1., 0.])
"""
from . import windows

__all__ = ["windows"]
