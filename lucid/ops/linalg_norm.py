"""The scaled vector p-norm primitive behind ``linalg.vector_norm`` / ``norm`` (p = 2 and any real p).

NOTE [Scaled norms]
``sum(|x|**p) ** (1/p)`` overflows for ``[1e200, 1e200]`` and underflows to 0 for
``[1e-200, 1e-200]``. As LAPACK's ``nrm2`` and ``hypot`` do, the forward divides by a power
of two near ``max|x|`` (``min|x|`` for p < 0, whose norm the smallest entry dominates),
which is exact, sums the bounded terms and scales back: correct to a few ulps over the
whole float range. The derivative is ``sign(x) (|x| / ||x||) ** (p - 1)``, formed from the
ratio so it cannot overflow either, and is 0 where ``x == 0`` or ``||x|| == 0`` (PyTorch's
values: no NaN at the zero vector for any p).
"""
from __future__ import annotations

import numpy as np

from .._core.backend import xp
from .._core.primitive import defprim
from ._family import batch_unary_axis
from .elementwise._half import F16, F32


def _pow2_scale(ax, axis, p):
    """A power of two <= max|x| (p > 0) or min|x| (p < 0) over ``axis`` (kept); 1 where 0/inf/nan."""
    with np.errstate(all="ignore"):
        if ax.size == 0:  # an empty reduction: max|x| = 0, min|x| = inf (CuPy's max/min take no `initial`)
            ref = xp.sum(ax, axis=axis, keepdims=True) + (0.0 if p > 0 else np.inf)
        elif p > 0:
            ref = xp.max(ax, axis=axis, keepdims=True)
        else:
            ref = xp.min(ax, axis=axis, keepdims=True)
    ok = np.isfinite(ref) & (ref > 0)
    _, e = np.frexp(np.where(ok, ref, 1))
    return np.where(ok, np.ldexp(np.ones_like(ref), e - 1), 1).astype(ax.dtype, copy=False)


def _vnorm_impl(x, ord, axis, keepdims):
    if x.dtype == F16:  # in float32, rounded once (NOTE [Half primitives])
        return _vnorm_impl(x.astype(F32), ord, axis, keepdims).astype(F16)
    ax = xp.abs(x)
    s = _pow2_scale(ax, axis, ord)
    with np.errstate(all="ignore"):
        y = ax / s
        if ord == 2:
            r = xp.sqrt(xp.sum(y * y, axis=axis, keepdims=True))
        else:
            r = xp.sum(y ** ord, axis=axis, keepdims=True) ** (1.0 / ord)
        r = r * s
    return xp.asarray(r if keepdims else xp.squeeze(r, axis=axis))


def _kept(ns, v, x, axis, keepdims):
    """``v`` (reduced over ``axis``) with the reduced dims kept as size 1, to broadcast against ``x``."""
    if keepdims:
        return v
    shape = tuple(1 if i in axis else n for i, n in enumerate(x.shape))
    return ns.reshape(v, shape=shape)


def _vnorm_deriv(ns, x, out, ord, axis, keepdims):
    n = _kept(ns, out, x, axis, keepdims)
    safe = ns.where(n == 0, 1.0, n)  # for p > 0, n == 0 only where every x == 0: the result is 0
    if ord == 2:
        return x / safe
    # sgn(0) = 0 zeroes the entries where x == 0; their base is set to 1 so p < 1 makes no inf
    ax = ns.where(x == 0, 1.0, ns.abs(x))
    sgn = x / ax if x.dtype.kind == "c" else ns.sign(x)  # complex: x / |x| (PyTorch's sgn)
    d = sgn * (ax / safe) ** (ord - 1)
    return d if ord > 0 else ns.where(n == 0, 0.0, d)  # p < 0: one zero entry makes the norm 0


def _half_vnorm_vjp(ns, g, x, n, ord):
    """PyTorch's float16 norm_backward, op for op (each rounds): ``grad * (x / norm)`` for p = 2,
    ``x * |x|**(p - 2) * (grad / norm**(p - 1))`` (``sgn(x) * |x|**(p - 1)`` for p < 2), 0 where
    the norm is 0. See NOTE [Half primitives]."""
    zero = n == 0
    if ord == 2:
        return g * ns.where(zero, 0.0, x / n)
    scaled = x * ns.abs(x) ** (ord - 2) if ord >= 2 else ns.sign(x) * ns.abs(x) ** (ord - 1)
    return scaled * ns.where(zero, 0.0, g / n ** (ord - 1))


def _vnorm_vjp(ns, g, out, x, ord, axis, keepdims):
    if g.dtype == F16 and ord >= 1:
        return _half_vnorm_vjp(ns, _kept(ns, g, x, axis, keepdims), x, _kept(ns, out, x, axis, keepdims), ord)
    return _kept(ns, g, x, axis, keepdims) * _vnorm_deriv(ns, x, out, ord, axis, keepdims)


def _vnorm_jvp(ns, primals, tangents, out, ord, axis, keepdims):
    d = _vnorm_deriv(ns, primals[0], out, ord, axis, keepdims)
    td = ns.real(ns.conj(d) * tangents[0]) if d.dtype.kind == "c" else tangents[0] * d
    return ns.sum(td, axis=axis, keepdims=keepdims)


vector_norm_p = defprim("linalg_vector_norm", _vnorm_impl, vjp=(_vnorm_vjp,), jvp=_vnorm_jvp, save_out=True)
vector_norm_p.batch = batch_unary_axis(vector_norm_p)

__all__: list = []
