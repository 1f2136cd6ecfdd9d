"""PyTorch's legacy typed constructors: ``lucid.FloatTensor([1, 2])``, ``lucid.LongTensor(2, 3)``.

Each is a class whose call makes a plain :class:`Tensor` of its dtype, from data (one
sequence, array or tensor argument) or from sizes (int arguments or one ``Size``: a
zero-filled tensor, where PyTorch leaves memory uninitialised). ``isinstance(t,
lucid.FloatTensor)`` checks the dtype, as in PyTorch.
"""
from __future__ import annotations

import numpy as np

from .._core import dtypes
from .._core.size import Size
from .._core.tensor import Tensor, _to_array, _wrap
from .creation import device_arg


class _TypedTensorMeta(type):
    def __instancecheck__(cls, obj):
        return isinstance(obj, Tensor) and obj.dtype == cls.dtype

    def __call__(cls, *args, device=None):
        device_arg(device, cls.__name__)
        name = cls.__name__
        if len(args) == 1 and not isinstance(args[0], (int, np.integer, Size)) or (
                args and isinstance(args[0], bool)):
            data = args[0]
            if len(args) != 1:
                raise TypeError(f"{name}: expected data or sizes, got {args!r}")
            if isinstance(data, Tensor):
                data = data._data
            try:
                return _wrap(_to_array(data, cls.dtype.dtype))
            except (ValueError, TypeError) as e:
                raise TypeError(f"{name}: can't make a tensor from {type(data).__name__} ({e})") from None
        sizes = tuple(args[0]) if len(args) == 1 and isinstance(args[0], Size) else args
        if not all(isinstance(s, (int, np.integer)) and not isinstance(s, bool) for s in sizes):
            raise TypeError(f"{name}: expected data (one sequence) or sizes (ints), got {args!r}")
        if any(s < 0 for s in sizes):
            raise RuntimeError(f"{name}: negative dimension in size {tuple(sizes)}")
        return _wrap(np.zeros(tuple(int(s) for s in sizes) if sizes else (0,), cls.dtype.dtype))

    def __repr__(cls):
        return f"<class 'lucid.{cls.__name__}'>"


def _typed(name, dt, doc):
    return _TypedTensorMeta(name, (), {"dtype": dt, "__doc__": doc, "__module__": "lucid"})


FloatTensor = _typed("FloatTensor", dtypes.float32, """float32 tensors from data or sizes.

    Examples
    --------
    >>> import lucid
    >>> lucid.FloatTensor([1, 2]), lucid.FloatTensor(2, 3).shape
    (tensor([1., 2.]), (2, 3))
    >>> isinstance(lucid.zeros(1), lucid.FloatTensor)
    True
    """)
DoubleTensor = _typed("DoubleTensor", dtypes.float64, "float64 tensors from data or sizes.")
HalfTensor = _typed("HalfTensor", dtypes.float16, "float16 tensors from data or sizes.")
LongTensor = _typed("LongTensor", dtypes.int64, """int64 tensors from data or sizes.

    Examples
    --------
    >>> import lucid
    >>> lucid.LongTensor([1, 2]), lucid.LongTensor(3).shape
    (tensor([1, 2]), (3,))
    """)
IntTensor = _typed("IntTensor", dtypes.int32, "int32 tensors from data or sizes.")
ShortTensor = _typed("ShortTensor", dtypes.int16, "int16 tensors from data or sizes.")
CharTensor = _typed("CharTensor", dtypes.int8, "int8 tensors from data or sizes.")
ByteTensor = _typed("ByteTensor", dtypes.uint8, "uint8 tensors from data or sizes.")
BoolTensor = _typed("BoolTensor", dtypes.bool_, "bool tensors from data or sizes.")

TYPED = {c.dtype: c for c in (FloatTensor, DoubleTensor, HalfTensor, LongTensor, IntTensor, ShortTensor,
                              CharTensor, ByteTensor, BoolTensor)}

__all__ = [c.__name__ for c in TYPED.values()]


def bfloat16_tensor():
    """``lucid.BFloat16Tensor``, made on first use: bfloat16 loads ml_dtypes (NOTE [bfloat16]).

    Examples
    --------
    >>> import lucid
    >>> lucid.BFloat16Tensor([1.5, 2]).dtype
    lucid.bfloat16
    """
    cls = TYPED.get(dtypes.BF16)
    if cls is None:
        cls = TYPED[dtypes.enable_bfloat16().dtype] = _typed(
            "BFloat16Tensor", dtypes.enable_bfloat16(), "bfloat16 tensors from data or sizes.")
    return cls
