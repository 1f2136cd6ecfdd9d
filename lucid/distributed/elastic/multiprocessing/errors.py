"""``@record``: write a rank's uncaught exception to ``$TORCHELASTIC_ERROR_FILE`` (PyTorch's format).

Training scripts decorate ``main`` with it so the launcher can report which rank failed and
why; the exception is re-raised unchanged. Without the variable it only re-raises.
"""
from __future__ import annotations

import functools
import json
import os
import time
import traceback

__all__ = ["record", "ChildFailedError", "ErrorHandler"]


class ChildFailedError(Exception):
    """One or more ranks failed: ``failures`` maps each global rank to its error text."""

    def __init__(self, name, failures):
        self.name, self.failures = name, dict(failures)
        lines = "\n".join(f"  rank {r}: {f}" for r, f in sorted(self.failures.items()))
        super().__init__(f"{name} FAILED\n{lines}")


class ErrorHandler:
    """Writes an exception as PyTorch's error file (``record_exception``)."""

    def initialize(self):
        pass

    def record_exception(self, e):
        path = os.environ.get("TORCHELASTIC_ERROR_FILE")
        if not path:
            return
        data = {"message": {"message": f"{type(e).__name__}: {e}",
                            "extraInfo": {"py_callstack": "".join(traceback.format_exception(type(e), e, e.__traceback__)),
                                          "timestamp": str(int(time.time()))}}}
        tmp = f"{path}.{os.getpid()}.tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(data, f)
        os.replace(tmp, path)  # never a half-written error file


def record(fn=None, error_handler=None):
    """Decorate a rank's entry point: an uncaught exception is written to the error file, then re-raised.

    Examples
    --------
    >>> from lucid.distributed.elastic.multiprocessing.errors import record
    >>> @record
    ... def main():
    ...     return 3
    >>> main()
    3
    """
    handler = error_handler or ErrorHandler()

    def wrap(f):
        @functools.wraps(f)
        def wrapper(*args, **kwargs):
            handler.initialize()
            try:
                return f(*args, **kwargs)
            except SystemExit as e:
                if e.code in (None, 0):
                    raise
                handler.record_exception(e)
                raise
            except Exception as e:
                handler.record_exception(e)
                raise
        return wrapper

    return wrap(fn) if fn is not None else wrap
