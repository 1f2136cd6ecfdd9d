"""``lucid.cuda.nvtx`` (``torch.cuda.nvtx``): named ranges and marks for NVIDIA's profilers
(Nsight Systems), through ``cupy.cuda.nvtx``.

Without CuPy's NVTX (no GPU, or a CuPy built without it) every call raises a RuntimeError, as
PyTorch's do in a build without CUDA; ``range`` raises when entered.
"""
from __future__ import annotations

import contextlib
import threading

__all__ = ["mark", "range", "range_pop", "range_push"]


class _Depth(threading.local):  # NVTX's push/pop stack is per thread
    value = 0


_DEPTH = _Depth()


def _nvtx(name):
    import lucid.cuda

    if lucid.cuda.is_available():
        import cupy

        # an attribute of cupy.cuda (CuPy 14 binds cupy_backends' module there), not a submodule
        nvtx = cupy.cuda.nvtx
        if getattr(nvtx, "available", True):
            return nvtx
    raise RuntimeError(f"lucid.cuda.nvtx.{name}: NVTX functions not installed (needs CuPy with NVTX and a GPU; "
                       "lucid.cuda.is_available() is False)")


def range_push(msg):
    """Start a nested range named ``msg``; returns its zero-based depth."""
    _nvtx("range_push").RangePush(msg)
    _DEPTH.value += 1
    return _DEPTH.value - 1


def range_pop():
    """End the innermost range; returns its zero-based depth (-1 when none was open)."""
    _nvtx("range_pop").RangePop()
    _DEPTH.value = max(_DEPTH.value - 1, -1)
    return _DEPTH.value


def mark(msg):
    """Mark an instant named ``msg``."""
    _nvtx("mark").Mark(msg)


@contextlib.contextmanager
def range(msg, *args, **kwargs):  # noqa: A001 (PyTorch's name)
    """A range around a block (also a decorator); ``msg.format(*args, **kwargs)`` names it."""
    range_push(msg.format(*args, **kwargs))
    try:
        yield
    finally:
        range_pop()
