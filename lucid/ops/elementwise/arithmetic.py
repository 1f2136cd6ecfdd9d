"""Arithmetic primitives: casting, type promotion, + - * / ** and negation, clone, integer division.

Each primitive is one ``unary``/``binary`` call holding its forward and derivative;
see ``_family.py`` for how the vjp, jvp and batching rules are derived from them.
"""
from __future__ import annotations

import operator

import numpy as np

from ..._core import dtypes
from ..._core.backend import namespace_of, xp
from ..._core.primitive import bind, defprim
from ..._core.tensor import Tensor, _to_array, _wrap, tensor_method
from .._family import _as_tensor, batch_elementwise, binary, broadcast_tangent, quiet, sum_to_shape, unary
from ..memory_format import contiguous_format as _contiguous_format


# --------------------------------------------------------------------- casting


def _cast_impl(x, dtype):
    if x.dtype.kind == "c" and dtype.kind != "c":
        # complex -> real keeps the real part; so the vjp of a real -> complex cast (this
        # impl on the cotangent) hands a real leaf a real gradient. See NOTE [Complex gradients]
        x = x.real
    return x.astype(dtype, copy=False)


cast_p = defprim(
    "cast",
    quiet(_cast_impl, 1),  # 1e300 to float32 is inf, nan to int is arbitrary, silently (as PyTorch)
    # The gradient flows back in the input's dtype; none flows to integer inputs.
    vjp=(lambda ns, g, out, x, dtype: ns.cast(g, dtype=x.dtype) if dtypes.is_differentiable(x.dtype) else None,),
    jvp=lambda ns, primals, tangents, out, dtype: (ns.cast(tangents[0], dtype=dtype)
                                                   if dtypes.is_differentiable(dtype) else None),
    save_inputs=False,
)
cast_p.batch = batch_elementwise(cast_p)


def cast(x, dtype):
    """``x`` converted to ``dtype`` (differentiable between floating dtypes)."""
    dtype = dtypes.to_dtype(dtype)
    x = _as_tensor(x)
    if x.dtype == dtype:
        return x
    if not dtypes.is_differentiable(dtype) and x.requires_grad:  # an integer or bool result never requires grad
        x = x.detach()
    return bind(cast_p, (x,), {"dtype": dtype})


class DtypeNotImplemented(NotImplementedError, TypeError):
    """An op has no kernel for the dtype (PyTorch: NotImplementedError; Lucid raised TypeError)."""


# ------------------------------------------------------------------ promotion

def _scalar_ok(v):
    return v.__class__ in (int, float, bool)


def _complex_number(v, dt, like):
    """A Python complex as a 0-d tensor of the result dtype on ``like``'s device: made straight in
    ``dt`` (as PyTorch's wrapped numbers), not in the default complex dtype first, which would
    round ``0.7 - 1.3j`` to complex64 beside a complex128 tensor."""
    return _wrap(namespace_of(like).asarray(v, dtype=dt))


def promote(a, b, opmath=0):
    """Operands of a binary op, converted per NOTE [Type promotion] (scalars stay scalars).

    ``opmath`` (mul: 2, div: 1): return None where PyTorch computes the pair in float32, a
    float16 tensor beside a number that float16 cannot hold (as the second operand, or either
    with 2). See NOTE [Half opmath].
    """
    if a.__class__ is Tensor and b.__class__ is Tensor and a._data.dtype is b._data.dtype:
        return a, b
    if isinstance(a, Tensor):
        if isinstance(b, Tensor):
            if a is b or a.dtype == b.dtype:  # ``a is b``: x * x on a tracer skips two dtype lookups
                return a, b
            dt = dtypes.result_type(a, b)
            if dt is _F16 and opmath and (_cpu_scalar(b, a) or opmath == 2 and _cpu_scalar(a, b)):
                return None
            return cast(a, dt), cast(b, dt)
        if _scalar_ok(b):
            dt = dtypes.result_type(a, b)
            if dt is _F16 and opmath and not _half_exact(b):
                return None
            return (a if dt == a.dtype else cast(a, dt)), _fit_int(b, dt)
        if b.__class__ is complex:
            dt = dtypes.result_type(a, b)
            return (a if dt == a.dtype else cast(a, dt)), _complex_number(b, dt, a)
        if isinstance(b, np.generic):  # a NumPy scalar is a number to PyTorch (weak: float32 + np.float64 is float32)
            return promote(a, b.item(), opmath)
        return promote(a, _as_tensor(b, like=a), opmath)
    if a.__class__ is complex and isinstance(b, Tensor):
        dt = dtypes.result_type(a, b)
        return _complex_number(a, dt, b), (b if dt == b.dtype else cast(b, dt))
    if _scalar_ok(a):
        if isinstance(b, Tensor):
            dt = dtypes.result_type(a, b)
            if dt is _F16 and opmath == 2 and not _half_exact(a):
                return None
            return _fit_int(a, dt), (b if dt == b.dtype else cast(b, dt))
    if isinstance(a, np.generic) and isinstance(b, Tensor):
        return promote(a.item(), b, opmath)
    return promote(_as_tensor(a, like=b), b, opmath)


# NOTE [Half opmath]
# PyTorch computes float16 arithmetic in float32 ("opmath") and rounds once. Between two
# float16 tensors that is what NumPy and CuPy do too. A Python number is another matter:
# NumPy treats it as weak and rounds it to float16 *before* the op, while PyTorch's mul and
# div kernels read a CPU scalar (a number, or a 0-d tensor of another dtype) at float32
# precision: ``x * 0.1`` for 100 * randn float16 values differed by one ulp in 35% of the
# elements, and so did the backward (the vjp of ``x * s`` is ``g * s``). So ``mul`` and
# ``div`` run such a pair as ``cast(op(cast(x, float32), s), float16)``: composed Lucid ops,
# so vjp, jvp and vmap follow and the backward rounds as PyTorch's does; only float16 pays
# (the check sits in promote's mixed-dtype branches, after ``result_type``), and a number
# float16 holds exactly (0.5, 3, 1024) keeps the one-op path, whose value is the same.
# ``add``/``sub`` with ``alpha`` compute ``x + half(alpha) * y`` in float32 (PyTorch's fused
# kernel), and ``s / x`` is ``reciprocal(x) * s`` (PyTorch's ``__rtruediv__``). Checked
# against torch 2.13 on 20 000 values: add, sub, pow, remainder, fmod and the comparisons
# round the number to float16 in PyTorch too (``x_f16 == 0.1`` is True for x = half(0.1)),
# so they keep NumPy's rule. PyTorch's CPU mul takes opmath only for a scalar *second*
# operand (``torch.mul(0.1, x)`` rounds), its CUDA mul for either: Lucid does either, so
# ``0.1 * x`` and ``x * 0.1`` agree.
_F16 = np.dtype(np.float16)
_F32 = np.dtype(np.float32)


def _half_exact(v):
    """Whether the Python number ``v`` is a float16 value (then float16 arithmetic is exact for it)."""
    if v.__class__ is bool:
        return True
    if v.__class__ is int and -2048 <= v <= 2048:
        return True
    with np.errstate(over="ignore"):
        return v.__class__ is not complex and float(np.float16(v)) == v


def _cpu_scalar(s, t):
    """Whether the tensor ``s`` beside ``t`` is a 0-d real tensor PyTorch reads at float32 precision."""
    return s.ndim == 0 and t.ndim > 0 and s.dtype.kind in "iuf"


def _half_result(a, b):
    if not (_is_half(a) or _is_half(b)):  # the cheap test first: add(x, y, alpha=2) is common
        return False
    try:
        return dtypes.result_type(a, b) is _F16
    except TypeError:  # a list or array operand: not float16 arithmetic of two operands
        return False


def _is_half(v):
    if v.__class__ is Tensor:
        return v._data.dtype is _F16
    return isinstance(v, Tensor) and v.dtype == _F16


def _is_bf16(v):
    """Whether ``v`` is a bfloat16 tensor (NOTE [bfloat16]); one global read until bfloat16 is used."""
    if dtypes.BF16 is None or not isinstance(v, Tensor):
        return False
    return (v._data.dtype if v.__class__ is Tensor else v.dtype) == dtypes.BF16  # a tracer: its dtype


def _half_opmath(prim, a, b):
    """``prim(a, b)`` for a float16 result computed in float32 and rounded once (NOTE [Half opmath])."""
    a = cast(a, _F32) if isinstance(a, Tensor) else a
    b = cast(b, _F32) if isinstance(b, Tensor) else b
    return cast(bind(prim, promote(a, b), {}), _F16)


def _half_axpy(prim, input, other, alpha):
    """``input + alpha * other`` (or minus) for float16 operands, as PyTorch's fused kernel:
    ``alpha`` and a number ``other`` rounded to float16, the rest in float32, one rounding."""
    a, b = promote(input, other)
    half = lambda v: float(np.float16(v))  # noqa: E731
    a = cast(a, _F32) if isinstance(a, Tensor) else half(a)
    # two float16 values multiply exactly in a Python float (and in float32)
    b = mul(cast(b, _F32), half(alpha)) if isinstance(b, Tensor) else half(b) * half(alpha)
    return cast(bind(prim, promote(a, b), {}), _F16)


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
    """True division and friends: integer operands become the default float.

    The float dtype is chosen *before* any integer promotion: promoting ``int8 / 200`` or
    ``uint8 / tensor(-2)`` to the integer dtype first would wrap the divisor (PyTorch
    divides the true values).
    """
    return promote(*_float_operands(a, b))


def _float_operands(a, b):
    """``a`` and ``b`` with integer operands made the default float, not yet promoted."""
    # (a Python complex stays a number too: promote makes it in the result dtype)
    a = a if _scalar_ok(a) or a.__class__ is complex else _as_tensor(a, like=b)
    b = b if _scalar_ok(b) or b.__class__ is complex else _as_tensor(b, like=a)
    if dtypes.result_type(a, b).kind in "biu":
        dt = dtypes.get_default_dtype()
        a = cast(a, dt) if isinstance(a, Tensor) else float(a)
        b = cast(b, dt) if isinstance(b, Tensor) else float(b)
    return a, b


# ------------------------------------------------------------------ arithmetic

add_p = binary("add", quiet(xp.add), lambda ns, x, y, o: 1, lambda ns, x, y, o: 1, save_inputs=False)
sub_p = binary("sub", quiet(xp.subtract), lambda ns, x, y, o: 1, lambda ns, x, y, o: -1, save_inputs=False)
mul_p = binary("mul", quiet(xp.multiply), lambda ns, x, y, o: y, lambda ns, x, y, o: x,
               by_scalar=(operator.mul, operator.mul))  # NOTE [Scalar operands in backward]
# The divisor's gradient from the operands, as PyTorch's ``-grad * ((x / y) / y)``: saving the
# quotient instead would make an in-place change of it (``q = x / 2; q += 1``) fail backward.
div_p = binary("div", quiet(xp.true_divide), lambda ns, x, y, o: 1 / y, lambda ns, x, y, o: -(x / y) / y,
               by_scalar=(operator.truediv, None))
# which saved operands each rule reads: NOTE [Version checks of unread inputs] (autograd/engine.py)
mul_p.vjp_reads = ((1,), (0,))
div_p.vjp_reads = ((1,), (0, 1))


def _pow_dy(ns, x, y, out):
    # d/dy x**y = log(x) x**y; 0 where x == 0 and y >= 0 (the limit PyTorch uses); for
    # x == 0, y < 0 it is log(0) * inf = -inf, as in PyTorch.
    if getattr(y, "dtype", None) is not None and y.dtype.kind == "c":  # no order: the limit at x == 0 is 0
        return ns.where(x == 0, 0.0, ns.log(x) * out)
    return ns.where((x == 0) & (y >= 0), 0.0, ns.log(x) * out)


def _nonzero_constant(y):
    """Whether ``y`` is a 0-d exponent whose value can be read here (an array or a plain
    Tensor, e.g. a Python scalar operand; not a tracer) and is nonzero."""
    data = y if y.__class__ is np.ndarray else (y._data if y.__class__ is Tensor else None)
    # Host values only: reading a device value would be a device-to-host copy per call.
    return data.__class__ is np.ndarray and data.ndim == 0 and bool(data != 0)


def _pow_dx(ns, x, y, out):
    # d/dx x**y = y x**(y-1), taken as 0 where y == 0 (PyTorch) rather than 0 * inf = nan at
    # x == 0; the base is swapped for 1 there so no inf reaches a higher-order derivative.
    if _nonzero_constant(y):  # x ** 2 and friends: the plain formula, no masking needed
        return y * x ** (y - 1)
    zero_exponent = y == 0
    base = ns.where(zero_exponent, 1.0, x)
    return ns.where(zero_exponent, 0.0, y * base ** (y - 1))


_float_power = quiet(xp.power)


def _pow_impl(x, y):
    kind = (x if hasattr(x, "dtype") else y).dtype.kind
    if kind in "iu":
        return _int_power(x, y)
    if kind == "b":  # x ** y of truth values stays bool (NumPy gives int8), as in PyTorch
        if hasattr(x, "dtype") and hasattr(y, "dtype"):
            raise DtypeNotImplemented("not implemented for two 'Bool' tensors")
        return xp.logical_or(x, xp.logical_not(y))
    return _float_power(x, y)


def _int_power(x, y):
    """PyTorch's integer pow: ``x ** -n`` is 1 for x == 1, (-1) ** n for x == -1, else 0
    (x == 0 included). NumPy raises for a negative signed exponent (reading the values: no
    good on a device) and an unsigned one cannot be negative: masks, no read-back."""
    if not hasattr(y, "dtype") or y.dtype.kind == "u":  # a number: pow() refused negative ones
        return xp.power(x, y)
    negative = y < 0
    out = xp.power(x, xp.where(negative, 0, y))
    odd = (y & 1) == 1
    at_neg = xp.where(x == 1, 1, xp.where(x == -1, xp.where(odd, -1, 1), 0))
    return xp.where(negative, at_neg, out).astype(out.dtype, copy=False)


pow_p = binary("pow", _pow_impl, _pow_dx, _pow_dy, save_out=True)

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

def _neg_impl(x):
    try:
        return xp.negative(x)
    except TypeError:  # NumPy refuses bool; PyTorch's type is RuntimeError (TypeError kept too)
        raise DtypeNotImplemented("negation, the `-` operator, on a bool tensor is not supported; "
                                  "use `~` or logical_not() instead") from None


neg_p, _ = unary("neg", _neg_impl, lambda ns, x, o: -1, save_inputs=False, float_only=False)
neg_p.vjp = (lambda ns, g, out, x: -g,)
neg_p.jvp = lambda ns, primals, tangents, out: -tangents[0]


# NOTE [Deprecated scalar-first overloads]
# PyTorch 2.13 still accepts (warning once) the pre-1.5 signatures that put the scalar first:
# ``add(Number alpha, Tensor other)``, ``sub(...)``, their in-place forms and
# ``addcmul/addcdiv(Number value, Tensor tensor1, Tensor tensor2)``; old optimizer code (e.g.
# ``exp_avg.mul_(beta1).add_(1 - beta1, grad)``) uses them. The ops take the extra positional
# operands as ``*rest`` (empty on the usual path) and reorder them here.
def deprecated_scalar_first(op, scalar, rest, given, n, kw, new_sig):
    """The scalar of a deprecated call ``op(scalar, *rest)`` (NOTE [Deprecated scalar-first
    overloads]) as a number, after checking the form (``n`` operands in ``rest``, no keyword
    ``kw`` given besides) and warning as PyTorch does."""
    if isinstance(scalar, Tensor) and scalar.ndim == 0:
        scalar = scalar.item()
    if len(rest) != n or given != 1 or isinstance(scalar, Tensor) \
            or not isinstance(scalar, (bool, int, float, complex, np.number)):
        got = ", ".join(type(v).__name__ for v in (scalar,) + tuple(rest)) + (f", {kw}=..." if given != 1 else "")
        raise TypeError(f"{op}() received an invalid combination of arguments - got ({got}), "
                        f"but expected {new_sig}")
    import warnings

    old = f"{op}(Number {kw}, " + ", ".join(["Tensor other"] if n == 1 else ["Tensor tensor1", "Tensor tensor2"]) + ")"
    warnings.warn(f"This overload of {op} is deprecated:\n\t{old}\nConsider using one of the following "
                  f"signatures instead:\n\t{new_sig}", UserWarning, stacklevel=3)
    return scalar


@tensor_method("add", "__add__")
def add(input, other, *rest, alpha=1):
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
    if rest:  # See NOTE [Deprecated scalar-first overloads]
        alpha, other = deprecated_scalar_first("add", other, rest, alpha, 1, "alpha",
                                               "add(Tensor other, *, Number alpha = 1)"), rest[0]
    if alpha != 1 or alpha.__class__ is bool:  # alpha=True is 1 but refused beside non-bool results
        if _half_result(input, other):  # See NOTE [Half opmath]
            if alpha.__class__ is not float:
                _alpha_result_dtype(input, other, alpha, "add")
            return _half_axpy(add_p, input, other, alpha)
        other = _scaled(input, other, alpha, "add")
    return bind(add_p, promote(input, other), {})


def _scaled(input, other, alpha, op):
    """``alpha * other``; a complex number times a number stays a Python number (double
    precision, as PyTorch's scalars), where ``mul`` would make a complex64 tensor of it."""
    if other.__class__ in (complex, float, int) and alpha.__class__ in (complex, float, int) \
            and complex in (other.__class__, alpha.__class__):
        if alpha.__class__ is complex:
            _alpha_result_dtype(input, other, alpha, op)
        return other * alpha
    if alpha.__class__ is float and other.__class__ is Tensor and other._data.dtype.kind == "f":
        return mul(other, alpha)  # the common case (an optimizer's add_(g, alpha=-lr)): nothing to check
    return _scaled_in_result_dtype(input, other, alpha, op)


def _scaled_in_result_dtype(input, other, alpha, op):
    """``alpha * other`` in the dtype of ``input op other``, with PyTorch's alpha checks: alpha
    takes no part in the promotion (``add(bool, bool, alpha=3)`` stays bool)."""
    if isinstance(alpha, Tensor) or not isinstance(alpha, (bool, int, float, complex, np.number, np.bool_)):
        return mul(other, alpha)
    rt = _alpha_result_dtype(input, other, alpha, op)
    if isinstance(other, Tensor) and dtypes.to_dtype(other.dtype) != rt:  # dtype: tracers too
        other = cast(other, dtype=rt)
    return mul(other, bool(alpha) if rt.kind == "b" else alpha)


def _alpha_result_dtype(input, other, alpha, op):
    """The dtype of ``input op other``, after PyTorch's checks of ``alpha`` against it."""
    rt = dtypes.result_type(input, other)
    if isinstance(alpha, (bool, np.bool_)) and rt.kind != "b":
        raise RuntimeError(f"{op}: Boolean alpha only supported for Boolean results.")
    if rt.kind in "biu" and not isinstance(alpha, (bool, int, np.bool_, np.integer)):
        raise RuntimeError(f"{op}: For integral input tensors, argument alpha must not be a floating point number.")
    if rt.kind != "c" and isinstance(alpha, (complex, np.complexfloating)):
        raise RuntimeError(f"{op}: For non-complex input tensors, argument alpha must not be a complex number.")
    if rt.kind in "iu" and not isinstance(alpha, (bool, np.bool_)):
        from .comparison import _number_in

        _number_in(alpha, rt, op)  # c10's checked conversion (an unsigned dtype wraps -1 to its max)
    return rt


@tensor_method("sub", "subtract", "__sub__")
def sub(input, other, *rest, alpha=1):
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
    if rest:  # See NOTE [Deprecated scalar-first overloads]
        alpha, other = deprecated_scalar_first("sub", other, rest, alpha, 1, "alpha",
                                               "sub(Tensor other, *, Number alpha = 1)"), rest[0]
    _reject_bool_subtraction(input, other)
    if alpha != 1 or alpha.__class__ is bool:  # alpha=True is 1 but refused beside non-bool results
        if _half_result(input, other):  # See NOTE [Half opmath]
            if alpha.__class__ is not float:
                _alpha_result_dtype(input, other, alpha, "sub")
            return _half_axpy(sub_p, input, other, alpha)
        other = _scaled(input, other, alpha, "sub")
    return bind(sub_p, promote(input, other), {})


_BOOL = np.dtype(np.bool_)


def _is_bool_operand(v):
    # ``_data.dtype is _BOOL`` (NumPy's dtype singleton), not ``v.dtype == ...``: this runs on
    # every subtraction, and the public dtype property plus an equality test cost ~0.6 us.
    if v.__class__ is Tensor:
        return v._data.dtype is _BOOL
    return v.__class__ is bool or (isinstance(v, Tensor) and v.dtype == dtypes.bool_)  # tracers


def _reject_bool_subtraction(a, b):
    """PyTorch refuses ``-`` on bool operands (a mask minus something is almost always a bug)."""
    if not (_is_bool_operand(a) or _is_bool_operand(b)):
        return
    if _is_bool_operand(a) and _is_bool_operand(b):
        raise RuntimeError("sub: Subtraction, the `-` operator, with two bool tensors is not supported. "
                           "Use the `^` or `logical_xor()` operator instead.")
    if _is_bool_operand(a) or _is_bool_operand(b):
        raise RuntimeError("sub: Subtraction, the `-` operator, with a bool tensor is not supported. "
                           "If you are trying to invert a mask, use the `~` or `logical_not()` operator instead.")


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
    if input.__class__ is Tensor and other.__class__ is Tensor and input._data.dtype is other._data.dtype:
        return bind(mul_p, (input, other), {})  # promote's fast path, inlined (x * y is hot)
    args = promote(input, other, 2)
    return bind(mul_p, args, {}) if args is not None else _half_opmath(mul_p, input, other)


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
    if input.__class__ is Tensor and other.__class__ is Tensor and input._data.dtype is other._data.dtype \
            and input._data.dtype.kind in "fc":  # promote's fast path, inlined (x / y is hot)
        return bind(div_p, (input, other), {})
    a, b = _float_operands(input, other)
    args = promote(a, b, 1)
    return bind(div_p, args, {}) if args is not None else _half_opmath(div_p, a, b)


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
    if exponent.__class__ is int and exponent < 0 and isinstance(input, Tensor) and input.dtype.kind in "biu":
        # PyTorch refuses a negative number here (NumPy raised for signed ints only and wrapped
        # the exponent of an unsigned one: uint8 ** -1 was 2 ** 255 mod 256). A negative
        # exponent in an integer tensor is computed, as PyTorch does (see _int_power).
        raise RuntimeError("pow: Integers to negative integer powers are not allowed.")
    a, b = promote(input, exponent)
    if exponent.__class__ in (int, float) and (a.dtype.kind in "iu" or a.dtype == _F16):
        # PyTorch converts a number exponent to the result's dtype, checked: uint8 ** 300 and
        # float16 ** 1e5 raise instead of wrapping the exponent or making it inf
        from .comparison import _number_in

        _number_in(exponent, a.dtype, "pow")
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

def _rtruediv(self, other):
    # PyTorch's ``s / x`` is ``x.reciprocal() * s``; in float16 its two roundings show (NOTE [Half opmath]).
    if _scalar_ok(other) and isinstance(self, Tensor) and self.dtype == _F16:
        from .transcendental import reciprocal

        return mul(reciprocal(self), other)
    return div(other, self)


# PyTorch's ``s + x`` and ``s * x`` are ``x + s`` and ``x * s``: the tensor stays the first input, so
# ``grad_fn.next_functions`` lists it first (the "Fundamentals of Autograd" page walks that chain).
Tensor.__radd__ = lambda self, other: add(self, other)
Tensor.__rsub__ = lambda self, other: sub(other, self)
Tensor.__rmul__ = lambda self, other: mul(self, other)
Tensor.__rtruediv__ = _rtruediv
Tensor.__rpow__ = lambda self, other: pow(other, self)


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
    memory_format : lucid.memory_format, optional
        The copy's layout. None or ``lucid.contiguous_format``: row-major (PyTorch's default,
        ``preserve_format``, keeps the input's strides instead; pass it to get that).
        ``lucid.channels_last`` / ``channels_last_3d``: NHWC / NDHWC memory for a 4-d / 5-d
        tensor. See NOTE [Memory formats] in ``lucid/ops/memory_format.py``.

    Examples
    --------
    >>> import lucid
    >>> x = lucid.tensor([1.0])
    >>> y = x.clone(); y[0] = 5.0
    >>> x.tolist()
    [1.0]
    >>> lucid.zeros(2, 3).t().clone(memory_format=lucid.preserve_format).stride()
    (1, 3)
    """
    if memory_format is None or memory_format is _contiguous_format:
        return bind(clone_p, (_as_tensor(input),), {})
    from ..memory_format import clone_as

    return clone_as(_as_tensor(input), memory_format)


# ------------------------------------------------------------ integer division

def _zero(*args):
    # Piecewise-constant ops (floor, round, floor_divide ...): zero gradient, as in PyTorch.
    return 0


def _int_checked(f):
    """Integer division by zero raises (as PyTorch on the CPU) instead of NumPy's warning and 0.

    A divisor on a device is not checked: that would read it back on every call (PyTorch's CUDA
    kernels do not check either; CuPy gives 0)."""

    def impl(x, y):
        kind = (x if hasattr(x, "dtype") else y).dtype.kind
        if kind == "b":  # PyTorch has no bool kernel (NumPy divided True by True)
            raise DtypeNotImplemented("not implemented for 'Bool' tensors")
        if kind in "biu" and (y.__class__ is np.ndarray or not hasattr(y, "dtype")) and not np.all(y) \
                and getattr(x, "size", 1):  # an empty result divides nothing (a zero divisor broadcast to 0 elements)
            raise ZeroDivisionError("integer division by zero")
        return f(x, y)

    return impl


floor_divide_p = binary("floor_divide", quiet(_int_checked(xp.floor_divide)), _zero, _zero, save_inputs=False)
# remainder has Python's sign convention (sign of the divisor), fmod C's (sign of the dividend).
remainder_p = binary("remainder", quiet(_int_checked(xp.remainder)), lambda ns, x, y, o: 1,
                     lambda ns, x, y, o: -ns.floor_divide(x, y))
# trunc(x / y) in one primitive: composed, trunc's zero gradient met div's 1/0 = inf at y == 0
# and made nan; PyTorch's gradient of rounding_mode='trunc' is zero everywhere.
trunc_divide_p = binary("trunc_divide", quiet(lambda x, y: _trunc_div_impl(x, y)), _zero, _zero, save_inputs=False)
fmod_p = binary("fmod", quiet(_int_checked(xp.fmod)), lambda ns, x, y, o: 1, lambda ns, x, y, o: -ns.trunc(x / y))


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


def _trunc_div_impl(x, y):
    if (x if hasattr(x, "dtype") else y).dtype == _F16:  # in float32, rounded once (PyTorch's opmath)
        return xp.trunc(xp.true_divide(_up32(x), _up32(y))).astype(_F16)
    return xp.trunc(xp.true_divide(x, y))


def _up32(v):
    return v.astype(np.float32) if hasattr(v, "dtype") else v


def _trunc_divide(input, other):
    from .comparison import lt, ne

    a, b = promote(input, other)
    ref = a if isinstance(a, Tensor) else b
    if ref.dtype.kind not in "biu":
        return bind(trunc_divide_p, (a, b), {})
    # Exact integer division rounding toward zero: floor, plus one where the signs differ
    # and the division is inexact.
    q = floor_divide(a, b)
    # a Python number's sign is a Python bool: a tensor of it would sit on the default device
    negative = [lt(v, 0) if isinstance(v, Tensor) else v < 0 for v in (a, b)]
    fix = ne(remainder(a, b), 0) & ne(*negative)
    return q + fix


Tensor.__rfloordiv__ = lambda self, other: floor_divide(other, self)
Tensor.__rmod__ = lambda self, other: remainder(other, self)


__all__ = ['add', 'clone', 'div', 'divide', 'floor_divide', 'fmod', 'mul', 'multiply', 'neg', 'negative', 'pow', 'remainder', 'sub', 'subtract', 'true_divide']
