"""VonMises, ContinuousBernoulli, the relaxed distributions, Wishart, LKJCholesky,
LogisticNormal, and the biject_to / transform_to registries."""
import math

import numpy as np
import pytest

import lucid
import lucid.func as F
from lucid.distributions import (ContinuousBernoulli, ExpRelaxedCategorical, LKJCholesky, LogisticNormal,
                                 LogitRelaxedBernoulli, RelaxedBernoulli, RelaxedOneHotCategorical, VonMises,
                                 Wishart, biject_to, constraints, kl_divergence, transform_to)

from disthelpers import Z, f64, implicit_grad, per_sample_param


# ------------------------------------------------------------------ von Mises

def test_von_mises_density_and_moments():
    loc, k = 0.5, np.array([0.3, 2.0, 40.0])
    d = VonMises(f64(loc), f64(k))
    x = np.array([[-2.0], [0.4], [3.0]])
    ref = k * np.cos(x - loc) - np.log(2 * np.pi * np.i0(k))
    np.testing.assert_allclose(d.log_prob(f64(x)).numpy(), ref, rtol=1e-10)
    lucid.manual_seed(0)
    n = 20000
    s = d.sample((n,)).numpy()
    assert s.min() >= -np.pi and s.max() < np.pi
    # circular moments: E[cos(x - loc)] = I1(k) / I0(k), E[sin(x - loc)] = 0
    integrate = pytest.importorskip("scipy.integrate")
    special = pytest.importorskip("scipy.special")
    A = special.i1(k) / special.i0(k)
    c, sn = np.cos(s - loc), np.sin(s - loc)
    np.testing.assert_array_less(np.abs(c.mean(0) - A), Z * c.std(0) / math.sqrt(n))
    np.testing.assert_array_less(np.abs(sn.mean(0)), Z * sn.std(0) / math.sqrt(n))
    np.testing.assert_allclose(d.variance.numpy(), 1 - A, rtol=1e-10)
    for j, kj in enumerate(k):
        dj = VonMises(f64(loc), f64(kj))
        lp = lambda t: dj.log_prob(f64(t)).item()
        np.testing.assert_allclose(integrate.quad(lambda t: math.exp(lp(t)), -np.pi, np.pi)[0], 1.0, rtol=1e-8)
        np.testing.assert_allclose(dj.entropy().item(),
                                   integrate.quad(lambda t: -math.exp(lp(t)) * lp(t), -np.pi, np.pi, limit=200)[0],
                                   rtol=1e-6)


def test_von_mises_samples_follow_the_cdf_and_vmap():
    stats = pytest.importorskip("scipy.stats")
    lucid.manual_seed(1)
    s = VonMises(f64(0.5), f64(2.0)).sample((4000,)).numpy()
    assert stats.kstest(s, stats.vonmises(2.0, loc=0.5).cdf).pvalue > 1e-4
    out = F.vmap(lambda k: VonMises(f64(0.0), k).sample((300,)), randomness="different")(f64([0.5, 50.0]))
    assert out.shape == (2, 300) and out[1].abs().max().item() < out[0].abs().max().item()
    g = F.grad(lambda m: VonMises(m, f64(2.0)).log_prob(f64(1.0)))(f64(0.5))
    np.testing.assert_allclose(g.item(), 2.0 * math.sin(0.5), rtol=1e-12)


# ------------------------------------------------------------------ continuous Bernoulli

@pytest.mark.parametrize("p", [0.1, 0.4995, 0.5, 0.8])
def test_continuous_bernoulli_normalised_with_right_moments(p):
    integrate = pytest.importorskip("scipy.integrate")
    d = ContinuousBernoulli(probs=f64(p))
    pdf = lambda x: math.exp(d.log_prob(f64(x)).item())
    np.testing.assert_allclose(integrate.quad(pdf, 0, 1)[0], 1.0, rtol=1e-6)
    mean = integrate.quad(lambda x: x * pdf(x), 0, 1)[0]
    np.testing.assert_allclose(d.mean.item(), mean, rtol=1e-6)
    np.testing.assert_allclose(d.variance.item(), integrate.quad(lambda x: (x - mean) ** 2 * pdf(x), 0, 1)[0], rtol=1e-5)
    np.testing.assert_allclose(d.entropy().item(),
                               integrate.quad(lambda x: -pdf(x) * math.log(pdf(x)), 0, 1)[0], rtol=1e-5, atol=1e-9)
    # inside the unstable region (0.499, 0.501] the cdf is the uniform one, as in PyTorch
    tol = dict(rtol=1e-6) if abs(p - 0.5) > 1e-3 else dict(atol=1e-3)
    np.testing.assert_allclose(d.cdf(f64(0.3)).item(), integrate.quad(pdf, 0, 0.3)[0], **tol)
    u = f64([0.1, 0.5, 0.9])
    np.testing.assert_allclose(d.cdf(d.icdf(u)).numpy(), u.numpy(), rtol=1e-9)


def test_continuous_bernoulli_rsample_gradient():
    n = 64
    theta = per_sample_param(0.2, n)
    lucid.manual_seed(0)
    x = ContinuousBernoulli(probs=theta).rsample()
    (g,) = lucid.autograd.grad(x.sum(), [theta])

    def cdf(xv, p):
        return (p ** xv * (1 - p) ** (1 - xv) + p - 1) / (2 * p - 1)

    def logpdf(xv, p):
        c = 2 * np.arctanh(1 - 2 * p) / (1 - 2 * p)
        return xv * np.log(p) + (1 - xv) * np.log1p(-p) + np.log(c)

    np.testing.assert_allclose(g.numpy(), implicit_grad(cdf, logpdf, x.detach().numpy(), 0.2), rtol=1e-5)
    with pytest.raises(ValueError, match="probs"):
        ContinuousBernoulli(probs=f64(1.5))
    p, q = ContinuousBernoulli(probs=f64(0.3)), ContinuousBernoulli(probs=f64(0.7))
    lucid.manual_seed(1)
    s = p.sample((20000,))
    r = (p.log_prob(s) - q.log_prob(s)).numpy()
    assert abs(r.mean() - kl_divergence(p, q).item()) < Z * r.std() / math.sqrt(20000)


# ------------------------------------------------------------------ relaxed

def test_logit_relaxed_bernoulli_is_a_logistic():
    stats = pytest.importorskip("scipy.stats")
    T, logit = 0.7, 0.4
    d = LogitRelaxedBernoulli(f64(T), logits=f64(logit))
    ref = stats.logistic(loc=logit / T, scale=1 / T)
    x = np.array([-2.0, 0.3, 1.5])
    np.testing.assert_allclose(d.log_prob(f64(x)).numpy(), ref.logpdf(x), rtol=1e-10)
    lucid.manual_seed(0)
    assert stats.kstest(d.rsample((4000,)).numpy(), ref.cdf).pvalue > 1e-4
    rb = RelaxedBernoulli(f64(T), logits=f64(logit))
    integrate = pytest.importorskip("scipy.integrate")
    np.testing.assert_allclose(integrate.quad(lambda y: math.exp(rb.log_prob(f64(y)).item()), 0, 1)[0], 1.0, rtol=1e-7)


def test_relaxed_one_hot_categorical():
    probs = np.array([0.2, 0.3, 0.5])
    d = RelaxedOneHotCategorical(f64(0.05), probs=f64(probs))
    lucid.manual_seed(0)
    n = 20000
    s = d.rsample((n,)).numpy()
    np.testing.assert_allclose(s.sum(-1), 1.0, rtol=1e-10)
    # at low temperature the argmax is a Categorical(probs) draw (Gumbel-max)
    freq = np.bincount(s.argmax(-1), minlength=3) / n
    np.testing.assert_array_less(np.abs(freq - probs), Z * np.sqrt(probs * (1 - probs) / n))
    # K = 2: the first coordinate of a Concrete is a RelaxedBernoulli with logit log(p0 / p1)
    c2 = RelaxedOneHotCategorical(f64(0.7), probs=f64([0.3, 0.7]))
    rb = RelaxedBernoulli(f64(0.7), logits=f64(math.log(0.3 / 0.7)))
    y = np.array([0.2, 0.6])
    v = f64(np.stack([y, 1 - y], -1))
    # the simplex density is w.r.t. the first coordinate here: it agrees with the Bernoulli one
    np.testing.assert_allclose(c2.log_prob(v).numpy(), rb.log_prob(f64(y)).numpy(), rtol=1e-10)
    logits = f64([0.1, 0.2, -0.3]).requires_grad_()
    x = RelaxedOneHotCategorical(f64(0.5), logits=logits).rsample()
    (g,) = lucid.autograd.grad((x * f64([1.0, 2.0, 3.0])).sum(), [logits])
    assert np.isfinite(g.numpy()).all() and abs(g.numpy().sum()) < 1e-10  # softmax: invariant to a shift
    e = ExpRelaxedCategorical(f64(0.5), probs=f64(probs)).expand((4,))
    assert e.rsample().shape == (4, 3)


# ------------------------------------------------------------------ matrices

def test_wishart_against_scipy():
    stats = pytest.importorskip("scipy.stats")
    rng = np.random.default_rng(0)
    A = rng.normal(size=(3, 3))
    S = A @ A.T + np.eye(3)
    df = 5.5
    for kw in ("covariance_matrix", "precision_matrix", "scale_tril"):
        m = {"covariance_matrix": S, "precision_matrix": np.linalg.inv(S), "scale_tril": np.linalg.cholesky(S)}[kw]
        d = Wishart(f64(df), **{kw: f64(m)})
        X = stats.wishart(df, S).rvs(2, random_state=1)
        np.testing.assert_allclose(d.log_prob(f64(X)).numpy(), stats.wishart(df, S).logpdf(X.transpose(1, 2, 0)),
                                   rtol=1e-10)
        np.testing.assert_allclose(d.entropy().item(), stats.wishart(df, S).entropy(), rtol=1e-10)
    np.testing.assert_allclose(d.mean.numpy(), df * S, rtol=1e-12)
    np.testing.assert_allclose(d.mode.numpy(), (df - 4) * S, rtol=1e-12)
    lucid.manual_seed(0)
    n = 20000
    s = d.sample((n,)).numpy()
    var = d.variance.numpy()
    np.testing.assert_array_less(np.abs(s.mean(0) - df * S), Z * np.sqrt(var / n))
    with pytest.raises(ValueError, match="greater than ndim - 1"):
        Wishart(f64(1.5), covariance_matrix=f64(S))
    with pytest.raises(ValueError, match="exactly one"):
        Wishart(f64(4.0))


def test_wishart_rsample_gradient_is_unbiased():
    # E[trace X] = df trace(S): d/ddf = trace(S); per-sample df through the chi-squared diagonal.
    S = np.array([[2.0, 0.3], [0.3, 1.0]])
    n = 20000
    df = per_sample_param(4.0, n)
    lucid.manual_seed(2)
    X = Wishart(df, covariance_matrix=f64(S)).rsample()
    (g,) = lucid.autograd.grad(X.diagonal(0, -2, -1).sum(), [df])
    g = g.numpy()
    assert abs(g.mean() - np.trace(S)) < Z * g.std() / math.sqrt(n)
    L = f64(np.linalg.cholesky(S)).requires_grad_()
    lucid.manual_seed(3)
    Xs = Wishart(f64(4.0), scale_tril=L).rsample((n,))
    (gL,) = lucid.autograd.grad(Xs.diagonal(0, -2, -1).sum() / n, [L])
    np.testing.assert_allclose(np.tril(gL.numpy()), 2 * 4.0 * np.linalg.cholesky(S), rtol=0.05)  # d tr(df L L^T)/dL


def test_lkj_cholesky():
    integrate = pytest.importorskip("scipy.integrate")
    stats = pytest.importorskip("scipy.stats")
    eta = 2.5
    d2 = LKJCholesky(2, f64(eta))

    def L_of(r):
        return f64([[1.0, 0.0], [r, math.sqrt(1 - r * r)]])

    np.testing.assert_allclose(integrate.quad(lambda r: math.exp(d2.log_prob(L_of(r)).item()), -1, 1)[0], 1.0, rtol=1e-7)
    lucid.manual_seed(0)
    r = d2.sample((4000,)).numpy()[:, 1, 0]
    assert stats.kstest((r + 1) / 2, stats.beta(eta, eta).cdf).pvalue > 1e-4
    d4 = LKJCholesky(4, f64([0.5, 3.0]))
    s = d4.sample((50,))
    assert s.shape == (50, 2, 4, 4) and constraints.corr_cholesky.check(s).all()
    assert d4.log_prob(s).shape == (50, 2)
    # dim 3: density of the correlation matrix is c det(C)^(eta - 1); ratios between two points
    d3 = LKJCholesky(3, f64(eta))
    a, b = d3.sample((2,))
    Ca, Cb = (a @ a.mT).numpy(), (b @ b.mT).numpy()
    # the Cholesky parameterisation adds prod_i L_ii^(D - i) (the Jacobian), i = 2..D
    jac = lambda L: sum((3 - i) * math.log(L[i - 1, i - 1]) for i in range(2, 4))
    lhs = d3.log_prob(a).item() - d3.log_prob(b).item()
    rhs = (eta - 1) * (np.linalg.slogdet(Ca)[1] - np.linalg.slogdet(Cb)[1]) + jac(a.numpy()) - jac(b.numpy())
    np.testing.assert_allclose(lhs, rhs, rtol=1e-9)
    with pytest.raises(ValueError, match="dim"):
        LKJCholesky(1)


def test_logistic_normal():
    loc, scale = np.array([0.2, -0.5]), np.array([1.0, 0.5])
    d = LogisticNormal(f64(loc), f64(scale))
    assert d.batch_shape == () and d.event_shape == (3,)
    lucid.manual_seed(0)
    s = d.rsample((5,))
    np.testing.assert_allclose(s.sum(-1).numpy(), 1.0, rtol=1e-12)
    # density: normal density of the stick-breaking preimage divided by |det J|
    from lucid.distributions.transforms import StickBreakingTransform
    t = StickBreakingTransform()
    x = t.inv(s)
    ref = (-((x.numpy() - loc) ** 2) / (2 * scale ** 2) - np.log(scale) - 0.5 * math.log(2 * math.pi)).sum(-1) \
        - t.log_abs_det_jacobian(x, s).numpy()
    np.testing.assert_allclose(d.log_prob(s).numpy(), ref, rtol=1e-10)


# ------------------------------------------------------------------ registries

@pytest.mark.parametrize("c", [constraints.real, constraints.positive, constraints.nonnegative,
                               constraints.greater_than(2.0), constraints.less_than(-1.0),
                               constraints.interval(-1.0, 3.0), constraints.unit_interval,
                               constraints.simplex, constraints.corr_cholesky, constraints.real_vector,
                               constraints.independent(constraints.positive, 1)],
                         ids=repr)
def test_biject_to_lands_in_the_constraint_and_inverts(c):
    n = {constraints.simplex: 3, constraints.corr_cholesky: 3}.get(c, 3)
    x = f64(np.random.default_rng(0).normal(size=(4, n)))
    t = biject_to(c)
    y = t(x)
    assert c.check(y).all()
    np.testing.assert_allclose(t.inv(y).numpy(), x.numpy(), rtol=1e-8, atol=1e-10)
    assert c.check(transform_to(c)(x)).all()  # (softmax onto the simplex keeps the length)


def test_transform_to_matrices_and_errors():
    x = f64(np.random.default_rng(1).normal(size=(3, 3)))
    assert constraints.lower_cholesky.check(transform_to(constraints.lower_cholesky)(x)).item()
    assert constraints.positive_definite.check(transform_to(constraints.positive_definite)(x)).item()
    with pytest.raises(NotImplementedError, match="Cannot transform"):
        biject_to(constraints.boolean)
    with pytest.raises(TypeError, match="Constraint"):
        biject_to.register(int, lambda c: None)
