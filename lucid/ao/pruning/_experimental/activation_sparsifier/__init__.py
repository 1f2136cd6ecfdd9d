"""The activation sparsifier (PyTorch's ``torch.ao.pruning._experimental.activation_sparsifier``)."""
from .activation_sparsifier import ActivationSparsifier

__all__ = ["ActivationSparsifier"]
