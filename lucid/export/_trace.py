"""Capturing a Module as an exported graph: ``lucid.fx`` tracing with example values.

NOTE [Export tracing]
torch.export (non-strict) runs ``forward`` on fake tensors with symbolic sizes. Lucid traces
with ``lucid.fx`` instead, with two changes (``_ExportTracer``):
- every submodule is traced through (no ``call_module`` leaves), so the graph holds only
  ``placeholder``/``call_function``/``output`` nodes: calls of Lucid's public functions,
  ``operator`` functions, ``getattr`` and Tensor methods (``call_method`` nodes are lowered
  to ``call_function`` on ``Tensor.<name>``);
- every node also gets its value on the example inputs (``node.meta["val"]``), so Python
  code that needs a concrete answer gets one: ``bool``, ``len``, iteration and ``int`` of a
  value computed from shapes (a layer's ``if input.ndim not in ...`` check) are answered
  from the example and the branch taken is baked into the graph; the same on a value
  computed from tensor *data* raises (torch's "data-dependent" error).
Shape reads that are only passed on (``x.view(x.shape[0], -1)``) stay ``getattr``/getitem
nodes, so the graph computes them for each call. Whether a dynamic dimension was baked in
by a concrete answer is found by tracing again with that dimension's size changed: a
different graph or different answers mean the model specialised on it (``Dim.AUTO`` then
makes it static; a named ``Dim`` or ``Dim.DYNAMIC`` raises, as torch's constraint
violations do). This is a test on one other size, not a proof: a branch like
``if x.shape[0] > 100`` is only seen if one of the two sizes crosses it.

NOTE [Exported graphs are not functionalized]
torch 2.13's ``export`` keeps in-place ops in the graph (``add_`` on the buffer's placeholder;
only ``run_decompositions`` functionalizes them into BUFFER_MUTATION outputs), and so does
Lucid: ``ep.module()`` binds the placeholders to its own buffers, which are the model's
(as in torch), so the update lands where eager would put it. Exporting itself updates
nothing: the example run reads and writes copies of the state (``_state_copy``) and of the
inputs, and the check against eager puts the model back. ``run_decompositions`` makes the
updates functional, as torch's does (NOTE [Functionalized state updates] in ``_decomp.py``). State updated behind the tracer's back
(``BatchNorm``'s ``num_batches_tracked``, written through ``._data``) cannot be captured:
export such a model in ``eval()`` mode.
"""
from __future__ import annotations

import inspect
import math

from ..fx.node import map_aggregate, map_arg
from ..fx.proxy import TraceError
from ..fx.tracer import Tracer

_META_ATTRS = frozenset({"shape", "ndim", "dtype", "device", "is_cuda", "requires_grad", "layout", "is_leaf",
                         "is_sparse", "is_quantized", "is_meta"})
_META_METHODS = frozenset({"size", "dim", "numel", "ndimension", "nelement", "is_floating_point", "is_complex",
                           "get_device", "element_size", "is_contiguous"})


def _tensor_cls():
    import lucid

    return lucid.Tensor


def _resolve_attr(root, path):
    """``root.<path>`` read through the Module dicts (``Module.__getattr__`` is patched while tracing)."""
    obj = root
    for atom in path.split("."):
        d = obj.__dict__
        for table in (d, d.get("_parameters", {}), d.get("_buffers", {}), d.get("_modules", {})):
            if atom in table:
                obj = table[atom]
                break
        else:
            raise AttributeError(f"export: {path!r} is not an attribute of the module")
    return obj


class _ExportTracer(Tracer):
    """A Tracer that traces through every submodule and knows each node's example value."""

    def __init__(self, examples, trees=None):
        super().__init__()
        self.examples = examples  # input leaf name -> example value (NOTE [Container inputs])
        self.trees = trees or {}
        self.preserve, self.calls = frozenset(), {}  # preserve_module_call_signature: path -> node names
        self.answers = []  # concrete answers given to Python (bool, len, int), in order
        self._patched_classes = set()
        self._state_copies = {}  # get_attr target -> the copy the example run reads and writes
        self._stack, self._call_counts = [], {}  # NOTE [Module stacks]


    def is_leaf_module(self, m, module_qualified_name):
        return False

    def call_module(self, m, forward, args, kwargs):
        if self._patcher is not None:
            self._patch_class_functions(type(m))
        path = self.path_of_module(m)
        # NOTE [Module stacks]: each node records the module calls it was made in, outermost
        # first, as torch's ``nn_module_stack`` (``{key: (path, class)}``; the k-th call of a
        # module after the first is keyed ``path@k``); ``unflatten`` rebuilds the hierarchy from it.
        n = self._call_counts[path] = self._call_counts.get(path, -1) + 1
        self._stack.append((path if n == 0 else f"{path}@{n}", path, f"{type(m).__module__}.{type(m).__qualname__}"))
        try:
            out = super().call_module(m, forward, args, kwargs)
        finally:
            self._stack.pop()
        if path in self.preserve:  # what ``module_call_graph`` says the call took and gave
            from ..utils._pytree import tree_structure

            self.calls.setdefault(path, (_node_names((args, kwargs)), _node_names(out),
                                         tree_structure((tuple(args), dict(kwargs))), tree_structure(out)))
        return out

    def _patch_class_functions(self, cls):
        """Layers that keep their functional as a class attribute (``_fn = staticmethod(F.max_pool2d)``)
        reach it without the patched names: patch it there too, for this trace."""
        for klass in cls.__mro__:
            if klass in self._patched_classes or klass is object:
                continue
            self._patched_classes.add(klass)
            for name, v in list(vars(klass).items()):
                fn = v.__func__ if isinstance(v, staticmethod) else None
                rec = self._patcher.recorder_of(fn) if fn is not None else None
                if rec is not None:
                    self._patcher.set_attr(klass, name, staticmethod(rec))

    def create_node(self, kind, target, args, kwargs, name=None, type_expr=None):
        node = super().create_node(kind, target, args, kwargs, name, type_expr)
        if self._stack:
            node.meta["nn_module_stack"] = {key: (path, cls) for key, path, cls in self._stack}
        if kind != "output":
            node.meta["val"] = self._value(node)
        return node

    def _value(self, node):
        if node.op == "placeholder":  # a copy: the forward may update an input in place (not the caller's)
            value = self.examples[node.target]
            if isinstance(value, _tensor_cls()):
                value = value.detach().clone().requires_grad_(value.requires_grad)
            return value
        if node.op == "get_attr":
            return self._state_copy(node.target)
        val = lambda n: n.meta["val"]  # noqa: E731
        args, kwargs = map_arg(node.args, val), map_arg(node.kwargs, val)
        if node.op == "call_method":
            return getattr(args[0], node.target)(*args[1:], **kwargs)
        if node.op == "call_function":
            return node.target(*args, **kwargs)
        raise RuntimeError(f"export: unexpected {node.op} node {node.name} while tracing")

    def _state_copy(self, target):
        # The example run executes the forward's in-place updates (``buf.add_``, batch_norm's
        # running statistics): on copies, so exporting leaves the model as it was, as torch's
        # fake tensors do. One copy per target, so a second read sees the first one's update.
        if target not in self._state_copies:
            value = _resolve_attr(self.root, target)
            if isinstance(value, _tensor_cls()):
                copy = value.detach().clone()
                value = copy.requires_grad_() if value.requires_grad else copy
            self._state_copies[target] = value
        return self._state_copies[target]

    def _root_arg(self, p, concrete_args):
        from ._inputs import build

        return build(self.trees.get(p.name, {"leaf": p.name}), self._leaf_arg)

    def _leaf_arg(self, name):
        proxy = self.create_proxy("placeholder", name, (), {})
        value = self.examples[name]
        # A non-tensor input is specialised to its example (guarded at the entry): the code
        # sees the plain value, as torch.export's non-strict mode gives it Python constants.
        return proxy if isinstance(value, _tensor_cls()) else value

    # ------------------------------------------------------------ concrete answers
    def _concrete(self, obj, what):
        node = obj.node
        if _data_dependent(node, {}):
            from ._draft import FailureType, record

            message = (f"export: Could not guard on data-dependent expression ({what} of {node.name}, computed "
                       "from tensor values): Python control flow on tensor data cannot be exported; use "
                       "lucid.where or compute the branch condition outside the model")
            if not record(FailureType.DATA_DEPENDENT_ERROR, message, expr=f"{what}({node.name})"):
                raise RuntimeError(message)
            # a draft export answers from the example and checks the answer at run time (NOTE [Draft export])
            from ._draft import assert_scalar

            val = node.meta["val"]
            if what in ("bool", "int"):
                expected = bool(val) if what == "bool" else int(val.__index__())
                self.create_node("call_function", assert_scalar, (node, expected, f"{what}({node.name})"), {})
        return node.meta["val"]

    def to_bool(self, obj):
        answer = bool(self._concrete(obj, "bool"))
        self.answers.append(("bool", answer))
        return answer

    def len(self, obj):
        val = obj.node.meta.get("val")  # a tensor's length is its shape[0], not data
        answer = len(val) if isinstance(val, _tensor_cls()) else len(self._concrete(obj, "len"))
        self.answers.append(("len", answer))
        return answer

    def index(self, obj):
        answer = int(self._concrete(obj, "int").__index__())
        self.answers.append(("int", answer))
        return answer

    def iter(self, obj):
        n = self.len(obj)
        return iter([obj[i] for i in range(n)])


def _node_names(value):
    from ..fx.proxy import Proxy

    names = []
    map_aggregate(value, lambda v: names.append(v.node.name) if isinstance(v, Proxy) else None)
    return names


def _data_dependent(node, memo):
    """Whether ``node``'s value depends on tensor data, not only on shapes and dtypes."""
    if node in memo:
        return memo[node]
    T = _tensor_cls()
    if node.op == "call_function" and node.target is getattr and len(node.args) > 1 and node.args[1] in _META_ATTRS:
        result = False
    elif node.op == "call_method" and node.target in _META_METHODS:
        result = False
    elif node.op in ("placeholder", "get_attr"):
        result = isinstance(node.meta.get("val"), T)
    elif isinstance(node.meta.get("val"), T):
        result = True
    else:
        result = any(_data_dependent(n, memo) for n in node.all_input_nodes)
    memo[node] = result
    return result


def bind_examples(fn, args, kwargs):
    """The forward's parameter names (without self) and ``name -> example value``."""
    sig = inspect.signature(fn)
    params = list(sig.parameters.values())[1:]
    for p in params:
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            raise TraceError(f"export: *{p.name} / **{p.name} parameters of forward are not supported; "
                             "give the forward named parameters")
    try:
        bound = inspect.Signature(params).bind(*args, **kwargs)
    except TypeError as e:
        raise TypeError(f"export: the example inputs do not match forward's signature ({e})") from None
    given = set(bound.arguments)
    bound.apply_defaults()
    return [p.name for p in params], dict(bound.arguments), set(bound.arguments) - given


def trace(mod, examples, trees=None, preserve=(), calls=None):
    """Trace ``mod`` on the example values (by input leaf, NOTE [Container inputs]); returns
    ``(graph, constants, answers)``. ``calls`` receives the node names going in and out of
    the submodules named in ``preserve``."""
    tracer = _ExportTracer(examples, trees)
    tracer.preserve = frozenset(preserve)
    if calls is not None:
        tracer.calls = calls
    before = set(mod.__dict__)
    try:
        graph = tracer.trace(mod)
    except Exception as e:
        if hasattr(e, "add_note"):
            e.add_note(f"(while lucid.export traced {type(mod).__name__}.forward; see NOTE [Export tracing] and "
                       "NOTE [Exported graphs are not functionalized] in lucid/export/_trace.py)")
        raise
    finally:
        constants = {k: mod.__dict__.pop(k) for k in set(mod.__dict__) - before
                     if k.startswith("_tensor_constant")}
    graph.eliminate_dead_code()
    return graph, constants, tracer.answers


def graph_key(graph, answers):
    """What two traces must share for one to stand for the other (NOTE [Export tracing])."""
    return [n.format_node() for n in graph.nodes], list(answers)


def lower_methods(graph):
    """``call_method`` nodes become ``call_function`` nodes on ``Tensor.<name>``."""
    T = _tensor_cls()
    for node in list(graph.nodes):
        if node.op != "call_method":
            continue
        self_val = node.args[0].meta.get("val") if hasattr(node.args[0], "meta") else node.args[0]
        fn = getattr(T, node.target, None)
        if not isinstance(self_val, T) or not callable(fn) or node.target.startswith("_"):
            raise NotImplementedError(f"export: method {node.target!r} called on a "
                                      f"{type(self_val).__name__} cannot be exported")
        with graph.inserting_before(node):
            new = graph.call_function(fn, node.args, node.kwargs)
        new.meta = dict(node.meta, tensor_method=node.target)
        node.replace_all_uses_with(new)
        graph.erase_node(node)
        new.name = node.name  # the erased node's name is free: keep the traced spelling


def same_values(a, b):
    """Whether two output structures hold equal values (tensors bit for bit, NaN equal to NaN)."""
    T = _tensor_cls()
    flat_a, flat_b = [], []
    map_aggregate(a, flat_a.append)
    map_aggregate(b, flat_b.append)
    if len(flat_a) != len(flat_b):
        return False
    for x, y in zip(flat_a, flat_b):
        if isinstance(x, T) != isinstance(y, T):
            return False
        if isinstance(x, T):
            if tuple(x.shape) != tuple(y.shape) or x.dtype != y.dtype:
                return False
            if not bool(((x == y) | ((x != x) & (y != y))).all()):
                return False
        elif x != y and not (isinstance(x, float) and math.isnan(x) and math.isnan(y)):
            return False
    return True
