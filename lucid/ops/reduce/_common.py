"""Shared pieces of the reductions: axis normalisation, named (values, indices) results, and
``pick_along`` (NOTE [Selecting values by index]).
"""
from __future__ import annotations

import builtins
import collections
import math


from ..._core.backend import add_at, namespace_of, xp
from ..._core.primitive import TN, bind, defprim
from .._family import (_as_tensor, _promote_float, batch_unary_axis, linear_jvp, move_bdim, normalize_axis,
                      unary)


_py_any, _py_all, _py_max, _py_min = builtins.any, builtins.all, builtins.max, builtins.min


class EmptyReductionError(RuntimeError, IndexError):
    """A reduction with no identity over an empty dim (amax, argmax, aminmax, kthvalue, median ...).

    PyTorch raises IndexError when the empty dim is named and RuntimeError when the whole
    tensor is reduced; this class is both, so either ``except`` clause catches it.

    Examples
    --------
    >>> import lucid
    >>> try:
    ...     lucid.amax(lucid.zeros(2, 0), dim=1)
    ... except IndexError as e:
    ...     print(type(e).__name__)
    EmptyReductionError
    """


def all_dims_if_empty(dim):
    """``dim=()`` (or ``[]``) reduces every dim, as PyTorch's sum/mean/var/norm/logsumexp read it."""
    return None if isinstance(dim, (tuple, list)) and not dim else dim


def norm_axes(dim, nd, op):
    """``dim`` argument (None, int or sequence) as a sorted tuple of non-negative axes."""
    if dim is None:
        return tuple(range(nd))
    dims = (dim,) if isinstance(dim, int) else tuple(dim)
    axes = tuple(sorted({normalize_axis(d, nd, op) for d in dims}))
    if len(axes) != len(dims):  # 0-d too: dim (0, -1) names its one dim twice, as PyTorch says
        raise RuntimeError(f"{op}: dim {dim} appears multiple times in the list of dims")
    if nd == 0:  # a 0-d tensor accepts dim 0 / -1 and has nothing to reduce
        return ()
    return axes


def keep_shape(shape, axis):
    """``shape`` with the reduced ``axis`` kept as size 1."""
    return tuple(1 if i in axis else s for i, s in enumerate(shape))


def expand_reduced(ns, g, shape, axis, keepdims):
    """Reshape a reduction's output (or cotangent) so it broadcasts against the input."""
    if not keepdims:
        g = ns.reshape(g, shape=keep_shape(shape, axis))
    return g


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
        coord = idx if d == axis else namespace_of(idx).arange(g.shape[d]).reshape((-1,) + (1,) * (nd - 1 - d))
        lin = lin + coord * stride
        stride *= shape[d]
    lin = xp.broadcast_to(lin, g.shape).reshape(-1)
    size = math.prod(shape)
    if g.dtype.kind == "f":
        flat = xp.bincount(lin, weights=g.reshape(-1), minlength=size)
        return flat.astype(g.dtype, copy=False).reshape(shape)
    out = xp.zeros(size, g.dtype)
    add_at(out, lin, g.reshape(-1))
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


def _safe_sqrt_impl(x):
    return xp.sqrt(x)


# sqrt whose derivative is 0 (not inf) at 0: the subgradient PyTorch uses for std and norms.
# The test is ``o != 0`` so a NaN output (the std of nothing) keeps a NaN derivative, as PyTorch's.
safe_sqrt_p, _safe_sqrt = unary(
    "safe_sqrt", _safe_sqrt_impl,
    lambda ns, x, o: ns.where(o != 0, 0.5 / ns.where(o != 0, o, 1.0), 0.0),
    save_out=True, save_inputs=False,
)


__all__ = ['return_types']
