"""``lucid.autograd.graph`` (``torch.autograd.graph``): the recorded graph, inspected and hooked.

* ``Node`` — the class of every ``grad_fn``: ``name()``, ``next_functions``, ``metadata``,
  ``register_hook(fn(grad_inputs, grad_outputs))``, ``register_prehook(fn(grad_outputs))``.
* ``saved_tensors_hooks(pack, unpack)`` — every tensor saved for backward while it is
  active goes through ``pack`` when saved and ``unpack`` when the backward uses it
  (nestable: the innermost pair applies); ``save_on_cpu`` and
  ``disable_saved_tensors_hooks`` as in PyTorch.
* ``register_multi_grad_hook(tensors, fn, mode="all"|"any")``.
* ``allow_mutation_on_saved_tensors()`` — tensors saved for backward are cloned just before
  an in-place op changes them, so the backward uses their old values instead of refusing.

NOTE [Node mixins]: a node that gets per-node behaviour (hooks, packed saved values, a
checkpoint refill) changes class to a cached subclass ``(Mixin, its class)`` with no new
slots. The engine's fast path only takes nodes whose class *is* ``Node``, so such a node
goes through ``apply``, which the mixin wraps; plain nodes pay nothing, and mixins stack.
"""
from __future__ import annotations

import collections

import weakref

from .._core import primitive
from .._core.grad_mode import STATE, _GradModeContext, no_grad
from .._core.hooks import RemovableHandle
from .._core.tensor import Tensor, _wrap
from . import engine
from .engine import Node, _as_tensor

__all__ = ["Node", "saved_tensors_hooks", "save_on_cpu", "disable_saved_tensors_hooks",
           "register_multi_grad_hook", "increment_version", "GradientEdge", "get_gradient_edge",
           "allow_mutation_on_saved_tensors"]

_MIXED = {}


def _mix(node, mixin):
    """Give ``node`` the behaviour of ``mixin`` (once). See NOTE [Node mixins]."""
    cls = node.__class__
    if issubclass(cls, mixin):
        return
    sub = _MIXED.get((mixin, cls))
    if sub is None:
        sub = _MIXED[(mixin, cls)] = type(cls.__name__ + mixin.__name__, (mixin, cls), {"__slots__": ()})
    node.__class__ = sub


# ------------------------------------------------------------ introspection


class AccumulateGrad(Node):
    """The ``next_functions`` entry of a leaf: ``variable`` is the leaf tensor. A ``Node`` for
    ``isinstance`` (as PyTorch's); never part of the recorded graph (the engine's edges to a
    leaf are the leaf itself), so none of Node's recorded state is set."""

    next_functions = ()

    def __init__(self, variable):
        self.variable = variable

    def name(self):
        return "AccumulateGrad"

    def register_prehook(self, fn):
        """``fn((grad,))`` before the gradient is accumulated into the leaf; may return ``(new_grad,)``.
        As in PyTorch it does not run for ``autograd.grad`` (which never reaches this node)."""
        def tensor_hook(g):
            return _hook_result(fn, fn((g,)), (g,))[0]

        tensor_hook._node_prehook = True  # See autograd/grad.py: _leaf_hooks
        return _add_leaf_hook(self.variable, fn, tensor_hook, "register_prehook")

    def register_hook(self, fn):
        """``fn((), (grad,))`` after the gradient was accumulated into the leaf (its return is
        ignored: the node has no inputs)."""
        seen = []

        def tensor_hook(g):
            seen.append(g)

        tensor_hook._node_prehook = True

        def post(leaf):
            while seen:
                fn((), (seen.pop(0),))

        handle = _add_leaf_hook(self.variable, fn, tensor_hook, "register_hook")
        return _TwoHandles(handle, self.variable.register_post_accumulate_grad_hook(post))

    def __repr__(self):
        return f"<AccumulateGrad object at {id(self):#x}>"


def _add_leaf_hook(leaf, fn, tensor_hook, api):
    if not callable(fn):
        raise TypeError(f"AccumulateGrad.{api}: expected a callable, got {type(fn).__name__}")
    return leaf.register_hook(tensor_hook)


class _TwoHandles:
    """The handle of a hook made of two (removing it removes both)."""

    def __init__(self, *handles):
        self.handles = handles

    def remove(self):
        for h in self.handles:
            h.remove()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.remove()
        return False


def _next_functions(node):
    res = []
    for p in node.parents:
        if p is None:
            res.append((None, 0))
        elif p.__class__ is tuple:
            res.append(p)
        else:
            acc = p.__dict__.get("_accumulate_node")
            if acc is None:
                acc = p._accumulate_node = AccumulateGrad(p)
            res.append((acc, 0))
    return tuple(res)


_METADATA = weakref.WeakKeyDictionary()
_NODE_HOOKS = weakref.WeakKeyDictionary()  # node -> (prehooks, hooks)


def _metadata(node):
    d = _METADATA.get(node)
    if d is None:
        d = _METADATA[node] = {}
    return d


class _Hooked:
    """Mixin: run the node's prehooks and hooks around its backward."""

    __slots__ = ()

    def apply(self, grads, tensor_mode):
        pre, post = _NODE_HOOKS.get(self, ((), ()))
        if pre:
            outs = tuple(None if g is None else _as_tensor(g) for g in grads)
            for h in list(pre):
                outs = _hook_result(h, h(outs), outs)
            grads = [_raw(g, tensor_mode) for g in outs]
        res = super().apply(grads, tensor_mode)
        if post:
            outs = tuple(None if g is None else _as_tensor(g) for g in grads)
            ins = tuple(None if g is None else _as_tensor(g) for g in res)
            for h in list(post):
                ins = _hook_result(h, h(ins, outs), ins)
            res = [_raw(g, tensor_mode) for g in ins]
        return res


def _hook_result(hook, r, old):
    """What a node hook returned, checked as PyTorch checks it: None (keep ``old``) or a tuple
    of as many values, each None or of its old value's shape."""
    if r is None:
        return old
    name = getattr(hook, "__name__", type(hook).__name__)
    if not isinstance(r, tuple):
        raise TypeError(f"Node hook '{name}': expected tuple, but hook returned '{type(r).__name__}'")
    if len(r) != len(old):
        raise RuntimeError(f"Node hook '{name}' has returned an incorrect number of values (got {len(r)}, "
                           f"but expected {len(old)})")
    for new, was in zip(r, old):
        if new is not None and was is not None and tuple(_as_tensor(new).shape) != tuple(was.shape):
            raise RuntimeError(f"Node hook '{name}' has changed the size of value: expected shape "
                               f"{tuple(was.shape)}, got {tuple(_as_tensor(new).shape)}")
    return tuple(None if g is None else _as_tensor(g) for g in r)


def _raw(g, tensor_mode):
    if g is None:
        return None
    g = _as_tensor(g)
    return g if tensor_mode else g._data


def _add_node_hook(node, fn, post):
    if not callable(fn):
        raise TypeError(f"Node.register_{'hook' if post else 'prehook'}: expected a callable, "
                        f"got {type(fn).__name__}")
    entry = _NODE_HOOKS.get(node)
    if entry is None:
        entry = _NODE_HOOKS[node] = ([], [])
    lst = entry[1 if post else 0]
    lst.append(fn)
    _mix(node, _Hooked)
    return RemovableHandle(lst, fn)


# ------------------------------------------------------- saved tensor hooks

# NOTE [Saved tensor hooks]
# While any saved_tensors_hooks context is active in any thread, ``bind`` records through
# ``_record_packed`` (``primitive._record`` is swapped, so the eager path costs nothing
# otherwise). It records as usual, then replaces each saved Tensor (and a saved output) of
# the new node by ``_Packed(pack(t), unpack)`` and mixes in ``_Unpacking``, which unpacks
# for the duration of each ``apply`` (a retained graph unpacks again, as in PyTorch). The
# version check of packed values is skipped: the packed object need not be the tensor.
_ACTIVE = [0]


class _Packed:
    """A packed saved tensor, with what it takes to put it back in the graph."""

    __slots__ = ("value", "unpack", "fn", "idx", "leaf")

    def __init__(self, t, pack, unpack):
        msg = STATE.saved_hooks_disabled
        if msg is not None:  # a hook that was active before disable_saved_tensors_hooks was entered
            raise RuntimeError(msg)
        # As in PyTorch, the hooks do not apply to what the pack hook itself saves (an op
        # on ``t`` inside it would otherwise pack again, without end).
        hooks, STATE.saved_hooks = STATE.saved_hooks, []
        try:
            self.value = pack(t)
        finally:
            STATE.saved_hooks = hooks
        self.unpack = unpack
        self.fn = self.leaf = None
        self.idx = 0
        if t._rg:  # keep its place in the graph: a differentiable backward needs it
            self.fn, self.idx = t.grad_fn, t._out_idx
            if t.grad_fn is None:
                self.leaf = weakref.ref(t)

    def get(self, in_graph=False):
        t = self.unpack(self.value)
        if not isinstance(t, Tensor):
            raise TypeError(f"saved_tensors_hooks: unpack_hook must return a Tensor, got {type(t).__name__}")
        if in_graph and (self.fn is not None or self.leaf is not None):
            # As in PyTorch, the unpacked value takes the saved tensor's place in the graph:
            # its values, with the saved tensor's gradient edge (identity Jacobian).
            r = _wrap(t._data)
            if self.fn is None:
                leaf = self.leaf()
                if leaf is None:
                    return t
                clone_p = primitive.REGISTRY["clone"]  # saves nothing; its vjp passes g on
                r.grad_fn = engine.make_node(clone_p, (leaf,), {}, None, [leaf], True)
                r._rg = True
                return r
            r.grad_fn, r._out_idx, r._rg = self.fn, self.idx, True
            return r
        return t


class _Unpacking:
    """Mixin: unpack the saved values while the node runs backward."""

    __slots__ = ()

    def apply(self, grads, tensor_mode):
        saved, out = self.saved, self.out
        if saved is None:
            return super().apply(grads, tensor_mode)
        self.saved = tuple(a.get(tensor_mode) if a.__class__ is _Packed else a for a in saved)
        if out.__class__ is _Packed:
            self.out = out.get()._data
        elif out.__class__ is tuple:
            self.out = tuple(o.get()._data if o.__class__ is _Packed else o for o in out)
        try:
            return super().apply(grads, tensor_mode)
        finally:
            if not self.freed:
                self.saved, self.out = saved, out


def _pack_node(node, outs, pack, unpack):
    node.saved = tuple(_Packed(a, pack, unpack) if isinstance(a, Tensor) else a for a in node.saved)
    if node.out is not None:
        node.out = _Packed(outs[0], pack, unpack) if node.nout == 1 else tuple(
            _Packed(t, pack, unpack) for t in outs)
    node.versions = node.out_versions = None
    _mix(node, _Unpacking)


def _record_packed(prim, args, params, out):
    res = engine.record(prim, args, params, out)
    stack = STATE.saved_hooks
    if stack:
        outs = (res,) if prim.nout == 1 else res
        for o in outs:
            if o.grad_fn is not None:
                _pack_node(o.grad_fn, outs, *stack[-1])
                break
    return res


def current_saved_hooks():
    """The innermost active ``(pack, unpack)`` pair of this thread, or None."""
    stack = STATE.saved_hooks
    return stack[-1] if stack else None


class saved_tensors_hooks:
    """Context manager: pass every tensor saved for backward through ``pack_hook``/``unpack_hook``.

    ``pack_hook(tensor)`` may return any object; ``unpack_hook(packed)`` must return a
    Tensor with the original's value. Nested contexts: the innermost pair applies.
    Covers the eager tape and custom ``Function``'s ``save_for_backward``.

    Examples
    --------
    >>> import lucid
    >>> packed = []
    >>> def pack(t):
    ...     packed.append(tuple(t.shape))
    ...     return t
    >>> x = lucid.tensor([1.0, 2.0], requires_grad=True)
    >>> with lucid.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
    ...     y = (x * x).sum()
    >>> packed
    [(2,), (2,)]
    >>> y.backward()
    >>> x.grad
    tensor([2., 4.])
    """

    def __init__(self, pack_hook, unpack_hook):
        if not callable(pack_hook) or not callable(unpack_hook):
            raise TypeError("saved_tensors_hooks: pack_hook and unpack_hook must be callables")
        self.pack_hook, self.unpack_hook = pack_hook, unpack_hook

    def __enter__(self):
        msg = STATE.saved_hooks_disabled
        if msg is not None:
            raise RuntimeError(msg)
        STATE.saved_hooks.append((self.pack_hook, self.unpack_hook))
        _ACTIVE[0] += 1
        primitive._record = _record_packed
        return self

    def __exit__(self, *exc):
        STATE.saved_hooks.pop()
        _ACTIVE[0] -= 1
        if _ACTIVE[0] == 0:
            primitive._record = engine.record
        return False


class save_on_cpu(saved_tensors_hooks):
    """Keep saved tensors in host memory until the backward needs them (PyTorch's ``save_on_cpu``).

    Lucid computes on the CPU, so tensors are already there: packing keeps the tensor and
    its device, unpacking moves it back to that device (a no-op today; the seam a GPU
    array backend would use). ``pin_memory`` and ``device_type`` are accepted.

    Examples
    --------
    >>> import lucid
    >>> x = lucid.tensor([3.0], requires_grad=True)
    >>> with lucid.autograd.graph.save_on_cpu():
    ...     y = (x ** 2).sum()
    >>> y.backward()
    >>> x.grad
    tensor([6.])
    """

    def __init__(self, pin_memory=False, device_type="cuda"):
        self.pin_memory, self.device_type = bool(pin_memory), device_type

        def pack(t):
            return (t.device, t.detach())

        def unpack(packed):
            device, t = packed
            return t.to(device)

        super().__init__(pack, unpack)


class disable_saved_tensors_hooks(_GradModeContext):
    """While active, entering ``saved_tensors_hooks`` raises ``RuntimeError(error_message)``.

    For features that cannot work with saved-tensor hooks. Also a decorator.

    Examples
    --------
    >>> import lucid
    >>> from lucid.autograd import graph
    >>> with graph.disable_saved_tensors_hooks("not with my feature"):
    ...     try:
    ...         graph.saved_tensors_hooks(lambda t: t, lambda t: t).__enter__()
    ...     except RuntimeError as e:
    ...         print(e)
    not with my feature
    """

    def __init__(self, error_message):
        self._args = (error_message,)
        self.error_message = str(error_message)

    def __enter__(self):
        self._prev = STATE.saved_hooks_disabled
        STATE.saved_hooks_disabled = self.error_message
        return self

    def __exit__(self, *exc):
        STATE.saved_hooks_disabled = self._prev
        return False


# ------------------------------------------------- saved values by name

# NOTE [Saved values by name]
# PyTorch's nodes show what they saved as ``grad_fn._saved_<name>`` (a Tensor or a number),
# ``_saved_<name>_sym_sizes`` and, for tensors, ``_raw_saved_<name>`` (a SavedTensor whose
# ``register_hooks`` packs that one value). Lucid's nodes keep a primitive's positional
# arguments in ``saved`` (a Meta where only the shape was kept) and its output in ``out``;
# the names are PyTorch's argument names ("self", "other", ...; table below where they
# differ), ``result`` for the output (``result0``... for several) and the keyword
# parameters by PyTorch's names (axis -> dim). They are properties of Node, one per name
# PyTorch's nodes use for Lucid's primitives (installed below): a ``Node.__getattr__`` would
# be simpler, but it turns off CPython's attribute specialisation for every node attribute
# the engine reads (measured: W1 9% slower).
_ARG_NAMES = {
    "pow": ("self", "exponent"),
    "where": ("condition", "self", "other"),
    "clamp": ("self", "min", "max"),
    "gather": ("self", "index"),
    "pick_along": ("self", "index"),
    "scatter": ("self", "index", "src"),
    "scatter_add": ("self", "index", "src"),
    "setitem": ("self", "values"),
    "linear": ("input", "weight", "bias"),
    "lerp": ("self", "end", "weight"),
    "addcmul": ("self", "tensor1", "tensor2"),
    "addcdiv": ("self", "tensor1", "tensor2"),
}
_PARAM_NAMES = {"axis": "dim", "keepdims": "keepdim"}
_FREED = ("Trying to backward through the graph a second time (or directly access saved tensors after "
          "they have already been freed). Saved intermediate values of the graph are freed when you "
          "call .backward() or autograd.grad(). Specify retain_graph=True if you need to backward "
          "through the graph a second time or if you need to access saved tensors after calling "
          "backward.")


_HOOKS_FREED = ("Calling register_hooks on a saved tensor after it has been freed. Saved intermediate values of "
                "the graph are freed when you call .backward() or autograd.grad(). Specify retain_graph=True if "
                "you need to backward through the graph a second time or if you need to access saved variables "
                "after calling backward.")
_HOOKS_SET = ("Calling register_hooks on a saved tensor whose hooks have already been set. Hint: only one pair "
              "of hooks is allowed at a time.")


def _arg_names(node, nargs):
    names = _ARG_NAMES.get(node.op_name)
    if names is None:
        names = ("input", "weight", "bias") if node.op_name.startswith("conv") else ("self", "other")
        if node.op_name.startswith("linalg_"):
            names = ("A", "B")
    return names[:nargs] + tuple(f"arg{i}" for i in range(len(names), nargs))


def _saved_slot(node, name):
    """``('arg', i)``, ``('out', i)``, ``('param', key)`` or None for a ``_saved_`` name."""
    if node.prim.vjp.__class__ is tuple:  # variadic primitives (cat, stack): parameters only
        for i, n in enumerate(_arg_names(node, len(node.parents))):
            if n == name:
                return "arg", i
    if node.prim.save_out:
        if node.nout == 1 and name == "result":
            return "out", None
        if node.nout > 1 and name.startswith("result") and name[6:].isdigit() and int(name[6:]) < node.nout:
            return "out", int(name[6:])
    for key in node.params:
        if _PARAM_NAMES.get(key, key) == name:
            return "param", key
    return None


def _no_attribute(node, name):
    return AttributeError(f"'{node.name()}' object has no attribute '{name}'")


def _saved_output(node, i):
    out = node.out
    if out is None:
        raise RuntimeError(_FREED)
    if node.nout == 1:
        return out.get(True) if out.__class__ is _Packed else node._out_tensors()
    o = out[i]
    return o.get(True) if o.__class__ is _Packed else node._out_tensors()[i]


def saved_attribute(node, attr):
    """``node._saved_<name>`` / ``node._raw_saved_<name>``. See NOTE [Saved values by name]."""
    if node.prim is None:  # a custom Function's node: its saved values are ctx.saved_tensors
        raise _no_attribute(node, attr)
    raw = attr.startswith("_raw_saved_")
    name = attr[len("_raw_saved_"):] if raw else attr[len("_saved_"):]
    sizes = not raw and name.endswith("_sym_sizes")
    slot = _saved_slot(node, name[:-len("_sym_sizes")] if sizes else name)
    if slot is None:
        raise _no_attribute(node, attr)
    kind, where = slot
    if kind == "param":
        if raw or sizes:
            raise _no_attribute(node, attr)
        return node.params[where]
    if kind == "arg":
        saved = node.saved
        if saved is None:
            if raw:
                return SavedTensor(node, slot)
            raise RuntimeError(_FREED)
        value = saved[where]
        if sizes:
            if value is None or not hasattr(value, "shape"):
                raise _no_attribute(node, attr)
            return tuple(value.shape)
        if value is None or value.__class__ is primitive.Meta:  # not kept for the backward
            raise _no_attribute(node, attr)
        if raw:
            if not isinstance(value, (Tensor, _Packed)):
                raise _no_attribute(node, attr)
            return SavedTensor(node, slot)
        return value.get(True) if value.__class__ is _Packed else value
    if sizes:
        raise _no_attribute(node, attr)
    if raw:
        return SavedTensor(node, slot)
    return _saved_output(node, where)


class SavedTensor:
    """One tensor a node saved for its backward (PyTorch's ``torch._C._autograd.SavedTensor``).

    Got from ``grad_fn._raw_saved_<name>``; :meth:`register_hooks` packs this one value now
    and unpacks it whenever the backward (or ``grad_fn._saved_<name>``) needs it.

    Examples
    --------
    >>> import lucid
    >>> x = lucid.tensor([1.0, 2.0], requires_grad=True)
    >>> y = x.pow(2)
    >>> y.grad_fn._raw_saved_self.register_hooks(lambda t: t.tolist(), lambda v: lucid.tensor(v))
    >>> y.sum().backward()
    >>> x.grad
    tensor([2., 4.])
    """

    __slots__ = ("_node", "_slot")

    def __init__(self, node, slot):
        self._node, self._slot = node, slot

    def register_hooks(self, pack_hook, unpack_hook):
        """Pack the saved value with ``pack_hook`` now; ``unpack_hook`` gives it back when needed."""
        if not callable(pack_hook) or not callable(unpack_hook):
            raise TypeError("register_hooks: pack_hook and unpack_hook must be callables, got "
                            f"{type(pack_hook).__name__} and {type(unpack_hook).__name__}")
        node = self._node
        kind, where = self._slot
        if kind == "ctx":  # a custom Function's save_for_backward
            return _register_ctx_hooks(node.ctx, where, pack_hook, unpack_hook)
        if node.freed or (node.saved if kind == "arg" else node.out) is None:
            raise RuntimeError(_HOOKS_FREED)
        current = node.saved[where] if kind == "arg" else (node.out if node.nout == 1 else node.out[where])
        if current.__class__ is _Packed:
            raise RuntimeError(_HOOKS_SET)
        if kind == "arg":
            packed = _Packed(current, pack_hook, unpack_hook)
            saved = list(node.saved)
            saved[where] = packed
            node.saved = tuple(saved)
        else:
            outs = node._out_tensors()
            t = outs if node.nout == 1 else outs[where]
            packed = _Packed(t, pack_hook, unpack_hook)
            if node.nout == 1:
                node.out = packed
            else:
                out = list(node.out)
                out[where] = packed
                node.out = tuple(out)
            # The packed value need not be the output any more: as in PyTorch, no version check.
            node.out_versions = None
        _mix(node, _Unpacking)

    def __repr__(self):
        return f"<SavedTensor of {self._node.name()}>"


_SAVED_ARGS = ("self", "other", "exponent", "condition", "min", "max", "index", "src", "values", "input",
               "weight", "bias", "end", "tensor1", "tensor2", "A", "B", "arg2", "arg3", "arg4", "arg5")
_SAVED_OTHERS = ("result", "result0", "result1", "result2", "result3", "dim", "keepdim", "shape", "stride",
                 "padding", "dilation", "groups", "ord", "reverse", "p", "size", "key", "offset", "mode", "n",
                 "norm", "value", "step", "shift", "hermitian", "atol", "rtol", "nan", "posinf", "neginf")


def _saved_property(attr):
    return property(lambda node: saved_attribute(node, attr), doc=f"PyTorch's ``grad_fn.{attr}``.")


for _name in _SAVED_ARGS + _SAVED_OTHERS:
    for _attr in ("_saved_" + _name, "_raw_saved_" + _name) + (
            ("_saved_" + _name + "_sym_sizes",) if _name in _SAVED_ARGS else ()):
        setattr(Node, _attr, _saved_property(_attr))
del _name, _attr


def _register_ctx_hooks(ctx, i, pack_hook, unpack_hook):
    if ctx._freed:
        raise RuntimeError(_HOOKS_FREED)
    packed = list(ctx._packed) if ctx._packed is not None else [None] * len(ctx._saved)
    if packed[i] is not None:
        raise RuntimeError(_HOOKS_SET)
    t = ctx._saved[i]
    if t is None:
        raise RuntimeError("register_hooks: the saved value is None; there is nothing to pack")
    packed[i] = _Packed(t, pack_hook, unpack_hook)
    saved = list(ctx._saved)
    saved[i] = None  # the packed form replaces the tensor (that is what the hooks are for)
    ctx._saved, ctx._packed = tuple(saved), tuple(packed)


# ------------------------------------------------------------ multi grad hook


def register_multi_grad_hook(tensors, fn, *, mode="all"):
    """Call ``fn`` once per backward, when the gradients of ``tensors`` are ready.

    ``mode="all"``: ``fn(grads)`` with one entry per tensor (None for a tensor the
    backward did not reach), called once that backward has computed them all.
    ``mode="any"``: ``fn(grad)`` with the first of them computed. Returns one handle
    removing every hook it installed.

    Examples
    --------
    >>> import lucid
    >>> a = lucid.tensor([1.0], requires_grad=True)
    >>> b = lucid.tensor([2.0], requires_grad=True)
    >>> seen = []
    >>> h = lucid.autograd.graph.register_multi_grad_hook(
    ...     (a, b), lambda gs: seen.append([None if g is None else g.item() for g in gs]))
    >>> (a * 3).sum().backward()
    >>> seen
    [[3.0, None]]
    """
    if mode not in ("all", "any"):
        raise ValueError(f"register_multi_grad_hook: expected mode='all' or 'any', got {mode!r}")
    tensors = tuple(tensors)
    for i, t in enumerate(tensors):
        if not isinstance(t, Tensor):
            raise TypeError(f"register_multi_grad_hook: tensors[{i}] is a {type(t).__name__}, not a Tensor")
    state = {"run": None, "grads": None}

    def current_run():
        callbacks = engine.current_callbacks()
        if callbacks is None:
            raise RuntimeError("register_multi_grad_hook: hook ran outside a backward")
        return callbacks

    def make_hook(i):
        def hook(grad):
            run = current_run()
            fresh = state["run"] is not run
            if fresh:
                state["run"] = run
            if mode == "any":
                if fresh:
                    fn(grad)
                return None
            if fresh:
                state["grads"], state["waiting"] = [None] * len(tensors), len(handles)
                # fires when every tensor has its gradient, or at the end of a backward that
                # reaches only some of them (PyTorch ignores the tensors a backward won't reach)
                engine.queue_callback(lambda: finish(run))
            state["grads"][i] = grad
            state["waiting"] -= 1
            if state["waiting"] == 0:
                finish(run)
            return None

        return hook

    def finish(run):
        if state.get("done") is not run:
            state["done"] = run
            fn(tuple(state["grads"]))

    handles = [t.register_hook(make_hook(i)) for i, t in enumerate(tensors) if t.requires_grad]
    return RemovableHandle.group(handles)


def increment_version(tensor):
    """Mark ``tensor`` (or each tensor of an iterable) as changed in place.

    For code that writes into a tensor's memory behind Lucid's back (through ``numpy()`` of a
    tensor that does not require grad, a custom kernel, another process): a backward that saved
    the tensor before the change then refuses to use the stale value, as after ``add_``
    (NOTE [In-place semantics]).

    Examples
    --------
    >>> import lucid
    >>> x = lucid.tensor([1.0, 2.0], requires_grad=True)
    >>> w = lucid.tensor([3.0, 4.0])
    >>> y = (x * w).sum()
    >>> lucid.autograd.graph.increment_version(w)
    >>> y.backward()
    Traceback (most recent call last):
    ...
    RuntimeError: backward: one of the variables needed for gradient computation has been modified by an inplace operation: ...
    """
    from .._core.tensor import Tensor

    tensors = [tensor] if isinstance(tensor, Tensor) else list(tensor)
    for t in tensors:
        if not isinstance(t, Tensor):
            raise TypeError(f"increment_version: expected tensors, got {type(t).__name__}")
    for t in tensors:
        t._version[0] += 1


# ------------------------------------------------- allow_mutation_on_saved_tensors


class _OutsideMutationContext(RuntimeError, AssertionError):
    """A backward of a graph recorded under ``allow_mutation_on_saved_tensors`` after it ended
    (PyTorch raises AssertionError; a RuntimeError as Lucid's other backward errors too)."""


class _Handle:
    """What a tensor saved under ``allow_mutation_on_saved_tensors`` is packed into."""

    __slots__ = ("__weakref__",)


class _AllowMutationOnSavedContext:
    """The state of one ``allow_mutation_on_saved_tensors`` context (cleared when it ends).

    ``original``: handle -> the saved tensor, until an in-place op is about to change its
    memory; ``cloned``: handle -> the copy made then. The same tensor at the same version
    saved twice shares one handle.
    """

    def __init__(self):
        self.original = weakref.WeakKeyDictionary()
        self.cloned = weakref.WeakKeyDictionary()
        self.tid_to_weakhandle = weakref.WeakValueDictionary()
        self.closed = False

    def clear(self):
        self.original.clear()
        self.cloned.clear()
        self.tid_to_weakhandle.clear()

    def _pack(self, tensor):
        # While ``original`` holds the tensor its id can't be reused, so the key is unique.
        tid = (id(tensor), tensor._version[0])
        handle = self.tid_to_weakhandle.get(tid)
        if handle is None or handle not in self.original:
            handle = _Handle()
            self.tid_to_weakhandle[tid] = handle
            self.original[handle] = tensor
        return handle

    def _unpack(self, handle):
        if self.closed or (handle not in self.cloned and handle not in self.original):
            raise _OutsideMutationContext(
                "allow_mutation_on_saved_tensors: trying to backward outside of the "
                "'allow_mutation_on_saved_tensors' context in which the graph was originally recorded")
        return self.cloned[handle] if handle in self.cloned else self.original[handle]

    def _before_mutation(self, tensor):
        import numpy as np

        data = tensor._data
        for handle, saved in list(self.original.items()):
            # np.may_share_memory dispatches to the arrays' own namespace (CuPy's on a GPU).
            if saved._data is data or np.may_share_memory(saved._data, data):
                with no_grad():  # a lucid op: the copy runs on the tensor's own device
                    self.cloned[handle] = saved.detach().clone()
                del self.original[handle]


class allow_mutation_on_saved_tensors:
    """Context manager under which changing a tensor saved for backward in place is allowed.

    Normally a backward that needs a tensor changed in place since it was saved raises
    (NOTE [In-place semantics]). Under this context every tensor saved for backward is
    cloned just before an in-place op writes into its memory (through the tensor itself or
    any view of it), and the backward uses the clone. Run the forward and the backward in the
    same context; a backward after it ends raises. Contexts can't be nested. Entering it
    returns its state (``_AllowMutationOnSavedContext``), as in PyTorch.

    Covers Lucid's in-place ops, indexed assignment and ``apply_``/``map_``; not writes made
    behind Lucid's back (``numpy()`` views, an optimizer's own update of ``p._data``).

    Examples
    --------
    >>> import lucid
    >>> with lucid.autograd.graph.allow_mutation_on_saved_tensors():
    ...     a = lucid.ones(2, requires_grad=True)
    ...     b = a.clone()
    ...     out = (b ** 2).sum()
    ...     _ = b.sin_()
    ...     out.backward()
    >>> a.grad
    tensor([2., 2.])
    """

    _active = [None]

    def __enter__(self):
        from ..ops import inplace

        if allow_mutation_on_saved_tensors._active[0] is not None:
            raise RuntimeError("allow_mutation_on_saved_tensors: contexts cannot be nested")
        ctx = _AllowMutationOnSavedContext()
        hooks = saved_tensors_hooks(ctx._pack, ctx._unpack)
        hooks.__enter__()
        self._ctx, self._hooks = ctx, hooks
        allow_mutation_on_saved_tensors._active[0] = ctx
        inplace.BEFORE_MUTATION[0] = ctx._before_mutation
        return ctx

    def __exit__(self, *exc):
        from ..ops import inplace

        inplace.BEFORE_MUTATION[0] = None
        allow_mutation_on_saved_tensors._active[0] = None
        self._hooks.__exit__(*exc)
        self._ctx.closed = True
        self._ctx.clear()
        return False


class GradientEdge(collections.namedtuple("GradientEdge", ["node", "output_nr"])):
    """Where a tensor's gradient enters the graph: a node and which of its outputs.

    Usable in place of the tensor as ``inputs`` (and, with ``grad_outputs``, as ``outputs``)
    of :func:`lucid.autograd.grad`, e.g. to split a backward into stages once the tensor
    itself is gone.
    """

    __slots__ = ()


def get_gradient_edge(tensor):
    """The :class:`GradientEdge` of ``tensor``: its ``grad_fn`` and output index, or for a leaf
    that requires grad its ``AccumulateGrad`` node (as ``grad_fn.next_functions`` shows it).

    Examples
    --------
    >>> import lucid
    >>> x = lucid.tensor([1.0, 2.0], requires_grad=True)
    >>> h = x * 3
    >>> edge = lucid.autograd.graph.get_gradient_edge(h)
    >>> y = (h * h).sum()
    >>> lucid.autograd.grad(y, edge)
    tensor([ 6., 12.])
    """
    from .._core.tensor import Tensor

    if not isinstance(tensor, Tensor):
        raise TypeError(f"get_gradient_edge: expected a Tensor, got {type(tensor).__name__}")
    if not tensor.requires_grad:
        raise RuntimeError("get_gradient_edge: it is not possible to get the gradient edge of a Tensor that "
                           "does not require gradients")
    if tensor.grad_fn is None:
        acc = tensor.__dict__.get("_accumulate_node")
        if acc is None:
            acc = tensor._accumulate_node = AccumulateGrad(tensor)
        return GradientEdge(acc, 0)
    return GradientEdge(tensor.grad_fn, tensor._out_idx)
