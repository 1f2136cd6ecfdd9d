"""Issue-11 leftovers in lucid.nn: folded 3-D linear, grid_sample 'nearest' grid gradient,
MultiheadAttention's is_causal rule, num_batches_tracked as a 0-d array. Closed forms in
float64, PyTorch parity when installed."""
import numpy as np
import pytest

import lucid
import lucid.nn as nn
import lucid.nn.functional as F

RNG = np.random.default_rng(111)


def t64(a, rg=False):
    return lucid.tensor(np.asarray(a, dtype=np.float64), requires_grad=rg)


def npy(t):
    return t.detach().numpy()


# ----------------------------------------------------------------- linear on 3-D+ inputs
@pytest.mark.parametrize("shape", [(2, 3, 4), (2, 1, 3, 4)])
@pytest.mark.parametrize("bias", [True, False])
def test_linear_nd_value_and_grads_match_closed_form(shape, bias):
    x, w, b = RNG.normal(size=shape), RNG.normal(size=(5, 4)), RNG.normal(size=5)
    g = RNG.normal(size=shape[:-1] + (5,))
    xt, wt, bt = t64(x, True), t64(w, True), t64(b, True)
    out = F.linear(xt, wt, bt if bias else None)
    ref = np.einsum("...i,oi->...o", x, w) + (b if bias else 0.0)
    np.testing.assert_allclose(npy(out), ref, rtol=1e-13, atol=1e-13)
    (out * t64(g)).sum().backward()
    np.testing.assert_allclose(npy(xt.grad), g @ w, rtol=1e-13, atol=1e-13)
    np.testing.assert_allclose(npy(wt.grad), g.reshape(-1, 5).T @ x.reshape(-1, 4), rtol=1e-13, atol=1e-13)
    if bias:
        np.testing.assert_allclose(npy(bt.grad), g.reshape(-1, 5).sum(0), rtol=1e-13, atol=1e-13)


def test_linear_3d_non_contiguous_input_and_float32():
    x = RNG.normal(size=(4, 3, 6)).astype(np.float32)
    w = RNG.normal(size=(2, 6)).astype(np.float32)
    xt = lucid.tensor(x).transpose(0, 1)  # (3, 4, 6), not contiguous
    out = F.linear(xt, lucid.tensor(w))
    ref = np.einsum("bsi,oi->bso", x.transpose(1, 0, 2).astype(np.float64), w.astype(np.float64))
    assert out.dtype == lucid.float32 and out.shape == (3, 4, 2)
    np.testing.assert_allclose(npy(out), ref, rtol=1e-5, atol=1e-5)


# ----------------------------------------------------------------- grid_sample nearest
def test_grid_sample_nearest_grid_grad_is_zeros_and_values_unchanged():
    x = t64(RNG.normal(size=(2, 3, 4, 5)), True)
    grid = t64(RNG.uniform(-1.2, 1.2, size=(2, 3, 2, 2)), True)
    out = F.grid_sample(x, grid, mode="nearest", align_corners=False)
    # the value: PyTorch's nearest rule (round half to even of the unnormalised coordinate)
    g = npy(grid)
    ix = np.rint(((g[..., 0] + 1) * 5 - 1) / 2).astype(int)
    iy = np.rint(((g[..., 1] + 1) * 4 - 1) / 2).astype(int)
    ref = np.zeros((2, 3, 3, 2))
    for n in range(2):
        for i in range(3):
            for j in range(2):
                if 0 <= ix[n, i, j] < 5 and 0 <= iy[n, i, j] < 4:
                    ref[n, :, i, j] = npy(x)[n, :, iy[n, i, j], ix[n, i, j]]
    np.testing.assert_array_equal(npy(out), ref)
    out.sum().backward()
    assert grid.grad is not None and grid.grad.shape == grid.shape
    np.testing.assert_array_equal(npy(grid.grad), np.zeros(grid.shape))
    assert np.abs(npy(x.grad)).sum() > 0
    # a grid that does not require grad takes the old path and gives the same values
    np.testing.assert_array_equal(npy(F.grid_sample(x, t64(g), mode="nearest")), ref)


def test_grid_sample_nearest_grid_grad_matches_torch():
    torch = pytest.importorskip("torch")
    x, g = RNG.normal(size=(1, 2, 3, 4, 5)), RNG.uniform(-1, 1, size=(1, 2, 2, 3, 3))
    gl, gt = t64(g, True), torch.tensor(g, requires_grad=True)
    F.grid_sample(t64(x), gl, mode="nearest", padding_mode="border").sum().backward()
    torch.nn.functional.grid_sample(torch.tensor(x), gt, mode="nearest", padding_mode="border",
                                    align_corners=False).sum().backward()
    np.testing.assert_array_equal(npy(gl.grad), gt.grad.numpy())


# ----------------------------------------------------------------- MHA is_causal
CAUSAL_MSG = "Need attn_mask if specifying the is_causal hint"


def test_mha_is_causal_without_mask_raises_like_pytorch():
    mha = nn.MultiheadAttention(4, 2).double()
    x = t64(RNG.normal(size=(3, 2, 4)))
    for mode in (mha.train, mha.eval):
        mode()
        for need_weights in (True, False):
            with pytest.raises(RuntimeError, match=CAUSAL_MSG):
                mha(x, x, x, is_causal=True, need_weights=need_weights)
    layer = nn.TransformerEncoderLayer(4, 2, 8, dropout=0.0).double()
    with pytest.raises(RuntimeError, match=CAUSAL_MSG):
        layer(x, is_causal=True)
    with pytest.raises(RuntimeError, match=CAUSAL_MSG):
        F.multi_head_attention_forward(x, x, x, 2, lucid.zeros(12, 4, dtype=lucid.float64), None,
                                       lucid.zeros(4, 4, dtype=lucid.float64), None, is_causal=True)


def test_mha_is_causal_with_mask_is_the_mask():
    mha = nn.MultiheadAttention(4, 2).double()
    x = t64(RNG.normal(size=(3, 2, 4)))
    mask = nn.Transformer.generate_square_subsequent_mask(3, dtype=lucid.float64)
    a, wa = mha(x, x, x, attn_mask=mask, is_causal=True)
    b, wb = mha(x, x, x, attn_mask=mask)
    np.testing.assert_array_equal(npy(a), npy(b))
    np.testing.assert_array_equal(np.triu(npy(wa)[0], 1), np.zeros((3, 3)))


def test_mha_is_causal_message_matches_torch():
    torch = pytest.importorskip("torch")
    m = torch.nn.MultiheadAttention(4, 2)
    x = torch.randn(3, 1, 4)
    with pytest.raises(RuntimeError) as info:
        m(x, x, x, is_causal=True)
    mha = nn.MultiheadAttention(4, 2)
    with pytest.raises(RuntimeError) as ours:
        mha(lucid.zeros(3, 1, 4), lucid.zeros(3, 1, 4), lucid.zeros(3, 1, 4), is_causal=True)
    assert str(ours.value).endswith(str(info.value))


# ----------------------------------------------------------------- num_batches_tracked
@pytest.mark.parametrize("cls,shape", [(nn.BatchNorm1d, (4, 3)), (nn.BatchNorm2d, (4, 3, 2, 2))])
def test_num_batches_tracked_stays_a_0d_int64_array(cls, shape):
    bn = cls(3)
    buf = bn.num_batches_tracked
    for step in range(1, 4):
        bn(lucid.randn(*shape))
        assert type(buf._data) is np.ndarray and buf._data.shape == () and buf._data.dtype == np.int64
        assert int(buf.item()) == step
    assert bn.num_batches_tracked is buf  # updated in place, like running_mean
    sd = bn.state_dict()
    assert type(sd["num_batches_tracked"]._data) is np.ndarray and sd["num_batches_tracked"].shape == ()
    saved = {k: v.clone() for k, v in sd.items()}
    other = cls(3)
    other.load_state_dict(saved)
    assert int(other.num_batches_tracked.item()) == 3 and other.num_batches_tracked._data.shape == ()
    other(lucid.randn(*shape))
    assert int(other.num_batches_tracked.item()) == 4 and int(saved["num_batches_tracked"].item()) == 3
    other.load_state_dict(saved, assign=True)
    other(lucid.randn(*shape))
    assert type(other.num_batches_tracked._data) is np.ndarray and int(other.num_batches_tracked.item()) == 4
    other.reset_running_stats()
    assert int(other.num_batches_tracked.item()) == 0 and other.num_batches_tracked._data.shape == ()


def test_num_batches_tracked_cumulative_average_and_serialization(tmp_path):
    bn = nn.BatchNorm1d(2, momentum=None).double()
    xs = [RNG.normal(size=(5, 2)) for _ in range(3)]
    for x in xs:
        bn(t64(x))
    np.testing.assert_allclose(npy(bn.running_mean), np.mean([x.mean(0) for x in xs], 0), rtol=1e-12)
    lucid.save(bn.state_dict(), tmp_path / "bn.safetensors")
    back = lucid.load(tmp_path / "bn.safetensors")
    assert back["num_batches_tracked"].shape == () and int(back["num_batches_tracked"].item()) == 3
    fresh = nn.BatchNorm1d(2, momentum=None).double()
    fresh.load_state_dict(back)
    fresh(t64(xs[0]))
    assert int(fresh.num_batches_tracked.item()) == 4
