"""Parametrizations: ``register_parametrization``, ``remove_parametrizations``,
``is_parametrized``, ``cached``, ``type_before_parametrizations`` (PyTorch's
``torch.nn.utils.parametrize``).

NOTE [Parametrized attributes]
``register_parametrization(module, "weight", p)`` moves the tensor into
``module.parametrizations.weight.original`` (a ``ParametrizationList`` holding ``p``; after
``p.right_inverse`` if it has one, possibly as ``original0``, ``original1``...), swaps the
module's class for a subclass ``Parametrized<Class>`` and gives that subclass a property
``weight`` whose getter computes ``p(original)`` (through every registered parametrization
in order) and whose setter stores ``right_inverse(value)``. State-dict keys are PyTorch's
(``parametrizations.weight.original``). Removing the last parametrization restores the class.
"""
from __future__ import annotations

import contextlib

from ..._core import backend
from ..._core.grad_mode import no_grad
from ..._core.tensor import Tensor
from ..containers import ModuleDict, ModuleList
from ..module import Module
from ..parameter import Parameter

__all__ = ["register_parametrization", "remove_parametrizations", "is_parametrized", "cached",
           "type_before_parametrizations", "transfer_parametrizations_and_params", "ParametrizationList"]

_cache_enabled = 0
_cache = {}


@contextlib.contextmanager
def cached():
    """Inside this block a parametrized tensor is computed once per access site and reused.

    Examples
    --------
    >>> import lucid.nn as nn
    >>> from lucid.nn.utils import parametrize
    >>> with parametrize.cached():
    ...     pass
    """
    global _cache_enabled
    _cache_enabled += 1
    try:
        yield
    finally:
        _cache_enabled -= 1
        if not _cache_enabled:
            _cache.clear()


def _register_tensor(module, name, tensor):
    if isinstance(tensor, Parameter):
        module.register_parameter(name, tensor)
    else:
        module.register_buffer(name, tensor)


def _store(original, value, name):
    """Write ``value`` into ``original`` as PyTorch's ``set_``: same dtype required, and a new
    shape replaces the old one (writing into the old array would broadcast it silently)."""
    if not isinstance(value, Tensor):
        raise ValueError(f"right_inverse: should return a tensor for {name}, got {type(value).__name__}")
    if value.dtype != original.dtype:
        raise ValueError(f"right_inverse: the tensor returned has dtype {value.dtype} while {name} has dtype "
                         f"{original.dtype}")
    with backend.on_device(original):  # NOTE [Several devices]
        if tuple(value.shape) == tuple(original.shape):
            original._data[...] = value._data
        else:
            original._data = value.detach().clone()._data
    original._version[0] += 1


class ParametrizationList(ModuleList):
    """The parametrizations of one tensor and its unparametrized value(s) ``original`` (or
    ``original0``, ``original1``...). See NOTE [Parametrized attributes]."""

    def __init__(self, modules, original, unsafe=False):
        super().__init__(modules)
        self.unsafe = unsafe
        shape, dtype = tuple(original.shape), original.dtype  # before ``original`` takes ``new``'s data
        with no_grad():
            new = original
            for m in reversed(list(self)):
                if hasattr(m, "right_inverse"):
                    try:
                        new = m.right_inverse(new)
                    except NotImplementedError:  # as PyTorch: then it is taken as the identity
                        pass
        if isinstance(new, Tensor):
            self.is_tensor, self.ntensors = True, 1
            # As PyTorch: one tensor stored in place of ``original`` keeps its dtype even with
            # ``unsafe=True``; its shape may change (the check of ``self()`` below guards it).
            if new.dtype != original.dtype:
                raise ValueError(f"register_parametrization: when right_inverse returns one tensor it may not "
                                 f"change the dtype: original {original.dtype}, right_inverse(original) {new.dtype}")
            with no_grad():
                original._data = new.detach().clone()._data if new is not original else original._data
            _register_tensor(self, "original", original)
        elif isinstance(new, (tuple, list)):
            self.is_tensor, self.ntensors = False, len(new)
            for i, t in enumerate(new):
                if not isinstance(t, Tensor):
                    raise ValueError(f"register_parametrization: right_inverse returned a sequence with a "
                                     f"{type(t).__name__} at position {i}; expected Tensors")
                t = t.detach()
                if isinstance(original, Parameter):
                    t = Parameter(t.clone(), original.requires_grad)
                _register_tensor(self, f"original{i}", t)
        else:
            raise ValueError(f"register_parametrization: right_inverse must return a Tensor or a sequence of "
                             f"Tensors, got {type(new).__name__}")
        if not unsafe:
            value = self()
            if not isinstance(value, Tensor) or tuple(value.shape) != shape:
                raise ValueError(f"register_parametrization: the parametrization changes the shape "
                                 f"{shape} to {tuple(getattr(value, 'shape', ()))}; pass unsafe=True to allow it")
            if value.dtype != dtype:
                raise ValueError(f"register_parametrization: the parametrization changes the dtype "
                                 f"{dtype} to {value.dtype}; pass unsafe=True to allow it")

    def right_inverse(self, value):
        """Store ``value`` through the ``right_inverse`` of each parametrization (in reverse)."""
        with no_grad():
            for m in reversed(list(self)):
                if not hasattr(m, "right_inverse"):  # an assignment can't be inverted: PyTorch refuses it
                    raise RuntimeError(f"parametrization {type(m).__name__} does not implement right_inverse.")
                value = m.right_inverse(value)
            if self.is_tensor:
                _store(self.original, value, "original")
            else:
                if not isinstance(value, (tuple, list)):
                    raise ValueError(f"right_inverse: must return a sequence of tensors, got {type(value).__name__}")
                if len(value) != self.ntensors:
                    raise ValueError(f"right_inverse: must return a sequence of {self.ntensors} tensors, got "
                                     f"{len(value)}")
                for i, v in enumerate(value):
                    _store(getattr(self, f"original{i}"), v, f"original{i}")

    def forward(self):
        mods = list(self)
        if self.is_tensor:
            x = mods[0](self.original)
        else:
            x = mods[0](*(getattr(self, f"original{i}") for i in range(self.ntensors)))
        for m in mods[1:]:
            x = m(x)
        return x


def _inject_new_class(module):
    cls = module.__class__

    def __getstate__(self):
        raise RuntimeError("Serialization of parametrized modules is only supported through state_dict().")

    def __deepcopy__(self, memo):  # pickling is refused, but copy.deepcopy works (as PyTorch)
        import copy

        if id(self) in memo:
            return memo[id(self)]
        replica = self.__class__.__new__(self.__class__)
        memo[id(self)] = replica
        replica.__dict__ = copy.deepcopy(self.__dict__, memo)
        return replica

    attrs = {"__getstate__": __getstate__, "__module__": cls.__module__}
    if not hasattr(cls, "__deepcopy__"):
        attrs["__deepcopy__"] = __deepcopy__
    module.__class__ = type(f"Parametrized{cls.__name__}", (cls,), attrs)


def _inject_property(module, name):
    def get(self):
        key = (id(self), name)
        if _cache_enabled and key in _cache:
            return _cache[key]
        value = self.parametrizations[name]()
        if _cache_enabled:
            _cache[key] = value
        return value

    def set_(self, value):
        self.parametrizations[name].right_inverse(value)

    setattr(module.__class__, name, property(get, set_))


def is_parametrized(module, tensor_name=None):
    """Whether ``module`` has parametrizations (on ``tensor_name``, when given).

    Examples
    --------
    >>> import lucid.nn as nn
    >>> from lucid.nn.utils import parametrize
    >>> parametrize.is_parametrized(nn.Linear(2, 2))
    False
    """
    ps = module.__dict__.get("_modules", {}).get("parametrizations")
    if not isinstance(ps, ModuleDict):
        return False
    return len(ps) > 0 if tensor_name is None else tensor_name in ps


def type_before_parametrizations(module):
    """The module's class before any parametrization was registered."""
    return type(module).__bases__[0] if is_parametrized(module) else type(module)


def register_parametrization(module, tensor_name, parametrization, *, unsafe=False):
    """Make ``module.<tensor_name>`` the output of ``parametrization(original)``.

    ``parametrization`` is a Module; an optional ``right_inverse(value)`` says how to store a
    value (also used at registration, and when ``module.<tensor_name> = value``). Registering
    again on the same tensor chains the parametrizations. See NOTE [Parametrized attributes].

    Examples
    --------
    >>> import lucid, lucid.nn as nn
    >>> from lucid.nn.utils import parametrize
    >>> class Symmetric(nn.Module):
    ...     def forward(self, x):
    ...         return x.triu() + x.triu(1).transpose(0, 1)
    >>> m = parametrize.register_parametrization(nn.Linear(3, 3), "weight", Symmetric())
    >>> bool((m.weight == m.weight.T).all())
    True
    """
    parametrization.train(module.training)
    if is_parametrized(module, tensor_name):
        plist = module.parametrizations[tensor_name]
        plist.append(parametrization)
        plist.unsafe |= unsafe
        return module
    if tensor_name not in module._parameters and tensor_name not in module._buffers:
        raise ValueError(f"register_parametrization: module {type(module).__name__} has no parameter, buffer or "
                         f"parametrized element named '{tensor_name}'")
    original = getattr(module, tensor_name)
    plist = ParametrizationList([parametrization], original, unsafe=unsafe)
    delattr(module, tensor_name)
    if not is_parametrized(module):
        _inject_new_class(module)
        module.parametrizations = ModuleDict()
    _inject_property(module, tensor_name)
    module.parametrizations[tensor_name] = plist
    return module


def remove_parametrizations(module, tensor_name, leave_parametrized=True):
    """Undo :func:`register_parametrization` on ``tensor_name``: the tensor becomes a plain
    parameter again holding its current parametrized value (or, with
    ``leave_parametrized=False``, the stored original).

    Examples
    --------
    >>> import lucid, lucid.nn as nn
    >>> from lucid.nn.utils import parametrize
    >>> class Double(nn.Module):
    ...     def forward(self, x):
    ...         return x * 2
    >>> m = parametrize.register_parametrization(nn.Linear(2, 2), "bias", Double())
    >>> b = m.bias.detach().clone()
    >>> m = parametrize.remove_parametrizations(m, "bias")
    >>> type(m).__name__, bool((m.bias == b).all())
    ('Linear', True)
    """
    if not is_parametrized(module, tensor_name):
        raise ValueError(f"remove_parametrizations: module {type(module).__name__} does not have a parametrization "
                         f"on {tensor_name}")
    plist = module.parametrizations[tensor_name]
    if plist.is_tensor:
        original = plist.original
        if leave_parametrized:
            with no_grad():
                value = getattr(module, tensor_name)
                original._data = value.detach().clone()._data
                original._version[0] += 1
    else:
        if not leave_parametrized:
            raise ValueError("remove_parametrizations: cannot leave unparametrized (leave_parametrized=False) a "
                             "tensor parametrized by a sequence of tensors")
        with no_grad():
            value = getattr(module, tensor_name)
        original = Parameter(value._data.copy(), plist.original0.requires_grad) \
            if isinstance(plist.original0, Parameter) else value.detach()
    delattr(module.__class__, tensor_name)
    del module.parametrizations[tensor_name]
    _register_tensor(module, tensor_name, original)
    if not is_parametrized(module):
        delattr(module, "parametrizations")
        module.__class__ = module.__class__.__bases__[0]
    return module


def transfer_parametrizations_and_params(from_module, to_module, tensor_name=None):
    """Register ``from_module``'s parametrizations (of ``tensor_name``, or all) on ``to_module``,
    which then shares the original tensors (``original`` or ``original0``, ``original1``...).
    A tensor ``to_module`` lacks is first created as a Parameter of the parametrized value.

    Examples
    --------
    >>> import lucid, lucid.nn as nn
    >>> from lucid.nn.utils import parametrize
    >>> class Double(nn.Module):
    ...     def forward(self, x):
    ...         return x * 2
    >>> a = parametrize.register_parametrization(nn.Linear(2, 2), "weight", Double())
    >>> b = parametrize.transfer_parametrizations_and_params(a, nn.Linear(2, 2))
    >>> b.parametrizations.weight.original is a.parametrizations.weight.original
    True
    >>> bool((b.weight == a.weight).all())
    True
    """
    if not is_parametrized(from_module):
        return to_module
    names = list(from_module.parametrizations) if tensor_name is None else [tensor_name]
    for name in names:
        src = from_module.parametrizations[name]
        if not hasattr(to_module, name):
            setattr(to_module, name, Parameter(getattr(from_module, name)))
        for parametrization in src:
            register_parametrization(to_module, name, parametrization)
        dst = to_module.parametrizations[name]
        keys = ["original"] if hasattr(src, "original") else [f"original{i}" for i in range(src.ntensors)]
        for key in keys:
            setattr(dst, key, getattr(src, key))
    return to_module
