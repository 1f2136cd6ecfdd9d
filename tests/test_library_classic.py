"""PyTorch's classic ``torch.library`` API: ``Library``, ``define``, ``impl`` ... (NOTE [Classic
library API] in ``lucid/library.py``)."""
import gc
import inspect
import itertools
import warnings

import numpy as np
import pytest

import lucid
from lucid import library
from lucid.library import Library, ops

_COUNTER = itertools.count()


@pytest.fixture
def lib():
    """A fresh DEF library in a namespace of its own, destroyed after the test."""
    ns = f"classic_t{next(_COUNTER)}"
    made = Library(ns, "DEF")
    yield made
    made._destroy()


def _cpu(values, **kw):
    return lucid.tensor(values, device="cpu", **kw)


def test_kinds_and_namespaces():
    with pytest.raises(ValueError, match="Unsupported kind: XYZ"):
        Library("classic_kinds", "XYZ")
    first = Library("classic_kinds", "DEF")
    with pytest.raises(RuntimeError, match="Only a single TORCH_LIBRARY"):
        Library("classic_kinds", "DEF")
    frag = Library("classic_kinds", "FRAGMENT")
    assert frag.define("more(Tensor x) -> Tensor") == "more"
    with pytest.raises(RuntimeError, match="Cannot define an operator inside of a TORCH_LIBRARY_IMPL"):
        Library("classic_kinds", "IMPL").define("nope(Tensor x) -> Tensor")
    first._destroy()
    again = Library("classic_kinds", "DEF")  # the namespace is free once the DEF library is gone
    again._destroy()
    frag._destroy()


def test_schema_parsing(lib):
    name = lib.define("every(Tensor x, Tensor? w=None, Tensor[] xs=[], int n=3, float a=-1.5, bool b=True, "
                      "str s='hi', SymInt k=2, Scalar c=1, int[2] size=[1, 2], *, ScalarType? dtype=None) -> Tensor")
    assert name == "every"
    op = getattr(ops, lib.ns).every
    sig = inspect.signature(op._init_fn)  # the signature built from the schema
    defaults = {k: p.default for k, p in sig.parameters.items()}
    assert defaults == {"x": inspect.Parameter.empty, "w": None, "xs": [], "n": 3, "a": -1.5, "b": True, "s": "hi",
                        "k": 2, "c": 1, "size": [1, 2], "dtype": None}
    assert sig.parameters["dtype"].kind is inspect.Parameter.KEYWORD_ONLY
    assert sig.parameters["n"].kind is inspect.Parameter.POSITIONAL_OR_KEYWORD
    with pytest.raises(RuntimeError, match="unknown type 'Tensr'"):
        lib.define("bad(Tensr x) -> Tensor")
    with pytest.raises(RuntimeError, match="can't parse the schema"):
        lib.define("no arrow here")
    with pytest.raises(RuntimeError, match="same name and overload name multiple times"):
        lib.define("every(Tensor x) -> Tensor")


def test_cpu_kernel_gets_defaults_and_autograd(lib):
    lib.define("scale(Tensor x, float alpha=2.0) -> Tensor")
    seen = []

    def kernel(x, alpha):  # PyTorch passes every argument, defaults filled in
        seen.append(alpha)
        return lucid.tensor(np.asarray(x.numpy()) * alpha, device="cpu")

    lib.impl("scale", kernel, "CPU")
    op = getattr(ops, lib.ns).scale
    assert op(_cpu([1.0, 2.0])).tolist() == [2.0, 4.0] and seen == [2.0]
    assert op(_cpu([1.0]), alpha=5.0).tolist() == [5.0]
    assert op.default is op
    x = _cpu([1.0, 2.0], dtype=lucid.float64, requires_grad=True)
    with pytest.raises(RuntimeError, match="no autograd formula was registered"):
        op(x).sum().backward()
    library.register_autograd(f"{lib.ns}::scale", lambda ctx, g: (g * ctx.alpha, None),
                              setup_context=lambda ctx, inputs, out: setattr(ctx, "alpha", inputs[1]))
    x.grad = None
    op(x, 3.0).sum().backward()
    assert x.grad.tolist() == [3.0, 3.0]
    assert lucid.autograd.gradcheck(lambda t: op(t, 1.5), (x,))


def test_composite_implicit_is_differentiated_by_lucid(lib):
    lib.define("softplus2(Tensor x) -> Tensor")
    lib.impl("softplus2", lambda x: lucid.log1p(lucid.exp(2 * x)))  # no key: CompositeImplicitAutograd
    op = getattr(ops, lib.ns).softplus2
    x = lucid.tensor([-1.0, 0.0, 0.5], dtype=lucid.float64, requires_grad=True)
    op(x).sum().backward()
    expected = 2 * np.exp(2 * x.detach().numpy(force=True)) / (1 + np.exp(2 * x.detach().numpy(force=True)))
    np.testing.assert_allclose(x.grad.numpy(force=True), expected, rtol=1e-12)
    xs = lucid.randn(4, 3, dtype=lucid.float64)
    batched = lucid.func.vmap(op)(xs)
    looped = lucid.stack([op(xs[i]) for i in range(4)])
    assert lucid.allclose(batched, looped)
    g2 = lucid.func.grad(lambda t: lucid.func.grad(lambda u: op(u).sum())(t).sum())(x.detach())
    sig = 1 / (1 + np.exp(-2 * x.detach().numpy(force=True)))
    np.testing.assert_allclose(g2.numpy(force=True), 4 * sig * (1 - sig), rtol=1e-10)


def test_device_kernel_wins_over_implicit(lib):
    lib.define("which(Tensor x) -> Tensor")
    lib.impl("which", lambda x: x + 1, "CompositeImplicitAutograd")
    lib.impl("which", lambda x: x + 100, "CPU")
    op = getattr(ops, lib.ns).which
    assert op(_cpu([0.0])).tolist() == [100.0]
    assert op(lucid.zeros(1, device="meta")).shape == (1,)  # no Meta kernel: the composite runs there


def test_autograd_key_kernel(lib):
    lib.define("cube(Tensor x) -> Tensor")
    lib.impl("cube", lambda x: lucid.tensor(x.numpy() ** 3, device="cpu"), "CPU")
    op = getattr(ops, lib.ns).cube

    class Cube(lucid.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return op(x)  # grad mode is off in forward: the CPU kernel runs

        @staticmethod
        def backward(ctx, g):
            (x,) = ctx.saved_tensors
            return 3 * x ** 2 * g

    lib.impl("cube", Cube.apply, "Autograd")
    x = _cpu([1.0, 2.0], requires_grad=True)
    y = op(x)
    assert y.tolist() == [1.0, 8.0]
    y.sum().backward()
    assert x.grad.tolist() == [3.0, 12.0]
    assert op(_cpu([2.0])).tolist() == [8.0]  # nothing requires grad: straight to the kernel


def test_meta_kernel_and_get_ctx(lib):
    lib.define("pairsum(Tensor x) -> Tensor")
    seen = []

    def meta(x):
        seen.append(library.get_ctx())
        return lucid.empty(x.shape[0] // 2, device="meta", dtype=x.dtype)

    lib.impl("pairsum", lambda x: x.reshape(-1, 2).sum(1), "CompositeExplicitAutograd")
    lib.impl("pairsum", meta, "Meta")
    op = getattr(ops, lib.ns).pairsum
    out = op(lucid.zeros(6, device="meta", dtype=lucid.float64))
    assert out.shape == (3,) and out.device.type == "meta" and out.dtype == lucid.float64
    assert isinstance(seen[0], library.FakeImplCtx) and library.get_ctx() is None
    with pytest.raises(NotImplementedError, match="static shapes"):
        seen[0].new_dynamic_size()
    assert op(lucid.arange(4.0)).tolist() == [1.0, 5.0]  # the default device: CompositeExplicitAutograd


def test_mutating_and_out_variants(lib):
    lib.define("add_one_(Tensor(a!) x) -> ()")

    def add_one_(x):
        x.add_(1)

    lib.impl("add_one_", add_one_, "CompositeExplicitAutograd")
    lib.define("twice.out(Tensor x, *, Tensor(a!) out) -> Tensor(a!)")
    lib.impl("twice.out", lambda x, *, out: out.copy_(x * 2), "CompositeExplicitAutograd")
    ns = getattr(ops, lib.ns)
    x = lucid.zeros(2)
    v = x._version[0]
    assert ns.add_one_(x) is None and x.tolist() == [1.0, 1.0] and x._version[0] > v
    with pytest.raises(RuntimeError, match="requires grad"):
        ns.add_one_(lucid.zeros(2, requires_grad=True))
    out = lucid.empty(2)
    res = ns.twice.out(lucid.tensor([1.0, 3.0]), out=out)
    assert res is out and out.tolist() == [2.0, 6.0]
    with pytest.raises(RuntimeError, match="no default overload"):
        ns.twice(lucid.ones(1))
    assert f"{lib.ns}::twice.out" in library._OPS


def test_destroy_and_garbage_collection():
    made = Library("classic_gc", "DEF")
    made.define("f(Tensor x) -> Tensor")
    made.impl("f", lambda x: x * 3)
    assert ops.classic_gc.f(lucid.ones(1)).tolist() == [3.0]
    del made
    gc.collect()
    with pytest.raises(AttributeError):
        ops.classic_gc.f
    Library("classic_gc", "DEF")._destroy()  # the namespace was released


def test_impl_from_another_library_is_removed_with_it(lib):
    lib.define("g(Tensor x) -> Tensor")
    lib.impl("g", lambda x: x + 1, "CompositeExplicitAutograd")
    other = Library(lib.ns, "IMPL")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        other.impl("g", lambda x: x + 2, "CPU")
    op = getattr(ops, lib.ns).g
    assert op(_cpu([0.0])).tolist() == [2.0]
    other._destroy()
    assert op(_cpu([0.0])).tolist() == [1.0]
    with pytest.raises(RuntimeError, match="already a kernel registered"):
        lib.impl("g", lambda x: x, "CompositeExplicitAutograd", allow_override=False)
    with pytest.warns(UserWarning, match="overriding"):
        lib.impl("g", lambda x: x + 5, "CompositeExplicitAutograd")
    assert op(_cpu([0.0])).tolist() == [5.0]
    with pytest.raises(ValueError, match="dispatch key 'Python' is not supported"):
        lib.impl("g", lambda x: x, "Python")
    with pytest.raises(TypeError, match="callable"):
        lib.impl("g", 3, "CPU")
    with pytest.raises(RuntimeError, match="not defined"):
        lib.impl("missing", lambda x: x, "CPU")


def test_module_level_functions():
    ns = f"classic_mod{next(_COUNTER)}"
    assert library.define(f"{ns}::neg", "(Tensor x) -> Tensor") is None
    decorated = library.impl(f"{ns}::neg", ["cpu", "strict"])(lambda x: -x)
    assert decorated is None  # PyTorch's decorator returns None too
    op = getattr(ops, ns).neg
    assert op(_cpu([1.0])).tolist() == [-1.0]
    with pytest.warns(FutureWarning, match="register_fake"):
        library.impl_abstract(f"{ns}::neg", lambda x: lucid.empty_like(x))
    assert op(lucid.zeros(2, device="meta")).shape == (2,)
    kernel = library.get_kernel(f"{ns}::neg", "CPU")
    assert kernel.call_boxed(None, _cpu([2.0])).tolist() == [-2.0]
    with pytest.raises(RuntimeError, match="no kernel"):
        library.get_kernel(f"{ns}::neg", "CUDA")
    with pytest.raises(NotImplementedError, match="should never be called"):
        library.fallthrough_kernel()
    with pytest.raises(ValueError, match="mylib::my_op"):
        library.define("no_namespace", "(Tensor x) -> Tensor")


def test_register_autocast():
    ns = f"classic_ac{next(_COUNTER)}"
    seen = []
    library.define(f"{ns}::probe", "(Tensor x, Tensor i) -> Tensor")

    def probe(x, i):
        seen.append((x.dtype, i.dtype, lucid.is_autocast_enabled("cpu")))
        return x.clone()

    library.impl(f"{ns}::probe", "cpu", probe)
    library.register_autocast(f"{ns}::probe", "cpu", lucid.float16)
    op = getattr(ops, ns).probe
    x, i = _cpu([1.0, 2.0]), _cpu([1, 2])
    assert op(x, i).dtype == lucid.float32 and seen[-1] == (lucid.float32, lucid.int64, False)
    with lucid.autocast("cpu", dtype=lucid.float16):
        assert op(x, i).dtype == lucid.float16
    assert seen[-1] == (lucid.float16, lucid.int64, False)  # ints kept, autocast off inside
    with pytest.raises(ValueError, match="does not support autocast"):
        library.register_autocast(f"{ns}::probe", "tpu_nope", lucid.float16)


def test_register_torch_dispatch_reexport():
    from lucid.utils import _python_dispatch

    target = getattr(_python_dispatch, "register_torch_dispatch", None)
    if target is None:
        with pytest.raises(NotImplementedError, match="register_torch_dispatch"):
            library.register_torch_dispatch("lucid::exp", object)
        return

    class Plus(_python_dispatch.TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            return func(*args, **(kwargs or {}))

    library.register_torch_dispatch("lucid::exp", Plus, lambda mode, func, types, args, kwargs: func(*args) + 1)
    with Plus():
        assert lucid.exp(lucid.zeros(1)).tolist() == [2.0]


def test_matches_torch():
    torch = pytest.importorskip("torch")
    ns = f"classic_tc{next(_COUNTER)}"
    tlib, llib = torch.library.Library(ns, "DEF"), Library(ns, "DEF")
    schema = "mix(Tensor x, Tensor? w=None, float a=0.5, *, bool flip=False) -> Tensor"
    assert tlib.define(schema) == llib.define(schema)

    def kernel(mod):
        return lambda x, w=None, a=0.5, *, flip=False: (x * a + (0 if w is None else w)) * (-1 if flip else 1)

    tlib.impl("mix", kernel(torch), "CompositeImplicitAutograd")
    llib.impl("mix", kernel(lucid), "CompositeImplicitAutograd")
    t = getattr(torch.ops, ns).mix(torch.tensor([1.0, 2.0]), torch.tensor([1.0, 1.0]), flip=True)
    got = getattr(ops, ns).mix(lucid.tensor([1.0, 2.0]), lucid.tensor([1.0, 1.0]), flip=True)
    assert got.tolist() == t.tolist()
    llib._destroy()
