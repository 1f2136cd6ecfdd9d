"""Continuous relaxations of discrete distributions (Maddison et al. 2017, Jang et al. 2017):
LogitRelaxedBernoulli, RelaxedBernoulli, ExpRelaxedCategorical, RelaxedOneHotCategorical;
and ContinuousBernoulli (Loaiza-Ganem and Cunningham 2019)."""
from __future__ import annotations

import math

import lucid
from . import constraints
from .categorical import Categorical, _bce_with_logits, _one_of
from .distribution import Distribution, _holds
from .exp_family import ExponentialFamily
from .transformed_distribution import TransformedDistribution
from .transforms import ExpTransform, SigmoidTransform
from .utils import as_float, broadcast_all, clamp_probs, concrete, lazy_property, logits_to_probs, probs_to_logits

__all__ = ["LogitRelaxedBernoulli", "RelaxedBernoulli", "ExpRelaxedCategorical", "RelaxedOneHotCategorical",
           "ContinuousBernoulli"]


class LogitRelaxedBernoulli(Distribution):
    """Logit of a RelaxedBernoulli sample: ``(logit(U) + logits) / temperature``.

    Examples
    --------
    >>> import lucid
    >>> from lucid.distributions import LogitRelaxedBernoulli
    >>> LogitRelaxedBernoulli(lucid.tensor(0.5), probs=lucid.tensor([0.3])).rsample((4,)).shape
    (4, 1)
    """

    arg_constraints = {"probs": constraints.unit_interval, "logits": constraints.real}
    support = constraints.real
    has_rsample = True

    def __init__(self, temperature, probs=None, logits=None, validate_args=None):
        _one_of(probs, logits, type(self).__name__)
        if probs is not None:
            (self.probs,) = broadcast_all(probs)
        else:
            (self.logits,) = broadcast_all(logits)
        self._param = self.probs if probs is not None else self.logits
        self.temperature = as_float(temperature, self._param)
        super().__init__(tuple(self._param.shape), validate_args=validate_args)

    def _param_event_dims(self):
        return {"probs": 0, "logits": 0, "_param": 0}

    @lazy_property
    def logits(self):
        return probs_to_logits(self.probs, is_binary=True)

    @lazy_property
    def probs(self):
        return logits_to_probs(self.logits, is_binary=True)

    @property
    def param_shape(self):
        return tuple(self._param.shape)

    def rsample(self, sample_shape=()):
        shape = self._extended_shape(sample_shape)
        probs = clamp_probs(self.probs.expand(shape))
        uniforms = clamp_probs(lucid.rand(shape, dtype=probs.dtype, device=probs.device))
        return (uniforms.log() - (-uniforms).log1p() + probs.log() - (-probs).log1p()) / self.temperature

    def log_prob(self, value):
        if self._validate_args:
            self._validate_sample(value)
        logits, value = broadcast_all(self.logits, value)
        diff = logits - value * self.temperature
        return self.temperature.log() + diff - 2 * lucid.log1p(diff.exp())


class RelaxedBernoulli(TransformedDistribution):
    """A relaxed Bernoulli on (0, 1): ``sigmoid`` of a LogitRelaxedBernoulli sample.

    Examples
    --------
    >>> import lucid
    >>> from lucid.distributions import RelaxedBernoulli
    >>> d = RelaxedBernoulli(lucid.tensor(0.1), probs=lucid.tensor([0.3]))
    >>> bool(((d.rsample((5,)) > 0) & (d.rsample((5,)) < 1)).all())
    True
    """

    arg_constraints = {"probs": constraints.unit_interval, "logits": constraints.real}
    support = constraints.unit_interval
    has_rsample = True

    def __init__(self, temperature, probs=None, logits=None, validate_args=None):
        base_dist = LogitRelaxedBernoulli(temperature, probs, logits)
        super().__init__(base_dist, SigmoidTransform(), validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        new = self._get_checked_instance(RelaxedBernoulli, _instance)
        return super().expand(batch_shape, _instance=new)

    @property
    def temperature(self):
        return self.base_dist.temperature

    @property
    def logits(self):
        return self.base_dist.logits

    @property
    def probs(self):
        return self.base_dist.probs


class ExpRelaxedCategorical(Distribution):
    """Log of a RelaxedOneHotCategorical (Concrete) sample, on the real vectors.

    Examples
    --------
    >>> import lucid
    >>> from lucid.distributions import ExpRelaxedCategorical
    >>> x = ExpRelaxedCategorical(lucid.tensor(0.5), probs=lucid.tensor([0.2, 0.8])).rsample()
    >>> round(x.exp().sum().item(), 5)
    1.0
    """

    arg_constraints = {"probs": constraints.simplex, "logits": constraints.real_vector}
    support = constraints.real_vector
    has_rsample = True

    def __init__(self, temperature, probs=None, logits=None, validate_args=None):
        self._categorical = Categorical(probs, logits)
        self.temperature = as_float(temperature, self._categorical._param)
        batch_shape = self._categorical.batch_shape
        event_shape = tuple(self._categorical.param_shape[-1:])
        super().__init__(batch_shape, event_shape, validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        new = self._get_checked_instance(ExpRelaxedCategorical, _instance)
        batch_shape = tuple(batch_shape)
        new.temperature = self.temperature
        new._categorical = self._categorical.expand(batch_shape)
        Distribution.__init__(new, batch_shape, self.event_shape, validate_args=False)
        new._validate_args = self._validate_args
        return new

    @property
    def param_shape(self):
        return self._categorical.param_shape

    @property
    def logits(self):
        return self._categorical.logits

    @property
    def probs(self):
        return self._categorical.probs

    def rsample(self, sample_shape=()):
        shape = self._extended_shape(sample_shape)
        uniforms = clamp_probs(lucid.rand(shape, dtype=self.logits.dtype, device=self.logits.device))
        gumbels = -((-(uniforms.log())).log())
        scores = (self.logits + gumbels) / self.temperature
        return scores - scores.logsumexp(-1, keepdim=True)

    def log_prob(self, value):
        K = self._categorical._num_events
        if self._validate_args:
            self._validate_sample(value)
        log_scale = math.lgamma(K) - self.temperature.log() * (-(K - 1))
        score = self.logits - value * self.temperature
        score = (score - score.logsumexp(-1, keepdim=True)).sum(-1)
        return score + log_scale


class RelaxedOneHotCategorical(TransformedDistribution):
    """The Concrete / Gumbel-softmax distribution on the simplex at ``temperature``.

    Examples
    --------
    >>> import lucid
    >>> from lucid.distributions import RelaxedOneHotCategorical
    >>> d = RelaxedOneHotCategorical(lucid.tensor(0.5), probs=lucid.tensor([0.2, 0.8]))
    >>> round(d.rsample().sum().item(), 5)
    1.0
    """

    arg_constraints = {"probs": constraints.simplex, "logits": constraints.real_vector}
    support = constraints.simplex
    has_rsample = True

    def __init__(self, temperature, probs=None, logits=None, validate_args=None):
        base_dist = ExpRelaxedCategorical(temperature, probs, logits, validate_args=validate_args)
        super().__init__(base_dist, ExpTransform(), validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        new = self._get_checked_instance(RelaxedOneHotCategorical, _instance)
        return super().expand(batch_shape, _instance=new)

    @property
    def temperature(self):
        return self.base_dist.temperature

    @property
    def logits(self):
        return self.base_dist.logits

    @property
    def probs(self):
        return self.base_dist.probs


class ContinuousBernoulli(ExponentialFamily):
    """Continuous Bernoulli on [0, 1]: density proportional to ``p^x (1 - p)^(1 - x)``.

    Near ``probs = 0.5`` (inside ``lims``) the normaliser, mean and variance use Taylor
    expansions, as in PyTorch, because the closed forms divide 0 by 0 there.

    Examples
    --------
    >>> import lucid
    >>> from lucid.distributions import ContinuousBernoulli
    >>> d = ContinuousBernoulli(probs=lucid.tensor(0.5))
    >>> d.log_prob(lucid.tensor(0.3)).item(), d.mean.item()
    (0.0, 0.5)
    """

    arg_constraints = {"probs": constraints.unit_interval, "logits": constraints.real}
    support = constraints.unit_interval
    has_rsample = True

    def __init__(self, probs=None, logits=None, lims=(0.499, 0.501), validate_args=None):
        _one_of(probs, logits, "ContinuousBernoulli")
        if probs is not None:
            (probs,) = broadcast_all(probs)
            # probs is clamped below, so it is checked here, before the clamp hides a bad value.
            if validate_args if validate_args is not None else Distribution._validate_args:
                if not _holds(constraints.unit_interval, probs):
                    raise ValueError(f"Expected parameter probs ({type(probs).__name__} of shape "
                                     f"{tuple(probs.shape)}) of distribution ContinuousBernoulli to satisfy the "
                                     f"constraint Interval(lower_bound=0.0, upper_bound=1.0), but found invalid "
                                     f"values:\n{concrete(probs)}")
            self.probs = clamp_probs(probs)
        else:
            (self.logits,) = broadcast_all(logits)
        self._param = self.probs if probs is not None else self.logits
        self._lims = lims
        super().__init__(tuple(self._param.shape), validate_args=validate_args)

    def _param_event_dims(self):
        return {"probs": 0, "logits": 0, "_param": 0}

    @lazy_property
    def logits(self):
        return probs_to_logits(self.probs, is_binary=True)

    @lazy_property
    def probs(self):
        return clamp_probs(logits_to_probs(self.logits, is_binary=True))

    @property
    def param_shape(self):
        return tuple(self._param.shape)

    def _outside_unstable_region(self):
        return (self.probs <= self._lims[0]) | (self.probs > self._lims[1])

    def _cut_probs(self):
        return lucid.where(self._outside_unstable_region(), self.probs, self._lims[0] * lucid.ones_like(self.probs))

    def _cont_bern_log_norm(self):
        """Log of the normalising constant C(p) (a Taylor expansion near p = 1/2)."""
        cut = self._cut_probs()
        below = lucid.where(cut <= 0.5, cut, lucid.zeros_like(cut))
        above = lucid.where(cut >= 0.5, cut, lucid.ones_like(cut))
        log_norm = lucid.log((lucid.log1p(-cut) - lucid.log(cut)).abs()) - lucid.where(
            cut <= 0.5, lucid.log1p(-2.0 * below), lucid.log(2.0 * above - 1.0))
        x = (self.probs - 0.5) ** 2
        taylor = math.log(2.0) + (4.0 / 3.0 + 104.0 / 45.0 * x) * x
        return lucid.where(self._outside_unstable_region(), log_norm, taylor)

    @property
    def mean(self):
        cut = self._cut_probs()
        mus = cut / (2.0 * cut - 1.0) + 1.0 / (lucid.log1p(-cut) - lucid.log(cut))
        x = self.probs - 0.5
        taylor = 0.5 + (1.0 / 3.0 + 16.0 / 45.0 * x ** 2) * x
        return lucid.where(self._outside_unstable_region(), mus, taylor)

    @property
    def stddev(self):
        return self.variance.sqrt()

    @property
    def variance(self):
        cut = self._cut_probs()
        vs = cut * (cut - 1.0) / (1.0 - 2.0 * cut) ** 2 + 1.0 / (lucid.log1p(-cut) - lucid.log(cut)) ** 2
        x = (self.probs - 0.5) ** 2
        taylor = 1.0 / 12.0 - (1.0 / 15.0 - 128.0 / 945.0 * x) * x
        return lucid.where(self._outside_unstable_region(), vs, taylor)

    def rsample(self, sample_shape=()):
        shape = self._extended_shape(sample_shape)
        return self.icdf(lucid.rand(shape, dtype=self.probs.dtype, device=self.probs.device))

    def log_prob(self, value):
        if self._validate_args:
            self._validate_sample(value)
        logits, value = broadcast_all(self.logits, value)
        return -_bce_with_logits(logits, value) + self._cont_bern_log_norm()

    def cdf(self, value):
        if self._validate_args:
            self._validate_sample(value)
        cut = self._cut_probs()
        cdfs = (cut ** value * (1.0 - cut) ** (1.0 - value) + cut - 1.0) / (2.0 * cut - 1.0)
        unbounded = lucid.where(self._outside_unstable_region(), cdfs, value)
        return lucid.where(value <= 0.0, lucid.zeros_like(value),
                           lucid.where(value >= 1.0, lucid.ones_like(value), unbounded))

    def icdf(self, value):
        cut = self._cut_probs()
        return lucid.where(self._outside_unstable_region(),
                           (lucid.log1p(-cut + value * (2.0 * cut - 1.0)) - lucid.log1p(-cut))
                           / (lucid.log(cut) - lucid.log1p(-cut)), value)

    def entropy(self):
        log_probs0 = lucid.log1p(-self.probs)
        log_probs1 = lucid.log(self.probs)
        return self.mean * (log_probs0 - log_probs1) - self._cont_bern_log_norm() - log_probs0

    _mean_carrier_measure = 0

    @property
    def _natural_params(self):
        return (self.logits,)

    def _log_normalizer(self, x):
        """Log normaliser in the natural parameter (a Taylor expansion near 0, as PyTorch)."""
        out_unst_reg = (x <= self._lims[0] - 0.5) | (x > self._lims[1] - 0.5)
        cut_nat_params = lucid.where(out_unst_reg, x, (self._lims[0] - 0.5) * lucid.ones_like(x))
        log_norm = lucid.log((lucid.exp(cut_nat_params) - 1.0).abs()) - lucid.log(cut_nat_params.abs())
        taylor = 0.5 * x + x ** 2 / 24.0 - x ** 4 / 2880.0
        return lucid.where(out_unst_reg, log_norm, taylor)
