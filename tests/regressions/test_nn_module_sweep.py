"""Regressions found by a differential sweep of ``lucid.nn`` modules against PyTorch 2.13.

Each test asserts the right numbers (or exception type) without PyTorch: closed forms, NumPy,
float64 finite differences. The optional comparisons at the end skip cleanly without torch.
"""
import math

import numpy as np
import pytest

import lucid
import lucid.nn as nn
import lucid.nn.functional as F

RNG = np.random.default_rng(0)

# Value checks (index ranges, offsets) run on the CPU only: a device would read back every call
# (README "Differences from PyTorch"); the --lucid-device=strict passes make the stand-in the default.
cpu_only = pytest.mark.skipif(lucid.get_default_device().type != "cpu", reason="value checks are CPU-only")


def t64(a, requires_grad=False):
    return lucid.tensor(np.asarray(a, dtype=np.float64), requires_grad=requires_grad)


def npy(t):
    return np.asarray(t.detach().numpy())


# ----------------------------------------------------------------------------- pooling


def test_lp_pool_infinite_norm_is_the_window_max_of_abs():
    x = np.array([[[-3.0, 1.0, 0.5, -0.25, 2.0, -4.0]]])
    out = nn.LPPool1d(float("inf"), 2)(t64(x))
    np.testing.assert_allclose(npy(out), [[[3.0, 0.5, 4.0]]])
    x2 = RNG.normal(size=(1, 2, 4, 4))
    ref = np.abs(x2).reshape(1, 2, 2, 2, 2, 2).max(axis=(3, 5))
    np.testing.assert_allclose(npy(F.lp_pool2d(t64(x2), float("inf"), 2)), ref)
    # -inf: the smallest |x| of each window
    np.testing.assert_allclose(npy(F.lp_pool1d(t64(x), -float("inf"), 2)), [[[1.0, 0.25, 2.0]]])


def test_avg_pool_divisor_override_zero_raises():
    with pytest.raises(RuntimeError, match="divisor_override"):
        F.avg_pool2d(lucid.ones(1, 1, 4, 4), 2, divisor_override=0)
    # a real override still divides by it
    np.testing.assert_allclose(npy(F.avg_pool2d(lucid.ones(1, 1, 4, 4), 2, divisor_override=3)), np.full((1, 1, 2, 2), 4 / 3),
                               rtol=1e-6)


@pytest.mark.parametrize("kw", [dict(kernel_size=0), dict(kernel_size=2, stride=0), dict(kernel_size=2, dilation=0)])
def test_pool_geometry_must_be_positive(kw):
    x = lucid.ones(1, 1, 4, 4)
    with pytest.raises(RuntimeError, match="max_pool2d"):
        F.max_pool2d(x, **kw)
    if "dilation" not in kw:  # avg_pool2d takes no dilation
        with pytest.raises(RuntimeError, match="avg_pool2d"):
            F.avg_pool2d(x, **kw)


def test_adaptive_pools_to_an_empty_size():
    x = t64(RNG.normal(size=(1, 3, 4, 4)), requires_grad=True)
    out = F.adaptive_avg_pool2d(x, (0, 2))
    assert out.shape == (1, 3, 0, 2)
    v, i = F.adaptive_max_pool2d(x, (0, 2), return_indices=True)
    assert v.shape == i.shape == (1, 3, 0, 2) and i.dtype == lucid.int64
    (out.sum() + v.sum()).backward()
    np.testing.assert_array_equal(npy(x.grad), np.zeros((1, 3, 4, 4)))
    with pytest.raises(RuntimeError, match="greater than or equal to 0"):
        F.adaptive_avg_pool2d(x, (-1, 2))


def test_max_unpool_checks_output_size():
    v, i = F.max_pool1d(t64([[[1.0, 3.0, 2.0, 0.0]]]), 2, return_indices=True)
    # default size 4; PyTorch allows sizes strictly within one stride of it
    assert F.max_unpool1d(v, i, 2, output_size=[5]).shape == (1, 1, 5)
    assert F.max_unpool1d(v, i, 2, output_size=[1, 1, 5]).shape == (1, 1, 5)
    with pytest.raises(ValueError, match="invalid output_size"):
        F.max_unpool1d(v, i, 2, output_size=[6])
    with pytest.raises(ValueError, match="invalid output_size"):
        nn.MaxUnpool1d(2)(v, i, output_size=[2])
    with pytest.raises(ValueError, match="output_size should be a sequence"):
        F.max_unpool1d(v, i, 2, output_size=[1, 5])


def test_fractional_max_pool_samples_are_a_buffer():
    s = lucid.tensor([[[0.25, 0.75]]])
    m = nn.FractionalMaxPool2d(2, output_size=2, _random_samples=s)
    assert list(m.state_dict()) == ["_random_samples"] and m._random_samples is s
    x = t64(np.arange(36.0).reshape(1, 1, 6, 6))
    m = m.to(lucid.float64)
    out = npy(m(x))
    np.testing.assert_array_equal(out, npy(F.fractional_max_pool2d(x, 2, output_size=2, _random_samples=s)))
    assert list(nn.FractionalMaxPool2d(2, output_size=2).state_dict()) == []


# ----------------------------------------------------------------------------- normalization


def test_instance_norm_refuses_one_spatial_element_when_training():
    with pytest.raises(ValueError, match="more than 1 spatial element"):
        nn.InstanceNorm1d(3)(lucid.ones(2, 3, 1))
    with pytest.raises(ValueError, match="more than 1 spatial element"):
        F.instance_norm(lucid.ones(2, 3))
    # eval with running statistics uses them, so one element is fine there
    m = nn.InstanceNorm1d(3, track_running_stats=True).eval()
    np.testing.assert_allclose(npy(m(lucid.full((2, 3, 1), 2.0))), np.full((2, 3, 1), 2 / math.sqrt(1 + 1e-5)),
                               rtol=1e-6)


def test_instance_norm_checks_its_input():
    with pytest.raises(ValueError, match="expected 2D or 3D input"):
        nn.InstanceNorm1d(3)(lucid.ones(2, 3, 4, 5))
    with pytest.raises(ValueError, match="num_features"):
        nn.InstanceNorm1d(3, affine=True)(lucid.ones(2, 4, 5))
    # without affine parameters any channel count normalises (PyTorch only warns)
    assert nn.InstanceNorm1d(3)(t64(RNG.normal(size=(2, 4, 5)))).shape == (2, 4, 5)


def test_batch_norm_channel_mismatch():
    with pytest.raises(RuntimeError, match="expected 3 channels"):
        nn.BatchNorm2d(3)(lucid.ones(2, 4, 2, 2))
    # nothing of size C to check against: PyTorch normalises each channel
    x = RNG.normal(size=(3, 4))
    out = nn.BatchNorm1d(3, affine=False, track_running_stats=False)(t64(x))
    np.testing.assert_allclose(npy(out), (x - x.mean(0)) / np.sqrt(x.var(0) + 1e-5), rtol=1e-6)


def test_lazy_norms_default_to_affine_and_tracking():
    for make, shape in ((nn.LazyInstanceNorm1d, (2, 3, 4)), (nn.LazyInstanceNorm2d, (2, 3, 2, 2)),
                        (nn.LazyBatchNorm1d, (4, 3))):
        m = make()
        m(lucid.ones(*shape))
        assert m.affine and m.track_running_stats
        assert sorted(m.state_dict()) == ["bias", "num_batches_tracked", "running_mean", "running_var", "weight"]


# ----------------------------------------------------------------------------- recurrent cells


@pytest.mark.parametrize("cell", [nn.RNNCell, nn.GRUCell, nn.LSTMCell])
def test_rnn_cells_check_shapes(cell):
    m = cell(4, 3)
    pair = (lambda h: (h, h)) if cell is nn.LSTMCell else (lambda h: h)
    with pytest.raises(RuntimeError, match="batch size"):
        m(lucid.ones(2, 4), pair(lucid.ones(3)))  # used to broadcast the one state over the batch
    with pytest.raises(RuntimeError, match="batch size"):
        m(lucid.ones(2, 4), pair(lucid.ones(3, 3)))
    with pytest.raises(RuntimeError, match="hidden_size"):
        m(lucid.ones(2, 4), pair(lucid.ones(2, 2)))
    with pytest.raises(ValueError, match="1D or 2D"):
        m(lucid.ones(2, 5, 4))
    out = m(lucid.ones(4), pair(lucid.zeros(3)))
    assert (out[0] if cell is nn.LSTMCell else out).shape == (3,)


def test_rnn_cell_unknown_nonlinearity_raises():
    m = nn.RNNCell(2, 2, nonlinearity="foo")
    with pytest.raises(RuntimeError, match="Unknown nonlinearity"):
        m(lucid.ones(1, 2))


# ----------------------------------------------------------------------------- attention


def _np_mha(q, k, v, w_in, b_in, w_out, b_out, h, bias_k=None, bias_v=None, zero_attn=False, kpm=None):
    """Sequence-first multi-head attention in NumPy (PyTorch's definition)."""
    L, N, E = q.shape
    hd = E // h
    wq, wk, wv = np.split(w_in, 3)
    bq, bk, bv = np.split(b_in, 3)
    Q, K, V = q @ wq.T + bq, k @ wk.T + bk, v @ wv.T + bv
    if bias_k is not None:
        K = np.concatenate([K, np.broadcast_to(bias_k, (1, N, E))])
        V = np.concatenate([V, np.broadcast_to(bias_v, (1, N, E))])
    heads = lambda t: t.reshape(t.shape[0], N, h, hd).transpose(1, 2, 0, 3)  # noqa: E731
    Q, K, V = heads(Q), heads(K), heads(V)
    if zero_attn:
        K = np.concatenate([K, np.zeros((N, h, 1, hd))], 2)
        V = np.concatenate([V, np.zeros((N, h, 1, hd))], 2)
    s = Q @ K.transpose(0, 1, 3, 2) / math.sqrt(hd)
    if kpm is not None:
        pad = np.zeros((N, s.shape[-1] - kpm.shape[1]), bool)
        s = np.where(np.concatenate([kpm, pad], 1)[:, None, None, :], -np.inf, s)
    w = np.exp(s - s.max(-1, keepdims=True))
    w = w / w.sum(-1, keepdims=True)
    out = (w @ V).transpose(2, 0, 1, 3).reshape(L, N, E) @ w_out.T + b_out
    return out, w.mean(1)


@pytest.mark.parametrize("bias_kv,zero_attn", [(True, False), (False, True), (True, True)])
def test_mha_bias_kv_and_zero_attn(bias_kv, zero_attn):
    lucid.manual_seed(0)
    m = nn.MultiheadAttention(4, 2, add_bias_kv=bias_kv, add_zero_attn=zero_attn).to(lucid.float64)
    if bias_kv:
        assert m.bias_k.shape == m.bias_v.shape == (1, 1, 4)
        assert {"bias_k", "bias_v"} <= set(m.state_dict())
    with lucid.no_grad():
        m.in_proj_bias.copy_(t64(RNG.normal(size=12)))
    q, k = RNG.normal(size=(3, 2, 4)), RNG.normal(size=(5, 2, 4))
    kpm = np.zeros((2, 5), bool)
    kpm[0, 1] = True
    out, w = m(t64(q), t64(k), t64(k), key_padding_mask=lucid.tensor(kpm))
    p = {n: npy(t) for n, t in m.state_dict().items()}
    ref, ref_w = _np_mha(q, k, k, p["in_proj_weight"], p["in_proj_bias"], p["out_proj.weight"], p["out_proj.bias"], 2,
                         p.get("bias_k"), p.get("bias_v"), zero_attn, kpm)
    np.testing.assert_allclose(npy(out), ref, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(npy(w), ref_w, rtol=1e-10, atol=1e-12)
    assert w.shape == (2, 3, 5 + bias_kv + zero_attn)
    out2, none = m(t64(q), t64(k), t64(k), key_padding_mask=lucid.tensor(kpm), need_weights=False)
    assert none is None
    np.testing.assert_allclose(npy(out2), ref, rtol=1e-10, atol=1e-12)


def test_mha_without_weights_gives_zero_for_fully_masked_queries():
    """PyTorch's need_weights=False path is SDPA's safe softmax: a query that may attend to
    nothing gives out_proj's bias, not NaN (need_weights=True keeps the NaN)."""
    m = nn.MultiheadAttention(4, 1).to(lucid.float64)
    with lucid.no_grad():
        m.out_proj.bias.copy_(t64([1.0, 2.0, 3.0, 4.0]))
    x = t64(RNG.normal(size=(2, 1, 4)), requires_grad=True)
    kpm = lucid.tensor([[True, True]])
    out, _ = m(x, x, x, key_padding_mask=kpm, need_weights=False)
    np.testing.assert_array_equal(npy(out), np.broadcast_to([1.0, 2.0, 3.0, 4.0], (2, 1, 4)))
    out.sum().backward()
    np.testing.assert_array_equal(npy(x.grad), np.zeros((2, 1, 4)))
    assert np.isnan(npy(m(x, x, x, key_padding_mask=kpm)[0])).all()


def test_encoder_layer_with_padding_and_causal_mask_has_no_nan():
    # query 0 of the second sequence sees only key 0 (causal), which is padded
    layer = nn.TransformerEncoderLayer(4, 2, 8, dropout=0.0).to(lucid.float64)
    x = t64(RNG.normal(size=(3, 2, 4)))
    mask = nn.Transformer.generate_square_subsequent_mask(3, dtype=lucid.float64)
    kpm = lucid.tensor([[False, False, False], [True, False, False]])
    out = npy(layer(x, src_mask=mask, src_key_padding_mask=kpm, is_causal=True))
    assert np.isfinite(out).all()


def test_functional_mha_takes_pytorchs_signature():
    q, k = RNG.normal(size=(3, 2, 4)), RNG.normal(size=(5, 2, 4))
    w_in, b_in, w_out, b_out = (RNG.normal(size=s) for s in ((12, 4), (12,), (4, 4), (4,)))
    bk, bv = RNG.normal(size=(1, 1, 4)), RNG.normal(size=(1, 1, 4))
    out, w = F.multi_head_attention_forward(t64(q), t64(k), t64(k), 4, 2, t64(w_in), t64(b_in), t64(bk), t64(bv), True,
                                            0.0, t64(w_out), t64(b_out))
    ref, ref_w = _np_mha(q, k, k, w_in, b_in, w_out, b_out, 2, bk, bv, True)
    np.testing.assert_allclose(npy(out), ref, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(npy(w), ref_w, rtol=1e-10, atol=1e-12)
    # Lucid's shorter form and unbatched inputs
    out1, _ = F.multi_head_attention_forward(t64(q[:, 0]), t64(k[:, 0]), t64(k[:, 0]), 2, t64(w_in), t64(b_in),
                                             t64(w_out), t64(b_out))
    np.testing.assert_allclose(npy(out1), _np_mha(q[:, :1], k[:, :1], k[:, :1], w_in, b_in, w_out, b_out, 2)[0][:, 0],
                               rtol=1e-10, atol=1e-12)
    with pytest.raises(RuntimeError, match="embedding dimension of 6"):
        F.multi_head_attention_forward(t64(q), t64(k), t64(k), 6, 2, t64(w_in), t64(b_in), None, None, False, 0.0,
                                       t64(w_out), t64(b_out))


# ----------------------------------------------------------------------------- embeddings


@cpu_only
def test_embedding_index_out_of_range():
    e = nn.Embedding(10, 3)
    for bad in ([10], [-1], [-11]):
        with pytest.raises(IndexError, match="index out of range"):
            e(lucid.tensor(bad))  # -1 used to wrap to the last row
    assert e(lucid.tensor([9, 0])).shape == (2, 3)


@cpu_only
def test_embedding_bag_offsets_errors_are_runtime_errors():
    w = lucid.ones(10, 3)
    for off in ([1, 3], [0, 3, 9], [0, 3, 2]):
        with pytest.raises(RuntimeError, match="offsets"):
            F.embedding_bag(lucid.tensor([1, 2, 4, 5, 4, 3, 2, 9]), w, lucid.tensor(off))


# ----------------------------------------------------------------------------- losses


@cpu_only
def test_class_target_out_of_range_is_an_index_error():
    x = lucid.zeros(4, 5)
    for fn in (F.cross_entropy, F.nll_loss, lambda a, t: F.cross_entropy(a, t, label_smoothing=0.1)):
        with pytest.raises(IndexError):
            fn(x, lucid.tensor([0, 1, 5, 2]))
    with pytest.raises(ValueError):  # still a ValueError, as before
        F.cross_entropy(x, lucid.tensor([0, 1, -3, 2]))


def test_gaussian_nll_loss_with_a_number_as_variance():
    x, y = t64([1.0, 2.0]), t64([0.0, 0.0])
    out = F.gaussian_nll_loss(x, y, 0.5)
    assert out.dtype == lucid.float64
    np.testing.assert_allclose(out.item(), np.mean(0.5 * (np.log(0.5) + np.array([1.0, 4.0]) / 0.5)), rtol=1e-12)
    with pytest.raises(ValueError, match="negative"):
        F.gaussian_nll_loss(x, y, -1.0)


def test_ctc_loss_checks_target_lengths():
    lp = lucid.randn(12, 3, 5).log_softmax(-1)
    il = lucid.tensor([12, 12, 12])
    with pytest.raises(RuntimeError, match="at least 5"):
        F.ctc_loss(lp, lucid.randint(1, 5, (3, 4)), il, lucid.tensor([4, 2, 5]))
    with pytest.raises(RuntimeError, match="at least 0"):
        F.ctc_loss(lp, lucid.randint(1, 5, (3, 4)), il, lucid.tensor([4, -1, 2]))
    with pytest.raises(RuntimeError, match="sum of target_lengths"):
        F.ctc_loss(lp, lucid.randint(1, 5, (9,)), il, lucid.tensor([4, 2, 2]))


# ----------------------------------------------------------------------------- activations and small layers


def test_prelu_and_rrelu_gradient_at_zero_is_the_slope():
    x = t64([-1.0, 0.0, 1.0], requires_grad=True)
    m = nn.PReLU(init=0.25).to(lucid.float64)
    m(x).sum().backward()
    np.testing.assert_array_equal(npy(x.grad), [0.25, 0.25, 1.0])
    x.grad = None
    F.rrelu(x, 0.1, 0.3, training=False).sum().backward()
    np.testing.assert_allclose(npy(x.grad), [0.2, 0.2, 1.0])


def test_prelu_one_dim_input_has_one_channel():
    with pytest.raises(RuntimeError, match="mismatch of parameter numbers"):
        nn.PReLU(4)(lucid.ones(4))
    np.testing.assert_array_equal(npy(nn.PReLU(init=0.5)(t64([-2.0, 2.0]))), [-1.0, 2.0])


def test_flatten_start_after_end_raises():
    with pytest.raises(RuntimeError, match="start_dim cannot come after end_dim"):
        nn.Flatten(2, 1)(lucid.ones(2, 3, 4))
    assert nn.Flatten(-2, -1)(lucid.ones(2, 3, 4)).shape == (2, 12)
    assert nn.Flatten(0, 0)(lucid.ones(3)).shape == (3,)


def test_pairwise_distance_p0_stays_differentiable():
    x = t64([[1.0, 0.0, np.inf], [0.0, 0.0, 0.0]], requires_grad=True)
    d = F.pairwise_distance(x, lucid.zeros(2, 3, dtype=lucid.float64), p=0, eps=0.0)
    np.testing.assert_array_equal(npy(d), [2.0, 0.0])
    d.sum().backward()
    np.testing.assert_array_equal(npy(x.grad), np.zeros((2, 3)))


def test_conv_transpose_same_padding_is_a_type_error():
    with pytest.raises(TypeError, match="padding"):
        nn.ConvTranspose2d(2, 3, 3, padding="same")


# ----------------------------------------------------------------------------- optional PyTorch parity


def _copy(tm, lm):
    lm.load_state_dict({k: lucid.tensor(v.detach().numpy().copy()) for k, v in tm.state_dict().items()})


def test_torch_parity_mha_bias_kv_zero_attn_masks():
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    for bias_kv, zero_attn, need in ((True, True, True), (True, False, False), (False, True, False)):
        tm = torch.nn.MultiheadAttention(4, 2, add_bias_kv=bias_kv, add_zero_attn=zero_attn, kdim=3, vdim=5,
                                         batch_first=True).double()
        lm = nn.MultiheadAttention(4, 2, add_bias_kv=bias_kv, add_zero_attn=zero_attn, kdim=3, vdim=5,
                                   batch_first=True).to(lucid.float64)
        _copy(tm, lm)
        q, k, v = RNG.normal(size=(2, 3, 4)), RNG.normal(size=(2, 5, 3)), RNG.normal(size=(2, 5, 5))
        kpm = np.zeros((2, 5), bool)
        kpm[1] = True
        am = np.triu(np.ones((3, 5), bool), 1)
        a, aw = tm(*map(torch.tensor, (q, k, v)), key_padding_mask=torch.tensor(kpm), attn_mask=torch.tensor(am),
                   need_weights=need)
        b, bw = lm(*map(lucid.tensor, (q, k, v)), key_padding_mask=lucid.tensor(kpm), attn_mask=lucid.tensor(am),
                   need_weights=need)
        np.testing.assert_allclose(npy(b), a.detach().numpy(), rtol=1e-9, atol=1e-12, equal_nan=True)
        if need:
            np.testing.assert_allclose(npy(bw), aw.detach().numpy(), rtol=1e-9, atol=1e-12, equal_nan=True)


def test_torch_parity_pools_and_activations():
    torch = pytest.importorskip("torch")
    x = RNG.normal(size=(2, 3, 7, 6))
    for tm, lm in ((torch.nn.LPPool2d(float("inf"), 2, stride=1, ceil_mode=True),
                    nn.LPPool2d(float("inf"), 2, stride=1, ceil_mode=True)),
                   (torch.nn.AdaptiveAvgPool2d((0, 3)), nn.AdaptiveAvgPool2d((0, 3))),
                   (torch.nn.PReLU(), nn.PReLU()), (torch.nn.RReLU().eval(), nn.RReLU().eval())):
        _copy(tm.double(), lm.to(lucid.float64))
        xin = x.copy()
        xin[0, 0, 0, :3] = 0.0
        tx, lx = torch.tensor(xin, requires_grad=True), t64(xin, requires_grad=True)
        a, b = tm(tx), lm(lx)
        np.testing.assert_allclose(npy(b), a.detach().numpy(), rtol=1e-12)
        if a.numel() == 0:  # PyTorch's adaptive pool has no backward for an empty output
            continue
        a.sum().backward()
        b.sum().backward()
        np.testing.assert_allclose(npy(lx.grad), tx.grad.numpy(), rtol=1e-12)
