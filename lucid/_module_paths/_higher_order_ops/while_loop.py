"""``lucid._higher_order_ops.while_loop`` (``torch._higher_order_ops.while_loop``): the function
``lucid._higher_order_ops.while_loop`` under PyTorch's module path. See NOTE [Submodules of file
modules] (``lucid/_module_paths/__init__.py``).

Examples
--------
>>> import lucid
>>> from lucid._higher_order_ops.while_loop import while_loop
>>> while_loop is lucid._higher_order_ops.while_loop
True
"""
from __future__ import annotations

from lucid._higher_order_ops import while_loop

__all__ = ["while_loop"]
