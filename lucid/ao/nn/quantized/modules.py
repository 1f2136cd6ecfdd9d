"""Statically quantized modules (PyTorch's ``torch.ao.nn.quantized``): they take and return
quantized tensors.

NOTE [Static quantized linear]
``Linear`` computes as fbgemm's quantized linear: the integer sum
``acc = sum_k (xq - xz)(wq - wz)`` (exact in float64), plus the float bias divided by
``x_scale * w_scale`` (float32), times the float32 multiplier ``x_scale * w_scale / out_scale``,
rounded half to even and shifted by the output zero point, clamped to quint8 (to
``[zero_point, 255]`` with a fused ReLU).
"""
from __future__ import annotations

import numpy as np

import lucid
from lucid import nn
from lucid._core.quantized import PER_TENSOR, QuantizedTensor, make_quantized, quantize_per_tensor

from .._nn_utils import observed_qparams
from .dynamic.modules import LinearPackedParams, _Dynamic

__all__ = ["Quantize", "DeQuantize", "Linear", "LinearReLU", "ReLU"]


def _require_quantized(x, name):
    if not isinstance(x, QuantizedTensor):
        raise RuntimeError(f"{name}: expected a quantized input tensor (put a QuantStub before it), "
                           f"got a {x.dtype} tensor")


class Quantize(nn.Module):
    """Quantize float input with a fixed scale and zero point (what ``convert`` makes of a
    ``QuantStub``).

    Examples
    --------
    >>> import lucid
    >>> from lucid.ao.nn.quantized import Quantize
    >>> Quantize(0.5, 1, lucid.quint8)(lucid.tensor([0.0, 1.0])).int_repr()
    tensor([1, 3], dtype=lucid.uint8)
    """

    def __init__(self, scale, zero_point, dtype, factory_kwargs=None):
        super().__init__()
        self.register_buffer("scale", lucid.tensor([float(scale)]))
        self.register_buffer("zero_point", lucid.tensor([int(zero_point)]))
        self.dtype = dtype

    def forward(self, X):
        return quantize_per_tensor(X, float(self.scale), int(self.zero_point), self.dtype)

    @staticmethod
    def from_float(mod, use_precomputed_fake_quant=False):
        scale, zero_point = mod.activation_post_process.calculate_qparams()
        return Quantize(float(scale), int(zero_point), mod.activation_post_process.dtype)

    def extra_repr(self):
        return f"scale={self.scale}, zero_point={self.zero_point}, dtype={self.dtype}"


class DeQuantize(nn.Module):
    """Dequantize (what ``convert`` makes of a ``DeQuantStub``)."""

    def forward(self, Xq):
        return Xq.dequantize()

    @staticmethod
    def from_float(mod, use_precomputed_fake_quant=False):
        return DeQuantize()


class ReLU(nn.Module):
    """ReLU of a per-tensor quantized tensor: integers below the zero point become it."""

    def forward(self, x):
        _require_quantized(x, "ReLU")
        if x.qscheme() not in PER_TENSOR:
            raise NotImplementedError("ReLU: per-channel quantized input is not supported")
        ints = lucid.maximum(x._ints, lucid.tensor(x.q_zero_point(), dtype=x._ints.dtype, device=x.device))
        return make_quantized(ints, x.dtype, x.qscheme(), x.q_scale(), x.q_zero_point())

    def _get_name(self):
        return "ReLU"

    @classmethod
    def from_float(cls, mod, use_precomputed_fake_quant=False):
        return cls()


class Linear(_Dynamic):
    """A linear layer on quantized tensors (NOTE [Static quantized linear]): quint8 in, qint8
    weight (per tensor or per output channel), float bias, quint8 out with the observed output
    ``scale`` and ``zero_point``."""

    _version = 3
    _relu = False

    def __init__(self, in_features, out_features, bias_=True, dtype=lucid.qint8):
        super().__init__()
        self.in_features, self.out_features = in_features, out_features
        w = quantize_per_tensor(lucid.zeros(out_features, in_features), 1.0, 0, lucid.qint8)
        self._packed_params = LinearPackedParams(dtype)
        self.set_weight_bias(w, lucid.zeros(out_features) if bias_ else None)
        self.scale, self.zero_point = 1.0, 0

    def _get_name(self):
        return "QuantizedLinear"

    def extra_repr(self):
        return (f"in_features={self.in_features}, out_features={self.out_features}, scale={self.scale}, "
                f"zero_point={self.zero_point}, qscheme={self.weight().qscheme()}")

    # the pair lives in the LinearPackedParams child; these keep the old attribute names readable
    _weight = property(lambda self: self._packed_params._weight)
    _bias = property(lambda self: self._packed_params._bias)

    def weight(self):
        return self._packed_params._weight

    def bias(self):
        return self._packed_params._bias

    def set_weight_bias(self, w, b):
        if not isinstance(w, QuantizedTensor) or w.dtype != lucid.qint8:
            raise TypeError(f"set_weight_bias: {self._get_name()} takes a qint8 quantized weight, got {w.dtype}")
        if tuple(w.shape) != (self.out_features, self.in_features):
            raise ValueError(f"set_weight_bias: expected a weight of shape {(self.out_features, self.in_features)}, "
                             f"got {tuple(w.shape)}")
        self._packed_params.set_weight_bias(w, b)

    def _packed_state(self):
        return {"scale": lucid.tensor(self.scale), "zero_point": lucid.tensor(self.zero_point)}

    def _unpack_state(self, found):
        if "scale" in found:
            self.scale = float(found["scale"])
        if "zero_point" in found:
            self.zero_point = int(found["zero_point"])

    def forward(self, x):
        _require_quantized(x, self._get_name())
        if x.qscheme() not in PER_TENSOR or x.dtype != lucid.quint8:
            raise RuntimeError(f"{self._get_name()}: expected a per-tensor quint8 input, got {x.dtype}, {x.qscheme()}")
        w, bias = self._packed_params._weight_bias()
        if w.qscheme() in PER_TENSOR:
            wi, ws = w._ints.double() - w.q_zero_point(), lucid.tensor(np.float32(w.q_scale()))
        else:
            wi, ws = w._ints.double() - w._zps.double()[:, None], w._scales.float()
        xs = float(np.float32(x.q_scale()))
        lead = tuple(x.shape[:-1])
        acc = lucid.matmul(x._ints.reshape(-1, self.in_features).double() - x.q_zero_point(), wi.t().to(x.device))
        act_w = (ws * xs).to(x.device)  # float32 x_scale * w_scale
        raw = acc.float() if bias is None else acc.float() + bias.to(x.device) / act_w
        multiplier = act_w / float(np.float32(self.scale))
        rounded = lucid.round(raw * multiplier).double() + self.zero_point
        lo = self.zero_point if self._relu else 0
        ints = rounded.clamp(lo, 255).to(lucid.uint8).reshape(*lead, self.out_features)
        return make_quantized(ints, lucid.quint8, lucid.per_tensor_affine, float(np.float32(self.scale)),
                              self.zero_point)

    @classmethod
    def from_float(cls, mod, use_precomputed_fake_quant=False):
        """The quantized form of an observed ``nn.Linear`` (after ``prepare`` and calibration)."""
        from lucid.ao.nn.quantized.dynamic.modules import _quantize_weight

        base = mod[0] if isinstance(mod, nn.Sequential) else mod
        if not hasattr(mod, "activation_post_process"):
            raise AssertionError("Input float module must have activation_post_process attached (run prepare)")
        if hasattr(mod, "fold_into_weights"):  # QAT LinearBn1d: quantize the folded weight, as PyTorch
            mod.weight, mod.bias = mod.fold_into_weights()
        wobs = getattr(mod, "weight_fake_quant", None) or mod.qconfig.weight()
        wobs(base.weight)
        q = cls(base.in_features, base.out_features)
        q.set_weight_bias(_quantize_weight(base.weight, wobs), base.bias)
        q.scale, q.zero_point = observed_qparams(mod.activation_post_process)
        return q


class LinearReLU(Linear):
    """``Linear`` then ReLU in one requantization (PyTorch's ``QuantizedLinearReLU``)."""

    _relu = True

    def _get_name(self):
        return "QuantizedLinearReLU"
