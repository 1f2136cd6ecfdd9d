"""Activations: forward vs NumPy closed forms, gradients by gradcheck (float64), modules."""
import math

import numpy as np
import pytest

import lucid
import lucid.nn as nn
import lucid.nn.functional as F
from lucid.autograd import gradcheck, gradgradcheck

RNG = np.random.default_rng(0)
X = RNG.uniform(-3, 3, size=(3, 4))
X[0, 0] = 25.0  # above softplus' threshold
_erf = np.vectorize(math.erf)


def _sig(x):
    return 1 / (1 + np.exp(-x))


def _sp(x):
    return np.log1p(np.exp(x))


CASES = [
    ("relu", F.relu, lambda x: np.maximum(x, 0)),
    ("leaky_relu", lambda x: F.leaky_relu(x, 0.2), lambda x: np.where(x > 0, x, 0.2 * x)),
    ("elu", lambda x: F.elu(x, 1.5), lambda x: np.where(x > 0, x, 1.5 * (np.exp(x) - 1))),
    ("gelu", F.gelu, lambda x: 0.5 * x * (1 + _erf(x / np.sqrt(2)))),
    ("gelu_tanh", lambda x: F.gelu(x, approximate="tanh"),
     lambda x: 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x ** 3)))),
    ("silu", F.silu, lambda x: x * _sig(x)),
    ("mish", F.mish, lambda x: x * np.tanh(_sp(x))),
    ("tanh", F.tanh, np.tanh),
    ("sigmoid", F.sigmoid, _sig),
    ("softplus", F.softplus, lambda x: np.where(x > 20, x, _sp(x))),
    ("softplus_beta", lambda x: F.softplus(x, beta=2.0, threshold=5.0),
     lambda x: np.where(2 * x > 5, x, _sp(2 * x) / 2)),
    ("hardtanh", lambda x: F.hardtanh(x, -0.5, 1.0), lambda x: np.clip(x, -0.5, 1.0)),
    ("softmax", lambda x: F.softmax(x, dim=1),
     lambda x: np.exp(x - x.max(1, keepdims=True)) / np.exp(x - x.max(1, keepdims=True)).sum(1, keepdims=True)),
    ("log_softmax", lambda x: F.log_softmax(x, dim=0),
     lambda x: x - x.max(0) - np.log(np.exp(x - x.max(0)).sum(0))),
    ("logsigmoid", F.logsigmoid, lambda x: -_sp(-x)),
    ("selu", F.selu, lambda x: 1.0507009873554805 * np.where(x > 0, x, 1.6732632423543772 * (np.exp(x) - 1))),
]


@pytest.mark.parametrize("name,fn,ref", CASES, ids=[c[0] for c in CASES])
def test_forward_and_grad(name, fn, ref):
    x = lucid.tensor(X, requires_grad=True)
    np.testing.assert_allclose(fn(x).detach().numpy(), ref(X), rtol=1e-10, atol=1e-12)
    xs = lucid.tensor(X[1:] + 0.013, requires_grad=True)  # away from kinks
    assert gradcheck(fn, (xs,))


@pytest.mark.parametrize("name", ["gelu", "sigmoid", "softplus", "silu", "mish", "log_softmax"])
def test_second_order(name):
    fn = dict((c[0], c[1]) for c in CASES)[name]
    assert gradgradcheck(fn, (lucid.tensor(X[1:], requires_grad=True),))


def test_stability_extremes():
    big = lucid.tensor([-1000.0, 0.0, 1000.0])
    np.testing.assert_allclose(F.sigmoid(big).numpy(), [0.0, 0.5, 1.0])
    np.testing.assert_allclose(F.softplus(big).numpy(), [0.0, math.log(2), 1000.0])
    np.testing.assert_allclose(F.log_softmax(big, dim=0).numpy(), [-2000.0, -1000.0, 0.0])
    assert np.all(np.isfinite(F.silu(big).numpy()))


def test_float32_dtype_preserved():
    x = lucid.tensor([0.5, -0.5])
    for fn in (F.sigmoid, F.gelu, F.softplus, F.silu, F.mish, F.elu):
        assert fn(x).dtype == np.float32


MODULES = [
    (nn.ReLU(), "relu"), (nn.LeakyReLU(0.2), "leaky_relu"), (nn.ELU(1.5), "elu"), (nn.GELU(), "gelu"),
    (nn.GELU("tanh"), "gelu_tanh"), (nn.SiLU(), "silu"), (nn.Mish(), "mish"), (nn.Tanh(), "tanh"),
    (nn.Sigmoid(), "sigmoid"), (nn.Softplus(), "softplus"), (nn.Softplus(2.0, 5.0), "softplus_beta"),
    (nn.Hardtanh(-0.5, 1.0), "hardtanh"), (nn.Softmax(dim=1), "softmax"), (nn.LogSoftmax(dim=0), "log_softmax"),
]


@pytest.mark.parametrize("mod,name", MODULES, ids=[m[1] for m in MODULES])
def test_modules_match_functional(mod, name):
    ref = dict((c[0], c[2]) for c in CASES)[name]
    np.testing.assert_allclose(mod(lucid.tensor(X)).numpy(), ref(X), rtol=1e-10, atol=1e-12)


def test_module_reprs():
    assert repr(nn.LeakyReLU(0.2)) == "LeakyReLU(negative_slope=0.2)"
    assert repr(nn.GELU("tanh")) == "GELU(approximate='tanh')"
    assert repr(nn.Softmax(dim=1)) == "Softmax(dim=1)"
    assert repr(nn.Hardtanh()) == "Hardtanh(min_val=-1.0, max_val=1.0)"
    assert repr(nn.Softplus()) == "Softplus(beta=1.0, threshold=20.0)"
    assert repr(nn.SiLU()) == "SiLU()"


def test_errors():
    with pytest.raises(ValueError, match="gelu"):
        F.gelu(lucid.ones(1), approximate="fast")
    with pytest.raises(ValueError, match="min_val"):
        nn.Hardtanh(1.0, -1.0)
