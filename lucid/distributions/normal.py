"""Location-scale continuous distributions: Normal, Laplace, Cauchy; and Uniform, Exponential."""
from __future__ import annotations

import math

import lucid
from . import constraints
from .distribution import Distribution, _holds
from .exp_family import ExponentialFamily
from .utils import broadcast_all, finfo, special

__all__ = ["Normal", "Uniform", "Exponential", "Laplace", "Cauchy"]

_LOG_SQRT_2PI = 0.5 * math.log(2 * math.pi)


def _batch(*params):
    return tuple(params[0].shape)


class Normal(ExponentialFamily):
    """Normal (Gaussian) distribution with mean ``loc`` and standard deviation ``scale``.

    Parameters
    ----------
    loc : float or Tensor
        Mean.
    scale : float or Tensor
        Standard deviation (> 0).
    validate_args : bool, optional

    Examples
    --------
    >>> import lucid
    >>> from lucid.distributions import Normal
    >>> d = Normal(lucid.tensor([0.0]), lucid.tensor([2.0]))
    >>> round(d.log_prob(lucid.tensor([1.0])).item(), 4)
    -1.7371
    """

    arg_constraints = {"loc": constraints.real, "scale": constraints.positive}
    support = constraints.real
    has_rsample = True
    _mean_carrier_measure = 0

    def __init__(self, loc, scale, validate_args=None):
        self.loc, self.scale = broadcast_all(loc, scale)
        super().__init__(_batch(self.loc), validate_args=validate_args)

    @property
    def mean(self):
        return self.loc

    @property
    def mode(self):
        return self.loc

    @property
    def stddev(self):
        return self.scale

    @property
    def variance(self):
        return self.stddev.pow(2)

    def rsample(self, sample_shape=()):
        shape = self._extended_shape(sample_shape)
        eps = lucid.randn(shape, dtype=self.loc.dtype, device=self.loc.device)
        return self.loc + eps * self.scale

    def log_prob(self, value):
        if self._validate_args:
            self._validate_sample(value)
        return -((value - self.loc) ** 2) / (2 * self.scale ** 2) - self.scale.log() - _LOG_SQRT_2PI

    def cdf(self, value):
        if self._validate_args:
            self._validate_sample(value)
        return 0.5 * (1 + lucid.erf((value - self.loc) * self.scale.reciprocal() / math.sqrt(2)))

    def icdf(self, value):
        return self.loc + self.scale * special("erfinv")(2 * value - 1) * math.sqrt(2)

    def entropy(self):
        return 0.5 + 0.5 * math.log(2 * math.pi) + self.scale.log()

    @property
    def _natural_params(self):
        return (self.loc / self.scale.pow(2), -0.5 * self.scale.pow(2).reciprocal())

    def _log_normalizer(self, x, y):
        return -0.25 * x.pow(2) / y + 0.5 * lucid.log(-math.pi / y)


class Uniform(Distribution):
    """Uniform distribution on the half-open interval ``[low, high)``.

    Examples
    --------
    >>> import lucid
    >>> from lucid.distributions import Uniform
    >>> d = Uniform(lucid.tensor([0.0]), lucid.tensor([4.0]))
    >>> d.log_prob(lucid.tensor([1.0])).tolist(), d.cdf(lucid.tensor([1.0])).tolist()
    ([-1.3862943649291992], [0.25])
    """

    arg_constraints = {"low": constraints.dependent(is_discrete=False, event_dim=0),
                       "high": constraints.dependent(is_discrete=False, event_dim=0)}
    has_rsample = True

    def __init__(self, low, high, validate_args=None):
        self.low, self.high = broadcast_all(low, high)
        super().__init__(_batch(self.low), validate_args=validate_args)
        if self._validate_args:
            if not _holds(constraints.less_than(self.high), self.low):
                raise ValueError("Uniform is not defined when low >= high")

    @property
    def mean(self):
        return (self.high + self.low) / 2

    @property
    def mode(self):
        return self.high * math.nan  # PyTorch's: no mode, but a graph (its gradient is nan)

    @property
    def stddev(self):
        return (self.high - self.low) / 12 ** 0.5

    @property
    def variance(self):
        return (self.high - self.low).pow(2) / 12

    @constraints.dependent_property(is_discrete=False, event_dim=0)
    def support(self):
        return constraints.interval(self.low, self.high)

    def rsample(self, sample_shape=()):
        shape = self._extended_shape(sample_shape)
        rand = lucid.rand(shape, dtype=self.low.dtype, device=self.low.device)
        return self.low + rand * (self.high - self.low)

    def log_prob(self, value):
        if self._validate_args:
            self._validate_sample(value)
        lb = (self.low <= value).to(self.low.dtype)
        ub = (self.high > value).to(self.low.dtype)
        return lucid.log(lb * ub) - lucid.log(self.high - self.low)

    def cdf(self, value):
        if self._validate_args:
            self._validate_sample(value)
        result = (value - self.low) / (self.high - self.low)
        return result.clamp(0, 1)

    def icdf(self, value):
        return value * (self.high - self.low) + self.low

    def entropy(self):
        return lucid.log(self.high - self.low)


class Exponential(ExponentialFamily):
    """Exponential distribution with ``rate`` (density ``rate * exp(-rate x)`` on ``x >= 0``).

    Examples
    --------
    >>> import lucid
    >>> from lucid.distributions import Exponential
    >>> Exponential(lucid.tensor([2.0])).mean.tolist()
    [0.5]
    """

    arg_constraints = {"rate": constraints.positive}
    support = constraints.nonnegative
    has_rsample = True

    def __init__(self, rate, validate_args=None):
        (self.rate,) = broadcast_all(rate)
        super().__init__(_batch(self.rate), validate_args=validate_args)

    @property
    def mean(self):
        return self.rate.reciprocal()

    @property
    def mode(self):
        return lucid.zeros_like(self.rate)

    @property
    def stddev(self):
        return self.rate.reciprocal()

    @property
    def variance(self):
        return self.rate.pow(-2)

    def rsample(self, sample_shape=()):
        shape = self._extended_shape(sample_shape)
        u = lucid.rand(shape, dtype=self.rate.dtype, device=self.rate.device)
        # -log(1 - u) with u in [0, 1) is finite; it is a standard exponential draw.
        return -lucid.log1p(-u) / self.rate

    def log_prob(self, value):
        if self._validate_args:
            self._validate_sample(value)
        return self.rate.log() - self.rate * value

    def cdf(self, value):
        if self._validate_args:
            self._validate_sample(value)
        return 1 - lucid.exp(-self.rate * value)

    def icdf(self, value):
        return -lucid.log1p(-value) / self.rate

    def entropy(self):
        return 1.0 - self.rate.log()

    _mean_carrier_measure = 0

    @property
    def _natural_params(self):
        return (-self.rate,)

    def _log_normalizer(self, x):
        return -lucid.log(-x)


class Laplace(Distribution):
    """Laplace distribution with location ``loc`` and scale ``scale``.

    Examples
    --------
    >>> import lucid
    >>> from lucid.distributions import Laplace
    >>> round(Laplace(0.0, 1.0).log_prob(lucid.tensor(1.0)).item(), 4)
    -1.6931
    """

    arg_constraints = {"loc": constraints.real, "scale": constraints.positive}
    support = constraints.real
    has_rsample = True

    def __init__(self, loc, scale, validate_args=None):
        self.loc, self.scale = broadcast_all(loc, scale)
        super().__init__(_batch(self.loc), validate_args=validate_args)

    @property
    def mean(self):
        return self.loc

    @property
    def mode(self):
        return self.loc

    @property
    def variance(self):
        return 2 * self.scale.pow(2)

    @property
    def stddev(self):
        return (2 ** 0.5) * self.scale

    def rsample(self, sample_shape=()):
        shape = self._extended_shape(sample_shape)
        eps = float(finfo(self.loc.dtype).eps)
        # uniform on (eps - 1, 1)
        u = lucid.rand(shape, dtype=self.loc.dtype, device=self.loc.device) * (2 - eps) + (eps - 1)
        return self.loc - self.scale * u.sign() * lucid.log1p(-u.abs())

    def log_prob(self, value):
        if self._validate_args:
            self._validate_sample(value)
        return -lucid.log(2 * self.scale) - (value - self.loc).abs() / self.scale

    def cdf(self, value):
        if self._validate_args:
            self._validate_sample(value)
        return 0.5 - 0.5 * (value - self.loc).sign() * lucid.expm1(-(value - self.loc).abs() / self.scale)

    def icdf(self, value):
        term = value - 0.5
        return self.loc - self.scale * term.sign() * lucid.log1p(-2 * term.abs())

    def entropy(self):
        return 1 + lucid.log(2 * self.scale)


class Cauchy(Distribution):
    """Cauchy (Lorentz) distribution: the ratio of two independent standard normals.

    Examples
    --------
    >>> import lucid
    >>> from lucid.distributions import Cauchy
    >>> Cauchy(0.0, 1.0).cdf(lucid.tensor(0.0)).item()
    0.5
    """

    arg_constraints = {"loc": constraints.real, "scale": constraints.positive}
    support = constraints.real
    has_rsample = True

    def __init__(self, loc, scale, validate_args=None):
        self.loc, self.scale = broadcast_all(loc, scale)
        super().__init__(_batch(self.loc), validate_args=validate_args)

    @property
    def mean(self):
        return lucid.full(self._extended_shape(), math.nan, dtype=self.loc.dtype, device=self.loc.device)

    @property
    def mode(self):
        return self.loc

    @property
    def variance(self):
        return lucid.full(self._extended_shape(), math.inf, dtype=self.loc.dtype, device=self.loc.device)

    def rsample(self, sample_shape=()):
        shape = self._extended_shape(sample_shape)
        u = lucid.rand(shape, dtype=self.loc.dtype, device=self.loc.device)
        return self.loc + self.scale * lucid.tan(math.pi * (u - 0.5))

    def log_prob(self, value):
        if self._validate_args:
            self._validate_sample(value)
        return -math.log(math.pi) - self.scale.log() - (((value - self.loc) / self.scale) ** 2).log1p()

    def cdf(self, value):
        if self._validate_args:
            self._validate_sample(value)
        return lucid.atan((value - self.loc) / self.scale) / math.pi + 0.5

    def icdf(self, value):
        return lucid.tan(math.pi * (value - 0.5)) * self.scale + self.loc

    def entropy(self):
        return math.log(4 * math.pi) + self.scale.log()
