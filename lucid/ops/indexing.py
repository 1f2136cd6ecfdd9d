"""Indexing: ``x[key]`` and its adjoint (scatter-add into zeros).

NOTE [Index keys]
A key is normalised to a tuple of ints, slices, None, Ellipsis and ``IDX`` placeholders.
Integer/bool index *tensors* are passed to the primitive as positional arguments (so
transforms can see and batch them) and the placeholders mark where they go; everything
else stays in the hashable ``key`` parameter.
"""
from __future__ import annotations

import warnings

import numpy as np

from .._core import dtypes
from .._core.backend import xp
from .._core.primitive import TN, bind, defprim
from .._core.tensor import Tensor, _to_array, _wrap, tensor_method
from ._family import _as_tensor, move_bdim


class _Placeholder:
    __slots__ = ()

    def __repr__(self):
        return "IDX"


IDX = _Placeholder()


def fill_key(key, idx):
    """The NumPy index for ``key`` with its placeholders replaced by ``idx`` arrays."""
    if not idx:
        return key
    it = iter(idx)
    return tuple(next(it) if k is IDX else k for k in key)


def split_key(key):
    """User index -> (template key, index tensors). See NOTE [Index keys]."""
    if not isinstance(key, tuple):
        key = (key,)
    template, tensors = [], []
    for k in key:
        if isinstance(k, Tensor):
            if k.dtype.kind not in "biu":
                raise IndexError(f"getitem: tensors used as indices must be long, int or bool, got {k.dtype}")
            template.append(IDX)
            tensors.append(k)
        elif isinstance(k, (list, np.ndarray)):
            arr = np.asarray(k)
            if arr.dtype.kind not in "biu":
                if arr.size == 0:
                    arr = arr.astype(np.int64)
                else:
                    raise IndexError(f"getitem: index arrays must be integer or bool, got {arr.dtype}")
            template.append(IDX)
            tensors.append(_wrap(arr))
        elif isinstance(k, (int, np.integer)) and not isinstance(k, bool):
            template.append(int(k))
        elif k is None or k is Ellipsis or isinstance(k, slice):
            template.append(k)
        elif isinstance(k, bool):
            template.append(IDX)
            tensors.append(_wrap(np.array(k)))
        else:
            raise IndexError(f"getitem: unsupported index of type {type(k).__name__}")
    return tuple(template), tuple(tensors)


def _getitem_impl(x, *idx, key):
    return x[fill_key(key, idx)]


def _scatter_impl(g, *idx, key, shape):
    z = xp.zeros(shape, g.dtype)
    k = fill_key(key, idx)
    if idx:
        xp.add.at(z, k, g)  # advanced indices may repeat: accumulate
    else:
        z[k] = g  # basic indexing touches each element at most once
    return z


getitem_p = defprim(
    "getitem", _getitem_impl,
    vjp=lambda i, ns, g, out, x, *idx, key: (
        ns.index_scatter(g, *idx, key=key, shape=tuple(x.shape)) if i == 0 else None),
    jvp=lambda ns, primals, tangents, out, key: bind(getitem_p, (tangents[0],) + tuple(primals[1:]), {"key": key}),
    save_inputs=1, is_view=True,
)

index_scatter_p = defprim(
    "index_scatter", _scatter_impl,
    vjp=lambda i, ns, g, out, gg, *idx, key, shape: ns.getitem(g, *idx, key=key) if i == 0 else None,
    jvp=lambda ns, primals, tangents, out, key, shape:
        bind(index_scatter_p, (tangents[0],) + tuple(primals[1:]), {"key": key, "shape": shape}),
    save_inputs=1,
)


def _advanced_front(key):
    """True when NumPy moves the advanced-index dims to the front: the advanced indices
    (index arrays, and ints once arrays are present) are not all adjacent in ``key``."""
    if not any(k is IDX for k in key):
        return False
    pos = [i for i, k in enumerate(key) if k is IDX or isinstance(k, int)]
    return pos != list(range(pos[0], pos[-1] + 1))


def _batched_out_dim(key, idx):
    """Where the batch dim lands in ``x[(slice(None),) + key]`` (x batched at dim 0)."""
    new_key = (slice(None),) + key
    if idx and _advanced_front(new_key):
        return len(np.broadcast_shapes(*[tuple(i.shape) for i in idx]))
    return 0


def _getitem_batch(vals, bdims, key):
    x, *idx = vals
    bx, *bidx = bdims
    if any(b is not None for b in bidx) or bx is None:
        return _loop_batch(getitem_p, vals, bdims, {"key": key})
    x = move_bdim(x, bx, 0)
    out = bind(getitem_p, (x,) + tuple(idx), {"key": (slice(None),) + key})
    return out, _batched_out_dim(key, idx)


def _scatter_batch(vals, bdims, key, shape):
    g, *idx = vals
    bg, *bidx = bdims
    if any(b is not None for b in bidx):
        return _loop_batch(index_scatter_p, vals, bdims, {"key": key, "shape": shape})
    pos = _batched_out_dim(key, idx)
    g = move_bdim(g, bg, pos)
    params = {"key": (slice(None),) + key, "shape": (g.shape[pos],) + tuple(shape)}
    return bind(index_scatter_p, (g,) + tuple(idx), params), 0


getitem_p.batch = _getitem_batch
index_scatter_p.batch = _scatter_batch

_warned = set()


def _loop_batch(prim, vals, bdims, params):
    """The one explicit per-example fallback: warns once per op, then loops and stacks."""
    if prim.name not in _warned:
        _warned.add(prim.name)
        warnings.warn(
            f"vmap: op '{prim.name}' has no batching rule for these batched arguments; "
            "falling back to a per-example Python loop (slow)",
            RuntimeWarning,
            stacklevel=3,
        )
    size = next(v.shape[b] for v, b in zip(vals, bdims) if b is not None)
    outs = []
    for i in range(size):
        args = tuple(v if b is None else bind(getitem_p, (v,), {"key": (slice(None),) * b + (i,)})
                     for v, b in zip(vals, bdims))
        outs.append(bind(prim, args, params))
    from .shape import stack

    return stack(outs, 0), 0


@tensor_method("__getitem__")
def getitem(input, key):
    """``input[key]`` with ints, slices, None, Ellipsis, bool masks and integer tensors."""
    template, idx = split_key(key)
    if not idx and template == (slice(None),) * len(template):
        return input
    if not idx and template == (Ellipsis,):
        return input
    try:
        return bind(getitem_p, (input,) + idx, {"key": template})
    except IndexError as e:
        raise IndexError(f"getitem: {e} (tensor shape {tuple(input.shape)})".replace("getitem: getitem: ", "getitem: ")) from None


__all__ = ['getitem']
