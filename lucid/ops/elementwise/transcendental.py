"""Math functions: exp/log, trig and hyperbolic, sigmoid, erf, rounding, hypot/atan2/logaddexp,
lerp, nan_to_num.
"""
from __future__ import annotations

import builtins
import math

import numpy as np

from ..._core import dtypes
from ..._core.backend import namespace_of, special_of, xp
from ..._core.kernels import Kernel, kernel_for
from ..._core.primitive import bind, defprim
from ..._core.tensor import Tensor, tensor_method
from .._family import (_as_tensor, _promote_float, batch_elementwise, binary, nondiff, quiet, shape_of,
                       sum_to_shape, unary)

from ._half import F16, F32, half_unary_rules, round_rule
from .arithmetic import _floatify, _is_half, _zero, cast
from .comparison import _BINARY_PARAMS, clamp, where


# ------------------------------------------------------------- unary math

exp_p, exp = unary("exp", quiet(xp.exp), lambda ns, x, o: o, save_out=True, save_inputs=False)
log_p, log = unary("log", quiet(xp.log), lambda ns, x, o: 1 / x)
sin_p, sin = unary("sin", quiet(xp.sin), lambda ns, x, o: ns.cos(x))
cos_p, cos = unary("cos", quiet(xp.cos), lambda ns, x, o: -ns.sin(x))
tanh_p, tanh = unary("tanh", xp.tanh, lambda ns, x, o: 1 - o * o, save_out=True, save_inputs=False)
sqrt_p, sqrt = unary("sqrt", quiet(xp.sqrt), lambda ns, x, o: 0.5 / o, save_out=True, save_inputs=False)
abs_p, abs = unary("abs", xp.abs, lambda ns, x, o: ns.sign(x), float_only=False)


def _sgn(ns, x):
    """``x / |x|`` (0 at 0) for complex x, written with differentiable ops (second derivatives)."""
    a = ns.abs(x)
    return x / ns.where(a == 0, 1.0, a)


def _abs_vjp(ns, g, out, x):
    if x.dtype.kind == "c":  # |z| is not holomorphic: grad = g * z/|z| (0 at 0). See NOTE [Complex gradients]
        return g * _sgn(ns, x)
    r = g * ns.sign(x)
    return r if r.dtype == g.dtype else ns.cast(r, dtype=g.dtype)


def _abs_jvp(ns, primals, tangents, out):
    x, t = primals[0], tangents[0]
    if x.dtype.kind == "c":  # d|z| = Re(conj(z/|z|) dz)
        return ns.real(ns.conj(_sgn(ns, x)) * t)
    r = t * ns.sign(x)
    return r if r.dtype == t.dtype else ns.cast(r, dtype=t.dtype)


abs_p.vjp, abs_p.jvp = (_abs_vjp,), _abs_jvp
# sign's derivative is zero almost everywhere: a differentiable primitive (like floor) so that
# sign(x).sum().backward() gives zero gradients instead of "does not require grad", as in PyTorch.
def _sign_impl(x):
    # PyTorch's sign is (0 < x) - (x < 0): nan gives 0 (NumPy's nan), bool is returned as is.
    kind = x.dtype.kind
    if kind == "f":
        return xp.where(x == x, xp.sign(x), 0)
    return x.copy() if kind == "b" else xp.sign(x)


sign_p, _sign = unary("sign", _sign_impl, _zero, save_inputs=False, float_only=False)
_abs_any_dtype = abs


def abs(input):
    """``|input|`` elementwise (bool inputs are refused, as in PyTorch).

    Parameters
    ----------
    input : Tensor
        Integer, floating or complex tensor.

    Examples
    --------
    >>> import lucid
    >>> lucid.abs(lucid.tensor([-1.5, 2.0])).tolist()
    [1.5, 2.0]
    """
    data = input._data if input.__class__ is Tensor else None  # the cheap check for plain tensors
    if (data.dtype.kind == "b") if data is not None else getattr(input, "dtype", None) == dtypes.bool_:
        raise NotImplementedError("abs: not implemented for 'Bool' tensors (use the tensor itself, or .int())")
    return _abs_any_dtype(input)


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
    return _sign(input)


# PyTorch's tanh_backward kernel reads the float16 output and computes in float32 (NOTE [Half primitives])
half_unary_rules(tanh_p, lambda ns, g, x, o: round_rule(ns, lambda g, o: g * (1 - o * o), g, o))

for _name, _fn in [("exp", exp), ("log", log), ("sin", sin), ("cos", cos), ("tanh", tanh),
                   ("sqrt", sqrt), ("abs", abs), ("__abs__", abs)]:
    setattr(Tensor, _name, _fn)


def _relu_impl(x):
    out = xp.maximum(x, 0)
    return out if out.dtype == x.dtype else out.astype(x.dtype)  # no call at all (a device's host time)


# The derivative mask is cast to the output's dtype before the multiply: NumPy multiplies
# float by bool through a buffered cast, 1.4x slower than a cast pass plus a float multiply.
# The mask is "not o <= 0", not "o > 0": a NaN input passes its gradient (PyTorch's
# threshold_backward zeroes only where out <= 0).
relu_p, relu = unary("relu", _relu_impl, lambda ns, x, o: ns.cast(~(o <= 0), dtype=o.dtype), save_out=True,
                     save_inputs=False, float_only=False)
Tensor.relu = relu

# On a device the backward is one kernel, not a compare, a cast and a multiply (NOTE [Fused
# device kernels]); the same arithmetic as the rule above.
_RELU_GRAD = Kernel("lucid_relu_grad", "const T* out, const T* g, T* dx", "dx[i] = (out[i] <= 0 ? (T)0 : (T)1) * g[i];")
_relu_rule = relu_p.vjp[0]


def _relu_vjp(ns, g, out, x):
    if g.__class__ is not np.ndarray and not ns.is_tensor_ns and g.dtype == out.dtype \
            and g.dtype in (np.float32, np.float64) and g.shape == out.shape and out.flags["C_CONTIGUOUS"]:
        launch = kernel_for(g, _RELU_GRAD, g.dtype)
        if launch is not None:
            if not g.flags["C_CONTIGUOUS"]:  # e.g. a sum's broadcast cotangent: one copy, still fewer launches
                g = xp.ascontiguousarray(g)
            dx = namespace_of(g).empty(g.shape, dtype=g.dtype)
            launch(g.size, out, g, dx)
            return dx
    return _relu_rule(ns, g, out, x)


relu_p.vjp = (_relu_vjp,)


# ------------------------------------------------------- more unary functions

_LN2, _LN10 = math.log(2.0), math.log(10.0)
_TWO_OVER_SQRT_PI = 2.0 / math.sqrt(math.pi)

exp2_p, exp2 = unary("exp2", quiet(xp.exp2), lambda ns, x, o: o * _LN2, save_out=True, save_inputs=False)
expm1_p, expm1 = unary("expm1", quiet(xp.expm1), lambda ns, x, o: o + 1, save_out=True, save_inputs=False)
log2_p, log2 = unary("log2", quiet(xp.log2), lambda ns, x, o: 1 / (x * _LN2))
def _log10(x):
    # NumPy's float32 log10 is off by an ulp at exact powers of ten (log10(100) = 2.0000002, which
    # PyTorch gives as 2): on the CPU half and single precision go through float64, correctly
    # rounded (~6x the time of this rarely hot op). Device kernels (CUDA's log10f) are exact there.
    if x.__class__ is np.ndarray and x.dtype.kind == "f" and x.dtype.itemsize < 8:
        return np.log10(x, dtype=np.float64).astype(x.dtype)
    return xp.log10(x)


log10_p, log10 = unary("log10", quiet(_log10), lambda ns, x, o: 1 / (x * _LN10))
log1p_p, log1p = unary("log1p", quiet(xp.log1p), lambda ns, x, o: 1 / (x + 1))
half_unary_rules(log1p_p, lambda ns, g, x, o: g / (x + 1))  # PyTorch's float16 steps: NOTE [Half primitives]


def _rsqrt(x):
    if x.dtype == F16:  # one rounding, not two. See NOTE [Half primitives]
        return (1 / xp.sqrt(x.astype(F32))).astype(F16)
    return 1 / xp.sqrt(x)


rsqrt_p, rsqrt = unary("rsqrt", quiet(_rsqrt), lambda ns, x, o: -0.5 * o * o * o,
                       save_out=True, save_inputs=False)
# PyTorch's ``-0.5 * grad * result.pow(3)``, the cube rounded once
half_unary_rules(rsqrt_p, lambda ns, g, x, o: (-0.5 * g) * round_rule(ns, lambda o: o * o * o, o))
# bool squares to int64 as in PyTorch (pow(bool, 2)); NumPy's square of bool is int8
_square = quiet(xp.square)
square_p, square = unary("square", lambda x: _square(x.astype(np.int64) if x.dtype.kind == "b" else x),
                         lambda ns, x, o: 2 * x, float_only=False)
reciprocal_p, reciprocal = unary("reciprocal", quiet(lambda x: 1 / x), lambda ns, x, o: -(o * o),
                                 save_out=True, save_inputs=False)
tan_p, tan = unary("tan", quiet(xp.tan), lambda ns, x, o: 1 + o * o, save_out=True, save_inputs=False)
asin_p, asin = unary("asin", quiet(xp.arcsin), lambda ns, x, o: 1 / ns.sqrt(1 - x * x))
acos_p, acos = unary("acos", quiet(xp.arccos), lambda ns, x, o: -1 / ns.sqrt(1 - x * x))
atan_p, atan = unary("atan", xp.arctan, lambda ns, x, o: 1 / (1 + x * x))
sinh_p, sinh = unary("sinh", quiet(xp.sinh), lambda ns, x, o: ns.cosh(x))
cosh_p, cosh = unary("cosh", quiet(xp.cosh), lambda ns, x, o: ns.sinh(x))
asinh_p, asinh = unary("asinh", xp.arcsinh, lambda ns, x, o: 1 / ns.sqrt(x * x + 1))
# PyTorch's rsqrt(x**2 - 1), real below -1 too (the forward is nan there, the gradient is not);
# (x - 1) * (x + 1) keeps the digits that x * x - 1 loses next to 1.
def _acosh_deriv(ns, x, o):
    # Real x: rsqrt((x-1)(x+1)) (also right below -1). Complex z: the principal branch needs
    # 1 / (sqrt(z-1) sqrt(z+1)), PyTorch's rule; the single rsqrt flips its sign where Re z < 0.
    if x.dtype.kind == "c":
        return 1 / (ns.sqrt(x - 1) * ns.sqrt(x + 1))
    return ns.rsqrt((x - 1) * (x + 1))


acosh_p, acosh = unary("acosh", quiet(xp.arccosh), _acosh_deriv)
atanh_p, atanh = unary("atanh", quiet(xp.arctanh), lambda ns, x, o: 1 / (1 - x * x))


def _sigmoid_impl(x):
    if x.dtype == F16:  # one rounding. See NOTE [Half primitives]
        return _sigmoid_impl(x.astype(F32)).astype(F16)
    if x.dtype.kind == "c":
        return 1 / (1 + xp.exp(-x))
    # exp(-|x|) never overflows: 1/(1+e) for x >= 0, e/(1+e) for x < 0.
    e = xp.exp(-xp.abs(x))
    return xp.where(x >= 0, 1 / (1 + e), e / (1 + e)).astype(x.dtype, copy=False)


# A primitive (not 1/(1+exp(-x))) for stability, and so the backward reuses the output.
sigmoid_p, sigmoid = unary("sigmoid", _sigmoid_impl, lambda ns, x, o: o * (1 - o),
                           save_out=True, save_inputs=False)
# PyTorch's float16 sigmoid_backward rounds ``grad * (1 - y)`` before ``* y``
half_unary_rules(sigmoid_p, lambda ns, g, x, o: g * (1 - o) * o)


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
    sp = _special() if x.__class__ is np.ndarray else special_of(x)
    out = sp.erf(x.astype(np.float64)) if sp is not None else _erf_numpy(x)
    return xp.asarray(out).astype(x.dtype, copy=False)


def _erfc_impl(x):
    sp = _special() if x.__class__ is np.ndarray else special_of(x)
    out = sp.erfc(x.astype(np.float64)) if sp is not None else _erfc_numpy(x)
    return xp.asarray(out).astype(x.dtype, copy=False)


erf_p, erf = unary("erf", _erf_impl, lambda ns, x, o: _TWO_OVER_SQRT_PI * ns.exp(-(x * x)))
erfc_p, erfc = unary("erfc", _erfc_impl, lambda ns, x, o: -_TWO_OVER_SQRT_PI * ns.exp(-(x * x)))


# ``log(x / (1 - x))`` as PyTorch's kernel, one primitive (a float16 input rounds after each
# step there, as here); the backward is PyTorch's ``grad / (x * (1 - x))``.
logit_p, _logit = unary("logit", quiet(lambda x: xp.log(x / (1 - x)), 1), lambda ns, x, o: 1 / (x * (1 - x)))
# Outside [0, 1] the function is nan and so is its derivative (PyTorch's logit_backward);
# 1 / (x (1 - x)) alone would be finite there.
def _logit_deriv(ns, x, t):
    return ns.where((x < 0) | (x > 1), float("nan"), t / (x * (1 - x)))


logit_p.vjp = (lambda ns, g, out, x: _logit_deriv(ns, x, g),)
logit_p.jvp = lambda ns, primals, tangents, out: _logit_deriv(ns, primals[0], tangents[0])


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
    if x.dtype.kind == "c":  # PyTorch: "logit_cpu" not implemented for complex (a probability is real)
        raise TypeError(f"logit: not supported for complex tensors (a function of real arguments, as in "
                        f"PyTorch) (input of shape {tuple(x.shape)}, dtype {x.dtype})")
    if eps is not None:
        # PyTorch's per-element rule ``x < eps ? eps : (x > 1 - eps ? 1 - eps : x)``: a clamp
        # would give 1 - eps everywhere when eps > 0.5; the gradient is 0 where replaced.
        from .comparison import where

        x = where(x < eps, eps, where(x > 1 - eps, 1 - eps, x))
    return _logit(x)


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
frac_p, _frac = unary("frac", quiet(lambda x: x - xp.trunc(x), 1), lambda ns, x, o: 1, save_inputs=False)


def frac(input):
    """``input - trunc(input)``, with the sign of ``input``; floating point only (as PyTorch,
    which has no integer kernel: an integer's fraction is not promoted to a float zero).

    Examples
    --------
    >>> import lucid
    >>> lucid.frac(lucid.tensor([1.5, -2.25])).tolist()
    [0.5, -0.25]
    """
    if isinstance(input, Tensor) and input.dtype.kind in "biu":
        from .arithmetic import DtypeNotImplemented

        raise DtypeNotImplemented(f"frac: not implemented for '{input.dtype}' tensors (floating point only)")
    return _frac(input)
frac_p.vjp = (lambda ns, g, out, x: g,)
frac_p.jvp = lambda ns, primals, tangents, out: tangents[0]

def _round_impl(x, decimals):
    if x.dtype.kind in "biu" and decimals >= 0:  # rounds to itself (NumPy gives float16 for bool)
        return x.copy()
    if decimals and x.dtype == F16:
        # PyTorch scales in float32: 125 * 10**3 overflows float16 (NumPy gave inf)
        return xp.round(x.astype(F32), decimals).astype(F16)
    return xp.round(x, decimals)


round_p = defprim(
    "round", quiet(_round_impl, 1),
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
    # 0 at the origin, where atan2 is not differentiable (PyTorch's convention; 0 / 0 is nan)
    d = a * a + b * b
    return ns.where(d == 0, 0.0, num / ns.where(d == 0, 1.0, d))


atan2_p = binary("atan2", xp.arctan2, lambda ns, a, b, o: _atan2_d(ns, a, b, b),
                 lambda ns, a, b, o: _atan2_d(ns, a, b, -a))
hypot_p = binary("hypot", quiet(xp.hypot), lambda ns, a, b, o: a / o, lambda ns, a, b, o: b / o, save_out=True)


def _hypot_half(i):
    """PyTorch's float16 ``grad * self / result`` (two roundings), other dtypes the family's rule."""
    rule = hypot_p.vjp[i]

    def vjp(ns, g, out, a, b):
        v = (a, b)[i]
        if g.dtype == F16 and getattr(v, "dtype", None) == F16:  # See NOTE [Half primitives]
            return sum_to_shape(ns, g * v / out, shape_of(v))
        return rule(ns, g, out, a, b)

    return vjp


hypot_p.vjp = (_hypot_half(0), _hypot_half(1))
# d/da log(e^a + e^b) = sigmoid(a - b), written exp(-softplus(b - a)): finite for any finite
# gap, 1 and 0 at (inf, finite) where exp(a - out) was exp(inf - inf) = nan (PyTorch gives 1, 0).
logaddexp_p = binary("logaddexp", quiet(xp.logaddexp), lambda ns, a, b, o: ns.exp(-ns.logaddexp(0.0, b - a)),
                     lambda ns, a, b, o: ns.exp(-ns.logaddexp(0.0, a - b)))
logaddexp2_p = binary("logaddexp2", quiet(xp.logaddexp2), lambda ns, a, b, o: ns.exp2(-ns.logaddexp2(0.0, b - a)),
                      lambda ns, a, b, o: ns.exp2(-ns.logaddexp2(0.0, a - b)))

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
_real_logaddexp = _floating_binary("logaddexp", logaddexp_p, """``log(exp(input) + exp(other))`` computed stably;
    complex inputs too (as PyTorch: the shift by the larger real part keeps it finite).

    Examples
    --------
    >>> import lucid
    >>> lucid.logaddexp(lucid.tensor([1000.0]), 1000.0).tolist()
    [1000.6931762695312]
    """)


def logaddexp(input, other):
    a, b = _floatify(input, other)
    if not (getattr(a, "dtype", None) is not None and a.dtype.kind == "c"
            or getattr(b, "dtype", None) is not None and b.dtype.kind == "c"):
        return bind(logaddexp_p, (a, b), {})
    import lucid

    a, b = _as_tensor(a, like=b), _as_tensor(b, like=a)  # a number is made on the other's device
    # a constant shift (no gradient: its derivative cancels exactly) by the larger real part
    m = lucid.maximum(a.real, b.real).detach()
    m = lucid.where(m.isinf(), lucid.zeros((), dtype=m.dtype, device=m.device), m)
    return lucid.log(lucid.exp(a - m) + lucid.exp(b - m)) + m


logaddexp.__doc__ = _real_logaddexp.__doc__
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
    _check_lerp_dtypes(input, end, weight)
    if _is_half(input) and _is_half(end) and (_is_half(weight) or not isinstance(weight, Tensor)):
        # PyTorch's float16 kernel: float32 inside, one rounding (NOTE [Half primitives])
        w = cast(weight, F32) if isinstance(weight, Tensor) else weight
        return cast(lerp(cast(input, F32), cast(end, F32), w), F16)
    diff = end - input
    if not isinstance(weight, Tensor):
        return input + weight * diff if builtins.abs(weight) < 0.5 else end - diff * (1 - weight)
    return where(abs(weight) < 0.5, input + weight * diff, end - diff * (1 - weight))


def _check_lerp_dtypes(input, end, weight):
    """PyTorch's lerp takes one floating dtype for its tensors and promotes nothing."""
    if not isinstance(input, Tensor) or not isinstance(end, Tensor):
        return
    dt = input.dtype
    for what, t in (("end", end), ("weight", weight)):
        if isinstance(t, Tensor) and t.dtype != dt:
            raise RuntimeError(f"lerp: expected dtype {dt} for `{what}` but got dtype {t.dtype}")
    if dt.kind not in "fc":
        from .arithmetic import DtypeNotImplemented

        raise DtypeNotImplemented(f"lerp: not implemented for '{dt}' tensors (floating point only)")


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
    nan : float, optional
        Replacement of NaN (None: 0).
    posinf, neginf : float, optional
        Replacements of +inf and -inf.

    Examples
    --------
    >>> import lucid
    >>> lucid.nan_to_num(lucid.tensor([float("nan"), 1.0]), nan=-1.0).tolist()
    [-1.0, 1.0]
    """
    if nan is None:  # PyTorch's default, spelled out
        nan = 0.0
    return bind(nan_to_num_p, (_as_tensor(input),), {"nan": nan, "posinf": posinf, "neginf": neginf})


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


for _name, _fn in [("exp2", exp2), ("expm1", expm1), ("log2", log2), ("log10", log10), ("log1p", log1p),
                   ("rsqrt", rsqrt), ("square", square), ("reciprocal", reciprocal), ("tan", tan),
                   ("asin", asin), ("arcsin", asin), ("acos", acos), ("arccos", acos), ("atan", atan),
                   ("arctan", atan), ("sinh", sinh), ("cosh", cosh), ("asinh", asinh), ("arcsinh", asinh),
                   ("acosh", acosh), ("arccosh", acosh), ("atanh", atanh), ("arctanh", atanh),
                   ("sigmoid", sigmoid), ("erf", erf), ("erfc", erfc), ("floor", floor), ("ceil", ceil),
                   ("trunc", trunc), ("fix", trunc), ("frac", frac), ("atan2", atan2), ("arctan2", atan2),
                   ("hypot", hypot), ("logaddexp", logaddexp), ("logaddexp2", logaddexp2)]:
    setattr(Tensor, _name, _fn)


__all__ = ['abs', 'acos', 'acosh', 'arccos', 'arccosh', 'arcsin', 'arcsinh', 'arctan', 'arctan2', 'arctanh', 'asin', 'asinh', 'atan', 'atan2', 'atanh', 'ceil', 'cos', 'cosh', 'erf', 'erfc', 'exp', 'exp2', 'expm1', 'fix', 'floor', 'frac', 'hypot', 'lerp', 'log', 'log10', 'log1p', 'log2', 'logaddexp', 'logaddexp2', 'logit', 'nan_to_num', 'reciprocal', 'relu', 'round', 'rsqrt', 'sigmoid', 'sign', 'sin', 'sinh', 'sqrt', 'square', 'tan', 'tanh', 'trunc']
