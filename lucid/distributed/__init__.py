"""Multi-process training on MPI (``mpi4py``), with ``torch.distributed``'s names.

Start the processes with ``lucid-run -n 2 script.py`` (or ``mpiexec``); in the script call
:func:`init_process_group` and use the collectives, ``lucid.nn.parallel.DistributedDataParallel``
and ``lucid.utils.data.distributed.DistributedSampler``. Needs the ``distributed`` extra
(``pip install 'lucid-autograd[distributed]'``); ``mpi4py`` is imported only when a process
group is made (NOTE [MPI stays lazy] in process_group.py).

Examples
--------
>>> import lucid.distributed as dist
>>> dist.is_initialized()
False
"""
from .collectives import (ReduceOp, Work, all_gather, all_gather_into_tensor, all_reduce, all_to_all,
                          all_to_all_single, barrier,
                          broadcast, gather, irecv, isend, recv, reduce, reduce_scatter,
                          reduce_scatter_tensor, scatter, send)
from .process_group import (GroupMember, ProcessGroup, RankDiedError, destroy_process_group, get_backend,
                    get_global_rank, get_group_rank, get_process_group_ranks, get_rank, get_world_size, group,
                    init_process_group, is_available, is_gloo_available, is_initialized,
                    is_mpi_available, is_nccl_available, new_group)
from .objects import all_gather_object, broadcast_object_list, gather_object, scatter_object_list
from .p2p import P2POp, batch_isend_irecv, recv_object_list, send_object_list
from .extras import (Backend, default_pg_timeout, get_default_backend_for_device, get_node_local_rank,
                     is_backend_available, is_torchelastic_launched, is_ucc_available, is_xccl_available,
                     monitored_barrier, new_subgroups, new_subgroups_by_enumeration)
from .device_mesh import DeviceMesh, init_device_mesh
from .c10d_extras import (AllreduceCoalescedOptions, AllreduceOptions, AllToAllOptions, BarrierOptions,
                          BroadcastOptions, BuiltinCommHookType, GatherOptions, ReduceOptions, ReduceScatterOptions,
                          ScatterOptions, all_gather_coalesced, all_reduce_coalesced, breakpoint, get_pg_count,
                          split_group, supports_complex)
from .errors import (DebugLevel, DistBackendError, DistError, DistNetworkError, DistStoreError, QueueEmptyError,
                     get_debug_level, set_debug_level, set_debug_level_from_env)

__all__ = [
    "ReduceOp", "Work", "ProcessGroup", "GroupMember", "group", "init_process_group",
    "destroy_process_group", "is_available", "is_mpi_available", "is_gloo_available",
    "is_nccl_available", "is_initialized", "get_rank", "get_world_size", "get_backend",
    "get_process_group_ranks", "get_group_rank", "get_global_rank", "new_group", "all_reduce",
    "reduce", "broadcast", "all_gather", "all_gather_into_tensor", "reduce_scatter",
    "reduce_scatter_tensor", "all_to_all", "all_to_all_single", "gather", "scatter", "barrier", "send", "recv", "isend", "irecv",
    "broadcast_object_list", "all_gather_object", "gather_object", "scatter_object_list",
    "P2POp", "batch_isend_irecv", "send_object_list", "recv_object_list", "Backend", "get_node_local_rank",
    "is_backend_available", "is_torchelastic_launched", "monitored_barrier", "new_subgroups",
    "new_subgroups_by_enumeration", "DeviceMesh", "init_device_mesh", "default_pg_timeout",
    "get_default_backend_for_device", "is_ucc_available", "is_xccl_available", "RankDiedError",
    "DistError", "DistBackendError", "DistNetworkError", "DistStoreError", "QueueEmptyError", "DebugLevel",
    "get_debug_level", "set_debug_level", "set_debug_level_from_env",
    "Store", "HashStore", "FileStore", "PrefixStore", "TCPStore", "rendezvous", "register_rendezvous_handler",
    "all_reduce_coalesced", "all_gather_coalesced", "split_group", "get_pg_count", "breakpoint", "supports_complex",
    "BuiltinCommHookType", "AllreduceOptions", "AllreduceCoalescedOptions", "AllToAllOptions", "BarrierOptions",
    "BroadcastOptions", "GatherOptions", "ReduceOptions", "ReduceScatterOptions", "ScatterOptions", "GradBucket",
]

# the stores open files and sockets: loaded on first use
_LAZY = {"Store": "store", "HashStore": "store", "FileStore": "store", "PrefixStore": "store",
         "TCPStore": "_tcp_store", "rendezvous": "_rendezvous", "register_rendezvous_handler": "_rendezvous"}


def __getattr__(name):
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module("." + _LAZY[name], __name__), name)
    if name == "GradBucket":  # DDP's: lives with DistributedDataParallel (lucid.nn)
        from ..nn.parallel.distributed import GradBucket

        return GradBucket
    # ``lucid.distributed.fsdp`` imports lucid.nn: loaded on first use, so ``import lucid`` stays fast
    if name in ("fsdp", "tensor", "rpc", "autograd", "pipelining"):  # ``tensor`` (DTensor) switches on the op dispatchers: loaded on use
        import importlib

        return importlib.import_module("." + name, __name__)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
