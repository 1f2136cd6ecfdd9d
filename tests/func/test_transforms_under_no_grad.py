"""Transforms called under ``no_grad`` give results without a graph to the tensors ``f`` closes over,
as PyTorch's (NOTE [Transforms under no_grad]); with grad enabled they keep it, and values agree."""
import numpy as np
import pytest

import lucid
import lucid.func as F

W0 = np.array([[-0.5, 0.8], [-0.7, -0.2]])
Y0 = np.array([1.0, 2.0])


def _calls(W):
    f = lambda y: lucid.tanh(W @ y)  # noqa: E731
    loss = lambda y: f(y).sum()  # noqa: E731
    y = lucid.tensor(Y0)
    ys = lucid.stack([y, 2 * y])
    return {"jacrev": lambda: F.jacrev(f)(y), "jacfwd": lambda: F.jacfwd(f)(y), "grad": lambda: F.grad(loss)(y),
            "vjp_out": lambda: F.vjp(f, y)[0], "vjp_fn": lambda: F.vjp(f, y)[1](lucid.ones(2, dtype=lucid.float64))[0],
            "vmap_grad": lambda: F.vmap(F.grad(loss))(ys), "vmap": lambda: F.vmap(f)(ys),
            "hessian": lambda: F.hessian(loss)(y), "grad_and_value": lambda: F.grad_and_value(loss)(y)[1]}


@pytest.mark.parametrize("name", sorted(_calls(None)))
def test_no_graph_under_no_grad_and_same_values(name):
    W = lucid.tensor(W0, requires_grad=True)
    call = _calls(W)[name]
    with lucid.no_grad():
        quiet = call()
    loud = call()
    assert not quiet.requires_grad and quiet.grad_fn is None
    assert loud.requires_grad  # with grad on, the result still depends on W (higher order through it)
    np.testing.assert_array_equal(quiet.numpy(), loud.detach().numpy())


def test_grad_value_matches_closed_form_and_differentiates_through_w_when_enabled():
    W = lucid.tensor(W0, requires_grad=True)
    g = F.grad(lambda y: lucid.tanh(W @ y).sum())(lucid.tensor(Y0))
    want = W0.T @ (1 - np.tanh(W0 @ Y0) ** 2)
    np.testing.assert_allclose(g.detach().numpy(), want, rtol=1e-14)
    g.sum().backward()  # d/dW of sum(W^T (1 - tanh(Wy)^2)) by finite differences
    eps, fd = 1e-6, np.zeros_like(W0)
    for i in range(2):
        for j in range(2):
            d = np.zeros_like(W0)
            d[i, j] = eps
            h = lambda M: (M.T @ (1 - np.tanh(M @ Y0) ** 2)).sum()  # noqa: E731
            fd[i, j] = (h(W0 + d) - h(W0 - d)) / (2 * eps)
    np.testing.assert_allclose(W.grad.numpy(), fd, rtol=1e-7, atol=1e-9)


def test_matches_torch():
    torch = pytest.importorskip("torch")
    Wt = torch.tensor(W0, requires_grad=True)
    with torch.no_grad():
        theirs = torch.func.grad(lambda y: torch.tanh(Wt @ y).sum())(torch.tensor(Y0))
    W = lucid.tensor(W0, requires_grad=True)
    with lucid.no_grad():
        ours = F.grad(lambda y: lucid.tanh(W @ y).sum())(lucid.tensor(Y0))
    assert ours.requires_grad == theirs.requires_grad is False
    np.testing.assert_allclose(ours.numpy(), theirs.numpy(), rtol=1e-15)
