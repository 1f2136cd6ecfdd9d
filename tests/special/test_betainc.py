"""lucid.special.betainc (regularized incomplete beta) and Beta.cdf, which is built on it.

The op database (tests/ops/db_complex_more.py) checks values against SciPy, gradients in x
against finite differences and vmap against loops; here: closed forms, the x-derivative
against the Beta density, the refusal of derivatives in a and b, dtypes and errors.
"""
import math

import numpy as np
import pytest
import scipy.special as sp
import scipy.stats as st

import lucid
import lucid.special as S
from lucid.distributions import Beta


def t64(*v):
    return lucid.tensor(np.array(v, dtype=np.float64))


def test_closed_forms():
    x = t64(0.0, 0.1, 0.35, 0.8, 1.0)
    xn = x.numpy()
    np.testing.assert_allclose(S.betainc(1.0, 1.0, x).numpy(), xn, rtol=1e-14, atol=1e-16)  # uniform
    np.testing.assert_allclose(S.betainc(3.0, 1.0, x).numpy(), xn ** 3, rtol=1e-13, atol=1e-16)  # I_x(a, 1) = x^a
    np.testing.assert_allclose(S.betainc(1.0, 2.5, x).numpy(), 1 - (1 - xn) ** 2.5, rtol=1e-13, atol=1e-16)
    # I_x(2, 2) = 3x^2 - 2x^3 and the symmetry I_x(a, b) = 1 - I_{1-x}(b, a)
    np.testing.assert_allclose(S.betainc(2.0, 2.0, x).numpy(), 3 * xn ** 2 - 2 * xn ** 3, rtol=1e-13, atol=1e-16)
    a, b = t64(0.7, 2.0, 5.5), t64(1.3, 0.4, 3.0)
    y = t64(0.2, 0.5, 0.9)
    np.testing.assert_allclose(S.betainc(a, b, y).numpy(), 1 - S.betainc(b, a, 1 - y).numpy(), rtol=1e-12)


def test_values_match_scipy_with_broadcasting():
    rng = np.random.default_rng(3)
    a, b, x = rng.uniform(0.3, 6, (3, 1)), rng.uniform(0.3, 6, (1, 4)), rng.uniform(0, 1, (3, 4))
    got = S.betainc(lucid.tensor(a), lucid.tensor(b), lucid.tensor(x))
    assert got.shape == (3, 4) and got.dtype == lucid.float64
    np.testing.assert_allclose(got.numpy(), sp.betainc(a, b, x), rtol=1e-14)


def test_gradient_in_x_is_the_beta_density():
    a, b = t64(0.8, 2.0, 4.0), t64(1.7, 1.0, 2.5)
    x = t64(0.3, 0.55, 0.9).requires_grad_()
    S.betainc(a, b, x).sum().backward()
    expect = st.beta.pdf(x.detach().numpy(), a.numpy(), b.numpy())
    np.testing.assert_allclose(x.grad.numpy(), expect, rtol=1e-12)
    # a = 1 at x = 0 and b = 1 at x = 1: the density is finite there (b, and a, respectively)
    x0 = t64(0.0, 1.0).requires_grad_()
    S.betainc(t64(1.0, 3.0), t64(2.0, 1.0), x0).sum().backward()
    np.testing.assert_allclose(x0.grad.numpy(), [2.0, 3.0], rtol=1e-14)


def test_gradcheck_and_forward_mode_in_x():
    a = t64(0.6, 2.0, 3.5).reshape(3, 1)
    x = t64(0.15, 0.5, 0.85).requires_grad_()
    f = lambda v: S.betainc(a, 1.4, v)  # noqa: E731
    assert lucid.autograd.gradcheck(f, (x,), check_forward_ad=True, check_batched_grad=True)
    assert lucid.autograd.gradgradcheck(f, (x,))


@pytest.mark.parametrize("which", [0, 1])
def test_no_derivative_in_a_or_b(which):
    args = [t64(2.0), t64(3.0), t64(0.4)]
    args[which].requires_grad_()
    name = "ab"[which]
    with pytest.raises(NotImplementedError, match=f"betainc: not differentiable with respect to {name}"):
        S.betainc(*args).backward()
    with pytest.raises(NotImplementedError, match=f"not differentiable with respect to {name}"):
        lucid.func.jvp(lambda v: S.betainc(*[v if i == which else args[i].detach() for i in range(3)]),
                       (args[which].detach(),), (t64(1.0),))


def test_dtypes_and_errors():
    assert S.betainc(2, 3, lucid.tensor([0.5])).dtype == lucid.float32
    assert S.betainc(lucid.tensor([2]), lucid.tensor([3]), lucid.tensor([1])).dtype == lucid.float32
    assert S.betainc(2.0, 3.0, 0.5).item() == pytest.approx(0.6875, rel=1e-6)  # 11/16
    half = S.betainc(t64(2.0).float(), 3.0, t64(0.5).float())
    assert half.dtype == lucid.float32 and half.item() == pytest.approx(0.6875, rel=1e-7)
    assert math.isnan(S.betainc(2.0, 3.0, t64(1.5)).item())  # outside [0, 1], as SciPy
    with pytest.raises(TypeError, match="betainc: expected real inputs, got dtype complex"):
        S.betainc(1.0, 2.0, lucid.tensor([0.5j]))
    with pytest.raises(ValueError, match="betainc"):
        S.betainc(t64(1.0, 2.0), 1.0, t64(0.1, 0.2, 0.3))


def test_beta_cdf():
    c1, c0 = t64(2.0, 0.5, 4.0), t64(3.0, 0.5, 1.5)
    d = Beta(c1, c0)
    v = t64(0.5, 0.25, 0.7).requires_grad_()
    cdf = d.cdf(v)
    np.testing.assert_allclose(cdf.detach().numpy(), st.beta.cdf(v.detach().numpy(), c1.numpy(), c0.numpy()),
                               rtol=1e-13)
    np.testing.assert_allclose(cdf.detach().numpy()[0], 11 / 16, rtol=1e-14)
    cdf.sum().backward()  # d cdf / d value is the density
    np.testing.assert_allclose(v.grad.numpy(), d.log_prob(v.detach()).exp().numpy(), rtol=1e-12)
    with pytest.raises(ValueError):
        Beta(c1, c0, validate_args=True).cdf(t64(1.5, 0.2, 0.3))


def test_betaincinv_inverts_betainc_with_the_inverse_function_derivative():
    a, b = t64(0.7, 2.0, 5.5), t64(1.3, 0.4, 3.0)
    y = t64(0.1, 0.5, 0.95).requires_grad_()
    x = S.betaincinv(a, b, y)
    np.testing.assert_allclose(x.detach().numpy(), sp.betaincinv(a.numpy(), b.numpy(), y.detach().numpy()), rtol=1e-13)
    np.testing.assert_allclose(S.betainc(a, b, x).detach().numpy(), y.detach().numpy(), rtol=1e-12)
    np.testing.assert_allclose(S.betaincinv(1.0, 1.0, t64(0.25, 0.8)).numpy(), [0.25, 0.8], rtol=1e-14)  # uniform
    np.testing.assert_allclose(S.betaincinv(2.0, 1.0, t64(0.25)).numpy(), [0.5], rtol=1e-14)  # x^2 = y
    x.sum().backward()
    np.testing.assert_allclose(y.grad.numpy(), 1 / st.beta.pdf(x.detach().numpy(), a.numpy(), b.numpy()), rtol=1e-11)
    f = lambda v: S.betaincinv(a.reshape(3, 1), 1.4, v)  # noqa: E731
    v = t64(0.2, 0.6).requires_grad_()
    assert lucid.autograd.gradcheck(f, (v,), check_forward_ad=True, check_batched_grad=True)
    assert lucid.autograd.gradgradcheck(f, (v,))
    with pytest.raises(NotImplementedError, match="betaincinv: not differentiable with respect to b"):
        S.betaincinv(2.0, t64(3.0).requires_grad_(), t64(0.4)).backward()


def test_beta_icdf():
    c1, c0 = t64(2.0, 0.5, 4.0), t64(3.0, 0.5, 1.5)
    d = Beta(c1, c0)
    q = t64(0.6875, 0.3, 0.9).requires_grad_()
    x = d.icdf(q)
    np.testing.assert_allclose(x.detach().numpy(), st.beta.ppf(q.detach().numpy(), c1.numpy(), c0.numpy()), rtol=1e-12)
    assert x.detach().numpy()[0] == pytest.approx(0.5, rel=1e-13)  # I_0.5(2, 3) = 11/16
    np.testing.assert_allclose(d.cdf(x).detach().numpy(), q.detach().numpy(), rtol=1e-12)
    x.sum().backward()  # d icdf / d q = 1 / density
    np.testing.assert_allclose(q.grad.numpy(), 1 / d.log_prob(x.detach()).exp().numpy(), rtol=1e-11)
