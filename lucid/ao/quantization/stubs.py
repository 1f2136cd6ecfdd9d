"""``QuantStub``/``DeQuantStub``/``QuantWrapper`` (PyTorch's ``torch.ao.quantization.stubs``):
placeholders that :func:`~lucid.ao.quantization.convert` turns into quantize/dequantize steps."""
from __future__ import annotations

from lucid import nn

__all__ = ["QuantStub", "DeQuantStub", "QuantWrapper"]


class _IdentityStub(nn.Module):
    """An identity that carries an optional ``qconfig`` until ``convert`` replaces it."""

    def __init__(self, qconfig=None):
        super().__init__()
        if qconfig:
            self.qconfig = qconfig

    def forward(self, x):
        return x


class QuantStub(_IdentityStub):
    """Identity before calibration; the observer goes here, and ``convert`` swaps it for a
    ``Quantize`` module."""


class DeQuantStub(_IdentityStub):
    """Identity before conversion; ``convert`` swaps it for a ``DeQuantize`` module."""


class QuantWrapper(nn.Module):
    """``module`` between a QuantStub and a DeQuantStub."""

    def __init__(self, module):
        super().__init__()
        qconfig = getattr(module, "qconfig", None)
        self.add_module("quant", QuantStub(qconfig))
        self.add_module("dequant", DeQuantStub(qconfig))
        self.add_module("module", module)
        self.train(module.training)

    def forward(self, X):
        return self.dequant(self.module(self.quant(X)))
