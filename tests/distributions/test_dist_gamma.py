"""The Gamma family: the standard-gamma primitive (values, implicit-reparameterisation
gradient vs the exact implicit function derivative and vs PyTorch's formula, double
backward, vmap), densities vs closed forms and SciPy, moments, unbiased pathwise gradients."""
import math

import numpy as np
import pytest

import lucid
import lucid.func as F
from lucid._core.primitive import AN
from lucid.distributions import (Beta, Chi2, Dirichlet, FisherSnedecor, Gamma, InverseGamma, Kumaraswamy,
                                 NegativeBinomial, StudentT)
from lucid.distributions._gamma import standard_gamma, standard_gamma_grad

from disthelpers import Z, check_moments, f64, implicit_grad, per_sample_param

LG = np.vectorize(math.lgamma)
ALPHAS = np.array([0.05, 0.3, 0.5, 1.0, 2.5, 7.9, 9.0, 30.0, 200.0])


def test_standard_gamma_values():
    u = np.array([0.1, 0.5, 0.9])
    # alpha = 1 is the exponential: P^{-1}(1, u) = -log(1 - u)
    np.testing.assert_allclose(standard_gamma(f64(1.0), f64(u)).numpy(), -np.log1p(-u), rtol=1e-12)
    special = pytest.importorskip("scipy.special")
    a = ALPHAS[:, None]
    x = standard_gamma(f64(a), f64(u)).numpy()
    np.testing.assert_allclose(special.gammainc(a, x), np.broadcast_to(u, x.shape), rtol=1e-10)
    assert standard_gamma(f64(1e-4), f64(0.3)).item() == np.finfo(np.float64).tiny  # underflow is clamped
    assert standard_gamma(lucid.tensor(2.0), lucid.tensor(0.5)).dtype == lucid.float32


def test_standard_gamma_grad_is_the_implicit_derivative():
    special = pytest.importorskip("scipy.special")
    rng = np.random.default_rng(0)
    a = np.repeat(ALPHAS, 20)
    u = rng.uniform(0.02, 0.98, a.size)
    alpha = f64(a).requires_grad_()
    x = standard_gamma(alpha, f64(u))
    (g,) = lucid.autograd.grad(x.sum(), [alpha])
    xs = x.detach().numpy()
    exact = implicit_grad(lambda xv, t: special.gammainc(t, xv),
                          lambda xv, t: (t - 1) * np.log(xv) - xv - special.gammaln(t), xs, a, eps=1e-7)
    # PyTorch's approximation is good to ~1e-3 relative (Jankowiak and Obermeyer 2018)
    np.testing.assert_allclose(g.numpy(), exact, rtol=2e-3)
    # d x / d u = 1 / p(x; alpha)
    uu = f64(u).requires_grad_()
    (gu,) = lucid.autograd.grad(standard_gamma(f64(a), uu).sum(), [uu])
    np.testing.assert_allclose(gu.numpy(), np.exp(special.gammaln(a) + xs - (a - 1) * np.log(xs)), rtol=1e-10)


def test_standard_gamma_grad_matches_pytorch_formula():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(1)
    a = np.concatenate([rng.uniform(0.01, 8, 200), rng.uniform(8, 500, 200)])
    x = np.concatenate([rng.gamma(a[:200]), rng.gamma(a[200:])])
    x[:20] = rng.uniform(0.001, 0.8, 20)  # the small-x series
    ours = standard_gamma_grad(AN, a, x)
    ref = torch._standard_gamma_grad(torch.tensor(a), torch.tensor(x)).numpy()
    np.testing.assert_allclose(ours, ref, rtol=1e-9)


def test_standard_gamma_higher_order_and_forward_mode():
    # the rule is written with ns ops: its own derivative matches finite differences of it
    a = f64([0.4, 2.0, 5.0, 12.0])
    x = f64([0.3, 1.7, 4.0, 12.5])
    assert lucid.autograd.gradcheck(lambda a, x: standard_gamma_grad(lucid._core.primitive.TN, a, x),
                                    (a.requires_grad_(), x.requires_grad_()))
    u = f64([0.2, 0.5, 0.7, 0.9])
    alpha = f64([0.4, 2.0, 5.0, 12.0]).requires_grad_()
    (g,) = lucid.autograd.grad(standard_gamma(alpha, u).sum(), [alpha], create_graph=True)
    (gg,) = lucid.autograd.grad(g.sum(), [alpha])
    assert np.isfinite(gg.numpy()).all()
    _, t = F.jvp(lambda a: standard_gamma(a, u), (alpha.detach(),), (lucid.ones_like(alpha),))
    np.testing.assert_allclose(t.numpy(), g.detach().numpy(), rtol=1e-12)
    # vmap of the per-example gradient vs a loop
    gv = F.vmap(F.grad(lambda a, uu: standard_gamma(a, uu)))(alpha.detach(), u)
    np.testing.assert_allclose(gv.numpy(), g.detach().numpy(), rtol=1e-12)


# name -> (constructor, params, NumPy log-density, entropy or None, points)
CASES = {
    "gamma": (Gamma, (2.5, 1.5), lambda x, c, r: c * np.log(r) + (c - 1) * np.log(x) - r * x - LG(c), [0.2, 1.0, 3.0]),
    "chi2": (Chi2, (3.0,), lambda x, k: (k / 2 - 1) * np.log(x) - x / 2 - k / 2 * math.log(2) - LG(k / 2), [0.2, 1.0, 3.0]),
    "beta": (Beta, (2.0, 3.5), lambda x, a, b: (a - 1) * np.log(x) + (b - 1) * np.log1p(-x) + LG(a + b) - LG(a) - LG(b),
             [0.1, 0.4, 0.9]),
    "studentt": (StudentT, (4.5, 0.5, 2.0), lambda x, v, m, s: LG((v + 1) / 2) - LG(v / 2) - 0.5 * np.log(v * np.pi * s * s)
                 - (v + 1) / 2 * np.log1p(((x - m) / s) ** 2 / v), [-2.0, 0.5, 3.0]),
    "inversegamma": (InverseGamma, (3.0, 2.0), lambda x, c, r: c * np.log(r) - LG(c) - (c + 1) * np.log(x) - r / x,
                     [0.2, 1.0, 3.0]),
    "fishersnedecor": (FisherSnedecor, (5.0, 12.0), lambda x, d1, d2: 0.5 * (d1 * np.log(d1 * x) + d2 * np.log(d2)
                       - (d1 + d2) * np.log(d1 * x + d2)) - np.log(x) - (LG(d1 / 2) + LG(d2 / 2) - LG((d1 + d2) / 2)),
                       [0.2, 1.0, 3.0]),
    "kumaraswamy": (Kumaraswamy, (2.0, 3.0), lambda x, a, b: np.log(a * b) + (a - 1) * np.log(x) + (b - 1) * np.log1p(-x ** a),
                    [0.1, 0.4, 0.9]),
}


def _make(name, params=None):
    ctor, default = CASES[name][:2]
    return ctor(*[f64(p) for p in (params or default)])


@pytest.mark.parametrize("name", sorted(CASES))
def test_log_prob_closed_form(name):
    _, params, logpdf, pts = CASES[name]
    x = np.array(pts)
    np.testing.assert_allclose(_make(name).log_prob(f64(x)).numpy(), logpdf(x, *params), rtol=1e-10)


SCIPY = {
    "gamma": lambda st: st.gamma(2.5, scale=1 / 1.5), "chi2": lambda st: st.chi2(3.0),
    "beta": lambda st: st.beta(2.0, 3.5), "studentt": lambda st: st.t(4.5, 0.5, 2.0),
    "inversegamma": lambda st: st.invgamma(3.0, scale=2.0), "fishersnedecor": lambda st: st.f(5.0, 12.0),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_entropy_moments_and_samples(name):
    stats = pytest.importorskip("scipy.stats")
    d = _make(name)
    check_moments(d, n=20000)
    if name in SCIPY:
        ref = SCIPY[name](stats)
        if name != "fishersnedecor":  # PyTorch defines no F entropy either
            np.testing.assert_allclose(d.entropy().item(), ref.entropy(), rtol=1e-10)
        lucid.manual_seed(0)
        assert stats.kstest(d.sample((4000,)).numpy(), ref.cdf).pvalue > 1e-4
    else:  # Kumaraswamy: entropy by quadrature
        integrate = pytest.importorskip("scipy.integrate")
        f = lambda x: -math.exp(d.log_prob(f64(x)).item()) * d.log_prob(f64(x)).item()
        np.testing.assert_allclose(d.entropy().item(), integrate.quad(f, 0, 1)[0], rtol=1e-8)


@pytest.mark.parametrize("name,k", [("gamma", 0), ("gamma", 1), ("chi2", 0), ("inversegamma", 0), ("inversegamma", 1),
                                    ("kumaraswamy", 0), ("kumaraswamy", 1)])
def test_rsample_gradient_matches_the_implicit_formula(name, k):
    """One noise per draw: dx/dtheta must be -(dF/dtheta)/f exactly (to PyTorch's ~1e-3)."""
    special = pytest.importorskip("scipy.special")
    ctor, params, logpdf = CASES[name][:3]
    cdfs = {"gamma": lambda x, c, r: special.gammainc(c, r * x), "chi2": lambda x, v: special.gammainc(v / 2, x / 2),
            "inversegamma": lambda x, c, r: special.gammaincc(c, r / x),
            "kumaraswamy": lambda x, a, b: 1 - (1 - x ** a) ** b}
    n = 200
    theta = per_sample_param(params[k], n)
    args = [f64(p) for p in params]
    args[k] = theta
    lucid.manual_seed(2)
    x = ctor(*args).rsample()
    (g,) = lucid.autograd.grad(x.sum(), [theta])
    at = lambda fn: (lambda xv, t: fn(xv, *[t if i == k else params[i] for i in range(len(params))]))
    expected = implicit_grad(at(cdfs[name]), at(logpdf), x.detach().numpy(), params[k])
    np.testing.assert_allclose(g.numpy(), expected, rtol=3e-3, atol=1e-10)


def _mean_grad_check(make, theta0, f, expected, n=20000, seed=3):
    """E[d f(x)/dtheta] over per-sample draws vs the analytic d E[f(x)]/dtheta, to Z standard errors."""
    theta = per_sample_param(theta0, n)
    lucid.manual_seed(seed)
    x = make(theta).rsample()
    (g,) = lucid.autograd.grad(f(x).sum(), [theta])
    g = g.numpy()
    assert abs(g.mean() - expected) < Z * g.std() / math.sqrt(n) + 1e-12


def test_pathwise_gradients_are_unbiased():
    a, b = 2.0, 3.5
    _mean_grad_check(lambda t: Beta(t, f64(b)), a, lambda x: x, b / (a + b) ** 2)
    _mean_grad_check(lambda t: Beta(f64(a), t), b, lambda x: x, -a / (a + b) ** 2)
    # StudentT: E[x^2] = scale^2 df / (df - 2); d/ddf = -2 scale^2 / (df - 2)^2
    _mean_grad_check(lambda t: StudentT(t, f64(0.0), f64(1.5)), 9.0, lambda x: x * x, -2 * 1.5 ** 2 / 49)
    # F: E[x] = d2 / (d2 - 2) does not depend on d1
    _mean_grad_check(lambda t: FisherSnedecor(t, f64(12.0)), 5.0, lambda x: x, 0.0)
    _mean_grad_check(lambda t: FisherSnedecor(f64(5.0), t), 12.0, lambda x: x, -2 / 100)


def test_dirichlet():
    c = np.array([0.7, 2.0, 3.5])
    d = Dirichlet(f64(c))
    x = np.array([[0.2, 0.3, 0.5], [0.6, 0.3, 0.1]])
    ref = ((c - 1) * np.log(x)).sum(-1) + math.lgamma(c.sum()) - LG(c).sum()
    np.testing.assert_allclose(d.log_prob(f64(x)).numpy(), ref, rtol=1e-12)
    s = check_moments(d, n=20000)
    np.testing.assert_allclose(s.sum(-1), 1.0, rtol=1e-12)
    stats = pytest.importorskip("scipy.stats")
    np.testing.assert_allclose(d.entropy().item(), stats.dirichlet(c).entropy(), rtol=1e-10)
    np.testing.assert_allclose(Dirichlet(f64([2.0, 3.0, 5.0])).mode.numpy(), np.array([1.0, 2.0, 4.0]) / 7, rtol=1e-12)
    # pathwise gradient: E[d x_0 / d c_0] = d (c_0 / sum c) / d c_0
    n = 20000
    c0 = per_sample_param(c[0], n)
    conc = lucid.stack([c0, lucid.full((n,), c[1], dtype=lucid.float64), lucid.full((n,), c[2], dtype=lucid.float64)], -1)
    lucid.manual_seed(4)
    xs = Dirichlet(conc).rsample()
    (g,) = lucid.autograd.grad(xs[:, 0].sum(), [c0])
    expected = (c[1] + c[2]) / c.sum() ** 2
    assert abs(g.numpy().mean() - expected) < Z * g.numpy().std() / math.sqrt(n)
    with pytest.raises(ValueError, match="concentration"):
        Dirichlet(f64([1.0, -1.0]))
    with pytest.raises(ValueError, match="support|Simplex"):
        d.log_prob(f64([0.5, 0.6, 0.1]))


def test_negative_binomial():
    r, p = 3.5, 0.4
    d = NegativeBinomial(f64(r), probs=f64(p))
    k = np.array([0.0, 1.0, 4.0, 10.0])
    ref = LG(k + r) - LG(k + 1) - math.lgamma(r) + r * math.log(1 - p) + k * math.log(p)
    np.testing.assert_allclose(d.log_prob(f64(k)).numpy(), ref, rtol=1e-10)
    np.testing.assert_allclose(d.mean.item(), r * p / (1 - p), rtol=1e-12)
    s = check_moments(d, n=20000)
    assert (s == np.round(s)).all()
    assert NegativeBinomial(f64(0.0), probs=f64(0.5)).log_prob(f64(0.0)).item() == 0.0
    dl = NegativeBinomial(f64(r), logits=f64(math.log(p / (1 - p))))
    np.testing.assert_allclose(dl.log_prob(f64(k)).numpy(), ref, rtol=1e-10)


def test_validation_and_special_cases():
    with pytest.raises(ValueError, match="concentration"):
        Gamma(f64(-1.0), f64(1.0))
    with pytest.raises(ValueError, match="within the support"):
        Gamma(f64(1.0), f64(1.0)).log_prob(f64(-1.0))
    with pytest.raises(ValueError, match="concentration1"):
        Beta(f64(0.0), f64(1.0))
    assert math.isnan(StudentT(f64(0.5)).mean.item()) and math.isinf(StudentT(f64(1.5)).variance.item())
    assert math.isinf(InverseGamma(f64(0.5), f64(1.0)).mean.item())
    assert math.isnan(FisherSnedecor(f64(1.0), f64(1.5)).mean.item())
    assert math.isnan(Kumaraswamy(f64(0.5), f64(2.0)).mode.item())
    assert Gamma(f64([1.0, 2.0]), 1.0).expand((3, 2)).sample().shape == (3, 2)
    assert Beta(f64([1.0, 2.0]), 1.0).expand((3, 2)).rsample().shape == (3, 2)
    assert Dirichlet(f64([[1.0, 2.0]])).expand((4,)).sample().shape == (4, 2)
    assert Chi2(f64(4.0)).df.item() == 4.0


def test_gamma_rsample_under_vmap_and_grad():
    conc = f64([0.5, 3.0])
    s = F.vmap(lambda c: Gamma(c, 1.0).rsample((2000,)), randomness="different")(conc)
    assert s.shape == (2, 2000)
    np.testing.assert_array_less(np.abs(s.numpy().mean(1) - conc.numpy()), Z * np.sqrt(conc.numpy() / 2000))
    with pytest.raises(RuntimeError, match="randomness"):
        F.vmap(lambda c: Gamma(c, 1.0).rsample())(conc)
    lp = F.vmap(F.grad(lambda c: Gamma(c, f64(2.0)).log_prob(f64(1.5))))(conc)
    digamma = np.vectorize(lambda v: F.grad(lambda t: lucid.lgamma(t))(f64(v)).item())
    np.testing.assert_allclose(lp.numpy(), math.log(2.0) + math.log(1.5) - digamma(conc.numpy()), rtol=1e-10)
