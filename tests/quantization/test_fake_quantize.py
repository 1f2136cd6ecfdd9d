"""Fake quantization: the value (bit-exact NumPy reference of PyTorch's kernel, and torch),
the straight-through gradient in every mode (backward, jvp, vmap, func.grad, second order),
and the FakeQuantize module against torch."""
import os
import re
import sys
import warnings

import numpy as np
import pytest

import lucid
import lucid.func as F

sys.path.insert(0, os.path.dirname(__file__))
import qref  # noqa: E402


def _torch():
    torch = pytest.importorskip("torch")
    warnings.filterwarnings("ignore", message=".*quantiz.*deprecated", category=UserWarning)
    return torch


def _inputs(rng, scale, dtype, n=40):
    k = rng.integers(-100, 100, n)
    return np.concatenate([k * 0.5 * scale, rng.normal(size=n) * 30 * scale]).astype(dtype)


def test_closed_form_value_and_gradient():
    x = lucid.tensor([-1.0, 0.26, 0.25, 0.35, 2.0], requires_grad=True)
    y = lucid.fake_quantize_per_tensor_affine(x, 0.1, 0, -5, 10)
    # 0.25 * 10 = 2.5 -> 2 and 0.35 * 10 = 3.5 (in float32) -> 4: ties to even; 2.0 clamps at 10 steps
    np.testing.assert_array_equal(y.detach().numpy(), np.float32([-0.5, 0.3, 0.2, 0.4, 1.0]))
    y.backward(lucid.tensor([1.0, 2.0, 3.0, 4.0, 5.0]))
    assert x.grad.tolist() == [0.0, 2.0, 3.0, 4.0, 0.0]


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16])
def test_per_tensor_matches_reference(dtype):
    rng = np.random.default_rng(0)
    for _ in range(20):
        scale, zp = float(rng.uniform(1e-2, 1)), int(rng.integers(-20, 20))
        x = _inputs(rng, scale, dtype)
        t = lucid.tensor(x, requires_grad=True)
        y = lucid.fake_quantize_per_tensor_affine(t, scale, zp, -30, 40)
        y.sum().backward()
        val, mask = qref.fake_quantize(x, scale, zp, -30, 40)
        assert y.dtype == t.dtype
        np.testing.assert_array_equal(y.detach().numpy(), val)
        np.testing.assert_array_equal(t.grad.numpy(), mask)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_per_channel_matches_reference(dtype):
    rng = np.random.default_rng(1)
    s = rng.uniform(0.01, 1, 3).astype(np.float32)
    z = rng.integers(-5, 5, 3).astype(np.int32)
    x = (rng.normal(size=(2, 3, 4)) * 20 * s[None, :, None]).astype(dtype)
    t = lucid.tensor(x, requires_grad=True)
    y = lucid.fake_quantize_per_channel_affine(t, lucid.tensor(s), lucid.tensor(z), 1, -30, 40)
    y.sum().backward()
    val, mask = qref.fake_quantize(x, s[None, :, None], z[None, :, None], -30, 40, per_tensor=False)
    np.testing.assert_array_equal(y.detach().numpy(), val)
    np.testing.assert_array_equal(t.grad.numpy(), mask)


def test_matches_torch_value_and_gradient():
    torch = _torch()
    rng = np.random.default_rng(2)
    for dtype in (np.float32, np.float64, np.float16):
        for _ in range(10):
            scale, zp = float(rng.uniform(1e-2, 1)), int(rng.integers(-20, 20))
            x = _inputs(rng, scale, dtype)
            t, tt = lucid.tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
            y = lucid.fake_quantize_per_tensor_affine(t, scale, zp, -30, 40)
            yt = torch.fake_quantize_per_tensor_affine(tt, scale, zp, -30, 40)
            np.testing.assert_array_equal(y.detach().numpy(), yt.detach().numpy())
            y.sum().backward()
            yt.sum().backward()
            np.testing.assert_array_equal(t.grad.numpy(), tt.grad.numpy())
    # tensor qparams and per channel
    x = (rng.normal(size=(4, 3)) * 3).astype(np.float32)
    s, z = np.float32([0.1, 0.3, 0.05]), np.int32([0, 2, -1])
    got = lucid.fake_quantize_per_channel_affine(lucid.tensor(x), lucid.tensor(s), lucid.tensor(z), 1, -8, 7)
    want = torch.fake_quantize_per_channel_affine(torch.tensor(x), torch.tensor(s), torch.tensor(z), 1, -8, 7)
    np.testing.assert_array_equal(got.numpy(), want.numpy())
    got = lucid.fake_quantize_per_tensor_affine(lucid.tensor(x), lucid.tensor(0.07),
                                                lucid.tensor(3, dtype=lucid.int32), 0, 15)
    want = torch.fake_quantize_per_tensor_affine(torch.tensor(x), torch.tensor(0.07),
                                                 torch.tensor(3, dtype=torch.int32), 0, 15)
    np.testing.assert_array_equal(got.numpy(), want.numpy())


def test_transforms_see_the_straight_through_gradient():
    x = lucid.tensor([-1.0, 0.26, 0.5, 2.0], dtype=lucid.float64)
    f = lambda v: lucid.fake_quantize_per_tensor_affine(v, 0.1, 0, -5, 10)  # noqa: E731
    mask = [0.0, 1.0, 1.0, 0.0]
    assert F.grad(lambda v: f(v).sum())(x).tolist() == mask
    _, tangent = F.jvp(f, (x,), (lucid.tensor([1.0, 2.0, 3.0, 4.0], dtype=lucid.float64),))
    assert tangent.tolist() == [0.0, 2.0, 3.0, 0.0]
    batch = lucid.stack([x, x * 3])
    got = F.vmap(f)(batch)
    np.testing.assert_array_equal(got.numpy(), np.stack([f(x).numpy(), f(x * 3).numpy()]))
    per_example = F.vmap(F.grad(lambda v: f(v).sum()))(batch)
    assert per_example.tolist() == [mask, [0.0, 1.0, 0.0, 0.0]]
    # second order: the straight-through derivative is constant
    hess = F.hessian(lambda v: f(v).sum())(x)
    assert float(hess.abs().sum()) == 0.0


def test_bad_arguments():
    x = lucid.ones(3)
    with pytest.raises(RuntimeError, match="fake_quantize_per_tensor_affine: `quant_min` should be less"):
        lucid.fake_quantize_per_tensor_affine(x, 0.1, 0, 5, 1)
    with pytest.raises(RuntimeError, match="fake_quantize_per_tensor_affine: `zero_point` must be between"):
        lucid.fake_quantize_per_tensor_affine(x, 0.1, 10, 0, 5)
    with pytest.raises(NotImplementedError, match="fake_quantize_per_tensor_affine: not implemented for lucid.int64"):
        lucid.fake_quantize_per_tensor_affine(lucid.tensor([1, 2]), 0.1, 0, 0, 5)
    s, z = lucid.tensor([0.1, 0.2]), lucid.tensor([0, 1], dtype=lucid.int32)
    with pytest.raises(RuntimeError, match="fake_quantize_per_channel_affine: dimensions of scale"):
        lucid.fake_quantize_per_channel_affine(lucid.ones(2, 3), s, z, 1, 0, 5)
    with pytest.raises(RuntimeError, match="fake_quantize_per_channel_affine: Zero-point must be Int32"):
        lucid.fake_quantize_per_channel_affine(lucid.ones(2, 3), s, z.long(), 0, 0, 5)
    with pytest.raises(RuntimeError, match="fake_quantize_per_channel_affine: Scale must be Float"):
        lucid.fake_quantize_per_channel_affine(lucid.ones(2, 3), s.double(), z, 0, 0, 5)
    with pytest.raises(RuntimeError, match="fake_quantize_per_channel_affine: `zero_point` must be between"):
        # (checked on the host only: on a device it would read values back on every call)
        lucid.fake_quantize_per_channel_affine(lucid.ones(2, 3, device="cpu"), s.cpu(),
                                               lucid.tensor([0, 9], dtype=lucid.int32, device="cpu"), 0, 0, 5)


# ----------------------------------------------------------------- the FakeQuantize module

def test_fake_quantize_module_closed_form():
    from lucid.ao.quantization import FakeQuantize, MinMaxObserver

    fq = FakeQuantize(observer=MinMaxObserver, quant_min=0, quant_max=255)
    y = fq(lucid.tensor([0.0, 0.5, 1.0]))
    # scale = float32(1/255), zero point 0; the float32 reciprocal of that scale is 254.99998, so
    # 0.5 maps to 127.49999 -> 127 (a true 127.5 would round to 128)
    np.testing.assert_array_equal(y.numpy(), np.float32([0.0, np.float32(127) * np.float32(1 / 255), 1.0]))
    assert fq.zero_point.tolist() == [0] and fq.zero_point.dtype == lucid.int32
    fq.disable_observer()
    fq(lucid.tensor([10.0]))
    assert fq.activation_post_process.max_val.item() == 1.0
    fq.disable_fake_quant()
    assert fq(lucid.tensor([0.3])).item() == np.float32(0.3)


def test_fake_quantize_module_matches_torch():
    torch = _torch()
    from lucid.ao.quantization import default_fake_quant, default_per_channel_weight_fake_quant

    rng = np.random.default_rng(3)
    tq = torch.ao.quantization
    for mine, theirs, shape in ((default_fake_quant, tq.default_fake_quant, (5, 4)),
                                (default_per_channel_weight_fake_quant, tq.default_per_channel_weight_fake_quant,
                                 (3, 6))):
        a, b = mine(), theirs()
        for step in range(4):
            x = (rng.normal(size=shape) * (1 + step) + step * 0.3).astype(np.float32)
            t, tt = lucid.tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
            y, yt = a(t), b(tt)
            np.testing.assert_array_equal(y.detach().numpy(), yt.detach().numpy())
            np.testing.assert_array_equal(a.scale.numpy(), b.scale.numpy())
            np.testing.assert_array_equal(a.zero_point.numpy(), b.zero_point.numpy())
            y.sum().backward()
            yt.sum().backward()
            np.testing.assert_array_equal(t.grad.numpy(), tt.grad.numpy())
    mine_text = re.sub(r"device='[^']*', ", "", repr(a)).replace("lucid.", "torch.")
    assert mine_text.split("scale=")[0] == repr(b).split("scale=")[0]
