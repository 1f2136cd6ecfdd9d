"""Op database entries for the shape and view ops (split ... meshgrid)."""
import numpy as np

import lucid
from opinfo import OpInfo, Sample, floats


def _np_split(x, s, dim=0):
    if isinstance(s, int):
        s = list(range(s, x.shape[dim], s))
    else:
        s = list(np.cumsum(s)[:-1])
    return tuple(np.split(x, s, axis=dim))


def _np_pad(x, pad, mode="constant", value=0.0):
    k = len(pad) // 2
    widths = [(0, 0)] * (x.ndim - k) + [(pad[2 * i], pad[2 * i + 1]) for i in reversed(range(k))]
    nmode = {"replicate": "edge", "circular": "wrap"}.get(mode, mode)
    if mode == "constant":
        return np.pad(x, widths, constant_values=value)
    return np.pad(x, widths, mode=nmode)


def _np_diag_embed(x, offset=0, dim1=-2, dim2=-1):
    n = x.shape[-1] + abs(offset)
    out = np.zeros(x.shape[:-1] + (n, n))
    for i in range(x.shape[-1]):
        r, c = (i, i + offset) if offset >= 0 else (i - offset, i)
        out[..., r, c] = x[..., i]
    return np.moveaxis(out, (-2, -1), (dim1, dim2))


def _np_meshgrid(a, b, c, indexing):
    return tuple(np.meshgrid(a, b, c, indexing=indexing))


def _one(x):
    return [Sample((x,))]


OPS = [
    OpInfo("split_int", lambda x: x.split(2, dim=-1), lambda x: _np_split(x, 2, -1),
           lambda rng: [Sample((floats(rng, 2, 5),))], out_index=2),
    OpInfo("split_sizes", lambda x: lucid.split(x, [1, 0, 2], 0), lambda x: _np_split(x, [1, 0, 2], 0),
           lambda rng: [Sample((floats(rng, 3, 2),))], out_index=2),
    OpInfo("chunk", lambda x: x.chunk(3, 1), lambda x: tuple(np.array_split(x, [2, 4], 1)),
           lambda rng: [Sample((floats(rng, 2, 5),))], out_index=0),
    OpInfo("unbind", lambda x: lucid.unbind(x, -1), lambda x: tuple(np.moveaxis(x, -1, 0)),
           lambda rng: [Sample((floats(rng, 2, 3),))], out_index=1),
    OpInfo("narrow", lambda x, d, s, n: x.narrow(d, s, n), lambda x, d, s, n: np.take(x, range(s % x.shape[d], s % x.shape[d] + n), d),
           lambda rng: [Sample((floats(rng, 3, 4), 1, 1, 2)), Sample((floats(rng, 3, 4), -2, -2, 2)),
                        Sample((floats(rng, 3, 4), 0, 1, 0))]),
    OpInfo("select", lambda x, d, i: x.select(d, i), lambda x, d, i: np.take(x, i, d),
           lambda rng: [Sample((floats(rng, 3, 4), 1, -1)), Sample((floats(rng, 3), 0, 2))]),
    OpInfo("view_as", lambda x, y: x.view_as(y), lambda x, y: x.reshape(y.shape),
           lambda rng: [Sample((floats(rng, 2, 3), floats(rng, 3, 2)))], grad=False),
    OpInfo("reshape_as", lambda x: x.reshape_as(lucid.zeros(6)), lambda x: x.reshape(6),
           lambda rng: _one(floats(rng, 2, 3))),
    OpInfo("squeeze_dims", lambda x: x.squeeze((0, -1, 1)), lambda x: np.squeeze(x, (0, 3)),
           lambda rng: _one(floats(rng, 1, 2, 3, 1))),
    OpInfo("flip", lambda x, d: lucid.flip(x, d), lambda x, d: np.flip(x, d),
           lambda rng: [Sample((floats(rng, 2, 3), (0, -1))), Sample((floats(rng, 2, 3), 1)),
                        Sample((floats(rng, 0, 3), 0))]),
    OpInfo("roll", lambda x, s, d: x.roll(s, d), lambda x, s, d: np.roll(x, s, d),
           lambda rng: [Sample((floats(rng, 2, 3), (1, -4), (0, -1))), Sample((floats(rng, 2, 3), 2, None)),
                        Sample((floats(rng, 3), 1, 0))]),
    OpInfo("repeat", lambda x, s: x.repeat(*s), lambda x, s: np.tile(x, s),
           lambda rng: [Sample((floats(rng, 2, 3), (2, 1, 2))), Sample((floats(rng, 3), (2,))),
                        Sample((floats(rng, 2), (0, 1)))]),
    OpInfo("repeat_0d", lambda x: x.repeat(2, 3), lambda x: np.tile(x, (2, 3)),
           lambda rng: _one(np.asarray(floats(rng)))),
    OpInfo("tile", lambda x, s: x.tile(s), lambda x, s: np.tile(x, s),
           lambda rng: [Sample((floats(rng, 2, 3), (2,))), Sample((floats(rng, 2), (2, 2)))]),
    OpInfo("repeat_interleave_int", lambda x, r, d: x.repeat_interleave(r, dim=d),
           lambda x, r, d: np.repeat(x, r, axis=d),
           lambda rng: [Sample((floats(rng, 2, 3), 2, -1)), Sample((floats(rng, 2, 3), 3, None)),
                        Sample((floats(rng, 2), 0, 0))]),
    OpInfo("repeat_interleave_tensor", lambda x: x.repeat_interleave(lucid.tensor([1, 0, 2]), dim=1),
           lambda x: np.repeat(x, [1, 0, 2], axis=1), lambda rng: _one(floats(rng, 2, 3))),
    OpInfo("pad_constant", lambda x, p, v: lucid.pad(x, p, value=v), lambda x, p, v: _np_pad(x, p, value=v),
           lambda rng: [Sample((floats(rng, 2, 3), (1, 2), 0.5)), Sample((floats(rng, 2, 3), (0, 1, 2, 0), 0.0)),
                        Sample((floats(rng, 1, 2, 2), (1, 1, 1, 1, 1, 1), 0.0))]),
    OpInfo("pad_negative", lambda x: lucid.pad(x, (-1, 2, 1, -1)),
           lambda x: np.pad(x[:-1, 1:], ((1, 0), (0, 2))), lambda rng: _one(floats(rng, 3, 3))),
    OpInfo("pad_reflect", lambda x: lucid.pad(x, (2, 1), mode="reflect"), lambda x: _np_pad(x, (2, 1), "reflect"),
           lambda rng: _one(floats(rng, 2, 4))),
    OpInfo("pad_replicate", lambda x: lucid.pad(x, (1, 2, 2, 0), mode="replicate"),
           lambda x: _np_pad(x, (1, 2, 2, 0), "replicate"), lambda rng: _one(floats(rng, 1, 2, 3))),
    OpInfo("pad_circular", lambda x: lucid.pad(x, (3, 1), mode="circular"), lambda x: _np_pad(x, (3, 1), "circular"),
           lambda rng: _one(floats(rng, 2, 3))),
    OpInfo("tril", lambda x, k: x.tril(k), lambda x, k: np.tril(x, k),
           lambda rng: [Sample((floats(rng, 3, 4), 0)), Sample((floats(rng, 2, 3, 3), -1)), Sample((floats(rng, 2, 3), 1))]),
    OpInfo("triu", lambda x, k: lucid.triu(x, k), lambda x, k: np.triu(x, k),
           lambda rng: [Sample((floats(rng, 3, 4), 0)), Sample((floats(rng, 2, 3, 3), 1)), Sample((floats(rng, 4, 2), -2))]),
    OpInfo("diagonal", lambda x, o, a, b: x.diagonal(o, a, b), lambda x, o, a, b: np.diagonal(x, o, a, b),
           lambda rng: [Sample((floats(rng, 3, 4), 0, 0, 1)), Sample((floats(rng, 3, 4), 1, 1, 0)),
                        Sample((floats(rng, 2, 3, 4), -1, -1, 0)), Sample((floats(rng, 2, 2), 5, 0, 1))]),
    OpInfo("diag", lambda x, k: lucid.diag(x, k), lambda x, k: np.diag(x, k),
           lambda rng: [Sample((floats(rng, 3), 0)), Sample((floats(rng, 3), -1)), Sample((floats(rng, 3, 4), 1)),
                        Sample((floats(rng, 3, 3), 0))]),
    OpInfo("diag_embed", lambda x, o, a, b: lucid.diag_embed(x, o, a, b), _np_diag_embed,
           lambda rng: [Sample((floats(rng, 2, 3), 0, -2, -1)), Sample((floats(rng, 2, 3), 1, 0, 2)),
                        Sample((floats(rng, 3), -1, 1, 0))]),
    OpInfo("meshgrid_ij", lambda a, b, c: lucid.meshgrid(a, b, c, indexing="ij"),
           lambda a, b, c: _np_meshgrid(a, b, c, "ij"),
           lambda rng: [Sample((floats(rng, 2), floats(rng, 3), floats(rng, 1)))], out_index=1),
    OpInfo("meshgrid_xy", lambda a, b, c: lucid.meshgrid([a, b, c], indexing="xy"),
           lambda a, b, c: _np_meshgrid(a, b, c, "xy"),
           lambda rng: [Sample((floats(rng, 2), floats(rng, 3), floats(rng, 1)))], out_index=0),
    OpInfo("expand", lambda x: x.expand(2, -1, 3), lambda x: np.broadcast_to(x, (2, 4, 3)),
           lambda rng: _one(floats(rng, 4, 1))),
]
