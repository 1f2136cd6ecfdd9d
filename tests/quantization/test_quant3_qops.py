"""Quantized kernels for sigmoid/tanh/hardsigmoid (fixed output parameters), average pooling,
mean and bilinear interpolation (integer semantics of PyTorch's quantized CPU kernels), the
fixed-qparams observer / fake quantize, and FX graph mode quantization running those ops on
quantized tensors."""
import warnings

import numpy as np
import pytest

import lucid
import lucid.nn as nn
import lucid.nn.functional as F
from lucid.ao.quantization import (FixedQParamsFakeQuantize, FixedQParamsObserver, QConfigMapping, default_qconfig,
                                   default_fixed_qparams_range_0to1_observer,
                                   default_fixed_qparams_range_neg1to1_fake_quant, get_default_qconfig_mapping)
from lucid.ao.quantization.quantize_fx import convert_fx, prepare_fx

f32 = np.float32


def _q(x, zp=100, dtype="quint8", scale=0.05):
    return lucid.quantize_per_tensor(lucid.tensor(np.asarray(x, f32)), scale, zp, getattr(lucid, dtype))


def _ints(q):
    return q.int_repr().numpy().astype(np.int64)


def _x(shape, seed=0):
    return (np.random.default_rng(seed).normal(size=shape) * 2).astype(f32)


@pytest.mark.parametrize("dtype,zp", [("quint8", 100), ("qint8", -5)])
def test_fixed_qparams_activations(dtype, zp):
    q = _q(_x((3, 40)), zp, dtype)
    deq = q.dequantize().numpy()
    lo, hi = (0, 255) if dtype == "quint8" else (-128, 127)
    cases = {"sigmoid": (lucid.sigmoid, 1 / (1 + np.exp(-deq.astype(np.float64))), 1 / 256, 0 if lo == 0 else -128),
             "hardsigmoid": (F.hardsigmoid, np.clip(deq.astype(np.float64) / 6 + 0.5, 0, 1), 1 / 256,
                             0 if lo == 0 else -128),
             "tanh": (lucid.tanh, np.tanh(deq.astype(np.float64)), 2 / 256, 128 if lo == 0 else 0)}
    for name, (fn, ref, scale, out_zp) in cases.items():
        y = fn(q)
        assert (y.q_scale(), y.q_zero_point(), y.dtype) == (scale, out_zp, q.dtype), name
        want = np.clip(np.rint(ref.astype(f32).astype(np.float64) / scale) + out_zp, lo, hi)
        # only a float32 ulp of the activation may move a value sitting on a rounding edge
        assert np.abs(_ints(y) - want).max() <= 1 and (_ints(y) != want).mean() < 0.01, name
    np.testing.assert_array_equal(_ints(q.sigmoid()), _ints(lucid.sigmoid(q)))
    np.testing.assert_array_equal(_ints(nn.Tanh()(q)), _ints(lucid.tanh(q)))


def _avg_ref(ints, zp, k, s, p, include_pad, override=None):
    """PyTorch's quantized avg_pool2d on (H, W) integers: rint(sum(q - zp) * f32(1/div) + zp)."""
    H, W = ints.shape
    out = []
    for i in range(0, H + 2 * p - k + 1, s):
        row = []
        for j in range(0, W + 2 * p - k + 1, s):
            h0, w0 = i - p, j - p
            win = ints[max(h0, 0):min(h0 + k, H), max(w0, 0):min(w0 + k, W)]
            div = override or (k * k if include_pad else win.size)
            v = f32(f32(win.sum() - zp * win.size) * f32(1.0 / div)) + f32(zp)
            row.append(np.rint(v))
        out.append(row)
    return np.clip(np.array(out), 0, 255)


@pytest.mark.parametrize("zp", [100, 7])
def test_avg_pool_and_mean_integer_semantics(zp):
    q = _q(_x((1, 1, 7, 9)), zp)
    ints = _ints(q)[0, 0]
    for k, s, p, inc, ov in [(2, 2, 0, True, None), (3, 2, 1, True, None), (3, 2, 1, False, None),
                             (2, 1, 0, True, 3)]:
        y = F.avg_pool2d(q, k, s, p, count_include_pad=inc, divisor_override=ov)
        assert (y.q_scale(), y.q_zero_point()) == (q.q_scale(), q.q_zero_point())
        np.testing.assert_array_equal(_ints(y)[0, 0], _avg_ref(ints, zp, k, s, p, inc, ov))
    np.testing.assert_array_equal(_ints(nn.AvgPool2d(3, 2, 1)(q)), _ints(F.avg_pool2d(q, 3, 2, 1)))
    y1 = F.avg_pool1d(_q(_x((2, 9)), zp), 3, 2, 1, count_include_pad=False)
    assert tuple(y1.shape) == (2, 5)
    # the mean over innermost dims rounds the mean of the stored integers (ties to even)
    q4 = _q([[1.0, 1.05, 2.0, 2.05], [0.0, 0.05, 0.1, 0.1]], zp)
    np.testing.assert_array_equal(_ints(q4.mean(-1)), np.rint(_ints(q4).mean(-1)))
    np.testing.assert_array_equal(_ints(q4.mean()), np.rint(_ints(q4).mean()))
    y = lucid.mean(q4, 0)
    m = q4.dequantize().numpy().astype(np.float64).mean(0).astype(f32)  # then quantized as quantize_per_tensor
    want = np.rint((m.astype(np.float64) * np.float64(f32(1) / f32(0.05)) + zp).astype(f32))
    np.testing.assert_array_equal(_ints(y), want)


def test_bilinear_interpolate_integer_semantics():
    q = _q(_x((1, 2, 3, 4)), 7)
    ints = _ints(q).astype(f32)
    y = F.interpolate(q, size=(5, 6), mode="bilinear", align_corners=True)
    assert (y.q_scale(), y.q_zero_point(), tuple(y.shape)) == (0.05, 7, (1, 2, 5, 6))

    def table(n_in, n_out):
        src = (f32(n_in - 1) / f32(n_out - 1) * np.arange(n_out, dtype=f32)).astype(f32)
        lo = src.astype(np.int64)
        return lo, np.minimum(lo + 1, n_in - 1), (src - lo).astype(f32)

    h0, h1, hl = table(3, 5)
    w0, w1, wl = table(4, 6)
    ha, hb = (f32(1) - hl)[:, None], hl[:, None]
    wa, wb = f32(1) - wl, wl
    g = (lambda hs, ws: ints[..., hs, :][..., ws])
    ref = ha * (wa * g(h0, w0) + wb * g(h0, w1)) + hb * (wa * g(h1, w0) + wb * g(h1, w1))
    np.testing.assert_array_equal(_ints(y), np.clip(np.rint(ref), 0, 255))
    # nearest picks integers; a 2x bilinear upsample keeps exact grid points
    n = F.interpolate(q, scale_factor=2, mode="nearest")
    np.testing.assert_array_equal(_ints(n), np.repeat(np.repeat(_ints(q), 2, -1), 2, -2))
    with pytest.raises(NotImplementedError, match="4-D"):
        F.interpolate(_q(_x((1, 2, 5))), scale_factor=2, mode="bilinear")


def test_fixed_qparams_observer_and_fake_quantize():
    obs = default_fixed_qparams_range_0to1_observer()
    assert type(obs) is FixedQParamsObserver and repr(obs) == "FixedQParamsObserver()"
    x = lucid.tensor([0.3, 5.0])
    assert obs(x) is x
    scale, zp = obs.calculate_qparams()
    assert scale.tolist() == [1 / 256] and zp.tolist() == [0] and list(obs.state_dict()) == ["scale", "zero_point"]
    fq = default_fixed_qparams_range_neg1to1_fake_quant()
    assert type(fq) is FixedQParamsFakeQuantize
    np.testing.assert_array_equal(fq(lucid.tensor([-2.0, 0.3, 0.99, 1.0])).numpy(),
                                  np.array([-1.0, 0.296875, 0.9921875, 0.9921875], f32))
    assert fq.scale.tolist() == [2 / 256] and fq.zero_point.tolist() == [128]
    with pytest.raises(AssertionError, match="FixedQParamsObserver"):
        FixedQParamsFakeQuantize(observer=lucid.ao.quantization.MinMaxObserver)


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv, self.sig, self.pool, self.fc = nn.Conv2d(3, 4, 3), nn.Sigmoid(), nn.AvgPool2d(2), nn.Linear(4, 5)

    def forward(self, x):
        x = self.conv(x)
        x = lucid.sigmoid(x) + lucid.tanh(x) + F.hardsigmoid(x) + self.sig(x)
        x = F.avg_pool2d(self.pool(x), 3, 1, 1, count_include_pad=False)
        x = F.interpolate(F.interpolate(x, scale_factor=2), size=(9, 7), mode="bilinear", align_corners=True)
        return F.softmax(self.fc(x.mean(dim=(2, 3))), dim=-1)


def _calibrated(mapping, seed=0):
    lucid.manual_seed(seed)
    m = Net().eval()
    p = prepare_fx(m, mapping, (lucid.randn(1, 3, 10, 10),))
    p(lucid.randn(2, 3, 10, 10))
    return m, p


def test_fx_runs_fixed_and_shared_ops_on_quantized_tensors():
    m, p = _calibrated(get_default_qconfig_mapping("x86"))
    fixed = [type(mod).__name__ for name, mod in p.named_modules() if "activation_post_process" in name]
    assert fixed.count("FixedQParamsObserver") == 4
    c = convert_fx(p)
    code = c.code
    # one dequantize only: before the float softmax
    assert code.count(".dequantize()") == 1 and "softmax(dequantize" in code
    lucid.manual_seed(1)  # a fixed input: the bound below is for this draw, whatever ran before
    x = lucid.randn(2, 3, 10, 10)
    sig = c.conv(lucid.quantize_per_tensor(x, float(c.conv_input_scale_0), int(c.conv_input_zero_point_0),
                                           lucid.quint8))
    assert lucid.sigmoid(sig).q_scale() == 1 / 256
    assert np.abs(c(x).numpy() - m(x).numpy()).max() < 0.05
    # a qconfig without fixed parameters leaves sigmoid and friends in float (as PyTorch does)
    _, p2 = _calibrated(QConfigMapping().set_global(default_qconfig))
    assert not any(type(mod).__name__ == "FixedQParamsObserver" for mod in p2.modules())
    assert "sigmoid(dequantize" in convert_fx(p2).code


def test_kernels_and_fx_match_torch():
    torch = pytest.importorskip("torch")
    warnings.filterwarnings("ignore", category=UserWarning)
    TF = torch.nn.functional
    for dtype, zp in (("quint8", 100), ("qint8", -5)):
        x = _x((2, 3, 7, 9), 1)
        tq = torch.quantize_per_tensor(torch.from_numpy(x), 0.05, zp, getattr(torch, dtype))
        lq = _q(x, zp, dtype)
        pairs = [(torch.sigmoid(tq), lucid.sigmoid(lq)), (torch.tanh(tq), lucid.tanh(lq)),
                 (TF.hardsigmoid(tq), F.hardsigmoid(lq)), (tq.mean((2, 3)), lq.mean((2, 3))), (tq.mean(-1), lq.mean(-1)),
                 (TF.avg_pool2d(tq, 3, 2, 1, ceil_mode=True, count_include_pad=False),
                  F.avg_pool2d(lq, 3, 2, 1, ceil_mode=True, count_include_pad=False)),
                 (TF.avg_pool2d(tq, (2, 3), (1, 2), divisor_override=5), F.avg_pool2d(lq, (2, 3), (1, 2), divisor_override=5)),
                 (TF.avg_pool1d(tq[0], 3, 2, 1), F.avg_pool1d(lq[0], 3, 2, 1)),
                 (TF.avg_pool3d(tq[None], 2), F.avg_pool3d(lq[None], 2))]
        for kw in (dict(scale_factor=2, mode="bilinear"), dict(size=(5, 13), mode="bilinear", align_corners=True),
                   dict(scale_factor=1.7, mode="bilinear", recompute_scale_factor=True),
                   dict(scale_factor=(0.6, 2.3), mode="bilinear", align_corners=True),
                   dict(scale_factor=1.5, mode="nearest")):
            pairs.append((TF.interpolate(tq, **kw), F.interpolate(lq, **kw)))
        for t, lz in pairs:
            assert (t.q_scale(), t.q_zero_point()) == (lz.q_scale(), lz.q_zero_point())
            np.testing.assert_array_equal(_ints(lz), t.int_repr().numpy())
    # FX: the same model and weights quantize to the same outputs
    tq = torch.ao.quantization

    class T(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv, self.sig = torch.nn.Conv2d(3, 4, 3), torch.nn.Sigmoid()
            self.pool, self.fc = torch.nn.AvgPool2d(2), torch.nn.Linear(4, 5)

        def forward(self, x):
            x = self.conv(x)
            x = torch.sigmoid(x) + torch.tanh(x) + TF.hardsigmoid(x) + self.sig(x)
            x = TF.avg_pool2d(self.pool(x), 3, 1, 1, count_include_pad=False)
            x = TF.interpolate(TF.interpolate(x, scale_factor=2), size=(9, 7), mode="bilinear", align_corners=True)
            return TF.softmax(self.fc(x.mean(dim=(2, 3))), dim=-1)

    lm, t = Net().eval(), T().eval()
    t.load_state_dict({k: torch.from_numpy(v.numpy().copy()) for k, v in lm.state_dict().items()})
    xs = [_x((2, 3, 10, 10), s) for s in (2, 3)]
    from torch.ao.quantization.quantize_fx import convert_fx as tconvert, prepare_fx as tprepare

    tp = tprepare(t, tq.get_default_qconfig_mapping("x86"), (torch.from_numpy(xs[0]),))
    lp = prepare_fx(lm, get_default_qconfig_mapping("x86"), (lucid.tensor(xs[0]),))
    tp(torch.from_numpy(xs[0]))
    lp(lucid.tensor(xs[0]))
    tc, lc = tconvert(tp), convert_fx(lp)
    np.testing.assert_allclose(lc(lucid.tensor(xs[1])).numpy(), tc(torch.from_numpy(xs[1])).numpy(), atol=1e-6)
