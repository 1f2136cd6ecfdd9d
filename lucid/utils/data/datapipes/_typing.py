"""The element type of a DataPipe: ``IterDataPipe[int]`` and the checks built on it.

# NOTE [DataPipe element types]
``IterDataPipe[T]`` is a ``types.GenericAlias`` (as in PyTorch); a class subclassing it has
``type == _DataPipeType(T)`` (``Any`` otherwise), which ``argument_validation`` and
``runtime_validation`` check against. ``issubtype`` understands plain
classes, ``Any``, ``Union``/``Optional`` and parametrized generics (``list[int]``,
``Tuple[int, str]``); that is all the runtime checks need.
"""
from __future__ import annotations

import collections.abc
import typing
from typing import Any, Union, get_args, get_origin


def _norm_origin(t):
    origin = get_origin(t)
    return origin if origin is not None else t


def issubtype(left, right, recursive=True):
    """Whether the type ``left`` is a subtype of ``right`` (``Any`` accepts everything).

    Examples
    --------
    >>> from typing import Union
    >>> from lucid.utils.data.datapipes._typing import issubtype
    >>> issubtype(int, Union[int, str]), issubtype(list[int], list)
    (True, True)
    """
    if right is Any or left == right:
        return True
    if get_origin(right) is Union:
        return any(issubtype(left, r) for r in get_args(right))
    if get_origin(left) is Union:
        return all(issubtype(a, right) for a in get_args(left))
    if left is Any:
        return False
    lo, ro = _norm_origin(left), _norm_origin(right)
    if not (isinstance(lo, type) and isinstance(ro, type) and issubclass(lo, ro)):
        return False
    rargs = get_args(right)
    if not rargs or not recursive:
        return True
    largs = get_args(left)
    if not largs:
        return False
    if len(largs) != len(rargs):
        return False
    return all(issubtype(a, b) for a, b in zip(largs, rargs))


def issubinstance(data, data_type):
    """Whether the value ``data`` is an instance of the type ``data_type`` (elements included)."""
    if data_type is Any:
        return True
    origin = get_origin(data_type)
    if origin is Union:
        return any(issubinstance(data, t) for t in get_args(data_type))
    if origin is None:
        return isinstance(data, data_type)
    if not isinstance(data, origin):
        return False
    args = get_args(data_type)
    if not args:
        return True
    if issubclass(origin, tuple):
        if len(args) == 2 and args[1] is Ellipsis:
            return all(issubinstance(d, args[0]) for d in data)
        return len(args) == len(data) and all(issubinstance(d, t) for d, t in zip(data, args))
    if issubclass(origin, collections.abc.Mapping):
        kt, vt = args
        return all(issubinstance(k, kt) and issubinstance(v, vt) for k, v in data.items())
    if issubclass(origin, collections.abc.Iterable):
        return all(issubinstance(d, args[0]) for d in data)
    return True


def _type_repr(t):
    if isinstance(t, type) and get_origin(t) is None:
        return t.__qualname__ if t.__module__ == "builtins" else f"{t.__module__}.{t.__qualname__}"
    return typing._type_repr(t)


class _DataPipeType:
    """The element type of a DataPipe, compared with ``issubtype``."""

    def __init__(self, param):
        self.param = param

    def __repr__(self):
        return _type_repr(self.param)

    def __eq__(self, other):
        if isinstance(other, _DataPipeType):
            return self.param == other.param
        return NotImplemented

    def __hash__(self):
        return hash(self.param)

    def issubtype(self, other):
        if isinstance(other, _DataPipeType):
            return issubtype(self.param, other.param)
        if isinstance(other, type):
            return issubtype(self.param, other)
        raise TypeError(f"Expected '_DataPipeType' or 'type', but found {type(other)}")

    def issubtype_of_instance(self, other):
        return issubinstance(other, self.param)


def _element_type(cls):
    """The ``T`` of the nearest ``IterDataPipe[T]``/``MapDataPipe[T]`` base of ``cls`` (``Any`` if none)."""
    for klass in cls.__mro__:
        for base in klass.__dict__.get("__orig_bases__", ()):
            origin = get_origin(base)
            if isinstance(origin, _DataPipeMeta) and get_args(base):
                return get_args(base)[0]
    return Any


class _DataPipeMeta(type):
    """Metaclass of DataPipes. ``IterDataPipe[int]`` is a ``types.GenericAlias`` as in PyTorch;
    the ``type`` of a class (and of its instances) is the ``T`` it was subclassed from.
    See NOTE [DataPipe element types]."""

    @property
    def type(cls):
        return _DataPipeType(_element_type(cls))
