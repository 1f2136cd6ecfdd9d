"""Op database entries for lucid.special (primitives in lucid/ops/special.py and composites).

References are SciPy's (a required dependency); the closed-form and PyTorch checks that do
not trust SciPy live in tests/special/. Samples stay inside each function's domain:
positive arguments for gamma-type and second-kind Bessel functions, (-0.9, 0.9) for
erfinv, (0.1, 0.8) for ndtri (vmap scales examples up by 10 %).
"""
import numpy as np
import scipy.special as sp

import lucid
import lucid.special as S
from opinfo import OpInfo, Sample, floats, positive, unary_samples


def between(lo, hi):
    return lambda rng, *s: floats(rng, *s, low=lo, high=hi)


def with_zero(make):
    """Unary samples whose vector holds an exact 0 (removable singularities of the derivative)."""
    def samples(rng):
        v = make(rng, 4)
        v[1] = 0.0
        return [Sample((v,), name="with zero"), Sample((make(rng, 2, 3),)), Sample((make(rng),)),
                Sample((make(rng, 0, 2),), name="empty")]

    return samples


def _u(name, op, ref, make=floats, samples=None, **kw):
    return OpInfo(name, op, ref, samples or unary_samples(make), **kw)


def _xy_samples(make_y):
    def samples(rng):
        # (x == 0, where PyTorch's x-derivative is 0 by convention, is tested in tests/special)
        return [Sample((floats(rng, 2, 3), make_y(rng, 2, 3))), Sample((floats(rng, 3), make_y(rng, 2, 3)), name="broadcast"),
                Sample((floats(rng, 2), 1.5), name="python scalar y"),
                Sample((0.7, make_y(rng, 3)), name="python scalar x")]

    return samples


def _zeta_samples(rng):
    # x (no derivative, as in PyTorch) is an integer array: it is vmapped but never differentiated.
    return [Sample((np.array([2, 3, 4], dtype=np.int64), positive(rng, 3))),
            Sample((np.array([[2], [5]], dtype=np.int64), positive(rng, 3)), name="broadcast"),
            Sample((3.5, positive(rng, 2, 2)), name="python scalar x")]


def _gammainc_samples(rng):
    # a (no derivative, as in PyTorch) is an integer array or a Python float: vmapped, never differentiated
    return [Sample((np.array([1, 2, 5], dtype=np.int64), positive(rng, 3, low=0.3, high=4.0))),
            Sample((np.array([[1], [3]], dtype=np.int64), positive(rng, 3, low=0.3, high=4.0)), name="broadcast"),
            Sample((2.5, positive(rng, 2, 2, low=0.3, high=4.0)), name="python scalar a")]


def _poly(name, fn, ref, make, degrees=(0, 1, 2, 5)):
    def samples(rng):
        return [Sample((make(rng, 2, 3), n), name=f"n={n}") for n in degrees] + [
            Sample((make(rng, 3), -1), name="negative degree")]

    return OpInfo(name, fn, lambda x, n: ref(n, x) if n >= 0 else np.zeros_like(x), samples)


def _mvlgamma_samples(rng):
    return [Sample((positive(rng, 2, 3, low=1.2, high=3.0), 3)), Sample((positive(rng, 4, low=0.6, high=2.0), 1)),
            Sample((positive(rng, low=1.0, high=2.0), 2))]


OPS = [
    _u("gammaln", S.gammaln, sp.gammaln, positive),
    _u("lgamma_negative", lucid.lgamma, sp.gammaln, between(-2.9, -2.1)),
    _u("digamma", S.digamma, sp.digamma, positive),
    OpInfo("polygamma", lambda x, n: lucid.polygamma(n, x), lambda x, n: sp.polygamma(n, x),
           lambda rng: [Sample((positive(rng, 2, 3), 1)), Sample((positive(rng, 3), 2)),
                        Sample((positive(rng, 2), 0), name="n=0 is digamma")]),
    _u("erfinv", S.erfinv, sp.erfinv, between(-0.85, 0.85)),
    _u("erfcx", S.erfcx, sp.erfcx, between(-2.0, 3.0)),
    _u("ndtri", S.ndtri, sp.ndtri, between(0.1, 0.8)),
    _u("ndtr", S.ndtr, sp.ndtr, between(-3.0, 3.0)),
    _u("log_ndtr", S.log_ndtr, sp.log_ndtr, between(-6.0, 3.0)),
    _u("i0", S.i0, sp.i0, between(-2.0, 2.0)),
    _u("i0e", S.i0e, sp.i0e, between(0.1, 2.0)),
    _u("i0e_negative", S.i0e, sp.i0e, between(-2.0, -0.1)),
    _u("i1", S.i1, sp.i1, samples=with_zero(between(-2.0, 2.0))),
    _u("i1e", S.i1e, sp.i1e, between(0.1, 2.0)),
    _u("i1e_negative", S.i1e, sp.i1e, between(-2.0, -0.1)),
    _u("bessel_j0", S.bessel_j0, sp.j0, between(-3.0, 3.0)),
    _u("bessel_j1", S.bessel_j1, sp.j1, samples=with_zero(between(-3.0, 3.0))),
    _u("bessel_y0", S.bessel_y0, sp.y0, between(0.5, 3.0)),
    _u("bessel_y1", S.bessel_y1, sp.y1, between(0.5, 3.0)),
    _u("modified_bessel_k0", S.modified_bessel_k0, sp.k0, between(0.5, 3.0)),
    _u("modified_bessel_k1", S.modified_bessel_k1, sp.k1, between(0.5, 3.0)),
    _u("scaled_modified_bessel_k0", S.scaled_modified_bessel_k0, sp.k0e, between(0.5, 3.0)),
    _u("scaled_modified_bessel_k1", S.scaled_modified_bessel_k1, sp.k1e, between(0.5, 3.0)),
    _u("spherical_bessel_j0", S.spherical_bessel_j0, lambda x: sp.spherical_jn(0, x),
       samples=with_zero(between(-3.0, 3.0))),
    _u("sinc", S.sinc, np.sinc, samples=with_zero(between(-2.0, 2.0))),
    _u("airy_ai", S.airy_ai, lambda x: sp.airy(x)[0], between(-3.0, 2.0)),
    _u("entr", S.entr, sp.entr, positive),
    OpInfo("xlogy", S.xlogy, sp.xlogy, _xy_samples(positive)),
    OpInfo("xlog1py", S.xlog1py, sp.xlog1py, _xy_samples(between(-0.5, 1.0))),
    OpInfo("zeta", S.zeta, sp.zeta, _zeta_samples),
    OpInfo("gammainc", S.gammainc, sp.gammainc, _gammainc_samples),
    OpInfo("gammaincc", S.gammaincc, sp.gammaincc, _gammainc_samples),
    OpInfo("multigammaln", S.multigammaln, lambda x, p: sp.multigammaln(x, p) if np.ndim(x) == 0
           else np.vectorize(lambda v: sp.multigammaln(v, p))(x), _mvlgamma_samples),
    _poly("chebyshev_polynomial_t", S.chebyshev_polynomial_t, sp.eval_chebyt, floats),
    _poly("chebyshev_polynomial_u", S.chebyshev_polynomial_u, sp.eval_chebyu, floats),
    _poly("chebyshev_polynomial_v", S.chebyshev_polynomial_v,
          lambda n, x: sp.eval_jacobi(n, -0.5, 0.5, x) / sp.eval_jacobi(n, -0.5, 0.5, 1.0), floats),
    _poly("chebyshev_polynomial_w", S.chebyshev_polynomial_w,
          lambda n, x: (2 * n + 1) * sp.eval_jacobi(n, 0.5, -0.5, x) / sp.eval_jacobi(n, 0.5, -0.5, 1.0), floats),
    _poly("shifted_chebyshev_polynomial_t", S.shifted_chebyshev_polynomial_t, sp.eval_sh_chebyt,
          between(0.0, 0.9)),
    _poly("shifted_chebyshev_polynomial_u", S.shifted_chebyshev_polynomial_u, sp.eval_sh_chebyu,
          between(0.0, 0.9)),
    _poly("hermite_polynomial_h", S.hermite_polynomial_h, sp.eval_hermite, floats),
    _poly("hermite_polynomial_he", S.hermite_polynomial_he, sp.eval_hermitenorm, floats),
    _poly("laguerre_polynomial_l", S.laguerre_polynomial_l, sp.eval_laguerre, between(0.0, 3.0)),
    _poly("legendre_polynomial_p", S.legendre_polynomial_p, sp.eval_legendre, floats),
]
