"""PyTorch's rarer cross-family KL pairs (ContinuousBernoulli, Pareto and Uniform against other
families): closed forms against numerical integration and seeded Monte Carlo in float64, the
infinite cases, gradients, and PyTorch (registry coverage and values) when it is installed."""
import math
import warnings

import numpy as np
import pytest

import lucid
import lucid.distributions as D
from lucid.distributions import (Beta, Cauchy, ContinuousBernoulli, Exponential, Gamma, Gumbel, Laplace, Normal,
                                 Pareto, Uniform, kl_divergence)

from disthelpers import Z, f64


def CB(p):
    return ContinuousBernoulli(probs=f64(p))


PAIRS = {
    "beta-cb": (lambda: Beta(f64(2.0), f64(3.0)), lambda: CB(0.3)),
    "uniform-cb": (lambda: Uniform(f64(0.1), f64(0.8)), lambda: CB(0.7)),
    "uniform01-cb": (lambda: Uniform(f64(0.0), f64(1.0)), lambda: CB(0.7)),
    "cb-exponential": (lambda: CB(0.3), lambda: Exponential(f64(1.5))),
    "cb-normal": (lambda: CB(0.8), lambda: Normal(f64(0.5), f64(1.5))),
    "cb-uniform": (lambda: CB(0.3), lambda: Uniform(f64(-0.5), f64(1.5))),
    "cb-uniform01": (lambda: CB(0.3), lambda: Uniform(f64(0.0), f64(1.0))),
    "pareto-exponential": (lambda: Pareto(f64(1.5), f64(3.0)), lambda: Exponential(f64(0.7))),
    "pareto-gamma": (lambda: Pareto(f64(1.5), f64(3.0)), lambda: Gamma(f64(2.0), f64(1.5))),
    "pareto-normal": (lambda: Pareto(f64(1.5), f64(3.5)), lambda: Normal(f64(2.0), f64(1.5))),
    "uniform-beta": (lambda: Uniform(f64(0.2), f64(0.9)), lambda: Beta(f64(2.0), f64(3.0))),
    "uniform01-beta": (lambda: Uniform(f64(0.0), f64(1.0)), lambda: Beta(f64(2.0), f64(3.0))),
    "uniform-gamma": (lambda: Uniform(f64(0.5), f64(2.0)), lambda: Gamma(f64(2.0), f64(1.5))),
    "uniform0-gamma": (lambda: Uniform(f64(0.0), f64(2.0)), lambda: Gamma(f64(0.7), f64(1.5))),
    "uniform-pareto": (lambda: Uniform(f64(1.5), f64(3.0)), lambda: Pareto(f64(1.0), f64(2.0))),
}
# PyTorch calls KL(Uniform(0, 1) || ContinuousBernoulli) and KL(ContinuousBernoulli || Uniform(0, 1))
# infinite (it tests low >= 0 and high <= 1 instead of low > 0, high < 1); both are finite.
NOT_LIKE_TORCH = {"uniform01-cb", "cb-uniform01"}


def _support(p):
    if isinstance(p, Uniform):
        return p.low.item(), p.high.item()
    if isinstance(p, (Beta, ContinuousBernoulli)):
        return 0.0, 1.0
    return p.scale.item(), np.inf  # Pareto


@pytest.mark.parametrize("name", sorted(PAIRS))
def test_cross_kl_matches_numerical_integration(name):
    integrate = pytest.importorskip("scipy.integrate")
    p, q = (f() for f in PAIRS[name])

    def integrand(x):
        v = f64(x)
        lp, lq = p.log_prob(v).item(), q.log_prob(v).item()
        return 0.0 if lp < -700 else math.exp(lp) * (lp - lq)

    lo, hi = _support(p)
    with np.errstate(over="ignore", divide="ignore"):
        val, _ = integrate.quad(integrand, lo, hi, limit=200)
    kl = kl_divergence(p, q)
    assert kl.dtype == lucid.float64
    np.testing.assert_allclose(kl.item(), val, rtol=1e-7, atol=1e-9)


@pytest.mark.parametrize("name", sorted(PAIRS))
def test_cross_kl_matches_monte_carlo(name):
    p, q = (f() for f in PAIRS[name])
    kl = kl_divergence(p, q).item()
    lucid.manual_seed(0)
    n = 20000
    x = p.sample((n,))
    r = (p.log_prob(x) - q.log_prob(x)).numpy()
    assert abs(r.mean() - kl) < Z * r.std() / math.sqrt(n) + 1e-12
    assert kl >= 0


@pytest.mark.parametrize("name", sorted(set(PAIRS) - NOT_LIKE_TORCH))
def test_cross_kl_matches_torch(name):
    torch = pytest.importorskip("torch")
    p, q = (f() for f in PAIRS[name])

    def to_torch(d):
        TD = torch.distributions
        t = lambda v: torch.tensor(v.numpy())  # noqa: E731
        if isinstance(d, ContinuousBernoulli):
            return TD.ContinuousBernoulli(probs=t(d.probs))
        names = {Beta: ("concentration1", "concentration0"), Uniform: ("low", "high"), Exponential: ("rate",),
                 Gamma: ("concentration", "rate"), Normal: ("loc", "scale"), Pareto: ("scale", "alpha")}[type(d)]
        return getattr(TD, type(d).__name__)(*(t(getattr(d, a)) for a in names))

    np.testing.assert_allclose(kl_divergence(p, q).item(), torch.distributions.kl_divergence(to_torch(p), to_torch(q)).item(),
                               rtol=1e-10, atol=1e-12)


def test_every_torch_kl_pair_is_registered():
    torch = pytest.importorskip("torch")
    from torch.distributions.kl import _KL_REGISTRY as TORCH_REGISTRY
    from lucid.distributions.kl import _KL_REGISTRY

    ours = {(p.__name__, q.__name__) for p, q in _KL_REGISTRY}
    missing = sorted((p.__name__, q.__name__) for p, q in TORCH_REGISTRY if (p.__name__, q.__name__) not in ours)
    assert missing == []


INFINITE = [
    (lambda: Beta(f64(2.0), f64(3.0)), lambda: Pareto(f64(1.0), f64(2.0))),
    (lambda: CB(0.3), lambda: Pareto(f64(1.0), f64(2.0))),
    (lambda: Pareto(f64(1.0), f64(2.0)), lambda: Beta(f64(2.0), f64(3.0))),
    (lambda: Pareto(f64(1.0), f64(2.0)), lambda: CB(0.3)),
    (lambda: Pareto(f64(1.0), f64(2.0)), lambda: Uniform(f64(0.0), f64(5.0))),
    (lambda: Exponential(f64(1.0)), lambda: CB(0.3)),
    (lambda: Gamma(f64(2.0), f64(1.0)), lambda: CB(0.3)),
    (lambda: Gumbel(f64(0.0), f64(1.0)), lambda: CB(0.3)),
    (lambda: Laplace(f64(0.0), f64(1.0)), lambda: CB(0.3)),
    (lambda: Normal(f64(0.0), f64(1.0)), lambda: CB(0.3)),
    (lambda: Cauchy(f64(0.0), f64(1.0)), lambda: CB(0.3)),
    (lambda: Uniform(f64(-0.1), f64(0.5)), lambda: CB(0.3)),
    (lambda: Uniform(f64(0.1), f64(1.2)), lambda: CB(0.3)),
    (lambda: CB(0.3), lambda: Uniform(f64(0.1), f64(1.0))),
    (lambda: CB(0.3), lambda: Uniform(f64(0.0), f64(0.9))),
    (lambda: Uniform(f64(-0.1), f64(0.5)), lambda: Beta(f64(2.0), f64(3.0))),
    (lambda: Uniform(f64(0.5), f64(1.5)), lambda: Beta(f64(2.0), f64(3.0))),
    (lambda: Uniform(f64(-2.0), f64(-1.0)), lambda: Gamma(f64(2.0), f64(1.0))),
    (lambda: Uniform(f64(0.5), f64(3.0)), lambda: Pareto(f64(1.0), f64(2.0))),
    (lambda: Pareto(f64(1.0), f64(1.0)), lambda: Exponential(f64(1.0))),
    (lambda: Pareto(f64(1.0), f64(0.5)), lambda: Gamma(f64(2.0), f64(1.0))),
    (lambda: Pareto(f64(1.0), f64(2.0)), lambda: Normal(f64(0.0), f64(1.0))),
]


@pytest.mark.parametrize("i", range(len(INFINITE)))
def test_cross_kl_infinite_cases(i):
    p, q = INFINITE[i][0](), INFINITE[i][1]()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the masked branch must not divide by zero or take log(< 0)
        kl = kl_divergence(p, q)
    assert kl.shape == () and math.isinf(kl.item()) and kl.item() > 0


def test_infinite_kl_has_the_pairs_batch_shape():
    kl = kl_divergence(Normal(f64(np.zeros(3)), f64(1.0)), ContinuousBernoulli(probs=f64([[0.3], [0.6]])))
    assert kl.shape == (2, 3) and np.isposinf(kl.numpy()).all()
    kl = kl_divergence(Pareto(f64([[1.0], [2.0]]), f64(2.0)), Uniform(f64(0.0), f64([1.0, 2.0, 3.0])))
    assert kl.shape == (2, 3) and np.isposinf(kl.numpy()).all()


def test_cross_kl_batched_mixed_finite_and_infinite_with_clean_gradients():
    # one entry finite, one infinite: the infinite entry must not poison the gradient of the other
    alpha = f64([3.0, 0.8]).requires_grad_()
    scale = f64([1.5, 1.5])
    kl = kl_divergence(Pareto(scale, alpha), Exponential(f64(0.7)))
    assert math.isfinite(kl[0].item()) and math.isinf(kl[1].item())
    (g,) = lucid.autograd.grad(kl[0], [alpha])
    eps = 1e-6
    k = lambda a: kl_divergence(Pareto(f64(1.5), f64(a)), Exponential(f64(0.7))).item()  # noqa: E731
    np.testing.assert_allclose(g.numpy(), [(k(3.0 + eps) - k(3.0 - eps)) / (2 * eps), 0.0], rtol=1e-6, atol=1e-12)
    low = f64([0.2, -0.3]).requires_grad_()
    kl = kl_divergence(Uniform(low, f64([0.9, 0.9])), Beta(f64(2.0), f64(3.0)))
    assert math.isfinite(kl[0].item()) and math.isinf(kl[1].item())
    (g,) = lucid.autograd.grad(kl[0], [low])
    k = lambda lo: kl_divergence(Uniform(f64(lo), f64(0.9)), Beta(f64(2.0), f64(3.0))).item()  # noqa: E731
    np.testing.assert_allclose(g.numpy(), [(k(0.2 + eps) - k(0.2 - eps)) / (2 * eps), 0.0], rtol=1e-6, atol=1e-12)


def test_cross_kl_under_vmap_and_grad():
    F = lucid.func
    conc = f64([1.5, 2.0, 3.0])

    def kl(c):
        return kl_divergence(Uniform(f64(0.5), f64(2.0)), Gamma(c, f64(1.5)))

    np.testing.assert_allclose(F.vmap(kl)(conc).numpy(), [kl(f64(c)).item() for c in conc.numpy()], rtol=1e-12)
    g = F.grad(lambda pr: kl_divergence(CB(0.3), Normal(pr, f64(1.5))))(f64(0.5))
    eps = 1e-6
    k = lambda m: kl_divergence(CB(0.3), Normal(f64(m), f64(1.5))).item()  # noqa: E731
    np.testing.assert_allclose(g.item(), (k(0.5 + eps) - k(0.5 - eps)) / (2 * eps), rtol=1e-6)
