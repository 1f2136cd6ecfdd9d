"""Gamma-family cdfs through lucid.special.gammainc (regularized lower incomplete gamma)."""
import numpy as np
import pytest

import lucid
from lucid.distributions import Chi2, Gamma

stats = pytest.importorskip("scipy.stats")


def f64(*v):
    return lucid.tensor(np.array(v, dtype=np.float64))


def test_gamma_cdf_matches_scipy_and_its_density():
    conc, rate, x = f64(0.5, 2.0, 7.5), f64(1.5, 0.3, 2.0), f64(0.2, 4.0, 3.5)
    got = Gamma(conc, rate).cdf(x).numpy()
    expected = stats.gamma.cdf(x.numpy(), conc.numpy(), scale=1 / rate.numpy())
    np.testing.assert_allclose(got, expected, rtol=1e-10)
    xs = lucid.tensor(x.numpy(), requires_grad=True)
    Gamma(conc, rate).cdf(xs).sum().backward()  # d cdf / dx is the density
    np.testing.assert_allclose(xs.grad.numpy(), np.exp(Gamma(conc, rate).log_prob(x).numpy()), rtol=1e-8)


def test_chi2_cdf_matches_scipy():
    df, x = f64(1.0, 3.0, 10.0), f64(0.5, 2.0, 12.0)
    np.testing.assert_allclose(Chi2(df).cdf(x).numpy(), stats.chi2.cdf(x.numpy(), df.numpy()), rtol=1e-10)
