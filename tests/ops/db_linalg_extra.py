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


# --------------------------------------------------------------- eig, pinv and composites

def _eig_real_parts(a):
    """Phase-free real functions of eig: Re/Im of the eigenvalues and |V|^2."""
    w, v = L.eig(a)
    return w.real, w.imag, (v * v.conj()).real


def _np_eig_real_parts(a):
    w, v = np.linalg.eig(a)
    return w.real, w.imag, np.abs(v) ** 2


def distinct_eig(rng, *shape, pair=False):
    """A non-symmetric matrix with well separated eigenvalues (a complex pair if ``pair``)."""
    *batch, n, _ = shape
    vals = np.diag([1.0, 2.5, 4.0][:n]).astype(np.float64)
    if pair:
        vals[:2, :2] = [[1.0, -1.5], [1.5, 1.0]]
    s = rng.standard_normal(tuple(batch) + (n, n)) * 0.3 + np.eye(n)
    return s @ vals @ np.linalg.inv(s)


def _eigvals_real(a):
    w = L.eigvals(a)
    return w.real, w.imag


def _np_eigvals_real(a):
    w = np.linalg.eigvals(a)
    return w.real, w.imag


def _np_lstsq(a, b, **k):
    return np.linalg.pinv(a) @ b


def _lstsq_parts(a, b, **k):
    res = L.lstsq(a, b, **k)
    return res.solution, res.residuals


def _np_lstsq_parts(a, b, driver=None):
    """Solution and residuals: squared column norms of A X - B, only for m > n and a driver
    other than gelsy (PyTorch's CPU default), real for complex inputs."""
    x = np.linalg.pinv(a) @ b
    if a.shape[-2] <= a.shape[-1] or driver in (None, "gelsy"):
        return x, np.zeros((0,), dtype=np.abs(a.flat[0]).dtype)
    return x, np.sum(np.abs(a @ x - b) ** 2, axis=-2)


def _np_cross(a, b, dim=-1):
    return np.cross(a, b, axis=dim)


def _np_householder(a, tau):
    def one(a, tau):
        m, n = a.shape
        q = np.eye(m)
        for i in range(len(tau)):
            v = np.where(np.arange(m) > i, a[:, i], 0.0) + (np.arange(m) == i)
            q = q @ (np.eye(m) - tau[i] * np.outer(v, v))
        return q[:, :n]

    if a.ndim == 2:
        return one(a, tau)
    return np.stack([one(x, t) for x, t in zip(a, tau)])


def _np_vander(x, N=None):
    N = x.shape[-1] if N is None else N
    return x[..., None] ** np.arange(N)


def _np_tensorinv(a, ind=2):
    return np.linalg.tensorinv(a, ind)


def _np_pinv_atol(a, atol):
    u, s, vh = np.linalg.svd(a, full_matrices=False)
    keep = s > np.maximum(np.asarray(atol)[..., None], 0.0)
    sinv = np.where(keep, 1 / np.where(keep, s, 1.0), 0.0)
    return np.swapaxes(vh, -1, -2) @ (sinv[..., None] * np.swapaxes(u, -1, -2))


def _sym_pinv(a):
    return L.pinv(a + a.mT, hermitian=True)


OPS += [
    OpInfo("linalg.eig", _eig_real_parts, _np_eig_real_parts,
           lambda rng: [Sample((distinct_eig(rng, 3, 3),)), Sample((distinct_eig(rng, 3, 3, pair=True),), name="pair"),
                        Sample((distinct_eig(rng, 2, 2, 2),))], atol=1e-8),
    OpInfo("linalg.eigvals", _eigvals_real, _np_eigvals_real,
           lambda rng: [Sample((distinct_eig(rng, 3, 3, pair=True),)), Sample((distinct_eig(rng, 2, 3, 3),))], atol=1e-8),
    OpInfo("linalg.pinv_hermitian", _sym_pinv, lambda a: np.linalg.pinv(a + np.swapaxes(a, -1, -2), hermitian=True),
           lambda rng: [Sample((wellcond(rng, 3, 3),)), Sample((wellcond(rng, 2, 2, 2),))], atol=1e-8),
    OpInfo("linalg.pinv_rank_deficient", L.pinv, np.linalg.pinv,
           lambda rng: [Sample((svd_input(rng, 3, 3, vals=(2.0, 1.0, 0.0)),)),
                        Sample((svd_input(rng, 3, 2, vals=(1.5, 0.0)),))], atol=1e-8,
           grad=False),  # pinv jumps off the rank-deficient set: finite differences mean nothing there
    OpInfo("linalg.lstsq", _lstsq_parts, _np_lstsq_parts,
           lambda rng: [Sample((svd_input(rng, 4, 2), floats(rng, 4, 2)), name="tall"),
                        Sample((svd_input(rng, 2, 4), floats(rng, 2, 1)), name="wide"),
                        Sample((svd_input(rng, 2, 4, 3), floats(rng, 2, 4, 1)), {"driver": "gelsd"})], atol=1e-8,
           vmap=False),
    OpInfo("linalg.lstsq_rank_deficient", lambda a, b: L.lstsq(a, b).solution, _np_lstsq,
           lambda rng: [Sample((svd_input(rng, 3, 3, vals=(2.0, 1.0, 0.0)), floats(rng, 3, 2)))], atol=1e-8,
           grad=False, vmap=False),
    OpInfo("linalg.cond", lambda a, **k: L.cond(a, **k), lambda a, p=None: np.linalg.cond(a, p),
           lambda rng: [Sample((wellcond(rng, 3, 3),)), Sample((svd_input(rng, 3, 2),), {"p": -2}),
                        Sample((wellcond(rng, 3, 3),), {"p": "fro"}), Sample((wellcond(rng, 2, 3, 3),), {"p": 1})]),
    OpInfo("linalg.matrix_rank", L.matrix_rank, np.linalg.matrix_rank,
           lambda rng: [Sample((svd_input(rng, 3, 3, vals=(2.0, 1.0, 0.0)),)), Sample((floats(rng, 2, 3, 2),))],
           grad=False),
    OpInfo("linalg.cross", lambda a, b, **k: L.cross(a, b, **k), _np_cross,
           lambda rng: [Sample((floats(rng, 3), floats(rng, 3))), Sample((floats(rng, 2, 3), floats(rng, 1, 3))),
                        Sample((floats(rng, 3, 2), floats(rng, 3, 2)), {"dim": 0})]),
    OpInfo("linalg.multi_dot", lambda *ts: L.multi_dot(list(ts)), lambda *ts: np.linalg.multi_dot(list(ts)),
           lambda rng: [Sample((floats(rng, 3), floats(rng, 3, 4), floats(rng, 4, 2), floats(rng, 2))),
                        Sample((floats(rng, 2, 3), floats(rng, 3, 2)))], vmap=False),
    OpInfo("linalg.vecdot", lambda a, b, **k: L.vecdot(a, b, **k), lambda a, b, dim=-1: np.sum(a * b, axis=dim),
           lambda rng: [Sample((floats(rng, 2, 3), floats(rng, 3))), Sample((floats(rng, 2, 3), floats(rng, 2, 3)), {"dim": 0})]),
    OpInfo("linalg.vander", lambda x, **k: L.vander(x, **k), _np_vander,
           lambda rng: [Sample((floats(rng, 3),)), Sample((floats(rng, 2, 3),), {"N": 4})]),
    OpInfo("linalg.householder_product", L.householder_product, _np_householder,
           lambda rng: [Sample((floats(rng, 3, 2), floats(rng, 2))), Sample((floats(rng, 2, 3, 3), floats(rng, 2, 2)))]),
    OpInfo("linalg.tensorinv", lambda a, **k: L.tensorinv(a, **k), _np_tensorinv,
           lambda rng: [Sample((wellcond(rng, 4, 4).reshape(4, 2, 2),), {"ind": 1})], vmap=False),
    OpInfo("linalg.tensorsolve", lambda a, b: L.tensorsolve(a, b), np.linalg.tensorsolve,
           lambda rng: [Sample((wellcond(rng, 6, 6).reshape(6, 2, 3), floats(rng, 6)))], vmap=False),
    OpInfo("linalg.diagonal", lambda a, **k: L.diagonal(a, **k),
           lambda a, offset=0: np.diagonal(a, offset, -2, -1),
           lambda rng: [Sample((floats(rng, 2, 3, 3),)), Sample((floats(rng, 3, 4),), {"offset": 1})]),
    OpInfo("linalg.inv_ex", lambda a: L.inv_ex(a).inverse, np.linalg.inv, lambda rng: [Sample((wellcond(rng, 3, 3),))]),
    OpInfo("linalg.solve_ex", lambda a, b: L.solve_ex(a, b).result, np.linalg.solve,
           lambda rng: [Sample((wellcond(rng, 3, 3), floats(rng, 3, 2)))]),
    OpInfo("linalg.cholesky_ex", lambda a: L.cholesky_ex(a @ a.mT + 3 * lucid.eye(3, dtype=a.dtype, device=a.device)).L,
           lambda a: np.linalg.cholesky(a @ a.T + 3 * np.eye(3)), lambda rng: [Sample((floats(rng, 3, 3),))]),
    OpInfo("linalg.cholesky_upper", lambda a: L.cholesky(a @ a.mT + 3 * lucid.eye(a.shape[-1], dtype=a.dtype,
                                                                                  device=a.device), upper=True),
           lambda a: np.swapaxes(np.linalg.cholesky(a @ np.swapaxes(a, -1, -2) + 3 * np.eye(a.shape[-1])), -1, -2),
           lambda rng: [Sample((floats(rng, 3, 3),)), Sample((floats(rng, 2, 2, 2),))]),
    # tensor tolerances, one per matrix: the cut falls between singular values (3, 2, 1.2)
    OpInfo("linalg.pinv_tensor_atol", lambda a, t: L.pinv(a, atol=t), _np_pinv_atol,
           lambda rng: [Sample((svd_input(rng, 2, 3, 3), np.array([1.5, 0.5]))),
                        Sample((svd_input(rng, 2, 3, 2), np.array(2.5)), name="0-d atol")], atol=1e-8),
]



# ------------------------------------------------------------------ complex samples

def cplx(rng, *shape):
    return (floats(rng, *shape) + 1j * floats(rng, *shape)).astype(np.complex128)


def cwell(rng, *shape):
    return cplx(rng, *shape) * 0.5 + shape[-1] * np.eye(shape[-1])


def _herm_t(x):
    return x @ x.mT.conj() + 3 * lucid.eye(x.shape[-1], dtype=x.dtype, device=x.device)


def _herm_np(x):
    return x @ np.conj(np.swapaxes(x, -1, -2)) + 3 * np.eye(x.shape[-1])


def _c_eigh(a):
    w, v = L.eigh(a + a.mT.conj())
    return w, (v * v.conj()).real


def _np_c_eigh(a):
    w, v = np.linalg.eigh(a + np.conj(np.swapaxes(a, -1, -2)))
    return w, np.abs(v) ** 2


def _c_svd(a):
    u, s, vh = L.svd(a, full_matrices=False)
    return s, u @ vh


def _np_c_svd(a):
    u, s, vh = np.linalg.svd(a, full_matrices=False)
    return s, u @ vh


def _c_qr(a):
    q, r = L.qr(a)
    return q, r


OPS += [
    OpInfo("complex.mm", lucid.mm, np.matmul, lambda rng: [Sample((cplx(rng, 2, 3), cplx(rng, 3, 2)))]),
    OpInfo("complex.einsum", lambda a, b: lucid.einsum("bij,jk->bik", a, b), lambda a, b: np.einsum("bij,jk->bik", a, b),
           lambda rng: [Sample((cplx(rng, 2, 2, 3), cplx(rng, 3, 2)))]),
    OpInfo("complex.linalg.inv", L.inv, np.linalg.inv, lambda rng: [Sample((cwell(rng, 3, 3),))]),
    OpInfo("complex.linalg.det", L.det, np.linalg.det,
           lambda rng: [Sample((cwell(rng, 3, 3),)), Sample((np.outer([1, 2j], [1 - 1j, 2]),), name="singular")]),
    OpInfo("complex.linalg.slogdet", lambda a: tuple(L.slogdet(a)), lambda a: tuple(np.linalg.slogdet(a)),
           lambda rng: [Sample((cwell(rng, 3, 3),))]),
    OpInfo("complex.linalg.solve", L.solve, np.linalg.solve, lambda rng: [Sample((cwell(rng, 3, 3), cplx(rng, 3, 2)))]),
    OpInfo("complex.linalg.cholesky", lambda x: L.cholesky(_herm_t(x)), lambda x: np.linalg.cholesky(_herm_np(x)),
           lambda rng: [Sample((cplx(rng, 3, 3),))]),
    OpInfo("complex.linalg.qr", _c_qr, lambda a: tuple(np.linalg.qr(a)),
           lambda rng: [Sample((cplx(rng, 3, 2),)), Sample((cplx(rng, 2, 3),))], atol=1e-8),
    OpInfo("complex.linalg.eigh", _c_eigh, _np_c_eigh, lambda rng: [Sample((cplx(rng, 3, 3),))], atol=1e-8),
    OpInfo("complex.linalg.svd", _c_svd, _np_c_svd, lambda rng: [Sample((cplx(rng, 3, 2),)), Sample((cplx(rng, 2, 3),))],
           atol=1e-8),
    OpInfo("complex.linalg.matrix_exp", lambda a: L.matrix_exp(a), sl.expm, lambda rng: [Sample((cplx(rng, 2, 2),))]),
    OpInfo("complex.linalg.solve_triangular", lambda a, b: L.solve_triangular(a, b, upper=False),
           lambda a, b: np.linalg.solve(np.tril(a), b), lambda rng: [Sample((cwell(rng, 3, 3), cplx(rng, 3, 1)))]),
    OpInfo("complex.linalg.lu", lambda a: tuple(L.lu(a))[1:], lambda a: tuple(sl.lu(a))[1:],
           lambda rng: [Sample((cwell(rng, 3, 3),))], atol=1e-10),
    OpInfo("complex.linalg.pinv", L.pinv, np.linalg.pinv, lambda rng: [Sample((cplx(rng, 3, 2),))], atol=1e-8),
    OpInfo("complex.linalg.vector_norm", lambda x: L.vector_norm(x, 3, dim=-1),
           lambda x: np.sum(np.abs(x) ** 3, axis=-1) ** (1 / 3), lambda rng: [Sample((cplx(rng, 2, 3),))]),
]
