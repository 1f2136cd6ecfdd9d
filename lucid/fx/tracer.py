"""Symbolic tracing: ``Tracer``, ``symbolic_trace`` and ``wrap`` (``torch.fx._symbolic_trace``).

NOTE [Tracing without __torch_function__]
torch.fx sees ``torch.tanh(proxy)`` through the ``__torch_function__`` protocol. Lucid's protocol
(NOTE [Torch function]) is switched on only once a Tensor subclass exists, and a Proxy is no
Tensor, so while a trace runs the tracer *patches*, and restores in a ``finally`` (a function's
recorder also stands for the original a dispatcher wraps, reached through references taken
before the protocol was switched on):
- the public functions (module attributes that are plain or builtin functions) of the
  namespaces user code calls through: ``lucid``, ``lucid.nn.functional``, ``lucid.linalg``,
  ``lucid.special``, ``lucid.fft`` and the tracer's ``autowrap_modules`` (``math``); plus
  every global of the traced ``forward``'s module (and of each traced-through submodule's)
  that *is* one of those functions, so ``from lucid import relu`` is seen too;
- the functions registered with ``wrap``, in the globals of the module that registered them;
- ``Module.__call__`` (submodule calls become ``call_module`` nodes for leaf modules) and
  ``Module.__getattr__`` (parameters and buffers become ``get_attr`` nodes);
- ``Tensor``'s binary operators, which step aside (``NotImplemented``) for a Proxy operand
  so ``tensor + proxy`` reaches ``Proxy.__radd__``; ``tensor[proxy]`` records a getitem.
Each patched function is a recorder: when any argument, nested in lists, tuples or dicts, is
a Proxy it records a ``call_function`` node whose target is the ORIGINAL function; otherwise
it calls the original. What is not reached through these names (a function imported from a
private Lucid module into a helper module, a Tensor method called on a constant with a Proxy
argument) runs eagerly and fails on the Proxy: ``wrap`` it.
A Proxy used with no trace running (around a free graph's node) is recorded through
``__torch_function__`` instead: NOTE [Proxies outside a trace] in ``proxy.py``.
Thread safety: the patches are process-wide. Tracings hold one lock, so two threads trace
one after the other; other threads running eager Lucid code during a trace go through the
recorders, which find no Proxy and call the original function (same results, a little slower).
"""
from __future__ import annotations

import builtins
import functools
import inspect
import math
import threading
import types

from .._runtime import _assert
from .graph import Graph
from .node import _side_effectful_functions, map_aggregate
from .proxy import _TRACING, ParameterProxy, Proxy, TraceError, TracerBase, _find_proxy

__all__ = ["Tracer", "symbolic_trace", "wrap", "PH"]

_TRACE_LOCK = threading.RLock()
_WRAPPED = {}  # (id(globals), name) -> globals dict: the names ``wrap`` registered
_NOT_RECORDED = {"is_tensor", "is_storage"}  # answer about the Python object, as torch's do
_PATCHED_NAMESPACES = ("lucid", "lucid.nn.functional", "lucid.linalg", "lucid.special", "lucid.fft")
_TENSOR_BINARY = ("add", "sub", "mul", "truediv", "floordiv", "mod", "pow", "matmul", "and", "or",
                  "xor", "lshift", "rshift")
_TENSOR_COMPARE = ("eq", "ne", "lt", "le", "gt", "ge")


class _PlaceholderSentinel:
    """``concrete_args`` value meaning "keep this argument symbolic" (torch.fx's ``PH``)."""

    def __repr__(self):
        return "PH"


PH = _PlaceholderSentinel()


def _assert_specialized(value, expected, name):
    ok = value is expected if expected is None else value == expected
    if not ok:
        raise AssertionError(f"{name} has been specialized to have value {expected!r} but got another value")
    return None


_side_effectful_functions.add(_assert_specialized)
_side_effectful_functions.add(_assert)  # lucid._assert: a check, kept by dead-code elimination


class _WrapArgumentError(TypeError, RuntimeError):
    """torch.fx.wrap raises RuntimeError here; Lucid raised TypeError first."""


def wrap(fn_or_name):
    """Record calls of a module-level function as ``call_function`` nodes instead of tracing
    through it (``torch.fx.wrap``); call it at the top level of the module that uses the function.

    Parameters
    ----------
    fn_or_name : callable or str
        The function (or its global name, e.g. ``"len"`` for a builtin).

    Returns
    -------
    The argument, unchanged (so it works as a decorator).

    Examples
    --------
    >>> import lucid, lucid.fx
    >>> def clamp_sum(x):  # control flow on a value: cannot be traced through
    ...     return x.sum() if float(x.sum()) > 0 else -x.sum()
    >>> _ = lucid.fx.wrap("clamp_sum")
    >>> gm = lucid.fx.symbolic_trace(lambda x: clamp_sum(x) * 2)
    >>> [n.op for n in gm.graph.nodes]
    ['placeholder', 'call_function', 'call_function', 'output']
    >>> gm(lucid.tensor([-1.0, -2.0]))
    tensor(6.)
    """
    if not callable(fn_or_name) and not isinstance(fn_or_name, str):
        raise _WrapArgumentError("wrap: expected a function or the name of a global function")
    name = fn_or_name if isinstance(fn_or_name, str) else fn_or_name.__name__
    caller = inspect.currentframe().f_back
    if caller.f_code.co_name != "<module>":
        raise NotImplementedError("wrap must be called at the top level of a module")
    _WRAPPED[(id(caller.f_globals), name)] = caller.f_globals
    return fn_or_name


def _recorder(fn):
    def recorder(*args, **kwargs):
        proxy = _find_proxy(args, kwargs)
        if proxy is None:
            return fn(*args, **kwargs)
        return proxy.tracer.create_proxy("call_function", fn, args, kwargs)

    try:
        functools.update_wrapper(recorder, fn)
    except (AttributeError, TypeError):
        pass
    recorder.__fx_original__ = fn
    return recorder


_MISSING = object()


class _Patcher:
    """Patches attributes and dict entries, and undoes them all (in reverse) on exit."""

    def __init__(self):
        self._undo = []
        self._recorders = {}  # id(original function) -> its recorder

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        for restore in reversed(self._undo):
            restore()
        self._undo.clear()

    def set_item(self, d, name, value):
        old = d.get(name, _MISSING)
        d[name] = value
        self._undo.append(lambda: d.__setitem__(name, old) if old is not _MISSING else d.pop(name, None))

    def set_attr(self, obj, name, value):
        old = obj.__dict__.get(name, _MISSING)
        setattr(obj, name, value)
        self._undo.append(lambda: setattr(obj, name, old) if old is not _MISSING else delattr(obj, name))

    def recorder_for(self, fn):
        rec = self._recorders.get(id(fn))
        if rec is None:
            rec = self._recorders[id(fn)] = _recorder(fn)
            inner = getattr(fn, "_lucid_original", None)  # a __torch_function__ dispatcher (lucid.overrides)
            if inner is not None:  # references taken before it was installed reach the same recorder
                self._recorders.setdefault(id(inner), rec)
        return rec

    def recorder_of(self, value):
        """The recorder standing for ``value`` (a patched function, or the original a dispatcher wraps)."""
        rec = self._recorders.get(id(value))
        if rec is None:  # a dispatcher taken while __torch_function__ was on, the namespace now plain
            inner = getattr(value, "_lucid_original", None)
            rec = self._recorders.get(id(inner)) if inner is not None else None
            return rec if rec is not None and rec.__fx_original__ is inner else None
        fx_original = rec.__fx_original__
        if fx_original is value or getattr(fx_original, "_lucid_original", None) is value:
            return rec
        return None

    def patch_namespace(self, module, skip=()):
        for name, value in list(vars(module).items()):
            if name.startswith("_") and name not in _RECORDED_PRIVATE or name in skip \
                    or hasattr(value, "__fx_original__"):
                continue
            if isinstance(value, (types.FunctionType, types.BuiltinFunctionType)):
                self.set_item(module.__dict__, name, self.recorder_for(value))

    def patch_globals(self, fn_globals):
        """Replace the globals that are patched namespace functions by their recorders."""
        for name, value in list(fn_globals.items()):
            rec = self.recorder_of(value)
            if rec is not None:
                self.set_item(fn_globals, name, rec)


# Private names PyTorch's graphs call (``torch._assert`` checks a traced condition as a node).
_RECORDED_PRIVATE = frozenset({"_assert"})


def _tensor_operand_guard(orig):
    def method(self, other, *args, **kwargs):
        if isinstance(other, Proxy):
            return NotImplemented
        return orig(self, other, *args, **kwargs)

    method.__fx_original__ = orig
    return method


def _tensor_getitem(orig):
    def getitem(self, index):
        proxy = _find_proxy(index, {})
        if proxy is None:
            return orig(self, index)
        return proxy.tracer.create_proxy("call_function", _operator_getitem(), (self, index), {})

    getitem.__fx_original__ = orig
    return getitem


def _operator_getitem():
    import operator

    return operator.getitem


# NOTE [Variadic roots]
# torch.fx traces ``forward(self, x, *args, **kwargs)`` by giving each variadic parameter one
# placeholder (target ``*args`` / ``**kwargs``) and calling a copy of the function whose code
# object declares those parameters plain positional ones (``_patch_function``): the body then
# sees the Proxy itself as ``args`` and records ``args[0]`` as a getitem, where unpacking the
# Proxy into ``*args`` would need its length. The generated ``forward`` has the same
# ``*args, **kwargs`` signature, so calls bind as they did on the original.
def _flatten_variadic(fn):
    fn = getattr(fn, "__func__", fn)
    co = getattr(fn, "__code__", None)
    if co is None:
        raise TraceError(f"symbolic_trace: cannot trace the *args / **kwargs parameters of {fn!r}, "
                         "which is not a Python function; give it named parameters")
    n_var = bool(co.co_flags & inspect.CO_VARARGS) + bool(co.co_flags & inspect.CO_VARKEYWORDS)
    code = co.replace(co_argcount=co.co_argcount + co.co_kwonlyargcount + n_var, co_kwonlyargcount=0,
                      co_flags=co.co_flags & ~(inspect.CO_VARARGS | inspect.CO_VARKEYWORDS))
    return types.FunctionType(code, fn.__globals__, fn.__name__, None, fn.__closure__)


class Tracer(TracerBase):
    """Turns a Module's ``forward`` (or a function) into a ``Graph`` by running it on Proxies.

    Parameters
    ----------
    autowrap_modules : tuple of modules
        Modules whose functions are recorded when called on a Proxy (default ``(math,)``),
        in addition to Lucid's namespaces (NOTE [Tracing without __torch_function__]).
    autowrap_functions : tuple of callables
        Extra functions recorded as ``call_function`` nodes instead of traced through.
    param_shapes_constant : bool
        Give parameters and buffers ``ParameterProxy`` s, whose shape queries are the real
        values (constants in the graph) instead of recorded nodes.

    Override ``is_leaf_module`` to choose which submodules stay ``call_module`` nodes.

    Examples
    --------
    >>> import lucid
    >>> from lucid.fx import Tracer
    >>> g = Tracer().trace(lambda x: lucid.sin(x) * 2)
    >>> [n.op for n in g.nodes]
    ['placeholder', 'call_function', 'call_function', 'output']
    >>> list(g.nodes)[1].target is lucid.sin
    True
    """

    proxy_buffer_attributes = True
    traced_func_name = "forward"  # the method of a Module root that is traced

    def __init__(self, autowrap_modules=(math,), autowrap_functions=(), param_shapes_constant=False):
        self.autowrap_modules = tuple(autowrap_modules)
        self.autowrap_functions = tuple(autowrap_functions)
        self.param_shapes_constant = param_shapes_constant
        self.root = None
        self.graph = None
        self._patcher = None

    # --------------------------------------------------------------- hooks
    def is_leaf_module(self, m, module_qualified_name):
        """Whether submodule ``m`` is recorded as one ``call_module`` node (True for Lucid's
        own ``lucid.nn`` layers but ``Sequential``) instead of being traced through."""
        from ..nn import Sequential

        return type(m).__module__.startswith("lucid.nn") and not isinstance(m, Sequential)

    def path_of_module(self, mod):
        """The qualified name of submodule ``mod`` inside the root."""
        path = self._module_paths.get(id(mod))
        if path is None:
            raise NameError("module is not installed as a submodule")
        return path

    def call_module(self, m, forward, args, kwargs):
        """A submodule call: a ``call_module`` node for a leaf, else its forward is traced."""
        name = self.path_of_module(m)
        if not self.is_leaf_module(m, name):
            fwd = getattr(type(m), "forward", None)
            if self._patcher is not None and hasattr(fwd, "__globals__"):
                self._patcher.patch_globals(fwd.__globals__)
            return forward(*args, **kwargs)
        return self.create_proxy("call_module", name, args, kwargs)

    def getattr(self, attr, attr_val, parameter_proxy_cache):
        """A module attribute read: parameters (and buffers) become ``get_attr`` Proxies."""
        from ..nn import Parameter

        if isinstance(attr_val, Parameter) or (self.proxy_buffer_attributes and id(attr_val) in self._buffer_ids):
            path = self.tensor_attrs.get(id(attr_val))
            if path is not None:
                if path not in parameter_proxy_cache:
                    factory = (lambda node: ParameterProxy(self, node, path, attr_val)) \
                        if self.param_shapes_constant else None
                    parameter_proxy_cache[path] = self.create_proxy("get_attr", path, (), {}, proxy_factory_fn=factory)
                return parameter_proxy_cache[path]
        return attr_val

    def get_fresh_qualname(self, prefix):
        """``<prefix><i>`` with the smallest ``i`` that names no attribute of the root yet."""
        i = 0
        while hasattr(self.root, f"{prefix}{i}"):
            i += 1
        return f"{prefix}{i}"

    def create_arg(self, a):
        """Proxies become nodes; module tensors become ``get_attr`` nodes; other tensors are
        stored on the root as ``_tensor_constant<i>``."""
        import lucid
        from ..nn import Module

        def leaf(x):
            if isinstance(x, Proxy):
                return x.node
            if isinstance(x, lucid.Tensor):
                path = self.tensor_attrs.get(id(x))
                if path is None:
                    path = self.get_fresh_qualname("_tensor_constant")
                    setattr(self.root, path, x)
                    self.tensor_attrs[id(x)] = path
                return self.create_node("get_attr", path, (), {})
            if isinstance(x, Module):
                raise NotImplementedError(f"create_arg: argument of type {type(x).__name__} (a Module) "
                                          "cannot be a node argument")
            if isinstance(x, tuple) and not hasattr(x, "_fields") and type(x) is not tuple:
                return tuple(x)  # lucid.Size and other tuple subclasses print as tuples
            return x
        return map_aggregate(a, leaf)

    # --------------------------------------------------------------- tracing
    def create_args_for_root(self, root_fn, is_module, concrete_args=None):
        """Placeholders for ``root_fn``'s parameters; returns ``(fn, args, kwargs)`` to call.

        A ``*args``/``**kwargs`` parameter becomes one placeholder (``*args``, ``**kwargs``)
        whose Proxy the body indexes; ``fn`` is then ``root_fn`` with those parameters made
        plain positional ones (NOTE [Variadic roots])."""
        concrete_args = dict(concrete_args or {})
        params = list(inspect.signature(root_fn).parameters.values())
        if is_module:
            params = params[1:]
        unknown = set(concrete_args) - {p.name for p in params}
        if unknown:
            raise TraceError(f"symbolic_trace: concrete_args names {sorted(unknown)} are not parameters")
        args, kwargs, values = [self.root] if is_module else [], {}, {}
        variadic = any(p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD) for p in params)
        for p in params:
            if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
                star = "*" if p.kind == p.VAR_POSITIONAL else "**"
                values[p.name] = self.create_proxy("placeholder", star + p.name, (), {})
            else:
                values[p.name] = self._root_arg(p, concrete_args)
            if not variadic:
                (kwargs.__setitem__(p.name, values[p.name]) if p.kind == p.KEYWORD_ONLY
                 else args.append(values[p.name]))
        if variadic:
            bound = [root_fn.__self__] if inspect.ismethod(root_fn) else []  # a bound method's self
            root_fn = _flatten_variadic(root_fn)
            names = root_fn.__code__.co_varnames[int(is_module) + len(bound):root_fn.__code__.co_argcount]
            args += bound + [values[name] for name in names]
        return root_fn, args, kwargs

    def _root_arg(self, p, concrete_args):
        if p.name in concrete_args and concrete_args[p.name] is not PH:
            value = concrete_args[p.name]
            ph = self.create_proxy("placeholder", p.name, (value,), {})
            if value is None or isinstance(value, (bool, int, float, str)):
                self.create_proxy("call_function", _assert_specialized, (ph, value, p.name), {})
            return value
        default = () if p.default is inspect.Parameter.empty else (p.default,)
        annotation = None if p.annotation is inspect.Parameter.empty else p.annotation
        return self.create_proxy("placeholder", p.name, default, {}, type_expr=annotation)

    def _collect_tensor_attrs(self, root):
        self.tensor_attrs, self._buffer_ids = {}, set()
        for prefix, mod in root.named_modules(remove_duplicate=False):
            dot = prefix + "." if prefix else ""
            for k, v in mod.__dict__.items():
                if isinstance(v, _tensor_type()) and k not in ("_parameters", "_buffers"):
                    self.tensor_attrs.setdefault(id(v), dot + k)
            for k, v in mod._parameters.items():
                if v is not None:
                    self.tensor_attrs.setdefault(id(v), dot + k)
            for k, v in mod._buffers.items():
                if v is not None:
                    self.tensor_attrs.setdefault(id(v), dot + k)
                    self._buffer_ids.add(id(v))
        self._module_paths = {}
        for name, mod in root.named_modules(remove_duplicate=False):
            self._module_paths.setdefault(id(mod), name)

    def trace(self, root, concrete_args=None):
        """Trace ``root`` (a Module or a function) and return its ``Graph``."""
        from .. import nn

        is_module = isinstance(root, nn.Module)
        if is_module:
            fn = getattr(type(root), self.traced_func_name, None)
            if fn is None:
                raise AttributeError(f"symbolic_trace: {type(root).__name__} has no method {self.traced_func_name!r}")
            self.root = root
        elif callable(root):
            self.root, fn = nn.Module(), root
        else:
            raise TypeError(f"symbolic_trace: expected a Module or a function, got {type(root).__name__}")
        self.graph = Graph(tracer_cls=type(self))
        self._collect_tensor_attrs(self.root)
        with _TRACE_LOCK, _Patcher() as patcher:
            self._patcher = patcher
            _TRACING[0] += 1  # See NOTE [Proxies outside a trace]
            try:
                call, args, kwargs = self.create_args_for_root(fn, is_module, concrete_args)
                self._install(patcher, getattr(fn, "__globals__", {}))
                result = call(*args, **kwargs)
            finally:
                _TRACING[0] -= 1
                self._patcher = None
        self.create_node("output", "output", (self.create_arg(result),), {},
                         type_expr=getattr(fn, "__annotations__", {}).get("return"))
        return self.graph

    def _install(self, patcher, fn_globals):
        import importlib

        from ..nn import Module

        for ns in _PATCHED_NAMESPACES:
            patcher.patch_namespace(importlib.import_module(ns), skip=_NOT_RECORDED)
        for module in self.autowrap_modules:
            patcher.patch_namespace(module)
        for fn in self.autowrap_functions:
            patcher.recorder_for(fn)
        for (_, name), frame_globals in list(_WRAPPED.items()):
            orig = frame_globals.get(name, getattr(builtins, name, None))
            if orig is not None and not hasattr(orig, "__fx_original__"):
                patcher.set_item(frame_globals, name, patcher.recorder_for(orig))
        patcher.patch_globals(fn_globals)
        self._patch_module_class(patcher, Module)
        self._patch_tensor_class(patcher)

    def _patch_module_class(self, patcher, Module):
        orig_getattr, orig_call = Module.__getattr__, Module.__call__
        cache = {}
        tracer = self

        def module_getattr(mod, attr):
            return tracer.getattr(attr, orig_getattr(mod, attr), cache)

        def module_call(mod, *args, **kwargs):
            return tracer.call_module(mod, lambda *a, **k: orig_call(mod, *a, **k), args, kwargs)

        orig_setattr = Module.__setattr__

        def module_setattr(mod, attr, value):
            # See NOTE [In-place operators on a Proxy]: ``self.buf += x`` assigns the node that
            # already updated the buffer in place.
            if not _updates_state_in_place(mod, attr, value):
                orig_setattr(mod, attr, value)

        patcher.set_attr(Module, "__getattr__", module_getattr)
        patcher.set_attr(Module, "__call__", module_call)
        patcher.set_attr(Module, "__setattr__", module_setattr)

    @staticmethod
    def _patch_tensor_class(patcher):
        T = _tensor_type()
        for op in _TENSOR_BINARY + _TENSOR_COMPARE:
            for name in (f"__{op}__", f"__r{op}__"):
                orig = T.__dict__.get(name)
                if orig is not None and not hasattr(orig, "__fx_original__"):
                    patcher.set_attr(T, name, _tensor_operand_guard(orig))
        orig = T.__dict__.get("__getitem__")
        if orig is not None and not hasattr(orig, "__fx_original__"):
            patcher.set_attr(T, "__getitem__", _tensor_getitem(orig))


def _updates_state_in_place(mod, attr, value):
    if not isinstance(value, Proxy) or value.node.op != "call_method" or not value.node.args:
        return False
    if not value.node.is_impure():
        return False
    src = value.node.args[0]
    state = {**mod.__dict__.get("_parameters", {}), **mod.__dict__.get("_buffers", {})}
    return getattr(src, "op", None) == "get_attr" and attr in state and src.target.rsplit(".", 1)[-1] == attr


def _tensor_type():
    import lucid

    return lucid.Tensor


def symbolic_trace(root, concrete_args=None):
    """Trace ``root`` into a ``GraphModule`` whose generated ``forward`` does the same work.

    Parameters
    ----------
    root : Module or callable
        What to trace. ``lucid.nn`` layers it calls stay ``call_module`` nodes; other
        submodules are traced through.
    concrete_args : dict, optional
        Arguments to fix during tracing (name -> value): branches on them are resolved and
        the generated code asserts the value; ``PH`` keeps an argument symbolic.

    Returns
    -------
    GraphModule

    Examples
    --------
    >>> import lucid
    >>> import lucid.nn.functional as F
    >>> from lucid.fx import symbolic_trace
    >>> gm = symbolic_trace(lambda x: F.relu(x) + 1)
    >>> print(gm.code.strip())
    def forward(self, x):
        relu = lucid.nn.functional.relu(x);  x = None
        add = relu + 1;  relu = None
        return add
    >>> gm(lucid.tensor([-1.0, 2.0]))
    tensor([1., 3.])
    """
    from .graph_module import GraphModule

    tracer = Tracer()
    graph = tracer.trace(root, concrete_args)
    from .. import nn

    name = type(root).__name__ if isinstance(root, nn.Module) else getattr(root, "__name__", "GraphModule")
    if not name.isidentifier():
        name = "GraphModule"
    return GraphModule(tracer.root, graph, name)
