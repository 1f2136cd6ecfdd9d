"""``lucid.nn.quantizable.modules`` (``torch.nn.quantizable.modules``):
PyTorch's legacy path for ``lucid.ao.nn.quantizable``.

The classes are ``lucid.ao.nn.quantizable``'s own objects (no copies), so both spellings name the
same layer.

Examples
--------
>>> import lucid
>>> from lucid.nn.quantizable.modules import LSTM
>>> import lucid.ao.nn.quantizable
>>> LSTM is lucid.ao.nn.quantizable.LSTM
True
"""
from __future__ import annotations

from lucid.ao.nn.quantizable import LSTM, LSTMCell, MultiheadAttention

__all__ = [
    "LSTM", "LSTMCell", "MultiheadAttention"
]
