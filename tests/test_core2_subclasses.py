"""Wrapper subclasses outside the dispatch module: devices seen by ``namespace_of`` (also through
tracers and on a second device), ``func.grad``'s seed, ``nn.Parameter``, printing, anomaly mode
and optimizer steps (NOTE [Devices of wrapper subclasses] in lucid/_core/backend.py, NOTE
[Subclass parameters] in lucid/nn/parameter.py, NOTE [Printing wrapper subclasses] in
lucid/_core/printing.py, NOTE [Subclass updates] in lucid/optim/optimizer.py).

The classes are made by a module fixture, as in tests/test_subclass_dispatch.py: defining one
turns the dispatch gate on, and the fixture takes it off again when this module is done.
"""
import types

import numpy as np
import pytest

import lucid
from lucid import overrides
from lucid._core import backend
from lucid.utils import _python_dispatch as pd
from lucid.utils._python_dispatch import DisableTorchDispatch, return_and_correct_aliasing


def _make_classes():
    class TwoTensor(lucid.Tensor):
        """Two tensors of one shape; every op runs on both (PyTorch's test helper, for Lucid)."""

        @staticmethod
        def __new__(cls, a, b):
            return lucid.Tensor._make_wrapper_subclass(cls, a.shape, strides=a.stride(), dtype=a.dtype,
                                                       device=a.device, requires_grad=a.requires_grad)

        def __init__(self, a, b):
            self.a, self.b = a, b

        def __repr__(self):
            return f"TwoTensor({self.a!r}, {self.b!r})"

        def __tensor_flatten__(self):
            return ["a", "b"], None

        @staticmethod
        def __tensor_unflatten__(inner, meta, outer_size, outer_stride):
            return TwoTensor(inner["a"], inner["b"])

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

    class Bare(lucid.Tensor):
        """One inner tensor, no __repr__ and no __tensor_flatten__."""

        @staticmethod
        def __new__(cls, elem):
            return lucid.Tensor._make_wrapper_subclass(cls, elem.shape, dtype=elem.dtype, device=elem.device,
                                                       requires_grad=elem.requires_grad)

        def __init__(self, elem):
            self.elem = elem.detach() if elem.requires_grad else elem

        @classmethod
        def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
            out = func(*[a.elem if isinstance(a, cls) else a for a in args], **(kwargs or {}))
            return cls(out) if isinstance(out, lucid.Tensor) else out

    class Tagged(lucid.Tensor):
        """A ``_make_subclass`` class (its own values) whose handler unwraps with ``as_subclass``."""

        @staticmethod
        def __new__(cls, elem):
            return lucid.Tensor._make_subclass(cls, elem, elem.requires_grad)

        @classmethod
        def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
            with DisableTorchDispatch():  # as in PyTorch, where as_subclass reaches the handler too
                plain = [a.as_subclass(lucid.Tensor) if isinstance(a, cls) else a for a in args]
                out = func(*plain, **(kwargs or {}))
                return out.as_subclass(cls) if isinstance(out, lucid.Tensor) else out

    return types.SimpleNamespace(TwoTensor=TwoTensor, Bare=Bare, Tagged=Tagged)


@pytest.fixture(scope="module")
def sub():
    classes = _make_classes()
    yield classes
    pd._forget_dispatch_subclasses()
    overrides._deactivate()


@pytest.fixture(autouse=True)
def _protocol_on(sub):
    # conftest turns the __torch_function__ dispatchers off after each test; a program that
    # defines a subclass has them on (the pseudo-ops reach __torch_dispatch__ through them)
    for cls in vars(sub).values():
        pd._register_dispatch_subclass(cls)
    overrides._activate()
    yield


def two(sub, a, b, device=None, requires_grad=False):
    a = lucid.tensor(a, dtype=lucid.float64, device=device, requires_grad=requires_grad)
    b = lucid.tensor(b, dtype=lucid.float64, device=device, requires_grad=requires_grad)
    return sub.TwoTensor(a, b)


def _second_device():
    from lucid.testing import strict_device

    strict_device.enable()
    return "strict:1"


# ------------------------------------------------------------------ 1. devices of wrappers

def test_namespace_of_a_wrapper_on_the_device_that_is_not_current(sub):
    dev = _second_device()
    w = two(sub, [1.0, 2.0], [3.0, 4.0], device=dev)
    made = backend.namespace_of(w).zeros(3)
    assert backend.device_of_array(made) == lucid.device(dev)  # not the current strict:0
    seen = []

    def f(t):
        seen.append((backend.array_cls_of(t), backend.device_of_array(backend.namespace_of(t).ones(1))))
        return t * 2

    lucid.func.vmap(f)(w)  # the tracer wraps the wrapper: its device shows through
    assert seen == [(backend._BACKENDS["strict"].array_type, lucid.device(dev))]


def test_helper_arrays_of_rules_land_on_the_wrappers_device(sub):
    dev = _second_device()
    x = two(sub, [0.5, -1.0, 2.0], [2.0, 3.0, -0.5], device=dev, requires_grad=True)
    g = lucid.autograd.grad((x ** 3).sum(), x, create_graph=True)  # pow's rule makes a where mask
    h = lucid.autograd.grad(g.sum(), x)
    assert h.device == lucid.device(dev)
    np.testing.assert_allclose(h.a.detach().numpy(), 6 * np.array([0.5, -1.0, 2.0]))
    np.testing.assert_allclose(h.b.detach().numpy(), 6 * np.array([2.0, 3.0, -0.5]))
    m = two(sub, [[1.0, 2.0], [3.0, 4.0]], [[5.0, 6.0], [7.0, 8.0]], device=dev)
    assert m.tril().a.tolist() == [[1.0, 0.0], [3.0, 4.0]] and m.tril().b.tolist() == [[5.0, 0.0], [7.0, 8.0]]
    p = m.prod(1)
    assert p.a.tolist() == [2.0, 12.0] and p.b.tolist() == [30.0, 56.0]


def test_vmap_of_grad_seeds_beside_a_device_wrapper(sub):
    dev = _second_device()
    a = np.array([[1.0, 2.0, 3.0], [0.5, 1.0, 2.0]])
    b = np.array([[4.0, 5.0, 6.0], [1.0, -2.0, 3.0]])
    g = lucid.func.vmap(lucid.func.grad(lambda t: (t * t.sin()).sum()))(two(sub, a, b, device=dev))
    assert type(g) is sub.TwoTensor and g.device == lucid.device(dev)
    np.testing.assert_allclose(g.a.numpy(), np.sin(a) + a * np.cos(a), rtol=1e-12)
    np.testing.assert_allclose(g.b.numpy(), np.sin(b) + b * np.cos(b), rtol=1e-12)


# ------------------------------------------------------------------ 2. func.grad's seed

def test_func_grad_of_a_sum_keeps_the_subclass(sub):
    x = two(sub, [1.0, 2.0], [3.0, 4.0])
    g = lucid.func.grad(lambda t: t.sum())(x)
    assert type(g) is sub.TwoTensor  # PyTorch: TwoTensor(tensor([1., 1.]), tensor([1., 1.]))
    assert g.a.tolist() == [1.0, 1.0] and g.b.tolist() == [1.0, 1.0]
    y = two(sub, [5.0], [6.0])
    gx, gy = lucid.func.grad(lambda s, t: (s * 3).sum(), argnums=(0, 1))(x, y)
    assert type(gx) is sub.TwoTensor and gx.b.tolist() == [3.0, 3.0]
    assert type(gy) is sub.TwoTensor and gy.a.tolist() == [0.0] and gy.b.tolist() == [0.0]


# ------------------------------------------------------------------ 3. as_subclass in a handler

def test_as_subclass_inside_a_make_subclass_handler(sub):
    x = sub.Tagged(lucid.tensor([1.0, 2.0], dtype=lucid.float64, requires_grad=True))
    y = x * 3
    assert type(y) is sub.Tagged and y.as_subclass(lucid.Tensor).tolist() == [3.0, 6.0]
    y.sum().backward()
    assert x.grad.tolist() == [3.0, 3.0]


# ------------------------------------------------------------------ 4. nn.Parameter

def test_parameter_of_a_wrapper_keeps_the_subclass_detached(sub):
    a = lucid.tensor([1.0, 2.0], dtype=lucid.float64, requires_grad=True)
    x = sub.TwoTensor(a, lucid.tensor([3.0, 4.0], dtype=lucid.float64, requires_grad=True))
    p = lucid.nn.Parameter(x)
    assert type(p) is sub.TwoTensor and isinstance(p, lucid.nn.Parameter) and not isinstance(x, lucid.nn.Parameter)
    assert p.requires_grad and p.is_leaf and p.a is not a and not p.a.requires_grad
    q = p * 2
    assert type(q) is sub.TwoTensor and q.a.tolist() == [2.0, 4.0] and q.b.tolist() == [6.0, 8.0]
    off = lucid.nn.Parameter(x, requires_grad=False)
    assert not off.requires_grad and x.requires_grad  # the argument is left as it was
    m = lucid.nn.Module()
    m.w = p
    assert [n for n, _ in m.named_parameters()] == ["w"] and m.w is p


def test_parameter_of_a_wrapper_whose_detach_changes_class(sub):
    from lucid._core.tensor import _disabled_torch_function_impl

    class Leaky(sub.Bare):  # results leave the class (PyTorch's CustomTensorPlainOut)
        __torch_function__ = _disabled_torch_function_impl

        @classmethod
        def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
            return func(*[a.elem if isinstance(a, cls) else a for a in args], **(kwargs or {}))  # plain out

    with pytest.raises(RuntimeError, match="detach\\(\\) returns an instance of the same type"):
        lucid.nn.Parameter(Leaky(lucid.ones(2)))


# ------------------------------------------------------------------ 5. printing

def test_a_wrapper_without_repr_prints_its_metadata(sub):
    w = sub.Bare(lucid.ones(2, 3, dtype=lucid.float64, device="cpu"))
    assert repr(w) == "Bare(..., size=(2, 3), dtype=lucid.float64)" and str(w) == repr(w)
    r = sub.Bare(lucid.ones(4, device="cpu", requires_grad=True))
    assert repr(r) == "Bare(..., size=(4,), requires_grad=True)"
    assert repr(r * 2) == "Bare(..., size=(4,), grad_fn=<MulBackward0>)"
    assert repr(lucid.nn.Parameter(sub.Bare(lucid.ones(2, device="cpu")))) == \
        "Parameter(Bare(..., size=(2,), requires_grad=True))"
    dev = _second_device()
    assert repr(sub.Bare(lucid.ones(1, device=dev))) == f"Bare(..., device='{dev}', size=(1,))"


# ------------------------------------------------------------------ 6. anomaly mode

def test_detect_anomaly_through_a_wrapper_backward(sub):
    x = two(sub, [1.0, 4.0], [2.0, 9.0], requires_grad=True)
    with lucid.autograd.detect_anomaly():
        x.sqrt().sum().backward()
    np.testing.assert_allclose(x.grad.a.numpy(), 0.5 / np.sqrt([1.0, 4.0]))
    np.testing.assert_allclose(x.grad.b.numpy(), 0.5 / np.sqrt([2.0, 9.0]))
    y = two(sub, [1.0, 4.0], [0.0, 9.0], requires_grad=True)  # a NaN in the second half only
    with lucid.autograd.detect_anomaly(), pytest.raises(RuntimeError, match="'SqrtBackward0' returned nan"):
        (y.sqrt() * 0).sum().backward()


# ------------------------------------------------------------------ 7. optimizers

def _reference_steps(opt_cls, kwargs, start, steps):
    """The same loss on a plain float64 tensor, one half at a time."""
    w = lucid.tensor(start, dtype=lucid.float64, requires_grad=True)
    opt = opt_cls([w], **kwargs)
    for _ in range(steps):
        opt.zero_grad()
        (w * w * w).sum().backward()
        opt.step()
    return w.detach().numpy()


@pytest.mark.parametrize("opt_cls,kwargs", [
    (lucid.optim.SGD, dict(lr=0.05, momentum=0.9, weight_decay=0.1)),
    (lucid.optim.SGD, dict(lr=0.05, momentum=0.9, nesterov=True, maximize=True)),
    (lucid.optim.Adam, dict(lr=0.05, amsgrad=True)),
    (lucid.optim.AdamW, dict(lr=0.05, weight_decay=0.1)),
])
def test_optimizers_update_a_two_tensor_parameter(sub, opt_cls, kwargs):
    a0, b0 = [1.0, -2.0, 0.5], [0.25, 3.0, -1.5]
    p = lucid.nn.Parameter(two(sub, a0, b0))
    opt = opt_cls([p], **kwargs)
    for _ in range(3):
        opt.zero_grad(set_to_none=False)
        (p * p * p).sum().backward()
        opt.step()
    assert type(p) is sub.TwoTensor
    np.testing.assert_allclose(p.a.numpy(), _reference_steps(opt_cls, kwargs, a0, 3), rtol=1e-12)
    np.testing.assert_allclose(p.b.numpy(), _reference_steps(opt_cls, kwargs, b0, 3), rtol=1e-12)
    assert all(type(v) is sub.TwoTensor for v in opt.state[p].values() if isinstance(v, lucid.Tensor))


def test_sgd_on_two_tensor_parameters_matches_pytorch(sub):
    torch = pytest.importorskip("torch")
    two_tensor = pytest.importorskip("torch.testing._internal.two_tensor")
    a0, b0 = np.array([1.0, -2.0]), np.array([0.5, 3.0])
    tp = torch.nn.Parameter(two_tensor.TwoTensor(torch.tensor(a0), torch.tensor(b0)))
    topt = torch.optim.SGD([tp], lr=0.1, momentum=0.9)
    p = lucid.nn.Parameter(two(sub, a0, b0))
    opt = lucid.optim.SGD([p], lr=0.1, momentum=0.9)
    for _ in range(3):
        topt.zero_grad()
        (tp * tp).sum().backward()
        topt.step()
        opt.zero_grad()
        (p * p).sum().backward()
        opt.step()
    np.testing.assert_allclose(p.a.numpy(), tp.a.detach().numpy(), rtol=1e-12)
    np.testing.assert_allclose(p.b.numpy(), tp.b.detach().numpy(), rtol=1e-12)


def test_optimizer_state_dict_of_two_tensor_state_round_trips(sub):
    def step(p, opt):
        opt.zero_grad()
        (p * p * p).sum().backward()
        opt.step()

    p = lucid.nn.Parameter(two(sub, [1.0, -2.0], [0.5, 3.0]))
    opt = lucid.optim.Adam([p], lr=0.05)
    step(p, opt)
    saved = opt.state_dict()
    m = saved["state"][0]["exp_avg"]
    assert type(m) is sub.TwoTensor and m is not opt.state[p]["exp_avg"]  # a copy, of the class
    q = lucid.nn.Parameter(two(sub, p.a.tolist(), p.b.tolist()))
    resumed = lucid.optim.Adam([q], lr=0.05)
    resumed.load_state_dict(saved)
    step(p, opt)
    step(q, resumed)
    np.testing.assert_allclose(q.a.numpy(), p.a.numpy(), rtol=1e-14)
    np.testing.assert_allclose(q.b.numpy(), p.b.numpy(), rtol=1e-14)
    assert resumed.state[q]["step"] == 2 and type(resumed.state[q]["exp_avg_sq"]) is sub.TwoTensor
