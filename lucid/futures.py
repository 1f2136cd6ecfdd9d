"""``lucid.futures``: PyTorch's ``torch.futures`` — a value that becomes available later.

A :class:`Future` is completed once, by :meth:`Future.set_result` or
:meth:`Future.set_exception`, from any thread; :meth:`Future.wait` blocks until then.
``lucid.jit.fork`` returns one (already completed: Lucid runs forks at once), and so does
``lucid.distributed``'s ``Work.get_future()``.
"""
from __future__ import annotations

import threading
import warnings

__all__ = ["Future", "collect_all", "wait_all"]


class Future:
    """A result computed (maybe by another thread) and set later: ``torch.futures.Future``.

    Parameters
    ----------
    devices : list, optional
        Accepted for PyTorch compatibility (CUDA stream bookkeeping); unused.

    Examples
    --------
    >>> import lucid
    >>> fut = lucid.futures.Future()
    >>> doubled = fut.then(lambda f: f.value() * 2)
    >>> fut.set_result(lucid.tensor([1.0, 2.0]))
    >>> doubled.wait()
    tensor([2., 4.])
    """

    def __init__(self, *, devices=None):
        self._cond = threading.Condition()
        self._done, self._value, self._error, self._callbacks = False, None, None, []

    def done(self):
        """Whether a result or an exception has been set (``wait`` would not block)."""
        return self._done

    def set_result(self, result):
        """Complete the future with ``result``; waiters wake and callbacks run (in this thread)."""
        self._finish(result, None)

    def set_exception(self, result):
        """Complete the future with the exception ``result``: ``wait``/``value`` raise it."""
        if not isinstance(result, BaseException):
            raise AssertionError(f"set_exception: {result!r} is of type {type(result)}, not an Exception.")
        self._finish(None, result)

    def _finish(self, value, error):
        with self._cond:
            if self._done:
                raise RuntimeError("Future: this future's value has already been set: Attempting to mark a "
                                   "completed Future as complete again. A Future can only be marked completed once.")
            self._done, self._value, self._error = True, value, error
            callbacks, self._callbacks = self._callbacks, []
            self._cond.notify_all()
        for cb in callbacks:
            self._run_callback(cb)

    def wait(self):
        """Block until the future is complete; return its value or raise its exception."""
        with self._cond:
            while not self._done:
                self._cond.wait()
        return self.value()

    def value(self):
        """The value of a completed future (its exception is raised); never blocks."""
        if not self._done:
            raise RuntimeError("Future.value: the future is not completed yet; call wait() to block until it is")
        if self._error is not None:
            raise self._error
        return self._value

    def then(self, callback):
        """A new future of ``callback(self)``, run once this one completes (at once if it has).

        The callback runs also when this future failed (``self.value()`` then raises); an
        exception in the callback completes the returned future with a RuntimeError, as in PyTorch.
        """
        out = Future()

        def run(fut):
            try:
                res = callback(fut)
            except Exception as e:  # noqa: BLE001  (the error belongs to the chained future)
                err = RuntimeError(f"then: got the following error when running the callback: "
                                   f"{type(e).__name__}: {e}")
                err.__cause__ = e
                out.set_exception(err)
                return
            out.set_result(res)

        self.add_done_callback(run)
        return out

    def add_done_callback(self, callback):
        """Run ``callback(self)`` once this future completes (at once if it has); its return value
        is ignored and an exception it raises is reported as a warning, as PyTorch logs it."""
        with self._cond:
            if not self._done:
                self._callbacks.append(callback)
                return
        self._run_callback(callback)

    def _run_callback(self, callback):
        try:
            callback(self)
        except Exception as e:  # noqa: BLE001  (PyTorch logs it and goes on)
            warnings.warn(f"Future: got the following error when running the callback: {type(e).__name__}: {e}",
                          RuntimeWarning, stacklevel=3)

    def __repr__(self):
        state = "pending" if not self._done else "failed" if self._error is not None else "done"
        return f"<lucid.futures.Future ({state})>"


def _check_futures(name, futures):
    futures = list(futures) if isinstance(futures, (list, tuple)) else futures
    if not isinstance(futures, list) or not all(isinstance(f, Future) for f in futures):
        raise TypeError(f"{name}: expected a list of lucid.futures.Future objects, got {futures!r}")
    return futures


def collect_all(futures):
    """One future completed once all of ``futures`` are, holding the list of them.

    If any of them failed, the combined future fails with the first such exception (in list
    order), as PyTorch's does.

    Examples
    --------
    >>> import lucid
    >>> a, b = lucid.futures.Future(), lucid.futures.Future()
    >>> both = lucid.futures.collect_all([a, b])
    >>> a.set_result(1); both.done()
    False
    >>> b.set_result(2); [f.value() for f in both.wait()]
    [1, 2]
    """
    futures = _check_futures("collect_all", futures)
    out = Future()
    if not futures:
        out.set_result([])
        return out
    lock, left = threading.Lock(), [len(futures)]

    def one_done(_):
        with lock:
            left[0] -= 1
            last = left[0] == 0
        if last:
            first_error = next((f._error for f in futures if f._error is not None), None)
            out.set_exception(first_error) if first_error is not None else out.set_result(futures)

    for f in futures:
        f.add_done_callback(one_done)
    return out


def wait_all(futures):
    """Wait for each of ``futures`` in turn and return their values; the first failure is raised
    at once (without waiting for the rest), as in PyTorch.

    Examples
    --------
    >>> import lucid
    >>> done = [lucid.jit.fork(lambda i=i: i * i) for i in range(3)]
    >>> lucid.futures.wait_all(done)
    [0, 1, 4]
    """
    futures = _check_futures("wait_all", futures)
    return [f.wait() for f in futures]
