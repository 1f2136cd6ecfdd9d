"""In-place ops, ``x[idx] = v``, version counters (NOTE [In-place semantics] in lucid/ops/inplace.py)."""
import numpy as np
import pytest

import lucid
import lucid.func as F


def f64(*vals, rg=False):
    return lucid.tensor(np.array(vals, dtype=np.float64), requires_grad=rg)


# ------------------------------------------------------------------ no graph


def test_inplace_without_graph_writes_data_and_bumps_version():
    x = f64(1.0, 2.0, 3.0)
    data = x._data
    assert x.add_(1.0, alpha=2.0) is x
    assert x._data is data  # same buffer: written in place
    np.testing.assert_array_equal(x.numpy(), [3.0, 4.0, 5.0])
    x.sub_(f64(1.0, 1.0, 1.0)).mul_(2.0).div_(4.0)
    np.testing.assert_array_equal(x.numpy(), [1.0, 1.5, 2.0])
    x.pow_(2)
    np.testing.assert_array_equal(x.numpy(), [1.0, 2.25, 4.0])
    x.sqrt_().neg_()
    np.testing.assert_array_equal(x.numpy(), [-1.0, -1.5, -2.0])
    x.clamp_(min=-1.75).relu_()
    np.testing.assert_array_equal(x.numpy(), [0.0, 0.0, 0.0])
    x.fill_(2.5)
    np.testing.assert_array_equal(x.numpy(), [2.5, 2.5, 2.5])
    x.exp_().log_()
    np.testing.assert_allclose(x.numpy(), [2.5, 2.5, 2.5])
    x.zero_()
    np.testing.assert_array_equal(x.numpy(), [0.0, 0.0, 0.0])
    assert x._version[0] == 13


def test_operators_iadd_are_in_place():
    x = f64(1.0, 2.0)
    alias = x
    x += 1
    x *= 3
    x -= f64(1.0, 1.0)
    x /= 2
    x **= 2
    assert x is alias
    np.testing.assert_allclose(x.numpy(), [6.25, 16.0])


def test_copy_masked_fill_and_bitwise():
    x = lucid.zeros(2, 3)
    x.copy_(lucid.tensor([1.0, 2.0, 3.0]))
    np.testing.assert_array_equal(x.numpy(), [[1, 2, 3], [1, 2, 3]])
    x.masked_fill_(x > 1.5, -1.0)
    np.testing.assert_array_equal(x.numpy(), [[1, -1, -1], [1, -1, -1]])
    i = lucid.tensor([1, 2, 3])
    i.copy_(lucid.tensor([1.7, -2.2, 3.9]))  # copy_ casts like PyTorch
    np.testing.assert_array_equal(i.numpy(), [1, -2, 3])
    m = lucid.tensor([True, False, True])
    m &= lucid.tensor([True, True, False])
    np.testing.assert_array_equal(m.numpy(), [True, False, False])


def test_views_see_inplace_changes_and_share_version():
    x = lucid.zeros(3, 4)
    row = x[1]
    row.add_(5.0)
    assert x[1].tolist() == [5.0] * 4 and x.sum().item() == 20.0
    assert x._version is row._version and x._version[0] == 1


def test_inplace_dtype_and_shape_errors():
    i = lucid.tensor([1, 2, 3])
    with pytest.raises(RuntimeError, match="add_.*can't be cast.*int64"):
        i.add_(0.5)
    x = lucid.zeros(3)
    with pytest.raises(RuntimeError, match="add_"):
        x.add_(lucid.zeros(2, 3))
    with pytest.raises(RuntimeError, match="read-only"):
        lucid.zeros(3).expand(2, 3).add_(1.0)
    with pytest.raises(RuntimeError, match="fill_: only supports 0-dimension"):
        x.fill_(lucid.zeros(2))
    with pytest.raises(RuntimeError, match="copy_.*broadcast"):
        x.copy_(lucid.zeros(4))


# ----------------------------------------------------------------- the graph


def test_leaf_requiring_grad_can_not_be_changed_in_place():
    w = f64(1.0, 2.0, rg=True)
    with pytest.raises(RuntimeError, match="a leaf Variable that requires grad is being used in an in-place"):
        w.mul_(2)
    with pytest.raises(RuntimeError, match="leaf Variable that requires grad"):
        w[0] = 3.0
    with pytest.raises(RuntimeError, match="view of a leaf Variable"):
        w[:1].add_(1.0)
    assert w.tolist() == [1.0, 2.0] and w._version[0] == 0  # nothing changed
    with lucid.no_grad():  # the optimizer path
        w.sub_(f64(0.5, 0.5))
    assert w.tolist() == [0.5, 1.5] and w.is_leaf and w.requires_grad


def test_inplace_on_non_leaf_rebases_history():
    w = f64(1.0, 2.0, 3.0, rg=True)
    y = w * 2
    y.mul_(w)  # y = 2 w^2
    y.add_(w, alpha=3.0)  # y = 2 w^2 + 3 w
    y.exp_()
    assert not y.is_leaf and y.grad_fn is not None
    y.sum().backward()
    wv = np.array([1.0, 2.0, 3.0])
    np.testing.assert_allclose(w.grad.numpy(), np.exp(2 * wv ** 2 + 3 * wv) * (4 * wv + 3))


def test_inplace_makes_plain_tensor_require_grad():
    w = f64(2.0, rg=True)
    acc = lucid.zeros(1, dtype=lucid.float64)
    for k in range(3):
        acc += w * k  # acc = 3 w
    assert acc.requires_grad and acc.grad_fn is not None
    acc.backward()
    assert w.grad.item() == 3.0


def test_zero_fill_copy_in_graph():
    w = f64(1.0, 2.0, rg=True)
    v = f64(5.0, rg=True)
    y = w * 3
    y.zero_()
    assert y.requires_grad and y.tolist() == [0.0, 0.0]
    (y * 7).sum().backward()
    assert w.grad.tolist() == [0.0, 0.0]
    w.grad = None
    y = w * 3
    y.fill_(v[0])
    (y * f64(1.0, 2.0)).sum().backward()
    assert w.grad.tolist() == [0.0, 0.0] and v.grad.tolist() == [3.0]
    v.grad = None
    z = lucid.zeros(2, dtype=lucid.float64)
    z.copy_(v * w)
    z.sum().backward()
    assert v.grad.tolist() == [3.0] and w.grad.tolist() == [5.0, 5.0]


def test_masked_fill_in_graph():
    w = f64(1.0, 2.0, 3.0, rg=True)
    y = w * w
    y.masked_fill_(lucid.tensor([False, True, False]), 0.0)
    assert y.tolist() == [1.0, 0.0, 9.0]
    y.sum().backward()
    assert w.grad.tolist() == [2.0, 0.0, 6.0]


def test_setitem_gradients_for_both_sides():
    x = f64(1.0, 2.0, 3.0, 4.0, rg=True)
    v = f64(10.0, 20.0, rg=True)
    y = x * 2
    y[1:3] = v * v
    assert y.tolist() == [2.0, 100.0, 400.0, 8.0]
    (y * f64(1.0, 2.0, 3.0, 4.0)).sum().backward()
    assert x.grad.tolist() == [2.0, 0.0, 0.0, 8.0]  # zero at overwritten positions
    assert v.grad.tolist() == [2 * 10.0 * 2, 2 * 20.0 * 3]


def test_setitem_advanced_and_broadcast_value():
    v = f64(3.0, rg=True)
    buf = lucid.zeros(3, 2, dtype=lucid.float64)
    buf[[0, 2]] = v  # broadcast to (2, 2)
    buf[1, 0] = v * 2
    assert buf.tolist() == [[3.0, 3.0], [6.0, 0.0], [3.0, 3.0]]
    buf.sum().backward()
    assert v.grad.item() == 6.0


def test_setitem_mask_and_errors():
    x = lucid.zeros(4)
    x[lucid.tensor([True, False, True, False])] = 1.0
    assert x.tolist() == [1.0, 0.0, 1.0, 0.0]
    with pytest.raises(RuntimeError, match="setitem: shape mismatch"):
        x[:2] = lucid.zeros(3)
    assert x.tolist() == [1.0, 0.0, 1.0, 0.0] and x._version[0] == 1


def test_building_a_tensor_row_by_row_matches_stack():
    w = f64(0.5, -1.0, rg=True)
    out = lucid.zeros(3, 2, dtype=lucid.float64)
    for i in range(3):
        out[i] = w * (i + 1)
    (out ** 2).sum().backward()
    # d/dw sum_i (i w)^2 = 2 w sum i^2 = 28 w
    np.testing.assert_allclose(w.grad.numpy(), 28 * np.array([0.5, -1.0]))


def test_inplace_on_a_view_rebases_the_base():
    w = f64(1.0, 2.0, 3.0, rg=True)
    s = f64(10.0, rg=True)
    y = w * 2
    v = y[1:]
    v.mul_(s)
    assert y.tolist() == [2.0, 40.0, 60.0]
    y.sum().backward()
    assert w.grad.tolist() == [2.0, 20.0, 20.0]
    assert s.grad.tolist() == [4.0 + 6.0]


def test_inplace_on_a_view_of_a_plain_buffer_with_grad_value():
    w = f64(1.0, 2.0, rg=True)
    buf = lucid.zeros(2, 2, dtype=lucid.float64)
    buf[:, 1].copy_(w * w)  # column view: non-contiguous
    assert buf.tolist() == [[0.0, 1.0], [0.0, 4.0]]
    assert buf.requires_grad
    (buf * lucid.tensor([[1.0, 2.0], [3.0, 4.0]], dtype=lucid.float64)).sum().backward()
    assert w.grad.tolist() == [2 * 1.0 * 2, 2 * 2.0 * 4]


def test_inplace_view_gradcheck():
    def f(x, s):
        y = x * 1.0
        y[1:, ::2].mul_(s).add_(s)
        y.t()[0].exp_()
        return y

    x = lucid.tensor(np.linspace(-1, 1, 12).reshape(3, 4), requires_grad=True)
    s = lucid.tensor(np.array([0.3, -0.7]), requires_grad=True)
    assert lucid.autograd.gradcheck(f, (x, s))
    assert lucid.autograd.gradgradcheck(f, (x, s))


# ------------------------------------------------------------ version counter


def test_modified_saved_output_raises_naming_both_ops():
    w = f64(1.0, 2.0, rg=True)
    y = w.exp()
    y.add_(1.0)
    with pytest.raises(RuntimeError) as e:
        y.sum().backward()
    msg = str(e.value)
    assert "output of 'exp'" in msg and "'add_'" in msg and "version 1; expected version 0" in msg


def test_modified_saved_input_raises_naming_both_ops():
    w = f64(1.0, 2.0, rg=True)
    a = w * 1
    y = a * a  # mul saves a
    a[0] = 5.0
    with pytest.raises(RuntimeError, match=r"argument 0 of 'mul'.*'setitem'"):
        y.sum().backward()


def test_modified_through_a_view_or_detached_alias_is_detected():
    w = f64(1.0, 2.0, rg=True)
    y = w.tanh()
    with lucid.no_grad():
        y.detach()[0] = 0.0  # shares the version counter
    with pytest.raises(RuntimeError, match="output of 'tanh'.*setitem"):
        y.sum().backward()


def test_inplace_on_an_unsaved_tensor_is_fine():
    w = f64(1.0, 2.0, rg=True)
    a = w + 1  # add saves nothing
    b = a.sin()  # sin saves a ...
    c = w * 3
    d = c + 1  # ... but c is not saved by anyone
    c.mul_(2)
    (b + d).sum().backward()
    np.testing.assert_allclose(w.grad.numpy(), np.cos(np.array([2.0, 3.0])) + 3)


def test_custom_function_saved_tensor_version_checked():
    class Sq(lucid.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return x * x

        @staticmethod
        def backward(ctx, g):
            (x,) = ctx.saved_tensors
            return 2 * x * g

    w = f64(3.0, rg=True)
    a = w * 1
    y = Sq.apply(a)
    a.add_(1.0)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        y.backward()


# ---------------------------------------------------------------- transforms


def test_inplace_under_vmap_and_grad_is_functional():
    def f(x):
        y = x * 1.0
        y.mul_(x)
        y[0] = y[0] * 3
        return y.sum()

    xs = lucid.tensor(np.array([[1.0, 2.0], [3.0, 4.0]]))
    np.testing.assert_allclose(F.vmap(f)(xs).numpy(), [3 + 4, 27 + 16])
    np.testing.assert_allclose(F.grad(f)(lucid.tensor([1.0, 2.0], dtype=lucid.float64)).numpy(), [6.0, 4.0])
    np.testing.assert_allclose(F.vmap(F.grad(f))(xs).numpy(), [[6.0, 4.0], [18.0, 8.0]])
    _, t = F.jvp(f, (lucid.tensor([1.0, 2.0], dtype=lucid.float64),),
                 (lucid.tensor([1.0, 1.0], dtype=lucid.float64),))
    assert t.item() == pytest.approx(10.0)


def test_inplace_into_unbatched_tensor_with_batched_value_raises():
    def f(x):
        acc = lucid.zeros(2)
        acc.add_(x)
        return acc

    with pytest.raises(RuntimeError, match="add_: can't change a tensor in place with a value of an active vmap"):
        F.vmap(f)(lucid.ones(3, 2))
