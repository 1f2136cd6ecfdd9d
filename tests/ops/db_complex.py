"""Op database entries for complex tensors: the complex-specific ops (``complex``, ``real``,
``imag``, ``conj``, ``angle``, ``view_as_real``, ``view_as_complex``, ``polar``).

Samples are complex128 (``cfloats``); the generic checks treat each complex element as two
real coordinates (NOTE [Complex gradcheck]) and use the real inner product for the
jvp/vjp consistency check (NOTE [Complex gradients]).
"""
import numpy as np

import lucid
from opinfo import OpInfo, Sample, floats, positive


def cfloats(rng, *shape, low=-1.0, high=1.0):
    """A complex128 array with real and imaginary parts uniform in [low, high)."""
    return np.asarray(rng.uniform(low, high, size=shape) + 1j * rng.uniform(low, high, size=shape), np.complex128)


def cunary_samples(make=cfloats):
    def samples(rng):
        return [Sample((make(rng),)), Sample((make(rng, 3),)), Sample((make(rng, 2, 3),)),
                Sample((make(rng, 0, 2),), name="empty")]

    return samples


def _away_from_zero(rng, *shape):
    z = cfloats(rng, *shape)
    return np.asarray(z + 0.5 * np.exp(1j * np.angle(z)))


OPS = [
    OpInfo("complex", lucid.complex, lambda a, b: a + 1j * b,
           lambda rng: [Sample((floats(rng, 2, 3), floats(rng, 2, 3))),
                        Sample((floats(rng, 2, 3), floats(rng, 3)), name="broadcast"),
                        Sample((floats(rng), floats(rng, 2)), name="scalar tensor")]),
    OpInfo("polar", lucid.polar, lambda r, t: r * np.exp(1j * t),
           lambda rng: [Sample((positive(rng, 2, 3), floats(rng, 2, 3)))]),
    OpInfo("real", lucid.real, np.real, cunary_samples()),
    OpInfo("imag", lucid.imag, np.imag, cunary_samples()),
    OpInfo("conj", lucid.conj, np.conj, cunary_samples()),
    OpInfo("angle", lucid.angle, np.angle, cunary_samples(_away_from_zero)),
    OpInfo("view_as_real", lucid.view_as_real, lambda z: np.stack([z.real, z.imag], -1), cunary_samples()),
    OpInfo("view_as_complex", lucid.view_as_complex, lambda x: x[..., 0] + 1j * x[..., 1],
           lambda rng: [Sample((floats(rng, 2),)), Sample((floats(rng, 3, 2),)), Sample((floats(rng, 2, 3, 2),))],
           vmap_in_dims=(0, 1)),
]
