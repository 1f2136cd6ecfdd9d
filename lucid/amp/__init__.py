"""Automatic mixed precision, as ``torch.amp``: :class:`autocast` casts each op to the precision
it runs well in (NOTE [Autocast]); :class:`GradScaler` scales the loss so float16 gradients do
not underflow, and skips the steps whose gradients overflowed (NOTE [Gradient scaling]).
The state functions PyTorch has at the top level (``set_autocast_enabled`` ...) are here too
(``lucid.amp.autocast_state``) and reach ``lucid`` through its lazy attributes."""
from .autocast_mode import (autocast, custom_bwd, custom_fwd, get_autocast_dtype, is_autocast_available,
                            is_autocast_enabled)
from .autocast_state import (autocast_decrement_nesting, autocast_increment_nesting, clear_autocast_cache,
                             get_autocast_cpu_dtype, get_autocast_gpu_dtype, is_autocast_cache_enabled,
                             is_autocast_cpu_enabled, set_autocast_cache_enabled, set_autocast_cpu_dtype,
                             set_autocast_cpu_enabled, set_autocast_dtype, set_autocast_enabled,
                             set_autocast_gpu_dtype)
from .grad_scaler import GradScaler

__all__ = ["autocast", "custom_fwd", "custom_bwd", "GradScaler", "is_autocast_available", "is_autocast_enabled", "get_autocast_dtype"]
