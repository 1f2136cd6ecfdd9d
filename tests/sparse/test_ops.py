"""lucid.sparse operations against dense references (to_dense, then the dense op or NumPy),
gradients by gradcheck in float64 through the values and through the dense operand."""
import numpy as np
import pytest

import lucid
from lucid.autograd import gradcheck, gradgradcheck

rng = np.random.default_rng(0)
IDX = np.array([[0, 1, 1, 2, 0], [1, 0, 2, 2, 1]])  # (0, 1) twice: uncoalesced
VAL = rng.normal(size=5)
SHAPE = (3, 4)
DENSE = rng.normal(size=(4, 2))


def dense_ref(idx, val, shape):
    out = np.zeros(shape + np.asarray(val).shape[1:])
    np.add.at(out, tuple(idx), val)
    return out


def sp(val=VAL, idx=IDX, shape=SHAPE, **kw):
    return lucid.sparse_coo_tensor(lucid.tensor(idx), lucid.tensor(val, dtype=lucid.float64), shape, **kw)


A = dense_ref(IDX, VAL, SHAPE)


@pytest.mark.parametrize("mm", [
    lambda s, d: lucid.sparse.mm(s, d),
    lambda s, d: lucid.mm(s, d),
    lambda s, d: lucid.matmul(s, d),
    lambda s, d: s @ d,
    lambda s, d: s.mm(d),
    lambda s, d: s.to_sparse_csr() @ d,
    lambda s, d: lucid.sparse.mm(s.to_sparse_csr(), d),
])
def test_sparse_dense_product(mm):
    out = mm(sp(), lucid.tensor(DENSE))
    assert not out.is_sparse and tuple(out.shape) == (3, 2)
    np.testing.assert_allclose(out.numpy(), A @ DENSE, rtol=1e-12)


def test_matrix_vector_and_dense_sparse():
    v = rng.normal(size=4)
    np.testing.assert_allclose((sp() @ lucid.tensor(v)).numpy(), A @ v, rtol=1e-12)
    np.testing.assert_allclose(sp().mv(lucid.tensor(v)).numpy(), A @ v, rtol=1e-12)
    left = rng.normal(size=(2, 3))
    np.testing.assert_allclose((lucid.tensor(left) @ sp()).numpy(), left @ A, rtol=1e-12)
    np.testing.assert_allclose(lucid.sparse.mm(lucid.tensor(left), sp()).numpy(), left @ A, rtol=1e-12)
    np.testing.assert_allclose(lucid.mm(lucid.tensor(left), sp()).numpy(), left @ A, rtol=1e-12)


def test_sparse_sparse_product_keeps_the_structural_pattern():
    b = lucid.tensor([[1.0, 0.0], [0.0, 0.0], [0.0, -1.0], [2.0, 0.0]], dtype=lucid.float64).to_sparse()
    out = sp() @ b
    assert out.is_sparse and out.is_coalesced()
    np.testing.assert_allclose(out.to_dense().numpy(), A @ b.to_dense().numpy(), rtol=1e-12)
    lhs = np.abs(A) > 0
    rhs = np.abs(b.to_dense().numpy()) > 0
    assert out._nnz() == int(((lhs.astype(int) @ rhs.astype(int)) > 0).sum())


def test_product_gradients_by_gradcheck():
    idx = lucid.tensor(IDX)
    v = lucid.tensor(VAL, requires_grad=True)
    d = lucid.tensor(DENSE, requires_grad=True)

    def f(v, d):
        return lucid.sparse.mm(lucid.sparse_coo_tensor(idx, v, SHAPE), d)

    assert gradcheck(f, (v, d))
    assert gradgradcheck(f, (v, d))

    def g(v, d):  # through CSR and through dense @ sparse
        s = lucid.sparse_coo_tensor(idx, v, SHAPE)
        return s.to_sparse_csr() @ d, d.t() @ s.t()

    assert gradcheck(g, (v, d))


def test_sparse_leaf_gradient_like_torch_sparse_mm():
    s = sp(requires_grad=True)
    d = lucid.tensor(DENSE, requires_grad=True)
    lucid.sparse.mm(s, d).sum().backward()
    g = s.grad
    assert g.is_sparse and g.is_coalesced()
    c = s.coalesce()
    np.testing.assert_array_equal(g.indices().numpy(), c.indices().numpy())
    # d(sum(S @ D)) / dS[i, k] = sum_j D[k, j], on S's pattern
    np.testing.assert_allclose(g.values().numpy(), DENSE.sum(1)[c.indices().numpy()[1]], rtol=1e-12)
    np.testing.assert_allclose(d.grad.numpy(), np.repeat(A.sum(0)[:, None], 2, 1), rtol=1e-12)


def test_addmm():
    inp = rng.normal(size=(3, 2))
    for out in (lucid.sparse.addmm(lucid.tensor(inp), sp(), lucid.tensor(DENSE), beta=2.0, alpha=-0.5),
                lucid.addmm(lucid.tensor(inp), sp(), lucid.tensor(DENSE), beta=2.0, alpha=-0.5)):
        np.testing.assert_allclose(out.numpy(), 2 * inp - 0.5 * A @ DENSE, rtol=1e-12)
    dense = lucid.addmm(lucid.tensor(inp), lucid.tensor(A), lucid.tensor(DENSE))
    np.testing.assert_allclose(dense.numpy(), inp + A @ DENSE, rtol=1e-12)


@pytest.mark.parametrize("dim", [None, 0, 1, (0, 1), -1])
def test_sum(dim):
    out = lucid.sparse.sum(sp(), dim)
    ref = A.sum() if dim is None else A.sum(axis=dim)
    if dim is None or dim == (0, 1):
        assert not out.is_sparse
        np.testing.assert_allclose(out.numpy(), ref, rtol=1e-12)
    else:
        assert out.is_sparse and out.is_coalesced()
        np.testing.assert_allclose(out.to_dense().numpy(), ref, rtol=1e-12)


def test_sum_hybrid_and_method():
    h = lucid.sparse_coo_tensor([[0, 2]], lucid.tensor([[1.0, 2.0], [3.0, 4.0]]), (3, 2))
    np.testing.assert_array_equal(lucid.sparse.sum(h, 0).numpy(), [4.0, 6.0])  # all sparse dims: dense
    s1 = lucid.sparse.sum(h, 1)
    assert s1.is_sparse
    np.testing.assert_array_equal(s1.to_dense().numpy(), [3.0, 0.0, 7.0])
    assert sp().sum().item() == pytest.approx(A.sum())
    assert lucid.sparse.sum(sp(), dtype=lucid.float32).dtype == lucid.float32
    with pytest.raises(IndexError, match="^sum: Dimension out of range"):
        lucid.sparse.sum(sp(), 5)


def _masked_softmax_ref(a, mask, axis, log=False):
    z = np.where(mask, a, -np.inf)
    m = np.max(np.where(mask, a, -np.inf), axis=axis, keepdims=True)
    e = np.where(mask, np.exp(z - np.where(np.isfinite(m), m, 0)), 0.0)
    p = e / np.where(e.sum(axis=axis, keepdims=True) == 0, 1, e.sum(axis=axis, keepdims=True))
    return np.where(mask, np.log(np.where(mask, p, 1)), 0.0) if log else p


@pytest.mark.parametrize("dim", [0, 1, -1])
@pytest.mark.parametrize("log", [False, True])
def test_softmax_over_specified_elements(dim, log):
    s = sp().coalesce()
    mask = np.zeros(SHAPE, bool)
    mask[tuple(s.indices().numpy())] = True
    fn = lucid.sparse.log_softmax if log else lucid.sparse.softmax
    out = fn(s, dim)
    assert out.is_sparse and out._nnz() == s._nnz()
    np.testing.assert_allclose(out.to_dense().numpy(), _masked_softmax_ref(A, mask, dim, log), rtol=1e-12,
                               atol=1e-15)


def test_softmax_dense_dim_and_large_values():
    h = lucid.sparse_coo_tensor([[0, 1]], lucid.tensor([[1.0, 2.0], [3.0, 4.0]], dtype=lucid.float64), (3, 2))
    np.testing.assert_allclose(lucid.sparse.softmax(h, 1).values().numpy(),
                               np.exp([[1, 2], [3, 4]]) / np.exp([[1, 2], [3, 4]]).sum(1, keepdims=True))
    np.testing.assert_allclose(lucid.sparse.softmax(h, 0).values().numpy(),
                               np.exp([[1, 2], [3, 4]]) / np.exp([[1, 2], [3, 4]]).sum(0, keepdims=True))
    big = lucid.sparse_coo_tensor([[0, 0, 1], [0, 1, 0]], [1000.0, 1001.0, -1000.0], (2, 2))
    np.testing.assert_allclose(lucid.sparse.softmax(big, 1).values().numpy(),
                               [1 / (1 + np.e), np.e / (1 + np.e), 1.0], rtol=1e-6)


def test_softmax_gradcheck():
    idx = lucid.tensor(IDX)
    v = lucid.tensor(VAL, requires_grad=True)

    def f(v):
        s = lucid.sparse_coo_tensor(idx, v, SHAPE)
        return lucid.sparse.softmax(s, 1).values(), lucid.sparse.log_softmax(s, 0).values()

    assert gradcheck(f, (v,))
    assert gradgradcheck(f, (v,))


def test_add_sub_and_coalesced_flags():
    a, b = sp(), sp(VAL[::-1].copy())
    s = a + b
    assert s.is_sparse and not s.is_coalesced()
    np.testing.assert_allclose(s.to_dense().numpy(), A + dense_ref(IDX, VAL[::-1], SHAPE), rtol=1e-12)
    c = a.coalesce() + b.coalesce()
    assert c.is_coalesced() and c._nnz() == 4
    np.testing.assert_allclose((a - b).to_dense().numpy(), A - dense_ref(IDX, VAL[::-1], SHAPE), rtol=1e-12,
                               atol=1e-15)
    np.testing.assert_allclose(a.add(b, alpha=3).to_dense().numpy(),
                               A + 3 * dense_ref(IDX, VAL[::-1], SHAPE), rtol=1e-12)
    with pytest.raises(RuntimeError, match="^add: expected sizes of 'self' and 'other' to match"):
        a + sp(shape=(3, 5))
    mixed = sp() + lucid.sparse_coo_tensor([[0], [0]], [1.0], SHAPE)  # float64 + float32
    assert mixed.dtype == lucid.float64


def test_sparse_dense_mixes_give_dense():
    d = rng.normal(size=SHAPE)
    for out, ref in ((lucid.tensor(d) + sp(), d + A), (sp() + lucid.tensor(d), A + d),
                     (lucid.tensor(d) - sp(), d - A), (sp() - lucid.tensor(d), A - d)):
        assert not out.is_sparse
        np.testing.assert_allclose(out.numpy(), ref, rtol=1e-12)
    with pytest.raises(RuntimeError, match="^add: a sparse tensor and a number"):
        sp() + 1


def test_mul_div_neg_keep_the_pattern():
    for out, ref in ((sp() * 2.5, A * 2.5), (2.5 * sp(), A * 2.5), (sp() / 4, A / 4), (-sp(), -A),
                     (sp() * lucid.tensor(3.0, dtype=lucid.float64), A * 3),
                     (sp() * lucid.tensor(np.arange(4.0)), A * np.arange(4.0))):
        assert out.is_sparse
        np.testing.assert_allclose(out.to_dense().numpy(), ref, rtol=1e-12)
    with pytest.raises(RuntimeError, match="^div: Sparse division requires a scalar"):
        sp() / sp()


def test_sparse_times_sparse_is_the_intersection():
    b_idx = np.array([[0, 2, 1], [1, 2, 3]])
    b_val = np.array([2.0, -3.0, 7.0])
    b = sp(b_val, b_idx)
    out = sp() * b
    assert out.is_sparse and out.is_coalesced() and out._nnz() == 2
    np.testing.assert_allclose(out.to_dense().numpy(), A * dense_ref(b_idx, b_val, SHAPE), rtol=1e-12)
    idx = lucid.tensor(IDX)
    v = lucid.tensor(VAL, requires_grad=True)
    w = lucid.tensor(b_val, requires_grad=True)
    assert gradcheck(lambda v, w: (lucid.sparse_coo_tensor(idx, v, SHAPE)
                                   * lucid.sparse_coo_tensor(lucid.tensor(b_idx), w, SHAPE)).to_dense(), (v, w))


@pytest.mark.parametrize("name", ["abs", "sin", "tanh", "sqrt", "square", "relu", "neg"])
def test_zero_preserving_unary(name):
    s = sp(np.abs(VAL) if name == "sqrt" else VAL)
    out = getattr(s, name)()
    assert out.is_sparse
    ref = getattr(lucid, name)(s.to_dense()).numpy()
    np.testing.assert_allclose(out.to_dense().numpy(), ref, rtol=1e-12)


def test_pow():
    np.testing.assert_allclose((sp() ** 2).to_dense().numpy(), A ** 2, rtol=1e-12)
    with pytest.raises(RuntimeError, match="^pow: cannot raise to zeroth power"):
        sp() ** 0


def test_hspmm_smm_sampled_addmm_spdiags():
    s = lucid.sparse_coo_tensor([[1, 1], [0, 2]], [2.0, 3.0], (3, 3))
    d = lucid.tensor(np.arange(6.0).reshape(3, 2), dtype=lucid.float32)
    ref = s.to_dense().numpy() @ d.numpy()
    h = lucid.hspmm(s, d)
    assert h.sparse_dim() == 1 and h.dense_dim() == 1
    np.testing.assert_array_equal(h.indices().numpy(), [[1]])
    np.testing.assert_array_equal(h.to_dense().numpy(), ref)
    m = lucid.smm(s, d)
    assert m.sparse_dim() == 2 and m._nnz() == 2
    np.testing.assert_array_equal(m.to_dense().numpy(), ref)
    c = lucid.sparse_csr_tensor([0, 2, 3], [0, 2, 1], [1.0, 2.0, 3.0], (2, 3))
    m1, m2 = rng.normal(size=(2, 4)), rng.normal(size=(4, 3))
    out = lucid.sparse.sampled_addmm(c, lucid.tensor(m1, dtype=lucid.float32), lucid.tensor(m2, dtype=lucid.float32),
                                     beta=0.5, alpha=2.0)
    assert out.layout is lucid.sparse_csr
    full = 0.5 * c.to_dense().numpy() + 2.0 * m1 @ m2
    np.testing.assert_allclose(out.values().numpy(), full[[0, 0, 1], [0, 2, 1]], rtol=1e-5)
    diags = lucid.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0], [7.0, 8.0, 9.0]])
    sd = lucid.sparse.spdiags(diags, lucid.tensor([0, -1, 1]), (3, 3))
    ref = np.diag([1.0, 2.0, 3.0]) + np.diag([4.0, 5.0], -1) + np.diag([8.0, 9.0], 1)
    np.testing.assert_array_equal(sd.to_dense().numpy(), ref)
    assert lucid.sparse.spdiags(diags, lucid.tensor([0, -1, 1]), (3, 3), layout=lucid.sparse_csr).is_sparse_csr


def test_errors_name_the_function():
    with pytest.raises(RuntimeError, match="^mm: mat1 and mat2 shapes cannot be multiplied"):
        lucid.sparse.mm(sp(), lucid.ones(3, 2, dtype=lucid.float64))
    with pytest.raises(RuntimeError, match="^mm: expected scalar type"):
        lucid.sparse.mm(sp(), lucid.ones(4, 2, dtype=lucid.float32))
    with pytest.raises(RuntimeError, match="^mm: expected a 2-D sparse matrix without dense dims"):
        lucid.sparse.mm(lucid.sparse_coo_tensor([[0]], lucid.ones(1, 4, dtype=lucid.float64)),
                        lucid.ones(4, 2, dtype=lucid.float64))
    with pytest.raises(TypeError, match="^sum: expected a sparse tensor"):
        lucid.sparse.sum(lucid.ones(2))
    with pytest.raises(TypeError, match="^softmax: expected a sparse tensor"):
        lucid.sparse.softmax(lucid.ones(2), 0)


def test_vmap_over_values_matches_a_loop():
    idx = lucid.tensor(IDX)
    d = lucid.tensor(DENSE)
    batch = lucid.tensor(rng.normal(size=(3, 5)))

    def f(v):
        return lucid.sparse.mm(lucid.sparse_coo_tensor(idx, v, SHAPE), d)

    got = lucid.vmap(f)(batch)
    for i in range(3):
        np.testing.assert_allclose(got[i].numpy(), f(batch[i]).numpy(), rtol=1e-12)


def test_func_grad_through_a_sparse_product():
    idx = lucid.tensor(IDX)
    d = lucid.tensor(DENSE)
    g = lucid.func.grad(lambda v: lucid.sparse.mm(lucid.sparse_coo_tensor(idx, v, SHAPE), d).sum())(
        lucid.tensor(VAL))
    np.testing.assert_allclose(g.numpy(), DENSE.sum(1)[IDX[1]], rtol=1e-12)


def test_wrapped_top_level_products_keep_their_dense_behaviour():
    a, b = lucid.tensor(rng.normal(size=(2, 3))), lucid.tensor(rng.normal(size=(3, 2)))
    y = lucid.empty(2, 2, dtype=lucid.float64)
    assert lucid.mm(a, b, out=y) is y
    np.testing.assert_allclose(y.numpy(), a.numpy() @ b.numpy(), rtol=1e-12)
    assert lucid.mm.__name__ == "mm" and lucid.matmul.__doc__
    with pytest.raises(NotImplementedError, match="^mm: extra arguments"):
        lucid.mm(sp(), lucid.tensor(DENSE), out=y)
    assert sp().cpu().type() == "lucid.sparse.DoubleTensor" and sp().type(lucid.float32).dtype == lucid.float32
