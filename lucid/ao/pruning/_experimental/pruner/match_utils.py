"""Pattern matching on an FX graph for structured pruning (PyTorch's
``torch.ao.pruning._experimental.pruner.match_utils``).

NOTE [Pruning patterns]
A pattern is a tuple of steps; a step is a module class (a ``call_module`` node whose module
was of that class before parametrization), a function (a ``call_function`` node calling it),
a string (a node with that target, e.g. ``"output"``) or ``MatchAllNode`` (anything). The
pattern is followed from a node through its *first* user at each step, as PyTorch does.
"""
from __future__ import annotations

from .....fx import Node
from .....nn.module import Module
from .....nn.utils.parametrize import type_before_parametrizations

__all__ = ["MatchAllNode", "apply_match"]


class MatchAllNode:
    """A pattern step that matches any node."""


def _match(modules, node, step):
    if isinstance(step, type) and issubclass(step, MatchAllNode):
        return True
    if not isinstance(node, Node):
        return False
    if isinstance(step, type) and issubclass(step, Module):
        return node.op == "call_module" and type_before_parametrizations(modules[node.target]) is step
    if callable(step):
        return node.op == "call_function" and node.target is step
    if isinstance(step, str):
        return node.target == step
    return False


def apply_match(modules, pattern, node, matched_node_pattern):
    """The nodes matching ``pattern`` from ``node`` on (after ``matched_node_pattern``), or None.

    Examples
    --------
    >>> import lucid.nn as nn, lucid.fx
    >>> from lucid.ao.pruning._experimental.pruner.match_utils import apply_match
    >>> gm = lucid.fx.symbolic_trace(nn.Sequential(nn.Linear(2, 3), nn.ReLU(), nn.Linear(3, 1)))
    >>> first = next(n for n in gm.graph.nodes if n.op == "call_module")
    >>> [n.target for n in apply_match(dict(gm.named_modules()), (nn.Linear, nn.ReLU, nn.Linear), first, [])]
    ['0', '1', '2']
    """
    if not isinstance(pattern, tuple):
        return [node] if _match(modules, node, pattern) else None
    first, *rest = pattern
    if not _match(modules, node, first):
        return None
    if not rest:
        return matched_node_pattern + [node]
    for user in node.users:  # the first user only (NOTE [Pruning patterns])
        return apply_match(modules, tuple(rest), user, matched_node_pattern + [node])
    return None
