"""``lucid.masked.maskedtensor.creation`` (``torch.masked.maskedtensor.creation``): the
:class:`MaskedTensor` constructors, Lucid's own functions.

Examples
--------
>>> import lucid
>>> from lucid.masked.maskedtensor.creation import masked_tensor
>>> masked_tensor is lucid.masked.masked_tensor
True
"""
from __future__ import annotations

from .. import as_masked_tensor, masked_tensor

__all__ = ["as_masked_tensor", "masked_tensor"]
