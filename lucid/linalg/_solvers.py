"""lucid.linalg: triangular solves, LU (lu, lu_factor, lu_solve), matrix_exp and LDL^T.

Public wrappers: they validate (errors start with ``linalg.<name>`` and give the shapes)
and bind the primitives of :mod:`lucid.ops.linalg_solvers`, or compose them.
"""
from __future__ import annotations

import collections

import numpy as np

from .._core.backend import namespace_of
from .._core.dtypes import int32
from .._core.primitive import AUTOCAST_HOOK, autocast_composite, bind
from .._core.tensor import Tensor, tensor_method
from ..ops import linalg_solvers as _ops
from ..ops._family import _as_tensor

LUResult = collections.namedtuple("LUResult", ["P", "L", "U"])
LUFactorResult = collections.namedtuple("LUFactorResult", ["LU", "pivots"])
LUFactorExResult = collections.namedtuple("LUFactorExResult", ["LU", "pivots", "info"])
LDLFactorResult = collections.namedtuple("LDLFactorResult", ["LD", "pivots"])
LDLFactorExResult = collections.namedtuple("LDLFactorExResult", ["LD", "pivots", "info"])


class HalfPrecisionError(NotImplementedError, TypeError):
    """A float16 matrix given to a decomposition or solver. PyTorch raises NotImplementedError or
    RuntimeError there (NotImplementedError derives from it); TypeError is what NumPy's refusal
    raised before, so old ``except`` clauses still catch it."""


# float16 paths Lucid has (SciPy's LU and LDL take it; the others are composed): kept
_HALF_OK = frozenset({"lu", "lu_factor", "ldl_factor", "matrix_exp", "householder_product"})


def _no_half(A, op):
    # inside an autocast region the op may be cast to float32 as it binds: let it through
    if A.dtype == np.float16 and op not in _HALF_OK and AUTOCAST_HOOK[0] is None:
        raise HalfPrecisionError(f"linalg.{op}: float16 (Half) matrices are not supported, as in PyTorch; "
                                 f"cast to float32 first (input of shape {tuple(A.shape)})")


def _float_matrix(A, op, what="A", square=False):
    A = _as_tensor(A)
    if A.dtype.kind not in "fc":
        # PyTorch's LU has no integer kernel ("not implemented"); the others check the type
        err = NotImplementedError if op in ("lu", "lu_factor") else RuntimeError  # both are RuntimeErrors
        raise err(f"linalg.{op}: expected {what} to be a floating point tensor, got dtype {A.dtype}")
    _no_half(A, op)
    if A.ndim < 2:
        raise RuntimeError(f"linalg.{op}: {what} must have at least 2 dimensions, got shape {tuple(A.shape)}")
    if square and A.shape[-1] != A.shape[-2]:
        raise RuntimeError(f"linalg.{op}: {what} must be batches of square matrices, but they are "
                           f"{A.shape[-2]} by {A.shape[-1]} matrices (shape {tuple(A.shape)})")
    return A


def _mH(A):
    return A.mT.conj() if A.dtype.kind == "c" else A.mT


def _promote2(A, B):
    from ..ops.elementwise import promote

    return promote(A, B)


def solve_triangular(A, B, *, upper, left=True, unitriangular=False):
    """Solve ``A X = B`` (or ``X A = B`` with ``left=False``) for a triangular ``A``.

    Only the ``upper`` (or lower) triangle of ``A`` is read, and with ``unitriangular`` its
    diagonal is taken to be 1; the gradient of ``A`` lives on that triangle. Batch dims broadcast.

    Parameters
    ----------
    A : Tensor
        (..., n, n).
    B : Tensor
        (..., n, k) (``left``) or (..., k, n).
    upper : bool
        Whether ``A`` is upper (else lower) triangular.
    left : bool
        Solve ``A X = B`` (else ``X A = B``).
    unitriangular : bool
        Assume a unit diagonal.

    Examples
    --------
    >>> import lucid
    >>> A = lucid.tensor([[2.0, 1.0], [0.0, 4.0]])
    >>> lucid.linalg.solve_triangular(A, lucid.tensor([[3.0], [4.0]]), upper=True).tolist()
    [[1.0], [1.0]]
    """
    A = _float_matrix(A, "solve_triangular", square=True)
    B = _float_matrix(B, "solve_triangular", "B")
    A, B = _promote2(A, B)
    if not left:  # X A = B  <=>  A^T X^T = B^T, and A^T's triangle is the other one
        return solve_triangular(A.mT, B.mT, upper=not upper, unitriangular=unitriangular).mT
    if B.shape[-2] != A.shape[-1]:
        raise RuntimeError(f"linalg.solve_triangular: incompatible shapes of A {tuple(A.shape)} and B {tuple(B.shape)}")
    try:
        np.broadcast_shapes(tuple(A.shape[:-2]), tuple(B.shape[:-2]))
    except ValueError:
        raise RuntimeError(f"linalg.solve_triangular: the batch dims of A {tuple(A.shape)} and B {tuple(B.shape)} "
                           f"do not broadcast") from None
    return bind(_ops.solve_triangular_p, (A, B), {"upper": bool(upper), "unitriangular": bool(unitriangular)})


def _lu_all(A, op):
    return bind(_ops.lu_p, (_float_matrix(A, op),), {})


def lu(A, *, pivot=True):
    """LU decomposition with partial pivoting: ``A = P L U`` (L unit lower, U upper).

    Differentiable in ``A`` (square, tall and wide, as in PyTorch).

    Parameters
    ----------
    A : Tensor
        (..., m, n).
    pivot : bool
        Only True (LAPACK always pivots on the CPU, as PyTorch requires there).

    Examples
    --------
    >>> import lucid
    >>> P, L, U = lucid.linalg.lu(lucid.tensor([[1.0, 2.0], [3.0, 4.0]]))
    >>> (P @ L @ U).tolist()
    [[1.0, 2.0], [3.0, 4.0]]
    """
    if not pivot:
        raise RuntimeError("linalg.lu: LU without pivoting is not implemented on the CPU (as in PyTorch)")
    P, L, U, _ = _lu_all(A, "lu")
    return LUResult(P, L, U)


def _compact(L, U):
    """LAPACK's compact LU: the strict lower part of L and U in one (m, n) matrix."""
    from ..ops.creation import eye

    m, k = L.shape[-2:]
    n = U.shape[-1]
    return L.tril(-1) @ eye(k, n, dtype=L.dtype, device=L.device) + eye(m, k, dtype=U.dtype, device=U.device) @ U


@autocast_composite("linalg_lu_factor_ex")  # NOTE [Autocast]: in no list, so its matmuls stay float32
def lu_factor_ex(A, *, pivot=True, check_errors=False):
    """``(LU, pivots, info)``: the compact LU factorization; ``info[i] > 0`` marks an exactly singular U.

    Parameters
    ----------
    A : Tensor
        (..., m, n).
    pivot : bool
        Only True.
    check_errors : bool
        Raise when a matrix is singular.

    Examples
    --------
    >>> import lucid
    >>> lucid.linalg.lu_factor_ex(lucid.tensor([[0.0, 1.0], [0.0, 0.0]])).info.item()
    1
    """
    if not pivot:
        raise RuntimeError("linalg.lu_factor: LU without pivoting is not implemented on the CPU (as in PyTorch)")
    from ..ops.elementwise import where

    _, L, U, piv = _lu_all(A, "lu_factor")
    # info = the first exactly zero pivot (1-based), 0 if none: LAPACK's getrf. Built from ops, so
    # it is per matrix under vmap too.
    if min(U.shape[-2:]) == 0:
        info = _as_tensor(namespace_of(U).zeros(tuple(U.shape[:-2]), np.int32))
    else:
        zero = (_diagonal(U.detach()) == 0).to(int32)
        info = where(zero.amax(-1) > 0, zero.argmax(-1) + 1, 0).to(int32)
    if check_errors:
        if info.__class__ is not Tensor:
            raise RuntimeError("linalg.lu_factor_ex: check_errors=True needs concrete values; it is not supported "
                               "under vmap or other transforms (check the returned info instead)")
        if info.numpy().any():
            k = int(info.numpy().reshape(-1).max())
            raise RuntimeError(f"linalg.lu_factor: U[{k}, {k}] is zero, the factorization cannot be used to solve "
                               f"(input shape {tuple(U.shape)})")
    return LUFactorExResult(_compact(L, U), piv, _as_tensor(info))


def _diagonal(x):
    from . import diagonal

    return diagonal(x)


@autocast_composite("linalg_lu_factor")  # NOTE [Autocast]: in no list, so its matmuls stay float32
def lu_factor(A, *, pivot=True):
    """``(LU, pivots)``: LAPACK's compact LU factorization (1-based int32 pivots).

    ``LU`` is differentiable (through :func:`lu`); use it with :func:`lu_solve`.

    Parameters
    ----------
    A : Tensor
        (..., m, n).
    pivot : bool
        Only True.

    Examples
    --------
    >>> import lucid
    >>> LU, piv = lucid.linalg.lu_factor(lucid.tensor([[1.0, 2.0], [3.0, 4.0]]))
    >>> piv.tolist()
    [2, 2]
    """
    LU, piv, info = lu_factor_ex(A, pivot=pivot)
    # PyTorch's lu_factor refuses a singular matrix (lu_factor_ex reports it). Checked on the CPU
    # only: under a transform info has no value, and on a device reading it back would stall the
    # stream (Lucid's ops read nothing back there); the caller can check lu_factor_ex's info
    if info.__class__ is Tensor and info.device.type == "cpu" and info.numel() and bool((info != 0).any()):
        k = int(info.amax())
        raise RuntimeError(f"linalg.lu_factor: U[{k}, {k}] is zero, the factorization cannot be used to solve "
                           f"(input shape {tuple(LU.shape)}); use linalg.lu_factor_ex to factor singular matrices")
    return LUFactorResult(LU, piv)


def lu_solve(LU, pivots, B, *, left=True, adjoint=False):
    """Solve ``A X = B`` from :func:`lu_factor`'s output (``adjoint``: ``A^H X = B``; ``left=False``: ``X A = B``).

    Differentiable in ``LU`` and ``B``.

    Parameters
    ----------
    LU : Tensor
        (..., n, n) from :func:`lu_factor`.
    pivots : Tensor
        (..., n) int32 from :func:`lu_factor`.
    B : Tensor
        (..., n, k) (or (..., k, n) with ``left=False``).
    left, adjoint : bool
        Which system.

    Examples
    --------
    >>> import lucid
    >>> A = lucid.tensor([[1.0, 2.0], [3.0, 4.0]])
    >>> LU, piv = lucid.linalg.lu_factor(A)
    >>> [round(v, 6) for v in lucid.linalg.lu_solve(LU, piv, lucid.tensor([[5.0], [11.0]])).flatten().tolist()]
    [1.0, 2.0]
    """
    LU = _float_matrix(LU, "lu_solve", "LU", square=True)
    B = _float_matrix(B, "lu_solve", "B")
    pivots = _as_tensor(pivots)
    if pivots.dtype.kind not in "iu" or tuple(pivots.shape[-1:]) != tuple(LU.shape[-1:]):
        raise RuntimeError(f"linalg.lu_solve: pivots must be an integer tensor of shape (..., {LU.shape[-1]}), "
                           f"got dtype {pivots.dtype} and shape {tuple(pivots.shape)}")
    LU, B = _promote2(LU, B)
    from ..ops.creation import eye

    n = LU.shape[-1]
    L = LU.tril(-1) + eye(n, dtype=LU.dtype, device=LU.device)
    U = LU.triu()
    P = bind(_ops.pivots_matrix_p, (pivots,), {"dtype": LU.dtype})
    if left and not adjoint:  # X = U^-1 L^-1 P^T B
        y = solve_triangular(L, P.mT @ B, upper=False, unitriangular=True)
        return solve_triangular(U, y, upper=True)
    if left:  # A^H X = B: X = P L^-H U^-H B
        y = solve_triangular(_mH(U), B, upper=False)
        return P @ solve_triangular(_mH(L), y, upper=True, unitriangular=True)
    if not adjoint:  # X A = B: X = B U^-1 L^-1 P^T
        y = solve_triangular(U, B, upper=True, left=False)
        return solve_triangular(L, y, upper=False, left=False, unitriangular=True) @ P.mT
    y = B @ P  # X A^H = B: X = B P L^-H U^-H
    y = solve_triangular(_mH(L), y, upper=True, left=False, unitriangular=True)
    return solve_triangular(_mH(U), y, upper=False, left=False)


@tensor_method("matrix_exp")
def matrix_exp(A):
    """Matrix exponential ``sum_k A^k / k!`` (SciPy's Pade scaling and squaring), batched.

    The derivative is the Frechet derivative, computed as a block exponential (NOTE [expm Frechet]).

    Parameters
    ----------
    A : Tensor
        (..., n, n).

    Examples
    --------
    >>> import lucid
    >>> lucid.linalg.matrix_exp(lucid.tensor([[0.0, 1.0], [0.0, 0.0]])).tolist()
    [[1.0, 1.0], [0.0, 1.0]]
    """
    return bind(_ops.matrix_exp_p, (_float_matrix(A, "matrix_exp", square=True),), {})


def ldl_factor_ex(A, *, hermitian=False, check_errors=False):
    """``(LD, pivots, info)``: LAPACK's Bunch-Kaufman ``A = L D L^T`` in compact form (no gradient).

    Only the lower triangle of ``A`` is read. ``info > 0``: D is exactly singular.

    Parameters
    ----------
    A : Tensor
        (..., n, n), symmetric (Hermitian with ``hermitian=True``).
    hermitian : bool
        For complex inputs, factor as ``L D L^H``.
    check_errors : bool
        Raise when ``info`` is nonzero.

    Examples
    --------
    >>> import lucid
    >>> LD, piv, info = lucid.linalg.ldl_factor_ex(lucid.tensor([[4.0, 2.0], [2.0, 3.0]]))
    >>> LD.tolist(), piv.tolist(), info.item()
    ([[4.0, 0.0], [0.5, 2.0]], [1, 2], 0)
    """
    A = _float_matrix(A, "ldl_factor", square=True)
    LD, piv, info = bind(_ops.ldl_factor_p, (A,), {"hermitian": bool(hermitian)})
    if check_errors and info.__class__ is Tensor and bool((info.numpy() != 0).any()):
        from ..ops.linalg_decomp import LinAlgError

        raise LinAlgError(f"linalg.ldl_factor: D is exactly singular (info = {info.tolist()}, input shape "
                          f"{tuple(A.shape)})")
    return LDLFactorExResult(LD, piv, info)


def ldl_factor(A, *, hermitian=False):
    """``(LD, pivots)`` of LAPACK's ``A = L D L^T`` (see :func:`ldl_factor_ex`); raises if D is singular.

    Parameters
    ----------
    A : Tensor
        (..., n, n), symmetric.
    hermitian : bool
        For complex inputs, factor as ``L D L^H``.

    Examples
    --------
    >>> import lucid
    >>> lucid.linalg.ldl_factor(lucid.tensor([[4.0, 2.0], [2.0, 3.0]])).pivots.tolist()
    [1, 2]
    """
    LD, piv, _ = ldl_factor_ex(A, hermitian=hermitian, check_errors=True)
    return LDLFactorResult(LD, piv)


def ldl_solve(LD, pivots, B, *, hermitian=False):
    """Solve ``A X = B`` from :func:`ldl_factor`'s output (no gradient, as in PyTorch).

    Parameters
    ----------
    LD : Tensor
        (..., n, n).
    pivots : Tensor
        (..., n) int32.
    B : Tensor
        (..., n, k).
    hermitian : bool
        As given to :func:`ldl_factor`.

    Examples
    --------
    >>> import lucid
    >>> A = lucid.tensor([[4.0, 2.0], [2.0, 3.0]])
    >>> LD, piv = lucid.linalg.ldl_factor(A)
    >>> lucid.linalg.ldl_solve(LD, piv, lucid.tensor([[6.0], [5.0]])).tolist()
    [[1.0], [1.0]]
    """
    LD = _float_matrix(LD, "ldl_solve", "LD", square=True)
    B = _float_matrix(B, "ldl_solve", "B")
    pivots = _as_tensor(pivots)
    if B.shape[-2] != LD.shape[-1] or tuple(pivots.shape[-1:]) != tuple(LD.shape[-1:]):
        raise RuntimeError(f"linalg.ldl_solve: incompatible shapes of LD {tuple(LD.shape)}, pivots "
                           f"{tuple(pivots.shape)} and B {tuple(B.shape)}")
    LD, B = _promote2(LD, B)
    return bind(_ops.ldl_solve_p, (LD, pivots.to(int32) if pivots.dtype != np.int32 else pivots, B),
                {"hermitian": bool(hermitian)})


__all__ = ["solve_triangular", "lu", "lu_factor", "lu_factor_ex", "lu_solve", "matrix_exp", "ldl_factor",
           "ldl_factor_ex", "ldl_solve"]
