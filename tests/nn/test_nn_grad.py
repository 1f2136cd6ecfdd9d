"""nn.grad: convolution adjoints against autograd (float64) and PyTorch (optional)."""
import numpy as np
import pytest

import lucid
import lucid.nn.functional as F
from lucid.nn import grad as G

CASES = [  # nd, input shape, weight shape, stride, padding, dilation, groups
    (1, (2, 4, 9), (6, 2, 3), 2, 1, 1, 2),
    (2, (2, 3, 7, 6), (4, 3, 3, 2), (2, 1), (1, 0), (1, 2), 1),
    (3, (1, 2, 5, 4, 5), (2, 1, 2, 2, 3), 1, 1, 1, 2),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"conv{c[0]}d")
def test_adjoints_match_autograd(case):
    nd, xs, ws, stride, padding, dilation, groups = case
    rng = np.random.default_rng(nd)
    x = lucid.tensor(rng.standard_normal(xs), requires_grad=True)
    w = lucid.tensor(rng.standard_normal(ws), requires_grad=True)
    conv = {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}[nd]
    y = conv(x, w, None, stride, padding, dilation, groups)
    g = lucid.tensor(rng.standard_normal(tuple(y.shape)))
    gx, gw = lucid.autograd.grad(y, (x, w), g)
    fin = getattr(G, f"conv{nd}d_input")(xs, w.detach(), g, stride, padding, dilation, groups)
    fw = getattr(G, f"conv{nd}d_weight")(x.detach(), ws, g, stride, padding, dilation, groups)
    np.testing.assert_allclose(fin.numpy(), gx.numpy(), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(fw.numpy(), gw.numpy(), rtol=1e-12, atol=1e-12)


def test_results_are_differentiable_again():
    rng = np.random.default_rng(0)
    w = lucid.tensor(rng.standard_normal((2, 1, 3)), requires_grad=True)
    g = lucid.tensor(rng.standard_normal((1, 2, 4)), requires_grad=True)
    f = lambda w_, g_: (G.conv1d_input((1, 1, 6), w_, g_) ** 2).sum()  # noqa: E731
    assert lucid.autograd.gradcheck(f, (w, g))


def test_bad_sizes_name_the_function():
    w = lucid.ones(1, 1, 2)
    with pytest.raises(RuntimeError, match="^conv1d_input: grad_output has shape"):
        G.conv1d_input((1, 1, 3), w, lucid.ones(1, 1, 5))
    with pytest.raises(ValueError, match="^conv2d_weight: weight_size must have 4 entries"):
        G.conv2d_weight(lucid.ones(1, 1, 3, 3), (1, 1, 2), lucid.ones(1, 1, 2, 2))


def test_functional_spelling():
    assert F.grad is G


def test_against_torch():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(3)
    x, w = rng.standard_normal((2, 4, 6, 5)), rng.standard_normal((6, 2, 3, 3))
    g = rng.standard_normal((2, 6, 3, 5))
    args = dict(stride=(2, 1), padding=1, dilation=1, groups=2)
    want_x = torch.nn.grad.conv2d_input(x.shape, torch.tensor(w), torch.tensor(g), **args).numpy()
    want_w = torch.nn.grad.conv2d_weight(torch.tensor(x), w.shape, torch.tensor(g), **args).numpy()
    np.testing.assert_allclose(G.conv2d_input(x.shape, lucid.tensor(w), lucid.tensor(g), **args).numpy(),
                               want_x, rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(G.conv2d_weight(lucid.tensor(x), w.shape, lucid.tensor(g), **args).numpy(),
                               want_w, rtol=1e-10, atol=1e-10)
