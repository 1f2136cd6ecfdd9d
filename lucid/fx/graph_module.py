"""``GraphModule``: a Module whose ``forward`` is Python generated from a ``Graph``.

The generated source is Lucid's own text (NOTE [FX code generation]), compiled with ``exec``
into a function set on a class made for this instance, so ``recompile()`` of one GraphModule
never changes another's forward.
"""
from __future__ import annotations

import copy
import linecache
import os

from .graph import Graph

__all__ = ["GraphModule"]

_COUNTER = [0]


def _module_base():
    from ..nn import Module

    return Module


# NOTE [Tensor attributes as buffers]
# A plain tensor attribute the graph reads (a module's ``self.c = tensor`` or a traced constant
# ``_tensor_constant0``) becomes a buffer of the GraphModule, as in torch.fx, so ``gm.to(device)``
# and ``gm.double()`` move it with the parameters the code combines it with. Unlike torch.fx
# (which registers it persistent) it stays out of ``state_dict``: the original module did not
# save it, so ``gm.load_state_dict(original.state_dict())`` keeps working, and exported modules
# keep torch.export's empty state for lifted constants.
def _copy_attr(from_module, to_module, target):
    """Copy ``from_module.<target>`` (dotted) onto ``to_module``, making empty Modules for the
    intermediate levels that ``to_module`` lacks."""
    from ..nn import Module, Parameter

    *prefix, field = target.split(".")
    for item in prefix:
        f = getattr(from_module, item)
        t = getattr(to_module, item, None)
        if f is t:
            return  # already installed (a whole submodule was copied)
        if t is None:
            t = Module()
            setattr(to_module, item, t)
        from_module, to_module = f, t
    orig = getattr(from_module, field)
    if field in getattr(from_module, "_buffers", {}) and not isinstance(orig, Parameter):
        to_module.register_buffer(field, orig, persistent=field not in from_module._non_persistent_buffers_set)
    elif isinstance(orig, _tensor_cls()) and not isinstance(orig, Parameter):
        to_module.register_buffer(field, orig, persistent=False)  # See NOTE [Tensor attributes as buffers]
    else:
        setattr(to_module, field, orig)


def _tensor_cls():
    import lucid

    return lucid.Tensor


def _assign_attr(from_obj, to_module, target):
    from ..nn import Module

    *prefix, field = target.split(".")
    for item in prefix:
        t = getattr(to_module, item, None)
        if t is None:
            t = Module()
            setattr(to_module, item, t)
        to_module = t
    from ..nn import Parameter

    if isinstance(from_obj, _tensor_cls()) and not isinstance(from_obj, Parameter):
        to_module.register_buffer(field, from_obj, persistent=False)  # See NOTE [Tensor attributes as buffers]
    else:
        setattr(to_module, field, from_obj)


def _exec_source(src, globals_):
    """Compile generated source under a fake file name registered in ``linecache``, so
    tracebacks and ``inspect`` show the generated lines."""
    _COUNTER[0] += 1
    key = f"<eval_with_key>.{_COUNTER[0]}"
    linecache.cache[key] = (len(src), None, src.splitlines(True), key)
    namespace = dict(globals_)
    exec(compile(src, key, "exec"), namespace)
    return namespace["forward"]


class GraphModule(_module_base()):
    """A Module built from a root (Module or dict of attributes) and a ``Graph``.

    The submodules, parameters and buffers the graph names (``call_module`` and ``get_attr``
    targets) are copied from ``root``; ``forward`` is compiled from ``graph.python_code``.

    Parameters
    ----------
    root : Module or dict
        Where the graph's targets are found (a dict maps qualified names to objects).
    graph : Graph
        The graph; it becomes owned by this module.
    class_name : str
        The name shown by ``repr`` and ``print_readable``.

    Examples
    --------
    >>> import lucid
    >>> from lucid import nn
    >>> from lucid.fx import symbolic_trace
    >>> lin = nn.Linear(2, 2)
    >>> gm = symbolic_trace(nn.Sequential(lin, nn.ReLU()))
    >>> [n.op for n in gm.graph.nodes]
    ['placeholder', 'call_module', 'call_module', 'output']
    >>> x = lucid.randn(3, 2)
    >>> bool((gm(x) == lin(x).relu()).all())
    True
    """

    def __new__(cls, *args, **kwargs):
        # Each instance gets its own class: ``recompile`` sets ``forward`` on it.
        for base in cls.__mro__:
            if base.__dict__.get("_is_per_instance_class", False):
                cls = base.__bases__[0]
                break
        impl = type(cls.__name__, (cls,), {"_is_per_instance_class": True})
        return object.__new__(impl)

    def __init__(self, root, graph, class_name="GraphModule"):
        super().__init__()
        self.__class__.__name__ = class_name
        self.__class__.__qualname__ = class_name
        Module = _module_base()
        if isinstance(root, Module):
            if hasattr(root, "training"):
                self.training = root.training
            for node in graph.nodes:
                if node.op in ("get_attr", "call_module"):
                    _copy_attr(root, self, node.target)
        elif isinstance(root, dict):
            for node in graph.nodes:
                if node.op in ("get_attr", "call_module"):
                    if node.target not in root:
                        raise RuntimeError(f"Node {node} referenced target {node.target} but that target "
                                           "was not provided in ``root``!")
                    _assign_attr(root[node.target], self, node.target)
        else:
            raise RuntimeError(f"GraphModule: unsupported type {type(root).__name__} for root")
        self.graph = graph

    @property
    def graph(self):
        """The Graph; assigning one takes ownership of it and recompiles."""
        return self.__dict__["_graph"]

    @graph.setter
    def graph(self, g):
        if not isinstance(g, Graph):
            raise TypeError(f"GraphModule.graph: expected a Graph, got {type(g).__name__}")
        self.__dict__["_graph"] = g
        g.owning_module = self
        self.recompile()

    @property
    def code(self):
        """The generated Python source of ``forward``."""
        return self.__dict__["_code"]

    def recompile(self):
        """Regenerate and recompile ``forward`` from ``self.graph`` (after editing it)."""
        python_code = self.graph.python_code(root_module="self")
        self.__dict__["_code"] = python_code.src
        fn = _exec_source(python_code.src, python_code.globals)
        type(self).forward = fn
        return python_code

    def print_readable(self, print_output=True):
        """The module as readable Python (a class with the generated ``forward``)."""
        body = "".join(f"    {line}\n" if line else "\n" for line in self.code.splitlines())
        text = f"class {type(self).__name__}(lucid.nn.Module):\n{body}"
        if print_output:
            print(text)
        return text

    def __str__(self):
        # torch.fx: ``str`` shows the code too, ``repr`` only the Module tree
        return "\n".join([super().__repr__(), self.code])

    def __deepcopy__(self, memo):
        Module = _module_base()
        res = Module()
        memo[id(self)] = res
        fields = {k: v for k, v in self.__dict__.items() if k not in ("_graph", "_code")}
        res.__dict__.update(copy.deepcopy(fields, memo))
        gm = GraphModule(res, copy.deepcopy(self.graph, memo), type(self).__name__)
        for k, v in res.__dict__.items():
            if k not in gm.__dict__:
                gm.__dict__[k] = v
        return gm

    def __copy__(self):
        gm = GraphModule(self, self.graph, type(self).__name__)
        gm.__dict__.update({k: v for k, v in self.__dict__.items() if k not in ("_graph", "_code")})
        return gm

    def __reduce__(self):
        state = {k: v for k, v in self.__dict__.items() if k not in ("_graph", "_code")}
        return (_rebuild, (state, copy.deepcopy(self.graph), type(self).__name__))

    # --------------------------------------------------------------- submodules
    def add_submodule(self, target, m):
        """Install ``m`` at the dotted path ``target`` (making empty Modules on the way)."""
        *prefix, field = target.split(".")
        mod = self
        Module = _module_base()
        for item in prefix:
            sub = getattr(mod, item, None)
            if sub is None:
                sub = Module()
                mod.add_module(item, sub)
            if not isinstance(sub, Module):
                return False
            mod = sub
        mod.add_module(field, m)
        return True

    def delete_submodule(self, target):
        """Remove the submodule at ``target``; False when it does not exist."""
        *prefix, field = target.split(".")
        mod = self
        for item in prefix:
            if not hasattr(mod, item):
                return False
            mod = getattr(mod, item)
        if field not in mod._modules:
            return False
        del mod._modules[field]
        return True

    def delete_all_unused_submodules(self):
        """Remove the submodules no ``call_module``/``get_attr`` node uses."""
        used = set()
        for node in self.graph.nodes:
            if node.op in ("call_module", "get_attr"):
                atoms = node.target.split(".")
                used.update(".".join(atoms[:i]) for i in range(1, len(atoms) + 1))
                if node.op == "call_module":
                    sub = self.get_submodule(node.target)
                    used.update(f"{node.target}.{n}" for n, _ in sub.named_modules() if n)
        for name, _ in list(self.named_modules()):
            if name and name not in used:
                self.delete_submodule(name)

    def to_folder(self, folder, module_name="FxModule"):
        """Write ``module.py`` (the code, a class ``module_name``) and ``state_dict.pt`` to
        ``folder``: ``from folder.module import FxModule`` rebuilds the module with its weights
        after ``load_state_dict(lucid.load(...))``. Submodules must be ``lucid.nn`` layers
        whose ``repr`` rebuilds them."""
        import lucid

        os.makedirs(folder, exist_ok=True)
        # The generated class registers every top-level buffer persistent, so save the
        # non-persistent ones (traced constants included) for its load_state_dict too.
        state = self.state_dict()
        state.update({k: v for k, v in self._buffers.items() if v is not None and k not in state})
        lucid.save(state, os.path.join(folder, "state_dict.pt"))
        python_code = self.graph.python_code("self")
        extra = [k for k in python_code.globals if k not in ("lucid", "inf", "nan")]
        if extra:
            raise NotImplementedError(f"to_folder: the code uses non-Lucid objects {extra}")
        lines = ["import lucid", "from lucid import nn", "from lucid.nn import *", "inf = float('inf')",
                 "nan = float('nan')", "", "", f"class {module_name}(lucid.nn.Module):",
                 "    def __init__(self):", "        super().__init__()"]
        for name, mod in self.named_children():
            lines.append(f"        self.add_module({name!r}, nn.{mod!r})")
        for name, p in self._parameters.items():
            lines.append(f"        self.{name} = nn.Parameter(lucid.empty({tuple(p.shape)}, dtype={p.dtype!r}))")
        for name, b in self._buffers.items():
            lines.append(f"        self.register_buffer({name!r}, lucid.empty({tuple(b.shape)}, dtype={b.dtype!r}))")
        lines.append("")
        lines += ["    " + line for line in python_code.src.splitlines()]
        with open(os.path.join(folder, "module.py"), "w") as f:
            f.write("\n".join(lines) + "\n")
        with open(os.path.join(folder, "__init__.py"), "w") as f:
            f.write(f"from .module import {module_name}\n")


def _rebuild(state, graph, class_name):
    Module = _module_base()
    root = Module()
    root.__dict__.update(state)
    gm = GraphModule(root, graph, class_name)
    for k, v in state.items():
        gm.__dict__.setdefault(k, v)
    return gm
