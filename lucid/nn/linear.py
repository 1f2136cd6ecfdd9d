"""``Identity``, ``Linear`` and ``Bilinear``."""
from __future__ import annotations

import math

from . import functional as F
from . import init
from .module import Module
from .parameter import Parameter

__all__ = ["Identity", "Linear", "Bilinear"]


def _empty(*shape, dtype=None):
    import lucid

    return lucid.empty(*shape, dtype=dtype)


class Identity(Module):
    """Returns its input unchanged (accepts and ignores any constructor arguments).

    Parameters
    ----------
    *args, **kwargs
        Ignored.

    Examples
    --------
    >>> import lucid, lucid.nn as nn
    >>> nn.Identity(54, unused=True)(lucid.tensor([1.0])).tolist()
    [1.0]
    """

    def __init__(self, *args, **kwargs):
        super().__init__()

    def forward(self, input):
        return input


class Linear(Module):
    """``y = x W^T + b``.

    Weight and bias are initialised from U(-1/sqrt(in_features), 1/sqrt(in_features)),
    PyTorch's default (``kaiming_uniform_(a=sqrt(5))`` for the weight).

    Parameters
    ----------
    in_features : int
        Size of each input's last dim.
    out_features : int
        Size of each output's last dim.
    bias : bool
        Learn an additive bias.
    dtype : dtype, optional
        Parameter dtype.

    Examples
    --------
    >>> import lucid, lucid.nn as nn
    >>> fc = nn.Linear(3, 2)
    >>> fc
    Linear(in_features=3, out_features=2, bias=True)
    >>> fc(lucid.zeros(4, 3)).shape
    (4, 2)
    """

    def __init__(self, in_features, out_features, bias=True, device=None, dtype=None):
        super().__init__()
        self.in_features = in_features
        self.out_features = out_features
        self.weight = Parameter(_empty(out_features, in_features, dtype=dtype))
        if bias:
            self.bias = Parameter(_empty(out_features, dtype=dtype))
        else:
            self.register_parameter("bias", None)
        self.reset_parameters()

    def reset_parameters(self):
        init.kaiming_uniform_(self.weight, a=math.sqrt(5))
        if self.bias is not None:
            fan_in = self.in_features
            bound = 1 / math.sqrt(fan_in) if fan_in > 0 else 0
            init.uniform_(self.bias, -bound, bound)

    def forward(self, input):
        return F.linear(input, self.weight, self.bias)

    def extra_repr(self):
        return f"in_features={self.in_features}, out_features={self.out_features}, bias={self.bias is not None}"


class Bilinear(Module):
    """``y = x1^T A x2 + b`` with ``A`` of shape (out, in1, in2); init U(-1/sqrt(in1), 1/sqrt(in1)).

    Parameters
    ----------
    in1_features, in2_features : int
        Sizes of the two inputs' last dims.
    out_features : int
        Size of the output's last dim.
    bias : bool
        Learn an additive bias.

    Examples
    --------
    >>> import lucid, lucid.nn as nn
    >>> nn.Bilinear(2, 3, 4)(lucid.ones(5, 2), lucid.ones(5, 3)).shape
    (5, 4)
    """

    def __init__(self, in1_features, in2_features, out_features, bias=True, device=None, dtype=None):
        super().__init__()
        self.in1_features, self.in2_features, self.out_features = in1_features, in2_features, out_features
        self.weight = Parameter(_empty(out_features, in1_features, in2_features, dtype=dtype))
        if bias:
            self.bias = Parameter(_empty(out_features, dtype=dtype))
        else:
            self.register_parameter("bias", None)
        self.reset_parameters()

    def reset_parameters(self):
        bound = 1 / math.sqrt(self.weight.shape[1])
        init.uniform_(self.weight, -bound, bound)
        if self.bias is not None:
            init.uniform_(self.bias, -bound, bound)

    def forward(self, input1, input2):
        return F.bilinear(input1, input2, self.weight, self.bias)

    def extra_repr(self):
        return (f"in1_features={self.in1_features}, in2_features={self.in2_features}, "
                f"out_features={self.out_features}, bias={self.bias is not None}")
