"""``lucid.cuda.memory`` (``torch.cuda.memory``): what CuPy's memory pool holds, per GPU.

CuPy's default pool keeps one sub-pool per device; its counters read the current device's,
so each call here makes the asked-for device current while it reads. The pool keeps no peaks
and no event counters: the peaks here are sampled (at each call, and raised to the bytes the
pool holds, an upper bound of what was ever in use); ``memory_stats`` reports only what the
pool knows. Without a GPU the counters are 0 and the stats empty, as in PyTorch; the calls
that need a device raise a RuntimeError that says why.
"""
from __future__ import annotations

import collections

from . import _cupy, _index, is_available, is_initialized

__all__ = ["empty_cache", "get_per_process_memory_fraction", "max_memory_allocated", "max_memory_reserved",
           "mem_get_info", "memory_allocated", "memory_reserved", "memory_stats", "memory_summary",
           "reset_accumulated_memory_stats", "reset_max_memory_allocated", "reset_peak_memory_stats",
           "set_per_process_memory_fraction", "memory_cached", "max_memory_cached", "reset_max_memory_cached"]

_PEAK_ALLOCATED: dict = {}  # device index -> sampled peak
_PEAK_RESERVED: dict = {}


def _pool_bytes(device, name):
    """``(index, used bytes, held bytes, free bytes)`` of ``device``'s pool."""
    cupy, i = _index(device, name)
    pool = cupy.get_default_memory_pool()
    with cupy.cuda.Device(i):
        used, held = pool.used_bytes(), pool.total_bytes()
    _PEAK_ALLOCATED[i] = max(_PEAK_ALLOCATED.get(i, 0), used)
    _PEAK_RESERVED[i] = max(_PEAK_RESERVED.get(i, 0), held)
    return i, used, held, held - used


def memory_allocated(device=None) -> int:
    """Bytes held by live CUDA arrays on ``device`` (0 before CUDA is used, as PyTorch)."""
    if not is_initialized():
        return 0
    return _pool_bytes(device, "memory_allocated")[1]


def memory_reserved(device=None) -> int:
    """Bytes CuPy's pool holds from the driver on ``device`` (in use + cached)."""
    if not is_initialized():
        return 0
    return _pool_bytes(device, "memory_reserved")[2]


def max_memory_allocated(device=None) -> int:
    """The largest :func:`memory_allocated` seen since the last reset (sampled: see the module's
    docstring; the pool's held bytes bound it from above, so that value is counted too)."""
    if not is_initialized():
        return 0
    i, used, held, _ = _pool_bytes(device, "max_memory_allocated")
    _PEAK_ALLOCATED[i] = max(_PEAK_ALLOCATED[i], held)
    return _PEAK_ALLOCATED[i]


def max_memory_reserved(device=None) -> int:
    """The largest :func:`memory_reserved` seen since the last reset (sampled)."""
    if not is_initialized():
        return 0
    return _PEAK_RESERVED[_pool_bytes(device, "max_memory_reserved")[0]]


def reset_peak_memory_stats(device=None) -> None:
    """Restart the peaks of ``device`` from the current values (does nothing without a GPU)."""
    if not is_initialized():
        return
    cupy, i = _index(device, "reset_peak_memory_stats")
    _PEAK_ALLOCATED.pop(i, None)
    _PEAK_RESERVED.pop(i, None)
    _pool_bytes(i, "reset_peak_memory_stats")


def reset_max_memory_allocated(device=None) -> None:
    """:func:`reset_peak_memory_stats` (PyTorch's older name; it resets every peak too)."""
    reset_peak_memory_stats(device)


def _renamed(old, new):
    import warnings

    warnings.warn(f"`lucid.cuda.{old}` has been renamed to `lucid.cuda.{new}`", FutureWarning, stacklevel=3)


def memory_cached(device=None) -> int:
    """Deprecated (PyTorch 1.4): :func:`memory_reserved`, with PyTorch's FutureWarning."""
    _renamed("memory_cached", "memory_reserved")
    return memory_reserved(device)


def max_memory_cached(device=None) -> int:
    """Deprecated: :func:`max_memory_reserved`, with PyTorch's FutureWarning."""
    _renamed("max_memory_cached", "max_memory_reserved")
    return max_memory_reserved(device)


def reset_max_memory_cached(device=None) -> None:
    """Deprecated: :func:`reset_peak_memory_stats`, with PyTorch's FutureWarning."""
    _renamed("reset_max_memory_cached", "reset_peak_memory_stats")
    reset_peak_memory_stats(device)


def reset_accumulated_memory_stats(device=None) -> None:
    """Reset the accumulated counters: CuPy's pool keeps none (no allocation or free counts), so
    there is nothing to reset; checks ``device``."""
    if is_initialized():
        _index(device, "reset_accumulated_memory_stats")


def memory_stats(device=None) -> dict:
    """The pool's figures under PyTorch's key names (an OrderedDict; empty without a GPU):
    ``allocated_bytes.all.{current,peak}``, ``reserved_bytes.all.{current,peak}``,
    ``active_bytes.all.current`` and ``inactive_split_bytes.all.current`` (cached, unused)."""
    if not is_initialized():
        return collections.OrderedDict()
    i, used, held, free = _pool_bytes(device, "memory_stats")
    _PEAK_ALLOCATED[i] = max(_PEAK_ALLOCATED[i], held)
    return collections.OrderedDict(sorted({
        "active_bytes.all.current": used, "allocated_bytes.all.current": used,
        "allocated_bytes.all.peak": _PEAK_ALLOCATED[i], "inactive_split_bytes.all.current": free,
        "reserved_bytes.all.current": held, "reserved_bytes.all.peak": _PEAK_RESERVED[i],
    }.items()))


def memory_summary(device=None, abbreviated: bool = False) -> str:
    """A printable table of :func:`memory_stats` (raises without a GPU)."""
    _cupy("memory_summary")
    stats = memory_stats(device)
    _, i = _index(device, "memory_summary")
    width = max(len(k) for k in stats)
    lines = [f"lucid.cuda memory summary, device {i} (CuPy memory pool)"]
    lines += [f"  {k:<{width}}  {v:>16,d} B" for k, v in stats.items()]
    return "\n".join(lines) + "\n"


def mem_get_info(device=None) -> tuple:
    """``(free, total)`` bytes of the GPU's memory, as the driver reports (``cudaMemGetInfo``)."""
    cupy, i = _index(device, "mem_get_info")
    with cupy.cuda.Device(i):
        free, total = cupy.cuda.runtime.memGetInfo()
    return int(free), int(total)


def set_per_process_memory_fraction(fraction, device=None) -> None:
    """Cap the bytes CuPy's pool may take from ``device`` at ``fraction`` of its memory
    (``MemoryPool.set_limit``); an allocation past it raises CuPy's OutOfMemoryError."""
    cupy, i = _index(device, "set_per_process_memory_fraction")
    if not isinstance(fraction, float):
        raise TypeError("set_per_process_memory_fraction: invalid type for fraction argument, must be `float`")
    if not 0 <= fraction <= 1:
        raise ValueError(f"set_per_process_memory_fraction: invalid fraction value: {fraction}. Allowed range: 0~1")
    with cupy.cuda.Device(i):
        cupy.get_default_memory_pool().set_limit(fraction=fraction)


def get_per_process_memory_fraction(device=None) -> float:
    """The cap set by :func:`set_per_process_memory_fraction` as a fraction of ``device``'s
    memory (1.0 when none is set)."""
    cupy, i = _index(device, "get_per_process_memory_fraction")
    with cupy.cuda.Device(i):
        limit = cupy.get_default_memory_pool().get_limit()
        total = cupy.cuda.runtime.memGetInfo()[1]
    return 1.0 if not limit else limit / total


def empty_cache() -> None:
    """Give cached, unused blocks of CuPy's memory pools back to the driver (nothing to do
    before CUDA is used)."""
    if is_initialized() and is_available():
        import cupy

        cupy.get_default_memory_pool().free_all_blocks()
        cupy.get_default_pinned_memory_pool().free_all_blocks()
