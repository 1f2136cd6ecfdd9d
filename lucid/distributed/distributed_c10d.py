"""``lucid.distributed.distributed_c10d`` (``torch.distributed.distributed_c10d``): the module
PyTorch's collectives and process groups are defined in.

Every public name Lucid has is its own object (``distributed_c10d.all_reduce is
lucid.distributed.all_reduce``). Small pieces Lucid had not are real here: ``GroupName``,
``BackendConfig``/``get_backend_config``, ``reduce_op`` (the deprecated spelling of
``ReduceOp``), ``all_gather_single``/``reduce_scatter_single`` (the single-tensor collectives,
which are ``all_gather_into_tensor``/``reduce_scatter_tensor``), ``record_comm`` and
``_get_default_group``. Not here: ``ProcessGroupGloo`` and ``shrink_group`` (Lucid's one
backend is MPI, whose communicators cannot drop ranks).

Examples
--------
>>> import lucid.distributed as dist
>>> from lucid.distributed.distributed_c10d import all_reduce, GroupName
>>> all_reduce is dist.all_reduce
True
"""
from __future__ import annotations

import contextlib
import threading
import warnings
from typing import NewType

from . import (Backend, DebugLevel, GroupMember, P2POp, ProcessGroup, ReduceOp, Work, all_gather,
               all_gather_into_tensor, all_gather_object, all_reduce, all_to_all, all_to_all_single, barrier,
               batch_isend_irecv, broadcast, broadcast_object_list, default_pg_timeout, destroy_process_group, gather,
               gather_object, get_backend, get_debug_level, get_default_backend_for_device, get_global_rank,
               get_group_rank, get_node_local_rank, get_process_group_ranks, get_rank, get_world_size, group,
               init_process_group, irecv, is_backend_available, is_gloo_available, is_initialized, is_mpi_available,
               is_nccl_available, is_torchelastic_launched, is_ucc_available, is_xccl_available, isend,
               monitored_barrier, new_group, new_subgroups, new_subgroups_by_enumeration, recv, recv_object_list,
               reduce, reduce_scatter, reduce_scatter_tensor, scatter, scatter_object_list, send, send_object_list)
from .c10d_extras import (AllreduceCoalescedOptions, AllreduceOptions, AllToAllOptions, BarrierOptions,
                          BroadcastOptions, GatherOptions, ReduceOptions, ReduceScatterOptions, ScatterOptions,
                          all_gather_coalesced, all_reduce_coalesced, get_pg_count, split_group, supports_complex)
from .errors import DistStoreError  # noqa: F401  (PyTorch code imports it from here)
from .process_group import _get_default_store, _world  # noqa: F401  (_get_default_store: as above)
from .store import PrefixStore, Store

__all__ = ["AllToAllOptions", "AllreduceCoalescedOptions", "AllreduceOptions", "Backend", "BackendConfig",
           "BarrierOptions", "BroadcastOptions", "DebugLevel", "GatherOptions", "GroupMember", "GroupName", "P2POp",
           "PrefixStore", "ProcessGroup", "ReduceOp", "ReduceOptions", "ReduceScatterOptions", "ScatterOptions",
           "Store", "Work", "all_gather", "all_gather_coalesced", "all_gather_into_tensor", "all_gather_object",
           "all_gather_single", "all_reduce", "all_reduce_coalesced", "all_to_all", "all_to_all_single", "barrier",
           "batch_isend_irecv", "broadcast", "broadcast_object_list", "default_pg_timeout", "destroy_process_group",
           "gather", "gather_object", "get_backend", "get_backend_config", "get_debug_level",
           "get_default_backend_for_device", "get_global_rank", "get_group_rank", "get_node_local_rank",
           "get_pg_count", "get_process_group_ranks", "get_rank", "get_world_size", "group", "init_process_group",
           "irecv", "is_backend_available", "is_gloo_available", "is_initialized", "is_mpi_available",
           "is_nccl_available", "is_torchelastic_launched", "is_ucc_available", "is_xccl_available", "isend",
           "monitored_barrier", "new_group", "new_subgroups", "new_subgroups_by_enumeration", "record_comm", "recv",
           "recv_object_list", "reduce", "reduce_op", "reduce_scatter", "reduce_scatter_single",
           "reduce_scatter_tensor", "scatter", "scatter_object_list", "send", "send_object_list", "split_group",
           "supports_complex"]

GroupName = NewType("GroupName", str)


def _get_default_group():
    """The default (world) process group; ``ValueError`` before ``init_process_group``."""
    return _world("_get_default_group")


# --------------------------------------------------------------------- backends

_DEVICES_OF_BACKEND = {"mpi": ("cpu", "cuda"), "gloo": ("cpu", "cuda"), "nccl": ("cuda",), "ucc": ("cpu", "cuda"),
                       "xccl": ("xpu",)}


class BackendConfig:
    """Which backend serves each device type: parsed from ``"mpi"`` (every device that backend
    supports) or ``"cpu:gloo,cuda:nccl"``.

    Examples
    --------
    >>> from lucid.distributed.distributed_c10d import BackendConfig
    >>> str(BackendConfig("mpi"))
    'cpu:mpi,cuda:mpi'
    >>> BackendConfig("cpu:gloo,cuda:nccl").get_device_backend_map()
    {'cpu': 'gloo', 'cuda': 'nccl'}
    """

    def __init__(self, backend):
        text = str(backend).lower()
        if ":" not in text:
            if text not in _DEVICES_OF_BACKEND:
                raise ValueError(f"BackendConfig: unknown backend {backend!r}; expected one of "
                                 f"{sorted(_DEVICES_OF_BACKEND)} or 'device:backend,...'")
            self.device_backend_map = {d: text for d in _DEVICES_OF_BACKEND[text]}
            return
        self.device_backend_map = {}
        for pair in text.split(","):
            device, sep, name = pair.partition(":")
            if not sep or not device.strip() or not name.strip():
                raise ValueError(f"BackendConfig: invalid backend string {backend!r}; expected "
                                 "'<device>:<backend>,<device>:<backend>'")
            if device.strip() in self.device_backend_map:
                raise ValueError(f"BackendConfig: duplicate device type {device.strip()!r} in {backend!r}")
            self.device_backend_map[device.strip()] = name.strip()

    def get_device_backend_map(self):
        """``{device type: backend name}``."""
        return dict(self.device_backend_map)

    def __repr__(self):
        return ",".join(f"{d}:{b}" for d, b in self.device_backend_map.items())


def get_backend_config(group=None):
    """The backend configuration of ``group`` (default: the world) as ``"cpu:mpi,cuda:mpi"``."""
    return str(BackendConfig(get_backend(group)))


# --------------------------------------------------------------------- deprecated and aliases


class _DeprecatedReduceOp:
    """``reduce_op``: PyTorch's old spelling of :class:`ReduceOp`; attribute access warns."""

    def __getattr__(self, name):
        if name.startswith("_"):  # (introspection: inspect, pytest, copy)
            raise AttributeError(name)
        warnings.warn("lucid.distributed.reduce_op is deprecated, please use lucid.distributed.ReduceOp instead",
                      FutureWarning, stacklevel=2)
        return getattr(ReduceOp, name)

    def __repr__(self):
        return "reduce_op"


reduce_op = _DeprecatedReduceOp()


def all_gather_single(output_tensor, input_tensor, group=None, async_op=False):
    """Gather ``input_tensor`` from every rank into the single ``output_tensor`` (rank order on
    dim 0): :func:`all_gather_into_tensor` under PyTorch's newer name."""
    return all_gather_into_tensor(output_tensor, input_tensor, group=group, async_op=async_op)


def reduce_scatter_single(output, input, op=ReduceOp.SUM, group=None, async_op=False):  # noqa: A002
    """Reduce ``input`` over the ranks and scatter dim-0 chunks into ``output``:
    :func:`reduce_scatter_tensor` under PyTorch's newer name."""
    return reduce_scatter_tensor(output, input, op=op, group=group, async_op=async_op)


class _CommName(threading.local):
    name = ""


_COMM_NAME = _CommName()


@contextlib.contextmanager
def record_comm(name):
    """Name the collectives issued in the block (``current_comm_name()``) for profiling.

    Lucid's profiler does not label collectives yet, so the name is kept for callers that read it.

    Examples
    --------
    >>> from lucid.distributed.distributed_c10d import current_comm_name, record_comm
    >>> with record_comm("fsdp::all_gather"):
    ...     current_comm_name()
    'fsdp::all_gather'
    """
    if not isinstance(name, str):
        raise TypeError(f"record_comm: name must be a str, got {type(name).__name__}")
    prev, _COMM_NAME.name = _COMM_NAME.name, name
    try:
        yield
    finally:
        _COMM_NAME.name = prev


def current_comm_name():
    """The name set by the innermost :func:`record_comm` ('' outside one)."""
    return _COMM_NAME.name


