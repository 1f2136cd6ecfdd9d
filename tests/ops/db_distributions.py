"""Op database entries for the primitives of lucid.distributions.

``poisson_icdf`` / ``binomial_icdf`` (lucid/distributions/_sampling.py) are the discrete
quantile functions the samplers apply to uniform noise: no gradient, elementwise batching.
Noise stays in (0.05, 0.85) because the vmap check scales examples up by 10 %.
"""
import numpy as np
from scipy import special, stats

from lucid.distributions._gamma import standard_gamma
from lucid.distributions._sampling import binomial_icdf, poisson_icdf
from opinfo import OpInfo, Sample, floats, positive


def _u(rng, *shape):
    return floats(rng, *shape, low=0.05, high=0.85)


def _poisson_samples(rng):
    return [Sample((_u(rng, 2, 3), positive(rng, 2, 3, low=0.5, high=20.0))),
            Sample((_u(rng, 4), positive(rng, low=1.0, high=3.0)), name="scalar rate"),
            Sample((_u(rng, 2, 1), positive(rng, 3)), name="broadcast"),
            Sample((_u(rng, 3), 4.5), name="python scalar rate")]


def _binomial_samples(rng):
    n = np.array([1, 5, 40], dtype=np.int64)
    return [Sample((_u(rng, 2, 3), n, floats(rng, 2, 3, low=0.1, high=0.8))),
            Sample((_u(rng, 4), 10.0, floats(rng, 4, low=0.1, high=0.8)), name="python scalar n"),
            Sample((_u(rng, 3), n, 0.5), name="python scalar p")]


OPS = [
    OpInfo("poisson_icdf", poisson_icdf, lambda u, r: stats.poisson.ppf(u, r), _poisson_samples, grad=False),
    OpInfo("binomial_icdf", binomial_icdf, lambda u, n, p: stats.binom.ppf(u, n, p), _binomial_samples, grad=False),
]


# standard_gamma(alpha, u): the forward is exact (SciPy's gammaincinv); d/dalpha is PyTorch's
# approximation of the implicit derivative, good to ~1e-3 relative, hence grad_rtol (see
# tests/distributions/test_dist_gamma.py for the exact comparison). Alphas span the three
# regimes of the formula (small x, the rational fit, alpha > 8).
def _gamma_samples(rng):
    return [Sample((positive(rng, 2, 3, low=0.5, high=5.0), _u(rng, 2, 3))),
            Sample((positive(rng, 3, low=9.0, high=30.0), _u(rng, 3)), name="large alpha"),
            Sample((positive(rng, 3, low=0.3, high=2.0), _u(rng, 2, 1)), name="broadcast"),
            Sample((positive(rng, 2, low=1.0, high=3.0), 0.4), name="python scalar u")]


OPS.append(OpInfo("standard_gamma", standard_gamma, lambda a, u: special.gammaincinv(a, u), _gamma_samples,
                  grad_rtol=5e-3, grad_atol=1e-6))


# von_mises_sample(concentration, key): a rejection sampler driven by a per-element counter-based
# generator seeded by the key (NOTE [Von Mises sampler]); no NumPy reference (its distribution is
# tested in tests/distributions/test_dist_others.py), but the vmap checks prove that a batched
# call equals a loop, i.e. each draw depends only on its own (concentration, key).
def _von_mises_samples(rng):
    return [Sample((positive(rng, 2, 3, low=0.1, high=50.0), _u(rng, 2, 3))),
            Sample((positive(rng, low=1.0, high=3.0), _u(rng, 4)), name="scalar concentration"),
            Sample((2.0, _u(rng, 3)), name="python scalar concentration")]


def _von_mises(concentration, key):
    from lucid._core.primitive import bind
    from lucid.distributions.von_mises import von_mises_sample_p

    return bind(von_mises_sample_p, (concentration, key), {})


OPS.append(OpInfo("von_mises_sample", _von_mises, None, _von_mises_samples, grad=False))
