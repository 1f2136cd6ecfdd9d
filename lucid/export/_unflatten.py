"""``lucid.export.unflatten``: an ExportedProgram back as a module hierarchy (``torch.export.unflatten``).

NOTE [Unflattening]
The flat graph of ``ep.module()`` is cut by the module calls its nodes were made in (NOTE
[Module stacks] in ``_trace.py``): the nodes of one call of a submodule become the graph of an
``InterpreterModule`` at that submodule's path, and the parent's graph calls it
(``call_module``), recursively. The values such a call takes are the ones its nodes read from
outside (its own parameters and buffers are its ``get_attr``s), the values it gives those read
after it. For a module named in ``preserve_module_call_signature`` the call takes and gives
what the original call did (``module_call_graph``): its tensor arguments, in order, and its
result in the original structure, so another module with that signature can be swapped in
(``unflat.sub = NewSub()``), as in torch. A module called again later runs inline in its
parent from the second call on (its state read through the hierarchy); a module none of whose
calls left a node (never called, or an identity) is a plain Module holding its state. As in
torch, the state is a copy of the program's (shared tensors stay shared): running or training
the unflattened module leaves ``ep.state_dict`` as it was.
"""
from __future__ import annotations

import operator

from ..fx.graph import Graph
from ..fx.graph_module import GraphModule
from ..fx.node import map_arg

__all__ = ["unflatten", "UnflattenedModule", "InterpreterModule", "FlatArgsAdapter"]


class FlatArgsAdapter:
    """Adapts the flat inputs of a swapped-in module's call (torch's ``FlatArgsAdapter``):
    subclass and override ``adapt``. Lucid's unflattened modules call submodules with their
    original arguments, so an adapter is only stored."""

    def adapt(self, target_spec, input_spec, input_args, metadata=None, obj=None):
        raise NotImplementedError("FlatArgsAdapter.adapt: override it in a subclass")


class InterpreterModule(GraphModule):
    """The graph of one submodule's call (NOTE [Unflattening])."""


class UnflattenedModule(GraphModule):
    """The root of :func:`unflatten`'s hierarchy: runs its graph, calling the submodules."""


def unflatten(module, flat_args_adapter=None):
    """The program as a module hierarchy equal to the original's (``torch.export.unflatten``).

    Parameters
    ----------
    module : ExportedProgram
    flat_args_adapter : FlatArgsAdapter, optional
        Kept for torch's signature (see :class:`FlatArgsAdapter`).

    Returns
    -------
    UnflattenedModule
        Submodules at the original paths (``InterpreterModule``s), the original's
        ``state_dict`` keys; calling it gives the original's results and gradients. A
        submodule named in ``preserve_module_call_signature`` can be replaced by another
        module taking and giving the same values.

    Examples
    --------
    >>> import lucid
    >>> from lucid import nn
    >>> from lucid.export import export, unflatten
    >>> model = nn.Sequential(nn.Linear(3, 2), nn.ReLU())
    >>> unflat = unflatten(export(model, (lucid.randn(4, 3),)))
    >>> [name for name, _ in unflat.named_modules()]
    ['', '0', '1']
    >>> x = lucid.randn(4, 3)
    >>> bool((unflat(x) == model(x)).all())
    True
    """
    from .exported_program import ExportedProgram

    if not isinstance(module, ExportedProgram):
        raise TypeError(f"unflatten: expected an ExportedProgram, got {type(module).__name__}")
    if flat_args_adapter is not None and not isinstance(flat_args_adapter, FlatArgsAdapter):
        raise TypeError(f"unflatten: flat_args_adapter must be a FlatArgsAdapter, got {type(flat_args_adapter).__name__}")
    return _Builder(module).build()


def _key_at(node, depth):
    stack = list((node.meta.get("nn_module_stack") or {}).items())
    return stack[depth] if len(stack) > depth else None


class _Builder:
    def __init__(self, ep):
        self.ep = ep
        self.flat = ep.module()
        self.graph = self.flat.graph
        self.order = {n: i for i, n in enumerate(self.graph.nodes)}
        self.fqns = [e.fqn for e in ep.module_call_graph]
        self.preserved = {e.fqn: e.signature for e in ep.module_call_graph if e.fqn and e.signature is not None}
        self.built = {}  # path -> InterpreterModule
        self.copies = {}  # id(tensor of the program) -> its copy (shared tensors stay shared)

    def _copy(self, t):
        """The unflattened module's own copy of a state tensor: torch's ``unflatten`` copies
        the program's state, so running (or training) it leaves the program as it was."""
        from ..nn import Parameter

        if t is None:
            return None
        if id(t) not in self.copies:
            value = t.detach().clone()
            self.copies[id(t)] = Parameter(value, requires_grad=t.requires_grad) if isinstance(t, Parameter) else value
        return self.copies[id(t)]

    def build(self):
        nodes = [n for n in self.graph.nodes if n.op not in ("placeholder", "get_attr", "output")]
        inputs = [n for n in self.graph.nodes if n.op == "placeholder"]
        out = next(n for n in self.graph.nodes if n.op == "output")
        g = self._graph("", nodes, inputs, out.args[0], 0, root=True)
        root = UnflattenedModule(self._owner(""), g, "UnflattenedModule")
        self._fill(root, "")
        for hook in self.flat._forward_pre_hooks.values():  # the input guards (NOTE [Export guards])
            root.register_forward_pre_hook(hook, with_kwargs=True)
        root.training = self.ep._training
        return root

    # ------------------------------------------------------------ graphs
    def _graph(self, path, nodes, inputs, result, depth, root=False):
        g, env = Graph(), {}
        prefix = path + "." if path else ""
        for i, n in enumerate(inputs):
            ph = g.placeholder(n.target if root else n.name)
            if root:
                ph.args, ph.type = n.args, n.type
            ph.meta = dict(n.meta)
            env[n] = ph

        def look(n):
            if n not in env:  # a get_attr of this module's (or a descendant's) state
                if n.op != "get_attr" or not n.target.startswith(prefix):
                    raise RuntimeError(f"unflatten: {n.name} is read in module {path!r} but not given to it")
                env[n] = g.get_attr(n.target[len(prefix):])
                env[n].meta = dict(n.meta)
            return env[n]

        i = 0
        while i < len(nodes):
            key = _key_at(nodes[i], depth)
            j = i + 1
            while key is not None and j < len(nodes) and _key_at(nodes[j], depth) == key:
                j += 1
            run = nodes[i:j]
            child = None if key is None else key[1][0]
            if child is None or "@" in key[0] or child in self.built:
                for n in run:  # this module's own nodes, or a later call of a child, inline
                    env[n] = g.node_copy(n, look)
            else:
                self._call_child(g, env, look, path, child, run, depth)
            i = j
        g.output(map_arg(result, look))
        g.lint()
        return g

    def _call_child(self, g, env, look, path, child, run, depth):
        inside = set(run)
        cprefix = child + "."
        ext = []
        for n in run:
            for a in n.all_input_nodes:
                if a not in inside and a not in ext and not (a.op == "get_attr" and a.target.startswith(cprefix)):
                    ext.append(a)
        outs = [n for n in run if any(u not in inside for u in n.users)]
        by_name = {n.name: n for n in self.graph.nodes}
        sig = self.preserved.get(child)
        result = outs[0] if len(outs) == 1 else tuple(outs)
        inputs = ext
        if sig is not None:
            ins = [by_name.get(a.name) for a in sig.inputs]
            souts = [by_name.get(a.name) for a in sig.outputs]
            if None not in ins and set(ext) <= set(ins) and None not in souts and set(outs) <= set(souts):
                inputs, outs = ins, souts
                spec = sig.out_spec
                result = spec.unflatten(souts) if spec is not None and spec.num_leaves == len(souts) \
                    else (souts[0] if len(souts) == 1 else tuple(souts))
        sub = self._graph(child, run, inputs, result, depth + 1)
        mod = InterpreterModule(self._owner(child), sub, "InterpreterModule")
        self._fill(mod, child)
        self.built[child] = mod
        local = child[len(path) + 1:] if path else child
        call = g.call_module(local, tuple(look(a) for a in inputs))
        for leaf, where in _leaf_paths(result):
            value = call
            for k in where:
                value = g.call_function(operator.getitem, (value, k))
            env[leaf] = value

    # ------------------------------------------------------------ modules
    def _owner(self, path):
        """A Module holding the direct state of ``path`` and its children built so far."""
        from ..nn import Module

        owner = Module()
        src = self._state_module(path)
        if src is not None:
            owner._parameters = {k: self._copy(v) for k, v in src._parameters.items()}
            owner._buffers = {k: self._copy(v) for k, v in src._buffers.items()}
            owner._non_persistent_buffers_set = set(src._non_persistent_buffers_set)
            for k, v in self._constants(src):
                setattr(owner, k, self._copy(v))
        owner._modules = {}
        for fqn in self.fqns:
            if fqn.rpartition(".")[0] == path and fqn != path:
                name = fqn.rpartition(".")[2]
                owner._modules[name] = self.built.get(fqn) or self._plain(fqn)
        return owner

    def _state_module(self, path):
        try:
            return self.flat.get_submodule(path) if path else self.flat
        except AttributeError:
            return None

    def _plain(self, fqn):
        """A submodule no call of which left a node: a Module with its state (as torch's)."""
        self.built[fqn] = mod = self._owner(fqn)
        return mod

    def _fill(self, mod, path):
        """Give ``mod`` the original's state and children of ``path``, in the original's order."""
        owner = self._owner(path)
        mod._parameters = dict(owner._parameters)
        mod._buffers = dict(owner._buffers)
        mod._non_persistent_buffers_set = set(getattr(owner, "_non_persistent_buffers_set", ()))
        extra = {k: v for k, v in mod._modules.items() if k not in owner._modules}
        if extra:
            raise RuntimeError(f"unflatten: module {path!r} has unexpected children {sorted(extra)}")
        mod._modules = dict(owner._modules)
        src = self._state_module(path)
        for k, v in self._constants(src) if src is not None else ():
            setattr(mod, k, self._copy(v))
        mod.training = self.ep._training

    @staticmethod
    def _constants(src):
        """The lifted constants ``module()`` keeps as plain tensor attributes."""
        import lucid

        return [(k, v) for k, v in vars(src).items() if isinstance(v, lucid.Tensor) and not k.startswith("_")]


def _leaf_paths(result, where=()):
    """``(node, index path)`` for each node of an output structure."""
    if hasattr(result, "op"):
        return [(result, where)]
    if isinstance(result, (tuple, list)):
        return [p for i, v in enumerate(result) for p in _leaf_paths(v, where + (i,))]
    if isinstance(result, dict):
        return [p for k, v in result.items() for p in _leaf_paths(v, where + (k,))]
    return []
