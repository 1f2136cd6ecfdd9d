"""``lucid.nn.modules.conv``: PyTorch's module path for the convolution layers and their bases
``_ConvNd``, ``_ConvTransposeNd``, ``_LazyConvXdMixin`` (and the deprecated ``_ConvTransposeMixin``).

``_ConvNd.__init__`` keeps Lucid's keyword order ``(in_channels, out_channels, kernel_size, stride,
padding, dilation, groups, bias, padding_mode, device, dtype, output_padding)``, not PyTorch's
internal one (which takes ``transposed`` and tuples positionally): subclass a public layer
(``Conv2d``) or pass keywords.
"""
import warnings

from ..conv import (_ConvNd, _ConvTransposeNd, Conv1d, Conv2d, Conv3d, ConvTranspose1d,  # noqa: F401
                    ConvTranspose2d, ConvTranspose3d)
from ..lazy import (LazyConv1d, LazyConv2d, LazyConv3d, LazyConvTranspose1d, LazyConvTranspose2d,  # noqa: F401
                    LazyConvTranspose3d, _LazyConvMixin)

_LazyConvXdMixin = _LazyConvMixin  # PyTorch's name for the lazy-conv mixin

__all__ = ["Conv1d", "Conv2d", "Conv3d", "ConvTranspose1d", "ConvTranspose2d", "ConvTranspose3d", "LazyConv1d",
           "LazyConv2d", "LazyConv3d", "LazyConvTranspose1d", "LazyConvTranspose2d", "LazyConvTranspose3d"]


class _ConvTransposeMixin(_ConvTransposeNd):
    """PyTorch's deprecated internal base of the transposed convolutions; warns on construction."""

    def __init__(self, *args, **kwargs):
        warnings.warn("`_ConvTransposeMixin` is a deprecated internal class. Please consider using public APIs.",
                      FutureWarning, stacklevel=2)
        super().__init__(*args, **kwargs)
