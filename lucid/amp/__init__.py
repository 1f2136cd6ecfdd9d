"""Automatic mixed precision, as ``torch.amp``: :class:`autocast` casts each op to the precision
it runs well in (NOTE [Autocast]); :class:`GradScaler` scales the loss so float16 gradients do
not underflow, and skips the steps whose gradients overflowed (NOTE [Gradient scaling])."""
from .autocast_mode import (autocast, custom_bwd, custom_fwd, get_autocast_dtype, is_autocast_available,
                            is_autocast_enabled)
from .grad_scaler import GradScaler

__all__ = ["autocast", "custom_fwd", "custom_bwd", "GradScaler", "is_autocast_available", "is_autocast_enabled", "get_autocast_dtype"]
