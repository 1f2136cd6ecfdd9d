"""``lucid.cpu.amp`` (``torch.cpu.amp``): PyTorch's older, CPU-only spellings of
:mod:`lucid.amp`. They warn (FutureWarning) as PyTorch's do, naming the current spelling.

Examples
--------
>>> import warnings
>>> import lucid
>>> from lucid.cpu.amp import GradScaler, autocast
>>> with warnings.catch_warnings():
...     warnings.simplefilter("ignore")
...     region = autocast()
>>> isinstance(region, lucid.amp.autocast), region.device_type
(True, 'cpu')
"""
from __future__ import annotations

import warnings

from .. import amp as _amp

__all__ = ["GradScaler", "autocast"]


def _deprecated(old, new):
    warnings.warn(f"`lucid.cpu.amp.{old}` is deprecated. Please use `lucid.amp.{new}` instead.",
                  FutureWarning, stacklevel=3)


class autocast(_amp.autocast):  # noqa: N801 (PyTorch's name)
    """``lucid.amp.autocast("cpu", ...)`` (a context manager and a decorator)."""

    def __init__(self, enabled=True, dtype=None, cache_enabled=True):
        _deprecated("autocast(args...)", "autocast('cpu', args...)")
        super().__init__("cpu", dtype=dtype, enabled=enabled, cache_enabled=cache_enabled)


class GradScaler(_amp.GradScaler):
    """``lucid.amp.GradScaler("cpu", ...)``."""

    def __init__(self, init_scale=2.0 ** 16, growth_factor=2.0, backoff_factor=0.5, growth_interval=2000,
                 enabled=True):
        _deprecated("GradScaler(args...)", "GradScaler('cpu', args...)")
        super().__init__("cpu", init_scale, growth_factor, backoff_factor, growth_interval, enabled)
