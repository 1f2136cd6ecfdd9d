"""Engine flags PyTorch exposes in ``torch.autograd``: multithreaded backward and view replay.

Lucid's backward always runs on the calling thread (one heap of nodes, See NOTE [Levels] and
ARCHITECTURE.md's Engine), so the multithreading flag is recorded, thread-locally as PyTorch's,
and changes nothing. Views are always replayed after an in-place change (NOTE [View replay]).
"""
from __future__ import annotations

import functools
import threading

__all__ = ["is_multithreading_enabled", "set_multithreading_enabled", "is_view_replay_enabled"]

_STATE = threading.local()


def is_multithreading_enabled():
    """Whether multithreaded backward is enabled in this thread (True unless turned off).

    Examples
    --------
    >>> import lucid
    >>> lucid.autograd.is_multithreading_enabled()
    True
    """
    return getattr(_STATE, "multithreading", True)


class set_multithreading_enabled:
    """Enable or disable multithreaded backward, as a function call, a context manager (the old
    value comes back on exit) or a decorator, as ``torch.autograd.set_multithreading_enabled``.

    Examples
    --------
    >>> import lucid
    >>> with lucid.autograd.set_multithreading_enabled(False):
    ...     lucid.autograd.is_multithreading_enabled()
    False
    >>> lucid.autograd.is_multithreading_enabled()
    True
    """

    def __init__(self, mode):
        self.prev = is_multithreading_enabled()
        _STATE.multithreading = bool(mode)
        self.mode = bool(mode)

    def __enter__(self):
        return None

    def __exit__(self, *exc):
        _STATE.multithreading = self.prev
        return False

    def clone(self):
        return self.__class__(self.mode)

    def __call__(self, fn):
        _STATE.multithreading = self.prev  # as a decorator the flag applies only inside calls

        @functools.wraps(fn)
        def wrapped(*args, **kwargs):
            with self.clone():
                return fn(*args, **kwargs)

        return wrapped


def is_view_replay_enabled():
    """Whether views are re-derived from their base after an in-place change: always True in
    Lucid (NOTE [View replay]); PyTorch's default is False, where it replays only on request.

    Examples
    --------
    >>> import lucid
    >>> lucid.autograd.is_view_replay_enabled()
    True
    """
    return True
