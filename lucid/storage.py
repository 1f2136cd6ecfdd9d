"""``lucid.storage`` (``torch.storage``): :class:`TypedStorage` and :class:`UntypedStorage`.

Both are Lucid's own (``lucid/ops/storage.py``), re-exported under PyTorch's module path.

Examples
--------
>>> import lucid
>>> from lucid.storage import UntypedStorage
>>> UntypedStorage is lucid.UntypedStorage
True
"""
from __future__ import annotations

from .ops.storage import TypedStorage, UntypedStorage

__all__ = ["TypedStorage", "UntypedStorage"]
