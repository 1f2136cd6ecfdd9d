"""Linear algebra primitives.

* ``matmul`` — every broadcasting case of ``@`` (NOTE [matmul ranks]);
* ``einsum`` — a general primitive (NOTE [einsum primitive]); ``mm``, ``bmm``, ``mv``,
  ``dot``, ``outer``, ``tensordot``, ``kron`` and ``trace`` are composites of it;
* the decompositions behind :mod:`lucid.linalg` (``linalg_inv``, ``linalg_det``,
  ``linalg_slogdet``, ``linalg_solve``, ``linalg_cholesky``, ``linalg_qr``,
  ``linalg_eigh``, ``linalg_svd``, ``linalg_svdvals``), each with its vjp (in ``ns``
  ops, so it differentiates again), jvp and batching rule. They all act on the last two
  dims and map over any leading dims, so batching just moves the batch dim to the front.
"""
from __future__ import annotations

import math

import numpy as np

from .._core.backend import xp
from .._core.primitive import AN, TN, bind, defprim
from .._core.tensor import Tensor, tensor_method
from ._family import _as_tensor, move_bdim, shape_of, sum_to_shape
from .elementwise import cast, promote
from .shape import broadcast_to, errors_as, squeeze, unsqueeze

_LETTERS = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"


def _mT(ns, x):
    nd = len(x.shape)
    axes = tuple(range(nd - 2)) + (nd - 1, nd - 2)
    return ns.transpose(x, axes=axes)


def _mH(ns, x):
    """Conjugate transpose (the plain transpose for real values). See NOTE [Holomorphic vjp]."""
    t = _mT(ns, x)
    return ns.conj(t) if x.dtype.kind == "c" else t


def batch_leading(prim):
    """Batching rule for ops mapped over broadcasting *leading* dims (matmul, solve ...).

    Batched operands get their batch dim moved to the front and are padded with
    singleton dims up to the largest per-example rank, so the batch dim lines up with
    the other operands' leading dims and never with a core (matrix) dim.
    """

    def rule(vals, bdims, **params):
        rank = max(len(shape_of(v)) - (b is not None) for v, b in zip(vals, bdims))
        new = []
        for v, b in zip(vals, bdims):
            if b is not None:
                v = move_bdim(v, b, 0)
                pad = rank - (v.ndim - 1)
                if pad:
                    v = TN.reshape(v, shape=(v.shape[0],) + (1,) * pad + tuple(v.shape[1:]))
            new.append(v)
        return bind(prim, tuple(new), params), 0

    return rule


def _matmul_jvp(ns, primals, tangents, out):
    x, y = primals
    tx, ty = tangents
    res = None if tx is None else ns.matmul(tx, y)
    if ty is not None:
        term = ns.matmul(x, ty)
        res = term if res is None else res + term
    return res if tuple(res.shape) == tuple(out.shape) else ns.broadcast_to(res, shape=tuple(out.shape))


# NOTE [matmul ranks]
# The primitive only sees operands with >= 2 dims; the public ``matmul`` turns 1-D
# operands into row/column matrices and squeezes the result, so one rule covers
# every case of ``@``. Leading dims broadcast, so the batching rule moves the batch
# dim to the front and pads ranks (``batch_leading``).
def _matmul_impl(a, b):
    """``xp.matmul`` that avoids NumPy's loop of tiny GEMMs over stacked operands.

    NOTE [matmul folding]: NumPy evaluates ``(B, m, k) @ (k, n)`` as B small GEMMs. Under
    vmap (and for many eager shapes) the stack dims can be folded into one GEMM: the rows
    of ``a`` when ``b`` is a plain matrix, the columns of ``b`` when ``a`` is; a contraction
    of size 1 (per-example outer products, e.g. the weight gradient) is a plain product.
    """
    if a.ndim > 2:
        if b.ndim == 2 and a.shape[-1] == b.shape[0]:
            rows = math.prod(a.shape[:-1])
            return xp.matmul(a.reshape(rows, a.shape[-1]), b).reshape(a.shape[:-1] + (b.shape[-1],))
        if a.shape[-1] == 1 and b.ndim > 2 and b.shape[-2] == 1:
            return xp.einsum("...ij,...jk->...ik", a, b)
    elif a.ndim == 2 and b.ndim > 2 and a.shape[1] == b.shape[-2] and b.size >= 4 * b.shape[-2] * b.shape[-1] > 0:
        k = b.shape[-2]
        bt = xp.moveaxis(b, -2, 0)
        out = xp.matmul(a, bt.reshape(k, -1)).reshape((a.shape[0],) + bt.shape[1:])
        return xp.moveaxis(out, 0, -2)
    return xp.matmul(a, b)


matmul_p = defprim(
    "matmul",
    _matmul_impl,
    vjp=(lambda ns, g, out, x, y: sum_to_shape(ns, ns.matmul(g, _mH(ns, y)), tuple(x.shape)),
         lambda ns, g, out, x, y: sum_to_shape(ns, ns.matmul(_mH(ns, x), g), tuple(y.shape))),
    jvp=_matmul_jvp,
)
matmul_p.batch = batch_leading(matmul_p)


@tensor_method("matmul", "__matmul__")
def matmul(input, other):
    """Matrix product with NumPy/PyTorch broadcasting semantics (1-D operands included).

    Parameters
    ----------
    input, other : Tensor
        1-D vectors or (batched) matrices; batch dims broadcast.

    Examples
    --------
    >>> import lucid
    >>> (lucid.ones(2, 3) @ lucid.ones(3)).tolist()
    [3.0, 3.0]
    """
    if input.__class__ is Tensor and other.__class__ is Tensor:  # the hot path: two plain matrices
        a, b = input._data, other._data
        if a.ndim == 2 and b.ndim == 2 and a.dtype is b.dtype and a.shape[1] == b.shape[0]:
            return bind(matmul_p, (input, other), {})
    a, b = promote(_as_tensor(input), _as_tensor(other))
    if a.ndim == 0 or b.ndim == 0:
        raise RuntimeError(
            f"matmul: both arguments need at least 1 dimension, got shapes {tuple(a.shape)} and {tuple(b.shape)}"
        )
    if a.shape[-1] != b.shape[-2 if b.ndim > 1 else 0]:
        raise RuntimeError(
            f"matmul: shapes {tuple(a.shape)} and {tuple(b.shape)} cannot be multiplied "
            f"({a.shape[-1]} != {b.shape[-2 if b.ndim > 1 else 0]})"
        )
    va, vb = a.ndim == 1, b.ndim == 1
    if va:
        a = unsqueeze(a, 0)
    if vb:
        b = unsqueeze(b, -1)
    out = bind(matmul_p, (a, b), {})
    if va and vb:
        return squeeze(out, (-2, -1))
    if va:
        return squeeze(out, -2)
    if vb:
        return squeeze(out, -1)
    return out


Tensor.__rmatmul__ = lambda self, other: matmul(other, self)


# ------------------------------------------------------------------- einsum

# NOTE [einsum primitive]
# The primitive sees a canonical equation: explicit letters only (the public ``einsum``
# expands ``...`` into fresh letters and pre-broadcasts size-1 dims, so every letter
# has one size), and an explicit output. Then:
#   vjp for operand i  = einsum of g with the other operands, producing operand i's
#                        letters. A letter repeated in operand i (a diagonal) is
#                        renamed and tied back by an identity-matrix operand; a letter
#                        that only operand i has (summed away) is broadcast back.
#   jvp                = sum over i of the equation with operand i replaced by its tangent.
#   batching           = a fresh letter in front of every batched operand and the output.
# Identity matrices enter as constant ndarrays (no gradient, never batched).

def _parse(subscripts):
    lhs, out = subscripts.split("->")
    return lhs.split(","), out


def _fresh(used):
    for c in _LETTERS:
        if c not in used:
            used.add(c)
            return c
    raise RuntimeError("einsum: too many distinct subscripts (at most 52 letters)")


def _einsum_impl(*xs, subscripts):
    # NumPy's BLAS-backed path pays off only for big or many operands.
    big = len(xs) > 2 or max(x.size for x in xs) > 4096
    return xp.asarray(xp.einsum(subscripts, *xs, optimize=bool(big)))


def _einsum_vjp(i, ns, g, out, *args, subscripts):
    ins, osub = _parse(subscripts)
    x = args[i]
    used = set(subscripts)
    subs, ops = [osub], [g]
    for j, (s, a) in enumerate(zip(ins, args)):
        if j != i:  # a complex cotangent meets conjugated operands (NOTE [Holomorphic vjp])
            subs.append(s)
            ops.append(ns.conj(a) if getattr(a, "dtype", None) is not None and a.dtype.kind == "c" else a)
    target, seen = [], set()
    for pos, c in enumerate(ins[i]):
        if c in seen:  # a diagonal: fresh letter tied to c by the identity
            nc = _fresh(used)
            subs.append(c + nc)
            ops.append(xp.eye(x.shape[pos], dtype=g.dtype))
            c = nc
        seen.add(c)
        target.append(c)
    avail = set("".join(subs))
    kept = "".join(c for c in target if c in avail)
    res = ns.einsum(*ops, subscripts=",".join(subs) + "->" + kept)
    if len(kept) < len(target):  # letters only operand i had: broadcast back
        shape = tuple(s if c in avail else 1 for c, s in zip(target, x.shape))
        res = ns.broadcast_to(ns.reshape(res, shape=shape), shape=tuple(x.shape))
    return res


def _einsum_jvp(ns, primals, tangents, out, subscripts):
    res = None
    for i, t in enumerate(tangents):
        if t is None:
            continue
        ops = primals[:i] + (t,) + primals[i + 1:]
        term = ns.einsum(*ops, subscripts=subscripts)
        res = term if res is None else res + term
    return res


def _einsum_batch(vals, bdims, subscripts):
    ins, osub = _parse(subscripts)
    z = _fresh(set(subscripts))
    new_vals, new_ins = [], []
    for v, b, s in zip(vals, bdims, ins):
        if b is None:
            new_vals.append(v)
            new_ins.append(s)
        else:
            new_vals.append(move_bdim(v, b, 0))
            new_ins.append(z + s)
    return bind(einsum_p, tuple(new_vals), {"subscripts": ",".join(new_ins) + "->" + z + osub}), 0


einsum_p = defprim("einsum", _einsum_impl, vjp=_einsum_vjp, jvp=_einsum_jvp, batch=_einsum_batch)


def _ein(ns, subscripts, *ops):
    """Rule helper: ``einsum`` where ``~`` stands for the batch letters of the first operand."""
    nb = len(shape_of(ops[0])) - (len(subscripts.split("->")[0].split(",")[0]) - 1)
    batch = _LETTERS[26:26 + nb]
    return ns.einsum(*ops, subscripts=subscripts.replace("~", batch))


def _common(tensors, op):
    """Tensors of one dtype (PyTorch promotion across all operands)."""

    tensors = [_as_tensor(t) for t in tensors]
    dt = np.result_type(*[t.dtype for t in tensors]) if tensors else None
    return [t if t.dtype == dt else cast(t, dt) for t in tensors]


def _expand_equation(equation, shapes):
    """(explicit input subscripts, output subscript) with ``...`` replaced by fresh letters."""
    eq = equation.replace(" ", "")
    lhs, arrow, out = eq.partition("->")
    ins = lhs.split(",")
    if len(ins) != len(shapes):
        raise ValueError(f"einsum: the equation '{equation}' has {len(ins)} operand(s) but "
                         f"{len(shapes)} were given")
    used = set(c for c in eq if c.isalpha())
    bad = set(c for c in eq.replace("...", "") if not c.isalpha() and c not in ",->")
    if bad:
        raise ValueError(f"einsum: invalid characters {sorted(bad)} in '{equation}'")
    n_ell = 0
    for s, shp in zip(ins, shapes):
        n_letters = len(s.replace("...", ""))
        if "..." not in s and n_letters != len(shp) or n_letters > len(shp):
            raise ValueError(f"einsum: subscript '{s}' has {n_letters} letter(s) but the operand "
                             f"has shape {tuple(shp)}")
        if "..." in s:
            n_ell = max(n_ell, len(shp) - n_letters)
    ell = "".join(_fresh(used) for _ in range(n_ell))
    ins = [s.replace("...", ell[n_ell - (len(shp) - len(s.replace('...', ''))):] if n_ell else "")
           for s, shp in zip(ins, shapes)]
    if not arrow:
        counts = {}
        for c in "".join(ins):
            counts[c] = counts.get(c, 0) + 1
        out = ell + "".join(sorted(c for c, k in counts.items() if k == 1 and c not in ell))
    else:
        out = out.replace("...", ell)
        missing = set(out) - set("".join(ins))
        if missing or len(set(out)) != len(out):
            raise ValueError(f"einsum: output subscript '{out}' must use distinct letters that "
                             f"appear in the inputs ('{equation}')")
    return ins, out


def _letter_sizes(ins, shapes, equation):
    sizes = {}
    for s, shp in zip(ins, shapes):
        for c, n in zip(s, shp):
            old = sizes.get(c)
            if old is None or old == 1:  # size 1 broadcasts to anything, zero included
                sizes[c] = n
            elif n != old and n != 1:
                raise RuntimeError(f"einsum: subscript '{c}' has size {n} for an operand that does not "
                                   f"match the previous size {old} ('{equation}', shapes "
                                   f"{[tuple(x) for x in shapes]})")
    return sizes


def einsum(equation, *operands):
    """Einstein summation (``'ij,jk->ik'``), with ``...``, implicit outputs and diagonals.

    Parameters
    ----------
    equation : str
        Subscripts per operand separated by ``,``, optionally ``->`` and the output.
    *operands : Tensor
        The operands (a single list/tuple of tensors is accepted too).

    Examples
    --------
    >>> import lucid
    >>> a = lucid.tensor([[1.0, 2.0], [3.0, 4.0]])
    >>> lucid.einsum("ii->", a).item()
    5.0
    >>> lucid.einsum("...ij,jk", a, a).tolist()
    [[7.0, 10.0], [15.0, 22.0]]
    """
    if len(operands) == 1 and isinstance(operands[0], (list, tuple)):
        operands = tuple(operands[0])
    ops = _common(operands, "einsum")
    shapes = [tuple(t.shape) for t in ops]
    ins, out = _expand_equation(equation, shapes)
    sizes = _letter_sizes(ins, shapes, equation)
    for k, (s, t) in enumerate(zip(ins, ops)):
        want = tuple(sizes[c] for c in s)
        if want != tuple(t.shape):  # size-1 dims broadcast (see NOTE [einsum primitive])
            ops[k] = broadcast_to(t, want)
    return bind(einsum_p, tuple(ops), {"subscripts": ",".join(ins) + "->" + out})


def _need(t, ndims, op, what="input"):
    if t.ndim not in ndims:
        want = " or ".join(f"{n}-D" for n in ndims)
        raise RuntimeError(f"{op}: expected {what} to be {want}, got shape {tuple(t.shape)}")


@tensor_method("mm")
def mm(input, mat2):
    """Product of two 2-D matrices.

    Parameters
    ----------
    input : Tensor
        (n, m).
    mat2 : Tensor
        (m, p).

    Examples
    --------
    >>> import lucid
    >>> lucid.mm(lucid.ones(2, 3), lucid.ones(3, 1)).tolist()
    [[3.0], [3.0]]
    """
    a, b = _as_tensor(input), _as_tensor(mat2)
    _need(a, (2,), "mm", "self")
    _need(b, (2,), "mm", "mat2")

    with errors_as("mm"):
        return matmul(a, b)


@tensor_method("bmm")
def bmm(input, mat2):
    """Batched product of (b, n, m) and (b, m, p) tensors (no broadcasting).

    Parameters
    ----------
    input : Tensor
        (b, n, m).
    mat2 : Tensor
        (b, m, p).

    Examples
    --------
    >>> import lucid
    >>> lucid.bmm(lucid.ones(4, 2, 3), lucid.ones(4, 3, 5)).shape
    (4, 2, 5)
    """
    a, b = _as_tensor(input), _as_tensor(mat2)
    _need(a, (3,), "bmm", "self")
    _need(b, (3,), "bmm", "mat2")
    if a.shape[0] != b.shape[0]:
        raise RuntimeError(f"bmm: batch sizes differ: shapes {tuple(a.shape)} and {tuple(b.shape)}")
    return matmul(a, b)


@tensor_method("mv")
def mv(input, vec):
    """Matrix-vector product.

    Parameters
    ----------
    input : Tensor
        (n, m).
    vec : Tensor
        (m,).

    Examples
    --------
    >>> import lucid
    >>> lucid.mv(lucid.ones(2, 3), lucid.ones(3)).tolist()
    [3.0, 3.0]
    """
    a, v = _as_tensor(input), _as_tensor(vec)
    _need(a, (2,), "mv", "self")
    _need(v, (1,), "mv", "vec")
    return matmul(a, v)


@tensor_method("dot", "inner_1d")
def dot(input, other):
    """Inner product of two 1-D tensors.

    Parameters
    ----------
    input, other : Tensor
        1-D, the same length.

    Examples
    --------
    >>> import lucid
    >>> lucid.dot(lucid.tensor([1.0, 2.0]), lucid.tensor([3.0, 4.0])).item()
    11.0
    """
    a, b = _as_tensor(input), _as_tensor(other)
    _need(a, (1,), "dot", "self")
    _need(b, (1,), "dot", "other")
    if a.shape != b.shape:
        raise RuntimeError(f"dot: expected both vectors to have same number of elements, "
                           f"got shapes {tuple(a.shape)} and {tuple(b.shape)}")
    return einsum("i,i->", a, b)


@tensor_method("outer", "ger")
def outer(input, vec2):
    """Outer product of two 1-D tensors.

    Parameters
    ----------
    input, vec2 : Tensor
        1-D.

    Examples
    --------
    >>> import lucid
    >>> lucid.outer(lucid.tensor([1.0, 2.0]), lucid.tensor([1.0, 0.0, 3.0])).tolist()
    [[1.0, 0.0, 3.0], [2.0, 0.0, 6.0]]
    """
    a, b = _as_tensor(input), _as_tensor(vec2)
    _need(a, (1,), "outer", "self")
    _need(b, (1,), "outer", "vec2")
    return einsum("i,j->ij", a, b)


ger = outer


def tensordot(a, b, dims=2):
    """Contract ``dims`` (an int: last of ``a`` with first of ``b``; or two lists of dims).

    Parameters
    ----------
    a, b : Tensor
        The operands.
    dims : int or pair of sequences
        Contract the last ``dims`` dims of ``a`` with the first of ``b``, or these dims.

    Examples
    --------
    >>> import lucid
    >>> lucid.tensordot(lucid.ones(2, 3, 4), lucid.ones(3, 4, 5), dims=2).shape
    (2, 5)
    >>> lucid.tensordot(lucid.ones(2, 3), lucid.ones(3, 2), dims=([1], [0])).shape
    (2, 2)
    """
    a, b = _as_tensor(a), _as_tensor(b)
    if isinstance(dims, int) or (isinstance(dims, Tensor) and dims.ndim == 0):
        n = int(dims)
        if n < 0 or n > min(a.ndim, b.ndim):
            raise RuntimeError(f"tensordot: dims={n} is invalid for shapes {tuple(a.shape)} and {tuple(b.shape)}")
        da, db = list(range(a.ndim - n, a.ndim)), list(range(n))
    else:
        da, db = ([d] if isinstance(d, int) else list(d) for d in dims)
    if len(da) != len(db):
        raise RuntimeError(f"tensordot: both dim lists need the same length, got {da} and {db}")
    da = [d % max(a.ndim, 1) for d in da]
    db = [d % max(b.ndim, 1) for d in db]
    for x, y in zip(da, db):
        if a.shape[x] != b.shape[y]:
            raise RuntimeError(f"tensordot: contracted dimensions differ in size: dim {x} of shape "
                               f"{tuple(a.shape)} vs dim {y} of shape {tuple(b.shape)}")
    sa = _LETTERS[:a.ndim]
    sb = list(_LETTERS[26:26 + b.ndim])
    for x, y in zip(da, db):
        sb[y] = sa[x]
    sb = "".join(sb)
    out = "".join(c for k, c in enumerate(sa) if k not in da) + "".join(c for k, c in enumerate(sb) if k not in db)
    return einsum(f"{sa},{sb}->{out}", a, b)


@tensor_method("kron")
def kron(input, other):
    """Kronecker product (leading dims of the lower-rank operand are padded with 1).

    Parameters
    ----------
    input, other : Tensor
        The operands.

    Examples
    --------
    >>> import lucid
    >>> lucid.kron(lucid.eye(2), lucid.ones(1, 2)).tolist()
    [[1.0, 1.0, 0.0, 0.0], [0.0, 0.0, 1.0, 1.0]]
    """
    a, b = _as_tensor(input), _as_tensor(other)
    nd = max(a.ndim, b.ndim)
    a = a.reshape((1,) * (nd - a.ndim) + tuple(a.shape))
    b = b.reshape((1,) * (nd - b.ndim) + tuple(b.shape))
    sa, sb = _LETTERS[:nd], _LETTERS[26:26 + nd]
    out = "".join(x + y for x, y in zip(sa, sb))
    res = einsum(f"{sa},{sb}->{out}", a, b)
    return res.reshape(tuple(x * y for x, y in zip(a.shape, b.shape)))


@tensor_method("trace")
def trace(input):
    """Sum of the main diagonal of a 2-D tensor (rectangular allowed).

    Parameters
    ----------
    input : Tensor
        2-D.

    Examples
    --------
    >>> import lucid
    >>> lucid.trace(lucid.tensor([[1.0, 2.0], [3.0, 4.0]])).item()
    5.0
    """
    a = _as_tensor(input)
    _need(a, (2,), "trace", "input")
    k = min(a.shape)
    if a.shape[0] != a.shape[1]:
        a = a[:k, :k]
    if a.dtype.kind in "biu":
        from .. import int64

        a = a.to(int64)
    return einsum("ii->", a)


# ------------------------------------------------------------- decompositions
# Rule helpers (all in ``ns`` ops). ``row(v)`` is v[..., None, :], ``col(v)`` v[..., :, None].

def _row(ns, v):
    s = tuple(v.shape)
    return ns.reshape(v, shape=s[:-1] + (1, s[-1]))


def _col(ns, v):
    s = tuple(v.shape)
    return ns.reshape(v, shape=s + (1,))


def _diag(ns, x):
    return _ein(ns, "~ii->~i", x)


def _diag_embed(ns, v):
    return _ein(ns, "~i,ij->~ij", v, xp.eye(v.shape[-1], dtype=v.dtype))


def _tril_mask(n, dtype, diag=1.0, k=0):
    """Constant lower-triangular mask (``diag`` on the diagonal), for rules."""
    m = np.tril(np.ones((n, n), dtype=dtype), k)
    if k == 0:
        m[np.diag_indices(n)] = diag
    return m


def _gap(ns, v):
    """``E[i, j] = v[j] - v[i]`` with exact zeros replaced by 1 (the diagonal, ties)."""
    e = _row(ns, v) - _col(ns, v)
    return ns.where(e == 0, 1.0, e)


def _offdiag(n, dtype):
    return np.ones((n, n), dtype=dtype) - np.eye(n, dtype=dtype)


def _batch_front(prim):
    """Batching rule of ops mapped over all leading dims: move the batch dim to the front."""

    def rule(vals, bdims, **params):
        return bind(prim, (move_bdim(vals[0], bdims[0], 0),), params), 0

    return rule


def _lapack(name, fn):
    """Forward that reports LAPACK failures (singular, not positive-definite) clearly."""

    def impl(*arrays, **params):
        try:
            return fn(*arrays, **params)
        except np.linalg.LinAlgError as e:
            raise RuntimeError(f"the input is {_reason(name, e)}") from None

    return impl


def _reason(name, e):
    if name == "cholesky":
        return "not positive-definite; cholesky needs a symmetric positive-definite matrix"
    if "Singular" in str(e):
        return "singular (not invertible)"
    return f"not supported by LAPACK ({e})"


# inv: d(A^-1) = -A^-1 dA A^-1
inv_p = defprim(
    "linalg_inv", _lapack("inv", lambda a: xp.linalg.inv(a)),
    vjp=(lambda ns, g, out, a: -ns.matmul(_mH(ns, out), ns.matmul(g, _mH(ns, out))),),
    jvp=lambda ns, primals, tangents, out: -ns.matmul(out, ns.matmul(tangents[0], out)),
    save_inputs=False, save_out=True,
)
inv_p.batch = _batch_front(inv_p)


# NOTE [Adjugate]
# det and slogdet differentiate through the adjugate adj(A) (= det(A) A^-1 when A is
# invertible, and finite, polynomial in A, when it is not): d det = tr(adj(A) dA). The
# forward is det * inv when LU succeeds, else the SVD: with A = U S V^H (c = det U det V^H),
# adj(A) = c V adj(S) U^H, adj(S) = diag(prod_{l != i} s_l). Its derivative, from the
# same factorisation with F = U^H dA V: d adj = c V D(F) U^H, where
#   D(F) = diag_k(sum_{i != k} F_ii P_ik) - F o P,   P_ik = prod_{l not in {i, k}} s_l (P_ii = 0);
# D is self-adjoint, so the vjp is U D(conj(c) V^H G U) V^H. Both are finite at singular A, so
# det's gradient, jvp and second derivatives are too (PyTorch's double backward is NaN at 0).
def _cofactor_products(ns, s):
    """``P[..., i, k] = prod_{l not in {i, k}} s_l`` (the diagonal: ``prod_{l != i} s_l``)."""
    n = s.shape[-1]
    idx = np.arange(n)
    keep = (idx[None, None, :] != idx[:, None, None]) & (idx[None, None, :] != idx[None, :, None])
    lead = tuple(s.shape[:-1])
    sl = ns.reshape(s, shape=lead + (1, 1, n))
    return ns.prod(ns.where(keep, sl, 1.0), axis=(len(lead) + 2,), keepdims=False)


def _adjugate_impl(a):
    n = a.shape[-1]
    if n == 0:
        return a.copy()
    try:
        with np.errstate(all="ignore"):
            adj = xp.linalg.det(a)[..., None, None] * xp.linalg.inv(a)
        if np.all(np.isfinite(adj)):
            return adj
    except np.linalg.LinAlgError:
        pass
    u, s, vh = xp.linalg.svd(a)
    c = xp.linalg.det(u) * xp.linalg.det(vh)
    c = c if c.dtype.kind == "c" else np.sign(c)
    shat = _diag(AN, _cofactor_products(AN, s))
    return (c[..., None, None] * _mH(AN, vh) * shat[..., None, :]) @ _mH(AN, u)


def _adj_parts(ns, a):
    """U, V^H, c = det(U) det(V^H) (a unit number: +-1 when real) and P of NOTE [Adjugate]."""
    u, s, vh = ns.linalg_svd(a)
    c = ns.linalg_det(u) * ns.linalg_det(vh)
    if c.dtype.kind != "c":
        c = ns.sign(c)  # piecewise constant
    p = _cofactor_products(ns, s) * _offdiag(s.shape[-1], s.dtype)
    return u, vh, _col(ns, _col(ns, c)), p


def _adj_d(ns, f, p):
    """``D(F)`` of NOTE [Adjugate]."""
    dk = ns.matmul(_row(ns, _diag(ns, f)), p)
    return _diag_embed(ns, ns.reshape(dk, shape=tuple(dk.shape[:-2]) + (dk.shape[-1],))) - f * p


def _adjugate_vjp(ns, g, out, a):
    u, vh, c, p = _adj_parts(ns, a)
    if c.dtype.kind == "c":
        c = ns.conj(c)
    return ns.matmul(u, ns.matmul(_adj_d(ns, c * ns.matmul(vh, ns.matmul(g, u)), p), vh))


def _adjugate_jvp(ns, primals, tangents, out):
    u, vh, c, p = _adj_parts(ns, primals[0])
    f = ns.matmul(_mH(ns, u), ns.matmul(tangents[0], _mH(ns, vh)))
    return c * ns.matmul(_mH(ns, vh), ns.matmul(_adj_d(ns, f, p), _mH(ns, u)))


adjugate_p = defprim("linalg_adjugate", _adjugate_impl, vjp=(_adjugate_vjp,), jvp=_adjugate_jvp)
adjugate_p.batch = _batch_front(adjugate_p)


# det: d det(A) = tr(adj(A) dA), finite at singular A. See NOTE [Adjugate].
det_p = defprim(
    "linalg_det", lambda a: xp.asarray(xp.linalg.det(a)),
    vjp=(lambda ns, g, out, a: _col(ns, _col(ns, g)) * _mH(ns, ns.linalg_adjugate(a)),),
    jvp=lambda ns, primals, tangents, out: _ein(ns, "~ij,~ji->~", ns.linalg_adjugate(primals[0]), tangents[0]),
)
det_p.batch = _batch_front(det_p)


def _slogdet_impl(a):
    sign, logabs = xp.linalg.slogdet(a)
    return xp.asarray(sign), xp.asarray(logabs)


def _slogdet_det(ns, out):
    return out[0] * ns.exp(out[1])


# slogdet: with t = tr(adj(A) dA) / det(A): d logabsdet = Re t, d sign = i Im(t) sign (complex
# A; a real sign has no derivative). vjp: (g_logabs - i Im(conj(g_sign) sign)) A^-H, where
# A^-H = adj^H / conj(det): +-inf at singular A (as PyTorch), never an exception.
def _slogdet_vjp(ns, g, out, a):
    coef = g[1]
    det = _slogdet_det(ns, out)
    adj_h = _mH(ns, ns.linalg_adjugate(a))
    if adj_h.dtype.kind == "c":
        det = ns.conj(det)
        if g[0] is not None and g[0].dtype.kind == "c":
            coef = ns.complex(coef, -ns.imag(ns.conj(g[0]) * out[0]))
    return _col(ns, _col(ns, coef / det)) * adj_h


def _slogdet_jvp(ns, primals, tangents, out):
    t = _ein(ns, "~ij,~ji->~", ns.linalg_adjugate(primals[0]), tangents[0]) / _slogdet_det(ns, out)
    if t.dtype.kind != "c":
        return None, t
    im = ns.imag(t)
    return out[0] * ns.complex(ns.zeros_like(im), im), ns.real(t)


slogdet_p = defprim("linalg_slogdet", _slogdet_impl, vjp=(_slogdet_vjp,), jvp=_slogdet_jvp, nout=2, save_out=True)
slogdet_p.batch = _batch_front(slogdet_p)


# solve: X = A^-1 B; gB = A^-T g, gA = -gB X^T. Leading dims broadcast (elementwise batching).
def _solve_impl(a, b):
    batch = np.broadcast_shapes(a.shape[:-2], b.shape[:-2])
    a = xp.broadcast_to(a, batch + a.shape[-2:])
    b = xp.broadcast_to(b, batch + b.shape[-2:])
    return xp.linalg.solve(a, b)


def _solve_gb(ns, g, a):
    return ns.linalg_solve(_mH(ns, a), g)


solve_p = defprim(
    "linalg_solve", _lapack("solve", _solve_impl),
    vjp=(lambda ns, g, out, a, b: sum_to_shape(ns, -ns.matmul(_solve_gb(ns, g, a), _mH(ns, out)), tuple(a.shape)),
         lambda ns, g, out, a, b: sum_to_shape(ns, _solve_gb(ns, g, a), tuple(b.shape))),
    jvp=lambda ns, primals, tangents, out: ns.linalg_solve(
        primals[0], _solve_rhs(ns, tangents, out)),
    save_out=True,
)
solve_p.batch = batch_leading(solve_p)


def _solve_rhs(ns, tangents, out):
    ta, tb = tangents
    rhs = None if ta is None else -ns.matmul(ta, out)
    if tb is not None:
        rhs = tb if rhs is None else rhs + tb
    if tuple(rhs.shape) != tuple(out.shape):
        rhs = ns.broadcast_to(rhs, shape=tuple(out.shape))
    return rhs


# cholesky (lower): gA = sym(L^-T Phi(L^T gL) L^-1), Phi = lower triangle with half diagonal.
def _phi(ns, x):
    return x * _tril_mask(x.shape[-1], x.dtype, 0.5)


def _cholesky_vjp(ns, g, out, a):
    linv = ns.linalg_inv(out)
    ga = ns.matmul(_mH(ns, linv), ns.matmul(_phi(ns, ns.matmul(_mH(ns, out), g)), linv))
    return (ga + _mH(ns, ga)) * 0.5


def _cholesky_jvp(ns, primals, tangents, out):
    linv = ns.linalg_inv(out)
    return ns.matmul(out, _phi(ns, ns.matmul(linv, ns.matmul(tangents[0], _mH(ns, linv)))))


cholesky_p = defprim("linalg_cholesky", _lapack("cholesky", lambda a: xp.linalg.cholesky(a)),
                     vjp=(_cholesky_vjp,), jvp=_cholesky_jvp, save_inputs=False, save_out=True)
cholesky_p.batch = _batch_front(cholesky_p)


# qr (reduced; 'complete' equals it when m <= n). For m >= n:
#   vjp: M = R gR^H - gQ^H Q; gA = (gQ + Q copyltu(M)) R^-H, copyltu(M) = tril(M) + tril(M, -1)^H
#   jvp: C = Q^H dA R^-1, W = tril(C, -1) - tril(C, -1)^H; dR = (C - W) R; dQ = dA R^-1 - Q (C - W)
#   (complex: W also takes i Im(diag(C)), keeping R's diagonal real as LAPACK does, and the
#   vjp keeps only Re(diag(M)), its adjoint)
# For m < n (PyTorch's wide case), A = [X | Y] with X = Q R1 square and R2 = Q^T Y: the square
# rules on X with gQ + Y gR2^T, and gY = Q gR2 (jvp: dR2 = Q^T (dY - dQ R2)). The split and the
# concatenation are products with constant selection matrices.
def _qr_check(a, mode):
    m, n = a.shape[-2:]
    if mode == "r":
        raise RuntimeError("linalg.qr: the derivative of linalg.qr depends on Q, which is not computed when "
                           "mode='r'. Please use linalg.qr(A, mode='reduced') if you are going to differentiate "
                           "through linalg.qr.")
    if mode == "complete" and m > n:
        raise RuntimeError(f"linalg.qr: the QR decomposition is not differentiable when mode='complete' and "
                           f"nrows > ncols (got shape {tuple(a.shape)})")


def _right_inv(ns, x, r):
    """``x @ inv(r)`` via a solve: (R^-T x^T)^T."""
    return _mT(ns, ns.linalg_solve(_mT(ns, r), _mT(ns, x)))


def _split(m, n, dtype):
    """Selection matrices (n, m) and (n, n - m): ``A @ e1`` is A's first m columns."""
    eye = np.eye(n, dtype=dtype)
    return eye[:, :m], eye[:, m:]


def _qr_square_vjp(ns, gq, gr, q, r):
    m = ns.matmul(r, _mH(ns, gr)) - ns.matmul(_mH(ns, gq), q)
    n = m.shape[-1]
    low = m * _tril_mask(n, m.dtype)
    copyltu = low + _mH(ns, m * _tril_mask(n, m.dtype, 0.0, -1))
    if m.dtype.kind == "c":  # the adjoint of the jvp's real-diagonal gauge: Re(diag(M)) only
        im = ns.imag(_diag(ns, m))
        copyltu = copyltu - _diag_embed(ns, ns.complex(ns.zeros_like(im), im))
    return _right_inv(ns, gq + ns.matmul(q, copyltu), _mH(ns, r))


def _qr_vjp(ns, g, out, a, mode):
    _qr_check(a, mode)
    (gq, gr), (q, r) = g, out
    m, n = a.shape[-2:]
    if m >= n:
        return _qr_square_vjp(ns, gq, gr, q, r)
    e1, e2 = _split(m, n, r.dtype)
    r1, gr1, gr2 = ns.matmul(r, e1), ns.matmul(gr, e1), ns.matmul(gr, e2)
    y = ns.matmul(ns.matmul(q, r), e2)
    gx = _qr_square_vjp(ns, gq + ns.matmul(y, _mH(ns, gr2)), gr1, q, r1)
    return ns.matmul(gx, _mT(ns, e1)) + ns.matmul(ns.matmul(q, gr2), _mT(ns, e2))


def _qr_square_jvp(ns, da, q, r):
    dar = _right_inv(ns, da, r)
    c = ns.matmul(_mH(ns, q), dar)
    low = c * _tril_mask(c.shape[-1], c.dtype, 0.0, -1)
    cw = c - (low - _mH(ns, low))
    if c.dtype.kind == "c":  # keep R's diagonal real (LAPACK's gauge): drop i Im(diag(C))
        im = ns.imag(_diag(ns, c))
        cw = cw - _diag_embed(ns, ns.complex(ns.zeros_like(im), im))
    return dar - ns.matmul(q, cw), ns.matmul(cw, r)


def _qr_jvp(ns, primals, tangents, out, mode):
    _qr_check(primals[0], mode)
    q, r = out
    m, n = primals[0].shape[-2:]
    if m >= n:
        return _qr_square_jvp(ns, tangents[0], q, r)
    e1, e2 = _split(m, n, r.dtype)
    dq, dr1 = _qr_square_jvp(ns, ns.matmul(tangents[0], e1), q, ns.matmul(r, e1))
    dr2 = ns.matmul(_mH(ns, q), ns.matmul(tangents[0], e2) - ns.matmul(dq, ns.matmul(r, e2)))
    return dq, ns.matmul(dr1, _mT(ns, e1)) + ns.matmul(dr2, _mT(ns, e2))


def _qr_impl(a, mode):
    if mode == "r":
        return xp.zeros(a.shape[:-2] + (0,), dtype=a.dtype), xp.linalg.qr(a, mode="r")
    return tuple(xp.linalg.qr(a, mode=mode))


qr_p = defprim("linalg_qr", _qr_impl, vjp=(_qr_vjp,), jvp=_qr_jvp, nout=2, save_inputs=False, save_out=True)
qr_p.batch = _batch_front(qr_p)


# eigh (symmetric, lower triangle read): A = V diag(L) V^T,
#   vjp: gA = V (diag(gL) + skew(V^T gV) / E) V^T,  E[i, j] = L[j] - L[i], skew(X) = (X - X^T)/2
#   jvp: P = V^T dA V; dL = diag(P); dV = V (P / E off the diagonal)
def _eigh_vjp(ns, g, out, a):
    (gl, gv), (lam, v) = g, out
    vt = _mH(ns, v)
    vgv = ns.matmul(vt, gv)
    inner = (vgv - _mH(ns, vgv)) * 0.5 / _gap(ns, lam) + _diag_embed(ns, gl)
    return ns.matmul(v, ns.matmul(inner, vt))


def _eigh_jvp(ns, primals, tangents, out):
    lam, v = out
    p = ns.matmul(_mH(ns, v), ns.matmul(tangents[0], v))
    f = p * _offdiag(p.shape[-1], p.dtype) / _gap(ns, lam)
    d = _diag(ns, p)
    return (ns.real(d) if d.dtype.kind == "c" else d), ns.matmul(v, f)


eigh_p = defprim("linalg_eigh", lambda a: tuple(xp.linalg.eigh(a)),
                 vjp=(_eigh_vjp,), jvp=_eigh_jvp, nout=2, save_inputs=False, save_out=True)
eigh_p.batch = _batch_front(eigh_p)


# svd (reduced): A = U diag(S) Vh, k = min(m, n).  E[i, j] = S[j]^2 - S[i]^2.
#   vjp (PyTorch's svd_backward, real case), with skew(X) = X - X^T:
#     inner = (skew(U^T gU) S_j + S_i skew(V^T gV)) / E + diag(gS)
#     m > k: gA = [U inner + (I - U U^T) gU / S] Vh;  n > k: gA = U [inner Vh + gVh/S (I - V V^T)]
#   jvp: P = U^T dA V, dS = diag(P), dU = U (F o (P S + S P^T)) + (I - U U^T) dA V / S,
#        dV = V (F o (S P + P^T S)) + (I - V V^T) dA^T U / S,  F = 1/E off the diagonal.
def _svd_vjp(ns, g, out, a, full_matrices=False):
    # (full_matrices=True reaches the rules only for square inputs: see linalg.svd)
    (gu, gs, gvh), (u, s, vh) = g, out
    m, n = a.shape[-2:]
    k = min(m, n)
    ut = _mH(ns, u)
    ugu = ns.matmul(ut, gu)
    vgv = ns.matmul(vh, _mH(ns, gvh))
    skew_u = ugu - _mH(ns, ugu)
    inner = (skew_u * _row(ns, s) + _col(ns, s) * (vgv - _mH(ns, vgv))) / _gap(ns, s * s)
    inner = inner + _diag_embed(ns, gs)
    if u.dtype.kind == "c":  # the phase term: diag(U^H gU - (U^H gU)^H) / (2 S) (PyTorch's)
        from .linalg_eig import phase_check

        phase_check("svd", ns.imag(_diag(ns, ugu)) + ns.imag(_diag(ns, vgv)), "singular vectors")
        inner = inner + _diag_embed(ns, _diag(ns, skew_u) / (s * 2))
    if m > k:
        gus = gu / _row(ns, s)
        return ns.matmul(ns.matmul(u, inner) + gus - ns.matmul(u, ns.matmul(ut, gus)), vh)
    if n > k:
        sgv = gvh / _col(ns, s)
        return ns.matmul(u, ns.matmul(inner, vh) + sgv - ns.matmul(ns.matmul(sgv, _mH(ns, vh)), vh))
    return ns.matmul(u, ns.matmul(inner, vh))


def _svd_jvp(ns, primals, tangents, out, full_matrices=False):
    a, (ta,), (u, s, vh) = primals[0], tangents, out
    m, n = a.shape[-2:]
    k = min(m, n)
    v, ut = _mH(ns, vh), _mH(ns, u)
    dav = ns.matmul(ta, v)
    p = ns.matmul(ut, dav)
    f = _offdiag(k, p.dtype) / _gap(ns, s * s)
    pt = _mH(ns, p)
    du = ns.matmul(u, f * (p * _row(ns, s) + _col(ns, s) * pt))
    dv = ns.matmul(v, f * (_col(ns, s) * p + pt * _row(ns, s)))
    dp = _diag(ns, p)
    if p.dtype.kind == "c":  # the phase term, the adjoint of the vjp's (PyTorch's choice of gauge)
        im = ns.imag(dp) / s
        du = du + u * _row(ns, ns.complex(ns.zeros_like(im), im))
        dp = ns.real(dp)
    if m > k:
        du = du + (dav - ns.matmul(u, p)) / _row(ns, s)
    if n > k:
        datu = ns.matmul(_mH(ns, ta), u)
        dv = dv + (datu - ns.matmul(v, ns.matmul(vh, datu))) / _row(ns, s)
    return du, dp, _mH(ns, dv)


svd_p = defprim("linalg_svd", _lapack("svd", lambda a, full_matrices=False: tuple(xp.linalg.svd(
                    a, full_matrices=full_matrices))),
                vjp=(_svd_vjp,), jvp=_svd_jvp, nout=3, save_out=True)
svd_p.batch = _batch_front(svd_p)


# svdvals: its own primitive so that norms built on it never divide by gaps of
# (possibly repeated) singular values: gA = U diag(g) Vh.
def _svdvals_vjp(ns, g, out, a):
    u, _, vh = ns.linalg_svd(a)
    return ns.matmul(u, _col(ns, g) * vh)


def _svdvals_jvp(ns, primals, tangents, out):
    u, _, vh = ns.linalg_svd(primals[0])
    d = _diag(ns, ns.matmul(_mH(ns, u), ns.matmul(tangents[0], _mH(ns, vh))))
    return ns.real(d) if d.dtype.kind == "c" else d


svdvals_p = defprim("linalg_svdvals", _lapack("svd", lambda a: xp.linalg.svd(a, compute_uv=False)),
                    vjp=(_svdvals_vjp,), jvp=_svdvals_jvp)
svdvals_p.batch = _batch_front(svdvals_p)


__all__ = ['bmm', 'dot', 'einsum', 'ger', 'kron', 'matmul', 'mm', 'mv', 'outer', 'tensordot', 'trace']
