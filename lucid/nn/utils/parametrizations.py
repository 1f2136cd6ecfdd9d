"""New-style parametrizations (``torch.nn.utils.parametrizations``): ``weight_norm`` and
``spectral_norm``, registered with :func:`lucid.nn.utils.parametrize.register_parametrization`
(state-dict keys ``parametrizations.weight.original0/1``, ``...original`` + ``...0._u/_v``).
"""
from __future__ import annotations

from ..._core.grad_mode import no_grad
from .. import functional as F
from ..module import Module
from . import parametrize

__all__ = ["weight_norm", "spectral_norm"]


def _norm_except_dim(v, dim):
    """The 2-norm of ``v`` over every dim but ``dim`` (kept, size 1 elsewhere); all dims if None/-1."""
    import lucid

    if dim is None or dim == -1:
        return lucid.norm(v)
    dim = dim % v.ndim
    axes = tuple(d for d in range(v.ndim) if d != dim)
    return lucid.norm(v, 2, axes, keepdim=True)


def _weight_norm(v, g, dim):
    return v * (g / _norm_except_dim(v, dim))


class _WeightNorm(Module):
    def __init__(self, dim=0):
        super().__init__()
        self.dim = -1 if dim is None else dim

    def forward(self, weight_g, weight_v):
        return _weight_norm(weight_v, weight_g, self.dim)

    def right_inverse(self, weight):
        return _norm_except_dim(weight, self.dim).detach(), weight.detach()


def weight_norm(module, name="weight", dim=0):
    """Reparametrize ``module.<name>`` as ``g * v / ||v||`` (norm over every dim but ``dim``);
    ``g`` is ``parametrizations.<name>.original0``, ``v`` is ``original1``.

    Examples
    --------
    >>> import lucid, lucid.nn as nn
    >>> from lucid.nn.utils.parametrizations import weight_norm
    >>> m = weight_norm(nn.Linear(3, 2))
    >>> sorted(m.state_dict())
    ['bias', 'parametrizations.weight.original0', 'parametrizations.weight.original1']
    """
    parametrize.register_parametrization(module, name, _WeightNorm(dim), unsafe=True)
    return module


class _SpectralNorm(Module):
    def __init__(self, weight, n_power_iterations=1, dim=0, eps=1e-12):
        super().__init__()
        import lucid

        ndim = weight.ndim
        if not -ndim <= dim < max(ndim, 1):
            raise IndexError(f"spectral_norm: dim must be in [-{ndim}, {ndim - 1}], got {dim}")
        if n_power_iterations <= 0:
            raise ValueError(f"spectral_norm: n_power_iterations must be positive, got {n_power_iterations}")
        self.dim = dim if dim >= 0 else dim + ndim
        self.eps, self.n_power_iterations = eps, n_power_iterations
        if ndim > 1:
            mat = self._to_matrix(weight.detach())
            h, w = mat.shape
            self.register_buffer("_u", F.normalize(lucid.randn(h, dtype=weight.dtype), dim=0, eps=eps))
            self.register_buffer("_v", F.normalize(lucid.randn(w, dtype=weight.dtype), dim=0, eps=eps))
            self._power_method(mat, 15)

    def _to_matrix(self, weight):
        if self.dim != 0:
            weight = weight.permute(self.dim, *(d for d in range(weight.ndim) if d != self.dim))
        return weight.reshape(weight.shape[0], -1)

    def _power_method(self, mat, n):
        with no_grad():
            mat = mat.detach()
            for _ in range(n):
                self._u._data[...] = F.normalize(mat @ self._v, dim=0, eps=self.eps)._data
                self._v._data[...] = F.normalize(mat.T @ self._u, dim=0, eps=self.eps)._data
            self._u._version[0] += 1
            self._v._version[0] += 1

    def forward(self, weight):
        if weight.ndim == 1:
            return F.normalize(weight, dim=0, eps=self.eps)
        mat = self._to_matrix(weight)
        if self.training:
            self._power_method(mat, self.n_power_iterations)
        u, v = self._u.clone(), self._v.clone()
        sigma = (u * (mat @ v)).sum()
        return weight / sigma

    def right_inverse(self, value):
        return value


def spectral_norm(module, name="weight", n_power_iterations=1, eps=1e-12, dim=None):
    """Divide ``module.<name>`` by its largest singular value, estimated by power iteration
    (``n_power_iterations`` per training-mode access; buffers ``_u``/``_v``). ``dim`` is the
    output dim (default 1 for ConvTranspose layers, else 0).

    Examples
    --------
    >>> import lucid, lucid.nn as nn
    >>> from lucid.nn.utils.parametrizations import spectral_norm
    >>> m = spectral_norm(nn.Linear(4, 3))
    >>> round(float(lucid.linalg.svdvals(m.weight.detach())[0]), 3)
    1.0
    """
    weight = getattr(module, name, None)
    if weight is None:
        raise ValueError(f"spectral_norm: module {type(module).__name__} has no parameter or buffer named '{name}'")
    if dim is None:
        dim = 1 if "ConvTranspose" in type(module).__name__ else 0
    parametrize.register_parametrization(module, name, _SpectralNorm(weight, n_power_iterations, dim, eps))
    return module
