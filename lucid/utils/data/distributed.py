"""``DistributedSampler``: each rank of a data-parallel job visits its own share of a dataset."""
from __future__ import annotations

import math

from .sampler import Sampler


class _TypeValueError(TypeError, ValueError):
    """A rank that is no int: PyTorch fails with a TypeError, Lucid raised ValueError before."""


class DistributedSampler(Sampler):
    """Indices of ``dataset`` for one rank out of ``num_replicas``, as PyTorch partitions them.

    The (optionally shuffled) index list is padded by repeating its start until it divides
    evenly (or, with ``drop_last``, cut to a multiple of ``num_replicas``); rank ``r`` takes
    every ``num_replicas``-th index from position ``r``. The shuffle is a permutation drawn
    from a ``lucid.Generator`` seeded with ``seed + epoch``, so every rank draws the same one;
    call :meth:`set_epoch` at the start of each epoch to reshuffle.

    Parameters
    ----------
    dataset : Dataset
        Anything with ``len()``.
    num_replicas : int, optional
        Default: ``lucid.distributed.get_world_size()``.
    rank : int, optional
        Default: ``lucid.distributed.get_rank()``.
    shuffle : bool
    seed : int
        The same on every rank.
    drop_last : bool
        Drop the tail instead of padding.

    Examples
    --------
    >>> from lucid.utils.data.distributed import DistributedSampler
    >>> list(DistributedSampler(range(5), num_replicas=2, rank=1, shuffle=False))
    [1, 3, 0]
    """

    def __init__(self, dataset, num_replicas=None, rank=None, shuffle=True, seed=0, drop_last=False):
        if num_replicas is None or rank is None:
            from ... import distributed as dist

            num_replicas = dist.get_world_size() if num_replicas is None else num_replicas
            rank = dist.get_rank() if rank is None else rank
        for name, v in (("num_replicas", num_replicas), ("rank", rank)):
            if isinstance(v, bool) or not isinstance(v, int):
                raise _TypeValueError(f"DistributedSampler: {name} must be an int, got {v!r}")
        if num_replicas < 1:
            raise ValueError(f"DistributedSampler: num_replicas must be a positive int, got {num_replicas!r}")
        if not 0 <= rank < num_replicas:
            raise ValueError(f"DistributedSampler: invalid rank {rank}, rank should be in the interval "
                             f"[0, {num_replicas - 1}]")
        self.dataset, self.num_replicas, self.rank = dataset, num_replicas, rank
        self.shuffle, self.seed, self.drop_last, self.epoch = shuffle, seed, drop_last, 0
        n = len(dataset)
        if drop_last and n % num_replicas != 0:
            self.num_samples = math.ceil((n - num_replicas) / num_replicas)
        else:
            self.num_samples = math.ceil(n / num_replicas)
        self.total_size = self.num_samples * num_replicas

    def __iter__(self):
        n = len(self.dataset)
        if self.shuffle:
            from ...ops.random import Generator, randperm

            indices = randperm(n, generator=Generator().manual_seed(self.seed + self.epoch)).tolist()
        else:
            indices = list(range(n))
        if not self.drop_last:
            pad = self.total_size - len(indices)
            if pad <= len(indices):
                indices += indices[:pad]
            else:
                indices += (indices * math.ceil(pad / len(indices)))[:pad]
        else:
            indices = indices[:self.total_size]
        return iter(indices[self.rank:self.total_size:self.num_replicas])

    def __len__(self):
        return self.num_samples

    def set_epoch(self, epoch):
        """Use ``seed + epoch`` for the next shuffle (call it with the same value on every rank)."""
        self.epoch = epoch


__all__ = ["DistributedSampler"]
