"""Nested tensors on the strict stand-in device (CuPy's rules on the CPU): values, offsets and
every index built from them stay on the values' device; gradients and attention run there."""
import numpy as np
import pytest

import lucid
import lucid.nested as N
import lucid.nn.functional as F
from lucid.testing import strict_device

strict_device.enable()
rng = np.random.default_rng(1)


def _comps(dev, lens=(2, 4, 1), rest=(4,)):
    return [lucid.tensor(rng.normal(size=(n,) + rest), dtype=lucid.float64, device=dev) for n in lens]


@pytest.mark.parametrize("dev", ["strict:0", "strict:1"])
def test_construction_ops_and_padding_stay_on_the_device(dev):
    comps = _comps(dev)
    nt = N.nested_tensor(comps, layout=lucid.jagged)
    assert nt.device == lucid.device(dev) and nt.offsets().device == nt.device
    assert "device='" + str(nt.device) + "'" in repr(nt)
    w = lucid.tensor(rng.normal(size=(3, 1, 4)), dtype=lucid.float64, device=dev)
    out = F.layer_norm((nt.exp() + w) * 2, (4,)).sum(-1)
    assert out.device == nt.device and out.offsets().device == nt.device
    for i, (o, c) in enumerate(zip(out.unbind(), comps)):
        ref = F.layer_norm((c.exp() + w[i]) * 2, (4,)).sum(-1)
        np.testing.assert_allclose(o.numpy(), ref.numpy(), rtol=1e-12)
    padded = nt.to_padded_tensor(-1.0)
    assert padded.device == nt.device and tuple(padded.shape) == (3, 4, 4)
    assert nt.sum(1).device == nt.device


@pytest.mark.parametrize("dev", ["strict:0", "strict:1"])
def test_gradients_and_attention_on_the_device(dev):
    comps = [c.requires_grad_() for c in _comps(dev)]
    nt = N.as_nested_tensor(comps, layout=lucid.jagged)
    q = nt.view(3, -1, 2, 2).transpose(1, 2)
    out = F.scaled_dot_product_attention(q, q, q).transpose(1, 2).flatten(-2)
    assert out.device == nt.device
    out.to_padded_tensor(0.0).pow(2).sum().backward()
    for c in comps:
        assert c.grad.device == c.device
    refs = [c.detach().requires_grad_() for c in comps]
    total = 0
    for r in refs:
        h = r.view(-1, 2, 2).transpose(0, 1)
        total = total + F.scaled_dot_product_attention(h, h, h).transpose(0, 1).flatten(-2).pow(2).sum()
    total.backward()
    for c, r in zip(comps, refs):
        np.testing.assert_allclose(c.grad.numpy(), r.grad.numpy(), rtol=1e-10, atol=1e-12)


def test_moving_keeps_the_structure():
    nt = N.nested_tensor(_comps("cpu"), layout=lucid.jagged)
    moved = nt.to("strict")
    assert moved.device.type == "strict" and moved.offsets().device == moved.device
    assert moved.shape[1] is nt.shape[1]
    back = moved.cpu()
    assert back.device.type == "cpu"
    np.testing.assert_array_equal(back.values().numpy(), nt.values().numpy())


def test_mixing_devices_fails():
    v = lucid.ones(5, 2, device="strict")
    with pytest.raises(RuntimeError, match="^nested_tensor_from_jagged: offsets is on"):
        N.nested_tensor_from_jagged(v, lucid.tensor([0, 2, 5], device="cpu"))
