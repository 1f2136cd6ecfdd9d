"""``lucid.nn.modules.batchnorm``: PyTorch's module path for batch normalisation and its bases
``_NormBase``, ``_BatchNorm``, ``_LazyNormBase``."""
from ..normalization import _NormBase, _BatchNorm, BatchNorm1d, BatchNorm2d, BatchNorm3d, SyncBatchNorm  # noqa: F401
from ..lazy import LazyBatchNorm1d, LazyBatchNorm2d, LazyBatchNorm3d, _LazyNormMixin  # noqa: F401

_LazyNormBase = _LazyNormMixin  # PyTorch's name for the lazy-norm mixin

__all__ = ["BatchNorm1d", "LazyBatchNorm1d", "BatchNorm2d", "LazyBatchNorm2d", "BatchNorm3d",
           "LazyBatchNorm3d", "SyncBatchNorm"]
