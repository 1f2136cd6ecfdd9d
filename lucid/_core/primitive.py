"""Primitives and ``bind``: the one door every operation goes through.

A :class:`Primitive` bundles, in one place, the four things an op needs:

* ``impl(*arrays, **params)`` — the forward on raw arrays (the array namespace ``xp``);
* ``vjp`` — one rule per positional argument, ``rule(ns, g, out, *args, **params)``;
* ``jvp(ns, primals, tangents, out, **params)`` — the forward-mode rule;
* ``batch(vals, bdims, **params) -> (out, out_bdim)`` — the vmap rule.

Rules are written against an *op namespace* ``ns`` (operators plus ``ns.exp``,
``ns.sum`` ...). See NOTE [Two namespaces].

``bind(prim, args, params)`` evaluates a primitive: eagerly on arrays when no
transform owns any argument (recording a tape node if grad is needed), otherwise by
handing the call to the innermost transform that owns an argument. See NOTE [Levels].
"""
from __future__ import annotations

import functools
import weakref

import numpy as np

from . import backend
from .grad_mode import ACTIVE_TRACES, STATE

# NOTE [Two namespaces]
# Every rule is written once against an op namespace ``ns``. Two namespaces exist:
#   AN — functions on raw ndarrays (each primitive's own ``impl``): used by the plain
#        eager backward, which never needs a graph of the backward, so it runs at
#        NumPy speed;
#   TN — functions that ``bind`` the primitive on Tensors: used when the backward must
#        itself be differentiable (``create_graph=True``) and by every transform.
# Both are filled automatically from the registry, so a rule has one source of truth.


class _Namespace:
    """Attribute bag holding one function per primitive (and shared helpers)."""

    def __init__(self, name):
        self._name = name

    def __repr__(self):
        return f"<lucid op namespace {self._name}>"


AN = _Namespace("arrays")
TN = _Namespace("tensors")
AN.is_tensor_ns = False
TN.is_tensor_ns = True

REGISTRY: dict[str, "Primitive"] = {}
ndarray_cls = np.ndarray


class Meta:
    """Shape and dtype of an argument a rule needs only the metadata of.

    ``array_cls`` is the class of the array it describes, so ``ns.zeros_like(meta)`` makes
    its zeros on the same device (NOTE [Backends]).
    """

    __slots__ = ("shape", "dtype", "array_cls")

    def __init__(self, shape, dtype, array_cls=ndarray_cls):
        self.shape = shape
        self.dtype = dtype
        self.array_cls = array_cls

    @property
    def ndim(self):
        return len(self.shape)

    @property
    def size(self):
        return int(np.prod(self.shape, dtype=np.int64))


class Primitive:
    """One differentiable, batchable operation. Create with :func:`defprim`."""

    __slots__ = (
        "name", "impl", "vjp", "jvp", "batch", "save_inputs", "save_out",
        "nout", "is_view", "differentiable", "vjp_reads", "__weakref__",
    )

    def __repr__(self):
        return f"<primitive {self.name}>"

    def __call__(self, *args, **params):
        return bind(self, args, params)


def defprim(name, impl, *, vjp=None, jvp=None, batch=None, save_inputs=True,
            save_out=False, nout=1, is_view=False, differentiable=True, vjp_reads=None):
    """Register a primitive and expose it in both namespaces (``AN.name``, ``TN.name``).

    Parameters
    ----------
    name : str
        Unique name; also used in error messages.
    impl : callable
        Forward on arrays: ``impl(*arrays, **params) -> array`` (tuple if ``nout > 1``).
    vjp : tuple of callables or None
        One rule per positional argument (``None`` entries: no gradient for it).
    jvp, batch : callables
        Forward-mode and vmap rules (see module docstring).
    save_inputs : bool, int, tuple of int or None
        What the backward needs of the inputs: True all values; False only shapes and
        dtypes (rules get :class:`Meta`); an int k the values from position k on (Meta
        before); a tuple the values at those positions (Meta elsewhere); None nothing at
        all (rules get None).
    save_out : bool
        Whether the backward needs the output value.
    nout : int
        Number of outputs.
    is_view : bool
        The output may alias the first input's memory (shares its version counter).
    differentiable : bool
        False for ops whose outputs never carry gradient (comparisons, argmax...).
    vjp_reads : tuple of tuples of int, optional
        For each positional argument, the saved arguments its vjp rule reads (``mul``:
        ``((1,), (0,))``). An in-place change of a saved argument that no rule the backward
        runs reads is then no error, as in PyTorch (NOTE [Version checks of unread inputs]);
        None: every rule may read every saved argument.
    """
    if name in REGISTRY:
        raise ValueError(f"primitive {name!r} is already registered")
    p = Primitive()
    p.name, p.impl, p.vjp, p.jvp, p.batch = name, impl, vjp, jvp, batch
    p.save_inputs, p.save_out, p.nout = save_inputs, save_out, nout
    p.is_view, p.differentiable, p.vjp_reads = is_view, differentiable, vjp_reads
    REGISTRY[name] = p
    setattr(AN, name, impl)
    setattr(TN, name, lambda *args, **params: bind(p, args, params))
    return p


# --------------------------------------------------------------------------- bind

_Tensor = None  # set by tensor.py (avoids an import cycle)
_as_array = backend.as_array
DEVICE_GUARD = backend.DEVICE_GUARD
ndarray = np.ndarray
_record = None  # set by autograd/engine.py
_wrap = None

# ``hook(op name, args) -> args or None`` while an autocast region is open (NOTE [Autocast] in
# lucid/amp/autocast_mode.py); public functions that promote dtypes before they bind (matmul,
# linear) call it first themselves.
AUTOCAST_HOOK = [None]

# Set by lucid.utils._python_dispatch while a TorchDispatchMode is entered in any thread, and for
# good once a Tensor subclass with its own __torch_dispatch__ is defined (both also count in
# ACTIVE_TRACES, so the eager path reads nothing more). ``hook(prim, args, params)`` returns the
# result, or None when no mode is entered in this thread and no argument is such a subclass.
# NOTE [Dispatch modes], NOTE [Tensor subclass dispatch].
DISPATCH_MODE_HOOK = [None]


# Set (with one permanent count in ACTIVE_TRACES) once ``lucid.bfloat16`` is first used:
# ``hook(prim, args, params)`` runs a computing op with bfloat16 operands in float32 and rounds its
# floating results back, or returns None when no operand is bfloat16 (NOTE [bfloat16] in
# ``_core/dtypes.py``; the hook lives in ``lucid/_bfloat16.py``).
BFLOAT16_HOOK = [None]


def autocast_composite(name):
    """Decorator for a composite that PyTorch's autocast casts as one op: inside a region its
    tensor arguments are cast as the op ``name``'s list says (NOTE [Autocast]) — up to float32
    (``mse_loss``, ``layer_norm`` ..., where its primitives alone would keep float16) or down
    to the region's dtype (``addmm``, ``prelu`` ..., whose additions would otherwise promote
    the product back to float32). Costs one list read outside a region.

    Examples
    --------
    >>> import lucid
    >>> from lucid._core.primitive import autocast_composite
    >>> double = autocast_composite("mse_loss")(lambda t: t * 2)
    >>> with lucid.autocast("cpu", dtype=lucid.float16):
    ...     double(lucid.ones(2, dtype=lucid.float16)).dtype
    lucid.float32
    """
    def wrap(fn):
        @functools.wraps(fn)
        def call(*args, **kwargs):
            hook = AUTOCAST_HOOK[0]
            if hook is not None:
                args = hook(name, args) or args
                if kwargs:
                    values = hook(name, tuple(kwargs.values()))
                    if values is not None:
                        kwargs = dict(zip(kwargs, values))
                with hook.suspended():  # one op to autocast: its inner ops are not cast again
                    return fn(*args, **kwargs)
            return fn(*args, **kwargs)

        return call

    return wrap


autocast_float32 = autocast_composite  # the name its first users (float32 composites) import


def bind(prim, args, params):
    """Evaluate ``prim`` on ``args`` (Tensors, arrays or Python scalars).

    Examples
    --------
    >>> import lucid
    >>> from lucid._core.primitive import REGISTRY, bind
    >>> bind(REGISTRY["exp"], (lucid.tensor([0.0]),), {})
    tensor([1.])
    """
    born = None
    if ACTIVE_TRACES[0]:
        if DEVICE_GUARD[0]:  # operands on a device that is not current: NOTE [Several devices]
            guard = backend.guard_for(args, prim.name)
            if guard is not None:
                with guard:
                    return bind(prim, args, params)
        if AUTOCAST_HOOK[0] is not None:  # inside an autocast region somewhere: NOTE [Autocast]
            cast = AUTOCAST_HOOK[0](prim.name, args)
            if cast is not None:
                args = cast
        # ``STATE.traces and _owning_trace(args)``, inlined and reordered: the arguments are
        # scanned first, so the binds of plain values a transform makes (every op under a
        # transform makes one) skip the thread-local read, which costs more than the scan.
        best = None
        level = 0
        for a in args:
            lv = getattr(a, "_level", 0)
            if lv > level:
                level, best = lv, a
        if best is not None and STATE.traces:
            trace = best._trace
            if not trace.active:
                _escaped(trace)
            if prim.is_view:
                return _traced_view(trace, prim, args, params)
            return trace.process(prim, args, params)
        hook = DISPATCH_MODE_HOOK[0]
        if hook is not None:  # dispatch modes or __torch_dispatch__ subclasses: None = not theirs
            out = hook(prim, args, params)
            if out is not None:
                return out
        hook = BFLOAT16_HOOK[0]
        if hook is not None:  # bfloat16 operands compute in float32: None = none here
            out = hook(prim, args, params)
            if out is not None:
                return out
        if STATE.traces:  # plain operands inside a transform: NOTE [Lifting a plain tensor]
            born = STATE.traces[-1]
    Tensor = _Tensor
    arrays = []
    needs_grad = False
    for a in args:
        if isinstance(a, Tensor):
            arrays.append(a._data)
            if a._rg:
                needs_grad = True
        else:
            arrays.append(a)
    try:
        out = prim.impl(*arrays, **params)
    except Exception as e:  # name the op and the shapes. See NOTE [Errors name the op]
        moved = _cpu_numbers_moved(args)
        if moved is not None:  # NOTE [CPU numbers on a device]
            return bind(prim, moved, params)
        raise _op_error(prim, args, e) from e
    if needs_grad and STATE.grad_enabled and prim.differentiable:
        return _record(prim, args, params, out)
    if prim.nout == 1:
        # _wrap, inlined: this is the hot path of every eager op.
        t = object.__new__(Tensor)
        t._data = out if out.__class__ is ndarray else _as_array(out)
        t._version = [0]
        if prim.is_view:
            _share_version(t, args[0], prim, params, args)
        if born is not None:  # made inside a transform: it may join it
            t._born = born
        return t
    outs = tuple(_wrap(o) for o in out)
    if born is not None:
        for o in outs:
            o._born = born
    return outs


def finish_bind(prim, args, params, out):
    """What ``bind`` does with the arrays an impl returned (record or wrap), for a caller that
    computed them another way (a dispatch mode). The eager path keeps its inlined copy."""
    needs_grad = any(isinstance(a, _Tensor) and a._rg for a in args)
    if needs_grad and STATE.grad_enabled and prim.differentiable:
        return _record(prim, args, params, out)
    if prim.nout == 1:
        t = _wrap(out)
        if prim.is_view:
            _share_version(t, args[0], prim, params, args)
        return t
    return tuple(_wrap(o) for o in out)


def _share_version(out, base, prim, params, args):
    """A view shares its base's version counter, so in-place edits through either are seen.

    In grad mode it also remembers how it was made, for NOTE [View replay].
    """
    data = out._data
    # An empty view shares no bytes (may_share_memory is False) but is still a view: an
    # in-place change through it must still put its operands into the base's history.
    if isinstance(base, _Tensor) and (np.may_share_memory(data, base._data)
                                      or (data.size == 0 and data.base is not None)):
        out._version = base._version
        root = base if base._base is None else base._base
        out._base = root
        # A leaf that requires grad can't be changed in place under grad mode, so its views
        # never need replay (and a weight's per-step views would pile up in its registry).
        if STATE.grad_enabled and not (root._rg and root.grad_fn is None):
            out._view_src = (prim, params, args)
            _register_view(root, out)


def _traced_view(trace, prim, args, params):
    """A view made under a transform remembers its base and how it was made, so an in-place
    change through it (or its base) reaches the others. See NOTE [View replay]."""
    out = trace.process(prim, args, params)
    parent = args[0]
    if trace.owns(parent) and trace.owns(out) and out is not parent:
        root = parent if parent._base is None else parent._base
        out._base = root
        out._view_src = (prim, params, args)
        _register_view(root, out)
    return out


_COMPACT_EVERY = 64


def _register_view(root, view):
    """Append ``view`` to its root base's creation-ordered registry of weak references."""
    views = root._views
    if views is None:
        root._views = views = []
    views.append(weakref.ref(view))
    if len(views) % _COMPACT_EVERY == 0:  # drop dead entries now and then: amortised O(1)
        views[:] = [r for r in views if r() is not None]


# NOTE [Levels]
# Each active transform (func.grad, func.jvp, func.vmap ...) is a Trace with an integer
# ``level``: its depth in STATE.traces (1 = outermost). A tracer (GradTracer, JVPTracer,
# BatchTracer) carries the level of the trace that made it; plain Tensors are level 0
# (the eager tape). ``bind`` hands a call to the trace of the *highest* level among its
# arguments; that trace unwraps its own tracers (treating everything of lower level as a
# constant) and binds again on the unwrapped values, which are of lower level. A value
# therefore belongs to a transform only if its level matches, so nested derivatives
# never mix their perturbations ("perturbation confusion").
def _owning_trace(args):
    best = None
    level = 0
    for a in args:
        lv = getattr(a, "_level", 0)
        if lv > level:
            level, best = lv, a
    if best is None:
        return None
    trace = best._trace
    if not trace.active:
        _escaped(trace)
    return trace


def _escaped(trace):
    raise RuntimeError(
        f"a tracer of a finished {trace.kind} transform was used outside it "
        "(a value escaped its transform, e.g. through a global or closure)"
    )


# NOTE [Errors name the op]
# Failures inside an impl (NumPy shape errors, bad axes ...) are re-raised with the
# op's name and the argument shapes, so users see which lucid call broke. NumPy's
# ValueErrors (operands that do not broadcast, bad axes) become OpError: a RuntimeError,
# as PyTorch raises for them, and still a ValueError for code written against NumPy.
class OpError(RuntimeError, ValueError):
    """An op refused its arguments' shapes or values (PyTorch: RuntimeError).

    Examples
    --------
    >>> import lucid
    >>> try:
    ...     lucid.ones(2, 3) + lucid.ones(4)
    ... except RuntimeError as e:
    ...     print(str(e)[:58])
    add: operands could not be broadcast together with shapes
    """


def _op_error(prim, args, err):
    oom = backend.cuda_oom(prim.name, err)
    if oom is not None:
        return oom
    mixed = _mixed_devices(args)
    if mixed is not None:  # PyTorch's message, naming the op
        return RuntimeError(
            f"{prim.name}: Expected all tensors to be on the same device, but found at least two "
            f"devices, {mixed[0]} and {mixed[1]}! (move one with .to(device))")
    desc = ", ".join(
        f"Tensor(shape={tuple(a.shape)}, dtype={a.dtype})" if hasattr(a, "shape") and not isinstance(a, (int, float)) else repr(a)
        for a in args
    )
    cls = type(err) if isinstance(err, (ValueError, TypeError, IndexError, RuntimeError)) else RuntimeError
    if cls is ValueError:  # NumPy's (a subclass is an op's own choice of class: kept)
        cls = OpError
    try:
        return cls(f"{prim.name}: {err} (arguments: {desc})")
    except Exception:
        return RuntimeError(f"{prim.name}: {err} (arguments: {desc})")


# NOTE [CPU numbers on a device]
# PyTorch lets a 0-d CPU tensor (a number, e.g. ``t.sum().item()`` kept as a tensor, or a loss
# scale) meet tensors of any device in an op. Lucid's device arrays refuse host arrays (as CuPy
# does), so such an op fails in its impl; only then, on the error path, are the 0-d CPU tensors
# moved to the other operands' device (``to``: their gradient still flows) and the op bound
# again. The eager path pays nothing; an op that fails for another reason fails again, unchanged.
def _cpu_numbers_moved(args):
    """``args`` with their 0-d CPU tensors on the device of the others, or None if none applies."""
    Tensor = _Tensor
    target = None
    small = False
    for a in args:
        if isinstance(a, Tensor) and not a._level:
            arr = a._data
            if arr.__class__ is ndarray:
                small = small or arr.ndim == 0
            elif target is None:
                target = a.device
    if target is None or not small or target.type == "cpu":  # a CPU placeholder (sparse): no move helps
        return None
    return tuple(a.to(target) if isinstance(a, Tensor) and not a._level and a._data.__class__ is ndarray
                 and a._data.ndim == 0 else a for a in args)


def _mixed_devices(args):
    """The first two different devices among the Tensor arguments, or None (only read when an
    impl has failed: mixing devices is diagnosed after the fact, costing the hot path nothing)."""
    seen = None
    for a in args:
        if isinstance(a, _Tensor):
            try:
                d = a.device
            except Exception:  # a tracer whose value is not concrete
                continue
            if seen is None:
                seen = d
            elif d != seen:
                return seen, d
    return None


# Helpers every rule may use, in both namespaces (not primitives: no rules of their own).
AN.zeros_like = lambda x: (np if x.__class__ is ndarray else backend.namespace_of(x)).zeros(x.shape, x.dtype)
AN.ones_like = lambda x: (np if x.__class__ is ndarray else backend.namespace_of(x)).ones(x.shape, x.dtype)
TN.zeros_like = lambda x: _wrap(backend.namespace_of(x).zeros(x.shape, x.dtype))
TN.ones_like = lambda x: _wrap(backend.namespace_of(x).ones(x.shape, x.dtype))
