"""Batched point-to-point (``P2POp``, ``batch_isend_irecv``) and ``send_object_list``/``recv_object_list``."""
from __future__ import annotations

from .collectives import _Target, _check_tensor, _member, _root, irecv, isend
from .process_group import _mpi, _resolve

_OBJ_TAG = 32001  # object messages never match a tensor receive (tags 0.. by default)


class P2POp:
    """One send or receive for :func:`batch_isend_irecv`.

    ``op`` is :func:`~lucid.distributed.isend` or :func:`~lucid.distributed.irecv`; ``peer`` a
    global rank (or ``group_peer`` a rank of ``group``).

    Examples
    --------
    >>> import lucid, lucid.distributed as dist
    >>> op = dist.P2POp(dist.isend, lucid.zeros(2), peer=1)
    >>> op.op is dist.isend, op.peer
    (True, 1)
    """

    def __init__(self, op, tensor, peer=None, group=None, tag=0, group_peer=None):
        if op not in (isend, irecv):
            raise ValueError("P2POp: invalid op; expected lucid.distributed.isend or lucid.distributed.irecv, "
                             f"got {getattr(op, '__name__', op)!r}")
        _check_tensor(tensor, "P2POp")
        if peer is None and group_peer is None:
            raise ValueError("P2POp: pass peer (a global rank) or group_peer")
        self.op, self.tensor, self.peer, self.group = op, tensor, peer, group
        self.tag, self.group_peer = tag, group_peer

    def __repr__(self):
        return f"P2POp(op={self.op.__name__}, peer={self.peer}, tag={self.tag}, shape={tuple(self.tensor.shape)})"


def batch_isend_irecv(p2p_op_list):
    """Start every send and receive of ``p2p_op_list`` at once; returns their :class:`Work` handles.

    All ops are checked before any starts (a bad one raises and starts nothing). Posting
    them together is what lets two ranks exchange without ordering their sends and receives.
    """
    api = "batch_isend_irecv"
    if not isinstance(p2p_op_list, (list, tuple)) or not p2p_op_list:
        raise ValueError(f"{api}: expects a non-empty list of P2POp")
    groups = set()
    for i, p in enumerate(p2p_op_list):
        if not isinstance(p, P2POp):
            raise TypeError(f"{api}: p2p_op_list[{i}] is a {type(p).__name__}, not a P2POp")
        groups.add(id(p.group))
        pg = _resolve(p.group, api)
        name = p.op.__name__
        if name == "irecv":
            _Target(p.tensor, api, f"p2p_op_list[{i}].tensor")
        peer = _root(pg, p.peer, p.group_peer, api, f"p2p_op_list[{i}].peer")
        if pg.comm is not None and peer == pg.comm.Get_rank():
            raise ValueError(f"{api}: p2p_op_list[{i}] ({name}) has this rank ({pg.ranks[peer]}) as its peer")
    if len(groups) > 1:
        raise ValueError(f"{api}: every P2POp must use the same group")
    return [p.op(p.tensor, p.peer, p.group, p.tag, p.group_peer) for p in p2p_op_list]


def send_object_list(object_list, dst=None, group=None, device=None, group_dst=None, use_batch=False):
    """Send the picklable objects of ``object_list`` to rank ``dst`` (a global rank).

    Examples
    --------
    >>> import lucid.distributed as dist
    >>> dist.send_object_list(["config", {"lr": 0.1}], dst=1)   # doctest: +SKIP
    """
    api = "send_object_list"
    comm, peer, pg = _peer(object_list, dst, group_dst, group, api, "dst")
    if comm is None:
        return
    comm.send(list(object_list), dest=peer, tag=_OBJ_TAG)


def recv_object_list(object_list, src=None, group=None, device=None, group_src=None, use_batch=False):
    """Receive objects sent by :func:`send_object_list` into ``object_list`` (in place; it must have
    as many slots as were sent). ``src=None`` receives from any rank. Returns the sender's global rank.
    """
    api = "recv_object_list"
    MPI = _mpi(api)
    if src is None and group_src is None:
        _check_list(object_list, api)
        pg, comm = _member(group, api)
        peer = MPI.ANY_SOURCE
    else:
        comm, peer, pg = _peer(object_list, src, group_src, group, api, "src")
    if comm is None:
        return -1
    status = MPI.Status()
    got = comm.recv(source=peer, tag=_OBJ_TAG, status=status)
    sender = pg.ranks[status.Get_source()]
    if len(got) != len(object_list):
        raise ValueError(f"{api}: rank {sender} sent {len(got)} objects, but object_list on rank "
                         f"{pg.ranks[comm.Get_rank()]} has {len(object_list)} slots")
    object_list[:] = got
    return sender


def _check_list(object_list, api):
    if not isinstance(object_list, list):
        raise TypeError(f"{api}: object_list must be a list, got {type(object_list).__name__}")


def _peer(object_list, rank, group_rank, group, api, what):
    _check_list(object_list, api)
    pg = _resolve(group, api)
    peer = _root(pg, rank, group_rank, api, what)
    pg, comm = _member(group, api)
    if comm is not None and peer == comm.Get_rank():
        raise ValueError(f"{api}: {what}={pg.ranks[peer]} is this rank; a rank can't message itself")
    return comm, peer, pg
