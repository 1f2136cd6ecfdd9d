"""lucid.special: special functions under PyTorch's ``torch.special`` names.

The primitives live in :mod:`lucid.ops.special` (SciPy forwards, imported lazily; see
NOTE [SciPy forwards]); functions that already exist elsewhere (``erf``, ``expm1``,
``softmax`` ...) are re-exported here, not duplicated. The orthogonal polynomials are
composites of their three-term recurrences, so they are differentiable in ``x`` (PyTorch's
are not differentiable at all) and never in the integer degree ``n``.
"""
from __future__ import annotations

import math

import numpy as np

from ._core.backend import host
from ._core.dtypes import result_type
from ._core.tensor import Tensor
from .ops.elementwise import erf, erfc, exp2, expm1, log1p, logit, round, sigmoid, where  # noqa: F401
from .ops.reduce import log_softmax, logsumexp, softmax  # noqa: F401
from .ops.special import (airy_ai, bessel_j0, bessel_j1, bessel_y0, bessel_y1, digamma, entr, erfcx,  # noqa: F401
                          betainc, betaincinv, erfinv, gammainc, gammaincc, gammaln, i0, i0e, i1, i1e, log_ndtr, modified_bessel_i0,
                          modified_bessel_i1, modified_bessel_k0, modified_bessel_k1, multigammaln,
                          ndtri, polygamma, psi, scaled_modified_bessel_k0,
                          scaled_modified_bessel_k1, sinc, spherical_bessel_j0, xlog1py, xlogy, zeta)
from .ops._family import _as_tensor, _promote_float
from .ops.creation import ones_like, zeros_like

expit = sigmoid
_RSQRT2 = 1 / math.sqrt(2.0)


def ndtr(input):
    """Standard normal CDF, ``erfc(-x / sqrt(2)) / 2`` (accurate in both tails).

    Parameters
    ----------
    input : Tensor
        Any shape.

    Examples
    --------
    >>> import lucid
    >>> lucid.special.ndtr(lucid.tensor([0.0])).item()
    0.5
    """
    return erfc(-_promote_float(input) * _RSQRT2) * 0.5


# ----------------------------------------------------------- orthogonal polynomials
# NOTE [Polynomial recurrences]
# P_0 and P_1 are given, P_{k+1} = step(k, x, P_k, P_{k-1}); a negative degree gives 0 (as
# in PyTorch). An integer-tensor ``n`` is evaluated up to max(n) and each element picks
# its degree, so ``n`` broadcasts against ``x`` like PyTorch's second argument.

def _poly(name, p1, step, shift=False):
    def fn(input, n):
        x = _promote_float(input)
        if isinstance(n, Tensor):  # a tensor degree takes part in type promotion, as in PyTorch
            dt = result_type(input, n)
            if dt.kind in "fc" and dt != x.dtype:
                x = x.to(dt)
        if shift:
            x = x * 2 - 1
        if isinstance(n, Tensor):
            return _poly_tensor_n(name, x, n, p1, step)
        if isinstance(n, bool) or not isinstance(n, (int, np.integer, float)) or n != int(n):
            raise TypeError(f"special.{name}: n must be an integer (or an integer tensor), got {n!r}")
        return _poly_int(x, int(n), p1, step)

    fn.__name__ = fn.__qualname__ = name
    return fn


def _poly_int(x, n, p1, step):
    # P_0 = 1 and P_{n<0} = 0 everywhere, also where x is inf or nan (as PyTorch): not x * 0 + 1
    if n < 0:
        return zeros_like(x)
    prev, cur = ones_like(x), p1(x)
    if n == 0:
        return prev
    for k in range(1, n):
        prev, cur = cur, step(k, x, cur, prev)
    return cur


def _poly_tensor_n(name, x, n, p1, step):
    if n.__class__ is Tensor and n.requires_grad:
        raise RuntimeError(f"special.{name}: not differentiable with respect to n (the degree)")
    n = n.detach()
    degrees = (n if n.dtype.kind in "biu" else n.trunc()).to(dtype=np.int64, device=x.device)
    top = _highest_degree(n)
    out = zeros_like(x) + degrees.to(x.dtype) * 0  # the broadcast shape; 0 for negative degrees
    prev, cur = None, ones_like(x)
    for k in range(top + 1):
        if k == 1:
            prev, cur = cur, p1(x)
        elif k > 1:
            prev, cur = cur, step(k - 1, x, cur, prev)
        out = where(degrees == k, cur, out)
    return out


def _highest_degree(n):
    """The largest degree in ``n`` (-1 if empty), which bounds the recurrence.

    Read on the host, once. Under a transform ``n`` is a tracer: the bound is taken over the
    whole value beneath it (every example of a vmap), so each example still picks its own degree
    with ``where`` and the recurrence runs as transformable ops (NOTE [Polynomial recurrences]).
    """
    while getattr(n, "_level", 0):
        n = n._inner_value()
    arr = host(n._data)
    return int(np.trunc(arr).max()) if arr.size else -1


def _two_x_minus(k, x, cur, prev):
    return x * 2 * cur - prev


chebyshev_polynomial_t = _poly("chebyshev_polynomial_t", lambda x: x, _two_x_minus)
chebyshev_polynomial_u = _poly("chebyshev_polynomial_u", lambda x: x * 2, _two_x_minus)
chebyshev_polynomial_v = _poly("chebyshev_polynomial_v", lambda x: x * 2 - 1, _two_x_minus)
chebyshev_polynomial_w = _poly("chebyshev_polynomial_w", lambda x: x * 2 + 1, _two_x_minus)
shifted_chebyshev_polynomial_t = _poly("shifted_chebyshev_polynomial_t", lambda x: x, _two_x_minus, True)
shifted_chebyshev_polynomial_u = _poly("shifted_chebyshev_polynomial_u", lambda x: x * 2, _two_x_minus, True)
shifted_chebyshev_polynomial_v = _poly("shifted_chebyshev_polynomial_v", lambda x: x * 2 - 1, _two_x_minus, True)
shifted_chebyshev_polynomial_w = _poly("shifted_chebyshev_polynomial_w", lambda x: x * 2 + 1, _two_x_minus, True)
hermite_polynomial_h = _poly("hermite_polynomial_h", lambda x: x * 2,
                             lambda k, x, cur, prev: x * 2 * cur - prev * (2 * k))
hermite_polynomial_he = _poly("hermite_polynomial_he", lambda x: x,
                              lambda k, x, cur, prev: x * cur - prev * k)
laguerre_polynomial_l = _poly("laguerre_polynomial_l", lambda x: 1 - x,
                              lambda k, x, cur, prev: ((2 * k + 1 - x) * cur - prev * k) / (k + 1))
legendre_polynomial_p = _poly("legendre_polynomial_p", lambda x: x,
                              lambda k, x, cur, prev: (x * (2 * k + 1) * cur - prev * k) / (k + 1))

_POLY_DOC = """{title} of degree ``n`` at ``input`` (three-term recurrence).

Differentiable in ``input``; ``n`` is an integer (or an integer tensor that broadcasts with
``input``) and has no derivative. A negative degree gives 0.

Parameters
----------
input : Tensor
    The points.
n : int or Tensor
    The degree.

Examples
--------
>>> import lucid
>>> lucid.special.{name}(lucid.tensor([0.5], dtype=lucid.float64), 2).tolist()
[{value}]
"""
for _fn, _title, _value in [
    (chebyshev_polynomial_t, "Chebyshev polynomial of the first kind T_n", -0.5),
    (chebyshev_polynomial_u, "Chebyshev polynomial of the second kind U_n", 0.0),
    (chebyshev_polynomial_v, "Chebyshev polynomial of the third kind V_n", -1.0),
    (chebyshev_polynomial_w, "Chebyshev polynomial of the fourth kind W_n", 1.0),
    (shifted_chebyshev_polynomial_t, "Shifted Chebyshev polynomial T*_n(x) = T_n(2x - 1)", -1.0),
    (shifted_chebyshev_polynomial_u, "Shifted Chebyshev polynomial U*_n(x) = U_n(2x - 1)", -1.0),
    (shifted_chebyshev_polynomial_v, "Shifted Chebyshev polynomial V*_n(x) = V_n(2x - 1)", -1.0),
    (shifted_chebyshev_polynomial_w, "Shifted Chebyshev polynomial W*_n(x) = W_n(2x - 1)", -1.0),
    (hermite_polynomial_h, "Physicists' Hermite polynomial H_n", -1.0),
    (hermite_polynomial_he, "Probabilists' Hermite polynomial He_n", -0.75),
    (laguerre_polynomial_l, "Laguerre polynomial L_n", 0.125),
    (legendre_polynomial_p, "Legendre polynomial P_n", -0.125),
]:
    _fn.__doc__ = _POLY_DOC.format(title=_title, name=_fn.__name__, value=_value)

__all__ = [
    "airy_ai", "bessel_j0", "bessel_j1", "bessel_y0", "bessel_y1", "betainc", "betaincinv", "chebyshev_polynomial_t", "chebyshev_polynomial_u",
    "chebyshev_polynomial_v", "chebyshev_polynomial_w", "digamma", "entr", "erf", "erfc", "erfcx", "erfinv",
    "exp2", "expit", "expm1", "gammainc", "gammaincc", "gammaln", "hermite_polynomial_h", "hermite_polynomial_he", "i0", "i0e", "i1",
    "i1e", "laguerre_polynomial_l", "legendre_polynomial_p", "log1p", "log_ndtr", "log_softmax", "logit",
    "logsumexp", "modified_bessel_i0", "modified_bessel_i1", "modified_bessel_k0", "modified_bessel_k1",
    "multigammaln", "ndtr", "ndtri", "polygamma", "psi", "round", "scaled_modified_bessel_k0",
    "scaled_modified_bessel_k1", "shifted_chebyshev_polynomial_t", "shifted_chebyshev_polynomial_u",
    "shifted_chebyshev_polynomial_v", "shifted_chebyshev_polynomial_w", "sinc", "softmax",
    "spherical_bessel_j0", "xlog1py", "xlogy", "zeta",
]


from .ops.out_arguments import SPECIAL as _OUT_NAMES, accept_out as _accept_out  # noqa: E402

_accept_out(globals(), _OUT_NAMES)  # PyTorch's out= (NOTE [Out arguments])
