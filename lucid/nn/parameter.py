"""``Parameter``: a Tensor that a Module registers as one of its learnable weights."""
from __future__ import annotations

import numpy as np

from .._core import backend
from .._core.grad_mode import SUBCLASS_DISPATCH
from .._core.tensor import Tensor, _disabled_torch_function_impl, _rebuild_meta, _to_array, _wrap

__all__ = ["Parameter", "Buffer"]


class _ParameterMeta(type):
    """Parameter's metaclass: ``isinstance(p, Parameter)`` also holds for a Tensor subclass
    instance made a parameter (NOTE [Subclass parameters]). Its ``__instancecheck__`` is put in
    place by the first such parameter; until then ``type``'s own check runs."""


def _instancecheck_with_marked(cls, obj):
    if type.__instancecheck__(cls, obj):
        return True
    return cls is Parameter and isinstance(obj, Tensor) and obj.__dict__.get("_is_param", False)


# NOTE [Subclass parameters]
# ``nn.Parameter(t)`` for a Tensor subclass with ``__torch_dispatch__`` (a wrapper such as
# TwoTensor) keeps the subclass, as PyTorch does: the result is ``t.detach()`` (through its
# handler, so the inner tensors come along), of ``t``'s own class, requiring grad as asked, and
# marked ``_is_param``; ``isinstance(p, nn.Parameter)`` is True through the metaclass, so
# modules register it and optimizers update it (through its handler: NOTE [Subclass updates]
# in lucid/optim/optimizer.py). Any metaclass takes ``isinstance(x, Parameter)`` off CPython's
# exact-``type`` fast path (about 30 ns to 90 ns, measured); the Python ``__instancecheck__``
# (about 300 ns) is installed only when the first such parameter is made.
class Parameter(Tensor, metaclass=_ParameterMeta):
    """A Tensor that is a module parameter (``requires_grad=True`` by default).

    Assigning a ``Parameter`` as a Module attribute registers it, so it appears in
    ``parameters()`` and ``state_dict()``. The parameter shares memory with ``data``
    when ``data`` is a Tensor (like PyTorch).

    Parameters
    ----------
    data : Tensor or array_like, optional
        Initial values (an empty float tensor when omitted).
    requires_grad : bool
        Whether the parameter is trainable.

    Examples
    --------
    >>> import lucid
    >>> p = lucid.nn.Parameter(lucid.zeros(2))
    >>> p.requires_grad
    True
    """

    __torch_function__ = _disabled_torch_function_impl  # plain-tensor behaviour (NOTE [Torch function])

    def __new__(cls, *args, **kwargs):  # subclasses (UninitializedParameter) take their own arguments
        # a layout subclass (DTensor) makes its own parameter class, as PyTorch's
        # ``Parameter(dtensor)`` stays a DTensor: wrapping only the local piece would lose the layout
        if cls is Parameter:
            data = args[0] if args else kwargs.get("data")
            make = getattr(type(data), "_as_parameter_of", None)
            if make is not None:
                return make(data, args[1] if len(args) > 1 else kwargs.get("requires_grad", True))
            if SUBCLASS_DISPATCH[0] and isinstance(data, Tensor) and type(data) is not Tensor:
                from ..utils._python_dispatch import is_dispatch_subclass_instance

                if is_dispatch_subclass_instance(data):
                    return _subclass_parameter(data, args[1] if len(args) > 1 else kwargs.get("requires_grad", True))
        return super().__new__(cls)

    def __init__(self, data=None, requires_grad=True):
        if isinstance(data, Tensor):
            arr = data._data  # share storage (and the version counter) with ``data``
            version = data._version
        else:
            arr = _new_array(data)
            version = [0]
        Tensor.__init__(self, None)
        self._data = arr
        self._version = version
        if requires_grad:
            self.requires_grad = True

    def __repr__(self):
        return "Parameter containing:\n" + Tensor.__repr__(self)

    __str__ = __repr__  # Tensor's ``__str__`` is bound to Tensor.__repr__: print(param) says it too

    def __reduce_ex__(self, protocol):
        # As Tensor's: the values travel as a host array, the device as a string.
        if self._data.__class__ is np.ndarray:
            return (_rebuild_parameter, (self._data, self._rg))
        if backend.backend_of(self._data).type == "meta":  # a shape and a dtype (NOTE [Meta device])
            return (_rebuild_meta_parameter, Tensor.__reduce_ex__(self, protocol)[1])
        return (_rebuild_parameter, (backend.host(self._data), self._rg, str(self.device)))

    def __deepcopy__(self, memo):
        if id(self) in memo:
            return memo[id(self)]
        with backend.on_device(self._data):
            p = Parameter(_wrap(self._data.copy()), self._rg)  # a copy on the same device
        memo[id(self)] = p
        return p


def _subclass_parameter(data, requires_grad):
    """``Parameter(data)`` for a ``__torch_dispatch__`` subclass: NOTE [Subclass parameters]."""
    t = data.detach()
    if type(t) is not type(data):
        raise RuntimeError(
            f"Parameter: creating a Parameter from an instance of type {type(data).__name__} requires that "
            f"detach() returns an instance of the same type, but return type {type(t).__name__} was found "
            "instead. To use the type as a Parameter, please correct the detach() semantics defined by its "
            "__torch_dispatch__() implementation.")
    if t is data:  # a handler that hands its argument back: the parameter must be its own leaf
        from ..utils._python_dispatch import _alias

        t = _alias(data)
    t.requires_grad_(bool(requires_grad))
    t._is_param = True
    if _ParameterMeta.__dict__.get("__instancecheck__") is None:
        _ParameterMeta.__instancecheck__ = _instancecheck_with_marked
    return t


def _new_array(data):
    """``data`` as a new array: an array (host or device) stays where it is; anything else
    (a list, a number, nothing) is made on the default device, as ``Tensor(data)``."""
    arr = _to_array(np.zeros(0, np.float32) if data is None else data, None)
    if not backend.is_array(data):
        dev = backend.get_default_device()
        if dev is not backend.CPU:
            arr = backend.to_device(arr, dev)
    return arr


def _rebuild_parameter(data, requires_grad, device=None):
    arr = np.array(data)
    if device is not None:
        arr = backend.to_device(arr, backend.check_device(device))
    return Parameter(_wrap(arr), requires_grad)


def _rebuild_meta_parameter(shape, dtype, requires_grad):
    return Parameter(_rebuild_meta(shape, dtype, False), requires_grad)


class Buffer(Tensor):
    """Marker for a module buffer (``nn.Buffer`` in recent PyTorch); ``persistent`` flag.

    Parameters
    ----------
    data : Tensor
        The buffer's value.
    persistent : bool
        Whether it is saved in ``state_dict``.

    Examples
    --------
    >>> import lucid, lucid.nn as nn
    >>> m = nn.Module()
    >>> m.scale = nn.Buffer(lucid.ones(2))
    >>> list(m.state_dict())
    ['scale']
    """

    __torch_function__ = _disabled_torch_function_impl  # plain-tensor behaviour (NOTE [Torch function])

    def __init__(self, data=None, *, persistent=True):
        Tensor.__init__(self, None)
        self._data = data._data if isinstance(data, Tensor) else _new_array(data if data is not None else [])
        self.persistent = persistent
