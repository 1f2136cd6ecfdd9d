"""``lucid.utils.benchmark``: PyTorch's ``Timer`` (``timeit``, ``blocked_autorange``), the
``Compare`` table of many measurements, and the ``Fuzzer`` of random benchmark inputs.

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

import collections
import dataclasses
import enum
import math
import statistics
import textwrap
import timeit as _timeit

__all__ = ["Measurement", "TaskSpec", "Timer", "select_unit", "Compare", "Colorize", "Fuzzer", "FuzzedParameter",
           "FuzzedTensor", "ParameterAlias", "CopyIfCallgrind"]

_IQR_WARN_THRESHOLD, _IQR_GROSS_WARN_THRESHOLD = 0.1, 0.25  # PyTorch's thresholds
# PyTorch's constants for the significant-figure estimate Compare trims to
_MIN_CONFIDENCE_INTERVAL, _MAX_SIGNIFICANT_FIGURES = 25e-9, 4


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


def _dedent(code):
    if not isinstance(code, str):
        return code
    code = textwrap.dedent(code)
    return (code[1:] if code[:1] == "\n" else code).rstrip()


class CopyIfCallgrind:
    """A global for :class:`Timer` that PyTorch's Callgrind collection would copy into its
    subprocess (``torch.utils.benchmark.CopyIfCallgrind``). Lucid refuses Callgrind
    (:meth:`Timer.collect_callgrind`), so the timers use ``value`` itself.

    Examples
    --------
    >>> from lucid.utils.benchmark import CopyIfCallgrind, Timer
    >>> Timer("x + 1", globals={"x": CopyIfCallgrind(2)}).timeit(3).number_per_run
    3
    """

    def __init__(self, value, *, setup=None):
        self._value, self._setup = value, setup

    @property
    def value(self):
        return self._value

    @property
    def setup(self):
        return self._setup

    @staticmethod
    def unwrap_all(globals):  # noqa: A002 - PyTorch's name
        return {k: (v.value if isinstance(v, CopyIfCallgrind) else v) for k, v in globals.items()}


@dataclasses.dataclass(frozen=True)
class TaskSpec:
    """What a Measurement timed: the statement, its setup, labels, env and threads (PyTorch's)."""

    stmt: str
    setup: str
    global_setup: str = ""
    label: str | None = None
    sub_label: str | None = None
    description: str | None = None
    env: str | None = None
    num_threads: int = 1

    @property
    def title(self) -> str:
        if self.label is not None:
            return self.label + (f": {self.sub_label}" if self.sub_label else "")
        if "\n" not in self.stmt:
            return self.stmt + (f": {self.sub_label}" if self.sub_label else "")
        return f"stmt:{f' ({self.sub_label})' if self.sub_label else ''}\n{textwrap.indent(self.stmt, '  ')}"

    def setup_str(self) -> str:
        if self.setup in ("", "pass"):
            return ""
        return f"setup:\n{textwrap.indent(self.setup, '  ')}" if "\n" in self.setup else f"setup: {self.setup}"

    def summarize(self) -> str:
        sections = [self.title, self.description or "", self.setup_str()]
        return "\n".join(f"{s}\n" if "\n" in s else s for s in sections if s)


_TASK_FIELDS = tuple(f.name for f in dataclasses.fields(TaskSpec))


class Measurement:
    """Times of one statement: ``times`` (seconds per run), ``median``, ``mean``, ``iqr``.

    Attributes
    ----------
    number_per_run : int
        Runs of the statement per timed block.
    raw_times : list of float
        Seconds per block.
    task_spec : TaskSpec
        What was timed; its fields (``stmt``, ``label``, ``num_threads`` ...) read as
        attributes of the Measurement too.

    As PyTorch's, it is built from ``(number_per_run, raw_times, task_spec, metadata)``; the
    statement may also be given as a string with the other fields as keywords.
    """

    def __init__(self, number_per_run, raw_times, task_spec, metadata=None, *, setup="pass", label=None,
                 sub_label=None, description=None, num_threads=1, env=None, global_setup=""):
        if not raw_times:
            raise ValueError("Measurement: raw_times must not be empty")
        if not isinstance(task_spec, TaskSpec):
            task_spec = TaskSpec(task_spec, setup, global_setup, label, sub_label, description, env, num_threads)
        self.number_per_run, self.raw_times = number_per_run, list(raw_times)
        self.task_spec, self.metadata = task_spec, metadata
        srt = sorted(self.times)
        self._sorted = srt
        self.median = _quantile(srt, 0.5)
        self.mean = statistics.fmean(srt)
        self._p25, self._p75 = _quantile(srt, 0.25), _quantile(srt, 0.75)
        self.iqr = self._p75 - self._p25

    def __getattr__(self, name):  # the TaskSpec's fields, as PyTorch forwards them
        spec = self.__dict__.get("task_spec")
        if spec is not None and name in _TASK_FIELDS:
            return getattr(spec, name)
        raise AttributeError(f"'Measurement' object has no attribute '{name}'")

    @property
    def times(self):
        return [t / self.number_per_run for t in self.raw_times]

    def meets_confidence(self, threshold=_IQR_WARN_THRESHOLD) -> bool:
        return self.iqr / self.median < threshold

    @property
    def env(self) -> str:
        """The ``env`` the Timer was given (``"Unspecified env"`` if none): Compare's row groups."""
        return "Unspecified env" if self.task_spec.env is None else self.task_spec.env

    @property
    def as_row_name(self) -> str:
        return self.sub_label or self.stmt or "[Unknown]"

    @property
    def has_warnings(self) -> bool:
        """Whether the IQR is over 10% of the median (the repr then prints a warning)."""
        return not self.meets_confidence(_IQR_WARN_THRESHOLD)

    @property
    def significant_figures(self) -> int:
        """PyTorch's rough estimate (1 to 4): log10 of the median over a 90% confidence interval
        of the interquartile times (at least 25 ns)."""
        n = len(self._sorted)
        pts = self._sorted[n // 4:math.ceil(3 * n / 4)]
        ci = max(1.645 * statistics.pstdev(pts) / math.sqrt(len(pts)), _MIN_CONFIDENCE_INTERVAL)
        return min(max(math.floor(math.log10(self.median / ci)), 1), _MAX_SIGNIFICANT_FIGURES)

    @staticmethod
    def merge(measurements):
        """One Measurement per distinct task (statement, labels, env, threads), its times the
        union of the replicates' per-run times (``number_per_run`` 1); metadata is dropped."""
        groups = collections.defaultdict(list)
        for m in measurements:
            groups[m.task_spec].append(m)
        return [Measurement(1, [t for m in group for t in m.times], task) for task, group in groups.items()]

    @property
    def title(self) -> str:
        return self.task_spec.title

    def _summary(self) -> str:
        return self.task_spec.summarize()

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
        if not self.meets_confidence(_IQR_GROSS_WARN_THRESHOLD):  # any n, as PyTorch
            lines.append(self._warning("This suggests significant environmental influence."))
        elif not self.meets_confidence(_IQR_WARN_THRESHOLD):
            lines.append(self._warning("This could indicate system fluctuation."))
        return "\n".join(lines).strip()  # a multi-line setup is followed by a blank line, as in PyTorch

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
        Shown when the measurement prints; ``Compare`` makes one table per label, one row per
        sub_label (or stmt) and one column per description.
    env : str, optional
        An environment tag (e.g. a build): Compare shows it when results differ in it.
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
                 description=None, env=None, num_threads=1, timer=None, **kwargs):  # noqa: A002
        if isinstance(num_threads, bool) or not isinstance(num_threads, int) or num_threads < 1:
            raise ValueError(f"Timer: num_threads must be a positive int, got {num_threads!r}")
        self._stmt_is_str = isinstance(stmt, str)
        # a triple-quoted block is dedented (as PyTorch's: it would not compile indented)
        stmt, setup = _dedent(stmt), _dedent(setup)
        self._stmt = stmt if isinstance(stmt, str) else getattr(stmt, "__name__", "<callable>")
        self._setup = setup if isinstance(setup, str) else "pass"
        self._label, self._sub_label, self._description = label, sub_label, description
        self._num_threads, self._env = num_threads, env
        kw = {} if timer is None else {"timer": timer}
        self._timer = _timeit.Timer(stmt=stmt, setup=setup, globals=CopyIfCallgrind.unwrap_all(globals or {}), **kw)

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
        return Measurement(number, times, TaskSpec(self._stmt, self._setup, "", self._label, self._sub_label,
                                                   self._description, self._env, self._num_threads))

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

    def adaptive_autorange(self, threshold: float = 0.1, *, min_run_time: float = 0.01,
                           max_run_time: float = 10.0, callback=None) -> Measurement:
        """Time blocks (sized as in :meth:`blocked_autorange`) until more than 3 were taken,
        ``min_run_time`` seconds have passed and the IQR is below ``threshold`` of the median,
        or ``max_run_time`` seconds have passed."""

        def run():
            number = self._block_size(0.05)  # PyTorch sizes blocks for 50 ms here
            times, total = [], 0.0
            while True:
                spent = self._measure(number)
                times.append(spent)
                total += spent
                if callback is not None:
                    callback(number, spent)
                steady = len(times) > 3 and self._measurement(number, times).meets_confidence(threshold)
                if (total >= min_run_time and steady) or (max_run_time and total > max_run_time):
                    return self._measurement(number, times)

        return self._with_threads(run)

    def collect_callgrind(self, number: int = 100, *, repeats=None, collect_baseline: bool = True,
                          retain_out_file: bool = False):
        """Refused: Callgrind counts instructions through hooks compiled into PyTorch's C++ core
        (``torch._C._valgrind_toggle``), which Lucid does not have.

        The arguments are checked and ``stmt`` run once first, as PyTorch does, so a broken
        statement reports its own error; then :class:`OSError` is raised, PyTorch's error
        where Valgrind is unsupported. Time with :meth:`blocked_autorange` instead.

        Examples
        --------
        >>> from lucid.utils.benchmark import Timer
        >>> try:
        ...     Timer("1 + 1").collect_callgrind()
        ... except OSError as e:
        ...     print(str(e).split(":")[0])
        Timer.collect_callgrind
        """
        if not self._stmt_is_str:
            raise ValueError("Timer.collect_callgrind: only a string `stmt` is supported")
        if repeats is not None and repeats < 1:
            raise ValueError(f"Timer.collect_callgrind: repeats must be >= 1, got {repeats}")
        self._measure(1)  # a faulty stmt or setup raises here, as in PyTorch
        raise OSError("Timer.collect_callgrind: Valgrind is not supported by Lucid (it needs PyTorch's compiled "
                      "Callgrind hooks); use timeit, blocked_autorange or adaptive_autorange")


# ------------------------------------------------------------------------------------ Compare

_BEST, _GOOD, _BAD, _VERY_BAD = "\033[92m", "\033[34m", "\033[2m\033[91m", "\033[31m"
_BOLD, _TERMINATE = "\033[1m", "\033[0m"
_UNIT_NAMES = {"ns": "nanosecond", "us": "microsecond", "ms": "millisecond", "s": "second"}


class Colorize(enum.Enum):
    NONE = "none"
    COLUMNWISE = "columnwise"
    ROWWISE = "rowwise"


def _trim_sigfig(x, n):
    """``x`` rounded to ``n`` significant figures (3.14159, 2 -> 3.1)."""
    scale = 10 ** (math.ceil(math.log10(abs(x))) - n)
    return float(round(x / scale) * scale)


def _ordered_unique(items):
    return list(dict.fromkeys(items))


class _Column:
    """One description's cells: a shared number format (digits from the largest value and,
    when trimming, the fewest significant figures any cell supports)."""

    def __init__(self, grouped, scale, trim, highlight):
        self._grouped = grouped
        flat = [m for group in grouped for m in group]
        self._trim = trim
        self._highlight = highlight and any(m.has_warnings for m in flat if m)
        leading = [math.ceil(math.log10(m.median / scale)) if m else None for m in flat]
        unit_digits = max(d for d in leading if d is not None)
        decimals = (min(max(m.significant_figures - d, 0) for d, m in zip(leading, flat) if m is not None)
                    if trim else 1)
        length = unit_digits + decimals + (1 if decimals else 0)
        self._template = f"{{:>{length}.{decimals}f}}{{:>{7 if self._highlight else 0}}}"

    def results_for(self, group):
        return self._grouped[group]

    def num_to_str(self, value, sigfigs, spread):
        if value is None:
            return " " * len(self.num_to_str(1, sigfigs, None))
        if self._trim:
            value = _trim_sigfig(value, sigfigs)
        return self._template.format(value, f" (! {spread * 100:.0f}%)" if self._highlight and spread is not None
                                     else "")


class _Row:
    def __init__(self, results, group, render_env, env_len, scale, colorize, num_threads):
        self._results, self._group, self._render_env, self._env_len = results, group, render_env, env_len
        self._scale, self._colorize, self._num_threads = scale, colorize, num_threads
        self._columns = ()

    def strings(self):
        first = next(r for r in self._results if r is not None)
        env = (f"({first.env})" if self._render_env else "").ljust(self._env_len + 4)
        out = ["  " + env + first.as_row_name]
        for m, col in zip(self._results, self._columns):
            out.append(col.num_to_str(None, 1, None) if m is None else
                       col.num_to_str(m.median / self._scale, m.significant_figures,
                                      m.iqr / m.median if m.has_warnings else None))
        return out

    def separator(self, width):
        return [f"{self._num_threads} threads: ".ljust(width, "-")] if self._num_threads is not None else []

    @staticmethod
    def _color(segment, value, best):
        if value <= best * 1.01 or value <= best + 100e-9:
            return _BEST + _BOLD + segment + _TERMINATE * 2
        if value <= best * 1.1:
            return _GOOD + _BOLD + segment + _TERMINATE * 2
        if value >= best * 5:
            return _VERY_BAD + _BOLD + segment + _TERMINATE * 2
        if value >= best * 2:
            return _BAD + segment + _TERMINATE * 2
        return segment

    def finalize(self, strings, widths):
        if self._colorize == Colorize.ROWWISE:
            best = [min(r.median for r in self._results if r is not None)] * len(strings)
        elif self._colorize == Colorize.COLUMNWISE:
            best = [min((r.median for r in c.results_for(self._group) if r is not None), default=None)
                    for c in self._columns]
        else:
            best = [-1] * len(strings)
        cells = [strings[0].ljust(widths[0])]
        for s, w, m, b in zip(strings[1:], widths[1:], self._results, best):
            s = s.center(w)
            if self._colorize != Colorize.NONE and m is not None and b is not None:
                s = self._color(s, m.median, b)
            cells.append(s)
        return cells


def _render_table(results, colorize, trim, highlight):
    """One label's table: rows (num_threads, env, sub_label or stmt), columns description."""
    unit, scale = select_unit(min(r.median for r in results))
    row_of = lambda m: (m.num_threads, m.env, m.as_row_name)  # noqa: E731
    row_keys = _ordered_unique(row_of(m) for m in results)
    row_keys.sort(key=lambda k: k[:2])  # stable: rows keep their first-seen order in a thread group
    col_keys = _ordered_unique(m.description for m in results)
    cells = [[None] * len(col_keys) for _ in row_keys]
    rpos, cpos = {k: i for i, k in enumerate(row_keys)}, {k: i for i, k in enumerate(col_keys)}
    for m in results:
        cells[rpos[row_of(m)]][cpos[m.description]] = m
    envs = {m.env for m in results}
    render_env = len(envs) > 1
    env_len = max(len(e) for e in envs) if render_env else 0
    rows, by_group, prior_threads, prior_env = [], [], -1, ""
    for (threads, env, _), row in zip(row_keys, cells):
        new_group = threads != prior_threads
        if new_group:
            prior_threads, prior_env = threads, ""
            by_group.append([])
        rows.append(_Row(row, len(by_group) - 1, render_env and env != prior_env, env_len, scale, colorize,
                         threads if new_group else None))
        by_group[-1].append(row)
        prior_env = env
    columns = tuple(_Column([tuple(r[i] for r in g) for g in by_group], scale, trim, highlight)
                    for i in range(len(col_keys)))
    for r in rows:
        r._columns = columns
    strings = [[""] + [c if c is not None else "" for c in col_keys]] + [r.strings() for r in rows]
    ncols = max(len(s) for s in strings)
    for s in strings:
        s.extend([""] * (ncols - len(s)))
    widths = [max(len(c) for c in col) for col in zip(*strings)]
    lines = ["  |  ".join(c.center(w) for c, w in zip(strings[0], widths))]
    width = len(lines[0])
    for s, r in zip(strings[1:], rows):
        lines.extend(r.separator(width))
        lines.append("  |  ".join(r.finalize(s, widths)))
    label = results[0].label
    warn = highlight and any(m.has_warnings for m in results)
    return (f"[{(' ' + (label or '') + ' ').center(width - 2, '-')}]\n" + "\n".join(lines) +
            f"\n\nTimes are in {_UNIT_NAMES[unit]}s ({unit}).\n" +
            ("(! XX%) Measurement has high variance, where XX is the IQR / median * 100.\n" if warn else ""))


class Compare:
    """A table of many measurements, as ``torch.utils.benchmark.Compare``.

    Replicates of one task are merged first (``Measurement.merge``). Then one table per
    ``label``; in it one row per ``sub_label`` (or ``stmt``), grouped by ``num_threads`` (a
    ``"N threads: ---"`` separator) and ``env`` (shown when the results differ in it), and one
    column per ``description``. Times are medians in the unit that suits the fastest result.

    Parameters
    ----------
    results : list of Measurement

    Examples
    --------
    >>> from lucid.utils.benchmark import Compare, Measurement
    >>> ms = [Measurement(1, [t * 1e-6], "f(x)", label="add", sub_label=s, description=d)
    ...       for s, d, t in [("[1, 2]", "lucid", 2.0), ("[1, 2]", "numpy", 1.5), ("[3, 4]", "lucid", 4.0)]]
    >>> for line in str(Compare(ms)).splitlines():
    ...     print(line.rstrip())
    [------------ add -------------]
                  |  lucid  |  numpy
    1 threads: ---------------------
          [1, 2]  |   2.0   |   1.5
          [3, 4]  |   4.0   |
    <BLANKLINE>
    Times are in microseconds (us).
    """

    def __init__(self, results):
        self._results = []
        self.extend_results(results)
        self._trim_significant_figures = False
        self._colorize = Colorize.NONE
        self._highlight_warnings = False

    def __str__(self):
        return "\n".join(self._render())

    def extend_results(self, results):
        """Add measurements (each must be a ``Measurement``)."""
        results = list(results)
        for r in results:
            if not isinstance(r, Measurement):
                raise ValueError(f"Compare: expected an instance of `Measurement`, got {type(r)} instead.")
        self._results.extend(results)

    def trim_significant_figures(self):
        """Print each cell only to the significant figures its spread supports."""
        self._trim_significant_figures = True

    def colorize(self, rowwise=False):
        """Colour cells against the best of their column (or of their row, ``rowwise``)."""
        self._colorize = Colorize.ROWWISE if rowwise else Colorize.COLUMNWISE

    def highlight_warnings(self):
        """Mark cells whose IQR is over 10% of their median with ``(! XX%)``."""
        self._highlight_warnings = True

    def print(self):
        """Print the tables."""
        print(str(self))

    def _render(self):
        by_label = collections.defaultdict(list)
        for m in Measurement.merge(self._results):
            by_label[m.label].append(m)
        return [_render_table(group, self._colorize, self._trim_significant_figures, self._highlight_warnings)
                for group in by_label.values()]


# ------------------------------------------------------------------------------------- Fuzzer

_DISTRIBUTIONS = ("loguniform", "uniform")


class _DistributionError(ValueError, AssertionError):
    """A bad ``FuzzedParameter`` distribution: PyTorch asserts (AssertionError); Lucid raised
    ValueError before, so both catch it."""


class FuzzedParameter:
    """A named random parameter for :class:`Fuzzer`, as ``torch.utils.benchmark.FuzzedParameter``.

    Parameters
    ----------
    name : str
        The name tensors' sizes and constraints refer to.
    minval, maxval : int or float
        Inclusive bounds (not with a dict ``distribution``).
    distribution : {'loguniform', 'uniform'} or dict
        'loguniform': an int uniform in log2 space; 'uniform': an int if both bounds are ints,
        else a float; a dict: ``{value: probability}`` (probabilities summing to one; a value
        may be a :class:`ParameterAlias`).
    strict : bool
        Drawn once per sample and kept while the other parameters are redrawn to meet the
        constraints (so the constraints don't skew it).
    """

    def __init__(self, name, minval=None, maxval=None, distribution=None, strict=False):
        self._name, self._minval, self._maxval = name, minval, maxval
        self._distribution = self._check_distribution(distribution)
        self.strict = strict

    @property
    def name(self):
        return self._name

    def _check_distribution(self, distribution):
        if not isinstance(distribution, dict):
            if distribution not in _DISTRIBUTIONS:
                raise _DistributionError(f"FuzzedParameter: unknown distribution {distribution!r}, expected "
                                 f"'loguniform', 'uniform' or a dict")
            if self._minval is None or self._maxval is None:
                raise _DistributionError(f"FuzzedParameter: {distribution!r} needs minval and maxval")
            return distribution
        if any(p < 0 for p in distribution.values()):
            raise _DistributionError("FuzzedParameter: probabilities cannot be negative")
        if abs(sum(distribution.values()) - 1) > 1e-5:
            raise _DistributionError("FuzzedParameter: distribution is not normalized")
        if self._minval is not None or self._maxval is not None:
            raise _DistributionError("FuzzedParameter: with a custom distribution, minval and maxval must be None")
        return distribution

    def sample(self, state):
        """One value drawn with ``state`` (a ``numpy.random.RandomState``)."""
        import numpy as np

        if self._distribution == "loguniform":
            out = int(2 ** state.uniform(low=np.log2(self._minval), high=np.log2(self._maxval)))
            return min(max(out, self._minval), self._maxval)
        if self._distribution == "uniform":
            if isinstance(self._minval, int) and isinstance(self._maxval, int):
                return int(state.randint(low=self._minval, high=self._maxval + 1))
            return state.uniform(low=self._minval, high=self._maxval)
        index = state.choice(np.arange(len(self._distribution)), p=tuple(self._distribution.values()))
        return list(self._distribution.keys())[index]


class ParameterAlias:
    """A parameter value that takes another parameter's: ``{1: 0.5, ParameterAlias("x_len"): 0.5}``
    makes a size sometimes broadcast and sometimes match. Chains are allowed, cycles are not."""

    def __init__(self, alias_to):
        self.alias_to = alias_to

    def __repr__(self):
        return f"ParameterAlias[alias_to: {self.alias_to}]"


class FuzzedTensor:
    """A random lucid tensor for :class:`Fuzzer` whose shape comes from the parameters, as
    ``torch.utils.benchmark.FuzzedTensor``.

    Parameters
    ----------
    name : str
    size : tuple of int or str
        Literal sizes or parameter names.
    steps : tuple of int or str, optional
        Allocate ``size * steps`` and slice ``[::step]`` (a strided tensor).
    probability_contiguous : float
        Chance of a contiguous layout; otherwise the memory order is a random permutation.
    min_elements, max_elements, max_allocation_bytes : int, optional
        Parameter sets outside these bounds are redrawn.
    dim_parameter : str, optional
        A parameter giving the number of dims (``size``/``steps`` truncated or padded with 1s).
    dtype : lucid dtype
        Floats and complex are ``rand`` in [0, 1), integers ``randint(1, 127)``.
    cuda : bool
        Move the tensor to the CUDA device.
    tensor_constructor : callable, optional
        ``f(size=, dtype=, **params)`` returning the tensor to slice.
    """

    def __init__(self, name, size, steps=None, probability_contiguous=0.5, min_elements=None, max_elements=None,
                 max_allocation_bytes=None, dim_parameter=None, roll_parameter=None, dtype=None, cuda=False,
                 tensor_constructor=None):
        self._name, self._size, self._steps = name, size, steps
        self._probability_contiguous = probability_contiguous
        self._min_elements, self._max_elements = min_elements, max_elements
        self._max_allocation_bytes, self._dim_parameter = max_allocation_bytes, dim_parameter
        self._dtype, self._cuda, self._tensor_constructor = dtype, cuda, tensor_constructor

    @property
    def name(self):
        return self._name

    def _lucid_dtype(self):
        import lucid

        return lucid.float32 if self._dtype is None else self._dtype

    @staticmethod
    def default_tensor_constructor(size, dtype, **kwargs):
        import lucid

        if dtype.is_floating_point or dtype.is_complex:
            return lucid.rand(*size, dtype=dtype)
        return lucid.randint(1, 127, size, dtype=dtype)

    def _get_size_and_steps(self, params):
        dim = params[self._dim_parameter] if self._dim_parameter is not None else len(self._size)

        def resolve(values):
            values = tuple(params.get(v, v) for v in values)[:dim]
            return values + (1,) * (dim - len(values))

        size, steps = resolve(self._size), resolve(self._steps or ())
        return size, steps, tuple(s * t for s, t in zip(size, steps))

    def _make_tensor(self, params, state):
        import numpy as np

        size, steps, allocation = self._get_size_and_steps(params)
        constructor = self._tensor_constructor or self.default_tensor_constructor
        raw = constructor(size=allocation, dtype=self._lucid_dtype(), **params)
        if self._cuda:
            raw = raw.cuda()
        dim = len(size)
        order = np.arange(dim)
        if state.rand() > self._probability_contiguous:
            while dim > 1 and np.all(order == np.arange(dim)):
                order = state.permutation(raw.ndim)
            raw = raw.permute(*[int(o) for o in order]).contiguous()
            raw = raw.permute(*[int(o) for o in np.argsort(order)])
        tensor = raw[tuple(slice(0, n * s, s) for n, s in zip(size, steps))]
        return tensor, {"numel": int(tensor.numel()), "order": order, "steps": steps,
                        "is_contiguous": tensor.is_contiguous(), "dtype": str(self._lucid_dtype())}

    def satisfies_constraints(self, params):
        import numpy as np

        size, _, allocation = self._get_size_and_steps(params)
        numel = math.prod(int(s) for s in size)  # Python ints: np.prod could overflow
        nbytes = math.prod(int(s) for s in allocation) * np.dtype(self._lucid_dtype()).itemsize
        above = lambda a, b: a is not None and b is not None and a > b  # noqa: E731
        return not (above(numel, self._max_elements) or above(self._min_elements, numel)
                    or above(nbytes, self._max_allocation_bytes))


class Fuzzer:
    """Random, reproducible benchmark inputs, as ``torch.utils.benchmark.Fuzzer``.

    Each of ``take(n)``'s ``n`` steps draws the parameters (redrawing until every constraint
    and tensor bound holds) and then makes the tensors; it yields ``(tensors,
    tensor_properties, params)``. The parameters come from ``numpy.random.RandomState(seed)``,
    the same stream PyTorch's Fuzzer uses, so a seed gives PyTorch's parameters; tensor values
    come from lucid's generator, seeded from that stream.

    Parameters
    ----------
    parameters : list of FuzzedParameter (or lists of them)
    tensors : list of FuzzedTensor (or lists of them)
    constraints : list of callable, optional
        ``f(**params) -> bool``; a False redraws.
    seed : int, optional

    Examples
    --------
    >>> from lucid.utils.benchmark import Fuzzer, FuzzedParameter, FuzzedTensor
    >>> fuzzer = Fuzzer(parameters=[FuzzedParameter("n", 2, 8, distribution="uniform")],
    ...                 tensors=[FuzzedTensor("x", size=("n", 3), probability_contiguous=1.0)], seed=0)
    >>> [(tuple(t["x"].shape), p["n"]) for t, _, p in fuzzer.take(3)]
    [((7, 3), 7), ((5, 3), 5), ((3, 3), 3)]
    """

    def __init__(self, parameters, tensors, constraints=None, seed=None):
        import numpy as np

        if seed is None:
            seed = int(np.random.RandomState().randint(0, 2 ** 32 - 1, dtype=np.int64))
        self._seed = seed
        self._parameters = self._unpack(parameters, FuzzedParameter)
        self._tensors = self._unpack(tensors, FuzzedTensor)
        self._constraints = constraints or ()
        overlap = {p.name for p in self._parameters} & {t.name for t in self._tensors}
        if overlap:
            raise ValueError(f"Fuzzer: duplicate names in parameters and tensors: {overlap}")
        self._rejections = self._total_generated = 0

    @staticmethod
    def _unpack(values, cls):
        return tuple(v for item in values for v in ([item] if isinstance(item, cls) else item))

    def take(self, n):
        """Yield ``n`` ``(tensors, tensor_properties, params)`` triples."""
        import numpy as np

        import lucid

        state = np.random.RandomState(self._seed)
        lucid.manual_seed(int(state.randint(low=0, high=2 ** 63, dtype=np.int64)))
        for _ in range(n):
            params = self._generate(state)
            tensors, properties = {}, {}
            for t in self._tensors:
                tensors[t.name], properties[t.name] = t._make_tensor(params, state)
            yield tensors, properties, params

    @property
    def rejection_rate(self):
        """Fraction of drawn parameter sets rejected so far."""
        return self._rejections / self._total_generated if self._total_generated else 0.0

    def _generate(self, state):
        strict = {}
        for _ in range(1000):
            params = {}
            for p in self._parameters:
                if p.strict and p.name in strict:
                    params[p.name] = strict[p.name]
                else:
                    params[p.name] = p.sample(state)
                    if p.strict:
                        strict[p.name] = params[p.name]
            params = self._resolve_aliases(params)
            self._total_generated += 1
            if not all(f(params) for f in self._constraints) or \
                    not all(t.satisfies_constraints(params) for t in self._tensors):
                self._rejections += 1
                continue
            return params
        raise ValueError("Fuzzer: failed to generate a set of valid parameters.")

    @staticmethod
    def _resolve_aliases(params):
        params = dict(params)
        count = sum(isinstance(v, ParameterAlias) for v in params.values())
        while count:
            for k in list(params):
                if isinstance(params[k], ParameterAlias):
                    params[k] = params[params[k].alias_to]
            new = sum(isinstance(v, ParameterAlias) for v in params.values())
            if new == count:
                raise ValueError(f"Fuzzer: ParameterAlias cycle detected\n{params}")
            count = new
        return params
