"""``Module``: the base class of every layer — registration, traversal, state and hooks.

A Module owns three ordered dicts, filled by plain attribute assignment
(see NOTE [Registration by attribute]):

* ``_parameters`` — :class:`~lucid.nn.Parameter` objects (learnable weights);
* ``_buffers`` — Tensors that are state but not learnable (BatchNorm running stats);
* ``_modules`` — child Modules.
"""
from __future__ import annotations

from collections import OrderedDict, namedtuple

import numpy as np

from .._core import dtypes
from .._core.grad_mode import no_grad
from .._core.tensor import Tensor, _wrap
from .parameter import Buffer, Parameter
from .._core.hooks import RemovableHandle
from ..ops.creation import device_arg

__all__ = ["Module", "RemovableHandle"]

_IncompatibleKeys = namedtuple("IncompatibleKeys", ["missing_keys", "unexpected_keys"])


class _GlobalHooks:
    """Hooks for every Module call (``nn.modules.module.register_module_*_hook``); they run
    before each module's own hooks of the same kind."""

    def __init__(self):
        self.forward_pre, self.forward, self.backward, self.backward_pre = (OrderedDict() for _ in range(4))
        self.forward_with_kwargs = set()

    @property
    def any(self):
        return bool(self.forward_pre or self.forward or self.backward or self.backward_pre)


_GLOBAL_HOOKS = _GlobalHooks()


def _add_hook(module, attr, hook, prepend=False):
    hooks = module.__dict__.get(attr)
    if hooks is None:
        hooks = module.__dict__[attr] = OrderedDict()
    handle = RemovableHandle(hooks)
    hooks[handle.id] = hook
    if prepend:
        hooks.move_to_end(handle.id, last=False)
    return handle



def _addindent(s, n):
    lines = s.split("\n")
    if len(lines) == 1:
        return s
    return lines[0] + "\n" + "\n".join(" " * n + line for line in lines[1:])


def _checked_value(key, value, target, assign):
    """``(array ready to write, None)`` or ``(None, error text naming the key)``.

    Without ``assign`` the array is already converted to the target's dtype (a new array when
    the dtype differs), so writing it can't fail half-way; with ``assign`` it is a copy."""
    try:
        arr = value._data if isinstance(value, Tensor) else np.asarray(value)
    except (TypeError, ValueError) as e:
        return None, f"value for {key} can't be converted to an array ({type(value).__name__}: {e})."
    if arr.dtype.kind not in "biufc":
        return None, (f"value for {key} is not numeric (dtype {arr.dtype}, "
                      f"{type(value).__name__}); expected a tensor or numeric array.")
    if tuple(arr.shape) != tuple(target.shape):
        return None, (f"size mismatch for {key}: copying a param with shape {tuple(arr.shape)} from "
                      f"checkpoint, the shape in current model is {tuple(target.shape)}.")
    if assign:
        return np.array(arr, copy=True), None
    if arr.dtype.kind == "c" and target.dtype.kind != "c":
        return None, (f"value for {key} is complex ({arr.dtype}) but the module's tensor is "
                      f"{target.dtype}.")
    return np.asarray(arr, dtype=target.dtype), None


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
            self._modules[name] = value
        elif params is not None and name in self._modules:
            if value is not None:
                raise TypeError(
                    f"cannot assign '{type(value).__name__}' as child module '{name}' "
                    "(lucid.nn.Module or None expected)"
                )
            self._modules[name] = value
        elif params is not None and name in self._buffers:
            if value is not None and not isinstance(value, Tensor):
                raise TypeError(
                    f"cannot assign '{type(value).__name__}' as buffer '{name}' "
                    "(lucid.Tensor or None expected)"
                )
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
        """Replace the data of every parameter, gradient and buffer by ``fn(array)``."""
        for m in self.children():
            m._apply(fn)
        for p in self._parameters.values():
            if p is None:
                continue
            p._data = fn(p._data)
            if p._grad is not None:
                p._grad._data = fn(p._grad._data)
        for k, b in self._buffers.items():
            if b is not None:
                b._data = fn(b._data)
        return self

    def to(self, *args, dtype=None, device=None, **kwargs):
        """Cast floating point parameters and buffers to ``dtype`` (``device`` must be cpu)."""
        for a in args:
            if isinstance(a, Tensor):
                dtype = a.dtype
            elif isinstance(a, str) or a is None or type(a).__name__ == "device":
                device_arg(a, "Module.to")
            else:
                dtype = a
        device_arg(device, "Module.to")
        if dtype is None:
            return self
        dt = dtypes.to_dtype(dtype)
        if dt.kind not in "fc":
            raise TypeError(f"Module.to: only floating point or complex dtypes are accepted, got {dt}")
        return self._apply(lambda a: a.astype(dt, copy=False) if a.dtype.kind in "fc" else a)

    def float(self):
        return self.to(dtypes.float32)

    def double(self):
        return self.to(dtypes.float64)

    def half(self):
        return self.to(dtypes.float16)

    def type(self, dst_type):
        return self.to(dst_type)

    def cpu(self):
        return self

    def cuda(self, device=None):
        """Raise: this build has no CUDA device (see NOTE [Devices] in lucid/_core/backend.py)."""
        device_arg("cuda" if device is None else device if not isinstance(device, int) else f"cuda:{device}",
                   "Module.cuda")
        return self

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
        hooks = self.__dict__
        for hook in hooks.get("_state_dict_pre_hooks", {}).values():
            hook(self, prefix, keep_vars)
        for name, p in self._parameters.items():
            if p is not None:
                destination[prefix + name] = p if keep_vars else p.detach()
        for name, b in self._buffers.items():
            if b is not None and name not in self._non_persistent_buffers_set:
                destination[prefix + name] = b if keep_vars else b.detach()
        for name, m in self._modules.items():
            if m is not None:
                m.state_dict(destination=destination, prefix=prefix + name + ".", keep_vars=keep_vars)
        for hook in hooks.get("_state_dict_hooks", {}).values():
            res = hook(self, destination, prefix, {})
            if res is not None:
                destination = res
        return destination

    def _state_slots(self):
        """``{dotted name: (module, dict name, key)}`` for every entry of ``state_dict``."""
        slots = OrderedDict()
        for mprefix, m in self.named_modules(remove_duplicate=False):
            pre = mprefix + "." if mprefix else ""
            for k, p in m._parameters.items():
                if p is not None:
                    slots[pre + k] = p
            for k, b in m._buffers.items():
                if b is not None and k not in m._non_persistent_buffers_set:
                    slots[pre + k] = b
        return slots

    def load_state_dict(self, state_dict, strict=True, assign=False):
        """Copy values from ``state_dict`` into this module's parameters and buffers.

        Every value is validated (shape, a numeric dtype, conversion to the target's dtype)
        before anything is written, so a failed load changes nothing; the error names the keys.
        With ``assign=True`` the module's tensors take the values' arrays (copied) and dtypes.

        Returns
        -------
        namedtuple ``(missing_keys, unexpected_keys)``

        Raises
        ------
        RuntimeError
            With ``strict=True``, on missing or unexpected keys; always, on shape mismatches.
        """
        if not hasattr(state_dict, "items"):
            raise TypeError(f"load_state_dict: expected a dict-like state_dict, got {type(state_dict).__name__}")
        for name, m in self.named_modules():  # pre-hooks may rewrite the dict; lazy layers read shapes
            pre = name + "." if name else ""
            for hook in m.__dict__.get("_load_state_dict_pre_hooks", {}).values():
                hook(m, state_dict, pre, {}, strict, [], [], [])
            fill = getattr(m, "_materialize_from_state_dict", None)
            if fill is not None:
                fill(state_dict, pre)
        slots = self._state_slots()
        missing = [k for k in slots if k not in state_dict]
        unexpected = [k for k in state_dict if k not in slots]
        errors = []
        if strict:
            if unexpected:
                errors.append("Unexpected key(s) in state_dict: " + ", ".join(f'"{k}"' for k in unexpected) + ". ")
            if missing:
                errors.append("Missing key(s) in state_dict: " + ", ".join(f'"{k}"' for k in missing) + ". ")
        arrays = {}
        for k, target in slots.items():
            if k not in state_dict:
                continue
            arr, err = _checked_value(k, state_dict[k], target, assign)
            if err is not None:
                errors.append(err)
                continue
            arrays[k] = arr
        if errors:
            raise RuntimeError(
                f"Error(s) in loading state_dict for {type(self).__name__}:\n\t" + "\n\t".join(errors)
            )
        with no_grad():
            for k, arr in arrays.items():
                target = slots[k]
                if assign:
                    target._data = arr
                else:  # arr already has the target's dtype: this copy can't fail
                    np.copyto(target._data, arr)
                target._version[0] += 1
        result = _IncompatibleKeys(missing, unexpected)
        for _, m in self.named_modules():
            for hook in m.__dict__.get("_load_state_dict_post_hooks", {}).values():
                hook(m, result)
        return result

    def register_state_dict_pre_hook(self, hook):
        """``hook(module, prefix, keep_vars)`` runs before this module's ``state_dict`` entries are made."""
        return _add_hook(self, "_state_dict_pre_hooks", hook)

    def register_state_dict_post_hook(self, hook):
        """``hook(module, state_dict, prefix, local_metadata)`` runs after; a non-None return replaces the dict."""
        return _add_hook(self, "_state_dict_hooks", hook)

    _register_state_dict_hook = register_state_dict_post_hook

    def register_load_state_dict_pre_hook(self, hook):
        """``hook(module, state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys,
        error_msgs)`` runs before ``load_state_dict`` validates (it may edit ``state_dict``)."""
        return _add_hook(self, "_load_state_dict_pre_hooks", hook)

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

    def register_forward_hook(self, hook, *, prepend=False, with_kwargs=False):
        """``hook(module, args, output)`` runs after ``forward``; a non-None return replaces the output."""
        handle = RemovableHandle(self._forward_hooks)
        self._forward_hooks[handle.id] = hook
        if with_kwargs:
            self._forward_hooks_with_kwargs.add(handle.id)
        if prepend:
            self._forward_hooks.move_to_end(handle.id, last=False)
        return handle

    def register_full_backward_hook(self, hook, prepend=False):
        """``hook(module, grad_input, grad_output)`` runs when the gradients of the module's
        inputs are computed; it may return a tuple replacing ``grad_input``.

        ``grad_input`` / ``grad_output`` are tuples aligned with the Tensor positional
        inputs / outputs (``None`` where an input does not require grad).
        """
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
        import warnings

        warnings.warn("register_backward_hook is deprecated; using register_full_backward_hook",
                      FutureWarning, stacklevel=2)
        return self.register_full_backward_hook(hook)

    def _call_impl(self, *args, **kwargs):
        bpre = self.__dict__.get("_backward_pre_hooks")
        if not (self._forward_pre_hooks or self._forward_hooks or self._backward_hooks or bpre
                or _GLOBAL_HOOKS.any):
            return self.forward(*args, **kwargs)
        g = _GLOBAL_HOOKS
        for hid, hook in list(g.forward_pre.items()) + list(self._forward_pre_hooks.items()):
            if hid in self._forward_pre_hooks_with_kwargs:
                res = hook(self, args, kwargs)
                if res is not None:
                    args, kwargs = res
            else:
                res = hook(self, args)
                if res is not None:
                    args = res if isinstance(res, tuple) else (res,)
        bw = None
        full = list(g.backward.values()) + list(self._backward_hooks.values())
        pre = list(g.backward_pre.values()) + list((bpre or {}).values())
        if full or pre:
            from ._hooks import BackwardHook

            bw = BackwardHook(self, full, pre)
            args = bw.setup_input_hook(args)
        out = self.forward(*args, **kwargs)
        for hid, hook in list(g.forward.items()) + list(self._forward_hooks.items()):
            with_kwargs = hid in self._forward_hooks_with_kwargs or hid in g.forward_with_kwargs
            res = hook(self, args, kwargs, out) if with_kwargs else hook(self, args, out)
            if res is not None:
                out = res
        if bw is not None:
            out = bw.setup_output_hook(out)
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
