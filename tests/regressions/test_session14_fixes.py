"""Session 14's own fixes (the lead's), each checked against closed forms; the optional PyTorch
comparisons skip cleanly without torch."""
import warnings

import numpy as np
import pytest

import lucid


def test_mark_dirty_on_a_view_rebases_the_base():
    # a custom Function that changes a view in place: the base's history must include the
    # Function's backward (row 0 of x.grad lacked the factor 2 before)
    class Double(lucid.autograd.Function):
        @staticmethod
        def forward(ctx, v):
            ctx.mark_dirty(v)
            v.mul_(2)
            return v

        @staticmethod
        def backward(ctx, g):
            return g * 2

    x = lucid.ones(2, 3, dtype=lucid.float64, requires_grad=True)
    y = x * 1
    out = Double.apply(y[0])
    weights = lucid.arange(6.0, dtype=lucid.float64).reshape(2, 3)
    (y * weights).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [[0.0, 2.0, 4.0], [3.0, 4.0, 5.0]])
    assert out.tolist() == [2.0, 2.0, 2.0] and y.tolist() == [[2.0] * 3, [1.0] * 3]
    leaf = lucid.ones(3, requires_grad=True)
    with pytest.raises(RuntimeError, match="a view of a leaf Variable that requires grad"):
        Double.apply(leaf[:2])


def test_grad_takes_the_leafs_layout():
    # PyTorch's layout contract: a backward through x.t() gave .grad transposed strides
    x = lucid.ones(2, 3, dtype=lucid.float64, requires_grad=True)
    c = lucid.arange(6.0, dtype=lucid.float64).reshape(3, 2)
    (x.t() * c).sum().backward()
    assert x.grad.stride() == (3, 1) and x.grad.is_contiguous()
    np.testing.assert_allclose(x.grad.numpy(), [[0.0, 2.0, 4.0], [1.0, 3.0, 5.0]])
    y = lucid.ones(3, 2, dtype=lucid.float64).t().requires_grad_()  # a transposed leaf keeps its own
    (y * 2).sum().backward()
    assert y.grad.stride() == y.stride() == (1, 2)
    x.grad.zero_()  # still a buffer of its own
    assert x.grad.sum().item() == 0.0


def test_loss_warnings_point_at_the_callers_line():
    F = lucid.nn.functional
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        F.mse_loss(lucid.ones(3), lucid.ones(3, 1))
        F.kl_div(lucid.ones(3), lucid.ones(3))
        F.l1_loss(lucid.ones(3), lucid.ones(3), size_average=True)
        F.grid_sample(lucid.ones(1, 1, 2, 2), lucid.zeros(1, 1, 1, 2))
    assert len(caught) == 4 and all(w.filename == __file__ for w in caught)


def test_assert_is_a_function_that_fx_records():
    # torch._assert: the traceable assert (PyTorch's fx graphs call it)
    lucid._assert(lucid.tensor(True), "never raised")
    with pytest.raises(AssertionError, match="^one is not two$"):
        lucid._assert(1 == 2, "one is not two")
    import lucid.fx as fx

    def f(x):
        lucid._assert(x.shape[0] == 2, "batch of two")
        return x * 2

    gm = fx.symbolic_trace(f)
    assert "lucid._assert(eq, 'batch of two')" in gm.code
    assert gm.graph.eliminate_dead_code() is False  # the check is kept
    assert gm(lucid.ones(2)).tolist() == [2.0, 2.0]
    with pytest.raises(AssertionError, match="batch of two"):
        gm(lucid.ones(3))


@pytest.mark.parametrize("call", [lambda t: t.unsafe_split(2), lambda t: t.unsafe_chunk(2),
                                  lambda t: t.unsafe_split_with_sizes([2, 2])])
def test_unsafe_split_pieces_may_change_in_place(call):
    # PyTorch refuses in-place changes of split's pieces but not of the unsafe variants'
    w = lucid.ones(4, dtype=lucid.float64, requires_grad=True)
    a, b = call(w * 1)
    a.mul_(2)
    (a.sum() + 3 * b.sum()).backward()
    assert w.grad.tolist() == [2.0, 2.0, 3.0, 3.0]
    with pytest.raises(RuntimeError, match="output 0 of split"):
        (w * 1).split(2)[0].mul_(2)


def test_layers_call_the_functional_a_dispatcher_installed_later():
    # nn.MaxPool2d kept F.max_pool2d as imported, so a quantized tensor (whose dispatch is
    # switched on by the first quantized tensor) failed through the layer but not the function
    q = lucid.quantize_per_tensor(lucid.arange(16.0).reshape(1, 1, 4, 4), 0.5, 2, lucid.quint8)
    out = lucid.nn.MaxPool2d(2)(q)
    assert out.int_repr().tolist() == lucid.nn.functional.max_pool2d(q, 2).int_repr().tolist()
    assert out.dequantize().tolist() == [[[[5.0, 7.0], [13.0, 15.0]]]]
