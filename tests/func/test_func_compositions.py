"""Compositions of lucid.func transforms, each against a closed form, finite differences or a loop."""
import tracemalloc

import numpy as np
import pytest
from funchelp import close, np_of, num_jac, t64

import lucid
import lucid.func as F

RNG = np.random.default_rng(0)


def f_scalar(x):
    return (x.sin() * x.exp()).sum() + (x * x * x).sum()


def f_vec(x):
    return (x.tanh() * x.sum()).exp()


X = t64(RNG.normal(size=3) * 0.5)


# ------------------------------------------------------------- per-sample grads


def _mlp_params():
    return {"w1": t64(RNG.normal(size=(4, 3)) * 0.5), "b1": t64(RNG.normal(size=4) * 0.1),
            "w2": t64(RNG.normal(size=(2, 4)) * 0.5), "b2": t64(RNG.normal(size=2) * 0.1)}


def mlp_loss(p, x, y):
    h = (p["w1"] @ x + p["b1"]).tanh()
    out = p["w2"] @ h + p["b2"]
    return ((out - y) ** 2).sum()


def test_vmap_grad_per_sample_mlp_matches_loop_and_fd():
    p = _mlp_params()
    xs, ys = t64(RNG.normal(size=(5, 3))), t64(RNG.normal(size=(5, 2)))
    g = F.vmap(F.grad(mlp_loss), in_dims=(None, 0, 0))(p, xs, ys)
    for i in range(5):
        gi = F.grad(mlp_loss)(p, xs[i], ys[i])
        for k in p:
            close(g[k][i], gi[k])
    # one example against finite differences, parameter by parameter
    for k in p:
        def fk(a, k=k):
            q = dict(p)
            q[k] = t64(a)
            return np.asarray(mlp_loss(q, xs[2], ys[2]).numpy())
        close(g[k][2], num_jac(fk, p[k].numpy()), 1e-5)


def test_grad_of_vmap():
    B = t64(RNG.normal(size=(4, 3)))
    g = F.grad(lambda b: F.vmap(f_scalar)(b).sum())(B)
    closed = np.cos(B.numpy()) * np.exp(B.numpy()) + np.sin(B.numpy()) * np.exp(B.numpy()) + 3 * B.numpy() ** 2
    close(g, closed)


def test_second_order_jacobians_agree_with_closed_form_hessian():
    x = X.numpy()
    closed = np.diag(2 * np.cos(x) * np.exp(x) + 6 * x)
    close(F.jacfwd(F.jacrev(f_scalar))(X), closed)
    close(F.jacrev(F.jacrev(f_scalar))(X), closed)
    close(F.hessian(f_scalar)(X), closed)
    close(F.jacrev(F.jacfwd(f_scalar))(X), closed)


def test_vector_hessian_against_fd_of_jacobian():
    h = F.hessian(lambda x: f_vec(x).sum())(X)
    g = np_of(lambda x: F.grad(lambda y: f_vec(y).sum())(x))
    close(h, num_jac(g, X.numpy()), 1e-5)


def test_vmap_jacrev():
    B = t64(RNG.normal(size=(3, 3)))
    j = F.vmap(F.jacrev(f_vec))(B)
    for i in range(3):
        close(j[i], num_jac(np_of(f_vec), B.numpy()[i]), 1e-5)


def test_triple_grad():
    x = t64([0.3, -1.2])
    g3 = F.grad(lambda a: F.grad(lambda b: F.grad(lambda c: (c.sin() + c ** 4).sum())(b).sum())(a).sum())(x)
    close(g3, -np.cos(x.numpy()) + 24 * x.numpy())


def test_jvp_of_grad_is_hessian_vector_product():
    v = t64([1.0, -2.0, 0.5])
    _, hv = F.jvp(F.grad(f_scalar), (X,), (v,))
    close(hv, F.hessian(f_scalar)(X).numpy() @ v.numpy())


def test_linearize_evaluates_once_and_is_reused():
    calls = []

    def f(x):
        calls.append(1)
        return f_vec(x)

    out, jvp_fn = F.linearize(f, X)
    assert len(calls) == 1
    J = num_jac(np_of(f_vec), X.numpy())
    for v in (t64([1.0, 0.0, 0.0]), t64([0.5, -1.0, 2.0])):
        close(jvp_fn(v), J @ v.numpy(), 1e-5)
    assert len(calls) == 1
    close(out, f_vec(X))


# ------------------------------------------------------- perturbation confusion


def test_perturbation_confusion_grad():
    one = t64(1.0)
    d = F.grad(lambda x: x * F.grad(lambda y: x + y)(one))(t64(2.0))
    close(d, 1.0)


def test_perturbation_confusion_jvp():
    one = t64(1.0)

    def outer(x):
        return x * F.jvp(lambda y: x + y, (one,), (one,))[1]

    _, t = F.jvp(outer, (t64(2.0),), (one,))
    close(t, 1.0)


def test_grad_closing_over_outer_tracer():
    # d/dx [ grad_y (x * y**2) at y=3 ] = d/dx [6 x] = 6 ; inner grad must treat x as a constant
    def outer(x):
        return F.grad(lambda y: x * y ** 2)(t64(3.0))

    close(F.grad(outer)(t64(2.0)), 6.0)
    # and the same under an outer vmap and an outer jvp
    close(F.vmap(F.grad(outer))(t64([1.0, 2.0])), [6.0, 6.0])
    close(F.jvp(outer, (t64(2.0),), (t64(1.0),))[1], 6.0)


# ----------------------------------------------------- per-example semantics


B3 = t64(np.arange(24.0).reshape(4, 2, 3))


@pytest.mark.parametrize("fn,ref", [
    (lambda x: x.sum(), lambda x: x.sum()),
    (lambda x: x.mean(), lambda x: x.mean()),
    (lambda x: x.reshape(-1), lambda x: x.reshape(-1)),
    (lambda x: x.T, lambda x: x.T),
    (lambda x: x[1, 0:2], lambda x: x[1, 0:2]),
    (lambda x: x[:, -1], lambda x: x[:, -1]),
    (lambda x: x @ x.T, lambda x: x @ x.T),
    (lambda x: x * float(x.shape[0] * 10 + x.shape[1]), lambda x: x * 23.0),
])
def test_inside_vmap_each_example_is_seen_alone(fn, ref):
    out = F.vmap(fn)(B3)
    close(out, np.stack([ref(B3.numpy()[i]) for i in range(4)]))


def test_shape_and_ndim_inside_vmap():
    seen = []
    F.vmap(lambda x: seen.append((tuple(x.shape), x.ndim, x.numel())) or x)(B3)
    assert seen == [((2, 3), 2, 6)]


# ----------------------------------------------------- jacrev chunk memory


def _peak(fn):
    tracemalloc.start()
    try:
        fn()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_jacrev_chunk_size_same_result_less_memory():
    x = t64(RNG.normal(size=300))

    def f(v):
        return (v.sin() * 2.0).exp()

    full = F.jacrev(f)(x)
    chunked = F.jacrev(f, chunk_size=20)(x)
    close(chunked, full)
    close(full, np.diag(2 * np.cos(x.numpy()) * np.exp(2 * np.sin(x.numpy()))))
    p_full = _peak(lambda: F.jacrev(f)(x))
    p_chunk = _peak(lambda: F.jacrev(f, chunk_size=20)(x))
    assert p_chunk < 0.85 * p_full, (p_chunk, p_full)
