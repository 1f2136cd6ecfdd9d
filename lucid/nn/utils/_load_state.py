"""The machinery of ``Module.load_state_dict`` (PyTorch's recursive ``load`` and the default
``Module._load_from_state_dict``), kept out of ``nn/module.py``.

NOTE [Loading by module]
As PyTorch, the load walks the module tree top-down (shared modules once per path) and each
module sees only the keys under its prefix: its load pre-hooks run, then its own keys are
checked (missing, shape and dtype, ``_extra_state``) and its unexpected keys reported, before
its children are visited with the filtered dict. Unlike PyTorch, the default step only
records the checked values; they are written once every module passed (so a failed load
changes nothing), then the post-hooks run bottom-up. A module whose class overrides
``_load_from_state_dict`` is called through it, and its values are written at once.
"""
from __future__ import annotations

import sys

import numpy as np

from ..._core import backend, dtypes
from ..._core.grad_mode import no_grad
from ..._core.tensor import Tensor


def _checked_value(key, value, target, assign):
    """``(array ready to write, None)`` or ``(None, error text naming the key)``.

    Without ``assign`` the array is already converted to the target's device and dtype (a new
    array when either differs: PyTorch's ``param.copy_(value)``, the one explicit transfer), so
    writing it can't fail half-way; with ``assign`` it is a copy on the value's own device, as
    PyTorch's ``assign=True`` keeps the value's tensor (a host array or list: the CPU)."""
    if _is_placeholder(target) and _is_placeholder(value):  # lazy into lazy: stays so (NOTE [Lazy modules])
        return target._data, None
    layout = _dtensor_class()
    if layout is not None and (isinstance(value, layout) or isinstance(target, layout)):
        from ...distributed.tensor._state import checked_value

        return checked_value(key, value, target, assign)
    try:
        if isinstance(value, Tensor):
            arr = value._data
        elif value.__class__ is np.ndarray or backend.is_array(value):
            arr = value
        else:
            arr = np.asarray(value)
    except (TypeError, ValueError) as e:
        return None, f"value for {key} can't be converted to an array ({type(value).__name__}: {e})."
    if arr.dtype.kind in "Vf":
        dtypes.supported(arr.dtype)  # an ml_dtypes array enables lucid.bfloat16 (NOTE [bfloat16], [float8])
    kind = dtypes.kind_of(arr.dtype)
    if kind not in "biufc":
        return None, (f"value for {key} is not numeric (dtype {arr.dtype}, "
                      f"{type(value).__name__}); expected a tensor or numeric array.")
    if target.ndim == 0 and tuple(arr.shape) == (1,):  # PyTorch loads a (1,) value into a 0-d tensor
        arr = arr.reshape(())
    if tuple(arr.shape) != tuple(target.shape):
        return None, (f"size mismatch for {key}: copying a param with shape {tuple(arr.shape)} from "
                      f"checkpoint, the shape in current model is {tuple(target.shape)}.")
    if assign:
        if getattr(target, "requires_grad", False) and kind not in "fc":
            return None, (f'While copying the parameter named "{key}", an exception occurred: only Tensors '
                          f"of floating point and complex dtype can require gradients (got {arr.dtype}).")
        return backend.xp.array(arr), None  # a copy, on the value's device
    if kind == "c" and target.dtype.kind != "c":
        return None, (f"value for {key} is complex ({arr.dtype}) but the module's tensor is "
                      f"{target.dtype}.")
    dest = target._data
    if arr.__class__ is not dest.__class__ or dest.__class__ is not np.ndarray:
        arr = backend.to_device(arr, backend.device_of_array(dest))  # itself when already there
    return backend.xp.asarray(arr, dtype=target.dtype), None


def _is_placeholder(t):
    mod = sys.modules.get("lucid.nn.lazy")
    return mod is not None and isinstance(t, mod._PLACEHOLDERS)


def _dtensor_class():
    """DTensor, once ``lucid.distributed.tensor`` is loaded (before that nothing can be one)."""
    mod = sys.modules.get("lucid.distributed.tensor._api")
    return None if mod is None else mod.DTensor


def _replace_class():
    mod = sys.modules.get("lucid.distributed.tensor._state")
    return None if mod is None else mod.Replace


def _replace(module, name, value):
    """``assign=True`` that changes the tensor's kind (see ``distributed/tensor/_state.py``)."""
    (module._parameters if name in module._parameters else module._buffers)[name] = value


def _key_errors(missing, unexpected):
    """PyTorch's strict-mode messages: missing keys first, then unexpected ones."""
    out = []
    if missing:
        out.append("Missing key(s) in state_dict: " + ", ".join(f'"{k}"' for k in missing) + ". ")
    if unexpected:
        out.append("Unexpected key(s) in state_dict: " + ", ".join(f'"{k}"' for k in unexpected) + ". ")
    return out


def _copy_here(arr):
    """A copy of ``arr`` on its own device (NOTE [Several devices])."""
    with backend.on_device(arr):
        return arr.copy()


def _write_state(writes, assign):
    """Write checked arrays (see ``_checked_value``): ``writes`` is a list of ``(tensor, array)``."""
    with no_grad():
        for target, arr in writes:
            if assign:
                target._data = arr
            else:  # arr already has the target's device and dtype: this copy can't fail
                with backend.on_device(arr):
                    np.copyto(target._data, arr)
            target._version[0] += 1


def _load_pre_hooks(m, state_dict, prefix, local_metadata, missing, unexpected, errors):
    """One module's part of ``load_state_dict`` before the checks: a class's own upgrade of old
    checkpoints (first, as PyTorch's ``_load_from_state_dict``), the pre-hooks, lazy shapes."""
    cls = type(m)
    if hasattr(cls, "_upgrade_state_dict"):
        m._upgrade_state_dict(state_dict, prefix, local_metadata)
    for hook in m.__dict__.get("_load_state_dict_pre_hooks", {}).values():
        hook(m, state_dict, prefix, local_metadata, True, missing, unexpected, errors)
    if hasattr(cls, "_materialize_from_state_dict"):
        m._materialize_from_state_dict(state_dict, prefix)


def _post_order(module):
    """Every submodule (repeats included) children first: the order of PyTorch's load post-hooks."""
    for child in module._modules.values():
        if child is not None:
            yield from _post_order(child)
    yield module


def _default_extra(module, method):
    from ..module import Module

    return getattr(type(module), method) is getattr(Module, method)


def _unexpected(module, state_dict, prefix, local, extra_key):
    for key in state_dict:
        if not isinstance(key, str):
            if prefix == "":  # nothing in the tree can take it
                yield key
            continue
        if not key.startswith(prefix) or key == extra_key:
            continue
        head, dot, _ = key[len(prefix):].partition(".")
        if (head not in module._modules) if dot else (head not in local):
            yield key


def load_module(module, state_dict, prefix, local_metadata, strict, missing, unexpected, errors, pending):
    """The default ``_load_from_state_dict`` of one module (see NOTE [Loading by module]): the
    checked values go to ``pending`` (a list of ``(tensor, array)`` and ``(callable, value)``)
    when one is given, else they are written now."""
    _load_pre_hooks(module, state_dict, prefix, local_metadata, missing, unexpected, errors)
    assign = bool(local_metadata.get("assign_to_params_buffers", False))
    local = module._local_state()
    writes, extra = [], []
    for k, target in local.items():
        key = prefix + k
        if key not in state_dict:
            if strict:
                missing.append(key)
            continue
        arr, err = _checked_value(key, state_dict[key], target, assign)
        if err is not None:
            errors.append(err)
        elif arr.__class__ is _replace_class():  # into or from a DTensor with assign=True
            extra.append((lambda v, k=k: _replace(module, k, v), arr.value))
        else:
            writes.append((target, arr))
    extra_key = prefix + "_extra_state"
    if not _default_extra(module, "set_extra_state"):
        if extra_key in state_dict:
            extra.append((module.set_extra_state, state_dict[extra_key]))
        elif strict:
            missing.append(extra_key)
    elif strict and extra_key in state_dict:
        unexpected.append(extra_key)
    if strict:
        unexpected.extend(_unexpected(module, state_dict, prefix, local, extra_key))
    if pending is None:
        _write_state(writes, assign)
        for fn, value in extra:
            fn(value)
    else:
        pending.extend(writes)
        pending.extend(extra)


def _walk(module, state_dict, prefix, metadata, assign, missing, unexpected, errors, pending):
    local_metadata = {} if metadata is None else dict(metadata.get(prefix[:-1], {}))
    if assign:
        local_metadata["assign_to_params_buffers"] = True
    from ..module import Module

    if type(module)._load_from_state_dict is Module._load_from_state_dict:
        load_module(module, state_dict, prefix, local_metadata, True, missing, unexpected, errors, pending)
    else:
        module._load_from_state_dict(state_dict, prefix, local_metadata, True, missing, unexpected, errors)
    for name, child in module._modules.items():
        if child is not None:
            child_prefix = prefix + name + "."
            sub = {k: v for k, v in state_dict.items() if isinstance(k, str) and k.startswith(child_prefix)}
            _walk(child, sub, child_prefix, metadata, assign, missing, unexpected, errors, pending)


def load_tree(root, state_dict, strict, assign, result_type):
    """``Module.load_state_dict``'s body; ``state_dict`` is already the caller's dict copied."""
    metadata = getattr(state_dict, "_metadata", None)
    missing, unexpected, errors, pending = [], [], [], []
    _walk(root, state_dict, "", metadata, assign, missing, unexpected, errors, pending)
    writes = [(t, a) for t, a in pending if isinstance(t, Tensor)]
    post = [(m, h) for m in _post_order(root) for h in m.__dict__.get("_load_state_dict_post_hooks", {}).values()]
    errors = _key_errors(missing, unexpected) + errors if strict and not post else errors
    name = type(root).__name__
    if errors:
        raise RuntimeError(f"Error(s) in loading state_dict for {name}:\n\t" + "\n\t".join(errors))
    old = [(t, t._data if assign else _copy_here(t._data)) for t, _ in writes] if strict and post else None
    _write_state(writes, assign)
    for fn, value in pending:
        if not isinstance(fn, Tensor):
            fn(value)
    result = result_type(missing, unexpected)
    for m, hook in post:
        if hook(m, result) is not None:
            raise AssertionError("load_state_dict post-hooks must return None; edit incompatible_keys in place")
    if strict and post and (missing or unexpected):
        _write_state(old, assign)
        raise RuntimeError(f"Error(s) in loading state_dict for {name}:\n\t"
                           + "\n\t".join(_key_errors(missing, unexpected)))
    return result
