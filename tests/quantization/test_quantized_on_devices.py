"""Quantization on the strict stand-in device (CuPy's rules on the CPU, NOTE [Strict stand-in
device]): integers, quantizers and results stay on the input's device, with the CPU as the
default device (NOTE [Device inputs, CPU default])."""
import numpy as np
import pytest

import lucid
import lucid.nn as nn
from lucid.ao.quantization import FakeQuantize, quantize_dynamic
from lucid.testing import strict_device

strict_device.enable()


@pytest.mark.parametrize("dev", ["strict:0", "strict:1"])
def test_quantized_tensors_stay_on_the_device(dev):
    x = np.array([-1.0, 0.05, 0.25, 30.0], np.float32)
    q = lucid.quantize_per_tensor(lucid.tensor(x, device=dev), 0.1, 10, lucid.quint8)
    assert q.device == lucid.device(dev) and q.int_repr().device == q.device
    assert q.dequantize().device == q.device
    host = lucid.quantize_per_tensor(lucid.tensor(x), 0.1, 10, lucid.quint8)
    np.testing.assert_array_equal(q.int_repr().cpu().numpy(), host.int_repr().numpy())
    assert repr(q).startswith(f"tensor([-1. ,  0. ,  0.2, 24.5], device='{dev}',")
    qc = lucid.quantize_per_channel(lucid.tensor(x.reshape(2, 2), device=dev), [0.1, 0.5], [0, 1], 0, lucid.qint8)
    assert qc.q_per_channel_scales().device == qc.device and qc.dequantize().device == qc.device
    assert q.cpu().device == lucid.device("cpu") and q.to(dev) is q


@pytest.mark.parametrize("dev", ["strict:0", "strict:1"])
def test_fake_quantize_and_dynamic_linear_on_the_device(dev):
    x = lucid.tensor([[-1.0, 0.26], [0.5, 2.0]], device=dev, requires_grad=True)
    y = lucid.fake_quantize_per_tensor_affine(x, 0.1, 0, -5, 10)
    y.sum().backward()
    assert y.device == x.device and x.grad.cpu().tolist() == [[0.0, 1.0], [1.0, 0.0]]
    s = lucid.tensor([0.1, 0.5], device=dev)
    z = lucid.tensor([0, 1], dtype=lucid.int32, device=dev)
    assert lucid.fake_quantize_per_channel_affine(x, s, z, 0, -5, 10).device == x.device
    fq = FakeQuantize().to(dev)
    assert fq(x).device == x.device
    lucid.manual_seed(0)
    model = nn.Sequential(nn.Linear(2, 3, device="cpu"))
    host = quantize_dynamic(model, {nn.Linear})
    on_dev = quantize_dynamic(model.to(dev), {nn.Linear})
    out = on_dev(x.detach())
    assert out.device == x.device
    np.testing.assert_array_equal(out.cpu().numpy(), host(x.detach().cpu()).numpy())
