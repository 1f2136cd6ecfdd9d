"""Silent wrong answers in special, fft, linalg and distributions, fixed to PyTorch 2.13's values.

Found by a differential sweep against torch 2.13 (every public name of the four namespaces,
their keyword options, float32/float64, real/complex, boundaries; values, dtypes, shapes,
gradients and exception types):

1. ``special`` orthogonal polynomials: degree 0 is 1 and a negative degree 0 also at inf/nan
   (was nan), so T_2(inf) = inf (was nan).
2. ``fft``: a 1-D ``n`` below 1 raises (``n=-1`` silently meant "keep the size"); a bad
   ``norm`` raises RuntimeError; ``fftfreq``/``rfftfreq`` honour ``dtype`` (always gave
   float32), accept ``n=0`` and refuse integer dtypes and negative sizes.
3. ``linalg``: ``eigh``/``eigvalsh`` with UPLO='U' on complex input returned the eigenvectors
   of the conjugate matrix; ``cholesky(upper=True)`` and ``cholesky_ex(upper=True)`` read the
   lower triangle (PyTorch reads the upper one); ``lstsq`` gave residuals for the default
   driver (gelsy gives none) and complex-typed residuals / singular values; ``pinv`` refused
   tensor tolerances; ``solve(left=False)`` took a vector B; ``vander`` took N < 2;
   ``svd``/``svdvals`` refused ``driver=None``.
4. ``distributions``: Bernoulli-family log_prob / entropy gradients were wrong at p = 1/2
   (logits 0); statistics that are inf/nan off their domain had nan gradients where PyTorch's
   are 0; VonMises's support is the real line; Uniform's mode keeps a graph.

Expected values are closed forms or NumPy; torch is optional (parity tests skip without it).
"""
import math

import numpy as np
import pytest

import lucid
import lucid.distributions as D
import lucid.fft as FFT
import lucid.linalg as L
import lucid.special as S


def _t(a, rg=False):
    return lucid.tensor(np.asarray(a), requires_grad=rg)


def _grad(out, x):
    return lucid.autograd.grad(out.sum(), [x], retain_graph=True)[0].numpy()


# ------------------------------------------------------------------ 1. special polynomials

POLYS = ["chebyshev_polynomial_t", "chebyshev_polynomial_u", "chebyshev_polynomial_v", "chebyshev_polynomial_w",
         "hermite_polynomial_h", "hermite_polynomial_he", "laguerre_polynomial_l", "legendre_polynomial_p",
         "shifted_chebyshev_polynomial_t"]


@pytest.mark.parametrize("name", POLYS)
def test_polynomial_degree_zero_and_negative_are_constants_at_inf_and_nan(name):
    fn = getattr(S, name)
    x = _t([math.inf, -math.inf, math.nan, 0.5])
    assert fn(x, 0).tolist() == [1.0, 1.0, 1.0, 1.0]
    assert fn(x, -1).tolist() == [0.0, 0.0, 0.0, 0.0]
    n = _t(np.array([0, -2, 0, 0]))
    assert fn(x, n).tolist() == [1.0, 0.0, 1.0, 1.0]


def test_polynomial_degree_two_at_infinity():
    x = _t([math.inf, -math.inf])
    assert S.chebyshev_polynomial_t(x, 2).tolist() == [math.inf, math.inf]  # 2 x^2 - 1
    assert S.hermite_polynomial_h(x, 2).tolist() == [math.inf, math.inf]  # 4 x^2 - 2
    assert S.legendre_polynomial_p(x, 2).tolist() == [math.inf, math.inf]  # (3 x^2 - 1) / 2


# ------------------------------------------------------------------------------- 2. fft

@pytest.mark.parametrize("name", ["fft", "ifft", "rfft", "irfft", "hfft", "ihfft"])
def test_fft_negative_n_raises(name):
    with pytest.raises(RuntimeError, match=rf"fft.{name}: Invalid number of data points \(-1\)"):
        getattr(FFT, name)(_t([1.0, 2.0, 3.0, 4.0]), n=-1)


def test_fft_nd_s_minus_one_still_keeps_the_size():
    x = np.arange(6.0).reshape(2, 3)
    np.testing.assert_allclose(FFT.fft2(_t(x), s=(-1, 4)).numpy(), np.fft.fft2(x, s=(2, 4)), atol=1e-12)


def test_fft_bad_norm_is_a_runtime_error():
    with pytest.raises(RuntimeError, match="fft.rfft: Invalid normalization mode"):
        FFT.rfft(_t([1.0, 2.0]), norm="bad")


def test_fftfreq_honours_dtype_and_edge_sizes():
    f = FFT.fftfreq(5, 0.1, dtype=lucid.float64)
    assert f.dtype == lucid.float64
    assert f.tolist() == [k / 0.5 for k in (0, 1, 2, -2, -1)]
    r = FFT.rfftfreq(4, dtype=lucid.float64)
    assert r.dtype == lucid.float64 and r.tolist() == [0.0, 0.25, 0.5]
    assert FFT.fftfreq(4).dtype == lucid.float32
    assert FFT.fftfreq(0).shape == (0,)
    assert math.isnan(FFT.rfftfreq(0).item())  # 0 * (1 / 0): PyTorch's [nan]
    got = FFT.fftfreq(3, 0.0).tolist()
    assert math.isnan(got[0]) and got[1:] == [math.inf, -math.inf]
    f = FFT.fftfreq(3, requires_grad=True)
    assert f.requires_grad and f.is_leaf
    with pytest.raises(RuntimeError, match="floating point or complex dtype"):
        FFT.fftfreq(4, dtype=lucid.int64)
    with pytest.raises(RuntimeError, match="negative dimension"):
        FFT.fftfreq(-2)
    with pytest.raises(RuntimeError, match="negative dimension"):
        FFT.rfftfreq(-4)  # PyTorch sizes it n / 2 + 1 = -1 (C division)


# ---------------------------------------------------------------------------- 3. linalg

def _upper_hermitian(a):
    """The Hermitian matrix that ``a``'s upper triangle stands for."""
    up = np.triu(a, 1)
    return up + np.conj(up.T) + np.diag(a.diagonal().real)


def test_eigh_upper_complex_gives_the_eigenvectors_of_the_upper_triangle():
    rng = np.random.default_rng(0)
    a = rng.standard_normal((3, 3)) + 1j * rng.standard_normal((3, 3))  # lower triangle: noise
    h = _upper_hermitian(a)
    w, v = L.eigh(_t(a), UPLO="U")
    w, v = w.numpy(), v.numpy()
    np.testing.assert_allclose(w, np.linalg.eigvalsh(h), atol=1e-12)
    np.testing.assert_allclose(h @ v, v * w, atol=1e-12)
    w2, v2 = L.eigh(_t(a), UPLO="u")  # PyTorch takes lower case too
    np.testing.assert_allclose(h @ v2.numpy(), v2.numpy() * w2.numpy(), atol=1e-12)
    with pytest.raises(RuntimeError, match="linalg.eigh: Expected UPLO argument to be 'L' or 'U'"):
        L.eigvalsh(_t(a), UPLO="X")


@pytest.mark.parametrize("cplx", [False, True])
def test_cholesky_upper_reads_the_upper_triangle(cplx):
    rng = np.random.default_rng(1)
    m = rng.standard_normal((3, 3)) + (1j * rng.standard_normal((3, 3)) if cplx else 0)
    h = m @ np.conj(m.T) + 3 * np.eye(3)
    a = np.triu(h) + np.tril(np.full((3, 3), 99.0), -1)  # the lower triangle is never read
    want = np.conj(np.linalg.cholesky(h).T)
    np.testing.assert_allclose(L.cholesky(_t(a), upper=True).numpy(), want, atol=1e-12)
    u, info = L.cholesky_ex(_t(a), upper=True)
    np.testing.assert_allclose(u.numpy(), want, atol=1e-12)
    assert info.item() == 0
    np.testing.assert_allclose(lucid.cholesky(_t(a), upper=True).numpy(), want, atol=1e-12)


def test_lstsq_residuals_follow_the_driver_and_are_real():
    rng = np.random.default_rng(2)
    a, b = rng.standard_normal((5, 3)), rng.standard_normal((5, 2))
    assert L.lstsq(_t(a), _t(b)).residuals.shape == (0,)  # gelsy, PyTorch's CPU default
    assert L.lstsq(_t(a), _t(b), driver="gelsy").residuals.shape == (0,)
    want = np.linalg.lstsq(a, b, rcond=None)[1]
    for driver in ("gelsd", "gelss", "gels"):
        np.testing.assert_allclose(L.lstsq(_t(a), _t(b), driver=driver).residuals.numpy(), want, rtol=1e-10)
    ac, bc = a + 1j * rng.standard_normal((5, 3)), b + 1j * rng.standard_normal((5, 2))
    res = L.lstsq(_t(ac), _t(bc), driver="gelsd")
    assert res.residuals.dtype == lucid.float64 and res.singular_values.dtype == lucid.float64
    np.testing.assert_allclose(res.residuals.numpy(), np.linalg.lstsq(ac, bc, rcond=None)[1], rtol=1e-10)
    assert L.lstsq(_t(ac), _t(bc)).residuals.dtype == lucid.float64  # the empty one too


def test_pinv_takes_one_tolerance_per_matrix():
    a = np.stack([np.diag([3.0, 2.0, 1.2])] * 2)
    got = L.pinv(_t(a), atol=_t([1.5, 0.5])).numpy()
    np.testing.assert_allclose(got[0], np.diag([1 / 3, 1 / 2, 0.0]), atol=1e-14)
    np.testing.assert_allclose(got[1], np.diag([1 / 3, 1 / 2, 1 / 1.2]), atol=1e-14)
    got = L.pinv(_t(a), rtol=_t([0.5, 0.1]), hermitian=True).numpy()  # cut 1.5 and 0.3
    np.testing.assert_allclose(got[0], np.diag([1 / 3, 1 / 2, 0.0]), atol=1e-14)
    np.testing.assert_allclose(got[1], np.diag([1 / 3, 1 / 2, 1 / 1.2]), atol=1e-14)
    # the kept part is differentiable: d pinv(A)_00 / d A_00 = -1 / 9 (A diagonal)
    x = _t(a, True)
    np.testing.assert_allclose(_grad(L.pinv(x, atol=_t([1.5, 0.5]))[..., 0, 0], x)[:, 0, 0], [-1 / 9] * 2)


def test_solve_left_false_refuses_a_vector():
    with pytest.raises(RuntimeError, match="linalg.solve: Incompatible shapes"):
        L.solve(_t(np.eye(3)), _t([1.0, 2.0, 3.0]), left=False)
    with pytest.raises(RuntimeError, match="linalg.solve: Incompatible shapes"):
        L.solve(_t(np.stack([np.eye(3)] * 2)), _t(np.ones((2, 3))), left=False)
    with pytest.raises(RuntimeError, match="linalg.solve_ex: left=False needs a matrix B"):
        L.solve_ex(_t(np.stack([np.eye(3)] * 2)), _t(np.ones((2, 3))), left=False)
    x = L.solve(_t(np.diag([2.0, 4.0])), _t([[2.0, 4.0]]), left=False)  # X A = B
    assert x.tolist() == [[1.0, 1.0]]


def test_vander_needs_two_columns_and_svd_takes_driver_none():
    for n in (0, 1):
        with pytest.raises(RuntimeError, match="N must be greater than 1"):
            L.vander(_t([1.0, 2.0]), N=n)
    with pytest.raises(RuntimeError, match="N must be greater than 1"):
        L.vander(_t([2.0]))
    a = _t(np.diag([3.0, 2.0]))
    np.testing.assert_allclose(L.svd(a, driver=None).S.numpy(), [3.0, 2.0], rtol=1e-14)
    np.testing.assert_allclose(L.svdvals(a, driver=None).numpy(), [3.0, 2.0], rtol=1e-14)
    if a.device.type == "cpu":
        with pytest.raises(RuntimeError, match="only supported on CUDA"):
            L.svdvals(a, driver="gesvd")
    else:  # on a device the cuSOLVER names are accepted (one routine computes them all)
        np.testing.assert_allclose(L.svdvals(a, driver="gesvd").cpu().numpy(), [3.0, 2.0], rtol=1e-14)
    with pytest.raises(RuntimeError, match="svd: "):
        L.svd(a, driver="magic")


# --------------------------------------------------------------------- 4. distributions

def test_bernoulli_family_gradients_at_one_half():
    p = _t([0.5], True)
    # d/dp log p = 2; d/dp H = log((1 - p) / p) = 0
    assert _grad(D.Bernoulli(probs=p).log_prob(_t([1.0])), p).tolist() == [2.0]
    assert _grad(D.Bernoulli(probs=p).entropy(), p).tolist() == [0.0]
    lg = _t([0.0], True)
    assert _grad(D.Bernoulli(logits=lg).log_prob(_t([1.0])), lg).tolist() == [0.5]  # 1 - sigmoid(0)
    # Geometric: H = -((1 - p) log(1 - p) + p log p) / p, dH/dp = log(1 - p) / p^2
    np.testing.assert_allclose(_grad(D.Geometric(probs=p).entropy(), p), [4 * math.log(0.5)], rtol=1e-12)
    # ContinuousBernoulli at p = 1/2: x/p - (1-x)/(1-p), the normaliser is flat there
    np.testing.assert_allclose(_grad(D.ContinuousBernoulli(probs=p).log_prob(_t([0.9])), p), [1.6], rtol=1e-6)


def test_bernoulli_log_prob_matches_the_formula_everywhere():
    lg = _t([-30.0, -1.0, 0.0, 2.0, 30.0], True)
    for v in (0.0, 1.0):
        got = D.Bernoulli(logits=lg).log_prob(_t([v] * 5))
        x = lg.detach().numpy()
        want = v * -np.logaddexp(0, -x) + (1 - v) * -np.logaddexp(0, x)
        np.testing.assert_allclose(got.detach().numpy(), want, rtol=1e-12)
        want = v / (1 + np.exp(x)) - (1 - v) / (1 + np.exp(-x))  # v - sigmoid(x), without cancellation
        np.testing.assert_allclose(_grad(got, lg), want, rtol=1e-12, atol=1e-300)


def test_statistics_off_their_domain_have_zero_gradients():
    c, r = _t([0.5, 3.0], True), _t([1.0, 2.0], True)
    m = D.InverseGamma(c, r).mean
    assert m.tolist()[0] == math.inf
    assert _grad(m, c).tolist() == [0.0, -2.0 / 4] and _grad(m, r).tolist() == [0.0, 0.5]
    c2 = _t([1.5, 3.0], True)
    v = D.InverseGamma(c2, _t([1.0, 1.0])).variance
    assert v.tolist()[0] == math.inf and _grad(v, c2)[0] == 0.0
    df = _t([1.5, 4.0], True)
    sv = D.StudentT(df, _t([0.0, 0.0]), _t([1.0, 1.0])).variance
    assert sv.tolist() == [math.inf, 2.0]
    np.testing.assert_allclose(_grad(sv, df), [0.0, -2 / 4], rtol=1e-12)  # d/ddf df/(df-2) = -2/(df-2)^2
    d1, d2 = _t([1.0, 4.0], True), _t([1.5, 6.0], True)
    fm = D.FisherSnedecor(d1, d2).mean
    assert math.isnan(fm.tolist()[0]) and _grad(fm, d2)[0] == 0.0
    mode = D.FisherSnedecor(d1, d2).mode
    assert math.isnan(mode.tolist()[0]) and _grad(mode, d2)[0] == 0.0 and _grad(mode, d1)[0] == 0.0
    a = _t([0.5, 3.0], True)
    pm = D.Pareto(_t([1.0, 1.0]), a).mean
    assert pm.tolist() == [math.inf, 1.5]
    np.testing.assert_allclose(_grad(pm, a), [0.0, -1 / 4], rtol=1e-12)  # d/da a/(a-1) = -1/(a-1)^2
    c1 = _t([0.5, 3.0], True)
    bm = D.Beta(c1, _t([1.0, 2.0])).mode
    assert math.isnan(bm.tolist()[0]) and _grad(bm, c1)[0] == 0.0


def test_von_mises_support_is_the_real_line_and_uniform_mode_has_a_graph():
    vm = D.VonMises(_t(0.0), _t(2.0), validate_args=True)
    assert vm.support is D.constraints.real
    lp = vm.log_prob(_t(4.0)).item()
    want = 2.0 * math.cos(4.0) - math.log(2 * math.pi * 2.2795853023360673)  # I0(2)
    assert lp == pytest.approx(want, rel=1e-12)
    high = _t([2.0], True)
    mode = D.Uniform(_t([0.0]), high).mode
    assert math.isnan(mode.item()) and mode.requires_grad


# --------------------------------------------------------------- optional PyTorch parity

def test_parity_with_torch():
    torch = pytest.importorskip("torch")
    x = np.array([math.inf, -math.inf, math.nan, 0.5])
    for name in POLYS:
        for n in (-1, 0, 2):
            want = getattr(torch.special, name)(torch.tensor(x), n).numpy()
            got = getattr(S, name)(_t(x), n).numpy()
            if n == 2:  # PyTorch's vectorised kernel gives garbage at nan (another element's value)
                got, want = got[[0, 1, 3]], want[[0, 1, 3]]
            np.testing.assert_allclose(got, want, equal_nan=True)
    for n in (0, 3, 6):
        for d in (1.0, 0.25):
            want = torch.fft.fftfreq(n, d, dtype=torch.float64).numpy()
            np.testing.assert_array_equal(FFT.fftfreq(n, d, dtype=lucid.float64).numpy(), want)
            want = torch.fft.rfftfreq(n, d).numpy()
            np.testing.assert_array_equal(FFT.rfftfreq(n, d).numpy(), want)
    rng = np.random.default_rng(3)
    a = rng.standard_normal((3, 3)) + 1j * rng.standard_normal((3, 3))
    tw, tv = torch.linalg.eigh(torch.tensor(a), UPLO="U")
    w, v = L.eigh(_t(a), UPLO="U")
    np.testing.assert_allclose(w.numpy(), tw.numpy(), atol=1e-12)
    np.testing.assert_allclose(np.abs(np.conj(v.numpy().T) @ tv.numpy()), np.eye(3), atol=1e-10)
    spd = a @ np.conj(a.T) + 3 * np.eye(3)
    garbage = np.triu(spd) + np.tril(np.full((3, 3), 5.0), -1)
    np.testing.assert_allclose(L.cholesky(_t(garbage), upper=True).numpy(),
                               torch.linalg.cholesky(torch.tensor(garbage), upper=True).numpy(), atol=1e-12)
    ar, br = rng.standard_normal((4, 2)), rng.standard_normal((4, 3))
    for driver in (None, "gelsy", "gelsd", "gelss", "gels"):
        want = torch.linalg.lstsq(torch.tensor(ar), torch.tensor(br), driver=driver).residuals.numpy()
        np.testing.assert_allclose(L.lstsq(_t(ar), _t(br), driver=driver).residuals.numpy(), want, rtol=1e-10)
    for cls, kw, stat in [("InverseGamma", {"concentration": [0.5, 3.0], "rate": [1.0, 2.0]}, "mean"),
                          ("StudentT", {"df": [1.5, 4.0]}, "variance"),
                          ("Pareto", {"scale": [1.0, 1.0], "alpha": [0.5, 3.0]}, "mean"),
                          ("Bernoulli", {"probs": [0.5, 0.2]}, "entropy"),
                          ("Geometric", {"probs": [0.5, 0.3]}, "entropy")]:
        tk = {k: torch.tensor(v, dtype=torch.float64, requires_grad=True) for k, v in kw.items()}
        lk = {k: _t(v, True) for k, v in kw.items()}
        to, lo = getattr(getattr(torch.distributions, cls)(**tk), stat), getattr(getattr(D, cls)(**lk), stat)
        to, lo = (to() if callable(to) else to), (lo() if callable(lo) else lo)
        np.testing.assert_allclose(lo.detach().numpy(), to.detach().numpy(), rtol=1e-12)
        tg = torch.autograd.grad(to.sum(), list(tk.values()))
        lg = lucid.autograd.grad(lo.sum(), list(lk.values()))
        for a_, b_ in zip(lg, tg):
            np.testing.assert_allclose(a_.numpy(), b_.numpy(), rtol=1e-12, atol=1e-15)
