"""``lucid.nn.modules.lazy``: PyTorch's module path for ``LazyModuleMixin``: modules whose parameter
shapes come from the first input."""
from ..lazy import LazyModuleMixin  # noqa: F401

__all__ = ["LazyModuleMixin"]
