"""``lucid.nn.modules.activation``: PyTorch's module path for activation layers (and
``MultiheadAttention``, which PyTorch files here)."""
from ..activation import (Threshold, ReLU, RReLU, Hardtanh, ReLU6, Sigmoid, Hardsigmoid, Tanh, SiLU, Mish,  # noqa: F401
                          Hardswish, ELU, CELU, SELU, GLU, GELU, Hardshrink, LeakyReLU, LogSigmoid, Softplus,
                          Softshrink, PReLU, Softsign, Tanhshrink, Softmin, Softmax, Softmax2d, LogSoftmax)
from ..transformer import MultiheadAttention  # noqa: F401

__all__ = ["Threshold", "ReLU", "RReLU", "Hardtanh", "ReLU6", "Sigmoid", "Hardsigmoid", "Tanh", "SiLU", "Mish",
           "Hardswish", "ELU", "CELU", "SELU", "GLU", "GELU", "Hardshrink", "LeakyReLU", "LogSigmoid",
           "Softplus", "Softshrink", "MultiheadAttention", "PReLU", "Softsign", "Tanhshrink", "Softmin",
           "Softmax", "Softmax2d", "LogSoftmax"]
