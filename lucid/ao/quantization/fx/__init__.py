"""The graph passes behind :mod:`lucid.ao.quantization.quantize_fx` (PyTorch's
``torch.ao.quantization.fx``): patterns, fusion, observer insertion, lowering."""
from .convert import convert
from .prepare import QuantizationTracer, fuse, prepare

__all__ = ["QuantizationTracer", "fuse", "prepare", "convert"]
