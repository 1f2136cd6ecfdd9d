"""``lucid.multiprocessing.spawn`` (``torch.multiprocessing.spawn``): starting ``nprocs``
processes and reporting their failures.

:func:`spawn` / :func:`start_processes` run ``fn(i, *args)`` for ``i`` in ``range(nprocs)``,
each in a new process; :class:`ProcessContext` waits for them, and the first failure stops
the others and raises a :class:`ProcessException`: :class:`ProcessRaisedException` (the
child raised; the message holds its traceback) or :class:`ProcessExitedException` (it exited
with a non-zero code or a signal). ``SpawnContext`` is PyTorch's deprecated alias of
``ProcessContext``. :mod:`lucid.multiprocessing` re-exports these names, and imports this
module first, so its ``spawn`` attribute is the function, as in PyTorch.

Examples
--------
>>> import lucid.multiprocessing as mp
>>> from lucid.multiprocessing.spawn import ProcessException, ProcessRaisedException
>>> issubclass(ProcessRaisedException, ProcessException)
True
>>> ProcessRaisedException is mp.ProcessRaisedException
True
"""
from __future__ import annotations

import multiprocessing
import multiprocessing.connection
import signal
import sys
import traceback

__all__ = ["ProcessContext", "ProcessException", "ProcessExitedException", "ProcessRaisedException",
           "SpawnContext", "spawn", "start_processes"]


class ProcessException(Exception):
    """A process started by :func:`spawn` failed: ``error_index`` (its ``i``) and ``error_pid``.

    Examples
    --------
    >>> from lucid.multiprocessing import ProcessException
    >>> e = ProcessException("rank 1 failed", 1, 4242)
    >>> (e.msg, e.error_index, e.error_pid)
    ('rank 1 failed', 1, 4242)
    """

    def __init__(self, msg: str, error_index: int, error_pid: int):
        super().__init__(msg)
        self.msg, self.error_index, self.error_pid = msg, error_index, error_pid

    @property
    def pid(self):
        """Lucid's older name of :attr:`error_pid`."""
        return self.error_pid

    def __reduce__(self):  # rebuild with the constructor's arguments, not Exception's ``args``
        return type(self), (self.msg, self.error_index, self.error_pid)


class ProcessRaisedException(ProcessException):
    """A process started by :func:`spawn` raised; the message holds its traceback."""


class ProcessExitedException(ProcessException):
    """A process started by :func:`spawn` exited with a non-zero ``exit_code`` (or the signal ``signal_name``)."""

    def __init__(self, msg: str, error_index: int, error_pid: int, exit_code: int, signal_name: str | None = None):
        super().__init__(msg, error_index, error_pid)
        self.exit_code, self.signal_name = exit_code, signal_name

    def __reduce__(self):
        return type(self), (self.msg, self.error_index, self.error_pid, self.exit_code, self.signal_name)


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
            name = signal.Signals(-code).name
            raise ProcessExitedException(f"process {failed} terminated with signal {name}", failed, proc.pid,
                                         code, name)
        raise ProcessExitedException(f"process {failed} terminated with exit code {code}", failed, proc.pid, code)


SpawnContext = ProcessContext


def start_processes(fn, args=(), nprocs=1, join=True, daemon=False, start_method="spawn"):
    """Run ``fn(i, *args)`` for ``i`` in ``range(nprocs)``, each in a new process (``start_method``).

    Examples
    --------
    >>> # start_processes(train, args=(cfg,), nprocs=2, start_method="fork")
    """
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

    Examples
    --------
    >>> # lucid.multiprocessing.spawn(train, args=(cfg,), nprocs=2)
    """
    return start_processes(fn, args, nprocs, join, daemon, start_method)
