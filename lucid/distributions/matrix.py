"""Distributions over matrices: Wishart (positive-definite) and LKJCholesky (Cholesky factors
of correlation matrices)."""
from __future__ import annotations

import math
import numbers
import warnings

import numpy as np

import lucid
from . import constraints
from .distribution import Distribution, _holds
from .exp_family import ExponentialFamily
from .gamma import Beta, Chi2
from .multivariate_normal import _precision_to_scale_tril, _solve_tril
from .utils import broadcast_all, concrete, finfo, lazy_property, special

__all__ = ["Wishart", "LKJCholesky"]

_LOG_2 = math.log(2)


def _mvlgamma(x, p):
    """``multigammaln(x, p)`` (the same sum of lgammas) without its argument check, which reads a
    value back on a device: callers pass ``x > (p - 1) / 2`` by their parameters' constraints
    (Wishart's ``df > p - 1``, LKJ's ``concentration > 0``)."""
    offsets = lucid.tensor(np.arange(p, dtype=np.float64) * 0.5, dtype=x.dtype, device=x.device)
    return special("lgamma")(x.unsqueeze(-1) - offsets).sum(-1) + p * (p - 1) / 4 * math.log(math.pi)


def _mvdigamma(x, p):
    offsets = lucid.tensor(-np.arange(p, dtype=np.float64) / 2, dtype=x.dtype, device=x.device)
    return special("digamma")(x.unsqueeze(-1) + offsets).sum(-1)


class Wishart(ExponentialFamily):
    """Wishart distribution over positive-definite matrices with ``df`` degrees of freedom and
    one of ``covariance_matrix``, ``precision_matrix`` or ``scale_tril`` (the scale matrix).

    ``rsample`` uses the Bartlett decomposition (chi-squared diagonal through the
    standard-gamma primitive, normal off-diagonal), so it is differentiable in every parameter.
    A draw that comes out singular (likely when ``ndim - 1 < df < ndim``, or in float32) is
    redrawn, with a warning, up to ``max_try_correction`` times (see :meth:`rsample`).

    As an exponential family its natural parameters are ``-precision_matrix / 2`` and
    ``(df - ndim - 1) / 2`` (sufficient statistics ``X`` and ``log det X``, carrier measure 1),
    so ``ExponentialFamily.entropy`` and the Bregman KL between two Wisharts apply.

    Examples
    --------
    >>> import lucid
    >>> from lucid.distributions import Wishart
    >>> d = Wishart(lucid.tensor(4.0), covariance_matrix=lucid.eye(2))
    >>> d.mean.tolist(), d.sample().shape
    ([[4.0, 0.0], [0.0, 4.0]], (2, 2))
    """

    support = constraints.positive_definite
    has_rsample = True
    _mean_carrier_measure = 0

    def __init__(self, df, covariance_matrix=None, precision_matrix=None, scale_tril=None, validate_args=None):
        if (covariance_matrix is not None) + (scale_tril is not None) + (precision_matrix is not None) != 1:
            raise ValueError("Wishart: exactly one of covariance_matrix or precision_matrix or scale_tril may be "
                             "specified.")
        param = next(p for p in (scale_tril, covariance_matrix, precision_matrix) if p is not None)
        if param.ndim < 2:
            raise ValueError("Wishart: scale_tril must be at least two-dimensional, with optional leading batch "
                             f"dimensions (got shape {tuple(param.shape)})")
        if param.shape[-1] != param.shape[-2]:
            raise ValueError(f"Wishart: the scale matrix must be square, got shape {tuple(param.shape)}")
        if isinstance(df, numbers.Number):
            batch_shape = tuple(param.shape[:-2])
            self.df = lucid.full(batch_shape, float(df), dtype=param.dtype, device=param.device)
        else:
            batch_shape = tuple(np.broadcast_shapes(tuple(param.shape[:-2]), tuple(df.shape)))
            self.df = df.expand(batch_shape)
        p = param.shape[-1]
        event_shape = (p, p)
        if not _holds(constraints.greater_than(p - 1), self.df):
            raise ValueError(f"Wishart: value of df={df} expected to be greater than ndim - 1 = {p - 1}.")
        name = ("scale_tril" if scale_tril is not None else
                "covariance_matrix" if covariance_matrix is not None else "precision_matrix")
        setattr(self, name, param.expand(batch_shape + event_shape))
        if not _holds(constraints.greater_than_eq(p), self.df):
            warnings.warn("Wishart: low df values detected. Singular samples are highly likely to occur for "
                          f"ndim - 1 < df < ndim (ndim = {p}).", stacklevel=2)
        super().__init__(batch_shape, event_shape, validate_args=validate_args)
        if scale_tril is not None:
            self._unbroadcasted_scale_tril = scale_tril
        elif covariance_matrix is not None:
            self._unbroadcasted_scale_tril = lucid.linalg.cholesky(covariance_matrix)
        else:
            self._unbroadcasted_scale_tril = _precision_to_scale_tril(precision_matrix)
        # Bartlett decomposition: the squared diagonal of the factor is Chi2(df - i).
        offsets = lucid.arange(p, dtype=self.df.dtype, device=self.df.device)
        self._dist_chi2 = Chi2(self.df.unsqueeze(-1) - offsets, validate_args=False)

    @property
    def arg_constraints(self):
        p = self._event_shape[-1] if hasattr(self, "_event_shape") else 1
        return {"covariance_matrix": constraints.positive_definite,
                "precision_matrix": constraints.positive_definite,
                "scale_tril": constraints.lower_cholesky, "df": constraints.greater_than(p - 1)}

    def expand(self, batch_shape, _instance=None):
        new = self._get_checked_instance(Wishart, _instance)
        batch_shape = tuple(batch_shape)
        cov_shape = batch_shape + self.event_shape
        new._unbroadcasted_scale_tril = self._unbroadcasted_scale_tril.expand(cov_shape)
        new.df = self.df.expand(batch_shape)
        for name in ("covariance_matrix", "scale_tril", "precision_matrix"):
            if name in self.__dict__:
                new.__dict__[name] = self.__dict__[name].expand(cov_shape)
        new._dist_chi2 = self._dist_chi2.expand(batch_shape + self.event_shape[-1:])
        Distribution.__init__(new, batch_shape, self.event_shape, validate_args=False)
        new._validate_args = self._validate_args
        return new

    def _full(self, m):
        return m.expand(self._batch_shape + self._event_shape)

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

    def _df(self):
        return self.df.reshape(self._batch_shape + (1, 1))

    @property
    def mean(self):
        return self._df() * self.covariance_matrix

    @property
    def mode(self):
        factor = self.df - self.covariance_matrix.shape[-1] - 1
        factor = lucid.where(factor > 0, factor, lucid.full_like(factor, math.nan))
        return factor.reshape(self._batch_shape + (1, 1)) * self.covariance_matrix

    @property
    def variance(self):
        V = self.covariance_matrix
        diag_V = V.diagonal(0, -2, -1)
        return self._df() * (V.pow(2) + diag_V.unsqueeze(-1) * diag_V.unsqueeze(-2))

    def _bartlett_sampling(self, sample_shape):
        p = self._event_shape[-1]
        tiny = float(finfo(self.df.dtype).eps)
        diag = self._dist_chi2.rsample(sample_shape).sqrt().clamp(min=tiny)
        rows, cols = np.tril_indices(p, -1)
        off = lucid.randn(sample_shape + self._batch_shape + (len(rows),), dtype=self.df.dtype,
                          device=self.df.device)
        # scatter the normals below the diagonal: a fixed 0/1 embedding (p*p, k) applied by matmul
        embed = np.zeros((p * p, len(rows)))
        embed[rows * p + cols, np.arange(len(rows))] = 1.0
        embed = lucid.tensor(embed.T, dtype=off.dtype, device=off.device)
        lower = (off @ embed).reshape(tuple(off.shape[:-1]) + (p, p))
        noise = lower + diag.diag_embed()
        chol = self._unbroadcasted_scale_tril @ noise
        return chol @ chol.mT

    def _singular(self, sample, sample_shape):
        """Which draws (one flag per ``sample_shape`` index, as PyTorch: a singular matrix anywhere in
        the batch redraws the whole batch) are not positive definite."""
        with lucid.no_grad():
            bad = ~self.support.check(sample)
            if self._batch_shape:
                bad = bad.reshape(sample_shape + (-1,)).any(-1)
        return bad

    def rsample(self, sample_shape=(), max_try_correction=None):
        """A reparameterised draw (Bartlett decomposition).

        A draw that is not numerically positive definite (its Bartlett diagonal underflowed, most
        likely for ``ndim - 1 < df < ndim``) is redrawn, with a warning, up to
        ``max_try_correction`` times (default 10, as PyTorch); one still singular after that is
        returned as it is, and its ``log_prob`` may be ``-inf``. Redraws replace whole
        ``sample_shape`` entries through ``where``, so this works under grad and vmap.

        Examples
        --------
        >>> import lucid
        >>> from lucid.distributions import Wishart
        >>> d = Wishart(lucid.tensor(3.0), scale_tril=lucid.eye(2))
        >>> d.rsample((5,), max_try_correction=3).shape
        (5, 2, 2)
        """
        sample_shape = tuple(sample_shape) if not isinstance(sample_shape, int) else (sample_shape,)
        if max_try_correction is None:
            max_try_correction = 10
        sample = self._bartlett_sampling(sample_shape)
        bad = self._singular(sample, sample_shape)
        # NOTE: PyTorch 2.13 tests the support without negating it, so it warns on (and redraws)
        # every good draw and keeps the singular ones; this redraws only the singular ones.
        if concrete(bad).any().item():  # a read, as PyTorch's ``torch.any(is_singular)``
            warnings.warn("Wishart.rsample: singular sample detected; redrawing it (at most "
                          f"max_try_correction={max_try_correction} times).", stacklevel=2)
            pad = (1,) * (len(self._batch_shape) + 2)
            for _ in range(max_try_correction):
                new = self._bartlett_sampling(sample_shape)
                sample = lucid.where(bad.reshape(tuple(bad.shape) + pad), new, sample)
                bad = bad & self._singular(new, sample_shape)
                if not concrete(bad).any().item():
                    break
        return sample

    def log_prob(self, value):
        if self._validate_args:
            self._validate_sample(value)
        nu = self.df
        p = self._event_shape[-1]
        L = self._unbroadcasted_scale_tril
        logdet = lucid.linalg.slogdet(value)[1]
        # tr(Sigma^{-1} X) with Sigma = L L^T: |L^{-1} chol(X)|_F^2 would need X PD; solve twice instead.
        Y = _solve_tril(L, value)
        Z = _solve_tril(L, Y.mT)
        trace = Z.diagonal(0, -2, -1).sum(-1)
        return (-nu * (p * _LOG_2 / 2 + L.diagonal(0, -2, -1).log().sum(-1))
                - _mvlgamma(nu / 2, p) + (nu - p - 1) / 2 * logdet - trace / 2)

    def entropy(self):
        nu = self.df
        p = self._event_shape[-1]
        L = self._unbroadcasted_scale_tril
        return ((p + 1) * (p * _LOG_2 / 2 + L.diagonal(0, -2, -1).log().sum(-1))
                + _mvlgamma(nu / 2, p) - (nu - p - 1) / 2 * _mvdigamma(nu / 2, p) + nu * p / 2)

    @property
    def _natural_params(self):
        return -self.precision_matrix / 2, (self.df - self._event_shape[-1] - 1) / 2

    def _log_normalizer(self, x, y):
        # F = (df / 2)(p log 2 + log det Sigma) + log Gamma_p(df / 2), with Sigma^{-1} = -2 x and
        # df / 2 = y + (p + 1) / 2.
        p = self._event_shape[-1]
        half_df = y + (p + 1) / 2
        return half_df * (p * _LOG_2 - lucid.linalg.slogdet(-2 * x)[1]) + _mvlgamma(half_df, p)


class LKJCholesky(Distribution):
    """LKJ distribution over Cholesky factors of ``dim x dim`` correlation matrices
    (density of the correlation matrix proportional to ``det(C)^(concentration - 1)``).

    Sampling is the onion method (Lewandowski, Kurowicka and Joe 2009), as in PyTorch.

    Examples
    --------
    >>> import lucid
    >>> from lucid.distributions import LKJCholesky
    >>> L = LKJCholesky(3, lucid.tensor(2.0)).sample()
    >>> L.shape, [round(v, 6) for v in (L @ L.mT).diagonal().tolist()]
    ((3, 3), [1.0, 1.0, 1.0])
    """

    arg_constraints = {"concentration": constraints.positive}
    support = constraints.corr_cholesky

    def __init__(self, dim, concentration=1.0, validate_args=None):
        if not isinstance(dim, int) or dim < 2:
            raise ValueError(f"LKJCholesky: expected dim to be an integer greater than or equal to 2. Found dim={dim}.")
        self.dim = dim
        (self.concentration,) = broadcast_all(concentration)
        batch_shape = tuple(self.concentration.shape)
        # Beta draws for the onion method (Sec. 3.2 of Lewandowski et al.), vectorised.
        marginal_conc = self.concentration + 0.5 * (self.dim - 2)
        offset = lucid.tensor(np.concatenate([[0.0], np.arange(self.dim - 1)]), dtype=self.concentration.dtype,
                              device=self.concentration.device)
        beta_conc1 = offset + 0.5
        beta_conc0 = marginal_conc.unsqueeze(-1) - 0.5 * offset
        self._beta = Beta(beta_conc1, beta_conc0, validate_args=False)
        super().__init__(batch_shape, (dim, dim), validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        new = self._get_checked_instance(LKJCholesky, _instance)
        batch_shape = tuple(batch_shape)
        new.dim = self.dim
        new.concentration = self.concentration.expand(batch_shape)
        new._beta = self._beta.expand(batch_shape + (self.dim,))
        Distribution.__init__(new, batch_shape, self.event_shape, validate_args=False)
        new._validate_args = self._validate_args
        return new

    def sample(self, sample_shape=()):
        sample_shape = tuple(sample_shape) if not isinstance(sample_shape, int) else (sample_shape,)
        with lucid.no_grad():
            y = self._beta.sample(sample_shape).unsqueeze(-1)
            u_normal = lucid.randn(self._extended_shape(sample_shape), dtype=y.dtype, device=y.device).tril(-1)
            norm = (u_normal * u_normal).sum(-1, keepdim=True).sqrt()
            # the first row is all zeros: its direction is irrelevant (w is 0 there)
            u_hypersphere = u_normal / lucid.where(norm == 0, lucid.ones_like(norm), norm)
            w = y.sqrt() * u_hypersphere
            eps = float(finfo(w.dtype).tiny)
            diag_elems = (1 - (w * w).sum(-1)).clamp(min=eps).sqrt()
            return w + diag_elems.diag_embed()

    def log_prob(self, value):
        # See Lewandowski et al., p. 1999, and the Stan manual's LKJ Cholesky density.
        if self._validate_args:
            self._validate_sample(value)
        diag_elems = value.diagonal(0, -1, -2)[..., 1:]
        order = lucid.arange(2, self.dim + 1, dtype=self.concentration.dtype, device=self.concentration.device)
        order = 2 * (self.concentration - 1).unsqueeze(-1) + self.dim - order
        unnormalized_log_pdf = (order * diag_elems.log()).sum(-1)
        dm1 = self.dim - 1
        alpha = self.concentration + 0.5 * dm1
        denominator = special("lgamma")(alpha) * dm1
        numerator = _mvlgamma(alpha - 0.5, dm1)
        # the normaliser's pi term is D (D - 1) / 4 log(pi); _mvlgamma has (D - 1)(D - 2) / 4 log(pi)
        pi_constant = 0.5 * dm1 * math.log(math.pi)
        normalize_term = pi_constant + numerator - denominator
        return unnormalized_log_pdf - normalize_term
