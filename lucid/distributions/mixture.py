"""MixtureSameFamily: a Categorical mixture of a batch of components of one family."""
from __future__ import annotations

import lucid
from . import constraints
from .categorical import Categorical
from .distribution import Distribution

__all__ = ["MixtureSameFamily"]


class MixtureSameFamily(Distribution):
    """Mixture whose weights are ``mixture_distribution`` (a Categorical over K) and whose
    components are the rightmost batch dim (of size K) of ``component_distribution``.

    Examples
    --------
    >>> import lucid
    >>> from lucid.distributions import Categorical, MixtureSameFamily, Normal
    >>> mix = Categorical(probs=lucid.tensor([0.5, 0.5]))
    >>> comp = Normal(lucid.tensor([-1.0, 1.0]), lucid.tensor([1.0, 1.0]))
    >>> d = MixtureSameFamily(mix, comp)
    >>> d.batch_shape, d.mean.item(), d.variance.item()
    ((), 0.0, 2.0)
    """

    arg_constraints = {}
    has_rsample = False

    def __init__(self, mixture_distribution, component_distribution, validate_args=None):
        if not isinstance(mixture_distribution, Categorical):
            raise ValueError("MixtureSameFamily: the mixture distribution needs to be a Categorical, got "
                             f"{type(mixture_distribution).__name__}")
        if not isinstance(component_distribution, Distribution):
            raise ValueError("MixtureSameFamily: the component distribution needs to be a Distribution, got "
                             f"{type(component_distribution).__name__}")
        self._mixture_distribution = mixture_distribution
        self._component_distribution = component_distribution
        mdbs = mixture_distribution.batch_shape
        if not component_distribution.batch_shape:
            raise ValueError("MixtureSameFamily: the component distribution needs a batch dim of the components")
        cdbs = component_distribution.batch_shape[:-1]
        for size1, size2 in zip(reversed(mdbs), reversed(cdbs)):
            if size1 != 1 and size2 != 1 and size1 != size2:
                raise ValueError(f"MixtureSameFamily: `mixture_distribution.batch_shape` ({mdbs}) is not compatible "
                                 f"with `component_distribution.batch_shape` ({cdbs})")
        km = mixture_distribution.logits.shape[-1]
        kc = component_distribution.batch_shape[-1]
        if km != kc:
            raise ValueError(f"MixtureSameFamily: `mixture_distribution` component ({km}) does not equal "
                             f"`component_distribution.batch_shape[-1]` ({kc})")
        self._num_component = km
        self._event_ndims = len(component_distribution.event_shape)
        super().__init__(cdbs, component_distribution.event_shape, validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        new = self._get_checked_instance(MixtureSameFamily, _instance)
        batch_shape = tuple(batch_shape)
        new._component_distribution = self._component_distribution.expand(batch_shape + (self._num_component,))
        new._mixture_distribution = self._mixture_distribution.expand(batch_shape)
        new._num_component = self._num_component
        new._event_ndims = self._event_ndims
        Distribution.__init__(new, batch_shape, self.event_shape, validate_args=False)
        new._validate_args = self._validate_args
        return new

    @constraints.dependent_property
    def support(self):
        return constraints.MixtureSameFamilyConstraint(self._component_distribution.support)

    @property
    def mixture_distribution(self):
        return self._mixture_distribution

    @property
    def component_distribution(self):
        return self._component_distribution

    def _pad(self, x):
        return x.unsqueeze(-1 - self._event_ndims)

    def _pad_mixture_dimensions(self, x):
        # (..., K) -> (..., K, 1, ..., 1): right-aligned with the components' (..., K, *event).
        return x.reshape(tuple(x.shape) + (1,) * self._event_ndims)

    @property
    def mean(self):
        probs = self._pad_mixture_dimensions(self.mixture_distribution.probs)
        return (probs * self.component_distribution.mean).sum(-1 - self._event_ndims)

    @property
    def variance(self):
        # Law of total variance: E[Var(X | k)] + Var(E[X | k]).
        probs = self._pad_mixture_dimensions(self.mixture_distribution.probs)
        dim = -1 - self._event_ndims
        mean_cond_var = (probs * self.component_distribution.variance).sum(dim)
        var_cond_mean = (probs * (self.component_distribution.mean - self._pad(self.mean)) ** 2).sum(dim)
        return mean_cond_var + var_cond_mean

    def cdf(self, x):
        x = self._pad(x)
        cdf_x = self.component_distribution.cdf(x)
        return (cdf_x * self.mixture_distribution.probs).sum(-1)

    def log_prob(self, x):
        if self._validate_args:
            self._validate_sample(x)
        x = self._pad(x)
        log_prob_x = self.component_distribution.log_prob(x)  # (S, B, K)
        log_mix_prob = lucid.log_softmax(self.mixture_distribution.logits, -1)
        return (log_prob_x + log_mix_prob).logsumexp(-1)

    def sample(self, sample_shape=()):
        with lucid.no_grad():
            sample_shape = tuple(sample_shape) if not isinstance(sample_shape, int) else (sample_shape,)
            gather_dim = len(sample_shape) + len(self.batch_shape)
            es = self.event_shape
            mix_sample = self.mixture_distribution.sample(sample_shape)  # (S, B)
            comp_samples = self.component_distribution.sample(sample_shape)  # (S, B, K, E)
            idx = mix_sample.reshape(tuple(mix_sample.shape) + (1,) * (len(es) + 1))
            idx = idx.expand(tuple(mix_sample.shape) + (1,) + es)
            shape = tuple(comp_samples.shape[:gather_dim]) + (1,) + es
            return comp_samples.gather(gather_dim, idx.expand(shape)).squeeze(gather_dim)

    def __repr__(self):
        return (f"MixtureSameFamily(\n  {self.mixture_distribution!r},\n  {self.component_distribution!r})")
