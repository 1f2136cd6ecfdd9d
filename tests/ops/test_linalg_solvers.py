"""lucid.linalg solvers beyond the op database: closed forms, pivots, errors, PyTorch parity."""
import numpy as np
import pytest

import lucid
import lucid.func as F

L = lucid.linalg


def _t(a, rg=False):
    return lucid.tensor(np.asarray(a, dtype=np.float64), requires_grad=rg)


def test_matrix_exp_closed_forms_and_frechet():
    theta = 0.7
    r = L.matrix_exp(_t([[0.0, -theta], [theta, 0.0]])).numpy()
    np.testing.assert_allclose(r, [[np.cos(theta), -np.sin(theta)], [np.sin(theta), np.cos(theta)]], atol=1e-15)
    assert lucid.matrix_exp(_t([[1.0, 0.0], [0.0, 2.0]])).numpy()[1, 1] == pytest.approx(np.exp(2.0), rel=1e-15)
    # d/dt tr(expm(t A)) at t = 1 is tr(A expm(A))
    a = np.array([[0.3, 1.0], [-0.5, 0.2]])
    _, dt = F.jvp(lambda s: L.matrix_exp(_t(a) * s).diagonal().sum(), (_t(1.0),), (_t(1.0),))
    want = np.trace(a @ L.matrix_exp(_t(a)).numpy())
    assert dt.item() == pytest.approx(want, rel=1e-12)


def test_lu_pivots_are_lapack_and_solve_roundtrips():
    import scipy.linalg as sl

    rng = np.random.default_rng(0)
    a = rng.standard_normal((2, 4, 4))
    LU, piv = L.lu_factor(_t(a))
    for k in range(2):
        lu_ref, piv_ref = sl.lu_factor(a[k])
        np.testing.assert_allclose(LU.numpy()[k], lu_ref, atol=1e-12)
        assert piv.numpy()[k].tolist() == (piv_ref + 1).tolist()
    assert piv.dtype == lucid.int32
    info = L.lu_factor_ex(_t([[1.0, 2.0], [2.0, 4.0]])).info
    assert info.item() == 2
    with pytest.raises(RuntimeError, match="lu_factor: U"):
        L.lu_factor_ex(_t([[1.0, 2.0], [2.0, 4.0]]), check_errors=True)


def test_solve_triangular_reads_only_its_triangle_and_gradient_lives_there():
    a = _t([[2.0, 5.0], [7.0, 4.0]], True)
    b = _t([[1.0], [2.0]])
    x = L.solve_triangular(a, b, upper=False)
    np.testing.assert_allclose(x.detach().numpy(), np.linalg.solve([[2.0, 0.0], [7.0, 4.0]], b.numpy()))
    g = lucid.autograd.grad(x.sum(), a).numpy()
    assert g[0, 1] == 0.0 and g[1, 0] != 0.0
    with pytest.raises(RuntimeError, match="linalg.solve_triangular: incompatible shapes"):
        L.solve_triangular(a, _t(np.ones((3, 1))), upper=True)


def test_ldl_has_no_gradient_and_rejects_singular():
    with pytest.raises(RuntimeError, match="ldl_factor: D is exactly singular"):
        L.ldl_factor(_t(np.zeros((2, 2))))
    assert L.ldl_factor_ex(_t(np.zeros((2, 2)))).info.item() == 1
    LD, piv = L.ldl_factor(_t([[4.0, 2.0], [2.0, 3.0]], True))
    assert not LD.requires_grad


@pytest.mark.parametrize("shape", [(3, 3), (4, 2), (2, 4)])
def test_lu_gradients_match_torch(shape):
    torch = pytest.importorskip("torch")
    a = np.random.default_rng(1).standard_normal(shape)
    wl, wu = np.random.default_rng(2).standard_normal((2, 4, 4))
    k = min(shape)
    at = torch.tensor(a, requires_grad=True)
    _, lt, ut = torch.linalg.lu(at)
    (gt,) = torch.autograd.grad((lt * torch.tensor(wl[:shape[0], :k])).sum() + (ut * torch.tensor(wu[:k, :shape[1]])).sum(), at)
    x = _t(a, True)
    _, lo, up = L.lu(x)
    g = lucid.autograd.grad((lo * _t(wl[:shape[0], :k])).sum() + (up * _t(wu[:k, :shape[1]])).sum(), x)
    np.testing.assert_allclose(g.numpy(), gt.numpy(), rtol=1e-10, atol=1e-12)


def test_matrix_exp_and_solve_triangular_gradients_match_torch():
    torch = pytest.importorskip("torch")
    a = np.random.default_rng(3).standard_normal((3, 3))
    b = np.random.default_rng(4).standard_normal((3, 2))
    at = torch.tensor(a, requires_grad=True)
    (gt,) = torch.autograd.grad((torch.linalg.matrix_exp(at) ** 2).sum(), at)
    x = _t(a, True)
    np.testing.assert_allclose(lucid.autograd.grad((L.matrix_exp(x) ** 2).sum(), x).numpy(), gt.numpy(), rtol=1e-10)
    for upper, left, unit in [(True, True, False), (False, False, True)]:
        at = torch.tensor(a + 3 * np.eye(3), requires_grad=True)
        bt = torch.tensor(b if left else b.T, requires_grad=True)
        gt = torch.autograd.grad((torch.linalg.solve_triangular(at, bt, upper=upper, left=left,
                                                                 unitriangular=unit) ** 2).sum(), (at, bt))
        x, y = _t(a + 3 * np.eye(3), True), _t(b if left else b.T, True)
        g = lucid.autograd.grad((L.solve_triangular(x, y, upper=upper, left=left, unitriangular=unit) ** 2).sum(), (x, y))
        for u, v in zip(g, gt):
            np.testing.assert_allclose(u.numpy(), v.numpy(), rtol=1e-10, atol=1e-13)


# ------------------------------------------------------------------- eig, pinv, lstsq ...

def _eig_loss(mod, a, w_re, w_v):
    w, v = mod.linalg.eig(a)
    return (w.real * w_re).sum() + (w.imag ** 2).sum() + ((v * v.conj()).real * w_v).sum()


@pytest.mark.parametrize("pair", [False, True])
def test_eig_gradients_match_torch(pair):
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(8)
    vals = np.diag([1.0, 2.5, 4.0])
    if pair:
        vals[:2, :2] = [[1.0, -1.5], [1.5, 1.0]]
    s = rng.standard_normal((3, 3)) * 0.3 + np.eye(3)
    a = s @ vals @ np.linalg.inv(s)
    w_re, w_v = rng.standard_normal(3), rng.standard_normal((3, 3))
    at = torch.tensor(a, requires_grad=True)
    (gt,) = torch.autograd.grad(_eig_loss(torch, at, torch.tensor(w_re), torch.tensor(w_v)), at)
    x = _t(a, True)
    g = lucid.autograd.grad(_eig_loss(lucid, x, _t(w_re), _t(w_v)), x)
    assert g.dtype == lucid.float64  # a real input gets a real gradient
    np.testing.assert_allclose(g.numpy(), gt.numpy(), rtol=1e-9, atol=1e-11)
    w, v = L.eig(x.detach())
    np.testing.assert_allclose((x.detach().to(lucid.complex128) @ v).numpy(), (v * w.unsqueeze(-2)).numpy(), atol=1e-12)


def test_eig_complex_input_and_dtypes():
    a = lucid.tensor(np.array([[1 + 1j, 2], [0, 3 - 1j]]))
    w, v = L.eig(a)
    assert w.dtype == lucid.complex128 and sorted(w.tolist(), key=lambda z: z.real) == [1 + 1j, 3 - 1j]
    assert L.eig(lucid.eye(2)).eigenvalues.dtype == lucid.complex64


def test_pinv_gradient_finite_at_repeated_singular_values_and_matches_torch():
    torch = pytest.importorskip("torch")
    for a in (np.eye(3), np.random.default_rng(9).standard_normal((4, 2)), np.diag([2.0, 2.0, 1.0])):
        w = np.random.default_rng(10).standard_normal(a.shape[::-1])
        at = torch.tensor(a, requires_grad=True)
        (gt,) = torch.autograd.grad((torch.linalg.pinv(at) * torch.tensor(w)).sum(), at)
        x = _t(a, True)
        g = lucid.autograd.grad((L.pinv(x) * _t(w)).sum(), x)
        np.testing.assert_allclose(g.numpy(), gt.numpy(), rtol=1e-10, atol=1e-12)


def test_lstsq_outputs_follow_the_driver():
    rng = np.random.default_rng(11)
    a, b = rng.standard_normal((5, 3)), rng.standard_normal((5, 2))
    res = L.lstsq(_t(a), _t(b))
    x, r, rank, _ = np.linalg.lstsq(a, b, rcond=None)
    np.testing.assert_allclose(res.solution.numpy(), x, atol=1e-12)
    # PyTorch's CPU default driver is gelsy, which computes no residuals; the others do
    assert res.residuals.shape == (0,)
    for driver in ("gels", "gelsd", "gelss"):
        np.testing.assert_allclose(L.lstsq(_t(a), _t(b), driver=driver).residuals.numpy(), r, rtol=1e-10)
    assert res.rank.item() == 3 and res.singular_values.shape == (0,)
    sv = L.lstsq(_t(a), _t(b), driver="gelsd").singular_values
    np.testing.assert_allclose(sv.numpy(), np.linalg.svd(a, compute_uv=False), rtol=1e-12)
    deficient = np.outer([1.0, 2, 3], [1.0, 1]) * 1.0
    res = L.lstsq(_t(deficient), _t(b[:3]))
    assert res.rank.item() == 1 and res.residuals.shape == (0,)
    np.testing.assert_allclose(res.solution.numpy(), np.linalg.pinv(deficient) @ b[:3], atol=1e-12)
    with pytest.raises(RuntimeError, match="linalg.lstsq: driver"):
        L.lstsq(_t(a), _t(b), driver="magic")


def test_small_helpers_against_closed_forms():
    assert L.matrix_rank(_t(np.outer([1.0, 2], [3.0, 4]))).item() == 1
    assert L.matrix_rank(_t(np.eye(3)), hermitian=True).item() == 3
    assert L.matrix_rank(_t(np.diag([1.0, 1e-3])), atol=1e-2).item() == 1
    assert L.cond(_t(np.diag([4.0, 0.5]))).item() == pytest.approx(8.0)
    assert L.cond(_t(np.diag([4.0, 0.5])), -2).item() == pytest.approx(1 / 8)
    e = np.eye(3)
    assert L.cross(_t(e[1]), _t(e[2])).tolist() == [1.0, 0.0, 0.0]
    with pytest.raises(RuntimeError, match="must have length 3"):
        L.cross(_t(np.ones(2)), _t(np.ones(2)))
    assert L.vander(_t([2.0, 0.0]), N=3).tolist() == [[1.0, 2.0, 4.0], [1.0, 0.0, 0.0]]
    # multi_dot picks the cheap order: (10x1)(1x10)(10x1) as (10x1)((1x10)(10x1))
    from lucid.linalg._more import _chain_order
    assert _chain_order([10, 1, 10, 1])[0][2] == 0
    x = _t(np.zeros(2), True)
    assert lucid.autograd.grad(L.vander(x, N=3).sum(), x).tolist() == [1.0, 1.0]  # d/dx (1 + x + x^2) at 0
    a = np.random.default_rng(12).standard_normal((4, 3))
    import scipy.linalg as sl

    (qr_raw, tau), _ = sl.lapack.dgeqrf(a)[:2], None
    q = L.householder_product(_t(qr_raw), _t(tau))
    np.testing.assert_allclose(np.abs(q.numpy()), np.abs(np.linalg.qr(a)[0]), atol=1e-12)
    assert L.inv_ex(_t([[1.0, 2.0], [2.0, 4.0]])).info.item() == 2
    with pytest.raises(RuntimeError):
        L.inv_ex(_t([[1.0, 2.0], [2.0, 4.0]]), check_errors=True)
    assert L.cholesky_ex(_t(np.eye(2))).info.item() == 0


# --------------------------------------------------------------------------- float32

_F32 = {
    "det_singular": (lambda x: L.det(x), np.array([[1.0, 2.0], [2.0, 4.0]])),
    "slogdet": (lambda x: L.slogdet(x).logabsdet, None),
    "solve_triangular": (lambda x: L.solve_triangular(x, x[:, :2], upper=True), None),
    "lu": (lambda x: tuple(L.lu(x))[1:], None),
    "lu_solve": (lambda x: L.lu_solve(*L.lu_factor(x), x[:, :1]), None),
    "matrix_exp": (lambda x: L.matrix_exp(x * 0.5), None),
    "eig": (lambda x: L.eigvals(x).real, "eig"),
    "pinv": (L.pinv, None),
    "lstsq": (lambda x: L.lstsq(x[:, :2], x[:, 2:]).solution, None),
    "qr_wide": (lambda x: L.qr(x[:2]).R, None),
    "vector_norm_3": (lambda x: L.vector_norm(x, 3, dim=0), None),
    "householder_product": (lambda x: L.householder_product(x, x[0, :2] * 0.5), None),
    "cond": (L.cond, None),
}


@pytest.mark.parametrize("name", sorted(_F32))
def test_float32_inputs_pass_gradcheck_with_float64_differences(name):
    f, base = _F32[name]
    rng = np.random.default_rng(15)
    if base is None:
        base = rng.standard_normal((3, 3)) * 0.5 + 2.5 * np.eye(3)
    elif isinstance(base, str):
        s = rng.standard_normal((3, 3)) * 0.3 + np.eye(3)
        base = s @ np.diag([1.0, 2.5, 4.0]) @ np.linalg.inv(s)
    x = lucid.tensor(base.astype(np.float32), requires_grad=True)
    out = f(x)
    outs = out if isinstance(out, tuple) else (out,)
    assert all(o.dtype == lucid.float32 for o in outs)
    assert lucid.autograd.gradcheck(f, (x,))
