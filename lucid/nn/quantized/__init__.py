"""``lucid.nn.quantized`` (``torch.nn.quantized``): PyTorch's legacy path for ``lucid.ao.nn.quantized``.

The classes are ``lucid.ao.nn.quantized``'s own objects (no copies), so both spellings name the same
layer. ``MaxPool2d`` is ``lucid.nn.MaxPool2d`` (a quantized max pool is the float one, as in
PyTorch).

Not in Lucid (so not here): ``FXFloatFunctional``.

Examples
--------
>>> import lucid
>>> from lucid.nn.quantized import BatchNorm2d
>>> import lucid.ao.nn.quantized
>>> BatchNorm2d is lucid.ao.nn.quantized.BatchNorm2d
True
"""
from __future__ import annotations

from lucid.ao.nn.quantized import (
    BatchNorm2d, BatchNorm3d, Conv1d, Conv2d, Conv3d, ConvTranspose1d, ConvTranspose2d, ConvTranspose3d,
    DeQuantize, Dropout, ELU, Embedding, EmbeddingBag, FloatFunctional, GroupNorm, Hardswish,
    InstanceNorm1d, InstanceNorm2d, InstanceNorm3d, LSTM, LayerNorm, LeakyReLU, Linear,
    MultiheadAttention, PReLU, QFunctional, Quantize, ReLU6, Sigmoid, Softmax
    )
from lucid.nn.pooling import MaxPool2d
from . import dynamic
from . import functional
from . import modules

__all__ = [
    "BatchNorm2d", "BatchNorm3d", "Conv1d", "Conv2d", "Conv3d", "ConvTranspose1d", "ConvTranspose2d",
    "ConvTranspose3d", "DeQuantize", "Dropout", "ELU", "Embedding", "EmbeddingBag", "FloatFunctional",
    "GroupNorm", "Hardswish", "InstanceNorm1d", "InstanceNorm2d", "InstanceNorm3d", "LSTM", "LayerNorm",
    "LeakyReLU", "Linear", "MultiheadAttention", "PReLU", "QFunctional", "Quantize", "ReLU6", "Sigmoid",
    "Softmax", "MaxPool2d", "dynamic", "functional", "modules"
]
