"""``lucid._higher_order_ops.associative_scan`` (``torch._higher_order_ops.associative_scan``): the function
``lucid._higher_order_ops.associative_scan`` under PyTorch's module path. See NOTE [Submodules of file
modules] (``lucid/_module_paths/__init__.py``).

Examples
--------
>>> import lucid
>>> from lucid._higher_order_ops.associative_scan import associative_scan
>>> associative_scan is lucid._higher_order_ops.associative_scan
True
"""
from __future__ import annotations

from lucid._higher_order_ops import associative_scan

__all__ = ["associative_scan"]
