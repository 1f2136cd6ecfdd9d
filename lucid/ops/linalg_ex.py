"""The never-raising ``_ex`` primitives behind ``linalg.cholesky_ex``, ``inv_ex`` and ``solve_ex``.

NOTE [_ex per matrix]
As PyTorch's ``*_ex`` functions (``check_errors=False``), these never raise for a matrix that
fails: each returns LAPACK's ``info`` per matrix (int32, no gradient; 0 = success) beside the
result, and a failing matrix spoils only its own slice of the batch. Its values are what
LAPACK leaves (cholesky_ex: the partial factor ``potrf`` stops at; inv_ex / solve_ex: the LU
solve with a zero pivot, i.e. inf/nan, as PyTorch, whose ``inv_ex`` is ``solve_ex(A, I)``);
every other matrix gets the exact result. The rules are the per-matrix rules of cholesky / inv
/ solve written with these primitives (so they never raise either): the good matrices get exact
gradients and jvps, the failing ones inf/nan or garbage, as in PyTorch. The forward first
tries the whole batch at once and only loops over matrices (with SciPy's LAPACK, for ``info``)
when some matrix failed. Batching moves the batch dim to the front; ``info`` is batched too
(for solve_ex only when ``A`` is: its ``info`` has A's batch shape, as PyTorch's).
"""
from __future__ import annotations

import numpy as np

from .._core.backend import host_fallback, namespace_of, xp
from .._core.primitive import TN, bind, defprim
from ._family import move_bdim, shape_of, sum_to_shape
from .linalg import _mH
from .linalg_decomp import _batch_front, cholesky_jvp_rule, cholesky_vjp_rule, nan_pivot_info


def _info_zeros(a):
    """int32 zeros of ``a``'s batch shape, on ``a``'s device. (Not ``zeros_like(a, shape=...)``:
    CuPy's takes an empty shape, a single matrix's, for "a's own shape".)"""
    return namespace_of(a).zeros(a.shape[:-2], np.int32)


def _per_matrix(fn, *arrays):
    """Apply ``fn`` (one matrix per argument -> tuple of arrays) over the common leading dims."""
    lead = arrays[0].shape[:-2]
    if not lead:
        return fn(*arrays)
    flat = [x.reshape((-1,) + x.shape[-2:]) for x in arrays]
    outs = [fn(*xs) for xs in zip(*flat)]
    return tuple(np.stack([o[i] for o in outs]).reshape(lead + np.shape(outs[0][i])) for i in range(len(outs[0])))


def _per_matrix_host(fn, *arrays):
    """``_per_matrix`` with SciPy's LAPACK, on host copies of device operands (NOTE [Host
    fallback]): only reached when some matrix failed, to report LAPACK's ``info`` per matrix."""
    return host_fallback(lambda *xs: _per_matrix(fn, *xs))(*arrays)


# ----------------------------------------------------------------- cholesky_ex

def _potrf(m):
    from scipy.linalg import lapack

    potrf = lapack.get_lapack_funcs("potrf", (m,))
    c, info = potrf(m, lower=1, clean=1)
    info = max(int(info), 0) or int(nan_pivot_info(c))  # See nan_pivot_info
    return np.tril(c).astype(m.dtype, copy=False), np.asarray(info, np.int32)


def _cholesky_ex_impl(a):
    try:
        c = xp.linalg.cholesky(a)
    except np.linalg.LinAlgError:
        return _per_matrix_host(_potrf, a)
    return c, nan_pivot_info(c)


# Cholesky's rules (linalg_decomp.py) with inv_ex: a failed factorization must not raise here.
def _cholesky_ex_vjp(ns, g, out, a):
    return cholesky_vjp_rule(ns, g[0], out[0], lambda lo: ns.linalg_inv_ex(lo)[0])


def _cholesky_ex_jvp(ns, primals, tangents, out):
    return cholesky_jvp_rule(ns, tangents[0], out[0], lambda lo: ns.linalg_inv_ex(lo)[0]), None


cholesky_ex_p = defprim("linalg_cholesky_ex", _cholesky_ex_impl, vjp=(_cholesky_ex_vjp,), jvp=_cholesky_ex_jvp,
                        nout=2, save_inputs=False, save_out=True)
cholesky_ex_p.batch = _batch_front(cholesky_ex_p)


# ---------------------------------------------------------------------- solve_ex

def _lu_solve_one(a, b):
    """One matrix: LAPACK getrf + getrs (a zero pivot gives inf/nan, never an exception)."""
    from scipy.linalg import lapack

    getrf, getrs = lapack.get_lapack_funcs(("getrf", "getrs"), (a, b))
    lu, piv, info = getrf(a)
    with np.errstate(all="ignore"):
        x, _ = getrs(lu, piv, b)
    return x.astype(np.result_type(a, b), copy=False), np.asarray(max(int(info), 0), np.int32)


def _getrf_info(m):
    from scipy.linalg import lapack

    getrf = lapack.get_lapack_funcs("getrf", (m,))
    return np.asarray(max(int(getrf(m)[-1]), 0), np.int32)


def _solve_ex_impl(a, b):
    batch = np.broadcast_shapes(a.shape[:-2], b.shape[:-2])
    try:
        x = xp.linalg.solve(xp.broadcast_to(a, batch + a.shape[-2:]), xp.broadcast_to(b, batch + b.shape[-2:]))
        return x, _info_zeros(a)
    except np.linalg.LinAlgError:
        pass
    if a.shape[-1] == 0:
        return xp.zeros_like(xp.broadcast_to(b, batch + b.shape[-2:])), _info_zeros(a)
    info = _per_matrix_host(lambda m: (_getrf_info(m),), a)[0]
    ab, bb = xp.broadcast_to(a, batch + a.shape[-2:]), xp.broadcast_to(b, batch + b.shape[-2:])
    if b.shape[-1] == 0:
        return namespace_of(a).zeros(bb.shape, np.result_type(a.dtype, b.dtype)), info
    return _per_matrix_host(lambda m, r: (_lu_solve_one(m, r)[0],), ab, bb)[0], info


def _solve_ex_gb(ns, g, a):
    return ns.linalg_solve_ex(_mH(ns, a), g[0])[0]


def _solve_ex_jvp(ns, primals, tangents, out):
    x = out[0]
    ta, tb = tangents
    rhs = None if ta is None else -ns.matmul(ta, x)
    if tb is not None:
        rhs = tb if rhs is None else rhs + tb
    if tuple(rhs.shape) != tuple(x.shape):
        rhs = ns.broadcast_to(rhs, shape=tuple(x.shape))
    return ns.linalg_solve_ex(primals[0], rhs)[0], None


def _solve_ex_batch(vals, bdims):
    """As ``batch_leading`` (the batch dim in front, padded past the other operand's leading dims);
    ``info`` has A's batch shape, so it is batched only with A and its padding is squeezed away."""
    ba = bdims[0]
    rank = max(len(shape_of(v)) - (d is not None) for v, d in zip(vals, bdims))
    new, pads = [], []
    for v, d in zip(vals, bdims):
        pad = 0
        if d is not None:
            v = move_bdim(v, d, 0)
            pad = rank - (v.ndim - 1)
            if pad:
                v = TN.reshape(v, shape=(v.shape[0],) + (1,) * pad + tuple(v.shape[1:]))
        new.append(v)
        pads.append(pad)
    x, info = bind(solve_ex_p, tuple(new), {})
    if ba is None:
        return (x, info), (0, None)
    if pads[0]:
        info = TN.reshape(info, shape=(info.shape[0],) + tuple(info.shape[1 + pads[0]:]))
    return (x, info), (0, 0)


solve_ex_p = defprim(
    "linalg_solve_ex", _solve_ex_impl,
    vjp=(lambda ns, g, out, a, b: sum_to_shape(ns, -ns.matmul(_solve_ex_gb(ns, g, a), _mH(ns, out[0])), tuple(a.shape)),
         lambda ns, g, out, a, b: sum_to_shape(ns, _solve_ex_gb(ns, g, a), tuple(b.shape))),
    jvp=_solve_ex_jvp, nout=2, save_out=True,
)
solve_ex_p.batch = _solve_ex_batch


# ------------------------------------------------------------------------ inv_ex

def _inv_ex_impl(a):
    try:
        return xp.linalg.inv(a), _info_zeros(a)
    except np.linalg.LinAlgError:
        pass
    return _per_matrix_host(lambda m: _lu_solve_one(m, np.eye(m.shape[-1], dtype=m.dtype)), a)


# d(A^-1) = -A^-1 dA A^-1 (as inv; the output is all the rules need)
inv_ex_p = defprim(
    "linalg_inv_ex", _inv_ex_impl,
    vjp=(lambda ns, g, out, a: -ns.matmul(_mH(ns, out[0]), ns.matmul(g[0], _mH(ns, out[0]))),),
    jvp=lambda ns, primals, tangents, out: (-ns.matmul(out[0], ns.matmul(tangents[0], out[0])), None),
    save_inputs=False, save_out=True, nout=2,
)
inv_ex_p.batch = _batch_front(inv_ex_p)

__all__: list = []
