"""The generalized Pareto distribution (PyTorch's ``GeneralizedPareto``)."""
from __future__ import annotations

import math

import lucid
from . import constraints
from .distribution import Distribution
from .utils import broadcast_all

__all__ = ["GeneralizedPareto"]


class GeneralizedPareto(Distribution):
    r"""Generalized Pareto distribution with ``loc``, ``scale`` (> 0) and ``concentration`` (the
    shape :math:`\xi`): survival function ``(1 + xi z) ** (-1 / xi)`` for ``z = (x - loc) / scale``
    (``exp(-z)`` at ``xi = 0``).

    Its support is ``[loc, inf)`` for ``xi >= 0`` and ``[loc, loc - scale / xi]`` for ``xi < 0``.
    Special cases: Exponential (``loc = 0, xi = 0``), Pareto (``xi > 0, loc = scale / xi``) and
    Uniform (``xi = -1``). ``rsample`` is the inverse CDF of uniform noise, so it is
    differentiable in every parameter. As in PyTorch, ``concentration`` within ``1e-8`` of zero
    takes the ``xi = 0`` (exponential) formulas, and ``mean``/``variance`` are ``nan`` where they
    do not exist (``xi >= 1`` / ``xi >= 1/2``).

    Parameters
    ----------
    loc, scale, concentration : float or Tensor
    validate_args : bool, optional

    Examples
    --------
    >>> import lucid
    >>> from lucid.distributions import GeneralizedPareto
    >>> d = GeneralizedPareto(lucid.tensor(0.0), lucid.tensor(2.0), lucid.tensor(0.5))
    >>> round(d.mean.item(), 6), round(d.cdf(lucid.tensor(2.0)).item(), 6)
    (4.0, 0.555556)
    """

    arg_constraints = {"loc": constraints.real, "scale": constraints.positive, "concentration": constraints.real}
    has_rsample = True

    def __init__(self, loc, scale, concentration, validate_args=None):
        self.loc, self.scale, self.concentration = broadcast_all(loc, scale, concentration)
        super().__init__(tuple(self.loc.shape), validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        new = self._get_checked_instance(GeneralizedPareto, _instance)
        batch_shape = tuple(batch_shape)
        new.loc = self.loc.expand(batch_shape)
        new.scale = self.scale.expand(batch_shape)
        new.concentration = self.concentration.expand(batch_shape)
        Distribution.__init__(new, batch_shape, validate_args=False)
        new._validate_args = self._validate_args
        return new

    def _zero_and_safe(self):
        """Where xi is (numerically) 0, and xi with those entries replaced by 1 (never divided by 0)."""
        c = self.concentration
        eq_zero = c.abs() <= 1e-8  # torch.isclose(c, 0) with its default tolerances
        return eq_zero, lucid.where(eq_zero, lucid.ones_like(c), c)

    def _z(self, x):
        return (x - self.loc) / self.scale

    def rsample(self, sample_shape=()):
        shape = self._extended_shape(sample_shape)
        u = lucid.rand(shape, dtype=self.loc.dtype, device=self.loc.device)
        return self.icdf(u)

    def log_prob(self, value):
        if self._validate_args:
            self._validate_sample(value)
        z = self._z(value)
        eq_zero, c = self._zero_and_safe()
        y = 1 / c + 1
        # y == 0 (xi = -1, the uniform case): the density is flat, and 0 * log(0) at the upper end is 0
        nonzero = lucid.where(y == 0, lucid.zeros_like(y * z), y * lucid.log1p(c * z))
        return -self.scale.log() - lucid.where(eq_zero, z, nonzero)

    def log_survival_function(self, value):
        """``log(1 - cdf(value))``."""
        if self._validate_args:
            self._validate_sample(value)
        z = self._z(value)
        eq_zero, c = self._zero_and_safe()
        return lucid.where(eq_zero, -z, -lucid.log1p(c * z) / c)

    def log_cdf(self, value):
        """``log(cdf(value))``."""
        return lucid.log1p(-lucid.exp(self.log_survival_function(value)))

    def cdf(self, value):
        return lucid.exp(self.log_cdf(value))

    def icdf(self, value):
        eq_zero, c = self._zero_and_safe()
        logu = lucid.log1p(-value)
        nonzero = self.loc + self.scale / c * lucid.expm1(-c * logu)
        return lucid.where(eq_zero, self.loc - self.scale * logu, nonzero)

    @property
    def mean(self):
        c = self.concentration
        valid = c < 1
        safe = lucid.where(valid, c, lucid.full_like(c, 0.5))
        return lucid.where(valid, self.loc + self.scale / (1 - safe), lucid.full_like(c, math.nan))

    @property
    def variance(self):
        c = self.concentration
        valid = c < 0.5
        safe = lucid.where(valid, c, lucid.full_like(c, 0.25))
        result = self.scale.pow(2) / ((1 - safe).pow(2) * (1 - 2 * safe))
        return lucid.where(valid, result, lucid.full_like(c, math.nan))

    @property
    def mode(self):
        return self.loc

    def entropy(self):
        return lucid.broadcast_to(self.scale.log() + self.concentration + 1, self._batch_shape)

    @constraints.dependent_property(is_discrete=False, event_dim=0)
    def support(self):
        c = self.concentration
        neg = c < 0
        safe = lucid.where(neg, c, -lucid.ones_like(c))
        upper = lucid.where(neg, self.loc - self.scale / safe, lucid.full_like(c, math.inf))
        return constraints.interval(self.loc, upper)
