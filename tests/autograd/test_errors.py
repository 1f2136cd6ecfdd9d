"""gradcheck / gradgradcheck and anomaly detection: failures must say where."""
import numpy as np
import pytest

import lucid
from lucid.autograd import Function, GradcheckError, gradcheck, gradgradcheck


def f64(*vals, rg=True):
    return lucid.tensor(np.array(vals, dtype=np.float64), requires_grad=rg)


class WrongSin(Function):
    """sin with a backward that is wrong in element 1 only."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x.sin()

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        scale = lucid.tensor(np.array([1.0, 2.0, 1.0]))
        return g * x.cos() * scale


class SinGoodFirstOrder(Function):
    """Correct first derivative, wrong second derivative (the backward ignores x's graph)."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x.sin()

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return g * lucid.tensor(np.cos(x.detach().numpy()))


def test_gradcheck_passes_on_correct_ops():
    x = f64(0.3, -0.7, 1.1)
    y = f64(0.5, 2.0, -1.0)
    assert gradcheck(lambda a, b: (a * b).sin() + a.exp() / (1 + b * b), (x, y))
    assert gradgradcheck(lambda a, b: (a * b).sin() + a.exp() / (1 + b * b), (x, y))


def test_gradcheck_multiple_outputs_and_non_tensor_args():
    x = f64(0.3, -0.7)
    assert gradcheck(lambda a, k: (a * k, a.exp()), (x, 3.0))


def test_gradcheck_error_names_input_output_and_element():
    x = f64(0.1, 0.2, 0.3)
    w = f64(1.0, 1.0, 1.0)
    with pytest.raises(GradcheckError) as e:
        gradcheck(lambda a, b: (a * b, WrongSin.apply(b)), (x, w))
    msg = str(e.value)
    assert "output 1" in msg and "input 1" in msg
    assert "output element 1" in msg and "input element 1" in msg
    assert isinstance(e.value, RuntimeError)


def test_gradcheck_raise_exception_false_returns_false():
    x = f64(0.1, 0.2, 0.3)
    assert gradcheck(WrongSin.apply, (x,), raise_exception=False) is False


def test_gradgradcheck_catches_a_wrong_second_derivative():
    x = f64(0.4, -0.9)
    assert gradcheck(SinGoodFirstOrder.apply, (x,))
    with pytest.raises(GradcheckError):
        gradgradcheck(SinGoodFirstOrder.apply, (x,))
    assert gradgradcheck(SinGoodFirstOrder.apply, (x,), raise_exception=False) is False


def test_gradcheck_tolerances():
    class SlightlyOff(Function):
        @staticmethod
        def forward(ctx, x):
            return x * 2

        @staticmethod
        def backward(ctx, g):
            return g * 2.01

    x = f64(1.0)
    assert not gradcheck(SlightlyOff.apply, (x,), raise_exception=False)
    assert gradcheck(SlightlyOff.apply, (x,), rtol=1e-2, atol=0.0)


def test_gradcheck_needs_an_input_requiring_grad():
    with pytest.raises(ValueError, match="require"):
        gradcheck(lambda a: a * 2, (f64(1.0, rg=False),))


def test_detect_anomaly_names_forward_op_and_source_line():
    x = f64(0.0, 1.0)
    with lucid.autograd.detect_anomaly():
        y = x.sqrt()  # ANOMALY-LINE: d sqrt(0) = inf
        z = (y * 0.0).sum()
        with pytest.raises(RuntimeError) as e:
            z.backward()
    msg = str(e.value)
    assert "sqrt" in msg and "returned nan values" in msg  # inf alone is a value (PyTorch checks nan)
    assert "test_errors.py" in msg and "ANOMALY-LINE" in msg
    assert not lucid.autograd.is_anomaly_enabled()


def test_without_anomaly_mode_nan_passes_silently():
    x = f64(0.0, 1.0)
    (x.sqrt() * 0.0).sum().backward()
    assert np.isnan(x.grad.numpy()[0])


def test_detect_anomaly_without_nan_checks_lets_nan_through():
    x = f64(0.0, 1.0)
    with lucid.autograd.detect_anomaly(check_nan=False):
        assert lucid.autograd.is_anomaly_enabled() and not lucid.is_anomaly_check_nan_enabled()
        (x.sqrt() * 0.0).sum().backward()  # PyTorch: no error either
    assert np.isnan(x.grad.numpy()[0])


def test_set_detect_anomaly_function_and_decorator():
    prev = lucid.autograd.is_anomaly_enabled()
    lucid.autograd.set_detect_anomaly(True)
    try:
        assert lucid.autograd.is_anomaly_enabled()
        x = f64(-1.0)
        y = x.log()
        with pytest.raises(RuntimeError, match="log"):
            y.backward(gradient=f64(float("nan"), rg=False))
    finally:
        lucid.autograd.set_detect_anomaly(prev)

    @lucid.autograd.detect_anomaly()
    def run():
        return lucid.autograd.is_anomaly_enabled()

    assert run() and not lucid.autograd.is_anomaly_enabled()


def test_anomaly_in_custom_function_backward():
    class NanBack(Function):
        @staticmethod
        def forward(ctx, x):
            return x * 1

        @staticmethod
        def backward(ctx, g):
            return g * float("nan")

    x = f64(1.0)
    with lucid.autograd.detect_anomaly():
        y = NanBack.apply(x)
        with pytest.raises(RuntimeError, match="NanBack"):
            y.sum().backward()


# --- float32 inputs: finite differences in float64 (NOTE [Gradcheck in float64]) ------------


def f32(*vals, rg=True):
    return lucid.tensor(np.array(vals, dtype=np.float32), requires_grad=rg)


def test_gradcheck_float32_inputs_pass_without_warning(recwarn):
    x = f32(-0.7, -0.2, 0.3, 0.8)
    assert gradcheck(lambda t: t.clamp(-0.5, 0.5) * t.sin(), (x,), eps=1e-5)
    a = lucid.tensor(np.array([[2.0, 0.3], [0.1, 1.5]], dtype=np.float32), requires_grad=True)
    assert gradcheck(lucid.linalg.inv, (a,))
    assert gradgradcheck(lambda t: (t ** 3).sum(), (x,))
    assert not [w for w in recwarn.list if "gradcheck" in str(w.message)]


def test_gradcheck_float32_still_catches_a_wrong_backward():
    x = f32(0.1, 0.2, 0.3)
    with pytest.raises(GradcheckError) as e:
        gradcheck(WrongSin.apply, (x,))
    assert "input element 1" in str(e.value)


def test_gradcheck_float32_numerical_side_runs_in_float64():
    seen = []

    def f(t):
        seen.append(t.dtype)
        return t * t

    gradcheck(f, (f32(0.5, 1.5),), eps=1e-6)
    assert seen[0] == np.float32 and set(seen[1:]) == {np.dtype(np.float64)}


def test_gradcheck_error_is_both_runtime_and_assertion_error():
    assert issubclass(GradcheckError, RuntimeError) and issubclass(GradcheckError, AssertionError)
