"""``lucid.autograd.profiler_util`` (``torch.autograd.profiler_util``): the profiler's event types.

``EventList``, ``FunctionEvent``, ``FunctionEventAvg`` and ``Interval`` are :mod:`lucid.profiler`'s;
``Kernel`` (a device kernel an event launched: Lucid times host work only, so lists of them
stay empty) and ``MemRecordsAcc`` (memory records by time interval) are small real ones here.

Examples
--------
>>> import lucid
>>> from lucid.autograd.profiler_util import EventList
>>> EventList is lucid.profiler.EventList
True
"""
from __future__ import annotations

import bisect
import collections

from ..profiler import EventList, FunctionEvent, FunctionEventAvg, Interval

__all__ = ["EventList", "FunctionEvent", "FunctionEventAvg", "Interval", "Kernel", "MemRecordsAcc"]

Kernel = collections.namedtuple("Kernel", ["name", "device", "duration"])


class MemRecordsAcc:
    """Memory records sorted by start time, for finding those inside an interval.

    Parameters
    ----------
    mem_records : list
        Pairs ``(record, payload)`` where ``record.start_us()`` is the time in microseconds
        (PyTorch's layout), or objects with ``start_us`` as a number.

    Examples
    --------
    >>> from lucid.autograd.profiler_util import MemRecordsAcc
    >>> class R:
    ...     def __init__(self, t): self.t = t
    ...     def start_us(self): return self.t
    >>> acc = MemRecordsAcc([(R(5), "b"), (R(1), "a"), (R(9), "c")])
    >>> [p for _, p in acc.in_interval(2, 9)]
    ['b', 'c']
    """

    def __init__(self, mem_records):
        self._records = sorted(mem_records, key=lambda r: self._time(r[0]))
        self._starts = [self._time(r[0]) for r in self._records]

    @staticmethod
    def _time(record):
        t = record.start_us
        return t() if callable(t) else t

    def in_interval(self, start_us, end_us):
        """The records with ``start_us <= time <= end_us``, in time order."""
        lo = bisect.bisect_left(self._starts, start_us)
        hi = bisect.bisect_right(self._starts, end_us)
        yield from self._records[lo:hi]
