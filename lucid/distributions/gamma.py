"""The Gamma family: Gamma, Chi2, Beta, Dirichlet, StudentT, InverseGamma, FisherSnedecor,
Kumaraswamy, NegativeBinomial. Reparameterised samples go through the standard-gamma
primitive (NOTE [Implicit reparameterisation] in _gamma.py)."""
from __future__ import annotations

import math

import numpy as np

import lucid
from . import constraints
from ._gamma import standard_gamma
from ._sampling import poisson_icdf
from .categorical import _one_of
from .distribution import Distribution
from .exp_family import ExponentialFamily
from .normal import Uniform
from .transformed_distribution import TransformedDistribution
from .transforms import AffineTransform, PowerTransform
from .utils import (broadcast_all, clamp_min, euler_constant, finfo, lazy_property, logits_to_probs,
                    probs_to_logits, safe_where, special)

__all__ = ["Gamma", "Chi2", "Beta", "Dirichlet", "StudentT", "InverseGamma", "FisherSnedecor",
           "Kumaraswamy", "NegativeBinomial"]


def _lgamma(x):
    return special("lgamma")(x)


def _digamma(x):
    return special("digamma")(x)


def _xlogy(x, y):
    return special("xlogy")(x, y)


def _gamma_draw(concentration, shape):
    """Standard-gamma draws of ``shape`` (``concentration`` broadcast), differentiable in it."""
    # noise drawn in the parameter's dtype: a float64 draw rounded to float32 could become 1 (x = inf)
    u = lucid.rand(shape, dtype=concentration.dtype, device=concentration.device)
    return standard_gamma(concentration.expand(shape), u)


class Gamma(ExponentialFamily):
    """Gamma distribution with shape ``concentration`` and inverse scale ``rate``.

    ``rsample`` is differentiable in both parameters (implicit reparameterisation).

    Examples
    --------
    >>> import lucid
    >>> from lucid.distributions import Gamma
    >>> d = Gamma(lucid.tensor(2.0), lucid.tensor(0.5))
    >>> d.mean.item(), round(d.log_prob(lucid.tensor(3.0)).item(), 4)
    (4.0, -1.7877)
    """

    arg_constraints = {"concentration": constraints.positive, "rate": constraints.positive}
    support = constraints.nonnegative
    has_rsample = True

    def __init__(self, concentration, rate, validate_args=None):
        self.concentration, self.rate = broadcast_all(concentration, rate)
        super().__init__(tuple(self.concentration.shape), validate_args=validate_args)

    @property
    def mean(self):
        return self.concentration / self.rate

    @property
    def mode(self):
        return ((self.concentration - 1) / self.rate).clamp(min=0)

    @property
    def variance(self):
        return self.concentration / self.rate.pow(2)

    def rsample(self, sample_shape=()):
        shape = self._extended_shape(sample_shape)
        value = _gamma_draw(self.concentration, shape) / self.rate.expand(shape)
        return value.clamp(min=float(finfo(value.dtype).tiny))

    def log_prob(self, value):
        if self._validate_args:
            self._validate_sample(value)
        return (_xlogy(self.concentration, self.rate) + _xlogy(self.concentration - 1, value)
                - self.rate * value - _lgamma(self.concentration))

    def entropy(self):
        return (self.concentration - self.rate.log() + _lgamma(self.concentration)
                + (1.0 - self.concentration) * _digamma(self.concentration))

    def cdf(self, value):
        if self._validate_args:
            self._validate_sample(value)
        return special("gammainc")(self.concentration, self.rate * value)

    _mean_carrier_measure = 0

    @property
    def _natural_params(self):
        return (self.concentration - 1, -self.rate)

    def _log_normalizer(self, x, y):
        return _lgamma(x + 1) + (x + 1) * lucid.log(-y.reciprocal())


class Chi2(Gamma):
    """Chi-squared distribution with ``df`` degrees of freedom (``Gamma(df / 2, 1 / 2)``).

    Examples
    --------
    >>> import lucid
    >>> from lucid.distributions import Chi2
    >>> Chi2(lucid.tensor(3.0)).variance.item()
    6.0
    """

    arg_constraints = {"df": constraints.positive}

    def __init__(self, df, validate_args=None):
        (df,) = broadcast_all(df)
        super().__init__(0.5 * df, lucid.full_like(df, 0.5), validate_args=validate_args)

    def _param_event_dims(self):
        return {"concentration": 0, "rate": 0}

    @property
    def df(self):
        return self.concentration * 2


class Dirichlet(ExponentialFamily):
    """Dirichlet distribution on the simplex with ``concentration`` (last dim = categories).

    ``rsample`` normalises standard-gamma draws, so it is differentiable in ``concentration``.

    Examples
    --------
    >>> import lucid
    >>> from lucid.distributions import Dirichlet
    >>> d = Dirichlet(lucid.tensor([1.0, 1.0, 2.0]))
    >>> d.mean.tolist(), round(d.log_prob(lucid.tensor([0.25, 0.25, 0.5])).item(), 4)
    ([0.25, 0.25, 0.5], 1.0986)
    """

    arg_constraints = {"concentration": constraints.independent(constraints.positive, 1)}
    support = constraints.simplex
    has_rsample = True

    def __init__(self, concentration, validate_args=None):
        if concentration.ndim < 1:
            raise ValueError("Dirichlet: `concentration` parameter must be at least one-dimensional.")
        self.concentration = concentration
        super().__init__(tuple(concentration.shape[:-1]), tuple(concentration.shape[-1:]),
                         validate_args=validate_args)

    def rsample(self, sample_shape=()):
        shape = self._extended_shape(sample_shape)
        g = _gamma_draw(self.concentration, shape)
        x = g / g.sum(-1, keepdim=True)
        fi = finfo(x.dtype)
        return x.clamp(min=float(fi.tiny), max=1 - float(fi.eps))

    def log_prob(self, value):
        if self._validate_args:
            self._validate_sample(value)
        c = self.concentration
        return _xlogy(c - 1.0, value).sum(-1) + _lgamma(c.sum(-1)) - _lgamma(c).sum(-1)

    @property
    def mean(self):
        return self.concentration / self.concentration.sum(-1, keepdim=True)

    @property
    def mode(self):
        cm1 = clamp_min(self.concentration - 1, 0.0)
        mode = cm1 / cm1.sum(-1, keepdim=True)
        # every concentration < 1: the density peaks at the vertex of the largest one.
        vertex = (self.concentration.argmax(-1).unsqueeze(-1)
                  == lucid.arange(cm1.shape[-1], dtype=lucid.int64, device=cm1.device)).to(mode.dtype)
        all_below = (self.concentration < 1).all(-1, keepdim=True)
        return lucid.where(all_below, vertex, mode)

    @property
    def variance(self):
        con0 = self.concentration.sum(-1, keepdim=True)
        return self.concentration * (con0 - self.concentration) / (con0.pow(2) * (con0 + 1))

    def entropy(self):
        c = self.concentration
        k = c.shape[-1]
        a0 = c.sum(-1)
        return (_lgamma(c).sum(-1) - _lgamma(a0) - (k - a0) * _digamma(a0)
                - ((c - 1.0) * _digamma(c)).sum(-1))

    @property
    def _mean_carrier_measure(self):
        # h(x) = prod 1 / x_i, so E[log h] = -sum E[log x_i] = -sum (digamma(c_i) - digamma(c_0)).
        c = self.concentration
        return -(_digamma(c) - _digamma(c.sum(-1, keepdim=True))).sum(-1)

    @property
    def _natural_params(self):
        return (self.concentration,)

    def _log_normalizer(self, x):
        return _lgamma(x).sum(-1) - _lgamma(x.sum(-1))


class Beta(ExponentialFamily):
    """Beta distribution with ``concentration1`` (alpha) and ``concentration0`` (beta).

    Examples
    --------
    >>> import lucid
    >>> from lucid.distributions import Beta
    >>> d = Beta(lucid.tensor(2.0), lucid.tensor(2.0))
    >>> d.mean.item(), round(d.log_prob(lucid.tensor(0.5)).item(), 4)
    (0.5, 0.4055)
    """

    arg_constraints = {"concentration1": constraints.positive, "concentration0": constraints.positive}
    support = constraints.unit_interval
    has_rsample = True

    def __init__(self, concentration1, concentration0, validate_args=None):
        c1, c0 = broadcast_all(concentration1, concentration0)
        self._dirichlet = Dirichlet(lucid.stack([c1, c0], -1), validate_args=False)  # checked below, by name
        super().__init__(self._dirichlet._batch_shape, validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        new = self._get_checked_instance(Beta, _instance)
        batch_shape = tuple(batch_shape)
        new._dirichlet = self._dirichlet.expand(batch_shape)
        Distribution.__init__(new, batch_shape, validate_args=False)
        new._validate_args = self._validate_args
        return new

    @property
    def concentration1(self):
        return self._dirichlet.concentration[..., 0]

    @property
    def concentration0(self):
        return self._dirichlet.concentration[..., 1]

    @property
    def mean(self):
        return self.concentration1 / (self.concentration1 + self.concentration0)

    @property
    def mode(self):
        return self._dirichlet.mode[..., 0]

    @property
    def variance(self):
        total = self.concentration1 + self.concentration0
        return self.concentration1 * self.concentration0 / (total.pow(2) * (total + 1))

    def rsample(self, sample_shape=()):
        return self._dirichlet.rsample(sample_shape)[..., 0]

    def log_prob(self, value):
        if self._validate_args:
            self._validate_sample(value)
        heads_tails = lucid.stack([value, 1.0 - value], -1)
        return self._dirichlet.log_prob(heads_tails)

    def entropy(self):
        return self._dirichlet.entropy()

    @property
    def _mean_carrier_measure(self):
        # h(x) = 1 / (x (1 - x)), so E[log h] = -(E[log x] + E[log(1 - x)]).
        c1, c0 = self.concentration1, self.concentration0
        return -(_digamma(c1) + _digamma(c0) - 2 * _digamma(c1 + c0))

    @property
    def _natural_params(self):
        return (self.concentration1, self.concentration0)

    def _log_normalizer(self, x, y):
        return _lgamma(x) + _lgamma(y) - _lgamma(x + y)

    def cdf(self, value):
        if self._validate_args:
            self._validate_sample(value)
        return special("betainc")(self.concentration1, self.concentration0, value)

    def icdf(self, value):
        return special("betaincinv")(self.concentration1, self.concentration0, value)


class StudentT(Distribution):
    """Student's t distribution with ``df`` degrees of freedom, location ``loc``, scale ``scale``.

    Examples
    --------
    >>> import lucid
    >>> from lucid.distributions import StudentT
    >>> round(StudentT(lucid.tensor(3.0)).log_prob(lucid.tensor(0.0)).item(), 4)
    -1.0009
    """

    arg_constraints = {"df": constraints.positive, "loc": constraints.real, "scale": constraints.positive}
    support = constraints.real
    has_rsample = True

    def __init__(self, df, loc=0.0, scale=1.0, validate_args=None):
        self.df, self.loc, self.scale = broadcast_all(df, loc, scale)
        super().__init__(tuple(self.df.shape), validate_args=validate_args)

    @property
    def mean(self):
        return lucid.where(self.df > 1, self.loc, lucid.full_like(self.loc, math.nan))

    @property
    def mode(self):
        return self.loc

    @property
    def variance(self):
        df = self.df
        finite = safe_where(df > 2, lambda d: self.scale.pow(2) * d / (d - 2), df, 3.0, math.inf)
        return lucid.where(df > 1, finite, lucid.full_like(finite, math.nan))

    def rsample(self, sample_shape=()):
        # X / sqrt(V / df) with X standard normal and V ~ Chi2(df) = 2 Gamma(df / 2, 1).
        shape = self._extended_shape(sample_shape)
        X = lucid.randn(shape, dtype=self.df.dtype, device=self.df.device)
        Z = _gamma_draw(0.5 * self.df, shape) * 2
        Y = X * lucid.rsqrt(Z / self.df)
        return self.loc + self.scale * Y

    def log_prob(self, value):
        if self._validate_args:
            self._validate_sample(value)
        y = (value - self.loc) / self.scale
        Z = (self.scale.log() + 0.5 * self.df.log() + 0.5 * math.log(math.pi)
             + _lgamma(0.5 * self.df) - _lgamma(0.5 * (self.df + 1.0)))
        return -0.5 * (self.df + 1.0) * lucid.log1p(y ** 2.0 / self.df) - Z

    def entropy(self):
        lbeta = _lgamma(0.5 * self.df) + math.lgamma(0.5) - _lgamma(0.5 * (self.df + 1))
        return (self.scale.log() + 0.5 * (self.df + 1) * (_digamma(0.5 * (self.df + 1)) - _digamma(0.5 * self.df))
                + 0.5 * self.df.log() + lbeta)


class InverseGamma(TransformedDistribution):
    """``1 / X`` for ``X ~ Gamma(concentration, rate)``.

    Examples
    --------
    >>> import lucid
    >>> from lucid.distributions import InverseGamma
    >>> InverseGamma(lucid.tensor(3.0), lucid.tensor(4.0)).mean.item()
    2.0
    """

    arg_constraints = {"concentration": constraints.positive, "rate": constraints.positive}
    support = constraints.positive
    has_rsample = True

    def __init__(self, concentration, rate, validate_args=None):
        base_dist = Gamma(concentration, rate, validate_args=validate_args)
        neg_one = -lucid.ones_like(base_dist.rate)
        super().__init__(base_dist, PowerTransform(neg_one), validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        new = self._get_checked_instance(InverseGamma, _instance)
        return super().expand(batch_shape, _instance=new)

    @property
    def concentration(self):
        return self.base_dist.concentration

    @property
    def rate(self):
        return self.base_dist.rate

    @property
    def mean(self):
        return safe_where(self.concentration > 1, lambda c: self.rate / (c - 1), self.concentration, 2.0, math.inf)

    @property
    def mode(self):
        return self.rate / (self.concentration + 1)

    @property
    def variance(self):
        return safe_where(self.concentration > 2, lambda c: self.rate.pow(2) / ((c - 1).pow(2) * (c - 2)),
                          self.concentration, 3.0, math.inf)

    def entropy(self):
        c = self.concentration
        return c + self.rate.log() + _lgamma(c) - (1 + c) * _digamma(c)


class FisherSnedecor(Distribution):
    """Fisher-Snedecor (F) distribution with ``df1`` and ``df2`` degrees of freedom.

    Examples
    --------
    >>> import lucid
    >>> from lucid.distributions import FisherSnedecor
    >>> FisherSnedecor(lucid.tensor(4.0), lucid.tensor(6.0)).mean.item()
    1.5
    """

    arg_constraints = {"df1": constraints.positive, "df2": constraints.positive}
    support = constraints.positive
    has_rsample = True

    def __init__(self, df1, df2, validate_args=None):
        self.df1, self.df2 = broadcast_all(df1, df2)
        super().__init__(tuple(self.df1.shape), validate_args=validate_args)

    @property
    def mean(self):
        return safe_where(self.df2 > 2, lambda d: d / (d - 2), self.df2, 3.0, math.nan)

    @property
    def mode(self):
        mode = (self.df1 - 2) / self.df1 * self.df2 / (self.df2 + 2)
        return lucid.where(self.df1 > 2, mode, lucid.full_like(mode, math.nan))  # PyTorch's mask: no df2 grad

    @property
    def variance(self):
        df1 = self.df1
        return safe_where(self.df2 > 4, lambda d: 2 * d.pow(2) * (df1 + d - 2) / (df1 * (d - 2).pow(2) * (d - 4)),
                          self.df2, 5.0, math.nan)

    def rsample(self, sample_shape=()):
        # (X1 / df1) / (X2 / df2) with X_i ~ Chi2(df_i) = 2 Gamma(df_i / 2, 1).
        shape = self._extended_shape(sample_shape)
        tiny = float(finfo(self.df1.dtype).tiny)
        X1 = _gamma_draw(self.df1 * 0.5, shape) / (self.df1 * 0.5)
        X2 = (_gamma_draw(self.df2 * 0.5, shape) / (self.df2 * 0.5)).clamp(min=tiny)
        return (X1 / X2).clamp(min=tiny)

    def log_prob(self, value):
        if self._validate_args:
            self._validate_sample(value)
        ct1 = self.df1 * 0.5
        ct2 = self.df2 * 0.5
        ct3 = self.df1 / self.df2
        t1 = _lgamma(ct1 + ct2) - _lgamma(ct1) - _lgamma(ct2)
        t2 = ct1 * ct3.log() + (ct1 - 1) * lucid.log(value)
        t3 = (ct1 + ct2) * lucid.log1p(ct3 * value)
        return t1 + t2 - t3


def _moments(a, b, n):
    """n-th moment of Kumaraswamy(a, b): b B(1 + n / a, b)."""
    arg1 = 1 + n / a
    log_value = _lgamma(arg1) + _lgamma(b) - _lgamma(arg1 + b)
    return b * lucid.exp(log_value)


class Kumaraswamy(TransformedDistribution):
    """Kumaraswamy distribution on (0, 1): ``(1 - U^(1/b))^(1/a)`` for uniform ``U``.

    Examples
    --------
    >>> import lucid
    >>> from lucid.distributions import Kumaraswamy
    >>> round(Kumaraswamy(lucid.tensor(2.0), lucid.tensor(3.0)).log_prob(lucid.tensor(0.5)).item(), 4)
    0.5232
    """

    arg_constraints = {"concentration1": constraints.positive, "concentration0": constraints.positive}
    support = constraints.unit_interval
    has_rsample = True

    def __init__(self, concentration1, concentration0, validate_args=None):
        self.concentration1, self.concentration0 = broadcast_all(concentration1, concentration0)
        base_dist = Uniform(lucid.full_like(self.concentration0, 0), lucid.full_like(self.concentration0, 1),
                            validate_args=validate_args)
        transforms = [PowerTransform(exponent=self.concentration0.reciprocal()),
                      AffineTransform(loc=1.0, scale=-1.0),
                      PowerTransform(exponent=self.concentration1.reciprocal())]
        super().__init__(base_dist, transforms, validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        new = self._get_checked_instance(Kumaraswamy, _instance)
        batch_shape = tuple(batch_shape)
        new.concentration1 = self.concentration1.expand(batch_shape)
        new.concentration0 = self.concentration0.expand(batch_shape)
        return super().expand(batch_shape, _instance=new)

    @property
    def mean(self):
        return _moments(self.concentration1, self.concentration0, 1)

    @property
    def mode(self):
        c1, c0 = self.concentration1, self.concentration0
        log_mode = c0.reciprocal() * (-c0).log1p() - (-c0 * c1).log1p()
        with_mode = (c0 >= 1) & (c1 >= 1)
        safe = lucid.where(with_mode, log_mode, lucid.zeros_like(log_mode))
        return lucid.where(with_mode, safe.exp(), lucid.full_like(log_mode, math.nan))

    @property
    def variance(self):
        return _moments(self.concentration1, self.concentration0, 2) - self.mean.pow(2)

    def entropy(self):
        t1 = 1 - self.concentration1.reciprocal()
        t0 = 1 - self.concentration0.reciprocal()
        H0 = _digamma(self.concentration0 + 1) + euler_constant
        return t0 + t1 * H0 - self.concentration1.log() - self.concentration0.log()


class NegativeBinomial(Distribution):
    """Number of successes before ``total_count`` failures of Bernoulli(``probs``) trials.

    Sampling is the Gamma-Poisson mixture (as in PyTorch).

    Examples
    --------
    >>> import lucid
    >>> from lucid.distributions import NegativeBinomial
    >>> NegativeBinomial(lucid.tensor(4.0), probs=lucid.tensor(0.5)).mean.item()
    4.0
    """

    arg_constraints = {"total_count": constraints.greater_than_eq(0), "probs": constraints.half_open_interval(0.0, 1.0),
                       "logits": constraints.real}
    support = constraints.nonnegative_integer

    def __init__(self, total_count, probs=None, logits=None, validate_args=None):
        _one_of(probs, logits, "NegativeBinomial")
        if probs is not None:
            self.total_count, self.probs = broadcast_all(total_count, probs)
            self.total_count = self.total_count.to(self.probs.dtype)
        else:
            self.total_count, self.logits = broadcast_all(total_count, logits)
            self.total_count = self.total_count.to(self.logits.dtype)
        self._param = self.probs if probs is not None else self.logits
        super().__init__(tuple(self._param.shape), validate_args=validate_args)

    def _param_event_dims(self):
        return {"total_count": 0, "probs": 0, "logits": 0, "_param": 0}

    @lazy_property
    def logits(self):
        return probs_to_logits(self.probs, is_binary=True)

    @lazy_property
    def probs(self):
        return logits_to_probs(self.logits, is_binary=True)

    @property
    def param_shape(self):
        return tuple(self._param.shape)

    @property
    def mean(self):
        return self.total_count * lucid.exp(self.logits)

    @property
    def mode(self):
        return ((self.total_count - 1) * self.logits.exp()).floor().clamp(min=0.0)

    @property
    def variance(self):
        return self.mean / lucid.sigmoid(-self.logits)

    def sample(self, sample_shape=()):
        shape = self._extended_shape(sample_shape)
        with lucid.no_grad():
            rate = _gamma_draw(self.total_count.detach(), shape) * lucid.exp(self.logits.detach())
            u = lucid.rand(shape, dtype=lucid.float64, device=rate.device).clamp(min=float(finfo(np.float64).tiny))
            return poisson_icdf(u, rate).to(rate.dtype)

    def log_prob(self, value):
        if self._validate_args:
            self._validate_sample(value)
        log_unnormalized_prob = self.total_count * lucid.nn.functional.logsigmoid(-self.logits) \
            + value * lucid.nn.functional.logsigmoid(self.logits)
        # The normalisation is 0 for total_count + value == 0 (an empty product); lgamma(0) is
        # kept out of the graph so neither the value nor the gradient sees inf - inf.
        empty = (self.total_count + value) == 0.0
        tc = lucid.where(empty, lucid.ones_like(self.total_count), self.total_count)
        log_normalization = -_lgamma(tc + value) + _lgamma(1.0 + value) + _lgamma(tc)
        log_normalization = lucid.where(empty, lucid.zeros_like(log_normalization), log_normalization)
        return log_unnormalized_prob - log_normalization
