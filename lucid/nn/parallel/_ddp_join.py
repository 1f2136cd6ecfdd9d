"""``DistributedDataParallel.join``: training on uneven inputs (PyTorch's ``Join`` with DDP's join hook).

NOTE [DDP join]
Inside ``ddp.join()`` every forward of a rank that still has data starts with one SUM
all-reduce of ``[1, backward will sync, buffers to sync before forward, one-hot of this
rank]``. A rank whose data ran out leaves the ``with`` body and
loops, sending zeros, until the sum says nobody is active; for each round with active ranks
it shadows what they will do, in their order: the buffer broadcast, one all-reduce of zeros
per bucket (through the comm hook if one is registered), the unused-parameter flags. Gradients are divided by the initial world size, or by the
number of active ranks with ``divide_by_initial_world_size=False``. Buffers come from the
highest active rank (rank 0 may have joined with stale ones), as PyTorch's join mode; at the
end every rank takes the parameters and buffers of the highest rank among the last joiners.
"""
from __future__ import annotations

import contextlib

import numpy as np

from ..._core.tensor import _wrap


def exchange(ddp, active, expect=False, fwd=False):
    """The round's all-reduce (NOTE [DDP join]); returns the summed flags and the active group ranks."""
    ranks = ddp._dist.get_process_group_ranks(ddp.process_group) if ddp.process_group else list(range(ddp._world))
    flags = np.zeros(3 + ddp._world, np.int64)
    if active:
        flags[:3] = 1, int(expect), int(fwd)
        flags[3 + ranks.index(ddp._dist.get_rank())] = 1
    ddp._dist.all_reduce(_wrap(flags), group=ddp.process_group)
    alive = [ranks[i] for i in range(ddp._world) if flags[3 + i]]
    return flags, alive


def before_forward(ddp, fwd_sync):
    """An active rank's round: returns the source of buffer broadcasts and sets the divisor."""
    cfg = ddp._join
    flags, alive = exchange(ddp, True, ddp._expect, fwd_sync)
    if cfg["throw"] and len(alive) < ddp._world:
        raise RuntimeError(f"DistributedDataParallel.join: rank(s) {sorted(set(_all(ddp)) - set(alive))} "
                           "exhausted all inputs (throw_on_early_termination=True)")
    cfg["last"] = alive
    ddp._divisor = ddp._world if cfg["divide_by_initial"] else len(alive)
    return max(alive)


def _all(ddp):
    return ddp._dist.get_process_group_ranks(ddp.process_group) if ddp.process_group else list(range(ddp._world))


def shadow(ddp):
    """A joined rank: mirror the active ranks' collectives until none is left (NOTE [DDP join])."""
    cfg = ddp._join
    while True:
        flags, alive = exchange(ddp, False)
        if not alive:
            break
        if cfg["throw"]:
            raise RuntimeError(f"DistributedDataParallel.join: rank {ddp._dist.get_rank()} exhausted all "
                               "inputs (throw_on_early_termination=True)")
        cfg["last"] = alive
        if flags[2]:
            ddp._sync_states(include_params=False, src=max(alive))
        if flags[1]:
            ddp._shadow_backward()
    if cfg["last"]:  # the final model: the highest rank among the last joiners
        ddp._sync_states(include_params=True, src=max(cfg["last"]), buffers=ddp.forward_sync_buffers)


@contextlib.contextmanager
def join(ddp, divide_by_initial_world_size=True, enable=True, throw_on_early_termination=False):
    if not enable:
        yield
        return
    if ddp._join is not None:
        raise RuntimeError("DistributedDataParallel.join: already inside a join() context")
    ddp._join = {"divide_by_initial": bool(divide_by_initial_world_size), "throw": bool(throw_on_early_termination),
                 "last": None}
    try:
        yield
        shadow(ddp)
    finally:
        ddp._join = None
        ddp._divisor = ddp._world
