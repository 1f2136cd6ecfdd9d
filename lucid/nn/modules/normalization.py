"""``lucid.nn.modules.normalization``: PyTorch's module path for ``LayerNorm``, ``GroupNorm``,
``RMSNorm``, ``LocalResponseNorm``, ``CrossMapLRN2d``."""
from ..normalization import LocalResponseNorm, CrossMapLRN2d, LayerNorm, GroupNorm, RMSNorm  # noqa: F401

__all__ = ["LocalResponseNorm", "CrossMapLRN2d", "LayerNorm", "GroupNorm", "RMSNorm"]
