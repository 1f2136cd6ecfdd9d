"""Constants built on the host from shapes alone, placed on an operand's device."""
from __future__ import annotations

import numpy as np

from ..._core.backend import namespace_of
from ..._core.tensor import _wrap


def const_like(arr, like):
    """Tensor of the host array ``arr`` (made from shapes, not data) on ``like``'s device.

    One explicit host-to-device copy of a small constant (a kernel of ones, a divisor
    grid, a one-hot eye); on the CPU ``arr`` itself is wrapped, at no cost.
    """
    ns = namespace_of(like)
    return _wrap(arr if ns is np else ns.asarray(arr))
