"""Construction of sparse compressed tensors: ``sparse_compressed_tensor`` and its CSR, CSC,
BSR and BSC forms (batched and hybrid), with PyTorch's ``check_invariants``.

The tensors themselves live in ``_compressed.py`` (NOTE [Compressed layouts]); this module
keeps the CSR names older code imports.
"""
from __future__ import annotations

import numbers

import numpy as np

import lucid
from .._core.tensor import Tensor
from ._base import checks_invariants, sparse_bsc, sparse_bsr, sparse_csc, sparse_csr
from ._compressed import SparseCSRTensor, coo_to_csr, make_csr  # noqa: F401  (older imports)
from ._compressed import _BLOCK, _ROW, make_compressed
from ._coo import _host, as_indices, as_values

_NAMES = {sparse_csr: ("crow_indices", "col_indices"), sparse_bsr: ("crow_indices", "col_indices"),
          sparse_csc: ("ccol_indices", "row_indices"), sparse_bsc: ("ccol_indices", "row_indices")}


def _device_of(*candidates):
    for c in candidates:
        if isinstance(c, Tensor):
            return c.device
    return None


def _index_dtype(cidx, pidx, name, cname, pname):
    if isinstance(cidx, Tensor) and isinstance(pidx, Tensor):
        if cidx.dtype != pidx.dtype:
            raise RuntimeError(f"{name}: both {cname} and {pname} should have the same type")
        if cidx.dtype == lucid.int32:
            return lucid.int32
    return lucid.int64


def _build(compressed_indices, plain_indices, values, size, layout, name, dtype, device, pin_memory,
           requires_grad, check_invariants):
    if layout not in _ROW:
        raise RuntimeError(f"{name}: expected sparse compressed tensor layout but got {layout}")
    if pin_memory:
        raise RuntimeError(f"{name}: pin_memory is not supported")
    cname, pname = _NAMES[layout]
    dev = device if device is not None else _device_of(values, compressed_indices, plain_indices)
    vals = as_values(values, dtype, dev, name)
    idt = _index_dtype(compressed_indices, plain_indices, name, cname, pname)
    cidx = as_indices(compressed_indices, vals.device, name, idt, move=device is not None)
    pidx = as_indices(plain_indices, vals.device, name, idt, move=device is not None)
    size = _check_shapes(cidx, pidx, vals, size, layout, name)
    if checks_invariants(check_invariants):
        _check_invariants(cidx, pidx, size, layout, name, vals)
    s = make_compressed(layout, cidx, pidx, vals, size)
    if requires_grad and not vals.requires_grad:
        try:
            s.requires_grad_(True)
        except RuntimeError as e:
            raise RuntimeError(f"{name}: {str(e).split(': ', 1)[-1]}") from None
    return s


def _check_shapes(cidx, pidx, vals, size, layout, name):
    """The size (given or inferred) after checking the components agree with it."""
    cname, pname = _NAMES[layout]
    if cidx.ndim < 1 or cidx.ndim != pidx.ndim:
        raise RuntimeError(f"{name}: {cname} and {pname} dimensionalities must be equal but got {cidx.ndim} "
                           f"and {pidx.ndim}, respectively")
    nb = cidx.ndim - 1
    batch = tuple(cidx.shape[:-1])
    nblock = 2 if _BLOCK[layout] else 0
    if vals.ndim < nb + 1 + nblock:
        raise RuntimeError(f"{name}: values must have at least {nb + 1 + nblock} dimensions "
                           f"(batch, nnz{', blocksize' if nblock else ''}), got {vals.ndim}-D")
    if tuple(pidx.shape[:-1]) != batch or tuple(vals.shape[:nb]) != batch:
        raise RuntimeError(f"{name}: all batch dimensions of {cname}, {pname} and values must be equal, got "
                           f"{list(cidx.shape[:-1])}, {list(pidx.shape[:-1])} and {list(vals.shape[:nb])}")
    if pidx.shape[-1] != vals.shape[nb]:
        raise RuntimeError(f"{name}: {pname} and values must have the same length, got {pidx.shape[-1]} "
                           f"and {vals.shape[nb]}")
    if cidx.shape[-1] < 1:
        raise RuntimeError(f"{name}: {cname} must have at least one element")
    b0, b1 = tuple(int(n) for n in vals.shape[nb + 1:nb + 3]) if nblock else (1, 1)
    dense = tuple(vals.shape[nb + 1 + nblock:])
    row = _ROW[layout]
    ncomp = int(cidx.shape[-1]) - 1
    if size is None:
        nplain = int(_host(pidx.amax())) + 1 if pidx.numel() else 0
        rc = (ncomp * b0, nplain * b1) if row else (nplain * b0, ncomp * b1)
        return batch + rc + dense
    size = tuple(int(s) for s in (size if not isinstance(size, numbers.Integral) else (size,)))
    if len(size) != nb + 2 + len(dense) or size[:nb] != batch or size[nb + 2:] != dense:
        raise RuntimeError(f"{name}: size {list(size)} does not match the components: expected batch dims "
                           f"{list(batch)}, 2 sparse dims and dense dims {list(dense)}")
    if size[nb] % b0 or size[nb + 1] % b1:
        raise RuntimeError(f"{name}: size[{nb}:{nb + 2}] = {list(size[nb:nb + 2])} must be divisible by the "
                           f"blocksize {[b0, b1]}")
    k = nb if row else nb + 1
    want = size[k] // (b0 if row else b1) + 1
    if ncomp + 1 != want:
        blk = f" / blocksize[{0 if row else 1}]" if nblock else ""
        raise RuntimeError(f"{name}: {cname}.size(-1) must be equal to size[{k}]{blk} + 1 = {want}, but got: "
                           f"{ncomp + 1}")
    return size


def _check_invariants(cidx, pidx, size, layout, name, vals):
    """PyTorch's invariants of compressed indices, checked on the host, batch by batch."""
    cname, pname = _NAMES[layout]
    row = _ROW[layout]
    nb = cidx.ndim - 1
    nplain = int(size[nb + 1] if row else size[nb])
    if _BLOCK[layout]:  # the plain bound counts blocks
        nplain //= int(vals.shape[nb + 2] if row else vals.shape[nb + 1])
    cs = np.asarray(_host(cidx)).reshape(-1, cidx.shape[-1]).tolist()
    ps = np.asarray(_host(pidx)).reshape(-1, pidx.shape[-1]).tolist() if pidx.shape[-1] else [[]] * len(cs)
    nnz = int(pidx.shape[-1])
    plain_dim, comp_dim = ("ncols", "nrows") if row else ("nrows", "ncols")
    for c, p in zip(cs, ps):
        if c[0] != 0:
            raise RuntimeError(f"{name}: `{cname}[..., 0] == 0` is not satisfied.")
        if c[-1] != nnz:
            raise RuntimeError(f"{name}: `{cname}[..., -1] == nnz` is not satisfied.")
        if any(b < a for a, b in zip(c, c[1:])):
            raise RuntimeError(f"{name}: `0 <= {cname}[..., 1:] - {cname}[..., :-1] <= {plain_dim}` is not "
                               "satisfied.")
        if p and (min(p) < 0 or max(p) >= nplain):
            raise RuntimeError(f"{name}: `0 <= {pname} < {plain_dim}` is not satisfied.")
        for a, b in zip(c, c[1:]):
            seg = p[a:b]
            if any(y <= x for x, y in zip(seg, seg[1:])):
                raise RuntimeError(f"{name}: `{pname}[..., {cname}[..., i - 1]:{cname}[..., i]] for all i = 1, "
                                   f"..., {comp_dim} are sorted and distinct along the last dimension values` "
                                   "is not satisfied.")


_COMMON = """
    Parameters
    ----------
    {c}, {p} : array_like
        ``(*batch, {n} + 1)`` compressed and ``(*batch, nnz)`` plain indices (int32 kept,
        anything else cast to int64, as in PyTorch).
    values : array_like
        ``(*batch, nnz{b}, *dense)`` values; a tensor keeps its gradient path.
    size : sequence of int, optional
        ``(*batch, rows, cols, *dense)``; inferred from the indices and values when omitted.
    dtype, device : optional
        Of the values (default: those of ``values``).
    requires_grad : bool
        Make the tensor a leaf that collects a gradient on its pattern.
    check_invariants : bool, optional
        Check PyTorch's index invariants (reads the indices on the host).
"""


def sparse_csr_tensor(crow_indices, col_indices, values, size=None, *, dtype=None, device=None,
                      pin_memory=False, requires_grad=False, check_invariants=None):
    """A sparse CSR tensor, PyTorch's ``torch.sparse_csr_tensor`` (batched and hybrid too).

    Row ``i``'s values are ``values[crow_indices[i]:crow_indices[i + 1]]``, in the columns
    ``col_indices`` gives.
    {common}
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
    return _build(crow_indices, col_indices, values, size, sparse_csr, "sparse_csr_tensor", dtype, device,
                  pin_memory, requires_grad, check_invariants)


def sparse_csc_tensor(ccol_indices, row_indices, values, size=None, *, dtype=None, device=None,
                      pin_memory=False, requires_grad=False, check_invariants=None):
    """A sparse CSC tensor, PyTorch's ``torch.sparse_csc_tensor``: column ``j``'s values are
    ``values[ccol_indices[j]:ccol_indices[j + 1]]``, in the rows ``row_indices`` gives.
    {common}
    Examples
    --------
    >>> import lucid
    >>> c = lucid.sparse_csc_tensor([0, 1, 3], [1, 0, 1], [1.0, 2.0, 3.0], (2, 2))
    >>> c.to_dense()
    tensor([[0., 2.],
            [1., 3.]])
    >>> c.t().layout
    lucid.sparse_csr
    """
    return _build(ccol_indices, row_indices, values, size, sparse_csc, "sparse_csc_tensor", dtype, device,
                  pin_memory, requires_grad, check_invariants)


def sparse_bsr_tensor(crow_indices, col_indices, values, size=None, *, dtype=None, device=None,
                      pin_memory=False, requires_grad=False, check_invariants=None):
    """A block sparse row tensor, PyTorch's ``torch.sparse_bsr_tensor``: the blocksize is
    ``values.shape[-2:]`` (before any dense dims) and the indices count blocks.
    {common}
    Examples
    --------
    >>> import lucid
    >>> b = lucid.sparse_bsr_tensor([0, 1, 1], [1], lucid.ones(1, 2, 2), (4, 4))
    >>> b.to_dense()
    tensor([[0., 0., 1., 1.],
            [0., 0., 1., 1.],
            [0., 0., 0., 0.],
            [0., 0., 0., 0.]])
    """
    return _build(crow_indices, col_indices, values, size, sparse_bsr, "sparse_bsr_tensor", dtype, device,
                  pin_memory, requires_grad, check_invariants)


def sparse_bsc_tensor(ccol_indices, row_indices, values, size=None, *, dtype=None, device=None,
                      pin_memory=False, requires_grad=False, check_invariants=None):
    """A block sparse column tensor, PyTorch's ``torch.sparse_bsc_tensor``: the blocksize is
    ``values.shape[-2:]`` (before any dense dims) and the indices count blocks.
    {common}
    Examples
    --------
    >>> import lucid
    >>> b = lucid.sparse_bsc_tensor([0, 1, 1], [1], lucid.ones(1, 2, 1), (4, 2))
    >>> b.to_dense()
    tensor([[0., 0.],
            [0., 0.],
            [1., 0.],
            [1., 0.]])
    """
    return _build(ccol_indices, row_indices, values, size, sparse_bsc, "sparse_bsc_tensor", dtype, device,
                  pin_memory, requires_grad, check_invariants)


def sparse_compressed_tensor(compressed_indices, plain_indices, values, size=None, *, dtype=None,
                             layout=None, device=None, pin_memory=False, requires_grad=False,
                             check_invariants=None):
    """A sparse tensor in the compressed ``layout`` (``lucid.sparse_csr``, ``sparse_csc``,
    ``sparse_bsr`` or ``sparse_bsc``), PyTorch's ``torch.sparse_compressed_tensor``.
    {common}
    Examples
    --------
    >>> import lucid
    >>> s = lucid.sparse_compressed_tensor([0, 1, 2], [1, 0], [1.0, 2.0], (2, 2),
    ...                                    layout=lucid.sparse_csc)
    >>> s.layout, s.row_indices()
    (lucid.sparse_csc, tensor([1, 0]))
    """
    return _build(compressed_indices, plain_indices, values, size, layout, "sparse_compressed_tensor", dtype,
                  device, pin_memory, requires_grad, check_invariants)


for _f, _c, _p, _n, _b in ((sparse_csr_tensor, "crow_indices", "col_indices", "rows", ""),
                           (sparse_csc_tensor, "ccol_indices", "row_indices", "cols", ""),
                           (sparse_bsr_tensor, "crow_indices", "col_indices", "rows / blocksize[0]", ", *blocksize"),
                           (sparse_bsc_tensor, "ccol_indices", "row_indices", "cols / blocksize[1]", ", *blocksize"),
                           (sparse_compressed_tensor, "compressed_indices", "plain_indices", "ncompressed",
                            "[, *blocksize]")):
    _f.__doc__ = _f.__doc__.replace("{common}", _COMMON.format(c=_c, p=_p, n=_n, b=_b).replace("\n    ", "\n    "))
