"""``lucid.utils._pytree`` (``torch.utils._pytree``, which libraries built on PyTorch import).

NOTE [utils pytrees]
PyTorch's pytrees, with its registry: tuples, lists, dicts, named tuples, ``OrderedDict``,
``defaultdict`` and ``deque`` are nodes, and so is any class given to
:func:`register_pytree_node`; everything else, ``None`` included, is a leaf. A
:class:`TreeSpec` is ``(type, context, children_specs)`` as PyTorch's (named tuples have the
type ``collections.namedtuple`` and their class as context), with PyTorch's equality and
repr. Limitation: this registry is separate from the minimal pytrees of ``lucid.func``
(``lucid.func.pytree``), so a class registered here is still a leaf to ``vmap``/``grad``;
key paths (``tree_flatten_with_path``, ``keystr``) and ``treespec_dumps`` are not provided.
"""
from __future__ import annotations

import types
from collections import OrderedDict, defaultdict, deque, namedtuple
from typing import Any, NamedTuple

__all__ = ["TreeSpec", "LeafSpec", "register_pytree_node", "tree_is_leaf", "tree_flatten", "tree_unflatten",
           "tree_iter", "tree_leaves", "tree_structure", "tree_map", "tree_map_", "tree_map_only",
           "tree_map_only_", "tree_all", "tree_any", "tree_all_only", "tree_any_only", "is_namedtuple",
           "is_namedtuple_class", "is_namedtuple_instance"]


class NodeDef(NamedTuple):
    type: Any
    flatten_fn: Any
    unflatten_fn: Any


SUPPORTED_NODES: dict = {}


def register_pytree_node(cls, flatten_fn, unflatten_fn, *, serialized_type_name=None, to_dumpable_context=None,
                         from_dumpable_context=None, flatten_with_keys_fn=None):
    """Make ``cls`` a pytree node: ``flatten_fn(x) -> (children, context)`` and
    ``unflatten_fn(children, context) -> x`` (the serialization arguments are accepted and unused).

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
    SUPPORTED_NODES[cls] = NodeDef(cls, flatten_fn, unflatten_fn)


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


def _dict_flatten(d):
    return list(d.values()), list(d.keys())


for _cls, _flat, _unflat in (
        (tuple, lambda t: (list(t), None), lambda xs, ctx: tuple(xs)),
        (list, lambda t: (list(t), None), lambda xs, ctx: list(xs)),
        (dict, _dict_flatten, lambda xs, keys: dict(zip(keys, xs))),
        (namedtuple, lambda t: (list(t), type(t)), lambda xs, cls: cls(*xs)),
        (OrderedDict, _dict_flatten, lambda xs, keys: OrderedDict(zip(keys, xs))),
        (defaultdict, lambda d: (list(d.values()), [d.default_factory, list(d.keys())]),
         lambda xs, ctx: defaultdict(ctx[0], zip(ctx[1], xs))),
        (deque, lambda d: (list(d), d.maxlen), lambda xs, maxlen: deque(xs, maxlen=maxlen))):
    register_pytree_node(_cls, _flat, _unflat)
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
