"""What every masked function shares: the canonical mask, dims, identities and the fill.

See NOTE [Masked functions] in ``lucid/masked/__init__.py``.
"""
from __future__ import annotations

import math

import lucid

from .._core.tensor import Tensor

# the integer dtypes PyTorch's masked sum/prod widen to int64 when no dtype is given
_WIDENED = ("uint8", "bool", "int8", "int16", "int32")


def is_masked(x):
    from ._tensor import MaskedTensor

    return isinstance(x, MaskedTensor)


def unwrap(name, input, mask):
    """``(data, mask)``: a MaskedTensor's plain data and mask (``and``-ed with an explicit
    mask), or the arguments as given."""
    if is_masked(input):
        own = input.get_mask()
        return input.get_data(), own if mask is None else own & _check_mask(name, mask)
    if not isinstance(input, Tensor):
        raise TypeError(f"{name}: input must be a Tensor, got {type(input).__name__}")
    if input.is_nested:  # PyTorch's layout check, with its ValueError
        raise ValueError(f"{name}: masked {name} expects a strided tensor (got a {input.layout} tensor)")
    mask = None if mask is None else _check_mask(name, mask)
    for t in (input, mask):
        if t is not None and t.layout is not lucid.strided and not t.is_nested:
            # PyTorch's sparse semantics (unspecified elements masked out, a sparse result) are
            # not implemented: refuse rather than answer in another layout
            raise NotImplementedError(f"{name}: sparse inputs and masks are not supported by lucid.masked; "
                                      "call .to_dense() first")
    return input, mask


def _check_mask(name, mask):
    if is_masked(mask) or not isinstance(mask, Tensor):
        raise TypeError(f"{name}: mask must be a Tensor, got {type(mask).__name__}")
    return mask


def input_mask(name, input, mask):
    """The mask as a bool tensor of ``input``'s shape (broadcast; PyTorch's ``_input_mask``)."""
    if mask.ndim > input.ndim:
        raise IndexError(f"{name}: expected broadcastable mask (got mask dimensionality {mask.ndim} higher "
                         f"than the input's, {input.ndim})")
    if tuple(mask.shape) != tuple(input.shape):
        try:
            mask = lucid.broadcast_to(mask, input.shape)
        except (RuntimeError, ValueError):
            raise RuntimeError(f"{name}: the mask of shape {tuple(mask.shape)} can't be broadcast to the "
                               f"input's shape {tuple(input.shape)}") from None
    return mask if mask.dtype == lucid.bool else mask.to(lucid.bool)


def canonical_dim(name, dim, ndim):
    """``dim`` as a sorted tuple of non-negative dims; None and ``()`` mean every dim."""
    if dim is None or dim == ():
        return tuple(range(ndim))
    bound = max(ndim, 1)
    dims = []
    for d in ((dim,) if isinstance(dim, int) else dim):
        d = int(d)
        if not -bound <= d < bound:
            raise IndexError(f"{name}: Dimension out of range (expected to be in range of [{-bound}, {bound - 1}], "
                             f"but got {d})")
        if d % bound in dims:
            raise RuntimeError(f"{name}: dim={d} appears multiple times in the list of dims")
        dims.append(d % bound)
    return tuple(sorted(dims))


def reduce_dims(dims):
    """What to hand a Lucid reduction for ``dims`` (a 0-d input has no dims: reduce it whole)."""
    return dims if dims else None


def _signed_or_byte(dtype):
    return dtype.kind == "i" or dtype == lucid.uint8


def identity(name, op, dtype, ord=None):
    """The value masked-out elements take so that ``op`` ignores them (PyTorch's
    ``_reduction_identity``), as a Python number; None where there is none (mean, var)."""
    floating = dtype.is_floating_point
    if op in ("sum", "cumsum"):
        return 0
    if op in ("prod", "cumprod"):
        return 1
    if op in ("amax", "argmax", "logaddexp", "logsumexp"):
        if floating or dtype.is_complex and op == "logsumexp":
            return -math.inf
        if _signed_or_byte(dtype):
            return lucid.iinfo(dtype).min
    elif op in ("amin", "argmin"):
        if floating:
            return math.inf
        if _signed_or_byte(dtype):
            return lucid.iinfo(dtype).max
    elif op == "norm":
        if ord == -math.inf:
            if not floating:
                raise RuntimeError(f"{name}: ord=-inf needs a floating point input, got {dtype}")
            return math.inf
        return 0
    elif op == "median":
        return math.nan
    elif op in ("mean", "var", "std"):
        return None
    raise NotImplementedError(f"{name}: masked {op} has no identity for {dtype} input")


def fill(name, op, input, mask, ord=None):
    """``input`` with its masked-out elements replaced by ``op``'s identity (``where``, so they get
    no gradient)."""
    if mask is None:
        return input
    value = identity(name, op, input.dtype, ord)
    mask = input_mask(name, input, mask)
    return lucid.where(mask, input, lucid.tensor(value, dtype=input.dtype, device=input.device))


def widened(dtype):
    """PyTorch's default result dtype of a masked sum or prod."""
    return lucid.int64 if dtype.name in _WIDENED else dtype


def is_float_or_complex(dtype):
    return dtype.is_floating_point or dtype.is_complex


def as_dtype(dtype):
    return None if dtype is None else lucid._core.dtypes.as_lucid(dtype)
