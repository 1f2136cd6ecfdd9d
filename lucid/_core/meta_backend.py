"""The ``"meta"`` device: tensors with a shape and a dtype and no values.

NOTE [Meta device]
PyTorch's meta tensors serve two purposes: a template module whose parameters are all replaced
(``copy.deepcopy(model).to("meta")`` as the base of ``functional_call`` in model ensembling:
it holds no second copy of the weights), and shape inference (every op runs on meta inputs and
returns a meta output). Lucid has the first: tensors and modules move to ``"meta"``, factory
functions make meta tensors (``lucid.zeros(2, 3, device="meta")``), and shape, dtype, device,
``requires_grad`` and printing work. An op given a meta tensor raises, saying so (a difference
from PyTorch, listed in the README); copying out of one raises PyTorch's "Cannot copy out of
meta tensor; no data!". Registered when the device is first named: ``import lucid`` pays nothing.
"""
from __future__ import annotations

import numpy as np

_NO_DATA = ("meta tensors have no data: on Lucid's 'meta' device tensors and modules hold shapes and "
            "dtypes only (a template for functional_call); ops do not run there (no shape inference, "
            "unlike PyTorch)")


def _refuse(*args, **kwargs):
    raise NotImplementedError(_NO_DATA)


class MetaArray:
    """A shape and a dtype, standing where an array would (see NOTE [Meta device])."""

    __slots__ = ("shape", "dtype")
    __array_priority__ = 1000

    def __init__(self, shape, dtype):
        self.shape, self.dtype = tuple(int(s) for s in shape), np.dtype(dtype)

    ndim = property(lambda self: len(self.shape))
    size = property(lambda self: int(np.prod(self.shape, dtype=np.int64)))
    itemsize = property(lambda self: self.dtype.itemsize)
    nbytes = property(lambda self: self.size * self.dtype.itemsize)

    @property
    def strides(self):  # a contiguous layout's, as PyTorch reports for a meta tensor
        out, step = [], self.dtype.itemsize
        for s in reversed(self.shape):
            out.append(step)
            step *= max(s, 1)
        return tuple(reversed(out))

    @property
    def flags(self):
        return {"C_CONTIGUOUS": True, "F_CONTIGUOUS": self.ndim <= 1, "WRITEABLE": False}

    def astype(self, dtype, copy=True):
        return MetaArray(self.shape, dtype)

    def copy(self, order="C"):
        return MetaArray(self.shape, self.dtype)

    view = copy  # detach() and state_dict() take views: the same nothing

    def __getattr__(self, name):  # every other array method: there are no values to compute on
        if name.startswith("__"):
            raise AttributeError(name)
        raise NotImplementedError(_NO_DATA)

    def __array_ufunc__(self, *args, **kwargs):
        raise NotImplementedError(_NO_DATA)

    def __array_function__(self, func, types, args, kwargs):
        if func is np.may_share_memory or func is np.shares_memory:  # a view's bookkeeping (detach)
            return False
        raise NotImplementedError(_NO_DATA)

    def __len__(self):
        if not self.shape:
            raise TypeError("len() of a 0-d tensor")
        return self.shape[0]

    def __repr__(self):
        return f"MetaArray(shape={self.shape}, dtype={self.dtype})"

    def __array__(self, dtype=None, copy=None):
        raise NotImplementedError("Cannot copy out of meta tensor; no data!")

    __getitem__ = __setitem__ = __iter__ = __bool__ = __float__ = __int__ = _refuse
    __add__ = __radd__ = __sub__ = __rsub__ = __mul__ = __rmul__ = __truediv__ = __rtruediv__ = _refuse
    __neg__ = __pow__ = __rpow__ = __matmul__ = __rmatmul__ = __lt__ = __le__ = __gt__ = __ge__ = _refuse
    __iadd__ = __isub__ = __imul__ = __itruediv__ = _refuse


def _shape(shape):
    if isinstance(shape, (int, np.integer)):
        return (int(shape),)
    return tuple(int(s) for s in shape)


class _MetaNamespace:
    """Makes meta arrays from nothing (``empty``, ``zeros`` ...); every computation refuses."""

    ndarray = MetaArray

    @staticmethod
    def empty(shape, dtype=np.float64, **kwargs):
        return MetaArray(_shape(shape), dtype)

    zeros = ones = empty

    @staticmethod
    def full(shape, fill_value, dtype=None, **kwargs):
        return MetaArray(_shape(shape), np.asarray(fill_value).dtype if dtype is None else dtype)

    @staticmethod
    def empty_like(a, dtype=None, **kwargs):
        return MetaArray(a.shape, a.dtype if dtype is None else dtype)

    zeros_like = ones_like = empty_like

    @staticmethod
    def asarray(a, dtype=None, **kwargs):
        if isinstance(a, MetaArray):
            return a if dtype is None or np.dtype(dtype) == a.dtype else MetaArray(a.shape, dtype)
        a = np.asarray(a, dtype=dtype)
        return MetaArray(a.shape, a.dtype)

    array = asarray

    @staticmethod
    def ascontiguousarray(a, dtype=None):
        return _MetaNamespace.asarray(a, dtype)

    def __getattr__(self, name):
        return _refuse


def _from_numpy(arr, index=None):
    """Any array's shape and dtype (read from it: no values are copied, from any device)."""
    return MetaArray(arr.shape, arr.dtype)


def _to_numpy(arr):
    raise NotImplementedError("Cannot copy out of meta tensor; no data!")


def make_backend(backend):
    """The meta :class:`~lucid._core.backend.Backend` (``backend`` is that module)."""
    return backend.Backend(
        "meta", _MetaNamespace(), MetaArray,
        device_of=lambda a: backend.device("meta"),
        to_numpy=_to_numpy, from_numpy=_from_numpy, numpy_view=False,
        move=lambda a, index: MetaArray(a.shape, a.dtype),
        index_of=lambda a: 0,
    )
