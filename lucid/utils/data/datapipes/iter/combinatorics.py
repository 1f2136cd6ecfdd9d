"""Sampler (``SamplerIterDataPipe``), Shuffler (``shuffle``) and InBatchShuffler (``in_batch_shuffle``).

# NOTE [Shuffle seeds]
A shuffling pipe owns a Python ``random.Random``. At each new iterator (``reset``) it is seeded
with the seed given by ``set_seed`` (used once), or else with a fresh draw from lucid's default
generator — so ``lucid.manual_seed(s)`` makes the order reproducible, and a DataLoader (through
``graph_settings.apply_random_seed``) gives every worker the same seed, so that the workers
shuffle alike before ``sharding_filter`` splits the stream. The draw and the buffer algorithm
follow PyTorch's, so a given ``set_seed`` gives PyTorch's order.
"""
from __future__ import annotations

import random

from ...sampler import SequentialSampler
from .._decorator import functional_datapipe
from ..datapipe import DataChunk, IterDataPipe
from .utils import _length_of


def _fresh_seed(source=None):
    """A seed drawn from ``source`` (a lucid Generator), by default lucid's default generator
    (what ``lucid.manual_seed`` controls)."""
    from ...dataset import _rng

    return int(_rng(source, "shuffle").integers(0, 2 ** 63))


class SamplerIterDataPipe(IterDataPipe):
    """Yield what ``sampler(data_source=datapipe, ...)`` yields (indices for the built-in samplers).

    Examples
    --------
    >>> from lucid.utils.data.datapipes.iter import IterableWrapper, Sampler
    >>> list(Sampler(IterableWrapper(["a", "b", "c"])))
    [0, 1, 2]
    """

    def __init__(self, datapipe, sampler=SequentialSampler, sampler_args=None, sampler_kwargs=None):
        if not hasattr(datapipe, "__len__"):
            raise AssertionError("Sampler class requires input datapipe implemented `__len__`")
        self.datapipe = datapipe
        self.sampler_args = () if sampler_args is None else sampler_args
        self.sampler_kwargs = {} if sampler_kwargs is None else sampler_kwargs
        self.sampler = sampler(*self.sampler_args, data_source=self.datapipe, **self.sampler_kwargs)

    def __iter__(self):
        return iter(self.sampler)

    def __len__(self):
        return _length_of(self, self.sampler)


class _SeededShuffle:
    """``set_shuffle``/``set_seed`` and the per-iteration reseeding of NOTE [Shuffle seeds]."""

    _seed_source = None  # a Generator a DataLoader worker draws later epochs' seeds from

    def set_shuffle(self, shuffle=True):
        self._enabled = shuffle
        return self

    def set_seed(self, seed):
        self._seed = seed
        return self

    def _reseed(self):
        if self._enabled:
            if self._seed is None:
                self._seed = _fresh_seed(self._seed_source)
            self._rng.seed(self._seed)
            self._seed = None


@functional_datapipe("shuffle")
class ShufflerIterDataPipe(_SeededShuffle, IterDataPipe):
    """Shuffle through a buffer of ``buffer_size`` elements (functional name: ``shuffle``).

    With a buffer at least as long as the stream this is a uniform permutation. A DataLoader
    turns it off with ``shuffle=False``. See NOTE [Shuffle seeds].

    Parameters
    ----------
    datapipe : IterDataPipe
    buffer_size : int
    unbatch_level : int
        Unbatch this many levels first.

    Examples
    --------
    >>> from lucid.utils.data.datapipes.iter import IterableWrapper
    >>> sorted(IterableWrapper(range(5)).shuffle().set_seed(0))
    [0, 1, 2, 3, 4]
    """

    def __init__(self, datapipe, *, buffer_size=10000, unbatch_level=0):
        if buffer_size <= 0:
            raise AssertionError("buffer_size should be larger than 0")
        self.datapipe = datapipe if unbatch_level == 0 else datapipe.unbatch(unbatch_level=unbatch_level)
        self.buffer_size = buffer_size
        self._buffer = []
        self._enabled = True
        self._seed = None
        self._rng = random.Random()

    def __iter__(self):
        if not self._enabled:
            yield from self.datapipe
            return
        for x in self.datapipe:
            if len(self._buffer) == self.buffer_size:
                idx = self._rng.randint(0, len(self._buffer) - 1)
                value, self._buffer[idx] = self._buffer[idx], x
                yield value
            else:
                self._buffer.append(x)
        while self._buffer:
            idx = self._rng.randint(0, len(self._buffer) - 1)
            yield self._buffer.pop(idx)

    def __len__(self):
        return _length_of(self, self.datapipe)

    def reset(self):
        self._buffer = []
        self._reseed()

    def __getstate__(self):
        state = super().__getstate__()
        state = dict(state)
        state["_buffer"] = []  # (in-flight elements do not travel; the RNG state does)
        return state


@functional_datapipe("in_batch_shuffle")
class InBatchShufflerIterDataPipe(_SeededShuffle, IterDataPipe):
    """Shuffle the elements inside each batch (functional name: ``in_batch_shuffle``).

    Examples
    --------
    >>> from lucid.utils.data.datapipes.iter import IterableWrapper
    >>> [sorted(b) for b in IterableWrapper(range(6)).batch(3).in_batch_shuffle()]
    [[0, 1, 2], [3, 4, 5]]
    """

    def __init__(self, datapipe):
        self.datapipe = datapipe
        self._enabled = True
        self._seed = None
        self._rng = random.Random()

    def __iter__(self):
        for batch in self.datapipe:
            if not self._enabled:
                yield batch
                continue
            new_batch = self._rng.sample(list(batch), len(batch))
            yield DataChunk(new_batch) if isinstance(batch, DataChunk) else new_batch

    def __len__(self):
        return _length_of(self, self.datapipe)

    def reset(self):
        self._reseed()


Sampler = SamplerIterDataPipe
Shuffler = ShufflerIterDataPipe
InBatchShuffler = InBatchShufflerIterDataPipe
