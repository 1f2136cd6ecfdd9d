"""The array-namespace seam: every array call in op definitions goes through ``xp``.

Today ``xp`` is NumPy and the only device is ``"cpu"``. A CUDA backend would bind
``xp`` to CuPy per device; op definitions would not change, because they only ever
call ``xp.<fn>`` (never ``np.<fn>`` directly) in their impls.
"""
from __future__ import annotations

import numpy as xp  # noqa: F401  (re-exported: the active array namespace)

AVAILABLE_DEVICES = ("cpu",)


def check_device(device) -> str:
    """Validate a ``device`` argument; only ``"cpu"`` exists in this build."""
    if device is None:
        return "cpu"
    name = str(getattr(device, "type", device))
    if name.split(":")[0] != "cpu":
        raise RuntimeError(
            f"device {name!r} is not available: this lucid build has only {AVAILABLE_DEVICES} "
            "(a CUDA backend on CuPy would plug in at lucid/_core/backend.py)"
        )
    return "cpu"


class device:
    """A device handle, ``lucid.device("cpu")``."""

    def __init__(self, name="cpu"):
        self.type = check_device(name)

    def __repr__(self):
        return f"device(type={self.type!r})"

    def __eq__(self, other):
        return str(getattr(other, "type", other)) == self.type

    def __hash__(self):
        return hash(self.type)
