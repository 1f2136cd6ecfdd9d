"""``lucid.masked.maskedtensor`` (``torch.masked.maskedtensor``): :class:`MaskedTensor` under
PyTorch's package path, with its ``core`` and ``creation`` submodules.

PyTorch's ``binary``/``unary``/``reductions``/``passthrough`` submodules are its internal op
tables; Lucid's masked ops live in ``lucid/masked/_dispatch.py`` and are not mirrored.

Examples
--------
>>> import lucid
>>> from lucid.masked.maskedtensor import MaskedTensor
>>> MaskedTensor is lucid.masked.MaskedTensor
True
"""
from __future__ import annotations

from . import core, creation
from .core import MaskedTensor, is_masked_tensor
from .creation import as_masked_tensor, masked_tensor

__all__ = ["MaskedTensor", "is_masked_tensor", "as_masked_tensor", "masked_tensor", "core", "creation"]
