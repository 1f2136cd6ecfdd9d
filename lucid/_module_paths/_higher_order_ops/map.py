"""``lucid._higher_order_ops.map`` (``torch._higher_order_ops.map``): the function
``lucid._higher_order_ops.map`` under PyTorch's module path. See NOTE [Submodules of file
modules] (``lucid/_module_paths/__init__.py``).

Examples
--------
>>> import lucid
>>> from lucid._higher_order_ops.map import map
>>> map is lucid._higher_order_ops.map
True
"""
from __future__ import annotations

from lucid._higher_order_ops import map

__all__ = ["map"]
