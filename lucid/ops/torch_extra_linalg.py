"""``hash_tensor`` (an XOR reduction of bit patterns) and ``lobpcg`` (a few extreme eigenpairs).

Both are composed from existing ops, so they run on any device and inherit the rules of the
primitives they call; see NOTE [lobpcg derivatives] for how ``lobpcg`` gets exact ones.
"""
from __future__ import annotations

import math

from .._core.tensor import Tensor, tensor_method
from ._family import _as_tensor
from .numpy_aliases import numpy_axis, numpy_keepdims

__all__ = ["hash_tensor", "lobpcg"]


def _L():
    import lucid

    return lucid


# ----------------------------------------------------------------------------- hash_tensor


def _hash_dims(dim, ndim):
    if dim is None:
        return list(range(ndim)), True
    dims = [dim] if isinstance(dim, int) else list(dim)
    if not dims:
        return list(range(ndim)), True
    lim = max(ndim, 1)
    out = []
    for d in dims:
        if not -lim <= d < lim:
            raise IndexError(f"hash_tensor: dimension out of range (expected to be in range of "
                             f"[{-lim}, {lim - 1}], but got {d})")
        d %= lim
        if d in out:
            raise RuntimeError(f"hash_tensor: dim {d} appears multiple times in the list of dims")
        out.append(d)
    return [d for d in out if d < ndim], False


def _bits64(x):
    """``x``'s elements widened to 64 bits (float64, int64, uint64) and read as uint64."""
    L = _L()
    kind = x.dtype.kind
    if kind == "c":
        raise NotImplementedError(f"hash_tensor: complex inputs are not supported, got {x.dtype}")
    if kind == "f":
        return x.to(L.float64).view(L.uint64)
    if kind == "u":
        return x.to(L.uint64)
    return x.to(L.int64).view(L.uint64)  # signed ints and bool: sign-extended, as PyTorch


def _xor_fold(y):
    """XOR over the last dim by folding halves: log2(n) elementwise launches on any device
    (CuPy has no ``bitwise_xor.reduce``)."""
    L = _L()
    n = y.shape[-1]
    while n > 1:
        if n % 2:  # 0 is XOR's identity
            y = L.cat([y, L.zeros_like(y[..., :1])], -1)
            n += 1
        n //= 2
        y = y[..., :n] ^ y[..., n:]
    return y[..., 0]


@tensor_method("hash_tensor")
def hash_tensor(input, dim=None, *, keepdim=False, mode=0, axis=None, keepdims=None):
    """A hash of ``input``'s elements: the XOR of their bit patterns as ``uint64``.

    Each element is widened to its 64-bit type (floats to float64, signed integers and bool
    to int64, unsigned to uint64) and its bits read as a uint64; mode 0, the only mode,
    XORs those together, over ``dim`` (an int, a tuple, or None for all dims).

    Parameters
    ----------
    input : Tensor
        Any real dtype (complex raises, as in PyTorch; unlike PyTorch, uint16/32/64 work).
    dim : int or tuple of int, optional
        The dims to reduce; None (or ``()``) reduces all of them.
    keepdim : bool
        Keep reduced dims with size 1.
    mode : int
        0 (XOR reduction).

    Returns
    -------
    Tensor
        ``uint64``, never differentiable.

    Examples
    --------
    >>> import lucid
    >>> lucid.hash_tensor(lucid.tensor([1, 2, 7]))
    tensor(4, dtype=lucid.uint64)
    >>> lucid.hash_tensor(lucid.tensor([[1, 2], [3, 3]]), 1)
    tensor([3, 0], dtype=lucid.uint64)
    """
    if axis is not None:  # See NOTE [NumPy keyword aliases]
        dim = numpy_axis("hash_tensor", dim, axis, None)
    if keepdims is not None:
        keepdim = numpy_keepdims("hash_tensor", keepdim, keepdims)
    input = _as_tensor(input)
    if mode != 0:
        raise RuntimeError(f"hash_tensor: unknown hash_tensor mode: {mode} (only 0, XOR reduction, exists)")
    shape = tuple(input.shape)
    dims, every = _hash_dims(dim, len(shape))
    if every and input.numel() == 0:
        raise RuntimeError("hash_tensor: expected reduction dim to be specified for input.numel() == 0. "
                           "Specify the reduction dim with the 'dim' argument.")
    for d in dims:
        if shape[d] == 0:
            raise IndexError(f"hash_tensor: expected reduction dim {d} to have non-zero size.")
    bits = _bits64(input.detach())
    rest = [d for d in range(len(shape)) if d not in dims]
    n = math.prod(shape[d] for d in dims)
    folded = bits.permute(*rest, *dims).reshape(*[shape[d] for d in rest], n) if shape else bits.reshape(1)
    out = _xor_fold(folded)
    if keepdim:
        out = out.reshape(*[1 if d in dims or every else s for d, s in enumerate(shape)])
    return out


# ----------------------------------------------------------------------------- lobpcg

# NOTE [lobpcg derivatives]
# The LOBPCG iteration itself runs without a graph: differentiating its unrolled steps would
# be slow and only approximately right. When a derivative may be asked for (A or B requires
# grad, or is a transform tracer), the converged eigenpairs (x_i, l_i) are refined by two
# Newton steps on F(x, l) = [(A - l B) x, (1 - x^T B x) / 2] = 0, written in lucid ops with
# the converged values as constants. Newton's map has zero Jacobian in (x, l) at the solution,
# so one step's derivative in A and B is the implicit-function derivative (PyTorch's
# partial-eigenspace eigh backward), and a second step makes the second derivatives exact too;
# their values only polish the converged ones. Each step solves the bordered (m+1)x(m+1)
# system [[A - l B, -B x], [-(B x)^T, 0]] for all k pairs at once, so it needs the k
# eigenvalues simple (as any eigenvector derivative does). Unlike PyTorch, B gets gradients.


class _Worker:
    """PyTorch's LOBPCG worker (torch/_lobpcg.py), on lucid tensors: the state a tracker sees."""

    def __init__(self, A, B, X, iK, iparams, fparams, bparams, method, tracker):
        L = _L()
        self.A, self.B, self.iK, self.X = A, B, iK, X
        self.iparams, self.fparams, self.bparams = iparams, fparams, bparams
        self.method, self.tracker = method, tracker
        n = iparams["n"]
        self.E = L.zeros(n, dtype=X.dtype, device=X.device)
        self.R = L.zeros_like(X)
        self.S = None
        self.tvars, self.ivars, self.fvars, self.bvars = {}, {"istep": 0}, {"_": 0.0}, {"_": False}

    # -- helpers
    def mmB(self, S):
        return S if self.B is None else self.B @ S

    def qform(self, M, S):
        return S.mT @ (S if M is None else M @ S)

    def symeig(self, M):
        E, Z = _L().linalg.eigh((M + M.mT) / 2)
        return (E.flip(-1), Z.flip(-1)) if self.bparams["largest"] else (E, Z)

    def rayleigh_ritz(self, S):
        L = _L()
        SBS = self.qform(self.B, S)
        d = SBS.diagonal(0, -2, -1) ** -0.5
        R = L.linalg.cholesky(SBS * d * d[:, None], upper=True)
        return L.linalg.solve_triangular(R, L.diag_embed(d), upper=True, left=False)

    # -- the iteration
    def run(self):
        self.update()
        if self.tracker is not None:
            self.tracker(self)
        while not (self.bvars.get("force_stop", False) or self.ivars["iterations_left"] == 0
                   or self.ivars["converged_count"] >= self.iparams["k"]):
            self.update()
            if self.tracker is not None:
                self.tracker(self)

    def update(self):
        if self.ivars["istep"] == 0:
            x_norm = float(self.X.norm())
            self.fvars["X_norm"] = x_norm
            self.fvars["A_norm"] = float((self.A @ self.X).norm()) / x_norm
            self.fvars["B_norm"] = float(self.mmB(self.X).norm()) / x_norm
            self.ivars.update(iterations_left=self.iparams["niter"], converged_count=0, converged_end=0)
        (self._update_ortho if self.method == "ortho" else self._update_basic)()
        self.ivars["iterations_left"] -= 1
        self.ivars["istep"] += 1

    def update_residual(self):
        self.R = self.A @ self.X - self.mmB(self.X) * self.E

    def update_converged_count(self):
        prev = self.ivars["converged_count"]
        A_norm, B_norm = self.fvars["A_norm"], self.fvars["B_norm"]
        rerr = self.R.norm(dim=0) / (self.X.norm(dim=0) * (A_norm + self.E.abs() * B_norm))
        count = 0
        for ok in (rerr < self.fparams["tol"]).tolist():
            if not ok:
                break
            count += 1
        self.ivars["converged_count"] = max(count, prev)  # soft-locked pairs stay converged
        self.tvars["rerr"] = rerr
        return self.ivars["converged_count"]

    def _first_step(self):
        Ri = self.rayleigh_ritz(self.X)
        E, Z = self.symeig(self.qform(self.A, self.X @ Ri))
        self.X = self.X @ (Ri @ Z)
        self.E = E
        self.update_residual()
        return self.update_converged_count()

    def _update_basic(self):
        L = _L()
        n = self.iparams["n"]
        if self.ivars["istep"] == 0:
            nc = self._first_step()
            P = self.X[:, :0]
        else:
            nc0, ns = self.ivars["converged_count"], self.ivars["converged_end"]
            S_ = self.S[:, nc0:ns]
            Ri = self.rayleigh_ritz(S_)
            E_, Z = self.symeig(self.qform(self.A, S_ @ Ri))
            self.X = L.cat([self.X[:, :nc0], S_ @ (Ri @ Z[:, :n - nc0])], 1)
            self.E = L.cat([self.E[:nc0], E_[:n - nc0]])
            P = S_ @ (Ri @ Z[:, n:2 * n - nc0])
            self.update_residual()
            nc = self.update_converged_count()
        W = self.R[:, nc:] if self.iK is None else self.iK @ self.R[:, nc:]
        self.S = L.cat([self.X, P, W], 1)
        self.ivars["converged_end"] = self.S.shape[-1]

    def _update_ortho(self):
        L = _L()
        n = self.iparams["n"]
        if self.ivars["istep"] == 0:
            nc = self._first_step()
            P = self.X[:, :0]
            W = self._get_ortho(self.R, self.X)
        else:
            nc0, ns = self.ivars["converged_count"], self.ivars["converged_end"]
            S_ = self.S[:, nc0:ns]
            E_, Z = self.symeig(self.qform(self.A, S_))
            self.X = L.cat([self.X[:, :nc0], S_ @ Z[:, :n - nc0]], 1)
            self.E = L.cat([self.E[:nc0], E_[:n - nc0]])
            P = S_ @ (Z[:, n - nc0:] @ L.linalg.qr(Z[:n - nc0, n - nc0:].mT).Q)
            self.update_residual()
            nc = self.update_converged_count()
            W = self._get_ortho(self.R[:, nc:], L.cat([self.X, P], 1))
        self.S = L.cat([self.X, P, W], 1)
        self.ivars["converged_end"] = self.S.shape[-1]

    def _get_svqb(self, U, drop, tau):
        """B-orthonormal columns spanning ``U`` (dropping weak ones when ``drop``)."""
        L = _L()
        if U.numel() == 0:
            return U
        d = self.qform(self.B, U).diagonal(0, -2, -1)
        keep = (d != 0).nonzero()[:, 0]
        if keep.numel() < d.numel():
            U = U[:, keep]
            if U.numel() == 0:
                return U
        UBU = self.qform(self.B, U)
        d = UBU.diagonal(0, -2, -1) ** -0.5
        E, Z = L.linalg.eigh(UBU * d * d[:, None])
        t = tau * float(E.abs().max())
        if drop:
            keep = (E > t).nonzero()[:, 0]
            E, Z, d = E[keep], Z[:, keep], d[keep]
        else:
            E = L.where(E < t, t, E)
        return (U * d) @ (Z * E ** -0.5)

    def _get_ortho(self, U, V):
        """B-orthonormal columns spanning ``U``, B-orthogonal to ``V`` (Duersch's Algorithms 3/6)."""
        L = _L()
        fp, ip = self.fparams, self.iparams
        use_drop = self.bparams["ortho_use_drop"]
        BV_norm = float(self.mmB(V).norm())
        VBU = V.mT @ self.mmB(U)
        for _ in range(ip["ortho_i_max"]):
            U = U - V @ VBU
            drop, tau = False, fp["ortho_tol_drop"]
            for _ in range(ip["ortho_j_max"]):
                U = self._get_svqb(U, drop, tau) if use_drop else self._get_svqb(U, False, fp["ortho_tol_replace"])
                drop, tau = True, fp["ortho_tol_replace"]
                if U.numel() == 0:
                    return U
                BU = self.mmB(U)
                UBU = U.mT @ BU
                eye = L.eye(UBU.shape[-1], dtype=UBU.dtype, device=UBU.device)
                if float((UBU - eye).norm()) / float(BU.norm() * U.norm()) < fp["ortho_tol"]:
                    break
            VBU = V.mT @ BU
            if float(VBU.norm()) / (BV_norm * float(U.norm())) < fp["ortho_tol"]:
                break
            if ip["m"] < U.shape[-1] + V.shape[-1]:
                raise ValueError(f"lobpcg: overdetermined shape of U: #B-cols(={ip['m']}) >= #U-cols(="
                                 f"{U.shape[-1]}) + #V-cols(={V.shape[-1]}) must hold")
        return U


def _newton(A, B, x, lam):
    """One Newton step on every pair of NOTE [lobpcg derivatives]: A, B (m, m), x (m, k), lam (k,)."""
    L = _L()
    m, k = x.shape
    Bx = x if B is None else B @ x
    eye = L.eye(m, dtype=A.dtype, device=A.device)
    M = A - lam[:, None, None] * (eye if B is None else B)            # (k, m, m)
    col = -Bx.mT[:, :, None]                                           # (k, m, 1)
    top = L.cat([M, col], -1)
    bottom = L.cat([col.mT, L.zeros(k, 1, 1, dtype=A.dtype, device=A.device)], -1)
    J = L.cat([top, bottom], -2)
    r1 = (M @ x.mT[:, :, None])[..., 0]                                # (k, m): (A - l B) x
    r2 = (1 - (x * Bx).sum(0)) / 2                                     # (k,)
    step = L.linalg.solve(J, -L.cat([r1, r2[:, None]], -1))
    return x + step[:, :m].mT, lam + step[:, m]


def _check(A, B, X, iK, k, n, method, op="lobpcg"):
    if A.ndim < 2 or A.shape[-1] != A.shape[-2]:
        raise ValueError(f"{op}: A must be a square matrix (or a batch of them), got shape {tuple(A.shape)}")
    if A.dtype.kind != "f":
        raise TypeError(f"{op}: expected a floating point A, got {A.dtype}")
    if B is not None and tuple(B.shape) != tuple(A.shape):
        raise ValueError(f"{op}: A and B must have the same shape, got {tuple(A.shape)} and {tuple(B.shape)}")
    m = A.shape[-1]
    if m < 3 * n:
        raise ValueError(f"{op}: LOBPCG algorithm is not applicable when the number of A rows (={m}) is "
                         f"smaller than 3 x the number of requested eigenpairs (={n})")
    if not 0 < k <= n:
        raise ValueError(f"{op}: expected 0 < k <= n, got k={k}, n={n}")
    if X is not None and tuple(X.shape) != tuple(A.shape[:-1]) + (n,):
        raise ValueError(f"{op}: X must have shape {tuple(A.shape[:-1]) + (n,)}, got {tuple(X.shape)}")
    if iK is not None and tuple(iK.shape) != (m, m):
        raise ValueError(f"{op}: iK must have shape {(m, m)}, got {tuple(iK.shape)}")
    if method not in ("ortho", "basic"):
        raise ValueError(f"{op}: method must be 'ortho' or 'basic', got {method!r}")


def _params(A, k, n, niter, tol, largest, method, oi, of, ob):
    L = _L()
    if tol is None:
        tol = (1.2e-07 if A.dtype == L.float32 or A.dtype == L.float16 else 2.23e-16) ** 0.5
    ip = {"m": A.shape[-1], "n": n, "k": k, "niter": 1000 if niter is None else niter}
    fp = {"tol": tol}
    bp = {"largest": True if largest is None else largest}
    if method == "ortho":
        ip.update(oi or {})
        fp.update(of or {})
        bp.update(ob or {})
        ip.setdefault("ortho_i_max", 3)
        ip.setdefault("ortho_j_max", 3)
        for key in ("ortho_tol", "ortho_tol_drop", "ortho_tol_replace"):
            fp.setdefault(key, tol)
        bp.setdefault("ortho_use_drop", False)
    return ip, fp, bp


def lobpcg(A, k=None, B=None, X=None, n=None, iK=None, niter=None, tol=None, largest=None, method=None,
           tracker=None, ortho_iparams=None, ortho_fparams=None, ortho_bparams=None):
    """The ``k`` largest (or smallest) eigenpairs of ``A x = l B x``, A symmetric, B SPD (LOBPCG).

    PyTorch's matrix-free solver, with both of its methods: ``"ortho"`` (default; the basis
    is B-orthonormalised as in Stathopoulos & Wu, robust) and ``"basic"`` (Knyazev's, a
    Cholesky per step, may fail on a singular basis).

    Parameters
    ----------
    A : Tensor
        ``(*, m, m)`` symmetric (symmetrised as ``(A + A^T) / 2``).
    k : int, optional
        Eigenpairs wanted (default: ``X``'s columns, else 1).
    B : Tensor, optional
        ``(*, m, m)`` symmetric positive definite (default: the identity).
    X : Tensor, optional
        ``(*, m, n)`` initial guess (default: ``randn``, ``n`` columns).
    n : int, optional
        Size of the random guess (default ``k``); ``m >= 3 n`` is required.
    iK : Tensor, optional
        ``(m, m)`` preconditioner applied to the residuals.
    niter : int, optional
        Most iterations (default 1000; -1: until converged).
    tol : float, optional
        Residual tolerance (default ``sqrt(eps)`` of A's dtype).
    largest : bool, optional
        Largest (default True) or smallest eigenvalues.
    method : str, optional
        ``"ortho"`` or ``"basic"``.
    tracker : callable, optional
        Called with the worker after every step (``worker.ivars["istep"]``, ``.E``, ``.X``,
        ``.R``, ``.tvars["rerr"]``; set ``worker.bvars["force_stop"] = True`` to stop).
    ortho_iparams, ortho_fparams, ortho_bparams : dict, optional
        ``"ortho"`` settings: ``ortho_i_max``, ``ortho_j_max``; ``ortho_tol``,
        ``ortho_tol_drop``, ``ortho_tol_replace``; ``ortho_use_drop``.

    Returns
    -------
    (Tensor, Tensor)
        Eigenvalues ``(*, k)`` (largest first when ``largest``) and B-orthonormal
        eigenvectors ``(*, m, k)``, each with its largest-magnitude entry positive.

    Limitations: gradients (to A, and unlike PyTorch to B too) need the k eigenvalues simple;
    see NOTE [lobpcg derivatives]. The iteration reads convergence on the host each step, so
    ``vmap`` over ``lobpcg`` is not supported (loop instead; leading batch dims work).

    Examples
    --------
    >>> import lucid
    >>> A = lucid.diag(lucid.arange(1.0, 10.0, dtype=lucid.float64))
    >>> X = lucid.stack([lucid.ones(9), lucid.arange(9.0)], 1).double()
    >>> E, V = lucid.lobpcg(A, k=2, X=X)
    >>> E.round(decimals=8)
    tensor([9., 8.], dtype=lucid.float64)
    """
    L = _L()
    A = _as_tensor(A)
    k = (1 if X is None else X.shape[-1]) if k is None else k
    n = (k if n is None else n) if X is None else X.shape[-1]
    method = "ortho" if method is None else method
    _check(A, B, X, iK, k, n, method)
    ip, fp, bp = _params(A, k, n, niter, tol, largest, method, ortho_iparams, ortho_fparams, ortho_bparams)
    As = (A + A.mT) / 2
    Bs = None if B is None else (B + B.mT) / 2
    batch = tuple(A.shape[:-2])
    m = A.shape[-1]
    Es, Xs = [], []
    for i in range(math.prod(batch)):
        idx = _unravel(i, batch)
        a, b = As[idx], (None if Bs is None else Bs[idx])
        with L.no_grad():
            x0 = (L.randn(m, n, dtype=A.dtype, device=A.device) if X is None else X[idx]).detach()
            w = _Worker(a.detach(), None if b is None else b.detach(), x0,
                        None if iK is None else _as_tensor(iK).detach(), ip, fp, bp, method, tracker)
            w.run()
            e, v = w.E[:k].detach(), w.X[:, :k].detach()
            # a fixed sign (largest entry positive): LAPACK's is arbitrary and may flip under a
            # tiny change of A, which would make V jump
            lead = v.gather(0, v.abs().argmax(0, keepdim=True))
            v = v * L.where(lead < 0, -1.0, 1.0).to(v.dtype)
        if any(t is not None and (t.requires_grad or t.__class__ is not Tensor) for t in (A, B)):
            for _ in range(2):  # See NOTE [lobpcg derivatives]
                v, e = _newton(a, b, v, e)
        Es.append(e)
        Xs.append(v)
    if not batch:
        return Es[0], Xs[0]
    return L.stack(Es).reshape(*batch, k), L.stack(Xs).reshape(*batch, m, k)


def _unravel(i, shape):
    out = []
    for s in reversed(shape):
        out.append(i % s)
        i //= s
    return tuple(reversed(out))
