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


# Statistics and densities built from Lucid ops (composites: the generic checks give them
# gradients, jvp and vmap). Samples include the kink-free points a formula may get wrong:
# probs = 1/2 and logits = 0 for the Bernoulli family (the binary cross-entropy's derivative
# there is sigmoid(0) - t), and the domains where a mean or variance is finite.
def _dist_op(cls, stat, *names):
    import lucid.distributions as D

    def op(*args):  # no validation: the checks perturb a value off {0, 1} (the formula is smooth)
        d = getattr(D, cls)(**dict(zip(names, args[:len(names)])), validate_args=False)
        out = getattr(d, stat)
        return out(*args[len(names):]) if callable(out) else out

    return op


def _half_probs(rng):
    return [Sample((np.array([0.5, 0.2, 0.8]), np.array([1.0, 0.0, 1.0]))),
            Sample((np.array([[0.5], [0.3]]), np.array([0.0, 1.0])), name="broadcast value")]


def _np_bernoulli_log_prob(p, v):
    return v * np.log(p) + (1 - v) * np.log1p(-p)


def _np_bernoulli_entropy(p):
    return -(p * np.log(p) + (1 - p) * np.log1p(-p))


def _np_cb_log_prob(p, v):
    # density of the continuous Bernoulli: C(p) p^v (1 - p)^(1 - v), C(1/2) = 2
    c = np.where(np.abs(p - 0.5) < 1e-3, 2.0, 2 * np.arctanh(np.abs(1 - 2 * p) + 1e-300) / np.abs(1 - 2 * p + 1e-300))
    return np.log(c) + _np_bernoulli_log_prob(p, v)


OPS += [
    OpInfo("dist.Bernoulli.log_prob", _dist_op("Bernoulli", "log_prob", "probs"), _np_bernoulli_log_prob, _half_probs),
    OpInfo("dist.Bernoulli.log_prob_logits", _dist_op("Bernoulli", "log_prob", "logits"),
           lambda l, v: _np_bernoulli_log_prob(special.expit(l), v),
           lambda rng: [Sample((np.array([0.0, -1.5, 2.0]), np.array([1.0, 0.0, 0.0])))]),
    OpInfo("dist.Bernoulli.entropy", _dist_op("Bernoulli", "entropy", "probs"), _np_bernoulli_entropy,
           lambda rng: [Sample((np.array([0.5, 0.2, 0.9]),))]),
    OpInfo("dist.Geometric.entropy", _dist_op("Geometric", "entropy", "probs"),
           lambda p: _np_bernoulli_entropy(p) / p, lambda rng: [Sample((np.array([0.5, 0.2, 0.9]),))]),
    OpInfo("dist.ContinuousBernoulli.log_prob", _dist_op("ContinuousBernoulli", "log_prob", "probs"), _np_cb_log_prob,
           lambda rng: [Sample((np.array([0.5, 0.2, 0.8]), np.array([0.9, 0.3, 0.5])))], atol=1e-6),
    OpInfo("dist.InverseGamma.mean", _dist_op("InverseGamma", "mean", "concentration", "rate"),
           lambda c, r: r / (c - 1), lambda rng: [Sample((positive(rng, 3, low=1.5, high=4.0), positive(rng, 3)))]),
    OpInfo("dist.InverseGamma.variance", _dist_op("InverseGamma", "variance", "concentration", "rate"),
           lambda c, r: r ** 2 / ((c - 1) ** 2 * (c - 2)),
           lambda rng: [Sample((positive(rng, 3, low=2.5, high=5.0), positive(rng, 3)))]),
    OpInfo("dist.StudentT.variance", _dist_op("StudentT", "variance", "df", "loc", "scale"),
           lambda df, loc, s: s ** 2 * df / (df - 2),
           lambda rng: [Sample((positive(rng, 3, low=2.5, high=6.0), floats(rng, 3), positive(rng, 3)))]),
    OpInfo("dist.FisherSnedecor.mean", _dist_op("FisherSnedecor", "mean", "df1", "df2"),
           lambda d1, d2: d2 / (d2 - 2), lambda rng: [Sample((positive(rng, 3), positive(rng, 3, low=2.5, high=6.0)))]),
    OpInfo("dist.FisherSnedecor.variance", _dist_op("FisherSnedecor", "variance", "df1", "df2"),
           lambda d1, d2: 2 * d2 ** 2 * (d1 + d2 - 2) / (d1 * (d2 - 2) ** 2 * (d2 - 4)),
           lambda rng: [Sample((positive(rng, 3), positive(rng, 3, low=4.5, high=8.0)))]),
    OpInfo("dist.FisherSnedecor.mode", _dist_op("FisherSnedecor", "mode", "df1", "df2"),
           lambda d1, d2: (d1 - 2) / d1 * d2 / (d2 + 2),
           lambda rng: [Sample((positive(rng, 3, low=2.5, high=6.0), positive(rng, 3)))]),
    OpInfo("dist.Pareto.mean", _dist_op("Pareto", "mean", "scale", "alpha"),
           lambda s, a: a * s / (a - 1), lambda rng: [Sample((positive(rng, 3), positive(rng, 3, low=1.5, high=4.0)))]),
    OpInfo("dist.Pareto.variance", _dist_op("Pareto", "variance", "scale", "alpha"),
           lambda s, a: s ** 2 * a / ((a - 1) ** 2 * (a - 2)),
           lambda rng: [Sample((positive(rng, 3), positive(rng, 3, low=2.5, high=5.0)))]),
    OpInfo("dist.Dirichlet.mode", _dist_op("Dirichlet", "mode", "concentration"),
           lambda c: (c - 1) / np.sum(c - 1, -1, keepdims=True),
           lambda rng: [Sample((positive(rng, 2, 3, low=1.5, high=4.0),))]),
]
