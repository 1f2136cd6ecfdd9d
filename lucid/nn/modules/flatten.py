"""``lucid.nn.modules.flatten``: PyTorch's module path for ``Flatten`` and ``Unflatten``."""
from ..flatten import Flatten, Unflatten  # noqa: F401

__all__ = ["Flatten", "Unflatten"]
