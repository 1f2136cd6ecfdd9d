"""Structured pruning (PyTorch's ``torch.ao.pruning._experimental.pruner``): row masks that
``prune()`` turns into smaller Linear, Conv2d and LSTM layers."""
from .base_structured_sparsifier import BaseStructuredSparsifier
from .FPGM_pruner import FPGMPruner
from .lstm_saliency_pruner import LSTMSaliencyPruner
from .parametrization import BiasHook, FakeStructuredSparsity
from .saliency_pruner import SaliencyPruner

__all__ = ["BaseStructuredSparsifier", "FPGMPruner", "LSTMSaliencyPruner", "BiasHook", "FakeStructuredSparsity",
           "SaliencyPruner"]
