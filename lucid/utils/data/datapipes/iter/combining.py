"""Concater (``concat``), Forker (``fork``), Demultiplexer (``demux``), Multiplexer (``mux``), Zipper (``zip``).

``fork`` and ``demux`` return child pipes that read one source through a shared container;
what one child has read and another has not is buffered, up to ``buffer_size`` elements
(``-1``: no limit), past which ``BufferError`` is raised. A new iterator of a child restarts all
of them (NOTE [One live iterator per IterDataPipe]); if some child had not finished, a warning
says so.
"""
from __future__ import annotations

import copy as copymodule
import warnings
from collections import deque

from .._decorator import functional_datapipe
from ..datapipe import IterDataPipe
from ..utils.common import StreamWrapper, _check_unpickable_fn
from .utils import _length_of


def _check_all_iter(datapipes, name):
    if len(datapipes) == 0:
        raise ValueError("Expected at least one DataPipe, but got nothing")
    if not all(isinstance(dp, IterDataPipe) for dp in datapipes):
        raise TypeError(f"Expected all inputs to be `IterDataPipe` for `{name}`")


@functional_datapipe("concat")
class ConcaterIterDataPipe(IterDataPipe):
    """The pipes one after the other (functional name: ``concat``).

    Examples
    --------
    >>> from lucid.utils.data.datapipes.iter import IterableWrapper
    >>> list(IterableWrapper(range(2)).concat(IterableWrapper("ab")))
    [0, 1, 'a', 'b']
    """

    def __init__(self, *datapipes):
        _check_all_iter(datapipes, "ConcaterIterDataPipe")
        self.datapipes = datapipes

    def __iter__(self):
        for dp in self.datapipes:
            yield from dp

    def __len__(self):
        return sum(_length_of(self, dp) for dp in self.datapipes)


@functional_datapipe("zip")
class ZipperIterDataPipe(IterDataPipe):
    """Tuples of one element from each pipe, until the shortest ends (functional name: ``zip``).

    Examples
    --------
    >>> from lucid.utils.data.datapipes.iter import IterableWrapper
    >>> list(IterableWrapper(range(3)).zip(IterableWrapper("ab")))
    [(0, 'a'), (1, 'b')]
    """

    def __init__(self, *datapipes):
        _check_all_iter(datapipes, "ZipperIterDataPipe")
        self.datapipes = datapipes

    def __iter__(self):
        yield from zip(*self.datapipes)

    def __len__(self):
        return min(_length_of(self, dp) for dp in self.datapipes)


@functional_datapipe("mux")
class MultiplexerIterDataPipe(IterDataPipe):
    """One element from each pipe in turn; stops at the first round a pipe cannot complete
    (functional name: ``mux``).

    Examples
    --------
    >>> from lucid.utils.data.datapipes.iter import IterableWrapper
    >>> list(IterableWrapper([0, 1, 2]).mux(IterableWrapper([10, 11]), IterableWrapper([20, 21, 22])))
    [0, 10, 20, 1, 11, 21]
    """

    def __init__(self, *datapipes):
        _check_all_iter(datapipes, "MultiplexerIterDataPipe")
        self.datapipes = datapipes

    def __iter__(self):
        iterators = [iter(dp) for dp in self.datapipes]
        while True:
            round_ = []
            for it in iterators:
                try:
                    round_.append(next(it))
                except StopIteration:
                    return
            yield from round_

    def __len__(self):
        return min(_length_of(self, dp) for dp in self.datapipes) * len(self.datapipes)


class _ContainerTemplate(IterDataPipe):
    """The shared state behind ``fork``/``demux`` children; one generation per restart."""

    def _generation_for(self, child):
        """Called when ``child`` starts an iterator: restart all children if this child has
        already iterated in the current generation (warning if a restart cuts a read short;
        PyTorch also warns when nothing had been read yet). Returns the generation."""
        if self._valid_iterator_id is None:
            self._valid_iterator_id = 0
        elif self._valid_iterator_id == child._valid_iterator_id:
            self._valid_iterator_id += 1
            if self._started() and not self.is_every_instance_exhausted():
                warnings.warn("Some child DataPipes are not exhausted when __iter__ is called. We are resetting "
                              "the buffer and each child DataPipe will read from the start again.",
                              UserWarning, stacklevel=4)
            self.reset()
        return self._valid_iterator_id


class _ChildDataPipe(IterDataPipe):
    """One output of ``fork``/``demux``: reads its share through the container."""

    _is_child_datapipe = True

    def __init__(self, main_datapipe, instance_id):
        self.main_datapipe = main_datapipe
        self.instance_id = instance_id

    def __iter__(self):
        return self.main_datapipe.get_next_element_by_instance(self.instance_id)

    def __len__(self):
        return self.main_datapipe.get_length_by_instance(self.instance_id)

    def _set_main_datapipe_valid_iterator_id(self):
        self._valid_iterator_id = self.main_datapipe._generation_for(self)
        return self._valid_iterator_id

    def _check_valid_iterator_id(self, iterator_id):
        return iterator_id == self._valid_iterator_id == self.main_datapipe._valid_iterator_id


class _ForkerIterDataPipe(_ContainerTemplate):
    """Buffer of the elements between the slowest and the fastest child of a ``fork``."""

    def __init__(self, datapipe, num_instances, buffer_size=1000, copy=None):
        self.main_datapipe = datapipe
        self.num_instances = num_instances
        self.buffer_size = buffer_size
        if buffer_size < 0:
            warnings.warn("Unlimited buffer size is set for `fork`, please be aware of OOM at random places",
                          UserWarning, stacklevel=3)
        if copy not in (None, "shallow", "deep"):
            raise ValueError(f"Unknown copy method `{copy}` requested, choose one of None, `shallow` or `deep`.")
        self.copy = copy
        self.reset()

    def _copy_fn(self, value):
        if self.copy == "shallow":
            return copymodule.copy(value)
        if self.copy == "deep":
            return copymodule.deepcopy(value)
        return value

    def reset(self):
        self._source = None
        self.buffer = deque()
        self.offset = 0  # index (in the stream) of buffer[0]
        self.child_pointers = [0] * self.num_instances
        self.end = None  # length of the stream once known
        self._child_stop = [True] * self.num_instances

    def __len__(self):
        return _length_of(self, self.main_datapipe)

    def get_length_by_instance(self, instance_id):
        return len(self)

    def is_every_instance_exhausted(self):
        return self.end is not None and all(p >= self.end for p in self.child_pointers)

    def _started(self):
        return any(self.child_pointers)

    def _element(self, position):
        """The element at ``position`` of the stream, reading the source as far as needed; None past its end."""
        if self._source is None:
            self._source = iter(self.main_datapipe)
        while position >= self.offset + len(self.buffer):
            try:
                self.buffer.append(next(self._source))
            except StopIteration:
                self.end = self.offset + len(self.buffer)
                self._source = None
                return None
            if 0 <= self.buffer_size < len(self.buffer):
                raise BufferError(f"ForkerIterDataPipe buffer overflow,buffer size {self.buffer_size} is insufficient.")
        return (self.buffer[position - self.offset],)

    def _trim(self):
        slowest = min(self.child_pointers)
        while self.offset < slowest and self.buffer:
            self.buffer.popleft()
            self.offset += 1

    def get_next_element_by_instance(self, instance_id):
        while self.end is None or self.child_pointers[instance_id] < self.end:
            got = self._element(self.child_pointers[instance_id])
            if got is None:
                return
            self.child_pointers[instance_id] += 1
            self._trim()
            yield self._copy_fn(got[0])

    def __getstate__(self):
        state = super().__getstate__()
        state = dict(state)
        for name in ("_source", "buffer", "offset", "child_pointers", "end", "_child_stop"):
            state.pop(name, None)
        return state

    def __setstate__(self, state):
        super().__setstate__(state)
        self.reset()


@functional_datapipe("fork")
class ForkerIterDataPipe(IterDataPipe):
    """``num_instances`` pipes that each yield the whole source, read once (functional name: ``fork``).

    Parameters
    ----------
    datapipe : IterDataPipe
    num_instances : int
    buffer_size : int
        Most elements held for lagging children (``-1``: unlimited); more raises BufferError.
    copy : {None, "shallow", "deep"}
        Copy each element handed to a child.

    Examples
    --------
    >>> from lucid.utils.data.datapipes.iter import IterableWrapper
    >>> a, b = IterableWrapper(range(3)).fork(2)
    >>> list(zip(a, b))
    [(0, 0), (1, 1), (2, 2)]
    """

    def __new__(cls, datapipe, num_instances, buffer_size=1000, copy=None):
        if num_instances < 1:
            raise ValueError(f"Expected `num_instances` larger than 0, but {num_instances} is found")
        if num_instances == 1:
            return datapipe
        container = _ForkerIterDataPipe(datapipe, num_instances, buffer_size, copy)
        return [_ChildDataPipe(container, i) for i in range(num_instances)]


class _DemultiplexerIterDataPipe(_ContainerTemplate):
    """Per-child queues of the elements classified for a child that has not asked for them yet."""

    def __init__(self, datapipe, num_instances, classifier_fn, drop_none, buffer_size):
        self.main_datapipe = datapipe
        self.num_instances = num_instances
        self.buffer_size = buffer_size
        if buffer_size < 0:
            warnings.warn("Unlimited buffer size is set for `demux`, please be aware of OOM at random places",
                          UserWarning, stacklevel=3)
        self.classifier_fn = classifier_fn
        self.drop_none = drop_none
        self.reset()

    def reset(self):
        self._source = None
        self.current_buffer_usage = 0
        self.child_buffers = [deque() for _ in range(self.num_instances)]
        self.main_datapipe_exhausted = False
        self._child_done = [False] * self.num_instances

    def _classify_next(self):
        """Read one element and return ``(child, value)``; None when the source is exhausted."""
        while True:
            try:
                value = next(self._source)
            except StopIteration:
                self.main_datapipe_exhausted = True
                self._source = None
                return None
            child = self.classifier_fn(value)
            if child is None and self.drop_none:
                StreamWrapper.close_streams(value)
                continue
            if child is None or not 0 <= child < self.num_instances:
                raise ValueError(f"Output of the classification fn should be between 0 and {self.num_instances - 1}. "
                                 f"{child} is returned.")
            return child, value

    def get_next_element_by_instance(self, instance_id):
        if self._source is None and not self.main_datapipe_exhausted:
            self._source = iter(self.main_datapipe)
        queue = self.child_buffers[instance_id]
        while True:
            if queue:
                self.current_buffer_usage -= 1
                yield queue.popleft()
                continue
            if self.main_datapipe_exhausted:
                self._child_done[instance_id] = True
                return
            got = self._classify_next()
            if got is None:
                continue
            child, value = got
            if child == instance_id:
                yield value
                continue
            self.child_buffers[child].append(value)
            self.current_buffer_usage += 1
            if 0 <= self.buffer_size < self.current_buffer_usage:
                raise BufferError(f"DemultiplexerIterDataPipe buffer overflow, buffer size {self.buffer_size} "
                                  f"is insufficient.")

    def is_every_instance_exhausted(self):
        return self.main_datapipe_exhausted and all(self._child_done)

    def _started(self):
        return self._source is not None or self.main_datapipe_exhausted

    def get_length_by_instance(self, instance_id):
        raise TypeError("DemultiplexerIterDataPipe instance doesn't have valid length")

    def __getstate__(self):
        state = dict(super().__getstate__())
        for name in ("_source", "current_buffer_usage", "child_buffers", "main_datapipe_exhausted", "_child_done"):
            state.pop(name, None)
        return state

    def __setstate__(self, state):
        super().__setstate__(state)
        self.reset()


@functional_datapipe("demux")
class DemultiplexerIterDataPipe(IterDataPipe):
    """Split a pipe into ``num_instances`` pipes by ``classifier_fn`` (functional name: ``demux``).

    Parameters
    ----------
    datapipe : IterDataPipe
    num_instances : int
    classifier_fn : callable
        Maps an element to its child, in ``[0, num_instances)`` (or None, see ``drop_none``).
    drop_none : bool
        Skip elements classified as None (otherwise they raise ValueError).
    buffer_size : int
        Most elements held for other children (``-1``: unlimited); more raises BufferError.

    Examples
    --------
    >>> from lucid.utils.data.datapipes.iter import IterableWrapper
    >>> even, odd = IterableWrapper(range(5)).demux(2, lambda x: x % 2)
    >>> list(even), list(odd)
    ([0, 2, 4], [1, 3])
    """

    def __new__(cls, datapipe, num_instances, classifier_fn, drop_none=False, buffer_size=1000):
        if num_instances < 1:
            raise ValueError(f"Expected `num_instances` larger than 0, but {num_instances} is found")
        _check_unpickable_fn(classifier_fn)
        container = _DemultiplexerIterDataPipe(datapipe, num_instances, classifier_fn, drop_none, buffer_size)
        return [_ChildDataPipe(container, i) for i in range(num_instances)]


Concater = ConcaterIterDataPipe
Forker = ForkerIterDataPipe
Demultiplexer = DemultiplexerIterDataPipe
Multiplexer = MultiplexerIterDataPipe
Zipper = ZipperIterDataPipe
