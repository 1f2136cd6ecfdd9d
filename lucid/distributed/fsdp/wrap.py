"""Auto-wrap policies: which submodules ``FullyShardedDataParallel`` makes units of their own.

A policy is called as ``policy(module=m, recurse=r, nonwrapped_numel=n)``: with ``recurse=True``
it says whether to look inside ``m``'s children, with ``recurse=False`` whether to wrap ``m``
itself (``n`` = its parameter elements not already in a wrapped child). As PyTorch's.
"""
from __future__ import annotations

__all__ = ["always_wrap_policy", "lambda_auto_wrap_policy", "transformer_auto_wrap_policy",
           "size_based_auto_wrap_policy", "ModuleWrapPolicy", "wrap", "enable_wrap"]


def always_wrap_policy(module, recurse, *args, **kwargs):
    """Wrap every submodule."""
    return True


def _module_wrap_policy(module, recurse, nonwrapped_numel, module_classes):
    if recurse:
        return True
    return isinstance(module, tuple(module_classes))


def lambda_auto_wrap_policy(module, recurse, nonwrapped_numel, lambda_fn):
    """Wrap the modules for which ``lambda_fn(module)`` is true."""
    if recurse:
        return True
    return bool(lambda_fn(module))


def transformer_auto_wrap_policy(module, recurse, nonwrapped_numel, transformer_layer_cls):
    """Wrap every instance of the classes in ``transformer_layer_cls`` (use with functools.partial).

    Examples
    --------
    >>> import functools, lucid.nn as nn
    >>> from lucid.distributed.fsdp.wrap import transformer_auto_wrap_policy
    >>> p = functools.partial(transformer_auto_wrap_policy, transformer_layer_cls={nn.Linear})
    >>> p(module=nn.Linear(2, 2), recurse=False, nonwrapped_numel=6)
    True
    """
    return _module_wrap_policy(module, recurse, nonwrapped_numel, set(transformer_layer_cls))


def size_based_auto_wrap_policy(module, recurse, nonwrapped_numel, min_num_params=int(1e8),
                                force_leaf_modules=None, exclude_wrap_modules=None):
    """Wrap a module once its not-yet-wrapped parameters reach ``min_num_params`` elements.

    ``force_leaf_modules`` are never looked into, ``exclude_wrap_modules`` never wrapped
    (default: ``MultiheadAttention`` and ``ModuleList``/``ModuleDict``, as PyTorch).

    Examples
    --------
    >>> import functools, lucid.nn as nn
    >>> from lucid.distributed.fsdp.wrap import size_based_auto_wrap_policy
    >>> p = functools.partial(size_based_auto_wrap_policy, min_num_params=10)
    >>> p(module=nn.Linear(2, 2), recurse=False, nonwrapped_numel=6)
    False
    """
    from ... import nn

    if force_leaf_modules is None:
        force_leaf_modules = {getattr(nn, "MultiheadAttention", type(None))}
    if exclude_wrap_modules is None:
        exclude_wrap_modules = {nn.ModuleList, nn.ModuleDict}
    is_large = nonwrapped_numel >= min_num_params
    if recurse:
        return is_large and not isinstance(module, tuple(force_leaf_modules))
    return is_large and not isinstance(module, tuple(exclude_wrap_modules))


class ModuleWrapPolicy:
    """Wrap every instance of the given module classes (PyTorch's recommended policy).

    Examples
    --------
    >>> import lucid.nn as nn
    >>> from lucid.distributed.fsdp.wrap import ModuleWrapPolicy
    >>> ModuleWrapPolicy({nn.Linear})(module=nn.ReLU(), recurse=False, nonwrapped_numel=0)
    False
    """

    def __init__(self, module_classes):
        self._module_classes = frozenset(module_classes)

    def __call__(self, module, recurse, *args, **kwargs):
        return _module_wrap_policy(module, recurse, -1, self._module_classes)

    def __repr__(self):
        return f"ModuleWrapPolicy({sorted(c.__name__ for c in self._module_classes)})"


def recursive_wrap(module, policy, wrap_fn, only_wrap_children=False):
    """``(module, wrapped_numel)`` after wrapping, bottom-up, what ``policy`` selects (PyTorch's
    ``_recursive_wrap``); ``wrap_fn(m)`` makes a unit of ``m``."""
    from .fully_sharded_data_parallel import FullyShardedDataParallel

    if isinstance(module, FullyShardedDataParallel):
        return module, 0
    numel = sum(p.numel() for p in module.parameters() if not getattr(p, "_fsdp_flat", False))
    if not policy(module=module, recurse=True, nonwrapped_numel=numel):
        return module, 0
    wrapped = 0
    for name, child in list(module.named_children()):
        new, n = recursive_wrap(child, policy, wrap_fn)
        if new is not child:
            setattr(module, name, new)
        wrapped += n
    if not only_wrap_children and policy(module=module, recurse=False, nonwrapped_numel=numel - wrapped):
        return wrap_fn(module), numel
    return module, wrapped


_WRAP_CONTEXT = [None]


def wrap(module, **wrap_overrides):
    """Inside :func:`enable_wrap`, make ``module`` an FSDP unit; outside it, return it unchanged."""
    ctx = _WRAP_CONTEXT[0]
    if ctx is None:
        return module
    cls, kwargs = ctx
    return cls(module, **{**kwargs, **wrap_overrides})


class enable_wrap:  # noqa: N801  (PyTorch's name)
    """``with enable_wrap(wrapper_cls=FSDP, **kwargs): wrap(m)`` wraps ``m`` with those arguments."""

    def __init__(self, *, wrapper_cls, **wrapper_kwargs):
        self._ctx = (wrapper_cls, wrapper_kwargs)

    def __enter__(self):
        if _WRAP_CONTEXT[0] is not None:
            raise NotImplementedError("enable_wrap: you are already within a wrapping context")
        _WRAP_CONTEXT[0] = self._ctx

    def __exit__(self, *exc):
        _WRAP_CONTEXT[0] = None

