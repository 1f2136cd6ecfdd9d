"""The arithmetic of dynamic quantization, as PyTorch's x86/fbgemm kernels do it.

NOTE [Dynamic quantized linear]
``linear_dynamic(x, qweight, bias)``: the input's range (float32 min and max of the whole
input) gives a quint8 scale and zero point by ``choose_qparams`` with ``reduce_range`` (0..127,
the x86/fbgemm rule), the input is quantized as fbgemm's dynamic quantizer does
(``zp + rint(x * (1/scale))`` in float32, clamped to 0..255), and the products are summed as
integers: ``acc = sum_k (xq - xz)(wq - wz)``, exact in float64 (each term is below 2^16, so
any K below 2^37 stays exact), which is BLAS-fast and runs on any device. The output is
``acc * float32(x_scale * w_scale) + bias`` rounded once to float32, as fbgemm's fused
multiply-add (per-channel weights: one multiplier per output). Reading the min and max is the
one host transfer per call (two numbers).
"""
from __future__ import annotations

import numpy as np

import lucid
from lucid._core.quantized import PER_TENSOR, _f32_inverse, _quantize_ints, choose_qparams


def input_qparams(x, reduce_range=True):
    """The quint8 ``(scale, zero_point)`` of dynamic quantization for ``x`` (float64 scale)."""
    lo, hi = (float(v) for v in lucid.aminmax(x)) if x.numel() else (0.0, 0.0)
    return choose_qparams(lo, hi, 0, 255, reduce_range)


def weight_operands(qweight):
    """``(w - w_zp)`` as float64 (out, in) and the float32 weight scale(s) (a float or a tensor)."""
    ints = qweight._ints.double()
    if qweight.qscheme() in PER_TENSOR:
        return ints - qweight.q_zero_point(), np.float32(qweight.q_scale())
    if qweight.q_per_channel_axis() != 0:
        raise RuntimeError("linear_dynamic: per-channel weights must be quantized along axis 0 (output features)")
    zps = qweight._zps.double().reshape(-1, *([1] * (ints.ndim - 1)))
    return ints - zps, qweight._scales.float()


def linear_dynamic(x, qweight, bias=None, reduce_range=True, operands=None):
    """``x @ W.T + b`` with ``x`` quantized on the fly (NOTE [Dynamic quantized linear])."""
    if x.dtype != lucid.float32:
        raise RuntimeError(f"linear_dynamic: expected a float32 input, got {x.dtype}")
    w, w_scale = operands if operands is not None else weight_operands(qweight)
    x = x.detach()
    scale, zp = input_qparams(x, reduce_range)
    xs = np.float32(scale)
    xq = _quantize_ints(x, _f32_inverse(xs), zp, lucid.quint8, False)
    acc = lucid.matmul(xq.double() - zp, w.t())
    if isinstance(w_scale, lucid.Tensor):
        multiplier = (w_scale * float(xs)).double()  # float32 products, widened exactly
    else:
        multiplier = float(np.float32(xs * w_scale))
    out = acc * multiplier
    if bias is not None:
        out = out + bias.detach().double()
    return out.float()
