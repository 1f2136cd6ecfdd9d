"""Fake quantization (PyTorch's ``torch.fake_quantize_per_tensor_affine`` and
``fake_quantize_per_channel_affine``): quantize and dequantize in one differentiable step, the
building block of quantization-aware training.

NOTE [Straight-through fake quantization]
The forward is ``(clamp(zp + round(x / scale), qmin, qmax) - zp) * scale`` with PyTorch's exact
rounding (the float32 reciprocal of the float32 scale, the product in the input's dtype, half
to even; per tensor the final product is float32 even for float64 input, as PyTorch's kernel).
The gradient is PyTorch's straight-through estimator: 1 where ``zp + round(x / scale)`` lies in
``[qmin, qmax]``, 0 outside. Both are composed from Lucid ops, so the four rules come free:
the value is computed from ``x.detach()`` and the gradient path is
``where(inside, x - x.detach(), 0)``, which is exactly zero in value (``x - x``), has
derivative ``inside`` and second derivative 0 (as PyTorch's). Scale and zero point get no
gradient (PyTorch's functions give them none either).
"""
from __future__ import annotations

import numpy as np

from .tensor import Tensor

__all__ = ["fake_quantize_per_tensor_affine", "fake_quantize_per_channel_affine"]


def _lucid():
    import lucid

    return lucid


def _check(input, quant_min, quant_max, name):
    if not isinstance(input, Tensor):
        raise TypeError(f"{name}: expected a Tensor, got {type(input).__name__}")
    if input.dtype.kind != "f":
        raise NotImplementedError(f"{name}: not implemented for {input.dtype} (expected a floating point tensor)")
    if not quant_min <= quant_max:
        raise RuntimeError(f"{name}: `quant_min` should be less than or equal to `quant_max`.")


def _straight_through(input, value, inside):
    """``value`` forward, ``inside`` (0/1) as the derivative with respect to ``input``."""
    L = _lucid()
    return value + L.where(inside, input - input.detach(), 0.0)


def fake_quantize_per_tensor_affine(input, scale, zero_point, quant_min, quant_max):
    """Quantize ``input`` to integers in ``[quant_min, quant_max]`` and map them back, with a
    straight-through gradient (NOTE [Straight-through fake quantization]).

    Parameters
    ----------
    input : Tensor
        Floating point (float16 computes in float32, as PyTorch's kernel).
    scale : float or Tensor
        A 0-d/1-element float tensor works too (PyTorch's tensor-qparams form).
    zero_point : int or Tensor
    quant_min, quant_max : int

    Returns
    -------
    Tensor
        Same shape and dtype as ``input``; its gradient is 1 where the quantized value
        was not clamped, 0 elsewhere.

    Examples
    --------
    >>> import lucid
    >>> x = lucid.tensor([-1.0, 0.26, 0.5, 2.0], requires_grad=True)
    >>> y = lucid.fake_quantize_per_tensor_affine(x, 0.1, 0, -5, 10)
    >>> y
    tensor([-0.5,  0.3,  0.5,  1. ], grad_fn=<AddBackward0>)
    >>> y.sum().backward()
    >>> x.grad
    tensor([0., 1., 1., 0.])
    """
    name = "fake_quantize_per_tensor_affine"
    _check(input, quant_min, quant_max, name)
    if isinstance(scale, Tensor) or isinstance(zero_point, Tensor):
        L = _lucid()
        scale = L.as_tensor(scale).detach().float().reshape(())
        zero_point = L.as_tensor(zero_point).detach().reshape(())
        return _fake_quantize(input, scale, zero_point, quant_min, quant_max, True, name)
    if not quant_min <= zero_point <= quant_max:
        raise RuntimeError(f"{name}: `zero_point` must be between `quant_min` and `quant_max`.")
    return _fake_quantize(input, float(scale), int(zero_point), quant_min, quant_max, True, name)


def fake_quantize_per_channel_affine(input, scale, zero_point, axis, quant_min, quant_max):
    """Fake-quantize each slice of ``input`` along ``axis`` with its own scale and zero point,
    with a straight-through gradient (NOTE [Straight-through fake quantization]).

    Parameters
    ----------
    input : Tensor
        Floating point.
    scale : Tensor
        1-D float32, ``input.shape[axis]`` long.
    zero_point : Tensor
        1-D, as long as ``scale``: int32 (each within ``[quant_min, quant_max]``), or float32 or
        float16, added before rounding and allowed outside that range, as PyTorch.
    axis : int
    quant_min, quant_max : int

    Examples
    --------
    >>> import lucid
    >>> x = lucid.tensor([[0.26, 3.0], [0.26, 3.0]])
    >>> s, z = lucid.tensor([0.1, 0.5]), lucid.tensor([0, 1], dtype=lucid.int32)
    >>> lucid.fake_quantize_per_channel_affine(x, s, z, 0, 0, 5)
    tensor([[0.3, 0.5],
            [0.5, 2. ]])
    """
    name = "fake_quantize_per_channel_affine"
    _check(input, quant_min, quant_max, name)
    L = _lucid()
    if not (isinstance(scale, Tensor) and isinstance(zero_point, Tensor)):
        raise TypeError(f"{name}: scale and zero_point must be tensors")
    if scale.dtype != np.float32:
        raise RuntimeError(f"{name}: Scale must be Float, found {scale.dtype}")
    if zero_point.dtype not in (np.int32, np.float32, np.float16):
        raise RuntimeError(f"{name}: Zero-point must be Int32, Float or Half, found {zero_point.dtype}")
    nd = input.ndim
    if not -nd <= axis < max(nd, 1):
        raise IndexError(f"{name}: axis {axis} is out of range for a {nd}-d input")
    axis = axis % max(nd, 1)
    n = input.shape[axis] if nd else 1
    if tuple(scale.shape) != (n,) or tuple(zero_point.shape) != (n,):
        raise RuntimeError(f"{name}: dimensions of scale and zero-point are not consistent with input tensor")
    shape = [1] * nd
    if nd:
        shape[axis] = n
    if zero_point.dtype != np.int32:  # PyTorch neither range-checks nor rounds float zero points
        return _fake_quantize_float_zero_points(input, scale.detach().reshape(shape),
                                                zero_point.detach().reshape(shape), quant_min, quant_max)
    if zero_point.device.type == "cpu" and n and not L.all((zero_point >= quant_min) & (zero_point <= quant_max)):
        raise RuntimeError(f"{name}: `zero_point` must be between `quant_min` and `quant_max`.")
    scale = scale.detach().reshape(shape)
    zero_point = L.round(zero_point.detach()).to(L.int64).reshape(shape)
    return _fake_quantize(input, scale, zero_point, quant_min, quant_max, False, name)


def _fake_quantize_float_zero_points(input, scale, zero_point, qmin, qmax):
    """PyTorch's per-channel kernel for float zero points (also what ``lucid.ao.quantization.
    fake_quantize.fake_quantize_float_qparams`` runs): ``q = rint(x * f32(1 / scale) + zero_point)`` (the product exact
    in float64, as the fused multiply-add of x86 builds), then ``(clamp(q) - zero_point) * scale`` in
    float64, rounded to the input's dtype. The kernel's integer cast sends a non-finite q to
    ``quant_min``; the gradient is the straight-through one inside the range."""
    L = _lucid()
    x = input.detach()
    zp = zero_point.to(device=x.device, dtype=L.float64)
    q = L.round((x.double() * (1.0 / scale.to(x.device)).double() + zp).float())
    inside = (q >= qmin) & (q <= qmax)
    q = L.where(L.isfinite(q), q, float(qmin)).clamp(qmin, qmax)
    value = ((q.double() - zp) * scale.to(x.device).double()).to(x.dtype)
    return _straight_through(input, value, inside)


def _fake_quantize(input, scale, zero_point, qmin, qmax, per_tensor, name):
    L = _lucid()
    x = input.detach()
    half = x.dtype == np.float16
    if half:  # PyTorch's half kernel computes in float
        x = x.float()
    if isinstance(scale, Tensor):
        inv = (1.0 / scale).to(x.dtype)  # float32 reciprocal, widened exactly for float64
        sc = scale.to(x.dtype)
        zp = zero_point.to(x.dtype)
    else:
        with np.errstate(divide="ignore", over="ignore"):
            inv = float(np.float32(1.0) / np.float32(scale))
        sc, zp = float(np.float32(scale)), float(zero_point)
    q = L.round(x * inv) + zp  # x is detached: the value path records nothing
    inside = (q >= qmin) & (q <= qmax)
    # PyTorch clamps with fmax/fmin, so NaN (NaN input, or 0 * inf with a zero scale) lands on quant_min
    steps = L.where(L.isnan(q), float(qmin), q.clamp(qmin, qmax)) - zp
    if per_tensor and x.dtype != np.float32:  # the kernel's last product is float32
        value = (steps.float() * (sc.float() if isinstance(sc, Tensor) else sc)).to(x.dtype)
    else:
        value = steps * sc
    if half:
        value = value.half()
    return _straight_through(input, value, inside)
