"""Helpers shared by the distributions: broadcasting of parameters, probs <-> logits,
lazily computed properties, and reading concrete values through transforms.
"""
from __future__ import annotations

import numbers

import numpy as np

import lucid
from .._core import dtypes
from .._core.tensor import Tensor, _wrap

euler_constant = 0.57721566490153286060  # Euler-Mascheroni


def is_tensor(v):
    return isinstance(v, Tensor)


def broadcast_all(*values):
    """Numbers and tensors, broadcast to one shape; numbers take the tensors' float dtype and
    are made on the first tensor's device (the default device when there is none), as PyTorch's.

    Examples
    --------
    >>> import lucid
    >>> from lucid.distributions.utils import broadcast_all
    >>> a, b = broadcast_all(lucid.zeros(2, 1), 3.0)
    >>> a.shape, b.shape, b.tolist()
    ((2, 1), (2, 1), [[3.0], [3.0]])
    """
    tensors = [v for v in values if isinstance(v, Tensor)]
    for v in values:
        if not isinstance(v, (Tensor, numbers.Number)):
            raise ValueError(f"Input arguments must all be instances of numbers.Number or lucid.Tensor, "
                             f"got {type(v).__name__}")
    if tensors:
        floats = [t.dtype for t in tensors if t.dtype.kind == "f"]
        dt = np.result_type(*floats) if floats else dtypes.get_default_dtype()
        dev = tensors[0].device
    else:
        dt, dev = dtypes.get_default_dtype(), None
    vals = [v if isinstance(v, Tensor) else lucid.tensor(float(v), dtype=dt, device=dev) for v in values]
    shape = np.broadcast_shapes(*[tuple(v.shape) for v in vals])
    return tuple(v if tuple(v.shape) == shape else lucid.broadcast_to(v, shape) for v in vals)


def as_float(v, like=None):
    """A tensor in a floating dtype (numbers take ``like``'s dtype and device, or the defaults)."""
    if isinstance(v, Tensor):
        return v if v.dtype.kind == "f" else v.to(dtypes.get_default_dtype())
    if like is None:
        return lucid.tensor(float(v), dtype=dtypes.get_default_dtype())
    return lucid.tensor(float(v), dtype=like.dtype, device=like.device)


def finfo(dtype):
    return dtypes.np_finfo(np.dtype(dtype))


def clamp_min(x, lo):
    """``x.clamp(min=lo)`` whose gradient is selected, not multiplied by a mask.

    PyTorch's clamp backward is ``where(x >= lo, g, 0)``: a clamped element gets 0 even where
    the upstream gradient is inf (``mean = a / (a - 1)`` at the clamp ``a = 1``); Lucid's clamp
    multiplies by the mask, which gives nan there. NaN stays NaN, as clamp's.
    """
    return lucid.where(x < lo, lucid.full_like(x, lo), x)


def safe_where(cond, fn, x, safe, fill):
    """``where(cond, fn(x), fill)`` with ``fn`` evaluated at ``safe`` where ``cond`` is False.

    The masked branch then has a finite derivative, so its zero cotangent stays 0 (0 * inf
    would be nan): PyTorch's gradient for a statistic that is inf or nan off its domain.
    """
    inside = fn(lucid.where(cond, x, lucid.full_like(x, safe)))
    return lucid.where(cond, inside, lucid.full_like(inside, fill))


def clamp_probs(probs):
    """Probabilities clamped to ``[eps, 1 - eps]`` of their dtype (keeps logs finite)."""
    eps = float(finfo(probs.dtype).eps)
    return probs.clamp(eps, 1 - eps)


def logits_to_probs(logits, is_binary=False):
    """Sigmoid (binary) or softmax over the last dim."""
    if is_binary:
        return lucid.sigmoid(logits)
    return lucid.softmax(logits, -1)


def probs_to_logits(probs, is_binary=False):
    """``log(p) - log1p(-p)`` (binary) or ``log(p)``, with ``p`` clamped away from 0 and 1."""
    ps = clamp_probs(probs)
    if is_binary:
        return lucid.log(ps) - lucid.log1p(-ps)
    return lucid.log(ps)


class lazy_property:
    """A property computed on first access and then stored on the instance.

    Reading it from the class returns the descriptor itself (``Distribution`` uses that to
    skip validating parameters that were not given, e.g. ``logits`` when ``probs`` was).
    """

    def __init__(self, wrapped):
        self.wrapped = wrapped
        self.__doc__ = wrapped.__doc__
        self.__name__ = wrapped.__name__

    def __get__(self, instance, obj_type=None):
        if instance is None:
            return self
        value = self.wrapped(instance)
        instance.__dict__[self.wrapped.__name__] = value
        return value


def sum_rightmost(value, dim):
    """Sum out the ``dim`` rightmost dims of ``value``."""
    if dim == 0:
        return value
    return value.reshape(tuple(value.shape[:-dim]) + (-1,)).sum(-1)


def tril_matrix_to_vec(mat, diag=0):
    n = mat.shape[-1]
    rows, cols = np.tril_indices(n, k=diag)
    return mat[..., lucid.tensor(rows, device=mat.device), lucid.tensor(cols, device=mat.device)]


def vec_to_tril_matrix(vec, diag=0):
    m = vec.shape[-1]
    n = int(round((-(1 + 2 * diag) + ((1 + 2 * diag) ** 2 + 8 * m + 4 * abs(diag) * (diag + 1)) ** 0.5) / 2))
    rows, cols = np.tril_indices(n, k=diag)
    idx = np.full((n, n), rows.size, dtype=np.int64)
    idx[rows, cols] = np.arange(rows.size)
    padded = lucid.cat([vec, lucid.zeros(tuple(vec.shape[:-1]) + (1,), dtype=vec.dtype, device=vec.device)], -1)
    return padded[..., lucid.tensor(idx.reshape(-1), device=vec.device)].reshape(tuple(vec.shape[:-1]) + (n, n))


# NOTE [Validation through transforms]
# Parameter and sample checks need concrete values, but under func.grad / jvp / vmap the
# values are tracers. The check itself runs on the (possibly traced) values under no_grad,
# so bounds that are themselves traced (Uniform's support, Pareto's scale) batch correctly,
# and ``concrete`` then reads the bool result underneath every tracer (each vmap batch dim
# moved to the front) to decide. Validation therefore works inside transforms and never
# records a graph. Constraint checks must not branch on values for this (no ``bool()``).
def concrete(value):
    """The plain tensor under ``value`` (tracers unwrapped, vmap batch dims in front), on
    ``value``'s device."""
    return _wrap(_concrete_array(value)) if type(value) is not Tensor else value


def _concrete_array(v):
    if type(v) is Tensor:
        return v._data
    from ..func._traces import BatchTracer

    if isinstance(v, BatchTracer):
        inner = v._val
        a = _concrete_array(inner)
        k = a.ndim - len(inner.shape)
        return np.moveaxis(a, k + v._bdim, 0)
    if hasattr(v, "_inner_value"):
        return _concrete_array(v._inner_value())
    return np.asarray(v)


def special(name):
    """``lucid.<name>`` (or ``lucid.special.<name>``); a clear error while it does not exist."""
    fn = getattr(lucid, name, None)
    if fn is None:
        try:
            import importlib

            fn = getattr(importlib.import_module("lucid.special"), name, None)
        except ImportError:
            fn = None
    if fn is None:
        raise NotImplementedError(f"lucid.distributions: this needs lucid.{name}, which this build of "
                                  "lucid does not provide")
    return fn
