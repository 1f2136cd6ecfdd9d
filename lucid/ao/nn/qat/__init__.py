"""Quantization-aware-training layers (PyTorch's ``torch.ao.nn.qat``): float layers whose weight
is fake-quantized on every forward."""
from lucid.ao.quantization.qat import Linear

from ..intrinsic.qat.modules import Conv1d, Conv2d, Conv3d
from .embedding_ops import Embedding, EmbeddingBag

__all__ = ["Linear", "Conv1d", "Conv2d", "Conv3d", "Embedding", "EmbeddingBag"]
