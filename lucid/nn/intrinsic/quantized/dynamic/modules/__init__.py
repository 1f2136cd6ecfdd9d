"""``lucid.nn.intrinsic.quantized.dynamic.modules`` (``torch.nn.intrinsic.quantized.dynamic.modules``):
PyTorch's legacy path for ``lucid.ao.nn.quantized.dynamic``.

The classes are ``lucid.ao.nn.quantized.dynamic``'s own objects (no copies), so both spellings name
the same layer.

Examples
--------
>>> import lucid
>>> from lucid.nn.intrinsic.quantized.dynamic.modules import LinearReLU
>>> import lucid.ao.nn.quantized.dynamic
>>> LinearReLU is lucid.ao.nn.quantized.dynamic.LinearReLU
True
"""
from __future__ import annotations

from lucid.ao.nn.quantized.dynamic import LinearReLU

__all__ = [
    "LinearReLU"
]
