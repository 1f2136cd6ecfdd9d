"""``lucid.profiler`` (``torch.profiler``; also ``lucid.autograd.profiler``): where the time goes.

``with profile(record_shapes=True, profile_memory=True) as prof:`` records every primitive
evaluated (forward, ``lucid::<op>``), every backward node (``MulBackward0`` ...) and every
``record_function("name")`` range, with wall time, input shapes and the bytes of the
arrays each op produced. ``prof.key_averages().table(sort_by="self_cpu_time_total",
row_limit=10)`` prints PyTorch's table; ``prof.export_chrome_trace(path)`` writes the JSON
trace-event format that chrome://tracing and Perfetto open.

NOTE [Profiler costs nothing when off]: nothing on the eager path checks for a profiler.
Entering ``profile`` swaps every registered primitive's ``impl`` for a timing wrapper and
``Node.apply``/``FunctionNode.apply`` for timed versions; leaving restores them. The
backward engine reads one global per backward call (``PROFILING``) to leave its inlined
fast path (which bypasses ``Node.apply``) while profiling.
"""
from __future__ import annotations

import enum
import functools
import os
import threading
import time

from ._core import primitive
from ._core.grad_mode import PROFILING

__all__ = ["profile", "record_function", "ProfilerActivity", "ProfilerAction", "schedule",
           "tensorboard_trace_handler", "EventList", "FunctionEvent", "FunctionEventAvg"]

_CURRENT = [None]  # the active _Recorder


class ProfilerActivity(enum.Enum):
    """What to profile; Lucid runs on the CPU, so only ``CPU`` records anything."""

    CPU = "cpu"
    CUDA = "cuda"


class ProfilerAction(enum.Enum):
    """What a :func:`schedule` asks the profiler to do at one step."""

    NONE = 0
    WARMUP = 1
    RECORD = 2
    RECORD_AND_SAVE = 3


_RECORDING = (ProfilerAction.RECORD, ProfilerAction.RECORD_AND_SAVE)


def schedule(*, wait, warmup, active, repeat=0, skip_first=0, skip_first_wait=0):
    """A profiling schedule for ``profile(schedule=...)``: which steps to record.

    After ``skip_first`` steps, cycles of ``wait`` idle steps, ``warmup`` steps and
    ``active`` recorded steps repeat ``repeat`` times (0: until the loop ends). The last
    active step of each cycle is ``RECORD_AND_SAVE``: when the profiler steps past it, the
    cycle's trace is handed to ``on_trace_ready``. ``skip_first_wait`` drops the first
    cycle's wait. Lucid records nothing during warm-up (it has no tracer to warm up).

    Examples
    --------
    >>> from lucid.profiler import schedule
    >>> s = schedule(wait=1, warmup=1, active=2, repeat=1)
    >>> [s(i).name for i in range(5)]
    ['NONE', 'WARMUP', 'RECORD', 'RECORD_AND_SAVE', 'NONE']
    """
    counts = {"wait": wait, "warmup": warmup, "active": active, "repeat": repeat, "skip_first": skip_first,
              "skip_first_wait": skip_first_wait}
    for name, value in counts.items():
        if isinstance(value, bool) or not isinstance(value, int):
            raise TypeError(f"schedule: {name} must be an int, got {type(value).__name__}")
    if min(wait, warmup, repeat, skip_first, skip_first_wait) < 0 or active <= 0:
        raise ValueError(f"schedule: invalid arguments wait={wait} (need >= 0), warmup={warmup} (need >= 0), "
                         f"active={active} (need > 0), repeat={repeat} (need >= 0), "
                         f"skip_first={skip_first} (need >= 0)")
    cycle = wait + warmup + active

    def action(step):
        if step < 0:
            raise ValueError(f"schedule: step must be >= 0, got {step}")
        if step < skip_first:
            return ProfilerAction.NONE
        # skip_first_wait starts the first cycle at its warm-up: every cycle shifts by `wait`
        k = step - skip_first + (wait if skip_first_wait else 0)
        if repeat and k >= repeat * cycle:
            return ProfilerAction.NONE
        phase = k % cycle
        if phase < wait:
            return ProfilerAction.NONE
        if phase < wait + warmup:
            return ProfilerAction.WARMUP
        return ProfilerAction.RECORD_AND_SAVE if phase == cycle - 1 else ProfilerAction.RECORD

    return action


def tensorboard_trace_handler(dir_name, worker_name=None, use_gzip=False):
    """An ``on_trace_ready`` handler writing each trace to ``dir_name`` (TensorBoard's layout).

    Files are named ``{worker_name}.{time in ns}.pt.trace.json`` (``.gz`` with ``use_gzip``),
    as PyTorch's are; ``worker_name`` defaults to ``{hostname}_{pid}``. The files are the
    chrome trace format of :meth:`profile.export_chrome_trace`; TensorBoard's profiler
    plugin (or Perfetto) opens them. No TensorBoard is needed to write them.

    Examples
    --------
    >>> import os, tempfile, lucid
    >>> from lucid.profiler import profile, tensorboard_trace_handler
    >>> d = tempfile.mkdtemp()
    >>> with profile(on_trace_ready=tensorboard_trace_handler(d, worker_name="w0")):
    ...     _ = lucid.ones(2) + 1
    >>> [f.split(".")[0] for f in os.listdir(d)], os.listdir(d)[0].endswith(".pt.trace.json")
    (['w0'], True)
    """
    def handler(prof):
        import socket

        os.makedirs(dir_name, exist_ok=True)
        name = worker_name or f"{socket.gethostname()}_{os.getpid()}"
        path = os.path.join(dir_name, f"{name}.{time.time_ns()}.pt.trace.json" + (".gz" if use_gzip else ""))
        prof.export_chrome_trace(path)

    return handler


# --------------------------------------------------------------- events


class FunctionEvent:
    """One recorded call: times in microseconds, memory in bytes."""

    __slots__ = ("name", "start_us", "cpu_time_total", "self_cpu_time_total", "input_shapes",
                 "cpu_memory_usage", "thread", "category", "stack")

    def __init__(self, name, start_us, total, self_time, shapes, mem, thread, category, stack=()):
        self.name, self.start_us, self.cpu_time_total = name, start_us, total
        self.self_cpu_time_total, self.input_shapes = self_time, shapes
        self.cpu_memory_usage, self.thread, self.category = mem, thread, category
        self.stack = list(stack)  # "file(line): function", innermost first (with_stack=True)

    key = property(lambda self: self.name)
    count = 1
    cpu_time = property(lambda self: self.cpu_time_total)
    self_cpu_memory_usage = property(lambda self: self.cpu_memory_usage)

    def __repr__(self):
        return (f"<FunctionEvent {self.name} cpu_time_total={self.cpu_time_total:.3f}us "
                f"self={self.self_cpu_time_total:.3f}us shapes={self.input_shapes}>")


class FunctionEventAvg:
    """Events of one name (and input shapes, if grouped by them), summed."""

    def __init__(self, key, input_shapes=None, stack=()):
        self.key, self.input_shapes, self.stack = key, input_shapes, list(stack)
        self.count = 0
        self.cpu_time_total = self.self_cpu_time_total = 0.0
        self.cpu_memory_usage = self.self_cpu_memory_usage = 0

    def add(self, ev):
        self.count += 1
        self.cpu_time_total += ev.cpu_time_total
        self.self_cpu_time_total += ev.self_cpu_time_total
        self.cpu_memory_usage += ev.cpu_memory_usage
        self.self_cpu_memory_usage += ev.cpu_memory_usage
        return self

    @property
    def cpu_time(self):
        """Average total time per call (us)."""
        return self.cpu_time_total / self.count if self.count else 0.0

    def __repr__(self):
        return (f"<FunctionEventAvg key={self.key} count={self.count} "
                f"cpu_time_total={self.cpu_time_total:.3f}us self_cpu_time_total={self.self_cpu_time_total:.3f}us>")


_SORT_KEYS = {"cpu_time_total", "self_cpu_time_total", "cpu_time", "count", "cpu_memory_usage",
              "self_cpu_memory_usage"}


class EventList(list):
    """A list of events (or averages) with PyTorch's ``table`` and ``key_averages``."""

    def __init__(self, items=(), *, record_shapes=False, profile_memory=False):
        super().__init__(items)
        self._shapes, self._memory = record_shapes, profile_memory

    def key_averages(self, group_by_input_shape=False, group_by_stack_n=0):
        """Events summed by name (and by input shapes, and by their ``group_by_stack_n``
        innermost stack frames, recorded with ``with_stack=True``)."""
        groups = {}
        for ev in self:
            shapes = str(ev.input_shapes) if group_by_input_shape else None
            stack = tuple(ev.stack[:group_by_stack_n]) if group_by_stack_n > 0 else ()
            k = (ev.name, shapes, stack)
            if k not in groups:
                groups[k] = FunctionEventAvg(ev.name, ev.input_shapes if group_by_input_shape else None, stack)
            groups[k].add(ev)
        return EventList(groups.values(), record_shapes=group_by_input_shape and self._shapes,
                         profile_memory=self._memory)

    def table(self, sort_by=None, row_limit=100, max_name_column_width=55, top_level_events_only=False):
        """The events as a text table like ``torch.profiler``'s (times in readable units)."""
        if sort_by is not None and sort_by not in _SORT_KEYS:
            raise ValueError(f"table: sort_by must be one of {sorted(_SORT_KEYS)}, got {sort_by!r}")
        rows = list(self)
        if sort_by is not None:
            rows.sort(key=lambda e: getattr(e, sort_by), reverse=True)
        if row_limit is not None and row_limit >= 0:
            rows = rows[:row_limit]
        self_total = sum(e.self_cpu_time_total for e in self) or 1.0
        heads = ["Name", "Self CPU %", "Self CPU", "CPU total %", "CPU total", "CPU time avg", "# of Calls"]
        if self._memory:
            heads += ["CPU Mem", "Self CPU Mem"]
        if self._shapes:
            heads.append("Input Shapes")
        stacks = any(getattr(e, "stack", None) for e in rows)
        if stacks:
            heads.append("Source Location")
        body = []
        for e in rows:
            name = e.key if len(e.key) <= max_name_column_width else e.key[:max_name_column_width - 3] + "..."
            row = [name, f"{100 * e.self_cpu_time_total / self_total:.2f}%", _fmt_time(e.self_cpu_time_total),
                   f"{100 * e.cpu_time_total / self_total:.2f}%", _fmt_time(e.cpu_time_total),
                   _fmt_time(e.cpu_time), str(e.count)]
            if self._memory:
                row += [_fmt_mem(e.cpu_memory_usage), _fmt_mem(e.self_cpu_memory_usage)]
            if self._shapes:
                row.append(str(e.input_shapes if e.input_shapes is not None else []))
            if stacks:  # as PyTorch: the innermost frame on the row, the callers below it
                row.append(e.stack[0] if e.stack else "")
            body.append(row)
            for frame in (e.stack[1:] if stacks else ()):
                body.append([""] * (len(heads) - 1) + [frame])
        widths = [max([len(h)] + [len(r[i]) for r in body]) for i, h in enumerate(heads)]
        line = "-" * (sum(widths) + 2 * (len(widths) - 1))

        def fmt(cells):
            return "  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(cells, widths)))

        out = [line, fmt(heads), line] + [fmt(r) for r in body] + [line,
               f"Self CPU time total: {_fmt_time(sum(e.self_cpu_time_total for e in self))}"]
        return "\n".join(out)

    def __str__(self):
        return self.table()


def _fmt_time(us):
    if us >= 1e6:
        return f"{us / 1e6:.3f}s"
    if us >= 1e3:
        return f"{us / 1e3:.3f}ms"
    return f"{us:.3f}us"


def _fmt_mem(b):
    for unit, size in (("Gb", 1 << 30), ("Mb", 1 << 20), ("Kb", 1 << 10)):
        if abs(b) >= size:
            return f"{b / size:.2f} {unit}"
    return f"{b} b"


# ------------------------------------------------------------- recorder


class _Recorder:
    """Collects raw events: (name, start_ns, end_ns, child_ns, shapes, bytes, thread, category, stack)."""

    def __init__(self, record_shapes, profile_memory, with_stack=False):
        self.record_shapes, self.profile_memory, self.with_stack = record_shapes, profile_memory, with_stack
        self.raw = []
        self.local = threading.local()
        self.t0 = time.perf_counter_ns()

    def stack(self):
        s = getattr(self.local, "stack", None)
        if s is None:
            s = self.local.stack = []
        return s

    def timed(self, name, category, shapes, fn, *args):
        """Run ``fn(*args)`` as one event; returns its result."""
        stack = self.stack()
        frame = [0]
        stack.append(frame)
        start = time.perf_counter_ns()
        try:
            out = fn(*args)
        finally:
            end = time.perf_counter_ns()
            stack.pop()
            if stack:
                stack[-1][0] += end - start
        mem = _nbytes(out) if self.profile_memory else 0
        stack = _user_stack() if self.with_stack else ()
        self.raw.append((name, start, end, frame[0], shapes, mem, threading.get_ident(), category, stack))
        return out


_PKG = os.path.dirname(os.path.abspath(__file__)) + os.sep


def _user_stack():
    """The Python frames outside Lucid that led to this event, innermost first."""
    import sys

    out, f = [], sys._getframe(2)
    while f is not None:
        path = f.f_code.co_filename
        if not os.path.abspath(path).startswith(_PKG):
            out.append(f"{path}({f.f_lineno}): {f.f_code.co_name}")
        f = f.f_back
    return tuple(out)


def _nbytes(out):
    if isinstance(out, (tuple, list)):
        return sum(_nbytes(o) for o in out)
    n = getattr(out, "nbytes", None)
    if n is None:
        data = getattr(out, "_data", None)
        n = getattr(data, "nbytes", 0)
    return int(n)


def _shapes(values):
    return [list(v.shape) if hasattr(v, "shape") else [] for v in values]


def _timed_impl(prim, impl):
    name = "lucid::" + prim.name

    @functools.wraps(impl)
    def run(*arrays, **params):
        rec = _CURRENT[0]
        if rec is None:  # a call racing the end of profiling
            return impl(*arrays, **params)
        shapes = _shapes(arrays) if rec.record_shapes else None
        return rec.timed(name, "cpu_op", shapes, lambda: impl(*arrays, **params))

    run._lucid_untimed = impl
    return run


def _timed_apply(apply):
    def timed(node, grads, tensor_mode):
        rec = _CURRENT[0]
        if rec is None:
            return apply(node, grads, tensor_mode)
        shapes = _shapes([g for g in grads if g is not None]) if rec.record_shapes else None
        return rec.timed(node.name(), "backward", shapes, apply, node, grads, tensor_mode)

    timed._lucid_untimed = apply
    return timed


def _install():
    from .autograd.engine import Node
    from .autograd.function import FunctionNode

    for prim in list(primitive.REGISTRY.values()):
        prim.impl = _timed_impl(prim, prim.impl)
    for cls in (Node, FunctionNode):
        cls.apply = _timed_apply(cls.__dict__["apply"])
    PROFILING[0] = 1


def _uninstall():
    from .autograd.engine import Node
    from .autograd.function import FunctionNode

    PROFILING[0] = 0
    for prim in primitive.REGISTRY.values():
        inner = getattr(prim.impl, "_lucid_untimed", None)
        if inner is not None:
            prim.impl = inner
    for cls in (Node, FunctionNode):
        inner = getattr(cls.__dict__["apply"], "_lucid_untimed", None)
        if inner is not None:
            cls.apply = inner


# --------------------------------------------------------------- public


class profile:
    """Profile everything Lucid runs inside the ``with`` block (all threads).

    Parameters
    ----------
    enabled : bool
        ``False`` makes the context a no-op (``torch.autograd.profiler.profile``'s flag).
    activities : iterable of ProfilerActivity, optional
        Accepted for PyTorch compatibility; CPU is what Lucid records.
    record_shapes : bool
        Record the input shapes of each op (``Input Shapes`` column; ``group_by_input_shape``).
    profile_memory : bool
        Record the bytes of the arrays each op produced (``CPU Mem`` columns).
    schedule : callable, optional
        ``step -> ProfilerAction`` (see :func:`schedule`): with one, only the steps it marks
        ``RECORD``/``RECORD_AND_SAVE`` are recorded, counted by :meth:`step`, and each finished
        cycle goes to ``on_trace_ready``; the results (``events``, ``key_averages``) are those
        of the last cycle. Without one, the whole block is recorded.
    on_trace_ready : callable, optional
        Called with the profiler when a recorded cycle ends (or the block exits while recording).
    with_stack : bool
        Record the Python frames (outside Lucid) that led to each event: ``event.stack``,
        ``key_averages(group_by_stack_n=n)`` and a ``Source Location`` column.
    with_flops, with_modules, use_cuda : optional
        Accepted and ignored.

    Examples
    --------
    >>> import lucid
    >>> from lucid.profiler import profile, record_function
    >>> x = lucid.ones(3, requires_grad=True)
    >>> with profile(record_shapes=True) as prof:
    ...     with record_function("step"):
    ...         (x * x).sum().backward()
    >>> sorted({e.key for e in prof.key_averages()})
    ['MulBackward0', 'SumBackward0', 'lucid::mul', 'lucid::sum', 'step']
    >>> "Self CPU %" in prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=5)
    True
    """

    def __init__(self, enabled=True, *, activities=None, record_shapes=False, profile_memory=False,
                 with_stack=False, with_flops=False, with_modules=False, use_cuda=False,
                 schedule=None, on_trace_ready=None, experimental_config=None):
        if schedule is not None and not callable(schedule):
            raise TypeError(f"profile: schedule must be callable (lucid.profiler.schedule(...)), got {schedule!r}")
        self.enabled = bool(enabled)
        self.record_shapes, self.profile_memory = bool(record_shapes), bool(profile_memory)
        self.with_stack = bool(with_stack)
        self.schedule, self.on_trace_ready = schedule, on_trace_ready
        self.step_num = 0
        self.current_action = ProfilerAction.RECORD
        self._running = False
        self._rec = None
        self._events = None

    def _start_trace(self):
        if _CURRENT[0] is not None:
            raise RuntimeError("profile: a profiler is already running; nested profilers are not supported")
        self._rec = _Recorder(self.record_shapes, self.profile_memory, self.with_stack)
        self._events = None
        _CURRENT[0] = self._rec
        _install()

    def _stop_trace(self):
        if _CURRENT[0] is self._rec:
            _uninstall()
            _CURRENT[0] = None

    def _trace_ready(self):
        if self.on_trace_ready is not None:
            self.on_trace_ready(self)

    def __enter__(self):
        if not self.enabled:
            return self
        self.step_num = 0
        self.current_action = ProfilerAction.RECORD if self.schedule is None else self.schedule(0)
        self._running = True
        if self.current_action in _RECORDING:
            self._start_trace()
        return self

    def __exit__(self, *exc):
        if self.enabled and self._running:
            self._running = False
            if self.current_action in _RECORDING:  # a cycle cut short still reports what it saw
                self._stop_trace()
                self._trace_ready()
        return False

    def start(self):
        return self.__enter__()

    def stop(self):
        self.__exit__(None, None, None)

    def step(self):
        """Mark the end of one step: the schedule decides whether recording starts, goes on,
        or ends (handing the finished cycle to ``on_trace_ready``)."""
        if not self.enabled or not self._running:
            return
        before = self.current_action
        self.step_num += 1
        if self.schedule is None:
            return
        after = self.schedule(self.step_num)
        self.current_action = after
        if before is ProfilerAction.RECORD_AND_SAVE or (before in _RECORDING and after not in _RECORDING):
            self._stop_trace()
            self._trace_ready()
            if after in _RECORDING:
                self._start_trace()
        elif before not in _RECORDING and after in _RECORDING:
            self._start_trace()

    def events(self):
        """Every recorded event, in start order."""
        if self._rec is None:
            return EventList()
        if self._events is None:
            t0 = self._rec.t0
            evs = [FunctionEvent(n, (s - t0) / 1e3, (e - s) / 1e3, (e - s - c) / 1e3, sh, m, th, cat, st)
                   for n, s, e, c, sh, m, th, cat, st in sorted(self._rec.raw, key=lambda r: r[1])]
            self._events = EventList(evs, record_shapes=self.record_shapes, profile_memory=self.profile_memory)
        return self._events

    def key_averages(self, group_by_input_shape=False, group_by_stack_n=0):
        """Events grouped by name (and input shapes, and stacks): ``.table(sort_by=..., row_limit=...)``."""
        return self.events().key_averages(group_by_input_shape, group_by_stack_n)

    def table(self, *args, **kwargs):
        return self.events().table(*args, **kwargs)

    def export_chrome_trace(self, path):
        """Write the events in the JSON trace-event format (chrome://tracing, Perfetto)."""
        import json

        pid = os.getpid()
        trace = []
        for ev in self.events():
            item = {"name": ev.name, "ph": "X", "cat": ev.category, "ts": ev.start_us,
                    "dur": ev.cpu_time_total, "pid": pid, "tid": ev.thread, "args": {}}
            if ev.input_shapes is not None:
                item["args"]["Input Dims"] = ev.input_shapes
            if self.profile_memory:
                item["args"]["Bytes"] = ev.cpu_memory_usage
            trace.append(item)
        data = json.dumps({"traceEvents": trace, "displayTimeUnit": "ms"}).encode()
        if str(path).endswith(".gz"):
            import gzip

            data = gzip.compress(data)
        # written beside the target and renamed: a failure leaves no truncated trace behind
        tmp = f"{path}.tmp{os.getpid()}"
        try:
            with open(tmp, "wb") as f:
                f.write(data)
            os.replace(tmp, path)
        finally:
            if os.path.exists(tmp):
                os.remove(tmp)
        return path


class record_function:
    """Label a range of code in the profile (a context manager and a decorator).

    Costs one check when no profiler runs.

    Examples
    --------
    >>> import lucid
    >>> from lucid.profiler import profile, record_function
    >>> with profile() as prof:
    ...     with record_function("my_block"):
    ...         _ = lucid.ones(2) + 1
    >>> [e.name for e in prof.events()][:2]
    ['my_block', 'lucid::add']
    """

    def __init__(self, name, args=None):
        self.name = str(name)
        self._rec = None

    def __enter__(self):
        rec = _CURRENT[0]
        self._rec = rec
        if rec is not None:
            self._stack = rec.stack()
            self._frame = [0]
            self._stack.append(self._frame)
            self._start = time.perf_counter_ns()
        return self

    def __exit__(self, *exc):
        rec = self._rec
        if rec is not None:
            end = time.perf_counter_ns()
            if self._stack and self._stack[-1] is self._frame:
                self._stack.pop()
            if self._stack:
                self._stack[-1][0] += end - self._start
            rec.raw.append((self.name, self._start, end, self._frame[0], None, 0, threading.get_ident(),
                            "user_annotation", _user_stack() if rec.with_stack else ()))
            self._rec = None
        return False

    def __call__(self, fn):
        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            with record_function(self.name):
                return fn(*args, **kwargs)

        return wrapper
