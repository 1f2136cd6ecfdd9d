"""More of PyTorch's low-level top-level functions, each a composition of existing Lucid ops:
the integer-coded samplers (``grid_sampler``, ``grid_sampler_2d/3d``, ``affine_grid_generator``),
``embedding_renorm_``, ``slice_inverse``, the sparse accessors' copies (``indices_copy`` ...) and
the sparse products ``sspaddmm`` / ``saddmm`` / ``hsmm`` / ``dsmm``.
"""
from __future__ import annotations

from .._core.grad_mode import no_grad
from .._core.tensor import tensor_method
from ._family import _as_tensor
from .numpy_aliases import numpy_axis

__all__ = ["grid_sampler", "grid_sampler_2d", "grid_sampler_3d", "affine_grid_generator", "embedding_renorm_",
           "slice_inverse", "indices_copy", "values_copy", "crow_indices_copy", "col_indices_copy",
           "ccol_indices_copy", "row_indices_copy", "sspaddmm", "saddmm", "hsmm", "dsmm"]

_INTERPOLATION = {0: "bilinear", 1: "nearest", 2: "bicubic"}
_PADDING = {0: "zeros", 1: "border", 2: "reflection"}


def _L():
    import lucid

    return lucid


# ------------------------------------------------------------------ samplers


def _grid_sample(op, input, grid, interpolation_mode, padding_mode, align_corners, ndims):
    import lucid.nn.functional as F

    if interpolation_mode not in _INTERPOLATION:
        raise RuntimeError(f"{op}: interpolation_mode must be 0 (bilinear), 1 (nearest) or 2 (bicubic), "
                           f"got {interpolation_mode!r}")
    if padding_mode not in _PADDING:
        raise RuntimeError(f"{op}: padding_mode must be 0 (zeros), 1 (border) or 2 (reflection), got {padding_mode!r}")
    x = _as_tensor(input)
    if ndims is not None and x.ndim != ndims:
        raise RuntimeError(f"{op}: expected a {ndims}-D input, got shape {tuple(x.shape)}")
    return F.grid_sample(x, grid, mode=_INTERPOLATION[interpolation_mode], padding_mode=_PADDING[padding_mode],
                         align_corners=bool(align_corners))


def grid_sampler(input, grid, interpolation_mode, padding_mode, align_corners):
    """:func:`lucid.nn.functional.grid_sample` with PyTorch's integer codes: interpolation
    0 bilinear, 1 nearest, 2 bicubic; padding 0 zeros, 1 border, 2 reflection.

    Examples
    --------
    >>> import lucid
    >>> x = lucid.arange(4.0).reshape(1, 1, 2, 2)
    >>> lucid.grid_sampler(x, lucid.zeros(1, 1, 1, 2), 0, 0, False).item()
    1.5
    """
    return _grid_sample("grid_sampler", input, grid, interpolation_mode, padding_mode, align_corners, None)


def grid_sampler_2d(input, grid, interpolation_mode, padding_mode, align_corners):
    """:func:`grid_sampler` of a 4-D input.

    Examples
    --------
    >>> import lucid
    >>> lucid.grid_sampler_2d(lucid.ones(1, 1, 2, 2), lucid.zeros(1, 1, 1, 2), 1, 0, True).item()
    1.0
    """
    return _grid_sample("grid_sampler_2d", input, grid, interpolation_mode, padding_mode, align_corners, 4)


def grid_sampler_3d(input, grid, interpolation_mode, padding_mode, align_corners):
    """:func:`grid_sampler` of a 5-D input.

    Examples
    --------
    >>> import lucid
    >>> lucid.grid_sampler_3d(lucid.ones(1, 1, 2, 2, 2), lucid.zeros(1, 1, 1, 1, 3), 0, 1, False).item()
    1.0
    """
    return _grid_sample("grid_sampler_3d", input, grid, interpolation_mode, padding_mode, align_corners, 5)


def affine_grid_generator(theta, size, align_corners):
    """:func:`lucid.nn.functional.affine_grid` (``align_corners`` required).

    Examples
    --------
    >>> import lucid
    >>> theta = lucid.tensor([[[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]]])
    >>> lucid.affine_grid_generator(theta, [1, 1, 1, 2], False)[0, 0].tolist()
    [[-0.5, 0.0], [0.5, 0.0]]
    """
    import lucid.nn.functional as F

    return F.affine_grid(theta, list(size), align_corners=bool(align_corners))


def embedding_renorm_(input, indices, max_norm, norm_type):
    """Rescale, in place, the rows of ``input`` named in ``indices`` (each once) whose
    ``norm_type``-norm exceeds ``max_norm`` to norm ``max_norm`` (``max_norm / (norm + 1e-7)``,
    as PyTorch); returns ``input``. Not differentiable (outside the graph, as PyTorch's).

    Examples
    --------
    >>> import lucid
    >>> w = lucid.tensor([[3.0, 4.0], [0.3, 0.4]])
    >>> lucid.embedding_renorm_(w, lucid.tensor([0, 0, 1]), 1.0, 2.0).tolist()
    [[0.6000000238418579, 0.800000011920929], [0.30000001192092896, 0.4000000059604645]]
    """
    L = _L()
    w = _as_tensor(input)
    if w.ndim != 2:
        raise RuntimeError(f"embedding_renorm_: expected a 2-D weight, got shape {tuple(w.shape)}")
    idx = _as_tensor(indices)
    if idx.dtype.kind not in "iu":
        raise RuntimeError(f"embedding_renorm_: expected integer indices, got {idx.dtype}")
    with no_grad():
        rows = L.unique(idx.reshape(-1))
        picked = w[rows]
        norms = L.linalg.vector_norm(picked, float(norm_type), dim=1)
        scale = L.where(norms > float(max_norm), float(max_norm) / (norms + 1e-7), L.ones_like(norms))
        w[rows] = picked * scale[:, None].to(w.dtype)
    return w


# ------------------------------------------------------------------ views and copies


@tensor_method("slice_inverse")
def slice_inverse(input, src, dim=0, start=None, end=None, step=1, *, axis=None):
    """The inverse of slicing: ``input`` (``src`` sliced along ``dim`` by ``start:end:step``)
    seen with ``src``'s geometry again - a view of ``input``'s storage with ``src``'s size,
    strides and offset (so ``input`` must share ``src``'s memory, as in PyTorch, where this
    serves functionalization).

    Examples
    --------
    >>> import lucid
    >>> x = lucid.arange(6.0).reshape(2, 3)
    >>> lucid.slice_inverse(x[:, 1:], x, 1, 1, None, 1).tolist()
    [[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]]
    """
    if axis is not None:  # See NOTE [NumPy keyword aliases]
        dim = numpy_axis("slice_inverse", dim, axis, 0)
    L = _L()
    x, base = _as_tensor(input), _as_tensor(src)
    return L.as_strided(x, tuple(base.shape), base.stride(), base.storage_offset())


def _accessor_copy(op, input, accessor, layouts):
    t = input
    if getattr(t, "layout", None) not in layouts:
        raise RuntimeError(f"{op}: expected a tensor of layout {' or '.join(str(k) for k in layouts)}, "
                           f"got {getattr(t, 'layout', None)}")
    return getattr(t, accessor)().clone()


def indices_copy(input):
    """A copy of a sparse COO tensor's ``indices()`` (PyTorch's ``*_copy`` form of the view;
    PyTorch's own has no CPU kernel for COO tensors).

    Examples
    --------
    >>> import lucid
    >>> lucid.indices_copy(lucid.eye(2).to_sparse()).tolist()
    [[0, 1], [0, 1]]
    """
    L = _L()
    return _accessor_copy("indices_copy", input, "indices", (L.sparse_coo,))


def values_copy(input):
    """A copy of a sparse tensor's ``values()`` (COO, CSR, CSC, BSR, BSC).

    Examples
    --------
    >>> import lucid
    >>> lucid.values_copy(lucid.eye(2).to_sparse_csr()).tolist()
    [1.0, 1.0]
    """
    L = _L()
    layouts = tuple(getattr(L, n) for n in ("sparse_coo", "sparse_csr", "sparse_csc", "sparse_bsr", "sparse_bsc")
                    if hasattr(L, n))
    return _accessor_copy("values_copy", input, "values", layouts)


def crow_indices_copy(input):
    """A copy of a CSR (or BSR) tensor's ``crow_indices()``.

    Examples
    --------
    >>> import lucid
    >>> lucid.crow_indices_copy(lucid.eye(2).to_sparse_csr()).tolist()
    [0, 1, 2]
    """
    L = _L()
    return _accessor_copy("crow_indices_copy", input, "crow_indices", (L.sparse_csr, getattr(L, "sparse_bsr", None)))


def col_indices_copy(input):
    """A copy of a CSR (or BSR) tensor's ``col_indices()``.

    Examples
    --------
    >>> import lucid
    >>> lucid.col_indices_copy(lucid.eye(2).to_sparse_csr()).tolist()
    [0, 1]
    """
    L = _L()
    return _accessor_copy("col_indices_copy", input, "col_indices", (L.sparse_csr, getattr(L, "sparse_bsr", None)))


def ccol_indices_copy(input):
    """A copy of a CSC (or BSC) tensor's ``ccol_indices()``.

    Examples
    --------
    >>> import lucid
    >>> lucid.ccol_indices_copy(lucid.eye(2).to_sparse_csc()).tolist()
    [0, 1, 2]
    """
    L = _L()
    return _accessor_copy("ccol_indices_copy", input, "ccol_indices", (L.sparse_csc, getattr(L, "sparse_bsc", None)))


def row_indices_copy(input):
    """A copy of a CSC (or BSC) tensor's ``row_indices()``.

    Examples
    --------
    >>> import lucid
    >>> lucid.row_indices_copy(lucid.eye(2).to_sparse_csc()).tolist()
    [0, 1]
    """
    L = _L()
    return _accessor_copy("row_indices_copy", input, "row_indices", (L.sparse_csc, getattr(L, "sparse_bsc", None)))


# ------------------------------------------------------------------ sparse products


def _coo(t, op, what):
    L = _L()
    if getattr(t, "layout", None) is not L.sparse_coo:
        raise RuntimeError(f"{op}: expected {what} to be a sparse COO tensor, got layout {getattr(t, 'layout', None)}")
    if t.sparse_dim() != 2 or t.dense_dim() != 0:
        raise RuntimeError(f"{op}: expected {what} to be a 2-D sparse matrix, got shape {tuple(t.shape)}")
    return t


@tensor_method("sspaddmm")
def sspaddmm(input, mat1, mat2, *, beta=1, alpha=1):
    """``beta * input + alpha * (mat1 @ mat2)`` as a sparse COO matrix: ``input`` and ``mat1``
    sparse, ``mat2`` dense. As PyTorch's, the result is not coalesced: ``input``'s entries
    followed by every entry of the product's rows where ``mat1`` has entries.

    Examples
    --------
    >>> import lucid
    >>> s = lucid.eye(2).to_sparse()
    >>> lucid.sspaddmm(s, s, lucid.ones(2, 2), beta=2).to_dense().tolist()
    [[3.0, 1.0], [1.0, 3.0]]
    """
    L = _L()
    op = "sspaddmm"
    a, m1, m2 = _coo(input, op, "input"), _coo(mat1, op, "mat1"), _as_tensor(mat2)
    if m2.ndim != 2 or m1.shape[1] != m2.shape[0] or tuple(a.shape) != (m1.shape[0], m2.shape[1]):
        raise RuntimeError(f"{op}: shapes don't fit: input {tuple(a.shape)}, mat1 {tuple(m1.shape)}, "
                           f"mat2 {tuple(m2.shape)}")
    product = L.sparse.mm(m1, m2)
    cols = product.shape[1]
    rows = L.unique(m1.coalesce().indices()[0])  # the product's rows where mat1 has entries
    grid = L.stack([rows.repeat_interleave(cols), L.arange(cols, device=m2.device).repeat(rows.shape[0])])
    a = a.coalesce()
    indices = L.cat([a.indices(), grid], 1)
    values = L.cat([a.values() * beta, product[rows].reshape(-1) * alpha])
    return L.sparse_coo_tensor(indices, values, tuple(product.shape))


def saddmm(input, mat1, mat2, *, beta=1, alpha=1):
    """:func:`sspaddmm` (PyTorch's older name for the sparse-result ``addmm``).

    Examples
    --------
    >>> import lucid
    >>> s = lucid.eye(2).to_sparse()
    >>> lucid.saddmm(s, s, lucid.ones(2, 2)).to_dense().tolist()
    [[2.0, 1.0], [1.0, 2.0]]
    """
    return sspaddmm(input, mat1, mat2, beta=beta, alpha=alpha)


def dsmm(input, mat2):
    """Sparse ``input`` times dense ``mat2``, a dense result (:func:`lucid.sparse.mm`).

    Examples
    --------
    >>> import lucid
    >>> lucid.dsmm(lucid.eye(2).to_sparse(), lucid.ones(2, 1)).tolist()
    [[1.0], [1.0]]
    """
    return _L().sparse.mm(_coo(input, "dsmm", "input"), _as_tensor(mat2))


def hsmm(input, mat2):
    """Sparse ``input`` times dense ``mat2`` as a hybrid COO tensor: one sparse dim (the rows
    where ``input`` has entries) and the rows' values dense.

    Examples
    --------
    >>> import lucid
    >>> h = lucid.hsmm(lucid.eye(2).to_sparse(), lucid.ones(2, 3))
    >>> h.sparse_dim(), h.dense_dim(), h.to_dense().tolist()
    (1, 1, [[1.0, 1.0, 1.0], [1.0, 1.0, 1.0]])
    """
    L = _L()
    m1 = _coo(input, "hsmm", "input").coalesce()
    product = L.sparse.mm(m1, _as_tensor(mat2))
    rows = L.unique(m1.indices()[0])
    return L.sparse_coo_tensor(rows.reshape(1, -1), product[rows], tuple(product.shape)).coalesce()  # sorted rows
