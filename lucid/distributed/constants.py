"""``lucid.distributed.constants`` (``torch.distributed.constants``): the default timeouts.

Examples
--------
>>> import lucid.distributed as dist
>>> from lucid.distributed.constants import default_pg_timeout
>>> default_pg_timeout is dist.default_pg_timeout
True
"""
from __future__ import annotations

from .extras import default_pg_timeout

# NCCL's own default; Lucid has no NCCL backend, so (as PyTorch built without NCCL) it is None.
default_pg_nccl_timeout = None

__all__ = ["default_pg_nccl_timeout", "default_pg_timeout"]
