"""``lucid.fx.annotate`` (``torch.fx.annotate``): :func:`annotate`, a type hint for a traced value.

Examples
--------
>>> from lucid.fx import Graph, Proxy
>>> from lucid.fx.annotate import annotate
>>> g = Graph()
>>> x = annotate(Proxy(g.placeholder("x")), int)
>>> x.node.type
<class 'int'>
"""
from __future__ import annotations

from .proxy import Proxy

__all__ = ["annotate"]


def annotate(val, type):  # noqa: A002 - PyTorch's parameter name
    """Record ``type`` as the type of ``val``'s graph node during tracing; return ``val``.

    Outside tracing (``val`` not a :class:`~lucid.fx.Proxy`) it returns ``val`` unchanged.
    A node that already has a different type raises ``RuntimeError``, as in PyTorch.
    """
    if isinstance(val, Proxy):
        node = val.node
        if node.type is not None and node.type is not type:
            raise RuntimeError(f"annotate: tried to annotate a value that already had a type on it! "
                               f"Existing type is {node.type} and new type is {type}. "
                               "This could happen if you tried to annotate a function parameter value "
                               "(in which case you should use the type slot on the function signature) "
                               "or you called annotate on the same value twice")
        node.type = type
    return val
