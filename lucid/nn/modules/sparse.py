"""``lucid.nn.modules.sparse``: PyTorch's module path for ``Embedding`` and ``EmbeddingBag``."""
from ..sparse import Embedding, EmbeddingBag  # noqa: F401

__all__ = ["Embedding", "EmbeddingBag"]
