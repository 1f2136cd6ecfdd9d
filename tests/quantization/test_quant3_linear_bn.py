"""QAT Linear + BatchNorm1d (PyTorch's nni.LinearBn1d / nniqat.LinearBn1d): eager
fuse_modules_qat / prepare_qat / convert and prepare_qat_fx / convert_fx, against the closed form
of the folded layer and against torch."""
import copy
import warnings

import numpy as np
import pytest

import lucid
import lucid.nn as nn
from lucid.ao.nn import intrinsic as nni
from lucid.ao.nn import quantized as nnq
from lucid.ao.nn.intrinsic import qat as nniqat
from lucid.ao.quantization import (DeQuantStub, QuantStub, convert, fuse_modules_qat,
                                   get_default_qat_qconfig, get_default_qat_qconfig_mapping, prepare_qat)
from lucid.ao.quantization.fuse_modules import FusionError
from lucid.ao.quantization.quantize_fx import convert_fx, prepare_qat_fx


def _np(t):
    return t.detach().numpy()


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.q, self.fc, self.bn, self.dq = QuantStub(), nn.Linear(4, 3), nn.BatchNorm1d(3), DeQuantStub()

    def forward(self, x):
        return self.dq(self.bn(self.fc(self.q(x))))


def _net(seed=0):
    lucid.manual_seed(seed)
    m = Net()
    m.bn.weight.data = lucid.tensor([1.3, 0.6, 0.8])
    m.bn.bias.data = lucid.tensor([0.1, -0.2, 0.3])
    return m


def test_fuse_modules_qat_makes_linear_bn1d_and_checks():
    m = _net()
    f = fuse_modules_qat(m, [["fc", "bn"]])
    assert type(f.fc) is nni.LinearBn1d and type(f.bn) is nn.Identity
    assert f.fc[0] is not m.fc  # a copy by default
    bad = _net()
    bad.bn.eval()
    with pytest.raises(FusionError, match="same mode"):
        fuse_modules_qat(bad, [["fc", "bn"]])
    bad = _net()
    bad.bn = nn.BatchNorm1d(3, affine=False)
    with pytest.raises(AssertionError, match="affine"):
        fuse_modules_qat(bad, [["fc", "bn"]])


def test_qat_linear_bn_forward_and_convert():
    m = _net()
    m.qconfig = get_default_qat_qconfig("x86")
    p = prepare_qat(fuse_modules_qat(m, [["fc", "bn"]]))
    assert type(p.fc) is nniqat.LinearBn1d
    rng = np.random.default_rng(0)
    x = rng.normal(size=(8, 4)).astype(np.float32)
    fc = p.fc
    # the first step: the weight scaled by gamma / sqrt(running_var + eps) (running_var = 1)
    # before fake quantization, the product divided back, then batch statistics
    out = fc(lucid.tensor(x))  # the module's own output, before the activation fake quant
    s = np.array([1.3, 0.6, 0.8], np.float32) / np.sqrt(np.float32(1 + 1e-5))
    w = _np(m.fc.weight) * s[:, None]
    amax = np.abs(w).max(1)
    scale = (amax / np.float32(127.5)).astype(np.float32)
    wq = np.clip(np.rint(w / scale[:, None]), -128, 127) * scale[:, None]
    y = x @ wq.T / s + _np(m.fc.bias)
    ref = (y - y.mean(0)) / np.sqrt(y.var(0) + 1e-5) * [1.3, 0.6, 0.8] + [0.1, -0.2, 0.3]
    app = fc.activation_post_process
    ref = np.clip(np.rint(ref / float(app.scale[0])) + int(app.zero_point[0]), 0, 127)
    np.testing.assert_allclose(_np(out), (ref - int(app.zero_point[0])) * float(app.scale[0]), atol=1e-5)
    for _ in range(3):
        p(lucid.tensor(rng.normal(size=(8, 4)).astype(np.float32)))
    p.eval()
    c = convert(p)
    assert type(c.fc) is nnq.Linear
    bn = p.fc.bn
    folded = _np(p.fc.weight) * (_np(bn.weight) / np.sqrt(_np(bn.running_var) + bn.eps))[:, None]
    # the folded weight, observed once more by the weight observer, is what gets quantized
    obs = copy.deepcopy(p.fc.weight_fake_quant.activation_post_process)
    obs(lucid.tensor(folded))
    scales, zps = obs.calculate_qparams()
    np.testing.assert_array_equal(c.fc.weight().q_per_channel_scales().numpy(), scales.numpy())
    want = np.clip(np.rint(folded * (np.float32(1) / scales.numpy().astype(np.float32))[:, None]), -128, 127)
    np.testing.assert_array_equal(c.fc.weight().int_repr().numpy(), want)
    fb = (_np(p.fc.bias) - _np(bn.running_mean)) * _np(bn.weight) / np.sqrt(_np(bn.running_var) + bn.eps) + \
        _np(bn.bias)
    np.testing.assert_allclose(_np(c.fc.bias()), fb, rtol=1e-6, atol=1e-6)
    assert c(lucid.tensor(x)).shape == (8, 3)


def test_prepare_qat_fx_fuses_linear_bn():
    class N(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc, self.bn = nn.Linear(4, 3), nn.BatchNorm1d(3)

        def forward(self, x):
            return self.bn(self.fc(x))

    p = prepare_qat_fx(N(), get_default_qat_qconfig_mapping("x86"), (lucid.randn(2, 4),))
    assert type(p.fc) is nniqat.LinearBn1d
    p(lucid.randn(8, 4))
    c = convert_fx(p.eval())
    assert type(c.fc) is nnq.Linear


def test_linear_bn_matches_torch():
    torch = pytest.importorskip("torch")
    warnings.filterwarnings("ignore", category=UserWarning)
    tq = torch.ao.quantization

    class T(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.q, self.fc, self.bn, self.dq = tq.QuantStub(), torch.nn.Linear(4, 3), torch.nn.BatchNorm1d(3), \
                tq.DeQuantStub()

        def forward(self, x):
            return self.dq(self.bn(self.fc(self.q(x))))

    t, m = T(), _net()
    t.load_state_dict({k: torch.from_numpy(_np(v).copy()) for k, v in m.state_dict().items()})
    t.qconfig, m.qconfig = tq.get_default_qat_qconfig("x86", 0), get_default_qat_qconfig("x86")
    tp, lp = tq.prepare_qat(tq.fuse_modules_qat(t, [["fc", "bn"]])), prepare_qat(fuse_modules_qat(m, [["fc", "bn"]]))
    rng = np.random.default_rng(1)
    for _ in range(3):
        x = rng.normal(size=(8, 4)).astype(np.float32)
        np.testing.assert_allclose(_np(lp(lucid.tensor(x))), tp(torch.from_numpy(x)).detach().numpy(), atol=1e-6)
    tc, lc = tq.convert(tp.eval()), convert(lp.eval())
    np.testing.assert_array_equal(lc.fc.weight().int_repr().numpy(), tc.fc.weight().int_repr().numpy())
    assert list(lc.state_dict()) == list(tc.state_dict())
    x = rng.normal(size=(5, 4)).astype(np.float32)
    np.testing.assert_allclose(_np(lc(lucid.tensor(x))), tc(torch.from_numpy(x)).numpy(), atol=1e-6)
