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
