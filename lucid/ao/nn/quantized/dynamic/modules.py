"""``DynamicQuantizedLinear``, ``DynamicQuantizedLSTM`` and ``DynamicQuantizedGRU`` (PyTorch's
``torch.ao.nn.quantized.dynamic.Linear``/``LSTM``/``GRU``): int8 weights, activations quantized on every
call (NOTE [Dynamic quantized linear]), float32 outputs.

The quantized weights live in plain attributes, not parameters (nothing here trains); the
state dict carries them under PyTorch's keys (``_packed_params._packed_params`` = (weight,
bias) for Linear, held by its ``LinearPackedParams`` submodule as in PyTorch;
``_all_weight_values.<i>.param`` for LSTM/GRU) through ``_save_to_state_dict`` and a load
pre-hook.
"""
from __future__ import annotations

import lucid
from lucid import nn
from lucid._core.quantized import QuantizedTensor, quantize_per_channel, quantize_per_tensor

from .._dynamic_ops import linear_dynamic, weight_operands

__all__ = ["LinearPackedParams", "Linear", "LinearReLU", "LSTM", "GRU"]

_DTYPES = (lucid.qint8, lucid.float16)


def _quantize_weight(weight, observer):
    """The weight quantized with ``observer``'s parameters (PyTorch's ``_quantize_weight``)."""
    scale, zero_point = observer.calculate_qparams()
    weight = weight.detach().float()
    if observer.qscheme in (lucid.per_tensor_symmetric, lucid.per_tensor_affine):
        return quantize_per_tensor(weight, float(scale), int(zero_point), lucid.qint8)
    if observer.qscheme in (lucid.per_channel_symmetric, lucid.per_channel_affine):
        return quantize_per_channel(weight, scale.double(), zero_point.long(), observer.ch_axis, lucid.qint8)
    if observer.qscheme == lucid.per_channel_affine_float_qparams:  # embedding rows: float zero points
        from ..embedding_ops import quantize_float_qparams

        return quantize_float_qparams(weight, scale.float(), zero_point.float(), observer.ch_axis, observer.dtype)
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
    """State-dict plumbing shared by the quantized modules with packed weights:
    ``_packed_state()`` names the non-tensor entries (written after the module's own tensors,
    before its children's, as PyTorch's ``_save_to_state_dict``), ``_unpack_state`` takes them
    back."""

    def __init__(self):
        super().__init__()
        self.register_load_state_dict_pre_hook(_load_packed)

    def _save_to_state_dict(self, destination, prefix, keep_vars):
        super()._save_to_state_dict(destination, prefix, keep_vars)
        for k, v in self._packed_state().items():
            destination[prefix + k] = v

    def __repr__(self):
        # as PyTorch's _hide_packed_params_repr: the packed weights are not shown as a child
        children = [(k, m) for k, m in self._modules.items() if not isinstance(m, LinearPackedParams)]
        if len(children) == len(self._modules):
            return super().__repr__()
        extra = self.extra_repr()
        lines = extra.split("\n") if extra else []
        for key, m in children:
            lines.append(f"({key}): " + "\n  ".join(repr(m).split("\n")))
        if len(lines) == 1 and not children:
            return f"{self._get_name()}({lines[0]})"
        return self._get_name() + "(" + ("\n  " + "\n  ".join(lines) + "\n" if lines else "") + ")"


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


class LinearPackedParams(_Dynamic):
    """The (weight, bias) pair of a quantized linear layer as a submodule named
    ``_packed_params`` (PyTorch's ``LinearPackedParams``): its state-dict entries are ``dtype``
    and ``_packed_params`` = (weight, bias); ``forward`` is the identity.

    Examples
    --------
    >>> import lucid
    >>> from lucid.ao.nn.quantized.dynamic.modules import LinearPackedParams
    >>> p = LinearPackedParams()
    >>> list(p.state_dict())
    ['dtype', '_packed_params']
    """

    _version = 3

    def __init__(self, dtype=lucid.qint8):
        super().__init__()
        if dtype not in _DTYPES:
            raise RuntimeError(f"LinearPackedParams: unsupported dtype {dtype} (qint8 or float16)")
        self.dtype = dtype
        w = lucid.zeros(1, 1)
        self.set_weight_bias(quantize_per_tensor(w, 1.0, 0, lucid.qint8) if dtype == lucid.qint8 else w.half(),
                             None)

    def set_weight_bias(self, weight, bias):
        self._weight, self._bias = weight, (None if bias is None else bias.detach().float())
        self._ops = None  # the dynamic linear's integer operands, made on first use

    def _weight_bias(self):
        return self._weight, self._bias

    def _operands(self):
        if self._ops is None:
            self._ops = weight_operands(self._weight)
        return self._ops

    def forward(self, x):
        return x

    def __repr__(self):
        return repr(self._weight_bias())

    def _packed_state(self):
        return {"dtype": self.dtype, "_packed_params": self._weight_bias()}

    def _unpack_state(self, found):
        if "dtype" in found:
            self.dtype = found["dtype"]
        if "_packed_params" in found:
            self.set_weight_bias(*found["_packed_params"])


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
        self.in_features, self.out_features = in_features, out_features
        w = lucid.zeros(out_features, in_features)
        w = quantize_per_tensor(w, 1.0, 0, lucid.qint8) if dtype == lucid.qint8 else w.half()
        self._packed_params = LinearPackedParams(dtype)
        self.set_weight_bias(w, lucid.zeros(out_features) if bias_ else None)
        self.scale, self.zero_point = 1.0, 0

    @property
    def dtype(self):
        return self._packed_params.dtype

    def _get_name(self):
        return "DynamicQuantizedLinear"

    def extra_repr(self):
        s = f"in_features={self.in_features}, out_features={self.out_features}, dtype={self.dtype}"
        if self.dtype == lucid.qint8:
            s += f", qscheme={self.weight().qscheme()}"
        return s

    # the pair lives in the LinearPackedParams child; these keep the old attribute names readable
    _weight = property(lambda self: self._packed_params._weight)
    _bias = property(lambda self: self._packed_params._bias)

    def weight(self):
        return self._packed_params._weight

    def bias(self):
        return self._packed_params._bias

    def set_weight_bias(self, w, b):
        if self.dtype == lucid.qint8 and not isinstance(w, QuantizedTensor):
            raise TypeError("set_weight_bias: a qint8 dynamic Linear takes a quantized weight")
        if tuple(w.shape) != (self.out_features, self.in_features):
            raise ValueError(f"set_weight_bias: expected a weight of shape {(self.out_features, self.in_features)}, "
                             f"got {tuple(w.shape)}")
        self._packed_params.set_weight_bias(w, b)

    def forward(self, x):
        w, b = self._packed_params._weight_bias()
        if self.dtype == lucid.float16:
            return nn.functional.linear(x, w.float(), b)
        if x.shape[-1] != self.in_features:
            raise RuntimeError(f"DynamicQuantizedLinear: expected {self.in_features} input features, "
                               f"got input of shape {tuple(x.shape)}")
        return linear_dynamic(x, w, b, reduce_range=True, operands=self._packed_params._operands())

    def _packed_state(self):
        return {"scale": lucid.tensor(self.scale), "zero_point": lucid.tensor(self.zero_point)}

    def _unpack_state(self, found):
        if "scale" in found:
            self.scale = float(found["scale"])
        if "zero_point" in found:
            self.zero_point = int(found["zero_point"])

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


class _RNNBase(_Dynamic):
    """The multi-layer recurrent layers whose gate products run as dynamic quantized linears
    (PyTorch's ``DynamicQuantizedLSTM``/``GRU``): the input projection of each layer and
    direction is computed for the whole sequence at once (one quantization range, as
    PyTorch's CPU path), the hidden one at every step; gate nonlinearities in float32."""

    _version = 2
    _MODE = ""
    _GATES = 1

    def __init__(self, input_size, hidden_size, num_layers=1, bias=True, batch_first=False, dropout=0.0,
                 bidirectional=False, dtype=lucid.qint8):
        super().__init__()
        if dtype not in _DTYPES:
            raise RuntimeError(f"{self._MODE}: unsupported dtype {dtype} for dynamic quantization (qint8 or float16)")
        if not 0 <= dropout <= 1:
            raise ValueError("dropout should be a number in range [0, 1] representing the probability of an "
                             "element being zeroed")
        self.mode, self.input_size, self.hidden_size = self._MODE, input_size, hidden_size
        self.num_layers, self.bias, self.batch_first = num_layers, bias, batch_first
        self.dropout, self.bidirectional, self.dtype = float(dropout), bidirectional, dtype
        self.version = 2
        self.training = False
        dirs = 2 if bidirectional else 1
        g = self._GATES * hidden_size
        self._cells = []
        for layer in range(num_layers):
            n_in = input_size if layer == 0 else hidden_size * dirs
            for _ in range(dirs):
                w_ih, w_hh = lucid.randn(g, n_in), lucid.randn(g, hidden_size)
                if dtype == lucid.qint8:
                    w_ih, w_hh = (quantize_per_tensor(w, 0.1, 0, lucid.qint8) for w in (w_ih, w_hh))
                else:
                    w_ih, w_hh = w_ih.half(), w_hh.half()
                self._cells.append(self._cell(w_ih, w_hh, lucid.randn(g), lucid.randn(g)))

    def _cell(self, w_ih, w_hh, b_ih, b_hh):
        ops = (weight_operands(w_ih), weight_operands(w_hh)) if self.dtype == lucid.qint8 else (None, None)
        return {"w_ih": w_ih, "w_hh": w_hh, "b_ih": b_ih.detach().float(), "b_hh": b_hh.detach().float(),
                "ops": ops}

    def _get_name(self):
        return "DynamicQuantized" + self._MODE

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

    def _direction(self, x, state, cell, reverse):
        gi = self._linear(x, cell, "ih")  # the whole sequence: one input range
        steps = range(x.shape[0] - 1, -1, -1) if reverse else range(x.shape[0])
        outs = [None] * x.shape[0]
        for t in steps:
            state = self._step(gi[t], self._linear(state[0], cell, "hh"), state)
            outs[t] = state[0]
        return lucid.stack(outs, 0), state

    def _hidden(self, x, hx, unbatched, name):
        """The initial states as a tuple of ``(layers * dirs, N, H)`` tensors."""
        dirs = 2 if self.bidirectional else 1
        shape = (self.num_layers * dirs, x.shape[1], self.hidden_size)
        n = 2 if self._MODE == "LSTM" else 1
        if hx is None:
            return (lucid.zeros(*shape, device=x.device),) * n
        hx = tuple(hx) if n == 2 else (hx,)
        if unbatched:
            hx = tuple(h.unsqueeze(1) for h in hx)
        for h in hx:
            if tuple(h.shape) != shape:
                raise RuntimeError(f"{name}: expected hidden size {shape}, got {tuple(h.shape)}")
        return hx

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
        h0 = self._hidden(x, hx, unbatched, name)
        finals = []
        for layer in range(self.num_layers):
            outs = []
            for d in range(dirs):
                k = layer * dirs + d
                out, state = self._direction(x, tuple(h[k] for h in h0), self._cells[k], bool(d))
                outs.append(out)
                finals.append(state)
            x = outs[0] if dirs == 1 else lucid.cat(outs, -1)
        hn = tuple(lucid.stack([s[i] for s in finals], 0) for i in range(len(h0)))
        if unbatched:
            x, hn = x.squeeze(1), tuple(h.squeeze(1) for h in hn)
        elif self.batch_first:
            x = x.transpose(0, 1)
        return x, (hn if len(hn) == 2 else hn[0])

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
                raise ValueError(f"unexpected packed {self._MODE} cell {key}")
            old = self._cells[k]
            if tuple(value[0].shape) != tuple(old["w_ih"].shape) or tuple(value[1].shape) != tuple(old["w_hh"].shape):
                raise ValueError(f"{key}: weight shapes do not match")
            self._cells[k] = self._cell(*value)

    @classmethod
    def from_float(cls, mod, use_precomputed_fake_quant=False):
        """The dynamic quantized form of an ``nn.LSTM``/``nn.GRU`` (biases required, as PyTorch's)."""
        if type(mod) is not getattr(nn, cls._MODE):
            raise AssertionError("nn.quantized.dynamic.RNNBase.from_float only works for nn.LSTM and nn.GRU")
        if getattr(mod, "proj_size", 0):
            raise NotImplementedError(f"{cls._MODE}.from_float: proj_size is not supported by dynamic quantization")
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


def _lstm_step(gi, gh, state):
    # PyTorch's LSTMCell: gates = linear_hh(h) + linear_ih(x), chunked (i, f, g, o)
    i, f, g, o = (gh + gi).chunk(4, 1)
    c = lucid.sigmoid(f) * state[1] + lucid.sigmoid(i) * lucid.tanh(g)
    return lucid.sigmoid(o) * lucid.tanh(c), c


def _gru_step(gi, gh, state):
    # PyTorch's GRUCell: the reset gate scales the hidden product (bias included) of the new gate
    ir, iz, i_n = gi.chunk(3, 1)
    hr, hz, h_n = gh.chunk(3, 1)
    r, z = lucid.sigmoid(hr + ir), lucid.sigmoid(hz + iz)
    n = lucid.tanh(i_n + h_n * r)
    return ((state[0] - n) * z + n,)


class LSTM(_RNNBase):
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

    _MODE, _GATES = "LSTM", 4

    @staticmethod
    def _step(gi, gh, state):
        return _lstm_step(gi, gh, state)


class GRU(_RNNBase):
    """A multi-layer GRU whose three gate products run as dynamic quantized linears (PyTorch's
    ``DynamicQuantizedGRU``), computed as :class:`LSTM` is; ``forward(input, hx)`` returns
    ``(output, h_n)``.

    Examples
    --------
    >>> import lucid, lucid.nn as nn
    >>> from lucid.ao.nn.quantized.dynamic import GRU
    >>> q = GRU.from_float(nn.GRU(3, 4, num_layers=2))
    >>> q
    DynamicQuantizedGRU(3, 4, num_layers=2)
    >>> out, h = q(lucid.zeros(5, 2, 3))
    >>> out.shape, h.shape
    ((5, 2, 4), (2, 2, 4))
    """

    _MODE, _GATES = "GRU", 3

    @staticmethod
    def _step(gi, gh, state):
        return _gru_step(gi, gh, state)
