"""Data-parallel wrappers: :class:`DistributedDataParallel` (on ``lucid.distributed``)."""
from .distributed import DistributedDataParallel

DDP = DistributedDataParallel

__all__ = ["DistributedDataParallel"]
