"""``lucid.accelerator.memory`` (``torch.accelerator.memory``): the memory statistics of the
current accelerator. See NOTE [Submodules of file modules] (``lucid/_module_paths/__init__.py``).

Every name but :func:`empty_host_cache` is :mod:`lucid.accelerator`'s own function.

Examples
--------
>>> import lucid
>>> import lucid.accelerator.memory as memory
>>> memory.memory_allocated is lucid.accelerator.memory_allocated
True
"""
from __future__ import annotations

import sys

from lucid.accelerator import (empty_cache, get_memory_info, max_memory_allocated, max_memory_reserved,
                               memory_allocated, memory_reserved, memory_stats, reset_accumulated_memory_stats,
                               reset_peak_memory_stats)

__all__ = ["empty_cache", "empty_host_cache", "get_memory_info", "max_memory_allocated", "max_memory_reserved",
           "memory_allocated", "memory_reserved", "memory_stats", "reset_accumulated_memory_stats",
           "reset_peak_memory_stats"]


def empty_host_cache():
    """Release the unused blocks of the host (pinned-memory) cache.

    Lucid's one host cache is CuPy's pinned-memory pool (page-locked buffers for copies to a
    GPU); it is freed when CuPy is in use, and there is nothing to free otherwise.
    """
    cupy = sys.modules.get("cupy")  # never import CuPy for this: no CuPy, no host cache
    if cupy is not None:
        cupy.get_default_pinned_memory_pool().free_all_blocks()
