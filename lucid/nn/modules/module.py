"""Global module hooks (``torch.nn.modules.module.register_module_*``): hooks that run for
every Module call, before the module's own hooks of the same kind.

Examples
--------
>>> import lucid, lucid.nn as nn
>>> from lucid.nn.modules.module import register_module_forward_hook
>>> seen = []
>>> h = register_module_forward_hook(lambda m, args, out: seen.append(type(m).__name__))
>>> _ = nn.Sequential(nn.ReLU())(lucid.zeros(1))
>>> h.remove(); seen
['ReLU', 'Sequential']
"""
from __future__ import annotations

from ..._core.hooks import RemovableHandle
from ..module import _GLOBAL_HOOKS, Module, _addindent, _IncompatibleKeys  # noqa: F401

__all__ = ["Module", "register_module_forward_pre_hook", "register_module_forward_hook",
           "register_module_full_backward_hook", "register_module_full_backward_pre_hook",
           "register_module_backward_hook", "register_module_parameter_registration_hook",
           "register_module_buffer_registration_hook", "register_module_module_registration_hook"]


def _register(hooks, hook):
    handle = RemovableHandle(hooks)
    hooks[handle.id] = hook
    return handle


def register_module_forward_pre_hook(hook):
    """``hook(module, args)`` before every module's ``forward``; may return new args."""
    return _register(_GLOBAL_HOOKS.forward_pre, hook)


def register_module_forward_hook(hook, *, with_kwargs=False, always_call=False):
    """``hook(module, args, output)`` (or ``(module, args, kwargs, output)``) after every
    module's ``forward``; a non-None return replaces the output. With ``always_call=True``
    it also runs when a module's call raises (``output`` is None if ``forward`` itself
    raised), before the error propagates; an error in the hook then only warns."""
    handle = _register(_GLOBAL_HOOKS.forward, hook)
    if with_kwargs:
        _GLOBAL_HOOKS.forward_with_kwargs.add(handle.id)
    if always_call:
        _GLOBAL_HOOKS.forward_always_called.add(handle.id)
    return handle


def register_module_full_backward_hook(hook):
    """``hook(module, grad_input, grad_output)`` for every module (see
    ``Module.register_full_backward_hook``)."""
    if _GLOBAL_HOOKS.backward_non_full:
        raise RuntimeError("Cannot use both regular backward hooks and full backward hooks as a global Module "
                           "hook. Please use only one of them.")
    return _register(_GLOBAL_HOOKS.backward, hook)


def register_module_full_backward_pre_hook(hook):
    """``hook(module, grad_output)`` for every module (see
    ``Module.register_full_backward_pre_hook``)."""
    return _register(_GLOBAL_HOOKS.backward_pre, hook)


def register_module_backward_hook(hook):
    """PyTorch's deprecated global backward hook: ``hook(module, grad_input, grad_output)`` on the
    autograd node that made each module's output, as ``Module.register_backward_hook`` (NOTE
    [Non-full backward hooks]); it cannot be mixed with :func:`register_module_full_backward_hook`."""
    if _GLOBAL_HOOKS.backward:
        raise RuntimeError("Cannot use both regular backward hooks and full backward hooks as a global Module "
                           "hook. Please use only one of them.")
    return _register(_GLOBAL_HOOKS.backward_non_full, hook)


def register_module_parameter_registration_hook(hook):
    """``hook(module, name, param)`` whenever any module registers a parameter (by
    ``register_parameter`` or attribute assignment); a non-None return is registered instead.

    Examples
    --------
    >>> import lucid.nn as nn
    >>> from lucid.nn.modules.module import register_module_parameter_registration_hook
    >>> names = []
    >>> h = register_module_parameter_registration_hook(lambda m, name, p: names.append(name))
    >>> _ = nn.Linear(2, 3)
    >>> h.remove(); names
    ['weight', 'bias']
    """
    return _register(_GLOBAL_HOOKS.parameter_registration, hook)


def register_module_buffer_registration_hook(hook):
    """``hook(module, name, buffer)`` whenever any module registers a buffer (by
    ``register_buffer`` or assignment to a buffer's name); a non-None return is registered instead."""
    return _register(_GLOBAL_HOOKS.buffer_registration, hook)


def register_module_module_registration_hook(hook):
    """``hook(module, name, submodule)`` whenever any module registers a child module (by
    ``add_module``/``register_module`` or attribute assignment); a non-None return is registered instead."""
    return _register(_GLOBAL_HOOKS.module_registration, hook)
