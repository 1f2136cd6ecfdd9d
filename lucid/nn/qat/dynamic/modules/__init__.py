"""``lucid.nn.qat.dynamic.modules`` (``torch.nn.qat.dynamic.modules``): PyTorch's legacy path for ``lucid.ao.nn.qat``.

The classes are ``lucid.ao.nn.qat``'s own objects (no copies), so both spellings name the same
layer.

Not in Lucid (so not here): ``Linear``.
"""
from __future__ import annotations


__all__ = [
]
