"""Regressions from the quantization differential sweep against PyTorch 2.13 (quantized tensors,
fake quantization, qconfigs, fusion, eager static / QAT workflows). Each test asserts the values
PyTorch gives; the torch parity tests skip when torch is absent."""
import warnings

import numpy as np
import pytest

import lucid
import lucid.nn as nn
from lucid.ao.nn.quantized import Linear as QLinear
from lucid.ao.quantization import (DeQuantStub, QuantStub, convert, default_fake_quant,
                                   default_per_channel_weight_fake_quant, default_weight_fake_quant, fuse_modules,
                                   get_default_qat_qconfig, get_default_qconfig, prepare_qat)

NAN = float("nan")


# ------------------------------------------------------------------ NaN in the quantizers


@pytest.mark.parametrize("dtype, want", [(lucid.qint8, 127), (lucid.quint8, 255), (lucid.qint32, -2 ** 31)])
def test_per_tensor_nan_quantizes_as_pytorch(dtype, want):
    q = lucid.quantize_per_tensor(lucid.tensor([NAN, 0.25, NAN]), 0.1, 3, dtype)
    assert q.int_repr().tolist() == [want, 6, want]


@pytest.mark.parametrize("dtype, want", [(lucid.qint8, 0), (lucid.quint8, 0), (lucid.qint32, -2 ** 31)])
def test_per_channel_nan_quantizes_as_pytorch(dtype, want):
    x = lucid.tensor([[NAN, 1.0], [0.5, NAN]])
    q = lucid.quantize_per_channel(x, lucid.tensor([0.1, 0.5]), lucid.tensor([5, 2]), 0, dtype)
    assert q.int_repr().tolist() == [[want, 15], [3, want]]


@pytest.mark.parametrize("dtype", [lucid.qint8, lucid.quint8, lucid.qint32])
def test_per_channel_ties_round_after_adding_the_zero_point(dtype):
    # 0.25 / 0.1 and 0.5 / 0.2 are 2.5 in float32: PyTorch rounds 2.5 + zp, half to even
    x = lucid.tensor([[0.25, 0.35, -0.25], [0.5, 0.7, -0.5]])
    q = lucid.quantize_per_channel(x, lucid.tensor([0.1, 0.2]), lucid.tensor([1, 2]), 0, dtype)
    assert q.int_repr().tolist() == [[4, 4, -2 if dtype != lucid.quint8 else 0], [4, 6, 0]]


def test_nan_quantization_matches_torch():
    torch = pytest.importorskip("torch")
    x = np.array([[NAN, 1.0, -2.0], [0.5, NAN, 3.0]], np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for ld, td in ((lucid.qint8, torch.qint8), (lucid.quint8, torch.quint8), (lucid.qint32, torch.qint32)):
            got = lucid.quantize_per_tensor(lucid.tensor(x), 0.1, 3, ld).int_repr().numpy()
            want = torch.quantize_per_tensor(torch.tensor(x), 0.1, 3, td).int_repr().numpy()
            np.testing.assert_array_equal(got, want)
            got = lucid.quantize_per_channel(lucid.tensor(x), lucid.tensor([0.1, 0.2]), lucid.tensor([3, 1]), 0,
                                             ld).int_repr().numpy()
            want = torch.quantize_per_channel(torch.tensor(x), torch.tensor([0.1, 0.2]), torch.tensor([3, 1]), 0,
                                              td).int_repr().numpy()
            np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("tensor_qparams", [False, True])
@pytest.mark.parametrize("dtype", [lucid.float32, lucid.float64])
def test_fake_quantize_nan_lands_on_quant_min(tensor_qparams, dtype):
    x = lucid.tensor([NAN, 1.0, 0.26], dtype=dtype, requires_grad=True)
    scale, zp = (lucid.tensor([0.1]), lucid.tensor([3], dtype=lucid.int32)) if tensor_qparams else (0.1, 3)
    y = lucid.fake_quantize_per_tensor_affine(x, scale, zp, 0, 255)
    np.testing.assert_allclose(y.detach().numpy(), [-0.3, 1.0, 0.3], rtol=1e-6)
    y.sum().backward()
    assert x.grad.tolist() == [0.0, 1.0, 1.0]


def test_fake_quantize_per_channel_nan_and_zero_scale():
    x = lucid.tensor([[NAN, 0.0, 2.0], [0.0, -1.0, 0.35]], requires_grad=True)
    y = lucid.fake_quantize_per_channel_affine(x, lucid.tensor([0.0, 0.1]), lucid.tensor([1, 2], dtype=lucid.int32),
                                               0, -4, 5)
    # row 0: zero scale, every value (NaN from NaN or 0 * inf) is (q - zp) * 0 = 0
    np.testing.assert_allclose(y.detach().numpy(), [[0.0, 0.0, 0.0], [0.0, -0.6, 0.3]], rtol=1e-6)
    y.sum().backward()
    assert x.grad.tolist() == [[0.0, 0.0, 0.0], [1.0, 0.0, 0.0]]


def test_fake_quantize_nan_matches_torch():
    torch = pytest.importorskip("torch")
    x = np.array([NAN, 0.0, 0.3, -5.0, 7.0])
    for scale in (0.1, 0.0):
        xt = torch.tensor(x, requires_grad=True)
        xl = lucid.tensor(x, requires_grad=True)
        yt = torch.fake_quantize_per_tensor_affine(xt, scale, 2, -3, 40)
        yl = lucid.fake_quantize_per_tensor_affine(xl, scale, 2, -3, 40)
        np.testing.assert_array_equal(yl.detach().numpy(), yt.detach().numpy())
        yt.sum().backward()
        yl.sum().backward()
        np.testing.assert_array_equal(xl.grad.numpy(), xt.grad.numpy())


# ------------------------------------------------------------------ layout and copies of quantized tensors


def _q():
    x = lucid.tensor([[0.0, 0.1, 0.2], [0.3, 0.4, 0.5]])
    return lucid.quantize_per_tensor(x, 0.1, 2, lucid.qint8)  # ints [[2, 3, 4], [5, 6, 7]]


def test_transposed_quantized_tensor_is_not_contiguous():
    t = _q().t()
    assert not t.is_contiguous() and t.stride() == (1, 3) and t.stride(0) == 1
    c = t.contiguous()
    assert c.is_contiguous() and c.stride() == (2, 1)
    assert c.int_repr().tolist() == [[2, 5], [3, 6], [4, 7]]
    assert (c.q_scale(), c.q_zero_point()) == (0.1, 2)


@pytest.mark.parametrize("fn, want", [
    (lambda q: q.flip(1), [[4, 3, 2], [7, 6, 5]]),
    (lambda q: q.repeat(1, 2), [[2, 3, 4, 2, 3, 4], [5, 6, 7, 5, 6, 7]]),
    (lambda q: q.index_select(1, lucid.tensor([2, 0])), [[4, 2], [7, 5]]),
    (lambda q: q.unfold(1, 2, 1), [[[2, 3], [3, 4]], [[5, 6], [6, 7]]]),
])
def test_integer_copies_keep_the_quantizer(fn, want):
    out = fn(_q())
    assert out.dtype == lucid.qint8 and (out.q_scale(), out.q_zero_point()) == (0.1, 2)
    assert out.int_repr().tolist() == want


# ------------------------------------------------------------------ qconfigs


def test_onednn_qat_qconfig_uses_per_channel_weights():
    w = get_default_qat_qconfig("onednn").weight()
    assert w.qscheme == lucid.per_channel_symmetric and w.ch_axis == 0
    assert get_default_qat_qconfig("qnnpack").weight().qscheme == lucid.per_tensor_symmetric


@pytest.mark.parametrize("fn", [get_default_qconfig, get_default_qat_qconfig])
def test_unknown_backend_raises(fn):
    for backend in ("default", "bogus"):
        with pytest.raises(AssertionError, match=rf"^{fn.__name__}: backend {backend} not supported"):
            fn(backend)


# ------------------------------------------------------------------ fake-quantize state dicts


def test_per_channel_fake_quantize_loads_a_per_channel_state_dict():
    src = default_per_channel_weight_fake_quant()
    w = lucid.tensor([[1.0, -2.0], [0.5, 0.25], [-4.0, 3.0]])
    src(w)
    dst = default_per_channel_weight_fake_quant()
    dst.load_state_dict(src.state_dict())
    assert dst.scale.shape == (3,) and dst.zero_point.dtype == lucid.int32
    np.testing.assert_allclose(dst.scale.numpy(), np.float32([2.0, 0.5, 4.0]) / np.float32(127.5), rtol=1e-6)
    dst.disable_observer()
    np.testing.assert_array_equal(dst(w).numpy(), src(w).numpy())


def test_fake_quantize_state_dict_from_torch():
    torch = pytest.importorskip("torch")
    import torch.ao.quantization as tq

    x = np.random.default_rng(0).standard_normal((3, 5)).astype(np.float32)
    for tname, lfactory in (("default_per_channel_weight_fake_quant", default_per_channel_weight_fake_quant),
                            ("default_weight_fake_quant", default_weight_fake_quant),
                            ("default_fake_quant", default_fake_quant)):
        t = getattr(tq, tname)()
        t(torch.tensor(x))
        lmod = lfactory()
        lmod.load_state_dict({k: lucid.tensor(v.numpy()) for k, v in t.state_dict().items()})
        y = np.random.default_rng(1).standard_normal((3, 5)).astype(np.float32)
        np.testing.assert_array_equal(lmod(lucid.tensor(y)).numpy(), t(torch.tensor(y)).detach().numpy())


# ------------------------------------------------------------------ fusion


def _bn(bn, n):
    bn.running_mean = lucid.linspace(-0.5, 0.5, n)
    bn.running_var = lucid.linspace(0.5, 2.0, n)
    return bn


def test_fusion_in_training_mode_raises_assertion():
    m = nn.Sequential(nn.Conv2d(1, 2, 1), nn.BatchNorm2d(2)).train()
    with pytest.raises(AssertionError, match="^fuse_modules: Fusion only for eval"):
        fuse_modules(m, ["0", "1"])
    with pytest.raises(NotImplementedError):  # what Lucid raised before
        fuse_modules(m, ["0", "1"])
    with pytest.raises(AssertionError, match="^fuse_modules: did not find fuser method"):
        fuse_modules(m.eval(), ["0"])
    with pytest.raises(AssertionError, match="^fuse_modules: did not find fuser method"):
        fuse_modules(nn.Sequential(nn.Linear(2, 2), nn.Sigmoid()), ["0", "1"])


@pytest.mark.parametrize("make, fused_name", [
    (lambda: nn.Sequential(_bn(nn.BatchNorm2d(2), 2), nn.ReLU()), "BNReLU2d"),
    (lambda: nn.Sequential(_bn(nn.BatchNorm3d(2), 2), nn.ReLU()), "BNReLU3d"),
    (lambda: nn.Sequential(nn.Conv1d(2, 2, 1), nn.ReLU()), "ConvReLU1d"),
    (lambda: nn.Sequential(nn.Conv3d(2, 2, 1), nn.ReLU()), "ConvReLU3d"),
    (lambda: nn.Sequential(nn.Conv1d(2, 2, 1), _bn(nn.BatchNorm1d(2), 2), nn.ReLU()), "ConvReLU1d"),
    (lambda: nn.Sequential(nn.Conv3d(2, 2, 1), _bn(nn.BatchNorm3d(2), 2), nn.ReLU()), "ConvReLU3d"),
])
def test_more_fusions_keep_values(make, fused_name):
    lucid.manual_seed(0)
    m = make().eval()
    names = [str(i) for i in range(len(m))]
    fused = fuse_modules(m, names)
    assert type(fused[0]).__name__ == fused_name
    assert all(type(fused[i]).__name__ == "Identity" for i in range(1, len(m)))
    ndim = {"1d": 3, "2d": 4, "3d": 5}[fused_name[-2:]]
    x = lucid.linspace(-2.0, 2.0, 2 * 2 * 3 ** (ndim - 2)).reshape(2, 2, *([3] * (ndim - 2)))
    np.testing.assert_allclose(fused(x).numpy(), m(x).numpy(), rtol=1e-5, atol=1e-6)


# ------------------------------------------------------------------ static quantized Linear state dict


def _qlinear():
    m = QLinear(3, 2)
    w = lucid.quantize_per_tensor(lucid.tensor([[0.5, -0.25, 1.0], [0.1, 0.2, -0.3]]), 0.05, 0, lucid.qint8)
    m.set_weight_bias(w, lucid.tensor([0.1, -0.2]))
    m.scale, m.zero_point = 0.07, 3
    return m


def test_quantized_linear_state_dict_carries_weights():
    m = _qlinear()
    sd = m.state_dict()
    assert sorted(sd) == ["_packed_params._packed_params", "_packed_params.dtype", "scale", "zero_point"]
    fresh = QLinear(3, 2)
    fresh.load_state_dict(sd)
    assert fresh.zero_point == 3 and fresh.scale == float(np.float32(0.07))
    assert fresh.weight().int_repr().tolist() == [[10, -5, 20], [2, 4, -6]]
    x = lucid.quantize_per_tensor(lucid.tensor([[1.0, 0.5, -0.5]]), 0.02, 128, lucid.quint8)
    # x - 128 = (50, 25, -25): acc = (-125, 350), times 0.02 * 0.05, plus the bias = (-0.025, 0.15),
    # over 0.07 plus 3 = (2.64, 5.14)
    assert fresh(x).int_repr().tolist() == m(x).int_repr().tolist() == [[3, 5]]


def test_quantized_linear_rejects_a_dense_weight():
    with pytest.raises(TypeError, match="^set_weight_bias"):
        QLinear(3, 2).set_weight_bias(lucid.zeros(2, 3), None)


# ------------------------------------------------------------------ QAT: no observer after ReLU


class _Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.quant, self.dequant = QuantStub(), DeQuantStub()
        self.fc1, self.relu, self.fc2 = nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 2)

    def forward(self, x):
        return self.dequant(self.fc2(self.relu(self.fc1(self.quant(x)))))


def test_prepare_qat_puts_no_fake_quantize_after_relu():
    lucid.manual_seed(0)
    m = _Net().train()
    m.qconfig = get_default_qat_qconfig("qnnpack")
    p = prepare_qat(m)
    assert "activation_post_process" not in p.relu._modules
    x = lucid.tensor([[0.3, -1.2, 2.0], [1.5, 0.1, -0.4]])
    h = p.fc1(p.quant(x))
    # ReLU keeps fc1's fake-quantized grid: relu of it is on the same grid, nothing re-rounds it
    np.testing.assert_array_equal(p.relu(h).numpy(), np.maximum(h.detach().numpy(), 0))
    c = convert(p.eval())
    assert type(c.relu).__name__ == "ReLU"
    assert c(x).shape == (2, 2)


def test_qat_matches_torch():
    torch = pytest.importorskip("torch")
    import torch.ao.quantization as tq

    class TNet(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.quant, self.dequant = tq.QuantStub(), tq.DeQuantStub()
            self.fc1, self.relu, self.fc2 = torch.nn.Linear(3, 4), torch.nn.ReLU(), torch.nn.Linear(4, 2)

        def forward(self, x):
            return self.dequant(self.fc2(self.relu(self.fc1(self.quant(x)))))

    torch.manual_seed(0)
    tm, lm = TNet().train(), _Net().train()
    lm.load_state_dict({k: lucid.tensor(v.detach().numpy()) for k, v in tm.state_dict().items()})
    tm.qconfig = tq.QConfig(activation=tq.FakeQuantize.with_args(observer=tq.MovingAverageMinMaxObserver, quant_min=0,
                                                                 quant_max=255, reduce_range=False),
                            weight=tq.default_weight_fake_quant)
    lm.qconfig = get_default_qat_qconfig("qnnpack")
    tp, lp = tq.prepare_qat(tm), prepare_qat(lm)
    x = np.random.default_rng(3).standard_normal((5, 3)).astype(np.float32)
    for _ in range(2):
        np.testing.assert_allclose(lp(lucid.tensor(x)).detach().numpy(), tp(torch.tensor(x)).detach().numpy(),
                                   atol=1e-6)

