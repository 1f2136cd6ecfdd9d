"""Wishart as an exponential family (natural parameters, log normaliser, Bregman entropy and KL)
and its redraw of singular Bartlett samples."""
import math
import warnings

import numpy as np
import pytest

import lucid
from lucid.distributions import ExponentialFamily, Wishart, constraints, kl_divergence

from disthelpers import Z, f64


def _spd(rng, p, batch=()):
    A = rng.normal(size=batch + (p, p))
    return A @ np.swapaxes(A, -1, -2) + np.eye(p)


def _mvdigamma(x, p):
    from scipy.special import digamma

    return sum(digamma(x - j / 2) for j in range(p))


def _kl_closed(n1, S1, n2, S2):
    """KL(W(n1, S1) || W(n2, S2)), the textbook closed form."""
    from scipy.special import multigammaln

    p = S1.shape[-1]
    logdet = lambda M: np.linalg.slogdet(M)[1]  # noqa: E731
    return (n2 / 2 * (logdet(S2) - logdet(S1)) + n1 / 2 * (np.trace(np.linalg.solve(S2, S1)) - p)
            + multigammaln(n2 / 2, p) - multigammaln(n1 / 2, p) + (n1 - n2) / 2 * _mvdigamma(n1 / 2, p))


def test_wishart_is_an_exponential_family():
    stats = pytest.importorskip("scipy.stats")
    rng = np.random.default_rng(0)
    S = _spd(rng, 3, (2,))
    df = np.array([5.5, 3.2])
    d = Wishart(f64(df), covariance_matrix=f64(S))
    assert isinstance(d, ExponentialFamily)
    x, y = d._natural_params
    np.testing.assert_allclose(x.numpy(), -np.linalg.inv(S) / 2, rtol=1e-10)
    np.testing.assert_allclose(y.numpy(), (df - 4) / 2, rtol=1e-12)
    # log p(X) = <x, X> + y log det X - F(x, y) with carrier measure 1
    X = np.stack([stats.wishart(df[i], S[i]).rvs(random_state=i) for i in range(2)])
    F = d._log_normalizer(x, y).numpy()
    expect = (x.numpy() * X).sum((-2, -1)) + y.numpy() * np.linalg.slogdet(X)[1] - F
    np.testing.assert_allclose(d.log_prob(f64(X)).numpy(), expect, rtol=1e-10)
    assert d._mean_carrier_measure == 0
    # the Bregman entropy (F - <theta, dF/dtheta>) equals the closed form and SciPy's
    closed = d.entropy().numpy()
    np.testing.assert_allclose(ExponentialFamily.entropy(d).numpy(), closed, rtol=1e-10)
    np.testing.assert_allclose(closed, [stats.wishart(df[i], S[i]).entropy() for i in range(2)], rtol=1e-10)


def test_wishart_entropy_gradient_through_bregman_path():
    # d/d df of the Bregman entropy must be the derivative of the closed form (finite differences)
    S = _spd(np.random.default_rng(1), 2)
    def ent(v, bregman):
        d = Wishart(v, covariance_matrix=f64(S))
        return ExponentialFamily.entropy(d) if bregman else d.entropy()
    df = f64(4.3).requires_grad_()
    (g,) = lucid.autograd.grad(ent(df, True), [df])
    eps = 1e-6
    fd = (ent(f64(4.3 + eps), False).item() - ent(f64(4.3 - eps), False).item()) / (2 * eps)
    np.testing.assert_allclose(g.item(), fd, rtol=1e-6)


def test_wishart_kl_is_the_closed_form_batched():
    pytest.importorskip("scipy")
    rng = np.random.default_rng(2)
    S1, S2 = _spd(rng, 3, (2,)), _spd(rng, 3, (2,))
    n1, n2 = np.array([5.5, 4.0]), np.array([4.5, 7.0])
    kl = kl_divergence(Wishart(f64(n1), covariance_matrix=f64(S1)), Wishart(f64(n2), scale_tril=f64(np.linalg.cholesky(S2))))
    assert kl.shape == (2,)
    np.testing.assert_allclose(kl.numpy(), [_kl_closed(n1[i], S1[i], n2[i], S2[i]) for i in range(2)], rtol=1e-10)
    same = kl_divergence(Wishart(f64(n1), covariance_matrix=f64(S1)), Wishart(f64(n1), precision_matrix=f64(np.linalg.inv(S1))))
    np.testing.assert_allclose(same.numpy(), 0.0, atol=1e-10)


def test_wishart_kl_monte_carlo():
    rng = np.random.default_rng(3)
    S1, S2 = _spd(rng, 2), _spd(rng, 2)
    p, q = Wishart(f64(4.5), covariance_matrix=f64(S1)), Wishart(f64(6.0), covariance_matrix=f64(S2))
    lucid.manual_seed(0)
    n = 20000
    x = p.sample((n,))
    r = (p.log_prob(x) - q.log_prob(x)).numpy()
    assert abs(r.mean() - kl_divergence(p, q).item()) < Z * r.std() / math.sqrt(n)


def test_wishart_matches_torch_expfamily():
    torch = pytest.importorskip("torch")
    TD = torch.distributions
    rng = np.random.default_rng(4)
    S1, S2 = _spd(rng, 3), _spd(rng, 3)
    lp, lq = Wishart(f64(5.5), covariance_matrix=f64(S1)), Wishart(f64(3.5), covariance_matrix=f64(S2))
    tp = TD.Wishart(torch.tensor(5.5, dtype=torch.float64), covariance_matrix=torch.tensor(S1))
    tq = TD.Wishart(torch.tensor(3.5, dtype=torch.float64), covariance_matrix=torch.tensor(S2))
    # (unbatched: PyTorch's Bregman KL sums a batched Wishart's df term over the batch)
    np.testing.assert_allclose(kl_divergence(lp, lq).item(), TD.kl_divergence(tp, tq).item(), rtol=1e-10)
    np.testing.assert_allclose(ExponentialFamily.entropy(lp).item(), TD.ExponentialFamily.entropy(tp).item(),
                               rtol=1e-10)
    for a, b in zip(lp._natural_params, tp._natural_params):
        np.testing.assert_allclose(a.numpy(), b.detach().numpy(), rtol=1e-10)
    np.testing.assert_allclose(lp._log_normalizer(*lp._natural_params).item(),
                               tp._log_normalizer(*tp._natural_params).item(), rtol=1e-10)


def test_wishart_moments_against_scipy():
    stats = pytest.importorskip("scipy.stats")
    S = _spd(np.random.default_rng(5), 3)
    d = Wishart(f64(6.5), covariance_matrix=f64(S))
    ref = stats.wishart(6.5, S)
    np.testing.assert_allclose(d.mean.numpy(), ref.mean(), rtol=1e-12)
    np.testing.assert_allclose(d.variance.numpy(), ref.var(), rtol=1e-12)
    np.testing.assert_allclose(d.mode.numpy(), ref.mode(), rtol=1e-12)
    lucid.manual_seed(1)
    n = 20000
    s = d.sample((n,)).numpy()
    c = s - s.mean(0)
    var = d.variance.numpy()
    se_var = np.sqrt(((c ** 2 - var) ** 2).mean(0) / n)
    np.testing.assert_array_less(np.abs((c ** 2).sum(0) / (n - 1) - var), Z * se_var)


# ------------------------------------------------------------------ singular draws


def _singular_then_good(d, bad_first):
    """A stand-in Bartlett sampler: the first call returns zero (singular) matrices at the
    ``bad_first`` sample indices, later calls good ones (2 * identity)."""
    calls = []

    def fake(sample_shape):
        shape = tuple(sample_shape) + d.batch_shape + d.event_shape
        p = d.event_shape[-1]
        good = np.broadcast_to(2 * np.eye(p), shape).copy()
        if not calls:
            good[list(bad_first)] = 0.0
        calls.append(tuple(sample_shape))
        return f64(good)

    return fake, calls


def test_wishart_redraws_singular_samples():
    d = Wishart(f64(3.0), covariance_matrix=f64(np.eye(2)).expand((3, 2, 2)))
    d._bartlett_sampling, calls = _singular_then_good(d, [1, 3])
    with pytest.warns(UserWarning, match="singular sample detected"):
        x = d.rsample((4,))
    assert len(calls) == 2  # one redraw fixed it
    np.testing.assert_array_equal(x.numpy(), np.broadcast_to(2 * np.eye(2), (4, 3, 2, 2)))
    # max_try_correction=0 returns the singular draws as they are
    d._bartlett_sampling, calls = _singular_then_good(d, [1, 3])
    with pytest.warns(UserWarning, match="singular sample detected"):
        x = d.rsample((4,), max_try_correction=0)
    assert len(calls) == 1
    np.testing.assert_array_equal(x.numpy()[[1, 3]], 0.0)
    np.testing.assert_array_equal(x.numpy()[[0, 2]], np.broadcast_to(2 * np.eye(2), (2, 3, 2, 2)))


def test_wishart_good_samples_draw_no_warning():
    d = Wishart(f64([4.0, 6.0]), covariance_matrix=f64(np.eye(3)))
    lucid.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # PyTorch 2.13 warns "Singular sample detected." on every draw
        x = d.rsample((50,))
    assert bool(constraints.positive_definite.check(x).all())


def test_wishart_low_df_redraws_until_positive_definite():
    # float32, df just above ndim - 1: the Bartlett diagonal underflows for ~40% of draws.
    with pytest.warns(UserWarning, match="low df"):
        d = Wishart(lucid.tensor(1.02, dtype=lucid.float32), covariance_matrix=lucid.eye(2, dtype=lucid.float32))
    n = 2000
    lucid.manual_seed(0)
    raw = (~constraints.positive_definite.check(d._bartlett_sampling((n,)))).numpy().mean()
    assert raw > 0.2
    lucid.manual_seed(1)
    with pytest.warns(UserWarning, match="singular sample detected"):
        x = d.rsample((n,))
    after = (~constraints.positive_definite.check(x)).numpy().mean()
    # each of the 10 redraws leaves a singular draw with probability about raw: raw**11 << 1%
    assert after < 0.01


def test_wishart_rsample_under_vmap_and_grad():
    S = f64(np.array([[2.0, 0.3], [0.3, 1.0]]))
    dfs = f64([3.0, 5.0])

    def trace_draw(df):
        return Wishart(df, covariance_matrix=S).rsample().diagonal(0, -2, -1).sum()

    lucid.manual_seed(0)
    out = lucid.func.vmap(trace_draw, randomness="different")(dfs)
    assert out.shape == (2,) and bool((out > 0).all())
    g = lucid.func.grad(lambda df: trace_draw(df))(f64(4.0))
    assert np.isfinite(g.item())
