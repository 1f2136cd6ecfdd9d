"""MultivariateNormal (three parameterisations), LowRankMultivariateNormal and
MixtureSameFamily: densities vs NumPy closed forms, sample covariance, gradients, vmap."""
import math

import numpy as np
import pytest

import lucid
import lucid.func as F
from lucid.distributions import (Categorical, Independent, LowRankMultivariateNormal, MixtureSameFamily,
                                 MultivariateNormal, Normal, kl_divergence)

from disthelpers import Z, f64

RNG = np.random.default_rng(0)
A = RNG.normal(size=(3, 3))
S = A @ A.T + np.eye(3)
MU = RNG.normal(size=3)
X = RNG.normal(size=(4, 3))


def mvn_logpdf(x, mu, s):
    d = x - mu
    sol = np.linalg.solve(s, d.T).T
    return -0.5 * ((d * sol).sum(-1) + len(mu) * math.log(2 * math.pi) + np.linalg.slogdet(s)[1])


@pytest.mark.parametrize("param", ["covariance_matrix", "precision_matrix", "scale_tril"])
def test_mvn_parameterisations_agree(param):
    value = {"covariance_matrix": S, "precision_matrix": np.linalg.inv(S), "scale_tril": np.linalg.cholesky(S)}[param]
    d = MultivariateNormal(f64(MU), **{param: f64(value)})
    np.testing.assert_allclose(d.log_prob(f64(X)).numpy(), mvn_logpdf(X, MU, S), rtol=1e-12)
    ent = 0.5 * (3 * (1 + math.log(2 * math.pi)) + np.linalg.slogdet(S)[1])
    np.testing.assert_allclose(d.entropy().item(), ent, rtol=1e-12)
    np.testing.assert_allclose(d.covariance_matrix.numpy(), S, rtol=1e-12)
    np.testing.assert_allclose(d.precision_matrix.numpy(), np.linalg.inv(S), rtol=1e-10)
    np.testing.assert_allclose(d.scale_tril.numpy(), np.linalg.cholesky(S), rtol=1e-10)
    np.testing.assert_allclose(d.variance.numpy(), np.diag(S), rtol=1e-12)


def test_mvn_samples_and_batching():
    d = MultivariateNormal(f64(np.stack([MU, -MU])), covariance_matrix=f64(S))
    assert d.batch_shape == (2,) and d.event_shape == (3,)
    lucid.manual_seed(0)
    n = 20000
    s = d.sample((n,)).numpy()
    assert s.shape == (n, 2, 3)
    se = np.sqrt(np.diag(S) / n)
    np.testing.assert_array_less(np.abs(s.mean(0) - np.stack([MU, -MU])), np.stack([Z * se] * 2))
    # covariance entries: se of a sample covariance of Gaussians is sqrt((S_ii S_jj + S_ij^2) / n)
    c = np.cov(s[:, 0].T)
    se_c = np.sqrt((np.outer(np.diag(S), np.diag(S)) + S ** 2) / n)
    np.testing.assert_array_less(np.abs(c - S), Z * se_c)
    assert d.log_prob(f64(np.zeros((5, 1, 3)))).shape == (5, 2)
    assert d.expand((4, 2)).sample().shape == (4, 2, 3)


def test_mvn_rsample_gradient_is_pathwise():
    loc = f64(MU).requires_grad_()
    L = f64(np.linalg.cholesky(S)).requires_grad_()
    d = MultivariateNormal(loc, scale_tril=L)
    lucid.manual_seed(1)
    x = d.rsample()
    lucid.manual_seed(1)
    eps = lucid.randn((3,), dtype=lucid.float64).numpy()
    np.testing.assert_allclose(x.detach().numpy(), MU + np.linalg.cholesky(S) @ eps, rtol=1e-12)
    w = np.array([1.0, -2.0, 0.5])
    gl, gL = lucid.autograd.grad((x * f64(w)).sum(), [loc, L])
    np.testing.assert_allclose(gl.numpy(), w)
    np.testing.assert_allclose(gL.numpy(), np.outer(w, eps))  # d(w . L eps)/dL = w eps^T


def test_mvn_log_prob_gradcheck_and_vmap():
    Lc = np.linalg.cholesky(S)

    def lp(loc, L, x):
        return MultivariateNormal(loc, scale_tril=L.tril()).log_prob(x)

    args = (f64(MU).requires_grad_(), f64(Lc).requires_grad_(), f64(X).requires_grad_())
    assert lucid.autograd.gradcheck(lp, args)
    assert lucid.autograd.gradgradcheck(lp, args)
    locs = f64(RNG.normal(size=(3, 3)))
    out = F.vmap(lambda m: lp(m, f64(Lc), f64(X)).sum())(locs)
    np.testing.assert_allclose(out.numpy(), [mvn_logpdf(X, m, S).sum() for m in locs.numpy()], rtol=1e-12)
    g = F.vmap(F.grad(lambda m: lp(m, f64(Lc), f64(X)).sum()))(locs)
    np.testing.assert_allclose(g.numpy(), [np.linalg.solve(S, (X - m).T).sum(-1) for m in locs.numpy()], rtol=1e-10)


def test_mvn_errors():
    with pytest.raises(ValueError, match="exactly one"):
        MultivariateNormal(f64(MU))
    with pytest.raises(ValueError, match="at least one-dimensional"):
        MultivariateNormal(f64(0.0), covariance_matrix=f64(S))
    with pytest.raises(ValueError, match=r"\(\.\.\., 3, 3\)"):
        MultivariateNormal(f64(MU), covariance_matrix=f64(np.eye(2)))
    with pytest.raises(ValueError, match="covariance_matrix.*PositiveDefinite"):
        MultivariateNormal(f64(MU), covariance_matrix=f64(-S))
    with pytest.raises(ValueError, match="scale_tril.*LowerCholesky"):
        MultivariateNormal(f64(MU), scale_tril=f64(A))


def test_lowrank_mvn():
    W = RNG.normal(size=(2, 3, 2))
    D = RNG.uniform(0.5, 1.5, size=(2, 3))
    d = LowRankMultivariateNormal(f64(MU), f64(W), f64(D))
    assert d.batch_shape == (2,) and d.event_shape == (3,)
    covs = W @ W.transpose(0, 2, 1) + np.stack([np.diag(v) for v in D])
    lp = d.log_prob(f64(X[:, None])).numpy()
    for b in range(2):
        np.testing.assert_allclose(lp[:, b], mvn_logpdf(X, MU, covs[b]), rtol=1e-12)
        ent = 0.5 * (3 * (1 + math.log(2 * math.pi)) + np.linalg.slogdet(covs[b])[1])
        np.testing.assert_allclose(d.entropy().numpy()[b], ent, rtol=1e-12)
    np.testing.assert_allclose(d.covariance_matrix.numpy(), covs, rtol=1e-12)
    np.testing.assert_allclose(d.precision_matrix.numpy(), np.linalg.inv(covs), rtol=1e-10)
    np.testing.assert_allclose((d.scale_tril @ d.scale_tril.mT).numpy(), covs, rtol=1e-10)
    np.testing.assert_allclose(d.variance.numpy(), np.stack([np.diag(c) for c in covs]), rtol=1e-12)
    lucid.manual_seed(0)
    n = 20000
    s = d.sample((n,)).numpy()[:, 1]
    se_c = np.sqrt((np.outer(np.diag(covs[1]), np.diag(covs[1])) + covs[1] ** 2) / n)
    np.testing.assert_array_less(np.abs(np.cov(s.T) - covs[1]), Z * se_c)
    # KL against the dense parameterisation of the same Gaussian is 0
    dense = MultivariateNormal(f64(MU), covariance_matrix=f64(covs))
    np.testing.assert_allclose(kl_divergence(d, dense).numpy(), 0.0, atol=1e-12)
    np.testing.assert_allclose(kl_divergence(dense, d).numpy(), 0.0, atol=1e-12)
    with pytest.raises(ValueError, match="cov_factor"):
        LowRankMultivariateNormal(f64(MU), f64(np.ones((2, 2))), f64(D[0]))
    with pytest.raises(ValueError, match="cov_diag"):
        LowRankMultivariateNormal(f64(MU), f64(W[0]), f64(-D[0]))


def test_mvn_kl_closed_form():
    S2 = S + np.eye(3)
    mu2 = MU + 0.5
    p = MultivariateNormal(f64(MU), covariance_matrix=f64(S))
    q = MultivariateNormal(f64(mu2), precision_matrix=f64(np.linalg.inv(S2)))
    d = mu2 - MU
    ref = 0.5 * (np.trace(np.linalg.solve(S2, S)) + d @ np.linalg.solve(S2, d) - 3
                 + np.linalg.slogdet(S2)[1] - np.linalg.slogdet(S)[1])
    np.testing.assert_allclose(kl_divergence(p, q).item(), ref, rtol=1e-12)
    with pytest.raises(ValueError, match="different event shapes"):
        kl_divergence(p, MultivariateNormal(f64(np.zeros(2)), covariance_matrix=f64(np.eye(2))))


def test_mixture_same_family():
    w = np.array([0.3, 0.7])
    locs, scales = np.array([-1.0, 2.0]), np.array([0.5, 1.5])
    d = MixtureSameFamily(Categorical(probs=f64(w)), Normal(f64(locs), f64(scales)))
    x = np.array([-1.5, 0.0, 2.5])
    pdf = (w * np.exp(-((x[:, None] - locs) ** 2) / (2 * scales ** 2)) / (scales * math.sqrt(2 * math.pi))).sum(-1)
    np.testing.assert_allclose(d.log_prob(f64(x)).numpy(), np.log(pdf), rtol=1e-12)
    mean = (w * locs).sum()
    np.testing.assert_allclose(d.mean.item(), mean, rtol=1e-12)
    np.testing.assert_allclose(d.variance.item(), (w * (scales ** 2 + locs ** 2)).sum() - mean ** 2, rtol=1e-12)
    cdf = (w * np.vectorize(math.erf)((x[:, None] - locs) / (scales * math.sqrt(2))) / 2 + w / 2).sum(-1)
    np.testing.assert_allclose(d.cdf(f64(x)).numpy(), cdf, rtol=1e-12)
    lucid.manual_seed(0)
    n = 20000
    s = d.sample((n,)).numpy()
    assert abs(s.mean() - mean) < Z * math.sqrt(d.variance.item() / n)
    # multivariate components and a batch of mixtures
    comp = Independent(Normal(f64(RNG.normal(size=(4, 2, 3))), f64(np.ones((4, 2, 3)))), 1)
    m = MixtureSameFamily(Categorical(logits=f64(RNG.normal(size=(4, 2)))), comp)
    assert m.batch_shape == (4,) and m.event_shape == (3,)
    assert m.sample((5,)).shape == (5, 4, 3) and m.log_prob(f64(np.zeros((5, 4, 3)))).shape == (5, 4)
    assert m.mean.shape == (4, 3) and m.expand((2, 4)).sample().shape == (2, 4, 3)
    # gradient of the log-likelihood in the mixture weights
    g = F.grad(lambda lg: MixtureSameFamily(Categorical(logits=lg), Normal(f64(locs), f64(scales)))
               .log_prob(f64(x)).sum())(f64(np.log(w)))
    comp_pdf = w * np.exp(-((x[:, None] - locs) ** 2) / (2 * scales ** 2)) / (scales * math.sqrt(2 * math.pi))
    resp = comp_pdf / comp_pdf.sum(-1, keepdims=True)
    np.testing.assert_allclose(g.numpy(), (resp - w).sum(0), rtol=1e-10)
    with pytest.raises(ValueError, match="Categorical"):
        MixtureSameFamily(Normal(0.0, 1.0), Normal(f64(locs), f64(scales)))
    with pytest.raises(ValueError, match="does not equal"):
        MixtureSameFamily(Categorical(probs=f64([0.2, 0.3, 0.5])), Normal(f64(locs), f64(scales)))
