"""Masked reductions: ``sum`` ... ``std`` of ``torch.masked``, composed from dense Lucid ops.

See NOTE [Masked functions] in ``lucid/masked/__init__.py``. Each fills the masked-out elements
with its reduction's identity (``where``, so they get a zero gradient) and reduces densely; the
masked-out slices of the result are whatever that gives (the identity, nan for mean/var/std),
as PyTorch's.
"""
from __future__ import annotations

import numbers

import lucid

from ._common import (as_dtype, canonical_dim, fill, input_mask, is_float_or_complex, reduce_dims, unwrap,
                      widened)


def sum(input, dim=None, *, keepdim=False, dtype=None, mask=None):
    """The sum of the elements of ``input`` that ``mask`` keeps, along ``dim`` (all by default).

    Parameters
    ----------
    input : Tensor or MaskedTensor
    dim : int or tuple of int, optional
        Dims to reduce; None (or ``()``) reduces all.
    keepdim : bool
        Keep the reduced dims with size 1.
    dtype : lucid.dtype, optional
        Result dtype; by default the input's, with bool and integers narrower than int64
        widened to int64.
    mask : Tensor, optional
        True where an element counts; broadcastable to ``input``. None keeps everything.

    Returns
    -------
    Tensor
        A slice whose elements are all masked out sums to 0.

    Examples
    --------
    >>> import lucid
    >>> x = lucid.tensor([[-3., -2., -1.], [0., 1., 2.]])
    >>> mask = lucid.tensor([[True, False, True], [False, False, False]])
    >>> lucid.masked.sum(x, 1, mask=mask)
    tensor([-4.,  0.])
    """
    input, mask = unwrap("sum", input, mask)
    dtype = widened(input.dtype) if dtype is None else as_dtype(dtype)
    dims = canonical_dim("sum", dim, input.ndim)
    return lucid.sum(fill("sum", "sum", input, mask), reduce_dims(dims), bool(keepdim), dtype=dtype)


def prod(input, dim=None, *, keepdim=False, dtype=None, mask=None):
    """The product of the kept elements along ``dim``; a fully masked-out slice gives 1.

    Same arguments as :func:`sum` (integers narrower than int64 widen to int64).

    Examples
    --------
    >>> import lucid
    >>> x = lucid.tensor([[-3., -2., -1.], [0., 1., 2.]])
    >>> mask = lucid.tensor([[True, False, True], [False, False, False]])
    >>> lucid.masked.prod(x, 1, mask=mask)
    tensor([3., 1.])
    """
    input, mask = unwrap("prod", input, mask)
    dtype = widened(input.dtype) if dtype is None else as_dtype(dtype)
    dims = canonical_dim("prod", dim, input.ndim)
    out = fill("prod", "prod", input, mask).to(dtype)
    for d in reversed(dims):  # one dim at a time, as PyTorch's (its prod takes one dim)
        out = lucid.prod(out, d, keepdim=bool(keepdim))
    return out


def _extremum(name, input, dim, keepdim, dtype, mask):
    input, mask = unwrap(name, input, mask)
    dtype = input.dtype if dtype is None else as_dtype(dtype)
    dims = canonical_dim(name, dim, input.ndim)
    op = lucid.amax if name == "amax" else lucid.amin
    return op(fill(name, name, input, mask), reduce_dims(dims), bool(keepdim)).to(dtype)


def amax(input, dim=None, *, keepdim=False, dtype=None, mask=None):
    """The largest kept element along ``dim``; a fully masked-out slice gives ``-inf`` (the
    dtype's minimum for integers; bool input has no identity and raises NotImplementedError).

    Same arguments as :func:`sum` (``dtype`` defaults to the input's).

    Examples
    --------
    >>> import lucid
    >>> x = lucid.tensor([[-3., -2., -1.], [0., 1., 2.]])
    >>> mask = lucid.tensor([[True, False, True], [False, False, False]])
    >>> lucid.masked.amax(x, 1, mask=mask)
    tensor([ -1., -inf])
    """
    return _extremum("amax", input, dim, keepdim, dtype, mask)


def amin(input, dim=None, *, keepdim=False, dtype=None, mask=None):
    """The smallest kept element along ``dim``; a fully masked-out slice gives ``inf`` (the
    dtype's maximum for integers).

    Same arguments as :func:`amax`.

    Examples
    --------
    >>> import lucid
    >>> x = lucid.tensor([[-3., -2., -1.], [0., 1., 2.]])
    >>> mask = lucid.tensor([[True, False, True], [False, False, False]])
    >>> lucid.masked.amin(x, 1, mask=mask)
    tensor([-3., inf])
    """
    return _extremum("amin", input, dim, keepdim, dtype, mask)


def _arg(name, input, dim, keepdim, dtype, mask):
    input, mask = unwrap(name, input, mask)
    if input.dtype == lucid.bool:  # the indices would be bools. PyTorch raises RuntimeError, or with a
        # mask NotImplementedError (no identity for bools), which is a RuntimeError too
        raise NotImplementedError(f"{name}(): does not support bool input")
    dtype = input.dtype if dtype is None else as_dtype(dtype)
    if dim is not None:
        dim = canonical_dim(name, dim, input.ndim)[0] if input.ndim else None
    op = lucid.argmax if name == "argmax" else lucid.argmin
    return op(fill(name, name, input, mask), dim, bool(keepdim)).to(dtype)


def argmax(input, dim=None, *, keepdim=False, dtype=None, mask=None):
    """The index of the largest kept element along ``dim`` (of the flattened input for None).

    As PyTorch's, the indices come in ``dtype``, which defaults to the *input's* dtype; a
    fully masked-out slice gives index 0.

    Examples
    --------
    >>> import lucid
    >>> x = lucid.tensor([[-3., -2., -1.], [0., 1., 2.]])
    >>> mask = lucid.tensor([[True, False, True], [False, True, False]])
    >>> lucid.masked.argmax(x, 1, mask=mask)
    tensor([2., 1.])
    """
    return _arg("argmax", input, dim, keepdim, dtype, mask)


def argmin(input, dim=None, *, keepdim=False, dtype=None, mask=None):
    """The index of the smallest kept element along ``dim``; see :func:`argmax`.

    Examples
    --------
    >>> import lucid
    >>> x = lucid.tensor([[-3., -2., -1.], [0., 1., 2.]])
    >>> mask = lucid.tensor([[False, True, True], [False, True, False]])
    >>> lucid.masked.argmin(x, 1, mask=mask, dtype=lucid.int64)
    tensor([1, 1])
    """
    return _arg("argmin", input, dim, keepdim, dtype, mask)


def _count(input, mask, dims, keepdim):
    """How many elements each slice keeps (int64)."""
    if mask is None:
        return lucid.sum(lucid.ones(input.shape, dtype=lucid.int64, device=input.device), reduce_dims(dims),
                         keepdim)
    return lucid.sum(mask, reduce_dims(dims), keepdim)


def mean(input, dim=None, *, keepdim=False, dtype=None, mask=None):
    """The mean of the kept elements along ``dim``; a fully masked-out slice gives nan.

    The input (or ``dtype``) must be floating point or complex: PyTorch raises ValueError
    for integers.

    Examples
    --------
    >>> import lucid
    >>> x = lucid.tensor([[-3., -2., -1.], [0., 1., 2.]])
    >>> mask = lucid.tensor([[True, False, True], [False, False, False]])
    >>> lucid.masked.mean(x, 1, mask=mask)
    tensor([-2., nan])
    """
    input, mask = unwrap("mean", input, mask)
    source = "Input" if dtype is None else "Optional"
    dtype = input.dtype if dtype is None else as_dtype(dtype)
    if not is_float_or_complex(dtype):
        raise ValueError(f"mean(): Could not infer output dtype. {source} dtype must be either a floating point "
                         f"or complex dtype. Got: {dtype}")
    dims = canonical_dim("mean", dim, input.ndim)
    if mask is not None:
        mask = input_mask("mean", input, mask)
    total = sum(input, dim, keepdim=keepdim, dtype=dtype, mask=mask)
    return total / _count(input, mask, dims, bool(keepdim))


def median(input, dim=-1, *, keepdim=False, dtype=None, mask=None):
    """The median (the lower of the two middle values) of the kept elements along one ``dim``.

    Computed as ``nanmedian`` with the masked-out elements made nan, so nan elements of the
    input are ignored too and a fully masked-out slice gives nan. For an integer input the
    result is cast to ``dtype`` (the input's by default), which needs every slice to keep an
    element (ValueError otherwise); a floating input keeps its dtype.

    Examples
    --------
    >>> import lucid
    >>> x = lucid.tensor([[3., 1., 2., 5.], [0., 1., 2., 3.]])
    >>> mask = lucid.tensor([[True, True, True, False], [False, False, False, False]])
    >>> lucid.masked.median(x, 1, mask=mask)
    tensor([ 2., nan])
    """
    input, mask = unwrap("median", input, mask)
    dtype = input.dtype if dtype is None else as_dtype(dtype)
    d = canonical_dim("median", dim, input.ndim)[0] if input.ndim else 0
    floating = input.dtype.is_floating_point
    if not floating:
        input = input.to(lucid.float32)
    out = lucid.nanmedian(fill("median", "median", input, mask), d, bool(keepdim))[0]
    if floating:
        return out
    if bool(lucid.isnan(out).any().item()):
        raise ValueError("median: masked median expects no fully masked out rows if dtype is not floating point")
    return out.to(dtype)


def logsumexp(input, dim=None, *, keepdim=False, dtype=None, mask=None):
    """``log(sum(exp(x)))`` over the kept elements along ``dim``; a fully masked-out slice gives
    ``-inf``.

    Examples
    --------
    >>> import lucid
    >>> x = lucid.tensor([[0., 1., 2.], [0., 1., 2.]])
    >>> mask = lucid.tensor([[True, True, False], [False, False, False]])
    >>> lucid.masked.logsumexp(x, 1, mask=mask)
    tensor([1.3132616,      -inf])
    """
    input, mask = unwrap("logsumexp", input, mask)
    dtype = input.dtype if dtype is None else as_dtype(dtype)
    dims = canonical_dim("logsumexp", dim, input.ndim)
    out = lucid.logsumexp(fill("logsumexp", "logsumexp", input, mask), reduce_dims(dims), keepdim=bool(keepdim))
    return out.to(dtype)


def norm(input, ord=2.0, dim=None, *, keepdim=False, dtype=None, mask=None):
    """The vector ``ord``-norm of the kept elements along ``dim`` (``linalg.vector_norm``).

    Masked-out elements count as 0 (as ``inf`` for ``ord=-inf``), so a fully masked-out slice
    gives 0 (``inf``). The input must be floating point or complex.

    Examples
    --------
    >>> import lucid
    >>> x = lucid.tensor([[3., 5., 4.], [1., 1., 1.]])
    >>> mask = lucid.tensor([[True, False, True], [False, False, False]])
    >>> lucid.masked.norm(x, 2.0, 1, mask=mask)
    tensor([5., 0.])
    """
    input, mask = unwrap("norm", input, mask)
    if not is_float_or_complex(input.dtype):
        raise RuntimeError(f"norm: expected a floating point or complex tensor as input, got {input.dtype}")
    ord = 2.0 if ord is None else ord
    if not isinstance(ord, numbers.Real):  # a dim given as ord: PyTorch's argument parser refuses it
        raise TypeError(f"norm: argument 'ord' must be a number, not {type(ord).__name__}")
    dtype = input.dtype if dtype is None else as_dtype(dtype)
    dims = canonical_dim("norm", dim, input.ndim)
    x = fill("norm", "norm", input, mask, ord=ord)
    return lucid.linalg.vector_norm(x, ord, reduce_dims(dims), bool(keepdim), dtype=dtype)


def _std_var(name, input, dim, unbiased, correction, keepdim, dtype, mask, take_sqrt):
    if unbiased is not None and correction is not None:
        raise AssertionError(f"{name}: only one of unbiased and correction may be given")
    correction = (1.0 if unbiased is None or unbiased else 0.0) if correction is None else float(correction)
    input, mask = unwrap(name, input, mask)
    if dtype is None:
        dtype = input.dtype if is_float_or_complex(input.dtype) else lucid.float32
    dtype = as_dtype(dtype)
    compute = dtype if is_float_or_complex(dtype) else lucid.float32
    dims = canonical_dim(name, dim, input.ndim)
    if mask is not None:
        mask = input_mask(name, input, mask)
    count = _count(input, mask, dims, True)
    x = input - sum(input, dim, keepdim=True, dtype=dtype, mask=mask) / count
    total = sum(x * x.conj(), dim, keepdim=keepdim, dtype=compute, mask=mask)
    if not keepdim:
        count = count.reshape(total.shape)
    if correction != 0:
        count = count.to(compute.to_real() if compute.is_complex else compute) - correction
        count = lucid.clamp(count, min=0)
    out = (total / count).to(dtype)
    return lucid.sqrt(out) if take_sqrt else out


def var(input, dim=None, unbiased=None, *, correction=None, keepdim=False, dtype=None, mask=None):
    """The variance of the kept elements along ``dim``, divided by ``count - correction``.

    ``unbiased`` (True: correction 1, False: 0) and ``correction`` (default 1) are exclusive.
    The divisor is clamped at 0, so a slice keeping ``<= correction`` elements gives inf or nan
    (nan when fully masked out). Integer inputs give float32.

    Examples
    --------
    >>> import lucid
    >>> x = lucid.tensor([[1., 5., 3.], [2., 2., 2.]])
    >>> mask = lucid.tensor([[True, False, True], [True, False, False]])
    >>> lucid.masked.var(x, 1, mask=mask)
    tensor([ 2., nan])
    >>> lucid.masked.var(x, 1, correction=0, mask=mask)
    tensor([1., 0.])
    """
    return _std_var("var", input, dim, unbiased, correction, keepdim, dtype, mask, False)


def std(input, dim=None, unbiased=None, *, correction=None, keepdim=False, dtype=None, mask=None):
    """The standard deviation of the kept elements along ``dim`` (the square root of :func:`var`).

    Examples
    --------
    >>> import lucid
    >>> x = lucid.tensor([[1., 5., 3.], [2., 2., 2.]])
    >>> mask = lucid.tensor([[True, True, False], [False, False, False]])
    >>> lucid.masked.std(x, 1, mask=mask)
    tensor([2.828427,      nan])
    """
    return _std_var("std", input, dim, unbiased, correction, keepdim, dtype, mask, True)

