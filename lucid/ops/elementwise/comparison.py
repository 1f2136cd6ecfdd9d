"""Selection and comparison: where, maximum/minimum, ==/</>..., clamp, isclose/isnan/... value tests.
"""
from __future__ import annotations

import math
import operator

import numpy as np

from ..._core import dtypes
from ..._core.backend import on_device, xp
from ..._core.primitive import bind, defprim
from ..._core.tensor import Tensor, tensor_method
from .._family import _as_tensor, batch_elementwise, binary, broadcast_tangent, nondiff, sum_to_shape

from .arithmetic import cast, promote


# ---------------------------------------------------------------- selection

def _where_vjp(branch):
    def rule(ns, g, out, c, x, y):
        z = ns.where(c, g, 0) if branch == 1 else ns.where(c, 0, g)
        return sum_to_shape(ns, z, getattr((x, y)[branch - 1], "shape", ()))

    return rule


def _where_jvp(ns, primals, tangents, out):
    c = primals[0]
    _, tx, ty = tangents
    tx = 0 if tx is None else tx
    ty = 0 if ty is None else ty
    return broadcast_tangent(ns, ns.where(c, tx, ty), out.shape)


# The rules read the condition and only the values' shapes: the values are not kept alive for the
# backward (as PyTorch's where saves the condition alone), nor version-checked (NOTE [Version
# checks of unread inputs])
where_p = defprim("where", xp.where, vjp=(None, _where_vjp(1), _where_vjp(2)), jvp=_where_jvp,
                  save_inputs=(0,), vjp_reads=((), (0,), (0,)))
where_p.batch = batch_elementwise(where_p)


def where(condition, input=None, other=None):
    """Elements of ``input`` where ``condition`` holds, else of ``other``.

    With only ``condition``, returns the indices of true elements (like ``nonzero(as_tuple=True)``).

    Parameters
    ----------
    condition : Tensor
        Bool (other dtypes are cast).
    input, other : Tensor or number
        Values where the condition holds / does not; all three broadcast.

    Examples
    --------
    >>> import lucid
    >>> x = lucid.tensor([1.0, -2.0])
    >>> lucid.where(x > 0, x, 0.0).tolist()
    [1.0, 0.0]
    """
    if input is None and other is None:
        from ..indexing import nonzero

        return nonzero(condition, as_tuple=True)
    if not isinstance(condition, Tensor):  # a constant condition: beside the values
        condition = _as_tensor(condition, like=input if isinstance(input, Tensor) else other)
    if condition.dtype != dtypes.bool_:
        condition = cast(condition, dtypes.bool_)
    if not isinstance(input, Tensor) and not isinstance(other, Tensor):
        input = _as_tensor(input, like=condition)  # two numbers: the result is on the condition's device
    x, y = promote(input, other)
    return bind(where_p, (condition, x, y), {})


@tensor_method("where")
def _where_method(self, condition, other):
    """``self.where(condition, other)``: ``lucid.where(condition, self, other)`` (the tensor is
    the values where ``condition`` holds, as PyTorch's method; not the condition).

    Examples
    --------
    >>> import lucid
    >>> lucid.tensor([1, 2]).where(lucid.tensor([True, False]), lucid.tensor([5, 6])).tolist()
    [1, 6]
    """
    return where(condition, self, other)


def _tie_split(ns, a, b):
    # Gradient of max(a, b) w.r.t. a: 0 where b wins, 1/2 on ties, else 1 (PyTorch's
    # masked_fill(a < b, 0)): where either is nan both operands get the whole gradient.
    return 1 - ((b > a) + (a == b) * 0.5)


maximum_p = binary("maximum", xp.maximum, lambda ns, x, y, o: _tie_split(ns, x, y),
                   lambda ns, x, y, o: _tie_split(ns, y, x))
minimum_p = binary("minimum", xp.minimum, lambda ns, x, y, o: _tie_split(ns, y, x),
                   lambda ns, x, y, o: _tie_split(ns, x, y))


@tensor_method("maximum")
def maximum(input, other):
    """Elementwise maximum (the gradient is split evenly on ties, as PyTorch).

    Parameters
    ----------
    input, other : Tensor or number
        Operands; they broadcast and are promoted to a common dtype.

    Examples
    --------
    >>> import lucid
    >>> lucid.maximum(lucid.tensor([1.0, 5.0]), lucid.tensor([3.0, 2.0])).tolist()
    [3.0, 5.0]
    """
    return bind(maximum_p, promote(input, other), {})


@tensor_method("minimum")
def minimum(input, other):
    """Elementwise minimum (the gradient is split evenly on ties, as PyTorch).

    Parameters
    ----------
    input, other : Tensor or number
        Operands; they broadcast and are promoted to a common dtype.

    Examples
    --------
    >>> import lucid
    >>> lucid.minimum(lucid.tensor([1.0, 5.0]), lucid.tensor([3.0, 2.0])).tolist()
    [1.0, 2.0]
    """
    return bind(minimum_p, promote(input, other), {})


# -------------------------------------------------------------- comparisons

_BINARY_PARAMS = ("    Parameters\n    ----------\n    input, other : Tensor or number\n"
                  "        Operands; they broadcast and are promoted to a common dtype.\n")

def _compare(name, impl, dunder):
    prim = nondiff(name, impl)

    def fn(input, other):
        return bind(prim, promote(input, other), {})

    fn.__name__ = name
    fn.__doc__ = (f"Elementwise ``{dunder}`` comparison (bool result, no gradient).\n\n"
                  + _BINARY_PARAMS + "\n    Examples\n    --------\n    >>> import lucid\n"
                  f"    >>> lucid.{name}(lucid.tensor([1, 2, 3]), 2).tolist()\n"
                  f"    {[bool(getattr(operator, dunder)(v, 2)) for v in (1, 2, 3)]}\n    ")
    if dunder in ("eq", "ne"):
        def dunder_fn(input, other):
            if other is None or other.__class__ in (str, list, tuple):  # PyTorch: False / True, no
                return NotImplemented  # error, no elementwise compare (lucid.eq(t, [1, 2]) has it)
            try:
                args = promote(input, other)
            except TypeError:  # an object no tensor holds (``object()``, a dict): PyTorch's
                return NotImplemented  # NotImplemented, so ``==`` is False (``x in (t,)`` works)
            return bind(prim, args, {})

        dunder_fn.__name__, dunder_fn.__doc__ = f"__{dunder}__", fn.__doc__
        setattr(Tensor, f"__{dunder}__", dunder_fn)
    else:
        setattr(Tensor, f"__{dunder}__", fn)
    setattr(Tensor, name, fn)
    return fn


eq = _compare("eq", xp.equal, "eq")
ne = _compare("ne", xp.not_equal, "ne")
lt = _compare("lt", xp.less, "lt")
le = _compare("le", xp.less_equal, "le")
gt = _compare("gt", xp.greater, "gt")
ge = _compare("ge", xp.greater_equal, "ge")
Tensor.__hash__ = lambda self: id(self)


# -------------------------------------------------------------------- clamp


def _clamp_impl(x, lo, hi):
    return xp.clip(x, lo, hi).astype(x.dtype, copy=False)


def _clamp_deriv(ns, x, lo, hi):
    # PyTorch passes the gradient where lo <= x <= hi (bounds inclusive).
    inside = x == x
    if lo is not None:
        inside = inside & (x >= lo)
    if hi is not None:
        inside = inside & (x <= hi)
    return inside


clamp_p = defprim(
    "clamp", _clamp_impl,
    vjp=(lambda ns, g, out, x, lo, hi: g * ns.cast(_clamp_deriv(ns, x, lo, hi), dtype=g.dtype),),
    jvp=lambda ns, primals, tangents, out, lo, hi: tangents[0] * ns.cast(_clamp_deriv(ns, primals[0], lo, hi), dtype=out.dtype),
)
clamp_p.batch = lambda vals, bdims, lo, hi: (bind(clamp_p, vals, {"lo": lo, "hi": hi}), bdims[0])


@tensor_method("clamp", "clip")
def clamp(input, min=None, max=None):
    """Limit values to ``[min, max]``; bounds may be numbers or tensors.

    Parameters
    ----------
    input : Tensor
        Any shape.
    min, max : number or Tensor, optional
        The bounds (at least one).

    Examples
    --------
    >>> import lucid
    >>> lucid.tensor([-1.0, 2.0]).clamp(min=0.0).tolist()
    [0.0, 2.0]
    """
    input = _as_tensor(input)
    if min is None and max is None:
        raise RuntimeError("clamp: at least one of 'min' or 'max' must not be None")
    # The bounds take part in type promotion as in PyTorch: a float bound makes an integer
    # tensor float, an int bound a bool tensor int64, a dimensioned tensor bound promotes as
    # an operand (a 0-d one is weak); the bounds are then converted to the result's dtype.
    dt = input.dtype
    if dt.kind == "f" and not isinstance(min, Tensor) and not isinstance(max, Tensor):
        # Numbers keep a float's dtype; within float16's range no bound can overflow.
        try:
            small = (min is None or -65504.0 <= min <= 65504.0) and (max is None or -65504.0 <= max <= 65504.0)
        except TypeError:  # a complex bound
            raise TypeError("clamp: not supported for complex bounds (complex numbers have no order; "
                            "compare .abs() or .real instead)") from None
        if small:
            return bind(clamp_p, (input,), {"lo": min, "hi": max})
    else:
        dt = dtypes.result_type(input, *(v for v in (min, max) if v is not None))
        if dt != input.dtype:
            input = cast(input, dt)
    if dt.kind == "b" and min is not None and max is not None:
        # PyTorch's two-sided clamp has no bool kernel (one bound is a max/min, which has)
        raise NotImplementedError("clamp: not implemented for 'Bool' (a bool result with both bounds)")
    lo, hi = _bound(min, dt), _bound(max, dt)
    if isinstance(lo, Tensor) or isinstance(hi, Tensor):
        out = input
        if lo is not None:
            out = where(_nan_or(out < lo, lo), lo, out)
        if hi is not None:
            out = where(_nan_or(out > hi, hi), hi, out)
        if dt.kind == "f":
            # A nan anywhere (input or bound) gives nan and no gradient to any of them, as
            # PyTorch's clamp_backward (its masks are comparisons, false with a nan).
            out = where(isnan(out), float("nan"), out)
        return out
    return bind(clamp_p, (input,), {"lo": lo, "hi": hi})


def _nan_or(cond, bound):
    # a NaN tensor bound gives NaN, as PyTorch's clamp (a comparison with NaN alone would keep x)
    if isinstance(bound, Tensor) and bound.dtype.kind == "f":
        return cond | isnan(bound)
    return cond


def _bound(v, dt):
    """A clamp bound in the result dtype ``dt``: a tensor cast (wrapping, as PyTorch's cast),
    a number checked as PyTorch's ``Scalar`` conversion does."""
    if v is None:
        return None
    if isinstance(v, Tensor):
        return v if v.dtype == dt else cast(v, dt)
    return _number_in(v, dt, "clamp")


_FLOAT_MAX = {}


def _float_max(dt):
    top = _FLOAT_MAX.get(dt)
    if top is None:
        top = _FLOAT_MAX[dt] = float(dtypes.np_finfo(dt).max)
    return top


def _number_in(v, dt, op):
    """The Python number ``v`` as a value of dtype ``dt``, as c10's checked conversion: an
    out-of-range value raises, except that an unsigned dtype takes a negative int down to
    ``-max`` in two's complement (uint8: -1 is 255), so ``clamp(min=-1)`` is ``clamp(min=255)``."""
    kind = dt.kind
    if kind in "iu" and v.__class__ is not bool:
        info = np.iinfo(dt)
        v = int(v)
        low = -int(info.max) if kind == "u" else int(info.min)
        if not low <= v <= int(info.max):
            raise RuntimeError(f"{op}: value {v} cannot be converted to type {dtypes.as_lucid(dt)} without overflow")
        return v + (1 << dt.itemsize * 8) if v < 0 and kind == "u" else v
    if kind == "f" and v.__class__ is not bool and abs(v) > _float_max(dt) and (v.__class__ is int or math.isfinite(v)):
        raise RuntimeError(f"{op}: value {v} cannot be converted to type {dtypes.as_lucid(dt)} without overflow")
    return v


clip = clamp


# ---------------------------------------------------------- tests of values

isnan_p = nondiff("isnan", xp.isnan)
isinf_p = nondiff("isinf", xp.isinf)
isfinite_p = nondiff("isfinite", xp.isfinite)
isposinf_p = nondiff("isposinf", xp.isposinf)
isneginf_p = nondiff("isneginf", xp.isneginf)


def _value_test(name, prim):
    def fn(input):
        return bind(prim, (_as_tensor(input),), {})

    fn.__name__ = fn.__qualname__ = name
    fn.__doc__ = (f"Elementwise ``{name}`` (bool result, no gradient).\n\n"
                  "    Parameters\n    ----------\n    input : Tensor\n        Any shape and dtype.\n\n"
                  "    Examples\n    --------\n"
                  f"    >>> import lucid\n    >>> lucid.{name}(lucid.tensor([1.0, float('nan'), float('inf')])).shape\n"
                  "    (3,)\n    ")
    setattr(Tensor, name, fn)
    return fn


isnan = _value_test("isnan", isnan_p)
isinf = _value_test("isinf", isinf_p)
isfinite = _value_test("isfinite", isfinite_p)
isposinf = _value_test("isposinf", isposinf_p)
isneginf = _value_test("isneginf", isneginf_p)

isclose_p = nondiff("isclose", lambda a, b, rtol, atol, equal_nan: xp.isclose(
    a, b, rtol=rtol, atol=atol, equal_nan=equal_nan))


@tensor_method("isclose")
def isclose(input, other, rtol=1e-05, atol=1e-08, equal_nan=False):
    """``|input - other| <= atol + rtol * |other|`` elementwise (bool, no gradient).

    Parameters
    ----------
    input, other : Tensor or number
        Operands; they broadcast and are promoted to a common dtype.
    rtol, atol : float
        Relative and absolute tolerance.
    equal_nan : bool
        Count NaN == NaN as close.

    Examples
    --------
    >>> import lucid
    >>> lucid.isclose(lucid.tensor([1.0, 2.0]), lucid.tensor([1.0 + 1e-9, 2.1])).tolist()
    [True, False]
    """
    if rtol < 0 or atol < 0:  # PyTorch's checks
        raise RuntimeError(f"isclose: {'rtol' if rtol < 0 else 'atol'} must be greater than or equal to zero, "
                           f"but got {rtol if rtol < 0 else atol}")
    a, b = promote(input, other)
    return bind(isclose_p, (a, b), {"rtol": rtol, "atol": atol, "equal_nan": equal_nan})


@tensor_method("allclose")
def allclose(input, other, rtol=1e-05, atol=1e-08, equal_nan=False):
    """True if :func:`isclose` holds everywhere (a Python bool).

    Parameters
    ----------
    input, other : Tensor or number
        Operands; they broadcast and are promoted to a common dtype.
    rtol, atol : float
        Relative and absolute tolerance.
    equal_nan : bool
        Count NaN == NaN as close.

    Examples
    --------
    >>> import lucid
    >>> lucid.allclose(lucid.tensor([1.0, 2.0]), lucid.tensor([1.0, 2.0 + 1e-9]))
    True
    """
    close = isclose(input, other, rtol, atol, equal_nan)._data
    with on_device(close):
        return bool(xp.all(close))


@tensor_method("equal")
def equal(input, other):
    """True if both tensors have the same shape and elements (a Python bool).

    Parameters
    ----------
    input, other : Tensor
        The tensors to compare.

    Examples
    --------
    >>> import lucid
    >>> lucid.equal(lucid.tensor([1, 2]), lucid.tensor([1, 2]))
    True
    """
    input, other = _as_tensor(input), _as_tensor(other)
    if input.shape != other.shape:
        return False
    same = eq(input, other)._data
    with on_device(same):
        return bool(xp.all(same))


# PyTorch's long names for the comparisons.
greater, greater_equal, less, less_equal, not_equal = gt, ge, lt, le, ne

for _name, _fn in [("greater", gt), ("greater_equal", ge), ("less", lt), ("less_equal", le), ("not_equal", ne)]:
    setattr(Tensor, _name, _fn)


__all__ = ['allclose', 'clamp', 'clip', 'eq', 'equal', 'ge', 'greater', 'greater_equal', 'gt', 'isclose', 'isfinite', 'isinf', 'isnan', 'isneginf', 'isposinf', 'le', 'less', 'less_equal', 'lt', 'maximum', 'minimum', 'ne', 'not_equal', 'where']
