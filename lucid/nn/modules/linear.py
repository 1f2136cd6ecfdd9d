"""``lucid.nn.modules.linear``: PyTorch's module path for ``Identity``, ``Linear``, ``Bilinear``,
``LazyLinear`` and ``NonDynamicallyQuantizableLinear``."""
from ..lazy import LazyLinear  # noqa: F401
from ..linear import Bilinear, Identity, Linear  # noqa: F401

__all__ = ["Bilinear", "Identity", "LazyLinear", "Linear"]


class NonDynamicallyQuantizableLinear(Linear):
    """A ``Linear`` that dynamic quantization leaves alone: ``MultiheadAttention.out_proj``, whose
    weight the attention reads directly (``quantize_dynamic`` maps exact types, as PyTorch's)."""
