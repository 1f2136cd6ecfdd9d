"""Eager post-training static quantization and QAT: prepare / calibrate / convert of stubs,
Linear, fused Linear+ReLU and ReLU, against a NumPy reference of the requantization and torch."""
import os
import sys
import warnings

import numpy as np
import pytest

import lucid
import lucid.nn as nn
from lucid.ao.quantization import (DeQuantStub, QConfig, QuantStub, convert, default_qconfig, fuse_modules, prepare,
                                   prepare_qat, get_default_qat_qconfig)

sys.path.insert(0, os.path.dirname(__file__))
import qref  # noqa: E402


class Net(nn.Module):
    def __init__(self, fc1, fc2):
        super().__init__()
        self.quant, self.dequant = QuantStub(), DeQuantStub()
        self.fc1, self.relu, self.fc2 = fc1, nn.ReLU(), fc2

    def forward(self, x):
        return self.dequant(self.fc2(self.relu(self.fc1(self.quant(x)))))


def _requantize(xq, xs, xz, wq, ws, bias, out_s, out_z, relu=False):
    acc = ((xq - xz) @ wq.T).astype(np.float32)
    act_w = np.float32(np.float32(xs) * ws)
    raw = acc + np.float32(bias) / act_w
    r = np.rint(raw * np.float32(act_w / np.float32(out_s))) + out_z
    return np.clip(r, out_z if relu else 0, 255).astype(np.int64)


def test_prepare_convert_linear_matches_reference():
    rng = np.random.default_rng(0)
    lucid.manual_seed(0)
    model = Net(nn.Linear(4, 5), nn.Linear(5, 3)).eval()
    model.qconfig = default_qconfig
    prepared = prepare(model)
    assert hasattr(prepared.fc1, "activation_post_process") and hasattr(prepared.quant, "activation_post_process")
    calib = [rng.normal(size=(8, 4)).astype(np.float32) for _ in range(3)]
    for x in calib:
        prepared(lucid.tensor(x))
    q = convert(prepared)
    assert type(q.fc1).__name__ == "Linear" and repr(q.fc1).startswith("QuantizedLinear(in_features=4")
    x = rng.normal(size=(6, 4)).astype(np.float32)
    got = q(lucid.tensor(x))
    # reference: the same integer pipeline in NumPy
    xs, xz = q.quant.scale.item(), int(q.quant.zero_point.item())
    xq = qref.quantize_per_tensor(x, xs, xz, "quint8")
    h = _requantize(xq, xs, xz, q.fc1.weight().int_repr().numpy().astype(np.int64),
                    np.float32(q.fc1.weight().q_scale()), model.fc1.bias.detach().numpy(), q.fc1.scale,
                    q.fc1.zero_point)
    h = np.maximum(h, q.fc1.zero_point)
    y = _requantize(h, q.fc1.scale, q.fc1.zero_point, q.fc2.weight().int_repr().numpy().astype(np.int64),
                    np.float32(q.fc2.weight().q_scale()), model.fc2.bias.detach().numpy(), q.fc2.scale,
                    q.fc2.zero_point)
    want = qref.dequantize_per_tensor(y, q.fc2.scale, q.fc2.zero_point)
    np.testing.assert_array_equal(got.numpy(), want)
    ref = model(lucid.tensor(x)).numpy()
    assert np.abs(got.numpy() - ref).max() < 0.1


def test_prepare_convert_matches_torch():
    torch = pytest.importorskip("torch")
    warnings.filterwarnings("ignore")
    torch.backends.quantized.engine = "x86"
    rng = np.random.default_rng(1)

    class TNet(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.quant, self.dequant = torch.ao.quantization.QuantStub(), torch.ao.quantization.DeQuantStub()
            self.fc1, self.relu, self.fc2 = torch.nn.Linear(4, 5), torch.nn.ReLU(), torch.nn.Linear(5, 3)

        def forward(self, x):
            return self.dequant(self.fc2(self.relu(self.fc1(self.quant(x)))))

    tm = TNet().eval()
    lm = Net(nn.Linear(4, 5), nn.Linear(5, 3)).eval()
    lm.load_state_dict({k: lucid.tensor(v.detach().numpy()) for k, v in tm.state_dict().items()})
    tm.qconfig = torch.ao.quantization.default_qconfig
    lm.qconfig = default_qconfig
    tp, lp = torch.ao.quantization.prepare(tm), prepare(lm)
    for _ in range(3):
        x = rng.normal(size=(8, 4)).astype(np.float32)
        tp(torch.from_numpy(x))
        lp(lucid.tensor(x))
    tq, lq = torch.ao.quantization.convert(tp), convert(lp)
    # calibration runs the float layers, whose sums may differ from PyTorch's in the last bit
    for a, b in ((lq.fc1, tq.fc1), (lq.fc2, tq.fc2)):
        assert a.zero_point == b.zero_point and a.scale == pytest.approx(b.scale, rel=1e-6)
    np.testing.assert_array_equal(lq.fc2.weight().int_repr().numpy(), tq.fc2.weight().int_repr().numpy())
    x = rng.normal(size=(6, 4)).astype(np.float32)
    got, want = lq(lucid.tensor(x)).numpy(), tq(torch.from_numpy(x)).numpy()
    assert np.abs(got - want).max() <= tq.fc2.scale * 1.0001  # at most one output step
    # with PyTorch's quantizer parameters the integer pipeline is the same bit for bit
    lq.fc1.scale, lq.fc2.scale = tq.fc1.scale, tq.fc2.scale
    np.testing.assert_array_equal(lq(lucid.tensor(x)).numpy(), tq(torch.from_numpy(x)).numpy())


def test_fusion_and_qat():
    rng = np.random.default_rng(2)
    lucid.manual_seed(2)
    model = Net(nn.Linear(4, 5), nn.Linear(5, 3))
    fused = fuse_modules(model.eval(), [["fc1", "relu"]])
    assert type(fused.fc1).__name__ == "LinearReLU" and isinstance(fused.relu, nn.Identity)
    x = lucid.tensor(rng.normal(size=(6, 4)).astype(np.float32))
    np.testing.assert_array_equal(fused(x).numpy(), model(x).numpy())
    fused.train()
    fused.qconfig = get_default_qat_qconfig("x86")
    qat = prepare_qat(fused)
    assert type(qat.fc2).__name__ == "Linear" and hasattr(qat.fc2, "weight_fake_quant")
    opt = lucid.optim.SGD(qat.parameters(), lr=0.1)
    target = lucid.tensor(rng.normal(size=(6, 3)).astype(np.float32))
    losses = []
    for _ in range(30):
        opt.zero_grad()
        loss = ((qat(x) - target) ** 2).mean()
        loss.backward()
        opt.step()
        losses.append(float(loss))
    assert losses[-1] < 0.8 * losses[0]  # fake-quantized weights still train (straight-through)
    q = convert(qat.eval())
    assert repr(q.fc1).startswith("QuantizedLinearReLU(")
    assert np.abs(q(x).numpy() - qat(x).detach().numpy()).max() < 0.15


def test_quantized_modules_refuse_float_input():
    from lucid.ao.nn.quantized import Linear, ReLU

    with pytest.raises(RuntimeError, match="QuantizedLinear: expected a quantized input"):
        Linear(2, 2)(lucid.ones(1, 2))
    with pytest.raises(RuntimeError, match="ReLU: expected a quantized input"):
        ReLU()(lucid.ones(2))
    assert QConfig(activation=QuantStub, weight=QuantStub).activation is QuantStub
    with pytest.raises(ValueError, match="QConfig received observer instance"):
        QConfig(activation=QuantStub(), weight=QuantStub)
