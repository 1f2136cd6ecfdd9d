"""``Interpreter`` (run a graph node by node) and ``Transformer`` (rewrite it while running).

Each node kind has its own overridable method (``placeholder``, ``get_attr``,
``call_function``, ``call_module``, ``call_method``, ``output``), called by ``run_node`` with
the node's target and its arguments already replaced by their values.
"""
from __future__ import annotations

import contextlib
import inspect

from .graph import Graph
from .graph_module import GraphModule
from .node import map_aggregate, map_arg
from .proxy import Proxy, TracerBase

__all__ = ["Interpreter", "Transformer"]


class Interpreter:
    """Run ``module``'s graph one node at a time.

    Parameters
    ----------
    module : Module
        The owner of the graph's targets (usually a GraphModule).
    garbage_collect_values : bool
        Drop each value after its last use (as the generated code does).
    graph : Graph, optional
        The graph to run (default ``module.graph``).

    Examples
    --------
    >>> import lucid
    >>> from lucid.fx import Interpreter, symbolic_trace
    >>> gm = symbolic_trace(lambda x: lucid.exp(x) - 1)
    >>> class Count(Interpreter):
    ...     calls = 0
    ...     def call_function(self, target, args, kwargs):
    ...         Count.calls += 1
    ...         return super().call_function(target, args, kwargs)
    >>> Count(gm).run(lucid.tensor([0.0]))
    tensor([0.])
    >>> Count.calls
    2
    """

    def __init__(self, module, garbage_collect_values=True, graph=None):
        self.module = module
        self.graph = graph if graph is not None else module.graph
        self.env = {}
        self.name = "Interpreter"
        self.garbage_collect_values = garbage_collect_values
        self.extra_traceback = True
        self.user_to_last_uses = {}
        if garbage_collect_values:
            last = {}
            for node in self.graph.nodes:
                for inp in node._input_nodes:
                    last[inp] = node
            for value, user in last.items():
                self.user_to_last_uses.setdefault(user, []).append(value)

    def run(self, *args, initial_env=None, enable_io_processing=True):
        """Run the graph on ``args`` and return what its output node returns."""
        self.env = dict(initial_env) if initial_env is not None else {}
        self.args_iter = iter(args)
        for node in self.graph.nodes:
            if node in self.env:
                continue  # given by initial_env
            try:
                self.env[node] = self.run_node(node)
            except Exception as e:
                if self.extra_traceback and not getattr(e, "_fx_noted", False):
                    msg = f"While executing {node.format_node()}"
                    e.args = ((f"{e.args[0]}\n\n{msg}",) + e.args[1:]) if e.args and isinstance(e.args[0], str) \
                        else e.args
                    e._fx_noted = True
                raise
            for to_delete in self.user_to_last_uses.get(node, []):
                self.env.pop(to_delete, None)
            if node.op == "output":
                return self.env[node]
        return None

    def boxed_run(self, args_list):
        """Run the graph on the inputs in ``args_list``, which is emptied first so that the
        caller's references do not keep the inputs alive (PyTorch's "boxed" convention)."""
        placeholders = [n for n in self.graph.nodes if n.op == "placeholder"]
        if len(args_list) != len(placeholders):
            detail = "extra arguments" if len(args_list) > len(placeholders) else "missing arguments"
            raise RuntimeError(f"Interpreter.boxed_run expected {len(placeholders)} arguments for placeholders "
                               f"but received {len(args_list)} ({detail})")
        env = dict(zip(placeholders, args_list))
        args_list.clear()
        return self.run(initial_env=env)

    @contextlib.contextmanager
    def _set_current_node(self, node):
        self.current_node = node
        yield

    def run_node(self, n):
        """Run one node: fetch its argument values, then call the method named by ``n.op``."""
        with self._set_current_node(n):
            args, kwargs = self.fetch_args_kwargs_from_env(n)
            return getattr(self, n.op)(n.target, args, kwargs)

    # ------------------------------------------------------------- node kinds
    def placeholder(self, target, args, kwargs):
        """The next positional input (or the placeholder's default)."""
        if target.startswith("*"):
            return list(self.args_iter)
        try:
            return next(self.args_iter)
        except StopIteration:
            if args:
                return args[0]
            raise RuntimeError(f"Expected positional argument for parameter {target}, but one was not passed in!")

    def get_attr(self, target, args, kwargs):
        """``self.module.<target>``."""
        return self.fetch_attr(target)

    def call_function(self, target, args, kwargs):
        """``target(*args, **kwargs)``."""
        return target(*args, **kwargs)

    def call_method(self, target, args, kwargs):
        """``args[0].<target>(*args[1:], **kwargs)``."""
        self_obj, *args_tail = args
        return getattr(self_obj, target)(*args_tail, **kwargs)

    def call_module(self, target, args, kwargs):
        """``self.module.<target>(*args, **kwargs)``."""
        return self.fetch_attr(target)(*args, **kwargs)

    def output(self, target, args, kwargs):
        """The graph's result."""
        return args[0]

    # ------------------------------------------------------------- helpers
    def fetch_attr(self, target):
        """Walk the dotted ``target`` from ``self.module``."""
        attr_itr = self.module
        for i, atom in enumerate(target.split(".")):
            if not hasattr(attr_itr, atom):
                raise RuntimeError(f"Node referenced nonexistent target {'.'.join(target.split('.')[:i + 1])}")
            attr_itr = getattr(attr_itr, atom)
        return attr_itr

    def fetch_args_kwargs_from_env(self, n):
        """``n``'s args and kwargs with every node replaced by its computed value."""
        return self.map_nodes_to_values(n.args, n), self.map_nodes_to_values(n.kwargs, n)

    def map_nodes_to_values(self, args, n):
        def load(n_arg):
            if n_arg not in self.env:
                raise RuntimeError(f"Node {n} referenced nonexistent value {n_arg}! Run Graph.lint() "
                                   "to diagnose such issues")
            return self.env[n_arg]
        return map_arg(args, load)


class _TransformerTracer(TracerBase):
    def __init__(self, graph):
        self.graph = graph

    def create_arg(self, a):
        import lucid

        def leaf(x):
            if isinstance(x, Proxy):
                return x.node
            if isinstance(x, lucid.Tensor):
                raise RuntimeError("Transformer: a tensor value cannot become a graph argument; "
                                   "read it with get_attr instead")
            return x
        return map_aggregate(a, leaf)


class Transformer(Interpreter):
    """Run the graph on Proxies to build a new one: override the node methods to rewrite.

    ``transform()`` returns a new GraphModule. The overrides see Lucid's functions unpatched
    (so ``target is lucid.relu`` works); to emit a new call, pass it to ``super()``'s method
    (``super().call_function(lucid.tanh, args, kwargs)``) or use the Proxies' operators and
    methods (``args[0].sigmoid() * 2``): a Lucid function called directly on a Proxy here is
    not recorded (NOTE [Tracing without __torch_function__]).

    Examples
    --------
    >>> import lucid
    >>> from lucid.fx import Transformer, symbolic_trace
    >>> gm = symbolic_trace(lambda x: lucid.relu(x) * 2)
    >>> class ReluToTanh(Transformer):
    ...     def call_function(self, target, args, kwargs):
    ...         if target is lucid.relu:
    ...             target = lucid.tanh
    ...         return super().call_function(target, args, kwargs)
    >>> new = ReluToTanh(gm).transform()
    >>> new(lucid.tensor([-1.0]))
    tensor([-1.5231884])
    """

    def __init__(self, module):
        super().__init__(module, garbage_collect_values=False)
        self.new_graph = Graph()
        self.tracer = _TransformerTracer(self.new_graph)
        self.tracer.root = module

    def placeholder(self, target, args, kwargs):
        default = next(iter(self.graph.find_nodes(op="placeholder", target=target))).args
        return Proxy(self.new_graph.placeholder(target, default_value=default[0] if default else
                                                inspect.Signature.empty), self.tracer)

    def get_attr(self, target, args, kwargs):
        return self.tracer.create_proxy("get_attr", target, args, kwargs)

    def call_module(self, target, args, kwargs):
        return self.tracer.create_proxy("call_module", target, args, kwargs)

    def call_function(self, target, args, kwargs):
        return self.tracer.create_proxy("call_function", target, args, kwargs)

    def call_method(self, target, args, kwargs):
        return self.tracer.create_proxy("call_method", target, args, kwargs)

    def transform(self):
        """Build and return the rewritten GraphModule."""
        result = self._run_symbolic()
        self.new_graph.output(self.tracer.create_arg(result))
        return GraphModule(self.module, self.new_graph)

    def _run_symbolic(self):
        self.env = {}
        for node in self.graph.nodes:
            self.env[node] = self.run_node(node)
            if node.op == "output":
                return self.env[node]
        return None
