"""More of PyTorch's private ``torch._*`` functions (See NOTE [Private ATen functions] in
``private_aten.py``): views and copies, indexing without bound checks, reductions, the linear
algebra helpers that also return their LU factors and the dtype casts. Random draws, dual
tensors, copies between tensors and the ``torch._check*`` family are in ``private_aten_runtime.py``.
"""
from __future__ import annotations

import collections

from .._core.tensor import Tensor
from ._family import _as_tensor
from .torch_more import segment_reduce as _segment_reduce  # noqa: F401  (torch._segment_reduce is the same)

__all__ = ["_to_copy", "_unsafe_view", "_reshape_alias", "_reshape_alias_copy", "_reshape_from_tensor",
           "_shape_as_tensor", "_dim_arange", "_conj", "_conj_copy", "_conj_physical", "_neg_view", "_neg_view_copy",
           "_stack", "_chunk_cat", "_efficientzerotensor", "_is_zerotensor", "_unsafe_index", "_unsafe_index_put",
           "_index_put_impl_", "_unsafe_masked_index", "_unsafe_masked_index_put_accumulate",
           "_convert_indices_from_coo_to_csr", "_convert_indices_from_csr_to_coo", "_aminmax",
           "_logcumsumexp", "_compute_linear_combination", "_is_all_true", "_is_any_true", "_unique", "_unique2",
           "_segment_reduce", "_linalg_det", "_linalg_slogdet", "_linalg_eigh", "_linalg_svd", "_linalg_solve_ex",
           "_lu_with_info", "_cast_Byte", "_cast_Char", "_cast_Double", "_cast_Float", "_cast_Half", "_cast_Int",
           "_cast_Long", "_cast_Short"]


def _L():
    import lucid

    return lucid


def _empty_like_nothing(x, dtype=None):
    L = _L()
    return L.empty(0, dtype=x.dtype if dtype is None else dtype, device=x.device)


# ------------------------------------------------------------------ views and copies


def _to_copy(input, *, dtype=None, layout=None, device=None, pin_memory=None, non_blocking=False,
             memory_format=None):
    """A new tensor with ``input``'s values, in ``dtype`` on ``device`` (default: the same), as
    ``torch.ops.aten._to_copy`` (not a ``torch.*`` name in PyTorch); differentiable.

    Examples
    --------
    >>> import lucid
    >>> x = lucid.tensor([1.5, 2.5])
    >>> y = lucid._to_copy(x, dtype=lucid.float64)
    >>> y, y is x
    (tensor([1.5, 2.5], dtype=lucid.float64), False)
    """
    return _as_tensor(input).to(dtype=dtype, device=device, copy=True, non_blocking=non_blocking,
                                memory_format=memory_format)


def _unsafe_view(input, size):
    """``input.view(size)``, as ``torch.ops.aten._unsafe_view`` (not a ``torch.*`` name in PyTorch).

    Examples
    --------
    >>> import lucid
    >>> lucid._unsafe_view(lucid.arange(6.0), [2, 3]).shape
    (2, 3)
    """
    return _as_tensor(input).view(tuple(size))


def _reshape_alias(input, size, stride):
    """The view of ``input``'s storage with ``size`` and ``stride`` (its storage offset kept), as
    ``torch.ops.aten._reshape_alias`` (not a ``torch.*`` name in PyTorch).

    Examples
    --------
    >>> import lucid
    >>> lucid._reshape_alias(lucid.arange(4.0), [2, 2], [1, 2])
    tensor([[0., 2.],
            [1., 3.]])
    """
    return _L().as_strided(_as_tensor(input), tuple(size), tuple(stride))


def _reshape_alias_copy(input, size, stride):
    """:func:`_reshape_alias` as a new tensor, as ``torch._reshape_alias_copy``.

    Examples
    --------
    >>> import lucid
    >>> lucid._reshape_alias_copy(lucid.arange(4.0), [2], [2])
    tensor([0., 2.])
    """
    return _reshape_alias(input, size, stride).clone()


def _host_ints(op, t):
    from .._core.backend import host

    if isinstance(t, Tensor):
        if t.dtype.kind not in "iu":
            raise RuntimeError(f"{op}: expected an integer tensor, got dtype {t.dtype}")
        return [int(v) for v in host(t._data).reshape(-1)]  # explicitly: the values become a shape
    return [int(v) for v in t]


def _reshape_from_tensor(input, shape):
    """``input.reshape(shape)`` with the shape given as a 1-D integer tensor, as
    ``torch._reshape_from_tensor``.

    Examples
    --------
    >>> import lucid
    >>> lucid._reshape_from_tensor(lucid.arange(6), lucid.tensor([3, 2])).shape
    (3, 2)
    """
    return _as_tensor(input).reshape(tuple(_host_ints("_reshape_from_tensor", shape)))


def _shape_as_tensor(input):
    """``input``'s shape as a 1-D int64 tensor on the CPU, as ``torch._shape_as_tensor``.

    Examples
    --------
    >>> import lucid
    >>> lucid._shape_as_tensor(lucid.ones(2, 3))
    tensor([2, 3])
    """
    L = _L()
    return L.tensor(list(_as_tensor(input).shape), dtype=L.int64, device="cpu")


def _dim_arange(like, dim):
    """``arange(like.size(dim))`` in int64 on ``like``'s device, as ``torch._dim_arange``.

    Examples
    --------
    >>> import lucid
    >>> lucid._dim_arange(lucid.ones(2, 3), 1)
    tensor([0, 1, 2])
    """
    L = _L()
    x = _as_tensor(like)
    return L.arange(x.shape[dim], dtype=L.int64, device=x.device)


def _conj(input):
    """:func:`lucid.conj`, as ``torch._conj``.

    Examples
    --------
    >>> import lucid
    >>> lucid._conj(lucid.tensor([1 + 2j]))
    tensor([1.-2.j], dtype=lucid.complex64)
    """
    return _L().conj(_as_tensor(input))


def _conj_copy(input):
    """:func:`lucid.conj` as a new tensor, as ``torch._conj_copy``.

    Examples
    --------
    >>> import lucid
    >>> lucid._conj_copy(lucid.tensor([1 + 2j]))
    tensor([1.-2.j], dtype=lucid.complex64)
    """
    return _L().conj(_as_tensor(input)).clone()


def _conj_physical(input):
    """:func:`lucid.conj_physical`, as ``torch._conj_physical``.

    Examples
    --------
    >>> import lucid
    >>> lucid._conj_physical(lucid.tensor([1 - 1j]))
    tensor([1.+1.j], dtype=lucid.complex64)
    """
    return _L().conj_physical(_as_tensor(input))


def _neg_view(input):
    """``-input``, as ``torch._neg_view``. Lucid has no negative bit, so this is a new tensor, not a
    view sharing ``input``'s memory.

    Examples
    --------
    >>> import lucid
    >>> lucid._neg_view(lucid.tensor([1.0, -2.0]))
    tensor([-1.,  2.])
    """
    return _L().neg(_as_tensor(input))


def _neg_view_copy(input):
    """``-input`` as a new tensor, as ``torch._neg_view_copy``.

    Examples
    --------
    >>> import lucid
    >>> lucid._neg_view_copy(lucid.tensor([1.0, -2.0]))
    tensor([-1.,  2.])
    """
    return _L().neg(_as_tensor(input))


def _stack(tensors, dim=0):
    """:func:`lucid.stack`, as ``torch._stack``.

    Examples
    --------
    >>> import lucid
    >>> lucid._stack([lucid.ones(2), lucid.zeros(2)], 1)
    tensor([[1., 0.],
            [1., 0.]])
    """
    return _L().stack(tensors, dim)


def _chunk_cat(tensors, dim, num_chunks):
    """Split each tensor into ``num_chunks`` chunks along ``dim`` (zero-padded to a multiple of
    ``num_chunks``), flatten each chunk from ``dim`` on, and concatenate chunk ``i`` of every tensor:
    a ``(*leading, num_chunks, total)`` tensor, as ``torch._chunk_cat`` (FSDP's gradient layout).

    Examples
    --------
    >>> import lucid
    >>> lucid._chunk_cat([lucid.arange(3.0), lucid.tensor([7.0, 8.0])], 0, 2)
    tensor([[0., 1., 7.],
            [2., 0., 8.]])
    """
    L = _L()
    ts = [_as_tensor(t) for t in tensors]
    if not ts:
        raise RuntimeError("_chunk_cat expects a non-empty input tensor list")
    if num_chunks < 1:
        raise RuntimeError(f"_chunk_cat expects positive num_chunks, got {num_chunks}")
    d = dim + ts[0].ndim if dim < 0 else dim
    if len({t.dtype for t in ts}) > 1:
        raise RuntimeError(f"_chunk_cat expects all input tensors with the same dtype, got {[t.dtype for t in ts]}")
    if any(t.ndim <= d or tuple(t.shape[:d]) != tuple(ts[0].shape[:d]) for t in ts):
        raise RuntimeError(f"_chunk_cat expects same sizes of 0,...,dim-1 dimensions for all tensors, got shapes "
                           f"{[tuple(t.shape) for t in ts]} and dim {dim}")
    parts = []
    for t in ts:
        n = t.shape[d]
        per = -(-n // num_chunks)
        if per * num_chunks != n:
            pad = tuple(t.shape[:d]) + (per * num_chunks - n,) + tuple(t.shape[d + 1:])
            t = L.cat([t, L.zeros(pad, dtype=t.dtype, device=t.device)], d)
        parts.append(t.reshape(tuple(t.shape[:d]) + (num_chunks, per * _prod(t.shape[d + 1:]))))
    return L.cat(parts, d + 1)


def _prod(shape):
    out = 1
    for s in shape:
        out *= s
    return out


def _efficientzerotensor(*size, dtype=None, layout=None, device=None, pin_memory=None):
    """A tensor of zeros, as ``torch._efficientzerotensor`` (Lucid has no zero-tensor flag, so it
    holds real zeros and :func:`_is_zerotensor` is always False).

    Examples
    --------
    >>> import lucid
    >>> lucid._efficientzerotensor([2], dtype=lucid.float64)
    tensor([0., 0.], dtype=lucid.float64)
    """
    shape = tuple(size[0]) if len(size) == 1 and not isinstance(size[0], int) else size
    return _L().zeros(shape, dtype=dtype, device=device)


def _is_zerotensor(input):
    """False: Lucid has no zero-tensor flag (``torch._is_zerotensor``).

    Examples
    --------
    >>> import lucid
    >>> lucid._is_zerotensor(lucid._efficientzerotensor(2))
    False
    """
    _as_tensor(input)
    return False


# ------------------------------------------------------------------ indexing


def _key(indices):
    return tuple(slice(None) if i is None else i for i in indices)


def _put(op, input, indices, values, accumulate):
    """``input`` with ``values`` put at ``indices`` (None: the whole dim), out of place."""
    L = _L()
    x = _as_tensor(input)
    indices = list(indices)
    if len(indices) > x.ndim:
        raise IndexError(f"{op}: too many indices ({len(indices)}) for a tensor of shape {tuple(x.shape)}")
    if all(i is not None for i in indices):
        return L.index_put(x, tuple(indices), values, accumulate)
    if not accumulate:
        from .inplace import index_put_value

        return index_put_value(x, _key(indices), _as_tensor(values).to(x.dtype))
    # accumulate with whole dims: move the indexed dims to the front, where index_put takes them,
    # and lay the values out as the indexed result of the moved tensor
    tpos = [d for d, i in enumerate(indices) if i is not None]
    spos = [d for d in range(x.ndim) if d not in tpos]
    idx = [_as_tensor(indices[d]) for d in tpos]
    if any(i.dtype == L.bool for i in idx):
        raise IndexError(f"{op}: bool indices beside None are not supported with accumulate=True")
    bshape = tuple(L.broadcast_shapes(*[tuple(i.shape) for i in idx]))
    first = tpos[0] if tpos == list(range(tpos[0], tpos[0] + len(tpos))) else 0
    rest = [x.shape[d] for d in spos]
    v = _as_tensor(values).to(x.dtype).broadcast_to(tuple(rest[:first]) + bshape + tuple(rest[first:]))
    nb = len(bshape)
    v = v.permute(list(range(first, first + nb)) + [d for d in range(v.ndim) if not first <= d < first + nb])
    out = L.index_put(x.permute(tpos + spos), tuple(idx), v, True)
    order = tpos + spos
    return out.permute([order.index(d) for d in range(x.ndim)])


def _unsafe_index(input, indices):
    """``input[indices]`` with ``None`` entries meaning a whole dim, as ``torch._unsafe_index``
    (PyTorch skips the bound checks; Lucid still makes them).

    Examples
    --------
    >>> import lucid
    >>> lucid._unsafe_index(lucid.arange(6.0).reshape(2, 3), [None, lucid.tensor([2, 0])])
    tensor([[2., 0.],
            [5., 3.]])
    """
    return _as_tensor(input)[_key(indices)]


def _unsafe_index_put(input, indices, values, accumulate=False):
    """``index_put`` whose ``indices`` may hold ``None`` (a whole dim), as ``torch._unsafe_index_put``.

    Examples
    --------
    >>> import lucid
    >>> lucid._unsafe_index_put(lucid.zeros(2, 2), [None, lucid.tensor([1, 1])], lucid.tensor(1.0), True)
    tensor([[0., 2.],
            [0., 2.]])
    """
    return _put("_unsafe_index_put", input, indices, values, accumulate)


def _index_put_impl_(input, indices, values, accumulate=False, unsafe=False):
    """In-place :func:`_unsafe_index_put` (``unsafe`` ignored), as ``torch._index_put_impl_``;
    returns ``input``.

    Examples
    --------
    >>> import lucid
    >>> x = lucid.zeros(3)
    >>> lucid._index_put_impl_(x, [lucid.tensor([0, 0])], lucid.tensor(1.0), True)
    tensor([2., 0., 0.])
    """
    if not isinstance(input, Tensor):
        raise TypeError(f"_index_put_impl_: expected a Tensor, got {type(input).__name__}")
    res = _put("_index_put_impl_", input, indices, values, accumulate)
    return input.copy_(res)


def _clamped(op, x, indices):
    out, d = [], 0
    for i in indices:
        if i is not None:
            i = _as_tensor(i)
            if i.dtype.kind not in "iu":
                raise IndexError(f"{op}: expected integer index tensors, got dtype {i.dtype}")
            i = i.clamp(-x.shape[d], x.shape[d] - 1)
        out.append(i)
        d += 1
    return out


def _unsafe_masked_index(input, mask, indices, fill):
    """``where(mask, input[indices], fill)``, each index clamped into its dim first (so indices
    outside it are harmless where ``mask`` is False), as ``torch._unsafe_masked_index``
    (what upsampling decompositions call).

    Examples
    --------
    >>> import lucid
    >>> lucid._unsafe_masked_index(lucid.arange(3.0), lucid.tensor([True, False]), [lucid.tensor([2, 9])], -1.0)
    tensor([ 2., -1.])
    """
    x = _as_tensor(input)
    return _L().where(_as_tensor(mask), x[_key(_clamped("_unsafe_masked_index", x, indices))], fill)


def _unsafe_masked_index_put_accumulate(input, mask, indices, values):
    """``input`` with ``values`` added at the (clamped) ``indices`` where ``mask`` is True, as
    ``torch._unsafe_masked_index_put_accumulate`` (:func:`_unsafe_masked_index`'s adjoint).

    Examples
    --------
    >>> import lucid
    >>> lucid._unsafe_masked_index_put_accumulate(lucid.zeros(3), lucid.tensor([True, False]),
    ...                                           [lucid.tensor([2, 9])], lucid.tensor([1.0, 5.0]))
    tensor([0., 0., 1.])
    """
    L = _L()
    x = _as_tensor(input)
    idx = _clamped("_unsafe_masked_index_put_accumulate", x, indices)
    v = _as_tensor(values).to(x.dtype)
    v = L.where(_as_tensor(mask), v, L.zeros_like(v))  # not 0.0: an integer input stays integer
    return _put("_unsafe_masked_index_put_accumulate", x, idx, v, True)


def _index_dtype(out_int32):
    L = _L()
    return L.int32 if out_int32 else L.int64


def _convert_indices_from_coo_to_csr(input, size, *, out_int32=False):
    """The compressed row pointers (``size + 1``) of sorted COO row indices ``input``, as
    ``torch._convert_indices_from_coo_to_csr``.

    Examples
    --------
    >>> import lucid
    >>> lucid._convert_indices_from_coo_to_csr(lucid.tensor([0, 0, 2, 2, 2]), 4)
    tensor([0, 2, 2, 5, 5])
    """
    L = _L()
    rows = _as_tensor(input)
    if rows.ndim != 1:
        raise RuntimeError(f"_convert_indices_from_coo_to_csr: expected 1-D row indices, got shape {tuple(rows.shape)}")
    bounds = L.arange(size + 1, dtype=rows.dtype, device=rows.device)
    return L.searchsorted(rows, bounds).to(_index_dtype(out_int32))


def _convert_indices_from_csr_to_coo(crow_indices, col_indices, *, out_int32=False, transpose=False):
    """The COO indices ``(2, nnz)`` (rows, columns; swapped with ``transpose=True``) of CSR
    ``crow_indices`` / ``col_indices``, as ``torch._convert_indices_from_csr_to_coo``; a batch
    (``(B, n + 1)`` and ``(B, nnz)``) gives ``(3, B * nnz)`` with the batch index first.

    Examples
    --------
    >>> import lucid
    >>> lucid._convert_indices_from_csr_to_coo(lucid.tensor([0, 2, 2, 3]), lucid.tensor([1, 3, 0]))
    tensor([[0, 0, 2],
            [1, 3, 0]])
    """
    L = _L()
    crow, col = _as_tensor(crow_indices), _as_tensor(col_indices)
    if crow.ndim not in (1, 2) or col.ndim != crow.ndim or tuple(crow.shape[:-1]) != tuple(col.shape[:-1]):
        raise RuntimeError(f"_convert_indices_from_csr_to_coo: expected crow_indices (..., n + 1) and col_indices "
                           f"(..., nnz) with one batch, got {tuple(crow.shape)} and {tuple(col.shape)}")
    j = L.arange(col.shape[-1], dtype=crow.dtype, device=crow.device).expand(tuple(col.shape))
    rows = L.searchsorted(crow, j.contiguous(), right=True) - 1  # the row whose range holds entry j
    pair = [col, rows] if transpose else [rows, col]
    if crow.ndim == 2:
        batch = L.arange(crow.shape[0], dtype=crow.dtype, device=crow.device).unsqueeze(1).expand(tuple(col.shape))
        pair = [batch] + pair
    return L.stack([p.reshape(-1).to(crow.dtype) for p in pair], 0).to(_index_dtype(out_int32))


# ------------------------------------------------------------------ reductions


def _aminmax(input, dim=None, keepdim=False):
    """``(min, max)`` of ``input`` (over ``dim`` if given) as a plain tuple, as ``torch._aminmax``
    (deprecated in PyTorch for :func:`lucid.aminmax`).

    Examples
    --------
    >>> import lucid
    >>> lucid._aminmax(lucid.tensor([[1.0, -2.0], [3.0, 0.0]]))
    (tensor(-2.), tensor(3.))
    """
    L = _L()
    x = _as_tensor(input)
    res = L.aminmax(x) if dim is None else L.aminmax(x, dim=dim, keepdim=keepdim)
    return tuple(res)


def _logcumsumexp(input, dim):
    """:func:`lucid.logcumsumexp`, as ``torch._logcumsumexp``.

    Examples
    --------
    >>> import lucid
    >>> lucid._logcumsumexp(lucid.tensor([0.0, 0.0]), 0).exp()
    tensor([1., 2.])
    """
    return _L().logcumsumexp(_as_tensor(input), dim)


def _compute_linear_combination(input, coefficients):
    """``out[i] = sum_j coefficients[i, j] * input[j]``, as ``torch._compute_linear_combination``
    (``input`` (n, ...), ``coefficients`` (m, n), result (m, ...)).

    Examples
    --------
    >>> import lucid
    >>> lucid._compute_linear_combination(lucid.tensor([[1.0, 2.0], [3.0, 4.0]]), lucid.tensor([[1.0, 1.0]]))
    tensor([[4., 6.]])
    """
    x, c = _as_tensor(input), _as_tensor(coefficients)
    if c.ndim != 2 or x.ndim < 1 or c.shape[1] != x.shape[0]:
        raise RuntimeError(f"_compute_linear_combination: expected coefficients (m, n) and input (n, ...), got "
                           f"{tuple(c.shape)} and {tuple(x.shape)}")
    return _L().tensordot(c, x, dims=([1], [0]))


def _bool_input(op, input):
    x = _as_tensor(input)
    if x.dtype != _L().bool:
        raise RuntimeError(f"{op}: expected a bool tensor, got dtype {x.dtype}")
    return x


def _is_all_true(input):
    """Whether every element of a bool tensor is True, as a 0-d bool tensor (``torch._is_all_true``).

    Examples
    --------
    >>> import lucid
    >>> lucid._is_all_true(lucid.tensor([True, False]))
    tensor(False)
    """
    return _bool_input("_is_all_true", input).all()


def _is_any_true(input):
    """Whether some element of a bool tensor is True, as a 0-d bool tensor (``torch._is_any_true``).

    Examples
    --------
    >>> import lucid
    >>> lucid._is_any_true(lucid.tensor([True, False]))
    tensor(True)
    """
    return _bool_input("_is_any_true", input).any()


def _unique(input, sorted=True, return_inverse=False):
    """``(values, inverse)`` of the flattened ``input``, ``inverse`` empty unless asked for, as
    ``torch._unique``.

    Examples
    --------
    >>> import lucid
    >>> lucid._unique(lucid.tensor([3, 1, 3]), True, True)
    (tensor([1, 3]), tensor([1, 0, 1]))
    """
    values, inverse, _ = _unique2(input, sorted, return_inverse, False)
    return values, inverse


def _unique2(input, sorted=True, return_inverse=False, return_counts=False):
    """``(values, inverse, counts)`` of the flattened ``input``, the last two empty (int64) unless
    asked for, as ``torch._unique2``; ``inverse`` has ``input``'s shape.

    Examples
    --------
    >>> import lucid
    >>> lucid._unique2(lucid.tensor([3, 1, 3]), True, False, True)
    (tensor([1, 3]), tensor([], dtype=lucid.int64), tensor([1, 2]))
    """
    L = _L()
    x = _as_tensor(input)
    values, inverse, counts = L.unique(x, sorted=sorted, return_inverse=True, return_counts=True)
    empty = _empty_like_nothing(x, L.int64)
    return values, (inverse if return_inverse else empty), (counts if return_counts else empty)


# ------------------------------------------------------------------ linear algebra

_LinalgDet = collections.namedtuple("_linalg_det", ["result", "LU", "pivots"])
_LinalgSlogdet = collections.namedtuple("_linalg_slogdet", ["sign", "logabsdet", "LU", "pivots"])
_LinalgEigh = collections.namedtuple("_linalg_eigh", ["eigenvalues", "eigenvectors"])
_LinalgSvd = collections.namedtuple("_linalg_svd", ["U", "S", "Vh"])
_LinalgSolveEx = collections.namedtuple("_linalg_solve_ex", ["result", "LU", "pivots", "info"])
_LuWithInfo = collections.namedtuple("_lu_with_info", ["LU", "pivots", "info"])


def _linalg_det(A):
    """``(result, LU, pivots)``: ``det(A)`` with an LU factorisation giving it, as ``torch._linalg_det``
    (pivots int32, 1-based). Differentiable in ``A``. ``LU, pivots`` are ``linalg.lu_factor(A)``'s;
    PyTorch's are those of ``A`` or of ``A^T`` depending on ``A``'s memory layout (same determinant).

    Examples
    --------
    >>> import lucid
    >>> lucid._linalg_det(lucid.tensor([[2.0, 1.0], [4.0, 3.0]])).result
    tensor(2.)
    """
    L = _L()
    LU, pivots, _ = L.linalg.lu_factor_ex(A)
    return _LinalgDet(L.linalg.det(A), LU, pivots)


def _linalg_slogdet(A):
    """``(sign, logabsdet, LU, pivots)``, as ``torch._linalg_slogdet`` (``LU, pivots`` as in
    :func:`_linalg_det`).

    Examples
    --------
    >>> import lucid
    >>> lucid._linalg_slogdet(lucid.tensor([[-2.0, 0.0], [0.0, 1.0]]))[:2]
    (tensor(-1.), tensor(0.6931472))
    """
    L = _L()
    sign, logabsdet = L.linalg.slogdet(A)
    LU, pivots, _ = L.linalg.lu_factor_ex(A)
    return _LinalgSlogdet(sign, logabsdet, LU, pivots)


def _linalg_eigh(A, UPLO="L", compute_v=True):
    """``(eigenvalues, eigenvectors)`` of a Hermitian ``A`` (eigenvectors empty when
    ``compute_v=False``), as ``torch._linalg_eigh``.

    Examples
    --------
    >>> import lucid
    >>> lucid._linalg_eigh(lucid.tensor([[2.0, 1.0], [1.0, 2.0]]), "L", False)
    _linalg_eigh(eigenvalues=tensor([1., 3.]), eigenvectors=tensor([]))
    """
    L = _L()
    if compute_v:
        return _LinalgEigh(*L.linalg.eigh(A, UPLO=UPLO))
    w = L.linalg.eigvalsh(A, UPLO=UPLO)
    return _LinalgEigh(w, _empty_like_nothing(_as_tensor(A)))


def _linalg_svd(A, full_matrices=False, compute_uv=True, *, driver=None):
    """``(U, S, Vh)`` of ``A`` (U and Vh empty when ``compute_uv=False``), as ``torch._linalg_svd``
    (note the default ``full_matrices=False``).

    Examples
    --------
    >>> import lucid
    >>> lucid._linalg_svd(lucid.tensor([[3.0, 0.0], [0.0, 4.0]]), False, False).S
    tensor([4., 3.])
    """
    L = _L()
    if compute_uv:
        return _LinalgSvd(*L.linalg.svd(A, full_matrices=full_matrices, driver=driver))
    empty = _empty_like_nothing(_as_tensor(A))
    return _LinalgSvd(empty, L.linalg.svdvals(A, driver=driver), empty)


def _linalg_solve_ex(A, B, *, left=True, check_errors=False):
    """``(result, LU, pivots, info)``: :func:`lucid.linalg.solve_ex`'s solution with ``A``'s LU
    factorisation, as ``torch._linalg_solve_ex``.

    Examples
    --------
    >>> import lucid
    >>> lucid._linalg_solve_ex(lucid.tensor([[2.0, 0.0], [0.0, 4.0]]), lucid.tensor([2.0, 2.0])).result
    tensor([1. , 0.5])
    """
    L = _L()
    result, info = L.linalg.solve_ex(A, B, left=left, check_errors=check_errors)
    LU, pivots, _ = L.linalg.lu_factor_ex(A)
    return _LinalgSolveEx(result, LU, pivots, info)


def _lu_with_info(input, pivot=True, check_errors=True):
    """``(LU, pivots, info)`` of ``input``, as ``torch._lu_with_info`` (:func:`lucid.linalg.lu_factor_ex`).

    Examples
    --------
    >>> import lucid
    >>> lucid._lu_with_info(lucid.tensor([[2.0, 1.0], [4.0, 3.0]])).pivots
    tensor([2, 2], dtype=lucid.int32)
    """
    return _LuWithInfo(*_L().linalg.lu_factor_ex(input, pivot=pivot, check_errors=check_errors))


# ------------------------------------------------------------------ casts


def _cast(name, dtype_name):
    def cast(input, non_blocking=False):
        return _as_tensor(input).to(getattr(_L(), dtype_name), non_blocking=non_blocking)

    cast.__name__ = cast.__qualname__ = name
    cast.__doc__ = f"""``input`` converted to {dtype_name}, as ``torch.{name}``; differentiable where the
    dtype is a floating one.

    Examples
    --------
    >>> import lucid
    >>> lucid.{name}(lucid.tensor([1.0, 2.0])).dtype
    lucid.{dtype_name}
    """
    return cast


_cast_Byte = _cast("_cast_Byte", "uint8")
_cast_Char = _cast("_cast_Char", "int8")
_cast_Double = _cast("_cast_Double", "float64")
_cast_Float = _cast("_cast_Float", "float32")
_cast_Half = _cast("_cast_Half", "float16")
_cast_Int = _cast("_cast_Int", "int32")
_cast_Long = _cast("_cast_Long", "int64")
_cast_Short = _cast("_cast_Short", "int16")
