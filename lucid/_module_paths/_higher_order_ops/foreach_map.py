"""``lucid._higher_order_ops.foreach_map`` (``torch._higher_order_ops.foreach_map``): the function
``lucid._higher_order_ops.foreach_map`` under PyTorch's module path. See NOTE [Submodules of file
modules] (``lucid/_module_paths/__init__.py``).

Examples
--------
>>> import lucid
>>> from lucid._higher_order_ops.foreach_map import foreach_map
>>> foreach_map is lucid._higher_order_ops.foreach_map
True
"""
from __future__ import annotations

from lucid._higher_order_ops import foreach_map

__all__ = ["foreach_map"]
