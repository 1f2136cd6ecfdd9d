"""Activation checkpointing gives the same gradients as running the segment plainly (issue 8, item 1)."""
import gc
import warnings
import weakref

import numpy as np
import pytest

import lucid
import lucid.func as F
import lucid.nn as nn
from lucid.autograd import checkpoint


def t64(a, rg=False):
    return lucid.tensor(np.asarray(a, dtype=np.float64), requires_grad=rg)


RNG = np.random.default_rng(0)
XA = RNG.standard_normal((4, 3))
WA = RNG.standard_normal((3, 5))
VA = RNG.standard_normal((5, 2))


def grads(build, ck):
    """Gradients of every leaf ``build`` makes, with or without checkpointing."""
    leaves, loss = build(ck)
    loss.backward()
    return [None if t.grad is None else t.grad.numpy().copy() for t in leaves]


def assert_same(a, b, tol=1e-12):
    assert len(a) == len(b)
    for x, y in zip(a, b):
        assert (x is None) == (y is None), (x, y)
        if x is not None:
            np.testing.assert_allclose(x, y, rtol=tol, atol=tol)


def _run(ck):
    return (lambda f, *a, **k: checkpoint(f, *a, **k)) if ck else (lambda f, *a, **k: f(*a, **k))


def test_closure_variable_gets_its_gradient():
    def build(ck):
        x, W = t64(XA, True), t64(WA, True)
        out = _run(ck)(lambda t: (t @ W).tanh(), x)
        return [x, W], (out * out).sum()

    plain, ckpt = grads(build, False), grads(build, True)
    assert ckpt[1] is not None, "closure parameter got no gradient"
    assert_same(plain, ckpt)
    # closed form: d/dW sum(tanh(xW)^2) = x^T (2 tanh (1 - tanh^2))
    th = np.tanh(XA @ WA)
    np.testing.assert_allclose(ckpt[1], XA.T @ (2 * th * (1 - th ** 2)), rtol=1e-12)


def test_module_parameters_with_input_not_requiring_grad():
    lucid.manual_seed(0)
    layer = nn.Linear(3, 2).double()
    x = t64(XA)

    def build(ck):
        layer.zero_grad()
        out = _run(ck)(lambda t: layer(t).sin(), x)
        return list(layer.parameters()), out.sum()

    plain, ckpt = grads(build, False), grads(build, True)
    assert all(g is not None for g in ckpt)
    assert_same(plain, ckpt)


def test_args_closures_kwargs_and_tuple_outputs():
    def build(ck):
        x, W, b = t64(XA, True), t64(WA, True), t64(np.ones(5), True)

        def seg(t, bias, scale=1.0):
            h = (t @ W + bias) * scale
            return h.exp(), h.sum(dim=0)

        a, s = _run(ck)(seg, x, b, scale=0.5)
        return [x, W, b], (a.sum() + (s * s).sum())

    assert_same(grads(build, False), grads(build, True))


def test_intermediates_are_freed_and_recomputed_once():
    refs, calls = [], []
    W = t64(WA, True)

    def seg(t):
        calls.append(1)
        a = (t @ W).sin()
        refs.append(weakref.ref(a))
        return (a * a).sum()

    y = checkpoint(seg, t64(XA))
    gc.collect()
    assert refs[0]() is None, "checkpoint kept an intermediate alive"
    y.backward()
    assert len(calls) == 2
    th = XA @ WA
    np.testing.assert_allclose(W.grad.numpy(), XA.T @ (2 * np.sin(th) * np.cos(th)), rtol=1e-12)


def test_dropout_masks_are_replayed():
    drop = nn.Dropout(0.5)

    def build(ck):
        lucid.manual_seed(3)
        x, W = t64(XA, True), t64(WA, True)
        out = _run(ck)(lambda t: drop(t @ W).exp(), x)
        return [x, W], out.sum()

    plain, ckpt = grads(build, False), grads(build, True)
    assert_same(plain, ckpt)
    # The recomputation restores the CPU stream: the next draw is the one without checkpointing.
    # (A device generator's stream moves on to a new seed instead: NOTE [Device generator states].)
    cpu = lambda a: lucid.tensor(np.asarray(a, dtype=np.float64), requires_grad=True, device="cpu")  # noqa: E731
    lucid.manual_seed(3)
    checkpoint(lambda t: drop(t).sum(), cpu(XA)).backward()
    after_ck = lucid.rand(3, device="cpu").numpy()
    lucid.manual_seed(3)
    drop(cpu(XA)).sum().backward()
    np.testing.assert_array_equal(after_ck, lucid.rand(3, device="cpu").numpy())


def test_autograd_grad_and_create_graph():
    def both(ck):
        x, W = t64(XA, True), t64(WA, True)
        out = _run(ck)(lambda t: (t @ W).sin().sum(), x)
        gx, gW = lucid.autograd.grad(out, [x, W], create_graph=True)
        ((gx * gx).sum() + (gW ** 3).sum()).backward()
        return [x.grad.numpy(), W.grad.numpy(), gx.detach().numpy(), gW.detach().numpy()]

    assert_same(both(False), both(True))


def test_under_func_grad():
    x = t64(XA)

    def loss(W, ck):
        return _run(ck)(lambda t: (t @ W).cos().sum(), x)

    W = t64(WA)
    g = F.grad(lambda w: loss(w, True))(W)
    np.testing.assert_allclose(g.numpy(), F.grad(lambda w: loss(w, False))(W).numpy(), rtol=1e-12)
    np.testing.assert_allclose(g.numpy(), XA.T @ -np.sin(XA @ WA), rtol=1e-12)


def test_nested_checkpoints():
    refs = []

    def build(ck):
        x, W, V = t64(XA, True), t64(WA, True), t64(VA, True)
        run = _run(ck)

        def inner(t):
            a = (t @ W).tanh()
            refs.append(weakref.ref(a))
            return a

        out = run(lambda t: (run(inner, t) @ V).exp(), x)
        return [x, W, V], out.sum()

    plain = grads(build, False)
    refs.clear()
    ckpt = grads(build, True)
    assert_same(plain, ckpt)
    assert len(refs) == 3  # forward, outer recomputation, inner recomputation


def test_retain_graph_backward_twice_accumulates():
    x, W = t64(XA, True), t64(WA, True)
    y = checkpoint(lambda t: (t @ W).exp().sum(), x)
    y.backward(retain_graph=True)
    first = W.grad.numpy().copy()
    y.backward()
    np.testing.assert_allclose(W.grad.numpy(), 2 * first, rtol=1e-12)
    with pytest.raises(RuntimeError, match="second time"):
        y.backward()


def test_input_changed_in_place_before_backward_is_reported():
    W = t64(WA, True)
    y = checkpoint(lambda t: (t @ W).sin().sum(), t64(XA))
    with lucid.no_grad():
        W.mul_(2.0)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        y.backward()


def test_nondeterministic_segment_is_an_error():
    W = t64(WA, True)
    n = []

    def seg(t):
        n.append(1)
        h = t @ W
        return (h.exp() if len(n) == 1 else h.sin()).sum()

    y = checkpoint(seg, t64(XA))
    with pytest.raises(RuntimeError, match="checkpoint: the recomputation recorded different operations"):
        y.backward()


def test_reentrant_mode():
    # Gradients flow through tensor arguments that require grad, and (as in torch) into the
    # leaves the recomputed graph reaches.
    x, W = t64(XA, True), t64(WA, True)
    checkpoint(lambda t: (t @ W).sin().sum(), x, use_reentrant=True).backward()
    np.testing.assert_allclose(W.grad.numpy(), XA.T @ np.cos(XA @ WA), rtol=1e-12)
    np.testing.assert_allclose(x.grad.numpy(), np.cos(XA @ WA) @ WA.T, rtol=1e-12)
    # No argument requires grad: a warning, and the output carries no graph (torch's behaviour).
    W2 = t64(WA, True)
    with pytest.warns(UserWarning, match="none of the inputs has requires_grad=True"):
        y = checkpoint(lambda t: (t @ W2).sum(), t64(XA), use_reentrant=True)
    assert not y.requires_grad
    # The default mode does not warn.
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert checkpoint(lambda t: (t @ W2).sum(), t64(XA)).requires_grad


def test_parity_with_torch():
    torch = pytest.importorskip("torch")
    from torch.utils.checkpoint import checkpoint as tck

    xt, Wt = torch.tensor(XA, requires_grad=False), torch.tensor(WA, requires_grad=True)
    tck(lambda t: (t @ Wt).tanh().pow(2).sum(), xt, use_reentrant=False).backward()
    W = t64(WA, True)
    checkpoint(lambda t: ((t @ W).tanh() ** 2).sum(), t64(XA)).backward()
    np.testing.assert_allclose(W.grad.numpy(), Wt.grad.numpy(), rtol=1e-12)
