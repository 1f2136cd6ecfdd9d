"""Samplers: which indices a DataLoader visits, and in which order."""
from __future__ import annotations

import numpy as np

from ..._core.backend import host
from ..._core.tensor import Tensor
from .dataset import _rng


class _ValueRuntimeError(ValueError, RuntimeError):
    """Refused weights: PyTorch's multinomial raises RuntimeError, Lucid raised ValueError before."""


class Sampler:
    """Base class: iterate over dataset indices.

    Parameters
    ----------
    data_source : Dataset, optional
        Ignored (PyTorch compatibility).

    Examples
    --------
    >>> from lucid.utils.data import Sampler
    >>> class Reverse(Sampler):
    ...     def __init__(self, n):
    ...         self.n = n
    ...     def __iter__(self):
    ...         return iter(range(self.n - 1, -1, -1))
    >>> list(Reverse(3))
    [2, 1, 0]
    """

    def __init__(self, data_source=None):
        pass

    def __iter__(self):
        raise NotImplementedError


class SequentialSampler(Sampler):
    """Indices ``0 .. len(data_source) - 1`` in order.

    Parameters
    ----------
    data_source : Dataset
        Indices ``0 .. len(data_source) - 1`` in order.

    Examples
    --------
    >>> from lucid.utils.data import SequentialSampler
    >>> list(SequentialSampler([7, 8, 9]))
    [0, 1, 2]
    """

    def __init__(self, data_source):
        self.data_source = data_source

    def __iter__(self):
        return iter(range(len(self.data_source)))

    def __len__(self):
        return len(self.data_source)


class RandomSampler(Sampler):
    """A random permutation (or ``num_samples`` draws with replacement).

    Parameters
    ----------
    data_source : Dataset
        The dataset.
    replacement : bool
        Draw with replacement.
    num_samples : int, optional
        How many indices (default: the dataset's length).
    generator : Generator, optional
        The random source.

    Examples
    --------
    >>> import lucid
    >>> from lucid.utils.data import RandomSampler
    >>> sorted(RandomSampler(range(4), generator=lucid.Generator().manual_seed(0)))
    [0, 1, 2, 3]
    """

    def __init__(self, data_source, replacement=False, num_samples=None, generator=None):
        if not isinstance(replacement, bool):
            raise TypeError(f"RandomSampler: replacement should be a boolean value, but got replacement={replacement!r}")
        self.data_source, self.replacement, self.generator = data_source, replacement, generator
        self._num_samples = num_samples
        # (an empty dataset is refused too: PyTorch's num_samples is then 0)
        if isinstance(self.num_samples, bool) or not isinstance(self.num_samples, int) or self.num_samples <= 0:
            raise ValueError("RandomSampler: num_samples should be a positive integer value, "
                             f"but got num_samples={self.num_samples!r}")

    @property
    def num_samples(self):
        return len(self.data_source) if self._num_samples is None else self._num_samples

    def __iter__(self):
        n = len(self.data_source)
        rng = _rng(self.generator)
        if self.replacement:
            return self._draws(n, rng)
        reps = -(-self.num_samples // n) if n else 0
        perm = np.concatenate([rng.permutation(n) for _ in range(reps)]) if reps else np.array([], int)
        return iter(perm[: self.num_samples].tolist())

    def _draws(self, n, rng):
        # Lazily, 32 at a time, as PyTorch: ``num_samples=int(1e10)`` (an "infinite" loader)
        # must not allocate every index up front. NumPy's ``integers`` gives the same stream
        # in chunks as in one call; with no generator a private one is seeded from the global
        # one at the start (as PyTorch), so draws made between batches do not shift it.
        if self.generator is None:
            rng = np.random.default_rng(int(rng.integers(0, 2**63)))
        for _ in range(self.num_samples // 32):
            yield from rng.integers(0, n, 32).tolist()
        yield from rng.integers(0, n, self.num_samples % 32).tolist()

    def __len__(self):
        return self.num_samples


class SubsetRandomSampler(Sampler):
    """The given indices in a random order.

    Parameters
    ----------
    indices : sequence of int
        The indices to permute.
    generator : Generator, optional
        The random source.

    Examples
    --------
    >>> from lucid.utils.data import SubsetRandomSampler
    >>> sorted(SubsetRandomSampler([5, 7]))
    [5, 7]
    """

    def __init__(self, indices, generator=None):
        self.indices, self.generator = list(indices), generator

    def __iter__(self):
        perm = _rng(self.generator).permutation(len(self.indices))
        return (self.indices[i] for i in perm)

    def __len__(self):
        return len(self.indices)


class WeightedRandomSampler(Sampler):
    """``num_samples`` indices drawn with probability proportional to ``weights``.

    Parameters
    ----------
    weights : sequence of float
        Non-negative weight per index.
    num_samples : int
        How many indices to draw.
    replacement : bool
        Draw with replacement.
    generator : Generator, optional
        The random source.

    Examples
    --------
    >>> from lucid.utils.data import WeightedRandomSampler
    >>> list(WeightedRandomSampler([0.0, 1.0], 3))
    [1, 1, 1]
    """

    def __init__(self, weights, num_samples, replacement=True, generator=None):
        if isinstance(num_samples, bool) or not isinstance(num_samples, int) or num_samples <= 0:
            raise ValueError("WeightedRandomSampler: num_samples should be a positive integer value, "
                             f"but got num_samples={num_samples!r}")
        if not isinstance(replacement, bool):
            raise ValueError(f"WeightedRandomSampler: replacement should be a boolean value, got {replacement!r}")
        self.num_samples, self.replacement, self.generator = num_samples, replacement, generator
        self.weights = weights

    @property
    def weights(self):
        """The weights, as a float64 tensor on the host (as PyTorch keeps them)."""
        from ..._core.tensor import _wrap

        return _wrap(self._w.copy())

    @weights.setter
    def weights(self, weights):
        # drawing happens on the host (indices are Python ints): a device tensor of weights is
        # copied here once, explicitly
        w = np.asarray(host(weights._data) if isinstance(weights, Tensor) else weights, dtype=np.float64)
        if w.ndim != 1:
            raise ValueError(f"WeightedRandomSampler: weights should be a 1d sequence but given weights have "
                             f"shape {tuple(w.shape)}")
        if not np.isfinite(w).all() or (w < 0).any() or w.sum() <= 0:
            raise _ValueRuntimeError("WeightedRandomSampler: weights must be finite and non-negative with a "
                                     "positive sum")
        if not self.replacement and self.num_samples > (w > 0).sum():
            raise _ValueRuntimeError("WeightedRandomSampler: num_samples exceeds the number of non-zero weights "
                                     "without replacement")
        self._w, self._p = w, w / w.sum()

    def __iter__(self):
        idx = _rng(self.generator).choice(len(self._p), size=self.num_samples, replace=self.replacement, p=self._p)
        return iter(idx.tolist())

    def __len__(self):
        return self.num_samples


class BatchSampler(Sampler):
    """Group the indices of ``sampler`` into lists of ``batch_size``.

    Parameters
    ----------
    sampler : Sampler or iterable
        Yields indices.
    batch_size : int
        Indices per batch.
    drop_last : bool
        Drop a last, smaller batch.

    Examples
    --------
    >>> from lucid.utils.data import BatchSampler
    >>> list(BatchSampler(range(5), batch_size=2, drop_last=False))
    [[0, 1], [2, 3], [4]]
    """

    def __init__(self, sampler, batch_size, drop_last):
        if not isinstance(batch_size, int) or isinstance(batch_size, bool) or batch_size <= 0:
            raise ValueError(f"BatchSampler: batch_size should be a positive integer, got {batch_size}")
        if not isinstance(drop_last, bool):
            raise ValueError(f"BatchSampler: drop_last should be a boolean value, got {drop_last!r}")
        self.sampler, self.batch_size, self.drop_last = sampler, batch_size, drop_last

    def __iter__(self):
        batch = []
        for idx in self.sampler:
            batch.append(idx)
            if len(batch) == self.batch_size:
                yield batch
                batch = []
        if batch and not self.drop_last:
            yield batch

    def __len__(self):
        n = len(self.sampler)
        return n // self.batch_size if self.drop_last else -(-n // self.batch_size)


__all__ = ["Sampler", "SequentialSampler", "RandomSampler", "SubsetRandomSampler",
           "WeightedRandomSampler", "BatchSampler"]
