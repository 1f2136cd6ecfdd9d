"""``lucid.nn.qat`` (``torch.nn.qat``): PyTorch's legacy path for ``lucid.ao.nn.qat``.

The classes are ``lucid.ao.nn.qat``'s own objects (no copies), so both spellings name the same
layer.

Examples
--------
>>> import lucid
>>> from lucid.nn.qat import Conv1d
>>> import lucid.ao.nn.qat
>>> Conv1d is lucid.ao.nn.qat.Conv1d
True
"""
from __future__ import annotations

from lucid.ao.nn.qat import Conv1d, Conv2d, Conv3d, Embedding, EmbeddingBag, Linear
from . import dynamic
from . import modules

__all__ = [
    "Conv1d", "Conv2d", "Conv3d", "Embedding", "EmbeddingBag", "Linear", "dynamic", "modules"
]
