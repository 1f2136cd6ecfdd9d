"""Reductions: sum, mean, amax/amin and the ops composed from them."""
from __future__ import annotations

import numpy as np

from .._core import dtypes
from .._core.backend import xp
from .._core.primitive import TN, bind, defprim
from .._core.tensor import Tensor, tensor_method
from ._family import _as_tensor, batch_unary_axis, linear_jvp, normalize_axis, same_dtype


def norm_axes(dim, nd, op):
    """``dim`` argument (None, int or sequence) as a sorted tuple of non-negative axes."""
    if dim is None:
        return tuple(range(nd))
    dims = (dim,) if isinstance(dim, int) else tuple(dim)
    axes = tuple(sorted({normalize_axis(d, nd, op) for d in dims}))
    if len(axes) != len(dims):
        raise RuntimeError(f"{op}: dim {dim} appears multiple times in the list of dims")
    return axes


def keep_shape(shape, axis):
    """``shape`` with the reduced ``axis`` kept as size 1."""
    return tuple(1 if i in axis else s for i, s in enumerate(shape))


def expand_reduced(ns, g, shape, axis, keepdims):
    """Reshape a reduction's output (or cotangent) so it broadcasts against the input."""
    if not keepdims:
        g = ns.reshape(g, shape=keep_shape(shape, axis))
    return g


# ------------------------------------------------------------------------- sum


def _sum_impl(x, axis, keepdims):
    return xp.asarray(xp.sum(x, axis=axis, keepdims=keepdims))


sum_p = defprim(
    "sum",
    _sum_impl,
    vjp=(lambda ns, g, out, x, axis, keepdims:
         ns.broadcast_to(expand_reduced(ns, g, x.shape, axis, keepdims), shape=tuple(x.shape)),),
    save_inputs=False,
)
sum_p.jvp = linear_jvp(sum_p)
sum_p.batch = batch_unary_axis(sum_p)


@tensor_method("sum")
def sum(input, dim=None, keepdim=False, *, dtype=None, axis=None):
    """Sum over ``dim`` (all dims by default).

    Examples
    --------
    >>> import lucid
    >>> lucid.tensor([[1.0, 2.0], [3.0, 4.0]]).sum(dim=0).tolist()
    [4.0, 6.0]
    """
    input = _as_tensor(input)
    dim = axis if dim is None else dim
    if dtype is not None:
        input = input.to(dtype)
    elif input.dtype.kind in "biu":
        input = input.to(dtypes.int64)
    axes = norm_axes(dim, input.ndim, "sum")
    return bind(sum_p, (input,), {"axis": axes, "keepdims": bool(keepdim)})


@tensor_method("mean")
def mean(input, dim=None, keepdim=False, *, dtype=None, axis=None):
    """Arithmetic mean over ``dim``."""
    input = _as_tensor(input)
    dim = axis if dim is None else dim
    if dtype is not None:
        input = input.to(dtype)
    if input.dtype.kind not in "fc":
        raise RuntimeError(
            f"mean: could not infer output dtype; input dtype must be floating point or complex, got {input.dtype}"
        )
    axes = norm_axes(dim, input.ndim, "mean")
    n = 1
    for a in axes:
        n *= input.shape[a]
    return sum(input, axes, keepdim) / n if n else sum(input, axes, keepdim) * float("nan")


# ---------------------------------------------------------------- amax / amin


def _extreme_parts(ns, out, x, axis, keepdims):
    # Ties share the gradient equally (PyTorch's amax/amin convention).
    outk = expand_reduced(ns, out, x.shape, axis, keepdims)
    mask = ns.cast(x == outk, dtype=x.dtype)
    count = ns.sum(mask, axis=axis, keepdims=True)
    return mask / count


def _extreme(name, impl):
    prim = defprim(
        name,
        lambda x, axis, keepdims: xp.asarray(impl(x, axis=axis, keepdims=keepdims)),
        vjp=(lambda ns, g, out, x, axis, keepdims:
             expand_reduced(ns, g, x.shape, axis, keepdims) * _extreme_parts(ns, out, x, axis, keepdims),),
        jvp=lambda ns, primals, tangents, out, axis, keepdims:
            ns.sum(tangents[0] * _extreme_parts(ns, out, primals[0], axis, keepdims), axis=axis, keepdims=keepdims),
        save_out=True,
    )
    prim.batch = batch_unary_axis(prim)
    return prim


amax_p = _extreme("amax", xp.max)
amin_p = _extreme("amin", xp.min)


@tensor_method("amax")
def amax(input, dim=None, keepdim=False):
    """Maximum over ``dim``; ties share the gradient equally."""
    input = _as_tensor(input)
    axes = norm_axes(dim if dim != () else None, input.ndim, "amax")
    if input.numel() == 0 and any(input.shape[a] == 0 for a in axes):
        raise RuntimeError(f"amax: expected reduction dims to be non-empty, got shape {tuple(input.shape)}")
    return bind(amax_p, (input,), {"axis": axes, "keepdims": bool(keepdim)})


@tensor_method("amin")
def amin(input, dim=None, keepdim=False):
    """Minimum over ``dim``; ties share the gradient equally."""
    input = _as_tensor(input)
    axes = norm_axes(dim if dim != () else None, input.ndim, "amin")
    if input.numel() == 0 and any(input.shape[a] == 0 for a in axes):
        raise RuntimeError(f"amin: expected reduction dims to be non-empty, got shape {tuple(input.shape)}")
    return bind(amin_p, (input,), {"axis": axes, "keepdims": bool(keepdim)})


__all__ = ['amax', 'amin', 'mean', 'sum']
