"""``Proxy``: the stand-in value symbolic tracing passes through user code (``torch.fx.Proxy``).

Every operation on a Proxy appends a node to the tracer's graph and returns a new Proxy: Python
operators become ``call_function`` nodes on ``operator`` functions, attribute reads
``getattr`` nodes, method calls ``call_method`` nodes; ``x += y`` and ``x[i] = v`` are recorded too
(NOTE [In-place operators on a Proxy]). What needs a concrete value (``bool``,
``len``, iteration, ``numpy.asarray``) raises ``TraceError``.
"""
from __future__ import annotations

import dis
import inspect
import operator

from .node import map_aggregate

__all__ = ["Proxy", "Attribute", "ParameterProxy", "TraceError", "TracerBase", "GraphAppendingTracer"]

_CONTROL_FLOW = "symbolically traced variables cannot be used as inputs to control flow"


class TraceError(ValueError):
    """Symbolic tracing met an operation that needs a concrete value (``torch.fx.proxy.TraceError``)."""


# torch.fx raises RuntimeError for ``len(proxy)`` and Python's TypeError for ``int(proxy)`` /
# ``[...][proxy]`` (a Proxy has no ``__index__``); Lucid's TraceError (a ValueError) came first,
# so these derive from both.
class _LenTraceError(TraceError, RuntimeError):
    pass


class _IndexTraceError(TraceError, TypeError):
    pass


class TracerBase:
    """What a ``Proxy`` needs from its tracer: a graph and ``create_proxy``."""

    graph = None
    proxy_buffer_attributes = True

    def create_node(self, kind, target, args, kwargs, name=None, type_expr=None):
        return self.graph.create_node(kind, target, args, kwargs, name, type_expr)

    def proxy(self, node):
        return Proxy(node, self)

    def create_proxy(self, kind, target, args, kwargs, name=None, type_expr=None, proxy_factory_fn=None):
        """Record ``kind``/``target`` called on ``args``/``kwargs`` and return its Proxy."""
        args_ = self.create_arg(args)
        kwargs_ = self.create_arg(kwargs)
        node = self.create_node(kind, target, args_, kwargs_, name, type_expr)
        return self.proxy(node) if proxy_factory_fn is None else proxy_factory_fn(node)

    def create_arg(self, a):
        """Turn an argument into what a node stores: Proxies become their nodes."""
        def leaf(x):
            if isinstance(x, Proxy):
                return x.node
            return x
        return map_aggregate(a, leaf)

    def to_bool(self, obj):
        raise TraceError(_CONTROL_FLOW)

    def iter(self, obj):
        raise TraceError(f"{_CONTROL_FLOW}: a Proxy cannot be iterated (a loop over it, or "
                         "*proxy / **proxy in a call); index it instead")

    def keys(self, obj):
        return Attribute(obj, "keys")()

    # ``len(proxy)`` and ``int``-like uses need a concrete value: a tracer that knows example
    # values (``lucid.export``'s) answers them; symbolic tracing cannot.
    def len(self, obj):
        raise _LenTraceError(f"{_CONTROL_FLOW}: 'len' is not supported in symbolic tracing by default. "
                         "If you want this call to be recorded, please call lucid.fx.wrap('len') at module scope")

    def index(self, obj):
        raise _IndexTraceError(f"{_CONTROL_FLOW}: a Proxy cannot be used as a Python int")


# NOTE [Proxies outside a trace]
# A Proxy made around a free graph's node (``Proxy(node)``, ``GraphAppendingTracer``) is used
# with no ``Tracer.trace`` running, so no recorders are patched in (NOTE [Tracing without
# __torch_function__]): ``lucid.cat([p, q])`` or a GraphModule called on a Proxy reaches the real
# function. Such tracers switch on the ``__torch_function__`` dispatchers (NOTE [Torch function],
# as DTensor does) and ``Proxy.__torch_function__`` records the call, as torch.fx's does. Plain
# symbolic tracing does not make them, so it leaves the eager path as it was; one made while a
# trace runs (a tracer inlining a function) needs no dispatchers, the trace's recorders are in
# place, and switching them on over the recorders would mix the two.
_TRACING = [0]  # Tracer.trace calls running (under the trace lock)


class GraphAppendingTracer(TracerBase):
    """A tracer that only appends to ``graph`` (for Proxies made around a free graph's nodes)."""

    def __init__(self, graph):
        self.graph = graph
        if not _TRACING[0]:
            from .. import overrides  # See NOTE [Proxies outside a trace]

            overrides._activate()


class Proxy:
    """A value during symbolic tracing: it records what is done to it as graph nodes.

    Examples
    --------
    >>> import lucid
    >>> from lucid.fx import Graph, Proxy
    >>> g = Graph()
    >>> x = Proxy(g.placeholder("x"))
    >>> y = (x * 2).relu()
    >>> _ = g.output(y.node)
    >>> [n.op for n in g.nodes]
    ['placeholder', 'call_function', 'call_method', 'output']
    """

    __hash__ = object.__hash__

    def __init__(self, node, tracer=None):
        if tracer is None:
            tracer = GraphAppendingTracer(node.graph)
        self.tracer = tracer
        self.node = node

    def __repr__(self):
        return f"Proxy({self.node.name})"

    def __getattr__(self, k):
        if k.startswith("__") and k.endswith("__"):  # copy/pickle probes are not tensor attributes
            raise AttributeError(k)
        return Attribute(self, k)

    def __getstate__(self):
        return self.__dict__

    def __setstate__(self, d):
        self.__dict__ = d

    def __call__(self, *args, **kwargs):
        return self.tracer.create_proxy("call_method", "__call__", (self,) + args, kwargs)

    def __iter__(self):
        # ``a, b = proxy`` is a fixed-size unpack: record it as getitems, as torch.fx does.
        frame = inspect.currentframe()
        caller = frame.f_back if frame is not None else None
        if caller is not None:
            for inst in dis.get_instructions(caller.f_code):
                if inst.offset >= caller.f_lasti:
                    if inst.opname == "UNPACK_SEQUENCE":
                        return iter([self[i] for i in range(inst.argval)])
                    break
        return self.tracer.iter(self)

    def __bool__(self):
        return self.tracer.to_bool(self)

    def __len__(self):
        return self.tracer.len(self)

    def __index__(self):
        return self.tracer.index(self)

    def __array__(self, *args, **kwargs):
        raise TraceError(f"{_CONTROL_FLOW}: a Proxy cannot be converted to a NumPy array (a NumPy "
                         "call on a traced value); use lucid functions, or lucid.fx.wrap the helper")

    def keys(self):
        return self.tracer.keys(self)

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        """Record a Lucid function called on Proxies (NOTE [Proxies outside a trace])."""
        from ..overrides import is_tensor_method_or_property

        kwargs = kwargs or {}
        tracers = {}

        def look(x):
            if isinstance(x, Proxy):
                tracers.setdefault(id(x.tracer), x.tracer)
            return x

        map_aggregate((args, kwargs), look)
        if len(tracers) > 1:
            raise RuntimeError(f"Found multiple different tracers {list(tracers.values())} while trying to "
                               f"trace operations {func}")
        tracer = next(iter(tracers.values()))
        if is_tensor_method_or_property(func):
            return tracer.create_proxy("call_method", func.__name__, args, kwargs)
        return tracer.create_proxy("call_function", func, args, kwargs)


class Attribute(Proxy):
    """``proxy.attr``: becomes a ``getattr`` node when used as a value, a ``call_method``
    node when called."""

    def __init__(self, root, attr):
        self.root = root
        self.attr = attr
        self.tracer = root.tracer
        self._node = None

    @property
    def node(self):
        if self._node is None:
            self._node = self.tracer.create_proxy("call_function", getattr, (self.root, self.attr), {}).node
        return self._node

    def __call__(self, *args, **kwargs):
        return self.tracer.create_proxy("call_method", self.attr, (self.root,) + args, kwargs)


class ParameterProxy(Proxy):
    """A parameter's (or buffer's) Proxy when the tracer has ``param_shapes_constant``: its
    shape, ``size``, ``dim``, ``ndim``, ``numel`` and ``nelement`` are the real values, so code
    using them records constants instead of nodes."""

    def __init__(self, tracer, node, name, param):
        super().__init__(node, tracer)
        self.param = param
        self.name = name

    def __repr__(self):
        return f"ParameterProxy({self.name})"

    @property
    def shape(self):
        return self.param.shape

    def size(self, dim=None):
        return self.param.size() if dim is None else self.param.size(dim)

    def dim(self):
        return self.param.dim()

    @property
    def ndim(self):
        return self.param.ndim

    def numel(self):
        return self.param.numel()

    def nelement(self):
        return self.param.nelement()


_UNARY = ("neg", "pos", "invert", "abs")
_BINARY = ("add", "sub", "mul", "floordiv", "truediv", "mod", "pow", "lshift", "rshift", "and_",
           "or_", "xor", "matmul", "getitem", "eq", "ne", "lt", "gt", "le", "ge")
_REFLECTABLE = ("add", "sub", "mul", "floordiv", "truediv", "mod", "pow", "lshift", "rshift",
                "and_", "or_", "xor", "matmul")


def _dunder(name):
    return f"__{name.rstrip('_')}__"


def _define_magic(name):
    target = getattr(operator, name)

    def impl(*args):
        tracer = next(a.tracer for a in args if isinstance(a, Proxy))
        return tracer.create_proxy("call_function", target, args, {})

    impl.__name__ = _dunder(name)
    setattr(Proxy, _dunder(name), impl)


def _define_reflected(name):
    target = getattr(operator, name)

    def impl(self, rhs):
        return self.tracer.create_proxy("call_function", target, (rhs, self), {})

    impl.__name__ = f"__r{name.rstrip('_')}__"
    setattr(Proxy, impl.__name__, impl)


# NOTE [In-place operators on a Proxy]
# torch.fx's Proxy has no ``__iadd__``, so ``proxy += y`` falls back to ``__add__`` and records
# ``operator.add``; a parameter or buffer is a real tensor there, so ``self.buf += x`` records the
# tensor's in-place method (``buf.add_(x)``). Lucid proxies module state too (a ``get_attr``
# node), so its in-place dunders record that method on a ``get_attr`` proxy and the out-of-place
# operator on any other; the tracer then lets ``self.buf = <that add_ node>`` through without
# assigning (the node already mutates the buffer). ``@=`` has no in-place method in either.
_INPLACE_METHODS = {"add": "add_", "sub": "sub_", "mul": "mul_", "truediv": "div_", "floordiv": "floor_divide_",
                    "mod": "remainder_", "pow": "pow_", "lshift": "__ilshift__", "rshift": "__irshift__",
                    "and_": "__iand__", "or_": "__ior__", "xor": "__ixor__", "matmul": None}


def _define_inplace(name, method):
    target = getattr(operator, name)

    def impl(self, rhs):
        if method is not None and self.node.op == "get_attr":
            return self.tracer.create_proxy("call_method", method, (self, rhs), {})
        return self.tracer.create_proxy("call_function", target, (self, rhs), {})

    impl.__name__ = f"__i{name.rstrip('_')}__"
    setattr(Proxy, impl.__name__, impl)


def _setitem(self, key, value):
    # torch.fx's Proxy refuses item assignment (its module state is real tensors, whose
    # ``__setitem__`` it records); Lucid records ``operator.setitem``, which the generated
    # code prints as ``x[key] = value`` and dead-code elimination keeps (an effect).
    self.tracer.create_proxy("call_function", operator.setitem, (self, key, value), {})


Proxy.__setitem__ = _setitem

for _name in _UNARY + _BINARY:
    _define_magic(_name)
for _name in _REFLECTABLE:
    _define_reflected(_name)
for _name, _method in _INPLACE_METHODS.items():
    _define_inplace(_name, _method)


def _find_proxy(args, kwargs):
    """The first Proxy nested anywhere in ``args``/``kwargs``, or None."""
    found = []

    def look(x):
        if not found and isinstance(x, Proxy):
            found.append(x)
        return x

    map_aggregate(args, look)
    if not found:
        map_aggregate(kwargs, look)
    return found[0] if found else None
