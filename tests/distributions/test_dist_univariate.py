"""Univariate continuous distributions: log_prob/cdf/icdf/entropy against closed forms
(written here in NumPy) and SciPy, moments of seeded samples, rsample gradients against
the implicit-reparameterisation formula, and grad/vmap over log_prob."""
import math

import numpy as np
import pytest

import lucid
import lucid.func as F
from lucid.distributions import (Cauchy, Exponential, Gumbel, HalfCauchy, HalfNormal, Laplace,
                                 LogNormal, Normal, Pareto, Uniform, Weibull)

from disthelpers import check_moments, f64, implicit_grad, per_sample_param

EG = 0.57721566490153286060
SQ2PI = math.log(math.sqrt(2 * math.pi))

# name -> (constructor of float64 params, NumPy log-density, NumPy cdf, entropy, points)
CASES = {
    "normal": (lambda a, b: Normal(a, b), (0.5, 2.0),
               lambda x, m, s: -((x - m) ** 2) / (2 * s * s) - np.log(s) - SQ2PI,
               lambda x, m, s: 0.5 * (1 + np.vectorize(math.erf)((x - m) / (s * math.sqrt(2)))),
               lambda m, s: 0.5 + SQ2PI + math.log(s), [-1.0, 0.3, 2.0]),
    "laplace": (lambda a, b: Laplace(a, b), (0.5, 2.0),
                lambda x, m, s: -np.log(2 * s) - np.abs(x - m) / s,
                lambda x, m, s: np.where(x < m, 0.5 * np.exp((x - m) / s), 1 - 0.5 * np.exp(-(x - m) / s)),
                lambda m, s: 1 + math.log(2 * s), [-1.0, 0.3, 2.0]),
    "cauchy": (lambda a, b: Cauchy(a, b), (0.5, 2.0),
               lambda x, m, s: -np.log(np.pi * s * (1 + ((x - m) / s) ** 2)),
               lambda x, m, s: np.arctan((x - m) / s) / np.pi + 0.5,
               lambda m, s: math.log(4 * math.pi * s), [-1.0, 0.3, 2.0]),
    "gumbel": (lambda a, b: Gumbel(a, b), (0.5, 2.0),
               lambda x, m, s: -np.log(s) - (x - m) / s - np.exp(-(x - m) / s),
               lambda x, m, s: np.exp(-np.exp(-(x - m) / s)),
               lambda m, s: math.log(s) + 1 + EG, [-1.0, 0.3, 2.0]),
    "uniform": (lambda a, b: Uniform(a, b), (-2.0, 3.0),
                lambda x, lo, hi: np.where((x >= lo) & (x < hi), -np.log(hi - lo), -np.inf),
                lambda x, lo, hi: np.clip((x - lo) / (hi - lo), 0, 1),
                lambda lo, hi: math.log(hi - lo), [-1.0, 0.3, 2.0]),
    "exponential": (lambda r: Exponential(r), (1.5,),
                    lambda x, r: np.log(r) - r * x, lambda x, r: 1 - np.exp(-r * x),
                    lambda r: 1 - math.log(r), [0.1, 0.3, 2.0]),
    "lognormal": (lambda a, b: LogNormal(a, b), (0.5, 0.75),
                  lambda x, m, s: -((np.log(x) - m) ** 2) / (2 * s * s) - np.log(s * x) - SQ2PI,
                  lambda x, m, s: 0.5 * (1 + np.vectorize(math.erf)((np.log(x) - m) / (s * math.sqrt(2)))),
                  lambda m, s: 0.5 + SQ2PI + math.log(s) + m, [0.1, 0.3, 2.0]),
    "halfnormal": (lambda s: HalfNormal(s), (2.0,),
                   lambda x, s: math.log(2) - x * x / (2 * s * s) - np.log(s) - SQ2PI,
                   lambda x, s: np.vectorize(math.erf)(x / (s * math.sqrt(2))),
                   lambda s: 0.5 * math.log(math.pi * s * s / 2) + 0.5, [0.1, 0.3, 2.0]),
    "halfcauchy": (lambda s: HalfCauchy(s), (2.0,),
                   lambda x, s: math.log(2) - np.log(np.pi * s * (1 + (x / s) ** 2)),
                   lambda x, s: 2 * np.arctan(x / s) / np.pi,
                   lambda s: math.log(2 * math.pi * s), [0.1, 0.3, 2.0]),
    "pareto": (lambda sc, a: Pareto(sc, a), (1.0, 3.0),
               lambda x, sc, a: np.log(a) + a * np.log(sc) - (a + 1) * np.log(x),
               lambda x, sc, a: 1 - (sc / x) ** a,
               lambda sc, a: math.log(sc / a) + 1 + 1 / a, [1.1, 1.3, 2.0]),
    "weibull": (lambda sc, k: Weibull(sc, k), (1.5, 3.0),
                lambda x, sc, k: np.log(k / sc) + (k - 1) * np.log(x / sc) - (x / sc) ** k,
                lambda x, sc, k: 1 - np.exp(-((x / sc) ** k)),
                lambda sc, k: EG * (1 - 1 / k) + math.log(sc / k) + 1, [0.1, 0.3, 2.0]),
}


def _make(name, params=None):
    ctor, default = CASES[name][:2]
    return ctor(*[f64(p) for p in (params or default)])


@pytest.mark.parametrize("name", sorted(CASES))
def test_log_prob_cdf_entropy_closed_form(name):
    _, params, logpdf, cdf, entropy, pts = CASES[name]
    d = _make(name)
    x = np.array(pts)
    np.testing.assert_allclose(d.log_prob(f64(x)).numpy(), logpdf(x, *params), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(d.cdf(f64(x)).numpy(), cdf(x, *params), rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(d.entropy().numpy(), entropy(*params), rtol=1e-12)
    assert d.log_prob(f64(x)).dtype == lucid.float64


SCIPY = {
    "normal": lambda st: st.norm(0.5, 2.0), "laplace": lambda st: st.laplace(0.5, 2.0),
    "cauchy": lambda st: st.cauchy(0.5, 2.0), "gumbel": lambda st: st.gumbel_r(0.5, 2.0),
    "uniform": lambda st: st.uniform(-2.0, 5.0), "exponential": lambda st: st.expon(scale=1 / 1.5),
    "lognormal": lambda st: st.lognorm(0.75, scale=math.exp(0.5)),
    "halfnormal": lambda st: st.halfnorm(scale=2.0), "halfcauchy": lambda st: st.halfcauchy(scale=2.0),
    "pareto": lambda st: st.pareto(3.0, scale=1.0), "weibull": lambda st: st.weibull_min(3.0, scale=1.5),
}


@pytest.mark.parametrize("name", sorted(SCIPY))
def test_against_scipy_and_samples_follow_the_cdf(name):
    stats = pytest.importorskip("scipy.stats")
    ref = SCIPY[name](stats)
    d = _make(name)
    x = np.array(CASES[name][5])
    np.testing.assert_allclose(d.log_prob(f64(x)).numpy(), ref.logpdf(x), rtol=1e-10)
    np.testing.assert_allclose(d.entropy().numpy(), ref.entropy(), rtol=1e-10)
    lucid.manual_seed(0)
    s = d.sample((4000,)).numpy()
    # Kolmogorov-Smirnov: for a correct sampler p is uniform; 1e-4 fails one seed in 10^4.
    assert stats.kstest(s, ref.cdf).pvalue > 1e-4


FINITE_MOMENTS = ["normal", "laplace", "gumbel", "uniform", "exponential", "lognormal", "halfnormal", "pareto"]


@pytest.mark.parametrize("name", FINITE_MOMENTS)
def test_sample_moments(name):
    params = {"pareto": (1.0, 5.0)}.get(name)  # 4th moment finite: a standard error exists
    d = _make(name, params)
    s = check_moments(d, n=20000)
    assert s.shape == (20000,)


def test_weibull_moments_need_lgamma():
    d = _make("weibull")
    if not hasattr(lucid, "lgamma"):
        with pytest.raises(NotImplementedError, match="lgamma"):
            d.mean
        return
    check_moments(d)


def test_icdf_inverts_cdf():
    p = f64([0.1, 0.5, 0.9])
    for name in ["laplace", "cauchy", "uniform", "exponential", "pareto", "weibull", "gumbel", "halfcauchy"]:
        d = _make(name)
        np.testing.assert_allclose(d.cdf(d.icdf(p)).numpy(), p.numpy(), rtol=1e-10, err_msg=name)
    if hasattr(lucid, "erfinv"):
        for name in ["normal", "lognormal", "halfnormal"]:
            d = _make(name)
            np.testing.assert_allclose(d.cdf(d.icdf(p)).numpy(), p.numpy(), rtol=1e-10, err_msg=name)


def test_mode_mean_variance_closed_forms():
    np.testing.assert_allclose(LogNormal(f64(0.5), f64(0.75)).mode.numpy(), math.exp(0.5 - 0.75 ** 2))
    np.testing.assert_allclose(Gumbel(f64(0.5), f64(2.0)).mean.numpy(), 0.5 + 2 * EG)
    assert math.isnan(Cauchy(0.0, 1.0).mean.item()) and math.isinf(Cauchy(0.0, 1.0).variance.item())
    assert math.isinf(HalfCauchy(1.0).mean.item())
    assert math.isinf(Pareto(1.0, 0.5).mean.item()) and Pareto(1.0, 3.0).mode.item() == 1.0
    np.testing.assert_allclose(Weibull(f64(1.5), f64(3.0)).mode.numpy(), 1.5 * (2 / 3) ** (1 / 3))
    assert math.isnan(Uniform(0.0, 1.0).mode.item())
    np.testing.assert_allclose(Laplace(f64(0.0), f64(2.0)).stddev.numpy(), math.sqrt(8))


# ------------------------------------------------------------ reparameterisation

# name -> (param index that gets a per-sample value, numpy cdf/logpdf in (x, theta))
REPARAM = ["normal", "laplace", "cauchy", "gumbel", "uniform", "exponential", "lognormal",
           "halfnormal", "halfcauchy", "pareto", "weibull"]


@pytest.mark.parametrize("name", REPARAM)
def test_rsample_gradient_is_the_implicit_reparameterisation_gradient(name):
    ctor, params, logpdf, cdf = CASES[name][:4]
    n = 64
    for k in range(len(params)):
        theta = per_sample_param(params[k], n)
        args = [f64(p) for p in params]
        args[k] = theta
        d = ctor(*args)
        if not d.has_rsample:
            pytest.skip(f"{name} has no rsample")
        lucid.manual_seed(1)
        x = d.rsample()
        (g,) = lucid.autograd.grad(x.sum(), [theta])
        xs = x.detach().numpy()

        def at(fn):
            return lambda xv, t: fn(xv, *[t if i == k else params[i] for i in range(len(params))])

        expected = implicit_grad(at(cdf), at(logpdf), xs, params[k])
        np.testing.assert_allclose(g.numpy(), expected, rtol=1e-5, atol=1e-7, err_msg=f"{name} param {k}")


def test_sample_has_no_gradient_and_rsample_has():
    loc = f64([0.0, 1.0]).requires_grad_()
    d = Normal(loc, 1.0)
    assert not d.sample((3,)).requires_grad
    assert d.rsample((3,)).requires_grad
    assert d.sample((3,)).shape == (3, 2)


# ------------------------------------------------------------ transforms of log_prob

def _logp(name, x, *params):
    return CASES[name][0](*params).log_prob(x)


@pytest.mark.parametrize("name", ["normal", "laplace", "gumbel", "lognormal", "pareto", "weibull", "cauchy"])
def test_gradcheck_log_prob(name):
    params = [f64(p).requires_grad_() for p in CASES[name][1]]
    x = f64(CASES[name][5]).requires_grad_()
    fn = lambda x, *ps: CASES[name][0](*ps).log_prob(x)
    assert lucid.autograd.gradcheck(fn, (x, *params))
    assert lucid.autograd.gradgradcheck(fn, (x, *params))


@pytest.mark.parametrize("name", ["normal", "laplace", "gumbel", "exponential", "lognormal", "halfnormal"])
def test_vmap_and_grad_over_log_prob_match_a_loop(name):
    ctor, params = CASES[name][:2]
    x = f64(CASES[name][5])
    ps = [f64(np.full(3, p) * np.array([1.0, 1.25, 1.5])) for p in params]

    def lp(*p):
        return ctor(*p).log_prob(x).sum()

    out = F.vmap(lp)(*ps)
    loop = [lp(*[p[i] for p in ps]).item() for i in range(3)]
    np.testing.assert_allclose(out.numpy(), loop, rtol=1e-12)
    g = F.vmap(F.grad(lp, argnums=tuple(range(len(ps)))))(*ps)
    for i in range(3):
        args = [p[i].detach().requires_grad_() for p in ps]
        ref = lucid.autograd.grad(lp(*args), args)
        for a, b in zip(g, ref):
            np.testing.assert_allclose(a[i].numpy(), b.numpy(), rtol=1e-12)


def test_rsample_under_vmap_follows_randomness():
    locs = f64([0.0, 100.0])
    with pytest.raises(RuntimeError, match="randomness"):
        F.vmap(lambda m: Normal(m, 1.0).rsample())(locs)
    diff = F.vmap(lambda m: Normal(m, 1.0).rsample((2,)), randomness="different")(locs)
    assert diff.shape == (2, 2) and abs(diff[1].mean().item() - 100) < 10
    lucid.manual_seed(3)
    same = F.vmap(lambda m: Normal(m, 1.0).rsample() - m, randomness="same")(locs)
    np.testing.assert_allclose(same[0].item(), same[1].item(), rtol=1e-12)
    # per-example gradient of a reparameterised sample: d/dloc (loc + eps) = 1
    g = F.vmap(F.grad(lambda m: Normal(m, 2.0).rsample()), randomness="different")(locs)
    np.testing.assert_allclose(g.numpy(), [1.0, 1.0])
