"""``lucid.nn.modules.upsampling``: PyTorch's module path for ``Upsample``, ``UpsamplingNearest2d``,
``UpsamplingBilinear2d``."""
from ..upsampling import Upsample, UpsamplingNearest2d, UpsamplingBilinear2d  # noqa: F401

__all__ = ["Upsample", "UpsamplingNearest2d", "UpsamplingBilinear2d"]
