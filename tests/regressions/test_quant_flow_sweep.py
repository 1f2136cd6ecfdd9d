"""Regressions from the eager static-quantization flow sweep against PyTorch 2.13: functions on
quantized tensors (NOTE [Ops on quantized tensors]), quantized convolutions (NOTE [Static
quantized conv]), FloatFunctional / QFunctional, and prepare / convert on a small conv net.
Each test asserts the integers PyTorch's x86 kernels give; torch parity tests skip without torch."""
import warnings

import numpy as np
import pytest

import lucid
import lucid.nn as nn
import lucid.nn.functional as F
from lucid.ao.nn.quantized import Conv2d as QConv2d, FloatFunctional, QFunctional
from lucid.ao.quantization import DeQuantStub, QConfig, QuantStub, convert, fuse_modules, prepare


def q8(values, scale, zp, dtype=lucid.quint8):
    return lucid.quantize_per_tensor(lucid.tensor(values, dtype=lucid.float32), scale, zp, dtype)


# ------------------------------------------------------------------ functions on quantized tensors


def test_relu_and_clamp_keep_the_quantizer():
    q = q8([-1.0, -0.2, 0.3, 2.0], 0.1, 10)
    r = F.relu(q)
    assert r.int_repr().tolist() == [10, 10, 13, 30] and (r.q_scale(), r.q_zero_point()) == (0.1, 10)
    assert q.relu().int_repr().tolist() == [10, 10, 13, 30]
    assert lucid.clamp(q, -0.5, 0.25).int_repr().tolist() == [5, 8, 12, 12]
    assert F.relu6(q8([-1.0, 7.0, 3.0], 0.1, 10)).int_repr().tolist() == [10, 70, 40]


def test_max_pool_and_flatten_on_the_integers():
    q = q8(np.arange(16, dtype=np.float32).reshape(1, 1, 4, 4) * 0.1, 0.1, 3)
    p = F.max_pool2d(q, 2)
    assert p.int_repr().tolist() == [[[[8, 10], [16, 18]]]] and p.q_zero_point() == 3
    assert lucid.flatten(p, 1).shape == (1, 4)


def test_adaptive_avg_pool_rounds_the_stored_integers_half_to_even():
    # stored integers 1, 2 (mean 1.5) and 3, 4 (mean 3.5): PyTorch rounds the raw mean to even,
    # so an odd zero point does not flip the tie (2 and 4, not 1 and 3 + the zero point shift)
    q = lucid.quantize_per_tensor(lucid.tensor([[[[-2.0, -1.0, 0.0, 1.0]]]]), 1.0, 3, lucid.qint8)
    out = F.adaptive_avg_pool2d(q, (1, 2))
    assert out.int_repr().tolist() == [[[[2, 4]]]] and out.q_zero_point() == 3


def test_cat_requantizes_to_the_first_tensors_quantizer():
    a, b = q8([0.0, 1.0], 0.1, 0), q8([0.5, 1.5], 0.5, 2)
    c = lucid.cat([a, b])
    assert c.int_repr().tolist() == [0, 10, 5, 15] and (c.q_scale(), c.q_zero_point()) == (0.1, 0)


def test_max_min_sort_return_quantized_values():
    q = q8([[0.3, -0.1, 0.2]], 0.1, 5)
    assert lucid.max(q).int_repr().item() == 8
    v, i = lucid.min(q, 1)
    assert v.int_repr().tolist() == [4] and i.tolist() == [1]
    s = lucid.sort(q, 1, descending=True)
    assert s.values.int_repr().tolist() == [[8, 7, 4]] and s.indices.tolist() == [[0, 2, 1]]


def test_other_functions_still_refuse_quantized_tensors():
    with pytest.raises(NotImplementedError):
        lucid.exp(q8([1.0], 0.1, 0))


def test_functions_match_torch():
    torch = pytest.importorskip("torch")
    TF = torch.nn.functional
    rng = np.random.default_rng(0)
    cases = [(lambda m, F_, q: F_.relu(q)), (lambda m, F_, q: F_.hardtanh(q, -0.33, 0.71)),
             (lambda m, F_, q: m.clamp(q, min=-0.3)), (lambda m, F_, q: F_.max_pool2d(q, 3, 2, 1, ceil_mode=True)),
             (lambda m, F_, q: F_.adaptive_avg_pool2d(q, (3, 4))), (lambda m, F_, q: F_.adaptive_avg_pool2d(q, 1)),
             (lambda m, F_, q: m.cat([q, q], 1)), (lambda m, F_, q: m.max(q, 2)[0]),
             (lambda m, F_, q: m.sort(q, -1)[0])]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for ldt, tdt, zp in ((lucid.quint8, torch.quint8, 61), (lucid.qint8, torch.qint8, -3)):
            x = rng.standard_normal((2, 3, 7, 6)).astype(np.float32) * 2
            ql = lucid.quantize_per_tensor(lucid.tensor(x), 0.05, zp, ldt)
            qt = torch.quantize_per_tensor(torch.tensor(x), 0.05, zp, tdt)
            for f in cases:
                got, want = f(lucid, F, ql), f(torch, TF, qt)
                np.testing.assert_array_equal(got.int_repr().numpy(), want.int_repr().numpy())
                assert (got.q_scale(), got.q_zero_point()) == (want.q_scale(), want.q_zero_point())


# ------------------------------------------------------------------ quantized conv


def test_quantized_conv2d_requantizes_as_fbgemm():
    c = QConv2d(1, 1, 2, bias=True)
    w = lucid.quantize_per_tensor(lucid.tensor([[[[1.0, 2.0], [-1.0, 0.5]]]]), 0.5, 0, lucid.qint8)
    c.set_weight_bias(w, lucid.tensor([0.25]))
    c.scale, c.zero_point = 0.25, 3
    x = q8([[[[1.0, 2.0, 0.0], [0.5, 1.5, 1.0]]]], 0.5, 1)
    out = c(x)
    # windows: 1 + 4 - 0.5 + 0.75 = 5.25 and 2 + 0 - 1.5 + 0.5 = 1.0, plus the bias 0.25
    assert out.int_repr().tolist() == [[[[25, 8]]]] and (out.q_scale(), out.q_zero_point()) == (0.25, 3)
    assert set(c.state_dict()) == {"weight", "bias", "scale", "zero_point"}
    c2 = QConv2d(1, 1, 2)
    c2.load_state_dict(c.state_dict())
    assert c2(x).int_repr().tolist() == [[[[25, 8]]]]


def test_quantized_conv_matches_torch():
    torch = pytest.importorskip("torch")
    import torch.ao.nn.quantized as tnnq
    from lucid.ao.nn.quantized import Conv1d, Conv3d

    rng = np.random.default_rng(1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for lcls, tcls, shape, kw in ((Conv1d, tnnq.Conv1d, (2, 4, 9), dict(stride=2, padding=1)),
                                      (QConv2d, tnnq.Conv2d, (1, 4, 6, 5), dict(padding=1, dilation=2, groups=2)),
                                      (Conv3d, tnnq.Conv3d, (1, 4, 4, 4, 3), dict(padding=1))):
            tc = tcls(4, 6, 3, **kw)
            wf = torch.tensor(rng.standard_normal(tuple(tc.weight().shape)).astype(np.float32))
            b = torch.tensor(rng.standard_normal(6).astype(np.float32))
            tw = torch.quantize_per_channel(wf, torch.rand(6, generator=torch.Generator().manual_seed(0)) * 0.02 + 0.01,
                                            torch.zeros(6, dtype=torch.long), 0, torch.qint8)
            tc.set_weight_bias(tw, b)
            tc.scale, tc.zero_point = 0.07, 40
            lc = lcls(4, 6, 3, **kw)
            lw = lucid.quantize_per_channel(lucid.tensor(wf.numpy()), lucid.tensor(tw.q_per_channel_scales().numpy()),
                                            lucid.zeros(6, dtype=lucid.int64), 0, lucid.qint8)
            lc.set_weight_bias(lw, lucid.tensor(b.numpy()))
            lc.scale, lc.zero_point = 0.07, 40
            x = rng.standard_normal(shape).astype(np.float32)
            got = lc(lucid.quantize_per_tensor(lucid.tensor(x), 0.03, 70, lucid.quint8)).int_repr().numpy()
            want = tc(torch.quantize_per_tensor(torch.tensor(x), 0.03, 70, torch.quint8)).int_repr().numpy()
            np.testing.assert_array_equal(got, want)


# ------------------------------------------------------------------ FloatFunctional / QFunctional


def test_add_scalar_and_mul_scalar_pick_pytorchs_quantizers():
    qf = QFunctional()
    q = q8(np.linspace(-1, 2, 7), 0.05, 60)
    a = qf.add_scalar(q, 0.3)
    assert (a.q_scale(), a.q_zero_point()) == (0.05, 54) and a.int_repr().tolist() == [40, 50, 60, 70, 80, 90, 100]
    a = qf.add_scalar(q, 5.0)
    assert a.q_zero_point() == 0 and a.q_scale() == pytest.approx(0.05784313725490197)
    assert a.int_repr().tolist() == [69, 78, 86, 95, 104, 112, 121]
    a = qf.add_scalar(q, -15.0)  # PyTorch's scale to the last bit: 360 / 255 * 0.05
    assert (a.q_scale(), a.q_zero_point()) == (0.07058823529411766, 255)
    assert a.int_repr().tolist() == [28, 35, 43, 50, 57, 64, 71]
    m = qf.mul_scalar(q, -2.0)
    assert (m.q_scale(), m.q_zero_point()) == (0.1, 195) and m.int_repr().tolist()[:2] == [215, 205]
    assert qf.mul_scalar(q, 0.0).int_repr().tolist() == [0] * 7


def test_qfunctional_add_mul_cat():
    qf = QFunctional()
    qf.scale, qf.zero_point = 0.1, 2
    a, b = q8([0.5, -1.0], 0.5, 4), q8([0.25, 0.5], 0.25, 0)
    assert qf.add(a, b).int_repr().tolist() == [10, 0]
    assert qf.add_relu(a, b).int_repr().tolist() == [10, 2]
    assert qf.mul(a, b).int_repr().tolist() == [3, 0]
    assert qf.cat([a, b]).int_repr().tolist() == [7, 0, 4, 7]  # 0.25 / 0.1 + 2 = 4.5 rounds to even
    with pytest.raises(RuntimeError, match="FloatFunctional"):
        FloatFunctional()(lucid.ones(1))


# ------------------------------------------------------------------ the static flow on a conv net


def _net(lib, Q, FF):
    class Net(lib.nn.Module):
        def __init__(self):
            super().__init__()
            self.quant, self.dequant = Q.QuantStub(), Q.DeQuantStub()
            self.conv1, self.bn1, self.relu1 = lib.nn.Conv2d(3, 4, 3, padding=1), lib.nn.BatchNorm2d(4), lib.nn.ReLU()
            self.conv2, self.relu2 = lib.nn.Conv2d(4, 4, 3, padding=1), lib.nn.ReLU()
            self.add, self.pool, self.fc = FF(), lib.nn.AdaptiveAvgPool2d(1), lib.nn.Linear(4, 5)

        def forward(self, x):
            x = lib.nn.functional.max_pool2d(self.relu1(self.bn1(self.conv1(self.quant(x)))), 2)
            x = self.add.add(x, self.relu2(self.conv2(x)))
            return self.dequant(self.fc(lib.flatten(self.pool(x), 1)))
    return Net()


def test_static_flow_on_a_conv_net():
    m = _net(lucid, __import__("lucid.ao.quantization", fromlist=["x"]), FloatFunctional).eval()
    m = fuse_modules(m, [["conv1", "bn1", "relu1"], ["conv2", "relu2"]])
    m.qconfig = lucid.ao.quantization.get_default_qconfig("x86")
    p = prepare(m)
    x = lucid.randn(2, 3, 8, 8)
    p(x)
    c = convert(p)
    assert type(c.conv1).__name__ == "ConvReLU2d" and type(c.add).__name__ == "QFunctional"
    step = c.fc.scale
    assert float((c(x) - p(x)).abs().max()) < 6 * step  # a few requantizations off the float model


def test_static_flow_matches_torch():
    torch = pytest.importorskip("torch")
    import torch.ao.quantization as TQ
    from torch.ao.nn.quantized import FloatFunctional as TFF
    import lucid.ao.quantization as LQ

    rng = np.random.default_rng(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        tm, lm = _net(torch, TQ, TFF), _net(lucid, LQ, FloatFunctional)
        sd = {k: v.detach().numpy() for k, v in tm.state_dict().items()}
        sd["bn1.running_mean"] = rng.standard_normal(4).astype(np.float32) * 0.1
        sd["bn1.running_var"] = rng.uniform(0.5, 2, 4).astype(np.float32)
        tm.load_state_dict({k: torch.tensor(v) for k, v in sd.items()})
        lm.load_state_dict({k: lucid.tensor(v) for k, v in sd.items()})
        fuse = [["conv1", "bn1", "relu1"], ["conv2", "relu2"]]
        tm, lm = TQ.fuse_modules(tm.eval(), fuse), LQ.fuse_modules(lm.eval(), fuse)
        # MinMax activations: Lucid has no HistogramObserver yet (x86's default)
        tm.qconfig = TQ.QConfig(activation=TQ.MinMaxObserver.with_args(reduce_range=True),
                                weight=TQ.default_per_channel_weight_observer)
        lm.qconfig = QConfig(activation=LQ.MinMaxObserver.with_args(reduce_range=True),
                             weight=LQ.default_per_channel_weight_observer)
        tp, lp = TQ.prepare(tm), LQ.prepare(lm)
        for _ in range(3):
            d = rng.standard_normal((2, 3, 8, 8)).astype(np.float32)
            tp(torch.tensor(d)), lp(lucid.tensor(d))
        tc, lc = TQ.convert(tp), LQ.convert(lp)
        x = rng.standard_normal((2, 3, 8, 8)).astype(np.float32)
        assert lc.conv1.scale == pytest.approx(tc.conv1.scale, rel=1e-6)
        a = lc.conv1(lc.quant(lucid.tensor(x))).int_repr().numpy()
        b = tc.conv1(tc.quant(torch.tensor(x))).int_repr().numpy()
        assert (a == b).mean() > 0.99
        np.testing.assert_allclose(lc(lucid.tensor(x)).numpy(), tc(torch.tensor(x)).numpy(), atol=tc.fc.scale * 1.01)


def test_converted_model_loads_a_pytorch_state_dict(tmp_path):
    torch = pytest.importorskip("torch")
    import torch.ao.quantization as TQ
    from torch.ao.nn.quantized import FloatFunctional as TFF
    import lucid.ao.quantization as LQ

    rng = np.random.default_rng(5)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fuse = [["conv1", "bn1", "relu1"], ["conv2", "relu2"]]
        nets = []
        for lib, Q, FF in ((torch, TQ, TFF), (lucid, LQ, FloatFunctional)):
            m = Q.fuse_modules(_net(lib, Q, FF).eval(), fuse)
            m.qconfig = Q.get_default_qconfig("x86")
            p = Q.prepare(m)
            p(lib.tensor(rng.standard_normal((2, 3, 8, 8)).astype(np.float32)))
            nets.append(Q.convert(p))
        tc, lc = nets
        torch.save(tc.state_dict(), tmp_path / "q.pt")
        assert set(lc.state_dict()) == set(tc.state_dict())
        lc.load_state_dict(lucid.load(tmp_path / "q.pt"))
        x = rng.standard_normal((2, 3, 8, 8)).astype(np.float32)
        np.testing.assert_array_equal(lc(lucid.tensor(x)).numpy(), tc(torch.tensor(x)).numpy())


# ------------------------------------------------------------------ HistogramObserver


def test_histogram_observer_search_clips_the_tails():
    from lucid.ao.quantization import HistogramObserver

    obs = HistogramObserver(bins=128)
    obs(lucid.linspace(-1.0, 1.0, 2001) ** 5 * 10)
    scale, zp = obs.calculate_qparams()
    # MinMax would give 20 / 255 = 0.0784; the L2 search trims the sparse tails (PyTorch's numbers)
    assert zp.tolist() == [129] and float(scale[0]) == pytest.approx(0.07781862, rel=1e-6)
    assert type(lucid.ao.quantization.get_default_qconfig("x86").activation()).__name__ == "HistogramObserver"


def test_histogram_observer_matches_torch():
    torch = pytest.importorskip("torch")
    from torch.ao.quantization import HistogramObserver as T
    from lucid.ao.quantization import HistogramObserver as L

    rng = np.random.default_rng(0)
    cases = [([rng.standard_normal(1000)], {}),
             ([rng.standard_normal(1000) * s for s in (1, 2, 0.5, 3)], {}),
             ([rng.standard_normal((4, 8, 8)) + 1 for _ in range(3)], {"reduce_range": True}),
             ([rng.exponential(size=500) for _ in range(3)], {"bins": 256}),
             ([rng.standard_normal(300) * 2], {"dtype": "qint8", "qscheme": "per_tensor_symmetric"})]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for batches, kw in cases:
            tk = {k: getattr(torch, v) if isinstance(v, str) else v for k, v in kw.items()}
            lk = {k: getattr(lucid, v) if isinstance(v, str) else v for k, v in kw.items()}
            t, l_ = T(**tk), L(**lk)
            for b in batches:
                t(torch.tensor(b.astype(np.float32))), l_(lucid.tensor(b.astype(np.float32)))
            (ts, tz), (ls, lz) = t.calculate_qparams(), l_.calculate_qparams()
            assert ls.numpy().tolist() == ts.numpy().tolist() and lz.tolist() == tz.tolist()


# ------------------------------------------------------------------ FusedMovingAvgObsFakeQuantize


def test_fused_fake_quant_uses_choose_qparams():
    from lucid.ao.quantization import FusedMovingAvgObsFakeQuantize, MovingAverageMinMaxObserver

    fq = FusedMovingAvgObsFakeQuantize()
    x = lucid.tensor([-1.0, 0.3, 2.0], requires_grad=True)
    y = fq(x)
    # fbgemm's ChooseQuantizationParams: scale 3 / 255, zero point rint(1 / scale) = 85
    assert fq.zero_point.tolist() == [85] and float(fq.scale[0]) == pytest.approx(3 / 255, rel=1e-7)
    np.testing.assert_allclose(y.detach().numpy(), [-1.0, 26 * 3 / 255, 2.0], rtol=1e-6)
    y.sum().backward()
    assert x.grad.tolist() == [1.0, 1.0, 1.0]
    sym = FusedMovingAvgObsFakeQuantize(observer=MovingAverageMinMaxObserver, quant_min=-128, quant_max=127,
                                        dtype=lucid.qint8, qscheme=lucid.per_tensor_symmetric)
    sym(lucid.tensor([-1.0, 0.5]))
    # preserve_sparsity: the range widens to [-128, 127] * (1 / 128), zero point 0
    assert sym.zero_point.tolist() == [0] and float(sym.scale[0]) == pytest.approx(255 / 128 / 255, rel=1e-6)
    assert fq.fake_quant_enabled.dtype == lucid.int64


def test_fused_fake_quant_matches_torch():
    torch = pytest.importorskip("torch")
    import torch.ao.quantization as TQ
    import lucid.ao.quantization as LQ

    rng = np.random.default_rng(0)
    tcfgs = [dict(), dict(observer=TQ.MovingAverageMinMaxObserver, quant_min=0, quant_max=255, reduce_range=True),
             dict(observer=TQ.MovingAverageMinMaxObserver, quant_min=-128, quant_max=127, dtype=torch.qint8,
                  qscheme=torch.per_tensor_symmetric),
             dict(observer=TQ.MovingAveragePerChannelMinMaxObserver, quant_min=-128, quant_max=127, dtype=torch.qint8,
                  qscheme=torch.per_channel_symmetric, ch_axis=0)]

    def to_lucid(v):
        if isinstance(v, type):
            return getattr(LQ, v.__name__)
        if isinstance(v, torch.dtype) or type(v).__name__ == "qscheme":
            return getattr(lucid, str(v).split(".")[1])
        return v

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for cfg in tcfgs:
            t = TQ.FusedMovingAvgObsFakeQuantize(**cfg)
            l_ = LQ.FusedMovingAvgObsFakeQuantize(**{k: to_lucid(v) for k, v in cfg.items()})
            for i in range(3):
                x = (rng.standard_normal((3, 5)) * (i + 1) + 0.5 * i).astype(np.float32)
                np.testing.assert_array_equal(l_(lucid.tensor(x)).numpy(), t(torch.tensor(x)).detach().numpy())
                np.testing.assert_array_equal(l_.zero_point.numpy(), t.zero_point.numpy())
            assert sorted(l_.state_dict()) == sorted(t.state_dict())


# ------------------------------------------------------------------ QAT: fuse_modules_qat, ConvBn


def test_fuse_modules_qat_keeps_conv_and_bn():
    from lucid.ao.quantization import fuse_modules_qat
    from lucid.ao.quantization.fuse_modules import FusionError

    m = nn.Sequential(nn.Conv2d(1, 2, 3), nn.BatchNorm2d(2), nn.ReLU(), nn.Conv2d(2, 2, 1), nn.BatchNorm2d(2))
    f = fuse_modules_qat(m, [["0", "1", "2"], ["3", "4"]])
    assert [type(c).__name__ for c in f] == ["ConvBnReLU2d", "Identity", "Identity", "ConvBn2d", "Identity"]
    m[1].eval()
    with pytest.raises(AssertionError, match="same mode"):
        fuse_modules_qat(m, ["0", "1"])
    with pytest.raises(FusionError):
        fuse_modules(nn.Sequential(nn.Conv2d(1, 2, 3), nn.BatchNorm2d(2)).train(), ["0", "1"])


def test_qat_conv_bn_folds_running_stats_into_the_weight():
    from lucid.ao.nn.intrinsic.qat import ConvBn2d
    from lucid.ao.quantization import fuse_modules_qat, get_default_qat_qconfig

    lucid.manual_seed(0)
    m = fuse_modules_qat(nn.Sequential(nn.Conv2d(2, 3, 3, bias=True), nn.BatchNorm2d(3)), ["0", "1"])
    m[0].qconfig = get_default_qat_qconfig("x86")
    q = ConvBn2d.from_float(m[0])
    q.bn.running_var = lucid.tensor([0.5, 2.0, 4.0])
    q.bn.running_mean = lucid.tensor([0.1, -0.2, 0.3])
    q.freeze_bn_stats()
    q.weight_fake_quant.disable_fake_quant()
    x = lucid.randn(2, 2, 5, 5)
    # with the fake quantization off the approximate fold is exactly conv then (eval) batch norm
    want = nn.functional.batch_norm(nn.functional.conv2d(x, q.weight, q.bias), q.bn.running_mean,
                                    q.bn.running_var, q.bn.weight, q.bn.bias, False, 0.0, q.bn.eps)
    np.testing.assert_allclose(q(x).detach().numpy(), want.detach().numpy(), rtol=1e-5, atol=1e-6)
    q.train()
    assert not q.bn.training  # frozen stays frozen


def test_qat_flow_matches_torch():
    torch = pytest.importorskip("torch")
    import torch.ao.quantization as TQ
    from torch.ao.nn.quantized import FloatFunctional as TFF
    import lucid.ao.quantization as LQ

    def make(lib, Q, FF):
        class Net(lib.nn.Module):
            def __init__(self):
                super().__init__()
                self.quant, self.dequant = Q.QuantStub(), Q.DeQuantStub()
                self.conv1, self.bn1, self.relu1 = lib.nn.Conv2d(3, 4, 3, padding=1), lib.nn.BatchNorm2d(4), \
                    lib.nn.ReLU()
                self.conv2, self.bn2 = lib.nn.Conv2d(4, 4, 3, padding=1, bias=False), lib.nn.BatchNorm2d(4)
                self.add, self.pool, self.fc = FF(), lib.nn.AdaptiveAvgPool2d(1), lib.nn.Linear(4, 5)

            def forward(self, x):
                x = lib.nn.functional.max_pool2d(self.relu1(self.bn1(self.conv1(self.quant(x)))), 2)
                x = self.add.add_relu(x, self.bn2(self.conv2(x)))
                return self.dequant(self.fc(lib.flatten(self.pool(x), 1)))
        return Net()

    rng = np.random.default_rng(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        tm, lm = make(torch, TQ, TFF), make(lucid, LQ, FloatFunctional)
        lm.load_state_dict({k: lucid.tensor(v.detach().numpy()) for k, v in tm.state_dict().items()})
        fuse = [["conv1", "bn1", "relu1"], ["conv2", "bn2"]]
        tm, lm = TQ.fuse_modules_qat(tm.train(), fuse), LQ.fuse_modules_qat(lm.train(), fuse)
        tm.qconfig = TQ.QConfig(activation=TQ.default_fused_act_fake_quant.with_args(reduce_range=True),
                                weight=TQ.default_fused_per_channel_wt_fake_quant)
        lm.qconfig = LQ.QConfig(activation=LQ.default_fused_act_fake_quant.with_args(reduce_range=True),
                                weight=LQ.default_fused_per_channel_wt_fake_quant)
        tp, lp = TQ.prepare_qat(tm), LQ.prepare_qat(lm)
        assert type(lp.conv1).__name__ == "ConvBnReLU2d" and "activation_post_process" not in lp.conv1.bn._modules
        topt, lopt = torch.optim.SGD(tp.parameters(), lr=0.05), lucid.optim.SGD(lp.parameters(), lr=0.05)
        for _ in range(3):
            x, t = rng.standard_normal((4, 3, 8, 8)).astype(np.float32), rng.standard_normal((4, 5)).astype(np.float32)
            lt = ((tp(torch.tensor(x)) - torch.tensor(t)) ** 2).mean()
            ll = ((lp(lucid.tensor(x)) - lucid.tensor(t)) ** 2).mean()
            assert float(ll) == pytest.approx(float(lt), rel=1e-5)
            topt.zero_grad(), lt.backward(), topt.step(), lopt.zero_grad(), ll.backward(), lopt.step()
        tc, lc = TQ.convert(tp.eval()), LQ.convert(lp.eval())
        assert type(lc.conv1).__name__ == "ConvReLU2d" and type(lc.conv2).__name__ == "Conv2d"
        x = rng.standard_normal((2, 3, 8, 8)).astype(np.float32)
        a = lc.conv1(lc.quant(lucid.tensor(x))).int_repr().numpy()
        b = tc.conv1(tc.quant(torch.tensor(x))).int_repr().numpy()
        assert (a == b).mean() > 0.99
        np.testing.assert_allclose(lc(lucid.tensor(x)).numpy(), tc(torch.tensor(x)).numpy(), atol=tc.fc.scale * 1.01)


# ------------------------------------------------------------------ quantized activations and batch norm


def test_quantized_activations_requantize():
    from lucid.ao.nn.quantized import ELU, BatchNorm2d, Hardswish, LeakyReLU, ReLU6

    q = q8([-2.0, -0.5, 0.5, 4.0], 0.5, 8)
    assert ReLU6()(q).int_repr().tolist() == [8, 8, 9, 16]
    assert Hardswish(0.25, 4)(q).int_repr().tolist() == [3, 3, 5, 20]  # -1/3, -5/24, 7/24, 4
    assert LeakyReLU(0.25, 4, 0.5)(q).int_repr().tolist() == [0, 3, 6, 20]
    assert ELU(0.25, 4)(q).int_repr().tolist() == [1, 2, 6, 20]  # elu(-2) = -0.8647 -> -3.46 -> 1
    bn = BatchNorm2d(1)
    bn.running_mean, bn.running_var = lucid.tensor([1.0]), lucid.tensor([4.0 - 1e-5])
    bn.scale, bn.zero_point = 0.5, 8
    # (x - 1) / 2 / 0.5 + 8: 5, 6.5, 7.5, 11, ties to even as PyTorch
    assert bn(q.reshape(1, 1, 2, 2)).int_repr().reshape(-1).tolist() == [5, 6, 8, 11]
    assert set(bn.state_dict()) == {"weight", "bias", "running_mean", "running_var", "num_batches_tracked", "scale",
                                    "zero_point"}


def test_quantized_activations_match_torch():
    torch = pytest.importorskip("torch")
    import torch.ao.quantization as TQ
    import lucid.ao.quantization as LQ

    rng = np.random.default_rng(0)

    def build(lib, Q):
        n = lib.nn
        return n.Sequential(Q.QuantStub(), n.Conv2d(2, 3, 1), n.ReLU6(), n.Hardswish(), n.BatchNorm2d(3),
                            n.LeakyReLU(0.2), n.ELU(0.7), n.ReLU(), Q.DeQuantStub())

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        tm, lm = build(torch, TQ), build(lucid, LQ)
        sd = {k: v.detach().numpy() for k, v in tm.state_dict().items()}
        sd.update({"4.running_mean": rng.standard_normal(3).astype(np.float32),
                   "4.running_var": rng.uniform(0.5, 2, 3).astype(np.float32),
                   "4.weight": rng.uniform(0.5, 2, 3).astype(np.float32),
                   "4.bias": rng.standard_normal(3).astype(np.float32)})
        tm.load_state_dict({k: torch.tensor(v) for k, v in sd.items()})
        lm.load_state_dict({k: lucid.tensor(v) for k, v in sd.items()})
        tm.eval().qconfig, lm.eval().qconfig = TQ.get_default_qconfig("x86"), LQ.get_default_qconfig("x86")
        tp, lp = TQ.prepare(tm), LQ.prepare(lm)
        for _ in range(2):
            x = (rng.standard_normal((2, 2, 5, 5)) * 2).astype(np.float32)
            tp(torch.tensor(x)), lp(lucid.tensor(x))
        tc, lc = TQ.convert(tp), LQ.convert(lp)
        x = (rng.standard_normal((2, 2, 5, 5)) * 2).astype(np.float32)
        qt, ql = tc[0](torch.tensor(x)), lc[0](lucid.tensor(x))
        for i in range(1, 8):
            # each layer gets PyTorch's input (the observers' scales may differ in the last bit)
            ql_in = lucid.quantize_per_tensor(lucid.tensor(qt.dequantize().numpy()), qt.q_scale(), qt.q_zero_point(),
                                              lucid.quint8)
            qt, ql = tc[i](qt), lc[i](ql_in)
            got, want = ql.int_repr().numpy().astype(int), qt.int_repr().numpy().astype(int)
            assert (got == want).mean() > 0.97 and np.abs(got - want).max() <= 1, type(lc[i]).__name__
            assert ql.q_scale() == pytest.approx(qt.q_scale(), rel=1e-6) and ql.q_zero_point() == qt.q_zero_point()


def test_quantized_functional():
    import lucid.ao.nn.quantized.functional as qF

    x = q8([[[[1.0, 2.0, 0.0], [0.5, 1.5, 1.0]]]], 0.5, 1)
    w = lucid.quantize_per_tensor(lucid.tensor([[[[1.0, 2.0], [-1.0, 0.5]]]]), 0.5, 0, lucid.qint8)
    out = qF.conv2d(x, w, lucid.tensor([0.25]), scale=0.25, zero_point=3)
    assert out.int_repr().tolist() == [[[[25, 8]]]]
    assert qF.leaky_relu(q8([-1.0, 1.0], 0.1, 20), 0.5).int_repr().tolist() == [15, 30]
    assert qF.hardsigmoid(q8([-4.0, 0.0, 4.0], 0.1, 50)).int_repr().tolist() == [0, 128, 255]
