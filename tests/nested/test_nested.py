"""Jagged nested tensors (lucid.nested): values against per-component dense references,
gradients by gradcheck through the components, padding, attention and errors."""
import numpy as np
import pytest

import lucid
import lucid.nested as N
import lucid.nn.functional as F
from lucid.autograd import gradcheck

rng = np.random.default_rng(0)
LENS = (2, 4, 1)


def _comps(lens=LENS, rest=(3,), grad=False):
    return [lucid.tensor(rng.normal(size=(n,) + rest), dtype=lucid.float64, requires_grad=grad) for n in lens]


def _np(t):
    return t.detach().numpy()


def _check_each(nt, refs, tol=1e-12):
    parts = nt.unbind()
    assert len(parts) == len(refs)
    for p, r in zip(parts, refs):
        assert tuple(p.shape) == tuple(r.shape)
        np.testing.assert_allclose(_np(p), _np(r), rtol=tol, atol=tol)


def test_structure_and_metadata():
    comps = _comps()
    nt = N.nested_tensor(comps, layout=lucid.jagged)
    assert nt.is_nested and nt.layout is lucid.jagged and isinstance(nt, lucid.Tensor)
    assert nt.dim() == 3 and nt.ndim == 3 and len(nt) == 3 and nt.dtype == lucid.float64
    assert nt.size(0) == 3 and nt.size(2) == 3 and nt.size(-1) == 3
    j = nt.size(1)
    assert isinstance(j, N.NestedInt) and nt.shape[1] is j and j == j and j != 4
    assert tuple(nt.values().shape) == (7, 3) and nt.offsets().tolist() == [0, 2, 6, 7]
    assert nt.lengths() is None and nt.numel() == 21 and nt.is_contiguous()
    _check_each(nt, comps)
    with pytest.raises(TypeError):
        int(j)
    # copies: changing the source does not change the nested tensor
    comps[0].data[0, 0] = 100.0
    assert float(nt.values()[0, 0]) != 100.0


def test_ragged_symbol_follows_the_offsets():
    nt = N.nested_tensor(_comps(), layout=lucid.jagged)
    other = N.nested_tensor(_comps(), layout=lucid.jagged)
    assert nt.relu().shape[1] is nt.shape[1]
    assert other.shape[1] is not nt.shape[1]
    shared = N.nested_tensor_from_jagged(other.values() * 2, nt.offsets())
    assert shared.shape[1] is nt.shape[1]
    _check_each(nt + shared, [a + 2 * b for a, b in zip(nt.unbind(), other.unbind())])
    with pytest.raises(RuntimeError, match="^add: cannot call binary pointwise"):
        nt + other


def test_components_of_other_ranks_and_ragged_dims():
    one_d = N.nested_tensor([[1.0, 2.0], [3.0]], layout=lucid.jagged)
    assert one_d.dim() == 2 and one_d.unbind()[1].tolist() == [3.0]
    four_d = N.nested_tensor([lucid.ones(2, 3, 5), lucid.ones(4, 3, 5)], layout=lucid.jagged)
    assert (four_d.size(0), four_d.size(2), four_d.size(3)) == (2, 3, 5)
    inner = N.nested_tensor([lucid.ones(2, 3), lucid.ones(2, 4)], layout=lucid.jagged)
    assert inner._ragged_idx == 2 and inner.size(1) == 2 and isinstance(inner.size(2), N.NestedInt)
    assert [tuple(t.shape) for t in inner.unbind()] == [(2, 3), (2, 4)]


@pytest.mark.parametrize("op", [lucid.relu, lucid.exp, lucid.tanh, lucid.sigmoid, lucid.neg, lucid.abs,
                                F.gelu, F.silu, lambda t: -t, lambda t: t.square(), lambda t: t.clamp(-0.5, 0.5)])
def test_unary_matches_each_component(op):
    comps = _comps()
    nt = N.nested_tensor(comps, layout=lucid.jagged)
    out = op(nt)
    assert isinstance(out, N.NestedTensor) and out.shape[1] is nt.shape[1]
    _check_each(out, [op(c) for c in comps])


def test_binary_with_nested_scalars_and_dense():
    comps = _comps()
    nt = N.nested_tensor(comps, layout=lucid.jagged)
    w = lucid.tensor(rng.normal(size=3), dtype=lucid.float64)
    per_seq = lucid.tensor(rng.normal(size=(3, 1, 3)), dtype=lucid.float64)
    per_seq_scalar = lucid.tensor(rng.normal(size=(3, 1, 1)), dtype=lucid.float64)
    _check_each(nt * nt.exp(), [c * c.exp() for c in comps])
    _check_each(2 - nt, [2 - c for c in comps])
    _check_each(nt / 4.0, [c / 4.0 for c in comps])
    _check_each(nt * w, [c * w for c in comps])
    _check_each(lucid.maximum(nt, lucid.zeros(1, 3, dtype=lucid.float64)), [lucid.maximum(c, lucid.zeros(3, dtype=lucid.float64)) for c in comps])
    _check_each(nt + per_seq, [c + per_seq[i] for i, c in enumerate(comps)])
    _check_each(per_seq_scalar * nt, [per_seq_scalar[i] * c for i, c in enumerate(comps)])
    _check_each(lucid.where(nt > 0, nt, 0.0), [lucid.where(c > 0, c, 0.0) for c in comps])
    for bad in (lucid.ones(4, 3), lucid.ones(2, 1, 3), lucid.ones(1, 3, 1, 3)):
        with pytest.raises(RuntimeError, match="cannot call binary pointwise"):
            nt + bad


def test_inplace_ops_change_the_values():
    comps = _comps()
    nt = N.nested_tensor(comps, layout=lucid.jagged)
    vals = nt.values()
    out = nt.mul_(2.0)
    assert out is nt and nt.values() is vals
    _check_each(nt, [2 * c for c in comps])
    nt += 1.0
    _check_each(nt, [2 * c + 1 for c in comps])
    assert F.relu(nt, inplace=True) is nt
    _check_each(nt, [(2 * c + 1).relu() for c in comps])


def test_pickle_round_trip():
    import pickle

    nt = N.nested_tensor_from_jagged(lucid.arange(6.0).reshape(3, 2), lucid.tensor([0, 1, 3]), jagged_dim=1)
    back = pickle.loads(pickle.dumps(nt.transpose(1, 2)))
    assert back._ragged_idx == 2 and back.offsets().tolist() == [0, 1, 3]
    _check_each(back, [t.transpose(0, 1) for t in nt.unbind()])


def test_linear_layer_norm_matmul_dropout_softmax():
    lucid.manual_seed(0)
    comps = _comps(rest=(4,))
    nt = N.nested_tensor(comps, layout=lucid.jagged)
    lin = lucid.nn.Linear(4, 5).double()
    ln = lucid.nn.LayerNorm(4).double()
    _check_each(lin(nt), [lin(c) for c in comps])
    _check_each(ln(nt), [ln(c) for c in comps])
    m = lucid.tensor(rng.normal(size=(4, 2)), dtype=lucid.float64)
    _check_each(nt @ m, [c @ m for c in comps])
    _check_each(lucid.matmul(nt, m), [c @ m for c in comps])
    _check_each(nt.softmax(-1), [c.softmax(-1) for c in comps])
    _check_each(F.dropout(nt, 0.5, training=False), comps)
    dropped = F.dropout(nt, 0.5)
    for d, c in zip(dropped.unbind(), comps):  # each element is 0 or doubled
        dn, cn = _np(d), _np(c)
        assert np.all(np.isclose(dn, 0) | np.isclose(dn, 2 * cn))


def test_reductions():
    comps = _comps()
    nt = N.nested_tensor(comps, layout=lucid.jagged)
    _check_each(nt.sum(-1), [c.sum(-1) for c in comps])
    _check_each(nt.mean(-1, keepdim=True), [c.mean(-1, keepdim=True) for c in comps])
    np.testing.assert_allclose(_np(nt.sum(1)), np.stack([_np(c.sum(0)) for c in comps]), rtol=1e-12)
    np.testing.assert_allclose(_np(nt.mean(1)), np.stack([_np(c.mean(0)) for c in comps]), rtol=1e-12)
    assert tuple(nt.sum(1, keepdim=True).shape) == (3, 1, 3)
    np.testing.assert_allclose(_np(nt.sum()), sum(_np(c).sum() for c in comps), rtol=1e-12)
    np.testing.assert_allclose(_np(nt.sum((0, 1))), sum(_np(c).sum(0) for c in comps), rtol=1e-12)
    with pytest.raises(RuntimeError, match="^sum: reducing along the batch dimension but not the ragged"):
        nt.sum(0)
    with pytest.raises(RuntimeError, match="^sum: reducing along a ragged and non-batch"):
        nt.sum((1, 2))


def test_shape_ops():
    comps = _comps(rest=(6,))
    nt = N.nested_tensor(comps, layout=lucid.jagged)
    j = nt.size(1)
    heads = nt.view(3, -1, 2, 3)
    assert heads.size(1) is j and heads.size(3) == 3
    _check_each(heads, [c.view(-1, 2, 3) for c in comps])
    _check_each(nt.view(3, j, 2, 3), [c.view(-1, 2, 3) for c in comps])
    _check_each(nt.reshape(-1, j, 3, 2), [c.reshape(-1, 3, 2) for c in comps])
    _check_each(nt.unflatten(-1, (2, 3)), [c.unflatten(-1, (2, 3)) for c in comps])
    _check_each(heads.flatten(-2), comps)
    t = heads.transpose(1, 2)
    assert t._ragged_idx == 2 and t.size(2) is j and t.size(1) == 2 and not t.is_contiguous()
    _check_each(t, [c.view(-1, 2, 3).transpose(0, 1) for c in comps])
    _check_each(t.transpose(1, 2).reshape(3, -1, 6), comps)
    _check_each(nt.unsqueeze(-1), [c.unsqueeze(-1) for c in comps])
    _check_each(nt.unsqueeze(-1).squeeze(-1), comps)
    parts = nt.chunk(3, -1)
    assert len(parts) == 3
    for k, p in enumerate(parts):
        _check_each(p, [c[:, 2 * k:2 * k + 2] for c in comps])
    a, b = nt.split([2, 4], -1)
    _check_each(b, [c[:, 2:] for c in comps])
    _check_each(lucid.cat([a, b], -1), comps)
    with pytest.raises(ValueError, match="batch dimension"):
        nt.transpose(0, 1)
    with pytest.raises(RuntimeError, match="^view: for a nested tensor only the dims after the ragged"):
        nt.view(3, 7, 6)
    with pytest.raises(RuntimeError, match="^chunk: not supported for NestedTensor on ragged dim"):
        nt.chunk(2, 1)


def test_chunk_and_split_along_the_batch():
    comps = _comps((2, 4, 1))
    nt = N.nested_tensor(comps, layout=lucid.jagged)
    first, second = nt.chunk(2, 0)
    _check_each(first, comps[:2])
    _check_each(second, comps[2:])
    assert first.offsets().tolist() == [0, 2, 6] and second.offsets().tolist() == [0, 1]
    assert first.shape[1] is not nt.shape[1]
    _check_each(nt.split([1, 2], 0)[1], comps[1:])
    x = lucid.arange(24.0).reshape(3, 4, 2)
    nar = N.narrow(x, 1, lucid.tensor([0, 1, 2]), lucid.tensor([2, 3, 1]), layout=lucid.jagged)
    a, b = nar.split(2, 0)
    _check_each(a, [x[0, 0:2], x[1, 1:4]])
    _check_each(b, [x[2, 2:3]])
    with pytest.raises(RuntimeError, match="sum exactly"):
        nt.split([1, 1], 0)


def test_indexing_and_iteration():
    comps = _comps()
    nt = N.nested_tensor(comps, layout=lucid.jagged)
    np.testing.assert_array_equal(_np(nt[1]), _np(comps[1]))
    np.testing.assert_array_equal(_np(nt[-1]), _np(comps[-1]))
    np.testing.assert_array_equal(_np(nt[1, 2]), _np(comps[1][2]))
    assert [tuple(t.shape) for t in nt] == [(2, 3), (4, 3), (1, 3)]
    with pytest.raises(IndexError):
        nt[3]


def test_to_padded_tensor():
    comps = _comps()
    nt = N.nested_tensor(comps, layout=lucid.jagged)
    ref = np.full((3, 4, 3), -1.0)
    for i, c in enumerate(comps):
        ref[i, :c.shape[0]] = _np(c)
    np.testing.assert_array_equal(_np(nt.to_padded_tensor(-1.0)), ref)
    np.testing.assert_array_equal(_np(N.to_padded_tensor(nt, -1.0)), ref)
    big = nt.to_padded_tensor(0.0, output_size=(3, 6, 5))
    assert tuple(big.shape) == (3, 6, 5)
    np.testing.assert_array_equal(_np(big)[:, :4, :3], np.where(ref == -1.0, 0.0, ref))
    assert np.all(_np(big)[:, 4:] == 0) and np.all(_np(big)[:, :, 3:] == 0)
    small = nt.to_padded_tensor(0.0, output_size=(3, 2, 3))
    np.testing.assert_array_equal(_np(small), np.where(ref == -1.0, 0.0, ref)[:, :2])
    t = nt.transpose(1, 2).to_padded_tensor(-1.0)
    np.testing.assert_array_equal(_np(t), ref.transpose(0, 2, 1))


def test_from_jagged_narrow_masked_select_as_nested():
    v = lucid.arange(12.0).reshape(6, 2)
    nt = N.nested_tensor_from_jagged(v, lucid.tensor([0, 2, 6]))
    _check_each(nt, [v[:2], v[2:]])
    from_lengths = N.nested_tensor_from_jagged(v, lengths=lucid.tensor([1, 5]))
    assert from_lengths.offsets().tolist() == [0, 1, 6] and from_lengths.lengths() is None
    holes = N.nested_tensor_from_jagged(v, lucid.tensor([0, 2, 4]), lengths=lucid.tensor([1, 2]))
    _check_each(holes, [v[:1], v[2:4]])
    assert not holes.is_contiguous() and holes.lengths().tolist() == [1, 2]
    np.testing.assert_array_equal(_np(holes.to_padded_tensor(0.0)), [[[0, 1], [0, 0]], [[4, 5], [6, 7]]])
    np.testing.assert_array_equal(_np(holes.sum(1)), [[0, 1], [10, 12]])
    np.testing.assert_array_equal(_np(holes.sum()), 23.0)
    inner = N.nested_tensor_from_jagged(v, lucid.tensor([0, 1, 2]), jagged_dim=2)
    assert inner._ragged_idx == 2 and tuple(inner.unbind()[1].shape) == (6, 1)
    x = lucid.arange(24.0).reshape(3, 4, 2)
    nar = N.narrow(x, 1, lucid.tensor([0, 1, 2]), lucid.tensor([2, 3, 1]), layout=lucid.jagged)
    _check_each(nar, [x[0, 0:2], x[1, 1:4], x[2, 2:3]])
    assert nar.offsets().tolist() == [0, 5, 10, 11] and nar.lengths().tolist() == [2, 3, 1]
    _check_each(N.narrow(x, 1, 1, 2, layout=lucid.jagged), [x[i, 1:3] for i in range(3)])
    _check_each(nar.exp(), [x[0, 0:2].exp(), x[1, 1:4].exp(), x[2, 2:3].exp()])
    m = lucid.tensor([[True, False, True], [False, False, True]])
    ms = N.masked_select(lucid.arange(6.0).reshape(2, 3), m)
    _check_each(ms, [lucid.tensor([0.0, 2.0]), lucid.tensor([5.0])])
    dense = lucid.arange(12.0).reshape(2, 3, 2)
    asn = N.as_nested_tensor(dense, layout=lucid.jagged)
    _check_each(asn, [dense[0], dense[1]])
    with pytest.raises(RuntimeError, match="At least one of offsets or lengths"):
        N.nested_tensor_from_jagged(v)
    with pytest.raises(ValueError, match="jagged_dim >=1"):
        N.nested_tensor_from_jagged(v, lucid.tensor([0, 6]), jagged_dim=0)
    with pytest.raises(RuntimeError, match="^narrow: jagged layout only supports dim=1"):
        N.narrow(x, 0, 1, 2, layout=lucid.jagged)


def test_constructor_errors():
    with pytest.raises(RuntimeError, match="^nested_tensor: Cannot construct a nested tensor from an empty"):
        N.nested_tensor([], layout=lucid.jagged)
    with pytest.raises(RuntimeError, match="same dim"):
        N.nested_tensor([lucid.ones(2, 3), lucid.ones(2, 3, 1)], layout=lucid.jagged)
    with pytest.raises(RuntimeError, match="same dtype"):
        N.nested_tensor([lucid.ones(2, 3), lucid.ones(3, 3, dtype=lucid.float64)], layout=lucid.jagged)
    with pytest.raises(RuntimeError, match="zero-dim"):
        N.nested_tensor([lucid.tensor(1.0), lucid.tensor(2.0)], layout=lucid.jagged)
    with pytest.raises(RuntimeError, match="one ragged dimension"):
        N.nested_tensor([lucid.ones(2, 3), lucid.ones(3, 4)], layout=lucid.jagged)
    strided = N.nested_tensor([lucid.ones(2, 3)], layout=lucid.strided)  # built since session 15 (was refused)
    assert strided.layout is lucid.strided and strided.is_nested
    with pytest.raises(RuntimeError, match="unsupported for nested tensors: lucid.sparse_coo"):
        N.nested_tensor([lucid.ones(2, 3)], layout=lucid.sparse_coo)


def test_unsupported_ops_name_themselves():
    nt = N.nested_tensor(_comps(), layout=lucid.jagged)
    with pytest.raises(NotImplementedError, match="^cumsum: not implemented for NestedTensor"):
        nt.cumsum(2)
    with pytest.raises(NotImplementedError, match="^cumsum: not implemented for NestedTensor"):
        lucid.cumsum(nt, 2)
    with pytest.raises(NotImplementedError, match="^conv1d: not implemented for NestedTensor"):
        F.conv1d(nt, lucid.ones(1, 3, 1, dtype=lucid.float64))
    with pytest.raises(RuntimeError, match="^tolist"):
        nt.tolist()
    with pytest.raises(RuntimeError, match="^numpy"):
        nt.numpy()


def test_repr():
    nt = N.nested_tensor([lucid.ones(2, 3), lucid.ones(4, 3)], layout=lucid.jagged)
    j = nt.size(1)
    assert repr(nt) == f"NestedTensor(size=(2, {j}, 3), offsets={nt.offsets()!r}, contiguous=True)"
    assert repr(nt.offsets()).startswith("tensor([0, 2, 6]")
    leaf = N.nested_tensor([lucid.ones(2, 3)], layout=lucid.jagged, requires_grad=True)
    assert "requires_grad=True" in repr(leaf)
    assert repr(leaf * 2).startswith("NestedTensor(size=(1, ") and "grad_fn=<MulBackward0>" in repr(leaf * 2)
    assert repr(nt.transpose(1, 2)).endswith("contiguous=False)")


# ------------------------------------------------------------------ autograd

def test_leaf_gradient_is_nested():
    comps = _comps()
    nt = N.nested_tensor(comps, layout=lucid.jagged, requires_grad=True)
    assert nt.is_leaf and nt.requires_grad and not comps[0].requires_grad
    (nt * nt).sum().backward()
    g = nt.grad
    assert isinstance(g, N.NestedTensor) and g.shape[1] is nt.shape[1]
    _check_each(g, [2 * c for c in comps])
    nt.grad = None
    assert nt.grad is None


def test_as_nested_tensor_keeps_the_graph_to_the_components():
    comps = _comps(grad=True)
    nt = N.as_nested_tensor(comps, layout=lucid.jagged)
    assert not nt.is_leaf
    (nt.exp() * 3).to_padded_tensor(0.0).sum().backward()
    for c in comps:
        np.testing.assert_allclose(_np(c.grad), 3 * np.exp(_np(c)), rtol=1e-12)


def _through(fn, lens=(2, 3), rest=(4,)):
    """gradcheck of ``fn`` applied to the nested tensor of the components, padded back."""
    comps = _comps(lens, rest, grad=True)

    def f(*cs):
        out = fn(N.as_nested_tensor(list(cs), layout=lucid.jagged))
        return out.to_padded_tensor(0.0) if isinstance(out, N.NestedTensor) else out
    assert gradcheck(f, tuple(comps))


def test_gradcheck_pointwise_and_reductions():
    w = lucid.tensor(rng.normal(size=(2, 1, 4)), dtype=lucid.float64)
    _through(lambda nt: (nt.tanh() * nt + w).sigmoid())
    _through(lambda nt: nt.sum(-1) * nt.mean(1).sum())
    _through(lambda nt: nt.sum(1) + nt.mean(1))
    _through(lambda nt: F.gelu(nt).softmax(-1))


def test_gradcheck_linear_layer_norm_and_shapes():
    lin = lucid.nn.Linear(4, 4).double()
    _through(lambda nt: F.layer_norm(lin(nt), (4,)))
    _through(lambda nt: nt.view(2, -1, 2, 2).transpose(1, 2).exp().transpose(1, 2).flatten(-2))
    _through(lambda nt: nt.chunk(2, -1)[1] * nt.split(2, -1)[0])


def test_gradcheck_attention():
    def f(nt):
        q = nt.view(2, -1, 2, 2).transpose(1, 2)
        return F.scaled_dot_product_attention(q, q * 0.5, q.exp()).transpose(1, 2).flatten(-2)
    _through(f)


def _per_sequence_attention(qs, ks, vs, causal=False):
    return [F.scaled_dot_product_attention(q.transpose(0, 1), k.transpose(0, 1), v.transpose(0, 1),
                                           is_causal=causal).transpose(0, 1) for q, k, v in zip(qs, ks, vs)]


@pytest.mark.parametrize("causal", [False, True])
def test_attention_equals_each_sequence_alone(causal):
    qs, ks, vs = _comps((2, 5, 3), (2, 4)), _comps((4, 1, 3), (2, 4)), _comps((4, 1, 3), (2, 3))
    q = N.nested_tensor(qs, layout=lucid.jagged).transpose(1, 2)
    k = N.nested_tensor(ks, layout=lucid.jagged)
    v = N.nested_tensor_from_jagged(N.nested_tensor(vs, layout=lucid.jagged).values(), k.offsets()).transpose(1, 2)
    out = F.scaled_dot_product_attention(q, k.transpose(1, 2), v, is_causal=causal)
    assert out.shape[2] is q.shape[2] and out.size(3) == 3
    _check_each(out.transpose(1, 2), _per_sequence_attention(qs, ks, vs, causal))
    with pytest.raises(NotImplementedError, match="attn_mask"):
        F.scaled_dot_product_attention(q, k.transpose(1, 2), v, attn_mask=lucid.ones(1, dtype=lucid.bool))
    with pytest.raises(RuntimeError, match="ragged dim at 2"):
        F.scaled_dot_product_attention(k, k, k)


# ------------------------------------------------------------------ a transformer block

class Block(lucid.nn.Module):
    """The PyTorch nested-tensor tutorial's encoder block: fused qkv projection, SDPA, MLP."""

    def __init__(self, e, h):
        super().__init__()
        self.h = h
        self.qkv = lucid.nn.Linear(e, 3 * e)
        self.out = lucid.nn.Linear(e, e)
        self.ln1, self.ln2 = lucid.nn.LayerNorm(e), lucid.nn.LayerNorm(e)
        self.ff1, self.ff2 = lucid.nn.Linear(e, 2 * e), lucid.nn.Linear(2 * e, e)

    def forward(self, x):
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        q, k, v = (t.unflatten(-1, (self.h, -1)).transpose(1, 2) for t in (q, k, v))
        a = F.scaled_dot_product_attention(q, k, v).transpose(1, 2).flatten(-2)
        x = self.ln1(x + self.out(a))
        return self.ln2(x + self.ff2(F.dropout(F.relu(self.ff1(x)), 0.1, self.training)))


def test_encoder_block_matches_each_sequence():
    lucid.manual_seed(0)
    block = Block(8, 2).double().eval()
    comps = _comps((3, 6, 1, 4), (8,))
    out = block(N.nested_tensor(comps, layout=lucid.jagged))
    assert isinstance(out, N.NestedTensor) and out.size(2) == 8
    _check_each(out, [block(c.unsqueeze(0)).squeeze(0) for c in comps], tol=1e-10)
    # parameter gradients of a loss over the batch: the sum of the per-sequence ones
    out.to_padded_tensor(0.0).pow(2).sum().backward()
    got = {n: _np(p.grad).copy() for n, p in block.named_parameters()}
    block.zero_grad()
    sum(block(c.unsqueeze(0)).pow(2).sum() for c in comps).backward()
    for n, p in block.named_parameters():
        np.testing.assert_allclose(got[n], _np(p.grad), rtol=1e-9, atol=1e-10, err_msg=n)


# ------------------------------------------------------------------ transforms and the protocol

def test_func_grad_through_values():
    offsets = lucid.tensor([0, 2, 5])
    v = lucid.tensor(rng.normal(size=(5, 3)), dtype=lucid.float64)

    def f(vals):
        nt = N.nested_tensor_from_jagged(vals, offsets)
        return (nt.tanh() * nt).sum(1).pow(2).sum()
    g = lucid.func.grad(f)(v)
    vals = v.detach().requires_grad_()
    f(vals).backward()
    np.testing.assert_allclose(_np(g), _np(vals.grad), rtol=1e-12)
    _, tangent = lucid.func.jvp(f, (v,), (lucid.ones_like(v),))
    np.testing.assert_allclose(float(tangent), float((vals.grad * 1).sum()), rtol=1e-10)


def test_nested_tensors_work_after_the_protocol_was_switched_off():
    from lucid import overrides

    nt = N.nested_tensor(_comps(), layout=lucid.jagged)
    overrides._deactivate()
    again = N.nested_tensor(_comps(), layout=lucid.jagged)  # making one switches it on again
    assert overrides._STATE.active
    _check_each(again.exp(), [c.exp() for c in again.unbind()])
    _check_each(nt.relu(), [c.relu() for c in nt.unbind()])


def test_import_lucid_does_not_import_nested():
    import subprocess
    import sys

    code = "import sys, lucid; assert 'lucid.nested' not in sys.modules; lucid.nested; print(lucid.jagged)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "lucid.jagged"


def test_dense_primitives_outside_the_protocol_fail_naming_the_op():
    from lucid.overrides import DisableTorchFunctionSubclass

    nt = N.nested_tensor(_comps(), layout=lucid.jagged)
    with DisableTorchFunctionSubclass():
        with pytest.raises(NotImplementedError, match="^exp: nested tensors are not supported here"):
            lucid.exp(nt)
        with pytest.raises(NotImplementedError, match="^cumsum: nested tensors are not supported here"):
            nt.cumsum(1)


def test_attention_on_sequences_with_holes():
    x = lucid.tensor(rng.normal(size=(3, 5, 4)), dtype=lucid.float64)
    nt = N.narrow(x, 1, lucid.tensor([0, 1, 2]), lucid.tensor([2, 4, 3]), layout=lucid.jagged)
    q = nt.view(3, -1, 2, 2).transpose(1, 2)
    out = F.scaled_dot_product_attention(q, q, q, is_causal=True).transpose(1, 2)
    refs = []
    for c in nt.unbind():
        h = c.view(-1, 2, 2).transpose(0, 1)
        refs.append(F.scaled_dot_product_attention(h, h, h, is_causal=True).transpose(0, 1))
    _check_each(out, refs)
    np.testing.assert_allclose(_np(nt.mean(1)), np.stack([_np(c.mean(0)) for c in nt.unbind()]), rtol=1e-12)
