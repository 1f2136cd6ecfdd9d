"""Op database entry for the device move (``to_device``, NOTE [Moving between devices]).

The move goes to the other of "cpu" and the strict stand-in device (NOTE [Strict stand-in
device]) and back, so the primitive is bound twice whatever the run's default device is; its
value is the identity and so are its gradient, tangent and batching.
"""
import numpy as np

import lucid
from lucid.ops.creation import to_device
from lucid.testing import strict_device
from opinfo import OpInfo, unary_samples

strict_device.enable()


def _round_trip(x):
    home = x.device
    away = "strict" if home.type == "cpu" else "cpu"
    return to_device(to_device(x, away), home) * 1.0


OPS = [
    OpInfo("to_device", _round_trip, lambda x: np.asarray(x) * 1.0, unary_samples()),
]
