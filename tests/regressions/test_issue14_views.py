"""Views under in-place ops (issue 14): views made before an in-place change of their base
get the base's new history (NOTE [View replay]); ops PyTorch documents as views are views."""
import numpy as np
import pytest

import lucid


def leaf(values):
    return lucid.tensor(np.asarray(values, dtype=np.float64), requires_grad=True)


def test_slice_view_sees_later_mul_of_base():
    x = leaf([1.0, 2.0, 3.0])
    a = x.clone()
    v = a[0:2]
    a.mul_(2)
    np.testing.assert_array_equal(v.detach().numpy(), [2.0, 4.0])
    v.sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [2.0, 2.0, 0.0])


def test_transpose_view_sees_setitem_of_base():
    x = leaf([[1.0, 2.0], [3.0, 4.0]])
    y = x.clone()
    v = y.t()
    y[0, 1] = 10.0
    np.testing.assert_array_equal(v.detach().numpy(), [[1.0, 3.0], [10.0, 4.0]])
    (v * lucid.tensor([[1.0, 2.0], [3.0, 4.0]], dtype=lucid.float64)).sum().backward()
    # v = y.t(): d/dy[i, j] of sum(v * c) is c[j, i]; y[0, 1] was overwritten by a constant
    np.testing.assert_array_equal(x.grad.numpy(), [[1.0, 0.0], [2.0, 4.0]])


def test_zero_dim_integer_view_value_and_gradient():
    x = leaf([1.0, 2.0, 3.0])
    y = x * 1
    v = y[0]
    y.mul_(3)
    assert v.item() == 3.0
    v.backward()
    np.testing.assert_array_equal(x.grad.numpy(), [3.0, 0.0, 0.0])


def test_view_of_view_and_sibling_views_replay_in_order():
    x = leaf(np.arange(6.0))
    y = x * 1
    m = y.view(2, 3)
    row = m[1]          # a view of a view
    col = m[:, 0]       # a sibling
    row.add_(row)       # doubles y[3:6] through the view: y, m and col get new histories
    np.testing.assert_array_equal(y.detach().numpy(), [0, 1, 2, 6, 8, 10])
    np.testing.assert_array_equal(col.detach().numpy(), [0, 6])
    (col * lucid.tensor([1.0, 10.0], dtype=lucid.float64)).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [1, 0, 0, 20, 0, 0])


def test_view_made_without_grad_joins_the_graph_after_inplace():
    a = lucid.zeros(3, dtype=lucid.float64)
    v = a[:2]
    x = leaf([1.0, 2.0, 3.0])
    a.add_(x * x)
    assert v.requires_grad
    v.sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [2.0, 4.0, 0.0])


def test_matches_pytorch_on_replayed_views():
    torch = pytest.importorskip("torch")
    data = np.array([[0.5, -1.0, 2.0], [1.5, 0.25, -0.75], [3.0, 1.0, 2.0]])

    def program(lib, x):
        y = x * 1
        d = y.diagonal()
        r = y[1]
        t = y.t()
        y.mul_(y.detach() + 1)  # depends on the old value through a constant
        r.add_(2)
        return (d * 3).sum() + (t * t).sum() + r.sum()

    lx = leaf(data)
    program(lucid, lx).backward()
    tx = torch.tensor(data, requires_grad=True)
    program(torch, tx).backward()
    np.testing.assert_allclose(lx.grad.numpy(), tx.grad.numpy(), rtol=1e-12)


def test_weight_views_are_not_registered():
    w = leaf(np.ones((3, 2)))
    for _ in range(200):
        (w.t() @ lucid.ones(3, 1, dtype=lucid.float64)).sum()
    assert w._views is None


def test_view_registry_stays_bounded():
    y = leaf(np.ones(4)) * 2
    for _ in range(1000):
        y[1:3].sum()
    assert len(y._views) <= 64


# --- ops that PyTorch documents as views ---------------------------------------------------

def test_diagonal_is_a_view_that_writes_through():
    x = lucid.zeros(3, 3)
    x.diagonal().fill_(1.0)
    np.testing.assert_array_equal(x.numpy(), np.eye(3))
    y = lucid.zeros(2, 3, 4)
    y.diagonal(1, 1, 2).copy_(lucid.tensor(np.arange(6.0).reshape(2, 3)))
    expected = np.zeros((2, 3, 4))
    for b in range(2):
        for i in range(3):
            expected[b, i, i + 1] = 3 * b + i
    np.testing.assert_array_equal(y.numpy(), expected)
    assert tuple(lucid.zeros(2, 0).diagonal().shape) == (0,)


def test_diagonal_gradient_after_inplace_change_of_base():
    a = leaf(np.arange(9.0).reshape(3, 3))
    b = a * 1
    d = b.diagonal()
    b.mul_(2)
    d.sum().backward()
    np.testing.assert_array_equal(a.grad.numpy(), 2 * np.eye(3))


def test_view_on_non_contiguous_raises_and_reshape_copies():
    x = lucid.arange(6.0).reshape(2, 3)
    assert tuple(x.view(3, 2).shape) == (3, 2)
    with pytest.raises(RuntimeError, match=r"view: .*Use \.reshape"):
        x.t().view(6)
    np.testing.assert_array_equal(x.t().reshape(6).numpy(), [0, 3, 1, 4, 2, 5])
    assert tuple(x.t().view(3, 2).shape) == (3, 2)  # no change of shape needs no copy


def test_inplace_change_through_an_empty_view_keeps_its_operands_in_the_graph():
    # found by tests/fuzz: an empty view shares no bytes, so it was not taken for a view
    x = lucid.zeros(1, 0, dtype=lucid.float64, requires_grad=True)
    y = lucid.zeros(1, 0, dtype=lucid.float64, requires_grad=True)
    c = x * 1
    row = c[0]
    row.add_(y.sum().sin())
    c.sum().backward()
    assert x.grad.shape == (1, 0) and y.grad is not None and y.grad.shape == (1, 0)
