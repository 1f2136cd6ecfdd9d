"""lucid.linalg: linear algebra (inv, det, solve, cholesky, qr, eigh, svd, norms ...).

Thin public wrappers: they validate shapes (errors start with ``linalg.<name>`` and give
the shape), then bind the primitives of :mod:`lucid.ops.linalg` (which carry the vjp,
jvp and batching rules) or compose them. Everything maps over leading batch dims.

Limitations: real inputs only; gradients of ``eigh`` / ``svd`` assume distinct
eigen/singular values (as PyTorch's); ``qr`` has no gradient for mode 'r' or for 'complete'
with more rows than columns (as PyTorch). ``det``/``slogdet`` are differentiable at singular
inputs (NOTE [Adjugate]).
"""
from __future__ import annotations

import collections
import math

import numpy as np

from .._core import dtypes
from .._core.primitive import autocast_composite, bind
from .._core.tensor import Tensor, tensor_method
from ..ops import linalg as _ops
from ..ops import linalg_norm as _norm
from ..ops._family import _as_tensor, normalize_axis
from ..ops.linalg import matmul  # noqa: F401  (lucid.linalg.matmul, like torch)
from ..ops.linalg import dot, outer  # noqa: F401  (Lucid 3's lucid.linalg.dot / outer; NOTE [Lucid 3 names])
from ..ops.linalg_decomp import LinAlgError  # noqa: F401
from ._solvers import HalfPrecisionError, _no_half  # noqa: F401
from ._solvers import (LDLFactorExResult, LDLFactorResult, LUFactorExResult, LUFactorResult,  # noqa: F401
                       LUResult, ldl_factor, ldl_factor_ex, ldl_solve, lu, lu_factor, lu_factor_ex, lu_solve,
                       matrix_exp, solve_triangular)
from ._more import (CholeskyExResult, EigResult, InvExResult, LstsqResult, SolveExResult,  # noqa: F401
                    cholesky_ex, cond, cross, diagonal, eig, eigvals, householder_product, inv_ex, lstsq,
                    matrix_rank, multi_dot, solve_ex, tensorinv, tensorsolve, vander, vecdot)
from ..ops.numpy_aliases import numpy_axis, numpy_keepdims

SlogdetResult = collections.namedtuple("SlogdetResult", ["sign", "logabsdet"])
QRResult = collections.namedtuple("QRResult", ["Q", "R"])
EighResult = collections.namedtuple("EighResult", ["eigenvalues", "eigenvectors"])
SVDResult = collections.namedtuple("SVDResult", ["U", "S", "Vh"])


def _float(A, op):
    A = _as_tensor(A)
    if A.dtype.kind not in "fc":
        # PyTorch has no integer kernel for eigh ("not implemented"), and a type check elsewhere
        err = NotImplementedError if op == "eigh" else RuntimeError  # both are RuntimeErrors
        raise err(f"linalg.{op}: expected a floating point tensor, got dtype {A.dtype}")
    return A


def _norm_input_in(x, dtype, op):
    """``x`` converted to a norm's ``dtype=``, after PyTorch's checks: a floating input, a dtype
    of the same kind (real or complex), and no narrowing (float32 -> float16 is refused)."""
    from .._core import dtypes

    x, dt = _float(x, op), dtypes.to_dtype(dtype)
    if dtypes.kind_of(dt) not in "fc":
        raise RuntimeError(f"linalg.{op}: dtype should be floating point or complex, but got {dtype}")
    if (dt.kind == "c") != (x.dtype.kind == "c"):
        raise RuntimeError(f"linalg.{op}: dtype should be {'complex' if x.dtype.kind == 'c' else 'real'} for "
                           f"{'complex' if x.dtype.kind == 'c' else 'real'} inputs, but got {dtype}")
    if not np.can_cast(dtypes.to_dtype(x.dtype), dt, "safe"):
        raise RuntimeError(f"linalg.{op}: the dtype of the input ({x.dtype}) should be convertible without "
                           f"narrowing to the specified dtype ({dtype})")
    return x.to(dtype)


def _matrix(A, op, square=False):
    A = _float(A, op)
    _no_half(A, op)
    if A.ndim < 2:
        raise RuntimeError(f"linalg.{op}: the input must have at least 2 dimensions, got shape {tuple(A.shape)}")
    if square and A.shape[-1] != A.shape[-2]:
        raise RuntimeError(f"linalg.{op}: A must be batches of square matrices, but they are "
                           f"{A.shape[-2]} by {A.shape[-1]} matrices (shape {tuple(A.shape)})")
    return A


@tensor_method("inverse")
def inv(A):
    """Inverse of a square matrix (or a batch of them).

    Parameters
    ----------
    A : Tensor
        A matrix or a batch of them, (..., n, n).

    Examples
    --------
    >>> import lucid
    >>> lucid.linalg.inv(lucid.tensor([[2.0, 0.0], [0.0, 4.0]])).tolist()
    [[0.5, 0.0], [0.0, 0.25]]
    """
    return bind(_ops.inv_p, (_matrix(A, "inv", True),), {})


@tensor_method("det")
def det(A):
    """Determinant of a square matrix (batched); its gradient is the adjugate, finite when singular.

    Parameters
    ----------
    A : Tensor
        A matrix or a batch of them, (..., n, n).

    Examples
    --------
    >>> import lucid
    >>> round(lucid.linalg.det(lucid.tensor([[1.0, 2.0], [3.0, 4.0]])).item(), 4)
    -2.0
    """
    return bind(_ops.det_p, (_matrix(A, "det", True),), {})


@tensor_method("slogdet")
def slogdet(A):
    """``(sign, logabsdet)`` with ``det(A) = sign * exp(logabsdet)``; only ``logabsdet`` has a gradient.

    Parameters
    ----------
    A : Tensor
        A matrix or a batch of them, (..., n, n).

    Examples
    --------
    >>> import lucid
    >>> s, l = lucid.linalg.slogdet(lucid.tensor([[-2.0, 0.0], [0.0, 1.0]]))
    >>> s.item(), round(l.item(), 4)
    (-1.0, 0.6931)
    """
    return SlogdetResult(*bind(_ops.slogdet_p, (_matrix(A, "slogdet", True),), {}))


def solve(A, B, *, left=True):
    """Solve ``A X = B`` (``B`` of shape (..., n, k) or (n,)); batch dims broadcast.

    Parameters
    ----------
    A : Tensor
        A matrix or a batch of them, (..., n, n).
    B : Tensor
        (..., n, k) or (..., n).
    left : bool
        Solve ``A X = B`` (else ``X A = B``).

    Examples
    --------
    >>> import lucid
    >>> lucid.linalg.solve(lucid.tensor([[2.0, 0.0], [0.0, 4.0]]), lucid.tensor([2.0, 2.0])).tolist()
    [1.0, 0.5]
    """
    from ..ops.elementwise import promote

    if not left:  # X A = B  <=>  A^T X^T = B^T
        A, B = _as_tensor(A), _as_tensor(B)
        if B.ndim == 1 or (B.ndim == A.ndim - 1 and tuple(B.shape) == tuple(A.shape[:-1])):
            n = A.shape[-1] if A.ndim else 0
            raise RuntimeError(f"linalg.solve: Incompatible shapes of A and B for the equation XA = B "
                               f"({n}x{n} and {B.shape[-1]}x1): a vector B needs left=True")
        return solve(A.mT, B.mT).mT
    A = _matrix(A, "solve", True)
    A, B = promote(A, _float(B, "solve"))
    vec = B.ndim == 1 or (B.ndim == A.ndim - 1 and tuple(B.shape) == tuple(A.shape[:-1]))
    if vec:
        B = B.unsqueeze(-1)
    if B.ndim < 2 or B.shape[-2] != A.shape[-1]:
        raise RuntimeError(f"linalg.solve: incompatible shapes of A {tuple(A.shape)} and B {tuple(B.shape)}")
    X = bind(_ops.solve_p, (A, B), {})
    return X.squeeze(-1) if vec else X


@tensor_method("cholesky")
def cholesky(A, *, upper=False):
    """Cholesky factor ``L`` (lower) with ``A = L L^T``, of a symmetric positive-definite ``A``.

    Only the lower triangle of ``A`` is read (the upper one with ``upper=True``, as PyTorch);
    the gradient is symmetric.

    Parameters
    ----------
    A : Tensor
        A matrix or a batch of them, (..., n, n). Symmetric positive-definite.
    upper : bool
        Return the upper factor ``U = L^H`` (``A = U^H U``).

    Examples
    --------
    >>> import lucid
    >>> lucid.linalg.cholesky(lucid.tensor([[4.0, 2.0], [2.0, 2.0]])).tolist()
    [[2.0, 0.0], [1.0, 1.0]]
    """
    A = _matrix(A, "cholesky", True)
    if upper:  # PyTorch (LAPACK uplo='U') reads the upper triangle: the lower one of A^H
        A = A.mT.conj() if A.dtype.kind == "c" else A.mT
    L = bind(_ops.cholesky_p, (A,), {})
    if upper:  # U = L^H (PyTorch's; the conjugate matters for complex A)
        return L.mT.conj() if L.dtype.kind == "c" else L.mT
    return L


def qr(A, mode="reduced"):
    """QR decomposition ``A = Q R`` with ``mode`` 'reduced', 'complete' or 'r' (as PyTorch).

    'reduced': Q (..., m, k), R (..., k, n), k = min(m, n); 'complete': Q (..., m, m),
    R (..., m, n); 'r': an empty Q and R only. Gradients as PyTorch: every shape for
    'reduced' (and 'complete' with m <= n, where it is the same); 'r' and 'complete'
    with m > n raise when differentiated.

    Parameters
    ----------
    A : Tensor
        (..., m, n).
    mode : {'reduced', 'complete', 'r'}
        Which factors to return.

    Examples
    --------
    >>> import lucid
    >>> Q, R = lucid.linalg.qr(lucid.ones(3, 2))
    >>> Q.shape, R.shape
    ((3, 2), (2, 2))
    >>> lucid.linalg.qr(lucid.ones(3, 2), mode="complete").Q.shape
    (3, 3)
    """
    if mode not in ("reduced", "complete", "r"):
        raise RuntimeError(f"linalg.qr: mode must be 'reduced', 'complete' or 'r', got {mode!r}")
    Q, R = bind(_ops.qr_p, (_matrix(A, "qr"),), {"mode": mode})
    return QRResult(Q.reshape((0,)) if mode == "r" else Q, R)  # PyTorch's Q is empty, shape (0,)


def eigh(A, UPLO="L"):
    """Eigenvalues (ascending) and eigenvectors of a symmetric matrix (lower triangle read).

    Gradients as PyTorch's: at exactly repeated eigenvalues a loss that uses the
    eigenvectors gets an inf/nan gradient (the rule divides by the eigenvalue gaps), while
    a loss of the eigenvalues alone keeps its exact gradient (NOTE [Spectral ties]).

    Parameters
    ----------
    A : Tensor
        A matrix or a batch of them, (..., n, n). Symmetric.
    UPLO : {'L', 'U'}
        Which triangle is read.

    Examples
    --------
    >>> import lucid
    >>> lucid.linalg.eigh(lucid.tensor([[2.0, 0.0], [0.0, 1.0]])).eigenvalues.tolist()
    [1.0, 2.0]
    """
    A = _matrix(A, "eigh", True)
    if not isinstance(UPLO, str) or UPLO.upper() not in ("L", "U"):  # PyTorch takes 'l' and 'u' too
        raise RuntimeError(f"linalg.eigh: Expected UPLO argument to be 'L' or 'U', but got {UPLO!r}")
    if UPLO.upper() == "U":
        # the lower triangle of A^H is the Hermitian matrix the upper one of A stands for (A^T's
        # would be its conjugate: the same eigenvalues, conjugated eigenvectors)
        A = A.mT.conj() if A.dtype.kind == "c" else A.mT
    return EighResult(*bind(_ops.eigh_p, (A,), {}))


def eigvalsh(A, UPLO="L"):
    """Eigenvalues (ascending) of a symmetric matrix.

    Parameters
    ----------
    A : Tensor
        A matrix or a batch of them, (..., n, n). Symmetric.
    UPLO : {'L', 'U'}
        Which triangle is read.

    Examples
    --------
    >>> import lucid
    >>> lucid.linalg.eigvalsh(lucid.tensor([[2.0, 0.0], [0.0, 1.0]])).tolist()
    [1.0, 2.0]
    """
    return eigh(A, UPLO).eigenvalues


def _check_svd_driver(op, A, driver):
    # PyTorch takes driver= on CUDA only (cuSOLVER's algorithms); on a device Lucid accepts the
    # same names and computes the same decomposition with its backend's one routine
    if driver is None:
        return
    if A.device.type in ("cpu", "meta"):
        raise RuntimeError(f"linalg.{op}: keyword argument `driver=` is only supported on CUDA inputs with "
                           f"cuSOLVER backend (got driver={driver!r} for a {A.device.type} tensor)")
    if driver not in ("gesvd", "gesvdj", "gesvda"):
        raise RuntimeError(f"linalg.{op}: driver must be one of None, 'gesvd', 'gesvdj' or 'gesvda', got {driver!r}")


def svd(A, full_matrices=True, *, driver=None):
    """SVD ``A = U diag(S) Vh``; ``full_matrices=True`` (PyTorch's default) gives square U and Vh.

    Gradients as PyTorch's: at exactly repeated singular values (or zero ones when the matrix
    is not square) a loss that uses U or Vh gets an inf/nan gradient, while a loss of S alone
    keeps its exact gradient ``U diag(g) Vh`` (NOTE [Spectral ties]).

    For a non-square input with ``full_matrices=True`` the extra columns of U (rows of Vh) are
    an arbitrary basis of a complement: as in PyTorch, gradients flow through the first
    ``min(m, n)`` only (the cotangent of the extra ones is ignored, their tangent is zero).

    Parameters
    ----------
    A : Tensor
        (..., m, n).
    full_matrices : bool
        U (..., m, m) and Vh (..., n, n) if True, else (..., m, k) and (..., k, n), k = min(m, n).
    driver : {None, 'gesvd', 'gesvdj', 'gesvda'}
        cuSOLVER's algorithm in PyTorch: only on a device (the result is the same), None on the CPU.

    Examples
    --------
    >>> import lucid
    >>> lucid.linalg.svd(lucid.tensor([[3.0, 0.0], [0.0, -2.0]])).S.tolist()
    [3.0, 2.0]
    >>> lucid.linalg.svd(lucid.ones(3, 2)).U.shape
    (3, 3)
    """
    A = _matrix(A, "svd")
    _check_svd_driver("svd", A, driver)
    full = full_matrices and A.shape[-1] != A.shape[-2]
    return SVDResult(*bind(_ops.svd_p, (A,), {"full_matrices": True} if full else {}))


def svdvals(A, *, driver=None):
    """Singular values (descending); the gradient is ``U diag(g) Vh``.

    Parameters
    ----------
    A : Tensor
        (..., m, n).
    driver : None
        As :func:`svd`'s.

    Examples
    --------
    >>> import lucid
    >>> lucid.linalg.svdvals(lucid.tensor([[3.0, 0.0], [0.0, -2.0]])).tolist()
    [3.0, 2.0]
    """
    A = _matrix(A, "svdvals")
    _check_svd_driver("svdvals", A, driver)
    return bind(_ops.svdvals_p, (A,), {})


# ----------------------------------------------------------------------- norms

class ArgumentTypeError(TypeError, RuntimeError):
    """An argument of the wrong type where PyTorch raises TypeError and Lucid raised
    RuntimeError before: both ``except`` clauses catch it."""


def _dims(dim, nd, op):
    if dim is None:
        return tuple(range(nd))
    dims = (dim,) if isinstance(dim, int) else tuple(dim)
    return tuple(normalize_axis(d, nd, f"linalg.{op}") for d in dims)


def vector_norm(x, ord=2, dim=None, keepdim=False, *, dtype=None, axis=None, keepdims=None):
    """Vector ``ord``-norm over ``dim`` (all dims by default): inf, -inf, 0, or any real p.

    Scaled like LAPACK's ``nrm2`` (NOTE [Scaled norms]): no overflow or underflow anywhere in
    the float range. The gradient is 0 at the zero vector and at zero entries (PyTorch's values).

    Parameters
    ----------
    x : Tensor
        Floating point.
    ord : number
        inf, -inf, 0 or any real p.
    dim : int or tuple of int, optional
        The dims to reduce (default: all).
    keepdim : bool
        Keep reduced dims with size 1.
    dtype : dtype, optional
        Compute in to this dtype first.

    Examples
    --------
    >>> import lucid
    >>> lucid.linalg.vector_norm(lucid.tensor([3.0, -4.0])).item()
    5.0
    >>> lucid.linalg.vector_norm(lucid.tensor([3.0, -4.0]), ord=float("inf")).item()
    4.0
    """
    if axis is not None:  # See NOTE [NumPy keyword aliases]
        dim = numpy_axis("vector_norm", dim, axis, None)
    if keepdims is not None:
        keepdim = numpy_keepdims("vector_norm", keepdim, keepdims)
    from ..ops import elementwise as E
    from ..ops import reduce as R

    x = _float(x, "vector_norm") if dtype is None else _norm_input_in(x, dtype, "vector_norm")
    if not isinstance(ord, (int, float)):  # PyTorch's TypeError; RuntimeError is Lucid's earlier type
        raise ArgumentTypeError(f"linalg.vector_norm: ord must be a number (inf, -inf, 0 or any real p), got "
                                f"{ord!r} for an input of shape {tuple(x.shape)}")
    ord = float(ord) if isinstance(ord, bool) else ord  # a bool is a Number to PyTorch (True: 1)
    # an empty dim list reduces over every dim, as PyTorch's (and as sum's)
    axes = _dims(dim, x.ndim, "vector_norm") or tuple(range(x.ndim))
    if x.ndim == 0:  # dim 0 / -1 of a scalar is the scalar itself: a norm over one element
        return vector_norm(x.reshape(1), ord, 0, False)
    if ord < 0 or ord == math.inf:
        empty = [a for a in axes if x.shape[a] == 0]
        if empty:  # min, max and negative powers have no value over nothing (PyTorch's error)
            raise RuntimeError(f"linalg.vector_norm cannot compute the {ord} norm on the dimension {empty[0]} "
                               f"because this dimension is empty and the operation does not have an identity "
                               f"(input of shape {tuple(x.shape)})")
    if ord == math.inf:
        return R.amax(E.abs(x), axes, keepdim)
    if ord == -math.inf:
        return R.amin(E.abs(x), axes, keepdim)
    if ord == 0:
        # x != 0 counts NaN as nonzero (as PyTorch); adding sign(|x|) * 0, which has a zero
        # derivative, keeps the count in the graph (zero gradients, as PyTorch), real for complex x
        a = E.abs(x)
        return R.sum((x != 0).to(a.dtype) + E.sign(a) * 0, axes, keepdim)
    if ord == 1:
        return R.sum(E.abs(x), axes, keepdim)
    return bind(_norm.vector_norm_p, (x,), {"ord": float(ord), "axis": axes, "keepdims": bool(keepdim)})


@autocast_composite("linalg_matrix_norm")  # NOTE [Autocast]
def matrix_norm(A, ord='fro', dim=(-2, -1), keepdim=False, *, dtype=None, axis=None, keepdims=None):
    """Matrix norm over the two dims ``dim``: 'fro', 'nuc', 2, -2, 1, -1, inf, -inf.

    Parameters
    ----------
    A : Tensor
        At least 2-D.
    ord : str or number
        'fro', 'nuc', 2, -2, 1, -1, inf or -inf.
    dim : pair of int
        The two matrix dims.
    keepdim : bool
        Keep them with size 1.
    dtype : dtype, optional
        Compute in to this dtype first.

    Examples
    --------
    >>> import lucid
    >>> lucid.linalg.matrix_norm(lucid.tensor([[1.0, -2.0], [3.0, 4.0]]), ord=1).item()
    6.0
    """
    if axis is not None:  # See NOTE [NumPy keyword aliases]
        dim = numpy_axis("matrix_norm", dim, axis, (-2, -1))
    if keepdims is not None:
        keepdim = numpy_keepdims("matrix_norm", keepdim, keepdims)
    from ..ops import reduce as R

    A = _float(A, "matrix_norm") if dtype is None else _as_tensor(A).to(dtype)
    if A.ndim < 2:
        raise RuntimeError(f"linalg.matrix_norm: the input must have at least 2 dimensions, got shape {tuple(A.shape)}")
    d0, d1 = _dims(dim, A.ndim, "matrix_norm")
    if d0 == d1:
        raise RuntimeError(f"linalg.matrix_norm: dims must be different, got {dim}")
    if ord == "fro":
        return vector_norm(A, 2, (d0, d1), keepdim)
    if ord in ("nuc", 2, -2):
        s = svdvals(A.movedim((d0, d1), (-2, -1)))
        if ord == -2 and s.shape[-1] == 0:
            raise IndexError(f"linalg.matrix_norm: the -2 norm of a matrix of shape {tuple(A.shape)} has no value "
                             f"(the minimum of no singular values)")
        # the largest of no singular values is 0 (a norm is never negative), as PyTorch's
        res = s.sum(-1) if ord == "nuc" or s.shape[-1] == 0 else (R.amax(s, -1) if ord == 2 else R.amin(s, -1))
        if keepdim:
            for d in sorted((d0, d1)):
                res = res.unsqueeze(d)
        return res
    if ord in (1, -1, math.inf, -math.inf):
        inner, outer = (d0, d1) if ord in (1, -1) else (d1, d0)
        if A.shape[outer] == 0 and ord < 0:
            raise IndexError(f"linalg.matrix_norm: the {ord} norm over dims {(d0, d1)} of a tensor of shape "
                             f"{tuple(A.shape)} has no value (the minimum over an empty dim)")
        # the largest of no column sums is 0, as PyTorch's: a sum over the empty dim gives it
        ext = R.amin if ord < 0 else (R.sum if A.shape[outer] == 0 else R.amax)
        res = ext(vector_norm(A, 1, inner, True), outer, True)
        return res if keepdim else res.squeeze((d0, d1))
    raise RuntimeError(f"linalg.matrix_norm: order {ord!r} is not supported")


def norm(A, ord=None, dim=None, keepdim=False, *, dtype=None, axis=None, keepdims=None):
    """Vector or matrix norm, chosen like ``torch.linalg.norm``.

    ``ord=None``: 2-norm of the flattened input (or over ``dim``). A 2-tuple ``dim`` (or a
    2-D input with ``ord`` given) means a matrix norm.

    Parameters
    ----------
    A : Tensor
        The input.
    ord : str or number, optional
        The norm (see :func:`vector_norm`, :func:`matrix_norm`).
    dim : int or tuple of int, optional
        One dim (vector norm) or two (matrix norm).
    keepdim : bool
        Keep reduced dims with size 1.
    dtype : dtype, optional
        Compute in to this dtype first.

    Examples
    --------
    >>> import lucid
    >>> lucid.linalg.norm(lucid.tensor([[3.0, 0.0], [0.0, 4.0]])).item()
    5.0
    """
    if axis is not None:  # See NOTE [NumPy keyword aliases]
        dim = numpy_axis("norm", dim, axis, None)
    if keepdims is not None:
        keepdim = numpy_keepdims("norm", keepdim, keepdims)
    A = _as_tensor(A)
    if isinstance(dim, int):
        dim = (dim,)
    if dim is not None and len(dim) == 2 or (dim is None and ord is not None and A.ndim == 2):
        return matrix_norm(A, "fro" if ord is None else ord, (-2, -1) if dim is None else dim, keepdim, dtype=dtype)
    if dim is None and ord is not None and A.ndim != 1:
        raise RuntimeError(f"linalg.norm: with ord={ord!r} and dim=None the input must be 1-D or 2-D, "
                           f"got shape {tuple(A.shape)}")
    return vector_norm(A, 2 if ord is None else ord, dim, keepdim, dtype=dtype)


# ---------------------------------------------------------------- composites

def pinv(A, *, atol=None, rtol=None, hermitian=False):
    """Moore-Penrose pseudo-inverse; singular values below ``max(atol, rtol * S.max())`` are dropped.

    ``rtol`` defaults to ``eps * max(m, n)`` (0 when only ``atol > 0`` is given), as PyTorch.
    With ``hermitian=True`` the eigendecomposition of the (lower triangle of the) symmetric
    input is used. The derivative (NOTE [pinv rules]) is finite at repeated singular values.

    Parameters
    ----------
    A : Tensor
        (..., m, n).
    atol, rtol : float or Tensor, optional
        Absolute and relative cut-offs (a tensor: one per matrix, broadcast over the batch).
    hermitian : bool
        ``A`` is symmetric (Hermitian): use ``eigh``.

    Examples
    --------
    >>> import lucid
    >>> lucid.linalg.pinv(lucid.tensor([[2.0, 0.0], [0.0, 0.0]])).tolist()
    [[0.5, 0.0], [0.0, 0.0]]
    """
    from ..ops import linalg_eig as _e

    A = _matrix(A, "pinv", square=bool(hermitian))
    if isinstance(atol, Tensor) or isinstance(rtol, Tensor):
        if A.numel():
            return _pinv_batched_tol(A, atol, rtol, bool(hermitian))
        # an empty matrix has no singular value to cut: the tolerances are never read (so they
        # may be batched under vmap), and the result keeps A's batch shape, as PyTorch's does
        atol, rtol = 0.0, 0.0
    atol = 0.0 if atol is None else float(atol)
    if rtol is None:
        rtol = float(dtypes.np_finfo(A.dtype).eps * max(A.shape[-2:])) if atol <= 0 else 0.0
    return bind(_e.pinv_p, (A,), {"atol": atol, "rtol": float(rtol), "hermitian": bool(hermitian)})


def _pinv_batched_tol(A, atol, rtol, hermitian):
    """pinv with tensor tolerances (one per matrix, broadcast over the batch, as PyTorch's).

    Composed from svd / eigh, as PyTorch's pinv is: the cut-off differs per matrix, which the
    primitive's scalar parameters can't say. Its gradient is svd's (not finite at repeated
    singular values, as PyTorch's).
    """
    from ..ops.creation import full
    from ..ops.elementwise import maximum, where
    from ..ops.reduce import amax

    real = np.dtype(A.dtype).type(0).real.dtype

    def tol(v):  # a number is made on A's device, as a tensor's value is read there
        return v.to(real) if isinstance(v, Tensor) else full((), float(v), dtype=real, device=A.device)

    at = tol(0.0 if atol is None else atol)
    if rtol is None:  # PyTorch: eps * max(m, n), or 0 where atol > 0
        rt = where(at > 0, 0.0, float(dtypes.np_finfo(real).eps * max(A.shape[-2:]))).to(real)
    else:
        rt = tol(rtol)
    if hermitian:
        w, V = eigh(A)
        s, Uh, Vl = w.abs(), _adj(V), V
    else:
        U, w, Vh = svd(A, full_matrices=False)
        s, Uh, Vl = w, _adj(U), _adj(Vh)
    cut = maximum(at.unsqueeze(-1), amax(s, -1, True) * rt.unsqueeze(-1))
    keep = s > cut
    winv = where(keep, 1 / where(keep, w, 1.0), 0.0)
    return (Vl * winv.unsqueeze(-2).to(A.dtype)) @ Uh


def _adj(x):
    return x.mT.conj() if x.dtype.kind == "c" else x.mT


@tensor_method("matrix_power")
def matrix_power(A, n):
    """``A`` to the integer power ``n`` (negative powers through the inverse).

    Parameters
    ----------
    A : Tensor
        A matrix or a batch of them, (..., n, n).
    n : int
        The power (negative: of the inverse).

    Examples
    --------
    >>> import lucid
    >>> lucid.linalg.matrix_power(lucid.tensor([[1.0, 1.0], [0.0, 1.0]]), 3).tolist()
    [[1.0, 3.0], [0.0, 1.0]]
    """
    from ..ops.creation import eye

    A = _as_tensor(A)
    if A.ndim < 2 or A.shape[-1] != A.shape[-2]:
        raise RuntimeError(f"linalg.matrix_power: A must be batches of square matrices, got shape {tuple(A.shape)}")
    n = int(n)
    if n == 0:
        return A * 0 + eye(A.shape[-1], dtype=A.dtype, device=A.device)
    if n < 0:
        A, n = inv(A), -n
    result, base = None, A
    while n:
        if n & 1:
            result = base if result is None else result @ base
        n >>= 1
        if n:
            base = base @ base
    return result


__all__ = ["LinAlgError", "inv", "det", "slogdet", "solve", "cholesky", "qr", "eigh", "eigvalsh", "svd", "svdvals",
           "norm", "vector_norm", "matrix_norm", "pinv", "matrix_power", "matmul", "solve_triangular", "lu",
           "lu_factor", "lu_factor_ex", "lu_solve", "matrix_exp", "ldl_factor", "ldl_factor_ex", "ldl_solve",
           "eig", "eigvals", "matrix_rank", "cond", "lstsq", "cholesky_ex", "inv_ex", "solve_ex", "cross",
           "multi_dot", "vecdot", "vander", "householder_product", "tensorinv", "tensorsolve", "diagonal"]


from ..ops.out_arguments import LINALG as _OUT_NAMES, accept_out as _accept_out  # noqa: E402

_accept_out(globals(), _OUT_NAMES)  # PyTorch's out= (NOTE [Out arguments])
