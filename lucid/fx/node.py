"""``Node``: one operation in an FX ``Graph`` (``torch.fx.Node``).

A node is a call: ``op`` says which kind (placeholder, get_attr, call_function, call_module,
call_method, output), ``target`` what is called and ``args``/``kwargs`` with what; an argument
that is another node is a use of that node's value, so each node knows its inputs
(``all_input_nodes``) and its ``users``. Nodes form a doubly linked list owned by their graph.
"""
from __future__ import annotations

import builtins
import operator
import types
from typing import Any, Callable, Union

__all__ = ["Node", "map_arg", "map_aggregate", "has_side_effect", "immutable_list", "immutable_dict"]

# torch.fx.node's type aliases, which custom tracers' signatures name (``target: fx.node.Target``).
Target = Union[Callable[..., Any], str]
Argument = Any  # a Node, or a constant / container nesting Nodes


def map_aggregate(a, fn):
    """Apply ``fn`` to every leaf of ``a`` (nested tuples, lists, dicts and slices).

    Examples
    --------
    >>> from lucid.fx.node import map_aggregate
    >>> map_aggregate((1, [2, {"k": 3}]), lambda v: v * 10)
    (10, [20, {'k': 30}])
    """
    if isinstance(a, tuple):
        mapped = tuple(map_aggregate(e, fn) for e in a)
        return mapped if type(a) is tuple or not hasattr(a, "_fields") else type(a)(*mapped)
    if isinstance(a, list):
        return [map_aggregate(e, fn) for e in a]
    if isinstance(a, dict):
        return {k: map_aggregate(v, fn) for k, v in a.items()}
    if isinstance(a, slice):
        return slice(map_aggregate(a.start, fn), map_aggregate(a.stop, fn), map_aggregate(a.step, fn))
    return fn(a)


# NOTE [Frozen node arguments]
# A node's users are computed when its args/kwargs are assigned, so a list or dict inside them
# mutated in place (``node.kwargs["k"] = other``) would leave ``users`` stale and DCE, codegen and
# the rewriter silently wrong. As torch.fx does, the containers a node stores refuse mutation;
# assign a new value (``node.kwargs = {**node.kwargs, "k": other}``) instead.
def _refuse_mutation(self, *args, **kwargs):
    raise NotImplementedError(
        f"'{type(self).__name__}' object does not support mutation. If you are attempting to modify the "
        "kwargs or args of a lucid.fx.Node object, instead create a new copy of it and assign the copy to "
        "the node (node.args = new_args, node.kwargs = new_kwargs)")


class immutable_list(list):  # noqa: N801 (torch.fx's name)
    """The list a ``Node`` stores in its args (NOTE [Frozen node arguments])."""

    def __hash__(self):
        return hash(tuple(self))

    def __reduce__(self):
        return (immutable_list, (list(self),))


class immutable_dict(dict):  # noqa: N801 (torch.fx's name)
    """The dict a ``Node`` stores as its kwargs (NOTE [Frozen node arguments])."""

    def __hash__(self):
        return hash(tuple(self.items()))

    def __reduce__(self):
        return (immutable_dict, (dict(self),))


for _cls, _names in ((immutable_list, ("__setitem__", "__delitem__", "__iadd__", "__imul__", "append",
                                        "extend", "insert", "pop", "remove", "clear", "sort", "reverse")),
                     (immutable_dict, ("__setitem__", "__delitem__", "__ior__", "pop", "popitem", "clear",
                                       "update", "setdefault"))):
    for _name in _names:
        setattr(_cls, _name, _refuse_mutation)


def _freeze(a):
    if isinstance(a, tuple):
        frozen = tuple(_freeze(e) for e in a)
        return frozen if type(a) is tuple or not hasattr(a, "_fields") else type(a)(*frozen)
    if isinstance(a, list):
        return immutable_list(_freeze(e) for e in a)
    if isinstance(a, dict):
        return immutable_dict((k, _freeze(v)) for k, v in a.items())
    return a


def map_arg(a, fn):
    """Apply ``fn`` to every ``Node`` inside the argument structure ``a``; other leaves stay."""
    return map_aggregate(a, lambda x: fn(x) if isinstance(x, Node) else x)


class _FxAssertionError(AssertionError, RuntimeError):
    """torch.fx asserts here; Lucid raised RuntimeError before, so both keep working."""


# Functions whose call is an effect of its own: dead-code elimination keeps them.
_side_effectful_functions: set = {operator.setitem}
_INPLACE_DUNDERS = frozenset(f"__i{op}__" for op in ("add", "sub", "mul", "truediv", "floordiv", "mod", "pow",
                                                      "lshift", "rshift", "and", "or", "xor", "matmul"))


def has_side_effect(fn):
    """Mark ``fn`` as having an effect of its own: dead-code elimination keeps its calls.

    Examples
    --------
    >>> import lucid.fx as fx
    >>> log = []
    >>> def record(x):
    ...     log.append(x)
    >>> _ = fx.has_side_effect(record)
    >>> g = fx.Graph()
    >>> x = g.placeholder("x")
    >>> _ = g.call_function(record, (x,))
    >>> _ = g.output(x)
    >>> g.eliminate_dead_code(), [n.op for n in g.nodes]
    (False, ['placeholder', 'call_function', 'output'])
    """
    _side_effectful_functions.add(fn)
    return fn


_RANDOM_NAMES = ("rand", "randn", "randint", "rand_like", "randn_like", "randint_like", "randperm",
                 "normal", "bernoulli", "multinomial", "poisson", "binomial", "uniform", "dropout")


def _is_random_function(fn):
    return getattr(fn, "__module__", "") and str(fn.__module__).startswith("lucid") and \
        getattr(fn, "__name__", "") in _RANDOM_NAMES


def _is_inplace_function(fn, kwargs):
    if not str(getattr(fn, "__module__", "") or "").startswith("lucid"):
        return False  # ``operator.and_`` is no in-place op
    name = getattr(fn, "__name__", "")
    return (name.endswith("_") and not name.endswith("__")) or kwargs.get("inplace") is True


def _qualified_name(fn):
    """``lucid.tanh``, ``lucid.nn.functional.relu``, ``operator.add``, ``builtins.getattr``."""
    from .graph import _public_lucid_name

    public = _public_lucid_name(fn)
    if public is not None:
        return public
    if getattr(builtins, getattr(fn, "__name__", ""), None) is fn:
        return f"builtins.{fn.__name__}"
    if getattr(operator, getattr(fn, "__name__", ""), None) is fn:
        return f"operator.{fn.__name__}"
    module = getattr(fn, "__module__", None) or "<unknown>"
    return f"{module}.{getattr(fn, '__qualname__', getattr(fn, '__name__', repr(fn)))}"


def _format_arg(arg, max_list_len=float("inf")):
    if isinstance(arg, Node):
        return "%" + arg.name
    if isinstance(arg, tuple) and not hasattr(arg, "_fields"):
        items = ", ".join(_format_arg(a) for a in arg)
        return f"({items},)" if len(arg) == 1 else f"({items})"
    if isinstance(arg, list):
        return "[" + ", ".join(_format_arg(a) for a in arg) + "]"
    if isinstance(arg, dict):
        return "{" + ", ".join(f"{k}: {_format_arg(v)}" for k, v in arg.items()) + "}"
    if isinstance(arg, (types.FunctionType, types.BuiltinFunctionType)):
        return _qualified_name(arg)
    return str(arg)


class Node:
    """One operation of a ``Graph``: ``op``, ``target``, ``args``, ``kwargs``, ``users``.

    Nodes are made by the graph (``Graph.create_node`` and its helpers), never directly.
    ``repr(node)`` is its name, which is also the variable the generated code binds.

    Examples
    --------
    >>> from lucid.fx import Graph
    >>> g = Graph()
    >>> x = g.placeholder("x")
    >>> y = g.call_method("relu", (x,))
    >>> _ = g.output(y)
    >>> y.op, y.target, y.args, list(x.users)
    ('call_method', 'relu', (x,), [relu])
    >>> y.format_node()
    '%relu : [num_users=1] = call_method[target=relu](args = (%x,), kwargs = {})'
    """

    def __init__(self, graph, name, op, target, args, kwargs, return_type=None):
        if op not in ("placeholder", "call_method", "call_module", "call_function", "get_attr",
                      "output", "root"):
            raise ValueError(f"Node: unknown opcode {op!r}")
        if op == "call_function" and not callable(target):
            raise ValueError(f"Node [graph = {graph}, name = '{name}'] target {target} has type "
                             f"{type(target).__name__} but a Callable is expected")
        if op in ("placeholder", "call_method", "call_module", "get_attr") and not isinstance(target, str):
            raise ValueError(f"Node [graph = {graph}, name = '{name}'] target {target} has type "
                             f"{type(target).__name__} but a str is expected")
        self.graph = graph
        self.name = name
        self.op = op
        self.target = target
        self._input_nodes = {}
        self.users = {}
        self.type = return_type
        self._prev = self._next = self
        self._erased = False
        self.meta = {}
        self._args, self._kwargs = (), {}
        self.__update_args_kwargs(args, kwargs)

    # ---------------------------------------------------------------- list links
    @property
    def next(self):
        """The node after this one in the graph (the graph's root sentinel at the end)."""
        return self._next

    @property
    def prev(self):
        """The node before this one in the graph."""
        return self._prev

    def prepend(self, x):
        """Move (or insert) node ``x`` just before this node."""
        if x is self:
            raise ValueError("Node.prepend: cannot prepend a node to itself")
        x._remove_from_list()
        p = self._prev
        p._next, x._prev = x, p
        x._next, self._prev = self, x

    def append(self, x):
        """Move (or insert) node ``x`` just after this node."""
        self._next.prepend(x)

    def _remove_from_list(self):
        p, n = self._prev, self._next
        p._next, n._prev = n, p
        self._prev = self._next = self

    # ---------------------------------------------------------------- arguments
    @property
    def args(self):
        """The positional arguments; nodes inside are uses of their values."""
        return self._args

    @args.setter
    def args(self, a):
        self.__update_args_kwargs(a, self._kwargs)

    @property
    def kwargs(self):
        """The keyword arguments; nodes inside are uses of their values."""
        return self._kwargs

    @kwargs.setter
    def kwargs(self, k):
        self.__update_args_kwargs(self._args, k)

    @property
    def all_input_nodes(self):
        """The distinct nodes this node's arguments use, in order of first appearance."""
        return list(self._input_nodes)

    def update_arg(self, idx, arg):
        """Set positional argument ``idx`` to ``arg``."""
        args = list(self._args)
        args[idx] = arg
        self.args = tuple(args)

    def insert_arg(self, idx, arg):
        """Insert positional argument ``arg`` at index ``idx`` (0 <= idx <= len(args))."""
        if not 0 <= idx <= len(self._args):
            raise IndexError(f"insert_arg: index {idx} out of range for {len(self._args)} positional args")
        self.args = self._args[:idx] + (arg,) + self._args[idx:]

    def update_kwarg(self, key, arg):
        """Set keyword argument ``key`` to ``arg``."""
        self.kwargs = {**self._kwargs, key: arg}

    def __update_args_kwargs(self, new_args, new_kwargs):
        for old in self._input_nodes:
            old.users.pop(self, None)
        self._input_nodes = {}
        self._args = _freeze(tuple(new_args)) if new_args is not None else ()
        self._kwargs = _freeze(dict(new_kwargs)) if new_kwargs is not None else immutable_dict()

        def note(n):
            if n.graph is not self.graph and self.op != "root":
                raise RuntimeError(f"Node: argument {n} of {self.name} belongs to another graph")
            self._input_nodes.setdefault(n)
            return n

        map_arg(self._args, note)
        map_arg(self._kwargs, note)
        for n in self._input_nodes:
            n.users.setdefault(self)

    def replace_all_uses_with(self, replace_with, delete_user_cb=lambda user: True, *,
                              propagate_meta=False):
        """Make every user of this node use ``replace_with`` instead; returns those users.

        ``delete_user_cb(user)`` returning False keeps that user on this node.
        """
        if propagate_meta:
            if replace_with.meta:
                raise _FxAssertionError("Node.replace_all_uses_with: propagate_meta needs a node with empty "
                                        "meta, but replace_with already has .meta keys")
            replace_with.meta.update(self.meta)
        changed = []
        for user in list(self.users):
            if user is replace_with or not delete_user_cb(user):
                continue
            user.replace_input_with(self, replace_with)
            changed.append(user)
        return changed

    def replace_input_with(self, old_input, new_input):
        """Use ``new_input`` wherever this node's arguments use ``old_input``."""
        swap = lambda n: new_input if n is old_input else n  # noqa: E731
        self.__update_args_kwargs(map_arg(self._args, swap), map_arg(self._kwargs, swap))

    # ---------------------------------------------------------------- properties
    def is_impure(self, impure_random=True):
        """Whether dead-code elimination must keep this node even without users."""
        if self.op in ("placeholder", "output"):
            return True
        # Unlike torch.fx, whose DCE drops them, in-place calls (``x.add_(1)``, ``lucid.relu_(x)``,
        # ``F.relu(x, inplace=True)``, ``nn.ReLU(inplace=True)``) mutate their operand: kept.
        if self.op == "call_function":
            if self.target in _side_effectful_functions or _is_inplace_function(self.target, self.kwargs):
                return True
            return bool(impure_random and _is_random_function(self.target))
        if self.op == "call_method":  # ``add_`` and the in-place dunders (``__iand__``)
            return (self.target.endswith("_") and not self.target.endswith("__")) or \
                self.target in _INPLACE_DUNDERS
        if self.op == "call_module" and self.graph.owning_module is not None:
            try:
                mod = self.graph.owning_module.get_submodule(self.target)
            except AttributeError:
                return False
            return bool(getattr(mod, "_is_impure", False)) or getattr(mod, "inplace", False) is True
        return False

    @property
    def stack_trace(self):
        """Where the traced call came from (``meta["stack_trace"]``), or None."""
        return self.meta.get("stack_trace")

    def _pretty_print_target(self):
        if self.op == "call_function" or not isinstance(self.target, str):
            return _qualified_name(self.target)
        return self.target

    def format_node(self, placeholder_names=None, maybe_return_typename=None):
        """The node as one line of ``print(graph)``; None for the root sentinel.

        ``placeholder_names`` (a list) collects placeholder names and they print nothing,
        as in torch.fx.
        """
        if self.op == "placeholder":
            if placeholder_names is not None:
                placeholder_names.append(self.target)
                return None
            default = f"(default={self.args[0]})" if self.args else ""
            return f"%{self.name} : [num_users={len(self.users)}] = placeholder[target={self.target}]{default}"
        if self.op == "get_attr":
            return f"%{self.name} : [num_users={len(self.users)}] = get_attr[target={self._pretty_print_target()}]"
        if self.op == "output":
            return f"return {self.args[0]}" if self.args else "return None"
        if self.op == "root":
            return None
        return (f"%{self.name} : [num_users={len(self.users)}] = {self.op}[target={self._pretty_print_target()}]"
                f"(args = {_format_arg(self.args)}, kwargs = {_format_arg(self.kwargs)})")

    def __repr__(self):
        return self.name

    # Lucid's public functions are often wrapped objects that pickle cannot find by their
    # ``__qualname__``: a pickled node stores their public path instead.
    def __getstate__(self):
        state = dict(self.__dict__)
        if self.op == "call_function":
            from .graph import _public_lucid_name

            path = _public_lucid_name(self.target)
            if path is not None:
                state["target"] = _PublicFunction(path)
        return state

    def __setstate__(self, state):
        if isinstance(state.get("target"), _PublicFunction):
            state["target"] = state["target"].resolve()
        self.__dict__.update(state)


class _PublicFunction:
    def __init__(self, path):
        self.path = path

    def resolve(self):
        import importlib

        module, _, name = self.path.rpartition(".")
        return getattr(importlib.import_module(module), name)
