"""Recurrent cells (one time step) in PyTorch's gate order, and the multi-step driver used by
``nn.RNN``/``nn.LSTM``/``nn.GRU``.

Gate orders (so PyTorch weights can be copied): LSTM rows ``[i, f, g, o]``; GRU rows
``[r, z, n]`` with ``n = tanh(W_in x + b_in + r * (W_hn h + b_hn))``.
The input projection of a whole sequence is one matmul; only the hidden-to-hidden
product runs inside the time loop (the loop over time steps is inherent to recurrence).
"""
from __future__ import annotations

from .activation import sigmoid, relu
from .linear import linear

__all__ = ["rnn_tanh_cell", "rnn_relu_cell", "lstm_cell", "gru_cell"]


def _lucid():
    import lucid

    return lucid


def _rnn_step(gi, h, w_hh, b_hh, nonlinearity):
    pre = gi + linear(h, w_hh, b_hh)
    return _lucid().tanh(pre) if nonlinearity == "tanh" else relu(pre)


def _lstm_step(gi, state, w_hh, b_hh, w_hr=None):
    h, c = state
    i, f, g, o = (gi + linear(h, w_hh, b_hh)).chunk(4, -1)
    tanh = _lucid().tanh
    c = sigmoid(f) * c + sigmoid(i) * tanh(g)
    h = sigmoid(o) * tanh(c)
    return (h if w_hr is None else linear(h, w_hr)), c  # proj_size: h is projected


def _gru_step(gi, h, w_hh, b_hh):
    gh = linear(h, w_hh, b_hh)
    ir, iz, in_ = gi.chunk(3, -1)
    hr, hz, hn = gh.chunk(3, -1)
    r, z = sigmoid(ir + hr), sigmoid(iz + hz)
    n = _lucid().tanh(in_ + r * hn)
    return (1 - z) * n + z * h


def rnn_tanh_cell(input, hx, w_ih, w_hh, b_ih=None, b_hh=None):
    """One Elman RNN step ``tanh(x W_ih^T + b_ih + h W_hh^T + b_hh)``.

    Parameters
    ----------
    input : Tensor
        Of shape (N, input_size) or (input_size,).
    hx : Tensor
        The hidden state, (N, hidden_size).
    w_ih, w_hh : Tensor
        Input-hidden and hidden-hidden weights.
    b_ih, b_hh : Tensor, optional
        Their biases.

    Examples
    --------
    >>> import lucid, lucid.nn.functional as F
    >>> h = F.rnn_tanh_cell(lucid.ones(1, 3), lucid.zeros(1, 2), lucid.zeros(1 * 2, 3), lucid.zeros(1 * 2, 2))
    >>> h.shape
    (1, 2)
    """
    return _rnn_step(linear(input, w_ih, b_ih), hx, w_hh, b_hh, "tanh")


def rnn_relu_cell(input, hx, w_ih, w_hh, b_ih=None, b_hh=None):
    """One Elman RNN step with ReLU.

    Parameters
    ----------
    input : Tensor
        Of shape (N, input_size) or (input_size,).
    hx : Tensor
        The hidden state, (N, hidden_size).
    w_ih, w_hh : Tensor
        Input-hidden and hidden-hidden weights.
    b_ih, b_hh : Tensor, optional
        Their biases.

    Examples
    --------
    >>> import lucid, lucid.nn.functional as F
    >>> h = F.rnn_relu_cell(lucid.ones(1, 3), lucid.zeros(1, 2), lucid.zeros(1 * 2, 3), lucid.zeros(1 * 2, 2))
    >>> h.shape
    (1, 2)
    """
    return _rnn_step(linear(input, w_ih, b_ih), hx, w_hh, b_hh, "relu")


def lstm_cell(input, hx, w_ih, w_hh, b_ih=None, b_hh=None):
    """One LSTM step; ``hx = (h, c)``; returns ``(h', c')``.

    Parameters
    ----------
    input : Tensor
        Of shape (N, input_size) or (input_size,).
    hx : Tensor
        The pair ``(h, c)``, each (N, hidden_size).
    w_ih, w_hh : Tensor
        Input-hidden and hidden-hidden weights.
    b_ih, b_hh : Tensor, optional
        Their biases.

    Examples
    --------
    >>> import lucid, lucid.nn.functional as F
    >>> h = F.lstm_cell(lucid.ones(1, 3), (lucid.zeros(1, 2), lucid.zeros(1, 2)), lucid.zeros(4 * 2, 3), lucid.zeros(4 * 2, 2))
    >>> h[0].shape
    (1, 2)
    """
    return _lstm_step(linear(input, w_ih, b_ih), hx, w_hh, b_hh)


def gru_cell(input, hx, w_ih, w_hh, b_ih=None, b_hh=None):
    """One GRU step.

    Parameters
    ----------
    input : Tensor
        Of shape (N, input_size) or (input_size,).
    hx : Tensor
        The hidden state, (N, hidden_size).
    w_ih, w_hh : Tensor
        Input-hidden and hidden-hidden weights.
    b_ih, b_hh : Tensor, optional
        Their biases.

    Examples
    --------
    >>> import lucid, lucid.nn.functional as F
    >>> h = F.gru_cell(lucid.ones(1, 3), lucid.zeros(1, 2), lucid.zeros(3 * 2, 3), lucid.zeros(3 * 2, 2))
    >>> h.shape
    (1, 2)
    """
    return _gru_step(linear(input, w_ih, b_ih), hx, w_hh, b_hh)


def _step(mode, gi, state, w_hh, b_hh, nonlinearity, w_hr):
    """One time step; returns (output, new state)."""
    if mode == "LSTM":
        state = _lstm_step(gi, state, w_hh, b_hh, w_hr)
        return state[0], state
    if mode == "GRU":
        state = _gru_step(gi, state, w_hh, b_hh)
    else:
        state = _rnn_step(gi, state, w_hh, b_hh, nonlinearity)
    return state, state


def run_direction(mode, x, state, w_ih, w_hh, b_ih, b_hh, reverse=False, nonlinearity="tanh", w_hr=None,
                  batch_sizes=None):
    """Run one layer in one direction over ``x`` (L, N, I); returns (outputs (L, N, H), final state).

    With ``batch_sizes`` (a NumPy array), ``x`` is the packed data of a ``PackedSequence``
    (See NOTE [Packed layout] in lucid/nn/utils/rnn.py): step t updates only the first
    ``batch_sizes[t]`` rows of the state, the others keep theirs, so the final state of each
    sequence is the one after its own last step; the outputs come back packed."""
    lucid = _lucid()
    gi_all = linear(x, w_ih, b_ih)  # one matmul for every time step
    if batch_sizes is not None:
        return _run_packed(mode, gi_all, state, w_hh, b_hh, reverse, nonlinearity, w_hr, batch_sizes)
    steps = range(x.shape[0] - 1, -1, -1) if reverse else range(x.shape[0])
    outs = [None] * x.shape[0]
    for t in steps:
        outs[t], state = _step(mode, gi_all[t], state, w_hh, b_hh, nonlinearity, w_hr)
    return lucid.stack(outs, 0), state


def _run_packed(mode, gi_all, state, w_hh, b_hh, reverse, nonlinearity, w_hr, batch_sizes):
    lucid = _lucid()
    lstm = mode == "LSTM"
    offs = [0]
    for b in batch_sizes:
        offs.append(offs[-1] + int(b))
    n = int(batch_sizes[0]) if len(batch_sizes) else 0
    outs = [None] * len(batch_sizes)
    steps = range(len(batch_sizes) - 1, -1, -1) if reverse else range(len(batch_sizes))
    for t in steps:
        bs = int(batch_sizes[t])
        cur = tuple(s[:bs] for s in state) if lstm else state[:bs]
        outs[t], new = _step(mode, gi_all[offs[t]:offs[t + 1]], cur, w_hh, b_hh, nonlinearity, w_hr)
        if bs == n:
            state = new
        elif lstm:
            state = tuple(lucid.cat([a, s[bs:]], 0) for a, s in zip(new, state))
        else:
            state = lucid.cat([new, state[bs:]], 0)
    return lucid.cat(outs, 0), state
