"""Minimal pytrees: nested tuples, lists and dicts whose leaves are Tensors (or anything)."""
from __future__ import annotations


class TreeDef:
    """Structure of a pytree; ``unflatten`` rebuilds it from a list of leaves."""

    __slots__ = ("kind", "meta", "children")

    def __init__(self, kind, meta, children):
        self.kind, self.meta, self.children = kind, meta, children

    @property
    def num_leaves(self):
        if self.kind == "leaf":
            return 1
        return sum(c.num_leaves for c in self.children)

    def unflatten(self, leaves):
        it = iter(leaves)
        return self._build(it)

    def _build(self, it):
        if self.kind == "leaf":
            return next(it)
        if self.kind == "none":
            return None
        vals = [c._build(it) for c in self.children]
        if self.kind == "tuple":
            return tuple(vals)
        if self.kind == "namedtuple":
            return self.meta(*vals)
        if self.kind == "list":
            return vals
        return dict(zip(self.meta, vals))

    def __eq__(self, other):
        return (isinstance(other, TreeDef) and self.kind == other.kind and self.meta == other.meta
                and self.children == other.children)

    def __repr__(self):
        if self.kind == "leaf":
            return "*"
        return f"{self.kind}({', '.join(map(repr, self.children))})"


def tree_flatten(tree):
    """``tree`` -> (list of leaves, TreeDef)."""
    leaves = []
    return leaves, _flatten(tree, leaves)


_LEAF = TreeDef("leaf", None, ())  # shared: a TreeDef is never changed after it is built


def _flatten(tree, leaves):
    cls = tree.__class__
    if cls is tuple:  # exact-type fast paths first; subclasses (namedtuples ...) below
        return TreeDef("tuple", None, tuple([_flatten(c, leaves) for c in tree]))
    if cls is dict:
        keys = tuple(tree.keys())
        return TreeDef("dict", keys, tuple([_flatten(tree[k], leaves) for k in keys]))
    if cls is list:
        return TreeDef("list", None, tuple([_flatten(c, leaves) for c in tree]))
    if tree is None:
        return TreeDef("none", None, ())
    if not isinstance(tree, (tuple, list, dict)):
        leaves.append(tree)
        return _LEAF
    if isinstance(tree, tuple) and hasattr(tree, "_fields"):
        return TreeDef("namedtuple", type(tree), tuple(_flatten(c, leaves) for c in tree))
    if isinstance(tree, tuple):
        return TreeDef("tuple", None, tuple(_flatten(c, leaves) for c in tree))
    if isinstance(tree, list):
        return TreeDef("list", None, tuple(_flatten(c, leaves) for c in tree))
    if isinstance(tree, dict):
        keys = tuple(tree.keys())
        return TreeDef("dict", keys, tuple(_flatten(tree[k], leaves) for k in keys))
    leaves.append(tree)
    return TreeDef("leaf", None, ())


def tree_unflatten(leaves, treedef):
    return treedef.unflatten(leaves)


def tree_map(fn, tree, *rest):
    """Apply ``fn`` leafwise over one or more trees of the same structure."""
    leaves, treedef = tree_flatten(tree)
    others = [tree_flatten(r)[0] for r in rest]
    return treedef.unflatten([fn(*xs) for xs in zip(leaves, *others)])


def broadcast_prefix(prefix, tree, what="in_dims"):
    """Expand ``prefix`` (e.g. ``in_dims=0``) to one value per leaf of ``tree``."""
    if not isinstance(prefix, (tuple, list, dict)) or prefix is None:
        return [prefix] * len(tree_flatten(tree)[0])
    if isinstance(prefix, dict):
        if not isinstance(tree, dict) or set(prefix) != set(tree):
            raise ValueError(f"{what}: the structure {prefix!r} does not match the inputs")
        out = []
        for k in tree:
            out.extend(broadcast_prefix(prefix[k], tree[k], what))
        return out
    if not isinstance(tree, (tuple, list)) or len(prefix) != len(tree):
        raise ValueError(
            f"{what}: expected {what} to be a single value or match the structure of the inputs; "
            f"got {what}={prefix!r} for {len(tree) if isinstance(tree, (tuple, list)) else 1} input(s)"
        )
    out = []
    for p, t in zip(prefix, tree):
        out.extend(broadcast_prefix(p, t, what))
    return out
