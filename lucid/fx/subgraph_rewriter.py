"""``replace_pattern``: find a traced pattern in a GraphModule and splice in a replacement
(``torch.fx.subgraph_rewriter``).

NOTE [Subgraph matching]
As torch.fx's ``SubgraphMatcher`` (``match_output=False``, ``match_placeholder=False``): the
pattern's returned nodes are its anchors, matched against graph nodes in graph order and walked
up through their arguments. A pattern placeholder is a wildcard for any value, but two distinct
pattern nodes never match one graph node (``relu(a + b)`` does not match ``relu(x + x)``). A
match is kept only when it is self-contained: a matched node that the pattern does not return
has no users outside the match. Overlapping matches keep the first. Literal arguments must be
equal (same type) unless ``ignore_literals``.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

from .graph import Graph
from .graph_module import GraphModule, _copy_attr
from .node import Node

__all__ = ["Match", "ReplacedPatterns", "InternalMatch", "replace_pattern", "replace_pattern_with_filters"]


class Match(NamedTuple):
    """One replaced occurrence: ``anchor`` is the pattern node it was found from (the
    pattern's returned node) and ``nodes_map`` maps pattern nodes to the graph nodes matched."""

    anchor: Node
    nodes_map: dict


@dataclass
class ReplacedPatterns:
    """A replaced occurrence (``replace_pattern_with_filters``): also the ``replacements``,
    the nodes the replacement inserted into the graph."""

    anchor: Node
    nodes_map: dict
    replacements: list


@dataclass
class InternalMatch:
    """A match before replacement, as filters and ``replacement_callback`` see it."""

    anchors: list
    nodes_map: dict = field(default_factory=dict)
    placeholder_nodes: list = field(default_factory=list)
    returning_nodes: list = field(default_factory=list)
    name_node_map: dict = field(default_factory=dict)


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


def _flat_nodes(a):
    if isinstance(a, Node):
        return [a]
    if isinstance(a, (tuple, list)):
        return [n for e in a for n in _flat_nodes(e)]
    raise NotImplementedError(f"replace_pattern: a pattern returns nodes (or tuples of them), not {a!r}")


class _Matcher:
    def __init__(self, pattern, ignore_literals=False):
        self.pattern = pattern
        outputs = [n for n in pattern.nodes if n.op == "output"]
        if len(outputs) != 1:
            raise ValueError("replace_pattern: the pattern graph must have exactly one output node")
        self.anchors = _flat_nodes(outputs[0].args[0])
        self.placeholders = [n for n in pattern.nodes if n.op == "placeholder"]
        self.ignore_literals = ignore_literals

    def matches(self, graph):
        """All self-contained, non-overlapping matches in ``graph``, in graph order."""
        candidates = [n for n in graph.nodes if n.op not in ("placeholder", "output")]
        found, taken = [], set()
        for nodes_map in self._search(0, {}, candidates):
            inner = [g for p, g in nodes_map.items() if p.op != "placeholder"]
            if any(g in taken for g in inner):
                continue
            taken.update(inner)
            found.append(InternalMatch(
                anchors=list(self.anchors), nodes_map=nodes_map,
                placeholder_nodes=[nodes_map[p] for p in self.placeholders if p in nodes_map],
                returning_nodes=[nodes_map[a] for a in self.anchors]))
        return found

    def _search(self, i, nodes_map, candidates):
        if i == len(self.anchors):
            if self._contained(nodes_map):
                yield nodes_map
            return
        for gn in candidates:
            trial = dict(nodes_map)
            if self._node(self.anchors[i], gn, trial):
                yield from self._search(i + 1, trial, candidates)

    def _contained(self, nodes_map):
        returning = {nodes_map[a] for a in self.anchors}
        inner = {g for p, g in nodes_map.items() if p.op != "placeholder"}
        return all(u in inner for p, g in nodes_map.items()
                   if p.op != "placeholder" and g not in returning for u in g.users)

    def _node(self, pn, gn, nodes_map):
        if pn in nodes_map:
            return nodes_map[pn] is gn
        if gn in nodes_map.values():
            return False
        if pn.op == "placeholder":
            nodes_map[pn] = gn
            return True
        if pn.op != gn.op:
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
            return isinstance(b, (tuple, list)) and len(a) == len(b) and \
                all(self._arg(x, y, nodes_map) for x, y in zip(a, b))
        if isinstance(a, dict):
            return isinstance(b, dict) and set(a) == set(b) and all(self._arg(a[k], b[k], nodes_map) for k in a)
        if self.ignore_literals:
            return not isinstance(b, Node)
        return not isinstance(b, Node) and type(a) is type(b) and a == b


def replace_pattern(gm, pattern, replacement):
    """Replace every non-overlapping occurrence of ``pattern`` in ``gm.graph`` by
    ``replacement`` and recompile ``gm`` (NOTE [Subgraph matching]).

    Parameters
    ----------
    gm : GraphModule
        The module to rewrite in place.
    pattern, replacement : callable, Module, GraphModule or Graph
        Traced with ``symbolic_trace`` when not graphs already; both take the same inputs
        (matched positionally) and return as many values.

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
    return [Match(m.anchor, m.nodes_map) for m in replace_pattern_with_filters(gm, pattern, replacement)]


def replace_pattern_with_filters(gm, pattern, replacement=None, match_filters=None, ignore_literals=False,
                                 replacement_callback=None):
    """``replace_pattern`` keeping only the matches every filter accepts.

    Parameters
    ----------
    gm, pattern, replacement
        As for ``replace_pattern``.
    match_filters : list of callables, optional
        ``filter(match, original_graph, pattern_graph) -> bool`` with an ``InternalMatch``.
    ignore_literals : bool
        Let literal (non-node) arguments of the pattern match any value.
    replacement_callback : callable, optional
        ``callback(match, original_graph, pattern_graph) -> Graph``: the replacement of each
        match (instead of ``replacement``).

    Returns
    -------
    list of ReplacedPatterns

    Examples
    --------
    >>> import lucid
    >>> from lucid.fx import symbolic_trace
    >>> from lucid.fx.subgraph_rewriter import replace_pattern_with_filters
    >>> gm = symbolic_trace(lambda x: lucid.relu(x + 1) + lucid.relu(x + 2))
    >>> only_one = lambda m, g, p: any(n.args[1:] == (1,) for n in m.nodes_map.values())
    >>> rs = replace_pattern_with_filters(gm, lambda a: lucid.relu(a + 1), lambda a: lucid.tanh(a),
    ...                                   match_filters=[only_one], ignore_literals=True)
    >>> len(rs), [n.name for n in rs[0].replacements]
    (1, ['tanh'])
    """
    pattern_graph, _ = _as_graph(pattern)
    graph = gm.graph
    matcher = _Matcher(pattern_graph, ignore_literals)
    matches = [m for m in matcher.matches(graph)
               if all(f(m, graph, pattern_graph) for f in (match_filters or ()))]
    if replacement is None and replacement_callback is None:
        raise ValueError("replace_pattern_with_filters: give a replacement or a replacement_callback")
    common = _as_graph(replacement) if replacement_callback is None else None
    changed, results = {}, []
    for m in matches:
        rep_graph, rep_gm = common if common is not None else _as_graph(replacement_callback(m, graph, pattern_graph))
        results.append(_splice(gm, m, pattern_graph, rep_graph, rep_gm, changed))
    gm.recompile()
    return results


def _splice(gm, m, pattern_graph, rep_graph, rep_gm, changed):
    graph = gm.graph
    rep_placeholders = [n for n in rep_graph.nodes if n.op == "placeholder"]
    if len(rep_placeholders) != len(m.placeholder_nodes):
        raise ValueError("replace_pattern: pattern and replacement must take the same number of inputs")
    for i, gn in enumerate(m.placeholder_nodes):  # an input an earlier replacement rewired
        if gn in changed:
            new = changed[gn]
            m.placeholder_nodes[i] = new
            m.nodes_map.update({p: new for p, g in m.nodes_map.items() if g is gn})
    val_map = dict(zip(rep_placeholders, m.placeholder_nodes))
    for node in rep_graph.nodes:
        if node.op in ("get_attr", "call_module") and rep_gm is not None and not _has_path(gm, node.target):
            _copy_attr(rep_gm, gm, node.target)
    with graph.inserting_before(_insert_point(graph, m.returning_nodes)):
        out = graph.graph_copy(rep_graph, val_map)
    copied = _flat_nodes(out)
    if len(copied) != len(m.returning_nodes):
        raise ValueError(f"replace_pattern: the pattern returns {len(m.returning_nodes)} values but the "
                         f"replacement returns {len(copied)}")
    for gn, new in zip(m.returning_nodes, copied):
        gn.replace_all_uses_with(new)
        changed[gn] = new
    for pn in reversed(pattern_graph.nodes):
        if pn.op not in ("placeholder", "output"):
            graph.erase_node(m.nodes_map[pn])
    replacements = [v for v in val_map.values() if v not in m.placeholder_nodes]
    return ReplacedPatterns(m.anchors[0], m.nodes_map, replacements)


def _insert_point(graph, returning):
    """Before the first user of a returned node (torch.fx's choice), else after the last one."""
    users = {u for n in returning for u in n.users}
    after = None
    for n in graph.nodes:
        if n in users:
            return n
        if n in returning:
            after = n.next
    return after


def _has_path(mod, target):
    for atom in target.split("."):
        if not hasattr(mod, atom):
            return False
        mod = getattr(mod, atom)
    return True
