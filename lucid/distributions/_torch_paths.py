"""PyTorch's one-module-per-distribution import paths (``torch.distributions.uniform``, ...) as
aliases of the modules that define the distributions here.

NOTE [Distribution module paths]
Lucid groups distributions by family (``normal.py`` holds Normal, Uniform, Exponential, Laplace
and Cauchy), but PyTorch code imports them by PyTorch's module paths, e.g.
``from torch.distributions.uniform import Uniform``. Every such path that is not a real module
here becomes a small module object in ``sys.modules`` (and an attribute of the package) holding
exactly the names of PyTorch's ``__all__`` for it, so ``import``, ``from ... import`` and
attribute access all work. The classes keep their defining module as ``__module__``.
"""
from __future__ import annotations

import sys
import types

# PyTorch 2.13 module name -> its __all__ (only the paths with no real module of that name here)
_PATHS = {
    "bernoulli": ("Bernoulli",), "beta": ("Beta",), "binomial": ("Binomial",), "cauchy": ("Cauchy",),
    "chi2": ("Chi2",), "continuous_bernoulli": ("ContinuousBernoulli",), "dirichlet": ("Dirichlet",),
    "exponential": ("Exponential",), "fishersnedecor": ("FisherSnedecor",), "geometric": ("Geometric",),
    "gumbel": ("Gumbel",), "half_cauchy": ("HalfCauchy",), "half_normal": ("HalfNormal",),
    "independent": ("Independent",), "inverse_gamma": ("InverseGamma",), "kumaraswamy": ("Kumaraswamy",),
    "laplace": ("Laplace",), "lkj_cholesky": ("LKJCholesky",), "log_normal": ("LogNormal",),
    "logistic_normal": ("LogisticNormal",), "lowrank_multivariate_normal": ("LowRankMultivariateNormal",),
    "mixture_same_family": ("MixtureSameFamily",), "multinomial": ("Multinomial",),
    "negative_binomial": ("NegativeBinomial",),
    "one_hot_categorical": ("OneHotCategorical", "OneHotCategoricalStraightThrough"), "pareto": ("Pareto",),
    "poisson": ("Poisson",), "relaxed_bernoulli": ("LogitRelaxedBernoulli", "RelaxedBernoulli"),
    "relaxed_categorical": ("ExpRelaxedCategorical", "RelaxedOneHotCategorical"), "studentT": ("StudentT",),
    "uniform": ("Uniform",), "weibull": ("Weibull",), "wishart": ("Wishart",),
}


def install(package_name):
    """Register the alias modules of the (already imported) package ``lucid.distributions``."""
    package = sys.modules[package_name]
    for name, names in _PATHS.items():
        full = f"{package.__name__}.{name}"
        mod = types.ModuleType(full, f"PyTorch's module path ``torch.distributions.{name}``: "
                                     f"{', '.join(names)} (see NOTE [Distribution module paths]).")
        for n in names:
            setattr(mod, n, getattr(package, n))
        mod.__all__ = list(names)
        sys.modules[full] = mod
        setattr(package, name, mod)
