"""``lucid.jit`` (``torch.jit``): PyTorch's TorchScript API as PyTorch runs it with ``PYTORCH_JIT=0``.

NOTE [No TorchScript]
Lucid has no TorchScript compiler or interpreter (NOTE [No graph compiler] in ``compiler.py``):
every op runs eagerly. PyTorch itself has a documented mode without one, ``PYTORCH_JIT=0``
("disable JIT for debugging"): there ``script`` and ``trace`` return the function or module
they are given, ``is_scripting()``/``is_tracing()`` are False, ``fork`` runs its function at
once, ``annotate``/``Attribute`` return their value and the decorators (``ignore``, ``unused``,
``export``, ``interface``) leave what they decorate unchanged. ``lucid.jit`` is that mode, so
model code written for TorchScript (``@torch.jit.script`` helpers, ``if not
torch.jit.is_scripting():``, ``torch.jit.trace(model, x)`` before inference) runs unchanged and
computes what it computes eagerly. What needs a TorchScript archive refuses clearly:
``save``/``load`` raise NotImplementedError pointing at ``lucid.save(model.state_dict(), f)``.
"""
from __future__ import annotations

import builtins
import contextlib
import typing

from .futures import Future  # torch.jit.Future is torch.futures.Future

__all__ = ["script", "trace", "trace_module", "script_method", "script_if_tracing", "ignore", "unused",
           "export", "interface", "is_scripting", "is_tracing", "annotate", "isinstance", "Attribute", "Final",
           "fork", "wait", "Future", "freeze", "optimize_for_inference", "save", "load", "Error",
           "TracerWarning", "ScriptWarning", "TracingCheckError", "ScriptModule", "ScriptFunction",
           "optimized_execution", "fuser", "set_fusion_strategy", "enable_onednn_fusion",
           "onednn_fusion_enabled", "strict_fusion"]

Final = typing.Final


class Error(RuntimeError):
    """``torch.jit.Error``: an exception raised by scripted code (here: by the eager code)."""


class TracerWarning(Warning):
    """``torch.jit.TracerWarning``."""


class ScriptWarning(Warning):
    """``torch.jit.ScriptWarning``."""


class TracingCheckError(Exception):
    """``torch.jit.TracingCheckError``."""


class ScriptFunction:
    """``torch.jit.ScriptFunction``: for ``isinstance`` checks and annotations only; ``script``
    returns the function itself (NOTE [No TorchScript]), never one of these."""


def __getattr__(name):
    # ScriptModule subclasses lucid.nn.Module, which loads on first use (import lucid stays light).
    if name == "ScriptModule":
        from .nn import Module

        cls = type("ScriptModule", (Module,), {
            "__doc__": "``torch.jit.ScriptModule``: for subclassing and ``isinstance`` checks; "
                       "``script(module)`` returns the module itself (NOTE [No TorchScript]).",
            "__module__": __name__})
        globals()["ScriptModule"] = cls
        return cls
    raise AttributeError(f"module 'lucid.jit' has no attribute {name!r}")


def script(obj, optimize=None, _frames_up=0, _rcb=None, example_inputs=None):
    """Return ``obj`` (a function, module or class) unchanged, as ``torch.jit.script`` under
    ``PYTORCH_JIT=0`` (NOTE [No TorchScript]); it runs eagerly.

    Examples
    --------
    >>> import lucid
    >>> @lucid.jit.script
    ... def double(x):
    ...     return x * 2
    >>> double(lucid.tensor([1.0, 2.0]))
    tensor([2., 4.])
    """
    if not callable(obj):
        raise TypeError(f"script: expected a function, a Module or a class, got {type(obj).__name__}")
    return obj


def trace(func, example_inputs=None, optimize=None, check_trace=True, check_inputs=None, check_tolerance=1e-5,
          strict=True, _force_outplace=False, _module_class=None, _compilation_unit=None,
          example_kwarg_inputs=None, _store_inputs=True):
    """Return ``func`` unchanged, as ``torch.jit.trace`` under ``PYTORCH_JIT=0`` (NOTE [No
    TorchScript]): the "traced" callable is the original, so data-dependent control flow stays
    right instead of being frozen into the trace.

    Examples
    --------
    >>> import lucid, lucid.nn as nn
    >>> model = nn.Linear(2, 1)
    >>> lucid.jit.trace(model, lucid.ones(1, 2)) is model
    True
    """
    if not callable(func):
        raise TypeError(f"trace: expected a function or a Module, got {type(func).__name__}")
    return func


def trace_module(mod, inputs, optimize=None, check_trace=True, check_inputs=None, check_tolerance=1e-5,
                 strict=True, _force_outplace=False, _module_class=None, _compilation_unit=None,
                 example_inputs_is_kwarg=False, _store_inputs=True):
    """Return ``mod`` unchanged (``torch.jit.trace_module`` under ``PYTORCH_JIT=0``)."""
    if not isinstance(inputs, dict):
        raise AttributeError("trace_module: expected a dict of method names to example inputs")
    return mod


def _identity_decorator(name):
    def decorator(fn=None, **kwargs):
        if fn is None or not callable(fn):  # used with arguments: @ignore(drop=True)
            return lambda f: f
        return fn

    decorator.__name__ = decorator.__qualname__ = name
    decorator.__doc__ = (f"``torch.jit.{name}``: returns what it decorates unchanged (NOTE [No "
                         "TorchScript]); also usable with arguments.")
    return decorator


ignore = _identity_decorator("ignore")
unused = _identity_decorator("unused")
export = _identity_decorator("export")
interface = _identity_decorator("interface")
script_method = _identity_decorator("script_method")
script_if_tracing = _identity_decorator("script_if_tracing")
_script_if_tracing = script_if_tracing  # the private spelling torchvision decorates with (ops/boxes.py)


def is_scripting() -> bool:
    """False: Lucid never runs code as TorchScript (NOTE [No TorchScript]).

    Examples
    --------
    >>> import lucid
    >>> lucid.jit.is_scripting()
    False
    """
    return False


def is_tracing() -> bool:
    """False: Lucid never traces (NOTE [No TorchScript])."""
    return False


def annotate(the_type, the_value):
    """``the_value`` (TorchScript's type hint for an expression; eager code ignores it)."""
    return the_value


def Attribute(value, type):  # noqa: N802,A002  (PyTorch's names)
    """``value``: ``torch.jit.Attribute`` under ``PYTORCH_JIT=0`` is the value itself."""
    return value


def isinstance(obj, target_type):  # noqa: A001  (torch.jit.isinstance's name)
    """``torch.jit.isinstance``: Python's ``isinstance`` that also checks the element types of
    ``List[T]``, ``Dict[K, V]``, ``Tuple[...]`` and ``Optional[T]`` (refinement in TorchScript).

    Examples
    --------
    >>> import lucid
    >>> from typing import Dict, List
    >>> lucid.jit.isinstance([1, 2], List[int]), lucid.jit.isinstance({"a": 1.0}, Dict[str, int])
    (True, False)
    """
    origin, args = typing.get_origin(target_type), typing.get_args(target_type)
    if origin is None:
        return builtins.isinstance(obj, target_type)
    if origin is typing.Union:
        return any(isinstance(obj, t) for t in args)
    if origin is list:
        return builtins.isinstance(obj, list) and all(isinstance(v, args[0]) for v in obj)
    if origin is dict:
        return builtins.isinstance(obj, dict) and all(
            isinstance(k, args[0]) and isinstance(v, args[1]) for k, v in obj.items())
    if origin is tuple:
        if not builtins.isinstance(obj, tuple):
            return False
        if len(args) == 2 and args[1] is Ellipsis:
            return all(isinstance(v, args[0]) for v in obj)
        return len(obj) == len(args) and all(isinstance(v, t) for v, t in zip(obj, args))
    return builtins.isinstance(obj, origin)


def fork(func, *args, **kwargs):
    """Run ``func(*args, **kwargs)`` now and return a completed :class:`Future` of it
    (``torch.jit.fork`` outside TorchScript also runs at once).

    Examples
    --------
    >>> import lucid
    >>> fut = lucid.jit.fork(lambda x: x + 1, lucid.tensor(1.0))
    >>> lucid.jit.wait(fut)
    tensor(2.)
    """
    fut = Future()
    try:
        fut.set_result(func(*args, **kwargs))
    except Exception as e:  # noqa: BLE001  (raised again by wait(), as in PyTorch)
        fut.set_exception(e)
    return fut


def wait(future):
    """``future.wait()``."""
    return future.wait()


def freeze(mod, preserved_attrs=None, optimize_numerics=True):
    """``mod`` itself (freezing inlines a ScriptModule's parameters; an eager module already
    runs them as they are). Refuses a module in training mode, as PyTorch does."""
    if getattr(mod, "training", False):
        raise RuntimeError("freeze: freezing is currently only implemented for modules in eval mode. "
                           "Please call .eval() on your module before freezing.")
    return mod


def optimize_for_inference(mod, other_methods=None):
    """``mod`` in eval mode (PyTorch freezes it and fuses ops for inference; eager Lucid has no
    graph to rewrite)."""
    if hasattr(mod, "eval"):
        mod.eval()
    return mod


def _no_archive(name):
    raise NotImplementedError(
        f"{name}: Lucid has no TorchScript (NOTE [No TorchScript]), so it can't write or read TorchScript "
        "archives; save the weights with lucid.save(model.state_dict(), f) and rebuild the model in Python")


def save(m, f, _extra_files=None):
    """Refused: Lucid has no TorchScript archives (use ``lucid.save(model.state_dict(), f)``)."""
    _no_archive("jit.save")


def load(f, map_location=None, _extra_files=None, _restore_shapes=False):
    """Refused: Lucid can't run TorchScript archives (``lucid.load`` reads ``torch.save`` files)."""
    _no_archive("jit.load")


@contextlib.contextmanager
def optimized_execution(should_optimize):
    """A context in which TorchScript would (not) optimise: nothing to change eagerly."""
    yield


@contextlib.contextmanager
def fuser(name):
    """TorchScript's fuser choice (``"fuser0"``, ``"fuser1"``, ``"fuser2"``, ``"none"``): nothing
    to fuse eagerly; the name is checked as PyTorch checks it."""
    if name not in ("fuser0", "fuser1", "fuser2", "fuser3", "none"):
        raise Exception(f"unrecognized fuser option (name: {name})")  # PyTorch's type and message
    yield


_FUSION_STRATEGY = [[("STATIC", 2), ("DYNAMIC", 10)]]


def set_fusion_strategy(strategy):
    """Record TorchScript's fusion strategy and return the previous one (no effect eagerly)."""
    previous, _FUSION_STRATEGY[0] = _FUSION_STRATEGY[0], list(strategy)
    return previous


_ONEDNN = [False]


def enable_onednn_fusion(enabled: bool):
    """Record the oneDNN-fusion flag (Lucid has no oneDNN; no effect)."""
    _ONEDNN[0] = bool(enabled)


def onednn_fusion_enabled() -> bool:
    """The flag :func:`enable_onednn_fusion` recorded."""
    return _ONEDNN[0]


@contextlib.contextmanager
def strict_fusion():
    """TorchScript's "everything in this block must fuse" check: nothing fuses eagerly, and
    nothing is checked outside TorchScript (as in PyTorch)."""
    yield


class _BroadcastingList:
    """``torch.jit.annotations.BroadcastingList1/2/3``: TorchScript's "an int or a list of them" hint;
    subscripted outside TorchScript it gives None, as PyTorch's eager mode does."""

    def __getitem__(self, types):
        return None


def _annotations_module():
    """``torch.jit.annotations`` (``from torch.jit.annotations import List, BroadcastingList2``):
    the typing names TorchScript code imports from it. A submodule of this module, registered in
    ``sys.modules`` so that both ``from lucid.jit.annotations import ...`` and the attribute work."""
    import sys
    import types

    mod = types.ModuleType(__name__ + ".annotations", _annotations_module.__doc__)
    for name in ("Any", "Dict", "List", "Optional", "Tuple", "Union"):
        setattr(mod, name, getattr(typing, name))
    mod.BroadcastingList1 = mod.BroadcastingList2 = mod.BroadcastingList3 = _BroadcastingList()
    mod.Future = Future
    sys.modules[mod.__name__] = mod
    return mod


# Rebinds the name ``from __future__ import annotations`` bound to its feature object.
annotations = _annotations_module()
