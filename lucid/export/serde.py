"""``lucid.export.save`` / ``load``: an ExportedProgram as one file, with no pickle and no code.

NOTE [Exported program format]
The file is one ``lucid.save`` container (a safetensors file, written atomically: NOTE
[Safe save] in ``lucid/_atomic_file.py``) holding a dict:
``{"format": "lucid.export", "version": 1, "program": <JSON text>, "state_dict": {...},
"constants": {...}, "example_inputs": [args, kwargs] or None}``.
The JSON program has the graph (``nodes``: ``op``, ``name``, ``target``, ``args``,
``kwargs``), the signature, the input guards, the range constraints and the module paths.
A ``call_function`` target is a public dotted name, resolved on load ONLY against an
allowlist (``_resolve_target``): functions in ``lucid``, ``lucid.nn.functional``,
``lucid.linalg``, ``lucid.special``, ``lucid.fft`` (minus those with effects beyond their
result: I/O, seeds, global settings), ``Tensor.<method>`` (public, minus hooks and
``backward``), ``operator``'s arithmetic, comparison and ``getitem``, ``math``'s functions and
``getattr`` (only of public attribute names), and ``export.assert_scalar`` (a draft export's
runtime check, NOTE [Draft export]). Arguments are JSON with tagged values:
``{"node": name}``, ``{"tuple": [...]}``, ``{"list": [...]}``, ``{"dict": [[k, v], ...]}``,
``{"slice": [a, b, c]}``, ``{"ellipsis": true}``, ``{"dtype": "float32"}``,
``{"device": "cpu"}``, ``{"float": "inf"}``, ``{"complex": [re, im]}``. Loading checks the
whole program (every target, every argument, every name) before it builds anything, so a
tampered file is refused before any of its nodes could run.
"""
from __future__ import annotations

import json
import math
import operator
import os

__all__ = ["save", "load"]

_FORMAT, _VERSION = "lucid.export", 1
_NAMESPACES = ("lucid", "lucid.nn.functional", "lucid.linalg", "lucid.special", "lucid.fft")
_OPERATORS = frozenset({"add", "sub", "mul", "truediv", "floordiv", "mod", "pow", "matmul", "neg", "pos", "abs",
                        "invert", "and_", "or_", "xor", "lshift", "rshift", "eq", "ne", "lt", "le", "gt", "ge",
                        "getitem", "not_", "truth"})
# Public functions whose effect is not (only) their result: never resolved from a file.
# (and those that call functions they are given: a graph from a file never passes functions)
_DENIED = frozenset({"load", "save", "manual_seed", "seed", "initial_seed", "from_file", "frombuffer", "from_dlpack",
                     "to_dlpack", "from_numpy", "compile", "use_deterministic_algorithms", "cond", "while_loop",
                     "vmap", "map"})
_DENIED_PREFIXES = ("set_", "get_", "init_", "register_")
_DENIED_METHODS = frozenset({"backward", "register_hook", "register_post_accumulate_grad_hook", "retain_grad",
                             "share_memory_", "pin_memory", "storage", "untyped_storage", "data_ptr", "apply_",
                             "map_", "map2_"})


def _public_property(name):
    """Whether ``getattr(tensor, name)`` reads a public Tensor property (``shape``, ``T``): a
    getattr from a file may read data, never fetch a bound method to pass on."""
    import inspect

    import lucid

    return isinstance(name, str) and name.isidentifier() and not name.startswith("_") and \
        isinstance(inspect.getattr_static(lucid.Tensor, name, None), property)


class _LoadError(ValueError):
    pass


# ------------------------------------------------------------------ targets
def _target_name(node):
    """The public name a ``call_function`` target is saved under, or raise."""
    import lucid
    from ..fx.graph import _public_lucid_name

    from ._draft import assert_scalar

    fn = node.target
    if fn is assert_scalar:
        return "export.assert_scalar"
    method = node.meta.get("tensor_method")
    if method is not None and getattr(lucid.Tensor, method, None) is fn:
        return f"Tensor.{method}"
    public = _public_lucid_name(fn)
    if public is not None:
        return public
    name = getattr(fn, "__name__", None)
    if fn is getattr:
        if len(node.args) == 2 and _public_property(node.args[1]):
            return "getattr"
        raise ValueError(f"export.save: node {node.name!r} reads attribute {node.args[1:]!r}, which is not a public "
                         "Tensor property: it cannot be saved")
    if name in _OPERATORS and getattr(operator, name) is fn:
        return f"operator.{name}"
    if isinstance(name, str) and getattr(math, name, None) is fn:
        return f"math.{name}"
    if isinstance(name, str) and getattr(lucid.Tensor, name, None) is fn:
        return f"Tensor.{name}"
    raise ValueError(f"export.save: node {node.name!r} calls {getattr(fn, '__qualname__', fn)!r}, which is not a "
                     "public Lucid, operator or math function: it cannot be saved (see NOTE [Exported program format])")


def _resolve_target(name):
    """The function ``name`` stands for, if the allowlist admits it; else raise naming it."""
    import importlib
    import types

    import lucid

    if not isinstance(name, str):
        raise _LoadError(f"a call_function target must be a string, got {type(name).__name__}")
    refuse = _LoadError(f"target {name!r} is not on the allowlist of exportable functions (public functions of "
                        f"{', '.join(_NAMESPACES)}, Tensor methods, operator arithmetic and getitem, math, getattr); "
                        "the file was not written by lucid.export.save or has been tampered with")
    if name == "getattr":
        return getattr
    if name == "export.assert_scalar":
        from ._draft import assert_scalar

        return assert_scalar
    ns, _, attr = name.rpartition(".")
    if not attr.isidentifier() or attr.startswith("_"):
        raise refuse
    if ns == "operator" and attr in _OPERATORS:
        return getattr(operator, attr)
    if ns == "math" and isinstance(getattr(math, attr, None), types.BuiltinFunctionType):
        return getattr(math, attr)
    if ns == "Tensor":
        fn = lucid.Tensor.__dict__.get(attr, getattr(lucid.Tensor, attr, None))
        if attr in _DENIED_METHODS or attr.startswith(_DENIED_PREFIXES) or not callable(fn) or isinstance(fn, type):
            raise refuse
        return getattr(lucid.Tensor, attr)
    if ns in _NAMESPACES and attr not in _DENIED and not attr.startswith(_DENIED_PREFIXES):
        fn = importlib.import_module(ns).__dict__.get(attr)
        if callable(fn) and not isinstance(fn, (type, types.ModuleType)):
            return fn
    raise refuse


# ------------------------------------------------------------------ arguments
def _encode(a, where):
    import lucid
    from ..fx.node import Node

    if isinstance(a, Node):
        return {"node": a.name}
    if a is None or isinstance(a, (bool, str)):
        return a
    if isinstance(a, int):
        return a
    if isinstance(a, float):
        return a if math.isfinite(a) else {"float": repr(a)}
    if isinstance(a, complex):
        return {"complex": [_encode(a.real, where), _encode(a.imag, where)]}
    if isinstance(a, tuple) and type(a) is tuple:
        return {"tuple": [_encode(v, where) for v in a]}
    if isinstance(a, list):
        return {"list": [_encode(v, where) for v in a]}
    if isinstance(a, dict) and all(isinstance(k, str) for k in a):
        return {"dict": [[k, _encode(v, where)] for k, v in a.items()]}
    if isinstance(a, slice):
        return {"slice": [_encode(a.start, where), _encode(a.stop, where), _encode(a.step, where)]}
    if a is Ellipsis:
        return {"ellipsis": True}
    if isinstance(a, lucid.dtype):
        return {"dtype": str(a).replace("lucid.", "")}
    if isinstance(a, lucid.device):
        return {"device": str(a)}
    raise ValueError(f"export.save: {where} holds a {type(a).__name__} ({a!r:.60}), which cannot be saved")


def _decode(a, nodes):
    import lucid

    if a is None or isinstance(a, (bool, str, int, float)):
        return a
    if isinstance(a, dict) and len(a) == 1:
        (tag, v), = a.items()
        if tag == "node" and isinstance(v, str):
            if v not in nodes:
                raise _LoadError(f"an argument refers to {v!r}, which is not an earlier node")
            return nodes[v]
        if tag in ("tuple", "list") and isinstance(v, list):
            items = [_decode(x, nodes) for x in v]
            return tuple(items) if tag == "tuple" else items
        if tag == "dict" and isinstance(v, list) and all(isinstance(kv, list) and len(kv) == 2
                                                          and isinstance(kv[0], str) for kv in v):
            return {k: _decode(x, nodes) for k, x in v}
        if tag == "slice" and isinstance(v, list) and len(v) == 3:
            return slice(*(_decode(x, nodes) for x in v))
        if tag == "ellipsis" and v is True:
            return Ellipsis
        if tag == "float" and v in ("inf", "-inf", "nan"):
            return float(v)
        if tag == "complex" and isinstance(v, list) and len(v) == 2:
            return complex(*(_decode(x, nodes) for x in v))
        if tag == "dtype" and isinstance(v, str) and v.isidentifier() and isinstance(getattr(lucid, v, None), lucid.dtype):
            return getattr(lucid, v)
        if tag == "device" and isinstance(v, str):
            return lucid.device(v)
    raise _LoadError(f"unknown argument encoding {json.dumps(a)[:80]}")


# ------------------------------------------------------------------ save
def _program_json(ep):
    nodes = []
    for n in ep.graph.nodes:
        entry = {"op": n.op, "name": n.name}
        if n.op == "call_function":
            entry["target"] = _target_name(n)
        elif n.op in ("placeholder", "get_attr"):
            entry["target"] = n.target
        elif n.op != "output":
            raise ValueError(f"export.save: node {n.name!r} is a {n.op} node; an exported graph has none")
        entry["args"] = _encode(n.args, f"node {n.name!r}")
        entry["kwargs"] = _encode(n.kwargs, f"node {n.name!r}")
        if n.meta.get("nn_module_stack"):  # NOTE [Module stacks]
            entry["stack"] = [[k, p, c] for k, (p, c) in n.meta["nn_module_stack"].items()]
        nodes.append(entry)
    sig = ep.graph_signature
    program = {
        "nodes": nodes,
        "inputs": [{"kind": s.kind.name, "name": s.arg.name, "target": s.target, "persistent": s.persistent,
                    **({"value": _encode(s.arg.value, "an input")} if hasattr(s.arg, "value") else {})}
                   for s in sig.input_specs],
        "outputs": [{"kind": s.kind.name, "name": s.arg.name, "target": s.target,
                     **({"value": _encode(s.arg.value, "an output")} if hasattr(s.arg, "value") else {})}
                    for s in sig.output_specs],
        "guards": [{"name": g.name, "kind": g.kind, "dtype": g.dtype, "dims": g.dims,
                    "value": _encode(g.value, f"input {g.name!r}"), "optional": g.optional} for g in ep._guards],
        "in_trees": ep._in_trees,
        "range_constraints": [[k, v.lower, None if v.upper == math.inf else v.upper]
                              for k, v in ep.range_constraints.items()],
        "modules": [[e.fqn, e.signature.forward_arg_names if e.signature is not None else None,
                     e.signature is not None] + ([[[a.name for a in e.signature.inputs],
                                                   [a.name for a in e.signature.outputs]],
                                                  [_spec_json(e.signature.in_spec), _spec_json(e.signature.out_spec)]]
                                                 if e.signature is not None else [])
                    for e in ep.module_call_graph],
        "training": bool(ep._training),
        "dialect": ep.dialect,
    }
    return json.dumps(program, allow_nan=False)


def save(ep, f):
    """Write ``ep`` to ``f`` (a path, written atomically, or a binary file object) without pickle.

    See NOTE [Exported program format]. Every ``call_function`` target must be a public
    Lucid, ``operator`` or ``math`` function or a Tensor method (what ``export`` produces).

    Examples
    --------
    >>> import io, lucid
    >>> from lucid import nn
    >>> from lucid.export import export, save, load
    >>> ep = export(nn.Linear(2, 1), (lucid.ones(3, 2),))
    >>> buf = io.BytesIO()
    >>> save(ep, buf)
    >>> _ = buf.seek(0)
    >>> ep2 = load(buf)
    >>> bool((ep2.module()(lucid.ones(3, 2)) == ep.module()(lucid.ones(3, 2))).all())
    True
    """
    import lucid
    from .exported_program import ExportedProgram

    if not isinstance(ep, ExportedProgram):
        raise TypeError(f"export.save: expected an ExportedProgram, got {type(ep).__name__}")
    payload = {"format": _FORMAT, "version": _VERSION, "program": _program_json(ep),
               "state_dict": dict(ep.state_dict), "constants": dict(ep.constants),
               "example_inputs": _savable_examples(ep.example_inputs)}
    lucid.save(payload, f)


def _savable_examples(examples):
    import io

    import lucid

    try:
        lucid.save(examples, io.BytesIO())  # (checks that lucid.save can hold them)
    except TypeError:
        return None
    # A dataclass input would come back only through lucid.load's allowlist (NOTE [Config
    # objects]), not through register_dataclass: such examples are left out, as unsavable ones.
    return None if _holds_config_object(examples) else examples


def _holds_config_object(obj):
    from ..serialization_encode import _config_state

    if isinstance(obj, dict):
        return any(_holds_config_object(v) for v in obj.values())
    if isinstance(obj, (list, tuple)):
        return any(_holds_config_object(v) for v in obj)
    return _config_state(obj) is not None


# ------------------------------------------------------------------ load
def load(f, *, expected_opset_version=None, extra_files=None):
    """Read a program written by :func:`save`; nothing in the file is executed.

    Raises
    ------
    ValueError
        The file is not a valid checkpoint (truncated, garbage), not an exported program, or
        names a function outside the allowlist (the message names it).
    """
    import lucid

    where = os.fspath(f) if isinstance(f, (str, os.PathLike)) else repr(f)
    try:
        payload = lucid.load(f)
    except ValueError as e:
        raise ValueError(f"export.load: {where} is not a saved ExportedProgram: {e}") from None
    if not isinstance(payload, dict) or payload.get("format") != _FORMAT:
        raise ValueError(f"export.load: {where} is a Lucid checkpoint but not a saved ExportedProgram")
    if payload.get("version") != _VERSION:
        raise ValueError(f"export.load: {where} has format version {payload.get('version')!r}; this Lucid "
                         f"reads version {_VERSION}")
    try:
        return _build(payload)
    except _LoadError as e:
        raise ValueError(f"export.load: {where}: {e}") from None
    except (KeyError, TypeError, AttributeError, IndexError) as e:
        raise ValueError(f"export.load: {where}: malformed program ({type(e).__name__}: {e})") from None


def _build(payload):
    import lucid
    from ..fx.graph import Graph
    from .dynamic_shapes import InputGuard, ValueRange
    from .exported_program import ExportedProgram
    from .graph_signature import (ConstantArgument, ExportGraphSignature, InputKind, InputSpec, ModuleCallEntry,
                                  ModuleCallSignature, OutputKind, OutputSpec, TensorArgument)

    try:
        program = json.loads(payload["program"])
    except (TypeError, ValueError) as e:
        raise _LoadError(f"the program is not valid JSON ({e})") from None
    graph = _graph_from(program["nodes"], Graph)
    arg = lambda s: ConstantArgument(s["name"], _decode(s["value"], {})) if "value" in s \
        else TensorArgument(_name(s["name"]))  # noqa: E731
    inputs = [InputSpec(InputKind[s["kind"]], arg(s), s["target"], s["persistent"]) for s in program["inputs"]]
    outputs = [OutputSpec(OutputKind[s["kind"]], arg(s), s["target"]) for s in program["outputs"]]
    guards = [InputGuard(_name(g["name"]), g["kind"], g["dtype"], _dims(g["dims"]), _decode(g["value"], {}),
                         g.get("optional") is True) for g in program["guards"]]
    ranges = {_name(k): ValueRange(int(lo), math.inf if hi is None else int(hi))
              for k, lo, hi in program["range_constraints"]}
    for g in guards:
        if g.kind not in ("tensor", "constant") or g.kind == "tensor" and not (
                isinstance(g.dtype, str) and isinstance(g.dims, list)
                and all(isinstance(d, int) or (d if isinstance(d, str) else d[0]) in ranges for d in g.dims)):
            raise _LoadError(f"bad guard for input {g.name!r}")
    trees = _trees(program.get("in_trees"), [g.name for g in guards])
    modules = [_module_entry(*m) for m in program["modules"]]
    examples = payload.get("example_inputs")
    if isinstance(examples, list) and len(examples) == 2:
        examples = (tuple(examples[0]), examples[1])
    ep = ExportedProgram(lucid.nn.Module(), graph, ExportGraphSignature(inputs, outputs), payload["state_dict"],
                         ranges, modules, examples, payload["constants"], guards=guards,
                         training=bool(program.get("training", True)), in_trees=trees,
                         dialect=_dialect(program.get("dialect", "TRAINING")))
    ep.validate()
    return ep


def _dialect(d):
    if d not in ("TRAINING", "ATEN"):
        raise _LoadError(f"unknown dialect {d!r}")
    return d


def _name(s):
    if not isinstance(s, str) or not s.isidentifier():
        raise _LoadError(f"{s!r} is not a valid name")
    return s


def _module_entry(fqn, names, has, io=((), ()), specs=(None, None)):
    from .graph_signature import ModuleCallEntry, ModuleCallSignature, TensorArgument

    if not isinstance(fqn, str) or not (isinstance(io, (list, tuple)) and len(io) == 2) \
            or not (isinstance(specs, (list, tuple)) and len(specs) == 2):
        raise _LoadError("bad module call graph")
    ins, outs = ([TensorArgument(_name(n)) for n in part] for part in io)
    in_spec, out_spec = (_spec_from(s) for s in specs)
    return ModuleCallEntry(fqn, ModuleCallSignature(ins, outs, in_spec, out_spec, names) if has else None)


_SPEC_TYPES = {"tuple": tuple, "list": list, "dict": dict}


def _spec_json(spec):
    """A TreeSpec of tuples, lists, dicts (str or int keys) and leaves as JSON data; None for
    any other structure (a dataclass, a namedtuple: its class is not written to the file)."""
    if spec is None:
        return None
    if spec.is_leaf():
        return "*"
    kind = next((k for k, t in _SPEC_TYPES.items() if spec.type is t), None)
    children = [_spec_json(c) for c in spec.children_specs]
    ctx = spec.context
    if kind is None or None in children or (kind == "dict" and not all(isinstance(k, (str, int)) for k in ctx)):
        return None
    return {kind: children, **({"keys": list(ctx)} if kind == "dict" else {})}


def _spec_from(data):
    from ..utils._pytree import LeafSpec, TreeSpec

    if data is None:
        return None
    if data == "*":
        return LeafSpec()
    if not isinstance(data, dict) or not data:
        raise _LoadError("bad pytree spec")
    kind = next(iter(data))
    children = data[kind]
    if kind not in _SPEC_TYPES or not isinstance(children, list) or set(data) - {kind, "keys"}:
        raise _LoadError("bad pytree spec")
    keys = data.get("keys") if kind == "dict" else None
    if kind == "dict" and not (isinstance(keys, list) and len(keys) == len(children)
                               and all(type(k) in (str, int) for k in keys)):
        raise _LoadError("bad pytree spec")
    return TreeSpec(_SPEC_TYPES[kind], keys, [_spec_from(c) for c in children])


def _trees(trees, leaf_names):
    """The input trees (NOTE [Container inputs]), checked: well formed, leaves named as the guards."""
    from ._inputs import _DATACLASSES, leaves_of

    if trees is None:
        return None

    def ok(t):
        if not isinstance(t, dict) or len(t) != 1:
            return False
        (kind, v), = t.items()
        if kind == "leaf":
            return isinstance(v, str) and v.isidentifier()
        if kind == "dataclass":  # only a class this process registered is ever built
            if not (isinstance(v, list) and len(v) == 2 and isinstance(v[0], str) and v[0] in _DATACLASSES):
                raise _LoadError(f"the program takes a dataclass {v[0] if isinstance(v, list) and v else v!r} "
                                 "that lucid.export.register_dataclass has not registered in this process")
            kind, v = "dict", v[1]
        if kind == "dict":
            return isinstance(v, list) and all(isinstance(e, list) and len(e) == 2 and isinstance(e[0], str)
                                               and ok(e[1]) for e in v)
        return kind in ("tuple", "list") and isinstance(v, list) and all(ok(e) for e in v)

    if not isinstance(trees, list) or not all(isinstance(e, list) and len(e) == 2 and isinstance(e[0], str)
                                              and e[0].isidentifier() and ok(e[1]) for e in trees) \
            or [n for _, t in trees for n in leaves_of(t)] != leaf_names:
        raise _LoadError("bad input trees")
    return trees


def _symbol_dim(d):
    return isinstance(d, str) and d.isidentifier()


def _int(v):
    return type(v) is int


def _dims(dims):
    if dims is None:
        return None
    if not isinstance(dims, list) or not all(isinstance(d, int) or _symbol_dim(d) or isinstance(d, list) and len(d) == 3
                                             and _symbol_dim(d[0]) and _int(d[1]) and d[1] > 0 and _int(d[2])
                                             for d in dims):
        raise _LoadError(f"bad guard dims {dims!r}")
    return dims


def _graph_from(entries, Graph):
    """Check every node entry, then build the graph (NOTE [Exported program format])."""
    checked, nodes = [], {}
    for e in entries:
        op, name = e["op"], _name(e["name"])
        if op == "call_function":
            target = _resolve_target(e.get("target"))
        elif op in ("placeholder", "get_attr"):
            target = e["target"]
            if not isinstance(target, str) or not all(p.isidentifier() for p in target.split(".")):
                raise _LoadError(f"bad {op} target {target!r}")
        elif op == "output":
            target = "output"
        else:
            raise _LoadError(f"node {name!r} has opcode {op!r}; an exported graph has only placeholder, "
                             "call_function, get_attr and output nodes")
        if name in nodes:
            raise _LoadError(f"node name {name!r} is used twice")
        args, kwargs = _decode(e["args"], nodes), _decode(e["kwargs"], nodes)
        if not isinstance(args, tuple) or not isinstance(kwargs, dict):
            raise _LoadError(f"node {name!r}: args must be a tuple and kwargs a dict")
        if target is getattr and not (len(args) == 2 and not kwargs and _public_property(args[1])):
            raise _LoadError(f"node {name!r}: getattr is only allowed for a public Tensor property (shape, dtype, T, ...)")
        nodes[name] = None
        checked.append((op, name, target, e["args"], e["kwargs"], _stack(e.get("stack"))))
    graph, built = Graph(), {}
    for op, name, target, args, kwargs, stack in checked:
        n = graph.create_node(op, target, _decode(args, built), _decode(kwargs, built), name=name)
        if n.name != name:
            raise _LoadError(f"node name {name!r} is not a valid graph name")
        if stack:
            n.meta["nn_module_stack"] = stack
        if op == "call_function":
            _note_method(n, target)
        built[name] = n
    return graph


def _stack(entries):
    """A node's module stack (NOTE [Module stacks]), checked: ``[[key, path, class], ...]``."""
    if entries is None:
        return None
    if not isinstance(entries, list) or not all(
            isinstance(e, list) and len(e) == 3 and all(isinstance(v, str) for v in e)
            and all(a.isidentifier() or a.isdigit() for a in e[1].split(".")) for e in entries):
        raise _LoadError("bad module stack")
    return {k: (p, c) for k, p, c in entries}


def _note_method(node, target):
    import lucid

    name = getattr(target, "__name__", None)
    if isinstance(name, str) and getattr(lucid.Tensor, name, None) is target:
        node.meta["tensor_method"] = name
