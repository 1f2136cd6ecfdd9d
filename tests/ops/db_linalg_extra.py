"""Op database entries for the rest of lucid.linalg: triangular solves, LU, matrix_exp, LDL^T,
and the composites (lstsq, cond, matrix_rank, cross, multi_dot, vecdot, vander, ...).

Inputs are tiny and well conditioned (``wellcond``: random + n I); LU samples keep their
pivot order away from ties (the factors jump where the pivot row changes).
"""
import numpy as np
import scipy.linalg as sl

import lucid
from db_linalg import svd_input, wellcond
from opinfo import OpInfo, Sample, floats

L = lucid.linalg


def _np_solve_tri(a, b, upper, left=True, unitriangular=False):
    t = np.triu(a) if upper else np.tril(a)
    if unitriangular:
        n = a.shape[-1]
        t = t * (1 - np.eye(n)) + np.eye(n)
    return np.linalg.solve(t, b) if left else np.swapaxes(np.linalg.solve(np.swapaxes(t, -1, -2), np.swapaxes(b, -1, -2)), -1, -2)


def _solve_tri_samples(rng):
    return [
        Sample((wellcond(rng, 3, 3), floats(rng, 3, 2)), {"upper": True}),
        Sample((wellcond(rng, 3, 3), floats(rng, 3, 2)), {"upper": False, "unitriangular": True}),
        Sample((wellcond(rng, 2, 3, 3), floats(rng, 3, 1)), {"upper": False}, name="broadcast B"),
        Sample((wellcond(rng, 3, 3), floats(rng, 2, 3)), {"upper": True, "left": False}, name="right"),
    ]


def _np_lu(a):
    p, lo, up = sl.lu(a)
    return p, lo, up


def pivoted(rng, *shape):
    """A matrix whose partial pivoting is decided by clear margins (rows scaled apart)."""
    a = floats(rng, *shape) * 0.3
    m, n = shape[-2:]
    for j in range(min(m, n)):
        a[..., j, j] += 2.0 + j
    return a[..., rng.permutation(m), :]


def _lu_samples(rng):
    return [Sample((pivoted(rng, 3, 3),)), Sample((pivoted(rng, 2, 3, 3),)),
            Sample((pivoted(rng, 4, 2),), name="tall"), Sample((pivoted(rng, 2, 4),), name="wide")]


def _np_lu_factor(a):
    lu_, piv = sl.lu_factor(a)
    return lu_, piv + 1


def _lu_solve_case(a, b, left=True, adjoint=False):
    LU, piv = L.lu_factor(a)
    return L.lu_solve(LU, piv, b, left=left, adjoint=adjoint)


def _np_lu_solve_case(a, b, left=True, adjoint=False):
    m = np.swapaxes(a, -1, -2) if adjoint else a
    if left:
        return np.linalg.solve(m, b)
    return np.swapaxes(np.linalg.solve(np.swapaxes(m, -1, -2), np.swapaxes(b, -1, -2)), -1, -2)


def _lu_solve_samples(rng):
    return [Sample((pivoted(rng, 3, 3), floats(rng, 3, 2))),
            Sample((pivoted(rng, 3, 3), floats(rng, 3, 2)), {"adjoint": True}),
            Sample((pivoted(rng, 3, 3), floats(rng, 2, 3)), {"left": False}),
            Sample((pivoted(rng, 3, 3), floats(rng, 2, 3)), {"left": False, "adjoint": True})]


def _ldl_input(rng, *shape):
    a = floats(rng, *shape)
    return a + np.swapaxes(a, -1, -2) + np.diag([2.0, -3.0, 4.0][: shape[-1]])


def _ldl_roundtrip(a, b):
    LD, piv = L.ldl_factor(a)
    return L.ldl_solve(LD, piv, b)


def _np_ldl_factor(a):
    from scipy.linalg import lapack

    def one(m):
        ld, piv, _ = lapack.dsytrf(m, lower=1)
        return np.tril(ld), piv

    if a.ndim == 2:
        return one(a)
    outs = [one(m) for m in a]
    return np.stack([o[0] for o in outs]), np.stack([o[1] for o in outs])


OPS = [
    OpInfo("linalg.solve_triangular", lambda a, b, **k: L.solve_triangular(a, b, **k), _np_solve_tri,
           _solve_tri_samples),
    OpInfo("linalg.lu", lambda a: tuple(L.lu(a)), _np_lu, _lu_samples, atol=1e-10),
    OpInfo("linalg.lu_factor", lambda a: tuple(L.lu_factor(a)), _np_lu_factor,
           lambda rng: [Sample((pivoted(rng, 3, 3),)), Sample((pivoted(rng, 2, 3, 3),)),
                        Sample((pivoted(rng, 4, 3),), name="tall"), Sample((pivoted(rng, 3, 4),), name="wide")],
           atol=1e-10, out_index=0),
    OpInfo("linalg.lu_solve", _lu_solve_case, _np_lu_solve_case, _lu_solve_samples),
    OpInfo("linalg.matrix_exp", L.matrix_exp, sl.expm,
           lambda rng: [Sample((floats(rng, 3, 3),)), Sample((floats(rng, 2, 2, 2),)), Sample((floats(rng, 1, 1),))]),
    OpInfo("linalg.ldl_factor", lambda a: tuple(L.ldl_factor(a)), _np_ldl_factor,
           lambda rng: [Sample((_ldl_input(rng, 3, 3),)), Sample((_ldl_input(rng, 2, 3, 3),))], grad=False),
    OpInfo("linalg.ldl_solve", _ldl_roundtrip, np.linalg.solve,
           lambda rng: [Sample((_ldl_input(rng, 3, 3), floats(rng, 3, 2))),
                        Sample((_ldl_input(rng, 2, 3, 3), floats(rng, 3, 1)), name="broadcast B")], grad=False),
]
