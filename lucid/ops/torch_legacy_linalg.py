"""PyTorch's legacy top-level linear algebra: ``torch.svd``, ``qr``, ``lu``, ``lu_unpack``,
``lu_solve``, ``cholesky*``, ``triangular_solve``, ``logdet`` and the aliases ``det``,
``inverse``, ``slogdet``, ``matrix_power``, ``pinverse``.

These predate ``torch.linalg`` and differ from it: ``svd`` returns V (not Vh) and zero-filled
factors without ``compute_uv``, the solves take the right-hand side first, ``triangular_solve``
also returns a copy of A. Each composes ``lucid.linalg`` (so the rules are linalg's); where
PyTorch warns that a function is deprecated, Lucid warns too. Attached as Tensor methods where
the Tensor had none (``lu``, ``qr``, ``svd``, ``logdet``, ``cholesky_inverse``,
``cholesky_solve``, ``triangular_solve``, ``lu_solve``).
"""
from __future__ import annotations

import collections
import warnings

import numpy as np

from .._core.primitive import autocast_composite, bind
from .._core.tensor import Tensor, tensor_method
from ._family import _as_tensor

SVDResult = collections.namedtuple("svd", ["U", "S", "V"])
QRResult = collections.namedtuple("qr", ["Q", "R"])
LUWithInfo = collections.namedtuple("_lu_with_info", ["LU", "pivots", "info"])
LUUnpackResult = collections.namedtuple("lu_unpack", ["P", "L", "U"])
TriangularSolveResult = collections.namedtuple("triangular_solve", ["solution", "cloned_coefficient"])


def _L():
    import lucid

    return lucid


def _deprecated(message):
    warnings.warn(message, UserWarning, stacklevel=3)


def _linalg():
    from .. import linalg

    return linalg


def _matrix(A, op, what="input"):
    A = _as_tensor(A)
    if A.dtype.kind not in "fc":
        raise RuntimeError(f"{op}: expected {what} to be a floating point or complex tensor, got {A.dtype}")
    if A.ndim < 2:
        raise RuntimeError(f"{op}: expected {what} to have at least 2 dimensions, got shape {tuple(A.shape)}")
    return A


def _same_dtype(a, b, op, na, nb):
    if a.dtype != b.dtype:
        raise RuntimeError(f"{op}: expected {na} and {nb} to have the same dtype, got {a.dtype} and {b.dtype}")


def _mH(A):
    return A.mT.conj() if A.dtype.kind == "c" else A.mT


def svd(input, some=True, compute_uv=True):
    """``(U, S, V)`` with ``input = U diag(S) V^H`` (V, where :func:`lucid.linalg.svd` returns
    ``Vh``). ``some``: the reduced factors (else square U and V). Without ``compute_uv`` only
    S is computed and U, V are zero-filled, of shapes (m, m) and (n, n), as in PyTorch.

    Examples
    --------
    >>> import lucid
    >>> U, S, V = lucid.svd(lucid.tensor([[3.0, 0.0], [0.0, -2.0]]))
    >>> S
    tensor([3., 2.])
    >>> (U @ lucid.diag(S) @ V.mT).tolist()
    [[3.0, 0.0], [0.0, -2.0]]
    """
    A = _matrix(input, "svd")
    if not compute_uv:
        L, (m, n), batch = _L(), A.shape[-2:], tuple(A.shape[:-2])
        zeros = lambda k: L.zeros(batch + (k, k), dtype=A.dtype, device=A.device)  # noqa: E731
        return SVDResult(zeros(m), _linalg().svdvals(A), zeros(n))
    U, S, Vh = _linalg().svd(A, full_matrices=not some)
    return SVDResult(U, S, _mH(Vh))


def qr(input, some=True):
    """``(Q, R)`` with ``input = Q R`` (``some``: reduced, else complete). Deprecated in
    PyTorch, which warns: use :func:`lucid.linalg.qr` with ``mode``.

    Examples
    --------
    >>> import lucid, warnings
    >>> with warnings.catch_warnings():
    ...     warnings.simplefilter("ignore")
    ...     Q, R = lucid.qr(lucid.tensor([[0.0, 2.0], [1.0, 0.0]]))
    >>> (Q @ R).tolist()
    [[0.0, 2.0], [1.0, 0.0]]
    """
    _deprecated("qr is deprecated in favor of lucid.linalg.qr (as in PyTorch): Q, R = qr(A, some) should be "
                "replaced with Q, R = lucid.linalg.qr(A, 'reduced' if some else 'complete')")
    Q, R = _linalg().qr(_matrix(input, "qr"), "reduced" if some else "complete")
    return QRResult(Q, R)


def lu(A, pivot=True, get_infos=False):
    """LAPACK's compact LU factorization ``(LU, pivots)``, and ``infos`` with ``get_infos``
    (:func:`lucid.linalg.lu_factor_ex`). Deprecated in PyTorch, which warns.

    Examples
    --------
    >>> import lucid, warnings
    >>> with warnings.catch_warnings():
    ...     warnings.simplefilter("ignore")
    ...     LU, piv = lucid.lu(lucid.tensor([[1.0, 2.0], [3.0, 4.0]]))
    >>> piv
    tensor([2, 2], dtype=lucid.int32)
    """
    _deprecated("lu is deprecated in favor of lucid.linalg.lu_factor / lucid.linalg.lu_factor_ex (as in "
                "PyTorch)")
    A = _matrix(A, "lu")
    if not pivot:
        raise RuntimeError("lu: LU without pivoting is not implemented on the CPU (as in PyTorch)")
    LU, piv, info = _linalg().lu_factor_ex(A)
    return LUWithInfo(LU, piv, info) if get_infos else (LU, piv)


def lu_unpack(LU_data, LU_pivots, unpack_data=True, unpack_pivots=True):
    """``(P, L, U)`` from :func:`lu`'s compact ``LU_data`` and int32 ``LU_pivots``, with
    ``A = P L U``; a factor not unpacked is an empty tensor.

    Examples
    --------
    >>> import lucid
    >>> A = lucid.tensor([[1.0, 2.0], [3.0, 4.0]])
    >>> P, L, U = lucid.lu_unpack(*lucid.linalg.lu_factor(A))
    >>> P
    tensor([[0., 1.],
            [1., 0.]])
    >>> (P @ L @ U).tolist()
    [[1.0, 2.0], [3.0, 4.0]]
    """
    L = _L()
    LU = _matrix(LU_data, "lu_unpack", "LU_data")
    piv = _as_tensor(LU_pivots)
    m, n = LU.shape[-2:]
    k = min(m, n)
    if piv.dtype != L.int32:
        raise RuntimeError(f"lu_unpack: LU_pivots should be an int32 tensor (as lu_factor returns), got {piv.dtype}")
    if tuple(piv.shape) != tuple(LU.shape[:-2]) + (k,):
        raise RuntimeError(f"lu_unpack: LU_pivots of shape {tuple(piv.shape)} does not match LU_data of shape "
                           f"{tuple(LU.shape)} (expected {tuple(LU.shape[:-2]) + (k,)})")
    on_host = type(piv) is Tensor and piv._data.__class__ is np.ndarray  # a device would read back
    if on_host and piv.numel() and bool(((piv < 1) | (piv > m)).any()):
        raise RuntimeError(f"lu_unpack: pivots must be between 1 and LU_data.size(-2) = {m} inclusive")
    empty = L.zeros(0, dtype=LU.dtype, device=LU.device)
    Lm = Um = P = empty
    if unpack_data:
        Lm = LU[..., :, :k].tril(-1) + L.eye(m, k, dtype=LU.dtype, device=LU.device)
        Um = LU[..., :k, :].triu()
    if unpack_pivots:
        if m > k:  # rows past the last pivot stay in place
            rest = L.arange(k + 1, m + 1, dtype=L.int32, device=piv.device).expand(tuple(piv.shape[:-1]) + (m - k,))
            piv = L.cat([piv, rest], dim=-1)
        from .linalg_solvers import pivots_matrix_p

        P = bind(pivots_matrix_p, (piv,), {"dtype": LU.dtype})
    return LUUnpackResult(P, Lm, Um)


@autocast_composite("lu_solve")  # NOTE [Autocast]
def lu_solve(b, LU_data, LU_pivots):
    """Solve ``A X = b`` from :func:`lu`'s factorization of ``A`` (the right-hand side first:
    :func:`lucid.linalg.lu_solve` takes it last). Deprecated in PyTorch, which warns.

    Examples
    --------
    >>> import lucid, warnings
    >>> LU, piv = lucid.linalg.lu_factor(lucid.tensor([[2.0, 0.0], [0.0, 4.0]]))
    >>> with warnings.catch_warnings():
    ...     warnings.simplefilter("ignore")
    ...     lucid.lu_solve(lucid.tensor([[2.0], [2.0]]), LU, piv)
    tensor([[1. ],
            [0.5]])
    """
    _deprecated("lu_solve is deprecated in favor of lucid.linalg.lu_solve (as in PyTorch), which takes its "
                "arguments reversed: lu_solve(B, LU, pivots) == lucid.linalg.lu_solve(LU, pivots, B)")
    B, LU = _matrix(b, "lu_solve", "b"), _matrix(LU_data, "lu_solve", "LU_data")
    _same_dtype(B, LU, "lu_solve", "b", "LU_data")
    return _linalg().lu_solve(LU, LU_pivots, B)


def cholesky(input, upper=False):
    """The Cholesky factor of a Hermitian positive-definite ``input``: lower ``L`` with
    ``A = L L^H``, or upper ``U`` with ``A = U^H U``. Deprecated in PyTorch, which warns.

    Examples
    --------
    >>> import lucid, warnings
    >>> with warnings.catch_warnings():
    ...     warnings.simplefilter("ignore")
    ...     lucid.cholesky(lucid.tensor([[4.0, 2.0], [2.0, 2.0]]))
    tensor([[2., 0.],
            [1., 1.]])
    """
    _deprecated("cholesky is deprecated in favor of lucid.linalg.cholesky (as in PyTorch): U = cholesky(A, "
                "upper=True) should be replaced with U = lucid.linalg.cholesky(A).mH")
    return _linalg().cholesky(_matrix(input, "cholesky"), upper=bool(upper))


@autocast_composite("cholesky_solve")  # NOTE [Autocast]
def cholesky_solve(B, L, upper=False):
    """Solve ``A X = B`` for ``A = L L^H`` (or ``U^H U`` with ``upper``) from its Cholesky
    factor. Only the factor's lower (upper) triangle is read, and gets a gradient.

    Examples
    --------
    >>> import lucid
    >>> lucid.cholesky_solve(lucid.tensor([[4.0], [2.0]]), lucid.tensor([[2.0, 0.0], [0.0, 1.0]]))
    tensor([[1.],
            [2.]])
    """
    B, F = _matrix(B, "cholesky_solve", "B"), _matrix(L, "cholesky_solve", "L")
    _same_dtype(B, F, "cholesky_solve", "B", "L")
    if F.shape[-1] != F.shape[-2] or B.shape[-2] != F.shape[-1]:
        raise RuntimeError(f"cholesky_solve: incompatible shapes of B {tuple(B.shape)} and L {tuple(F.shape)}")
    st = _linalg().solve_triangular
    if upper:  # A = U^H U: X = U^-1 U^-H B
        return st(F, st(_mH(F), B, upper=False), upper=True)
    return st(_mH(F), st(F, B, upper=False), upper=True)


@autocast_composite("cholesky_inverse")  # NOTE [Autocast]
def cholesky_inverse(L, upper=False):
    """``A^-1`` for ``A = L L^H`` (or ``U^H U`` with ``upper``) from its Cholesky factor.
    Only the factor's lower (upper) triangle is read.

    Examples
    --------
    >>> import lucid
    >>> lucid.cholesky_inverse(lucid.tensor([[2.0, 0.0], [0.0, 1.0]]))
    tensor([[0.25, 0.  ],
            [0.  , 1.  ]])
    """
    F = _matrix(L, "cholesky_inverse", "L")
    if F.shape[-1] != F.shape[-2]:
        raise RuntimeError(f"cholesky_inverse: expected square matrices, got shape {tuple(F.shape)}")
    eye = _L().eye(F.shape[-1], dtype=F.dtype, device=F.device)
    return cholesky_solve(eye, F, upper)


@autocast_composite("triangular_solve")  # NOTE [Autocast]
def triangular_solve(b, A, upper=True, transpose=False, unitriangular=False):
    """``(solution, cloned_coefficient)``: ``X`` with ``A X = b`` (``A^T X = b`` with
    ``transpose``, no conjugation) for a triangular ``A`` (only its ``upper`` or lower
    triangle is read), and a copy of ``A`` broadcast to the batch. Deprecated in PyTorch,
    which warns: use :func:`lucid.linalg.solve_triangular` (arguments reversed).

    Examples
    --------
    >>> import lucid, warnings
    >>> A = lucid.tensor([[2.0, 1.0], [0.0, 4.0]])
    >>> with warnings.catch_warnings():
    ...     warnings.simplefilter("ignore")
    ...     lucid.triangular_solve(lucid.tensor([[3.0], [4.0]]), A).solution
    tensor([[1.],
            [1.]])
    """
    _deprecated("triangular_solve is deprecated in favor of lucid.linalg.solve_triangular (as in PyTorch), "
                "which takes its arguments reversed and returns no copy of A")
    B, M = _matrix(b, "triangular_solve", "b"), _matrix(A, "triangular_solve", "A")
    _same_dtype(B, M, "triangular_solve", "b", "A")
    op = M.mT if transpose else M
    X = _linalg().solve_triangular(op, B, upper=bool(upper) != bool(transpose), unitriangular=bool(unitriangular))
    return TriangularSolveResult(X, M.expand(tuple(X.shape[:-2]) + tuple(M.shape[-2:])).clone())


def logdet(input):
    """``log(det(A))``: NaN where a real determinant is negative, ``-inf`` where it is 0.
    Real inputs go through :func:`lucid.linalg.slogdet` (no overflow of the determinant).

    Examples
    --------
    >>> import lucid
    >>> lucid.logdet(lucid.tensor([[2.0, 0.0], [0.0, 3.0]]))
    tensor(1.7917595)
    """
    A = _matrix(input, "logdet")
    if A.dtype.kind == "c":
        return _L().log(_linalg().det(A))
    sign, logabs = _linalg().slogdet(A)
    return _L().where(sign < 0, float("nan"), logabs)


def det(input):
    """The determinant (:func:`lucid.linalg.det`).

    Examples
    --------
    >>> import lucid
    >>> lucid.det(lucid.tensor([[2.0, 1.0], [1.0, 3.0]]))
    tensor(5.)
    """
    return _linalg().det(input)


def inverse(input):
    """The matrix inverse (:func:`lucid.linalg.inv`).

    Examples
    --------
    >>> import lucid
    >>> lucid.inverse(lucid.tensor([[2.0, 0.0], [0.0, 4.0]]))
    tensor([[0.5 , 0.  ],
            [0.  , 0.25]])
    """
    return _linalg().inv(input)


def slogdet(input):
    """``(sign, logabsdet)`` of the determinant (:func:`lucid.linalg.slogdet`).

    Examples
    --------
    >>> import lucid
    >>> lucid.slogdet(lucid.tensor([[-2.0, 0.0], [0.0, 1.0]])).sign
    tensor(-1.)
    """
    return _linalg().slogdet(input)


def matrix_power(input, n):
    """``input`` to the integer power ``n`` (negative: of the inverse).

    Examples
    --------
    >>> import lucid
    >>> lucid.matrix_power(lucid.tensor([[2.0, 0.0], [0.0, 3.0]]), -1)
    tensor([[0.5       , 0.        ],
            [0.        , 0.33333334]])
    """
    return _linalg().matrix_power(input, n)


@tensor_method("pinverse")
def pinverse(input, rcond=1e-15):
    """The pseudo-inverse, singular values below ``rcond`` times the largest taken as zero
    (:func:`lucid.linalg.pinv` with ``rtol=rcond``).

    Examples
    --------
    >>> import lucid
    >>> lucid.pinverse(lucid.tensor([[2.0, 0.0], [0.0, 0.0]]))
    tensor([[0.5, 0. ],
            [0. , 0. ]])
    """
    return _linalg().pinv(input, rtol=rcond)


__all__ = ["cholesky", "cholesky_inverse", "cholesky_solve", "det", "inverse", "logdet", "lu", "lu_solve",
           "lu_unpack", "matrix_power", "pinverse", "qr", "slogdet", "svd", "triangular_solve"]

for _name in ("lu", "qr", "svd", "logdet", "cholesky_inverse", "cholesky_solve", "triangular_solve", "lu_solve"):
    if not hasattr(Tensor, _name):  # methods the Tensor already has stay as they are
        setattr(Tensor, _name, globals()[_name])
