"""Tensor subclasses with ``__torch_dispatch__`` (wrapper subclasses): NOTE [Tensor subclass
dispatch] and NOTE [Subclass autograd] in lucid/utils/_python_dispatch.py.

The helper classes follow the semantics of PyTorch's test helpers (TwoTensor, LoggingTensor,
ConstantExtraMetadataTensor), written here for Lucid. They are made by a module fixture, not at
import: defining one turns the dispatch gate on for the whole process, and the other test files
must run on the plain path (the fixture takes them off the gate when this module is done).
"""
import math
import types

import numpy as np
import pytest

import lucid
import lucid.nn.functional as F
from lucid import overrides
from lucid._core import primitive
from lucid._core.grad_mode import ACTIVE_TRACES, SUBCLASS_DISPATCH
from lucid.library import ops
from lucid.utils import _python_dispatch as pd
from lucid.utils._python_dispatch import (DisableTorchDispatch, TorchDispatchMode, is_traceable_wrapper_subclass,
                                          register_torch_dispatch, return_and_correct_aliasing, transform_subclass)


def _make_classes():
    """TwoTensor, LoggingTensor and ConstantExtraMetadataTensor (defining them registers them)."""

    class TwoTensor(lucid.Tensor):
        """Holds two tensors of one shape and runs every op on both."""

        @staticmethod
        def __new__(cls, a, b, outer_size=None, outer_stride=None, *, requires_grad=None):
            if a.shape != b.shape or a.dtype != b.dtype or a.device != b.device:
                raise AssertionError("TwoTensor: a and b must agree in shape, dtype and device")
            return lucid.Tensor._make_wrapper_subclass(
                cls, a.shape if outer_size is None else outer_size,
                strides=a.stride() if outer_stride is None else outer_stride, dtype=a.dtype, device=a.device,
                requires_grad=a.requires_grad if requires_grad is None else requires_grad)

        def __init__(self, a, b, outer_size=None, outer_stride=None, *, requires_grad=None):
            self.a, self.b = a, b

        def __repr__(self):
            return f"TwoTensor({self.a!r}, {self.b!r})"

        def __tensor_flatten__(self):
            return ["a", "b"], None

        @staticmethod
        def __tensor_unflatten__(inner, meta, outer_size, outer_stride):
            return TwoTensor(inner["a"], inner["b"], outer_size, outer_stride)

        @classmethod
        def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            out_a = func(*[x.a if isinstance(x, TwoTensor) else x for x in args], **kwargs)
            out_b = func(*[x.b if isinstance(x, TwoTensor) else x for x in args], **kwargs)
            if isinstance(out_a, (tuple, list)):
                out = tuple(cls(x, y) if isinstance(x, lucid.Tensor) else x for x, y in zip(out_a, out_b))
            else:
                out = cls(out_a, out_b) if isinstance(out_a, lucid.Tensor) else out_a
            return return_and_correct_aliasing(func, args, kwargs, out)

    class LoggingTensor(lucid.Tensor):
        """Wraps one tensor and logs each op that reaches it as ``$out = op($in, ...)``."""

        log = None  # a list while capture_logs() runs

        @staticmethod
        def __new__(cls, elem, *, requires_grad=False):
            r = lucid.Tensor._make_wrapper_subclass(cls, elem.shape, strides=elem.stride(), dtype=elem.dtype,
                                                    device=elem.device, requires_grad=requires_grad)
            r.elem = elem.detach() if requires_grad else elem
            return r

        def __repr__(self):
            return f"LoggingTensor({self.elem!r})"

        @classmethod
        def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
            def unwrap(e):
                return e.elem if isinstance(e, cls) else e

            def wrap(e):
                return cls(e) if isinstance(e, lucid.Tensor) else e

            out = func(*[unwrap(a) for a in args], **{k: unwrap(v) for k, v in (kwargs or {}).items()})
            out = tuple(wrap(o) for o in out) if isinstance(out, tuple) else wrap(out)
            if cls.log is not None:
                cls.log.append(func.name())
            return out

    class ConstantExtraMetadataTensor(lucid.Tensor):
        """One inner tensor plus a constant attribute that must survive every op."""

        @staticmethod
        def __new__(cls, elem):
            return lucid.Tensor._make_wrapper_subclass(cls, elem.shape, strides=elem.stride(), dtype=elem.dtype,
                                                       device=elem.device, requires_grad=elem.requires_grad)

        def __init__(self, elem):
            self.elem = elem
            self.constant_attribute = 4

        def __tensor_flatten__(self):
            return ["elem"], self.constant_attribute

        @staticmethod
        def __tensor_unflatten__(inner, meta, outer_size, outer_stride):
            out = ConstantExtraMetadataTensor(inner["elem"])
            out.constant_attribute = meta
            return out

        @classmethod
        def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
            inner = [a.elem if isinstance(a, cls) else a for a in args]
            out = func(*inner, **(kwargs or {}))
            constant = next(a.constant_attribute for a in args if isinstance(a, cls))

            def wrap(o):
                if not isinstance(o, lucid.Tensor):
                    return o
                w = cls(o)
                w.constant_attribute = constant
                return w

            out = tuple(wrap(o) for o in out) if isinstance(out, tuple) else wrap(out)
            return return_and_correct_aliasing(func, args, kwargs, out)

    return types.SimpleNamespace(TwoTensor=TwoTensor, LoggingTensor=LoggingTensor,
                                 ConstantExtraMetadataTensor=ConstantExtraMetadataTensor)


@pytest.fixture(scope="module")
def sub():
    classes = _make_classes()
    yield classes
    pd._forget_dispatch_subclasses()
    overrides._deactivate()


@pytest.fixture(autouse=True)
def _protocol_on(request):
    # conftest switches the __torch_function__ dispatchers off after each test; the pseudo-ops
    # (in-place methods, *_like, item) reach __torch_dispatch__ through them, as in a program
    # that defines a subclass
    if "sub" in request.fixturenames:
        classes = request.getfixturevalue("sub")
        for cls in vars(classes).values():
            pd._register_dispatch_subclass(cls)
        overrides._activate()
    yield


def two(sub, a, b, requires_grad=False):
    a = lucid.tensor(a, dtype=lucid.float64)
    b = lucid.tensor(b, dtype=lucid.float64)
    if requires_grad:
        a.requires_grad_()
        b.requires_grad_()
    return sub.TwoTensor(a, b)


def halves(t):
    return t.a.detach().numpy(), t.b.detach().numpy()


# ------------------------------------------------------------------------------------ the gate

def test_gate_is_off_until_a_dispatch_subclass_is_defined():
    pd._forget_dispatch_subclasses()
    lucid.ones(1) + 1  # on a second device this turns the device guard on (its own permanent count)
    base = ACTIVE_TRACES[0]
    assert primitive.DISPATCH_MODE_HOOK[0] is None and not SUBCLASS_DISPATCH[0]

    overrides._activate()  # the __torch_function__ protocol on must not make it look like one

    class NotDispatching(lucid.Tensor):  # a subclass without __torch_dispatch__: no gate
        pass

    assert ACTIVE_TRACES[0] == base and primitive.DISPATCH_MODE_HOOK[0] is None
    classes = _make_classes()
    assert ACTIVE_TRACES[0] == base + 1 and SUBCLASS_DISPATCH[0]  # one count for all classes
    assert primitive.DISPATCH_MODE_HOOK[0] is pd._dispatch
    x = classes.TwoTensor(lucid.ones(2), lucid.zeros(2))
    assert (x + 1).a.tolist() == [2.0, 2.0]
    pd._forget_dispatch_subclasses()
    assert ACTIVE_TRACES[0] == base and primitive.DISPATCH_MODE_HOOK[0] is None and not SUBCLASS_DISPATCH[0]
    overrides._deactivate()


def test_a_mode_leaving_keeps_the_hook_while_subclasses_exist(sub):
    class Nothing(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            return func(*args, **(kwargs or {}))

    with Nothing():
        pass
    assert primitive.DISPATCH_MODE_HOOK[0] is pd._dispatch
    assert (two(sub, [1.0], [2.0]) * 3).b.tolist() == [6.0]


# ---------------------------------------------------------------------------- construction

def test_wrapper_metadata(sub):
    a = lucid.arange(6.0).reshape(2, 3)
    t = sub.TwoTensor(a, a * 2)
    assert type(t) is sub.TwoTensor and t.shape == (2, 3) and t.dtype == lucid.float32
    assert t.device == a.device and t.stride() == (3, 1) and t.is_contiguous() and t.ndim == 2
    assert t.numel() == 6 and not t.requires_grad and t.is_leaf
    tt = sub.TwoTensor(a.t(), (a * 2).t())  # the strides it is given
    assert tt.stride() == (1, 3) and not tt.is_contiguous()
    w = sub.TwoTensor(lucid.ones(2, requires_grad=True), lucid.ones(2, requires_grad=True))
    assert w.requires_grad and w.is_leaf and w.grad is None
    assert "TwoTensor(" in str(t)  # printing uses the subclass's __repr__


def test_make_wrapper_subclass_validates():
    with pytest.raises(TypeError, match="_make_wrapper_subclass: cls must be a subclass of Tensor"):
        lucid.Tensor._make_wrapper_subclass(int, (2,))
    with pytest.raises(RuntimeError, match="2 strides for a 1-d size"):
        lucid.Tensor._make_wrapper_subclass(lucid.Tensor, (2,), strides=(1, 1))
    with pytest.raises(RuntimeError, match="only floating point"):
        lucid.Tensor._make_wrapper_subclass(lucid.Tensor, (2,), dtype=lucid.int64, requires_grad=True)


def test_raw_array_code_on_a_wrapper_names_the_op(sub):
    t = two(sub, [1.0, 2.0], [3.0, 4.0])
    with pytest.raises(NotImplementedError, match="TwoTensor is a wrapper tensor subclass"):
        t.numpy()
    with DisableTorchDispatch():  # its __torch_dispatch__ off: the primitive meets no values
        with pytest.raises(RuntimeError, match=r"^exp: a TwoTensor is a wrapper tensor subclass"):
            lucid.exp(t)


def test_handler_returning_a_non_tensor_is_a_clear_error(sub):
    class Broken(lucid.Tensor):
        @staticmethod
        def __new__(cls, elem):
            return lucid.Tensor._make_wrapper_subclass(cls, elem.shape, dtype=elem.dtype, device=elem.device)

        @classmethod
        def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
            return 3

    with pytest.raises(TypeError, match="exp: __torch_dispatch__ must return a Tensor for this op, got int"):
        lucid.exp(Broken(lucid.ones(2)))


# --------------------------------------------------------------------------------- TwoTensor

def test_two_tensor_runs_each_op_on_both_halves(sub):
    x = two(sub, [[1.0, 2.0], [3.0, 4.0]], [[-1.0, 0.5], [2.0, 3.0]])
    y = two(sub, [[0.5, 1.0], [1.5, 2.0]], [[2.0, 2.0], [1.0, -1.0]])
    xa, xb = halves(x)
    ya, yb = halves(y)
    checks = {
        "add": (lambda p, q: p + q, xa + ya, xb + yb),
        "mul": (lambda p, q: p * q, xa * ya, xb * yb),
        "matmul": (lambda p, q: p @ q, xa @ ya, xb @ yb),
        "sum": (lambda p, q: (p * q).sum(1), (xa * ya).sum(1), (xb * yb).sum(1)),
        "scalar": (lambda p, q: 2 * p - 1, 2 * xa - 1, 2 * xb - 1),
    }
    for name, (f, want_a, want_b) in checks.items():
        out = f(x, y)
        assert type(out) is sub.TwoTensor, name
        np.testing.assert_allclose(out.a.numpy(), want_a, err_msg=name)
        np.testing.assert_allclose(out.b.numpy(), want_b, err_msg=name)


def test_two_tensor_mixes_with_plain_tensors(sub):
    x = two(sub, [1.0, 2.0], [3.0, 4.0])
    p = lucid.tensor([10.0, 20.0], dtype=lucid.float64)
    out = p * x + p
    assert type(out) is sub.TwoTensor
    assert out.a.tolist() == [20.0, 60.0] and out.b.tolist() == [40.0, 100.0]


def test_two_tensor_views_and_multi_output_ops(sub):
    x = two(sub, np.arange(6.0).reshape(2, 3), -np.arange(6.0).reshape(2, 3))
    v = x.t()
    assert type(v) is sub.TwoTensor and v.shape == (3, 2) and v.a.tolist() == [[0, 3], [1, 4], [2, 5]]
    assert v._version is x._version  # a view shares its base's version counter
    r = x.reshape(3, 2)[1]
    assert r.a.tolist() == [2.0, 3.0] and r.b.tolist() == [-2.0, -3.0]
    values, indices = x.max(1)
    assert type(values) is sub.TwoTensor and values.a.tolist() == [2.0, 5.0] and values.b.tolist() == [0.0, -3.0]
    assert indices.a.tolist() == [2, 2] and indices.b.tolist() == [0, 0]
    first, second = x.split(2, dim=1)
    assert first.a.tolist() == [[0, 1], [3, 4]] and second.b.tolist() == [[-2], [-5]]


def test_two_tensor_in_place_ops(sub):
    x = two(sub, [1.0, 2.0], [3.0, 4.0])
    a, version = x.a, x._version[0]
    out = x.add_(1.0)
    assert out is x and x.a is a and a.tolist() == [2.0, 3.0] and x.b.tolist() == [4.0, 5.0]
    assert x._version[0] == version + 1
    x.mul_(two(sub, [2.0, 0.5], [1.0, -1.0]))
    assert x.a.tolist() == [4.0, 1.5] and x.b.tolist() == [4.0, -5.0]
    x += 1
    assert x.a.tolist() == [5.0, 2.5]
    x.zero_()
    assert x.a.tolist() == [0.0, 0.0] and x.b.tolist() == [0.0, 0.0]
    x.copy_(two(sub, [7.0, 8.0], [9.0, 1.0]))
    assert x.a.tolist() == [7.0, 8.0] and x.b.tolist() == [9.0, 1.0]
    x[1] = 0.5
    assert x.a.tolist() == [7.0, 0.5] and x.b.tolist() == [9.0, 0.5]
    x.clamp_(min=1.0)
    assert x.a.tolist() == [7.0, 1.0] and x.b.tolist() == [9.0, 1.0] and x.a is a
    w = two(sub, [1.0], [2.0])
    assert w.requires_grad_() is w and w.requires_grad  # autograd state, not an op on the halves
    assert not w.a.requires_grad


def test_in_place_on_a_wrapper_that_requires_grad(sub):
    w = two(sub, [1.0, 2.0], [3.0, 4.0], requires_grad=True)
    with pytest.raises(NotImplementedError, match="add_: in-place ops on a TwoTensor"):
        w.add_(1.0)
    assert w.a.tolist() == [1.0, 2.0]  # nothing changed
    with lucid.no_grad():  # an optimizer-style update
        w.sub_(two(sub, [0.5, 0.5], [1.0, 1.0]))
    assert w.a.tolist() == [0.5, 1.5] and w.b.tolist() == [2.0, 3.0]


def test_like_factories_and_item_reach_the_subclass(sub):
    x = two(sub, [1.0, 2.0], [3.0, 4.0])
    z = lucid.zeros_like(x)
    assert type(z) is sub.TwoTensor and z.a.tolist() == [0.0, 0.0] and z.b.tolist() == [0.0, 0.0]
    f = lucid.full_like(x, 7.0)
    assert f.b.tolist() == [7.0, 7.0]
    assert x.sum().item() == 3.0  # TwoTensor answers with its first half, as PyTorch's


# ------------------------------------------------------------------------------- autograd

def _plain_grads(f, a, b):
    """Gradients of f on each half computed with plain tensors."""
    out = []
    for vals in (a, b):
        vs = [lucid.tensor(v, dtype=lucid.float64, requires_grad=True) for v in vals]
        f(*vs).backward()
        out.append([v.grad.numpy() for v in vs])
    return out


def test_backward_gives_two_tensor_gradients_equal_to_each_half(sub):
    av = ([[1.0, -2.0], [0.5, 3.0]], [0.3, -0.7])
    bv = ([[2.0, 1.0], [-1.0, 0.25]], [1.5, 2.0])

    def f(w, v):
        return ((w @ v).tanh() * v + w.sum(0)).exp().sum() + (w * w).mean()

    w = sub.TwoTensor(*(lucid.tensor(v[0], dtype=lucid.float64, requires_grad=True) for v in (av, bv)))
    v = sub.TwoTensor(*(lucid.tensor(v[1], dtype=lucid.float64, requires_grad=True) for v in (av, bv)))
    loss = f(w, v)
    assert type(loss) is sub.TwoTensor and loss.requires_grad
    loss.backward()
    (ga_w, ga_v), (gb_w, gb_v) = _plain_grads(f, av, bv)
    for leaf, want_a, want_b in ((w, ga_w, gb_w), (v, ga_v, gb_v)):
        assert type(leaf.grad) is sub.TwoTensor and not leaf.grad.requires_grad
        np.testing.assert_allclose(leaf.grad.a.numpy(), want_a, rtol=1e-12)
        np.testing.assert_allclose(leaf.grad.b.numpy(), want_b, rtol=1e-12)
    f(w, v).backward()  # a second backward accumulates
    np.testing.assert_allclose(w.grad.a.numpy(), 2 * ga_w, rtol=1e-12)


def test_autograd_grad_of_a_two_tensor_loss(sub):
    x = two(sub, [1.0, 2.0, 3.0], [-1.0, 0.5, 2.0], requires_grad=True)
    g = lucid.autograd.grad((x * x * x).sum(), x)
    assert type(g) is sub.TwoTensor  # the engine's ones seed is lifted to ones_like(loss)
    np.testing.assert_allclose(g.a.numpy(), [3.0, 12.0, 27.0])
    np.testing.assert_allclose(g.b.numpy(), [3.0, 0.75, 12.0])
    g2 = lucid.autograd.grad(x.sum(), x)  # a pure broadcast backward keeps the class too
    assert type(g2) is sub.TwoTensor and g2.b.tolist() == [1.0, 1.0, 1.0]


def test_backward_with_a_gradient_and_inputs(sub):
    x = two(sub, [1.0, 2.0], [3.0, 4.0], requires_grad=True)
    y = two(sub, [5.0, 6.0], [7.0, 8.0], requires_grad=True)
    out = x * y
    out.backward(two(sub, [1.0, 10.0], [2.0, 20.0]), inputs=[x])
    assert x.grad.a.tolist() == [5.0, 60.0] and x.grad.b.tolist() == [14.0, 160.0]
    assert y.grad is None


def test_double_backward_through_a_two_tensor(sub):
    x = two(sub, [0.5, 1.0], [2.0, -1.0], requires_grad=True)
    g = lucid.autograd.grad((x ** 3).sum(), x, create_graph=True)
    assert type(g) is sub.TwoTensor and g.requires_grad
    h = lucid.autograd.grad(g.sum(), x)
    np.testing.assert_allclose(h.a.numpy(), [3.0, 6.0])  # d2/dx2 x^3 = 6x
    np.testing.assert_allclose(h.b.numpy(), [12.0, -6.0])


def test_a_mix_of_wrapper_and_plain_leaves(sub):
    x = two(sub, [1.0, 2.0], [3.0, 4.0], requires_grad=True)
    p = lucid.tensor([2.0, 5.0], dtype=lucid.float64, requires_grad=True)
    (x * p).sum().backward()
    assert x.grad.a.tolist() == [2.0, 5.0] and x.grad.b.tolist() == [2.0, 5.0]
    # the plain leaf's gradient is a TwoTensor, as in PyTorch (dL/dp = x)
    assert type(p.grad) is sub.TwoTensor and p.grad.a.tolist() == [1.0, 2.0] and p.grad.b.tolist() == [3.0, 4.0]


def test_autograd_grad_through_plain_ops_before_a_wrapper(sub):
    x = two(sub, [1.0, 2.0], [3.0, 4.0], requires_grad=True)
    p = lucid.tensor([0.5, 1.0], dtype=lucid.float64, requires_grad=True)
    g = lucid.autograd.grad((x * p.exp()).sum(), p)  # d/dp = x * exp(p), one per half
    assert type(g) is sub.TwoTensor
    np.testing.assert_allclose(g.a.numpy(), [1.0 * math.exp(0.5), 2.0 * math.e], rtol=1e-12)
    np.testing.assert_allclose(g.b.numpy(), [3.0 * math.exp(0.5), 4.0 * math.e], rtol=1e-12)


def test_a_handler_that_returns_plain_tensors(sub):
    from lucid._core.tensor import _disabled_torch_function_impl

    class PlainOut(lucid.Tensor):  # like PyTorch's CustomTensorPlainOut: results leave the class
        __torch_function__ = _disabled_torch_function_impl

        @staticmethod
        def __new__(cls, elem):
            r = lucid.Tensor._make_wrapper_subclass(cls, elem.shape, dtype=elem.dtype, device=elem.device,
                                                    requires_grad=elem.requires_grad)
            r.elem = elem.detach()
            return r

        @classmethod
        def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
            return func(*[a.elem if isinstance(a, cls) else a for a in args], **(kwargs or {}))

    q = PlainOut(lucid.tensor([1.0, 2.0], dtype=lucid.float64, requires_grad=True))
    r = q * 3
    assert type(r) is lucid.Tensor and r.grad_fn is not None and r.tolist() == [3.0, 6.0]
    r.exp().sum().backward()  # a plain root over a node recorded on the wrapper
    np.testing.assert_allclose(q.grad.numpy(), 3 * np.exp([3.0, 6.0]), rtol=1e-12)
    q.grad = None
    (q * 3).sum().backward()  # the root's node is the wrapper's: the Tensor-mode route
    assert q.grad.tolist() == [3.0, 3.0]


def test_hooks_retain_grad_and_retain_graph_on_wrappers(sub):
    x = two(sub, [1.0, 2.0], [3.0, 4.0], requires_grad=True)
    seen = []
    x.register_hook(lambda g: seen.append(type(g).__name__) or g * 10)
    y = x * x
    y.retain_grad()
    z = y.sum()
    z.backward(retain_graph=True)
    assert seen == ["TwoTensor"]
    assert x.grad.a.tolist() == [20.0, 40.0] and x.grad.b.tolist() == [60.0, 80.0]  # 10 * 2x
    assert type(y.grad) is sub.TwoTensor and y.grad.b.tolist() == [1.0, 1.0]
    z.backward()
    assert x.grad.b.tolist() == [120.0, 160.0]


def test_autograd_backward_function_on_a_two_tensor_loss(sub):
    # lucid.autograd.backward (the function) went straight to the engine's array mode and raised
    x = two(sub, [1.0, 2.0], [3.0, 4.0], requires_grad=True)
    lucid.autograd.backward((x * x).sum())
    assert x.grad.a.tolist() == [2.0, 4.0] and x.grad.b.tolist() == [6.0, 8.0]
    x.grad = None
    lucid.autograd.backward([(x * x).sum()], grad_tensors=[None])
    assert x.grad.b.tolist() == [6.0, 8.0]


def test_version_check_through_a_wrapper(sub):
    x = two(sub, [1.0, 2.0], [3.0, 4.0], requires_grad=True)
    y = x * 2
    z = y.exp()  # exp saves its output
    with lucid.no_grad():
        z.add_(1.0)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        z.sum().backward()


def test_func_grad_and_vmap_over_a_two_tensor(sub):
    a = np.array([[1.0, 2.0, 3.0], [0.5, 1.0, 2.0]])
    b = np.array([[4.0, 5.0, 6.0], [1.0, -2.0, 3.0]])
    x = two(sub, a, b)

    def f(t):
        return (t * t.sin()).sum()

    g = lucid.func.grad(f)(x)
    assert type(g) is sub.TwoTensor
    np.testing.assert_allclose(g.a.numpy(), np.sin(a) + a * np.cos(a), rtol=1e-12)
    np.testing.assert_allclose(g.b.numpy(), np.sin(b) + b * np.cos(b), rtol=1e-12)
    per_row = lucid.func.vmap(f)(x)
    assert type(per_row) is sub.TwoTensor
    np.testing.assert_allclose(per_row.a.numpy(), [(r * np.sin(r)).sum() for r in a], rtol=1e-12)
    np.testing.assert_allclose(per_row.b.numpy(), [(r * np.sin(r)).sum() for r in b], rtol=1e-12)


def test_vmap_of_grad_over_a_two_tensor(sub):
    # on a device the seed is made beside the wrapper (NOTE [Devices of wrapper subclasses])
    a = np.array([[1.0, 2.0, 3.0], [0.5, 1.0, 2.0]])
    b = np.array([[4.0, 5.0, 6.0], [1.0, -2.0, 3.0]])
    per_row_grad = lucid.func.vmap(lucid.func.grad(lambda t: (t * t.sin()).sum()))(two(sub, a, b))
    assert type(per_row_grad) is sub.TwoTensor
    np.testing.assert_allclose(per_row_grad.a.numpy(), np.sin(a) + a * np.cos(a), rtol=1e-12)
    np.testing.assert_allclose(per_row_grad.b.numpy(), np.sin(b) + b * np.cos(b), rtol=1e-12)


def test_gradcheck_through_two_tensor_halves(sub):
    # float64 finite differences of a function that goes through a TwoTensor and back
    def f(a, b):
        t = sub.TwoTensor(a, b)
        out = (t * t.exp()).sum(0)
        return out.a + 2 * out.b

    a = lucid.tensor(np.random.default_rng(0).normal(size=(3, 2)), requires_grad=True)
    b = lucid.tensor(np.random.default_rng(1).normal(size=(3, 2)), requires_grad=True)
    # the wrapper is a new leaf (as in PyTorch): the halves' graph is cut, so check each half's
    # gradient through the wrapper against finite differences by hand
    x = sub.TwoTensor(a.detach().clone().requires_grad_(), b.detach().clone().requires_grad_())
    (x * x.exp()).sum().backward()
    eps = 1e-6
    an = a.detach().numpy()
    fd = np.zeros_like(an)
    for i in np.ndindex(an.shape):
        up, dn = an.copy(), an.copy()
        up[i] += eps
        dn[i] -= eps
        fd[i] = ((up * np.exp(up)).sum() - (dn * np.exp(dn)).sum()) / (2 * eps)
    np.testing.assert_allclose(x.grad.a.numpy(), fd, rtol=1e-6)
    assert f(a, b).shape == (2,)


# ---------------------------------------------------------------------------- LoggingTensor

def test_logging_tensor_logs_an_mlp_forward_and_backward(sub):
    lt = sub.LoggingTensor
    rng = np.random.default_rng(0)
    x = lt(lucid.tensor(rng.normal(size=(4, 3))))
    w1 = lt(lucid.tensor(rng.normal(size=(5, 3))), requires_grad=True)
    b1 = lt(lucid.tensor(rng.normal(size=5)), requires_grad=True)
    w2 = lt(lucid.tensor(rng.normal(size=(1, 5))), requires_grad=True)
    lt.log = []
    try:
        loss = F.linear(F.linear(x, w1, b1).tanh(), w2).sum()
        forward = list(lt.log)
        lt.log.clear()
        loss.backward()
        backward = list(lt.log)
    finally:
        lt.log = None
    assert forward[-2:] == ["lucid::tanh", "lucid::linear"] or forward[-1] == "lucid::sum"
    assert forward[-1] == "lucid::sum" and "lucid::tanh" in forward
    assert backward[0] == "lucid::ones_like"  # the seed, as PyTorch's engine makes it
    assert "lucid::matmul" in backward and "lucid::mul" in backward  # tanh' = 1 - out^2 times g
    assert all(name.startswith("lucid::") for name in forward + backward)
    for leaf, shape in ((w1, (5, 3)), (b1, (5,)), (w2, (1, 5))):
        assert type(leaf.grad) is lt and leaf.grad.shape == shape
    # the values are the plain computation's
    xs, w1s, b1s, w2s = (lucid.tensor(t.elem.numpy(), requires_grad=True) for t in (x, w1, b1, w2))
    F.linear(F.linear(xs, w1s, b1s).tanh(), w2s).sum().backward()
    np.testing.assert_allclose(w1.grad.elem.numpy(), w1s.grad.numpy(), rtol=1e-12)
    np.testing.assert_allclose(b1.grad.elem.numpy(), b1s.grad.numpy(), rtol=1e-12)


def test_modes_come_before_subclasses(sub):
    order = []

    class Seen(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            order.append(("mode", func.name(), tuple(t.__name__ for t in types)))
            return func(*args, **(kwargs or {}))

    x = sub.LoggingTensor(lucid.tensor([1.0, 2.0]))
    sub.LoggingTensor.log = order
    try:
        with Seen():
            y = x.exp()
    finally:
        sub.LoggingTensor.log = None
    # the mode first (it sees the wrapper); its func(*args) reaches the subclass, whose inner exp
    # the mode does not see (a mode is off while its own handler runs, as in PyTorch)
    assert order == [("mode", "lucid::exp", ("LoggingTensor",)), "lucid::exp"]
    np.testing.assert_allclose(y.elem.numpy(), np.exp([1.0, 2.0]), rtol=1e-6)


def test_not_implemented_falls_through(sub):
    class Decline(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if types:
                return NotImplemented  # leave subclasses to their own handler
            return func(*args, **(kwargs or {}))

    x = two(sub, [1.0], [2.0])
    with Decline():
        y = x * 3
    assert type(y) is sub.TwoTensor and y.b.tolist() == [6.0]

    class Refuse(lucid.Tensor):
        @staticmethod
        def __new__(cls, elem):
            r = lucid.Tensor._make_wrapper_subclass(cls, elem.shape, dtype=elem.dtype, device=elem.device)
            r.elem = elem
            return r

        @classmethod
        def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
            return NotImplemented

    with pytest.raises(TypeError, match=r"lucid::mul: no __torch_dispatch__ handled it: Refuse returned"):
        Refuse(lucid.ones(1)) * 2


def test_subclass_order_puts_subclasses_first(sub):
    calls = []

    class Base(sub.TwoTensor):
        @classmethod
        def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
            calls.append(("Base", tuple(t.__name__ for t in types)))
            return lucid.ones(1)

    class Child(Base):
        @classmethod
        def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
            calls.append(("Child", tuple(t.__name__ for t in types)))
            return NotImplemented  # falls through to the next class

    b = Base(lucid.ones(1), lucid.ones(1))
    c = Child(lucid.ones(1), lucid.ones(1))
    out = ops.lucid.add(b, c)  # Child is a subclass of Base: asked first although it comes second
    assert calls == [("Child", ("Child", "Base")), ("Base", ("Child", "Base"))]
    assert type(out) is lucid.Tensor and out.tolist() == [1.0]


def test_deepcopy_of_a_wrapper_leaf(sub):
    import copy

    w = two(sub, [1.0, 2.0], [3.0, 4.0], requires_grad=True)
    (w * w).sum().backward()
    w.note = {"tag": [1]}
    c = copy.deepcopy(w)
    assert type(c) is sub.TwoTensor and c.requires_grad and c.is_leaf and c.note == {"tag": [1]}
    assert c.a is not w.a and c.a.tolist() == [1.0, 2.0] and c.b.tolist() == [3.0, 4.0]
    assert type(c.grad) is sub.TwoTensor and c.grad.b.tolist() == [6.0, 8.0] and c.grad is not w.grad
    assert c.note is not w.note


# ---------------------------------------------------------------------- extra metadata, helpers

def test_constant_extra_metadata_survives_ops(sub):
    cm = sub.ConstantExtraMetadataTensor
    x = cm(lucid.tensor([1.0, -2.0, 3.0]))
    x.constant_attribute = 7
    for out in (x * 2, x.exp(), x.reshape(3, 1).t(), x[1:], (x + x).sum()):
        assert type(out) is cm and out.constant_attribute == 7
    np.testing.assert_allclose((x * 2).elem.numpy(), [2.0, -4.0, 6.0])
    w = cm(lucid.tensor([1.0, 2.0], requires_grad=True))
    (w * w).sum().backward()
    assert type(w.grad) is cm and w.grad.elem.tolist() == [2.0, 4.0] and w.grad.constant_attribute == 4


def test_traceable_helpers(sub):
    x = two(sub, [1.0, 2.0], [3.0, 4.0])
    assert is_traceable_wrapper_subclass(x) and not is_traceable_wrapper_subclass(lucid.ones(1))
    assert not is_traceable_wrapper_subclass(sub.LoggingTensor(lucid.ones(1)))  # no __tensor_flatten__
    y = transform_subclass(x, lambda name, t: t * (10 if name == "a" else -1))
    assert type(y) is sub.TwoTensor and y.a.tolist() == [10.0, 20.0] and y.b.tolist() == [-3.0, -4.0]
    c = sub.ConstantExtraMetadataTensor(lucid.ones(2))
    c.constant_attribute = 9
    d = transform_subclass(c, lambda name, t: t + 1)
    assert d.constant_attribute == 9 and d.elem.tolist() == [2.0, 2.0]
    with pytest.raises(TypeError, match="transform_subclass: expected a traceable wrapper subclass"):
        transform_subclass(lucid.ones(1), lambda n, t: t)


def test_return_and_correct_aliasing():
    x = lucid.ones(2)
    inplace = pd._PseudoOp("add_", lucid.Tensor.add_, inplace=True)
    assert return_and_correct_aliasing(inplace, (x, 1.0), {}, x + 1) is x
    view = ops.lucid.transpose.default
    assert view.is_view and not ops.lucid.exp.default.is_view
    out = lucid.ones(2, 1)
    assert return_and_correct_aliasing(view, (x,), {}, out) is out and out._version is x._version


def test_register_torch_dispatch_for_a_subclass_and_a_mode(sub):
    x = two(sub, [1.0, 2.0], [3.0, 4.0])

    def swap(cls, func, types, args, kwargs):  # exp of a TwoTensor swaps its halves
        t = args[0]
        return cls(func(t.b), func(t.a))

    register_torch_dispatch("lucid::exp", sub.TwoTensor, swap)
    try:
        y = x.exp()
        np.testing.assert_allclose(y.a.numpy(), np.exp([3.0, 4.0]))
        assert (x * 1).a.tolist() == [1.0, 2.0]  # other ops: the class's own handler
    finally:
        pd._RULES.clear()

    class Plain(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            return func(*args, **(kwargs or {}))

    @register_torch_dispatch(ops.lucid.neg, Plain)
    def _(mode, func, types, args, kwargs):
        return func(*args, **kwargs) * 10

    try:
        with Plain():
            assert (-lucid.tensor([1.0])).tolist() == [-10.0]
            assert lucid.exp(lucid.zeros(1)).tolist() == [1.0]
    finally:
        pd._RULES.clear()
    with pytest.raises(ValueError, match="register_torch_dispatch: 'mylib::foo' is not a Lucid primitive"):
        register_torch_dispatch("mylib::foo", Plain, lambda *a: None)
    with pytest.raises(TypeError, match="expected a TorchDispatchMode class or a Tensor subclass"):
        register_torch_dispatch("lucid::exp", lucid.Tensor, lambda *a: None)


def test_make_subclass_instances_with_torch_dispatch(sub):
    # a subclass holding real values (Tensor._make_subclass) that doubles every result
    class Doubling(lucid.Tensor):
        @staticmethod
        def __new__(cls, data):
            return lucid.Tensor._make_subclass(cls, data, False)

        @classmethod
        def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
            with DisableTorchDispatch():  # Lucid's as_subclass is made of ops: keep them plain
                plain = [a.as_subclass(lucid.Tensor) if isinstance(a, cls) else a for a in args]
                return func(*plain, **(kwargs or {})) * 2

    d = Doubling(lucid.tensor([1.0, 2.0]))
    out = ops.lucid.add(d, 1.0)  # the primitive itself: what __torch_dispatch__ returned
    assert type(out) is lucid.Tensor and out.tolist() == [4.0, 6.0]
    out = d + 1  # through __torch_function__, whose default gives results the class (PyTorch's)
    assert type(out) is Doubling and out.tolist() == [4.0, 6.0]


# ------------------------------------------------------------------ composite compliance

def _compliance_cases():
    r = np.random.default_rng(0)
    m = r.uniform(0.5, 2.0, size=(3, 4))
    n = r.uniform(0.5, 2.0, size=(3, 4))
    sq = r.uniform(0.5, 2.0, size=(4, 4))
    return [
        ("add", lambda x, y: lucid.add(x, y, alpha=2), 2),
        ("sub", lucid.sub, 2), ("mul", lucid.mul, 2), ("div", lucid.div, 2),
        ("pow", lambda x: x ** 2.5, 1), ("exp", lucid.exp, 1), ("log", lucid.log, 1),
        ("sqrt", lucid.sqrt, 1), ("sin", lucid.sin, 1), ("tanh", lucid.tanh, 1),
        ("sigmoid", lucid.sigmoid, 1), ("abs", lucid.abs, 1),
        ("clamp", lambda x: lucid.clamp(x, 0.8, 1.5), 1),
        ("where", lambda x, y: lucid.where(x > 1.0, x, y), 2),
        ("maximum", lucid.maximum, 2),
        ("sum", lambda x: lucid.sum(x, 1), 1), ("mean", lambda x: x.mean(0), 1),
        ("amax", lambda x: lucid.amax(x, 1), 1), ("var", lambda x: lucid.var(x, 1), 1),
        ("std", lambda x: x.std(), 1), ("logsumexp", lambda x: lucid.logsumexp(x, 1), 1),
        ("cumsum", lambda x: lucid.cumsum(x, 1), 1), ("prod", lambda x: lucid.prod(x, 0), 1),
        ("norm", lambda x: lucid.linalg.vector_norm(x, dim=1), 1),
        ("transpose", lambda x: x.transpose(0, 1), 1), ("reshape", lambda x: x.reshape(2, 6), 1),
        ("permute", lambda x: x.unsqueeze(0).permute(2, 0, 1), 1), ("flatten", lucid.flatten, 1),
        ("flip", lambda x: lucid.flip(x, [1]), 1), ("roll", lambda x: lucid.roll(x, 1, 1), 1),
        ("cat", lambda x, y: lucid.cat([x, y], 1), 2), ("stack", lambda x, y: lucid.stack([x, y]), 2),
        ("getitem", lambda x: x[1:, ::2], 1), ("tril", lucid.tril, 1),
        ("matmul", lambda x, y: x @ y.t(), 2), ("einsum", lambda x, y: lucid.einsum("ij,kj->ik", x, y), 2),
        ("softmax", lambda x: F.softmax(x, 1), 1), ("log_softmax", lambda x: F.log_softmax(x, 1), 1),
        ("relu", F.relu, 1), ("gelu", F.gelu, 1), ("silu", F.silu, 1),
        ("layer_norm", lambda x: F.layer_norm(x, (4,)), 1), ("linear", lambda x, y: F.linear(x, y), 2),
        ("mse_loss", F.mse_loss, 2), ("normalize", lambda x: F.normalize(x, dim=1), 1),
        ("outer", lambda x: lucid.outer(x[0], x[1]), 1),
        ("inv", lambda x: lucid.linalg.inv(x[:3, :3] + 3 * lucid.eye(3, dtype=x.dtype)), 1),
    ], m, n, sq


def _compliance_failures(sub, cases, m, n):
    """Each function on TwoTensor inputs: both halves must equal the plain result on each half's
    inputs, and so must the gradients (a composite that reads raw arrays fails here)."""
    failures = []
    for name, fn, arity in cases:
        ins_a = [m, n][:arity]
        ins_b = [n * 1.5, m * 0.5][:arity]
        try:
            xs = [sub.TwoTensor(lucid.tensor(a, requires_grad=True), lucid.tensor(b, requires_grad=True))
                  for a, b in zip(ins_a, ins_b)]
            out = fn(*xs)
            plain_a = [lucid.tensor(a, requires_grad=True) for a in ins_a]
            plain_b = [lucid.tensor(b, requires_grad=True) for b in ins_b]
            want_a, want_b = fn(*plain_a), fn(*plain_b)
            assert type(out) is sub.TwoTensor, f"returned {type(out).__name__}"
            np.testing.assert_allclose(out.a.detach().numpy(), want_a.detach().numpy(), rtol=1e-12)
            np.testing.assert_allclose(out.b.detach().numpy(), want_b.detach().numpy(), rtol=1e-12)
            out.sum().backward()
            want_a.sum().backward()
            want_b.sum().backward()
            for x, pa, pb in zip(xs, plain_a, plain_b):
                np.testing.assert_allclose(x.grad.a.numpy(), pa.grad.numpy(), rtol=1e-10, atol=1e-12)
                np.testing.assert_allclose(x.grad.b.numpy(), pb.grad.numpy(), rtol=1e-10, atol=1e-12)
        except Exception as e:  # collect all, report together
            failures.append(f"{name}: {type(e).__name__}: {str(e)[:200]}")
    return failures


def test_composite_compliance_each_half_equals_the_plain_result(sub):
    cases, m, n, _ = _compliance_cases()
    assert len(cases) >= 30
    failures = _compliance_failures(sub, cases, m, n)
    assert not failures, "\n".join(failures)


def test_the_compliance_check_catches_a_composite_that_reads_raw_arrays(sub):
    _, m, n, _ = _compliance_cases()
    peeking = [("peek", lambda x: x * lucid.tensor(np.asarray(x).max()), 1),  # reads the array
               ("plain_result", lambda x: lucid.ones(3, 4, dtype=x.dtype) * 2, 1)]  # loses the class
    failures = _compliance_failures(sub, peeking, m, n)
    assert len(failures) == 2
    assert "TwoTensor is a wrapper tensor subclass" in failures[0] and "returned Tensor" in failures[1]


def test_composite_compliance_of_sort_then_gather(sub):
    # gather's bounds check read a wrapper index's raw values (backend.has_values took the
    # wrapper's stand-in for an array): median/quantile sort then gather. On strict:1 its
    # backward's zeros landed on the current device: guard_for now reads a wrapper's device
    _, m, n, _ = _compliance_cases()
    cases = [("median", lambda x: lucid.median(x, 1).values, 1),
             ("quantile", lambda x: lucid.quantile(x, 0.3, dim=1), 1)]
    failures = _compliance_failures(sub, cases, m, n)
    assert not failures, "\n".join(failures)
