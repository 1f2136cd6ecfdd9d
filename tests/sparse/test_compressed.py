"""Sparse compressed layouts (CSR, CSC, BSR, BSC; batched and hybrid): construction,
conversions between every pair of layouts, transposes, products with dense matrices and
their gradients, elementwise ops, printing and errors. Reference values are written out
(PyTorch 2.13's) or computed with NumPy."""
import numpy as np
import pytest

import lucid
from lucid.autograd import gradcheck

A = np.array([[1.0, 0.0, 2.0, 0.0], [0.0, 3.0, 0.0, 0.0], [0.0, 0.0, 0.0, 4.0], [5.0, 0.0, 0.0, 0.0]])
LAYOUTS = [("csr", None), ("csc", None), ("bsr", (2, 2)), ("bsc", (2, 2)), ("bsr", (1, 2)), ("bsc", (2, 1))]


def _convert(x, name, bs):
    return x.to_sparse(layout=getattr(lucid, f"sparse_{name}"), blocksize=bs)


def test_components_from_dense_match_pytorch():
    x = lucid.tensor(A)
    c = x.to_sparse_csc()
    assert c.layout is lucid.sparse_csc and not c.is_sparse and not c.is_sparse_csr
    np.testing.assert_array_equal(c.ccol_indices().numpy(), [0, 2, 3, 4, 5])
    np.testing.assert_array_equal(c.row_indices().numpy(), [0, 3, 1, 0, 2])
    np.testing.assert_array_equal(c.values().numpy(), [1, 5, 3, 2, 4])
    b = x.to_sparse_bsr((2, 2))
    assert b.layout is lucid.sparse_bsr and b._nnz() == 4 and b.dense_dim() == 0 and b.sparse_dim() == 2
    np.testing.assert_array_equal(b.crow_indices().numpy(), [0, 2, 4])
    np.testing.assert_array_equal(b.col_indices().numpy(), [0, 1, 0, 1])
    np.testing.assert_array_equal(b.values().numpy(), A.reshape(2, 2, 2, 2).transpose(0, 2, 1, 3).reshape(4, 2, 2))
    bc = x.to_sparse_bsc((2, 2))
    np.testing.assert_array_equal(bc.ccol_indices().numpy(), [0, 2, 4])
    np.testing.assert_array_equal(bc.row_indices().numpy(), [0, 1, 0, 1])
    np.testing.assert_array_equal(bc.values().numpy()[1], [[0, 0], [5, 0]])  # block (1, 0) second
    assert b.crow_indices().dtype == lucid.int64 and c.row_indices().dtype == lucid.int64
    for s in (c, b, bc):
        np.testing.assert_array_equal(s.to_dense().numpy(), A)


@pytest.mark.parametrize("src", LAYOUTS)
@pytest.mark.parametrize("dst", LAYOUTS + [("coo", None)])
def test_conversions_between_layouts_keep_the_values(src, dst):
    s = _convert(lucid.tensor(A), *src)
    if src[1] is not None and (dst[1] is None and dst[0] != "coo" or dst[1] not in (None, src[1])):
        with pytest.raises(RuntimeError, match="^to_sparse: "):  # PyTorch refuses these too
            _convert(s, *dst)
        return
    out = _convert(s, *dst)
    assert out.layout is getattr(lucid, f"sparse_{dst[0]}")
    np.testing.assert_array_equal(out.to_dense().numpy(), A)


def test_block_coo_form_lists_every_block_element_in_storage_order():
    coo = lucid.tensor(A).to_sparse_bsr((2, 2)).to_sparse_coo()
    assert coo._nnz() == 16 and not coo.is_coalesced()
    np.testing.assert_array_equal(coo._indices().numpy()[0], [0, 0, 1, 1, 0, 0, 1, 1, 2, 2, 3, 3, 2, 2, 3, 3])
    csc_coo = lucid.tensor(A).to_sparse_csc().to_sparse_coo()
    np.testing.assert_array_equal(csc_coo._indices().numpy(), [[0, 3, 1, 0, 2], [0, 0, 1, 2, 3]])
    assert not csc_coo.is_coalesced() and lucid.tensor(A).to_sparse_csr().to_sparse_coo().is_coalesced()


def test_batched_and_hybrid():
    x = np.stack([A, 2 * A])
    b = lucid.tensor(x).to_sparse_csr()
    assert tuple(b.crow_indices().shape) == (2, 5) and tuple(b.values().shape) == (2, 5) and b._nnz() == 5
    np.testing.assert_array_equal(b.to_dense().numpy(), x)
    np.testing.assert_array_equal(b.to_sparse_coo().to_dense().numpy(), x)
    with pytest.raises(RuntimeError, match="^to_sparse_csr: Expect the same number of specified elements per batch"):
        lucid.tensor(np.stack([A, 0 * A])).to_sparse_csr()
    h = np.zeros((3, 4, 2))
    h[0, 1] = [1.0, 0.0]
    h[2, 3] = [0.0, 7.0]
    for name in ("csr", "csc"):
        s = getattr(lucid.tensor(h), f"to_sparse_{name}")(dense_dim=1)
        assert s.dense_dim() == 1 and tuple(s.values().shape) == (2, 2)
        np.testing.assert_array_equal(s.to_dense().numpy(), h)
    hb = lucid.tensor(np.ones((2, 4, 2))).to_sparse_bsr((2, 2), dense_dim=1)
    assert tuple(hb.values().shape) == (2, 2, 2, 2)
    np.testing.assert_array_equal(hb.to_dense().numpy(), np.ones((2, 4, 2)))
    with pytest.raises(RuntimeError, match=r"^to_sparse_csr: dense_dim argument must be in \[0,0\] range"):
        lucid.tensor(A).to_sparse_csr(dense_dim=1)
    bb = lucid.tensor(x).to_sparse_bsc((2, 2))
    np.testing.assert_array_equal(bb.to_dense().numpy(), x)


def test_constructors_infer_sizes_and_check_invariants():
    c = lucid.sparse_csc_tensor([0, 1, 3], [1, 0, 1], [1.0, 2.0, 3.0])
    assert tuple(c.shape) == (2, 2)
    np.testing.assert_array_equal(c.to_dense().numpy(), [[0, 2], [1, 3]])
    b = lucid.sparse_bsr_tensor([0, 1], [1], lucid.ones(1, 2, 3))
    assert tuple(b.shape) == (2, 6)
    bc = lucid.sparse_bsc_tensor([0, 1, 1], [0], lucid.ones(1, 2, 3))
    assert tuple(bc.shape) == (2, 6)
    s = lucid.sparse_compressed_tensor([0, 1, 2], [1, 0], [1.0, 2.0], (2, 2), layout=lucid.sparse_csc)
    assert s.layout is lucid.sparse_csc
    hyb = lucid.sparse_csr_tensor([0, 1], [0], lucid.ones(1, 2))
    assert tuple(hyb.shape) == (1, 1, 2) and hyb.dense_dim() == 1
    i32 = lucid.tensor([0, 1, 3], dtype=lucid.int32)
    assert lucid.sparse_csc_tensor(i32, lucid.tensor([1, 0, 1], dtype=lucid.int32), [1.0, 2.0, 3.0]) \
        .ccol_indices().dtype == lucid.int32
    with pytest.raises(RuntimeError, match="^sparse_compressed_tensor: expected sparse compressed tensor layout"):
        lucid.sparse_compressed_tensor([0, 1], [0], [1.0])
    with pytest.raises(RuntimeError, match=r"^sparse_csc_tensor: `row_indices\[..., ccol_indices"):
        lucid.sparse_csc_tensor([0, 1, 3], [0, 1, 1], [1.0, 2.0, 3.0], (3, 2), check_invariants=True)
    with pytest.raises(RuntimeError, match=r"^sparse_bsr_tensor: `0 <= col_indices < ncols`"):
        lucid.sparse_bsr_tensor([0, 1], [2], lucid.ones(1, 2, 2), (2, 4), check_invariants=True)
    with pytest.raises(RuntimeError, match=r"^sparse_csr_tensor: crow_indices and col_indices dimensionalities"):
        lucid.sparse_csr_tensor([[0, 1], [0, 1]], [0, 1], lucid.ones(2, 1))
    with pytest.raises(RuntimeError, match=r"^to_sparse_bsr: tensor sparse size \(4,4\) must be divisible"):
        lucid.tensor(A).to_sparse_bsr((3, 3))
    with pytest.raises(RuntimeError, match="^crow_indices: expected sparse row compressed tensor layout"):
        c.crow_indices()
    with pytest.raises(RuntimeError, match="^ccol_indices: expected sparse column compressed"):
        lucid.tensor(A).to_sparse_bsr((2, 2)).ccol_indices()
    with pytest.raises(RuntimeError, match="^to_sparse: conversion to SparseBsr without blocksize"):
        lucid.tensor(A).to_sparse(layout=lucid.sparse_bsr)


def test_transpose_swaps_csr_and_csc_and_the_blocks():
    x = np.arange(1.0, 25.0).reshape(4, 6) * (np.arange(24).reshape(4, 6) % 3 == 0)
    pairs = {"csr": "csc", "csc": "csr", "bsr": "bsc", "bsc": "bsr"}
    for name, bs in LAYOUTS:
        s = _convert(lucid.tensor(x), name, bs)
        t = s.transpose(0, 1)
        assert t.layout is getattr(lucid, f"sparse_{pairs[name]}") and tuple(t.shape) == (6, 4)
        np.testing.assert_array_equal(t.to_dense().numpy(), x.T)
        np.testing.assert_array_equal(t.values().numpy(), np.swapaxes(s.values().numpy(), -1, -2)
                                      if bs else s.values().numpy())
        assert s.transpose(1, 1) is s
    assert lucid.tensor(x).to_sparse_csc().t().layout is lucid.sparse_csr
    with pytest.raises(RuntimeError, match=r"^transpose: can only transpose dimensions of the same type"):
        lucid.tensor(np.stack([A, A])).to_sparse_csr().transpose(0, 1)


def test_repr_like_pytorch():
    assert repr(lucid.tensor(A, device="cpu").to_sparse_csc()) == (
        "tensor(ccol_indices=tensor([0, 2, 3, 4, 5]),\n"
        "       row_indices=tensor([0, 3, 1, 0, 2]),\n"
        "       values=tensor([1., 5., 3., 2., 4.]), size=(4, 4), nnz=5,\n"
        "       dtype=lucid.float64, layout=lucid.sparse_csc)")
    b = lucid.tensor(A[:2, :2], dtype=lucid.float32, device="cpu").to_sparse_bsr((2, 2))
    assert repr(b) == ("tensor(crow_indices=tensor([0, 1]),\n"
                       "       col_indices=tensor([0]),\n"
                       "       values=tensor([[[1., 0.],\n"
                       "                       [0., 3.]]]), size=(2, 2), nnz=1,\n"
                       "       layout=lucid.sparse_bsr)")


@pytest.mark.parametrize("layout", LAYOUTS)
def test_products_with_dense_and_their_gradients(layout):
    rng = np.random.default_rng(0)
    d = rng.normal(size=(4, 3))
    s = _convert(lucid.tensor(A), *layout)
    for out in (s @ lucid.tensor(d), lucid.mm(s, lucid.tensor(d)), lucid.sparse.mm(s, lucid.tensor(d)),
                lucid.matmul(s, lucid.tensor(d))):
        np.testing.assert_allclose(out.numpy(), A @ d, rtol=1e-12)
    np.testing.assert_allclose((s @ lucid.tensor(d[:, 0])).numpy(), A @ d[:, 0], rtol=1e-12)
    np.testing.assert_allclose((lucid.tensor(d.T) @ s).numpy(), d.T @ A, rtol=1e-12)
    np.testing.assert_allclose(lucid.addmm(lucid.ones(4, 3, dtype=lucid.float64), s, lucid.tensor(d), beta=0.5,
                                           alpha=2.0).numpy(), 0.5 + 2 * A @ d, rtol=1e-12)
    leaf = s.detach().requires_grad_(True)
    w = lucid.tensor(d, requires_grad=True)
    g = rng.normal(size=(4, 3))
    ((leaf @ w) * lucid.tensor(g)).sum().backward()
    np.testing.assert_allclose(w.grad.numpy(), A.T @ g, rtol=1e-12)
    assert leaf.grad.layout is leaf.layout
    # on the stored pattern: the explicit zeros of a stored block get their gradient too
    np.testing.assert_allclose(leaf.grad.to_dense().numpy(), (g @ d.T) * _pattern(s), rtol=1e-12)
    cidx, pidx = s._cidx, s._pidx

    def f(v, w):
        from lucid.sparse._compressed import make_compressed
        return make_compressed(s.layout, cidx, pidx, v, s.shape) @ w

    assert gradcheck(f, (s.values().detach().requires_grad_(True), lucid.tensor(d, requires_grad=True)))


@pytest.mark.parametrize("layout", LAYOUTS)
def test_elementwise_keep_the_layout(layout):
    s = _convert(lucid.tensor(A), *layout)
    for out, ref in ((s * 2, 2 * A), (-s, -A), (s.abs(), A), (s + s, 2 * A), (s / 2, A / 2), (s.sqrt(), np.sqrt(A)),
                     (s * lucid.tensor(A), A * A), (lucid.tensor(A + 1).sparse_mask(s), (A + 1) * _pattern(s)),
                     (s.to(lucid.float32), A), (s.clone(), A)):
        assert out.layout is s.layout
        np.testing.assert_allclose(out.to_dense().numpy(), ref, rtol=1e-6)
    assert s.sum().item() == A.sum() and lucid.sparse.sum(s).item() == A.sum()
    np.testing.assert_array_equal((s + lucid.tensor(A)).numpy(), 2 * A)


def _pattern(s):
    m = np.zeros(tuple(s.shape), dtype=bool)
    idx = s.to_sparse_coo()._indices().numpy()
    m[idx[0], idx[1]] = True
    return m


def test_values_gradient_through_to_dense_and_from_a_leaf_values_tensor():
    v = lucid.tensor([1.0, 2.0, 3.0], dtype=lucid.float64, requires_grad=True)
    c = lucid.sparse_csc_tensor([0, 1, 3], [1, 0, 1], v, (2, 2))
    assert not c.is_leaf and c.grad_fn is not None
    (c.to_dense() * lucid.tensor([[1.0, 10.0], [100.0, 1000.0]], dtype=lucid.float64)).sum().backward()
    np.testing.assert_array_equal(v.grad.numpy(), [100.0, 10.0, 1000.0])


def test_spdiags_csc_layout():
    d = lucid.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
    out = lucid.sparse.spdiags(d, lucid.tensor([0, -1]), (3, 3), layout=lucid.sparse_csc)
    assert out.layout is lucid.sparse_csc
    np.testing.assert_array_equal(out.to_dense().numpy(), [[1, 0, 0], [4, 2, 0], [0, 5, 3]])


@pytest.mark.parametrize("layout", LAYOUTS)
def test_on_the_strict_device_a_training_step_reads_nothing_back(layout):
    from lucid.testing import strict_device

    strict_device.enable()
    s = _convert(lucid.tensor(A, device="strict:0"), *layout)
    assert s.device == lucid.device("strict:0") and s._cidx.device == s.device and s._pidx.device == s.device
    moved = s.to("cpu")
    assert moved.device == lucid.device("cpu") and moved._cidx.device == lucid.device("cpu")
    w = lucid.ones(4, 2, dtype=lucid.float64, device="strict:0", requires_grad=True)
    reads = strict_device.HOST_READS[0]
    for _ in range(2):
        loss = (s @ w).pow(2).mean() + (s.transpose(0, 1) @ w).sum()
        loss.backward()
        with lucid.no_grad():
            w -= 0.1 * w.grad
        w.grad = None
    assert strict_device.HOST_READS[0] == reads
    np.testing.assert_allclose(s.to_dense().to("cpu").numpy(), A)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_sampled_addmm_on_every_stored_element(layout):
    s = _convert(lucid.tensor(A), *layout)
    d = np.arange(8.0).reshape(4, 2)
    out = lucid.sparse.sampled_addmm(s, lucid.tensor(d), lucid.tensor(d.T), beta=2.0, alpha=0.5)
    assert out.layout is s.layout
    np.testing.assert_allclose(out.to_dense().numpy(), (2 * A + 0.5 * d @ d.T) * _pattern(s), rtol=1e-12)


def test_hybrid_coo_to_compressed_and_a_leaf_gets_a_gradient_on_its_pattern():
    coo = lucid.sparse_coo_tensor([[0, 1, 1], [2, 0, 2]], lucid.tensor([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]]), (2, 3, 2))
    for name in ("csr", "csc"):
        out = getattr(coo, f"to_sparse_{name}")()
        assert out.dense_dim() == 1
        np.testing.assert_array_equal(out.to_dense().numpy(), coo.to_dense().numpy())
    c = lucid.sparse_csc_tensor([0, 1, 1, 3], [1, 0, 1], lucid.tensor([1.0, 2.0, 3.0], dtype=lucid.float64), (2, 3),
                                requires_grad=True)
    assert c.is_leaf and c.requires_grad
    (c @ lucid.tensor([[1.0], [2.0], [3.0]], dtype=lucid.float64)).sum().backward()
    assert c.grad.layout is lucid.sparse_csc
    np.testing.assert_array_equal(c.grad.values().numpy(), [1.0, 3.0, 3.0])
    np.testing.assert_array_equal(c.grad.ccol_indices().numpy(), [0, 1, 1, 3])


def test_int32_indices_survive_conversions_and_arithmetic():
    i32 = lucid.int32
    c = lucid.sparse_csr_tensor(lucid.tensor([0, 1, 2], dtype=i32), lucid.tensor([1, 0], dtype=i32),
                                lucid.tensor([1.0, 2.0]), (2, 2))
    for out in (c.to_sparse_csc(), c.to_sparse_bsr((1, 1)), c.to_sparse_bsc((1, 1)), c.transpose(0, 1), c + c, c * c,
                c * 2):
        assert out._cidx.dtype == i32 and out._pidx.dtype == i32
        np.testing.assert_array_equal(out.to_dense().numpy() != 0, [[False, True], [True, False]])
    assert c.to_sparse_coo()._indices().dtype == lucid.int64
