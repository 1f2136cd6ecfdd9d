"""``lucid.utils._python_dispatch`` (PyTorch's ``torch.utils._python_dispatch``): dispatch modes
and Tensor subclasses with ``__torch_dispatch__``.

A :class:`TorchDispatchMode` sees every primitive Lucid evaluates while it is entered, below
autograd, and decides what it returns: log it, count it, check it, or compute something else.
A Tensor subclass that defines ``__torch_dispatch__`` (usually a wrapper made with
``Tensor._make_wrapper_subclass``, holding inner tensors) decides what every primitive that sees
one of its instances returns: NOTE [Tensor subclass dispatch], NOTE [Subclass autograd] below.

NOTE [Dispatch modes]
PyTorch calls a mode's ``__torch_dispatch__(func, types, args, kwargs)`` for each ATen op
below the autograd layer. Lucid's primitives (``lucid/_core/primitive.py``) are the same
layer: what every public function decomposes to, each with its own autograd rules. Entering a
mode puts it on the thread's ``STATE.dispatch_modes`` and sets ``primitive.DISPATCH_MODE_HOOK``
and counts in ``ACTIVE_TRACES``, so the eager path reads nothing new when no mode is entered
anywhere. ``bind`` hands a call on level-0 values (after transforms unwrapped their tracers,
as PyTorch's functorch layers sit above Python modes) to :func:`_dispatch`, which pops the
innermost mode while it runs (so the mode's own ops go to the modes below it, or are computed),
runs it under ``no_grad`` (the mode is below autograd: what it computes is not recorded), and
hands the arrays it returned to ``primitive.finish_bind``, which records the node as ``bind``
would have (the op's own vjp/jvp rules, on the values the mode returned).
``func`` is an :class:`OpOverload` for the primitive (``lucid.library.ops.lucid.mul.default``,
name ``"lucid::mul"``); its keyword arguments are the primitive's parameters (Lucid's names,
e.g. ``axis``/``keepdims`` for ``sum``). The plain eager backward computes on arrays, not
through ``bind``, so a mode sees the backward's ops only under ``create_graph=True``.
"""
from __future__ import annotations

import contextlib
import threading
import traceback as _traceback
import weakref as _weakref

import numpy as _np

from .._core import backend as _backend
from .._core import dtypes as _dtypes
from .._core import primitive
from .._core.grad_mode import ACTIVE_TRACES, STATE, SUBCLASS_DISPATCH, enable_grad, no_grad
from .._core.tensor import Tensor, WrapperValues, _contiguous_strides, _wrap

__all__ = ["TorchDispatchMode", "OpOverload", "OpOverloadPacket", "is_in_torch_dispatch_mode",
           "return_and_correct_aliasing", "is_traceable_wrapper_subclass", "is_traceable_wrapper_subclass_type",
           "transform_subclass", "register_torch_dispatch", "make_wrapper_subclass", "DisableTorchDispatch"]

_LOCK = threading.Lock()
_ENTERED = [0]  # modes entered in all threads together
_PACKETS = {}


class OpOverloadPacket:
    """All overloads of one primitive (PyTorch's ``OpOverloadPacket``, e.g. ``aten.mul``).

    Lucid's primitives have one overload each, ``default``. ``func.overloadpacket`` of what a
    mode receives is one of these; calling it calls the primitive.

    Examples
    --------
    >>> import lucid
    >>> from lucid.library import ops
    >>> ops.lucid.mul, ops.lucid.mul.default
    (lucid.mul, lucid.mul.default)
    >>> ops.lucid.mul(lucid.tensor([2.0]), lucid.tensor([3.0]))
    tensor([6.])
    """

    __slots__ = ("_prim", "__name__", "default")

    def __init__(self, prim):
        self._prim = prim
        self.__name__ = prim.name
        self.default = OpOverload(self)

    def __call__(self, *args, **kwargs):
        return primitive.bind(self._prim, args, kwargs)

    def overloads(self):
        return ["default"]

    def __repr__(self):
        return f"lucid.{self.__name__}"


class OpOverload:
    """One primitive as a dispatch mode's ``func`` (PyTorch's ``OpOverload``, e.g. ``aten.mul.Tensor``)."""

    __slots__ = ("overloadpacket", "__name__", "_overloadname")
    is_inplace = False  # no primitive writes into its arguments (see _PseudoOp for in-place methods)

    def __init__(self, packet):
        self.overloadpacket = packet
        self.__name__ = f"{packet.__name__}.default"
        self._overloadname = "default"

    @property
    def is_view(self):
        """Whether the output may alias the first argument's memory (``reshape``, ``transpose`` ...)."""
        return self.overloadpacket._prim.is_view

    def name(self):
        """``"lucid::<primitive>"`` (PyTorch: ``"aten::mul.Tensor"``)."""
        return f"lucid::{self.overloadpacket.__name__}"

    def __call__(self, *args, **kwargs):
        return primitive.bind(self.overloadpacket._prim, args, kwargs)

    def __repr__(self):
        return f"lucid.{self.__name__}"


def packet_of(prim):
    """The (cached) :class:`OpOverloadPacket` of a primitive."""
    packet = _PACKETS.get(prim.name)
    if packet is None:
        packet = _PACKETS[prim.name] = OpOverloadPacket(prim)
    return packet


def _types_of(args):
    # As in PyTorch, plain tensors are not listed: only subclasses.
    seen = []
    for a in args:
        cls = type(a)
        if isinstance(a, Tensor) and cls is not Tensor and cls not in seen:
            seen.append(cls)
    return tuple(seen)


def _arrays_of(prim, out):
    def one(o):
        if not isinstance(o, Tensor):
            raise TypeError(f"{prim.name}: a dispatch mode's __torch_dispatch__ must return a Tensor "
                            f"for this op, got {type(o).__name__}")
        return o._data

    if prim.nout == 1:
        return one(out)
    if not isinstance(out, (tuple, list)) or len(out) != prim.nout:
        raise TypeError(f"{prim.name}: a dispatch mode's __torch_dispatch__ must return {prim.nout} "
                        f"Tensors for this op, got {type(out).__name__}")
    return tuple(one(o) for o in out)


def _dispatch(prim, args, params):
    """``bind``'s hook for a level-0 call: modes first, then ``__torch_dispatch__`` subclasses;
    None when neither applies (``bind`` computes). See NOTE [Dispatch modes] and NOTE [Tensor
    subclass dispatch]."""
    overloaded = _overloaded(args) if _SUBCLASSES and not _OFF.depth else None
    if not STATE.dispatch_modes and overloaded is None:
        return None
    out = _handle(packet_of(prim).default, args, params, overloaded)
    if overloaded is None and not _wrapped_outputs(out):
        return primitive.finish_bind(prim, args, params, _arrays_of(prim, out))
    return _finish_subclass(prim, args, params, out)


def _handle(func, args, kwargs, overloaded):
    """Run the innermost mode, then each overloaded class, until one does not return
    NotImplemented; each below autograd (under ``no_grad``)."""
    modes = STATE.dispatch_modes
    if modes:
        mode = modes.pop()  # its own ops reach the modes below it
        try:
            with no_grad():
                rule = _RULES.get((func.name(), type(mode))) if _RULES else None
                if rule is not None:
                    out = rule(mode, func, _types_of(args), args, dict(kwargs))
                else:
                    out = mode.__torch_dispatch__(func, _types_of(args), args, dict(kwargs))
        finally:
            modes.append(mode)
        if out is not NotImplemented:
            return out
    for cls in overloaded or ():
        with no_grad():
            rule = _RULES.get((func.name(), cls)) if _RULES else None
            if rule is not None:
                out = rule(cls, func, tuple(overloaded), args, dict(kwargs))
            else:
                out = cls.__torch_dispatch__(func, tuple(overloaded), args, dict(kwargs))
        if out is not NotImplemented:
            return out
    names = [type(m).__name__ for m in modes[-1:]] + [c.__name__ for c in overloaded or ()]
    raise TypeError(f"{func.name()}: no __torch_dispatch__ handled it: {', '.join(names)} returned "
                    "NotImplemented")


def _push_mode(mode):
    with _LOCK:
        STATE.dispatch_modes.append(mode)
        _ENTERED[0] += 1
        ACTIVE_TRACES[0] += 1
        primitive.DISPATCH_MODE_HOOK[0] = _dispatch


def _pop_mode():
    """Take the innermost mode of this thread off its stack and return it."""
    modes = STATE.dispatch_modes
    if not modes:
        raise AssertionError("_pop_mode: no torch dispatch mode is active")
    with _LOCK:
        mode = modes.pop()
        _ENTERED[0] -= 1
        ACTIVE_TRACES[0] -= 1
        if _ENTERED[0] == 0 and not _SUBCLASSES:
            primitive.DISPATCH_MODE_HOOK[0] = None
    return mode


class TorchDispatchMode:
    """Base class of dispatch modes: subclass it, define ``__torch_dispatch__``, enter it.

    ``__torch_dispatch__(self, func, types, args=(), kwargs=None)`` is called for each
    primitive evaluated while the mode is entered (in this thread), below autograd: return
    what the op should produce (``func(*args, **kwargs)`` computes it). Modes nest; inside
    ``__torch_dispatch__`` the mode itself is off, so its own ops reach the modes below it.
    See NOTE [Dispatch modes] for what a mode does not see.

    Examples
    --------
    >>> import lucid
    >>> from lucid.utils._python_dispatch import TorchDispatchMode
    >>> class Log(TorchDispatchMode):
    ...     def __init__(self):
    ...         super().__init__()
    ...         self.calls = []
    ...     def __torch_dispatch__(self, func, types, args=(), kwargs=None):
    ...         self.calls.append(func.overloadpacket.__name__)
    ...         return func(*args, **(kwargs or {}))
    >>> x = lucid.tensor([1.0, 2.0], requires_grad=True)
    >>> with Log() as log:
    ...     y = (x * 2).exp().sum()
    >>> log.calls
    ['mul', 'exp', 'sum']
    >>> y.backward()
    >>> x.grad
    tensor([ 14.778111, 109.1963  ])
    """

    def __init__(self, _dispatch_key=None):
        self._dispatch_key = _dispatch_key

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        raise NotImplementedError(f"{type(self).__name__}: define __torch_dispatch__(self, func, types, "
                                  "args=(), kwargs=None)")

    def __enter__(self):
        _push_mode(self)
        return self

    def __exit__(self, exc_type, exc, tb):
        modes = STATE.dispatch_modes
        if not modes or modes[-1] is not self:
            raise RuntimeError(f"{type(self).__name__}: exited while another dispatch mode is innermost; "
                               "modes must be exited in the reverse order of entering")
        _pop_mode()
        return False

    @classmethod
    def push(cls, *args, **kwargs):
        """A new mode (enter it with ``with``); kept for PyTorch's old spelling."""
        return cls(*args, **kwargs)

    @classmethod
    def is_infra_mode(cls):
        return False


def _get_current_dispatch_mode():
    """The innermost dispatch mode of this thread, or None."""
    modes = STATE.dispatch_modes
    return modes[-1] if modes else None


def _get_current_dispatch_mode_stack():
    """This thread's dispatch modes, outermost first (a copy)."""
    return list(STATE.dispatch_modes)


def _len_torch_dispatch_stack():
    return len(STATE.dispatch_modes)


def is_in_torch_dispatch_mode(include_infra_modes=True):
    """Whether this thread has a dispatch mode entered."""
    return bool(STATE.dispatch_modes)


_is_in_torch_dispatch_mode = is_in_torch_dispatch_mode


@contextlib.contextmanager
def _pop_mode_temporarily():
    """Take the innermost mode off while the block runs; yields it."""
    mode = _pop_mode()
    try:
        yield mode
    finally:
        _push_mode(mode)


@contextlib.contextmanager
def _disable_current_modes():
    """Take all of this thread's modes off while the block runs; yields them (outermost first)."""
    popped = []
    while STATE.dispatch_modes:
        popped.append(_pop_mode())
    try:
        yield list(reversed(popped))
    finally:
        for mode in reversed(popped):
            _push_mode(mode)


# ================================================================ Tensor subclasses (wrappers)
#
# NOTE [Tensor subclass dispatch]
# PyTorch's other half of Python dispatch: a Tensor subclass whose classmethod
# ``__torch_dispatch__(cls, func, types, args=(), kwargs=None)`` is called for every primitive
# that sees one of its instances, below autograd. Usually it is a *wrapper*
# (``Tensor._make_wrapper_subclass``): a tensor with a shape, dtype, device and strides of its
# own and no values, holding inner tensors (TwoTensor holds two; a logging tensor one) on which
# ``__torch_dispatch__`` runs ``func``. A wrapper's ``_data`` is a ``WrapperValues`` stand-in
# (``_core/tensor.py``), so raw array code that reaches one raises NotImplementedError naming
# the op instead of computing on nothing.
# Gate: ``Tensor.__init_subclass__`` registers a class that defines its own
# ``__torch_dispatch__`` (``_register_dispatch_subclass``): the first one sets
# ``grad_mode.SUBCLASS_DISPATCH``, takes one permanent count in ``ACTIVE_TRACES`` and installs
# :func:`_dispatch` as ``primitive.DISPATCH_MODE_HOOK``, so until such a class exists the eager
# path reads nothing new. ``bind`` calls the hook on its slow branch after transforms unwrapped
# their tracers (functorch's layers sit above Python dispatch in PyTorch too); the hook returns
# None unless this thread has a mode entered or an argument's class is registered.
# Order (PyTorch's): the innermost mode first (popped while it runs); if it returns
# NotImplemented, each overloaded class (subclasses before their bases, else left to right)
# with ``types`` = those classes; the first result other than NotImplemented wins, and if all
# decline the call raises TypeError naming the op. ``register_torch_dispatch`` rules replace a
# class's or mode's ``__torch_dispatch__`` for one op. What the handler returns (Tensors, plain
# or subclass) becomes the output, recorded by :func:`_finish_subclass` as NOTE [Subclass
# autograd] says. Methods that are not primitives reach ``__torch_dispatch__`` as pseudo-ops
# through the ``__torch_function__`` protocol (``_subclass_torch_function``): the ``*_like``
# factories, ``item`` and in-place methods (``add_``, ``copy_``, ``zero_`` ...), whose ``func``
# calls the real method on the inner tensors.
#
# NOTE [Subclass autograd]
# As in PyTorch, autograd records on the wrapper: the node of a call with an argument that
# requires grad is a ``_SubclassNode`` holding the arguments and outputs as Tensors, whose
# backward always runs the op's vjp rules on Tensors (``TN``), so every op of the backward
# reaches ``__torch_dispatch__`` again and gradients come out as subclass instances (TwoTensor
# gradients for a TwoTensor loss). ``Tensor.backward`` of a root that is a registered subclass
# (or made by one) runs the engine in its Tensor mode under ``no_grad`` (``create_graph=True``:
# with grad), seeded by ``ones_like`` dispatched to the root's class, so leaves accumulate
# subclass gradients. ``autograd.grad`` keeps the engine's array mode: a subclass node lifts
# an all-ones array gradient arriving at a subclass output (the engine's seed) to the class's
# ``ones_like`` and hands subclass gradients on as Tensors, which the engine captures as they are.
# Limits (the engine would have to choose its Tensor mode itself): ``lucid.autograd.backward``
# (the function) is not routed, so a subclass gradient reaching a leaf's array accumulation
# raises NotImplementedError; in ``autograd.grad`` a subclass gradient flowing back into a node
# recorded on plain tensors works where that rule uses operators (``g * out``) and raises the
# same error where it calls an array function. ``detect_anomaly`` checks a wrapper gradient's
# inner tensors (``has_nan_values``). Seeds: ``func.grad`` seeds a subclass loss with its class's
# ``ones_like`` too (``func/api.py``), and gives an unused subclass input its ``zeros_like``.

_SUBCLASSES = set()  # classes with their own __torch_dispatch__ (never shrinks, but in tests)
_backend.WRAPPER_VALUES = WrapperValues  # NOTE [Devices of wrapper subclasses] in _core/backend.py
_RULES = {}  # (op name, class) -> handler: register_torch_dispatch


class _Off(threading.local):
    depth = 0


_OFF = _Off()


def _register_dispatch_subclass(cls):
    """Called by ``Tensor.__init_subclass__`` for a class that defines ``__torch_dispatch__``."""
    with _LOCK:
        if not _SUBCLASSES:
            ACTIVE_TRACES[0] += 1
            SUBCLASS_DISPATCH[0] = True
            primitive.DISPATCH_MODE_HOOK[0] = _dispatch
        _SUBCLASSES.add(cls)


def _forget_dispatch_subclasses():
    """Take every registered class off the gate (tests: the next test starts on the plain path).
    Their instances then reach raw array code and raise."""
    with _LOCK:
        if _SUBCLASSES:
            _SUBCLASSES.clear()
            ACTIVE_TRACES[0] -= 1
            SUBCLASS_DISPATCH[0] = False
            if _ENTERED[0] == 0:
                primitive.DISPATCH_MODE_HOOK[0] = None


class DisableTorchDispatch:
    """Within the block, subclasses' ``__torch_dispatch__`` is not called (modes still are):
    PyTorch's ``torch._C.DisableTorchDispatch``, what ``Tensor.__torch_dispatch__`` runs under."""

    def __enter__(self):
        _OFF.depth += 1
        return self

    def __exit__(self, *exc):
        _OFF.depth -= 1
        return False


def _overloaded(args):
    """The registered classes among ``args``, subclasses before their bases, else in order; or None."""
    found = None
    for a in args:
        cls = a.__class__
        if cls in _SUBCLASSES:
            if found is None:
                found = [cls]
            elif cls not in found:
                at = next((i for i, c in enumerate(found) if issubclass(cls, c)), len(found))
                found.insert(at, cls)
    return found


def _is_wrapped(t):
    return isinstance(t, Tensor) and (t.__class__ in _SUBCLASSES or t._data.__class__ is WrapperValues)


def _wrapped_outputs(out):
    return any(_is_wrapped(o) for o in (out if isinstance(out, (tuple, list)) else (out,)))


_AUTOGRAD_STATE = ("_rg", "grad_fn", "_grad", "_out_idx", "_base", "_views", "_view_src", "_hooks",
                   "_post_hooks", "_retains", "_multi_out", "_grad_dtype")


def _alias(t):
    """A new object of ``t``'s class sharing its state but none of its autograd state."""
    new = object.__new__(type(t))
    new.__dict__.update({k: v for k, v in t.__dict__.items() if k not in _AUTOGRAD_STATE})
    return new


def _outputs_of(prim, out):
    if prim.nout == 1:
        outs = [out]
    elif isinstance(out, (tuple, list)) and len(out) == prim.nout:
        outs = list(out)
    else:
        raise TypeError(f"{prim.name}: __torch_dispatch__ must return {prim.nout} Tensors for this op, "
                        f"got {type(out).__name__}")
    for o in outs:
        if not isinstance(o, Tensor):
            raise TypeError(f"{prim.name}: __torch_dispatch__ must return a Tensor for this op, "
                            f"got {type(o).__name__}")
    return outs


def _finish_subclass(prim, args, params, out):
    """The outputs a handler returned, recorded on as NOTE [Subclass autograd] says."""
    outs = _outputs_of(prim, out)
    record = prim.differentiable and STATE.grad_enabled and any(isinstance(a, Tensor) and a._rg for a in args)
    if record or prim.is_view:  # an argument handed back keeps its own autograd state
        outs = [_alias(o) if o._rg or o.grad_fn is not None or any(o is a for a in args) else o for o in outs]
    base = args[0] if args else None
    if prim.is_view and isinstance(base, Tensor):
        for o in outs:  # a view shares its base's version counter, as bind's views do
            o._version = base._version
    if record:
        _record(prim, args, params, outs)
    return outs[0] if prim.nout == 1 else tuple(outs)


def _array_cls(t):
    data = t._data
    if data.__class__ is WrapperValues:
        dev = data.device
        return _np.ndarray if dev.type == "cpu" else _backend._BACKENDS[dev.type].array_type
    return data.__class__


def _record(prim, args, params, outs):
    from ..autograd import engine

    parents = [(a if a.grad_fn is None else (a.grad_fn, a._out_idx)) if isinstance(a, Tensor) and a._rg else None
               for a in args]
    saved, versions = engine._saved_inputs(prim, args, True)
    meta = None if prim.nout == 1 else tuple((tuple(o.shape), o._data.dtype, _array_cls(o)) for o in outs)
    kept = (outs[0] if prim.nout == 1 else tuple(outs)) if prim.save_out else None
    node = _subclass_node_class()(prim, params, saved, versions, kept, meta, parents, False)
    if STATE.anomaly:
        node.stack = _traceback.extract_stack(limit=12)[:-4]
    node.out_refs = tuple(_weakref.ref(o) for o in outs)
    for i, o in enumerate(outs):
        if prim.nout == 1 or o.dtype.kind in "fc":
            o.grad_fn, o._out_idx, o._rg = node, i, True
    if prim.save_out:
        node.out_versions = tuple((o._version, o._version[0]) for o in outs)


_NODE_CLASS = []


def _subclass_node_class():
    """``_SubclassNode``, made on first use (the engine is imported then, not with this module)."""
    if _NODE_CLASS:
        return _NODE_CLASS[0]
    from ..autograd.engine import Node

    class _SubclassNode(Node):
        """The node of a call a ``__torch_dispatch__`` handled: its backward runs on Tensors.
        See NOTE [Subclass autograd]."""

        __slots__ = ("out_refs",)

        def apply(self, grads, tensor_mode):
            if self.freed:
                return Node.apply(self, grads, tensor_mode)  # raises: the graph was freed
            if self.versions is not None or self.out_versions is not None:
                self._check_versions()
            grads = [self._lifted(i, g) for i, g in enumerate(grads)]
            result = Node.apply(self, grads, tensor_mode)
            if tensor_mode:
                return result
            # the engine's array mode: plain gradients go on as arrays, subclass ones as Tensors
            return [r._data if r.__class__ is Tensor and r._data.__class__ is not WrapperValues else r
                    for r in result]

        def _lifted(self, i, g):
            """A plain all-ones gradient of a subclass output (the seed ``autograd.grad`` made from
            the output's shape) becomes ``ones_like(output)`` through its class, as PyTorch seeds."""
            if g is None or (g.__class__ is not Tensor and isinstance(g, Tensor)):
                return g
            arr = g._data if g.__class__ is Tensor else g
            if arr.__class__ is WrapperValues or (g.__class__ is Tensor and g._rg):
                return g
            out = self.out_refs[i]() if self.out_refs else None
            if out is not None and out.__class__ in _SUBCLASSES and arr.size:
                with _backend.on_device(arr):
                    seed = bool((arr == 1).all())
                if seed:
                    return _ones_like(out)
            return g if g.__class__ is Tensor else _wrap(g)

    _NODE_CLASS.append(_SubclassNode)
    return _SubclassNode


# ----------------------------------------------------------------------- pseudo-ops

class _PseudoOp:
    """A Tensor method that is not a primitive (``ones_like``, ``item``, ``add_`` ...) as the
    ``func`` a ``__torch_dispatch__`` receives: calling it runs the method on its arguments (the
    handler's inner tensors). ``name()`` is ``"lucid::<name>"``."""

    __slots__ = ("__name__", "_fn", "is_inplace")
    is_view = False

    def __init__(self, name, fn, inplace=False):
        self.__name__, self._fn, self.is_inplace = name, fn, inplace

    @property
    def overloadpacket(self):
        return self

    def name(self):
        return f"lucid::{self.__name__}"

    def __call__(self, *args, **kwargs):
        return self._fn(*args, **kwargs)

    def __repr__(self):
        return f"lucid.{self.__name__}"


_PSEUDO = {}


def _pseudo(name, fn, inplace=False):
    op = _PSEUDO.get((name, fn))
    if op is None:
        op = _PSEUDO[(name, fn)] = _PseudoOp(name, fn, inplace)
    return op


def _ones_like(t):
    """``ones_like(t)`` through ``t``'s handlers (the seed of a backward from ``t``)."""
    return _like("ones_like", t)


def _zeros_like(t):
    """``zeros_like(t)`` through ``t``'s handlers (``func.grad``'s gradient of an unused input)."""
    return _like("zeros_like", t)


def _like(name, t):
    import lucid

    public = getattr(lucid, name)
    fn = getattr(public, "_lucid_original", public)
    return _handle(_pseudo(name, fn), (t,), {}, _overloaded((t,)))


def has_nan_values(t):
    """Whether a Tensor holds a NaN, for ``detect_anomaly``: a wrapper's inner tensors (listed by
    ``__tensor_flatten__``) are checked each, another wrapper answers through its handler
    (``isnan(t).any().item()``, as PyTorch's check dispatches)."""
    data = t._data
    if data.__class__ is not WrapperValues:
        with _backend.on_device(data):
            return bool(_np.isnan(data).any())
    if is_traceable_wrapper_subclass(t):
        return any(has_nan_values(getattr(t, name)) for name in t.__tensor_flatten__()[0])
    with no_grad():
        return bool(t.isnan().any().item())


def is_dispatch_subclass_instance(t):
    """Whether ``t``'s class defines its own ``__torch_dispatch__`` (is on the gate)."""
    return t.__class__ in _SUBCLASSES


_LIKE = frozenset("""zeros_like ones_like empty_like full_like rand_like randn_like randint_like""".split())
_VALUE_METHODS = frozenset(("item",))  # aten._local_scalar_dense reaches __torch_dispatch__ in PyTorch
# in-place methods whose function is not named ``<op>_`` (``x[k] = v``, ``x //= y`` ...)
_INPLACE_NAMES = frozenset("""setitem _ifloordiv _imod __iadd__ __isub__ __imul__ __itruediv__ __ifloordiv__
__imod__ __ipow__ __iand__ __ior__ __ixor__ __ilshift__ __irshift__ __imatmul__ __setitem__""".split())
# methods named like in-place ops that change autograd or Python state, not values: as by default
_NOT_INPLACE = frozenset("""requires_grad_ detach_ share_memory_ apply_ map_ map2_ set_ resize_ resize_as_
retain_grad_ record_stream_""".split())


def _subclass_torch_function(cls, func, types, args=(), kwargs=None):
    """``Tensor.__torch_function__`` once a dispatch subclass exists: methods and factories that are
    not primitives reach a wrapper's ``__torch_dispatch__`` as pseudo-ops (NOTE [Tensor subclass
    dispatch]); everything else runs as by default."""
    from ..overrides import DisableTorchFunctionSubclass, _default_torch_function

    kwargs = kwargs or {}
    name = getattr(func, "__name__", "")
    target = args[0] if args else None
    if cls in _SUBCLASSES and target.__class__ in _SUBCLASSES and not _OFF.depth:
        inplace = name in _INPLACE_NAMES or (name.endswith("_") and not name.endswith("__")
                                             and name not in _NOT_INPLACE)
        if name in _LIKE or name in _VALUE_METHODS or inplace:
            fn = getattr(func, "_lucid_original", func)
            with DisableTorchFunctionSubclass():
                return _pseudo_call(_pseudo(name, fn, inplace), args, kwargs)
    return _default_torch_function(cls, func, types, args, kwargs)


def _pseudo_call(op, args, kwargs):
    target = args[0]
    if op.is_inplace:
        if STATE.grad_enabled and any(isinstance(a, Tensor) and a._rg for a in list(args) + list(kwargs.values())):
            raise NotImplementedError(
                f"{op.__name__}: in-place ops on a {type(target).__name__} (a __torch_dispatch__ subclass) "
                "are not recorded by autograd in Lucid; use the out-of-place op, or run it under no_grad")
        out = _handle(op, args, kwargs, _overloaded(args))
        target._version[0] += 1
        return out
    return _handle(op, args, kwargs, _overloaded(args))


# ----------------------------------------------------------------------- backward

def _subclass_backward(tensor, gradient, retain_graph, create_graph, inputs):
    """``Tensor.backward`` from a root that is a dispatch subclass or was made by one: the engine
    in its Tensor mode (NOTE [Subclass autograd]). Returns False (nothing done) for other roots."""
    node_cls = _NODE_CLASS[0] if _NODE_CLASS else None
    if tensor.__class__ not in _SUBCLASSES and (node_cls is None or tensor.grad_fn.__class__ is not node_cls):
        return False
    if not tensor._rg:
        return False  # the engine's own error
    from ..autograd import engine

    if gradient is None:
        if tensor.numel() != 1:
            raise RuntimeError(f"backward: grad can be implicitly created only for scalar outputs, but the output "
                               f"has shape {tuple(tensor.shape)}; pass a gradient of that shape")
        with no_grad():
            seed = _ones_like(tensor) if tensor.__class__ in _SUBCLASSES else _wrap(
                _backend.namespace_of(tensor).ones(tensor._data.shape, tensor._data.dtype))
    else:
        if not isinstance(gradient, Tensor):
            import lucid

            gradient = lucid.tensor(gradient, dtype=tensor.dtype, device=tensor.device)
        if tuple(gradient.shape) != tuple(tensor.shape):
            raise RuntimeError(f"backward: mismatch in shape: gradient has shape {tuple(gradient.shape)} but the "
                               f"output has shape {tuple(tensor.shape)}")
        seed = gradient
    if retain_graph is None:
        retain_graph = create_graph
    kw = {}
    if inputs is not None:
        inputs = [inputs] if isinstance(inputs, Tensor) else list(inputs)
        if not inputs:
            raise RuntimeError("backward: 'inputs' argument to backward() cannot be empty")
        kw = {"capture": [engine._edge_of(t) for t in inputs], "accumulate_into": inputs}
    with (enable_grad() if create_graph else no_grad()):
        engine.run_backward([engine._edge_of(tensor)], [seed], retain_graph=retain_graph, tensor_mode=True, **kw)
    return True


def _deepcopy_wrapper(t, memo):
    """``copy.deepcopy`` of a wrapper leaf (PyTorch's rule for tensors without storage): a
    ``clone()`` through its ``__torch_dispatch__``, then requires_grad, ``.grad`` and the Python
    attributes the clone does not already hold."""
    import copy

    with no_grad():
        new = t.clone()
    if type(new) is not type(t):
        raise RuntimeError(f"deepcopy: the clone of a {type(t).__name__} is a {type(new).__name__}; its "
                           "__torch_dispatch__ must return its own class for clone")
    memo[id(t)] = new
    new._rg = t._rg
    if t._grad is not None:
        new._grad = copy.deepcopy(t._grad, memo)
    for k, v in t.__dict__.items():
        if k not in new.__dict__ and not hasattr(Tensor, k):
            new.__dict__[k] = copy.deepcopy(v, memo)
    return new


# ----------------------------------------------------------------------- construction

def make_wrapper_subclass(cls, size, *, strides=None, storage_offset=None, dtype=None, layout=None, device=None,
                          requires_grad=False):
    """A ``cls`` instance advertising ``size``, ``strides``, ``dtype`` and ``device``, holding no
    values (PyTorch's ``Tensor._make_wrapper_subclass``): what a wrapper's ``__new__`` returns.

    Its values live in the inner tensors the subclass keeps; ops reach them through its
    ``__torch_dispatch__`` (NOTE [Tensor subclass dispatch]). ``storage_offset`` is recorded but
    ``Tensor.storage_offset()`` is not answered for a wrapper (it has no storage).

    Examples
    --------
    >>> import lucid
    >>> class Plain(lucid.Tensor):
    ...     @staticmethod
    ...     def __new__(cls, elem):
    ...         t = lucid.Tensor._make_wrapper_subclass(cls, elem.shape, dtype=elem.dtype, device=elem.device)
    ...         t.elem = elem
    ...         return t
    >>> w = Plain(lucid.ones(2, 3))
    >>> w.shape, w.dtype, w.device.type, w.stride()
    ((2, 3), lucid.float32, 'cpu', (3, 1))
    """
    if not (isinstance(cls, type) and issubclass(cls, Tensor)):
        raise TypeError("_make_wrapper_subclass: cls must be a subclass of Tensor, got "
                        f"{getattr(cls, '__name__', cls)!r}")
    if layout is not None and str(layout) not in ("strided", "lucid.strided", "torch.strided"):
        raise NotImplementedError(f"_make_wrapper_subclass: only the strided layout is supported, got {layout}")
    shape = tuple(int(n) for n in size)
    if any(n < 0 for n in shape):
        raise RuntimeError(f"_make_wrapper_subclass: negative dimension in size {shape}")
    dt = _np.dtype(_dtypes.to_dtype(dtype) if dtype is not None else _dtypes.get_default_dtype())
    item = dt.itemsize
    if strides is None:
        byte_strides = _contiguous_strides(shape, item)
    else:
        if len(strides) != len(shape):
            raise RuntimeError(f"_make_wrapper_subclass: {len(strides)} strides for a {len(shape)}-d size {shape}")
        byte_strides = tuple(int(s) * item for s in strides)
    data = WrapperValues(shape, dt)
    data.device = _backend.check_device(device)
    data.strides, data.offset, data.cls_name = byte_strides, int(storage_offset or 0), cls.__name__
    out = object.__new__(cls)
    out._data = data
    out._version = [0]
    if data.device.type != "cpu":
        # arrays a composite makes beside it (``namespace_of(t).zeros``) go to its device: the
        # hook namespace_of reads off an object that is not an array (a Meta has it too)
        out.array_cls = _backend._BACKENDS[data.device.type].array_type
    if requires_grad:
        Tensor.requires_grad.fset(out, True)
    return out


# ----------------------------------------------------------------------- helpers of PyTorch's

def is_traceable_wrapper_subclass(t):
    """Whether ``t`` is a Tensor subclass instance with ``__tensor_flatten__`` and
    ``__tensor_unflatten__`` (its inner tensors can be listed and rebuilt).

    Examples
    --------
    >>> import lucid
    >>> from lucid.utils._python_dispatch import is_traceable_wrapper_subclass
    >>> is_traceable_wrapper_subclass(lucid.ones(2))
    False
    """
    return isinstance(t, Tensor) and is_traceable_wrapper_subclass_type(type(t))


def is_traceable_wrapper_subclass_type(t):
    """:func:`is_traceable_wrapper_subclass` for a class."""
    return (isinstance(t, type) and issubclass(t, Tensor) and t is not Tensor
            and hasattr(t, "__tensor_flatten__") and hasattr(t, "__tensor_unflatten__"))


def transform_subclass(t, callback, outer_size=None, outer_stride=None):
    """A new instance of ``t``'s class whose inner tensors are ``callback(name, inner)`` of ``t``'s
    (through ``__tensor_flatten__``/``__tensor_unflatten__``), with ``t``'s size and strides unless
    given."""
    if not is_traceable_wrapper_subclass(t):
        raise TypeError(f"transform_subclass: expected a traceable wrapper subclass (with __tensor_flatten__ and "
                        f"__tensor_unflatten__), got {type(t).__name__}")
    outer_size = t.size() if outer_size is None else outer_size
    outer_stride = t.stride() if outer_stride is None else outer_stride
    names, ctx = t.__tensor_flatten__()
    inner = {name: callback(name, getattr(t, name)) for name in names}
    out = type(t).__tensor_unflatten__(inner, ctx, outer_size, outer_stride)
    if tuple(out.shape) != tuple(outer_size):
        raise RuntimeError(f"transform_subclass: __tensor_unflatten__ of {type(t).__name__} gave shape "
                           f"{tuple(out.shape)}, expected {tuple(outer_size)}")
    return out


def return_and_correct_aliasing(func, args, kwargs, out):
    """What a wrapper's ``__torch_dispatch__`` returns after computing ``out`` on its inner tensors,
    with PyTorch's aliasing: an in-place op returns its first argument itself; a view op's
    output shares its base's version counter (Lucid's wrappers have no storage to share).

    Examples
    --------
    >>> import lucid
    >>> from lucid.library import ops
    >>> from lucid.utils._python_dispatch import return_and_correct_aliasing
    >>> x = lucid.ones(2, 3)
    >>> y = return_and_correct_aliasing(ops.lucid.transpose.default, (x,), {}, lucid.ones(3, 2))
    >>> y._version is x._version
    True
    """
    if getattr(func, "is_inplace", False):
        return args[0]
    if getattr(func, "is_view", False) and args and isinstance(args[0], Tensor):
        for o in (out if isinstance(out, (tuple, list)) else (out,)):
            if isinstance(o, Tensor) and o is not args[0]:
                o._version = args[0]._version
    return out


def _op_name(op, api):
    if isinstance(op, (OpOverload, OpOverloadPacket)):
        return f"lucid::{op.__name__.split('.')[0]}" if isinstance(op, OpOverloadPacket) else op.name()
    if isinstance(op, str):
        name = op.split(".")[0]
        if "::" not in name:
            name = f"lucid::{name}"
        ns, _, prim = name.partition("::")
        if ns == "lucid" and prim in primitive.REGISTRY:
            return name
        if ns == "lucid" and prim in _LIKE | _VALUE_METHODS:
            return name
    raise ValueError(f"{api}: {op!r} is not a Lucid primitive (give 'lucid::<primitive>' or "
                     "lucid.library.ops.lucid.<primitive>); custom ops are composites in Lucid, their "
                     "primitives reach __torch_dispatch__")


def register_torch_dispatch(op, torch_dispatch_class, func=None, *, lib=None):
    """Make ``func`` what ``torch_dispatch_class`` does for ``op`` (``torch.library.register_torch_dispatch``),
    instead of its ``__torch_dispatch__``.

    ``torch_dispatch_class`` is a Tensor subclass with ``__torch_dispatch__`` (``func(cls, func,
    types, args, kwargs)``) or a :class:`TorchDispatchMode` class (``func(mode, func, types, args,
    kwargs)``). Without ``func`` it returns a decorator. ``lib`` is accepted for PyTorch's
    signature (registrations live as long as the process).

    Examples
    --------
    >>> import lucid
    >>> from lucid.utils._python_dispatch import TorchDispatchMode, register_torch_dispatch
    >>> class Count(TorchDispatchMode):
    ...     def __torch_dispatch__(self, func, types, args=(), kwargs=None):
    ...         return func(*args, **(kwargs or {}))
    >>> @register_torch_dispatch("lucid::exp", Count)
    ... def _(mode, func, types, args, kwargs):
    ...     return func(*args, **kwargs) + 1
    >>> with Count():
    ...     lucid.exp(lucid.zeros(1))
    tensor([2.])
    """
    name = _op_name(op, "register_torch_dispatch")
    if not isinstance(torch_dispatch_class, type) or not (
            issubclass(torch_dispatch_class, TorchDispatchMode) or torch_dispatch_class in _SUBCLASSES):
        raise TypeError("register_torch_dispatch: expected a TorchDispatchMode class or a Tensor subclass that "
                        f"defines __torch_dispatch__, got {torch_dispatch_class!r}")

    def register(fn):
        if not callable(fn):
            raise TypeError(f"register_torch_dispatch: expected a callable, got {type(fn).__name__}")
        _RULES[(name, torch_dispatch_class)] = fn
        return fn

    return register if func is None else register(func)
