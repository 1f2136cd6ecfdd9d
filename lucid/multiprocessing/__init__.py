"""``lucid.multiprocessing`` (``torch.multiprocessing``): Python's ``multiprocessing`` that shares tensors.

Everything of :mod:`multiprocessing` is here (``Process``, ``Queue``, ``get_context`` ...).
Importing this module registers how tensors travel between processes: a CPU tensor sent
through a ``Queue``, a ``Pipe`` or as a ``Process`` argument under ``spawn`` moves to shared
memory (``share_memory_``) and the receiver maps the same memory (NOTE [Shared memory] in
``lucid/_core/shared_memory.py``), so in-place updates are seen on both sides. Device tensors
travel as values. :func:`spawn` starts ``nprocs`` processes running ``fn(i, *args)`` and
raises in the parent when one fails.

Examples
--------
>>> import lucid, lucid.multiprocessing as mp
>>> model = lucid.nn.Linear(2, 1)
>>> _ = model.share_memory()   # then: mp.Process(target=train, args=(model,)) ... (Hogwild)
>>> model.weight.is_shared()
True
"""
from __future__ import annotations

import multiprocessing
import multiprocessing.connection
import sys
import traceback
from multiprocessing import *  # noqa: F401,F403
from multiprocessing.reduction import ForkingPickler

import numpy as np

from .._core.shared_memory import SharedBuffer, buffer_of
from .._core.tensor import Tensor

__all__ = list(multiprocessing.__all__) + [
    "spawn", "start_processes", "ProcessContext", "ProcessRaisedException", "ProcessExitedException",
    "get_sharing_strategy", "set_sharing_strategy", "get_all_sharing_strategies"]

_STRATEGIES = {"file_descriptor"}
_strategy = ["file_descriptor"]


def get_all_sharing_strategies():
    """The ways tensors can be shared: ``{"file_descriptor"}`` (descriptors passed over sockets)."""
    return set(_STRATEGIES)


def get_sharing_strategy():
    """The current sharing strategy."""
    return _strategy[0]


def set_sharing_strategy(new_strategy):
    """Choose how tensors are shared; Lucid has one strategy, ``"file_descriptor"``."""
    if new_strategy not in _STRATEGIES:
        raise ValueError(f"set_sharing_strategy: unknown strategy {new_strategy!r}; "
                         f"available: {sorted(_STRATEGIES)}")
    _strategy[0] = new_strategy


# ----------------------------------------------------------------- reductions


def _rebuild_shared(dupfd, size, offset, shape, strides, dtype, requires_grad, parameter):
    buf = SharedBuffer.from_fd(dupfd.detach(), size)
    arr = np.ndarray(shape, np.dtype(dtype), buffer=buf, offset=offset, strides=strides)
    from .._core.tensor import _wrap

    if parameter:
        from ..nn.parameter import Parameter

        return Parameter(_wrap(arr), requires_grad=requires_grad)
    t = _wrap(arr)
    t.requires_grad_(requires_grad)
    return t


def _reduce_tensor(t):
    from multiprocessing.reduction import DupFd

    if t.requires_grad and t.grad_fn is not None:
        raise RuntimeError("lucid.multiprocessing: cowardly refusing to send a non-leaf tensor that requires grad "
                           "to another process (its graph can't go along); detach() it first")
    data = t._data
    if data.__class__ is not np.ndarray:  # a device or meta tensor: its own pickling (values)
        return t.__reduce_ex__(2)
    if buffer_of(data) is None:
        if t._base is not None:  # a view of unshared memory: share its values, not its base's
            return t.__reduce_ex__(2)
        t.share_memory_()
        data = t._data
    buf = buffer_of(data)
    offset = data.__array_interface__["data"][0] - buf.address
    from ..nn.parameter import Parameter

    return (_rebuild_shared, (DupFd(buf.fd), len(buf), offset, data.shape, data.strides, data.dtype.str,
                              t.requires_grad, isinstance(t, Parameter)))


def _register():
    from ..nn.parameter import Parameter

    for cls in (Tensor, Parameter):
        ForkingPickler.register(cls, _reduce_tensor)


_register()


# ----------------------------------------------------------------- spawn


class ProcessRaisedException(Exception):
    """A process started by :func:`spawn` raised; the message holds its traceback."""

    def __init__(self, msg, error_index, error_pid):
        super().__init__(msg)
        self.error_index, self.pid = error_index, error_pid


class ProcessExitedException(Exception):
    """A process started by :func:`spawn` exited with a non-zero code (or a signal)."""

    def __init__(self, msg, error_index, error_pid, exit_code, signal_name=None):
        super().__init__(msg)
        self.error_index, self.pid, self.exit_code, self.signal_name = error_index, error_pid, exit_code, signal_name


def _run(fn, i, args, error_queue):
    try:
        fn(i, *args)
    except KeyboardInterrupt:
        pass  # the parent is stopping the job
    except BaseException:
        error_queue.put(traceback.format_exc())
        sys.exit(1)


class ProcessContext:
    """The processes of one :func:`spawn` call; :meth:`join` waits and raises on a failure."""

    def __init__(self, processes, error_queues):
        self.processes, self.error_queues = processes, error_queues
        self._sentinels = {p.sentinel: i for i, p in enumerate(processes)}

    def pids(self):
        return [p.pid for p in self.processes]

    def join(self, timeout=None):
        """Wait for the processes; True when all finished well. The first failure stops the
        others and raises :class:`ProcessRaisedException` (with the child's traceback) or
        :class:`ProcessExitedException`."""
        if not self._sentinels:
            return True
        ready = multiprocessing.connection.wait(list(self._sentinels), timeout=timeout)
        failed = None
        for sentinel in ready:
            i = self._sentinels.pop(sentinel)
            self.processes[i].join()
            if self.processes[i].exitcode != 0 and failed is None:
                failed = i
        if failed is None:
            return not self._sentinels
        for p in self.processes:  # one failed: the job cannot finish
            if p.is_alive():
                p.terminate()
            p.join()
        self._sentinels.clear()
        proc = self.processes[failed]
        if not self.error_queues[failed].empty():
            tb = self.error_queues[failed].get()
            raise ProcessRaisedException(f"\n\n-- Process {failed} terminated with the following error:\n{tb}",
                                         failed, proc.pid)
        code = proc.exitcode
        if code < 0:
            import signal

            name = signal.Signals(-code).name
            raise ProcessExitedException(f"process {failed} terminated with signal {name}", failed, proc.pid,
                                         code, name)
        raise ProcessExitedException(f"process {failed} terminated with exit code {code}", failed, proc.pid, code)


def start_processes(fn, args=(), nprocs=1, join=True, daemon=False, start_method="spawn"):
    """Run ``fn(i, *args)`` for ``i`` in ``range(nprocs)``, each in a new process (``start_method``)."""
    if isinstance(nprocs, bool) or not isinstance(nprocs, int) or nprocs < 1:
        raise ValueError(f"spawn: nprocs must be a positive int, got {nprocs!r}")
    ctx = multiprocessing.get_context(start_method)
    processes, queues = [], []
    for i in range(nprocs):
        q = ctx.SimpleQueue()
        p = ctx.Process(target=_run, args=(fn, i, tuple(args), q), daemon=daemon)
        p.start()
        processes.append(p)
        queues.append(q)
    context = ProcessContext(processes, queues)
    if not join:
        return context
    while not context.join():
        pass
    return None


def spawn(fn, args=(), nprocs=1, join=True, daemon=False, start_method="spawn"):
    """``torch.multiprocessing.spawn``: :func:`start_processes` with the ``spawn`` method.

    Returns None once every process finished (or a :class:`ProcessContext` with ``join=False``);
    a failing process stops the others and raises :class:`ProcessRaisedException`.
    """
    return start_processes(fn, args, nprocs, join, daemon, start_method)
