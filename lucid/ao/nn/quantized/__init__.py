"""Quantized modules (PyTorch's ``torch.ao.nn.quantized``); ``dynamic`` holds the dynamically
quantized ones."""
import importlib

from .activation import ELU, BatchNorm2d, BatchNorm3d, Dropout, Hardswish, LeakyReLU, PReLU, ReLU6, Sigmoid, Softmax
from .conv import (Conv1d, Conv2d, Conv3d, ConvReLU1d, ConvReLU2d, ConvReLU3d, ConvTranspose1d, ConvTranspose2d,
                   ConvTranspose3d)
from .embedding_ops import Embedding, EmbeddingBag
from .functional_modules import FloatFunctional, QFunctional
from .modules import DeQuantize, Linear, LinearReLU, Quantize, ReLU
from .attention import MultiheadAttention
from .rnn import LSTM
from .normalization import GroupNorm, InstanceNorm1d, InstanceNorm2d, InstanceNorm3d, LayerNorm

__all__ = ["Quantize", "DeQuantize", "Linear", "LinearReLU", "ReLU", "Conv1d", "Conv2d", "Conv3d", "ConvReLU1d",
           "ConvReLU2d", "ConvReLU3d", "ConvTranspose1d", "ConvTranspose2d", "ConvTranspose3d", "Embedding", "EmbeddingBag", "FloatFunctional", "QFunctional", "ReLU6", "Hardswish", "LeakyReLU", "ELU",
           "BatchNorm2d", "BatchNorm3d", "Sigmoid", "Softmax", "PReLU", "Dropout", "LayerNorm", "GroupNorm",
           "InstanceNorm1d", "InstanceNorm2d", "InstanceNorm3d", "LSTM", "MultiheadAttention", "dynamic", "functional"]


def __getattr__(name):
    if name in ("dynamic", "functional"):
        return importlib.import_module(f".{name}", __name__)
    raise AttributeError(f"module 'lucid.ao.nn.quantized' has no attribute {name!r}")
