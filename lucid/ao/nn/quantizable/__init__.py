"""Quantizable modules (PyTorch's ``torch.ao.nn.quantizable``): float modules taken apart so
that eager ``prepare`` can observe their intermediates; ``convert`` makes the quantized
forms in ``lucid.ao.nn.quantized``."""
from .activation import MultiheadAttention
from .rnn import LSTM, LSTMCell

__all__ = ["LSTM", "LSTMCell", "MultiheadAttention"]
