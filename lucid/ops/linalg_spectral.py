"""Spectral decompositions: the ``eigh``, ``svd`` and ``svdvals`` primitives behind
:mod:`lucid.linalg` (the general ``eig`` is in ``linalg_eig``), each with its vjp, jvp and
batching rule.
"""
from __future__ import annotations

import math

import numpy as np

from .._core.backend import xp
from .._core.primitive import defprim
from .linalg_decomp import _batch_front, _col, _diag, _diag_embed, _eye, _lapack, _mH, _offdiag, _row


# NOTE [Spectral ties]
# The eigh / svd / eig rules divide by gaps E[i, j] = L[j] - L[i] (S[j]^2 - S[i]^2 for svd; the
# diagonal divides by 1), and tall / wide svd also by S. At an exactly repeated eigen- or singular
# value (or S = 0 there) a gap is 0 and we do what PyTorch does, whose documentation says these
# gradients are then undefined: x / 0 = +-inf and 0 / 0 = nan (nan for complex), which the
# products with V spread into inf/nan; never an exception and never a finite wrong value. PyTorch
# skips the terms of an output whose cotangent is undefined (not used by the loss); the engine
# here passes zeros for it instead, so a term is skipped where its cotangent is exactly zero for
# the whole matrix. So a loss of the eigen- / singular values alone keeps its exact, finite
# gradient V diag(gL) V^H at ties, as in PyTorch, and any loss of the vectors is inf/nan there,
# as in PyTorch, even one invariant under rotations inside the eigenspace (a projector U U^T): its
# gradient exists, but the rule cannot tell it from an ill-defined one. The divisions select
# instead of dividing by 0, so no floating-point warnings are raised.
def _tdiv(ns, num, den):
    """``num / den`` with IEEE results at ``den == 0`` (+-inf, 0/0 = nan; nan for complex), warning-free."""
    zero = den == 0
    q = num / ns.where(zero, 1.0, den)
    if q.dtype.kind == "c":
        return ns.where(zero, math.nan, q)
    blow = q * ns.where(ns.logical_and(zero, q != 0), math.inf, ns.ones_like(q))  # never 0 * inf
    return ns.where(ns.logical_and(zero, q == 0), math.nan, blow)


def _gap_div(ns, num, v):
    """``num / E``, ``E[i, j] = v[j] - v[i]`` off the diagonal and 1 on it (NOTE [Spectral ties])."""
    return _tdiv(ns, num, _row(ns, v) - _col(ns, v) + _eye(v))


def _unused(ns, g):
    """Per matrix (kept as (..., 1, 1)): is the cotangent ``g`` all zero (its output unused)?"""
    nd = len(g.shape)
    return ns.sum(ns.abs(g), axis=(nd - 2, nd - 1), keepdims=True) == 0


def _skip(ns, unused, term):
    """``term``, or 0 for the matrices whose cotangent was unused (PyTorch skips the term)."""
    return ns.where(unused, 0.0, term)


# eigh (symmetric, lower triangle read): A = V diag(L) V^T,
#   vjp: gA = V (diag(gL) + skew(V^T gV) / E) V^T,  E[i, j] = L[j] - L[i], skew(X) = (X - X^T)/2
#   jvp: P = V^T dA V; dL = diag(P); dV = V (P / E off the diagonal)
def _eigh_vjp(ns, g, out, a):
    (gl, gv), (lam, v) = g, out
    vt = _mH(ns, v)
    vgv = ns.matmul(vt, gv)
    mix = _skip(ns, _unused(ns, gv), _gap_div(ns, (vgv - _mH(ns, vgv)) * 0.5, lam))
    inner = mix + _diag_embed(ns, gl)
    return ns.matmul(v, ns.matmul(inner, vt))


def _eigh_jvp(ns, primals, tangents, out):
    lam, v = out
    p = ns.matmul(_mH(ns, v), ns.matmul(tangents[0], v))
    f = _gap_div(ns, p * _offdiag(p), lam)
    d = _diag(ns, p)
    return (ns.real(d) if d.dtype.kind == "c" else d), ns.matmul(v, f)


eigh_p = defprim("linalg_eigh", lambda a: tuple(xp.linalg.eigh(a)),
                 vjp=(_eigh_vjp,), jvp=_eigh_jvp, nout=2, save_inputs=False, save_out=True)
eigh_p.batch = _batch_front(eigh_p)


# svd (reduced): A = U diag(S) Vh, k = min(m, n).  E[i, j] = S[j]^2 - S[i]^2.
#   vjp (PyTorch's svd_backward, real case), with skew(X) = X - X^T:
#     inner = (skew(U^T gU) S_j + S_i skew(V^T gV)) / E + diag(gS)
#     m > k: gA = [U inner + (I - U U^T) gU / S] Vh;  n > k: gA = U [inner Vh + gVh/S (I - V V^T)]
#   jvp: P = U^T dA V, dS = diag(P), dU = U (F o (P S + S P^T)) + (I - U U^T) dA V / S,
#        dV = V (F o (S P + P^T S)) + (I - V V^T) dA^T U / S,  F = 1/E off the diagonal.
def _first(n, k, like):
    """Constant selection (n, k): ``X @ S`` keeps the first k columns, ``T @ S^T`` pads them back with zeros."""
    return _eye(like, n)[:, :k]


def _narrow(ns, u, vh, m, n, k):
    """U[..., :k] and Vh[..., :k, :] of full factors (non-square A with full_matrices=True)."""
    if m > k:
        u = ns.matmul(u, _first(m, k, u))
    if n > k:
        vh = ns.matmul(_first(n, k, vh).T, vh)
    return u, vh


# full_matrices=True with a non-square A (PyTorch 2.13's rules): the extra columns of U (rows of
# Vh) are an arbitrary basis of a complement, so the vjp ignores their cotangent and the jvp gives
# them a zero tangent; the first k are the reduced factors and use the rules above.
def _svd_vjp(ns, g, out, a, full_matrices=False):
    (gu, gs, gvh), (u, s, vh) = g, out
    m, n = a.shape[-2:]
    k = min(m, n)
    if full_matrices and m != n:
        u, vh = _narrow(ns, u, vh, m, n, k)
        gu, gvh = _narrow(ns, gu, gvh, m, n, k)
    ut = _mH(ns, u)
    ugu = ns.matmul(ut, gu)
    vgv = ns.matmul(vh, _mH(ns, gvh))
    skew_u = ugu - _mH(ns, ugu)
    no_u, no_v = _unused(ns, gu), _unused(ns, gvh)
    mix = _gap_div(ns, skew_u * _row(ns, s) + _col(ns, s) * (vgv - _mH(ns, vgv)), s * s)
    inner = _skip(ns, ns.logical_and(no_u, no_v), mix) + _diag_embed(ns, gs)
    if u.dtype.kind == "c":  # the phase term: diag(U^H gU - (U^H gU)^H) / (2 S) (PyTorch's)
        from .linalg_eig import phase_check

        phase_check("svd", ns.imag(_diag(ns, ugu)) + ns.imag(_diag(ns, vgv)), "singular vectors")
        inner = inner + _skip(ns, no_u, _diag_embed(ns, _tdiv(ns, _diag(ns, skew_u), s * 2)))
    if m > k:
        gus = _tdiv(ns, gu, _row(ns, s))
        return ns.matmul(ns.matmul(u, inner) + _skip(ns, no_u, gus - ns.matmul(u, ns.matmul(ut, gus))), vh)
    if n > k:
        sgv = _tdiv(ns, gvh, _col(ns, s))
        return ns.matmul(u, ns.matmul(inner, vh) + _skip(ns, no_v, sgv - ns.matmul(ns.matmul(sgv, _mH(ns, vh)), vh)))
    return ns.matmul(u, ns.matmul(inner, vh))


def _svd_jvp(ns, primals, tangents, out, full_matrices=False):
    a, (ta,), (u, s, vh) = primals[0], tangents, out
    m, n = a.shape[-2:]
    k = min(m, n)
    full = full_matrices and m != n
    if full:
        u, vh = _narrow(ns, u, vh, m, n, k)
    v, ut = _mH(ns, vh), _mH(ns, u)
    dav = ns.matmul(ta, v)
    p = ns.matmul(ut, dav)
    off = _offdiag(p)
    pt = _mH(ns, p)
    # the constant mask on the right: an array on the left of a tracer would take the product
    # into its own array type (CuPy's, the strict stand-in's) and ask the tracer for its data
    du = ns.matmul(u, _gap_div(ns, (p * _row(ns, s) + _col(ns, s) * pt) * off, s * s))
    dv = ns.matmul(v, _gap_div(ns, (_col(ns, s) * p + pt * _row(ns, s)) * off, s * s))
    dp = _diag(ns, p)
    if p.dtype.kind == "c":  # the phase term, the adjoint of the vjp's (PyTorch's choice of gauge)
        im = _tdiv(ns, ns.imag(dp), s)
        du = du + u * _row(ns, ns.complex(ns.zeros_like(im), im))
        dp = ns.real(dp)
    if m > k:
        du = du + _tdiv(ns, dav - ns.matmul(u, p), _row(ns, s))
    if n > k:
        datu = ns.matmul(_mH(ns, ta), u)
        dv = dv + _tdiv(ns, datu - ns.matmul(v, ns.matmul(vh, datu)), _row(ns, s))
    dvh = _mH(ns, dv)
    if full:  # zero tangents for the extra columns of U / rows of Vh
        if m > k:
            du = ns.matmul(du, _first(m, k, du).T)
        if n > k:
            dvh = ns.matmul(_first(n, k, dvh), dvh)
    return du, dp, dvh


svd_p = defprim("linalg_svd", _lapack("svd", lambda a, full_matrices=False: tuple(xp.linalg.svd(
                    a, full_matrices=full_matrices))),
                vjp=(_svd_vjp,), jvp=_svd_jvp, nout=3, save_out=True)
svd_p.batch = _batch_front(svd_p)


# svdvals: its own primitive so that norms built on it never divide by gaps of
# (possibly repeated) singular values: gA = U diag(g) Vh.
def _svdvals_vjp(ns, g, out, a):
    u, _, vh = ns.linalg_svd(a)
    return ns.matmul(u, _col(ns, g) * vh)


def _svdvals_jvp(ns, primals, tangents, out):
    u, _, vh = ns.linalg_svd(primals[0])
    d = _diag(ns, ns.matmul(_mH(ns, u), ns.matmul(tangents[0], _mH(ns, vh))))
    return ns.real(d) if d.dtype.kind == "c" else d


svdvals_p = defprim("linalg_svdvals", _lapack("svd", lambda a: xp.linalg.svd(a, compute_uv=False)),
                    vjp=(_svdvals_vjp,), jvp=_svdvals_jvp)
svdvals_p.batch = _batch_front(svdvals_p)
