"""``split_module``: cut a GraphModule into one submodule per partition
(``torch.fx.passes.split_module``).

NOTE [Split partitions]
``split_callback(node)`` names the partition of every call node. A value defined in one
partition and used in another (or by the output) becomes an output of the first and an input
of the second; placeholders and ``get_attr`` values stay in the base graph and are passed in.
Partitions run in dependency order (a cycle between them is an error), each as a
``GraphModule`` ``submod_<name>`` returning its one output bare and several as a tuple, which
the base graph unpacks with getitems.
"""
from __future__ import annotations

import inspect

from ..graph import Graph
from ..graph_module import GraphModule
from ..node import map_arg

__all__ = ["split_module", "Partition"]


class Partition:
    """The nodes of one partition, with what flows in and out of it."""

    def __init__(self, name):
        self.name = name
        self.submod_name = f"submod_{name}"
        self.node_names = []
        self.inputs = {}  # ordered sets (dicts) of node names
        self.outputs = {}
        self.dependencies = {}
        self.dependents = {}
        self.graph = Graph()
        self.environment = {}
        self.targets = {}

    def __repr__(self):
        return (f"name: {self.name},\n nodes: {self.node_names},\n inputs: {list(self.inputs)},\n outputs: "
                f"{list(self.outputs)},\n partitions depended on: {list(self.dependencies)},\n partition "
                f"dependents: {list(self.dependents)}")


def _fetch(mod, qualname):
    for atom in qualname.split("."):
        if not hasattr(mod, atom):
            raise AttributeError(f"split_module: node target {qualname} not found in the module")
        mod = getattr(mod, atom)
    return mod


def split_module(m, root_m, split_callback, qualname_map=None, keep_original_order=False,
                 keep_original_node_name=False, partition_affix=None):
    """Split ``m`` into submodules ``submod_<p>``, one per partition ``p = split_callback(node)``
    (NOTE [Split partitions]).

    Parameters
    ----------
    m : GraphModule
        The traced module to split.
    root_m : Module
        The original module (kept for PyTorch's signature; targets are read from ``m``).
    split_callback : callable
        ``node -> partition`` (any value; its ``str`` names the submodule) for each call node.
    qualname_map : dict, optional
        Filled with ``"submod_<p>.<target>" -> "<target>"`` for the submodules moved.
    keep_original_order : bool
        Call the partitions in the order they first appear instead of dependency order.
    keep_original_node_name : bool
        Give the nodes inside the partitions their original names.
    partition_affix : str, optional
        Submodules are named ``submod_<affix>_<p>``.

    Returns
    -------
    GraphModule

    Examples
    --------
    >>> import lucid
    >>> from lucid import nn
    >>> from lucid.fx import symbolic_trace
    >>> from lucid.fx.passes.split_module import split_module
    >>> gm = symbolic_trace(nn.Sequential(nn.Linear(2, 2), nn.ReLU(), nn.Linear(2, 1)))
    >>> parts = split_module(gm, gm, lambda n: 0 if n.target in ("0", "1") else 1)
    >>> [(n.op, n.target) for n in parts.graph.nodes]
    [('placeholder', 'input'), ('call_module', 'submod_0'), ('call_module', 'submod_1'), ('output', 'output')]
    >>> x = lucid.randn(4, 2)
    >>> bool((parts(x) == gm(x)).all())
    True
    """
    partitions, part_of = {}, {}
    for node in m.graph.nodes:
        if node.op in ("placeholder", "get_attr", "output"):
            continue
        name = str(split_callback(node))
        name = f"{partition_affix}_{name}" if partition_affix is not None else name
        partitions.setdefault(name, Partition(name)).node_names.append(node.name)
        part_of[node] = name

    def record(def_node, use_node):
        defined, used = part_of.get(def_node), part_of.get(use_node)
        if defined == used:
            return
        if defined is not None:
            partitions[defined].outputs.setdefault(def_node.name)
            if used is not None:
                partitions[defined].dependents.setdefault(used)
        if used is not None:
            partitions[used].inputs.setdefault(def_node.name)
            if defined is not None:
                partitions[used].dependencies.setdefault(defined)

    for node in m.graph.nodes:
        if node.op == "output":
            map_arg(node.args[0], lambda n: record(n, None))
        elif node in part_of:
            for inp in node.all_input_nodes:
                record(inp, node)

    order = list(partitions) if keep_original_order else _dependency_order(partitions)
    orig = {n.name: n for n in m.graph.nodes}
    for node in m.graph.nodes:
        if node in part_of:
            _copy_into(partitions[part_of[node]], node, m, qualname_map, keep_original_node_name)
    return _assemble(m, partitions, order, orig)


def _dependency_order(partitions):
    pending = {name: len(p.dependencies) for name, p in partitions.items()}
    ready = [name for name, n in pending.items() if n == 0]
    order = []
    while ready:
        name = ready.pop(0)
        order.append(name)
        for dep in partitions[name].dependents:
            pending[dep] -= 1
            if pending[dep] == 0:
                ready.append(dep)
    if len(order) != len(partitions):
        raise RuntimeError("split_module: cycle exists between partitions!")
    return order


def _copy_into(partition, node, m, qualname_map, keep_original_node_name):
    env = partition.environment
    if not env:
        for inp in partition.inputs:  # inputs first: the submodule's signature
            env[inp] = partition.graph.placeholder(inp)

    def value(n):
        return env[n.name]

    target = node.target
    if node.op == "call_module":
        partition.targets[target] = _fetch(m, target)
        if qualname_map is not None:
            qualname_map[f"{partition.submod_name}.{target}"] = target
    new = partition.graph.create_node(node.op, target, map_arg(node.args, value), map_arg(node.kwargs, value),
                                      node.name if keep_original_node_name else None, node.type)
    new.meta = node.meta.copy()
    env[node.name] = new


def _assemble(m, partitions, order, orig):
    base, env, attrs = Graph(), {}, {}
    for node in m.graph.nodes:
        if node.op == "placeholder":
            default = node.args[0] if node.args else inspect.Signature.empty
            env[node.name] = base.placeholder(node.target, type_expr=node.type, default_value=default)
        elif node.op == "get_attr":
            env[node.name] = base.get_attr(node.target)
            attrs[node.target] = _fetch(m, node.target)
        else:
            continue
        env[node.name].meta = node.meta.copy()
    for name in order:
        p = partitions[name]
        if not p.environment:
            for inp in p.inputs:
                p.environment[inp] = p.graph.placeholder(inp)
        outs = tuple(p.environment[orig[o].name] for o in p.outputs)
        p.graph.output(outs[0] if len(outs) == 1 else outs)
        attrs[p.submod_name] = GraphModule(p.targets, p.graph)
        call = base.call_module(p.submod_name, tuple(env[i] for i in p.inputs))
        if len(p.outputs) == 1:
            env[next(iter(p.outputs))] = call
        else:
            import operator

            for i, o in enumerate(p.outputs):
                env[o] = base.call_function(operator.getitem, (call, i))
    out = next(n for n in m.graph.nodes if n.op == "output")
    base.output(map_arg(out.args[0], lambda n: env[n.name]))
    return GraphModule(attrs, base)
