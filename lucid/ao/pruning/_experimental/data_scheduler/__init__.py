"""Schedulers of data sparsifiers (PyTorch's ``torch.ao.pruning._experimental.data_scheduler``)."""
from .base_data_scheduler import BaseDataScheduler

__all__ = ["BaseDataScheduler"]
