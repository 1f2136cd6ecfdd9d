"""The enums and configs of ``FullyShardedDataParallel`` (PyTorch's ``torch.distributed.fsdp.api``)."""
from __future__ import annotations

import enum
from dataclasses import dataclass


class ShardingStrategy(enum.Enum):
    """How FSDP splits a unit's parameters, gradients and (through the optimizer) its state.

    ``FULL_SHARD``: parameters are gathered for the forward, freed, gathered again for the
    backward and freed. ``SHARD_GRAD_OP``: kept gathered from the forward to the end of the
    backward. ``NO_SHARD``: every rank holds everything (DDP; gradients all-reduced).
    ``HYBRID_SHARD``/``_HYBRID_SHARD_ZERO2``: FULL_SHARD/SHARD_GRAD_OP inside a shard group
    and the gradients averaged across replica groups (pass ``device_mesh`` or a
    ``(shard_group, replicate_group)`` pair as ``process_group``).
    """

    FULL_SHARD = enum.auto()
    SHARD_GRAD_OP = enum.auto()
    NO_SHARD = enum.auto()
    HYBRID_SHARD = enum.auto()
    _HYBRID_SHARD_ZERO2 = enum.auto()


class BackwardPrefetch(enum.Enum):
    """Accepted for PyTorch compatibility: gathers here are blocking, so nothing is prefetched."""

    BACKWARD_PRE = enum.auto()
    BACKWARD_POST = enum.auto()


class StateDictType(enum.Enum):
    """What ``state_dict()`` of an FSDP module returns (see ``FullyShardedDataParallel.state_dict_type``)."""

    FULL_STATE_DICT = enum.auto()
    LOCAL_STATE_DICT = enum.auto()
    SHARDED_STATE_DICT = enum.auto()


@dataclass
class StateDictConfig:
    offload_to_cpu: bool = False


@dataclass
class FullStateDictConfig(StateDictConfig):
    """``rank0_only=True``: only rank 0 gets the dict (every other rank gets ``{}``)."""

    rank0_only: bool = False


@dataclass
class LocalStateDictConfig(StateDictConfig):
    pass


@dataclass
class ShardedStateDictConfig(StateDictConfig):
    _use_dtensor: bool = False


@dataclass
class OptimStateDictConfig:
    offload_to_cpu: bool = True


@dataclass
class FullOptimStateDictConfig(OptimStateDictConfig):
    rank0_only: bool = False


@dataclass
class CPUOffload:
    """Accepted for PyTorch compatibility: Lucid's parameters already live in host memory."""

    offload_params: bool = False


@dataclass
class MixedPrecision:
    """Dtypes for the gathered parameters (forward/backward compute), the gradient reduction and
    the buffers; ``None`` keeps the parameter's own dtype. The shards (what the optimizer
    updates) stay in their full precision."""

    param_dtype: object = None
    reduce_dtype: object = None
    buffer_dtype: object = None
    keep_low_precision_grads: bool = False
    cast_forward_inputs: bool = False
    cast_root_forward_inputs: bool = True
