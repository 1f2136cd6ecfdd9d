"""Group helpers beyond the basics: ``Backend``, ``monitored_barrier``, ``new_subgroups`` ...

NOTE [Monitored barrier]
Group rank 0 posts a receive from every other rank and polls them until ``timeout``; the
others send ``(sequence number,)`` and wait for rank 0's answer. When all arrived rank 0
answers "ok"; otherwise it cancels the receives still open, answers the ranks that did
arrive with the list of the missing ones and raises, so every arrived rank raises the same
error naming the late ranks. The sequence number (one counter per group, the same on every
rank because every rank makes the same calls) lets a later call drop a late rank's
message from an earlier one. A late rank gets no answer and raises after its own timeout.
"""
from __future__ import annotations

import datetime
import os
import time

from .process_group import _mpi, _resolve, _world, get_rank, is_available, new_group

_MB_TAG, _MB_ACK = 32002, 32003


class Backend(str):
    """A backend name, normalised to lower case (``Backend("MPI") == "mpi"``); Lucid's is ``"mpi"``.

    Examples
    --------
    >>> import lucid.distributed as dist
    >>> dist.Backend("MPI"), dist.Backend.MPI == "mpi"
    ('mpi', True)
    """

    UNDEFINED = "undefined"
    GLOO = "gloo"
    NCCL = "nccl"
    XCCL = "xccl"
    UCC = "ucc"
    MPI = "mpi"
    backend_list = [UNDEFINED, GLOO, NCCL, XCCL, UCC, MPI]
    default_device_backend_map = {"cpu": MPI, "cuda": MPI}

    def __new__(cls, name):
        if not isinstance(name, str):
            raise ValueError(f"Backend: the name must be a string, got {type(name).__name__}")
        value = getattr(Backend, name.upper(), Backend.UNDEFINED)
        if value == Backend.UNDEFINED:
            value = name.lower()
        return super().__new__(cls, value)

    @classmethod
    def register_backend(cls, name, func, extended_api=False, devices=None):
        raise NotImplementedError("Backend.register_backend: Lucid has one backend, 'mpi'")


def is_backend_available(backend):
    """Whether ``backend`` can be used here: ``"mpi"`` when mpi4py is installed; no other.

    Examples
    --------
    >>> import lucid.distributed as dist
    >>> dist.is_backend_available("nccl")
    False
    """
    return str(backend).lower() == "mpi" and is_available()


default_pg_timeout = datetime.timedelta(minutes=30)


def is_ucc_available():
    return False


def is_xccl_available():
    return False


def get_default_backend_for_device(device):
    """The backend collectives on ``device`` use: ``"mpi"`` for every device (staged through the host)."""
    name = getattr(device, "type", None) or str(device).split(":")[0]
    if name not in Backend.default_device_backend_map:
        raise ValueError(f"get_default_backend_for_device: no default backend for device type {name!r}")
    return Backend.default_device_backend_map[name]


def is_torchelastic_launched():
    """Whether the process was started by torchelastic (``torchrun``): ``TORCHELASTIC_RUN_ID`` is set."""
    return os.getenv("TORCHELASTIC_RUN_ID") is not None


def get_node_local_rank(fallback_rank=None):
    """This process's rank among the processes of its machine.

    Read from ``LOCAL_RANK`` (torchrun) or what the MPI launcher sets (``MPI_LOCALRANKID``
    for MPICH/``lucid-run``, ``OMPI_COMM_WORLD_LOCAL_RANK`` for Open MPI); else
    ``fallback_rank``; else a RuntimeError.

    Examples
    --------
    >>> import lucid.distributed as dist
    >>> dist.get_node_local_rank(fallback_rank=0) >= 0
    True
    """
    for key in ("LOCAL_RANK", "MPI_LOCALRANKID", "OMPI_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID"):
        if key in os.environ:
            return int(os.environ[key])
    if fallback_rank is not None:
        return int(fallback_rank)
    raise RuntimeError("get_node_local_rank: LOCAL_RANK is not in the environment (nor an MPI launcher's "
                       "local rank). Consider passing fallback_rank to allow `get_node_local_rank` to "
                       "work, assuming you are not running in a multi-device context")


def _seconds(timeout, api):
    if timeout is None:
        return 1800.0
    if isinstance(timeout, datetime.timedelta):
        return timeout.total_seconds()
    if isinstance(timeout, (int, float)) and not isinstance(timeout, bool):
        return float(timeout)
    raise TypeError(f"{api}: timeout must be a datetime.timedelta, got {type(timeout).__name__}")


_MB_SEQ = {}


def monitored_barrier(group=None, timeout=None, wait_all_ranks=False):
    """A barrier that names the ranks that did not reach it within ``timeout``.

    Raises ``RuntimeError("monitored_barrier: Rank 2 failed to pass monitoredBarrier in
    300 ms")`` (with ``wait_all_ranks=True`` every late rank is listed) on rank 0 and on
    every rank that did arrive; a rank that arrives too late raises after its own timeout.
    See NOTE [Monitored barrier].

    Examples
    --------
    >>> import datetime, lucid.distributed as dist
    >>> dist.monitored_barrier(timeout=datetime.timedelta(seconds=30))   # doctest: +SKIP
    """
    api = "monitored_barrier"
    pg = _resolve(group, api)
    secs = _seconds(timeout, api)
    comm = pg.comm
    if comm is None:
        return None
    MPI = _mpi(api)
    seq = _MB_SEQ[id(comm)] = _MB_SEQ.get(id(comm), 0) + 1
    n, me = comm.Get_size(), comm.Get_rank()
    if n == 1:
        return None
    if me != 0:
        comm.send(seq, dest=0, tag=_MB_TAG)
        req = comm.irecv(source=0, tag=_MB_ACK)
        deadline = time.monotonic() + secs + 1.0
        while True:
            done, answer = req.test()
            if done:
                break
            if time.monotonic() > deadline:
                req.Cancel()
                req.Wait()  # completes the cancelled request (or takes the answer that just came)
                raise RuntimeError(f"{api}: rank {pg.ranks[me]} got no answer from rank {pg.ranks[0]} "
                                   f"within {int(secs * 1000)} ms (it may have timed out waiting for this rank)")
            time.sleep(0.0005)
        if answer:
            raise RuntimeError(f"{api}: {_late(answer, secs)}")
        return None
    pending = {r: comm.irecv(source=r, tag=_MB_TAG) for r in range(1, n)}
    deadline = time.monotonic() + secs
    arrived = []
    while pending and time.monotonic() <= deadline:
        for r, req in list(pending.items()):
            done, got = req.test()
            if done:
                if got == seq:
                    arrived.append(r)
                    del pending[r]
                else:  # a late message from an earlier call: wait for this one's
                    pending[r] = comm.irecv(source=r, tag=_MB_TAG)
        if pending:
            time.sleep(0.0005)
    late = sorted(pg.ranks[r] for r in pending)
    for req in pending.values():
        req.Cancel()
        req.Wait()
    for r in arrived:
        comm.send(late, dest=r, tag=_MB_ACK)
    if late:
        raise RuntimeError(f"{api}: {_late(late if wait_all_ranks else late[:1], secs)}")
    return None


def _late(ranks, secs):
    who = f"Rank {ranks[0]}" if len(ranks) == 1 else "Ranks " + ", ".join(map(str, ranks))
    return f"{who} failed to pass monitoredBarrier in {int(secs * 1000)} ms"


def new_subgroups(group_size=None, group=None, timeout=None, backend=None, pg_options=None, group_desc=None):
    """Cut ``group`` (default: the world) into consecutive subgroups of ``group_size`` ranks.

    Returns ``(this rank's subgroup, every subgroup)``. ``group_size`` defaults to the
    number of processes on this machine. Every rank must call it.
    """
    api = "new_subgroups"
    pg = _resolve(group, api)
    if group_size is None:
        group_size = _node_size(api)
    if isinstance(group_size, bool) or not isinstance(group_size, int):
        raise TypeError(f"{api}: group_size must be an int, got {type(group_size).__name__}")
    if group_size <= 0:
        raise ValueError(f"{api}: the arg 'group_size' ({group_size}) must be positive")
    ranks = list(pg.ranks)
    if len(ranks) < group_size:
        raise ValueError(f"{api}: the arg 'group_size' ({group_size}) must not exceed the world size ({len(ranks)})")
    if len(ranks) % group_size:
        raise ValueError(f"{api}: the world size ({len(ranks)}) must be divisible by group_size={group_size}")
    return new_subgroups_by_enumeration([ranks[i:i + group_size] for i in range(0, len(ranks), group_size)],
                                        timeout, backend, pg_options, group_desc)


def new_subgroups_by_enumeration(ranks_per_subgroup_list, timeout=None, backend=None, pg_options=None,
                                 group_desc=None):
    """One group per list of global ranks (no rank in two); returns ``(this rank's subgroup or None, all)``.

    Every rank must call it with the same lists. The lists are checked before any group is made.
    """
    api = "new_subgroups_by_enumeration"
    world = _world(api)
    if not ranks_per_subgroup_list:
        raise ValueError(f"{api}: the arg 'ranks_per_subgroup_list' cannot be empty")
    owner = {}
    for ranks in ranks_per_subgroup_list:
        for r in ranks:
            if r in owner:
                raise ValueError(f"{api}: rank {r} has appeared in both subgroup {owner[r]} and {list(ranks)}")
            if not 0 <= r < world.size():
                raise ValueError(f"{api}: rank {r} is outside the world of {world.size()} processes")
            owner[r] = list(ranks)
    me = get_rank()
    subgroups, mine = [], None
    for ranks in ranks_per_subgroup_list:
        sub = new_group(ranks, timeout, backend, pg_options)
        subgroups.append(sub)
        if me in ranks:
            mine = sub
    return mine, subgroups


def _hosts(api):
    import socket

    from .objects import all_gather_object

    world = _world(api)
    hosts = [None] * world.size()
    all_gather_object(hosts, socket.gethostname())
    return hosts


def _node_size(api):
    hosts = _hosts(api)
    sizes = {hosts.count(h) for h in hosts}
    if len(sizes) != 1:
        raise ValueError(f"{api}: machines run different numbers of processes ({sorted(sizes)}); pass group_size")
    return sizes.pop()


def _node_groups(api):
    """``(this machine's group, the group of this rank's peers on the other machines)`` for HYBRID_SHARD."""
    hosts = _hosts(api)
    nodes = list(dict.fromkeys(hosts))
    per = [[r for r, h in enumerate(hosts) if h == node] for node in nodes]
    if len({len(p) for p in per}) != 1:
        raise ValueError(f"{api}: HYBRID_SHARD needs the same number of processes on every machine, got "
                         f"{[len(p) for p in per]}")
    shard, _ = new_subgroups_by_enumeration(per)
    repl, _ = new_subgroups_by_enumeration([list(col) for col in zip(*per)])
    return shard, repl
