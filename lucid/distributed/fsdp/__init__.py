"""``lucid.distributed.fsdp``: fully sharded data parallel training (PyTorch's FSDP1 API).

Examples
--------
>>> from lucid.distributed.fsdp import FullyShardedDataParallel, ShardingStrategy
>>> ShardingStrategy.FULL_SHARD.name
'FULL_SHARD'
"""
from .api import (BackwardPrefetch, CPUOffload, FullOptimStateDictConfig, FullStateDictConfig,
                  LocalStateDictConfig, MixedPrecision, OptimStateDictConfig, ShardedStateDictConfig,
                  ShardingStrategy, StateDictConfig, StateDictType)
from .fully_sharded_data_parallel import FullyShardedDataParallel, StateDictSettings

__all__ = ["FullyShardedDataParallel", "ShardingStrategy", "BackwardPrefetch", "StateDictType",
           "StateDictConfig", "FullStateDictConfig", "LocalStateDictConfig", "ShardedStateDictConfig",
           "OptimStateDictConfig", "FullOptimStateDictConfig", "MixedPrecision", "CPUOffload",
           "StateDictSettings"]
