"""``lucid.xpu``: Intel's XPU device, which Lucid has no backend for (PyTorch's ``torch.xpu``
in a build without it): ``is_available()`` is False and device calls raise PyTorch's error.

Examples
--------
>>> import lucid
>>> lucid.xpu.is_available(), lucid.xpu.device_count()
(False, 0)
"""
from __future__ import annotations

__all__ = ["current_device", "device_count", "empty_cache", "get_device_name", "get_rng_state",
           "is_available", "is_initialized", "manual_seed", "manual_seed_all", "memory_allocated",
           "seed", "seed_all", "set_device", "set_rng_state", "synchronize"]


def is_available() -> bool:
    """False: Lucid computes on the CPU or, through CuPy, on CUDA GPUs."""
    return False


def device_count() -> int:
    """0 XPU devices."""
    return 0


def is_initialized() -> bool:
    return False


def manual_seed(seed) -> None:
    """Accepted and ignored (PyTorch queues it for a device that never comes)."""


manual_seed_all = manual_seed


def seed() -> None:
    """Accepted and ignored."""


seed_all = seed


def _unavailable(what):
    def fn(*args, **kwargs):
        raise AssertionError(f"xpu.{what}: Lucid not compiled with XPU enabled (it computes on 'cpu' or, "
                             "through CuPy, on 'cuda')")

    fn.__name__ = what
    fn.__doc__ = f"Raises AssertionError, as PyTorch without XPU: there is no XPU backend ({what})."
    return fn


synchronize = _unavailable("synchronize")
current_device = _unavailable("current_device")
set_device = _unavailable("set_device")
get_device_name = _unavailable("get_device_name")
empty_cache = _unavailable("empty_cache")
memory_allocated = _unavailable("memory_allocated")
get_rng_state = _unavailable("get_rng_state")
set_rng_state = _unavailable("set_rng_state")
