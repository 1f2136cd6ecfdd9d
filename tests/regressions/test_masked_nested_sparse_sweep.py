"""A differential sweep of PyTorch's masked, nested-jagged and sparse OpInfo databases
(``torch.testing._internal.opinfo.definitions._masked``, ``nested.njt_op_db``, ``sparse``)
against lucid.masked, lucid.nested and lucid.sparse: the mismatches it found, fixed.

Nested: the pointwise functions PyTorch's NJT accepts and Lucid's table lacked (angle, i0,
polygamma, special.*, isclose, real, byte ...), ``select`` (a component along the batch dim),
``bmm``/``matmul`` with a dense batch of matrices (``matmul(nt, other=...)`` raised
IndexError), ``clone(memory_format=contiguous_format)``/``contiguous()`` of a tensor with holes
(compacted, as PyTorch's), ``squeeze`` of a dim that is not 1 (moved the ragged dim), the flat
index of a full ``argmax`` of a transposed tensor, ``split_with_sizes``, ``embedding``,
``embedding_bag`` and ``masked_select`` with nested arguments, the error types of narrow/split
on the ragged dim. Masked: nested inputs raise PyTorch's ValueError and sparse ones a clear
NotImplementedError (a RecursionError before). Sparse: isposinf/isneginf/angle/conj/conj_physical
keep the pattern (conj of complex values), ``csr.sum(dim, keepdim=True)`` stays CSR, and a product of two sparse tensors
with an empty operand stays in the graph.
"""
import numpy as np
import pytest
import scipy.special as sp

import lucid
import lucid.masked
import lucid.nested
import lucid.nn.functional as F

_OFFSETS = [0, 2, 3, 6]


def _np(t):
    return np.asarray(t.detach().cpu().tolist())


def _nt(vals, lengths=None, jagged_dim=1):
    v = lucid.tensor(vals) if not isinstance(vals, lucid.Tensor) else vals
    offs = lucid.tensor(_OFFSETS, dtype=lucid.int64)
    lens = None if lengths is None else lucid.tensor(lengths, dtype=lucid.int64)
    return lucid.nested.nested_tensor_from_jagged(v, offs, lens, jagged_dim=jagged_dim)


def _comps(vals):
    return [vals[a:b] for a, b in zip(_OFFSETS[:-1], _OFFSETS[1:])]


_RNG = np.random.default_rng(0)
_V = _RNG.uniform(0.5, 2.0, size=(6, 3))


# ------------------------------------------------------------------ nested pointwise

@pytest.mark.parametrize("call,ref", [
    (lambda nt: lucid.angle(-nt), lambda x: np.angle(-x)),
    (lambda nt: lucid.i0(nt), sp.i0),
    (lambda nt: lucid.polygamma(1, nt), lambda x: sp.polygamma(1, x)),
    (lambda nt: lucid.special.zeta(nt + 1.0, 2.0), lambda x: sp.zeta(x + 1.0, 2.0)),
    (lambda nt: lucid.special.i1e(nt), sp.i1e),
    (lambda nt: lucid.special.xlog1py(nt, nt), lambda x: sp.xlog1py(x, x)),
    (lambda nt: lucid.logaddexp(nt, nt * 2), lambda x: np.logaddexp(x, 2 * x)),
    (lambda nt: lucid.isclose(nt, nt + 1e-12), lambda x: np.ones_like(x, dtype=bool)),
    (lambda nt: lucid.signbit(-nt), lambda x: np.signbit(-x)),
    (lambda nt: lucid.fill(nt, 4.0), lambda x: np.full_like(x, 4.0)),
    (lambda nt: nt.byte(), lambda x: x.astype(np.uint8)),
    (lambda nt: nt.real, lambda x: x),
], ids=["angle", "i0", "polygamma", "zeta", "i1e", "xlog1py", "logaddexp", "isclose", "signbit", "fill", "byte",
        "real"])
def test_nested_pointwise_functions_of_pytorchs_table(call, ref):
    out = call(_nt(_V))
    assert out.is_nested and out.offsets().tolist() == _OFFSETS
    for got, want in zip(out.unbind(), _comps(_V)):
        np.testing.assert_allclose(_np(got), ref(want), rtol=1e-10, atol=1e-12)


# ------------------------------------------------------------------ select, bmm, matmul

def test_select_along_the_batch_dim_is_a_component():
    nt = _nt(_V)
    np.testing.assert_array_equal(_np(nt.select(0, 2)), _V[3:6])
    np.testing.assert_array_equal(_np(lucid.select(nt, -3, -1)), _V[3:6])
    with pytest.raises(IndexError):
        nt.select(0, 3)
    with pytest.raises(RuntimeError):
        nt.select(1, 0)


def test_select_on_a_normal_dim_keeps_the_ragged_structure_and_gradient():
    v = lucid.tensor(_V, requires_grad=True)
    out = _nt(v).select(2, 1)
    assert out.dim() == 2 and out._ragged_idx == 1
    for got, want in zip(out.unbind(), _comps(_V)):
        np.testing.assert_array_equal(_np(got), want[:, 1])
    g, = lucid.autograd.grad(out.values().sum(), [v])
    np.testing.assert_array_equal(_np(g), np.tile([0.0, 1.0, 0.0], (6, 1)))


@pytest.mark.parametrize("how", ["bmm", "matmul", "matmul_kw"])
def test_nested_times_a_dense_batch_of_matrices(how):
    mats = _RNG.standard_normal((3, 3, 4))
    v = lucid.tensor(_V, requires_grad=True)
    m = lucid.tensor(mats, requires_grad=True)
    nt = _nt(v)
    out = {"bmm": lambda: lucid.bmm(nt, m), "matmul": lambda: lucid.matmul(nt, m),
           "matmul_kw": lambda: lucid.matmul(nt, other=m)}[how]()
    assert out.is_nested and out.offsets().tolist() == _OFFSETS
    for b, (got, want) in enumerate(zip(out.unbind(), _comps(_V))):
        np.testing.assert_allclose(_np(got), want @ mats[b], rtol=1e-12)
    w = _RNG.standard_normal((6, 4))
    gv, gm = lucid.autograd.grad((out.values() * lucid.tensor(w)).sum(), [v, m])
    batch = np.repeat(np.arange(3), np.diff(_OFFSETS))
    np.testing.assert_allclose(_np(gv), np.einsum("ne,nde->nd", w, mats[batch]), rtol=1e-12)
    want_gm = np.stack([_V[batch == b].T @ w[batch == b] for b in range(3)])
    np.testing.assert_allclose(_np(gm), want_gm, rtol=1e-12)


def test_dense_batch_times_a_transposed_nested_tensor():
    mats = _RNG.standard_normal((3, 2, 3))
    nt = _nt(_V).transpose(1, 2)  # made before lucid.matmul is read: see NOTE [Nested tensors]
    out = lucid.matmul(lucid.tensor(mats), nt)  # (B, 2, 3) @ (B, 3, j)
    assert out._ragged_idx == 2
    for b, (got, want) in enumerate(zip(out.unbind(), _comps(_V))):
        np.testing.assert_allclose(_np(got), mats[b] @ want.T, rtol=1e-12)


# ------------------------------------------------------------------ holes, shape ops

@pytest.mark.parametrize("call", [lambda nt: nt.clone(memory_format=lucid.contiguous_format),
                                  lambda nt: nt.contiguous()], ids=["clone", "contiguous"])
def test_compacting_a_tensor_with_holes(call):
    holes = _nt(_V, lengths=[1, 1, 2])
    out = call(holes)
    assert out.offsets().tolist() == [0, 1, 2, 4] and out.lengths() is None and out.is_contiguous()
    for got, want in zip(out.unbind(), holes.unbind()):
        np.testing.assert_array_equal(_np(got), _np(want))
    kept = holes.clone()  # preserve_format keeps the holes, as PyTorch's
    assert kept.lengths() is not None and kept.offsets().tolist() == _OFFSETS


def test_squeeze_of_a_dim_that_is_not_one_keeps_the_ragged_dim():
    nt = _nt(_V).transpose(1, 2)  # (B, 3, j)
    same = nt.squeeze(1)  # size 3 before the ragged dim: nothing to squeeze
    assert same._ragged_idx == 2 and same.dim() == 3
    ones = _nt(_V.reshape(6, 1, 3)).transpose(1, 2)  # (B, 1, j, 3)
    out = ones.squeeze(1)  # size 1: gone, the ragged dim moves to 1
    assert out._ragged_idx == 1 and out.dim() == 3


def test_full_argmax_of_a_transposed_tensor_is_a_flat_index_into_its_values():
    t = _nt(_V).transpose(1, 2)
    vals = _np(t.values())
    assert int(t.argmax()) == int(np.argmax(vals)) and int(t.argmin()) == int(np.argmin(vals))


def test_split_with_sizes_on_a_normal_dim():
    nt = _nt(_V)  # made before lucid.split_with_sizes is read: see NOTE [Nested tensors]
    z, a, b = lucid.split_with_sizes(nt, [0, 1, 2], 2)
    for pz, pa, pb, want in zip(z.unbind(), a.unbind(), b.unbind(), _comps(_V)):
        assert tuple(pz.shape) == (len(want), 0)
        np.testing.assert_array_equal(_np(pa), want[:, :1])
        np.testing.assert_array_equal(_np(pb), want[:, 1:])


@pytest.mark.parametrize("call", [lambda nt: nt.narrow(1, 0, 1), lambda nt: nt.chunk(2, 1),
                                  lambda nt: nt.split(1, 1)], ids=["narrow", "chunk", "split"])
def test_ragged_dim_refusals_are_both_runtime_and_value_errors(call):
    # PyTorch raises RuntimeError, or ValueError when the tensor has holes
    for nt in (_nt(_V), _nt(_V, lengths=[1, 1, 2])):
        for kind in (RuntimeError, ValueError):
            with pytest.raises(kind):
                call(nt)


# ------------------------------------------------------------------ embeddings, masked_select

def test_embedding_and_embedding_bag_of_nested_indices():
    weight = _RNG.standard_normal((5, 4))
    idx = _nt(np.array([1, 4, 0, 2, 2, 3]))
    out = F.embedding(idx, lucid.tensor(weight))
    for got, want in zip(out.unbind(), _comps(np.array([1, 4, 0, 2, 2, 3]))):
        np.testing.assert_array_equal(_np(got), weight[want])
    psw = _nt(_RNG.uniform(size=6))
    bags = F.embedding_bag(idx, lucid.tensor(weight), mode="sum", per_sample_weights=psw)
    want = np.stack([(weight[i] * w[:, None]).sum(0) for i, w in
                     zip(_comps(np.array([1, 4, 0, 2, 2, 3])), _comps(_np(psw.values())))])
    np.testing.assert_allclose(_np(bags), want, rtol=1e-12)
    means = F.embedding_bag(idx, lucid.tensor(weight), mode="mean")
    np.testing.assert_allclose(_np(means), [weight[i].mean(0) for i in _comps(np.array([1, 4, 0, 2, 2, 3]))])


def test_masked_select_by_a_nested_mask():
    v = _RNG.standard_normal(6)
    nt = _nt(v)
    out = lucid.masked_select(nt, nt > 0)
    assert out.offsets().tolist() == [0] + np.cumsum([(c > 0).sum() for c in _comps(v)]).tolist()
    for got, want in zip(out.unbind(), _comps(v)):
        np.testing.assert_array_equal(_np(got), want[want > 0])


# ------------------------------------------------------------------ masked, sparse

def test_masked_functions_refuse_nested_and_sparse_inputs_clearly():
    with pytest.raises(ValueError, match="mean"):
        lucid.masked.mean(_nt(_V), 1)
    dense = lucid.tensor([[1.0, 0.0], [0.0, 2.0]])
    for x, mask in ((dense.to_sparse(), None), (dense, lucid.tensor([[True, False], [False, True]]).to_sparse()), (dense.to_sparse_csr(), None)):
        with pytest.raises(NotImplementedError, match="sparse"):
            lucid.masked.amax(x, 0, mask=mask)


@pytest.mark.parametrize("name,ref,x", [
    ("isposinf", np.isposinf, [[np.inf, 0.0, -2.0], [0.0, -np.inf, 3.0]]),
    ("isneginf", np.isneginf, [[np.inf, 0.0, -2.0], [0.0, -np.inf, 3.0]]),
    ("angle", np.angle, [[1.0, 0.0, -2.0], [0.0, -1.0, 3.0]]),
    ("conj", np.conj, [[1 + 2j, 0, -2j], [0, 3 - 1j, 1]]),
    ("conj_physical", np.conj, [[1 + 2j, 0, -2j], [0, 3 - 1j, 1]]),
], ids=["isposinf", "isneginf", "angle", "conj", "conj_physical"])
@pytest.mark.parametrize("layout", ["coo", "csr"])
def test_sparse_zero_preserving_methods(name, ref, x, layout):
    x = np.array(x)
    dense = lucid.tensor(x)
    s = dense.to_sparse() if layout == "coo" else dense.to_sparse_csr()
    out = getattr(s, name)()
    assert out.layout is s.layout and out._nnz() == s._nnz()
    np.testing.assert_array_equal(_np(out.to_dense()), ref(x))


def test_csr_sum_with_keepdim_stays_csr():
    x = np.array([[1.0, 0.0, 2.0], [0.0, 3.0, 0.0]])
    csr = lucid.tensor(x).to_sparse_csr()
    for dim in (0, 1, (0, 1)):
        out = csr.sum(dim, keepdim=True)
        assert out.layout is lucid.sparse_csr
        np.testing.assert_array_equal(_np(out.to_dense()), x.sum(axis=dim, keepdims=True))
    assert csr.to_sparse().sum(0, keepdim=True).layout is lucid.sparse_coo


def test_product_with_an_empty_sparse_tensor_stays_in_the_graph():
    a = lucid.sparse_coo_tensor([[0]], [2.0], (3,))
    b = lucid.sparse_coo_tensor(lucid.zeros((1, 0), dtype=lucid.int64), lucid.zeros(0), (3,))
    a.requires_grad_(True)
    out = a * b
    assert out._nnz() == 0 and out.requires_grad
    g, = lucid.autograd.grad(out.to_dense().sum(), [a])
    np.testing.assert_array_equal(_np(g.to_dense()), [0.0, 0.0, 0.0])


def test_permute_keeping_the_batch_dim_first_and_expand_as():
    x = _RNG.standard_normal((6, 3, 2))
    nt = _nt(x)  # (B, j, 3, 2)
    out = nt.permute(0, 3, 1, 2)  # (B, 2, j, 3)
    assert out._ragged_idx == 2
    for got, want in zip(out.unbind(), _comps(x)):
        np.testing.assert_array_equal(_np(got), want.transpose(2, 0, 1))
    assert lucid.permute(nt, (0, -1, 1, 2))._ragged_idx == 2
    with pytest.raises(ValueError, match="batch"):
        nt.permute(1, 0, 2, 3)
    same = nt.expand_as(nt * 2)
    np.testing.assert_array_equal(_np(same.values()), x)
    with pytest.raises(RuntimeError):
        nt.expand_as(lucid.zeros(3, 4, 3, 2))


@pytest.mark.parametrize("name", ["argmax", "argmin"])
def test_masked_argmax_of_bools_raises_as_pytorchs(name):
    # it returned the indices as bools
    x = lucid.tensor([[True, False], [False, True]])
    with pytest.raises(RuntimeError, match=f"{name}.*bool"):
        getattr(lucid.masked, name)(x, 1, mask=lucid.tensor([[True, True], [True, False]]))
    with pytest.raises(RuntimeError, match="bool"):
        getattr(lucid.masked, name)(x, dtype=lucid.float64)


def test_index_put_with_and_without_the_ragged_dim():
    nt = _nt(_V)
    b, j, k = lucid.tensor([0, 2]), lucid.tensor([1, 2]), lucid.tensor([0, 2])
    out = lucid.index_put(nt, (b, j, k), lucid.tensor(-1.0))  # (sequence, position, column)
    want = [c.copy() for c in _comps(_V)]
    want[0][1, 0] = want[2][2, 2] = -1.0
    for got, w in zip(out.unbind(), want):
        np.testing.assert_array_equal(_np(got), w)
    whole = lucid.index_put(nt, (lucid.tensor([1]),), lucid.tensor(7.0))  # every element of sequence 1
    for i, (got, c) in enumerate(zip(whole.unbind(), _comps(_V))):
        np.testing.assert_array_equal(_np(got), np.full_like(c, 7.0) if i == 1 else c)
    v = lucid.tensor(_V, requires_grad=True)
    g, = lucid.autograd.grad(lucid.index_put(_nt(v), (b, j, k), lucid.tensor(0.0)).values().sum(), [v])
    mask = np.ones_like(_V)
    mask[1, 0] = mask[5, 2] = 0.0
    np.testing.assert_array_equal(_np(g), mask)
