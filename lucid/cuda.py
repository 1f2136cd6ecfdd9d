"""``lucid.cuda``: the CUDA probes tutorials call first, answered truthfully (no GPU here).

This build runs on the CPU only (NOTE [Devices] in ``lucid/_core/backend.py``), so
``is_available()`` is False and ``device_count()`` is 0. The seeding calls are accepted and
do nothing, as PyTorch's do without a GPU; calls that need a GPU raise a clear error.

Examples
--------
>>> import lucid
>>> lucid.cuda.is_available(), lucid.cuda.device_count()
(False, 0)
>>> device = "cuda" if lucid.cuda.is_available() else "cpu"
>>> lucid.zeros(2, device=device).device
device(type='cpu')
"""
from __future__ import annotations

from ._core.backend import _unavailable


def is_available() -> bool:
    """False: this lucid build has no CUDA backend."""
    return False


def device_count() -> int:
    """0: no CUDA devices are visible to this build."""
    return 0


def is_initialized() -> bool:
    """False: CUDA is never initialised in this build."""
    return False


def manual_seed(seed) -> None:
    """Accepted and ignored (no CUDA generator exists), as PyTorch does without a GPU."""
    int(seed)


def manual_seed_all(seed) -> None:
    """Accepted and ignored (no CUDA generators exist), as PyTorch does without a GPU."""
    int(seed)


def seed() -> None:
    """Accepted and ignored (no CUDA generator exists)."""


seed_all = seed


def empty_cache() -> None:
    """Nothing to free: no CUDA memory is ever allocated."""


def _needs_gpu(name):
    def fn(*args, **kwargs):
        raise RuntimeError(f"lucid.cuda.{name}: {_unavailable('cuda')}")

    fn.__name__ = name
    fn.__doc__ = "Raise: this build has no CUDA device."
    return fn


current_device = _needs_gpu("current_device")
set_device = _needs_gpu("set_device")
get_device_name = _needs_gpu("get_device_name")
get_device_properties = _needs_gpu("get_device_properties")
get_device_capability = _needs_gpu("get_device_capability")
synchronize = _needs_gpu("synchronize")
memory_allocated = _needs_gpu("memory_allocated")
max_memory_allocated = _needs_gpu("max_memory_allocated")
