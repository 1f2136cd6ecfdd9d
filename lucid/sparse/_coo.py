"""Sparse COO tensors: ``sparse_coo_tensor``, coalescing, conversions to and from dense.

Everything is composed from dense Lucid ops on the ``indices``/``values`` tensors
(``unique``, ``index_add``, ``nonzero``, advanced indexing), so gradients, devices and
transforms come from those ops. See NOTE [Sparse tensors] in ``lucid/sparse/__init__.py``.
"""
from __future__ import annotations

import numbers

import numpy as np

import lucid
from .._core import backend
from .._core.tensor import Tensor, tensor_method
from ._base import (NOT_HERE, SparseTensor, add_suffixes, checks_invariants, derive_dense, field_str, from_dense,
                    require_sparse, sparse_bsc, sparse_bsr, sparse_coo, sparse_csc, sparse_csr)


class SparseCOOTensor(SparseTensor):
    """A tensor in PyTorch's sparse COO layout: an int64 ``indices`` tensor of shape
    ``(sparse_dim, nnz)`` and a ``values`` tensor of shape ``(nnz, *dense_dims)``.

    Made by :func:`lucid.sparse_coo_tensor` or ``Tensor.to_sparse()``; not constructed
    directly. ``isinstance(s, lucid.Tensor)`` holds, ``s.is_sparse`` is True and
    ``s.layout`` is ``lucid.sparse_coo``.
    """

    is_sparse = True
    is_sparse_csr = False
    layout = sparse_coo
    _idx = None
    _coalesced = False

    # ----------------------------------------------------------- structure
    def sparse_dim(self):
        return int(self._idx.shape[0])

    def is_coalesced(self):
        return self._coalesced

    def indices(self):
        if not self._coalesced:
            raise RuntimeError("indices: Cannot get indices on an uncoalesced tensor, please call .coalesce() first")
        return _alias(self._idx)

    def values(self):
        if not self._coalesced:
            raise RuntimeError("values: Cannot get values on an uncoalesced tensor, please call .coalesce() first")
        return _alias(self._vals)

    def _indices(self):
        return _alias(self._idx)

    def _values(self):
        return _alias(self._vals)

    def _replace(self, vals, device=None, coalesced=None):
        idx = self._idx if device is None or self._idx.device == device else self._idx.to(device)
        return make_coo(idx, vals, self._size, self._coalesced if coalesced is None else coalesced)

    def coalesce(self):
        """Duplicates summed and entries sorted by index (row-major), as PyTorch's ``coalesce``.

        Examples
        --------
        >>> import lucid
        >>> s = lucid.sparse_coo_tensor([[1, 0, 1]], [1.0, 2.0, 3.0], (2,))
        >>> c = s.coalesce()
        >>> c.indices(), c.values(), c.is_coalesced()
        (tensor([[0, 1]]), tensor([2., 4.]), True)
        """
        if self._coalesced:
            return self
        return derive_dense(coalesced(self, "sum"), _same, self)

    def to_dense(self, dtype=None, *, masked_grad=None):
        """The dense tensor this sparse tensor represents (duplicates summed); differentiable.

        Its gradient reaches the stored entries only (PyTorch's default ``masked_grad``); with
        ``masked_grad=False`` a sparse tensor converted from a dense one passes it to every
        entry of that tensor (NOTE [Sparse outputs]).

        Examples
        --------
        >>> import lucid
        >>> lucid.sparse_coo_tensor([[0, 1], [1, 0]], [2.0, 3.0], (2, 2)).to_dense()
        tensor([[0., 2.],
                [3., 0.]])
        """
        if dtype is not None:
            raise RuntimeError("to_dense: dtype argument is not supported by sparse_to_dense")
        whole = self._masked_grad_off(masked_grad)  # NOTE [Sparse outputs]
        if whole is not None:
            return whole
        sd = self.sparse_dim()
        sparse_shape, dense_shape = tuple(self._size[:sd]), tuple(self._size[sd:])
        n = int(np.prod(sparse_shape, dtype=np.int64))
        flat = lucid.zeros((n,) + dense_shape, dtype=self.dtype, device=self.device)
        flat = flat.index_add(0, linear_index(self._idx, sparse_shape), self._vals)
        return flat.reshape(tuple(self._size))

    def to_sparse(self, sparse_dim=None, *, layout=None, blocksize=None, dense_dim=None):
        if layout is not None and layout is not sparse_coo:
            from ._compressed import convert

            return convert(self, layout, blocksize, dense_dim, "to_sparse")
        if sparse_dim is not None and sparse_dim != self.sparse_dim():
            raise RuntimeError("to_sparse: conversion from Sparse to Sparse with sparse_dim argument "
                               "!=self.sparse_dim() is not supported")
        return self

    def to_sparse_coo(self):
        return self

    def to_sparse_csr(self, dense_dim=None):
        from ._compressed import convert

        return convert(self, sparse_csr, None, dense_dim, "to_sparse_csr")

    def to_sparse_csc(self, dense_dim=None):
        from ._compressed import convert

        return convert(self, sparse_csc, None, dense_dim, "to_sparse_csc")

    def to_sparse_bsr(self, blocksize, dense_dim=None):
        from ._compressed import convert

        return convert(self, sparse_bsr, blocksize, dense_dim, "to_sparse_bsr")

    def to_sparse_bsc(self, blocksize, dense_dim=None):
        from ._compressed import convert

        return convert(self, sparse_bsc, blocksize, dense_dim, "to_sparse_bsc")

    def detach(self):
        return make_coo(self._idx, self._vals.detach(), self._size, self._coalesced)

    def clone(self, *, memory_format=None):
        return derive_dense(make_coo(self._idx.clone(), self._vals.clone(), self._size, self._coalesced), _same, self)

    def transpose(self, dim0, dim1):
        return derive_dense(_transpose(self, dim0, dim1), lambda d: d.transpose(dim0, dim1), self)

    def t(self):
        if self.sparse_dim() > 2 or self.dense_dim() > 0:
            raise RuntimeError(f"t: expects a tensor with <= 2 sparse and 0 dense dimensions, but got "
                               f"{self.sparse_dim()} sparse and {self.dense_dim()} dense dimensions")
        return self if len(self._size) < 2 else self.transpose(0, 1)

    @property
    def T(self):
        return self.t()

    def index_select(self, dim, index):
        """The slices at ``index`` along ``dim`` (repeats allowed), as PyTorch's sparse
        ``index_select``; differentiable in the values.

        Examples
        --------
        >>> import lucid
        >>> s = lucid.sparse_coo_tensor([[0, 1], [1, 0]], [2.0, 3.0], (2, 2))
        >>> s.index_select(0, lucid.tensor([1, 1])).to_dense()
        tensor([[3., 0.],
                [3., 0.]])
        """
        out = _index_select(self, dim, index)
        return derive_dense(out, lambda d: d.index_select(dim, index.reshape(-1).to(lucid.int64)), self)

    def narrow_copy(self, dim, start, length):
        """A sparse copy of ``length`` slices from ``start`` along ``dim``, as PyTorch's sparse
        ``narrow_copy``; differentiable in the values.

        Examples
        --------
        >>> import lucid
        >>> s = lucid.sparse_coo_tensor([[0, 1], [1, 0]], [2.0, 3.0], (2, 2))
        >>> s.narrow_copy(1, 1, 1).to_dense()
        tensor([[2.],
                [0.]])
        """
        return derive_dense(_narrow_copy(self, dim, start, length), lambda d: d.narrow(dim, start, length).clone(),
                            self)

    def _stored_index(self):
        return self._idx

    def _grad_from_values(self, g):
        # The gradient of the dense tensor this one represents, on its pattern: duplicates
        # of an uncoalesced leaf each saw it once, so they are averaged, not summed
        # (PyTorch gives an uncoalesced leaf the coalesced gradient). NOTE [Sparse tensors]
        out = make_coo(self._idx, g, self._size, self._coalesced)
        return out if self._coalesced else coalesced(out, "mean")

    def __reduce_ex__(self, protocol):
        return (_rebuild_coo, (self._idx, self._vals, tuple(self._size), self._coalesced))

    def __repr__(self):
        indent = 7
        text = ("tensor(indices=tensor(" + field_str(self._idx, "indices=tensor(") + "),\n" + " " * indent
                + "values=tensor(" + field_str(self._vals, "values=tensor(") + ")")
        return add_suffixes(text, self._suffixes() + self._tail(), indent, force_newline=True)

    __str__ = __repr__


def _rebuild_coo(idx, vals, size, is_coalesced):
    return make_coo(idx, vals, size, is_coalesced)


def _same(d):
    return d


def _alias(t):
    """A new tensor object sharing ``t``'s memory and gradient path (PyTorch's views)."""
    return t.view(tuple(t.shape))


def make_coo(idx, vals, size, is_coalesced):
    s = object.__new__(SparseCOOTensor)
    s._init(vals, size)
    s._idx = idx
    s._coalesced = bool(is_coalesced)
    return s


# ------------------------------------------------------------------ index arithmetic
def linear_index(idx, shape):
    """Row-major position of each column of ``idx`` (sparse_dim, nnz) in ``shape``."""
    lin = None
    for d, n in enumerate(shape):
        row = idx[d]
        lin = row if lin is None else lin * int(n) + row
    if lin is None:
        return lucid.zeros(idx.shape[1], dtype=lucid.int64, device=idx.device)
    return lin


def unravel(lin, shape):
    """The inverse of :func:`linear_index`: (len(shape), n) indices of positions ``lin``."""
    rows = []
    for n in reversed(tuple(shape)):
        rows.append(lin % int(n))
        lin = lin // int(n)
    if not rows:
        return lucid.zeros((0, lin.shape[0]), dtype=lucid.int64, device=lin.device)
    return lucid.stack(rows[::-1])


def coalesced(s, how="sum"):
    """``s`` with duplicate indices combined (``how``: "sum", or "mean" for gradients)."""
    nnz = s._nnz()
    if nnz == 0:
        return make_coo(s._idx, s._vals, s._size, True)
    sd = s.sparse_dim()
    sparse_shape = tuple(s._size[:sd])
    uniq, inv = lucid.unique(linear_index(s._idx, sparse_shape), sorted=True, return_inverse=True)
    vals = lucid.zeros((uniq.shape[0],) + tuple(s._vals.shape[1:]), dtype=s.dtype, device=s.device)
    vals = vals.index_add(0, inv, s._vals)
    if how == "mean":
        counts = lucid.bincount(inv, minlength=uniq.shape[0]).to(s.dtype)
        vals = vals / counts.reshape((-1,) + (1,) * (vals.ndim - 1))
    return make_coo(unravel(uniq, sparse_shape), vals, s._size, True)


def _transpose(s, dim0, dim1):
    nd = len(s._size)
    d0, d1 = _canon(dim0, nd, "transpose"), _canon(dim1, nd, "transpose")
    size = list(s._size)
    size[d0], size[d1] = size[d1], size[d0]
    sd = s.sparse_dim()
    if d0 == d1:
        return s
    if d0 < sd and d1 < sd:
        rows = list(range(sd))
        rows[d0], rows[d1] = rows[d1], rows[d0]
        return make_coo(s._idx[rows], s._vals, size, s._nnz() < 2)
    if d0 >= sd and d1 >= sd:
        return make_coo(s._idx, s._vals.transpose(d0 - sd + 1, d1 - sd + 1), size, s._coalesced)
    raise RuntimeError("transpose: transposing a sparse dimension with a dense dimension is not supported")


def _index_select(s, dim, index):
    name = "index_select"
    d = _canon(dim, len(s._size), name)
    if not isinstance(index, Tensor) or isinstance(index, SparseTensor) or index.ndim > 1 \
            or index.dtype not in (lucid.int64, lucid.int32):
        raise IndexError(f"{name}: argument index must be 1-D strided (non-sparse) long-tensor")
    index = index.reshape(-1).to(lucid.int64)
    n = int(s._size[d])
    if index.shape[0]:
        lo, hi = (int(v) for v in _host(lucid.stack([index.amin(), index.amax()])).tolist())
        if lo < 0 or hi >= n:
            raise IndexError(f"{name}: index contains {hi if hi >= n else lo} that is out of range for "
                             f"tensor of size {list(s._size)} at dimension {d}")
    sd = s.sparse_dim()
    size = list(s._size)
    size[d] = int(index.shape[0])
    if d >= sd:
        return make_coo(s._idx, s._vals.index_select(d - sd + 1, index), size, s._coalesced)
    # every (entry, position) pair whose index matches: entries repeat once per hit
    hits = lucid.nonzero(s._idx[d].unsqueeze(1) == index.unsqueeze(0))
    entry, pos = hits[:, 0], hits[:, 1]
    idx = s._idx.index_select(1, entry)
    idx = lucid.cat([idx[:d], pos.unsqueeze(0), idx[d + 1:]]) if idx.shape[1] else idx
    return make_coo(idx.contiguous(), s._vals.index_select(0, entry), size, idx.shape[1] < 2)


def _narrow_copy(s, dim, start, length):
    name = "narrow_copy"
    nd = len(s._size)
    if isinstance(dim, numbers.Integral) and not -nd <= dim < nd:  # RuntimeError here, as PyTorch's
        raise RuntimeError(f"{name}: Dimension {dim} out of range. Expecting {-nd} <= dim < {nd}.")
    d = _canon(dim, nd, name)
    n = int(s._size[d])
    start = int(start) + (n if int(start) < 0 else 0)
    length = int(length)
    if start < 0 or length < 0 or start + length > n:
        raise RuntimeError(f"{name}: Invalid range to narrow. range(start, start+length) must be a "
                           f"subset of range(0, {n}).")
    sd = s.sparse_dim()
    size = list(s._size)
    size[d] = length
    if d >= sd:
        return make_coo(s._idx, s._vals.narrow(d - sd + 1, start, length).clone(), size, s._coalesced)
    row = s._idx[d]
    keep = lucid.nonzero((row >= start) & (row < start + length))[:, 0]
    idx = s._idx.index_select(1, keep)
    shift = lucid.zeros((idx.shape[0], 1), dtype=lucid.int64, device=idx.device)
    shift[d] = start
    return make_coo((idx - shift).contiguous(), s._vals.index_select(0, keep), size,
                    s._coalesced or idx.shape[1] < 2)


def _canon(dim, nd, name):
    if not isinstance(dim, numbers.Integral) or isinstance(dim, bool):
        raise TypeError(f"{name}: dim must be an int, got {type(dim).__name__}")
    if not -max(nd, 1) <= dim < max(nd, 1):
        raise IndexError(f"{name}: Dimension out of range (expected to be in range of "
                         f"[{-max(nd, 1)}, {max(nd, 1) - 1}], but got {dim})")
    return dim % max(nd, 1)


# ------------------------------------------------------------------ construction
def _default_device(*candidates):
    for c in candidates:
        if isinstance(c, Tensor):
            return c.device
    return None


def as_values(values, dtype, device, name):
    if isinstance(values, SparseTensor):
        raise TypeError(f"{name}: values must be a dense tensor")
    if isinstance(values, Tensor):
        if dtype is not None or device is not None:
            values = values.to(device=device, dtype=dtype)
        if values.requires_grad and values.is_leaf:
            # made from a leaf that requires grad, the sparse tensor is not a leaf itself (its
            # gradient flows to that leaf), as in PyTorch; the alias gives it a grad_fn
            values = _alias(values)
        return values
    return lucid.tensor(values, dtype=dtype, device=device)


def as_indices(indices, device, name, dtype=lucid.int64, move=False):
    if isinstance(indices, SparseTensor):
        raise TypeError(f"{name}: indices must be a dense tensor")
    if isinstance(indices, Tensor):
        idx = indices.detach()
        if idx.dtype != dtype:
            idx = idx.to(dtype)
        if idx.device != device and move:  # an explicit device= moves every component
            idx = idx.to(device)
        if idx.device != device:
            raise RuntimeError(f"{name}: indices are on {idx.device} but values are on {device}; "
                               "pass device= or move one of them")
        return idx
    return lucid.tensor(indices, dtype=dtype, device=device)


def _host(t):
    return backend.host(t._data)  # an explicit read, as PyTorch's size inference syncs


def _infer_size(idx, name):
    if idx.shape[1] == 0:
        return (0,) * idx.shape[0]
    lo = _host(idx.amin(1))
    for d, v in enumerate(lo.tolist()):
        if v < 0:
            raise RuntimeError(f"{name}: found negative index {v} for dim {d}")
    return tuple(int(v) + 1 for v in _host(idx.amax(1)).tolist())


def _check_bounds(idx, size, name):
    if idx.shape[1] == 0:
        return
    lo, hi = _host(idx.amin(1)).tolist(), _host(idx.amax(1)).tolist()
    for d, (a, b) in enumerate(zip(lo, hi)):
        if a < 0:
            raise RuntimeError(f"{name}: found negative index {a} for dim {d}")
        if b >= size[d]:
            raise RuntimeError(f"{name}: size is inconsistent with indices: for dim {d}, size is "
                               f"{size[d]} but found index {b}")


def sparse_coo_tensor(indices, values, size=None, *, dtype=None, device=None, pin_memory=False,
                      requires_grad=False, check_invariants=None, is_coalesced=None):
    """A sparse COO tensor with ``values`` at ``indices``, PyTorch's ``torch.sparse_coo_tensor``.

    Parameters
    ----------
    indices : array_like
        ``(sparse_dim, nnz)`` coordinates (cast to int64).
    values : array_like
        ``(nnz, *dense_dims)`` values; a tensor keeps its gradient path.
    size : sequence of int, optional
        Inferred as ``indices.max(1) + 1`` followed by ``values.shape[1:]`` when omitted.
    dtype, device : optional
        Of the values (default: those of ``values``).
    requires_grad : bool
        Make the tensor a leaf that collects a sparse ``.grad``.
    check_invariants : bool, optional
        Check that indices are non-negative and within ``size`` (reads them on the host).
    is_coalesced : bool, optional
        Declare the indices unique and sorted (trusted, as in PyTorch).

    Examples
    --------
    >>> import lucid
    >>> s = lucid.sparse_coo_tensor([[0, 1], [2, 0]], [3.0, 4.0])
    >>> s
    tensor(indices=tensor([[0, 1],
                           [2, 0]]),
           values=tensor([3., 4.]),
           size=(2, 3), nnz=2, layout=lucid.sparse_coo)
    >>> s.to_dense()
    tensor([[0., 0., 3.],
            [4., 0., 0.]])
    """
    name = "sparse_coo_tensor"
    if pin_memory:
        raise RuntimeError(f"{name}: pin_memory is not supported")
    dev = device if device is not None else _default_device(values, indices)
    vals = as_values(values, dtype, dev, name)
    idx = as_indices(indices, vals.device, name, move=device is not None)
    if idx.ndim != 2:
        raise RuntimeError(f"{name}: indices must be sparse_dim x nnz, but got: {list(idx.shape)}")
    if vals.ndim == 0:
        raise RuntimeError(f"{name}: values must be at least 1-D (nnz, *dense_dims), got a 0-d tensor")
    sd, nnz = idx.shape
    if vals.shape[0] != nnz:
        raise RuntimeError(f"{name}: indices and values must have same nnz, but got nnz from indices: "
                           f"{nnz}, nnz from values: {vals.shape[0]}")
    dense = tuple(vals.shape[1:])
    if size is None:
        size = _infer_size(idx, name) + dense
    else:
        size = tuple(int(s) for s in (size if not isinstance(size, numbers.Integral) else (size,)))
        if len(size) != sd + len(dense):
            raise RuntimeError(f"{name}: 'len(size) == sparse_dim + dense_dim' is not satisfied: "
                               f"len(size) = {len(size)}, sparse_dim = {sd}, dense_dim = {len(dense)}")
        if size[sd:] != dense:
            raise RuntimeError(f"{name}: values has incorrect size, expected {list((nnz,) + size[sd:])}, "
                               f"got {list(vals.shape)}")
        if checks_invariants(check_invariants):
            _check_bounds(idx, size, name)
    coalesced_flag = nnz < 2 if is_coalesced is None else bool(is_coalesced)
    s = make_coo(idx, vals, size, coalesced_flag)
    if requires_grad and not vals.requires_grad:
        try:
            s.requires_grad_(True)
        except RuntimeError as e:
            raise RuntimeError(f"{name}: {str(e).split(': ', 1)[-1]}") from None
    return s


def dense_to_coo(x, sparse_dim=None, name="to_sparse"):
    """The COO form of dense ``x`` with ``sparse_dim`` sparse dims (all by default)."""
    nd = x.ndim
    sd = nd if sparse_dim is None else int(sparse_dim)
    if not 0 <= sd <= nd:
        raise RuntimeError(f"{name}: sparse_dim argument must be in [0,{nd}] range, but {sd} is given")
    if sd == 0 and nd > 0:
        raise RuntimeError(f"{name}: sparse_dim argument must be in >0 when self.dim()>0")
    if nd == 0:
        keep = lucid.nonzero(x.reshape(1) != 0)[:, 0]  # PyTorch: nnz 0 for a zero scalar
        return from_dense(make_coo(lucid.zeros((0, keep.shape[0]), dtype=lucid.int64, device=x.device),
                                   x.reshape(1)[keep], (), True), x)
    mask = x != 0
    if sd < nd:
        mask = mask.reshape(tuple(x.shape[:sd]) + (-1,)).any(-1)
    idx = lucid.nonzero(mask).t()  # row-major order: already coalesced
    vals = x[tuple(idx[d] for d in range(sd))]
    return from_dense(make_coo(idx.contiguous(), vals, tuple(x.shape), True), x)


# ------------------------------------------------------------------ dense Tensor methods
@tensor_method("to_sparse")
def to_sparse(self, sparse_dim=None, *, layout=None, blocksize=None, dense_dim=None):
    """This tensor in a sparse layout: COO by default, or ``layout=lucid.sparse_csr``,
    ``sparse_csc``, ``sparse_bsr``/``sparse_bsc`` (with ``blocksize``); ``dense_dim`` trailing
    dims stay dense in a compressed layout, the leading ones beyond two are batch dims.

    Examples
    --------
    >>> import lucid
    >>> lucid.tensor([[0.0, 2.0], [3.0, 0.0]]).to_sparse()
    tensor(indices=tensor([[0, 1],
                           [1, 0]]),
           values=tensor([2., 3.]),
           size=(2, 2), nnz=2, layout=lucid.sparse_coo)
    >>> lucid.tensor([[0.0, 2.0], [3.0, 0.0]]).to_sparse(layout=lucid.sparse_csc).ccol_indices()
    tensor([0, 1, 2])
    """
    from ._compressed import _ROW, _blocksize_arg, dense_to_compressed

    if layout is None or layout is sparse_coo:
        if blocksize is not None:
            raise RuntimeError("to_sparse: blocksize is only supported for block layouts (sparse_bsr, sparse_bsc)")
        return dense_to_coo(self, sparse_dim)
    if layout not in _ROW:
        raise RuntimeError(f"to_sparse: unsupported layout {layout!r}")
    if sparse_dim is not None:
        raise RuntimeError("to_sparse: sparse_dim is only supported for the sparse_coo layout")
    bs = _blocksize_arg(layout, blocksize, "to_sparse")
    return dense_to_compressed(self, layout, bs, dense_dim, "to_sparse")


@tensor_method("to_sparse_coo")
def to_sparse_coo(self):
    """This tensor as a sparse COO tensor (``to_sparse()``).

    Examples
    --------
    >>> import lucid
    >>> lucid.tensor([0.0, 5.0]).to_sparse_coo().values()
    tensor([5.])
    """
    return dense_to_coo(self, None, "to_sparse_coo")


def _to_compressed(self, layout, blocksize, dense_dim, name):
    from ._compressed import _blocksize_arg, dense_to_compressed

    return dense_to_compressed(self, layout, _blocksize_arg(layout, blocksize, name), dense_dim, name)


@tensor_method("to_sparse_csr")
def to_sparse_csr(self, dense_dim=None):
    """This tensor as a sparse CSR tensor (dims beyond two: leading batch dims, or ``dense_dim``
    trailing dense ones).

    Examples
    --------
    >>> import lucid
    >>> lucid.tensor([[0.0, 2.0], [3.0, 0.0]]).to_sparse_csr().crow_indices()
    tensor([0, 1, 2])
    """
    return _to_compressed(self, sparse_csr, None, dense_dim, "to_sparse_csr")


@tensor_method("to_sparse_csc")
def to_sparse_csc(self, dense_dim=None):
    """This tensor as a sparse CSC tensor (column-compressed).

    Examples
    --------
    >>> import lucid
    >>> c = lucid.tensor([[0.0, 2.0], [3.0, 4.0]]).to_sparse_csc()
    >>> c.ccol_indices(), c.row_indices(), c.values()
    (tensor([0, 1, 3]), tensor([1, 0, 1]), tensor([3., 2., 4.]))
    """
    return _to_compressed(self, sparse_csc, None, dense_dim, "to_sparse_csc")


@tensor_method("to_sparse_bsr")
def to_sparse_bsr(self, blocksize, dense_dim=None):
    """This tensor as a block sparse row tensor of ``blocksize`` blocks (those with a nonzero).

    Examples
    --------
    >>> import lucid
    >>> b = lucid.tensor([[1.0, 0.0, 0.0, 0.0], [0.0, 2.0, 0.0, 0.0]]).to_sparse_bsr((2, 2))
    >>> b.crow_indices(), b.col_indices(), tuple(b.values().shape)
    (tensor([0, 1]), tensor([0]), (1, 2, 2))
    """
    return _to_compressed(self, sparse_bsr, blocksize, dense_dim, "to_sparse_bsr")


@tensor_method("to_sparse_bsc")
def to_sparse_bsc(self, blocksize, dense_dim=None):
    """This tensor as a block sparse column tensor of ``blocksize`` blocks (those with a nonzero).

    Examples
    --------
    >>> import lucid
    >>> b = lucid.tensor([[0.0, 0.0, 1.0, 0.0], [0.0, 0.0, 0.0, 2.0]]).to_sparse_bsc((2, 2))
    >>> b.ccol_indices(), b.row_indices()
    (tensor([0, 0, 1]), tensor([0]))
    """
    return _to_compressed(self, sparse_bsc, blocksize, dense_dim, "to_sparse_bsc")


@tensor_method("sparse_mask")
def sparse_mask(self, mask):
    """This dense tensor's values at the positions of sparse ``mask`` (a sparse tensor with
    ``mask``'s indices); differentiable in ``self``.

    Examples
    --------
    >>> import lucid
    >>> m = lucid.tensor([[0.0, 1.0], [1.0, 0.0]]).to_sparse()
    >>> lucid.tensor([[5.0, 6.0], [7.0, 8.0]]).sparse_mask(m).values()
    tensor([6., 7.])
    """
    require_sparse(mask, "sparse_mask")
    if isinstance(self, SparseTensor):
        raise NotImplementedError("sparse_mask: " + NOT_HERE)
    if tuple(self.shape) != tuple(mask.shape):
        raise RuntimeError(f"sparse_mask: expected mask of size {list(self.shape)}, got {list(mask.shape)}")
    compressed = mask.layout is not sparse_coo
    coo = mask.to_sparse_coo()
    idx = coo._idx
    vals = self[tuple(idx[d] for d in range(coo.sparse_dim()))]
    if compressed:  # the mask's layout and pattern, as PyTorch's (its COO form is in storage order)
        return mask._replace(vals.reshape(tuple(mask._vals.shape)))
    return make_coo(idx, vals, coo._size, coo._coalesced)
