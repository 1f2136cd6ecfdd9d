"""``lucid._higher_order_ops.cond`` (``torch._higher_order_ops.cond``): the function
``lucid._higher_order_ops.cond`` under PyTorch's module path. See NOTE [Submodules of file
modules] (``lucid/_module_paths/__init__.py``).

Examples
--------
>>> import lucid
>>> from lucid._higher_order_ops.cond import cond
>>> cond is lucid._higher_order_ops.cond
True
"""
from __future__ import annotations

from lucid._higher_order_ops import cond

__all__ = ["cond"]
