"""PyTorch's legacy typed sparse constructors: ``lucid.sparse.FloatTensor(indices, values, size)``.

Old code (pygcn's ``sparse_mx_to_torch_sparse_tensor``, many GCN ports) still builds its COO
adjacency with them. As in PyTorch each is a class whose call makes a COO tensor through
:func:`lucid.sparse_coo_tensor`: from ``(indices, values[, size])`` (tensors; the values keep
their own dtype and device, as PyTorch's do) or from sizes alone (an empty CPU tensor of the class's
dtype, whatever the default device, as PyTorch's legacy constructors make).
``isinstance(s, lucid.sparse.FloatTensor)`` holds for a CPU COO tensor of that dtype.
"""
from __future__ import annotations

import numpy as np

from .._core import dtypes
from .._core.size import Size
from .._core.tensor import Tensor

__all__ = ["FloatTensor", "DoubleTensor", "HalfTensor", "LongTensor", "IntTensor", "ShortTensor",
           "CharTensor", "ByteTensor"]


def _is_size(args):
    if len(args) == 1 and isinstance(args[0], (Size, tuple, list)):
        args = tuple(args[0])
    ok = all(isinstance(s, (int, np.integer)) and not isinstance(s, bool) for s in args)
    return tuple(int(s) for s in args) if ok else None


class _SparseTypedMeta(type):
    def __instancecheck__(cls, obj):
        return (isinstance(obj, Tensor) and getattr(obj, "layout", None) is _coo_layout() and obj.dtype == cls.dtype
                and obj.device.type == "cpu")  # a CPU class, as lucid.FloatTensor (ops/legacy.py)

    def __call__(cls, *args, device=None):
        from ._coo import sparse_coo_tensor

        name = f"sparse.{cls.__name__}"
        if args and all(isinstance(a, Tensor) for a in args[:2]) and len(args) in (2, 3):
            size = None if len(args) == 2 else _is_size((args[2],))
            if len(args) == 3 and size is None:
                raise TypeError(f"{name}: expected (Tensor indices, Tensor values, tuple of ints size), "
                                f"got size {args[2]!r}")
            return sparse_coo_tensor(args[0], args[1], size, device=device)
        size = _is_size(args)
        if size is None:
            raise TypeError(f"{name}: expected (Tensor indices, Tensor values[, size]) or sizes (ints), "
                            f"got ({', '.join(type(a).__name__ for a in args)})")
        if any(s < 0 for s in size):
            raise RuntimeError(f"{name}: negative dimension in size {size}")
        return sparse_coo_tensor(np.zeros((len(size), 0), np.int64), np.zeros((0,), cls.dtype.dtype), size,
                                 dtype=cls.dtype, device="cpu" if device is None else device)  # as PyTorch's

    def __repr__(cls):
        return f"<class 'lucid.sparse.{cls.__name__}'>"


def _coo_layout():
    from ._base import sparse_coo

    return sparse_coo


def _typed(name, dt):
    doc = f"""Sparse COO {dt} tensors (PyTorch's legacy ``torch.sparse.{name}``).

    Examples
    --------
    >>> import lucid
    >>> s = lucid.sparse.{name}(lucid.tensor([[0, 1], [1, 0]]), lucid.ones(2, dtype={dt!r}), (2, 2))
    >>> s.layout, s._nnz(), lucid.sparse.{name}(2, 3).shape
    (lucid.sparse_coo, 2, (2, 3))
    """
    return _SparseTypedMeta(name, (), {"dtype": dt, "__doc__": doc, "__module__": "lucid.sparse"})


FloatTensor = _typed("FloatTensor", dtypes.float32)
DoubleTensor = _typed("DoubleTensor", dtypes.float64)
HalfTensor = _typed("HalfTensor", dtypes.float16)
LongTensor = _typed("LongTensor", dtypes.int64)
IntTensor = _typed("IntTensor", dtypes.int32)
ShortTensor = _typed("ShortTensor", dtypes.int16)
CharTensor = _typed("CharTensor", dtypes.int8)
ByteTensor = _typed("ByteTensor", dtypes.uint8)
