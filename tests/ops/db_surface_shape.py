"""Op database entries for the NumPy-style joining/splitting composites (issue 10)."""
import numpy as np

import lucid
from opinfo import OpInfo, Sample, floats


def _two(rng, *shapes):
    return [Sample(tuple(floats(rng, *s) for s in shapes))]


OPS = [
    OpInfo("hstack", lambda a, b: lucid.hstack([a, b]), lambda a, b: np.hstack([a, b]),
           lambda rng: _two(rng, (2, 3), (2, 1)) + _two(rng, (3,), (2,))),
    OpInfo("vstack", lambda a, b: lucid.vstack([a, b]), lambda a, b: np.vstack([a, b]),
           lambda rng: _two(rng, (2, 3), (1, 3)) + _two(rng, (3,), (3,))),
    OpInfo("dstack", lambda a, b: lucid.dstack([a, b]), lambda a, b: np.dstack([a, b]),
           lambda rng: _two(rng, (2, 3), (2, 3)) + _two(rng, (2,), (2,))),
    OpInfo("column_stack", lambda a, b: lucid.column_stack([a, b]), lambda a, b: np.column_stack([a, b]),
           lambda rng: _two(rng, (3,), (3, 2)) + _two(rng, (), ())),
    OpInfo("atleast_3d", lucid.atleast_3d, np.atleast_3d,
           lambda rng: [Sample((floats(rng),)), Sample((floats(rng, 2),)), Sample((floats(rng, 2, 3),))]),
    OpInfo("hsplit", lambda x, s: lucid.hsplit(x, s), lambda x, s: tuple(np.hsplit(x, s)),
           lambda rng: [Sample((floats(rng, 2, 4), 2)), Sample((floats(rng, 5), [1, 3]))]),
    OpInfo("vsplit", lambda x, s: lucid.vsplit(x, s), lambda x, s: tuple(np.vsplit(x, s)),
           lambda rng: [Sample((floats(rng, 4, 2), [1]))]),
    OpInfo("dsplit", lambda x, s: lucid.dsplit(x, s), lambda x, s: tuple(np.dsplit(x, s)),
           lambda rng: [Sample((floats(rng, 1, 2, 4), 2))]),
    OpInfo("fliplr", lucid.fliplr, np.fliplr, lambda rng: [Sample((floats(rng, 2, 3),))]),
    OpInfo("flipud", lucid.flipud, np.flipud, lambda rng: [Sample((floats(rng, 3, 2),))]),
    OpInfo("rot90", lambda x, k, d: lucid.rot90(x, k, d), lambda x, k, d: np.rot90(x, k, d),
           lambda rng: [Sample((floats(rng, 2, 3), 1, (0, 1))), Sample((floats(rng, 2, 3, 2), -1, (2, 0))),
                        Sample((floats(rng, 2, 3), 2, (1, 0))), Sample((floats(rng, 2, 3), 4, (0, 1)))]),
    OpInfo("ravel", lambda x: x.t().ravel(), lambda x: x.T.ravel(), lambda rng: [Sample((floats(rng, 2, 3),))]),
    OpInfo("diff", lambda x, n, d: lucid.diff(x, n, d), lambda x, n, d: np.diff(x, n, d),
           lambda rng: [Sample((floats(rng, 5), 1, -1)), Sample((floats(rng, 3, 4), 2, 0)),
                        Sample((floats(rng, 3, 4), 3, 1))]),
    OpInfo("diff_prepend", lambda x, p, a: lucid.diff(x, prepend=p, append=a),
           lambda x, p, a: np.diff(x, prepend=p, append=a),
           lambda rng: [Sample((floats(rng, 2, 3), floats(rng, 2, 1), floats(rng, 2, 2)))]),
    OpInfo("block_diag", lambda a, b, c: lucid.block_diag(a, b, c),
           lambda a, b, c: _np_block_diag(a, b, c),
           lambda rng: [Sample((floats(rng, 2, 2), floats(rng, 3), floats(rng)))]),
    OpInfo("cartesian_prod", lambda a, b: lucid.cartesian_prod(a, b),
           lambda a, b: np.array([[x, y] for x in a for y in b]),
           lambda rng: [Sample((floats(rng, 3), floats(rng, 2)))]),
    OpInfo("combinations", lambda x, r, w: lucid.combinations(x, r, w), None,
           lambda rng: [Sample((floats(rng, 4), 2, False)), Sample((floats(rng, 3), 2, True))]),
]


def _np_block_diag(*ms):
    ms = [np.atleast_2d(m) for m in ms]
    out = np.zeros((sum(m.shape[0] for m in ms), sum(m.shape[1] for m in ms)))
    r = c = 0
    for m in ms:
        out[r:r + m.shape[0], c:c + m.shape[1]] = m
        r, c = r + m.shape[0], c + m.shape[1]
    return out
