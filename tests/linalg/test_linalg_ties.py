"""eigh / svd / eig gradients at exactly repeated eigen- or singular values (NOTE [Spectral ties]).

PyTorch's rules divide by the gaps between the values, so at an exact tie a loss of the vectors
gets inf/nan, while a loss of the values alone (the vectors' cotangent undefined) keeps its
exact gradient V diag(g) V^H. Lucid matches that pattern, per matrix of a batch, without
floating-point warnings; away from ties the gradients are checked against finite differences.
"""
import warnings

import numpy as np
import pytest

import lucid
import lucid.func as F

L = lucid.linalg


def grad_of(f, a):
    t = lucid.tensor(a, requires_grad=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the selections never divide by zero
        f(t).backward()
    return t.grad.numpy()


def fd_grad(f, a, eps=1e-6):
    """Central float64 finite differences of a scalar function of a NumPy matrix."""
    g = np.zeros_like(a)
    for idx in np.ndindex(a.shape):
        d = np.zeros_like(a)
        d[idx] = eps
        g[idx] = (f(a + d) - f(a - d)) / (2 * eps)
    return g


C3 = np.array([0.3, -1.2, 2.0])
TIED = {"identity": np.eye(3), "pair": np.diag([1.0, 1.0, 2.0]), "zero pair": np.diag([0.0, 0.0, 2.0])}


@pytest.mark.parametrize("name", list(TIED))
def test_eigh_values_only_is_exact_at_ties(name):
    a = TIED[name]
    g = grad_of(lambda t: (L.eigh(t).eigenvalues * lucid.tensor(C3)).sum(), a)
    w, v = np.linalg.eigh(a)
    np.testing.assert_allclose(g, v @ np.diag(C3) @ v.T, atol=1e-14)
    g2 = grad_of(lambda t: (L.eigvalsh(t) ** 2).sum(), a)  # d/dA sum(w^2) = 2 V diag(w) V^T = 2A
    np.testing.assert_allclose(g2, 2 * a, atol=1e-14)


@pytest.mark.parametrize("name", list(TIED))
def test_svd_values_only_is_exact_at_ties(name):
    a = TIED[name]
    for full in (False, True):
        u, s, vh = np.linalg.svd(a)
        g = grad_of(lambda t: (L.svd(t, full_matrices=full).S * lucid.tensor(C3)).sum(), a)
        np.testing.assert_allclose(g, u @ np.diag(C3) @ vh, atol=1e-14)


def test_svd_values_only_with_zero_singular_values_tall_and_wide():
    # tall and wide rules divide gU / S and gVh / S: S = 0 must not leak in when U, Vh are unused
    for a in (np.array([[2.0, 0.0], [0.0, 0.0], [0.0, 0.0]]), np.array([[2.0, 0.0, 0.0], [0.0, 0.0, 0.0]])):
        g = grad_of(lambda t: L.svd(t, full_matrices=False).S.sum(), a)
        u, s, vh = np.linalg.svd(a, full_matrices=False)
        np.testing.assert_allclose(g, u @ vh, atol=1e-14)


def test_eig_values_only_is_exact_at_ties():
    a = np.diag([1.0, 1.0, 2.0])
    g = grad_of(lambda t: (L.eigvals(t).real * lucid.tensor(np.array([1.0, 1.0, 2.0]))).sum(), a)
    # eig orders the values as given here (1, 1, 2); V = I, so gA = diag(c)
    np.testing.assert_allclose(g, np.diag([1.0, 1.0, 2.0]), atol=1e-14)


@pytest.mark.parametrize("name", list(TIED))
def test_vector_losses_are_nan_at_ties(name):
    a = TIED[name]
    w = lucid.tensor(np.random.default_rng(2).standard_normal((3, 3)))
    losses = [
        lambda t: (L.eigh(t).eigenvectors ** 2 * w).sum(),
        lambda t: (L.svd(t, full_matrices=False).U * w).sum(),
        lambda t: (L.svd(t, full_matrices=False).Vh ** 3).sum(),
        lambda t: L.eig(t).eigenvectors.abs().sum(),
    ]
    for f in losses:
        g = grad_of(f, a)
        assert not np.isfinite(g).any(), g


def test_complex_eigh_ties():
    a = np.eye(3) + 0j
    g = grad_of(lambda t: (L.eigh(t).eigenvalues * lucid.tensor(C3)).sum(), a)
    np.testing.assert_allclose(g, np.diag(C3).astype(complex), atol=1e-14)
    wt = lucid.tensor(np.random.default_rng(3).standard_normal((3, 3)))
    g = grad_of(lambda t: (L.eigh(t).eigenvectors.abs() ** 2 * wt).sum(), a)
    assert np.isnan(g).all()


def test_ties_spoil_only_their_own_matrix_in_a_batch():
    """A tied and an untied matrix in one batch: the untied one's gradient is exact (finite differences)."""
    rng = np.random.default_rng(0)
    q, _ = np.linalg.qr(rng.standard_normal((3, 3)))
    good = q @ np.diag([1.0, 2.0, 3.5]) @ q.T
    batch = np.stack([np.diag([1.0, 1.0, 2.0]), good])
    wt = rng.standard_normal((3, 3))  # (arange weights would make sum(V^2 * w) constant: V is orthogonal)

    def loss_np(a):  # sign-free: squares of the eigenvectors
        return ((np.linalg.eigh(a)[1] ** 2) * wt).sum()

    g = grad_of(lambda t: (L.eigh(t).eigenvectors ** 2 * lucid.tensor(wt)).sum(), batch)
    assert np.isnan(g[0]).all() and np.abs(g[1]).max() > 0.1
    # the gradient is the symmetric one (as PyTorch's): finite differences of f((A + A^T) / 2)
    fd = fd_grad(lambda a: loss_np((a + a.T) / 2), good)
    np.testing.assert_allclose(g[1], fd, atol=1e-6)

    def loss_svd_np(a):
        u, s, vh = np.linalg.svd(a)
        return ((u ** 2) * wt).sum() + (s * C3).sum()

    gs = grad_of(lambda t: ((L.svd(t).U ** 2) * lucid.tensor(wt)).sum() + (L.svd(t).S * lucid.tensor(C3)).sum(), batch)
    assert np.isnan(gs[0]).all()
    np.testing.assert_allclose(gs[1], fd_grad(loss_svd_np, good), atol=1e-6)


def test_projector_gradient_is_exact_away_from_ties():
    """The gauge-invariant projector onto the two lowest eigenvectors, close to (not at) a tie."""
    rng = np.random.default_rng(1)
    q, _ = np.linalg.qr(rng.standard_normal((3, 3)))
    a = q @ np.diag([1.0, 1.01, 3.0]) @ q.T
    wt = rng.standard_normal((3, 3))

    def proj_np(x):
        v = np.linalg.eigh((x + x.T) / 2)[1][:, :2]
        return ((v @ v.T) * wt).sum()

    def proj(t):
        v = L.eigh(t).eigenvectors[:, :2]
        return ((v @ v.T) * lucid.tensor(wt)).sum()

    np.testing.assert_allclose(grad_of(proj, a), fd_grad(proj_np, a), atol=1e-6)


def test_jvp_at_ties():
    """Forward mode as PyTorch: exact eigen/singular value tangents, nan vector tangents."""
    a, da = lucid.tensor(np.eye(3)), lucid.tensor(np.diag([1.0, 2.0, 3.0]))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        (_, (dw, dv)) = F.jvp(L.eigh, (a,), (da,))
        (_, (du, ds, dvh)) = F.jvp(lambda t: L.svd(t), (a,), (da,))
    np.testing.assert_allclose(dw.numpy(), [1.0, 2.0, 3.0])
    np.testing.assert_allclose(ds.numpy(), [1.0, 2.0, 3.0])
    assert np.isnan(dv.numpy()).all() and np.isnan(du.numpy()).all() and np.isnan(dvh.numpy()).all()


def test_vmap_matches_loop_at_ties():
    batch = lucid.tensor(np.stack([np.eye(3), np.diag([1.0, 2.0, 3.0])]))
    g = F.vmap(F.grad(lambda t: (L.eigh(t).eigenvalues * lucid.tensor(C3)).sum()))(batch)
    loop = np.stack([F.grad(lambda t: (L.eigh(t).eigenvalues * lucid.tensor(C3)).sum())(m).numpy() for m in batch])
    np.testing.assert_allclose(g.numpy(), loop)
    np.testing.assert_allclose(loop[0], np.diag(C3))


def test_torch_parity_of_the_inf_nan_pattern():
    torch = pytest.importorskip("torch")
    wt = np.random.default_rng(4).standard_normal((3, 3))
    cases = [
        (lambda m, a: m.linalg.eigh(a)[0].sum(), np.eye(3)),
        (lambda m, a: (m.linalg.eigh(a)[1] ** 2 + m.linalg.eigh(a)[1]).sum(), np.eye(3)),
        (lambda m, a: m.linalg.svd(a, full_matrices=False)[1].sum(), np.diag([1.0, 1.0, 2.0])),
        (lambda m, a: m.linalg.svd(a, full_matrices=False)[0].sum(), np.diag([1.0, 1.0, 2.0])),
        (lambda m, a: m.linalg.svd(a, full_matrices=False)[0].sum(), np.array([[1.0, 0], [0, 0], [0, 0]])),
        (lambda m, a: (m.linalg.svd(a, full_matrices=False)[2] ** 3).sum(), np.array([[1.0, 0, 0], [0, 0, 0]])),
        (lambda m, a: m.linalg.eigvals(a).real.sum(), np.eye(3)),
        (lambda m, a: m.linalg.eig(a)[1].abs().sum(), np.eye(3)),
        (lambda m, a: ((m.linalg.eigh(a)[1][:, :2] @ m.linalg.eigh(a)[1][:, :2].T) * m.tensor(wt)).sum(),
         np.diag([1.0, 1.0, 2.0])),
    ]
    for f, a in cases:
        t = torch.tensor(a, requires_grad=True)
        gt = torch.autograd.grad(f(torch, t), t)[0].numpy()
        gl = grad_of(lambda x: f(lucid, x), a)
        np.testing.assert_array_equal(np.isnan(gl), np.isnan(gt))
        np.testing.assert_array_equal(np.isinf(gl), np.isinf(gt))
        fin = np.isfinite(gt)
        np.testing.assert_allclose(gl[fin], gt[fin], atol=1e-12)


@pytest.mark.parametrize("shape", [(4, 2), (2, 4)])
def test_svd_full_matrices_nonsquare_ignores_the_extra_columns(shape):
    """As PyTorch 2.13: the cotangent of the extra columns of U / rows of Vh is ignored (the
    gradient equals the reduced one), and their jvp tangent is zero."""
    rng = np.random.default_rng(5)
    a = rng.standard_normal(shape)
    m, n = shape
    k = min(m, n)
    wu, wv = rng.standard_normal((m, m)), rng.standard_normal((n, n))

    def loss(t, full):
        u, s, vh = L.svd(t, full_matrices=full)
        return (u * u * lucid.tensor(wu[:, : u.shape[-1]])).sum() + (vh * vh * lucid.tensor(wv[: vh.shape[-2]])).sum() \
            + (s * lucid.tensor(C3[:k])).sum()

    g_full = grad_of(lambda t: loss(t, True), a)
    g_red = grad_of(lambda t: loss(t, False), a)
    np.testing.assert_allclose(g_full, g_red, atol=1e-13)

    def loss_np(x):
        u, s, vh = np.linalg.svd(x, full_matrices=False)
        return (u * u * wu[:, :k]).sum() + (vh * vh * wv[:k]).sum() + (s * C3[:k]).sum()

    np.testing.assert_allclose(g_red, fd_grad(loss_np, a), atol=1e-6)
    da = rng.standard_normal(shape)
    _, (du, ds, dvh) = F.jvp(lambda t: tuple(L.svd(t)), (lucid.tensor(a),), (lucid.tensor(da),))
    assert tuple(du.shape) == (m, m) and tuple(dvh.shape) == (n, n)
    np.testing.assert_array_equal(du.numpy()[:, k:], 0)
    np.testing.assert_array_equal(dvh.numpy()[k:], 0)
    _, (du_r, ds_r, dvh_r) = F.jvp(lambda t: tuple(L.svd(t, full_matrices=False)), (lucid.tensor(a),), (lucid.tensor(da),))
    np.testing.assert_allclose(ds.numpy(), ds_r.numpy(), atol=1e-13)
