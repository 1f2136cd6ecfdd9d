"""Data sparsifiers (PyTorch's ``torch.ao.pruning._experimental.data_sparsifier``)."""
from .base_data_sparsifier import BaseDataSparsifier
from .data_norm_sparsifier import DataNormSparsifier

__all__ = ["BaseDataSparsifier", "DataNormSparsifier"]
