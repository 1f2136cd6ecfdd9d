"""DataLoader worker processes under faults: dead workers, unpicklable results, a dead
parent, failing worker_init_fn, timeouts, early ``break`` and persistent workers.

Every test that could hang on a regression runs under a SIGALRM deadline, so a hang is a
failure with a message, not a stuck suite."""
import os
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest
from conftest import deadline

from lucid.utils.data import DataLoader, Dataset, IterableDataset, get_worker_info

pytestmark = pytest.mark.skipif(not hasattr(signal, "SIGKILL") or sys.platform == "win32",
                                reason="POSIX worker processes")


class Pids(Dataset):
    def __len__(self):
        return 8

    def __getitem__(self, i):
        return os.getpid()


class DiesWhileSending(Dataset):
    """Index 3 returns a 16 MB array and makes its worker die half-way through writing it."""

    def __len__(self):
        return 8

    def __getitem__(self, i):
        if i == 3:
            from lucid.utils.data import _worker

            def write_half_then_die(fd, data):
                os.write(fd, bytes(memoryview(data)[: len(data) // 2]))
                os.kill(os.getpid(), signal.SIGKILL)

            _worker._write_all = write_half_then_die
            return np.zeros(2 ** 21)
        return i


def test_worker_killed_while_sending_is_reported_not_a_hang():
    for timeout in (0, 30):
        loader = DataLoader(DiesWhileSending(), batch_size=None, num_workers=2, timeout=timeout)
        t0 = time.monotonic()
        with deadline(20), pytest.raises(RuntimeError, match=r"DataLoader worker \(pid \d+\) was killed by signal 9"):
            list(loader)
        assert time.monotonic() - t0 < 10


class Unpicklable(Dataset):
    def __len__(self):
        return 4

    def __getitem__(self, i):
        if i == 2:
            return lambda: i  # lambdas do not pickle
        if i == 3:
            class LocalError(Exception):  # a local class does not pickle either
                pass

            raise LocalError("local failure at 3")
        return i


def test_unpicklable_result_or_exception_becomes_a_runtime_error():
    with deadline(20):
        with pytest.raises(RuntimeError, match="could not be pickled") as info:
            list(DataLoader(Unpicklable(), batch_size=None, num_workers=1))
        assert "index 2" in str(info.value)
        with pytest.raises(RuntimeError, match="LocalError: local failure at 3") as info:
            list(DataLoader(Unpicklable(), batch_size=None, num_workers=1, sampler=[3]))
        assert "__getitem__" in str(info.value)  # the worker's traceback came along


def _gone(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] in ("Z", "X")
    except FileNotFoundError:
        return True


@pytest.mark.skipif(not os.path.isdir("/proc"), reason="needs /proc")
def test_workers_exit_when_the_main_process_dies():
    script = textwrap.dedent("""
        import os, signal, sys
        from lucid.utils.data import DataLoader, Dataset

        class Pids(Dataset):
            def __len__(self):
                return 100
            def __getitem__(self, i):
                return os.getpid()

        it = iter(DataLoader(Pids(), batch_size=None, num_workers=2))
        pids = {next(it) for _ in range(6)}
        print(" ".join(map(str, sorted(pids))), flush=True)
        os.kill(os.getpid(), signal.SIGKILL)
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    pids = [int(p) for p in out.stdout.split()]
    assert len(pids) == 2, out.stderr
    t0 = time.monotonic()
    while not all(_gone(p) for p in pids) and time.monotonic() - t0 < 10:
        time.sleep(0.05)
    assert all(_gone(p) for p in pids), "orphaned DataLoader workers still running"


def _bad_init(worker_id):
    raise ValueError(f"cannot initialise worker {worker_id}")


def test_worker_init_fn_error_surfaces_with_its_traceback():
    with deadline(20), pytest.raises(ValueError, match="cannot initialise worker") as info:
        list(DataLoader(Pids(), num_workers=2, worker_init_fn=_bad_init))
    msg = str(info.value)
    assert "worker_init_fn" in msg and "_bad_init" in msg and "Traceback" in msg


class Slow(Dataset):
    def __init__(self, fast=(0,), delay=4.0):
        self.fast, self.delay = fast, delay

    def __len__(self):
        return 6

    def __getitem__(self, i):
        if i not in self.fast:
            time.sleep(self.delay)
        return i


def test_timeout_fires_at_the_stated_time():
    loader = DataLoader(Slow(fast=()), batch_size=None, num_workers=1, timeout=0.5)
    t0 = time.monotonic()
    with deadline(20), pytest.raises(RuntimeError, match="timed out after 0.5 seconds"):
        next(iter(loader))
    assert 0.5 <= time.monotonic() - t0 < 2.0


def test_break_does_not_wait_for_busy_workers():
    loader = DataLoader(Slow(), batch_size=None, num_workers=2)
    with deadline(20):
        it = iter(loader)
        assert next(it) == 0
        t0 = time.monotonic()
        it.close()  # what ``break`` does to the loop's iterator
        assert time.monotonic() - t0 < 2.0  # not the 4 s the other worker is still busy for


def test_persistent_workers_survive_epochs_and_a_break():
    loader = DataLoader(Pids(), batch_size=2, num_workers=2, persistent_workers=True)
    with deadline(30):
        first = {int(p) for b in loader for p in b.tolist()}
        for b in loader:
            break  # an abandoned epoch leaves stale tasks behind; the next epoch must ignore them
        second = [int(p) for b in loader for p in b.tolist()]
        assert len(first) == 2 and set(second) == first and len(second) == 8
        fresh = DataLoader(Pids(), batch_size=2, num_workers=2)
        a = {int(p) for b in fresh for p in b.tolist()}
        b = {int(p) for b in fresh for p in b.tolist()}
        assert not a & b  # without persistent_workers: new processes every epoch
        loader._pool.shutdown()


class Stream(IterableDataset):
    def __iter__(self):
        info = get_worker_info()
        return iter(range(info.id * 10, info.id * 10 + 3))


def test_persistent_iterable_dataset_restarts_each_epoch():
    loader = DataLoader(Stream(), batch_size=2, num_workers=2, persistent_workers=True)
    with deadline(30):
        epochs = [sorted(x for b in loader for x in b.tolist()) for _ in range(2)]
    assert epochs == [[0, 1, 2, 10, 11, 12]] * 2
    loader._pool.shutdown()


class Missing(Dataset):
    def __len__(self):
        return 2

    def __getitem__(self, i):
        return {}["key"]


def test_worker_traceback_is_readable_text():
    with deadline(20), pytest.raises(KeyError) as info:
        list(DataLoader(Missing(), num_workers=1))
    msg = str(info.value)
    assert "\nOriginal Traceback (most recent call last):\n" in msg and "\\n" not in msg


def test_option_validation():
    with pytest.raises(ValueError, match="prefetch_factor"):
        DataLoader(Pids(), prefetch_factor=2)
    with pytest.raises(ValueError, match="persistent_workers"):
        DataLoader(Pids(), persistent_workers=True)
    with pytest.raises(ValueError, match="timeout"):
        DataLoader(Pids(), timeout=-1)


def test_spawn_context_and_persistent_workers():
    from lucid.utils.data import TensorDataset
    import lucid

    # a host dataset (as usual): a spawned worker imports lucid afresh, without the tests' stand-in device
    loader = DataLoader(TensorDataset(lucid.arange(7, device="cpu")), batch_size=3, num_workers=2,
                        multiprocessing_context="spawn", persistent_workers=True)
    with deadline(120):
        for _ in range(2):
            assert [b[0].tolist() for b in loader] == [[0, 1, 2], [3, 4, 5], [6]]
    loader._pool.shutdown()
