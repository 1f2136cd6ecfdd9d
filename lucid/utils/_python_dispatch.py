"""``lucid.utils._python_dispatch`` (PyTorch's ``torch.utils._python_dispatch``): dispatch modes.

A :class:`TorchDispatchMode` sees every primitive Lucid evaluates while it is entered, below
autograd, and decides what it returns: log it, count it, check it, or compute something else.

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

from .._core import primitive
from .._core.grad_mode import ACTIVE_TRACES, STATE, no_grad
from .._core.tensor import Tensor

__all__ = ["TorchDispatchMode", "OpOverload", "OpOverloadPacket", "is_in_torch_dispatch_mode"]

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

    def __init__(self, packet):
        self.overloadpacket = packet
        self.__name__ = f"{packet.__name__}.default"
        self._overloadname = "default"

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
    """``bind`` of a level-0 call while this thread has a mode. See NOTE [Dispatch modes]."""
    modes = STATE.dispatch_modes
    mode = modes.pop()
    try:
        with no_grad():
            out = mode.__torch_dispatch__(packet_of(prim).default, _types_of(args), args, dict(params))
    finally:
        modes.append(mode)
    return primitive.finish_bind(prim, args, params, _arrays_of(prim, out))


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
        if _ENTERED[0] == 0:
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
