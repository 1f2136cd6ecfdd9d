"""The __torch_function__ protocol (NOTE [Torch function] in lucid/overrides.py)."""
import subprocess
import sys
import warnings

import numpy as np
import pytest

import lucid
import lucid.nn.functional as F


def test_a_subclass_keeps_its_class_through_ops_and_gradients_flow():
    class Tagged(lucid.Tensor):
        pass

    leaf = lucid.tensor([[1.0, 2.0], [3.0, 4.0]], requires_grad=True)
    x = leaf.as_subclass(Tagged)
    results = [x + 1, 2 * x, lucid.exp(x), x.sum(0), x[0], x.T, F.relu(x), lucid.cat([x, x]), x @ x,
               lucid.linalg.inv(x), lucid.fft.fft(x).real]
    assert all(type(r) is Tagged for r in results)
    values, indices = x.max(1)  # named results convert too, as PyTorch's
    assert type(values) is Tagged and type(indices) is Tagged and values.tolist() == [2.0, 4.0]
    (x * x).sum().backward()
    assert leaf.grad.tolist() == [[2.0, 4.0], [6.0, 8.0]]
    p = lucid.nn.Parameter(lucid.ones(2))
    assert type(p * 2) is lucid.Tensor  # Parameter opts out (_disabled_torch_function_impl)
    assert type(lucid.tensor(x.detach())) is lucid.Tensor  # constructors are not taken over


def test_an_override_sees_public_functions_and_decides():
    calls = []

    class Logged(lucid.Tensor):
        @classmethod
        def __torch_function__(cls, func, types, args=(), kwargs=None):
            calls.append(func)
            return super().__torch_function__(func, types, args, kwargs)

    x = lucid.ones(3).as_subclass(Logged)
    y = (x + 1).exp().sum()
    assert type(y) is Logged and y.item() == pytest.approx(3 * np.e ** 2)
    assert calls[0] is lucid.Tensor.__add__ and calls[1] is lucid.Tensor.exp and calls[2] is lucid.Tensor.sum
    calls.clear()
    F.linear(x, lucid.ones(2, 3))
    assert calls == [F.linear]  # the public call, not the ops it is built from

    class Refusing(lucid.Tensor):
        @classmethod
        def __torch_function__(cls, func, types, args=(), kwargs=None):
            if func is lucid.add:
                return "intercepted"
            return NotImplemented

    r = lucid.ones(2).as_subclass(Refusing)
    assert lucid.add(r, 1) == "intercepted"
    with pytest.raises(TypeError, match=r"no implementation found for 'lucid.mul' on types that implement "
                                        r"__torch_function__: \[<class '.*Refusing'>\]"):
        lucid.mul(r, 2)


def test_tensor_like_objects_as_in_the_extending_pytorch_note():
    import lucid.overrides  # a Tensor-like that is no Tensor: importing this switches the protocol on

    lucid.overrides._activate()  # (again: the suite switches it off after each test)

    HANDLED = {}

    class ScalarTensor:
        def __init__(self, n, value):
            self._n, self._value = n, value

        def tensor(self):
            return self._value * lucid.eye(self._n)

        @classmethod
        def __torch_function__(cls, func, types, args=(), kwargs=None):
            if func not in HANDLED or not all(issubclass(t, (lucid.Tensor, ScalarTensor)) for t in types):
                return NotImplemented
            return HANDLED[func](*args, **(kwargs or {}))

    HANDLED[lucid.mean] = lambda s: float(s._value) / s._n
    d = ScalarTensor(5, 2)
    assert lucid.mean(d) == 0.4
    with pytest.raises(TypeError, match="no implementation found for 'lucid.exp'"):
        lucid.exp(d)
    assert lucid.overrides.has_torch_function((d,)) and not lucid.overrides.has_torch_function((lucid.ones(1),))


def test_modes_see_every_call_innermost_first():
    from lucid.overrides import BaseTorchFunctionMode, TorchFunctionMode

    class Log(TorchFunctionMode):
        def __init__(self, tag, log):
            self.tag, self.log = tag, log

        def __torch_function__(self, func, types, args=(), kwargs=None):
            self.log.append((self.tag, func.__name__))
            return func(*args, **(kwargs or {}))

    log = []
    with Log("outer", log), Log("inner", log):
        y = lucid.ones(2).exp()
    assert log == [("inner", "ones"), ("outer", "ones"), ("inner", "exp"), ("outer", "exp")]
    assert y.tolist() == pytest.approx([np.e, np.e])
    log.clear()
    lucid.ones(2).exp()
    assert log == []  # the block is over

    class DoubleAdds(BaseTorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            return out * 2 if func is lucid.add else out

    with DoubleAdds():
        assert lucid.add(lucid.ones(1), 1).tolist() == [4.0] and lucid.sub(lucid.ones(1), 1).tolist() == [0.0]


def test_disabling_and_python_functions_that_take_part():
    from lucid.overrides import handle_torch_function, has_torch_function, wrap_torch_function

    class Sub(lucid.Tensor):
        pass

    s = lucid.ones(2).as_subclass(Sub)
    with lucid._C.DisableTorchFunctionSubclass():
        assert type(s + 1) is lucid.Tensor
    with lucid.overrides.DisableTorchFunction():
        assert type(s + 1) is lucid.Tensor
    assert type(s + 1) is Sub

    @wrap_torch_function(lambda a, b: (a, b))
    def plus(a, b):
        return lucid.add(a, b)

    assert type(plus(s, 1)) is Sub and type(plus(lucid.ones(1), 1)) is lucid.Tensor

    def dot(a, b):
        if has_torch_function((a, b)):
            return handle_torch_function(dot, (a, b), a, b)
        return (a * b).sum()

    assert type(dot(s, s)) is Sub and dot(s, s).item() == 2.0


def test_warnings_still_point_at_the_callers_line():
    class Sub(lucid.Tensor):
        pass

    # plain tensors, with the dispatchers on: the wrapper's frame is hidden from stacklevel
    # (with a subclass argument the warning points into the dispatch, as PyTorch's does)
    theta = lucid.tensor([[[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]]])
    assert hasattr(F.affine_grid, "_lucid_original")
    with pytest.warns(UserWarning, match="align_corners") as rec:
        F.affine_grid(theta, (1, 1, 2, 2))
    assert rec[0].filename == __file__ and Sub


def test_nothing_is_paid_until_a_subclass_exists():
    code = ("import sys, lucid, lucid.nn, lucid.func, lucid.fx, lucid.utils.data, lucid.distributions\n"
            "m = lucid.nn.Linear(2, 2); m(lucid.ones(1, 2)).sum().backward()\n"
            "print('lucid.overrides' in sys.modules, lucid.add.__module__, hasattr(lucid.Tensor.exp, '_lucid_original'))\n"
            "class Sub(lucid.Tensor): pass\n"
            "print(hasattr(lucid.Tensor.exp, '_lucid_original'), type(lucid.ones(1).as_subclass(Sub).exp()).__name__)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split("\n")
    assert out[0] == "False lucid.ops.elementwise.arithmetic False" and out[1] == "True Sub"


def test_matches_pytorch_on_subclass_types_when_installed():
    torch = pytest.importorskip("torch")
    kinds = {}
    for lib in (torch, lucid):
        class Sub(lib.Tensor):
            pass

        x = lib.ones(2, 3).as_subclass(Sub)
        got = [x + 1, x.sum(), x[0], lib.cat([x, x]), x.max(1).indices, lib.nn.Parameter(lib.ones(2)) * 2]
        kinds[lib] = [type(g) is Sub for g in got]
    assert kinds[lucid] == kinds[torch]


def test_the_suite_switch_restores_the_originals():
    import lucid.overrides as ov

    was_on = ov._STATE.active
    try:
        ov._activate()
        assert hasattr(lucid.exp, "_lucid_original") and hasattr(lucid.Tensor.exp, "_lucid_original")
        ov._deactivate()
        assert not hasattr(lucid.exp, "_lucid_original") and not hasattr(lucid.Tensor.exp, "_lucid_original")
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            assert lucid.ones(2).exp().tolist() == pytest.approx([np.e, np.e])
    finally:
        if was_on:  # (a --lucid-torch-function run keeps it on)
            ov._activate()


def test_make_subclass_in_new_as_pytorch_subclasses_do():
    class Scaled(lucid.Tensor):
        def __new__(cls, data, scale=1.0, requires_grad=True):
            t = lucid.Tensor._make_subclass(cls, data, requires_grad)
            t.scale = scale
            return t

    x = lucid.ones(2)
    w = Scaled(x, scale=3.0)  # Tensor.__init__ leaves what __new__ made alone
    assert type(w) is Scaled and w.is_leaf and w.requires_grad and w.scale == 3.0
    (w * w).sum().backward()
    assert w.grad.tolist() == [2.0, 2.0] and type(w + 1) is Scaled
    plain = Scaled(x, requires_grad=False)
    x.add_(1)  # the same memory and version counter as data, as a detached alias
    assert plain.tolist() == [2.0, 2.0] and plain._version is x._version
    with pytest.raises(TypeError, match="_make_subclass: cls must be a subclass of Tensor"):
        lucid.Tensor._make_subclass(int, x)


def test_switching_the_protocol_on_leaves_the_core_machinery_alone():
    # lucid.linalg imports bind; wrapping it also rebound lucid._core.primitive.bind, so bind's own
    # recursive call (operands on a device that is not current) reached a subclass's handler.
    from lucid._core import primitive
    from lucid.testing import strict_device

    original = primitive.bind
    seen = []

    class Watched(lucid.Tensor):
        @classmethod
        def __torch_function__(cls, func, types, args=(), kwargs=None):
            seen.append(func.__name__)
            return super().__torch_function__(func, types, args, kwargs)

    assert primitive.bind is original
    strict_device.enable()
    with lucid.device("strict:0"):
        x = lucid.ones(2, device="strict:1").as_subclass(Watched)
        from lucid.ops.shape.views import alias

        out = alias(x)
    assert "bind" not in seen and type(out) is lucid.Tensor
