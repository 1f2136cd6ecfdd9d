"""The mean primitive (NOTE [Mean as a primitive]) and the backward of mul/div by a Python
number (NOTE [Scalar operands in backward]): values, dtypes and the array layout each gives
the next rule."""
import numpy as np
import pytest

import lucid
import lucid.func as F
from lucid._core.primitive import AN
from lucid.ops import _family
from lucid.ops.reduce.sums import _mean_vjp


@pytest.fixture
def no_scalar_arrays(monkeypatch):
    """Fails a test whose backward turns a Python number into an array (a host-to-device copy on a GPU)."""
    def refuse(ns, v, like):
        raise AssertionError(f"scalar_operand({v!r}) called")

    monkeypatch.setattr(_family, "scalar_operand", refuse)


@pytest.mark.parametrize("f, dfdx", [
    (lambda x: x * 4.0, 4.0), (lambda x: 4.0 * x, 4.0), (lambda x: x / 4.0, 0.25), (lambda x: x * 3, 3.0),
])
def test_mul_and_div_by_a_number_take_the_shortcut(no_scalar_arrays, f, dfdx):
    x = lucid.tensor([1.0, -2.0, 3.5], dtype=lucid.float64, requires_grad=True)
    f(x).backward(lucid.tensor([1.0, 2.0, -1.0], dtype=lucid.float64))
    np.testing.assert_array_equal(x.grad.cpu().numpy(), np.array([1.0, 2.0, -1.0]) * dfdx)


def test_complex_number_enters_conjugated(no_scalar_arrays):
    c = 1.5 - 2.0j
    z = lucid.tensor([1.0 + 1.0j, -0.5j], requires_grad=True)
    g = lucid.tensor([1.0 + 0.0j, 2.0 - 1.0j])
    (z * c).backward(g)
    np.testing.assert_allclose(z.grad.cpu().numpy(), g.cpu().numpy() * np.conj(c), rtol=1e-6)
    z.grad = None
    (z / c).backward(g)
    np.testing.assert_allclose(z.grad.cpu().numpy(), g.cpu().numpy() / np.conj(c), rtol=1e-6)


def test_shortcut_keeps_the_gradient_dtype():
    x = lucid.tensor([1.0, 2.0], dtype=lucid.float16, requires_grad=True)
    (x / 3.0).sum().backward()
    assert x.grad.dtype == lucid.float16
    np.testing.assert_array_equal(x.grad.cpu().numpy(), np.float16(1) / np.float16(3))


def test_higher_order_through_the_shortcut():
    # d/dx (x^2 / 4) = x / 2, d2/dx2 = 1/2: the shortcut's product stays differentiable
    f = lambda t: (t * t / 4.0).sum()  # noqa: E731
    x = lucid.tensor([3.0, -1.0], dtype=lucid.float64)
    np.testing.assert_allclose(F.grad(f)(x).cpu().numpy(), [1.5, -0.5])
    np.testing.assert_allclose(F.hessian(f)(x).cpu().numpy(), np.eye(2) / 2)


def test_mean_of_float16_accumulates_in_float32():
    # A float16 running sum of 0.1s stalls (at 256 its spacing is 0.25); PyTorch and NumPy accumulate wider.
    x = lucid.full((8192,), 0.1, dtype=lucid.float16)
    got = float(x.mean().item())
    assert abs(got - 0.1) < 1e-3, got


@pytest.mark.parametrize("dim, keepdim", [(None, False), ((1, 3), True), ((0,), False), (-1, True)])
def test_mean_gradient_is_one_over_n(dim, keepdim):
    x = lucid.tensor(np.arange(24.0).reshape(2, 3, 2, 2), requires_grad=True)
    out = x.mean(dim=dim, keepdim=keepdim)
    out.backward(lucid.ones(out.shape, dtype=out.dtype))
    n = 24 if dim is None else int(np.prod([x.shape[d] for d in (dim if isinstance(dim, tuple) else (dim,))]))
    np.testing.assert_allclose(x.grad.cpu().numpy(), np.full((2, 3, 2, 2), 1.0 / n))
    np.testing.assert_allclose(out.detach().cpu().numpy(),
                               np.arange(24.0).reshape(2, 3, 2, 2).mean(axis=dim, keepdims=keepdim))


def test_mean_over_nothing_is_nan_with_an_empty_gradient():
    x = lucid.zeros((0, 3), requires_grad=True)
    m = x.mean(dim=0)
    assert np.isnan(m.detach().cpu().numpy()).all() and m.shape == (3,)
    m.sum().backward()
    assert x.grad.shape == (0, 3)


def test_mean_under_vmap_matches_a_loop():
    xs = lucid.tensor(np.random.default_rng(0).standard_normal((4, 3, 5)))
    got = F.vmap(lambda t: t.mean(dim=-1))(xs)
    want = lucid.stack([xs[i].mean(dim=-1) for i in range(4)])
    np.testing.assert_allclose(got.cpu().numpy(), want.cpu().numpy(), rtol=1e-6)


def test_mean_vjp_layout_cpu_view_device_contiguous():
    from lucid.testing import strict_device

    strict_device.enable()

    g = np.array([[2.0], [4.0]])
    on_cpu = _mean_vjp(AN, g, None, np.empty((2, 8)), (1,), True)
    assert on_cpu.strides[1] == 0  # a broadcast view: no full-size array on the CPU
    np.testing.assert_array_equal(on_cpu, np.repeat(g / 8, 8, axis=1))
    gd = lucid.tensor(g, device="strict")._data
    on_device = _mean_vjp(AN, gd, None, np.empty((2, 8)), (1,), True)
    assert on_device.flags["C_CONTIGUOUS"]  # what ReLU's fused kernel takes without a copy
    np.testing.assert_array_equal(lucid.Tensor(on_device).cpu().numpy(), np.repeat(g / 8, 8, axis=1))
