"""Helpers of the sparsifiers (PyTorch's ``torch.ao.pruning.sparsifier.utils``): the
``FakeSparsity`` parametrization that multiplies a tensor by its mask, and the fully
qualified name (fqn) lookups that a sparsity ``config`` is written in.
"""
from __future__ import annotations

from ....nn.module import Module
from ....nn.utils.parametrize import is_parametrized, type_before_parametrizations

__all__ = ["module_contains_param", "swap_module", "module_to_fqn", "fqn_to_module",
           "get_arg_info_from_tensor_fqn", "FakeSparsity"]


def module_contains_param(module, parametrization):
    """Whether any tensor of ``module`` is parametrized by an instance of ``parametrization``."""
    if not is_parametrized(module):
        return False
    return any(isinstance(p, parametrization) for plist in module.parametrizations.values() for p in plist)


def swap_module(mod, mapping):
    """``mapping[type(mod)].from_dense(mod)`` (the type before parametrizations), keeping
    ``mod``'s forward pre-hooks and forward hooks and its device; ``mod`` itself when its type
    is not in ``mapping``."""
    dense_type = type_before_parametrizations(mod)
    if dense_type not in mapping:
        return mod
    new_mod = mapping[dense_type].from_dense(mod)
    for hook in mod._forward_pre_hooks.values():
        new_mod.register_forward_pre_hook(hook)
    for hook in mod._forward_hooks.values():
        new_mod.register_forward_hook(hook)
    devices = {str(t.device) for t in list(mod.parameters()) + list(mod.buffers())}
    if len(devices) > 1:
        raise AssertionError(f"swap_module only works with modules on a single device, but got devices {devices}")
    if devices:
        new_mod.to(next(iter(devices)))
    return new_mod


def module_to_fqn(model, module, prefix=""):
    """The dotted name of ``module`` inside ``model`` (``""`` for ``model`` itself), or None
    when ``module`` is not a descendant of ``model``.

    Examples
    --------
    >>> import lucid.nn as nn
    >>> from lucid.ao.pruning import module_to_fqn
    >>> model = nn.Sequential(nn.Linear(2, 2), nn.Sequential(nn.ReLU(), nn.Linear(2, 1)))
    >>> module_to_fqn(model, model[1][1])
    '1.1'
    """
    if module is model:
        return ""
    for name, child in model.named_children():
        fqn = module_to_fqn(child, module, ".")
        if isinstance(fqn, str):
            return prefix + name + fqn
    return None


def fqn_to_module(model, path):
    """The module or tensor at dotted ``path`` inside ``model`` (``""`` is ``model``), or None
    when nothing is there: ``model.get_submodule`` that also reaches tensors.

    Examples
    --------
    >>> import lucid.nn as nn
    >>> from lucid.ao.pruning import fqn_to_module
    >>> model = nn.Sequential(nn.Linear(2, 3))
    >>> tuple(fqn_to_module(model, "0.weight").shape), fqn_to_module(model, "0.nothing")
    ((3, 2), None)
    """
    if path != "":
        for name in path.split("."):
            model = getattr(model, name, None)
    return model


def get_arg_info_from_tensor_fqn(model, tensor_fqn):
    """Split ``tensor_fqn`` into the dict a sparsifier group holds: ``module_fqn``, ``module``
    (None when the path leads nowhere), ``tensor_name`` and ``tensor_fqn``.

    Examples
    --------
    >>> import lucid.nn as nn
    >>> from lucid.ao.pruning import get_arg_info_from_tensor_fqn
    >>> info = get_arg_info_from_tensor_fqn(nn.Sequential(nn.Linear(2, 2)), "0.weight")
    >>> info["module_fqn"], info["tensor_name"], type(info["module"]).__name__
    ('0', 'weight', 'Linear')
    """
    tensor_name = tensor_fqn.rsplit(".", maxsplit=1)[-1]
    module_fqn = tensor_fqn[: -len(tensor_name) - ("." in tensor_fqn)]
    return {"module_fqn": module_fqn, "module": fqn_to_module(model, module_fqn), "tensor_name": tensor_name,
            "tensor_fqn": tensor_fqn}


class FakeSparsity(Module):
    """The parametrization ``x -> mask * x`` a sparsifier puts on each tensor it sparsifies.

    NOTE [Masks keep their identity]
    The sparsifier's ``state[fqn]["mask"]`` *is* this module's ``mask`` buffer: sparsifiers
    write a new mask through ``mask.data = new`` (which may change its dtype to bool or int8,
    as PyTorch's do), never by registering another tensor, so both references stay one.

    The mask is left out of ``state_dict`` (it lives in the sparsifier's own state_dict); as
    it is also a non-persistent buffer, a prepared model loads its own ``state_dict`` (PyTorch
    reports the mask as a missing key there).

    Examples
    --------
    >>> import lucid
    >>> from lucid.ao.pruning import FakeSparsity
    >>> FakeSparsity(lucid.tensor([1., 0., 1.]))(lucid.tensor([2., 3., 4.]))
    tensor([2., 0., 4.])
    """

    def __init__(self, mask):
        super().__init__()
        self.register_buffer("mask", mask, persistent=False)

    def forward(self, x):
        if tuple(self.mask.shape) != tuple(x.shape):
            raise AssertionError(f"FakeSparsity: mask shape ({tuple(self.mask.shape)}) must match x shape "
                                 f"({tuple(x.shape)})")
        return self.mask * x

    def state_dict(self, *args, **kwargs):
        return {}
