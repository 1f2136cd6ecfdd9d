"""Op database entries for the elementwise family beyond the core arithmetic (see db_core.py).

Samples stay inside each op's domain and away from its non-differentiable points
(integers for floor/frac, ratio discontinuities for ``//`` and ``%``, the clamp bounds of logit).
"""
import math

import numpy as np

import lucid
from lucid.ops.elementwise import _erf_numpy, _erfc_numpy
from opinfo import OpInfo, Sample, binary_samples, floats, positive, unary_samples


def scaled(k, low=-1.0, high=1.0):
    """Uniform samples on ``[k*low, k*high]``."""
    return lambda rng, *s: floats(rng, *s, low=k * low, high=k * high)


def shifted(lo, hi):
    return lambda rng, *s: floats(rng, *s, low=lo, high=hi)


def off_integers(rng, *shape):
    """Values in (-3, 3) at least 0.05 from any integer (floor, frac, // jump there)."""
    base = rng.integers(-3, 3, size=shape).astype(np.float64)
    return base + rng.uniform(0.05, 0.95, size=shape)


def with_specials(rng, *shape):
    """Floats with NaN, +inf and -inf mixed in (for nan_to_num / isnan ...)."""
    x = floats(rng, *shape) * 3
    flat = x.reshape(-1)
    for i, v in zip(range(flat.size), [np.nan, np.inf, -np.inf, 0.0]):
        flat[(3 * i + 1) % flat.size] = v
    return x


def ints(*values):
    return np.array(values, dtype=np.int64)


_erf_ref = np.vectorize(math.erf, otypes=[np.float64])
_erfc_ref = np.vectorize(math.erfc, otypes=[np.float64])


def _stable_sigmoid(x):
    return np.where(x >= 0, 1 / (1 + np.exp(-np.abs(x))), np.exp(-np.abs(x)) / (1 + np.exp(-np.abs(x))))


def _division_samples(rng):
    return [
        Sample((off_integers(rng, 2, 3), positive(rng, 2, 3))),
        Sample((off_integers(rng, 2, 3), -positive(rng, 3)), name="negative divisor"),
        Sample((off_integers(rng), positive(rng, 2)), name="scalar tensor"),
        Sample((off_integers(rng, 2, 2), 0.7), name="python scalar"),
        Sample((ints(7, -7, 5, -5, 0), ints(2, 2, -3, -3, 4)), name="integers"),
    ]


def _logit_samples(rng):
    x = np.array([0.05, 0.2, 0.5, 0.8, 0.93, 0.6])
    return [Sample((floats(rng, 2, 3, low=0.05, high=0.95),)), Sample((floats(rng, low=0.1, high=0.9),)),
            Sample((x,), {"eps": 0.1}, name="eps clamps 0.05 and 0.93")]


def _logit_ref(x, eps=None):
    z = x if eps is None else np.clip(x, eps, 1 - eps)
    return np.log(z / (1 - z))


def _lerp_samples(rng):
    return [
        Sample((floats(rng, 2, 3), floats(rng, 2, 3), floats(rng, 2, 3, low=-0.3, high=1.2))),
        Sample((floats(rng, 2, 3), floats(rng, 3), 0.3), name="scalar weight below 1/2"),
        Sample((floats(rng, 3), floats(rng, 2, 3), 0.8), name="scalar weight above 1/2"),
        Sample((floats(rng, 3, 1), floats(rng, 1, 2), floats(rng, 2, low=0.0, high=1.0)), name="broadcast"),
    ]


def _round_samples(rng):
    return [Sample((off_integers(rng, 2, 3),)), Sample((off_integers(rng, 4) / 10,), {"decimals": 1}),
            Sample((off_integers(rng, 3),), {"decimals": -1}), Sample((ints(3, -2, 7),), name="integers")]


def _nan_to_num_samples(rng):
    return [Sample((floats(rng, 2, 3),)), Sample((with_specials(rng, 2, 3),)),
            Sample((with_specials(rng, 5),), {"nan": 1.5, "posinf": 9.0, "neginf": -9.0})]


def _special_samples(rng):
    return [Sample((with_specials(rng, 2, 3),)), Sample((ints(1, -2),), name="integers"),
            Sample((np.array(np.inf),))]


def _isclose_samples(rng):
    a = floats(rng, 2, 3)
    b = a + np.array([[0, 1e-9, 1e-3], [0, 2e-5, -1e-7]])
    nan = np.array([np.nan, 1.0, np.inf])
    return [Sample((a, b)), Sample((a, b), {"rtol": 0.0, "atol": 1e-6}),
            Sample((nan, nan.copy()), {"equal_nan": True}), Sample((nan, nan.copy())), Sample((a, 0.5))]


def _logical_samples(rng):
    a = np.array([[0.0, 1.5, -2.0], [0.0, 0.0, 3.0]])
    return [Sample((a, np.array([0.0, 2.0, 0.0]))), Sample((a, 0.0)), Sample((ints(0, 1, 2), ints(1, 0, 0)))]


def _compare_samples(rng):
    x = np.array([[0.5, -1.0, 2.0], [0.25, 0.0, -0.5]])
    return [Sample((x, np.array([0.5, 0.0, 1.0]))), Sample((x, 0.25)), Sample((ints(1, 2, 3), 2.5))]


def _unary(name, fn, ref, make=floats, **kw):
    return OpInfo(name, fn, ref, unary_samples(make), **kw)


def _values_only(name, fn, ref, samples, **kw):
    return OpInfo(name, fn, ref, samples, grad=False, **kw)


OPS = [
    # integer division and modulus
    OpInfo("floor_divide", lucid.floor_divide, np.floor_divide, _division_samples),
    OpInfo("floordiv_operator", lambda a, b: a // b, np.floor_divide, _division_samples),
    OpInfo("rfloordiv_operator", lambda a: 5.0 // a, lambda a: np.floor_divide(5.0, a),
           lambda rng: [Sample((np.array([0.7, 1.3, -2.2]),))]),
    OpInfo("remainder", lucid.remainder, np.remainder, _division_samples),
    OpInfo("mod_operator", lambda a, b: a % b, np.remainder, _division_samples),
    OpInfo("rmod_operator", lambda a: 5.0 % a, lambda a: np.remainder(5.0, a),
           lambda rng: [Sample((np.array([0.7, 1.3, -2.2]),))]),
    OpInfo("fmod", lucid.fmod, np.fmod, _division_samples),
    OpInfo("div_trunc", lambda a, b: lucid.div(a, b, rounding_mode="trunc"), lambda a, b: np.trunc(a / b),
           _division_samples),
    OpInfo("div_floor", lambda a, b: lucid.div(a, b, rounding_mode="floor"), np.floor_divide, _division_samples),
    # exponentials and logarithms
    _unary("exp2", lucid.exp2, np.exp2),
    _unary("expm1", lucid.expm1, np.expm1),
    _unary("log2", lucid.log2, np.log2, positive),
    _unary("log10", lucid.log10, np.log10, positive),
    _unary("log1p", lucid.log1p, np.log1p, shifted(-0.8, 2.0)),
    _unary("rsqrt", lucid.rsqrt, lambda x: 1 / np.sqrt(x), positive),
    _unary("square", lucid.square, np.square),
    _unary("reciprocal", lucid.reciprocal, np.reciprocal, positive),
    # trigonometric and hyperbolic
    _unary("tan", lucid.tan, np.tan, scaled(1.2)),
    _unary("asin", lucid.asin, np.arcsin, scaled(0.9)),
    OpInfo("arcsin_method", lambda x: x.arcsin(), np.arcsin,
           lambda rng: [Sample((scaled(0.9)(rng, 2, 3),)), Sample((np.asarray(scaled(0.9)(rng)),))]),
    _unary("acos", lucid.acos, np.arccos, scaled(0.9)),
    _unary("atan", lucid.atan, np.arctan, scaled(3.0)),
    _unary("sinh", lucid.sinh, np.sinh, scaled(2.0)),
    _unary("cosh", lucid.cosh, np.cosh, scaled(2.0)),
    _unary("asinh", lucid.asinh, np.arcsinh, scaled(3.0)),
    _unary("acosh", lucid.acosh, np.arccosh, shifted(1.2, 3.0)),
    _unary("atanh", lucid.atanh, np.arctanh, scaled(0.9)),
    OpInfo("atan2", lucid.atan2, np.arctan2, binary_samples()),
    OpInfo("hypot", lucid.hypot, np.hypot, binary_samples()),
    # sigmoid family and special functions
    _unary("sigmoid", lucid.sigmoid, _stable_sigmoid, scaled(4.0)),
    OpInfo("sigmoid_extreme", lucid.sigmoid, _stable_sigmoid,
           lambda rng: [Sample((np.array([-800.0, -40.0, -1e-8, 0.0, 30.0, 800.0]),))], atol=1e-300),
    OpInfo("logit", lambda x, **k: lucid.logit(x, **k), _logit_ref, _logit_samples),
    _unary("erf", lucid.erf, _erf_ref, scaled(2.5)),
    _unary("erfc", lucid.erfc, _erfc_ref, scaled(2.5)),
    # the pure-NumPy erf path (used when SciPy is missing), checked tightly over its intervals
    _values_only("erf_numpy_path", lambda x: lucid.tensor(_erf_numpy(x.numpy()), device=x.device), _erf_ref,
                 lambda rng: [Sample((np.concatenate([floats(rng, 50, low=-0.47, high=0.47),
                                                      floats(rng, 50, low=-4.5, high=4.5),
                                                      floats(rng, 20, low=-30.0, high=30.0),
                                                      [0.0, 0.46875, -4.0, 1e-12]]),))],
                 vmap=False, rtol=1e-15, atol=3e-16),
    _values_only("erfc_numpy_path", lambda x: lucid.tensor(_erfc_numpy(x.numpy()), device=x.device), _erfc_ref,
                 lambda rng: [Sample((np.concatenate([floats(rng, 50, low=-0.47, high=0.47),
                                                      floats(rng, 50, low=-4.5, high=4.5),
                                                      floats(rng, 30, low=4.0, high=26.0),
                                                      [0.0, 0.46875, -4.0, 4.0, 10.0, 26.0, -26.0]]),))],
                 vmap=False, rtol=2e-15, atol=0.0),
    # rounding (zero gradient) and frac (gradient one)
    _unary("floor", lucid.floor, np.floor, off_integers),
    _unary("ceil", lucid.ceil, np.ceil, off_integers),
    _unary("trunc", lucid.trunc, np.trunc, off_integers),
    OpInfo("round", lambda x, **k: lucid.round(x, **k), lambda x, decimals=0: np.round(x, decimals), _round_samples),
    _unary("frac", lucid.frac, lambda x: x - np.trunc(x), off_integers),
    # binary smooth functions
    OpInfo("logaddexp", lucid.logaddexp, np.logaddexp, binary_samples(scaled(3.0), scaled(3.0))),
    OpInfo("logaddexp2", lucid.logaddexp2, np.logaddexp2, binary_samples(scaled(3.0), scaled(3.0))),
    OpInfo("lerp", lucid.lerp, lambda a, b, w: a + w * (b - a), _lerp_samples),
    OpInfo("nan_to_num", lambda x, **k: lucid.nan_to_num(x, **k), np.nan_to_num, _nan_to_num_samples),
    # tests of values, comparisons and logic (no gradient)
    _values_only("isnan", lucid.isnan, np.isnan, _special_samples),
    _values_only("isinf", lucid.isinf, np.isinf, _special_samples),
    _values_only("isfinite", lucid.isfinite, np.isfinite, _special_samples),
    _values_only("isposinf", lucid.isposinf, np.isposinf, _special_samples),
    _values_only("isneginf", lucid.isneginf, np.isneginf, _special_samples),
    _values_only("isclose", lambda a, b, **k: lucid.isclose(a, b, **k), np.isclose, _isclose_samples),
    _values_only("allclose", lambda a, b, **k: lucid.tensor(lucid.allclose(a, b, **k), device=a.device),
                 lambda a, b, **k: np.array(np.allclose(a, b, **k)), _isclose_samples, vmap=False),
    _values_only("equal", lambda a, b: lucid.tensor(lucid.equal(a, b), device=a.device),
                 lambda a, b: np.array(np.array_equal(a, b)),
                 lambda rng: [Sample((ints(1, 2), ints(1, 2))), Sample((ints(1, 2), ints(1, 3))),
                              Sample((ints(1, 2), ints(1, 2, 3))), Sample((np.array([1.0, 2.0]), ints(1, 2)))],
                 vmap=False),
    _values_only("logical_and", lucid.logical_and, np.logical_and, _logical_samples),
    _values_only("logical_or", lucid.logical_or, np.logical_or, _logical_samples),
    _values_only("logical_xor", lucid.logical_xor, np.logical_xor, _logical_samples),
    _values_only("greater", lucid.greater, np.greater, _compare_samples),
    _values_only("greater_equal", lucid.greater_equal, np.greater_equal, _compare_samples),
    _values_only("less", lucid.less, np.less, _compare_samples),
    _values_only("less_equal", lucid.less_equal, np.less_equal, _compare_samples),
    _values_only("not_equal", lucid.not_equal, np.not_equal, _compare_samples),
    _values_only("eq_operator", lambda a, b: a == b, np.equal, _compare_samples),
    _values_only("lt_operator", lambda a, b: a < b, np.less, _compare_samples),
    _values_only("and_operator", lambda a, b: (a > 0) & (b > 0), lambda a, b: (a > 0) & (b > 0), _compare_samples),
    _values_only("invert_operator", lambda a: ~(a > 0), lambda a: ~(a > 0), unary_samples()),
]
