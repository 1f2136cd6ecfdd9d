"""Session 17 (opsF): PyTorch top-level functions Lucid lacked - quantized queries and kernels, the
SyncBatchNorm kernels, the integer-coded samplers, embedding_renorm_, slice_inverse, the sparse
accessor copies and sparse products. Closed forms first; PyTorch, where installed, as a further check."""
import numpy as np
import pytest

import lucid
import lucid.nn.functional as F


def _host(t):
    return np.asarray(t.detach().cpu().numpy())


def _torch():
    torch = pytest.importorskip("torch")
    import warnings

    warnings.filterwarnings("ignore", message=".*quantize.*deprecated")
    return torch


# ------------------------------------------------------------------ quantized queries
def test_quantized_queries_as_functions():
    q = lucid.quantize_per_tensor(lucid.tensor([1.0, 2.0]), 0.5, 3, lucid.quint8)
    assert lucid.q_scale(q) == 0.5 and lucid.q_zero_point(q) == 3
    np.testing.assert_array_equal(_host(lucid.int_repr(q)), [5, 7])
    pc = lucid.quantize_per_channel(lucid.ones(2, 3), lucid.tensor([0.25, 0.5], dtype=lucid.float64),
                                    lucid.tensor([0, 2]), 0, lucid.qint8)
    np.testing.assert_array_equal(_host(lucid.q_per_channel_scales(pc)), [0.25, 0.5])
    np.testing.assert_array_equal(_host(lucid.q_per_channel_zero_points(pc)), [0, 2])
    assert lucid.q_per_channel_axis(pc) == 0
    with pytest.raises(RuntimeError, match="q_scale: expected a quantized tensor"):
        lucid.q_scale(lucid.ones(2))


def test_empty_quantized_copies_the_quantizer():
    q = lucid.quantize_per_tensor(lucid.tensor([1.0]), 0.5, 3, lucid.quint8)
    e = lucid.empty_quantized([2, 3], q)
    assert tuple(e.shape) == (2, 3) and e.dtype == lucid.quint8 and (e.q_scale(), e.q_zero_point()) == (0.5, 3)
    pc = lucid.quantize_per_channel(lucid.ones(3, 2), lucid.tensor([0.25, 0.5], dtype=lucid.float64),
                                    lucid.tensor([0, 2]), 1, lucid.qint8)
    e = lucid.empty_quantized((4, 2), pc)
    assert e.qscheme() == lucid.per_channel_affine and e.q_per_channel_axis() == 1
    np.testing.assert_array_equal(_host(e.q_per_channel_scales()), [0.25, 0.5])


@pytest.mark.parametrize("n", [1, 2, 3])
def test_quantized_max_pool_is_exact(n):
    rng = np.random.default_rng(n)
    x = rng.standard_normal((2,) + (4,) * n).astype(np.float32)
    q = lucid.quantize_per_tensor(lucid.tensor(x), 0.05, 60, lucid.quint8)
    out = getattr(lucid, f"quantized_max_pool{n}d")(q, [2] * n)
    want = getattr(F, f"max_pool{n}d")(q.dequantize(), 2)
    assert (out.q_scale(), out.q_zero_point(), out.dtype) == (0.05, 60, lucid.quint8)
    np.testing.assert_array_equal(_host(out.dequantize()), _host(want))


def test_quantized_max_pool_matches_torch():
    torch = _torch()
    x = np.random.default_rng(0).standard_normal((1, 2, 5, 5)).astype(np.float32)
    got = lucid.quantized_max_pool2d(lucid.quantize_per_tensor(lucid.tensor(x), 0.1, 10, lucid.quint8), [2, 2], [1, 1],
                                     [1, 1], ceil_mode=True)
    want = torch.quantized_max_pool2d(torch.quantize_per_tensor(torch.tensor(x), 0.1, 10, torch.quint8), [2, 2],
                                      [1, 1], [1, 1], ceil_mode=True)
    np.testing.assert_array_equal(_host(got.int_repr()), want.int_repr().numpy())


def test_quantized_batch_norm_closed_form_and_torch():
    rng = np.random.default_rng(1)
    x = rng.standard_normal((2, 3, 2, 2)).astype(np.float32)
    w, b = rng.random(3).astype(np.float32) + 0.5, rng.random(3).astype(np.float32)
    m, v = np.float32([0.1, -0.2, 0.3]), np.float32([0.5, 2.0, 1.0])
    q = lucid.quantize_per_tensor(lucid.tensor(x), 0.02, 128, lucid.quint8)
    out = lucid.quantized_batch_norm(q, lucid.tensor(w), lucid.tensor(b), lucid.tensor(m), lucid.tensor(v), 1e-5,
                                     0.05, 64)
    deq = _host(q.dequantize())
    ref = (deq - m.reshape(1, 3, 1, 1)) / np.sqrt(v.reshape(1, 3, 1, 1) + 1e-5) * w.reshape(1, 3, 1, 1) \
        + b.reshape(1, 3, 1, 1)
    want = np.clip(np.rint(ref / 0.05) + 64, 0, 255)
    assert np.abs(_host(out.int_repr()).astype(int) - want).max() <= 1  # float32 rounding at a tie
    torch = _torch()
    tq = torch.quantize_per_tensor(torch.tensor(x), 0.02, 128, torch.quint8)
    tout = torch.quantized_batch_norm(tq, torch.tensor(w), torch.tensor(b), torch.tensor(m), torch.tensor(v), 1e-5,
                                      0.05, 64)
    np.testing.assert_array_equal(_host(out.int_repr()), tout.int_repr().numpy())


# ------------------------------------------------------------------ fused observer + fake quant
def test_fused_moving_avg_obs_fake_quant_steps():
    x = np.array([[-1.0, 0.3, 2.0], [0.5, -3.0, 1.0]], np.float32)
    lo, hi = lucid.tensor(float("inf")), lucid.tensor(float("-inf"))
    scale, zp = lucid.tensor([1.0]), lucid.tensor([0], dtype=lucid.int32)
    on, off = lucid.tensor([1]), lucid.tensor([0])
    out = lucid.fused_moving_avg_obs_fake_quant(lucid.tensor(x), on, on, lo, hi, scale, zp, 0.01, 0, 255, 0)
    assert (lo.item(), hi.item()) == (-3.0, 2.0)  # the first step takes the data's range
    s = 5.0 / 255
    z = round(3.0 / s)
    assert abs(scale.item() - s) < 1e-7 and zp.item() == z
    np.testing.assert_allclose(_host(out), (np.clip(np.rint(x / s) + z, 0, 255) - z) * s, rtol=1e-6, atol=1e-6)
    # then a moving average by averaging_const; observer on, fake quant off: the qparams stay
    out = lucid.fused_moving_avg_obs_fake_quant(lucid.tensor(2 * x), on, off, lo, hi, scale, zp, 0.5, 0, 255, 0)
    np.testing.assert_allclose([lo.item(), hi.item()], [-4.5, 3.0])
    assert abs(scale.item() - s) < 1e-7
    np.testing.assert_array_equal(_host(out), 2 * x)


def test_fused_moving_avg_obs_fake_quant_gradient_is_straight_through():
    x = lucid.tensor([[-1.0, 0.3, 2.0]], requires_grad=True)
    lo, hi = lucid.tensor([-0.5]), lucid.tensor([1.0])  # a range narrower than the data: the ends clamp
    scale, zp = lucid.tensor([1.0]), lucid.tensor([0], dtype=lucid.int32)
    out = lucid.fused_moving_avg_obs_fake_quant(x, lucid.tensor([0]), lucid.tensor([1]), lo, hi, scale, zp, 0.01,
                                                0, 255, 0, True)
    out.sum().backward()
    np.testing.assert_array_equal(_host(x.grad), [[0.0, 1.0, 0.0]])


@pytest.mark.parametrize("per_row,symmetric,qmin,qmax", [(False, False, 0, 255), (True, True, -128, 127),
                                                         (True, False, 0, 15), (False, True, -128, 127)])
def test_fused_moving_avg_obs_fake_quant_matches_torch(per_row, symmetric, qmin, qmax):
    torch = _torch()
    x = np.array([[-1.0, 0.3, 2.0], [0.5, -3.0, 1.0]], np.float32)

    def run(lib):
        c = 2 if per_row else 1
        lo = lib.tensor([float("inf")] * c) if per_row else lib.tensor(float("inf"))
        hi = lib.tensor([float("-inf")] * c) if per_row else lib.tensor(float("-inf"))
        s, z = lib.tensor([1.0] * c), lib.zeros(c, dtype=lib.int32)
        seen = []
        for k, (ob, fq) in enumerate([(1, 1), (1, 1), (0, 1), (1, 0), (1, 1)]):
            o = lib.fused_moving_avg_obs_fake_quant(lib.tensor(x * (k + 1)), lib.tensor([ob]), lib.tensor([fq]), lo, hi,
                                                    s, z, 0.01, qmin, qmax, 0, per_row, symmetric)
            seen += [o.tolist(), lo.tolist(), hi.tolist(), s.tolist(), z.tolist()]
        return seen

    for a, b in zip(run(lucid), run(torch)):
        np.testing.assert_allclose(np.asarray(a, float), np.asarray(b, float), rtol=1e-6, atol=1e-6)


def test_choose_qparams_optimized_closed_form():
    # 2 bits over [0, 8]: 8 is an outlier; shrinking the top towards the bulk lowers the error
    hi, lo = lucid.choose_qparams_optimized(lucid.tensor([0.0, 0.5, 1.0, 8.0]), 4, 16, 0.5, 2)
    assert (lo.item(), hi.item()) == (0.5, 8.0)
    assert hi.dtype == lucid.float32 and tuple(hi.shape) == (1,)


@pytest.mark.parametrize("seed,n_bins,ratio,bits", [(0, 50, 0.16, 2), (1, 200, 0.5, 4), (2, 200, 0.5, 8),
                                                    (3, 64, 0.3, 4)])
def test_choose_qparams_optimized_matches_torch(seed, n_bins, ratio, bits):
    torch = _torch()
    x = np.random.default_rng(seed).standard_normal(150).astype(np.float32) * 3
    hi, lo = lucid.choose_qparams_optimized(lucid.tensor(x), 120, n_bins, ratio, bits)
    thi, tlo = torch.choose_qparams_optimized(torch.tensor(x), 120, n_bins, ratio, bits)
    np.testing.assert_allclose([lo.item(), hi.item()], [tlo.item(), thi.item()], rtol=1e-6)


# ------------------------------------------------------------------ SyncBatchNorm kernels
def _sync_batch_norm(chunks, weight, bias, running_mean, running_var, eps=1e-5, momentum=0.1):
    """SyncBatchNorm's forward over ranks ``chunks``, the way torch.nn.SyncBatchNorm composes it."""
    stats = [lucid.batch_norm_stats(c, eps) for c in chunks]
    counts = lucid.tensor([float(c.numel() // c.shape[1]) for c in chunks])
    mean, invstd = lucid.batch_norm_gather_stats_with_counts(
        chunks[0], lucid.stack([s[0] for s in stats]), lucid.stack([s[1] for s in stats]), running_mean, running_var,
        momentum, eps, counts)
    return [lucid.batch_norm_elemt(c, weight, bias, mean, invstd, eps) for c in chunks], mean, invstd


def test_sync_batch_norm_kernels_equal_batch_norm_on_the_whole_batch():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((7, 3, 4)) * 2 + 1
    w, b = rng.random(3) + 0.5, rng.standard_normal(3)
    rm, rv = lucid.zeros(3, dtype=lucid.float64), lucid.ones(3, dtype=lucid.float64)
    outs, mean, invstd = _sync_batch_norm([lucid.tensor(x[:4]), lucid.tensor(x[4:])], lucid.tensor(w),
                                          lucid.tensor(b), rm, rv)
    ref_rm, ref_rv = lucid.zeros(3, dtype=lucid.float64), lucid.ones(3, dtype=lucid.float64)
    ref = F.batch_norm(lucid.tensor(x), ref_rm, ref_rv, lucid.tensor(w), lucid.tensor(b), training=True)
    np.testing.assert_allclose(np.concatenate([_host(o) for o in outs]), _host(ref), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(_host(mean), x.mean((0, 2)), rtol=1e-12)
    np.testing.assert_allclose(_host(invstd), 1 / np.sqrt(x.var((0, 2)) + 1e-5), rtol=1e-12)
    np.testing.assert_allclose(_host(rm), _host(ref_rm), rtol=1e-12)
    np.testing.assert_allclose(_host(rv), _host(ref_rv), rtol=1e-12)  # unbiased variance in the running stats


def test_sync_batch_norm_backward_kernels_equal_autograd():
    rng = np.random.default_rng(1)
    x, dy = rng.standard_normal((6, 2, 3)), rng.standard_normal((6, 2, 3))
    w, b = rng.random(2) + 0.5, rng.standard_normal(2)
    xt, wt, bt = (lucid.tensor(v, requires_grad=True) for v in (x, w, b))
    F.batch_norm(xt, None, None, wt, bt, training=True).backward(lucid.tensor(dy))
    chunks, grads = (x[:2], x[2:]), (dy[:2], dy[2:])
    mean, invstd = lucid.tensor(x.mean((0, 2))), lucid.tensor(1 / np.sqrt(x.var((0, 2)) + 1e-5))
    reduced = [lucid.batch_norm_backward_reduce(lucid.tensor(g), lucid.tensor(c), mean, invstd, lucid.tensor(w),
                                                True, True, True) for c, g in zip(chunks, grads)]
    sum_dy = reduced[0].sum_dy + reduced[1].sum_dy  # the all-reduce
    sum_dy_xmu = reduced[0].sum_dy_xmu + reduced[1].sum_dy_xmu
    np.testing.assert_allclose(_host(reduced[0].grad_weight + reduced[1].grad_weight), _host(wt.grad), rtol=1e-10)
    np.testing.assert_allclose(_host(reduced[0].grad_bias + reduced[1].grad_bias), _host(bt.grad), rtol=1e-10)
    counts = lucid.tensor([c.shape[0] * c.shape[2] for c in chunks], dtype=lucid.int32)
    dx = [lucid.batch_norm_backward_elemt(lucid.tensor(g), lucid.tensor(c), mean, invstd, lucid.tensor(w), sum_dy,
                                          sum_dy_xmu, counts) for c, g in zip(chunks, grads)]
    np.testing.assert_allclose(np.concatenate([_host(d) for d in dx]), _host(xt.grad), rtol=1e-9, atol=1e-12)
    flags = lucid.batch_norm_backward_reduce(lucid.tensor(dy), lucid.tensor(x), mean, invstd, None, True, False, False)
    assert flags.grad_weight is None and flags.grad_bias is None and flags.sum_dy is not None


def test_batch_norm_stats_half_input_keeps_float32_statistics():
    x = lucid.randn(4, 2, 3).half()
    mean, invstd = lucid.batch_norm_stats(x, 1e-5)
    assert mean.dtype == lucid.float32 and invstd.dtype == lucid.float32
    assert lucid.batch_norm_elemt(x, None, None, mean, invstd, 1e-5).dtype == lucid.float16


def test_batch_norm_update_stats_closed_form_and_torch():
    rng = np.random.default_rng(2)
    x = rng.standard_normal((4, 3, 5)).astype(np.float32)
    rm, rv = lucid.zeros(3), lucid.ones(3)
    mean, var = lucid.batch_norm_update_stats(lucid.tensor(x), rm, rv, 0.1)
    np.testing.assert_allclose(_host(mean), x.mean((0, 2)), rtol=1e-5)
    np.testing.assert_allclose(_host(var), x.var((0, 2)), rtol=1e-5)
    np.testing.assert_allclose(_host(rm), 0.1 * x.mean((0, 2)), rtol=1e-5)
    np.testing.assert_allclose(_host(rv), 0.9 + 0.1 * x.var((0, 2), ddof=1), rtol=1e-5)
    torch = _torch()
    trm, trv = torch.zeros(3), torch.ones(3)
    tmean, tvar = torch.batch_norm_update_stats(torch.tensor(x), trm, trv, 0.1)
    for a, b in ((mean, tmean), (var, tvar), (rm, trm), (rv, trv)):
        np.testing.assert_allclose(_host(a), b.numpy(), rtol=1e-5, atol=1e-7)


# ------------------------------------------------------------------ samplers
@pytest.mark.parametrize("interp,pad", [(0, 0), (1, 1), (2, 2), (0, 2)])
def test_grid_sampler_codes(interp, pad):
    rng = np.random.default_rng(3)
    x, g = lucid.tensor(rng.standard_normal((1, 2, 4, 5))), lucid.tensor(rng.uniform(-1.2, 1.2, (1, 3, 2, 2)))
    modes, pads = ["bilinear", "nearest", "bicubic"], ["zeros", "border", "reflection"]
    want = F.grid_sample(x, g, mode=modes[interp], padding_mode=pads[pad], align_corners=False)
    for fn in (lucid.grid_sampler, lucid.grid_sampler_2d):
        np.testing.assert_array_equal(_host(fn(x, g, interp, pad, False)), _host(want))
    torch = pytest.importorskip("torch")
    ref = torch.grid_sampler(torch.tensor(_host(x)), torch.tensor(_host(g)), interp, pad, False)
    np.testing.assert_allclose(_host(want), ref.numpy(), rtol=1e-10, atol=1e-12)


def test_grid_sampler_3d_and_errors():
    x, g = lucid.ones(1, 1, 2, 2, 2), lucid.zeros(1, 1, 1, 1, 3)
    assert lucid.grid_sampler_3d(x, g, 0, 0, True).item() == 1.0
    with pytest.raises(RuntimeError, match="grid_sampler_2d: expected a 4-D input"):
        lucid.grid_sampler_2d(x, g, 0, 0, True)
    with pytest.raises(RuntimeError, match="interpolation_mode"):
        lucid.grid_sampler(x, g, 3, 0, True)


def test_affine_grid_generator():
    theta = lucid.tensor([[[0.5, 0.0, 0.1], [0.0, 2.0, -0.2]]], dtype=lucid.float64)
    got = lucid.affine_grid_generator(theta, [1, 1, 2, 3], False)
    np.testing.assert_array_equal(_host(got), _host(F.affine_grid(theta, [1, 1, 2, 3], align_corners=False)))
    torch = pytest.importorskip("torch")
    ref = torch.affine_grid_generator(torch.tensor(_host(theta)), [1, 1, 2, 3], False)
    np.testing.assert_allclose(_host(got), ref.numpy(), rtol=1e-12)


# ------------------------------------------------------------------ embedding_renorm_
def test_embedding_renorm_closed_form():
    w = lucid.tensor([[3.0, 4.0], [0.3, 0.4], [6.0, 8.0]], dtype=lucid.float64)
    out = lucid.embedding_renorm_(w, lucid.tensor([0, 0, 1]), 1.0, 2.0)
    assert out is w
    # row 0 (norm 5) once to norm 1 (a repeated index is not renormed twice); row 1 (0.5) and the
    # unnamed row 2 stay
    np.testing.assert_allclose(_host(w), [[3 / (5 + 1e-7), 4 / (5 + 1e-7)], [0.3, 0.4], [6.0, 8.0]], rtol=1e-12)
    w1 = lucid.tensor([[3.0, -4.0]], dtype=lucid.float64)
    lucid.embedding_renorm_(w1, lucid.tensor([0]), 2.0, 1.0)  # the 1-norm: 7 -> 2
    np.testing.assert_allclose(_host(w1), [[6 / (7 + 1e-7), -8 / (7 + 1e-7)]], rtol=1e-12)


# ------------------------------------------------------------------ slice_inverse and accessor copies
def test_slice_inverse_is_a_view_of_the_base_memory():
    x = lucid.arange(12.0).reshape(3, 4)
    v = x[:, 1:3]
    back = lucid.slice_inverse(v, x, 1, 1, 3, 1)
    np.testing.assert_array_equal(_host(back), _host(x))
    back[0, 0] = 100.0
    assert x[0, 0].item() == 100.0  # the same memory
    np.testing.assert_array_equal(_host(lucid.slice_inverse(x[:, ::2], x, 1, None, None, 2)), _host(x))
    np.testing.assert_array_equal(_host(x[1:].slice_inverse(x, axis=0, start=1)), _host(x))  # the method, NumPy's name


def test_sparse_accessor_copies():
    d = lucid.tensor([[0.0, 1.0, 0.0], [2.0, 0.0, 3.0]])
    coo, csr, csc = d.to_sparse(), d.to_sparse_csr(), d.to_sparse_csc()
    np.testing.assert_array_equal(_host(lucid.indices_copy(coo)), [[0, 1, 1], [1, 0, 2]])
    np.testing.assert_array_equal(_host(lucid.values_copy(coo)), [1.0, 2.0, 3.0])
    np.testing.assert_array_equal(_host(lucid.crow_indices_copy(csr)), [0, 1, 3])
    np.testing.assert_array_equal(_host(lucid.col_indices_copy(csr)), [1, 0, 2])
    np.testing.assert_array_equal(_host(lucid.values_copy(csr)), [1.0, 2.0, 3.0])
    np.testing.assert_array_equal(_host(lucid.ccol_indices_copy(csc)), [0, 1, 2, 3])
    np.testing.assert_array_equal(_host(lucid.row_indices_copy(csc)), [1, 0, 1])
    copy = lucid.values_copy(csr)
    copy[0] = 50.0
    assert csr.values()[0].item() == 1.0  # a copy, not the view
    with pytest.raises(RuntimeError, match="crow_indices_copy: expected a tensor of layout"):
        lucid.crow_indices_copy(coo)


# ------------------------------------------------------------------ sparse products
def test_sspaddmm_saddmm_dsmm_hsmm():
    a = lucid.tensor([[1.0, 0.0, 2.0], [0.0, 0.0, 0.0], [0.0, 3.0, 0.0]])
    m2 = lucid.tensor([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]])
    s, inp = a.to_sparse(), lucid.tensor([[0.0, 1.0], [0.0, 0.0], [2.0, 0.0]]).to_sparse()
    dense = _host(a) @ _host(m2)
    out = lucid.sspaddmm(inp, s, m2, beta=2, alpha=3)
    assert out.layout == lucid.sparse_coo and not out.is_coalesced()
    assert out._nnz() == 2 + 2 * 2  # input's entries, then the product's rows where ``a`` has entries (PyTorch's)
    np.testing.assert_allclose(_host(out.to_dense()), 2 * _host(inp.to_dense()) + 3 * dense)
    np.testing.assert_allclose(_host(lucid.saddmm(inp, s, m2).to_dense()), _host(inp.to_dense()) + dense)
    np.testing.assert_allclose(_host(inp.sspaddmm(s, m2).to_dense()), _host(inp.to_dense()) + dense)
    np.testing.assert_allclose(_host(lucid.dsmm(s, m2)), dense)
    h = lucid.hsmm(s, m2)
    assert (h.sparse_dim(), h.dense_dim()) == (1, 1)
    np.testing.assert_array_equal(_host(h.indices()), [[0, 2]])  # the rows where ``a`` has entries
    np.testing.assert_allclose(_host(h.to_dense()), dense)


def test_sparse_products_match_torch():
    torch = _torch()
    a = np.array([[1.0, 0.0, 2.0], [0.0, 0.0, 0.0], [0.0, 3.0, 0.0]], np.float32)
    m2 = np.arange(6.0, dtype=np.float32).reshape(3, 2)
    ts, ls = torch.tensor(a).to_sparse(), lucid.tensor(a).to_sparse()
    want = torch.sspaddmm(ts, ts, torch.tensor(np.eye(3, dtype=np.float32)), beta=0.5, alpha=2)
    got = lucid.sspaddmm(ls, ls, lucid.eye(3), beta=0.5, alpha=2)
    np.testing.assert_allclose(_host(got.to_dense()), want.to_dense().numpy())
    assert got._nnz() == want._nnz()
    np.testing.assert_allclose(_host(lucid.hsmm(ls, lucid.tensor(m2)).to_dense()),
                               torch.hsmm(ts, torch.tensor(m2)).to_dense().numpy())
    np.testing.assert_allclose(_host(lucid.dsmm(ls, lucid.tensor(m2))), torch.dsmm(ts, torch.tensor(m2)).numpy())
