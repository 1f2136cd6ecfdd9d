"""The standard-gamma sampling primitive and its implicit-reparameterisation gradient.

NOTE [Implicit reparameterisation]
A Gamma(alpha, 1) draw is ``x = P^{-1}(alpha, u)``, the inverse of the regularised lower
incomplete gamma function at uniform noise ``u`` (SciPy's ``gammaincinv``; exact, one
uniform per draw, deterministic in ``(alpha, u)``, so vmap's randomness modes apply through
the noise as for every sampler). Differentiating ``P(alpha, x) = u`` at fixed ``u`` gives
``dx/dalpha = -(dP/dalpha) / p(x; alpha)`` (Figurnov et al. 2018); we use PyTorch's
approximation of it, ``_standard_gamma_grad`` (a Taylor series for small x, Rice's saddle
point expansion for large alpha, a bivariate rational fit elsewhere; Jankowiak and
Obermeyer 2018), written with ``ns`` ops so the rule is itself differentiable (PyTorch
raises on double backward) and batches. ``dx/du = 1 / p(x; alpha)`` completes the rules.
Beta and Dirichlet samples are normalised gammas, so their gradients are pathwise through
this one primitive.
"""
from __future__ import annotations

import numpy as np

from .._core.backend import special_of, xp
from .._core.primitive import bind
from ..ops._family import binary

_TINY = {np.dtype(np.float16): float(np.finfo(np.float16).tiny), np.dtype(np.float32): float(np.finfo(np.float32).tiny),
         np.dtype(np.float64): float(np.finfo(np.float64).tiny)}


def _standard_gamma_impl(alpha, u):
    dt = alpha.dtype if hasattr(alpha, "shape") and alpha.dtype.kind == "f" else np.dtype(np.float64)
    with np.errstate(all="ignore"):  # special_of: cupyx.scipy.special on a device
        x = special_of(alpha, u).gammaincinv(_f64(alpha), _f64(u))
    # A draw that underflows (tiny alpha) is clamped to the smallest normal number, as PyTorch does.
    return xp.asarray(np.maximum(x, _TINY.get(np.dtype(dt), 0.0))).astype(dt, copy=False)


def _f64(a):
    return a.astype(np.float64, copy=False) if hasattr(a, "shape") else np.float64(a)


# The bivariate rational approximation's coefficients (PyTorch, aten/src/ATen/native/Distributions.h).
_COEF_UV = (
    (0.16009398, -0.094634809, 0.025146376, -0.0030648343, 1, 0.32668115, 0.10406089, 0.0014179084),
    (0.53487893, 0.1298071, 0.065735949, -0.0015649758, 0.16639465, 0.020070113, -0.0035938915, -0.00058392623),
    (0.040121004, -0.0065914022, -0.0026286047, -0.0013441777, 0.017050642, -0.0021309326, 0.00085092367,
     -1.5247877e-07),
)


def standard_gamma_grad(ns, alpha, x):
    """``dx/dalpha`` of a Gamma(alpha, 1) draw ``x`` at fixed noise (PyTorch's ``_standard_gamma_grad``).

    Each of the three regimes is evaluated on inputs replaced by a harmless value outside it,
    so no branch produces inf/NaN that a ``where`` gradient would turn into NaN.
    """
    small = x < 0.8
    large = (alpha > 8.0) & (x >= 0.8)
    near = large & (x >= 0.9 * alpha) & (x <= 1.1 * alpha)
    far = large & ~near
    mid = (x >= 0.8) & (alpha <= 8.0)
    one = ns.ones_like(x)

    # Taylor series of the incomplete gamma function for small x; P and p share x^alpha, so
    # dP/dalpha / p = x e^x ((log x - digamma(alpha)) series1 - series2) (no under/overflow).
    xs = ns.where(small, x, 0.5 * one)
    numer, denom = one, alpha * one
    series1 = numer / denom
    series2 = numer / (denom * denom)
    for i in range(1, 6):
        numer = numer * (-xs / i)
        denom = denom + 1
        series1 = series1 + numer / denom
        series2 = series2 + numer / (denom * denom)
    r_small = -xs * ns.exp(xs) * ((ns.log(xs) - ns.digamma(alpha)) * series1 - series2)

    # Rice saddle-point expansion for large alpha, near and away from the mode.
    an, xn = ns.where(near, alpha, 10.0 * one), ns.where(near, x, 10.0 * one)
    numer_1 = 1 + 24 * an * (1 + 12 * an)
    numer_2 = 1440 * (an * an) + 6 * xn * (53 - 120 * xn) - 65 * xn * xn / an + an * (107 + 3600 * xn)
    r_near = numer_1 * numer_2 / (1244160 * (an * an) * (an * an))
    af, xf = ns.where(far, alpha, 10.0 * one), ns.where(far, x, 5.0 * one)
    d = ns.sqrt(8 * af)
    term2 = d / (af - xf)
    term3 = (xf - af - af * ns.log(xf / af)) ** -1.5
    term23 = ns.where(xf < af, term2 - term3, term2 + term3)
    term1 = ns.log(xf / af) * term23 - ns.sqrt(2 / af) * (af + xf) / ((af - xf) * (af - xf))
    stirling = 1 + 1 / (12 * af) * (1 + 1 / (24 * af))
    r_far = -stirling * (xf * term1) / d

    # Bivariate rational approximation in (log(x / alpha), log(alpha)) elsewhere.
    am, xm = ns.where(mid, alpha, one), ns.where(mid, x, one)
    u, v = ns.log(xm / am), ns.log(am)
    c = [c0 + u * (c1 + u * c2) for c0, c1, c2 in zip(*_COEF_UV)]
    p = c[0] + v * (c[1] + v * (c[2] + v * c[3]))
    q = c[4] + v * (c[5] + v * (c[6] + v * c[7]))
    r_mid = ns.exp(p / q)

    return ns.where(small, r_small, ns.where(near, r_near, ns.where(far, r_far, r_mid)))


def _dx_du(ns, alpha, u, out):
    # 1 / p(x; alpha) = Gamma(alpha) x^(1 - alpha) e^x
    return ns.exp(ns.lgamma(alpha) + out - (alpha - 1) * ns.log(out))


standard_gamma_p = binary("standard_gamma", _standard_gamma_impl,
                          lambda ns, a, u, out: standard_gamma_grad(ns, a, out), _dx_du, save_out=True)


def standard_gamma(alpha, u):
    """A Gamma(alpha, 1) draw from uniform noise ``u`` (see NOTE [Implicit reparameterisation]).

    Differentiable in ``alpha`` (implicit reparameterisation) and in ``u``.

    Examples
    --------
    >>> import lucid
    >>> from lucid.distributions._gamma import standard_gamma
    >>> round(standard_gamma(lucid.tensor(1.0), lucid.tensor(0.5)).item(), 4)  # median of Exp(1): log 2
    0.6931
    """
    from .utils import as_float

    alpha = as_float(alpha)
    u = as_float(u, alpha)
    if u.dtype != alpha.dtype:
        u = u.to(alpha.dtype)
    return bind(standard_gamma_p, (alpha, u), {})
