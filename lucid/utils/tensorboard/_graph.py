"""``add_graph``: a model's graph for TensorBoard's graph plugin, from one real forward pass.

NOTE [Graphs from the tape]
PyTorch traces the model with TorchScript. Lucid has no tracer, so the graph is read off the
autograd tape of one forward pass instead: the inputs are copied, detached and made to require
grad, so that every op that touches them records a ``Node``; ``Node.parents`` are the edges
(another node's output, a leaf tensor — a parameter or an input — or nothing). Each node is put
in the scope of the module that was running when it was created: forward pre-/post-hooks on
every submodule log ``(Node.seq counter, module path)`` marks, and node creation numbers
(``Node.seq``, increasing) fall between them. The hooks are removed, the training flag
restored and no backward is run, so no ``.grad`` changes. What the tape does not see is not in
the graph: ops on values that need no grad (integer indexing, constants) and anything computed
under ``no_grad``.
"""
from __future__ import annotations

import bisect
import inspect
import re

from ..._core.tensor import Tensor
from ...autograd.engine import Node
from . import _records as rec


def _flatten(obj, out):
    """The tensors of a (nested) tuple, list or dict, in order."""
    if isinstance(obj, Tensor):
        out.append(obj)
    elif isinstance(obj, (tuple, list)):
        for o in obj:
            _flatten(o, out)
    elif isinstance(obj, dict):
        for o in obj.values():
            _flatten(o, out)
    return out


def _prepare_inputs(input_to_model):
    """Positional arguments: tensors copied and detached, floating ones requiring grad."""
    if input_to_model is None:
        args = ()
    elif isinstance(input_to_model, (tuple, list)):
        args = tuple(input_to_model)
    else:
        args = (input_to_model,)
    out = []
    for a in args:
        if isinstance(a, Tensor):
            a = a.detach().clone()
            if a.dtype.is_floating_point or a.dtype.is_complex:
                a.requires_grad_(True)
        out.append(a)
    return tuple(out)


def _input_names(model, n):
    try:
        params = [p.name for p in inspect.signature(model.forward).parameters.values()
                  if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    except (TypeError, ValueError):
        params = []
    return [params[i] if i < len(params) else f"input_{i}" for i in range(n)]


def _run_with_scopes(model, args, root):
    """Run ``model(*args)`` with the tape on, returning the output and the scope marks."""
    from ...autograd import engine
    from ..._core.grad_mode import enable_grad

    marks, stack, handles, seen = [(-1, root)], [], [], []

    def pre(path):
        def hook(module, inputs):
            stack.append(path)
            marks.append((next(engine._SEQ), path))
        return hook

    def post(module, inputs, output):
        seen.extend(_flatten(output, []))  # module outputs: their shapes are known for free
        stack.pop()
        marks.append((next(engine._SEQ), stack[-1] if stack else root))

    training = model.training
    try:
        for name, module in model.named_modules():
            path = root + ("/" + name.replace(".", "/") if name else "")
            handles.append(module.register_forward_pre_hook(pre(path)))
            handles.append(module.register_forward_hook(post))
        model.train(False)  # as torch traces: dropout off, batch norm on running stats
        with enable_grad():
            output = model(*args)
    finally:
        model.train(training)
        for h in handles:
            h.remove()
    return output, marks, seen


def _collect_nodes(roots):
    """Every tape node reachable from ``roots``, by creation order (producers first)."""
    seen, todo = {}, [r for r in roots if r is not None]
    while todo:
        node = todo.pop()
        if id(node) in seen:
            continue
        seen[id(node)] = node
        for p in node.parents:
            if p.__class__ is tuple and id(p[0]) not in seen:
                todo.append(p[0])
    return sorted(seen.values(), key=lambda n: n.seq)


def _shape(x):
    shape = getattr(x, "shape", None)
    return None if shape is None else [int(d) for d in shape]


def _known_shapes(nodes, outputs):
    """Output shapes by ``(id(node), index)``, from what the tape saved and the outputs."""
    shapes = {}
    for node in nodes:
        meta = node.out_meta
        if meta:
            for i, m in enumerate(meta):
                shapes[(id(node), i)] = [int(d) for d in m[0]]
        elif node.out is not None and node.nout == 1:
            shapes[(id(node), 0)] = _shape(node.out)
        for p, saved in zip(node.parents, node.saved or ()):
            if p.__class__ is tuple and _shape(saved) is not None:
                shapes.setdefault((id(p[0]), p[1]), _shape(saved))
    for t in outputs:
        if t.grad_fn is not None:
            shapes[(id(t.grad_fn), t.output_nr)] = _shape(t)
    return shapes


_BACKWARD = re.compile(r"Backward\d*$")


def _attr_text(params):
    """Op parameters as torch shows them, ``{ name : value, ... }`` (kept short)."""
    items = ", ".join(f"{k} : {v}" for k, v in (params or {}).items())
    text = "{ " + items + " }" if items else "{}"
    return text if len(text) <= 200 else text[:197] + "..."


class _Names:
    """Unique node names: a second ``Net/relu`` is ``Net/relu_1``."""

    def __init__(self):
        self.used = set()

    def __call__(self, base):
        name, k = base, 0
        while name in self.used:
            k += 1
            name = f"{base}_{k}"
        self.used.add(name)
        return name


def _node_defs(model, args, output, marks, seen, root, verbose):
    outputs = _flatten(output, [])
    nodes = _collect_nodes([t.grad_fn for t in outputs])
    shapes = _known_shapes(nodes, seen + outputs)
    unique, defs, lines = _Names(), [], []
    leaf_names = {}  # id(leaf tensor) -> node name

    def emit(name, op, inputs, shape_list, attr=None):
        attrs = {}
        if attr is not None:
            attrs["attr"] = rec.attr_string(attr)
        if shape_list and all(s is not None for s in shape_list):
            attrs["_output_shapes"] = rec.attr_shapes(shape_list)
        defs.append(rec.node_def(name, op, inputs, attrs))
        lines.append(f"{name} = {op}({', '.join(inputs)}) {shape_list}")

    tensor_args = [a for a in args if isinstance(a, Tensor)]
    for a, n in zip(tensor_args, _input_names(model, len(args))):
        leaf_names[id(a)] = unique("input/" + n)
        emit(leaf_names[id(a)], "IO Node", [], [_shape(a)], "")
    params = {id(p): qual for qual, p in model.named_parameters()}
    seqs = [m[0] for m in marks]
    names = {}

    def source(p, scope):
        if p.__class__ is tuple:
            base = names[id(p[0])]
            return base if p[1] == 0 else f"{base}:{p[1]}"
        if leaf_names.get(id(p)) is None:  # a parameter or another leaf, met the first time
            base = (root + "/" + params[id(p)].replace(".", "/") if id(p) in params
                    else scope + "/tensor")
            leaf_names[id(p)] = unique(base)
            emit(leaf_names[id(p)], "Parameter" if id(p) in params else "Tensor", [],
                 [_shape(p)], "")
        return leaf_names[id(p)]

    for node in nodes:
        scope = marks[bisect.bisect_left(seqs, node.seq) - 1][1]
        # a primitive is named by its primitive ("conv"), a custom Function by its class
        label = node.prim.name if type(node) is Node else _BACKWARD.sub("", node.name())
        inputs = [source(p, scope) for p in node.parents if p is not None]
        names[id(node)] = unique(f"{scope}/{label}")
        op = "lucid::" + label
        emit(names[id(node)], op, inputs,
             [shapes.get((id(node), i)) for i in range(node.nout)],
             _attr_text(getattr(node, "params", None)))
    for i, t in enumerate(outputs):
        if t.grad_fn is not None:
            src = [source((t.grad_fn, t.output_nr), root)]
        else:  # an input returned as is, or a value the tape did not see
            src = [leaf_names[id(t)]] if id(t) in leaf_names else []
        emit(unique(f"output/output.{i}"), "IO Node", src, [_shape(t)], "")
    if verbose:
        print("\n".join(lines))
    return defs


def graph_def(model, input_to_model, verbose, fname="add_graph") -> bytes:
    """The serialized ``GraphDef`` of one forward pass of ``model``
    (see NOTE [Graphs from the tape])."""
    if not callable(model) or not hasattr(model, "named_modules"):
        raise TypeError(f"{fname}: expected a lucid.nn.Module, got {type(model).__name__}")
    root = type(model).__name__
    args = _prepare_inputs(input_to_model)
    output, marks, seen = _run_with_scopes(model, args, root)
    return rec.graph_def(_node_defs(model, args, output, marks, seen, root, verbose))
