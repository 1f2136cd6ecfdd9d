"""lucid.futures (torch.futures): Future, collect_all, wait_all; jit.fork and Work.get_future use it."""
import threading
import time

import numpy as np
import pytest

import lucid
from lucid.futures import Future, collect_all, wait_all


def test_set_result_wait_value_and_done():
    f = Future()
    assert not f.done()
    with pytest.raises(RuntimeError, match="^Future.value: .*not completed"):
        f.value()
    f.set_result(lucid.tensor([1.0, 2.0]))
    assert f.done()
    np.testing.assert_array_equal(f.wait().numpy(), [1.0, 2.0])
    assert f.value() is f.wait()
    with pytest.raises(RuntimeError, match="already been set"):
        f.set_result(3)
    with pytest.raises(RuntimeError, match="already been set"):
        f.set_exception(ValueError("late"))


def test_set_exception_raises_from_wait_and_value():
    f = Future()
    with pytest.raises(AssertionError, match="^set_exception: 3 is of type"):
        f.set_exception(3)
    assert not f.done()
    f.set_exception(ValueError("boom"))
    assert f.done()
    for get in (f.wait, f.value):
        with pytest.raises(ValueError, match="^boom$"):
            get()


def test_wait_blocks_until_another_thread_sets_the_result():
    f = Future()
    t = threading.Thread(target=lambda: (time.sleep(0.05), f.set_result(9)))
    t.start()
    assert f.wait() == 9
    t.join()


def test_then_chains_values_errors_and_runs_on_failed_futures():
    f = Future()
    plus = f.then(lambda x: x.value() + 1)
    times = plus.then(lambda x: x.value() * 10)
    assert not plus.done() and not times.done()
    f.set_result(4)
    assert (plus.wait(), times.wait()) == (5, 50)
    # a failing callback fails the chained future with PyTorch's RuntimeError, the cause kept
    bad = f.then(lambda x: 1 / 0)
    with pytest.raises(RuntimeError, match="^then: got the following error when running the callback: "
                                           "ZeroDivisionError") as info:
        bad.wait()
    assert isinstance(info.value.__cause__, ZeroDivisionError)
    # the callback of a failed future still runs (and may recover), as in PyTorch
    failed = Future()
    failed.set_exception(KeyError("k"))
    assert failed.then(lambda x: "recovered").wait() == "recovered"


def test_add_done_callback_order_immediate_and_errors_warned():
    f, seen = Future(), []
    f.add_done_callback(lambda x: seen.append(("a", x.value())))
    f.add_done_callback(lambda x: seen.append(("b", x.value())))
    f.set_result(7)
    assert seen == [("a", 7), ("b", 7)]
    f.add_done_callback(lambda x: seen.append(("late", x.value())))  # already done: runs now
    assert seen[-1] == ("late", 7)
    g = Future()
    g.add_done_callback(lambda x: 1 / 0)
    with pytest.warns(RuntimeWarning, match="ZeroDivisionError"):
        g.set_result(1)
    assert g.value() == 1  # the callback's failure does not fail the future


def test_collect_all_completes_with_the_list_and_fails_with_the_first_error():
    a, b = Future(), Future()
    both = collect_all([a, b])
    b.set_result(2)
    assert not both.done()
    a.set_result(1)
    got = both.wait()
    assert got[0] is a and got[1] is b and [f.value() for f in got] == [1, 2]
    assert collect_all([]).wait() == []
    c, d = Future(), Future()
    combined = collect_all([c, d])
    d.set_exception(ValueError("second"))
    c.set_exception(KeyError("first"))
    with pytest.raises(KeyError, match="first"):
        combined.wait()
    with pytest.raises(TypeError, match="^collect_all: expected a list of lucid.futures.Future"):
        collect_all([1])


def test_wait_all_values_and_first_error():
    fs = [Future() for _ in range(3)]
    for i, f in enumerate(fs):
        f.set_result(i * i)
    assert wait_all(fs) == [0, 1, 4]
    bad = Future()
    bad.set_exception(ValueError("boom"))
    with pytest.raises(ValueError, match="boom"):
        wait_all([fs[0], bad])
    with pytest.raises(TypeError, match="^wait_all: "):
        wait_all(3)


def test_jit_uses_lucid_futures():
    assert lucid.jit.Future is Future
    fut = lucid.jit.fork(lambda x: x * 3, lucid.tensor(2.0))
    assert isinstance(fut, Future) and fut.wait().item() == 6.0


def test_work_get_future_holds_the_result():
    from lucid.distributed.collectives import Work

    out = [lucid.tensor([1.0, 2.0])]
    finished = []
    w = Work([], finish=lambda: finished.append(True), result=out)  # a finished request list
    fut = w.get_future()
    assert isinstance(fut, Future) and fut.done() and finished == [True]
    assert fut.wait() is out and w.is_completed()
    chained = fut.then(lambda f: f.value()[0].sum().item())
    assert chained.wait() == 3.0
