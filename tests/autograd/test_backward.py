"""Reverse-mode engine: Tensor.backward, accumulation, retain_graph, hooks, higher order, memory."""
import gc
import sys
import warnings
import weakref

import numpy as np
import pytest

import lucid
from conftest import assert_closed_form


def f64(*vals, rg=True):
    return lucid.tensor(np.array(vals, dtype=np.float64), requires_grad=rg)


def test_simple_graph_matches_closed_form():
    x = f64(2.0, 3.0)
    y = x ** 2
    z = y.sum()
    z.backward()
    assert_closed_form(x.grad.tolist(), [4.0, 6.0])
    assert x.grad.dtype == lucid.float64 and x.grad.shape == (2,)


def test_diamond_and_reuse_sum_contributions():
    x = f64(0.5, -1.5)
    a = x.sin()
    b = x * x
    out = (a * b + a + x).sum()
    out.backward()
    xv = np.array([0.5, -1.5])
    want = np.cos(xv) * xv ** 2 + np.sin(xv) * 2 * xv + np.cos(xv) + 1
    np.testing.assert_allclose(x.grad.numpy(), want)


def test_gradients_accumulate_and_reset():
    x = f64(1.0, 2.0)
    (x * 3).sum().backward()
    (x * x).sum().backward()
    assert x.grad.tolist() == [3.0 + 2.0, 3.0 + 4.0]
    x.grad = None
    (x * 3).sum().backward()
    assert x.grad.tolist() == [3.0, 3.0]
    x.grad.zero_()
    (x * 2).sum().backward()
    assert x.grad.tolist() == [2.0, 2.0]


def test_grad_buffer_is_owned_not_aliased():
    x = f64(1.0, 2.0)
    y = f64(3.0, 4.0)
    (x + y).sum().backward()  # the add rule passes the same array to both
    x.grad.mul_(10)
    assert y.grad.tolist() == [1.0, 1.0] and x.grad.tolist() == [10.0, 10.0]


def test_retain_graph_allows_second_backward():
    x = f64(1.0, 2.0)
    z = (x.exp() * 2).sum()
    z.backward(retain_graph=True)
    z.backward()
    np.testing.assert_allclose(x.grad.numpy(), 4 * np.exp([1.0, 2.0]))


def test_second_backward_through_freed_graph_raises():
    x = f64(1.0, 2.0)
    z = (x.exp() * 2).sum()
    z.backward()
    with pytest.raises(RuntimeError, match="second time.*retain_graph=True"):
        z.backward()


def test_backward_of_non_scalar_needs_gradient():
    x = f64(1.0, 2.0)
    y = x * 2
    with pytest.raises(RuntimeError, match=r"implicitly created only for scalar outputs.*\(2,\)"):
        y.backward()
    assert x.grad is None
    y.backward(gradient=f64(1.0, -3.0, rg=False))
    assert x.grad.tolist() == [2.0, -6.0]


def test_backward_gradient_shape_mismatch_changes_nothing():
    x = f64(1.0, 2.0)
    y = x * 2
    with pytest.raises(RuntimeError, match=r"mismatch in shape.*\(3,\).*\(2,\)"):
        y.backward(gradient=f64(1.0, 1.0, 1.0, rg=False))
    assert x.grad is None
    y.backward(gradient=f64(1.0, 1.0, rg=False))  # the graph was not freed
    assert x.grad.tolist() == [2.0, 2.0]


def test_failing_backward_leaves_grads_untouched():
    class Bad(lucid.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x * 1

        @staticmethod
        def backward(ctx, g):
            return g[:1]  # wrong shape

    x = f64(1.0, 2.0)
    x.grad = f64(7.0, 7.0, rg=False)
    w = f64(5.0)
    out = (x * w).sum() + Bad.apply(x).sum() * w.sum()
    with pytest.raises(RuntimeError, match="Bad"):
        out.backward()
    assert x.grad.tolist() == [7.0, 7.0] and w.grad is None


def test_backward_of_tensor_without_grad_raises():
    with pytest.raises(RuntimeError, match="does not require grad"):
        lucid.tensor([1.0]).sum().backward()


def test_backward_inputs_argument_limits_accumulation():
    x = f64(1.0, 2.0)
    w = f64(3.0)
    out = (x * w).sum()
    out.backward(inputs=[w], retain_graph=True)
    assert x.grad is None and w.grad.tolist() == [3.0]
    out.backward(inputs=x)
    assert x.grad.tolist() == [3.0, 3.0] and w.grad.tolist() == [3.0]


def test_backward_inputs_non_leaf():
    x = f64(1.0, 2.0)
    h = x * 2
    (h * h).sum().backward(inputs=[h])
    assert h.grad.tolist() == [4.0, 8.0] and x.grad is None


def test_create_graph_third_order():
    x = f64(0.7)
    y = x ** 4 + x.sin()
    (g1,) = lucid.autograd.grad(y, [x], create_graph=True)
    (g2,) = lucid.autograd.grad(g1, [x], create_graph=True)
    (g3,) = lucid.autograd.grad(g2, [x])
    v = 0.7
    assert g1.item() == pytest.approx(4 * v ** 3 + np.cos(v))
    assert g2.item() == pytest.approx(12 * v ** 2 - np.sin(v))
    assert g3.item() == pytest.approx(24 * v - np.cos(v))


def test_backward_create_graph_then_differentiate_grad():
    x = f64(1.5, -0.5)
    y = (x.exp() * x).sum()
    y.backward(create_graph=True)
    g = x.grad  # (x + 1) e^x, differentiable
    assert g.requires_grad
    x.grad = None
    g.sum().backward()
    xv = np.array([1.5, -0.5])
    np.testing.assert_allclose(x.grad.numpy(), (xv + 2) * np.exp(xv))


def test_mixed_partials_through_grad_of_grad():
    x, y = f64(0.3), f64(-1.2)
    f = (x * x * y.exp()).sum()
    gx, = lucid.autograd.grad(f, [x], create_graph=True)
    gxy, = lucid.autograd.grad(gx, [y])
    assert gxy.item() == pytest.approx(2 * 0.3 * np.exp(-1.2))


def test_retain_grad_on_non_leaf():
    x = f64(1.0, 2.0)
    h = x * 3
    h.retain_grad()
    assert h.retains_grad
    (h * h).sum().backward()
    assert h.grad.tolist() == [6.0, 12.0]
    assert x.grad.tolist() == [18.0, 36.0]


def test_grad_of_non_leaf_warns():
    x = f64(1.0)
    h = x * 3
    h.sum().backward()
    with pytest.warns(UserWarning, match="retain_grad"):
        assert h.grad is None
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert x.grad is not None  # a leaf: no warning


def test_hook_on_leaf_replaces_gradient_once_with_total():
    x = f64(1.0, 2.0)
    seen = []

    def hook(g):
        seen.append(g.tolist())
        return g * 10

    x.register_hook(hook)
    (x * 2 + x * 3).sum().backward()
    assert seen == [[5.0, 5.0]]
    assert x.grad.tolist() == [50.0, 50.0]


def test_hook_on_non_leaf_and_remove():
    x = f64(1.0, 2.0)
    h = x * 1
    handle = h.register_hook(lambda g: g * 10)
    observed = []
    h.register_hook(lambda g: observed.append(g.tolist()))
    (h * h).sum().backward(retain_graph=True)
    assert x.grad.tolist() == [20.0, 40.0]
    assert observed == [[20.0, 40.0]]  # hooks run in order: the second sees the replaced grad
    handle.remove()
    x.grad = None
    (h * h).sum().backward()
    assert x.grad.tolist() == [2.0, 4.0]


def test_hook_returning_none_keeps_gradient():
    x = f64(3.0)
    x.register_hook(lambda g: None)
    (x * 2).backward()
    assert x.grad.item() == 2.0


def test_register_hook_on_tensor_without_grad_raises():
    with pytest.raises(RuntimeError, match="register_hook"):
        lucid.tensor([1.0]).register_hook(lambda g: g)


def test_detach_cuts_the_graph_and_shares_memory():
    x = f64(1.0, 2.0)
    d = (x * 2).detach()
    assert not d.requires_grad and d.grad_fn is None
    y = (x * d).sum()
    y.backward()
    assert x.grad.tolist() == [2.0, 4.0]  # d treated as a constant
    base = f64(1.0, 2.0, rg=False)
    view = base.detach()
    view[0] = 9.0
    assert base.tolist() == [9.0, 2.0]


def test_detach_inplace():
    x = f64(1.0)
    h = x * 2
    h.detach_()
    assert h.grad_fn is None and not h.requires_grad


def test_requires_grad_flag_rules():
    x = f64(1.0)
    h = x * 2
    with pytest.raises(RuntimeError, match="leaf"):
        h.requires_grad = False
    with pytest.raises(RuntimeError, match="floating point"):
        lucid.tensor([1, 2]).requires_grad_()
    assert lucid.tensor([1.0]).requires_grad_().requires_grad


def test_integer_outputs_do_not_require_grad():
    x = f64(1.5, 2.5)
    assert not (x > 2).requires_grad
    assert not x.argmax().requires_grad if hasattr(x, "argmax") else True


def test_long_chain_has_no_recursion_limit():
    x = f64(1.0)
    y = x
    gc.disable()  # 100k live nodes make every cyclic-GC pass slow; not what is tested here
    try:
        for _ in range(100_000):
            y = -y
        limit = sys.getrecursionlimit()
        y.sum().backward()
    finally:
        gc.enable()
    assert x.grad.item() == 1.0
    assert sys.getrecursionlimit() == limit


def test_saved_arrays_are_released_after_backward():
    x = lucid.tensor(np.ones(1000), requires_grad=True)
    h = x * 2
    t = h.exp()  # exp saves its output array
    ref = weakref.ref(t.grad_fn.out)
    loss = t.sum()
    del t, h
    gc.collect()
    assert ref() is not None  # alive while the graph is
    loss.backward()
    gc.collect()
    assert ref() is None


def test_graph_is_freed_when_output_dies():
    x = lucid.tensor(np.ones(1000), requires_grad=True)
    t = (x * 2).exp()
    ref = weakref.ref(t.grad_fn.out)
    del t
    gc.collect()
    assert ref() is None


def test_retain_graph_keeps_saved_arrays():
    x = lucid.tensor(np.ones(10), requires_grad=True)
    t = x.exp()
    ref = weakref.ref(t.grad_fn.out)
    loss = t.sum()
    del t
    loss.backward(retain_graph=True)
    gc.collect()
    assert ref() is not None


def test_multiple_roots_backward():
    x = f64(1.0, 2.0)
    a, b = (x * 2).sum(), (x * x).sum()
    lucid.autograd.backward([a, b])
    assert x.grad.tolist() == [4.0, 6.0]


def test_float32_grads_stay_float32():
    x = lucid.tensor([1.0, 2.0], requires_grad=True)
    (x.double() * 3).sum().backward()
    assert x.grad.dtype == lucid.float32 and x.grad.tolist() == [3.0, 3.0]


def test_grad_fn_and_is_leaf():
    x = f64(1.0)
    y = x.exp()
    assert x.is_leaf and not y.is_leaf
    assert y.grad_fn is not None and x.grad_fn is None
    assert "grad_fn=<ExpBackward0>" in repr(y)  # PyTorch spelling
