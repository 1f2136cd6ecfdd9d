"""``lucid.distributed.fsdp``: fully sharded data parallel training (PyTorch's FSDP1 API and FSDP2's ``fully_shard``).

Examples
--------
>>> from lucid.distributed.fsdp import FullyShardedDataParallel, ShardingStrategy
>>> ShardingStrategy.FULL_SHARD.name
'FULL_SHARD'
"""
from .api import (BackwardPrefetch, CPUOffload, FullOptimStateDictConfig, FullStateDictConfig,
                  LocalStateDictConfig, MixedPrecision, OptimStateDictConfig, ShardedStateDictConfig,
                  ShardingStrategy, StateDictConfig, StateDictType)
from ._fully_shard import (CPUOffloadPolicy, FSDPModule, MixedPrecisionPolicy, OffloadPolicy, UnshardHandle,
                           fully_shard, register_fsdp_forward_method)
from .fully_sharded_data_parallel import FullyShardedDataParallel, StateDictSettings

__all__ = ["FullyShardedDataParallel", "ShardingStrategy", "BackwardPrefetch", "StateDictType",
           "StateDictConfig", "FullStateDictConfig", "LocalStateDictConfig", "ShardedStateDictConfig",
           "OptimStateDictConfig", "FullOptimStateDictConfig", "MixedPrecision", "CPUOffload",
           "StateDictSettings", "fully_shard", "FSDPModule", "MixedPrecisionPolicy", "OffloadPolicy",
           "CPUOffloadPolicy", "UnshardHandle", "register_fsdp_forward_method"]
