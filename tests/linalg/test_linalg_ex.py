"""cholesky_ex, inv_ex, solve_ex per matrix (NOTE [_ex per matrix]) and cond on singular inputs.

A batch mixing good and failing matrices: the failing ones report ``info`` (LAPACK's) and hold
inf/nan or the partial factor, as PyTorch; the good ones have exact values and exact gradients
(float64 finite differences) and jvps; vmap matches a loop, info included.
"""
import math
import warnings

import numpy as np
import pytest

import lucid
import lucid.func as F

L = lucid.linalg

SPD = np.array([[4.0, 1.0, 0.5], [1.0, 3.0, 0.2], [0.5, 0.2, 2.0]])
NOT_PD = np.array([[1.0, 2.0, 0.0], [2.0, 1.0, 0.0], [0.0, 0.0, 1.0]])      # fails at the minor of order 2
SINGULAR = np.array([[1.0, 2.0, 3.0], [2.0, 4.0, 6.0], [1.0, 0.0, 1.0]])   # rank 2
GOOD = np.array([[3.0, 1.0, -1.0], [0.5, 2.0, 0.3], [-0.2, 0.4, 4.0]])
W = np.random.default_rng(0).standard_normal((3, 3))


def fd_grad(f, a, eps=1e-6):
    g = np.zeros_like(a)
    for idx in np.ndindex(a.shape):
        d = np.zeros_like(a)
        d[idx] = eps
        g[idx] = (f(a + d) - f(a - d)) / (2 * eps)
    return g


# ------------------------------------------------------------------ cholesky_ex

def test_cholesky_ex_batch_with_a_failing_matrix():
    batch = np.stack([SPD, NOT_PD, 2 * SPD])
    A = lucid.tensor(batch, requires_grad=True)
    F_, info = L.cholesky_ex(A)
    assert info.dtype == lucid.int32 and info.tolist() == [0, 2, 0]
    np.testing.assert_allclose(F_.detach().numpy()[[0, 2]], np.linalg.cholesky(batch[[0, 2]]), atol=1e-14)
    np.testing.assert_allclose(F_.detach().numpy()[1], [[1.0, 0, 0], [2.0, -3.0, 0], [0, 0, 1.0]])  # potrf's partial
    (F_[[0, 2]] * lucid.tensor(W)).sum().backward()
    for i in (0, 2):
        # the gradient is the symmetric one (PyTorch's): finite differences of f((A + A^T) / 2)
        fds = fd_grad(lambda a: (np.linalg.cholesky((a + a.T) / 2) * W).sum(), batch[i])
        np.testing.assert_allclose(A.grad.numpy()[i], fds, atol=1e-6)
    np.testing.assert_array_equal(A.grad.numpy()[1], 0)


def test_cholesky_ex_upper_and_complex():
    z = np.array([[2.0, 1j], [-1j, 2.0]])
    U, info = L.cholesky_ex(lucid.tensor(z), upper=True)
    u = U.numpy()
    np.testing.assert_allclose(u.conj().T @ u, z, atol=1e-14)
    assert np.allclose(np.tril(u, -1), 0) and info.item() == 0


def test_cholesky_ex_check_errors_raises_naming_the_matrix():
    with pytest.raises(RuntimeError, match=r"cholesky_ex: \(Batch element 1\).*minor of order 2"):
        L.cholesky_ex(lucid.tensor(np.stack([SPD, NOT_PD])), check_errors=True)
    assert L.cholesky_ex(lucid.tensor(SPD), check_errors=True).info.item() == 0


# ---------------------------------------------------------------------- inv_ex

def test_inv_ex_batch_with_singular_matrices():
    batch = np.stack([GOOD, SINGULAR, np.zeros((3, 3))])
    A = lucid.tensor(batch, requires_grad=True)
    inv, info = L.inv_ex(A)
    assert info.tolist()[0] == 0 and info.tolist()[1] > 0 and info.tolist()[2] == 1
    np.testing.assert_allclose(inv.detach().numpy()[0], np.linalg.inv(GOOD), atol=1e-14)
    assert not np.isfinite(inv.detach().numpy()[1:]).all()
    (inv[0] * lucid.tensor(W)).sum().backward()
    np.testing.assert_allclose(A.grad.numpy()[0], fd_grad(lambda a: (np.linalg.inv(a) * W).sum(), GOOD), atol=1e-6)
    # the failing matrices' gradient is nan even with a zero cotangent (-A^-H g A^-H with an inf
    # inverse), as PyTorch's: only the good matrix is exact
    assert np.isnan(A.grad.numpy()[1:]).all()


def test_inv_ex_gradient_of_the_whole_batch_is_per_matrix():
    """Summing over the whole batch: the good matrix's gradient stays exact; the bad one's is nan (PyTorch's)."""
    torch = pytest.importorskip("torch")
    batch = np.stack([GOOD, SINGULAR])
    A = lucid.tensor(batch, requires_grad=True)
    L.inv_ex(A).inverse.sum().backward()
    t = torch.tensor(batch, requires_grad=True)
    torch.linalg.inv_ex(t).inverse.sum().backward()
    np.testing.assert_allclose(A.grad.numpy()[0], t.grad.numpy()[0], atol=1e-12)
    np.testing.assert_array_equal(np.isnan(A.grad.numpy()), np.isnan(t.grad.numpy()))


def test_inv_ex_matches_torch_values_and_info():
    torch = pytest.importorskip("torch")
    batch = np.stack([GOOD, SINGULAR, np.zeros((3, 3)), np.array([[1.0, 2, 0], [2, 4, 0], [0, 0, 1]])])
    inv, info = L.inv_ex(lucid.tensor(batch))
    tinv, tinfo = torch.linalg.inv_ex(torch.tensor(batch))
    assert info.tolist() == tinfo.tolist()
    np.testing.assert_allclose(inv.numpy()[0], tinv.numpy()[0], atol=1e-14)
    for i in range(1, 4):
        assert not np.isfinite(inv.numpy()[i]).all() and not np.isfinite(tinv.numpy()[i]).all()


def test_inv_ex_check_errors():
    with pytest.raises(RuntimeError, match="inv_ex.*singular"):
        L.inv_ex(lucid.tensor(np.zeros((2, 2))), check_errors=True)


# -------------------------------------------------------------------- solve_ex

def test_solve_ex_batch_with_a_singular_matrix():
    batch = np.stack([GOOD, SINGULAR])
    b = np.random.default_rng(1).standard_normal((2, 3, 2))
    A, B = lucid.tensor(batch, requires_grad=True), lucid.tensor(b, requires_grad=True)
    X, info = L.solve_ex(A, B)
    assert info.tolist()[0] == 0 and info.tolist()[1] > 0
    np.testing.assert_allclose(X.detach().numpy()[0], np.linalg.solve(GOOD, b[0]), atol=1e-14)
    (X[0] * lucid.tensor(W[:, :2])).sum().backward()
    np.testing.assert_allclose(A.grad.numpy()[0], fd_grad(lambda a: (np.linalg.solve(a, b[0]) * W[:, :2]).sum(), GOOD),
                               atol=1e-6)
    np.testing.assert_allclose(B.grad.numpy()[0], fd_grad(lambda r: (np.linalg.solve(GOOD, r) * W[:, :2]).sum(), b[0]),
                               atol=1e-6)


def test_solve_ex_shapes_vector_broadcast_and_left_false():
    a = np.stack([GOOD, SINGULAR])
    X, info = L.solve_ex(lucid.tensor(a), lucid.tensor(np.ones(3)))
    assert tuple(X.shape) == (2, 3) and tuple(info.shape) == (2,)
    np.testing.assert_allclose(X.numpy()[0], np.linalg.solve(GOOD, np.ones(3)), atol=1e-14)
    X, info = L.solve_ex(lucid.tensor(GOOD), lucid.tensor(np.ones((4, 3, 2))))  # info has A's batch shape
    assert tuple(X.shape) == (4, 3, 2) and tuple(info.shape) == ()
    X, info = L.solve_ex(lucid.tensor(GOOD), lucid.tensor(np.ones((2, 3))), left=False)
    np.testing.assert_allclose(X.numpy() @ GOOD, np.ones((2, 3)), atol=1e-13)


def test_solve_ex_jvp_per_matrix():
    batch = np.stack([GOOD, SINGULAR])
    b = np.ones((2, 3, 1))
    da = np.random.default_rng(2).standard_normal((2, 3, 3))
    _, (dx, dinfo) = F.jvp(lambda a: tuple(L.solve_ex(a, lucid.tensor(b))), (lucid.tensor(batch),), (lucid.tensor(da),))
    eps = 1e-6
    fd = (np.linalg.solve(GOOD + eps * da[0], b[0]) - np.linalg.solve(GOOD - eps * da[0], b[0])) / (2 * eps)
    np.testing.assert_allclose(dx.numpy()[0], fd, atol=1e-7)


# ------------------------------------------------------------------------ vmap

def test_vmap_matches_a_loop_info_included():
    batch = lucid.tensor(np.stack([GOOD, SINGULAR, SPD]))
    spd_batch = lucid.tensor(np.stack([SPD, NOT_PD, 2 * SPD]))
    rhs = lucid.tensor(np.random.default_rng(3).standard_normal((3, 3, 2)))
    for fn, x in ((lambda a: tuple(L.inv_ex(a)), batch), (lambda a: tuple(L.cholesky_ex(a)), spd_batch)):
        out, info = F.vmap(fn)(x)
        loop = [fn(m) for m in x]
        assert info.tolist() == [int(o[1].item()) for o in loop]
        for i, o in enumerate(loop):
            np.testing.assert_array_equal(out.numpy()[i], o[0].numpy())
    out, info = F.vmap(lambda a, r: tuple(L.solve_ex(a, r)))(batch, rhs)
    for i in range(3):
        o, k = L.solve_ex(batch[i], rhs[i])
        np.testing.assert_array_equal(out.numpy()[i], o.numpy())
        assert info.tolist()[i] == k.item()
    # only B batched: info is unbatched (A's batch shape) and vmap broadcasts it, as torch.vmap
    out, info = F.vmap(lambda r: tuple(L.solve_ex(batch[0], r)))(rhs)
    assert info.tolist() == [0, 0, 0] and tuple(out.shape) == (3, 3, 2)
    np.testing.assert_allclose(out.numpy(), np.linalg.solve(GOOD, rhs.numpy()), atol=1e-13)


def test_vmap_of_grad_of_inv_ex():
    batch = lucid.tensor(np.stack([GOOD, 2 * GOOD]))
    g = F.vmap(F.grad(lambda a: (L.inv_ex(a).inverse * lucid.tensor(W)).sum()))(batch)
    for i in range(2):
        np.testing.assert_allclose(g.numpy()[i], fd_grad(lambda a: (np.linalg.inv(a) * W).sum(), batch.numpy()[i]),
                                   atol=1e-6)


# ------------------------------------------------------------------------ cond

@pytest.mark.parametrize("p", [1, -1, math.inf, -math.inf, "fro"])
def test_cond_of_singular_matrices_is_inf(p):
    for a in (SINGULAR, np.zeros((3, 3)), np.diag([1.0, 0.0, 2.0])):
        c = L.cond(lucid.tensor(a), p)
        assert c.item() == math.inf
        assert np.linalg.cond(a, p) == math.inf  # NumPy agrees


def test_cond_nuc_singular_and_batched():
    # PyTorch's definition for 'nuc': sum(S) * sum(1 / S)
    assert L.cond(lucid.tensor(np.diag([1.0, 0.0])), "nuc").item() == math.inf
    assert math.isnan(L.cond(lucid.tensor(np.zeros((2, 2))), "nuc").item())
    c = L.cond(lucid.tensor(np.stack([GOOD, SINGULAR, np.zeros((3, 3))])), 1)
    assert c.tolist()[1:] == [math.inf, math.inf]
    np.testing.assert_allclose(c.tolist()[0], np.linalg.cond(GOOD, 1))


def test_cond_gradient_of_a_good_matrix_in_a_batch_with_a_singular_one():
    batch = np.stack([GOOD, SINGULAR])
    A = lucid.tensor(batch, requires_grad=True)
    c = L.cond(A, "fro")
    assert c.tolist()[1] == math.inf
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        c.sum().backward()
    np.testing.assert_allclose(A.grad.numpy()[0], fd_grad(lambda a: np.linalg.cond(a, "fro"), GOOD), rtol=1e-6)
    np.testing.assert_array_equal(A.grad.numpy()[1], 0)  # no inf/nan leaking out of the singular one


def test_cond_torch_parity():
    torch = pytest.importorskip("torch")
    mats = [SINGULAR, np.zeros((3, 3)), np.diag([1.0, 0.0, 2.0]), GOOD]
    for p in (1, -1, math.inf, -math.inf, "fro", "nuc", 2, -2, None):
        for a in mats:
            if p in ("nuc", 2, -2, None) and a is SINGULAR:
                continue  # SVD-based: 1 / (a rounding-noise singular value) differs between LAPACK calls
            got, want = L.cond(lucid.tensor(a), p).item(), torch.linalg.cond(torch.tensor(a), p).item()
            assert (math.isnan(got) and math.isnan(want)) or got == pytest.approx(want, rel=1e-6), (p, a)


def test_cholesky_upper_is_the_conjugate_transpose_for_complex():
    z = np.array([[2.0, 1j], [-1j, 2.0]])
    for u in (L.cholesky(lucid.tensor(z), upper=True).numpy(), L.cholesky_ex(lucid.tensor(z), upper=True).L.numpy()):
        np.testing.assert_allclose(u.conj().T @ u, z, atol=1e-14)
        np.testing.assert_allclose(u, np.linalg.cholesky(z).conj().T, atol=1e-14)


# ------------------------------------------- solve_triangular / lu_factor_ex on singular input

def test_solve_triangular_with_a_zero_diagonal_gives_inf_not_an_error():
    """As PyTorch (LAPACK's trsm): substitution through a zero pivot gives inf/nan, per matrix."""
    u = np.array([[1.0, 2.0], [0.0, 0.0]])
    x = L.solve_triangular(lucid.tensor(np.stack([u, np.triu(GOOD[:2, :2])])), lucid.tensor(np.ones((2, 2, 1))),
                           upper=True).numpy()
    np.testing.assert_array_equal(x[0], [[-math.inf], [math.inf]])
    np.testing.assert_allclose(x[1], np.linalg.solve(np.triu(GOOD[:2, :2]), np.ones((2, 1))), atol=1e-15)
    lo = L.solve_triangular(lucid.tensor(u.T), lucid.tensor(np.ones((2, 1))), upper=False).numpy()
    np.testing.assert_array_equal(lo, [[1.0], [-math.inf]])


def test_lu_factor_ex_per_matrix_gradient_and_vmap_info():
    batch = np.stack([GOOD, SINGULAR, np.zeros((3, 3))])
    A = lucid.tensor(batch, requires_grad=True)
    LU, piv, info = L.lu_factor_ex(A)
    assert info.tolist() == [0, 3, 1]  # LAPACK's getrf (PyTorch gives the same)
    (LU[0] * lucid.tensor(W)).sum().backward()  # used to raise: the rules solve with the singular U

    def lu_np(a):
        import scipy.linalg as sl

        return (sl.lu_factor(a)[0] * W).sum()

    np.testing.assert_allclose(A.grad.numpy()[0], fd_grad(lu_np, GOOD), atol=1e-6)
    _, _, vinfo = F.vmap(lambda x: tuple(L.lu_factor_ex(x)))(lucid.tensor(batch))
    assert vinfo.tolist() == [0, 3, 1]  # was silently all zero under vmap
    with pytest.raises(RuntimeError, match="check_errors=True needs concrete values"):
        F.vmap(lambda x: tuple(L.lu_factor_ex(x, check_errors=True)))(lucid.tensor(batch))


@pytest.mark.parametrize("name,upper", [("cholesky", False), ("cholesky", True), ("cholesky_ex", False),
                                        ("cholesky_ex", True)])
def test_cholesky_forward_and_reverse_mode_agree(name, upper):
    """Both rules differentiate A -> chol(sym(A)) (as eigh's, and JAX's): jacfwd, whose basis
    tangents are not symmetric, equals jacrev; on a symmetric direction both equal float64
    finite differences. (PyTorch's jvp takes dA unsymmetrized and disagrees with its own
    gradient for non-symmetric tangents.)"""
    rng = np.random.default_rng(3)
    b = rng.standard_normal((2, 4, 4))
    a = b @ b.transpose(0, 2, 1) + 4 * np.eye(4)

    def f(x):
        out = getattr(lucid.linalg, name)(x, upper=upper)
        return out[0] if name == "cholesky_ex" else out

    x = lucid.tensor(a)
    fwd, rev = lucid.func.jacfwd(f)(x).numpy(), lucid.func.jacrev(f)(x).numpy()
    np.testing.assert_allclose(fwd, rev, rtol=1e-10, atol=1e-12)
    v = rng.standard_normal(a.shape)
    v = v + v.transpose(0, 2, 1)
    eps = 1e-6
    fd = (f(lucid.tensor(a + eps * v)).numpy() - f(lucid.tensor(a - eps * v)).numpy()) / (2 * eps)
    _, tangent = lucid.func.jvp(f, (x,), (lucid.tensor(v),))
    np.testing.assert_allclose(tangent.numpy(), fd, rtol=1e-6, atol=1e-8)
    # duality on a non-symmetric direction: <vjp(g), w> == <g, jvp(w)>
    w, g = rng.standard_normal(a.shape), rng.standard_normal(a.shape)
    xg = lucid.tensor(a, requires_grad=True)
    grad = lucid.autograd.grad(f(xg), xg, lucid.tensor(g))
    _, tw = lucid.func.jvp(f, (x,), (lucid.tensor(w),))
    np.testing.assert_allclose((grad.numpy() * w).sum(), (g * tw.numpy()).sum(), rtol=1e-10)
