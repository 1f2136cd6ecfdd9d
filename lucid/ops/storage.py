"""Storages and ``set_``: the memory a tensor views (``untyped_storage``, ``storage``), the
storage classes (``UntypedStorage``, ``TypedStorage`` and the legacy ``FloatStorage`` ...,
NOTE [Storage objects]) and making a tensor view other memory (``set_``), split from
``tensor_surface_more``."""
from __future__ import annotations

import math
import numbers
import warnings
import weakref

import numpy as np

from .._core import backend
from .._core.dtypes import as_lucid, get_default_dtype, qint8, qint32, quint8
from .._core.grad_mode import STATE, no_grad
from .._core.tensor import Tensor, _wrap
from .inplace import _bump, _check_leaf
from .tensor_surface import _leave_storage, _renamed, _size_args
from .tensor_surface_more import _attach, _lucid, _storage_span


# ---------------------------------------------------------------------------- storages


# NOTE [Storage objects]
# A storage is a window on memory, not an owner of it: it holds one array lying in the
# memory (``_array``; the owner is found when needed, ``shape.strided._owner``) and, for a
# tensor's storage, a weak reference to the tensor's root. Two storages are equal when they
# are the same memory. A storage made from nothing (``UntypedStorage(8)``,
# ``FloatStorage([1, 2])``, ``from_buffer``) owns a fresh zero-filled 1-d array (PyTorch's is
# uninitialized); on the CPU unless ``device=`` says otherwise (as PyTorch). Writes through a
# storage (``fill_``, ``copy_``, ``[i] = v``) change the memory of every tensor viewing it and,
# as in PyTorch, bump no version counter. ``resize_`` gives the storage new memory (the
# prefix copied): tensors made from it before keep the old memory (PyTorch's tensors would
# see the new one; NumPy can't grow memory that arrays view). As in PyTorch,
# :class:`TypedStorage` is not an :class:`UntypedStorage`; the legacy classes
# (``FloatStorage`` ...) make TypedStorages and ``isinstance(s, FloatStorage)`` asks for a
# CPU TypedStorage of float32.


def _element_dtype(dt):
    """The NumPy dtype of one element of a lucid dtype (quantized ones: their integer storage)."""
    return np.dtype(getattr(dt, "storage", None) or dt)


def _fresh_bytes(nbytes, device):
    return _lucid("zeros")(int(nbytes), dtype=_lucid("uint8"), device=device)._data


def _check_size(api, n):
    if isinstance(n, bool) or not isinstance(n, numbers.Integral) or n < 0:
        raise ValueError(f"{api}: size must be a non-negative int, got {n!r}")
    return int(n)


def _warn_typed():
    warnings.warn("TypedStorage is deprecated. It will be removed in the future and UntypedStorage will be the only "
                  "storage class. To access UntypedStorage directly, use tensor.untyped_storage() instead of "
                  "tensor.storage()", UserWarning, stacklevel=3)


class _Storage:
    """What both storage classes share (see NOTE [Storage objects])."""

    __slots__ = ("_array", "_root")

    @classmethod
    def _over(cls, array, root=None, dtype=None):
        """A storage of the memory ``array`` lies in (``root``: the tensor whose memory it is)."""
        obj = object.__new__(cls)
        obj._array, obj._root = array, None if root is None else weakref.ref(root)
        if dtype is not None:
            obj.dtype = as_lucid(dtype)
        return obj

    def _span(self):
        span = _storage_span(self._array)
        if span is None:
            raise NotImplementedError(f"{type(self).__name__}: a meta tensor's storage has no memory")
        return span

    device = property(lambda self: backend.device_of_array(self._array))
    data_ptr = lambda self: self._span()[1]  # noqa: E731
    nbytes = lambda self: self._span()[2]  # noqa: E731
    is_shared = lambda self: False  # noqa: E731  (no shared-memory segments)
    is_pinned = lambda self, device="cuda": False  # noqa: E731
    is_cuda = property(lambda self: self.device.type == "cuda")
    __hash__ = lambda self: hash(self._span())  # noqa: E731

    def _as(self, dtype):
        """The storage as a flat array of ``dtype`` (a view of its memory)."""
        from .shape.strided import _owner

        owner = _owner(self._array)
        if not (owner.flags.c_contiguous or owner.flags.f_contiguous):
            raise RuntimeError(f"{type(self).__name__}: the memory is not one contiguous block")
        flat = owner.ravel(order="K").view(np.uint8)
        return flat[: flat.shape[0] // dtype.itemsize * dtype.itemsize].view(dtype)

    def _elements(self):  # the flat array of this storage's elements (bytes for an untyped one)
        return self._as(np.dtype(np.uint8))

    def _index(self, i):
        if isinstance(i, bool) or not isinstance(i, numbers.Integral):
            raise TypeError(f"{type(self).__name__}: index must be an int, got {type(i).__name__}")
        n = len(self)
        if not -n <= i < n:
            raise IndexError(f"{type(self).__name__}: index {i} out of range for a storage of size {n}")
        return int(i) % n

    def __getitem__(self, i):
        i = self._index(i)
        return backend.host(self._elements()[i:i + 1]).tolist()[0]

    def __setitem__(self, i, value):
        """``s[i] = v`` or ``s[a:b] = v``: writes the memory (no version bump, as PyTorch)."""
        elements = self._elements()
        key = slice(*i.indices(len(self))) if isinstance(i, slice) else self._index(i)
        with backend.on_device(elements):
            elements[key] = value

    def __iter__(self):
        return iter(self.tolist())

    def tolist(self):
        return backend.host(self._elements()).tolist()

    def fill_(self, value):
        """Every element set to ``value``; returns the storage."""
        self[:] = value
        return self

    def copy_(self, source, non_blocking=None):
        """The bytes of ``source`` (a storage of as many bytes) copied in; returns the storage."""
        if not isinstance(source, _Storage):
            raise TypeError(f"copy_: expected a storage, got {type(source).__name__}")
        if source.nbytes() != self.nbytes():
            raise RuntimeError(f"copy_: size does not match, self was {self.nbytes()} bytes but src was "
                               f"{source.nbytes()} bytes")
        mine = self._as(np.dtype(np.uint8))
        with backend.on_device(mine):
            mine[...] = backend.namespace_of(mine).asarray(source._as(np.dtype(np.uint8)))
        return self

    def _resize_bytes(self, nbytes):
        old = self._as(np.dtype(np.uint8))
        new = _fresh_bytes(nbytes, self.device)
        keep = min(nbytes, old.shape[0])
        with backend.on_device(new):
            new[:keep] = old[:keep]
        self._array, self._root = new, None

    def cpu(self):
        return self if self.device.type == "cpu" else self._over(backend.host(self._as(np.dtype(np.uint8))).copy(),
                                                                   dtype=getattr(self, "dtype", None))

    def __eq__(self, other):
        return type(other) is type(self) and self._span() == other._span()


class UntypedStorage(_Storage):
    """Memory as bytes (PyTorch's ``torch.UntypedStorage``): from :meth:`Tensor.untyped_storage`,
    or new: ``UntypedStorage(nbytes)`` (zeros), ``UntypedStorage([byte, ...])``.
    See NOTE [Storage objects].

    Examples
    --------
    >>> import lucid
    >>> x = lucid.arange(4, dtype=lucid.int32)
    >>> s = x[1:].untyped_storage()
    >>> s.nbytes(), s.data_ptr() == x.data_ptr(), s == x.untyped_storage(), s.tolist()[4:8]
    (16, True, True, [1, 0, 0, 0])
    >>> lucid.UntypedStorage(3).fill_(7).tolist()
    [7, 7, 7]
    """

    __slots__ = ()

    def __init__(self, *args, device="cpu"):
        if len(args) > 1:
            raise TypeError(f"UntypedStorage: expected a size or a sequence of bytes, got {len(args)} arguments")
        data = args[0] if args else 0
        if isinstance(data, numbers.Integral) and not isinstance(data, bool):
            self._array, self._root = _fresh_bytes(_check_size("UntypedStorage", data), device), None
        else:
            self._array, self._root = _lucid("tensor")(list(data), dtype=_lucid("uint8"), device=device)._data, None

    size = __len__ = lambda self: self.nbytes()  # noqa: E731
    element_size = lambda self: 1  # noqa: E731
    untyped = lambda self: self  # noqa: E731

    def resize_(self, size):
        """New memory of ``size`` bytes, the prefix kept (NOTE [Storage objects]); returns the storage."""
        self._resize_bytes(_check_size("resize_", size))
        return self

    def clone(self):
        return self._over(_lucid_copy(self._as(np.dtype(np.uint8))))

    def type(self, dtype=None, non_blocking=False):  # noqa: A003
        return "lucid.storage.UntypedStorage" if dtype is None else TypedStorage(wrap_storage=self, dtype=dtype)

    @classmethod
    def from_buffer(cls, buffer, byte_order=None, count=-1, offset=0, dtype=None):
        """A new storage holding a copy of ``buffer``'s bytes (``dtype``: a TypedStorage of it)."""
        if dtype is not None:
            return TypedStorage.from_buffer(buffer, byte_order, count, offset, dtype=dtype).untyped()
        data = np.frombuffer(buffer, dtype=np.uint8, count=count, offset=offset)
        return cls._over(data.copy())

    def __repr__(self):
        return f"lucid.UntypedStorage(device={self.device}) of size {self.nbytes()}"


class TypedStorage(_Storage):
    """Memory as elements of a dtype (PyTorch's deprecated ``torch.TypedStorage``): from
    :meth:`Tensor.storage`, or new: ``TypedStorage(n, dtype=...)`` (zeros),
    ``TypedStorage([values], dtype=...)``, ``TypedStorage(wrap_storage=untyped, dtype=...)``
    (that memory). ``size()``, ``tolist()`` and indices count elements. See NOTE [Storage
    objects].

    Examples
    --------
    >>> import lucid, warnings
    >>> warnings.simplefilter("ignore")
    >>> s = lucid.TypedStorage([1.5, 2.5], dtype=lucid.float64)
    >>> s.size(), s.nbytes(), s[1], isinstance(s, lucid.DoubleStorage)
    (2, 16, 2.5, True)
    """

    __slots__ = ("dtype",)

    def __init__(self, *args, dtype=None, device=None, wrap_storage=None, _internal=False):
        if not _internal:
            _warn_typed()
        self.dtype = get_default_dtype() if dtype is None else as_lucid(dtype)
        self._root = None
        if wrap_storage is not None:
            if args or device is not None:
                raise RuntimeError("TypedStorage: with wrap_storage, no positional arguments nor device may be given")
            if not isinstance(wrap_storage, UntypedStorage):
                raise TypeError(f"TypedStorage: wrap_storage must be an UntypedStorage, got "
                                f"{type(wrap_storage).__name__}")
            self._array, self._root = wrap_storage._array, wrap_storage._root
            return
        if len(args) > 1:
            raise TypeError(f"TypedStorage: expected a size or a sequence, got {len(args)} arguments")
        data, device = (args[0] if args else 0), "cpu" if device is None else device
        if isinstance(data, numbers.Integral) and not isinstance(data, bool):
            n = _check_size("TypedStorage", data)
            self._array = _fresh_bytes(n * _element_dtype(self.dtype).itemsize, device)
        else:
            values = _lucid("tensor")(list(data), dtype=self._tensor_dtype(), device=device)
            self._array = values._data

    def _tensor_dtype(self):
        if getattr(self.dtype, "storage", None) is not None:
            raise NotImplementedError(f"TypedStorage: values of the quantized dtype {self.dtype} can't be given as "
                                      "a list; make the storage by size or wrap an UntypedStorage")
        return self.dtype

    def _elements(self):
        return self._as(_element_dtype(self.dtype))

    def untyped(self):
        return UntypedStorage._over(self._array, self._root and self._root())

    element_size = lambda self: _element_dtype(self.dtype).itemsize  # noqa: E731
    size = __len__ = lambda self: self.nbytes() // self.element_size()  # noqa: E731
    __hash__ = lambda self: hash((self.dtype, self._span()))  # noqa: E731

    def __eq__(self, other):
        return _Storage.__eq__(self, other) and self.dtype == other.dtype

    def resize_(self, size):
        """New memory of ``size`` elements, the prefix kept (NOTE [Storage objects]); returns None,
        as PyTorch's."""
        self._resize_bytes(_check_size("resize_", size) * self.element_size())

    def clone(self):
        return TypedStorage._over(_lucid_copy(self._elements()), dtype=self.dtype)

    def type(self, dtype=None, non_blocking=False):  # noqa: A003
        """The legacy class name (``"lucid.FloatStorage"``), or a copy as another storage type."""
        if dtype is None:
            return f"lucid.{_LEGACY_NAMES.get(self.dtype, 'TypedStorage')}"
        target = getattr(dtype, "dtype", dtype) if isinstance(dtype, type) else dtype
        return self._to(target)

    def _to(self, dtype):
        dtype = as_lucid(dtype)
        if dtype == self.dtype:
            return self
        values = _wrap(self._elements()).to(dtype)
        return TypedStorage._over(values._data, dtype=dtype)

    def __array__(self, dtype=None, copy=None):
        """The elements on the host (``lucid.tensor(storage)`` copies them; see the report on sharing)."""
        out = backend.host(self._elements())
        return out if dtype is None else out.astype(dtype)

    @classmethod
    def from_buffer(cls, buffer, byte_order=None, count=-1, offset=0, *, dtype=None):
        """A new storage of ``buffer``'s values: ``byte_order`` ("native", "little", "big") is
        required for elements wider than a byte; ``count`` elements (-1: all) from byte ``offset``."""
        dtype = as_lucid(dtype if dtype is not None else getattr(cls, "_legacy_dtype", None)
                         or get_default_dtype())
        element = _element_dtype(dtype)
        if element.itemsize > 1:
            if byte_order is None:
                raise RuntimeError("from_buffer: function missing required argument 'byte_order' (pos 2)")
            if byte_order not in ("native", "little", "big"):
                raise ValueError(f"from_buffer: byte_order must be 'native', 'little' or 'big', got {byte_order!r}")
            element = element.newbyteorder("=" if byte_order == "native" else "<" if byte_order == "little" else ">")
        data = np.frombuffer(buffer, dtype=element, count=count, offset=offset)
        return TypedStorage._over(data.astype(_element_dtype(dtype).newbyteorder("="), copy=True), dtype=dtype)

    def __repr__(self):
        return f"lucid.TypedStorage(dtype={self.dtype}, device={self.device}) of size {self.size()}"


for _name, _dt in (("float", "float32"), ("double", "float64"), ("half", "float16"), ("long", "int64"),
                   ("int", "int32"), ("short", "int16"), ("char", "int8"), ("byte", "uint8"), ("bool", "bool"),
                   ("complex_float", "complex64"), ("complex_double", "complex128")):
    setattr(TypedStorage, _name, (lambda target: lambda self: self._to(target))(_dt))


def _lucid_copy(arr):
    with backend.on_device(arr):
        return arr.copy()


class _LegacyStorageMeta(type):
    """``isinstance(s, FloatStorage)``: a CPU TypedStorage of float32 (PyTorch's rule)."""

    def __instancecheck__(cls, obj):
        if cls is _LegacyStorage:
            return type.__instancecheck__(cls, obj)
        return type(obj) is TypedStorage and obj.dtype == cls._legacy_dtype and obj.device.type == "cpu"

    @property
    def dtype(cls):
        return cls._legacy_dtype


class _LegacyStorage(TypedStorage, metaclass=_LegacyStorageMeta):
    """Base of ``FloatStorage`` and friends: calling one makes a :class:`TypedStorage` of its dtype."""

    __slots__ = ()
    _legacy_dtype = None

    def __new__(cls, *args, **kwargs):
        if "dtype" in kwargs:
            raise RuntimeError(f"{cls.__name__}: the dtype is fixed by the class; don't pass dtype")
        _warn_typed()
        return TypedStorage(*args, dtype=cls._legacy_dtype, _internal=True, **kwargs)

    @classmethod
    def from_buffer(cls, buffer, byte_order=None, count=-1, offset=0):
        return TypedStorage.from_buffer(buffer, byte_order, count, offset, dtype=cls._legacy_dtype)


def _legacy_class(name, dt):
    return _LegacyStorageMeta(name, (_LegacyStorage,), {"__slots__": (), "_legacy_dtype": dt, "__module__": "lucid",
                                                         "__doc__": f"Legacy storage class of {dt} elements "
                                                                    "(makes a TypedStorage; NOTE [Storage objects])."})


_LEGACY = {"FloatStorage": "float32", "DoubleStorage": "float64", "HalfStorage": "float16", "LongStorage": "int64",
           "IntStorage": "int32", "ShortStorage": "int16", "CharStorage": "int8", "ByteStorage": "uint8",
           "BoolStorage": "bool", "ComplexFloatStorage": "complex64", "ComplexDoubleStorage": "complex128",
           "QInt8Storage": "qint8", "QUInt8Storage": "quint8", "QInt32Storage": "qint32"}
_LEGACY_NAMES = {}
for _name, _dt in _LEGACY.items():
    _dt = {"qint8": qint8, "quint8": quint8, "qint32": qint32}.get(_dt) or as_lucid(_dt)
    globals()[_name] = _legacy_class(_name, _dt)
    _LEGACY_NAMES[_dt] = _name
del _name, _dt

__all__ = ["UntypedStorage", "TypedStorage", *_LEGACY]


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
    return UntypedStorage._over(self._data, _root_of(self))


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
    return TypedStorage._over(self._data, _root_of(self), self.dtype)


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
    if source is not None and not isinstance(source, (Tensor, _Storage)):
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


def _tensor_sharing(storage):
    """A 1-d tensor viewing all of ``storage`` (its dtype; bytes for an untyped one): what
    ``lucid.tensor(storage)`` gives in PyTorch (memory shared, not copied)."""
    if not isinstance(storage, _Storage):
        raise TypeError(f"expected a storage, got {type(storage).__name__}")
    dtype = getattr(storage, "dtype", None) or _lucid("uint8")
    out = _lucid("empty")(0, dtype=dtype, device=storage.device)
    with no_grad():
        return out.set_(storage)
