"""Sparse COO tensors: construction, size inference, coalescing, conversions, autograd
identity, printing and errors, checked against dense NumPy references."""
import copy
import pickle

import numpy as np
import pytest

import lucid
from lucid.autograd import gradcheck, gradgradcheck

IDX = [[1, 0, 1, 2], [2, 0, 2, 1]]
VAL = [3.0, 4.0, 5.0, -1.0]


def dense_ref(idx, val, shape):
    out = np.zeros(shape, dtype=np.asarray(val).dtype)
    np.add.at(out, tuple(np.asarray(idx)), np.asarray(val))
    return out


def test_construction_and_metadata():
    s = lucid.sparse_coo_tensor(IDX, VAL)
    assert tuple(s.shape) == (3, 3) and s.size() == (3, 3) and s.size(1) == 3
    assert s.dtype == lucid.float32 and s.layout is lucid.sparse_coo and s.is_sparse
    assert not s.is_sparse_csr and isinstance(s, lucid.Tensor)
    assert s.sparse_dim() == 2 and s.dense_dim() == 0 and s._nnz() == 4
    assert s.dim() == 2 and s.ndim == 2 and s.numel() == 9 and len(s) == 3
    assert not s.is_coalesced() and not s.requires_grad and s.is_leaf
    np.testing.assert_array_equal(s._indices().numpy(), IDX)
    np.testing.assert_array_equal(s._values().numpy(), VAL)
    np.testing.assert_array_equal(s.to_dense().numpy(), dense_ref(IDX, VAL, (3, 3)))


def test_dense_tensors_are_strided():
    x = lucid.ones(2)
    assert x.layout is lucid.strided and not x.is_sparse and x.to_dense() is x
    assert lucid.sparse_coo is not lucid.strided and repr(lucid.sparse_csr) == "lucid.sparse_csr"
    assert pickle.loads(pickle.dumps(lucid.sparse_coo)) is lucid.sparse_coo


def test_size_inference_and_given_size():
    assert tuple(lucid.sparse_coo_tensor([[0, 4]], [1.0, 2.0]).shape) == (5,)
    hybrid = lucid.sparse_coo_tensor([[0, 2]], lucid.ones(2, 3))
    assert tuple(hybrid.shape) == (3, 3) and hybrid.sparse_dim() == 1 and hybrid.dense_dim() == 1
    empty = lucid.sparse_coo_tensor(lucid.zeros(2, 0, dtype=lucid.int64), lucid.zeros(0))
    assert tuple(empty.shape) == (0, 0) and empty._nnz() == 0 and empty.is_coalesced()
    s = lucid.sparse_coo_tensor(IDX, VAL, (4, 5))
    assert tuple(s.shape) == (4, 5)
    np.testing.assert_array_equal(s.to_dense().numpy(), dense_ref(IDX, VAL, (4, 5)))


def test_dtype_device_and_float_indices():
    s = lucid.sparse_coo_tensor([[0.0, 1.0]], [1, 2], dtype=lucid.float64)
    assert s.dtype == lucid.float64 and s._indices().dtype == lucid.int64
    assert lucid.sparse_coo_tensor([[0, 1]], [1, 2]).dtype == lucid.int64


@pytest.mark.parametrize("args, kwargs, exc, msg", [
    (([1], [1.0]), {"size": (2,)}, RuntimeError, "indices must be sparse_dim x nnz"),
    (([[1]], [1.0, 2.0]), {"size": (2,)}, RuntimeError, "same nnz"),
    (([[1]], [1.0]), {"size": (2, 3)}, RuntimeError, "len(size) == sparse_dim + dense_dim"),
    (([[-1]], [1.0]), {}, RuntimeError, "negative index -1"),
    (([[0, 1]], [1.0, 2.0]), {"size": (1,), "check_invariants": True}, RuntimeError, "size is inconsistent"),
    (([[0, 1]], [1, 2]), {"requires_grad": True}, RuntimeError, "floating point"),
    (([[0]], lucid.ones(1, 2)), {"size": (2, 3)}, RuntimeError, "values has incorrect size"),
])
def test_constructor_errors(args, kwargs, exc, msg):
    with pytest.raises(exc, match="^sparse_coo_tensor: .*" + msg.replace("(", r"\(").replace(")", r"\)")
                       .replace("+", r"\+")):
        lucid.sparse_coo_tensor(*args, **kwargs)


def test_coalesce_sums_duplicates_and_sorts():
    s = lucid.sparse_coo_tensor(IDX, VAL, (3, 3))
    with pytest.raises(RuntimeError, match="^indices: Cannot get indices on an uncoalesced tensor"):
        s.indices()
    with pytest.raises(RuntimeError, match="^values: Cannot get values on an uncoalesced tensor"):
        s.values()
    c = s.coalesce()
    assert c.is_coalesced() and c.coalesce() is c
    np.testing.assert_array_equal(c.indices().numpy(), [[0, 1, 2], [0, 2, 1]])
    np.testing.assert_array_equal(c.values().numpy(), [4.0, 8.0, -1.0])
    np.testing.assert_array_equal(c.to_dense().numpy(), s.to_dense().numpy())
    assert lucid.sparse_coo_tensor([[1, 0]], [1.0, 1.0], is_coalesced=True).is_coalesced()  # trusted


def test_coalesce_hybrid_and_3d():
    rng = np.random.default_rng(1)
    idx = rng.integers(0, 2, size=(3, 7))
    val = rng.normal(size=(7, 2))
    s = lucid.sparse_coo_tensor(idx, lucid.tensor(val), (2, 2, 2, 2))
    c = s.coalesce()
    lin = np.ravel_multi_index(tuple(idx), (2, 2, 2))
    assert c._nnz() == len(np.unique(lin))
    np.testing.assert_allclose(c.to_dense().numpy(), dense_ref(idx, val, (2, 2, 2, 2)))
    got = np.ravel_multi_index(tuple(c.indices().numpy()), (2, 2, 2))
    assert (np.diff(got) > 0).all()


def test_to_sparse_round_trip():
    x = np.array([[0.0, 2.0, 0.0], [3.0, 0.0, np.nan]])
    s = lucid.tensor(x).to_sparse()
    assert s.is_coalesced() and s._nnz() == 3
    np.testing.assert_array_equal(s.indices().numpy(), [[0, 1, 1], [1, 0, 2]])
    np.testing.assert_array_equal(s.to_dense().numpy(), x)
    s1 = lucid.tensor(x).to_sparse(1)
    assert s1.sparse_dim() == 1 and s1.dense_dim() == 1 and s1._nnz() == 2
    np.testing.assert_array_equal(s1.to_dense().numpy(), x)
    assert lucid.tensor(x).to_sparse_coo()._nnz() == 3
    assert s.to_sparse() is s and s.to_sparse_coo() is s
    with pytest.raises(RuntimeError, match="^to_sparse: sparse_dim argument must be in"):
        lucid.tensor(x).to_sparse(3)
    with pytest.raises(RuntimeError, match="^to_sparse: conversion from Sparse to Sparse"):
        s.to_sparse(1)
    scalar = lucid.tensor(3.0).to_sparse()
    assert tuple(scalar.shape) == () and scalar._nnz() == 1 and scalar.to_dense().item() == 3.0
    assert lucid.tensor(0.0).to_sparse()._nnz() == 0


def test_sparse_mask():
    m = lucid.tensor([[0.0, 1.0], [1.0, 0.0]]).to_sparse()
    out = lucid.tensor([[5.0, 6.0], [7.0, 8.0]]).sparse_mask(m)
    assert out.is_sparse
    np.testing.assert_array_equal(out.to_dense().numpy(), [[0.0, 6.0], [7.0, 0.0]])
    with pytest.raises(TypeError, match="^sparse_mask: expected a sparse tensor"):
        lucid.ones(2).sparse_mask(lucid.ones(2))


def test_to_dense_gradient_is_sparse_on_the_pattern():
    s = lucid.sparse_coo_tensor(IDX, lucid.tensor(VAL, dtype=lucid.float64), (3, 3), requires_grad=True)
    assert s.requires_grad and s.is_leaf and s.grad is None
    w = np.arange(9.0).reshape(3, 3)
    (s.to_dense() * lucid.tensor(w)).sum().backward()
    g = s.grad
    assert g.is_sparse and g.is_coalesced() and s.grad is g
    # PyTorch's gradient of an uncoalesced leaf: the dense gradient on the coalesced pattern
    np.testing.assert_array_equal(g.indices().numpy(), [[0, 1, 2], [0, 2, 1]])
    np.testing.assert_array_equal(g.values().numpy(), [w[0, 0], w[1, 2], w[2, 1]])
    s.grad = None
    assert s.grad is None


def test_requires_grad_never_flips_the_callers_tensor():
    v = lucid.tensor([1.0, 2.0])
    s = lucid.sparse_coo_tensor([[0, 1]], v).requires_grad_()
    assert s.requires_grad and not v.requires_grad
    t = lucid.sparse_coo_tensor([[0, 1]], v, requires_grad=True)
    assert t.requires_grad and t.is_leaf and not v.requires_grad
    w = lucid.tensor([1.0, 2.0], requires_grad=True)
    from_leaf = lucid.sparse_coo_tensor([[0, 1]], w)
    assert from_leaf.requires_grad and not from_leaf.is_leaf and w.is_leaf
    u = lucid.sparse_coo_tensor([[0, 1]], w * 2)
    assert u.requires_grad and not u.is_leaf and u.grad_fn is not None
    lucid.sparse.sum(u).backward()
    np.testing.assert_array_equal(w.grad.numpy(), [2.0, 2.0])
    with pytest.raises(RuntimeError, match="floating point"):
        lucid.sparse_coo_tensor([[0]], [1]).requires_grad_()


def test_values_is_a_view_with_a_gradient_path():
    s = lucid.tensor([[0.0, 2.0], [3.0, 0.0]]).to_sparse().requires_grad_()
    v = s.values()
    assert v.grad_fn is not None and not v.is_leaf
    (v * lucid.tensor([1.0, 10.0])).sum().backward()
    np.testing.assert_array_equal(s.grad.values().numpy(), [1.0, 10.0])


def test_gradcheck_through_values():
    idx = lucid.tensor(IDX)

    def f(v):
        return lucid.sparse_coo_tensor(idx, v, (3, 3)).coalesce().to_dense() ** 2

    v = lucid.tensor(np.random.default_rng(0).normal(size=4), dtype=lucid.float64, requires_grad=True)
    assert gradcheck(f, (v,))
    assert gradgradcheck(f, (v,))

    def g(x):
        return x.to_sparse().values() * 3.0

    # (no zeros: a finite-difference step must not change the pattern)
    x = lucid.tensor([[0.5, 1.5], [-2.0, 1.0]], dtype=lucid.float64, requires_grad=True)
    assert gradcheck(g, (x,))


def test_detach_clone_to_transpose():
    s = lucid.sparse_coo_tensor(IDX, lucid.tensor(VAL, dtype=lucid.float64), (3, 4), requires_grad=True)
    d = s.detach()
    assert not d.requires_grad and d.is_sparse
    c = s.clone()
    assert c.requires_grad and not c.is_leaf
    np.testing.assert_array_equal(c.to_dense().numpy(), s.to_dense().detach().numpy())
    f = s.to(lucid.float32)
    assert f.dtype == lucid.float32 and f.is_sparse and s.double().dtype == lucid.float64
    t = s.t()
    assert tuple(t.shape) == (4, 3) and not t.is_coalesced()
    np.testing.assert_array_equal(t.to_dense().detach().numpy(), s.to_dense().detach().numpy().T)
    h = lucid.sparse_coo_tensor([[0, 1]], lucid.ones(2, 3, 4))
    ht = h.transpose(1, 2)
    assert tuple(ht.shape) == (2, 4, 3)
    np.testing.assert_array_equal(ht.to_dense().numpy(), h.to_dense().numpy().transpose(0, 2, 1))
    with pytest.raises(RuntimeError, match="^transpose: transposing a sparse dimension with a dense"):
        h.transpose(0, 1)


def test_pickle_and_deepcopy():
    s = lucid.sparse_coo_tensor(IDX, VAL, (3, 3))
    for t in (pickle.loads(pickle.dumps(s)), copy.deepcopy(s)):
        assert t.is_sparse and not t.is_coalesced()
        np.testing.assert_array_equal(t.to_dense().numpy(), s.to_dense().numpy())


def test_repr_like_pytorch():
    s = lucid.sparse_coo_tensor([[1, 0, 1], [2, 0, 2]], [3.0, 4.0, 5.0], device="cpu")
    assert repr(s) == ("tensor(indices=tensor([[1, 0, 1],\n"
                       "                       [2, 0, 2]]),\n"
                       "       values=tensor([3., 4., 5.]),\n"
                       "       size=(2, 3), nnz=3, layout=lucid.sparse_coo)")
    r = lucid.sparse_coo_tensor([[1, 0, 1], [2, 0, 2]], [3.0, 4.0, 5.0], dtype=lucid.float64,
                                device="cpu", requires_grad=True)
    assert repr(r).endswith("size=(2, 3), nnz=3, dtype=lucid.float64, layout=lucid.sparse_coo,\n"
                            "       requires_grad=True)")
    e = lucid.sparse_coo_tensor(lucid.zeros(2, 0, dtype=lucid.int64), lucid.zeros(0), device="cpu")
    assert repr(e).startswith("tensor(indices=tensor([], size=(2, 0)),\n       values=tensor([], size=(0,)),")


@pytest.mark.parametrize("call, name", [
    (lambda s: lucid.exp(s), "exp"),
    (lambda s: s.exp(), "exp"),
    (lambda s: s.cumsum(0), "cumsum"),
    (lambda s: lucid.softmax(s, 0), "softmax"),
    (lambda s: s.reshape(6), "reshape"),
    (lambda s: s[0], "getitem"),
])
def test_dense_only_ops_name_themselves(call, name):
    s = lucid.sparse_coo_tensor([[0, 1], [1, 2]], [1.0, 2.0], (2, 3))
    with pytest.raises(NotImplementedError, match=f"^{name}: sparse tensors are not supported here; "
                                                  r"call \.to_dense\(\) first"):
        call(s)


def test_conversions_to_host_refuse():
    s = lucid.sparse_coo_tensor([[0, 1]], [1.0, 2.0])
    with pytest.raises(TypeError, match="^numpy: can't convert a sparse tensor"):
        s.numpy()
    with pytest.raises(TypeError, match="^numpy: can't convert a sparse tensor"):
        np.asarray(s)
    with pytest.raises(RuntimeError, match="^item: "):
        s.item()
    with pytest.raises(RuntimeError, match="^backward: element 0 of tensors does not require grad"):
        s.backward()  # a sparse output is differentiable: NOTE [Sparse outputs]


def test_save_refuses_clearly(tmp_path):
    s = lucid.sparse_coo_tensor([[0, 1]], [1.0, 2.0])
    with pytest.raises(NotImplementedError, match=r"sparse tensors are not supported here; call \.to_dense"):
        lucid.save({"adj": s}, str(tmp_path / "s.lucid"))
