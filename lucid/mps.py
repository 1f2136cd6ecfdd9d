"""``lucid.mps``: Apple's Metal device, which Lucid has no backend for (PyTorch's ``torch.mps``
on a machine without it): code that asks gets PyTorch's answers and errors.

Examples
--------
>>> import lucid
>>> lucid.mps.is_available(), lucid.mps.device_count()
(False, 0)
"""
from __future__ import annotations

__all__ = ["current_allocated_memory", "device_count", "driver_allocated_memory", "empty_cache",
           "get_rng_state", "is_available", "manual_seed", "recommended_max_memory", "seed",
           "set_per_process_memory_fraction", "set_rng_state", "synchronize"]


def is_available() -> bool:
    """False: Lucid computes on the CPU or, through CuPy, on CUDA GPUs."""
    return False


def device_count() -> int:
    """0 MPS devices."""
    return 0


def manual_seed(seed) -> None:
    """Accepted and ignored, as PyTorch does without an MPS device."""


def seed() -> None:
    """Accepted and ignored, as PyTorch does without an MPS device."""


def _unavailable(what):
    def fn(*args, **kwargs):
        raise RuntimeError(f"mps.{what}: Cannot execute {what}() without MPS backend (Lucid has no Metal "
                           "backend; use 'cpu' or 'cuda')")

    fn.__name__ = what
    fn.__doc__ = f"Raises: there is no MPS backend ({what})."
    return fn


synchronize = _unavailable("synchronize")
empty_cache = _unavailable("empty_cache")
get_rng_state = _unavailable("get_rng_state")
set_rng_state = _unavailable("set_rng_state")
current_allocated_memory = _unavailable("current_allocated_memory")
driver_allocated_memory = _unavailable("driver_allocated_memory")
recommended_max_memory = _unavailable("recommended_max_memory")
set_per_process_memory_fraction = _unavailable("set_per_process_memory_fraction")
