"""Process groups on MPI: the default (world) group, ``new_group`` subsets, rank queries.

NOTE [MPI stays lazy]
``mpi4py`` is imported by :func:`_mpi` only, the first time a process group is made:
importing it starts MPI. ``import lucid`` and ``import lucid.distributed`` never import it.

NOTE [Same checks on every rank]
A collective that raises on one rank and not on another leaves the others blocked in
MPI. So every argument check depends only on what all ranks of a group agree on (shapes,
dtypes, group membership, ``src``/``dst``), never on the calling rank's role; a rank that
is the source of a broadcast gets the same errors as the receivers.
"""
from __future__ import annotations

import importlib.util

_WORLD = [None]  # the default ProcessGroup once init_process_group has run


_MPI = [None]  # mpi4py.MPI once imported (a list lookup is cheaper than an import statement)


def _mpi(api):
    """The ``mpi4py.MPI`` module, with an install hint when it is missing."""
    if _MPI[0] is not None:
        return _MPI[0]
    try:
        from mpi4py import MPI
    except ImportError as e:
        raise ImportError(
            f"{api}: the MPI backend needs mpi4py and an MPI library; install them with "
            "pip install 'lucid-autograd[distributed]' (mpi4py and mpich wheels)"
        ) from e
    _MPI[0] = MPI
    return MPI


class CollectiveArgumentError(RuntimeError, ValueError):
    """A collective's tensors, sizes or root rank do not fit the group.

    PyTorch's process groups raise RuntimeError here (``ProcessGroupGloo::allgather: invalid
    tensor size``, ``invalid root rank``, ``Split sizes doesn't match``); Lucid raised
    ValueError before, and this class is both.
    """


class RankDiedError(RuntimeError):
    """Another rank of a ``lucid-run`` job ended without finishing (NOTE [Dead ranks] in
    ``_bootstrap.py``): raised in every surviving rank's main thread, a RuntimeError as PyTorch's
    process groups raise when a peer is gone.

    Examples
    --------
    >>> import lucid.distributed as dist
    >>> issubclass(dist.RankDiedError, RuntimeError)
    True
    """


class ProcessGroup:
    """A set of ranks with its own MPI communicator.

    ``ranks[i]`` is the global rank of group rank ``i``; ``comm`` is ``None`` on processes
    that are not members. Made by :func:`init_process_group` and :func:`new_group`.
    """

    def __init__(self, comm, ranks):
        self.comm, self.ranks = comm, tuple(ranks)
        self._index = {g: i for i, g in enumerate(self.ranks)}

    def rank(self):
        """This process's rank in the group (-1 when it is not a member)."""
        return -1 if self.comm is None else self.comm.Get_rank()

    def size(self):
        return len(self.ranks)

    def group_rank(self, global_rank, api, what="src"):
        """The group rank of ``global_rank``, or a ValueError naming the call."""
        if isinstance(global_rank, bool) or not isinstance(global_rank, int):
            raise TypeError(f"{api}: {what} must be an int rank, got {type(global_rank).__name__}")
        if global_rank not in self._index:
            raise CollectiveArgumentError(f"{api}: {what}={global_rank} is not a rank of the group "
                                          f"{list(self.ranks)}")
        return self._index[global_rank]

    def __repr__(self):
        return f"ProcessGroup(backend='mpi', ranks={list(self.ranks)}, rank={self.rank()})"


class _Group:
    """``lucid.distributed.group.WORLD``: the default group, resolved when used."""

    @property
    def WORLD(self):
        return _WORLD[0]


group = _Group()
GroupMember = group


def _world(api):
    pg = _WORLD[0]
    if pg is None:
        raise ValueError(f"{api}: default process group has not been initialized, please make "
                         "sure to call init_process_group")
    return pg


def _resolve(group, api):
    if group is None:
        return _world(api)
    if not isinstance(group, ProcessGroup):
        raise TypeError(f"{api}: group must be a ProcessGroup from new_group, got {type(group).__name__}")
    _world(api)
    return group


def is_available():
    """Whether the MPI backend can be used (mpi4py is installed); imports nothing.

    Examples
    --------
    >>> import lucid.distributed as dist
    >>> isinstance(dist.is_available(), bool)
    True
    """
    return importlib.util.find_spec("mpi4py") is not None


is_mpi_available = is_available


def is_gloo_available():
    return False


def is_nccl_available():
    return False


def is_initialized():
    """Whether :func:`init_process_group` has run (and no destroy since)."""
    return _WORLD[0] is not None


def init_process_group(backend=None, init_method=None, timeout=None, world_size=-1, rank=-1,
                       store=None, group_name="", pg_options=None, device_id=None):
    """Join the default process group: every process started by ``lucid-run``/``mpiexec``.

    Run with plain ``python`` (not under an MPI launcher), the world is this one process,
    so a data-parallel script runs unchanged. Only the ``"mpi"`` backend exists;
    ``init_method`` and ``timeout`` are accepted for PyTorch compatibility and ignored (MPI's
    launcher does the rendezvous). ``world_size``/``rank``, when given, must match what MPI
    reports. A ``store`` (a :class:`lucid.distributed.Store`, with ``world_size`` and ``rank``
    as PyTorch requires) is checked and kept as the group's store (``_get_default_store()``),
    for the script's own use: MPI still connects the processes.

    Examples
    --------
    >>> import lucid.distributed as dist
    >>> dist.init_process_group("mpi")            # doctest: +SKIP
    >>> dist.get_rank(), dist.get_world_size()    # doctest: +SKIP
    (0, 1)
    """
    api = "init_process_group"
    if backend is not None and str(backend).lower() != "mpi":
        raise ValueError(f"{api}: backend {backend!r} is not available; Lucid's backend is 'mpi'")
    if _WORLD[0] is not None:
        raise RuntimeError(f"{api}: trying to initialize the default process group twice")
    if store is not None:
        _check_store(api, store, init_method, world_size, rank)
    MPI = _mpi(api)
    comm = MPI.COMM_WORLD.Dup()  # our own context: user MPI traffic can't match ours
    size, me = comm.Get_size(), comm.Get_rank()
    if world_size not in (-1, None) and world_size != size:
        comm.Free()
        raise ValueError(f"{api}: world_size={world_size}, but MPI started {size} processes")
    if rank not in (-1, None) and rank != me:
        comm.Free()
        raise ValueError(f"{api}: rank={rank}, but MPI says this process is rank {me}")
    _WORLD[0] = ProcessGroup(comm, range(size))
    _STORE[0] = store
    _PG_COUNT[0] = 1


_PG_COUNT = [0]  # groups made since init_process_group (get_pg_count)


_STORE = [None]  # the store given to init_process_group


def _check_store(api, store, init_method, world_size, rank):
    """PyTorch's conditions on ``init_process_group(store=...)`` (AssertionError, as PyTorch)."""
    from .store import Store

    if not isinstance(store, Store):
        raise TypeError(f"{api}: store must be a lucid.distributed.Store, got {type(store).__name__}")
    if init_method is not None:
        raise AssertionError(f"{api}: Cannot specify both init_method and store.")
    if world_size is None or world_size <= 0:
        raise AssertionError(f"{api}: world_size must be positive if using store")
    if rank is None or rank < 0:
        raise AssertionError(f"{api}: rank must be non-negative if using store")


def _get_default_store():
    """The store passed to :func:`init_process_group` (PyTorch's private helper of the same name)."""
    _world("_get_default_store")
    if _STORE[0] is None:
        raise RuntimeError("_get_default_store: the default process group was initialized without a store; "
                           "Lucid's MPI backend makes none")
    return _STORE[0]


def destroy_process_group(group=None):
    """Free ``group``'s communicator, or (default) leave the default group altogether."""
    if group is None:
        pg = _WORLD[0]
        _WORLD[0] = _STORE[0] = None
        _PG_COUNT[0] = 0
    else:
        pg = _resolve(group, "destroy_process_group")
    if pg is not None and pg.comm is not None:
        pg.comm.Free()
        pg.comm = None


def get_rank(group=None):
    """This process's rank in ``group`` (default: the world); -1 if it is not a member."""
    return _resolve(group, "get_rank").rank()


def get_world_size(group=None):
    """How many processes ``group`` (default: the world) has; -1 if this process is not a
    member (PyTorch's answer for a group made by ``new_group`` without this rank)."""
    pg = _resolve(group, "get_world_size")
    return -1 if pg.rank() < 0 else pg.size()


def get_backend(group=None):
    _resolve(group, "get_backend")
    return "mpi"


def get_process_group_ranks(group):
    """The global ranks of ``group``, in group-rank order."""
    return list(_resolve(group, "get_process_group_ranks").ranks)


def get_group_rank(group, global_rank):
    return _resolve(group, "get_group_rank").group_rank(global_rank, "get_group_rank", "global_rank")


def get_global_rank(group, group_rank):
    pg = _resolve(group, "get_global_rank")
    if not 0 <= group_rank < pg.size():
        raise ValueError(f"get_global_rank: group_rank={group_rank} is out of range for a group of {pg.size()}")
    return pg.ranks[group_rank]


def new_group(ranks=None, timeout=None, backend=None, pg_options=None, use_local_synchronization=False,
              group_desc=None):
    """A process group over ``ranks`` (global ranks; default: all of them).

    Every process of the world must call it, in the same order, with the same ``ranks``
    (as in PyTorch). Processes outside ``ranks`` get a group they are not a member of:
    ``get_rank(group)`` is -1 there and collectives on it do nothing.
    """
    api = "new_group"
    world = _world(api)
    if backend is not None and str(backend).lower() != "mpi":
        raise ValueError(f"{api}: backend {backend!r} is not available; Lucid's backend is 'mpi'")
    ranks = list(range(world.size())) if ranks is None else sorted({int(r) for r in ranks})
    for r in ranks:
        if not 0 <= r < world.size():
            raise ValueError(f"{api}: rank {r} is outside the world of {world.size()} processes")
    MPI = _mpi(api)
    sub = world.comm.Get_group().Incl(ranks)
    comm = world.comm.Create(sub)  # collective over the whole world
    sub.Free()
    _PG_COUNT[0] += 1
    return ProcessGroup(None if comm == MPI.COMM_NULL else comm, ranks)
