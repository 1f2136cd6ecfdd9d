"""Quantized modules (PyTorch's ``torch.ao.nn.quantized``); ``dynamic`` holds the dynamically
quantized ones."""
import importlib

from .modules import DeQuantize, Linear, LinearReLU, Quantize, ReLU

__all__ = ["Quantize", "DeQuantize", "Linear", "LinearReLU", "ReLU", "dynamic"]


def __getattr__(name):
    if name == "dynamic":
        return importlib.import_module(".dynamic", __name__)
    raise AttributeError(f"module 'lucid.ao.nn.quantized' has no attribute {name!r}")
