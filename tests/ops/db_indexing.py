"""Op database entries for the indexing ops (gather/scatter family, masks, take, batched getitem).

Integer index arrays are sample arguments, so the vmap checks also batch them: that
exercises the batched-index rules (see NOTE [Batched index tensors]).
"""
import numpy as np

import lucid
from opinfo import OpInfo, Sample, floats

I = lambda *v: np.array(v, dtype=np.int64)  # noqa: E731
MASK = np.array([[True, False, True], [False, False, True]])


def _np_gather(x, dim, idx):
    dim = dim % x.ndim
    grids = np.indices(idx.shape, sparse=True)
    key = tuple(idx if d == dim else grids[d] for d in range(x.ndim))
    return x[key]


def _np_scatter(x, dim, idx, src, add=False):
    dim = dim % x.ndim
    out = x.copy()
    grids = np.indices(idx.shape, sparse=True)
    key = tuple(idx if d == dim else grids[d] for d in range(x.ndim))
    src = src[tuple(slice(0, n) for n in idx.shape)] if isinstance(src, np.ndarray) else src
    if add:
        np.add.at(out, key, src)
    else:
        out[key] = src
    return out


def _np_index_add(x, dim, idx, src, alpha=1):
    out = x.copy()
    np.add.at(np.moveaxis(out, dim, 0), idx, np.moveaxis(src * alpha, dim, 0))
    return out


OPS = [
    OpInfo("gather", lambda x, i: lucid.gather(x, 1, i), lambda x, i: _np_gather(x, 1, i),
           lambda rng: [Sample((floats(rng, 2, 3), I([2, 0, 2], [1, 1, 0]))),
                        Sample((floats(rng, 3, 3), I([0], [2])), name="smaller index")]),
    OpInfo("gather_neg_dim", lambda x, i: x.gather(-3, i), lambda x, i: _np_gather(x, -3, i),
           lambda rng: [Sample((floats(rng, 3, 2, 2), I([[2, 0], [1, 1]], [[0, 0], [2, 1]])))]),
    OpInfo("gather_empty", lambda x, i: x.gather(0, i), lambda x, i: _np_gather(x, 0, i),
           lambda rng: [Sample((floats(rng, 2, 3), np.zeros((0, 3), np.int64)))]),
    OpInfo("scatter", lambda x, i, s: lucid.scatter(x, 0, i, s), lambda x, i, s: _np_scatter(x, 0, i, s),
           lambda rng: [Sample((floats(rng, 3, 2), I([2, 0], [0, 1]), floats(rng, 2, 2))),
                        Sample((floats(rng, 3, 3), I([1, 2]), floats(rng, 2, 3)), name="smaller index")]),
    OpInfo("scatter_value", lambda x, i: x.scatter(1, i, 0.5), lambda x, i: _np_scatter(x, 1, i, 0.5),
           lambda rng: [Sample((floats(rng, 2, 3), I([2], [0])))]),
    OpInfo("scatter_add", lambda x, i, s: x.scatter_add(-1, i, s), lambda x, i, s: _np_scatter(x, -1, i, s, True),
           lambda rng: [Sample((floats(rng, 2, 3), I([0, 0, 2], [1, 1, 1]), floats(rng, 2, 3))),
                        Sample((floats(rng, 2, 3), I([2, 2], [0, 1]), floats(rng, 2, 4)), name="src larger")]),
    OpInfo("index_select", lambda x, i: lucid.index_select(x, 1, i), lambda x, i: np.take(x, i, 1),
           lambda rng: [Sample((floats(rng, 2, 3), I(2, 0, 2, 1))), Sample((floats(rng, 3, 2), I(1, 1))),
                        Sample((floats(rng, 2, 3), np.zeros(0, np.int64)), name="empty")]),
    OpInfo("index_select_neg", lambda x, i: x.index_select(-2, i), lambda x, i: np.take(x, i, -2),
           lambda rng: [Sample((floats(rng, 3, 2), I(2, 0)))]),
    OpInfo("index_add", lambda x, i, s: lucid.index_add(x, 0, i, s, alpha=2.0),
           lambda x, i, s: _np_index_add(x, 0, i, s, 2.0),
           lambda rng: [Sample((floats(rng, 3, 2), I(0, 2, 0), floats(rng, 3, 2)))]),
    OpInfo("index_add_dim1", lambda x, i, s: x.index_add(-1, i, s), lambda x, i, s: _np_index_add(x, 1, i, s),
           lambda rng: [Sample((floats(rng, 2, 3), I(1, 1), floats(rng, 2, 2)))]),
    OpInfo("masked_fill", lambda x, m: lucid.masked_fill(x, lucid.tensor(MASK, device=x.device), -1.5),
           lambda x, m: np.where(MASK, -1.5, x), lambda rng: [Sample((floats(rng, 2, 3), None))]),
    OpInfo("masked_fill_tensor", lambda x, v: x.masked_fill(lucid.tensor(MASK[0], device=x.device), v),
           lambda x, v: np.where(MASK[0], v, x), lambda rng: [Sample((floats(rng, 2, 3), np.asarray(0.25)))],
           vmap=False),
    OpInfo("masked_select", lambda x, m: lucid.masked_select(x, m), lambda x, m: np.broadcast_to(x, m.shape)[m],
           lambda rng: [Sample((floats(rng, 2, 3), MASK)), Sample((floats(rng, 3), MASK), name="broadcast"),
                        Sample((floats(rng, 2, 3), np.zeros((2, 3), bool)), name="none selected")], vmap=False),
    OpInfo("take", lambda x, i: lucid.take(x, i), lambda x, i: np.take(x, i),
           lambda rng: [Sample((floats(rng, 2, 3), I([0, 5], [-1, 3]))), Sample((floats(rng, 4), I(3)))]),
    OpInfo("take_along_dim", lambda x, i: lucid.take_along_dim(x, i, 1), lambda x, i: np.take_along_axis(x, i, 1),
           lambda rng: [Sample((floats(rng, 2, 3), I([2, 0], [1, 1]))),
                        Sample((floats(rng, 2, 3), I([2, 0, 1])), name="broadcast")]),
    OpInfo("take_along_dim_none", lambda x, i: x.take_along_dim(i), lambda x, i: np.take_along_axis(x.ravel(), i.ravel(), 0),
           lambda rng: [Sample((floats(rng, 2, 3), I([5, 0], [1, 4])))]),
    OpInfo("nonzero", lambda x: lucid.nonzero(x), lambda x: np.argwhere(x),
           lambda rng: [Sample((np.array([[0.0, 1.5], [2.0, 0.0]]),)), Sample((np.zeros((2, 0)),))],
           grad=False, vmap=False),
    OpInfo("nonzero_tuple", lambda x: lucid.nonzero(x, as_tuple=True), lambda x: np.nonzero(x),
           lambda rng: [Sample((np.array([[0.0, 1.5], [2.0, 0.0]]),))], grad=False, vmap=False),
    OpInfo("argwhere", lambda x: x.argwhere(), lambda x: np.argwhere(x),
           lambda rng: [Sample((np.array([0.0, 3.0, 0.0, 1.0]),))], grad=False, vmap=False),
    # getitem with index tensors as arguments: under vmap they are batched too.
    OpInfo("getitem_idx_front", lambda x, i: x[i], lambda x, i: x[i],
           lambda rng: [Sample((floats(rng, 3, 2), I([0, 2], [1, 1])))]),
    OpInfo("getitem_idx_middle", lambda x, i: x[:, i], lambda x, i: x[:, i],
           lambda rng: [Sample((floats(rng, 2, 3, 2), I(2, 0, 2)))]),
    OpInfo("getitem_idx_pair", lambda x, i, j: x[i, :, j], lambda x, i, j: x[i, :, j],
           lambda rng: [Sample((floats(rng, 3, 2, 2), I(0, 2), I([1], [0])))]),
    OpInfo("getitem_idx_none_ellipsis", lambda x, i: x[None, ..., i, 1:], lambda x, i: x[None, ..., i, 1:],
           lambda rng: [Sample((floats(rng, 2, 3, 3), I(1, 0)))]),
    OpInfo("getitem_idx_int", lambda x, i: x[1:, i, 0], lambda x, i: x[1:, i, 0],
           lambda rng: [Sample((floats(rng, 3, 3, 2), I([2, 0])))]),
    OpInfo("getitem_idx_mask", lambda x, i: x[i, lucid.tensor(MASK[1])], lambda x, i: x[i, MASK[1]],
           lambda rng: [Sample((floats(rng, 2, 3), I(1, 0)))]),
    OpInfo("getitem_mask", lambda x: x[lucid.tensor(MASK)], lambda x: x[MASK],
           lambda rng: [Sample((floats(rng, 2, 3),))]),
]
