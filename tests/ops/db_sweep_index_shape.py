"""Op database entries for the fixes of the indexing / shape / promotion sweep: integer indices
beside index tensors (PyTorch applies the ints first), scatter's ``reduce=`` keyword,
``broadcast_to`` with -1, ``ldexp`` with mixed dtypes and ``scatter_reduce`` amax/amin."""
import numpy as np

import lucid
from lucid.ops.inplace import index_put_value
from opinfo import OpInfo, Sample, away_from_ties, floats

I = lambda *v: np.array(v, dtype=np.int64)  # noqa: E731


def _np_put_int_beside(x, v, i):
    out = x.copy()
    out[0][:, i] = v  # out[0] is a view: the ints first, as PyTorch
    return out


def _np_scatter_kw(x, dim, index, src, reduce):
    out = x.copy()
    for pos in np.ndindex(index.shape):
        tgt = list(pos)
        tgt[dim] = index[pos]
        out[tuple(tgt)] = out[tuple(tgt)] + src[pos] if reduce == "add" else out[tuple(tgt)] * src[pos]
    return out


def _np_amax_self(x, index, src):
    out = x.copy()
    for pos in np.ndindex(index.shape):
        tgt = (index[pos],) + pos[1:]
        out[tgt] = max(out[tgt], src[pos])
    return out


OPS = [
    OpInfo("getitem_int_then_idx", lambda x, i: x[0, :, i], lambda x, i: x[0][:, i],
           lambda rng: [Sample((floats(rng, 2, 3, 4), I(3, 0))), Sample((floats(rng, 2, 3, 4), I([1, 2], [0, 3])), name="2-d")]),
    OpInfo("getitem_int_none_idx", lambda x, i: x[:, 1, None, i], lambda x, i: x[:, 1][:, None, i],
           lambda rng: [Sample((floats(rng, 2, 3, 4), I(2, 0, 2)))]),
    OpInfo("setitem_int_then_idx", lambda x, v, i: index_put_value(x, (0, slice(None), i), v), _np_put_int_beside,
           lambda rng: [Sample((floats(rng, 2, 3, 4), floats(rng, 3, 2), I(3, 1))),
                        Sample((floats(rng, 2, 3, 4), floats(rng, 2), I(0, 2)), name="broadcast")]),
    OpInfo("scatter_reduce_kw_add", lambda x, d, i, s: lucid.scatter(x, d, i, s, reduce="add"),
           lambda x, d, i, s: _np_scatter_kw(x, d, i, s, "add"),
           lambda rng: [Sample((floats(rng, 3, 2), 0, I([0, 1], [0, 0], [2, 0]), floats(rng, 3, 2)))]),
    OpInfo("scatter_reduce_kw_multiply", lambda x, d, i, s: lucid.scatter(x, d, i, s, reduce="multiply"),
           lambda x, d, i, s: _np_scatter_kw(x, d, i, s, "multiply"),
           lambda rng: [Sample((floats(rng, 2, 3), 1, I([0, 0], [2, 1]), floats(rng, 2, 2)))]),
    OpInfo("scatter_reduce_amax_self", lambda x, i, s: lucid.scatter_reduce(x, 0, i, s, "amax"), _np_amax_self,
           lambda rng: [Sample((away_from_ties(rng, 3, 2), I([0, 2], [0, 0], [2, 1]), away_from_ties(rng, 3, 2) + 0.05))],
           gradgrad=False),
    OpInfo("broadcast_to_keep", lambda x: lucid.broadcast_to(x, (2, -1, 3)), lambda x: np.broadcast_to(x, (2, 4, 3)),
           lambda rng: [Sample((floats(rng, 4, 1),))]),
    OpInfo("ldexp_int_other", lambda x, e: lucid.ldexp(x, e), lambda x, e: x * 2.0 ** e,
           lambda rng: [Sample((floats(rng, 3), np.array([1, -2, 3], dtype=np.int32)))]),
]
