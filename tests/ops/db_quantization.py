"""Op database entries for fake quantization (lucid/_core/fake_quantize.py, NOTE
[Straight-through fake quantization]).

Each function has two entries:
- the function itself, checked forward (against a NumPy transcription of PyTorch's kernel) and
  under vmap; its gradient is the straight-through estimator, not the derivative of its
  piecewise-constant value, so finite differences cannot check it there (``grad=False``);
- ``<name>.ste``: ``fq(x) - fq(x).detach() + clamp(x, lo, hi).detach()``, whose value is the
  clamp to the interval the estimator passes (``lo``/``hi`` half a step outside the range) and
  whose gradient is fake quantization's own. The generic gradcheck, gradgradcheck, jvp and vmap
  checks then hold the estimator to the clamp's derivative (1 inside, 0 outside, second
  derivative 0). Samples stay a tenth of a step away from the rounding midpoints.
"""
import numpy as np

import lucid
from opinfo import OpInfo, Sample

QMIN, QMAX = -6, 9


def _ref(x, scale, zp, qmin=QMIN, qmax=QMAX, per_tensor=True):
    inv = (np.float32(1) / np.asarray(scale, np.float32)).astype(x.dtype)
    q = np.clip(zp + np.rint(x * inv), qmin, qmax) - zp
    if per_tensor:  # PyTorch's per-tensor kernel does its last product in float32
        return (q.astype(np.float32) * np.float32(scale)).astype(x.dtype)
    return q * np.asarray(scale, np.float32).astype(x.dtype)


def _points(rng, scale, shape):
    """Values a tenth of a step or more from every rounding midpoint, some outside the range."""
    k = rng.integers(QMIN - 4, QMAX + 4, size=shape)
    return np.asarray((k + rng.uniform(-0.4, 0.4, size=shape)) * np.asarray(scale, np.float64), np.float64)


def _tensor_samples(rng):
    out = []
    for scale, zp, shape in ((0.1, 0, (5,)), (0.37, 2, (2, 3)), (0.05, -3, ())):
        x = np.asarray(_points(rng, scale, shape) + zp * scale)
        out.append(Sample((x,), {"scale": scale, "zero_point": zp}, name=f"scale={scale}"))
    ties = np.array([0.05, 0.15, 0.25, -0.25, 2.0])  # midpoints (forward only: exact rounding)
    out.append(Sample((ties,), {"scale": 0.1, "zero_point": 1}, name="ties"))
    return out


def _channel_samples(rng):
    out = []
    for shape, axis in (((3, 4), 0), ((2, 3, 2), 1), ((4, 2), -1)):
        n = shape[axis]
        scale = rng.uniform(0.05, 0.5, n).astype(np.float32)
        zp = rng.integers(-2, 3, n).astype(np.int32)
        bshape = [1] * len(shape)
        bshape[axis] = n
        x = _points(rng, scale.reshape(bshape), shape) + (zp * scale).reshape(bshape)
        out.append(Sample((x,), {"scale": scale, "zero_point": zp, "axis": axis}, name=f"axis={axis}"))
    return out


def _no_ties(samples):
    return lambda rng: [s for s in samples(rng) if s.name != "ties"]


def _fq_tensor(x, scale, zero_point):
    return lucid.fake_quantize_per_tensor_affine(x, scale, zero_point, QMIN, QMAX)


def _fq_channel(x, scale, zero_point, axis):
    s = lucid.tensor(scale, device=x.device)
    z = lucid.tensor(zero_point, device=x.device)
    return lucid.fake_quantize_per_channel_affine(x, s, z, axis, QMIN, QMAX)


def _bounds(scale, zero_point, axis=None, ndim=0):
    lo = (QMIN - np.asarray(zero_point, np.float64) - 0.5) * np.asarray(scale, np.float64)
    hi = (QMAX - np.asarray(zero_point, np.float64) + 0.5) * np.asarray(scale, np.float64)
    if axis is not None:
        shape = [1] * ndim
        shape[axis] = -1
        lo, hi = lo.reshape(shape), hi.reshape(shape)
    return lo, hi


def _ste(fq, bounds):
    def op(x, **kw):
        lo, hi = bounds(x, **kw)
        y = fq(x, **kw)
        clamped = lucid.clamp(x, lucid.tensor(lo, device=x.device), lucid.tensor(hi, device=x.device))
        return y - y.detach() + clamped.detach()

    return op


OPS = [
    OpInfo("fake_quantize_per_tensor_affine", _fq_tensor, lambda x, scale, zero_point: _ref(x, scale, zero_point),
           _tensor_samples, grad=False, atol=0, rtol=0),
    OpInfo("fake_quantize_per_tensor_affine.ste",
           _ste(_fq_tensor, lambda x, scale, zero_point: _bounds(scale, zero_point)),
           lambda x, scale, zero_point: np.clip(x, *_bounds(scale, zero_point)), _no_ties(_tensor_samples)),
    OpInfo("fake_quantize_per_channel_affine", _fq_channel,
           lambda x, scale, zero_point, axis: _ref(x, np.expand_dims(scale, tuple(i for i in range(x.ndim)
                                                                                   if i != axis % x.ndim)),
                                                   np.expand_dims(zero_point, tuple(i for i in range(x.ndim)
                                                                                    if i != axis % x.ndim)),
                                                   per_tensor=False),
           _channel_samples, grad=False, atol=0, rtol=0),
    OpInfo("fake_quantize_per_channel_affine.ste",
           _ste(_fq_channel, lambda x, scale, zero_point, axis: _bounds(scale, zero_point, axis % x.ndim, x.ndim)),
           lambda x, scale, zero_point, axis: np.clip(x, *_bounds(scale, zero_point, axis % x.ndim, x.ndim)),
           _channel_samples),
]
