"""Recurrent layers: ``RNN`` (tanh/relu), ``LSTM``, ``GRU`` and their single-step cells.

Parameter names (``weight_ih_l0``, ``weight_hh_l0_reverse``, ``bias_ih_l1`` ...), shapes,
gate orders and the ``U(-1/sqrt(H), 1/sqrt(H))`` initialisation follow PyTorch, so a
PyTorch ``state_dict`` loads as is. Inputs are (L, N, I), or (N, L, I) with
``batch_first=True``, or unbatched (L, I).
"""
from __future__ import annotations

import math
import numbers
import warnings

from . import functional as F
from . import init
from .functional.rnn import run_direction
from .module import Module
from .parameter import Parameter
from .._core.tensor import Tensor

__all__ = ["RNNBase", "RNN", "LSTM", "GRU", "RNNCellBase", "RNNCell", "LSTMCell", "GRUCell"]

_GATES = {"RNN_TANH": 1, "RNN_RELU": 1, "LSTM": 4, "GRU": 3}


def _lucid():
    import lucid

    return lucid


def _autocast_on():
    from ..amp.autocast_mode import _REGIONS  # any device type, as PyTorch's _is_any_autocast_enabled

    return any(_REGIONS.enabled.values())


def _check_sizes(name, input_size, hidden_size, bias, batch_first):
    """PyTorch's type checks: a float size would build odd shapes, a non-bool flag be read wrong."""
    for what, v, kind in (("bias", bias, bool), ("batch_first", batch_first, bool), ("input_size", input_size, int),
                          ("hidden_size", hidden_size, int)):
        if not isinstance(v, kind):
            raise TypeError(f"{name}: {what} should be of type {kind.__name__}, got: {type(v).__name__}")
    if input_size <= 0:
        raise ValueError(f"{name}: input_size must be greater than zero, got {input_size}")


def _no_proj_size(name, kwargs):
    """``RNN``/``GRU`` take ``**kwargs`` in PyTorch only to refuse ``proj_size`` by name."""
    if "proj_size" in kwargs:
        raise ValueError(f"{name}: proj_size argument is only supported for LSTM, not RNN or GRU")
    if kwargs:
        raise TypeError(f"{name}.__init__() got an unexpected keyword argument {next(iter(kwargs))!r}")


class RNNBase(Module):
    """Shared machinery of the multi-layer recurrent layers.

    Parameters
    ----------
    mode : str
        'RNN_TANH', 'RNN_RELU', 'LSTM' or 'GRU'.
    input_size : int
        Features of each input step.
    hidden_size : int
        Features of the hidden state.
    num_layers : int
        Stacked layers.
    bias : bool
        Learn the biases.
    batch_first : bool
        Inputs are (N, L, H_in) instead of (L, N, H_in).
    dropout : float
        Dropout between layers (training only).
    bidirectional : bool
        Run a second, reversed direction and concatenate.

    Examples
    --------
    >>> import lucid, lucid.nn as nn
    >>> nn.GRU(3, 4)(lucid.zeros(5, 2, 3))[0].shape
    (5, 2, 4)
    """

    def __init__(self, mode, input_size, hidden_size, num_layers=1, bias=True, batch_first=False,
                 dropout=0.0, bidirectional=False, proj_size=0, device=None, dtype=None):
        super().__init__()
        name = type(self).__name__
        _check_sizes(name, input_size, hidden_size, bias, batch_first)
        if isinstance(dropout, bool) or not isinstance(dropout, numbers.Number):
            raise ValueError(f"{name}: dropout should be a number in range [0, 1] representing the probability "
                             f"of an element being zeroed, got {dropout!r}")
        if not 0 <= dropout <= 1:
            raise ValueError(f"{name}: dropout should be a number in range [0, 1], got {dropout}")
        if dropout > 0 and num_layers == 1:
            warnings.warn("dropout option adds dropout after all but last recurrent layer, so non-zero dropout "
                          f"expects num_layers greater than 1, but got dropout={dropout} and num_layers={num_layers}",
                          stacklevel=3)
        if proj_size < 0 or (proj_size and (mode != "LSTM" or proj_size >= hidden_size)):
            raise ValueError(f"{name}: proj_size must be 0, or (LSTM only) positive and smaller than "
                             f"hidden_size ({hidden_size}); got {proj_size}")
        if hidden_size <= 0 or num_layers <= 0:
            raise ValueError(f"{name}: hidden_size and num_layers must be positive, got {hidden_size}, {num_layers}")
        self.mode, self.input_size, self.hidden_size = mode, input_size, hidden_size
        self.num_layers, self.bias, self.batch_first = num_layers, bias, batch_first
        self.dropout, self.bidirectional, self.proj_size = float(dropout), bidirectional, proj_size
        lucid = _lucid()
        g = _GATES[mode] * hidden_size
        dirs = 2 if bidirectional else 1
        out_size = proj_size or hidden_size  # the width of h (projected with proj_size)
        for layer in range(num_layers):
            in_size = input_size if layer == 0 else out_size * dirs
            for d in range(dirs):
                sfx = f"_l{layer}" + ("_reverse" if d else "")
                setattr(self, "weight_ih" + sfx, Parameter(lucid.empty(g, in_size, dtype=dtype)))
                setattr(self, "weight_hh" + sfx, Parameter(lucid.empty(g, out_size, dtype=dtype)))
                if bias:
                    setattr(self, "bias_ih" + sfx, Parameter(lucid.empty(g, dtype=dtype)))
                    setattr(self, "bias_hh" + sfx, Parameter(lucid.empty(g, dtype=dtype)))
                if proj_size:
                    setattr(self, "weight_hr" + sfx, Parameter(lucid.empty(proj_size, hidden_size, dtype=dtype)))
        self.reset_parameters()

    def reset_parameters(self):
        bound = 1.0 / math.sqrt(self.hidden_size)
        for p in self.parameters():
            init.uniform_(p, -bound, bound)

    def flatten_parameters(self):
        """Do nothing, as PyTorch does off cuDNN: the weights are never packed into one buffer here.

        Scripts call it after loading a model (``model.rnn.flatten_parameters()``).

        Examples
        --------
        >>> import lucid.nn as nn
        >>> nn.LSTM(2, 3).flatten_parameters() is None
        True
        """
        return None

    @property
    def _flat_weights_names(self):
        dirs = 2 if self.bidirectional else 1
        names = ["weight_ih", "weight_hh"] + (["bias_ih", "bias_hh"] if self.bias else [])
        names += ["weight_hr"] if self.proj_size else []
        return [n + f"_l{layer}" + ("_reverse" if d else "")
                for layer in range(self.num_layers) for d in range(dirs) for n in names]

    @property
    def _flat_weights(self):
        return [getattr(self, n) for n in self._flat_weights_names]

    @property
    def all_weights(self):
        """The parameters per layer and direction, ``[[w_ih, w_hh, b_ih, b_hh(, w_hr)], ...]``.

        Examples
        --------
        >>> import lucid.nn as nn
        >>> [[tuple(p.shape) for p in ws] for ws in nn.GRU(2, 3).all_weights]
        [[(9, 2), (9, 3), (9,), (9,)]]
        """
        w = self._flat_weights
        k = len(w) // (self.num_layers * (2 if self.bidirectional else 1))
        return [w[i:i + k] for i in range(0, len(w), k)]

    def _layer_params(self, layer, d):
        sfx = f"_l{layer}" + ("_reverse" if d else "")
        get = lambda n: getattr(self, n + sfx) if self.bias or n.startswith("weight") else None  # noqa: E731
        w_hr = getattr(self, "weight_hr" + sfx) if self.proj_size else None
        return get("weight_ih"), get("weight_hh"), get("bias_ih"), get("bias_hh"), w_hr

    def _initial(self, hx, batch, dtype, dirs, size, what="hidden", device=None):
        lucid = _lucid()
        shape = (self.num_layers * dirs, batch, size)
        if hx is None:  # zeros beside the input (PyTorch's), whatever the default device
            return lucid.zeros(*shape, dtype=dtype, device=device)
        if tuple(hx.shape) != shape:
            raise RuntimeError(f"{type(self).__name__}: expected {what} size {shape}, got {tuple(hx.shape)}")
        return hx

    def _prepare(self, input, hx):
        """``(x as (L, N, I) or packed data, batch_sizes or None, hx, unbatched, packed)``."""
        from .utils.rnn import PackedSequence

        name = type(self).__name__
        lstm = self.mode == "LSTM"
        if isinstance(input, PackedSequence):
            x, batch_sizes = input.data, input.batch_sizes._data
            if hx is not None and input.sorted_indices is not None:  # hx is in the caller's order
                idx = input.sorted_indices
                hx = tuple(h[:, idx] for h in hx) if lstm else hx[:, idx]
            return x, batch_sizes, hx, False, input
        if input.ndim not in (2, 3):
            raise ValueError(f"{name}: Expected input to be 2D or 3D, got {input.ndim}D instead")
        unbatched = input.ndim == 2
        if hx is not None:
            self._check_hx_dims(hx, input.ndim)
        x = input.unsqueeze(1) if unbatched else (input.transpose(0, 1) if self.batch_first else input)
        if unbatched and hx is not None:
            hx = tuple(h.unsqueeze(1) for h in hx) if lstm else hx.unsqueeze(1)
        return x, None, hx, unbatched, None

    def _check_hx_dims(self, hx, ndim):
        """PyTorch's messages for an hx of the wrong rank (a later shape check would name the
        unsqueezed shape, which the caller never made)."""
        name = type(self).__name__
        want, kind = (3, "batched 3-D") if ndim == 3 else (2, "unbatched 2-D")
        if self.mode == "LSTM":
            if isinstance(hx, (tuple, list)) and len(hx) == 2 and (hx[0].ndim != want or hx[1].ndim != want):
                raise RuntimeError(f"{name}: For {kind} input, hx and cx should also be {want}-D but got "
                                   f"({hx[0].ndim}-D, {hx[1].ndim}-D) tensors")
        elif isinstance(hx, Tensor) and hx.ndim != want:
            raise RuntimeError(f"{name}: For {kind} input, hx should also be {want}-D but got {hx.ndim}-D tensor")

    def _check_dtypes(self, x, hx):
        """An initial state of another dtype than the input is refused, as PyTorch. (PyTorch also
        refuses an input whose dtype differs from the weights'; Lucid promotes, which
        tests/nn/test_rnn_utils.py::test_packed_recurrent_layers_on_a_device_match_the_cpu relies on.)"""
        name = type(self).__name__
        for h in (hx if isinstance(hx, (tuple, list)) else (hx,)):
            if isinstance(h, Tensor) and h.dtype != x.dtype:
                raise RuntimeError(f"{name}: expected the hidden state to have dtype {x.dtype} (the input's), "
                                   f"got {h.dtype}")

    def forward(self, input, hx=None):
        lucid = _lucid()
        name = type(self).__name__
        x, batch_sizes, hx, unbatched, packed = self._prepare(input, hx)
        self._check_dtypes(x, hx)
        if x.shape[0] == 0 and packed is None:
            raise RuntimeError(f"{name}: Expected sequence length to be larger than 0 in RNN")
        if x.shape[-1] != self.input_size:
            raise RuntimeError(f"{name}: input.size(-1) must be equal to input_size. Expected {self.input_size}, "
                               f"got {x.shape[-1]} (input shape {tuple(x.shape)})")
        dirs = 2 if self.bidirectional else 1
        lstm = self.mode == "LSTM"
        batch = int(batch_sizes[0]) if packed is not None else x.shape[1]
        hsize = self.proj_size or self.hidden_size
        if lstm:
            if hx is not None and (not isinstance(hx, (tuple, list)) or len(hx) != 2):
                raise RuntimeError(f"{name}: expected hx to be a tuple (h_0, c_0)")
            h0 = self._initial(None if hx is None else hx[0], batch, x.dtype, dirs, hsize, device=x.device)
            c0 = self._initial(None if hx is None else hx[1], batch, x.dtype, dirs, self.hidden_size, "cell",
                               x.device)
        else:
            h0 = self._initial(hx, batch, x.dtype, dirs, hsize, device=x.device)
        mode = "LSTM" if lstm else ("GRU" if self.mode == "GRU" else "RNN")
        nonlin = "relu" if self.mode == "RNN_RELU" else "tanh"
        hs, cs = [], []
        for layer in range(self.num_layers):
            outs = []
            for d in range(dirs):
                k = layer * dirs + d
                state = (h0[k], c0[k]) if lstm else h0[k]
                w_ih, w_hh, b_ih, b_hh, w_hr = self._layer_params(layer, d)
                out, state = run_direction(mode, x, state, w_ih, w_hh, b_ih, b_hh, reverse=bool(d),
                                           nonlinearity=nonlin, w_hr=w_hr, batch_sizes=batch_sizes)
                outs.append(out)
                hs.append(state[0] if lstm else state)
                if lstm:
                    cs.append(state[1])
            x = outs[0] if dirs == 1 else lucid.cat(outs, -1)
            if self.dropout and self.training and layer < self.num_layers - 1:
                x = F.dropout(x, self.dropout, True)
        h_n = lucid.stack(hs, 0)
        c_n = lucid.stack(cs, 0) if lstm else None
        if packed is not None:
            out = type(packed)(x, packed.batch_sizes, packed.sorted_indices, packed.unsorted_indices)
            if packed.unsorted_indices is not None:  # back to the caller's batch order
                h_n = h_n[:, packed.unsorted_indices]
                c_n = c_n[:, packed.unsorted_indices] if lstm else None
        else:
            out = x.squeeze(1) if unbatched else (x.transpose(0, 1) if self.batch_first else x)
        if unbatched:
            h_n = h_n.squeeze(1)
            c_n = c_n.squeeze(1) if lstm else None
        return (out, (h_n, c_n)) if lstm else (out, h_n)

    def extra_repr(self):
        s = f"{self.input_size}, {self.hidden_size}"
        if self.proj_size:
            s += f", proj_size={self.proj_size}"
        if self.num_layers != 1:
            s += f", num_layers={self.num_layers}"
        if not self.bias:
            s += ", bias=False"
        if self.batch_first:
            s += ", batch_first=True"
        if self.dropout:
            s += f", dropout={self.dropout}"
        if self.bidirectional:
            s += ", bidirectional=True"
        return s


class RNN(RNNBase):
    """Elman RNN: ``h_t = tanh(x_t W_ih^T + b_ih + h_{t-1} W_hh^T + b_hh)`` (or ReLU).

    Parameters
    ----------
    input_size : int
        Features of each input step.
    hidden_size : int
        Features of the hidden state.
    num_layers : int
        Stacked layers.
    bias : bool
        Learn the biases.
    batch_first : bool
        Inputs are (N, L, H_in) instead of (L, N, H_in).
    dropout : float
        Dropout between layers (training only).
    bidirectional : bool
        Run a second, reversed direction and concatenate.
    nonlinearity : {'tanh', 'relu'}
        The activation.

    Examples
    --------
    >>> import lucid, lucid.nn as nn
    >>> rnn = nn.RNN(4, 8, num_layers=2, batch_first=True)
    >>> out, h = rnn(lucid.zeros(3, 5, 4))
    >>> out.shape, h.shape
    ((3, 5, 8), (2, 3, 8))
    """

    def __init__(self, input_size, hidden_size, num_layers=1, nonlinearity="tanh", bias=True, batch_first=False,
                 dropout=0.0, bidirectional=False, device=None, dtype=None, **kwargs):
        _no_proj_size("RNN", kwargs)
        if nonlinearity not in ("tanh", "relu"):
            raise ValueError(f"RNN: unknown nonlinearity {nonlinearity!r}, expected 'tanh' or 'relu'")
        self.nonlinearity = nonlinearity
        super().__init__("RNN_TANH" if nonlinearity == "tanh" else "RNN_RELU", input_size, hidden_size,
                         num_layers, bias, batch_first, dropout, bidirectional, 0, device, dtype)


class LSTM(RNNBase):
    """Long short-term memory; ``forward(x, (h0, c0))`` returns ``(output, (h_n, c_n))``.

    Parameters
    ----------
    input_size : int
        Features of each input step.
    hidden_size : int
        Features of the hidden state.
    num_layers : int
        Stacked layers.
    bias : bool
        Learn the biases.
    batch_first : bool
        Inputs are (N, L, H_in) instead of (L, N, H_in).
    dropout : float
        Dropout between layers (training only).
    bidirectional : bool
        Run a second, reversed direction and concatenate.
    proj_size : int
        If positive, ``h`` is projected to this width by ``weight_hr_l{k}`` (shape
        (proj_size, hidden_size)) after each step, as PyTorch's LSTM with projections.

    Inputs may also be a :class:`~lucid.nn.utils.rnn.PackedSequence` (the output is then one).

    Examples
    --------
    >>> import lucid, lucid.nn as nn
    >>> lstm = nn.LSTM(4, 8, bidirectional=True)
    >>> out, (h, c) = lstm(lucid.zeros(5, 3, 4))
    >>> out.shape, h.shape, c.shape
    ((5, 3, 16), (2, 3, 8), (2, 3, 8))
    """

    def __init__(self, input_size, hidden_size, num_layers=1, bias=True, batch_first=False, dropout=0.0,
                 bidirectional=False, proj_size=0, device=None, dtype=None):
        super().__init__("LSTM", input_size, hidden_size, num_layers, bias, batch_first, dropout, bidirectional,
                         proj_size, device, dtype)


class GRU(RNNBase):
    """Gated recurrent unit (PyTorch's gate order ``[r, z, n]``).

    Parameters
    ----------
    input_size : int
        Features of each input step.
    hidden_size : int
        Features of the hidden state.
    num_layers : int
        Stacked layers.
    bias : bool
        Learn the biases.
    batch_first : bool
        Inputs are (N, L, H_in) instead of (L, N, H_in).
    dropout : float
        Dropout between layers (training only).
    bidirectional : bool
        Run a second, reversed direction and concatenate.

    Examples
    --------
    >>> import lucid, lucid.nn as nn
    >>> out, h = nn.GRU(3, 4, batch_first=True)(lucid.zeros(2, 5, 3))
    >>> out.shape, h.shape
    ((2, 5, 4), (1, 2, 4))
    """

    def __init__(self, input_size, hidden_size, num_layers=1, bias=True, batch_first=False, dropout=0.0,
                 bidirectional=False, device=None, dtype=None, **kwargs):
        _no_proj_size("GRU", kwargs)
        super().__init__("GRU", input_size, hidden_size, num_layers, bias, batch_first, dropout, bidirectional,
                         0, device, dtype)


class RNNCellBase(Module):
    """The base class of :class:`RNNCell`, :class:`LSTMCell` and :class:`GRUCell` (PyTorch's
    ``RNNCellBase``): ``weight_ih`` (num_chunks * H, I), ``weight_hh`` (num_chunks * H, H) and the
    two biases, initialised ``U(-1/sqrt(H), 1/sqrt(H))``.

    Parameters
    ----------
    input_size, hidden_size : int
        Features of the input and of the hidden state.
    bias : bool
        Learn the biases.
    num_chunks : int
        Gates stacked in each weight (1 for RNNCell, 4 for LSTMCell, 3 for GRUCell).

    Examples
    --------
    >>> import lucid.nn as nn
    >>> isinstance(nn.GRUCell(3, 4), nn.RNNCellBase), nn.GRUCell(3, 4).weight_ih.shape
    (True, (12, 3))
    """

    def __init__(self, input_size, hidden_size, bias, num_chunks, device=None, dtype=None):
        super().__init__()
        for what, v in (("input_size", input_size), ("hidden_size", hidden_size)):
            if not isinstance(v, int):  # a float would build odd shapes, as PyTorch's empty() refuses
                raise TypeError(f"{type(self).__name__}: {what} should be of type int, got: {type(v).__name__}")
        lucid = _lucid()
        self.input_size, self.hidden_size, self.bias = input_size, hidden_size, bias
        g = num_chunks * hidden_size
        self.weight_ih = Parameter(lucid.empty(g, input_size, dtype=dtype))
        self.weight_hh = Parameter(lucid.empty(g, hidden_size, dtype=dtype))
        if bias:
            self.bias_ih = Parameter(lucid.empty(g, dtype=dtype))
            self.bias_hh = Parameter(lucid.empty(g, dtype=dtype))
        else:
            self.register_parameter("bias_ih", None)
            self.register_parameter("bias_hh", None)
        self.reset_parameters()

    def reset_parameters(self):
        bound = 1.0 / math.sqrt(self.hidden_size) if self.hidden_size > 0 else 0.0
        for p in self.parameters():
            init.uniform_(p, -bound, bound)

    def _check(self, input, hs):
        """PyTorch's checks of one step's input and states: a silent broadcast would be wrong."""
        name = type(self).__name__
        if input.ndim not in (1, 2):
            raise ValueError(f"{name}: Expected input to be 1D or 2D, got {input.ndim}D instead")
        if input.shape[-1] != self.input_size:
            raise RuntimeError(f"{name}: input has inconsistent input_size: got {input.shape[-1]}, expected "
                               f"{self.input_size}")
        if input.dtype != self.weight_ih.dtype and not _autocast_on():  # no silent promotion, as PyTorch
            raise RuntimeError(f"{name}: expected input of dtype {self.weight_ih.dtype} (the weights'), got "
                               f"{input.dtype}")
        for h in hs:
            if h.ndim not in (1, 2):
                raise ValueError(f"{name}: Expected hidden to be 1D or 2D, got {h.ndim}D instead")
            if h.dtype != input.dtype:
                raise RuntimeError(f"{name}: expected hidden of dtype {input.dtype} (the input's), got {h.dtype}")
            if h.ndim != input.ndim or (input.ndim == 2 and h.shape[0] != input.shape[0]):
                raise RuntimeError(f"{name}: Input batch size {input.shape[0] if input.ndim == 2 else 1} doesn't "
                                   f"match hidden batch size {h.shape[0] if h.ndim == 2 else 1}")
            if h.shape[-1] != self.hidden_size:
                raise RuntimeError(f"{name}: hidden has inconsistent hidden_size: got {h.shape[-1]}, expected "
                                   f"{self.hidden_size}")

    def _zeros(self, input):
        shape = (input.shape[0], self.hidden_size) if input.ndim == 2 else (self.hidden_size,)
        return _lucid().zeros(*shape, dtype=input.dtype, device=input.device)

    def _args(self):
        return self.weight_ih, self.weight_hh, self.bias_ih, self.bias_hh

    def extra_repr(self):
        s = f"{self.input_size}, {self.hidden_size}" + ("" if self.bias else ", bias=False")
        nonlinearity = self.__dict__.get("nonlinearity", "tanh")
        return s + ("" if nonlinearity == "tanh" else f", nonlinearity={nonlinearity}")


class RNNCell(RNNCellBase):
    """One Elman RNN step.

    Parameters
    ----------
    input_size : int
        Features of the input.
    hidden_size : int
        Features of the hidden state.
    bias : bool
        Learn the biases.
    nonlinearity : {'tanh', 'relu'}
        The activation.

    Examples
    --------
    >>> import lucid, lucid.nn as nn
    >>> nn.RNNCell(3, 4)(lucid.zeros(2, 3)).shape
    (2, 4)
    """

    def __init__(self, input_size, hidden_size, bias=True, nonlinearity="tanh", device=None, dtype=None):
        super().__init__(input_size, hidden_size, bias, 1, device, dtype)
        self.nonlinearity = nonlinearity

    def forward(self, input, hx=None):
        self._check(input, () if hx is None else (hx,))
        hx = self._zeros(input) if hx is None else hx
        if self.nonlinearity not in ("tanh", "relu"):  # PyTorch checks at the call, not in __init__
            raise RuntimeError(f"RNNCell: Unknown nonlinearity: {self.nonlinearity}")
        fn = F.rnn_tanh_cell if self.nonlinearity == "tanh" else F.rnn_relu_cell
        return fn(input, hx, *self._args())


class LSTMCell(RNNCellBase):
    """One LSTM step; returns ``(h', c')``.

    Parameters
    ----------
    input_size : int
        Features of the input.
    hidden_size : int
        Features of the hidden state.
    bias : bool
        Learn the biases.

    Examples
    --------
    >>> import lucid, lucid.nn as nn
    >>> h, c = nn.LSTMCell(3, 4)(lucid.zeros(2, 3))
    >>> h.shape, c.shape
    ((2, 4), (2, 4))
    """

    def __init__(self, input_size, hidden_size, bias=True, device=None, dtype=None):
        super().__init__(input_size, hidden_size, bias, 4, device, dtype)

    def forward(self, input, hx=None):
        self._check(input, () if hx is None else tuple(hx))
        hx = (self._zeros(input), self._zeros(input)) if hx is None else hx
        return F.lstm_cell(input, hx, *self._args())


class GRUCell(RNNCellBase):
    """One GRU step.

    Parameters
    ----------
    input_size : int
        Features of the input.
    hidden_size : int
        Features of the hidden state.
    bias : bool
        Learn the biases.

    Examples
    --------
    >>> import lucid, lucid.nn as nn
    >>> nn.GRUCell(3, 4)(lucid.zeros(2, 3)).shape
    (2, 4)
    """

    def __init__(self, input_size, hidden_size, bias=True, device=None, dtype=None):
        super().__init__(input_size, hidden_size, bias, 3, device, dtype)

    def forward(self, input, hx=None):
        self._check(input, () if hx is None else (hx,))
        hx = self._zeros(input) if hx is None else hx
        return F.gru_cell(input, hx, *self._args())
