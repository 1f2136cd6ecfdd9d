"""Distributions over counts: Poisson, Geometric, Binomial, Multinomial."""
from __future__ import annotations

import math

import lucid
from . import constraints
from ._sampling import binomial_icdf, poisson_icdf
from .categorical import Categorical, _bce_with_logits, _one_of
from .distribution import Distribution, _holds
from .exp_family import ExponentialFamily
from .utils import broadcast_all, concrete, finfo, lazy_property, logits_to_probs, probs_to_logits, special

__all__ = ["Poisson", "Geometric", "Binomial", "Multinomial"]


def _uniform_open(shape, device, dtype=lucid.float64):
    """Uniform noise on (0, 1) in ``dtype`` (drawn in it, so it never rounds up to 1) on
    ``device``; a discrete quantile at u = 0 would be -1."""
    return lucid.rand(shape, dtype=dtype, device=device).clamp(min=float(finfo(dtype).tiny))


class Poisson(ExponentialFamily):
    """Poisson distribution with ``rate`` (mean number of events).

    Examples
    --------
    >>> import lucid
    >>> from lucid.distributions import Poisson
    >>> round(Poisson(lucid.tensor(2.0)).log_prob(lucid.tensor(3.0)).item(), 4)
    -1.7123
    """

    arg_constraints = {"rate": constraints.nonnegative}
    support = constraints.nonnegative_integer

    def __init__(self, rate, validate_args=None):
        (self.rate,) = broadcast_all(rate)
        super().__init__(tuple(self.rate.shape), validate_args=validate_args)

    @property
    def mean(self):
        return self.rate

    @property
    def mode(self):
        return self.rate.floor()

    @property
    def variance(self):
        return self.rate

    def sample(self, sample_shape=()):
        # See NOTE [Discrete samplers] in _sampling.py.
        shape = self._extended_shape(sample_shape)
        with lucid.no_grad():
            # float64 noise keeps the far tail reachable for float32 rates too
            return poisson_icdf(_uniform_open(shape, self.rate.device), self.rate.detach()).to(self.rate.dtype)

    def log_prob(self, value):
        if self._validate_args:
            self._validate_sample(value)
        rate, value = broadcast_all(self.rate, value)
        return special("xlogy")(value, rate) - rate - special("lgamma")(value + 1)

    @property
    def _natural_params(self):
        return (self.rate.log(),)

    def _log_normalizer(self, x):
        return lucid.exp(x)


class Geometric(Distribution):
    """Number of failures before the first success of Bernoulli(``probs``) trials.

    Examples
    --------
    >>> import lucid
    >>> from lucid.distributions import Geometric
    >>> Geometric(probs=lucid.tensor(0.25)).mean.item()
    3.0
    """

    arg_constraints = {"probs": constraints.unit_interval, "logits": constraints.real}
    support = constraints.nonnegative_integer

    def __init__(self, probs=None, logits=None, validate_args=None):
        _one_of(probs, logits, "Geometric")
        if probs is not None:
            (self.probs,) = broadcast_all(probs)
        else:
            (self.logits,) = broadcast_all(logits)
        param = self.probs if probs is not None else self.logits
        super().__init__(tuple(param.shape), validate_args=validate_args)
        if self._validate_args and probs is not None:
            if not _holds(constraints.positive, self.probs):
                raise ValueError(f"Expected parameter probs ({type(self.probs).__name__} of shape "
                                 f"{tuple(self.probs.shape)}) of distribution {self!r} to satisfy the constraint "
                                 f"Interval(lower_bound=0.0, upper_bound=1.0) with probs > 0, but found "
                                 f"invalid values:\n{concrete(self.probs)}")

    def _param_event_dims(self):
        return {"probs": 0, "logits": 0}

    @property
    def mean(self):
        return 1.0 / self.probs - 1.0

    @property
    def mode(self):
        return lucid.zeros_like(self.probs)

    @property
    def variance(self):
        return (1.0 / self.probs - 1.0) / self.probs

    @lazy_property
    def logits(self):
        return probs_to_logits(self.probs, is_binary=True)

    @lazy_property
    def probs(self):
        return logits_to_probs(self.logits, is_binary=True)

    def sample(self, sample_shape=()):
        shape = self._extended_shape(sample_shape)
        with lucid.no_grad():
            probs = self.probs.detach()
            u = _uniform_open(shape, probs.device, probs.dtype)
            return (u.log() / (-probs).log1p()).floor()

    def log_prob(self, value):
        if self._validate_args:
            self._validate_sample(value)
        value, probs = broadcast_all(value, self.probs)
        # 0 * log(1 - 1) is 0 for a certain first success.
        probs = lucid.where((probs == 1) & (value == 0), lucid.zeros_like(probs), probs)
        return value * (-probs).log1p() + self.probs.log()

    def entropy(self):
        return _bce_with_logits(self.logits, self.probs) / self.probs


def _clamp_by_zero(x):
    # max(x, 0) with the subgradient 1/2 at 0 (as PyTorch).
    return (x.clamp(min=0) + x - x.clamp(max=0)) / 2


class Binomial(Distribution):
    """Number of successes in ``total_count`` Bernoulli(``probs``) trials.

    Examples
    --------
    >>> import lucid
    >>> from lucid.distributions import Binomial
    >>> d = Binomial(10, probs=lucid.tensor(0.5))
    >>> d.mean.item(), round(d.log_prob(lucid.tensor(5.0)).item(), 4)
    (5.0, -1.402)
    """

    arg_constraints = {"total_count": constraints.nonnegative_integer, "probs": constraints.unit_interval,
                       "logits": constraints.real}
    has_enumerate_support = True

    def __init__(self, total_count=1, probs=None, logits=None, validate_args=None):
        _one_of(probs, logits, "Binomial")
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

    @constraints.dependent_property(is_discrete=True, event_dim=0)
    def support(self):
        return constraints.integer_interval(0, self.total_count)

    @property
    def mean(self):
        return self.total_count * self.probs

    @property
    def mode(self):
        return ((self.total_count + 1) * self.probs).floor().clamp(max=self.total_count)

    @property
    def variance(self):
        return self.total_count * self.probs * (1 - self.probs)

    @lazy_property
    def logits(self):
        return probs_to_logits(self.probs, is_binary=True)

    @lazy_property
    def probs(self):
        return logits_to_probs(self.logits, is_binary=True)

    @property
    def param_shape(self):
        return tuple(self._param.shape)

    def sample(self, sample_shape=()):
        # See NOTE [Discrete samplers] in _sampling.py.
        shape = self._extended_shape(sample_shape)
        with lucid.no_grad():
            u = _uniform_open(shape, self._param.device)
            return binomial_icdf(u, self.total_count.detach(), self.probs.detach()).to(self._param.dtype)

    def log_prob(self, value):
        if self._validate_args:
            self._validate_sample(value)
        lgamma = special("lgamma")
        log_factorial_n = lgamma(self.total_count + 1)
        log_factorial_k = lgamma(value + 1)
        log_factorial_nmk = lgamma(self.total_count - value + 1)
        # k * logits - n * log(1 + e^logits), written to stay finite for large |logits|.
        normalize_term = (self.total_count * _clamp_by_zero(self.logits)
                          + self.total_count * lucid.log1p(lucid.exp(-self.logits.abs())) - log_factorial_n)
        return value * self.logits - log_factorial_k - log_factorial_nmk - normalize_term

    def _homogeneous_count(self, what):
        # The support's size is a value: read back explicitly, as PyTorch's ``int(total_count.max())``.
        tc = concrete(self.total_count)
        if not tc.numel():
            return 0
        lo, hi = lucid.stack([tc.min(), tc.max()]).tolist()
        if lo != hi:
            raise NotImplementedError(f"Inhomogeneous total count not supported by `{what}`.")
        return int(hi)

    def entropy(self):
        log_prob = self.log_prob(self._support_values(False, "entropy"))
        return -(lucid.exp(log_prob) * log_prob).sum(0)

    def enumerate_support(self, expand=True):
        return self._support_values(expand, "enumerate_support")

    def _support_values(self, expand, what):
        n = self._homogeneous_count(what)
        values = lucid.arange(1 + n, dtype=self._param.dtype, device=self._param.device)
        values = values.reshape((-1,) + (1,) * len(self._batch_shape))
        if expand:
            values = values.expand((-1,) + self._batch_shape)
        return values


class Multinomial(Distribution):
    """Counts of ``total_count`` draws from a Categorical(``probs``/``logits``).

    ``total_count`` must be one int (as in PyTorch); it may be left out for ``log_prob``.

    Examples
    --------
    >>> import lucid
    >>> from lucid.distributions import Multinomial
    >>> d = Multinomial(4, probs=lucid.tensor([0.25, 0.25, 0.5]))
    >>> round(d.log_prob(lucid.tensor([1.0, 1.0, 2.0])).item(), 4)
    -1.674
    """

    arg_constraints = {"probs": constraints.simplex, "logits": constraints.independent(constraints.real, 1)}

    def __init__(self, total_count=1, probs=None, logits=None, validate_args=None):
        if not isinstance(total_count, int):
            raise NotImplementedError("inhomogeneous total_count is not supported")
        self.total_count = total_count
        self._categorical = Categorical(probs=probs, logits=logits)
        self._binomial = Binomial(total_count=total_count, probs=self.probs)
        batch_shape = self._categorical.batch_shape
        event_shape = tuple(self._categorical.param_shape[-1:])
        super().__init__(batch_shape, event_shape, validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        new = self._get_checked_instance(Multinomial, _instance)
        batch_shape = tuple(batch_shape)
        new.total_count = self.total_count
        new._categorical = self._categorical.expand(batch_shape)
        new._binomial = self._binomial.expand(batch_shape + self.event_shape)
        Distribution.__init__(new, batch_shape, self.event_shape, validate_args=False)
        new._validate_args = self._validate_args
        return new

    @constraints.dependent_property(is_discrete=True, event_dim=1)
    def support(self):
        return constraints.multinomial(self.total_count)

    @property
    def logits(self):
        return self._categorical.logits

    @property
    def probs(self):
        return self._categorical.probs

    @property
    def param_shape(self):
        return self._categorical.param_shape

    @property
    def mean(self):
        return self.probs * self.total_count

    @property
    def variance(self):
        return self.total_count * self.probs * (1 - self.probs)

    def sample(self, sample_shape=()):
        sample_shape = tuple(sample_shape) if not isinstance(sample_shape, int) else (sample_shape,)
        k = self.event_shape[0]
        idx = self._categorical.sample((self.total_count,) + sample_shape)
        counts = (idx.unsqueeze(-1) == lucid.arange(k, dtype=idx.dtype, device=idx.device)).sum(0)
        return counts.to(self.probs.dtype)

    def entropy(self):
        lgamma = special("lgamma")
        n = lucid.tensor(float(self.total_count), dtype=self.probs.dtype, device=self.probs.device)
        support = self._binomial.enumerate_support()
        binomial_probs = self._binomial.log_prob(support).exp()
        weights = lgamma(support + 1)
        return (n * self._categorical.entropy() - lgamma(n + 1)) + (binomial_probs * weights).sum(0).sum(-1)

    def log_prob(self, value):
        if self._validate_args:
            self._validate_sample(value)
        lgamma = special("lgamma")
        logits, value = broadcast_all(self.logits, value)
        log_factorial_n = lgamma(value.sum(-1) + 1)
        log_factorial_xs = lgamma(value + 1).sum(-1)
        # 0 * log(0) is 0: a category of zero probability that was never drawn costs nothing.
        logits = lucid.where((value == 0) & (logits == -math.inf), lucid.zeros_like(logits), logits)
        log_powers = (logits * value).sum(-1)
        return log_factorial_n - log_factorial_xs + log_powers
