"""``lucid.nn.modules.instancenorm``: PyTorch's module path for instance normalisation and its base
``_InstanceNorm``."""
from ..normalization import _InstanceNorm, InstanceNorm1d, InstanceNorm2d, InstanceNorm3d  # noqa: F401
from ..lazy import LazyInstanceNorm1d, LazyInstanceNorm2d, LazyInstanceNorm3d, _LazyNormMixin  # noqa: F401

_LazyNormBase = _LazyNormMixin  # PyTorch's name for the lazy-norm mixin

__all__ = ["InstanceNorm1d", "InstanceNorm2d", "InstanceNorm3d", "LazyInstanceNorm1d", "LazyInstanceNorm2d",
           "LazyInstanceNorm3d"]
