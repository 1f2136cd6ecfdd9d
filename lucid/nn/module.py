"""``Module``: the base class of every layer — registration, traversal, state and hooks.

A Module owns three ordered dicts, filled by plain attribute assignment
(see NOTE [Registration by attribute]):

* ``_parameters`` — :class:`~lucid.nn.Parameter` objects (learnable weights);
* ``_buffers`` — Tensors that are state but not learnable (BatchNorm running stats);
* ``_modules`` — child Modules.
"""
from __future__ import annotations

import functools
import inspect
import threading
from collections import OrderedDict, namedtuple

import numpy as np

from .._core import backend, dtypes
from .._core.tensor import Tensor, _wrap
from .parameter import Buffer, Parameter
from .._core.hooks import RemovableHandle
from ..ops.creation import device_arg
from ._global_hooks import _GLOBAL_HOOKS, _registered  # (nn.modules.module imports _GLOBAL_HOOKS from here)
from ._nonfull_hooks import _MIXED_BACKWARD_HOOKS, _attach_non_full_backward_hooks  # NOTE [Non-full backward hooks]

__all__ = ["Module", "RemovableHandle"]

class _IncompatibleKeys(namedtuple("IncompatibleKeys", ["missing_keys", "unexpected_keys"])):
    """What ``load_state_dict`` returns; prints as PyTorch's does."""

    __slots__ = ()

    def __repr__(self):
        if not self.missing_keys and not self.unexpected_keys:
            return "<All keys matched successfully>"
        return f"_IncompatibleKeys(missing_keys={self.missing_keys!r}, unexpected_keys={self.unexpected_keys!r})"

    __str__ = __repr__


class _PublicStateDictHook:
    """A hook registered by ``register_state_dict_post_hook``, which may not replace the dict."""
    _from_public_api = True

    def __init__(self, hook):
        self.hook = hook

    def __call__(self, *args):
        return self.hook(*args)


def _add_hook(module, attr, hook, prepend=False):
    hooks = module.__dict__.get(attr)
    if hooks is None:
        hooks = module.__dict__[attr] = OrderedDict()
    handle = RemovableHandle(hooks)
    hooks[handle.id] = hook
    if prepend:
        hooks.move_to_end(handle.id, last=False)
    return handle



def _add_id(module, attr, hid):
    ids = module.__dict__.get(attr)
    if ids is None:
        ids = module.__dict__[attr] = set()
    ids.add(hid)


def _addindent(s, n):
    lines = s.split("\n")
    if len(lines) == 1:
        return s
    return lines[0] + "\n" + "\n".join(" " * n + line for line in lines[1:])


def _empty_on(arr, dev):
    """New memory shaped like ``arr`` on ``dev``, its values undefined; nothing of ``arr`` is
    read (it may be a meta array), as ``torch.empty_like(arr, device=dev)``."""
    return backend.to_device(np.empty(arr.shape, dtype=arr.dtype), dev)


class _NoModuleHook:
    """A load pre-hook registered with ``with_module=False``: called without the module."""

    def __init__(self, hook):
        self.hook = hook

    def __call__(self, module, *args):
        return self.hook(*args)


# NOTE [Module device argument]
# Lucid's layers take PyTorch's ``device=`` factory argument. They are built on the default
# device (``nn.init`` draws on the host and copies once, so a seed gives the same values on
# every device) and, when the outermost lucid ``__init__`` of a construction returns, moved to
# ``device``: every layer honours it in one place, nested layers (a Transformer's) move once.
_CONSTRUCTING = threading.local()


def _placing_init(init):
    """``init`` of a lucid layer, followed by a move to its ``device`` argument."""
    try:
        signature = inspect.signature(init)
    except (TypeError, ValueError):
        return init
    if "device" not in signature.parameters:
        return init

    @functools.wraps(init)
    def __init__(self, *args, **kwargs):
        depth = getattr(_CONSTRUCTING, "depth", 0)
        _CONSTRUCTING.depth = depth + 1
        try:
            init(self, *args, **kwargs)
        finally:
            _CONSTRUCTING.depth = depth
        if depth == 0:
            device = signature.bind(self, *args, **kwargs).arguments.get("device")
            if device is not None:
                self.to(device)

    return __init__


# NOTE [Non-full backward hooks]: lucid/nn/_nonfull_hooks.py


def _tensor_form(convert):
    """A Tensor function (what ``Module._apply`` hands on) from an array converter."""

    def fn(t):
        out = convert(t._data)
        return t if out is t._data else _wrap(out)

    fn._array_fn = convert
    return fn


def _array_form(fn):
    """An array converter from a Tensor function given to ``Module._apply`` (run under no_grad)."""
    from ..autograd.grad_mode import no_grad

    def convert(a):
        with no_grad():
            return fn(_wrap(a))._data

    return convert


class Module:
    """Base class for all neural network modules.

    Subclasses call ``super().__init__()`` first, assign parameters, buffers and
    submodules as attributes, and define ``forward``. Calling the module runs the
    forward pre-hooks, ``forward``, the forward hooks and sets up backward hooks.

    Parameters
    ----------
    (none)
        Subclass it, call ``super().__init__()``, assign Parameters, buffers and submodules
        as attributes and define ``forward``.

    Examples
    --------
    >>> import lucid
    >>> import lucid.nn as nn
    >>> class Net(nn.Module):
    ...     def __init__(self):
    ...         super().__init__()
    ...         self.fc = nn.Linear(2, 1)
    ...     def forward(self, x):
    ...         return self.fc(x)
    >>> [n for n, _ in Net().named_parameters()]
    ['fc.weight', 'fc.bias']
    """

    training: bool
    _version = 1
    dump_patches = False  # PyTorch's class flags, for code that reads them
    call_super_init = False

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        init = cls.__dict__.get("__init__")
        if init is not None and cls.__module__.startswith("lucid.nn"):
            cls.__init__ = _placing_init(init)

    def __init__(self, *args, **kwargs):
        if args or kwargs:
            raise TypeError(f"{type(self).__name__}.__init__() got unexpected arguments")
        d = self.__dict__
        d["training"] = True
        d["_parameters"] = OrderedDict()
        d["_buffers"] = OrderedDict()
        d["_non_persistent_buffers_set"] = set()
        d["_modules"] = OrderedDict()
        d["_forward_pre_hooks"] = OrderedDict()
        d["_forward_pre_hooks_with_kwargs"] = set()
        d["_forward_hooks"] = OrderedDict()
        d["_forward_hooks_with_kwargs"] = set()
        d["_backward_hooks"] = OrderedDict()
        d["_backward_pre_hooks"] = OrderedDict()
        d["_state_dict_pre_hooks"] = OrderedDict()
        d["_state_dict_hooks"] = OrderedDict()
        d["_load_state_dict_pre_hooks"] = OrderedDict()
        d["_load_state_dict_post_hooks"] = OrderedDict()

    def forward(self, *args, **kwargs):
        raise NotImplementedError(
            f'Module [{type(self).__name__}] is missing the required "forward" function'
        )

    # ------------------------------------------------------------ registration
    # NOTE [Registration by attribute]
    # ``__setattr__`` routes Parameters to ``_parameters``, Modules to ``_modules`` and
    # Tensors assigned to an existing buffer name to ``_buffers``; a name lives in at most
    # one of the three dicts (or the instance ``__dict__``). ``__getattr__`` (called only
    # when normal lookup fails) finds them again.
    def __setattr__(self, name, value):
        d = self.__dict__
        params = d.get("_parameters")
        if isinstance(value, Parameter):
            if params is None:
                raise AttributeError("cannot assign parameters before Module.__init__() call")
            self._remove_from(name, d, self._buffers, self._modules)
            self.register_parameter(name, value)
        elif isinstance(value, Buffer):  # ``m.x = nn.Buffer(t)`` registers a buffer (as PyTorch)
            if params is None:
                raise AttributeError("cannot assign buffers before Module.__init__() call")
            self._remove_from(name, d, params, self._modules, self._buffers)
            self.register_buffer(name, _wrap(value._data), persistent=value.persistent)
        elif params is not None and name in params:
            if value is not None:
                raise TypeError(
                    f"cannot assign '{type(value).__name__}' as parameter '{name}' "
                    "(lucid.nn.Parameter or None expected)"
                )
            self.register_parameter(name, value)
        elif isinstance(value, Module):
            if params is None:
                raise AttributeError("cannot assign module before Module.__init__() call")
            self._remove_from(name, d, params, self._buffers)
            if _GLOBAL_HOOKS.module_registration:
                value = _registered(_GLOBAL_HOOKS.module_registration, self, name, value)
            self._modules[name] = value
        elif params is not None and name in self._modules:
            if value is not None:
                raise TypeError(
                    f"cannot assign '{type(value).__name__}' as child module '{name}' "
                    "(lucid.nn.Module or None expected)"
                )
            if _GLOBAL_HOOKS.module_registration:
                value = _registered(_GLOBAL_HOOKS.module_registration, self, name, value)
            self._modules[name] = value
        elif params is not None and name in self._buffers:
            if value is not None and not isinstance(value, Tensor):
                raise TypeError(
                    f"cannot assign '{type(value).__name__}' as buffer '{name}' "
                    "(lucid.Tensor or None expected)"
                )
            if _GLOBAL_HOOKS.buffer_registration:
                value = _registered(_GLOBAL_HOOKS.buffer_registration, self, name, value)
            self._buffers[name] = value
        else:
            object.__setattr__(self, name, value)

    @staticmethod
    def _remove_from(name, *dicts):
        for dct in dicts:
            if name in dct:
                del dct[name]

    def __getattr__(self, name):
        d = self.__dict__
        for key in ("_parameters", "_buffers", "_modules"):
            sub = d.get(key)
            if sub is not None and name in sub:
                return sub[name]
        raise AttributeError(f"'{type(self).__name__}' object has no attribute '{name}'")

    def __delattr__(self, name):
        for key in ("_parameters", "_buffers", "_modules"):
            sub = self.__dict__.get(key)
            if sub is not None and name in sub:
                del sub[name]
                self._non_persistent_buffers_set.discard(name)
                return
        object.__delattr__(self, name)

    def _check_name(self, name, kind):
        if "_parameters" not in self.__dict__:
            raise AttributeError(f"cannot assign {kind} before Module.__init__() call")
        if not isinstance(name, str):
            raise TypeError(f"{kind} name should be a string, got {type(name).__name__}")
        if "." in name:
            raise KeyError(f'{kind} name can\'t contain ".", got: {name}')
        if name == "":
            raise KeyError(f'{kind} name can\'t be empty string ""')

    def register_parameter(self, name, param):
        """Add a parameter (or ``None``) under ``name``."""
        self._check_name(name, "parameter")
        if hasattr(self, name) and name not in self._parameters:
            raise KeyError(f"attribute '{name}' already exists")
        if param is not None and not isinstance(param, Parameter):
            raise TypeError(
                f"cannot assign '{type(param).__name__}' object to parameter '{name}' "
                "(lucid.nn.Parameter or None required)"
            )
        if _GLOBAL_HOOKS.parameter_registration:
            param = _registered(_GLOBAL_HOOKS.parameter_registration, self, name, param)
        self._parameters[name] = param

    def register_buffer(self, name, tensor, persistent=True):
        """Add a buffer: module state that is not a parameter (saved in ``state_dict`` if persistent)."""
        self._check_name(name, "buffer")
        if hasattr(self, name) and name not in self._buffers:
            raise KeyError(f"attribute '{name}' already exists")
        if tensor is not None and not isinstance(tensor, Tensor):
            raise TypeError(
                f"cannot assign '{type(tensor).__name__}' object to buffer '{name}' "
                "(lucid.Tensor or None required)"
            )
        if _GLOBAL_HOOKS.buffer_registration:
            tensor = _registered(_GLOBAL_HOOKS.buffer_registration, self, name, tensor)
        self._buffers[name] = tensor
        if persistent:
            self._non_persistent_buffers_set.discard(name)
        else:
            self._non_persistent_buffers_set.add(name)

    def add_module(self, name, module):
        """Add a child module (or ``None``) under ``name``."""
        if module is not None and not isinstance(module, Module):
            raise TypeError(f"{type(module).__name__} is not a Module subclass")
        self._check_name(name, "module")
        if hasattr(self, name) and name not in self._modules:
            raise KeyError(f"attribute '{name}' already exists")
        if _GLOBAL_HOOKS.module_registration:
            module = _registered(_GLOBAL_HOOKS.module_registration, self, name, module)
        self._modules[name] = module

    register_module = add_module

    def get_submodule(self, target):
        """The submodule at dotted path ``target`` (``""`` is ``self``)."""
        mod = self
        if target == "":
            return mod
        for item in target.split("."):
            if item not in mod._modules:
                raise AttributeError(f"{type(mod).__name__} has no submodule `{item}`")
            mod = mod._modules[item]
        return mod

    def set_submodule(self, target, module, strict=False):
        """Put ``module`` at dotted path ``target``, replacing the submodule there (or, unless
        ``strict``, adding it under an existing parent).

        Examples
        --------
        >>> import lucid.nn as nn
        >>> net = nn.Sequential(nn.Linear(2, 2), nn.ReLU())
        >>> net.set_submodule("1", nn.Tanh())
        >>> net
        Sequential(
          (0): Linear(in_features=2, out_features=2, bias=True)
          (1): Tanh()
        )
        """
        if target == "":
            raise ValueError("set_submodule: cannot set the submodule without a target name")
        if not isinstance(module, Module):
            raise ValueError(f"set_submodule: `module` is not an nn.Module, found {type(module)}")
        parent_path, _, name = target.rpartition(".")
        parent = self.get_submodule(parent_path)
        exists = hasattr(parent, name)
        if strict and not exists:
            raise AttributeError(f"set_submodule: {parent._get_name()} has no attribute `{name}`")
        if exists and not isinstance(getattr(parent, name), Module):
            raise AttributeError(f"set_submodule: `{name}` is not an nn.Module")
        setattr(parent, name, module)

    def get_parameter(self, target):
        mod_path, _, name = target.rpartition(".")
        mod = self.get_submodule(mod_path)
        if name not in mod._parameters:
            raise AttributeError(f"{type(mod).__name__} has no parameter `{name}`")
        return mod._parameters[name]

    def get_buffer(self, target):
        mod_path, _, name = target.rpartition(".")
        mod = self.get_submodule(mod_path)
        if name not in mod._buffers:
            raise AttributeError(f"{type(mod).__name__} has no buffer `{name}`")
        return mod._buffers[name]

    # --------------------------------------------------------------- traversal
    def _named_members(self, get_members, prefix="", recurse=True, remove_duplicate=True):
        memo = set()
        modules = self.named_modules(prefix=prefix, remove_duplicate=remove_duplicate) if recurse \
            else [(prefix, self)]
        for mod_prefix, mod in modules:
            for k, v in get_members(mod):
                if v is None or (remove_duplicate and id(v) in memo):
                    continue
                if remove_duplicate:
                    memo.add(id(v))
                yield (mod_prefix + ("." if mod_prefix else "") + k, v)

    def named_parameters(self, prefix="", recurse=True, remove_duplicate=True):
        """Iterate over ``(dotted name, Parameter)``, each parameter once."""
        yield from self._named_members(lambda m: m._parameters.items(), prefix, recurse,
                                       remove_duplicate)

    def parameters(self, recurse=True):
        """Iterate over the module's parameters (each once)."""
        for _, p in self.named_parameters(recurse=recurse):
            yield p

    def named_buffers(self, prefix="", recurse=True, remove_duplicate=True, persistent=None):
        """Iterate over ``(dotted name, buffer)``; ``persistent`` filters by persistence."""
        def members(m):
            for k, v in m._buffers.items():
                if persistent is None or (k not in m._non_persistent_buffers_set) == persistent:
                    yield k, v

        yield from self._named_members(members, prefix, recurse, remove_duplicate)

    def buffers(self, recurse=True):
        for _, b in self.named_buffers(recurse=recurse):
            yield b

    def named_children(self):
        memo = set()
        for name, m in self._modules.items():
            if m is not None and id(m) not in memo:
                memo.add(id(m))
                yield name, m

    def children(self):
        for _, m in self.named_children():
            yield m

    def named_modules(self, memo=None, prefix="", remove_duplicate=True):
        """Iterate over ``(dotted name, module)`` for this module and all descendants."""
        if memo is None:
            memo = set()
        if remove_duplicate:
            if id(self) in memo:
                return
            memo.add(id(self))
        yield prefix, self
        for name, m in self._modules.items():
            if m is None:
                continue
            sub = prefix + ("." if prefix else "") + name
            yield from m.named_modules(memo, sub, remove_duplicate)

    def modules(self):
        for _, m in self.named_modules():
            yield m

    # ------------------------------------------------------------------- modes
    def train(self, mode=True):
        """Set training mode (affects Dropout, BatchNorm); returns ``self``."""
        if not isinstance(mode, bool):
            raise ValueError("train: training mode is expected to be boolean")
        self.training = mode
        for m in self.children():
            m.train(mode)
        return self

    def eval(self):
        """Set evaluation mode; same as ``train(False)``."""
        return self.train(False)

    def requires_grad_(self, requires_grad=True):
        for p in self.parameters():
            p.requires_grad_(requires_grad)
        return self

    def zero_grad(self, set_to_none=True):
        """Reset the gradients of all parameters (to ``None`` by default, or to zeros)."""
        for p in self.parameters():
            if p._grad is None:
                continue
            if set_to_none:
                p._grad = None
            else:
                g = p._grad
                if g.grad_fn is not None:
                    p._grad = g.detach()
                with backend.on_device(g):
                    p._grad._data[...] = 0
                p._grad._version[0] += 1

    def apply(self, fn):
        """Call ``fn`` on every submodule (children first) and on ``self``; returns ``self``."""
        for m in self.children():
            m.apply(fn)
        fn(self)
        return self

    # ---------------------------------------------------------------- dtype
    def _apply(self, fn):
        """Replace the data of every parameter, gradient and buffer by ``fn(tensor)``.

        ``fn`` takes and returns a Tensor, as PyTorch's (subclasses override ``_apply`` and call
        it on their own tensors: GPyTorch's constraints do ``self.lower_bound =
        fn(self.lower_bound)``); it runs under ``no_grad``. The converters of ``to``/``float``/...
        carry their array form (``fn._array_fn``), which is what runs here.
        """
        import importlib  # (``from ..__future__ import`` would be a future statement)

        _FLAGS = importlib.import_module("lucid.__future__")._FLAGS
        tensor_fn, fn = fn, getattr(fn, "_array_fn", None) or _array_form(fn)
        for m in self.children():
            m._apply(tensor_fn)
        renew = _FLAGS["overwrite"] and not _FLAGS["swap"]  # See NOTE [Module conversion flags]
        for k, p in self._parameters.items():
            if p is None:
                continue
            if renew:
                grad = p._grad
                p = self._parameters[k] = type(p)(_wrap(fn(p._data)), requires_grad=p.requires_grad)
                if grad is not None:
                    p.grad = _wrap(fn(grad._data))
                continue
            p._data = fn(p._data)
            if p._grad is not None:
                p._grad._data = fn(p._grad._data)
        for k, b in self._buffers.items():
            if b is not None:
                b._data = fn(b._data)
        return self

    def to(self, *args, dtype=None, device=None, memory_format=None, **kwargs):
        """Move and/or cast parameters, gradients and buffers in place: ``m.to("cuda")``,
        ``m.to(lucid.float64)``, ``m.to(device, dtype)``, ``m.to(tensor)``.

        Only floating point and complex values change dtype (integer buffers keep theirs, as
        in PyTorch). The Parameter objects stay the same, so an optimizer built before the
        move keeps working (its state follows on the next step, see ``Optimizer``).
        ``memory_format=lucid.channels_last`` (or ``channels_last_3d``) lays out every 4-d and
        5-d parameter, gradient and buffer that way, as PyTorch's ``Tensor.to`` would (a rank
        the format does not fit raises a RuntimeError before anything changes).
        """
        for a in args:
            if isinstance(a, Tensor):
                dtype, device = a.dtype, a.device
            elif isinstance(a, (str, int)) and not isinstance(a, bool) or type(a).__name__ == "device":
                device = a
            elif a is not None:
                dtype = a
        dev = None if device is None else device_arg(device, "Module.to")
        dt = None
        if dtype is not None:
            dt = dtypes.to_dtype(dtype)
            if dtypes.kind_of(dt) not in "fc":
                raise TypeError(f"Module.to: only floating point or complex dtypes are accepted, got {dt}")
        fmt = None if memory_format is None else _memory_format_arg(self, memory_format)
        if dt is None and dev is None and fmt is None:
            return self

        def convert(a):
            if dt is not None and dtypes.is_differentiable(a.dtype):
                with backend.on_device(a):
                    a = a.astype(dt, copy=False)
            if dev is not None:
                a = backend.to_device(a, dev)
            if fmt is not None and a.ndim in (4, 5):  # PyTorch's rule: 4-d and 5-d tensors only
                from ..ops.memory_format import relayout_array

                a = relayout_array(a, fmt, "Module.to")
            return a

        return self._apply(_tensor_form(convert))

    def _floating_to(self, dt):
        """``float()``/``double()``/``half()``: floating point values only, as PyTorch's (complex
        ones stay complex; ``to(dtype)`` casts those too)."""
        dt = dtypes.to_dtype(dt)

        def convert(a):
            if dtypes.is_floating(a.dtype):
                with backend.on_device(a):
                    return a.astype(dt, copy=False)
            return a

        return self._apply(_tensor_form(convert))

    def float(self):
        return self._floating_to(dtypes.float32)

    def double(self):
        return self._floating_to(dtypes.float64)

    def half(self):
        return self._floating_to(dtypes.float16)

    def bfloat16(self):
        return self._floating_to(dtypes.enable_bfloat16())

    def type(self, dst_type):
        return self.to(dst_type)

    def share_memory(self):
        """Move every parameter, gradient and buffer to shared memory (``Tensor.share_memory_``),
        for training one model from several processes (Hogwild). Returns ``self``."""
        for t in list(self.parameters()) + list(self.buffers()):
            t.share_memory_()
            if t.grad is not None:
                t.grad.share_memory_()
        return self

    def compile(self, *args, **kwargs):
        """``torch.nn.Module.compile``: checks ``lucid.compile``'s arguments; the module stays eager.

        See NOTE [No graph compiler] in ``lucid/compiler.py``. Returns None, as PyTorch's does.
        """
        from ..compiler import compile as _compile

        _compile(self, *args, **kwargs)

    def to_empty(self, *, device, recurse=True):
        """Give every parameter and buffer new, uninitialised memory on ``device``, nothing copied.

        For a module built on the ``"meta"`` device (NOTE [Meta device]): ``to_empty`` then
        an initialisation (``reset_parameters()``, ``load_state_dict``) makes it real, as in
        PyTorch. Gradients are dropped. ``recurse=False`` leaves the submodules alone.

        Examples
        --------
        >>> import lucid
        >>> from lucid import nn
        >>> m = nn.Linear(3, 2).to("meta").to_empty(device="cpu")
        >>> m.reset_parameters()
        >>> m.weight.device, m(lucid.ones(1, 3)).shape
        (device(type='cpu'), (1, 2))
        """
        dev = device_arg(device, "Module.to_empty")
        modules = self.modules() if recurse else (self,)
        for m in modules:
            for p in m._parameters.values():
                if p is not None:
                    p._data = _empty_on(p._data, dev)
                    p._version[0] += 1
                    p._grad = None
            for b in m._buffers.values():
                if b is not None:
                    b._data = _empty_on(b._data, dev)
                    b._version[0] += 1
        return self

    def cpu(self):
        """Move every parameter and buffer to the CPU (in place); returns ``self``."""
        return self.to("cpu")

    def cuda(self, device=None):
        """Move every parameter and buffer to a CUDA device (in place); returns ``self``."""
        return self.to("cuda" if device is None else device if not isinstance(device, int) else f"cuda:{device}")

    # ------------------------------------------------------------------ state
    def state_dict(self, *args, destination=None, prefix="", keep_vars=False):
        """An ordered dict from dotted names to parameters and persistent buffers.

        Values share memory with the module (detached unless ``keep_vars``).
        """
        if args:  # PyTorch's positional form state_dict(destination, prefix, keep_vars)
            destination = args[0]
            if len(args) > 1:
                prefix = args[1]
            if len(args) > 2:
                keep_vars = args[2]
        if destination is None:
            destination = OrderedDict()
            destination._metadata = OrderedDict()  # See NOTE [State-dict metadata]
        local_metadata = {"version": self._version}
        if hasattr(destination, "_metadata"):
            destination._metadata[prefix[:-1]] = local_metadata
        hooks = self.__dict__
        for hook in hooks.get("_state_dict_pre_hooks", {}).values():
            hook(self, prefix, keep_vars)
        self._save_to_state_dict(destination, prefix, keep_vars)
        for name, m in self._modules.items():
            if m is not None:
                m.state_dict(destination=destination, prefix=prefix + name + ".", keep_vars=keep_vars)
        for hook in hooks.get("_state_dict_hooks", {}).values():
            res = hook(self, destination, prefix, local_metadata)
            if res is not None:
                if getattr(hook, "_from_public_api", False):  # PyTorch: only the private form replaces
                    raise RuntimeError("state_dict post-hook must return None")
                destination = res
        return destination

    def _local_state(self):
        """This module's own state-dict entries (not its children's), by local name."""
        out = OrderedDict((k, p) for k, p in self._parameters.items() if p is not None)
        out.update((k, b) for k, b in self._buffers.items()
                   if b is not None and k not in self._non_persistent_buffers_set)
        return out

    # NOTE [State-dict metadata]
    # As in PyTorch, ``state_dict()`` returns an OrderedDict with a ``_metadata`` attribute:
    # ``{module prefix without the dot: {"version": type(module)._version}}``. ``load_state_dict``
    # hands each module's entry (``{}`` when the dict has none, e.g. after ``dict(sd)`` or
    # ``lucid.load``) to its load pre-hooks as ``local_metadata``, so a module whose layout
    # changed can upgrade old checkpoints (``_NormBase`` does, for num_batches_tracked).
    def load_state_dict(self, state_dict, strict=True, assign=False):
        """Copy values from ``state_dict`` into this module's parameters and buffers.

        The modules' load pre-hooks run first, top-down, on a copy of ``state_dict`` (the
        caller's dict is never changed) with their ``local_metadata`` (see NOTE [State-dict
        metadata]) and the ``missing_keys``/``unexpected_keys``/``error_msgs`` lists, which they
        may extend; as in PyTorch they are passed ``strict=True``. Every value is then
        validated and converted (shape, a numeric dtype, a copy onto the target's device and
        dtype, as PyTorch's ``param.copy_(value)``) before anything is written, so a failed
        load changes nothing; the error names the keys. With ``assign=True`` the module's
        tensors take the values' arrays (copied), dtypes and devices.
        Load post-hooks run bottom-up after the values are written and may edit the
        incompatible keys in place; with ``strict=True`` the key check follows them (and a
        failure then restores the previous values).

        Returns
        -------
        namedtuple ``(missing_keys, unexpected_keys)``

        Raises
        ------
        RuntimeError
            With ``strict=True``, on missing or unexpected keys; always, on shape mismatches
            or messages added to ``error_msgs`` by a pre-hook.
        """
        if not hasattr(state_dict, "items"):
            raise TypeError(f"load_state_dict: expected a dict-like state_dict, got {type(state_dict).__name__}")
        from .utils._load_state import load_tree

        metadata = getattr(state_dict, "_metadata", None)
        state_dict = OrderedDict(state_dict)
        if metadata is not None:
            state_dict._metadata = metadata
        return load_tree(self, state_dict, strict, assign, _IncompatibleKeys)

    def _load_from_state_dict(self, state_dict, prefix, local_metadata, strict, missing_keys,
                              unexpected_keys, error_msgs):
        """PyTorch's per-module step of :meth:`load_state_dict`, for subclasses to override
        (calling ``super()._load_from_state_dict(...)``): the module's load pre-hooks, then its
        own keys under ``prefix`` copied (or, with ``local_metadata["assign_to_params_buffers"]``,
        assigned), missing/unexpected keys and errors appended to the lists.
        See NOTE [Loading by module] (``nn/utils/_load_state.py``)."""
        from .utils._load_state import load_module

        load_module(self, state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys,
                    error_msgs, None)

    def _save_to_state_dict(self, destination, prefix, keep_vars):
        """This module's own entries of :meth:`state_dict` (parameters, persistent buffers, then
        ``_extra_state`` when the class defines ``get_extra_state``); subclasses may override it."""
        for name, t in self._local_state().items():
            destination[prefix + name] = t if keep_vars else t.detach()
        if type(self).get_extra_state is not Module.get_extra_state:
            destination[prefix + "_extra_state"] = self.get_extra_state()

    def get_extra_state(self):
        """Extra state for :meth:`state_dict` under ``"_extra_state"``: override it together with
        :meth:`set_extra_state` (any picklable value; the base class has none).

        Examples
        --------
        >>> import lucid.nn as nn
        >>> class Counter(nn.Module):
        ...     def __init__(self):
        ...         super().__init__()
        ...         self.steps = 3
        ...     def get_extra_state(self):
        ...         return {"steps": self.steps}
        ...     def set_extra_state(self, state):
        ...         self.steps = state["steps"]
        >>> c = Counter()
        >>> dict(c.state_dict())
        {'_extra_state': {'steps': 3}}
        >>> _ = c.load_state_dict({"_extra_state": {"steps": 7}}); c.steps
        7
        """
        raise RuntimeError(f"get_extra_state: {type(self).__name__} has no extra state; a class that has "
                           "some overrides get_extra_state and set_extra_state")

    def set_extra_state(self, state):
        """Take back the value :meth:`get_extra_state` returned, from :meth:`load_state_dict`."""
        raise RuntimeError(f"set_extra_state: {type(self).__name__} has no extra state; a class that has "
                           "some overrides get_extra_state and set_extra_state")

    def register_state_dict_pre_hook(self, hook):
        """``hook(module, prefix, keep_vars)`` runs before this module's ``state_dict`` entries are made."""
        return _add_hook(self, "_state_dict_pre_hooks", hook)

    def register_state_dict_post_hook(self, hook):
        """``hook(module, state_dict, prefix, local_metadata)`` runs after this module's entries
        are written; it edits ``state_dict`` in place and must return None (as PyTorch)."""
        return _add_hook(self, "_state_dict_hooks", _PublicStateDictHook(hook))

    def _register_state_dict_hook(self, hook):
        """PyTorch's private form of :meth:`register_state_dict_post_hook`: a non-None return
        replaces the dict."""
        return _add_hook(self, "_state_dict_hooks", hook)

    def register_load_state_dict_pre_hook(self, hook):
        """``hook(module, state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys,
        error_msgs)`` runs before ``load_state_dict`` validates: it may edit ``state_dict`` (a
        copy of the caller's) and extend the three lists (see :meth:`load_state_dict`)."""
        return _add_hook(self, "_load_state_dict_pre_hooks", hook)

    def _register_load_state_dict_pre_hook(self, hook, with_module=False):
        """PyTorch's private form: ``hook`` is called without the module unless ``with_module``."""
        return _add_hook(self, "_load_state_dict_pre_hooks", hook if with_module else _NoModuleHook(hook))

    def register_load_state_dict_post_hook(self, hook):
        """``hook(module, incompatible_keys)`` runs after a successful ``load_state_dict``."""
        return _add_hook(self, "_load_state_dict_post_hooks", hook)

    # ------------------------------------------------------------------ hooks
    def register_forward_pre_hook(self, hook, *, prepend=False, with_kwargs=False):
        """``hook(module, args)`` (or ``(module, args, kwargs)``) runs before ``forward``.

        It may return new args (a non-tuple is wrapped in a tuple) or ``None``.
        """
        handle = RemovableHandle(self._forward_pre_hooks)
        self._forward_pre_hooks[handle.id] = hook
        if with_kwargs:
            self._forward_pre_hooks_with_kwargs.add(handle.id)
        if prepend:
            self._forward_pre_hooks.move_to_end(handle.id, last=False)
        return handle

    def register_forward_hook(self, hook, *, prepend=False, with_kwargs=False, always_call=False):
        """``hook(module, args, output)`` runs after ``forward``; a non-None return replaces the output.

        With ``always_call=True`` it also runs (with the output so far, None if ``forward``
        raised) when the call fails, before the error propagates.
        """
        handle = RemovableHandle(self._forward_hooks)
        self._forward_hooks[handle.id] = hook
        if with_kwargs:
            self._forward_hooks_with_kwargs.add(handle.id)
        if always_call:
            _add_id(self, "_forward_hooks_always_called", handle.id)
        if prepend:
            self._forward_hooks.move_to_end(handle.id, last=False)
        return handle

    def register_full_backward_hook(self, hook, prepend=False):
        """``hook(module, grad_input, grad_output)`` runs when the gradients of the module's
        inputs are computed; it may return a tuple replacing ``grad_input``.

        ``grad_input`` / ``grad_output`` are tuples aligned with the positional arguments /
        the Tensor outputs (``None`` for a non-Tensor argument or one that needs no gradient,
        and for an output no loss reached).
        """
        if self.__dict__.get("_non_full_backward_hooks"):
            raise RuntimeError(_MIXED_BACKWARD_HOOKS)
        handle = RemovableHandle(self._backward_hooks)
        self._backward_hooks[handle.id] = hook
        if prepend:
            self._backward_hooks.move_to_end(handle.id, last=False)
        return handle

    def register_full_backward_pre_hook(self, hook, prepend=False):
        """``hook(module, grad_output)`` runs when the gradients of the module's outputs are
        known, before those of its inputs are computed; it may return new ``grad_output``."""
        return _add_hook(self, "_backward_pre_hooks", hook, prepend)

    def register_module(self, name, module):
        """Alias of :meth:`add_module`."""
        return self.add_module(name, module)

    def register_backward_hook(self, hook):
        """Deprecated: ``hook(module, grad_input, grad_output)`` on the autograd node that made the
        module's (first) output, as PyTorch's non-full hook: ``grad_input`` holds that node's input
        gradients (for a convolution: input, weight and bias), which are the module's input
        gradients only when the forward is a single node of them. It may return a replacement
        ``grad_input``. Prefer :meth:`register_full_backward_hook`. See NOTE [Non-full backward hooks].
        """
        if self._backward_hooks:
            raise RuntimeError(_MIXED_BACKWARD_HOOKS)
        hooks = self.__dict__.setdefault("_non_full_backward_hooks", OrderedDict())
        handle = RemovableHandle(hooks)
        hooks[handle.id] = hook
        return handle

    def _call_impl(self, *args, **kwargs):
        if backend.DEVICE_GUARD[0]:  # a layer's array code (running stats ...): NOTE [Several devices]
            # the first device array among the inputs, then the parameters, picks the device: so
            # inputs and parameters on two devices reach the op's mismatch error instead of
            # switching the current device back and forth for ever
            guard = backend.guard_for((*args, *self._parameters.values()))
            if guard is not None:
                with guard:
                    return self._call_impl(*args, **kwargs)
        bpre = self.__dict__.get("_backward_pre_hooks")
        if not (self._forward_pre_hooks or self._forward_hooks or self._backward_hooks or bpre
                or _GLOBAL_HOOKS.any or self.__dict__.get("_non_full_backward_hooks")):
            return self.forward(*args, **kwargs)
        always = self.__dict__.get("_forward_hooks_always_called")
        if not (always or _GLOBAL_HOOKS.forward_always_called):
            return self._hooked_call(bpre, [args, kwargs, None], None)
        state, called = [args, kwargs, None], set()
        try:
            return self._hooked_call(bpre, state, called)
        except Exception:
            self._run_always_called_hooks(state, called)
            raise

    def _run_always_called_hooks(self, state, called):
        """PyTorch's ``always_call=True`` forward hooks that the failed call did not reach (global
        ones first); one that raises in turn is reported by a warning, the original error wins."""
        import warnings

        g, args, kwargs, result = _GLOBAL_HOOKS, *state
        own = self.__dict__.get("_forward_hooks_always_called") or ()
        for hid, hook in list(g.forward.items()) + list(self._forward_hooks.items()):
            if hid in called or (hid not in g.forward_always_called and hid not in own):
                continue
            try:
                with_kwargs = hid in self._forward_hooks_with_kwargs or hid in g.forward_with_kwargs
                res = hook(self, args, kwargs, result) if with_kwargs else hook(self, args, result)
                result = result if res is None else res
            except Exception as e:
                warnings.warn(f"module forward hook with always_call=True raised an exception that was silenced "
                              f"as another error was raised in forward: {e}", stacklevel=3)

    def _hooked_call(self, bpre, state, called):
        """A call with hooks; ``state`` = [args, kwargs, result] is kept current for
        ``_run_always_called_hooks``, and ``called`` collects the forward hooks that ran."""
        args, kwargs = state[0], state[1]
        g = _GLOBAL_HOOKS
        for hid, hook in list(g.forward_pre.items()) + list(self._forward_pre_hooks.items()):
            if hid in self._forward_pre_hooks_with_kwargs:
                res = hook(self, args, kwargs)
                if res is not None:
                    if not (isinstance(res, tuple) and len(res) == 2):
                        raise RuntimeError("forward pre-hook must return None or a tuple of (new_args, "
                                           f"new_kwargs), but got {res}.")
                    args, kwargs = res
            else:
                res = hook(self, args)
                if res is not None:
                    args = res if isinstance(res, tuple) else (res,)
            state[0], state[1] = args, kwargs
        bw = None
        full = list(g.backward.values()) + list(self._backward_hooks.values())
        pre = list(g.backward_pre.values()) + list((bpre or {}).values())
        if full or pre:
            from ._hooks import BackwardHook

            bw = BackwardHook(self, full, pre)
            args = state[0] = bw.setup_input_hook(args)
        out = state[2] = self.forward(*args, **kwargs)
        for hid, hook in list(g.forward.items()) + list(self._forward_hooks.items()):
            if called is not None:
                called.add(hid)
            with_kwargs = hid in self._forward_hooks_with_kwargs or hid in g.forward_with_kwargs
            res = hook(self, args, kwargs, out) if with_kwargs else hook(self, args, out)
            if res is not None:
                out = state[2] = res
        if bw is not None:
            out = bw.setup_output_hook(out)
        nf = list(g.backward_non_full.values()) + list((self.__dict__.get("_non_full_backward_hooks") or {}).values())
        if nf:
            _attach_non_full_backward_hooks(self, nf, args, out)
        return out

    __call__ = _call_impl

    # ------------------------------------------------------------------- repr
    def extra_repr(self):
        """Extra text shown inside the parentheses of ``repr`` (override in layers)."""
        return ""

    def _get_name(self):
        return type(self).__name__

    def __repr__(self):
        extra = self.extra_repr()
        lines = extra.split("\n") if extra else []
        for key, m in self._modules.items():
            lines.append("(" + key + "): " + _addindent(repr(m), 2))
        main = self._get_name() + "("
        if lines:
            if len(lines) == 1 and not self._modules:
                main += lines[0]
            else:
                main += "\n  " + "\n  ".join(lines) + "\n"
        return main + ")"

    def __dir__(self):
        keys = list(object.__dir__(self))
        keys += list(self._parameters) + list(self._modules) + list(self._buffers)
        return sorted(set(k for k in keys if not k[0].isdigit()))

    def __setstate__(self, state):
        self.__dict__.update(state)


def _memory_format_arg(module, memory_format):
    """``Module.to``'s ``memory_format`` checked against every 4-d/5-d tensor it will lay out,
    so a rank the format does not fit fails before anything changes."""
    from ..ops.memory_format import as_format, check_rank

    fmt = as_format(memory_format, "Module.to")
    tensors = list(module.parameters()) + list(module.buffers())
    for t in tensors + [t.grad for t in tensors if t.grad is not None]:
        if t.ndim in (4, 5):
            check_rank(t.shape, fmt, "Module.to")
    return fmt
