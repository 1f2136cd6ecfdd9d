"""``torch.distributed``'s exception types and its debug level.

``DistError`` is a RuntimeError, so code catching PyTorch's runtime errors keeps working;
``DistStoreError`` comes from the stores (a timeout, a closed server), ``QueueEmptyError``
from a non-blocking ``Store.queue_pop``, ``DistNetworkError`` from a connection that cannot be
made, ``DistBackendError`` from the communication library.

Examples
--------
>>> import lucid.distributed as dist
>>> issubclass(dist.QueueEmptyError, dist.DistStoreError), issubclass(dist.DistError, RuntimeError)
(True, True)
>>> dist.get_debug_level()
<DebugLevel.OFF: 0>
"""
from __future__ import annotations

import enum
import os

__all__ = ["DistError", "DistBackendError", "DistNetworkError", "DistStoreError", "QueueEmptyError",
           "DebugLevel", "get_debug_level", "set_debug_level", "set_debug_level_from_env"]


class DistError(RuntimeError):
    """The base of the distributed package's errors."""


class DistBackendError(DistError):
    """The communication library failed."""


class DistNetworkError(DistError):
    """A connection could not be made or broke."""


class DistStoreError(DistError):
    """A store operation failed or timed out."""


class QueueEmptyError(DistStoreError):
    """``Store.queue_pop(key, block=False)`` found the queue empty."""


class DebugLevel(enum.IntEnum):
    """``TORCH_DISTRIBUTED_DEBUG``'s levels; Lucid reads the level but logs nothing extra."""

    OFF = 0
    INFO = 1
    DETAIL = 2


_LEVEL = [None]  # None: not read from the environment yet


def set_debug_level(level):
    """Set the debug level (a ``DebugLevel``)."""
    if not isinstance(level, DebugLevel):
        raise TypeError(f"set_debug_level: expected a DebugLevel, got {type(level).__name__}")
    _LEVEL[0] = level


def set_debug_level_from_env():
    """Read ``TORCH_DISTRIBUTED_DEBUG`` (OFF, INFO or DETAIL; unset is OFF)."""
    name = os.environ.get("TORCH_DISTRIBUTED_DEBUG", "OFF").upper()
    if name not in DebugLevel.__members__:
        raise ValueError(f"set_debug_level_from_env: TORCH_DISTRIBUTED_DEBUG={name!r}; "
                         "expected OFF, INFO or DETAIL")
    _LEVEL[0] = DebugLevel[name]


def get_debug_level():
    """The debug level (read from ``TORCH_DISTRIBUTED_DEBUG`` on the first call)."""
    if _LEVEL[0] is None:
        set_debug_level_from_env()
    return _LEVEL[0]
