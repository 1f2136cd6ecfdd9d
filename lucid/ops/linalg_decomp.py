"""Matrix decompositions and inverses: the primitives behind :mod:`lucid.linalg`'s ``inv``,
``det``, ``slogdet``, ``solve``, ``cholesky`` and ``qr`` (and the adjugate behind det/slogdet),
plus the rule helpers the other ``linalg_*`` modules share. Each has its vjp (in ``ns`` ops, so
it differentiates again), jvp and batching rule; all act on the last two dims and map over any
leading dims, so batching moves the batch dim to the front.
"""
from __future__ import annotations

import numpy as np

from .._core.backend import namespace_of, xp
from .._core.primitive import AN, bind, defprim
from ._family import move_bdim, sum_to_shape
from .linalg import _ein, _mH, _mT, batch_leading

# ------------------------------------------------------------- decompositions
# Rule helpers (all in ``ns`` ops). ``row(v)`` is v[..., None, :], ``col(v)`` v[..., :, None].

def _row(ns, v):
    s = tuple(v.shape)
    return ns.reshape(v, shape=s[:-1] + (1, s[-1]))


def _col(ns, v):
    s = tuple(v.shape)
    return ns.reshape(v, shape=s + (1,))


def _diag(ns, x):
    return _ein(ns, "~ii->~i", x)


def _diag_embed(ns, v):
    return _ein(ns, "~i,ij->~ij", v, _eye(v))


# Constants of rules and impls are made on their operand's device (NOTE [Backends]): ``like``
# is an operand (array, Tensor or tracer) giving the namespace and the dtype.
def _eye(like, n=None):
    """Identity of ``like``'s dtype and device, ``n`` x ``n`` (default: ``like``'s last dim)."""
    return namespace_of(like).eye(like.shape[-1] if n is None else n, dtype=like.dtype)


def _tril_mask(like, diag=1.0, k=0):
    """Constant lower-triangular mask (``diag`` on the diagonal) of ``like``'s last dim, for rules."""
    n = like.shape[-1]
    mod = namespace_of(like)
    m = mod.tril(mod.ones((n, n), dtype=like.dtype), k)
    if k == 0 and diag != 1.0:
        m = m + (diag - 1.0) * mod.eye(n, dtype=like.dtype)
    return m


def _gap(ns, v):
    """``E[i, j] = v[j] - v[i]`` with exact zeros replaced by 1 (the diagonal, ties)."""
    e = _row(ns, v) - _col(ns, v)
    return ns.where(e == 0, 1.0, e)


def _offdiag(like):
    """Ones off the diagonal (``like``'s last dim, dtype and device)."""
    n = like.shape[-1]
    mod = namespace_of(like)
    return mod.ones((n, n), dtype=like.dtype) - mod.eye(n, dtype=like.dtype)


def _batch_front(prim):
    """Batching rule of ops mapped over all leading dims: move the batch dim to the front."""

    def rule(vals, bdims, **params):
        return bind(prim, (move_bdim(vals[0], bdims[0], 0),), params), 0

    return rule


class LinAlgError(RuntimeError, np.linalg.LinAlgError):
    """A matrix the operation cannot handle: singular, not positive-definite (``torch.linalg.LinAlgError``).

    A ``RuntimeError``, as PyTorch's, so ``except RuntimeError`` keeps working; also NumPy's
    ``LinAlgError`` (a ``ValueError``), which some ops raised before they reported failures here.
    """


LinAlgError.__module__ = "lucid.linalg"


def _lapack(name, fn):
    """Forward that reports LAPACK failures (singular, not positive-definite) clearly."""

    def impl(*arrays, **params):
        try:
            return fn(*arrays, **params)
        except np.linalg.LinAlgError as e:
            raise LinAlgError(f"the input is {_reason(name, e)}") from None

    return impl


def _reason(name, e):
    if name == "cholesky":
        return "not positive-definite; cholesky needs a symmetric positive-definite matrix"
    if "infs or NaNs" in str(e):
        return "not finite: it should not contain infs or NaNs"
    if "Singular" in str(e):
        return "singular (not invertible)"
    return f"not supported by LAPACK ({e})"


# inv: d(A^-1) = -A^-1 dA A^-1
inv_p = defprim(
    "linalg_inv", _lapack("inv", lambda a: xp.linalg.inv(a)),
    vjp=(lambda ns, g, out, a: -ns.matmul(_mH(ns, out), ns.matmul(g, _mH(ns, out))),),
    jvp=lambda ns, primals, tangents, out: -ns.matmul(out, ns.matmul(tangents[0], out)),
    save_inputs=False, save_out=True,
)
inv_p.batch = _batch_front(inv_p)


# NOTE [Adjugate]
# det and slogdet differentiate through the adjugate adj(A) (= det(A) A^-1 when A is
# invertible, and finite, polynomial in A, when it is not): d det = tr(adj(A) dA). The
# forward is det * inv when LU succeeds, else the SVD: with A = U S V^H (c = det U det V^H),
# adj(A) = c V adj(S) U^H, adj(S) = diag(prod_{l != i} s_l). Its derivative, from the
# same factorisation with F = U^H dA V: d adj = c V D(F) U^H, where
#   D(F) = diag_k(sum_{i != k} F_ii P_ik) - F o P,   P_ik = prod_{l not in {i, k}} s_l (P_ii = 0);
# D is self-adjoint, so the vjp is U D(conj(c) V^H G U) V^H. Both are finite at singular A, so
# det's gradient, jvp and second derivatives are too (PyTorch's double backward is NaN at 0).
def _cofactor_products(ns, s):
    """``P[..., i, k] = prod_{l not in {i, k}} s_l`` (the diagonal: ``prod_{l != i} s_l``)."""
    n = s.shape[-1]
    idx = namespace_of(s).arange(n)
    keep = (idx[None, None, :] != idx[:, None, None]) & (idx[None, None, :] != idx[None, :, None])
    lead = tuple(s.shape[:-1])
    sl = ns.reshape(s, shape=lead + (1, 1, n))
    return ns.prod(ns.where(keep, sl, 1.0), axis=(len(lead) + 2,), keepdims=False)


def _adjugate_impl(a):
    n = a.shape[-1]
    if n == 0:
        return a.copy()
    # On a device the SVD form (valid for every matrix) is used directly: choosing by the LU
    # result's finiteness would read it back to the host on every call.
    if a.__class__ is np.ndarray:
        try:
            with np.errstate(all="ignore"):
                adj = xp.linalg.det(a)[..., None, None] * xp.linalg.inv(a)
            if np.all(np.isfinite(adj)):
                return adj
        except np.linalg.LinAlgError:
            pass
    u, s, vh = xp.linalg.svd(a)
    c = xp.linalg.det(u) * xp.linalg.det(vh)
    c = c if c.dtype.kind == "c" else np.sign(c)
    shat = _diag(AN, _cofactor_products(AN, s))
    return (c[..., None, None] * _mH(AN, vh) * shat[..., None, :]) @ _mH(AN, u)


def _adj_parts(ns, a):
    """U, V^H, c = det(U) det(V^H) (a unit number: +-1 when real) and P of NOTE [Adjugate]."""
    u, s, vh = ns.linalg_svd(a)
    c = ns.linalg_det(u) * ns.linalg_det(vh)
    if c.dtype.kind != "c":
        c = ns.sign(c)  # piecewise constant
    p = _cofactor_products(ns, s) * _offdiag(s)
    return u, vh, _col(ns, _col(ns, c)), p


def _adj_d(ns, f, p):
    """``D(F)`` of NOTE [Adjugate]."""
    dk = ns.matmul(_row(ns, _diag(ns, f)), p)
    return _diag_embed(ns, ns.reshape(dk, shape=tuple(dk.shape[:-2]) + (dk.shape[-1],))) - f * p


def _adjugate_vjp(ns, g, out, a):
    u, vh, c, p = _adj_parts(ns, a)
    if c.dtype.kind == "c":
        c = ns.conj(c)
    return ns.matmul(u, ns.matmul(_adj_d(ns, c * ns.matmul(vh, ns.matmul(g, u)), p), vh))


def _adjugate_jvp(ns, primals, tangents, out):
    u, vh, c, p = _adj_parts(ns, primals[0])
    f = ns.matmul(_mH(ns, u), ns.matmul(tangents[0], _mH(ns, vh)))
    return c * ns.matmul(_mH(ns, vh), ns.matmul(_adj_d(ns, f, p), _mH(ns, u)))


adjugate_p = defprim("linalg_adjugate", _adjugate_impl, vjp=(_adjugate_vjp,), jvp=_adjugate_jvp)
adjugate_p.batch = _batch_front(adjugate_p)


# det: d det(A) = tr(adj(A) dA), finite at singular A. See NOTE [Adjugate].
det_p = defprim(
    "linalg_det", lambda a: xp.asarray(xp.linalg.det(a)),
    vjp=(lambda ns, g, out, a: _col(ns, _col(ns, g)) * _mH(ns, ns.linalg_adjugate(a)),),
    jvp=lambda ns, primals, tangents, out: _ein(ns, "~ij,~ji->~", ns.linalg_adjugate(primals[0]), tangents[0]),
)
det_p.batch = _batch_front(det_p)


def _slogdet_impl(a):
    sign, logabs = xp.linalg.slogdet(a)
    return xp.asarray(sign), xp.asarray(logabs)


def _slogdet_det(ns, out):
    return out[0] * ns.exp(out[1])


# slogdet: with t = tr(adj(A) dA) / det(A): d logabsdet = Re t, d sign = i Im(t) sign (complex
# A; a real sign has no derivative). vjp: (g_logabs - i Im(conj(g_sign) sign)) A^-H, where
# A^-H = adj^H / conj(det): +-inf at singular A (as PyTorch), never an exception.
def _slogdet_vjp(ns, g, out, a):
    coef = g[1]
    det = _slogdet_det(ns, out)
    adj_h = _mH(ns, ns.linalg_adjugate(a))
    if adj_h.dtype.kind == "c":
        det = ns.conj(det)
        if g[0] is not None and g[0].dtype.kind == "c":
            coef = ns.complex(coef, -ns.imag(ns.conj(g[0]) * out[0]))
    return _col(ns, _col(ns, coef / det)) * adj_h


def _slogdet_jvp(ns, primals, tangents, out):
    t = _ein(ns, "~ij,~ji->~", ns.linalg_adjugate(primals[0]), tangents[0]) / _slogdet_det(ns, out)
    if t.dtype.kind != "c":
        return None, t
    im = ns.imag(t)
    return out[0] * ns.complex(ns.zeros_like(im), im), ns.real(t)


slogdet_p = defprim("linalg_slogdet", _slogdet_impl, vjp=(_slogdet_vjp,), jvp=_slogdet_jvp, nout=2, save_out=True)
slogdet_p.batch = _batch_front(slogdet_p)


# solve: X = A^-1 B; gB = A^-T g, gA = -gB X^T. Leading dims broadcast (elementwise batching).
def _solve_impl(a, b):
    batch = np.broadcast_shapes(a.shape[:-2], b.shape[:-2])
    a = xp.broadcast_to(a, batch + a.shape[-2:])
    b = xp.broadcast_to(b, batch + b.shape[-2:])
    return xp.linalg.solve(a, b)


def _solve_gb(ns, g, a):
    return ns.linalg_solve(_mH(ns, a), g)


solve_p = defprim(
    "linalg_solve", _lapack("solve", _solve_impl),
    vjp=(lambda ns, g, out, a, b: sum_to_shape(ns, -ns.matmul(_solve_gb(ns, g, a), _mH(ns, out)), tuple(a.shape)),
         lambda ns, g, out, a, b: sum_to_shape(ns, _solve_gb(ns, g, a), tuple(b.shape))),
    jvp=lambda ns, primals, tangents, out: ns.linalg_solve(
        primals[0], _solve_rhs(ns, tangents, out)),
    save_out=True,
)
solve_p.batch = batch_leading(solve_p)


def _solve_rhs(ns, tangents, out):
    ta, tb = tangents
    rhs = None if ta is None else -ns.matmul(ta, out)
    if tb is not None:
        rhs = tb if rhs is None else rhs + tb
    if tuple(rhs.shape) != tuple(out.shape):
        rhs = ns.broadcast_to(rhs, shape=tuple(out.shape))
    return rhs


# cholesky (lower): gA = sym(L^-H Phi(L^H gL) L^-1), dL = L Phi(L^-1 sym(dA) L^-H), Phi = lower
# triangle with half diagonal, sym(X) = (X + X^H) / 2. Both rules differentiate A -> chol(sym(A)),
# as eigh's do (and JAX's): the gradient is symmetric and a tangent is symmetrized, so that forward
# and reverse mode give one Jacobian (jacfwd == jacrev). PyTorch's jvp takes dA as it is, which for
# a non-symmetric tangent disagrees with its own symmetric gradient. (The forward reads one
# triangle of A; the derivative of that reading would be a triangular gradient instead.)
def _phi(ns, x):
    return x * _tril_mask(x, 0.5)


def cholesky_vjp_rule(ns, g, lo, inv):
    """The cholesky rules for factor ``lo`` with ``inv`` an inverse (also cholesky_ex's, with inv_ex)."""
    linv = inv(lo)
    ga = ns.matmul(_mH(ns, linv), ns.matmul(_phi(ns, ns.matmul(_mH(ns, lo), g)), linv))
    return (ga + _mH(ns, ga)) * 0.5


def cholesky_jvp_rule(ns, ta, lo, inv):
    linv = inv(lo)
    ta = (ta + _mH(ns, ta)) * 0.5
    return ns.matmul(lo, _phi(ns, ns.matmul(linv, ns.matmul(ta, _mH(ns, linv)))))


def _cholesky_vjp(ns, g, out, a):
    return cholesky_vjp_rule(ns, g, out, ns.linalg_inv)


def _cholesky_jvp(ns, primals, tangents, out):
    return cholesky_jvp_rule(ns, tangents[0], out, ns.linalg_inv)


def nan_pivot_info(c):
    """LAPACK's ``potrf`` stops at the first NaN pivot (``DISNAN(AJJ)``), as PyTorch reports it;
    NumPy's and SciPy's OpenBLAS kernels go on with NaN. int32 per matrix: that (1-based)
    column of the factor ``c``, 0 where its diagonal has no NaN."""
    ns = namespace_of(c)
    bad = ns.isnan(ns.diagonal(c, axis1=-2, axis2=-1))
    if bad.shape[-1] == 0:  # 0 x 0 matrices (argmax has nothing to look at)
        return ns.zeros(bad.shape[:-1], np.int32)
    return ns.where(bad.any(-1), bad.argmax(-1) + 1, 0).astype(np.int32)


def _cholesky_checked(a):
    c = xp.linalg.cholesky(a)
    # On the host only: a device's factor stays there (CuPy's cholesky returns NaN for a failed
    # factorization too, as it does for a matrix that is not positive-definite; see README "GPU")
    if c.__class__ is np.ndarray and nan_pivot_info(c).any():
        raise np.linalg.LinAlgError("NaN pivot")
    return c


cholesky_p = defprim("linalg_cholesky", _lapack("cholesky", _cholesky_checked),
                     vjp=(_cholesky_vjp,), jvp=_cholesky_jvp, save_inputs=False, save_out=True)
cholesky_p.batch = _batch_front(cholesky_p)


# qr (reduced; 'complete' equals it when m <= n). For m >= n:
#   vjp: M = R gR^H - gQ^H Q; gA = (gQ + Q copyltu(M)) R^-H, copyltu(M) = tril(M) + tril(M, -1)^H
#   jvp: C = Q^H dA R^-1, W = tril(C, -1) - tril(C, -1)^H; dR = (C - W) R; dQ = dA R^-1 - Q (C - W)
#   (complex: W also takes i Im(diag(C)), keeping R's diagonal real as LAPACK does, and the
#   vjp keeps only Re(diag(M)), its adjoint)
# For m < n (PyTorch's wide case), A = [X | Y] with X = Q R1 square and R2 = Q^T Y: the square
# rules on X with gQ + Y gR2^T, and gY = Q gR2 (jvp: dR2 = Q^T (dY - dQ R2)). The split and the
# concatenation are products with constant selection matrices.
def _qr_check(a, mode):
    m, n = a.shape[-2:]
    if mode == "r":
        raise RuntimeError("linalg.qr: the derivative of linalg.qr depends on Q, which is not computed when "
                           "mode='r'. Please use linalg.qr(A, mode='reduced') if you are going to differentiate "
                           "through linalg.qr.")
    if mode == "complete" and m > n:
        raise RuntimeError(f"linalg.qr: the QR decomposition is not differentiable when mode='complete' and "
                           f"nrows > ncols (got shape {tuple(a.shape)})")


def _right_inv(ns, x, r):
    """``x @ inv(r)`` via a solve: (R^-T x^T)^T."""
    return _mT(ns, ns.linalg_solve(_mT(ns, r), _mT(ns, x)))


def _split(m, n, like):
    """Selection matrices (n, m) and (n, n - m): ``A @ e1`` is A's first m columns."""
    eye = _eye(like, n)
    return eye[:, :m], eye[:, m:]


def _qr_square_vjp(ns, gq, gr, q, r):
    m = ns.matmul(r, _mH(ns, gr)) - ns.matmul(_mH(ns, gq), q)
    n = m.shape[-1]
    low = m * _tril_mask(m)
    copyltu = low + _mH(ns, m * _tril_mask(m, 0.0, -1))
    if m.dtype.kind == "c":  # the adjoint of the jvp's real-diagonal gauge: Re(diag(M)) only
        im = ns.imag(_diag(ns, m))
        copyltu = copyltu - _diag_embed(ns, ns.complex(ns.zeros_like(im), im))
    return _right_inv(ns, gq + ns.matmul(q, copyltu), _mH(ns, r))


def _qr_vjp(ns, g, out, a, mode):
    _qr_check(a, mode)
    (gq, gr), (q, r) = g, out
    m, n = a.shape[-2:]
    if m >= n:
        return _qr_square_vjp(ns, gq, gr, q, r)
    e1, e2 = _split(m, n, r)
    r1, gr1, gr2 = ns.matmul(r, e1), ns.matmul(gr, e1), ns.matmul(gr, e2)
    y = ns.matmul(ns.matmul(q, r), e2)
    gx = _qr_square_vjp(ns, gq + ns.matmul(y, _mH(ns, gr2)), gr1, q, r1)
    return ns.matmul(gx, _mT(ns, e1)) + ns.matmul(ns.matmul(q, gr2), _mT(ns, e2))


def _qr_square_jvp(ns, da, q, r):
    dar = _right_inv(ns, da, r)
    c = ns.matmul(_mH(ns, q), dar)
    low = c * _tril_mask(c, 0.0, -1)
    cw = c - (low - _mH(ns, low))
    if c.dtype.kind == "c":  # keep R's diagonal real (LAPACK's gauge): drop i Im(diag(C))
        im = ns.imag(_diag(ns, c))
        cw = cw - _diag_embed(ns, ns.complex(ns.zeros_like(im), im))
    return dar - ns.matmul(q, cw), ns.matmul(cw, r)


def _qr_jvp(ns, primals, tangents, out, mode):
    _qr_check(primals[0], mode)
    q, r = out
    m, n = primals[0].shape[-2:]
    if m >= n:
        return _qr_square_jvp(ns, tangents[0], q, r)
    e1, e2 = _split(m, n, r)
    dq, dr1 = _qr_square_jvp(ns, ns.matmul(tangents[0], e1), q, ns.matmul(r, e1))
    dr2 = ns.matmul(_mH(ns, q), ns.matmul(tangents[0], e2) - ns.matmul(dq, ns.matmul(r, e2)))
    return dq, ns.matmul(dr1, _mT(ns, e1)) + ns.matmul(dr2, _mT(ns, e2))


def _qr_impl(a, mode):
    if mode == "r":
        return xp.zeros(a.shape[:-2] + (0,), dtype=a.dtype), xp.linalg.qr(a, mode="r")
    return tuple(xp.linalg.qr(a, mode=mode))


qr_p = defprim("linalg_qr", _qr_impl, vjp=(_qr_vjp,), jvp=_qr_jvp, nout=2, save_inputs=False, save_out=True)
qr_p.batch = _batch_front(qr_p)
