"""The map-style DataPipes: SequenceWrapper, Mapper (``map``), Batcher (``batch``),
Concater (``concat``), Zipper (``zip``)."""
from __future__ import annotations

import copy
import warnings

from .._decorator import functional_datapipe
from ..datapipe import DataChunk, MapDataPipe
from ..utils.common import _check_unpickable_fn


class SequenceWrapperMapDataPipe(MapDataPipe):
    """A sequence as a MapDataPipe (deep-copied once, unless ``deepcopy=False``).

    Examples
    --------
    >>> from lucid.utils.data.datapipes.map import SequenceWrapper
    >>> dp = SequenceWrapper(range(3))
    >>> dp[2], len(dp)
    (2, 3)
    """

    def __init__(self, sequence, deepcopy=True):
        if deepcopy:
            try:
                self.sequence = copy.deepcopy(sequence)
            except TypeError:
                warnings.warn("The input sequence can not be deepcopied, please be aware of in-place "
                              "modification would affect source data", stacklevel=2)
                self.sequence = sequence
        else:
            self.sequence = sequence

    def __getitem__(self, index):
        return self.sequence[index]

    def __len__(self):
        return len(self.sequence)


@functional_datapipe("map")
class MapperMapDataPipe(MapDataPipe):
    """``fn`` applied to each item, on access (functional name: ``map``).

    Examples
    --------
    >>> from lucid.utils.data.datapipes.map import SequenceWrapper
    >>> SequenceWrapper(range(3)).map(lambda x: x + 10)[1]
    11
    """

    def __init__(self, datapipe, fn):
        self.datapipe = datapipe
        _check_unpickable_fn(fn)
        self.fn = fn

    def __getitem__(self, index):
        return self.fn(self.datapipe[index])

    def __len__(self):
        return len(self.datapipe)


@functional_datapipe("batch")
class BatcherMapDataPipe(MapDataPipe):
    """Item ``i`` is the batch of items ``[i*batch_size, (i+1)*batch_size)`` (functional name: ``batch``).

    Examples
    --------
    >>> from lucid.utils.data.datapipes.map import SequenceWrapper
    >>> dp = SequenceWrapper(range(5)).batch(2)
    >>> dp[2], len(dp)
    ([4], 3)
    """

    def __init__(self, datapipe, batch_size, drop_last=False, wrapper_class=DataChunk):
        if batch_size <= 0:
            raise AssertionError("Batch size is required to be larger than 0!")
        self.datapipe, self.batch_size, self.drop_last = datapipe, batch_size, drop_last
        self.wrapper_class = wrapper_class

    def __getitem__(self, index):
        batch = []
        try:
            for i in range(index * self.batch_size, (index + 1) * self.batch_size):
                batch.append(self.datapipe[i])
            return self.wrapper_class(batch)
        except IndexError as e:
            if not self.drop_last and batch:
                return self.wrapper_class(batch)
            raise IndexError(f"Index {index} is out of bound.") from e

    def __len__(self):
        n = len(self.datapipe)
        return n // self.batch_size if self.drop_last else -(-n // self.batch_size)


def _check_all_map(datapipes, name):
    if len(datapipes) == 0:
        raise ValueError("Expected at least one DataPipe, but got nothing")
    if not all(isinstance(dp, MapDataPipe) for dp in datapipes):
        raise TypeError(f"Expected all inputs to be `MapDataPipe` for `{name}`")


@functional_datapipe("concat")
class ConcaterMapDataPipe(MapDataPipe):
    """The pipes' items one pipe after the other (functional name: ``concat``).

    Examples
    --------
    >>> from lucid.utils.data.datapipes.map import SequenceWrapper
    >>> dp = SequenceWrapper(range(2)).concat(SequenceWrapper("ab"))
    >>> [dp[i] for i in range(len(dp))]
    [0, 1, 'a', 'b']
    """

    def __init__(self, *datapipes):
        _check_all_map(datapipes, "ConcaterMapDataPipe")
        self.datapipes = datapipes

    def __getitem__(self, index):
        offset = 0
        for dp in self.datapipes:
            if index - offset < len(dp):
                return dp[index - offset]
            offset += len(dp)
        raise IndexError(f"Index {index} is out of range.")

    def __len__(self):
        return sum(len(dp) for dp in self.datapipes)


@functional_datapipe("zip")
class ZipperMapDataPipe(MapDataPipe):
    """Item ``i`` is the tuple of every pipe's item ``i``; length of the shortest (functional name: ``zip``).

    Examples
    --------
    >>> from lucid.utils.data.datapipes.map import SequenceWrapper
    >>> SequenceWrapper(range(3)).zip(SequenceWrapper("ab"))[1]
    (1, 'b')
    """

    def __init__(self, *datapipes):
        _check_all_map(datapipes, "ZipperMapDataPipe")
        self.datapipes = datapipes

    def __getitem__(self, index):
        items = []
        for dp in self.datapipes:
            try:
                items.append(dp[index])
            except IndexError as e:
                raise IndexError(f"Index {index} is out of range for one of the input MapDataPipes {dp}.") from e
        return tuple(items)

    def __len__(self):
        return min(len(dp) for dp in self.datapipes)


SequenceWrapper = SequenceWrapperMapDataPipe
Mapper = MapperMapDataPipe
Batcher = BatcherMapDataPipe
Concater = ConcaterMapDataPipe
Zipper = ZipperMapDataPipe
