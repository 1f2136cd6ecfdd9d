"""Value-selecting reductions: amax/amin, max/min (with indices), argmax/argmin, sort, argsort,
topk. See NOTE [Selecting values by index].
"""
from __future__ import annotations

import numpy as np

from ..._core import dtypes
from ..._core.backend import xp
from ..._core.primitive import TN, bind, defprim
from ..._core.tensor import Tensor, tensor_method
from .._family import _as_tensor, batch_unary_axis, normalize_axis
from ._common import (EmptyReductionError, _axis_key, _drop_axis, _lift0d, _nondiff, _py_any, all_dims_if_empty,
                      expand_reduced, norm_axes, pick_along_p, return_types)
from ..numpy_aliases import numpy_axis, numpy_keepdims


# ---------------------------------------------------------------- amax / amin


def _extreme_parts(ns, out, x, axis, keepdims, nan_ties=False):
    # Ties share the gradient equally (PyTorch's amax/amin convention). With ``nan_ties`` (max()
    # and min() of a whole tensor, PyTorch's evenly_distribute_backward) a nan result is shared by
    # the nan elements; amax/amin give nan there, as in PyTorch.
    outk = expand_reduced(ns, out, x.shape, axis, keepdims)
    mask = ns.cast(x == outk, dtype=x.dtype)
    if nan_ties:
        mask = mask + ns.cast(x != x, dtype=x.dtype) * ns.cast(outk != outk, dtype=x.dtype)
    count = ns.sum(mask, axis=axis, keepdims=True)
    return mask / count


def _extreme(name, impl):
    prim = defprim(
        name,
        lambda x, axis, keepdims, nan_ties=False: xp.asarray(impl(x, axis=axis, keepdims=keepdims)),
        vjp=(lambda ns, g, out, x, axis, keepdims, nan_ties=False:
             expand_reduced(ns, g, x.shape, axis, keepdims) * _extreme_parts(ns, out, x, axis, keepdims, nan_ties),),
        jvp=lambda ns, primals, tangents, out, axis, keepdims, nan_ties=False:
            ns.sum(tangents[0] * _extreme_parts(ns, out, primals[0], axis, keepdims, nan_ties),
                   axis=axis, keepdims=keepdims),
        save_out=True,
    )
    prim.batch = batch_unary_axis(prim)
    return prim


amax_p = _extreme("amax", xp.max)
amin_p = _extreme("amin", xp.min)


@tensor_method("amax")
def amax(input, dim=None, keepdim=False, *, axis=None, keepdims=None):
    """Maximum over ``dim``; ties share the gradient equally.

    Parameters
    ----------
    input : Tensor
        The tensor.
    dim : int or tuple of int, optional
        The dims to reduce (default: all).
    keepdim : bool
        Keep reduced dims with size 1.

    Examples
    --------
    >>> import lucid
    >>> lucid.tensor([[1, 5], [3, 2]]).amax(dim=1).tolist()
    [5, 3]
    """
    if axis is not None:  # See NOTE [NumPy keyword aliases]
        dim = numpy_axis("amax", dim, axis, None)
    if keepdims is not None:
        keepdim = numpy_keepdims("amax", keepdim, keepdims)
    input = _as_tensor(input)
    axes = norm_axes(all_dims_if_empty(dim), input.ndim, "amax")
    if input.numel() == 0 and _py_any(input.shape[a] == 0 for a in axes):
        raise EmptyReductionError(f"amax: expected reduction dims to be non-empty, got shape {tuple(input.shape)}")
    return bind(amax_p, (input,), {"axis": axes, "keepdims": bool(keepdim)})


@tensor_method("amin")
def amin(input, dim=None, keepdim=False, *, axis=None, keepdims=None):
    """Minimum over ``dim``; ties share the gradient equally.

    Parameters
    ----------
    input : Tensor
        The tensor.
    dim : int or tuple of int, optional
        The dims to reduce (default: all).
    keepdim : bool
        Keep reduced dims with size 1.

    Examples
    --------
    >>> import lucid
    >>> lucid.tensor([[1, 5], [3, 2]]).amin(dim=1).tolist()
    [1, 2]
    """
    if axis is not None:  # See NOTE [NumPy keyword aliases]
        dim = numpy_axis("amin", dim, axis, None)
    if keepdims is not None:
        keepdim = numpy_keepdims("amin", keepdim, keepdims)
    input = _as_tensor(input)
    axes = norm_axes(all_dims_if_empty(dim), input.ndim, "amin")
    if input.numel() == 0 and _py_any(input.shape[a] == 0 for a in axes):
        raise EmptyReductionError(f"amin: expected reduction dims to be non-empty, got shape {tuple(input.shape)}")
    return bind(amin_p, (input,), {"axis": axes, "keepdims": bool(keepdim)})


# ------------------------------------------------------- max / min / argmax


argmax_p = _nondiff("argmax", lambda x, axis, keepdims: xp.argmax(x, axis=axis, keepdims=keepdims))
argmin_p = _nondiff("argmin", lambda x, axis, keepdims: xp.argmin(x, axis=axis, keepdims=keepdims))


def _arg_reduce(prim, input, dim, keepdim, op):
    input = _as_tensor(input)
    if 0 in input.shape and (dim is None or input.shape[normalize_axis(dim, input.ndim, op)] == 0):
        raise EmptyReductionError(f"{op}: expected reduction dim {dim} to have non-zero size, got shape "
                                  f"{tuple(input.shape)}")
    if dim is None:
        flat = TN.reshape(input, shape=(input.numel(),))
        out = bind(prim, (flat,), {"axis": 0, "keepdims": False})
        return TN.reshape(out, shape=(1,) * input.ndim) if keepdim else out
    x, axis, was_0d = _lift0d(input, dim, op)
    out = bind(prim, (x,), {"axis": axis, "keepdims": bool(keepdim)})
    return TN.reshape(out, shape=()) if was_0d else out


@tensor_method("argmax")
def argmax(input, dim=None, keepdim=False, *, axis=None, keepdims=None):
    """Index of the (first) maximum over ``dim``, or into the flattened input (int64, no gradient).

    Parameters
    ----------
    input : Tensor
        The tensor.
    dim : int, optional
        The dim to reduce (default: all / the flattened input).
    keepdim : bool
        Keep the reduced dim with size 1.

    Examples
    --------
    >>> import lucid
    >>> lucid.argmax(lucid.tensor([[1.0, 5.0], [7.0, 2.0]]), dim=1).tolist()
    [1, 0]
    """
    if axis is not None:  # See NOTE [NumPy keyword aliases]
        dim = numpy_axis("argmax", dim, axis, None)
    if keepdims is not None:
        keepdim = numpy_keepdims("argmax", keepdim, keepdims)
    return _arg_reduce(argmax_p, input, dim, keepdim, "argmax")


@tensor_method("argmin")
def argmin(input, dim=None, keepdim=False, *, axis=None, keepdims=None):
    """Index of the (first) minimum over ``dim``, or into the flattened input (int64, no gradient).

    Parameters
    ----------
    input : Tensor
        The tensor.
    dim : int, optional
        The dim to reduce (default: the flattened input).
    keepdim : bool
        Keep the reduced dim with size 1.

    Examples
    --------
    >>> import lucid
    >>> lucid.tensor([3.0, 1.0, 2.0]).argmin().item()
    1
    """
    if axis is not None:  # See NOTE [NumPy keyword aliases]
        dim = numpy_axis("argmin", dim, axis, None)
    if keepdims is not None:
        keepdim = numpy_keepdims("argmin", keepdim, keepdims)
    return _arg_reduce(argmin_p, input, dim, keepdim, "argmin")


def _select_along(input, idx_fn, dim, keepdim, rtype, op, *, scan=False):
    """``rtype(values, indices)`` for an index primitive call ``idx_fn(x, axis)`` (keepdims form).

    A reduction over an empty dim has no value to select and raises; a ``scan`` (cummax,
    cummin) of an empty dim is simply empty, as in PyTorch.
    """
    x, axis, was_0d = _lift0d(input, dim, op)
    if x.shape[axis] == 0 and not scan:
        raise EmptyReductionError(f"{op}: expected reduction dim {dim} to have non-zero size, got shape "
                                  f"{tuple(input.shape)}")
    idx = idx_fn(x, axis)
    vals = bind(pick_along_p, (x, idx), {"axis": axis})
    if was_0d:
        return rtype(TN.reshape(vals, shape=()), TN.reshape(idx, shape=()))
    if not keepdim:
        return rtype(_drop_axis(vals, axis), _drop_axis(idx, axis))
    return rtype(vals, idx)


def _max_min(input, dim, keepdim, other, name):
    if isinstance(dim, Tensor) or other is not None:
        from ..elementwise import maximum, minimum

        return (maximum if name == "max" else minimum)(input, dim if other is None else other)
    input = _as_tensor(input)
    if dim is None:
        if input.numel() == 0:
            raise EmptyReductionError(f"{name}: expected a non-empty tensor, got shape {tuple(input.shape)}")
        return bind(amax_p if name == "max" else amin_p, (input,),
                    {"axis": tuple(range(input.ndim)), "keepdims": False, "nan_ties": True})
    prim = argmax_p if name == "max" else argmin_p
    return _select_along(input, lambda x, a: bind(prim, (x,), {"axis": a, "keepdims": True}), dim, keepdim,
                         getattr(return_types, name), name)


@tensor_method("max")
def max(input, dim=None, keepdim=False, *, other=None, axis=None, keepdims=None):
    """Maximum: of all elements; ``(values, indices)`` over ``dim``; or ``maximum(input, other)``.

    With ``dim`` the gradient flows to the selected (first maximal) element only; without
    it, ties share the gradient equally (as in PyTorch).

    Parameters
    ----------
    input : Tensor
        The tensor.
    dim : int, optional
        The dim to reduce (default: all / the flattened input).
    keepdim : bool
        Keep the reduced dim with size 1.
    other : Tensor, optional
        ``max(input, other)`` is the elementwise :func:`maximum`.

    Examples
    --------
    >>> import lucid
    >>> x = lucid.tensor([[1.0, 5.0], [7.0, 2.0]])
    >>> x.max().item()
    7.0
    >>> v, i = x.max(dim=1)
    >>> v.tolist(), i.tolist()
    ([5.0, 7.0], [1, 0])
    """
    if axis is not None:  # See NOTE [NumPy keyword aliases]
        dim = numpy_axis("max", dim, axis, None)
    if keepdims is not None:
        keepdim = numpy_keepdims("max", keepdim, keepdims)
    return _max_min(input, dim, keepdim, other, "max")


@tensor_method("min")
def min(input, dim=None, keepdim=False, *, other=None, axis=None, keepdims=None):
    """Minimum: of all elements; ``(values, indices)`` over ``dim``; or ``minimum(input, other)``.

    Parameters
    ----------
    input : Tensor
        The tensor.
    dim : int, optional
        The dim to reduce (default: all / the flattened input).
    keepdim : bool
        Keep the reduced dim with size 1.
    other : Tensor, optional
        ``min(input, other)`` is the elementwise :func:`minimum`.

    Examples
    --------
    >>> import lucid
    >>> lucid.tensor([3.0, 1.0, 2.0]).min(dim=0).indices.item()
    1
    """
    if axis is not None:  # See NOTE [NumPy keyword aliases]
        dim = numpy_axis("min", dim, axis, None)
    if keepdims is not None:
        keepdim = numpy_keepdims("min", keepdim, keepdims)
    return _max_min(input, dim, keepdim, other, "min")


# ------------------------------------------------------- sort / argsort / topk


def _argsort_impl(x, axis, descending, k):
    # Always stable. Descending keeps equal elements in input order (and NaNs first, as PyTorch):
    # sort the reversed input ascending, then reverse the result and map indices back.
    if descending:
        n = x.shape[axis]
        idx = (n - 1) - xp.flip(xp.argsort(xp.flip(x, axis), axis=axis, kind="stable"), axis)
    else:
        idx = xp.argsort(x, axis=axis, kind="stable")
    if k is not None:
        idx = idx[_axis_key(axis, slice(0, k))]
    return idx.astype(np.int64, copy=False)


argsort_p = _nondiff("argsort", _argsort_impl)


@tensor_method("argsort")
def argsort(input, dim=None, descending=False, stable=False, *, axis=None):
    """Indices that sort ``input`` along ``dim`` (the sort is always stable).

    Parameters
    ----------
    input : Tensor
        The tensor.
    dim : int
        The dim to sort along.
    descending : bool
        Largest first.
    stable : bool
        Keep the order of equal elements.
    axis : int, optional
        NumPy's name for ``dim`` (PyTorch accepts it too); not both.

    Examples
    --------
    >>> import lucid
    >>> lucid.argsort(lucid.tensor([3.0, 1.0, 2.0])).tolist()
    [1, 2, 0]
    """
    if axis is not None:  # See NOTE [NumPy keyword aliases]
        dim = numpy_axis("argsort", dim, axis, None)
    x, axis, was_0d = _lift0d(input, -1 if dim is None else dim, "argsort")
    idx = bind(argsort_p, (x,), {"axis": axis, "descending": bool(descending), "k": None})
    return TN.reshape(idx, shape=()) if was_0d else idx


@tensor_method("sort")
def sort(input, dim=-1, descending=False, stable=False, *, axis=None):
    """Sorted values along ``dim`` and their original indices: ``(values, indices)``.

    Stable (equal elements keep their order, also when ``descending``); the gradient of
    ``values`` goes back to the original positions.

    Parameters
    ----------
    input : Tensor
        The tensor.
    dim : int
        The dim to sort along.
    descending : bool
        Largest first.
    stable : bool
        Keep the order of equal elements.

    Examples
    --------
    >>> import lucid
    >>> v, i = lucid.sort(lucid.tensor([3.0, 1.0, 2.0]), descending=True)
    >>> v.tolist(), i.tolist()
    ([3.0, 2.0, 1.0], [0, 2, 1])
    """
    if axis is not None:  # See NOTE [NumPy keyword aliases]
        dim = numpy_axis("sort", dim, axis, -1)
    input = _as_tensor(input)
    if input.ndim and input.shape[normalize_axis(dim, input.ndim, "sort")] == 0:
        return return_types.sort(input, TN.cast(input, dtype=dtypes.int64))
    fn = lambda x, a: bind(argsort_p, (x,), {"axis": a, "descending": bool(descending), "k": None})  # noqa: E731
    return _select_along(input, fn, dim, True, return_types.sort, "sort")


@tensor_method("topk")
def topk(input, k, dim=-1, largest=True, sorted=True, *, axis=None):
    """The ``k`` largest (or smallest) elements along ``dim``: ``(values, indices)``.

    Results are always sorted; the gradient flows to the selected positions.

    Parameters
    ----------
    input : Tensor
        The tensor.
    k : int
        How many.
    dim : int
        The dim to search.
    largest : bool
        The largest (else the smallest) ``k``.
    sorted : bool
        Return them in order.

    Examples
    --------
    >>> import lucid
    >>> lucid.topk(lucid.tensor([1.0, 4.0, 2.0, 3.0]), 2).values.tolist()
    [4.0, 3.0]
    """
    if axis is not None:  # See NOTE [NumPy keyword aliases]
        dim = numpy_axis("topk", dim, axis, -1)
    input = _as_tensor(input)
    n = input.shape[normalize_axis(dim, input.ndim, "topk")] if input.ndim else 1
    if not 0 <= k <= n:
        raise RuntimeError(f"topk: k ({k}) is out of range for dimension {dim} of size {n} (shape {tuple(input.shape)})")
    if k == 0:
        shape = list(input.shape)
        shape[normalize_axis(dim, input.ndim, "topk")] = 0
        empty = TN.getitem(input, key=_axis_key(normalize_axis(dim, input.ndim, "topk"), slice(0, 0)))
        return return_types.topk(empty, TN.cast(empty, dtype=dtypes.int64))
    fn = lambda x, a: bind(argsort_p, (x,), {"axis": a, "descending": bool(largest), "k": int(k)})  # noqa: E731
    return _select_along(input, fn, dim, True, return_types.topk, "topk")


__all__ = ['amax', 'amin', 'argmax', 'argmin', 'argsort', 'max', 'min', 'sort', 'topk']
