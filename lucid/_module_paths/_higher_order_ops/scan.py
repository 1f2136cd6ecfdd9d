"""``lucid._higher_order_ops.scan`` (``torch._higher_order_ops.scan``): the function
``lucid._higher_order_ops.scan`` under PyTorch's module path. See NOTE [Submodules of file
modules] (``lucid/_module_paths/__init__.py``).

Examples
--------
>>> import lucid
>>> from lucid._higher_order_ops.scan import scan
>>> scan is lucid._higher_order_ops.scan
True
"""
from __future__ import annotations

from lucid._higher_order_ops import scan

__all__ = ["scan"]
