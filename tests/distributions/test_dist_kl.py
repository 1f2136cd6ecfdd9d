"""kl_divergence: every registered closed form against a seeded Monte Carlo estimate
(tolerance from its standard error) and, with SciPy, numerical integration; dispatch."""
import math

import numpy as np
import pytest

import lucid
import lucid.func as F
from lucid.distributions import (Beta, Dirichlet, Gamma, Bernoulli, Binomial, Categorical, Cauchy, Distribution, Exponential,
                                 Geometric, Gumbel, HalfNormal, Independent, Laplace, LogNormal,
                                 LowRankMultivariateNormal, MultivariateNormal, Normal, OneHotCategorical,
                                 Pareto, Poisson, Uniform, kl_divergence, register_kl)

from disthelpers import Z, f64

PAIRS = {
    "normal-normal": (lambda: Normal(f64([0.0, 1.0]), f64([1.0, 0.5])), lambda: Normal(f64([0.5, -1.0]), f64([2.0, 1.5]))),
    "laplace-laplace": (lambda: Laplace(f64(0.2), f64(1.0)), lambda: Laplace(f64(-0.3), f64(2.0))),
    "cauchy-cauchy": (lambda: Cauchy(f64(0.2), f64(1.0)), lambda: Cauchy(f64(-0.3), f64(2.0))),
    "exponential-exponential": (lambda: Exponential(f64(1.5)), lambda: Exponential(f64(0.5))),
    "uniform-uniform": (lambda: Uniform(f64(0.0), f64(1.0)), lambda: Uniform(f64(-1.0), f64(2.0))),
    "halfnormal-halfnormal": (lambda: HalfNormal(f64(1.0)), lambda: HalfNormal(f64(2.0))),
    "lognormal-lognormal": (lambda: LogNormal(f64(0.1), f64(0.5)), lambda: LogNormal(f64(0.3), f64(0.8))),
    "pareto-pareto": (lambda: Pareto(f64(1.5), f64(3.0)), lambda: Pareto(f64(1.0), f64(2.0))),
    "bernoulli-bernoulli": (lambda: Bernoulli(probs=f64([0.3, 0.9])), lambda: Bernoulli(probs=f64([0.6, 0.5]))),
    "categorical-categorical": (lambda: Categorical(probs=f64([0.2, 0.3, 0.5])), lambda: Categorical(probs=f64([0.4, 0.4, 0.2]))),
    "onehot-onehot": (lambda: OneHotCategorical(probs=f64([0.2, 0.3, 0.5])), lambda: OneHotCategorical(probs=f64([0.4, 0.4, 0.2]))),
    "independent-independent": (lambda: Independent(Normal(f64([0.0, 1.0]), f64([1.0, 0.5])), 1),
                                lambda: Independent(Normal(f64([0.5, -1.0]), f64([2.0, 1.5])), 1)),
    "uniform-normal": (lambda: Uniform(f64(0.0), f64(2.0)), lambda: Normal(f64(0.5), f64(1.5))),
    "uniform-exponential": (lambda: Uniform(f64(0.5), f64(2.0)), lambda: Exponential(f64(1.5))),
    "uniform-gumbel": (lambda: Uniform(f64(0.0), f64(2.0)), lambda: Gumbel(f64(0.5), f64(1.5))),
    "normal-gumbel": (lambda: Normal(f64(0.2), f64(1.0)), lambda: Gumbel(f64(0.5), f64(1.5))),
    "normal-laplace": (lambda: Normal(f64(0.2), f64(1.0)), lambda: Laplace(f64(0.5), f64(1.5))),
    "exponential-normal": (lambda: Exponential(f64(1.5)), lambda: Normal(f64(0.5), f64(1.5))),
    "exponential-gumbel": (lambda: Exponential(f64(1.5)), lambda: Gumbel(f64(0.5), f64(1.5))),
    "laplace-normal": (lambda: Laplace(f64(0.2), f64(1.0)), lambda: Normal(f64(0.5), f64(1.5))),
    "gumbel-normal": (lambda: Gumbel(f64(0.2), f64(1.0)), lambda: Normal(f64(0.5), f64(1.5))),
    "poisson-poisson": (lambda: Poisson(f64([0.5, 4.0])), lambda: Poisson(f64([1.5, 3.0]))),
    "geometric-geometric": (lambda: Geometric(probs=f64([0.3, 0.8])), lambda: Geometric(probs=f64([0.5, 0.6]))),
    "binomial-binomial": (lambda: Binomial(8, probs=f64([0.3, 0.8])), lambda: Binomial(8, probs=f64([0.5, 0.6]))),
    "bernoulli-poisson": (lambda: Bernoulli(probs=f64([0.3, 0.8])), lambda: Poisson(f64([0.5, 2.0]))),
    "gamma-gamma": (lambda: Gamma(f64([2.0, 0.7]), f64([1.5, 1.0])), lambda: Gamma(f64([3.0, 1.2]), f64([1.0, 2.0]))),
    "beta-beta": (lambda: Beta(f64(2.0), f64(3.0)), lambda: Beta(f64(1.5), f64(1.0))),
    "dirichlet-dirichlet": (lambda: Dirichlet(f64([2.0, 3.0, 1.5])), lambda: Dirichlet(f64([1.0, 2.0, 2.5]))),
    "gumbel-gumbel": (lambda: Gumbel(f64(0.2), f64(1.0)), lambda: Gumbel(f64(-0.3), f64(2.0))),
    "gamma-normal": (lambda: Gamma(f64(2.0), f64(1.5)), lambda: Normal(f64(0.5), f64(1.5))),
    "beta-normal": (lambda: Beta(f64(2.0), f64(3.0)), lambda: Normal(f64(0.5), f64(1.5))),
    "exponential-gamma": (lambda: Exponential(f64(1.5)), lambda: Gamma(f64(2.0), f64(1.5))),
    "gamma-exponential": (lambda: Gamma(f64(2.0), f64(1.5)), lambda: Exponential(f64(0.7))),
    "gamma-gumbel": (lambda: Gamma(f64(2.0), f64(1.5)), lambda: Gumbel(f64(0.5), f64(1.5))),
    "beta-exponential": (lambda: Beta(f64(2.0), f64(3.0)), lambda: Exponential(f64(0.7))),
    "beta-gamma": (lambda: Beta(f64(2.0), f64(3.0)), lambda: Gamma(f64(2.0), f64(1.5))),
    "beta-uniform": (lambda: Beta(f64(2.0), f64(3.0)), lambda: Uniform(f64(-0.5), f64(1.5))),
    "mvn-mvn": (lambda: MultivariateNormal(f64([0.0, 1.0]), covariance_matrix=f64([[2.0, 0.5], [0.5, 1.0]])),
                lambda: MultivariateNormal(f64([[0.5, 0.0], [0.0, 0.0]]), scale_tril=f64([[1.5, 0.0], [-0.3, 0.8]]))),
    "lowrank-mvn": (lambda: LowRankMultivariateNormal(f64([0.0, 1.0]), f64([[1.0], [0.5]]), f64([0.5, 1.0])),
                    lambda: MultivariateNormal(f64([0.5, 0.0]), precision_matrix=f64([[1.0, 0.2], [0.2, 2.0]]))),
}


@pytest.mark.parametrize("name", sorted(PAIRS))
def test_kl_matches_monte_carlo(name):
    p, q = (f() for f in PAIRS[name])
    kl = kl_divergence(p, q).numpy()
    assert kl.shape == np.broadcast_shapes(p.batch_shape, q.batch_shape)
    p = p.expand(kl.shape)  # samples of every batch entry of the pair
    lucid.manual_seed(0)
    n = 20000
    x = p.sample((n,))
    r = (p.log_prob(x) - q.log_prob(x)).numpy()
    se = r.std(0) / math.sqrt(n)
    np.testing.assert_array_less(np.abs(r.mean(0) - kl), Z * se + 1e-12)
    assert (kl >= -1e-12).all()


CONTINUOUS = [k for k in PAIRS if k.split("-")[0] not in ("bernoulli", "categorical", "onehot", "independent",
                                                          "poisson", "geometric", "binomial", "mvn", "lowrank",
                                                          "dirichlet")
              and not PAIRS[k][0]().batch_shape]


@pytest.mark.parametrize("name", CONTINUOUS)
def test_kl_matches_numerical_integration(name):
    integrate = pytest.importorskip("scipy.integrate")
    p, q = (f() for f in PAIRS[name])
    lo, hi = -np.inf, np.inf
    if isinstance(p, Uniform):
        lo, hi = p.low.item(), p.high.item()
    elif isinstance(p, (Exponential, HalfNormal, LogNormal, Gamma)):
        lo = 0.0
    elif isinstance(p, Beta):
        lo, hi = 0.0, 1.0
    elif isinstance(p, Pareto):
        lo = p.scale.item()

    def integrand(x):
        v = f64(x)
        lp, lq = p.log_prob(v).item(), q.log_prob(v).item()
        return 0.0 if lp < -700 else math.exp(lp) * (lp - lq)  # p underflows: no mass there

    with np.errstate(over="ignore"):
        val, _ = integrate.quad(integrand, lo, hi, limit=200)
    np.testing.assert_allclose(kl_divergence(p, q).item(), val, rtol=1e-6, atol=1e-8)


def test_kl_infinite_and_zero_cases():
    assert math.isinf(kl_divergence(Normal(0.0, 1.0), Exponential(1.0)).item())
    assert math.isinf(kl_divergence(Normal(0.0, 1.0), Uniform(-1.0, 1.0)).item())
    assert math.isinf(kl_divergence(Uniform(-1.0, 2.0), Uniform(0.0, 1.0)).item())
    assert math.isinf(kl_divergence(Uniform(-1.0, 2.0), Exponential(1.0)).item())
    assert math.isinf(kl_divergence(Bernoulli(probs=f64(0.5)), Bernoulli(probs=f64(0.0))).item())
    assert kl_divergence(Bernoulli(probs=f64(0.0)), Bernoulli(probs=f64(0.5))).item() == pytest.approx(math.log(2))
    assert math.isinf(kl_divergence(Categorical(probs=f64([0.5, 0.5])), Categorical(probs=f64([1.0, 0.0]))).item())
    np.testing.assert_allclose(kl_divergence(Normal(f64(0.3), f64(2.0)), Normal(f64(0.3), f64(2.0))).item(), 0.0, atol=1e-15)
    assert math.isinf(kl_divergence(Poisson(f64(1.0)), Bernoulli(probs=f64(0.5))).item())
    assert math.isinf(kl_divergence(Beta(f64(2.0), f64(2.0)), Uniform(f64(0.1), f64(1.0))).item())
    assert math.isinf(kl_divergence(Normal(f64(0.0), f64(1.0)), Gamma(f64(2.0), f64(1.0))).item())
    assert math.isinf(kl_divergence(Gamma(f64(2.0), f64(1.0)), Beta(f64(2.0), f64(1.0))).item())
    assert math.isinf(kl_divergence(Binomial(9, probs=f64(0.5)), Binomial(8, probs=f64(0.5))).item())
    with pytest.raises(NotImplementedError, match="q.total_count > p.total_count"):
        kl_divergence(Binomial(7, probs=f64(0.5)), Binomial(8, probs=f64(0.5)))


def test_kl_gradient_and_vmap():
    def kl(m, s):
        return kl_divergence(Normal(m, s), Normal(f64(0.0), f64(1.0)))

    m, s = f64(0.7), f64(1.3)
    gm, gs = F.grad(kl, argnums=(0, 1))(m, s)
    np.testing.assert_allclose([gm.item(), gs.item()], [0.7, 1.3 - 1 / 1.3], rtol=1e-12)
    ms = f64([0.0, 1.0, 2.0])
    np.testing.assert_allclose(F.vmap(lambda a: kl(a, s))(ms).numpy(), [kl(a, s).item() for a in ms.numpy()], rtol=1e-12)


def test_register_kl_dispatch_and_errors():
    class A(Normal):
        pass

    class B(A):
        pass

    @register_kl(A, Normal)
    def _a_normal(p, q):
        return lucid.full(p.batch_shape, 1.0)

    @register_kl(B, Normal)
    def _b_normal(p, q):
        return lucid.full(p.batch_shape, 2.0)

    assert kl_divergence(A(0.0, 1.0), Normal(0.0, 1.0)).item() == 1.0
    assert kl_divergence(B(0.0, 1.0), Normal(0.0, 1.0)).item() == 2.0  # most specific wins
    assert kl_divergence(Normal(0.0, 1.0), A(0.0, 2.0)).item() > 0  # falls back to (Normal, Normal)

    class C(Distribution):
        arg_constraints = {}

    with pytest.raises(NotImplementedError, match="No KL.*C.*Normal"):
        kl_divergence(C(), Normal(0.0, 1.0))
    with pytest.raises(TypeError, match="register_kl"):
        register_kl(int, Normal)
    with pytest.raises(NotImplementedError, match="transforms differ"):
        from lucid.distributions import TransformedDistribution
        from lucid.distributions.transforms import ExpTransform, SigmoidTransform
        kl_divergence(TransformedDistribution(Normal(0.0, 1.0), ExpTransform()),
                      TransformedDistribution(Normal(0.0, 1.0), SigmoidTransform()))
