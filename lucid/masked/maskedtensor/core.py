"""``lucid.masked.maskedtensor.core`` (``torch.masked.maskedtensor.core``): :class:`MaskedTensor`
and :func:`is_masked_tensor`, Lucid's own objects.

Examples
--------
>>> import lucid
>>> from lucid.masked.maskedtensor.core import is_masked_tensor
>>> is_masked_tensor(lucid.zeros(2))
False
"""
from __future__ import annotations

from .._tensor import MaskedTensor, is_masked_tensor

__all__ = ["MaskedTensor", "is_masked_tensor"]
