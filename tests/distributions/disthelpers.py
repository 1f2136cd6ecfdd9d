"""Shared checks for the distribution tests: moments from seeded samples with tolerances
derived from the sample size, the implicit-reparameterisation formula for rsample
gradients, and float64 helpers."""
import numpy as np

import lucid

Z = 5.0  # tolerance in standard errors: a seeded test with this margin is not flaky


def f64(a):
    return lucid.tensor(np.asarray(a, dtype=np.float64))


def check_moments(d, n=20000, seed=0, check_var=True):
    """Sample mean and variance vs ``d.mean`` / ``d.variance``, to Z standard errors.

    The standard error of the mean is sqrt(var / n); that of the variance
    sqrt((m4 - var^2) / n), with the fourth central moment m4 estimated from the sample.
    """
    lucid.manual_seed(seed)
    s = d.sample((n,)).numpy().astype(np.float64)
    mean, var = d.mean.numpy(), d.variance.numpy()
    se_mean = np.sqrt(var / n)
    np.testing.assert_array_less(np.abs(s.mean(0) - mean), Z * se_mean + 1e-12)
    if check_var:
        c = s - s.mean(0)
        m4 = (c ** 4).mean(0)
        se_var = np.sqrt(np.maximum(m4 - var ** 2, 0) / n)
        np.testing.assert_array_less(np.abs((c ** 2).sum(0) / (n - 1) - var),
                                     Z * se_var + 1e-12)
    return s


def implicit_grad(cdf, log_prob, x, theta, eps=1e-6):
    """``dx/dtheta = -(dF(x; theta)/dtheta) / f(x; theta)`` (x held fixed), by central differences.

    ``cdf(x, theta)`` and ``log_prob(x, theta)`` take float64 arrays; returns an array like x.
    """
    dF = (cdf(x, theta + eps) - cdf(x, theta - eps)) / (2 * eps)
    return -dF / np.exp(log_prob(x, theta))


def per_sample_param(value, n):
    """A parameter of shape (n,) all equal to ``value`` (so d sample_i / d param_i is per sample)."""
    return lucid.tensor(np.full(n, value, dtype=np.float64), requires_grad=True)
