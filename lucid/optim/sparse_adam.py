"""``lucid.optim.sparse_adam`` (``torch.optim.sparse_adam``): :class:`SparseAdam`.

PyTorch has no public functional form here (its ``F.sparse_adam`` is private), so neither does Lucid.

Examples
--------
>>> import lucid
>>> from lucid.optim.sparse_adam import SparseAdam
>>> SparseAdam is lucid.optim.SparseAdam
True
"""
from __future__ import annotations

from .adafactor import SparseAdam

__all__ = ["SparseAdam"]
