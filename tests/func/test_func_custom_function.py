"""Custom autograd.Function under lucid.func transforms (separate and combined styles)."""
import numpy as np
import pytest
from funchelp import close, t64

import lucid.func as F
from lucid.autograd import Function

X = t64([0.5, -1.0, 2.0])
D = np.diag(3 * X.numpy() ** 2)


class Cube(Function):
    """Separate style with jvp and an explicit vmap rule."""

    @staticmethod
    def forward(x):
        return x ** 3

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(inputs[0])

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return 3 * x ** 2 * g

    @staticmethod
    def jvp(ctx, t):
        (x,) = ctx.saved_tensors
        return 3 * x ** 2 * t

    @staticmethod
    def vmap(info, in_dims, x):
        return Cube.apply(x), in_dims[0]


class CubeGen(Function):
    """Separate style with generate_vmap_rule."""

    generate_vmap_rule = True
    forward, setup_context, backward, jvp = Cube.forward, Cube.setup_context, Cube.backward, Cube.jvp


class CubeCombined(Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x ** 3

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return 3 * x ** 2 * g


class ScaledSTE(Function):
    """Straight-through estimator: the custom backward is NOT the derivative of forward."""

    generate_vmap_rule = True

    @staticmethod
    def forward(x, s):
        return (x * s).sign()

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.s = inputs[1]

    @staticmethod
    def backward(ctx, g):
        return g * ctx.s, None


@pytest.mark.parametrize("C", [Cube, CubeGen, CubeCombined])
def test_reverse_mode_transforms(C):
    close(F.grad(lambda t: C.apply(t).sum())(X), np.diag(D))
    close(F.vjp(C.apply, X)[1](t64([1.0, 2.0, 3.0]))[0], np.diag(D) * [1, 2, 3])
    close(F.jacrev(C.apply)(X), D)
    close(F.grad(lambda t: F.grad(lambda u: C.apply(u).sum())(t).sum())(X), 6 * X.numpy())


@pytest.mark.parametrize("C", [Cube, CubeGen])
def test_forward_mode_and_vmap_separate_style(C):
    close(F.jvp(C.apply, (X,), (t64([1.0, 1.0, 1.0]),))[1], np.diag(D))
    close(F.jacfwd(C.apply)(X), D)
    Xb = t64(np.arange(6.0).reshape(3, 2) / 4)
    close(F.vmap(C.apply)(Xb), Xb.numpy() ** 3)
    close(F.vmap(C.apply, in_dims=1)(Xb), (Xb.numpy() ** 3).T)
    close(F.vmap(F.vmap(C.apply))(Xb), Xb.numpy() ** 3)
    close(F.vmap(F.grad(lambda r: C.apply(r).sum()))(Xb), 3 * Xb.numpy() ** 2)
    close(F.grad(lambda b: F.vmap(C.apply)(b).sum())(Xb), 3 * Xb.numpy() ** 2)
    close(F.vmap(lambda r: F.jvp(C.apply, (r,), (r * 0 + 1,))[1])(Xb), 3 * Xb.numpy() ** 2)
    close(F.jvp(F.vmap(C.apply), (Xb,), (Xb * 0 + 1,))[1], 3 * Xb.numpy() ** 2)


def test_generated_vmap_rule_uses_the_custom_backward():
    Xb = t64([[0.5, -1.0], [2.0, 3.0], [1.0, 1.0]])
    g = F.grad(lambda b: F.vmap(lambda r: ScaledSTE.apply(r, 2.0))(b).sum())(Xb)
    close(g, np.full((3, 2), 2.0))  # autodiff of sign() would give 0
    g = F.grad(lambda b: F.vmap(lambda r: ScaledSTE.apply(r, 2.0).sum(), in_dims=1)(b).sum())(Xb)
    close(g, np.full((3, 2), 2.0))
    # an unbatched input's gradient is summed over the batch
    w = t64([1.0, 2.0])
    g = F.grad(lambda w_: F.vmap(lambda r, w2: CubeGen.apply(w2) * r, in_dims=(0, None))(Xb, w_).sum())(w)
    close(g, 3 * w.numpy() ** 2 * Xb.numpy().sum(0))


def test_combined_style_errors_say_what_to_add():
    with pytest.raises(RuntimeError, match=r"^jvp: custom Function .CubeCombined. has no forward-mode rule.*jvp\(ctx, \*tangents\)"):
        F.jvp(CubeCombined.apply, (X,), (X,))
    with pytest.raises(RuntimeError, match=r"^vmap: .*generate_vmap_rule.*vmap"):
        F.vmap(CubeCombined.apply)(t64(np.ones((2, 3))))

    class NoJvp(Function):
        forward, setup_context, backward = Cube.forward, Cube.setup_context, Cube.backward

    with pytest.raises(RuntimeError, match=r"^jvp: custom Function 'NoJvp'"):
        F.jacfwd(NoJvp.apply)(X)
    with pytest.raises(RuntimeError, match=r"^vmap: custom Function 'NoJvp'"):
        F.vmap(NoJvp.apply)(t64(np.ones((2, 3))))
