"""Sparse CSR matrices: ``sparse_csr_tensor``, conversions, products with dense matrices.

A CSR tensor keeps PyTorch's three components; every computation goes through its COO
rows (``repeat_interleave`` of the row numbers by ``crow_indices.diff()``), so it shares
the COO code and its gradients. See NOTE [Sparse tensors] in ``lucid/sparse/__init__.py``.
"""
from __future__ import annotations

import numbers

import lucid
from .._core.tensor import Tensor
from ._base import SparseTensor, add_suffixes, field_str, sparse_csr
from ._coo import _alias, _host, as_indices, as_values, make_coo


class SparseCSRTensor(SparseTensor):
    """A 2-D tensor in PyTorch's sparse CSR layout (``crow_indices``, ``col_indices``,
    ``values``); ``layout`` is ``lucid.sparse_csr``, ``is_sparse_csr`` True and ``is_sparse``
    False, as in PyTorch. Made by :func:`lucid.sparse_csr_tensor` or ``to_sparse_csr()``."""

    is_sparse = False
    is_sparse_csr = True
    layout = sparse_csr
    _crow = None
    _col = None

    def crow_indices(self):
        return _alias(self._crow)

    def col_indices(self):
        return _alias(self._col)

    def values(self):
        return _alias(self._vals)

    def sparse_dim(self):
        return 2

    def is_coalesced(self):
        raise RuntimeError("is_coalesced: expected a sparse COO tensor, got layout lucid.sparse_csr")

    def row_indices_(self):
        """The row of each stored value (an int64 tensor of length nnz)."""
        n = self._size[0]
        counts = self._crow.diff().to(lucid.int64)
        return lucid.repeat_interleave(lucid.arange(n, device=self.device), counts,
                                       output_size=self._nnz())

    def _replace(self, vals, device=None):
        crow, col = self._crow, self._col
        if device is not None and crow.device != device:
            crow, col = crow.to(device), col.to(device)
        return make_csr(crow, col, vals, self._size)

    def to_sparse_coo(self):
        idx = lucid.stack([self.row_indices_(), self._col.to(lucid.int64)])
        return make_coo(idx, self._vals, self._size, True)

    def to_sparse(self, sparse_dim=None, *, layout=None, blocksize=None, dense_dim=None):
        if layout is sparse_csr:
            return self
        if sparse_dim not in (None, 2):
            raise RuntimeError("to_sparse: a CSR tensor converts to COO with sparse_dim 2 only")
        return self.to_sparse_coo()

    def to_sparse_csr(self, dense_dim=None):
        return self

    def to_dense(self, dtype=None, *, masked_grad=None):
        """The dense matrix this CSR tensor represents; differentiable in the values.

        Examples
        --------
        >>> import lucid
        >>> lucid.sparse_csr_tensor([0, 1, 2], [1, 0], [2.0, 3.0], (2, 2)).to_dense()
        tensor([[0., 2.],
                [3., 0.]])
        """
        if dtype is not None:
            raise RuntimeError("to_dense: dtype argument is not supported by sparse_to_dense")
        return self.to_sparse_coo().to_dense()

    def detach(self):
        return make_csr(self._crow, self._col, self._vals.detach(), self._size)

    def clone(self, *, memory_format=None):
        return make_csr(self._crow.clone(), self._col.clone(), self._vals.clone(), self._size)

    def t(self):
        raise NotImplementedError("t: the transpose of a CSR tensor is CSC, which Lucid does not have; "
                                  "use .to_sparse_coo().t()")

    transpose = t

    def _grad_from_values(self, g):
        return make_csr(self._crow, self._col, g, self._size)

    def __reduce_ex__(self, protocol):
        return (make_csr, (self._crow, self._col, self._vals, tuple(self._size)))

    def __repr__(self):
        indent = 7
        text = ("tensor(crow_indices=tensor(" + field_str(self._crow, "crow_indices=tensor(") + "),\n"
                + " " * indent + "col_indices=tensor(" + field_str(self._col, "col_indices=tensor(") + "),\n"
                + " " * indent + "values=tensor(" + field_str(self._vals, "values=tensor(") + ")")
        return add_suffixes(text, self._suffixes() + self._tail(), indent, force_newline=False)

    __str__ = __repr__


def make_csr(crow, col, vals, size):
    s = object.__new__(SparseCSRTensor)
    s._init(vals, size)
    s._crow, s._col = crow, col
    return s


def coo_to_csr(s):
    """The CSR form of 2-D COO tensor ``s`` (coalesced first)."""
    if len(s.shape) != 2 or s.dense_dim() != 0:
        raise RuntimeError(f"to_sparse_csr: expected a 2-D sparse tensor without dense dims, got size "
                           f"{tuple(s.shape)} with {s.dense_dim()} dense dims")
    c = s.coalesce()
    n = c.shape[0]
    rows = c._idx[0]
    counts = lucid.bincount(rows, minlength=n) if c._nnz() else lucid.zeros(n, dtype=lucid.int64, device=c.device)
    crow = lucid.cat([lucid.zeros(1, dtype=lucid.int64, device=c.device), counts.cumsum(0)])
    return make_csr(crow, c._idx[1].contiguous(), c._vals, c.shape)


def sparse_csr_tensor(crow_indices, col_indices, values, size=None, *, dtype=None, device=None,
                      pin_memory=False, requires_grad=False, check_invariants=None):
    """A sparse CSR matrix, PyTorch's ``torch.sparse_csr_tensor`` (2-D, no dense dims).

    Row ``i``'s values are ``values[crow_indices[i]:crow_indices[i + 1]]``, in the columns
    ``col_indices`` gives. ``size`` defaults to ``(len(crow_indices) - 1, max(col) + 1)``;
    the index dtype (int32 or int64) is kept, as in PyTorch.

    Examples
    --------
    >>> import lucid
    >>> c = lucid.sparse_csr_tensor([0, 2, 3], [0, 2, 1], [1.0, 2.0, 3.0], (2, 3))
    >>> c
    tensor(crow_indices=tensor([0, 2, 3]),
           col_indices=tensor([0, 2, 1]),
           values=tensor([1., 2., 3.]), size=(2, 3), nnz=3,
           layout=lucid.sparse_csr)
    >>> c @ lucid.ones(3, 1)
    tensor([[3.],
            [3.]])
    """
    name = "sparse_csr_tensor"
    if pin_memory:
        raise RuntimeError(f"{name}: pin_memory is not supported")
    dev = device
    if dev is None:
        for c in (values, crow_indices, col_indices):
            if isinstance(c, Tensor):
                dev = c.device
                break
    vals = as_values(values, dtype, dev, name)
    idt = lucid.int64
    if isinstance(crow_indices, Tensor) and isinstance(col_indices, Tensor):
        if crow_indices.dtype != col_indices.dtype:
            raise RuntimeError(f"{name}: both crow_indices and col_indices should have the same type")
        if crow_indices.dtype == lucid.int32:
            idt = lucid.int32
    crow = as_indices(crow_indices, vals.device, name, idt, move=device is not None)
    col = as_indices(col_indices, vals.device, name, idt, move=device is not None)
    if crow.ndim != 1 or col.ndim != 1:
        raise RuntimeError(f"{name}: crow_indices and col_indices must be 1-D (batched CSR is not supported), "
                           f"got {crow.ndim}-D and {col.ndim}-D")
    if vals.ndim != 1:
        raise RuntimeError(f"{name}: values must be 1-D (hybrid CSR is not supported), got {vals.ndim}-D")
    if col.shape[0] != vals.shape[0]:
        raise RuntimeError(f"{name}: col_indices and values must have the same length, got "
                           f"{col.shape[0]} and {vals.shape[0]}")
    if crow.shape[0] < 1:
        raise RuntimeError(f"{name}: crow_indices must have at least one element")
    if size is None:
        ncol = int(_host(col.amax())) + 1 if col.shape[0] else 0
        size = (crow.shape[0] - 1, ncol)
    else:
        size = tuple(int(s) for s in (size if not isinstance(size, numbers.Integral) else (size,)))
        if len(size) != 2:
            raise RuntimeError(f"{name}: size must have 2 dimensions (batched or hybrid CSR is not supported), "
                               f"got {size}")
        if crow.shape[0] != size[0] + 1:
            raise RuntimeError(f"{name}: crow_indices.size(-1) must be equal to size[0] + 1 = {size[0] + 1}, "
                               f"but got: {crow.shape[0]}")
    if check_invariants:
        _check_csr(crow, col, size, vals.shape[0], name)
    s = make_csr(crow, col, vals, size)
    if requires_grad and not vals.requires_grad:
        try:
            s.requires_grad_(True)
        except RuntimeError as e:
            raise RuntimeError(f"{name}: {str(e).split(': ', 1)[-1]}") from None
    return s


def _check_csr(crow, col, size, nnz, name):
    c = _host(crow).tolist()
    if c[0] != 0:
        raise RuntimeError(f"{name}: `crow_indices[..., 0] == 0` is not satisfied.")
    if c[-1] != nnz:
        raise RuntimeError(f"{name}: `crow_indices[..., -1] == nnz` is not satisfied.")
    if any(b < a for a, b in zip(c, c[1:])):
        raise RuntimeError(f"{name}: `0 <= crow_indices[..., 1:] - crow_indices[..., :-1] <= ncols` is not satisfied.")
    cols = _host(col).tolist()
    if cols and (min(cols) < 0 or max(cols) >= size[1]):
        raise RuntimeError(f"{name}: `0 <= col_indices < ncols` is not satisfied.")
    for a, b in zip(c, c[1:]):
        row = cols[a:b]
        if any(y <= x for x, y in zip(row, row[1:])):
            raise RuntimeError(f"{name}: `col_indices[..., crow_indices[..., i - 1]:crow_indices[..., i]] for all "
                               "i = 1, ..., nrows are sorted and distinct along the last dimension values` is not "
                               "satisfied.")
