"""Decorators: functional forms, determinism guarantees and element-type validation."""
from __future__ import annotations

import inspect
from functools import wraps
from typing import get_args, get_origin, get_type_hints

from ._typing import _DataPipeMeta, _DataPipeType
from .datapipe import IterDataPipe, MapDataPipe


class functional_datapipe:
    """Register a DataPipe class under a functional name: ``dp.<name>(*args)`` builds it.

    Parameters
    ----------
    name : str
        The method name (``"map"`` gives ``dp.map``).

    Examples
    --------
    >>> from lucid.utils.data import IterDataPipe, functional_datapipe
    >>> @functional_datapipe("twice_doc_example")
    ... class Twice(IterDataPipe):
    ...     def __init__(self, dp):
    ...         self.dp = dp
    ...     def __iter__(self):
    ...         for x in self.dp:
    ...             yield x
    ...             yield x
    """

    def __init__(self, name, enable_df_api_tracing=False):
        self.name = name
        self.enable_df_api_tracing = enable_df_api_tracing

    def __call__(self, cls):
        if isinstance(cls, non_deterministic) or (
                hasattr(cls, "__self__") and isinstance(cls.__self__, non_deterministic)):
            IterDataPipe.register_datapipe_as_function(self.name, cls)
            return cls
        if not isinstance(cls, type):
            raise TypeError("`functional_datapipe` can only decorate IterDataPipe")
        if issubclass(cls, IterDataPipe):
            IterDataPipe.register_datapipe_as_function(self.name, cls, self.enable_df_api_tracing)
        elif issubclass(cls, MapDataPipe):
            MapDataPipe.register_datapipe_as_function(self.name, cls)
        else:
            raise TypeError(f"`functional_datapipe` can only decorate IterDataPipe or MapDataPipe, "
                            f"but {cls.__name__} is found")
        return cls


_determinism = False


class guaranteed_datapipes_determinism:
    """Within this context (or after constructing it, as in PyTorch), building a pipe marked
    ``non_deterministic`` raises TypeError."""

    def __init__(self):
        global _determinism
        self.prev = _determinism
        _determinism = True

    def __enter__(self):
        pass

    def __exit__(self, exc_type, exc_value, traceback):
        global _determinism
        _determinism = self.prev


class non_deterministic:
    """Mark an IterDataPipe class as non-deterministic (always, or when ``fn(*args)`` is True).

    Examples
    --------
    >>> from lucid.utils.data import IterDataPipe, non_deterministic
    >>> @non_deterministic
    ... class Racy(IterDataPipe):
    ...     def __iter__(self):
    ...         yield 1
    """

    cls = None

    def __init__(self, arg):
        if isinstance(arg, type):
            if not issubclass(arg, IterDataPipe):
                raise TypeError("Only `IterDataPipe` can be decorated with `non_deterministic`"
                                f", but {arg.__name__} is found")
            self.cls = arg
        elif callable(arg):
            self.deterministic_fn = arg
        else:
            raise TypeError(f"{arg} can not be decorated by non_deterministic")

    def __call__(self, *args, **kwargs):
        if self.cls is not None:
            if _determinism:
                raise TypeError(f"{self.cls.__name__} is non-deterministic, but you set "
                                "'guaranteed_datapipes_determinism'. You can turn off determinism for this "
                                "DataPipe if that is acceptable for your application")
            return self.cls(*args, **kwargs)
        if not (isinstance(args[0], type) and issubclass(args[0], IterDataPipe)):
            raise TypeError(f"Only `IterDataPipe` can be decorated, but {args[0].__name__} is found")
        self.cls = args[0]
        return self.deterministic_wrapper_fn

    def deterministic_wrapper_fn(self, *args, **kwargs):
        res = self.deterministic_fn(*args, **kwargs)
        if not isinstance(res, bool):
            raise TypeError("deterministic_fn of `non_deterministic` decorator is required "
                            f"to return a boolean value, but {type(res)} is found")
        if _determinism and res:
            raise TypeError(f"{self.cls.__name__} is non-deterministic with the inputs, but you set "
                            "'guaranteed_datapipes_determinism'. You can turn off determinism "
                            "for this DataPipe if that is acceptable for your application")
        return self.cls(*args, **kwargs)


def _datapipe_hint(hint):
    """The element type an ``IterDataPipe[T]`` annotation asks for, or None if ``hint`` is no DataPipe type."""
    origin = get_origin(hint) or hint
    if isinstance(origin, _DataPipeMeta):
        args = get_args(hint)
        return _DataPipeType(args[0]) if args else origin.type
    return None


def argument_validation(f):
    """Check, at each call, that arguments annotated ``IterDataPipe[T]`` are IterDataPipes whose
    element type is a subtype of ``T``.

    Examples
    --------
    >>> from lucid.utils.data import IterDataPipe, argument_validation
    >>> @argument_validation
    ... def first(dp: IterDataPipe[int]):
    ...     return next(iter(dp))
    """
    signature = inspect.signature(f)
    hints = get_type_hints(f)

    @wraps(f)
    def wrapper(*args, **kwargs):
        bound = signature.bind(*args, **kwargs)
        for name, value in bound.arguments.items():
            expected = _datapipe_hint(hints.get(name))
            if expected is None:
                continue
            if not isinstance(value, IterDataPipe):
                raise TypeError(f"Expected argument '{name}' as a IterDataPipe, but found {type(value)}")
            if not value.type.issubtype(expected):
                raise TypeError(f"Expected type of argument '{name}' as a subtype of "
                                f"hint {expected}, but found {value.type}")
        return f(*args, **kwargs)

    return wrapper


_runtime_validation_enabled = True


class runtime_validation_disabled:
    """Within this context, ``runtime_validation`` checks nothing."""

    def __init__(self):
        global _runtime_validation_enabled
        self.prev = _runtime_validation_enabled
        _runtime_validation_enabled = False

    def __enter__(self):
        pass

    def __exit__(self, exc_type, exc_value, traceback):
        global _runtime_validation_enabled
        _runtime_validation_enabled = self.prev


def runtime_validation(f):
    """Decorate an ``__iter__``: every element it yields must be an instance of the pipe's type."""
    if f.__name__ != "__iter__":
        raise TypeError(f"Can not decorate function {f.__name__} with 'runtime_validation'")

    @wraps(f)
    def wrapper(self):
        if not _runtime_validation_enabled:
            yield from f(self)
            return
        for d in f(self):
            if not self.type.issubtype_of_instance(d):
                raise RuntimeError(f"Expected an instance as subtype of {self.type}, but found {d}({type(d)})")
            yield d

    return wrapper
