"""Quantized activations and batch norm (PyTorch's ``torch.ao.nn.quantized`` ReLU6,
Hardswish, LeakyReLU, ELU, Sigmoid, Softmax, PReLU, Dropout, BatchNorm2d/3d) and
``lucid.ao.nn.quantized.functional``'s forms.

ReLU6 clamps the integers (NOTE [Ops on quantized tensors]); the others dequantize, compute
in float32 and requantize to the module's ``scale`` and ``zero_point`` (PyTorch's kernels
do the same, vectorised), so a value may land one step away on a rounding tie.
"""
from __future__ import annotations

import numpy as np

import lucid
from lucid import nn
from lucid._core.quantized import PER_TENSOR, RANGE, QuantizedTensor, make_quantized, quantize_per_tensor

from .._nn_utils import observed_qparams
from ._qops import _q_bound, relu6 as _relu6

__all__ = ["ReLU6", "Hardswish", "LeakyReLU", "ELU", "Sigmoid", "Softmax", "PReLU", "Dropout", "BatchNorm2d",
           "BatchNorm3d"]


def _need(x, name):
    if not isinstance(x, QuantizedTensor) or x.qscheme() not in PER_TENSOR:
        raise RuntimeError(f"{name}: expected a per-tensor quantized input tensor, got {x.dtype}")
    return x


def requantize(x, values, scale, zero_point):
    """Float32 ``values`` quantized like ``x`` (its dtype) with the given scale and zero point."""
    return quantize_per_tensor(values, float(scale), int(zero_point), x.dtype)


class ReLU6(nn.ReLU6):
    """ReLU6 on a quantized tensor: integers clamped to ``[zero_point, quantize(6)]``.

    Examples
    --------
    >>> import lucid
    >>> from lucid.ao.nn.quantized import ReLU6
    >>> q = lucid.quantize_per_tensor(lucid.tensor([-1.0, 3.0, 8.0]), 0.1, 10, lucid.quint8)
    >>> ReLU6()(q).int_repr()
    tensor([10, 40, 70], dtype=lucid.uint8)
    """

    def forward(self, input):
        return _relu6(_need(input, "ReLU6"), getattr(self, "inplace", False))

    def _get_name(self):
        return "QuantizedReLU6"

    @staticmethod
    def from_float(mod, use_precomputed_fake_quant=False):
        return ReLU6(getattr(mod, "inplace", False))


class _Requantizing(nn.Module):
    """A float activation between dequantize and requantize with the observed scale and zero point."""

    _NAME = ""

    def __init__(self, scale=1.0, zero_point=0):
        super().__init__()
        self.scale, self.zero_point = float(scale), int(zero_point)

    def _get_name(self):
        return self._NAME

    def _save_to_state_dict(self, destination, prefix, keep_vars):
        super()._save_to_state_dict(destination, prefix, keep_vars)
        destination[prefix + "scale"] = lucid.tensor(self.scale)
        destination[prefix + "zero_point"] = lucid.tensor(self.zero_point)

    def _load_from_state_dict(self, state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys,
                              error_msgs):
        for k, kind in (("scale", float), ("zero_point", int)):
            if prefix + k in state_dict:
                setattr(self, k, kind(state_dict.pop(prefix + k)))
            elif strict:
                missing_keys.append(prefix + k)
        super()._load_from_state_dict(state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys,
                                      error_msgs)

    def _float(self, x):
        raise NotImplementedError

    def forward(self, input):
        x = _need(input, self._NAME)
        return requantize(x, self._float(x.dequantize()), self.scale, self.zero_point)


class Hardswish(_Requantizing):
    """Hardswish of a quantized tensor, requantized to ``scale`` / ``zero_point``."""

    _NAME = "QuantizedHardswish"

    def _float(self, x):
        return nn.functional.hardswish(x)

    @classmethod
    def from_float(cls, mod, use_precomputed_fake_quant=False):
        return cls(*observed_qparams(mod.activation_post_process))


class LeakyReLU(_Requantizing):
    """LeakyReLU of a quantized tensor, requantized to ``scale`` / ``zero_point``."""

    _NAME = "QuantizedLeakyReLU"

    def __init__(self, scale=1.0, zero_point=0, negative_slope=0.01, inplace=False, device=None, dtype=None):
        super().__init__(scale, zero_point)
        self.negative_slope, self.inplace = negative_slope, inplace

    def _float(self, x):
        return nn.functional.leaky_relu(x, self.negative_slope)

    @classmethod
    def from_float(cls, mod, use_precomputed_fake_quant=False):
        return cls(*observed_qparams(mod.activation_post_process), mod.negative_slope, mod.inplace)


class ELU(_Requantizing):
    """ELU of a quantized tensor, requantized to ``scale`` / ``zero_point``."""

    _NAME = "QuantizedELU"

    def __init__(self, scale=1.0, zero_point=0, alpha=1.0):
        super().__init__(scale, zero_point)
        self.alpha = alpha

    def _float(self, x):
        return nn.functional.elu(x, self.alpha)

    @classmethod
    def from_float(cls, mod, use_precomputed_fake_quant=False):
        return cls(*observed_qparams(mod.activation_post_process), mod.alpha)


class _QBatchNorm(_Requantizing):
    _DIMS = 4

    def __init__(self, num_features, eps=1e-5, momentum=0.1, device=None, dtype=None):
        super().__init__()
        self.num_features, self.eps, self.momentum = num_features, eps, momentum
        self.register_buffer("weight", lucid.ones(num_features))
        self.register_buffer("bias", lucid.zeros(num_features))
        self.register_buffer("running_mean", lucid.zeros(num_features))
        self.register_buffer("running_var", lucid.ones(num_features))
        self.register_buffer("num_batches_tracked", lucid.tensor(0, dtype=lucid.int64))

    def forward(self, input):
        if input.ndim != self._DIMS:
            raise ValueError(f"{self._NAME}: expected a {self._DIMS}-D input, got {input.ndim}-D")
        return super().forward(input)

    def _float(self, x):
        stats = [t.to(x.device) for t in (self.running_mean, self.running_var, self.weight, self.bias)]
        return nn.functional.batch_norm(x, *stats, False, 0.0, self.eps)

    @classmethod
    def from_float(cls, mod, use_precomputed_fake_quant=False):
        q = cls(mod.num_features, mod.eps)
        q.weight, q.bias = mod.weight.detach().float(), mod.bias.detach().float()
        q.running_mean, q.running_var = mod.running_mean.float(), mod.running_var.float()
        q.scale, q.zero_point = observed_qparams(mod.activation_post_process)
        return q


class BatchNorm2d(_QBatchNorm):
    """Inference batch norm of a quantized (N, C, H, W) tensor, requantized to ``scale`` /
    ``zero_point``."""

    _NAME = "QuantizedBatchNorm2d"


class BatchNorm3d(_QBatchNorm):
    """Inference batch norm of a quantized (N, C, D, H, W) tensor."""

    _NAME = "QuantizedBatchNorm3d"
    _DIMS = 5


class _QBNReLU:
    """Batch norm then ReLU before one requantization (PyTorch's ``nniq.BNReLU2d`` / ``3d``):
    what ``convert`` makes of a fused ``BNReLU2d``."""

    def _float(self, x):
        return nn.functional.relu(super()._float(x))

    @classmethod
    def from_float(cls, mod, use_precomputed_fake_quant=False):
        bn = mod[0]
        bn.activation_post_process = mod.activation_post_process
        try:
            return super().from_float(bn)
        finally:
            del bn.activation_post_process


class BNReLU2d(_QBNReLU, BatchNorm2d):
    """Quantized batch norm + ReLU on an (N, C, H, W) tensor."""

    _NAME = "QuantizedBNReLU2d"


class BNReLU3d(_QBNReLU, BatchNorm3d):
    """Quantized batch norm + ReLU on an (N, C, D, H, W) tensor."""

    _NAME = "QuantizedBNReLU3d"


def _need_kernel(x, name):
    """As :func:`_need`, with PyTorch's type for a float input: no QuantizedCPU kernel for it."""
    if not isinstance(x, QuantizedTensor):
        raise NotImplementedError(f"{name}: expected a quantized input tensor (no kernel for a {x.dtype} tensor)")
    return _need(x, name)


def quantize_by_multiplier(x, values, inv_scale, zero_point):
    """``rint(values * inv_scale) + zero_point`` in float32, clamped to ``x``'s dtype: what ATen's
    vectorised ``quantize`` does with a given float32 inverse scale (PyTorch's requantizing
    kernels), as a tensor of ``x``'s dtype with scale ``1 / inv_scale``'s source."""
    lo, hi = RANGE[x.dtype]
    ints = (lucid.round(values.float() * float(np.float32(inv_scale))) + float(int(zero_point))).clamp(lo, hi)
    return ints.to(x._ints.dtype)


class Sigmoid(nn.Sigmoid):
    """Sigmoid of a quantized tensor with a chosen output ``scale`` / ``zero_point`` (PyTorch's
    ``quantized::sigmoid``: dequantize, sigmoid in float32, ``rint(y * f32(1 / scale)) + zp``).

    Examples
    --------
    >>> import lucid
    >>> from lucid.ao.nn.quantized import Sigmoid
    >>> q = lucid.quantize_per_tensor(lucid.tensor([-8.0, 0.0, 8.0]), 0.1, 128, lucid.quint8)
    >>> Sigmoid(1 / 256, 0)(q).int_repr()
    tensor([  0, 128, 255], dtype=lucid.uint8)
    """

    def __init__(self, output_scale, output_zero_point):
        super().__init__()
        self.output_scale, self.output_zero_point = output_scale, output_zero_point

    def forward(self, input):
        x = _need_kernel(input, "Sigmoid")
        ints = quantize_by_multiplier(x, lucid.sigmoid(x.dequantize()), 1.0 / float(self.output_scale),
                                      self.output_zero_point)
        return make_quantized(ints, x.dtype, lucid.per_tensor_affine, float(self.output_scale),
                              int(self.output_zero_point))

    @classmethod
    def from_float(cls, mod, use_precomputed_fake_quant=False):
        return cls(*observed_qparams(mod.activation_post_process))


class Softmax(nn.Softmax):
    """Softmax of a quantized tensor along ``dim``, quantized with ``scale`` / ``zero_point``
    (PyTorch's x86 ``quantized::softmax``: dequantize, float softmax, ``quantize_per_tensor``).

    Examples
    --------
    >>> import lucid
    >>> from lucid.ao.nn.quantized import Softmax
    >>> q = lucid.quantize_per_tensor(lucid.tensor([[0.0, 0.0]]), 0.1, 0, lucid.quint8)
    >>> Softmax(1, 1 / 256, 0)(q).int_repr()
    tensor([[128, 128]], dtype=lucid.uint8)
    """

    def __init__(self, dim=None, scale=1.0, zero_point=0):
        super().__init__(dim)
        self.scale, self.zero_point = scale, zero_point

    def _get_name(self):
        return "QuantizedSoftmax"

    def forward(self, input):
        x = input
        if not isinstance(x, QuantizedTensor):  # any scheme: it is dequantized first
            raise NotImplementedError(f"QuantizedSoftmax: expected a quantized input tensor (no kernel for a "
                                      f"{x.dtype} tensor)")
        y = nn.functional.softmax(x.dequantize(), self.dim)
        return quantize_per_tensor(y, float(self.scale), int(self.zero_point), x.dtype)

    @staticmethod
    def from_float(mod, use_precomputed_fake_quant=False):
        return Softmax(mod.dim, *observed_qparams(mod.activation_post_process))

    @classmethod
    def from_reference(cls, mod, scale, zero_point):
        return cls(mod.dim, float(scale), int(zero_point))


class PReLU(nn.Module):
    """PReLU of a quint8 tensor with a quint8 ``weight`` (one slope, or one per channel, dim 1),
    in PyTorch's integer form: ``y = (max(q, zp) - zp) * (w(1) - w_zp) + (min(q, zp) - zp) *
    (w - w_zp)`` exactly, then ``rint(y * m) + out_zp`` with the float32 multiplier
    ``m = x_scale * w_scale * f32(1 / out_scale)`` (``w(1)`` is 1 quantized like the weight).

    Examples
    --------
    >>> import lucid
    >>> from lucid.ao.nn.quantized import PReLU
    >>> m = PReLU(0.1, 10)
    >>> m.set_weight(lucid.quantize_per_tensor(lucid.tensor([0.25]), 1 / 128, 0, lucid.quint8))
    >>> m(lucid.quantize_per_tensor(lucid.tensor([-2.0, 1.0]), 0.1, 128, lucid.quint8)).int_repr()
    tensor([ 5, 20], dtype=lucid.uint8)
    """

    def __init__(self, output_scale, output_zero_point, num_parameters=1):
        super().__init__()
        self.num_parameters = num_parameters
        self.scale, self.zero_point = output_scale, output_zero_point
        self.set_weight(quantize_per_tensor(lucid.randn(num_parameters), 1.0, 0, lucid.quint8))

    def set_weight(self, w):
        self.weight = w

    def _get_name(self):
        return "QuantizedPReLU"

    def forward(self, input):
        x = _need(input, "QuantizedPReLU") if isinstance(input, QuantizedTensor) else None
        if x is None:
            raise RuntimeError(f"QuantizedPReLU: expected a quantized input tensor, got {input.dtype}")
        w = self.weight
        if x.dtype != w.dtype:
            raise RuntimeError(f"QuantizedPReLU: found dtype {w.dtype} for the weight but expected {x.dtype}")
        if x.ndim == 0:
            raise RuntimeError("QuantizedPReLU: zero-dim input tensor is not allowed")
        wi = w._ints.to(x.device).long() - w.q_zero_point()
        channels = x.shape[1] if x.ndim > 1 else x.shape[0]
        if wi.numel() not in (1, channels):
            raise RuntimeError(f"QuantizedPReLU: the number of weights ({wi.numel()}) must match the input's "
                               f"channels ({channels})")
        if x.ndim != wi.ndim:
            shape = [1] * x.ndim
            if x.ndim > 1:
                shape[1] = wi.numel()
            wi = wi.reshape(*shape)
        zp, qi = x.q_zero_point(), x._ints.long()
        one = _q_bound(w, 1.0) - w.q_zero_point()
        acc = (lucid.clamp(qi, min=zp) - zp) * one + (lucid.clamp(qi, max=zp) - zp) * wi
        mult = np.float32(np.float32(x.q_scale()) * np.float32(w.q_scale())) * (np.float32(1) / np.float32(self.scale))
        lo, hi = RANGE[x.dtype]
        ints = (lucid.round(acc.float() * float(np.float32(mult))) + float(int(self.zero_point))).clamp(lo, hi)
        return make_quantized(ints.to(x._ints.dtype), x.dtype, lucid.per_tensor_affine, float(self.scale),
                              int(self.zero_point))

    @classmethod
    def from_float(cls, mod, use_precomputed_fake_quant=False):
        import warnings

        q = cls(*observed_qparams(mod.activation_post_process), mod.num_parameters)
        weight = mod.weight.detach().float()
        observer = mod.qconfig.weight()
        observer(weight)
        if observer.dtype != lucid.quint8:
            warnings.warn(f"PReLU's weight observer should have dtype quint8 but got {observer.dtype}", stacklevel=2)
        w_scale, w_zp = observer.calculate_qparams()
        q.set_weight(quantize_per_tensor(weight, float(w_scale), int(w_zp), lucid.quint8))
        return q


class Dropout(nn.Dropout):
    """Dropout in a quantized model: the input unchanged, in training and evaluation alike
    (PyTorch's ``QuantizedDropout`` placeholder).

    Examples
    --------
    >>> from lucid.ao.nn.quantized import Dropout
    >>> Dropout(0.3)
    QuantizedDropout(p=0.3, inplace=False)
    """

    def forward(self, input):
        return input

    def _get_name(self):
        return "QuantizedDropout"

    @classmethod
    def from_float(cls, mod, use_precomputed_fake_quant=False):
        return cls(mod.p, mod.inplace)

    @classmethod
    def from_reference(cls, mod, scale, zero_point):
        return cls(mod.p, mod.inplace)
