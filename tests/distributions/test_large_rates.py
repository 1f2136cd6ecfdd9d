"""Poisson quantiles and draws at rates where scipy's pdtrik fails (NaN from about 1e11: half
the draws of Poisson(1e12) used to be 0) and where a float64 search runs out of steps (above
2**52). See NOTE [Discrete quantiles on a device]."""
import numpy as np
import pytest

import lucid
from lucid.distributions._sampling import poisson_icdf

Z = {0.01: -2.3263478740, 0.5: 0.0, 0.99: 2.3263478740}


@pytest.mark.parametrize("lam", [1e9, 1e12, 1e14, 5e15, 4e20])
def test_quantiles_are_the_normal_ones_at_huge_rates(lam):
    u = lucid.tensor(list(Z), dtype=lucid.float64)
    q = poisson_icdf(u, lucid.full((3,), lam, dtype=lucid.float64)).cpu().numpy()
    z = (q - lam) / np.sqrt(lam)
    # the Poisson quantile's z-score is the normal one plus a skewness term ~ (z^2 - 1) / (6 sqrt(lam))
    np.testing.assert_allclose(z, list(Z.values()), atol=5e-4)
    assert (q == np.round(q)).all()


@pytest.mark.parametrize("make", [
    lambda: lucid.distributions.Poisson(lucid.tensor([1e12, 1e14, 2e20], dtype=lucid.float64)),
    lambda: lucid.distributions.NegativeBinomial(total_count=lucid.tensor([1e13], dtype=lucid.float64),
                                                 probs=lucid.tensor([0.5], dtype=lucid.float64)),
])
def test_draws_at_huge_rates_are_never_zero_and_well_spread(make):
    lucid.manual_seed(5)
    d = make()
    s = d.sample((400,)).cpu().numpy()
    assert not (s == 0).any()
    z = (s - d.mean.cpu().numpy()) / np.sqrt(d.variance.cpu().numpy())
    assert (abs(z.mean(0)) < 0.25).all() and (abs(z.std(0) - 1) < 0.15).all(), (z.mean(0), z.std(0))


def test_poisson_function_at_huge_and_infinite_rates():
    lucid.manual_seed(3)
    rates = lucid.tensor([1e19, 4e20, float("inf"), 0.0], dtype=lucid.float64)
    draws = lucid.poisson(lucid.stack([rates] * 200)).cpu().numpy()
    assert np.isinf(draws[:, 2]).all() and (draws[:, 3] == 0).all() and (draws == np.round(draws)).all()
    for j, lam in ((0, 1e19), (1, 4e20)):
        z = (draws[:, j] - lam) / np.sqrt(lam)
        assert abs(z.mean()) < 0.25 and abs(z.std() - 1) < 0.15, (lam, z.mean(), z.std())
