"""Elementwise primitives: arithmetic, math functions, comparisons and logic.

Each primitive is one ``unary``/``binary`` call holding its forward and derivative;
see ``_family.py`` for how the vjp, jvp and batching rules are derived from them.
"""
from __future__ import annotations

import math

import numpy as np

from .._core import dtypes
from .._core.backend import xp
from .._core.primitive import TN, bind, defprim
from .._core.tensor import Tensor, _to_array, _wrap, tensor_method
from ._family import _as_tensor, batch_elementwise, binary, broadcast_tangent, nondiff, sum_to_shape, unary

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
            if a.dtype == b.dtype:
                return a, b
            dt = dtypes.result_type(a, b)
            return cast(a, dt), cast(b, dt)
        if _scalar_ok(b):
            dt = dtypes.result_type(a, b)
            return (a if dt == a.dtype else cast(a, dt)), b
        return promote(a, _wrap(_to_array(b, None)))
    if _scalar_ok(a):
        if isinstance(b, Tensor):
            dt = dtypes.result_type(a, b)
            return a, (b if dt == b.dtype else cast(b, dt))
    return promote(_as_tensor(a), b)


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
    """``input - alpha * other``."""
    if alpha != 1:
        other = mul(other, alpha)
    return bind(sub_p, promote(input, other), {})


@tensor_method("mul", "multiply", "__mul__")
def mul(input, other):
    """Elementwise product with broadcasting."""
    return bind(mul_p, promote(input, other), {})


@tensor_method("div", "divide", "true_divide", "__truediv__")
def div(input, other, *, rounding_mode=None):
    """True division (integers give floats); ``rounding_mode`` "floor" or "trunc"."""
    if rounding_mode == "floor":
        return floor_divide(input, other)
    if rounding_mode == "trunc":
        return trunc(div(input, other)).to(dtypes.result_type(*promote(input, other)))
    return bind(div_p, _floatify(input, other), {})


@tensor_method("pow", "__pow__")
def pow(input, exponent):
    """``input ** exponent`` elementwise."""
    a, b = promote(input, exponent)
    return bind(pow_p, (a, b), {})


@tensor_method("neg", "negative", "__neg__")
def neg(input):
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
    """-1, 0 or 1 by the sign of each element (gradient zero)."""
    return bind(sign_p, (_as_tensor(input),), {})


for _name, _fn in [("exp", exp), ("log", log), ("sin", sin), ("cos", cos), ("tanh", tanh),
                   ("sqrt", sqrt), ("abs", abs), ("__abs__", abs)]:
    setattr(Tensor, _name, _fn)


def _relu_impl(x):
    return xp.maximum(x, 0).astype(x.dtype, copy=False)


relu_p, relu = unary("relu", _relu_impl, lambda ns, x, o: o > 0, save_out=True, save_inputs=False,
                     float_only=False)
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
    return bind(maximum_p, promote(input, other), {})


@tensor_method("minimum")
def minimum(input, other):
    return bind(minimum_p, promote(input, other), {})


# -------------------------------------------------------------- comparisons

def _compare(name, impl, dunder):
    prim = nondiff(name, impl)

    def fn(input, other):
        return bind(prim, promote(input, other), {})

    fn.__name__ = name
    fn.__doc__ = f"Elementwise ``{dunder}`` comparison (bool result, no gradient)."
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
    """A copy of ``input`` that stays in the graph (gradient passes through unchanged)."""
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

    fn.__name__ = name
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
    return bind(bitwise_not_p, (_as_tensor(input),), {})


@tensor_method("logical_not")
def logical_not(input):
    return bind(logical_not_p, (_as_tensor(input),), {})


__all__ = ['abs', 'add', 'bitwise_and', 'bitwise_not', 'bitwise_or', 'bitwise_xor', 'clamp', 'clip', 'clone', 'cos', 'div', 'divide', 'eq', 'exp', 'ge', 'gt', 'le', 'log', 'logical_not', 'lt', 'maximum', 'minimum', 'mul', 'multiply', 'ne', 'neg', 'negative', 'pow', 'relu', 'sign', 'sin', 'sqrt', 'sub', 'subtract', 'tanh', 'true_divide', 'where']
