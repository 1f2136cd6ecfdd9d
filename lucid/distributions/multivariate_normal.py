"""Gaussian vectors: MultivariateNormal (scale_tril / covariance / precision) and
LowRankMultivariateNormal (covariance ``W W^T + diag(D)``)."""
from __future__ import annotations

import math

import numpy as np

import lucid
from . import constraints
from .distribution import Distribution
from .utils import lazy_property

__all__ = ["MultivariateNormal", "LowRankMultivariateNormal"]

_LOG_2PI = math.log(2 * math.pi)


def _solve_tril(L, B):
    """``L^{-1} B`` for lower-triangular ``L`` (batch dims broadcast)."""
    st = getattr(lucid.linalg, "solve_triangular", None)
    if st is not None:
        return st(L, B, upper=False)
    return lucid.linalg.solve(L, B)


def _batch_mv(bmat, bvec):
    return (bmat @ bvec.unsqueeze(-1)).squeeze(-1)


def _batch_mahalanobis(bL, bx):
    """``x^T (L L^T)^{-1} x`` for each batch entry (``bx``'s leading dims broadcast with ``bL``'s)."""
    y = _solve_tril(bL, bx.unsqueeze(-1)).squeeze(-1)
    return (y * y).sum(-1)


def _precision_to_scale_tril(P):
    # Cholesky of the flipped precision gives an upper factor U of P with P = U^T U read
    # backwards; its inverse transpose is the lower Cholesky factor of P^{-1}, without
    # inverting P itself (as PyTorch).
    Lf = lucid.linalg.cholesky(lucid.flip(P, (-2, -1)))
    L_inv = lucid.flip(Lf, (-2, -1)).mT
    eye = lucid.eye(P.shape[-1], dtype=P.dtype, device=P.device)
    return _solve_tril(L_inv, eye.expand(tuple(L_inv.shape)))


def _half_log_det(L):
    return L.diagonal(0, -2, -1).log().sum(-1)


class MultivariateNormal(Distribution):
    """Multivariate normal distribution with mean ``loc`` and one of ``covariance_matrix``,
    ``precision_matrix`` or ``scale_tril`` (lower Cholesky factor of the covariance).

    Parameters
    ----------
    loc : Tensor
        Mean, shape (..., n).
    covariance_matrix, precision_matrix, scale_tril : Tensor
        Exactly one, shape (..., n, n); batch dims broadcast with ``loc``'s.
    validate_args : bool, optional

    Examples
    --------
    >>> import lucid
    >>> from lucid.distributions import MultivariateNormal
    >>> d = MultivariateNormal(lucid.zeros(2), covariance_matrix=lucid.eye(2))
    >>> round(d.log_prob(lucid.zeros(2)).item(), 4), d.event_shape
    (-1.8379, (2,))
    """

    arg_constraints = {"loc": constraints.real_vector, "covariance_matrix": constraints.positive_definite,
                       "precision_matrix": constraints.positive_definite, "scale_tril": constraints.lower_cholesky}
    support = constraints.real_vector
    has_rsample = True

    def __init__(self, loc, covariance_matrix=None, precision_matrix=None, scale_tril=None, validate_args=None):
        if loc.ndim < 1:
            raise ValueError("MultivariateNormal: loc must be at least one-dimensional.")
        if (covariance_matrix is not None) + (scale_tril is not None) + (precision_matrix is not None) != 1:
            raise ValueError("MultivariateNormal: exactly one of covariance_matrix or precision_matrix or "
                             "scale_tril may be specified.")
        given = next(m for m in (scale_tril, covariance_matrix, precision_matrix) if m is not None)
        name = ("scale_tril" if scale_tril is not None else
                "covariance_matrix" if covariance_matrix is not None else "precision_matrix")
        if given.ndim < 2:
            raise ValueError(f"MultivariateNormal: {name} matrix must be at least two-dimensional, with "
                             f"optional leading batch dimensions (got shape {tuple(given.shape)})")
        n = loc.shape[-1]
        if tuple(given.shape[-2:]) != (n, n):
            raise ValueError(f"MultivariateNormal: {name} must be of shape (..., {n}, {n}) to match loc of shape "
                             f"{tuple(loc.shape)}, got {tuple(given.shape)}")
        batch_shape = tuple(np.broadcast_shapes(tuple(given.shape[:-2]), tuple(loc.shape[:-1])))
        setattr(self, name, given.expand(batch_shape + (n, n)))
        self.loc = loc.expand(batch_shape + (n,))
        super().__init__(batch_shape, (n,), validate_args=validate_args)
        if scale_tril is not None:
            self._unbroadcasted_scale_tril = scale_tril
        elif covariance_matrix is not None:
            self._unbroadcasted_scale_tril = lucid.linalg.cholesky(covariance_matrix)
        else:
            self._unbroadcasted_scale_tril = _precision_to_scale_tril(precision_matrix)

    def expand(self, batch_shape, _instance=None):
        new = self._get_checked_instance(MultivariateNormal, _instance)
        batch_shape = tuple(batch_shape)
        loc_shape = batch_shape + self.event_shape
        cov_shape = batch_shape + self.event_shape + self.event_shape
        new.loc = self.loc.expand(loc_shape)
        new._unbroadcasted_scale_tril = self._unbroadcasted_scale_tril
        for name in ("covariance_matrix", "scale_tril", "precision_matrix"):
            if name in self.__dict__:
                new.__dict__[name] = self.__dict__[name].expand(cov_shape)
        Distribution.__init__(new, batch_shape, self.event_shape, validate_args=False)
        new._validate_args = self._validate_args
        return new

    def _full(self, m):
        return m.expand(self._batch_shape + self._event_shape + self._event_shape)

    @lazy_property
    def scale_tril(self):
        return self._full(self._unbroadcasted_scale_tril)

    @lazy_property
    def covariance_matrix(self):
        L = self._unbroadcasted_scale_tril
        return self._full(L @ L.mT)

    @lazy_property
    def precision_matrix(self):
        L = self._unbroadcasted_scale_tril
        eye = lucid.eye(L.shape[-1], dtype=L.dtype, device=L.device)
        Linv = _solve_tril(L, eye.expand(tuple(L.shape)))
        return self._full(Linv.mT @ Linv)

    @property
    def mean(self):
        return self.loc

    @property
    def mode(self):
        return self.loc

    @property
    def variance(self):
        return (self._unbroadcasted_scale_tril ** 2).sum(-1).expand(self._batch_shape + self._event_shape)

    def rsample(self, sample_shape=()):
        shape = self._extended_shape(sample_shape)
        eps = lucid.randn(shape, dtype=self.loc.dtype, device=self.loc.device)
        return self.loc + _batch_mv(self._unbroadcasted_scale_tril, eps)

    def log_prob(self, value):
        if self._validate_args:
            self._validate_sample(value)
        diff = value - self.loc
        M = _batch_mahalanobis(self._unbroadcasted_scale_tril, diff)
        half_log_det = _half_log_det(self._unbroadcasted_scale_tril)
        return -0.5 * (self._event_shape[0] * _LOG_2PI + M) - half_log_det

    def entropy(self):
        half_log_det = _half_log_det(self._unbroadcasted_scale_tril)
        H = 0.5 * self._event_shape[0] * (1.0 + _LOG_2PI) + half_log_det
        return H if not self._batch_shape else H.expand(self._batch_shape)


def _batch_capacitance_tril(W, D):
    """Cholesky factor of the capacitance ``I + W^T D^{-1} W`` (m x m)."""
    m = W.shape[-1]
    Wt_Dinv = W.mT / D.unsqueeze(-2)
    K = Wt_Dinv @ W + lucid.eye(m, dtype=W.dtype, device=W.device)
    return lucid.linalg.cholesky(K)


def _batch_lowrank_logdet(W, D, capacitance_tril):
    # Matrix determinant lemma: log det(W W^T + D) = log det(C) + log det(D).
    return 2 * _half_log_det(capacitance_tril) + D.log().sum(-1)


def _batch_lowrank_mahalanobis(W, D, x, capacitance_tril):
    # Woodbury: x^T (W W^T + D)^{-1} x = x^T D^{-1} x - |C^{-1/2} W^T D^{-1} x|^2.
    Wt_Dinv = W.mT / D.unsqueeze(-2)
    Wt_Dinv_x = _batch_mv(Wt_Dinv, x)
    mahalanobis_term1 = (x * x / D).sum(-1)
    mahalanobis_term2 = _batch_mahalanobis(capacitance_tril, Wt_Dinv_x)
    return mahalanobis_term1 - mahalanobis_term2


class LowRankMultivariateNormal(Distribution):
    """Multivariate normal whose covariance is ``cov_factor @ cov_factor.mT + diag(cov_diag)``.

    Densities use the Woodbury identity and the matrix determinant lemma, so the cost is
    linear in the event size for a fixed rank.

    Parameters
    ----------
    loc : Tensor
        Shape (..., n).
    cov_factor : Tensor
        Shape (..., n, m).
    cov_diag : Tensor
        Positive, shape (..., n).

    Examples
    --------
    >>> import lucid
    >>> from lucid.distributions import LowRankMultivariateNormal
    >>> d = LowRankMultivariateNormal(lucid.zeros(2), lucid.tensor([[1.0], [0.0]]), lucid.ones(2))
    >>> d.covariance_matrix.tolist()
    [[2.0, 0.0], [0.0, 1.0]]
    """

    arg_constraints = {"loc": constraints.real_vector,
                       "cov_factor": constraints.independent(constraints.real, 2),
                       "cov_diag": constraints.independent(constraints.positive, 1)}
    support = constraints.real_vector
    has_rsample = True

    def __init__(self, loc, cov_factor, cov_diag, validate_args=None):
        if loc.ndim < 1:
            raise ValueError("LowRankMultivariateNormal: loc must be at least one-dimensional.")
        n = loc.shape[-1]
        if cov_factor.ndim < 2:
            raise ValueError("LowRankMultivariateNormal: cov_factor must be at least two-dimensional, with "
                             "optional leading batch dimensions")
        if cov_factor.shape[-2] != n:
            raise ValueError(f"LowRankMultivariateNormal: cov_factor must be a batch of matrices with shape "
                             f"{n} x m, got {tuple(cov_factor.shape)}")
        if tuple(cov_diag.shape[-1:]) != (n,):
            raise ValueError(f"LowRankMultivariateNormal: cov_diag must be a batch of vectors with shape ({n},), "
                             f"got {tuple(cov_diag.shape)}")
        m = cov_factor.shape[-1]
        batch_shape = tuple(np.broadcast_shapes(tuple(loc.shape[:-1]), tuple(cov_factor.shape[:-2]),
                                                tuple(cov_diag.shape[:-1])))
        self.loc = loc.expand(batch_shape + (n,))
        self.cov_factor = cov_factor.expand(batch_shape + (n, m))
        self.cov_diag = cov_diag.expand(batch_shape + (n,))
        self._unbroadcasted_cov_factor = cov_factor
        self._unbroadcasted_cov_diag = cov_diag
        super().__init__(batch_shape, (n,), validate_args=validate_args)
        self._capacitance_tril = _batch_capacitance_tril(cov_factor, cov_diag)

    def expand(self, batch_shape, _instance=None):
        new = self._get_checked_instance(LowRankMultivariateNormal, _instance)
        batch_shape = tuple(batch_shape)
        loc_shape = batch_shape + self.event_shape
        new.loc = self.loc.expand(loc_shape)
        new.cov_diag = self.cov_diag.expand(loc_shape)
        new.cov_factor = self.cov_factor.expand(loc_shape + tuple(self.cov_factor.shape[-1:]))
        new._unbroadcasted_cov_factor = self._unbroadcasted_cov_factor
        new._unbroadcasted_cov_diag = self._unbroadcasted_cov_diag
        new._capacitance_tril = self._capacitance_tril
        Distribution.__init__(new, batch_shape, self.event_shape, validate_args=False)
        new._validate_args = self._validate_args
        return new

    def _full(self, m):
        return m.expand(self._batch_shape + self._event_shape + self._event_shape)

    @property
    def mean(self):
        return self.loc

    @property
    def mode(self):
        return self.loc

    @lazy_property
    def variance(self):
        W, D = self._unbroadcasted_cov_factor, self._unbroadcasted_cov_diag
        return ((W ** 2).sum(-1) + D).expand(self._batch_shape + self._event_shape)

    @lazy_property
    def scale_tril(self):
        # L = D^{1/2} chol(I + D^{-1/2} W W^T D^{-1/2}): a stable Cholesky of W W^T + D.
        W, D = self._unbroadcasted_cov_factor, self._unbroadcasted_cov_diag
        n = self._event_shape[0]
        sqrt_d = D.sqrt().unsqueeze(-1)
        Dinvsqrt_W = W / sqrt_d
        K = Dinvsqrt_W @ Dinvsqrt_W.mT + lucid.eye(n, dtype=W.dtype, device=W.device)
        return self._full(sqrt_d * lucid.linalg.cholesky(K))

    @lazy_property
    def covariance_matrix(self):
        W, D = self._unbroadcasted_cov_factor, self._unbroadcasted_cov_diag
        return self._full(W @ W.mT + D.diag_embed())

    @lazy_property
    def precision_matrix(self):
        # Woodbury: (W W^T + D)^{-1} = D^{-1} - D^{-1} W C^{-1} W^T D^{-1}.
        W, D = self._unbroadcasted_cov_factor, self._unbroadcasted_cov_diag
        Wt_Dinv = W.mT / D.unsqueeze(-2)
        A = _solve_tril(self._capacitance_tril, Wt_Dinv)
        return self._full(D.reciprocal().diag_embed() - A.mT @ A)

    def rsample(self, sample_shape=()):
        shape = self._extended_shape(sample_shape)
        W, D = self._unbroadcasted_cov_factor, self._unbroadcasted_cov_diag
        eps_W = lucid.randn(shape[:-1] + tuple(W.shape[-1:]), dtype=self.loc.dtype, device=self.loc.device)
        eps_D = lucid.randn(shape, dtype=self.loc.dtype, device=self.loc.device)
        return self.loc + _batch_mv(W, eps_W) + D.sqrt() * eps_D

    def log_prob(self, value):
        if self._validate_args:
            self._validate_sample(value)
        W, D = self._unbroadcasted_cov_factor, self._unbroadcasted_cov_diag
        diff = value - self.loc
        M = _batch_lowrank_mahalanobis(W, D, diff, self._capacitance_tril)
        log_det = _batch_lowrank_logdet(W, D, self._capacitance_tril)
        return -0.5 * (self._event_shape[0] * _LOG_2PI + log_det + M)

    def entropy(self):
        W, D = self._unbroadcasted_cov_factor, self._unbroadcasted_cov_diag
        log_det = _batch_lowrank_logdet(W, D, self._capacitance_tril)
        H = 0.5 * (self._event_shape[0] * (1.0 + _LOG_2PI) + log_det)
        return H if not self._batch_shape else H.expand(self._batch_shape)
