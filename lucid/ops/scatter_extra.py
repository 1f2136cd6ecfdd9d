"""More indexing and scatter ops (issue 10): index_fill, index_copy, index_put, put,
masked_scatter, diagonal/select/slice_scatter and scatter_reduce.

All are composites of existing primitives (where, index_add, the out-of-place setitem
primitive, cumsum + take, one-hot reductions), so gradients, jvp and vmap come from
those. ``scatter_reduce`` builds a one-hot mask of shape ``(dim size, *index.shape)``: memory
grows with both; for plain sums ``scatter_add`` is cheaper.
"""
from __future__ import annotations

import numpy as np

from .._core.tensor import Tensor, _wrap, tensor_method
from ._family import _as_tensor, normalize_axis
from .indexing import _dim_index
from .numpy_aliases import REQUIRED, numpy_axis


def _lucid():
    import lucid

    return lucid


def _along(vec, axis, nd):
    """A 1-d tensor shaped to broadcast along ``axis`` of an ``nd``-d tensor."""
    shape = [1] * max(nd, 1)
    shape[axis] = vec.shape[0]
    return vec.reshape(shape) if nd else vec.reshape(())


def _hit_mask(index, n):
    L = _lucid()
    return (L.arange(n, device=index.device)[:, None] == index[None, :]).any(1)


@tensor_method("index_fill")
def index_fill(input, dim=REQUIRED, index=REQUIRED, value=REQUIRED, *, axis=None):
    """Copy of ``input`` with the slices at ``index`` along ``dim`` set to ``value``.

    Examples
    --------
    >>> import lucid
    >>> lucid.index_fill(lucid.zeros(2, 3), 1, lucid.tensor([0, 2]), 5.0).tolist()
    [[5.0, 0.0, 5.0], [5.0, 0.0, 5.0]]
    """
    if axis is not None or dim is REQUIRED or index is REQUIRED or value is REQUIRED:  # See NOTE [NumPy keyword aliases]
        dim = numpy_axis("index_fill", dim, axis, REQUIRED, index=index, value=value)
    L = _lucid()
    input, index = _as_tensor(input), _as_tensor(index)
    if index.dtype.kind in "iu":  # PyTorch's index_fill (alone of the index_* family) counts from the end
        n = input.shape[normalize_axis(dim, input.ndim, "index_fill")] if input.ndim else 1
        index = L.where((index < 0) & (index >= -n), index + n, index)
    input, axis, index = _dim_index("index_fill", input, dim, index)
    if isinstance(value, Tensor):
        if value.ndim != 0:
            raise RuntimeError(f"index_fill: value must be a number or a 0-d tensor, got shape {tuple(value.shape)}")
        value = value.to(input.dtype)
    elif input.dtype.kind in "iu" and not isinstance(value, (bool, np.bool_)):  # PyTorch's range check
        from .creation import _float_fill_value, _int_fill_value

        if isinstance(value, (float, np.floating)):
            value = _float_fill_value(value, np.dtype(input.dtype), "index_fill")
        elif isinstance(value, (int, np.integer)):
            value = _int_fill_value(int(value), np.dtype(input.dtype), "index_fill")
    n = input.shape[axis] if input.ndim else 1
    out = L.where(_along(_hit_mask(index, n), axis, input.ndim), value, input)
    # the value takes input's dtype (a bool input stays bool, 2.7 into an int tensor is 2)
    return out if out.dtype == input.dtype else out.to(input.dtype)


@tensor_method("index_copy")
def index_copy(input, dim=REQUIRED, index=REQUIRED, source=REQUIRED, *, axis=None):
    """Copy of ``input`` with the slices at ``index`` along ``dim`` replaced by ``source``'s.

    Examples
    --------
    >>> import lucid
    >>> lucid.index_copy(lucid.zeros(3), 0, lucid.tensor([2, 0]), lucid.tensor([1.0, 2.0])).tolist()
    [2.0, 0.0, 1.0]
    """
    if axis is not None or dim is REQUIRED or index is REQUIRED or source is REQUIRED:  # See NOTE [NumPy keyword aliases]
        dim = numpy_axis("index_copy", dim, axis, REQUIRED, index=index, source=source)
    L = _lucid()
    input, axis, index = _dim_index("index_copy", input, dim, index)
    cleared = index_fill(input, axis, index, 0)
    source = _as_tensor(source).to(input.dtype)
    if index.shape[0] > 1:
        # A repeated position takes the last of its slices (as PyTorch on the CPU), not their
        # sum: the others are zeroed before the add, so they get no gradient either.
        m = index.shape[0]
        later = L.triu(L.ones(m, m, dtype=L.bool, device=index.device), 1)
        keep = ~((index[:, None] == index[None, :]) & later).any(1)
        source = L.where(_along(keep, axis, source.ndim), source, L.zeros((), dtype=source.dtype,
                                                                             device=source.device))
    return L.index_add(cleared, axis, index, source)


def _linear_index(indices, shape, op):
    """Flat positions over the leading ``len(indices)`` dims (integer index tensors)."""
    L = _lucid()
    lin, stride = None, 1
    for k in reversed(range(len(indices))):
        i = _as_tensor(indices[k])
        if i.dtype.kind not in "iu":
            raise IndexError(f"{op}: accumulate=True needs integer index tensors, got {i.dtype}")
        i = L.where(i < 0, i + shape[k], i)
        lin = i * stride if lin is None else lin + i * stride
        stride *= shape[k]
    return lin


@tensor_method("index_put")
def index_put(input, indices, values, accumulate=False):
    """Copy of ``input`` with ``values`` written (or added, ``accumulate=True``) at ``input[indices]``.

    Examples
    --------
    >>> import lucid
    >>> i = (lucid.tensor([0, 0, 2]),)
    >>> lucid.index_put(lucid.zeros(3), i, lucid.tensor(1.0), accumulate=True).tolist()
    [2.0, 0.0, 1.0]
    """
    L = _lucid()
    input = _as_tensor(input)
    indices = tuple(indices)
    if len(indices) > input.ndim:
        raise IndexError(f"index_put: too many indices ({len(indices)}) for a tensor of shape {tuple(input.shape)}")
    # PyTorch casts no source tensor; a 0-d one is still cast as a Python number is (an earlier
    # decision, tests/regressions/test_masked_nested_sparse_sweep.py:273), where PyTorch raises
    if isinstance(values, Tensor) and values.ndim and values.dtype != input.dtype:
        raise RuntimeError(f"index_put: Index put requires the source and destination dtypes match, got "
                           f"{input.dtype} for the destination and {values.dtype} for the source")
    values = _as_tensor(values).to(input.dtype)
    if not accumulate:
        from .inplace import index_put_value

        return index_put_value(input, indices, values)
    if any(_as_tensor(i).dtype == np.bool_ for i in indices):
        indices = tuple(t for i in indices for t in (_as_tensor(i).nonzero(as_tuple=True)
                                                       if _as_tensor(i).dtype == np.bool_ else (i,)))
    k = len(indices)
    lin = _linear_index(indices, tuple(input.shape), "index_put")
    rest = tuple(input.shape[k:])
    lead = int(np.prod(input.shape[:k], dtype=np.int64))
    vals = values.expand(*(tuple(lin.shape) + rest)).reshape((-1,) + rest)
    flat = L.index_add(input.reshape((lead,) + rest), 0, lin.reshape(-1), vals)
    return flat.reshape(tuple(input.shape))


@tensor_method("put")
def put(input, index, source, accumulate=False):
    """Copy of ``input`` with ``source`` written at the flat positions ``index`` (negative from the end).

    Examples
    --------
    >>> import lucid
    >>> lucid.put(lucid.zeros(2, 2), lucid.tensor([0, -1]), lucid.tensor([1.0, 2.0])).tolist()
    [[1.0, 0.0], [0.0, 2.0]]
    """
    L = _lucid()
    input, index = _as_tensor(input), _as_tensor(index)
    n = input.numel()
    # checked here: wrapping once more (index_put counts from the end too) would hide it; a meta
    # tensor has no values to check
    outside = (index < -n) | (index >= n) if type(index) is Tensor and index.device.type != "meta" else None
    if outside is not None and index.numel() and bool(outside.any()):
        bad = int(index[outside].reshape(-1)[0])
        raise IndexError(f"put: out of range: tried to access index {bad} on a tensor of {n} elements")
    idx = L.where(index < 0, index + n, index).reshape(-1)
    if isinstance(source, Tensor) and source.ndim and source.dtype != input.dtype:
        raise RuntimeError(f"put: self and source expected to have the same dtype, but got self.dtype = "
                           f"{input.dtype} and source.dtype = {source.dtype}")
    src = _as_tensor(source).reshape(-1)
    if src.shape[0] != idx.shape[0]:
        raise RuntimeError(f"put: index ({idx.shape[0]} elements) and source ({src.shape[0]}) must have "
                           "the same number of elements")
    return index_put(input.reshape(-1), (idx,), src, accumulate).reshape(tuple(input.shape))


@tensor_method("masked_scatter")
def masked_scatter(input, mask, source):
    """Copy of ``input`` with ``source``'s elements, in order, written where ``mask`` is True.

    Examples
    --------
    >>> import lucid
    >>> m = lucid.tensor([True, False, True])
    >>> lucid.masked_scatter(lucid.zeros(3), m, lucid.tensor([1.0, 2.0, 3.0])).tolist()
    [1.0, 0.0, 2.0]
    """
    L = _lucid()
    input, mask, source = _as_tensor(input), _as_tensor(mask), _as_tensor(source)
    if mask.dtype != np.bool_:
        raise RuntimeError(f"masked_scatter: expected a bool mask, got {mask.dtype}")
    shape = tuple(np.broadcast_shapes(tuple(input.shape), tuple(mask.shape)))
    m = mask.expand(*shape).reshape(-1)
    src = source.reshape(-1)
    if type(m) is Tensor and int(m.sum()) > src.shape[0]:
        raise RuntimeError(f"masked_scatter: the mask selects {int(m.sum())} elements but source has "
                           f"only {src.shape[0]}")
    if src.shape[0] == 0:
        return input.expand(*shape).clone() if tuple(input.shape) != shape else input.clone()
    pos = (m.to(L.int64).cumsum(0) - 1).clamp(0, src.shape[0] - 1)
    out = L.where(m, L.take(src, pos).to(input.dtype), input.expand(*shape).reshape(-1))
    return out.reshape(shape)


def _put_at(input, src, key, view, op):
    """``input`` with ``src`` written at ``input[key]`` (out of place; ``view`` checks the shape)."""
    from .inplace import index_put_value

    input, src = _as_tensor(input), _as_tensor(src)
    want = tuple(view(input).shape)
    if tuple(src.shape) != want:
        raise RuntimeError(f"{op}: src must have shape {want}, got {tuple(src.shape)}")
    return index_put_value(input, key, src)


@tensor_method("diagonal_scatter")
def diagonal_scatter(input, src, offset=0, dim1=0, dim2=1):
    """Copy of ``input`` with ``src`` written into its diagonal (as ``input.diagonal(offset, dim1, dim2)``).

    Examples
    --------
    >>> import lucid
    >>> lucid.diagonal_scatter(lucid.zeros(2, 2), lucid.ones(2)).tolist()
    [[1.0, 0.0], [0.0, 1.0]]
    """
    L = _lucid()
    input = _as_tensor(input)
    a, b = (normalize_axis(d, input.ndim, "diagonal_scatter") for d in (dim1, dim2))
    if a == b:
        raise RuntimeError(f"diagonal_scatter: dim1 and dim2 must differ, got {dim1} and {dim2}")
    moved = L.movedim(input, (a, b), (-2, -1))  # diagonal() lays the diagonal out last, too
    k = int(input.diagonal(offset, a, b).shape[-1])
    rows = _wrap(np.arange(k) + max(-offset, 0))
    cols = _wrap(np.arange(k) + max(offset, 0))
    out = _put_at(moved, src, (Ellipsis, rows, cols), lambda t: t.diagonal(offset, -2, -1), "diagonal_scatter")
    return L.movedim(out, (-2, -1), (a, b))


@tensor_method("select_scatter")
def select_scatter(input, src, dim=REQUIRED, index=REQUIRED, *, axis=None):
    """Copy of ``input`` with ``src`` written at ``input.select(dim, index)``."""
    if axis is not None or dim is REQUIRED or index is REQUIRED:  # See NOTE [NumPy keyword aliases]
        dim = numpy_axis("select_scatter", dim, axis, REQUIRED, index=index)
    input = _as_tensor(input)
    d = normalize_axis(dim, input.ndim, "select_scatter")
    return _put_at(input, src, (slice(None),) * d + (index,), lambda t: t.select(d, index), "select_scatter")


@tensor_method("slice_scatter")
def slice_scatter(input, src, dim=0, start=None, end=None, step=1, *, axis=None):
    """Copy of ``input`` with ``src`` written into the slice ``start:end:step`` along ``dim``."""
    if axis is not None:  # See NOTE [NumPy keyword aliases]
        dim = numpy_axis("slice_scatter", dim, axis, 0)
    input = _as_tensor(input)
    d = normalize_axis(dim, input.ndim, "slice_scatter")
    key = (slice(None),) * d + (slice(start, end, step),)
    return _put_at(input, src, key, lambda t: t[key], "slice_scatter")


_REDUCES = ("sum", "prod", "mean", "amax", "amin")


@tensor_method("scatter_reduce")
def scatter_reduce(input, dim=REQUIRED, index=REQUIRED, src=REQUIRED, reduce=REQUIRED, *, include_self=True,
                   axis=None):
    """Reduce ``src`` into ``input`` at ``index`` along ``dim``: "sum", "prod", "mean", "amax", "amin".

    For dim 0: ``out[index[i][j]][j] = reduce(out[index[i][j]][j], src[i][j])`` over all i;
    ``include_self=False`` leaves ``input``'s own value out wherever something is scattered.
    Gradients of amax/amin are shared evenly among tied values, as in PyTorch.

    Examples
    --------
    >>> import lucid
    >>> x = lucid.tensor([1.0, 10.0])
    >>> lucid.scatter_reduce(x, 0, lucid.tensor([0, 0, 1]), lucid.tensor([5.0, 3.0, 2.0]), "amax").tolist()
    [5.0, 10.0]
    """
    if axis is not None or dim is REQUIRED or index is REQUIRED or src is REQUIRED or reduce is REQUIRED:  # See NOTE [NumPy keyword aliases]
        dim = numpy_axis("scatter_reduce", dim, axis, REQUIRED, index=index, src=src, reduce=reduce)
    L = _lucid()
    if reduce not in _REDUCES:
        raise RuntimeError(f"scatter_reduce: reduce must be one of {_REDUCES}, got {reduce!r}")
    input, index, src = _as_tensor(input), _as_tensor(index), _as_tensor(src)
    if src.dtype != input.dtype:
        raise RuntimeError(f"scatter_reduce: expected self.dtype to be equal to src.dtype, got "
                           f"{input.dtype} and {src.dtype}")
    if index.numel() == 0:  # PyTorch checks nothing else about an empty index
        return input.clone()
    if input.ndim == 0:  # read as 1-d, as PyTorch
        normalize_axis(dim, 0, "scatter_reduce")
        return scatter_reduce(input.reshape(1), 0, index.reshape(-1), src.reshape(-1), reduce,
                              include_self=include_self).reshape(())
    nd = input.ndim
    d = normalize_axis(dim, nd, "scatter_reduce")
    if nd == 1:  # PyTorch reads a 0-d index or src of a 1-d input as a 1-d one
        index = index.reshape(1) if index.ndim == 0 else index
        src = src.reshape(1) if src.ndim == 0 else src
    if index.ndim != nd or src.ndim != nd or any(
            index.shape[k] > src.shape[k] or (k != d and index.shape[k] > input.shape[k]) for k in range(nd)):
        raise RuntimeError(f"scatter_reduce: index {tuple(index.shape)} must have input's number of dims and "
                           f"fit inside src {tuple(src.shape)} (and input {tuple(input.shape)} outside dim {d})")
    if index.dtype.kind not in "iu":
        raise RuntimeError(f"scatter_reduce: index must be an integer tensor, got {index.dtype}")
    if reduce == "mean" and input.dtype == L.bool:
        raise NotImplementedError("scatter_reduce: reduce='mean' is not implemented for bool tensors")
    s = src[tuple(slice(0, k) for k in index.shape)]
    n = input.shape[d]
    onehot = index[None] == L.arange(n, device=index.device).reshape((n,) + (1,) * nd)  # (n, *index.shape)
    selfv = None
    if include_self and reduce in ("amax", "amin"):
        # input joins the same reduction, so ties between it and src share the gradient evenly
        # (PyTorch: g / N over all N tied values), not half to input and half to src's ties
        cut = input[tuple(slice(0, k) if j != d else slice(None) for j, k in enumerate(index.shape))]
        selfv = L.movedim(cut, d, 0).unsqueeze(d + 1)
    R, C = _reduce_onehot(L, reduce, onehot, s, d, input.dtype, selfv)
    pad = []
    for k in reversed(range(nd)):  # outside the index's extent nothing is scattered
        pad += [0, (input.shape[k] - R.shape[k]) if k != d else 0]
    if any(pad):
        R, C = L.pad(R, tuple(pad)), L.pad(C, tuple(pad))
    has = C > 0
    out = _combine(L, reduce, input, R, C, has, include_self)
    # sums and products of small ints or bools are computed wider: the result has input's
    # dtype, as PyTorch's (int8 wraps, a bool sum is an or, a bool product an and)
    return out if out.dtype == input.dtype else out.to(input.dtype)


def _reduce_onehot(L, reduce, onehot, s, d, dt, selfv=None):
    fill = {"sum": 0, "mean": 0, "prod": 1}.get(reduce)
    if fill is None and dt.kind == "b":
        fill = reduce == "amin"  # the identity of or (amax) and of and (amin)
    elif fill is None and dt.kind == "f":
        fill = float("-inf") if reduce == "amax" else float("inf")
    elif fill is None:  # the dtype's own bounds: -max would wrap to 1 in an unsigned dtype
        fill = int(np.iinfo(dt).min) if reduce == "amax" else int(np.iinfo(dt).max)
    vals = L.where(onehot, s[None], fill)
    axis = d + 1
    if selfv is not None:
        vals = L.cat([selfv, vals], axis)
    red = {"sum": L.sum, "mean": L.sum, "prod": L.prod, "amax": L.amax, "amin": L.amin}[reduce](vals, axis)
    count = onehot.to(L.int64).sum(axis)
    return L.movedim(red, 0, d), L.movedim(count, 0, d)


def _combine(L, reduce, input, R, C, has, include_self):
    if reduce == "sum":
        return L.where(has, R + input if include_self else R, input)
    if reduce == "prod":
        return L.where(has, R * input if include_self else R, input)
    if reduce in ("amax", "amin"):  # include_self: input is already inside R
        return L.where(has, R, input)
    total, cnt = (R + input, C + 1) if include_self else (R, C.clamp(min=1))
    mean = total / cnt.to(input.dtype) if input.dtype.kind in "fc" else L.floor_divide(total, cnt)
    return L.where(has, mean.to(input.dtype), input)


__all__ = ["diagonal_scatter", "index_copy", "index_fill", "index_put", "masked_scatter", "put", "scatter_reduce",
           "select_scatter", "slice_scatter"]


def segment_softmax(values, segment, num_segments, log=False):
    """(log_)softmax of ``values``'s rows within each segment: row ``i`` belongs to segment
    ``segment[i]`` (an int64 tensor of ``values.shape[0]`` entries, each below ``num_segments``).

    The per-segment max (a constant shift, for stability only), exp and sum are a
    ``scatter_reduce`` and an ``index_add`` by segment, so the rows keep their order and layout
    and every rule comes from those ops. Used by sparse (per sparse group) and nested (per
    sequence) softmax.

    Examples
    --------
    >>> import lucid
    >>> from lucid.ops.scatter_extra import segment_softmax
    >>> segment_softmax(lucid.tensor([0.0, 0.0, 5.0]), lucid.tensor([0, 0, 1]), 2).tolist()
    [0.5, 0.5, 1.0]
    """
    L = _lucid()
    shape = (num_segments,) + tuple(values.shape[1:])
    where = segment.reshape((-1,) + (1,) * (values.ndim - 1)).expand(tuple(values.shape))
    with L.no_grad():
        peak = L.zeros(shape, dtype=values.dtype, device=values.device).scatter_reduce(
            0, where, values.detach(), "amax", include_self=False)
        peak = L.where(L.isfinite(peak), peak, L.zeros_like(peak))
    shifted = values - peak.index_select(0, segment)
    e = shifted.exp()
    total = L.zeros(shape, dtype=values.dtype, device=values.device).index_add(0, segment, e)
    return shifted - total.log().index_select(0, segment) if log else e / total.index_select(0, segment)
