"""Collectives of picklable Python objects (``broadcast_object_list``, ``all_gather_object`` ...).

Objects travel pickled (mpi4py's lowercase calls): use them for small metadata, not tensors.
"""
from __future__ import annotations

from .collectives import _member, _root
from .process_group import _resolve


def broadcast_object_list(object_list, src=None, group=None, device=None, group_src=None):
    """Replace ``object_list``'s items on every rank with those of rank ``src`` (in place)."""
    api = "broadcast_object_list"
    _check_list(object_list, api, "object_list")
    pg = _resolve(group, api)
    root = _root(pg, src, group_src, api, "src")
    pg, comm = _member(group, api)
    if comm is None:
        return
    got = comm.bcast(list(object_list) if comm.Get_rank() == root else None, root)
    if len(got) != len(object_list):
        raise ValueError(f"{api}: rank {pg.ranks[root]} sent {len(got)} objects, this rank's "
                         f"object_list has {len(object_list)}")
    object_list[:] = got


def all_gather_object(object_list, obj, group=None):
    """Fill ``object_list`` (one slot per rank) with every rank's ``obj``."""
    api = "all_gather_object"
    pg = _resolve(group, api)
    _check_list(object_list, api, "object_list", pg.size())
    pg, comm = _member(group, api)
    if comm is None:
        return
    object_list[:] = comm.allgather(obj)


def gather_object(obj, object_gather_list=None, dst=None, group=None, group_dst=None):
    """Collect every rank's ``obj`` into ``object_gather_list`` on rank ``dst``."""
    api = "gather_object"
    pg = _resolve(group, api)
    root = _root(pg, dst, group_dst, api, "dst")
    pg, comm = _member(group, api)
    if comm is None:
        return
    is_root = comm.Get_rank() == root
    if is_root:
        _check_list(object_gather_list, api, "object_gather_list", pg.size())
    got = comm.gather(obj, root)
    if is_root:
        object_gather_list[:] = got


def scatter_object_list(scatter_object_output_list, scatter_object_input_list=None, src=None,
                        group=None, group_src=None):
    """Rank ``i`` gets ``scatter_object_input_list[i]`` of rank ``src`` in ``scatter_object_output_list[0]``."""
    api = "scatter_object_list"
    _check_list(scatter_object_output_list, api, "scatter_object_output_list")
    if len(scatter_object_output_list) < 1:
        raise ValueError(f"{api}: scatter_object_output_list must have at least one element")
    pg = _resolve(group, api)
    root = _root(pg, src, group_src, api, "src")
    pg, comm = _member(group, api)
    if comm is None:
        return
    if comm.Get_rank() == root:
        _check_list(scatter_object_input_list, api, "scatter_object_input_list", pg.size())
    scatter_object_output_list[0] = comm.scatter(
        list(scatter_object_input_list) if comm.Get_rank() == root else None, root)


def _check_list(lst, api, what, n=None):
    if not isinstance(lst, list):
        raise TypeError(f"{api}: {what} must be a list, got {type(lst).__name__}")
    if n is not None and len(lst) != n:
        raise ValueError(f"{api}: {what} must have one slot per rank ({n}), got {len(lst)}")
