"""Regressions for wrong values, NaN gradients and crashes found by differential fuzzing
(issue 14). Each test failed before its fix; expected values are PyTorch's, derived by hand."""
import warnings

import numpy as np
import pytest

import lucid


def _grad(fn, x):
    t = lucid.tensor(np.asarray(x, dtype=np.float64), requires_grad=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        fn(t).sum().backward()
    return t.grad.numpy()


# --- integer true division must not wrap the divisor into the integer dtype ---------------

@pytest.mark.parametrize("dtype, values, divisor, expected", [
    (np.int8, [1, 2, 3], 200, [0.005, 0.01, 0.015]),
    (np.uint8, [100], -2, [-50.0]),
    (np.int16, [7], 70000, [1e-4]),
])
def test_integer_true_division_by_python_scalar(dtype, values, divisor, expected):
    out = lucid.tensor(np.array(values, dtype=dtype)) / divisor
    assert out.dtype == lucid.float32
    np.testing.assert_allclose(out.numpy(), expected, rtol=1e-6)


def test_integer_true_division_by_zero_dim_int_tensor():
    out = lucid.tensor(np.array([100], dtype=np.uint8)) / lucid.tensor(-2)
    np.testing.assert_allclose(out.numpy(), [-50.0])
    out = lucid.tensor(np.array([100], dtype=np.uint8)).div(lucid.tensor(-2))
    np.testing.assert_allclose(out.numpy(), [-50.0])


def test_integer_division_by_zero_dim_float64_keeps_float64():
    out = lucid.tensor(np.array([3], dtype=np.int32)) / lucid.tensor(2.5, dtype=lucid.float64)
    assert out.dtype == lucid.float64
    np.testing.assert_allclose(out.numpy(), [1.2])


# --- NaN gradients where the true derivative is finite -------------------------------------

def test_pow_zero_exponent_gradient_at_zero_base():
    np.testing.assert_array_equal(_grad(lambda t: t ** 0, [0.0, 1.0, -2.0]), [0.0, 0.0, 0.0])
    np.testing.assert_array_equal(_grad(lambda t: t ** 0.0, [0.0, 2.0]), [0.0, 0.0])


def test_pow_tensor_zero_exponent_gradients():
    x = lucid.tensor([0.0, 2.0], dtype=lucid.float64, requires_grad=True)
    y = lucid.tensor([0.0, 0.0], dtype=lucid.float64, requires_grad=True)
    lucid.pow(x, y).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [0.0, 0.0])
    np.testing.assert_allclose(y.grad.numpy(), [0.0, np.log(2.0)])


def test_pow_zero_exponent_second_derivative_is_finite():
    x = lucid.tensor([0.0, 1.5], dtype=lucid.float64, requires_grad=True)
    y = lucid.tensor([0.0, 2.0], dtype=lucid.float64)
    (g,) = lucid.autograd.grad(lucid.pow(x, y).sum(), [x], create_graph=True)
    (h,) = lucid.autograd.grad(g.sum(), [x])
    np.testing.assert_allclose(g.detach().numpy(), [0.0, 3.0])
    np.testing.assert_allclose(h.numpy(), [0.0, 2.0])


def test_pow_nonzero_exponent_gradient_unchanged():
    np.testing.assert_allclose(_grad(lambda t: t ** 3, [0.5, -2.0]), [0.75, 12.0])
    np.testing.assert_allclose(_grad(lambda t: t ** -1.0, [2.0]), [-0.25])


# --- ops whose derivative is zero still take part in the graph -----------------------------

def test_sign_backward_gives_zero_gradient():
    np.testing.assert_array_equal(_grad(lucid.sign, [-1.5, 0.0, 2.0]), [0.0, 0.0, 0.0])
    x = lucid.tensor([1.0, -2.0], requires_grad=True)
    assert lucid.sign(x).requires_grad and x.sign().requires_grad
    np.testing.assert_array_equal(lucid.sign(lucid.tensor([-3, 0, 4])).numpy(), [-1, 0, 1])


def test_abs_gradient_still_sign():
    np.testing.assert_array_equal(_grad(lucid.abs, [-1.5, 0.0, 2.0]), [-1.0, 0.0, 1.0])


# --- crashes on zero-size dimensions --------------------------------------------------------

@pytest.mark.parametrize("fn, ref, shapes", [
    (lambda a, b: lucid.einsum("ij,jk->ik", a, b), lambda a, b: np.einsum("ij,jk->ik", a, b), [(2, 0), (0, 3)]),
    (lambda a, b: a.dot(b), np.dot, [(0,), (0,)]),
    (lucid.outer, np.outer, [(0,), (2,)]),
    (lucid.kron, np.kron, [(0, 2), (2, 2)]),
    (lambda a, b: lucid.tensordot(a, b, dims=1), lambda a, b: np.tensordot(a, b, axes=1), [(2, 0), (0, 3)]),
    (lambda a, b: lucid.trace(a) * b, lambda a, b: np.trace(a) * b, [(0, 0), (2,)]),
])
def test_products_over_zero_size_dims(fn, ref, shapes):
    rng = np.random.default_rng(0)
    arrays = [rng.standard_normal(s) for s in shapes]
    ts = [lucid.tensor(a, requires_grad=True) for a in arrays]
    out = fn(*ts)
    expected = ref(*arrays)
    assert tuple(out.shape) == np.shape(expected)
    np.testing.assert_array_equal(out.detach().numpy(), expected)
    out.sum().backward()
    for t, s in zip(ts, shapes):
        assert tuple(t.grad.shape) == s
        np.testing.assert_array_equal(t.grad.numpy(), np.zeros(s))


@pytest.mark.parametrize("op", [lucid.cummax, lucid.cummin])
def test_cummax_cummin_on_empty_dim(op):
    x = lucid.zeros(2, 0, requires_grad=True)
    values, indices = op(x, 1)
    assert tuple(values.shape) == (2, 0) and tuple(indices.shape) == (2, 0)
    values.sum().backward()
    assert tuple(x.grad.shape) == (2, 0)
    with pytest.raises(IndexError, match="max"):
        lucid.max(lucid.zeros(2, 0), 1)


# --- bad input PyTorch rejects -------------------------------------------------------------

@pytest.mark.parametrize("fn, message", [
    (lambda b: b - 1, "with a bool tensor"),
    (lambda b: 1 - b, "with a bool tensor"),
    (lambda b: b - 0.5, "with a bool tensor"),
    (lambda b: b - b, "two bool tensors"),
    (lambda b: lucid.sub(b, True), "two bool tensors"),
    (lambda b: lucid.abs(b), "Bool"),
])
def test_bool_subtraction_and_abs_raise(fn, message):
    with pytest.raises(RuntimeError, match=message):
        fn(lucid.tensor([True, False]))


def test_bool_clamp_promotes_like_pytorch():
    b = lucid.tensor([True, False])
    out = b.clamp(-1, 2)
    assert out.dtype == lucid.int64 and out.tolist() == [1, 0]
    out = b.clamp(0.5)
    assert out.dtype == lucid.float32 and out.tolist() == [1.0, 0.5]
    out = lucid.tensor([1, 5]).clamp(2, 3)
    assert out.dtype == lucid.int64 and out.tolist() == [2, 3]


# --- found by tests/fuzz ---------------------------------------------------------------------

def test_cat_promotes_over_empty_inputs_and_returns_a_new_tensor():
    out = lucid.cat([lucid.zeros(0), lucid.zeros(0, dtype=lucid.float64)])
    assert out.dtype == lucid.float64
    assert lucid.cat([lucid.zeros(2), lucid.zeros(0, dtype=lucid.float64)]).dtype == lucid.float64
    a = lucid.tensor([1.0, 2.0])
    out = lucid.cat([a, lucid.zeros(0)])
    out.add_(1)
    assert a.tolist() == [1.0, 2.0] and out.tolist() == [2.0, 3.0]
    assert tuple(lucid.cat([lucid.ones(2, 2), lucid.zeros(0)]).shape) == (2, 2)


def test_cat_of_empty_inputs_gives_each_an_empty_gradient():
    a = lucid.zeros(0, dtype=lucid.float64, requires_grad=True)
    b = lucid.zeros(0, dtype=lucid.float64, requires_grad=True)
    (lucid.cat([a, b]) * 2).sum().backward()
    assert a.grad is not None and b.grad is not None
    assert a.grad.shape == (0,) and b.grad.shape == (0,)


def test_jvp_of_a_zero_dim_float64_operand_keeps_float64_precision():
    import lucid.func as F

    a = lucid.tensor(np.array(0.3))
    b = lucid.tensor(np.array([1.35, -1.06]))
    ta = lucid.tensor(np.array(2.04091912))
    for op in (lucid.maximum, lucid.minimum):
        _, tangent = F.jvp(op, (a, b), (ta, lucid.zeros(2, dtype=lucid.float64)))
        picked = 1 if op is lucid.maximum else 0
        assert tangent.dtype == lucid.float64
        assert tangent.numpy()[picked] == 2.04091912


def test_vector_norm_ord_zero_counts_nonzeros_with_zero_gradient():
    x = lucid.tensor([[1.0, 0.0, -2.0], [0.0, 0.0, 3.0]], dtype=lucid.float64, requires_grad=True)
    n = lucid.linalg.vector_norm(x, ord=0, dim=1)
    np.testing.assert_array_equal(n.detach().numpy(), [2.0, 1.0])
    assert n.requires_grad
    n.sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), np.zeros((2, 3)))
    z = lucid.tensor([1 + 1j, 0j])
    assert lucid.linalg.vector_norm(z, ord=0).item() == 1.0
