"""Sparse compressed tensors: PyTorch's CSR, CSC, BSR and BSC layouts, batched and hybrid.

One class per layout on one base: ``compressed_indices`` (``*batch, ncompressed + 1``),
``plain_indices`` (``*batch, nnz``) and ``values`` (``*batch, nnz, *blocksize, *dense``).
Every computation goes through the COO form (:meth:`SparseCompressedTensor._coo_parts`:
``repeat_interleave`` of the compressed positions by ``compressed_indices.diff()``, blocks
spread to their elements), so it shares the COO code and its gradients; conversions from
dense pick the nonzero blocks with ``nonzero`` and advanced indexing. See NOTE [Sparse
tensors] in ``lucid/sparse/__init__.py`` and NOTE [Compressed layouts] below.
"""
from __future__ import annotations

import numbers

import numpy as np

import lucid
from ._base import (SparseTensor, add_suffixes, derive_dense, field_str, from_dense, sparse_bsc, sparse_bsr,
                    sparse_csc, sparse_csr)
from ._coo import _alias, _host, _same, linear_index, make_coo, unravel

# NOTE [Compressed layouts]
# CSR and BSR compress the rows (``crow_indices``/``col_indices``), CSC and BSC the columns
# (``ccol_indices``/``row_indices``); BSR/BSC store ``blocksize`` blocks instead of
# elements. Batch dims lead every component and each batch has the same nnz (PyTorch's
# rule); dense dims trail the values. A compressed tensor's COO form lists its elements in
# storage order (batch, compressed, plain, then each block row-major), so ``values`` of a
# compressed tensor and the values of its COO form are one ``reshape`` apart: that is how
# gradients reach the values. Transposing the two sparse dims swaps CSR <-> CSC and
# BSR <-> BSC on the same index tensors (blocks transposed), as PyTorch's ``t()``.
_ROW = {sparse_csr: True, sparse_bsr: True, sparse_csc: False, sparse_bsc: False}
_BLOCK = {sparse_csr: False, sparse_csc: False, sparse_bsr: True, sparse_bsc: True}
_FLIP = {sparse_csr: sparse_csc, sparse_csc: sparse_csr, sparse_bsr: sparse_bsc, sparse_bsc: sparse_bsr}
_TORCH_NAME = {sparse_csr: "SparseCsr", sparse_csc: "SparseCsc", sparse_bsr: "SparseBsr", sparse_bsc: "SparseBsc"}


def layout_name(layout):
    return _TORCH_NAME.get(layout, "Strided" if layout is None else str(layout))


class SparseCompressedTensor(SparseTensor):
    """Base of the compressed layouts (:class:`SparseCSRTensor`, :class:`SparseCSCTensor`,
    :class:`SparseBSRTensor`, :class:`SparseBSCTensor`); ``is_sparse`` is False and
    ``is_sparse_csr`` True for CSR only, as in PyTorch. Made by
    :func:`lucid.sparse_compressed_tensor` and its per-layout forms or ``to_sparse_*()``."""

    is_sparse = False
    is_sparse_csr = False
    layout = None
    _cidx = None
    _pidx = None

    # ----------------------------------------------------------- structure
    def _nbatch(self):
        return self._cidx.ndim - 1

    def _blocksize(self):
        if not _BLOCK[self.layout]:
            return (1, 1)
        nb = self._nbatch()
        return tuple(int(n) for n in self._vals.shape[nb + 1:nb + 3])

    def _nnz(self):
        return int(self._vals.shape[self._nbatch()])

    def sparse_dim(self):
        return 2

    def dense_dim(self):
        return self._vals.ndim - self._nbatch() - 1 - (2 if _BLOCK[self.layout] else 0)

    def _component(self, row, name):
        if _ROW[self.layout] != row:
            kind = "row" if row else "column"
            raise RuntimeError(f"{name}: expected sparse {kind} compressed tensor layout but got "
                               f"{layout_name(self.layout)}")

    def crow_indices(self):
        self._component(True, "crow_indices")
        return _alias(self._cidx)

    def col_indices(self):
        self._component(True, "col_indices")
        return _alias(self._pidx)

    def ccol_indices(self):
        self._component(False, "ccol_indices")
        return _alias(self._cidx)

    def row_indices(self):
        self._component(False, "row_indices")
        return _alias(self._pidx)

    def values(self):
        return _alias(self._vals)

    def is_coalesced(self):
        raise RuntimeError(f"is_coalesced: expected a sparse COO tensor, got layout {self.layout!r}")

    def indices(self):
        raise RuntimeError(f"indices: expected a sparse COO tensor, got layout {self.layout!r}")

    def _replace(self, vals, device=None):
        cidx, pidx = self._cidx, self._pidx
        if device is not None and cidx.device != device:
            cidx, pidx = cidx.to(device), pidx.to(device)
        return make_compressed(self.layout, cidx, pidx, vals, self._size)

    # ----------------------------------------------------------- the COO form
    def _coo_parts(self):
        """Indices ``(nbatch + 2, N)`` and values ``(N, *dense)`` of every stored element, in
        storage order. See NOTE [Compressed layouts]."""
        nb = self._nbatch()
        batch = tuple(self._size[:nb])
        B = int(np.prod(batch, dtype=np.int64))
        ncomp = int(self._cidx.shape[-1]) - 1
        nnz = self._nnz()
        dev = self.device
        # entry k of a batch sits in the last compressed slot whose start is <= k: a search, not
        # repeat_interleave by the counts (which reads them on the host)
        cidx = self._cidx.reshape(B, ncomp + 1).to(lucid.int64)
        pos = lucid.arange(nnz, device=dev).expand(B, nnz).contiguous()
        comp = (lucid.searchsorted(cidx, pos, right=True) - 1).reshape(-1)
        plain = self._pidx.reshape(-1).to(lucid.int64)
        r, c = (comp, plain) if _ROW[self.layout] else (plain, comp)
        b0, b1 = self._blocksize()
        dense = tuple(self._vals.shape[nb + 1 + (2 if _BLOCK[self.layout] else 0):])
        vals = self._vals.reshape((B * nnz * b0 * b1,) + dense)
        rows = [r, c]
        if _BLOCK[self.layout]:  # every element of each block, row-major within the block
            i = lucid.arange(b0, device=dev).reshape(1, b0, 1)
            j = lucid.arange(b1, device=dev).reshape(1, 1, b1)
            shape = (B * nnz, b0, b1)
            rows = [(r.reshape(-1, 1, 1) * b0 + i).expand(shape).reshape(-1),
                    (c.reshape(-1, 1, 1) * b1 + j).expand(shape).reshape(-1)]
        if nb:
            bi = lucid.arange(B, device=dev).repeat_interleave(nnz * b0 * b1)
            rows = list(unravel(bi, batch)) + rows if B * nnz else \
                [lucid.zeros(0, dtype=lucid.int64, device=dev)] * nb + rows
        if not rows[0].shape[0]:
            return lucid.zeros((nb + 2, 0), dtype=lucid.int64, device=dev), vals
        return lucid.stack(rows), vals

    def to_sparse_coo(self):
        idx, vals = self._coo_parts()
        # PyTorch marks the COO form coalesced when storage order is row-major (CSR, unbatched
        # BSR with one-row blocks) or there is a single element
        row_major = self.layout is sparse_csr or (self.layout is sparse_bsr and self._blocksize()[0] == 1
                                                  and not self._nbatch())
        n = int(idx.shape[1])
        return derive_dense(make_coo(idx, vals, self._size, row_major or n == 1 or (n == 0 and self.numel() == 0)),
                            _same, self)

    def to_dense(self, dtype=None, *, masked_grad=None):
        """The dense tensor this compressed tensor represents; differentiable in the values
        (in the dense tensor it was converted from with ``masked_grad=False``: NOTE [Sparse
        outputs]).

        Examples
        --------
        >>> import lucid
        >>> lucid.sparse_csc_tensor([0, 1, 2], [1, 0], [2.0, 3.0], (2, 2)).to_dense()
        tensor([[0., 3.],
                [2., 0.]])
        """
        if dtype is not None:
            raise RuntimeError("to_dense: dtype argument is not supported by sparse_to_dense")
        whole = self._masked_grad_off(masked_grad)  # NOTE [Sparse outputs]
        return self.to_sparse_coo().to_dense() if whole is None else whole

    # ----------------------------------------------------------- conversions
    def to_sparse(self, sparse_dim=None, *, layout=None, blocksize=None, dense_dim=None):
        if layout is None or layout is lucid.sparse_coo:
            if sparse_dim not in (None, 2 + self._nbatch()):
                raise RuntimeError(f"to_sparse: conversion from {layout_name(self.layout)} to SparseCoo with "
                                   f"sparse_dim {sparse_dim} is not supported")
            return self.to_sparse_coo()
        return convert(self, layout, blocksize, dense_dim, "to_sparse")

    def to_sparse_csr(self, dense_dim=None):
        return convert(self, sparse_csr, None, dense_dim, "to_sparse_csr")

    def to_sparse_csc(self, dense_dim=None):
        return convert(self, sparse_csc, None, dense_dim, "to_sparse_csc")

    def to_sparse_bsr(self, blocksize, dense_dim=None):
        return convert(self, sparse_bsr, blocksize, dense_dim, "to_sparse_bsr")

    def to_sparse_bsc(self, blocksize, dense_dim=None):
        return convert(self, sparse_bsc, blocksize, dense_dim, "to_sparse_bsc")

    def detach(self):
        return make_compressed(self.layout, self._cidx, self._pidx, self._vals.detach(), self._size)

    def clone(self, *, memory_format=None):
        out = make_compressed(self.layout, self._cidx.clone(), self._pidx.clone(), self._vals.clone(), self._size)
        return derive_dense(out, _same, self)

    def transpose(self, dim0, dim1):
        return derive_dense(transpose(self, dim0, dim1), lambda d: d.transpose(dim0, dim1), self)

    def t(self):
        if len(self._size) != 2:
            raise RuntimeError(f"t: expects a tensor with <= 2 dimensions, but self is {len(self._size)}D")
        return self.transpose(0, 1)

    @property
    def T(self):
        return self.t()

    def _stored_index(self):
        return self._coo_parts()[0]  # storage order: NOTE [Compressed layouts]

    def _grad_from_values(self, g):
        return make_compressed(self.layout, self._cidx, self._pidx, g, self._size)

    def __reduce_ex__(self, protocol):
        return (make_compressed, (self.layout, self._cidx, self._pidx, self._vals, tuple(self._size)))

    def __repr__(self):
        indent = 7
        cname, pname = ("crow_indices", "col_indices") if _ROW[self.layout] else ("ccol_indices", "row_indices")
        text = (f"tensor({cname}=tensor(" + field_str(self._cidx, f"{cname}=tensor(") + "),\n"
                + " " * indent + f"{pname}=tensor(" + field_str(self._pidx, f"{pname}=tensor(") + "),\n"
                + " " * indent + "values=tensor(" + field_str(self._vals, "values=tensor(") + ")")
        return add_suffixes(text, self._suffixes() + self._tail(), indent, force_newline=False)

    __str__ = __repr__


class SparseCSRTensor(SparseCompressedTensor):
    """A tensor in PyTorch's sparse CSR layout (``crow_indices``, ``col_indices``, ``values``);
    ``layout`` is ``lucid.sparse_csr``, ``is_sparse_csr`` True and ``is_sparse`` False."""

    is_sparse_csr = True
    layout = sparse_csr

    @property
    def _crow(self):
        return self._cidx

    @property
    def _col(self):
        return self._pidx

    def row_indices_(self):
        """The row of each stored value of a 2-D CSR matrix (an int64 tensor of length nnz)."""
        return self._coo_parts()[0][-2]

    def to_sparse_csr(self, dense_dim=None):
        if dense_dim is not None and dense_dim != self.dense_dim():
            return super().to_sparse_csr(dense_dim)
        return self


class SparseCSCTensor(SparseCompressedTensor):
    """A tensor in PyTorch's sparse CSC layout (``ccol_indices``, ``row_indices``, ``values``)."""

    layout = sparse_csc


class SparseBSRTensor(SparseCompressedTensor):
    """A tensor in PyTorch's block sparse row layout: ``crow_indices``/``col_indices`` of
    blocks and ``values`` of shape ``(nnz, *blocksize, *dense)``."""

    layout = sparse_bsr


class SparseBSCTensor(SparseCompressedTensor):
    """A tensor in PyTorch's block sparse column layout: ``ccol_indices``/``row_indices`` of
    blocks and ``values`` of shape ``(nnz, *blocksize, *dense)``."""

    layout = sparse_bsc


_CLASSES = {sparse_csr: SparseCSRTensor, sparse_csc: SparseCSCTensor, sparse_bsr: SparseBSRTensor,
            sparse_bsc: SparseBSCTensor}


def make_compressed(layout, cidx, pidx, vals, size):
    s = object.__new__(_CLASSES[layout])
    s._init(vals, size)
    s._cidx, s._pidx = cidx, pidx
    return s


def make_csr(crow, col, vals, size):
    return make_compressed(sparse_csr, crow, col, vals, size)


# ------------------------------------------------------------------ transpose
def transpose(s, dim0, dim1):
    from ._coo import _canon

    nd = len(s._size)
    d0, d1 = sorted((_canon(dim0, nd, "transpose"), _canon(dim1, nd, "transpose")))
    if d0 == d1:
        return s
    nb = s._nbatch()
    kinds = ["Batch"] * nb + ["Sparse"] * 2 + ["Dense"] * (nd - nb - 2)
    if kinds[d0] != kinds[d1]:
        raise RuntimeError(f"transpose: can only transpose dimensions of the same type (Batch, Sparse, Dense), "
                           f"got {d0}({kinds[d0]}) and {d1}({kinds[d1]})")
    size = list(s._size)
    size[d0], size[d1] = size[d1], size[d0]
    if kinds[d0] == "Sparse":
        vals = s._vals.transpose(nb + 1, nb + 2) if _BLOCK[s.layout] else s._vals
        return make_compressed(_FLIP[s.layout], s._cidx, s._pidx, vals, size)
    if kinds[d0] == "Dense":
        shift = nb + 1 + (2 if _BLOCK[s.layout] else 0) - (nb + 2)
        return make_compressed(s.layout, s._cidx, s._pidx, s._vals.transpose(d0 + shift, d1 + shift), size)
    return make_compressed(s.layout, s._cidx.transpose(d0, d1), s._pidx.transpose(d0, d1),
                           s._vals.transpose(d0, d1), size)


# ------------------------------------------------------------------ conversions
def _blocksize_arg(layout, blocksize, name):
    if not _BLOCK[layout]:
        if blocksize is not None and tuple(blocksize) != (1, 1):
            raise RuntimeError(f"{name}: blocksize is not supported for layout {layout!r}")
        return (1, 1)
    if blocksize is None:
        raise RuntimeError(f"{name}: conversion to {layout_name(layout)} without blocksize argument given "
                           "is not supported")
    bs = (int(blocksize), int(blocksize)) if isinstance(blocksize, numbers.Integral) else tuple(int(b) for b in blocksize)
    if len(bs) != 2 or min(bs) < 1:
        raise RuntimeError(f"{name}: blocksize needs to be a tuple of two positive ints, got {blocksize}")
    return bs


def convert(s, layout, blocksize, dense_dim, name):
    """Sparse tensor ``s`` (COO or compressed) in compressed ``layout``: the same dense source
    (NOTE [Sparse outputs])."""
    out = _convert(s, layout, blocksize, dense_dim, name)
    if out is not s and s._dense_fn is None:  # not the to_dense() some conversions go through
        out.__dict__.pop("_dense_fn", None)
    return derive_dense(out, _same, s)


def _convert(s, layout, blocksize, dense_dim, name):
    if layout is lucid.sparse_coo or layout is None:
        return s.to_sparse_coo()
    if layout not in _ROW:
        raise RuntimeError(f"{name}: unsupported layout {layout!r}")
    bs = _blocksize_arg(layout, blocksize, name)
    if isinstance(s, SparseCompressedTensor):
        if dense_dim is not None and dense_dim != s.dense_dim():
            raise RuntimeError(f"{name}: conversion from {layout_name(s.layout)} to {layout_name(layout)} with "
                               f"dense_dim argument != self.dense_dim() is not supported")
        if _BLOCK[s.layout] and _BLOCK[layout] and s._blocksize() != bs:
            raise RuntimeError(f"{name}: conversion from {layout_name(s.layout)} to {layout_name(layout)} with "
                               f"blocksize changed from {list(s._blocksize())} to {list(bs)} is not supported")
        if _BLOCK[s.layout] and not _BLOCK[layout]:
            raise RuntimeError(f"{name}: expected SparseCsr or SparseCsc layout but got {layout_name(s.layout)}")
        if s.layout is layout:
            return s
        if not _BLOCK[s.layout] and not _BLOCK[layout] and s._nbatch() == 0 and s.dense_dim() == 0:
            return index_dtype(_coo_to_compressed(s.to_sparse_coo(), layout), s._cidx.dtype)
        return index_dtype(dense_to_compressed(s.to_dense(), layout, bs, s.dense_dim(), name), s._cidx.dtype)
    # COO: its sparse dims are the batch and the two compressed dims
    dd = s.dense_dim() if dense_dim is None else int(dense_dim)
    if dd != s.dense_dim():
        raise RuntimeError(f"{name}: conversion from SparseCoo to {layout_name(layout)} with dense_dim argument "
                           f"!= self.dense_dim() is not supported")
    if s.sparse_dim() < 2:
        raise RuntimeError(f"{name}: expected a sparse COO tensor with at least 2 sparse dims, got "
                           f"{s.sparse_dim()}")
    if _BLOCK[layout] or s.sparse_dim() > 2:
        return dense_to_compressed(s.to_dense(), layout, bs, dd, name)
    return _coo_to_compressed(s, layout)


def index_dtype(s, dtype):
    """Compressed ``s`` with ``dtype`` indices: conversions keep the source's (int32 stays int32)."""
    if s._cidx.dtype == dtype:
        return s
    return derive_dense(make_compressed(s.layout, s._cidx.to(dtype), s._pidx.to(dtype), s._vals, s._size), _same, s)


def _coo_to_compressed(s, layout):
    """2-D COO (no batch dims) to CSR/CSC without going through a dense tensor."""
    c = s.coalesce()
    row = _ROW[layout]
    comp, plain = (c._idx[0], c._idx[1]) if row else (c._idx[1], c._idx[0])
    vals = c._vals
    n = int(c._size[0 if row else 1])
    if not row and c._nnz() > 1:
        order = lucid.argsort(comp * int(c._size[0]) + plain)
        comp, plain, vals = comp[order], plain[order], vals.index_select(0, order)
    counts = lucid.bincount(comp, minlength=n) if c._nnz() else lucid.zeros(n, dtype=lucid.int64, device=c.device)
    cidx = lucid.cat([lucid.zeros(1, dtype=lucid.int64, device=c.device), counts.cumsum(0)])
    return make_compressed(layout, cidx, plain.contiguous(), vals, c._size)


def coo_to_csr(s):
    """The CSR form of 2-D COO tensor ``s`` (coalesced first)."""
    if len(s.shape) != 2 or s.dense_dim() != 0:
        raise RuntimeError(f"to_sparse_csr: expected a 2-D sparse tensor without dense dims, got size "
                           f"{tuple(s.shape)} with {s.dense_dim()} dense dims")
    return _coo_to_compressed(s, sparse_csr)


def dense_to_compressed(x, layout, blocksize, dense_dim, name):
    """Dense ``x`` (``*batch, rows, cols, *dense``) in ``layout``: the blocks with a nonzero
    element, in storage order (``nonzero`` is row-major over batch, compressed, plain)."""
    nd = x.ndim
    dd = 0 if dense_dim is None else int(dense_dim)
    if nd < 2:
        raise RuntimeError(f"{name}: expected a 2-D tensor (or more: batch or dense dims), got {nd}-D")
    if dd < 0 or dd > nd - 2:
        raise RuntimeError(f"{name}: dense_dim argument must be in [0,{nd - 2}] range, but {dd} is given")
    nb = nd - 2 - dd
    b0, b1 = blocksize
    M, N = int(x.shape[nb]), int(x.shape[nb + 1])
    if M % b0 or N % b1:
        raise RuntimeError(f"{name}: tensor sparse size ({M},{N}) must be divisible by given blocksize ({b0},{b1})")
    batch, dense = tuple(x.shape[:nb]), tuple(x.shape[nb + 2:])
    blocks = x.reshape(batch + (M // b0, b0, N // b1, b1) + dense)
    perm = list(range(nb)) + [nb, nb + 2, nb + 1, nb + 3] + list(range(nb + 4, nb + 4 + dd))
    if not _ROW[layout]:
        perm[nb], perm[nb + 1] = perm[nb + 1], perm[nb]
    blocks = blocks.permute(perm)  # (*batch, ncomp, nplain, b0, b1, *dense)
    mask = blocks != 0
    tail = int(np.prod(mask.shape[nb + 2:], dtype=np.int64))
    mask = mask.reshape(tuple(mask.shape[:nb + 2]) + (tail,)).any(-1)
    nz = lucid.nonzero(mask)
    vals = blocks[tuple(nz[:, d] for d in range(nb + 2))]
    if not _BLOCK[layout]:
        vals = vals.reshape((vals.shape[0],) + dense)
    B = int(np.prod(batch, dtype=np.int64))
    ncomp = int(mask.shape[nb])
    key = linear_index(nz[:, :nb].t(), batch) * ncomp + nz[:, nb] if nb else nz[:, nb]
    counts = lucid.bincount(key, minlength=B * ncomp) if nz.shape[0] else \
        lucid.zeros(B * ncomp, dtype=lucid.int64, device=x.device)
    counts = counts.reshape(B, ncomp)
    total = int(nz.shape[0])
    if nb and B:
        per = _host(counts.sum(-1)).tolist()
        if any(p != per[0] for p in per):
            raise RuntimeError(f"{name}: Expect the same number of specified elements per batch.")
    nnz = total // B if B else 0
    cidx = lucid.cat([lucid.zeros((B, 1), dtype=lucid.int64, device=x.device), counts.cumsum(-1)], dim=-1)
    cidx = cidx.reshape(batch + (ncomp + 1,))
    pidx = nz[:, nb + 1].reshape(batch + (nnz,)).contiguous()
    vals = vals.reshape(batch + (nnz,) + tuple(vals.shape[1:]))
    return from_dense(make_compressed(layout, cidx, pidx, vals, tuple(x.shape)), x)
