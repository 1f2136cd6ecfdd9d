"""Data-parallel wrappers: :class:`DataParallel` (several devices of one process, NOTE [DataParallel
in one process]) and :class:`DistributedDataParallel` (on ``lucid.distributed``)."""
from .data_parallel import DataParallel, data_parallel, gather, parallel_apply, replicate, scatter, scatter_kwargs
from .distributed import DistributedDataParallel

DDP = DistributedDataParallel

__all__ = ["replicate", "scatter", "parallel_apply", "gather", "data_parallel", "DataParallel",
           "DistributedDataParallel"]
