"""``lucid.nn.modules.linear_cross_entropy_options``: PyTorch's module path for
``LinearCrossEntropyOptions``."""
from ..linear_cross_entropy import LinearCrossEntropyOptions  # noqa: F401

__all__ = ["LinearCrossEntropyOptions"]
