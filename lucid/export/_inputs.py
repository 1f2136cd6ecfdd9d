"""Container inputs of an exported program: trees of tuples, lists and dicts over leaves.

NOTE [Container inputs]
torch.export flattens every input with pytree: a forward taking ``xs=(a, [b])`` and
``d={"k": c}`` gets one placeholder per leaf, named by its path (``xs_0``, ``xs_1_0``,
``d_k``), and ``ep.module()`` flattens the call's inputs the same way, refusing another
structure. Lucid does the same: each forward parameter has a *tree*, JSON data
(``{"leaf": name}``, ``{"tuple": [...]}``, ``{"list": [...]}``, ``{"dict": [[key, tree], ...]}``),
so ``save``/``load`` keep it without code. A parameter whose value holds no tensor stays one
constant leaf (guarded by equality); inside a tree every tuple, list and dict is walked and
every other value is a leaf (a tensor, or a constant guarded by equality). Everything after
flattening (dynamic dims, guards, lifting) works on the leaves.
"""
from __future__ import annotations

import dataclasses

__all__ = ["flatten_inputs", "flatten_call", "leaf_specs", "build", "InputStructureError", "register_dataclass"]

_DATACLASSES = {}  # serialized type name -> class, filled by register_dataclass


def register_dataclass(cls, *, serialized_type_name=None):
    """Let exported programs take instances of the dataclass ``cls`` as inputs, flattened field
    by field (``torch.export.register_dataclass``); ``lucid.export.load`` rebuilds only classes
    registered in its process, under ``serialized_type_name`` (default: module and qualified name).

    Examples
    --------
    >>> import dataclasses, lucid
    >>> from lucid.export import export, register_dataclass
    >>> @dataclasses.dataclass
    ... class Pair:
    ...     a: lucid.Tensor
    ...     b: lucid.Tensor
    >>> register_dataclass(Pair, serialized_type_name="doc.Pair")
    >>> class Add(lucid.nn.Module):
    ...     def forward(self, p):
    ...         return p.a + p.b
    >>> ep = export(Add(), (Pair(lucid.ones(2), lucid.ones(2)),))
    >>> ep.graph_signature.user_inputs
    ('p_a', 'p_b')
    >>> ep.module()(Pair(lucid.ones(2), lucid.zeros(2)))
    tensor([1., 1.])
    """
    from ..utils import _pytree

    if not (isinstance(cls, type) and dataclasses.is_dataclass(cls)):
        raise ValueError(f"register_dataclass: field_names must be specified with a list of all fields used to "
                         f"initialize {cls}, as it is not a dataclass.")
    name = serialized_type_name or f"{cls.__module__}.{cls.__qualname__}"
    if not isinstance(name, str) or not all(part.isidentifier() for part in name.split(".")):
        raise ValueError(f"register_dataclass: serialized_type_name must be a dotted name, got {name!r}")
    _DATACLASSES[name] = cls
    if cls not in _pytree.SUPPORTED_NODES:
        fields = _fields(cls)
        _pytree.register_pytree_node(cls, lambda o: ([getattr(o, f) for f in fields], fields),
                                     lambda xs, ctx: cls(**dict(zip(ctx, xs))), serialized_type_name=name)


def _fields(cls):
    return [f.name for f in dataclasses.fields(cls) if f.init]


def _dataclass_name(cls):
    return next((n for n, c in reversed(list(_DATACLASSES.items())) if c is cls), None)


def _is_tensor(v):
    import lucid

    return isinstance(v, lucid.Tensor)


def _holds_tensor(v):
    if _is_tensor(v):
        return True
    if isinstance(v, (tuple, list)):
        return any(_holds_tensor(x) for x in v)
    if isinstance(v, dict):
        return any(_holds_tensor(x) for x in v.values())
    if _dataclass_name(type(v)) is not None:
        return any(_holds_tensor(getattr(v, f)) for f in _fields(type(v)))
    return False


def _container(v):
    # plain containers only: a namedtuple or a dict subclass would come back as another type
    return type(v) in (tuple, list, dict)


def flatten_inputs(names, examples):
    """``(trees, leaf names, leaf name -> example)`` for the forward's parameters."""
    leaves = {}

    def walk(value, name, top):
        if _is_tensor(value) or (top and not _holds_tensor(value)):
            return leaf(value, name)
        if type(value) in (tuple, list):
            return {type(value).__name__: [walk(v, f"{name}_{i}", False) for i, v in enumerate(value)]}
        if _dataclass_name(type(value)) is not None:
            return {"dataclass": [_dataclass_name(type(value)),
                                  [[f, walk(getattr(value, f), f"{name}_{f}", False)] for f in _fields(type(value))]]}
        if type(value) is dict:
            bad = [k for k in value if not isinstance(k, str) or not f"{name}_{k}".isidentifier()]
            if not bad:
                return {"dict": [[k, walk(v, f"{name}_{k}", False)] for k, v in value.items()]}
            if _holds_tensor(value):
                raise NotImplementedError(f"export: input {name!r} is a dict with keys {bad}: the keys of a dict "
                                          "holding tensors must be identifier-like strings")
        elif _holds_tensor(value):
            raise NotImplementedError(f"export: input {name!r} is a {type(value).__name__} holding tensors; "
                                      "pass tensors in plain tuples, lists or dicts")
        return leaf(value, name)

    def leaf(value, name):
        if name in leaves or (name in names and name not in trees_started):
            raise NotImplementedError(f"export: two inputs flatten to the name {name!r}; rename a forward parameter")
        leaves[name] = value
        return {"leaf": name}

    trees, trees_started = {}, set()
    for name in names:
        trees_started.add(name)
        trees[name] = walk(examples[name], name, True)
    return trees, list(leaves), leaves


def _items(tree):
    """``(kind, items)`` of a container tree; a dataclass's items are ``[[field, tree], ...]``."""
    kind, items = next(iter(tree.items()))
    return kind, items[1] if kind == "dataclass" else items


def leaves_of(tree):
    if "leaf" in tree:
        return [tree["leaf"]]
    kind, items = _items(tree)
    subs = [t for _, t in items] if kind in ("dict", "dataclass") else items
    return [n for t in subs for n in leaves_of(t)]


def build(tree, leaf):
    """The value of ``tree`` with each leaf name mapped through ``leaf``."""
    if "leaf" in tree:
        return leaf(tree["leaf"])
    kind, items = _items(tree)
    if kind == "dict":
        return {k: build(t, leaf) for k, t in items}
    if kind == "dataclass":
        return _DATACLASSES[tree["dataclass"][0]](**{f: build(t, leaf) for f, t in items})
    values = [build(t, leaf) for t in items]
    return tuple(values) if kind == "tuple" else values


class InputStructureError(RuntimeError, ValueError):
    """A call's inputs do not have the exported structure (torch: ValueError; Lucid's other
    input checks raise RuntimeErrors)."""


def flatten_call(tree, value, path):
    """``[(leaf name, value, path)]`` of a call's input along ``tree``, or raise."""
    if "leaf" in tree:
        return [(tree["leaf"], value, path)]
    kind, items = _items(tree)
    if kind == "dataclass":
        cls = _DATACLASSES[tree["dataclass"][0]]
        if type(value) is not cls:
            raise InputStructureError(f"Expected input at {path} to be a {cls.__name__}, but got "
                                      f"a {type(value).__name__}")
        return [x for f, t in items for x in flatten_call(t, getattr(value, f), f"{path}.{f}")]
    if kind == "dict":
        keys = [k for k, _ in items]
        if not isinstance(value, dict) or set(value) != set(keys):
            got = sorted(value) if isinstance(value, dict) else type(value).__name__
            raise InputStructureError(f"Expected input at {path} to be a dict with keys {keys}, but got {got}")
        return [x for k, t in items for x in flatten_call(t, value[k], f"{path}[{k!r}]")]
    if type(value) not in (tuple, list) or len(value) != len(items) or (type(value).__name__ != kind):
        got = f"a {type(value).__name__} of length {len(value)}" if isinstance(value, (tuple, list)) \
            else f"a {type(value).__name__}"
        raise InputStructureError(f"Expected input at {path} to be a {kind} of length {len(items)}, but got {got}")
    return [x for i, t in enumerate(items) for x in flatten_call(t, value[i], f"{path}[{i}]")]


def leaf_specs(tree, spec, where):
    """``[(leaf name, spec)]``: a parameter's ``dynamic_shapes`` entry split along its tree."""
    if spec is None:
        return []
    if "leaf" in tree:
        return [(tree["leaf"], spec)]
    kind, items = _items(tree)
    if kind == "dataclass":  # a spec by field: a dict, an instance, or a tuple in field order
        if dataclasses.is_dataclass(spec) and not isinstance(spec, type):
            spec = {f: getattr(spec, f) for f, _ in items}
        kind = "dict" if isinstance(spec, dict) else "tuple"
        items = items if kind == "dict" else [t for _, t in items]
    if kind == "dict":
        from .dynamic_shapes import UserError

        if not isinstance(spec, dict) or not set(spec) <= {k for k, _ in items}:
            raise UserError(f"export: {where} must be a dict with keys among {[k for k, _ in items]}, got {spec!r}")
        return [x for k, t in items if k in spec for x in leaf_specs(t, spec[k], f"{where}[{k!r}]")]
    if not isinstance(spec, (tuple, list)) or len(spec) != len(items):
        from .dynamic_shapes import UserError

        raise UserError(f"export: {where} must be a tuple or list of {len(items)} entries like its input, "
                        f"got {spec!r}")
    return [x for i, t in enumerate(items) for x in leaf_specs(t, spec[i], f"{where}[{i}]")]
