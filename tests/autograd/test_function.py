"""Custom ``Function`` / ``FunctionCtx`` (seeds 000, 001, 003)."""
import numpy as np
import pytest

import lucid
from lucid.autograd import Function, FunctionCtx, once_differentiable


def f64(*vals, rg=True):
    return lucid.tensor(np.array(vals, dtype=np.float64), requires_grad=rg)


class MyReLU(Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x.clamp(min=0.0)

    @staticmethod
    def backward(ctx, grad_out):
        (x,) = ctx.saved_tensors
        return grad_out * (x > 0).double()


class Exp(Function):  # separate style (seed 003)
    @staticmethod
    def forward(x):
        return x.exp()

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(output)

    @staticmethod
    def backward(ctx, grad_output):
        (result,) = ctx.saved_tensors
        return grad_output * result


class Clamp(Function):  # seed 002: non-tensor inputs get None
    @staticmethod
    def forward(ctx, x, lo, hi):
        ctx.save_for_backward(x)
        ctx.lo, ctx.hi = lo, hi
        return x.clamp(lo, hi)

    @staticmethod
    def backward(ctx, grad_out):
        (x,) = ctx.saved_tensors
        mask = (x >= ctx.lo) & (x <= ctx.hi)
        return grad_out * mask.double(), None, None


def test_combined_style_seed_000():
    x = f64(-1.0, 2.0)
    y = MyReLU.apply(x)
    assert y.tolist() == [0.0, 2.0] and y.grad_fn is not None
    y.sum().backward()
    assert x.grad.tolist() == [0.0, 1.0]


def test_separate_style_seed_003():
    x = f64(0.0, 1.0)
    Exp.apply(x).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), np.exp([0.0, 1.0]))


def test_non_tensor_arguments_seed_002():
    x = f64(-2.0, 0.5, 3.0)
    out = Clamp.apply(x, -1.0, 1.0)
    assert out.tolist() == [-1.0, 0.5, 1.0]
    out.sum().backward()
    assert x.grad.tolist() == [0.0, 1.0, 0.0]
    assert lucid.autograd.gradcheck(lambda t: Clamp.apply(t, -1.0, 1.0), (f64(-2.0, 0.5, 3.0),))


def test_forward_runs_without_recording():
    seen = {}

    class Probe(Function):
        @staticmethod
        def forward(ctx, x):
            seen["enabled"] = lucid.is_grad_enabled()
            y = x * 2
            seen["rg"] = y.requires_grad
            return y

        @staticmethod
        def backward(ctx, g):
            return g * 2

    Probe.apply(f64(1.0)).sum().backward()
    assert seen == {"enabled": False, "rg": False}


def test_no_input_requires_grad_gives_plain_output():
    y = MyReLU.apply(f64(1.0, rg=False))
    assert not y.requires_grad and y.grad_fn is None
    with lucid.no_grad():
        assert MyReLU.apply(f64(1.0)).grad_fn is None


def test_needs_input_grad_and_multiple_outputs():
    captured = {}

    class SumDiff(Function):
        @staticmethod
        def forward(ctx, a, b, k):
            captured["needs"] = ctx.needs_input_grad
            return a + b, (a - b) * k

        @staticmethod
        def backward(ctx, gs, gd):
            return gs + gd * 3, gs - gd * 3, None

    a, b = f64(1.0, 2.0), f64(5.0, 5.0, rg=False)
    s, d = SumDiff.apply(a, b, 3)
    assert captured["needs"] == (True, False, False)
    (s * 2 + d).sum().backward()
    assert a.grad.tolist() == [5.0, 5.0] and b.grad is None


def test_save_for_backward_replaces_and_attributes():
    class Twice(Function):
        @staticmethod
        def forward(ctx, x, y):
            ctx.save_for_backward(x)
            ctx.save_for_backward(y)
            ctx.shape = tuple(x.shape)
            return x * y

        @staticmethod
        def backward(ctx, g):
            saved = ctx.saved_tensors
            assert len(saved) == 1 and ctx.shape == (2,)
            (y,) = saved
            return g * y, None

    x, y = f64(1.0, 2.0), f64(3.0, 4.0, rg=False)
    Twice.apply(x, y).sum().backward()
    assert x.grad.tolist() == [3.0, 4.0]


def test_save_for_backward_rejects_non_tensors():
    class Bad(Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(3)
            return x * 1

        @staticmethod
        def backward(ctx, g):
            return g

    with pytest.raises(TypeError, match="save_for_backward"):
        Bad.apply(f64(1.0))


def test_mark_non_differentiable():
    class SortWithIndex(Function):
        @staticmethod
        def forward(ctx, x):
            idx = lucid.tensor(np.argsort(x.detach().numpy()))
            vals = x[idx]
            mask = vals > 0
            ctx.mark_non_differentiable(mask)
            ctx.save_for_backward(idx)
            return vals, idx, mask

        @staticmethod
        def backward(ctx, gv, gi, gm):
            (idx,) = ctx.saved_tensors
            out = lucid.zeros(*gv.shape, dtype=gv.dtype)
            out[idx] = gv
            return out

    x = f64(3.0, -1.0, 2.0)
    vals, idx, mask = SortWithIndex.apply(x)
    assert not mask.requires_grad and not idx.requires_grad and vals.requires_grad
    (vals * f64(1.0, 2.0, 3.0, rg=False)).sum().backward()
    assert x.grad.tolist() == [3.0, 1.0, 2.0]


def test_set_materialize_grads():
    seen = []

    def make(materialize):
        class Two(Function):
            @staticmethod
            def forward(ctx, x):
                ctx.set_materialize_grads(materialize)
                return x * 1, x * 2

            @staticmethod
            def backward(ctx, g1, g2):
                seen.append((g1 is None, g2 is None))
                total = 0
                for g, k in ((g1, 1), (g2, 2)):
                    if g is not None:
                        total = total + g * k
                return total

        return Two

    x = f64(1.0)
    a, _ = make(True).apply(x)
    a.sum().backward()
    a, _ = make(False).apply(x)
    a.sum().backward()
    assert seen == [(False, False), (False, True)]
    assert x.grad.tolist() == [2.0]


def test_mark_dirty():
    class AddOneInPlace(Function):
        @staticmethod
        def forward(ctx, x):
            x.add_(1.0)
            ctx.mark_dirty(x)
            return x

        @staticmethod
        def backward(ctx, g):
            return g

    w = f64(1.0, 2.0)
    a = w * 3
    out = AddOneInPlace.apply(a)
    assert out is a and a.tolist() == [4.0, 7.0]
    (out * out).sum().backward()
    assert w.grad.tolist() == [2 * 4.0 * 3, 2 * 7.0 * 3]


def test_wrong_number_of_gradients_names_the_function():
    class TooMany(Function):
        @staticmethod
        def forward(ctx, x):
            return x * 1

        @staticmethod
        def backward(ctx, g):
            return g, g

    x = f64(1.0)
    with pytest.raises(RuntimeError, match="TooMany.*incorrect number of gradients.*expected 1, got 2"):
        TooMany.apply(x).sum().backward()
    assert x.grad is None


def test_wrong_gradient_shape_names_the_function():
    class BadShape(Function):
        @staticmethod
        def forward(ctx, x):
            return x * 1

        @staticmethod
        def backward(ctx, g):
            return lucid.ones(3, dtype=g.dtype)

    x = f64(1.0, 2.0)
    with pytest.raises(RuntimeError, match=r"BadShape.*invalid gradient at index 0.*\(3,\).*\(2,\)"):
        BadShape.apply(x).sum().backward()


def test_double_backward_through_function_built_from_lucid_ops():
    class Cube(Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return x ** 3

        @staticmethod
        def backward(ctx, g):
            (x,) = ctx.saved_tensors
            return g * 3 * x ** 2

    x = f64(0.5, 2.0)
    (g,) = lucid.autograd.grad(Cube.apply(x).sum(), [x], create_graph=True)
    np.testing.assert_allclose(g.detach().numpy(), 3 * np.array([0.5, 2.0]) ** 2)
    (h,) = lucid.autograd.grad(g.sum(), [x])
    np.testing.assert_allclose(h.numpy(), 6 * np.array([0.5, 2.0]))
    assert lucid.autograd.gradgradcheck(Cube.apply, (f64(0.3, -0.8),))


def test_once_differentiable_first_order_works_second_raises():
    class Square(Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return x * x

        @staticmethod
        @once_differentiable
        def backward(ctx, g):
            (x,) = ctx.saved_tensors
            return g * 2 * x

    x = f64(3.0)
    Square.apply(x).sum().backward()
    assert x.grad.tolist() == [6.0]
    (g,) = lucid.autograd.grad(Square.apply(x).sum(), [x], create_graph=True)
    assert g.tolist() == [6.0]
    with pytest.raises(RuntimeError, match="once_differentiable"):
        lucid.autograd.grad(g.sum(), [x])


def test_function_base_class_apply_and_instantiation_raise():
    with pytest.raises(RuntimeError, match="base class"):
        Function.apply(f64(1.0))
    with pytest.raises(RuntimeError, match="not instantiated"):
        MyReLU()


def test_second_backward_through_function_needs_retain_graph():
    x = f64(1.0, -1.0)
    y = MyReLU.apply(x).sum()
    y.backward()
    with pytest.raises(RuntimeError, match="retain_graph"):
        y.backward()


def test_function_ctx_is_fresh_per_call():
    ctxs = []

    class Id(Function):
        @staticmethod
        def forward(ctx, x):
            ctxs.append(ctx)
            return x * 1

        @staticmethod
        def backward(ctx, g):
            return g

    Id.apply(f64(1.0))
    Id.apply(f64(1.0))
    assert len(ctxs) == 2 and ctxs[0] is not ctxs[1]
    assert isinstance(ctxs[0], FunctionCtx)


def test_returning_an_input_unchanged_gives_new_tensor():
    class Ident(Function):
        @staticmethod
        def forward(ctx, x):
            return x

        @staticmethod
        def backward(ctx, g):
            return g * 5

    x = f64(1.0)
    y = Ident.apply(x)
    assert y is not x and x.is_leaf and not y.is_leaf
    y.sum().backward()
    assert x.grad.tolist() == [5.0]


def test_function_composes_with_lucid_ops_in_a_graph():
    x = f64(-0.5, 0.25, 1.5)
    y = (MyReLU.apply(x * 2) * Exp.apply(x)).sum()
    y.backward()
    xv = np.array([-0.5, 0.25, 1.5])
    want = (xv > 0) * 2 * np.exp(xv) + np.maximum(2 * xv, 0) * np.exp(xv)
    np.testing.assert_allclose(x.grad.numpy(), want)
