"""``DynamicQuantizedRNNCell``/``LSTMCell``/``GRUCell`` (PyTorch's
``torch.ao.nn.quantized.dynamic.RNNCell``...): one recurrent step whose two gate products are
dynamic quantized linears (NOTE [Dynamic quantized linear]); each call quantizes its input and
its hidden state with their own ranges, as PyTorch's ``quantized_*_cell_dynamic`` kernels.

The state dict carries ``_packed_weight_ih``/``_packed_weight_hh`` as (weight, bias) pairs, under
PyTorch's keys.
"""
from __future__ import annotations

import lucid
from lucid import nn
from lucid._core.quantized import quantize_per_tensor

from .._dynamic_ops import linear_dynamic, weight_operands
from .modules import _DTYPES, _Dynamic, _gru_step, _lstm_step, _pack, _weight_observer

__all__ = ["RNNCell", "LSTMCell", "GRUCell"]


class _RNNCellBase(_Dynamic):
    _CHUNKS = 1

    def __init__(self, input_size, hidden_size, bias=True, dtype=lucid.qint8):
        super().__init__()
        if dtype not in _DTYPES:
            raise RuntimeError(f"Unsupported dtype for dynamic RNN quantization: {dtype}")
        self.input_size, self.hidden_size, self.bias, self.weight_dtype = input_size, hidden_size, bias, dtype
        g = self._CHUNKS * hidden_size
        w_ih, w_hh = lucid.randn(g, input_size), lucid.randn(g, hidden_size)
        if dtype == lucid.qint8:
            w_ih, w_hh = (quantize_per_tensor(w, 1.0, 0, lucid.qint8) for w in (w_ih, w_hh))
        self._set(w_ih, w_hh, lucid.randn(g) if bias else None, lucid.randn(g) if bias else None)

    def _set(self, w_ih, w_hh, b_ih, b_hh):
        f32 = (lambda b: None if b is None else b.detach().float())
        if self.weight_dtype == lucid.float16:
            w_ih, w_hh = w_ih.detach().half(), w_hh.detach().half()
        self._w_ih, self._w_hh, self.bias_ih, self.bias_hh = w_ih, w_hh, f32(b_ih), f32(b_hh)
        self._ops = ((weight_operands(w_ih), weight_operands(w_hh)) if self.weight_dtype == lucid.qint8
                     else (None, None))

    def _get_name(self):
        return "DynamicQuantizedRNNBase"

    def extra_repr(self):
        s = f"{self.input_size}, {self.hidden_size}"
        if self.bias is not True:
            s += f", bias={self.bias}"
        if getattr(self, "nonlinearity", "tanh") != "tanh":
            s += f", nonlinearity={self.nonlinearity}"
        return s

    def _linear(self, x, which):
        w, b = (self._w_ih, self.bias_ih) if which == "ih" else (self._w_hh, self.bias_hh)
        if self.weight_dtype == lucid.float16:
            return nn.functional.linear(x, w.float(), b)
        return linear_dynamic(x, w, b, reduce_range=True, operands=self._ops[which == "hh"])

    def _check(self, input, hx, label):
        if input.ndim != 2:
            raise IndexError(f"{self._get_name()}: expected a 2-D input (batch, input_size), got shape "
                             f"{tuple(input.shape)}")
        if input.shape[1] != self.input_size:
            raise RuntimeError(f"input has inconsistent input_size: got {input.shape[1]}, expected {self.input_size}")
        if hx is not None:
            if hx.ndim != 2 or hx.shape[0] != input.shape[0]:
                raise RuntimeError(f"Input batch size {input.shape[0]} doesn't match hidden{label} batch size "
                                   f"{hx.shape[0] if hx.ndim else 0}")
            if hx.shape[1] != self.hidden_size:
                raise RuntimeError(f"hidden{label} has inconsistent hidden_size: got {hx.shape[1]}, expected "
                                   f"{self.hidden_size}")

    def _zeros(self, input):
        return lucid.zeros(input.shape[0], self.hidden_size, dtype=input.dtype, device=input.device)

    def _weight_bias(self):
        return {"weight": {"weight_ih": self._w_ih, "weight_hh": self._w_hh},
                "bias": {"bias_ih": self.bias_ih, "bias_hh": self.bias_hh}}

    def get_weight(self):
        return self._weight_bias()["weight"]

    def get_bias(self):
        return self._weight_bias()["bias"]

    def set_weight_bias(self, weight_bias_dict):
        w, b = weight_bias_dict["weight"], weight_bias_dict["bias"]
        self._set(w["weight_ih"], w["weight_hh"], b["bias_ih"], b["bias_hh"])

    def _packed_state(self):
        return {"_packed_weight_ih": (self._w_ih, self.bias_ih), "_packed_weight_hh": (self._w_hh, self.bias_hh)}

    def _unpack_state(self, found):
        w_ih, b_ih = found.get("_packed_weight_ih", (self._w_ih, self.bias_ih))
        w_hh, b_hh = found.get("_packed_weight_hh", (self._w_hh, self.bias_hh))
        if tuple(w_ih.shape) != tuple(self._w_ih.shape) or tuple(w_hh.shape) != tuple(self._w_hh.shape):
            raise ValueError("packed cell weight shapes do not match")
        self._set(w_ih, w_hh, b_ih, b_hh)

    @classmethod
    def from_float(cls, mod, use_precomputed_fake_quant=False):
        """The dynamic quantized form of an ``nn.LSTMCell``/``nn.GRUCell``/``nn.RNNCell``."""
        if type(mod) not in (nn.LSTMCell, nn.GRUCell, nn.RNNCell):
            raise AssertionError("nn.quantized.dynamic.RNNCellBase.from_float only works for nn.LSTMCell, "
                                 "nn.GRUCell and nn.RNNCell")
        factory = _weight_observer(mod)
        dtype = factory().dtype
        if dtype not in _DTYPES:
            raise RuntimeError(f"Unsupported dtype for dynamic RNN quantization: {dtype}")
        target = {nn.LSTMCell: LSTMCell, nn.GRUCell: GRUCell, nn.RNNCell: RNNCell}[type(mod)]
        extra = {"nonlinearity": mod.nonlinearity} if target is RNNCell else {}
        q = target(mod.input_size, mod.hidden_size, bias=mod.bias, dtype=dtype, **extra)
        if not mod.bias:
            raise AssertionError("mod.bias must be True")
        q._set(_pack(mod.weight_ih, factory, dtype), _pack(mod.weight_hh, factory, dtype), mod.bias_ih,
               mod.bias_hh)
        return q


class RNNCell(_RNNCellBase):
    """An Elman RNN cell (tanh or relu) with dynamically quantized weights (PyTorch's
    ``DynamicQuantizedRNNCell``); input ``(N, H_in)``, returns ``h'`` ``(N, H)``.

    Examples
    --------
    >>> import lucid, lucid.nn as nn
    >>> from lucid.ao.nn.quantized.dynamic import RNNCell
    >>> q = RNNCell.from_float(nn.RNNCell(3, 4, nonlinearity="relu"))
    >>> q
    DynamicQuantizedRNNCell(3, 4, nonlinearity=relu)
    >>> q(lucid.ones(2, 3)).shape
    (2, 4)
    """

    _CHUNKS = 1

    def __init__(self, input_size, hidden_size, bias=True, nonlinearity="tanh", dtype=lucid.qint8):
        super().__init__(input_size, hidden_size, bias, dtype)
        self.nonlinearity = nonlinearity

    def _get_name(self):
        return "DynamicQuantizedRNNCell"

    def forward(self, input, hx=None):
        self._check(input, hx, "")
        hx = self._zeros(input) if hx is None else hx
        if self.nonlinearity not in ("tanh", "relu"):
            raise RuntimeError(f"Unknown nonlinearity: {self.nonlinearity}")
        pre = self._linear(hx, "hh") + self._linear(input, "ih")
        return lucid.tanh(pre) if self.nonlinearity == "tanh" else nn.functional.relu(pre)


class LSTMCell(_RNNCellBase):
    """An LSTM cell with dynamically quantized weights (PyTorch's ``DynamicQuantizedLSTMCell``);
    ``forward(input, (h, c))`` returns ``(h', c')``.

    Examples
    --------
    >>> import lucid, lucid.nn as nn
    >>> from lucid.ao.nn.quantized.dynamic import LSTMCell
    >>> q = LSTMCell.from_float(nn.LSTMCell(3, 4))
    >>> h, c = q(lucid.ones(2, 3))
    >>> h.shape, c.shape
    ((2, 4), (2, 4))
    """

    _CHUNKS = 4

    def _get_name(self):
        return "DynamicQuantizedLSTMCell"

    def forward(self, input, hx=None):
        self._check(input, None, "")
        if hx is None:
            hx = (self._zeros(input),) * 2
        self._check(input, hx[0], "[0]")
        self._check(input, hx[1], "[1]")
        return _lstm_step(self._linear(input, "ih"), self._linear(hx[0], "hh"), tuple(hx))


class GRUCell(_RNNCellBase):
    """A GRU cell with dynamically quantized weights (PyTorch's ``DynamicQuantizedGRUCell``);
    input ``(N, H_in)``, returns ``h'`` ``(N, H)``.

    Examples
    --------
    >>> import lucid, lucid.nn as nn
    >>> from lucid.ao.nn.quantized.dynamic import GRUCell
    >>> q = GRUCell.from_float(nn.GRUCell(3, 4))
    >>> q
    DynamicQuantizedGRUCell(3, 4)
    >>> q(lucid.ones(2, 3)).shape
    (2, 4)
    """

    _CHUNKS = 3

    def _get_name(self):
        return "DynamicQuantizedGRUCell"

    def forward(self, input, hx=None):
        self._check(input, hx, "")
        hx = self._zeros(input) if hx is None else hx
        return _gru_step(self._linear(input, "ih"), self._linear(hx, "hh"), (hx,))[0]
