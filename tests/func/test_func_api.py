"""lucid.func API surface: pytrees, argnums, has_aux, chunk_size, in_dims/out_dims, errors."""
import numpy as np
import pytest
from funchelp import close, t64

import lucid
import lucid.func as F

A = t64([0.5, -1.0, 2.0])
B = t64([[1.0, 2.0], [3.0, 4.0]])


def f_tree(p):
    return (p["a"] ** 2).sum() * p["pair"][0].sum() + p["pair"][1].exp().sum()


TREE = {"a": A, "pair": (B, t64([0.1, 0.2]))}


def test_grad_pytree_input_and_argnums_tuple():
    g = F.grad(f_tree)(TREE)
    assert set(g) == {"a", "pair"} and isinstance(g["pair"], tuple)
    close(g["a"], 2 * A.numpy() * B.numpy().sum())
    close(g["pair"][0], np.full((2, 2), (A.numpy() ** 2).sum()))
    close(g["pair"][1], np.exp([0.1, 0.2]))
    ga, gb = F.grad(lambda a, b: (a * b).sum(), argnums=(0, 1))(A, A * 2)
    close(ga, A * 2)
    close(gb, A)
    assert isinstance(F.grad(lambda a, b: (a * b).sum(), argnums=1)(A, A), lucid.Tensor)


def test_has_aux_everywhere():
    def f(x):
        return (x ** 2).sum(), {"double": x * 2}

    g, aux = F.grad(f, has_aux=True)(A)
    close(g, 2 * A.numpy())
    close(aux["double"], 2 * A.numpy())
    assert not isinstance(aux["double"], type(g)) or type(aux["double"]) is lucid.Tensor
    (g, (v, aux)) = F.grad_and_value(f, has_aux=True)(A)
    close(v, (A.numpy() ** 2).sum())
    out, vjp_fn, aux = F.vjp(f, A, has_aux=True)
    close(vjp_fn(t64(1.0))[0], 2 * A.numpy())
    close(aux["double"], 2 * A.numpy())
    out, tan, aux = F.jvp(f, (A,), (t64([1.0, 0.0, 0.0]),), has_aux=True)
    close(tan, 2 * A.numpy()[0])
    close(aux["double"], 2 * A.numpy())

    def fv(x):
        return x ** 2, x.sum()

    j, aux = F.jacrev(fv, has_aux=True)(A)
    close(j, np.diag(2 * A.numpy()))
    close(aux, A.numpy().sum())
    j, aux = F.jacfwd(fv, has_aux=True)(A)
    close(j, np.diag(2 * A.numpy()))
    close(aux, A.numpy().sum())


def test_vjp_and_jvp_pytrees():
    out, vjp_fn = F.vjp(lambda p: {"s": p["a"] * 2, "t": p["pair"][1]}, TREE)
    (ct,) = vjp_fn({"s": t64([1.0, 1.0, 1.0]), "t": t64([1.0, 2.0])})
    close(ct["a"], [2.0, 2.0, 2.0])
    close(ct["pair"][0], np.zeros((2, 2)))
    close(ct["pair"][1], [1.0, 2.0])
    tans = {"a": t64([1.0, 0.0, 0.0]), "pair": (B * 0, t64([1.0, 1.0]))}
    out, t = F.jvp(f_tree, (TREE,), (tans,))
    close(t, 2 * 0.5 * B.numpy().sum() + np.exp([0.1, 0.2]).sum())


def test_jacrev_jacfwd_tuple_argnums_and_tuple_outputs():
    def f(x, y):
        return x * y.sum(), (x ** 2).sum()

    jr = F.jacrev(f, argnums=(0, 1))(A, B)
    jf = F.jacfwd(f, argnums=(0, 1))(A, B)
    for j in (jr, jf):
        assert isinstance(j, tuple) and isinstance(j[0], tuple)
        assert j[0][0].shape == (3, 3) and j[0][1].shape == (3, 2, 2)
        assert j[1][0].shape == (3,) and j[1][1].shape == (2, 2)
        close(j[0][0], np.eye(3) * B.numpy().sum())
        close(j[0][1], np.broadcast_to(A.numpy()[:, None, None], (3, 2, 2)))
        close(j[1][0], 2 * A.numpy())
    h = F.hessian(lambda x, y: (x ** 2).sum() * y.sum(), argnums=(0, 1))(A, B)
    close(h[0][0], 2 * np.eye(3) * B.numpy().sum())


def test_jacrev_chunk_sizes_agree():
    f = lambda x: (x.sin() * x).exp()  # noqa: E731
    ref = F.jacrev(f)(A)
    for k in (1, 2, 5):
        close(F.jacrev(f, chunk_size=k)(A), ref)


def test_vmap_chunk_size_and_out_dims_tuple():
    X = t64(np.arange(12.0).reshape(4, 3))

    def f(x):
        return x * 2, x.sum()

    for cs in (None, 1, 3):
        a, s = F.vmap(f, out_dims=(1, 0), chunk_size=cs)(X)
        close(a, (X.numpy() * 2).T)
        close(s, X.numpy().sum(1))


def test_vmap_in_dims_none_and_nested_tuples():
    X = t64(np.arange(12.0).reshape(3, 4))
    w = t64([1.0, 2.0, 3.0])

    def f(pair, scale):
        x, y = pair
        return (x * y).sum() * scale

    out = F.vmap(f, in_dims=((1, None), None))((X, t64([1.0, 1.0, 1.0])), t64(2.0))
    close(out, 2 * X.numpy().sum(0))
    out = F.vmap(f, in_dims=((0, 0), None))((X, X), t64(1.0))
    close(out, (X.numpy() ** 2).sum(1))
    out = F.vmap(lambda d: d["x"].sum() * d["w"], in_dims=({"x": 1, "w": None},))({"x": X, "w": w})
    close(out, X.numpy().sum(0)[:, None] * w.numpy())
    # unbatched outputs are broadcast
    close(F.vmap(lambda x: w)(X), np.broadcast_to(w.numpy(), (3, 3)))


def test_nested_vmap():
    X = t64(np.arange(24.0).reshape(2, 3, 4))
    out = F.vmap(F.vmap(lambda r: r.sum()))(X)
    close(out, X.numpy().sum(-1))
    out = F.vmap(F.vmap(lambda r: r.sum(), in_dims=1), in_dims=2)(X)
    close(out, X.numpy().sum(0).T)


# -------------------------------------------------------------------- errors


def _raises(fn, start, *words):
    with pytest.raises((ValueError, RuntimeError, TypeError)) as e:
        fn()
    msg = str(e.value)
    assert msg.startswith(start), msg
    for w in words:
        assert w in msg, msg


def test_errors_start_with_the_api_name():
    X, Y = t64(np.ones((3, 2))), t64(np.ones((4, 2)))
    _raises(lambda: F.vmap(lambda a, b: a + b)(X, Y), "vmap", "3", "4")
    _raises(lambda: F.vmap(lambda a: a, in_dims=2)(X), "vmap", "in_dim", "(3, 2)")
    _raises(lambda: F.vmap(lambda a, b: a, in_dims=(0,))(X, X), "vmap", "in_dims")
    _raises(lambda: F.vmap(lambda a: a, in_dims="x")(X), "vmap", "in_dims")
    _raises(lambda: F.vmap(lambda a: a, in_dims=None)(X), "vmap", "at least one")
    _raises(lambda: F.vmap(lambda a: a, out_dims=(0, 1))(X), "vmap", "out_dims")
    _raises(lambda: F.vmap(lambda a: a, randomness="sometimes"), "vmap", "randomness")
    _raises(lambda: F.grad(lambda a: a * 2)(A), "grad", "scalar", "(3,)")
    _raises(lambda: F.grad(lambda a: a.sum(), argnums=3)(A), "grad", "argnums")
    _raises(lambda: F.grad(lambda a: a.sum(), has_aux=True)(A), "grad", "aux")
    _raises(lambda: F.grad(lambda a: a.sum())(np.ones(3)), "grad", "Tensor")
    _raises(lambda: F.jvp(lambda a: a, (A,), (t64([1.0]),)), "jvp", "shape")
    _raises(lambda: F.jvp(lambda a: a, A, A), "jvp", "tuple")
    _raises(lambda: F.vjp(lambda a: a * 2, A)[1](t64([1.0])), "vjp", "shape")
    _raises(lambda: F.jacrev(lambda a: a, argnums=(0, 5))(A), "jacrev", "argnums")
    _raises(lambda: F.jacfwd(lambda a: a, argnums=2)(A), "jacfwd", "argnums")
    _raises(lambda: F.vmap(lambda a: a.item())(X), "vmap")


def test_escaped_tracer_acts_as_its_value_outside():
    # As in torch.func: a tensor that leaks out of a finished transform is a plain value.
    leak = []
    F.grad(lambda a: leak.append(a * 2) or a.sum())(A)
    close((leak[0] + 1).detach(), A.numpy() * 2 + 1)
