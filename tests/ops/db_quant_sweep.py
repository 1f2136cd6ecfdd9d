"""Op database entries from the quantization sweep (lucid/_core/fake_quantize.py).

``fake_quantize_per_tensor_affine.nan_to_qmin``: a zero scale makes ``x * (1/scale)`` infinite,
or NaN at ``x == 0``; PyTorch's kernel clamps with fmax/fmin, so NaN lands on ``quant_min`` and
every output is ``(q - zp) * 0 == 0``, with a zero straight-through gradient (no quantized value
lies inside the range). The function is then the constant 0, so the generic gradcheck, jvp and
vmap checks apply as they are; before the fix ``x == 0`` gave NaN.
"""
import numpy as np

import lucid
from opinfo import OpInfo, Sample


def _zero_scale(x, zero_point):
    return lucid.fake_quantize_per_tensor_affine(x, 0.0, zero_point, -4, 7)


def _samples(rng):
    return [Sample((np.array([0.0, 0.3, -1.2, 0.0, 2.5]),), {"zero_point": 0}, name="1d"),
            Sample((np.array([[0.0, -0.7], [1.1, 0.0]]),), {"zero_point": 2}, name="2d"),
            Sample((np.array(0.0),), {"zero_point": -1}, name="0d")]


OPS = [
    OpInfo("fake_quantize_per_tensor_affine.nan_to_qmin", _zero_scale, lambda x, zero_point: np.zeros_like(x),
           _samples, atol=0, rtol=0),
]
