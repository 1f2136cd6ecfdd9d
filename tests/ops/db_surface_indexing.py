"""Op database entries for the indexing/scatter surface of issue 10 (lucid/ops/scatter_extra.py)."""
import numpy as np

import lucid
from opinfo import OpInfo, Sample, floats

I = lambda *v: np.array(v, dtype=np.int64)  # noqa: E731


def _np_index_fill(x, dim, idx, v):
    out = x.copy()
    sl = [slice(None)] * x.ndim
    sl[dim] = idx
    out[tuple(sl)] = v
    return out


def _np_index_copy(x, dim, idx, src):
    out = np.moveaxis(x.copy(), dim, 0)
    out[idx] = np.moveaxis(src, dim, 0)
    return np.moveaxis(out, 0, dim)


def _np_index_put(x, rows, cols, v, acc):
    out = x.copy()
    if acc:
        np.add.at(out, (rows, cols), v)
    else:
        out[rows, cols] = v
    return out


def _np_put(x, idx, src):
    out = x.copy().reshape(-1)
    out[idx] = src
    return out.reshape(x.shape)


def _np_masked_scatter(x, mask, src):
    out = x.copy()
    out[mask] = src.reshape(-1)[: mask.sum()]
    return out


def _np_scatter_reduce(x, dim, index, src, reduce, include_self):
    out = x.copy()
    seen = np.zeros(x.shape, bool)
    groups = {}
    for pos in np.ndindex(index.shape):
        tgt = list(pos)
        tgt[dim] = index[pos]
        groups.setdefault(tuple(tgt), []).append(src[pos])
    for tgt, vals in groups.items():
        vals = ([x[tgt]] if include_self else []) + vals
        f = {"sum": np.sum, "prod": np.prod, "mean": np.mean, "amax": np.max, "amin": np.min}[reduce]
        out[tgt] = f(vals)
        seen[tgt] = True
    return out


def _diag_scatter(x, src, offset, d1, d2):
    out = x.copy()
    view = np.diagonal(out, offset, d1, d2)
    view.setflags(write=True)
    view[...] = src
    return out


def _sr_samples(reduce):
    def samples(rng):
        x = floats(rng, 3, 2)
        src = rng.permutation(8).reshape(4, 2) / 8.0 + 0.1  # distinct: amax/amin have no ties
        idx = np.array([[0, 2], [0, 0], [2, 1], [0, 2]])
        return [Sample((x, 0, idx, src, reduce, True)), Sample((x, 0, idx[:3], src, reduce, False)),
                Sample((floats(rng, 2, 3), 1, np.array([[2, 2], [0, 2]]), src[:2], reduce, True), name="dim 1")]

    return samples


OPS = [
    OpInfo("index_fill", lambda x, d, i, v: lucid.index_fill(x, d, i, v), _np_index_fill,
           lambda rng: [Sample((floats(rng, 2, 3), 1, I(0, 2), -1.5)), Sample((floats(rng, 3), 0, I(1), 2.0)),
                        Sample((floats(rng, 2, 3), 1, I(-1, 0), 0.5), name="negative index")]),
    OpInfo("index_copy", lambda x, d, i, s: lucid.index_copy(x, d, i, s), _np_index_copy,
           lambda rng: [Sample((floats(rng, 3, 2), 0, I(2, 0), floats(rng, 2, 2))),
                        Sample((floats(rng, 2, 3), 1, I(1), floats(rng, 2, 1))),
                        # a repeated position takes its last slice (NumPy's assignment, PyTorch on the CPU)
                        Sample((floats(rng, 2, 3), 1, I(1, 0, 1), floats(rng, 2, 3)), name="repeated index")]),
    OpInfo("index_put", lambda x, r, c, v, a: lucid.index_put(x, (r, c), v, accumulate=a),
           _np_index_put,
           lambda rng: [Sample((floats(rng, 3, 3), I(0, 2), I(1, 1), floats(rng, 2), False)),
                        Sample((floats(rng, 3, 3), I(0, 0, 2), I(1, 1, 0), floats(rng, 3), True), name="accumulate")]),
    OpInfo("put", lambda x, i, s: lucid.put(x, i, s), _np_put,
           lambda rng: [Sample((floats(rng, 2, 3), I(0, -1, 3), floats(rng, 3)))]),
    OpInfo("masked_scatter", lambda x, m, s: lucid.masked_scatter(x, m, s), _np_masked_scatter,
           lambda rng: [Sample((floats(rng, 2, 3), np.array([[True, False, True], [False, False, True]]),
                                floats(rng, 4)))]),
    OpInfo("diagonal_scatter", lambda x, s, o: lucid.diagonal_scatter(x, s, o),
           lambda x, s, o: _diag_scatter(x, s, o, 0, 1),
           lambda rng: [Sample((floats(rng, 3, 3), floats(rng, 3), 0)), Sample((floats(rng, 2, 3), floats(rng, 2), 1))]),
    OpInfo("select_scatter", lambda x, s, d, i: lucid.select_scatter(x, s, d, i),
           lambda x, s, d, i: _np_index_copy(x, d, [i], np.expand_dims(s, d)),
           lambda rng: [Sample((floats(rng, 2, 3), floats(rng, 2), 1, 2))]),
    OpInfo("slice_scatter", lambda x, s: lucid.slice_scatter(x, s, 1, 0, 3, 2),
           lambda x, s: _np_index_copy(x, 1, [0, 2], s),
           lambda rng: [Sample((floats(rng, 2, 4), floats(rng, 2, 2)))]),
] + [
    OpInfo(f"scatter_reduce_{r}", lambda x, d, i, s, r, inc: lucid.scatter_reduce(x, d, i, s, r, include_self=inc),
           _np_scatter_reduce, _sr_samples(r), gradgrad=r not in ("amax", "amin"))
    for r in ("sum", "prod", "mean", "amax", "amin")
]
