"""Op database entries for lucid/ops/torch_more.py and torch_rnn.py: the view copies, the native_*
normalisations, segment_reduce, geqrf / ormqr and the flat-weight recurrent functions."""
import numpy as np

import lucid
from opinfo import OpInfo, Sample, floats, positive


def _s(*args, name=""):
    return Sample(tuple(args), {}, name)


def _x23(rng):
    return [_s(floats(rng, 2, 3))]


# ------------------------------------------------------------------ view copies
COPIES = [
    OpInfo("torch.alias_copy", lucid.alias_copy, lambda x: x.copy(), _x23),
    OpInfo("torch.t_copy", lucid.t_copy, lambda x: x.T, _x23),
    OpInfo("torch.permute_copy", lambda x: lucid.permute_copy(x, (2, 0, 1)), lambda x: x.transpose(2, 0, 1),
           lambda rng: [_s(floats(rng, 2, 1, 3))]),
    OpInfo("torch.transpose_copy", lambda x: lucid.transpose_copy(x, 0, 1), lambda x: x.T, _x23),
    OpInfo("torch.diagonal_copy", lambda x: lucid.diagonal_copy(x, 1), lambda x: np.diagonal(x, 1).copy(), _x23),
    OpInfo("torch.expand_copy", lambda x: lucid.expand_copy(x, (2, 3)), lambda x: np.broadcast_to(x, (2, 3)).copy(),
           lambda rng: [_s(floats(rng, 3)), _s(floats(rng, 2, 1), name="column")]),
    OpInfo("torch.narrow_copy", lambda x: lucid.narrow_copy(x, 1, 1, 2), lambda x: x[:, 1:3], _x23),
    OpInfo("torch.select_copy", lambda x: lucid.select_copy(x, 1, -1), lambda x: x[:, -1], _x23),
    OpInfo("torch.slice_copy", lambda x: lucid.slice_copy(x, 1, 0, None, 2), lambda x: x[:, ::2], _x23),
    OpInfo("torch.squeeze_copy", lambda x: lucid.squeeze_copy(x, (0, 2)), lambda x: x.reshape(3),
           lambda rng: [_s(floats(rng, 1, 3, 1))]),
    OpInfo("torch.unsqueeze_copy", lambda x: lucid.unsqueeze_copy(x, -1), lambda x: x[..., None], _x23),
    OpInfo("torch.view_copy", lambda x: lucid.view_copy(x, (3, -1)), lambda x: x.reshape(3, -1), _x23),
    # a transposed input: view() would refuse, view_copy copies
    OpInfo("torch.view_copy_noncontiguous", lambda x: lucid.view_copy(x.t(), (6,)), lambda x: x.T.reshape(6), _x23),
    OpInfo("torch.unfold_copy", lambda x: lucid.unfold_copy(x, 0, 2, 1), lambda x: np.stack([x[:2], x[1:]]),
           lambda rng: [_s(floats(rng, 3))]),
    OpInfo("torch.as_strided_copy", lambda x: lucid.as_strided_copy(x, (2, 2), (1, 2)),
           lambda x: np.stack([x[[0, 2]], x[[1, 3]]]), lambda rng: [_s(floats(rng, 4))]),
    OpInfo("torch.split_copy", lambda x: lucid.cat(lucid.split_copy(x, 2, 1), 1), lambda x: x, _x23),
    OpInfo("torch.split_with_sizes_copy", lambda x: lucid.split_with_sizes_copy(x, [1, 2], 1)[1],
           lambda x: x[:, 1:], _x23),
    OpInfo("torch.unbind_copy", lambda x: lucid.unbind_copy(x, 1)[2], lambda x: x[:, 2], _x23),
]


# ------------------------------------------------------------------ native_*
def _np_stats(x, axes):
    mean = x.mean(axis=axes, keepdims=True)
    return mean, 1 / np.sqrt(((x - mean) ** 2).mean(axis=axes, keepdims=True) + 1e-5)


def _np_layer_norm(x, w, b, out=0):
    mean, rstd = _np_stats(x, (-1,))
    return ((x - mean) * rstd * w + b, mean, rstd)[out]


def _np_batch_norm(x, w, b, out=0):
    mean, invstd = _np_stats(x, (0, 2))
    shape = (1, -1, 1)
    return ((x - mean) * invstd * w.reshape(shape) + b.reshape(shape), mean.reshape(-1), invstd.reshape(-1))[out]


def _np_group_norm(x, w, b, out=0):
    mean, rstd = _np_stats(x.reshape(2, 2, -1), (-1,))
    y = ((x.reshape(2, 2, -1) - mean) * rstd).reshape(x.shape) * w.reshape(1, -1, 1) + b.reshape(1, -1, 1)
    return (y, mean.reshape(2, 2), rstd.reshape(2, 2))[out]


def _norm_samples(rng):
    return [_s(floats(rng, 2, 4, 3), floats(rng, 4), floats(rng, 4))]


NATIVE = [
    OpInfo(f"torch.native_layer_norm_{k}", lambda x, w, b, k=k: lucid.native_layer_norm(x, (3,), w, b, 1e-5)[k],
           lambda x, w, b, k=k: _np_layer_norm(x, w, b, k),
           lambda rng: [_s(floats(rng, 2, 3), floats(rng, 3), floats(rng, 3))],
           grad=k == 0, gradgrad=k == 0) for k in range(3)  # the statistics are non-differentiable, as PyTorch's
] + [
    OpInfo(f"torch.native_batch_norm_{k}",
           lambda x, w, b, k=k: lucid.native_batch_norm(x, w, b, None, None, True, 0.1, 1e-5)[k],
           lambda x, w, b, k=k: _np_batch_norm(x, w, b, k), _norm_samples,
           grad=k == 0, gradgrad=k == 0) for k in range(3)
] + [
    OpInfo(f"torch.native_group_norm_{k}",
           lambda x, w, b, k=k: lucid.native_group_norm(x, w, b, 2, 4, 3, 2, 1e-5)[k],
           lambda x, w, b, k=k: _np_group_norm(x, w, b, k),
           lambda rng: [_s(floats(rng, 2, 4, 3), floats(rng, 4), floats(rng, 4))]) for k in range(3)
] + [
    OpInfo("torch.native_norm", lambda x: lucid.native_norm(x, 3, [1], True, None),
           lambda x: (np.abs(x) ** 3).sum(1, keepdims=True) ** (1 / 3), lambda rng: [_s(positive(rng, 2, 3))]),
    OpInfo("torch.native_norm_all", lucid.native_norm, lambda x: np.sqrt((x * x).sum()), _x23),
    OpInfo("torch.norm_except_dim", lambda x: lucid.norm_except_dim(x, 2, 1),
           lambda x: np.sqrt((x * x).sum((0, 2), keepdims=True)), lambda rng: [_s(floats(rng, 2, 3, 2))]),
    OpInfo("torch.norm_except_dim_whole", lambda x: lucid.norm_except_dim(x, 2, -1),
           lambda x: np.sqrt((x * x).sum()), _x23),
    OpInfo("torch.native_channel_shuffle", lambda x: lucid.native_channel_shuffle(x, 2),
           lambda x: x[:, [0, 2, 1, 3]], lambda rng: [_s(floats(rng, 2, 4, 2))]),
]


# ------------------------------------------------------------------ segment_reduce
def _np_segment(x, reduce, lengths):
    fill = {"sum": 0.0, "mean": np.nan, "max": -np.inf, "min": np.inf, "prod": 1.0}[reduce]
    fn = {"sum": np.sum, "mean": np.mean, "max": np.max, "min": np.min, "prod": np.prod}[reduce]
    offs = np.concatenate([[0], np.cumsum(lengths)])
    parts = [fn(x[a:b], axis=0) if b > a else np.full(x.shape[1:], fill) for a, b in zip(offs[:-1], offs[1:])]
    return np.stack(parts)


def _segment(x, reduce, lengths):
    return lucid.segment_reduce(x, reduce, lengths=lucid.tensor(lengths, device=x.device))


def _seg_samples(rng):
    # distinct values: max / min have no ties; an empty segment gives its fill (no gradient)
    return [_s(floats(rng, 5) + np.arange(5.0)), _s(floats(rng, 5, 2) + np.arange(10.0).reshape(5, 2), name="2-d")]


SEGMENTS = [
    # an empty segment of max / min is -inf / inf: finite differences there are nan, so only sum
    # and prod have one here (tests/surface/test_torch_more.py checks the fills)
    OpInfo(f"torch.segment_reduce_{r}", lambda x, r=r, n=n: _segment(x, r, n), lambda x, r=r, n=n: _np_segment(x, r, n),
           _seg_samples) for r, n in (("sum", [2, 0, 3]), ("max", [2, 3]), ("min", [1, 4]), ("prod", [2, 0, 3]))
] + [
    # mean of an empty segment is nan: the nan-free case checks the gradient
    OpInfo("torch.segment_reduce_mean", lambda x: lucid.segment_reduce(
        x, "mean", offsets=lucid.tensor([0, 2, 5], device=x.device)),
        lambda x: np.stack([x[:2].mean(0), x[2:].mean(0)]), _seg_samples),
    OpInfo("torch.segment_reduce_axis1", lambda x: lucid.segment_reduce(
        x, "sum", lengths=lucid.tensor([[1, 2], [3, 0]], device=x.device), axis=1),
        lambda x: np.array([[x[0, :1].sum(), x[0, 1:].sum()], [x[1].sum(), 0.0]]),
        lambda rng: [_s(floats(rng, 2, 3))]),
]


# ------------------------------------------------------------------ geqrf / ormqr
def _np_geqrf(a, out):
    h, tau = np.linalg.qr(a, mode="raw")
    return (h.T, tau)[out]


def _np_ormqr(a, tau, c):
    from scipy.linalg import lapack

    return lapack.dormqr("L", "N", a, tau, c, max(1, c.shape[1]))[0]


LINALG = [
    OpInfo(f"torch.geqrf_{k}", lambda a, k=k: lucid.geqrf(a)[k], lambda a, k=k: _np_geqrf(a, k),
           lambda rng: [_s(floats(rng, 3, 2)), _s(floats(rng, 2, 3), name="wide")], atol=1e-10) for k in range(2)
] + [
    OpInfo("torch.ormqr", lucid.ormqr, _np_ormqr,
           lambda rng: [_s(floats(rng, 3, 2), floats(rng, 2), floats(rng, 3, 2))]),
    OpInfo("torch.ormqr_right_transposed", lambda a, t, c: lucid.ormqr(a, t, c, False, True),
           lambda a, t, c: c @ _np_ormqr(a, t, np.eye(3)).T,
           lambda rng: [_s(floats(rng, 3, 2), floats(rng, 2), floats(rng, 2, 3))]),
]


# ------------------------------------------------------------------ flat-weight recurrences
def _sig(x):
    return 1 / (1 + np.exp(-x))


def _np_lstm(x, h, c, w_ih, w_hh, b):
    outs = []
    for t in range(x.shape[0]):
        i, f, g, o = np.split(x[t] @ w_ih.T + h @ w_hh.T + b, 4, -1)
        c = _sig(f) * c + _sig(i) * np.tanh(g)
        h = _sig(o) * np.tanh(c)
        outs.append(h)
    return np.stack(outs)


def _np_gru(x, h, w_ih, w_hh, b):
    outs = []
    for t in range(x.shape[0]):
        gi, gh = x[t] @ w_ih.T + b, h @ w_hh.T
        (ir, iz, in_), (hr, hz, hn) = np.split(gi, 3, -1), np.split(gh, 3, -1)
        r, z = _sig(ir + hr), _sig(iz + hz)
        h = (1 - z) * np.tanh(in_ + r * hn) + z * h
        outs.append(h)
    return np.stack(outs)


def _np_rnn(x, h, w_ih, w_hh, b):
    outs = []
    for t in range(x.shape[0]):
        h = np.tanh(x[t] @ w_ih.T + h @ w_hh.T + b)
        outs.append(h)
    return np.stack(outs)


def _rnn_samples(gates):
    def samples(rng):  # L=2, N=2, I=2, H=1 (the input bias alone: b_hh zero)
        return [_s(floats(rng, 2, 2, 2), floats(rng, 2, 1), *([floats(rng, 2, 1)] if gates == 4 else []),
                   floats(rng, gates, 2), floats(rng, gates, 1), floats(rng, gates))]

    return samples


def _zero_like_bias(b):
    return b * 0


RNNS = [
    OpInfo("torch.lstm", lambda x, h, c, wi, wh, b: lucid.lstm(
        x, (h[None], c[None]), [wi, wh, b, _zero_like_bias(b)], True, 1, 0.0, False, False, False)[0],
        _np_lstm, _rnn_samples(4)),
    OpInfo("torch.gru", lambda x, h, wi, wh, b: lucid.gru(
        x, h[None], [wi, wh, b, _zero_like_bias(b)], True, 1, 0.0, False, False, False)[0],
        _np_gru, _rnn_samples(3)),
    OpInfo("torch.rnn_tanh", lambda x, h, wi, wh, b: lucid.rnn_tanh(
        x, h[None], [wi, wh, b, _zero_like_bias(b)], True, 1, 0.0, False, False, False)[1][0],
        lambda x, h, wi, wh, b: _np_rnn(x, h, wi, wh, b)[-1], _rnn_samples(1)),
]

OPS = COPIES + NATIVE + SEGMENTS + LINALG + RNNS
