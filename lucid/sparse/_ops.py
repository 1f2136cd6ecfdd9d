"""Operations on sparse tensors (``lucid.sparse.mm``, ``sum``, ``softmax`` ...), the sparse
tensors' arithmetic and product methods, and the sparse-aware ``lucid.mm``/``matmul``.

All composed from dense ops on indices and values: a product is a gather of the dense
operand's rows (``index_select``) scaled by the values and summed into the output rows
(``index_add``), so its gradients reach both the dense operand and the values (the
sparse operand's pattern). See NOTE [Sparse tensors] in ``lucid/sparse/__init__.py``.
"""
from __future__ import annotations

import functools
import numbers

import numpy as np

import lucid
from .._core.tensor import Tensor
from ..ops.scatter_extra import segment_softmax
from ._base import SparseTensor, derive_dense, require_sparse
from ._coo import SparseCOOTensor, _canon, _host, coalesced, linear_index, make_coo
from ._base import sparse_bsc, sparse_bsr, sparse_csr
from ._compressed import SparseCompressedTensor, convert, index_dtype

_BLOCKED = (sparse_bsr, sparse_bsc)


def _coo(x):
    return x.to_sparse_coo() if isinstance(x, SparseCompressedTensor) else x


def _relayout(out, like):
    """COO ``out`` in the compressed layout (and blocksize) of ``like``."""
    if not isinstance(like, SparseCompressedTensor):
        return out
    bs = like._blocksize() if like.layout in _BLOCKED else None
    return index_dtype(convert(out, like.layout, bs, None, "relayout"), like._cidx.dtype)


def _rows_cols_vals(s, name):
    if len(s.shape) != 2 or s.dense_dim() != 0:
        raise RuntimeError(f"{name}: expected a 2-D sparse matrix without dense dims, got size "
                           f"{tuple(s.shape)} with {s.dense_dim()} dense dims")
    if isinstance(s, SparseCompressedTensor):
        idx, vals = s._coo_parts()
        return idx[0], idx[1], vals
    return s._idx[0], s._idx[1], s._vals


def _rows_cols(s, name):
    return _rows_cols_vals(s, name)[:2]


def _spmm(s, dense, name):
    """Sparse 2-D ``s`` times dense ``dense`` (1-D or 2-D): a dense result."""
    if isinstance(dense, SparseTensor):
        raise TypeError(f"{name}: expected a dense second operand here")
    if not isinstance(dense, Tensor):
        raise TypeError(f"{name}: expected a Tensor, got {type(dense).__name__}")
    rows, cols, vals = _rows_cols_vals(s, name)
    if dense.ndim not in (1, 2):
        raise RuntimeError(f"{name}: expected a 1-D or 2-D dense operand, got {dense.ndim}-D")
    if dense.shape[0] != s.shape[1]:
        raise RuntimeError(f"{name}: mat1 and mat2 shapes cannot be multiplied "
                           f"({s.shape[0]}x{s.shape[1]} and {'x'.join(map(str, dense.shape))})")
    if dense.dtype != s.dtype:
        raise RuntimeError(f"{name}: expected scalar type {s.dtype} but found {dense.dtype}")
    picked = dense.index_select(0, cols)
    contrib = vals * picked if dense.ndim == 1 else vals.unsqueeze(1) * picked
    out = lucid.zeros((s.shape[0],) + tuple(dense.shape[1:]), dtype=s.dtype, device=s.device)
    return out.index_add(0, rows, contrib)


def _sparse_sparse(a, b, name):
    """Product of two sparse matrices: sparse, with the structural pattern of ``a @ b``
    (CSR when both are CSR, as PyTorch's)."""
    if isinstance(a, SparseCompressedTensor) and isinstance(b, SparseCompressedTensor) and a.layout is b.layout:
        return _relayout(_sparse_sparse(_coo(a), _coo(b), name), a)
    a, b = _coo(a).coalesce(), _coo(b).coalesce()
    ra, _ = _rows_cols(a, name)
    _rows_cols(b, name)
    if a.shape[1] != b.shape[0]:
        raise RuntimeError(f"{name}: mat1 and mat2 shapes cannot be multiplied "
                           f"({a.shape[0]}x{a.shape[1]} and {b.shape[0]}x{b.shape[1]})")
    values = _spmm(a, b.to_dense(), name)
    with lucid.no_grad():
        ones_b = make_coo(b._idx, lucid.ones(b._nnz(), dtype=lucid.float64, device=b.device), b.shape, True)
        ones_a = make_coo(a._idx, lucid.ones(a._nnz(), dtype=lucid.float64, device=a.device), a.shape, True)
        hit = _spmm(ones_a, ones_b.to_dense(), name) != 0
        idx = lucid.nonzero(hit).t().contiguous()
    return make_coo(idx, values[idx[0], idx[1]], (a.shape[0], b.shape[1]), True)


def mm(mat1, mat2, reduce="sum"):
    """Matrix product with a sparse operand, PyTorch's ``torch.sparse.mm``.

    sparse @ dense and dense @ sparse give dense results; sparse @ sparse a sparse one.
    The gradient with respect to a sparse operand reaches its values, so a sparse leaf's
    ``.grad`` is sparse with its pattern; the dense operand gets a dense gradient.

    Parameters
    ----------
    mat1, mat2 : Tensor
        2-D matrices, at least one sparse (COO or CSR) without dense dims.
    reduce : str
        ``"sum"`` only (PyTorch's CSR-only "mean"/"amax"/"amin" are not supported).

    Examples
    --------
    >>> import lucid
    >>> s = lucid.sparse_coo_tensor([[0, 1], [1, 0]], [2.0, 3.0], (2, 2))
    >>> lucid.sparse.mm(s, lucid.tensor([[1.0, 0.0], [0.0, 1.0]]))
    tensor([[0., 2.],
            [3., 0.]])
    """
    if reduce not in ("sum", None):
        raise NotImplementedError(f"mm: reduce={reduce!r} is not supported (only 'sum')")
    sa, sb = isinstance(mat1, SparseTensor), isinstance(mat2, SparseTensor)
    if sa and sb:
        return _sparse_sparse(mat1, mat2, "mm")
    if sa:
        if getattr(mat2, "ndim", 2) != 2:
            raise RuntimeError(f"mm: expected a 2-D dense matrix, got {mat2.ndim}-D")
        return _spmm(mat1, mat2, "mm")
    if sb:
        if getattr(mat1, "ndim", 2) != 2:
            raise RuntimeError(f"mm: expected a 2-D dense matrix, got {mat1.ndim}-D")
        return _spmm(_coo(mat2).t(), mat1.t(), "mm").t()
    raise TypeError("mm: expected at least one sparse operand (use lucid.mm for dense matrices)")


def _matmul(a, b, name="matmul"):
    sa, sb = isinstance(a, SparseTensor), isinstance(b, SparseTensor)
    if sa and sb:
        return _sparse_sparse(a, b, name)
    if sa:
        return _spmm(a, b, name)
    if b.ndim == 1 or a.ndim != 2:
        raise RuntimeError(f"{name}: dense @ sparse needs a 2-D dense matrix, got {a.ndim}-D")
    return _spmm(_coo(b).t(), a.t(), name).t()


def addmm(input, mat1, mat2, *, beta=1.0, alpha=1.0):
    """``beta * input + alpha * (mat1 @ mat2)`` with sparse ``mat1``, PyTorch's ``torch.sparse.addmm``.

    Examples
    --------
    >>> import lucid
    >>> s = lucid.sparse_coo_tensor([[0, 1], [1, 0]], [2.0, 3.0], (2, 2))
    >>> lucid.sparse.addmm(lucid.ones(2, 2), s, lucid.eye(2), beta=2.0, alpha=1.0)
    tensor([[2., 4.],
            [5., 2.]])
    """
    if isinstance(input, SparseTensor):
        input = input.to_dense()
    prod = _matmul(mat1, mat2, "addmm")
    prod = prod.to_dense() if isinstance(prod, SparseTensor) else prod
    return _scaled(input, beta) + _scaled(prod, alpha)


def _scaled(t, k):
    return t if isinstance(k, numbers.Number) and k == 1 else t * k


def sum(input, dim=None, dtype=None):  # noqa: A001  (torch.sparse.sum)
    """Sum of a sparse tensor's elements, PyTorch's ``torch.sparse.sum``.

    Over all dims (or all sparse dims) the result is dense; otherwise sparse (coalesced)
    over the sparse dims that remain.

    Examples
    --------
    >>> import lucid
    >>> s = lucid.sparse_coo_tensor([[0, 1, 1], [0, 0, 2]], [1.0, 2.0, 3.0], (2, 3))
    >>> lucid.sparse.sum(s)
    tensor(6.)
    >>> lucid.sparse.sum(s, 1).to_dense()
    tensor([1., 5.])
    """
    require_sparse(input, "sum")
    s = _coo(input)
    vals = s._vals if dtype is None else s._vals.to(dtype)
    if dim is None:
        return vals.sum()
    nd = len(s.shape)
    dims = [_canon(d, nd, "sum") for d in ((dim,) if isinstance(dim, numbers.Integral) else dim)]
    if len(set(dims)) != len(dims):
        dup = next(d for d in dims if dims.count(d) > 1)
        raise RuntimeError(f"sum: dim {dup} appears multiple times in the list of dims")
    dims = sorted(dims)
    sd = s.sparse_dim()
    dense_axes = [d - sd + 1 for d in dims if d >= sd]
    if dense_axes:
        vals = vals.sum(dim=dense_axes)
    sparse_red = [d for d in dims if d < sd]
    if len(sparse_red) == sd:
        return vals.sum(0)
    keep = [d for d in range(sd) if d not in sparse_red]
    size = [s.shape[d] for d in keep] + [s.shape[d] for d in range(sd, nd) if d not in dims]
    idx = s._idx[keep] if sparse_red else s._idx
    return coalesced(make_coo(idx, vals, size, False), "sum")


def _group_inverse(s, dim):
    """The number of groups and, for each entry of coalesced ``s``, its group: entries that
    share every sparse index but the one along ``dim``."""
    sd = s.sparse_dim()
    others = [d for d in range(sd) if d != dim]
    key = linear_index(s._idx[others], [s.shape[d] for d in others])
    groups, inv = lucid.unique(key, sorted=True, return_inverse=True)
    return int(groups.shape[0]), inv


def _softmax(input, dim, dtype, log, name):
    require_sparse(input, name)
    s = _coo(input).coalesce()
    vals = s._vals if dtype is None else s._vals.to(dtype)
    nd = len(s.shape)
    d = _canon(dim, nd, name)
    sd = s.sparse_dim()
    if d >= sd:  # along a dense dim: each entry's values on their own
        fn = lucid.log_softmax if log else lucid.softmax
        out = fn(vals, d - sd + 1)
    elif s._nnz() == 0:
        out = vals
    else:
        groups, inv = _group_inverse(s, d)
        out = segment_softmax(vals, inv, groups, log)
    return make_coo(s._idx, out, s._size, True)


def softmax(input, dim, *, dtype=None):
    """Softmax of a sparse tensor along ``dim`` over its specified elements only (the
    unspecified ones count as -inf), PyTorch's ``torch.sparse.softmax``; same pattern.

    Examples
    --------
    >>> import lucid
    >>> s = lucid.sparse_coo_tensor([[0, 0, 1], [0, 2, 1]], [0.0, 0.0, 5.0], (2, 3))
    >>> lucid.sparse.softmax(s, 1).to_dense()
    tensor([[0.5, 0. , 0.5],
            [0. , 1. , 0. ]])
    """
    return _softmax(input, dim, dtype, False, "softmax")


def log_softmax(input, dim, *, dtype=None):
    """Log-softmax of a sparse tensor along ``dim`` over its specified elements only,
    PyTorch's ``torch.sparse.log_softmax``.

    Examples
    --------
    >>> import lucid
    >>> s = lucid.sparse_coo_tensor([[0, 2]], [1.0, 1.0], (3,))
    >>> lucid.sparse.log_softmax(s, 0).values()
    tensor([-0.6931472, -0.6931472])
    """
    return _softmax(input, dim, dtype, True, "log_softmax")


# ------------------------------------------------------------------ arithmetic
def _same_compressed(a, b):
    return isinstance(a, SparseCompressedTensor) and isinstance(b, SparseCompressedTensor) and a.layout is b.layout \
        and a._blocksize() == b._blocksize()


def _same_size(a, b, name):
    if tuple(a.shape) != tuple(b.shape):
        raise RuntimeError(f"{name}: expected sizes of 'self' and 'other' to match, but "
                           f"{list(a.shape)} != {list(b.shape)}")


def add(input, other, *, alpha=1):
    """``input + alpha * other`` with a sparse operand: sparse + sparse is sparse (coalesced
    when both are), a dense operand makes it dense.

    Examples
    --------
    >>> import lucid
    >>> a = lucid.sparse_coo_tensor([[0, 1]], [1.0, 2.0], (3,))
    >>> lucid.sparse.add(a, a, alpha=2).to_dense()
    tensor([3., 6., 0.])
    """
    return derive_dense(_add(input, other, alpha), lambda a, b: a + _scaled(b, alpha), input, other)


def _add(input, other, alpha):
    sa, sb = isinstance(input, SparseTensor), isinstance(other, SparseTensor)
    if sa and sb:
        _same_size(input, other, "add")
        if _same_compressed(input, other):
            return _relayout(_add(input.to_sparse_coo(), other.to_sparse_coo(), alpha), input)
        a, b = _coo(input), _coo(other)
        if a.sparse_dim() != b.sparse_dim():
            raise RuntimeError("add: expected both sparse tensors to have the same sparse_dim")
        dt = lucid.promote_types(a.dtype, b.dtype)
        vals = lucid.cat([a._vals.to(dt), _scaled(b._vals.to(dt), alpha)])
        idx = lucid.cat([a._idx, b._idx], dim=1)
        out = make_coo(idx, vals, a._size, False)
        return coalesced(out) if a._coalesced and b._coalesced else out
    if sa or sb:
        if not isinstance(input if sb else other, Tensor):
            raise RuntimeError("add: a sparse tensor and a number can't be added (the result would be dense); "
                               "call .to_dense() first")
        a = input.to_dense() if sa else input
        b = other.to_dense() if sb else other
        return a + _scaled(b, alpha)
    raise TypeError("add: expected a sparse operand")


def mul(input, other):
    """Elementwise product with a sparse operand: by a number or dense tensor (broadcast to
    the sparse shape) it keeps the pattern; sparse * sparse keeps the common entries.

    Examples
    --------
    >>> import lucid
    >>> a = lucid.sparse_coo_tensor([[0, 2]], [2.0, 3.0], (3,))
    >>> b = lucid.sparse_coo_tensor([[2, 1]], [4.0, 5.0], (3,))
    >>> (a * b).to_dense(), (a * 2).to_dense()
    (tensor([ 0.,  0., 12.]), tensor([4., 0., 6.]))
    """
    return derive_dense(_mul(input, other), lambda a, b: a * b, input, other)


def _mul(input, other):
    if isinstance(input, SparseTensor) and isinstance(other, SparseTensor):
        _same_size(input, other, "mul")
        if _same_compressed(input, other):
            return _relayout(_intersect(input.to_sparse_coo(), other.to_sparse_coo()), input)
        return _intersect(_coo(input), _coo(other))
    s, k = (input, other) if isinstance(input, SparseTensor) else (other, input)
    if isinstance(k, numbers.Number) or (isinstance(k, Tensor) and k.ndim == 0):
        return s._replace(s._vals * k)
    if not isinstance(k, Tensor):
        return NotImplemented
    c = _coo(s)
    dense = lucid.broadcast_to(k, tuple(c.shape)) if tuple(k.shape) != tuple(c.shape) else k
    picked = dense[tuple(c._idx[d] for d in range(c.sparse_dim()))]
    if isinstance(s, SparseCompressedTensor):  # the same pattern: its COO form is in storage order
        return s._replace(s._vals * picked.reshape(tuple(s._vals.shape)))
    return make_coo(c._idx, c._vals * picked, c._size, c._coalesced)


def _intersect(a, b):
    a, b = a.coalesce(), b.coalesce()
    sd = a.sparse_dim()
    if b.sparse_dim() != sd:
        raise RuntimeError("mul: expected both sparse tensors to have the same sparse_dim")
    dt = lucid.promote_types(a.dtype, b.dtype)
    if a._nnz() == 0 or b._nnz() == 0:
        empty = lucid.zeros((sd, 0), dtype=lucid.int64, device=a.device)
        # empty slices of both values keep the result in the graph (a zero gradient, as PyTorch's)
        vals = (a._vals[:0] * b._vals[:0]).to(dt)
        return make_coo(empty, vals, a._size, True)
    shape = tuple(a.shape[:sd])
    ka, kb = linear_index(a._idx, shape), linear_index(b._idx, shape)
    pos = lucid.searchsorted(ka, kb).clamp(max=a._nnz() - 1)
    hit = lucid.nonzero(ka.index_select(0, pos) == kb)[:, 0]
    sel_a = pos.index_select(0, hit)
    vals = a._vals.to(dt).index_select(0, sel_a) * b._vals.to(dt).index_select(0, hit)
    return make_coo(b._idx.index_select(1, hit), vals, a._size, True)


def _div(s, k):
    if isinstance(k, numbers.Number) or (isinstance(k, Tensor) and not isinstance(k, SparseTensor) and k.ndim == 0):
        return derive_dense(s._replace(s._vals / k), lambda d: d / k, s)
    shape = list(getattr(k, "shape", ()))
    raise RuntimeError(f"div: Sparse division requires a scalar or zero-dim dense tensor divisor "
                       f"(got shape {shape} for divisor)")


# Elementwise functions with f(0) = 0: applied to the values of the coalesced tensor (a
# linear one, like neg, needs no coalescing and keeps the flag).
_ZERO_PRESERVING = ("abs", "sin", "sinh", "tan", "tanh", "asin", "asinh", "atan", "atanh", "sqrt",
                    "square", "relu", "sign", "sgn", "floor", "ceil", "trunc", "frac", "round", "expm1",
                    "log1p", "erf", "erfinv", "deg2rad", "rad2deg", "signbit", "isnan", "isinf", "nan_to_num",
                    "isposinf", "isneginf", "angle", "conj", "conj_physical")


def _unary(name):
    def method(self, *args, **kwargs):
        s = self.coalesce() if isinstance(self, SparseCOOTensor) else self
        return s._replace(getattr(lucid, name)(s._vals, *args, **kwargs))

    method.__name__ = name
    method.__doc__ = f"``{name}`` of the specified values (``{name}(0) = 0``, so the pattern is kept)."
    return method


def _pow(self, exponent):
    if isinstance(exponent, SparseTensor) or (isinstance(exponent, Tensor) and exponent.ndim > 0):
        raise NotImplementedError("pow: a sparse tensor can only be raised to a scalar power")
    e = exponent.item() if isinstance(exponent, Tensor) else exponent
    if e == 0:
        raise RuntimeError("pow: cannot raise to zeroth power on sparse tensor; it would make the result "
                           "tensor dense")
    s = self.coalesce() if isinstance(self, SparseCOOTensor) else self
    return s._replace(s._vals ** exponent)


def _neg(self):
    return derive_dense(self._replace(-self._vals), lambda d: -d, self)


def _rsub(self, other):
    return add(other, self, alpha=-1)


def _sum_method(self, dim=None, keepdim=False, dtype=None):
    out = _sum_keepdim(self, dim, keepdim, dtype)
    if keepdim and dim is not None and self.layout is sparse_csr:
        return out.to_sparse_csr()  # PyTorch keeps a CSR input's layout (a 2-D result)
    return out


def _sum_keepdim(self, dim, keepdim, dtype):
    out = sum(self, dim, dtype)
    if not keepdim or dim is None:
        return out
    nd = len(self.shape)
    dims = {_canon(d, nd, "sum") for d in ((dim,) if isinstance(dim, numbers.Integral) else dim)}
    size = [1 if d in dims else n for d, n in enumerate(self.shape)]
    if not isinstance(out, SparseTensor):  # every sparse dim reduced: dense, as PyTorch's
        return out.reshape(size)
    # the reduced dims come back with size 1: a zero index row for a sparse one, a unit
    # axis of the values for a dense one
    sd = _coo(self).sparse_dim()
    rows, k = [], 0
    zero = lucid.zeros((1, out._nnz()), dtype=lucid.int64, device=out.device)
    for d in range(sd):
        if d in dims:
            rows.append(zero)
        else:
            rows.append(out._idx[k:k + 1])
            k += 1
    vals = out._vals
    for d in sorted(x for x in dims if x >= sd):
        vals = vals.unsqueeze(d - sd + 1)
    return make_coo(lucid.cat(rows), vals, size, True)


def _install():
    """The operators and methods of sparse tensors that differ from dense ones."""
    for cls in (SparseCOOTensor, SparseCompressedTensor):
        cls.__add__ = cls.add = lambda self, other, *, alpha=1: add(self, other, alpha=alpha)
        cls.__radd__ = lambda self, other: add(other, self)
        cls.__sub__ = cls.sub = lambda self, other, *, alpha=1: add(self, other, alpha=-alpha)
        cls.__rsub__ = _rsub
        cls.__mul__ = cls.__rmul__ = cls.mul = cls.multiply = mul
        cls.__truediv__ = cls.div = cls.divide = _div
        cls.__neg__ = cls.neg = cls.negative = _neg
        cls.__pow__ = cls.pow = _pow
        cls.__matmul__ = cls.matmul = lambda self, other: _matmul(self, other)
        cls.__rmatmul__ = lambda self, other: _matmul(other, self)
        cls.mm = lambda self, other: mm(self, other)
        cls.mv = lambda self, vec: _spmm(self, vec, "mv")
        cls.sum = _sum_method
        for name in _ZERO_PRESERVING:
            setattr(cls, name, _unary(name))


_install()


# ------------------------------------------------------------------ more of torch.sparse
def sampled_addmm(input, mat1, mat2, *, beta=1.0, alpha=1.0):
    """``beta * input + alpha * (mat1 @ mat2)`` computed only at ``input``'s specified
    positions, PyTorch's ``torch.sparse.sampled_addmm`` (COO input accepted too).

    Examples
    --------
    >>> import lucid
    >>> c = lucid.sparse_csr_tensor([0, 2, 3], [0, 2, 1], [1.0, 2.0, 3.0], (2, 3))
    >>> lucid.sparse.sampled_addmm(c, lucid.ones(2, 2), lucid.ones(2, 3)).values()
    tensor([3., 4., 5.])
    """
    require_sparse(input, "sampled_addmm")
    rows, cols = _rows_cols(input, "sampled_addmm")
    if mat1.ndim != 2 or mat2.ndim != 2 or mat1.shape[1] != mat2.shape[0] \
            or (mat1.shape[0], mat2.shape[1]) != tuple(input.shape):
        raise RuntimeError(f"sampled_addmm: expected mat1 {list(mat1.shape)} @ mat2 {list(mat2.shape)} to "
                           f"have input's size {list(input.shape)}")
    picked = (mat1.index_select(0, rows) * mat2.t().index_select(0, cols)).sum(-1)
    # a block layout's COO form lists every element of its blocks: one reshape from its values
    picked = picked.reshape(tuple(input._vals.shape))
    return input._replace(_scaled(input._vals, beta) + _scaled(picked, alpha))


def _row_pattern(s, dense, name):
    rows, _ = _rows_cols(s, name)
    out = _spmm(s, dense, name)
    with lucid.no_grad():
        used = lucid.unique(rows, sorted=True)
    return used, out


def hspmm(mat1, mat2):
    """Sparse ``mat1`` @ dense ``mat2`` as a hybrid COO tensor (1 sparse dim: the rows of
    ``mat1`` with entries), PyTorch's ``torch.hspmm``.

    Examples
    --------
    >>> import lucid
    >>> s = lucid.sparse_coo_tensor([[1], [0]], [2.0], (3, 2))
    >>> lucid.hspmm(s, lucid.ones(2, 2)).values()
    tensor([[2., 2.]])
    """
    require_sparse(mat1, "hspmm")
    used, out = _row_pattern(mat1, mat2, "hspmm")
    return make_coo(used.unsqueeze(0), out.index_select(0, used), tuple(out.shape), True)


def smm(input, mat):
    """Sparse ``input`` @ dense ``mat`` as a sparse matrix (the rows of ``input`` with
    entries, every column), PyTorch's ``torch.smm``.

    Examples
    --------
    >>> import lucid
    >>> s = lucid.sparse_coo_tensor([[1], [0]], [2.0], (3, 2))
    >>> lucid.smm(s, lucid.ones(2, 2)).indices()
    tensor([[1, 1],
            [0, 1]])
    """
    require_sparse(input, "smm")
    used, out = _row_pattern(input, mat, "smm")
    p = out.shape[1]
    rows = used.repeat_interleave(p)
    cols = lucid.arange(p, device=out.device).repeat(used.shape[0])
    return make_coo(lucid.stack([rows, cols]), out[rows, cols], tuple(out.shape), True)


def spdiags(diagonals, offsets, shape, layout=None):
    """A sparse matrix with the rows of ``diagonals`` on the diagonals ``offsets``, PyTorch's
    ``torch.sparse.spdiags`` (SciPy's convention: ``out[j - k, j] = diagonals[i, j]`` for
    offset ``k = offsets[i]``).

    Examples
    --------
    >>> import lucid
    >>> d = lucid.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
    >>> lucid.sparse.spdiags(d, lucid.tensor([0, -1]), (3, 3)).to_dense()
    tensor([[1., 0., 0.],
            [4., 2., 0.],
            [0., 5., 3.]])
    """
    from ._base import sparse_coo, sparse_csc, sparse_csr

    if diagonals.ndim != 2:
        raise RuntimeError(f"spdiags: expected a 2-D diagonals tensor, got {diagonals.ndim}-D")
    offs = _host(offsets).reshape(-1).tolist() if isinstance(offsets, Tensor) else list(np.ravel(offsets))
    if len(offs) != diagonals.shape[0]:
        raise RuntimeError(f"spdiags: expected one offset per row of diagonals, got {len(offs)} offsets "
                           f"for {diagonals.shape[0]} rows")
    if len(set(offs)) != len(offs):
        raise RuntimeError("spdiags: offsets contain duplicate values")
    m, n = (int(v) for v in shape)
    which, cols = [], []
    for i, k in enumerate(int(o) for o in offs):
        js = range(max(0, k), min(n, m + k, diagonals.shape[1]))
        which += [i] * len(js)
        cols += list(js)
    dev = diagonals.device
    w = lucid.tensor(which, dtype=lucid.int64, device=dev)
    c = lucid.tensor(cols, dtype=lucid.int64, device=dev)
    r = c - lucid.tensor([int(offs[i]) for i in which], dtype=lucid.int64, device=dev)
    out = make_coo(lucid.stack([r, c]) if which else lucid.zeros((2, 0), dtype=lucid.int64, device=dev),
                   diagonals[w, c] if which else diagonals.reshape(-1)[:0], (m, n), False)
    if layout is None or layout is sparse_coo:
        return out
    if layout is sparse_csr or layout is sparse_csc:
        return convert(out, layout, None, None, "spdiags")
    raise RuntimeError(f"spdiags: unsupported layout {layout!r}")


def spmm(input, mat2):
    """``input @ mat2`` for a sparse or dense ``input``, PyTorch's ``torch.spmm``: the product is
    dense and, as with ``lucid.mm``, differentiable in both operands.

    Examples
    --------
    >>> import lucid
    >>> s = lucid.sparse_coo_tensor([[0, 1], [1, 0]], [2.0, 3.0], (2, 2))
    >>> lucid.sparse._ops.spmm(s, lucid.ones(2, 1))
    tensor([[2.],
            [3.]])
    """
    if isinstance(input, SparseTensor):
        return mm(input, mat2)
    return lucid.mm(input, mat2)


# ------------------------------------------------------------------ lucid.mm / matmul / addmm
# Function forms that, given a sparse tensor, call its method of the same name.
_AS_METHOD = ("sum", "t", "transpose", "index_select", "narrow_copy")


def sparse_aware(dense_fn, name):
    """``dense_fn`` (``lucid.mm``, ``matmul``, ``addmm``, or one of ``_AS_METHOD``) that hands
    sparse operands to the sparse implementation; a dense call pays one or two class checks."""
    if name == "addmm":
        @functools.wraps(dense_fn)
        def call(input, mat1, mat2, *args, **kwargs):
            if isinstance(mat1, SparseTensor) or isinstance(mat2, SparseTensor) or isinstance(input, SparseTensor):
                if args or kwargs.get("out") is not None:
                    raise NotImplementedError(f"{name}: positional beta/alpha and out= are not supported with "
                                              "sparse operands")
                return addmm(input, mat1, mat2, **kwargs)
            return dense_fn(input, mat1, mat2, *args, **kwargs)
    elif name in _AS_METHOD:
        @functools.wraps(dense_fn)
        def call(input, *args, **kwargs):
            if isinstance(input, SparseTensor):  # the sparse tensor's own method (PyTorch routes so)
                return getattr(input, name)(*args, **kwargs)
            return dense_fn(input, *args, **kwargs)
    else:
        @functools.wraps(dense_fn)
        def call(input, other, *args, **kwargs):
            if isinstance(input, SparseTensor) or isinstance(other, SparseTensor):
                if args or kwargs:
                    raise NotImplementedError(f"{name}: extra arguments (out=) are not supported with sparse "
                                              "operands")
                return mm(input, other) if name == "mm" else _matmul(input, other, name)
            return dense_fn(input, other, *args, **kwargs)
    return call


__all__ = ["mm", "addmm", "sum", "softmax", "log_softmax", "add", "mul", "sampled_addmm", "hspmm", "smm",
           "spmm", "spdiags"]
