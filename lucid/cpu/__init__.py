"""``lucid.cpu`` (``torch.cpu``): the CPU as a device module, beside ``lucid.cuda``.

Device-generic code (``lucid.get_device_module(x.device).synchronize()``) runs unchanged on
the CPU: the CPU is always available, has one device, and runs every op synchronously, so
streams and events have nothing to wait for.
"""
from __future__ import annotations

import contextlib

__all__ = ["Event", "Stream", "StreamContext", "current_device", "current_stream", "device_count", "is_available",
           "is_initialized", "set_device", "stream", "synchronize"]


def is_available() -> bool:
    """True: there is always a CPU."""
    return True


def is_initialized() -> bool:
    """True: the CPU needs no initialisation."""
    return True


def device_count() -> int:
    """1, as PyTorch's ``torch.cpu.device_count``."""
    return 1


def current_device() -> str:
    """``"cpu"``."""
    return "cpu"


def set_device(device) -> None:
    """Accepted for device-generic code; there is one CPU device."""


def synchronize(device=None) -> None:
    """Returns at once: CPU ops have finished when they return."""


class Stream:
    """The CPU's single stream (work is synchronous: nothing to wait for)."""

    def __init__(self, priority=-1):
        self.priority = priority

    def wait_stream(self, stream):
        """Nothing to wait for."""

    def synchronize(self):
        """Nothing to wait for."""

    def query(self):
        return True


class Event:
    """A CPU event: recorded work is always complete."""

    def __init__(self, enable_timing=False):
        self.enable_timing = enable_timing

    def record(self, stream=None):
        """Nothing to record: the CPU is synchronous."""

    def wait(self, stream=None):
        """Nothing to wait for."""

    def query(self):
        return True

    def synchronize(self):
        """Nothing to wait for."""


_DEFAULT_STREAM = Stream()


def current_stream(device=None):
    """The CPU's stream."""
    return _DEFAULT_STREAM


StreamContext = contextlib.nullcontext


def stream(stream):
    """A context that makes ``stream`` current: a no-op on the CPU."""
    return contextlib.nullcontext(stream)


def __getattr__(name):
    if name == "amp":  # PyTorch's older ``torch.cpu.amp`` spellings; loads lucid.amp only when asked for
        import importlib

        return importlib.import_module(".amp", __name__)
    raise AttributeError(f"module 'lucid.cpu' has no attribute {name!r}")
