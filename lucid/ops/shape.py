"""Shape primitives (reshape, transpose, broadcast, concatenate, detach, flip, roll, pad)
and the shape ops composed from them and from indexing (split, repeat, tril, diagonal ...).

Views (reshape, transpose, broadcast_to, basic indexing) alias their input's memory
and share its version counter, as in PyTorch.
"""
from __future__ import annotations

import contextlib
import math

import numpy as np

from .._core import dtypes
from .._core.backend import xp
from .._core.primitive import TN, bind, defprim
from .._core.tensor import Tensor, _wrap, tensor_method
from ._family import (_as_tensor, batch_unary_axis, linear_jvp, move_bdim, normalize_axis,
                      sum_to_shape)

# ----------------------------------------------------------------- error names


@contextlib.contextmanager
def errors_as(op):
    """Report errors of the op a public function is built on under that function's name
    (``view`` on ``reshape``, ``expand`` on ``broadcast_to`` ...): ``"reshape: ..."`` -> ``"view: ..."``."""
    try:
        yield
    except (RuntimeError, ValueError, IndexError) as e:
        head, sep, rest = str(e).partition(": ")
        if not sep or not head.isidentifier() or head == op:
            raise
        raise type(e)(f"{op}: {rest}") from None


# --------------------------------------------------------------------- detach


def _detach_batch(vals, bdims):
    return bind(detach_p, (vals[0],), {}), bdims[0]


detach_p = defprim("detach", lambda x: x.view(), vjp=None,
                   jvp=lambda ns, primals, tangents, out: None, differentiable=False,
                   is_view=True, save_inputs=False)
detach_p.batch = _detach_batch

# --------------------------------------------------------------------- reshape


def _reshape_batch(vals, bdims, shape):
    v = move_bdim(vals[0], bdims[0], 0)
    return bind(reshape_p, (v,), {"shape": (v.shape[0],) + tuple(shape)}), 0


reshape_p = defprim(
    "reshape",
    lambda x, shape: x.reshape(shape),
    vjp=(lambda ns, g, out, x, shape: ns.reshape(g, shape=tuple(x.shape)),),
    save_inputs=False,
    is_view=True,
)
reshape_p.jvp = linear_jvp(reshape_p)
reshape_p.batch = _reshape_batch


def _infer_shape(shape, numel, op):
    shape = tuple(int(s) for s in shape)
    neg = [i for i, s in enumerate(shape) if s == -1]
    if len(neg) > 1:
        raise RuntimeError(f"{op}: only one dimension can be inferred, got shape {shape}")
    if neg:
        rest = math.prod(s for s in shape if s != -1)
        if rest == 0 or numel % rest:
            raise RuntimeError(f"{op}: shape {shape} is invalid for input of size {numel}")
        shape = tuple(numel // rest if s == -1 else s for s in shape)
    if math.prod(shape) != numel:
        raise RuntimeError(f"{op}: shape {shape} is invalid for input of size {numel}")
    return shape


def _shape_args(shape):
    if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
        return tuple(shape[0])
    return tuple(shape)


@tensor_method("reshape")
def reshape(input, *shape):
    """A tensor with the same data and a new shape (a view when possible).

    Parameters
    ----------
    input : Tensor
        The tensor.
    *shape : int or tuple of int
        The new shape; one entry may be -1.

    Examples
    --------
    >>> import lucid
    >>> lucid.arange(6).reshape(2, 3).shape
    (2, 3)
    """
    input = _as_tensor(input)
    shape = _infer_shape(_shape_args(shape), input.numel(), "reshape")
    if shape == tuple(input.shape):
        return input
    return bind(reshape_p, (input,), {"shape": shape})


@tensor_method("view")
def view(input, *shape):
    """Like :func:`reshape` (lucid arrays are always viewable or copied transparently).

    Parameters
    ----------
    input : Tensor
        The tensor.
    *shape : int or tuple of int
        The new shape (one entry may be -1); or a dtype.

    Examples
    --------
    >>> import lucid
    >>> lucid.arange(6).view(2, -1).shape
    (2, 3)
    """
    if len(shape) == 1 and not isinstance(shape[0], (tuple, list, int)):
        return input.to(shape[0])
    with errors_as("view"):
        return reshape(input, *shape)


# ------------------------------------------------------------------ transpose


def _inverse_perm(axes):
    inv = [0] * len(axes)
    for i, a in enumerate(axes):
        inv[a] = i
    return tuple(inv)


def _transpose_batch(vals, bdims, axes):
    v = move_bdim(vals[0], bdims[0], 0)
    return bind(transpose_p, (v,), {"axes": (0,) + tuple(a + 1 for a in axes)}), 0


transpose_p = defprim(
    "transpose",
    lambda x, axes: x.transpose(axes),
    vjp=(lambda ns, g, out, x, axes: ns.transpose(g, axes=_inverse_perm(axes)),),
    save_inputs=False,
    is_view=True,
)
transpose_p.jvp = linear_jvp(transpose_p)
transpose_p.batch = _transpose_batch


@tensor_method("permute")
def permute(input, *dims):
    """Reorder dimensions: ``out.shape[i] == input.shape[dims[i]]``.

    Parameters
    ----------
    input : Tensor
        The tensor.
    *dims : int
        The new order of the dims.

    Examples
    --------
    >>> import lucid
    >>> lucid.zeros(2, 3, 4).permute(2, 0, 1).shape
    (4, 2, 3)
    """
    input = _as_tensor(input)
    nd = input.ndim
    dims = tuple(normalize_axis(d, nd, "permute") for d in _shape_args(dims))
    if sorted(dims) != list(range(nd)):
        raise RuntimeError(f"permute: dims {dims} are not a permutation of {nd} dims")
    if dims == tuple(range(nd)):
        return input
    return bind(transpose_p, (input,), {"axes": dims})


@tensor_method("transpose", "swapaxes", "swapdims")
def transpose(input, dim0, dim1):
    """Swap two dimensions.

    Parameters
    ----------
    input : Tensor
        The tensor.
    dim0, dim1 : int
        The dims to swap.

    Examples
    --------
    >>> import lucid
    >>> lucid.zeros(2, 3, 4).transpose(0, 2).shape
    (4, 3, 2)
    """
    input = _as_tensor(input)
    nd = input.ndim
    if nd == 0:
        return input
    perm = list(range(nd))
    a, b = normalize_axis(dim0, nd, "transpose"), normalize_axis(dim1, nd, "transpose")
    perm[a], perm[b] = perm[b], perm[a]
    return permute(input, tuple(perm))


swapaxes = swapdims = transpose


@tensor_method("t")
def t(input):
    """Transpose of a tensor with at most 2 dims.

    Parameters
    ----------
    input : Tensor
        At most 2-D.

    Examples
    --------
    >>> import lucid
    >>> lucid.zeros(2, 3).t().shape
    (3, 2)
    """
    if input.ndim > 2:
        raise RuntimeError(f"t: expects a tensor with <= 2 dimensions, but got {input.ndim}")
    return input if input.ndim < 2 else transpose(input, 0, 1)


Tensor.T = property(lambda self: permute(self, tuple(range(self.ndim))[::-1]))
Tensor.mT = property(lambda self: transpose(self, -2, -1))


@tensor_method("moveaxis", "movedim")
def moveaxis(input, source, destination):
    """Move dimension(s) ``source`` to position(s) ``destination``.

    Parameters
    ----------
    input : Tensor
        The tensor.
    source, destination : int or tuple of int
        Where the dims are and where they go.

    Examples
    --------
    >>> import lucid
    >>> lucid.moveaxis(lucid.zeros(2, 3, 4), 0, -1).shape
    (3, 4, 2)
    """
    input = _as_tensor(input)
    nd = input.ndim
    src = [source] if isinstance(source, int) else list(source)
    dst = [destination] if isinstance(destination, int) else list(destination)
    src = [normalize_axis(s, nd, "moveaxis") for s in src]
    dst = [normalize_axis(d, nd, "moveaxis") for d in dst]
    order = [i for i in range(nd) if i not in src]
    for d, s in sorted(zip(dst, src)):
        order.insert(d, s)
    return permute(input, tuple(order))


movedim = moveaxis

# ---------------------------------------------------------------- broadcast_to


def _broadcast_batch(vals, bdims, shape):
    v = move_bdim(vals[0], bdims[0], 0)
    extra = len(shape) - (v.ndim - 1)
    if extra:
        v = bind(reshape_p, (v,), {"shape": (v.shape[0],) + (1,) * extra + tuple(v.shape[1:])})
    return bind(broadcast_to_p, (v,), {"shape": (v.shape[0],) + tuple(shape)}), 0


broadcast_to_p = defprim(
    "broadcast_to",
    lambda x, shape: xp.broadcast_to(x, shape),
    vjp=(lambda ns, g, out, x, shape: sum_to_shape(ns, g, tuple(x.shape)),),
    save_inputs=False,
    is_view=True,
)
broadcast_to_p.jvp = linear_jvp(broadcast_to_p)
broadcast_to_p.batch = _broadcast_batch


@tensor_method("broadcast_to")
def broadcast_to(input, shape):
    """View of ``input`` broadcast to ``shape``.

    Parameters
    ----------
    input : Tensor
        The tensor.
    shape : tuple of int
        The target shape.

    Examples
    --------
    >>> import lucid
    >>> lucid.broadcast_to(lucid.tensor([1, 2]), (2, 2)).tolist()
    [[1, 2], [1, 2]]
    """
    input = _as_tensor(input)
    shape = tuple(shape)
    if shape == tuple(input.shape):
        return input
    try:
        ok = np.broadcast_shapes(tuple(input.shape), shape) == shape
    except ValueError:
        ok = False
    if not ok:
        raise RuntimeError(f"broadcast_to: the shape {tuple(input.shape)} can't be broadcast to {shape}")
    return bind(broadcast_to_p, (input,), {"shape": shape})


@tensor_method("expand")
def expand(input, *sizes):
    """Broadcast to ``sizes``; ``-1`` keeps a dimension.

    Parameters
    ----------
    input : Tensor
        The tensor.
    *sizes : int
        The target shape; -1 keeps a dim.

    Examples
    --------
    >>> import lucid
    >>> lucid.tensor([[1], [2]]).expand(-1, 3).tolist()
    [[1, 1, 1], [2, 2, 2]]
    """
    sizes = _shape_args(sizes)
    lead = len(sizes) - input.ndim
    if lead < 0:
        raise RuntimeError(f"expand: the number of sizes provided ({len(sizes)}) must be greater or equal "
                           f"to the number of dimensions in the tensor ({input.ndim})")
    if any(s == -1 for s in sizes[:lead]):
        raise RuntimeError(f"expand: -1 is not allowed in a leading, non-existing dimension (sizes {tuple(sizes)})")
    shape = tuple(input.shape[i - lead] if s == -1 else s for i, s in enumerate(sizes))
    with errors_as("expand"):
        return broadcast_to(input, shape)


@tensor_method("expand_as")
def expand_as(input, other):
    """``input`` expanded to the shape of ``other`` (a view).

    Parameters
    ----------
    input : Tensor
        The tensor to expand.
    other : Tensor
        Only its shape is used.

    Examples
    --------
    >>> import lucid
    >>> lucid.tensor([1.0, 2.0]).expand_as(lucid.zeros(2, 2)).tolist()
    [[1.0, 2.0], [1.0, 2.0]]
    """
    with errors_as("expand_as"):
        return broadcast_to(input, other.shape)


# ----------------------------------------------------------- squeeze/unsqueeze


@tensor_method("unsqueeze")
def unsqueeze(input, dim):
    """Insert a size-1 dimension at ``dim``.

    Parameters
    ----------
    input : Tensor
        The tensor.
    dim : int
        Where the new size-1 dim goes.

    Examples
    --------
    >>> import lucid
    >>> lucid.zeros(3).unsqueeze(0).shape
    (1, 3)
    """
    input = _as_tensor(input)
    nd = input.ndim + 1
    dim = normalize_axis(dim, nd, "unsqueeze")
    shape = list(input.shape)
    shape.insert(dim, 1)
    return bind(reshape_p, (input,), {"shape": tuple(shape)})


@tensor_method("squeeze")
def squeeze(input, dim=None):
    """Remove size-1 dimensions (all, or those in ``dim``).

    Parameters
    ----------
    input : Tensor
        The tensor.
    dim : int or tuple of int, optional
        Only these size-1 dims (default: all).

    Examples
    --------
    >>> import lucid
    >>> lucid.zeros(1, 3, 1).squeeze().shape
    (3,)
    """
    input = _as_tensor(input)
    shape = input.shape
    if dim is None:
        dims = [i for i, s in enumerate(shape) if s == 1]
    else:
        dims = [dim] if isinstance(dim, int) else list(dim)
        dims = [normalize_axis(d, input.ndim, "squeeze") for d in dims] if input.ndim else []
        dims = [d for d in dims if shape[d] == 1]
    if not dims:
        return input
    return bind(reshape_p, (input,), {"shape": tuple(s for i, s in enumerate(shape) if i not in dims)})


@tensor_method("flatten")
def flatten(input, start_dim=0, end_dim=-1):
    """Merge dimensions ``start_dim..end_dim`` into one.

    Parameters
    ----------
    input : Tensor
        The tensor.
    start_dim, end_dim : int
        The range of dims merged into one.

    Examples
    --------
    >>> import lucid
    >>> lucid.zeros(2, 3, 4).flatten(1).shape
    (2, 12)
    """
    input = _as_tensor(input)
    nd = input.ndim
    if nd == 0:
        return reshape(input, 1)
    s, e = normalize_axis(start_dim, nd, "flatten"), normalize_axis(end_dim, nd, "flatten")
    shape = input.shape
    return reshape(input, shape[:s] + (math.prod(shape[s:e + 1]),) + shape[e + 1:])


@tensor_method("unflatten")
def unflatten(input, dim, sizes):
    """Split dimension ``dim`` into ``sizes``.

    Parameters
    ----------
    input : Tensor
        The tensor.
    dim : int
        The dim to split.
    sizes : tuple of int
        Its new shape.

    Examples
    --------
    >>> import lucid
    >>> lucid.zeros(2, 6).unflatten(1, (2, 3)).shape
    (2, 2, 3)
    """
    nd = input.ndim
    d = normalize_axis(dim, nd, "unflatten")
    shape = input.shape
    sizes = tuple(sizes)
    if -1 in sizes:
        sizes = _infer_shape(sizes, shape[d], "unflatten")
    return reshape(input, shape[:d] + sizes + shape[d + 1:])


@tensor_method("contiguous")
def contiguous(input, memory_format=None):
    """This tensor (lucid does not expose strides).

    Parameters
    ----------
    input : Tensor
        The tensor.
    memory_format : optional
        Ignored.

    Examples
    --------
    >>> import lucid
    >>> x = lucid.zeros(2, 3).t()
    >>> x.contiguous().shape
    (3, 2)
    """
    return input


# ----------------------------------------------------------------- concatenate


def _concat_vjp(i, ns, g, out, *xs, axis):
    start = sum(x.shape[axis] for x in xs[:i])
    idx = (slice(None),) * axis + (slice(start, start + xs[i].shape[axis]),)
    return ns.getitem(g, key=idx)


def _concat_jvp(ns, primals, tangents, out, axis):
    ts = [t if t is not None else ns.zeros_like(p) for p, t in zip(primals, tangents)]
    return bind(concat_p, tuple(ts), {"axis": axis})


def _concat_batch(vals, bdims, axis):
    size = next(v.shape[b] for v, b in zip(vals, bdims) if b is not None)
    moved = []
    for v, b in zip(vals, bdims):
        if b is None:
            v = bind(broadcast_to_p, (TN.reshape(v, shape=(1,) + tuple(v.shape)),),
                     {"shape": (size,) + tuple(v.shape)})
        else:
            v = move_bdim(v, b, 0)
        moved.append(v)
    return bind(concat_p, tuple(moved), {"axis": axis + 1}), 0


concat_p = defprim("concat", lambda *xs, axis: xp.concatenate(xs, axis=axis), vjp=_concat_vjp,
                   jvp=_concat_jvp, save_inputs=False)
concat_p.batch = _concat_batch


def cat(tensors, dim=0):
    """Concatenate tensors along an existing dimension.

    Parameters
    ----------
    tensors : sequence of Tensor
        Same shape except in ``dim``.
    dim : int
        The dim to join along.

    Examples
    --------
    >>> import lucid
    >>> lucid.cat([lucid.zeros(2), lucid.ones(1)]).tolist()
    [0.0, 0.0, 1.0]
    """
    tensors = [_as_tensor(t) for t in tensors]
    if not tensors:
        raise RuntimeError("cat: expected a non-empty list of Tensors")
    # PyTorch skips legacy empty 1-D tensors in cat.
    tensors = [t for t in tensors if not (t.ndim == 1 and t.shape[0] == 0)] or tensors[:1]
    nd = tensors[0].ndim
    if nd == 0:
        raise RuntimeError("cat: zero-dimensional tensor cannot be concatenated")
    axis = normalize_axis(dim, nd, "cat")
    for t in tensors:
        if t.ndim != nd or any(a != b for i, (a, b) in enumerate(zip(t.shape, tensors[0].shape)) if i != axis):
            raise RuntimeError(
                f"cat: sizes of tensors must match except in dimension {axis}; got shapes "
                f"{[tuple(x.shape) for x in tensors]}"
            )
    dt = dtypes.result_type(*tensors)
    tensors = [t if t.dtype == dt else t.to(dt) for t in tensors]
    if len(tensors) == 1:
        return tensors[0]
    return bind(concat_p, tuple(tensors), {"axis": axis})


concatenate = concat = cat


def stack(tensors, dim=0):
    """Stack tensors of equal shape along a new dimension.

    Parameters
    ----------
    tensors : sequence of Tensor
        Of the same shape.
    dim : int
        Where the new dim goes.

    Examples
    --------
    >>> import lucid
    >>> lucid.stack([lucid.zeros(3), lucid.ones(3)], dim=1).shape
    (3, 2)
    """
    tensors = [_as_tensor(t) for t in tensors]
    if not tensors:
        raise RuntimeError("stack: expected a non-empty list of Tensors")
    shape = tensors[0].shape
    for t in tensors:
        if t.shape != shape:
            raise RuntimeError(f"stack: expects each tensor to be equal size, got {[tuple(x.shape) for x in tensors]}")
    dim = normalize_axis(dim, len(shape) + 1, "stack")
    return cat([unsqueeze(t, dim) for t in tensors], dim) if len(tensors) > 1 else unsqueeze(tensors[0], dim)


# ------------------------------------------------------ views built on indexing


def _clone(x):
    from .elementwise import clone

    return clone(x)


def _getitem(input, key):
    from .indexing import getitem

    return getitem(input, key)


@tensor_method("narrow")
def narrow(input, dim, start, length):
    """View of ``input`` restricted to ``start:start+length`` along ``dim``.

    Parameters
    ----------
    input : Tensor
        The tensor.
    dim : int
        The dim to slice.
    start : int
        First position.
    length : int
        Number of positions.

    Examples
    --------
    >>> import lucid
    >>> lucid.arange(5).narrow(0, 1, 2).tolist()
    [1, 2]
    """
    input = _as_tensor(input)
    if input.ndim == 0:
        raise RuntimeError("narrow: cannot be applied to a 0-dim tensor")
    d = normalize_axis(dim, input.ndim, "narrow")
    n = input.shape[d]
    start = int(start)
    if not -n <= start <= n:
        raise IndexError(f"narrow: start {start} is out of range for dimension {d} of size {n}")
    start = start % n if start < 0 else start
    if length < 0 or start + length > n:
        raise RuntimeError(f"narrow: start ({start}) + length ({length}) exceeds dimension size ({n})")
    return _getitem(input, (slice(None),) * d + (slice(start, start + length),))


@tensor_method("select")
def select(input, dim, index):
    """View of ``input`` at position ``index`` of ``dim`` (that dim removed).

    Parameters
    ----------
    input : Tensor
        The tensor.
    dim : int
        The dim to index.
    index : int
        The position.

    Examples
    --------
    >>> import lucid
    >>> lucid.arange(6).reshape(2, 3).select(1, 2).tolist()
    [2, 5]
    """
    input = _as_tensor(input)
    if input.ndim == 0:
        raise IndexError("select: cannot be applied to a 0-dim tensor")
    d = normalize_axis(dim, input.ndim, "select")
    n = input.shape[d]
    if not -n <= index < n:
        raise IndexError(f"select: index {index} out of range for tensor of size {list(input.shape)} at dimension {d}")
    return _getitem(input, (slice(None),) * d + (int(index),))


@tensor_method("split")
def split(tensor, split_size_or_sections, dim=0):
    """Split into chunks of ``split_size`` (the last may be smaller) or of the given sizes.

    Parameters
    ----------
    tensor : Tensor
        The tensor.
    split_size_or_sections : int or list of int
        Size of each piece, or the list of sizes.
    dim : int
        The dim to split.

    Examples
    --------
    >>> import lucid
    >>> [t.tolist() for t in lucid.arange(5).split(2)]
    [[0, 1], [2, 3], [4]]
    >>> [t.tolist() for t in lucid.arange(5).split([1, 4])]
    [[0], [1, 2, 3, 4]]
    """
    tensor = _as_tensor(tensor)
    if tensor.ndim == 0:
        raise RuntimeError("split: expected a tensor with at least 1 dimension")
    d = normalize_axis(dim, tensor.ndim, "split")
    n = tensor.shape[d]
    if isinstance(split_size_or_sections, int):
        size = split_size_or_sections
        if size < 0 or (size == 0 and n):
            raise RuntimeError(f"split: split_size can only be 0 if dimension size is 0, but got {size} for size {n}")
        sizes = [size] * (n // size) + ([n % size] if n % size else []) if size else [0]
        sizes = sizes or [0]
    else:
        sizes = [int(s) for s in split_size_or_sections]
        if sum(sizes) != n or any(s < 0 for s in sizes):
            raise RuntimeError(f"split_with_sizes: expects split_sizes to sum exactly to {n} (input tensor's "
                               f"size at dimension {d}), but got split_sizes={sizes}")
    out, start = [], 0
    for s in sizes:
        out.append(_getitem(tensor, (slice(None),) * d + (slice(start, start + s),)))
        start += s
    return tuple(out)


@tensor_method("chunk")
def chunk(input, chunks, dim=0):
    """Split into at most ``chunks`` pieces of equal size (the last may be smaller).

    Parameters
    ----------
    input : Tensor
        The tensor.
    chunks : int
        Number of pieces (the last may be smaller).
    dim : int
        The dim to split.

    Examples
    --------
    >>> import lucid
    >>> [c.tolist() for c in lucid.arange(5).chunk(2)]
    [[0, 1, 2], [3, 4]]
    """
    if chunks <= 0:
        raise RuntimeError(f"chunk: number of chunks must be greater than 0, got {chunks}")
    input = _as_tensor(input)
    if input.ndim == 0:
        raise RuntimeError("chunk: expected a tensor with at least 1 dimension")
    n = input.shape[normalize_axis(dim, input.ndim, "chunk")]
    size = -(-n // chunks)
    return split(input, [0] * chunks if n == 0 else size, dim)


@tensor_method("unbind")
def unbind(input, dim=0):
    """Tuple of all slices along ``dim`` (that dim removed).

    Parameters
    ----------
    input : Tensor
        The tensor.
    dim : int
        The dim to remove.

    Examples
    --------
    >>> import lucid
    >>> [t.tolist() for t in lucid.tensor([[1, 2], [3, 4]]).unbind(1)]
    [[1, 3], [2, 4]]
    """
    input = _as_tensor(input)
    if input.ndim == 0:
        raise RuntimeError("unbind: dimension specified as 0 but tensor has no dimensions")
    d = normalize_axis(dim, input.ndim, "unbind")
    return tuple(_getitem(input, (slice(None),) * d + (i,)) for i in range(input.shape[d]))


@tensor_method("view_as")
def view_as(input, other):
    """``input.view(other.shape)``.

    Parameters
    ----------
    input : Tensor
        The tensor.
    other : Tensor
        Gives the shape.

    Examples
    --------
    >>> import lucid
    >>> lucid.arange(6).view_as(lucid.zeros(3, 2)).shape
    (3, 2)
    """
    return reshape(input, tuple(other.shape))


@tensor_method("reshape_as")
def reshape_as(input, other):
    """``input.reshape(other.shape)``.

    Parameters
    ----------
    input : Tensor
        The tensor.
    other : Tensor
        Gives the shape.

    Examples
    --------
    >>> import lucid
    >>> lucid.arange(6).reshape_as(lucid.zeros(2, 3)).shape
    (2, 3)
    """
    return reshape(input, tuple(other.shape))


# --------------------------------------------------------------- flip / roll


def _dims_tuple(dims, nd, op):
    dims = (dims,) if isinstance(dims, int) else tuple(dims)
    axes = tuple(normalize_axis(d, nd, op) for d in dims)
    if len(set(axes)) != len(axes):
        raise RuntimeError(f"{op}: dims {dims} has a dim that appears multiple times")
    return axes


flip_p = defprim(
    "flip", lambda x, axis: xp.flip(x, axis).copy(),  # a copy, as in PyTorch
    vjp=(lambda ns, g, out, x, axis: ns.flip(g, axis=axis),),
    save_inputs=False,
)
flip_p.jvp = linear_jvp(flip_p)
flip_p.batch = batch_unary_axis(flip_p)


@tensor_method("flip")
def flip(input, dims):
    """Reverse the order of elements along ``dims`` (a copy).

    Parameters
    ----------
    input : Tensor
        The tensor.
    dims : int or tuple of int
        The dims to reverse.

    Examples
    --------
    >>> import lucid
    >>> lucid.tensor([[1, 2], [3, 4]]).flip(1).tolist()
    [[2, 1], [4, 3]]
    """
    input = _as_tensor(input)
    axes = _dims_tuple(dims, input.ndim, "flip")
    if input.ndim == 0 or not axes:
        return bind(flip_p, (input,), {"axis": ()})
    return bind(flip_p, (input,), {"axis": axes})


roll_p = defprim(
    "roll", lambda x, shift, axis: xp.roll(x, shift, axis),
    vjp=(lambda ns, g, out, x, shift, axis: ns.roll(g, shift=tuple(-s for s in shift), axis=axis),),
    save_inputs=False,
)
roll_p.jvp = linear_jvp(roll_p)
roll_p.batch = batch_unary_axis(roll_p)


@tensor_method("roll")
def roll(input, shifts, dims=None):
    """Shift elements cyclically by ``shifts`` along ``dims`` (flattened when ``dims`` is None).

    Parameters
    ----------
    input : Tensor
        The tensor.
    shifts : int or tuple of int
        Shift per dim.
    dims : int or tuple of int, optional
        The dims (default: the flattened input).

    Examples
    --------
    >>> import lucid
    >>> lucid.arange(4).roll(1).tolist()
    [3, 0, 1, 2]
    """
    input = _as_tensor(input)
    shifts = (shifts,) if isinstance(shifts, int) else tuple(int(s) for s in shifts)
    if dims is None:
        if len(shifts) != 1:
            raise RuntimeError(f"roll: with dims=None, shifts must have one element, got {shifts}")
        return reshape(roll(flatten(input), shifts, 0), tuple(input.shape))
    dims = (dims,) if isinstance(dims, int) else tuple(dims)
    if len(dims) != len(shifts):
        raise RuntimeError(f"roll: shifts and dimensions must align. shifts: {len(shifts)}, dims: {len(dims)}")
    axes = tuple(normalize_axis(d, input.ndim, "roll") for d in dims)
    return bind(roll_p, (input,), {"shift": shifts, "axis": axes})


# -------------------------------------------------------- repeat / tile / interleave


@tensor_method("repeat")
def repeat(input, *sizes):
    """Tile ``input`` ``sizes[i]`` times along each dim (``len(sizes) >= ndim``; a copy).

    Parameters
    ----------
    input : Tensor
        The tensor.
    *sizes : int
        Repetitions per dim (at least ``input.ndim`` of them).

    Examples
    --------
    >>> import lucid
    >>> lucid.tensor([1, 2]).repeat(2, 2).tolist()
    [[1, 2, 1, 2], [1, 2, 1, 2]]
    """
    input = _as_tensor(input)
    sizes = tuple(int(s) for s in _shape_args(sizes))
    if len(sizes) < input.ndim:
        raise RuntimeError(f"repeat: number of dimensions of repeat dims ({len(sizes)}) can not be smaller "
                           f"than number of dimensions of tensor ({input.ndim})")
    if any(s < 0 for s in sizes):
        raise RuntimeError(f"repeat: repeats must be non-negative, got {sizes}")
    shape = (1,) * (len(sizes) - input.ndim) + tuple(input.shape)
    inter = tuple(v for s in shape for v in (1, s))
    big = tuple(v for r, s in zip(sizes, shape) for v in (r, s))
    out = broadcast_to(reshape(input, inter), big)
    out = reshape(out, tuple(r * s for r, s in zip(sizes, shape)))
    return _clone(out) if all(r == 1 for r in sizes) else out


@tensor_method("tile")
def tile(input, dims):
    """Like :func:`repeat`, with ``dims`` padded with leading 1s to ``input.ndim``.

    Parameters
    ----------
    input : Tensor
        The tensor.
    dims : tuple of int
        Repetitions per dim.

    Examples
    --------
    >>> import lucid
    >>> lucid.tensor([1, 2]).tile((2,)).tolist()
    [1, 2, 1, 2]
    """
    input = _as_tensor(input)
    dims = (dims,) if isinstance(dims, int) else tuple(dims)
    return repeat(input, (1,) * (input.ndim - len(dims)) + dims)


def _interleave_int(input, r, d):
    shape = tuple(input.shape)
    out = reshape(input, shape[:d + 1] + (1,) + shape[d + 1:])
    out = broadcast_to(out, shape[:d + 1] + (r,) + shape[d + 1:])
    return reshape(out, shape[:d] + (shape[d] * r,) + shape[d + 1:])


@tensor_method("repeat_interleave")
def repeat_interleave(input, repeats=None, dim=None, *, output_size=None):
    """Repeat each element (or slice along ``dim``) ``repeats`` times; flattened when ``dim`` is None.

    ``repeats`` is an int or a 1-D integer tensor (one count per element). With only a
    tensor argument, returns ``arange(len(input))`` repeated by ``input``.
    Tensor ``repeats`` are not supported under vmap (the output size depends on them).

    Parameters
    ----------
    input : Tensor
        The tensor.
    repeats : int or Tensor
        Repetitions of each element (or per element along ``dim``).
    dim : int, optional
        The dim (default: the flattened input).
    output_size : int, optional
        The total size along ``dim``, if known.

    Examples
    --------
    >>> import lucid
    >>> lucid.tensor([1, 2]).repeat_interleave(2).tolist()
    [1, 1, 2, 2]
    """
    from .indexing import concrete, index_select

    input = _as_tensor(input)
    if repeats is None:
        return repeat_interleave(_wrap(np.arange(input.shape[0] if input.ndim else 1)), input, 0)
    if dim is None:
        input, d = flatten(input), 0
    else:
        d = normalize_axis(dim, input.ndim, "repeat_interleave")
    if input.ndim == 0:
        input = reshape(input, 1)
    if isinstance(repeats, Tensor):
        reps = concrete(repeats)
        if reps is None:
            raise RuntimeError("repeat_interleave: tensor repeats are batched under vmap; the output size "
                               "would depend on the data, which vmap does not support")
        if reps.dtype.kind not in "iu":
            raise RuntimeError(f"repeat_interleave: repeats must be an integer tensor, got {reps.dtype}")
        if reps.size == 1 and reps.ndim <= 1:
            repeats = int(reps.reshape(()))
        else:
            if reps.ndim != 1 or reps.shape[0] != input.shape[d]:
                raise RuntimeError(f"repeat_interleave: repeats must have the same size as input along dim, "
                                   f"got repeats shape {tuple(reps.shape)} and input size {input.shape[d]}")
            if (reps < 0).any():
                raise RuntimeError("repeat_interleave: repeats can not be negative")
            idx = _wrap(np.repeat(np.arange(input.shape[d]), reps))
            return index_select(input, d, idx)
    if repeats < 0:
        raise RuntimeError(f"repeat_interleave: repeats can not be negative, got {repeats}")
    return _interleave_int(input, int(repeats), d)


# ---------------------------------------------------------------------- pad


def _pad_vjp(ns, g, out, x, pad_width, value):
    return ns.getitem(g, key=tuple(slice(l, l + n) for (l, _), n in zip(pad_width, x.shape)))


def _pad_batch(vals, bdims, pad_width, value):
    v = move_bdim(vals[0], bdims[0], 0)
    return bind(pad_p, (v,), {"pad_width": ((0, 0),) + pad_width, "value": value}), 0


pad_p = defprim(
    "pad", lambda x, pad_width, value: xp.pad(x, pad_width, constant_values=value),
    vjp=(_pad_vjp,),
    jvp=lambda ns, primals, tangents, out, pad_width, value:
        bind(pad_p, (tangents[0],), {"pad_width": pad_width, "value": 0}),
    save_inputs=False,
)
pad_p.batch = _pad_batch


def _edge_index(n, lo, hi, mode):
    """Source positions for padding a dim of size ``n`` by ``lo``/``hi`` in a non-constant mode."""
    if mode == "reflect":
        if lo >= n or hi >= n:
            raise RuntimeError(f"pad: padding size should be less than the corresponding input dimension, "
                               f"but got padding ({lo}, {hi}) for a dimension of size {n} (reflect)")
        return np.concatenate([np.arange(lo, 0, -1), np.arange(n), np.arange(n - 2, n - 2 - hi, -1)])
    if mode == "replicate":
        if n == 0:
            raise RuntimeError("pad: replicate padding needs non-empty dimensions")
        return np.concatenate([np.zeros(lo, np.int64), np.arange(n), np.full(hi, n - 1)])
    if lo > n or hi > n:
        raise RuntimeError(f"pad: padding value causes wrapping around more than once, padding ({lo}, {hi}) "
                           f"for a dimension of size {n} (circular)")
    return np.arange(-lo, n + hi) % n


def pad(input, pad, mode="constant", value=None):
    """Pad the last ``len(pad) // 2`` dims: ``pad = (left_last, right_last, left_prev, right_prev, ...)``.

    Modes as :func:`torch.nn.functional.pad`: ``"constant"`` (with ``value``, default 0;
    negative pads crop), ``"reflect"``, ``"replicate"``, ``"circular"``.

    Parameters
    ----------
    input : Tensor
        The tensor.
    pad : tuple of int
        ``(left, right)`` pairs, starting from the last dim.
    mode : str
        'constant', 'reflect', 'replicate' or 'circular'.
    value : float, optional
        The fill value for 'constant'.

    Examples
    --------
    >>> import lucid
    >>> lucid.pad(lucid.tensor([1.0, 2.0]), (1, 2)).tolist()
    [0.0, 1.0, 2.0, 0.0, 0.0]
    >>> lucid.pad(lucid.tensor([1.0, 2.0, 3.0]), (2, 1), mode="reflect").tolist()
    [3.0, 2.0, 1.0, 2.0, 3.0, 2.0]
    """
    from .indexing import IDX, getitem_p

    input = _as_tensor(input)
    pad = tuple(int(p) for p in pad)
    if len(pad) % 2 or len(pad) // 2 > input.ndim:
        raise RuntimeError(f"pad: padding length must be divisible by 2 and at most 2 * ndim, "
                           f"got {len(pad)} for a tensor of shape {tuple(input.shape)}")
    k = len(pad) // 2
    widths = [(0, 0)] * (input.ndim - k) + [(pad[2 * i], pad[2 * i + 1]) for i in reversed(range(k))]
    if mode == "constant":
        crop = tuple(slice(max(-lo, 0), n - max(-hi, 0)) for (lo, hi), n in zip(widths, input.shape))
        if any(lo < 0 or hi < 0 for lo, hi in widths):
            if any(c.start > c.stop for c in crop):
                raise RuntimeError(f"pad: negative padding {pad} crops more than the size of {tuple(input.shape)}")
            input = _getitem(input, crop)
        widths = tuple((max(lo, 0), max(hi, 0)) for lo, hi in widths)
        v = 0 if value is None else value
        if all(w == (0, 0) for w in widths):
            return _clone(input)
        return bind(pad_p, (input,), {"pad_width": widths, "value": v})
    if mode not in ("reflect", "replicate", "circular"):
        raise NotImplementedError(f"pad: unknown padding mode '{mode}'")
    if value not in (None, 0):
        raise RuntimeError(f"pad: padding mode '{mode}' doesn't take in value argument")
    if any(lo < 0 or hi < 0 for lo, hi in widths):
        raise RuntimeError(f"pad: negative padding {pad} is only supported in constant mode")
    out = input
    for d, (lo, hi) in enumerate(widths):
        if lo or hi:
            idx = _wrap(_edge_index(input.shape[d], lo, hi, mode))
            out = bind(getitem_p, (out, idx), {"key": (slice(None),) * d + (IDX,)})
    return out


# ------------------------------------------------------- triangles and diagonals


def _tri(op, input, diagonal, lower):
    from .elementwise import where

    input = _as_tensor(input)
    if input.ndim < 2:
        raise RuntimeError(f"{op}: input tensor must have at least 2 dimensions, got shape {tuple(input.shape)}")
    n, m = input.shape[-2:]
    mask = np.tri(n, m, k=diagonal, dtype=bool) if lower else ~np.tri(n, m, k=diagonal - 1, dtype=bool)
    return where(_wrap(mask), input, _wrap(np.zeros((), input.dtype)))


@tensor_method("tril")
def tril(input, diagonal=0):
    """Lower triangle of the last two dims (elements with ``j - i <= diagonal``); the rest zero.

    Parameters
    ----------
    input : Tensor
        At least 2-D.
    diagonal : int
        Which diagonal to keep up to (0: the main one).

    Examples
    --------
    >>> import lucid
    >>> lucid.ones(2, 2).tril().tolist()
    [[1.0, 0.0], [1.0, 1.0]]
    """
    return _tri("tril", input, diagonal, True)


@tensor_method("triu")
def triu(input, diagonal=0):
    """Upper triangle of the last two dims (elements with ``j - i >= diagonal``); the rest zero.

    Parameters
    ----------
    input : Tensor
        At least 2-D.
    diagonal : int
        Which diagonal to keep from (0: the main one).

    Examples
    --------
    >>> import lucid
    >>> lucid.ones(2, 2).triu().tolist()
    [[1.0, 1.0], [0.0, 1.0]]
    """
    return _tri("triu", input, diagonal, False)


def _diag_positions(n1, n2, offset):
    length = max(min(n1, n2 - offset) if offset >= 0 else min(n1 + offset, n2), 0)
    rows = np.arange(length) + max(-offset, 0)
    return rows, rows + offset


@tensor_method("diagonal")
def diagonal(input, offset=0, dim1=0, dim2=1):
    """The diagonal of the ``(dim1, dim2)`` planes, appended as the last dim.

    Limitations: returns a copy, not a view.

    Parameters
    ----------
    input : Tensor
        The tensor.
    offset : int
        Offset of the diagonal.
    dim1, dim2 : int
        The two dims of the matrices.

    Examples
    --------
    >>> import lucid
    >>> lucid.tensor([[1, 2], [3, 4]]).diagonal().tolist()
    [1, 4]
    """
    from .indexing import IDX, getitem_p

    input = _as_tensor(input)
    if input.ndim < 2:
        raise RuntimeError(f"diagonal: expected a tensor with at least 2 dimensions, got shape {tuple(input.shape)}")
    d1, d2 = normalize_axis(dim1, input.ndim, "diagonal"), normalize_axis(dim2, input.ndim, "diagonal")
    if d1 == d2:
        raise RuntimeError(f"diagonal: dimensions cannot be identical {dim1}, {dim2}")
    x = moveaxis(input, (d1, d2), (-2, -1))
    rows, cols = _diag_positions(x.shape[-2], x.shape[-1], int(offset))
    return bind(getitem_p, (x, _wrap(rows), _wrap(cols)), {"key": (Ellipsis, IDX, IDX)})


@tensor_method("diag_embed")
def diag_embed(input, offset=0, dim1=-2, dim2=-1):
    """Tensor whose ``(dim1, dim2)`` planes have the last dim of ``input`` on their ``offset`` diagonal.

    Parameters
    ----------
    input : Tensor
        The tensor.
    offset : int
        Offset of the diagonal.
    dim1, dim2 : int
        Where the two new dims go.

    Examples
    --------
    >>> import lucid
    >>> lucid.diag_embed(lucid.tensor([1.0, 2.0])).tolist()
    [[1.0, 0.0], [0.0, 2.0]]
    """
    from .indexing import IDX, index_scatter_p

    input = _as_tensor(input)
    if input.ndim < 1:
        raise RuntimeError("diag_embed: expected a tensor with at least 1 dimension")
    nd = input.ndim + 1
    d1, d2 = normalize_axis(dim1, nd, "diag_embed"), normalize_axis(dim2, nd, "diag_embed")
    if d1 == d2:
        raise RuntimeError(f"diag_embed: diagonal dimensions cannot be identical {dim1}, {dim2}")
    n = input.shape[-1] + abs(int(offset))
    rows, cols = _diag_positions(n, n, int(offset))
    out = bind(index_scatter_p, (input, _wrap(rows), _wrap(cols)),
               {"key": (Ellipsis, IDX, IDX), "shape": tuple(input.shape[:-1]) + (n, n)})
    return moveaxis(out, (nd - 2, nd - 1), (d1, d2))


@tensor_method("diag")
def diag(input, diagonal=0):
    """1-D input: a 2-D matrix with it on the ``diagonal``; 2-D input: that diagonal as 1-D.

    Parameters
    ----------
    input : Tensor
        1-D (makes a matrix) or 2-D (takes a diagonal).
    diagonal : int
        Offset of the diagonal.

    Examples
    --------
    >>> import lucid
    >>> lucid.diag(lucid.tensor([1, 2])).tolist()
    [[1, 0], [0, 2]]
    >>> lucid.diag(lucid.tensor([[1, 2], [3, 4]])).tolist()
    [1, 4]
    """
    input = _as_tensor(input)
    if input.ndim == 1:
        return diag_embed(input, diagonal)
    if input.ndim == 2:
        return globals()["diagonal"](input, diagonal)
    raise RuntimeError(f"diag: supports 1D or 2D tensors, got {input.ndim}D (shape {tuple(input.shape)})")


def meshgrid(*tensors, indexing="ij"):
    """Coordinate grids from 1-D tensors; ``indexing="xy"`` swaps the first two output dims.

    Parameters
    ----------
    *tensors : Tensor
        1-D coordinate vectors.
    indexing : {'ij', 'xy'}
        Matrix or Cartesian indexing.

    Examples
    --------
    >>> import lucid
    >>> a, b = lucid.meshgrid(lucid.tensor([1, 2]), lucid.tensor([3, 4, 5]), indexing="ij")
    >>> a.shape, b.shape
    ((2, 3), (2, 3))
    """
    if len(tensors) == 1 and isinstance(tensors[0], (list, tuple)):
        tensors = tuple(tensors[0])
    if indexing not in ("ij", "xy"):
        raise RuntimeError(f"meshgrid: indexing must be 'ij' or 'xy', got {indexing!r}")
    tensors = [_as_tensor(t) for t in tensors]
    for t in tensors:
        if t.ndim > 1:
            raise RuntimeError(f"meshgrid: expects 0-D or 1-D tensors, got shape {tuple(t.shape)}")
    sizes = [t.numel() for t in tensors]
    pos = list(range(len(tensors)))
    if indexing == "xy" and len(tensors) >= 2:
        pos[0], pos[1] = 1, 0
    shape = [0] * len(tensors)
    for p, n in zip(pos, sizes):
        shape[p] = n
    out = []
    for t, p in zip(tensors, pos):
        view_shape = tuple(-1 if i == p else 1 for i in range(len(tensors)))
        out.append(broadcast_to(reshape(t, view_shape), tuple(shape)))
    return tuple(out)


__all__ = ['chunk', 'diag', 'diag_embed', 'diagonal', 'flip', 'meshgrid', 'narrow', 'pad', 'repeat', 'repeat_interleave', 'reshape_as', 'roll', 'select', 'split', 'tile', 'tril', 'triu', 'unbind', 'view_as',
           'broadcast_to', 'cat', 'concat', 'concatenate', 'contiguous', 'expand', 'expand_as', 'flatten', 'moveaxis', 'movedim', 'permute', 'reshape', 'squeeze', 'stack', 'swapaxes', 'swapdims', 't', 'transpose', 'unflatten', 'unsqueeze', 'view']
