"""Tensor.register_post_accumulate_grad_hook and autograd.queue_callback.

See NOTE [Backward callbacks and post-accumulate hooks] in lucid/autograd/engine.py.
"""
import numpy as np
import pytest

import lucid
from lucid._core.tensor import _POST_HOOKS
from lucid.autograd import queue_callback


def _leaf(values, dtype=np.float64):
    return lucid.tensor(np.asarray(values, dtype=dtype), requires_grad=True)


# ------------------------------------------------------------- post-accumulate hooks


def test_post_hook_sees_total_gradient_once_per_backward():
    x = _leaf([1.0, -2.0, 0.5])
    seen = []
    x.register_post_accumulate_grad_hook(lambda t: seen.append(np.array(t.grad.detach().numpy())))
    (x * x + 3.0 * x).sum().backward()  # x reaches the graph through three edges
    assert len(seen) == 1
    np.testing.assert_allclose(seen[0], 2 * np.array([1.0, -2.0, 0.5]) + 3.0, rtol=0, atol=1e-15)
    (x * x).sum().backward()  # accumulates: the hook sees the running sum
    assert len(seen) == 2
    np.testing.assert_allclose(seen[1], 4 * np.array([1.0, -2.0, 0.5]) + 3.0, rtol=0, atol=1e-15)


def test_post_hook_fires_as_soon_as_the_leaf_is_complete():
    # loss = sum(exp(x * w1) * w2): w2's gradient is complete after the last mul, before
    # the gradient reaches the intermediate a = x * w1 and then w1.
    x = lucid.tensor(np.array([0.1, 0.2]))
    w1, w2 = _leaf([0.5, -0.5]), _leaf([2.0, 3.0])
    log = []
    w1.register_post_accumulate_grad_hook(lambda t: log.append("w1"))
    w2.register_post_accumulate_grad_hook(lambda t: log.append(("w2", w1.grad is None)))
    a = x * w1
    a.register_hook(lambda g: log.append("a"))
    (a.exp() * w2).sum().backward()
    assert log == [("w2", True), "a", "w1"]
    e = np.exp(np.array([0.1, 0.2]) * np.array([0.5, -0.5]))
    np.testing.assert_allclose(w2.grad.numpy(), e, rtol=1e-15)
    np.testing.assert_allclose(w1.grad.numpy(), e * np.array([2.0, 3.0]) * np.array([0.1, 0.2]), rtol=1e-15)


def test_gradients_match_with_and_without_post_hooks():
    rng = np.random.default_rng(0)
    xs = rng.standard_normal((4, 3))
    w0, b0 = rng.standard_normal((3, 5)), rng.standard_normal(5)

    def run(hooked):
        w, b = _leaf(w0), _leaf(b0)
        x = lucid.tensor(xs)
        if hooked:
            for p in (w, b):
                p.register_post_accumulate_grad_hook(lambda t: None)
        h = (x @ w + b).tanh()
        loss = ((h @ w.T) * b[:3]).sum() + (h * h).sum()  # w and b each used twice
        loss.backward()
        return w.grad.numpy(), b.grad.numpy()

    for plain, hooked in zip(run(False), run(True)):
        np.testing.assert_array_equal(plain, hooked)


def test_post_hook_registration_rules_and_removal():
    before = _POST_HOOKS[0]
    with pytest.raises(RuntimeError, match="doesn't require gradient"):
        lucid.tensor([1.0]).register_post_accumulate_grad_hook(lambda t: None)
    x = _leaf([1.0])
    with pytest.raises(RuntimeError, match="non-leaf"):
        (x * 2).register_post_accumulate_grad_hook(lambda t: None)
    with pytest.raises(TypeError, match="callable"):
        x.register_post_accumulate_grad_hook(3)
    calls = []
    h = x.register_post_accumulate_grad_hook(lambda t: calls.append(1))
    assert _POST_HOOKS[0] == before + 1
    (x * 2).sum().backward()
    h.remove()
    h.remove()  # a second remove is a no-op
    assert _POST_HOOKS[0] == before
    (x * 2).sum().backward()
    assert calls == [1]
    np.testing.assert_array_equal(x.grad.numpy(), [4.0])


def test_post_hooks_not_run_by_autograd_grad_but_by_backward_inputs():
    x, y = _leaf([2.0]), _leaf([5.0])
    log = []
    x.register_post_accumulate_grad_hook(lambda t: log.append(("x", t.grad.item())))
    y.register_post_accumulate_grad_hook(lambda t: log.append(("y", t.grad.item())))
    (gx,) = lucid.autograd.grad((x * y).sum(), [x])
    assert log == [] and x.grad is None  # autograd.grad accumulates nothing
    np.testing.assert_array_equal(gx.numpy(), [5.0])
    (x * y).sum().backward(inputs=[y])
    assert log == [("y", 2.0)] and x.grad is None


def test_post_hook_on_a_root_leaf_and_under_create_graph():
    w = _leaf([1.0, 2.0])
    seen = []
    w.register_post_accumulate_grad_hook(lambda t: seen.append(np.array(t.grad.detach().numpy())))
    w.backward(lucid.tensor([1.0, 1.0], dtype=lucid.float64))
    np.testing.assert_array_equal(seen[0], [1.0, 1.0])
    w.grad = None
    fns = []
    w.register_post_accumulate_grad_hook(lambda t: fns.append(t.grad.grad_fn is not None))
    (w ** 3).sum().backward(create_graph=True)
    assert fns == [True]  # the gradient is itself differentiable
    np.testing.assert_allclose(seen[1], 3 * np.array([1.0, 2.0]) ** 2)


# ------------------------------------------------------------------- queue_callback


def test_queue_callback_outside_backward_raises():
    with pytest.raises(RuntimeError, match="queue_callback: .*during a backward"):
        queue_callback(lambda: None)
    x = _leaf([1.0])
    x.register_hook(lambda g: queue_callback(None))
    with pytest.raises(TypeError, match="callable"):
        (x * 1.0).sum().backward()


def test_callbacks_run_once_after_every_grad_is_written_in_queue_order():
    w1, w2 = _leaf([1.0, 2.0]), _leaf([3.0])
    log = []

    def hook(t):
        log.append(f"post {t is w1 and 'w1' or 'w2'}")
        if t is w2:  # queued mid-backward, while w1.grad is still unwritten
            queue_callback(lambda: log.append(("cb1", w1.grad.numpy().tolist(), w2.grad.item())))
            queue_callback(lambda: (log.append("cb2"), queue_callback(lambda: log.append("cb3"))))

    w1.register_post_accumulate_grad_hook(hook)
    w2.register_post_accumulate_grad_hook(hook)
    ((w1 * w1).sum() * w2).sum().backward()
    assert log == ["post w2", "post w1", ("cb1", [6.0, 12.0], 5.0), "cb2", "cb3"]
    log.clear()
    ((w1 * w1).sum() * w2).sum().backward()  # the list is per backward: queued anew
    assert log.count("cb2") == 1 and log.count("cb3") == 1


def test_callback_from_custom_function_backward_and_nested_backward():
    log = []

    class Double(lucid.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x * 2

        @staticmethod
        def backward(ctx, g):
            queue_callback(lambda: log.append("outer"))
            inner = _leaf([4.0])
            inner.register_hook(lambda gi: queue_callback(lambda: log.append("inner")))
            with lucid.enable_grad():  # a backward inside a backward: its own list
                (inner * inner).sum().backward()
            log.append(("inner done", inner.grad.item()))
            return g * 2

    x = _leaf([1.0, 2.0])
    Double.apply(x).sum().backward()
    assert log == ["inner", ("inner done", 8.0), "outer"]
    np.testing.assert_array_equal(x.grad.numpy(), [2.0, 2.0])


def test_failed_backward_runs_no_callback_and_leaves_unhooked_grads_alone():
    x = _leaf([1.0])
    log = []

    def bad(g):
        queue_callback(lambda: log.append("cb"))
        raise ValueError("boom")

    y = x * 3.0
    y.register_hook(bad)
    with pytest.raises(ValueError, match="boom"):
        (y * y).sum().backward()
    assert log == [] and x.grad is None
    with pytest.raises(RuntimeError):  # the failed backward's list is gone
        queue_callback(lambda: None)


def test_pytorch_spelling_execution_engine_queue_callback():
    # PyTorch code (DDP-style reducers) reaches the engine through Variable._execution_engine.
    from lucid.autograd import Variable

    engine = Variable._execution_engine
    assert lucid.autograd.variable.Variable._execution_engine is engine
    w = _leaf([3.0, -1.0])
    log = []

    def hook(t):  # queued mid-backward: runs after w.grad is final
        engine.queue_callback(lambda: log.append(w.grad.numpy().tolist()))

    w.register_post_accumulate_grad_hook(hook)
    (w * w).sum().backward()
    assert log == [[6.0, -2.0]]
    with pytest.raises(RuntimeError, match="queue_callback: .*during a backward"):
        engine.queue_callback(lambda: None)
    w.grad = None
    w2 = _leaf([1.0])
    w2.register_hook(lambda g: engine.queue_callback(None))
    with pytest.raises(TypeError, match="callable"):
        (w2 * 2.0).sum().backward()


def test_callbacks_of_backwards_in_two_threads_stay_with_their_own_backward():
    # both backwards are running when each hook queues its callback (the barrier): each callback
    # runs at the end of its own thread's backward and sees that backward's gradient
    import threading

    barrier = threading.Barrier(2, timeout=30)
    results, errors = {}, []

    def work(name, scale):
        try:
            w = lucid.tensor([scale], requires_grad=True)
            log = []

            def hook(g):
                barrier.wait()
                lucid.autograd.queue_callback(lambda: log.append(w.grad.item()))
                barrier.wait()

            w.register_hook(hook)
            (w * w).sum().backward()
            results[name] = log
        except Exception as e:  # reported below, not lost in the thread
            errors.append(e)

    threads = [threading.Thread(target=work, args=a) for a in (("a", 2.0), ("b", 5.0))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and results == {"a": [4.0], "b": [10.0]}  # d(w^2)/dw = 2w
