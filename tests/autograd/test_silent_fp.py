"""Division by zero and similar: inf/nan gradients, no exception, no NumPy warning (issue 8, item 2)."""
import warnings

import numpy as np
import pytest

import lucid
from conftest import assert_closed_form
import lucid.func as F

X = [1.0, 0.0, -1.0, 2.0]
inf, nan = np.inf, np.nan

# (function, expected forward, expected gradient of the sum), closed forms as in PyTorch
CASES = {
    "x / 0.0": (lambda x: x / 0.0, [inf, nan, -inf, inf], [inf] * 4),
    "0.0 / x": (lambda x: 0.0 / x, [0.0, nan, -0.0, 0.0], [-0.0, nan, -0.0, -0.0]),
    "x ** -1.0": (lambda x: x ** -1.0, [1.0, inf, -1.0, 0.5], [-1.0, -inf, -1.0, -0.25]),
    "0.0 ** x": (lambda x: 0.0 ** x, [0.0, 1.0, inf, 0.0], [0.0, 0.0, -inf, 0.0]),
    "log": (lambda x: x.log(), [0.0, -inf, nan, np.log(2)], [1.0, inf, -1.0, 0.5]),
    "sqrt": (lambda x: x.sqrt(), [1.0, 0.0, nan, np.sqrt(2)], [0.5, inf, nan, 0.5 / np.sqrt(2)]),
    "reciprocal": (lambda x: x.reciprocal(), [1.0, inf, -1.0, 0.5], [-1.0, -inf, -1.0, -0.25]),
    "exp overflow": (lambda x: (x * 1000).exp(), [inf, 1.0, 0.0, inf], [inf, 1000.0, 0.0, inf]),
    "x % 0.0": (lambda x: x % 0.0, [nan] * 4, [1.0] * 4),
    "2.0 ** (x * 800)": (lambda x: 2.0 ** (x * 800), [2.0 ** 800, 1.0, 2.0 ** -800, inf],
                         [800 * np.log(2) * 2.0 ** 800, 800 * np.log(2), 800 * np.log(2) * 2.0 ** -800, inf]),
}


@pytest.mark.parametrize("name", list(CASES))
def test_no_exception_no_warning_and_torch_values(name):
    f, fwd, grad = CASES[name]
    x = lucid.tensor(X, dtype=lucid.float64, requires_grad=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        y = f(x)
        y.sum().backward()
        g_func = F.grad(lambda t: f(t).sum())(x.detach())
        _, tan = F.jvp(f, (x.detach(),), (lucid.ones(4, dtype=lucid.float64),))
    assert_closed_form(y.detach().numpy(), fwd)
    assert_closed_form(x.grad.numpy(), grad)
    assert_closed_form(g_func.numpy(), grad)
    assert_closed_form(tan.numpy(), grad)  # elementwise: J @ ones == gradient of the sum


@pytest.mark.parametrize("name", list(CASES))
def test_parity_with_torch(name):
    torch = pytest.importorskip("torch")
    f, _, grad = CASES[name]
    xt = torch.tensor(X, dtype=torch.float64, requires_grad=True)
    f(xt).sum().backward()
    np.testing.assert_array_equal(xt.grad.numpy(), grad)


def test_float32_scalar_operand_keeps_dtype():
    x = lucid.tensor([1.0, 2.0], requires_grad=True)
    (x / 0.5).sum().backward()
    assert x.grad.dtype == lucid.float32
    np.testing.assert_array_equal(x.grad.numpy(), [2.0, 2.0])


def test_create_graph_through_python_zero():
    x = lucid.tensor([1.0, 2.0], dtype=lucid.float64, requires_grad=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        (g,) = lucid.autograd.grad((x ** 3 / 0.0).sum(), [x], create_graph=True)
        g.sum().backward()
    np.testing.assert_array_equal(g.detach().numpy(), [inf, inf])
    np.testing.assert_array_equal(x.grad.numpy(), [inf, inf])
