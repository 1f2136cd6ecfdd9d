"""Quantized activations and batch norm (PyTorch's ``torch.ao.nn.quantized`` ReLU6,
Hardswish, LeakyReLU, ELU, BatchNorm2d/3d) and ``lucid.ao.nn.quantized.functional``'s forms.

ReLU6 clamps the integers (NOTE [Ops on quantized tensors]); the others dequantize, compute
in float32 and requantize to the module's ``scale`` and ``zero_point`` (PyTorch's kernels
do the same, vectorised), so a value may land one step away on a rounding tie.
"""
from __future__ import annotations

import lucid
from lucid import nn
from lucid._core.quantized import PER_TENSOR, QuantizedTensor, quantize_per_tensor

from .._nn_utils import observed_qparams
from ._qops import relu6 as _relu6

__all__ = ["ReLU6", "Hardswish", "LeakyReLU", "ELU", "BatchNorm2d", "BatchNorm3d"]


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
