"""Moments: var, std, var_mean, std_mean.
"""
from __future__ import annotations

import math

import numpy as np

from ..._core import dtypes
from ..._core.tensor import tensor_method
from .._family import _as_tensor
from ..elementwise.arithmetic import _F16, _F32, _is_bf16, _is_half, cast as _cast
from ._common import _py_max, _safe_sqrt, all_dims_if_empty, norm_axes
from .sums import mean, sum
from ..numpy_aliases import numpy_axis, numpy_keepdims


# ------------------------------------------------------------- var / std


class _ArgumentError(RuntimeError, TypeError):
    """Both ``unbiased`` and ``correction``: PyTorch's argument parser raises TypeError; Lucid
    raised RuntimeError, so the error is both."""


def _correction(unbiased, correction, op):
    if correction is not None and unbiased is not None:
        raise _ArgumentError(f"{op}: pass only one of 'unbiased' and 'correction'")
    if correction is not None:
        return correction
    return 0 if unbiased is False else 1


def _abs2(d):
    """``|d|^2``: real, also for complex d (the variance of a complex tensor is real, as in PyTorch)."""
    if d.dtype.kind != "c":
        return d * d
    from ..complex import imag, real

    re, im = real(d), imag(d)
    return re * re + im * im


def _var(input, dim, unbiased, keepdim, correction, op):
    if isinstance(dim, bool):  # var(x, False): the legacy ``unbiased`` positional
        dim, unbiased = None, dim
    input = _as_tensor(input)
    if input.dtype.kind not in "fc":
        raise RuntimeError(f"{op}: input dtype must be floating point, got {input.dtype} (shape {tuple(input.shape)})")
    corr = _correction(unbiased, correction, op)
    axes = norm_axes(all_dims_if_empty(dim), input.ndim, op)
    n = math.prod(input.shape[a] for a in axes)
    mu = mean(input, axes, True) if n else sum(input, axes, True)
    d = input - mu
    ss = sum(_abs2(d), axes, bool(keepdim))
    den = _py_max(n - corr, 0)
    if n - corr <= 0:
        import warnings

        warnings.warn(f"{op}(): degrees of freedom is <= 0. Correction should be strictly less than the reduction "
                      "factor (input numel divided by output numel).", UserWarning, stacklevel=3)
    if not n:  # an empty reduction: NaN (whatever the correction) with a zero tangent, as PyTorch
        return ss + float("nan")
    with np.errstate(divide="ignore", invalid="ignore"):
        return ss / den if den else ss * float("inf")


@tensor_method("var")
def var(input, dim=None, unbiased=None, keepdim=False, *, correction=None, axis=None, keepdims=None):
    """Variance over ``dim`` with Bessel's ``correction`` (1 by default; ``unbiased=False`` means 0).

    The variance of an empty reduction is NaN with a zero tangent, as PyTorch's.

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
    if axis is not None:  # See NOTE [NumPy keyword aliases]
        dim = numpy_axis("var", dim, axis, None)
    if keepdims is not None:
        keepdim = numpy_keepdims("var", keepdim, keepdims)
    if _is_half(input) or _is_bf16(input):  # PyTorch accumulates float16 (and bfloat16) in float32 and rounds
        low = _F16 if _is_half(input) else dtypes.BF16  # once (NOTE [Half opmath], NOTE [bfloat16])
        return _cast(var(_cast(input, _F32), dim, unbiased, keepdim, correction=correction), low)
    return _var(input, dim, unbiased, keepdim, correction, "var")


@tensor_method("std")
def std(input, dim=None, unbiased=None, keepdim=False, *, correction=None, axis=None, keepdims=None):
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
    if axis is not None:  # See NOTE [NumPy keyword aliases]
        dim = numpy_axis("std", dim, axis, None)
    if keepdims is not None:
        keepdim = numpy_keepdims("std", keepdim, keepdims)
    if _is_half(input) or _is_bf16(input):  # See var
        low = _F16 if _is_half(input) else dtypes.BF16
        return _cast(std(_cast(input, _F32), dim, unbiased, keepdim, correction=correction), low)
    return _safe_sqrt(_var(input, dim, unbiased, keepdim, correction, "std"))


def var_mean(input, dim=None, unbiased=None, keepdim=False, *, correction=None, axis=None, keepdims=None):
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
    if axis is not None:  # See NOTE [NumPy keyword aliases]
        dim = numpy_axis("var_mean", dim, axis, None)
    if keepdims is not None:
        keepdim = numpy_keepdims("var_mean", keepdim, keepdims)
    if isinstance(dim, bool):
        dim, unbiased = None, dim
    return var(input, dim, unbiased, keepdim, correction=correction), mean(input, dim, keepdim)


def std_mean(input, dim=None, unbiased=None, keepdim=False, *, correction=None, axis=None, keepdims=None):
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
    if axis is not None:  # See NOTE [NumPy keyword aliases]
        dim = numpy_axis("std_mean", dim, axis, None)
    if keepdims is not None:
        keepdim = numpy_keepdims("std_mean", keepdim, keepdims)
    if isinstance(dim, bool):
        dim, unbiased = None, dim
    return std(input, dim, unbiased, keepdim, correction=correction), mean(input, dim, keepdim)


__all__ = ['std', 'std_mean', 'var', 'var_mean']
