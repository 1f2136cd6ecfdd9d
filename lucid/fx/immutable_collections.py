"""``lucid.fx.immutable_collections`` (``torch.fx.immutable_collections``): the frozen list and
dict that graph nodes keep their arguments in.

Both are :mod:`lucid.fx.node`'s own classes.

Examples
--------
>>> from lucid.fx.immutable_collections import immutable_list
>>> xs = immutable_list([1, 2])
>>> try:
...     xs.append(3)
... except (TypeError, NotImplementedError) as e:
...     print(type(e).__name__)
NotImplementedError
"""
from __future__ import annotations

from .node import immutable_dict, immutable_list

__all__ = ["immutable_dict", "immutable_list"]
