"""``Upsample`` (and the ``UpsamplingNearest2d``/``UpsamplingBilinear2d`` aliases)."""
from __future__ import annotations

from . import functional as F
from .module import Module

__all__ = ["Upsample", "UpsamplingNearest2d", "UpsamplingBilinear2d"]


class Upsample(Module):
    """Resize with :func:`lucid.nn.functional.interpolate` (``size`` or ``scale_factor``).

    Parameters
    ----------
    size : int or tuple of int, optional
        The output spatial size.
    scale_factor : float or tuple of float, optional
        Multiplier of the spatial size.
    mode : str
        'nearest', 'nearest-exact', 'linear', 'bilinear' or 'trilinear'.
    align_corners : bool, optional
        For the linear modes: align the corner pixels' centres.

    Examples
    --------
    >>> import lucid, lucid.nn as nn
    >>> nn.Upsample(scale_factor=2, mode="nearest")(lucid.zeros(1, 1, 2, 3)).shape
    (1, 1, 4, 6)
    """

    def __init__(self, size=None, scale_factor=None, mode="nearest", align_corners=None,
                 recompute_scale_factor=None):
        super().__init__()
        self.name = type(self).__name__
        if isinstance(scale_factor, tuple):  # stored as floats, as PyTorch (its repr shows 2.0)
            scale_factor = tuple(float(f) for f in scale_factor)
        elif scale_factor:
            scale_factor = float(scale_factor)
        else:
            scale_factor = None
        self.size, self.scale_factor, self.mode = size, scale_factor, mode
        self.align_corners, self.recompute_scale_factor = align_corners, recompute_scale_factor

    def forward(self, input):
        return F.interpolate(input, size=self.size, scale_factor=self.scale_factor, mode=self.mode,
                             align_corners=self.align_corners,
                             recompute_scale_factor=self.recompute_scale_factor, antialias=False)

    def extra_repr(self):
        s = f"size={self.size}" if self.size is not None else f"scale_factor={self.scale_factor}"
        return s + f", mode={self.mode!r}"


class UpsamplingNearest2d(Upsample):
    """Nearest-neighbour 2-D upsampling.

    Parameters
    ----------
    size : int or tuple of int, optional
        The output spatial size.
    scale_factor : float or tuple of float, optional
        Multiplier of the spatial size.

    Examples
    --------
    >>> import lucid, lucid.nn as nn
    >>> nn.UpsamplingNearest2d(scale_factor=2)(lucid.zeros(1, 1, 2, 3)).shape
    (1, 1, 4, 6)
    """

    def __init__(self, size=None, scale_factor=None):
        super().__init__(size, scale_factor, mode="nearest")


class UpsamplingBilinear2d(Upsample):
    """Bilinear 2-D upsampling with ``align_corners=True`` (as PyTorch's class).

    Parameters
    ----------
    size : int or tuple of int, optional
        The output spatial size.
    scale_factor : float or tuple of float, optional
        Multiplier of the spatial size.

    Examples
    --------
    >>> import lucid, lucid.nn as nn
    >>> nn.UpsamplingBilinear2d(size=(1, 4))(lucid.tensor([[[[0.0, 3.0]]]])).tolist()
    [[[[0.0, 1.0, 2.0, 3.0]]]]
    """

    def __init__(self, size=None, scale_factor=None):
        super().__init__(size, scale_factor, mode="bilinear", align_corners=True)
