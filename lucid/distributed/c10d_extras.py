"""Smaller pieces of ``torch.distributed``: the coalesced collectives, ``split_group``,
``get_pg_count``, ``breakpoint``, ``supports_complex``, the collective ``*Options`` records and
``BuiltinCommHookType``.

Examples
--------
>>> import lucid.distributed as dist
>>> dist.supports_complex(dist.ReduceOp.SUM), dist.supports_complex(dist.ReduceOp.MAX)
(True, False)
>>> dist.AllreduceOptions().reduceOp
<ReduceOp.SUM: 'sum'>
"""
from __future__ import annotations

import datetime
import enum
import warnings
from dataclasses import dataclass, field

from .collectives import ReduceOp

__all__ = ["all_reduce_coalesced", "all_gather_coalesced", "split_group", "get_pg_count", "breakpoint",
           "supports_complex", "BuiltinCommHookType", "AllreduceOptions", "AllreduceCoalescedOptions",
           "AllToAllOptions", "BarrierOptions", "BroadcastOptions", "GatherOptions", "ReduceOptions",
           "ReduceScatterOptions", "ScatterOptions"]


def supports_complex(reduceOp):  # noqa: N803  (PyTorch's name)
    """Whether ``reduceOp`` is defined on complex tensors (not for orderings and bitwise ops)."""
    return reduceOp not in (ReduceOp.MAX, ReduceOp.MIN, ReduceOp.PRODUCT, ReduceOp.BAND, ReduceOp.BOR, ReduceOp.BXOR)


def all_reduce_coalesced(tensors, op=ReduceOp.SUM, group=None, async_op=False):
    """``all_reduce`` of each tensor of ``tensors`` (deprecated in PyTorch: a ``FutureWarning``).

    The tensors go as one flat message per dtype, so there is one collective per dtype.
    """
    warnings.warn("torch.distributed.all_reduce_coalesced will be deprecated. If you must use it, please "
                  "revisit our documentation later at "
                  "https://pytorch.org/docs/main/distributed.html#collective-functions", FutureWarning, stacklevel=2)
    return _coalesced("all_reduce_coalesced", list(tensors), op, group, async_op)


def _coalesced(api, tensors, op, group, async_op):
    import lucid

    from .._core.tensor import Tensor
    from .collectives import all_reduce

    if not all(isinstance(t, Tensor) for t in tensors):
        raise TypeError(f"{api}: expected a list of tensors")
    with lucid.no_grad():
        for dtype in sorted({str(t.dtype) for t in tensors}):
            same = [t for t in tensors if str(t.dtype) == dtype]
            flat = lucid.cat([t.reshape(-1) for t in same])
            all_reduce(flat, op=op, group=group)
            at = 0
            for t in same:
                n = t.numel()
                t.copy_(flat[at:at + n].reshape(t.shape))
                at += n
    return _done() if async_op else None


def all_gather_coalesced(output_tensor_lists, input_tensor_list, group=None, async_op=False):
    """``all_gather`` of each tensor of ``input_tensor_list``: ``output_tensor_lists[r][i]`` gets
    rank ``r``'s ``input_tensor_list[i]`` (deprecated in PyTorch: a ``FutureWarning``)."""
    from .collectives import all_gather

    warnings.warn("torch.distributed.all_gather_coalesced will be deprecated. If you must use it, please "
                  "revisit our documentation later at "
                  "https://pytorch.org/docs/main/distributed.html#collective-functions", FutureWarning, stacklevel=2)
    for i, t in enumerate(input_tensor_list):
        all_gather([outs[i] for outs in output_tensor_lists], t, group=group)
    return _done() if async_op else None


def _done():
    from .collectives import Work

    work = Work([])
    work.wait()
    return work


def split_group(parent_pg=None, split_ranks=None, timeout=None, pg_options=None, group_desc=None, backend=None):
    """Split ``parent_pg`` (default: the world) into the groups of ``split_ranks`` (lists of
    global ranks, disjoint); returns this rank's group, or None when it is in none.

    Every rank of the parent calls it with the same ``split_ranks``.
    """
    from .process_group import _resolve, get_rank, new_group

    api = "split_group"
    parent = _resolve(parent_pg, api)
    if not split_ranks:
        raise ValueError(f"{api}: split_ranks cannot be None or empty")
    seen = set()
    for ranks in split_ranks:
        for r in ranks:
            if r in seen:
                raise ValueError(f"{api}: rank {r} appears in more than one split")
            if r not in parent.ranks:
                raise ValueError(f"{api}: rank {r} is not in the parent group {list(parent.ranks)}")
            seen.add(r)
    me, mine = get_rank(), None
    for ranks in split_ranks:  # every rank makes every group: new_group is collective over the world
        pg = new_group(ranks, timeout=timeout, pg_options=pg_options, group_desc=group_desc)
        if me in ranks:
            mine = pg
    return mine


def get_pg_count():
    """How many process groups this process made (the default group included)."""
    from .process_group import _PG_COUNT

    return _PG_COUNT[0]


def breakpoint(rank=0, skip=0, timeout_s=3600):  # noqa: A001  (PyTorch's name)
    """Stop in ``pdb`` on ``rank``; the other ranks wait at a barrier until it continues.

    ``skip`` calls are passed over first (counted per call site, as PyTorch).
    """
    import inspect
    import pdb

    from .collectives import barrier
    from .process_group import get_rank

    if skip > 0:
        caller = inspect.stack()[1]
        key = (caller.filename, caller.lineno)
        _SKIPS[key] = _SKIPS.get(key, 0) + 1
        if _SKIPS[key] <= skip:
            return
    if get_rank() == rank:
        pdb.Pdb(skip=["lucid.distributed.*"]).set_trace(inspect.currentframe().f_back)
    barrier()


_SKIPS = {}


class BuiltinCommHookType(enum.Enum):
    """DDP's built-in communication hooks (``_register_builtin_comm_hook``'s argument)."""

    ALLREDUCE = 1
    FP16_COMPRESS = 2


def _timeout():
    return datetime.timedelta(milliseconds=-1)  # PyTorch's default: "the group's timeout"


@dataclass
class AllreduceOptions:
    reduceOp: ReduceOp = ReduceOp.SUM  # noqa: N815  (PyTorch's field names)
    timeout: datetime.timedelta = field(default_factory=_timeout)
    asyncOp: bool = True  # noqa: N815


@dataclass
class AllreduceCoalescedOptions(AllreduceOptions):
    pass


@dataclass
class BroadcastOptions:
    rootRank: int = 0  # noqa: N815
    rootTensor: int = 0  # noqa: N815
    timeout: datetime.timedelta = field(default_factory=_timeout)
    asyncOp: bool = True  # noqa: N815


@dataclass
class ReduceOptions:
    reduceOp: ReduceOp = ReduceOp.SUM  # noqa: N815
    rootRank: int = 0  # noqa: N815
    rootTensor: int = 0  # noqa: N815
    timeout: datetime.timedelta = field(default_factory=_timeout)
    asyncOp: bool = True  # noqa: N815


@dataclass
class ReduceScatterOptions:
    reduceOp: ReduceOp = ReduceOp.SUM  # noqa: N815
    timeout: datetime.timedelta = field(default_factory=_timeout)
    asyncOp: bool = True  # noqa: N815


@dataclass
class GatherOptions:
    rootRank: int = 0  # noqa: N815
    timeout: datetime.timedelta = field(default_factory=_timeout)
    asyncOp: bool = True  # noqa: N815


@dataclass
class ScatterOptions:
    rootRank: int = 0  # noqa: N815
    timeout: datetime.timedelta = field(default_factory=_timeout)
    asyncOp: bool = True  # noqa: N815


@dataclass
class AllToAllOptions:
    timeout: datetime.timedelta = field(default_factory=_timeout)
    asyncOp: bool = True  # noqa: N815


@dataclass
class BarrierOptions:
    device: object = None
    device_ids: list = field(default_factory=list)
    timeout: datetime.timedelta = field(default_factory=_timeout)
    asyncOp: bool = True  # noqa: N815
