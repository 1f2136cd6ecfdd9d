"""Functional forms of the quantized layers (PyTorch's ``torch.ao.nn.quantized.functional``):
each takes a quantized tensor and returns one.

Examples
--------
>>> import lucid
>>> import lucid.ao.nn.quantized.functional as qF
>>> q = lucid.quantize_per_tensor(lucid.tensor([[[[0.0, 1.0], [2.0, 3.0]]]]), 0.5, 0, lucid.quint8)
>>> qF.adaptive_avg_pool2d(q, 1).int_repr()
tensor([[[[3]]]], dtype=lucid.uint8)
"""
from __future__ import annotations

import lucid
from lucid.nn import functional as F

from lucid._core.primitive import OpError
from lucid._core.quantized import QuantizedTensor

from . import _qops
from .activation import _need as _need_per_tensor, requantize


def _need(x, name):
    """PyTorch's ValueError for a float input (a RuntimeError too, as Lucid raised before)."""
    if not isinstance(x, QuantizedTensor):
        raise OpError(f"{name}: input to 'quantized.{name}' must be quantized, got a {x.dtype} tensor")
    return _need_per_tensor(x, name)

__all__ = ["adaptive_avg_pool2d", "adaptive_avg_pool3d", "avg_pool2d", "avg_pool3d", "max_pool1d", "max_pool2d",
           "conv1d", "conv2d", "conv3d", "linear", "hardtanh", "hardswish", "leaky_relu", "elu", "clamp", "relu6",
           "celu", "threshold", "hardsigmoid", "interpolate", "upsample", "upsample_bilinear", "upsample_nearest"]


def adaptive_avg_pool2d(input, output_size):
    """Adaptive average pooling: the mean of the stored integers, rounded half to even."""
    return F.adaptive_avg_pool2d(_need(input, "adaptive_avg_pool2d"), output_size)


def adaptive_avg_pool3d(input, output_size):
    return F.adaptive_avg_pool3d(_need(input, "adaptive_avg_pool3d"), output_size)


def avg_pool2d(input, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True,
               divisor_override=None):
    """Average pooling that keeps the scale and zero point (NOTE [Ops on quantized tensors])."""
    return F.avg_pool2d(_need(input, "avg_pool2d"), kernel_size, stride, padding, ceil_mode, count_include_pad,
                        divisor_override)


def avg_pool3d(input, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True,
               divisor_override=None):
    return F.avg_pool3d(_need(input, "avg_pool3d"), kernel_size, stride, padding, ceil_mode, count_include_pad,
                        divisor_override)


def interpolate(input, size=None, scale_factor=None, mode="nearest", align_corners=None):
    """Resize keeping the scale and zero point ('nearest' selects integers, 'bilinear' rounds the
    weighted stored integers half to even; NOTE [Ops on quantized tensors])."""
    return F.interpolate(_need(input, "interpolate"), size, scale_factor, mode, align_corners)


def upsample(input, size=None, scale_factor=None, mode="nearest", align_corners=None):
    """Deprecated alias of :func:`interpolate` (PyTorch warns likewise)."""
    import warnings

    warnings.warn("nn.quantized.functional.upsample is deprecated. Use nn.quantized.functional.interpolate instead.",
                  stacklevel=2)
    return interpolate(input, size, scale_factor, mode, align_corners)


def upsample_bilinear(input, size=None, scale_factor=None):
    """Deprecated: :func:`interpolate` with ``mode='bilinear', align_corners=True``."""
    import warnings

    warnings.warn("nn.quantized.functional.upsample_bilinear is deprecated. Use nn.quantized.functional.interpolate "
                  "instead.", stacklevel=2)
    return interpolate(input, size, scale_factor, mode="bilinear", align_corners=True)


def upsample_nearest(input, size=None, scale_factor=None):
    """Deprecated: :func:`interpolate` with ``mode='nearest'``."""
    import warnings

    warnings.warn("nn.quantized.functional.upsample_nearest is deprecated. Use nn.quantized.functional.interpolate "
                  "instead.", stacklevel=2)
    return interpolate(input, size, scale_factor, mode="nearest")


def _max_pool(n, input, kernel_size, stride, padding, dilation, ceil_mode, return_indices):
    # PyTorch hands any input to the float max pooling (a float one stays float); only a
    # quantized one must be per-tensor
    if return_indices:
        raise NotImplementedError("return_indices is not yet implemented!")
    if isinstance(input, QuantizedTensor):
        input = _need(input, f"max_pool{n}d")
    return getattr(F, f"max_pool{n}d")(input, kernel_size, stride, padding, dilation, ceil_mode=ceil_mode)


def max_pool1d(input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False, return_indices=False):
    """1-D max pooling; a quantized input keeps its scale and zero point, a float one is
    pooled in float (as PyTorch does).

    Examples
    --------
    >>> import lucid
    >>> from lucid.ao.nn.quantized import functional as qF
    >>> qF.max_pool1d(lucid.tensor([[1.0, 3.0, 2.0, 0.0]]), 2)
    tensor([[3., 2.]])
    """
    return _max_pool(1, input, kernel_size, stride, padding, dilation, ceil_mode, return_indices)


def max_pool2d(input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False, return_indices=False):
    """2-D max pooling; a quantized input keeps its scale and zero point, a float one is
    pooled in float (as PyTorch does).

    Examples
    --------
    >>> import lucid
    >>> from lucid.ao.nn.quantized import functional as qF
    >>> qF.max_pool2d(lucid.arange(16.0).reshape(1, 4, 4), 2)
    tensor([[[ 5.,  7.],
             [13., 15.]]])
    """
    return _max_pool(2, input, kernel_size, stride, padding, dilation, ceil_mode, return_indices)


def _conv(n, input, weight, bias, stride, padding, dilation, groups, padding_mode, scale, zero_point, dtype):
    from . import conv as qconv

    if dtype != lucid.quint8:
        raise NotImplementedError(f"conv{n}d: only quint8 is supported for the output")
    cls = getattr(qconv, f"Conv{n}d")
    out_ch, in_per_group = weight.shape[:2]
    m = cls(in_per_group * groups, out_ch, tuple(weight.shape[2:]), stride, padding, dilation, groups,
            bias is not None, padding_mode)
    m.set_weight_bias(weight, bias)
    m.scale, m.zero_point = float(scale), int(zero_point)
    return m(input)


def conv1d(input, weight, bias, stride=1, padding=0, dilation=1, groups=1, padding_mode="zeros", scale=1.0,
           zero_point=0, dtype=lucid.quint8):
    """A quantized 1-D convolution (NOTE [Static quantized conv]): quint8 input, qint8 weight,
    float bias, output quantized with ``scale`` / ``zero_point``."""
    return _conv(1, input, weight, bias, stride, padding, dilation, groups, padding_mode, scale, zero_point, dtype)


def conv2d(input, weight, bias, stride=1, padding=0, dilation=1, groups=1, padding_mode="zeros", scale=1.0,
           zero_point=0, dtype=lucid.quint8):
    """A quantized 2-D convolution (see :func:`conv1d`)."""
    return _conv(2, input, weight, bias, stride, padding, dilation, groups, padding_mode, scale, zero_point, dtype)


def conv3d(input, weight, bias, stride=1, padding=0, dilation=1, groups=1, padding_mode="zeros", scale=1.0,
           zero_point=0, dtype=lucid.quint8):
    """A quantized 3-D convolution (see :func:`conv1d`)."""
    return _conv(3, input, weight, bias, stride, padding, dilation, groups, padding_mode, scale, zero_point, dtype)


def linear(input, weight, bias=None, scale=None, zero_point=None):
    """A quantized linear layer; the output scale / zero point default to the input's."""
    from .modules import Linear

    _need(input, "linear")
    m = Linear(weight.shape[1], weight.shape[0], bias is not None)
    m.set_weight_bias(weight, bias)
    m.scale = float(input.q_scale() if scale is None else scale)
    m.zero_point = int(input.q_zero_point() if zero_point is None else zero_point)
    return m(input)


def hardtanh(input, min_val=-1.0, max_val=1.0, inplace=False):
    return _qops.hardtanh(_need(input, "hardtanh"), min_val, max_val, inplace)


def relu6(input, inplace=False):
    return _qops.relu6(_need(input, "relu6"), inplace)


def clamp(input, min_, max_):
    return _qops.clamp(_need(input, "clamp"), min_, max_)


def _requant(name, fn, input, scale, zero_point):
    x = _need(input, name)
    scale = x.q_scale() if scale is None else scale
    zero_point = x.q_zero_point() if zero_point is None else zero_point
    return requantize(x, fn(x.dequantize()), scale, zero_point)


def hardswish(input, scale, zero_point):
    """Hardswish, requantized to ``scale`` / ``zero_point``."""
    return _requant("hardswish", F.hardswish, input, scale, zero_point)


def leaky_relu(input, negative_slope=0.01, inplace=False, scale=None, zero_point=None):
    """LeakyReLU, requantized to ``scale`` / ``zero_point`` (the input's by default); a float
    input without them runs the float op (as PyTorch does).

    Examples
    --------
    >>> import lucid
    >>> from lucid.ao.nn.quantized import functional as qF
    >>> qF.leaky_relu(lucid.tensor([-1.0, 2.0]), 0.5)
    tensor([-0.5,  2. ])
    """
    rescale = scale is not None and zero_point is not None
    if rescale and inplace:
        raise AssertionError("Cannot rescale with `inplace`")
    if not isinstance(input, QuantizedTensor):
        if rescale:  # PyTorch would make a quantized output of a float dtype
            raise RuntimeError("leaky_relu: an output scale and zero point need a quantized input, got a "
                               f"{input.dtype} tensor")
        return F.leaky_relu(input, negative_slope, inplace=inplace)
    return _requant("leaky_relu", lambda v: F.leaky_relu(v, negative_slope), input, scale, zero_point)


def elu(input, scale, zero_point, alpha=1.0):
    return _requant("elu", lambda v: F.elu(v, alpha), input, scale, zero_point)


def celu(input, scale, zero_point, alpha=1.0):
    return _requant("celu", lambda v: F.celu(v, alpha), input, scale, zero_point)


def threshold(input, threshold, value):
    return _requant("threshold", lambda v: F.threshold(v, threshold, value), input, None, None)


def hardsigmoid(input, inplace=False):
    """Hardsigmoid; the output covers [0, 1] with scale 1/256 and zero point 0 (qint8: -128), as
    PyTorch fixes it."""
    x = _need(input, "hardsigmoid")
    zp = -128 if x.dtype == lucid.qint8 else 0
    return requantize(x, F.hardsigmoid(x.dequantize()), 1.0 / 256.0, zp)
