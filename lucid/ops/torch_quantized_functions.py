"""PyTorch's top-level functions on quantized tensors: the ``q_*`` queries and ``int_repr`` as
functions, ``empty_quantized``, ``quantized_batch_norm``, ``quantized_max_pool1d/2d/3d``,
``fused_moving_avg_obs_fake_quant`` and ``choose_qparams_optimized``.

They are thin compositions of :mod:`lucid._core.quantized` (NOTE [Quantized tensors]): a
quantized result is computed in float and quantized once, which is exact for max pooling
(the maximum of representable values is representable) and PyTorch's rounding elsewhere.
"""
from __future__ import annotations

import numpy as np

from .._core.grad_mode import no_grad
from ._family import _as_tensor

__all__ = ["q_scale", "q_zero_point", "q_per_channel_scales", "q_per_channel_zero_points", "q_per_channel_axis",
           "int_repr", "empty_quantized", "quantized_batch_norm", "quantized_max_pool1d", "quantized_max_pool2d",
           "quantized_max_pool3d", "fused_moving_avg_obs_fake_quant", "choose_qparams_optimized"]


def _L():
    import lucid

    return lucid


def _quantized(input, op):
    if not getattr(input, "is_quantized", False):
        raise RuntimeError(f"{op}: expected a quantized tensor, got {getattr(input, 'dtype', type(input).__name__)}")
    return input


def q_scale(input):
    """The scale of a per-tensor quantized tensor (a float), as ``input.q_scale()``.

    Examples
    --------
    >>> import lucid
    >>> lucid.q_scale(lucid.quantize_per_tensor(lucid.tensor([1.0]), 0.5, 0, lucid.quint8))
    0.5
    """
    return _quantized(input, "q_scale").q_scale()


def q_zero_point(input):
    """The zero point of a per-tensor quantized tensor (an int), as ``input.q_zero_point()``.

    Examples
    --------
    >>> import lucid
    >>> lucid.q_zero_point(lucid.quantize_per_tensor(lucid.tensor([1.0]), 0.5, 3, lucid.quint8))
    3
    """
    return _quantized(input, "q_zero_point").q_zero_point()


def q_per_channel_scales(input):
    """The float64 scales of a per-channel quantized tensor.

    Examples
    --------
    >>> import lucid
    >>> scales = lucid.tensor([0.1, 0.2], dtype=lucid.float64)
    >>> q = lucid.quantize_per_channel(lucid.ones(2, 2), scales, lucid.tensor([0, 0]), 0, lucid.qint8)
    >>> lucid.q_per_channel_scales(q).tolist()
    [0.1, 0.2]
    """
    return _quantized(input, "q_per_channel_scales").q_per_channel_scales()


def q_per_channel_zero_points(input):
    """The int64 zero points of a per-channel quantized tensor.

    Examples
    --------
    >>> import lucid
    >>> q = lucid.quantize_per_channel(lucid.ones(2, 2), lucid.tensor([0.1, 0.2]), lucid.tensor([0, 1]), 0, lucid.qint8)
    >>> lucid.q_per_channel_zero_points(q).tolist()
    [0, 1]
    """
    return _quantized(input, "q_per_channel_zero_points").q_per_channel_zero_points()


def q_per_channel_axis(input):
    """The channel axis of a per-channel quantized tensor (an int).

    Examples
    --------
    >>> import lucid
    >>> q = lucid.quantize_per_channel(lucid.ones(2, 2), lucid.tensor([0.1, 0.2]), lucid.tensor([0, 1]), 1, lucid.qint8)
    >>> lucid.q_per_channel_axis(q)
    1
    """
    return _quantized(input, "q_per_channel_axis").q_per_channel_axis()


def int_repr(input):
    """The integers behind a quantized tensor (uint8 for quint8, int8 for qint8, int32 for qint32).

    Examples
    --------
    >>> import lucid
    >>> lucid.int_repr(lucid.quantize_per_tensor(lucid.tensor([1.0]), 0.5, 3, lucid.quint8)).tolist()
    [5]
    """
    return _quantized(input, "int_repr").int_repr()


def empty_quantized(size, qtensor, *, dtype=None, layout=None, device=None, pin_memory=False, memory_format=None):
    """A quantized tensor of ``size`` with ``qtensor``'s quantizer (scheme, scale(s), zero
    point(s), axis) and dtype; its integers are 0 (PyTorch's are uninitialized).

    Examples
    --------
    >>> import lucid
    >>> q = lucid.quantize_per_tensor(lucid.tensor([1.0]), 0.5, 3, lucid.quint8)
    >>> e = lucid.empty_quantized([2, 2], q)
    >>> e.shape, e.q_scale(), e.q_zero_point()
    ((2, 2), 0.5, 3)
    """
    from .._core.dtypes import as_lucid
    from .._core.quantized import PER_TENSOR, RANGE, make_quantized

    q = _quantized(qtensor, "empty_quantized")
    qdtype = q.dtype if dtype is None else as_lucid(dtype)
    if qdtype != q.dtype:
        raise RuntimeError(f"empty_quantized: dtype {qdtype} differs from the quantizer's {q.dtype}")
    size = tuple(size[0]) if len(size) == 1 and isinstance(size[0], (list, tuple)) else tuple(size)
    lo = RANGE[qdtype][0]
    ints = _L().zeros(size, dtype=q.int_repr().dtype, device=device if device is not None else q.device)
    if lo > 0:  # no quantized dtype has a positive lower bound; kept general
        ints = ints + lo
    if q.qscheme() in PER_TENSOR:
        return make_quantized(ints, qdtype, q.qscheme(), q.q_scale(), q.q_zero_point())
    return make_quantized(ints, qdtype, q.qscheme(), scales=q.q_per_channel_scales(),
                          zero_points=q.q_per_channel_zero_points(), axis=q.q_per_channel_axis())


def quantized_batch_norm(input, weight, bias, mean, var, eps, output_scale, output_zero_point):
    """Inference batch norm of a per-tensor quantized ``input`` (channels in dim 1), quantized
    with ``output_scale`` / ``output_zero_point`` in the input's dtype.

    Examples
    --------
    >>> import lucid
    >>> q = lucid.quantize_per_tensor(lucid.tensor([[1.0, 2.0]]), 0.1, 0, lucid.quint8)
    >>> out = lucid.quantized_batch_norm(q, lucid.ones(2), lucid.zeros(2), lucid.zeros(2), lucid.ones(2), 0.0, 0.5, 0)
    >>> out.dequantize().tolist()
    [[1.0, 2.0]]
    """
    L = _L()
    q = _per_tensor(input, "quantized_batch_norm")
    x = q.dequantize()
    channels = x.shape[1] if x.ndim > 1 else 1
    shape = [1] * x.ndim
    if x.ndim > 1:
        shape[1] = channels
    alpha = _as_tensor(weight).float() * (_as_tensor(var).float() + float(eps)).rsqrt()
    beta = _as_tensor(bias).float() - _as_tensor(mean).float() * alpha
    out = x * alpha.reshape(shape) + beta.reshape(shape)
    return L.quantize_per_tensor(out.detach(), float(output_scale), int(output_zero_point), q.dtype)


def _per_tensor(input, op):
    from .._core.quantized import PER_TENSOR

    q = _quantized(input, op)
    if q.qscheme() not in PER_TENSOR:
        raise RuntimeError(f"{op}: only per-tensor quantized tensors are supported, got {q.qscheme()}")
    return q


def _quantized_max_pool(n, input, kernel_size, stride, padding, dilation, ceil_mode):
    import lucid.nn.functional as F

    op = f"quantized_max_pool{n}d"
    q = _per_tensor(input, op)
    stride = None if stride is None or (isinstance(stride, (list, tuple)) and not stride) else stride
    pooled = getattr(F, f"max_pool{n}d")(q.dequantize(), kernel_size, stride, padding, dilation, ceil_mode=ceil_mode)
    return _L().quantize_per_tensor(pooled, q.q_scale(), q.q_zero_point(), q.dtype)


def quantized_max_pool1d(input, kernel_size, stride=(), padding=0, dilation=1, ceil_mode=False):
    """1-D max pooling of a per-tensor quantized tensor; the result keeps its scale and zero point.

    Examples
    --------
    >>> import lucid
    >>> q = lucid.quantize_per_tensor(lucid.tensor([[1.0, 3.0, 2.0, 0.0]]), 0.5, 0, lucid.quint8)
    >>> lucid.quantized_max_pool1d(q, [2]).dequantize().tolist()
    [[3.0, 2.0]]
    """
    return _quantized_max_pool(1, input, kernel_size, stride, padding, dilation, ceil_mode)


def quantized_max_pool2d(input, kernel_size, stride=(), padding=0, dilation=1, ceil_mode=False):
    """2-D max pooling of a per-tensor quantized tensor (see :func:`quantized_max_pool1d`).

    Examples
    --------
    >>> import lucid
    >>> q = lucid.quantize_per_tensor(lucid.arange(16.0).reshape(1, 4, 4), 1.0, 0, lucid.quint8)
    >>> lucid.quantized_max_pool2d(q, [2, 2]).dequantize().tolist()
    [[[5.0, 7.0], [13.0, 15.0]]]
    """
    return _quantized_max_pool(2, input, kernel_size, stride, padding, dilation, ceil_mode)


def quantized_max_pool3d(input, kernel_size, stride=(), padding=0, dilation=1, ceil_mode=False):
    """3-D max pooling of a per-tensor quantized tensor (see :func:`quantized_max_pool1d`).

    Examples
    --------
    >>> import lucid
    >>> q = lucid.quantize_per_tensor(lucid.arange(8.0).reshape(1, 2, 2, 2), 1.0, 0, lucid.quint8)
    >>> lucid.quantized_max_pool3d(q, [2, 2, 2]).dequantize().tolist()
    [[[[7.0]]]]
    """
    return _quantized_max_pool(3, input, kernel_size, stride, padding, dilation, ceil_mode)


def fused_moving_avg_obs_fake_quant(input, observer_on, fake_quant_on, running_min, running_max, scale, zero_point,
                                    averaging_const, quant_min, quant_max, ch_axis, per_row_fake_quant=False,
                                    symmetric_quant=False):
    """One step of PyTorch's fused observer + fake quantization (the kernel behind
    :class:`lucid.ao.quantization.FusedMovingAvgObsFakeQuantize`).

    With ``observer_on[0] == 1`` the running min/max move towards the input's (per row along
    ``ch_axis`` with ``per_row_fake_quant``) by ``averaging_const`` (taken as they are on the
    first step, while they are still +-inf), in place. With ``fake_quant_on[0] == 1``,
    ``scale`` / ``zero_point`` are recomputed from them in place (fbgemm's rule; symmetric with
    ``symmetric_quant``) and the input is fake-quantized with them (its gradient: the straight
    through estimator inside the range); else the input comes back as a copy.

    Examples
    --------
    >>> import lucid
    >>> lo, hi = lucid.tensor(float("inf")), lucid.tensor(float("-inf"))
    >>> s, z = lucid.tensor([1.0]), lucid.tensor([0], dtype=lucid.int32)
    >>> out = lucid.fused_moving_avg_obs_fake_quant(lucid.tensor([-1.0, 2.0]), lucid.tensor([1]), lucid.tensor([1]),
    ...                                             lo, hi, s, z, 0.01, 0, 255, 0)
    >>> out.tolist(), lo.item(), hi.item(), z.tolist()
    ([-1.0, 2.0], -1.0, 2.0, [85])
    """
    from .._core.quantized import choose_qparams

    L = _L()
    x = _as_tensor(input)
    if int(_as_tensor(observer_on).reshape(-1)[0]) == 1:
        with no_grad():
            seen = x.detach()
            if per_row_fake_quant:
                rows = seen.movedim(ch_axis, 0).reshape(seen.shape[ch_axis], -1)
                lo, hi = rows.amin(1), rows.amax(1)
            else:
                lo, hi = seen.amin(), seen.amax()
            c = float(averaging_const)
            new_lo = L.where(running_min.isinf(), lo, running_min + (lo - running_min) * c)
            new_hi = L.where(running_max.isinf(), hi, running_max + (hi - running_max) * c)
            running_min.copy_(new_lo.reshape(running_min.shape))
            running_max.copy_(new_hi.reshape(running_max.shape))
    if int(_as_tensor(fake_quant_on).reshape(-1)[0]) != 1:
        return x.clone()
    with no_grad():  # as PyTorch's kernel, the qparams are recomputed only when fake-quantizing
        lows, highs = running_min.reshape(-1).tolist(), running_max.reshape(-1).tolist()
        chosen = [choose_qparams(a, b, int(quant_min), int(quant_max), preserve_sparsity=bool(symmetric_quant))
                  for a, b in zip(lows, highs)]
        scale.copy_(L.tensor([s for s, _ in chosen], dtype=scale.dtype, device=scale.device).reshape(scale.shape))
        zero_point.copy_(L.tensor([z for _, z in chosen], dtype=zero_point.dtype,
                                  device=zero_point.device).reshape(zero_point.shape))
    if per_row_fake_quant:
        return L.fake_quantize_per_channel_affine(x, scale, zero_point, ch_axis, int(quant_min), int(quant_max))
    return L.fake_quantize_per_tensor_affine(x, scale, zero_point, int(quant_min), int(quant_max))


def _range_loss(values, low, high, bit_width):
    """Sum of squared errors of quantizing ``values`` to ``2**bit_width`` levels over [low, high]."""
    levels = (1 << bit_width) - 1
    scale = np.float32((high - low) / levels)
    inverse = np.float32(1.0) / (scale if scale != 0 else np.float32(1.0))
    q = np.clip(np.rint((values - low) * inverse), 0, levels).astype(np.float32)
    err = (q * scale + low - values).astype(np.float32)
    return np.float32(np.sum(err * err, dtype=np.float32))


def choose_qparams_optimized(input, numel, n_bins, ratio, bit_width):
    """``(max, min)`` of a range for ``bit_width``-bit quantization of the first ``numel``
    values, searched greedily (PyTorch's, from fbgemm): starting from the data's range, shrink
    one end by ``(max - min) / n_bins`` at a time, whichever loses less squared error, while at
    least ``n_bins * (1 - ratio)`` steps remain; the answer is the best local minimum seen.

    Computed on the host in float32, as the kernel. Limitation: it matches PyTorch 2.13 on the
    searches tested (2 to 8 bits, up to 200 bins), but with thousands of bins (2048, ratio 0.9)
    about one input in five ends a few steps away from PyTorch's answer, for a reason not found.

    Examples
    --------
    >>> import lucid
    >>> hi, lo = lucid.choose_qparams_optimized(lucid.tensor([0.0, 0.5, 1.0, 8.0]), 4, 16, 0.5, 2)
    >>> lo.tolist(), hi.tolist()
    ([0.5], [8.0])
    """
    from .._core.backend import host

    x = _as_tensor(input)
    if x.dtype != np.float32:
        raise RuntimeError(f"choose_qparams_optimized: expected a float32 input, got {x.dtype}")
    values = host(x.detach().reshape(-1)._data)[:int(numel)].astype(np.float32)
    if values.size == 0:
        raise RuntimeError("choose_qparams_optimized: numel must be positive")
    low, high = np.float32(values.min()), np.float32(values.max())
    step = np.float32((high - low) / n_bins)
    min_bins = np.float32(n_bins * (1.0 - ratio))
    cur_low, cur_high = low, high
    cur = best = _range_loss(values, low, high, bit_width)
    best_low, best_high = low, high
    while cur_low + step * min_bins < cur_high:
        raise_low = _range_loss(values, np.float32(cur_low + step), cur_high, bit_width)
        drop_high = _range_loss(values, cur_low, np.float32(cur_high - step), bit_width)
        if cur < raise_low and cur < drop_high and cur < best:
            best, best_low, best_high = cur, cur_low, cur_high
        if raise_low < drop_high:
            cur_low, cur = np.float32(cur_low + step), raise_low
        else:
            cur_high, cur = np.float32(cur_high - step), drop_high
    L = _L()
    return (L.tensor([float(best_high)], dtype=L.float32, device=x.device),
            L.tensor([float(best_low)], dtype=L.float32, device=x.device))
