"""autograd.graph.allow_mutation_on_saved_tensors: saved tensors are cloned before an in-place
change, so the backward sees the values of the forward (closed forms in float64)."""
import numpy as np
import pytest

import lucid
from lucid.autograd.graph import allow_mutation_on_saved_tensors

A0 = np.array([0.5, 1.0, 2.0])


def _expected(a):  # d/da sum(sin(a) * a)
    return np.cos(a) * a + np.sin(a)


def test_in_place_ops_views_and_setitem_after_saving_leave_the_gradient_of_the_forward():
    with allow_mutation_on_saved_tensors() as ctx:
        a = lucid.tensor(A0, requires_grad=True)
        b = a.clone()
        out = (b.sin() * b).sum()
        b.mul_(3.0)
        b[0] = 7.0
        b[1:].add_(1.0)  # through a view
        assert len(ctx.cloned) >= 1
        out.backward()
    np.testing.assert_allclose(a.grad.numpy(), _expected(A0), rtol=1e-12)
    np.testing.assert_allclose(b.detach().numpy(), [7.0, 4.0, 7.0])
    assert len(ctx.original) == 0 and len(ctx.cloned) == 0  # cleared on exit


def test_a_weight_changed_under_no_grad_between_forward_and_backward():
    with allow_mutation_on_saved_tensors():
        x = lucid.tensor(A0, requires_grad=True)
        w = lucid.tensor([2.0, -1.0, 0.5], requires_grad=True)
        y = (x * w).sum()
        with lucid.no_grad():
            w.sub_(10.0)
        y.backward()
    np.testing.assert_allclose(x.grad.numpy(), [2.0, -1.0, 0.5])
    np.testing.assert_allclose(w.grad.numpy(), A0)


def test_custom_function_save_for_backward_is_covered():
    class Square(lucid.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return x * x

        @staticmethod
        def backward(ctx, g):
            (x,) = ctx.saved_tensors
            return 2 * x * g

    with allow_mutation_on_saved_tensors():
        a = lucid.tensor(A0, requires_grad=True)
        b = a * 1.0
        out = Square.apply(b).sum()
        b.zero_()
        out.backward()
    np.testing.assert_allclose(a.grad.numpy(), 2 * A0)


def test_without_the_context_the_backward_still_refuses():
    a = lucid.tensor(A0, requires_grad=True)
    b = a.clone()
    out = (b * b).sum()
    b.sin_()
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        out.backward()


def test_backward_after_the_context_ended_raises():
    with allow_mutation_on_saved_tensors():
        a = lucid.tensor(A0, requires_grad=True)
        b = a.clone()
        out = (b * b).sum()
        b.sin_()
    with pytest.raises(AssertionError, match="outside of the 'allow_mutation_on_saved_tensors'"):
        out.backward()


def test_contexts_cannot_be_nested_and_the_outer_one_keeps_working():
    with allow_mutation_on_saved_tensors():
        with pytest.raises(RuntimeError, match="cannot be nested"):
            with allow_mutation_on_saved_tensors():
                pass
        a = lucid.tensor(A0, requires_grad=True)
        b = a.clone()
        out = (b * b).sum()
        b.add_(5.0)
        out.backward()
    np.testing.assert_allclose(a.grad.numpy(), 2 * A0)
    # after it ended, in-place ops cost nothing extra and the usual check is back
    x = lucid.ones(2)
    x.add_(1.0)
    assert x.tolist() == [2.0, 2.0]


def test_unchanged_saved_tensors_are_not_copied():
    with allow_mutation_on_saved_tensors() as ctx:
        a = lucid.tensor(A0, requires_grad=True)
        b = a.clone()
        c = lucid.tensor([1.0, 1.0, 1.0])
        out = (b * b).sum() + (a * a).sum()
        c.add_(1.0)  # not saved by anything: nothing cloned
        assert len(ctx.cloned) == 0
        out.backward()
    np.testing.assert_allclose(a.grad.numpy(), 4 * A0)
