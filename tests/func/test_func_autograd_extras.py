"""lucid.autograd.forward_ad, lucid.autograd.functional and checkpoint."""
import gc
import weakref

import numpy as np
import pytest
from funchelp import close, np_of, num_jac, t64

import lucid
import lucid.autograd.forward_ad as fwAD
import lucid.autograd.functional as AF
import lucid.func as F
from lucid.autograd import checkpoint

X = t64([0.3, -0.5, 1.2])
Y = t64([[1.0, 2.0]])


def f(x):
    return (x.sin() * x).exp()


J = num_jac(np_of(f), X.numpy())


# ---------------------------------------------------------------- forward_ad


def test_dual_level_make_unpack():
    v = t64([1.0, 0.0, 2.0])
    with fwAD.dual_level() as lvl:
        assert isinstance(lvl, int)
        d = fwAD.make_dual(X, v)
        out = f(d) * 2
        p, t = fwAD.unpack_dual(out)
        close(p, 2 * f(X).numpy())
        close(t, 2 * J @ v.numpy(), 1e-5)
        assert fwAD.unpack_dual(X).tangent is None
        assert fwAD.unpack_dual(X).primal is X
    assert fwAD.unpack_dual(out).tangent is None
    close(out + 1, 2 * f(X).numpy() + 1)  # usable after the level closed


def test_nested_dual_levels_give_second_derivatives():
    one = t64(1.0)
    with fwAD.dual_level():
        a = fwAD.make_dual(t64(0.7), one)
        with fwAD.dual_level():
            b = fwAD.make_dual(a, one)
            out = b.sin()
            inner_t = fwAD.unpack_dual(out).tangent  # cos(a), still dual at the outer level
        second = fwAD.unpack_dual(inner_t).tangent
    close(second, -np.sin(0.7))


def test_forward_ad_errors():
    with pytest.raises(RuntimeError, match="^make_dual: must be called inside"):
        fwAD.make_dual(X, X)
    with fwAD.dual_level():
        with pytest.raises(RuntimeError, match=r"^make_dual: .*\(3,\).*\(2,\)"):
            fwAD.make_dual(X, t64([1.0, 2.0]))


def test_forward_ad_with_eager_backward():
    x = t64([0.3, -0.5])
    x.requires_grad_(True)
    with fwAD.dual_level():
        out = (fwAD.make_dual(x, t64([1.0, 1.0])) ** 3).sum()
        t = fwAD.unpack_dual(out).tangent
    t.backward()  # reverse over forward: d/dx sum(3x^2) = 6x
    close(x.grad, 6 * x.detach().numpy())


# ---------------------------------------------------------------- functional


def test_functional_vjp_jvp_shapes_and_values():
    v = t64([1.0, 2.0, -1.0])
    out, g = AF.vjp(f, X, v)
    close(out, f(X))
    close(g, v.numpy() @ J, 1e-5)
    out, t = AF.jvp(f, X, v)
    close(t, J @ v.numpy(), 1e-5)
    out, (ga, gb) = AF.vjp(lambda a, b: (a * b.sum()).sum(), (X, Y))
    close(ga, np.full(3, 3.0))
    close(gb, np.full((1, 2), X.numpy().sum()))
    with pytest.raises(RuntimeError, match="^vjp: .*v can only be None"):
        AF.vjp(f, X)
    with pytest.raises(RuntimeError, match=r"^jvp: mismatch in shape.*\(2,\).*\(3,\)"):
        AF.jvp(f, X, t64([1.0, 2.0]))


@pytest.mark.parametrize("vectorize,strategy", [(False, "reverse-mode"), (True, "reverse-mode"),
                                                (True, "forward-mode")])
def test_functional_jacobian_conventions(vectorize, strategy):
    kw = dict(vectorize=vectorize, strategy=strategy)
    close(AF.jacobian(f, X, **kw), J, 1e-5)
    jt = AF.jacobian(lambda a, b: a * b.sum(), (X, Y), **kw)
    assert isinstance(jt, tuple) and jt[0].shape == (3, 3) and jt[1].shape == (3, 1, 2)
    jo = AF.jacobian(lambda a: (a * 2, a.sum()), X, **kw)
    assert isinstance(jo, tuple) and jo[0].shape == (3, 3) and jo[1].shape == (3,)
    jb = AF.jacobian(lambda a, b: (a * b.sum(), b * 2), (X, Y), **kw)
    assert [[t.shape for t in r] for r in jb] == [[(3, 3), (3, 1, 2)], [(1, 2, 3), (1, 2, 1, 2)]]
    close(jb[1][1], 2 * np.eye(2).reshape(1, 2, 1, 2))


def test_functional_hessian_hvp_vhp():
    g = lambda x: (x ** 3).sum() + (x[0] * x[1])  # noqa: E731
    H = np.diag(6 * X.numpy())
    H[0, 1] = H[1, 0] = 1.0
    close(AF.hessian(g, X), H)
    close(AF.hessian(g, X, vectorize=True, outer_jacobian_strategy="forward-mode"), H)
    v = t64([1.0, -1.0, 2.0])
    val, hv = AF.hvp(g, X, v)
    close(val, g(X))
    close(hv, H @ v.numpy())
    close(AF.vhp(g, X, v)[1], v.numpy() @ H)
    hh = AF.hessian(lambda a, b: (a ** 2).sum() * b.sum(), (X, Y))
    assert [[t.shape for t in r] for r in hh] == [[(3, 3), (3, 1, 2)], [(1, 2, 3), (1, 2, 1, 2)]]
    close(hh[0][1], np.broadcast_to((2 * X.numpy())[:, None, None], (3, 1, 2)))
    with pytest.raises(RuntimeError, match="^hessian: .*single element"):
        AF.hessian(lambda x: x * 2, X)


def test_functional_strict_create_graph_and_argument_errors():
    with pytest.raises(RuntimeError, match="^vjp: .*independent of input 1.*strict"):
        AF.vjp(lambda a, b: a * 2, (X, X), X, strict=True)
    close(AF.vjp(lambda a, b: a * 2, (X, X), X)[1][1], np.zeros(3))
    with pytest.raises(RuntimeError, match="^jacobian: output 0 .*independent of input 1"):
        AF.jacobian(lambda a, b: a * 2, (X, X), strict=True)
    with pytest.raises(RuntimeError, match="^hessian: .*independent"):
        AF.hessian(lambda a: a.sum(), X, strict=True)
    with pytest.raises(RuntimeError, match="^jacobian: strict=True and vectorize=True"):
        AF.jacobian(f, X, strict=True, vectorize=True)
    with pytest.raises(NotImplementedError, match="^jacobian: "):
        AF.jacobian(f, X, strategy="forward-mode")
    with pytest.raises(ValueError, match="^jacobian: "):
        AF.jacobian(f, X, vectorize=True, strategy="sideways")
    # create_graph: results are differentiable again; default: they are not
    x = t64([0.3, -0.5])
    x.requires_grad_(True)
    assert not AF.jacobian(lambda a: a ** 3, x).requires_grad
    h = AF.hessian(lambda a: (a ** 3).sum(), x, create_graph=True)
    h.sum().backward()
    close(x.grad, [6.0, 6.0])


# ---------------------------------------------------------------- checkpoint


def _body(refs):
    def body(t, scale=1.0):
        a = t.sin()
        refs.append(weakref.ref(a))
        return (a * t * scale).exp().sum()
    return body


def test_checkpoint_matches_plain_backward_and_keeps_no_intermediates():
    refs = []
    body = _body(refs)
    x = t64(X.numpy())
    x.requires_grad_(True)
    y = checkpoint(body, x, scale=2.0)
    gc.collect()
    assert refs and all(r() is None for r in refs), "intermediates were kept"
    y.backward()
    x2 = t64(X.numpy())
    x2.requires_grad_(True)
    body(x2, scale=2.0).backward()
    close(x.grad, x2.grad)
    assert len(refs) == 3  # forward, recomputation, reference


def test_checkpoint_composes_with_transforms():
    body = _body([])
    g_ref = F.grad(body)(X)
    close(F.grad(lambda t: checkpoint(body, t))(X), g_ref)
    close(F.hessian(lambda t: checkpoint(body, t))(X), F.hessian(body)(X))
    close(F.jvp(lambda t: checkpoint(body, t), (X,), (t64([1.0, 1.0, 1.0]),))[1], g_ref.numpy().sum())
    close(F.vmap(lambda t: checkpoint(body, t))(t64(np.stack([X.numpy()] * 2))), [body(X).item()] * 2)
    x = t64(X.numpy())
    x.requires_grad_(True)
    g = lucid.autograd.grad(checkpoint(body, x), x, create_graph=True)
    g.sum().backward()
    close(x.grad, F.grad(lambda t: F.grad(body)(t).sum())(X))


def test_checkpoint_is_exported_under_utils():
    from lucid.utils.checkpoint import checkpoint as ck

    assert ck is checkpoint
