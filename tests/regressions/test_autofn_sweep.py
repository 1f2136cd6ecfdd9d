"""Regressions from the autograd.Function / custom op / higher-order op sweep against PyTorch's
autograd_function_db, custom_op_db and hop_db (values in float64, closed forms)."""
import typing

import numpy as np
import pytest

import lucid
from lucid.autograd import Function
from lucid.autograd import forward_ad as fwAD
from lucid.func import grad, jvp, vmap


def f64(*vals, shape=None):
    a = np.asarray(vals, dtype=np.float64)
    return lucid.tensor(a if shape is None else a.reshape(shape))


def close(t, want, tol=1e-10):
    np.testing.assert_allclose(np.asarray(t.tolist(), dtype=np.float64), want, rtol=tol, atol=tol)


# ---------------------------------------------------------------- autograd.Function


class SelectDefault(Function):
    """autograd_function_db's ForwardHasDefaultArgs: setup_context and vmap see the default."""

    @staticmethod
    def forward(x, idx=(2,)):
        return x[idx]

    @staticmethod
    def setup_context(ctx, inputs, output):
        x, idx = inputs
        ctx.x_shape, ctx.idx = x.shape, idx

    @staticmethod
    def backward(ctx, g):
        return lucid.zeros(ctx.x_shape, dtype=g.dtype, device=g.device).index_put((lucid.tensor(ctx.idx[0]),), g), None

    @staticmethod
    def vmap(info, in_dims, x, idx):
        return SelectDefault.apply(x.movedim(in_dims[0], 1), idx), 0


def test_function_binds_forward_defaults():
    x = f64(*range(15), shape=(3, 5)).requires_grad_()
    out = SelectDefault.apply(x)
    close(out, np.arange(10.0, 15.0))
    out.sum().backward()
    close(x.grad, np.r_[np.zeros(10), np.ones(5)].reshape(3, 5))
    close(SelectDefault.apply(x.detach(), idx=(0,)), np.arange(5.0))
    xb = f64(*range(30), shape=(2, 3, 5))
    close(vmap(SelectDefault.apply)(xb), np.arange(30.0).reshape(2, 3, 5)[:, 2])
    with pytest.raises(TypeError, match="SelectDefault.apply"):
        SelectDefault.apply(x, (1,), 3)


class OpaqueCube(Function):
    """Like NumpyCube: forward reads the data (it would call .numpy()), so under vmap it must
    run through the vmap rule, also when jvp is the inner transform."""

    @staticmethod
    def forward(x):
        x._data  # a batched value refuses this
        return x ** 3, 3 * x ** 2

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(inputs[0], output[1])
        ctx.save_for_forward(inputs[0], output[1])

    @staticmethod
    def backward(ctx, g, g_d):
        x, d = ctx.saved_tensors
        return g * d + 6 * g_d * x

    @staticmethod
    def jvp(ctx, t):
        x, d = ctx.saved_tensors
        return t * d, 6 * t * x

    @staticmethod
    def vmap(info, in_dims, x):
        return OpaqueCube.apply(x), (in_dims[0], in_dims[0])


def test_vmap_of_jvp_runs_the_function_through_its_vmap_rule():
    x = f64(0.5, 1.0, 1.5, 2.0, shape=(2, 2))
    for d in (0, 1):
        prim, tan = vmap(lambda v: jvp(lambda a: OpaqueCube.apply(a)[0], (v,), (v * 0 + 1,)), in_dims=d)(x)
        xv = x.numpy().T if d == 1 else x.numpy()
        close(prim, xv ** 3)
        close(tan, 3 * xv ** 2)
    with fwAD.dual_level():
        out = OpaqueCube.apply(fwAD.make_dual(f64(2.0), f64(1.0)))
        close(fwAD.unpack_dual(out[1]).tangent, [12.0])


class MulIdx(Function):
    @staticmethod
    def forward(x, y, i):
        return x * y

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_forward(inputs[0], inputs[1])

    @staticmethod
    def backward(ctx, g):
        return g, g, None

    @staticmethod
    def jvp(ctx, tx, ty, ti):
        ctx.seen = (tx, ty, ti)
        MulIdx.seen = ctx.seen
        x, y = ctx.saved_tensors
        return (0 if tx is None else tx * y) + (0 if ty is None else ty * x)


class MulIdxNoMaterialize(MulIdx):
    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_forward(inputs[0], inputs[1])
        ctx.set_materialize_grads(False)


def test_function_jvp_tangents_follow_pytorch():
    x, y, i = f64(1.0, 2.0), f64(3.0, 4.0), lucid.tensor([0, 1])
    _, t = jvp(lambda a: MulIdx.apply(a, y, i), (x,), (lucid.ones(2, dtype=lucid.float64),))
    close(t, [3.0, 4.0])
    tx, ty, ti = MulIdx.seen
    assert ti is None  # an integer input has no tangent
    close(ty, [0.0, 0.0])  # a float input without one gets zeros
    _, t = jvp(lambda a: MulIdxNoMaterialize.apply(a, y, i), (x,), (lucid.ones(2, dtype=lucid.float64),))
    close(t, [3.0, 4.0])
    assert MulIdx.seen[1] is None and MulIdx.seen[2] is None


class ExpSavesBoth(Function):
    generate_vmap_rule = True

    @staticmethod
    def forward(x):
        return x.exp()

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(inputs[0])
        ctx.save_for_forward(output)

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return g * x.exp()

    @staticmethod
    def jvp(ctx, t):
        (out,) = ctx.saved_tensors
        return t * out


def test_jvp_reads_save_for_forward_and_backward_reads_save_for_backward():
    x = f64(0.0, 1.0)
    _, t = jvp(ExpSavesBoth.apply, (x,), (f64(1.0, 1.0),))
    close(t, np.exp([0.0, 1.0]))
    close(grad(lambda v: ExpSavesBoth.apply(v).sum())(x), np.exp([0.0, 1.0]))
    close(vmap(lambda v: jvp(ExpSavesBoth.apply, (v,), (v * 0 + 2,))[1])(x), 2 * np.exp([0.0, 1.0]))


class BadTangent(Function):
    @staticmethod
    def forward(x):
        return x * 2

    @staticmethod
    def setup_context(ctx, inputs, output):
        pass

    @staticmethod
    def backward(ctx, g):
        return g * 2

    @staticmethod
    def jvp(ctx, t):
        return lucid.ones(3, dtype=t.dtype)


def test_jvp_tangent_of_wrong_shape_raises():
    with pytest.raises(RuntimeError, match="jvp: custom Function 'BadTangent'"):
        jvp(BadTangent.apply, (f64(1.0, 2.0),), (f64(1.0, 1.0),))


class TwoOut(Function):
    @staticmethod
    def forward(x):
        return x * 2, x * 3

    @staticmethod
    def setup_context(ctx, inputs, output):
        pass

    @staticmethod
    def backward(ctx, g, h):
        return g * 2 + h * 3


def _with_vmap(rule, gen=False):
    return type("Custom", (TwoOut,), {"vmap": staticmethod(rule), "generate_vmap_rule": gen})


def test_vmap_rule_results_are_checked():
    short = _with_vmap(lambda info, d, x: (TwoOut.apply(x), (0,)))
    with pytest.raises(RuntimeError, match="out_dims"):
        vmap(short.apply)(lucid.ones(2, 3))
    single = _with_vmap(lambda info, d, x: (TwoOut.apply(x)[0], (0, 0)))
    with pytest.raises(RuntimeError, match="out_dims"):
        vmap(single.apply)(lucid.ones(2, 3))
    both = _with_vmap(lambda info, d, x: (TwoOut.apply(x), d[0]), gen=True)
    with pytest.raises(RuntimeError, match="generate_vmap_rule"):
        vmap(both.apply)(lucid.ones(2, 3))
    # a negative out_dim counts from the end of the batched output
    last = _with_vmap(lambda info, d, x: (tuple(o.movedim(d[0], -1) for o in TwoOut.apply(x)), -1))
    x = f64(*range(6), shape=(2, 3))
    a, b = vmap(last.apply)(x)
    close(a, 2 * np.arange(6.0).reshape(2, 3))
    close(vmap(lambda v: last.apply(v)[1].sum(0))(f64(*range(24), shape=(2, 3, 4))),
          3 * np.arange(24.0).reshape(2, 3, 4).sum(1))


class ExpInPlace(Function):
    """NumpyExp_: modifies its input, marks it dirty and saves the output."""

    @staticmethod
    def forward(x):
        return x.exp_()

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.mark_dirty(inputs[0])
        ctx.save_for_backward(output)

    @staticmethod
    def backward(ctx, g):
        (out,) = ctx.saved_tensors
        return g * out


def test_mark_dirty_output_saved_in_setup_context():
    x = f64(0.0, 1.0).requires_grad_()
    out = ExpInPlace.apply(x.clone())
    out.sum().backward()
    close(x.grad, np.exp([0.0, 1.0]))


# ---------------------------------------------------------------- custom ops


@lucid.library.custom_op("autofn_sweep::split_copy", mutates_args=())
def _split_copy(x: lucid.Tensor, splits: typing.Sequence[int], dim: int) -> typing.List[lucid.Tensor]:
    return [p.clone() for p in lucid.tensor_split(x, splits, dim)]


def _split_copy_backward(ctx, grads):
    assert isinstance(grads, list)  # one list for a list output, as in PyTorch
    return lucid.cat(grads, dim=ctx.dim), None, None


_split_copy.register_autograd(_split_copy_backward, setup_context=lambda ctx, inputs, output: setattr(ctx, "dim", inputs[2]))


@_split_copy.register_vmap
def _split_copy_vmap(info, in_dims, x, splits, dim):
    return _split_copy(x.movedim(in_dims[0], 0), splits, dim + 1), 0


@lucid.library.custom_op("autofn_sweep::split_with_int", mutates_args=())
def _split_with_int(x: lucid.Tensor, splits: typing.Sequence[int]) -> typing.Tuple[typing.List[lucid.Tensor], int]:
    return [p.clone() for p in lucid.tensor_split(x, splits, 0)], len(splits)


def _split_with_int_setup(ctx, inputs, output):
    parts, n = output
    ctx.n = n


def _split_with_int_backward(ctx, grads, g_n):
    assert isinstance(grads, list) and g_n is None and ctx.n == 2
    return lucid.cat(grads), None


_split_with_int.register_autograd(_split_with_int_backward, setup_context=_split_with_int_setup)


@_split_with_int.register_vmap
def _split_with_int_vmap(info, in_dims, x, splits):
    parts, n = _split_with_int(x.movedim(in_dims[0], 1), splits)
    return (parts, n), ([1] * len(parts), None)


def test_custom_op_list_outputs():
    x = f64(*range(18), shape=(2, 9)).requires_grad_()
    parts = _split_copy(x, [1, 3, 6], 1)
    assert isinstance(parts, list) and [tuple(p.shape) for p in parts] == [(2, 1), (2, 2), (2, 3), (2, 3)]
    w = [f64(float(k + 1)) for k in range(4)]
    sum((p * wk).sum() for p, wk in zip(parts, w)).backward()
    close(x.grad, np.tile(np.repeat([1.0, 2.0, 3.0, 4.0], [1, 2, 3, 3]), (2, 1)))
    xb = f64(*range(36), shape=(2, 2, 9))
    got = vmap(lambda v: _split_copy(v, [1, 3, 6], 1))(xb)
    assert isinstance(got, list) and len(got) == 4
    close(got[1], np.arange(36.0).reshape(2, 2, 9)[:, :, 1:3])


def test_custom_op_nested_output():
    x = f64(*range(6)).requires_grad_()
    parts, n = _split_with_int(x, [2, 3])
    assert n == 2 and isinstance(parts, list) and len(parts) == 3
    (parts[0].sum() * 2 + parts[2].sum()).backward()
    close(x.grad, [2.0, 2.0, 0.0, 1.0, 1.0, 1.0])
    (pb, nb) = vmap(lambda v: _split_with_int(v, [2, 3]), out_dims=(0, None))(f64(*range(12), shape=(2, 6)))
    assert nb == 2
    close(pb[2], np.arange(12.0).reshape(2, 6)[:, 3:])


# ---------------------------------------------------------------- cond / while_loop


def test_cond_under_vmap_checks_dtypes():
    x = f64(*range(4), shape=(2, 2))
    with pytest.raises(RuntimeError, match="dtypes"):
        vmap(lambda v: lucid.cond(v.sum() > 2, lambda a: a, lambda a: a.float(), (v,)))(x)


def test_while_loop_keeps_list_and_checks_dtype():
    out = lucid.while_loop(lambda i, v: i > 0, lambda i, v: [i - 1, v * 2], [lucid.tensor(3), f64(1.0)])
    assert isinstance(out, list) and out[0].item() == 0
    close(out[1], [8.0])
    with pytest.raises(RuntimeError, match="dtype"):
        lucid.while_loop(lambda i, v: i > 0, lambda i, v: (i - 1, v.float()), (lucid.tensor(3), f64(1.0)))


# ---------------------------------------------------------------- higher-order ops


def test_scan_matches_a_loop():
    from lucid._higher_order_ops import scan

    rng = np.random.default_rng(0)
    init, xs = rng.uniform(-1, 1, (2, 2)), rng.uniform(-1, 1, (2, 3, 2))  # scanned along dim 1
    for reverse in (False, True):
        c, ys = scan(lambda c, x: (c @ x + x, c.sin()), lucid.tensor(init), lucid.tensor(xs), dim=1, reverse=reverse)
        cw, yw = init, [None] * 3
        for i in (range(2, -1, -1) if reverse else range(3)):
            yw[i] = np.sin(cw)
            cw = cw @ xs[:, i] + xs[:, i]
        close(c, cw)
        close(ys, np.stack(yw, 1))
    carry, out = scan(lambda c, x: ({"s": c["s"] + x[0]}, [c["s"] * x[1]]), {"s": f64(0.0)},
                      (f64(1.0, 2.0, 3.0, shape=(3, 1)), f64(4.0, 5.0, 6.0, shape=(3, 1))))
    close(carry["s"], [6.0])
    assert isinstance(out, list)
    close(out[0], [[0.0], [5.0], [18.0]])
    with pytest.raises(RuntimeError, match="scan: the carry"):
        scan(lambda c, x: (c.sum(), x * 1), lucid.zeros(2), lucid.ones(3, 2))


def test_scan_gradients_and_transforms():
    from lucid._higher_order_ops import scan

    def f(v):
        return scan(lambda c, x: (c * x + 1, (c * x).sum()), lucid.ones(3, dtype=v.dtype), v)[1]

    x = lucid.tensor(np.random.default_rng(1).uniform(0.5, 1.5, (4, 3)), requires_grad=True)
    assert lucid.autograd.gradcheck(f, (x,)) and lucid.autograd.gradgradcheck(f, (x,))
    xb = lucid.tensor(np.random.default_rng(2).uniform(0.5, 1.5, (2, 4, 3)))
    close(vmap(f)(xb), np.stack([f(xb[i]).numpy() for i in range(2)]))


@pytest.mark.parametrize("n", [1, 2, 3, 5, 8])
def test_associative_scan_matches_cumulative_ops(n):
    from lucid._higher_order_ops import associative_scan

    x = np.arange(1.0, 2 * n + 1).reshape(2, n) / n
    close(associative_scan(lambda a, b: a + b, lucid.tensor(x), 1), np.cumsum(x, 1))
    close(associative_scan(lambda a, b: a * b, lucid.tensor(x), -1, reverse=True, combine_mode="generic"),
          np.flip(np.cumprod(np.flip(x, 1), 1), 1))


def test_associative_scan_generic_matrix_products_and_grad():
    from lucid._higher_order_ops import associative_scan

    m = np.random.default_rng(3).uniform(-1, 1, (5, 2, 2))
    want, acc = [], np.eye(2)
    for a in m:
        acc = acc @ a
        want.append(acc)
    close(associative_scan(lambda a, b: a @ b, lucid.tensor(m), 0, combine_mode="generic"), np.stack(want))
    t = lucid.tensor(m, requires_grad=True)
    assert lucid.autograd.gradcheck(lambda v: associative_scan(lambda a, b: a @ b, v, 0, combine_mode="generic"), (t,))
    with pytest.raises(ValueError, match="associative_scan: combine_mode"):
        associative_scan(lambda a, b: a + b, lucid.ones(3), 0, combine_mode="fast")


def test_map_stacks_results():
    from lucid._higher_order_ops import map as hop_map

    xs = [f64(1.0, 2.0, 3.0, 4.0, shape=(2, 2)), f64(5.0, 6.0, 7.0, 8.0, shape=(2, 2))]
    out = hop_map(lambda x, y: [x[0] * y, x[1].sum()], xs, f64(2.0))
    close(out[0], [[2.0, 4.0], [6.0, 8.0]])
    close(out[1], [11.0, 15.0])
    with pytest.raises(RuntimeError, match="map: leading dimensions"):
        hop_map(lambda x: x[0] + x[1], [lucid.ones(2, 2), lucid.ones(3, 2)])


def test_hops_match_torch():
    torch = pytest.importorskip("torch")
    pytest.importorskip("torch._higher_order_ops")
    from torch._higher_order_ops import associative_scan as t_assoc

    from lucid._higher_order_ops import associative_scan

    x = np.random.default_rng(4).uniform(-1, 1, (6, 2, 2))
    want = t_assoc(lambda a, b: a @ b, torch.tensor(x), 0, reverse=True, combine_mode="generic")
    close(associative_scan(lambda a, b: a @ b, lucid.tensor(x), 0, reverse=True, combine_mode="generic"),
          want.numpy(), tol=1e-12)


def test_infer_schema_matches_pytorch_text():
    from typing import Optional

    def f(a: int, x: lucid.Tensor, y: lucid.Tensor, d: lucid.dtype = lucid.float64, s: str = "a",
          dev: lucid.device = lucid.device("cpu"), n: Optional[int] = None) -> None: ...

    # aliases are numbered by parameter; "unknown" marks only the tensors; defaults as PyTorch prints them
    assert lucid.library.infer_schema(f, mutates_args=("y",)) == (
        '(SymInt a, Tensor x, Tensor(a2!) y, ScalarType d=float64, str s="a", Device dev="cpu", SymInt? n=None) -> ()')
    assert lucid.library.infer_schema(f, mutates_args="unknown", op_name="ns_f").startswith(
        "ns_f(SymInt a, Tensor(a1!) x, Tensor(a2!) y,")
