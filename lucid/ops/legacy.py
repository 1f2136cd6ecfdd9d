"""PyTorch's legacy typed constructors: ``lucid.FloatTensor([1, 2])``, ``lucid.LongTensor(2, 3)``.

Each is a class whose call makes a plain :class:`Tensor` of its dtype, from data (one
sequence, array or tensor argument) or from sizes (int arguments or one ``Size``: a
zero-filled tensor, where PyTorch leaves memory uninitialised). A class belongs to a device
type, as in PyTorch: ``lucid.FloatTensor`` makes CPU tensors (whatever the default device),
``lucid.cuda.FloatTensor`` makes them on the current CUDA device (old code's ``Tensor =
torch.cuda.FloatTensor if cuda else torch.FloatTensor``); ``isinstance(t, lucid.FloatTensor)``
checks the dtype and the device type, ``x.type(lucid.cuda.FloatTensor)`` casts and moves, and
``set_default_tensor_type(lucid.cuda.FloatTensor)`` makes CUDA the default device.
"""
from __future__ import annotations

import numpy as np

from .._core import backend, dtypes
from .._core.size import Size
from .._core.tensor import Tensor, _to_array, _wrap
from .creation import device_arg


class _TypedTensorMeta(type):
    def __instancecheck__(cls, obj):
        return isinstance(obj, Tensor) and obj.dtype == cls.dtype and obj.device.type == cls.device_type

    def __call__(cls, *args, device=None):
        name = cls.__name__
        if device is not None and device_arg(device, name).type != cls.device_type:
            raise RuntimeError(f"{name}: legacy constructor expects device type: {cls.device_type} but device "
                               f"type: {device_arg(device, name).type} was passed")
        # the device first: without a GPU, lucid.cuda.FloatTensor(...) fails before any work
        where = backend.CPU if cls.device_type == "cpu" else device_arg(device or cls.device_type, name)
        if len(args) == 1 and not isinstance(args[0], (int, np.integer, Size)) or (
                args and isinstance(args[0], bool)):
            data = args[0]
            if len(args) != 1:
                raise TypeError(f"{name}: expected data or sizes, got {args!r}")
            if isinstance(data, Tensor):
                data = backend.host(data._data)
            try:
                arr = _to_array(data, cls.dtype.dtype)
            except (ValueError, TypeError) as e:
                raise TypeError(f"{name}: can't make a tensor from {type(data).__name__} ({e})") from None
        else:
            sizes = tuple(args[0]) if len(args) == 1 and isinstance(args[0], Size) else args
            if not all(isinstance(s, (int, np.integer)) and not isinstance(s, bool) for s in sizes):
                raise TypeError(f"{name}: expected data (one sequence) or sizes (ints), got {args!r}")
            if any(s < 0 for s in sizes):
                raise RuntimeError(f"{name}: negative dimension in size {tuple(sizes)}")
            arr = np.zeros(tuple(int(s) for s in sizes) if sizes else (0,), cls.dtype.dtype)
        return _wrap(arr if where is backend.CPU else backend.to_device(arr, where))

    def __repr__(cls):
        return f"<class '{cls.__module__}.{cls.__name__}'>"

    @property
    def is_cuda(cls):
        return cls.device_type == "cuda"


def _typed(name, dt, doc, device_type="cpu"):
    module = "lucid" if device_type == "cpu" else f"lucid.{device_type}"
    return _TypedTensorMeta(name, (), {"dtype": dt, "device_type": device_type, "__doc__": doc,
                                       "__module__": module, "is_sparse": False})


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

_CUDA_TYPED = {}


def cuda_typed(name):
    """``lucid.cuda.<name>`` (``FloatTensor`` ...): the class of that dtype for the CUDA device
    type, made on first use; None for a name that is not a legacy tensor type.

    Examples
    --------
    >>> import lucid
    >>> lucid.cuda.FloatTensor, lucid.cuda.FloatTensor.dtype, lucid.cuda.FloatTensor.is_cuda
    (<class 'lucid.cuda.FloatTensor'>, lucid.float32, True)
    >>> isinstance(lucid.zeros(2, device="cpu"), lucid.cuda.FloatTensor)
    False
    """
    if name not in _CUDA_TYPED:
        cpu = bfloat16_tensor() if name == "BFloat16Tensor" else globals().get(name)
        if name not in __all__ + ["BFloat16Tensor"] or cpu is None:
            return None
        _CUDA_TYPED[name] = _typed(name, cpu.dtype, cpu.__doc__.split(".")[0].replace("tensors", "CUDA tensors")
                                   + ".", device_type="cuda")
    return _CUDA_TYPED[name]


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
