"""Non-differentiable sampling primitives: a discrete quantile function applied to uniform noise.

NOTE [Discrete samplers]
Poisson and binomial draws are ``quantile(u; params)`` of a uniform ``u`` drawn with
``lucid.rand`` (so NOTE [vmap randomness] decides how the noise is shared). The quantile is
an elementwise primitive of ``(u, params)``: it batches like any elementwise op, so a batched
rate and batched (or shared) noise combine correctly under vmap, and a draw is a
deterministic function of its noise (``randomness="same"`` with equal rates gives equal
draws). The quantiles use SciPy's inverses of the regularised incomplete gamma/beta
functions (``pdtrik``/``bdtrik``) and the one-step correction SciPy's ``ppf`` uses, so they
are exact integers for any rate (the cost grows only logarithmically with it).
"""
from __future__ import annotations

import numpy as np

from .._core.backend import host_fallback, xp
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


# pdtrik(u, rate): the continuous k with P(X <= k) = u; pdtr(k, rate) the Poisson cdf.
# On a device these run on the host (NOTE [Host fallback]): CuPy has no pdtrik/bdtrik.
poisson_icdf_p = nondiff("poisson_icdf", host_fallback(_discrete_ppf("pdtrik", "pdtr")))


def _binomial_impl(u, n, p):
    # bdtrik(u, n, p) then the binomial cdf bdtr(k, n, p); p == 0 or p == 1 are exact ends.
    out = _discrete_ppf("bdtrik", "bdtr", int_k=True)(u, n, p)
    n = np.asarray(n, dtype=np.float64)
    p = np.asarray(p, dtype=np.float64)
    out = np.where(p >= 1, n, np.where(p <= 0, 0, np.minimum(out, n)))
    return xp.asarray(out).astype(u.dtype if u.dtype.kind == "f" else np.float64, copy=False)


binomial_icdf_p = nondiff("binomial_icdf", host_fallback(_binomial_impl))


def poisson_icdf(u, rate):
    """The Poisson quantile ``min{k : P(X <= k) >= u}`` elementwise (no gradient)."""
    return bind(poisson_icdf_p, (u, rate), {})


def binomial_icdf(u, total_count, probs):
    """The binomial quantile ``min{k : P(X <= k) >= u}`` elementwise (no gradient)."""
    return bind(binomial_icdf_p, (u, total_count, probs), {})
