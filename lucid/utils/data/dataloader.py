"""DataLoader: batches from a dataset, in this process or in real worker processes.

NOTE [Worker processes]
With ``num_workers > 0`` each worker process receives (batch number, indices) tasks
on its own queue and answers on one shared result queue; the main process hands out
tasks round-robin, keeps ``prefetch_factor`` batches in flight per worker and yields
results in order. A worker that raises sends the exception's type, message, traceback
and the indices it was fetching; the main process re-raises it with all of that.
"""
from __future__ import annotations

import multiprocessing as mp
import queue
import random as _pyrandom
import time
import traceback
from dataclasses import dataclass

import numpy as np

from ..._core.tensor import Tensor, _wrap
from .dataset import IterableDataset, _rng
from .sampler import BatchSampler, RandomSampler, SequentialSampler


def default_collate(batch):
    """Stack a list of samples into a batch (tensors, arrays, numbers, tuples, dicts).

    Parameters
    ----------
    batch : list
        Samples of the same structure.

    Returns
    -------
    The batch, with tensors/arrays/numbers stacked along a new dim 0.

    Examples
    --------
    >>> from lucid.utils.data import default_collate
    >>> default_collate([(1, 2.0), (3, 4.0)])
    [tensor([1, 3]), tensor([2., 4.], dtype=lucid.float64)]
    """
    from ...ops.shape import stack

    first = batch[0]
    if isinstance(first, Tensor):
        return stack(batch, 0)
    if isinstance(first, (np.ndarray, np.generic)) and not isinstance(first, (np.str_, np.bytes_)):
        return _wrap(np.stack(batch))
    if isinstance(first, (bool, np.bool_)):
        return _wrap(np.array(batch, dtype=bool))
    if isinstance(first, (int, np.integer)):
        return _wrap(np.array(batch, dtype=np.int64))
    if isinstance(first, (float, np.floating)):
        return _wrap(np.array(batch, dtype=np.float64))
    if isinstance(first, (str, bytes)):
        return list(batch)
    if isinstance(first, dict):
        return {k: default_collate([b[k] for b in batch]) for k in first}
    if isinstance(first, tuple) and hasattr(first, "_fields"):
        return type(first)(*(default_collate(list(s)) for s in zip(*batch)))
    if isinstance(first, (tuple, list)):
        if any(len(b) != len(first) for b in batch):
            raise RuntimeError("default_collate: each element in list of batch should be of equal size")
        return [default_collate(list(s)) for s in zip(*batch)]
    raise TypeError(f"default_collate: batch must contain tensors, arrays, numbers, dicts or lists; found {type(first).__name__}")


def default_convert(data):
    """Without automatic batching: NumPy arrays and scalars become Tensors, containers are
    converted element by element, everything else is returned as is.

    Parameters
    ----------
    data : object
        A sample.

    Examples
    --------
    >>> import numpy as np
    >>> from lucid.utils.data import default_convert
    >>> default_convert(np.array([1.0, 2.0]))
    tensor([1., 2.], dtype=lucid.float64)
    """
    if isinstance(data, (np.ndarray, np.generic)) and not isinstance(data, (np.str_, np.bytes_)):
        return _wrap(np.asarray(data))
    if isinstance(data, dict):
        return {k: default_convert(v) for k, v in data.items()}
    if isinstance(data, tuple) and hasattr(data, "_fields"):
        return type(data)(*(default_convert(v) for v in data))
    if isinstance(data, (tuple, list)):
        return type(data)(default_convert(v) for v in data)
    return data


@dataclass
class WorkerInfo:
    """What ``get_worker_info()`` returns inside a worker process.

    Parameters
    ----------
    id : int
        This worker's index.
    num_workers : int
        How many workers there are.
    seed : int
        This worker's random seed.
    dataset : Dataset
        This worker's copy of the dataset.

    Examples
    --------
    >>> from lucid.utils.data import get_worker_info
    >>> print(get_worker_info())
    None
    """

    id: int
    num_workers: int
    seed: int
    dataset: object


_worker_info = None


def get_worker_info():
    """Inside a DataLoader worker: its ``WorkerInfo``; in the main process: ``None``.

    Returns
    -------
    WorkerInfo or None

    Examples
    --------
    >>> from lucid.utils.data import get_worker_info
    >>> get_worker_info() is None
    True
    """
    return _worker_info


class _WorkerError:
    def __init__(self, exc, worker_id, where):
        self.exc_type = type(exc)
        self.msg = str(exc)
        self.tb = traceback.format_exc()
        self.worker_id, self.where = worker_id, where

    def reraise(self):
        text = (f"Caught {self.exc_type.__name__} in DataLoader worker process {self.worker_id} "
                f"while fetching {self.where}.\nOriginal Traceback (most recent call last):\n{self.tb}")
        try:
            err = self.exc_type(text)
        except Exception:
            err = RuntimeError(text)
        raise err


def _seed_worker(seed):
    """Seed every source of randomness in a worker: lucid's default generator, NumPy's
    global one and Python's ``random`` (as PyTorch seeds torch and ``random``)."""
    from ...ops.random import manual_seed

    manual_seed(seed)
    np.random.seed(seed % (2 ** 32))
    _pyrandom.seed(seed)


def _fetch(dataset, indices, collate, auto, where):
    """One batch; on failure the error names the index that failed. See NOTE [Worker processes]."""
    if not auto:
        where[0] = f"index {indices!r}"
        return collate(dataset[indices])
    samples = []
    for i in indices:
        where[0] = f"index {i!r} (batch indices {list(indices)})"
        samples.append(dataset[i])
    where[0] = f"the batch with indices {list(indices)} (in collate_fn)"
    return collate(samples)


def _worker_loop(dataset, task_q, result_q, collate, worker_id, num_workers, seed, init_fn, iterable, auto):
    global _worker_info
    _worker_info = WorkerInfo(worker_id, num_workers, seed, dataset)
    _seed_worker(seed)
    if init_fn is not None:
        init_fn(worker_id)
    it = iter(dataset) if iterable else None
    while True:
        task = task_q.get()
        if task is None:
            return
        n, indices = task
        where = [f"index {indices!r}"]
        try:
            if iterable:
                where[0] = "the next sample of the IterableDataset"
                samples = []
                for _ in range(indices):
                    try:
                        samples.append(next(it))
                    except StopIteration:
                        break
                if not samples:
                    result_q.put((n, StopIteration()))
                    continue
                data = collate(samples) if auto else samples[0]
            else:
                data = _fetch(dataset, indices, collate, auto, where)
            result_q.put((n, data))
        except Exception as e:  # reported to the main process, see NOTE [Worker processes]
            result_q.put((n, _WorkerError(e, worker_id, where[0])))


class DataLoader:
    """Iterate over ``dataset`` in batches.

    Parameters
    ----------
    dataset : Dataset or IterableDataset
    batch_size : int or None
        ``None`` disables automatic batching (samples are returned as they are).
    shuffle, drop_last : bool
    sampler, batch_sampler : Sampler, optional
    num_workers : int
        Worker processes (0: load in this process).
    collate_fn : callable, optional
    pin_memory : bool
        Accepted for PyTorch compatibility (no effect on the CPU).
    generator : lucid.Generator, optional
        Source of randomness for shuffling.

    Examples
    --------
    >>> import lucid
    >>> from lucid.utils.data import DataLoader, TensorDataset
    >>> dl = DataLoader(TensorDataset(lucid.arange(5)), batch_size=2)
    >>> [b[0].tolist() for b in dl]
    [[0, 1], [2, 3], [4]]
    """

    def __init__(self, dataset, batch_size=1, shuffle=None, sampler=None, batch_sampler=None,
                 num_workers=0, collate_fn=None, pin_memory=False, drop_last=False, timeout=0,
                 worker_init_fn=None, multiprocessing_context=None, generator=None, *,
                 prefetch_factor=None, persistent_workers=False, pin_memory_device=""):
        if num_workers < 0:
            raise ValueError("DataLoader: num_workers option should be non-negative")
        self.dataset = dataset
        self.num_workers = num_workers
        self.pin_memory = pin_memory
        self.timeout = timeout
        self.worker_init_fn = worker_init_fn
        self.multiprocessing_context = multiprocessing_context
        self.generator = generator
        self.prefetch_factor = 2 if prefetch_factor is None else prefetch_factor
        self._iterable = isinstance(dataset, IterableDataset)
        if self._iterable:
            if shuffle or sampler is not None or batch_sampler is not None:
                raise ValueError("DataLoader: an IterableDataset does not support shuffle, sampler or batch_sampler")
        if batch_sampler is not None:
            if batch_size != 1 or shuffle or sampler is not None or drop_last:
                raise ValueError("DataLoader: batch_sampler option is mutually exclusive with batch_size, shuffle, sampler, and drop_last")
            batch_size, drop_last = None, False
        elif batch_size is None and drop_last:
            raise ValueError("DataLoader: batch_size=None option disables auto-batching and is mutually exclusive with drop_last")
        if sampler is not None and shuffle:
            raise ValueError("DataLoader: sampler option is mutually exclusive with shuffle")
        if sampler is None and not self._iterable:
            sampler = RandomSampler(dataset, generator=generator) if shuffle else SequentialSampler(dataset)
        if batch_size is not None and batch_sampler is None and not self._iterable:
            batch_sampler = BatchSampler(sampler, batch_size, drop_last)
        self.batch_size, self.drop_last = batch_size, drop_last
        self.sampler, self.batch_sampler = sampler, batch_sampler
        self._auto = batch_sampler is not None or (self._iterable and batch_size is not None)
        self.collate_fn = collate_fn or (default_collate if self._auto else default_convert)

    def __len__(self):
        if self._iterable:
            n = len(self.dataset)
            if self.batch_size is None:
                return n
            return n // self.batch_size if self.drop_last else -(-n // self.batch_size)
        return len(self.batch_sampler) if self.batch_sampler is not None else len(self.sampler)

    def _index_stream(self):
        return iter(self.batch_sampler) if self.batch_sampler is not None else iter(self.sampler)

    def __iter__(self):
        # Like PyTorch, each epoch first draws a base seed for the workers from ``generator``
        # (or lucid's default generator), in both modes, so shuffling does not depend on
        # ``num_workers``.
        base_seed = int(_rng(self.generator, "DataLoader").integers(0, 2 ** 62))
        if self.num_workers == 0:
            return self._single_process()
        return self._multi_process(base_seed)

    def _single_process(self):
        if self._iterable:
            it = iter(self.dataset)
            if not self._auto:
                yield from it
                return
            while True:
                batch = []
                for _ in range(self.batch_size):
                    try:
                        batch.append(next(it))
                    except StopIteration:
                        break
                if not batch or (self.drop_last and len(batch) < self.batch_size):
                    return
                yield self.collate_fn(batch)
                if len(batch) < self.batch_size:
                    return
        for indices in self._index_stream():
            if self._auto:
                yield self.collate_fn([self.dataset[i] for i in indices])
            else:
                yield self.collate_fn(self.dataset[indices])

    def _multi_process(self, base_seed):
        ctx = self.multiprocessing_context or mp.get_context("fork" if "fork" in mp.get_all_start_methods() else "spawn")
        if isinstance(ctx, str):
            ctx = mp.get_context(ctx)
        result_q = ctx.Queue()
        task_qs, workers = [], []
        for w in range(self.num_workers):
            tq = ctx.Queue()
            p = ctx.Process(target=_worker_loop,
                            args=(self.dataset, tq, result_q, self.collate_fn, w, self.num_workers,
                                  base_seed + w, self.worker_init_fn, self._iterable, self._auto),
                            daemon=True)
            p.start()
            task_qs.append(tq)
            workers.append(p)
        try:
            yield from self._pump(task_qs, result_q, workers)
        finally:
            _shutdown(task_qs, result_q, workers)

    def _pump(self, task_qs, result_q, workers):
        if self._iterable:
            tasks = iter(lambda: self.batch_size or 1, None)  # endless: workers say when done
        else:
            tasks = self._index_stream()
        sent = received = 0
        rr = 0  # round-robin position over the workers (skipping exhausted ones)
        pending, done_workers = {}, set()
        owner = {}

        def send():
            nonlocal sent, rr
            if len(done_workers) == len(task_qs):
                return False
            while rr % len(task_qs) in done_workers:
                rr += 1
            try:
                t = next(tasks)
            except StopIteration:
                return False
            w = rr % len(task_qs)
            rr += 1
            owner[sent] = w
            task_qs[w].put((sent, t))
            sent += 1
            return True

        more = True
        for _ in range(self.prefetch_factor * len(task_qs)):
            more = more and send()
        while received < sent:
            if received in pending:
                data = pending.pop(received)
                received += 1
                if isinstance(data, StopIteration):
                    done_workers.add(owner[received - 1])
                else:
                    yield data
                if more:
                    more = send()
                continue
            try:
                n, data = result_q.get(timeout=self.timeout if self.timeout > 0 else 5.0)
            except queue.Empty:
                dead = [i for i, p in enumerate(workers) if not p.is_alive()]
                if dead:
                    raise RuntimeError(f"DataLoader worker (pid(s) {[workers[i].pid for i in dead]}) exited unexpectedly")
                if self.timeout > 0:
                    raise RuntimeError(f"DataLoader timed out after {self.timeout} seconds") from None
                continue
            if isinstance(data, _WorkerError):
                data.reraise()
            pending[n] = data


def _shutdown(task_qs, result_q, workers, grace=5.0):
    """Stop the workers; drain results meanwhile so none blocks on a full pipe at exit."""
    for tq in task_qs:
        tq.put(None)
    deadline = time.monotonic() + grace
    for p in workers:
        while p.is_alive() and time.monotonic() < deadline:
            try:
                while True:
                    result_q.get_nowait()
            except (queue.Empty, OSError, EOFError):
                pass
            p.join(0.02)
        if p.is_alive():
            p.terminate()
            p.join()
    for q in (*task_qs, result_q):
        q.close()
        q.cancel_join_thread()


__all__ = ["DataLoader", "default_collate", "default_convert", "get_worker_info", "WorkerInfo"]
