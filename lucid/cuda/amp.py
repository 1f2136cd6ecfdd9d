"""``lucid.cuda.amp`` (``torch.cuda.amp``): PyTorch's older, CUDA-only spellings of
:mod:`lucid.amp`. They warn (FutureWarning) as PyTorch's do, naming the current spelling.

Examples
--------
>>> import warnings
>>> import lucid
>>> from lucid.cuda.amp import GradScaler, autocast
>>> with warnings.catch_warnings():
...     warnings.simplefilter("ignore")
...     region = autocast()
>>> isinstance(region, lucid.amp.autocast), region.device_type
(True, 'cuda')
"""
from __future__ import annotations

import functools
import warnings

from .. import amp as _amp

__all__ = ["GradScaler", "autocast", "custom_bwd", "custom_fwd"]


def _deprecated(old, new):
    warnings.warn(f"`lucid.cuda.amp.{old}` is deprecated. Please use `lucid.amp.{new}` instead.",
                  FutureWarning, stacklevel=3)


class autocast(_amp.autocast):  # noqa: N801 (PyTorch's name)
    """``lucid.amp.autocast("cuda", ...)`` (a context manager and a decorator)."""

    def __init__(self, enabled=True, dtype=None, cache_enabled=True):
        _deprecated("autocast(args...)", "autocast('cuda', args...)")
        super().__init__("cuda", dtype=dtype, enabled=enabled, cache_enabled=cache_enabled)


class GradScaler(_amp.GradScaler):
    """``lucid.amp.GradScaler("cuda", ...)``."""

    def __init__(self, init_scale=2.0 ** 16, growth_factor=2.0, backoff_factor=0.5, growth_interval=2000,
                 enabled=True):
        _deprecated("GradScaler(args...)", "GradScaler('cuda', args...)")
        super().__init__("cuda", init_scale, growth_factor, backoff_factor, growth_interval, enabled)


def custom_fwd(fwd=None, *, cast_inputs=None):
    """``lucid.amp.custom_fwd(device_type="cuda", ...)``."""
    _deprecated("custom_fwd(args...)", "custom_fwd(args..., device_type='cuda')")
    if fwd is None:
        return functools.partial(_amp.custom_fwd, device_type="cuda", cast_inputs=cast_inputs)
    return _amp.custom_fwd(fwd, device_type="cuda", cast_inputs=cast_inputs)


def custom_bwd(bwd):
    """``lucid.amp.custom_bwd(device_type="cuda")``."""
    _deprecated("custom_bwd(args...)", "custom_bwd(args..., device_type='cuda')")
    return _amp.custom_bwd(bwd, device_type="cuda")
