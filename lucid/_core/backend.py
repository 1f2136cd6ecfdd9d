"""The array-namespace seam: every array call in op definitions goes through ``xp``.

Today ``xp`` is NumPy and the only device is ``"cpu"``. A CUDA backend would bind
``xp`` to CuPy per device; op definitions would not change, because they only ever
call ``xp.<fn>`` (never ``np.<fn>`` directly) in their impls.

NOTE [Devices]
``lucid.device`` parses every device string PyTorch knows (``"cuda:1"``, ``"mps"``,
``"metal"`` ...), so code that only *names* a device runs; ``check_device`` is where a
device must actually exist, and it raises one clear error for any device this build lacks.
A GPU backend adds its type to ``AVAILABLE_DEVICES`` and binds ``xp`` for it here.
"""
from __future__ import annotations

import numpy as xp  # noqa: F401  (re-exported: the active array namespace)

AVAILABLE_DEVICES = ("cpu",)
# Device types PyTorch code names (plus Apple's "metal"); only "cpu" is available here.
KNOWN_DEVICE_TYPES = ("cpu", "cuda", "mps", "metal", "meta", "xpu", "xla", "hip", "ipu",
                      "vulkan", "mkldnn", "opengl", "opencl", "ideep", "ort", "hpu", "mtia",
                      "privateuseone")


def _unavailable(name: str) -> RuntimeError:
    kind = name.split(":")[0]
    if kind in ("cuda", "hip"):
        probe = "lucid.cuda.is_available() is False"
    elif kind in ("mps", "metal"):
        probe = "lucid.backends.mps.is_available() is False"
    else:
        probe = f"only {AVAILABLE_DEVICES} exist"
    return RuntimeError(
        f"device {name!r} is not available: this lucid build runs on the CPU only ({probe}). "
        "There is no GPU backend yet (one would plug in at lucid/_core/backend.py); run on "
        "'cpu', e.g. device = 'cuda' if lucid.cuda.is_available() else 'cpu'"
    )


class device:
    """A device handle: ``lucid.device("cpu")``, ``lucid.device("cuda", 0)``.

    Any device PyTorch names can be *described*; only ``"cpu"`` can hold tensors in this
    build (see NOTE [Devices]).

    Examples
    --------
    >>> import lucid
    >>> lucid.device("cpu"), str(lucid.device("cuda:1")), lucid.device("cuda", 1).index
    (device(type='cpu'), 'cuda:1', 1)
    """

    __slots__ = ("type", "index")

    def __init__(self, type="cpu", index=None):  # noqa: A002  (PyTorch's argument name)
        if isinstance(type, device):
            type, index = type.type, type.index if index is None else index
        elif isinstance(type, int) and not isinstance(type, bool):
            type, index = "cuda", type  # PyTorch: a bare ordinal means a CUDA device
        elif not isinstance(type, str):
            raise TypeError(f"device: expected a string, int or device, got {type!r}")
        name, _, idx = type.partition(":")
        if name not in KNOWN_DEVICE_TYPES:
            raise RuntimeError(
                f"device: expected one of {', '.join(KNOWN_DEVICE_TYPES)} device type at start "
                f"of device string: {type!r}"
            )
        if idx:
            if index is not None:
                raise RuntimeError(f"device: type {type!r} already has an index; don't also pass index={index}")
            if not idx.isdigit():
                raise RuntimeError(f"device: invalid device string {type!r}")
            index = int(idx)
        if index is not None and (not isinstance(index, int) or index < 0):
            raise RuntimeError(f"device: index must be a non-negative int, got {index!r}")
        self.type, self.index = name, index

    def __str__(self):
        return self.type if self.index is None else f"{self.type}:{self.index}"

    def __repr__(self):
        idx = "" if self.index is None else f", index={self.index}"
        return f"device(type={self.type!r}{idx})"

    def __eq__(self, other):
        if isinstance(other, str):
            try:
                other = device(other)
            except RuntimeError:
                return False
        if not isinstance(other, device):
            return NotImplemented
        return self.type == other.type and self.index == other.index

    def __hash__(self):
        return hash((self.type, self.index))

    def __reduce__(self):
        return (device, (self.type, self.index))


CPU = device("cpu")


def check_device(dev) -> str:
    """Validate a ``device`` argument; raise a clear error for any device but the CPU."""
    if dev is None or dev is CPU or dev == "cpu":
        return "cpu"
    try:
        d = device(dev)
    except (RuntimeError, TypeError) as e:
        raise RuntimeError(str(e)) from None
    if d.type not in AVAILABLE_DEVICES:
        raise _unavailable(str(d))
    return "cpu"


def set_default_device(dev) -> None:
    """Set the device factory functions use; only ``"cpu"`` (or ``None``) exists in this build.

    Examples
    --------
    >>> import lucid
    >>> lucid.set_default_device("cpu"); lucid.get_default_device()
    device(type='cpu')
    """
    try:
        check_device(dev)
    except RuntimeError as e:
        raise RuntimeError(f"set_default_device: {e}") from None


def get_default_device() -> device:
    """The device new tensors are made on: always ``device(type='cpu')`` in this build."""
    return CPU
