"""Op database entries: complex samples for eig / eigvals, lstsq, ldl_factor / ldl_solve and the
``_ex`` variants (cholesky_ex, inv_ex, solve_ex), batched real samples of the ``_ex`` variants,
and svd with full_matrices=True of non-square inputs (differentiable through the first k columns).

eig's eigenvectors are fixed only up to a phase each, so the entries check phase-free functions
(the eigenvalues and ``|V|^2``); ldl is not differentiable (as in PyTorch), so its entries check
values, vmap and (through ldl_solve) a round trip only.
"""
import numpy as np
from scipy.linalg import lapack

import lucid
from db_linalg import svd_input, wellcond
from db_linalg_extra import _lstsq_parts, _np_lstsq_parts
from opinfo import OpInfo, Sample, floats

L = lucid.linalg


def cplx(rng, *shape):
    return (floats(rng, *shape) + 1j * floats(rng, *shape)).astype(np.complex128)


def cwell(rng, *shape):
    return cplx(rng, *shape) * 0.5 + shape[-1] * np.eye(shape[-1])


def c_distinct_eig(rng, *shape):
    """A complex non-normal matrix with well separated (complex) eigenvalues."""
    *batch, n, _ = shape
    vals = np.diag(np.array([1.0 + 0.5j, -1.0 + 2.0j, 2.5 - 1.0j][:n]))
    s = cplx(rng, *batch, n, n) * 0.3 + np.eye(n)
    return s @ vals @ np.linalg.inv(s)


def c_svd_input(rng, *shape):
    """A complex matrix with separated singular values (3, 2, 1.2 ...): lstsq's QR path is smooth."""
    *batch, m, n = shape
    k = min(m, n)
    u, _ = np.linalg.qr(cplx(rng, *batch, m, k))
    v, _ = np.linalg.qr(cplx(rng, *batch, n, k))
    return np.einsum("...ij,j,...kj->...ik", u, np.array([3.0, 2.0, 1.2, 0.5][:k]), v.conj())


def _full_svd_parts(a):
    """Gauge-free functions of the first min(m, n) columns of the full factors, and S."""
    u, s, vh = L.svd(a, full_matrices=True)
    k = s.shape[-1]
    uk, vk = u[..., :k], vh[..., :k, :]
    return s, uk @ vk, (uk * uk.conj()).real @ (vk * vk.conj()).real


def _np_full_svd_parts(a):
    u, s, vh = np.linalg.svd(a, full_matrices=False)
    return s, u @ vh, np.abs(u) ** 2 @ np.abs(vh) ** 2


def _eig_parts(a):
    w, v = L.eig(a)
    return w, (v * v.conj()).real


def _np_eig_parts(a):
    w, v = np.linalg.eig(a)
    return w, np.abs(v) ** 2


# ------------------------------------------------------------------ ldl (complex)

def _c_sym(rng, *shape):
    a = cplx(rng, *shape)
    return a + np.swapaxes(a, -1, -2) + np.diag([2.0, -3.0, 4.0][: shape[-1]])


def _c_herm(rng, *shape):
    a = cplx(rng, *shape)
    return a + np.conj(np.swapaxes(a, -1, -2)) + np.diag([2.0, -3.0, 4.0][: shape[-1]])


def _np_ldl_factor(a, hermitian=False):
    fn = lapack.zhetrf if hermitian else lapack.zsytrf

    def one(m):
        ld, piv, _ = fn(m, lower=1)
        return np.tril(ld), piv

    if a.ndim == 2:
        return one(a)
    outs = [one(m) for m in a]
    return np.stack([o[0] for o in outs]), np.stack([o[1] for o in outs])


def _ldl_factor(a, hermitian=False):
    return tuple(L.ldl_factor(a, hermitian=hermitian))


def _ldl_roundtrip(a, b, hermitian=False):
    LD, piv = L.ldl_factor(a, hermitian=hermitian)
    return L.ldl_solve(LD, piv, b, hermitian=hermitian)


def _np_solve(a, b, hermitian=False):
    return np.linalg.solve(a, b)


def _c_herm_sep(rng, *shape):
    """Half a complex Hermitian matrix with eigenvalues (1, 2.5, 4): unitary Q diag Q^H / 2."""
    *batch, n, _ = shape
    q, _ = np.linalg.qr(cplx(rng, *batch, n, n))
    return np.einsum("...ij,j,...kj->...ik", q, np.array([1.0, 2.5, 4.0][:n]), q.conj()) / 2


def _herm_sum_t(x):
    return x + x.mT.conj()  # Hermitian whatever gradcheck perturbs (eigh's gradient is Hermitian)


def _herm_sum_np(x):
    return x + np.conj(np.swapaxes(x, -1, -2))


def _eigh_upper_parts(x):
    w, v = L.eigh(_herm_sum_t(x), UPLO="U")
    k = lucid.arange(1.0, w.shape[-1] + 1.0, dtype=lucid.float64, device=v.device).to(v.dtype)
    return w, (v * k) @ v.mT.conj()


def _np_eigh_upper_parts(x):
    w, v = np.linalg.eigh(_herm_sum_np(x), "U")
    return w, (v * np.arange(1.0, w.shape[-1] + 1.0)) @ np.conj(np.swapaxes(v, -1, -2))


# ------------------------------------------------------------------- _ex variants

def _herm_t(x):
    return x @ x.mT.conj() + 3 * lucid.eye(x.shape[-1], dtype=x.dtype, device=x.device)


def _herm_np(x):
    return x @ np.conj(np.swapaxes(x, -1, -2)) + 3 * np.eye(x.shape[-1])


def _spd_t(x):
    return x @ x.mT + 3 * lucid.eye(x.shape[-1], dtype=x.dtype, device=x.device)


def _spd_np(x):
    return x @ np.swapaxes(x, -1, -2) + 3 * np.eye(x.shape[-1])


OPS = [
    OpInfo("complex.linalg.eig", _eig_parts, _np_eig_parts,
           lambda rng: [Sample((c_distinct_eig(rng, 3, 3),)), Sample((c_distinct_eig(rng, 2, 2, 2),))], atol=1e-8),
    OpInfo("complex.linalg.eigvals", L.eigvals, np.linalg.eigvals,
           lambda rng: [Sample((c_distinct_eig(rng, 3, 3),))], atol=1e-8),
    OpInfo("complex.linalg.lstsq", _lstsq_parts, _np_lstsq_parts,
           lambda rng: [Sample((c_svd_input(rng, 4, 2), cplx(rng, 4, 2)), name="tall"),
                        Sample((c_svd_input(rng, 2, 3), cplx(rng, 2, 1)), name="wide"),
                        Sample((c_svd_input(rng, 3, 2), floats(rng, 3, 1)), {"driver": "gelsd"}, name="real B")],
           atol=1e-8, vmap=False),  # vmap=False as the real entry: the full-rank test reads values
    OpInfo("complex.linalg.ldl_factor", _ldl_factor, _np_ldl_factor,
           lambda rng: [Sample((_c_sym(rng, 3, 3),)), Sample((_c_herm(rng, 2, 3, 3),), {"hermitian": True})],
           grad=False),
    OpInfo("complex.linalg.ldl_solve", _ldl_roundtrip, _np_solve,
           lambda rng: [Sample((_c_sym(rng, 3, 3), cplx(rng, 3, 2))),
                        Sample((_c_herm(rng, 2, 3, 3), cplx(rng, 3, 1)), {"hermitian": True}, name="broadcast B")],
           grad=False),
    OpInfo("complex.linalg.inv_ex", lambda a: L.inv_ex(a).inverse, np.linalg.inv,
           lambda rng: [Sample((cwell(rng, 3, 3),)), Sample((cwell(rng, 2, 3, 3),))]),
    OpInfo("complex.linalg.solve_ex", lambda a, b: L.solve_ex(a, b).result, np.linalg.solve,
           lambda rng: [Sample((cwell(rng, 3, 3), cplx(rng, 3, 2))),
                        Sample((cwell(rng, 2, 3, 3), cplx(rng, 3, 1)), name="broadcast B")]),
    OpInfo("complex.linalg.cholesky_ex", lambda x: L.cholesky_ex(_herm_t(x)).L,
           lambda x: np.linalg.cholesky(_herm_np(x)), lambda rng: [Sample((cplx(rng, 3, 3),))]),
    OpInfo("complex.linalg.cholesky_ex_upper", lambda x: L.cholesky_ex(_herm_t(x), upper=True).L,
           lambda x: np.conj(np.swapaxes(np.linalg.cholesky(_herm_np(x)), -1, -2)),
           lambda rng: [Sample((cplx(rng, 2, 2),))]),
    OpInfo("linalg.svd_full_matrices_nonsquare", _full_svd_parts, _np_full_svd_parts,
           lambda rng: [Sample((svd_input(rng, 3, 2),), name="tall"), Sample((svd_input(rng, 2, 2, 3),), name="wide"),
                        Sample((c_svd_input(rng, 3, 2),), name="complex")], atol=1e-8),
    # UPLO='U' reads the Hermitian matrix of the upper triangle (not its conjugate): a gauge-free
    # function of the eigenvectors that tells V from conj(V)
    OpInfo("complex.linalg.eigh_upper", _eigh_upper_parts, _np_eigh_upper_parts,
           lambda rng: [Sample((_c_herm_sep(rng, 3, 3),)), Sample((_c_herm_sep(rng, 2, 2, 2),))], atol=1e-8),
    OpInfo("complex.linalg.eigvalsh_upper", lambda x: L.eigvalsh(_herm_sum_t(x), UPLO="U"),
           lambda x: np.linalg.eigvalsh(_herm_sum_np(x), "U"),
           lambda rng: [Sample((_c_herm_sep(rng, 3, 3),))], atol=1e-8),
    OpInfo("complex.linalg.cholesky_upper", lambda x: L.cholesky(_herm_t(x), upper=True),
           lambda x: np.conj(np.swapaxes(np.linalg.cholesky(_herm_np(x)), -1, -2)),
           lambda rng: [Sample((cplx(rng, 3, 3),)), Sample((cplx(rng, 2, 2, 2),))]),
    # batched real samples of the _ex variants (their vmap rules: info is batched too)
    OpInfo("linalg.inv_ex_batched", lambda a: tuple(L.inv_ex(a)),
           lambda a: (np.linalg.inv(a), np.zeros(a.shape[:-2], np.int32)),
           lambda rng: [Sample((wellcond(rng, 2, 3, 3),))], out_index=0),
    OpInfo("linalg.solve_ex_batched", lambda a, b: tuple(L.solve_ex(a, b)),
           lambda a, b: (np.linalg.solve(a, b), np.zeros(a.shape[:-2], np.int32)),
           lambda rng: [Sample((wellcond(rng, 2, 3, 3), floats(rng, 3, 2)), name="broadcast B"),
                        Sample((wellcond(rng, 3, 3), floats(rng, 2, 3, 1)), name="broadcast A")], out_index=0),
    OpInfo("linalg.cholesky_ex_batched", lambda x: tuple(L.cholesky_ex(_spd_t(x))),
           lambda x: (np.linalg.cholesky(_spd_np(x)), np.zeros(x.shape[:-2], np.int32)),
           lambda rng: [Sample((floats(rng, 2, 3, 3),))], out_index=0),
]
