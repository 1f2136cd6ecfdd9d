"""Cumulative ops: cumsum, cumprod, cummax, cummin.
"""
from __future__ import annotations

from ..._core import dtypes
from ..._core.backend import namespace_of, running_extreme, xp
from ..._core.primitive import TN, bind, defprim
from ..._core.tensor import tensor_method
from ..elementwise._half import F16, F32
from .._family import _as_tensor, batch_unary_axis, conj_if_complex, linear_jvp, quiet
from ._common import _lift0d, _linear_scan, _nondiff, _shift, return_types
from .extrema import _select_along
from ..numpy_aliases import REQUIRED, numpy_axis


# ----------------------------------------------------------- cumsum / cumprod


def _cum_impl(fn):
    def impl(x, axis, reverse):
        if x.dtype == F16:  # accumulated in float32, each output rounded once. See NOTE [Half primitives]
            return impl(x.astype(F32), axis, reverse).astype(F16)
        if not reverse:
            return fn(x, axis=axis)
        return xp.flip(fn(xp.flip(x, axis), axis=axis), axis)

    return impl


cumsum_p = defprim(
    "cumsum", quiet(_cum_impl(xp.cumsum), 1),
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
    excl = conj_if_complex(ns, _shift(ns, out, s, axis, 1))  # complex: conj'd partials (NOTE [Holomorphic vjp])
    return excl * _linear_scan(ns, conj_if_complex(ns, _shift(ns, x, -s, axis, 0)), g, axis, not reverse)


def _cumprod_jvp(ns, primals, tangents, out, axis, reverse):
    # t_out[k] = x[k] t_out[k - 1] + t[k] * excl[k].
    excl = _shift(ns, out, -1 if reverse else 1, axis, 1)
    return _linear_scan(ns, primals[0], tangents[0] * excl, axis, reverse)


cumprod_p = defprim("cumprod", quiet(_cum_impl(xp.cumprod), 1), vjp=(_cumprod_vjp,), jvp=_cumprod_jvp, save_out=True)
cumprod_p.batch = batch_unary_axis(cumprod_p)


def _cumulative(prim, input, dim, dtype, op):
    input = _as_tensor(input)
    if dtype is not None:
        input = input.to(dtype)
    elif input.dtype.kind in "biu":
        input = input.to(dtypes.int64)
    x, axis, was_0d = _lift0d(input, dim, op)
    out = bind(prim, (x,), {"axis": axis, "reverse": False})
    if out.dtype != x.dtype and x.dtype.kind in "biu":  # NumPy scans int32/bool in int64; PyTorch
        # keeps the (requested) dtype. (A float result stays as bind made it: autocast runs scans in float32.)
        out = TN.cast(out, dtype=x.dtype)
    return TN.reshape(out, shape=()) if was_0d else out


@tensor_method("cumsum")
def cumsum(input, dim=REQUIRED, *, dtype=None, axis=None):
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
    if axis is not None or dim is REQUIRED:  # See NOTE [NumPy keyword aliases]
        dim = numpy_axis("cumsum", dim, axis, REQUIRED)
    return _cumulative(cumsum_p, input, dim, dtype, "cumsum")


@tensor_method("cumprod")
def cumprod(input, dim=REQUIRED, *, dtype=None, axis=None):
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
    if axis is not None or dim is REQUIRED:  # See NOTE [NumPy keyword aliases]
        dim = numpy_axis("cumprod", dim, axis, REQUIRED)
    return _cumulative(cumprod_p, input, dim, dtype, "cumprod")


# ---------------------------------------------------------- cummax / cummin


def _cumarg_impl(x, axis, largest):
    # Index of the running extreme; ties and NaNs take the latest index (as PyTorch).
    run = running_extreme(x, axis, largest)
    hit = x == run
    if x.dtype.kind == "f":
        hit |= x != x
    pos = namespace_of(x).arange(x.shape[axis]).reshape((-1,) + (1,) * (x.ndim - axis - 1))
    return running_extreme(xp.where(hit, pos, 0), axis, largest=True)


cumarg_p = _nondiff("cumarg", _cumarg_impl)


@tensor_method("cummax")
def cummax(input, dim=REQUIRED, *, axis=None):
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
    if axis is not None or dim is REQUIRED:  # See NOTE [NumPy keyword aliases]
        dim = numpy_axis("cummax", dim, axis, REQUIRED)
    return _select_along(input, lambda x, a: bind(cumarg_p, (x,), {"axis": a, "largest": True}), dim, True,
                         return_types.cummax, "cummax", scan=True)


@tensor_method("cummin")
def cummin(input, dim=REQUIRED, *, axis=None):
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
    if axis is not None or dim is REQUIRED:  # See NOTE [NumPy keyword aliases]
        dim = numpy_axis("cummin", dim, axis, REQUIRED)
    return _select_along(input, lambda x, a: bind(cumarg_p, (x,), {"axis": a, "largest": False}), dim, True,
                         return_types.cummin, "cummin", scan=True)


__all__ = ['cummax', 'cummin', 'cumprod', 'cumsum']
