"""DataLoader: batches from a dataset, in this process or in real worker processes.

The worker processes, their pipes and their failure modes: see NOTE [Worker processes]
in ``_worker.py``.
"""
from __future__ import annotations

import collections.abc
import copy
import functools
import os
import sys
import time
import warnings
import weakref
from dataclasses import dataclass

import numpy as np

from ..._core.tensor import Tensor, _wrap
from .dataset import Dataset, IterableDataset, _rng
from ._worker import _WorkerError, _WorkerPool, _start_methods
from .sampler import BatchSampler, RandomSampler, Sampler, SequentialSampler


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


@dataclass(frozen=True)
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
    rng : object, optional
        Always ``None`` (PyTorch's slot for a per-worker RNG state).
    worker_method : str
        ``"multiprocessing"``: workers are processes.

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
    rng: object = None
    worker_method: str = "multiprocessing"


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
        Seconds to wait for a batch from the workers before raising (0: forever; anything else
        needs ``num_workers > 0``). A worker that dies is reported within about a second either way.
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
    in_order : bool
        ``False`` lets workers' batches come out as soon as they are ready, so one slow batch
        does not hold back the others (the order is then not reproducible).

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
                 prefetch_factor=None, persistent_workers=False, pin_memory_device="", in_order=True):
        if isinstance(num_workers, bool) or not isinstance(num_workers, int) or num_workers < 0:
            raise ValueError(f"DataLoader: num_workers option should be a non-negative integer, got {num_workers!r}")
        if not isinstance(timeout, (int, float)) or timeout < 0:
            raise ValueError(f"DataLoader: timeout option should be non-negative, got {timeout!r}")
        if num_workers == 0 and prefetch_factor is not None:
            raise ValueError("DataLoader: prefetch_factor option could only be specified in multiprocessing. "
                             "Let num_workers > 0 to enable multiprocessing, otherwise set prefetch_factor to None.")
        if prefetch_factor is not None and (not isinstance(prefetch_factor, int) or prefetch_factor < 1):
            raise _OptionError(f"DataLoader: prefetch_factor should be a positive integer, got {prefetch_factor!r}")
        if persistent_workers and num_workers == 0:
            raise ValueError("DataLoader: persistent_workers option needs num_workers > 0")
        if _is_iter_datapipe(dataset):
            # See NOTE [DataPipes in a DataLoader]: ``shuffle`` switches the pipe's shufflers
            from .graph_settings import apply_shuffle_settings

            dataset, shuffle = apply_shuffle_settings(dataset, shuffle=shuffle), None
        self.dataset = dataset
        self.num_workers = num_workers
        self.in_order = in_order
        self.pin_memory = pin_memory
        self.pin_memory_device = pin_memory_device
        self.timeout = timeout
        self.persistent_workers = bool(persistent_workers)
        self._pool = None
        self.worker_init_fn = worker_init_fn
        self.multiprocessing_context = multiprocessing_context
        self.generator = generator
        self.prefetch_factor = 2 if prefetch_factor is None and num_workers > 0 else prefetch_factor
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
        if sampler is None:
            if self._iterable:
                sampler = _InfiniteConstantSampler()  # (a stream has no indices: only the batch size counts)
            else:
                sampler = RandomSampler(dataset, generator=generator) if shuffle else SequentialSampler(dataset)
        if batch_size is not None and batch_sampler is None:
            batch_sampler = BatchSampler(sampler, batch_size, drop_last)
        self.batch_size, self.drop_last = batch_size, drop_last
        self.sampler, self.batch_sampler = sampler, batch_sampler
        self._auto = batch_sampler is not None
        self.collate_fn = collate_fn or (default_collate if self._auto else default_convert)
        self._IterableDataset_len_called = None  # see _BaseDataLoaderIter.__next__
        self._initialized = True
        _check_worker_number(num_workers)

    # PyTorch refuses these once the loader is built: the samplers were derived from them
    _FROZEN = frozenset(("batch_size", "batch_sampler", "sampler", "drop_last", "dataset", "persistent_workers"))

    def __setattr__(self, name, value):
        if name in DataLoader._FROZEN and self.__dict__.get("_initialized"):
            raise ValueError(f"DataLoader: {name} attribute should not be set after DataLoader is initialized")
        object.__setattr__(self, name, value)

    @property
    def multiprocessing_context(self):
        """The ``multiprocessing`` context the workers start from (``None``: fork where available)."""
        return self._mp_context

    @multiprocessing_context.setter
    def multiprocessing_context(self, ctx):
        if ctx is not None:
            if self.num_workers == 0:
                raise ValueError(f"DataLoader: multiprocessing_context can only be used with multi-process "
                                 f"loading (num_workers > 0), but got num_workers={self.num_workers}")
            if isinstance(ctx, str):
                import multiprocessing as mp

                if ctx not in _start_methods():
                    raise ValueError(f"DataLoader: multiprocessing_context option should specify a valid start "
                                     f"method in {_start_methods()!r}, but got multiprocessing_context={ctx!r}")
                ctx = mp.get_context(ctx)
            if not isinstance(ctx, _base_context()):
                raise TypeError(f"DataLoader: multiprocessing_context option should be a valid context object or "
                                f"a string specifying the start method, but got multiprocessing_context={ctx!r}")
        self._mp_context = ctx

    @property
    def _index_sampler(self):
        return self.batch_sampler if self._auto else self.sampler

    def __len__(self):
        if self._iterable:
            # remembered, as in PyTorch, to warn when the stream turns out to be longer
            n = self._IterableDataset_len_called = len(self.dataset)
            if self.batch_size is None:
                return n
            return n // self.batch_size if self.drop_last else -(-n // self.batch_size)
        return len(self._index_sampler)

    def _index_stream(self):
        return iter(self._index_sampler)

    def __iter__(self):
        # Like PyTorch, each epoch first draws a base seed for the workers from ``generator``
        # (or lucid's default generator), in both modes, so shuffling does not depend on
        # ``num_workers``.
        base_seed = int(_rng(self.generator, "DataLoader").integers(0, 2 ** 62))
        if self.num_workers == 0:
            if self.timeout != 0:  # (refused when iterating, as PyTorch does: nothing would time out)
                raise _OptionError(f"DataLoader: timeout={self.timeout!r} needs num_workers > 0 "
                                  f"(single-process loading requires timeout == 0)")
            if _is_iter_datapipe(self.dataset):
                _seed_datapipe(self.dataset, self._datapipe_seed())
            return _SingleProcessDataLoaderIter(self, self._single_process())
        _check_worker_number(self.num_workers)
        batches = self._multi_process(base_seed)
        if not self.persistent_workers:
            return _MultiProcessingDataLoaderIter(self, batches)
        # As in PyTorch, persistent workers serve one iterator, which a new ``iter()`` restarts:
        # two live epochs on one pool would wait for each other's (dropped) results.
        it = self.__dict__.get("_iterator")
        if it is None:
            it = self._iterator = _MultiProcessingDataLoaderIter(self, batches)
        else:
            it._restart(batches)
        return it

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
        fetch = _getitems(self.dataset)
        for indices in self._index_stream():
            # (a StopIteration raised by the dataset ends the epoch quietly, as in PyTorch)
            try:
                samples = fetch(indices) if self._auto else self.dataset[indices]
            except StopIteration:
                return
            yield self.collate_fn(samples)

    def _multi_process(self, base_seed):
        pool = self._pool
        if pool is None or not pool.alive:
            pool = _WorkerPool(_DataPipeWorkerView(self) if _is_datapipe(self.dataset) else self, base_seed)
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

    def _datapipe_seed(self):
        """This epoch's seed for the random pipes of an IterDataPipe (NOTE [DataPipes in a DataLoader])."""
        return int(_rng(self.generator, "DataLoader").integers(0, 2 ** 63))

    def _pump(self, pool):
        """Hand out tasks, collect frames, yield batches (in order unless ``in_order=False``).
        See NOTE [Worker processes]."""
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
            n = received if self.in_order else next(iter(pending), None)
            if n in pending:
                data = pending.pop(n)
                received += 1
                if isinstance(data, _WorkerError):  # raised in its turn: the batches before it come out
                    if issubclass(data.exc_type, StopIteration) and not self._iterable:
                        return  # ends the epoch quietly, as in PyTorch (and in this process)
                    data.reraise()
                if isinstance(data, StopIteration):
                    done_workers.add(owner[n])
                else:
                    yield data
                more = more and send()
                continue
            for _, (e, k, data) in self._wait(pool):
                if isinstance(data, _WorkerError) and k < 0:  # worker_init_fn failed: no batch will come
                    data.reraise()
                if e == epoch:
                    pending[k] = data

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


class _BaseDataLoaderIter:
    """One epoch of a DataLoader: ``next`` gives the next batch, ``len`` the number of batches.

    It wraps the generator that loads the batches; dropping or exhausting it shuts down the
    epoch's workers (unless they are persistent)."""

    def __init__(self, loader, batches):
        self._loader, self._batches = loader, batches
        self._iterable_len = loader._IterableDataset_len_called if loader._iterable else None
        self._num_yielded = 0
        self._pin = loader.pin_memory and _pinning_possible()

    def __iter__(self):
        return self

    def _restart(self, batches):
        self._batches.close()  # (a persistent pool survives this: see DataLoader._multi_process)
        self._batches, self._num_yielded = batches, 0
        self._iterable_len = self._loader._IterableDataset_len_called if self._loader._iterable else None

    def __next__(self):
        data = next(self._batches)
        self._num_yielded += 1
        if self._iterable_len is not None and self._num_yielded > self._iterable_len:
            self._warn_too_long()
        return _pinned(data) if self._pin else data

    def _warn_too_long(self):
        # (PyTorch compares batches yielded with the dataset's length in samples: so do we)
        msg = (f"DataLoader: length of IterableDataset {self._loader.dataset} was reported to be "
               f"{self._iterable_len} (when accessing len(dataloader)), but {self._num_yielded} samples have "
               f"been fetched. ")
        if self._loader.num_workers > 0:
            msg += ("For multiprocessing data-loading, this could be caused by not properly configuring the "
                    "IterableDataset replica at each worker (see get_worker_info).")
        warnings.warn(msg, stacklevel=3)

    def __len__(self):
        return len(self._loader._index_sampler)

    def close(self):
        """End the epoch now: its workers stop (unless persistent) without finishing their batches."""
        self._batches.close()

    def __getstate__(self):
        raise NotImplementedError(f"{type(self).__name__} cannot be pickled")


class _SingleProcessDataLoaderIter(_BaseDataLoaderIter):
    pass


class _MultiProcessingDataLoaderIter(_BaseDataLoaderIter):
    pass


class _OptionError(ValueError, AssertionError):
    """An option PyTorch refuses with an assertion when iterating; a ValueError is what a bad
    option gives everywhere else."""


class _DatasetKind:
    Map = 0
    Iterable = 1


class _InfiniteConstantSampler(Sampler):
    """``None`` forever: the sampler of a loader over an IterableDataset (which has no indices)."""

    def __iter__(self):
        while True:
            yield None


# NOTE [DataPipes in a DataLoader]
# As in PyTorch: an IterDataPipe is an IterableDataset whose shufflers ``shuffle=`` switches on
# or off (``apply_shuffle_settings``, once, when the loader is built). Each epoch one seed is
# drawn from ``generator`` (or lucid's default generator) and seeds every random pipe
# (``apply_random_seed``) — in this process with ``num_workers=0``, else identically in every
# worker, where ``apply_sharding(num_workers * world_size, worker_id * world_size + rank)`` then
# gives each worker its share, so each sample comes out exactly once. Worker setup runs before
# the user's ``worker_init_fn``. Persistent workers keep the pipes' later seeds in step by
# drawing them from a generator seeded with the first epoch's seed (PyTorch sends a new one).
def _is_iter_datapipe(dataset):
    dp = sys.modules.get("lucid.utils.data.datapipes.datapipe")  # (not loaded: no pipe exists)
    return dp is not None and isinstance(dataset, dp.IterDataPipe)


def _is_datapipe(dataset):
    dp = sys.modules.get("lucid.utils.data.datapipes.datapipe")
    return dp is not None and isinstance(dataset, (dp.IterDataPipe, dp.MapDataPipe))


def _seed_datapipe(datapipe, seed, keep_source=False):
    """Seed the random pipes of ``datapipe`` from a generator seeded with ``seed``."""
    from ...ops.random import Generator
    from .graph import traverse_dps
    from .graph_settings import apply_random_seed, get_all_graph_pipes

    source = Generator().manual_seed(seed)
    apply_random_seed(datapipe, source)
    if keep_source:
        for pipe in get_all_graph_pipes(traverse_dps(datapipe)):
            if hasattr(type(pipe), "_seed_source"):  # (the shufflers: see NOTE [Shuffle seeds])
                pipe._seed_source = source


def _distributed_settings():
    """``(world_size, rank)`` of an initialized ``lucid.distributed`` (not imported here), else ``(1, 0)``."""
    dist = sys.modules.get("lucid.distributed")
    if dist is not None and dist.is_initialized():
        return dist.get_world_size(), dist.get_rank()
    return 1, 0


def _datapipe_worker_init(user_init_fn, seed, world_size, rank, worker_id):
    """Worker setup for a datapipe (NOTE [DataPipes in a DataLoader]), then the user's init."""
    from .graph_settings import apply_sharding

    info = get_worker_info()
    if _is_iter_datapipe(info.dataset):
        _seed_datapipe(info.dataset, seed, keep_source=True)
    apply_sharding(info.dataset, info.num_workers * world_size, worker_id * world_size + rank)
    if user_init_fn is not None:
        user_init_fn(worker_id)


class _DataPipeWorkerView:
    """The loader as the worker pool sees it, with the datapipe worker setup as ``worker_init_fn``."""

    def __init__(self, loader):
        self._loader = loader
        world_size, rank = _distributed_settings()
        seed = loader._datapipe_seed() if _is_iter_datapipe(loader.dataset) else 0
        self.worker_init_fn = functools.partial(_datapipe_worker_init, loader.worker_init_fn, seed, world_size, rank)

    def __getattr__(self, name):
        return getattr(self._loader, name)


def _base_context():
    import multiprocessing.context

    return multiprocessing.context.BaseContext


# (``Dataset``, ``Sampler`` and the private iterator classes are importable from here too, as
# from ``torch.utils.data.dataloader``)
__all__ = ["DataLoader", "default_collate", "default_convert", "get_worker_info", "WorkerInfo"]


def _check_worker_number(num_workers):
    """PyTorch's warning when more workers are asked for than this process may use CPUs."""
    if num_workers == 0:
        return
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:
        cpus = os.cpu_count()
    if cpus is not None and num_workers > cpus:
        warnings.warn(f"DataLoader: this DataLoader will create {num_workers} worker processes in total. Our "
                      f"suggested max number of worker in current system is {cpus}, which is smaller than what "
                      f"this DataLoader is going to create. Please be aware that excessive worker creation might "
                      f"get DataLoader running slow or even freeze, lower the worker number to avoid potential "
                      f"slowness/freeze if necessary.", stacklevel=3)


def _getitems(dataset):
    """How a batch of samples is read: the dataset's ``__getitems__`` (one call per batch) if
    it has one, as PyTorch's fetcher does, else one ``dataset[i]`` per index."""
    many = getattr(dataset, "__getitems__", None)
    if many:
        return many
    return lambda indices: [dataset[i] for i in indices]


def _pinning_possible():
    import lucid.cuda

    if lucid.cuda.is_available():
        return True
    warnings.warn("DataLoader: 'pin_memory' argument is set as true but no accelerator is found, "
                  "then device pinned memory won't be used.", stacklevel=4)
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

