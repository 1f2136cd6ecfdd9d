"""Sum-like reductions: sum, mean, prod, norm, any/all.
"""
from __future__ import annotations

import math

import numpy as np

from ..._core import dtypes
from ..._core.backend import xp
from ..._core.primitive import TN, bind, defprim
from ..._core.tensor import tensor_method
from .._family import _as_tensor, batch_unary_axis, conj_if_complex, linear_jvp, quiet
from ._common import EmptyReductionError, _nondiff, _shift, all_dims_if_empty, expand_reduced, norm_axes
from ..linalg_norm import vector_norm_p
from .extrema import amax, amin
from ..numpy_aliases import numpy_axis, numpy_keepdims


# ------------------------------------------------------------------------- sum


def _sum_impl(x, axis, keepdims):
    if x.__class__ is np.ndarray:  # the method skips np.sum's Python dispatch (a few us per call)
        out = x.sum(axis=axis, keepdims=keepdims)
        return out if out.__class__ is np.ndarray else xp.asarray(out)
    return xp.asarray(xp.sum(x, axis=axis, keepdims=keepdims))


sum_p = defprim(
    "sum",
    quiet(_sum_impl, 1),  # inf + -inf is nan, silently. See NOTE [Silent floating-point errors]
    vjp=(lambda ns, g, out, x, axis, keepdims:
         ns.broadcast_to(expand_reduced(ns, g, x.shape, axis, keepdims), shape=tuple(x.shape)),),
    save_inputs=False,
)
sum_p.jvp = linear_jvp(sum_p)
sum_p.batch = batch_unary_axis(sum_p)


@tensor_method("sum")
def sum(input, dim=None, keepdim=False, *, dtype=None, axis=None, keepdims=None):
    """Sum over ``dim`` (all dims by default).

    Parameters
    ----------
    input : Tensor
        The tensor.
    dim : int or tuple of int, optional
        The dims to reduce (default: all).
    keepdim : bool
        Keep reduced dims with size 1.
    dtype : dtype, optional
        Cast the input to this dtype first.

    Examples
    --------
    >>> import lucid
    >>> lucid.tensor([[1.0, 2.0], [3.0, 4.0]]).sum(dim=0).tolist()
    [4.0, 6.0]
    """
    if axis is not None:  # See NOTE [NumPy keyword aliases]
        dim = numpy_axis("sum", dim, axis, None)
    if keepdims is not None:
        keepdim = numpy_keepdims("sum", keepdim, keepdims)
    input = _as_tensor(input)
    dim = all_dims_if_empty(dim)
    if dtype is not None:
        return _with_dtype(sum_p, input, dim, keepdim, dtype, "sum")
    if input.dtype.kind in "biu":
        input = input.to(dtypes.int64)
    axes = norm_axes(dim, input.ndim, "sum")
    return bind(sum_p, (input,), {"axis": axes, "keepdims": bool(keepdim)})


def _with_dtype(prim, input, dim, keepdim, dtype, op):
    """``prim`` (sum or prod) of ``input`` cast to ``dtype``, the result in ``dtype`` too: NumPy
    accumulates small integers and bool in int64, PyTorch keeps the requested dtype (an int32
    sum wraps around as PyTorch's does; a bool sum is an ``any``, a bool prod an ``all``)."""
    input = input.to(dtype)
    out = bind(prim, (input,), {"axis": norm_axes(dim, input.ndim, op), "keepdims": bool(keepdim)})
    return out if out.dtype == input.dtype else TN.cast(out, dtype=input.dtype)


# ------------------------------------------------------------------------ mean

# NOTE [Mean as a primitive]
# A mean was ``sum(x) / n``: two launches on a GPU, and a backward of a division by a scalar
# followed by the sum's broadcast view, which a fused kernel downstream (ReLU's, NOTE [Fused
# device kernels]) must first copy to contiguous memory. As one primitive it is one reduction
# (NumPy's and CuPy's ``mean``, which accumulate float16 in float32, as PyTorch does), and its
# vjp is ``g / n`` spread over the input: on the CPU divided first and broadcast as a view (no
# full-size array), on a device broadcast first and divided, which writes the contiguous
# array the next kernel wants in the same one launch. A mean over nothing is NaN.


def _mean_impl(x, axis, keepdims):
    if x.size == 0:  # NaN where nothing is averaged, without NumPy's "Mean of empty slice" warning
        return _sum_impl(x, axis, keepdims) / math.prod(x.shape[a] for a in axis)
    if x.__class__ is np.ndarray:
        out = x.mean(axis=axis, keepdims=keepdims)
        return out if out.__class__ is np.ndarray else xp.asarray(out)
    return xp.asarray(xp.mean(x, axis=axis, keepdims=keepdims))


def _mean_vjp(ns, g, out, x, axis, keepdims):
    shape = tuple(x.shape)
    n = math.prod(shape[a] for a in axis)
    g = expand_reduced(ns, g, shape, axis, keepdims)
    if g.__class__ is np.ndarray or ns.is_tensor_ns:
        return ns.broadcast_to(g / n, shape=shape)
    return ns.broadcast_to(g, shape=shape) / n


mean_p = defprim("mean", quiet(_mean_impl, 1), vjp=(_mean_vjp,), save_inputs=False)
mean_p.jvp = linear_jvp(mean_p)
mean_p.batch = batch_unary_axis(mean_p)


@tensor_method("mean")
def mean(input, dim=None, keepdim=False, *, dtype=None, axis=None, keepdims=None):
    """Arithmetic mean over ``dim``.

    Parameters
    ----------
    input : Tensor
        The tensor. Floating point (or give ``dtype``).
    dim : int or tuple of int, optional
        The dims to reduce (default: all).
    keepdim : bool
        Keep reduced dims with size 1.
    dtype : dtype, optional
        Cast first.

    Examples
    --------
    >>> import lucid
    >>> lucid.tensor([[1.0, 2.0], [3.0, 4.0]]).mean(dim=0).tolist()
    [2.0, 3.0]
    """
    if axis is not None:  # See NOTE [NumPy keyword aliases]
        dim = numpy_axis("mean", dim, axis, None)
    if keepdims is not None:
        keepdim = numpy_keepdims("mean", keepdim, keepdims)
    input = _as_tensor(input)
    dim = all_dims_if_empty(dim)
    if dtype is not None:
        input = input.to(dtype)
    if input.dtype.kind not in "fc":
        raise RuntimeError(
            f"mean: could not infer output dtype; input dtype must be floating point or complex, got {input.dtype}"
        )
    return bind(mean_p, (input,), {"axis": norm_axes(dim, input.ndim, "mean"), "keepdims": bool(keepdim)})


# ------------------------------------------------------------------- prod


def _prod_others(ns, x, axis):
    """``prod of every other element`` of each reduced group, without dividing by ``x``.

    The reduced axes are moved last and flattened; the result is the product of an
    exclusive cumprod from the left and one from the right, exact when ``x`` has zeros.
    """
    nd = len(x.shape)
    if not axis:
        return ns.ones_like(x)
    rest = tuple(i for i in range(nd) if i not in axis)
    perm = rest + tuple(axis)
    xt = x if perm == tuple(range(nd)) else ns.transpose(x, axes=perm)
    n = math.prod(x.shape[a] for a in axis)
    ax = len(rest)
    xf = ns.reshape(xt, shape=tuple(x.shape[i] for i in rest) + (n,))
    left = _shift(ns, ns.cumprod(xf, axis=ax, reverse=False), 1, ax, 1)
    right = _shift(ns, ns.cumprod(xf, axis=ax, reverse=True), -1, ax, 1)
    o = ns.reshape(left * right, shape=tuple(xt.shape))
    if perm == tuple(range(nd)):
        return o
    inv = [0] * nd
    for i, p in enumerate(perm):
        inv[p] = i
    return ns.transpose(o, axes=tuple(inv))


prod_p = defprim(
    "prod",
    quiet(lambda x, axis, keepdims: xp.asarray(xp.prod(x, axis=axis, keepdims=keepdims)), 1),
    vjp=(lambda ns, g, out, x, axis, keepdims:
         expand_reduced(ns, g, x.shape, axis, keepdims) * conj_if_complex(ns, _prod_others(ns, x, axis)),),
    jvp=lambda ns, primals, tangents, out, axis, keepdims:
        ns.sum(tangents[0] * _prod_others(ns, primals[0], axis), axis=axis, keepdims=keepdims),
)
prod_p.batch = batch_unary_axis(prod_p)


@tensor_method("prod")
def prod(input, dim=None, keepdim=False, *, dtype=None, axis=None, keepdims=None):
    """Product of the elements over ``dim`` (all by default).

    The gradient is exact with zeros in the input (no division by the input).

    Parameters
    ----------
    input : Tensor
        The tensor.
    dim : int or tuple of int, optional
        The dims to reduce (default: all).
    keepdim : bool
        Keep reduced dims with size 1.
    dtype : dtype, optional
        Cast the input to this dtype first.

    Examples
    --------
    >>> import lucid
    >>> lucid.tensor([[1.0, 2.0], [3.0, 4.0]]).prod(dim=1).tolist()
    [2.0, 12.0]
    """
    if axis is not None:  # See NOTE [NumPy keyword aliases]
        dim = numpy_axis("prod", dim, axis, None)
    if keepdims is not None:
        keepdim = numpy_keepdims("prod", keepdim, keepdims)
    input = _as_tensor(input)
    if dtype is not None:
        return _with_dtype(prod_p, input, dim, keepdim, dtype, "prod")
    if input.dtype.kind in "biu":
        input = input.to(dtypes.int64)
    axes = norm_axes(dim, input.ndim, "prod")
    return bind(prod_p, (input,), {"axis": axes, "keepdims": bool(keepdim)})


# ------------------------------------------------------------------ norm


@tensor_method("norm")
def norm(input, p="fro", dim=None, keepdim=False, dtype=None):
    """Vector norm over ``dim`` (all elements by default): ``p`` = 2 / "fro", 1, inf, -inf, 0 or any float.

    The gradient at the zero vector is 0 (as PyTorch). ``p="nuc"`` is not supported here.

    Parameters
    ----------
    input : Tensor
        The tensor.
    p : {'fro', 'nuc', number}
        The norm.
    dim : int or tuple of int, optional
        The dims to reduce (default: all).
    keepdim : bool
        Keep reduced dims with size 1.
    dtype : dtype, optional
        Cast the input to this dtype first.

    Examples
    --------
    >>> import lucid
    >>> lucid.norm(lucid.tensor([3.0, 4.0])).item()
    5.0
    """
    input = _as_tensor(input)
    if p is None:  # PyTorch's default spelled out: the 2-norm of each reduced slice
        p = "fro"
    if dtype is not None:
        input = input.to(dtype)
    if input.dtype.kind not in "fc":
        raise RuntimeError(f"norm: input dtype should be floating point, got {input.dtype} (shape {tuple(input.shape)})")
    if isinstance(p, str):
        if p == "nuc":  # the sum of singular values over two dims (all of a 2-d input), as PyTorch
            from ...linalg import matrix_norm

            dims = tuple(range(input.ndim)) if dim is None else (dim,) if isinstance(dim, int) else tuple(dim)
            if len(dims) != 2:
                raise RuntimeError(f"norm: the nuclear norm needs 2 dims, got dim={dim} for an input of shape "
                                   f"{tuple(input.shape)}")
            return matrix_norm(input, "nuc", dim=dims, keepdim=bool(keepdim))
        if p != "fro":
            raise RuntimeError(f"norm: p={p!r} is not supported (use 'fro', 'nuc' or a number)")
        p = 2
    axes = norm_axes(all_dims_if_empty(dim), input.ndim, "norm")
    keepdim = bool(keepdim)
    if p not in (0, 1, math.inf, -math.inf):  # scaled, no over/underflow: NOTE [Scaled norms]
        if p < 0 and 0 in [input.shape[ax] for ax in axes]:  # 0 ** p summed over nothing has no identity
            raise EmptyReductionError(f"norm: cannot compute the {p} norm over an empty dimension (shape "
                                      f"{tuple(input.shape)}, dim {dim}): the operation has no identity")
        return bind(vector_norm_p, (input,), {"ord": float(p), "axis": axes, "keepdims": keepdim})
    from ..elementwise import abs as _abs

    a = _abs(input)
    if p in (math.inf, -math.inf):
        if 0 in [input.shape[ax] for ax in axes]:  # (`any` here is lucid's)
            raise EmptyReductionError(f"norm: cannot compute the {p} norm on an empty tensor because the operation "
                                      f"does not have an identity (shape {tuple(input.shape)}, dim {dim})")
        return amax(a, axes, keepdim) if p == math.inf else amin(a, axes, keepdim)
    if p == 0:
        # sign(|x|) is the nonzero indicator with a zero derivative: the count stays in the graph
        # (zero gradients, requires_grad as PyTorch) and is real for a complex input
        from ..elementwise import sign as _sign

        return sum(_sign(a), axes, keepdim)
    return sum(a, axes, keepdim)


# ------------------------------------------------------------- any / all

def _truth_reduction(reduce):
    # PyTorch keeps uint8 for a uint8 input (its legacy mask dtype); every other dtype gives bool.
    def impl(x, axis, keepdims):
        out = xp.asarray(reduce(x, axis=axis, keepdims=keepdims))
        return out.astype(x.dtype) if x.dtype == _UINT8 else out

    return impl


_UINT8 = np.dtype(np.uint8)
any_p = _nondiff("any", _truth_reduction(xp.any))
all_p = _nondiff("all", _truth_reduction(xp.all))


@tensor_method("any")
def any(input, dim=None, keepdim=False, *, axis=None, keepdims=None):
    """Whether any element over ``dim`` is nonzero (bool result, uint8 for uint8 input as in
    PyTorch; no gradient).

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
    >>> lucid.any(lucid.tensor([[0, 1], [0, 0]]), dim=1).tolist()
    [True, False]
    """
    if axis is not None:  # See NOTE [NumPy keyword aliases]
        dim = numpy_axis("any", dim, axis, None)
    if keepdims is not None:
        keepdim = numpy_keepdims("any", keepdim, keepdims)
    input = _as_tensor(input)
    return bind(any_p, (input,), {"axis": norm_axes(dim, input.ndim, "any"), "keepdims": bool(keepdim)})


@tensor_method("all")
def all(input, dim=None, keepdim=False, *, axis=None, keepdims=None):
    """Whether every element over ``dim`` is nonzero (bool result, uint8 for uint8 input as in
    PyTorch; no gradient).

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
    >>> lucid.all(lucid.tensor([[1, 1], [0, 1]]), dim=1).tolist()
    [True, False]
    """
    if axis is not None:  # See NOTE [NumPy keyword aliases]
        dim = numpy_axis("all", dim, axis, None)
    if keepdims is not None:
        keepdim = numpy_keepdims("all", keepdim, keepdims)
    input = _as_tensor(input)
    return bind(all_p, (input,), {"axis": norm_axes(dim, input.ndim, "all"), "keepdims": bool(keepdim)})


__all__ = ['all', 'any', 'mean', 'norm', 'prod', 'sum']
