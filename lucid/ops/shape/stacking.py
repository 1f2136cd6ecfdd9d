"""NumPy-style joining and splitting, flips and index helpers, composed from the shape primitives.

hstack/vstack/dstack/column_stack/row_stack, hsplit/vsplit/dsplit, atleast_{1,2,3}d,
fliplr/flipud/rot90, ravel, diff, block_diag, cartesian_prod, combinations, tril_indices,
triu_indices. None is a primitive: each is cat/stack/reshape/flip/transpose/pad/indexing, so
gradients, jvp and vmap come from those.
"""
from __future__ import annotations

import itertools

import numpy as np

from ..._core import dtypes
from ..._core.tensor import Tensor, _wrap, tensor_method
from .._family import _as_tensor, normalize_axis
from .joining import cat, stack
from .padding import pad
from .rearrange import flip
from .triangles import meshgrid
from .views import reshape, transpose
from ..numpy_aliases import numpy_axis


def _tensors(tensors, op):
    if len(tensors) == 1 and isinstance(tensors[0], (list, tuple)):
        tensors = tuple(tensors[0])
    if not tensors:
        raise RuntimeError(f"{op}: expected a non-empty list of tensors")
    return [_as_tensor(t) for t in tensors]


# NumPy's rules: where the existing dims go when ``atleast_{nd}d`` adds dims of size 1.
_ATLEAST = {
    1: {0: lambda s: (1,)},
    2: {0: lambda s: (1, 1), 1: lambda s: (1,) + s},
    3: {0: lambda s: (1, 1, 1), 1: lambda s: (1,) + s + (1,), 2: lambda s: s + (1,)},
}


def _atleast(nd, tensors, op):
    if not tensors:
        return ()  # PyTorch's ``atleast_1d()``
    single = len(tensors) == 1 and isinstance(tensors[0], Tensor)
    out = []
    for t in _tensors(tensors, op):
        if t.ndim < nd:
            t = t.reshape(_ATLEAST[nd][t.ndim](tuple(t.shape)))  # the method: quantized tensors have it too
        out.append(t)
    return out[0] if single else tuple(out)


def atleast_1d(*tensors):
    """Each input with at least one dimension (0-d becomes shape (1,)).

    Examples
    --------
    >>> import lucid
    >>> lucid.atleast_1d(lucid.tensor(2.0)).shape
    (1,)
    """
    return _atleast(1, tensors, "atleast_1d")


def atleast_2d(*tensors):
    """Each input with at least two dims (1-d ``(n,)`` becomes ``(1, n)``)."""
    return _atleast(2, tensors, "atleast_2d")


def atleast_3d(*tensors):
    """Each input with at least three dims (``(n,)`` -> ``(1, n, 1)``, ``(m, n)`` -> ``(m, n, 1)``)."""
    return _atleast(3, tensors, "atleast_3d")


def hstack(tensors):
    """Join along dim 1 (dim 0 for 1-d inputs).

    Examples
    --------
    >>> import lucid
    >>> lucid.hstack([lucid.ones(2), lucid.zeros(1)]).tolist()
    [1.0, 1.0, 0.0]
    """
    ts = [_atleast(1, (t,), "hstack") for t in _tensors((tensors,), "hstack")]
    return cat(ts, 0 if ts[0].ndim == 1 else 1)


def vstack(tensors):
    """Join along dim 0 after making every input at least 2-d.

    Examples
    --------
    >>> import lucid
    >>> lucid.vstack([lucid.ones(2), lucid.zeros(2)]).shape
    (2, 2)
    """
    return cat([_atleast(2, (t,), "vstack") for t in _tensors((tensors,), "vstack")], 0)


row_stack = vstack


def dstack(tensors):
    """Join along dim 2 after making every input at least 3-d."""
    return cat([_atleast(3, (t,), "dstack") for t in _tensors((tensors,), "dstack")], 2)


def column_stack(tensors):
    """Join as columns: 0-d and 1-d inputs become ``(n, 1)`` columns, then join along dim 1.

    Examples
    --------
    >>> import lucid
    >>> lucid.column_stack([lucid.tensor([1, 2]), lucid.tensor([3, 4])]).tolist()
    [[1, 3], [2, 4]]
    """
    ts = _tensors((tensors,), "column_stack")
    return cat([t.reshape(t.numel(), 1) if t.ndim <= 1 else t for t in ts], 1)  # quantized ones too


def _split_at(input, sections, dim, op):
    input = _as_tensor(input)
    n = input.shape[dim]
    if isinstance(sections, (str, float)):
        raise TypeError(f"{op}: indices_or_sections must be an int or a sequence of ints, got {sections!r}")
    if isinstance(sections, int):
        if sections <= 0 or n % sections:
            raise RuntimeError(f"{op}: dimension {dim} of size {n} is not divisible by {sections} sections")
        bounds = [i * (n // sections) for i in range(sections + 1)]
    else:
        # negative indices count from the end, as Python slicing (and PyTorch's tensor_split)
        idx = [min(max(int(i) + n if int(i) < 0 else int(i), 0), n) for i in sections]
        bounds = [0] + idx + [n]
    pre = (slice(None),) * dim
    return tuple(input[pre + (slice(a, max(a, b)),)] for a, b in zip(bounds[:-1], bounds[1:]))


@tensor_method("hsplit")
def hsplit(input, indices_or_sections):
    """Split along dim 1 (dim 0 for 1-d) into equal parts or at the given indices (views).

    Examples
    --------
    >>> import lucid
    >>> [t.tolist() for t in lucid.hsplit(lucid.arange(6), [2, 3])]
    [[0, 1], [2], [3, 4, 5]]
    """
    input = _as_tensor(input)
    if input.ndim == 0:
        raise RuntimeError("hsplit: expected a tensor with at least 1 dimension, got a 0-d tensor")
    return _split_at(input, indices_or_sections, 1 if input.ndim > 1 else 0, "hsplit")


def _split_dim(input, indices_or_sections, dim, min_ndim, op):
    input = _as_tensor(input)
    if input.ndim < min_ndim:
        raise RuntimeError(f"{op}: expected a tensor with at least {min_ndim} dimensions, got {input.ndim}")
    return _split_at(input, indices_or_sections, dim, op)


@tensor_method("vsplit")
def vsplit(input, indices_or_sections):
    """Split along dim 0 of a tensor with at least 2 dims (views)."""
    return _split_dim(input, indices_or_sections, 0, 2, "vsplit")


@tensor_method("dsplit")
def dsplit(input, indices_or_sections):
    """Split along dim 2 of a tensor with at least 3 dims (views)."""
    return _split_dim(input, indices_or_sections, 2, 3, "dsplit")


@tensor_method("fliplr")
def fliplr(input):
    """Reverse dim 1 (left/right) of a tensor with at least 2 dims."""
    input = _as_tensor(input)
    if input.ndim < 2:
        raise RuntimeError(f"fliplr: expected a tensor with at least 2 dimensions, got {input.ndim}")
    return flip(input, 1)


@tensor_method("flipud")
def flipud(input):
    """Reverse dim 0 (up/down) of a tensor with at least 1 dim."""
    input = _as_tensor(input)
    if input.ndim < 1:
        raise RuntimeError("flipud: expected a tensor with at least 1 dimension, got a 0-d tensor")
    return flip(input, 0)


@tensor_method("rot90")
def rot90(input, k=1, dims=(0, 1)):
    """Rotate by 90 degrees ``k`` times in the plane of ``dims`` (from the first towards the second).

    Examples
    --------
    >>> import lucid
    >>> lucid.rot90(lucid.tensor([[1, 2], [3, 4]])).tolist()
    [[2, 4], [1, 3]]
    """
    input = _as_tensor(input)
    if len(dims) != 2:
        raise RuntimeError(f"rot90: expected exactly two dims, got {dims}")
    if input.ndim < 2:
        raise RuntimeError(f"rot90: expected total dims >= 2, but got total dims = {input.ndim}")
    a, b = (normalize_axis(d, input.ndim, "rot90") for d in dims)
    if a == b:
        raise RuntimeError(f"rot90: the two dims must differ, got {dims}")
    k %= 4
    if k == 0:
        return input.clone()
    if k == 2:
        return flip(input, (a, b))
    out = flip(input, b if k == 1 else a)
    return transpose(out, a, b)


@tensor_method("ravel")
def ravel(input):
    """The elements as a 1-d tensor (a view when the layout allows, as ``reshape``)."""
    return reshape(_as_tensor(input), (-1,))


@tensor_method("diff")
def diff(input, n=1, dim=-1, prepend=None, append=None, *, axis=None):
    """``n``-th forward difference along ``dim`` (``prepend``/``append`` joined first).

    Bool inputs give ``a[i+1] != a[i]``, as in PyTorch.

    Examples
    --------
    >>> import lucid
    >>> lucid.diff(lucid.tensor([1, 4, 9, 16])).tolist()
    [3, 5, 7]
    >>> lucid.diff(lucid.tensor([1.0, 4.0, 9.0]), n=2).tolist()
    [2.0]
    """
    if axis is not None:  # See NOTE [NumPy keyword aliases]
        dim = numpy_axis("diff", dim, axis, -1)
    input = _as_tensor(input)
    if int(n) < 0:
        raise RuntimeError(f"diff: order must be non-negative but got {n}")
    if input.ndim == 0:
        raise RuntimeError("diff: expected a tensor with at least 1 dimension, got a 0-d tensor")
    d = normalize_axis(dim, input.ndim, "diff")
    if int(n) == 0:  # a copy of the input, prepend and append ignored, as PyTorch's
        from ..elementwise import clone

        return clone(input)
    parts = [_as_tensor(p) for p in (prepend,) if p is not None] + [input] + \
        [_as_tensor(p) for p in (append,) if p is not None]
    x = cat(parts, d) if len(parts) > 1 else input
    pre = (slice(None),) * d
    for _ in range(int(n)):
        if x.shape[d] == 0:
            break
        hi, lo = x[pre + (slice(1, None),)], x[pre + (slice(None, -1),)]
        x = (hi != lo) if x.dtype == dtypes.bool_ else hi - lo
    if x is input:  # n=0: a copy, as PyTorch's diff, never the input itself
        from ..elementwise import clone

        return clone(input)
    return x


def block_diag(*tensors):
    """A block-diagonal matrix of the inputs (0-d and 1-d inputs count as one row).

    Examples
    --------
    >>> import lucid
    >>> lucid.block_diag(lucid.ones(1, 2), lucid.tensor([[3.0]])).tolist()
    [[1.0, 1.0, 0.0], [0.0, 0.0, 3.0]]
    """
    if not tensors:
        from ..creation import _finish

        return _finish(np.zeros((1, 0), dtypes.get_default_dtype().dtype), False, None, "block_diag")
    ts = []
    for t in (_as_tensor(t) for t in tensors):
        if t.ndim > 2:
            raise RuntimeError(f"block_diag: expected 0-, 1- or 2-d inputs, got one of shape {tuple(t.shape)}")
        ts.append(reshape(t, (1, -1) if t.ndim < 2 else tuple(t.shape)) if t.ndim < 2 else t)
    dt = dtypes.as_lucid(dtypes.result_type(*ts))
    total = sum(t.shape[1] for t in ts)
    rows, left = [], 0
    for t in ts:
        w = t.shape[1]
        rows.append(pad(t.to(dt), (left, total - left - w)))
        left += w
    return cat(rows, 0)


def cartesian_prod(*tensors):
    """Every combination of one element from each 1-d input, as rows (itertools.product).

    Examples
    --------
    >>> import lucid
    >>> lucid.cartesian_prod(lucid.tensor([1, 2]), lucid.tensor([3, 4])).tolist()
    [[1, 3], [1, 4], [2, 3], [2, 4]]
    """
    ts = [_as_tensor(t) for t in tensors]
    if any(t.ndim != 1 for t in ts):
        raise RuntimeError("cartesian_prod: expected 1-d tensors, got shapes "
                           f"{[tuple(t.shape) for t in ts]}")
    if len(ts) == 1:
        return ts[0]
    grids = meshgrid(*ts, indexing="ij")
    return stack([reshape(g, (-1,)) for g in grids], 1)


def combinations(input, r=2, with_replacement=False):
    """Rows of ``r`` elements of a 1-d ``input`` in every combination (itertools order).

    Examples
    --------
    >>> import lucid
    >>> lucid.combinations(lucid.tensor([1, 2, 3])).tolist()
    [[1, 2], [1, 3], [2, 3]]
    """
    input = _as_tensor(input)
    if input.ndim != 1:
        raise RuntimeError(f"combinations: expected a 1-d tensor, got shape {tuple(input.shape)}")
    if r < 0:
        raise RuntimeError(f"combinations: r must be non-negative, got {r}")
    if r == 0:  # PyTorch's: an empty 1-d tensor (itertools' one empty tuple has no elements)
        return input[:0].clone()
    pick = itertools.combinations_with_replacement if with_replacement else itertools.combinations
    idx = np.array(list(pick(range(input.shape[0]), r)), dtype=np.int64).reshape(-1, r)
    if idx.shape[0] == 0:  # no combinations: an empty (0, r) result, as PyTorch
        return input[_wrap(np.zeros((0, r), np.int64))]
    return input[_wrap(idx)]


def _tri_indices(op, fn, row, col, offset, dtype, device):
    if row < 0 or col < 0:
        raise RuntimeError(f"{op}: row and col must be non-negative, got {row}, {col}")
    dt = dtypes.to_dtype(dtype) if dtype is not None else np.dtype(np.int64)
    r, c = fn(row, offset, col)
    from ..creation import _finish

    return _finish(np.stack([r, c]).astype(dt).reshape(2, -1), False, device, op)


def tril_indices(row, col, offset=0, *, dtype=None, device=None):
    """Row and column indices (a 2 x N tensor) of the lower triangle of a ``row x col`` matrix.

    Examples
    --------
    >>> import lucid
    >>> lucid.tril_indices(2, 2).tolist()
    [[0, 1, 1], [0, 0, 1]]
    """
    from ..creation import device_arg

    device_arg(device, "tril_indices")
    return _tri_indices("tril_indices", np.tril_indices, row, col, offset, dtype, device)


def triu_indices(row, col, offset=0, *, dtype=None, device=None):
    """Row and column indices (a 2 x N tensor) of the upper triangle of a ``row x col`` matrix."""
    from ..creation import device_arg

    device_arg(device, "triu_indices")
    return _tri_indices("triu_indices", np.triu_indices, row, col, offset, dtype, device)


__all__ = ["atleast_1d", "atleast_2d", "atleast_3d", "block_diag", "cartesian_prod", "column_stack",
           "combinations", "diff", "dsplit", "dstack", "fliplr", "flipud", "hsplit", "hstack", "ravel",
           "rot90", "row_stack", "tril_indices", "triu_indices", "vsplit", "vstack"]
