"""Gaps found by a differential sweep of sparse, nested and masked tensors against PyTorch 2.13.

Sparse COO: ``index_select`` and ``narrow_copy`` (sparse and dense dims, repeats, empty index),
``Tensor.sum(dim, keepdim=True)``, ``t()`` of a tensor with a dense dim refused, a transposed
tensor with fewer than two entries still coalesced, duplicate dims in ``sparse.sum`` refused.
CSR: ``csr @ csr`` and ``sparse.mm`` of two CSR matrices stay CSR, ``sparse_mask`` with a CSR
mask is CSR, ``check_invariants`` refuses unsorted or repeated columns within a row.
Nested (jagged): amax/amin/max/min/argmax/argmin/prod/any/all over the ragged dim (and over
batch + ragged together, e.g. ``sum(nt, (0, 1, 2))``), softmax/log_softmax over the ragged
dim, ``narrow`` of a dense dim, and ``transpose`` of the batch dim raising RuntimeError.
Masked: ``lucid.masked.norm`` given a dim where ``ord`` goes raises TypeError, as PyTorch's;
otherwise the masked functions and ``MaskedTensor`` matched PyTorch throughout the sweep.

Each op that became differentiable here is gradchecked (reverse, forward and second order);
these are not op-database entries because sparse coalescing and nested lengths read values,
which the meta-device check (tests/ops/test_opdb_meta.py) cannot run.
"""
import numpy as np
import pytest

import lucid
import lucid.nested

# ------------------------------------------------------------------ helpers

@pytest.fixture(autouse=True)
def _dispatchers_on():
    # As in a program that imported lucid.nested (conftest switches them off after each test):
    # ``lucid.amax(nested, 1)`` reads ``lucid.amax`` before its argument exists.
    from lucid import overrides

    overrides._activate()


_IDX = [[0, 1, 1, 2], [2, 0, 2, 1]]
_VALS = [1.0, 2.0, 3.0, 4.0]
_DENSE = np.array([[0.0, 0.0, 1.0], [2.0, 0.0, 3.0], [0.0, 4.0, 0.0]])


def _coo(vals=None, dtype=lucid.float64):
    v = lucid.tensor(_VALS if vals is None else vals, dtype=dtype) if not isinstance(vals, lucid.Tensor) else vals
    return lucid.sparse_coo_tensor(lucid.tensor(_IDX), v, (3, 3))


def _hybrid():
    # sparse dim 1 (rows 0 and 2), dense dim 1 of size 3
    return lucid.sparse_coo_tensor([[0, 2]], lucid.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]], dtype=lucid.float64),
                                   (3, 3))


def _dense(t):
    return np.asarray((t.to_dense() if getattr(t, "is_sparse", False) or getattr(t, "is_sparse_csr", False)
                       else t).detach().numpy())


_COMPS = [np.array([[1.0, -2.0, 0.5], [3.0, 0.0, -1.0]]),
          np.array([[0.0, 4.0, 2.0], [-3.0, 1.0, 2.0], [0.25, -4.0, 0.0]]),
          np.array([[5.0, -5.0, 1.5]])]
_OFFSETS = [0, 2, 5, 6]


def _nested(values=None):
    v = lucid.tensor(np.concatenate(_COMPS)) if values is None else values
    return lucid.nested.nested_tensor_from_jagged(v, lucid.tensor(_OFFSETS, device=v.device))


# ------------------------------------------------------------------ sparse COO

@pytest.mark.parametrize("dim,index", [(0, [2, 0, 2]), (1, [1, 1, 0]), (0, []), (1, [2])])
def test_coo_index_select_matches_dense(dim, index):
    out = _coo().index_select(dim, lucid.tensor(index, dtype=lucid.int64))
    assert out.is_sparse and tuple(out.shape) == tuple(np.take(_DENSE, index, axis=dim).shape)
    np.testing.assert_array_equal(_dense(out), np.take(_DENSE, index, axis=dim))


def test_coo_index_select_hybrid_dense_dim_and_values_gradient():
    h = _hybrid()
    np.testing.assert_array_equal(_dense(h.index_select(1, lucid.tensor([2, 0]))), _dense(h)[:, [2, 0]])
    v = lucid.tensor(_VALS, dtype=lucid.float64, requires_grad=True)
    _coo(v).index_select(0, lucid.tensor([1, 1, 2])).to_dense().sum().backward()
    # row 1 picked twice (entries 1, 2), row 2 once (entry 3), row 0 never (entry 0)
    np.testing.assert_array_equal(v.grad.numpy(), [0.0, 2.0, 2.0, 1.0])


def test_coo_index_select_errors():
    with pytest.raises(IndexError, match="index_select"):
        _coo().index_select(0, lucid.tensor([3]))
    with pytest.raises(IndexError, match="index_select"):
        _coo().index_select(0, lucid.tensor([[0]]))
    with pytest.raises(IndexError, match="index_select"):
        _coo().index_select(0, lucid.tensor([0.0]))


@pytest.mark.parametrize("dim,start,length", [(0, 1, 2), (1, 0, 1), (-1, 2, 1), (0, 0, 0), (1, -2, 2)])
def test_coo_narrow_copy_matches_dense(dim, start, length):
    out = _coo().narrow_copy(dim, start, length)
    want = np.take(_DENSE, range(start % 3 if start < 0 else start, (start % 3 if start < 0 else start) + length),
                   axis=dim)
    assert out.is_sparse
    np.testing.assert_array_equal(_dense(out), want)


def test_coo_narrow_copy_dense_dim_keeps_coalesced_and_errors():
    h = _hybrid().coalesce()
    out = h.narrow_copy(1, 1, 2)
    assert out.is_coalesced() and out.sparse_dim() == 1
    np.testing.assert_array_equal(_dense(out), _dense(h)[:, 1:3])
    with pytest.raises(RuntimeError, match="narrow_copy"):
        _coo().narrow_copy(0, 2, 2)
    with pytest.raises(RuntimeError, match="narrow_copy"):
        _coo().narrow_copy(2, 0, 1)


@pytest.mark.parametrize("dim", [0, 1, -1, (0, 1)])
def test_coo_sum_keepdim(dim):
    out = _coo().sum(dim, keepdim=True)
    want = _DENSE.sum(axis=dim, keepdims=True)
    assert out.is_sparse == (dim != (0, 1))  # every sparse dim reduced: dense, as PyTorch's
    assert tuple(out.shape) == want.shape
    np.testing.assert_array_equal(_dense(out), want)


def test_coo_sum_keepdim_hybrid_and_duplicate_dims():
    h = _hybrid()
    for dim in (0, 1):
        np.testing.assert_array_equal(_dense(h.sum(dim, keepdim=True)), _dense(h).sum(dim, keepdims=True))
    with pytest.raises(RuntimeError, match="dim 0 appears multiple times"):
        lucid.sparse.sum(_coo(), (0, 0))


def test_coo_t_refuses_dense_dims_and_transpose_keeps_coalesced_when_nnz_below_two():
    with pytest.raises(RuntimeError, match="0 sparse and 1 dense"):
        lucid.sparse_coo_tensor(lucid.zeros((0, 1), dtype=lucid.int64), lucid.ones(1, 2)).t()
    one = lucid.sparse_coo_tensor([[0], [1]], [1.0], (2, 2))
    assert one.t().is_coalesced() and one.transpose(0, 1).is_coalesced()
    assert not _coo().coalesce().t().is_coalesced()


# ------------------------------------------------------------------ CSR

def test_csr_times_csr_is_csr():
    a = lucid.tensor(_DENSE).to_sparse_csr()
    for out in (a @ a, lucid.sparse.mm(a, a), lucid.mm(a, a)):
        assert out.layout is lucid.sparse_csr
        np.testing.assert_allclose(_dense(out), _DENSE @ _DENSE)


def test_sparse_mask_keeps_a_csr_mask_layout():
    x = lucid.tensor(np.arange(9.0).reshape(3, 3))
    out = x.sparse_mask(lucid.tensor(_DENSE).to_sparse_csr())
    assert out.layout is lucid.sparse_csr
    np.testing.assert_array_equal(_dense(out), np.where(_DENSE != 0, np.arange(9.0).reshape(3, 3), 0))


@pytest.mark.parametrize("col", [[2, 0, 1], [0, 0, 1]])
def test_csr_check_invariants_refuses_unsorted_or_repeated_columns(col):
    with pytest.raises(RuntimeError, match="sorted and distinct"):
        lucid.sparse_csr_tensor([0, 2, 3, 3], col, [1.0, 2.0, 3.0], check_invariants=True)


# ------------------------------------------------------------------ nested reductions

_REDUCERS = {"amax": np.max, "amin": np.min, "prod": np.prod}


@pytest.mark.parametrize("name", sorted(_REDUCERS))
@pytest.mark.parametrize("keepdim", [False, True])
def test_nested_reduce_over_ragged_dim(name, keepdim):
    out = getattr(lucid, name)(_nested(), 1, keepdim=keepdim)
    want = np.stack([_REDUCERS[name](c, axis=0, keepdims=keepdim) for c in _COMPS])
    assert not getattr(out, "is_nested", False) and tuple(out.shape) == want.shape
    np.testing.assert_allclose(out.numpy(), want)


@pytest.mark.parametrize("name,np_arg", [("max", np.argmax), ("min", np.argmin)])
def test_nested_max_min_over_ragged_dim_values_and_indices(name, np_arg):
    out = getattr(_nested(), name)(1)
    assert out._fields == ("values", "indices")
    np.testing.assert_array_equal(out.indices.numpy(), np.stack([np_arg(c, 0) for c in _COMPS]))
    np.testing.assert_array_equal(out.values.numpy(), np.stack([getattr(np, name)(c, 0) for c in _COMPS]))
    np.testing.assert_array_equal(getattr(lucid, "arg" + name)(_nested(), 1).numpy(), out.indices.numpy())
    kept = getattr(_nested(), name)(1, keepdim=True)
    assert tuple(kept.values.shape) == (3, 1, 3) and tuple(kept.indices.shape) == (3, 1, 3)


def test_nested_max_over_ragged_dim_picks_the_first_tie_for_its_gradient():
    comps = [np.array([[1.0], [1.0]]), np.array([[2.0]])]
    v = lucid.tensor(np.concatenate(comps), requires_grad=True)
    nt = lucid.nested.nested_tensor_from_jagged(v, lucid.tensor([0, 2, 3]))
    out = nt.max(1)
    out.values.sum().backward()
    np.testing.assert_array_equal(out.indices.numpy(), [[0], [0]])
    np.testing.assert_array_equal(v.grad.numpy(), [[1.0], [0.0], [1.0]])  # not shared, as PyTorch's max


def test_nested_any_all_and_integer_widening():
    nt = _nested()
    np.testing.assert_array_equal(lucid.any(nt > 3, 1).numpy(), np.stack([(c > 3).any(0) for c in _COMPS]))
    np.testing.assert_array_equal(lucid.all(nt > -4, 1).numpy(), np.stack([(c > -4).all(0) for c in _COMPS]))
    ints = _nested(lucid.tensor(np.concatenate(_COMPS) * 2, dtype=lucid.int32))
    for name in ("sum", "prod"):
        out = getattr(lucid, name)(ints, 1)
        assert out.dtype == lucid.int64
        want = np.stack([getattr(np, name)((c * 2).astype(np.int32), 0, dtype=np.int64) for c in _COMPS])
        np.testing.assert_array_equal(out.numpy(), want)


@pytest.mark.parametrize("dims,keepdim", [((0, 1), False), ((0, 1), True), ((0, 1, 2), False), ((0, 1, 2), True)])
def test_nested_reduce_over_batch_and_ragged_dims(dims, keepdim):
    flat = np.concatenate(_COMPS)
    for name in ("sum", "amax"):
        out = getattr(lucid, name)(_nested(), dims, keepdim=keepdim)
        want = getattr(np, name if name == "sum" else "max")(flat[None], axis=dims, keepdims=keepdim)
        assert tuple(out.shape) == want.shape
        np.testing.assert_allclose(out.numpy(), want)


def test_nested_reduce_errors_kept():
    with pytest.raises(RuntimeError, match="batch dimension but not the ragged"):
        lucid.amax(_nested(), 0)
    with pytest.raises(RuntimeError, match="ragged and non-batch"):
        lucid.amax(_nested(), (1, 2))
    with pytest.raises(TypeError, match="max"):
        lucid.max(_nested(), (0, 1))


# ------------------------------------------------------------------ nested softmax, narrow, transpose

@pytest.mark.parametrize("log", [False, True])
def test_nested_softmax_over_ragged_dim(log):
    fn = lucid.log_softmax if log else lucid.softmax
    out = fn(_nested(), 1)
    assert out.is_nested
    for got, c in zip(out.unbind(), _COMPS):
        z = c - c.max(0)
        lse = np.log(np.exp(z).sum(0))
        np.testing.assert_allclose(got.numpy(), z - lse if log else np.exp(z - lse), rtol=1e-6)
    f32 = fn(_nested(), 1, dtype=lucid.float32)
    assert f32.dtype == lucid.float32


def test_nested_softmax_over_ragged_dim_of_a_transposed_tensor_and_holes_refused():
    out = _nested().transpose(1, 2).softmax(2)
    for got, c in zip(out.unbind(), _COMPS):
        np.testing.assert_allclose(got.numpy(), np.exp(c.T) / np.exp(c.T).sum(1, keepdims=True), rtol=1e-6)
    holes = lucid.nested.nested_tensor_from_jagged(lucid.ones(6, 2), lucid.tensor(_OFFSETS),
                                                   lengths=lucid.tensor([1, 2, 1]))
    with pytest.raises(RuntimeError, match="softmax"):
        holes.softmax(1)


def test_nested_narrow_dense_dim():
    out = _nested().narrow(2, 1, 2)
    assert out.is_nested
    for got, c in zip(out.unbind(), _COMPS):
        np.testing.assert_array_equal(got.numpy(), c[:, 1:3])
    for dim in (0, 1):
        with pytest.raises(RuntimeError, match="narrow"):
            _nested().narrow(dim, 0, 1)


def test_nested_transpose_of_batch_dim_is_a_runtime_error():
    with pytest.raises(RuntimeError, match="batch dimension"):
        _nested().transpose(0, 2)


# ------------------------------------------------------------------ masked

def test_masked_norm_refuses_a_dim_given_as_ord():
    with pytest.raises(TypeError, match="norm: argument 'ord'"):
        lucid.masked.norm(lucid.ones(2, 3), (0, 1), mask=lucid.ones(2, 3, dtype=lucid.bool))
    np.testing.assert_allclose(lucid.masked.norm(lucid.tensor([[3.0, 4.0]]), 2, 1).numpy(), [5.0])


# ------------------------------------------------------------------ gradients (rev, fwd, 2nd order)

def _nested_fn(fn):
    return lambda v: fn(_nested(v))


_GRAD_CASES = {
    "nested_amax": _nested_fn(lambda nt: lucid.amax(nt, 1)),
    "nested_max": _nested_fn(lambda nt: nt.max(1).values),
    "nested_prod": _nested_fn(lambda nt: lucid.prod(nt, 1)),
    "nested_softmax": _nested_fn(lambda nt: lucid.softmax(nt, 1).values()),
    "nested_log_softmax": _nested_fn(lambda nt: lucid.log_softmax(nt, 1).values()),
    "nested_amax_batch_ragged": _nested_fn(lambda nt: lucid.amax(nt, (0, 1))),
    "nested_narrow": _nested_fn(lambda nt: nt.narrow(2, 0, 2).values()),
}
_SPARSE_CASES = {
    "coo_index_select": lambda v: _coo(v).index_select(0, lucid.tensor([2, 0, 2])).to_dense(),
    "coo_narrow_copy": lambda v: _coo(v).narrow_copy(1, 1, 2).to_dense(),
    "coo_sum_keepdim": lambda v: _coo(v).sum(1, keepdim=True).to_dense(),
}


@pytest.mark.parametrize("name", sorted(_GRAD_CASES) + sorted(_SPARSE_CASES))
def test_gradients_match_finite_differences(name):
    if name in _GRAD_CASES:
        fn, x = _GRAD_CASES[name], np.concatenate(_COMPS) + 0.1 * np.arange(18).reshape(6, 3)  # no ties
    else:
        fn, x = _SPARSE_CASES[name], np.array(_VALS) * 0.7
    xt = lucid.tensor(x, dtype=lucid.float64, requires_grad=True)
    assert lucid.autograd.gradcheck(fn, (xt,), check_forward_ad=True)
    assert lucid.autograd.gradgradcheck(fn, (xt,))


# ------------------------------------------------------------------ PyTorch parity (optional; the
# nested comparisons were made by the sweep: importing torch's jagged layout takes seconds)

def test_torch_parity_sparse_index_select_narrow_copy_sum_keepdim():
    torch = pytest.importorskip("torch")
    ts = torch.sparse_coo_tensor(torch.tensor(_IDX), torch.tensor(_VALS, dtype=torch.float64), (3, 3))
    np.testing.assert_array_equal(_dense(_coo().index_select(1, lucid.tensor([2, 2, 0]))),
                                  ts.index_select(1, torch.tensor([2, 2, 0])).to_dense().numpy())
    np.testing.assert_array_equal(_dense(_coo().narrow_copy(0, 1, 2)), ts.narrow_copy(0, 1, 2).to_dense().numpy())
    for dim in (0, 1, (0, 1)):
        want = ts.sum(dim, keepdim=True)
        got = _coo().sum(dim, keepdim=True)
        assert got.is_sparse == want.is_sparse
        np.testing.assert_array_equal(_dense(got), want.to_dense().numpy() if want.is_sparse else want.numpy())
