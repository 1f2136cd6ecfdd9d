"""utils.checkpoint: checkpoint_sequential, context_fn and PyTorch's helpers."""
import contextlib
import warnings

import numpy as np
import pytest

import lucid
import lucid.nn as nn
from lucid.utils import checkpoint as C


def _net():
    lucid.manual_seed(0)
    return nn.Sequential(nn.Linear(3, 5), nn.Tanh(), nn.Linear(5, 5), nn.Tanh(), nn.Linear(5, 2), nn.Tanh(),
                         nn.Linear(2, 1))


@pytest.mark.parametrize("segments", [1, 2, 3, 7])
@pytest.mark.parametrize("use_reentrant", [False, True])
def test_checkpoint_sequential_gives_the_plain_gradients(segments, use_reentrant):
    net = _net().double()
    x = lucid.tensor(np.random.default_rng(1).standard_normal((4, 3)), requires_grad=True)
    net(x).sum().backward()
    want = [p.grad.numpy().copy() for p in net.parameters()] + [x.grad.numpy().copy()]
    net.zero_grad()
    x.grad = None
    out = C.checkpoint_sequential(net, segments, x, use_reentrant=use_reentrant)
    out.sum().backward()
    got = [p.grad.numpy() for p in net.parameters()] + [x.grad.numpy()]
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-12, atol=1e-14)
    # the list form, and the nodes of checkpointed segments keep nothing saved
    out2 = C.checkpoint_sequential(list(net.children()), segments, x, use_reentrant=use_reentrant)
    np.testing.assert_allclose(out2.detach().numpy(), out.detach().numpy())


def test_checkpoint_sequential_argument_errors():
    with pytest.raises(ValueError, match="unexpected keyword arguments: foo"):
        C.checkpoint_sequential(_net(), 2, lucid.ones(1, 3), foo=1)
    with pytest.raises(ValueError, match="segments must be a positive int"):
        C.checkpoint_sequential(_net(), 0, lucid.ones(1, 3))


def test_context_fn_wraps_forward_and_recomputation():
    events = []

    @contextlib.contextmanager
    def tag(name):
        events.append(f"enter {name}")
        yield
        events.append(f"exit {name}")

    w = lucid.tensor([2.0], requires_grad=True)
    out = C.checkpoint(lambda t: (t * w).sin(), lucid.tensor([1.0]), use_reentrant=False,
                       context_fn=lambda: (tag("fwd"), tag("recompute")))
    assert events == ["enter fwd", "exit fwd"]
    out.sum().backward()
    assert events == ["enter fwd", "exit fwd", "enter recompute", "exit recompute"]
    np.testing.assert_allclose(w.grad.numpy(), [np.cos(2.0)], rtol=1e-6)
    with pytest.raises(ValueError, match="only supported when use_reentrant=False"):
        C.checkpoint(lambda t: t, lucid.ones(1, requires_grad=True), use_reentrant=True,
                     context_fn=lambda: (contextlib.nullcontext(), contextlib.nullcontext()))
    with pytest.raises(ValueError, match="determinism_check should be one of"):
        C.checkpoint(lambda t: t, lucid.ones(1), determinism_check="strict")


def test_a_different_recomputation_raises_checkpoint_error():
    calls = [0]

    def f(t):
        calls[0] += 1
        return t.exp() if calls[0] == 1 else t.sin().cos()

    out = C.checkpoint(f, lucid.ones(2, requires_grad=True), use_reentrant=False)
    with pytest.raises(C.CheckpointError, match="recorded different operations"):
        out.sum().backward()
    assert issubclass(C.CheckpointError, RuntimeError)


def test_helpers():
    a, b = lucid.ones(2, requires_grad=True), lucid.ones(2)
    da, db, k = C.detach_variable((a, b, 3))
    assert da.requires_grad and da.grad_fn is None and not db.requires_grad and k == 3
    with pytest.raises(RuntimeError, match="only tuple of tensors is supported"):
        C.detach_variable([a])
    with pytest.warns(UserWarning, match="None of the inputs have requires_grad=True"):
        C.check_backward_validity((b, 1))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        C.check_backward_validity((a,))
    assert C.get_device_states(lucid.ones(1, device="cpu")) == ([], [])
    C.set_device_states([], [])
    assert C.DefaultDeviceType.get_device_type() == "cuda"
    C.DefaultDeviceType.set_device_type("cpu")
    assert C.DefaultDeviceType.get_device_type() == "cpu"
    C.DefaultDeviceType.set_device_type("cuda")
    ctx = C.noop_context_fn()
    with ctx[0], ctx[1]:
        pass
