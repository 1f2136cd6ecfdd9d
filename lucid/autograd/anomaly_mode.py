"""``lucid.autograd.anomaly_mode`` (``torch.autograd.anomaly_mode``): the anomaly-detection modes.

The objects are :mod:`lucid.autograd.anomaly`'s, re-exported under PyTorch's module path.

Examples
--------
>>> import lucid
>>> from lucid.autograd.anomaly_mode import detect_anomaly
>>> detect_anomaly is lucid.autograd.detect_anomaly
True
"""
from __future__ import annotations

from .anomaly import detect_anomaly, is_anomaly_enabled, set_detect_anomaly  # noqa: F401

__all__ = ["detect_anomaly", "set_detect_anomaly"]
