"""``lucid.nn.quantized.dynamic`` (``torch.nn.quantized.dynamic``):
PyTorch's legacy path for ``lucid.ao.nn.quantized.dynamic``.

The classes are ``lucid.ao.nn.quantized.dynamic``'s own objects (no copies), so both spellings name
the same layer.

Not in Lucid (so not here): ``Conv1d``, ``Conv2d``, ``Conv3d``, ``ConvTranspose1d``,
``ConvTranspose2d``, ``ConvTranspose3d``.

Examples
--------
>>> import lucid
>>> from lucid.nn.quantized.dynamic import GRU
>>> import lucid.ao.nn.quantized.dynamic
>>> GRU is lucid.ao.nn.quantized.dynamic.GRU
True
"""
from __future__ import annotations

from lucid.ao.nn.quantized.dynamic import GRU, GRUCell, LSTM, LSTMCell, Linear, RNNCell
from . import modules

__all__ = [
    "GRU", "GRUCell", "LSTM", "LSTMCell", "Linear", "RNNCell", "modules"
]
