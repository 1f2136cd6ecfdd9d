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
    # the array class of the module's device (numpy.ndarray on the CPU), as PyTorch keeps the
    # count a 0-d int64 tensor on the module's device
    arr_cls = type(lucid.zeros(1, device=bn.running_mean.device)._data)
    for step in range(1, 4):
        bn(lucid.randn(*shape))
        assert type(buf._data) is arr_cls and buf._data.shape == () and buf._data.dtype == np.int64
        assert buf.device == bn.running_mean.device
        assert int(buf.item()) == step
    assert bn.num_batches_tracked is buf  # updated in place, like running_mean
    sd = bn.state_dict()
    assert type(sd["num_batches_tracked"]._data) is arr_cls and sd["num_batches_tracked"].shape == ()
    saved = {k: v.clone() for k, v in sd.items()}
    other = cls(3)
    other.load_state_dict(saved)
    assert int(other.num_batches_tracked.item()) == 3 and other.num_batches_tracked._data.shape == ()
    other(lucid.randn(*shape))
    assert int(other.num_batches_tracked.item()) == 4 and int(saved["num_batches_tracked"].item()) == 3
    other.load_state_dict(saved, assign=True)
    other(lucid.randn(*shape))
    assert type(other.num_batches_tracked._data) is arr_cls and int(other.num_batches_tracked.item()) == 4
    other.reset_running_stats()
    assert int(other.num_batches_tracked.item()) == 0 and other.num_batches_tracked._data.shape == ()


def test_num_batches_tracked_and_running_stats_on_a_device_match_the_cpu():
    from lucid.testing import strict_device

    strict_device.enable()
    xs = [RNG.normal(size=(4, 3, 2, 2)) for _ in range(3)]
    got = {}
    for dev in ("cpu", "strict"):
        bn = nn.BatchNorm2d(3).double().to(dev)
        before = strict_device.HOST_READS[0]
        for x in xs:
            bn(lucid.tensor(x, device=dev, requires_grad=True)).sum().backward()
        assert strict_device.HOST_READS[0] == before  # a training step reads nothing back
        nbt = bn.num_batches_tracked
        assert nbt.device == bn.running_mean.device and nbt.device.type == dev
        assert nbt.shape == () and nbt.dtype == lucid.int64
        got[dev] = [t.detach().cpu().numpy() for t in (nbt, bn.running_mean, bn.running_var)]
    assert int(got["strict"][0]) == 3
    for c, d in zip(got["cpu"], got["strict"]):
        np.testing.assert_allclose(d, c, rtol=1e-13)


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


# ----------------------------------------------------------------- embedding_bag scale_grad_by_freq, sparse
BAG_W = RNG.normal(size=(7, 2))


def _bag_freq_grad_ref(idx, bounds, mode, g, pad=None, psw=None):
    """Loop reference: each occurrence's gradient (bag coefficient * g[bag]) divided by how
    often its index occurs among the bagged indices."""
    flat = idx[bounds[0]:bounds[-1]]
    counts = {i: int((flat == i).sum()) for i in set(flat.tolist())}
    want = np.zeros_like(BAG_W)
    for b in range(len(bounds) - 1):
        sel = [j for j in range(bounds[b], bounds[b + 1]) if idx[j] != pad]
        for j in sel:
            coef = (1.0 / len(sel)) if mode == "mean" else (1.0 if psw is None else psw[j])
            want[idx[j]] += coef * g[b] / counts[idx[j]]
    return want


@pytest.mark.parametrize("mode", ["sum", "mean"])
@pytest.mark.parametrize("pad", [None, 2])
def test_embedding_bag_scale_grad_by_freq_matches_loop(mode, pad):
    idx, off = np.array([1, 2, 1, 4, 1, 3, 2, 5]), np.array([0, 3, 3, 6])
    g = RNG.normal(size=(4, 2))
    w = t64(BAG_W, True)
    out = F.embedding_bag(lucid.tensor(idx), w, lucid.tensor(off), mode=mode, scale_grad_by_freq=True,
                          padding_idx=pad)
    plain = F.embedding_bag(lucid.tensor(idx), t64(BAG_W), lucid.tensor(off), mode=mode, padding_idx=pad)
    np.testing.assert_array_equal(npy(out), npy(plain))  # the value is untouched
    (out * t64(g)).sum().backward()
    want = _bag_freq_grad_ref(idx, list(off) + [len(idx)], mode, g, pad)
    np.testing.assert_allclose(npy(w.grad), want, rtol=1e-13, atol=1e-15)


def test_embedding_bag_scale_grad_by_freq_2d_input_weights_and_last_offset():
    idx2 = np.array([[0, 3, 3], [3, 6, 0]])
    g = RNG.normal(size=(2, 2))
    w = t64(BAG_W, True)
    (F.embedding_bag(lucid.tensor(idx2), w, mode="mean", scale_grad_by_freq=True) * t64(g)).sum().backward()
    np.testing.assert_allclose(npy(w.grad), _bag_freq_grad_ref(idx2.reshape(-1), [0, 3, 6], "mean", g),
                               rtol=1e-13)
    idx, psw = np.array([5, 5, 1, 5, 4]), RNG.normal(size=5)
    w, p = t64(BAG_W, True), t64(psw, True)
    out = F.embedding_bag(lucid.tensor(idx), w, lucid.tensor([0, 2, 5]), mode="sum", scale_grad_by_freq=True,
                          per_sample_weights=p, include_last_offset=True)
    (out * t64(g)).sum().backward()
    np.testing.assert_allclose(npy(w.grad), _bag_freq_grad_ref(idx, [0, 2, 5], "sum", g, psw=psw), rtol=1e-13)
    # per_sample_weights' gradient is not scaled: d out[b] / d psw[j] = W[idx[j]]
    np.testing.assert_allclose(npy(p.grad), [BAG_W[i] @ g[0 if j < 2 else 1] for j, i in enumerate(idx)],
                               rtol=1e-13)


def test_embedding_bag_scale_grad_by_freq_module_and_max_refusal():
    bag = nn.EmbeddingBag(7, 2, mode="sum", scale_grad_by_freq=True).double()
    bag(lucid.tensor([[1, 1, 2]])).sum().backward()
    np.testing.assert_allclose(npy(bag.weight.grad)[:, 0], [0, 1, 1, 0, 0, 0, 0], rtol=1e-14)
    with pytest.raises(ValueError, match="max mode does not support scaling the gradient by the frequency"):
        F.embedding_bag(lucid.tensor([[1, 2]]), t64(BAG_W), mode="max", scale_grad_by_freq=True)
    with pytest.raises(ValueError, match="max mode does not support sparse weights"):
        F.embedding_bag(lucid.tensor([[1, 2]]), t64(BAG_W), mode="max", sparse=True)


def test_embedding_bag_scale_grad_by_freq_matches_torch_where_its_cpu_kernel_is_right():
    # PyTorch 2.13's CPU kernel divides by counts[sorted_indices[group number]]
    # (pytorch/pytorch#190063); with every index equally frequent that is the right count.
    torch = pytest.importorskip("torch")
    idx, off = np.array([4, 1, 4, 6, 1, 6]), np.array([0, 2, 2])
    g = RNG.normal(size=(3, 2))
    for mode in ("sum", "mean"):
        wl, wt = t64(BAG_W, True), torch.tensor(BAG_W, requires_grad=True)
        (F.embedding_bag(lucid.tensor(idx), wl, lucid.tensor(off), mode=mode, scale_grad_by_freq=True)
         * t64(g)).sum().backward()
        (torch.nn.functional.embedding_bag(torch.tensor(idx), wt, torch.tensor(off), mode=mode,
                                           scale_grad_by_freq=True) * torch.tensor(g)).sum().backward()
        np.testing.assert_allclose(npy(wl.grad), wt.grad.numpy(), rtol=1e-13)


def test_sparse_true_gives_the_dense_gradient_and_warns_once(monkeypatch):
    from lucid.nn.functional import sparse as sparse_mod

    monkeypatch.setattr(sparse_mod, "_SPARSE_WARNED", [False])
    idx = lucid.tensor([[1, 3, 1]])
    dense = nn.Embedding(7, 2).double()
    emb = nn.Embedding(7, 2, sparse=True).double()
    emb.load_state_dict(dense.state_dict())
    bag = nn.EmbeddingBag(7, 2, mode="sum", sparse=True).double()
    bag.load_state_dict(dense.state_dict())
    with pytest.warns(UserWarning, match="sparse=True gives a dense gradient"):
        emb(idx).sum().backward()
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # only once per process
        bag(idx).sum().backward()
        F.embedding(idx, t64(BAG_W), sparse=True)
    dense(idx).sum().backward()
    want = np.zeros((7, 2))
    want[1], want[3] = 2.0, 1.0
    for m in (emb, bag, dense):
        np.testing.assert_array_equal(npy(m.weight.grad), want)


def test_sparse_embedding_with_sparse_adam_matches_torch(monkeypatch):
    torch = pytest.importorskip("torch")
    from lucid.nn.functional import sparse as sparse_mod

    monkeypatch.setattr(sparse_mod, "_SPARSE_WARNED", [True])
    rng = np.random.default_rng(5)
    w0 = rng.standard_normal((6, 3))
    temb = torch.nn.Embedding(6, 3, sparse=True, _weight=torch.tensor(w0))
    lemb = nn.Embedding(6, 3, sparse=True, _weight=lucid.tensor(w0))
    to = torch.optim.SparseAdam(temb.parameters(), lr=0.1)
    lo = lucid.optim.SparseAdam(lemb.parameters(), lr=0.1)
    for _ in range(4):
        idx, c = rng.integers(0, 6, size=4), rng.standard_normal((4, 3))
        to.zero_grad()
        lo.zero_grad()
        (temb(torch.tensor(idx)) * torch.tensor(c)).sum().backward()
        (lemb(lucid.tensor(idx)) * t64(c)).sum().backward()
        to.step()
        lo.step()
    np.testing.assert_allclose(npy(lemb.weight), temb.weight.detach().numpy(), rtol=1e-12)


# ----------------------------------------------------------------- orthogonal(use_trivialization=False)
from lucid.autograd import gradcheck  # noqa: E402
from lucid.nn.utils.parametrizations import orthogonal  # noqa: E402


def _qr_positive(a):
    """The Q of ``a = QR`` with diag(R) > 0 (tall ``a``; a wide one through its transpose)."""
    wide = a.shape[-2] < a.shape[-1]
    q, r = np.linalg.qr(np.swapaxes(a, -2, -1) if wide else a)
    q = q * np.sign(np.diagonal(r, axis1=-2, axis2=-1))[..., None, :]
    return np.swapaxes(q, -2, -1) if wide else q


def _is_orthonormal(q, atol=1e-12):
    q = np.swapaxes(q, -2, -1) if q.shape[-2] < q.shape[-1] else q
    return np.allclose(np.swapaxes(q, -2, -1) @ q, np.eye(q.shape[-1]), atol=atol)


class _Batched(nn.Module):
    def __init__(self, shape):
        super().__init__()
        self.weight = nn.Parameter(t64(RNG.normal(size=shape)))


@pytest.mark.parametrize("shape", [(5, 3), (3, 5), (4, 4), (2, 4, 3)])
def test_orthogonal_householder_without_trivialization(shape):
    m = _Batched(shape)
    w0 = npy(m.weight).copy()
    orthogonal(m, orthogonal_map="householder", use_trivialization=False)
    assert list(m.state_dict()) == ["parametrizations.weight.original"]  # no base buffer
    assert not hasattr(m.parametrizations.weight[0], "base")
    np.testing.assert_allclose(npy(m.weight), _qr_positive(w0), rtol=1e-12, atol=1e-12)
    # right_inverse round trip: an orthogonal value is kept, another is orthogonalised
    q = _qr_positive(RNG.normal(size=shape)) * np.where(RNG.random(min(shape[-2:])) < 0.5, -1.0, 1.0)[
        (...,) + ((None, slice(None)) if shape[-2] >= shape[-1] else (slice(None), None))]
    m.weight = t64(q)
    np.testing.assert_allclose(npy(m.weight), q, rtol=1e-12, atol=1e-12)
    raw = RNG.normal(size=shape)
    m.weight = t64(raw)
    np.testing.assert_allclose(npy(m.weight), _qr_positive(raw), rtol=1e-12, atol=1e-12)
    assert _is_orthonormal(npy(m.weight))
    # gradients of the map, in float64, off the diagonal (the diagonal holds the signs: a
    # step function, cast to int in the forward as PyTorch does)
    p = m.parametrizations.weight[0]
    x = npy(m.parametrizations.weight.original)
    off = 1.0 - np.broadcast_to(np.eye(*shape[-2:]), shape)
    fixed = t64(x * (1.0 - off))
    assert gradcheck(lambda a: p(a * t64(off) + fixed), (t64(x, True),))
    m.parametrizations.weight.original.grad = None
    (m.weight * t64(RNG.normal(size=shape))).sum().backward()
    assert m.parametrizations.weight.original.grad is not None


def test_orthogonal_householder_skipped_reflection_is_restored():
    # e_1 needs no reflection in the first column (LAPACK's tau == 0 there): the diagonal sign
    # flip must make the forward reproduce it exactly.
    m = nn.Linear(3, 4).double()
    orthogonal(m, orthogonal_map="householder", use_trivialization=False)
    q = np.eye(4, 3)
    m.weight = t64(q)
    np.testing.assert_allclose(npy(m.weight), q, atol=1e-15)
    q[:, 1] *= -1
    m.weight = t64(q)
    np.testing.assert_allclose(npy(m.weight), q, atol=1e-15)


@pytest.mark.parametrize("omap", ["matrix_exp", "cayley"])
@pytest.mark.parametrize("shape", [(4, 4), (5, 3), (3, 5)])
def test_orthogonal_exp_and_cayley_without_trivialization(omap, shape):
    m = _Batched(shape)
    w0 = npy(m.weight).copy()
    orthogonal(m, orthogonal_map=omap, use_trivialization=False)
    assert list(m.state_dict()) == ["parametrizations.weight.original"]
    np.testing.assert_array_equal(npy(m.parametrizations.weight.original), w0)  # stored as is
    q = npy(m.weight)
    assert q.shape == shape and _is_orthonormal(q)
    if omap == "cayley":  # closed form: (I - A/2)^{-1} (I + A/2) of the skew part of tril(X)
        x = w0.T if shape[0] < shape[1] else w0
        n, k = x.shape
        y = np.concatenate([np.tril(x), np.zeros((n, n - k))], 1)
        a = y - y.T
        want = np.linalg.solve(np.eye(n) - a / 2, np.eye(n) + a / 2)[:, :k]
        np.testing.assert_allclose(q, want.T if shape[0] < shape[1] else want, rtol=1e-12, atol=1e-12)
    with pytest.raises(NotImplementedError, match="use_trivialization=False"):
        m.weight = t64(q)
    p = m.parametrizations.weight[0]
    assert gradcheck(lambda a: p(a), (t64(w0, True),))


def test_orthogonal_without_trivialization_matches_torch():
    torch = pytest.importorskip("torch")
    from torch.nn.utils.parametrizations import orthogonal as t_orth

    for omap, shape in [("householder", (5, 3)), ("householder", (3, 5)), ("matrix_exp", (4, 4)),
                        ("cayley", (5, 3)), ("matrix_exp", (3, 5))]:
        w0, c = RNG.normal(size=shape), RNG.normal(size=shape)
        lm, tm = nn.Linear(shape[1], shape[0]).double(), torch.nn.Linear(shape[1], shape[0]).double()
        lm.weight = nn.Parameter(t64(w0))
        with torch.no_grad():
            tm.weight.copy_(torch.tensor(w0))
        orthogonal(lm, orthogonal_map=omap, use_trivialization=False)
        t_orth(tm, orthogonal_map=omap, use_trivialization=False)
        np.testing.assert_allclose(npy(lm.weight), tm.weight.detach().numpy(), rtol=1e-10, atol=1e-12)
        (lm.weight * t64(c)).sum().backward()
        (tm.weight * torch.tensor(c)).sum().backward()
        np.testing.assert_allclose(npy(lm.parametrizations.weight.original.grad),
                                   tm.parametrizations.weight.original.grad.numpy(), rtol=1e-9, atol=1e-11)
        np.testing.assert_allclose(npy(lm.parametrizations.weight.original),
                                   tm.parametrizations.weight.original.detach().numpy(), rtol=1e-10, atol=1e-12)
        if omap == "householder":
            new = RNG.normal(size=shape)
            lm.weight = t64(new)
            with torch.no_grad():
                tm.weight = torch.tensor(new)
            np.testing.assert_allclose(npy(lm.weight), tm.weight.detach().numpy(), rtol=1e-10, atol=1e-12)


# ----------------------------------------------------------------- load_state_dict pre-hooks and metadata
class _Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(2, 3)
        self.bn = nn.BatchNorm1d(3)
        self.seq = nn.Sequential(nn.Linear(3, 1))


def test_state_dict_metadata_has_each_modules_version():
    net = _Net()
    sd = net.state_dict()
    assert dict(sd._metadata) == {"": {"version": 1}, "fc": {"version": 1}, "bn": {"version": 2},
                                  "seq": {"version": 1}, "seq.0": {"version": 1}}
    seen = []
    net.bn.register_state_dict_post_hook(lambda m, d, prefix, meta: seen.append((prefix, dict(meta))))
    net.state_dict()
    assert seen == [("bn.", {"version": 2})]


def test_load_pre_hooks_get_local_metadata_and_a_copy_of_the_dict():
    net = _Net()
    got = []
    for name, m in net.named_modules():
        m.register_load_state_dict_pre_hook(
            lambda mod, sd, prefix, meta, strict, *lists: got.append((prefix, dict(meta), strict)))
    sd = net.state_dict()
    net.load_state_dict(sd)
    assert got == [("", {"version": 1}, True), ("fc.", {"version": 1}, True), ("bn.", {"version": 2}, True),
                   ("seq.", {"version": 1}, True), ("seq.0.", {"version": 1}, True)]
    got.clear()
    net.load_state_dict(dict(sd), assign=True)  # no metadata: empty dicts (+ assign's flag)
    assert [g[1] for g in got] == [{"assign_to_params_buffers": True}] * 5
    # a hook that edits the dict edits the load's copy, not the caller's dict
    net.fc.register_load_state_dict_pre_hook(lambda mod, sd, prefix, *rest: sd.pop(prefix + "bias"))
    before = list(sd)
    res = net.load_state_dict(sd, strict=False)
    assert list(sd) == before and res.missing_keys == ["fc.bias"]


def test_load_pre_hook_lists_are_honoured():
    net = _Net()
    sd = net.state_dict()
    net.fc.register_load_state_dict_pre_hook(
        lambda mod, d, prefix, meta, strict, missing, unexpected, errors: (missing.append(prefix + "ghost"),
                                                                           unexpected.append("stray")))
    res = net.load_state_dict(sd, strict=False)
    assert res.missing_keys == ["fc.ghost"] and res.unexpected_keys == ["stray"]
    w = npy(net.fc.weight).copy()
    bad = {k: v + 1.0 for k, v in sd.items()}
    with pytest.raises(RuntimeError) as info:
        net.load_state_dict(bad)
    msg = str(info.value)
    assert msg.index('Missing key(s) in state_dict: "fc.ghost"') < msg.index('Unexpected key(s) in state_dict: "stray"')
    np.testing.assert_array_equal(npy(net.fc.weight), w)  # a failed load changes nothing
    # error_msgs raise even with strict=False
    net.bn.register_load_state_dict_pre_hook(lambda mod, d, prefix, meta, strict, m, u, errors:
                                             errors.append("bn: checkpoint from the future"))
    with pytest.raises(RuntimeError, match="bn: checkpoint from the future"):
        net.load_state_dict(bad, strict=False)
    np.testing.assert_array_equal(npy(net.fc.weight), w)


def test_private_pre_hook_without_module_and_version_based_upgrade():
    net = _Net()
    calls = []
    net.seq._register_load_state_dict_pre_hook(lambda *a: calls.append(len(a)))
    net.seq._register_load_state_dict_pre_hook(lambda *a: calls.append(len(a)), with_module=True)
    net.load_state_dict(net.state_dict())
    assert calls == [7, 8]
    # a BatchNorm checkpoint of version 1 (before num_batches_tracked) loads, keeping the count
    bn = nn.BatchNorm1d(3)
    bn(lucid.randn(4, 3))
    sd = bn.state_dict()
    del sd["num_batches_tracked"]
    sd._metadata[""] = {"version": 1}
    assert bn.load_state_dict(sd).missing_keys == [] and int(bn.num_batches_tracked.item()) == 1
    sd._metadata[""] = {"version": 2}  # a current checkpoint must have it
    with pytest.raises(RuntimeError, match='Missing key\\(s\\) in state_dict: "num_batches_tracked"'):
        bn.load_state_dict(sd)
    # PyTorch also loads a (1,) value into a 0-d buffer
    sd["num_batches_tracked"] = lucid.tensor([7])
    bn.load_state_dict(sd)
    assert bn.num_batches_tracked.shape == () and int(bn.num_batches_tracked.item()) == 7


def test_load_post_hooks_can_clear_the_strict_errors_and_run_bottom_up():
    net = _Net()
    sd = net.state_dict()
    del sd["fc.bias"]
    order = []

    def clear(m, keys):
        order.append("root")
        keys.missing_keys.clear()

    net.register_load_state_dict_post_hook(clear)
    net.fc.register_load_state_dict_post_hook(lambda m, keys: order.append("fc") and None)
    net.seq[0].register_load_state_dict_post_hook(lambda m, keys: order.append("seq.0") and None)
    new_w = {k: v + 1.0 for k, v in sd.items()}
    res = net.load_state_dict(new_w)
    assert order == ["fc", "seq.0", "root"] and res.missing_keys == []
    np.testing.assert_array_equal(npy(net.fc.weight), npy(new_w["fc.weight"]))
    # a post hook that adds a key makes a strict load fail, and the values are restored
    net2 = _Net()
    net2.register_load_state_dict_post_hook(lambda m, keys: keys.unexpected_keys.append("late") and None)
    w = npy(net2.fc.weight).copy()
    with pytest.raises(RuntimeError, match='Unexpected key\\(s\\) in state_dict: "late"'):
        net2.load_state_dict(net.state_dict())
    np.testing.assert_array_equal(npy(net2.fc.weight), w)
    assert net2.load_state_dict(net.state_dict(), strict=False).unexpected_keys == ["late"]
    np.testing.assert_array_equal(npy(net2.fc.weight), npy(net.fc.weight))


def test_load_pre_hooks_match_torch():
    torch = pytest.importorskip("torch")

    def build(lib):
        m = lib.nn.Sequential(lib.nn.Linear(2, 2), lib.nn.BatchNorm1d(2))
        got = []
        for name, sub in m.named_modules():
            sub.register_load_state_dict_pre_hook(
                lambda mod, sd, prefix, meta, strict, missing, unexpected, errors:
                (got.append((prefix, {k: v for k, v in meta.items()}, strict, sorted(sd))),
                 missing.append(prefix + "x") if prefix == "1." else None))
        return m, got

    lm, lgot = build(lucid)
    tm, tgot = build(torch)
    lres = lm.load_state_dict(lm.state_dict(), strict=False)
    tres = tm.load_state_dict(tm.state_dict(), strict=False)
    assert [g[:3] for g in lgot] == [g[:3] for g in tgot]
    assert lres.missing_keys == tres.missing_keys and lres.unexpected_keys == tres.unexpected_keys
    assert {k: dict(v) for k, v in lm.state_dict()._metadata.items()} == \
        {k: dict(v) for k, v in tm.state_dict()._metadata.items()}


# ----------------------------------------------------------------- always_call forward hooks
class _Boom(nn.Module):
    def forward(self, x):
        raise ValueError("boom")


def test_global_always_call_forward_hook_runs_when_forward_raises():
    from lucid.nn.modules.module import register_module_forward_hook

    seen = []
    h1 = register_module_forward_hook(lambda m, args, out: seen.append(("always", type(m).__name__, out)),
                                      always_call=True)
    h2 = register_module_forward_hook(lambda m, args, out: seen.append(("plain", type(m).__name__, out)))
    try:
        with pytest.raises(ValueError, match="boom"):
            _Boom()(lucid.zeros(1))
        assert seen == [("always", "_Boom", None)]
        seen.clear()
        out = nn.Identity()(lucid.ones(1))  # a normal call runs each hook once
        assert [s[:2] for s in seen] == [("always", "Identity"), ("plain", "Identity")] and seen[0][2] is out
        seen.clear()
        # an error in a later forward hook: the always_call hook already ran, it is not repeated
        h3 = nn.Identity().register_forward_hook(lambda m, a, o: (_ for _ in ()).throw(KeyError("late")))
        h3.remove()
        ident = nn.Identity()
        ident.register_forward_hook(lambda m, a, o: (_ for _ in ()).throw(KeyError("late")))
        with pytest.raises(KeyError):
            ident(lucid.ones(1))
        assert [s[0] for s in seen] == ["always", "plain"]
    finally:
        h1.remove()
        h2.remove()
    seen.clear()
    with pytest.raises(ValueError):
        _Boom()(lucid.zeros(1))
    assert seen == []


def test_module_always_call_hook_and_a_failing_always_hook_only_warns():
    from lucid.nn.modules.module import register_module_forward_hook

    boom, seen = _Boom(), []
    boom.register_forward_hook(lambda m, a, k, o: seen.append((a, k, o)), with_kwargs=True, always_call=True)
    boom.register_forward_hook(lambda m, a, o: seen.append("plain"))
    x = lucid.zeros(1)
    with pytest.raises(ValueError, match="boom"):
        boom(x)
    assert len(seen) == 1 and seen[0][0][0] is x and seen[0][1] == {} and seen[0][2] is None
    h = register_module_forward_hook(lambda m, a, o: 1 / 0, always_call=True)
    try:
        with pytest.warns(UserWarning, match="always_call=True raised an exception"):
            with pytest.raises(ValueError, match="boom"):
                boom(x)
    finally:
        h.remove()


def test_always_call_matches_torch():
    torch = pytest.importorskip("torch")

    def run(lib, boom_cls):
        seen = []
        h = lib.nn.modules.module.register_module_forward_hook(
            lambda m, a, o: seen.append((type(m).__name__, o is None)), always_call=True)
        try:
            net = lib.nn.Sequential(lib.nn.Identity(), boom_cls())
            with pytest.raises(ValueError):
                net(lib.zeros(1))
        finally:
            h.remove()
        return [(n.replace("_TBoom", "_Boom"), none) for n, none in seen]

    class _TBoom(torch.nn.Module):
        def forward(self, x):
            raise ValueError("boom")

    assert run(lucid, _Boom) == run(torch, _TBoom) == [("Identity", False), ("_Boom", True), ("Sequential", True)]


# ----------------------------------------------------------------- weight_norm checkpoint keys
def test_old_style_weight_norm_checkpoint_loads_into_new_style():
    from lucid.nn.utils import parametrizations

    old = nn.Sequential(nn.Linear(3, 4), nn.utils.weight_norm(nn.Conv1d(4, 2, 3), dim=0)).double()
    old[0] = nn.utils.weight_norm(old[0], dim=1)
    sd = old.state_dict()
    assert {"0.weight_g", "0.weight_v", "1.weight_g", "1.weight_v"} <= set(sd)
    new = nn.Sequential(parametrizations.weight_norm(nn.Linear(3, 4), dim=1),
                        parametrizations.weight_norm(nn.Conv1d(4, 2, 3), dim=0)).double()
    res = new.load_state_dict(sd)
    assert res.missing_keys == [] and res.unexpected_keys == []
    assert "0.weight_g" in sd  # the caller's dict is untouched
    for i in range(2):
        np.testing.assert_array_equal(npy(new[i].parametrizations.weight.original0), npy(old[i].weight_g))
        np.testing.assert_array_equal(npy(new[i].parametrizations.weight.original1), npy(old[i].weight_v))
    x = t64(RNG.normal(size=(2, 4, 5)))
    lin_in = t64(RNG.normal(size=(2, 5, 3)))
    np.testing.assert_allclose(npy(new[0](lin_in)), npy(old[0](lin_in)), rtol=1e-14)
    np.testing.assert_allclose(npy(new[1](x)), npy(old[1](x)), rtol=1e-14)
    # new-style keys keep loading; a dict with only one of g / v is left alone (and fails)
    assert new.load_state_dict(new.state_dict()).missing_keys == []
    partial = dict(sd)
    del partial["1.weight_v"]
    with pytest.raises(RuntimeError, match='"1.weight_g"'):
        new.load_state_dict(partial)


def test_new_style_checkpoint_into_old_style_module_is_refused_as_in_pytorch():
    from lucid.nn.utils import parametrizations

    sd = parametrizations.weight_norm(nn.Linear(3, 2)).state_dict()
    with pytest.raises(RuntimeError, match="Missing key\\(s\\) in state_dict: \"weight_g\", \"weight_v\""):
        nn.utils.weight_norm(nn.Linear(3, 2)).load_state_dict(sd)


def test_torch_old_style_weight_norm_checkpoint_loads_into_lucid_new_style():
    torch = pytest.importorskip("torch")
    import warnings

    from lucid.nn.utils import parametrizations

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # torch deprecates the old-style weight_norm
        tm = torch.nn.utils.weight_norm(torch.nn.Linear(3, 2).double())
    sd = {k: lucid.tensor(v.detach().numpy()) for k, v in tm.state_dict().items()}
    lm = parametrizations.weight_norm(nn.Linear(3, 2)).double()
    lm.load_state_dict(sd)
    x = RNG.normal(size=(4, 3))
    # float64 values from two libraries' summation orders: agree to ~1e-12, not to the last bit
    np.testing.assert_allclose(npy(lm(t64(x))), tm(torch.tensor(x)).detach().numpy(), rtol=1e-11, atol=1e-14)
    tnew = torch.nn.utils.parametrizations.weight_norm(torch.nn.Linear(3, 2).double())
    tnew.load_state_dict(tm.state_dict())
    for k, v in tnew.state_dict().items():
        np.testing.assert_array_equal(npy(lm.state_dict()[k]), v.numpy())
