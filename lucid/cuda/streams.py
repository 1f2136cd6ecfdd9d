"""``lucid.cuda.streams`` (``torch.cuda.streams``): CUDA streams and events through CuPy's.

CuPy runs each kernel on its current stream; making a :class:`Stream` current (``with s:``,
:func:`stream`, :func:`set_stream`) makes lucid's ops on that GPU queue there.
"""
from __future__ import annotations

from . import _cupy, _index

__all__ = ["Event", "Stream", "StreamContext", "current_stream", "default_stream", "set_stream", "stream"]


class Stream:
    """A CUDA stream (CuPy's), usable as a context manager: ``with lucid.cuda.Stream(): ...``;
    the block runs on the stream's GPU, as in PyTorch.

    ``priority``: lower is more urgent, as CUDA's (``cudaStreamCreateWithPriority`` clamps it
    to the device's range, as PyTorch does).
    """

    def __init__(self, device=None, priority=0):
        cupy, i = _index(device, "Stream")
        with cupy.cuda.Device(i):
            self._stream = cupy.cuda.Stream(non_blocking=True, priority=priority)
        self.device_index, self.priority = i, priority
        self._devices = []  # the device contexts of nested ``with`` blocks

    @classmethod
    def _wrap(cls, cupy_stream, index):
        s = object.__new__(cls)
        s._stream, s.device_index, s.priority, s._devices = cupy_stream, index, 0, []
        return s

    @property
    def device(self):
        from .._core.backend import device

        return device("cuda", self.device_index)

    @property
    def cuda_stream(self) -> int:
        """The raw ``cudaStream_t`` (0 for the default stream)."""
        return self._stream.ptr

    def synchronize(self):
        """Wait until every kernel queued on this stream has finished."""
        self._stream.synchronize()

    def query(self) -> bool:
        """Whether every kernel queued on this stream has finished."""
        return self._stream.done

    def wait_event(self, event):
        """Make later work on this stream wait for ``event``."""
        self._stream.wait_event(event._event)

    def wait_stream(self, other):
        """Make later work on this stream wait for what is queued on ``other`` now."""
        self._stream.wait_event(other._stream.record())

    def record_event(self, event=None):
        """Record ``event`` (a new one if None) on this stream and return it."""
        event = Event() if event is None else event
        event.record(self)
        return event

    def __eq__(self, other):
        return isinstance(other, Stream) and self._stream.ptr == other._stream.ptr \
            and self.device_index == other.device_index

    def __hash__(self):
        return hash((self._stream.ptr, self.device_index))

    # CuPy refuses to enter a stream of another GPU than the current one (and its null stream
    # has no GPU of its own): the stream's GPU is made current for the block first.
    def __enter__(self):
        from . import device

        ctx = device(self.device_index)
        ctx.__enter__()
        try:
            self._stream.__enter__()
        except BaseException:
            ctx.__exit__(None, None, None)
            raise
        self._devices.append(ctx)
        return self

    def __exit__(self, *exc):
        try:
            self._stream.__exit__(*exc)
        finally:
            self._devices.pop().__exit__(*exc)
        return False

    def __repr__(self):
        return f"<lucid.cuda.Stream device=cuda:{self.device_index} cuda_stream={self._stream.ptr:#x}>"


def current_stream(device=None):
    """The stream kernels on ``device`` are queued on now."""
    cupy, i = _index(device, "current_stream")
    with cupy.cuda.Device(i):
        return Stream._wrap(cupy.cuda.get_current_stream(), i)


def default_stream(device=None):
    """``device``'s default (legacy null) stream."""
    cupy, i = _index(device, "default_stream")
    return Stream._wrap(cupy.cuda.Stream.null, i)


def set_stream(stream) -> None:
    """Make ``stream`` the current stream of its device (None: nothing to do, as PyTorch)."""
    if stream is None:
        return
    cupy = _cupy("set_stream")
    with cupy.cuda.Device(stream.device_index):  # CuPy's use() needs the stream's GPU current
        stream._stream.use()


class StreamContext:
    """Context manager making ``stream`` current inside the block and restoring the previous
    stream after it; None makes it a no-op (as ``torch.cuda.StreamContext``)."""

    def __init__(self, stream):
        self.stream = stream
        self._previous = None

    def __enter__(self):
        if self.stream is None:
            return None
        self._previous = current_stream(self.stream.device_index)
        set_stream(self.stream)
        return self.stream

    def __exit__(self, *exc):
        if self.stream is not None:
            set_stream(self._previous)
        return False


def stream(stream):
    """``with lucid.cuda.stream(s):`` runs the block's CUDA work on ``s`` (None: a no-op)."""
    return StreamContext(stream)


class Event:
    """A CUDA event for timing: ``e.record(); ...; e2.record(); e2.synchronize();
    e.elapsed_time(e2)`` (milliseconds)."""

    def __init__(self, enable_timing=False, blocking=False, interprocess=False):
        cupy = _cupy("Event")
        self._event = cupy.cuda.Event(block=blocking, disable_timing=not enable_timing,
                                      interprocess=interprocess)

    def record(self, stream=None):
        self._event.record(None if stream is None else stream._stream)

    def wait(self, stream=None):
        """Make later work on ``stream`` (default: the current one) wait for this event."""
        (current_stream() if stream is None else stream).wait_event(self)

    def synchronize(self):
        self._event.synchronize()

    def query(self):
        return self._event.done

    def elapsed_time(self, end_event):
        import cupy

        return cupy.cuda.get_elapsed_time(self._event, end_event._event)
