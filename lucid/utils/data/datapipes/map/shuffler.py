"""Shuffler (``shuffle`` on a MapDataPipe): an IterDataPipe over a MapDataPipe in random order."""
from __future__ import annotations

import random


from ..datapipe import IterDataPipe, MapDataPipe
from ..iter.combinatorics import _SeededShuffle


class ShufflerIterDataPipe(_SeededShuffle, IterDataPipe):
    """The items of a MapDataPipe (or those at ``indices``) in a random order, a new one each
    iteration; seeded as in NOTE [Shuffle seeds].

    Examples
    --------
    >>> from lucid.utils.data.datapipes.map import SequenceWrapper
    >>> sorted(SequenceWrapper("abc").shuffle())
    ['a', 'b', 'c']
    """

    def __init__(self, datapipe, *, indices=None):
        self.datapipe = datapipe
        self.indices = list(range(len(datapipe))) if indices is None else indices
        self._enabled = True
        self._seed = None
        self._rng = random.Random()
        self._shuffled_indices = self.indices

    def __iter__(self):
        if not self._enabled:
            for idx in self.indices:
                yield self.datapipe[idx]
            return
        while self._shuffled_indices:
            yield self.datapipe[self._shuffled_indices.pop()]

    def reset(self):
        if self._enabled and self._seed is None:
            from ..iter.combinatorics import _fresh_seed
            self._seed = _fresh_seed(self._seed_source)
        self._rng.seed(self._seed)
        self._seed = None
        self._shuffled_indices = self._rng.sample(self.indices, len(self.indices))

    def __len__(self):
        return len(self.datapipe)


MapDataPipe.register_datapipe_as_function("shuffle", ShufflerIterDataPipe)
Shuffler = ShufflerIterDataPipe

