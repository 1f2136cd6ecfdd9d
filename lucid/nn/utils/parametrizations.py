"""New-style parametrizations (``torch.nn.utils.parametrizations``): ``orthogonal``,
``weight_norm`` and ``spectral_norm``, registered with :func:`lucid.nn.utils.parametrize.register_parametrization`
(state-dict keys ``parametrizations.weight.original0/1``, ``...original`` + ``...0._u/_v``).
"""
from __future__ import annotations

from ..._core import dtypes as _dtypes
from ..._core import backend
from ..._core.grad_mode import no_grad
from .. import functional as F
from ..module import Module
from . import parametrize

__all__ = ["weight_norm", "spectral_norm", "orthogonal"]


def _norm_except_dim(v, dim):
    """The 2-norm of ``v`` over every dim but ``dim`` (kept, size 1 elsewhere); all dims if None/-1."""
    import lucid

    if dim is None or dim == -1:
        return lucid.norm(v)
    if not -v.ndim <= dim < v.ndim:  # a wrapped dim would norm the wrong slices silently
        raise IndexError(f"weight_norm: Dimension out of range (expected to be in range of [{-v.ndim}, "
                         f"{v.ndim - 1}], but got {dim})")
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

    A checkpoint of the old-style :func:`lucid.nn.utils.weight_norm` (keys ``<name>_g`` and
    ``<name>_v``) loads into the module: a load pre-hook renames them, as in PyTorch.
    """
    parametrize.register_parametrization(module, name, _WeightNorm(dim), unsafe=True)

    def _weight_norm_compat_hook(state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys,
                                 error_msgs):
        g_key, v_key = f"{prefix}{name}_g", f"{prefix}{name}_v"
        if g_key in state_dict and v_key in state_dict:
            original0, original1 = state_dict.pop(g_key), state_dict.pop(v_key)
            state_dict[f"{prefix}parametrizations.{name}.original0"] = original0
            state_dict[f"{prefix}parametrizations.{name}.original1"] = original1

    module._register_load_state_dict_pre_hook(_weight_norm_compat_hook)
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
            dev = weight.device  # the buffers live beside the weight (PyTorch: randn(..., device=))
            self.register_buffer("_u", F.normalize(lucid.randn(h, dtype=weight.dtype, device=dev), dim=0, eps=eps))
            self.register_buffer("_v", F.normalize(lucid.randn(w, dtype=weight.dtype, device=dev), dim=0, eps=eps))
            self._power_method(mat, 15)

    def _to_matrix(self, weight):
        if self.dim != 0:
            weight = weight.permute(self.dim, *(d for d in range(weight.ndim) if d != self.dim))
        return weight.reshape(weight.shape[0], -1)

    def _power_method(self, mat, n):
        with no_grad(), backend.on_device(mat):
            mat = mat.detach()
            for _ in range(n):
                self._u._data[...] = F.normalize(mat @ self._v, dim=0, eps=self.eps)._data
                self._v._data[...] = F.normalize(mat.mH @ self._u, dim=0, eps=self.eps)._data  # W^H: complex too
            self._u._version[0] += 1
            self._v._version[0] += 1

    def forward(self, weight):
        import lucid

        if weight.ndim == 1:
            return F.normalize(weight, dim=0, eps=self.eps)
        mat = self._to_matrix(weight)
        if self.training:
            self._power_method(mat, self.n_power_iterations)
        u, v = self._u.clone(), self._v.clone()
        sigma = lucid.vdot(u, mat @ v)  # u^H W v (conjugated, as PyTorch), real for a real weight
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


def _make_orthogonal(a):
    """Q of the QR decomposition with diag(R) > 0 (NumPy; used without gradient)."""
    import numpy as np

    q, r = np.linalg.qr(a)
    return q * np.where(np.diagonal(r, axis1=-2, axis2=-1) < 0, -1.0, 1.0)[..., None, :]


class _Orthogonal(Module):
    """PyTorch's ``_Orthogonal``: ``Q = base @ map(X)`` with map the matrix exponential or the
    Cayley transform of the skew part of ``X.tril()``, or a product of Householder reflectors."""

    def __init__(self, weight, orthogonal_map, use_trivialization=True):
        super().__init__()
        if weight.dtype.kind == "c" and orthogonal_map == "householder":
            raise ValueError("orthogonal: the householder parametrization does not support complex tensors")
        self.shape, self.orthogonal_map = tuple(weight.shape), orthogonal_map
        if use_trivialization:
            self.register_buffer("base", None)

    def forward(self, X):
        import lucid

        n, k = X.shape[-2], X.shape[-1]
        transposed = n < k
        if transposed:
            X = X.transpose(-2, -1)
            n, k = k, n
        if self.orthogonal_map in ("matrix_exp", "cayley"):
            X = X.tril()
            if n != k:
                X = lucid.cat([X, lucid.zeros(*X.shape[:-1], n - k, dtype=X.dtype, device=X.device)], -1)
            A = X - X.mH  # skew-Hermitian, so Q is unitary for a complex weight
            if self.orthogonal_map == "matrix_exp":
                Q = lucid.linalg.matrix_exp(A)
            else:
                eye = lucid.eye(n, dtype=A.dtype, device=A.device)
                Q = lucid.linalg.solve(eye - 0.5 * A, eye + 0.5 * A)
            if n != k:
                Q = Q[..., :k]
        else:
            A = X.tril(-1)
            tau = 2.0 / (1.0 + (A * A).sum(-2))
            Q = lucid.linalg.householder_product(A, tau)
            signs = X.detach().diagonal(dim1=-2, dim2=-1).trunc()  # PyTorch casts the diagonal to int
            Q = Q * signs.unsqueeze(-2)
        if self.__dict__["_buffers"].get("base") is not None:
            Q = self.base @ Q
        if transposed:
            Q = Q.transpose(-2, -1)
        return Q

    # NOTE [Orthogonal right_inverse on the host]
    # The inverse runs once per assignment, on QR (LAPACK's geqrf in the Householder case), so
    # on a device it is an explicit host round trip (NOTE [Host fallback] in backend.py): the
    # value is copied to the host, and the results (``base`` and the returned original) are
    # made on ``Q``'s device. Random columns are drawn on that device, as PyTorch's.
    def right_inverse(self, Q):
        import numpy as np

        import lucid

        if tuple(Q.shape) != self.shape:
            raise ValueError(f"orthogonal: expected a matrix of shape {self.shape}, got {tuple(Q.shape)}")
        if "base" not in self._buffers:
            return self._right_inverse_no_base(Q)
        dev = Q.device
        q = backend.host(Q.detach()._data)
        n, k = q.shape[-2:]
        transpose = n < k
        if transpose:
            q = np.swapaxes(q, -2, -1)
            n, k = k, n
        if n == k:
            eye = np.eye(k)
            ortho = np.allclose(np.swapaxes(q, -2, -1).conj() @ q, eye, atol=10.0 * n * _dtypes.np_finfo(q.dtype).eps)
            q = q.copy() if ortho else _make_orthogonal(q)
        else:
            extra = backend.host(lucid.randn(*(q.shape[:-2] + (n, n - k)), dtype=Q.dtype, device=dev)._data)
            q = _make_orthogonal(np.concatenate([q, extra], -1))
        self.base = lucid.tensor(q.astype(Q._data.dtype), device=dev)
        neg_id = np.zeros(tuple(Q.shape), Q._data.dtype)
        d = min(neg_id.shape[-2:])
        neg_id[..., range(d), range(d)] = -1.0
        return lucid.tensor(neg_id, device=dev)


    def _right_inverse_no_base(self, Q):
        """PyTorch's inverse of the map itself (no ``base``): only the Householder map has one.
        ``geqrf(Q)`` gives the reflectors below the diagonal; the diagonal becomes sign(R),
        flipped where LAPACK skipped a reflection (tau == 0), which the forward's
        ``tau = 2 / (1 + |v|^2)`` then turns into a sign flip of that column."""
        import numpy as np

        import lucid

        if self.orthogonal_map != "householder":
            raise NotImplementedError("orthogonal: it is not possible to assign to the matrix exponential or the "
                                      "Cayley parametrizations when use_trivialization=False")
        q = backend.host(Q.detach()._data)  # See NOTE [Orthogonal right_inverse on the host]
        transpose = q.shape[-2] < q.shape[-1]
        if transpose:
            q = np.swapaxes(q, -2, -1)
        h, tau = np.linalg.qr(q, mode="raw")  # h is geqrf's A transposed
        a = np.swapaxes(h, -2, -1).astype(q.dtype, copy=True)
        k = tau.shape[-1]
        diag = np.sign(a[..., range(k), range(k)])
        a[..., range(k), range(k)] = np.where(tau == 0.0, -diag, diag)
        return lucid.tensor(np.swapaxes(a, -2, -1) if transpose else a, device=Q.device)


def orthogonal(module, name="weight", orthogonal_map=None, *, use_trivialization=True):
    """Constrain ``module.<name>`` (a matrix, or batch of matrices) to be orthogonal.

    ``orthogonal_map``: 'matrix_exp' (default for square matrices), 'cayley' or
    'householder' (default otherwise). With ``use_trivialization`` (the default) the
    parametrization is ``base @ map(X)`` (``base`` a buffer, reset on every assignment) and the
    initial value is kept (made orthogonal by QR if it is not). With
    ``use_trivialization=False`` it is ``map(X)`` itself: 'householder' keeps the initial value
    (orthogonalised by QR) and can be assigned to; 'matrix_exp' and 'cayley' start from
    ``map(original)`` and assigning to them raises NotImplementedError, as in PyTorch.

    Examples
    --------
    >>> import lucid, lucid.nn as nn
    >>> from lucid.nn.utils.parametrizations import orthogonal
    >>> m = orthogonal(nn.Linear(3, 3))
    >>> bool(lucid.allclose(m.weight @ m.weight.T, lucid.eye(3), atol=1e-5))
    True
    """
    weight = getattr(module, name, None)
    if weight is None or weight.ndim < 2:
        raise ValueError(f"orthogonal: expected a matrix or batch of matrices for {name}, got "
                         f"{None if weight is None else tuple(weight.shape)}")
    if orthogonal_map is None:
        orthogonal_map = "matrix_exp" if weight.shape[-2] == weight.shape[-1] or weight.dtype.kind == "c" \
            else "householder"
    if orthogonal_map not in ("matrix_exp", "cayley", "householder"):
        raise ValueError(f"orthogonal: orthogonal_map has to be one of 'matrix_exp', 'cayley', 'householder', "
                         f"got {orthogonal_map!r}")
    parametrize.register_parametrization(module, name, _Orthogonal(weight, orthogonal_map, use_trivialization),
                                         unsafe=True)
    return module
