"""Products: ``matmul`` and ``einsum`` primitives and their composites.

* ``matmul`` — every broadcasting case of ``@`` (NOTE [matmul ranks]);
* ``einsum`` — a general primitive (NOTE [einsum primitive]); ``mm``, ``bmm``, ``mv``,
  ``dot``, ``outer``, ``tensordot``, ``kron`` and ``trace`` are composites of it.

The decomposition primitives live by family in ``linalg_decomp`` (inv, det, slogdet, solve,
cholesky, qr), ``linalg_spectral`` (eigh, svd, svdvals), ``linalg_eig``, ``linalg_solvers``
and ``linalg_norm``; their names are re-exported here so ``lucid.ops.linalg.<name>_p`` keeps
working.
"""
from __future__ import annotations

import functools
import math

import numpy as np

from .._core import dtypes
from .._core.backend import namespace_of, xp
from .._core.primitive import AUTOCAST_HOOK, TN, autocast_composite, bind, defprim
from .._core.tensor import Tensor, tensor_method
from ._family import _as_tensor, move_bdim, quiet, shape_of, sum_to_shape
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
    if a.__class__ is not np.ndarray and a.ndim == 2 and b.ndim == 2:
        return a.dot(b)  # See NOTE [Device GEMM]
    return xp.matmul(a, b)


# NOTE [Device GEMM]
# On a device, a product of two matrices goes through ``a.dot(b)``: CuPy's ``matmul`` runs a
# Python gufunc wrapper before the same cuBLAS call. Measured on an H100 (benchmarks/
# gpu_profile.py), ``x.dot(W.T)`` for (128, 784) x (784, 512): 22.0 us of host time a call,
# ``cupy.matmul`` 23.8 us; GEMM calls are the largest host cost of a GPU training step.
# NumPy's ``matmul`` stays on the CPU path, where it is as fast.


matmul_p = defprim(
    "matmul",
    quiet(_matmul_impl, 2),  # 0 * inf is nan, silently. See NOTE [Silent floating-point errors]
    vjp=(lambda ns, g, out, x, y: sum_to_shape(ns, ns.matmul(g, _mH(ns, y)), tuple(x.shape)),
         lambda ns, g, out, x, y: sum_to_shape(ns, ns.matmul(_mH(ns, x), g), tuple(y.shape))),
    jvp=_matmul_jvp,
    vjp_reads=((1,), (0,)),  # NOTE [Version checks of unread inputs]
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
    hook = AUTOCAST_HOOK[0]
    if hook is not None:  # NOTE [Autocast]: cast before the promotion below
        input, other = hook("matmul", (input, other)) or (input, other)
    if input.__class__ is Tensor and other.__class__ is Tensor:  # the hot path: two plain matrices
        a, b = input._data, other._data
        if a.ndim == 2 and b.ndim == 2 and a.dtype is b.dtype and a.shape[1] == b.shape[0] and a.dtype is not _BOOL:
            return bind(matmul_p, (input, other), {})
    a, b = promote(_as_tensor(input), _as_tensor(other))
    if a.dtype.kind == "b":
        _refuse_bool("matmul")
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
_BOOL = np.dtype(np.bool_)


def _refuse_bool(op):
    """PyTorch has no bool kernel for its matrix products (mm, bmm, mv, dot, addmm ...): NumPy's
    would give logical or-of-ands, so Lucid refuses too, with PyTorch's error type."""
    raise NotImplementedError(f"{op}: not implemented for bool tensors (as in PyTorch); cast them to an "
                              "integer or floating dtype first")


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
            ops.append(namespace_of(g).eye(x.shape[pos], dtype=g.dtype))
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


einsum_p = defprim("einsum", quiet(_einsum_impl), vjp=_einsum_vjp, jvp=_einsum_jvp, batch=_einsum_batch)


def _ein(ns, subscripts, *ops):
    """Rule helper: ``einsum`` where ``~`` stands for the batch letters of the first operand."""
    nb = len(shape_of(ops[0])) - (len(subscripts.split("->")[0].split(",")[0]) - 1)
    batch = _LETTERS[26:26 + nb]
    return ns.einsum(*ops, subscripts=subscripts.replace("~", batch))


def _common(tensors, op):
    """Tensors of one dtype (PyTorch promotion across all operands)."""

    tensors = [_as_tensor(t) for t in tensors]
    # PyTorch's table (int64 with float32 is float32), not NumPy's; 0-d operands rank as the
    # others here, as in PyTorch's einsum
    if not tensors or all(t.dtype == tensors[0].dtype for t in tensors):
        return tensors
    dt = functools.reduce(dtypes.promote_types, [t.dtype for t in tensors]).dtype
    return [t if t.dtype == dt else cast(t, dt) for t in tensors]


class _EinsumError(RuntimeError, ValueError):
    """A malformed einsum call: PyTorch raises RuntimeError (Lucid's ValueError, kept as a base)."""


def _expand_equation(equation, shapes):
    """(explicit input subscripts, output subscript) with ``...`` replaced by fresh letters."""
    eq = equation.replace(" ", "")
    lhs, arrow, out = eq.partition("->")
    ins = lhs.split(",")
    if len(ins) != len(shapes):
        raise _EinsumError(f"einsum: the equation '{equation}' has {len(ins)} operand(s) but "
                         f"{len(shapes)} were given")
    used = set(c for c in eq if c.isalpha())
    bad = set(c for c in eq.replace("...", "") if not c.isalpha() and c not in ",->")
    if bad:
        raise _EinsumError(f"einsum: invalid characters {sorted(bad)} in '{equation}'")
    n_ell = 0
    for s, shp in zip(ins, shapes):
        n_letters = len(s.replace("...", ""))
        if "..." not in s and n_letters != len(shp) or n_letters > len(shp):
            raise _EinsumError(f"einsum: subscript '{s}' has {n_letters} letter(s) but the operand "
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
            raise _EinsumError(f"einsum: output subscript '{out}' must use distinct letters that "
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


# NOTE [Integer einsum]
# PyTorch's einsum first sums, with ``sum``, every letter that one operand alone holds and the
# output lacks, then contracts the letters operands share with ``bmm``. So for bool and integer
# operands: summing within an operand gives int64 (``sum``'s dtype, e.g. ``'ij->'``,
# ``'ii->'``, ``'i,j->i'``); a bool contraction over a shared letter is refused (no bool
# ``bmm``: ``'ij,jk->ik'``); products and contractions of integers keep their dtype
# (``'ij,jk->ik'``, ``'ij,ij->ij'``). Lucid casts every operand to int64 before the
# contraction when an operand is summed alone: the same values as PyTorch's int64 sums.
# Deliberately lenient where PyTorch's plan mixes int64 partial sums with int32 operands in
# ``bmm`` and fails (``'ij,j->'`` on int32): Lucid gives the int64 answer.
def _integral_operands(ins, out, ops, equation):
    summed = set("".join(ins)) - set(out)
    holders = [sum(c in s for s in ins) for c in summed]
    if ops[0].dtype.kind == "b" and any(k > 1 for k in holders):
        raise NotImplementedError(f"einsum: contracting bool operands over a shared subscript is not implemented "
                                  f"(as in PyTorch: no bool matrix product); cast them first ('{equation}')")
    if any(k == 1 for k in holders):
        return [cast(t, np.dtype(np.int64)) for t in ops]
    return ops


_SUBLIST_LETTERS = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"


def _sublist_subscripts(sub):
    out = []
    for s in sub:
        if s is Ellipsis:
            out.append("...")
        elif isinstance(s, int) and not isinstance(s, bool) and 0 <= s < len(_SUBLIST_LETTERS):
            out.append(_SUBLIST_LETTERS[s])
        else:
            raise _EinsumError(f"einsum(): subscript in subscript list is not within the valid range [0, 52), got {s!r}")
    return "".join(out)


def _from_sublists(args):
    """PyTorch's sublist form ``einsum(a, [0, 1], b, [1, 2], [0, 2])`` as an equation and operands."""
    pairs, rest = args[:len(args) // 2 * 2], args[len(args) // 2 * 2:]
    ops = list(pairs[0::2])
    eq = ",".join(_sublist_subscripts(s) for s in pairs[1::2])
    if rest:
        eq += "->" + _sublist_subscripts(rest[0])
    return eq, ops


def einsum(equation, *operands):
    """Einstein summation (``'ij,jk->ik'``), with ``...``, implicit outputs and diagonals.

    Parameters
    ----------
    equation : str
        Subscripts per operand separated by ``,``, optionally ``->`` and the output. PyTorch's
        sublist form is accepted too: ``einsum(a, [0, 1], b, [1, 2], [0, 2])`` (integers
        0-51 name the dims, ``...`` the broadcast ones; the last list, if unpaired, is the output).
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
    >>> lucid.einsum(a, [0, 1], a, [1, 2], [0, 2]).tolist()
    [[7.0, 10.0], [15.0, 22.0]]
    """
    if not isinstance(equation, str):
        equation, operands = _from_sublists((equation,) + operands)
    if len(operands) == 1 and isinstance(operands[0], (list, tuple)):
        operands = tuple(operands[0])
    ops = _common(operands, "einsum")
    shapes = [tuple(t.shape) for t in ops]
    ins, out = _expand_equation(equation, shapes)
    sizes = _letter_sizes(ins, shapes, equation)
    if ops and ops[0].dtype.kind in "biu":  # See NOTE [Integer einsum]
        ops = _integral_operands(ins, out, ops, equation)
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
@autocast_composite("mv")  # NOTE [Autocast]
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
@autocast_composite("dot")  # NOTE [Autocast]
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
    if a.dtype.kind == "b" or b.dtype.kind == "b":
        _refuse_bool("dot")
    if a.shape != b.shape:
        raise RuntimeError(f"dot: expected both vectors to have same number of elements, "
                           f"got shapes {tuple(a.shape)} and {tuple(b.shape)}")
    return einsum("i,i->", a, b)


@tensor_method("outer", "ger")
@autocast_composite("outer")  # NOTE [Autocast]
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
        Contract the last ``dims`` dims of ``a`` with the first of ``b``, or these dims. Paired
        dims must have equal sizes, or one of them size 1 (it broadcasts, as in PyTorch).

    Examples
    --------
    >>> import lucid
    >>> lucid.tensordot(lucid.ones(2, 3, 4), lucid.ones(3, 4, 5), dims=2).shape
    (2, 5)
    >>> lucid.tensordot(lucid.ones(2, 3), lucid.ones(3, 2), dims=([1], [0])).shape
    (2, 2)
    """
    a, b = _as_tensor(a), _as_tensor(b)
    if a.dtype.kind == "b" or b.dtype.kind == "b":  # PyTorch's tensordot is a matrix product
        _refuse_bool("tensordot")
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
    for x, y in zip(da, db):  # a size-1 dim broadcasts against the other (einsum expands it), as in PyTorch
        if a.shape[x] != b.shape[y] and 1 not in (a.shape[x], b.shape[y]):
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
@autocast_composite("kron")  # NOTE [Autocast]
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
@autocast_composite("trace")  # NOTE [Autocast]
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
    if a.dtype.kind == "b":
        raise NotImplementedError("trace: not implemented for bool tensors (as in PyTorch); cast to an integer "
                                  "dtype first")
    k = min(a.shape)
    if a.shape[0] != a.shape[1]:
        a = a[:k, :k]
    if a.dtype.kind in "biu":
        from .. import int64

        a = a.to(int64)
    return einsum("ii->", a)


__all__ = ['bmm', 'dot', 'einsum', 'ger', 'kron', 'matmul', 'mm', 'mv', 'outer', 'tensordot', 'trace']

# Re-exports (after every name above exists: the family modules import helpers from here).
from .linalg_decomp import (  # noqa: E402,F401
    _batch_front, _col, _diag, _diag_embed, _gap, _lapack, _offdiag, _reason, _row, _tril_mask,
    adjugate_p, cholesky_p, det_p, inv_p, qr_p, slogdet_p, solve_p,
)
from .linalg_spectral import eigh_p, svd_p, svdvals_p  # noqa: E402,F401
