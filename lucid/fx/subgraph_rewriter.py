"""``replace_pattern``: find a traced pattern in a GraphModule and splice in a replacement
(``torch.fx.subgraph_rewriter``)."""
from __future__ import annotations

from typing import NamedTuple

from .graph import Graph
from .graph_module import GraphModule, _copy_attr
from .node import Node

__all__ = ["Match", "replace_pattern"]


class Match(NamedTuple):
    """One replaced occurrence: the graph node matched by the pattern's output (``anchor``)
    and the map from pattern nodes to graph nodes."""

    anchor: Node
    nodes_map: dict


def _as_graph(fn):
    if isinstance(fn, Graph):
        return fn, None
    if isinstance(fn, GraphModule):
        return fn.graph, fn
    from .tracer import symbolic_trace

    gm = symbolic_trace(fn)
    return gm.graph, gm


def _original(fn):
    return getattr(fn, "__fx_original__", fn)


class _Matcher:
    def __init__(self, pattern):
        self.pattern = pattern
        out = next(n for n in pattern.nodes if n.op == "output")
        if not isinstance(out.args[0], Node):
            raise NotImplementedError("replace_pattern: the pattern must return a single value")
        self.anchor = out.args[0]
        self.placeholders = [n for n in pattern.nodes if n.op == "placeholder"]

    def match(self, gn):
        nodes_map = {}
        if not self._node(self.anchor, gn, nodes_map):
            return None
        inner = [g for p, g in nodes_map.items() if p.op != "placeholder"]
        inner_set = set(inner)
        for g in inner:  # a matched value used outside the match cannot be removed
            if g is not gn and any(u not in inner_set for u in g.users):
                return None
        return Match(gn, nodes_map)

    def _node(self, pn, gn, nodes_map):
        if pn in nodes_map:
            return nodes_map[pn] is gn
        if pn.op == "placeholder":
            nodes_map[pn] = gn
            return True
        if pn.op != gn.op or gn in nodes_map.values():
            return False
        same = _original(pn.target) is _original(gn.target) if pn.op == "call_function" else pn.target == gn.target
        if not same or len(pn.args) != len(gn.args) or set(pn.kwargs) != set(gn.kwargs):
            return False
        nodes_map[pn] = gn
        return self._arg(pn.args, gn.args, nodes_map) and \
            all(self._arg(pn.kwargs[k], gn.kwargs[k], nodes_map) for k in pn.kwargs)

    def _arg(self, a, b, nodes_map):
        if isinstance(a, Node):
            return isinstance(b, Node) and self._node(a, b, nodes_map)
        if isinstance(a, (tuple, list)):
            return type(a) is type(b) and len(a) == len(b) and \
                all(self._arg(x, y, nodes_map) for x, y in zip(a, b))
        if isinstance(a, dict):
            return isinstance(b, dict) and set(a) == set(b) and all(self._arg(a[k], b[k], nodes_map) for k in a)
        return not isinstance(b, Node) and type(a) is type(b) and a == b


def replace_pattern(gm, pattern, replacement):
    """Replace every non-overlapping occurrence of ``pattern`` in ``gm.graph`` by
    ``replacement`` and recompile ``gm``.

    Parameters
    ----------
    gm : GraphModule
        The module to rewrite in place.
    pattern, replacement : callable, Module, GraphModule or Graph
        Traced with ``symbolic_trace`` when not graphs already; both take the same inputs
        (matched positionally) and the pattern returns one value.

    Returns
    -------
    list of Match

    Examples
    --------
    >>> import lucid
    >>> from lucid.fx import symbolic_trace, replace_pattern
    >>> gm = symbolic_trace(lambda x, y: lucid.relu(x + y) * 3)
    >>> matches = replace_pattern(gm, lambda a, b: lucid.relu(a + b), lambda a, b: lucid.tanh(a - b))
    >>> len(matches), gm(lucid.tensor([1.0]), lucid.tensor([1.0]))
    (1, tensor([0.]))
    """
    pattern_graph, _ = _as_graph(pattern)
    replacement_graph, replacement_gm = _as_graph(replacement)
    matcher = _Matcher(pattern_graph)
    rep_placeholders = [n for n in replacement_graph.nodes if n.op == "placeholder"]
    if len(rep_placeholders) != len(matcher.placeholders):
        raise ValueError("replace_pattern: pattern and replacement must take the same number of inputs")
    graph, taken, matches = gm.graph, set(), []
    for gn in list(graph.nodes):
        if gn in taken or gn.op in ("placeholder", "output"):
            continue
        m = matcher.match(gn)
        if m is None or any(g in taken for p, g in m.nodes_map.items() if p.op != "placeholder"):
            continue
        matches.append(m)
        taken.update(g for p, g in m.nodes_map.items() if p.op != "placeholder")
    for m in matches:
        _splice(gm, m, matcher, rep_placeholders, replacement_graph, replacement_gm)
    gm.recompile()
    return matches


def _splice(gm, m, matcher, rep_placeholders, replacement_graph, replacement_gm):
    graph = gm.graph
    val_map = {r: m.nodes_map[p] for r, p in zip(rep_placeholders, matcher.placeholders)}
    for node in replacement_graph.nodes:
        if node.op in ("get_attr", "call_module") and replacement_gm is not None:
            if not _has_path(gm, node.target):
                _copy_attr(replacement_gm, gm, node.target)
    with graph.inserting_before(m.anchor):
        out = graph.graph_copy(replacement_graph, val_map)
    if not isinstance(out, Node):
        raise NotImplementedError("replace_pattern: the replacement must return a single value")
    m.anchor.replace_all_uses_with(out)
    inner = [g for p, g in m.nodes_map.items() if p.op != "placeholder"]
    order = {n: i for i, n in enumerate(graph.nodes)}
    for g in sorted(inner, key=order.__getitem__, reverse=True):
        graph.erase_node(g)


def _has_path(mod, target):
    for atom in target.split("."):
        if not hasattr(mod, atom):
            return False
        mod = getattr(mod, atom)
    return True
