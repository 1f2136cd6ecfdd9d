"""DataLoader: batches from a dataset, in this process or in real worker processes.

The worker processes, their pipes and their failure modes: see NOTE [Worker processes]
in ``_worker.py``.
"""
from __future__ import annotations

import collections.abc
import copy
import time
import warnings
import weakref
from dataclasses import dataclass

import numpy as np

from ..._core.tensor import Tensor, _wrap
from .dataset import IterableDataset, _rng
from ._worker import _WorkerError, _WorkerPool
from .sampler import BatchSampler, RandomSampler, SequentialSampler


def default_collate(batch):
    """Stack a list of samples into a batch (tensors, arrays, numbers, tuples, dicts), as
    PyTorch's ``default_collate``.

    Tensors, NumPy arrays and NumPy scalars are stacked along a new dim 0 (keeping their
    dtype); Python floats give float64, other Python numbers the dtype ``lucid.tensor`` infers
    for the whole list (``[1, 2.5]`` -> float32, ``[True, 2]`` -> int64); strings stay a list
    of strings. Mappings keep their type (``OrderedDict``), namedtuples too; any other
    sequence of samples (tuples included) becomes a list with one batch per position.

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
    >>> default_collate([("a", 1), ("b", 2.5)])
    [['a', 'b'], tensor([1. , 2.5])]
    """
    from ..._core.dtypes import float64
    from ...ops.creation import tensor
    from ...ops.shape import stack

    elem = batch[0]
    if isinstance(elem, Tensor):
        return stack(batch, 0)
    if isinstance(elem, np.ndarray):
        if _is_text_or_object(elem.dtype):
            raise TypeError(f"default_collate: batch must contain tensors, numpy arrays, numbers, dicts or lists; "
                            f"found an array of dtype {elem.dtype}")
        return stack([_wrap(np.asarray(b)) for b in batch], 0)
    if isinstance(elem, (np.bool_, np.number)):
        return _wrap(np.stack(batch))  # NumPy scalars keep their dtype (np.int8 stays int8)
    # (numbers are batched on the host, as arrays are: a batch is moved to a device by its user)
    if isinstance(elem, float):
        return tensor(batch, dtype=float64, device="cpu")
    if isinstance(elem, int):  # bool too; the list decides the dtype, as torch.tensor(batch)
        return tensor(batch, device="cpu")
    if isinstance(elem, (str, bytes)):
        return list(batch)  # (a list also where PyTorch hands out the zip's tuple)
    if isinstance(elem, collections.abc.Mapping):
        return _same_mapping(elem, {k: default_collate([d[k] for d in batch]) for k in elem})
    if isinstance(elem, tuple) and hasattr(elem, "_fields"):  # namedtuple
        return type(elem)(*(default_collate(list(s)) for s in zip(*batch)))
    if isinstance(elem, collections.abc.Sequence):
        if any(len(b) != len(elem) for b in batch):
            raise RuntimeError("default_collate: each element in list of batch should be of equal size")
        return _same_sequence(elem, [default_collate(list(s)) for s in zip(*batch)])
    raise TypeError(f"default_collate: batch must contain tensors, numpy arrays, numbers, dicts or lists; "
                    f"found {type(elem).__name__}")


def _is_text_or_object(dtype):
    return dtype.kind in "SaUO"  # PyTorch's np_str_obj_array_pattern


def _same_mapping(elem, values):
    """``values`` (a dict) in the type of the mapping ``elem``, as PyTorch's collate does."""
    if isinstance(elem, collections.abc.MutableMapping):
        try:
            clone = copy.copy(elem)
            clone.update(values)
            return clone
        except TypeError:
            return values
    try:
        return type(elem)(values)
    except TypeError:
        return values


def _same_sequence(elem, values):
    """``values`` (a list) in the type of the sequence ``elem``; a tuple gives a list."""
    if isinstance(elem, tuple):
        return values
    try:
        if isinstance(elem, collections.abc.MutableSequence):
            clone = copy.copy(elem)
            for i, v in enumerate(values):
                clone[i] = v
            return clone
        return type(elem)(values)
    except TypeError:
        return values


def default_convert(data):
    """Without automatic batching: NumPy arrays and scalars become Tensors, containers are
    converted element by element (a tuple becomes a list, as in PyTorch; namedtuples and
    mappings keep their type), everything else is returned as is, arrays of strings or
    objects included.

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
    >>> default_convert((1, np.int64(2)))
    [1, tensor(2)]
    """
    if isinstance(data, Tensor):
        return data
    if isinstance(data, (np.ndarray, np.generic)) and not isinstance(data, (np.str_, np.bytes_)):
        if isinstance(data, np.ndarray) and _is_text_or_object(data.dtype):
            return data
        return _wrap(np.asarray(data))
    if isinstance(data, collections.abc.Mapping):
        return _same_mapping(data, {k: default_convert(v) for k, v in data.items()})
    if isinstance(data, tuple) and hasattr(data, "_fields"):
        return type(data)(*(default_convert(v) for v in data))
    if isinstance(data, tuple):
        return [default_convert(v) for v in data]
    if isinstance(data, collections.abc.Sequence) and not isinstance(data, (str, bytes)):
        return _same_sequence(data, [default_convert(v) for v in data])
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
        Copy each batch's tensors into pinned host memory (NOTE [Pinned memory]) when a CUDA
        device is available, for faster copies to it; without one a warning says it is unused,
        as in PyTorch.
    drop_last : bool
        Drop a last, smaller batch.
    timeout : float
        Seconds to wait for a batch from the workers before raising (0: forever). A worker
        that dies is reported within about a second either way.
    worker_init_fn : callable, optional
        Called with the worker id in each worker after seeding; its errors are re-raised in
        the main process with the worker's traceback.
    multiprocessing_context : str or context, optional
        ``"fork"`` (default where available) or ``"spawn"``.
    generator : lucid.Generator, optional
        Source of randomness for shuffling and for the workers' base seed.
    prefetch_factor : int, optional
        Batches in flight per worker (default 2; only with ``num_workers > 0``).
    persistent_workers : bool
        Keep the worker processes (and their dataset copies) alive between epochs.

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
        if isinstance(num_workers, bool) or not isinstance(num_workers, int) or num_workers < 0:
            raise ValueError(f"DataLoader: num_workers option should be a non-negative integer, got {num_workers!r}")
        if not isinstance(timeout, (int, float)) or timeout < 0:
            raise ValueError(f"DataLoader: timeout option should be non-negative, got {timeout!r}")
        if num_workers == 0 and prefetch_factor is not None:
            raise ValueError("DataLoader: prefetch_factor option could only be specified in multiprocessing. "
                             "Let num_workers > 0 to enable multiprocessing, otherwise set prefetch_factor to None.")
        if prefetch_factor is not None and (not isinstance(prefetch_factor, int) or prefetch_factor < 1):
            raise ValueError(f"DataLoader: prefetch_factor should be a positive integer, got {prefetch_factor!r}")
        if persistent_workers and num_workers == 0:
            raise ValueError("DataLoader: persistent_workers option needs num_workers > 0")
        self.dataset = dataset
        self.num_workers = num_workers
        self.pin_memory = pin_memory
        self.pin_memory_device = pin_memory_device
        self.timeout = timeout
        self.persistent_workers = bool(persistent_workers)
        self._pool = None
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
        batches = self._single_process() if self.num_workers == 0 else self._multi_process(base_seed)
        if self.pin_memory and _pinning_possible():
            return map(_pinned, batches)
        return batches

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
        pool = self._pool
        if pool is None or not pool.alive:
            pool = _WorkerPool(self, base_seed)
            if self.persistent_workers:
                self._pool = pool
                self._finalizer = weakref.finalize(self, pool.shutdown)
        pool.epoch += 1
        # A persistent pool survives a finished or abandoned (``break``) epoch — stale
        # results are dropped by epoch number — but not an error.
        try:
            yield from self._pump(pool)
        except GeneratorExit:
            if not self.persistent_workers:
                pool.shutdown()
            raise
        except BaseException:
            pool.shutdown()
            raise
        if not self.persistent_workers:
            pool.shutdown()

    def _pump(self, pool):
        """Hand out tasks, collect frames, yield batches in order. See NOTE [Worker processes]."""
        nw, epoch = len(pool.workers), pool.epoch
        tasks = iter(lambda: self.batch_size or 1, None) if self._iterable else self._index_stream()
        sent = received = rr = 0
        pending, owner, done_workers = {}, {}, set()

        def send():
            nonlocal sent, rr
            if len(done_workers) == nw:
                return False
            while rr % nw in done_workers:
                rr += 1
            t = next(tasks, None)
            if t is None:
                return False
            owner[sent] = w = rr % nw
            rr += 1
            pool.put(w, (epoch, sent, t))
            sent += 1
            return True

        more = True
        for _ in range(self.prefetch_factor * nw):
            more = more and send()
        while received < sent:
            if received in pending:
                data = pending.pop(received)
                received += 1
                if isinstance(data, StopIteration):
                    done_workers.add(owner[received - 1])
                else:
                    yield data
                more = more and send()
                continue
            for _, (e, n, data) in self._wait(pool):
                if isinstance(data, _WorkerError):
                    data.reraise()
                if e == epoch:
                    pending[n] = data

    def _wait(self, pool):
        """Frames from the workers; raises after ``timeout`` seconds without one."""
        deadline = time.monotonic() + self.timeout if self.timeout > 0 else None
        while True:
            left = 1.0 if deadline is None else deadline - time.monotonic()
            if deadline is not None and left <= 0:
                raise RuntimeError(f"DataLoader timed out after {self.timeout} seconds")
            frames = pool.wait(min(left, 1.0))
            if frames:
                return frames


__all__ = ["DataLoader", "default_collate", "default_convert", "get_worker_info", "WorkerInfo"]


def _pinning_possible():
    import lucid.cuda

    if lucid.cuda.is_available():
        return True
    warnings.warn("DataLoader: 'pin_memory' argument is set as true but no accelerator is found, "
                  "then device pinned memory won't be used.", stacklevel=3)
    return False


def _pinned(batch):
    """``batch`` with every tensor in it pinned (NOTE [Pinned memory]); containers keep their type."""
    if isinstance(batch, Tensor):
        return batch.pin_memory()
    if isinstance(batch, dict):
        return type(batch)((k, _pinned(v)) for k, v in batch.items())
    if isinstance(batch, tuple) and hasattr(batch, "_fields"):  # a namedtuple
        return type(batch)(*(_pinned(v) for v in batch))
    if isinstance(batch, (list, tuple)):
        return type(batch)(_pinned(v) for v in batch)
    return batch

