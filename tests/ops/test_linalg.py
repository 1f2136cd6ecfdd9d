"""Linear algebra beyond the op database: closed-form gradients, errors, einsum parsing."""
import numpy as np
import pytest

import lucid
import lucid.func as F

L = lucid.linalg


def _t(a, rg=False):
    return lucid.tensor(np.asarray(a, dtype=np.float64), requires_grad=rg)


def test_closed_form_gradients():
    rng = np.random.default_rng(0)
    a = rng.standard_normal((3, 3)) + 3 * np.eye(3)
    x = _t(a, True)
    L.det(x).backward()
    np.testing.assert_allclose(x.grad.numpy(), np.linalg.det(a) * np.linalg.inv(a).T, rtol=1e-10)
    s = a + a.T
    lam, v = np.linalg.eigh(s)
    g = F.grad(lambda m: L.eigh(m).eigenvalues[2])(_t(s))
    np.testing.assert_allclose(g.numpy(), np.outer(v[:, 2], v[:, 2]), atol=1e-10)
    g = F.grad(lambda m: L.matrix_norm(m, "nuc"))(_t(a))
    u, _, vh = np.linalg.svd(a)
    np.testing.assert_allclose(g.numpy(), u @ vh, atol=1e-10)


def test_higher_order_and_transforms_compose():
    a = _t(np.array([[2.0, 0.5], [0.3, 1.5]]))
    h = F.hessian(lambda m: L.slogdet(m).logabsdet)(a)
    inv = np.linalg.inv(a.numpy())
    # d2 log|det A| / dA_ij dA_kl = -inv[l, i] inv[j, k]
    np.testing.assert_allclose(h.numpy(), -np.einsum("li,jk->ijkl", inv, inv), atol=1e-10)
    jf = F.jacfwd(L.inv)(a).numpy()
    jr = F.jacrev(L.inv)(a).numpy()
    np.testing.assert_allclose(jf, jr, atol=1e-12)


def test_vmap_of_grad_batches_linalg():
    rng = np.random.default_rng(1)
    batch = rng.standard_normal((4, 3, 3)) + 3 * np.eye(3)
    got = F.vmap(F.grad(lambda m: L.det(m)))(_t(batch)).numpy()
    want = np.stack([np.linalg.det(b) * np.linalg.inv(b).T for b in batch])
    np.testing.assert_allclose(got, want, rtol=1e-10)


def test_errors_name_op_and_shape():
    with pytest.raises(RuntimeError, match=r"linalg.inv: .*square.*\(2, 3\)"):
        L.inv(lucid.ones(2, 3))
    with pytest.raises(RuntimeError, match="linalg_inv: the input is singular.*shape=\\(2, 2\\)"):
        L.inv(lucid.ones(2, 2))
    with pytest.raises(RuntimeError, match="linalg_cholesky: the input is not positive-definite"):
        L.cholesky(-lucid.eye(2))
    with pytest.raises(RuntimeError, match=r"linalg.solve: incompatible shapes"):
        L.solve(lucid.eye(2), lucid.ones(3))
    with pytest.raises(RuntimeError, match=r"linalg.det: .*shape \(3,\)"):
        L.det(lucid.ones(3))
    with pytest.raises(RuntimeError, match="einsum: subscript 'j' has size 2"):
        lucid.einsum("ij,jk", lucid.ones(2, 3), lucid.ones(2, 2))
    with pytest.raises(ValueError, match="einsum: subscript 'ij'"):
        lucid.einsum("ij", lucid.ones(2))
    with pytest.raises(RuntimeError, match=r"mm: expected self to be 2-D, got shape \(2,\)"):
        lucid.mm(lucid.ones(2), lucid.ones(2, 2))
    with pytest.raises(RuntimeError, match="bmm: batch sizes differ"):
        lucid.bmm(lucid.ones(2, 2, 2), lucid.ones(3, 2, 2))


def test_einsum_forms():
    rng = np.random.default_rng(2)
    a, b = rng.standard_normal((2, 3)), rng.standard_normal((3, 4))
    np.testing.assert_allclose(lucid.einsum("ij,jk", [_t(a), _t(b)]).numpy(), a @ b)
    np.testing.assert_allclose(lucid.einsum("iJ,Jk->ki", _t(a), _t(b)).numpy(), (a @ b).T)
    np.testing.assert_allclose(lucid.einsum("i j , j k -> i k", _t(a), _t(b)).numpy(), a @ b)
    assert lucid.einsum("i,i->", lucid.tensor([1, 2]), lucid.tensor([3, 4])).item() == 11
    c = rng.standard_normal((2, 1, 3))
    np.testing.assert_allclose(lucid.einsum("...j,...j->...", _t(c), _t(rng.standard_normal((4, 3)))).shape, (2, 4))


def test_tensor_methods_and_named_results():
    x = lucid.tensor([[2.0, 1.0], [1.0, 3.0]], dtype=lucid.float64)
    assert x.det().item() == pytest.approx(5.0)
    np.testing.assert_allclose(x.inverse().numpy(), np.linalg.inv(x.numpy()))
    sign, logabs = L.slogdet(x)
    assert sign.item() == 1.0 and L.slogdet(x).logabsdet.item() == pytest.approx(np.log(5))
    assert L.eigh(x).eigenvalues.shape == (2,) and L.svd(x).Vh.shape == (2, 2) and L.qr(x).R.shape == (2, 2)
    np.testing.assert_allclose(L.cholesky(x, upper=True).numpy(), np.linalg.cholesky(x.numpy()).T)
    np.testing.assert_allclose(L.solve(x, x, left=False).numpy(), np.eye(2), atol=1e-12)
    assert x.trace().item() == 5.0 and x.matrix_power(-1).shape == (2, 2)
    assert L.norm(x, ord=float("inf")).item() == 4.0 and L.vector_norm(x, 0).item() == 4.0


# ---------------------------------------------------- det / slogdet at singular matrices

def test_det_gradients_at_a_singular_matrix_are_the_adjugate():
    a = _t([[1.0, 2.0], [2.0, 4.0]], True)
    g = lucid.autograd.grad(L.det(a), a, create_graph=True)
    np.testing.assert_allclose(g.detach().numpy(), [[4.0, -2.0], [-2.0, 1.0]], atol=1e-12)
    # double backward: d/dA sum(W o adj(A)^T) = [[W11, -W10], [-W01, W00]] (det is quadratic)
    w = _t([[1.0, 2.0], [3.0, 4.0]])
    np.testing.assert_allclose(lucid.autograd.grad((g * w).sum(), a).numpy(), [[4.0, -3.0], [-2.0, 1.0]], atol=1e-12)
    _, t = F.jvp(L.det, (a.detach(),), (_t(np.eye(2)),))
    assert abs(t.item() - 5.0) < 1e-12  # tr(adj(A) I)


def test_det_second_derivatives_at_rank_deficient_3x3_match_finite_differences():
    for a in (np.array([[1.0, 2, 3], [2, 4, 6], [1, 0, 1]]), np.zeros((3, 3)),
              np.array([[1.0, 2, 3], [2, 4, 6], [3, 6, 9]])):
        x = _t(a, True)
        assert lucid.autograd.gradcheck(L.det, (x,))
        assert lucid.autograd.gradgradcheck(L.det, (x,))
    # rank 1: the adjugate (all 2x2 minors) vanishes, the Hessian does not
    h = F.hessian(L.det)(_t(np.outer([1.0, 2, 3], [1.0, 1, 2])))
    assert np.abs(h.numpy()).max() > 1


def test_slogdet_at_a_singular_matrix_gives_infinite_not_an_error():
    a = _t([[1.0, 2.0], [2.0, 4.0]], True)
    sign, logabs = L.slogdet(a)
    assert sign.item() == 0 and logabs.item() == -np.inf
    with np.errstate(divide="ignore"):
        g = lucid.autograd.grad(logabs, a)
    assert np.all(np.isinf(g.numpy()))
    assert np.array_equal(np.sign(g.numpy()) * np.sign(g.numpy()[0, 0]), [[1, -1], [-1, 1]])  # adj's signs


def test_det_gradient_parity_with_torch():
    torch = pytest.importorskip("torch")
    for a in (np.array([[1.0, 2, 3], [2, 4, 6], [1, 0, 1]]), np.random.default_rng(3).standard_normal((4, 4))):
        at = torch.tensor(a, requires_grad=True)
        # (create_graph: without it PyTorch 2.13 returns 0, not the adjugate, for the singular one)
        (gt,) = torch.autograd.grad(torch.linalg.det(at), at, create_graph=True)
        x = _t(a, True)
        np.testing.assert_allclose(lucid.autograd.grad(L.det(x), x).numpy(), gt.detach().numpy(), atol=1e-12)


# ------------------------------------------------------------------------------ qr modes

def test_qr_modes_shapes_and_reconstruction():
    a = np.random.default_rng(4).standard_normal((2, 4, 3))
    q, r = L.qr(_t(a), mode="complete")
    assert q.shape == (2, 4, 4) and r.shape == (2, 4, 3)
    np.testing.assert_allclose((q @ r).numpy(), a, atol=1e-12)
    np.testing.assert_allclose((q.mT @ q).numpy(), np.broadcast_to(np.eye(4), (2, 4, 4)), atol=1e-12)
    q, r = L.qr(_t(a), mode="r")
    assert q.shape == (0,) and r.shape == (2, 3, 3)
    np.testing.assert_allclose(np.abs(r.numpy()), np.abs(np.linalg.qr(a)[1]), atol=1e-12)
    with pytest.raises(RuntimeError, match="mode must be"):
        L.qr(_t(a), mode="full")


def test_qr_derivatives_that_pytorch_refuses_raise():
    x = _t(np.random.default_rng(5).standard_normal((4, 2)), True)
    with pytest.raises(RuntimeError, match="not computed when mode='r'"):
        L.qr(x, mode="r").R.sum().backward()
    with pytest.raises(RuntimeError, match="not differentiable when mode='complete' and nrows > ncols"):
        L.qr(x, mode="complete").Q.sum().backward()


def test_qr_wide_gradient_parity_with_torch():
    torch = pytest.importorskip("torch")
    a = np.random.default_rng(6).standard_normal((2, 4))
    w1, w2 = np.arange(4.0).reshape(2, 2), np.arange(8.0).reshape(2, 4) / 3
    for mode in ("reduced", "complete"):
        at = torch.tensor(a, requires_grad=True)
        qt, rt = torch.linalg.qr(at, mode=mode)
        (gt,) = torch.autograd.grad((qt * torch.tensor(w1)).sum() + (rt * torch.tensor(w2)).sum(), at)
        x = _t(a, True)
        q, r = L.qr(x, mode=mode)
        g = lucid.autograd.grad((q * _t(w1)).sum() + (r * _t(w2)).sum(), x)
        np.testing.assert_allclose(g.numpy(), gt.numpy(), atol=1e-12)


# ----------------------------------------------------------------------- scaled norms

@pytest.mark.parametrize("scale", [1e200, 1e-200, 1e300, 1e-310, 1.0])
def test_vector_norm_neither_overflows_nor_underflows(scale):
    import math

    v = np.array([1.0, 1.0, 0.5, -0.25])
    for ord, exact in ((2, math.sqrt(2.3125)), (3, (2 + 0.125 + 1 / 64) ** (1 / 3)),
                       (0.5, (2 + math.sqrt(0.5) + 0.5) ** 2), (-2, (1 + 1 + 4 + 16) ** -0.5)):
        x = _t(v * scale, True)
        n = L.vector_norm(x, ord)
        assert n.item() == pytest.approx(exact * scale, rel=1e-12), ord
        g = lucid.autograd.grad(n, x).numpy()
        want = np.sign(v) * (np.abs(v) / exact) ** (ord - 1)
        np.testing.assert_allclose(g, want, rtol=1e-12)
    assert L.norm(_t(v * scale)).item() == pytest.approx(math.sqrt(2.3125) * scale, rel=1e-12)
    assert lucid.norm(_t(v * scale)).item() == pytest.approx(math.sqrt(2.3125) * scale, rel=1e-12)


def test_vector_norm_float32_extremes_and_special_values():
    x = lucid.tensor([1e30, 1e30], dtype=lucid.float32)
    assert L.vector_norm(x).dtype == lucid.float32
    assert L.vector_norm(x).item() == pytest.approx(1.4142135e30, rel=1e-6)
    assert L.vector_norm(lucid.tensor([1e-30, 1e-30], dtype=lucid.float32)).item() == pytest.approx(1.4142135e-30, rel=1e-6)
    assert L.vector_norm(_t([np.inf, 1.0])).item() == np.inf
    assert np.isnan(L.vector_norm(_t([np.nan, 1.0])).item())
    assert L.vector_norm(_t([0.0, 2.0]), -1).item() == 0.0
    assert L.vector_norm(_t(np.zeros((0,)))).item() == 0.0


@pytest.mark.parametrize("ord", [0.5, 1.5, 2, 3, -1])
def test_norm_gradient_at_the_zero_vector_is_zero(ord):
    z = _t(np.zeros(3), True)
    assert lucid.autograd.grad(L.vector_norm(z, ord), z).tolist() == [0.0, 0.0, 0.0]
    z = _t(np.zeros(3), True)
    assert lucid.autograd.grad(z.norm(ord), z).tolist() == [0.0, 0.0, 0.0]
    _, t = F.jvp(lambda v: L.vector_norm(v, ord), (_t(np.zeros(3)),), (_t(np.ones(3)),))
    assert t.item() == 0.0


def test_vector_norm_parity_with_torch():
    torch = pytest.importorskip("torch")
    a = np.array([[0.0, 2.0, -1.0], [0.3, -0.2, 0.0]])
    for ord in (0.5, 1.5, 2, 3, -1, -2.5):
        for dim in (None, 1):
            at = torch.tensor(a, requires_grad=True)
            nt = torch.linalg.vector_norm(at, ord, dim)
            (gt,) = torch.autograd.grad(nt.sum(), at)
            x = _t(a, True)
            n = L.vector_norm(x, ord, dim)
            np.testing.assert_allclose(n.detach().numpy(), nt.detach().numpy(), rtol=1e-13)
            np.testing.assert_allclose(lucid.autograd.grad(n.sum(), x).numpy(), gt.numpy(), rtol=1e-12, atol=1e-15)


# -------------------------------------------------------------- complex (PyTorch's convention)

def _complex_grads(mod, make, a, b, f):
    x, y = make(a), make(b)
    out = f(mod, x, y)
    ((out * out.conj()).real.sum()).backward()
    return [np.asarray(t.grad.detach().numpy()) for t in (x, y)]


@pytest.mark.parametrize("name", ["matmul", "einsum", "inv", "solve", "det"])
def test_complex_gradients_match_torch(name):
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(7)
    a = rng.standard_normal((3, 3)) + 1j * rng.standard_normal((3, 3)) + 3 * np.eye(3)
    b = rng.standard_normal((3, 2)) + 1j * rng.standard_normal((3, 2))
    f = {"matmul": lambda m, x, y: x @ y, "einsum": lambda m, x, y: m.einsum("ij,jk->ik", x, y),
         "inv": lambda m, x, y: m.linalg.inv(x) @ y, "solve": lambda m, x, y: m.linalg.solve(x, y),
         "det": lambda m, x, y: m.linalg.det(x) * y}[name]
    got = _complex_grads(lucid, lambda v: lucid.tensor(v, requires_grad=True), a, b, f)
    want = _complex_grads(torch, lambda v: torch.tensor(v, requires_grad=True), a, b, f)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-12, atol=1e-12)


def _cplx(rng, *shape):
    return rng.standard_normal(shape) + 1j * rng.standard_normal(shape)


def _herm(x):
    return x @ x.mT.conj() + 3 * lucid.eye(x.shape[-1], dtype=x.dtype)


# phase-invariant functions only: LAPACK fixes each singular/eigen-vector's phase arbitrarily
_COMPLEX_FNS = {
    "cholesky": lambda x: L.cholesky(_herm(x)),
    "eigh": lambda x: (lambda w, v: (w, (v * v.conj()).real))(*L.eigh(x + x.mT.conj())),
    "svd": lambda x: (lambda u, s, vh: (s, u @ vh, (u * u.conj()).real))(*L.svd(x, full_matrices=False)),
    "svdvals": L.svdvals,
    "qr": lambda x: tuple(L.qr(x)),
    "slogdet": lambda x: tuple(L.slogdet(x)),
    "det": L.det,
    "inv": L.inv,
    "lu": lambda x: tuple(L.lu(x))[1:],
    "matrix_exp": lambda x: L.matrix_exp(x * 0.3),
    "pinv": L.pinv,
    "eig": lambda x: (lambda w, v: (w, (v * v.conj()).real))(*L.eig(x)),
    "vector_norm_3": lambda x: L.vector_norm(x, 3, dim=0),
    "matrix_norm_nuc": lambda x: L.matrix_norm(x, "nuc"),
}


@pytest.mark.parametrize("name", sorted(_COMPLEX_FNS))
def test_complex_gradcheck_and_gradgradcheck(name):
    rng = np.random.default_rng(13)
    x = lucid.tensor(_cplx(rng, 3, 3) + (3 * np.eye(3) if name in ("inv", "det", "pinv", "eig") else 0),
                     requires_grad=True)
    f = _COMPLEX_FNS[name]
    assert lucid.autograd.gradcheck(f, (x,))
    if name not in ("eig", "matrix_exp"):  # (second order through the complex eig/expm: slow, covered by real)
        assert lucid.autograd.gradgradcheck(f, (x,))


@pytest.mark.parametrize("name", ["cholesky", "eigh", "svd", "qr", "slogdet", "lu", "pinv"])
def test_complex_gradients_match_torch_decompositions(name):
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(14)
    a = _cplx(rng, 3, 3)
    w = rng.standard_normal((3, 3))

    def loss(mod, x, wt):
        out = {"cholesky": lambda: mod.linalg.cholesky(x @ x.mT.conj() + 3 * mod.eye(3, dtype=x.dtype)),
               "eigh": lambda: (lambda r: r[0].sum() + ((r[1] * r[1].conj()).real * wt).sum())(mod.linalg.eigh(x + x.mT.conj())),
               "svd": lambda: (lambda r: r[0] @ r[2])(mod.linalg.svd(x, full_matrices=False)),
               "qr": lambda: (lambda r: r[0] * 2 + r[1])(mod.linalg.qr(x)),
               "slogdet": lambda: (lambda r: r[0] * 3 + r[1])(mod.linalg.slogdet(x)),
               "lu": lambda: (lambda r: r[1] @ r[2] + r[2])(mod.linalg.lu(x)),
               "pinv": lambda: mod.linalg.pinv(x)}[name]()
        out = out * wt if out.ndim == 2 else out
        return (out * out.conj()).real.sum() if out.is_complex() else out.sum()

    at = torch.tensor(a, requires_grad=True)
    (gt,) = torch.autograd.grad(loss(torch, at, torch.tensor(w)), at)
    x = lucid.tensor(a, requires_grad=True)
    g = lucid.autograd.grad(loss(lucid, x, lucid.tensor(w)), x)
    np.testing.assert_allclose(g.numpy(), gt.numpy(), rtol=1e-9, atol=1e-11)


def test_phase_dependent_complex_losses_raise_as_in_torch():
    rng = np.random.default_rng(16)
    x = lucid.tensor(_cplx(rng, 3, 3), requires_grad=True, device="cpu")  # a CPU check (README, Limitations)
    with pytest.raises(RuntimeError, match="svd_backward: The singular vectors in the complex case"):
        L.svd(x).U.real.sum().backward()
    with pytest.raises(RuntimeError, match="linalg_eig_backward: The eigenvectors in the complex case"):
        L.eig(x).eigenvectors.imag.sum().backward()
    L.svd(x).S.sum().backward()  # phase-free: fine
    assert x.grad is not None


def test_svd_full_matrices_default_and_its_gradient_rules():
    a = np.random.default_rng(17).standard_normal((4, 2))
    u, s, vh = L.svd(_t(a))
    assert u.shape == (4, 4) and vh.shape == (2, 2)
    np.testing.assert_allclose((u[:, :2] * s) @ vh, a, atol=1e-12)
    x = _t(a, True)
    g = lucid.autograd.grad(L.svd(x).S.sum(), x)
    uu, _, vv = np.linalg.svd(a, full_matrices=False)
    np.testing.assert_allclose(g.numpy(), uu @ vv, atol=1e-12)
    # as PyTorch 2.13: differentiable through the first min(m, n) columns (tests/linalg/test_linalg_ties.py)
    assert L.svd(x).U.requires_grad and L.svd(x, full_matrices=False).U.requires_grad
