"""Elementwise primitives: arithmetic, math functions, comparisons and logic.

Each primitive is one ``unary``/``binary`` call holding its forward and derivative;
see ``_family.py`` for how the vjp, jvp and batching rules are derived from them.
"""
from __future__ import annotations

import builtins
import math
import operator

import numpy as np

from .._core import dtypes
from .._core.backend import xp
from .._core.primitive import bind, defprim
from .._core.tensor import Tensor, _to_array, _wrap, tensor_method
from ._family import _as_tensor, _promote_float, batch_elementwise, binary, broadcast_tangent, nondiff, sum_to_shape, unary

# --------------------------------------------------------------------- casting


def _cast_impl(x, dtype):
    return x.astype(dtype, copy=False)


cast_p = defprim(
    "cast",
    _cast_impl,
    # The gradient flows back in the input's dtype; none flows to integer inputs.
    vjp=(lambda ns, g, out, x, dtype: ns.cast(g, dtype=x.dtype) if x.dtype.kind in "fc" else None,),
    jvp=lambda ns, primals, tangents, out, dtype: ns.cast(tangents[0], dtype=dtype) if dtype.kind in "fc" else None,
    save_inputs=False,
)
cast_p.batch = batch_elementwise(cast_p)


def cast(x, dtype):
    """``x`` converted to ``dtype`` (differentiable between floating dtypes)."""
    dtype = dtypes.to_dtype(dtype)
    x = _as_tensor(x)
    if x.dtype == dtype:
        return x
    return bind(cast_p, (x,), {"dtype": dtype})


# ------------------------------------------------------------------ promotion

def _scalar_ok(v):
    return v.__class__ in (int, float, bool)


def promote(a, b):
    """Operands of a binary op, converted per NOTE [Type promotion] (scalars stay scalars)."""
    if a.__class__ is Tensor and b.__class__ is Tensor and a._data.dtype is b._data.dtype:
        return a, b
    if isinstance(a, Tensor):
        if isinstance(b, Tensor):
            if a is b or a.dtype == b.dtype:  # ``a is b``: x * x on a tracer skips two dtype lookups
                return a, b
            dt = dtypes.result_type(a, b)
            return cast(a, dt), cast(b, dt)
        if _scalar_ok(b):
            dt = dtypes.result_type(a, b)
            return (a if dt == a.dtype else cast(a, dt)), _fit_int(b, dt)
        return promote(a, _wrap(_to_array(b, None)))
    if _scalar_ok(a):
        if isinstance(b, Tensor):
            dt = dtypes.result_type(a, b)
            return _fit_int(a, dt), (b if dt == b.dtype else cast(b, dt))
    return promote(_as_tensor(a), b)


_INT_RANGE = {}


def _fit_int(v, dt):
    """A Python int outside ``dt``'s range wraps around as in PyTorch (NumPy 2 would raise)."""
    if v.__class__ is not int or dt.kind not in "iu":
        return v
    lo_hi = _INT_RANGE.get(dt)
    if lo_hi is None:
        info = np.iinfo(dt)
        lo_hi = _INT_RANGE[dt] = (int(info.min), int(info.max))
    if lo_hi[0] <= v <= lo_hi[1]:
        return v
    return int(np.array(v).astype(dt))


def _floatify(a, b):
    """True division and friends: integer operands become the default float."""
    a, b = promote(a, b)
    ref = a if isinstance(a, Tensor) else b
    if ref.dtype.kind in "biu":
        dt = dtypes.get_default_dtype()
        a = cast(a, dt) if isinstance(a, Tensor) else float(a)
        b = cast(b, dt) if isinstance(b, Tensor) else float(b)
    return a, b


# ------------------------------------------------------------------ arithmetic

add_p = binary("add", xp.add, lambda ns, x, y, o: 1, lambda ns, x, y, o: 1, save_inputs=False)
sub_p = binary("sub", xp.subtract, lambda ns, x, y, o: 1, lambda ns, x, y, o: -1, save_inputs=False)
mul_p = binary("mul", xp.multiply, lambda ns, x, y, o: y, lambda ns, x, y, o: x)
div_p = binary("div", xp.true_divide, lambda ns, x, y, o: 1 / y, lambda ns, x, y, o: -o / y, save_out=True)


def _pow_dy(ns, x, y, out):
    # d/dy x**y = log(x) x**y; defined as 0 where x == 0 (the limit used by PyTorch).
    return ns.where(x == 0, 0.0, ns.log(ns.where(x == 0, 1.0, x))) * out


pow_p = binary("pow", xp.power, lambda ns, x, y, o: y * x ** (y - 1), _pow_dy, save_out=True)

# Trivially linear: one rule per argument, no derivative to multiply by.
add_p.vjp = (lambda ns, g, out, x, y: sum_to_shape(ns, g, getattr(x, "shape", ())),
             lambda ns, g, out, x, y: sum_to_shape(ns, g, getattr(y, "shape", ())))
sub_p.vjp = (add_p.vjp[0], lambda ns, g, out, x, y: sum_to_shape(ns, -g, getattr(y, "shape", ())))


def _add_jvp(sign):
    def jvp(ns, primals, tangents, out):
        tx, ty = tangents
        if ty is not None and sign < 0:
            ty = -ty
        t = tx if ty is None else ty if tx is None else tx + ty
        return broadcast_tangent(ns, t, out.shape)

    return jvp


add_p.jvp, sub_p.jvp = _add_jvp(1), _add_jvp(-1)

neg_p, _ = unary("neg", xp.negative, lambda ns, x, o: -1, save_inputs=False, float_only=False)
neg_p.vjp = (lambda ns, g, out, x: -g,)
neg_p.jvp = lambda ns, primals, tangents, out: -tangents[0]


@tensor_method("add", "__add__")
def add(input, other, *, alpha=1):
    """``input + alpha * other`` with broadcasting and PyTorch type promotion.

    Parameters
    ----------
    input, other : Tensor or number
        Operands; they broadcast and are promoted to a common dtype.
    alpha : number
        Multiplier of ``other``.

    Examples
    --------
    >>> import lucid
    >>> lucid.add(lucid.tensor([1.0, 2.0]), 1)
    tensor([2., 3.])
    """
    if alpha != 1:
        other = mul(other, alpha)
    return bind(add_p, promote(input, other), {})


@tensor_method("sub", "subtract", "__sub__")
def sub(input, other, *, alpha=1):
    """``input - alpha * other``.

    Parameters
    ----------
    input, other : Tensor or number
        Operands; they broadcast and are promoted to a common dtype.
    alpha : number
        Multiplier of ``other``.

    Examples
    --------
    >>> import lucid
    >>> lucid.sub(lucid.tensor([5, 7]), 2, alpha=2).tolist()
    [1, 3]
    """
    if alpha != 1:
        other = mul(other, alpha)
    return bind(sub_p, promote(input, other), {})


@tensor_method("mul", "multiply", "__mul__")
def mul(input, other):
    """Elementwise product with broadcasting.

    Parameters
    ----------
    input, other : Tensor or number
        Operands; they broadcast and are promoted to a common dtype.

    Examples
    --------
    >>> import lucid
    >>> (lucid.tensor([1.0, 2.0]) * lucid.tensor([[3.0], [4.0]])).tolist()
    [[3.0, 6.0], [4.0, 8.0]]
    """
    return bind(mul_p, promote(input, other), {})


@tensor_method("div", "divide", "true_divide", "__truediv__")
def div(input, other, *, rounding_mode=None):
    """True division (integers give floats); ``rounding_mode`` "floor" or "trunc".

    Parameters
    ----------
    input, other : Tensor or number
        Operands; they broadcast and are promoted to a common dtype.
    rounding_mode : {None, 'floor', 'trunc'}
        Round the quotient.

    Examples
    --------
    >>> import lucid
    >>> lucid.div(lucid.tensor([7, -7]), 2).tolist()
    [3.5, -3.5]
    >>> lucid.div(lucid.tensor([7, -7]), 2, rounding_mode='trunc').tolist()
    [3, -3]
    """
    if rounding_mode == "floor":
        return floor_divide(input, other)
    if rounding_mode == "trunc":
        return _trunc_divide(input, other)
    if rounding_mode is not None:
        raise ValueError(f"div: rounding_mode must be None, 'floor' or 'trunc', got {rounding_mode!r}")
    return bind(div_p, _floatify(input, other), {})


@tensor_method("pow", "__pow__")
def pow(input, exponent):
    """``input ** exponent`` elementwise.

    Parameters
    ----------
    input : Tensor or number
        The base.
    exponent : Tensor or number
        The exponent (broadcasts with ``input``).

    Examples
    --------
    >>> import lucid
    >>> lucid.pow(lucid.tensor([2.0, 3.0]), 2).tolist()
    [4.0, 9.0]
    """
    a, b = promote(input, exponent)
    return bind(pow_p, (a, b), {})


@tensor_method("neg", "negative", "__neg__")
def neg(input):
    """``-input`` elementwise.

    Parameters
    ----------
    input : Tensor
        Any shape.

    Examples
    --------
    >>> import lucid
    >>> lucid.neg(lucid.tensor([1.0, -2.0])).tolist()
    [-1.0, 2.0]
    """
    return bind(neg_p, (_as_tensor(input),), {})


subtract, multiply, divide, true_divide, negative = sub, mul, div, div, neg

Tensor.__radd__ = lambda self, other: add(other, self)
Tensor.__rsub__ = lambda self, other: sub(other, self)
Tensor.__rmul__ = lambda self, other: mul(other, self)
Tensor.__rtruediv__ = lambda self, other: div(other, self)
Tensor.__rpow__ = lambda self, other: pow(other, self)
Tensor.__pos__ = lambda self: self


# ------------------------------------------------------------- unary math

exp_p, exp = unary("exp", xp.exp, lambda ns, x, o: o, save_out=True, save_inputs=False)
log_p, log = unary("log", xp.log, lambda ns, x, o: 1 / x)
sin_p, sin = unary("sin", xp.sin, lambda ns, x, o: ns.cos(x))
cos_p, cos = unary("cos", xp.cos, lambda ns, x, o: -ns.sin(x))
tanh_p, tanh = unary("tanh", xp.tanh, lambda ns, x, o: 1 - o * o, save_out=True, save_inputs=False)
sqrt_p, sqrt = unary("sqrt", xp.sqrt, lambda ns, x, o: 0.5 / o, save_out=True, save_inputs=False)
abs_p, abs = unary("abs", xp.abs, lambda ns, x, o: ns.sign(x), float_only=False)
sign_p = nondiff("sign", xp.sign)


@tensor_method("sign")
def sign(input):
    """-1, 0 or 1 by the sign of each element (gradient zero).

    Parameters
    ----------
    input : Tensor
        Any shape.

    Examples
    --------
    >>> import lucid
    >>> lucid.sign(lucid.tensor([-3.0, 0.0, 2.0])).tolist()
    [-1.0, 0.0, 1.0]
    """
    return bind(sign_p, (_as_tensor(input),), {})


for _name, _fn in [("exp", exp), ("log", log), ("sin", sin), ("cos", cos), ("tanh", tanh),
                   ("sqrt", sqrt), ("abs", abs), ("__abs__", abs)]:
    setattr(Tensor, _name, _fn)


def _relu_impl(x):
    return xp.maximum(x, 0).astype(x.dtype, copy=False)


# The derivative mask is cast to the output's dtype before the multiply: NumPy multiplies
# float by bool through a buffered cast, 1.4x slower than a cast pass plus a float multiply.
relu_p, relu = unary("relu", _relu_impl, lambda ns, x, o: ns.cast(o > 0, dtype=o.dtype), save_out=True,
                     save_inputs=False, float_only=False)
Tensor.relu = relu


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


where_p = defprim("where", xp.where, vjp=(None, _where_vjp(1), _where_vjp(2)), jvp=_where_jvp)
where_p.batch = batch_elementwise(where_p)


@tensor_method("where")
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
        from .indexing import nonzero

        return nonzero(condition, as_tuple=True)
    condition = _as_tensor(condition)
    if condition.dtype != dtypes.bool_:
        condition = cast(condition, dtypes.bool_)
    x, y = promote(input, other)
    return bind(where_p, (condition, x, y), {})


def _tie_split(ns, a, b):
    # Gradient of max(a, b) w.r.t. a: 1 where a wins, 1/2 on ties (as PyTorch).
    return (a > b) + (a == b) * 0.5


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


# -------------------------------------------------------------------- clone


clone_p, _ = unary("clone", lambda x: x.copy(), lambda ns, x, o: 1, save_inputs=False, float_only=False)
clone_p.vjp = (lambda ns, g, out, x: g,)
clone_p.jvp = lambda ns, primals, tangents, out: tangents[0]


@tensor_method("clone")
def clone(input, *, memory_format=None):
    """A copy of ``input`` that stays in the graph (gradient passes through unchanged).

    Parameters
    ----------
    input : Tensor
        Any shape.
    memory_format : optional
        Ignored (PyTorch compatibility).

    Examples
    --------
    >>> import lucid
    >>> x = lucid.tensor([1.0])
    >>> y = x.clone(); y[0] = 5.0
    >>> x.tolist()
    [1.0]
    """
    return bind(clone_p, (_as_tensor(input),), {})


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
    if isinstance(min, Tensor) or isinstance(max, Tensor):
        out = input
        if min is not None:
            out = where(out < min, min, out) if not isinstance(min, Tensor) else where(out < min, min.to(out.dtype), out)
        if max is not None:
            out = where(out > max, max, out) if not isinstance(max, Tensor) else where(out > max, max.to(out.dtype), out)
        return out
    if input.dtype.kind in "biu" and (isinstance(min, float) or isinstance(max, float)):
        input = cast(input, dtypes.get_default_dtype())
    return bind(clamp_p, (input,), {"lo": min, "hi": max})


clip = clamp


# -------------------------------------------------------------------- logic

def _logical(name, impl, dunder):
    prim = nondiff(name, impl)

    def fn(input, other):
        a, b = promote(input, other)
        return bind(prim, (a, b), {})

    fn.__name__ = fn.__qualname__ = name
    fn.__doc__ = (f"Elementwise ``{name}`` of integer or bool tensors.\n\n" + _BINARY_PARAMS
                  + "\n    Examples\n    --------\n    >>> import lucid\n"
                  f"    >>> lucid.{name}(lucid.tensor([12]), lucid.tensor([10])).tolist()\n"
                  f"    [{ {'and': 12 & 10, 'or': 12 | 10, 'xor': 12 ^ 10}[name.split('_')[1]] }]\n    ")
    for d in dunder:
        setattr(Tensor, d, fn)
    return prim, fn


bitwise_and_p, bitwise_and = _logical("bitwise_and", xp.bitwise_and, ("__and__", "bitwise_and"))
bitwise_or_p, bitwise_or = _logical("bitwise_or", xp.bitwise_or, ("__or__", "bitwise_or"))
bitwise_xor_p, bitwise_xor = _logical("bitwise_xor", xp.bitwise_xor, ("__xor__", "bitwise_xor"))
Tensor.__rand__ = lambda self, other: bitwise_and(other, self)
Tensor.__ror__ = lambda self, other: bitwise_or(other, self)
Tensor.__rxor__ = lambda self, other: bitwise_xor(other, self)
bitwise_not_p = nondiff("bitwise_not", xp.invert)
logical_not_p = nondiff("logical_not", xp.logical_not)


@tensor_method("__invert__", "bitwise_not")
def bitwise_not(input):
    """Elementwise bitwise NOT (``~``); logical NOT for bool tensors.

    Parameters
    ----------
    input : Tensor
        Integer or bool.

    Examples
    --------
    >>> import lucid
    >>> (~lucid.tensor([True, False])).tolist()
    [False, True]
    """
    return bind(bitwise_not_p, (_as_tensor(input),), {})


@tensor_method("logical_not")
def logical_not(input):
    """Elementwise logical NOT (nonzero is True); bool result.

    Parameters
    ----------
    input : Tensor
        Any shape.

    Examples
    --------
    >>> import lucid
    >>> lucid.logical_not(lucid.tensor([0.0, 2.0])).tolist()
    [True, False]
    """
    return bind(logical_not_p, (_as_tensor(input),), {})


# ------------------------------------------------------------ integer division

def _zero(*args):
    # Piecewise-constant ops (floor, round, floor_divide ...): zero gradient, as in PyTorch.
    return 0


def _int_checked(f):
    """Integer division by zero raises (as PyTorch) instead of NumPy's warning and 0."""

    def impl(x, y):
        kind = (x if hasattr(x, "dtype") else y).dtype.kind
        if kind in "biu" and not xp.all(y):
            raise ZeroDivisionError("integer division by zero")
        return f(x, y)

    return impl


floor_divide_p = binary("floor_divide", _int_checked(xp.floor_divide), _zero, _zero, save_inputs=False)
# remainder has Python's sign convention (sign of the divisor), fmod C's (sign of the dividend).
remainder_p = binary("remainder", _int_checked(xp.remainder), lambda ns, x, y, o: 1,
                     lambda ns, x, y, o: -ns.floor_divide(x, y))
fmod_p = binary("fmod", _int_checked(xp.fmod), lambda ns, x, y, o: 1, lambda ns, x, y, o: -ns.trunc(x / y))


@tensor_method("floor_divide", "__floordiv__")
def floor_divide(input, other):
    """``floor(input / other)`` elementwise, in the promoted dtype (the ``//`` operator).

    The gradient is zero (the result is piecewise constant).

    Parameters
    ----------
    input, other : Tensor or number
        Operands; they broadcast and are promoted to a common dtype.

    Examples
    --------
    >>> import lucid
    >>> (lucid.tensor([7, -7]) // 2).tolist()
    [3, -4]
    """
    return bind(floor_divide_p, promote(input, other), {})


@tensor_method("remainder", "__mod__")
def remainder(input, other):
    """Python-style modulus ``input - floor(input / other) * other`` (the ``%`` operator).

    The result has the sign of ``other``.

    Parameters
    ----------
    input, other : Tensor or number
        Operands; they broadcast and are promoted to a common dtype.

    Examples
    --------
    >>> import lucid
    >>> (lucid.tensor([5, -5]) % 3).tolist()
    [2, 1]
    """
    return bind(remainder_p, promote(input, other), {})


@tensor_method("fmod")
def fmod(input, other):
    """C-style modulus ``input - trunc(input / other) * other`` (sign of ``input``).

    Parameters
    ----------
    input, other : Tensor or number
        Operands; they broadcast and are promoted to a common dtype.

    Examples
    --------
    >>> import lucid
    >>> lucid.fmod(lucid.tensor([5, -5]), 3).tolist()
    [2, -2]
    """
    return bind(fmod_p, promote(input, other), {})


def _trunc_divide(input, other):
    a, b = promote(input, other)
    ref = a if isinstance(a, Tensor) else b
    if ref.dtype.kind not in "biu":
        return trunc(div(a, b))
    # Exact integer division rounding toward zero: floor, plus one where the signs differ
    # and the division is inexact.
    q = floor_divide(a, b)
    fix = ne(remainder(a, b), 0) & ne(lt(a, 0), lt(b, 0))
    return q + fix


Tensor.__rfloordiv__ = lambda self, other: floor_divide(other, self)
Tensor.__rmod__ = lambda self, other: remainder(other, self)


# ------------------------------------------------------- more unary functions

_LN2, _LN10 = math.log(2.0), math.log(10.0)
_TWO_OVER_SQRT_PI = 2.0 / math.sqrt(math.pi)

exp2_p, exp2 = unary("exp2", xp.exp2, lambda ns, x, o: o * _LN2, save_out=True, save_inputs=False)
expm1_p, expm1 = unary("expm1", xp.expm1, lambda ns, x, o: o + 1, save_out=True, save_inputs=False)
log2_p, log2 = unary("log2", xp.log2, lambda ns, x, o: 1 / (x * _LN2))
log10_p, log10 = unary("log10", xp.log10, lambda ns, x, o: 1 / (x * _LN10))
log1p_p, log1p = unary("log1p", xp.log1p, lambda ns, x, o: 1 / (x + 1))
rsqrt_p, rsqrt = unary("rsqrt", lambda x: 1 / xp.sqrt(x), lambda ns, x, o: -0.5 * o * o * o,
                       save_out=True, save_inputs=False)
square_p, square = unary("square", xp.square, lambda ns, x, o: 2 * x, float_only=False)
reciprocal_p, reciprocal = unary("reciprocal", lambda x: 1 / x, lambda ns, x, o: -(o * o),
                                 save_out=True, save_inputs=False)
tan_p, tan = unary("tan", xp.tan, lambda ns, x, o: 1 + o * o, save_out=True, save_inputs=False)
asin_p, asin = unary("asin", xp.arcsin, lambda ns, x, o: 1 / ns.sqrt(1 - x * x))
acos_p, acos = unary("acos", xp.arccos, lambda ns, x, o: -1 / ns.sqrt(1 - x * x))
atan_p, atan = unary("atan", xp.arctan, lambda ns, x, o: 1 / (1 + x * x))
sinh_p, sinh = unary("sinh", xp.sinh, lambda ns, x, o: ns.cosh(x))
cosh_p, cosh = unary("cosh", xp.cosh, lambda ns, x, o: ns.sinh(x))
asinh_p, asinh = unary("asinh", xp.arcsinh, lambda ns, x, o: 1 / ns.sqrt(x * x + 1))
acosh_p, acosh = unary("acosh", xp.arccosh, lambda ns, x, o: 1 / (ns.sqrt(x - 1) * ns.sqrt(x + 1)))
atanh_p, atanh = unary("atanh", xp.arctanh, lambda ns, x, o: 1 / (1 - x * x))


def _sigmoid_impl(x):
    # exp(-|x|) never overflows: 1/(1+e) for x >= 0, e/(1+e) for x < 0.
    e = xp.exp(-xp.abs(x))
    return xp.where(x >= 0, 1 / (1 + e), e / (1 + e)).astype(x.dtype, copy=False)


# A primitive (not 1/(1+exp(-x))) for stability, and so the backward reuses the output.
sigmoid_p, sigmoid = unary("sigmoid", _sigmoid_impl, lambda ns, x, o: o * (1 - o),
                           save_out=True, save_inputs=False)


# NOTE [erf without SciPy]
# SciPy is optional. When it is importable ``scipy.special.erf/erfc`` are used; otherwise
# W. J. Cody's rational Chebyshev approximations (Math. Comp. 1969, the CALERF routine)
# evaluated on whole arrays, accurate to about 1e-16 in float64. Both are computed in
# float64 and cast back to the input dtype.
_ERF_A = (3.16112374387056560e00, 1.13864154151050156e02, 3.77485237685302021e02,
          3.20937758913846947e03, 1.85777706184603153e-1)
_ERF_B = (2.36012909523441209e01, 2.44024637934444173e02, 1.28261652607737228e03,
          2.84423683343917062e03)
_ERF_C = (5.64188496988670089e-1, 8.88314979438837594e00, 6.61191906371416295e01,
          2.98635138197400131e02, 8.81952221241769090e02, 1.71204761263407058e03,
          2.05107837782607147e03, 1.23033935479799725e03, 2.15311535474403846e-8)
_ERF_D = (1.57449261107098347e01, 1.17693950891312499e02, 5.37181101862009858e02,
          1.62138957456669019e03, 3.29079923573345963e03, 4.36261909014324716e03,
          3.43936767414372164e03, 1.23033935480374942e03)
_ERF_P = (3.05326634961232344e-1, 3.60344899949804439e-1, 1.25781726111229246e-1,
          1.60837851487422766e-2, 6.58749161529837803e-4, 1.63153871373020978e-2)
_ERF_Q = (2.56852019228982242e00, 1.87295284992346047e00, 5.27905102951428412e-1,
          6.05183413124413191e-2, 2.33520497626869185e-3)
_RSQRT_PI = 0.5641895835477562869


def _erf_small(x):
    """erf(x) for |x| <= 0.46875 (Cody's first interval)."""
    z = x * x
    num, den = _ERF_A[4] * z, z
    for a, b in zip(_ERF_A[:3], _ERF_B[:3]):
        num, den = (num + a) * z, (den + b) * z
    return x * (num + _ERF_A[3]) / (den + _ERF_B[3])


def _erfc_tail(y):
    """erfc(y) for y > 0.46875 (Cody's second and third intervals); 0 past y = 26.543."""
    y = xp.clip(y, 0.46875, 27.0)
    num, den = _ERF_C[8] * y, y
    for c, d in zip(_ERF_C[:7], _ERF_D[:7]):
        num, den = (num + c) * y, (den + d) * y
    mid = (num + _ERF_C[7]) / (den + _ERF_D[7])
    z = 1 / (y * y)
    num, den = _ERF_P[5] * z, z
    for p, q in zip(_ERF_P[:4], _ERF_Q[:4]):
        num, den = (num + p) * z, (den + q) * z
    far = (_RSQRT_PI - z * (num + _ERF_P[4]) / (den + _ERF_Q[4])) / y
    r = xp.where(y <= 4.0, mid, far)
    head = xp.trunc(y * 16) / 16  # exp(-y^2) split in two for accuracy
    r = xp.exp(-head * head) * xp.exp(-(y - head) * (y + head)) * r
    return xp.where(y >= 26.543, 0.0, r)


def _erf_numpy(x):
    """erf on a float array with NumPy only. See NOTE [erf without SciPy]."""
    with xp.errstate(all="ignore"):  # both branches are evaluated everywhere
        return _erf_branches(xp.asarray(x, dtype=np.float64))


def _erf_branches(x):
    ax = xp.abs(x)
    tail = 1 - _erfc_tail(ax)
    out = xp.where(ax <= 0.46875, _erf_small(x), xp.where(x < 0, -tail, tail))
    return xp.where(xp.isnan(x), x, out)


def _erfc_numpy(x):
    """erfc on a float array with NumPy only. See NOTE [erf without SciPy]."""
    with xp.errstate(all="ignore"):  # both branches are evaluated everywhere
        return _erfc_branches(xp.asarray(x, dtype=np.float64))


def _erfc_branches(x):
    ax = xp.abs(x)
    tail = _erfc_tail(ax)
    out = xp.where(ax <= 0.46875, 1 - _erf_small(x), xp.where(x < 0, 2 - tail, tail))
    return xp.where(xp.isnan(x), x, out)


_SPECIAL = []


def _special():
    """``scipy.special`` if importable (looked up once, lazily), else None."""
    if not _SPECIAL:
        try:
            from scipy import special
        except Exception:  # SciPy is optional
            special = None
        _SPECIAL.append(special)
    return _SPECIAL[0]


def _erf_impl(x):
    sp = _special()
    out = sp.erf(x.astype(np.float64)) if sp is not None else _erf_numpy(x)
    return xp.asarray(out).astype(x.dtype, copy=False)


def _erfc_impl(x):
    sp = _special()
    out = sp.erfc(x.astype(np.float64)) if sp is not None else _erfc_numpy(x)
    return xp.asarray(out).astype(x.dtype, copy=False)


erf_p, erf = unary("erf", _erf_impl, lambda ns, x, o: _TWO_OVER_SQRT_PI * ns.exp(-(x * x)))
erfc_p, erfc = unary("erfc", _erfc_impl, lambda ns, x, o: -_TWO_OVER_SQRT_PI * ns.exp(-(x * x)))


@tensor_method("logit")
def logit(input, eps=None):
    """``log(p / (1 - p))``; with ``eps`` the input is first clamped to ``[eps, 1 - eps]``.

    Outside the clamp range the gradient is zero (as in PyTorch).

    Parameters
    ----------
    input : Tensor
        Probabilities.
    eps : float, optional
        Clamp the input to ``[eps, 1 - eps]`` first.

    Examples
    --------
    >>> import lucid
    >>> lucid.logit(lucid.tensor([0.5])).tolist()
    [0.0]
    """
    x = _promote_float(input)
    if eps is not None:
        x = clamp(x, eps, 1 - eps)
    return log(x) - log1p(-x)


# ------------------------------------------------------------------ rounding

def _keep_int(f):
    """Rounding of an integer tensor is a copy (NumPy would return float64)."""

    def impl(x):
        return x.copy() if x.dtype.kind in "biu" else f(x)

    return impl


floor_p, floor = unary("floor", _keep_int(xp.floor), _zero, save_inputs=False, float_only=False)
ceil_p, ceil = unary("ceil", _keep_int(xp.ceil), _zero, save_inputs=False, float_only=False)
trunc_p, trunc = unary("trunc", _keep_int(xp.trunc), _zero, save_inputs=False, float_only=False)
# frac = x - trunc(x): its gradient is 1 (PyTorch's convention), so a primitive of its own.
frac_p, frac = unary("frac", lambda x: x - xp.trunc(x), lambda ns, x, o: 1, save_inputs=False)
frac_p.vjp = (lambda ns, g, out, x: g,)
frac_p.jvp = lambda ns, primals, tangents, out: tangents[0]

round_p = defprim(
    "round", lambda x, decimals: xp.round(x, decimals),
    vjp=(lambda ns, g, out, x, decimals: g * 0,),
    jvp=lambda ns, primals, tangents, out, decimals: tangents[0] * 0,
    save_inputs=False,
)
round_p.batch = batch_elementwise(round_p)


@tensor_method("round")
def round(input, *, decimals=0):
    """Round half to even, to ``decimals`` decimal places (gradient zero).

    Parameters
    ----------
    input : Tensor
        Any shape.
    decimals : int
        Number of decimal places.

    Examples
    --------
    >>> import lucid
    >>> lucid.round(lucid.tensor([0.5, 1.5, 1.26]), decimals=0).tolist()
    [0.0, 2.0, 1.0]
    """
    return bind(round_p, (_as_tensor(input),), {"decimals": int(decimals)})


fix = trunc


# ------------------------------------------------------- more binary functions

def _floating_binary(name, prim, doc):
    def fn(input, other):
        return bind(prim, _floatify(input, other), {})

    fn.__name__ = fn.__qualname__ = name
    head, _, examples = doc.partition("Examples")
    fn.__doc__ = head.rstrip() + "\n\n" + _BINARY_PARAMS.replace(
        "common dtype.", "common floating dtype.") + "\n    Examples" + examples
    return fn


def _atan2_d(ns, a, b, num):
    return num / (a * a + b * b)


atan2_p = binary("atan2", xp.arctan2, lambda ns, a, b, o: _atan2_d(ns, a, b, b),
                 lambda ns, a, b, o: _atan2_d(ns, a, b, -a))
hypot_p = binary("hypot", xp.hypot, lambda ns, a, b, o: a / o, lambda ns, a, b, o: b / o, save_out=True)
logaddexp_p = binary("logaddexp", xp.logaddexp, lambda ns, a, b, o: ns.exp(a - o),
                     lambda ns, a, b, o: ns.exp(b - o), save_out=True)
logaddexp2_p = binary("logaddexp2", xp.logaddexp2, lambda ns, a, b, o: ns.exp2(a - o),
                      lambda ns, a, b, o: ns.exp2(b - o), save_out=True)

atan2 = _floating_binary("atan2", atan2_p, """Angle of the point ``(other, input)``: ``atan(input / other)`` in the right quadrant.

    Examples
    --------
    >>> import lucid
    >>> lucid.atan2(lucid.tensor([0.0]), lucid.tensor([-1.0])).tolist()
    [3.1415927410125732]
    """)
hypot = _floating_binary("hypot", hypot_p, """``sqrt(input**2 + other**2)`` without overflow.

    Examples
    --------
    >>> import lucid
    >>> lucid.hypot(lucid.tensor([3.0]), 4.0).tolist()
    [5.0]
    """)
logaddexp = _floating_binary("logaddexp", logaddexp_p, """``log(exp(input) + exp(other))`` computed stably.

    Examples
    --------
    >>> import lucid
    >>> lucid.logaddexp(lucid.tensor([1000.0]), 1000.0).tolist()
    [1000.6931762695312]
    """)
logaddexp2 = _floating_binary("logaddexp2", logaddexp2_p, """``log2(2**input + 2**other)`` computed stably.

    Examples
    --------
    >>> import lucid
    >>> lucid.logaddexp2(lucid.tensor([3.0]), 3.0).tolist()
    [4.0]
    """)


@tensor_method("lerp")
def lerp(input, end, weight):
    """``input + weight * (end - input)``; ``weight`` is a number or a tensor.

    Uses ``end - (end - input) * (1 - weight)`` for ``weight >= 0.5`` (as PyTorch), so
    ``lerp(a, b, 1) == b`` exactly.

    Parameters
    ----------
    input, end : Tensor
        The two end points (they broadcast).
    weight : float or Tensor
        Interpolation weight.

    Examples
    --------
    >>> import lucid
    >>> lucid.lerp(lucid.tensor([0.0, 10.0]), lucid.tensor([10.0, 20.0]), 0.5).tolist()
    [5.0, 15.0]
    """
    diff = end - input
    if not isinstance(weight, Tensor):
        return input + weight * diff if builtins.abs(weight) < 0.5 else end - diff * (1 - weight)
    return where(abs(weight) < 0.5, input + weight * diff, end - diff * (1 - weight))


# ---------------------------------------------------------------- nan_to_num

def _nan_to_num_impl(x, nan, posinf, neginf):
    return xp.nan_to_num(x, nan=nan, posinf=posinf, neginf=neginf)


def _finite_only(ns, g, x):
    # PyTorch: the gradient passes where the input is finite and is zero elsewhere.
    return ns.where(ns.isfinite(x), g, 0)


nan_to_num_p = defprim(
    "nan_to_num", _nan_to_num_impl,
    vjp=(lambda ns, g, out, x, **p: _finite_only(ns, g, x),),
    jvp=lambda ns, primals, tangents, out, **p: _finite_only(ns, tangents[0], primals[0]),
)
nan_to_num_p.batch = batch_elementwise(nan_to_num_p)


@tensor_method("nan_to_num")
def nan_to_num(input, nan=0.0, posinf=None, neginf=None):
    """Replace NaN by ``nan`` and infinities by ``posinf``/``neginf`` (default: the dtype's extremes).

    Parameters
    ----------
    input : Tensor
        Any shape.
    nan : float
        Replacement of NaN.
    posinf, neginf : float, optional
        Replacements of +inf and -inf.

    Examples
    --------
    >>> import lucid
    >>> lucid.nan_to_num(lucid.tensor([float("nan"), 1.0]), nan=-1.0).tolist()
    [-1.0, 1.0]
    """
    return bind(nan_to_num_p, (_as_tensor(input),), {"nan": nan, "posinf": posinf, "neginf": neginf})


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
    return bool(xp.all(isclose(input, other, rtol, atol, equal_nan)._data))


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
    return bool(xp.all(eq(input, other)._data))


# --------------------------------------------------------------- logical ops

def _logical_binary(name, impl):
    prim = nondiff(name, impl)

    def fn(input, other):
        args = tuple(v if _scalar_ok(v) else _as_tensor(v) for v in (input, other))
        return bind(prim, args, {})

    fn.__name__ = fn.__qualname__ = name
    fn.__doc__ = (f"Elementwise ``{name}`` of the truth values (nonzero is True); bool result.\n\n"
                  + _BINARY_PARAMS + f"\n    Examples\n    --------\n    >>> import lucid\n"
                  f"    >>> lucid.{name}(lucid.tensor([True, False]), lucid.tensor([True, True])).shape\n"
                  "    (2,)\n    ")
    setattr(Tensor, name, fn)
    return prim, fn


logical_and_p, logical_and = _logical_binary("logical_and", xp.logical_and)
logical_or_p, logical_or = _logical_binary("logical_or", xp.logical_or)
logical_xor_p, logical_xor = _logical_binary("logical_xor", xp.logical_xor)

# PyTorch's long names for the comparisons.
greater, greater_equal, less, less_equal, not_equal = gt, ge, lt, le, ne

for _name, _fn in [("exp2", exp2), ("expm1", expm1), ("log2", log2), ("log10", log10), ("log1p", log1p),
                   ("rsqrt", rsqrt), ("square", square), ("reciprocal", reciprocal), ("tan", tan),
                   ("asin", asin), ("arcsin", asin), ("acos", acos), ("arccos", acos), ("atan", atan),
                   ("arctan", atan), ("sinh", sinh), ("cosh", cosh), ("asinh", asinh), ("arcsinh", asinh),
                   ("acosh", acosh), ("arccosh", acosh), ("atanh", atanh), ("arctanh", atanh),
                   ("sigmoid", sigmoid), ("erf", erf), ("erfc", erfc), ("floor", floor), ("ceil", ceil),
                   ("trunc", trunc), ("fix", trunc), ("frac", frac), ("atan2", atan2), ("arctan2", atan2),
                   ("hypot", hypot), ("logaddexp", logaddexp), ("logaddexp2", logaddexp2),
                   ("greater", gt), ("greater_equal", ge), ("less", lt), ("less_equal", le),
                   ("not_equal", ne)]:
    setattr(Tensor, _name, _fn)
arcsin, arccos, arctan, arcsinh, arccosh, arctanh, arctan2 = asin, acos, atan, asinh, acosh, atanh, atan2


def _document_input(fn):
    """Give a family-made unary function (``unary`` in _family.py) its Parameters section."""
    head, sep, tail = fn.__doc__.partition("Examples\n--------")
    if "Parameters" not in head:
        fn.__doc__ = (head.rstrip() + "\n\nParameters\n----------\ninput : Tensor\n    Any shape; integer "
                      "and bool inputs are promoted to the default float dtype first.\n\n" + sep + tail)


for _fn in (exp, log, sin, cos, tanh, sqrt, abs, relu, exp2, expm1, log2, log10, log1p, rsqrt, square,
            reciprocal, tan, asin, acos, atan, sinh, cosh, asinh, acosh, atanh, sigmoid, erf, erfc,
            floor, ceil, trunc, frac):
    _document_input(_fn)


__all__ = [
    'abs',
    'acos',
    'acosh',
    'add',
    'allclose',
    'arccos',
    'arccosh',
    'arcsin',
    'arcsinh',
    'arctan',
    'arctan2',
    'arctanh',
    'asin',
    'asinh',
    'atan',
    'atan2',
    'atanh',
    'bitwise_and',
    'bitwise_not',
    'bitwise_or',
    'bitwise_xor',
    'ceil',
    'clamp',
    'clip',
    'clone',
    'cos',
    'cosh',
    'div',
    'divide',
    'eq',
    'equal',
    'erf',
    'erfc',
    'exp',
    'exp2',
    'expm1',
    'fix',
    'floor',
    'floor_divide',
    'fmod',
    'frac',
    'ge',
    'greater',
    'greater_equal',
    'gt',
    'hypot',
    'isclose',
    'isfinite',
    'isinf',
    'isnan',
    'isneginf',
    'isposinf',
    'le',
    'lerp',
    'less',
    'less_equal',
    'log',
    'log10',
    'log1p',
    'log2',
    'logaddexp',
    'logaddexp2',
    'logical_and',
    'logical_not',
    'logical_or',
    'logical_xor',
    'logit',
    'lt',
    'maximum',
    'minimum',
    'mul',
    'multiply',
    'nan_to_num',
    'ne',
    'neg',
    'negative',
    'not_equal',
    'pow',
    'reciprocal',
    'relu',
    'remainder',
    'round',
    'rsqrt',
    'sigmoid',
    'sign',
    'sin',
    'sinh',
    'sqrt',
    'square',
    'sub',
    'subtract',
    'tan',
    'tanh',
    'true_divide',
    'trunc',
    'where',
]
