"""Op database entries from the nn.functional sweep (convolution, pooling, resampling,
attention) against PyTorch 2.13; tests/regressions/test_functional_options_sweep_b.py holds the
checks that finite differences cannot make (ties, -inf and NaN, exception types).

- ``interpolate(..., antialias=True)`` for bilinear and bicubic (PyTorch's, i.e. PIL's,
  stretched filter when shrinking; ``a = -0.5`` for the cubic), both ``align_corners``;
- the linear modes copy a dim whose size a ``scale_factor`` leaves unchanged (PyTorch);
- ``conv_tbc`` (new: PyTorch's time-batch-channel convolution; a negative ``pad`` crops);
- adaptive average pooling on sizes that do not divide (now a gathered window mean) and
  adaptive max pooling (the first maximum carries value and gradient).
"""
import numpy as np

import lucid.nn.functional as F
from opinfo import OpInfo, Sample, away_from_ties, floats


def _aa_weights(n, o, scale, align_corners, cubic):
    """Dense (o, n) weights, written out per output from PyTorch's description: centre
    ``scale * (i + 0.5)``, support ``(2 or 1) * max(scale, 1)``, taps scaled by ``1/scale``
    when shrinking, normalized per output."""
    if align_corners:
        scale = (n - 1) / (o - 1) if o > 1 else 0.0
    w = np.zeros((o, n))
    for i in range(o):
        c = scale * (i + 0.5)
        half = (2.0 if cubic else 1.0) * max(scale, 1.0)
        for j in range(max(int(c - half + 0.5), 0), min(int(c + half + 0.5), n)):
            t = abs((j - c + 0.5) / max(scale, 1.0))
            if cubic:
                w[i, j] = (1.5 * t - 2.5) * t * t + 1 if t < 1 else ((-0.5 * t + 2.5) * t - 4) * t + 2 if t < 2 else 0
            else:
                w[i, j] = max(1 - t, 0.0)
        w[i] /= w[i].sum()
    return w


def ref_interp_aa(x, size=None, scale_factor=None, mode="bilinear", align_corners=False, antialias=True):
    sp = x.shape[2:]
    if size is None:
        size = tuple(int(n * scale_factor) for n in sp)
        scales = [1 / scale_factor] * 2
    else:
        scales = [n / o for n, o in zip(sp, size)]
    out = x
    for d, (n, o, s) in enumerate(zip(sp, size, scales)):
        if n != o:
            out = np.moveaxis(np.moveaxis(out, 2 + d, -1) @ _aa_weights(n, o, s, align_corners, mode == "bicubic").T,
                              -1, 2 + d)
    return out


def ref_interp_kept_dim(x, scale_factor, mode):
    """Linear modes with a ``scale_factor``: a dim whose size is unchanged is copied; the others
    sample at ``max((i + 0.5) / scale_factor - 0.5, 0)``."""
    out = x
    for d, n in enumerate(x.shape[2:]):
        o = int(n * scale_factor)
        if o == n:
            continue
        w = np.zeros((o, n))
        for i in range(o):
            src = max((i + 0.5) / scale_factor - 0.5, 0.0)
            i0 = min(int(src), n - 1)
            w[i, i0] += 1 - (src - i0)
            w[i, min(i0 + 1, n - 1)] += src - i0
        out = np.moveaxis(np.moveaxis(out, 2 + d, -1) @ w.T, -1, 2 + d)
    return out


def ref_adaptive_avg(x, output_size):
    sp = x.shape[2:]
    osz = (output_size,) * len(sp) if isinstance(output_size, int) else output_size
    out = np.zeros(x.shape[:2] + tuple(osz))
    for pos in np.ndindex(*osz):
        win = tuple(slice(i * n // o, -(-(i + 1) * n // o)) for i, n, o in zip(pos, sp, osz))
        out[(...,) + pos] = x[(slice(None), slice(None)) + win].mean(axis=tuple(range(2, 2 + len(sp))))
    return out


def ref_adaptive_max1d(x, output_size):
    n = x.shape[-1]
    return np.stack([x[..., i * n // output_size: -(-(i + 1) * n // output_size)].max(-1)
                     for i in range(output_size)], -1)


def _aa_samples(rng):
    return [Sample((floats(rng, 1, 2, 5, 7),), {"size": (3, 2), "mode": "bilinear", "antialias": True}),
            Sample((floats(rng, 1, 1, 6, 4),), {"size": (2, 7), "mode": "bicubic", "antialias": True}),
            Sample((floats(rng, 2, 1, 5, 6),), {"size": (2, 3), "mode": "bilinear", "antialias": True,
                                                "align_corners": True}, name="align_corners"),
            Sample((floats(rng, 1, 1, 7, 5),), {"size": (3, 5), "mode": "bicubic", "antialias": True,
                                                "align_corners": True}, name="cubic align_corners, one dim kept")]


def ref_conv_tbc(x, w, b, pad=0):
    t, k = x.shape[0], w.shape[0]
    xp = np.pad(x, ((pad, pad), (0, 0), (0, 0))) if pad >= 0 else x[-pad:t + pad]
    n = xp.shape[0] - k + 1
    return np.stack([np.einsum("kbc,kco->bo", xp[i:i + k], w) for i in range(n)]).reshape(n, x.shape[1], -1) + b


OPS = [
    OpInfo("interpolate_antialias", lambda x, **kw: F.interpolate(x, **kw), ref_interp_aa, _aa_samples),
    OpInfo("interpolate_linear_same_size", lambda x, **kw: F.interpolate(x, **kw), ref_interp_kept_dim,
           lambda rng: [Sample((floats(rng, 1, 2, 3, 4),), {"scale_factor": 1.3, "mode": "bilinear"}),
                        Sample((floats(rng, 2, 1, 3),), {"scale_factor": 1.2, "mode": "linear"})]),
    OpInfo("adaptive_avg_pool1d_uneven", F.adaptive_avg_pool1d, ref_adaptive_avg,
           lambda rng: [Sample((floats(rng, 2, 3, 7), 3)), Sample((floats(rng, 1, 2, 5), 4))]),
    OpInfo("adaptive_avg_pool3d_uneven", F.adaptive_avg_pool3d, ref_adaptive_avg,
           lambda rng: [Sample((floats(rng, 1, 2, 3, 5, 4), (2, 3, 3)))]),
    OpInfo("adaptive_max_pool1d", F.adaptive_max_pool1d, ref_adaptive_max1d,
           lambda rng: [Sample((away_from_ties(rng, 2, 3, 7), 3)), Sample((away_from_ties(rng, 1, 2, 5), 4))]),
    OpInfo("conv_tbc", lambda x, w, b, **kw: F.conv_tbc(x, w, b, **kw), ref_conv_tbc,
           lambda rng: [Sample((floats(rng, 5, 2, 3), floats(rng, 2, 3, 4), floats(rng, 4))),
                        Sample((floats(rng, 4, 1, 2), floats(rng, 3, 2, 2), floats(rng, 2)), {"pad": 1},
                               name="pad"),
                        Sample((floats(rng, 6, 2, 2), floats(rng, 2, 2, 1), floats(rng, 1)), {"pad": -1},
                               name="negative pad crops")]),
]
