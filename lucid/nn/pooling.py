"""Pooling layers: max, average, adaptive, power-average (LP), fractional max pools and max
unpooling (thin wrappers over ``nn.functional``)."""
from __future__ import annotations

from . import functional as F
from ._functional_ref import functional_ref
from .module import Module

__all__ = ["MaxPool1d", "MaxPool2d", "MaxPool3d", "AvgPool1d", "AvgPool2d", "AvgPool3d",
           "AdaptiveAvgPool1d", "AdaptiveAvgPool2d", "AdaptiveMaxPool1d", "AdaptiveMaxPool2d", "AdaptiveAvgPool3d",
           "AdaptiveMaxPool3d", "LPPool1d", "LPPool2d", "LPPool3d", "MaxUnpool1d", "MaxUnpool2d", "MaxUnpool3d",
           "FractionalMaxPool2d", "FractionalMaxPool3d"]


class _MaxPoolNd(Module):
    _fn = None

    def __init__(self, kernel_size, stride=None, padding=0, dilation=1, return_indices=False, ceil_mode=False):
        super().__init__()
        self.kernel_size, self.stride = kernel_size, stride if stride is not None else kernel_size
        self.padding, self.dilation = padding, dilation
        self.return_indices, self.ceil_mode = return_indices, ceil_mode

    def forward(self, input):
        return type(self)._fn(input, self.kernel_size, stride=self.stride, padding=self.padding,
                              dilation=self.dilation, ceil_mode=self.ceil_mode,
                              return_indices=self.return_indices)

    def extra_repr(self):
        return (f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}, "
                f"dilation={self.dilation}, ceil_mode={self.ceil_mode}")


class MaxPool1d(_MaxPoolNd):
    """1-D max pooling over (N, C, L)."""

    _fn = functional_ref("max_pool1d")


class MaxPool2d(_MaxPoolNd):
    """2-D max pooling over (N, C, H, W).

    Examples
    --------
    >>> import lucid, lucid.nn as nn
    >>> nn.MaxPool2d(2)(lucid.zeros(1, 3, 4, 4)).shape
    (1, 3, 2, 2)
    """

    _fn = functional_ref("max_pool2d")


class MaxPool3d(_MaxPoolNd):
    """3-D max pooling over (N, C, D, H, W)."""

    _fn = functional_ref("max_pool3d")


class _AvgPoolNd(Module):
    def __init__(self, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True,
                 divisor_override=None):
        super().__init__()
        self.kernel_size, self.stride = kernel_size, stride if stride is not None else kernel_size
        self.padding, self.ceil_mode = padding, ceil_mode
        self.count_include_pad, self.divisor_override = count_include_pad, divisor_override

    def extra_repr(self):
        return f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}"


class AvgPool1d(_AvgPoolNd):
    """1-D average pooling over (N, C, L).

    Examples
    --------
    >>> import lucid, lucid.nn as nn
    >>> nn.AvgPool1d(2)
    AvgPool1d(kernel_size=(2,), stride=(2,), padding=(0,))
    """

    def __init__(self, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True):
        # 1-tuples and no divisor_override, as PyTorch's AvgPool1d (its repr shows the tuples)
        one = lambda v: tuple(v) if isinstance(v, (tuple, list)) else (v,)
        super().__init__(one(kernel_size), one(stride if stride is not None else kernel_size), one(padding),
                         ceil_mode, count_include_pad)

    def forward(self, input):
        return F.avg_pool1d(input, self.kernel_size, self.stride, self.padding, self.ceil_mode,
                            self.count_include_pad)


class AvgPool2d(_AvgPoolNd):
    """2-D average pooling over (N, C, H, W)."""

    def forward(self, input):
        return F.avg_pool2d(input, self.kernel_size, self.stride, self.padding, self.ceil_mode,
                            self.count_include_pad, self.divisor_override)


class AvgPool3d(_AvgPoolNd):
    """3-D average pooling over (N, C, D, H, W)."""

    def forward(self, input):
        return F.avg_pool3d(input, self.kernel_size, self.stride, self.padding, self.ceil_mode,
                            self.count_include_pad, self.divisor_override)


class _AdaptiveNd(Module):
    def __init__(self, output_size, return_indices=False):
        super().__init__()
        self.output_size, self.return_indices = output_size, return_indices

    def extra_repr(self):
        return f"output_size={self.output_size}"


class _AdaptiveAvgPoolNd(_AdaptiveNd):
    def __init__(self, output_size):  # no return_indices, as PyTorch
        super().__init__(output_size)


class _AdaptiveMaxPoolNd(_AdaptiveNd):
    pass


class AdaptiveAvgPool1d(_AdaptiveAvgPoolNd):
    """Average pooling to a fixed output length."""

    def forward(self, input):
        return F.adaptive_avg_pool1d(input, self.output_size)


class AdaptiveAvgPool2d(_AdaptiveAvgPoolNd):
    """Average pooling to a fixed output size (``AdaptiveAvgPool2d(1)`` is global average pooling).

    Examples
    --------
    >>> import lucid, lucid.nn as nn
    >>> nn.AdaptiveAvgPool2d((1, 1))(lucid.ones(2, 3, 5, 5)).shape
    (2, 3, 1, 1)
    """

    def forward(self, input):
        return F.adaptive_avg_pool2d(input, self.output_size)


class AdaptiveMaxPool1d(_AdaptiveMaxPoolNd):
    """Max pooling to a fixed output length."""

    def forward(self, input):
        return F.adaptive_max_pool1d(input, self.output_size, return_indices=self.return_indices)


class AdaptiveMaxPool2d(_AdaptiveMaxPoolNd):
    """Max pooling to a fixed output size."""

    def forward(self, input):
        return F.adaptive_max_pool2d(input, self.output_size, return_indices=self.return_indices)


class AdaptiveAvgPool3d(_AdaptiveAvgPoolNd):
    """Average pooling of (N, C, D, H, W) to a fixed output size.

    Examples
    --------
    >>> import lucid, lucid.nn as nn
    >>> nn.AdaptiveAvgPool3d(1)(lucid.ones(1, 2, 3, 4, 5)).shape
    (1, 2, 1, 1, 1)
    """

    def forward(self, input):
        return F.adaptive_avg_pool3d(input, self.output_size)


class AdaptiveMaxPool3d(_AdaptiveMaxPoolNd):
    """Max pooling of (N, C, D, H, W) to a fixed output size.

    Examples
    --------
    >>> import lucid, lucid.nn as nn
    >>> nn.AdaptiveMaxPool3d(1)(lucid.ones(1, 2, 3, 4, 5)).shape
    (1, 2, 1, 1, 1)
    """

    def forward(self, input):
        return F.adaptive_max_pool3d(input, self.output_size, return_indices=self.return_indices)


class _LPPoolNd(Module):
    _fn = None

    def __init__(self, norm_type, kernel_size, stride=None, ceil_mode=False):
        super().__init__()
        self.norm_type, self.kernel_size, self.stride, self.ceil_mode = norm_type, kernel_size, stride, ceil_mode

    def forward(self, input):
        return type(self)._fn(input, float(self.norm_type), self.kernel_size, stride=self.stride, ceil_mode=self.ceil_mode)

    def extra_repr(self):
        return (f"norm_type={self.norm_type}, kernel_size={self.kernel_size}, stride={self.stride}, "
                f"ceil_mode={self.ceil_mode}")


def _doc(text, example):
    return f"{text}\n\nExamples\n--------\n>>> import lucid, lucid.nn as nn\n{example}\n"


class LPPool1d(_LPPoolNd):
    __doc__ = _doc("Power-average pooling over (N, C, L) (``F.lp_pool1d``).",
                   ">>> nn.LPPool1d(2, 2)(lucid.tensor([[[3.0, 4.0]]])).tolist()\n[[[5.0]]]")
    _fn = functional_ref("lp_pool1d")


class LPPool2d(_LPPoolNd):
    __doc__ = _doc("Power-average pooling over (N, C, H, W) (``F.lp_pool2d``).",
                   ">>> nn.LPPool2d(1, 2)(lucid.ones(1, 1, 2, 2)).tolist()\n[[[[4.0]]]]")
    _fn = functional_ref("lp_pool2d")


class LPPool3d(_LPPoolNd):
    __doc__ = _doc("Power-average pooling over (N, C, D, H, W) (``F.lp_pool3d``).",
                   ">>> nn.LPPool3d(1, 2)(lucid.ones(1, 1, 2, 2, 2)).shape\n(1, 1, 1, 1, 1)")
    _fn = functional_ref("lp_pool3d")


class _MaxUnpoolNd(Module):
    _fn = None
    _n = 1

    def __init__(self, kernel_size, stride=None, padding=0):
        super().__init__()

        def tup(v):  # PyTorch stores n-tuples (_single/_pair/_triple), which its repr shows
            return tuple(v) if isinstance(v, (tuple, list)) else (v,) * self._n

        self.kernel_size, self.padding = tup(kernel_size), tup(padding)
        self.stride = tup(kernel_size if stride is None else stride)

    def forward(self, input, indices, output_size=None):
        return type(self)._fn(input, indices, self.kernel_size, stride=self.stride, padding=self.padding,
                              output_size=output_size)

    def extra_repr(self):
        return f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}"


class MaxUnpool1d(_MaxUnpoolNd):
    __doc__ = _doc("Partial inverse of ``MaxPool1d`` (``F.max_unpool1d``): ``forward(input, indices, "
                   "output_size=None)``.",
                   ">>> nn.MaxUnpool1d(2)(lucid.tensor([[[3.0]]]), lucid.tensor([[[1]]])).tolist()\n"
                   "[[[0.0, 3.0]]]")
    _fn = functional_ref("max_unpool1d")


class MaxUnpool2d(_MaxUnpoolNd):
    __doc__ = _doc("Partial inverse of ``MaxPool2d`` (``F.max_unpool2d``).",
                   ">>> nn.MaxUnpool2d(2)(lucid.ones(1, 1, 1, 1), lucid.tensor([[[[3]]]])).shape\n(1, 1, 2, 2)")
    _fn = functional_ref("max_unpool2d")
    _n = 2


class MaxUnpool3d(_MaxUnpoolNd):
    __doc__ = _doc("Partial inverse of ``MaxPool3d`` (``F.max_unpool3d``).",
                   ">>> nn.MaxUnpool3d(2)(lucid.ones(1, 1, 1, 1, 1), lucid.tensor([[[[[7]]]]])).shape\n"
                   "(1, 1, 2, 2, 2)")
    _fn = functional_ref("max_unpool3d")
    _n = 3


class _FractionalMaxPoolNd(Module):
    _fn = None
    _n = 2

    def __init__(self, kernel_size, output_size=None, output_ratio=None, return_indices=False,
                 _random_samples=None):
        super().__init__()
        if (output_size is None) == (output_ratio is None):
            raise ValueError(f"{type(self).__name__}: exactly one of output_size and output_ratio must be given")
        ratios = output_ratio if isinstance(output_ratio, (tuple, list)) else [output_ratio]
        if output_ratio is not None and not all(0 < r < 1 for r in ratios):
            raise ValueError(f"{type(self).__name__}: output_ratio must be in (0, 1), got {output_ratio}")
        def tup(v):  # n-tuples, as PyTorch's _pair/_triple
            return None if v is None else tuple(v) if isinstance(v, (tuple, list)) else (v,) * self._n

        self.kernel_size, self.output_size = tup(kernel_size), tup(output_size)
        self.output_ratio = tup(output_ratio)
        self.return_indices = return_indices
        # a buffer, as in PyTorch: it travels with .to() and state_dict (when given)
        self.register_buffer("_random_samples", _random_samples)

    def forward(self, input):
        return type(self)._fn(input, self.kernel_size, output_size=self.output_size, output_ratio=self.output_ratio,
                              return_indices=self.return_indices, _random_samples=self._random_samples)


class FractionalMaxPool2d(_FractionalMaxPoolNd):
    __doc__ = _doc("Fractional max pooling over (N, C, H, W) (``F.fractional_max_pool2d``).",
                   ">>> nn.FractionalMaxPool2d(2, output_ratio=0.5)(lucid.ones(1, 1, 6, 6)).shape\n(1, 1, 3, 3)")
    _fn = functional_ref("fractional_max_pool2d")


class FractionalMaxPool3d(_FractionalMaxPoolNd):
    __doc__ = _doc("Fractional max pooling over (N, C, D, H, W) (``F.fractional_max_pool3d``).",
                   ">>> nn.FractionalMaxPool3d(2, output_size=2)(lucid.ones(1, 1, 4, 4, 4)).shape\n"
                   "(1, 1, 2, 2, 2)")
    _fn = functional_ref("fractional_max_pool3d")
    _n = 3
