"""Non-differentiable sampling primitives: a discrete quantile function applied to uniform noise.

NOTE [Discrete samplers]
Poisson and binomial draws are ``quantile(u; params)`` of a uniform ``u`` drawn with
``lucid.rand`` (so NOTE [vmap randomness] decides how the noise is shared). The quantile is
an elementwise primitive of ``(u, params)``: it batches like any elementwise op, so a batched
rate and batched (or shared) noise combine correctly under vmap, and a draw is a
deterministic function of its noise (``randomness="same"`` with equal rates gives equal
draws). On the CPU the quantiles use SciPy's inverses of the regularised incomplete
gamma/beta functions (``pdtrik``/``bdtrik``) and the one-step correction SciPy's ``ppf`` uses,
so they are integers for any rate. On a device they are computed there: NOTE [Discrete
quantiles on a device].

NOTE [Discrete quantiles on a device]
CuPy has the cdfs (``pdtr``, ``bdtr``) but not their inverses, and a host round trip per draw
is what the project rules out, so on a device the quantile ``min{k : cdf(k) >= u}`` is found
by a branchless binary search made of whole-array calls, with a fixed number of steps and no
read-back:

1. A start ``lo`` with ``cdf(lo) < u`` from Bernstein's inequality: for a Poisson(lam) or
   Binomial(n, p) variable (a sum of Bernoulli variables, or their limit) with mean ``m`` and
   variance ``v``, ``P(X <= m - t) <= exp(-L)`` for ``t = L/3 + sqrt(L^2/9 + 2 L v)``; with
   ``L = 1 - log(u)`` (one nat of slack, for rounding) that is below ``u``, so
   ``lo = floor(m - t) - 1`` (or -1) lies below the answer.
2. ``_STEPS`` halving steps: ``k += 2**s`` wherever ``cdf(k + 2**s) < u``, for ``s`` from
   ``_STEPS - 1`` down to 0. This finds the last ``k < answer`` as long as the answer is
   below ``lo + 2**_STEPS``, and the answer is ``k + 1``.

Why 34 steps suffice: the same inequality for the upper tail bounds the answer by
``m + t(L')`` with ``L' = 1 - log(1 - u)``. Float64 noise has ``u >= 5e-324`` and ``u <= 1 -
2**-53``, so ``L <= 745.5`` and ``L' <= 37.8``, and the answer lies within
``t(L) + t(L') + 3 <= 525 + 47.3 sqrt(v)`` of ``lo``. Up to ``v = 2**53`` (where float64 stops
holding every integer) that is below 4.5e9 < 2**33; a 34th step is spare. Above ``2**52``
a Poisson rate's quantile is the normal one with its first Cornish-Fisher term, ``lam +
sqrt(lam) z + (z**2 - 1) / 6`` for ``z = ndtri(u)``, rounded: the next term is below
``|z|**3 / sqrt(lam) < 1e-3`` there (found by a test at rate 4e20, where the search, out of
its range, was off by a standard deviation). Each step is four
array calls (add, cdf, compare, where), so a draw is about 170 launches (Poisson; binomial
about 190) whatever the rate, counted on the stand-in.

The result is the exact minimum for the device's ``pdtr``/``bdtr`` (Cephes, the code SciPy's
are), so it equals the CPU's wherever the CPU's is that minimum too. Measured on the strict
stand-in against the CPU (tests/distributions/test_device_samplers.py keeps the checks): the
same draws for uniform noise and for noise from 1e-160 to 1 - 1e-14, rates 1e-3 to 1e6 and
``n`` up to 1e6; they differ only where SciPy's inverses stop short: the CPU's ``pdtrik`` in
the last ulps below 1 (``1 - u < 1e-14``, rates from 1e4, by under 0.05 standard deviations;
the device's is then the minimum), ``bdtrik`` below ``u = 1e-160``, and ``pdtrik`` gives 0 for
rates above about 1e12. From a rate of about 1e7 Cephes' ``pdtr`` itself (both paths use it)
is a few per cent off beyond 4.5 standard deviations above the mean (its series stops at 2000
terms), so the device's draws there are off by under 0.01 standard deviations (the CPU's by
one). Noise outside (0, 1) and invalid parameters give what the CPU gives: 0 (then ``p >= 1``
gives ``n``, ``p <= 0`` gives 0 and draws are capped at ``n``, as on the CPU). On a GPU the
cdf can differ from SciPy's in the last ulp, so a draw can differ from the CPU's by one where
``u`` is that close to a step of the cdf.
"""
from __future__ import annotations

import numpy as np

from .._core.backend import DEVICE_NAMESPACES, is_array, namespace_of, special_of, xp
from .._core.primitive import bind
from ..ops._family import nondiff


def _discrete_ppf(cont_inverse, cdf, int_k=False):
    def impl(u, *params):
        from scipy import special

        dt = next((a.dtype for a in (u,) + params if isinstance(a, np.ndarray) and a.dtype.kind == "f"),
                  np.dtype(np.float64))
        args = [np.asarray(a, dtype=np.float64) for a in (u,) + params]
        with np.errstate(all="ignore"):
            vals = np.ceil(getattr(special, cont_inverse)(*args))
            vals1 = np.maximum(np.nan_to_num(vals, nan=1.0, posinf=1.0) - 1, 0)
            rest = args[1:]
            if int_k:  # bdtr wants integer k and n
                vals1_k, rest = vals1.astype(np.int64), [np.round(rest[0]).astype(np.int64)] + rest[1:]
            else:
                vals1_k = vals1
            out = np.where(getattr(special, cdf)(vals1_k, *rest) >= args[0], vals1, vals)
            out = np.maximum(np.nan_to_num(out, nan=0.0), 0)
        return xp.asarray(out).astype(dt, copy=False)

    return impl


# ------------------------------------------------------------------ on a device

_STEPS = 34  # see NOTE [Discrete quantiles on a device] for why this covers the rates searched
_NORMAL_ABOVE = 2.0 ** 52  # Poisson rates whose quantile is the corrected normal one (same note)


def _on_device(*arrays):
    return any(a.__class__ in DEVICE_NAMESPACES for a in arrays)


def _float_dtype(*arrays):
    """The dtype of the first float array operand (float64 if none), as the CPU impl picks it."""
    return next((a.dtype for a in arrays if is_array(a) and a.dtype.kind == "f"), np.dtype(np.float64))


def _bernstein(ns, L, var):
    """The ``t`` with ``exp(-t**2 / (2 (var + t/3))) = exp(-L)``: a tail of Bernstein's inequality."""
    return L / 3 + ns.sqrt(L * L / 9 + 2 * L * var)


def _quantile_search(ns, cdf, u, mean, var):
    """``min{k : cdf(k) >= u}`` by a fixed-length branchless binary search (NOTE [Discrete
    quantiles on a device]); ``u`` in (0, 1), ``mean``/``var`` those of the distribution."""
    k = ns.maximum(ns.floor(mean - _bernstein(ns, 1 - ns.log(u), var)) - 1, -1.0)
    for s in range(_STEPS - 1, -1, -1):
        step = k + float(2 ** s)
        k = ns.where(cdf(step) < u, step, k)  # a NaN cdf (bdtr beyond n) counts as reached
    return k + 1


def _poisson_on_device(u, rate):
    ns, pdtr = namespace_of(u, rate), special_of(u, rate).pdtr
    dt = _float_dtype(u, rate)
    with np.errstate(all="ignore"):
        u, lam = ns.asarray(u, dtype=np.float64), ns.asarray(rate, dtype=np.float64)
        ok = (u > 0) & (u < 1) & (lam >= 0) & (lam < np.inf)
        # Elsewhere the CPU gives 0, which is the quantile of Poisson(0) at any u.
        u, lam = ns.where(ok, u, 0.5), ns.where(ok, lam, 0.0)
        big = lam > _NORMAL_ABOVE
        small = ns.where(big, 0.0, lam)
        k = _quantile_search(ns, lambda k: pdtr(k, small), u, small, small)
        z = special_of(u, rate).ndtri(u)
        k = ns.where(big, ns.round(lam + ns.sqrt(lam) * z + (z * z - 1) / 6), k)
    return k.astype(dt, copy=False)


def _binomial_on_device(u, n, p):
    ns, bdtr = namespace_of(u, n, p), special_of(u, n, p).bdtr
    dt = u.dtype if u.dtype.kind == "f" else np.dtype(np.float64)
    with np.errstate(all="ignore"):
        u, n, p = (ns.asarray(a, dtype=np.float64) for a in (u, n, p))
        ok = (u > 0) & (u < 1) & (p > 0) & (p < 1) & (n >= 0) & (n < np.inf)
        # Elsewhere the search sees Binomial(0, 1/2), whose quantile is the CPU's 0; n is
        # rounded for bdtr as on the CPU, and the ends below use it unrounded, as there.
        m, q, v = ns.where(ok, ns.round(n), 0.0), ns.where(ok, p, 0.5), ns.where(ok, u, 0.5)
        m_int = m.astype(np.int64)
        k = _quantile_search(ns, lambda k: bdtr(k, m_int, q), v, m * q, m * q * (1 - q))
        out = ns.where(p >= 1, n, ns.where(p <= 0, 0.0, ns.minimum(k, n)))
    return out.astype(dt, copy=False)


# pdtrik(u, rate): the continuous k with P(X <= k) = u; pdtr(k, rate) the Poisson cdf.
_poisson_ppf = _discrete_ppf("pdtrik", "pdtr")


# scipy's pdtrik returns NaN for large rates (from about 1e11; at 1e12 for every u <= 1/2:
# found by sampling Poisson(1e12), half of whose draws were 0). Where it does, the CPU takes
# the device's search (NOTE [Discrete quantiles on a device]), written for any array namespace.
_PDTRIK_CHECK_ABOVE = 1e8


def _poisson_impl(u, rate):
    if _on_device(u, rate):
        return _poisson_on_device(u, rate)
    out = _poisson_ppf(u, rate)
    lam = np.broadcast_to(np.asarray(rate, dtype=np.float64), np.shape(out))
    big = np.flatnonzero(lam > _PDTRIK_CHECK_ABOVE)
    if big.size:
        from scipy import special

        uu, ll = np.broadcast_to(np.asarray(u, dtype=np.float64), np.shape(out)).ravel()[big], lam.ravel()[big]
        with np.errstate(all="ignore"):
            failed = np.isnan(special.pdtrik(uu, ll)) & (uu > 0) & (uu < 1) & (ll < np.inf)
        if failed.any():
            out = np.array(out)  # writable, whatever the ppf handed back
            flat = out.reshape(-1)
            flat[big[failed]] = _poisson_on_device(uu[failed], ll[failed]).astype(out.dtype)
    return out


poisson_icdf_p = nondiff("poisson_icdf", _poisson_impl)


def _binomial_impl(u, n, p):
    if _on_device(u, n, p):
        return _binomial_on_device(u, n, p)
    # bdtrik(u, n, p) then the binomial cdf bdtr(k, n, p); p == 0 or p == 1 are exact ends.
    out = _discrete_ppf("bdtrik", "bdtr", int_k=True)(u, n, p)
    n = np.asarray(n, dtype=np.float64)
    p = np.asarray(p, dtype=np.float64)
    out = np.where(p >= 1, n, np.where(p <= 0, 0, np.minimum(out, n)))
    return xp.asarray(out).astype(u.dtype if u.dtype.kind == "f" else np.float64, copy=False)


binomial_icdf_p = nondiff("binomial_icdf", _binomial_impl)


def poisson_icdf(u, rate):
    """The Poisson quantile ``min{k : P(X <= k) >= u}`` elementwise (no gradient)."""
    return bind(poisson_icdf_p, (u, rate), {})


def binomial_icdf(u, total_count, probs):
    """The binomial quantile ``min{k : P(X <= k) >= u}`` elementwise (no gradient)."""
    return bind(binomial_icdf_p, (u, total_count, probs), {})
