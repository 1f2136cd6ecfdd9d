"""Arithmetic on values that are already infinite (inf - inf, 0 * inf, softmax of an all -inf
row, overflow) gives NumPy's / PyTorch's values without a RuntimeWarning, and NumPy's error
state does not leak out of lucid (issue 8, item 2; NOTE [Silent floating-point errors])."""
import threading
import warnings

import numpy as np
import pytest

import lucid
import lucid.nn.functional as F
from lucid.ops import _family

inf, nan = np.inf, np.nan
A = np.array([inf, -inf, inf, 0.0, nan, 1.0])
B = np.array([inf, -inf, -inf, inf, 1.0, 0.0])
ROWS = np.array([[-inf, -inf, -inf], [0.0, 1.0, 2.0]])
BIG32 = np.array([3e38, -3e38], dtype=np.float32)


def _np(f, *args):
    with np.errstate(all="ignore"):
        return f(*args)


def _softmax_ref(x):
    with np.errstate(all="ignore"):
        e = np.exp(x - x.max(1, keepdims=True))
        return e / e.sum(1, keepdims=True)


def _log_softmax_ref(x):
    with np.errstate(all="ignore"):
        s = x - x.max(1, keepdims=True)
        return s - np.log(np.exp(s).sum(1, keepdims=True))


T = lucid.tensor
# (lucid call, closed form / NumPy value)
CASES = {
    "add": (lambda: T(A) + T(B), _np(np.add, A, B)),
    "sub": (lambda: T(A) - T(B), _np(np.subtract, A, B)),
    "mul": (lambda: T(A) * T(B), _np(np.multiply, A, B)),
    "mul by Python 0.0": (lambda: T(A) * 0.0, _np(np.multiply, A, 0.0)),
    "inf - tensor": (lambda: inf - T(A), _np(np.subtract, inf, A)),
    "sum": (lambda: T([inf, -inf, 1.0]).sum(), nan),
    "sum over a dim": (lambda: T(np.stack([A, B])).sum(0), _np(np.add, A, B)),
    "mean": (lambda: T([inf, -inf]).mean(), nan),
    "var": (lambda: T([inf, 1.0]).var(), nan),
    "prod": (lambda: T([inf, 0.0]).prod(), nan),
    "cumsum": (lambda: T([inf, -inf, 1.0]).cumsum(0), [inf, nan, nan]),
    "cumprod": (lambda: T([inf, 0.0, 2.0]).cumprod(0), [inf, nan, nan]),
    "matmul": (lambda: T([[inf, 1.0]]) @ T([[0.0], [1.0]]), [[nan]]),
    "sin(inf)": (lambda: T(A).sin(), _np(np.sin, A)),
    "cos(inf)": (lambda: T(A).cos(), _np(np.cos, A)),
    "tan(inf)": (lambda: T(A).tan(), _np(np.tan, A)),
    "logaddexp": (lambda: lucid.logaddexp(T(A), T(B)), _np(np.logaddexp, A, B)),
    "float32 mul overflow": (lambda: T(BIG32) * T(BIG32), np.array([inf, inf], np.float32)),
    "float32 add overflow": (lambda: T(BIG32) + T(BIG32), np.array([inf, -inf], np.float32)),
    "softmax all -inf": (lambda: F.softmax(T(ROWS), dim=1), _softmax_ref(ROWS)),
    "Tensor.softmax": (lambda: T(ROWS).softmax(1), _softmax_ref(ROWS)),
    "log_softmax all -inf": (lambda: F.log_softmax(T(ROWS), dim=1), _log_softmax_ref(ROWS)),
    "logsumexp all -inf": (lambda: lucid.logsumexp(T(ROWS), dim=1), [-inf, np.log(np.exp([0.0, 1, 2]).sum())]),
    "cross_entropy all -inf": (lambda: F.cross_entropy(T(ROWS), T([0, 1]), reduction="none"),
                               [nan, -_log_softmax_ref(ROWS)[1, 1]]),
    "masked attention row": (lambda: F.softmax(T(np.zeros((2, 3))).masked_fill(T(np.isinf(ROWS)), -inf), dim=1),
                             [[nan] * 3, [1 / 3] * 3]),
    "linear": (lambda: F.linear(T([[inf, 1.0]]), T([[0.0, 1.0]])), [[nan]]),
    "scatter_add": (lambda: lucid.scatter_add(T([inf, 1.0]), 0, T([0, 0]), T([-inf, 1.0])), [nan, 1.0]),
    "cast to float16 overflows": (lambda: T(np.array([1e5, inf, nan, -1e300])).half(), np.array([inf, inf, nan, -inf], np.float16)),
    "cast of nan to int": (lambda: T(np.array([nan, inf])).long(), None),  # value unspecified, as in PyTorch
    "conv1d": (lambda: F.conv1d(T([[[inf, 1.0, 2.0]]]), T([[[0.0, 1.0]]])), [[[nan, 2.0]]]),
    "avg_pool1d": (lambda: F.avg_pool1d(T([[[inf, -inf]]]), 2), [[[nan]]]),
    "einsum": (lambda: lucid.einsum("i,i->", T([inf, 1.0]), T([0.0, 1.0])), nan),
    "fft": (lambda: lucid.fft.fft(T(np.array([1e308, 1e308, 1.0]))), _np(np.fft.fft, np.array([1e308, 1e308, 1.0]))),
    "rfft": (lambda: lucid.fft.rfft(T(np.array([1e308, 1e308, 1.0]))), _np(np.fft.rfft, np.array([1e308, 1e308, 1.0]))),
    "irfft": (lambda: lucid.fft.irfft(T(np.array([1e308, 1e308, 1.0]))), _np(np.fft.irfft, np.array([1e308, 1e308, 1.0]))),
    "gelu": (lambda: F.gelu(T(A)), None),
    "layer_norm": (lambda: F.layer_norm(T(ROWS), (3,)), None),
}


@pytest.mark.parametrize("name", list(CASES))
def test_forward_is_silent_and_keeps_numpy_values(name):
    f, expected = CASES[name]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a RuntimeWarning would raise here
        out = f()
    if expected is not None:
        exp = np.asarray(expected)
        np.testing.assert_allclose(out.numpy(), exp, rtol=1e-14, atol=0)  # nan and inf must match exactly
        if exp.dtype == np.float32:
            assert out.dtype == lucid.float32


@pytest.mark.parametrize("name", ["add_", "sub_", "mul_"])
def test_inplace_arithmetic_is_silent(name):
    x = lucid.tensor(A.copy())
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        getattr(x, name)(lucid.tensor(B))
    ref = {"add_": np.add, "sub_": np.subtract, "mul_": np.multiply}[name]
    np.testing.assert_array_equal(x.numpy(), _np(ref, A, B))


def test_optimizer_steps_and_clipping_on_infinite_gradients_are_silent():
    p_sgd, p_adam, p_clip = (lucid.nn.Parameter(lucid.tensor([1.0, 2.0], dtype=lucid.float64)) for _ in range(3))
    sgd = lucid.optim.SGD([p_sgd], lr=0.1, momentum=0.9)
    adam = lucid.optim.Adam([p_adam], lr=0.1)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for g in ([inf, 1.0], [-inf, 1.0]):
            for p, opt in ((p_sgd, sgd), (p_adam, adam)):
                p.grad = lucid.tensor(g, dtype=lucid.float64)
                opt.step()
        p_clip.grad = lucid.tensor([inf, 1.0], dtype=lucid.float64)
        total = lucid.nn.utils.clip_grad_norm_([p_clip], 1.0)
    # SGD: 1 - 0.1 inf = -inf, then the momentum buffer inf * 0.9 - inf is nan
    assert np.isnan(p_sgd.detach().numpy()[0]) and np.isfinite(p_sgd.detach().numpy()[1])
    # Adam: m / sqrt(v) = inf / inf is nan
    assert np.isnan(p_adam.detach().numpy()[0]) and np.isfinite(p_adam.detach().numpy()[1])
    assert total.item() == inf
    np.testing.assert_array_equal(p_clip.grad.numpy(), [nan, 0.0])  # scaled by 1 / (inf + 1e-6) = 0


def test_gradients_through_infinite_values_are_silent():
    x = lucid.tensor([inf, 1.0], requires_grad=True)
    y = lucid.tensor([-inf, 2.0], requires_grad=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ((x + y) * x).sum().backward()
    # d/dx (x + y) x = 2x + y, d/dy = x
    np.testing.assert_array_equal(x.grad.numpy(), [nan, 4.0])
    np.testing.assert_array_equal(y.grad.numpy(), [inf, 1.0])


def test_parity_with_torch():
    torch = pytest.importorskip("torch")
    rows = torch.tensor(ROWS)
    pairs = [
        (torch.softmax(rows, 1), "softmax all -inf"),
        (torch.log_softmax(rows, 1), "log_softmax all -inf"),
        (torch.logsumexp(rows, 1), "logsumexp all -inf"),
        (torch.nn.functional.cross_entropy(rows, torch.tensor([0, 1]), reduction="none"), "cross_entropy all -inf"),
        (torch.tensor(A) - torch.tensor(B), "sub"),
        (torch.tensor(A) * torch.tensor(B), "mul"),
        (torch.tensor([inf, -inf, 1.0]).sum(), "sum"),
        (torch.tensor([inf, 0.0, 2.0]).cumprod(0), "cumprod"),
        (torch.tensor([1e5, inf, nan, -1e300], dtype=torch.float64).half(), "cast to float16 overflows"),
        (torch.nn.functional.conv1d(torch.tensor([[[inf, 1.0, 2.0]]]), torch.tensor([[[0.0, 1.0]]])), "conv1d"),
    ]
    for ref, name in pairs:
        np.testing.assert_allclose(CASES[name][0]().numpy(), ref.numpy(), rtol=1e-14, atol=0, err_msg=name)


# ---------------------------------------------------------------- nothing leaks out


def test_numpy_code_outside_lucid_still_warns_and_raises():
    before = np.geterr()
    lucid.tensor([inf]) - lucid.tensor([inf])
    F.softmax(lucid.tensor(ROWS), dim=1)
    assert np.geterr() == before
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(RuntimeWarning, match="invalid value encountered in subtract"):
            np.array([inf]) - np.array([inf])
    with np.errstate(all="raise"):
        with pytest.raises(FloatingPointError):
            np.array([inf]) * 0.0
        out = lucid.tensor([inf]) * 0.0  # lucid stays silent, as PyTorch, whatever the user's state
        with pytest.raises(FloatingPointError):  # and the user's state is intact after it
            np.array([inf]) * 0.0
    assert np.isnan(out.item())


def test_busy_quiet_context_falls_back():
    # A quiet impl that runs another (the private context is then already entered) and a
    # quiet op in a second thread while the first is inside: both take the set/reset path.
    sub = _family.quiet(np.subtract)
    nested = _family.quiet(lambda x: sub(x, x) + np.multiply(x, 0.0), 1)
    x = np.array([inf, 1.0])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        np.testing.assert_array_equal(nested(x), [nan, 0.0])
        inside, release, got = threading.Event(), threading.Event(), []

        def hold():
            inside.set()
            release.wait(10)

        holder = threading.Thread(target=lambda: _family._QUIET_CONTEXT.run(hold))
        holder.start()
        inside.wait(10)
        worker = threading.Thread(target=lambda: got.append(lucid.tensor(x) - lucid.tensor(x)))
        worker.start()
        worker.join(10)
        release.set()
        holder.join(10)
    np.testing.assert_array_equal(got[0].numpy(), [nan, 0.0])
    assert np.geterr()["invalid"] == "warn"


def test_quiet_keeps_real_errors():
    q = _family.quiet(np.add)
    with pytest.raises(TypeError):
        q(np.array([1.0]), "a")

    def boom(x):
        raise RuntimeError("a real error")

    with pytest.raises(RuntimeError, match="a real error"):
        _family.quiet(boom, 1)(1.0)
    assert _family.quiet(q) is q  # wrapping twice is a no-op
