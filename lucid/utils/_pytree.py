"""``lucid.utils._pytree`` (``torch.utils._pytree``, which libraries built on PyTorch import).

NOTE [utils pytrees]
PyTorch's pytrees, with its registry: tuples, lists, dicts, named tuples, ``OrderedDict``,
``defaultdict`` and ``deque`` are nodes, and so is any class given to
:func:`register_pytree_node`; everything else, ``None`` included, is a leaf. A
:class:`TreeSpec` is ``(type, context, children_specs)`` as PyTorch's (named tuples have the
type ``collections.namedtuple`` and their class as context), with PyTorch's equality and
repr. Limitation: this registry is separate from the minimal pytrees of ``lucid.func``
(``lucid.func.pytree``), so a class registered here is still a leaf to ``vmap``/``grad``.

NOTE [Pytree key paths and serialized specs]
Each node type may also give ``flatten_with_keys_fn(x) -> ([(key, child)], context)``; a key
is a :class:`SequenceKey` (``[0]``), :class:`MappingKey` (``['a']``) or :class:`GetAttrKey`
(``.a``), and a leaf's key path is the tuple of keys from the root (``keystr`` prints it,
``key_get`` follows it). A type registered without one can be flattened but not with paths
(ValueError, as PyTorch). ``treespec_dumps`` writes PyTorch's JSON (protocol 1: ``[1, {"type",
"context", "children_spec"}]``), so a spec dumped by one library loads in the other;
``treespec_loads`` only parses JSON and looks names up in the registry (a ``defaultdict``
factory or an enum in a context is taken from an already imported module, never imported), so
loading an untrusted string runs no code. Lucid's ``return_types`` (``lucid.max(x, 0)`` ...)
are named tuples, so their keys are ``.values``/``.indices`` where PyTorch's structseqs give
``[0]``/``[1]``.
"""
from __future__ import annotations

import dataclasses
import enum
import json
import sys
import types
from collections import OrderedDict, defaultdict, deque, namedtuple
from collections.abc import Callable, Iterable
from typing import Any, NamedTuple, Protocol

__all__ = ["TreeSpec", "LeafSpec", "register_pytree_node", "tree_is_leaf", "tree_flatten", "tree_unflatten",
           "tree_iter", "tree_leaves", "tree_structure", "tree_map", "tree_map_", "tree_map_only",
           "tree_map_only_", "tree_all", "tree_any", "tree_all_only", "tree_any_only", "is_namedtuple",
           "is_namedtuple_class", "is_namedtuple_instance", "PyTree", "Context", "FlattenFn", "UnflattenFn",
           "DumpableContext", "ToDumpableContextFn", "FromDumpableContextFn", "PyTreeSpec", "keystr", "key_get",
           "tree_flatten_with_path", "tree_leaves_with_path", "tree_map_with_path", "treespec_dumps",
           "treespec_loads", "treespec_pprint", "is_structseq", "is_structseq_class", "is_structseq_instance"]

# PyTorch's type aliases (annotations only).
PyTree = Any
Context = Any
DumpableContext = Any
FlattenFn = Callable[[PyTree], tuple[list, Context]]
UnflattenFn = Callable[[Iterable, Context], PyTree]
ToDumpableContextFn = Callable[[Context], DumpableContext]
FromDumpableContextFn = Callable[[DumpableContext], Context]


class KeyEntry(Protocol):
    """One step of a key path: hashable, printable, and ``get(parent) -> child``."""

    def __hash__(self) -> int: ...

    def __eq__(self, other) -> bool: ...

    def __str__(self) -> str: ...

    def get(self, parent: Any) -> Any: ...


KeyPath = tuple  # tuple[KeyEntry, ...]
FlattenWithKeysFn = Callable[[PyTree], tuple[list, Context]]


@dataclasses.dataclass(frozen=True)
class SequenceKey:
    """The key of a sequence element, printed ``[idx]``."""

    idx: int

    def __str__(self):
        return f"[{self.idx!r}]"

    def get(self, sequence):
        return sequence[self.idx]


@dataclasses.dataclass(frozen=True)
class MappingKey:
    """The key of a mapping entry, printed ``[key!r]``."""

    key: Any

    def __str__(self):
        return f"[{self.key!r}]"

    def get(self, mapping):
        return mapping[self.key]


@dataclasses.dataclass(frozen=True)
class GetAttrKey:
    """The key of an attribute (a named tuple field, a dataclass field), printed ``.name``."""

    name: str

    def __str__(self):
        return f".{self.name}"

    def get(self, obj):
        return getattr(obj, self.name)


class NodeDef(NamedTuple):
    type: Any
    flatten_fn: Any
    unflatten_fn: Any
    flatten_with_keys_fn: Any = None


class _SerializeNodeDef(NamedTuple):
    type: Any
    serialized_type_name: str
    to_dumpable_context: Any
    from_dumpable_context: Any


NO_SERIALIZED_TYPE_NAME_FOUND = "NO_SERIALIZED_TYPE_NAME_FOUND"
SUPPORTED_NODES: dict = {}
SUPPORTED_SERIALIZED_TYPES: dict = {}  # type -> _SerializeNodeDef
SERIALIZED_TYPE_TO_PYTHON_TYPE: dict = {}  # serialized name -> type


def register_pytree_node(cls, flatten_fn, unflatten_fn, *, serialized_type_name=None, to_dumpable_context=None,
                         from_dumpable_context=None, flatten_with_keys_fn=None):
    """Make ``cls`` a pytree node: ``flatten_fn(x) -> (children, context)`` and
    ``unflatten_fn(children, context) -> x``.

    ``flatten_with_keys_fn(x) -> ([(key, child)], context)`` enables the key-path functions;
    ``serialized_type_name`` (with ``to_dumpable_context``/``from_dumpable_context`` when the
    context is not JSON) enables :func:`treespec_dumps`. See NOTE [Pytree key paths and
    serialized specs].

    Examples
    --------
    >>> from lucid.utils import _pytree as pytree
    >>> class Pair:
    ...     def __init__(self, a, b):
    ...         self.a, self.b = a, b
    >>> pytree.register_pytree_node(Pair, lambda p: ([p.a, p.b], None), lambda xs, ctx: Pair(*xs))
    >>> pytree.tree_leaves([Pair(1, 2), 3])
    [1, 2, 3]
    """
    if cls in SUPPORTED_NODES:
        raise ValueError(f"{cls} is already registered as pytree node.")
    _register(cls, flatten_fn, unflatten_fn, serialized_type_name, to_dumpable_context, from_dumpable_context,
              flatten_with_keys_fn)


def _register(cls, flatten_fn, unflatten_fn, serialized_type_name=None, to_dumpable_context=None,
              from_dumpable_context=None, flatten_with_keys_fn=None):
    if (to_dumpable_context is None) != (from_dumpable_context is None):
        raise ValueError(f"Both to_dumpable_context and from_dumpable_context for {cls} must be None or "
                         "registered.")
    SUPPORTED_NODES[cls] = NodeDef(cls, flatten_fn, unflatten_fn, flatten_with_keys_fn)
    name = NO_SERIALIZED_TYPE_NAME_FOUND if serialized_type_name is None else serialized_type_name
    SUPPORTED_SERIALIZED_TYPES[cls] = _SerializeNodeDef(cls, name, to_dumpable_context, from_dumpable_context)
    SERIALIZED_TYPE_TO_PYTHON_TYPE[name] = cls


def register_dataclass(cls, *, field_names=None, drop_field_names=None, serialized_type_name=None):
    """Register a dataclass (or a class built from keyword fields) as a pytree node.

    Fields that are None are kept in the context, not as leaves (as PyTorch); the key of a
    field is ``GetAttrKey(name)``.

    Examples
    --------
    >>> import dataclasses
    >>> from lucid.utils import _pytree as pytree
    >>> @dataclasses.dataclass
    ... class Point:
    ...     x: float
    ...     y: float
    >>> pytree.register_dataclass(Point)
    >>> pytree.tree_map(lambda v: v * 10, Point(1, 2))
    Point(x=10, y=20)
    >>> pytree.keystr(pytree.tree_leaves_with_path(Point(1, 2))[1][0])
    '.y'
    """
    drop = set(drop_field_names or ())
    if not dataclasses.is_dataclass(cls):
        if field_names is None:
            raise ValueError(f"field_names must be specified with a list of all fields used to initialize {cls}, "
                             "as it is not a dataclass.")
    else:
        init_fields = [f.name for f in dataclasses.fields(cls) if f.init and f.name not in drop]
        if field_names is None:
            field_names = init_fields
        elif set(field_names) != set(init_fields):
            raise ValueError(f"register_dataclass: field_names does not include all dataclass fields: missing "
                             f"{set(init_fields) - set(field_names) or '{}'}, unexpected "
                             f"{set(field_names) - set(init_fields) or '{}'} (add dropped ones to drop_field_names)")
    field_names = list(field_names)

    def flatten(obj):
        values = [getattr(obj, n) for n in field_names]
        kept = [n for n, v in zip(field_names, values) if v is not None]
        return [v for v in values if v is not None], [kept, [n for n in field_names if n not in kept]]

    def unflatten(values, context):
        kept, nones = context
        return cls(**dict(zip(kept, values)), **dict.fromkeys(nones))

    def flatten_with_keys(obj):
        values, (kept, nones) = flatten(obj)
        return [(GetAttrKey(n), v) for n, v in zip(kept, values)], kept

    register_pytree_node(cls, flatten, unflatten, serialized_type_name=serialized_type_name,
                         flatten_with_keys_fn=flatten_with_keys)


def _register_namedtuple(cls, *, serialized_type_name):
    """Give a named tuple class a serialized name, so specs holding it can be dumped (PyTorch's)."""
    SUPPORTED_SERIALIZED_TYPES[cls] = _SerializeNodeDef(cls, serialized_type_name, None, None)
    SERIALIZED_TYPE_TO_PYTHON_TYPE[serialized_type_name] = cls


def is_namedtuple_class(cls) -> bool:
    """Whether ``cls`` is a class made by ``collections.namedtuple`` (or ``typing.NamedTuple``)."""
    return (isinstance(cls, type) and issubclass(cls, tuple) and isinstance(getattr(cls, "_fields", None), tuple)
            and all(type(f) is str for f in cls._fields) and callable(getattr(cls, "_make", None))
            and callable(getattr(cls, "_asdict", None)))


def is_namedtuple_instance(obj) -> bool:
    return is_namedtuple_class(type(obj))


def is_namedtuple(obj) -> bool:
    """Whether ``obj`` is a named tuple or a named tuple class."""
    return is_namedtuple_class(obj if isinstance(obj, type) else type(obj))


class structseq(tuple):  # noqa: N801  (PyTorch's name)
    """A stand-in type for CPython's struct sequences (``os.stat_result``, ``time.struct_time``)."""

    __slots__ = ()

    def __init_subclass__(cls):
        raise TypeError("type 'structseq' is not an acceptable base type")


_TPFLAGS_BASETYPE = 1 << 10


def is_structseq_class(cls) -> bool:
    """Whether ``cls`` is a CPython struct sequence class (a direct, final tuple subclass with
    ``n_fields``, ``n_sequence_fields`` and ``n_unnamed_fields``)."""
    return (isinstance(cls, type) and cls.__bases__ == (tuple,)
            and all(isinstance(getattr(cls, a, None), int) for a in ("n_fields", "n_sequence_fields",
                                                                    "n_unnamed_fields"))
            and not cls.__flags__ & _TPFLAGS_BASETYPE)


def is_structseq_instance(obj) -> bool:
    return is_structseq_class(type(obj))


def is_structseq(obj) -> bool:
    """Whether ``obj`` is a struct sequence or a struct sequence class (a leaf unless registered,
    as in PyTorch).

    Examples
    --------
    >>> import time
    >>> from lucid.utils._pytree import is_structseq
    >>> is_structseq(time.gmtime(0)), is_structseq((1, 2))
    (True, False)
    """
    return is_structseq_class(obj if isinstance(obj, type) else type(obj))


def _dict_flatten(d):
    return list(d.values()), list(d.keys())


def _dict_with_keys(d):
    return [(MappingKey(k), v) for k, v in d.items()], list(d.keys())


def _seq_with_keys(flatten):
    def with_keys(node):
        children, context = flatten(node)
        return [(SequenceKey(i), c) for i, c in enumerate(children)], context

    return with_keys


def _defaultdict_dump(context):
    factory, keys = context
    return {"default_factory_module": factory.__module__, "default_factory_name": factory.__qualname__,
            "dict_context": keys}


def _defaultdict_load(dumped):
    if not isinstance(dumped, dict) or set(dumped) != {"default_factory_module", "default_factory_name",
                                                       "dict_context"}:
        raise ValueError(f"treespec_loads: a defaultdict context must have the keys default_factory_module, "
                         f"default_factory_name and dict_context, got {dumped!r}")
    return [_imported(dumped["default_factory_module"], dumped["default_factory_name"]), dumped["dict_context"]]


def _imported(module, qualname):
    """``module.qualname`` from an already imported module (a loaded spec never imports code)."""
    obj = sys.modules.get(module)
    if obj is None:
        raise ValueError(f"treespec_loads: module {module!r} is not imported; import it before loading the spec")
    for part in qualname.split("."):
        obj = getattr(obj, part)
    return obj


def _namedtuple_dump(cls):
    node = SUPPORTED_SERIALIZED_TYPES.get(cls)
    if node is None or node.serialized_type_name == NO_SERIALIZED_TYPE_NAME_FOUND:
        raise NotImplementedError(f"Can't serialize TreeSpec of namedtuple class {cls} because we didn't register a "
                                  "serializated_type_name. Please register using `_register_namedtuple`.")
    return node.serialized_type_name


def _namedtuple_load(name):
    if name not in SERIALIZED_TYPE_TO_PYTHON_TYPE:
        raise NotImplementedError(f"Can't deserialize TreeSpec of namedtuple class {name} because we couldn't find a "
                                  "serializated name.")
    return SERIALIZED_TYPE_TO_PYTHON_TYPE[name]


def _tuple_flatten(t):
    return list(t), None


def _namedtuple_with_keys(t):
    return [(GetAttrKey(f), v) for f, v in zip(t._fields, t)], type(t)


def _defaultdict_with_keys(d):
    pairs, keys = _dict_with_keys(d)
    return pairs, [d.default_factory, keys]


for _cls, _flat, _unflat, _keys, _name, _dump, _load in (
        (tuple, _tuple_flatten, lambda xs, ctx: tuple(xs), _seq_with_keys(_tuple_flatten), "builtins.tuple",
         None, None),
        (list, _tuple_flatten, lambda xs, ctx: list(xs), _seq_with_keys(_tuple_flatten), "builtins.list", None, None),
        (dict, _dict_flatten, lambda xs, keys: dict(zip(keys, xs)), _dict_with_keys, "builtins.dict", None, None),
        (namedtuple, lambda t: (list(t), type(t)), lambda xs, cls: cls(*xs), _namedtuple_with_keys,
         "collections.namedtuple", _namedtuple_dump, _namedtuple_load),
        (OrderedDict, _dict_flatten, lambda xs, keys: OrderedDict(zip(keys, xs)), _dict_with_keys,
         "collections.OrderedDict", None, None),
        (defaultdict, lambda d: (list(d.values()), [d.default_factory, list(d.keys())]),
         lambda xs, ctx: defaultdict(ctx[0], zip(ctx[1], xs)), _defaultdict_with_keys, "collections.defaultdict",
         _defaultdict_dump, _defaultdict_load),
        (deque, lambda d: (list(d), d.maxlen), lambda xs, maxlen: deque(xs, maxlen=maxlen),
         _seq_with_keys(lambda d: (list(d), d.maxlen)), "collections.deque", None, None)):
    _register(_cls, _flat, _unflat, _name, _dump, _load, _keys)
_BUILTIN = frozenset(SUPPORTED_NODES)
_DICTS = (dict, OrderedDict, defaultdict)


def _node_type(tree):
    cls = type(tree)
    return namedtuple if is_namedtuple_class(cls) else cls  # every named tuple is a node, as in PyTorch


def tree_is_leaf(tree, is_leaf=None) -> bool:
    """Whether ``tree`` is a leaf: not a registered node, or ``is_leaf(tree)`` is true."""
    if is_leaf is not None and is_leaf(tree):
        return True
    return _node_type(tree) not in SUPPORTED_NODES


class TreeSpec:
    """The structure of a pytree: the node ``type``, its ``context`` and the children's specs."""

    __slots__ = ("type", "_context", "_children", "num_nodes", "num_leaves", "num_children")

    def __init__(self, type, context, children_specs):  # noqa: A002  (PyTorch's names)
        self.type, self._context, self._children = type, context, list(children_specs)
        self.num_children = len(self._children)
        if type is None:  # a leaf
            self.num_nodes, self.num_leaves = 1, 1
        else:
            self.num_nodes = 1 + sum(c.num_nodes for c in self._children)
            self.num_leaves = sum(c.num_leaves for c in self._children)

    @property
    def context(self):
        return self._context

    @property
    def children_specs(self):
        return self._children

    def is_leaf(self) -> bool:
        return self.type is None

    def children(self):
        return list(self._children)

    def child(self, index):
        return self._children[index]

    def unflatten(self, leaves):
        """The pytree of this structure with ``leaves`` as its leaves."""
        leaves = leaves if isinstance(leaves, (list, tuple)) else list(leaves)
        if len(leaves) != self.num_leaves:
            raise ValueError(f"treespec.unflatten(leaves): `leaves` has length {len(leaves)} but the spec refers "
                             f"to a pytree that holds {self.num_leaves} items ({self}).")
        return self._build(iter(leaves))

    def _build(self, it):
        if self.type is None:
            return next(it)
        return SUPPORTED_NODES[self.type].unflatten_fn([c._build(it) for c in self._children], self._context)

    def flatten_up_to(self, tree):
        """The subtrees of ``tree`` at the leaves of this spec (``tree`` must have it as a prefix)."""
        out = []
        self._up_to(tree, out)
        return out

    def _up_to(self, node, out):
        if self.type is None:
            out.append(node)
            return
        node_type = _node_type(node)
        if self.type in _DICTS and node_type in _DICTS:  # dicts of any kind match by keys
            keys = self._context[1] if self.type is defaultdict else self._context
            if set(node) != set(keys):
                missing, extra = set(keys) - set(node), set(node) - set(keys)
                raise ValueError("Node keys mismatch" + (f"; missing key(s): {missing}" if missing else "")
                                 + (f"; extra key(s): {extra}" if extra else "") + ".")
            children = [node[k] for k in keys]
        else:
            if node_type != self.type:
                raise ValueError(f"Node type mismatch; expected {self.type!r}, but got {node_type!r}.")
            children, context = SUPPORTED_NODES[node_type].flatten_fn(node)
            if len(children) != self.num_children:
                raise ValueError(f"Node arity mismatch; expected {self.num_children}, but got {len(children)}.")
            if node_type is not deque and context != self._context:
                raise ValueError(f"Node context mismatch for node type {self.type!r}; expected "
                                 f"{self._context!r}, but got {context!r}.")
        for spec, child in zip(self._children, children):
            spec._up_to(child, out)

    def __eq__(self, other):
        if self is other:
            return True
        if not isinstance(other, TreeSpec):
            return NotImplemented
        return (str(self.type) == str(other.type) and self._context == other._context
                and self._children == other._children)

    def __hash__(self):
        ctx = self._context
        if self.type is defaultdict:
            ctx = (ctx[0], tuple(ctx[1]))
        elif self.type in _DICTS:
            ctx = tuple(ctx)
        return hash((self.type, ctx, tuple(self._children)))

    def __repr__(self, indent=0):
        if self.type is None:
            return "*"
        inner = ""
        if self._children:
            indent += 2
            inner = self._children[0].__repr__(indent) + ("," if self.num_children > 1 else "")
            inner += ",".join("\n" + " " * indent + c.__repr__(indent) for c in self._children[1:])
        return f"TreeSpec({self.type.__name__}, {self._context}, [{inner}])"


def LeafSpec():  # noqa: N802  (PyTorch's name; a leaf is the TreeSpec of type None)
    """The spec of a leaf, ``*``."""
    return _LEAF


_LEAF = TreeSpec(None, None, [])


def tree_flatten(tree, is_leaf=None):
    """``tree`` -> (list of leaves, :class:`TreeSpec`).

    Examples
    --------
    >>> from lucid.utils._pytree import tree_flatten
    >>> leaves, spec = tree_flatten({"a": [1, None], "b": (2,)})
    >>> leaves
    [1, None, 2]
    >>> spec
    TreeSpec(dict, ['a', 'b'], [TreeSpec(list, None, [*,
        *]),
      TreeSpec(tuple, None, [*])])
    """
    leaves = []

    def flatten(node):
        if tree_is_leaf(node, is_leaf):
            leaves.append(node)
            return _LEAF
        node_type = _node_type(node)
        children, context = SUPPORTED_NODES[node_type].flatten_fn(node)
        return TreeSpec(node_type, context, [flatten(c) for c in children])

    return leaves, flatten(tree)


def tree_unflatten(leaves, treespec):
    """The inverse of :func:`tree_flatten` (the two arguments may come in either order)."""
    if not isinstance(treespec, TreeSpec):
        if not isinstance(leaves, TreeSpec):
            raise TypeError(f"Expected `treespec` to be an instance of PyTreeSpec but got item of type "
                            f"{type(treespec)}.")
        leaves, treespec = treespec, leaves
    return treespec.unflatten(leaves)


def tree_iter(tree, is_leaf=None):
    """An iterator over the leaves of ``tree``."""
    if tree_is_leaf(tree, is_leaf):
        yield tree
        return
    for child in SUPPORTED_NODES[_node_type(tree)].flatten_fn(tree)[0]:
        yield from tree_iter(child, is_leaf)


def tree_leaves(tree, is_leaf=None):
    """The leaves of ``tree``, in flattening order."""
    return list(tree_iter(tree, is_leaf))


def tree_structure(tree, is_leaf=None):
    """The :class:`TreeSpec` of ``tree``."""
    return tree_flatten(tree, is_leaf)[1]


def tree_map(func, tree, *rests, is_leaf=None):
    """``func`` applied leafwise; each of ``rests`` must have ``tree``'s structure as a prefix.

    Examples
    --------
    >>> from lucid.utils._pytree import tree_map
    >>> tree_map(lambda x, y: x + y, [1, (2, 3)], [10, (20, 30)])
    [11, (22, 33)]
    """
    leaves, spec = tree_flatten(tree, is_leaf)
    return spec.unflatten(map(func, leaves, *(spec.flatten_up_to(r) for r in rests)))


def tree_map_(func, tree, *rests, is_leaf=None):
    """``func`` called on each leaf for its effect; returns ``tree`` itself."""
    leaves, spec = tree_flatten(tree, is_leaf)
    for args in zip(leaves, *(spec.flatten_up_to(r) for r in rests)):
        func(*args)
    return tree


def _predicate(type_or_types_or_pred):
    if isinstance(type_or_types_or_pred, (type, tuple, types.UnionType)):
        return lambda x: isinstance(x, type_or_types_or_pred)
    if callable(type_or_types_or_pred):
        return type_or_types_or_pred
    raise TypeError("Argument must be a type, a tuple of types, or a callable.")


def map_only(type_or_types_or_pred):
    """Decorator: apply the function to the leaves that match, pass the others through."""
    pred = _predicate(type_or_types_or_pred)

    def wrap(func):
        def wrapped(x):
            return func(x) if pred(x) else x

        return wrapped

    return wrap


def tree_map_only(type_or_types_or_pred, func, tree, is_leaf=None):
    """:func:`tree_map` applying ``func`` only to the leaves of the given types (or predicate).

    Examples
    --------
    >>> from lucid.utils._pytree import tree_map_only
    >>> tree_map_only(int, lambda x: x * 10, [1, 2.0, (3,)])
    [10, 2.0, (30,)]
    """
    return tree_map(map_only(type_or_types_or_pred)(func), tree, is_leaf=is_leaf)


def tree_map_only_(type_or_types_or_pred, func, tree, is_leaf=None):
    return tree_map_(map_only(type_or_types_or_pred)(func), tree, is_leaf=is_leaf)


def tree_all(pred, tree, is_leaf=None) -> bool:
    return all(map(pred, tree_iter(tree, is_leaf)))


def tree_any(pred, tree, is_leaf=None) -> bool:
    return any(map(pred, tree_iter(tree, is_leaf)))


def tree_all_only(type_or_types, pred, tree, is_leaf=None) -> bool:
    return all(pred(x) for x in tree_iter(tree, is_leaf) if isinstance(x, type_or_types))


def tree_any_only(type_or_types, pred, tree, is_leaf=None) -> bool:
    return any(pred(x) for x in tree_iter(tree, is_leaf) if isinstance(x, type_or_types))


PyTreeSpec = TreeSpec  # PyTorch's alias


# ---------------------------------------------------------------------------- key paths
# See NOTE [Pytree key paths and serialized specs].
def _key_paths(path, node, is_leaf, out):
    if tree_is_leaf(node, is_leaf):
        out.append((path, node))
        return
    node_type = _node_type(node)
    with_keys = SUPPORTED_NODES[node_type].flatten_with_keys_fn
    if with_keys is None:
        raise ValueError(f"Did not find a flatten_with_keys_fn for type: {node_type}. Please pass a "
                         "flatten_with_keys_fn argument to register_pytree_node.")
    for key, child in with_keys(node)[0]:
        _key_paths((*path, key), child, is_leaf, out)


def tree_leaves_with_path(tree, is_leaf=None):
    """``[(key_path, leaf)]`` in flattening order.

    Examples
    --------
    >>> from lucid.utils._pytree import tree_leaves_with_path, keystr
    >>> [(keystr(p), x) for p, x in tree_leaves_with_path({"a": [1, 2], "b": 3})]
    [("['a'][0]", 1), ("['a'][1]", 2), ("['b']", 3)]
    """
    out = []
    _key_paths((), tree, is_leaf, out)
    return out


def tree_flatten_with_path(tree, is_leaf=None):
    """``([(key_path, leaf)], treespec)``: :func:`tree_flatten` with each leaf's key path."""
    return tree_leaves_with_path(tree, is_leaf), tree_structure(tree, is_leaf)


def tree_map_with_path(func, tree, *rests, is_leaf=None):
    """``func(key_path, leaf, *other_leaves)`` applied leafwise (``rests`` as in :func:`tree_map`).

    Examples
    --------
    >>> from lucid.utils._pytree import tree_map_with_path, keystr
    >>> tree_map_with_path(lambda p, x: f"{keystr(p)}={x}", {"a": (1, 2)})
    {'a': ("['a'][0]=1", "['a'][1]=2")}
    """
    pairs, spec = tree_flatten_with_path(tree, is_leaf)
    others = [spec.flatten_up_to(r) for r in rests]
    return spec.unflatten([func(path, leaf, *more) for (path, leaf), *more in zip(pairs, *others)])


def keystr(kp) -> str:
    """A key path as text, e.g. ``"['layers'][0].weight"``."""
    return "".join(str(k) for k in kp)


def key_get(obj, kp):
    """The subtree of ``obj`` at key path ``kp``."""
    for key in kp:
        obj = key.get(obj)
    return obj


# ---------------------------------------------------------------------------- serialized specs
_PROTOCOL = 1


class _EnumEncoder(json.JSONEncoder):
    """Enums in a context as PyTorch writes them: ``{"__enum__": true, "fqn": "mod:Class", "name"}``."""

    def default(self, o):
        if isinstance(o, enum.Enum):
            return {"__enum__": True, "fqn": f"{type(o).__module__}:{type(o).__qualname__}", "name": o.name}
        return super().default(o)


def _enum_hook(obj):
    if "__enum__" in obj:
        module, _, qualname = obj["fqn"].partition(":")
        cls = _imported(module, qualname)
        if not (isinstance(cls, type) and issubclass(cls, enum.Enum)):
            raise ValueError(f"treespec_loads: {obj['fqn']} is not an Enum")
        return cls[obj["name"]]
    return obj


def _spec_to_json(spec):
    if spec.is_leaf():
        return {"type": None, "context": None, "children_spec": []}
    node = SUPPORTED_SERIALIZED_TYPES.get(spec.type)
    if node is None:
        raise NotImplementedError(f"Serializing {spec.type} in pytree is not registered.")
    if node.serialized_type_name == NO_SERIALIZED_TYPE_NAME_FOUND:
        raise NotImplementedError(f"No registered serialization name for {spec.type} found. Please update your "
                                  "_register_pytree_node call with a `serialized_type_name` kwarg.")
    if node.to_dumpable_context is None:
        try:
            context = json.dumps(spec.context, cls=_EnumEncoder)
        except TypeError as e:
            raise TypeError("Unable to serialize context. Please make the context json dump-able, or register a "
                            "custom serializer using register_pytree_node.") from e
    else:
        context = node.to_dumpable_context(spec.context)
    return {"type": node.serialized_type_name, "context": context,
            "children_spec": [_spec_to_json(c) for c in spec.children_specs]}


def _json_to_spec(schema):
    if schema["type"] is None and schema["context"] is None and not schema["children_spec"]:
        return _LEAF
    cls = SERIALIZED_TYPE_TO_PYTHON_TYPE.get(schema["type"])
    if cls is None:
        raise NotImplementedError(f"Deserializing {schema['type']} in pytree is not registered.")
    node = SUPPORTED_SERIALIZED_TYPES[cls]
    if node.from_dumpable_context is None:
        context = json.loads(schema["context"], object_hook=_enum_hook)
    else:
        context = node.from_dumpable_context(schema["context"])
    return TreeSpec(cls, context, [_json_to_spec(c) for c in schema["children_spec"]])


def treespec_dumps(treespec, protocol=None) -> str:
    """A :class:`TreeSpec` as JSON text (PyTorch's format, protocol 1).

    Examples
    --------
    >>> from lucid.utils._pytree import tree_structure, treespec_dumps, treespec_loads
    >>> spec = tree_structure({"a": [1, 2]})
    >>> treespec_loads(treespec_dumps(spec)) == spec
    True
    """
    if not isinstance(treespec, TreeSpec):
        raise TypeError(f"treespec_dumps: expected a TreeSpec, got {type(treespec).__name__}")
    protocol = _PROTOCOL if protocol is None else protocol
    if protocol != _PROTOCOL:
        raise ValueError(f"Unknown protocol {protocol}. Available protocols: [{_PROTOCOL}]")
    return json.dumps([protocol, _spec_to_json(treespec)], cls=_EnumEncoder)


def treespec_loads(serialized: str):
    """The :class:`TreeSpec` written by :func:`treespec_dumps` (parses JSON only; see NOTE
    [Pytree key paths and serialized specs])."""
    protocol, schema = json.loads(serialized)
    if protocol != _PROTOCOL:
        raise ValueError(f"Unknown protocol {protocol}. Available protocols: [{_PROTOCOL}]")
    return _json_to_spec(schema)


class _Star(str):
    __slots__ = ()

    def __repr__(self):
        return "*"


def treespec_pprint(treespec) -> str:
    """The structure drawn as the pytree with ``*`` at each leaf, e.g. ``"(*, [*, *])"``."""
    return repr(treespec.unflatten([_Star("*")] * treespec.num_leaves))
