"""Selective activation checkpointing (NOTE [Selective checkpointing])."""
import functools

import numpy as np
import pytest

import lucid
from lucid._core.primitive import REGISTRY
from lucid.utils.checkpoint import (CheckpointError, CheckpointPolicy, checkpoint,
                                    create_selective_checkpoint_contexts)


@pytest.fixture
def calls(monkeypatch):
    """The forward computations of matmul and sigmoid, in order."""
    seen = []
    for name in ("matmul", "sigmoid"):
        impl = REGISTRY[name].impl
        monkeypatch.setattr(REGISTRY[name], "impl",
                            lambda *a, _impl=impl, _name=name, **k: (seen.append(_name), _impl(*a, **k))[1])
    return seen


def _inputs():
    lucid.manual_seed(0)
    x = lucid.randn(4, 5, dtype=lucid.float64, requires_grad=True)
    w = lucid.randn(5, 5, dtype=lucid.float64, requires_grad=True)
    return x, w


def _segment(x, w):
    y = (x @ w).sigmoid() @ w
    y.relu_()  # changes a saved output in place: its saved copy must not change
    return (y * y).sum()


def _grads(out, x, w):
    return [g.numpy() for g in lucid.autograd.grad(out, [x, w])]


def test_saved_ops_are_not_recomputed_and_gradients_are_exact(calls):
    x, w = _inputs()
    want = _grads(_segment(x, w), x, w)
    calls.clear()
    ctx = functools.partial(create_selective_checkpoint_contexts, [lucid.matmul])
    out = checkpoint(_segment, x, w, use_reentrant=False, context_fn=ctx)
    assert calls == ["matmul", "sigmoid", "matmul"]
    calls.clear()
    got = _grads(out, x, w)
    assert calls == ["sigmoid"]  # the backward recomputed only the elementwise op
    for g, h in zip(got, want):
        np.testing.assert_allclose(g, h, rtol=1e-13)


def test_policy_function_sees_both_passes_and_may_recompute_everything(calls):
    x, w = _inputs()
    want = _grads(_segment(x, w), x, w)
    seen = []

    def policy(ctx, op, *args, **kwargs):
        seen.append((op.name, ctx.is_recompute, tuple(a.shape for a in args if isinstance(a, lucid.Tensor))))
        return CheckpointPolicy.MUST_RECOMPUTE

    calls.clear()
    out = checkpoint(_segment, x, w, use_reentrant=False,
                     context_fn=functools.partial(create_selective_checkpoint_contexts, policy))
    got = _grads(out, x, w)
    assert calls == ["matmul", "sigmoid", "matmul"] * 2  # a plain checkpoint: all of it again
    assert ("matmul", False, ((4, 5), (5, 5))) in seen and ("matmul", True, ((4, 5), (5, 5))) in seen
    for g, h in zip(got, want):
        np.testing.assert_allclose(g, h, rtol=1e-13)


def test_op_handles_compare_with_names_and_functions():
    ops = []
    policy = lambda ctx, op, *a, **k: (ops.append(op), CheckpointPolicy.PREFER_SAVE)[1]  # noqa: E731
    x, w = _inputs()
    checkpoint(lambda x: (x @ w).sum(), x, use_reentrant=False,
               context_fn=functools.partial(create_selective_checkpoint_contexts, policy))
    matmul = next(op for op in ops if op.name == "matmul")
    assert matmul == lucid.matmul and matmul == "matmul" and matmul != lucid.sum and repr(matmul) == "lucid.matmul"


def test_offloading_to_the_host_keeps_the_device():
    from lucid.testing import strict_device

    strict_device.enable()
    x, w = (t.detach().to("strict").requires_grad_() for t in _inputs())
    want = _grads(_segment(x, w), x, w)
    policy = lambda ctx, op, *a, **k: (CheckpointPolicy.MUST_CPU_OFFLOAD if op == "matmul"  # noqa: E731
                                       else CheckpointPolicy.PREFER_RECOMPUTE)
    out = checkpoint(_segment, x, w, use_reentrant=False,
                     context_fn=functools.partial(create_selective_checkpoint_contexts, policy))
    got = lucid.autograd.grad(out, [x, w])
    assert all(g.device == x.device for g in got)
    for g, h in zip(got, want):
        np.testing.assert_allclose(g.numpy(), h, rtol=1e-13)


def test_random_ops_and_changing_decisions():
    x, w = _inputs()

    def noisy(x):
        return lucid.nn.functional.dropout(x @ w, 0.5, training=True).sum()

    lucid.manual_seed(3)
    want = lucid.autograd.grad(noisy(x), x).numpy()
    lucid.manual_seed(3)
    ctx = functools.partial(create_selective_checkpoint_contexts, ["matmul"])
    got = lucid.autograd.grad(checkpoint(noisy, x, use_reentrant=False, context_fn=ctx), x).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-13)  # the mask is replayed

    def fickle(ctx, op, *args, **kwargs):
        return CheckpointPolicy.MUST_SAVE if (op == "matmul") != ctx.is_recompute else CheckpointPolicy.PREFER_RECOMPUTE

    out = checkpoint(lambda x: (x @ w).sigmoid().sum(), x, use_reentrant=False,
                     context_fn=functools.partial(create_selective_checkpoint_contexts, fickle))
    with pytest.raises(CheckpointError, match="the recomputation saved sigmoid where the forward saved matmul"):
        out.backward()


def test_bad_policies_raise():
    with pytest.raises(TypeError, match="must be either a function or a list of ops"):
        create_selective_checkpoint_contexts(3)
    with pytest.raises(ValueError, match="is not an op"):
        create_selective_checkpoint_contexts([3])
    x, w = _inputs()
    with pytest.raises(TypeError, match="the policy returned 'yes' for matmul"):
        checkpoint(lambda x: (x @ w).sum(), x, use_reentrant=False,
                   context_fn=functools.partial(create_selective_checkpoint_contexts, lambda *a, **k: "yes"))
    assert REGISTRY["matmul"].impl.__name__ != "run"  # a failing forward restores the primitives
