"""``lucid.nn.modules.pixelshuffle``: PyTorch's module path for ``PixelShuffle`` and ``PixelUnshuffle``."""
from ..shuffle import PixelShuffle, PixelUnshuffle  # noqa: F401

__all__ = ["PixelShuffle", "PixelUnshuffle"]
