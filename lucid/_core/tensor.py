"""The Tensor: an ndarray plus the autograd bookkeeping.

Operator and method definitions live with their ops (``lucid/ops``) and are attached
to this class by :func:`tensor_method`, so this file holds only state and conversions.
"""
from __future__ import annotations

import builtins
import copy

import numpy as np

from . import backend, dtypes, primitive
from .dtypes import _LUCID
from .grad_mode import SUBCLASS_DISPATCH
from .hooks import RemovableHandle
from .no_values import NoValues
from .size import Size, as_size


def _disabled_torch_function_impl(func, types, args=(), kwargs=None):
    """``__torch_function__ = _disabled_torch_function_impl`` on a Tensor subclass opts it out of
    the protocol (PyTorch's ``torch._C._disabled_torch_function_impl``): its instances behave as
    plain tensors and ops on them return plain tensors (``nn.Parameter`` does this)."""
    from ..overrides import DisableTorchFunctionSubclass

    with DisableTorchFunctionSubclass():
        return func(*args, **(kwargs or {}))


def _init_made_by_new(self, *args, **kwargs):
    """``__init__`` of a Tensor subclass whose ``__new__`` made the tensor: nothing left to do."""


def _disabled_torch_dispatch_impl(func, types, args=(), kwargs=None):
    """``Tensor.__torch_dispatch__``: run ``func`` with subclass dispatch off (PyTorch's
    ``torch._C._disabled_torch_dispatch_impl``); a subclass that keeps this one takes no part in
    NOTE [Tensor subclass dispatch] (lucid/utils/_python_dispatch.py)."""
    from ..utils._python_dispatch import DisableTorchDispatch

    with DisableTorchDispatch():
        return func(*args, **(kwargs or {}))


class WrapperValues(NoValues):
    """The ``_data`` of a wrapper subclass (``Tensor._make_wrapper_subclass``): the shape, dtype,
    device and strides it advertises, and no values (they live in its inner tensors), so a raw
    array computation that reaches it raises NotImplementedError naming the op."""

    __slots__ = ("device", "strides", "offset", "cls_name")
    kind = "wrapper subclass"

    @property
    def message(self):
        return (f"a {self.cls_name} is a wrapper tensor subclass: its values live in its inner tensors, "
                "so only ops that reach its __torch_dispatch__ can use it (this code read its raw array)")

    # arithmetic and ordering a composite might try on the raw array (a bounds check reading
    # an index) are refused with the message too, not with Python's TypeError
    __lt__ = __le__ = __gt__ = __ge__ = __add__ = __radd__ = __sub__ = __rsub__ = NoValues._refuse
    __mul__ = __rmul__ = __truediv__ = __rtruediv__ = __neg__ = __pow__ = __matmul__ = NoValues._refuse
    __and__ = __or__ = __xor__ = __invert__ = NoValues._refuse

    @property
    def itemsize(self):
        return self.dtype.itemsize

    @property
    def flags(self):
        return _WrapperFlags(self)


class _WrapperFlags:
    """``WrapperValues.flags``: whether its strides are row-major; any other flag (``owndata``,
    ``writeable``: code about to use the memory) is refused like the values."""

    __slots__ = ("c_contiguous", "_values")

    def __init__(self, values):
        self._values = values
        self.c_contiguous = values.strides == _contiguous_strides(values.shape, values.dtype.itemsize)

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        self._values._refuse()


def _contiguous_strides(shape, itemsize):
    """Row-major strides in bytes (PyTorch counts a size-0 or size-1 dim as 1 element)."""
    out, step = [], itemsize
    for n in reversed(shape):
        out.append(step)
        step *= builtins.max(n, 1)
    return tuple(reversed(out))


# ``Tensor._grad_dtype`` by default: gradients take the tensor's own dtype (see ``grad_dtype``)
SAME_DTYPE = type("SameDtype", (), {"__repr__": lambda self: "SAME_DTYPE"})()


class Tensor:
    """A multi-dimensional array that can record operations for autograd.

    Parameters
    ----------
    data : array_like
        Values; Python floats become ``float32`` (PyTorch's default).
    requires_grad : bool
        Record operations on this tensor so gradients can flow to it.
    dtype : dtype, optional

    Examples
    --------
    >>> import lucid
    >>> x = lucid.tensor([1.0, 2.0], requires_grad=True)
    >>> (x * x).sum().backward()
    >>> x.grad
    tensor([2., 4.])
    """

    # Instance state is `_data` and `_version` (a one-element list shared by a base and
    # all its views); everything else defaults to these class attributes until set, so
    # making a tensor on the hot path costs two attribute writes.
    __array_priority__ = 1000
    _level = 0  # eager tensors belong to no transform. See NOTE [Levels]
    _rg = False
    _grad = None
    grad_fn = None
    _out_idx = 0
    _base = None
    _views = None  # on a base: weak refs to its views, in creation order (NOTE [View replay])
    _view_src = None  # on a view: (prim, params, args) that made it from its parent
    _multi_out = None  # on an output of split/unbind: (function, index); NOTE [Multi-output views]
    _hooks = None
    _post_hooks = None  # register_post_accumulate_grad_hook (leaves only)
    _retains = False
    # the dtype backward stores in ``.grad`` (PyTorch 2.13's ``grad_dtype``): the tensor's own
    # (this marker), a dtype (e.g. float32 gradients of float16 weights), or None (as it comes)
    _grad_dtype = SAME_DTYPE

    # NOTE [Torch function] in lucid/overrides.py: a subclass keeps its class through ops, and
    # one that overrides this gets every public function call; nothing is paid until one exists.
    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        from ..overrides import _default_torch_function

        if SUBCLASS_DISPATCH[0] and cls is not Tensor:  # NOTE [Tensor subclass dispatch]
            from ..utils._python_dispatch import _subclass_torch_function

            return _subclass_torch_function(cls, func, types, args, kwargs)
        return _default_torch_function(cls, func, types, args, kwargs)

    # A subclass that defines its own takes part in NOTE [Tensor subclass dispatch]
    # (lucid/utils/_python_dispatch.py): every primitive that sees one of its instances calls it.
    # A staticmethod object, so the __torch_function__ protocol does not wrap it as a method.
    __torch_dispatch__ = staticmethod(_disabled_torch_dispatch_impl)

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        if "__new__" in cls.__dict__ and cls.__init__ is Tensor.__init__:
            # a subclass whose __new__ builds it (Tensor._make_subclass) takes its own arguments,
            # which PyTorch's Tensor.__init__ ignores: so does this one
            cls.__init__ = _init_made_by_new
        impl = cls.__torch_dispatch__
        if getattr(impl, "__func__", impl) is not _disabled_torch_dispatch_impl:
            from ..utils._python_dispatch import _register_dispatch_subclass

            _register_dispatch_subclass(cls)
        impl = cls.__torch_function__
        if getattr(impl, "__func__", impl) is not _disabled_torch_function_impl:
            from .. import overrides

            overrides._activate()

    def __init__(self, data=None, requires_grad=False, dtype=None, device=None, *more_sizes):
        if self.__class__ is not Tensor and "_data" in self.__dict__:
            return  # a subclass's __new__ made it (Tensor._make_subclass): its values are set, as PyTorch's
        # PyTorch's legacy constructor: ``Tensor(5, 3)`` / ``Tensor(size)`` is an uninitialised
        # tensor of that shape, and values that are not a tensor take the default dtype
        # (``Tensor([1, 2])`` is float32, as ``torch.Tensor``'s).
        if data.__class__ is int or isinstance(data, (Size, np.integer)):  # a NumPy integer too, as PyTorch's
            rest = (requires_grad, dtype, device) + more_sizes
            ints = 0
            if not isinstance(data, Size):  # positional sizes go on while they are ints
                while ints < len(rest) and (rest[ints].__class__ is int or isinstance(rest[ints], np.integer)):
                    ints += 1
            if any(v is not None and v is not False for v in rest[ints:]):
                raise TypeError(f"Tensor: a size must be all ints, got {(data,) + rest[:ints + 1]}")
            sizes = tuple(data) if isinstance(data, Size) else tuple(int(s) for s in (data,) + rest[:ints])
            data, requires_grad, dtype, device = np.zeros(sizes, dtypes.get_default_dtype()), False, None, None
        elif more_sizes:
            raise TypeError(f"Tensor: too many arguments ({len(more_sizes) + 4})")
        elif dtype is None and data is not None and not isinstance(data, Tensor) and not _is_np_scalar(data) \
                and not isinstance(data, (bool, int, float, complex)):
            dtype = dtypes.get_default_dtype()
        dev = backend.check_device(device if device is not None or not isinstance(data, Tensor)
                                   else data.device)
        arr = _to_array(data if data is not None else [], dtype)
        if dev is not backend.CPU or arr.__class__ is not np.ndarray:
            arr = backend.to_device(arr, dev)
        self._data = arr
        self._rg = False
        self._grad = None
        self.grad_fn = None
        self._out_idx = 0
        self._version = [0]
        self._base = None
        self._hooks = None
        self._retains = False
        if requires_grad:
            self.requires_grad = True

    # ----------------------------------------------------------------- metadata
    @property
    def shape(self):
        return as_size(self._data.shape)

    def size(self, dim=None, *, axis=None):
        s = self.shape
        if axis is not None:  # NOTE [NumPy keyword aliases] (ops/numpy_aliases.py)
            if dim is not None:
                raise TypeError("size() received both dim and its alias axis")
            dim = axis
        return s if dim is None else s[dim]

    @property
    def ndim(self):
        return len(self.shape)

    def dim(self):
        return self.ndim

    @property
    def dtype(self):
        return _LUCID[self._data.dtype]  # See NOTE [Dtype objects]

    @property
    def device(self):
        arr = self._data
        if arr.__class__ is np.ndarray:
            return backend.CPU
        if arr.__class__ is WrapperValues:  # a wrapper subclass advertises its device
            return arr.device
        return backend.device_of_array(arr)

    def get_device(self):
        """The CUDA ordinal of this tensor's device, or -1 on the CPU (PyTorch's rule)."""
        d = self.device
        return -1 if d.type == "cpu" else (d.index or 0)

    def numel(self):
        return int(np.prod(self.shape, dtype=np.int64))

    nelement = numel

    def element_size(self):
        return self.dtype.itemsize

    @property
    def is_leaf(self):
        return self.grad_fn is None

    def is_floating_point(self):
        return self.dtype.kind == "f"

    def is_complex(self):
        return self.dtype.kind == "c"

    @property
    def requires_grad(self):
        return self._rg

    @requires_grad.setter
    def requires_grad(self, flag):
        flag = bool(flag)
        if not flag and self.grad_fn is not None:
            raise RuntimeError(
                "requires_grad: you can only change requires_grad flags of leaf tensors; "
                "use .detach() to get a tensor that does not require grad"
            )
        if flag and not dtypes.is_differentiable(self.dtype):
            raise RuntimeError(
                f"requires_grad: only floating point and complex tensors can require "
                f"gradients (got dtype {self.dtype})"
            )
        self._rg = flag

    def requires_grad_(self, requires_grad=True):
        self.requires_grad = requires_grad
        return self

    @property
    def grad(self):
        if self._grad is None and self.grad_fn is not None and not self._retains:
            import warnings

            warnings.warn(
                "The .grad attribute of a Tensor that is not a leaf Tensor is being accessed. "
                "Its .grad attribute won't be populated during backward(); call "
                ".retain_grad() on it first if you want the gradient of a non-leaf tensor.",
                UserWarning,
                stacklevel=2,
            )
        return self._grad

    @grad.setter
    def grad(self, value):
        if value is not None:
            if not isinstance(value, Tensor):
                raise TypeError(f"grad: assigned grad must be a Tensor or None, got {type(value).__name__}")
            if value.shape != self.shape:
                raise RuntimeError(
                    f"grad: assigned grad has shape {tuple(value.shape)} but the tensor has "
                    f"shape {tuple(self.shape)}"
                )
            want = self.dtype if self._grad_dtype is SAME_DTYPE else self._grad_dtype
            if want is not None and value.dtype != want:  # PyTorch's check: an optimizer would mix precisions
                raise RuntimeError(
                    f"grad: assigned grad has data of a different type ({value.dtype}) than the tensor's "
                    f"grad_dtype ({want}; the tensor's dtype unless grad_dtype is set: a dtype, or None "
                    "for any)")
        self._grad = value

    @property
    def grad_dtype(self):
        """The dtype backward gives ``.grad`` (leaves only): the tensor's dtype by default; set
        a dtype (e.g. float32 gradients for float16 weights) or None (gradients keep the
        dtype they arrive with).

        Examples
        --------
        >>> import lucid
        >>> w = lucid.ones(2, dtype=lucid.float16, requires_grad=True)
        >>> w.grad_dtype = lucid.float32
        >>> (w * 3).sum().backward()
        >>> w.grad.dtype
        lucid.float32
        """
        if self.grad_fn is not None:
            raise RuntimeError("grad_dtype can only be accessed on leaf tensors")
        want = self._grad_dtype
        return self.dtype if want is SAME_DTYPE else None if want is None else dtypes.as_lucid(want)

    @grad_dtype.setter
    def grad_dtype(self, dtype):
        if self.grad_fn is not None:
            raise RuntimeError("grad_dtype can only be set on leaf tensors")
        if dtype is not None:
            dtype = dtypes.to_dtype(dtype)
            if self._grad is not None and self._grad.dtype != dtype:
                raise RuntimeError(
                    f"grad_dtype: cannot set grad_dtype to {dtype} because there is already a gradient "
                    f"with dtype {self._grad.dtype}; clear it (.grad = None) first")
        self._grad_dtype = dtype

    @property
    def data(self):
        """A tensor sharing storage with this one but outside the graph."""
        return _wrap(self._data)  # a version counter of its own, as PyTorch's ``.data``

    @data.setter
    def data(self, value):
        value = value._data if isinstance(value, Tensor) else _to_array(value, None)
        self._data = value

    @property
    def is_cuda(self):
        return self.device.type == "cuda"

    @property
    def is_cpu(self):
        arr = self._data
        return arr.__class__ is np.ndarray or (arr.__class__ is WrapperValues and arr.device.type == "cpu")

    # ------------------------------------------------------------- conversions
    def numpy(self, *, force=False):
        """The values as an ndarray sharing memory; **read-only** if the tensor requires grad.

        A tensor that requires grad may be saved for a backward, so its values come back
        as a read-only view (writing raises NumPy's ``ValueError``: assignment destination
        is read-only) instead of PyTorch's error (Lucid 3 returns the data). Others, and
        ``force=True``, give the writable shared array, as in PyTorch. A tensor on a device
        (CUDA) raises PyTorch's TypeError ("Use Tensor.cpu()"); with ``force=True`` it is
        copied to the host, as PyTorch's ``t.detach().cpu().numpy()``.

        Examples
        --------
        >>> import lucid
        >>> w = lucid.tensor([1.0, 2.0], requires_grad=True)
        >>> w.numpy().flags.writeable
        False
        >>> w.detach().numpy().flags.writeable
        True
        """
        arr = self._data
        if arr.__class__ is not np.ndarray:
            if arr.__class__ is WrapperValues:  # no values of its own (NOTE [Tensor subclass dispatch])
                arr._refuse()
            b = backend.backend_of(arr)
            if force:
                return b.host_copy(arr)  # a host copy that shares nothing with the device array
            if not b.numpy_view:
                b.implicit_numpy(arr)  # raises PyTorch's "Use Tensor.cpu()" error
            arr = b.to_numpy(arr)
        if self._rg and not force:
            view = arr.view()
            view.flags.writeable = False
            return view
        return arr

    def __array__(self, dtype=None, copy=None):
        arr = self._data
        if arr.__class__ is not np.ndarray:
            if arr.__class__ is WrapperValues:
                arr._refuse()
            arr = backend.backend_of(arr).implicit_numpy(arr)
        return arr if dtype is None else arr.astype(dtype, copy=False)

    def item(self):
        arr = self._data
        if arr.size != 1:
            raise RuntimeError(
                f"item: a Tensor with {arr.size} elements cannot be converted to a Python scalar"
            )
        return arr.reshape(()).item()

    def tolist(self):
        return self._data.tolist()

    def __len__(self):
        if not self.shape:
            raise TypeError("len() of a 0-d tensor")
        return self.shape[0]

    def __iter__(self):
        if not self.shape:
            raise TypeError("iteration over a 0-d tensor")
        return (self[i] for i in range(self.shape[0]))

    def __bool__(self):
        if self.numel() != 1:
            raise RuntimeError(
                f"bool: the truth value of a Tensor with {self.numel()} elements is ambiguous; "
                "use .any() or .all()"
            )
        return bool(self._data.reshape(()).item())

    def __float__(self):
        if self._rg:  # PyTorch's warning (``item()`` and ``int()`` stay silent, as there)
            import warnings

            warnings.warn("Converting a tensor with requires_grad=True to a scalar may lead to unexpected "
                          "behavior.\nConsider using tensor.detach() first.", UserWarning, stacklevel=2)
        return float(_real_item(self, "double"))

    def __int__(self):
        return int(_real_item(self, "int64_t"))

    def __index__(self):
        # bool counts as an integer here, as in PyTorch (``[10, 20][lucid.tensor(True)]``)
        if self.dtype.kind not in "iub" or self.numel() != 1:
            raise TypeError("only integer tensors of a single element can be converted to an index")
        return int(self.item())

    def __hash__(self):
        return id(self)

    def __repr__(self):
        from .printing import tensor_repr  # lucid.set_printoptions (NOTE [Printing tensors])

        return tensor_repr(self)

    # no __str__ of its own: object.__str__ calls the class's __repr__, so a subclass overriding
    # __repr__ alone (a wrapper subclass) prints with it

    def __deepcopy__(self, memo):
        # PyTorch's protocol: leaves only; the copy keeps the class, requires_grad, a deep copy of
        # ``.grad`` and the Python attributes. A view whose base is copied in the same call (or
        # already was, through ``memo``) stays a view of that copy: storage sharing survives.
        if id(self) in memo:
            return memo[id(self)]
        if self.grad_fn is not None:
            raise RuntimeError("deepcopy: only Tensors created explicitly by the user (graph leaves) support "
                               "the deepcopy protocol at the moment")
        if self._data.__class__ is WrapperValues:  # a wrapper subclass: clone() through its handler
            from ..utils._python_dispatch import _deepcopy_wrapper

            return _deepcopy_wrapper(self, memo)
        if type(self).__reduce_ex__ is not Tensor.__reduce_ex__ or not backend.has_values(self._data):
            # a subclass with its own state (sparse, nested, quantized ...) or a meta tensor:
            # copied through its pickling protocol, as before
            return copy._reconstruct(self, memo, *self.__reduce_ex__(4))
        base = self._base
        if base is not None and id(base) in memo and base.is_contiguous() and base.storage_offset() == 0:
            from .grad_mode import no_grad

            with no_grad():
                new = memo[id(base)].as_strided(self.shape, self.stride(), self.storage_offset())
        else:
            with backend.on_device(self._data):
                new = _wrap(self._data.copy())
        if self.__class__ is not Tensor:
            new.__class__ = self.__class__
        memo[id(self)] = new
        new._rg = self._rg
        if self._grad is not None:
            new._grad = copy.deepcopy(self._grad, memo)
        for k, v in self.__dict__.items():  # user attributes; Tensor's own state is set above
            # (not ``_born``: the transform a tensor was made in, NOTE [Lifting a plain tensor])
            if k not in ("_data", "_version", "_born") and not hasattr(Tensor, k):
                new.__dict__[k] = copy.deepcopy(v, memo)
        return new

    def __reduce_ex__(self, protocol):
        # Pickling (e.g. to DataLoader workers) keeps values, the requires_grad flag and the
        # device (as a string; the values travel as a host array).
        if self._data.__class__ is np.ndarray:
            return (_rebuild, (self._data, self._rg))
        if backend.backend_of(self._data).type == "meta":  # a shape and a dtype (NOTE [Meta device])
            return (_rebuild_meta, (tuple(self.shape), str(self._data.dtype), self._rg))
        return (_rebuild, (backend.host(self._data), self._rg, str(self.device)))

    # --------------------------------------------------------------- autograd
    def detach(self):
        """A new tensor with the same data, outside any graph."""
        from ..ops import shape as _shape_ops  # noqa: F401  (registers detach)

        out = primitive.TN.detach(self)
        if out._level == 0 and out._base is not None:
            # PyTorch's detach shares memory and the version counter but is no view for autograd:
            # an in-place change through it must not rebase the tensor it came from
            out._base = out._view_src = None
            # nor may a transform's value enter the memory it shares (as torch.func refuses to
            # mutate a captured tensor through detach): NOTE [Lifting a plain tensor]
            out.__dict__.pop("_born", None)
        return out

    def detach_(self):
        if self._base is not None and self.__dict__.get("_view_src", True) is not None:  # set_ writes None
            raise RuntimeError("detach_: can't detach views in-place (this tensor is a view of another); "
                               "use detach() instead")
        self.grad_fn = None
        self._rg = False
        return self

    def retain_grad(self):
        """Keep ``.grad`` for this non-leaf tensor after ``backward``."""
        if not self._rg:
            raise RuntimeError("retain_grad: can't retain_grad on a Tensor that has requires_grad=False")
        if self.grad_fn is None:
            return
        self._retains = True
        self.grad_fn.add_retain(self._out_idx, self)

    @property
    def retains_grad(self):
        return self._retains

    def register_hook(self, hook):
        """Call ``hook(grad)`` when this tensor's gradient is computed; a returned tensor replaces it.

        Returns a handle with ``remove()``.
        """
        if not self._rg:
            raise RuntimeError("register_hook: cannot register a hook on a tensor that doesn't require gradient")
        if self.grad_fn is not None:
            return self.grad_fn.add_hook(self._out_idx, hook)
        if self._hooks is None:
            self._hooks = []
        self._hooks.append(hook)
        return _HookHandle(self._hooks, hook)

    def register_post_accumulate_grad_hook(self, hook):
        """Call ``hook(tensor)`` right after a backward has accumulated into this leaf's ``.grad``.

        The hook runs as soon as this leaf's gradient of the running backward is complete
        (possibly before the backward ends: see NOTE [Backward callbacks and post-accumulate
        hooks] in ``lucid/autograd/engine.py``), reads ``tensor.grad``, and returns None.
        Only leaves that require grad can have one (PyTorch's rule). Returns a handle with
        ``remove()``.

        Examples
        --------
        >>> import lucid
        >>> w = lucid.tensor([1.0, 2.0], requires_grad=True)
        >>> seen = []
        >>> h = w.register_post_accumulate_grad_hook(lambda t: seen.append(t.grad.tolist()))
        >>> (w * w).sum().backward()
        >>> seen
        [[2.0, 4.0]]
        >>> h.remove()
        """
        if not self._rg:
            raise RuntimeError("register_post_accumulate_grad_hook: cannot register a hook on a "
                               "tensor that doesn't require gradient")
        if self.grad_fn is not None:
            raise RuntimeError("register_post_accumulate_grad_hook: post accumulate grad hooks "
                               "cannot be registered on non-leaf tensors")
        if not callable(hook):
            raise TypeError(f"register_post_accumulate_grad_hook: expected a callable, got {type(hook).__name__}")
        if self._post_hooks is None:
            self._post_hooks = []
        self._post_hooks.append(hook)
        _POST_HOOKS[0] += 1
        return _PostHookHandle(self._post_hooks, hook)

    def backward(self, gradient=None, retain_graph=None, create_graph=False, inputs=None):
        """Accumulate the gradient of this tensor into the ``.grad`` of graph leaves.

        Parameters
        ----------
        gradient : Tensor, optional
            Cotangent of the same shape; required unless the tensor has one element.
        retain_graph : bool, optional
            Keep the graph for another backward (defaults to ``create_graph``).
        create_graph : bool
            Record the backward itself, for higher-order derivatives.
        inputs : sequence of Tensor, optional
            Accumulate only into these tensors.
        """
        from ..autograd.engine import backward

        if SUBCLASS_DISPATCH[0]:  # a graph of wrapper subclasses runs on Tensors: NOTE [Subclass autograd]
            from ..utils._python_dispatch import _subclass_backward

            if _subclass_backward(self, gradient, retain_graph, create_graph, inputs):
                return
        backward(self, gradient, retain_graph, create_graph, inputs)

    @staticmethod
    def _make_wrapper_subclass(cls, size, strides=None, storage_offset=None, memory_format=None, dtype=None,
                               layout=None, device=None, pin_memory=False, requires_grad=False, **ignored):
        """A ``cls`` instance with the given metadata and no values (PyTorch's wrapper subclass):
        see :func:`lucid.utils._python_dispatch.make_wrapper_subclass`."""
        from ..utils._python_dispatch import make_wrapper_subclass

        return make_wrapper_subclass(cls, size, strides=strides, storage_offset=storage_offset, dtype=dtype,
                                     layout=layout, device=device, requires_grad=requires_grad)

    @property
    def _version_counter(self):
        """How many in-place changes this tensor's storage has seen (PyTorch's ``_version``)."""
        return self._version[0]


_HookHandle = RemovableHandle


# How many post-accumulate-grad hooks are registered: the engine looks for leaves that
# have one (a graph walk) only while this is non-zero.
_POST_HOOKS = [0]


class _PostHookHandle(RemovableHandle):
    def remove(self):
        if self._hooks is not None and any(h is self._hook for h in self._hooks):
            _POST_HOOKS[0] -= 1
        super().remove()


def _real_item(t, ctype):
    """``t.item()`` for int()/float(): a complex value converts only when its imaginary part is 0."""
    v = t.item()
    if v.__class__ is complex:
        if v.imag != 0:
            raise RuntimeError(f"value cannot be converted to type {ctype} without overflow")
        return v.real
    return v


def _rebuild(data, requires_grad, device=None):
    arr = np.array(data)
    if device is not None:
        arr = backend.to_device(arr, backend.check_device(device))
    t = _wrap(arr)
    t._rg = requires_grad
    return t


def _rebuild_meta(shape, dtype, requires_grad):
    backend.check_device("meta")
    from .meta_backend import MetaArray

    t = _wrap(MetaArray(shape, dtype))
    t._rg = requires_grad
    return t


def _wrap(arr):
    """A fresh eager Tensor around ``arr`` — the hot path, so no checks and no __init__."""
    t = object.__new__(Tensor)
    t._data = arr if arr.__class__ is np.ndarray else backend.as_array(arr)
    t._version = [0]
    return t


def _to_array(data, dtype):
    """Convert user data to an ndarray with PyTorch's default dtypes."""
    dtype = dtypes.to_dtype(dtype)
    if isinstance(data, Tensor):
        data = data._data
        if data.__class__ is np.ndarray:
            return data.astype(dtype) if dtype is not None and data.dtype != dtype else data.copy()
    if data.__class__ in backend._BY_TYPE and data.__class__ is not np.ndarray:  # a device array
        with backend.on_device(data):  # the copy is made on the array's own device
            return data.astype(dtype) if dtype is not None and data.dtype != dtype else data.copy()
    if isinstance(data, np.ndarray):
        arr = np.array(data, dtype=dtype, copy=True)
    elif isinstance(data, (list, tuple)) and _contains_tensor(data):
        arr = np.array(_tensors_to_lists(data), dtype=dtype)
    else:
        try:
            arr = np.array(data, dtype=dtype)
        except OverflowError:
            if dtype is None or dtype.kind != "u":
                raise _narrowing_overflow(dtype) from None
            # PyTorch's rule for unsigned dtypes: a negative int down to -max wraps
            # (tensor([-5], dtype=uint8) is 251); anything else overflows. NumPy 2 refuses all
            wide = np.array(data, dtype=np.int64)
            if wide.size and (wide.max() > np.iinfo(dtype).max or wide.min() < -int(np.iinfo(dtype).max)):
                raise _narrowing_overflow(dtype) from None
            arr = wide.astype(dtype)
    if dtype is None and data.__class__ in (list, tuple) and arr.dtype not in _PYTHON_ONLY:
        leaf = _numpy_leaf_dtype(data)
        if leaf is not None:  # NumPy scalars or arrays inside: PyTorch's promotion of the leaves
            return arr.astype(leaf, copy=False)
    if dtype is None:
        if arr.dtype.kind == "f" and not isinstance(data, np.ndarray) and not _is_np_scalar(data):
            # NumPy goes to float64 for ints beyond int64 mixed with others: look only when a
            # value is that large (one vectorised pass), then for such an int in the data
            if arr.size and arr.dtype == np.float64 and np.abs(arr).max() >= 2.0 ** 63 and _big_int_in(data):
                raise _int_overflow()
            arr = arr.astype(dtypes.get_default_dtype(), copy=False)
        elif arr.dtype.kind in "iu" and not isinstance(data, np.ndarray) and not _is_np_scalar(data):
            if arr.dtype.kind == "u":  # NumPy chose uint64 for an int above int64's range: no wrap
                raise _int_overflow()
            arr = arr.astype(dtypes.int64, copy=False)
        elif arr.dtype.kind == "c" and not isinstance(data, np.ndarray) and not _is_np_scalar(data):
            arr = arr.astype(dtypes.default_complex(), copy=False)
        elif arr.dtype.kind not in "fiucb":
            if dtypes.supported(arr.dtype):  # bfloat16 (NOTE [bfloat16]), an ml_dtypes array
                return arr
            if arr.dtype == object and arr.size and all(v.__class__ is builtins.int for v in arr.flat):
                raise _int_overflow()  # Python ints beyond even uint64
            raise TypeError(f"tensor: can't convert data of dtype {arr.dtype} to a tensor")
        if arr.dtype not in dtypes._SUPPORTED:
            arr = arr.astype(dtypes.to_dtype(np.promote_types(arr.dtype, np.float32)
                                             if arr.dtype.kind == "f" else np.int64))
    return arr


# NumPy infers int64/bool for a list of Python ints/bools exactly as PyTorch does, whatever
# NumPy scalars it also holds; any other dtype may come from NumPy leaves and is re-derived.
_PYTHON_ONLY = (np.dtype(np.int64), np.dtype(np.bool_))
_PYTHON_LEAVES = frozenset((builtins.float, builtins.int, builtins.bool, builtins.complex, list, tuple))


def _leaf_types(seq, acc):
    """The classes of the leaves of a nested list (``set(map(type, ...))`` runs at C speed)."""
    kinds = set(map(type, seq))
    acc |= kinds
    if list in kinds or tuple in kinds:
        for v in seq:
            if v.__class__ is list or v.__class__ is tuple:
                _leaf_types(v, acc)
    return acc


def _array_leaf_dtypes(seq, acc):
    for v in seq:
        if v.__class__ is list or v.__class__ is tuple:
            _array_leaf_dtypes(v, acc)
        elif isinstance(v, np.ndarray):
            acc.add(v.dtype)
    return acc


def _numpy_leaf_dtype(data):
    """PyTorch's dtype for a (nested) list holding NumPy scalars or arrays: the promotion of its
    leaves' dtypes, a Python float counting as the default dtype (``tensor([np.float64(1.5)])``
    is float64, ``tensor([np.float32(1), 2.0])`` float32); None when no leaf is NumPy's."""
    kinds = _leaf_types(data, set())
    if kinds <= _PYTHON_LEAVES or not any(issubclass(k, (np.generic, np.ndarray)) for k in kinds):
        return None
    found = set()
    for k in kinds:
        if k is builtins.bool:
            found.add(np.dtype(np.bool_))
        elif k is builtins.int:
            found.add(np.dtype(np.int64))
        elif k is builtins.float:
            found.add(np.dtype(dtypes.get_default_dtype()))
        elif k is builtins.complex:
            found.add(np.dtype(dtypes.default_complex()))
        elif issubclass(k, np.generic):
            found.add(np.dtype(k))
    if any(issubclass(k, np.ndarray) for k in kinds):
        _array_leaf_dtypes(data, found)
    found = [d for d in found if d.kind in "biufc"]
    if not found:
        return None
    out = found[0]
    for d in found[1:]:
        out = dtypes.to_dtype(dtypes.promote_types(out, d))
    return out


class NarrowingOverflowError(RuntimeError, OverflowError):
    """A Python int the requested integer dtype can't hold: PyTorch's RuntimeError, and the
    OverflowError NumPy (and so Lucid) raised before."""


def _narrowing_overflow(dtype):
    return NarrowingOverflowError(f"tensor: value cannot be converted to type {dtype} without overflow")


def _int_overflow():
    # PyTorch's message; its tensor() infers int64 and raises rather than wrap or go to float
    return ValueError("tensor: Overflow when unpacking long long (a Python int outside int64's range; "
                      "pass dtype=lucid.uint64 for values up to 2**64 - 1)")


def _big_int_in(data):
    if data.__class__ is builtins.int:
        return not -2 ** 63 <= data < 2 ** 63
    return isinstance(data, (list, tuple)) and any(_big_int_in(v) for v in data)


def _is_np_scalar(x):
    return isinstance(x, np.generic)


def _contains_tensor(seq):
    return any(isinstance(s, Tensor) or (isinstance(s, (list, tuple)) and _contains_tensor(s)) for s in seq)


def _tensors_to_lists(seq):
    # Tensors on a device are read back explicitly, as PyTorch's ``tensor([t0, t1])`` reads
    # its elements (the result goes to the requested device afterwards).
    return [(s._data if s._data.__class__ is np.ndarray else backend.host(s._data)) if isinstance(s, Tensor)
            else _tensors_to_lists(s) if isinstance(s, (list, tuple)) else s for s in seq]


def tensor_method(*names):
    """Decorator: also attach the function to :class:`Tensor` under ``names``."""

    def deco(fn):
        for n in names:
            setattr(Tensor, n, fn)
        return fn

    return deco


primitive._Tensor = Tensor
primitive._wrap = _wrap
