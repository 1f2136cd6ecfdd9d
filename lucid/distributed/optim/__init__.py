"""Optimizers for several processes: :class:`ZeroRedundancyOptimizer` (PyTorch's
``torch.distributed.optim``; the RPC ``DistributedOptimizer`` and ``PostLocalSGDOptimizer``
are not built)."""
from .zero_redundancy_optimizer import ZeroRedundancyOptimizer

__all__ = ["ZeroRedundancyOptimizer"]
