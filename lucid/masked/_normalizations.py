"""Masked scans and normalizations (``cumsum`` ... ``normalize``) and ``logaddexp``.

See NOTE [Masked functions] in ``lucid/masked/__init__.py``. The result has the input's shape;
its masked-out elements hold what the dense op gives on the identity-filled input (0 for
``softmax``, ``-inf`` for ``log_softmax``, the running value for scans), and a fully masked-out
softmax slice is nan, as PyTorch's.
"""
from __future__ import annotations

import lucid

from ._common import as_dtype, canonical_dim, fill, is_float_or_complex, unwrap
from ._reductions import norm


def _one_dim(name, dim, ndim):
    return canonical_dim(name, dim, ndim)[0] if ndim else 0


def _scan(name, op, identity_op, input, dim, dtype, mask):
    input, mask = unwrap(name, input, mask)
    dtype = input.dtype if dtype is None else as_dtype(dtype)
    if dtype == lucid.bool:  # PyTorch has no bool scan kernel
        raise NotImplementedError(f"{name}: not implemented for bool results; pass dtype=lucid.int64")
    d = _one_dim(name, dim, input.ndim)
    return op(fill(name, identity_op, input, mask), d, dtype=dtype).to(dtype)


def cumsum(input, dim, *, dtype=None, mask=None):
    """The running sum along ``dim`` counting only the kept elements (masked-out ones add 0).

    ``dtype`` defaults to the input's (no widening, as PyTorch's masked cumsum).

    Examples
    --------
    >>> import lucid
    >>> x = lucid.tensor([[-3., -2., -1.], [0., 1., 2.]])
    >>> mask = lucid.tensor([[True, False, True], [False, False, False]])
    >>> lucid.masked.cumsum(x, 1, mask=mask)
    tensor([[-3., -3., -4.],
            [ 0.,  0.,  0.]])
    """
    return _scan("cumsum", lucid.cumsum, "sum", input, dim, dtype, mask)


def cumprod(input, dim, *, dtype=None, mask=None):
    """The running product along ``dim`` of the kept elements (masked-out ones multiply by 1).

    Examples
    --------
    >>> import lucid
    >>> x = lucid.tensor([[-3., -2., -1.], [0., 1., 2.]])
    >>> mask = lucid.tensor([[True, False, True], [False, False, False]])
    >>> lucid.masked.cumprod(x, 1, mask=mask)
    tensor([[-3., -3.,  3.],
            [ 1.,  1.,  1.]])
    """
    return _scan("cumprod", lucid.cumprod, "prod", input, dim, dtype, mask)


def _soft(name, identity_op, f, input, dim, dtype, mask):
    input, mask = unwrap(name, input, mask)
    dtype = input.dtype if dtype is None else as_dtype(dtype)
    if not is_float_or_complex(dtype):
        raise NotImplementedError(f"{name}: not implemented for {dtype} results; pass a floating point dtype")
    d = _one_dim(name, dim, input.ndim)
    return f(fill(name, identity_op, input, mask), d, dtype=dtype)


def softmax(input, dim, *, dtype=None, mask=None):
    """Softmax along ``dim`` over the kept elements: masked-out elements get 0, and a slice with
    nothing kept is nan.

    Examples
    --------
    >>> import lucid
    >>> x = lucid.tensor([[-3., -2., -1.], [0., 1., 2.]])
    >>> mask = lucid.tensor([[True, False, True], [False, False, False]])
    >>> lucid.masked.softmax(x, 1, mask=mask)
    tensor([[0.11920292, 0.        , 0.880797  ],
            [       nan,        nan,        nan]])
    """
    return _soft("softmax", "amax", lucid.nn.functional.softmax, input, dim, dtype, mask)


def log_softmax(input, dim, *, dtype=None, mask=None):
    """Log-softmax along ``dim`` over the kept elements: masked-out elements get ``-inf``.

    Examples
    --------
    >>> import lucid
    >>> x = lucid.tensor([[-3., -2., -1.], [0., 1., 2.]])
    >>> mask = lucid.tensor([[True, False, True], [True, True, True]])
    >>> lucid.masked.log_softmax(x, 1, mask=mask)
    tensor([[-2.126928  ,        -inf, -0.12692805],
            [-2.4076061 , -1.407606  , -0.407606  ]])
    """
    return _soft("log_softmax", "amax", lucid.nn.functional.log_softmax, input, dim, dtype, mask)


def softmin(input, dim, *, dtype=None, mask=None):
    """Softmin (softmax of ``-input``) along ``dim`` over the kept elements.

    Examples
    --------
    >>> import lucid
    >>> x = lucid.tensor([[-3., -2., -1.], [0., 1., 2.]])
    >>> mask = lucid.tensor([[True, False, True], [False, False, False]])
    >>> lucid.masked.softmin(x, 1, mask=mask)
    tensor([[0.880797  , 0.        , 0.11920292],
            [       nan,        nan,        nan]])
    """
    return _soft("softmin", "amin", lucid.nn.functional.softmin, input, dim, dtype, mask)


def normalize(input, ord, dim, *, eps=1e-12, dtype=None, mask=None):
    """``input / max(norm, eps)`` with the ``ord``-norm of the kept elements along ``dim``;
    masked-out elements give 0.

    Examples
    --------
    >>> import lucid
    >>> x = lucid.tensor([[3., 5., 4.], [1., 1., 1.]])
    >>> mask = lucid.tensor([[True, False, True], [False, False, False]])
    >>> lucid.masked.normalize(x, 2.0, 1, mask=mask)
    tensor([[0.6, 0. , 0.8],
            [0. , 0. , 0. ]])
    """
    data, own = unwrap("normalize", input, mask)
    dtype = data.dtype if dtype is None else as_dtype(dtype)
    d = _one_dim("normalize", dim, data.ndim)
    nrm = norm(data, ord, d, keepdim=True, dtype=dtype, mask=own)
    denom = lucid.maximum(nrm, lucid.tensor(eps, dtype=nrm.dtype, device=nrm.device))
    return fill("normalize", "sum", data, own) / denom


def logaddexp(input, other, *, dtype=None, input_mask=None, other_mask=None):
    """``log(exp(input) + exp(other))`` with each operand's masked-out elements counted as
    ``-inf`` (so both masked out gives ``-inf``).

    Parameters
    ----------
    input, other : Tensor
    dtype : lucid.dtype, optional
        The result is cast to it (default: the input's dtype).
    input_mask, other_mask : Tensor, optional
        True where an element of ``input`` / ``other`` counts; broadcastable to it.

    Examples
    --------
    >>> import lucid
    >>> x = lucid.tensor([-100.0, -200, -300])
    >>> y = lucid.tensor([-1.0, -2, -3])
    >>> mask = lucid.tensor([True, False, True])
    >>> lucid.masked.logaddexp(x, y, input_mask=mask, other_mask=mask)
    tensor([ -1., -inf,  -3.])
    """
    input, input_mask = unwrap("logaddexp", input, input_mask)
    other, other_mask = unwrap("logaddexp", other, other_mask)
    dtype = input.dtype if dtype is None else as_dtype(dtype)
    a = fill("logaddexp", "logaddexp", input, input_mask)
    b = fill("logaddexp", "logaddexp", other, other_mask)
    return lucid.logaddexp(a, b).to(dtype)
