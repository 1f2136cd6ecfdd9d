"""Op database entries for the strided views (issue 10): unfold, as_strided and their adjoints."""
import numpy as np

import lucid
from opinfo import OpInfo, Sample, floats


def _np_unfold(x, dim, size, step):
    win = np.lib.stride_tricks.sliding_window_view(x, size, axis=dim)
    return win[(slice(None),) * (dim % x.ndim) + (slice(None, None, step),)].copy()


def _np_as_strided(x, size, stride, offset=0):
    flat = np.ascontiguousarray(x).reshape(-1)
    return np.lib.stride_tricks.as_strided(flat[offset:], size, tuple(s * 8 for s in stride)).copy()


def _np_unfold_adjoint(g, shape, dim, size, step):
    out = np.zeros(shape)
    for i in range(g.shape[dim]):
        for k in range(size):
            src = np.take(np.take(g, i, axis=dim), k, axis=-1)
            idx = [slice(None)] * len(shape)
            idx[dim] = i * step + k
            out[tuple(idx)] += src
    return out


OPS = [
    OpInfo("unfold", lambda x, d, s, st: x.unfold(d, s, st), _np_unfold,
           lambda rng: [Sample((floats(rng, 7), 0, 3, 2)), Sample((floats(rng, 2, 5), 1, 2, 1)),
                        Sample((floats(rng, 4, 3), -2, 4, 3)), Sample((floats(rng, 3, 2), 0, 0, 1), name="empty")]),
    OpInfo("unfold_adjoint", lambda g, sh, d, s, st: lucid._core.primitive.TN.unfold_adjoint(
        g, shape=sh, dim=d, size=s, step=st), _np_unfold_adjoint,
           lambda rng: [Sample((floats(rng, 3, 3), (7,), 0, 3, 2)), Sample((floats(rng, 2, 4, 2), (2, 5), 1, 2, 1))]),
    OpInfo("as_strided", lambda x, sz, st, o: lucid.as_strided(x, sz, st, o), _np_as_strided,
           lambda rng: [Sample((floats(rng, 6), (2, 3), (1, 1), 0)), Sample((floats(rng, 2, 4), (3, 2), (2, 3), 0)),
                        Sample((floats(rng, 3, 3), (3,), (4,), 0), name="diagonal"),
                        Sample((floats(rng, 4), (2, 2), (0, 1), 2), name="zero stride")]),
]
