"""Smaller API items of issue 8: numpy() read-only, bare decorators, error wording, func extras,
vmap strategies, custom Function in the combined style under forward mode and vmap."""
import numpy as np
import pytest

import lucid
import lucid.autograd.forward_ad as fwAD
import lucid.func as F


def t64(a, rg=False):
    return lucid.tensor(np.asarray(a, dtype=np.float64), requires_grad=rg)


# ------------------------------------------------------------------ numpy()


def test_numpy_is_read_only_when_requires_grad():
    # Host memory semantics: on the CPU explicitly (a GPU tensor's .numpy() raises, as PyTorch's)
    w = lucid.tensor([1.0, 2.0], dtype=lucid.float64, requires_grad=True, device="cpu")
    a = w.numpy()
    np.testing.assert_array_equal(a, [1.0, 2.0])
    with pytest.raises(ValueError, match="read-only"):
        a[0] = 5.0
    assert w.tolist() == [1.0, 2.0]
    d = w.detach().numpy()
    d[0] = 5.0  # detached: a writable view of the same memory, as in PyTorch
    assert w.tolist() == [5.0, 2.0]
    plain = lucid.tensor([1.0], dtype=lucid.float64, device="cpu")
    plain.numpy()[0] = 3.0
    assert plain.item() == 3.0
    assert w.numpy(force=True).flags.writeable


# --------------------------------------------------------- bare decorators


def test_grad_mode_objects_as_bare_decorators():
    @lucid.no_grad
    def f():
        return lucid.is_grad_enabled()

    @lucid.enable_grad
    def g():
        return lucid.is_grad_enabled()

    @lucid.inference_mode
    def h(x):
        return (x * 2).requires_grad

    assert f() is False and f.__name__ == "f"
    with lucid.no_grad():
        assert g() is True
    assert h(t64([1.0], rg=True)) is False
    assert lucid.is_grad_enabled()

    @lucid.no_grad()  # with parentheses still works
    def k():
        return lucid.is_grad_enabled()

    assert k() is False


# ------------------------------------------------------------ error wording


def test_unreachable_input_says_not_reachable():
    x, y = t64([1.0], rg=True), t64([2.0], rg=True)
    with pytest.raises(RuntimeError, match=r"inputs\[1\].*not reachable.*allow_unused=True"):
        lucid.autograd.grad((x * 2).sum(), [x, y])


def test_vmap_inconsistent_batch_sizes():
    with pytest.raises(ValueError, match=r"inconsistent batch sizes.*got sizes 2 and 3"):
        F.vmap(lambda a, b: a + b)(lucid.zeros(2, 4), lucid.zeros(3, 4))
    with pytest.raises(ValueError, match="inconsistent batch sizes"):
        F.vmap(lambda a, b: a + b, strategy="isolated")(lucid.zeros(2, 4), lucid.zeros(3, 4))


# -------------------------------------------------------------- func extras


def test_vjp_has_aux_returns_out_vjp_fn_aux():
    x = t64([1.0, 2.0])
    out, vjp_fn, aux = F.vjp(lambda t: ((t ** 2).sum(), t * 3), x, has_aux=True)
    assert out.item() == 5.0
    np.testing.assert_array_equal(aux.numpy(), [3.0, 6.0])
    (g,) = vjp_fn(t64(1.0))
    np.testing.assert_array_equal(g.numpy(), [2.0, 4.0])


def test_jvp_strict():
    x, v = t64([1.0, 2.0]), t64([1.0, 1.0])
    with pytest.raises(RuntimeError, match="strict=True but output 1 does not depend on the inputs"):
        F.jvp(lambda t: (t * 2, lucid.ones(2)), (x,), (v,), strict=True)
    out, tan = F.jvp(lambda t: t * 2, (x,), (v,), strict=True)
    np.testing.assert_array_equal(tan.numpy(), [2.0, 2.0])
    _, (t1, t2) = F.jvp(lambda t: (t * 2, lucid.ones(2)), (x,), (v,))  # non-strict: zeros
    np.testing.assert_array_equal(t2.numpy(), [0.0, 0.0])


# ------------------------------------------------------------ vmap strategy


def branchy(r):
    return r * 2 if r.sum().item() > 0 else -r  # data-dependent Python control flow


def test_vmap_isolated_matches_a_loop():
    X = t64([[1.0, -2.0], [-3.0, 4.0], [0.5, -1.0]])
    got = F.vmap(branchy, strategy="isolated")(X)
    np.testing.assert_array_equal(got.numpy(), np.stack([branchy(X[i]).numpy() for i in range(3)]))
    two = F.vmap(lambda r, s: (r * s, r.sum()), in_dims=(1, None), out_dims=(1, 0),
                 strategy="isolated")(X, t64(3.0))
    np.testing.assert_array_equal(two[0].numpy(), X.numpy() * 3)
    np.testing.assert_array_equal(two[1].numpy(), X.numpy().sum(0))
    # composes with grad: d/dw sum_i (x_i . w) = sum_i x_i
    g = F.grad(lambda w: F.vmap(lambda r: (r * w).sum(), strategy="isolated")(X).sum())(t64([1.0, 1.0]))
    np.testing.assert_allclose(g.numpy(), X.numpy().sum(0))


def test_vmap_strategy_auto_and_vectorized_and_errors():
    X = t64([[1.0, 2.0], [3.0, 4.0]])
    for s in ("auto", "vectorized"):
        np.testing.assert_array_equal(F.vmap(lambda r: (r * r).sum(), strategy=s)(X).numpy(), [5.0, 25.0])
    with pytest.raises(ValueError, match="strategy"):
        F.vmap(lambda r: r, strategy="loop")
    lucid.manual_seed(0)
    same = F.vmap(lambda r: r + lucid.rand(()), randomness="same", strategy="isolated")(lucid.zeros(3))
    assert len(set(same.tolist())) == 1
    diff = F.vmap(lambda r: r + lucid.rand(()), randomness="different", strategy="isolated")(lucid.zeros(3))
    assert len(set(diff.tolist())) == 3


# ------------------------------------------- custom Function, combined style


class Cube(lucid.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x ** 3

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return 3 * x * x * g

    @staticmethod
    def jvp(ctx, t):
        (x,) = ctx.saved_tensors
        return 3 * x * x * t

    @staticmethod
    def vmap(info, in_dims, x):
        return x ** 3, in_dims[0]


def test_combined_style_jvp_under_func_jvp_and_forward_ad():
    x, v = t64([1.0, 2.0]), t64([1.0, -1.0])
    out, tan = F.jvp(Cube.apply, (x,), (v,))
    np.testing.assert_allclose(out.numpy(), [1.0, 8.0])
    np.testing.assert_allclose(tan.numpy(), [3.0, -12.0])
    with fwAD.dual_level():
        d = fwAD.make_dual(x, v)
        p, t = fwAD.unpack_dual(Cube.apply(d) * 2)
    np.testing.assert_allclose(t.numpy(), [6.0, -24.0])
    np.testing.assert_allclose(F.jacfwd(Cube.apply)(x).numpy(), np.diag([3.0, 12.0]))


def test_combined_style_vmap_staticmethod():
    X = t64([[1.0, 2.0], [3.0, 4.0]])
    np.testing.assert_allclose(F.vmap(Cube.apply)(X).numpy(), X.numpy() ** 3)
    np.testing.assert_allclose(F.vmap(Cube.apply, in_dims=1)(X).numpy(), (X.numpy() ** 3).T)
