"""IterableWrapper: the source of an iterable pipeline."""
from __future__ import annotations

import collections.abc
import copy
import warnings

from ..datapipe import IterDataPipe


def _length_of(datapipe, source):
    """``len(source)`` or PyTorch's TypeError naming ``datapipe`` when the source has no length."""
    if isinstance(source, collections.abc.Sized):
        return len(source)
    raise TypeError(f"{type(datapipe).__name__} instance doesn't have valid length")


class IterableWrapperIterDataPipe(IterDataPipe):
    """Wrap an iterable; each iteration reads a deep copy of it (unless ``deepcopy=False``).

    Parameters
    ----------
    iterable : iterable
    deepcopy : bool
        Copy the iterable at each iteration so in-place changes downstream do not leak back.

    Examples
    --------
    >>> from lucid.utils.data.datapipes.iter import IterableWrapper
    >>> list(IterableWrapper(range(3)))
    [0, 1, 2]
    """

    def __init__(self, iterable, deepcopy=True):
        self.iterable = iterable
        self.deepcopy = deepcopy

    def __iter__(self):
        source = self.iterable
        if self.deepcopy:
            try:
                source = copy.deepcopy(self.iterable)
            except TypeError:  # (an iterator that cannot be copied is read as is, as in PyTorch)
                warnings.warn("The input iterable can not be deepcopied, please be aware of in-place "
                              "modification would affect source data.", stacklevel=2)
        yield from source

    def __len__(self):
        return _length_of(self, self.iterable)


IterableWrapper = IterableWrapperIterDataPipe
