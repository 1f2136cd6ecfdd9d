"""The general (non-symmetric) eigendecomposition primitive behind ``linalg.eig`` / ``eigvals``.

NOTE [eig rules]
A V = V diag(L), V's columns of unit norm (LAPACK's geev), complex outputs always (as
PyTorch: float32 -> complex64). Rules as PyTorch's ``linalg_eig_backward`` / ``_jvp``:
  jvp:  dP = V^-1 dA V;  dL = diag(dP);  dV = V (dP / E off the diagonal), E_ij = L_j - L_i,
        then dV -= V diag(re(V^H dV)) (the derivative of the unit-norm normalisation);
  vjp:  M = V^H gV - V^H V diag(re(diag(V^H gV)));  gA = V^-H (M / conj(E) off the diagonal
        + diag(gL)) V^H, and its real part for a real A (a real input gets a real gradient).
Repeated eigenvalues make E vanish: the gradient is then inf/nan, as in PyTorch, which
documents eig's gradient as well defined only for distinct eigenvalues (NOTE [Spectral ties]:
a loss of the eigenvalues alone keeps its finite gradient there). A loss that
depends on the phase of the eigenvectors (which geev fixes arbitrarily) is ill-defined.
"""
from __future__ import annotations

import numpy as np

from .._core.backend import namespace_of, xp
from .._core.primitive import defprim
from .linalg import _mH
from .linalg_decomp import _batch_front, _col, _diag, _diag_embed, _eye, _lapack, _offdiag, _row
from .linalg_spectral import _skip, _tdiv, _unused

_COMPLEX = {np.dtype(np.float32): np.dtype(np.complex64), np.dtype(np.float64): np.dtype(np.complex128),
            np.dtype(np.complex64): np.dtype(np.complex64), np.dtype(np.complex128): np.dtype(np.complex128)}


def complex_dtype(dt):
    return _COMPLEX.get(np.dtype(dt), np.dtype(np.complex128))


def _eig_impl(a):
    cd = complex_dtype(a.dtype)
    if a.size == 0:
        n = a.shape[-1]
        mod = namespace_of(a)
        return mod.zeros(a.shape[:-1], cd), mod.zeros(a.shape[:-2] + (n, n), cd)
    w, v = xp.linalg.eig(a)
    return w.astype(cd, copy=False), v.astype(cd, copy=False)


def _gap(ns, lam):
    """``E[i, j] = L[j] - L[i]`` with the diagonal set to 1."""
    return (_row(ns, lam) - _col(ns, lam)) * _offdiag(lam) + _eye(lam)


def _as_complex(ns, x, like):
    return x if x.dtype == like.dtype else ns.cast(x, dtype=like.dtype)


def phase_check(op, imag_diag, what):
    """PyTorch's check that a loss does not depend on the arbitrary phase of complex vectors.

    Done on the eager backward's arrays (under transforms the values are symbolic).
    """
    if isinstance(imag_diag, np.ndarray) and not np.allclose(imag_diag, 0, rtol=1e-2, atol=1e-2):
        raise RuntimeError(f"{op}_backward: The {what} in the complex case are specified up to multiplication "
                           f"by e^{{i phi}}. The specified loss function depends on this phase term, making it "
                           f"ill-defined.")


def _eig_vjp(ns, g, out, a):
    (gl, gv), (lam, v) = g, out
    vh = _mH(ns, v)
    vhgv = ns.matmul(vh, gv)
    phase_check("linalg_eig", ns.imag(_diag(ns, vhgv)), "eigenvectors")
    re_diag = ns.real(_diag(ns, vhgv))
    m = vhgv - ns.matmul(vh, v * _row(ns, _as_complex(ns, re_diag, v)))
    mix = _skip(ns, _unused(ns, gv), _tdiv(ns, m * _offdiag(lam), ns.conj(_gap(ns, lam))))
    inner = mix + _diag_embed(ns, gl)
    ga = ns.linalg_solve(vh, ns.matmul(inner, vh))
    return ga if a.dtype.kind == "c" else ns.real(ga)


def _eig_jvp(ns, primals, tangents, out):
    lam, v = out
    da = _as_complex(ns, tangents[0], v)
    dp = ns.linalg_solve(v, ns.matmul(da, v))
    dv = ns.matmul(v, _tdiv(ns, dp * _offdiag(lam), _gap(ns, lam)))
    norm = ns.real(_diag(ns, ns.matmul(_mH(ns, v), dv)))
    dv = dv - v * _row(ns, _as_complex(ns, norm, v))
    return _diag(ns, dp), dv


eig_p = defprim("linalg_eig", _lapack("eig", _eig_impl), vjp=(_eig_vjp,), jvp=_eig_jvp, nout=2, save_inputs=False, save_out=True)
eig_p.batch = _batch_front(eig_p)

__all__: list = []


# ------------------------------------------------------------------------- pinv

# NOTE [pinv rules]
# pinv is its own primitive so its derivative never divides by gaps between singular values
# (pinv(I) has a repeated one). With X = A+ (valid where the rank is locally constant):
#   dX = -X dA X + X X^H dA^H (I - A X) + (I - X A) dA^H X^H X      (Golub and Pereyra)
# and the vjp is its adjoint (PyTorch's pinv_backward, arranged for the smaller of m, n).
def _pinv_impl(a, atol, rtol, hermitian):
    if a.size == 0:
        return namespace_of(a).zeros(a.shape[:-2] + a.shape[-2:][::-1], a.dtype)
    if hermitian:
        w, v = xp.linalg.eigh(a)
        s = np.abs(w)
    else:
        u, s, vh = xp.linalg.svd(a, full_matrices=False)
    cut = np.maximum(atol, rtol * s.max(-1, keepdims=True))
    keep = s > cut
    if hermitian:
        winv = np.where(keep, 1 / np.where(keep, w, 1), 0).astype(a.dtype)
        return (v * winv[..., None, :]) @ np.conj(np.swapaxes(v, -1, -2))
    sinv = np.where(keep, 1 / np.where(keep, s, 1), 0).astype(s.dtype)
    return (np.conj(np.swapaxes(vh, -1, -2)) * sinv[..., None, :]) @ np.conj(np.swapaxes(u, -1, -2))


def _pinv_vjp(ns, g, out, a, atol, rtol, hermitian):
    m, n = a.shape[-2:]
    x, xh, gh = out, _mH(ns, out), _mH(ns, g)
    if m <= n:
        k = ns.matmul(gh, x)
        kxh = ns.matmul(k, xh)
        res = (-_mH(ns, ns.matmul(x, k)) + kxh - ns.matmul(ns.matmul(a, x), kxh)
               + ns.matmul(ns.matmul(xh, x), gh - ns.matmul(k, a)))
    else:
        k = ns.matmul(x, gh)
        xhk = ns.matmul(xh, k)
        res = (-_mH(ns, ns.matmul(k, x)) + ns.matmul(ns.matmul(gh - ns.matmul(a, k), x), xh) + xhk
               - ns.matmul(ns.matmul(xhk, x), a))
    return res


def _pinv_jvp(ns, primals, tangents, out, atol, rtol, hermitian):
    a, da, x = primals[0], tangents[0], out
    dah, xh = _mH(ns, da), _mH(ns, x)
    r = -ns.matmul(x, ns.matmul(da, x))
    r = r + ns.matmul(ns.matmul(x, xh), dah - ns.matmul(dah, ns.matmul(a, x)))
    return r + ns.matmul(dah - ns.matmul(x, ns.matmul(a, dah)), ns.matmul(xh, x))


pinv_p = defprim("linalg_pinv", _lapack("pinv", _pinv_impl), vjp=(_pinv_vjp,), jvp=_pinv_jvp, save_out=True)
pinv_p.batch = _batch_front(pinv_p)
