"""``lucid.distributed.launcher`` (``torch.distributed.launcher``): :class:`LaunchConfig`,
:class:`elastic_launch` and :func:`launch_agent` (see NOTE [Launching from Python] in ``api.py``).

Examples
--------
>>> from lucid.distributed.launcher import LaunchConfig
>>> LaunchConfig(min_nodes=1, max_nodes=1, nproc_per_node=2).nproc_per_node
2
"""
from __future__ import annotations

from . import api
from .api import LaunchConfig, elastic_launch, launch_agent

__all__ = ["LaunchConfig", "api", "elastic_launch", "launch_agent"]
