"""Dynamically quantized modules (PyTorch's ``torch.ao.nn.quantized.dynamic``): int8 weights,
activations quantized per call (NOTE [Dynamic quantized linear]), float outputs."""
from .modules import LSTM, Linear, LinearReLU

__all__ = ["Linear", "LinearReLU", "LSTM"]
