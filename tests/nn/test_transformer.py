"""nn.Transformer, TransformerDecoder(Layer): PyTorch's state_dict layout, masks, is_causal,
norm_first, batch_first; gradients by float64 gradcheck; PyTorch parity (values and
gradients) when torch is installed."""
import numpy as np
import pytest

import lucid
import lucid.nn as nn
from lucid.autograd import gradcheck

RNG = np.random.default_rng(21)
E, H, FF = 8, 2, 12


def t64(a, rg=False):
    return lucid.tensor(np.asarray(a, dtype=np.float64), requires_grad=rg)


def npy(t):
    return t.detach().numpy()


def _model(**kw):
    lucid.manual_seed(0)
    m = nn.Transformer(E, H, 1, 2, FF, dropout=0.0, **kw)
    return m.to(lucid.float64) if hasattr(m, "to") else m


def test_generate_square_subsequent_mask():
    m = nn.Transformer.generate_square_subsequent_mask(4)
    want = np.triu(np.full((4, 4), -np.inf), 1)
    want[np.tril_indices(4)] = 0.0
    np.testing.assert_array_equal(npy(m), want)
    assert m.dtype == lucid.float32
    assert nn.Transformer.generate_square_subsequent_mask(2, dtype=lucid.float64).dtype == lucid.float64


def test_state_dict_names():
    m = nn.Transformer(E, H, 2, 1, FF)
    keys = set(m.state_dict())
    for k in ("encoder.layers.1.self_attn.in_proj_weight", "encoder.layers.0.linear2.bias", "encoder.norm.weight",
              "decoder.layers.0.multihead_attn.out_proj.weight", "decoder.layers.0.norm3.bias",
              "decoder.norm.bias"):
        assert k in keys
    assert len(keys) == 2 * 12 + 18 + 4  # 12 tensors per encoder layer, 18 per decoder layer, 2 norms


def _decoder_ref(layer, tgt, mem, tmask):
    """Post-norm decoder layer written out by hand (batch first, no dropout)."""
    def mha(attn, q, k, v, mask):
        return attn(q, k, v, attn_mask=mask, need_weights=False)[0]

    x = layer.norm1(tgt + mha(layer.self_attn, tgt, tgt, tgt, tmask))
    x = layer.norm2(x + mha(layer.multihead_attn, x, mem, mem, None))
    return layer.norm3(x + layer.linear2(lucid.relu(layer.linear1(x))))


def test_decoder_layer_matches_its_definition_and_gradcheck():
    lucid.manual_seed(0)
    layer = nn.TransformerDecoderLayer(E, H, FF, dropout=0.0, batch_first=True).to(lucid.float64)
    tgt, mem = t64(RNG.normal(size=(2, 3, E)), True), t64(RNG.normal(size=(2, 4, E)), True)
    mask = nn.Transformer.generate_square_subsequent_mask(3, dtype=lucid.float64)
    np.testing.assert_allclose(npy(layer(tgt, mem, tgt_mask=mask)), npy(_decoder_ref(layer, tgt, mem, mask)),
                               rtol=1e-12, atol=1e-12)
    assert gradcheck(lambda a, b: layer(a, b, tgt_mask=mask), (tgt, mem))


def test_causal_mask_makes_earlier_outputs_independent_of_later_targets():
    m = _model(batch_first=True)
    m.eval()
    src, tgt = t64(RNG.normal(size=(2, 5, E))), RNG.normal(size=(2, 4, E))
    tgt2 = tgt.copy()
    tgt2[:, 3] += 1.0
    for kw in ({"tgt_mask": nn.Transformer.generate_square_subsequent_mask(4, dtype=lucid.float64)},
               {"tgt_mask": nn.Transformer.generate_square_subsequent_mask(4) != 0},
               {"tgt_mask": nn.Transformer.generate_square_subsequent_mask(4, dtype=lucid.float64),
                "tgt_is_causal": True}):
        a, b = npy(m(src, t64(tgt), **kw)), npy(m(src, t64(tgt2), **kw))
        np.testing.assert_allclose(a[:, :3], b[:, :3], rtol=1e-12, atol=1e-12)
        assert np.abs(a[:, 3] - b[:, 3]).max() > 1e-3


def test_batch_first_and_unbatched_agree():
    m = _model(batch_first=True)
    src, tgt = RNG.normal(size=(2, 5, E)), RNG.normal(size=(2, 4, E))
    out = npy(m(t64(src), t64(tgt)))
    m.batch_first = False
    for enc in m.encoder.layers:
        enc.self_attn.batch_first = False
    for dec in m.decoder.layers:
        dec.self_attn.batch_first = dec.multihead_attn.batch_first = False
    seq_first = npy(m(t64(src.transpose(1, 0, 2)), t64(tgt.transpose(1, 0, 2))))
    np.testing.assert_allclose(seq_first.transpose(1, 0, 2), out, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(npy(m(t64(src[1]), t64(tgt[1]))), out[1], rtol=1e-12, atol=1e-12)


def test_key_padding_masks_ignore_padded_positions():
    m = _model(batch_first=True)
    src, tgt = RNG.normal(size=(1, 5, E)), RNG.normal(size=(1, 3, E))
    pad = lucid.tensor([[False, False, False, True, True]])
    a = npy(m(t64(src), t64(tgt), src_key_padding_mask=pad, memory_key_padding_mask=pad))
    src2 = src.copy()
    src2[:, 3:] = 100.0
    b = npy(m(t64(src2), t64(tgt), src_key_padding_mask=pad, memory_key_padding_mask=pad))
    np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12)


def test_bad_shapes_raise():
    m = nn.Transformer(E, H, 1, 1, FF, batch_first=True)
    with pytest.raises(RuntimeError, match="batch number"):
        m(lucid.zeros(2, 5, E), lucid.zeros(3, 4, E))
    with pytest.raises(RuntimeError, match="d_model"):
        m(lucid.zeros(2, 5, E + 1), lucid.zeros(2, 4, E + 1))


@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("batch_first", [False, True])
@pytest.mark.usefixtures("cpu_default_device")  # compared with PyTorch CPU tensors
def test_torch_parity(norm_first, batch_first):
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    tm = torch.nn.Transformer(E, H, 2, 2, FF, dropout=0.0, batch_first=batch_first, norm_first=norm_first,
                              activation="gelu").double()
    lm = nn.Transformer(E, H, 2, 2, FF, dropout=0.0, batch_first=batch_first, norm_first=norm_first,
                        activation="gelu")
    assert sorted(tm.state_dict()) == sorted(lm.state_dict())
    lm.load_state_dict({k: v.numpy() for k, v in tm.state_dict().items()}, assign=True)
    S, T, N = 5, 4, 2
    shape = (lambda L: (N, L, E)) if batch_first else (lambda L: (L, N, E))
    src, tgt = RNG.normal(size=shape(S)), RNG.normal(size=shape(T))
    pad = np.zeros((N, S), bool)
    pad[1, 3:] = True
    tmask = np.triu(np.full((T, T), -np.inf), 1)
    ls, lt = t64(src, True), t64(tgt, True)
    ts, tt = torch.tensor(src, requires_grad=True), torch.tensor(tgt, requires_grad=True)
    lo = lm(ls, lt, tgt_mask=t64(tmask), src_key_padding_mask=lucid.tensor(pad),
            memory_key_padding_mask=lucid.tensor(pad))
    to = tm(ts, tt, tgt_mask=torch.tensor(tmask), src_key_padding_mask=torch.tensor(pad),
            memory_key_padding_mask=torch.tensor(pad))
    np.testing.assert_allclose(npy(lo), to.detach().numpy(), rtol=1e-9, atol=1e-10)
    g = RNG.normal(size=tuple(to.shape))
    lo.backward(t64(g))
    to.backward(torch.tensor(g))
    np.testing.assert_allclose(npy(ls.grad), ts.grad.numpy(), rtol=1e-8, atol=1e-10)
    np.testing.assert_allclose(npy(lt.grad), tt.grad.numpy(), rtol=1e-8, atol=1e-10)
    lp = dict(lm.named_parameters())
    for k, p in tm.named_parameters():
        np.testing.assert_allclose(npy(lp[k].grad), p.grad.numpy(), rtol=1e-8, atol=1e-10, err_msg=k)
