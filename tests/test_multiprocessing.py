"""Tensors shared between processes: share_memory_, lucid.multiprocessing, spawn (NOTE [Shared memory])."""
import pickle
from multiprocessing.reduction import ForkingPickler

import numpy as np
import pytest

import lucid
import lucid.multiprocessing as mp
from lucid import nn

# Shared memory is host memory: these tests make CPU tensors whatever --lucid-device says (a
# device tensor's share_memory_ is a no-op, tested below).
pytestmark = pytest.mark.usefixtures("cpu_default_device")


def _add_in_place(t, value, done=None):
    t.add_(value)
    if done is not None:
        done.put("ok")


def _receive_and_change(inbox, outbox):
    t = inbox.get()
    outbox.put((type(t).__name__, t.requires_grad, t.is_shared(), t.tolist()))
    with lucid.no_grad():
        t.mul_(10)
    outbox.put("done")


def _write_rank(i, t):
    t[i] = float(i + 1)


def _fail_on_one(i):
    if i == 1:
        raise ValueError("rank one fails")


def _sgd_step(model, scale):
    opt = lucid.optim.SGD(model.parameters(), lr=1.0)
    for p in model.parameters():
        p.grad = lucid.full_like(p, float(scale))
    opt.step()


def test_share_memory_keeps_values_and_is_idempotent():
    t = lucid.arange(6.0).reshape(2, 3)
    assert not t.is_shared()
    assert t.share_memory_() is t and t.is_shared()
    data = t._data
    np.testing.assert_array_equal(t.numpy(), np.arange(6.0).reshape(2, 3))
    assert t.share_memory_()._data is data  # already shared: nothing moves
    assert t[1].is_shared() and t.t().is_shared()  # views of shared memory are shared
    base = lucid.arange(8.0).requires_grad_(False)
    view = base[2:6:2]
    col = base.reshape(2, 4)[:, 1]
    assert view.share_memory_() is view  # a view moves its base, and the base's other views
    assert base.is_shared() and view.is_shared() and col.is_shared()
    view.fill_(-1.0)
    np.testing.assert_array_equal(base.numpy(), [0, 1, -1, 3, -1, 5, 6, 7])
    np.testing.assert_array_equal(col.numpy(), [1, 5])
    empty = lucid.zeros(0).share_memory_()
    assert empty.is_shared() and empty.shape == (0,)


def test_share_memory_leaves_device_tensors_alone():
    from lucid.testing import strict_device

    strict_device.enable()
    t = lucid.ones(3, device="strict")
    assert t.share_memory_() is t and not t.is_shared()


def test_a_forked_process_updates_shared_memory_only():
    ctx = mp.get_context("fork")
    shared, private = lucid.zeros(3).share_memory_(), lucid.zeros(3)
    for t in (shared, private):
        p = ctx.Process(target=_add_in_place, args=(t, 2.0))
        p.start()
        p.join()
        assert p.exitcode == 0
    np.testing.assert_array_equal(shared.numpy(), [2.0, 2.0, 2.0])
    np.testing.assert_array_equal(private.numpy(), [0.0, 0.0, 0.0])


def test_tensors_sent_through_a_queue_share_memory_with_a_spawned_process():
    ctx = mp.get_context("spawn")
    inbox, outbox = ctx.Queue(), ctx.Queue()
    p = ctx.Process(target=_receive_and_change, args=(inbox, outbox))
    p.start()
    w = nn.Parameter(lucid.tensor([1.0, 2.0]))
    inbox.put(w)
    assert outbox.get(timeout=60) == ("Parameter", True, True, [1.0, 2.0])
    assert outbox.get(timeout=60) == "done"
    p.join(timeout=60)
    assert w.is_shared()  # sending moved it to shared memory, as in PyTorch
    np.testing.assert_array_equal(w.detach().numpy(), [10.0, 20.0])


def test_hogwild_steps_from_two_processes_land_in_one_model():
    lucid.manual_seed(0)
    model = nn.Linear(3, 2)
    before = [p.detach().numpy().copy() for p in model.parameters()]
    model.share_memory()
    ctx = mp.get_context("fork")
    for scale in (1, 2):  # one after the other: the test checks sharing, not lock-free races
        p = ctx.Process(target=_sgd_step, args=(model, scale))
        p.start()
        p.join()
        assert p.exitcode == 0
    for b, p in zip(before, model.parameters()):
        np.testing.assert_allclose(p.detach().numpy(), b - 3.0, rtol=1e-6)


def test_spawn_runs_every_rank_and_raises_a_rank_failure():
    t = lucid.zeros(2)
    assert mp.spawn(_write_rank, args=(t,), nprocs=2) is None
    np.testing.assert_array_equal(t.numpy(), [1.0, 2.0])
    with pytest.raises(mp.ProcessRaisedException, match="(?s)Process 1 terminated.*ValueError: rank one fails"):
        mp.spawn(_fail_on_one, nprocs=2)
    ctx = mp.spawn(_write_rank, args=(t,), nprocs=1, join=False)
    while not ctx.join():
        pass


def test_refusals_and_strategies():
    x = lucid.ones(2, requires_grad=True) * 2
    with pytest.raises(RuntimeError, match="refusing to send a non-leaf tensor that requires grad"):
        ForkingPickler.dumps(x)
    assert pickle.loads(pickle.dumps(lucid.ones(2).share_memory_())).is_shared() is False  # plain pickle: values
    assert mp.get_all_sharing_strategies() == {"file_descriptor"} and mp.get_sharing_strategy() == "file_descriptor"
    with pytest.raises(ValueError, match="set_sharing_strategy: unknown strategy 'file_system'"):
        mp.set_sharing_strategy("file_system")
    with pytest.raises(ValueError, match="spawn: nprocs must be a positive int"):
        mp.spawn(_fail_on_one, nprocs=0)


def test_a_descriptor_that_cant_be_mapped_is_closed():
    import os

    from lucid._core.shared_memory import SharedBuffer

    fd = os.memfd_create("short", 0) if hasattr(os, "memfd_create") else pytest.skip("no memfd")
    os.ftruncate(fd, 8)
    with pytest.raises(ValueError):  # mmap: the file is shorter than the mapping asked for
        SharedBuffer.from_fd(fd, 1 << 20)
    with pytest.raises(OSError):  # the buffer owned it: already closed, not leaked
        os.fstat(fd)
