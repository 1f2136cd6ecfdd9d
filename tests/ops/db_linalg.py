"""Op database entries for linear algebra: products, einsum and lucid.linalg.

Inputs are tiny and well conditioned: ``A = random + n*I`` for inv/solve/det, an SPD
``X X^T + n I`` for cholesky, symmetric matrices with separated eigenvalues for eigh and
matrices with separated singular values for svd (their gradients need distinct values).
"""
import numpy as np

import lucid
from opinfo import OpInfo, Sample, eigh_gauge, floats, svd_gauge

L = lucid.linalg


def wellcond(rng, *shape):
    n = shape[-1]
    return floats(rng, *shape) * 0.5 + n * np.eye(n)


def separated(rng, *shape, vals=(1.0, 2.5, 4.0, 5.5)):
    """A symmetric matrix with eigenvalues ``vals`` (well separated), halved: op uses A + A^T."""
    *batch, n, _ = shape
    q, _ = np.linalg.qr(rng.standard_normal(tuple(batch) + (n, n)))
    s = np.einsum("...ij,j,...kj->...ik", q, np.asarray(vals[:n]), q)
    return s / 2


def svd_input(rng, *shape, vals=(3.0, 2.0, 1.2, 0.5)):
    *batch, m, n = shape
    k = min(m, n)
    u, _ = np.linalg.qr(rng.standard_normal(tuple(batch) + (m, k)))
    v, _ = np.linalg.qr(rng.standard_normal(tuple(batch) + (n, k)))
    return np.einsum("...ij,j,...kj->...ik", u, np.asarray(vals[:k]), v)


def singular(rng, *shape, rank):
    """A square matrix of the given rank (distinct nonzero singular values)."""
    n = shape[-1]
    return svd_input(rng, *shape, vals=(3.0, 2.0, 1.2, 0.5)[:rank] + (0.0,) * (n - rank))


def _adjugate(a):
    from lucid._core.primitive import bind
    from lucid.ops.linalg import adjugate_p

    return bind(adjugate_p, (a,), {})


def _np_adjugate(a):
    """Cofactors by minors (the definition), transposed."""
    n = a.shape[-1]
    out = np.empty_like(a)
    for i in range(n):
        for j in range(n):
            minor = np.delete(np.delete(a, j, axis=-2), i, axis=-1)
            out[..., i, j] = (-1) ** (i + j) * (np.linalg.det(minor) if n > 1 else 1.0)
    return out


def _sym(a):
    return a + np.swapaxes(a, -1, -2)


def _spd(x):
    return x @ np.swapaxes(x, -1, -2) + x.shape[-1] * np.eye(x.shape[-1])


def _spd_t(x):
    return x @ x.mT + x.shape[-1] * lucid.eye(x.shape[-1], dtype=x.dtype, device=x.device)


def _gauge_free_svd(a):
    """Functions of the SVD that do not depend on the sign of each singular pair."""
    u, s, vh = L.svd(a, full_matrices=False)
    return s, u @ vh, (u * u) @ (vh * vh)


def _np_gauge_free_svd(a):
    u, s, vh = np.linalg.svd(a, full_matrices=False)
    return s, u @ vh, (u * u) @ (vh * vh)


def _np_qr(a):
    return tuple(np.linalg.qr(a))


def _np_eigh(a):
    return tuple(np.linalg.eigh(_sym(a)))


def mats(make, *shapes):
    return lambda rng: [Sample((make(rng, *shape),)) for shape in shapes]


OPS = [
    OpInfo("mm", lucid.mm, np.matmul, lambda rng: [Sample((floats(rng, 2, 3), floats(rng, 3, 2)))],
           vmap_in_dims=(0, -1)),
    OpInfo("bmm", lucid.bmm, np.matmul, lambda rng: [Sample((floats(rng, 2, 2, 3), floats(rng, 2, 3, 2)))]),
    OpInfo("mv", lucid.mv, np.matmul, lambda rng: [Sample((floats(rng, 2, 3), floats(rng, 3)))]),
    OpInfo("dot", lucid.dot, np.dot, lambda rng: [Sample((floats(rng, 3), floats(rng, 3)))]),
    OpInfo("outer", lucid.outer, np.outer, lambda rng: [Sample((floats(rng, 3), floats(rng, 2)))]),
    OpInfo("einsum_matmul", lambda a, b: lucid.einsum("ij,jk->ik", a, b), lambda a, b: np.einsum("ij,jk->ik", a, b),
           lambda rng: [Sample((floats(rng, 2, 3), floats(rng, 3, 2)))]),
    OpInfo("einsum_ellipsis", lambda a, b: lucid.einsum("...ij,...jk", a, b), lambda a, b: np.einsum("...ij,...jk", a, b),
           lambda rng: [Sample((floats(rng, 2, 2, 3), floats(rng, 3, 2))),
                        Sample((floats(rng, 1, 2, 3), floats(rng, 2, 3, 2)), name="broadcast ellipsis")]),
    OpInfo("einsum_diag", lambda a: lucid.einsum("ii->i", a), lambda a: np.einsum("ii->i", a),
           lambda rng: [Sample((floats(rng, 3, 3),))]),
    OpInfo("einsum_trace_sum", lambda a, b: lucid.einsum("iij,k->jk", a, b), lambda a, b: np.einsum("iij,k->jk", a, b),
           lambda rng: [Sample((floats(rng, 2, 2, 3), floats(rng, 2)))]),
    OpInfo("einsum_reduce_broadcast", lambda a, b: lucid.einsum("ij,j->", a, b), lambda a, b: np.einsum("ij,j->", a, b),
           lambda rng: [Sample((floats(rng, 2, 3), floats(rng, 3)))]),
    OpInfo("einsum_three", lambda a, b, c: lucid.einsum("ab,bc,cd->ad", a, b, c),
           lambda a, b, c: np.einsum("ab,bc,cd->ad", a, b, c),
           lambda rng: [Sample((floats(rng, 2, 3), floats(rng, 3, 2), floats(rng, 2, 2)))]),
    OpInfo("einsum_implicit", lambda a, b: lucid.einsum("ba,bc", a, b), lambda a, b: np.einsum("ba,bc", a, b),
           lambda rng: [Sample((floats(rng, 2, 3), floats(rng, 2, 2)))]),
    OpInfo("tensordot", lambda a, b: lucid.tensordot(a, b, dims=([1, 2], [0, 1])),
           lambda a, b: np.tensordot(a, b, axes=([1, 2], [0, 1])),
           lambda rng: [Sample((floats(rng, 2, 3, 2), floats(rng, 3, 2, 2)))]),
    OpInfo("tensordot_int", lambda a, b: lucid.tensordot(a, b, 1), lambda a, b: np.tensordot(a, b, 1),
           lambda rng: [Sample((floats(rng, 2, 3), floats(rng, 3, 2)))]),
    OpInfo("kron", lucid.kron, np.kron, lambda rng: [Sample((floats(rng, 2, 2), floats(rng, 2, 3))),
                                                     Sample((floats(rng, 2), floats(rng, 2, 2)), name="rank pad")]),
    OpInfo("trace", lucid.trace, np.trace, lambda rng: [Sample((floats(rng, 3, 3),)), Sample((floats(rng, 2, 3),))]),
    OpInfo("linalg.inv", L.inv, np.linalg.inv, mats(wellcond, (3, 3), (2, 2, 2))),
    OpInfo("linalg.det", L.det, np.linalg.det,
           lambda rng: [Sample((wellcond(rng, 3, 3),)), Sample((wellcond(rng, 2, 2, 2),)),
                        Sample((singular(rng, 3, 3, rank=2),), name="rank 2 of 3"),
                        Sample((singular(rng, 3, 3, rank=1),), name="rank 1 of 3"),
                        Sample((np.zeros((2, 2)),), name="zero")]),
    # the adjugate (det's gradient, NOTE [Adjugate]): its vjp/jvp at generic and singular inputs
    OpInfo("linalg_adjugate", _adjugate, _np_adjugate,
           lambda rng: [Sample((floats(rng, 3, 3),)), Sample((floats(rng, 2, 2, 2),)),
                        Sample((singular(rng, 3, 3, rank=2),), name="rank 2 of 3"),
                        Sample((np.array([[1.0, 2.0], [2.0, 4.0]]),), name="singular 2x2"),
                        Sample((floats(rng, 1, 1),), name="1x1")]),
    OpInfo("linalg.slogdet", L.slogdet, lambda a: tuple(np.linalg.slogdet(a)),
           lambda rng: [Sample((wellcond(rng, 3, 3),)), Sample((-wellcond(rng, 2, 2, 2),), name="negative det")],
           out_index=1),
    OpInfo("linalg.solve", L.solve, np.linalg.solve,
           lambda rng: [Sample((wellcond(rng, 3, 3), floats(rng, 3, 2))),
                        Sample((wellcond(rng, 2, 2, 2), floats(rng, 2, 2, 1)), name="batched"),
                        Sample((wellcond(rng, 2, 2, 2), floats(rng, 2, 1)), name="broadcast B"),
                        Sample((wellcond(rng, 3, 3), floats(rng, 3)), name="vector")]),
    OpInfo("linalg.cholesky", lambda x: L.cholesky(_spd_t(x)), lambda x: np.linalg.cholesky(_spd(x)),
           mats(floats, (3, 3), (2, 2, 2))),
    OpInfo("linalg.qr", L.qr, _np_qr, mats(floats, (3, 2), (3, 3), (2, 3, 2), (2, 4), (2, 2, 3)), atol=1e-8),
    OpInfo("linalg.qr_complete", lambda a: L.qr(a, mode="complete"), lambda a: tuple(np.linalg.qr(a, "complete")),
           mats(floats, (2, 3), (2, 2, 2)), atol=1e-8),
    OpInfo("linalg.qr_complete_tall", lambda a: L.qr(a, mode="complete"), lambda a: tuple(np.linalg.qr(a, "complete")),
           mats(floats, (3, 2), (2, 3, 2)), atol=1e-8, grad=False),
    OpInfo("linalg.qr_r", lambda a: L.qr(a, mode="r").R, lambda a: np.linalg.qr(a, "r"),
           mats(floats, (3, 2), (2, 3), (2, 3, 3)), atol=1e-8, grad=False),
    OpInfo("linalg.eigh", lambda a: L.eigh(a + a.mT), _np_eigh, mats(separated, (3, 3), (2, 2, 2)), atol=1e-8,
           gauge=eigh_gauge),
    OpInfo("linalg.eigvalsh", lambda a: L.eigvalsh(a + a.mT), lambda a: np.linalg.eigvalsh(_sym(a)),
           mats(separated, (3, 3))),
    OpInfo("linalg.svd_full_S", lambda a: L.svd(a).S, lambda a: np.linalg.svd(a, compute_uv=False),
           mats(svd_input, (3, 2), (2, 3))),
    OpInfo("linalg.svd", lambda a: tuple(L.svd(a, full_matrices=False)), lambda a: tuple(np.linalg.svd(a, full_matrices=False)),
           mats(svd_input, (3, 3), (3, 2), (2, 3), (2, 3, 2)), atol=1e-8, gauge=svd_gauge),
    OpInfo("linalg.svd_gauge_free", _gauge_free_svd, _np_gauge_free_svd, mats(svd_input, (3, 2), (2, 3)), atol=1e-8),
    OpInfo("linalg.svdvals", L.svdvals, lambda a: np.linalg.svd(a, compute_uv=False), mats(svd_input, (3, 2), (2, 2, 3))),
    OpInfo("linalg.pinv", L.pinv, np.linalg.pinv, mats(svd_input, (3, 2), (2, 3), (2, 2, 2)), atol=1e-8),
    OpInfo("linalg.matrix_power", lambda a, n: L.matrix_power(a, n), np.linalg.matrix_power,
           lambda rng: [Sample((floats(rng, 2, 2), 3)), Sample((wellcond(rng, 2, 2, 2), -2)), Sample((floats(rng, 2, 2), 0)),
                        Sample((floats(rng, 2, 2), 1))]),
    OpInfo("linalg.vector_norm", lambda x, **k: L.vector_norm(x, **k),
           lambda x, ord=2, dim=None, keepdim=False: _np_vnorm(x, ord, dim, keepdim),
           lambda rng: [Sample((floats(rng, 2, 3) + 2,)), Sample((floats(rng, 2, 3) + 2,), {"ord": 1, "dim": 1}),
                        Sample((floats(rng, 2, 3),), {"ord": float("inf"), "dim": (0,), "keepdim": True}),
                        Sample((floats(rng, 3) + 2,), {"ord": 3}), Sample((floats(rng, 3),), {"ord": -float("inf")}),
                        Sample((floats(rng, 2, 3) + 2,), {"ord": 0.5, "dim": 0, "keepdim": True}),
                        Sample((floats(rng, 2, 3) + 2,), {"ord": -1.5, "dim": -1}),
                        Sample((floats(rng, 2, 2, 3),), {"ord": 2, "dim": (0, 2)})]),
    OpInfo("linalg.matrix_norm", lambda x, **k: L.matrix_norm(x, **k),
           lambda x, ord="fro", dim=(-2, -1), keepdim=False: np.linalg.norm(x, ord, dim, keepdim),
           lambda rng: [Sample((svd_input(rng, 3, 2),), {"ord": o}) for o in ("fro", "nuc", 2, -2)]
           + [Sample((svd_input(rng, 2, 2, 3) + 0.1,), {"ord": o}) for o in (1, -1, float("inf"), -float("inf"))]
           + [Sample((svd_input(rng, 3, 2, 2),), {"ord": "nuc", "dim": (0, 2), "keepdim": True})]),
    OpInfo("linalg.norm", lambda x, **k: L.norm(x, **k), lambda x, ord=None, dim=None, keepdim=False:
           np.linalg.norm(x, ord, dim, keepdim) if dim is not None or ord is not None else np.linalg.norm(x.ravel()),
           lambda rng: [Sample((floats(rng, 2, 3) + 2,)), Sample((svd_input(rng, 2, 3),), {"ord": 2}),
                        Sample((floats(rng, 2, 3) + 2,), {"dim": 1})]),
]


def _np_vnorm(x, ord, dim, keepdim):
    """The definition, unscaled (the samples are moderate; tests/ops/test_linalg.py covers extremes)."""
    dim = None if dim is None else (dim,) if isinstance(dim, int) else tuple(dim)
    a = np.abs(x)
    if ord == float("inf"):
        return np.max(a, axis=dim, keepdims=keepdim)
    if ord == -float("inf"):
        return np.min(a, axis=dim, keepdims=keepdim)
    if ord == 0:
        return np.sum(a != 0, axis=dim, keepdims=keepdim).astype(x.dtype)
    return np.sum(a ** ord, axis=dim, keepdims=keepdim) ** (1.0 / ord)
