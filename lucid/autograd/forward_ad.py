"""Forward-mode AD with dual tensors (``torch.autograd.forward_ad``).

A ``dual_level`` is a forward-mode interpreter level: the same :class:`JVPTrace` that
``lucid.func.jvp`` uses. ``make_dual`` wraps a primal and a tangent in a ``JVPTracer`` of
the innermost level; every op on it pushes the tangent forward with the op's jvp rule.
Levels nest, and a value belongs to a level only if its level matches (see NOTE [Levels]).

When a level exits, every dual it made is demoted in place to a plain tensor holding the
primal (its eager-tape history included), so results stay usable afterwards and
``unpack_dual`` then reports ``tangent=None``, as in PyTorch.

Examples
--------
>>> import lucid
>>> import lucid.autograd.forward_ad as fwAD
>>> x, v = lucid.tensor([1.0, 2.0]), lucid.tensor([1.0, 0.0])
>>> with fwAD.dual_level():
...     out = fwAD.make_dual(x, v) ** 2
...     fwAD.unpack_dual(out).tangent
tensor([2., 0.])
"""
from __future__ import annotations

import weakref
from collections import namedtuple

from .._core.grad_mode import STATE
from .._core.tensor import Tensor
from ..func._traces import JVPTrace, JVPTracer

__all__ = ["dual_level", "make_dual", "unpack_dual", "UnpackedDualTensor", "enter_dual_level",
           "exit_dual_level"]

UnpackedDualTensor = namedtuple("UnpackedDualTensor", ["primal", "tangent"])


class _DualTrace(JVPTrace):
    """A JVPTrace that remembers its duals so it can demote them when the level exits."""

    kind = "forward_ad dual_level"

    def __init__(self):
        super().__init__()
        self.duals = weakref.WeakSet()

    def process(self, prim, args, params):
        return self._keep(super().process(prim, args, params))

    def process_function(self, cls, args, kwargs):
        return self._keep(super().process_function(cls, args, kwargs))

    def _keep(self, out):
        for o in out if isinstance(out, tuple) else (out,):
            if isinstance(o, JVPTracer) and o._trace is self:
                self.duals.add(o)
        return out

    def __exit__(self, *exc):
        super().__exit__(*exc)
        for t in list(self.duals):
            _demote(t)
        self.duals = weakref.WeakSet()
        return False


def _demote(t):
    """Turn a dual of a finished level into a stand-in for its primal (level 0, tape kept)."""
    p = t._primal
    t._level, t._tangent = 0, None
    t._rg = bool(getattr(p, "_rg", False))
    t.grad_fn, t._out_idx = getattr(p, "grad_fn", None), getattr(p, "_out_idx", 0)
    t._version = getattr(p, "_version", t._version)


class dual_level:
    """Context manager opening a forward-AD level; ``__enter__`` returns the level number.

    Levels nest: ``make_dual``/``unpack_dual`` use the innermost one unless given ``level``.
    """

    def __enter__(self):
        self._trace = _DualTrace()
        self._trace.__enter__()
        return self._trace.level

    def __exit__(self, *exc):
        self._trace.__exit__(*exc)
        return False


_open_levels = []


def enter_dual_level():
    """Open a level without a ``with`` block (PyTorch's functional form); returns its number."""
    ctx = dual_level()
    lvl = ctx.__enter__()
    _open_levels.append(ctx)
    return lvl


def exit_dual_level(*, level=None):
    """Close the innermost level opened by :func:`enter_dual_level`."""
    if not _open_levels:
        raise RuntimeError("exit_dual_level: no level was opened with enter_dual_level()")
    ctx = _open_levels[-1]
    if level is not None and ctx._trace.level != level:
        raise RuntimeError(f"exit_dual_level: level {level} is not the innermost open level")
    _open_levels.pop().__exit__(None, None, None)


def _find_level(level, api):
    for tr in reversed(STATE.traces):
        if isinstance(tr, _DualTrace) and (level is None or tr.level == level):
            return tr
    if level is None:
        return None
    raise RuntimeError(f"{api}: there is no active dual_level with level={level}")


def make_dual(tensor, tangent, *, level=None):
    """A dual tensor with primal ``tensor`` and tangent ``tangent`` at ``level`` (innermost).

    Parameters
    ----------
    tensor, tangent : Tensor
        Same shape; floating point.

    Examples
    --------
    >>> import lucid, lucid.autograd.forward_ad as fwAD
    >>> with fwAD.dual_level():
    ...     y = fwAD.make_dual(lucid.tensor([3.0]), lucid.tensor([1.0])).exp()
    ...     round(fwAD.unpack_dual(y).tangent.item(), 3)
    20.086
    """
    api = "make_dual"
    trace = _find_level(level, api)
    if trace is None:
        raise RuntimeError(f"{api}: must be called inside a forward_ad.dual_level() context")
    for name, t in (("tensor", tensor), ("tangent", tangent)):
        if not isinstance(t, Tensor):
            raise TypeError(f"{api}: expected {name} to be a Tensor, got {type(t).__name__}")
    if tuple(tensor.shape) != tuple(tangent.shape):
        raise RuntimeError(
            f"{api}: expected tangent of the same shape as the primal, got tensor shape "
            f"{tuple(tensor.shape)} and tangent shape {tuple(tangent.shape)}"
        )
    if tensor.dtype.kind not in "fc":
        raise ValueError(f"{api}: expected a floating point or complex primal, got dtype {tensor.dtype}")
    if tangent.dtype.kind not in "fc":  # PyTorch's check: an integer tangent is refused, not cast
        raise ValueError(f"{api}: expected tangent to be floating point or complex, but got: {tangent.dtype}")
    if tangent.dtype != tensor.dtype:
        tangent = tangent.to(tensor.dtype)
    return trace._keep(JVPTracer(tensor, tangent, trace))


def unpack_dual(tensor, *, level=None):
    """``(primal, tangent)`` of a dual at ``level``; ``tangent`` is None for anything else.

    Examples
    --------
    >>> import lucid, lucid.autograd.forward_ad as fwAD
    >>> fwAD.unpack_dual(lucid.tensor([1.0])).tangent is None
    True
    """
    trace = _find_level(level, "unpack_dual")
    if trace is not None and isinstance(tensor, JVPTracer) and tensor._trace is trace \
            and tensor._level == trace.level:
        return UnpackedDualTensor(tensor._primal, tensor._tangent)
    return UnpackedDualTensor(tensor, None)
