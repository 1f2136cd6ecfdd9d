"""``ExportedProgram.run_decompositions``: decomposition tables traced into the graph, and the
in-place updates of the program's inputs turned into mutation outputs.

NOTE [Functionalized state updates]
``export`` keeps in-place ops in the graph (NOTE [Exported graphs are not functionalized] in
``_trace.py``); ``run_decompositions`` removes them as torch's functionalization does. Each
in-place call whose first argument is a parameter, buffer or user input (or the result of an
earlier in-place call on it) becomes its out-of-place twin (``add_`` -> ``Tensor.add``,
``copy_`` -> a broadcast and cast of the source, ``fill_``/``zero_`` -> ``full_like``/
``zeros_like``), cast back to the input's dtype; later reads of the input read the new value.
``batch_norm`` in training mode, which updates its running statistics in place, becomes
``batch_norm`` without them plus the update written out in graph ops (the batch mean and the
unbiased batch variance, as ``F.batch_norm`` computes them, detached). The last value of each
updated input is an output of the graph, before the user's output, with a
``BUFFER_MUTATION``/``PARAMETER_MUTATION``/``USER_INPUT_MUTATION`` spec in input order (as
torch lists them); the graph then returns ``(*new_values, user_output)``. ``ep.module()``
writes them back with ``copy_`` and returns the user output, so it behaves like the original.
Limitation: an in-place update of a *view* of an input (``buf[0].add_(1)``) is refused, as is
an in-place op on an input inside a decomposition's replacement.
"""
from __future__ import annotations

import inspect
import operator

from ..fx.node import map_arg
from .graph_signature import ExportGraphSignature, InputKind, OutputKind, OutputSpec, TensorArgument

_MUTATION_KIND = {InputKind.PARAMETER: OutputKind.PARAMETER_MUTATION, InputKind.BUFFER: OutputKind.BUFFER_MUTATION,
                  InputKind.USER_INPUT: OutputKind.USER_INPUT_MUTATION}
# ops whose result shares its first argument's memory: in-place updates through them are refused
_VIEWS = frozenset({"getitem", "view", "reshape", "narrow", "select", "transpose", "permute", "squeeze", "unsqueeze",
                    "expand", "expand_as", "view_as", "flatten", "unflatten", "t", "diagonal", "movedim", "unbind",
                    "split", "chunk", "as_strided", "swapaxes", "swapdims", "unfold", "real", "imag", "detach"})


def _name_of(node):
    return node.meta.get("tensor_method") or getattr(node.target, "__name__", "")


def _is_inplace(node):
    name = _name_of(node)
    return node.op == "call_function" and name.endswith("_") and not name.startswith("_") and bool(node.args)


# ------------------------------------------------------------------ decomposition tables
def apply_table(graph, table):
    """Replace each call of a function in ``table`` by the graph of its replacement, traced on
    the call's arguments (so the replacement's own calls land in the graph)."""
    for node in list(graph.nodes):
        if node.op == "call_function" and node.target in table:
            with _same_stack(graph, node):
                _inline(graph, node, table[node.target])


class _same_stack:
    """The nodes a rewrite of ``node`` adds are made in its module calls (NOTE [Module stacks])."""

    def __init__(self, graph, node):
        self.graph, self.stack = graph, node.meta.get("nn_module_stack")

    def __enter__(self):
        self.before = set(self.graph.nodes)

    def __exit__(self, *exc):
        for n in self.graph.nodes:
            if n not in self.before:
                n.meta.pop("nn_module_stack", None)
                if self.stack:
                    n.meta["nn_module_stack"] = dict(self.stack)


def _inline(graph, node, fn):
    from . import _trace

    inputs = []
    map_arg((node.args, node.kwargs), lambda n: inputs.append(n) if n not in inputs else None)

    def call(*values):
        env = dict(zip(inputs, values))
        args, kwargs = map_arg((node.args, node.kwargs), lambda n: env[n])
        return fn(*args, **kwargs)

    names = [f"a{i}" for i in range(len(inputs))]
    call.__signature__ = inspect.Signature([inspect.Parameter(n, inspect.Parameter.POSITIONAL_OR_KEYWORD)
                                            for n in names])
    tracer = _trace._ExportTracer({n: i.meta.get("val") for n, i in zip(names, inputs)})
    sub = tracer.trace(call)
    if any(n.op == "get_attr" for n in sub.nodes):
        raise NotImplementedError(f"run_decompositions: the replacement of {_name_of(node)} makes a tensor "
                                  "constant, which a decomposition cannot add to the program; build it "
                                  "with a factory function (lucid.full, lucid.tensor) instead")
    _trace.lower_methods(sub)
    placeholders = [n for n in sub.nodes if n.op == "placeholder"]
    with graph.inserting_before(node):
        out = graph.graph_copy(sub, dict(zip(placeholders, inputs)))
    _replace(graph, node, out)


def _replace(graph, node, out):
    if hasattr(out, "op"):
        node.replace_all_uses_with(out)
    else:  # a structure: the uses must be ``node[i]``
        for user in list(node.users):
            if not (user.target is operator.getitem and user.args[0] is node):
                raise NotImplementedError(f"run_decompositions: the replacement of {node.name} returns a "
                                          f"{type(out).__name__}, which {user.name} uses whole")
            user.replace_all_uses_with(out[user.args[1]])
            graph.erase_node(user)
    graph.erase_node(node)


# ------------------------------------------------------------------ functionalization
def functionalize(graph, signature):
    """Rewrite the in-place updates of the graph's inputs (NOTE [Functionalized state updates]);
    returns the new signature."""
    spec_of = {s.arg.name: s for s in signature.input_specs if s.kind in _MUTATION_KIND}
    placeholders = {n.target: n for n in graph.nodes if n.op == "placeholder"}
    owner = {placeholders[name]: placeholders[name] for name in spec_of}  # value node -> the input it is
    current, views = {}, set()
    for node in list(graph.nodes):
        if node.op not in ("call_function", "output"):
            continue
        node.args, node.kwargs = map_arg((node.args, node.kwargs), lambda n: current.get(owner.get(n), n))
        if node.op == "output":
            break
        first = node.args[0] if node.args else None
        if _is_inplace(node) and first in owner:
            with _same_stack(graph, node):
                new = _out_of_place(graph, node, first)
            current[owner[first]] = new
            owner[new] = owner[first]
            _replace(graph, node, new)
        elif _is_inplace(node) and first in views:
            raise NotImplementedError(f"run_decompositions: {node.name} updates a view of an input of the program "
                                      "in place; update the whole tensor (or an out-of-place copy) instead")
        elif node.target is _batch_norm() and _training(node):
            with _same_stack(graph, node):
                _functional_batch_norm(graph, node, owner, current)
        elif first in owner or first in views:
            if _name_of(node) in _VIEWS:
                views.add(node)
    order = [placeholders[name] for name in spec_of if placeholders[name] in current]
    out = next(n for n in graph.nodes if n.op == "output")
    user = out.args[0]
    signature = renamed_outputs(signature, user)
    if not order:
        return signature
    out.args = ((*[current[p] for p in order], user),)
    mutations = [OutputSpec(_MUTATION_KIND[spec_of[p.name].kind], TensorArgument(current[p].name),
                            spec_of[p.name].target if spec_of[p.name].kind != InputKind.USER_INPUT else p.name)
                 for p in order]
    return ExportGraphSignature(list(signature.input_specs), mutations + list(signature.output_specs))


def renamed_outputs(signature, user):
    """The signature with its user outputs named after the values ``user`` (the graph's
    output, rewritten by a pass) now holds."""
    from .exported_program import _leaves

    leaves = _leaves(user)
    specs = [s for s in signature.output_specs if s.kind == OutputKind.USER_OUTPUT]
    for spec, leaf in zip(specs, leaves):
        if isinstance(spec.arg, TensorArgument) and hasattr(leaf, "op"):
            spec.arg = TensorArgument(leaf.name)
    return signature


def _call(graph, fn, args, kwargs=None, method=None):
    from ._trace import _tensor_cls

    node = graph.call_function(fn, tuple(args), dict(kwargs or {}))
    if method is not None:
        node.meta["tensor_method"] = method
    val = lambda n: n.meta.get("val")  # noqa: E731
    a, k = map_arg((node.args, node.kwargs), val)
    node.meta["val"] = fn(*a, **k)
    if isinstance(node.meta["val"], _tensor_cls()):
        node.meta["val"] = node.meta["val"].detach()
    return node


def _out_of_place(graph, node, target):
    """The new value of ``target`` that the in-place ``node`` would leave in it."""
    import lucid

    name, (_, *rest), kwargs = _name_of(node), node.args, node.kwargs
    tval = target.meta["val"]
    T = lucid.Tensor
    with graph.inserting_before(node):
        if name == "copy_":
            new = _call(graph, lucid.broadcast_to, (rest[0], tuple(tval.shape)))
        elif name == "fill_":
            new = _call(graph, lucid.full_like, (target, rest[0]))
        elif name == "zero_":
            new = _call(graph, lucid.zeros_like, (target,))
        else:
            fn = getattr(T, name[:-1], None)
            if not callable(fn):
                raise NotImplementedError(f"run_decompositions: the in-place {name} on {target.name} has no "
                                          "out-of-place form to functionalize it with")
            new = _call(graph, fn, (target, *rest), kwargs, method=name[:-1])
        if new.meta["val"].dtype != tval.dtype:
            new = _call(graph, T.to, (new, tval.dtype), method="to")
    return new


def _batch_norm():
    from ..nn import functional as F

    return F.batch_norm


def _training(node):
    params = ("input", "running_mean", "running_var", "weight", "bias", "training", "momentum", "eps")
    bound = dict(zip(params, node.args), **node.kwargs)
    return bool(bound.get("training", False)) and (bound.get("running_mean") is not None
                                                  or bound.get("running_var") is not None)


def _functional_batch_norm(graph, node, owner, current):
    """``batch_norm`` in training mode with its running statistics written out (see
    ``F.batch_norm``'s ``_update_running``: batch mean and unbiased variance, detached)."""
    import lucid

    params = ("input", "running_mean", "running_var", "weight", "bias", "training", "momentum", "eps")
    b = {"weight": None, "bias": None, "momentum": 0.1, "eps": 1e-5, **dict(zip(params, node.args)), **node.kwargs}
    x, T = b["input"], lucid.Tensor
    axes = (0,) + tuple(range(2, x.meta["val"].ndim))
    m = b["momentum"]
    with graph.inserting_before(node):
        out = _call(graph, _batch_norm(), (x, None, None, b["weight"], b["bias"], True, m, b["eps"]))
        xd = _call(graph, T.detach, (x,), method="detach")
        mean = _call(graph, lucid.mean, (xd, axes), {"keepdim": True})
        xc = _call(graph, operator.sub, (xd, mean))
        var = _call(graph, lucid.mean, (_call(graph, operator.mul, (xc, xc)), axes))
        count = _call(graph, operator.floordiv, (_call(graph, T.numel, (x,), method="numel"),
                                                 _call(graph, T.size, (x, 1), method="size")))
        var = _call(graph, operator.mul, (var, _call(graph, operator.truediv,
                                                     (count, _call(graph, operator.sub, (count, 1))))))
        batch = {"running_mean": _call(graph, T.reshape, (mean, (-1,)), method="reshape"), "running_var": var}
        for key in ("running_mean", "running_var"):
            stat = b[key]
            if stat is None:
                continue
            if stat not in owner:
                raise NotImplementedError(f"run_decompositions: {node.name} updates {stat.name}, which is not an "
                                          "input of the program, in place")
            new = _call(graph, operator.add, (_call(graph, operator.mul, (stat, 1 - m)),
                                              _call(graph, operator.mul, (batch[key], m))))
            if new.meta["val"].dtype != stat.meta["val"].dtype:
                new = _call(graph, T.to, (new, stat.meta["val"].dtype), method="to")
            current[owner[stat]] = new
            owner[new] = owner[stat]
    _replace(graph, node, out)
