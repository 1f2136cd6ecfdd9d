"""lucid/ops/private_aten.py and private_aten_more.py: PyTorch's private ``torch._*`` functions.

Closed forms and finite differences in float64 first; PyTorch, where installed, as a reference
(imported inside each test so the closed-form asserts run without it). The functions are
compositions, so the checks of grad / jvp / vmap below confirm the rules come through.
"""
import math
import warnings

import numpy as np
import pytest

import lucid
import lucid.func as F
import lucid.nn.functional as NF

D = lucid.float64


def _a(t):
    return np.asarray(t.detach().cpu().numpy())


def _r(*shape, seed=0):
    lucid.manual_seed(seed)
    return lucid.randn(*shape, dtype=D)


def _tt(t):
    import torch

    return torch.tensor(_a(t))


def _fd_grad(f, x, eps=1e-6):
    """Central finite-difference gradient of the scalar ``f`` at ``x`` (float64)."""
    base = _a(x).copy()
    g = np.zeros_like(base)
    for i in np.ndindex(base.shape):
        for s in (1, -1):
            b = base.copy()
            b[i] += s * eps
            g[i] += s * f(lucid.tensor(b, device=x.device)).item() / (2 * eps)
    return g


# ------------------------------------------------------------------ softmax family


def test_softmax_backward_helpers_equal_autograd_and_differentiate_again():
    x, g = _r(2, 3), _r(2, 3, seed=1)
    for fwd, bwd, priv in ((lucid.softmax, lucid._softmax_backward_data, lucid._softmax),
                           (lucid.log_softmax, lucid._log_softmax_backward_data, lucid._log_softmax)):
        y = priv(x, 1, False)
        np.testing.assert_allclose(_a(y), _a(fwd(x, 1)), rtol=1e-12)
        expected = F.vjp(lambda t: fwd(t, 1), x)[1](g)[0]
        got = bwd(g, y, 1, D)
        np.testing.assert_allclose(_a(got), _a(expected), rtol=1e-10, atol=1e-12)
        # differentiable again: d/dg <bwd(g, y), 1> by finite differences
        got_g = lucid.autograd.grad(bwd(g.requires_grad_(), y, 1, D).sum(), [g])[0]
        np.testing.assert_allclose(_a(got_g), _fd_grad(lambda t: bwd(t, y, 1, D).sum(), g), atol=1e-6)
        g = g.detach()
    half = lucid._softmax(lucid.zeros(2, dtype=lucid.float16), 0, True)
    assert half.dtype == lucid.float32 and _a(half).tolist() == [0.5, 0.5]
    with pytest.raises(RuntimeError, match="^_softmax: conversion is supported for Half type only"):
        lucid._softmax(lucid.zeros(2), 0, True)
    with pytest.raises(RuntimeError, match=r"^_softmax_backward_data: grad_output of shape \(2,\) does not match"):
        lucid._softmax_backward_data(lucid.zeros(2), lucid.zeros(3), 0, lucid.float32)


def test_softmax_helpers_match_torch():
    torch = pytest.importorskip("torch")
    x, g = _r(3, 4), _r(3, 4, seed=1)
    y, ly = lucid._softmax(x, 0, False), lucid._log_softmax(x, 0, False)
    tx, tg = _tt(x), _tt(g)
    np.testing.assert_allclose(_a(lucid._softmax_backward_data(g, y, 0, D)),
                               torch._softmax_backward_data(tg, torch._softmax(tx, 0, False), 0, torch.float64).numpy(),
                               rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(_a(lucid._log_softmax_backward_data(g, ly, 0, lucid.float32)),
                               torch._log_softmax_backward_data(tg, torch._log_softmax(tx, 0, False), 0,
                                                                torch.float32).numpy(), rtol=1e-6)
    m = lucid.tensor([[True, False, False, True], [True, True, True, True], [False] * 4])
    np.testing.assert_allclose(_a(lucid._masked_softmax(x, m)),
                               torch._masked_softmax(tx, torch.tensor(_a(m))).numpy(), rtol=1e-10, equal_nan=True)
    xi = lucid.where(m, -math.inf, x)
    np.testing.assert_allclose(_a(lucid._safe_softmax(xi, 1)), torch._safe_softmax(_tt(xi), 1).numpy(), rtol=1e-10)


def test_safe_and_masked_softmax_closed_forms_and_grads():
    inf = math.inf
    x = lucid.tensor([[0.0, math.log(3.0)], [-inf, -inf]], dtype=D, requires_grad=True)
    y = lucid._safe_softmax(x, 1)
    np.testing.assert_allclose(_a(y), [[0.25, 0.75], [0.0, 0.0]])
    (gx,) = lucid.autograd.grad((y * lucid.tensor([[1.0, 0.0], [1.0, 1.0]], dtype=D)).sum(), [x])
    np.testing.assert_allclose(_a(gx), [[0.1875, -0.1875], [0.0, 0.0]])  # p(1-p) on the live row, 0 on the dead one
    assert lucid._safe_softmax(lucid.zeros(2, dtype=lucid.float32), 0, lucid.float64).dtype == D
    z = lucid.zeros(2, 1, 3, 3, dtype=D)
    kpm = lucid.tensor([[False, False, True], [True, True, True]])
    out = lucid._masked_softmax(z, kpm, 3, 1)
    np.testing.assert_allclose(_a(out)[0, 0], [[0.5, 0.5, 0.0]] * 3)
    assert np.isnan(_a(out)[1]).all()  # every key masked: nan, as PyTorch's CPU kernel
    with pytest.raises(RuntimeError, match=r"^_masked_softmax: for mask_type == 1 the mask shape should be \(B, L\)"):
        lucid._masked_softmax(z, kpm.t(), 3, 1)
    with pytest.raises(RuntimeError, match="^_masked_softmax: expected a bool mask"):
        lucid._masked_softmax(z, lucid.zeros(3), 3)


# ------------------------------------------------------------------ batch norm, dropout


def test_native_batch_norm_legit_forms():
    x = lucid.tensor([[1.0, 2.0], [3.0, 6.0]], dtype=D)
    rm, rv = lucid.zeros(2, dtype=D), lucid.ones(2, dtype=D)
    out, mean, rstd = lucid._native_batch_norm_legit(x, None, None, rm, rv, True, 0.5, 0.0)
    np.testing.assert_allclose(_a(out), [[-1.0, -1.0], [1.0, 1.0]])
    np.testing.assert_allclose(_a(mean), [2.0, 4.0])
    np.testing.assert_allclose(_a(rstd), [1.0, 0.5])
    np.testing.assert_allclose(_a(rm), [1.0, 2.0])  # 0.5 * 0 + 0.5 * mean
    np.testing.assert_allclose(_a(rv), [1.5, 4.5])  # 0.5 * 1 + 0.5 * unbiased var (2, 8)
    out2, m2, r2 = lucid._native_batch_norm_legit(x, lucid.tensor([2.0, 1.0], dtype=D), None, True, 0.1, 0.0)
    np.testing.assert_allclose(_a(out2), [[-2.0, -1.0], [2.0, 1.0]])
    ev = lucid._native_batch_norm_legit_no_training(x, None, lucid.ones(2, dtype=D), rm, rv, 0.1, 0.0)
    np.testing.assert_allclose(_a(ev[0]), (_a(x) - [1.0, 2.0]) / np.sqrt([1.5, 4.5]) + 1)
    assert ev[1].shape == (0,) and ev[2].shape == (0,)
    res = lucid._batch_norm_impl_index(x, None, None, None, None, True, 0.1, 0.0, False)
    assert res[3].dtype == lucid.uint8 and res[3].shape == (0,) and res[4] == 0
    np.testing.assert_allclose(_a(res[1]), [2.0, 4.0])
    with pytest.raises(RuntimeError, match="^_native_batch_norm_legit: evaluation mode needs running_mean"):
        lucid._native_batch_norm_legit(x, None, None, False, 0.1, 1e-5)
    kw = lucid._native_batch_norm_legit(x, None, None, training=True, momentum=0.1, eps=0.0)
    np.testing.assert_allclose(_a(kw[0]), [[-1.0, -1.0], [1.0, 1.0]])
    # only out is differentiable; its gradient is batch norm's
    xg = x.detach().requires_grad_()
    g = lucid.autograd.grad((lucid._native_batch_norm_legit(xg, None, None, True, 0.1, 1e-5)[0] * x).sum(), [xg])[0]
    np.testing.assert_allclose(_a(g), _fd_grad(
        lambda t: (lucid._native_batch_norm_legit(t, None, None, True, 0.1, 1e-5)[0] * x).sum(), xg), atol=1e-5)


def test_native_batch_norm_legit_matches_torch():
    torch = pytest.importorskip("torch")
    x, w, b = _r(4, 3, 2), _r(3, seed=1), _r(3, seed=2)
    rm, rv = lucid.zeros(3, dtype=D), lucid.ones(3, dtype=D)
    trm, trv = torch.zeros(3, dtype=torch.float64), torch.ones(3, dtype=torch.float64)
    ours = lucid._native_batch_norm_legit(x, w, b, rm, rv, True, 0.1, 1e-5)
    theirs = torch._native_batch_norm_legit(_tt(x), _tt(w), _tt(b), trm, trv, True, 0.1, 1e-5)
    for o, t in zip(ours, theirs):
        np.testing.assert_allclose(_a(o), t.numpy(), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(_a(rv), trv.numpy(), rtol=1e-12)
    np.testing.assert_allclose(_a(lucid._native_batch_norm_legit_no_training(x, w, b, rm, rv, 0.1, 1e-5)[0]),
                               torch._native_batch_norm_legit_no_training(_tt(x), _tt(w), _tt(b), trm, trv, 0.1,
                                                                          1e-5)[0].numpy(), rtol=1e-10)


def test_dropout_helpers():
    g = lucid.tensor([1.0, 2.0, 3.0], dtype=D)
    mask = lucid.tensor([True, False, True])
    np.testing.assert_allclose(_a(lucid.native_dropout_backward(g, mask, 2.0)), [2.0, 0.0, 6.0])
    np.testing.assert_allclose(_a(lucid._masked_scale(g, mask, 0.5)), [0.5, 0.0, 1.5])
    out, keep = lucid._fused_dropout(g, 1.0)
    assert keep.dtype == lucid.uint8 and _a(keep).tolist() == [1, 1, 1]
    np.testing.assert_allclose(_a(out), _a(g))
    out, keep = lucid._fused_dropout(lucid.ones(4000, dtype=D), 0.25)
    k = _a(keep)
    np.testing.assert_allclose(_a(out), k * 4.0)  # kept elements scaled by 1 / p
    assert 0.2 < k.mean() < 0.3
    with pytest.raises(RuntimeError, match="^_fused_dropout: keep probability"):
        lucid._fused_dropout(g, 1.5)


# ------------------------------------------------------------------ fused element-wise ops


def test_fused_elementwise_closed_forms():
    x = lucid.tensor([1.0, -2.0], dtype=D)
    np.testing.assert_allclose(_a(lucid._add_relu(x, lucid.tensor([1.0, 1.0], dtype=D), alpha=2)), [3.0, 0.0])
    y = x.clone()
    assert lucid._add_relu_(y, 1.0) is y and _a(y).tolist() == [2.0, 0.0]
    a, m1, m2 = _r(2), _r(2, 3, seed=1), _r(3, 2, seed=2)
    pre = 2 * a + 3 * (m1 @ m2)
    np.testing.assert_allclose(_a(lucid._addmm_activation(a, m1, m2, beta=2, alpha=3)), np.maximum(_a(pre), 0))
    np.testing.assert_allclose(_a(lucid._addmm_activation(a, m1, m2, beta=2, alpha=3, use_gelu=True)),
                               _a(NF.gelu(pre)), rtol=1e-12)
    w = lucid.tensor([0.5], dtype=D, requires_grad=True)
    xp = lucid.tensor([[1.0, -2.0]], dtype=D, requires_grad=True)
    gx, gw = lucid.autograd.grad(lucid._prelu_kernel(xp, w).sum(), (xp, w))
    assert _a(gx).tolist() == [[1.0, 0.5]] and _a(gw).tolist() == [-2.0]
    i1, i2, i3 = _r(2, 3), _r(2, 4, seed=1), _r(2, 3, seed=2)
    np.testing.assert_allclose(_a(lucid._trilinear(i1, i2, i3, [2], [1], [2], [0])),
                               np.einsum("bi,bj,bi->ij", _a(i1), _a(i2), _a(i3)), rtol=1e-12)
    v, g = lucid.tensor([[3.0, 4.0], [6.0, 8.0]], dtype=D), lucid.tensor([[1.0], [2.0]], dtype=D)
    w, norms = lucid._weight_norm_interface(v, g)
    np.testing.assert_allclose(_a(w), [[0.6, 0.8], [1.2, 1.6]])
    np.testing.assert_allclose(_a(norms), [[5.0], [10.0]])
    np.testing.assert_allclose(_a(lucid._weight_norm(v, lucid.tensor(2.0, dtype=D), -1)), _a(v) * 2 / np.sqrt(125))
    out, rstd = lucid._fused_rms_norm(lucid.tensor([[3.0, 4.0]], dtype=D), [2], lucid.tensor([1.0, 2.0], dtype=D), 0.0)
    np.testing.assert_allclose(_a(rstd), [[1 / math.sqrt(12.5)]])
    np.testing.assert_allclose(_a(out), [[3 / math.sqrt(12.5), 8 / math.sqrt(12.5)]])
    with pytest.raises(RuntimeError, match=r"^_fused_rms_norm: normalized_shape \[3\] does not match"):
        lucid._fused_rms_norm(lucid.ones(2, 2), [3], None, None)


def test_euclidean_dist_value_grad_jvp_vmap():
    x1, x2 = _r(3, 2), _r(4, 2, seed=1)
    np.testing.assert_allclose(_a(lucid._euclidean_dist(x1, x2)), _a(lucid.cdist(x1, x2)), rtol=1e-10)
    np.testing.assert_allclose(_a(lucid._euclidean_dist(x1, x1)).diagonal(), [1e-15] * 3)  # sqrt of the 1e-30 floor
    w = _r(3, 4, seed=2)
    f = lambda t: (lucid._euclidean_dist(t, x2) * w).sum()  # noqa: E731
    np.testing.assert_allclose(_a(F.grad(f)(x1)), _fd_grad(f, x1), atol=1e-6)
    t = _r(3, 2, seed=3)
    _, tangent = F.jvp(lambda a: lucid._euclidean_dist(a, x2), (x1,), (t,))
    eps = 1e-6
    fd = (_a(lucid._euclidean_dist(x1 + eps * t, x2)) - _a(lucid._euclidean_dist(x1 - eps * t, x2))) / (2 * eps)
    np.testing.assert_allclose(_a(tangent), fd, atol=1e-6)
    batched = F.vmap(lucid._euclidean_dist, in_dims=(0, None))(_r(2, 3, 2, seed=4), x2)
    loop = [_a(lucid._euclidean_dist(b, x2)) for b in lucid.unbind(_r(2, 3, 2, seed=4))]
    np.testing.assert_allclose(_a(batched), np.stack(loop), rtol=1e-12)
    with pytest.raises(RuntimeError, match=r"^_euclidean_dist: expected x1 \(\.\.\., P, M\).*\(3, 2\) and \(4, 3\)"):
        lucid._euclidean_dist(x1, _r(4, 3))


def test_fused_ops_match_torch():
    torch = pytest.importorskip("torch")
    v, g = _r(3, 2), _r(3, 1, seed=1)
    for o, t in zip(lucid._weight_norm_interface(v, g, 0), torch._weight_norm_interface(_tt(v), _tt(g), 0)):
        np.testing.assert_allclose(_a(o), t.numpy(), rtol=1e-10)
    x, w = _r(2, 3), _r(3, seed=2)
    for o, t in zip(lucid._fused_rms_norm(x, [3], w, None), torch._fused_rms_norm(_tt(x), [3], _tt(w), None)):
        np.testing.assert_allclose(_a(o), t.numpy(), rtol=1e-10)
    i = _r(2, 3)
    np.testing.assert_allclose(_a(lucid._trilinear(i, i, i, [], [], [], [1])),
                               torch._trilinear(_tt(i), _tt(i), _tt(i), [], [], [], [1]).numpy(), rtol=1e-12)
    x1, x2 = _r(3, 2), _r(4, 2, seed=1)
    np.testing.assert_allclose(_a(lucid._euclidean_dist(x1, x2)), torch._euclidean_dist(_tt(x1), _tt(x2)).numpy(),
                               rtol=1e-10)


# ------------------------------------------------------------------ nn kernels


def test_convolution_and_pooling_wrappers():
    x, w, b = _r(1, 2, 5), _r(3, 2, 2, seed=1), _r(3, seed=2)
    ref = lucid.convolution(x, w, b, [2], [1], [1], False, [0], 1)
    out = lucid._convolution(x, w, b, [2], [1], [1], False, [0], 1, False, False, True)  # the 12-argument form
    np.testing.assert_allclose(_a(out), _a(ref), rtol=1e-12)
    same = lucid._convolution_mode(x, _r(3, 2, 3, seed=3), None, [1], "same", [1], 1)
    assert same.shape == (1, 3, 5)
    x2 = lucid.arange(16.0, dtype=D).reshape(1, 4, 4)
    np.testing.assert_allclose(_a(lucid._adaptive_avg_pool2d(x2, [2, 2])), [[[2.5, 4.5], [10.5, 12.5]]])
    assert lucid._adaptive_avg_pool3d(lucid.ones(1, 2, 2, 2), [1, 1, 1]).shape == (1, 1, 1, 1)
    w = lucid.arange(8.0, dtype=D).reshape(4, 2).requires_grad_()
    out, offset2bag, bag_size, _ = lucid._embedding_bag(w, lucid.tensor([0, 3, 3]), lucid.tensor([0, 1]), False, 1)
    np.testing.assert_allclose(_a(out), [[0, 1], [6, 7]])
    assert _a(offset2bag).tolist() == [0, 1, 1] and _a(bag_size).tolist() == [1, 2]
    (g,) = lucid.autograd.grad(out.sum(), [w])
    np.testing.assert_allclose(_a(g), [[1, 1], [0, 0], [0, 0], [1, 1]])  # the mean splits bag 1's gradient over 2 rows
    with pytest.raises(RuntimeError, match=r"^_convolution_mode: expected a 3-D, 4-D or 5-D weight, got shape \(2,\)"):
        lucid._convolution_mode(x, lucid.ones(2), None, [1], "same", [1], 1)


def test_attention_math_and_flash_closed_forms():
    q, k, v = _r(1, 2, 3, 4), _r(1, 2, 5, 4, seed=1), _r(1, 2, 5, 4, seed=2)
    out, attn = lucid._scaled_dot_product_attention_math(q, k, v)
    np.testing.assert_allclose(_a(out), _a(NF.scaled_dot_product_attention(q, k, v)), rtol=1e-10)
    np.testing.assert_allclose(_a(attn).sum(-1), np.ones((1, 2, 3)))
    o2, lse = lucid._scaled_dot_product_flash_attention_for_cpu(q, k, v, is_causal=True)
    s = _a(q) @ _a(k).swapaxes(-1, -2) / 2.0
    s = np.where(np.tril(np.ones((3, 5), bool)), s, -np.inf)
    np.testing.assert_allclose(_a(lse), np.log(np.exp(s).sum(-1)), rtol=1e-10)
    np.testing.assert_allclose(_a(o2), _a(NF.scaled_dot_product_attention(q, k, v, is_causal=True)), rtol=1e-10)
    keep = lucid.tensor([[True, False, True, True, True]] * 3)
    o_drop, dropped = lucid._scaled_dot_product_attention_math(q, k, v, dropout_p=0.5, dropout_mask=keep)
    np.testing.assert_allclose(_a(dropped), np.where(_a(keep), _a(attn), 0.0), rtol=1e-12)  # unscaled, as PyTorch's
    np.testing.assert_allclose(_a(o_drop), _a(dropped) @ _a(v) * 2, rtol=1e-12)
    # a fully masked row: zero output and weights, zero (finite) gradient
    mask = lucid.tensor([[-math.inf] * 5, [0.0] * 5, [0.0] * 5], dtype=D)
    qg = q.detach().requires_grad_()
    o3, a3 = lucid._scaled_dot_product_attention_math(qg, k, v, attn_mask=mask)
    o4, lse4 = lucid._scaled_dot_product_flash_attention_for_cpu(qg, k, v, attn_mask=mask)
    assert not _a(o3)[..., 0, :].any() and not _a(a3)[..., 0, :].any() and not _a(o4)[..., 0, :].any()
    assert not _a(lse4)[..., 0].any()
    (g,) = lucid.autograd.grad((o3 + o4).sum(), [qg])
    assert np.isfinite(_a(g)).all() and not _a(g)[..., 0, :].any()
    with pytest.raises(RuntimeError, match="^_scaled_dot_product_attention_math: Explicit attn_mask"):
        lucid._scaled_dot_product_attention_math(q, k, v, attn_mask=mask, is_causal=True)


def test_attention_matches_torch():
    torch = pytest.importorskip("torch")
    q, k, v = _r(1, 2, 3, 4), _r(1, 1, 5, 4, seed=1), _r(1, 1, 5, 4, seed=2)
    m = _r(3, 5, seed=3)
    ours = lucid._scaled_dot_product_attention_math(q, k, v, attn_mask=m, scale=0.3, enable_gqa=True)
    theirs = torch._scaled_dot_product_attention_math(_tt(q), _tt(k), _tt(v), attn_mask=_tt(m), scale=0.3,
                                                       enable_gqa=True)
    for o, t in zip(ours, theirs):
        np.testing.assert_allclose(_a(o), t.numpy(), rtol=1e-10)
    k2, v2 = _r(1, 2, 5, 4, seed=1), _r(1, 2, 5, 4, seed=2)
    keep = lucid.tensor([[True, False, True, True, False]] * 3)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # PyTorch: "Dropout mask should only be used for testing purposes"
        theirs = torch._scaled_dot_product_attention_math(_tt(q), _tt(k2), _tt(v2), dropout_p=0.4,
                                                           dropout_mask=torch.tensor(_a(keep)))
    for o, t in zip(lucid._scaled_dot_product_attention_math(q, k2, v2, dropout_p=0.4, dropout_mask=keep), theirs):
        np.testing.assert_allclose(_a(o), t.numpy(), rtol=1e-10)
    ours = lucid._scaled_dot_product_flash_attention_for_cpu(q, k2, v2, attn_mask=m)
    theirs = torch._scaled_dot_product_flash_attention_for_cpu(_tt(q), _tt(k2), _tt(v2), attn_mask=_tt(m))
    for o, t in zip(ours, theirs):
        np.testing.assert_allclose(_a(o), t.numpy(), rtol=1e-8)


def test_pack_and_pad_round_trip():
    x = lucid.arange(6.0, dtype=D).reshape(3, 2, 1).requires_grad_()
    lengths = lucid.tensor([3, 1], device="cpu")
    data, sizes = lucid._pack_padded_sequence(x, lengths, False)
    assert _a(data).ravel().tolist() == [0.0, 1.0, 2.0, 4.0] and _a(sizes).tolist() == [2, 1, 1]
    padded, lens = lucid._pad_packed_sequence(data, sizes, True, -1.0, 4)
    np.testing.assert_allclose(_a(padded)[..., 0], [[0, 2, 4, -1], [1, -1, -1, -1]])
    assert _a(lens).tolist() == [3, 1] and lens.dtype == lucid.int64
    (g,) = lucid.autograd.grad(padded.sum(), [x])
    np.testing.assert_allclose(_a(g)[..., 0], [[1, 1], [1, 0], [1, 0]])  # padding positions get no gradient
    with pytest.raises(RuntimeError, match="^_pack_padded_sequence: `lengths` array must be sorted"):
        lucid._pack_padded_sequence(x, [1, 3], False)
    with pytest.raises(RuntimeError, match="^_pad_packed_sequence: Expected total_length to be at least 3"):
        lucid._pad_packed_sequence(data, sizes, False, 0.0, 2)
    torch = pytest.importorskip("torch")
    td, ts = torch._pack_padded_sequence(_tt(x), torch.tensor([3, 1]), False)
    np.testing.assert_allclose(_a(data), td.numpy())
    tp, tl = torch._pad_packed_sequence(td, ts, True, -1.0, 4)
    np.testing.assert_allclose(_a(padded), tp.numpy())


# ------------------------------------------------------------------ views, copies, indexing


def test_views_and_copies():
    x = lucid.arange(6.0, dtype=D).reshape(2, 3).requires_grad_()
    y = lucid._to_copy(x, dtype=lucid.float32)
    assert y.dtype == lucid.float32 and y.requires_grad
    z = lucid._to_copy(x)
    z.detach().fill_(0.0)
    assert _a(x).sum() == 15.0  # a copy, never an alias
    (g,) = lucid.autograd.grad((lucid._unsafe_view(x, [3, 2]) * lucid.arange(6.0, dtype=D).reshape(3, 2)).sum(), [x])
    np.testing.assert_allclose(_a(g), _a(x))
    base = lucid.arange(6.0, dtype=D)
    np.testing.assert_allclose(_a(lucid._reshape_alias(base[1:], [2, 2], [1, 2])), [[1, 3], [2, 4]])
    assert lucid._reshape_from_tensor(base, lucid.tensor([3, 2])).shape == (3, 2)
    st = lucid._shape_as_tensor(x)
    assert st.device.type == "cpu" and st.dtype == lucid.int64 and _a(st).tolist() == [2, 3]
    assert _a(lucid._dim_arange(x, -1)).tolist() == [0, 1, 2]
    np.testing.assert_allclose(_a(lucid._neg_view(x)), -_a(x))
    c = lucid.tensor([1 + 2j, 3 - 1j])
    for fn in (lucid._conj, lucid._conj_copy, lucid._conj_physical):
        np.testing.assert_allclose(_a(fn(c)), np.conj(_a(c)))
    assert _a(lucid._efficientzerotensor(2, 3)).shape == (2, 3) and not lucid._is_zerotensor(x)
    np.testing.assert_allclose(_a(lucid._stack([x, x], 2))[..., 1], _a(x))


def test_chunk_cat_value_grad_vmap_and_torch():
    a, b = lucid.arange(6.0, dtype=D).reshape(2, 3), lucid.arange(4.0, dtype=D).reshape(2, 2)
    out = lucid._chunk_cat([a, b], 1, 2)
    np.testing.assert_allclose(_a(out), [[[0, 1, 0], [2, 0, 1]], [[3, 4, 2], [5, 0, 3]]])
    ag = a.detach().requires_grad_()
    (g,) = lucid.autograd.grad((lucid._chunk_cat([ag, b], 1, 2) * out).sum(), [ag])
    np.testing.assert_allclose(_a(g), _a(a))  # every element of a lands once; the padding takes nothing back
    xs = _r(3, 2, 3)
    batched = F.vmap(lambda t: lucid._chunk_cat([t, b[0]], 0, 2))(xs)
    loop = np.stack([_a(lucid._chunk_cat([t, b[0]], 0, 2)) for t in lucid.unbind(xs)])
    np.testing.assert_allclose(_a(batched), loop)
    with pytest.raises(RuntimeError, match="^_chunk_cat expects same sizes of 0,...,dim-1"):
        lucid._chunk_cat([a, lucid.ones(3, 2, dtype=D)], 1, 2)
    with pytest.raises(RuntimeError, match="^_chunk_cat expects positive num_chunks"):
        lucid._chunk_cat([a], 1, 0)
    torch = pytest.importorskip("torch")
    np.testing.assert_allclose(_a(lucid._chunk_cat([a, b], 0, 3)), torch._chunk_cat([_tt(a), _tt(b)], 0, 3).numpy())


def test_unsafe_indexing():
    s = lucid.arange(6.0, dtype=D).reshape(2, 3)
    idx = lucid.tensor([2, 0])
    np.testing.assert_allclose(_a(lucid._unsafe_index(s, [None, idx])), [[2, 0], [5, 3]])
    put = lucid._unsafe_index_put(lucid.zeros(2, 3, dtype=D), [None, lucid.tensor([1, 1])],
                                  lucid.tensor([[1.0, 2.0], [3.0, 4.0]], dtype=D), True)
    np.testing.assert_allclose(_a(put), [[0, 3, 0], [0, 7, 0]])
    put3 = lucid._unsafe_index_put(lucid.zeros(2, 3, 2, dtype=D), [lucid.tensor([1, 1]), None, lucid.tensor([0, 0])],
                                   lucid.ones(2, 3, dtype=D), True)
    expected = np.zeros((2, 3, 2))
    expected[1, :, 0] = 2
    np.testing.assert_allclose(_a(put3), expected)
    x = lucid.zeros(3, dtype=D)
    assert lucid._index_put_impl_(x, [lucid.tensor([0, 0, 2])], lucid.tensor(1.0, dtype=D), True) is x
    assert _a(x).tolist() == [2.0, 0.0, 1.0]
    # the masked pair are adjoint: <masked_index(s), u> == <s, masked_put(0, u)>
    mask = lucid.tensor([[True, False, True], [False, True, True]])
    ind = [lucid.tensor([[1], [0]]), lucid.tensor([0, 5, -7])]
    u = _r(2, 3, seed=4)
    got = lucid._unsafe_masked_index(s, mask, ind, -1.0)
    np.testing.assert_allclose(_a(got), [[3, -1, 3], [-1, 2, 0]])
    lhs = (lucid._unsafe_masked_index(s, mask, ind, 0.0) * u).sum()
    rhs = (s * lucid._unsafe_masked_index_put_accumulate(lucid.zeros(2, 3, dtype=D), mask, ind, u)).sum()
    assert abs(lhs.item() - rhs.item()) < 1e-12
    torch = pytest.importorskip("torch")
    ti = [torch.tensor(_a(i)) for i in ind]
    np.testing.assert_allclose(_a(got), torch._unsafe_masked_index(_tt(s), torch.tensor(_a(mask)), ti, -1.0).numpy())


# ------------------------------------------------------------------ reductions, linear algebra, casts


def test_reductions_and_unique():
    x = lucid.tensor([[1.0, -2.0], [3.0, 0.0]], dtype=D)
    mn, mx = lucid._aminmax(x)
    assert (mn.item(), mx.item()) == (-2.0, 3.0)
    mn, mx = lucid._aminmax(x, 1, True)
    assert _a(mn).tolist() == [[-2.0], [0.0]] and _a(mx).tolist() == [[1.0], [3.0]]
    np.testing.assert_allclose(_a(lucid._logcumsumexp(x, 1)), np.logaddexp.accumulate(_a(x), axis=1))
    c = lucid.tensor([[1.0, 0.0], [2.0, -1.0]], dtype=D)
    np.testing.assert_allclose(_a(lucid._compute_linear_combination(x, c)), [[1, -2], [-1, -4]])
    assert lucid._is_all_true(lucid.tensor([True, False])).item() is False
    assert lucid._is_any_true(lucid.tensor([True, False])).item() is True
    with pytest.raises(RuntimeError, match="^_is_all_true: expected a bool tensor"):
        lucid._is_all_true(lucid.tensor([1.0]))
    vals, inv, cnt = lucid._unique2(lucid.tensor([[3, 1], [3, 2]]), True, True, True)
    assert _a(vals).tolist() == [1, 2, 3] and _a(inv).tolist() == [[2, 0], [2, 1]] and _a(cnt).tolist() == [1, 1, 2]
    vals, inv = lucid._unique(lucid.tensor([3, 1, 3]))
    assert _a(vals).tolist() == [1, 3] and inv.shape == (0,) and inv.dtype == lucid.int64
    assert lucid._segment_reduce is lucid.segment_reduce


def test_linalg_helpers():
    A = lucid.tensor([[2.0, 1.0], [4.0, 3.0]], dtype=D)
    det = lucid._linalg_det(A)
    assert det.result.item() == pytest.approx(2.0) and det.pivots.dtype == lucid.int32
    P, Lo, U = lucid.lu_unpack(det.LU, det.pivots)
    np.testing.assert_allclose(_a(P @ Lo @ U), _a(A), atol=1e-12)
    sign, logabs, _, _ = lucid._linalg_slogdet(A)
    assert sign.item() == 1.0 and logabs.item() == pytest.approx(math.log(2.0))
    Ag = A.detach().requires_grad_()
    (g,) = lucid.autograd.grad(lucid._linalg_det(Ag).result, [Ag])
    np.testing.assert_allclose(_a(g), [[3.0, -4.0], [-1.0, 2.0]])  # the cofactor matrix
    S = lucid.tensor([[2.0, 1.0], [1.0, 2.0]], dtype=D)
    w, vecs = lucid._linalg_eigh(S, "L", False)
    np.testing.assert_allclose(_a(w), [1.0, 3.0])
    assert vecs.shape == (0,)
    U, s, Vh = lucid._linalg_svd(A)
    np.testing.assert_allclose(_a(U @ lucid.diag(s) @ Vh), _a(A), atol=1e-12)
    res = lucid._linalg_solve_ex(A, lucid.tensor([[1.0, 2.0]], dtype=D), left=False)
    np.testing.assert_allclose(_a(res.result @ A), [[1.0, 2.0]], atol=1e-12)
    assert res.info.item() == 0
    torch = pytest.importorskip("torch")
    for o, t in zip(lucid._linalg_solve_ex(A, lucid.tensor([[1.0], [2.0]], dtype=D)),
                    torch._linalg_solve_ex(_tt(A), torch.tensor([[1.0], [2.0]], dtype=torch.float64))):
        np.testing.assert_allclose(_a(o), t.numpy(), atol=1e-12)
    for o, t in zip(lucid._lu_with_info(A), torch.linalg.lu_factor_ex(_tt(A))):
        np.testing.assert_allclose(_a(o), t.numpy(), atol=1e-12)


def test_casts():
    x = lucid.tensor([1.7, -2.2], dtype=D)
    for name, dt in (("Byte", lucid.uint8), ("Char", lucid.int8), ("Double", lucid.float64),
                     ("Float", lucid.float32), ("Half", lucid.float16), ("Int", lucid.int32),
                     ("Long", lucid.int64), ("Short", lucid.int16)):
        y = getattr(lucid, f"_cast_{name}")(x if name != "Byte" else x.abs())
        assert y.dtype == dt
    assert _a(lucid._cast_Long(x)).tolist() == [1, -2]


# ------------------------------------------------------------------ random, forward AD, copies, checks


def test_standard_gamma_and_dirichlet():
    alpha = lucid.full((4000,), 3.0, dtype=D, requires_grad=True)
    x = lucid._standard_gamma(alpha)
    assert abs(_a(x).mean() - 3.0) < 0.15  # Gamma(3, 1) has mean 3, sd sqrt(3)/sqrt(4000) = 0.03 for the mean
    (g,) = lucid.autograd.grad(x.sum(), [alpha])
    np.testing.assert_allclose(_a(g), _a(lucid._standard_gamma_grad(alpha.detach(), x.detach())), rtol=1e-12)
    d = lucid._sample_dirichlet(lucid.tensor([[1.0, 2.0, 3.0]] * 500, dtype=D, requires_grad=True))
    np.testing.assert_allclose(_a(d).sum(-1), 1.0)
    assert not d.requires_grad and abs(_a(d)[:, 2].mean() - 0.5) < 0.05
    torch = pytest.importorskip("torch")
    a, xs = lucid.tensor([0.5, 1.5, 9.0], dtype=D), lucid.tensor([0.3, 2.0, 9.5], dtype=D)
    np.testing.assert_allclose(_a(lucid._standard_gamma_grad(a, xs)),
                               torch._standard_gamma_grad(_tt(a), _tt(xs)).numpy(), rtol=1e-6)


def test_dual_tensors():
    import lucid.autograd.forward_ad as fwAD

    with fwAD.dual_level() as level:
        y = lucid._make_dual(lucid.tensor([2.0], dtype=D), lucid.tensor([1.0], dtype=D), level).sin()
        primal, tangent = lucid._unpack_dual(y, level)
        np.testing.assert_allclose(_a(tangent), [math.cos(2.0)])
    primal, tangent = lucid._unpack_dual(lucid.tensor(1.0), 0)
    assert tangent is None and primal.item() == 1.0


def test_copies_between_tensors():
    dst = lucid.zeros(2, 2, dtype=D)
    assert lucid._copy_from(lucid.tensor([1.0, 2.0], dtype=D), dst) is dst
    assert _a(dst).tolist() == [[1.0, 2.0], [1.0, 2.0]]
    d2 = lucid.empty(0, dtype=D)
    assert lucid._copy_from_and_resize(lucid.tensor([3.0, 4.0], dtype=D), d2) is d2 and _a(d2).tolist() == [3.0, 4.0]
    out = lucid.zeros(2)
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        lucid._resize_output_(out, [3], out.device)
    assert out.shape == (3,) and any("was resized" in str(m.message) for m in w)
    assert [t.device.type for t in lucid._to_cpu([dst, d2])] == ["cpu", "cpu"]


def test_checks():
    lucid._check(True)
    for fn, err in ((lucid._check, RuntimeError), (lucid._check_index, IndexError), (lucid._check_value, ValueError),
                    (lucid._check_type, TypeError), (lucid._check_not_implemented, NotImplementedError)):
        with pytest.raises(err, match="^Expected cond to be True"):
            fn(False)
        with pytest.raises(err, match="^custom 3$"):
            fn(1 > 2, lambda: "custom 3")
    with pytest.raises(TypeError, match="^cond must be a bool, but got a Tensor"):
        lucid._check(lucid.tensor(True))
    with pytest.raises(TypeError, match="^message must be a callable"):
        lucid._check(False, "text")
    with pytest.raises(RuntimeError):
        lucid._check_is_size(5, max=4)
    lucid._check_tensor_all(lucid.tensor([True, True]))
    with pytest.raises(KeyError):
        lucid._check_tensor_all_with(KeyError, lucid.tensor([True, False]))
    with pytest.raises(TypeError, match="^cond tensor must have dtype torch.bool"):
        lucid._check_tensor_all(lucid.tensor([1.0]))
    lucid._assert_async(lucid.tensor(2))
    with pytest.raises(RuntimeError, match="^Expected Tensor with single nonzero value, but got zero$"):
        lucid._assert_async(lucid.tensor(0.0))


def test_sparse_index_conversions_and_amp_kernels():
    crow = lucid._convert_indices_from_coo_to_csr(lucid.tensor([0, 0, 2, 2, 2]), 4, out_int32=True)
    assert crow.dtype == lucid.int32 and _a(crow).tolist() == [0, 2, 2, 5, 5]
    coo = lucid._convert_indices_from_csr_to_coo(crow.long(), lucid.tensor([1, 3, 0, 1, 2]), transpose=True)
    assert _a(coo).tolist() == [[1, 3, 0, 1, 2], [0, 0, 2, 2, 2]]
    crows, cols = lucid.tensor([[0, 1, 2], [0, 2, 2]]), lucid.tensor([[1, 3], [0, 1]])
    batched = lucid._convert_indices_from_csr_to_coo(crows, cols)
    assert _a(batched).tolist() == [[0, 0, 1, 1], [0, 1, 0, 0], [1, 3, 0, 1]]
    grads, found = [lucid.tensor([2.0, 4.0]), lucid.tensor(6.0)], lucid.zeros(1)
    lucid._amp_foreach_non_finite_check_and_unscale_(grads, found, lucid.tensor([0.5]))
    assert _a(grads[0]).tolist() == [1.0, 2.0] and grads[1].item() == 3.0 and found.item() == 0.0
    lucid._amp_foreach_non_finite_check_and_unscale_([lucid.tensor([math.nan])], found, lucid.tensor([0.5]))
    assert found.item() == 1.0
    scale, tracker = lucid.tensor([4.0]), lucid.tensor([0], dtype=lucid.int32)
    seen = []
    for inf in (0.0, 0.0, 1.0, 0.0):  # interval 2: grow on the second clean step, back off on an inf
        lucid._amp_update_scale_(scale, tracker, lucid.tensor([inf]), 2.0, 0.5, 2)
        seen.append((scale.item(), tracker.item()))
    assert seen == [(4.0, 1), (8.0, 0), (4.0, 0), (4.0, 1)] and tracker.dtype == lucid.int32
    with pytest.raises(RuntimeError, match="^_amp_update_scale_: found_inf must be a one-element floating tensor"):
        lucid._amp_update_scale_(scale, tracker, lucid.zeros(2), 2.0, 0.5, 2)


# ------------------------------------------------------------------ transforms over the compositions


def test_vmap_and_jvp_through_the_compositions():
    g, y = _r(3, 2, 4), lucid.softmax(_r(3, 2, 4, seed=1), -1)
    batched = F.vmap(lambda a, b: lucid._softmax_backward_data(a, b, 1, D))(g, y)
    loop = np.stack([_a(lucid._softmax_backward_data(a, b, 1, D)) for a, b in zip(lucid.unbind(g), lucid.unbind(y))])
    np.testing.assert_allclose(_a(batched), loop, rtol=1e-12)
    x, m = _r(3, 2, 4), lucid.tensor([[False, True, False, False], [True, True, False, False]])
    batched = F.vmap(lambda t: lucid._masked_softmax(t, m), in_dims=0)(x)
    loop = np.stack([_a(lucid._masked_softmax(t, m)) for t in lucid.unbind(x)])
    np.testing.assert_allclose(_a(batched), loop, rtol=1e-12)
    xb = _r(4, 3)
    t = _r(4, 3, seed=5)
    f = lambda a: lucid._native_batch_norm_legit(a, None, None, True, 0.1, 1e-5)[0]  # noqa: E731
    _, tangent = F.jvp(f, (xb,), (t,))
    eps = 1e-6
    np.testing.assert_allclose(_a(tangent), (_a(f(xb + eps * t)) - _a(f(xb - eps * t))) / (2 * eps), atol=1e-6)


def test_masked_index_put_accumulate_keeps_an_integer_dtype():
    # masked-off values are zeros of the input's dtype, not a Python float (which promoted uint8)
    x = lucid.zeros(4, dtype=lucid.uint8)
    out = lucid._unsafe_masked_index_put_accumulate(
        x, lucid.tensor([True, False, True]), [lucid.tensor([1, 2, 1])], lucid.tensor([200, 7, 100], dtype=lucid.uint8))
    assert out.dtype == lucid.uint8
    assert out.tolist() == [0, (200 + 100) % 256, 0, 0]  # uint8 arithmetic wraps, as PyTorch's
