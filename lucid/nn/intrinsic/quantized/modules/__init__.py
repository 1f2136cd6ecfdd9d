"""``lucid.nn.intrinsic.quantized.modules`` (``torch.nn.intrinsic.quantized.modules``):
PyTorch's legacy path for ``lucid.ao.nn.quantized``.

The classes are ``lucid.ao.nn.quantized``'s own objects (no copies), so both spellings name the same
layer.

Not in Lucid (so not here): ``BNReLU2d``, ``BNReLU3d``.

Examples
--------
>>> import lucid
>>> from lucid.nn.intrinsic.quantized.modules import ConvReLU1d
>>> import lucid.ao.nn.quantized
>>> ConvReLU1d is lucid.ao.nn.quantized.ConvReLU1d
True
"""
from __future__ import annotations

from lucid.ao.nn.quantized import ConvReLU1d, ConvReLU2d, ConvReLU3d, LinearReLU

__all__ = [
    "ConvReLU1d", "ConvReLU2d", "ConvReLU3d", "LinearReLU"
]
