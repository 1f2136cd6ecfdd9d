"""The safe-globals registry of ``lucid.load`` (PyTorch's ``torch.serialization.add_safe_globals``
and friends) and the pickle scan that lists a checkpoint's globals, split from ``serialization.py``;
``lucid.serialization`` re-exports the public names."""
from __future__ import annotations

import threading

# NOTE [Safe globals]
# A ``torch.save`` checkpoint often names classes beyond tensors: ``argparse.Namespace`` args, a
# dataclass config, an Enum. ``add_safe_globals`` (PyTorch 2.4+'s API) allowlists such objects
# by identity: the object given here (never one imported from the file's names) answers the
# name ``{obj.__module__}.{obj.__qualname__}`` (or the name of an ``(obj, "module.name")`` pair)
# when the file's pickle asks for it. Exactly what PyTorch's weights-only unpickler then allows
# for it, and no more: REDUCE may call it, NEWOBJ may make ``cls.__new__(cls, *args)`` of a
# registered class, and BUILD may set the state of an instance whose exact type is registered
# (its ``__setstate__``, else ``__dict__`` update and slot ``setattr``s). Names in the modules
# PyTorch blocks (os, sys, posix, nt) stay refused even if registered. Each load reads the
# registry once, at its start.
_BLOCKED_MODULES = frozenset(("sys", "os", "posix", "nt"))
_safe_entries = ()  # registered entries in order, replaced whole (so a load's snapshot is stable)
_safe_lock = threading.Lock()


def _entry_name(entry, api):
    """``(full name, object)`` of one ``add_safe_globals`` entry, validated."""
    if isinstance(entry, tuple):
        if len(entry) != 2:
            raise ValueError(f"{api}: expected a tuple of length 2 (global, str of its full path), but got "
                             f"a tuple of length {len(entry)}")
        obj, name = entry
        if type(name) is not str:
            raise TypeError(f"{api}: expected the second item of the tuple to be the str full path of the "
                            f"global, but got {type(name).__name__}")
        return name, obj
    module, qualname = getattr(entry, "__module__", None), getattr(entry, "__qualname__", None)
    if not isinstance(module, str) or not isinstance(qualname, str):
        raise TypeError(f"{api}: {entry!r} has no __module__/__qualname__ to be found by; pass "
                        f"({entry!r}, 'module.name') to say which name in the checkpoint it answers")
    return f"{module}.{qualname}", entry


def _checked_entries(safe_globals, api):
    if not isinstance(safe_globals, (list, tuple, set, frozenset)):
        raise TypeError(f"{api}: expected a list of classes/functions (or (global, 'module.name') tuples), "
                        f"got {type(safe_globals).__name__}")
    for entry in safe_globals:
        _entry_name(entry, api)
        hash(entry)  # entries are compared and removed like PyTorch's set members
    return list(safe_globals)


def add_safe_globals(safe_globals):
    """Allow ``lucid.load`` to use these classes and functions when a PyTorch checkpoint names them.

    PyTorch's ``torch.serialization.add_safe_globals``: a registered class may be instantiated
    and have its state set while unpickling, a registered function may be called (NOTE [Safe
    globals]). Each is found by ``{obj.__module__}.{obj.__qualname__}``, the name ``torch.save``
    wrote, or by the name of an ``(obj, "module.name")`` pair. Register only what you trust.

    Parameters
    ----------
    safe_globals : list
        Classes/functions, or ``(object, "module.name")`` tuples.

    Examples
    --------
    >>> import argparse, lucid
    >>> lucid.serialization.add_safe_globals([argparse.Namespace])
    >>> argparse.Namespace in lucid.serialization.get_safe_globals()
    True
    >>> lucid.serialization.clear_safe_globals()
    """
    global _safe_entries
    entries = _checked_entries(safe_globals, "add_safe_globals")
    with _safe_lock:
        have = set(_safe_entries)
        _safe_entries = _safe_entries + tuple(e for e in dict.fromkeys(entries) if e not in have)


def get_safe_globals():
    """The globals registered with :func:`add_safe_globals` (and active :class:`safe_globals`), in order.

    Examples
    --------
    >>> import lucid
    >>> lucid.serialization.get_safe_globals()
    []
    """
    return list(_safe_entries)


def clear_safe_globals():
    """Forget every global registered with :func:`add_safe_globals`.

    Examples
    --------
    >>> import enum, lucid
    >>> lucid.serialization.add_safe_globals([enum.Enum])
    >>> lucid.serialization.clear_safe_globals()
    >>> lucid.serialization.get_safe_globals()
    []
    """
    global _safe_entries
    with _safe_lock:
        _safe_entries = ()


def _remove_safe_globals(entries):
    global _safe_entries
    with _safe_lock:
        gone = set(entries)
        _safe_entries = tuple(e for e in _safe_entries if e not in gone)


class safe_globals:
    """Context manager: :func:`add_safe_globals` for the ``with`` block only.

    On exit it removes the entries it added, and keeps those that were registered before it
    (PyTorch's removes them too; here nesting and an earlier ``add_safe_globals`` are kept).

    Parameters
    ----------
    safe_globals : list
        As for :func:`add_safe_globals`.

    Examples
    --------
    >>> import argparse, lucid
    >>> with lucid.serialization.safe_globals([argparse.Namespace]):
    ...     print(len(lucid.serialization.get_safe_globals()))
    1
    >>> lucid.serialization.get_safe_globals()
    []
    """

    def __init__(self, safe_globals):
        self.safe_globals = _checked_entries(safe_globals, "safe_globals")
        self._added = []

    def __enter__(self):
        have = set(_safe_entries)
        self._added = [e for e in dict.fromkeys(self.safe_globals) if e not in have]
        add_safe_globals(self._added)
        return self

    def __exit__(self, kind, value, tb):
        _remove_safe_globals(self._added)
        self._added = []
        return False


def _user_globals():
    """``{full name: object}`` of the registered globals, as a load sees them at its start."""
    return dict(_entry_name(e, "add_safe_globals") for e in _safe_entries)


def _globals_in_pickle(raw):
    """Every ``module.name`` a pickle's GLOBAL / STACK_GLOBAL / INST opcodes name, by a pickletools scan."""
    import pickletools

    from .serialization_torch import _full_name

    names, strings, memo, memoized, top = set(), [], {}, 0, None  # top: the string just pushed, if any
    for op, arg, _ in pickletools.genops(raw):
        pushed = None
        if op.name in ("GLOBAL", "INST"):
            module, name = arg.split(" ", 1)
            names.add(_full_name(module, name))
        elif op.name == "STACK_GLOBAL":
            if len(strings) < 2:
                raise ValueError("a STACK_GLOBAL whose names are not strings")
            names.add(_full_name(strings[-2], strings[-1]))
        elif isinstance(arg, str) and op.name.endswith(("UNICODE", "STRING")):
            pushed = arg
        elif op.name in ("BINPUT", "LONG_BINPUT", "PUT", "MEMOIZE"):
            key = memoized if op.name == "MEMOIZE" else arg
            memoized += op.name == "MEMOIZE"
            if top is not None:
                memo[key] = top
            pushed = top  # a PUT leaves the stack as it was
        elif op.name in ("BINGET", "LONG_BINGET", "GET"):
            pushed = memo.get(arg)
        if pushed is not None and op.name not in ("BINPUT", "LONG_BINPUT", "PUT", "MEMOIZE"):
            strings.append(pushed)
        top = pushed
    return names
