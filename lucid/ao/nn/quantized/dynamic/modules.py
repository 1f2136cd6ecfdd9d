"""``DynamicQuantizedLinear`` and ``DynamicQuantizedLSTM`` (PyTorch's
``torch.ao.nn.quantized.dynamic.Linear``/``LSTM``): int8 weights, activations quantized on every
call (NOTE [Dynamic quantized linear]), float32 outputs.

The quantized weights live in plain attributes, not parameters (nothing here trains); the
state dict carries them under PyTorch's keys (``_packed_params._packed_params`` = (weight,
bias) for Linear, ``_all_weight_values.<i>.param`` for LSTM) through state-dict hooks.
"""
from __future__ import annotations

import lucid
from lucid import nn
from lucid._core.quantized import QuantizedTensor, quantize_per_channel, quantize_per_tensor

from .._dynamic_ops import linear_dynamic, weight_operands

__all__ = ["Linear", "LSTM"]

_DTYPES = (lucid.qint8, lucid.float16)


def _quantize_weight(weight, observer):
    """The weight quantized with ``observer``'s parameters (PyTorch's ``_quantize_weight``)."""
    scale, zero_point = observer.calculate_qparams()
    weight = weight.detach().float()
    if observer.qscheme in (lucid.per_tensor_symmetric, lucid.per_tensor_affine):
        return quantize_per_tensor(weight, float(scale), int(zero_point), lucid.qint8)
    if observer.qscheme in (lucid.per_channel_symmetric, lucid.per_channel_affine):
        return quantize_per_channel(weight, scale.double(), zero_point.long(), observer.ch_axis, lucid.qint8)
    raise ValueError(f"quantize weight: unsupported qscheme {observer.qscheme}")


def _weight_observer(mod):
    qconfig = getattr(mod, "qconfig", None)
    if qconfig is not None and qconfig.weight is not None:
        return qconfig.weight
    from lucid.ao.quantization.qconfig import default_dynamic_qconfig

    return default_dynamic_qconfig.weight


def _pack(weight, observer_factory, dtype):
    if dtype == lucid.float16:
        return weight.detach().half()
    obs = observer_factory()
    obs(weight)
    return _quantize_weight(weight, obs)


class _Dynamic(nn.Module):
    """State-dict plumbing shared by the dynamic modules: ``_packed_state()`` names the
    non-tensor entries, ``_unpack_state`` takes them back."""

    def __init__(self):
        super().__init__()
        self.register_state_dict_post_hook(_save_packed)
        self.register_load_state_dict_pre_hook(_load_packed)


def _save_packed(module, destination, prefix, local_metadata):
    for k, v in module._packed_state().items():
        destination[prefix + k] = v


def _load_packed(module, state_dict, prefix, local_metadata, strict, missing, unexpected, errors):
    found = {}
    for k in module._packed_state():
        if prefix + k in state_dict:
            found[k] = state_dict.pop(prefix + k)
        else:
            missing.append(prefix + k)
    try:
        module._unpack_state(found)
    except (TypeError, ValueError, RuntimeError) as e:
        errors.append(f"While copying the packed parameters of {prefix or 'the module'}: {e}")


class Linear(_Dynamic):
    """A linear layer with int8 weights whose input is quantized on every call (PyTorch's
    ``DynamicQuantizedLinear``); made by :func:`lucid.ao.quantization.quantize_dynamic` or
    :meth:`from_float`.

    Examples
    --------
    >>> import lucid, lucid.nn as nn
    >>> from lucid.ao.nn.quantized.dynamic import Linear
    >>> _ = lucid.manual_seed(0)
    >>> q = Linear.from_float(nn.Linear(4, 2))
    >>> q
    DynamicQuantizedLinear(in_features=4, out_features=2, dtype=lucid.qint8, qscheme=lucid.per_tensor_affine)
    >>> q(lucid.ones(3, 4)).shape
    (3, 2)
    """

    _version = 4

    def __init__(self, in_features, out_features, bias_=True, dtype=lucid.qint8):
        super().__init__()
        if dtype not in _DTYPES:
            raise RuntimeError(f"Linear: unsupported dtype {dtype} for dynamic quantization (qint8 or float16)")
        self.in_features, self.out_features, self.dtype = in_features, out_features, dtype
        w = lucid.zeros(out_features, in_features)
        w = quantize_per_tensor(w, 1.0, 0, lucid.qint8) if dtype == lucid.qint8 else w.half()
        self.set_weight_bias(w, lucid.zeros(out_features) if bias_ else None)
        self.scale, self.zero_point = 1.0, 0

    def _get_name(self):
        return "DynamicQuantizedLinear"

    def extra_repr(self):
        s = f"in_features={self.in_features}, out_features={self.out_features}, dtype={self.dtype}"
        if self.dtype == lucid.qint8:
            s += f", qscheme={self.weight().qscheme()}"
        return s

    def weight(self):
        return self._weight

    def bias(self):
        return self._bias

    def set_weight_bias(self, w, b):
        if self.dtype == lucid.qint8 and not isinstance(w, QuantizedTensor):
            raise TypeError("set_weight_bias: a qint8 dynamic Linear takes a quantized weight")
        if tuple(w.shape) != (self.out_features, self.in_features):
            raise ValueError(f"set_weight_bias: expected a weight of shape {(self.out_features, self.in_features)}, "
                             f"got {tuple(w.shape)}")
        self._weight = w
        self._bias = None if b is None else b.detach().float()
        self._operands = weight_operands(w) if self.dtype == lucid.qint8 else None

    def forward(self, x):
        if self.dtype == lucid.float16:
            return nn.functional.linear(x, self._weight.float(), self._bias)
        if x.shape[-1] != self.in_features:
            raise RuntimeError(f"DynamicQuantizedLinear: expected {self.in_features} input features, "
                               f"got input of shape {tuple(x.shape)}")
        return linear_dynamic(x, self._weight, self._bias, reduce_range=True, operands=self._operands)

    def _packed_state(self):
        return {"scale": lucid.tensor(self.scale), "zero_point": lucid.tensor(self.zero_point),
                "_packed_params.dtype": self.dtype, "_packed_params._packed_params": (self._weight, self._bias)}

    def _unpack_state(self, found):
        if "_packed_params.dtype" in found:
            self.dtype = found["_packed_params.dtype"]
        if "_packed_params._packed_params" in found:
            w, b = found["_packed_params._packed_params"]
            self.set_weight_bias(w, b)

    @classmethod
    def from_float(cls, mod, use_precomputed_fake_quant=False):
        """The dynamic quantized form of an ``nn.Linear`` (weights observed by the qconfig's
        weight observer, ``default_dynamic_qconfig``'s if it has none)."""
        if not isinstance(mod, nn.Linear):
            raise AssertionError(f"nn.quantized.dynamic.Linear.from_float only works for nn.Linear, got "
                                 f"{type(mod).__name__}")
        factory = _weight_observer(mod)
        dtype = factory().dtype
        if dtype not in _DTYPES:
            raise AssertionError(f"The only supported dtypes for dynamic quantized linear are qint8 and float16 "
                                 f"got: {dtype}")
        q = cls(mod.in_features, mod.out_features, dtype=dtype)
        q.set_weight_bias(_pack(mod.weight, factory, dtype), mod.bias)
        return q


class LinearReLU(Linear):
    """A dynamically quantized Linear followed by ReLU (PyTorch's ``nniqd.LinearReLU``): what
    dynamic quantization makes of a fused ``LinearReLU``."""

    def _get_name(self):
        return "DynamicQuantizedLinearReLU"

    def forward(self, x):
        return nn.functional.relu(super().forward(x))

    @classmethod
    def from_float(cls, mod, use_precomputed_fake_quant=False):
        linear = mod[0]
        linear.qconfig = getattr(mod, "qconfig", None)
        try:
            return super().from_float(linear)
        finally:
            del linear.qconfig


class LSTM(_Dynamic):
    """A multi-layer LSTM whose four gate products run as dynamic quantized linears (PyTorch's
    ``DynamicQuantizedLSTM``): the input projection of each layer and direction is computed
    for the whole sequence at once (one quantization range, as PyTorch's CPU path), the
    hidden one at every step; gate nonlinearities in float32.

    Inputs are tensors ``(L, N, H_in)`` (``(N, L, H_in)`` with ``batch_first``) or unbatched
    ``(L, H_in)``; it runs in eval mode (no dropout), as PyTorch's does.

    Examples
    --------
    >>> import lucid, lucid.nn as nn
    >>> from lucid.ao.nn.quantized.dynamic import LSTM
    >>> q = LSTM.from_float(nn.LSTM(3, 4))
    >>> q
    DynamicQuantizedLSTM(3, 4)
    >>> out, (h, c) = q(lucid.zeros(5, 2, 3))
    >>> out.shape, h.shape
    ((5, 2, 4), (1, 2, 4))
    """

    _version = 2

    def __init__(self, input_size, hidden_size, num_layers=1, bias=True, batch_first=False, dropout=0.0,
                 bidirectional=False, dtype=lucid.qint8):
        super().__init__()
        if dtype not in _DTYPES:
            raise RuntimeError(f"LSTM: unsupported dtype {dtype} for dynamic quantization (qint8 or float16)")
        if not 0 <= dropout <= 1:
            raise ValueError("dropout should be a number in range [0, 1] representing the probability of an "
                             "element being zeroed")
        self.mode, self.input_size, self.hidden_size = "LSTM", input_size, hidden_size
        self.num_layers, self.bias, self.batch_first = num_layers, bias, batch_first
        self.dropout, self.bidirectional, self.dtype = float(dropout), bidirectional, dtype
        self.version = 2
        self.training = False
        dirs = 2 if bidirectional else 1
        self._cells = []
        for layer in range(num_layers):
            n_in = input_size if layer == 0 else hidden_size * dirs
            for _ in range(dirs):
                w_ih, w_hh = lucid.randn(4 * hidden_size, n_in), lucid.randn(4 * hidden_size, hidden_size)
                if dtype == lucid.qint8:
                    w_ih, w_hh = (quantize_per_tensor(w, 0.1, 0, lucid.qint8) for w in (w_ih, w_hh))
                else:
                    w_ih, w_hh = w_ih.half(), w_hh.half()
                self._cells.append(self._cell(w_ih, w_hh, lucid.randn(4 * hidden_size),
                                              lucid.randn(4 * hidden_size)))

    def _cell(self, w_ih, w_hh, b_ih, b_hh):
        ops = (weight_operands(w_ih), weight_operands(w_hh)) if self.dtype == lucid.qint8 else (None, None)
        return {"w_ih": w_ih, "w_hh": w_hh, "b_ih": b_ih.detach().float(), "b_hh": b_hh.detach().float(),
                "ops": ops}

    def _get_name(self):
        return "DynamicQuantizedLSTM"

    def extra_repr(self):
        s = f"{self.input_size}, {self.hidden_size}"
        if self.num_layers != 1:
            s += f", num_layers={self.num_layers}"
        if self.bias is not True:
            s += f", bias={self.bias}"
        if self.batch_first:
            s += f", batch_first={self.batch_first}"
        if self.dropout != 0:
            s += f", dropout={self.dropout}"
        if self.bidirectional:
            s += f", bidirectional={self.bidirectional}"
        return s

    def _linear(self, x, cell, which):
        w, b = cell["w_" + which], cell["b_" + which]
        if self.dtype == lucid.float16:
            return nn.functional.linear(x, w.float(), b)
        return linear_dynamic(x, w, b, reduce_range=True, operands=cell["ops"][which == "hh"])

    def _direction(self, x, h, c, cell, reverse):
        gi = self._linear(x, cell, "ih")  # the whole sequence: one input range
        steps = range(x.shape[0] - 1, -1, -1) if reverse else range(x.shape[0])
        outs = [None] * x.shape[0]
        for t in steps:
            i, f, g, o = (self._linear(h, cell, "hh") + gi[t]).chunk(4, 1)
            c = lucid.sigmoid(f) * c + lucid.sigmoid(i) * lucid.tanh(g)
            h = lucid.sigmoid(o) * lucid.tanh(c)
            outs[t] = h
        return lucid.stack(outs, 0), h, c

    def forward(self, input, hx=None):
        name = self._get_name()
        if not isinstance(input, lucid.Tensor):
            raise NotImplementedError(f"{name}: only tensor inputs are supported (not packed sequences)")
        if input.ndim not in (2, 3):
            raise ValueError(f"{name}: expected a 2-D (unbatched) or 3-D input, got shape {tuple(input.shape)}")
        if input.shape[-1] != self.input_size:
            raise RuntimeError(f"{name}: input.size(-1) must be equal to input_size. Expected {self.input_size}, "
                               f"got {input.shape[-1]}")
        unbatched = input.ndim == 2
        x = input.unsqueeze(1) if unbatched else (input.transpose(0, 1) if self.batch_first else input)
        dirs = 2 if self.bidirectional else 1
        shape = (self.num_layers * dirs, x.shape[1], self.hidden_size)
        if hx is None:
            h0 = c0 = lucid.zeros(*shape, device=x.device)
        else:
            h0, c0 = (h.unsqueeze(1) for h in hx) if unbatched else hx
            if tuple(h0.shape) != shape or tuple(c0.shape) != shape:
                raise RuntimeError(f"{name}: expected hidden size {shape}, got {tuple(h0.shape)}, {tuple(c0.shape)}")
        hs, cs = [], []
        for layer in range(self.num_layers):
            outs = []
            for d in range(dirs):
                k = layer * dirs + d
                out, h, c = self._direction(x, h0[k], c0[k], self._cells[k], bool(d))
                outs.append(out)
                hs.append(h)
                cs.append(c)
            x = outs[0] if dirs == 1 else lucid.cat(outs, -1)
        h_n, c_n = lucid.stack(hs, 0), lucid.stack(cs, 0)
        if unbatched:
            return x.squeeze(1), (h_n.squeeze(1), c_n.squeeze(1))
        return (x.transpose(0, 1) if self.batch_first else x), (h_n, c_n)

    def _weight_bias(self):
        """``{"weight": {name: w}, "bias": {name: b}}`` with PyTorch's parameter names."""
        out = {"weight": {}, "bias": {}}
        dirs = 2 if self.bidirectional else 1
        for k, cell in enumerate(self._cells):
            sfx = f"_l{k // dirs}" + ("_reverse" if k % dirs else "")
            out["weight"]["weight_ih" + sfx], out["weight"]["weight_hh" + sfx] = cell["w_ih"], cell["w_hh"]
            out["bias"]["bias_ih" + sfx], out["bias"]["bias_hh" + sfx] = cell["b_ih"], cell["b_hh"]
        return out

    def get_weight(self):
        return self._weight_bias()["weight"]

    def get_bias(self):
        return self._weight_bias()["bias"]

    def _packed_state(self):
        return {f"_all_weight_values.{k}.param": (c["w_ih"], c["w_hh"], c["b_ih"], c["b_hh"])
                for k, c in enumerate(self._cells)}

    def _unpack_state(self, found):
        for key, value in found.items():
            k = int(key.split(".")[1])
            if k >= len(self._cells) or len(value) != 4:
                raise ValueError(f"unexpected packed LSTM cell {key}")
            old = self._cells[k]
            if tuple(value[0].shape) != tuple(old["w_ih"].shape) or tuple(value[1].shape) != tuple(old["w_hh"].shape):
                raise ValueError(f"{key}: weight shapes do not match")
            self._cells[k] = self._cell(*value)

    @classmethod
    def from_float(cls, mod, use_precomputed_fake_quant=False):
        """The dynamic quantized form of an ``nn.LSTM`` (biases required, as PyTorch's)."""
        if type(mod) is not nn.LSTM:
            raise AssertionError("nn.quantized.dynamic.RNNBase.from_float only works for nn.LSTM and nn.GRU")
        if getattr(mod, "proj_size", 0):
            raise NotImplementedError("LSTM.from_float: proj_size is not supported by dynamic quantization")
        factory = _weight_observer(mod)
        dtype = factory().dtype
        if dtype not in _DTYPES:
            raise RuntimeError(f"Unsupported dtype for dynamic RNN quantization: {dtype}")
        if not mod.bias:
            raise AssertionError("mod.bias must be True")
        q = cls(mod.input_size, mod.hidden_size, mod.num_layers, mod.bias, mod.batch_first, mod.dropout,
                mod.bidirectional, dtype)
        dirs = 2 if mod.bidirectional else 1
        q._cells = []
        for layer in range(mod.num_layers):
            for d in range(dirs):
                sfx = f"_l{layer}" + ("_reverse" if d else "")
                get = lambda n: getattr(mod, n + sfx)  # noqa: E731
                w_ih, w_hh = (_pack(get(n), factory, dtype) for n in ("weight_ih", "weight_hh"))
                q._cells.append(q._cell(w_ih, w_hh, get("bias_ih"), get("bias_hh")))
        return q
