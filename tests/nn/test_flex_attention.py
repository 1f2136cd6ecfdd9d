"""lucid.nn.attention.flex_attention: flex_attention, BlockMask and the mask helpers.

Values are checked against a NumPy float64 reference (softmax of the modified, masked scores);
the block-sparse fields and the outputs against torch's where torch is installed.
"""
import warnings

import numpy as np
import pytest

import lucid
import lucid.func as LF
import lucid.nn.functional as F
from lucid.nn.attention.flex_attention import (AuxOutput, AuxRequest, BlockMask, and_masks, create_block_mask,
                                               create_mask, flex_attention, noop_mask, or_masks)

T = lucid.tensor
FIELDS = ["kv_num_blocks", "kv_indices", "full_kv_num_blocks", "full_kv_indices", "q_num_blocks", "q_indices",
          "full_q_num_blocks", "full_q_indices"]


def ref(q, k, v, scale=None, mod=None, allowed=None):
    """(out, lse, max) of softmax(mod(q k^T * scale)) v with -inf where not allowed; dead rows give 0, -inf."""
    B, H, L, _ = q.shape
    S = k.shape[2]
    r = H // k.shape[1]
    k, v = np.repeat(k, r, axis=1), np.repeat(v, r, axis=1)
    scale = 1 / np.sqrt(q.shape[-1]) if scale is None else scale
    s = np.einsum("bhle,bhse->bhls", q, np.broadcast_to(k, (B,) + k.shape[1:])) * scale
    b, h, m, n = np.ogrid[:B, :H, :L, :S]
    if mod is not None:
        s = np.broadcast_to(mod(s, b, h, m, n), s.shape).astype(np.float64)
    if allowed is not None:
        s = np.where(np.broadcast_to(allowed, s.shape), s, -np.inf)
    mx = s.max(-1, keepdims=True)
    dead = np.isneginf(mx)
    e = np.exp(s - np.where(dead, 0, mx))
    tot = e.sum(-1, keepdims=True)
    p = np.where(dead, 0, e / np.where(dead, 1, tot))
    lse = np.where(dead, -np.inf, np.log(np.where(dead, 1, tot)) + np.where(dead, 0, mx))[..., 0]
    return p @ np.broadcast_to(v, (B,) + v.shape[1:]), lse, mx[..., 0]


def qkv(rng, B=2, H=2, L=6, S=6, E=4, Ev=3, Hkv=None):
    Hkv = H if Hkv is None else Hkv
    return (rng.standard_normal((B, H, L, E)), rng.standard_normal((B, Hkv, S, E)),
            rng.standard_normal((B, Hkv, S, Ev)))


def test_no_mods_and_causal_match_sdpa_and_reference():
    rng = np.random.default_rng(0)
    q, k, v = qkv(rng, L=5, S=7)
    got = flex_attention(T(q), T(k), T(v))
    np.testing.assert_allclose(got.numpy(), ref(q, k, v)[0], rtol=1e-12)
    np.testing.assert_allclose(got.numpy(), F.scaled_dot_product_attention(T(q), T(k), T(v)).numpy(), rtol=1e-12)
    got = flex_attention(T(q), T(k), T(v), scale=0.3)
    np.testing.assert_allclose(got.numpy(), ref(q, k, v, scale=0.3)[0], rtol=1e-12)
    bm = create_block_mask(lambda b, h, qi, ki: qi >= ki, None, None, 5, 7, BLOCK_SIZE=2)
    got = flex_attention(T(q), T(k), T(v), block_mask=bm)
    want = F.scaled_dot_product_attention(T(q), T(k), T(v), is_causal=True).numpy()
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-12)
    assert got.dtype == lucid.float64 and got.shape == (2, 2, 5, 3)


def test_float32_output_dtype_and_value():
    rng = np.random.default_rng(1)
    q, k, v = qkv(rng)
    got = flex_attention(T(q.astype(np.float32)), T(k.astype(np.float32)), T(v.astype(np.float32)))
    assert got.dtype == lucid.float32
    np.testing.assert_allclose(got.numpy(), ref(q, k, v)[0], rtol=1e-5, atol=1e-6)


REL = np.linspace(-1, 1, 11)  # a bias per offset q - kv in [-5, 5]
SLOPES = np.array([0.5, 0.25])


def score_mods(lib, wrap):
    rel, slopes = wrap(REL), wrap(SLOPES)
    return {
        "relative_bias_table": lambda s, b, h, qi, ki: s + rel[qi - ki + 5],
        "alibi": lambda s, b, h, qi, ki: s + slopes[h] * (ki - qi),
        "soft_cap": lambda s, b, h, qi, ki: 2.0 * lib.tanh(s / 2.0),
        "head_and_batch": lambda s, b, h, qi, ki: s * (1 + h) - b,
        "causal_by_inf": lambda s, b, h, qi, ki: lib.where(qi >= ki, s, -np.inf),
    }


@pytest.mark.parametrize("name", sorted(score_mods(np, np.asarray)))
def test_score_mods(name):
    rng = np.random.default_rng(2)
    q, k, v = qkv(rng)
    got = flex_attention(T(q), T(k), T(v), score_mod=score_mods(lucid, T)[name])
    np.testing.assert_allclose(got.numpy(), ref(q, k, v, mod=score_mods(np, np.asarray)[name])[0], rtol=1e-11)


DOCS = np.array([[0, 0, 0, 1, 1, 2, 2, 2, 2], [0, 1, 1, 1, 1, 1, 2, 3, 3]])


def mask_mods(lib, wrap):
    docs = wrap(DOCS)
    return {
        "causal": lambda b, h, qi, ki: qi >= ki,
        "sliding_window": lambda b, h, qi, ki: (qi >= ki) & (qi - ki <= 2),
        "prefix_lm": lambda b, h, qi, ki: (ki <= 3) | (qi >= ki),
        "document": lambda b, h, qi, ki: (docs[b, qi] == docs[b, ki]) & (qi >= ki),
        "per_head": lambda b, h, qi, ki: ki <= qi + h,
    }


@pytest.mark.parametrize("name", sorted(mask_mods(np, np.asarray)))
@pytest.mark.parametrize("bs", [2, (4, 3), 128])
def test_mask_mods(name, bs):
    rng = np.random.default_rng(3)
    q, k, v = qkv(rng, L=9, S=9)
    bm = create_block_mask(mask_mods(lucid, T)[name], 2, 2, 9, 9, BLOCK_SIZE=bs)
    out, aux = flex_attention(T(q), T(k), T(v), block_mask=bm, return_aux=AuxRequest(lse=True, max_scores=True))
    b, h, m, n = np.ogrid[:2, :2, :9, :9]
    allowed = mask_mods(np, np.asarray)[name](b, h, m, n)
    want = ref(q, k, v, allowed=allowed)
    np.testing.assert_allclose(out.numpy(), want[0], rtol=1e-11)
    np.testing.assert_allclose(aux.lse.numpy(), want[1], rtol=1e-12)
    np.testing.assert_allclose(aux.max_scores.numpy(), want[2], rtol=1e-12)
    np.testing.assert_array_equal(create_mask(mask_mods(lucid, T)[name], 2, 2, 9, 9).numpy(),
                                  np.broadcast_to(allowed, (2, 2, 9, 9)))


def test_score_mod_and_block_mask_together_and_shared_mask():
    rng = np.random.default_rng(4)
    q, k, v = qkv(rng, L=6, S=8)
    bm = create_block_mask(lambda b, h, qi, ki: (ki - qi) <= 2, None, None, 6, 8, BLOCK_SIZE=4)
    mod = score_mods(lucid, T)["alibi"]
    got = flex_attention(T(q), T(k), T(v), score_mod=mod, block_mask=bm)
    m, n = np.ogrid[:6, :8]
    want = ref(q, k, v, mod=score_mods(np, np.asarray)["alibi"], allowed=(n - m) <= 2)[0]
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-11)


def test_gqa_and_head_errors():
    rng = np.random.default_rng(5)
    q, k, v = qkv(rng, H=6, Hkv=2)
    got = flex_attention(T(q), T(k), T(v), enable_gqa=True, score_mod=lambda s, b, h, qi, ki: s + h)
    np.testing.assert_allclose(got.numpy(), ref(q, k, v, mod=lambda s, b, h, m, n: s + h)[0], rtol=1e-12)
    want = F.scaled_dot_product_attention(T(q), T(k), T(v), enable_gqa=True).numpy()
    np.testing.assert_allclose(flex_attention(T(q), T(k), T(v), enable_gqa=True).numpy(), want, rtol=1e-12)
    with pytest.raises(ValueError, match="flex_attention: .*same number of heads.*enable_gqa"):
        flex_attention(T(q), T(k), T(v))
    q4, k3, v3 = qkv(rng, H=4, Hkv=3)
    with pytest.raises(ValueError, match="flex_attention: .*multiple of kv heads"):
        flex_attention(T(q4), T(k3), T(v3), enable_gqa=True)


def test_lse_aux_and_deprecated_return_lse():
    rng = np.random.default_rng(6)
    q, k, v = qkv(rng)
    want = ref(q, k, v, scale=0.7)
    with pytest.warns(FutureWarning, match="return_lse is deprecated"):
        out, lse = flex_attention(T(q), T(k), T(v), scale=0.7, return_lse=True)
    np.testing.assert_allclose(lse.numpy(), want[1], rtol=1e-12)
    assert lse.shape == (2, 2, 6)
    out, aux = flex_attention(T(q), T(k), T(v), scale=0.7, return_aux=AuxRequest(lse=True))
    assert isinstance(aux, AuxOutput) and aux.max_scores is None
    np.testing.assert_allclose(aux.lse.numpy(), want[1], rtol=1e-12)
    out, aux = flex_attention(T(q), T(k), T(v), scale=0.7, return_aux=AuxRequest(max_scores=True))
    assert aux.lse is None
    np.testing.assert_allclose(aux.max_scores.numpy(), want[2], rtol=1e-12)
    with pytest.raises(ValueError, match="flex_attention: Cannot specify both"):
        flex_attention(T(q), T(k), T(v), return_lse=True, return_aux=AuxRequest(lse=True))


def test_fully_masked_rows_give_zero_and_neg_inf_lse_with_finite_grads():
    rng = np.random.default_rng(7)
    q, k, v = qkv(rng, L=5, S=5)
    mask = lambda b, h, qi, ki: (qi >= 2) & (ki <= qi)  # noqa: E731  rows 0 and 1 attend to nothing
    bm = create_block_mask(mask, None, None, 5, 5, BLOCK_SIZE=2)
    qt, kt, vt = (T(x, requires_grad=True) for x in (q, k, v))
    out, aux = flex_attention(qt, kt, vt, block_mask=bm, return_aux=AuxRequest(lse=True))
    o = out.detach().numpy()
    np.testing.assert_array_equal(o[:, :, :2], 0.0)
    assert np.isneginf(aux.lse.detach().numpy()[:, :, :2]).all()
    m, n = np.ogrid[:5, :5]
    np.testing.assert_allclose(o, ref(q, k, v, allowed=(m >= 2) & (n <= m))[0], rtol=1e-12)
    (out.sum() + aux.lse[:, :, 2:].sum()).backward()
    for t in (qt, kt, vt):
        assert np.isfinite(t.grad.numpy()).all()
    np.testing.assert_array_equal(qt.grad.numpy()[:, :, :2], 0.0)


def test_gradcheck_qkv_with_mods():
    rng = np.random.default_rng(8)
    q, k, v = (T(x, requires_grad=True) for x in qkv(rng, B=1, H=2, L=4, S=5, E=3, Ev=2))
    bm = create_block_mask(lambda b, h, qi, ki: ki <= qi + 1, None, None, 4, 5, BLOCK_SIZE=2)
    mod = lambda s, b, h, qi, ki: 3.0 * lucid.tanh(s / 3.0) + 0.1 * (qi - ki)  # noqa: E731
    f = lambda q, k, v: flex_attention(q, k, v, score_mod=mod, block_mask=bm)  # noqa: E731
    assert lucid.autograd.gradcheck(f, [q, k, v])
    g = lambda q, k, v: flex_attention(q, k, v, block_mask=bm, return_aux=AuxRequest(lse=True))[1].lse  # noqa: E731
    assert lucid.autograd.gradcheck(g, [q, k, v])


def test_gradcheck_captured_learnable_bias():
    rng = np.random.default_rng(9)
    q, k, v = (T(x) for x in qkv(rng, B=1, H=2, L=4, S=4, E=3, Ev=2))
    table = T(rng.standard_normal((2, 7)), requires_grad=True)  # per head, per offset q - kv in [-3, 3]

    def f(table):
        return flex_attention(q, k, v, score_mod=lambda s, b, h, qi, ki: s + table[h, qi - ki + 3])

    assert lucid.autograd.gradcheck(f, [table])
    f(table).sum().backward()
    assert np.abs(table.grad.numpy()).sum() > 0


def test_vmap_over_an_extra_batch_dim():
    rng = np.random.default_rng(10)
    qs = T(rng.standard_normal((3, 1, 2, 4, 3)))
    k, v = (T(x) for x in qkv(rng, B=1, L=4, S=4, E=3)[1:])
    bm = create_block_mask(lambda b, h, qi, ki: qi >= ki, None, None, 4, 4, BLOCK_SIZE=2)
    got = LF.vmap(lambda q: flex_attention(q, k, v, block_mask=bm))(qs)
    for i in range(3):
        np.testing.assert_allclose(got[i].numpy(), flex_attention(qs[i], k, v, block_mask=bm).numpy(), rtol=1e-12)


def test_broadcast_kv_batch_with_block_mask():
    rng = np.random.default_rng(11)
    q = rng.standard_normal((3, 2, 4, 3))
    k, v = rng.standard_normal((1, 2, 4, 3)), rng.standard_normal((1, 2, 4, 2))
    bm = create_block_mask(lambda b, h, qi, ki: ki <= qi + b, 3, None, 4, 4, BLOCK_SIZE=2)
    got = flex_attention(T(q), T(k), T(v), block_mask=bm)
    b, h, m, n = np.ogrid[:3, :1, :4, :4]
    np.testing.assert_allclose(got.numpy(), ref(q, k, v, allowed=n <= m + b)[0], rtol=1e-12)
    with pytest.raises(ValueError, match="flex_attention: .*same batch size"):
        flex_attention(T(q), T(k), T(v))


def test_block_structure_counts_like_the_kernel():
    # Key block 1 is not listed for query block 0: skipped even though mask_mod (noop) allows it;
    # full blocks do not consult mask_mod.
    rng = np.random.default_rng(12)
    q, k, v = qkv(rng, B=1, H=1, L=4, S=4)
    i32 = lucid.int32
    bm = BlockMask.from_kv_blocks(T([[[1, 1]]], dtype=i32), T([[[[0, 1], [1, 0]]]], dtype=i32),
                                  T([[[0, 1]]], dtype=i32), T([[[[0, 1], [0, 1]]]], dtype=i32), BLOCK_SIZE=2,
                                  mask_mod=lambda b, h, qi, ki: qi != ki)
    allowed = np.array([[0, 1, 0, 0], [1, 0, 0, 0], [1, 1, 0, 1], [1, 1, 1, 0]], bool)
    got = flex_attention(T(q), T(k), T(v), block_mask=bm)
    np.testing.assert_allclose(got.numpy(), ref(q, k, v, allowed=allowed)[0], rtol=1e-12)
    assert bm.shape == (1, 1, 4, 4) and bm.seq_lengths == (4, 4)
    np.testing.assert_array_equal(bm.q_num_blocks.numpy(), [[[1, 1]]])
    np.testing.assert_array_equal(bm.full_q_num_blocks.numpy(), [[[1, 0]]])
    np.testing.assert_array_equal(bm.to_dense().numpy(), [[[[1, 0], [1, 1]]]])
    assert bm.sparsity() == 25.0


def test_block_mask_methods():
    bm = create_block_mask(lambda b, h, qi, ki: qi >= ki, 4, 2, 16, 16, BLOCK_SIZE=4)
    assert bm.kv_num_blocks.shape == (4, 2, 4) and bm.kv_indices.shape == (4, 2, 4, 4)
    assert bm[0].kv_num_blocks.shape == (1, 2, 4) and bm[0, 1].kv_indices.shape == (1, 1, 4, 4)
    assert bm[0:2, 1:2].kv_num_blocks.shape == (2, 1, 4)
    assert bm[0:2, 1:2, T([1])].kv_indices.shape == (2, 1, 1, 4)
    assert bm.shape == (4, 2, 16, 16) and bm.numel() == 4 * 2 * 256
    assert bm.sparsity() == pytest.approx(100 * 6 / 16)
    np.testing.assert_array_equal(bm.to_dense().numpy()[0, 0], np.tri(4, dtype=np.int32))
    tup = bm.as_tuple()
    assert len(tup) == 2 + 11 + 1 + 2 + 1 and tup[:2] == (16, 16) and tup[-3:-1] == (4, 4)
    assert bm.as_tuple(flatten=False)[0] == (16, 16)
    assert "shape=(4, 2, 16, 16)" in repr(bm) and "sparsity=37.50%" in repr(bm) and "mask_mod=<lambda>" in repr(bm)
    assert "To print out more" in bm.to_string()
    assert bm.to_string(limit=8).count("(") == 8
    moved = bm.to("cpu")
    assert moved.kv_indices.device.type == "cpu" and moved.mask_mod is bm.mask_mod and moved.BLOCK_SIZE == (4, 4)
    np.testing.assert_array_equal(moved.full_q_indices.numpy(), bm.full_q_indices.numpy())
    adj = bm._adjust(8, 8)
    assert adj.shape == (4, 2, 8, 8)
    np.testing.assert_array_equal(adj.to_dense().numpy()[1, 1], np.tri(2, dtype=np.int32))
    q = T(np.random.default_rng(13).standard_normal((4, 2, 8, 3)))
    np.testing.assert_allclose(flex_attention(q, q, q, block_mask=adj).numpy(),
                               F.scaled_dot_product_attention(q, q, q, is_causal=True).numpy(), rtol=1e-12)
    with pytest.raises(RuntimeError, match="sliced BlockMask"):
        flex_attention(q, q, q, block_mask=bm[:, :])


def test_mask_helpers():
    causal = lambda b, h, qi, ki: qi >= ki  # noqa: E731
    band = lambda b, h, qi, ki: qi - ki <= 1  # noqa: E731
    m, n = np.ogrid[:4, :5]
    got = create_mask(and_masks(causal, band), None, None, 4, 5).numpy()[0, 0]
    np.testing.assert_array_equal(got, (m >= n) & (m - n <= 1))
    got = create_mask(or_masks(causal, lambda b, h, qi, ki: ki == 4), 1, 1, 4, 5).numpy()[0, 0]
    np.testing.assert_array_equal(got, (m >= n) | (n == 4))
    assert create_mask(noop_mask, 2, 3, 4, 5).numpy().all()
    got = create_mask(lambda s, b, h, qi, ki: lucid.where(qi >= ki, s, -np.inf), 1, 2, 4, 5)
    assert got.shape == (1, 2, 4, 5)
    np.testing.assert_array_equal(got.numpy()[0, 1], m >= n)
    with pytest.raises(RuntimeError, match="or_masks: all inputs should be callable"):
        or_masks(causal, 3)
    with pytest.raises(AssertionError, match="create_block_mask: requires a mask_mod"):
        create_block_mask(lambda s, b, h, qi, ki: s, 1, 1, 4, 4)
    with pytest.raises(AssertionError, match="Expected 4 or 5 positional args, got 2"):
        create_mask(lambda a, b: a, 1, 1, 4, 4)
    with pytest.warns(DeprecationWarning, match="_compile is deprecated"):
        create_block_mask(causal, 1, 1, 4, 4, _compile=True)


def test_input_errors():
    rng = np.random.default_rng(14)
    q, k, v = (T(x) for x in qkv(rng, L=4, S=4))
    bm = create_block_mask(lambda b, h, qi, ki: qi >= ki, None, None, 8, 8, BLOCK_SIZE=4)
    with pytest.raises(ValueError, match="block_mask was created for .* larger length.*_adjust"):
        flex_attention(q, k, v, block_mask=bm)
    with pytest.raises(ValueError, match="block_mask was created for .* smaller length"):
        flex_attention(q, k, v, block_mask=bm._adjust(2, 2))
    with pytest.raises(NotImplementedError, match="flex_attention: NYI: query, key, and value must be 4D"):
        flex_attention(q[0], k[0], v[0])
    with pytest.raises(ValueError, match="flex_attention: .*same embedding dimension"):
        flex_attention(q, k[..., :2], v)
    with pytest.raises(ValueError, match="flex_attention: invalid BACKEND"):
        flex_attention(q, k, v, kernel_options={"BACKEND": "CUTLASS"})
    with pytest.raises(RuntimeError, match="flex_attention: score_mod returned shape"):
        flex_attention(q, k, v, score_mod=lambda s, b, h, qi, ki: s[..., :2])
    flex_attention(q, k, v, kernel_options={"BLOCK_M": 64, "BACKEND": "TRITON"})


def test_block_mask_fields_and_outputs_match_torch():
    torch = pytest.importorskip("torch")
    from torch.nn.attention import flex_attention as tfa

    docs_t, docs_l = torch.tensor(DOCS), T(DOCS)
    cases = {
        "causal": (lambda b, h, qi, ki: qi >= ki,) * 2,
        "sliding": (lambda b, h, qi, ki: (qi >= ki) & (qi - ki <= 3),) * 2,
        "document": (lambda b, h, qi, ki: docs_t[b, qi] == docs_t[b, ki],
                     lambda b, h, qi, ki: docs_l[b, qi] == docs_l[b, ki]),
    }
    rng = np.random.default_rng(15)
    q, k, v = qkv(rng, B=2, H=2, L=9, S=9)
    for name, (tm, lm) in cases.items():
        for bs in (2, (4, 2)):
            tb = tfa.create_block_mask(tm, 2, None, 9, 9, device="cpu", BLOCK_SIZE=bs)
            lb = create_block_mask(lm, 2, None, 9, 9, BLOCK_SIZE=bs)
            for f in FIELDS:
                np.testing.assert_array_equal(getattr(lb, f).numpy(), getattr(tb, f).numpy(), err_msg=name + f)
                assert getattr(lb, f).dtype == lucid.int32
            assert lb.shape == tuple(tb.shape) and lb.BLOCK_SIZE == tb.BLOCK_SIZE
            assert str(lb) == str(tb) and lb.sparsity() == pytest.approx(tb.sparsity())
            for f in ("kv_indices", "q_indices", "full_q_num_blocks"):
                np.testing.assert_array_equal(getattr(lb[1], f).numpy(), getattr(tb[1], f).numpy())
                np.testing.assert_array_equal(getattr(lb._adjust(5, 6), f).numpy(),
                                              getattr(tb._adjust(5, 6), f).numpy())
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            want, aux = tfa.flex_attention(*(torch.tensor(x) for x in (q, k, v)), block_mask=tb,
                                           score_mod=lambda s, b, h, qi, ki: s + 0.1 * h * (qi - ki),
                                           return_aux=tfa.AuxRequest(lse=True))
        got, laux = flex_attention(T(q), T(k), T(v), block_mask=lb, return_aux=AuxRequest(lse=True),
                                   score_mod=lambda s, b, h, qi, ki: s + 0.1 * h * (qi - ki))
        np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-10, atol=1e-13)
        np.testing.assert_allclose(laux.lse.numpy(), aux.lse.numpy(), rtol=1e-12)
