"""``lucid.nn.modules.linear``: PyTorch's module path for ``Identity``, ``Linear``, ``Bilinear``,
``LazyLinear`` and ``NonDynamicallyQuantizableLinear``."""
from ..lazy import LazyLinear  # noqa: F401
from ..linear import Bilinear, Identity, Linear  # noqa: F401

__all__ = ["Bilinear", "Identity", "LazyLinear", "Linear"]


class NonDynamicallyQuantizableLinear(Linear):
    """A ``Linear`` that PyTorch's dynamic quantization leaves alone (``MultiheadAttention.out_proj``
    in PyTorch). Lucid has no quantization, so it is exactly a ``Linear``; it exists so code that
    builds attention blocks with it keeps working."""
