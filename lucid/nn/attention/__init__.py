"""``lucid.nn.attention`` (``torch.nn.attention``): choosing the scaled-dot-product-attention backend.

Lucid has one implementation of ``scaled_dot_product_attention``, the math one (matmul,
softmax, masking: every rule comes from those primitives). :func:`sdpa_kernel` restricts
the allowed backends as PyTorch's does; a region that excludes ``SDPBackend.MATH`` makes
the function raise PyTorch's "no available kernel" error, and the fused-kernel checks
answer False.
"""
from __future__ import annotations

import contextlib
import enum

from ..functional import attention as _attention

__all__ = ["SDPBackend", "sdpa_kernel", "can_use_flash_attention", "can_use_efficient_attention"]


class SDPBackend(enum.IntEnum):
    """The implementations of ``scaled_dot_product_attention`` (PyTorch's numbering)."""

    ERROR = -1
    MATH = 0
    FLASH_ATTENTION = 1
    EFFICIENT_ATTENTION = 2
    CUDNN_ATTENTION = 3
    OVERRIDEABLE = 4


@contextlib.contextmanager
def sdpa_kernel(backends, set_priority=False):
    """Allow only ``backends`` (one or a list of :class:`SDPBackend`) inside the block.

    Examples
    --------
    >>> import lucid, lucid.nn.functional as F
    >>> from lucid.nn.attention import SDPBackend, sdpa_kernel
    >>> q = lucid.ones(1, 2, 4)
    >>> with sdpa_kernel([SDPBackend.MATH]):
    ...     F.scaled_dot_product_attention(q, q, q).shape
    (1, 2, 4)
    """
    chosen = [backends] if isinstance(backends, SDPBackend) else list(backends)
    for b in chosen:
        if not isinstance(b, SDPBackend):
            raise TypeError(f"sdpa_kernel: expected SDPBackend values, got {b!r}")
    saved = _attention.ALLOWED_BACKENDS[0]
    _attention.ALLOWED_BACKENDS[0] = frozenset(chosen)
    try:
        yield
    finally:
        _attention.ALLOWED_BACKENDS[0] = saved


def can_use_flash_attention(params=None, debug=False):
    """False: Lucid has no flash-attention kernel."""
    return False


def can_use_efficient_attention(params=None, debug=False):
    """False: Lucid has no memory-efficient attention kernel."""
    return False
