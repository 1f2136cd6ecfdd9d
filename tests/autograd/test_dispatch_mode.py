"""TorchDispatchMode (``lucid.utils._python_dispatch``): a mode sees each primitive below
autograd and decides what it returns. NOTE [Dispatch modes]."""
import math
import threading

import numpy as np
import pytest

import lucid
from lucid._core import primitive
from lucid._core.grad_mode import ACTIVE_TRACES
from lucid.library import ops
from lucid.utils._python_dispatch import (TorchDispatchMode, _disable_current_modes, _get_current_dispatch_mode,
                                          _get_current_dispatch_mode_stack, _pop_mode_temporarily,
                                          is_in_torch_dispatch_mode)


class Log(TorchDispatchMode):
    def __init__(self, tag="log", into=None):
        super().__init__()
        self.tag, self.calls = tag, [] if into is None else into

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.calls.append((self.tag, func.overloadpacket.__name__))
        return func(*args, **(kwargs or {}))


def _names(calls):
    return [name for _, name in calls]


def test_a_mode_sees_each_primitive_and_autograd_is_unchanged():
    x = lucid.tensor([1.0, 2.0], requires_grad=True)
    with Log() as log:
        y = (x * 2).exp().sum()
    assert _names(log.calls) == ["mul", "exp", "sum"]
    y.backward()
    np.testing.assert_allclose(x.grad.numpy(), 2 * np.exp([2.0, 4.0]), rtol=1e-6)
    assert not is_in_torch_dispatch_mode() and primitive.DISPATCH_MODE_HOOK[0] is None


def test_func_kwargs_and_names():
    seen = []

    class Keep(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            seen.append((func, types, kwargs))
            return func(*args, **kwargs)

    with Keep():
        lucid.ones(2, 3).sum(1, keepdim=True)
    func, types, kwargs = seen[-1]
    assert func is ops.lucid.sum.default and func.overloadpacket is ops.lucid.sum
    assert func.name() == "lucid::sum" and func.__name__ == "sum.default" and repr(func) == "lucid.sum.default"
    assert types == () and kwargs == {"axis": (1,), "keepdims": True}
    np.testing.assert_array_equal(ops.lucid.mul(lucid.tensor([2.0]), lucid.tensor([3.0])).numpy(), [6.0])


def test_what_the_mode_returns_is_the_result_and_the_backward_uses_it():
    # exp saves its output: the gradient is g * (what the mode returned), as in PyTorch.
    class DoubleExp(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            return out * 2 if func.overloadpacket is ops.lucid.exp else out

    x = lucid.tensor([0.0, 1.0], requires_grad=True)
    with DoubleExp():
        y = x.exp()
    np.testing.assert_allclose(y.detach().numpy(), 2 * np.exp([0.0, 1.0]), rtol=1e-6)
    y.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), 2 * np.exp([0.0, 1.0]), rtol=1e-6)


def test_the_mode_runs_below_autograd_and_its_own_ops_reach_the_outer_modes_only():
    calls = []

    class Noisy(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            calls.append(("inner", func.overloadpacket.__name__))
            (args[0] * 0).sum()  # an op of the mode's own: not recorded, not seen by itself
            return func(*args, **(kwargs or {}))

    x = lucid.tensor([3.0], requires_grad=True)
    with Log("outer", calls):
        with Noisy():
            y = x.sin()
    assert calls == [("inner", "sin"), ("outer", "mul"), ("outer", "sum"), ("outer", "sin")]
    assert y.grad_fn.name() == "SinBackward0" and y.grad_fn.next_functions[0][0].variable is x
    y.backward()
    np.testing.assert_allclose(x.grad.numpy(), [math.cos(3.0)], rtol=1e-6)


def test_transforms_unwrap_first_so_a_mode_sees_the_batched_op_once():
    with Log() as log:
        out = lucid.func.vmap(lambda v: (v * 3).sin())(lucid.ones(4, 2))
    assert _names(log.calls) == ["mul", "sin"]
    np.testing.assert_allclose(out.numpy(), np.full((4, 2), math.sin(3.0)), rtol=1e-6)


def test_a_create_graph_backward_goes_through_the_mode():
    x = lucid.tensor([1.0, 2.0], requires_grad=True)
    y = (x * x).sum()
    with Log() as log:
        (g,) = lucid.autograd.grad(y, [x], create_graph=True)
    assert "mul" in _names(log.calls)
    np.testing.assert_array_equal(g.detach().numpy(), [2.0, 4.0])


def test_a_nan_checking_mode_names_the_first_op_that_made_a_nan():
    class NanCheck(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            if out.dtype.is_floating_point and bool(lucid.isnan(out).any()):
                raise FloatingPointError(f"{func.name()} made a nan")
            return out

    x = lucid.tensor([-1.0, 4.0])
    with pytest.raises(FloatingPointError, match="^lucid::sqrt made a nan$"):
        with NanCheck():
            (x * 2).sqrt().sum()
    assert not is_in_torch_dispatch_mode()


def test_errors_and_the_stack_helpers():
    class Bad(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            return 3

    with pytest.raises(TypeError, match="^exp: a dispatch mode's __torch_dispatch__ must return a Tensor"):
        with Bad():
            lucid.ones(2).exp()
    with pytest.raises(NotImplementedError, match="define __torch_dispatch__"):
        with TorchDispatchMode():
            lucid.ones(2).exp()
    before = ACTIVE_TRACES[0]
    a, b = Log("a"), Log("b")
    a.__enter__()
    b.__enter__()
    with pytest.raises(RuntimeError, match="reverse order"):
        a.__exit__(None, None, None)
    assert _get_current_dispatch_mode() is b and _get_current_dispatch_mode_stack() == [a, b]
    with _pop_mode_temporarily() as m:
        assert m is b and _get_current_dispatch_mode() is a
        lucid.ones(1).exp()
    with _disable_current_modes() as modes:
        assert modes == [a, b] and not is_in_torch_dispatch_mode()
        lucid.ones(1).sin()
    b.__exit__(None, None, None)
    a.__exit__(None, None, None)
    assert _names(a.calls) == ["exp"] and b.calls == []
    assert ACTIVE_TRACES[0] == before and primitive.DISPATCH_MODE_HOOK[0] is None


def test_a_mode_is_per_thread():
    other = []

    def work():
        other.append(lucid.ones(2).exp())

    with Log() as log:
        t = threading.Thread(target=work)
        t.start()
        t.join()
        lucid.ones(2).sin()
    assert _names(log.calls) == ["sin"] and len(other) == 1


def test_parity_with_pytorch_for_a_mode_that_changes_values():
    torch = pytest.importorskip("torch")
    from torch.utils._python_dispatch import TorchDispatchMode as TorchMode

    class TorchDouble(TorchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            return out * 2 if func.overloadpacket is torch.ops.aten.exp else out

    class LucidDouble(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            return out * 2 if func.overloadpacket is ops.lucid.exp else out

    results = []
    for lib, mode in ((torch, TorchDouble), (lucid, LucidDouble)):
        x = lib.tensor([0.5, -1.0], requires_grad=True)
        with mode():
            y = (x * 3).exp()
        y.sum().backward()
        results.append((y.detach().numpy(), x.grad.numpy()))
    for a, b in zip(*results):
        np.testing.assert_allclose(a, b, rtol=1e-6)
