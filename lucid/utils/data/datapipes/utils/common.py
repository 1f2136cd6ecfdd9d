"""Helpers shared by the DataPipes: callable checks, column validation, stream wrappers."""
from __future__ import annotations

import functools
import inspect
import os
import sys
import warnings


def _check_unpickable_fn(fn):
    """A pipe's function must be callable; a lambda (even inside ``partial``) gets PyTorch's
    warning, because it cannot be pickled (see NOTE [Pickling DataPipes])."""
    if not callable(fn):
        raise TypeError(f"A callable function is expected, but {type(fn)} is provided.")
    while isinstance(fn, functools.partial):
        fn = fn.func
    if getattr(fn, "__name__", None) == "<lambda>":
        warnings.warn("Lambda function is not supported by pickle, please use regular python function or "
                      "functools.partial instead.", stacklevel=_user_stacklevel())


def _user_stacklevel():
    """The ``stacklevel`` of the first caller outside this package (so the warning names the user's line)."""
    package = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    frame, level = sys._getframe(1), 1
    while frame is not None and os.path.abspath(frame.f_code.co_filename).startswith(package):
        frame, level = frame.f_back, level + 1
    return level


def validate_input_col(fn, input_col):
    """Raise ValueError if ``fn`` cannot take as many positional arguments as ``input_col`` names."""
    try:
        sig = inspect.signature(fn)
    except (ValueError, TypeError):
        return
    size = len(input_col) if isinstance(input_col, (list, tuple)) else 1
    positional, var_positional, required_kw = [], False, []
    for p in sig.parameters.values():
        if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD):
            positional.append(p)
        elif p.kind is p.VAR_POSITIONAL:
            var_positional = True
        elif p.kind is p.KEYWORD_ONLY and p.default is p.empty:
            required_kw.append(p)
    name = getattr(fn, "__name__", type(fn).__name__)
    if required_kw:
        raise ValueError(f"The function {name} takes {len(required_kw)} keyword-only parameters, "
                         "which is not allowed.")
    required = [p for p in positional if p.default is p.empty]
    if var_positional:
        if size < len(required):
            raise ValueError(f"The function {name} takes {len(required)} positional parameters, "
                             f"but {size} are required.")
    elif not (len(required) <= size <= len(positional)):
        raise ValueError(f"The function {name} takes {len(positional)} parameters, but {size} are required.")


class StreamWrapper:
    """A file-like object that FileOpener hands out; closed by StreamReader (or by ``close()``).

    Parameters
    ----------
    file_obj : file-like
    parent_stream : StreamWrapper, optional
    name : str, optional
    """

    session_streams: dict = {}
    debug_unclosed_streams = False

    def __init__(self, file_obj, parent_stream=None, name=None):
        self.file_obj = file_obj
        self.child_counter = 0
        self.parent_stream = parent_stream
        self.close_on_last_child = False
        self.name = name
        self.closed = False
        if parent_stream is not None:
            parent_stream.child_counter += 1

    @classmethod
    def close_streams(cls, v, depth=0):
        """Close every StreamWrapper in ``v`` (lists, tuples and dicts are searched, 10 levels deep)."""
        if depth > 10:
            return
        if isinstance(v, StreamWrapper):
            v.close()
        elif isinstance(v, dict):
            for item in v.values():
                cls.close_streams(item, depth + 1)
        elif isinstance(v, (list, tuple)):
            for item in v:
                cls.close_streams(item, depth + 1)

    def __getattr__(self, name):
        return getattr(self.__dict__["file_obj"], name)

    def close(self, *args, **kwargs):
        if self.closed:
            return
        if self.parent_stream is not None:
            self.parent_stream.child_counter -= 1
            if not self.parent_stream.child_counter and self.parent_stream.close_on_last_child:
                self.parent_stream.close()
        try:
            self.file_obj.close(*args, **kwargs)
        except AttributeError:
            pass
        self.closed = True

    def autoclose(self):
        """Close this stream once its last child stream is closed (now, if it has none)."""
        if self.child_counter == 0:
            self.close()
        self.close_on_last_child = True

    def __iter__(self):
        yield from self.file_obj

    def __next__(self):
        return next(self.file_obj)

    def __repr__(self):
        return f"StreamWrapper<{self.file_obj!r}>" if self.name is None else f"StreamWrapper<{self.name},{self.file_obj!r}>"

    def __getstate__(self):
        return self.file_obj

    def __setstate__(self, obj):
        self.file_obj = obj
        self.child_counter, self.parent_stream, self.close_on_last_child = 0, None, False
        self.name, self.closed = None, False
