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

from .._core import backend as _backend

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
        from ..ops import random as _random

        _random.seed_device("cuda", seed)


manual_seed_all = manual_seed


def seed() -> None:
    """Seed the CUDA generator from a random number (ignored without a GPU)."""
    import random

    manual_seed(random.randrange(2 ** 63))


seed_all = seed


OutOfMemoryError = _backend.OutOfMemoryError  # ops and factories raise it for CuPy's own


def init() -> None:
    """Set up CUDA now rather than at first use (``torch.cuda.init``); raises without a GPU."""
    _cupy("init")


def ipc_collect() -> None:
    """Free memory held for tensors shared with other processes: lucid shares no CUDA memory
    across processes, so there is none; raises without a GPU, as PyTorch does."""
    _cupy("ipc_collect")


def can_device_access_peer(device, peer_device) -> bool:
    """Whether GPU ``device`` can read ``peer_device``'s memory directly (CUDA peer access)."""
    cupy, i = _index(device, "can_device_access_peer")
    _, j = _index(peer_device, "can_device_access_peer")
    n = cupy.cuda.runtime.getDeviceCount()
    if not (0 <= i < n and 0 <= j < n):
        raise AssertionError(f"can_device_access_peer: invalid device id {i if not 0 <= i < n else j}")
    return i != j and bool(cupy.cuda.runtime.deviceCanAccessPeer(i, j))


def is_bf16_supported(including_emulation: bool = True) -> bool:
    """False: CuPy has no bfloat16 type (cupy/cupy#7527), so a bfloat16 tensor stays on the CPU
    (``lucid.bfloat16`` there: NOTE [bfloat16]), whatever the GPU can do.

    Examples
    --------
    >>> import lucid
    >>> lucid.cuda.is_bf16_supported()
    False
    """
    return False


def is_tf32_supported() -> bool:
    """Whether the GPU has TF32 tensor cores (compute capability 8.0 or later); False without one.

    lucid does not switch float32 matmuls to TF32 (``lucid.backends.cuda.matmul.allow_tf32``
    is recorded, not applied): this answers what the hardware can do.
    """
    if not is_available():
        return False
    return get_device_capability()[0] >= 8


def get_arch_list() -> list:
    """The GPU architectures CUDA code can be built for, e.g. ``['sm_80', 'sm_90']``; ``[]``
    without a GPU. CuPy compiles its kernels at run time (NVRTC), so these are NVRTC's
    targets rather than those of a prebuilt binary as in PyTorch."""
    if not is_available():
        return []
    import cupy

    try:
        archs = cupy.cuda.nvrtc.getSupportedArchs()
    except Exception:  # an NVRTC older than CUDA 11.2 cannot list them: the device's own
        major, minor = get_device_capability()
        archs = [major * 10 + minor]
    return [f"sm_{a}" for a in archs]


# PyTorch's submodules of torch.cuda; their names are re-exported here as PyTorch's are.
from . import memory, nvtx, random, streams  # noqa: E402,F401
from .memory import *  # noqa: E402,F401,F403
from .random import *  # noqa: E402,F401,F403
from .streams import *  # noqa: E402,F401,F403


def __getattr__(name):
    if name == "amp":  # loads lucid.amp: only when asked for
        import importlib

        return importlib.import_module(".amp", __name__)
    if name.endswith("Tensor"):  # the legacy constructors, lucid.cuda.FloatTensor ...
        from ..ops.legacy import cuda_typed

        cls = cuda_typed(name)
        if cls is not None:
            return cls
    raise AttributeError(f"module 'lucid.cuda' has no attribute {name!r}")
