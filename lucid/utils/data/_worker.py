"""DataLoader worker processes: the worker loop, the result pipes and the worker pool.

NOTE [Worker processes]
Each worker receives ``(epoch, batch number, indices)`` tasks on its own task queue and
answers on its own pipe with length-prefixed pickled frames ``(epoch, n, data)``. The
main process hands out tasks round-robin, keeps ``prefetch_factor`` batches in flight per
worker and yields results in order (as they come with ``in_order=False``). Why our own
framing instead of ``mp.Queue``:

* The main process reads each pipe without blocking, into a per-worker buffer, and waits
  (``multiprocessing.connection.wait``, i.e. poll) on the pipes *and* the workers' process
  sentinels. A worker that dies half-way through sending (SIGKILL, OOM killer) therefore
  leaves a partial frame and a ready sentinel, and the main process raises "DataLoader worker (pid N) was killed by
  signal 9" instead of blocking forever inside ``recv``.
* The worker pickles the frame itself before writing, so a result (or exception) that
  cannot be pickled is turned into a RuntimeError carrying its text instead of being lost
  in a feeder thread while the main process waits.

A worker that raises sends a ``_WorkerError`` (type, message, formatted traceback, what it
was fetching) in place of the batch; the main process re-raises it in that batch's turn, so
the batches before it come out first, as in PyTorch (a StopIteration from a map-style
dataset ends the epoch quietly, as in PyTorch). A failing ``worker_init_fn`` is reported
at once (batch number -1) and the worker exits. A tensor that is part of an autograd graph
is refused when pickling a frame, as PyTorch's queues refuse it: its copy would be silently
cut off from the graph. A pool is only shut down by the process that made it: a forked
worker of another loader may inherit it and collect it. Workers poll their task queue with a
timeout and exit when their parent process is gone (``os.getppid()`` changed), so killing
the main process never leaves workers behind; a worker whose pipe has no reader gets EPIPE
and exits too. The epoch number in every task and frame lets persistent workers survive an
abandoned epoch: stale results are dropped, and an IterableDataset restarts its iterator
when the epoch changes.
"""
from __future__ import annotations

import io
import os
import pickle
import queue
import random as _pyrandom
import signal
import struct
import time
import traceback
from multiprocessing.connection import wait as _wait_for

import numpy as np

from ..._core.tensor import Tensor

_HEADER = struct.Struct("<Q")
_POLL = 0.5  # seconds between parent-death checks in an idle worker


class _KeyErrorMessage(str):
    """A KeyError's ``str`` is the ``repr`` of its argument; this keeps the text readable."""

    def __repr__(self):
        return self


class _WorkerError:
    """An exception raised in a worker, in a form that always pickles."""

    def __init__(self, exc, worker_id, where, tb=None):
        self.exc_type = type(exc)
        self.msg = str(exc)
        self.tb = tb if tb is not None else traceback.format_exc()
        self.worker_id, self.where = worker_id, where

    def reraise(self):
        head = f"Caught {self.exc_type.__name__} in DataLoader worker process {self.worker_id} while {self.where}."
        if self.tb:
            text = f"{head}\nOriginal {self.tb}"
        else:
            text = f"{head}\n{self.exc_type.__name__}: {self.msg}"
        if issubclass(self.exc_type, KeyError):
            text = _KeyErrorMessage(text)
        try:
            err = self.exc_type(text)
        except Exception:
            err = RuntimeError(text)
        raise err


# ---------------------------------------------------------------------------- framing
def _write_all(fd, data):
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


class _FramePickler(pickle.Pickler):
    """Refuses, as PyTorch's worker queues do, a tensor that is part of a graph: the copy in the
    main process would silently be cut off from it."""

    def reducer_override(self, obj):
        if isinstance(obj, Tensor) and obj.requires_grad and not obj.is_leaf:
            raise RuntimeError("Cowardly refusing to serialize non-leaf tensor which requires_grad, since "
                               "autograd does not support crossing process boundaries. If you just want to "
                               "transfer the data, call detach() on the tensor before returning it.")
        return NotImplemented


def _dumps(obj):
    buf = io.BytesIO()
    _FramePickler(buf, protocol=pickle.HIGHEST_PROTOCOL).dump(obj)
    return buf.getvalue()


def _send(fd, epoch, n, data, worker_id, where):
    """Pickle and write one frame; an unpicklable result becomes a RuntimeError frame."""
    try:
        payload = _dumps((epoch, n, data))
    except Exception as e:
        if isinstance(data, _WorkerError):
            text = f"{data.exc_type.__name__}: {data.msg}"
            err = _WorkerError(RuntimeError(f"{text} (the exception itself could not be pickled: {e})"),
                               worker_id, where, tb=data.tb)
        else:
            err = _WorkerError(RuntimeError(f"the batch could not be pickled to send it to the main "
                                            f"process: {type(e).__name__}: {e}"), worker_id, where, tb="")
        payload = pickle.dumps((epoch, n, err), protocol=pickle.HIGHEST_PROTOCOL)
    if len(payload) < 1 << 16:  # small: one write (no copy worth avoiding)
        _write_all(fd, _HEADER.pack(len(payload)) + payload)
    else:
        _write_all(fd, _HEADER.pack(len(payload)))
        _write_all(fd, payload)


class _FrameReader:
    """Reassembles frames from a non-blocking pipe without ever blocking."""

    def __init__(self, fd):
        self.fd = fd
        os.set_blocking(fd, False)
        self.head = bytearray()
        self.body = None  # bytearray being filled once the header is known
        self.filled = 0
        self.eof = False

    @property
    def partial(self):
        return bool(self.head) or self.body is not None

    def read(self):
        """All frames that are complete now (unpickled); sets ``eof`` when the writer is gone."""
        frames = []
        while not self.eof:
            try:
                if self.body is None:
                    chunk = os.read(self.fd, _HEADER.size - len(self.head))
                    if not chunk:
                        self.eof = True
                        break
                    self.head += chunk
                    if len(self.head) == _HEADER.size:
                        self.body = bytearray(_HEADER.unpack(self.head)[0])
                        self.filled = 0
                    continue
                if self.filled < len(self.body):
                    got = os.readv(self.fd, [memoryview(self.body)[self.filled:]])
                    if not got:
                        self.eof = True
                        break
                    self.filled += got
                if self.filled == len(self.body):
                    frames.append(pickle.loads(self.body))
                    self.head, self.body = bytearray(), None
            except BlockingIOError:
                break
        return frames


# ---------------------------------------------------------------------------- worker
def _seed_worker(seed):
    """Seed every source of randomness in a worker: lucid's default generator, NumPy's
    global one and Python's ``random`` (as PyTorch seeds torch and ``random``)."""
    from ...ops.random import manual_seed

    manual_seed(seed)
    np.random.seed(seed % (2 ** 32))
    _pyrandom.seed(seed)


def _fetch(dataset, indices, collate, auto, where):
    """One batch; on failure the error names the index that failed."""
    if not auto:
        where[0] = f"fetching index {indices!r}"
        return collate(dataset[indices])
    many = getattr(dataset, "__getitems__", None)
    if many:  # one call per batch, as PyTorch's fetcher
        where[0] = f"fetching indices {list(indices)} (in __getitems__)"
        samples = many(indices)
    else:
        samples = []
        for i in indices:
            where[0] = f"fetching index {i!r} (batch indices {list(indices)})"
            samples.append(dataset[i])
    where[0] = f"fetching the batch with indices {list(indices)} (in collate_fn)"
    return collate(samples)


def _next_task(task_q, parent):
    """The next task, or None when told to stop or when the parent process has died."""
    while True:
        try:
            return task_q.get(timeout=_POLL)
        except queue.Empty:
            if os.getppid() != parent:
                return None


def _worker_loop(dataset, task_q, conn, collate, worker_id, num_workers, seed, init_fn, iterable, auto,
                 drop_last, parent):
    """See NOTE [Worker processes]."""
    from . import dataloader

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the main process's business
    fd = conn.fileno()
    dataloader._worker_info = dataloader.WorkerInfo(worker_id, num_workers, seed, dataset)
    _seed_worker(seed)
    try:
        if init_fn is not None:
            init_fn(worker_id)
    except Exception as e:
        _send(fd, -1, -1, _WorkerError(e, worker_id, "running worker_init_fn"), worker_id, "running worker_init_fn")
        return
    it, it_epoch = None, None
    try:
        while True:
            task = _next_task(task_q, parent)
            if task is None:
                return
            epoch, n, indices = task
            where = [f"fetching index {indices!r}"]
            try:
                if iterable:
                    if it_epoch != epoch:
                        it, it_epoch = iter(dataset), epoch
                    data = _next_samples(it, indices, collate, auto, drop_last, where)
                else:
                    data = _fetch(dataset, indices, collate, auto, where)
            except Exception as e:
                data = _WorkerError(e, worker_id, where[0])
            _send(fd, epoch, n, data, worker_id, where[0])
    except (BrokenPipeError, EOFError, OSError):
        return  # the main process stopped reading: nobody is left to serve


def _next_samples(it, count, collate, auto, drop_last, where):
    where[0] = "fetching the next sample of the IterableDataset"
    samples = []
    for _ in range(count):
        try:
            samples.append(next(it))
        except StopIteration:
            break
    # each worker drops its own short last batch, as in PyTorch
    if not samples or (auto and drop_last and len(samples) < count):
        return StopIteration()
    where[0] = "collating samples of the IterableDataset"
    return collate(samples) if auto else samples[0]


# ---------------------------------------------------------------------------- pool
class _WorkerPool:
    """The worker processes of one DataLoader (kept across epochs with persistent_workers)."""

    def __init__(self, loader, base_seed):
        ctx = loader.multiprocessing_context or ("fork" if "fork" in _start_methods() else "spawn")
        if isinstance(ctx, str):
            import multiprocessing as mp

            ctx = mp.get_context(ctx)
        self.task_qs, self.workers, self.readers = [], [], []
        self.epoch = 0
        self.owner = os.getpid()
        parent = os.getpid()
        try:
            for w in range(loader.num_workers):
                tq = ctx.Queue()
                r, wconn = ctx.Pipe(duplex=False)
                p = ctx.Process(target=_worker_loop,
                                args=(loader.dataset, tq, wconn, loader.collate_fn, w, loader.num_workers,
                                      base_seed + w, loader.worker_init_fn, loader._iterable, loader._auto,
                                      loader.drop_last, parent),
                                daemon=True)
                p.start()
                wconn.close()  # the worker holds the only write end: its death gives EOF
                self.task_qs.append(tq)
                self.workers.append(p)
                self.readers.append((r, _FrameReader(r.fileno())))
        except BaseException:
            self.shutdown()
            raise
        self.alive = True

    def put(self, w, task):
        self.task_qs[w].put(task)

    def wait(self, timeout):
        """Frames ready within ``timeout`` seconds: a list of ``(worker, frame)``.

        Raises RuntimeError when a worker has died without reporting an error."""
        fds = [r.fileno() for r, _ in self.readers]
        sentinels = [p.sentinel for p in self.workers]
        # (connection.wait polls: unlike select, it works for descriptors above FD_SETSIZE)
        ready = set(_wait_for(fds + sentinels, timeout=max(timeout, 0.0)))
        out = []
        for w, (_, reader) in enumerate(self.readers):
            if fds[w] in ready or sentinels[w] in ready:
                out.extend((w, f) for f in reader.read())
        if not out:
            for w, p in enumerate(self.workers):
                # (its pipe was read to the end above: nothing it sent before dying is lost)
                if sentinels[w] in ready and not p.is_alive():
                    raise RuntimeError(_death_message(p, self.readers[w][1].partial))
        return out

    def shutdown(self, grace=0.5):
        """Stop the workers: ask, wait ``grace`` seconds, then terminate."""
        if os.getpid() != self.owner:
            # a forked child (a worker of another loader) that inherited this pool and collects
            # it: the processes and queues are the parent's, and a stop sent from here would
            # reach them
            return
        self.alive = False
        for tq in self.task_qs:
            try:
                tq.put(None)
            except (OSError, ValueError):
                pass
        deadline = time.monotonic() + grace
        for p in self.workers:
            p.join(max(0.0, deadline - time.monotonic()))
        for r, _ in self.readers:
            r.close()  # a worker blocked on a full pipe gets EPIPE and exits
        for p in self.workers:
            if p.is_alive():
                p.terminate()
            p.join()
        for tq in self.task_qs:
            tq.close()
            tq.cancel_join_thread()
        self.readers, self.workers, self.task_qs = [], [], []


def _start_methods():
    import multiprocessing as mp

    return mp.get_all_start_methods()


def _death_message(p, partial):
    code = p.exitcode
    if code is not None and code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = "?"
        how = f"was killed by signal {-code} ({name})"
    else:
        how = f"exited unexpectedly with exit code {code}"
    tail = " while sending a batch" if partial else ""
    return f"DataLoader worker (pid {p.pid}) {how}{tail}"
