"""``lucid.utils.benchmark``: PyTorch's ``Timer`` subset (``timeit``, ``blocked_autorange``).

Measurements print as PyTorch's do::

    <lucid.utils.benchmark.Measurement object at 0x...>
    x + y
      Median: 2.28 us
      IQR:    0.05 us (2.26 to 2.31)
      8 measurements, 10000 runs per measurement, 1 thread

Timing uses :mod:`timeit` (``time.perf_counter``). ``num_threads`` sets the BLAS pool for
the measurement through :func:`lucid.set_num_threads` and restores it afterwards, when
``threadpoolctl`` is installed (NOTE [Threads] in ``lucid/_runtime.py``); without it the
pool is timed as it is.
"""
from __future__ import annotations

import math
import statistics
import textwrap
import timeit as _timeit

__all__ = ["Measurement", "Timer", "select_unit"]

_IQR_WARN_THRESHOLD, _IQR_GROSS_WARN_THRESHOLD = 0.1, 0.5


def select_unit(t: float):
    """``(unit, scale)`` that shows ``t`` seconds with an O(1) number: ns, us, ms or s."""
    exp = math.floor(math.log10(t) / 3) if t > 0 else -3
    unit = {-3: "ns", -2: "us", -1: "ms"}.get(exp, "s")
    return unit, {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1.0}[unit]


def _quantile(sorted_vals, q):
    """Linear-interpolation quantile (PyTorch's and NumPy's default)."""
    pos = (len(sorted_vals) - 1) * q
    lo = math.floor(pos)
    hi = min(lo + 1, len(sorted_vals) - 1)
    return sorted_vals[lo] + (sorted_vals[hi] - sorted_vals[lo]) * (pos - lo)


class Measurement:
    """Times of one statement: ``times`` (seconds per run), ``median``, ``mean``, ``iqr``.

    Attributes
    ----------
    number_per_run : int
        Runs of the statement per timed block.
    raw_times : list of float
        Seconds per block.
    """

    def __init__(self, number_per_run, raw_times, stmt, setup="pass", label=None, sub_label=None,
                 description=None, num_threads=1):
        self.number_per_run, self.raw_times = number_per_run, list(raw_times)
        self.stmt, self.setup, self.label, self.sub_label = stmt, setup, label, sub_label
        self.description, self.num_threads = description, num_threads
        srt = sorted(self.times)
        self._sorted = srt
        self.median = _quantile(srt, 0.5)
        self.mean = statistics.fmean(srt)
        self._p25, self._p75 = _quantile(srt, 0.25), _quantile(srt, 0.75)
        self.iqr = self._p75 - self._p25

    @property
    def times(self):
        return [t / self.number_per_run for t in self.raw_times]

    def meets_confidence(self, threshold=_IQR_WARN_THRESHOLD) -> bool:
        return self.iqr / self.median < threshold

    @property
    def title(self) -> str:
        if self.label is not None:
            return self.label + (f": {self.sub_label}" if self.sub_label else "")
        if "\n" not in self.stmt:
            return self.stmt + (f": {self.sub_label}" if self.sub_label else "")
        return f"stmt:{f' ({self.sub_label})' if self.sub_label else ''}\n{textwrap.indent(self.stmt, '  ')}"

    def _summary(self) -> str:
        setup = ("" if self.setup in ("pass", "") else f"setup:\n{textwrap.indent(self.setup, '  ')}"
                 if "\n" in self.setup else f"setup: {self.setup}")
        sections = [self.title, self.description or "", setup]
        return "\n".join(f"{s}\n" if "\n" in s else s for s in sections if s)

    def __repr__(self) -> str:
        n = len(self._sorted)
        unit, scale = select_unit(self.median)
        lines = [f"<{type(self).__module__}.{type(self).__name__} object at {hex(id(self))}>",
                 self._summary(),
                 f"  {'Median: ' if n > 1 else ''}{self.median / scale:.2f} {unit}"]
        if n >= 4:
            lines.append(f"  IQR:    {self.iqr / scale:.2f} {unit} "
                         f"({self._p25 / scale:.2f} to {self._p75 / scale:.2f})")
        lines.append(f"  {n} measurement{'s' if n > 1 else ''}, {self.number_per_run} runs "
                     f"{'per measurement,' if n > 1 else ','} {self.num_threads} "
                     f"thread{'s' if self.num_threads > 1 else ''}")
        if n >= 4 and not self.meets_confidence(_IQR_GROSS_WARN_THRESHOLD):
            lines.append(self._warning("This suggests significant environmental influence."))
        elif n >= 4 and not self.meets_confidence(_IQR_WARN_THRESHOLD):
            lines.append(self._warning("This could indicate system fluctuation."))
        return "\n".join(line for line in "\n".join(lines).splitlines() if line.strip() or False)

    def _warning(self, msg):
        return (f"  WARNING: Interquartile range is {self.iqr / self.median * 100:.1f}% "
                f"of the median measurement.\n           {msg}")


class Timer:
    """Time a statement, as ``torch.utils.benchmark.Timer``.

    Parameters
    ----------
    stmt, setup : str or callable
        The code to time and the code run once before it.
    globals : dict, optional
        Names ``stmt`` and ``setup`` may use.
    label, sub_label, description : str, optional
        Shown when the measurement prints.
    num_threads : int
        BLAS threads during the measurement (default 1, as PyTorch).

    Examples
    --------
    >>> import lucid
    >>> from lucid.utils.benchmark import Timer
    >>> t = Timer("x + x", globals={"x": lucid.ones(4)})
    >>> m = t.timeit(100)
    >>> m.number_per_run, m.median > 0
    (100, True)
    """

    def __init__(self, stmt="pass", setup="pass", globals=None, label=None, sub_label=None,
                 description=None, num_threads=1, timer=None, **kwargs):  # noqa: A002
        if isinstance(num_threads, bool) or not isinstance(num_threads, int) or num_threads < 1:
            raise ValueError(f"Timer: num_threads must be a positive int, got {num_threads!r}")
        self._stmt = stmt if isinstance(stmt, str) else getattr(stmt, "__name__", "<callable>")
        self._setup = setup if isinstance(setup, str) else "pass"
        self._label, self._sub_label, self._description = label, sub_label, description
        self._num_threads = num_threads
        kw = {} if timer is None else {"timer": timer}
        self._timer = _timeit.Timer(stmt=stmt, setup=setup, globals=dict(globals or {}), **kw)

    def _measure(self, number):
        return self._timer.timeit(number)

    def _with_threads(self, fn):
        from .. import _runtime

        if _runtime._threadpoolctl() is None:  # the pool can't be resized: time it as it is
            return fn()
        before = _runtime.get_num_threads()
        if before == self._num_threads:
            return fn()
        _runtime.set_num_threads(self._num_threads)
        try:
            return fn()
        finally:
            _runtime.set_num_threads(before)

    def _measurement(self, number, times):
        return Measurement(number, times, self._stmt, self._setup, self._label, self._sub_label,
                           self._description, self._num_threads)

    def timeit(self, number: int = 1000000) -> Measurement:
        """Run ``stmt`` ``number`` times (after a short warm-up) as one measurement."""
        if number < 1:
            raise ValueError(f"timeit: number must be positive, got {number}")

        def run():
            self._measure(max(number // 100, 2))  # warm-up, as PyTorch
            return self._measurement(number, [self._measure(number)])

        return self._with_threads(run)

    def _block_size(self, min_run_time):
        overhead = statistics.median(self._measure(0) for _ in range(5))
        number = 1
        while True:
            taken = self._measure(number)
            if (overhead / taken <= 1e-4 and taken >= min_run_time / 1000) or taken > min_run_time:
                return number
            if number * 10 > 2147483647:
                return number
            number *= 10

    def blocked_autorange(self, callback=None, min_run_time: float = 0.2) -> Measurement:
        """Time blocks of runs until ``min_run_time`` seconds have passed.

        The block size grows (x10) until the timer's overhead is below 0.01% of a block,
        so many replicates are taken and the median and IQR are meaningful.
        """

        def run():
            number = self._block_size(min_run_time)
            times, total = [], 0.0
            while total < min_run_time:
                spent = self._measure(number)
                times.append(spent)
                total += spent
                if callback is not None:
                    callback(number, spent)
            return self._measurement(number, times)

        return self._with_threads(run)
