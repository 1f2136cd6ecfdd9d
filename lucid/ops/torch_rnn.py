"""PyTorch's functional recurrent primitives at top level: the cells (``lstm_cell`` ...) and the
whole-sequence ``lstm`` / ``gru`` / ``rnn_tanh`` / ``rnn_relu`` taking flat weight lists.

They drive the same step functions as ``nn.LSTM``/``nn.GRU``/``nn.RNN``
(``lucid/nn/functional/rnn.py``), so the numbers are those of the layers with the same weights.
"""
from __future__ import annotations

from ._family import _as_tensor

__all__ = ["gru", "gru_cell", "lstm", "lstm_cell", "rnn_relu", "rnn_relu_cell", "rnn_tanh", "rnn_tanh_cell"]


def _F():
    import lucid.nn.functional as F

    return F


def rnn_tanh_cell(input, hx, w_ih, w_hh, b_ih=None, b_hh=None):
    """One Elman step ``tanh(x W_ih^T + b_ih + h W_hh^T + b_hh)`` (``nn.functional.rnn_tanh_cell``).

    Examples
    --------
    >>> import lucid
    >>> lucid.rnn_tanh_cell(lucid.ones(1, 2), lucid.zeros(1, 1), lucid.ones(1, 2), lucid.ones(1, 1))
    tensor([[0.9640276]])
    """
    return _F().rnn_tanh_cell(input, hx, w_ih, w_hh, b_ih, b_hh)


def rnn_relu_cell(input, hx, w_ih, w_hh, b_ih=None, b_hh=None):
    """One Elman step with ReLU (``nn.functional.rnn_relu_cell``).

    Examples
    --------
    >>> import lucid
    >>> lucid.rnn_relu_cell(lucid.ones(1, 2), lucid.ones(1, 1), lucid.ones(1, 2), lucid.ones(1, 1))
    tensor([[3.]])
    """
    return _F().rnn_relu_cell(input, hx, w_ih, w_hh, b_ih, b_hh)


def lstm_cell(input, hx, w_ih, w_hh, b_ih=None, b_hh=None):
    """One LSTM step; ``hx = (h, c)``; returns ``(h', c')`` (gate rows ``[i, f, g, o]``).

    Examples
    --------
    >>> import lucid
    >>> h, c = lucid.lstm_cell(lucid.ones(1, 2), (lucid.zeros(1, 1), lucid.zeros(1, 1)),
    ...                        lucid.zeros(4, 2), lucid.zeros(4, 1))
    >>> h, c
    (tensor([[0.]]), tensor([[0.]]))
    """
    if not isinstance(hx, (tuple, list)) or len(hx) != 2:
        raise RuntimeError("lstm_cell: expected hx to be a pair (h, c)")
    return _F().lstm_cell(input, tuple(hx), w_ih, w_hh, b_ih, b_hh)


def gru_cell(input, hx, w_ih, w_hh, b_ih=None, b_hh=None):
    """One GRU step (gate rows ``[r, z, n]``), as ``torch.gru_cell``.

    Examples
    --------
    >>> import lucid
    >>> lucid.gru_cell(lucid.ones(1, 2), lucid.ones(1, 1), lucid.zeros(3, 2), lucid.zeros(3, 1))
    tensor([[0.5]])
    """
    return _F().gru_cell(input, hx, w_ih, w_hh, b_ih, b_hh)


# NOTE [Flat RNN weights]
# ``params`` lists, layer by layer and for each direction (forward, then reverse):
# w_ih, w_hh, then b_ih, b_hh if ``has_biases``, then w_hr for an LSTM with projections
# (``nn.LSTM._flat_weights``'s order). As in PyTorch, an LSTM has projections when h and c
# differ in width.


def _run(name, mode, nonlin, x, batch_sizes, hx, params, has_biases, num_layers, dropout, train,
         bidirectional):
    from ..nn.functional.rnn import run_direction

    import lucid

    lstm = mode == "LSTM"
    dirs = 2 if bidirectional else 1
    h0, c0 = (hx[0], hx[1]) if lstm else (hx, None)
    proj = lstm and h0.shape[-1] != c0.shape[-1]
    stride = 2 + 2 * bool(has_biases) + int(proj)
    params = list(params)
    if len(params) != stride * num_layers * dirs:
        raise RuntimeError(f"{name}: expected {stride * num_layers * dirs} weights for {num_layers} layer(s), "
                           f"{dirs} direction(s), has_biases={has_biases}, got {len(params)}")
    if h0.ndim != 3 or h0.shape[0] != num_layers * dirs:
        raise RuntimeError(f"{name}: expected hx of shape ({num_layers * dirs}, N, H), got {tuple(h0.shape)}")
    hs, cs = [], []
    for layer in range(num_layers):
        outs = []
        for d in range(dirs):
            k = layer * dirs + d
            w = params[k * stride:(k + 1) * stride]
            b_ih, b_hh = (w[2], w[3]) if has_biases else (None, None)
            state = (h0[k], c0[k]) if lstm else h0[k]
            out, state = run_direction(mode, x, state, w[0], w[1], b_ih, b_hh, reverse=bool(d), nonlinearity=nonlin,
                                       w_hr=w[-1] if proj else None, batch_sizes=batch_sizes)
            outs.append(out)
            hs.append(state[0] if lstm else state)
            if lstm:
                cs.append(state[1])
        x = outs[0] if dirs == 1 else lucid.cat(outs, -1)
        if dropout and train and layer < num_layers - 1:
            x = _F().dropout(x, dropout, True)
    h_n = lucid.stack(hs, 0)
    return (x, h_n, lucid.stack(cs, 0)) if lstm else (x, h_n)


def _dispatch(name, mode, nonlin, args, kwargs):
    """PyTorch's two overloads: ``(input, hx, params, has_biases, num_layers, dropout, train,
    bidirectional, batch_first)`` and the packed ``(data, batch_sizes, hx, params, has_biases,
    num_layers, dropout, train, bidirectional)``: the packed one has the weight list fourth."""
    if kwargs:
        raise TypeError(f"{name}: takes positional arguments only (PyTorch's schema), got {sorted(kwargs)}")
    if len(args) != 9:
        raise TypeError(f"{name}: expected 9 arguments, got {len(args)}")
    lstm = mode == "LSTM"
    if isinstance(args[3], (list, tuple)):  # the packed-data overload
        data, batch_sizes, hx, params, has_biases, num_layers, dropout, train, bidir = args
        sizes = [int(b) for b in _as_tensor(batch_sizes).tolist()]
        hx = tuple(hx) if lstm else hx
        return _run(name, mode, nonlin, _as_tensor(data), sizes, hx, params, has_biases, num_layers, dropout,
                    train, bidir)
    input, hx, params, has_biases, num_layers, dropout, train, bidir, batch_first = args
    x = _as_tensor(input)
    if x.ndim != 3:
        raise RuntimeError(f"{name}: expected a 3-D input (L, N, H_in), got shape {tuple(x.shape)}")
    x = x.transpose(0, 1) if batch_first else x
    hx = tuple(hx) if lstm else hx
    res = _run(name, mode, nonlin, x, None, hx, params, has_biases, num_layers, dropout, train, bidir)
    return (res[0].transpose(0, 1) if batch_first else res[0],) + tuple(res[1:])


def lstm(*args, **kwargs):
    """A multi-layer LSTM over a whole sequence with flat weights, as ``torch.lstm``.

    ``lstm(input, (h0, c0), params, has_biases, num_layers, dropout, train, bidirectional,
    batch_first)`` with ``input`` (L, N, H_in) (or (N, L, H_in)) and ``h0, c0`` (layers * dirs, N, H),
    or the packed form ``lstm(data, batch_sizes, (h0, c0), params, has_biases, num_layers,
    dropout, train, bidirectional)``. Returns ``(output, h_n, c_n)``. See NOTE [Flat RNN weights].

    Examples
    --------
    >>> import lucid
    >>> w = [lucid.zeros(4, 2), lucid.zeros(4, 1)]
    >>> out, h, c = lucid.lstm(lucid.ones(3, 1, 2), (lucid.zeros(1, 1, 1), lucid.zeros(1, 1, 1)), w,
    ...                        False, 1, 0.0, False, False, False)
    >>> out.shape, h.shape, c.shape
    ((3, 1, 1), (1, 1, 1), (1, 1, 1))
    """
    return _dispatch("lstm", "LSTM", "tanh", args, kwargs)


def gru(*args, **kwargs):
    """A multi-layer GRU with flat weights, as ``torch.gru``: ``gru(input, hx, params, has_biases,
    num_layers, dropout, train, bidirectional, batch_first)`` or the packed form ``gru(data,
    batch_sizes, hx, params, ...)``. Returns ``(output, h_n)``. See NOTE [Flat RNN weights].

    Examples
    --------
    >>> import lucid
    >>> out, h = lucid.gru(lucid.ones(3, 1, 2), lucid.zeros(1, 1, 1), [lucid.zeros(3, 2), lucid.zeros(3, 1)],
    ...                    False, 1, 0.0, False, False, False)
    >>> h
    tensor([[[0.]]])
    """
    return _dispatch("gru", "GRU", "tanh", args, kwargs)


def rnn_tanh(*args, **kwargs):
    """A multi-layer Elman RNN (tanh) with flat weights, as ``torch.rnn_tanh`` (``gru``'s arguments).

    Examples
    --------
    >>> import lucid
    >>> out, h = lucid.rnn_tanh(lucid.ones(2, 1, 1), lucid.zeros(1, 1, 1), [lucid.ones(1, 1), lucid.zeros(1, 1)],
    ...                         False, 1, 0.0, False, False, False)
    >>> out.flatten()
    tensor([0.7615942, 0.7615942])
    """
    return _dispatch("rnn_tanh", "RNN", "tanh", args, kwargs)


def rnn_relu(*args, **kwargs):
    """A multi-layer Elman RNN (ReLU) with flat weights, as ``torch.rnn_relu`` (``gru``'s arguments).

    Examples
    --------
    >>> import lucid
    >>> out, h = lucid.rnn_relu(lucid.ones(2, 1, 1), lucid.zeros(1, 1, 1), [lucid.ones(1, 1), lucid.ones(1, 1)],
    ...                         False, 1, 0.0, False, False, False)
    >>> out.flatten()
    tensor([1., 2.])
    """
    return _dispatch("rnn_relu", "RNN", "relu", args, kwargs)

