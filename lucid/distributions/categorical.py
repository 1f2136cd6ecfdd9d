"""Discrete distributions over a finite set: Bernoulli, Categorical, OneHotCategorical."""
from __future__ import annotations

import math

import numpy as np

import lucid
from . import constraints
from .distribution import Distribution
from .exp_family import ExponentialFamily
from .utils import broadcast_all, finfo, lazy_property, logits_to_probs, probs_to_logits

__all__ = ["Bernoulli", "Categorical", "OneHotCategorical", "OneHotCategoricalStraightThrough"]


def _one_of(probs, logits, name):
    if (probs is None) == (logits is None):
        raise ValueError(f"{name}: either `probs` or `logits` must be specified, but not both.")


def _bce_with_logits(logits, target):
    # t softplus(-x) + (1 - t) softplus(x): smooth everywhere, with derivative sigmoid(x) - t, and
    # no cancellation for t in {0, 1}. (max(x, 0) - x t + log1p(exp(-|x|)) has the same values,
    # but the subgradients of its two kinks add up to 1 - t at x = 0, not 1/2 - t.)
    zero = lucid.zeros_like(logits)
    return target * lucid.logaddexp(zero, -logits) + (1 - target) * lucid.logaddexp(zero, logits)


class Bernoulli(ExponentialFamily):
    """Bernoulli distribution: 1 with probability ``probs`` (or ``sigmoid(logits)``), else 0.

    Parameters
    ----------
    probs : float or Tensor, optional
    logits : float or Tensor, optional
        Exactly one of ``probs`` and ``logits``.
    validate_args : bool, optional

    Examples
    --------
    >>> import lucid
    >>> from lucid.distributions import Bernoulli
    >>> d = Bernoulli(probs=lucid.tensor([0.25]))
    >>> round(d.log_prob(lucid.tensor([1.0])).item(), 4), d.variance.tolist()
    (-1.3863, [0.1875])
    """

    arg_constraints = {"probs": constraints.unit_interval, "logits": constraints.real}
    support = constraints.boolean
    has_enumerate_support = True

    def __init__(self, probs=None, logits=None, validate_args=None):
        _one_of(probs, logits, "Bernoulli")
        if probs is not None:
            (self.probs,) = broadcast_all(probs)
        else:
            (self.logits,) = broadcast_all(logits)
        self._param = self.probs if probs is not None else self.logits
        super().__init__(tuple(self._param.shape), validate_args=validate_args)

    def _param_event_dims(self):
        return {"probs": 0, "logits": 0, "_param": 0}

    @property
    def mean(self):
        return self.probs

    @property
    def mode(self):
        mode = (self.probs >= 0.5).to(self.probs.dtype)
        return lucid.where(self.probs == 0.5, lucid.full_like(mode, math.nan), mode)

    @property
    def variance(self):
        return self.probs * (1 - self.probs)

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
        shape = self._extended_shape(sample_shape)
        with lucid.no_grad():
            p = self.probs.detach()
            u = lucid.rand(shape, dtype=lucid.float64, device=p.device)
            return (u < p).to(p.dtype)

    def log_prob(self, value):
        if self._validate_args:
            self._validate_sample(value)
        logits, value = broadcast_all(self.logits, value)
        return -_bce_with_logits(logits, value)

    def entropy(self):
        return _bce_with_logits(self.logits, self.probs)

    _mean_carrier_measure = 0

    @property
    def _natural_params(self):
        return (self.logits,)

    def _log_normalizer(self, x):
        return lucid.relu(x) + lucid.log1p(lucid.exp(-x.abs()))  # log(1 + e^x)

    def enumerate_support(self, expand=True):
        values = lucid.arange(2, dtype=self._param.dtype, device=self._param.device)
        values = values.reshape((-1,) + (1,) * len(self._batch_shape))
        if expand:
            values = values.expand((-1,) + self._batch_shape)
        return values


class Categorical(Distribution):
    """Categorical distribution over ``{0, ..., K-1}`` with (unnormalised) ``probs`` or ``logits``.

    The last dim of the parameter indexes the categories; the rest is the batch.

    Examples
    --------
    >>> import lucid
    >>> from lucid.distributions import Categorical
    >>> d = Categorical(probs=lucid.tensor([1.0, 3.0]))
    >>> d.probs.tolist(), round(d.log_prob(lucid.tensor(1)).item(), 4)
    ([0.25, 0.75], -0.2877)
    """

    arg_constraints = {"probs": constraints.simplex, "logits": constraints.independent(constraints.real, 1)}
    has_enumerate_support = True

    def __init__(self, probs=None, logits=None, validate_args=None):
        _one_of(probs, logits, "Categorical")
        if probs is not None:
            if probs.ndim < 1:
                raise ValueError("Categorical: `probs` parameter must be at least one-dimensional.")
            self.probs = probs / probs.sum(-1, keepdim=True)
        else:
            if logits.ndim < 1:
                raise ValueError("Categorical: `logits` parameter must be at least one-dimensional.")
            self.logits = logits - logits.logsumexp(-1, keepdim=True)
        self._param = self.probs if probs is not None else self.logits
        self._num_events = self._param.shape[-1]
        batch_shape = tuple(self._param.shape[:-1]) if self._param.ndim > 1 else ()
        super().__init__(batch_shape, validate_args=validate_args)

    def _param_event_dims(self):
        return {"probs": 1, "logits": 1, "_param": 1}

    @constraints.dependent_property(is_discrete=True, event_dim=0)
    def support(self):
        return constraints.integer_interval(0, self._num_events - 1)

    @lazy_property
    def logits(self):
        return probs_to_logits(self.probs)

    @lazy_property
    def probs(self):
        return logits_to_probs(self.logits)

    @property
    def param_shape(self):
        return tuple(self._param.shape)

    @property
    def mean(self):
        return lucid.full(self._extended_shape(), math.nan, dtype=self._param.dtype, device=self._param.device)

    @property
    def mode(self):
        return self.probs.argmax(-1)

    @property
    def variance(self):
        return lucid.full(self._extended_shape(), math.nan, dtype=self._param.dtype, device=self._param.device)

    def sample(self, sample_shape=()):
        shape = self._extended_shape(sample_shape)
        with lucid.no_grad():
            probs = self.probs.detach()
            u = lucid.rand(shape, dtype=lucid.float64, device=probs.device)
            # Inverse CDF: the number of cumulative weights below u (made of batchable ops,
            # so batched probs and batched noise combine under vmap).
            cdf = probs.to(lucid.float64).cumsum(-1)
            idx = (u.unsqueeze(-1) >= cdf / cdf[..., -1:]).sum(-1)
            return idx.clamp(max=self._num_events - 1).to(lucid.int64)

    def log_prob(self, value):
        if self._validate_args:
            self._validate_sample(value)
        value = value.to(lucid.int64).unsqueeze(-1)
        shape = np.broadcast_shapes(tuple(value.shape), tuple(self.logits.shape))
        value = value.expand(shape[:-1] + (1,))
        log_pmf = self.logits.expand(shape)
        return log_pmf.gather(-1, value).squeeze(-1)

    def entropy(self):
        min_real = float(finfo(self.logits.dtype).min)
        logits = self.logits.clamp(min=min_real)
        return -(logits * self.probs).sum(-1)

    def enumerate_support(self, expand=True):
        values = lucid.arange(self._num_events, dtype=lucid.int64, device=self._param.device)
        values = values.reshape((-1,) + (1,) * len(self._batch_shape))
        if expand:
            values = values.expand((-1,) + self._batch_shape)
        return values


class OneHotCategorical(Distribution):
    """Categorical distribution whose samples are one-hot vectors of length K.

    Examples
    --------
    >>> import lucid
    >>> from lucid.distributions import OneHotCategorical
    >>> d = OneHotCategorical(probs=lucid.tensor([0.0, 1.0]))
    >>> d.sample().tolist()
    [0.0, 1.0]
    """

    arg_constraints = {"probs": constraints.simplex, "logits": constraints.independent(constraints.real, 1)}
    support = constraints.one_hot
    has_enumerate_support = True

    def __init__(self, probs=None, logits=None, validate_args=None):
        self._categorical = Categorical(probs, logits)
        batch_shape = self._categorical.batch_shape
        event_shape = tuple(self._categorical.param_shape[-1:])
        super().__init__(batch_shape, event_shape, validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        new = self._get_checked_instance(OneHotCategorical, _instance)
        batch_shape = tuple(batch_shape)
        new._categorical = self._categorical.expand(batch_shape)
        Distribution.__init__(new, batch_shape, self.event_shape, validate_args=False)
        new._validate_args = self._validate_args
        return new

    @property
    def _param(self):
        return self._categorical._param

    @property
    def probs(self):
        return self._categorical.probs

    @property
    def logits(self):
        return self._categorical.logits

    @property
    def mean(self):
        return self._categorical.probs

    @property
    def mode(self):
        probs = self._categorical.probs
        return _one_hot(probs.argmax(-1), probs.shape[-1], probs.dtype)

    @property
    def variance(self):
        return self._categorical.probs * (1 - self._categorical.probs)

    @property
    def param_shape(self):
        return self._categorical.param_shape

    def sample(self, sample_shape=()):
        probs = self._categorical.probs
        indices = self._categorical.sample(sample_shape)
        return _one_hot(indices, probs.shape[-1], probs.dtype)

    def log_prob(self, value):
        if self._validate_args:
            self._validate_sample(value)
        indices = value.max(-1)[1]
        return self._categorical.log_prob(indices)

    def entropy(self):
        return self._categorical.entropy()

    def enumerate_support(self, expand=True):
        n = self.event_shape[0]
        values = lucid.eye(n, dtype=self._param.dtype, device=self._param.device)
        values = values.reshape((n,) + (1,) * len(self.batch_shape) + (n,))
        if expand:
            values = values.expand((n,) + self.batch_shape + (n,))
        return values

    def __repr__(self):
        p = self._categorical._param
        name = "probs" if "probs" in self._categorical.__dict__ and p is self._categorical.probs else "logits"
        return f"{type(self).__name__}({name}: {tuple(p.shape)})"


def _one_hot(indices, n, dtype):
    return (indices.unsqueeze(-1) == lucid.arange(n, dtype=indices.dtype, device=indices.device)).to(dtype)


class OneHotCategoricalStraightThrough(OneHotCategorical):
    """:class:`OneHotCategorical` whose ``rsample`` passes the gradient straight through
    (``sample + probs - probs.detach()``, Bengio et al. 2013)."""

    has_rsample = True

    def rsample(self, sample_shape=()):
        samples = self.sample(sample_shape)
        probs = self._categorical.probs
        return samples + (probs - probs.detach())
