"""Reductions in the log domain: logsumexp, softmax, log_softmax.
"""
from __future__ import annotations

from ..._core.backend import xp
from ..._core.primitive import TN, bind, defprim
from ..._core.tensor import tensor_method
from .._family import _promote_float, batch_unary_axis, conj_if_complex, quiet
from ..elementwise._half import F16, F32, round_rule
from ._common import _float_input, _lift0d, all_dims_if_empty, expand_reduced, norm_axes
from ..numpy_aliases import numpy_axis, numpy_keepdims


# ------------------------------------------------------------- logsumexp


def _logsumexp_impl(x, axis, keepdims):
    # Shift by the max so exp never overflows; an infinite max (all -inf, or +inf) is not shifted.
    # Runs quiet (log(0) is -inf). See NOTE [Silent floating-point errors].
    if x.size == 0:
        return xp.asarray(xp.log(xp.sum(xp.exp(x), axis=axis, keepdims=keepdims)))
    # A complex x is shifted by its largest real part (a real shift, as PyTorch): the imaginary
    # part of the result is then the principal arg of the sum, in (-pi, pi].
    re = x.real if x.dtype.kind == "c" else x
    m = xp.max(re, axis=axis, keepdims=True)
    m = xp.where(xp.isfinite(m), m, 0).astype(re.dtype, copy=False)
    out = xp.log(xp.sum(xp.exp(x - m), axis=axis, keepdims=True)) + m
    return out if keepdims else xp.asarray(out.reshape(tuple(s for i, s in enumerate(out.shape) if i not in axis)))


logsumexp_p = defprim(
    "logsumexp", quiet(_logsumexp_impl, 1),
    # d lse / dx = softmax(x) = exp(x - lse): stable, written in ns ops; conjugated for a
    # complex x (NOTE [Holomorphic vjp]).
    vjp=(lambda ns, g, out, x, axis, keepdims: expand_reduced(ns, g, x.shape, axis, keepdims)
         * conj_if_complex(ns, ns.exp(x - expand_reduced(ns, out, x.shape, axis, keepdims))),),
    jvp=lambda ns, primals, tangents, out, axis, keepdims: ns.sum(
        tangents[0] * ns.exp(primals[0] - expand_reduced(ns, out, primals[0].shape, axis, keepdims)),
        axis=axis, keepdims=keepdims),
    save_out=True,
)
logsumexp_p.batch = batch_unary_axis(logsumexp_p)


@tensor_method("logsumexp")
def logsumexp(input, dim=None, keepdim=False, *, axis=None, keepdims=None):
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
    if axis is not None:  # See NOTE [NumPy keyword aliases]
        dim = numpy_axis("logsumexp", dim, axis, None)
    if keepdims is not None:
        keepdim = numpy_keepdims("logsumexp", keepdim, keepdims)
    input = _promote_float(input)
    axes = norm_axes(all_dims_if_empty(dim), input.ndim, "logsumexp")
    return bind(logsumexp_p, (input,), {"axis": axes, "keepdims": bool(keepdim)})


# ------------------------------------------------------ softmax / log_softmax


# An all -inf row gives nan (-inf - -inf), as in PyTorch; quiet, as every op here. See NOTE
# [Silent floating-point errors].
def _softmax_impl(x, axis):
    if x.shape[axis] == 0:
        return x.copy()
    if x.dtype == F16:  # in float32, rounded once (NOTE [Half primitives])
        e = xp.exp(_up(x) - xp.max(_up(x), axis=axis, keepdims=True))
        s = xp.sum(e, axis=axis, keepdims=True)
        if axis != x.ndim - 1:  # PyTorch's kernel over an inner dim keeps exp(x - max) in float16
            e = e.astype(F16).astype(F32)
        return (e / s).astype(F16)
    e = xp.exp(x - xp.max(x, axis=axis, keepdims=True))
    e /= xp.sum(e, axis=axis, keepdims=True)
    return e


def _up(x):
    return x.astype(F32)


def _log_softmax_impl(x, axis):
    if x.shape[axis] == 0:
        return x.copy()
    if x.dtype == F16:  # See NOTE [Half primitives]
        return _log_softmax_impl(x.astype(F32), axis).astype(F16)
    s = x - xp.max(x, axis=axis, keepdims=True)
    s -= xp.log(xp.sum(xp.exp(s), axis=axis, keepdims=True))
    return s


# Primitives for stability and speed (one pass forward; the backward needs only the output).
def _softmax_grad(ns, g, out, axis):
    return out * (g - ns.sum(g * out, axis=(axis,), keepdims=True))


def _log_softmax_grad(ns, g, out, axis):
    return g - ns.exp(out) * ns.sum(g, axis=(axis,), keepdims=True)


def _log_softmax_jvp(ns, t, out, axis):
    return t - ns.sum(ns.exp(out) * t, axis=(axis,), keepdims=True)


def _fused(grad):
    """``grad(ns, g, out, axis)``; for float16, PyTorch's backward kernel: the float16 output
    and cotangent read in float32, the result rounded once (NOTE [Half primitives])."""
    def rule(ns, g, out, axis):
        if g.dtype == F16:
            return round_rule(ns, lambda g, out: grad(ns, g, out, axis), g, out)
        return grad(ns, g, out, axis)

    return rule


_softmax_rule, _log_softmax_rule = _fused(_softmax_grad), _fused(_log_softmax_grad)
_log_softmax_jvp_rule = _fused(_log_softmax_jvp)
softmax_p = defprim(
    "softmax", quiet(_softmax_impl, 1),
    vjp=(lambda ns, g, out, x, axis: _softmax_rule(ns, g, out, axis),),
    jvp=lambda ns, primals, tangents, out, axis: _softmax_rule(ns, tangents[0], out, axis),
    save_out=True, save_inputs=False,
)
softmax_p.batch = batch_unary_axis(softmax_p)

log_softmax_p = defprim(
    "log_softmax", quiet(_log_softmax_impl, 1),
    vjp=(lambda ns, g, out, x, axis: _log_softmax_rule(ns, g, out, axis),),
    jvp=lambda ns, primals, tangents, out, axis: _log_softmax_jvp_rule(ns, tangents[0], out, axis),
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
def softmax(input, dim=None, dtype=None, *, axis=None):
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
    if axis is not None:  # See NOTE [NumPy keyword aliases]
        dim = numpy_axis("softmax", dim, axis, None)
    return _softmax_like(softmax_p, input, dim, dtype, "softmax")


@tensor_method("log_softmax")
def log_softmax(input, dim=None, dtype=None, *, axis=None):
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
    if axis is not None:  # See NOTE [NumPy keyword aliases]
        dim = numpy_axis("log_softmax", dim, axis, None)
    return _softmax_like(log_softmax_p, input, dim, dtype, "log_softmax")


__all__ = ['log_softmax', 'logsumexp', 'softmax']
