"""Convolution layers: ``Conv1d``, ``Conv2d``, ``Conv3d``, ``ConvTranspose1d/2d/3d``.

Parameter shapes, names and default initialisation follow PyTorch: weight
``kaiming_uniform_(a=sqrt(5))``, bias ``U(-1/sqrt(fan_in), 1/sqrt(fan_in))``.
"""
from __future__ import annotations

import math

from . import functional as F
from . import init
from .module import Module
from .parameter import Parameter

__all__ = ["Conv1d", "Conv2d", "Conv3d", "ConvTranspose1d", "ConvTranspose2d", "ConvTranspose3d"]


def _ntuple(v, n):
    return (v,) * n if isinstance(v, int) else tuple(v)


def _empty(shape, dtype):
    import lucid

    return lucid.empty(*shape, dtype=dtype)


class _ConvNd(Module):
    _nsp = 2
    _transposed = False

    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0, dilation=1, groups=1,
                 bias=True, padding_mode="zeros", device=None, dtype=None, output_padding=0):
        super().__init__()
        name = type(self).__name__
        if groups <= 0 or in_channels % groups or out_channels % groups:
            raise ValueError(f"{name}: in_channels ({in_channels}) and out_channels ({out_channels}) must be "
                             f"divisible by groups ({groups})")
        if padding_mode not in ("zeros", "reflect", "replicate", "circular"):
            raise ValueError(f"{name}: padding_mode must be one of 'zeros', 'reflect', 'replicate' or "
                             f"'circular', got {padding_mode!r}")
        if padding_mode != "zeros" and self._transposed:
            raise ValueError(f'{name}: only "zeros" padding mode is supported, got {padding_mode!r}')
        if isinstance(padding, str) and padding not in ("same", "valid"):
            raise ValueError(f"{name}: invalid padding string {padding!r}, expected 'valid' or 'same'")
        n = self._nsp
        self.in_channels, self.out_channels = in_channels, out_channels
        self.kernel_size = _ntuple(kernel_size, n)
        self.stride = _ntuple(stride, n)
        self.padding = padding if isinstance(padding, str) else _ntuple(padding, n)
        self.dilation = _ntuple(dilation, n)
        self.output_padding = _ntuple(output_padding, n)
        self.groups, self.padding_mode = groups, padding_mode
        self.transposed = self._transposed  # PyTorch's public attribute (code branches on it)
        self._reversed_padding_repeated_twice = self._pad_spec()
        if self._transposed:
            shape = (in_channels, out_channels // groups) + self.kernel_size
        else:
            shape = (out_channels, in_channels // groups) + self.kernel_size
        self.weight = Parameter(_empty(shape, dtype))
        if bias:
            self.bias = Parameter(_empty((out_channels,), dtype))
        else:
            self.register_parameter("bias", None)
        self.reset_parameters()

    def _pad_spec(self):
        """``F.pad``'s spec (last dim first) for a non-zeros ``padding_mode``; 'same' may be
        asymmetric (the extra element on the right, as PyTorch)."""
        spec = []
        for i in reversed(range(self._nsp)):
            if self.padding == "valid":
                lo = hi = 0
            elif self.padding == "same":
                total = self.dilation[i] * (self.kernel_size[i] - 1)
                lo, hi = total // 2, total - total // 2
            else:
                lo = hi = self.padding[i]
            spec += [lo, hi]
        return tuple(spec)

    def _conv_forward(self, input, weight, bias):
        """conv1d/2d/3d of ``input`` by ``weight`` and ``bias`` with this layer's settings;
        padding_mode != 'zeros' pads first. As in PyTorch, ``forward`` is
        ``self._conv_forward(input, self.weight, self.bias)``: subclasses override it to change
        the weight first (Whisper's ``Conv1d`` casts it to the input's dtype)."""
        fn = (F.conv1d, F.conv2d, F.conv3d)[self._nsp - 1]
        if self.padding_mode != "zeros":
            input = F.pad(input, self._reversed_padding_repeated_twice, mode=self.padding_mode)
            return fn(input, weight, bias, self.stride, 0, self.dilation, self.groups)
        return fn(input, weight, bias, self.stride, self.padding, self.dilation, self.groups)

    def reset_parameters(self):
        init.kaiming_uniform_(self.weight, a=math.sqrt(5))
        if self.bias is not None:
            fan_in = self.weight.shape[1] * math.prod(self.kernel_size)
            bound = 1 / math.sqrt(fan_in) if fan_in > 0 else 0
            init.uniform_(self.bias, -bound, bound)

    def extra_repr(self):
        s = f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, stride={self.stride}"
        if self.padding != (0,) * self._nsp:
            s += f", padding={self.padding}"  # a string unquoted, as PyTorch prints padding=same
        if self.dilation != (1,) * self._nsp:
            s += f", dilation={self.dilation}"
        if self._transposed and self.output_padding != (0,) * self._nsp:
            s += f", output_padding={self.output_padding}"
        if self.groups != 1:
            s += f", groups={self.groups}"
        if self.bias is None:
            s += ", bias=False"
        if self.padding_mode != "zeros":
            s += f", padding_mode={self.padding_mode}"
        return s


class Conv1d(_ConvNd):
    """1-D convolution over (N, C_in, L) -> (N, C_out, L_out); weight (C_out, C_in/groups, k)."""

    _nsp = 1

    def forward(self, input):
        return self._conv_forward(input, self.weight, self.bias)


class Conv2d(_ConvNd):
    """2-D convolution over (N, C_in, H, W); weight (C_out, C_in/groups, kh, kw).

    Examples
    --------
    >>> import lucid, lucid.nn as nn
    >>> conv = nn.Conv2d(1, 4, 3, padding=1)
    >>> conv(lucid.zeros(2, 1, 8, 8)).shape
    (2, 4, 8, 8)
    """

    _nsp = 2

    def forward(self, input):
        return self._conv_forward(input, self.weight, self.bias)


class Conv3d(_ConvNd):
    """3-D convolution over (N, C_in, D, H, W)."""

    _nsp = 3

    def forward(self, input):
        return self._conv_forward(input, self.weight, self.bias)


class _ConvTransposeNd(_ConvNd):
    _transposed = True

    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0, output_padding=0,
                 groups=1, bias=True, dilation=1, padding_mode="zeros", device=None, dtype=None):
        if isinstance(padding, str):
            raise TypeError(f"{type(self).__name__}: padding must be an int or a tuple, got {padding!r}")
        super().__init__(in_channels, out_channels, kernel_size, stride, padding, dilation, groups, bias,
                         padding_mode, device, dtype, output_padding)

    def _output_padding(self, input, output_size):
        if output_size is None:
            return self.output_padding
        n = self._nsp
        output_size = tuple(output_size)[-n:]
        sizes = [(m - 1) * s - 2 * p + d * (k - 1) + 1 for m, s, p, d, k in
                 zip(input.shape[-n:], self.stride, self.padding, self.dilation, self.kernel_size)]
        op = tuple(o - m for o, m in zip(output_size, sizes))
        if any(v < 0 or v >= max(s, d) for v, s, d in zip(op, self.stride, self.dilation)):
            raise ValueError(f"{type(self).__name__}: requested output_size {output_size} is not reachable from "
                             f"input shape {tuple(input.shape)} (minimum sizes {tuple(sizes)})")
        return op

    def forward(self, input, output_size=None):
        fn = {1: F.conv_transpose1d, 2: F.conv_transpose2d, 3: F.conv_transpose3d}[self._nsp]
        return fn(input, self.weight, self.bias, self.stride, self.padding, self._output_padding(input, output_size),
                  self.groups, self.dilation)


class ConvTranspose1d(_ConvTransposeNd):
    """1-D transposed convolution; weight (C_in, C_out/groups, k)."""

    _nsp = 1


class ConvTranspose2d(_ConvTransposeNd):
    """2-D transposed convolution; weight (C_in, C_out/groups, kh, kw).

    Examples
    --------
    >>> import lucid, lucid.nn as nn
    >>> up = nn.ConvTranspose2d(4, 2, 2, stride=2)
    >>> up(lucid.zeros(1, 4, 3, 3)).shape
    (1, 2, 6, 6)
    """

    _nsp = 2


class ConvTranspose3d(_ConvTransposeNd):
    """3-D transposed convolution."""

    _nsp = 3
