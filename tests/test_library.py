"""lucid.library (torch.library's custom_op API): kernels by device, autograd through
register_autograd (gradcheck, lucid.func), vmap rules, mutation, fake impls on "meta", opcheck."""
import numpy as np
import pytest

import lucid
from lucid import library
from lucid.library import OpCheckError, custom_op, opcheck


def _np_sin_op(name, backward_uses="cos"):
    # a NumPy kernel (opaque to Lucid's autograd), for the CPU and the strict stand-in device
    @custom_op(f"test_library::{name}", mutates_args=(), device_types=("cpu", "strict"))
    def op(x: lucid.Tensor) -> lucid.Tensor:
        return lucid.tensor(np.sin(x.cpu().numpy()), device=x.device)

    def setup_context(ctx, inputs, output):
        (x,) = inputs
        ctx.save_for_backward(x)

    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return grad * getattr(x, backward_uses)()

    op.register_autograd(backward, setup_context=setup_context)
    return op


np_sin = _np_sin_op("np_sin")
np_sin_wrong = _np_sin_op("np_sin_wrong", backward_uses="sin")


@np_sin.register_fake
def _(x):
    return lucid.empty_like(x)


np_sin_wrong.register_fake(lambda x: lucid.empty_like(x))


def _x64(*values, rg=True):
    return lucid.tensor(list(values), dtype=lucid.float64, requires_grad=rg)


def test_numpy_kernel_forward_backward_and_gradcheck():
    x = _x64(0.3, -1.2, 2.0)
    y = np_sin(x)
    np.testing.assert_allclose(y.detach().numpy(), np.sin([0.3, -1.2, 2.0]))
    assert type(y.grad_fn).__name__ == "FunctionNode" and y.grad_fn.name() == "test_library::np_sinBackward"
    y.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), np.cos([0.3, -1.2, 2.0]))
    assert lucid.autograd.gradcheck(np_sin, (x,))
    # no input requires grad: no graph
    assert np_sin(_x64(1.0, rg=False)).grad_fn is None
    assert library.ops.test_library.np_sin is np_sin and np_sin.default is np_sin
    assert np_sin._schema == "(Tensor x) -> Tensor"


def test_under_lucid_func_grad_and_second_order_through_a_lucid_backward():
    x = _x64(0.5, 1.5)
    g = lucid.func.grad(lambda t: np_sin(t).sum())(x.detach())
    np.testing.assert_allclose(g.numpy(), np.cos([0.5, 1.5]))
    # the backward is written in Lucid ops, so grad of grad differentiates it: d/dx cos(x) = -sin(x)
    gg = lucid.func.grad(lambda t: lucid.func.grad(lambda u: np_sin(u).sum())(t).sum())(x.detach())
    np.testing.assert_allclose(gg.numpy(), -np.sin([0.5, 1.5]))


def test_without_autograd_backward_refuses():
    @custom_op("test_library::no_grad_op", mutates_args=())
    def op(x: lucid.Tensor) -> lucid.Tensor:
        return x * 2

    y = op(_x64(1.0))
    with pytest.raises(RuntimeError, match="^test_library::no_grad_op: .*no autograd formula.*register_autograd"):
        y.sum().backward()
    with pytest.raises(OpCheckError, match="test_autograd_registration failed.*no autograd formula"):
        opcheck(op, (_x64(1.0),), test_utils="test_autograd_registration")


def test_lists_keyword_only_and_setup_context_with_keyword_inputs():
    @custom_op("test_library::weighted_sum", mutates_args=())
    def weighted_sum(xs: list[lucid.Tensor], w: list[float], *, scale: float = 1.0) -> lucid.Tensor:
        return sum(x * wi for x, wi in zip(xs, w)) * scale

    seen = {}

    def setup_context(ctx, inputs, keyword_only_inputs, output):
        seen["needs"] = ctx.needs_input_grad
        ctx.w, ctx.scale = inputs[1], keyword_only_inputs["scale"]

    def backward(ctx, grad):
        return [grad * wi * ctx.scale for wi in ctx.w], None

    weighted_sum.register_autograd(backward, setup_context=setup_context)
    assert weighted_sum._schema == "(Tensor[] xs, float[] w, *, float scale=1.0) -> Tensor"
    a, b = _x64(1.0, 2.0), _x64(3.0, 4.0)
    out = weighted_sum([a, b], [0.5, 2.0], scale=3.0)
    np.testing.assert_allclose(out.detach().numpy(), [19.5, 27.0])
    out.sum().backward()
    np.testing.assert_allclose(a.grad.numpy(), [1.5, 1.5])
    np.testing.assert_allclose(b.grad.numpy(), [6.0, 6.0])
    assert seen["needs"] == (True, False)
    assert opcheck(weighted_sum, ([a, b], [0.5, 2.0]), {"scale": 3.0},
                   test_utils=("test_schema", "test_autograd_registration", "test_aot_dispatch_dynamic"))


def test_device_kernels_dispatch_by_device_type():
    calls = []

    @custom_op("test_library::tagged", mutates_args=(), device_types="cpu")
    def tagged(x: lucid.Tensor) -> lucid.Tensor:
        calls.append("cpu")
        return x + 1

    with pytest.raises(NotImplementedError, match=r"^test_library::tagged: no kernel registered for device "
                                                  r"type 'meta' \(register_fake"):
        tagged(lucid.ones(2, device="meta"))
    from lucid.testing import strict_device

    strict_device.enable()
    with pytest.raises(NotImplementedError, match="device type 'strict'"):
        tagged(lucid.ones(2, device="strict"))

    @tagged.register_kernel("meta")
    def _(x):
        calls.append("meta")
        return lucid.empty_like(x)

    assert tagged(lucid.ones(2, device="meta")).device.type == "meta"
    assert tagged(lucid.zeros(2, device="cpu")).tolist() == [1.0, 1.0]
    assert calls == ["meta", "cpu"]
    with tagged.set_kernel_enabled("cpu", False), pytest.raises(NotImplementedError, match="'cpu'"):
        tagged(lucid.zeros(1, device="cpu"))
    assert tagged(lucid.zeros(1, device="cpu")).tolist() == [1.0]
    with pytest.raises(TypeError, match="^test_library::tagged: "):
        tagged(lucid.zeros(1, device="cpu"), 2)


def test_strict_device_kernel():
    from lucid.testing import strict_device

    strict_device.enable()

    @custom_op("test_library::on_strict", mutates_args=(), device_types="strict")
    def on_strict(x: lucid.Tensor) -> lucid.Tensor:
        return x * 3

    x = lucid.tensor([1.0, 2.0], device="strict")
    y = on_strict(x)
    assert y.device.type == "strict" and y.cpu().tolist() == [3.0, 6.0]
    with pytest.raises(NotImplementedError, match="device type 'cpu'"):
        on_strict(lucid.tensor([1.0], device="cpu"))


def test_mutating_op_bumps_versions_and_saved_tensors_see_it():
    @custom_op("test_library::np_sin_", mutates_args={"x"}, device_types="cpu")
    def np_sin_(x: lucid.Tensor) -> None:
        arr = x.numpy()
        np.sin(arr, out=arr)

    assert np_sin_._schema == "(Tensor(a0!) x) -> ()"
    x = lucid.tensor([0.0, 1.0], device="cpu")  # the kernel writes through .numpy(): a CPU tensor
    v = x._version[0]
    assert np_sin_(x) is None
    np.testing.assert_allclose(x.numpy(), np.sin([0.0, 1.0]), rtol=1e-6)
    assert x._version[0] == v + 1
    # a graph that saved x now refuses its stale value
    w = lucid.tensor([1.0, 2.0], device="cpu", requires_grad=True)
    y = (w * x).sum()
    np_sin_(x)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        y.backward()
    with pytest.raises(RuntimeError, match="^test_library::np_sin_: mutates 'x', which requires grad"):
        np_sin_(lucid.tensor([1.0], device="cpu", requires_grad=True))
    with pytest.raises(RuntimeError, match="^register_autograd: cannot register .*non-functional"):
        np_sin_.register_autograd(lambda ctx, g: g)
    assert opcheck(np_sin_, (lucid.tensor([0.5], device="cpu"),), test_utils="test_schema") == {"test_schema": "SUCCESS"}


def test_opcheck_catches_undeclared_mutation_and_aliasing():
    @custom_op("test_library::sneaky", mutates_args=(), device_types="cpu")
    def sneaky(x: lucid.Tensor) -> lucid.Tensor:
        x.numpy()[0] = 7.0
        return x.clone()

    with pytest.raises(OpCheckError, match="test_schema failed.*changed its argument 'x' in place, but "
                                           "mutates_args does not name it"):
        opcheck(sneaky, (lucid.tensor([1.0, 2.0], device="cpu"),), test_utils="test_schema")

    @custom_op("test_library::alias", mutates_args=())
    def alias(x: lucid.Tensor) -> lucid.Tensor:
        return x[1:]

    with pytest.raises(RuntimeError, match="^test_library::alias: the output .* must not be an input or alias"):
        alias(lucid.tensor([1.0, 2.0]))


def test_register_fake_on_the_meta_device_and_opcheck():
    @custom_op("test_library::np_outer", mutates_args=(), device_types=("cpu", "strict"))
    def np_outer(a: lucid.Tensor, b: lucid.Tensor) -> lucid.Tensor:
        return lucid.tensor(np.multiply.outer(a.cpu().numpy(), b.cpu().numpy()), device=a.device)

    @np_outer.register_fake
    def _(a, b):
        return lucid.empty(a.shape[0], b.shape[0], dtype=a.dtype, device=a.device)

    m = np_outer(lucid.ones(3, device="meta"), lucid.ones(4, device="meta"))
    assert m.device.type == "meta" and tuple(m.shape) == (3, 4)

    def setup(ctx, inputs, out):
        ctx.save_for_backward(*inputs)

    def backward(ctx, g):
        a, b = ctx.saved_tensors
        return (g * b).sum(1), (g * a[:, None]).sum(0)

    np_outer.register_autograd(backward, setup_context=setup)
    ok = opcheck(np_outer, (_x64(1.0, 2.0), _x64(3.0, -1.0, 0.5)))
    assert ok == dict.fromkeys(["test_schema", "test_autograd_registration", "test_faketensor",
                                "test_aot_dispatch_dynamic"], "SUCCESS")
    # a fake impl with the wrong shape is caught
    np_outer.register_fake(lambda a, b: lucid.empty(b.shape[0], a.shape[0], dtype=a.dtype, device=a.device))
    with pytest.raises(OpCheckError, match=r"test_faketensor failed.*shape \(3, 2\).*kernel shape \(2, 3\)"):
        opcheck(np_outer, (_x64(1.0, 2.0), _x64(3.0, -1.0, 0.5)), test_utils="test_faketensor")


def test_opcheck_passes_a_right_op_and_fails_a_wrong_backward():
    x = _x64(0.2, 0.9)
    assert set(opcheck(np_sin, (x,)).values()) == {"SUCCESS"}
    res = opcheck(np_sin_wrong, (x,), raise_exception=False)
    assert res["test_schema"] == "SUCCESS" and res["test_faketensor"] == "SUCCESS"
    assert "Jacobian mismatch" in str(res["test_autograd_registration"])
    with pytest.raises(OpCheckError, match="^opcheck\\(op, \\.\\.\\.\\): test_autograd_registration failed"):
        opcheck("test_library::np_sin_wrong", (x,))
    with pytest.raises(ValueError, match="^opcheck: unknown test_utils"):
        opcheck(np_sin, (x,), test_utils=("test_nothing",))


def test_vmap_with_a_registered_rule_and_with_a_lucid_kernel():
    calls = []

    @np_sin.register_vmap
    def _(info, in_dims, x):
        calls.append((info.batch_size, in_dims))
        return np_sin(x), in_dims[0]

    xs = lucid.tensor([[0.1, 0.2], [0.3, 0.4], [0.5, 0.6]], dtype=lucid.float64)
    got = lucid.func.vmap(np_sin, in_dims=1)(xs)
    np.testing.assert_allclose(got.numpy(), np.sin(xs.numpy().T))
    assert calls == [(2, (1,))]

    @custom_op("test_library::lucid_cube", mutates_args=())
    def cube(x: lucid.Tensor) -> lucid.Tensor:
        return x ** 3

    cube.register_autograd(lambda ctx, g: 3 * ctx.saved_tensors[0] ** 2 * g,
                           setup_context=lambda ctx, inputs, out: ctx.save_for_backward(inputs[0]))
    np.testing.assert_allclose(lucid.func.vmap(cube)(xs).numpy(), xs.numpy() ** 3)
    per_row = lucid.func.vmap(lucid.func.grad(lambda r: cube(r).sum()))(xs)
    np.testing.assert_allclose(per_row.numpy(), 3 * xs.numpy() ** 2)


@custom_op("test_library::np_tanh_pair", mutates_args=())
def np_tanh_pair(x: lucid.Tensor, scale: float) -> list[lucid.Tensor]:
    t = np.tanh(x.detach().cpu().numpy()) * scale
    return [lucid.tensor(t, device=x.device), lucid.tensor(t * 2, device=x.device)]


np_tanh_pair.register_autograd(
    lambda ctx, g1, g2: ((g1 + 2 * g2) * ctx.scale * (1 - lucid.tanh(ctx.saved_tensors[0]) ** 2), None),
    setup_context=lambda ctx, inputs, out: (ctx.save_for_backward(inputs[0]), setattr(ctx, "scale", inputs[1])))


def test_vmap_without_a_rule_runs_the_op_per_example():
    # PyTorch's batched fallback: a kernel that leaves Lucid (NumPy here) runs once per example
    xs = lucid.tensor([[0.1, 0.2], [0.3, 0.4], [0.5, 0.6]], dtype=lucid.float64)
    a, b = lucid.func.vmap(np_tanh_pair, in_dims=(1, None))(xs, 3.0)
    assert a.shape == (2, 3) and b.shape == (2, 3)
    np.testing.assert_allclose(a.numpy(), 3 * np.tanh(xs.numpy().T))
    np.testing.assert_allclose(b.numpy(), 6 * np.tanh(xs.numpy().T))
    # the list output stays a list, and the custom backward is what grad uses, per example
    assert isinstance(np_tanh_pair(xs[0], 1.0), list)
    per_row = lucid.func.vmap(lucid.func.grad(lambda r: sum(o.sum() for o in np_tanh_pair(r, 2.0))))(xs)
    np.testing.assert_allclose(per_row.numpy(), 6 * (1 - np.tanh(xs.numpy()) ** 2))
    whole = lucid.func.grad(lambda m: lucid.func.vmap(lambda r: np_tanh_pair(r, 2.0)[1])(m).sum())(xs)
    np.testing.assert_allclose(whole.numpy(), 4 * (1 - np.tanh(xs.numpy()) ** 2))


def test_vmap_fallback_refuses_mutating_an_unbatched_argument():
    @custom_op("test_library::np_add_into", mutates_args=("out",))
    def add_into(x: lucid.Tensor, out: lucid.Tensor) -> None:
        out.copy_(out + x)

    out = lucid.zeros(2, dtype=lucid.float64)
    with pytest.raises(RuntimeError, match="^test_library::np_add_into: vmap: can't mutate 'out'"):
        lucid.func.vmap(add_into, in_dims=(0, None), out_dims=None)(lucid.ones(3, 2, dtype=lucid.float64), out)
    assert out.tolist() == [0.0, 0.0]
    outs = lucid.zeros(3, 2, dtype=lucid.float64)
    lucid.func.vmap(add_into, out_dims=None)(lucid.ones(3, 2, dtype=lucid.float64), outs)
    assert outs.tolist() == [[1.0, 1.0]] * 3


def test_module_level_registration_and_name_checks():
    @custom_op("test_library::scaled", mutates_args=())
    def scaled(x: lucid.Tensor, k: float) -> lucid.Tensor:
        return x * k

    library.register_autograd("test_library::scaled", lambda ctx, g: (g * ctx.k, None),
                              setup_context=lambda ctx, inputs, out: setattr(ctx, "k", inputs[1]))
    library.register_fake("test_library::scaled")(lambda x, k: lucid.empty_like(x))
    library.register_kernel(scaled, "meta", lambda x, k: lucid.empty_like(x))
    x = _x64(1.0, 2.0)
    assert set(opcheck(scaled, (x, 2.5)).values()) == {"SUCCESS"}
    assert lucid.func.grad(lambda t: scaled(t, 4.0).sum())(x.detach()).tolist() == [4.0, 4.0]
    with pytest.raises(ValueError, match="^register_fake: 'test_library::nope' is not a custom op"):
        library.register_fake("test_library::nope", lambda x: x)
    with pytest.raises(ValueError, match="^custom_op: expected a name like 'mylib::my_op'"):
        custom_op("no_namespace", mutates_args=())
    assert library.ops.test_library.scaled is scaled
    # defining the name again replaces the op, as in PyTorch (re-running a notebook cell)
    @custom_op("test_library::scaled", mutates_args=())
    def again(x: lucid.Tensor) -> lucid.Tensor:
        return x * 0

    assert library.ops.test_library.scaled is again and again is not scaled
    assert again(x).tolist() == [0.0, 0.0]
    with pytest.raises(ValueError, match="^custom_op: mutates_args names \\['y'\\]"):
        custom_op("test_library::bad_mut", mutates_args={"y"})(lambda x: x)

    def unannotated(x):
        return x

    with pytest.raises(ValueError, match="^infer_schema: parameter 'x' must have a type annotation"):
        custom_op("test_library::unannotated", unannotated, mutates_args=())
    with pytest.raises(AttributeError, match="has no attribute 'missing'"):
        library.ops.test_library.missing
