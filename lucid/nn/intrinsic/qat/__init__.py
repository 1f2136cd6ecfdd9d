"""``lucid.nn.intrinsic.qat`` (``torch.nn.intrinsic.qat``): PyTorch's legacy path for ``lucid.ao.nn.intrinsic.qat``.

The classes are ``lucid.ao.nn.intrinsic.qat``'s own objects (no copies), so both spellings name the
same layer.

Examples
--------
>>> import lucid
>>> from lucid.nn.intrinsic.qat import ConvBn1d
>>> import lucid.ao.nn.intrinsic.qat
>>> ConvBn1d is lucid.ao.nn.intrinsic.qat.ConvBn1d
True
"""
from __future__ import annotations

from lucid.ao.nn.intrinsic.qat import (
    ConvBn1d, ConvBn2d, ConvBn3d, ConvBnReLU1d, ConvBnReLU2d, ConvBnReLU3d, ConvReLU1d, ConvReLU2d,
    ConvReLU3d, LinearBn1d, LinearReLU, freeze_bn_stats, update_bn_stats
    )
from . import modules

__all__ = [
    "ConvBn1d", "ConvBn2d", "ConvBn3d", "ConvBnReLU1d", "ConvBnReLU2d", "ConvBnReLU3d", "ConvReLU1d",
    "ConvReLU2d", "ConvReLU3d", "LinearBn1d", "LinearReLU", "freeze_bn_stats", "update_bn_stats",
    "modules"
]
