"""Special-function primitives behind :mod:`lucid.special` (gammaln, digamma, erfinv, Bessel ...).

Each is an elementwise primitive made by the family helpers (:func:`unary`, :func:`binary`),
so the vjp, jvp and batching rules come from one derivative formula written in ``ns`` ops
(derivatives of derivatives follow: ``lgamma' = digamma``, ``digamma' = polygamma(1)`` ...).

NOTE [SciPy forwards]
The forwards are ``scipy.special`` ufuncs. SciPy is a required dependency, but it is
imported inside the forwards, on first use, so ``import lucid`` stays fast. Inputs are
evaluated in float64 and the result is cast back to the input's dtype (float32 in, float32
out, as in PyTorch, with float64 accuracy underneath).
"""
from __future__ import annotations

import math

import numpy as np

from .._core.backend import host_fallback, namespace_of, special_of, xp
from .._core.primitive import bind, defprim
from .._core.tensor import Tensor, _wrap, tensor_method
from .._core import dtypes
from ._family import (_PY_SCALARS, _as_tensor, _promote_float, batch_elementwise, binary,
                      broadcast_tangent, quiet, same_dtype, scalar_operand, shape_of, sum_to_shape,
                      unary)
from .elementwise._half import F16, F32, half_unary_rules, round_rule
from .elementwise.arithmetic import _floatify, cast

_SQRT_PI = math.sqrt(math.pi)
_SQRT_2PI = math.sqrt(2 * math.pi)


def _scipy(name, *fixed):
    """Forward ``scipy.special.<name>(*fixed, *arrays)`` in float64, cast back. See NOTE [SciPy forwards]."""

    def impl(*arrays):
        dt = next((a.dtype for a in arrays if hasattr(a, "shape")), np.dtype(np.float64))
        if any(getattr(a, "dtype", dt).kind == "c" for a in arrays):  # float64 would drop the imaginary part
            raise TypeError("not supported for complex tensors (a function of real arguments, as in PyTorch)")
        # On a device the arrays stay there (special_of: cupyx.scipy.special on CUDA).
        args = [a.astype(np.float64, copy=False) if hasattr(a, "shape") else np.float64(a) for a in arrays]
        with np.errstate(all="ignore"):
            out = getattr(special_of(*arrays), name)(*fixed, *args)
        return xp.asarray(out).astype(dt, copy=False)

    impl.__name__ = name
    return impl


def _safe(ns, x):
    """``x`` with exact zeros replaced by 1: a denominator for formulas whose limit at 0 is taken apart."""
    return ns.where(x == 0, 1.0, x)


def _at_zero(ns, x, value, formula):
    """``formula`` away from 0 and ``value`` at ``x == 0`` (the removable singularity's limit).

    Where the derivative's own slope at 0 is not 0 (sinc), ``value`` is its Taylor term in
    ``x`` (0 at 0 with the right slope), so the second derivative at 0 is right too.
    """
    return ns.where(x == 0, value, formula)


def _doc(fn, text):
    fn.__doc__ = text
    return fn


# ------------------------------------------------------------------ gamma family

_gammaln = _scipy("gammaln")


def _lgamma_impl(x):
    # SciPy's gammaln(-inf) is -inf; |Gamma| has poles at every negative integer and
    # log|Gamma(x)| grows without bound as x -> -inf, so PyTorch (and C's lgamma) give +inf.
    out = _gammaln(x)
    return xp.where(x == -np.inf, np.inf, out).astype(out.dtype, copy=False) if x.dtype.kind == "f" else out


lgamma_p, _lgamma = unary("lgamma", _lgamma_impl, lambda ns, x, o: ns.digamma(x))
digamma_p, _digamma = unary("digamma", _scipy("psi"), lambda ns, x, o: ns.polygamma(x, n=1))


def _polygamma_impl(x, n):
    # cupyx.scipy.special.polygamma broadcasts n against x as an array: give it one there.
    order = n if x.__class__ is np.ndarray else namespace_of(x).full(x.shape, n, np.float64)
    return _scipy("polygamma", order)(x)


polygamma_p = defprim(
    "polygamma", _polygamma_impl,
    vjp=(lambda ns, g, out, x, n: g * ns.polygamma(x, n=n + 1),),
    jvp=lambda ns, primals, tangents, out, n: tangents[0] * ns.polygamma(primals[0], n=n + 1),
)
polygamma_p.batch = batch_elementwise(polygamma_p)


# ----------------------------------------------------------- error-function family

_erfinv64 = _scipy("erfinv")


def _erfinv_impl(x):
    # PyTorch's float16 erfinv is its float32 one rounded: float64 -> float32 -> float16
    # (straight from float64 differs in the last bit now and then). NOTE [Half primitives]
    return _erfinv64(x.astype(F32)).astype(F16) if x.dtype == F16 else _erfinv64(x)


erfinv_p, _erfinv = unary("erfinv", _erfinv_impl, lambda ns, x, o: (_SQRT_PI / 2) * ns.exp(o * o),
                          save_out=True, save_inputs=False)
# PyTorch's ``0.5 * sqrt(pi) * exp(result.pow(2)) * grad``, rounding after each float16 op
# (the constant read at float32 precision, as its mul by a number)
half_unary_rules(erfinv_p, lambda ns, g, x, o: round_rule(ns, lambda e: e * (_SQRT_PI / 2), ns.exp(o * o)) * g)
erfcx_p, _erfcx = unary("erfcx", _scipy("erfcx"), lambda ns, x, o: 2 * x * o - 2 / _SQRT_PI, save_out=True)
ndtri_p, _ndtri = unary("ndtri", _scipy("ndtri"), lambda ns, x, o: _SQRT_2PI * ns.exp(o * o * 0.5),
                        save_out=True, save_inputs=False)
# log_ndtr' = pdf / cdf, formed as exp(log pdf - log_ndtr): finite far in the lower tail.
log_ndtr_p, _log_ndtr = unary("log_ndtr", _scipy("log_ndtr"),
                              lambda ns, x, o: ns.exp(x * x * -0.5 - o) / _SQRT_2PI, save_out=True)


# ------------------------------------------------------------------------ Bessel

i0_p, _i0 = unary("i0", _scipy("i0"), lambda ns, x, o: ns.i1(x))
i0e_p, _i0e = unary("i0e", _scipy("i0e"), lambda ns, x, o: ns.i1e(x) - ns.sign(x) * o, save_out=True)
i1_p, _i1 = unary("i1", _scipy("i1"),
                  lambda ns, x, o: _at_zero(ns, x, 0.5, ns.i0(x) - o / _safe(ns, x)), save_out=True)
i1e_p, _i1e = unary("i1e", _scipy("i1e"),
                    lambda ns, x, o: _at_zero(ns, x, 0.5, ns.i0e(x) - o * (ns.sign(x) + 1 / _safe(ns, x))),
                    save_out=True)
bessel_j0_p, _bessel_j0 = unary("bessel_j0", _scipy("j0"), lambda ns, x, o: -ns.bessel_j1(x))
bessel_j1_p, _bessel_j1 = unary("bessel_j1", _scipy("j1"),
                                lambda ns, x, o: _at_zero(ns, x, 0.5, ns.bessel_j0(x) - o / _safe(ns, x)),
                                save_out=True)
bessel_y0_p, _bessel_y0 = unary("bessel_y0", _scipy("y0"), lambda ns, x, o: -ns.bessel_y1(x))
bessel_y1_p, _bessel_y1 = unary("bessel_y1", _scipy("y1"), lambda ns, x, o: ns.bessel_y0(x) - o / x,
                                save_out=True)
k0_p, _k0 = unary("modified_bessel_k0", _scipy("k0"), lambda ns, x, o: -ns.modified_bessel_k1(x))
k1_p, _k1 = unary("modified_bessel_k1", _scipy("k1"), lambda ns, x, o: -ns.modified_bessel_k0(x) - o / x,
                  save_out=True)
k0e_p, _k0e = unary("scaled_modified_bessel_k0", _scipy("k0e"),
                    lambda ns, x, o: o - ns.scaled_modified_bessel_k1(x), save_out=True)
k1e_p, _k1e = unary("scaled_modified_bessel_k1", _scipy("k1e"),
                    lambda ns, x, o: o - o / x - ns.scaled_modified_bessel_k0(x), save_out=True)


def _sph_j0_impl(x):
    with np.errstate(all="ignore"):
        # sin(x) / x -> 0 as |x| -> inf (sin(inf) is nan), as PyTorch
        return xp.where(x == 0, 1.0, xp.where(xp.isinf(x), 0.0, xp.sin(x) / x)).astype(x.dtype, copy=False)


spherical_bessel_j0_p, _spherical_bessel_j0 = unary(
    "spherical_bessel_j0", _sph_j0_impl,
    lambda ns, x, o: _at_zero(ns, x, x * (-1 / 3), (ns.cos(x) - o) / _safe(ns, x)), save_out=True)


# ------------------------------------------------------------------------- Airy


def _airy(index, name):
    """One output of ``scipy.special.airy`` (Ai, Ai', Bi, Bi'), in float64, cast back. CuPy has
    no Airy functions: on a device this runs on the host (NOTE [Host fallback])."""
    def impl(x):
        if x.dtype.kind == "c":
            raise TypeError("not supported for complex tensors (a function of real arguments, as in PyTorch)")
        import scipy.special

        with np.errstate(all="ignore"):
            return np.asarray(scipy.special.airy(x.astype(np.float64))[index]).astype(x.dtype, copy=False)

    impl.__name__ = name
    return host_fallback(impl)


# Ai'' = x Ai (Airy's equation): the derivative of the derivative closes the pair.
airy_ai_prime_p, _airy_ai_prime = unary("airy_ai_prime", _airy(1, "airy_ai_prime"), lambda ns, x, o: x * ns.airy_ai(x))
airy_ai_p, _airy_ai = unary("airy_ai", _airy(0, "airy_ai"), lambda ns, x, o: ns.airy_ai_prime(x))


# ------------------------------------------------------------------- the others

def _sinc_impl(x):
    if x.dtype == F16:  # one rounding (NumPy's sinc rounds pi * x first). See NOTE [Half primitives]
        return xp.sinc(x.astype(F32)).astype(F16)
    return xp.sinc(x).astype(x.dtype, copy=False)


sinc_p, _sinc = unary("sinc", quiet(_sinc_impl, 1),
                      lambda ns, x, o: _at_zero(ns, x, x * (-math.pi ** 2 / 3), (ns.cos(x * math.pi) - o) / _safe(ns, x)),
                      save_out=True)
# entr' = -(1 + log x): +inf at 0 and nan below, as in PyTorch.
entr_p, _entr = unary("entr", _scipy("entr"), lambda ns, x, o: -(ns.log(x) + 1))


def _kept(ns, x, y, pole):
    """1, or 0 where ``x == 0`` and ``y <= pole`` (where the log is -inf or nan)."""
    return 1 - ns.cast(x == 0, dtype=x.dtype) * ns.cast(y <= pole, dtype=x.dtype)


# xlogy: d/dx = log(y), 0 where x == 0 and y <= 0; d/dy = x / y (PyTorch's formulas: the
# derivative in x is log(y) at x == 0 too wherever the log is finite).
_xlogy64 = _scipy("xlogy")


def _xlogy_impl(x, y):
    if getattr(x, "dtype", None) == F16 or getattr(y, "dtype", None) == F16:
        # PyTorch's float16 kernel rounds log(y) to float16 before the product. NOTE [Half primitives]
        log_y = xp.log(y) if hasattr(y, "shape") else float(np.log(np.float16(y)))
        return xp.where((x == 0) & (y == y), 0, x * log_y).astype(F16, copy=False)
    return _xlogy64(x, y)


xlogy_p = binary("xlogy", quiet(_xlogy_impl, 2), lambda ns, x, y, o: ns.xlogy(_kept(ns, x, y, 0), y),
                 lambda ns, x, y, o: x / y)
_xlogy_dy = xlogy_p.vjp[1]


def _xlogy_vjp_y(ns, g, out, x, y):
    if g.dtype == F16 and getattr(x, "dtype", None) == F16:  # PyTorch's ``grad * self / other``
        return sum_to_shape(ns, g * x / y, shape_of(y))
    return _xlogy_dy(ns, g, out, x, y)


xlogy_p.vjp = (xlogy_p.vjp[0], _xlogy_vjp_y)
xlog1py_p = binary("xlog1py", _scipy("xlog1py"), lambda ns, x, y, o: ns.xlog1py(_kept(ns, x, y, -1), y),
                   lambda ns, x, y, o: x / (y + 1))


def _zeta_dx(ns, x, q, o):
    raise NotImplementedError("special.zeta: not differentiable with respect to x (the derivative for "
                              "'zeta' in its first argument is not implemented, as in PyTorch)")


# Hurwitz zeta(x, q) = sum_k (k + q)^-x:  d/dq = -x zeta(x + 1, q).
zeta_p = binary("zeta", _scipy("zeta"), _zeta_dx, lambda ns, x, q, o: -x * ns.zeta(x + 1, q))


def _not_in_a(name):
    def dx(ns, a, x, o):
        raise NotImplementedError(f"special.{name}: not differentiable with respect to the shape a (the "
                                  f"derivative for '{name}' in its first argument is not implemented, as in PyTorch)")

    return dx


def _gamma_density(ns, a, x):
    """``x^(a-1) e^-x / Gamma(a)``, the x-derivative of the regularized lower incomplete gamma."""
    return ns.exp(ns.xlogy(a - 1, x) - x - ns.lgamma(a))


gammainc_p = binary("gammainc", _scipy("gammainc"), _not_in_a("gammainc"),
                    lambda ns, a, x, o: _gamma_density(ns, a, x))
gammaincc_p = binary("gammaincc", _scipy("gammaincc"), _not_in_a("gammaincc"),
                     lambda ns, a, x, o: -_gamma_density(ns, a, x))


# NOTE [betainc derivatives]
# I_x(a, b) is differentiated in x only: dI/dx = x^(a-1) (1-x)^(b-1) / B(a, b), the Beta
# density. The derivatives in a and b have no closed form (they need a 3F2 series); JAX's
# betainc raises for them too and torch.special has no betainc at all, so asking for one
# raises "not differentiable with respect to a/b" (as gammainc does for its shape a).
def _beta_density(ns, a, b, x):
    """``x^(a-1) (1-x)^(b-1) / B(a, b)`` (xlogy/xlog1py: finite at the ends when a = 1 or b = 1)."""
    return ns.exp(ns.xlogy(a - 1, x) + ns.xlog1py(b - 1, -x) - ns.lgamma(a) - ns.lgamma(b) + ns.lgamma(a + b))


def _betainc_operands(ns, a, b, like):
    if a.__class__ in _PY_SCALARS:
        a = scalar_operand(ns, a, like)
    if b.__class__ in _PY_SCALARS:
        b = scalar_operand(ns, b, like)
    return a, b


def _betainc_not_in(which):
    def vjp(ns, g, out, a, b, x):
        raise NotImplementedError(f"special.betainc: not differentiable with respect to {which} (the derivative "
                                  f"of the regularized incomplete beta in {which} is not implemented, as in JAX; "
                                  f"only x is differentiable)")

    return vjp


def _betainc_vjp_x(ns, g, out, a, b, x):
    a, b = _betainc_operands(ns, a, b, g)
    return sum_to_shape(ns, same_dtype(ns, g * _beta_density(ns, a, b, x), g), shape_of(x))


def _betainc_jvp(ns, primals, tangents, out):
    ta, tb, tx = tangents
    if ta is not None or tb is not None:
        _betainc_not_in("a" if ta is not None else "b")(ns, None, out, *primals)
    if tx is None:
        return None
    a, b = _betainc_operands(ns, primals[0], primals[1], out)
    d = same_dtype(ns, _beta_density(ns, a, b, primals[2]), out)
    return broadcast_tangent(ns, same_dtype(ns, tx * d, out), shape_of(out))


betainc_p = defprim("betainc", _scipy("betainc"),
                    vjp=(_betainc_not_in("a"), _betainc_not_in("b"), _betainc_vjp_x), jvp=_betainc_jvp)
betainc_p.batch = batch_elementwise(betainc_p)


# betaincinv(a, b, y) = x with I_x(a, b) = y: dx/dy = 1 / (the Beta density at x) (inverse
# function rule, from the saved output); no derivative in a or b, as betainc.
def _betaincinv_not_in(which):
    def vjp(ns, g, out, a, b, y):
        raise NotImplementedError(f"special.betaincinv: not differentiable with respect to {which} (as betainc; "
                                  f"only y is differentiable)")

    return vjp


def _betaincinv_vjp_y(ns, g, out, a, b, y):
    a, b = _betainc_operands(ns, a, b, g)
    return sum_to_shape(ns, same_dtype(ns, g / _beta_density(ns, a, b, out), g), shape_of(y))


def _betaincinv_jvp(ns, primals, tangents, out):
    ta, tb, ty = tangents
    if ta is not None or tb is not None:
        _betaincinv_not_in("a" if ta is not None else "b")(ns, None, out, *primals)
    if ty is None:
        return None
    a, b = _betainc_operands(ns, primals[0], primals[1], out)
    d = same_dtype(ns, _beta_density(ns, a, b, out), out)
    return broadcast_tangent(ns, same_dtype(ns, ty / d, out), shape_of(out))


betaincinv_p = defprim("betaincinv", _scipy("betaincinv"),
                       vjp=(_betaincinv_not_in("a"), _betaincinv_not_in("b"), _betaincinv_vjp_y),
                       jvp=_betaincinv_jvp, save_out=True)
betaincinv_p.batch = batch_elementwise(betaincinv_p)


# ------------------------------------------------------------ public functions

def _unary_public(name, prim, summary, example, methods=()):
    def fn(input):
        if isinstance(input, Tensor) and input.dtype.kind == "f":
            return bind(prim, (input,), {})
        return bind(prim, (_promote_float(input),), {})

    fn.__name__ = fn.__qualname__ = name
    fn.__doc__ = (f"{summary}\n\nParameters\n----------\ninput : Tensor\n    Any shape; integer and bool "
                  f"inputs are promoted to the default float dtype first.\n\nExamples\n--------\n"
                  f">>> import lucid\n{example}\n")
    for m in methods:
        setattr(Tensor, m, fn)
    return fn


gammaln = _unary_public(
    "gammaln", lgamma_p, "``log|Gamma(x)|``; the derivative is :func:`digamma`.",
    ">>> round(lucid.special.gammaln(lucid.tensor([4.0])).item(), 6)\n1.791759", ("lgamma",))
lgamma = gammaln
digamma = _unary_public(
    "digamma", digamma_p, "``d/dx log Gamma(x)``; the derivative is ``polygamma(1, x)``.",
    ">>> round(lucid.special.digamma(lucid.tensor([1.0])).item(), 6)\n-0.577216", ("digamma",))
psi = digamma
erfinv = _unary_public(
    "erfinv", erfinv_p, "Inverse error function on (-1, 1) (``±inf`` at ``±1``).",
    ">>> round(lucid.special.erfinv(lucid.tensor([0.5])).item(), 6)\n0.476936", ("erfinv",))
erfcx = _unary_public(
    "erfcx", erfcx_p, "Scaled complementary error function ``exp(x**2) * erfc(x)``, without overflow.",
    ">>> round(lucid.special.erfcx(lucid.tensor([30.0])).item(), 6)\n0.018796")
ndtri = _unary_public(
    "ndtri", ndtri_p, "Inverse of the standard normal CDF (the probit function).",
    ">>> round(lucid.special.ndtri(lucid.tensor([0.975])).item(), 6)\n1.959964")
log_ndtr = _unary_public(
    "log_ndtr", log_ndtr_p, "``log`` of the standard normal CDF, accurate far in the lower tail.",
    ">>> round(lucid.special.log_ndtr(lucid.tensor([-40.0], dtype=lucid.float64)).item(), 3)\n-804.608")
i0 = _unary_public(
    "i0", i0_p, "Modified Bessel function of the first kind, order 0.",
    ">>> round(lucid.special.i0(lucid.tensor([1.0])).item(), 6)\n1.266066", ("i0",))
i0e = _unary_public(
    "i0e", i0e_p, "Exponentially scaled ``i0``: ``exp(-|x|) * i0(x)``.",
    ">>> round(lucid.special.i0e(lucid.tensor([1.0])).item(), 6)\n0.46576")
i1 = _unary_public(
    "i1", i1_p, "Modified Bessel function of the first kind, order 1.",
    ">>> round(lucid.special.i1(lucid.tensor([1.0])).item(), 6)\n0.565159")
i1e = _unary_public(
    "i1e", i1e_p, "Exponentially scaled ``i1``: ``exp(-|x|) * i1(x)``.",
    ">>> round(lucid.special.i1e(lucid.tensor([1.0])).item(), 6)\n0.20791")
bessel_j0 = _unary_public(
    "bessel_j0", bessel_j0_p, "Bessel function of the first kind, order 0.",
    ">>> round(lucid.special.bessel_j0(lucid.tensor([1.0])).item(), 6)\n0.765198")
bessel_j1 = _unary_public(
    "bessel_j1", bessel_j1_p, "Bessel function of the first kind, order 1.",
    ">>> round(lucid.special.bessel_j1(lucid.tensor([1.0])).item(), 6)\n0.440051")
bessel_y0 = _unary_public(
    "bessel_y0", bessel_y0_p, "Bessel function of the second kind, order 0 (``x > 0``).",
    ">>> round(lucid.special.bessel_y0(lucid.tensor([1.0])).item(), 6)\n0.088257")
bessel_y1 = _unary_public(
    "bessel_y1", bessel_y1_p, "Bessel function of the second kind, order 1 (``x > 0``).",
    ">>> round(lucid.special.bessel_y1(lucid.tensor([1.0])).item(), 6)\n-0.781213")
modified_bessel_k0 = _unary_public(
    "modified_bessel_k0", k0_p, "Modified Bessel function of the second kind, order 0 (``x > 0``).",
    ">>> round(lucid.special.modified_bessel_k0(lucid.tensor([1.0])).item(), 6)\n0.421024")
modified_bessel_k1 = _unary_public(
    "modified_bessel_k1", k1_p, "Modified Bessel function of the second kind, order 1 (``x > 0``).",
    ">>> round(lucid.special.modified_bessel_k1(lucid.tensor([1.0])).item(), 6)\n0.601907")
scaled_modified_bessel_k0 = _unary_public(
    "scaled_modified_bessel_k0", k0e_p, "``exp(x) * modified_bessel_k0(x)`` (``x > 0``).",
    ">>> round(lucid.special.scaled_modified_bessel_k0(lucid.tensor([1.0])).item(), 6)\n1.144463")
scaled_modified_bessel_k1 = _unary_public(
    "scaled_modified_bessel_k1", k1e_p, "``exp(x) * modified_bessel_k1(x)`` (``x > 0``).",
    ">>> round(lucid.special.scaled_modified_bessel_k1(lucid.tensor([1.0])).item(), 6)\n1.636153")
spherical_bessel_j0 = _unary_public(
    "spherical_bessel_j0", spherical_bessel_j0_p, "Spherical Bessel function ``sin(x) / x`` (1 at 0).",
    ">>> lucid.special.spherical_bessel_j0(lucid.tensor([0.0])).item()\n1.0")
airy_ai = _unary_public(
    "airy_ai", airy_ai_p, "Airy function ``Ai(x)``, the solution of ``y'' = x y`` decaying as ``x -> inf``.",
    ">>> round(lucid.special.airy_ai(lucid.tensor([0.0])).item(), 6)\n0.355028")
sinc = _unary_public(
    "sinc", sinc_p, "Normalized sinc ``sin(pi x) / (pi x)`` (1 at 0; the gradient at 0 is 0).",
    ">>> lucid.special.sinc(lucid.tensor([0.0, 1.0])).tolist()[0]\n1.0", ("sinc",))
entr = _unary_public(
    "entr", entr_p, "Elementwise entropy ``-x log x`` (0 at 0, ``-inf`` for ``x < 0``).",
    ">>> lucid.special.entr(lucid.tensor([0.0, 1.0])).tolist()\n[0.0, -0.0]")


def modified_bessel_i0(input):
    """Modified Bessel function of the first kind, order 0 (the same function as :func:`i0`).

    Parameters
    ----------
    input : Tensor
        Any shape.

    Examples
    --------
    >>> import lucid
    >>> round(lucid.special.modified_bessel_i0(lucid.tensor([1.0])).item(), 6)
    1.266066
    """
    return i0(input)


def modified_bessel_i1(input):
    """Modified Bessel function of the first kind, order 1 (the same function as :func:`i1`).

    Parameters
    ----------
    input : Tensor
        Any shape.

    Examples
    --------
    >>> import lucid
    >>> round(lucid.special.modified_bessel_i1(lucid.tensor([1.0])).item(), 6)
    0.565159
    """
    return i1(input)


def polygamma(n, input):
    """The ``n``-th derivative of :func:`digamma` (``n = 0`` is digamma itself).

    Parameters
    ----------
    n : int
        The order, ``n >= 0``; not differentiable (an integer).
    input : Tensor
        Any shape.

    Examples
    --------
    >>> import lucid
    >>> round(lucid.polygamma(1, lucid.tensor([1.0])).item(), 6)
    1.644934
    """
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)):
        raise TypeError(f"polygamma: n must be a non-negative int (it is not differentiable), got {n!r}")
    if n < 0:
        raise RuntimeError(f"polygamma: n must be non-negative, got {n}")
    x = _promote_float(input)
    if x.dtype.kind not in "f":
        raise TypeError(f"polygamma: expected a floating point input, got dtype {x.dtype}")
    return bind(polygamma_p, (x,), {"n": int(n)})


Tensor.polygamma = lambda self, n: polygamma(n, self)


def _binary_public(name, prim):
    def fn(input, other):
        return bind(prim, _floatify(input, other), {})

    fn.__name__ = fn.__qualname__ = name
    return fn


xlogy = _doc(_binary_public("xlogy", xlogy_p), """``x * log(y)``, 0 where ``x == 0`` (unless ``y`` is nan).

Parameters
----------
input : Tensor or number
    ``x``.
other : Tensor or number
    ``y``.

Examples
--------
>>> import lucid
>>> lucid.xlogy(lucid.tensor([0.0, 2.0]), lucid.tensor([0.0, 1.0])).tolist()
[0.0, 0.0]
""")
xlog1py = _doc(_binary_public("xlog1py", xlog1py_p), """``x * log1p(y)``, 0 where ``x == 0`` (unless ``y`` is nan).

Parameters
----------
input : Tensor or number
    ``x``.
other : Tensor or number
    ``y``.

Examples
--------
>>> import lucid
>>> lucid.special.xlog1py(lucid.tensor([0.0, 2.0]), lucid.tensor([-1.0, 0.0])).tolist()
[0.0, 0.0]
""")
zeta = _doc(_binary_public("zeta", zeta_p), """Hurwitz zeta ``sum_k (k + q) ** -x``; differentiable in ``q`` only.

Parameters
----------
input : Tensor or number
    ``x`` (no derivative, as in PyTorch: asking for one raises).
other : Tensor or number
    ``q``.

Examples
--------
>>> import lucid
>>> round(lucid.special.zeta(lucid.tensor([2.0]), 1.0).item(), 6)
1.644934
""")
tensor_method("xlogy")(xlogy)
gammainc = _doc(_binary_public("gammainc", gammainc_p), """Regularized lower incomplete gamma ``P(a, x)``; differentiable in ``x`` only.

Parameters
----------
input : Tensor or number
    ``a > 0`` (no derivative, as in PyTorch: asking for one raises).
other : Tensor or number
    ``x >= 0``.

Examples
--------
>>> import lucid
>>> round(lucid.special.gammainc(lucid.tensor([1.0]), lucid.tensor([2.0])).item(), 6)
0.864665
""")
gammaincc = _doc(_binary_public("gammaincc", gammaincc_p), """Regularized upper incomplete gamma ``Q(a, x) = 1 - P(a, x)``; differentiable in ``x`` only.

Parameters
----------
input : Tensor or number
    ``a > 0`` (no derivative, as in PyTorch: asking for one raises).
other : Tensor or number
    ``x >= 0``.

Examples
--------
>>> import lucid
>>> round(lucid.special.gammaincc(lucid.tensor([1.0]), lucid.tensor([2.0])).item(), 6)
0.135335
""")
igamma, igammac = gammainc, gammaincc
Tensor.igamma = lambda self, other: gammainc(self, other)
Tensor.igammac = lambda self, other: gammaincc(self, other)


def betainc(a, b, x):
    """Regularized incomplete beta function ``I_x(a, b)`` (SciPy's ``betainc``).

    ``I_x(a, b) = B(x; a, b) / B(a, b)``, the CDF of ``Beta(a, b)`` at ``x``. Differentiable in
    ``x`` only (the Beta density), as JAX's betainc; a gradient in ``a`` or ``b`` raises.
    See NOTE [betainc derivatives].

    Parameters
    ----------
    a, b : Tensor or number
        Positive shape parameters (no derivative).
    x : Tensor or number
        Points in ``[0, 1]`` (nan outside). All three broadcast; integers become the
        default float dtype.

    Examples
    --------
    >>> import lucid
    >>> lucid.special.betainc(2.0, 3.0, lucid.tensor([0.5])).tolist()
    [0.6875]
    """
    return bind(betainc_p, _betainc_args("betainc", a, b, x), {})


def _betainc_args(name, a, b, x):
    """``(a, b, x)`` in one real float dtype (Python-scalar a, b stay scalars; x becomes a Tensor)."""
    args = [v if isinstance(v, Tensor) or v.__class__ in (int, float) else _as_tensor(v) for v in (a, b, x)]
    if not isinstance(args[2], Tensor):
        args[2] = _as_tensor(float(args[2]))
    dt = dtypes.result_type(*args)
    if dtypes.kind_of(dt) not in "biuf":
        raise TypeError(f"special.{name}: expected real inputs, got dtype {dt} (complex is not supported, "
                        f"as in SciPy)")
    if dt.kind in "biu":
        dt = dtypes.get_default_dtype()
    return tuple((v if v.dtype == dt else cast(v, dt)) if isinstance(v, Tensor) else float(v) for v in args)


def betaincinv(a, b, y):
    """Inverse of :func:`betainc` in ``x``: the ``x`` in ``[0, 1]`` with ``I_x(a, b) = y`` (SciPy's
    ``betaincinv``; the quantile function of ``Beta(a, b)``).

    Differentiable in ``y`` only: ``dx/dy = 1 / (x^(a-1) (1-x)^(b-1) / B(a, b))``; a gradient in
    ``a`` or ``b`` raises, as for :func:`betainc`.

    Parameters
    ----------
    a, b : Tensor or number
        Positive shape parameters (no derivative).
    y : Tensor or number
        Probabilities in ``[0, 1]``. All three broadcast.

    Examples
    --------
    >>> import lucid
    >>> lucid.special.betaincinv(1.0, 1.0, lucid.tensor([0.25])).tolist()
    [0.25]
    """
    return bind(betaincinv_p, _betainc_args("betaincinv", a, b, y), {})


def multigammaln(input, p):
    """Multivariate log-gamma ``log Gamma_p(x) = p(p-1)/4 log(pi) + sum_j lgamma(x - j/2)``, ``j < p``.

    A composite of :func:`gammaln`, so its derivatives come from lgamma's.

    Parameters
    ----------
    input : Tensor
        Every element must exceed ``(p - 1) / 2``.
    p : int
        The dimension, ``p >= 1``.

    Notes
    -----
    An element ``<= (p - 1) / 2`` gives the sum of its ``log|Gamma|`` terms (``inf`` at a
    pole), as PyTorch 2.13 does on every device (earlier PyTorch raised there).

    Examples
    --------
    >>> import lucid
    >>> round(lucid.special.multigammaln(lucid.tensor([2.5]), 2).item(), 6)
    0.857048
    """
    if isinstance(p, bool) or not isinstance(p, (int, np.integer)) or p < 1:
        raise RuntimeError(f"multigammaln: p must be an int >= 1, got {p!r}")
    x = _promote_float(input)
    if x.dtype.kind == "c":
        raise TypeError(f"multigammaln: not supported for complex tensors (a function of real arguments, as in "
                        f"PyTorch) (input of shape {tuple(x.shape)}, dtype {x.dtype})")
    offsets = _wrap(namespace_of(x).arange(p, dtype=x.dtype)) * 0.5  # a Tensor op: on x's device
    terms = gammaln(x.unsqueeze(-1) - offsets)
    return terms.sum(-1) + p * (p - 1) / 4 * math.log(math.pi)


mvlgamma = multigammaln
Tensor.mvlgamma = lambda self, p: multigammaln(self, p)


__all__ = ["digamma", "erfinv", "i0", "igamma", "igammac", "lgamma", "mvlgamma", "polygamma", "sinc", "xlogy"]
