"""``lucid.utils.hooks`` (``torch.utils.hooks``): the handle every hook registration returns."""
from .._core.hooks import RemovableHandle  # noqa: F401

__all__ = ["RemovableHandle"]
