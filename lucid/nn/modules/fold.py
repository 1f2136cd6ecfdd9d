"""``lucid.nn.modules.fold``: PyTorch's module path for ``Fold`` and ``Unfold``."""
from ..shuffle import Fold, Unfold  # noqa: F401

__all__ = ["Fold", "Unfold"]
