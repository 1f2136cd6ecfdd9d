"""Op database entries for the PyTorch-path functional additions: the ``*_with_indices`` pools
(lucid/nn/functional/pooling.py, pooling_extra.py), ``native_channel_shuffle``
(activation_extra.py) and ``grouped_mm`` (grouped_mm.py).

References are loops over output positions returning (values, flat indices); shapes are tiny.
"""
import itertools

import numpy as np

import lucid
import lucid.nn.functional as F
from opinfo import OpInfo, Sample, away_from_ties, floats


def _t(v, n):
    return (v,) * n if isinstance(v, int) else tuple(v)


def _window_max(x, windows):
    """(values, flat indices) of the max of ``x`` (N, C, *sp) over ``windows``: for every dim a
    list (one per output position) of input index lists."""
    sp = x.shape[2:]
    osz = tuple(len(w) for w in windows)
    vals = np.zeros(x.shape[:2] + osz)
    idx = np.zeros(x.shape[:2] + osz, dtype=np.int64)
    for pos in itertools.product(*[range(o) for o in osz]):
        cells = list(itertools.product(*[windows[d][p] for d, p in enumerate(pos)]))
        flat = np.array([np.ravel_multi_index(c, sp) for c in cells])
        v = x.reshape(x.shape[:2] + (-1,))[:, :, flat]
        arg = v.argmax(-1)
        vals[(slice(None), slice(None)) + pos] = v.max(-1)
        idx[(slice(None), slice(None)) + pos] = flat[arg]
    return vals, idx


def ref_max_pool_idx(x, kernel_size, stride=None, padding=0):
    nsp = x.ndim - 2
    k = _t(kernel_size, nsp)
    s = k if stride is None else _t(stride, nsp)
    p = _t(padding, nsp)
    windows = []
    for n, kk, ss, pp in zip(x.shape[2:], k, s, p):
        o = (n + 2 * pp - kk) // ss + 1
        windows.append([[i for i in range(q * ss - pp, q * ss - pp + kk) if 0 <= i < n] for q in range(o)])
    return _window_max(x, windows)


def ref_adaptive_max_idx(x, output_size):
    osz = _t(output_size, x.ndim - 2)
    return _window_max(x, [[list(range(i * n // o, -((-(i + 1) * n) // o))) for i in range(o)]
                           for n, o in zip(x.shape[2:], osz)])


def _frac_starts(u, n, o, k):
    if o == 1:
        return [n - k]
    a = (n - k) / (o - 1)
    return [int((i + u) * a) - int(u * a) for i in range(o - 1)] + [n - k]


def ref_fractional_idx(x, kernel_size, output_size, u):
    """PyTorch's pseudo-random windows; ``u`` (N, C, nsp) in PyTorch's sample order (2-d: W, H)."""
    nsp = x.ndim - 2
    k, osz = _t(kernel_size, nsp), _t(output_size, nsp)
    order = (1, 0) if nsp == 2 else tuple(range(nsp))
    vals = np.zeros(x.shape[:2] + osz)
    idx = np.zeros(x.shape[:2] + osz, dtype=np.int64)
    for b, c in itertools.product(range(x.shape[0]), range(x.shape[1])):
        windows = [[list(range(st, st + k[d])) for st in _frac_starts(u[b, c, order[d]], x.shape[2 + d], osz[d], k[d])]
                   for d in range(nsp)]
        v, i = _window_max(x[b:b + 1, c:c + 1], windows)
        vals[b, c], idx[b, c] = v[0, 0], i[0, 0]
    return vals, idx


def _fractional(nsp):
    fn = F.fractional_max_pool2d_with_indices if nsp == 2 else F.fractional_max_pool3d_with_indices

    def op(x, k, output_size, u):  # the samples ride in kwargs: fixed, neither batched nor differentiated
        return fn(x, k, output_size=output_size, _random_samples=lucid.tensor(u, device=x.device))

    return op


def ref_channel_shuffle(x, groups):
    n, c = x.shape[:2]
    return x.reshape((n, groups, c // groups) + x.shape[2:]).swapaxes(1, 2).reshape(x.shape)


def ref_grouped_mm(a, b, offs=None):
    if offs is None:
        return a @ b
    starts = np.concatenate([[0], offs[:-1]])
    if a.ndim == 2 and b.ndim == 3:
        out = np.zeros((a.shape[0], b.shape[2]))
        for g, (s, e) in enumerate(zip(starts, offs)):
            out[s:e] = a[s:e] @ b[g]
        return out
    if a.ndim == 3:
        out = np.zeros((a.shape[1], b.shape[1]))
        for g, (s, e) in enumerate(zip(starts, offs)):
            out[:, s:e] = a[g] @ b[:, s:e]
        return out
    return np.stack([a[:, s:e] @ b[s:e] for s, e in zip(starts, offs)])


def _offs(*v):
    return np.array(v, dtype=np.int32)


def _grouped_mm_samples(rng):
    return [
        Sample((floats(rng, 5, 3), floats(rng, 2, 3, 2), _offs(2, 4)), name="2d x 3d, a tail row"),
        Sample((floats(rng, 2, 2, 3), floats(rng, 3, 4), _offs(1, 4)), name="3d x 2d"),
        Sample((floats(rng, 2, 4), floats(rng, 4, 3), _offs(0, 3)), name="2d x 2d, an empty group"),
    ]


OPS = [
    OpInfo("max_pool3d_with_indices", lambda x, k, **kw: F.max_pool3d_with_indices(x, k, **kw), ref_max_pool_idx,
           lambda rng: [Sample((away_from_ties(rng, 1, 2, 3, 2, 3), 2), {"stride": 1}),
                        Sample((away_from_ties(rng, 1, 1, 3, 3, 2), 2), {"stride": 2, "padding": 1})],
           out_index=0),
    OpInfo("adaptive_max_pool1d_with_indices", F.adaptive_max_pool1d_with_indices, ref_adaptive_max_idx,
           lambda rng: [Sample((away_from_ties(rng, 2, 2, 5), 3))], out_index=0),
    OpInfo("adaptive_max_pool2d_with_indices", F.adaptive_max_pool2d_with_indices, ref_adaptive_max_idx,
           lambda rng: [Sample((away_from_ties(rng, 1, 2, 5, 4), (2, 3))),
                        Sample((away_from_ties(rng, 2, 1, 3, 3), 1))],
           out_index=0),
    OpInfo("adaptive_max_pool3d_with_indices", F.adaptive_max_pool3d_with_indices, ref_adaptive_max_idx,
           lambda rng: [Sample((away_from_ties(rng, 1, 1, 3, 4, 3), (2, 3, 2)))], out_index=0),
    OpInfo("fractional_max_pool2d_with_indices", _fractional(2), ref_fractional_idx,
           lambda rng: [Sample((away_from_ties(rng, 1, 2, 5, 6), 2, (3, 4)),
                                {"u": rng.uniform(0, 1, (1, 2, 2))})],
           out_index=0),
    OpInfo("fractional_max_pool3d_with_indices", _fractional(3), ref_fractional_idx,
           lambda rng: [Sample((away_from_ties(rng, 1, 1, 4, 4, 5), 2, (2, 3, 3)),
                                {"u": rng.uniform(0, 1, (1, 1, 3))})],
           out_index=0),
    OpInfo("native_channel_shuffle", F.native_channel_shuffle, ref_channel_shuffle,
           lambda rng: [Sample((floats(rng, 2, 4, 3), 2)), Sample((floats(rng, 1, 6, 2, 2), 3))]),
    OpInfo("grouped_mm", lambda a, b, offs: F.grouped_mm(a, b, offs=offs), ref_grouped_mm, _grouped_mm_samples),
    OpInfo("grouped_mm_3d", F.grouped_mm, ref_grouped_mm,
           lambda rng: [Sample((floats(rng, 2, 2, 3), floats(rng, 2, 3, 2)))]),
]
