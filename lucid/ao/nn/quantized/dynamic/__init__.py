"""Dynamically quantized modules (PyTorch's ``torch.ao.nn.quantized.dynamic``): int8 weights,
activations quantized per call (NOTE [Dynamic quantized linear]), float outputs."""
from .cells import GRUCell, LSTMCell, RNNCell
from .modules import GRU, LSTM, Linear, LinearReLU

__all__ = ["Linear", "LinearReLU", "LSTM", "GRU", "RNNCell", "LSTMCell", "GRUCell"]
