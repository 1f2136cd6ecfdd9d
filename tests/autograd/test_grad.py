"""``lucid.autograd.grad`` (seed 004): returns gradients, leaves ``.grad`` alone."""
import numpy as np
import pytest

import lucid
from lucid.autograd import grad


def f64(*vals, rg=True):
    return lucid.tensor(np.array(vals, dtype=np.float64), requires_grad=rg)


def test_seed_example_single_input_returns_a_tensor():
    x = lucid.tensor([1.0, -2.0, 3.0], requires_grad=True)
    dx = grad(lucid.sum(x * x), x)
    assert isinstance(dx, lucid.Tensor)
    assert dx.tolist() == [2.0, -4.0, 6.0]


def test_seed_example_multiple_outputs_and_inputs():
    a = lucid.tensor([2.0, -1.0, 0.5], requires_grad=True)
    b = lucid.tensor([3.0, 4.0, -2.0], requires_grad=True)
    da, db = grad((lucid.sum(a * b), lucid.sum(a * a)), (a, b))
    assert da.tolist() == [7.0, 2.0, -1.0]
    assert db.tolist() == [2.0, -1.0, 0.5]


def test_sequence_of_one_input_returns_a_tuple():
    x = f64(1.0)
    res = grad((x * 3).sum(), [x])
    assert isinstance(res, tuple) and len(res) == 1 and res[0].tolist() == [3.0]


def test_existing_grad_untouched():
    x = f64(1.0, 2.0)
    x.grad = f64(5.0, 5.0, rg=False)
    g = grad((x * x).sum(), x)
    assert g.tolist() == [2.0, 4.0]
    assert x.grad.tolist() == [5.0, 5.0]
    y = f64(1.0)
    grad((y * 2).sum(), y)
    assert y.grad is None


def test_grad_outputs_seed_and_default_ones():
    x = f64(1.0, 2.0)
    y = x * x
    g = grad(y, x, grad_outputs=f64(1.0, 10.0, rg=False), retain_graph=True)
    assert g.tolist() == [2.0, 40.0]
    assert grad(y, x).tolist() == [2.0, 4.0]  # ones for a non-scalar output (seed 004)


def test_grad_outputs_list_for_several_outputs():
    x = f64(1.0, 2.0)
    g = grad([x * 2, x * 3], [x], grad_outputs=[f64(1.0, 0.0, rg=False), f64(0.0, 1.0, rg=False)])
    assert g[0].tolist() == [2.0, 3.0]


def test_unused_input_raises_and_changes_nothing():
    a, b = f64(1.0), f64(2.0)
    out = (a * 3).exp().sum()
    with pytest.raises(RuntimeError, match=r"inputs\[1\].*allow_unused=True"):
        grad(out, [a, b])
    # the graph was not freed by the failed call
    assert grad(out, a).tolist() == pytest.approx([3 * np.exp(3.0)])


def test_allow_unused_returns_none_and_materialize_grads_zeros():
    a, b = f64(1.0), f64(2.0, 3.0)
    out = (a * 3).sum()
    ga, gb = grad(out, [a, b], allow_unused=True, retain_graph=True)
    assert ga.tolist() == [3.0] and gb is None
    ga, gb = grad(out, [a, b], materialize_grads=True)
    assert gb.tolist() == [0.0, 0.0]


def test_output_without_grad_raises():
    x = f64(1.0)
    with pytest.raises(RuntimeError, match="does not require grad"):
        grad(lucid.tensor([1.0]).sum(), x)


def test_input_without_grad_raises():
    x = f64(1.0)
    with pytest.raises(RuntimeError, match=r"inputs\[0\] does not require grad"):
        grad((x * 2).sum(), f64(1.0, rg=False))


def test_grad_wrt_non_leaf():
    x = f64(1.0, 2.0)
    h = x * 3
    out = (h * h).sum()
    assert grad(out, h).tolist() == [6.0, 12.0]


def test_retain_graph_default_frees():
    x = f64(1.0)
    out = x.exp().sum()
    grad(out, x)
    with pytest.raises(RuntimeError, match="retain_graph"):
        grad(out, x)


def test_create_graph_result_is_differentiable():
    x = f64(0.5, 1.5)
    g = grad((x ** 3).sum(), x, create_graph=True)
    assert g.requires_grad
    h = grad(g.sum(), x)
    np.testing.assert_allclose(h.numpy(), 6 * np.array([0.5, 1.5]))


def test_grad_does_not_touch_grad_of_other_leaves():
    x, w = f64(1.0), f64(2.0)
    out = (x * w).sum()
    grad(out, x)
    assert w.grad is None and x.grad is None


def test_grad_dtype_follows_input():
    x = lucid.tensor([1.0, 2.0], requires_grad=True)
    g = grad((x.double() ** 2).sum(), x)
    assert g.dtype == lucid.float32 and g.tolist() == [2.0, 4.0]


@pytest.mark.parametrize("make", [lambda p: p - 0.1 * lucid.tensor([0.5, 0.5]), lambda p: p * 2.0,
                                  lambda p: p.exp(), lambda p: p * lucid.tensor([3.0, -1.0])],
                         ids=["sub", "mul_scalar", "exp", "mul_tensor"])
def test_grad_wrt_a_non_leaf_keeps_the_graph_behind_it(make):
    """``autograd.grad(loss, [f])`` stops at the non-leaf ``f``: the node that made ``f`` is
    pruned (it does not run) and keeps what it saved, so a later backward through it works, as
    in PyTorch (MAML's first-order inner loop: grads w.r.t. fast weights, then the query loss's
    backward to the slow ones). The nodes that ran are freed as before."""
    p = lucid.tensor([1.0, 2.0], requires_grad=True, dtype=lucid.float64)
    f = make(p)
    fv = f.detach().numpy().copy()
    sq = f * f
    (gf,) = lucid.autograd.grad(sq.sum(), [f])
    np.testing.assert_allclose(gf.numpy(), 2 * fv)
    (f * 3).sum().backward()
    eps = 1e-6
    fd = [(make(lucid.tensor(np.array([1.0, 2.0]) + eps * e, dtype=lucid.float64)).sum().item()
           - make(lucid.tensor(np.array([1.0, 2.0]) - eps * e, dtype=lucid.float64)).sum().item()) * 3 / (2 * eps)
          for e in np.eye(2)]
    np.testing.assert_allclose(p.grad.numpy(), fd, rtol=1e-6)
    with pytest.raises(RuntimeError, match="second time"):
        sq.sum().backward()  # 'mul' ran in the first backward and was freed
