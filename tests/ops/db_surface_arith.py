"""Op database entries for the arithmetic surface of issue 10 (lucid/ops/elementwise/extra.py)."""
import numpy as np

import lucid
from opinfo import OpInfo, Sample, binary_samples, floats, positive


def _ints(rng, *shape):
    return rng.integers(-20, 20, size=shape).astype(np.int64)


def _s(*arrays, name=""):
    return Sample(tuple(arrays), {}, name)


def _np_trapz(y, x=None, dx=1.0, dim=-1):
    return np.trapezoid(y, x=x, dx=dx, axis=dim)


def _np_cumtrapz(y, dx=1.0, dim=-1):
    y = np.moveaxis(y, dim, -1)
    out = np.cumsum((y[..., 1:] + y[..., :-1]) * 0.5 * dx, axis=-1)
    return np.moveaxis(out, -1, dim)


def _np_renorm(x, p, dim, maxnorm):
    xs = np.moveaxis(x, dim, 0)
    norms = np.linalg.norm(xs.reshape(xs.shape[0], -1), ord=p, axis=1)
    f = np.where(norms > maxnorm, maxnorm / (norms + 1e-7), 1.0)
    return np.moveaxis(xs * f.reshape((-1,) + (1,) * (xs.ndim - 1)), 0, dim)


def _away_from_zero(rng, *shape):
    v = rng.uniform(0.3, 1.0, size=shape) * rng.choice([-1.0, 1.0], size=shape)
    return v.astype(np.float64)


OPS = [
    OpInfo("addmm", lambda i, a, b: lucid.addmm(i, a, b, beta=0.5, alpha=2.0),
           lambda i, a, b: 0.5 * i + 2.0 * a @ b,
           lambda rng: [_s(floats(rng, 2, 3), floats(rng, 2, 4), floats(rng, 4, 3)),
                        _s(floats(rng, 3), floats(rng, 2, 4), floats(rng, 4, 3), name="broadcast")]),
    OpInfo("addmm_beta0", lambda i, a, b: lucid.addmm(i, a, b, beta=0), lambda i, a, b: a @ b,
           lambda rng: [_s(floats(rng, 2, 2) * np.nan, floats(rng, 2, 3), floats(rng, 3, 2))], grad=False),
    OpInfo("addmv", lambda i, a, v: lucid.addmv(i, a, v, alpha=-1.0), lambda i, a, v: i - a @ v,
           lambda rng: [_s(floats(rng, 2), floats(rng, 2, 3), floats(rng, 3))]),
    OpInfo("addr", lambda i, a, b: lucid.addr(i, a, b, beta=2.0), lambda i, a, b: 2 * i + np.outer(a, b),
           lambda rng: [_s(floats(rng, 2, 3), floats(rng, 2), floats(rng, 3))]),
    OpInfo("baddbmm", lambda i, a, b: lucid.baddbmm(i, a, b), lambda i, a, b: i + a @ b,
           lambda rng: [_s(floats(rng, 2, 2, 2), floats(rng, 2, 2, 3), floats(rng, 2, 3, 2))]),
    OpInfo("addbmm", lambda i, a, b: lucid.addbmm(i, a, b, alpha=0.5), lambda i, a, b: i + 0.5 * (a @ b).sum(0),
           lambda rng: [_s(floats(rng, 2, 2), floats(rng, 3, 2, 3), floats(rng, 3, 3, 2))]),
    OpInfo("addcmul", lambda i, a, b: lucid.addcmul(i, a, b, value=-0.5), lambda i, a, b: i - 0.5 * a * b,
           lambda rng: [_s(floats(rng, 2, 3), floats(rng, 3), floats(rng, 2, 1))]),
    OpInfo("addcdiv", lambda i, a, b: lucid.addcdiv(i, a, b, value=2.0), lambda i, a, b: i + 2 * a / b,
           lambda rng: [_s(floats(rng, 2, 3), floats(rng, 2, 3), positive(rng, 3))]),
    OpInfo("rsub", lambda a, b: lucid.rsub(a, b, alpha=2), lambda a, b: b - 2 * a, binary_samples()),
    OpInfo("copysign", lucid.copysign, np.copysign, binary_samples(_away_from_zero, _away_from_zero)),
    OpInfo("fmax", lucid.fmax, np.fmax, binary_samples()),
    OpInfo("fmin", lucid.fmin, np.fmin, binary_samples()),
    OpInfo("float_power", lucid.float_power, np.float_power, binary_samples(positive, floats)),
    OpInfo("ldexp", lucid.ldexp, lambda a, b: a * 2.0 ** b,
           lambda rng: [_s(floats(rng, 2, 3), floats(rng, 3))]),
    OpInfo("heaviside", lambda x, v: lucid.heaviside(x, v), np.heaviside,
           lambda rng: [_s(np.array([-1.0, 0.0, 2.0, 0.0]), floats(rng, 4))], grad=False),
    OpInfo("trapezoid", lambda y, d: lucid.trapezoid(y, dim=d), lambda y, d: _np_trapz(y, dim=d),
           lambda rng: [_s(floats(rng, 2, 4), -1), _s(floats(rng, 3, 2), 0)]),
    OpInfo("trapezoid_x", lambda y, x: lucid.trapezoid(y, x), lambda y, x: _np_trapz(y, x),
           lambda rng: [_s(floats(rng, 2, 4), np.sort(floats(rng, 4)))]),
    OpInfo("cumulative_trapezoid", lambda y: lucid.cumulative_trapezoid(y, dx=0.5),
           lambda y: _np_cumtrapz(y, dx=0.5), lambda rng: [_s(floats(rng, 2, 4))]),
    OpInfo("dist", lambda a, b, p: lucid.dist(a, b, p), lambda a, b, p: np.linalg.norm((a - b).ravel(), p),
           lambda rng: [_s(floats(rng, 2, 3), floats(rng, 3), 2), _s(floats(rng, 4), floats(rng, 4), 1)]),
    OpInfo("cdist", lambda a, b: lucid.cdist(a, b),
           lambda a, b: np.linalg.norm(a[..., :, None, :] - b[..., None, :, :], axis=-1),
           lambda rng: [_s(floats(rng, 2, 3), floats(rng, 4, 3)), _s(floats(rng, 2, 2, 3), floats(rng, 2, 1, 3))]),
    OpInfo("renorm", lambda x: lucid.renorm(x, 2, 0, 0.6), lambda x: _np_renorm(x, 2, 0, 0.6),
           lambda rng: [_s(floats(rng, 3, 2))]),
    OpInfo("gcd", lucid.gcd, np.gcd, lambda rng: [_s(_ints(rng, 2, 3), _ints(rng, 3))], grad=False),
    OpInfo("lcm", lucid.lcm, np.lcm, lambda rng: [_s(_ints(rng, 4), _ints(rng, 4))], grad=False),
    OpInfo("bitwise_left_shift", lucid.bitwise_left_shift, np.left_shift,
           lambda rng: [_s(_ints(rng, 2, 3), rng.integers(0, 5, size=3))], grad=False),
    OpInfo("bitwise_right_shift", lucid.bitwise_right_shift, np.right_shift,
           lambda rng: [_s(_ints(rng, 4), rng.integers(0, 5, size=4))], grad=False),
    OpInfo("nextafter", lucid.nextafter, np.nextafter, lambda rng: [_s(floats(rng, 2, 3), floats(rng, 3))],
           grad=False, atol=0, rtol=0),
    OpInfo("frexp", lucid.frexp, lambda x: tuple(np.frexp(x)), lambda rng: [_s(floats(rng, 2, 3) * 100)],
           grad=False),
]
