"""``lucid.fx.traceback`` (``torch.fx.traceback``): the "current node meta" that graph passes
carry along (stack traces, custom annotations, provenance), kept per thread.

NOTE [fx traceback state]
While ``preserve_node_meta()`` is active, code that builds nodes can read
:func:`get_current_meta` (a dict: ``stack_trace``, ``custom`` ...) and copy it into the new
nodes, and :func:`set_current_meta` / :func:`annotate` set it. The state is this module's own
thread-local, so nested contexts restore what they found. Lucid's own tracer
(``lucid.fx.Tracer``) does not read it yet: it records ``meta["stack_trace"]`` itself.

Examples
--------
>>> from lucid.fx import traceback as fx_traceback
>>> with fx_traceback.preserve_node_meta():
...     with fx_traceback.annotate({"stage": 1}):
...         fx_traceback.get_current_meta()["custom"]
{'stage': 1}
>>> fx_traceback.has_preserved_node_meta()
False
"""
from __future__ import annotations

import contextlib
import enum
import functools
import json
import threading
import traceback as _py_traceback

__all__ = ["NodeSource", "NodeSourceAction", "annotate", "annotate_fn", "format_stack", "get_current_meta",
           "get_current_replay_node", "get_graph_provenance_json", "has_preserved_node_meta", "preserve_node_meta",
           "reset_grad_fn_seq_nr", "set_current_meta", "set_current_replay_node", "set_grad_fn_seq_nr",
           "set_stack_trace"]


class _MetaState(threading.local):
    def __init__(self):
        self.preserve = False
        self.meta = {}
        self.replay_node = None


_STATE = _MetaState()


@contextlib.contextmanager
def preserve_node_meta(enable=True):
    """Within the block, node meta set here is kept (:func:`has_preserved_node_meta` is True)."""
    saved = (_STATE.preserve, _STATE.meta, _STATE.replay_node)
    _STATE.preserve, _STATE.meta = enable, dict(_STATE.meta)
    try:
        yield
    finally:
        _STATE.preserve, _STATE.meta, _STATE.replay_node = saved


def has_preserved_node_meta():
    """Whether a :func:`preserve_node_meta` block is active in this thread."""
    return _STATE.preserve


def set_stack_trace(stack):
    """Set the current meta's ``stack_trace`` (a list of lines, joined) inside :func:`preserve_node_meta`."""
    if _STATE.preserve and stack:
        _STATE.meta["stack_trace"] = "".join(stack)


def format_stack():
    """The stack to record for a node: the preserved ``stack_trace`` if set, else the caller's stack."""
    if _STATE.preserve and "stack_trace" in _STATE.meta:
        return [_STATE.meta["stack_trace"]]
    return _py_traceback.format_list(_py_traceback.extract_stack()[:-1])


def get_current_meta():
    """The current node meta (a dict; empty when none is set)."""
    return _STATE.meta


@contextlib.contextmanager
def set_current_meta(node, pass_name=""):
    """Within the block, the current meta is ``node.meta`` (plus its provenance), as when a
    pass re-runs ``node``."""
    saved_meta = _STATE.meta
    if _STATE.preserve and node is not None:
        meta = dict(node.meta)
        meta.setdefault("stack_trace", getattr(node, "stack_trace", None))
        meta["from_node"] = [NodeSource(node, pass_name, NodeSourceAction.CREATE)]
        _STATE.meta = meta
    try:
        yield
    finally:
        _STATE.meta = saved_meta


@contextlib.contextmanager
def annotate(annotation_dict):
    """Merge ``annotation_dict`` into the current meta's ``custom`` dict within the block."""
    if not isinstance(annotation_dict, dict):
        raise TypeError(f"annotate: expected a dict, got {type(annotation_dict).__name__}")
    saved = _STATE.meta
    _STATE.meta = dict(saved)
    custom = dict(saved.get("custom", {}))
    custom.update(annotation_dict)
    _STATE.meta["custom"] = custom
    try:
        yield
    finally:
        _STATE.meta = saved


def annotate_fn(annotation_dict):
    """Decorator form of :func:`annotate`: the function's body runs annotated."""
    def decorate(fn):
        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            with annotate(annotation_dict):
                return fn(*args, **kwargs)
        return wrapper
    return decorate


def set_grad_fn_seq_nr(seq_nr):
    """Record the autograd sequence number of the node being replayed in the backward."""
    _STATE.meta["grad_fn_seq_nr"] = _STATE.meta.get("grad_fn_seq_nr", []) + [seq_nr]
    _STATE.meta["in_grad_fn"] = _STATE.meta.get("in_grad_fn", 0) + 1


def reset_grad_fn_seq_nr():
    """Undo the last :func:`set_grad_fn_seq_nr`."""
    depth = _STATE.meta.get("in_grad_fn", 0) - 1
    if depth <= 0:
        _STATE.meta.pop("grad_fn_seq_nr", None)
        _STATE.meta.pop("in_grad_fn", None)
    else:
        _STATE.meta["grad_fn_seq_nr"] = _STATE.meta["grad_fn_seq_nr"][:-1]
        _STATE.meta["in_grad_fn"] = depth


def set_current_replay_node(node):
    """Record the node a pass is replaying (None to clear)."""
    _STATE.replay_node = node


def get_current_replay_node():
    """The node set by :func:`set_current_replay_node`, or None."""
    return _STATE.replay_node


class NodeSourceAction(enum.Enum):
    """How a node came from its source: created from it, or replacing it."""

    CREATE = "create"
    REPLACE = "replace"


class NodeSource:
    """Where a node came from: the source node's name and target, the pass, and the action.

    Examples
    --------
    >>> from lucid.fx import Graph
    >>> from lucid.fx.traceback import NodeSource, NodeSourceAction
    >>> n = Graph().placeholder("x")
    >>> NodeSource(n, "my_pass", NodeSourceAction.REPLACE).to_dict()["action"]
    ['replace']
    """

    def __init__(self, node, pass_name="", action=None):
        actions = action if isinstance(action, list) else [action] if action is not None else []
        self.pass_name = pass_name
        self.action = [NodeSourceAction(a) if not isinstance(a, NodeSourceAction) else a for a in actions]
        if node is None:
            self.name, self.target, self.graph_id, self.from_node = "", "", -1, []
        else:
            self.name = node.name
            self.target = str(node.target)
            self.graph_id = id(node.graph)
            self.from_node = list(node.meta.get("from_node", []))

    def to_dict(self):
        return {"name": self.name, "target": self.target, "graph_id": self.graph_id, "pass_name": self.pass_name,
                "action": [a.value for a in self.action], "from_node": [s.to_dict() for s in self.from_node]}

    def __repr__(self):
        return f"NodeSource(name={self.name!r}, target={self.target!r}, pass_name={self.pass_name!r})"

    def __eq__(self, other):
        return isinstance(other, NodeSource) and self.to_dict() == other.to_dict()

    def __hash__(self):
        return hash(json.dumps(self.to_dict(), sort_keys=True))


def get_graph_provenance_json(graph):
    """``{node name: [its NodeSource dicts]}`` for the nodes of ``graph`` that record a source."""
    return {node.name: [s.to_dict() for s in node.meta.get("from_node", [])]
            for node in graph.nodes if node.meta.get("from_node")}


