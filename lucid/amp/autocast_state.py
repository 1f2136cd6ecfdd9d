"""The autocast state functions PyTorch has at the top level (``torch.set_autocast_enabled`` ...).

They read and change the state an :class:`~lucid.amp.autocast` region sets and restores (NOTE
[Autocast]): per thread and per device type, an enabled flag and a dtype; per thread, the cast
cache's flag, the cache itself and a nesting count (NOTE [Autocast cache]). Turning autocast on
with :func:`set_autocast_enabled` casts ops exactly as a region does, until it is turned off.
The ``cpu``/``gpu`` spellings are PyTorch's deprecated ones and warn as PyTorch's do.
"""
from __future__ import annotations

import warnings

from .._core import backend, dtypes
from .autocast_mode import _REGIONS, _sync, get_autocast_dtype, is_autocast_enabled

__all__ = ["autocast_decrement_nesting", "autocast_increment_nesting", "clear_autocast_cache",
           "get_autocast_cpu_dtype", "get_autocast_gpu_dtype", "is_autocast_cache_enabled",
           "is_autocast_cpu_enabled", "set_autocast_cache_enabled", "set_autocast_cpu_dtype",
           "set_autocast_cpu_enabled", "set_autocast_dtype", "set_autocast_enabled", "set_autocast_gpu_dtype"]


def _device_type(device_type, name):
    if not isinstance(device_type, str):
        raise TypeError(f"{name}: device_type must be a str, got {type(device_type).__name__}")
    kind = device_type.split(":")[0]
    if kind not in backend.KNOWN_DEVICE_TYPES and kind not in backend._BACKENDS:
        raise RuntimeError(f"{name}: expected one of {', '.join(backend.KNOWN_DEVICE_TYPES)} device type at "
                           f"start of device string: {device_type}")
    return kind


def _bool(value, name):
    if not isinstance(value, bool):
        raise TypeError(f"{name}: argument 'enabled' must be bool, not {type(value).__name__}")
    return value


def _dtype(value, name):
    # "bfloat16" is what get_autocast_dtype("cpu") reports by default (lucid lacks the type):
    # accepted back so that saving and restoring the setting works
    if not isinstance(value, dtypes.dtype) and value != "bfloat16":
        raise TypeError(f"{name}: dtype must be a lucid.dtype (got {type(value).__name__})")
    return value


def _deprecated(old, new):
    warnings.warn(f"lucid.{old} is deprecated. Please use lucid.{new} instead.", DeprecationWarning, stacklevel=3)


def set_autocast_enabled(device_type, enabled=None) -> None:
    """Turn autocast on or off for ``device_type`` in this thread, as a region would.

    ``set_autocast_enabled(enabled)`` (one argument) means ``"cuda"``, as in PyTorch. Ops on
    tensors of that device type are then cast in :func:`lucid.get_autocast_dtype`'s precision
    until it is turned off; a region entered meanwhile restores this setting when it exits.

    Examples
    --------
    >>> import lucid
    >>> before = lucid.get_autocast_dtype("cpu")
    >>> lucid.set_autocast_dtype("cpu", lucid.float16)
    >>> lucid.set_autocast_enabled("cpu", True)
    >>> (lucid.ones(2, 2) @ lucid.ones(2, 2)).dtype
    lucid.float16
    >>> lucid.set_autocast_enabled("cpu", False)
    >>> lucid.set_autocast_dtype("cpu", before)
    >>> (lucid.ones(2, 2) @ lucid.ones(2, 2)).dtype
    lucid.float32
    """
    if enabled is None:
        device_type, enabled = "cuda", device_type
    kind = _device_type(device_type, "set_autocast_enabled")
    _REGIONS.enabled[kind] = _bool(enabled, "set_autocast_enabled")
    _sync(kind)


def set_autocast_dtype(device_type, dtype) -> None:
    """Set the dtype autocast casts to on ``device_type`` (this thread), enabled or not.

    lucid casts to float16 (or float32, which changes nothing); another dtype is recorded, as in
    PyTorch, but while it is set no op is cast (lucid has no bfloat16).

    Examples
    --------
    >>> import lucid
    >>> before = lucid.get_autocast_dtype("cuda")
    >>> lucid.set_autocast_dtype("cuda", lucid.float32)
    >>> lucid.get_autocast_dtype("cuda")
    lucid.float32
    >>> lucid.set_autocast_dtype("cuda", before)
    """
    kind = _device_type(device_type, "set_autocast_dtype")
    _REGIONS.dtype[kind] = _dtype(dtype, "set_autocast_dtype")
    _sync(kind)


def is_autocast_cpu_enabled() -> bool:
    """``is_autocast_enabled("cpu")`` (deprecated spelling)."""
    _deprecated("is_autocast_cpu_enabled()", "is_autocast_enabled('cpu')")
    return is_autocast_enabled("cpu")


def set_autocast_cpu_enabled(enabled) -> None:
    """``set_autocast_enabled("cpu", enabled)`` (deprecated spelling)."""
    _deprecated("set_autocast_cpu_enabled(enabled)", "set_autocast_enabled('cpu', enabled)")
    set_autocast_enabled("cpu", enabled)


def get_autocast_cpu_dtype():
    """``get_autocast_dtype("cpu")`` (deprecated spelling)."""
    _deprecated("get_autocast_cpu_dtype()", "get_autocast_dtype('cpu')")
    return get_autocast_dtype("cpu")


def set_autocast_cpu_dtype(dtype) -> None:
    """``set_autocast_dtype("cpu", dtype)`` (deprecated spelling)."""
    _deprecated("set_autocast_cpu_dtype(dtype)", "set_autocast_dtype('cpu', dtype)")
    set_autocast_dtype("cpu", dtype)


def get_autocast_gpu_dtype():
    """``get_autocast_dtype("cuda")`` (deprecated spelling)."""
    _deprecated("get_autocast_gpu_dtype()", "get_autocast_dtype('cuda')")
    return get_autocast_dtype("cuda")


def set_autocast_gpu_dtype(dtype) -> None:
    """``set_autocast_dtype("cuda", dtype)`` (deprecated spelling)."""
    _deprecated("set_autocast_gpu_dtype(dtype)", "set_autocast_dtype('cuda', dtype)")
    set_autocast_dtype("cuda", dtype)


def is_autocast_cache_enabled() -> bool:
    """Whether regions in this thread reuse a weight's cast (NOTE [Autocast cache]).

    Examples
    --------
    >>> import lucid
    >>> lucid.is_autocast_cache_enabled()
    True
    """
    return _REGIONS.cache_enabled


def set_autocast_cache_enabled(enabled) -> None:
    """Turn the cast cache on or off in this thread (a region restores it on exit)."""
    _REGIONS.cache_enabled = _bool(enabled, "set_autocast_cache_enabled")


def clear_autocast_cache() -> None:
    """Drop this thread's cached casts: the next use of a weight casts it afresh.

    The outermost region's exit does it too; call it inside a region after changing a weight
    in place, or the cached cast keeps its old value (NOTE [Autocast cache]).
    """
    _REGIONS.cache.clear()


def autocast_increment_nesting() -> int:
    """Add one to this thread's region count and return it (regions do this on entry)."""
    _REGIONS.nesting += 1
    return _REGIONS.nesting


def autocast_decrement_nesting() -> int:
    """Take one from this thread's region count and return it (a region clears the cache at 0;
    as in PyTorch the count is not clamped, so unbalanced calls can take it below 0)."""
    _REGIONS.nesting -= 1
    return _REGIONS.nesting
