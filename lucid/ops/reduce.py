"""Reductions and scans: sum, mean, prod, max/min, var/std, logsumexp, norm, cumulative ops,
softmax, sort/topk, any/all.

Value-selecting ops (max/min with ``dim``, sort, topk, cummax) are composites of two
primitives: a non-differentiable one that computes integer indices, and ``pick_along``
(``take_along_axis``) that selects the values, so the gradient flows to the selected
positions only. See NOTE [Selecting values by index].
"""
from __future__ import annotations

import builtins
import collections
import math

import numpy as np

from .._core import dtypes
from .._core.backend import xp
from .._core.primitive import TN, bind, defprim
from .._core.tensor import Tensor, tensor_method
from ._family import (_as_tensor, _promote_float, batch_unary_axis, linear_jvp, move_bdim, normalize_axis,
                      unary)

_py_any, _py_all, _py_max, _py_min = builtins.any, builtins.all, builtins.max, builtins.min


def norm_axes(dim, nd, op):
    """``dim`` argument (None, int or sequence) as a sorted tuple of non-negative axes."""
    if dim is None:
        return tuple(range(nd))
    dims = (dim,) if isinstance(dim, int) else tuple(dim)
    axes = tuple(sorted({normalize_axis(d, nd, op) for d in dims}))
    if nd == 0:  # a 0-d tensor accepts dim 0 / -1 and has nothing to reduce
        return ()
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
    if x.__class__ is np.ndarray:  # the method skips np.sum's Python dispatch (a few us per call)
        out = x.sum(axis=axis, keepdims=keepdims)
        return out if out.__class__ is np.ndarray else xp.asarray(out)
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
    input = _as_tensor(input)
    axes = norm_axes(dim if dim != () else None, input.ndim, "amax")
    if input.numel() == 0 and _py_any(input.shape[a] == 0 for a in axes):
        raise RuntimeError(f"amax: expected reduction dims to be non-empty, got shape {tuple(input.shape)}")
    return bind(amax_p, (input,), {"axis": axes, "keepdims": bool(keepdim)})


@tensor_method("amin")
def amin(input, dim=None, keepdim=False):
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
    input = _as_tensor(input)
    axes = norm_axes(dim if dim != () else None, input.ndim, "amin")
    if input.numel() == 0 and _py_any(input.shape[a] == 0 for a in axes):
        raise RuntimeError(f"amin: expected reduction dims to be non-empty, got shape {tuple(input.shape)}")
    return bind(amin_p, (input,), {"axis": axes, "keepdims": bool(keepdim)})



# ------------------------------------------------------------------- helpers


class return_types:
    """Named ``(values, indices)`` results, like ``torch.return_types``.

    Parameters
    ----------
    (none)
        A namespace of named tuples: ``max``, ``min``, ``sort``, ``topk``, ``cummax`` ...

    Examples
    --------
    >>> import lucid
    >>> lucid.max(lucid.tensor([1.0, 3.0]), dim=0)._fields
    ('values', 'indices')
    """

    max = collections.namedtuple("max", ["values", "indices"])
    min = collections.namedtuple("min", ["values", "indices"])
    sort = collections.namedtuple("sort", ["values", "indices"])
    topk = collections.namedtuple("topk", ["values", "indices"])
    cummax = collections.namedtuple("cummax", ["values", "indices"])
    cummin = collections.namedtuple("cummin", ["values", "indices"])


def _axis_key(axis, sl):
    """An index key selecting ``sl`` along ``axis`` (all of every other dim)."""
    return (slice(None),) * axis + (sl,)


def _slice(ns, v, axis, start, stop):
    return ns.getitem(v, key=_axis_key(axis, slice(start, stop)))


def _shift(ns, v, d, axis, fill):
    """``out[i] = v[i - d]`` along ``axis`` (``d`` may be negative), ``fill`` (0 or 1) where undefined."""
    n = v.shape[axis]
    k = _py_min(abs(d), n)
    pad = _slice(ns, v, axis, 0, k)
    pad = ns.ones_like(pad) if fill else ns.zeros_like(pad)
    if d > 0:
        return ns.concat(pad, _slice(ns, v, axis, 0, n - k), axis=axis)
    return ns.concat(_slice(ns, v, axis, k, n), pad, axis=axis)


def _linear_scan(ns, c, b, axis, reverse):
    """Solve ``h[i] = b[i] + c[i] * h[i - 1]`` (``h[i + 1]`` if ``reverse``) along ``axis``.

    A Hillis-Steele scan: log2(n) rounds of shifts, products and sums, all primitives with
    their own rules, so the result is differentiable again and needs no division (exact
    with zeros in ``c``). Used by the cumprod rules.
    """
    n, d, s = b.shape[axis], 1, (-1 if reverse else 1)
    while d < n:
        b = b + c * _shift(ns, b, s * d, axis, 0)
        if 2 * d < n:
            c = c * _shift(ns, c, s * d, axis, 0)
        d *= 2
    return b


def _lift0d(input, dim, op):
    """``(x, axis, was_0d)``: a 0-d input is viewed as shape ``(1,)`` (``dim`` must be 0 or -1)."""
    input = _as_tensor(input)
    if input.ndim == 0:
        normalize_axis(dim, 0, op)
        return TN.reshape(input, shape=(1,)), 0, True
    return input, normalize_axis(dim, input.ndim, op), False


def _drop_axis(t, axis):
    shape = tuple(t.shape)
    return TN.reshape(t, shape=shape[:axis] + shape[axis + 1:])


def _float_input(input, dtype):
    input = _as_tensor(input)
    if dtype is not None:
        return input.to(dtype)
    return _promote_float(input)


def _nondiff(name, impl):
    """An integer- or bool-valued primitive with an ``axis`` parameter (no gradient)."""
    prim = defprim(name, impl, vjp=None, jvp=lambda ns, primals, tangents, out, **p: None,
                   differentiable=False, save_inputs=False)
    prim.batch = batch_unary_axis(prim)
    return prim


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
    lambda x, axis, keepdims: xp.asarray(xp.prod(x, axis=axis, keepdims=keepdims)),
    vjp=(lambda ns, g, out, x, axis, keepdims:
         expand_reduced(ns, g, x.shape, axis, keepdims) * _prod_others(ns, x, axis),),
    jvp=lambda ns, primals, tangents, out, axis, keepdims:
        ns.sum(tangents[0] * _prod_others(ns, primals[0], axis), axis=axis, keepdims=keepdims),
)
prod_p.batch = batch_unary_axis(prod_p)


@tensor_method("prod")
def prod(input, dim=None, keepdim=False, *, dtype=None):
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
    input = _as_tensor(input)
    if dtype is not None:
        input = input.to(dtype)
    elif input.dtype.kind in "biu":
        input = input.to(dtypes.int64)
    axes = norm_axes(dim, input.ndim, "prod")
    return bind(prod_p, (input,), {"axis": axes, "keepdims": bool(keepdim)})


# ----------------------------------------------------------- cumsum / cumprod


def _cum_impl(fn):
    def impl(x, axis, reverse):
        if not reverse:
            return fn(x, axis=axis)
        return xp.flip(fn(xp.flip(x, axis), axis=axis), axis)

    return impl


cumsum_p = defprim(
    "cumsum", _cum_impl(xp.cumsum),
    # The adjoint of a running sum is the running sum taken from the other end.
    vjp=(lambda ns, g, out, x, axis, reverse: ns.cumsum(g, axis=axis, reverse=not reverse),),
    save_inputs=False,
)
cumsum_p.jvp = linear_jvp(cumsum_p)
cumsum_p.batch = batch_unary_axis(cumsum_p)


def _cumprod_vjp(ns, g, out, x, axis, reverse):
    # d out[k] / d x[i] = prod_{j <= k, j != i} x[j] = excl[i] * prod_{i < j <= k} x[j], so
    # dx[i] = excl[i] * s[i] with s[i] = g[i] + x[i + 1] s[i + 1]: a linear scan, no division.
    s = -1 if reverse else 1
    excl = _shift(ns, out, s, axis, 1)
    return excl * _linear_scan(ns, _shift(ns, x, -s, axis, 0), g, axis, not reverse)


def _cumprod_jvp(ns, primals, tangents, out, axis, reverse):
    # t_out[k] = x[k] t_out[k - 1] + t[k] * excl[k].
    excl = _shift(ns, out, -1 if reverse else 1, axis, 1)
    return _linear_scan(ns, primals[0], tangents[0] * excl, axis, reverse)


cumprod_p = defprim("cumprod", _cum_impl(xp.cumprod), vjp=(_cumprod_vjp,), jvp=_cumprod_jvp, save_out=True)
cumprod_p.batch = batch_unary_axis(cumprod_p)


def _cumulative(prim, input, dim, dtype, op):
    input = _as_tensor(input)
    if dtype is not None:
        input = input.to(dtype)
    elif input.dtype.kind in "biu":
        input = input.to(dtypes.int64)
    x, axis, was_0d = _lift0d(input, dim, op)
    out = bind(prim, (x,), {"axis": axis, "reverse": False})
    return TN.reshape(out, shape=()) if was_0d else out


@tensor_method("cumsum")
def cumsum(input, dim, *, dtype=None):
    """Running sum along ``dim`` (integers accumulate in int64).

    Parameters
    ----------
    input : Tensor
        The tensor.
    dim : int
        The dim to scan.
    dtype : dtype, optional
        Cast the input to this dtype first.

    Examples
    --------
    >>> import lucid
    >>> lucid.cumsum(lucid.tensor([1.0, 2.0, 3.0]), dim=0).tolist()
    [1.0, 3.0, 6.0]
    """
    return _cumulative(cumsum_p, input, dim, dtype, "cumsum")


@tensor_method("cumprod")
def cumprod(input, dim, *, dtype=None):
    """Running product along ``dim``.

    The gradient is computed by a linear scan, never by dividing by the input, so it is
    exact (to any order) for inputs containing zeros.

    Parameters
    ----------
    input : Tensor
        The tensor.
    dim : int
        The dim to scan.
    dtype : dtype, optional
        Cast the input to this dtype first.

    Examples
    --------
    >>> import lucid
    >>> lucid.cumprod(lucid.tensor([1.0, 2.0, 3.0]), dim=0).tolist()
    [1.0, 2.0, 6.0]
    """
    return _cumulative(cumprod_p, input, dim, dtype, "cumprod")


# --------------------------------------------------------------- pick_along

# NOTE [Selecting values by index]
# max/min with ``dim``, sort, topk and cummax/cummin compute their integer indices with a
# non-differentiable primitive, then select the values with ``pick_along``
# (``take_along_axis``). Its vjp scatters the cotangent back with ``pick_along_scatter``
# (adding, since cummax indices repeat), and each is the other's adjoint, so every
# derivative order, jvp and vmap follow from these two primitives.


def _pick_along_impl(x, idx, axis):
    return xp.take_along_axis(x, idx, axis=axis)


def _scatter_along_impl(g, idx, axis, shape):
    nd = len(shape)
    lin = 0
    stride = 1
    for d in range(nd - 1, -1, -1):
        coord = idx if d == axis else xp.arange(g.shape[d]).reshape((-1,) + (1,) * (nd - 1 - d))
        lin = lin + coord * stride
        stride *= shape[d]
    lin = xp.broadcast_to(lin, g.shape).reshape(-1)
    size = math.prod(shape)
    if g.dtype.kind == "f":
        flat = xp.bincount(lin, weights=g.reshape(-1), minlength=size)
        return flat.astype(g.dtype, copy=False).reshape(shape)
    out = xp.zeros(size, g.dtype)
    xp.add.at(out, lin, g.reshape(-1))
    return out.reshape(shape)


def _along_batch(prim):
    """Batching for pick_along / its scatter: batch dims to the front, unbatched args broadcast."""

    def rule(vals, bdims, axis, **params):
        size = next(v.shape[b] for v, b in zip(vals, bdims) if b is not None)
        moved = []
        for v, b in zip(vals, bdims):
            if b is None:
                shape = tuple(v.shape)
                v = TN.broadcast_to(TN.reshape(v, shape=(1,) + shape), shape=(size,) + shape)
            else:
                v = move_bdim(v, b, 0)
            moved.append(v)
        if "shape" in params:
            params["shape"] = (size,) + tuple(params["shape"])
        return bind(prim, tuple(moved), dict(params, axis=axis + 1)), 0

    return rule


pick_along_p = defprim(
    "pick_along", _pick_along_impl,
    vjp=(lambda ns, g, out, x, idx, axis: ns.pick_along_scatter(g, idx, axis=axis, shape=tuple(x.shape)), None),
    save_inputs=1,
)
pick_along_p.jvp = linear_jvp(pick_along_p)
pick_along_p.batch = _along_batch(pick_along_p)

pick_along_scatter_p = defprim(
    "pick_along_scatter", _scatter_along_impl,
    vjp=(lambda ns, g, out, gg, idx, axis, shape: ns.pick_along(g, idx, axis=axis), None),
    save_inputs=1,
)
pick_along_scatter_p.jvp = linear_jvp(pick_along_scatter_p)
pick_along_scatter_p.batch = _along_batch(pick_along_scatter_p)


# ------------------------------------------------------- max / min / argmax


argmax_p = _nondiff("argmax", lambda x, axis, keepdims: xp.argmax(x, axis=axis, keepdims=keepdims))
argmin_p = _nondiff("argmin", lambda x, axis, keepdims: xp.argmin(x, axis=axis, keepdims=keepdims))


def _arg_reduce(prim, input, dim, keepdim, op):
    input = _as_tensor(input)
    if dim is None:
        flat = TN.reshape(input, shape=(input.numel(),))
        out = bind(prim, (flat,), {"axis": 0, "keepdims": False})
        return TN.reshape(out, shape=(1,) * input.ndim) if keepdim else out
    x, axis, was_0d = _lift0d(input, dim, op)
    out = bind(prim, (x,), {"axis": axis, "keepdims": bool(keepdim)})
    return TN.reshape(out, shape=()) if was_0d else out


@tensor_method("argmax")
def argmax(input, dim=None, keepdim=False):
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
    return _arg_reduce(argmax_p, input, dim, keepdim, "argmax")


@tensor_method("argmin")
def argmin(input, dim=None, keepdim=False):
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
    return _arg_reduce(argmin_p, input, dim, keepdim, "argmin")


def _select_along(input, idx_fn, dim, keepdim, rtype, op):
    """``rtype(values, indices)`` for an index primitive call ``idx_fn(x, axis)`` (keepdims form)."""
    x, axis, was_0d = _lift0d(input, dim, op)
    if x.shape[axis] == 0:
        raise IndexError(f"{op}: expected reduction dim {dim} to have non-zero size, got shape {tuple(input.shape)}")
    idx = idx_fn(x, axis)
    vals = bind(pick_along_p, (x, idx), {"axis": axis})
    if was_0d:
        return rtype(TN.reshape(vals, shape=()), TN.reshape(idx, shape=()))
    if not keepdim:
        return rtype(_drop_axis(vals, axis), _drop_axis(idx, axis))
    return rtype(vals, idx)


def _max_min(input, dim, keepdim, other, name):
    if isinstance(dim, Tensor) or other is not None:
        from .elementwise import maximum, minimum

        return (maximum if name == "max" else minimum)(input, dim if other is None else other)
    input = _as_tensor(input)
    if dim is None:
        if input.numel() == 0:
            raise RuntimeError(f"{name}: expected a non-empty tensor, got shape {tuple(input.shape)}")
        return bind(amax_p if name == "max" else amin_p, (input,), {"axis": tuple(range(input.ndim)), "keepdims": False})
    prim = argmax_p if name == "max" else argmin_p
    return _select_along(input, lambda x, a: bind(prim, (x,), {"axis": a, "keepdims": True}), dim, keepdim,
                         getattr(return_types, name), name)


@tensor_method("max")
def max(input, dim=None, keepdim=False, *, other=None):
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
    return _max_min(input, dim, keepdim, other, "max")


@tensor_method("min")
def min(input, dim=None, keepdim=False, *, other=None):
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
    return _max_min(input, dim, keepdim, other, "min")


# ---------------------------------------------------------- cummax / cummin


def _cumarg_impl(x, axis, largest):
    # Index of the running extreme; ties and NaNs take the latest index (as PyTorch).
    run = (xp.maximum if largest else xp.minimum).accumulate(x, axis=axis)
    hit = x == run
    if x.dtype.kind == "f":
        hit |= x != x
    pos = xp.arange(x.shape[axis]).reshape((-1,) + (1,) * (x.ndim - axis - 1))
    return xp.maximum.accumulate(xp.where(hit, pos, 0), axis=axis)


cumarg_p = _nondiff("cumarg", _cumarg_impl)


@tensor_method("cummax")
def cummax(input, dim):
    """Running maximum along ``dim`` and the index where it was reached: ``(values, indices)``.

    The gradient of ``values`` accumulates at ``indices`` (as PyTorch).

    Parameters
    ----------
    input : Tensor
        The tensor.
    dim : int
        The dim to scan.

    Examples
    --------
    >>> import lucid
    >>> v, i = lucid.cummax(lucid.tensor([1.0, 3.0, 2.0]), dim=0)
    >>> v.tolist(), i.tolist()
    ([1.0, 3.0, 3.0], [0, 1, 1])
    """
    return _select_along(input, lambda x, a: bind(cumarg_p, (x,), {"axis": a, "largest": True}), dim, True,
                         return_types.cummax, "cummax")


@tensor_method("cummin")
def cummin(input, dim):
    """Running minimum along ``dim`` and its index: ``(values, indices)``.

    Parameters
    ----------
    input : Tensor
        The tensor.
    dim : int
        The dim to scan.

    Examples
    --------
    >>> import lucid
    >>> lucid.cummin(lucid.tensor([3.0, 1.0, 2.0]), 0).values.tolist()
    [3.0, 1.0, 1.0]
    """
    return _select_along(input, lambda x, a: bind(cumarg_p, (x,), {"axis": a, "largest": False}), dim, True,
                         return_types.cummin, "cummin")


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
def argsort(input, dim=-1, descending=False, stable=False):
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

    Examples
    --------
    >>> import lucid
    >>> lucid.argsort(lucid.tensor([3.0, 1.0, 2.0])).tolist()
    [1, 2, 0]
    """
    x, axis, was_0d = _lift0d(input, dim, "argsort")
    idx = bind(argsort_p, (x,), {"axis": axis, "descending": bool(descending), "k": None})
    return TN.reshape(idx, shape=()) if was_0d else idx


@tensor_method("sort")
def sort(input, dim=-1, descending=False, stable=False):
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
    input = _as_tensor(input)
    if input.ndim and input.shape[normalize_axis(dim, input.ndim, "sort")] == 0:
        return return_types.sort(input, TN.cast(input, dtype=dtypes.int64))
    fn = lambda x, a: bind(argsort_p, (x,), {"axis": a, "descending": bool(descending), "k": None})  # noqa: E731
    return _select_along(input, fn, dim, True, return_types.sort, "sort")


@tensor_method("topk")
def topk(input, k, dim=-1, largest=True, sorted=True):
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


# ------------------------------------------------------------- var / std


def _safe_sqrt_impl(x):
    return xp.sqrt(x)


# sqrt whose derivative is 0 (not inf) at 0: the subgradient PyTorch uses for std and norms.
safe_sqrt_p, _safe_sqrt = unary(
    "safe_sqrt", _safe_sqrt_impl,
    lambda ns, x, o: ns.where(o > 0, 0.5 / ns.where(o > 0, o, 1.0), 0.0),
    save_out=True, save_inputs=False,
)


def _correction(unbiased, correction, op):
    if correction is not None and unbiased is not None:
        raise RuntimeError(f"{op}: pass only one of 'unbiased' and 'correction'")
    if correction is not None:
        return correction
    return 0 if unbiased is False else 1


def _var(input, dim, unbiased, keepdim, correction, op):
    if isinstance(dim, bool):  # var(x, False): the legacy ``unbiased`` positional
        dim, unbiased = None, dim
    input = _as_tensor(input)
    if input.dtype.kind not in "fc":
        raise RuntimeError(f"{op}: input dtype must be floating point, got {input.dtype} (shape {tuple(input.shape)})")
    corr = _correction(unbiased, correction, op)
    axes = norm_axes(dim, input.ndim, op)
    n = math.prod(input.shape[a] for a in axes)
    mu = mean(input, axes, True) if n else sum(input, axes, True)
    d = input - mu
    ss = sum(d * d, axes, bool(keepdim))
    den = _py_max(n - corr, 0)
    with np.errstate(divide="ignore", invalid="ignore"):
        return ss / den if den else ss * float("inf")


@tensor_method("var")
def var(input, dim=None, unbiased=None, keepdim=False, *, correction=None):
    """Variance over ``dim`` with Bessel's ``correction`` (1 by default; ``unbiased=False`` means 0).

    Parameters
    ----------
    input : Tensor
        The tensor.
    dim : int or tuple of int, optional
        The dims to reduce (default: all).
    unbiased : bool, optional
        Old spelling of ``correction`` (True = 1).
    correction : int, optional
        Subtracted from the count (default 1).
    keepdim : bool
        Keep reduced dims with size 1.

    Examples
    --------
    >>> import lucid
    >>> lucid.var(lucid.tensor([1.0, 2.0, 3.0, 4.0])).item()
    1.6666666269302368
    """
    return _var(input, dim, unbiased, keepdim, correction, "var")


@tensor_method("std")
def std(input, dim=None, unbiased=None, keepdim=False, *, correction=None):
    """Standard deviation over ``dim`` (see :func:`var`); the gradient at zero spread is 0.

    Parameters
    ----------
    input : Tensor
        The tensor.
    dim : int or tuple of int, optional
        The dims to reduce (default: all).
    unbiased : bool, optional
        Old spelling of ``correction`` (True = 1).
    correction : int, optional
        Subtracted from the count (default 1).
    keepdim : bool
        Keep reduced dims with size 1.

    Examples
    --------
    >>> import lucid
    >>> lucid.std(lucid.tensor([1.0, 3.0]), correction=0).item()
    1.0
    """
    return _safe_sqrt(_var(input, dim, unbiased, keepdim, correction, "std"))


def var_mean(input, dim=None, unbiased=None, keepdim=False, *, correction=None):
    """``(var, mean)`` over ``dim``.

    Parameters
    ----------
    input : Tensor
        The tensor.
    dim : int or tuple of int, optional
        The dims to reduce.
    correction : int
        Subtracted from the count (1: unbiased).
    keepdim : bool
        Keep reduced dims with size 1.

    Examples
    --------
    >>> import lucid
    >>> v, m = lucid.var_mean(lucid.tensor([1.0, 3.0]))
    >>> v.item(), m.item()
    (2.0, 2.0)
    """
    if isinstance(dim, bool):
        dim, unbiased = None, dim
    return var(input, dim, unbiased, keepdim, correction=correction), mean(input, dim, keepdim)


def std_mean(input, dim=None, unbiased=None, keepdim=False, *, correction=None):
    """``(std, mean)`` over ``dim``.

    Parameters
    ----------
    input : Tensor
        The tensor.
    dim : int or tuple of int, optional
        The dims to reduce.
    correction : int
        Subtracted from the count (1: unbiased).
    keepdim : bool
        Keep reduced dims with size 1.

    Examples
    --------
    >>> import lucid
    >>> s, m = lucid.std_mean(lucid.tensor([1.0, 3.0]), correction=0)
    >>> s.item(), m.item()
    (1.0, 2.0)
    """
    if isinstance(dim, bool):
        dim, unbiased = None, dim
    return std(input, dim, unbiased, keepdim, correction=correction), mean(input, dim, keepdim)


# ------------------------------------------------------------- logsumexp


def _logsumexp_impl(x, axis, keepdims):
    # Shift by the max so exp never overflows; an infinite max (all -inf, or +inf) is not shifted.
    if x.size == 0:
        with np.errstate(divide="ignore"):
            return xp.asarray(xp.log(xp.sum(xp.exp(x), axis=axis, keepdims=keepdims)))
    m = xp.max(x, axis=axis, keepdims=True)
    m = xp.where(xp.isfinite(m), m, 0).astype(x.dtype, copy=False)
    with np.errstate(divide="ignore"):
        out = xp.log(xp.sum(xp.exp(x - m), axis=axis, keepdims=True)) + m
    return out if keepdims else xp.asarray(out.reshape(tuple(s for i, s in enumerate(out.shape) if i not in axis)))


logsumexp_p = defprim(
    "logsumexp", _logsumexp_impl,
    # d lse / dx = softmax(x) = exp(x - lse): stable, written in ns ops.
    vjp=(lambda ns, g, out, x, axis, keepdims: expand_reduced(ns, g, x.shape, axis, keepdims)
         * ns.exp(x - expand_reduced(ns, out, x.shape, axis, keepdims)),),
    jvp=lambda ns, primals, tangents, out, axis, keepdims: ns.sum(
        tangents[0] * ns.exp(primals[0] - expand_reduced(ns, out, primals[0].shape, axis, keepdims)),
        axis=axis, keepdims=keepdims),
    save_out=True,
)
logsumexp_p.batch = batch_unary_axis(logsumexp_p)


@tensor_method("logsumexp")
def logsumexp(input, dim=None, keepdim=False):
    """``log(sum(exp(input)))`` over ``dim``, computed stably (shifted by the maximum).

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
    >>> round(lucid.logsumexp(lucid.tensor([1000.0, 1000.0]), dim=0).item(), 2)
    1000.69
    """
    input = _promote_float(input)
    axes = norm_axes(dim, input.ndim, "logsumexp")
    return bind(logsumexp_p, (input,), {"axis": axes, "keepdims": bool(keepdim)})


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
    if dtype is not None:
        input = input.to(dtype)
    if input.dtype.kind not in "fc":
        raise RuntimeError(f"norm: input dtype should be floating point, got {input.dtype} (shape {tuple(input.shape)})")
    if isinstance(p, str):
        if p != "fro":
            raise RuntimeError(f"norm: p={p!r} is not supported (use 'fro' or a number)")
        p = 2
    axes = norm_axes(dim, input.ndim, "norm")
    keepdim = bool(keepdim)
    if p == 2:
        return _safe_sqrt(sum(input * input, axes, keepdim))
    from .elementwise import abs as _abs

    a = _abs(input)
    if p == math.inf:
        return amax(a, axes, keepdim) if input.numel() else sum(a, axes, keepdim)
    if p == -math.inf:
        return amin(a, axes, keepdim)
    if p == 0:
        return sum(TN.cast(input != 0, dtype=input.dtype), axes, keepdim)
    if p == 1:
        return sum(a, axes, keepdim)
    return sum(a ** p, axes, keepdim) ** (1.0 / p)


# ------------------------------------------------------ softmax / log_softmax


def _softmax_impl(x, axis):
    if x.shape[axis] == 0:
        return x.copy()
    e = xp.exp(x - xp.max(x, axis=axis, keepdims=True))
    e /= xp.sum(e, axis=axis, keepdims=True)
    return e


def _log_softmax_impl(x, axis):
    if x.shape[axis] == 0:
        return x.copy()
    s = x - xp.max(x, axis=axis, keepdims=True)
    s -= xp.log(xp.sum(xp.exp(s), axis=axis, keepdims=True))
    return s


# Primitives for stability and speed (one pass forward; the backward needs only the output).
softmax_p = defprim(
    "softmax", _softmax_impl,
    vjp=(lambda ns, g, out, x, axis: out * (g - ns.sum(g * out, axis=(axis,), keepdims=True)),),
    jvp=lambda ns, primals, tangents, out, axis:
        out * (tangents[0] - ns.sum(tangents[0] * out, axis=(axis,), keepdims=True)),
    save_out=True, save_inputs=False,
)
softmax_p.batch = batch_unary_axis(softmax_p)

log_softmax_p = defprim(
    "log_softmax", _log_softmax_impl,
    vjp=(lambda ns, g, out, x, axis: g - ns.exp(out) * ns.sum(g, axis=(axis,), keepdims=True),),
    jvp=lambda ns, primals, tangents, out, axis:
        tangents[0] - ns.sum(ns.exp(out) * tangents[0], axis=(axis,), keepdims=True),
    save_out=True, save_inputs=False,
)
log_softmax_p.batch = batch_unary_axis(log_softmax_p)


def _softmax_like(prim, input, dim, dtype, op):
    if dim is None:
        raise TypeError(f"{op}: missing required argument 'dim'")
    x, axis, was_0d = _lift0d(_float_input(input, dtype), dim, op)
    out = bind(prim, (x,), {"axis": axis})
    return TN.reshape(out, shape=()) if was_0d else out


@tensor_method("softmax")
def softmax(input, dim=None, dtype=None):
    """``exp(x) / sum(exp(x))`` along ``dim``, computed stably.

    Parameters
    ----------
    input : Tensor
        The tensor.
    dim : int
        The dim that sums to one.
    dtype : dtype, optional
        Cast the input to this dtype first.

    Examples
    --------
    >>> import lucid
    >>> lucid.softmax(lucid.tensor([0.0, 0.0]), dim=0).tolist()
    [0.5, 0.5]
    """
    return _softmax_like(softmax_p, input, dim, dtype, "softmax")


@tensor_method("log_softmax")
def log_softmax(input, dim=None, dtype=None):
    """``x - logsumexp(x)`` along ``dim``, computed stably.

    Parameters
    ----------
    input : Tensor
        The tensor.
    dim : int
        The dim that sums to one in probability space.
    dtype : dtype, optional
        Cast the input to this dtype first.

    Examples
    --------
    >>> import lucid
    >>> round(lucid.log_softmax(lucid.tensor([0.0, 0.0]), dim=0)[0].item(), 4)
    -0.6931
    """
    return _softmax_like(log_softmax_p, input, dim, dtype, "log_softmax")


# ------------------------------------------------------------- any / all

any_p = _nondiff("any", lambda x, axis, keepdims: xp.asarray(xp.any(x, axis=axis, keepdims=keepdims)))
all_p = _nondiff("all", lambda x, axis, keepdims: xp.asarray(xp.all(x, axis=axis, keepdims=keepdims)))


@tensor_method("any")
def any(input, dim=None, keepdim=False):
    """Whether any element over ``dim`` is nonzero (bool result, no gradient).

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
    input = _as_tensor(input)
    return bind(any_p, (input,), {"axis": norm_axes(dim, input.ndim, "any"), "keepdims": bool(keepdim)})


@tensor_method("all")
def all(input, dim=None, keepdim=False):
    """Whether every element over ``dim`` is nonzero (bool result, no gradient).

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
    input = _as_tensor(input)
    return bind(all_p, (input,), {"axis": norm_axes(dim, input.ndim, "all"), "keepdims": bool(keepdim)})


__all__ = ['all', 'amax', 'amin', 'any', 'argmax', 'argmin', 'argsort', 'cummax', 'cummin', 'cumprod',
           'cumsum', 'log_softmax', 'logsumexp', 'max', 'mean', 'min', 'norm', 'prod', 'return_types',
           'softmax', 'sort', 'std', 'std_mean', 'sum', 'topk', 'var', 'var_mean']
