"""Triangular solves, LU, the matrix exponential and LDL^T: primitives behind lucid.linalg.

Each differentiable primitive has its vjp, jvp (in ``ns`` ops, so they differentiate
again) and batching rule here; ``ldl_factor``/``ldl_solve`` are not differentiable (as in
PyTorch). Row/column blocks are cut and joined by products with constant selection
matrices (``_cols``), which keeps every rule inside the matmul/solve primitives.
"""
from __future__ import annotations

import math

import numpy as np

from .._core.backend import host_fallback, namespace_of, scipy_linalg_of, xp
from .._core.primitive import TN, bind, defprim
from ._family import move_bdim, quiet, sum_to_shape
from .linalg import _mH, _mT, batch_leading
from .linalg_decomp import _batch_front, _lapack


def _nondiff_jvp(ns, primals, tangents, out, **params):
    return None


# Constants are made on the device of ``like`` (an operand: array, Tensor or tracer), in its dtype.
def _tri_mask(like, upper, strict, n=None):
    """Constant mask (n, n) of the triangle a triangular solve reads (strict: without the
    diagonal); ``n`` defaults to ``like``'s last dim."""
    n, k, mod = like.shape[-1] if n is None else n, 1 if strict else 0, namespace_of(like)
    ones = mod.ones((n, n), dtype=like.dtype)
    return mod.triu(ones, k) if upper else mod.tril(ones, -k)


def _cols(n, lo, hi, like):
    """Selection matrix (n, hi - lo): ``X @ S`` keeps columns lo:hi, ``Y @ S^T`` puts them back."""
    return namespace_of(like).eye(n, dtype=like.dtype)[:, lo:hi]


# ------------------------------------------------------------ solve_triangular

def _tri_matrix(a, upper, unitriangular):
    t = a * _tri_mask(a, upper, unitriangular)
    return t + namespace_of(a).eye(a.shape[-1], dtype=a.dtype) if unitriangular else t


def _solve_tri_impl(a, b, upper, unitriangular):
    batch = np.broadcast_shapes(a.shape[:-2], b.shape[:-2])
    t = xp.broadcast_to(_tri_matrix(a, upper, unitriangular), batch + a.shape[-2:])
    b = xp.broadcast_to(b, batch + b.shape[-2:])
    try:
        return xp.linalg.solve(t, b)
    except np.linalg.LinAlgError:  # a zero on some diagonal: substitute, as LAPACK's trsm
        return _substitute(t, b, upper)


def _substitute(t, b, upper):
    """Back / forward substitution, batched: a zero diagonal entry gives inf/nan (PyTorch's
    solve_triangular, i.e. trsm, never raises), in that matrix's slice only."""
    n = t.shape[-1]
    x = xp.zeros_like(b, dtype=np.result_type(t, b))
    with np.errstate(all="ignore"):
        for i in (range(n - 1, -1, -1) if upper else range(n)):
            # rows not computed yet are 0 and meet only the zero triangle: no 0 * inf from there
            acc = b[..., i, :] - xp.einsum("...j,...jk->...k", t[..., i, :], x)
            x[..., i, :] = acc / t[..., i, i][..., None]
    return x


def _solve_tri_gb(ns, g, a, upper, unitriangular):
    return ns.linalg_solve_triangular(_mH(ns, a), g, upper=not upper, unitriangular=unitriangular)


# X = T^-1 B with T the triangle of A: gB = T^-H g, gA = -tri(gB X^H); dX = T^-1 (dB - tri(dA) X).
def _solve_tri_vjp_a(ns, g, out, a, b, upper, unitriangular):
    gb = _solve_tri_gb(ns, g, a, upper, unitriangular)
    ga = -ns.matmul(gb, _mH(ns, out)) * _tri_mask(g, upper, unitriangular, a.shape[-1])
    return sum_to_shape(ns, ga, tuple(a.shape))


def _solve_tri_vjp_b(ns, g, out, a, b, upper, unitriangular):
    return sum_to_shape(ns, _solve_tri_gb(ns, g, a, upper, unitriangular), tuple(b.shape))


def _solve_tri_jvp(ns, primals, tangents, out, upper, unitriangular):
    a = primals[0]
    ta, tb = tangents
    rhs = None if ta is None else -ns.matmul(ta * _tri_mask(ta, upper, unitriangular), out)
    if tb is not None:
        rhs = tb if rhs is None else rhs + tb
    if tuple(rhs.shape) != tuple(out.shape):
        rhs = ns.broadcast_to(rhs, shape=tuple(out.shape))
    return ns.linalg_solve_triangular(a, rhs, upper=upper, unitriangular=unitriangular)


solve_triangular_p = defprim("linalg_solve_triangular", _lapack("solve", _solve_tri_impl),
                             vjp=(_solve_tri_vjp_a, _solve_tri_vjp_b), jvp=_solve_tri_jvp, save_out=True)
solve_triangular_p.batch = batch_leading(solve_triangular_p)


def _tri_left(ns, t, x, upper, unit=False):
    """``T^-1 X`` for a triangular T."""
    return ns.linalg_solve_triangular(t, x, upper=upper, unitriangular=unit)


def _tri_right(ns, x, t, upper, unit=False):
    """``X T^-1`` for a triangular T: (T^-T X^T)^T."""
    return _mT(ns, ns.linalg_solve_triangular(_mT(ns, t), _mT(ns, x), upper=not upper, unitriangular=unit))


# ----------------------------------------------------------------------- lu

# NOTE [LU rules]
# A = P L U (L unit lower (m, k), U upper (k, n), k = min(m, n)). Square case, with
# phi = L^-1 P^T dA U^-1:  dL = L tril(phi, -1),  dU = triu(phi) U, and the vjp is its
# transpose: gA = P L^-T (tril(L^T gL, -1) + triu(gU U^T)) U^-T. Tall (m > k): the top k
# rows are the square case on (L1, U) and dL2 = (dX2 - L2 dU) U^-1 (X = P^T A); the vjp
# adds -L2^T gL2 to gU U^T and returns gL2 U^-T for the bottom rows. Wide (n > k): the
# first k columns are the square case on (L, U1) and dU2 = L^-1 (dX2 - dL U2); the vjp
# adds -gU2 U2^T to L^T gL and returns L^-T gU2 for the last columns. PyTorch's formulas.
def _lu_impl(a):
    import scipy.linalg

    m, n = a.shape[-2:]
    if a.size == 0:
        k = min(m, n)
        mod = namespace_of(a)
        batch = a.shape[:-2]
        # No pivoting happened: P is the identity (PyTorch's, also for (m, 0) matrices).
        p = mod.broadcast_to(mod.eye(m, dtype=a.dtype), batch + (m, m)).copy()
        return (p, mod.zeros(batch + (m, k), dtype=a.dtype), mod.zeros(batch + (k, n), dtype=a.dtype),
                mod.zeros(batch + (k,), dtype=np.int32))
    if a.__class__ is np.ndarray:
        p, lo, up = scipy.linalg.lu(a, check_finite=False)
    else:  # cupyx.scipy.linalg.lu factors one matrix at a time
        lu = scipy_linalg_of(a).lu
        p, lo, up = _per_matrix(lambda x: tuple(lu(x, check_finite=False)), a)
    return p.astype(a.dtype, copy=False), lo, up, lu_pivots(p)[..., :min(m, n)]


def _lu_core_vjp(ns, gl_t, gu_u, l, u):
    """``L^-H (tril(L^H gL, -1) + triu(gU U^H)) U^-H`` with the two products given."""
    m = gl_t * _tri_mask(gl_t, False, True) + gu_u * _tri_mask(gu_u, True, False)
    return _tri_left(ns, _mH(ns, l), _tri_right(ns, m, _mH(ns, u), False), True, True)


def _lu_vjp(ns, g, out, a):
    (_, gl, gu, _), (p, l, u, _) = g, out
    m, n = a.shape[-2:]
    if m == n:
        core = _lu_core_vjp(ns, ns.matmul(_mH(ns, l), gl), ns.matmul(gu, _mH(ns, u)), l, u)
    elif m > n:  # tall
        top, bot = _cols(m, 0, n, l), _cols(m, n, m, l)
        l1, l2 = ns.matmul(_mT(ns, top), l), ns.matmul(_mT(ns, bot), l)
        gl1, gl2 = ns.matmul(_mT(ns, top), gl), ns.matmul(_mT(ns, bot), gl)
        gu_u = ns.matmul(gu, _mH(ns, u)) - ns.matmul(_mH(ns, l2), gl2)
        x1 = _lu_core_vjp(ns, ns.matmul(_mH(ns, l1), gl1), gu_u, l1, u)
        core = ns.matmul(top, x1) + ns.matmul(bot, _tri_right(ns, gl2, _mH(ns, u), False))
    else:  # wide
        left, right = _cols(n, 0, m, u), _cols(n, m, n, u)
        u1, u2 = ns.matmul(u, left), ns.matmul(u, right)
        gu1, gu2 = ns.matmul(gu, left), ns.matmul(gu, right)
        lt_gl = ns.matmul(_mH(ns, l), gl) - ns.matmul(gu2, _mH(ns, u2))
        x1 = _lu_core_vjp(ns, lt_gl, ns.matmul(gu1, _mH(ns, u1)), l, u1)
        x2 = _tri_left(ns, _mH(ns, l), gu2, True, True)
        core = ns.matmul(x1, _mT(ns, left)) + ns.matmul(x2, _mT(ns, right))
    return ns.matmul(p, core)


def _lu_core_jvp(ns, dx, l, u):
    phi = _tri_left(ns, l, _tri_right(ns, dx, u, True), False, True)
    return ns.matmul(l, phi * _tri_mask(phi, False, True)), ns.matmul(phi * _tri_mask(phi, True, False), u)


def _lu_jvp(ns, primals, tangents, out):
    p, l, u, _ = out
    m, n = primals[0].shape[-2:]
    dx = ns.matmul(_mT(ns, p), tangents[0])
    if m == n:
        dl, du = _lu_core_jvp(ns, dx, l, u)
    elif m > n:
        top, bot = _cols(m, 0, n, l), _cols(m, n, m, l)
        l1, l2 = ns.matmul(_mT(ns, top), l), ns.matmul(_mT(ns, bot), l)
        dl1, du = _lu_core_jvp(ns, ns.matmul(_mT(ns, top), dx), l1, u)
        dl2 = _tri_right(ns, ns.matmul(_mT(ns, bot), dx) - ns.matmul(l2, du), u, True)
        dl = ns.matmul(top, dl1) + ns.matmul(bot, dl2)
    else:
        left, right = _cols(n, 0, m, u), _cols(n, m, n, u)
        dl, du1 = _lu_core_jvp(ns, ns.matmul(dx, left), l, ns.matmul(u, left))
        du2 = _tri_left(ns, l, ns.matmul(dx, right) - ns.matmul(dl, ns.matmul(u, right)), False, True)
        du = ns.matmul(du1, _mT(ns, left)) + ns.matmul(du2, _mT(ns, right))
    return None, dl, du, None


# outputs P, L, U and LAPACK's pivots (int32, no gradient)
lu_p = defprim("linalg_lu", _lu_impl, vjp=(_lu_vjp,), jvp=_lu_jvp, nout=4, save_inputs=False, save_out=True)
lu_p.batch = _batch_front(lu_p)


def lu_pivots(p):
    """LAPACK's 1-based int32 row-swap pivots of a permutation matrix ``P`` (A = P L U), batched."""
    perm = np.argmax(np.swapaxes(p, -1, -2), axis=-1)  # row i of L U is row perm[i] of A
    m = perm.shape[-1]
    flat = perm.reshape(-1, m)
    mod = namespace_of(p)
    cur = mod.tile(mod.arange(m), (flat.shape[0], 1))
    where = cur.copy()  # where[v] = position of original row v in cur
    piv = np.zeros_like(flat)
    rows = mod.arange(flat.shape[0])
    for i in range(m):
        j = where[rows, flat[:, i]]
        piv[:, i] = j
        vi, vj = cur[rows, i], cur[rows, j]
        cur[rows, i], cur[rows, j] = vj, vi
        where[rows, vj], where[rows, vi] = i, j
    return (piv + 1).astype(np.int32).reshape(perm.shape)


def pivots_to_perm(piv):
    """The permutation (row order) that LAPACK pivots describe: ``A[perm] = L U``."""
    m = piv.shape[-1]
    flat = piv.reshape(math.prod(piv.shape[:-1]), m).astype(np.int64) - 1  # not -1: m may be 0
    mod = namespace_of(piv)
    perm = mod.tile(mod.arange(m), (flat.shape[0], 1))
    rows = mod.arange(flat.shape[0])
    for i in range(m):
        j = flat[:, i]
        a, b = perm[rows, i].copy(), perm[rows, j].copy()
        perm[rows, i], perm[rows, j] = b, a
    return perm.reshape(piv.shape)


def _perm_matrix_impl(piv, dtype):
    perm = pivots_to_perm(piv)
    m = perm.shape[-1]
    p = namespace_of(perm).zeros(perm.shape + (m,), dtype=dtype)
    np.put_along_axis(p, perm[..., None, :], 1, axis=-2)  # P[perm[i], i] = 1: A = P L U
    return p


# LAPACK pivots -> the permutation matrix P (A = P L U), so lu_solve stays inside matmul.
pivots_matrix_p = defprim("linalg_pivots_matrix", _perm_matrix_impl, jvp=_nondiff_jvp, differentiable=False,
                          save_inputs=False)
pivots_matrix_p.batch = _batch_front(pivots_matrix_p)


# ----------------------------------------------------------------- matrix_exp

# NOTE [expm Frechet]
# d expm(A)[E] is the upper-right block of expm([[A, E], [0, A]]) (Mathias 1996), and the
# vjp is the same with A^H and the cotangent. The block matrix is assembled from products
# with constant selection matrices and exponentiated by the primitive itself, so every
# derivative order is one more (twice larger) matrix_exp.
def _expm_impl(a):
    import scipy.linalg

    if a.size == 0:
        return a.copy()
    work = a if a.dtype in (np.float64, np.complex128) else a.astype(np.result_type(a.dtype, np.float64))
    if work.__class__ is np.ndarray:
        out = scipy.linalg.expm(work)
    else:  # cupyx.scipy.linalg.expm takes one matrix at a time
        expm = scipy_linalg_of(work).expm
        out = _per_matrix(expm, work)
    return xp.asarray(out).astype(a.dtype, copy=False)


def _expm_frechet(ns, a, e):
    n = a.shape[-1]
    s1, s2 = _cols(2 * n, 0, n, a), _cols(2 * n, n, 2 * n, a)
    big = (ns.matmul(s1, ns.matmul(a, _mT(ns, s1))) + ns.matmul(s1, ns.matmul(e, _mT(ns, s2)))
           + ns.matmul(s2, ns.matmul(a, _mT(ns, s2))))
    return ns.matmul(_mT(ns, s1), ns.matmul(ns.linalg_matrix_exp(big), s2))


matrix_exp_p = defprim(
    "linalg_matrix_exp", quiet(_expm_impl),  # a float16 result may overflow to inf: no NumPy warning
    vjp=(lambda ns, g, out, a: _expm_frechet(ns, _mH(ns, a), g),),
    jvp=lambda ns, primals, tangents, out: _expm_frechet(ns, primals[0], tangents[0]),
)
matrix_exp_p.batch = _batch_front(matrix_exp_p)


# ---------------------------------------------------------------- ldl (no grad)

def _per_matrix(fn, *arrays):
    """Apply a 2-D LAPACK routine to every matrix of a batch (stacked results)."""
    lead = arrays[0].shape[:-2]
    if not lead:
        return fn(*arrays)
    flat = [x.reshape((-1,) + x.shape[len(lead):]) for x in arrays]
    outs = [fn(*xs) for xs in zip(*flat)]
    if isinstance(outs[0], tuple):
        return tuple(xp.stack([o[i] for o in outs]).reshape(lead + outs[0][i].shape) for i in range(len(outs[0])))
    return xp.stack(outs).reshape(lead + outs[0].shape)


def _sytrf(a, hermitian):
    from scipy.linalg import lapack

    kind = "he" if hermitian and a.dtype.kind == "c" else "sy"
    fn, = lapack.get_lapack_funcs((kind + "trf",), (a,))
    ld, ipiv, info = fn(a, lower=1)
    if info < 0:
        raise RuntimeError(f"LAPACK {kind}trf: argument {-info} is invalid")
    return np.tril(ld).astype(a.dtype, copy=False), ipiv.astype(np.int32), np.int32(info)


def _ldl_factor_impl(a, hermitian):
    if a.size == 0:
        return a.copy(), np.zeros(a.shape[:-1], np.int32), np.zeros(a.shape[:-2], np.int32)
    return _per_matrix(lambda x: _sytrf(x, hermitian), a)


def _sytrs(ld, piv, b, hermitian):
    from scipy.linalg import lapack

    kind = "he" if hermitian and ld.dtype.kind == "c" else "sy"
    fn, = lapack.get_lapack_funcs((kind + "trs",), (ld,))
    x, info = fn(ld, piv, b, lower=1)
    if info < 0:
        raise RuntimeError(f"LAPACK {kind}trs: argument {-info} is invalid")
    return x


def _ldl_solve_impl(ld, piv, b, hermitian):
    batch = np.broadcast_shapes(ld.shape[:-2], piv.shape[:-1], b.shape[:-2])
    ld = np.broadcast_to(ld, batch + ld.shape[-2:])
    piv = np.broadcast_to(piv, batch + piv.shape[-1:])
    b = np.broadcast_to(b, batch + b.shape[-2:])
    if b.size == 0:
        return np.zeros(b.shape, np.result_type(ld, b))

    def one(l_, p_, b_):
        return _sytrs(l_, p_, b_, hermitian)

    if not batch:
        return one(ld, piv, b)
    flat = zip(ld.reshape((-1,) + ld.shape[-2:]), piv.reshape((-1,) + piv.shape[-1:]), b.reshape((-1,) + b.shape[-2:]))
    return np.stack([one(*t) for t in flat]).reshape(batch + b.shape[-2:])


def _batch_cores(prim, cores):
    """Batching for ops whose leading dims broadcast and whose operands have ``cores`` core dims.

    Batched operands get the batch dim in front, padded with 1s to the largest per-example
    leading rank, so it never lines up with a leading dim of an unbatched operand.
    """

    def rule(vals, bdims, **params):
        rank = max(len(v.shape) - (b is not None) - c for v, b, c in zip(vals, bdims, cores))
        new = []
        for v, b, c in zip(vals, bdims, cores):
            if b is not None:
                v = move_bdim(v, b, 0)
                pad = rank - (len(v.shape) - 1 - c)
                if pad:
                    v = TN.reshape(v, shape=(v.shape[0],) + (1,) * pad + tuple(v.shape[1:]))
            new.append(v)
        return bind(prim, tuple(new), params), 0

    return rule


def _ldl_jvp(name):
    def jvp(ns, primals, tangents, out, **params):
        if any(t is not None for t in tangents):  # a zero tangent would be a silent wrong answer
            raise NotImplementedError(f"{name}: the forward-mode derivative is not implemented (as in "
                                      "PyTorch); use linalg.solve for a differentiable solve")
        return None
    jvp.refuses = True  # scripts/gen_op_table.py: "raises (as PyTorch)"
    return jvp


# NOTE [Host fallback]: CuPy has no LDL^T (sytrf/sytrs), so these two run on host copies.
ldl_factor_p = defprim("linalg_ldl_factor", host_fallback(_ldl_factor_impl), jvp=_ldl_jvp("linalg.ldl_factor"),
                       nout=3, differentiable=False, save_inputs=False)
ldl_factor_p.batch = _batch_front(ldl_factor_p)
def _ldl_solve_no_vjp(ns, g, out, *args, **params):
    raise RuntimeError("linalg.ldl_solve: the derivative is not implemented (as in PyTorch); use linalg.solve "
                       "for a differentiable solve, or detach B")


_ldl_solve_no_vjp.refuses = True  # scripts/gen_op_table.py: "raises (as PyTorch)"


# Differentiable in name only, as PyTorch's: the result requires grad when B does, and a backward
# through it raises instead of treating B as a constant (a silent zero gradient).
ldl_solve_p = defprim("linalg_ldl_solve", host_fallback(_ldl_solve_impl), jvp=_ldl_jvp("linalg.ldl_solve"),
                      vjp=(None, None, _ldl_solve_no_vjp), save_inputs=None)
ldl_solve_p.batch = _batch_cores(ldl_solve_p, (2, 1, 2))

__all__: list = []
