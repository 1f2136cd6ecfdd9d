"""Op database entries for convolution, pooling, unfold/fold and interpolation.

References are naive loops over output positions (fine here: shapes are tiny).
"""
import itertools

import numpy as np

import lucid
import lucid.nn.functional as F
from opinfo import OpInfo, Sample, away_from_ties, floats

# ------------------------------------------------------------------ references


def _t(v, n):
    return (v,) * n if isinstance(v, int) else tuple(v)


def ref_conv(x, w, b=None, stride=1, padding=0, dilation=1, groups=1):
    if x.ndim == w.ndim - 1:  # unbatched
        return ref_conv(x[None], w, b, stride, padding, dilation, groups)[0]
    nsp = x.ndim - 2
    s, d = _t(stride, nsp), _t(dilation, nsp)
    k = w.shape[2:]
    if padding == "same":
        tot = [dd * (kk - 1) for dd, kk in zip(d, k)]
        pads = [(t // 2, t - t // 2) for t in tot]
    else:
        pads = [(p, p) for p in _t(padding, nsp)]
    xp = np.pad(x, [(0, 0), (0, 0)] + pads)
    out_sp = [(n - dd * (kk - 1) - 1) // ss + 1 for n, dd, kk, ss in zip(xp.shape[2:], d, k, s)]
    n, o = x.shape[0], w.shape[0]
    cg, og = w.shape[1], o // groups
    out = np.zeros((n, o) + tuple(out_sp))
    for pos in itertools.product(*[range(m) for m in out_sp]):
        win = tuple(slice(p * ss, p * ss + dd * (kk - 1) + 1, dd) for p, ss, dd, kk in zip(pos, s, d, k))
        for oc in range(o):
            g = oc // og
            patch = xp[(slice(None), slice(g * cg, (g + 1) * cg)) + win]
            out[(slice(None), oc) + pos] = (patch * w[oc]).reshape(n, -1).sum(1)
    if b is not None:
        out += b.reshape((-1,) + (1,) * nsp)
    return out


def ref_conv_transpose(x, w, b=None, stride=1, padding=0, output_padding=0, groups=1, dilation=1):
    nsp = x.ndim - 2
    s, p, op, d = _t(stride, nsp), _t(padding, nsp), _t(output_padding, nsp), _t(dilation, nsp)
    k = w.shape[2:]
    n, cin = x.shape[:2]
    cig, coutg = cin // groups, w.shape[1]
    full = [(m - 1) * ss + dd * (kk - 1) + 1 + oo for m, ss, dd, kk, oo in zip(x.shape[2:], s, d, k, op)]
    y = np.zeros((n, coutg * groups) + tuple(full))
    for pos in itertools.product(*[range(m) for m in x.shape[2:]]):
        for ci in range(cin):
            g = ci // cig
            for kp in itertools.product(*[range(kk) for kk in k]):
                tgt = tuple(pp * ss + kk * dd for pp, ss, kk, dd in zip(pos, s, kp, d))
                y[(slice(None), slice(g * coutg, (g + 1) * coutg)) + tgt] += \
                    x[(slice(None), ci) + pos][:, None] * w[(ci, slice(None)) + kp]
    crop = tuple(slice(pp, f - pp) for pp, f in zip(p, full))
    y = y[(slice(None), slice(None)) + crop]
    if b is not None:
        y += b.reshape((-1,) + (1,) * nsp)
    return y


def _pool_out(n, k, s, p, d, ceil):
    num = n + 2 * p - d * (k - 1) - 1 + (s - 1 if ceil else 0)
    o = num // s + 1
    if ceil and (o - 1) * s >= n + p:
        o -= 1
    return o


def ref_pool(x, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False, kind="max",
             count_include_pad=True):
    nsp = x.ndim - 2
    k = _t(kernel_size, nsp)
    s = k if stride is None else _t(stride, nsp)
    p, d = _t(padding, nsp), _t(dilation, nsp)
    sp = x.shape[2:]
    out_sp = [_pool_out(n, kk, ss, pp, dd, ceil_mode) for n, kk, ss, pp, dd in zip(sp, k, s, p, d)]
    out = np.zeros(x.shape[:2] + tuple(out_sp))
    for pos in itertools.product(*[range(m) for m in out_sp]):
        idx = [[q * ss - pp + j * dd for j in range(kk)] for q, ss, pp, kk, dd in zip(pos, s, p, k, d)]
        inside = [[i for i in ix if 0 <= i < n] for ix, n in zip(idx, sp)]
        vals = x[(slice(None), slice(None)) + np.ix_(*inside)].reshape(x.shape[:2] + (-1,))
        if kind == "max":
            out[(slice(None), slice(None)) + pos] = vals.max(-1)
        else:
            if count_include_pad:
                cnt = np.prod([min(ix[0] + kk, n + pp) - ix[0] for ix, kk, n, pp in zip(idx, k, sp, p)])
            else:
                cnt = vals.shape[-1]
            out[(slice(None), slice(None)) + pos] = vals.sum(-1) / cnt
    return out


def ref_adaptive(x, osz, kind="avg"):
    nsp = x.ndim - 2
    osz = _t(osz, nsp)
    out = np.zeros(x.shape[:2] + osz)
    for pos in itertools.product(*[range(o) for o in osz]):
        sl = tuple(slice(i * n // o, -((-(i + 1) * n) // o)) for i, n, o in zip(pos, x.shape[2:], osz))
        win = x[(slice(None), slice(None)) + sl].reshape(x.shape[:2] + (-1,))
        out[(slice(None), slice(None)) + pos] = win.mean(-1) if kind == "avg" else win.max(-1)
    return out


def ref_unfold(x, kernel_size, dilation=1, padding=0, stride=1):
    k, d, p, s = (_t(v, 2) for v in (kernel_size, dilation, padding, stride))
    xp = np.pad(x, [(0, 0), (0, 0), (p[0], p[0]), (p[1], p[1])])
    oh = (xp.shape[2] - d[0] * (k[0] - 1) - 1) // s[0] + 1
    ow = (xp.shape[3] - d[1] * (k[1] - 1) - 1) // s[1] + 1
    cols = []
    for i, j in itertools.product(range(oh), range(ow)):
        patch = xp[:, :, i * s[0]:i * s[0] + d[0] * (k[0] - 1) + 1:d[0], j * s[1]:j * s[1] + d[1] * (k[1] - 1) + 1:d[1]]
        cols.append(patch.reshape(x.shape[0], -1))
    return np.stack(cols, -1)


def ref_fold(cols, output_size, kernel_size, dilation=1, padding=0, stride=1):
    k, d, p, s = (_t(v, 2) for v in (kernel_size, dilation, padding, stride))
    osz = _t(output_size, 2)
    n, ck, _ = cols.shape
    c = ck // (k[0] * k[1])
    y = np.zeros((n, c, osz[0] + 2 * p[0], osz[1] + 2 * p[1]))
    oh = (y.shape[2] - d[0] * (k[0] - 1) - 1) // s[0] + 1
    ow = (y.shape[3] - d[1] * (k[1] - 1) - 1) // s[1] + 1
    for b, (i, j) in enumerate(itertools.product(range(oh), range(ow))):
        y[:, :, i * s[0]:i * s[0] + d[0] * (k[0] - 1) + 1:d[0], j * s[1]:j * s[1] + d[1] * (k[1] - 1) + 1:d[1]] += \
            cols[:, :, b].reshape(n, c, k[0], k[1])
    return y[:, :, p[0]:p[0] + osz[0], p[1]:p[1] + osz[1]]


def ref_interp(x, size=None, scale_factor=None, mode="nearest", align_corners=None):
    sp = x.shape[2:]
    if size is None:
        size = tuple(int(n * scale_factor) for n in sp)
        scales = [1 / scale_factor] * len(sp)
    else:
        size = _t(size, len(sp))
        scales = [n / o for n, o in zip(sp, size)]
    out = np.zeros(x.shape[:2] + tuple(size))
    for pos in itertools.product(*[range(o) for o in size]):
        if mode == "nearest":
            src = tuple(min(int(np.floor(q * sc)), n - 1) for q, sc, n in zip(pos, scales, sp))
            out[(slice(None), slice(None)) + pos] = x[(slice(None), slice(None)) + src]
            continue
        terms = []
        for q, sc, n, o in zip(pos, scales, sp, size):
            if align_corners:
                f = q * (n - 1) / (o - 1) if o > 1 else 0.0
            else:
                f = max((q + 0.5) * sc - 0.5, 0.0)
            i0 = min(int(np.floor(f)), n - 1)
            i1 = min(i0 + 1, n - 1)
            terms.append(((i0, 1 - (f - i0)), (i1, f - i0)))
        acc = 0
        for combo in itertools.product(*terms):
            wgt = np.prod([c[1] for c in combo])
            acc = acc + wgt * x[(slice(None), slice(None)) + tuple(c[0] for c in combo)]
        out[(slice(None), slice(None)) + pos] = acc
    return out


# ------------------------------------------------------------------ samples


def _conv2d_samples(rng):
    return [
        Sample((floats(rng, 2, 2, 4, 4), floats(rng, 3, 2, 2, 2)), name="plain"),
        Sample((floats(rng, 1, 2, 5, 4), floats(rng, 2, 2, 3, 2), floats(rng, 2)),
               {"stride": (2, 1), "padding": 1}, name="stride pad bias"),
        Sample((floats(rng, 2, 2, 4, 3), floats(rng, 3, 2, 3, 3), floats(rng, 3)),
               {"padding": 1}, name="pad bias"),  # stride 1: the bias fused into the flat-grid copy
        Sample((floats(rng, 1, 4, 5, 5), floats(rng, 2, 2, 2, 2)),
               {"dilation": 2, "groups": 2, "padding": (1, 0)}, name="dilated groups"),
        Sample((floats(rng, 1, 1, 4, 3), floats(rng, 2, 1, 2, 2)), {"padding": "same"}, name="same even kernel"),
        Sample((floats(rng, 2, 3, 3), floats(rng, 2, 2, 2, 2)), {"padding": 1}, name="unbatched"),
    ]


def _conv1d_samples(rng):
    return [
        Sample((floats(rng, 2, 2, 6), floats(rng, 3, 2, 3)), {"stride": 2, "padding": 1}),
        Sample((floats(rng, 1, 4, 5), floats(rng, 4, 1, 2), floats(rng, 4)), {"groups": 4, "dilation": 2}),
    ]


def _convt2d_samples(rng):
    return [
        Sample((floats(rng, 1, 2, 3, 3), floats(rng, 2, 3, 2, 2)), {"stride": 2}, name="stride"),
        Sample((floats(rng, 2, 2, 2, 3), floats(rng, 2, 1, 3, 2), floats(rng, 2)),
               {"stride": 2, "padding": 1, "output_padding": 1, "groups": 2}, name="groups opad bias"),
        Sample((floats(rng, 1, 1, 3, 2), floats(rng, 1, 2, 2, 2)), {"dilation": 2, "padding": (1, 0)}, name="dilation"),
    ]


def _convt1d_samples(rng):
    return [Sample((floats(rng, 2, 2, 3), floats(rng, 2, 2, 3)), {"stride": 2, "padding": 1, "output_padding": 1})]


def _maxpool2d_samples(rng):
    return [
        Sample((away_from_ties(rng, 2, 2, 4, 4), 2), name="k2"),
        Sample((away_from_ties(rng, 1, 2, 5, 4), 3), {"stride": 2, "padding": 1}, name="pad"),
        Sample((away_from_ties(rng, 1, 1, 5, 5), 2), {"stride": 2, "ceil_mode": True, "dilation": (1, 2)}, name="ceil dil"),
    ]


def _maxpool1d_samples(rng):
    return [Sample((away_from_ties(rng, 2, 2, 7), 3), {"stride": 2, "padding": 1})]


def _avgpool2d_samples(rng):
    return [
        Sample((floats(rng, 2, 2, 4, 4), 2)),
        Sample((floats(rng, 1, 2, 5, 4), 3), {"stride": 2, "padding": 1, "count_include_pad": False}),
        Sample((floats(rng, 1, 1, 5, 5), 2), {"stride": 2, "ceil_mode": True}),
        Sample((floats(rng, 1, 2, 4, 3), 3), {"stride": 2, "padding": 1, "ceil_mode": True}),
    ]


def _avgpool1d_samples(rng):
    return [Sample((floats(rng, 2, 2, 7), 3), {"stride": 2, "padding": 1})]


def _adaptive_samples(ties):
    def samples(rng):
        mk = away_from_ties if ties else floats
        return [Sample((mk(rng, 1, 2, 5, 7), (2, 3))), Sample((mk(rng, 2, 1, 4, 4), 2)),
                Sample((mk(rng, 1, 1, 3, 3), 1))]

    return samples


OPS = [
    OpInfo("conv2d", lambda *a, **k: lucid.conv2d(*a, **k), ref_conv, _conv2d_samples),
    OpInfo("conv1d", lambda *a, **k: F.conv1d(*a, **k), ref_conv, _conv1d_samples),
    OpInfo("conv3d", lambda *a, **k: F.conv3d(*a, **k), ref_conv,
           lambda rng: [Sample((floats(rng, 1, 2, 3, 3, 3), floats(rng, 2, 1, 2, 2, 2)), {"groups": 2, "padding": 1})]),
    OpInfo("conv_transpose2d", lambda *a, **k: F.conv_transpose2d(*a, **k), ref_conv_transpose, _convt2d_samples),
    OpInfo("conv_transpose1d", lambda *a, **k: F.conv_transpose1d(*a, **k), ref_conv_transpose, _convt1d_samples),
    OpInfo("max_pool2d", lambda x, k, **kw: F.max_pool2d(x, k, **kw), lambda x, k, **kw: ref_pool(x, k, **kw),
           _maxpool2d_samples),
    OpInfo("max_pool1d", lambda x, k, **kw: F.max_pool1d(x, k, **kw), lambda x, k, **kw: ref_pool(x, k, **kw),
           _maxpool1d_samples),
    OpInfo("avg_pool2d", lambda x, k, **kw: F.avg_pool2d(x, k, **kw),
           lambda x, k, **kw: ref_pool(x, k, kind="avg", **kw), _avgpool2d_samples),
    OpInfo("avg_pool1d", lambda x, k, **kw: F.avg_pool1d(x, k, **kw),
           lambda x, k, **kw: ref_pool(x, k, kind="avg", **kw), _avgpool1d_samples),
    OpInfo("adaptive_avg_pool2d", F.adaptive_avg_pool2d, lambda x, o: ref_adaptive(x, o), _adaptive_samples(False)),
    OpInfo("adaptive_max_pool2d", F.adaptive_max_pool2d, lambda x, o: ref_adaptive(x, o, "max"),
           _adaptive_samples(True)),
    OpInfo("unfold", lambda x, k, **kw: F.unfold(x, k, **kw), ref_unfold,
           lambda rng: [Sample((floats(rng, 2, 2, 4, 3), 2)),
                        Sample((floats(rng, 1, 2, 4, 4), (2, 3)), {"padding": 1, "stride": 2, "dilation": (1, 2)})]),
    OpInfo("fold", lambda x, o, k, **kw: F.fold(x, o, k, **kw), ref_fold,
           lambda rng: [Sample((floats(rng, 2, 8, 6), (4, 3), 2)),
                        Sample((floats(rng, 1, 4, 9), (4, 4), (2, 2)), {"padding": 1, "stride": 2})]),
    OpInfo("interpolate_nearest", lambda x, **kw: F.interpolate(x, **kw), ref_interp,
           lambda rng: [Sample((floats(rng, 1, 2, 3, 2),), {"scale_factor": 2}),
                        Sample((floats(rng, 2, 1, 4),), {"size": 3})]),
    OpInfo("interpolate_bilinear", lambda x, **kw: F.interpolate(x, **kw), ref_interp,
           lambda rng: [Sample((floats(rng, 1, 2, 3, 2),), {"size": (4, 5), "mode": "bilinear", "align_corners": False}),
                        Sample((floats(rng, 1, 1, 3, 3),), {"scale_factor": 2, "mode": "bilinear",
                                                           "align_corners": True}),
                        Sample((floats(rng, 2, 1, 4),), {"size": 3, "mode": "linear", "align_corners": False})]),
]
