"""Sparse CSR matrices: construction, conversions, products with dense matrices and their
gradients, printing and errors."""
import numpy as np
import pytest

import lucid
from lucid.autograd import gradcheck, gradgradcheck

CROW, COL, VAL = [0, 2, 3], [0, 2, 1], [1.0, 2.0, 3.0]
DENSE = np.array([[1.0, 0.0, 2.0], [0.0, 3.0, 0.0]])


def test_components_and_metadata():
    c = lucid.sparse_csr_tensor(CROW, COL, VAL, (2, 3))
    assert c.layout is lucid.sparse_csr and c.is_sparse_csr and not c.is_sparse
    assert isinstance(c, lucid.Tensor) and tuple(c.shape) == (2, 3) and c._nnz() == 3
    assert c.sparse_dim() == 2 and c.dense_dim() == 0
    np.testing.assert_array_equal(c.crow_indices().numpy(), CROW)
    np.testing.assert_array_equal(c.col_indices().numpy(), COL)
    np.testing.assert_array_equal(c.values().numpy(), VAL)
    np.testing.assert_array_equal(c.to_dense().numpy(), DENSE)
    assert tuple(lucid.sparse_csr_tensor(CROW, COL, VAL).shape) == (2, 3)  # inferred
    i32 = lucid.sparse_csr_tensor(lucid.tensor(CROW, dtype=lucid.int32), lucid.tensor(COL, dtype=lucid.int32), VAL)
    assert i32.crow_indices().dtype == lucid.int32
    np.testing.assert_array_equal(i32.to_dense().numpy(), DENSE)


def test_conversions():
    c = lucid.tensor(DENSE).to_sparse_csr()
    np.testing.assert_array_equal(c.crow_indices().numpy(), CROW)
    np.testing.assert_array_equal(c.col_indices().numpy(), COL)
    assert c.to_sparse_csr() is c
    assert lucid.tensor(DENSE).to_sparse(layout=lucid.sparse_csr).is_sparse_csr
    coo = c.to_sparse_coo()
    assert coo.is_sparse and coo.is_coalesced()
    np.testing.assert_array_equal(coo.indices().numpy(), [[0, 0, 1], [0, 2, 1]])
    back = coo.to_sparse_csr()
    np.testing.assert_array_equal(back.crow_indices().numpy(), CROW)
    uncoalesced = lucid.sparse_coo_tensor([[1, 0, 1], [1, 0, 1]], [1.0, 2.0, 3.0], (3, 2)).to_sparse_csr()
    np.testing.assert_array_equal(uncoalesced.crow_indices().numpy(), [0, 1, 2, 2])
    np.testing.assert_array_equal(uncoalesced.values().numpy(), [2.0, 4.0])
    with pytest.raises(RuntimeError, match="^to_sparse_csr: expected a 2-D tensor"):
        lucid.ones(3).to_sparse_csr()


@pytest.mark.parametrize("mm", [lambda c, d: c @ d, lambda c, d: lucid.mm(c, d), lambda c, d: lucid.matmul(c, d),
                                lambda c, d: lucid.sparse.mm(c, d), lambda c, d: c.matmul(d)])
def test_product_with_dense(mm):
    c = lucid.sparse_csr_tensor(CROW, COL, VAL, (2, 3))
    d = np.arange(6.0, dtype=np.float32).reshape(3, 2)
    np.testing.assert_allclose(mm(c, lucid.tensor(d)).numpy(), DENSE @ d)


def test_product_gradients():
    crow, col = lucid.tensor(CROW), lucid.tensor(COL)
    v = lucid.tensor(VAL, dtype=lucid.float64, requires_grad=True)
    d = lucid.tensor(np.random.default_rng(0).normal(size=(3, 2)), requires_grad=True)

    def f(v, d):
        return lucid.sparse_csr_tensor(crow, col, v, (2, 3)) @ d

    assert gradcheck(f, (v, d))
    assert gradgradcheck(f, (v, d))
    c = lucid.sparse_csr_tensor(CROW, COL, lucid.tensor(VAL, dtype=lucid.float64), (2, 3), requires_grad=True)
    (c @ d).sum().backward()
    assert c.grad.layout is lucid.sparse_csr
    np.testing.assert_allclose(c.grad.values().numpy(), d.detach().numpy().sum(1)[COL])
    np.testing.assert_array_equal(c.grad.crow_indices().numpy(), CROW)


def test_arithmetic_keeps_csr():
    c = lucid.sparse_csr_tensor(CROW, COL, VAL, (2, 3))
    for out, ref in ((c * 2, DENSE * 2), (c + c, DENSE * 2), (-c, -DENSE), (c / 2, DENSE / 2)):
        assert out.layout is lucid.sparse_csr
        np.testing.assert_array_equal(out.to_dense().numpy(), ref)
    assert c.sum().item() == 6.0
    np.testing.assert_array_equal((lucid.ones(2, 3) + c).numpy(), 1 + DENSE)


def test_repr_like_pytorch():
    c = lucid.sparse_csr_tensor(CROW, COL, VAL, (2, 3), device="cpu")
    assert repr(c) == ("tensor(crow_indices=tensor([0, 2, 3]),\n"
                       "       col_indices=tensor([0, 2, 1]),\n"
                       "       values=tensor([1., 2., 3.]), size=(2, 3), nnz=3,\n"
                       "       layout=lucid.sparse_csr)")


def test_errors():
    with pytest.raises(RuntimeError, match="^sparse_csr_tensor: crow_indices.size"):
        lucid.sparse_csr_tensor([0, 1], COL, VAL, (2, 3))
    with pytest.raises(RuntimeError, match="^sparse_csr_tensor: col_indices and values must have the same length"):
        lucid.sparse_csr_tensor(CROW, COL, VAL[:2], (2, 3))
    with pytest.raises(RuntimeError, match=r"^sparse_csr_tensor: `crow_indices\[..., -1\] == nnz`"):
        lucid.sparse_csr_tensor([0, 2, 4], COL, VAL, (2, 3), check_invariants=True)
    with pytest.raises(RuntimeError, match="^sparse_csr_tensor: both crow_indices and col_indices"):
        lucid.sparse_csr_tensor(lucid.tensor(CROW, dtype=lucid.int32), lucid.tensor(COL), VAL)
    t = lucid.sparse_csr_tensor(CROW, COL, VAL, (2, 3)).t()  # CSC, as PyTorch's (it raised before CSC existed)
    assert t.layout is lucid.sparse_csc and tuple(t.shape) == (3, 2)
    np.testing.assert_array_equal(t.to_dense().numpy(), lucid.sparse_csr_tensor(CROW, COL, VAL, (2, 3)).to_dense().numpy().T)
    with pytest.raises(NotImplementedError, match="^exp: sparse tensors are not supported here"):
        lucid.exp(lucid.sparse_csr_tensor(CROW, COL, VAL, (2, 3)))
