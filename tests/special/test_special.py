"""lucid.special against closed forms, conventions at special points, errors and PyTorch.

The op database (tests/ops/db_special.py) checks every function against SciPy, its
gradients against finite differences and its vmap against loops; here the checks do not
trust SciPy: identities, series, known constants, and PyTorch where it is installed.
"""
import math
import subprocess
import sys

import numpy as np
import pytest

import lucid
import lucid.special as S

EULER = 0.5772156649015329


def t64(*v):
    return lucid.tensor(np.array(v, dtype=np.float64))


def grad_of(f, x):
    x = x.detach().requires_grad_()
    return lucid.autograd.grad(f(x).sum(), x).numpy()


def test_import_lucid_does_not_import_scipy():
    code = "import sys, lucid, lucid.special; print('scipy' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_gamma_family_closed_forms():
    n = t64(1, 2, 3, 4, 5, 6)
    np.testing.assert_allclose(S.gammaln(n).numpy(), [math.log(math.factorial(k - 1)) for k in range(1, 7)],
                               rtol=1e-14, atol=1e-14)
    np.testing.assert_allclose(S.gammaln(t64(0.5)).numpy(), [0.5 * math.log(math.pi)], rtol=1e-14)
    # digamma(n) = -gamma + H_{n-1}; polygamma(1, 1) = pi^2/6; polygamma(2, 1) = -2 zeta(3)
    harm = np.cumsum([0] + [1 / k for k in range(1, 6)])
    np.testing.assert_allclose(S.digamma(n).numpy(), -EULER + harm, rtol=1e-13)
    assert S.psi is S.digamma
    np.testing.assert_allclose(lucid.polygamma(1, t64(1.0)).numpy(), [math.pi ** 2 / 6], rtol=1e-13)
    np.testing.assert_allclose(lucid.polygamma(2, t64(1.0)).numpy(), [-2 * 1.2020569031595942], rtol=1e-13)
    # derivatives chain: d lgamma = digamma, d digamma = polygamma(1), d polygamma(1) = polygamma(2)
    x = t64(0.7, 1.3, 4.0)
    np.testing.assert_allclose(grad_of(S.gammaln, x), S.digamma(x).numpy(), rtol=1e-14)
    np.testing.assert_allclose(grad_of(S.digamma, x), lucid.polygamma(1, x).numpy(), rtol=1e-14)
    np.testing.assert_allclose(grad_of(lambda v: lucid.polygamma(1, v), x), lucid.polygamma(2, x).numpy(),
                               rtol=1e-14)


def test_multigammaln_is_the_sum_of_shifted_lgammas():
    x = t64(2.5, 4.0)
    want = [1.5 * math.log(math.pi) + sum(math.lgamma(v - j / 2) for j in range(3)) for v in (2.5, 4.0)]
    np.testing.assert_allclose(S.multigammaln(x, 3).numpy(), want, rtol=1e-13)
    np.testing.assert_allclose(x.mvlgamma(3).numpy(), want, rtol=1e-13)
    # below (p - 1) / 2: the sum of log|Gamma| terms, inf at a pole (PyTorch 2.13 checks nothing)
    bad = t64(0.9, -1.3, 0.5)
    want_bad = [1.5 * math.log(math.pi) + sum(math.lgamma(v - j / 2) for j in range(3)) for v in (0.9, -1.3)]
    got = S.multigammaln(bad, 3).cpu().numpy()
    np.testing.assert_allclose(got[:2], want_bad, rtol=1e-13)
    assert got[2] == math.inf


def test_error_function_family():
    x = t64(-2.5, -0.3, 0.0, 0.4, 1.7)
    erf = np.array([math.erf(v) for v in (-2.5, -0.3, 0.0, 0.4, 1.7)])
    np.testing.assert_allclose(S.erfinv(lucid.tensor(erf)).numpy(), x.numpy(), rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(S.ndtr(x).numpy(), [0.5 * math.erfc(-v / math.sqrt(2)) for v in x.tolist()],
                               rtol=1e-14)
    np.testing.assert_allclose(S.ndtri(S.ndtr(x)).numpy(), x.numpy(), rtol=1e-12, atol=1e-14)
    # lower tail: log Phi(x) ~ -x^2/2 - log(-x sqrt(2 pi)) - 1/x^2 + 5/(2x^4)
    z = -40.0
    approx = -z * z / 2 - math.log(-z * math.sqrt(2 * math.pi)) - 1 / z ** 2 + 2.5 / z ** 4
    assert abs(S.log_ndtr(t64(z)).item() - approx) < 1e-8  # the next term is O(x^-6)
    np.testing.assert_allclose(grad_of(S.log_ndtr, t64(-40.0)), [40.02498], rtol=1e-6)  # ~ -x, finite
    np.testing.assert_allclose(S.erfcx(t64(30.0)).numpy(), [1 / (30 * math.sqrt(math.pi)) * (1 - 1 / 1800 + 3 / 1800 ** 2 - 15 / 1800 ** 3)],
                               rtol=1e-11)
    # erfinv' = sqrt(pi)/2 exp(erfinv(x)^2); ndtri' = sqrt(2 pi) exp(ndtri(x)^2 / 2)
    y = t64(-0.6, 0.1, 0.8)
    np.testing.assert_allclose(grad_of(S.erfinv, y), math.sqrt(math.pi) / 2 * np.exp(S.erfinv(y).numpy() ** 2),
                               rtol=1e-14)
    assert S.expit is lucid.sigmoid and S.erf is lucid.erf and S.expm1 is lucid.expm1


def _i_series(nu, x, terms=40):
    return sum((x / 2) ** (2 * k + nu) / (math.factorial(k) * math.factorial(k + nu)) for k in range(terms))


def _j_series(nu, x, terms=40):
    return sum((-1) ** k * (x / 2) ** (2 * k + nu) / (math.factorial(k) * math.factorial(k + nu))
               for k in range(terms))


def test_bessel_against_series():
    xs = [-2.0, -0.5, 0.0, 0.3, 1.0, 2.5]
    x = t64(*xs)
    np.testing.assert_allclose(S.i0(x).numpy(), [_i_series(0, v) for v in xs], rtol=1e-13)
    np.testing.assert_allclose(S.i1(x).numpy(), [_i_series(1, v) for v in xs], rtol=1e-13, atol=1e-15)
    np.testing.assert_allclose(S.i0e(x).numpy(), [math.exp(-abs(v)) * _i_series(0, v) for v in xs], rtol=1e-13)
    np.testing.assert_allclose(S.i1e(x).numpy(), [math.exp(-abs(v)) * _i_series(1, v) for v in xs],
                               rtol=1e-13, atol=1e-15)
    np.testing.assert_allclose(S.bessel_j0(x).numpy(), [_j_series(0, v) for v in xs], rtol=1e-13)
    np.testing.assert_allclose(S.bessel_j1(x).numpy(), [_j_series(1, v) for v in xs], rtol=1e-13, atol=1e-15)
    assert S.modified_bessel_i0(x).tolist() == S.i0(x).tolist()
    # Wronskian J1 Y0 - J0 Y1 = 2 / (pi x); K: I0 K1 + I1 K0 = 1 / x
    p = t64(0.5, 1.0, 3.0)
    w = S.bessel_j1(p) * S.bessel_y0(p) - S.bessel_j0(p) * S.bessel_y1(p)
    np.testing.assert_allclose(w.numpy(), 2 / (math.pi * p.numpy()), rtol=1e-12)
    wk = S.i0(p) * S.modified_bessel_k1(p) + S.i1(p) * S.modified_bessel_k0(p)
    np.testing.assert_allclose(wk.numpy(), 1 / p.numpy(), rtol=1e-12)
    np.testing.assert_allclose(S.scaled_modified_bessel_k1(p).numpy(),
                               np.exp(p.numpy()) * S.modified_bessel_k1(p).numpy(), rtol=1e-13)


def test_derivatives_at_removable_singularities():
    z = t64(0.0)
    assert grad_of(S.i1, z).tolist() == [0.5]
    assert grad_of(S.i1e, z).tolist() == [0.5]
    assert grad_of(S.bessel_j1, z).tolist() == [0.5]
    assert grad_of(S.sinc, z).tolist() == [0.0]
    assert grad_of(S.spherical_bessel_j0, z).tolist() == [0.0]
    assert S.sinc(z).item() == 1.0 and S.spherical_bessel_j0(z).item() == 1.0
    # second derivatives at 0: sinc'' = -pi^2/3, j0'' = -1/3
    x = z.detach().requires_grad_()
    g = lucid.autograd.grad(S.sinc(x).sum(), x, create_graph=True)
    assert abs(lucid.autograd.grad(g.sum(), x).item() + math.pi ** 2 / 3) < 1e-12
    g = lucid.autograd.grad(S.spherical_bessel_j0(x).sum(), x, create_graph=True)
    assert abs(lucid.autograd.grad(g.sum(), x).item() + 1 / 3) < 1e-12


def test_xlogy_conventions():
    x, y = t64(0.0, 0.0, 2.0, 0.0), t64(0.0, float("nan"), 3.0, 5.0)
    out = lucid.xlogy(x, y).numpy()
    assert out[0] == 0 and math.isnan(out[1]) and out[2] == pytest.approx(2 * math.log(3)) and out[3] == 0
    xr, yr = x.detach().requires_grad_(), t64(1.5, 2.0, 3.0, 5.0).requires_grad_()
    gx, gy = lucid.autograd.grad(lucid.xlogy(xr, yr).sum(), (xr, yr))
    # log(y) at x == 0 too, 0 only where also y <= 0 (PyTorch's formula; tests/regressions/test_edge_sweep.py)
    np.testing.assert_allclose(gx.numpy(), [math.log(1.5), math.log(2.0), math.log(3), math.log(5.0)])
    np.testing.assert_allclose(gy.numpy(), [0.0, 0.0, 2 / 3, 0.0])
    assert S.xlog1py(t64(0.0), t64(-1.0)).item() == 0.0
    assert lucid.xlogy(2.0, t64(math.e)).item() == pytest.approx(2.0)
    assert t64(2.0).xlogy(t64(math.e)).item() == pytest.approx(2.0)


def test_entr():
    out = S.entr(t64(-1.0, 0.0, 0.5)).numpy()
    assert out[0] == -math.inf and out[1] == 0 and out[2] == pytest.approx(0.5 * math.log(2))
    np.testing.assert_allclose(grad_of(S.entr, t64(0.5, 2.0)), [-(1 + math.log(0.5)), -(1 + math.log(2.0))])


def test_zeta():
    np.testing.assert_allclose(S.zeta(t64(2.0, 4.0), 1.0).numpy(), [math.pi ** 2 / 6, math.pi ** 4 / 90], rtol=1e-14)
    q = t64(1.0, 2.0).requires_grad_()
    g = lucid.autograd.grad(S.zeta(3.0, q).sum(), q)
    np.testing.assert_allclose(g.numpy(), -3 * S.zeta(4.0, q).detach().numpy(), rtol=1e-14)
    x = t64(2.0, 3.0).requires_grad_()
    with pytest.raises(NotImplementedError, match="not differentiable with respect to x"):
        S.zeta(x, q).sum().backward()


def test_polynomials_closed_forms():
    theta = np.linspace(0.1, 3.0, 7)
    x = lucid.tensor(np.cos(theta))
    for n in range(7):
        np.testing.assert_allclose(S.chebyshev_polynomial_t(x, n).numpy(), np.cos(n * theta), atol=1e-13)
        np.testing.assert_allclose(S.chebyshev_polynomial_u(x, n).numpy(),
                                   np.sin((n + 1) * theta) / np.sin(theta), atol=1e-12)
    v = np.array([-1.3, 0.2, 2.0])
    xv = lucid.tensor(v)
    np.testing.assert_allclose(S.hermite_polynomial_h(xv, 3).numpy(), 8 * v ** 3 - 12 * v, rtol=1e-14)
    np.testing.assert_allclose(S.hermite_polynomial_he(xv, 4).numpy(), v ** 4 - 6 * v ** 2 + 3, rtol=1e-13)
    np.testing.assert_allclose(S.legendre_polynomial_p(xv, 3).numpy(), (5 * v ** 3 - 3 * v) / 2, rtol=1e-14)
    np.testing.assert_allclose(S.laguerre_polynomial_l(xv, 2).numpy(), (v ** 2 - 4 * v + 2) / 2, rtol=1e-14)
    np.testing.assert_allclose(S.shifted_chebyshev_polynomial_t(xv, 2).numpy(),
                               2 * (2 * v - 1) ** 2 - 1, rtol=1e-14)
    assert S.legendre_polynomial_p(xv, -2).tolist() == [0.0, 0.0, 0.0]
    # derivative in x: T_n' = n U_{n-1}
    np.testing.assert_allclose(grad_of(lambda t: S.chebyshev_polynomial_t(t, 5), x),
                               5 * S.chebyshev_polynomial_u(x, 4).numpy(), atol=1e-12)


def test_polynomial_tensor_degree_broadcasts_and_is_not_differentiable():
    x = t64(0.3, -0.5)
    n = lucid.tensor([[0], [1], [3], [-1]])
    out = S.hermite_polynomial_he(x, n)
    assert out.shape == (4, 2)
    for i, k in enumerate([0, 1, 3, -1]):
        want = S.hermite_polynomial_he(x, k).numpy()
        np.testing.assert_allclose(out.numpy()[i], want, rtol=1e-15)
    with pytest.raises(RuntimeError, match="not differentiable with respect to n"):
        S.legendre_polynomial_p(x, t64(2.0).requires_grad_())
    with pytest.raises(TypeError, match="n must be an integer"):
        S.legendre_polynomial_p(x, 1.5)


def test_polygamma_errors():
    with pytest.raises(TypeError, match="polygamma: n must be a non-negative int"):
        lucid.polygamma(t64(1.0), t64(1.0))
    with pytest.raises(RuntimeError, match="non-negative"):
        lucid.polygamma(-1, t64(1.0))


def test_dtypes_float32_in_float32_out_and_ints_promote():
    x = lucid.tensor([0.5, 1.5], dtype=lucid.float32)
    for f in (S.gammaln, S.digamma, S.erfinv, S.i0, S.i1e, S.bessel_j0, S.sinc, S.entr, S.ndtr, S.log_ndtr):
        assert f(x).dtype == lucid.float32, f.__name__
    assert S.gammaln(lucid.tensor([3, 4])).dtype == lucid.get_default_dtype()
    assert lucid.xlogy(x, 2).dtype == lucid.float32


@pytest.mark.parametrize("f", [S.gammaln, S.digamma, S.erfinv, S.i1, S.log_ndtr, S.bessel_j1,
                               lambda v: lucid.polygamma(2, v)])
def test_float32_gradcheck(f):
    x = lucid.tensor([0.35, 0.6], dtype=lucid.float32, requires_grad=True)
    assert lucid.autograd.gradcheck(f, (x,))


# ------------------------------------------------------------------- PyTorch

_PARITY = ["gammaln", "digamma", "erfinv", "erfcx", "ndtri", "ndtr", "log_ndtr", "i0", "i0e", "i1", "i1e",
           "entr", "sinc", "bessel_j0", "bessel_j1", "bessel_y0", "bessel_y1", "modified_bessel_k0",
           "modified_bessel_k1", "scaled_modified_bessel_k0", "scaled_modified_bessel_k1",
           "spherical_bessel_j0", "modified_bessel_i0", "modified_bessel_i1"]


@pytest.mark.parametrize("name", _PARITY)
def test_torch_parity_values_and_grads(name):
    torch = pytest.importorskip("torch")
    v = np.array([0.15, 0.4, 0.85])
    got = getattr(S, name)(lucid.tensor(v))
    xt = torch.tensor(v, requires_grad=True)
    want = getattr(torch.special, name)(xt)
    np.testing.assert_allclose(got.numpy(), want.detach().numpy(), rtol=1e-12)
    if want.requires_grad:  # PyTorch has no derivative for the Bessel J/Y/K functions (we do)
        (gt,) = torch.autograd.grad(want.sum(), xt)
        # PyTorch's trigamma (digamma's derivative) is good to ~1e-9 only; SciPy's to ~1e-15
        np.testing.assert_allclose(grad_of(getattr(S, name), lucid.tensor(v)), gt.numpy(), rtol=1e-8)


def test_torch_parity_binary_and_polynomials():
    torch = pytest.importorskip("torch")
    x, y = np.array([0.0, 0.5, 2.0]), np.array([0.3, 1.5, 4.0])
    for name in ("xlogy", "xlog1py", "zeta"):
        np.testing.assert_allclose(getattr(S, name)(lucid.tensor(x + (2 if name == "zeta" else 0)), lucid.tensor(y)).numpy(),
                                   getattr(torch.special, name)(torch.tensor(x + (2 if name == "zeta" else 0)),
                                                                torch.tensor(y)).numpy(), rtol=1e-12)
    v = np.array([-0.8, 0.1, 0.45, 0.9])
    for name in ("chebyshev_polynomial_t", "chebyshev_polynomial_u", "chebyshev_polynomial_v",
                 "chebyshev_polynomial_w", "shifted_chebyshev_polynomial_t", "shifted_chebyshev_polynomial_u",
                 "shifted_chebyshev_polynomial_v", "shifted_chebyshev_polynomial_w", "hermite_polynomial_h",
                 "hermite_polynomial_he", "laguerre_polynomial_l", "legendre_polynomial_p"):
        for n in (0, 1, 4, 7):
            np.testing.assert_allclose(getattr(S, name)(lucid.tensor(v), n).numpy(),
                                       getattr(torch.special, name)(torch.tensor(v), n).numpy(),
                                       rtol=1e-10, atol=1e-12, err_msg=f"{name} n={n}")
    xt = torch.tensor([0.7, 1.9], dtype=torch.float64, requires_grad=True)
    (g,) = torch.autograd.grad(torch.polygamma(2, xt).sum(), xt)
    np.testing.assert_allclose(grad_of(lambda t: lucid.polygamma(2, t), t64(0.7, 1.9)), g.numpy(), rtol=1e-12)
    np.testing.assert_allclose(S.multigammaln(t64(2.5, 3.1), 3).numpy(),
                               torch.special.multigammaln(torch.tensor([2.5, 3.1], dtype=torch.float64), 3).numpy(),
                               rtol=1e-13)


def test_incomplete_gamma():
    x = t64(0.0, 0.5, 2.0, 7.0)
    np.testing.assert_allclose(S.gammainc(1.0, x).numpy(), 1 - np.exp(-x.numpy()), rtol=1e-14, atol=1e-16)
    # P(2, x) = 1 - (1 + x) e^-x; Q = 1 - P
    np.testing.assert_allclose(S.gammaincc(t64(2.0), x).numpy(), (1 + x.numpy()) * np.exp(-x.numpy()), rtol=1e-13)
    np.testing.assert_allclose(grad_of(lambda v: S.gammainc(3.0, v), t64(0.5, 2.0)),
                               [0.5 ** 2 * math.exp(-0.5) / 2, 4 * math.exp(-2.0) / 2], rtol=1e-13)
    assert grad_of(lambda v: S.gammainc(1.0, v), t64(0.0)).tolist() == [1.0]
    a = t64(2.0).requires_grad_()
    with pytest.raises(NotImplementedError, match="not differentiable with respect to the shape a"):
        S.gammainc(a, t64(1.0)).sum().backward()
    assert t64(2.0).igamma(t64(1.0)).item() == pytest.approx(1 - 2 * math.exp(-1.0), rel=1e-14)


def test_incomplete_gamma_parity_with_torch():
    torch = pytest.importorskip("torch")
    a, x = np.array([0.5, 1.0, 3.5]), np.array([0.2, 1.5, 4.0])
    for name in ("gammainc", "gammaincc"):
        xt = torch.tensor(x, requires_grad=True)
        want = getattr(torch.special, name)(torch.tensor(a), xt)
        (gt,) = torch.autograd.grad(want.sum(), xt)
        got = getattr(S, name)(lucid.tensor(a), lucid.tensor(x))
        np.testing.assert_allclose(got.numpy(), want.detach().numpy(), rtol=1e-12)
        np.testing.assert_allclose(grad_of(lambda v: getattr(S, name)(lucid.tensor(a), v), lucid.tensor(x)),
                                   gt.numpy(), rtol=1e-10)


def test_airy_ai_closed_forms_and_its_equation():
    import math

    x = lucid.tensor([0.0, 1.5, -2.0], dtype=lucid.float64, requires_grad=True)
    y = lucid.special.airy_ai(x)
    # Ai(0) = 1 / (3^(2/3) Gamma(2/3)), Ai'(0) = -1 / (3^(1/3) Gamma(1/3))
    assert abs(y[0].item() - 1 / (3 ** (2 / 3) * math.gamma(2 / 3))) < 1e-15
    g = lucid.autograd.grad(y.sum(), x, create_graph=True)  # one input: one gradient (seed 004)
    assert abs(g[0].item() + 1 / (3 ** (1 / 3) * math.gamma(1 / 3))) < 1e-15
    gg = lucid.autograd.grad(g.sum(), x)
    np.testing.assert_allclose(gg.numpy(), (x * y).detach().numpy(), rtol=1e-13, atol=1e-15)  # Ai'' = x Ai
    assert lucid.special.airy_ai(lucid.tensor([1.0])).dtype == lucid.float32
    with pytest.raises(TypeError, match="airy_ai.*complex"):
        lucid.special.airy_ai(lucid.tensor([1j]))
