"""Old-style ``weight_norm`` / ``remove_weight_norm`` (``torch.nn.utils.weight_norm``):
parameters ``<name>_g`` and ``<name>_v`` and a forward pre-hook that recomputes
``<name> = g * v / ||v||`` before every call. Prefer
:func:`lucid.nn.utils.parametrizations.weight_norm`.
"""
from __future__ import annotations

from ..parameter import Parameter
from .parametrizations import _norm_except_dim, _weight_norm

__all__ = ["weight_norm", "remove_weight_norm"]


class _WeightNormHook:
    def __init__(self, name, dim):
        self.name, self.dim = name, dim

    def compute_weight(self, module):
        return _weight_norm(getattr(module, self.name + "_v"), getattr(module, self.name + "_g"), self.dim)

    def __call__(self, module, args):
        setattr(module, self.name, self.compute_weight(module))


def weight_norm(module, name="weight", dim=0):
    """Split ``module.<name>`` into a magnitude ``<name>_g`` and a direction ``<name>_v``.

    Examples
    --------
    >>> import lucid, lucid.nn as nn
    >>> m = nn.utils.weight_norm(nn.Linear(3, 2))
    >>> sorted(n for n, _ in m.named_parameters())
    ['bias', 'weight_g', 'weight_v']
    """
    dim = -1 if dim is None else dim
    for hook in module._forward_pre_hooks.values():
        if isinstance(hook, _WeightNormHook) and hook.name == name:
            raise RuntimeError(f"weight_norm: cannot register two weight_norm hooks on the same parameter {name}")
    weight = getattr(module, name)
    hook = _WeightNormHook(name, dim)
    g = Parameter(_norm_except_dim(weight, dim).detach().clone())  # may raise: before the module changes
    del module._parameters[name]
    module.register_parameter(name + "_g", g)
    module.register_parameter(name + "_v", Parameter(weight.detach().clone()))
    setattr(module, name, hook.compute_weight(module))
    module.register_forward_pre_hook(hook)
    return module


def remove_weight_norm(module, name="weight"):
    """Undo :func:`weight_norm`: ``<name>`` becomes a plain parameter again.

    Examples
    --------
    >>> import lucid.nn as nn
    >>> m = nn.utils.remove_weight_norm(nn.utils.weight_norm(nn.Linear(3, 2)))
    >>> sorted(n for n, _ in m.named_parameters())
    ['bias', 'weight']
    """
    for k, hook in list(module._forward_pre_hooks.items()):
        if isinstance(hook, _WeightNormHook) and hook.name == name:
            weight = hook.compute_weight(module).detach()
            del module._forward_pre_hooks[k]
            del module._parameters[name + "_g"]
            del module._parameters[name + "_v"]
            module.__dict__.pop(name, None)
            module.register_parameter(name, Parameter(weight.clone()))
            return module
    raise ValueError(f"remove_weight_norm: weight_norm of '{name}' not found in {type(module).__name__}")
