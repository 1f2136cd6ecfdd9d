"""Quantization-aware-training layers (PyTorch's ``torch.ao.nn.qat``): float layers whose
weight passes through the qconfig's weight fake-quantize on every forward."""
from __future__ import annotations

from lucid import nn

from .fuse_modules import LinearReLU as _FusedLinearReLU

__all__ = ["Linear", "LinearReLU"]


class Linear(nn.Linear):
    """``nn.Linear`` with a fake-quantized weight (made by ``prepare_qat``)."""

    _FLOAT_MODULE = nn.Linear

    def __init__(self, in_features, out_features, bias=True, qconfig=None, device=None, dtype=None):
        super().__init__(in_features, out_features, bias, device=device, dtype=dtype)
        if qconfig is None:
            raise AssertionError("qconfig must be provided for QAT module")
        self.qconfig = qconfig
        self.weight_fake_quant = qconfig.weight()

    def forward(self, input):
        return nn.functional.linear(input, self.weight_fake_quant(self.weight), self.bias)

    @classmethod
    def from_float(cls, mod, use_precomputed_fake_quant=False):
        linear = mod[0] if isinstance(mod, _FusedLinearReLU) else mod
        if getattr(mod, "qconfig", None) is None:
            raise AssertionError("Input float module must have a valid qconfig")
        q = cls(linear.in_features, linear.out_features, bias=linear.bias is not None, qconfig=mod.qconfig)
        q.weight = linear.weight
        q.bias = linear.bias
        return q


class LinearReLU(Linear):
    """A fused Linear + ReLU for quantization-aware training."""

    def forward(self, input):
        return nn.functional.relu(super().forward(input))
