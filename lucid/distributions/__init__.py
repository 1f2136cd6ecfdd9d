"""Probability distributions with PyTorch's names and semantics (``torch.distributions``).

Every distribution has ``sample``/``rsample`` (reparameterised where ``has_rsample``),
``log_prob``, ``entropy``, ``mean``/``mode``/``variance``/``stddev``, ``batch_shape`` and
``event_shape``, ``expand``, ``support`` and ``arg_constraints``; ``validate_args`` checks
parameters and values with errors that name the parameter and the constraint. Everything is
written with lucid ops, so densities and reparameterised samples are differentiable and
work under ``lucid.func.grad``/``jvp``/``vmap`` (sampling follows vmap's ``randomness``).

Examples
--------
>>> import lucid
>>> from lucid.distributions import Normal, kl_divergence
>>> _ = lucid.manual_seed(0)
>>> loc = lucid.tensor([0.0, 1.0], requires_grad=True)
>>> d = Normal(loc, 1.0)
>>> x = d.rsample((4,))
>>> x.shape
(4, 2)
>>> d.log_prob(x).sum().backward()
>>> kl_divergence(Normal(0.0, 1.0), Normal(0.0, 2.0)).item() > 0
True
"""
from . import constraints, transforms
from .counts import Binomial, Geometric, Multinomial, Poisson
from .categorical import Bernoulli, Categorical, OneHotCategorical, OneHotCategoricalStraightThrough
from .constraint_registry import biject_to, transform_to
from .distribution import Distribution
from .exp_family import ExponentialFamily
from .generalized_pareto import GeneralizedPareto
from .gamma import (Beta, Chi2, Dirichlet, FisherSnedecor, Gamma, InverseGamma, Kumaraswamy, NegativeBinomial,
                    StudentT)
from .kl import kl_divergence, register_kl
from .matrix import LKJCholesky, Wishart
from .mixture import MixtureSameFamily
from .multivariate_normal import LowRankMultivariateNormal, MultivariateNormal
from .normal import Cauchy, Exponential, Laplace, Normal, Uniform
from .relaxed import (ContinuousBernoulli, ExpRelaxedCategorical, LogitRelaxedBernoulli, RelaxedBernoulli,
                      RelaxedOneHotCategorical)
from .transformed_distribution import (Gumbel, HalfCauchy, HalfNormal, Independent, LogisticNormal, LogNormal,
                                       Pareto, TransformedDistribution, Weibull)
from .von_mises import VonMises
from .transforms import *  # noqa: F401,F403
from . import _torch_paths

__all__ = [
    "Bernoulli", "Beta", "Binomial", "Categorical", "Cauchy", "Chi2", "ContinuousBernoulli", "Dirichlet",
    "Distribution", "ExpRelaxedCategorical", "Exponential", "ExponentialFamily", "FisherSnedecor", "Gamma", "GeneralizedPareto", "Geometric", "Gumbel",
    "HalfCauchy", "HalfNormal", "Independent", "InverseGamma", "Kumaraswamy", "LKJCholesky", "Laplace",
    "LogNormal", "LogisticNormal", "LogitRelaxedBernoulli", "LowRankMultivariateNormal", "MixtureSameFamily",
    "Multinomial", "MultivariateNormal", "NegativeBinomial", "Normal", "OneHotCategorical", "Poisson",
    "RelaxedBernoulli", "RelaxedOneHotCategorical", "StudentT", "VonMises", "Wishart", "biject_to",
    "transform_to",
    "OneHotCategoricalStraightThrough", "Pareto", "TransformedDistribution", "Uniform", "Weibull",
    "constraints", "kl_divergence", "register_kl", "transforms",
] + transforms.__all__

_torch_paths.install(__name__)  # NOTE [Distribution module paths]
