"""Host memory that other processes can map: the storage behind ``Tensor.share_memory_``.

NOTE [Shared memory]
``share_memory_`` moves a CPU tensor's values into an anonymous shared file (``memfd`` on
Linux, an unlinked temporary file elsewhere) mapped ``MAP_SHARED``, and points the tensor at
it. The memory moved is the tensor's base's (a view moves its base along, and the views
registered with the base follow, NOTE [View replay]; a view made in no-grad mode is not
registered and keeps the old memory, so share before making views). A process forked later
maps the same pages, so an in-place update in one process (a
Hogwild optimizer step) is seen by all. A process that is not forked receives the tensor by
pickling through ``multiprocessing`` (a ``Process`` argument under ``spawn``, a ``Queue``):
``lucid.multiprocessing`` registers a reduction that sends the file descriptor itself
(``multiprocessing.reduction.DupFd``, PyTorch's "file_descriptor" strategy), never the
values, and the receiver maps it. Nothing has a name, so nothing can leak: the memory goes
when the last descriptor and mapping close. Device tensors are left alone (as PyTorch does for
CUDA tensors). ``lucid.save`` and plain ``pickle`` still write values.
"""
from __future__ import annotations

import mmap
import os
import weakref

import numpy as np


class SharedBuffer(mmap.mmap):
    """A ``MAP_SHARED`` mapping of an anonymous file, with the descriptor kept to pass on."""

    @classmethod
    def create(cls, nbytes):
        size = max(int(nbytes), 1)  # an empty tensor still needs a mapping
        if hasattr(os, "memfd_create"):
            fd = os.memfd_create("lucid_shared_tensor", os.MFD_CLOEXEC)
        else:  # pragma: no cover (macOS, Windows): an unlinked temporary file
            import tempfile

            with tempfile.TemporaryFile() as f:
                fd = os.dup(f.fileno())
        try:
            os.ftruncate(fd, size)
        except BaseException:
            os.close(fd)
            raise
        return cls.from_fd(fd, size)

    @classmethod
    def from_fd(cls, fd, size):
        """Map ``size`` bytes of the file ``fd``; the buffer owns ``fd`` from then on (it is
        closed here if it can't be mapped, e.g. a received descriptor shorter than ``size``)."""
        try:
            buf = cls(fd, size)
        except BaseException:
            os.close(fd)
            raise
        buf.fd = fd
        buf.address = np.frombuffer(buf, np.uint8).ctypes.data
        weakref.finalize(buf, os.close, fd)
        return buf


def buffer_of(arr):
    """The :class:`SharedBuffer` ``arr`` lives in, or None."""
    while arr is not None:
        if isinstance(arr, SharedBuffer):
            return arr
        arr = getattr(arr, "base", None)
    return None


def _byte_bounds(arr):
    """``[low, high)``: the addresses of the bytes ``arr``'s elements span (any strides)."""
    low = high = arr.__array_interface__["data"][0]
    if arr.size == 0:
        return low, low
    for n, stride in zip(arr.shape, arr.strides):
        reach = (n - 1) * stride
        low, high = (low + reach, high) if reach < 0 else (low, high + reach)
    return low, high + arr.itemsize


def move_to_shared(arrays):
    """The host arrays ``arrays`` (a base first, then views of its memory) moved together into
    one new :class:`SharedBuffer`: the bytes the first spans are copied once, and each array is
    re-made at its offset with its strides, so views stay views of the base."""
    import ctypes

    low, high = _byte_bounds(arrays[0])
    buf = SharedBuffer.create(high - low)
    if high > low:
        ctypes.memmove(buf.address, low, high - low)
    moved = []
    for arr in arrays:
        if arr.size == 0:
            out = np.ndarray(arr.shape, arr.dtype, buffer=buf)
        else:
            offset = arr.__array_interface__["data"][0] - low
            out = np.ndarray(arr.shape, arr.dtype, buffer=buf, offset=offset, strides=arr.strides)
        out.flags.writeable = arr.flags.writeable
        moved.append(out)
    return moved
