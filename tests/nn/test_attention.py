"""Attention: scaled_dot_product_attention and MultiheadAttention vs NumPy, gradients, masks,
Transformer encoder layers, and PyTorch parity."""
import numpy as np
import pytest

import lucid
import lucid.func as LF
import lucid.nn as nn
import lucid.nn.functional as F


def np_softmax(s):
    e = np.exp(s - s.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def np_sdpa(q, k, v, add=None, scale=None):
    s = q @ np.swapaxes(k, -1, -2) * (scale if scale is not None else 1 / np.sqrt(q.shape[-1]))
    if add is not None:
        s = s + add
    return np_softmax(s) @ v


def test_sdpa_masks_causal_and_scale():
    rng = np.random.default_rng(0)
    q, k, v = rng.standard_normal((2, 3, 4)), rng.standard_normal((2, 5, 4)), rng.standard_normal((2, 5, 2))
    T = lucid.tensor
    np.testing.assert_allclose(F.scaled_dot_product_attention(T(q), T(k), T(v)).numpy(), np_sdpa(q, k, v), rtol=1e-10)
    allowed = rng.random((3, 5)) > 0.3
    allowed[:, 0] = True
    got = F.scaled_dot_product_attention(T(q), T(k), T(v), attn_mask=T(allowed), scale=0.3)
    np.testing.assert_allclose(got.numpy(), np_sdpa(q, k, v, np.where(allowed, 0, -np.inf), 0.3), rtol=1e-10)
    fm = rng.standard_normal((3, 5))
    np.testing.assert_allclose(F.scaled_dot_product_attention(T(q), T(k), T(v), attn_mask=T(fm)).numpy(),
                               np_sdpa(q, k, v, fm), rtol=1e-10)
    causal = np.where(np.tri(3, 5, dtype=bool), 0, -np.inf)
    np.testing.assert_allclose(F.scaled_dot_product_attention(T(q), T(k), T(v), is_causal=True).numpy(),
                               np_sdpa(q, k, v, causal), rtol=1e-10)


def test_sdpa_gradcheck_and_vmap():
    rng = np.random.default_rng(1)
    q, k, v = (lucid.tensor(rng.standard_normal(s), requires_grad=True) for s in ((2, 3), (4, 3), (4, 2)))
    f = lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=False)  # noqa: E731
    assert lucid.autograd.gradcheck(f, [q, k, v])
    assert lucid.autograd.gradgradcheck(f, [q, k, v])
    qs = lucid.tensor(rng.standard_normal((3, 2, 3)))
    got = LF.vmap(lambda q: F.scaled_dot_product_attention(q, k.detach(), v.detach()))(qs)
    for i in range(3):
        np.testing.assert_allclose(got[i].numpy(), F.scaled_dot_product_attention(qs[i], k, v).detach().numpy(),
                                   rtol=1e-12)


def np_mha(m, q, k, v, add=None):
    """Reference multi-head attention on (N, L, E) inputs (batch_first)."""
    p = {n: t.detach().numpy() for n, t in m.named_parameters()}
    E, h = m.embed_dim, m.num_heads
    wq, wk, wv = np.split(p["in_proj_weight"], 3)
    bq, bk, bv = np.split(p["in_proj_bias"], 3)
    split = lambda t: t.reshape(t.shape[0], t.shape[1], h, E // h).transpose(0, 2, 1, 3)  # noqa: E731
    Q, K, V = split(q @ wq.T + bq), split(k @ wk.T + bk), split(v @ wv.T + bv)
    s = Q @ K.transpose(0, 1, 3, 2) / np.sqrt(E // h)
    if add is not None:
        s = s + add
    a = np_softmax(s)
    o = (a @ V).transpose(0, 2, 1, 3).reshape(q.shape[0], q.shape[1], E)
    return o @ p["out_proj.weight"].T + p["out_proj.bias"], a


def test_mha_matches_numpy_with_masks():
    rng = np.random.default_rng(2)
    m = nn.MultiheadAttention(6, 2, batch_first=True).to(lucid.float64)
    for prm in (m.in_proj_bias, m.out_proj.bias):  # non-zero biases exercise every term
        prm.data = lucid.tensor(rng.standard_normal(prm.shape))
    q, k = rng.standard_normal((2, 3, 6)), rng.standard_normal((2, 4, 6))
    kpm = np.array([[False, False, False, True], [False, True, False, False]])
    am = np.triu(np.ones((3, 4), bool), 2)
    out, w = m(lucid.tensor(q), lucid.tensor(k), lucid.tensor(k), key_padding_mask=lucid.tensor(kpm),
               attn_mask=lucid.tensor(am), average_attn_weights=False)
    add = np.where(am, -np.inf, 0)[None, None] + np.where(kpm, -np.inf, 0)[:, None, None, :]
    want, wa = np_mha(m, q, k, k, add)
    np.testing.assert_allclose(out.detach().numpy(), want, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(w.detach().numpy(), wa, rtol=1e-10, atol=1e-12)
    out2, w2 = m(lucid.tensor(q), lucid.tensor(k), lucid.tensor(k))
    np.testing.assert_allclose(w2.detach().numpy(), np_mha(m, q, k, k)[1].mean(1), rtol=1e-10)
    assert m(lucid.tensor(q), lucid.tensor(k), lucid.tensor(k), need_weights=False)[1] is None


def test_mha_gradcheck_and_shapes():
    rng = np.random.default_rng(3)
    m = nn.MultiheadAttention(4, 2).to(lucid.float64)
    x = lucid.tensor(rng.standard_normal((3, 2, 4)), requires_grad=True)
    assert lucid.autograd.gradcheck(lambda x: m(x, x, x)[0], [x])
    assert m(lucid.ones(3, 4).double(), lucid.ones(5, 4).double(), lucid.ones(5, 4).double())[0].shape == (3, 4)
    names = sorted(n for n, _ in m.named_parameters())
    assert names == ["in_proj_bias", "in_proj_weight", "out_proj.bias", "out_proj.weight"]
    with pytest.raises(ValueError, match="divisible"):
        nn.MultiheadAttention(5, 2)


def test_encoder_layer_structure_and_backward():
    layer = nn.TransformerEncoderLayer(8, 2, dim_feedforward=16, dropout=0.0, batch_first=True)
    enc = nn.TransformerEncoder(layer, 2, norm=nn.LayerNorm(8))
    assert len(enc.layers) == 2 and enc.layers[0] is not enc.layers[1]
    x = lucid.tensor(np.random.default_rng(4).standard_normal((2, 3, 8)).astype(np.float32))
    y = enc(x, src_key_padding_mask=lucid.tensor(np.array([[False, False, True]] * 2)))
    assert y.shape == (2, 3, 8) and y.dtype == np.float32
    y.sum().backward()
    assert enc.layers[1].self_attn.in_proj_weight.grad is not None


@pytest.mark.parametrize("norm_first,activation", [(False, "relu"), (True, "gelu")])
def test_torch_parity_transformer_encoder(norm_first, activation):
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    kw = dict(dim_feedforward=12, dropout=0.0, batch_first=True, norm_first=norm_first, activation=activation)
    ref = torch.nn.TransformerEncoder(torch.nn.TransformerEncoderLayer(8, 2, **kw), 2,
                                      norm=torch.nn.LayerNorm(8), enable_nested_tensor=False).double().eval()
    mine = nn.TransformerEncoder(nn.TransformerEncoderLayer(8, 2, **kw), 2, norm=nn.LayerNorm(8)).to(lucid.float64)
    mine.load_state_dict({k: lucid.tensor(v.detach().numpy()) for k, v in ref.state_dict().items()})
    mine.eval()
    x = np.random.default_rng(5).standard_normal((2, 4, 8))
    causal = np.triu(np.ones((4, 4), bool), 1)
    want = ref(torch.tensor(x), mask=torch.tensor(causal)).detach().numpy()
    got = mine(lucid.tensor(x), mask=lucid.tensor(causal)).detach().numpy()
    np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-10)


def test_torch_parity_mha_weights_and_grads():
    torch = pytest.importorskip("torch")
    torch.manual_seed(1)
    ref = torch.nn.MultiheadAttention(6, 3, batch_first=True).double()
    mine = nn.MultiheadAttention(6, 3, batch_first=True).to(lucid.float64)
    mine.load_state_dict({k: lucid.tensor(v.detach().numpy()) for k, v in ref.state_dict().items()})
    q = np.random.default_rng(6).standard_normal((2, 3, 6))
    fm = np.random.default_rng(7).standard_normal((3, 3))
    ql, qt = lucid.tensor(q, requires_grad=True), torch.tensor(q, requires_grad=True)
    ol, wl = mine(ql, ql, ql, attn_mask=lucid.tensor(fm), average_attn_weights=False)
    ot, wt = ref(qt, qt, qt, attn_mask=torch.tensor(fm), average_attn_weights=False)
    np.testing.assert_allclose(ol.detach().numpy(), ot.detach().numpy(), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(wl.detach().numpy(), wt.detach().numpy(), rtol=1e-10, atol=1e-12)
    ol.sum().backward()
    ot.sum().backward()
    np.testing.assert_allclose(ql.grad.numpy(), qt.grad.numpy(), rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(mine.in_proj_weight.grad.numpy(), ref.in_proj_weight.grad.numpy(), rtol=1e-9,
                               atol=1e-12)
