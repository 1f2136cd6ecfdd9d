"""Optimizers for several processes: :class:`ZeroRedundancyOptimizer` and the RPC
:class:`DistributedOptimizer` (PyTorch's ``torch.distributed.optim``; ``PostLocalSGDOptimizer``
is not built)."""
from .distributed_optimizer import DistributedOptimizer
from .zero_redundancy_optimizer import ZeroRedundancyOptimizer

__all__ = ["DistributedOptimizer", "ZeroRedundancyOptimizer"]
