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
import itertools
import json
import os
import threading
import time
import weakref

from ._core import primitive
from ._core.backend import backend_of
from ._core.grad_mode import PROFILING

# submodules (lucid.profiler.profiler) live in a folder: NOTE [Submodules of file modules]
__path__ = [os.path.join(os.path.dirname(__file__), "_module_paths", "profiler")]

__all__ = ["profile", "record_function", "ProfilerActivity", "ProfilerAction", "schedule",
           "tensorboard_trace_handler", "supported_activities", "kineto_available", "ExecutionTraceObserver",
           "EventList", "FunctionEvent", "FunctionEventAvg"]

_CURRENT = [None]  # the active _Recorder
_ET = [None]  # the running ExecutionTraceObserver
_USERS = [0]  # how many of the two (a profiler, an execution trace) need the timing wrappers


class ProfilerActivity(enum.Enum):
    """What to profile; Lucid runs on the CPU, so only ``CPU`` records anything."""

    CPU = "cpu"
    CUDA = "cuda"
    XPU = "xpu"
    MTIA = "mtia"
    HPU = "hpu"
    PrivateUse1 = "privateuseone"


def supported_activities():
    """The activities this build can record: ``{ProfilerActivity.CPU}`` (Lucid times its ops on
    the host, whatever device their arrays live on).

    Examples
    --------
    >>> from lucid.profiler import supported_activities, ProfilerActivity
    >>> supported_activities() == {ProfilerActivity.CPU}
    True
    """
    return {ProfilerActivity.CPU}


def kineto_available():
    """False: Lucid's profiler is its own recorder, not PyTorch's Kineto library.

    Examples
    --------
    >>> from lucid.profiler import kineto_available
    >>> kineto_available()
    False
    """
    return False


class _ArgumentError(ValueError, AssertionError):
    """Bad profiler arguments: PyTorch asserts (AssertionError), Lucid raised ValueError."""


class _SortKeyError(ValueError, AttributeError):
    """An unknown ``sort_by``: PyTorch's getattr fails (AttributeError), Lucid raised ValueError."""


class ProfilerAction(enum.Enum):
    """What a :func:`schedule` asks the profiler to do at one step."""

    NONE = 0
    WARMUP = 1
    RECORD = 2
    RECORD_AND_SAVE = 3
    DEVICE_STOPPED = 4


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
        raise _ArgumentError(f"schedule: invalid arguments wait={wait} (need >= 0), warmup={warmup} (need >= 0), "
                         f"active={active} (need > 0), repeat={repeat} (need >= 0), "
                         f"skip_first={skip_first} (need >= 0)")
    cycle = wait + warmup + active

    def action(step):
        if step < 0:
            raise _ArgumentError(f"schedule: step must be >= 0, got {step}")
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


class Interval:
    """An event's start and end, microseconds from the profiler's start (PyTorch's ``time_range``)."""

    __slots__ = ("start", "end")

    def __init__(self, start, end):
        self.start, self.end = start, end

    def elapsed_us(self):
        return self.end - self.start

    def __repr__(self):
        return f"Interval(start={self.start:.3f}, end={self.end:.3f})"


class _NoDeviceTime:
    """PyTorch's device-side fields, all zero: Lucid times ops on the host only, so
    ``sort_by="cuda_time_total"`` and the like work (as on PyTorch's CPU runs)."""

    __slots__ = ()
    device_time_total = self_device_time_total = cuda_time_total = self_cuda_time_total = 0.0
    device_time = cuda_time = 0.0
    device_memory_usage = self_device_memory_usage = 0
    cuda_memory_usage = self_cuda_memory_usage = 0
    flops = 0
    node_id = -1
    is_async = is_remote = is_legacy = False
    use_device = None

    cpu_time_str = property(lambda self: _fmt_time(self.cpu_time))
    cpu_time_total_str = property(lambda self: _fmt_time(self.cpu_time_total))
    self_cpu_time_total_str = property(lambda self: _fmt_time(self.self_cpu_time_total))


class FunctionEvent(_NoDeviceTime):
    """One recorded call: times in microseconds, memory in bytes (``cpu_memory_usage`` counts
    the arrays the call and the calls inside it produced, ``self_cpu_memory_usage`` its own)."""

    __slots__ = ("id", "name", "start_us", "cpu_time_total", "self_cpu_time_total", "input_shapes",
                 "cpu_memory_usage", "self_cpu_memory_usage", "thread", "category", "stack",
                 "cpu_parent", "cpu_children")

    def __init__(self, name, start_us, total, self_time, shapes, mem, thread, category, stack=(),
                 self_mem=None, id=-1):  # noqa: A002 - PyTorch's field name
        self.id, self.name, self.start_us, self.cpu_time_total = id, name, start_us, total
        self.self_cpu_time_total, self.input_shapes = self_time, shapes
        self.cpu_memory_usage, self.thread, self.category = mem, thread, category
        self.self_cpu_memory_usage = mem if self_mem is None else self_mem
        self.stack = list(stack)  # "file(line): function", innermost first (with_stack=True)
        self.cpu_parent, self.cpu_children = None, []

    key = property(lambda self: self.name)
    trace_name = property(lambda self: self.name)
    count = 1
    scope = 0
    cpu_time = property(lambda self: self.cpu_time_total)
    time_range = property(lambda self: Interval(self.start_us, self.start_us + self.cpu_time_total))
    is_user_annotation = property(lambda self: self.category == "user_annotation")

    def __repr__(self):
        return (f"<FunctionEvent {self.name} cpu_time_total={self.cpu_time_total:.3f}us "
                f"self={self.self_cpu_time_total:.3f}us shapes={self.input_shapes}>")


class FunctionEventAvg(_NoDeviceTime):
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
        self.self_cpu_memory_usage += ev.self_cpu_memory_usage
        return self

    @property
    def cpu_time(self):
        """Average total time per call (us)."""
        return self.cpu_time_total / self.count if self.count else 0.0

    def __repr__(self):
        return (f"<FunctionEventAvg key={self.key} count={self.count} "
                f"cpu_time_total={self.cpu_time_total:.3f}us self_cpu_time_total={self.self_cpu_time_total:.3f}us>")




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
        if sort_by is not None and self and not isinstance(getattr(self[0], sort_by, None), (int, float)):
            raise _SortKeyError(f"table: sort_by must name a numeric field of the events (cpu_time_total, "
                                f"self_cpu_time_total, cpu_memory_usage, count, device_time_total, ...), "
                                f"got {sort_by!r}")
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

    @property
    def self_cpu_time_total(self):
        """The events' self times summed (us): the whole profiled time, counted once."""
        return sum(e.self_cpu_time_total for e in self)

    def total_average(self):
        """All events summed into one ``FunctionEventAvg`` keyed ``"Total"``."""
        total = FunctionEventAvg("Total")
        for ev in self:
            total.add(ev)
        return total


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
    """Collects raw events: (name, start_ns, end_ns, child_ns, shapes, self_bytes, thread, category,
    stack, total_bytes). A running event's frame on its thread's stack is ``[child_ns, child_bytes]``."""

    def __init__(self, record_shapes, profile_memory, with_stack=False):
        self.record_shapes, self.profile_memory, self.with_stack = record_shapes, profile_memory, with_stack
        self.raw = []
        self.local = threading.local()
        self.t0 = time.perf_counter_ns()
        self.wall_ns = time.time_ns()  # the epoch time of t0: events' "ts" count from it

    def stack(self):
        s = getattr(self.local, "stack", None)
        if s is None:
            s = self.local.stack = []
        return s

    def timed(self, name, category, shapes, fn, *args):
        """Run ``fn(*args)`` as one event; returns its result."""
        stack = self.stack()
        frame = [0, 0]
        stack.append(frame)
        start = time.perf_counter_ns()
        mem = 0
        try:
            out = fn(*args)
            mem = _nbytes(out) if self.profile_memory else 0
        finally:
            end = time.perf_counter_ns()
            stack.pop()
            if stack:
                stack[-1][0] += end - start
                stack[-1][1] += mem + frame[1]
        where = _user_stack() if self.with_stack else ()
        self.raw.append((name, start, end, frame[0], shapes, mem, threading.get_ident(), category, where,
                         mem + frame[1]))
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
        rec, et = _CURRENT[0], _ET[0]
        if et is not None:
            return et.node(name, arrays, params, lambda: _timed_call(rec, name, arrays, params, impl))
        return _timed_call(rec, name, arrays, params, impl)

    run._lucid_untimed = impl
    return run


def _timed_call(rec, name, arrays, params, impl):
    if rec is None:  # no profiler (an execution trace alone), or a call racing the end of profiling
        return impl(*arrays, **params)
    shapes = _shapes(arrays) if rec.record_shapes else None
    return rec.timed(name, "cpu_op", shapes, lambda: impl(*arrays, **params))


def _timed_apply(apply):
    def timed(node, grads, tensor_mode):
        rec, et = _CURRENT[0], _ET[0]
        if rec is None and et is None:
            return apply(node, grads, tensor_mode)
        grads_in = [g for g in grads if g is not None]

        def call():
            if rec is None:
                return apply(node, grads, tensor_mode)
            shapes = _shapes(grads_in) if rec.record_shapes else None
            return rec.timed(node.name(), "backward", shapes, apply, node, grads, tensor_mode)

        if et is not None:
            return et.node(f"autograd::engine::evaluate_function: {node.name()}", grads_in, {}, call)
        return call()

    timed._lucid_untimed = apply
    return timed


def _install():
    _USERS[0] += 1
    if _USERS[0] > 1:  # already in place for the other user
        return
    from .autograd.engine import Node
    from .autograd.function import FunctionNode

    for prim in list(primitive.REGISTRY.values()):
        prim.impl = _timed_impl(prim, prim.impl)
    for cls in (Node, FunctionNode):
        cls.apply = _timed_apply(cls.__dict__["apply"])
    PROFILING[0] = 1


def _uninstall():
    _USERS[0] = max(0, _USERS[0] - 1)
    if _USERS[0]:
        return
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


# ----------------------------------------------------------- execution traces


class ExecutionTraceObserver:
    """Record the graph of ops that ran (Chakra's execution trace JSON), as PyTorch's observer.

    ``register_callback(path)`` names the file; ``start()``/``stop()`` capture (or pass the
    observer to ``profile(execution_trace_observer=...)``, which starts and stops it with each
    recording and finalises it on exit); ``unregister_callback()`` (``cleanup()``) writes the file:
    ``{"schema", "pid", "time", "start_ts", "nodes", "finish_ts"}``. Each node has an ``id``, a
    ``name`` (``lucid::<op>``, ``autograd::engine::evaluate_function: <Node>``, a
    ``record_function`` label), ``ctrl_deps`` (the id of the node it ran inside: 2, the thread
    node, at top level), ``inputs``/``outputs`` (``values``: ``[tensor id, storage id, offset,
    numel, itemsize, device]`` for an array, else the value; ``shapes``, ``types``, ``strides``)
    and ``attrs`` (``rf_id``, ``tid``). Ids of arrays are stable while they live.

    Examples
    --------
    >>> import json, os, tempfile, lucid
    >>> from lucid.profiler import ExecutionTraceObserver
    >>> path = os.path.join(tempfile.mkdtemp(), "et.json")
    >>> et = ExecutionTraceObserver().register_callback(path)
    >>> et.start(); _ = lucid.ones(2) * 3; et.stop(); et.unregister_callback()
    >>> [n["name"] for n in json.load(open(path))["nodes"]]
    ['[pytorch|profiler|execution_trace|process]', '[pytorch|profiler|execution_trace|thread]', 'lucid::mul']
    """

    _SCHEMA = "1.1.1-chakra.0.0.4"

    def __init__(self):
        self.output_file_path = None
        self._registered = self._running = False
        self._lock = threading.Lock()
        self._reset()

    def _reset(self):
        self._nodes, self._next_id, self._arrays, self._array_ids = [], 3, {}, itertools.count(1)
        self._local = threading.local()
        self._start_ts = self._finish_ts = None

    is_registered = property(lambda self: self._registered)
    is_running = property(lambda self: self._running)

    def register_callback(self, output_file_path):
        if not isinstance(output_file_path, (str, os.PathLike)):
            raise TypeError(f"ExecutionTraceObserver.register_callback: expected a path, got "
                            f"{type(output_file_path).__name__}")
        if not self._registered:
            self.output_file_path = os.fspath(output_file_path)
            self._registered = True
            self._reset()
        return self

    def get_output_file_path(self):
        return self.output_file_path or None

    def start(self):
        """Start capturing (only when registered, and only one observer at a time)."""
        if not self._registered or self._running:
            return
        if _ET[0] is not None:
            raise RuntimeError("ExecutionTraceObserver.start: another execution trace is running")
        if self._start_ts is None:
            self._start_ts = time.perf_counter_ns() // 1000
        self._running = True
        _ET[0] = self
        _install()

    def stop(self):
        if self._running:
            _ET[0] = None
            self._running = False
            _uninstall()
            self._finish_ts = time.perf_counter_ns() // 1000

    def unregister_callback(self):
        """Stop, and write the file (whole, or not at all)."""
        if not self._registered:
            return
        self.stop()
        self._registered = False
        self._write()

    cleanup = unregister_callback

    def _write(self):
        head = {"schema": self._SCHEMA, "pid": os.getpid(), "time": time.strftime("%Y-%m-%d %H:%M:%S"),
                "start_ts": self._start_ts or 0}
        roots = [self._root(1, "[pytorch|profiler|execution_trace|process]", 0),
                 self._root(2, "[pytorch|profiler|execution_trace|thread]", 1)]
        data = {**head, "nodes": roots + self._nodes, "finish_ts": self._finish_ts or head["start_ts"]}
        _atomic_write(self.output_file_path, json.dumps(data).encode(), "ExecutionTraceObserver")

    @staticmethod
    def _root(i, name, parent):
        empty = {"values": [], "shapes": [], "types": [], "strides": []}
        return {"id": i, "name": name, "ctrl_deps": parent, "inputs": empty, "outputs": dict(empty),
                "attrs": [{"name": "rf_id", "type": "uint64", "value": 0}]}

    def _describe(self, values):
        out = {"values": [], "shapes": [], "types": [], "strides": []}
        for v in values:
            if hasattr(v, "shape") and hasattr(v, "dtype"):
                base = getattr(v, "base", None)
                value = [self._array_id(v), self._array_id(v if base is None else base), 0, int(v.size),
                         int(v.dtype.itemsize), backend_of(v).type]
                kind = f"Tensor({v.dtype})"
                shape, strides = list(v.shape), [s // v.dtype.itemsize for s in getattr(v, "strides", ())]
            else:
                value = _et_value(v)
                kind, shape, strides = _ET_TYPES.get(type(v), type(v).__name__), [], []
            for key, item in zip(("values", "types", "shapes", "strides"), (value, kind, shape, strides)):
                out[key].append(item)
        return out

    def _array_id(self, a):
        """A number per live array (a dead array's number is not reused for a new one)."""
        entry = self._arrays.get(id(a))
        if entry is None or entry[0]() is not a:
            try:
                ref = weakref.ref(a)
            except TypeError:  # an array type without weak references: keep it alive instead
                ref = (lambda obj: lambda: obj)(a)
            entry = self._arrays[id(a)] = (ref, next(self._array_ids))
        return entry[1]

    def _begin(self, name, inputs):
        stack = getattr(self._local, "stack", None)
        if stack is None:
            stack = self._local.stack = []
        with self._lock:
            node_id, self._next_id = self._next_id, self._next_id + 1
        node = {"id": node_id, "name": name, "ctrl_deps": stack[-1]["id"] if stack else 2,
                "inputs": self._describe(inputs), "outputs": self._describe(()),
                "attrs": [{"name": "rf_id", "type": "uint64", "value": node_id - 2},
                          {"name": "tid", "type": "uint64", "value": threading.get_ident()}]}
        stack.append(node)
        return node

    def _end(self, node, outputs):
        self._local.stack.pop()
        node["outputs"] = self._describe(outputs)
        with self._lock:  # PyTorch's order: a node is written when it ends
            self._nodes.append(node)

    def node(self, name, arrays, params, call):
        """Run ``call()`` as one node of the trace."""
        node = self._begin(name, list(arrays) + list(params.values()))
        out = None
        try:
            out = call()
        finally:
            self._end(node, out if isinstance(out, (tuple, list)) else () if out is None else (out,))
        return out


_ET_TYPES = {type(None): "None", bool: "Bool", int: "Int", float: "Double", str: "String", tuple: "GenericList",
             list: "GenericList"}


def _et_value(v):
    if isinstance(v, (tuple, list)):
        return [_et_value(x) for x in v]
    return v if isinstance(v, (bool, int, float, str)) or v is None else str(v)


def _atomic_write(path, data, api):
    """Write ``data`` (gzipped for a ``.gz`` path) beside ``path`` and rename it into place: a
    failure leaves no truncated file behind (NOTE [Safe save])."""
    from ._atomic_file import atomic_write

    if str(path).endswith(".gz"):
        import gzip

        data = gzip.compress(data)
    atomic_write(path, lambda f: f.write(data), api=api)


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
    with_flops, with_modules, use_cuda, use_device, use_kineto, use_cpu, acc_events, \
custom_trace_id_callback : optional
        Accepted and ignored (the last six are ``torch.autograd.profiler.profile``'s: this class is
        also ``lucid.autograd.profiler.profile``, with its ``function_events``,
        ``self_cpu_time_total`` and ``total_average``).

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
                 schedule=None, on_trace_ready=None, experimental_config=None, use_device=None, use_kineto=False,
                 use_cpu=True, acc_events=False, custom_trace_id_callback=None, execution_trace_observer=None):
        if schedule is not None and not callable(schedule):
            raise TypeError(f"profile: schedule must be callable (lucid.profiler.schedule(...)), got {schedule!r}")
        self.enabled = bool(enabled)
        self.record_shapes, self.profile_memory = bool(record_shapes), bool(profile_memory)
        self.with_stack = bool(with_stack)
        self.schedule, self.on_trace_ready = schedule, on_trace_ready
        self.execution_trace_observer = execution_trace_observer
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
        if self.execution_trace_observer is not None:
            self.execution_trace_observer.start()

    def _stop_trace(self):
        if self.execution_trace_observer is not None:
            self.execution_trace_observer.stop()
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
            if self.execution_trace_observer is not None:  # finalise its file, as PyTorch's exit does
                self.execution_trace_observer.cleanup()
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
            raw = sorted(self._rec.raw, key=lambda r: (r[1], -r[2]))  # a parent before the child it starts with
            evs = [FunctionEvent(n, (s - t0) / 1e3, (e - s) / 1e3, (e - s - c) / 1e3, sh, total, th, cat, st,
                                 self_mem=m, id=i)
                   for i, (n, s, e, c, sh, m, th, cat, st, total) in enumerate(raw, 1)]
            _link(evs, raw)
            self._events = EventList(evs, record_shapes=self.record_shapes, profile_memory=self.profile_memory)
        return self._events

    def key_averages(self, group_by_input_shape=False, group_by_stack_n=0):
        """Events grouped by name (and input shapes, and stacks): ``.table(sort_by=..., row_limit=...)``."""
        return self.events().key_averages(group_by_input_shape, group_by_stack_n)

    def table(self, *args, **kwargs):
        return self.events().table(*args, **kwargs)

    @property
    def function_events(self):
        """Every recorded event (``torch.autograd.profiler.profile``'s name for ``events()``)."""
        return self.events()

    @property
    def self_cpu_time_total(self):
        """The recorded self times summed (us)."""
        return self.events().self_cpu_time_total

    def total_average(self):
        """All events summed into one ``FunctionEventAvg`` keyed ``"Total"``."""
        return self.events().total_average()

    def export_chrome_trace(self, path):
        """Write the events in the JSON trace-event format (chrome://tracing, Perfetto)."""
        import socket

        pid = os.getpid()
        events = self.events()
        trace = []
        for ev in events:
            item = {"ph": "X", "cat": ev.category, "name": ev.name, "pid": pid, "tid": ev.thread,
                    "ts": ev.start_us, "dur": ev.cpu_time_total, "args": {"External id": ev.id}}
            if ev.input_shapes is not None:
                item["args"]["Input Dims"] = ev.input_shapes
            if self.profile_memory:
                item["args"]["Bytes"] = ev.cpu_memory_usage
            trace.append(item)
        base = 0 if self._rec is None else self._rec.wall_ns
        head = {"schemaVersion": 1, "deviceProperties": [], "record_shapes": int(self.record_shapes),
                "profile_memory": int(self.profile_memory), "host_name": socket.gethostname(),
                "displayTimeUnit": "ms", "baseTimeNanoseconds": base}
        _atomic_write(path, json.dumps({**head, "traceEvents": trace, "traceName": os.fspath(path)}).encode(),
                      "export_chrome_trace")
        return path


def _link(evs, raw):
    """Set ``cpu_parent``/``cpu_children``: the innermost event of the same thread whose time
    range holds the event's."""
    open_by_thread = {}
    for ev, r in zip(evs, raw):
        stack = open_by_thread.setdefault(ev.thread, [])
        while stack and stack[-1][1] < r[2]:  # ended before this event did: not an ancestor
            stack.pop()
        if stack:
            ev.cpu_parent = stack[-1][0]
            ev.cpu_parent.cpu_children.append(ev)
        stack.append((ev, r[2]))


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
        self._rec = self._et = None

    def __enter__(self):
        rec, et = _CURRENT[0], _ET[0]
        self._rec = rec
        self._et = et
        if et is not None:
            self._et_node = et._begin(self.name, [])
        if rec is not None:
            self._stack = rec.stack()
            self._frame = [0, 0]
            self._stack.append(self._frame)
            self._start = time.perf_counter_ns()
        return self

    def __exit__(self, *exc):
        if self._et is not None:
            self._et._end(self._et_node, ())
            self._et = None
        rec = self._rec
        if rec is not None:
            end = time.perf_counter_ns()
            if self._stack and self._stack[-1] is self._frame:
                self._stack.pop()
            if self._stack:
                self._stack[-1][0] += end - self._start
                self._stack[-1][1] += self._frame[1]
            rec.raw.append((self.name, self._start, end, self._frame[0], None, 0, threading.get_ident(),
                            "user_annotation", _user_stack() if rec.with_stack else (), self._frame[1]))
            self._rec = None
        return False

    def __call__(self, fn):
        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            with record_function(self.name):
                return fn(*args, **kwargs)

        return wrapper
