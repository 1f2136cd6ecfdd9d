"""Rearranging layers: ``PixelShuffle``, ``PixelUnshuffle``, ``ChannelShuffle``, ``Fold`` and
``Unfold`` (thin wrappers over ``lucid.nn.functional``)."""
from __future__ import annotations

from . import functional as F
from .module import Module

__all__ = ["PixelShuffle", "PixelUnshuffle", "ChannelShuffle", "Fold", "Unfold"]


class PixelShuffle(Module):
    """:func:`~lucid.nn.functional.pixel_shuffle` with ``upscale_factor``.

    Examples
    --------
    >>> import lucid, lucid.nn as nn
    >>> nn.PixelShuffle(2)(lucid.zeros(1, 8, 3, 3)).shape
    (1, 2, 6, 6)
    """

    def __init__(self, upscale_factor):
        super().__init__()
        self.upscale_factor = upscale_factor

    def forward(self, input):
        return F.pixel_shuffle(input, self.upscale_factor)

    def extra_repr(self):
        return f"upscale_factor={self.upscale_factor}"


class PixelUnshuffle(Module):
    """:func:`~lucid.nn.functional.pixel_unshuffle` with ``downscale_factor``.

    Examples
    --------
    >>> import lucid, lucid.nn as nn
    >>> nn.PixelUnshuffle(2)(lucid.zeros(1, 2, 6, 6)).shape
    (1, 8, 3, 3)
    """

    def __init__(self, downscale_factor):
        super().__init__()
        self.downscale_factor = downscale_factor

    def forward(self, input):
        return F.pixel_unshuffle(input, self.downscale_factor)

    def extra_repr(self):
        return f"downscale_factor={self.downscale_factor}"


class ChannelShuffle(Module):
    """:func:`~lucid.nn.functional.channel_shuffle` with ``groups``.

    Examples
    --------
    >>> import lucid, lucid.nn as nn
    >>> nn.ChannelShuffle(2)(lucid.arange(4.0).reshape(1, 4, 1)).reshape(-1).tolist()
    [0.0, 2.0, 1.0, 3.0]
    """

    def __init__(self, groups):
        super().__init__()
        self.groups = groups

    def forward(self, input):
        return F.channel_shuffle(input, self.groups)

    def extra_repr(self):
        return f"groups={self.groups}"


class Unfold(Module):
    """Extract sliding blocks: :func:`~lucid.nn.functional.unfold` (im2col).

    Examples
    --------
    >>> import lucid, lucid.nn as nn
    >>> nn.Unfold(kernel_size=2)(lucid.zeros(1, 3, 4, 4)).shape
    (1, 12, 9)
    """

    def __init__(self, kernel_size, dilation=1, padding=0, stride=1):
        super().__init__()
        self.kernel_size, self.dilation, self.padding, self.stride = kernel_size, dilation, padding, stride

    def forward(self, input):
        return F.unfold(input, self.kernel_size, dilation=self.dilation, padding=self.padding, stride=self.stride)

    def extra_repr(self):
        return (f"kernel_size={self.kernel_size}, dilation={self.dilation}, padding={self.padding}, "
                f"stride={self.stride}")


class Fold(Module):
    """Sum sliding blocks back into an image: :func:`~lucid.nn.functional.fold` (col2im).

    Examples
    --------
    >>> import lucid, lucid.nn as nn
    >>> nn.Fold(output_size=(4, 4), kernel_size=2)(lucid.zeros(1, 12, 9)).shape
    (1, 3, 4, 4)
    """

    def __init__(self, output_size, kernel_size, dilation=1, padding=0, stride=1):
        super().__init__()
        self.output_size, self.kernel_size = output_size, kernel_size
        self.dilation, self.padding, self.stride = dilation, padding, stride

    def forward(self, input):
        return F.fold(input, self.output_size, self.kernel_size, dilation=self.dilation, padding=self.padding,
                      stride=self.stride)

    def extra_repr(self):
        return (f"output_size={self.output_size}, kernel_size={self.kernel_size}, dilation={self.dilation}, "
                f"padding={self.padding}, stride={self.stride}")
