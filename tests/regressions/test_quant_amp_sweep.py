"""Regressions from the quantization / autocast differential sweep against PyTorch 2.13:
quantized ConvTranspose1d/2d/3d, weight-only quantized Embedding / EmbeddingBag, and the CPU
autocast list entry for pinverse. References are NumPy transcriptions of fbgemm's integer math;
the PyTorch parity tests skip without torch."""
import itertools

import numpy as np
import pytest

import lucid
import lucid.nn as nn
from lucid.ao.nn import quantized as nnq
from lucid.ao.quantization import (DeQuantStub, QConfig, QuantStub, convert, default_observer,
                                   default_per_channel_weight_observer, default_weight_observer,
                                   float_qparams_weight_only_qconfig, prepare, quantize_dynamic)

f32 = np.float32


def _lt(a):
    return lucid.tensor(np.asarray(a).copy())


# ------------------------------------------------------------------ quantized ConvTranspose


def _np_conv_transpose(x, w, stride, pad, opad, groups, dil):
    """Transposed convolution by scatter-add, float64, any number of spatial dims."""
    n, cin = x.shape[:2]
    spatial_in, k = x.shape[2:], w.shape[2:]
    cout_g = w.shape[1]
    out_sz = [(i - 1) * s - 2 * p + d * (kk - 1) + op + 1
              for i, s, p, d, kk, op in zip(spatial_in, stride, pad, dil, k, opad)]
    out = np.zeros((n, cout_g * groups, *out_sz))
    cin_g = cin // groups
    for ci in range(cin):
        g = ci // cin_g
        for pos in itertools.product(*[range(i) for i in spatial_in]):
            for kp in itertools.product(*[range(kk) for kk in k]):
                o = [pi * s - p + d * kk for pi, s, p, d, kk in zip(pos, stride, pad, dil, kp)]
                if all(0 <= oi < sz for oi, sz in zip(o, out_sz)):
                    idx = (slice(None), slice(g * cout_g, (g + 1) * cout_g), *o)
                    out[idx] += x[(slice(None), ci, *pos)][:, None] * w[(ci, slice(None), *kp)][None, :]
    return out


def _ref_qconvt(xq, xs, xz, wq, ws, wz, bias, os_, oz, stride, pad, opad, groups, dil):
    acc = _np_conv_transpose(xq.astype(np.float64) - xz, wq.astype(np.float64) - wz, stride, pad, opad, groups,
                             dil)
    act = f32(f32(ws) * f32(xs))
    shape = (1, -1) + (1,) * (acc.ndim - 2)
    raw = acc.astype(f32) if bias is None else acc.astype(f32) + (bias.astype(f32) / act).reshape(shape)
    r = np.rint((raw * f32(act / f32(os_))).astype(f32)).astype(np.float64) + oz
    return np.clip(r, 0, 255).astype(np.uint8)


CONVT_CASES = [  # N, in, out, kernel, stride, padding, output_padding, groups, bias, dilation
    (1, 4, 6, 3, 2, 1, 1, 2, True, 1),
    (2, 2, 3, 2, 1, 0, 0, 1, True, 1),
    (2, 2, 2, 3, 2, 1, 0, 1, False, 2),
    (3, 1, 2, 2, 2, 0, 1, 1, True, 1),
]


@pytest.mark.parametrize("case", CONVT_CASES)
def test_quantized_conv_transpose_flow_matches_integer_reference(case):
    N, ci, co, k, s, p, op, g, b, d = case
    lucid.manual_seed(0)
    conv = getattr(nn, f"ConvTranspose{N}d")(ci, co, k, s, p, op, g, b, d)
    m = nn.Sequential(QuantStub(), conv, DeQuantStub()).eval()
    m.qconfig = QConfig(activation=default_observer, weight=default_weight_observer)
    mp = prepare(m)
    x = lucid.randn(2, ci, *([3] * N)) * 2
    mp(x)
    mc = convert(mp)
    qc = mc[1]
    assert type(qc) is getattr(nnq, f"ConvTranspose{N}d")
    assert qc._get_name() == f"QuantizedConvTranspose{N}d"
    assert list(qc.state_dict()) == ["weight", "bias", "scale", "zero_point"]
    xq = mc[0](x)
    out = qc(xq)
    w = qc.weight()
    assert tuple(w.shape) == (ci, co // g, *conv.kernel_size) and w.qscheme() == lucid.per_tensor_affine
    tup = lambda v: (v,) * N if isinstance(v, int) else v  # noqa: E731
    want = _ref_qconvt(xq.int_repr().numpy(), xq.q_scale(), xq.q_zero_point(), w.int_repr().numpy(), w.q_scale(),
                       w.q_zero_point(), None if qc.bias() is None else qc.bias().numpy(), qc.scale,
                       qc.zero_point, tup(s), tup(p), tup(op), g, tup(d))
    np.testing.assert_array_equal(out.int_repr().numpy(), want)
    assert out.q_scale() == float(f32(qc.scale)) and out.q_zero_point() == qc.zero_point


def test_quantized_conv_transpose_module_api():
    m = nnq.ConvTranspose2d(2, 4, 3, stride=2, output_padding=1, groups=2, bias=False)
    assert repr(m) == ("QuantizedConvTranspose2d(2, 4, kernel_size=(3, 3), stride=(2, 2), scale=1.0, zero_point=0, "
                       "output_padding=(1, 1), groups=2, bias=False)")
    w = lucid.quantize_per_channel(lucid.randn(2, 2, 3, 3), lucid.tensor([0.1, 0.2]), lucid.tensor([0, 0]), 0,
                                   lucid.qint8)
    with pytest.raises(RuntimeError, match="Per Channel Quantization is currently disabled"):
        m.set_weight_bias(w, None)
    with pytest.raises(ValueError, match='Only "zeros" padding mode'):
        nnq.ConvTranspose1d(2, 2, 2, padding_mode="reflect")
    with pytest.raises(ValueError, match="out_channels must be divisible by groups"):
        nnq.ConvTranspose2d(2, 3, 2, groups=2)
    # a state dict round trip keeps the integers and the output qparams
    src = nnq.ConvTranspose1d(2, 3, 2)
    src.set_weight_bias(lucid.quantize_per_tensor(lucid.randn(2, 3, 2), 0.05, 0, lucid.qint8), lucid.randn(3))
    src.scale, src.zero_point = 0.25, 7
    dst = nnq.ConvTranspose1d(2, 3, 2)
    dst.load_state_dict(src.state_dict())
    np.testing.assert_array_equal(dst.weight().int_repr().numpy(), src.weight().int_repr().numpy())
    assert (dst.scale, dst.zero_point) == (0.25, 7)


def test_conv_transpose_per_channel_qconfig_is_refused_by_prepare():
    m = nn.Sequential(nn.ConvTranspose2d(2, 2, 2))
    m.qconfig = QConfig(activation=default_observer, weight=default_per_channel_weight_observer)
    with pytest.raises(AssertionError, match="Per channel weight observer is not supported yet"):
        prepare(m)


# ------------------------------------------------------------------ quantized embeddings


def _np_float_qparams(w):
    """float_qparams_weight_only_qconfig's observer and quantizer, transcribed."""
    lo, hi = w.min(axis=1).astype(f32), w.max(axis=1).astype(f32)
    scale = ((hi - lo) / f32(255)).astype(f32)
    scale = np.where(scale > np.finfo(f32).eps, scale, f32(1)).astype(f32)
    zp = (f32(-1) * lo / scale).astype(f32)
    inv = (f32(1) / scale).astype(f32)
    q = np.clip(np.rint((w * inv[:, None]).astype(f32) + zp[:, None]), 0, 255).astype(np.uint8)
    return q, scale, zp


def _np_rows(q, scale, zp):
    bias = (-(zp * scale)).astype(f32)
    return q, scale, bias


def _np_fma(a, b, c):
    return (np.float64(a) * np.float64(b) + np.float64(c)).astype(f32)


def _np_bag(q, scale, bias, idx, starts, ends, psw=None):
    out = np.zeros((len(starts), q.shape[1]), f32)
    for i, (s, e) in enumerate(zip(starts, ends)):
        acc = np.zeros(q.shape[1], f32)
        for j in range(s, e):
            r, wt = idx[j], f32(1) if psw is None else f32(psw[j])
            acc = _np_fma(f32(scale[r] * wt), q[r], (acc + f32(bias[r] * wt)).astype(f32))
        out[i] = acc
    return out


def _table(num=9, dim=5, seed=0):
    w = (np.random.default_rng(seed).standard_normal((num, dim)) * 3).astype(f32)
    w[2] = 1.5  # a constant row: scale 1, zero point -1.5
    return w


def test_quantize_dynamic_quint8_embedding_matches_reference():
    w = _table()
    emb = nn.Embedding(*w.shape)
    emb.weight.data = _lt(w)
    q = quantize_dynamic(nn.Sequential(emb), dtype=lucid.quint8)[0]
    assert type(q) is nnq.Embedding
    assert repr(q) == ("QuantizedEmbedding(num_embeddings=9, embedding_dim=5, dtype=lucid.quint8, "
                       "qscheme=lucid.per_channel_affine_float_qparams)")
    qi, scale, zp = _np_float_qparams(w)
    wq = q.weight()
    np.testing.assert_array_equal(wq.int_repr().numpy(), qi)
    np.testing.assert_array_equal(wq.q_per_channel_scales().numpy(), scale)
    np.testing.assert_array_equal(wq.q_per_channel_zero_points().numpy(), zp)
    np.testing.assert_array_equal(wq.dequantize().numpy(), ((qi - zp[:, None]) * scale[:, None]).astype(f32))
    idx = np.array([[3, 0, 8], [2, 2, 5]])
    qr, sr, br = _np_rows(qi, scale, zp)
    want = _np_fma(qr[idx], sr[idx][..., None], br[idx][..., None])
    np.testing.assert_array_equal(q(_lt(idx)).numpy(), want)
    np.testing.assert_array_equal(q(_lt(idx.astype(np.int32))).numpy(), want)
    assert list(q.state_dict()) == ["_packed_params.dtype", "_packed_params._packed_weight"]


@pytest.mark.parametrize("mode,last", [("sum", False), ("mean", True), ("max", False)])
def test_static_embedding_bag_sums_bags_as_fbgemm(mode, last):
    w = _table(seed=1)
    bag = nn.EmbeddingBag(*w.shape, mode=mode, include_last_offset=last)
    bag.weight.data = _lt(w)
    bag.qconfig = float_qparams_weight_only_qconfig
    q = convert(prepare(nn.Sequential(bag)))[0]
    assert type(q) is nnq.EmbeddingBag and q.mode == mode
    qr, sr, br = _np_rows(*_np_float_qparams(w))
    idx = np.array([4, 0, 8, 8, 2, 1, 7, 3])
    offs = [0, 3, 3, 6, 8] if last else [0, 3, 3, 6]
    starts, ends = (offs[:-1], offs[1:]) if last else (offs, offs[1:] + [len(idx)])
    psw = np.random.default_rng(2).standard_normal(len(idx)).astype(f32)
    # PyTorch's quantized EmbeddingBag always sums, whatever the mode
    np.testing.assert_array_equal(q(_lt(idx), _lt(offs)).numpy(), _np_bag(qr, sr, br, idx, starts, ends))
    np.testing.assert_array_equal(q(_lt(idx), _lt(offs), per_sample_weights=_lt(psw)).numpy(),
                                  _np_bag(qr, sr, br, idx, starts, ends, psw))
    idx2 = idx.reshape(2, 4)
    got2 = q(_lt(idx2)).numpy()
    s2 = [0, 4][:1] if last else [0, 4]
    np.testing.assert_array_equal(got2, _np_bag(qr, sr, br, idx, s2, [4, 8][:len(s2)]))


def test_quantized_embedding_errors_and_state_dict():
    q = nnq.EmbeddingBag(4, 2)
    with pytest.raises(RuntimeError, match="expects offsets to be set for 1D indices"):
        q(lucid.tensor([0, 1]))
    with pytest.raises(RuntimeError, match="out of bounds: 4, range 0 to 4"):
        q(lucid.tensor([1, 4]), lucid.tensor([0]))
    with pytest.raises(RuntimeError, match="Expect 32 or 64 bit indices"):
        nnq.Embedding(4, 2)(lucid.tensor([1.0]))
    with pytest.raises(RuntimeError, match="supports 1 or 2d indices, got 3"):
        nnq.Embedding(4, 2)(lucid.zeros(1, 1, 1, dtype=lucid.int64))
    with pytest.raises(NotImplementedError, match="Unsupported dtype"):
        nnq.Embedding(3, 2, dtype=lucid.qint8)
    with pytest.raises(RuntimeError, match="kPerChannelAffineFloatQParams"):
        q.set_weight(lucid.quantize_per_tensor(lucid.randn(4, 2), 0.1, 0, lucid.quint8))
    empty = q(lucid.tensor([0, 1], dtype=lucid.int64), lucid.tensor([0, 0, 2]))
    np.testing.assert_array_equal(empty[:2].numpy(), np.zeros((2, 2), f32))
    src = quantize_dynamic(nn.Sequential(nn.EmbeddingBag(6, 3)), {nn.EmbeddingBag}, dtype=lucid.quint8)
    dst = nn.Sequential(nnq.EmbeddingBag(6, 3))
    dst.load_state_dict(src.state_dict())
    np.testing.assert_array_equal(dst[0].weight().int_repr().numpy(), src[0].weight().int_repr().numpy())
    np.testing.assert_array_equal(dst[0].weight().q_per_channel_zero_points().numpy(),
                                  src[0].weight().q_per_channel_zero_points().numpy())


# ------------------------------------------------------------------ autocast


def test_cpu_autocast_runs_pinverse_in_float32():
    a = np.random.default_rng(3).standard_normal((3, 4)).astype(np.float16)
    with lucid.autocast("cpu", dtype=lucid.float16):  # the CPU's list, so a CPU tensor on every run
        out = lucid.pinverse(lucid.tensor(a, device="cpu"))
    assert out.dtype == lucid.float32
    np.testing.assert_allclose(out.numpy(), np.linalg.pinv(a.astype(f32)), rtol=1e-4, atol=1e-5)


# ------------------------------------------------------------------ PyTorch parity


def test_conv_transpose_parity_with_torch_fbgemm():
    torch = pytest.importorskip("torch")
    import warnings

    tq = torch.ao.quantization
    old = torch.backends.quantized.engine
    torch.backends.quantized.engine = "fbgemm"  # x86 sends some shapes to onednn, which disagrees
    try:
        for N, ci, co, k, s, p, op, g, b, d in CONVT_CASES:
            torch.manual_seed(1)
            tc = getattr(torch.nn, f"ConvTranspose{N}d")(ci, co, k, s, p, op, g, b, d)
            lc = getattr(nn, f"ConvTranspose{N}d")(ci, co, k, s, p, op, g, b, d)
            lc.weight.data = _lt(tc.weight.detach().numpy())
            if b:
                lc.bias.data = _lt(tc.bias.detach().numpy())
            x = torch.randn(2, ci, *([3] * N))
            xs, xz = 0.05, 120
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                tc.qconfig = tq.QConfig(activation=tq.default_observer, weight=tq.default_weight_observer)
                lc.qconfig = QConfig(activation=default_observer, weight=default_weight_observer)
                tc.activation_post_process = tq.default_observer()
                lc.activation_post_process = default_observer()
                tc.activation_post_process(tc(x))
                lc.activation_post_process(lucid.tensor(tc(x).detach().numpy()))  # same calibration data
                tqc = torch.ao.nn.quantized.__dict__[f"ConvTranspose{N}d"].from_float(tc)
                tout = tqc(torch.quantize_per_tensor(x, xs, xz, torch.quint8))
            lqc = getattr(nnq, f"ConvTranspose{N}d").from_float(lc)
            lout = lqc(lucid.quantize_per_tensor(_lt(x.numpy()), xs, xz, lucid.quint8))
            np.testing.assert_array_equal(lout.int_repr().numpy(), tout.int_repr().numpy())
            assert (lout.q_scale(), lout.q_zero_point()) == (tout.q_scale(), tout.q_zero_point())
    finally:
        torch.backends.quantized.engine = old


def test_embedding_bag_parity_with_torch():
    torch = pytest.importorskip("torch")
    import warnings

    w = _table(num=12, dim=7, seed=4)
    lm = nn.EmbeddingBag(12, 7)
    lm.weight.data = _lt(w)
    tm = torch.nn.EmbeddingBag(12, 7)
    tm.weight.data = torch.tensor(w)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        tq = torch.ao.quantization.quantize_dynamic(torch.nn.Sequential(tm), dtype=torch.quint8)[0]
    lq = quantize_dynamic(nn.Sequential(lm), dtype=lucid.quint8)[0]
    tw, lw = tq.weight(), lq.weight()
    np.testing.assert_array_equal(lw.int_repr().numpy(), tw.int_repr().numpy())
    np.testing.assert_array_equal(lw.q_per_channel_zero_points().numpy(), tw.q_per_channel_zero_points().numpy())
    idx = torch.randint(0, 12, (30,), generator=torch.Generator().manual_seed(5))
    offs = torch.tensor([0, 4, 4, 17])
    psw = torch.randn(30, generator=torch.Generator().manual_seed(6))
    np.testing.assert_array_equal(lq(_lt(idx.numpy()), _lt(offs.numpy()), per_sample_weights=_lt(psw.numpy())).numpy(),
                                  tq(idx, offs, per_sample_weights=psw).numpy())


def test_cpu_autocast_float32_region_warns_and_is_off():
    with pytest.warns(UserWarning, match="In CPU autocast, but the target dtype is not supported"):
        with lucid.autocast("cpu", dtype=lucid.float32):
            assert not lucid.is_autocast_enabled("cpu") and lucid.get_autocast_dtype("cpu") == lucid.float32


def test_grad_scaler_unscale_before_scale_is_an_assertion_error():
    w = lucid.ones(2, requires_grad=True)
    opt = lucid.optim.SGD([w], lr=0.1)
    with pytest.raises(AssertionError, match="Attempted unscale_ but the scale is None"):
        lucid.amp.GradScaler("cpu").unscale_(opt)


def test_fuse_conv_transpose_bn_folds_the_batch_norm():
    from lucid.ao.quantization import fuse_modules, fuse_modules_qat

    lucid.manual_seed(0)
    m = nn.Sequential(nn.ConvTranspose2d(2, 3, 2, stride=2), nn.BatchNorm2d(3))
    m[1].running_mean = lucid.tensor([0.5, -1.0, 0.25])
    m[1].running_var = lucid.tensor([2.0, 0.5, 1.5])
    m[1].weight.data = lucid.tensor([1.5, -0.5, 2.0])
    m[1].bias.data = lucid.tensor([0.1, 0.2, -0.3])
    with pytest.raises(AssertionError, match="Fusion only for eval"):
        fuse_modules(m, [["0", "1"]])
    with pytest.raises(AssertionError, match="not yet supported in QAT"):
        fuse_modules_qat(m, [["0", "1"]])
    m.eval()
    f = fuse_modules(m, [["0", "1"]])
    assert type(f[0]) is nn.ConvTranspose2d and type(f[1]) is nn.Identity
    x = lucid.randn(1, 2, 3, 3)
    w, b = m[0].weight.numpy(), m[0].bias.numpy()
    s = m[1].weight.numpy() / np.sqrt(m[1].running_var.numpy() + m[1].eps)
    np.testing.assert_allclose(f[0].weight.numpy(), w * s[None, :, None, None], rtol=1e-6)
    np.testing.assert_allclose(f[0].bias.numpy(), (b - m[1].running_mean.numpy()) * s + m[1].bias.numpy(),
                               rtol=1e-6)
    np.testing.assert_allclose(f(x).numpy(), m(x).numpy(), rtol=1e-5, atol=1e-6)
