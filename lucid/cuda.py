"""``lucid.cuda``: CUDA devices through CuPy (``pip install 'lucid[gpu]'``).

CuPy is imported the first time something here (or a ``"cuda"`` device) is used, never by
``import lucid``. Without CuPy or without a GPU, ``is_available()`` is False,
``device_count()`` is 0, the seeding and cache calls do nothing (as PyTorch's do without a
GPU) and calls that need a GPU raise a RuntimeError that says why. See NOTE [Backends] in
``lucid/_core/backend.py``.

Examples
--------
>>> import lucid
>>> device = "cuda" if lucid.cuda.is_available() else "cpu"
>>> lucid.zeros(2, device=device).device.type == device
True
"""
from __future__ import annotations

from ._core import backend as _backend

_STATE = {"device": None, "seed": None}


def is_available() -> bool:
    """Whether CuPy is installed and sees at least one CUDA device."""
    return bool(_backend._load_cuda())


def _cupy(name):
    if not is_available():
        raise RuntimeError(f"lucid.cuda.{name}: {_backend._unavailable('cuda')}")
    import cupy

    return cupy


def _pinned_empty(shape, dtype, name):
    """An uninitialised NumPy array in CuPy's pinned host memory (NOTE [Pinned memory])."""
    _cupy(name)
    import cupyx

    return cupyx.empty_pinned(shape, dtype=dtype)


def device_count() -> int:
    """How many CUDA devices CuPy sees (0 without CuPy or a GPU)."""
    if not is_available():
        return 0
    import cupy

    return cupy.cuda.runtime.getDeviceCount()


def is_initialized() -> bool:
    """Whether the CUDA backend has been set up in this process."""
    return "cuda" in _backend._BACKENDS


def current_device() -> int:
    """The index of the current CUDA device."""
    return _cupy("current_device").cuda.runtime.getDevice()


def set_device(device) -> None:
    """Make ``device`` (an index, ``"cuda:N"`` or a :class:`lucid.device`) the current one."""
    cupy = _cupy("set_device")
    index = device if isinstance(device, int) else _backend.device(device).index or 0
    previous = cupy.cuda.runtime.getDevice()
    cupy.cuda.runtime.setDevice(index)
    # arrays may live on the device that stopped being current (NOTE [Several devices])
    _backend.note_device(_backend._BACKENDS["cuda"], previous)


class device:  # noqa: N801 (PyTorch's name)
    """Context manager making CUDA device ``device`` the current one inside the block, as
    ``torch.cuda.device``; a negative index or None leaves the current device alone.

    Tensors keep their own device whatever is current (NOTE [Several devices]); what changes is
    where ``device="cuda"`` puts new tensors.

    Examples
    --------
    >>> import lucid
    >>> if lucid.cuda.device_count() > 1:
    ...     with lucid.cuda.device(1):
    ...         assert lucid.zeros(2, device="cuda").device == lucid.device("cuda", 1)
    """

    def __init__(self, device):
        if device is None or isinstance(device, int):
            self.index = -1 if device is None else device
        else:
            d = _backend.device(device)
            self.index = -1 if d.type != "cuda" else (d.index or 0)
        self.previous = -1

    def __enter__(self):
        if self.index >= 0:
            self.previous = current_device()
            if self.previous != self.index:
                set_device(self.index)
        return self

    def __exit__(self, *exc):
        if self.index >= 0 and self.previous != self.index:
            set_device(self.previous)
        return False


class device_of(device):  # noqa: N801 (PyTorch's name)
    """Context manager making the device of tensor ``obj`` current (no-op for a CPU tensor)."""

    def __init__(self, obj):
        d = obj.device
        super().__init__(d.index if d.type == "cuda" else -1)


def _index(device, name):
    cupy = _cupy(name)
    if device is None:
        return cupy, cupy.cuda.runtime.getDevice()
    return cupy, device if isinstance(device, int) else (_backend.device(device).index or 0)


def get_device_name(device=None) -> str:
    """The GPU's name, e.g. ``'NVIDIA H100 80GB HBM3'``."""
    cupy, i = _index(device, "get_device_name")
    name = cupy.cuda.runtime.getDeviceProperties(i)["name"]
    return name.decode() if isinstance(name, bytes) else str(name)


def get_device_properties(device=None) -> dict:
    """CuPy's property record of the device (name, totalGlobalMem, major, minor ...)."""
    cupy, i = _index(device, "get_device_properties")
    return cupy.cuda.runtime.getDeviceProperties(i)


def get_device_capability(device=None) -> tuple:
    """``(major, minor)`` compute capability."""
    props = get_device_properties(device)
    return props["major"], props["minor"]


def synchronize(device=None) -> None:
    """Wait for every queued kernel on the device to finish (timings need it)."""
    cupy, i = _index(device, "synchronize")
    with cupy.cuda.Device(i):
        cupy.cuda.runtime.deviceSynchronize()


def manual_seed(seed) -> None:
    """Seed the CUDA random generator (ignored without a GPU, as in PyTorch)."""
    seed = int(seed)
    _STATE["seed"] = seed
    if is_initialized():
        from .ops import random as _random

        _random.seed_device("cuda", seed)


manual_seed_all = manual_seed


def seed() -> None:
    """Seed the CUDA generator from a random number (ignored without a GPU)."""
    import random

    manual_seed(random.randrange(2 ** 63))


seed_all = seed


def memory_allocated(device=None) -> int:
    """Bytes held by live CUDA arrays (CuPy's memory pool: used bytes)."""
    cupy, _ = _index(device, "memory_allocated")
    return cupy.get_default_memory_pool().used_bytes()


_PEAK = [0]


def max_memory_allocated(device=None) -> int:
    """The largest :func:`memory_allocated` seen so far (sampled at each call here and at
    :func:`reset_peak_memory_stats`; CuPy's pool keeps no peak of its own: its total bytes
    held are used as an upper bound)."""
    cupy, _ = _index(device, "max_memory_allocated")
    pool = cupy.get_default_memory_pool()
    _PEAK[0] = max(_PEAK[0], pool.used_bytes(), pool.total_bytes())
    return _PEAK[0]


def reset_peak_memory_stats(device=None) -> None:
    _PEAK[0] = 0


def memory_reserved(device=None) -> int:
    """Bytes CuPy's memory pool holds from the driver (used + cached)."""
    cupy, _ = _index(device, "memory_reserved")
    return cupy.get_default_memory_pool().total_bytes()


def empty_cache() -> None:
    """Give cached, unused blocks of CuPy's memory pool back to the driver."""
    if is_initialized():
        import cupy

        cupy.get_default_memory_pool().free_all_blocks()
        cupy.get_default_pinned_memory_pool().free_all_blocks()


class Stream:
    """A CUDA stream (CuPy's), usable as a context manager: ``with lucid.cuda.Stream(): ...``."""

    def __init__(self, device=None, priority=0):
        cupy = _cupy("Stream")
        self._stream = cupy.cuda.Stream(non_blocking=True)

    def synchronize(self):
        self._stream.synchronize()

    def wait_stream(self, other):
        self._stream.wait_event(other._stream.record())

    def __enter__(self):
        self._stream.__enter__()
        return self

    def __exit__(self, *exc):
        return self._stream.__exit__(*exc)


def current_stream(device=None):
    s = object.__new__(Stream)
    s._stream = _cupy("current_stream").cuda.get_current_stream()
    return s


class Event:
    """A CUDA event for timing: ``e.record(); ...; e2.record(); e2.synchronize();
    e.elapsed_time(e2)`` (milliseconds)."""

    def __init__(self, enable_timing=False, blocking=False, interprocess=False):
        cupy = _cupy("Event")
        self._event = cupy.cuda.Event(block=blocking, disable_timing=not enable_timing,
                                      interprocess=interprocess)

    def record(self, stream=None):
        self._event.record(None if stream is None else stream._stream)

    def synchronize(self):
        self._event.synchronize()

    def query(self):
        return self._event.done

    def elapsed_time(self, end_event):
        import cupy

        return cupy.cuda.get_elapsed_time(self._event, end_event._event)


class _Amp:
    """``lucid.cuda.amp``: PyTorch's older spelling of :mod:`lucid.amp` for CUDA."""

    @staticmethod
    def autocast(enabled=True, dtype=None, cache_enabled=True):
        """``lucid.amp.autocast("cuda", ...)`` (a context manager and a decorator)."""
        from .amp import autocast

        return autocast("cuda", dtype, enabled, cache_enabled)

    @staticmethod
    def GradScaler(init_scale=2.0 ** 16, growth_factor=2.0, backoff_factor=0.5, growth_interval=2000,  # noqa: N802
                   enabled=True):
        """``lucid.amp.GradScaler("cuda", ...)``."""
        from .amp import GradScaler

        return GradScaler("cuda", init_scale, growth_factor, backoff_factor, growth_interval, enabled)

    @staticmethod
    def custom_fwd(fwd=None, *, cast_inputs=None):
        """``lucid.amp.custom_fwd(device_type="cuda", ...)`` (PyTorch's deprecated spelling)."""
        from .amp import custom_fwd

        return custom_fwd(fwd, device_type="cuda", cast_inputs=cast_inputs)

    @staticmethod
    def custom_bwd(bwd=None):
        """``lucid.amp.custom_bwd(device_type="cuda")``."""
        from .amp import custom_bwd

        return custom_bwd(bwd, device_type="cuda")


amp = _Amp()
