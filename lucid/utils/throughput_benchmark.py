"""``lucid.utils.throughput_benchmark`` (``torch.utils.throughput_benchmark``): measure how
many calls per second a module serves from several threads.

Examples
--------
>>> import lucid
>>> from lucid.utils.throughput_benchmark import ThroughputBenchmark
>>> bench = ThroughputBenchmark(lucid.nn.Linear(4, 2))
>>> bench.add_input(lucid.randn(3, 4))
>>> stats = bench.benchmark(num_calling_threads=2, num_warmup_iters=2, num_iters=20)
>>> stats.num_iters, stats.latency_avg_ms > 0
(20, True)
"""
from __future__ import annotations

import itertools
import threading
import time

__all__ = ["ExecutionStats", "ThroughputBenchmark", "format_time"]


def format_time(time_us=None, time_ms=None, time_s=None):
    """A duration in the largest unit that keeps it >= 1 (``"1.500ms"``); give exactly one argument.

    Examples
    --------
    >>> from lucid.utils.throughput_benchmark import format_time
    >>> format_time(time_us=1500), format_time(time_s=2), format_time(time_ms=0.25)
    ('1.500ms', '2.000s', '250.000us')
    """
    given = [t for t in (time_us, time_ms, time_s) if t is not None]
    if len(given) != 1:
        raise AssertionError("format_time: expected exactly one of time_us, time_ms, time_s")
    us = time_us if time_us is not None else time_ms * 1e3 if time_ms is not None else time_s * 1e6
    if us >= 1e6:
        return f"{us / 1e6:.3f}s"
    if us >= 1e3:
        return f"{us / 1e3:.3f}ms"
    return f"{us:.3f}us"


class _Config:
    def __init__(self, num_calling_threads, num_warmup_iters, num_iters):
        self.num_calling_threads = num_calling_threads
        self.num_warmup_iters = num_warmup_iters
        self.num_iters = num_iters


class ExecutionStats:
    """The result of :meth:`ThroughputBenchmark.benchmark`: average latency of one call (ms),
    the number of timed calls, and derived rates."""

    def __init__(self, latency_avg_ms, num_iters, benchmark_config):
        self._latency_avg_ms, self._num_iters = latency_avg_ms, num_iters
        self.benchmark_config = benchmark_config

    @property
    def latency_avg_ms(self):
        """Mean wall time of one call, in milliseconds (each thread timing its own calls)."""
        return self._latency_avg_ms

    @property
    def num_iters(self):
        """Timed calls, over all threads."""
        return self._num_iters

    @property
    def iters_per_second(self):
        """Calls per second over all threads."""
        return self.num_iters / self.total_time_seconds

    @property
    def total_time_seconds(self):
        """The calls' total time divided among the threads (PyTorch's definition)."""
        return self.num_iters * (self.latency_avg_ms / 1000.0) / self.benchmark_config.num_calling_threads

    def __str__(self):
        return "\n".join([
            "Average latency per example: " + format_time(time_ms=self.latency_avg_ms),
            f"Total number of iterations: {self.num_iters}",
            f"Total number of iterations per second (across all threads): {self.iters_per_second:.2f}",
            "Total time: " + format_time(time_s=self.total_time_seconds)])


class ThroughputBenchmark:
    """Run a module (or any callable) on recorded inputs from several Python threads.

    Parameters
    ----------
    module : callable
        A ``lucid.nn.Module`` or function; called as ``module(*args, **kwargs)``.

    Notes
    -----
    Limitation: PyTorch runs the calls from C++ threads without the GIL. Lucid's threads
    share the GIL, so only the parts of a call that release it (NumPy's larger kernels) run
    in parallel; the numbers are real measurements of that.
    """

    def __init__(self, module):
        if not callable(module):
            raise TypeError(f"ThroughputBenchmark: expected a callable module, got {type(module).__name__}")
        self._module = module
        self._inputs = []

    def run_once(self, *args, **kwargs):
        """Call the module once on the given inputs and return its output."""
        return self._module(*args, **kwargs)

    def add_input(self, *args, **kwargs):
        """Record one input (the positional and keyword arguments of a call)."""
        self._inputs.append((args, kwargs))

    def benchmark(self, num_calling_threads=1, num_warmup_iters=10, num_iters=100, profiler_output_path=""):
        """Time ``num_iters`` calls in total, shared by ``num_calling_threads`` threads, each
        after ``num_warmup_iters`` untimed calls; inputs are taken in turn."""
        for name, v, low in (("num_calling_threads", num_calling_threads, 1), ("num_warmup_iters", num_warmup_iters, 0),
                             ("num_iters", num_iters, 1)):
            if isinstance(v, bool) or not isinstance(v, int) or v < low:
                raise ValueError(f"ThroughputBenchmark.benchmark: {name} must be an int >= {low}, got {v!r}")
        if not self._inputs:
            raise RuntimeError("ThroughputBenchmark.benchmark: no inputs; call add_input first")
        config = _Config(num_calling_threads, num_warmup_iters, num_iters)
        if profiler_output_path:
            from ..profiler import profile

            with profile() as prof:
                latency = self._timed(config)
            prof.export_chrome_trace(profiler_output_path)
        else:
            latency = self._timed(config)
        return ExecutionStats(latency, num_iters, config)

    def _timed(self, config):
        """Average latency (ms) of the timed calls; an exception in a thread is raised here."""
        counter, lock = itertools.count(), threading.Lock()
        start_line = threading.Barrier(config.num_calling_threads)
        durations, errors = [], []

        def call(i):
            args, kwargs = self._inputs[i % len(self._inputs)]
            self._module(*args, **kwargs)

        def worker(tid):
            try:
                for w in range(config.num_warmup_iters):
                    call(tid + w)
                start_line.wait()
                mine = []
                while True:
                    with lock:
                        i = next(counter)
                    if i >= config.num_iters:
                        break
                    t0 = time.perf_counter()
                    call(i)
                    mine.append(time.perf_counter() - t0)
                with lock:
                    durations.extend(mine)
            except BaseException as e:  # reported in the caller's thread
                errors.append(e)
                start_line.abort()

        threads = [threading.Thread(target=worker, args=(t,)) for t in range(config.num_calling_threads)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        real = [e for e in errors if not isinstance(e, threading.BrokenBarrierError)]
        if real or errors:
            raise (real or errors)[0]
        return 1000.0 * sum(durations) / len(durations)
