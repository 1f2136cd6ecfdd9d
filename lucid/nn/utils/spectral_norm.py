"""Old-style ``spectral_norm`` / ``remove_spectral_norm`` (``torch.nn.utils.spectral_norm``):
parameter ``<name>_orig``, buffers ``<name>_u``/``<name>_v`` and a forward pre-hook that sets
``<name> = <name>_orig / sigma`` (one power iteration per training-mode call). Prefer
:func:`lucid.nn.utils.parametrizations.spectral_norm`.
"""
from __future__ import annotations

from ..._core.grad_mode import no_grad
from .. import functional as F
from ..parameter import Parameter

__all__ = ["spectral_norm", "remove_spectral_norm"]


class _SpectralNormHook:
    def __init__(self, name, n_power_iterations, dim, eps):
        if n_power_iterations <= 0:
            raise ValueError(f"spectral_norm: expected n_power_iterations to be positive, got {n_power_iterations}")
        self.name, self.n_power_iterations, self.dim, self.eps = name, n_power_iterations, dim, eps

    def to_matrix(self, weight):
        if self.dim != 0:
            weight = weight.permute(self.dim, *(d for d in range(weight.ndim) if d != self.dim))
        return weight.reshape(weight.shape[0], -1)

    def compute_weight(self, module, do_power_iteration):
        weight = getattr(module, self.name + "_orig")
        u, v = getattr(module, self.name + "_u"), getattr(module, self.name + "_v")
        mat = self.to_matrix(weight)
        if do_power_iteration:
            with no_grad():
                m = mat.detach()
                for _ in range(self.n_power_iterations):  # v first, then u (PyTorch's order)
                    v._data[...] = F.normalize(m.T @ u, dim=0, eps=self.eps)._data
                    u._data[...] = F.normalize(m @ v, dim=0, eps=self.eps)._data
                u._version[0] += 1
                v._version[0] += 1
            u, v = u.clone(), v.clone()
        sigma = (u * (mat @ v)).sum()
        return weight / sigma

    def __call__(self, module, inputs):
        setattr(module, self.name, self.compute_weight(module, module.training))


def spectral_norm(module, name="weight", n_power_iterations=1, eps=1e-12, dim=None):
    """Divide ``module.<name>`` by its spectral norm, estimated by power iteration.

    Examples
    --------
    >>> import lucid.nn as nn
    >>> m = nn.utils.spectral_norm(nn.Linear(4, 3))
    >>> sorted(m.state_dict())
    ['bias', 'weight_orig', 'weight_u', 'weight_v']
    """
    import lucid

    for hook in module._forward_pre_hooks.values():
        if isinstance(hook, _SpectralNormHook) and hook.name == name:
            raise RuntimeError(f"spectral_norm: cannot register two spectral_norm hooks on the same parameter {name}")
    if dim is None:
        dim = 1 if "ConvTranspose" in type(module).__name__ else 0
    hook = _SpectralNormHook(name, n_power_iterations, dim, eps)
    weight = module._parameters[name]
    with no_grad():
        mat = hook.to_matrix(weight.detach())
        h, w = mat.shape
        u = F.normalize(lucid.randn(h, dtype=weight.dtype, device=weight.device), dim=0, eps=eps)
        v = F.normalize(lucid.randn(w, dtype=weight.dtype, device=weight.device), dim=0, eps=eps)
    del module._parameters[name]
    module.register_parameter(name + "_orig", weight)
    setattr(module, name, weight.detach())
    module.register_buffer(name + "_u", u)
    module.register_buffer(name + "_v", v)
    module.register_forward_pre_hook(hook)
    return module


def remove_spectral_norm(module, name="weight"):
    """Undo :func:`spectral_norm`: ``<name>`` becomes a plain parameter (the current normalised value).

    Examples
    --------
    >>> import lucid.nn as nn
    >>> m = nn.utils.remove_spectral_norm(nn.utils.spectral_norm(nn.Linear(4, 3)))
    >>> sorted(m.state_dict())
    ['bias', 'weight']
    """
    for k, hook in list(module._forward_pre_hooks.items()):
        if isinstance(hook, _SpectralNormHook) and hook.name == name:
            with no_grad():
                weight = hook.compute_weight(module, do_power_iteration=False)
            del module._forward_pre_hooks[k]
            module.__dict__.pop(name, None)
            del module._parameters[name + "_orig"]
            del module._buffers[name + "_u"]
            del module._buffers[name + "_v"]
            module.register_parameter(name, Parameter(weight.detach().clone()))
            return module
    raise ValueError(f"remove_spectral_norm: spectral_norm of '{name}' not found in {type(module).__name__}")
