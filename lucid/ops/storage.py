"""Storages and ``set_``: the memory a tensor views (``untyped_storage``, ``storage``) and
making a tensor view other memory (``set_``), split from ``tensor_surface_more``."""
from __future__ import annotations

import math
import numbers
import warnings
import weakref

import numpy as np

from .._core import backend
from .._core.dtypes import as_lucid
from .._core.grad_mode import STATE, no_grad
from .._core.tensor import Tensor, _wrap
from .inplace import _bump, _check_leaf
from .tensor_surface import _leave_storage, _renamed, _size_args
from .tensor_surface_more import _attach, _lucid, _storage_span


# ---------------------------------------------------------------------------- storages


class UntypedStorage:
    """The memory a tensor views, as bytes (PyTorch's ``torch.UntypedStorage``), from
    :meth:`Tensor.untyped_storage`. Two storages are equal when they are the same memory.

    Examples
    --------
    >>> import lucid
    >>> x = lucid.arange(4, dtype=lucid.int32)
    >>> s = x[1:].untyped_storage()
    >>> s.nbytes(), s.data_ptr() == x.data_ptr(), s == x.untyped_storage(), s.tolist()[4:8]
    (16, True, True, [1, 0, 0, 0])
    """

    __slots__ = ("_array", "_root")

    def __init__(self, array, root=None):
        self._array = array  # any array lying in the memory (its owner is found when needed)
        self._root = None if root is None else weakref.ref(root)

    def _span(self):
        span = _storage_span(self._array)
        if span is None:
            raise NotImplementedError(f"{type(self).__name__}: a meta tensor's storage has no memory")
        return span

    device = property(lambda self: backend.device_of_array(self._array))
    data_ptr = lambda self: self._span()[1]  # noqa: E731
    nbytes = size = __len__ = lambda self: self._span()[2]  # noqa: E731
    element_size = lambda self: 1  # noqa: E731
    untyped = lambda self: self  # noqa: E731
    __hash__ = lambda self: hash(self._span())  # noqa: E731

    def _as(self, dtype):
        """The storage as a flat array of ``dtype`` (a view of its memory)."""
        from .shape.strided import _owner

        owner = _owner(self._array)
        if not (owner.flags.c_contiguous or owner.flags.f_contiguous):
            raise RuntimeError(f"{type(self).__name__}: the memory is not one contiguous block")
        flat = owner.ravel(order="K").view(np.uint8)
        return flat[: flat.shape[0] // dtype.itemsize * dtype.itemsize].view(dtype)

    def tolist(self):
        return backend.host(self._as(np.dtype(np.uint8))).tolist()

    def __getitem__(self, i):
        if not isinstance(i, numbers.Integral):
            raise TypeError(f"{type(self).__name__}: index must be an int, got {type(i).__name__}")
        return self.tolist()[i]

    def __eq__(self, other):
        return type(other) is type(self) and self._span() == other._span()

    def __repr__(self):
        return f"lucid.UntypedStorage(device={self.device}) of size {self.nbytes()}"


class TypedStorage(UntypedStorage):
    """The memory a tensor views, as elements of its dtype (PyTorch's deprecated
    ``torch.TypedStorage``), from :meth:`Tensor.storage`: ``size()`` and ``tolist()`` count
    elements."""

    __slots__ = ("dtype",)

    def __init__(self, array, root, dtype):
        super().__init__(array, root)
        self.dtype = as_lucid(dtype)

    untyped = lambda self: UntypedStorage(self._array, self._root and self._root())  # noqa: E731
    element_size = lambda self: self.dtype.itemsize  # noqa: E731
    size = __len__ = lambda self: self.nbytes() // self.dtype.itemsize  # noqa: E731
    tolist = lambda self: backend.host(self._as(np.dtype(self.dtype))).tolist()  # noqa: E731
    __hash__ = lambda self: hash((self.dtype, self._span()))  # noqa: E731

    def __eq__(self, other):
        return UntypedStorage.__eq__(self, other) and self.dtype == other.dtype

    def __repr__(self):
        return f"lucid.TypedStorage(dtype={self.dtype}, device={self.device}) of size {self.size()}"


def _root_of(t):
    return t if t._base is None else t._base


@_attach("untyped_storage")
def untyped_storage(self):
    """The memory this tensor views, as an :class:`UntypedStorage` of bytes (its root base's
    memory, from the lowest address).

    Examples
    --------
    >>> import lucid
    >>> x = lucid.zeros(2, 3)
    >>> x.t().untyped_storage().nbytes(), x[1].untyped_storage() == x.untyped_storage()
    (24, True)
    """
    return UntypedStorage(self._data, _root_of(self))


@_attach("storage")
def storage(self):
    """The memory this tensor views, as a deprecated :class:`TypedStorage` of its dtype (warns,
    as PyTorch; prefer :meth:`Tensor.untyped_storage`).

    Examples
    --------
    >>> import lucid
    >>> s = lucid.arange(3.0)[1:].storage()  # and a UserWarning
    >>> s.size(), s.tolist()
    (3, [0.0, 1.0, 2.0])
    """
    warnings.warn("storage: TypedStorage is deprecated. It will be removed in the future and UntypedStorage will be "
                  "the only storage class. To access UntypedStorage directly, use tensor.untyped_storage() instead "
                  "of tensor.storage()", UserWarning, stacklevel=2)
    return TypedStorage(self._data, _root_of(self), self.dtype)


# NOTE [Set_]
# ``x.set_(source, ...)`` makes x view other memory: x keeps its identity, takes the geometry
# asked for, and becomes a view (``_base``) of the source's root, so an in-place change of x in
# a graph rebases that root (NOTE [In-place semantics]); ``set_()`` gives x an empty storage of
# its own. As for ``resize_`` past its storage (NOTE [In-place layout changes]), a copy of x's
# old state takes x's place in its views' records. x keeps a version counter of its own, bumped,
# as in PyTorch (sharing the source's would make a tensor saved as x look unchanged when both
# counts happen to agree, and bumping the source's would fail the source's saved values).
# Autograd does not go through set_ (PyTorch's has no derivative): in grad mode neither x nor
# the source may require grad, and x may not have a history; nor under a transform.


def _check_set(self, source):
    if self._level or (isinstance(source, Tensor) and source._level):
        raise RuntimeError("set_: can't change the storage of a tensor of an active transform")
    if STATE.grad_enabled:
        if self._rg:
            _check_leaf("set_", self)
        if self._rg or (isinstance(source, Tensor) and source._rg):
            raise RuntimeError("set_: not differentiable: in grad mode neither the tensor nor the source may "
                               "require grad (use lucid.no_grad(), or .detach() the source)")
    if self.grad_fn is not None:
        raise RuntimeError("set_: can't change the storage of a tensor that has autograd history (grad_fn); "
                           "detach() it first")
    if isinstance(source, Tensor) and source.device != self.device:
        raise RuntimeError(f"set_: the source is on {source.device} and the tensor on {self.device}")


def _source_array(self, source):
    """An array in the source's memory with this tensor's dtype, and the source's root tensor."""
    want = np.dtype(self.dtype)
    if isinstance(source, Tensor):
        if source.dtype != self.dtype:
            raise RuntimeError(f"set_: Could not set a tensor of type {source.dtype} to a tensor of type "
                               f"{self.dtype}")
        return source._data, _root_of(source)
    if isinstance(source, TypedStorage) and source.dtype != self.dtype:
        raise RuntimeError(f"set_: Could not set a storage of type {source.dtype} to a tensor of type {self.dtype}")
    if source.device != self.device:
        raise RuntimeError(f"set_: the storage is on {source.device} and the tensor on {self.device}")
    return source._as(want), source._root and source._root()


@_attach("set_")
def set_(self, source=None, storage_offset=None, size=None, stride=None):
    """Make this tensor view other memory, in place (see NOTE [Set_]).

    ``set_()``: an empty tensor with a storage of its own. ``set_(t)``: share ``t``'s memory
    with its geometry (same dtype and device). ``set_(t_or_storage, storage_offset, size,
    stride=None)``: the geometry given (in elements of the storage, row-major strides by
    default), within the storage (Lucid can't grow a storage other tensors share).
    ``t_or_storage`` may be a :class:`UntypedStorage`/:class:`TypedStorage`.

    Examples
    --------
    >>> import lucid
    >>> y = lucid.arange(6.0)
    >>> x = lucid.zeros(2)
    >>> x.set_(y, 1, (2, 2)) is x, x
    (True, tensor([[1., 2.],
            [3., 4.]]))
    >>> x[0, 0] = 9.0
    >>> y
    tensor([0., 9., 2., 3., 4., 5.])
    """
    if source is not None and not isinstance(source, (Tensor, UntypedStorage)):
        raise TypeError(f"set_: expected a Tensor or a storage as the source, got {type(source).__name__}")
    _check_set(self, source)
    if source is None:
        data, root = _lucid("empty")(0, dtype=self.dtype, device=self.device)._data, None
    else:
        arr, root = _source_array(self, source)
        if storage_offset is not None and size is None:
            raise TypeError("set_: a storage_offset needs a size (set_(source, storage_offset, size, stride))")
        if size is None and isinstance(source, Tensor):
            data = arr.view()
        else:
            data = _strided_in(arr, storage_offset, size, stride)
    old = _leave_storage(self)
    if root is self:  # the source is self or one of its views: their memory is now old's
        root = old
    if isinstance(source, Tensor) and source._base is self:
        source._base = old
    self._data, self._base, self._view_src = data, root, None
    self._version = [self._version[0]]
    _bump(self, "set_")
    return self


def _strided_in(arr, offset, size, stride):
    """A view of ``arr``'s storage with the given geometry (bounds checked by ``as_strided``)."""
    from .shape.strided import storage_geometry

    if size is None:  # set_(storage): all of it, 1-d (arr is a whole storage's flat view)
        size = (storage_geometry(arr)[3],)
    size = _size_args("set_", (size,)) if not isinstance(size, numbers.Integral) else (int(size),)
    if stride is None or (isinstance(stride, (tuple, list)) and len(stride) == 0):
        stride = tuple(math.prod(size[d + 1:]) for d in range(len(size)))
    offset = 0 if offset is None else int(offset)
    try:
        with no_grad():
            return _lucid("as_strided")(_wrap(arr), size, tuple(stride), offset)._data
    except (RuntimeError, ValueError, IndexError, TypeError) as e:
        raise _renamed("set_", e) from None
