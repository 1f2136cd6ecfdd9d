"""lucid.linalg: eig/eigvals, lstsq, the ``_ex`` variants, rank/cond, and the product helpers
(cross, multi_dot, vecdot, vander, householder_product, tensorinv, tensorsolve, diagonal).

Apart from ``eig`` (a primitive, NOTE [eig rules]) these are composites of primitives, so
their gradients, jvps and batching come from those.
"""
from __future__ import annotations

import collections
import math

import numpy as np

from .._core import dtypes as _dtypes
from .._core.backend import namespace_of
from .._core.primitive import autocast_composite, bind
from .._core.tensor import Tensor, tensor_method
from ..ops import linalg_eig as _eig
from ..ops import linalg_ex as _ex
from ..ops._family import _as_tensor, normalize_axis
from ..ops.numpy_aliases import numpy_axis

EigResult = collections.namedtuple("EigResult", ["eigenvalues", "eigenvectors"])
LstsqResult = collections.namedtuple("LstsqResult", ["solution", "residuals", "rank", "singular_values"])
InvExResult = collections.namedtuple("InvExResult", ["inverse", "info"])
SolveExResult = collections.namedtuple("SolveExResult", ["result", "info"])
CholeskyExResult = collections.namedtuple("CholeskyExResult", ["L", "info"])


def _L():
    from .. import linalg

    return linalg


def _float_matrix(A, op, square=False):
    from ._solvers import _float_matrix as fm

    return fm(A, op, square=square)


# ---------------------------------------------------------------------------- eig

def eig(A):
    """Eigenvalues and (unit-norm) eigenvectors of a square matrix, always complex.

    Gradients as PyTorch (NOTE [eig rules]): defined for distinct eigenvalues, and only for
    losses that do not depend on the arbitrary phase of each eigenvector.

    Parameters
    ----------
    A : Tensor
        (..., n, n), real or complex.

    Examples
    --------
    >>> import lucid
    >>> lucid.linalg.eig(lucid.tensor([[2.0, 0.0], [0.0, 3.0]])).eigenvalues.tolist()
    [(2+0j), (3+0j)]
    """
    return EigResult(*bind(_eig.eig_p, (_float_matrix(A, "eig", square=True),), {}))


def eigvals(A):
    """Eigenvalues of a square matrix (complex); the gradient is ``V^-H diag(g) V^H``.

    Parameters
    ----------
    A : Tensor
        (..., n, n).

    Examples
    --------
    >>> import lucid
    >>> lucid.linalg.eigvals(lucid.tensor([[0.0, -1.0], [1.0, 0.0]])).tolist()
    [1j, -1j]
    """
    return eig(A).eigenvalues


# -------------------------------------------------------------------- rank / cond

def _tolerance(S, atol, rtol, m, n):
    """``max(atol, rtol * S.max())`` per matrix, kept as a trailing dim (atol/rtol may be batched tensors)."""
    from ..ops.elementwise import maximum
    from ..ops.reduce import amax

    if atol is None and rtol is None:
        rtol = _dtypes.np_finfo(np.dtype(S.dtype)).eps * max(m, n)

    def kept(v):
        v = _as_tensor(namespace_of(S).asarray(0.0 if v is None else v, dtype=np.dtype(S.dtype))) \
            if not isinstance(v, Tensor) \
            else v.to(S.dtype)
        return v.unsqueeze(-1) if v.ndim else v

    return maximum(kept(atol), amax(S, -1, True) * kept(rtol))


def matrix_rank(A, *, atol=None, rtol=None, hermitian=False, tol=None):
    """Numerical rank: singular values above ``max(atol, rtol * S.max())`` (int64, no gradient).

    With neither given, ``rtol = eps * max(m, n)`` (PyTorch's and NumPy's default).

    Parameters
    ----------
    A : Tensor
        (..., m, n).
    atol, rtol : float or Tensor, optional
        Absolute and relative tolerances.
    hermitian : bool
        Use the eigenvalues' magnitudes (A symmetric).
    tol : float, optional
        Deprecated alias of ``atol`` (PyTorch's ``matrix_rank(A, tol)``).

    Examples
    --------
    >>> import lucid
    >>> lucid.linalg.matrix_rank(lucid.tensor([[1.0, 2.0], [2.0, 4.0]])).item()
    1
    """
    from .._core.grad_mode import no_grad
    from ..ops.reduce import sum as rsum

    if tol is not None:
        atol, rtol = tol, 0.0 if rtol is None else rtol
    A = _float_matrix(A, "matrix_rank")
    with no_grad():
        A = A.detach()
        S = _L().eigvalsh(A).abs() if hermitian else _L().svdvals(A)
        if S.shape[-1] == 0:
            return rsum((S > 0).to(np.int64), -1)
        return rsum((S > _tolerance(S, atol, rtol, *A.shape[-2:])).to(np.int64), -1)


def cond(A, p=None):
    """Condition number in the ``p`` norm: ``||A|| ||A^-1||`` (2 / None: ``S.max() / S.min()``).

    As PyTorch and NumPy, a singular matrix has condition number inf (never an error); for
    ``'nuc'`` it is PyTorch's ``sum(S) * sum(1 / S)`` (nan for the zero matrix).

    Parameters
    ----------
    A : Tensor
        (..., m, n); square for ``p`` other than 2, -2 and None.
    p : {None, 2, -2, 'fro', 'nuc', inf, -inf, 1, -1}
        The norm.

    Examples
    --------
    >>> import lucid
    >>> lucid.linalg.cond(lucid.tensor([[2.0, 0.0], [0.0, 0.5]])).item()
    4.0
    >>> lucid.linalg.cond(lucid.tensor([[1.0, 2.0], [2.0, 4.0]]), 1).item()
    inf
    """
    L = _L()
    A = _float_matrix(A, "cond", square=p not in (None, 2, -2))
    if p in (None, 2, -2):
        S = L.svdvals(A)
        return S[..., 0] / S[..., -1] if p != -2 else S[..., -1] / S[..., 0]
    if p not in ("fro", "nuc", math.inf, -math.inf, 1, -1):
        raise RuntimeError(f"linalg.cond: p={p!r} is not supported (None, 2, -2, 'fro', 'nuc', inf, -inf, 1, -1)")
    from ..ops.creation import eye
    from ..ops.elementwise import isinf, logical_and, nan_to_num, where

    if p == "nuc":  # PyTorch's: sum(S) sum(1 / S), inf for a singular matrix (0 * inf = nan for 0)
        S = L.svdvals(A)
        s_sum, s_inv = S.sum(-1), (1.0 / S).sum(-1)
        inf = isinf(s_inv)  # select rather than compute 0 * inf (no floating-point warning)
        return where(logical_and(inf, s_sum == 0), math.nan, where(inf, 1.0, s_sum) * s_inv)
    # PyTorch's (and NumPy's): the inverse of a singular matrix (LU info > 0) is all inf, so the
    # condition number is inf (0 * inf too). Never raises; per matrix (inv_ex), under vmap too. The
    # singular matrices are swapped for I before the differentiable inverse, so their (zero)
    # gradient does not become inf/nan and leak into parameters shared with the good ones.
    bad = inv_ex(A.detach()).info.unsqueeze(-1).unsqueeze(-1) > 0
    inv = where(bad, math.inf, inv_ex(where(bad, eye(A.shape[-1], dtype=A.dtype, device=A.device), A)).inverse)
    n_inv = L.matrix_norm(inv, p)
    n_a = where(isinf(n_inv), 1.0, L.matrix_norm(A, p))  # inf, not 0 * inf (and no warning)
    return nan_to_num(n_a * n_inv, nan=math.inf, posinf=math.inf, neginf=-math.inf)


# ----------------------------------------------------------------------- lstsq

@autocast_composite("linalg_lstsq")  # NOTE [Autocast]
def lstsq(A, B, rcond=None, *, driver=None):
    """Least-squares solution of ``A X = B`` (minimum norm when ``A`` is rank deficient).

    Full-rank inputs solve through the QR decomposition (of ``A``, or of ``A^H`` when wide),
    rank-deficient ones through the pseudo-inverse; both are differentiable. As PyTorch:
    ``residuals`` (squared column norms of ``A X - B``) only when m > n, A has full rank and
    the driver is not 'gelsy' (the default), ``rank`` for 'gelsy', 'gelsd' and 'gelss',
    ``singular_values`` for 'gelsd' and 'gelss'; empty tensors otherwise. ``residuals`` and
    ``singular_values`` are real for complex inputs.

    Parameters
    ----------
    A : Tensor
        (..., m, n).
    B : Tensor
        (..., m, k).
    rcond : float, optional
        Singular values below ``rcond * S.max()`` count as zero (default ``eps * max(m, n)``).
    driver : {None, 'gels', 'gelsy', 'gelsd', 'gelss'}
        Which outputs are computed (the solution is the same).

    Examples
    --------
    >>> import lucid
    >>> A = lucid.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
    >>> [round(v, 6) for v in lucid.linalg.lstsq(A, lucid.tensor([[1.0], [1.0], [2.0]])).solution.flatten().tolist()]
    [1.0, 1.0]
    """
    from ..ops.elementwise import promote

    driver = "gelsy" if driver is None else driver
    if driver not in ("gels", "gelsy", "gelsd", "gelss"):
        raise RuntimeError(f"linalg.lstsq: driver must be one of 'gels', 'gelsy', 'gelsd', 'gelss', got {driver!r}")
    A = _float_matrix(A, "lstsq")
    B = _as_tensor(B)
    b_shape = tuple(B.shape)  # as given, for the error below (a vector B is unsqueezed next)
    vec = B.ndim == A.ndim - 1
    if vec:
        B = B.unsqueeze(-1)
    B = _float_matrix(B, "lstsq")
    A, B = promote(A, B)
    m, n = A.shape[-2:]
    if B.shape[-2] != m:
        raise RuntimeError(f"linalg.lstsq: incompatible shapes of A {tuple(A.shape)} and B {b_shape}")
    # gels (QR) takes no rcond in PyTorch: the cut-off only decides rank-deficient inputs there
    rtol = rcond if rcond is not None and rcond > 0 and driver != "gels" else None
    rank = matrix_rank(A, rtol=rtol)
    concrete = rank.__class__ is Tensor
    full = bool((rank.numpy() == min(m, n)).all()) if concrete else False
    X = _lstsq_qr(A, B, m, n) if full else _L().pinv(A, rtol=rtol) @ B
    # Under a transform the rank has no value to read: the residuals are those of the pinv
    # solution, returned as for a full-rank batch (PyTorch's vmap sees values and returns them
    # when every example has full rank; a rank-deficient batch has none there)
    full = full or not concrete
    mod = namespace_of(A)
    # residuals and singular values are real, as PyTorch's, for complex inputs too
    empty = _as_tensor(mod.zeros((0,), dtype=np.dtype(A.dtype).type(0).real.dtype))
    residuals = empty
    if m > n and full and m and driver != "gelsy":  # PyTorch's gelsy (its CPU default) gives none
        r = A @ X - B
        residuals = (r.conj() * r).real.sum(-2) if r.dtype.kind == "c" else (r * r).sum(-2)
    sv = _L().svdvals(A).detach() if driver in ("gelsd", "gelss") else empty
    rank_out = rank if driver != "gels" else _as_tensor(mod.zeros((0,), np.int64))
    return LstsqResult(X.squeeze(-1) if vec else X, residuals, rank_out, sv)


def _lstsq_qr(A, B, m, n):
    L = _L()
    if m >= n:  # A = Q R: X = R^-1 Q^H B
        Q, R = L.qr(A)
        return L.solve_triangular(R, _mH(Q) @ B, upper=True)
    Q, R = L.qr(_mH(A))  # A^H = Q R (wide A): the minimum-norm X = Q R^-H B
    return Q @ L.solve_triangular(_mH(R), B, upper=False)


def _mH(x):
    return x.mT.conj() if x.dtype.kind == "c" else x.mT


# ---------------------------------------------------------------- *_ex variants
# Primitives that never raise and report LAPACK's info per matrix (NOTE [_ex per matrix]).

def _check_info(op, info, what):
    """``check_errors=True``: raise for the first failing matrix, naming it (as PyTorch)."""
    if info.__class__ is not Tensor:
        raise RuntimeError(f"linalg.{op}: check_errors=True needs concrete values; it is not supported under "
                           "vmap or other transforms (check the returned info instead)")
    flat = info.numpy().reshape(-1)
    bad = np.flatnonzero(flat > 0)
    if bad.size:
        where = f"(Batch element {int(bad[0])}): " if info.ndim else ""
        from ..ops.linalg_decomp import LinAlgError

        raise LinAlgError(f"linalg.{op}: {where}{what(int(flat[bad[0]]))}")


def cholesky_ex(A, *, upper=False, check_errors=False):
    """``(L, info)``: :func:`cholesky` that reports failure in ``info`` instead of raising.

    ``info`` (int32, A's batch shape) is 0 where the factorisation succeeded, else the order of
    the leading minor that is not positive-definite; that matrix's factor is the partial one
    LAPACK leaves (its gradient is garbage, as in PyTorch). The other matrices of the batch get
    exact factors and gradients, also under vmap (NOTE [_ex per matrix]).

    Parameters
    ----------
    A : Tensor
        (..., n, n), symmetric (Hermitian) positive-definite; the lower triangle is read
        (the upper one with ``upper=True``, as PyTorch).
    upper : bool
        Return the upper factor ``L^H``.
    check_errors : bool
        Raise if some matrix failed.

    Examples
    --------
    >>> import lucid
    >>> lucid.linalg.cholesky_ex(lucid.tensor([[1.0, 2.0], [2.0, 1.0]])).info.item()
    2
    """
    A = _float_matrix(A, "cholesky_ex", square=True)
    F, info = bind(_ex.cholesky_ex_p, (_mH(A) if upper else A,), {})  # upper reads A's upper triangle
    if check_errors:
        _check_info("cholesky_ex", info, lambda k: "The factorization could not be completed because the input is "
                    f"not positive-definite (the leading minor of order {k} is not positive-definite).")
    return CholeskyExResult(_mH(F) if upper else F, info)


def inv_ex(A, *, check_errors=False):
    """``(inverse, info)``: :func:`inv` that reports a singular matrix in ``info`` instead of raising.

    ``info`` (int32, A's batch shape) is 0 for an invertible matrix, else the index (from 1)
    of the zero pivot of its LU factorisation; that matrix's inverse is LAPACK's inf/nan (as
    PyTorch's). The other matrices get exact inverses and gradients, also under vmap.

    Parameters
    ----------
    A : Tensor
        (..., n, n).
    check_errors : bool
        Raise if some matrix is singular.

    Examples
    --------
    >>> import lucid
    >>> lucid.linalg.inv_ex(lucid.tensor([[1.0, 2.0], [2.0, 4.0]])).info.item()
    2
    """
    A = _float_matrix(A, "inv_ex", square=True)
    inv, info = bind(_ex.inv_ex_p, (A,), {})
    if check_errors:
        _check_info("inv_ex", info, lambda k: f"The diagonal element {k} is zero, the inversion could not be "
                    "completed because the input matrix is singular.")
    return InvExResult(inv, info)


def solve_ex(A, B, *, left=True, check_errors=False):
    """``(result, info)``: :func:`solve` that reports a singular ``A`` in ``info`` instead of raising.

    ``info`` has A's batch shape (as PyTorch's), 0 where A is invertible, else the index of the
    zero pivot; that system's solution is LAPACK's inf/nan. The other systems get exact
    solutions and gradients, also under vmap. Batch dims of A and B broadcast.

    Parameters
    ----------
    A : Tensor
        (..., n, n).
    B : Tensor
        (..., n, k) or (..., n).
    left : bool
        Solve ``A X = B`` (else ``X A = B``; then info is that of ``A^T``).
    check_errors : bool
        Raise if some A is singular.

    Examples
    --------
    >>> import lucid
    >>> lucid.linalg.solve_ex(lucid.eye(2), lucid.tensor([1.0, 2.0])).result.tolist()
    [1.0, 2.0]
    """
    from ..ops.elementwise import promote

    A = _float_matrix(A, "solve_ex", square=True)
    B = _as_tensor(B)
    if B.dtype.kind not in "fc":
        raise RuntimeError(f"linalg.solve_ex: expected B to be a floating point tensor, got dtype {B.dtype}")
    if not left:  # X A = B  <=>  A^T X^T = B^T
        if B.ndim < 2 or (B.ndim == A.ndim - 1 and tuple(B.shape) == tuple(A.shape[:-1])):  # a vector B
            raise RuntimeError(f"linalg.solve_ex: left=False needs a matrix B (vector B is for left=True), "
                               f"got shape {tuple(B.shape)}")
        X, info = solve_ex(A.mT, B.mT, check_errors=check_errors)
        return SolveExResult(X.mT, info)
    A, B = promote(A, B)
    vec = B.ndim == 1 or (B.ndim == A.ndim - 1 and tuple(B.shape) == tuple(A.shape[:-1]))
    if vec:
        B = B.unsqueeze(-1)
    if B.ndim < 2 or B.shape[-2] != A.shape[-1]:
        raise RuntimeError(f"linalg.solve_ex: incompatible shapes of A {tuple(A.shape)} and B {tuple(B.shape)}")
    X, info = bind(_ex.solve_ex_p, (A, B), {})
    if check_errors:
        _check_info("solve_ex", info, lambda k: "The solver failed because the input matrix is singular.")
    return SolveExResult(X.squeeze(-1) if vec else X, info)


# ---------------------------------------------------------------- products etc.

def cross(input, other, *, dim=-1, axis=None):
    """Cross product of 3-vectors along ``dim`` (batch dims broadcast).

    Parameters
    ----------
    input, other : Tensor
        Size 3 along ``dim``.
    dim : int
        The vector dim.

    Examples
    --------
    >>> import lucid
    >>> lucid.linalg.cross(lucid.tensor([1.0, 0.0, 0.0]), lucid.tensor([0.0, 1.0, 0.0])).tolist()
    [0.0, 0.0, 1.0]
    """
    if axis is not None:  # See NOTE [NumPy keyword aliases]
        dim = numpy_axis("cross", dim, axis, -1)
    from ..ops.elementwise import promote
    from ..ops.shape import broadcast_to, stack

    a, b = promote(_as_tensor(input), _as_tensor(other))
    if a.ndim != b.ndim:
        raise RuntimeError(f"linalg.cross: input and other must have the same number of dimensions, got "
                           f"{tuple(a.shape)} and {tuple(b.shape)}")
    d = normalize_axis(dim, a.ndim, "linalg.cross")
    if a.shape[d] != 3 or b.shape[d] != 3:  # checked before broadcasting: a size 1 there is no 3-vector
        raise RuntimeError(f"linalg.cross: inputs dimension {dim} must have length 3, got {a.shape[d]} and "
                           f"{b.shape[d]} (shapes {tuple(a.shape)} and {tuple(b.shape)})")
    try:
        shape = np.broadcast_shapes(tuple(a.shape), tuple(b.shape))
    except ValueError:
        raise RuntimeError(f"linalg.cross: shapes {tuple(a.shape)} and {tuple(b.shape)} do not broadcast") from None
    a, b = broadcast_to(a, shape), broadcast_to(b, shape)
    x = [a.select(d, i) for i in range(3)]
    y = [b.select(d, i) for i in range(3)]
    return stack([x[1] * y[2] - x[2] * y[1], x[2] * y[0] - x[0] * y[2], x[0] * y[1] - x[1] * y[0]], d)


def _chain_order(dims):
    """Matrix-chain parenthesisation: ``split[i][j]`` for the product of matrices i..j."""
    n = len(dims) - 1
    cost = [[0] * n for _ in range(n)]
    split = [[0] * n for _ in range(n)]
    for length in range(1, n):
        for i in range(n - length):
            j = i + length
            cost[i][j] = math.inf
            for k in range(i, j):
                c = cost[i][k] + cost[k + 1][j] + dims[i] * dims[k + 1] * dims[j + 1]
                if c < cost[i][j]:
                    cost[i][j], split[i][j] = c, k
    return split


def multi_dot(tensors):
    """Product of a chain of matrices, in the cheapest order; the first/last may be 1-D.

    Parameters
    ----------
    tensors : sequence of Tensor
        At least two; 2-D except possibly the first (a row) and the last (a column).

    Examples
    --------
    >>> import lucid
    >>> lucid.linalg.multi_dot([lucid.ones(3), lucid.ones(3, 2), lucid.ones(2)]).item()
    6.0
    """
    ts = [_as_tensor(t) for t in tensors]
    if len(ts) < 2:
        raise RuntimeError(f"linalg.multi_dot: expected at least 2 tensors, got {len(ts)}")
    first, last = ts[0].ndim == 1, ts[-1].ndim == 1
    if first:
        ts[0] = ts[0].unsqueeze(0)
    if last:
        ts[-1] = ts[-1].unsqueeze(-1)
    for i, t in enumerate(ts):
        if t.ndim != 2:
            raise RuntimeError(f"linalg.multi_dot: tensor {i} must be 2-D (1-D allowed first and last), "
                               f"got shape {tuple(tensors[i].shape)}")
        if i and ts[i - 1].shape[1] != t.shape[0]:
            raise RuntimeError(f"linalg.multi_dot: tensors {i - 1} and {i} cannot be multiplied: shapes "
                               f"{tuple(ts[i - 1].shape)} and {tuple(t.shape)}")
    split = _chain_order([ts[0].shape[0]] + [t.shape[1] for t in ts])

    def prod(i, j):
        return ts[i] if i == j else prod(i, split[i][j]) @ prod(split[i][j] + 1, j)

    out = prod(0, len(ts) - 1)
    if first:
        out = out.squeeze(0)
    if last:
        out = out.squeeze(-1)
    return out


@autocast_composite("linalg_vecdot")  # NOTE [Autocast]: lower precision, as PyTorch's
def vecdot(x, y, *, dim=-1, axis=None):
    """``sum(conj(x) * y)`` along ``dim``, with broadcasting.

    Parameters
    ----------
    x, y : Tensor
        Broadcastable.
    dim : int
        The reduced dim.

    Examples
    --------
    >>> import lucid
    >>> lucid.linalg.vecdot(lucid.tensor([1.0, 2.0]), lucid.tensor([3.0, 4.0])).item()
    11.0
    """
    if axis is not None:  # See NOTE [NumPy keyword aliases]
        dim = numpy_axis("vecdot", dim, axis, -1)
    from ..ops.elementwise import promote

    a, b = promote(_as_tensor(x), _as_tensor(y))
    if a.dtype.kind == "c":
        a = a.conj()
    return (a * b).sum(dim)


def vander(x, *, N=None):
    """Vandermonde matrix with increasing powers: ``out[..., i, j] = x[..., i] ** j``, ``j < N``.

    Parameters
    ----------
    x : Tensor
        (..., n).
    N : int, optional
        Number of columns (default n); at least 2, as PyTorch.

    Examples
    --------
    >>> import lucid
    >>> lucid.linalg.vander(lucid.tensor([2.0, 3.0])).tolist()
    [[1.0, 2.0], [1.0, 3.0]]
    """
    from ..ops.creation import ones_like
    from ..ops.shape import cat

    x = _as_tensor(x)
    kind = np.dtype(x.dtype).kind
    if kind == "b" or np.dtype(x.dtype) == np.float16:
        raise RuntimeError(
            "linalg.vander: supports floating point, complex, and integer tensors, "
            f"but got {x.dtype}")
    if kind in "iu":
        x = x.to(np.int64)  # PyTorch's powers of integers are int64, whatever the input's width
    if x.ndim < 1:
        x = x.reshape(1)  # PyTorch reads a 0-d x as one point
    N = x.shape[-1] if N is None else int(N)
    if N <= 1:  # PyTorch's check (torch.vander, unlike linalg.vander, takes 0 and 1)
        raise RuntimeError(f"linalg.vander: N must be greater than 1, got {N}")
    col = x.unsqueeze(-1)
    cols = [ones_like(col)]
    for _ in range(1, N):  # repeated products: exact for integers, no pow(0, 0) corner
        cols.append(cols[-1] * col)
    return cat(cols, -1)


@autocast_composite("linalg_householder_product")  # NOTE [Autocast]
def householder_product(A, tau):
    """The first n columns of ``H_0 H_1 ... H_{k-1}``, ``H_i = I - tau_i v_i v_i^H`` (LAPACK's orgqr).

    ``v_i`` is column i of ``A`` below the diagonal with a 1 on it (``geqrf``'s storage).

    Parameters
    ----------
    A : Tensor
        (..., m, n), m >= n.
    tau : Tensor
        (..., k), k <= n.

    Examples
    --------
    >>> import lucid
    >>> Q = lucid.linalg.householder_product(lucid.tensor([[1.0], [1.0]]), lucid.tensor([1.0]))
    >>> Q.tolist()
    [[0.0], [-1.0]]
    """
    from ..ops.creation import eye
    from ..ops.elementwise import promote

    A, tau = promote(_float_matrix(A, "householder_product"), _as_tensor(tau))
    m, n = A.shape[-2:]
    k = tau.shape[-1] if tau.ndim else 0
    if m < n or k > n or tuple(tau.shape[:-1]) != tuple(A.shape[:-2]):
        raise RuntimeError(f"linalg.householder_product: expected A (..., m, n) with m >= n and tau (..., k) "
                           f"with k <= n and the same batch dims, got {tuple(A.shape)} and {tuple(tau.shape)}")
    Q = eye(m, dtype=A.dtype, device=A.device)
    if A.ndim > 2:
        Q = Q.expand(tuple(A.shape[:-2]) + (m, m))
    rows = _as_tensor(namespace_of(A).arange(m))  # a Tensor: the comparisons run on A's device
    for i in range(k):
        below = (rows > i).to(A.dtype)
        unit = (rows == i).to(A.dtype)
        v = A[..., :, i] * below + unit
        t = tau[..., i].unsqueeze(-1).unsqueeze(-1)
        vh = v.conj() if v.dtype.kind == "c" else v
        Q = Q - t * ((Q @ v.unsqueeze(-1)) @ vh.unsqueeze(-2))
    if k == 0:  # no reflector: Q is constant, yet (as PyTorch's) part of the graph, with zero gradients
        from ..ops.elementwise import where

        ts = tau.sum(-1, keepdim=True).unsqueeze(-1) if tau.ndim else tau.reshape(1, 1)
        Q = where(False, A.sum((-2, -1), keepdim=True) + ts, Q)  # where, not "* 0": no nan from inf entries
    return Q[..., :, :n]


def tensorinv(A, ind=2):
    """Inverse of ``A`` seen as a linear map from its last dims to its first ``ind`` dims.

    Parameters
    ----------
    A : Tensor
        ``prod(A.shape[:ind]) == prod(A.shape[ind:])``.
    ind : int
        How many leading dims form the output side.

    Examples
    --------
    >>> import lucid
    >>> lucid.linalg.tensorinv(lucid.eye(4).reshape(4, 2, 2), ind=1).shape
    (2, 2, 4)
    """
    A = _as_tensor(A)
    if ind <= 0:
        raise RuntimeError(f"linalg.tensorinv: ind must be a positive integer, got {ind}")
    out_s, in_s = tuple(A.shape[:ind]), tuple(A.shape[ind:])
    p = math.prod(out_s)
    if p != math.prod(in_s):
        raise RuntimeError(f"linalg.tensorinv: expected prod(A.shape[:ind]) == prod(A.shape[ind:]), got shape "
                           f"{tuple(A.shape)} with ind={ind}")
    return _L().inv(A.reshape(p, p)).reshape(in_s + out_s)


def tensorsolve(A, B, dims=None):
    """``X`` with ``tensordot(A, X, X.ndim) == B`` (``dims``: A's dims moved to the end first).

    Parameters
    ----------
    A : Tensor
        ``A.shape[:B.ndim] + X.shape``, where ``A.shape[:B.ndim]`` holds ``B.numel()`` elements
        (usually ``B.shape``) and so does ``X.shape``.
    B : Tensor
        The right-hand side.
    dims : tuple of int, optional
        Dims of ``A`` to move to the end.

    Examples
    --------
    >>> import lucid
    >>> lucid.linalg.tensorsolve(lucid.eye(6).reshape(6, 2, 3), lucid.ones(6)).shape
    (2, 3)
    """
    A, B = _as_tensor(A), _as_tensor(B)
    if dims is not None:
        dims = [d % A.ndim for d in dims]
        rest = [d for d in range(A.ndim) if d not in dims]
        A = A.permute(rest + dims)
    # As PyTorch (and NumPy): only the element counts must agree, A's leading dims need not be
    # B's shape; A is read as a (B.numel(), prod(X.shape)) matrix acting on the flattened X.
    x_shape = tuple(A.shape[B.ndim:])
    p = B.numel()
    if A.ndim < B.ndim or math.prod(x_shape) != p or math.prod(A.shape[:B.ndim]) != p:
        raise RuntimeError(f"linalg.tensorsolve: expected A.shape[:B.ndim] and A.shape[B.ndim:] (the shape of X) "
                           f"to both hold B.numel() elements, got A {tuple(A.shape)} and B {tuple(B.shape)}")
    return _L().solve(A.reshape(p, p), B.reshape(p)).reshape(x_shape)


def diagonal(A, *, offset=0, dim1=-2, dim2=-1):
    """The diagonal over the last two dims (``lucid.diagonal`` with matrix defaults).

    Parameters
    ----------
    A : Tensor
        At least 2-D.
    offset : int
        Which diagonal.
    dim1, dim2 : int
        The matrix dims.

    Examples
    --------
    >>> import lucid
    >>> lucid.linalg.diagonal(lucid.eye(3)).tolist()
    [1.0, 1.0, 1.0]
    """
    from ..ops.shape import diagonal as _diagonal

    return _diagonal(_as_tensor(A), offset, dim1, dim2)


__all__ = ["eig", "eigvals", "matrix_rank", "cond", "lstsq", "cholesky_ex", "inv_ex", "solve_ex", "cross",
           "multi_dot", "vecdot", "vander", "householder_product", "tensorinv", "tensorsolve", "diagonal"]
