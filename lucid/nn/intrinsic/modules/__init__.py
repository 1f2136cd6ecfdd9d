"""``lucid.nn.intrinsic.modules`` (``torch.nn.intrinsic.modules``): PyTorch's legacy path for ``lucid.ao.nn.intrinsic``.

The classes are ``lucid.ao.nn.intrinsic``'s own objects (no copies), so both spellings name the same
layer.

Examples
--------
>>> import lucid
>>> from lucid.nn.intrinsic.modules import BNReLU2d
>>> import lucid.ao.nn.intrinsic
>>> BNReLU2d is lucid.ao.nn.intrinsic.BNReLU2d
True
"""
from __future__ import annotations

from lucid.ao.nn.intrinsic import (
    BNReLU2d, BNReLU3d, ConvBn1d, ConvBn2d, ConvBn3d, ConvBnReLU1d, ConvBnReLU2d, ConvBnReLU3d,
    ConvReLU1d, ConvReLU2d, ConvReLU3d, LinearBn1d, LinearReLU
    )

__all__ = [
    "BNReLU2d", "BNReLU3d", "ConvBn1d", "ConvBn2d", "ConvBn3d", "ConvBnReLU1d", "ConvBnReLU2d",
    "ConvBnReLU3d", "ConvReLU1d", "ConvReLU2d", "ConvReLU3d", "LinearBn1d", "LinearReLU"
]
