"""Poisson, Geometric, Binomial, Multinomial: pmfs vs closed forms (math.lgamma) and SciPy,
seeded sample moments, the discrete quantile samplers under vmap, gradients of log_prob."""
import math

import numpy as np
import pytest

import lucid
import lucid.func as F
from lucid.distributions import Binomial, Geometric, Multinomial, Poisson
from lucid.distributions._sampling import binomial_icdf, poisson_icdf

from disthelpers import Z, check_moments, f64

K = np.array([0.0, 1.0, 3.0, 7.0])
LG = np.vectorize(math.lgamma)


def test_poisson_log_prob_and_moments():
    d = Poisson(f64([0.5, 3.0, 12.0]))
    k = f64(K[:, None])
    rate = np.array([0.5, 3.0, 12.0])
    np.testing.assert_allclose(d.log_prob(k).numpy(), K[:, None] * np.log(rate) - rate - LG(K[:, None] + 1), rtol=1e-12)
    s = check_moments(d, n=20000)
    assert (s == np.round(s)).all() and s.min() >= 0
    assert Poisson(f64(0.0)).log_prob(f64(0.0)).item() == 0.0  # xlogy: 0 * log 0 = 0
    assert Poisson(f64(0.0)).sample((3,)).tolist() == [0.0, 0.0, 0.0]
    assert d.mode.tolist() == [0.0, 3.0, 12.0]


def test_geometric():
    p = np.array([0.2, 0.7])
    d = Geometric(probs=f64(p))
    k = f64(K[:, None])
    np.testing.assert_allclose(d.log_prob(k).numpy(), K[:, None] * np.log1p(-p) + np.log(p), rtol=1e-12)
    ent = -(p * np.log(p) + (1 - p) * np.log1p(-p)) / p
    np.testing.assert_allclose(d.entropy().numpy(), ent, rtol=1e-12)
    check_moments(d, n=20000)
    dl = Geometric(logits=f64(np.log(p / (1 - p))))
    np.testing.assert_allclose(dl.log_prob(k).numpy(), d.log_prob(k).numpy(), rtol=1e-10)
    assert Geometric(probs=f64(1.0)).log_prob(f64(0.0)).item() == 0.0
    with pytest.raises(ValueError, match="probs > 0"):
        Geometric(probs=f64(0.0))


def test_binomial():
    n, p = 10.0, np.array([0.1, 0.5, 0.9])
    d = Binomial(n, probs=f64(p))
    k = f64(K[:, None])
    ref = LG(n + 1) - LG(K[:, None] + 1) - LG(n - K[:, None] + 1) + K[:, None] * np.log(p) + (n - K[:, None]) * np.log1p(-p)
    np.testing.assert_allclose(d.log_prob(k).numpy(), ref, rtol=1e-10)
    dl = Binomial(n, logits=f64(np.log(p / (1 - p))))
    np.testing.assert_allclose(dl.log_prob(k).numpy(), ref, rtol=1e-10)
    pmf = np.exp(d.log_prob(d.enumerate_support()).numpy())
    np.testing.assert_allclose(pmf.sum(0), 1.0, rtol=1e-12)
    np.testing.assert_allclose(d.entropy().numpy(), -(pmf * np.log(pmf)).sum(0), rtol=1e-12)
    s = check_moments(d, n=20000)
    assert s.max() <= n and s.min() >= 0
    assert d.mode.tolist() == [1.0, 5.0, 9.0]
    assert Binomial(f64([5.0, 3.0]), probs=f64([0.0, 1.0])).sample((2,)).tolist() == [[0.0, 3.0], [0.0, 3.0]]
    with pytest.raises(NotImplementedError, match="Inhomogeneous"):
        Binomial(f64([5.0, 3.0]), probs=f64(0.5)).entropy()
    with pytest.raises(ValueError, match="total_count"):
        Binomial(f64(-1.0), probs=f64(0.5))
    with pytest.raises(ValueError, match="support"):
        d.log_prob(f64(11.0))


def test_multinomial():
    p = np.array([0.2, 0.3, 0.5])
    d = Multinomial(6, probs=f64(p))
    x = np.array([[1.0, 2.0, 3.0], [6.0, 0.0, 0.0]])
    ref = LG(7) - LG(x + 1).sum(-1) + (x * np.log(p)).sum(-1)
    np.testing.assert_allclose(d.log_prob(f64(x)).numpy(), ref, rtol=1e-12)
    s = check_moments(d, n=5000)
    assert (s.sum(-1) == 6).all()
    # entropy by enumerating every outcome
    outcomes = [(a, b, 6 - a - b) for a in range(7) for b in range(7 - a)]
    lp = d.log_prob(f64(outcomes)).numpy()
    np.testing.assert_allclose(np.exp(lp).sum(), 1.0, rtol=1e-12)
    np.testing.assert_allclose(d.entropy().item(), -(np.exp(lp) * lp).sum(), rtol=1e-12)
    with pytest.raises(NotImplementedError, match="inhomogeneous"):
        Multinomial(f64(3.0), probs=f64(p))
    with pytest.raises(ValueError, match="support"):
        d.log_prob(f64([-1.0, 1.0, 6.0]))
    e = d.expand((2,))
    assert e.batch_shape == (2,) and e.sample().shape == (2, 3)


def test_quantile_samplers_match_scipy():
    stats = pytest.importorskip("scipy.stats")
    u = np.array([1e-12, 0.05, 0.5, 0.95, 1 - 1e-12])
    for rate in (0.3, 4.0, 250.0):
        np.testing.assert_array_equal(poisson_icdf(f64(u), f64(rate)).numpy(), stats.poisson.ppf(u, rate))
    for n, q in ((1, 0.3), (10, 0.5), (40, 0.97)):
        np.testing.assert_array_equal(binomial_icdf(f64(u), f64(n), f64(q)).numpy(), stats.binom.ppf(u, n, q))
    lucid.manual_seed(0)
    s = Poisson(f64(4.0)).sample((4000,)).numpy()
    assert stats.chisquare(*_observed_expected(s, stats.poisson(4.0))).pvalue > 1e-4


def _observed_expected(s, ref, cut=12):
    obs = np.array([(s == k).sum() for k in range(cut)] + [(s >= cut).sum()], dtype=float)
    probs = np.array([ref.pmf(k) for k in range(cut)] + [ref.sf(cut - 1)])
    return obs, probs * len(s)


def test_samplers_under_vmap():
    rates = f64([1.0, 50.0])
    s = F.vmap(lambda r: Poisson(r).sample((500,)), randomness="different")(rates)
    assert s.shape == (2, 500)
    assert abs(s[0].mean().item() - 1) < Z * math.sqrt(1 / 500) and abs(s[1].mean().item() - 50) < Z * math.sqrt(50 / 500)
    same = F.vmap(lambda r: Poisson(r * 0 + 3.0).sample((5,)), randomness="same")(rates)
    assert same[0].tolist() == same[1].tolist()
    with pytest.raises(RuntimeError, match="randomness"):
        F.vmap(lambda r: Binomial(10, probs=r / 100).sample())(rates)
    b = F.vmap(lambda q: Binomial(20, probs=q).sample((3,)), randomness="different")(f64([0.0, 1.0]))
    assert b.tolist() == [[0.0] * 3, [20.0] * 3]


def test_log_prob_gradients():
    k = f64([0.0, 2.0, 5.0])
    g = F.grad(lambda r: Poisson(r).log_prob(k).sum())(f64(2.5))
    np.testing.assert_allclose(g.item(), (k.numpy() / 2.5 - 1).sum(), rtol=1e-12)
    fn = lambda pr: Binomial(8, probs=pr).log_prob(k)
    assert lucid.autograd.gradcheck(fn, (f64([0.3, 0.5, 0.6]).requires_grad_(),))
    fn = lambda lg: Multinomial(6, logits=lg).log_prob(f64([1.0, 2.0, 3.0]))
    assert lucid.autograd.gradcheck(fn, (f64([0.1, -0.3, 0.5]).requires_grad_(),))
    fn = lambda pr: Geometric(probs=pr).log_prob(k)
    assert lucid.autograd.gradgradcheck(fn, (f64([0.3, 0.5, 0.6]).requires_grad_(),))
    out = F.vmap(lambda r: Poisson(r).log_prob(k).sum())(f64([1.0, 2.0]))
    np.testing.assert_allclose(out.numpy(), [Poisson(f64(r)).log_prob(k).sum().item() for r in (1.0, 2.0)], rtol=1e-12)
