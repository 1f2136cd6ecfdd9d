"""GeneralizedPareto against SciPy's genpareto (log_prob, cdf, icdf, moments, entropy), its
samples (KS test, moments), pathwise rsample gradients, transforms, and PyTorch when installed."""
import math

import numpy as np
import pytest

import lucid
from lucid.distributions import GeneralizedPareto

from disthelpers import check_moments, f64

# (loc, scale, concentration): heavy tail, exponential (xi = 0), bounded, uniform (xi = -1)
PARAMS = [(0.5, 2.0, 0.3), (-1.0, 1.5, 0.0), (0.0, 2.0, -0.4), (1.0, 3.0, -1.0)]


def _points(loc, scale, c):
    upper = loc - scale / c if c < 0 else loc + 20 * scale
    return loc + (upper - loc) * np.array([0.01, 0.2, 0.5, 0.9])


@pytest.mark.parametrize("loc,scale,c", PARAMS)
def test_generalized_pareto_against_scipy(loc, scale, c):
    stats = pytest.importorskip("scipy.stats")
    ref = stats.genpareto(c, loc=loc, scale=scale)
    d = GeneralizedPareto(f64(loc), f64(scale), f64(c))
    x = _points(loc, scale, c)
    np.testing.assert_allclose(d.log_prob(f64(x)).numpy(), ref.logpdf(x), rtol=1e-10)
    np.testing.assert_allclose(d.cdf(f64(x)).numpy(), ref.cdf(x), rtol=1e-10)
    np.testing.assert_allclose(d.log_survival_function(f64(x)).numpy(), ref.logsf(x), rtol=1e-10)
    np.testing.assert_allclose(d.log_cdf(f64(x)).numpy(), ref.logcdf(x), rtol=1e-10)
    u = np.array([0.05, 0.3, 0.7, 0.99])
    np.testing.assert_allclose(d.icdf(f64(u)).numpy(), ref.ppf(u), rtol=1e-10)
    np.testing.assert_allclose(d.mean.item(), ref.mean(), rtol=1e-12)
    np.testing.assert_allclose(d.variance.item(), ref.var(), rtol=1e-12)
    np.testing.assert_allclose(d.entropy().item(), ref.entropy(), rtol=1e-10)
    assert d.mode.item() == loc
    upper = loc - scale / c if c < 0 else math.inf
    assert d.support.lower_bound.item() == loc and d.support.upper_bound.item() == pytest.approx(upper, rel=1e-15)


def test_generalized_pareto_moments_nan_where_they_do_not_exist():
    d = GeneralizedPareto(f64([0.0, 0.0, 0.0]), f64([1.0, 1.0, 1.0]), f64([0.2, 0.7, 1.2]))
    m, v = d.mean.numpy(), d.variance.numpy()
    np.testing.assert_allclose(m[:2], [1 / 0.8, 1 / 0.3], rtol=1e-12)
    assert math.isnan(m[2]) and math.isnan(v[1]) and math.isnan(v[2])  # PyTorch's nan, not inf
    np.testing.assert_allclose(v[0], 1 / (0.8 ** 2 * 0.6), rtol=1e-12)


def test_generalized_pareto_samples():
    stats = pytest.importorskip("scipy.stats")
    for loc, scale, c in PARAMS:
        d = GeneralizedPareto(f64(loc), f64(scale), f64(c))
        lucid.manual_seed(0)
        s = d.sample((4000,)).numpy()
        assert stats.kstest(s, stats.genpareto(c, loc=loc, scale=scale).cdf).pvalue > 1e-4
    check_moments(GeneralizedPareto(f64([0.5, 0.0]), f64([2.0, 1.0]), f64([0.1, -0.5])))


def test_generalized_pareto_rsample_gradients_are_pathwise():
    loc, scale, c = f64(0.5).requires_grad_(), f64(2.0).requires_grad_(), f64(0.3).requires_grad_()
    lucid.manual_seed(1)
    x = GeneralizedPareto(loc, scale, c).rsample((5,))
    gl, gs, gc = lucid.autograd.grad(x.sum(), [loc, scale, c])
    lucid.manual_seed(1)
    u = lucid.rand((5,), dtype=lucid.float64).numpy()  # the same noise
    xs = x.detach().numpy()
    np.testing.assert_allclose(xs, 0.5 + 2.0 / 0.3 * np.expm1(-0.3 * np.log1p(-u)), rtol=1e-12)
    assert gl.item() == pytest.approx(5.0)
    np.testing.assert_allclose(gs.item(), ((xs - 0.5) / 2.0).sum(), rtol=1e-10)
    q = lambda cc: (0.5 + 2.0 / cc * np.expm1(-cc * np.log1p(-u))).sum()  # noqa: E731
    np.testing.assert_allclose(gc.item(), (q(0.3 + 1e-6) - q(0.3 - 1e-6)) / 2e-6, rtol=1e-6)


def test_generalized_pareto_shapes_expand_validation_and_vmap():
    d = GeneralizedPareto(f64([0.0, 1.0]), 2.0, f64(0.5))
    assert d.batch_shape == (2,) and d.sample((3,)).shape == (3, 2)
    e = d.expand((4, 2))
    assert e.batch_shape == (4, 2) and e.entropy().shape == (4, 2)
    np.testing.assert_allclose(e.log_prob(f64([1.0, 2.0])).numpy(), np.broadcast_to(d.log_prob(f64([1.0, 2.0])).numpy(), (4, 2)))
    with pytest.raises(ValueError, match="scale"):
        GeneralizedPareto(f64(0.0), f64(-1.0), f64(0.5), validate_args=True)
    bounded = GeneralizedPareto(f64(0.0), f64(1.0), f64(-0.5), validate_args=True)  # support [0, 2]
    with pytest.raises(ValueError, match="support"):
        bounded.log_prob(f64(2.5))
    cs = f64([-0.3, 0.0, 0.4])
    lp = lucid.func.vmap(lambda c: GeneralizedPareto(f64(0.0), f64(1.0), c).log_prob(f64(0.7)))(cs)
    np.testing.assert_allclose(lp.numpy(), [GeneralizedPareto(f64(0.0), f64(1.0), f64(c)).log_prob(f64(0.7)).item()
                                            for c in cs.numpy()], rtol=1e-12)


def test_generalized_pareto_matches_torch():
    torch = pytest.importorskip("torch")
    for loc, scale, c in PARAMS:
        ld = GeneralizedPareto(f64(loc), f64(scale), f64(c))
        td = torch.distributions.GeneralizedPareto(*(torch.tensor(v, dtype=torch.float64) for v in (loc, scale, c)))
        x = _points(loc, scale, c)
        # PyTorch 2.13's densities compare float64 parameters with a float32 zero and raise, so
        # those are compared in float32
        t32 = torch.distributions.GeneralizedPareto(*(torch.tensor(v, dtype=torch.float32) for v in (loc, scale, c)))
        for m in ("log_prob", "cdf", "log_cdf", "log_survival_function"):
            np.testing.assert_allclose(getattr(ld, m)(f64(x)).numpy(),
                                       getattr(t32, m)(torch.tensor(x, dtype=torch.float32)).numpy(),
                                       rtol=2e-5, atol=1e-6, err_msg=m)
        u = np.array([0.05, 0.5, 0.99])
        np.testing.assert_allclose(ld.icdf(f64(u)).numpy(), td.icdf(torch.tensor(u)).numpy(), rtol=1e-12)
        for prop in ("mean", "variance", "mode"):
            np.testing.assert_allclose(getattr(ld, prop).numpy(), getattr(td, prop).numpy(), rtol=1e-12)
        np.testing.assert_allclose(ld.entropy().numpy(), td.entropy().numpy(), rtol=1e-12)
        np.testing.assert_allclose(ld.support.upper_bound.numpy(), td.support.upper_bound.numpy(), rtol=1e-15)
