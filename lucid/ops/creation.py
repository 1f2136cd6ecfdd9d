"""Tensor creation and dtype conversion (no gradients flow into these)."""
from __future__ import annotations

import numpy as np

from .._core import backend, dtypes
from .._core.backend import xp
from .._core.tensor import Tensor, _to_array, _wrap, tensor_method
from .elementwise import cast


def _finish(arr, requires_grad, device=None):
    backend.check_device(device)
    t = _wrap(arr)
    if requires_grad:
        t.requires_grad = True
    return t


def _size(size):
    if len(size) == 1 and isinstance(size[0], (tuple, list)):
        size = tuple(size[0])
    size = tuple(int(s) for s in size)
    if any(s < 0 for s in size):
        raise RuntimeError(f"creation: negative dimension in size {size}")
    return size


def _float_dtype(dtype):
    return dtypes.to_dtype(dtype) if dtype is not None else dtypes.get_default_dtype()


def tensor(data, dtype=None, device=None, requires_grad=False):
    """Make a tensor that copies ``data`` (Python floats become float32).

    Examples
    --------
    >>> import lucid
    >>> lucid.tensor([1.0, 2.0], requires_grad=True)
    tensor([1., 2.], requires_grad=True)
    """
    if isinstance(data, Tensor):
        data = data._data
    return _finish(_to_array(data, dtype), requires_grad, device)


def as_tensor(data, dtype=None, device=None):
    """Like :func:`tensor` but shares memory with a NumPy array or Tensor when it can."""
    backend.check_device(device)
    dtype = dtypes.to_dtype(dtype)
    if isinstance(data, Tensor):
        return data if dtype is None or data.dtype == dtype else cast(data, dtype)
    if isinstance(data, np.ndarray):
        return _wrap(data if dtype is None or data.dtype == dtype else data.astype(dtype))
    return _wrap(_to_array(data, dtype))


def from_numpy(array):
    """A tensor sharing memory with ``array``."""
    if not isinstance(array, np.ndarray):
        raise TypeError(f"from_numpy: expected np.ndarray, got {type(array).__name__}")
    return _wrap(array)


def zeros(*size, dtype=None, device=None, requires_grad=False):
    """A tensor of zeros."""
    return _finish(xp.zeros(_size(size), _float_dtype(dtype)), requires_grad, device)


def ones(*size, dtype=None, device=None, requires_grad=False):
    """A tensor of ones."""
    return _finish(xp.ones(_size(size), _float_dtype(dtype)), requires_grad, device)


def empty(*size, dtype=None, device=None, requires_grad=False):
    """An uninitialised tensor (zeros in practice)."""
    return _finish(xp.zeros(_size(size), _float_dtype(dtype)), requires_grad, device)


def full(size, fill_value, dtype=None, device=None, requires_grad=False):
    """A tensor filled with ``fill_value`` (dtype inferred from it like PyTorch)."""
    if dtype is None:
        dtype = (dtypes.bool_ if isinstance(fill_value, bool) else dtypes.int64
                 if isinstance(fill_value, int) else dtypes.get_default_dtype())
    return _finish(xp.full(_size((size,) if isinstance(size, int) else (tuple(size),)), fill_value,
                           dtypes.to_dtype(dtype)), requires_grad, device)


def _like(fn):
    def like(input, dtype=None, device=None, requires_grad=False, **kw):
        return fn(*input.shape, dtype=dtype or input.dtype, device=device, requires_grad=requires_grad)

    like.__name__ = fn.__name__ + "_like"
    like.__doc__ = f"``{fn.__name__}`` with the shape (and by default dtype) of ``input``."
    return like


zeros_like, ones_like, empty_like = _like(zeros), _like(ones), _like(empty)


def full_like(input, fill_value, dtype=None, device=None, requires_grad=False):
    return full(input.shape, fill_value, dtype=dtype or input.dtype, device=device, requires_grad=requires_grad)


def arange(start, end=None, step=1, dtype=None, device=None, requires_grad=False):
    """Values from ``start`` to ``end`` (exclusive) by ``step``; ints stay int64."""
    if end is None:
        start, end = 0, start
    vals = [v.item() if isinstance(v, Tensor) else v for v in (start, end, step)]
    if dtype is None:
        dtype = dtypes.int64 if all(isinstance(v, int) for v in vals) else dtypes.get_default_dtype()
    return _finish(xp.arange(*vals, dtype=dtypes.to_dtype(dtype)), requires_grad, device)


def linspace(start, end, steps, dtype=None, device=None, requires_grad=False):
    """``steps`` evenly spaced values from ``start`` to ``end`` inclusive."""
    return _finish(xp.linspace(start, end, int(steps), dtype=_float_dtype(dtype)), requires_grad, device)


def logspace(start, end, steps, base=10.0, dtype=None, device=None, requires_grad=False):
    return _finish(xp.logspace(start, end, int(steps), base=base, dtype=_float_dtype(dtype)), requires_grad, device)


def eye(n, m=None, dtype=None, device=None, requires_grad=False):
    """Identity matrix of shape ``(n, m)``."""
    return _finish(xp.eye(n, m, dtype=_float_dtype(dtype)), requires_grad, device)


# ------------------------------------------------------------------ conversions


@tensor_method("to")
def to(input, *args, dtype=None, device=None, copy=False, **kw):
    """Convert dtype (and check the device): ``x.to(lucid.float64)``, ``x.to("cpu")``, ``x.to(other)``."""
    for a in args:
        if isinstance(a, Tensor):
            dtype = a.dtype
        elif isinstance(a, str) and (a.split(":")[0] in ("cpu", "cuda", "mps", "meta") or not a):
            backend.check_device(a)
        elif isinstance(a, backend.device):
            backend.check_device(a)
        else:
            dtype = a
    backend.check_device(device)
    if dtype is None:
        return input.clone() if copy else input
    out = cast(input, dtypes.to_dtype(dtype))
    return out.clone() if copy and out is input else out


def _conv(dtype, name):
    def method(self, memory_format=None):
        return cast(self, dtype)

    method.__name__ = name
    method.__doc__ = f"This tensor as ``{dtype}``."
    return method


for _n, _dt in [("float", dtypes.float32), ("double", dtypes.float64), ("half", dtypes.float16),
                ("long", dtypes.int64), ("int", dtypes.int32), ("short", dtypes.int16),
                ("bool", dtypes.bool_), ("byte", dtypes.uint8), ("char", dtypes.int8)]:
    setattr(Tensor, _n, _conv(_dt, _n))


@tensor_method("type_as")
def type_as(input, other):
    return cast(input, other.dtype)


@tensor_method("type")
def type_(input, dtype=None):
    if dtype is None:
        return f"lucid.{input.dtype}"
    return cast(input, dtype)


@tensor_method("cpu", "cuda_")
def cpu(input):
    return input


@tensor_method("new_tensor")
def new_tensor(input, data, dtype=None, requires_grad=False):
    return tensor(data, dtype=dtype or input.dtype, requires_grad=requires_grad)


@tensor_method("new_zeros")
def new_zeros(input, *size, dtype=None, requires_grad=False):
    return zeros(*size, dtype=dtype or input.dtype, requires_grad=requires_grad)


@tensor_method("new_ones")
def new_ones(input, *size, dtype=None, requires_grad=False):
    return ones(*size, dtype=dtype or input.dtype, requires_grad=requires_grad)


@tensor_method("new_full")
def new_full(input, size, fill_value, dtype=None, requires_grad=False):
    return full(size, fill_value, dtype=dtype or input.dtype, requires_grad=requires_grad)


@tensor_method("new_empty")
def new_empty(input, *size, dtype=None, requires_grad=False):
    return zeros(*size, dtype=dtype or input.dtype, requires_grad=requires_grad)


__all__ = ['arange', 'as_tensor', 'empty', 'empty_like', 'eye', 'from_numpy', 'full', 'full_like', 'linspace', 'logspace', 'ones', 'ones_like', 'tensor', 'zeros', 'zeros_like']
