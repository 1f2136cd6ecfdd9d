"""``lucid.nn.modules.distance``: PyTorch's module path for ``PairwiseDistance`` and ``CosineSimilarity``."""
from ..distance import PairwiseDistance, CosineSimilarity  # noqa: F401

__all__ = ["PairwiseDistance", "CosineSimilarity"]
