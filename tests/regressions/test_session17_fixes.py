"""Session 17's own fixes (the lead's): each test fails on the code before it."""
import numpy as np
import pytest

import lucid


def test_backward_create_graph_constant_grad_has_a_zero_second_derivative():
    # .backward(create_graph=True) left a relu's .grad without a graph, so differentiating
    # x.grad again raised "does not require grad"; PyTorch's .grad requires grad (zeros)
    import lucid.nn.functional as F

    x = lucid.tensor([1.5, -2.0, 0.5], dtype=lucid.float64, requires_grad=True)
    F.relu(x).sum().backward(create_graph=True)
    assert x.grad.requires_grad
    np.testing.assert_array_equal(x.grad.detach().numpy(), [1.0, 0.0, 1.0])
    (h,) = lucid.autograd.grad(x.grad.sum(), [x], retain_graph=True)  # the next .grad adds to this graph
    np.testing.assert_array_equal(h.numpy(), np.zeros(3))
    # accumulating a second constant gradient keeps the values and the graph
    F.relu(x).sum().backward(create_graph=True)
    np.testing.assert_array_equal(x.grad.detach().numpy(), [2.0, 0.0, 2.0])
    (h,) = lucid.autograd.grad(x.grad.sum(), [x])
    np.testing.assert_array_equal(h.numpy(), np.zeros(3))
    # a gradient with a graph of its own is stored as it is: d/dx sum(d/dx sum(x^3)) = 6x
    x.grad = None
    (x ** 3).sum().backward(create_graph=True)
    (h,) = lucid.autograd.grad(x.grad.sum(), [x])
    np.testing.assert_allclose(h.numpy(), 6 * x.detach().numpy())


def test_backward_create_graph_constant_grad_parity_with_pytorch():
    torch = pytest.importorskip("torch")
    import lucid.nn.functional as F

    xs = [1.5, -2.0, 0.5, 3.0]
    x = lucid.tensor(xs, dtype=lucid.float64, requires_grad=True)
    t = torch.tensor(xs, dtype=torch.float64, requires_grad=True)
    F.hardtanh(x * 2).sum().backward(create_graph=True)
    torch.nn.functional.hardtanh(t * 2).sum().backward(create_graph=True)
    assert x.grad.requires_grad and t.grad.requires_grad
    np.testing.assert_array_equal(x.grad.detach().numpy(), t.grad.detach().numpy())
    w = [1.0, 2.0, 3.0, 4.0]
    (h,) = lucid.autograd.grad((x.grad * lucid.tensor(w, dtype=lucid.float64)).sum(), [x])
    (th,) = torch.autograd.grad((t.grad * torch.tensor(w, dtype=torch.float64)).sum(), [t])
    np.testing.assert_array_equal(h.numpy(), th.numpy())
