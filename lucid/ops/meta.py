"""Tensor metadata, predicates and conversions: strides, ``__format__``, DLPack, ``is_*``.

None of these is an operation on values, so none is a primitive: they read the array's
metadata or hand its memory to another library.
"""
from __future__ import annotations

import builtins

import numpy as np

from .._core.backend import data_pointer
from .._core.tensor import Tensor, _wrap, tensor_method
from .numpy_aliases import numpy_axis


def _numpy_default_strides(arr):
    """The strides a fresh C-ordered array of ``arr``'s shape gets (NumPy's rule, which CuPy and
    the strict stand-in follow; computed on the host from the shape alone)."""
    return np.empty(arr.shape, np.dtype(arr.dtype)).strides


@tensor_method("stride")
def stride(input, dim=None, *, axis=None):
    """Steps, in elements, between neighbours along each dimension (PyTorch's strides).

    Examples
    --------
    >>> import lucid
    >>> x = lucid.zeros(2, 3)
    >>> x.stride(), x.t().stride(), x.stride(-1)
    ((3, 1), (1, 3), 1)
    """
    if axis is not None:  # See NOTE [NumPy keyword aliases]
        dim = numpy_axis("stride", dim, axis, None)
    if input._level:  # a tracer: the geometry as_strided counts in (NOTE [Strided views])
        from .shape.strided import _geometry

        st = _geometry(input)[1]
    else:
        arr = input._data
        if arr.size == 0 and input._base is None and arr.strides == _numpy_default_strides(arr):
            # a fresh empty tensor in the default layout: PyTorch's contiguous strides (sizes read
            # as >= 1; NumPy writes 0 there). Views and explicit layouts keep their own steps
            st, step = [], 1
            for n in reversed(arr.shape):
                st.append(step)
                step *= builtins.max(n, 1)
            st = tuple(reversed(st))
        else:
            st = tuple(s // arr.itemsize for s in arr.strides)
    if dim is None:
        return st
    if not -len(st) <= dim < max(len(st), 1):
        raise IndexError(f"stride: dimension {dim} out of range for a {len(st)}-d tensor")
    return st[dim]


@tensor_method("is_contiguous")
def is_contiguous(input, memory_format=None):
    """Whether the elements lie in the order of ``memory_format`` with no gaps.

    Read from the strides as PyTorch does: dims of size 1 are ignored (their stride never
    moves an index), so a tensor can be contiguous in several formats at once.

    Parameters
    ----------
    input : Tensor
        The tensor.
    memory_format : lucid.memory_format, optional
        ``lucid.contiguous_format`` (the default, row-major; also what ``preserve_format``
        asks), ``lucid.channels_last`` (4-d, NHWC memory) or ``lucid.channels_last_3d`` (5-d,
        NDHWC); a tensor of another rank is never channels-last contiguous.

    Examples
    --------
    >>> import lucid
    >>> x = lucid.zeros(2, 3)
    >>> x.is_contiguous(), x.t().is_contiguous()
    (True, False)
    >>> y = lucid.zeros(2, 3, 4, 5)
    >>> y.is_contiguous(memory_format=lucid.channels_last), y.permute(0, 2, 3, 1).contiguous().permute(0, 3, 1, 2).is_contiguous(memory_format=lucid.channels_last)
    (False, True)
    """
    from .memory_format import contiguous_format, is_contiguous_as

    if memory_format is None:
        if input._level:  # a transform's tracer: each example's own strides, as stride() reads them
            memory_format = contiguous_format
        else:
            return bool(input._data.flags.c_contiguous)

    return is_contiguous_as(input, memory_format)


@tensor_method("storage_offset")
def storage_offset(input):
    """Index, in elements, of this tensor's first element in the storage it views (the memory
    of its root base, from its lowest address), as ``as_strided`` counts it.

    Examples
    --------
    >>> import lucid
    >>> x = lucid.arange(6)
    >>> x.storage_offset(), x[2:].storage_offset()
    (0, 2)
    """
    from .shape.strided import _geometry, storage_geometry

    # The units as_strided counts in (NOTE [Strided views]); under vmap each example's own.
    geom = _geometry(input) if input._level else storage_geometry(input._data)
    if geom is None:
        raise RuntimeError(f"storage_offset: the tensor (shape {tuple(input.shape)}) starts at no whole "
                           "number of elements from its storage's start (a reinterpreting dtype view)")
    return geom[2]


@tensor_method("data_ptr")
def data_ptr(input):
    """The address of the first element (an int), as PyTorch's ``data_ptr``."""
    return data_pointer(input._data)  # host or device memory


Tensor.nbytes = property(lambda self: self._data.nbytes, doc="Bytes the elements occupy.")
Tensor.itemsize = property(lambda self: self._data.itemsize, doc="Bytes per element.")


# ------------------------------------------------------------------ Python protocols


def _format(self, spec):
    """``f"{t:.3f}"`` formats a one-element tensor's value, as PyTorch does for 0-d tensors
    (``f"{t}"`` of a 0-d tensor is its value too); otherwise an empty spec gives ``str(t)``."""
    arr = self._data
    if arr.ndim == 0 or (spec and arr.size == 1):
        return format(arr.reshape(()).item(), spec)
    if not spec:
        return str(self)
    raise TypeError(
        f"unsupported format string {spec!r} passed to Tensor.__format__: only one-element "
        f"tensors take a format spec (this one has shape {tuple(self.shape)})"
    )


def _complex(self):
    if self._data.size != 1:
        raise RuntimeError(f"complex: only one-element tensors can be converted to Python scalars "
                           f"(got shape {tuple(self.shape)})")
    return complex(self._data.reshape(()).item())


Tensor.__format__ = _format
Tensor.__complex__ = _complex


# -------------------------------------------------------------------------- DLPack


class DLPackError(RuntimeError, BufferError):
    """A DLPack export or import that can't be done: PyTorch's (and the array API's) BufferError,
    and the RuntimeError Lucid raised before."""


def _dlpack(self, *, stream=None, max_version=None, dl_device=None, copy=None):
    """Export through DLPack (zero-copy) for ``numpy.from_dlpack``, ``torch.from_dlpack`` ..."""
    if self._rg:
        raise DLPackError("__dlpack__: can't export a tensor that requires grad; use tensor.detach()")
    kw = {} if max_version is None else {"max_version": max_version}
    if dl_device is not None:
        kw["dl_device"] = dl_device
    if copy is not None:
        kw["copy"] = copy
    return self._data.__dlpack__(stream=stream, **kw)


def _dlpack_device(self):
    return self._data.__dlpack_device__()


Tensor.__dlpack__ = _dlpack
Tensor.__dlpack_device__ = _dlpack_device


class _Capsule:
    """Adapts a bare DLPack capsule (the legacy ``to_dlpack`` output) to the protocol."""

    def __init__(self, capsule):
        self._capsule = capsule

    def __dlpack__(self, stream=None, **kw):
        return self._capsule

    def __dlpack_device__(self):
        return (1, 0)  # kDLCPU: a capsule from a CPU library


def from_dlpack(ext_tensor):
    """A tensor sharing memory with another library's array (NumPy, PyTorch, JAX ...).

    Parameters
    ----------
    ext_tensor : object with ``__dlpack__``, or a DLPack capsule
        Must live on the CPU and have a dtype lucid supports.

    Examples
    --------
    >>> import lucid, numpy as np
    >>> a = np.arange(3.0)
    >>> t = lucid.from_dlpack(a); a[0] = 7.0
    >>> t.tolist()
    [7.0, 1.0, 2.0]
    """
    from .._core import dtypes

    src = ext_tensor if hasattr(ext_tensor, "__dlpack__") else _Capsule(ext_tensor)
    try:
        arr = np.from_dlpack(src)
    except (TypeError, BufferError, RuntimeError, ValueError) as e:
        raise DLPackError(f"from_dlpack: can't import this object ({e})") from None
    if not dtypes.supported(arr.dtype):
        raise TypeError(f"from_dlpack: dtype {arr.dtype} is not supported by lucid")
    return _wrap(arr)


def to_dlpack(tensor):
    """A DLPack capsule of ``tensor`` (legacy interface; prefer passing the tensor itself).

    As PyTorch's, it exports a tensor that requires grad too (its memory, outside the graph);
    ``tensor.__dlpack__`` refuses one.

    Examples
    --------
    >>> import lucid
    >>> from lucid.utils.dlpack import to_dlpack
    >>> lucid.from_dlpack(to_dlpack(lucid.ones(2, requires_grad=True))).tolist()
    [1.0, 1.0]
    """
    if not isinstance(tensor, Tensor):
        raise TypeError(f"to_dlpack: expected a Tensor, got {type(tensor).__name__}")
    return tensor._data.__dlpack__()


# ---------------------------------------------------------------------- predicates


def is_tensor(obj) -> bool:
    """Whether ``obj`` is a lucid Tensor.

    Examples
    --------
    >>> import lucid
    >>> lucid.is_tensor(lucid.zeros(1)), lucid.is_tensor([1.0])
    (True, False)
    """
    return isinstance(obj, Tensor)


def _need_tensor(x, op):
    if not isinstance(x, Tensor):
        raise TypeError(f"{op}: expected a Tensor, got {type(x).__name__}")
    return x


def is_floating_point(input) -> bool:
    """Whether ``input``'s dtype is a floating point type.

    Examples
    --------
    >>> import lucid
    >>> lucid.is_floating_point(lucid.zeros(1)), lucid.is_floating_point(lucid.arange(2))
    (True, False)
    """
    return _need_tensor(input, "is_floating_point").dtype.kind == "f"


def is_complex(input) -> bool:
    """Whether ``input``'s dtype is a complex type."""
    return _need_tensor(input, "is_complex").dtype.kind == "c"


def is_nonzero(input) -> bool:
    """Whether a one-element tensor is non-zero; an error for any other number of elements.

    Examples
    --------
    >>> import lucid
    >>> lucid.is_nonzero(lucid.tensor([0.5])), lucid.is_nonzero(lucid.tensor(0))
    (True, False)
    """
    n = _need_tensor(input, "is_nonzero")._data.size
    if n != 1:
        which = "no values" if n == 0 else "more than one value"
        raise RuntimeError(f"is_nonzero: Boolean value of Tensor with {which} is ambiguous")
    return bool(input._data.reshape(()).item())


def is_same_size(input, other) -> bool:
    """Whether two tensors have the same shape."""
    return tuple(_need_tensor(input, "is_same_size").shape) == tuple(_need_tensor(other, "is_same_size").shape)


def numel(input) -> int:
    """The number of elements of ``input``."""
    return _need_tensor(input, "numel").numel()


tensor_method("is_nonzero")(is_nonzero)
tensor_method("is_same_size")(is_same_size)

__all__ = ["from_dlpack", "is_complex", "is_floating_point", "is_nonzero", "is_same_size", "is_tensor",
           "numel", "to_dlpack"]
