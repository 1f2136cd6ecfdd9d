"""``lucid.autograd.profiler``: PyTorch's older profiler spelling. ``profile`` and
``record_function`` are :mod:`lucid.profiler`'s (``profile`` also takes the older keywords and
has ``function_events``/``self_cpu_time_total``/``total_average``); ``emit_nvtx``/``emit_itt``
are here.
"""
from ..profiler import (EventList, FunctionEvent, FunctionEventAvg, ProfilerActivity, kineto_available,  # noqa: F401
                        profile, record_function)

__all__ = ["profile", "record_function", "emit_nvtx", "emit_itt", "ProfilerActivity", "EventList",
           "FunctionEvent", "FunctionEventAvg", "kineto_available"]


class emit_nvtx:
    """NVTX ranges for NVIDIA's profilers, as ``torch.autograd.profiler.emit_nvtx``.

    Like PyTorch without CUDA, entering it enabled raises where no CUDA device is available; Lucid
    emits no NVTX ranges, so it raises on a CUDA machine too rather than silently emitting none.

    Examples
    --------
    >>> from lucid.autograd.profiler import emit_nvtx
    >>> with emit_nvtx(enabled=False):
    ...     pass
    """

    def __init__(self, enabled=True, record_shapes=False):
        self.enabled, self.record_shapes = bool(enabled), bool(record_shapes)

    def __enter__(self):
        if self.enabled:
            from .. import cuda

            if not cuda.is_available():
                raise _NoCuda("emit_nvtx: NVTX ranges need CUDA, and no CUDA device is available")
            raise NotImplementedError("emit_nvtx: Lucid does not emit NVTX ranges; use lucid.profiler.profile")
        return self

    def __exit__(self, *exc):
        return False


class _NoCuda(RuntimeError, AssertionError):
    """No CUDA: PyTorch's lazy CUDA initialisation fails with an AssertionError."""


class emit_itt:
    """Intel ITT ranges for VTune, as ``torch.autograd.profiler.emit_itt``. Lucid has no ITT
    collector to talk to, and VTune is never attached to it, so the block runs unchanged, as
    PyTorch's does where no ITT collector is attached.

    Examples
    --------
    >>> from lucid.autograd.profiler import emit_itt
    >>> with emit_itt():
    ...     pass
    """

    def __init__(self, enabled=True, record_shapes=False):
        self.enabled, self.record_shapes = bool(enabled), bool(record_shapes)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False
