"""Op database entries from the transform-composition sweep (engineer "compose").

``histc`` is composed from Lucid ops now, so the generic checks run it under vmap (each example
with its own data range) and on every device; it has no gradient, as in PyTorch.
"""
import numpy as np

import lucid
from opinfo import OpInfo, Sample, floats


def _histc_ref(x, bins=100, min=0, max=0):  # noqa: A002
    """PyTorch's histc: bin ``trunc((x - lo) * bins / (hi - lo))``, the top edge in the last
    bin, values outside (and NaN) dropped; ``lo == hi == 0`` takes the data's range."""
    x = np.asarray(x, dtype=np.float64).reshape(-1)
    lo, hi = float(min), float(max)
    if lo == hi and x.size:
        lo, hi = x.min(), x.max()
    if lo == hi:
        lo, hi = lo - 1, hi + 1
    inside = (x >= lo) & (x <= hi)
    pos = np.minimum(((x[inside] - lo) * bins / (hi - lo)).astype(np.int64), bins - 1)
    return np.bincount(pos, minlength=bins).astype(np.float64)


def _histc_samples(rng):
    return [
        Sample((floats(rng, 3, 4),), {"bins": 4, "min": -1.0, "max": 1.0}),
        Sample((floats(rng, 5),), {"bins": 3}, name="data range"),
        Sample((np.array([0.25, 0.25, 0.25]),), {"bins": 4}, name="constant: range widened by 1"),
        Sample((np.array(0.3),), {"bins": 2, "min": 0.0, "max": 0.6}, name="0-d, top edge"),
        Sample((floats(rng, 2, 3),), {"bins": 2, "min": -0.2, "max": 0.4}, name="values outside"),
    ]


OPS = [
    OpInfo("histc", lambda x, **k: lucid.histc(x, **k), _histc_ref, _histc_samples, grad=False),
]
