"""Batcher (``batch``), UnBatcher (``unbatch``) and Grouper (``groupby``)."""
from __future__ import annotations

from collections import defaultdict

from .._decorator import functional_datapipe
from ..datapipe import DataChunk, IterDataPipe
from ..utils.common import _check_unpickable_fn
from .utils import _length_of


@functional_datapipe("batch")
class BatcherIterDataPipe(IterDataPipe):
    """Group consecutive elements into batches of ``batch_size`` (functional name: ``batch``).

    Parameters
    ----------
    datapipe : IterDataPipe
    batch_size : int
    drop_last : bool
        Drop a last, shorter batch.
    wrapper_class : type
        What each batch is (default ``DataChunk``, a list).

    Examples
    --------
    >>> from lucid.utils.data.datapipes.iter import IterableWrapper
    >>> list(IterableWrapper(range(5)).batch(2))
    [[0, 1], [2, 3], [4]]
    """

    def __init__(self, datapipe, batch_size, drop_last=False, wrapper_class=DataChunk):
        if batch_size <= 0:
            raise AssertionError("Batch size is required to be larger than 0!")
        self.datapipe, self.batch_size, self.drop_last = datapipe, batch_size, drop_last
        self.wrapper_class = wrapper_class

    def __iter__(self):
        batch = []
        for x in self.datapipe:
            batch.append(x)
            if len(batch) == self.batch_size:
                yield self.wrapper_class(batch)
                batch = []
        if batch and not self.drop_last:
            yield self.wrapper_class(batch)

    def __len__(self):
        n = _length_of(self, self.datapipe)
        return n // self.batch_size if self.drop_last else -(-n // self.batch_size)


@functional_datapipe("unbatch")
class UnBatcherIterDataPipe(IterDataPipe):
    """Undo ``unbatch_level`` levels of batching (``-1``: all of them) (functional name: ``unbatch``).

    Examples
    --------
    >>> from lucid.utils.data.datapipes.iter import IterableWrapper
    >>> list(IterableWrapper([[[0, 1], [2]], [[3]]]).unbatch(unbatch_level=-1))
    [0, 1, 2, 3]
    """

    def __init__(self, datapipe, unbatch_level=1):
        self.datapipe, self.unbatch_level = datapipe, unbatch_level

    def __iter__(self):
        for element in self.datapipe:
            yield from self._dive(element, self.unbatch_level)

    def _dive(self, element, unbatch_level):
        if unbatch_level < -1:
            raise ValueError("unbatch_level must be -1 or >= 0")
        if unbatch_level == -1:
            if isinstance(element, (list, DataChunk)):
                for item in element:
                    yield from self._dive(item, -1)
            else:
                yield element
        elif unbatch_level == 0:
            yield element
        elif isinstance(element, (list, DataChunk)):
            for item in element:
                yield from self._dive(item, unbatch_level - 1)
        else:
            raise IndexError(f"unbatch_level {self.unbatch_level} exceeds the depth of the DataPipe")


@functional_datapipe("groupby")
class GrouperIterDataPipe(IterDataPipe):
    """Group elements by ``group_key_fn`` into DataChunks (functional name: ``groupby``).

    A group is yielded when it reaches ``group_size``; when ``buffer_size`` elements are held,
    the biggest group is yielded (or dropped/refused if smaller than ``guaranteed_group_size``);
    at the end the remaining groups come out in order of first appearance.

    Parameters
    ----------
    datapipe : IterDataPipe
    group_key_fn : callable
    keep_key : bool
        Yield ``(key, group)`` pairs.
    buffer_size : int
    group_size, guaranteed_group_size : int, optional
    drop_remaining : bool
        Drop groups smaller than ``guaranteed_group_size`` instead of raising.

    Examples
    --------
    >>> from lucid.utils.data.datapipes.iter import IterableWrapper
    >>> list(IterableWrapper(range(7)).groupby(lambda x: x % 3, group_size=2))
    [[0, 3], [1, 4], [2, 5], [6]]
    """

    def __init__(self, datapipe, group_key_fn, *, keep_key=False, buffer_size=10000, group_size=None,
                 guaranteed_group_size=None, drop_remaining=False):
        _check_unpickable_fn(group_key_fn)
        self.datapipe, self.group_key_fn, self.keep_key = datapipe, group_key_fn, keep_key
        self.max_buffer_size = buffer_size
        self.buffer_elements = defaultdict(list)
        self.curr_buffer_size = 0
        self.group_size = group_size
        self.guaranteed_group_size = None
        if group_size is not None and buffer_size is not None:
            if not 0 < group_size <= buffer_size:
                raise AssertionError("group_size must be > 0 and <= buffer_size")
            self.guaranteed_group_size = group_size
        if guaranteed_group_size is not None:
            if group_size is None or not 0 < guaranteed_group_size <= group_size:
                raise AssertionError("guaranteed_group_size must be > 0 and <= group_size and group_size must be set")
            self.guaranteed_group_size = guaranteed_group_size
        self.drop_remaining = drop_remaining
        self.wrapper_class = DataChunk

    def _out(self, key, elements):
        chunk = self.wrapper_class(elements)
        return (key, chunk) if self.keep_key else chunk

    def _pop_biggest(self):
        """Remove the biggest group; returns ``(key, elements)``, elements None when it is dropped."""
        key = max(self.buffer_elements, key=lambda k: len(self.buffer_elements[k]))
        elements = self.buffer_elements.pop(key)
        self.curr_buffer_size -= len(elements)
        if self.guaranteed_group_size is not None and len(elements) < self.guaranteed_group_size:
            if not self.drop_remaining:
                raise RuntimeError("Failed to group items", str(elements))
            return key, None
        return key, elements

    def __iter__(self):
        for x in self.datapipe:
            key = self.group_key_fn(x)
            self.buffer_elements[key].append(x)
            self.curr_buffer_size += 1
            if self.group_size is not None and len(self.buffer_elements[key]) == self.group_size:
                elements = self.buffer_elements.pop(key)
                self.curr_buffer_size -= len(elements)
                yield self._out(key, elements)
            if self.curr_buffer_size == self.max_buffer_size:
                big_key, elements = self._pop_biggest()
                if elements is not None:
                    yield self._out(big_key, elements)
        for key in tuple(self.buffer_elements):
            elements = self.buffer_elements.pop(key)
            self.curr_buffer_size -= len(elements)
            yield self._out(key, elements)

    def reset(self):
        self.curr_buffer_size = 0
        self.buffer_elements = defaultdict(list)


Batcher = BatcherIterDataPipe
UnBatcher = UnBatcherIterDataPipe
Grouper = GrouperIterDataPipe
