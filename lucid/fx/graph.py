"""``Graph``: FX's intermediate representation, a list of ``Node`` s, and its Python code.

NOTE [FX code generation]
``Graph.python_code`` writes one statement per node (``conv = self.conv(x);  x = None``): the
variable of a node is its name; a value is released (``= None``) after its last use, as
torch.fx does, so the generated forward keeps no more tensors alive than the graph needs.
Functions of Lucid's public namespaces print as their public path (``lucid.tanh``,
``lucid.nn.functional.relu``) and resolve through the one global ``lucid``; operators print
infix; any other callable or non-literal constant becomes a named global of the generated
module (``PythonCode.globals``). Names are unique within the graph and never shadow Python
keywords, builtins, ``self`` or ``lucid`` (a second ``sum`` is ``sum_1``, as in torch.fx), so
the text is valid, deterministic Python.
"""
from __future__ import annotations

import builtins
import copy
import inspect
import keyword
import math
import operator
import re

from .node import Node, _format_arg, map_arg

__all__ = ["Graph", "PythonCode"]

_PUBLIC_NAMESPACES = ("lucid", "lucid.nn.functional", "lucid.linalg", "lucid.special", "lucid.fft")
_PUBLIC_CACHE = {}


def _same_public(public, fn):
    # once the dispatch protocol is on, the namespace holds a wrapper of what a trace recorded
    return public is fn or (public is not None and getattr(public, "_lucid_original", None) is fn)


def _public_lucid_name(fn):
    """``fn``'s path in Lucid's public namespaces (``"lucid.nn.functional.relu"``) or None."""
    import importlib
    import sys

    original = getattr(fn, "__fx_original__", fn)
    for ns_name in _PUBLIC_NAMESPACES:
        ns = sys.modules.get(ns_name)
        if ns is None:
            if ns_name != "lucid.nn.functional" and "lucid.nn" not in sys.modules:
                continue
            ns = importlib.import_module(ns_name)
        name = getattr(original, "__name__", None)
        if isinstance(name, str) and _same_public(ns.__dict__.get(name), original):
            return f"{ns_name}.{name}"
        table = _PUBLIC_CACHE.get(ns_name)
        if table is None or table[0] != len(ns.__dict__):
            table = (len(ns.__dict__), {id(v): k for k, v in ns.__dict__.items()
                                        if callable(v) and not k.startswith("_")})
            _PUBLIC_CACHE[ns_name] = table
        key = table[1].get(id(original))
        if key is not None and _same_public(ns.__dict__.get(key), original):
            return f"{ns_name}.{key}"
    return None


# Infix forms, as torch.fx prints ``operator`` targets.
_MAGIC = {"add": "{} + {}", "sub": "{} - {}", "mul": "{} * {}", "floordiv": "{} // {}",
          "truediv": "{} / {}", "mod": "{} % {}", "pow": "{} ** {}", "lshift": "{} << {}",
          "rshift": "{} >> {}", "and_": "{} & {}", "or_": "{} | {}", "xor": "{} ^ {}",
          "getitem": "{}[{}]", "matmul": "{} @ {}", "eq": "{} == {}", "ne": "{} != {}",
          "lt": "{} < {}", "gt": "{} > {}", "le": "{} <= {}", "ge": "{} >= {}", "pos": "+{}",
          "neg": "-{}", "invert": "~{}", "abs": "abs({})"}

_RESERVED = set(keyword.kwlist) | set(dir(builtins)) | {"self", "lucid", "inf", "nan"}


def _snake(name):
    name = re.sub(r"[^0-9a-zA-Z_]+", "_", name)
    name = re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", name).lower()
    if not name or name[0].isdigit():
        name = "_" + name
    return name


class _Namespace:
    """Unique Python identifiers: ``relu``, ``relu_1``, ... (reserved words get ``_1`` at once)."""

    def __init__(self):
        self._used = set()
        self._counts = {}

    def create_name(self, candidate):
        base = _snake(candidate)
        match = re.match(r"(.*)_(\d+)$", base)
        if match and base in self._used:
            base = match.group(1)
        if base not in self._used and base not in _RESERVED:
            self._used.add(base)
            return base
        n = self._counts.get(base, 0)
        while True:
            n += 1
            name = f"{base}_{n}"
            if name not in self._used and name not in _RESERVED:
                break
        self._counts[base] = n
        self._used.add(name)
        return name

    def reserve(self, name):
        self._used.add(name)


def _target_name(target):
    if isinstance(target, str):
        # a method named by a dunder string (``"__call__"``) names its node without them, as torch.fx's
        if len(target) > 4 and target.startswith("__") and target.endswith("__"):
            return target[2:-2]
        return target
    return getattr(target, "__name__", type(target).__name__)


class PythonCode:
    """Generated source: ``src`` (a ``def forward(self, ...)``) and the ``globals`` it needs."""

    def __init__(self, src, globals):
        self.src = src
        self.globals = globals


class _NodeList:
    def __init__(self, graph, reverse=False):
        self._graph, self._reverse = graph, reverse

    def __len__(self):
        return self._graph._len

    def __iter__(self):
        root = self._graph._root
        cur = root._prev if self._reverse else root._next
        while cur is not root:
            nxt = cur._prev if self._reverse else cur._next
            if not cur._erased:
                yield cur
            cur = nxt

    def __reversed__(self):
        return iter(_NodeList(self._graph, not self._reverse))


class _InsertPoint:
    def __init__(self, graph, insert):
        self.graph, self.orig = graph, graph._insert
        graph._insert = insert

    def __enter__(self):
        return None

    def __exit__(self, *exc):
        self.graph._insert = self.orig


class Graph:
    """A list of ``Node`` s in execution order: placeholders, calls, one output.

    Examples
    --------
    >>> import lucid
    >>> from lucid.fx import Graph
    >>> g = Graph()
    >>> x = g.placeholder("x")
    >>> t = g.call_function(lucid.tanh, (x,))
    >>> _ = g.output(g.call_function(lucid.add, (t, 1.0)))
    >>> print(g)
    graph(x):
        %tanh : [num_users=1] = call_function[target=lucid.tanh](args = (%x,), kwargs = {})
        %add : [num_users=1] = call_function[target=lucid.add](args = (%tanh, 1.0), kwargs = {})
        return add
    """

    def __init__(self, owning_module=None, tracer_cls=None, tracer_extras=None):
        self._root = Node(self, "", "root", "", (), {})
        self._len = 0
        self._graph_namespace = _Namespace()
        self._owning_module = owning_module
        self._tracer_cls = tracer_cls
        self._tracer_extras = tracer_extras
        self._insert = self._root.prepend

    @property
    def owning_module(self):
        """The GraphModule this graph belongs to (None for a free graph)."""
        return self._owning_module

    @owning_module.setter
    def owning_module(self, mod):
        self._owning_module = mod

    @property
    def nodes(self):
        """The nodes in order (iterable, ``len`` and ``reversed`` work)."""
        return _NodeList(self)

    def find_nodes(self, *, op, target=None, sort=True):
        """The nodes with opcode ``op`` (and ``target``, when given), in graph order (``sort``
        is accepted for PyTorch's signature: the scan is always in order)."""
        return [n for n in self.nodes if n.op == op and (target is None or n.target == target)]

    def output_node(self):
        """The graph's output node (the last node)."""
        last = next(iter(reversed(self.nodes)), None)
        if last is None or last.op != "output":
            raise RuntimeError(f"output_node: the last node of the graph is not an output node: {last}")
        return last

    # ------------------------------------------------------------------ building
    def create_node(self, op, target, args=None, kwargs=None, name=None, type_expr=None):
        """Insert a node at the current insert point (the end, unless ``inserting_*``)."""
        candidate = name if name is not None else self._candidate(op, target)
        name = self._graph_namespace.create_name(candidate)
        n = Node(self, name, op, target, args, kwargs, type_expr)
        self._insert(n)
        self._len += 1
        return n

    @staticmethod
    def _candidate(op, target):
        if op == "call_module" or op == "get_attr":
            return target.replace(".", "_")
        if op == "output":
            return "output"
        return _target_name(target)

    def placeholder(self, name, type_expr=None, default_value=inspect.Signature.empty):
        """An input of the graph called ``name`` (``default_value`` makes it optional)."""
        args = () if default_value is inspect.Signature.empty else (default_value,)
        return self.create_node("placeholder", name, args=args, type_expr=type_expr)

    def get_attr(self, qualified_name, type_expr=None):
        """Read ``self.<qualified_name>`` (a parameter, buffer or constant of the module)."""
        return self.create_node("get_attr", qualified_name, type_expr=type_expr)

    def call_module(self, module_name, args=None, kwargs=None, type_expr=None):
        """Call the submodule ``module_name`` of the owning module."""
        return self.create_node("call_module", module_name, args, kwargs, type_expr=type_expr)

    def call_method(self, method_name, args=None, kwargs=None, type_expr=None):
        """Call ``args[0].<method_name>(*args[1:], **kwargs)``."""
        return self.create_node("call_method", method_name, args, kwargs, type_expr=type_expr)

    def call_function(self, the_function, args=None, kwargs=None, type_expr=None):
        """Call ``the_function(*args, **kwargs)``."""
        return self.create_node("call_function", the_function, args, kwargs, type_expr=type_expr)

    def output(self, result, type_expr=None):
        """The value the graph returns."""
        return self.create_node("output", "output", (result,), type_expr=type_expr)

    def inserting_before(self, n=None):
        """Context (or plain call) making new nodes go before ``n`` (default: the start)."""
        if n is None:
            return self.inserting_after(self._root)
        if n.graph is not self:
            raise ValueError("inserting_before: node is not in this graph")
        return _InsertPoint(self, n.prepend)

    def inserting_after(self, n=None):
        """Context (or plain call) making new nodes go after ``n`` (default: the end)."""
        if n is None:
            return self.inserting_before(self._root)
        if n.graph is not self:
            raise ValueError("inserting_after: node is not in this graph")
        return _InsertPoint(self, n.append)

    def erase_node(self, to_erase):
        """Remove a node that has no users."""
        if len(to_erase.users) > 0:
            raise RuntimeError(f"Tried to erase Node {to_erase} but it still had {len(to_erase.users)} "
                               f"users in the graph: {to_erase.users}!")
        if to_erase.graph is not self:
            raise RuntimeError(f"erase_node: node {to_erase} does not belong to this graph")
        if to_erase._erased:
            return
        to_erase._remove_from_list()
        to_erase._erased = True
        self._len -= 1
        to_erase.args, to_erase.kwargs = (), {}

    def node_copy(self, node, arg_transform=lambda x: x):
        """Copy ``node`` (from any graph) into this one, mapping its node arguments."""
        args = map_arg(node.args, arg_transform)
        kwargs = map_arg(node.kwargs, arg_transform)
        result = self.create_node(node.op, node.target, args, kwargs, node.name, node.type)
        result.meta = copy.copy(node.meta)
        return result

    def graph_copy(self, g, val_map, return_output_node=False):
        """Copy every node of ``g`` but its output into this graph; returns the output's value.

        ``val_map`` maps ``g``'s nodes to this graph's (pre-filled entries are used as is, e.g.
        to bind placeholders) and is filled with the copies.
        """
        for node in g.nodes:
            if node in val_map:
                continue
            if node.op == "output":
                rv = map_arg(node.args[0], lambda n: val_map[n])
                return (rv, node) if return_output_node else rv
            val_map[node] = self.node_copy(node, lambda n: val_map[n])
        return None

    def __deepcopy__(self, memo):
        g = Graph(tracer_cls=self._tracer_cls)
        val_map = {}
        out = g.graph_copy(self, val_map, return_output_node=True)
        if out is not None:
            rv, old_out = out
            g.output(rv, type_expr=old_out.type).meta = copy.copy(old_out.meta)
        return g

    def eliminate_dead_code(self, is_impure_node=None):
        """Erase nodes without users that have no effect; returns whether any was erased."""
        changed = False
        for node in reversed(self.nodes):
            impure = is_impure_node(node) if is_impure_node is not None else node.is_impure()
            if not impure and len(node.users) == 0:
                self.erase_node(node)
                changed = True
        return changed

    # ------------------------------------------------------------------ checking
    def lint(self):
        """Check that nodes belong here, are in topological order, have unique names and
        that get_attr/call_module targets exist on the owning module."""
        seen, names = set(), set()
        for node in self.nodes:
            if node.graph is not self:
                raise RuntimeError(f"lint: node {node} does not belong to this graph")
            for arg in node._input_nodes:
                if arg.graph is not self:
                    raise RuntimeError(f"Argument '{arg}' of Node '{node}' does not belong to this Graph")
                if arg not in seen:
                    raise RuntimeError(f"Argument '{arg}' of Node '{node}' was used before it has been defined!")
            if node.name in names:
                raise RuntimeError(f"lint: node name {node.name!r} is used twice")
            seen.add(node)
            names.add(node.name)
        outputs = [n for n in self.nodes if n.op == "output"]
        if len(outputs) > 1:
            raise RuntimeError("lint: a graph has at most one output node")
        mod = self._owning_module
        if mod is None:
            return
        for node in self.nodes:
            if node.op not in ("get_attr", "call_module"):
                continue
            m_itr = mod
            for i, atom in enumerate(node.target.split(".")):
                if not hasattr(m_itr, atom):
                    seen_qualname = ".".join(node.target.split(".")[:i])
                    raise RuntimeError(f"Node {node} target {node.target} references nonexistent "
                                       f"attribute {atom} of {seen_qualname or 'the root'}")
                m_itr = getattr(m_itr, atom)
            from ..nn import Module

            if node.op == "call_module" and not isinstance(m_itr, Module):
                raise RuntimeError(f"Node {node} target {node.target} {atom} is not a Module")

    # ------------------------------------------------------------------ printing
    def __str__(self):
        placeholder_names = []
        lines = [n.format_node(placeholder_names) for n in self.nodes]
        s = f"graph({', '.join(placeholder_names)}):"
        for line in lines:
            if line:
                s += "\n    " + line
        return s

    def print_tabular(self):
        """Print the nodes as a table (opcode, name, target, args, kwargs).

        Uses ``tabulate`` when installed; otherwise prints the same layout itself (tabulate's
        "simple" format), where torch.fx would raise.
        """
        rows = [[n.op, n.name, n._pretty_print_target() if n.op == "call_function" else str(n.target),
                 _format_arg(n.args).replace("%", ""), _format_arg(n.kwargs).replace("%", "")]
                for n in self.nodes]
        headers = ["opcode", "name", "target", "args", "kwargs"]
        try:
            from tabulate import tabulate
        except ImportError:
            widths = [max([len(h)] + [len(r[i]) for r in rows]) for i, h in enumerate(headers)]
            fmt = lambda cells: "  ".join(c.ljust(w) for c, w in zip(cells, widths)).rstrip()  # noqa: E731
            print("\n".join([fmt(headers), fmt(["-" * w for w in widths])] + [fmt(r) for r in rows]))
            return
        print(tabulate(rows, headers=headers))

    # ------------------------------------------------------------------ codegen
    def python_code(self, root_module="self"):
        """Generate ``def forward(root_module, ...)`` for this graph (NOTE [FX code generation])."""
        return _CodeGen(self, root_module).generate()


def _format_target(base, target):
    out = base
    for atom in target.split("."):
        out = f"{out}.{atom}" if atom.isidentifier() and not keyword.iskeyword(atom) else \
            f'getattr({out}, "{atom}")'
    return out


class _CodeGen:
    def __init__(self, graph, root_module):
        self.graph, self.root = graph, root_module
        import lucid

        self.globals = {"lucid": lucid, "inf": math.inf, "nan": math.nan}
        self._global_names = {}
        self._ns = _Namespace()
        for n in graph.nodes:
            self._ns.reserve(n.name)

    def add_global(self, hint, obj):
        key = id(obj)
        if key in self._global_names:
            return self._global_names[key]
        name = self._ns.create_name(hint)
        self.globals[name] = obj
        self._global_names[key] = name
        return name

    def repr_arg(self, a):
        if isinstance(a, Node):
            return a.name
        if isinstance(a, tuple) and not hasattr(a, "_fields"):
            items = ", ".join(self.repr_arg(e) for e in a)
            return f"({items},)" if len(a) == 1 else f"({items})"
        if isinstance(a, tuple):
            return f"{self.add_global(type(a).__name__, type(a))}({', '.join(self.repr_arg(e) for e in a)})"
        if isinstance(a, list):
            return "[" + ", ".join(self.repr_arg(e) for e in a) + "]"
        if isinstance(a, dict):
            return "{" + ", ".join(f"{self.repr_arg(k)}: {self.repr_arg(v)}" for k, v in a.items()) + "}"
        if isinstance(a, slice):
            return f"slice({self.repr_arg(a.start)}, {self.repr_arg(a.stop)}, {self.repr_arg(a.step)})"
        if a is None or a is Ellipsis or isinstance(a, (bool, int, str, bytes)):
            return repr(a)
        if isinstance(a, (float, complex)):
            r = repr(a)
            return r if "inf" not in r and "nan" not in r else f"{type(a).__name__}('{a}')"
        return self._repr_object(a)

    def _repr_object(self, a):
        import lucid

        if isinstance(a, lucid.dtype):
            r = repr(a)
            return r if r.startswith("lucid.") else f"lucid.{a}"
        if isinstance(a, lucid.device):
            return f"lucid.device({str(a)!r})"
        if callable(a):
            public = _public_lucid_name(a)
            if public is not None:
                return public
            if getattr(builtins, getattr(a, "__name__", ""), None) is a:
                return a.__name__
        return self.add_global(getattr(a, "__name__", type(a).__name__), a)

    def call_text(self, fn, args, kwargs):
        parts = [self.repr_arg(a) for a in args] + [f"{k} = {self.repr_arg(v)}" for k, v in kwargs.items()]
        return f"{fn}({', '.join(parts)})"

    def node_text(self, node):
        name, target = node.name, node.target
        if node.op == "placeholder":
            return None if name == target.lstrip("*") else f"{name} = {target.lstrip('*')}"
        if node.op == "get_attr":
            return f"{name} = {_format_target(self.root, target)}"
        if node.op == "call_module":
            return f"{name} = {self.call_text(_format_target(self.root, target), node.args, node.kwargs)}"
        if node.op == "call_method":
            obj, *rest = node.args
            return f"{name} = {self.call_text(f'{self.repr_arg(obj)}.{target}', rest, node.kwargs)}"
        if node.op == "output":
            return f"return {self.repr_arg(node.args[0])}"
        if target is operator.setitem and len(node.args) == 3 and not node.kwargs:
            # a statement, printed as torch.fx prints it; the node stands for the mutated object
            obj, key, value = (self.repr_arg(a) for a in node.args)
            return f"{obj}[{key}] = {value};  {name} = {obj}"
        return f"{name} = {self.function_text(node)}"

    def function_text(self, node):
        target, args, kwargs = node.target, node.args, node.kwargs
        tname = getattr(target, "__name__", "")
        if getattr(target, "__module__", "") in ("_operator", "operator") and tname in _MAGIC and not kwargs:
            fmt = _MAGIC[tname]
            if fmt.count("{}") == len(args):
                return fmt.format(*(self.repr_arg(a) for a in args))
        if target is builtins.getattr and len(args) == 2 and isinstance(args[1], str) \
                and args[1].isidentifier() and not kwargs:
            return f"{self.repr_arg(args[0])}.{args[1]}"
        return self.call_text(self._repr_object(target), args, kwargs)

    def signature(self):
        params = []
        for n in self.graph.nodes:
            if n.op != "placeholder":
                continue
            target = n.target
            if target.startswith("*"):
                params.append(target)
            elif n.args:
                params.append(f"{target} = {self.repr_arg(n.args[0])}")
            else:
                params.append(target)
        return f"def forward({', '.join([self.root] + params)}):"

    def generate(self):
        nodes = list(self.graph.nodes)
        to_free, seen = {}, set()
        for node in reversed(nodes):  # a value's last user frees it, in that user's argument order
            for inp in node._input_nodes:
                if inp not in seen:
                    seen.add(inp)
                    if node.op != "output":
                        to_free.setdefault(node, []).append(inp)
        body = []
        for node in nodes:
            line = self.node_text(node)
            if line is None:
                continue
            frees = [v.name for v in to_free.get(node, [])]
            if node.op not in ("output", "placeholder") and not node.users:
                frees.append(node.name)
            if frees:
                line += ";  " + " = ".join(frees) + " = None"
            body.append(line)
        if not any(n.op == "output" for n in nodes):
            body.append("return None")
        src = self.signature() + "\n" + "".join(f"    {line}\n" for line in body)
        return PythonCode(src, self.globals)
