"""``torch.serialization``'s loading options and location registry, re-exported by
``lucid.serialization``: the fallback byte order of a PyTorch checkpoint without a byteorder
record, the flags of ``load(mmap=True)``'s map, and ``register_package`` /
``default_restore_location`` / ``location_tag`` (fairseq-style ``map_location`` callables call
``default_restore_location(storage, "cpu")``).

In Lucid a ``map_location`` callable gets tensors (NOTE [PyTorch checkpoints]: a checkpoint's
storages are 1-d tensors), so the registry's taggers and deserializers take and return tensors.
"""
from __future__ import annotations

import mmap as _mmap
import sys
from enum import Enum

__all__ = ["LoadEndianness", "get_default_load_endianness", "set_default_load_endianness",
           "get_default_mmap_options", "set_default_mmap_options", "register_package",
           "default_restore_location", "location_tag", "SourceChangeWarning"]


class SourceChangeWarning(Warning):
    """PyTorch warns with it when a pickled module's source changed; Lucid never pickles
    modules, so it is here for code that filters it."""


class LoadEndianness(Enum):
    NATIVE = 1
    LITTLE = 2
    BIG = 3


_LOAD = {"endianness": None, "mmap_flags": _mmap.MAP_PRIVATE}


def get_default_load_endianness():
    """The byte order assumed for a PyTorch checkpoint without a byteorder record (written
    before PyTorch 1.10); None means native, as in PyTorch.

    Examples
    --------
    >>> import lucid.serialization as S
    >>> S.get_default_load_endianness() is None
    True
    """
    return _LOAD["endianness"]


def set_default_load_endianness(endianness):
    """Set that fallback byte order (a :class:`LoadEndianness` or None)."""
    if not isinstance(endianness, LoadEndianness) and endianness is not None:
        raise TypeError("set_default_load_endianness: expected a LoadEndianness or None, got "
                        f"{type(endianness).__name__}")
    _LOAD["endianness"] = endianness


def fallback_byteorder():
    """NumPy's byte-order character for a checkpoint without a byteorder record."""
    e = _LOAD["endianness"]
    if e is None or e is LoadEndianness.NATIVE:
        return "<" if sys.byteorder == "little" else ">"
    return "<" if e is LoadEndianness.LITTLE else ">"


def get_default_mmap_options():
    """The flags of ``lucid.load(..., mmap=True)``'s map: ``mmap.MAP_PRIVATE`` (the default: writes
    to the loaded tensors stay in memory) or ``mmap.MAP_SHARED`` (they reach the file)."""
    return _LOAD["mmap_flags"]


class set_default_mmap_options:  # noqa: N801 (PyTorch's name: a function and a context manager)
    """Set ``load(mmap=True)``'s map flags; as a context manager, restore them on exit.

    Parameters
    ----------
    flags : int
        ``mmap.MAP_PRIVATE`` or ``mmap.MAP_SHARED``.

    Examples
    --------
    >>> import mmap, lucid.serialization as S
    >>> with S.set_default_mmap_options(mmap.MAP_SHARED):
    ...     S.get_default_mmap_options() == mmap.MAP_SHARED
    True
    >>> S.get_default_mmap_options() == mmap.MAP_PRIVATE
    True
    """

    def __init__(self, flags):
        if flags not in (_mmap.MAP_PRIVATE, _mmap.MAP_SHARED):
            raise ValueError("Invalid argument in function set_default_mmap_options, expected mmap.MAP_PRIVATE or "
                             f"mmap.MAP_SHARED, but got {flags}")
        self.prev = _LOAD["mmap_flags"]
        _LOAD["mmap_flags"] = flags

    def __enter__(self):
        return None

    def __exit__(self, *exc):
        _LOAD["mmap_flags"] = self.prev


def _device_tag(tensor):
    from ._core.tensor import Tensor

    return str(tensor.device) if isinstance(tensor, Tensor) else None


def _device_restore(tensor, location):
    """Lucid's own deserializer: the tensor on ``location`` if Lucid has that device (None
    otherwise, as PyTorch's deserializers answer for a location that is not theirs)."""
    from ._core.backend import check_device

    try:
        dev = check_device(location)
    except (RuntimeError, TypeError, ValueError):
        return None
    return tensor if tensor.device == dev else tensor.to(dev)


# (priority, tagger, deserializer), sorted by priority; Lucid's own devices last
_PACKAGES = [(100, _device_tag, _device_restore)]


def register_package(priority, tagger, deserializer):
    """Register a tagger (``tensor -> location string or None``) and a deserializer
    (``(tensor, location) -> tensor or None``) for other devices; lower priorities are asked
    first, Lucid's own entry (cpu, cuda, meta ...) has priority 100.

    Examples
    --------
    >>> import lucid, lucid.serialization as S
    >>> S.register_package(10, lambda t: None, lambda t, loc: t * 0 if loc == "zeros" else None)
    >>> S.default_restore_location(lucid.ones(2), "zeros").tolist()
    [0.0, 0.0]
    """
    if not callable(tagger) or not callable(deserializer):
        raise TypeError("register_package: tagger and deserializer must be callables")
    _PACKAGES.append((priority, tagger, deserializer))
    _PACKAGES.sort(key=lambda entry: entry[0])


def default_restore_location(storage, location):
    """``storage`` (a tensor) restored on ``location`` by the first registered deserializer
    that answers, as ``torch.serialization.default_restore_location``: ``"cpu"`` or ``"cuda:0"``
    moves it there.

    Examples
    --------
    >>> import lucid, lucid.serialization as S
    >>> S.default_restore_location(lucid.ones(2), "cpu").device
    device(type='cpu')
    """
    for _, _, restore in _PACKAGES:
        out = restore(storage, location)
        if out is not None:
            return out
    raise RuntimeError(f"don't know how to restore data location of {type(storage).__name__} (tagged with "
                       f"{location})")


def location_tag(storage):
    """The location string of ``storage`` (a tensor): ``"cpu"``, ``"cuda:0"`` ...

    Examples
    --------
    >>> import lucid, lucid.serialization as S
    >>> S.location_tag(lucid.ones(1))
    'cpu'
    """
    for _, tag, _ in _PACKAGES:
        where = tag(storage)
        if where:
            return where
    raise RuntimeError(f"don't know how to determine data location of {type(storage).__name__}")
