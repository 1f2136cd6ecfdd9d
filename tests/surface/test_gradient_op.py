"""lucid.gradient: numpy.gradient's numbers (torch.gradient's API), differentiable, batched."""
import numpy as np
import pytest

import lucid
import lucid.func as F


def _host(t):
    return t.detach().cpu().numpy()


@pytest.mark.parametrize("edge_order", [1, 2])
def test_matches_numpy(edge_order):
    rng = np.random.default_rng(0)
    a = rng.standard_normal((5, 4, 6))
    xs = np.cumsum(rng.random(6) + 0.1)
    cases = [
        (lucid.gradient(lucid.tensor(a), edge_order=edge_order), np.gradient(a, edge_order=edge_order)),
        (lucid.gradient(lucid.tensor(a), spacing=[2.0, 0.5], dim=(0, 2), edge_order=edge_order),
         np.gradient(a, 2.0, 0.5, axis=(0, 2), edge_order=edge_order)),
        (lucid.gradient(lucid.tensor(a), spacing=0.25, dim=-1, edge_order=edge_order),
         [np.gradient(a, 0.25, axis=-1, edge_order=edge_order)]),
        (lucid.gradient(lucid.tensor(a), spacing=[lucid.tensor(xs)], dim=2, edge_order=edge_order),
         [np.gradient(a, xs, axis=2, edge_order=edge_order)]),
    ]
    for got, want in cases:
        assert len(got) == len(want)
        for g, w in zip(got, want):
            np.testing.assert_allclose(_host(g), w, rtol=1e-12, atol=1e-12)
    # exact for a quadratic with edge_order 2 (uneven points too)
    q = lucid.tensor(xs ** 2)
    if edge_order == 2:
        np.testing.assert_allclose(_host(lucid.gradient(q, spacing=[lucid.tensor(xs)], edge_order=2)[0]), 2 * xs, rtol=1e-10)
    assert lucid.gradient(lucid.tensor([1, 4, 9]))[0].dtype is lucid.float32  # integers: the default dtype


def test_differentiable_and_batched():
    rng = np.random.default_rng(1)
    x = lucid.tensor(rng.standard_normal((4, 5)), requires_grad=True)
    w = lucid.tensor(rng.standard_normal((4, 5)))
    assert lucid.autograd.gradcheck(lambda t: (lucid.gradient(t, edge_order=2)[1] * w).sum(), (x,))
    batch = lucid.tensor(rng.standard_normal((3, 4, 5)))
    got = F.vmap(lambda t: lucid.gradient(t, dim=1)[0])(batch)
    want = lucid.stack([lucid.gradient(batch[i], dim=1)[0] for i in range(3)])
    np.testing.assert_allclose(_host(got), _host(want), rtol=1e-12)


def test_bad_arguments_raise():
    with pytest.raises(RuntimeError, match="gradient: expected each dimension size to be at least edge_order\\+1"):
        lucid.gradient(lucid.ones(2), edge_order=2)
    with pytest.raises(RuntimeError, match="gradient: only edge_order=1 and edge_order=2"):
        lucid.gradient(lucid.ones(4), edge_order=3)
    with pytest.raises(RuntimeError, match="a list of length 1"):
        lucid.gradient(lucid.ones(4), spacing=[1.0, 2.0])
    with pytest.raises(RuntimeError, match="coordinates along dim 0 have 3 entries for 4 samples"):
        lucid.gradient(lucid.ones(4), spacing=[lucid.tensor([0.0, 1.0, 2.0])])


def test_matches_torch():
    torch = pytest.importorskip("torch")
    a = np.random.default_rng(2).standard_normal((4, 6))
    xs = np.cumsum(np.random.default_rng(3).random(6) + 0.1)
    got = lucid.gradient(lucid.tensor(a), spacing=[lucid.tensor(xs)], dim=1, edge_order=2)[0]
    want = torch.gradient(torch.tensor(a), spacing=[torch.tensor(xs)], dim=1, edge_order=2)[0]
    np.testing.assert_allclose(_host(got), want.numpy(), rtol=1e-12, atol=1e-12)
