"""Ops on DTensors of an n-D mesh (2-D and up): pieces where that is the value, else whole values.

NOTE [Ops on n-D meshes]
The sharding rules of ``_dispatch.py`` are written for one placement. On an n-D mesh an
elementwise op (or a ``*_like`` factory) whose DTensor arguments all have one layout (mesh,
placements with no Partial, global shape) runs on the pieces and keeps that layout; any
other op gathers its DTensors to all-``Replicate`` (NOTE [Moves on n-D meshes]) and runs on
the whole values, with a Replicate result: right values and gradients, more communication
than PyTorch's rules. In-place ops run on the pieces under the same condition, else raise.
"""
from __future__ import annotations

from ._api import DTensor
from ._redistribute import move_nd
from .placement_types import Replicate

__all__ = ["dispatch_nd"]


def _same_layout(dts):
    first = dts[0]
    return all(not p.is_partial() for p in first.placements) and all(
        d.placements == first.placements and tuple(d.shape) == tuple(first.shape) for d in dts[1:])


def _local_kind(handler):
    from . import _dispatch as D

    return handler in (D._pointwise, D._unary, D._add, D._mul, D._div, D._like)


def dispatch_nd(func, args, kwargs, handler):
    from . import _dispatch as D

    name, dts = D._name(func), D._dtensors(args, kwargs)
    first = dts[0]
    inplace = name.endswith("_") and not name.endswith("__") or name == "setitem"
    local_ok = _same_layout(dts) and (name in D._INPLACE_POINTWISE if inplace else _local_kind(handler))
    if inplace:
        if not (local_ok and args[0] is first):
            raise NotImplementedError(f"{name}: in place on DTensors of a mesh of shape {first.device_mesh.shape} "
                                      f"runs only on arguments of one layout with no Partial (got "
                                      f"{[d.placements for d in dts]}); use the out-of-place op")
        D._call(func, args, kwargs, lambda d: d._local_tensor)
        return first
    if local_ok:
        out = D._call(func, args, kwargs, lambda d: d._local_tensor)
        return _wrap(out, first.device_mesh, first.placements, lambda local: tuple(first.shape))
    mesh = first.device_mesh
    whole = (Replicate(),) * mesh.ndim
    out = D._call(func, args, kwargs, lambda d: move_nd(d._local_tensor, mesh, d.shape, d.placements, whole))
    return _wrap(out, mesh, whole, lambda local: tuple(local.shape))


def _wrap(out, mesh, placements, shape):
    from ..._core.tensor import Tensor

    if isinstance(out, Tensor) and not isinstance(out, DTensor):
        return DTensor._make(out, mesh, placements, shape(out))
    if isinstance(out, tuple) and out and all(isinstance(o, Tensor) for o in out):
        wrapped = [_wrap(o, mesh, placements, shape) for o in out]
        return type(out)(*wrapped) if hasattr(out, "_fields") else tuple(wrapped)
    return out
