"""``lucid.accelerator`` (``torch.accelerator``): the device-generic face of the accelerator.

lucid's one accelerator is CUDA (through CuPy, :mod:`lucid.cuda`); each call here is the
matching ``lucid.cuda`` call. Without one, as in PyTorch on a CPU-only machine,
``is_available()`` is False, ``current_accelerator()`` None, ``device_count()`` 0, and the
calls that need a device raise ``RuntimeError("...: Cannot access accelerator device when none
is available.")``. The strict stand-in device of the tests (``lucid.testing.strict_device``)
is not an accelerator: it runs on the host.

This module also holds :class:`Stream` and :class:`Event` (``lucid.Stream``, ``lucid.Event``):
PyTorch's device-generic stream and event, on the accelerator when there is one, else on the CPU.

Examples
--------
>>> import lucid
>>> device = lucid.accelerator.current_accelerator().type if lucid.accelerator.is_available() else "cpu"
>>> lucid.ones(2, device=device).device.type == device
True
"""
from __future__ import annotations

import importlib.util
import os
import warnings

from ._core import backend as _backend

# submodules (lucid.accelerator.memory) live in a folder: NOTE [Submodules of file modules]
__path__ = [os.path.join(os.path.dirname(__file__), "_module_paths", "accelerator")]

__all__ = ["current_accelerator", "current_device_idx", "current_device_index", "current_stream", "device_count",
           "device_index", "empty_cache", "get_device_capability", "get_memory_info", "is_available",
           "max_memory_allocated", "max_memory_reserved", "memory_allocated", "memory_reserved", "memory_stats",
           "reset_accumulated_memory_stats", "reset_peak_memory_stats", "set_device_idx", "set_device_index",
           "set_stream", "synchronize"]


def _cuda():
    import lucid.cuda

    return lucid.cuda


def _require(name):
    cuda = _cuda()
    if not cuda.is_available():
        raise RuntimeError(f"lucid.accelerator.{name}: Cannot access accelerator device when none is available.")
    return cuda


def _index(device, name):
    """``device`` (None, an index, "cuda:N" or a :class:`lucid.device`) as a CUDA index."""
    cuda = _require(name)
    if device is None:
        return cuda.current_device()
    if isinstance(device, int) and not isinstance(device, bool):
        return device
    d = _backend.device(device)
    if d.type != "cuda":
        raise ValueError(f"lucid.accelerator.{name}: {str(d)!r} is not the current accelerator (cuda)")
    return cuda.current_device() if d.index is None else d.index


def is_available() -> bool:
    """Whether an accelerator (a CUDA GPU CuPy can use) is there."""
    return _cuda().is_available()


def current_accelerator(check_available: bool = False):
    """``lucid.device("cuda")`` if lucid can run on CUDA here (CuPy is installed), else None;
    with ``check_available=True`` only if a GPU is also there. As PyTorch's, the device has no
    index (see :func:`current_device_index`)."""
    if importlib.util.find_spec("cupy") is None or (check_available and not is_available()):
        return None
    return _backend.device("cuda")


def device_count() -> int:
    """How many accelerator devices there are (0 without one)."""
    return _cuda().device_count()


def current_device_index() -> int:
    """The index of the current accelerator device."""
    return _require("current_device_index").current_device()


def set_device_index(device, /) -> None:
    """Make ``device`` (an index, "cuda:N" or a :class:`lucid.device`) the current one."""
    _require("set_device_index").set_device(_index(device, "set_device_index"))


def current_device_idx() -> int:
    """:func:`current_device_index` (PyTorch's earlier name; warns as PyTorch's does)."""
    warnings.warn("Use `current_device_index` instead.", FutureWarning, stacklevel=2)
    return current_device_index()


def set_device_idx(device, /) -> None:
    """:func:`set_device_index` (PyTorch's earlier name; warns as PyTorch's does)."""
    warnings.warn("Use `set_device_index` instead.", FutureWarning, stacklevel=2)
    set_device_index(device)


class device_index:  # noqa: N801 (PyTorch's name)
    """Context manager making accelerator device ``device`` current inside the block (None: a
    no-op, also without an accelerator)."""

    def __init__(self, device, /):
        self.idx = device
        self.prev_idx = -1

    def __enter__(self):
        if self.idx is not None:
            self.prev_idx = current_device_index()
            set_device_index(self.idx)

    def __exit__(self, *exc):
        if self.idx is not None and self.prev_idx >= 0:
            set_device_index(self.prev_idx)
        return False


def current_stream(device=None, /):
    """The current :class:`Stream` of ``device``."""
    i = _index(device, "current_stream")
    return Stream._of(_cuda().current_stream(i))


def set_stream(stream, /) -> None:
    """Make ``stream`` (a :class:`Stream` or ``lucid.cuda.Stream``) current on its device."""
    if not isinstance(stream, Stream) and not isinstance(stream, _cuda().Stream):
        raise TypeError(f"lucid.accelerator.set_stream: expected a lucid.Stream, got {type(stream).__name__}")
    _require("set_stream").set_stream(getattr(stream, "_impl", stream))


def synchronize(device=None, /) -> None:
    """Wait for every kernel queued on ``device`` to finish."""
    _cuda().synchronize(_index(device, "synchronize"))


def empty_cache() -> None:
    """Give the accelerator's cached, unused memory back to the driver."""
    _require("empty_cache").empty_cache()


def memory_allocated(device_index=None, /) -> int:
    """Bytes held by live tensors on the device."""
    return _cuda().memory_allocated(_index(device_index, "memory_allocated"))


def max_memory_allocated(device_index=None, /) -> int:
    """The peak of :func:`memory_allocated` since the last reset."""
    return _cuda().max_memory_allocated(_index(device_index, "max_memory_allocated"))


def memory_reserved(device_index=None, /) -> int:
    """Bytes the allocator holds from the driver (in use + cached)."""
    return _cuda().memory_reserved(_index(device_index, "memory_reserved"))


def max_memory_reserved(device_index=None, /) -> int:
    """The peak of :func:`memory_reserved` since the last reset."""
    return _cuda().max_memory_reserved(_index(device_index, "max_memory_reserved"))


def memory_stats(device_index=None, /) -> dict:
    """The allocator's figures (see ``lucid.cuda.memory_stats``)."""
    return _cuda().memory_stats(_index(device_index, "memory_stats"))


def reset_peak_memory_stats(device_index=None, /) -> None:
    """Restart the peaks from the current values."""
    _cuda().reset_peak_memory_stats(_index(device_index, "reset_peak_memory_stats"))


def reset_accumulated_memory_stats(device_index=None, /) -> None:
    """Reset the accumulated counters (CuPy's pool keeps none)."""
    _cuda().reset_accumulated_memory_stats(_index(device_index, "reset_accumulated_memory_stats"))


def get_memory_info(device_index=None, /) -> tuple:
    """``(free, total)`` bytes of the device's memory."""
    return _cuda().mem_get_info(_index(device_index, "get_memory_info"))


def get_device_capability(device=None, /) -> dict:
    """What the device supports, as PyTorch's: ``{"supported_dtypes": {...}}``, lucid's dtypes
    that tensors on it can hold (all of them on CUDA: CuPy has every NumPy dtype lucid uses)."""
    _index(device, "get_device_capability")
    from ._core import dtypes

    names = ("bool_", "uint8", "uint16", "uint32", "uint64", "int8", "int16", "int32", "int64", "float16",
             "float32", "float64", "complex64", "complex128")
    return {"supported_dtypes": {getattr(dtypes, n) for n in names}}


# --------------------------------------------------------------------------- Stream, Event

def _generic_device(device, name):
    """The device a Stream/Event is for: the accelerator when there is one, else the CPU."""
    if device is None:
        return _backend.device("cuda", current_device_index()) if is_available() else _backend.device("cpu")
    if isinstance(device, int) and not isinstance(device, bool):
        return _backend.device("cuda", _index(device, name))
    d = _backend.device(device)
    if d.type == "cuda":
        return _backend.device("cuda", _index(d, name))
    return d


class Stream:
    """A device-generic stream (``torch.Stream``): a CUDA stream on the accelerator, else the
    host's single, synchronous stream (whose work is always done).

    Examples
    --------
    >>> import lucid
    >>> s = lucid.Stream(device="cpu")
    >>> s.query(), s.device
    (True, device(type='cpu'))
    """

    def __init__(self, device=None, *, priority=0):
        self.device = _generic_device(device, "Stream")
        self.priority = priority
        self._impl = _cuda().Stream(self.device.index, priority) if self.device.type == "cuda" else None

    @classmethod
    def _of(cls, impl):
        s = object.__new__(cls)
        s.device, s.priority, s._impl = _backend.device("cuda", impl.device_index), impl.priority, impl
        return s

    @property
    def device_type(self) -> str:
        return self.device.type

    @property
    def device_index(self) -> int:
        return -1 if self.device.index is None else self.device.index

    def query(self) -> bool:
        """Whether all work queued on this stream is done."""
        return True if self._impl is None else self._impl.query()

    def synchronize(self) -> None:
        """Wait for the work queued on this stream."""
        if self._impl is not None:
            self._impl.synchronize()

    def wait_event(self, event) -> None:
        """Make later work on this stream wait for ``event``."""
        if self._impl is not None:
            self._impl.wait_event(event._impl)

    def wait_stream(self, stream) -> None:
        """Make later work on this stream wait for what is queued on ``stream`` now."""
        if self._impl is None:
            raise RuntimeError(f"Stream.wait_stream: the {self.device.type} backend doesn't support events.")
        self._impl.wait_stream(stream._impl)

    def record_event(self, event=None):
        """Record ``event`` (a new one if None) on this stream and return it."""
        if self._impl is None:
            raise RuntimeError(f"Stream.record_event: the {self.device.type} backend doesn't support events.")
        event = Event(self.device) if event is None else event
        event.record(self)
        return event

    def __enter__(self):
        if self._impl is not None:
            self._impl.__enter__()
        return self

    def __exit__(self, *exc):
        return False if self._impl is None else self._impl.__exit__(*exc)

    def __eq__(self, other):
        return isinstance(other, Stream) and self.device == other.device and self._impl == other._impl

    def __hash__(self):
        return hash((str(self.device), self._impl))

    def __repr__(self):
        return f"lucid.Stream device_type={self.device.type}, device_index={self.device_index}"


class Event:
    """A device-generic event (``torch.Event``): a CUDA event on the accelerator; on the CPU,
    as PyTorch's, it can be waited on and queried (always complete) but not recorded.

    Examples
    --------
    >>> import lucid
    >>> e = lucid.Event(device="cpu")
    >>> e.query(), e.device
    (True, device(type='cpu'))
    """

    def __init__(self, device=None, *, enable_timing=False, blocking=False, interprocess=False):
        self.device = _generic_device(device, "Event")
        self.enable_timing = enable_timing
        self._impl = None
        if self.device.type == "cuda":
            with _cuda().device(self.device.index):
                self._impl = _cuda().Event(enable_timing, blocking, interprocess)

    def record(self, stream=None) -> None:
        """Record the event on ``stream`` (default: the device's current stream)."""
        if self._impl is None:
            raise RuntimeError(f"Event.record: the {self.device.type} backend doesn't support events.")
        self._impl.record(None if stream is None else getattr(stream, "_impl", stream))

    def wait(self, stream=None) -> None:
        """Make later work on ``stream`` wait for this event (nothing to wait for on the CPU)."""
        if self._impl is not None:
            self._impl.wait(None if stream is None else getattr(stream, "_impl", stream))

    def query(self) -> bool:
        """Whether the recorded work is done (always, on the CPU)."""
        return True if self._impl is None else self._impl.query()

    def synchronize(self) -> None:
        """Wait for the recorded work."""
        if self._impl is not None:
            self._impl.synchronize()

    def elapsed_time(self, end_event) -> float:
        """Milliseconds between this event and ``end_event`` (both made with ``enable_timing=True``)."""
        if not (self.enable_timing and end_event.enable_timing):
            raise ValueError("Event.elapsed_time: both events must be created with argument 'enable_timing=True'.")
        if self._impl is None:
            raise RuntimeError(f"Event.elapsed_time: the {self.device.type} backend doesn't support events.")
        return self._impl.elapsed_time(end_event._impl)

    def __repr__(self):
        idx = -1 if self.device.index is None else self.device.index
        return f"lucid.Event device_type={self.device.type}, device_index={idx}"
