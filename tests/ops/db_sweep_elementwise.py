"""Op database entries from the elementwise options sweep against PyTorch 2.13
(tests/regressions/test_elementwise_options_sweep.py holds the value and dtype checks).

- ``frexp``'s mantissa is differentiable (``grad / 2 ** exponent``, PyTorch's rule);
- ``nextafter`` passes the gradient to ``input`` (0 where it equals ``other``), zero to ``other``;
- ``div(..., rounding_mode='trunc')`` on floats is one primitive with a zero gradient;
- ``acosh``'s derivative is written as ``rsqrt((x - 1) * (x + 1))``;
- ``clamp`` with tensor bounds, broadcasting, min > max in places.
"""
import numpy as np

import lucid
from opinfo import OpInfo, Sample, floats, positive


def _off_pow2(rng, *shape):
    # away from the powers of two, where the mantissa jumps
    return np.sign(floats(rng, *shape)) * rng.uniform(1.1, 1.9, shape) * 2.0 ** rng.integers(-3, 4, shape)


def _trunc_div_samples(rng):
    a, b = floats(rng, 2, 3) * 5, positive(rng, 3) * np.array([1.0, -1.0, 1.0])
    return [Sample((a, b)), Sample((a, 0.7), name="scalar"), Sample((a[0], b.reshape(3, 1)), name="broadcast")]


def _clamp_samples(rng):
    x = floats(rng, 2, 3) * 2
    lo, hi = np.array([-0.5, 0.3, 0.9]), np.array([[0.5], [-0.7]])  # hi < lo in places
    return [Sample((x, lo, hi)), Sample((x, lo, None), name="min only"), Sample((x, None, hi), name="max only")]


OPS = [
    OpInfo("frexp_mantissa", lambda x: lucid.frexp(x)[0], lambda x: np.frexp(x)[0],
           lambda rng: [Sample((_off_pow2(rng, 2, 3),))]),
    OpInfo("frexp_pair", lucid.frexp, lambda x: tuple(np.frexp(x)), lambda rng: [Sample((_off_pow2(rng, 4),))],
           out_index=0),
    OpInfo("nextafter_grad", lucid.nextafter, np.nextafter,
           lambda rng: [Sample((floats(rng, 2, 3), floats(rng, 3) + 3.0)),
                        Sample((floats(rng, 3), -5.0), name="scalar other")], atol=0, rtol=0),
    OpInfo("div_trunc_sweep", lambda a, b: lucid.div(a, b, rounding_mode="trunc"), lambda a, b: np.trunc(a / b),
           _trunc_div_samples),
    OpInfo("acosh_sweep", lucid.acosh, np.arccosh, lambda rng: [Sample((rng.uniform(1.05, 4.0, (2, 3)),))]),
    OpInfo("clamp_tensor_bounds", lambda x, lo, hi: lucid.clamp(x, lo, hi),
           lambda x, lo, hi: np.minimum(np.maximum(x, lo), hi) if lo is not None and hi is not None
           else np.clip(x, lo, hi), _clamp_samples),
]
