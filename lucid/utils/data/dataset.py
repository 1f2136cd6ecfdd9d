"""Datasets: map-style, iterable, tensor-backed, subsets, concatenations and splits."""
from __future__ import annotations

import bisect
import math
import warnings

import numpy as np

from ..._core.tensor import Tensor


# PyTorch checks these with ``assert``; the classes keep Lucid's earlier types catchable too.
class _AssertTypeError(TypeError, AssertionError):
    pass


class _AssertValueError(ValueError, AssertionError):
    pass


class _IndexValueError(IndexError, ValueError):
    pass


class Dataset:
    """A map-style dataset: implement ``__getitem__`` (and usually ``__len__``).

    Parameters
    ----------
    (none)
        Subclass it; ``dataset + other`` concatenates.

    Examples
    --------
    >>> from lucid.utils.data import Dataset
    >>> class Squares(Dataset):
    ...     def __len__(self):
    ...         return 3
    ...     def __getitem__(self, i):
    ...         return i * i
    >>> [Squares()[i] for i in range(len(Squares()))]
    [0, 1, 4]
    """

    def __getitem__(self, index):
        raise NotImplementedError(f"{type(self).__name__}: subclasses of Dataset should implement __getitem__")

    def __add__(self, other):
        return ConcatDataset([self, other])


class IterableDataset(Dataset):
    """A dataset that is iterated (a stream); implement ``__iter__``.

    Parameters
    ----------
    (none)
        Subclass it and implement ``__iter__``.

    Examples
    --------
    >>> from lucid.utils.data import IterableDataset
    >>> class Count(IterableDataset):
    ...     def __iter__(self):
    ...         return iter(range(3))
    >>> list(Count())
    [0, 1, 2]
    """

    def __iter__(self):
        raise NotImplementedError(f"{type(self).__name__}: subclasses of IterableDataset should implement __iter__")

    def __add__(self, other):
        return ChainDataset([self, other])  # streams chain; ConcatDataset refuses them


class TensorDataset(Dataset):
    """Samples are the ``index``-th rows of each tensor.

    Parameters
    ----------
    *tensors : Tensor
        Tensors with the same size in dim 0.

    Examples
    --------
    >>> import lucid
    >>> from lucid.utils.data import TensorDataset
    >>> ds = TensorDataset(lucid.arange(4), lucid.arange(4) * 10)
    >>> ds[2]
    (tensor(2), tensor(20))
    """

    def __init__(self, *tensors):
        if not tensors:
            raise _IndexValueError("TensorDataset: needs at least one tensor")
        n = tensors[0].shape[0]
        for t in tensors:
            if t.shape[0] != n:
                raise _AssertValueError(
                    f"TensorDataset: size mismatch between tensors: {[tuple(x.shape) for x in tensors]}"
                )
        self.tensors = tensors

    def __getitem__(self, index):
        return tuple(t[index] for t in self.tensors)

    def __len__(self):
        return self.tensors[0].shape[0]


class Subset(Dataset):
    """The dataset restricted to ``indices``.

    Parameters
    ----------
    dataset : Dataset
        The full dataset.
    indices : sequence of int
        The indices to keep, in order.

    Examples
    --------
    >>> from lucid.utils.data import Subset
    >>> s = Subset([10, 20, 30], [2, 0])
    >>> len(s), s[0], s[1]
    (2, 30, 10)
    """

    def __init__(self, dataset, indices):
        self.dataset, self.indices = dataset, indices  # (kept as given: a range stays a range)

    def __getitem__(self, idx):
        if isinstance(idx, list):
            return self.dataset[[self.indices[i] for i in idx]]
        return self.dataset[self.indices[idx]]

    def __getitems__(self, indices):
        """The samples at ``indices`` (a list), through the dataset's own ``__getitems__`` if it has one."""
        if callable(getattr(self.dataset, "__getitems__", None)):
            return self.dataset.__getitems__([self.indices[i] for i in indices])
        return [self.dataset[self.indices[i]] for i in indices]

    def __len__(self):
        return len(self.indices)


class ConcatDataset(Dataset):
    """Several map-style datasets one after another.

    Parameters
    ----------
    datasets : iterable of Dataset
        Concatenated in order.

    Examples
    --------
    >>> from lucid.utils.data import ConcatDataset
    >>> c = ConcatDataset([[1, 2], [3]])
    >>> len(c), c[2]
    (3, 3)
    """

    def __init__(self, datasets):
        self.datasets = list(datasets)
        if not self.datasets:
            raise _AssertValueError("ConcatDataset: datasets should not be an empty iterable")
        for d in self.datasets:
            if isinstance(d, IterableDataset):
                raise _AssertTypeError("ConcatDataset: does not support IterableDataset")
        self.cumulative_sizes = [int(c) for c in np.cumsum([len(d) for d in self.datasets])]

    def __len__(self):
        return self.cumulative_sizes[-1]

    @property
    def cummulative_sizes(self):
        """Deprecated spelling of ``cumulative_sizes`` (PyTorch keeps it, with a warning)."""
        warnings.warn("ConcatDataset: `cummulative_sizes` attribute is renamed to `cumulative_sizes`",
                      DeprecationWarning, stacklevel=2)
        return self.cumulative_sizes

    def __getitem__(self, idx):
        if idx < 0:
            if -idx > len(self):
                raise _IndexValueError("ConcatDataset: absolute value of index should not exceed dataset length")
            idx += len(self)
        d = bisect.bisect_right(self.cumulative_sizes, idx)
        start = 0 if d == 0 else int(self.cumulative_sizes[d - 1])
        return self.datasets[d][idx - start]


class ChainDataset(IterableDataset):
    """Iterate several IterableDatasets one after the other (on the fly, without concatenating).

    Parameters
    ----------
    datasets : iterable of IterableDataset
        Streams to chain.

    Examples
    --------
    >>> from lucid.utils.data import ChainDataset, IterableDataset
    >>> class Count(IterableDataset):
    ...     def __init__(self, n):
    ...         self.n = n
    ...     def __iter__(self):
    ...         return iter(range(self.n))
    ...     def __len__(self):
    ...         return self.n
    >>> ds = ChainDataset([Count(2), Count(3)])
    >>> list(ds), len(ds)
    ([0, 1, 0, 1, 2], 5)
    """

    def __init__(self, datasets):
        self.datasets = datasets

    def __iter__(self):
        for i, d in enumerate(self.datasets):
            if not isinstance(d, IterableDataset):
                raise _AssertTypeError(f"ChainDataset: only supports IterableDataset, got {type(d).__name__} "
                                       f"at index {i}")
            yield from d

    def __len__(self):
        total = 0
        for i, d in enumerate(self.datasets):
            if not isinstance(d, IterableDataset):
                raise _AssertTypeError(f"ChainDataset: only supports IterableDataset, got {type(d).__name__} "
                                       f"at index {i}")
            total += len(d)
        return total


class StackDataset(Dataset):
    """Samples of several equally long datasets side by side: a tuple (positional) or a dict (keywords).

    Parameters
    ----------
    *args : Dataset
        Datasets whose samples form a tuple, or
    **kwargs : Dataset
        datasets whose samples form a dict (not both).

    Examples
    --------
    >>> import lucid
    >>> from lucid.utils.data import StackDataset, TensorDataset
    >>> images, labels = TensorDataset(lucid.arange(3)), [10, 11, 12]
    >>> StackDataset(image=images, label=labels)[1]
    {'image': (tensor(1),), 'label': 11}
    >>> len(StackDataset(images, labels))
    3
    """

    def __init__(self, *args, **kwargs):
        if args and kwargs:
            raise ValueError("StackDataset: supported either tuple-like (*args) or dict-like (**kwargs) input, "
                             "but both types are given")
        parts = args or tuple(kwargs.values())
        if not parts:
            raise ValueError("StackDataset: at least one dataset should be passed")
        self._length = len(parts[0])
        if any(len(d) != self._length for d in parts):
            raise ValueError(f"StackDataset: size mismatch between datasets: {[len(d) for d in parts]}")
        self.datasets = dict(kwargs) if kwargs else tuple(args)

    def __getitem__(self, index):
        if isinstance(self.datasets, dict):
            return {k: d[index] for k, d in self.datasets.items()}
        return tuple(d[index] for d in self.datasets)

    def __getitems__(self, indices):
        """The samples at ``indices`` (a list), each part through its dataset's ``__getitems__`` if it has one."""
        named = isinstance(self.datasets, dict)
        parts = self.datasets.items() if named else enumerate(self.datasets)
        columns = {k: self._column(d, indices) for k, d in parts}
        if named:
            return [{k: col[j] for k, col in columns.items()} for j in range(len(indices))]
        return [tuple(col[j] for col in columns.values()) for j in range(len(indices))]

    @staticmethod
    def _column(dataset, indices):
        if not callable(getattr(dataset, "__getitems__", None)):
            return [dataset[i] for i in indices]
        items = dataset.__getitems__(indices)
        if len(items) != len(indices):
            raise ValueError(f"StackDataset: nested dataset's output size mismatch. Expected {len(indices)}, "
                             f"got {len(items)}")
        return items

    def __len__(self):
        return self._length


def random_split(dataset, lengths, generator=None):
    """Split into non-overlapping random subsets of the given lengths (or fractions).

    Parameters
    ----------
    dataset : Dataset
        The dataset to split.
    lengths : sequence of int or float
        Sizes of the parts (or fractions summing to 1).
    generator : Generator, optional
        The random source.

    Returns
    -------
    list of Subset

    Examples
    --------
    >>> import lucid
    >>> from lucid.utils.data import TensorDataset, random_split
    >>> a, b = random_split(TensorDataset(lucid.arange(10)), [0.7, 0.3], generator=lucid.Generator().manual_seed(0))
    >>> len(a), len(b)
    (7, 3)
    """
    n = len(dataset)
    lengths = list(lengths)
    # PyTorch's rule: lengths summing to 1 are fractions (so [1] and [0, 1] are too)
    if math.isclose(sum(lengths), 1) and sum(lengths) <= 1:
        for i, f in enumerate(lengths):
            if not 0 <= f <= 1:
                raise ValueError(f"random_split: fraction at index {i} is not between 0 and 1, got {f!r}")
        counts = [int(math.floor(n * f)) for f in lengths]
        for i in range(n - sum(counts)):
            counts[i % len(counts)] += 1
        lengths = counts
        for i, length in enumerate(lengths):
            if length == 0:
                warnings.warn(f"random_split: length of split at index {i} is 0. This might result in an "
                              f"empty dataset.", stacklevel=2)
    if sum(lengths) != n:
        raise ValueError("random_split: sum of input lengths does not equal the length of the input dataset")
    perm = _permutation(n, generator)
    out, start = [], 0
    for length in lengths:
        out.append(Subset(dataset, perm[start:start + length].tolist()))
        start += length
    return out


def _rng(generator, op="lucid.utils.data"):
    """The NumPy generator behind a lucid ``Generator`` (``None``: the default one, which
    ``lucid.manual_seed`` seeds)."""
    from ...ops.random import _gen

    return _gen(generator, op)


def _permutation(n, generator):
    return _rng(generator, "random_split").permutation(n)


__all__ = ["Dataset", "IterableDataset", "TensorDataset", "Subset", "ConcatDataset", "ChainDataset",
           "StackDataset", "random_split"]
_ = Tensor
