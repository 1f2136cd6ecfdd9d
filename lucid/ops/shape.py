"""Shape primitives: reshape, transpose, broadcast, concatenate, indexing, detach.

Views (reshape, transpose, broadcast_to, basic indexing) alias their input's memory
and share its version counter, as in PyTorch.
"""
from __future__ import annotations

import math
import warnings

import numpy as np

from .._core import dtypes
from .._core.backend import xp
from .._core.primitive import TN, bind, defprim
from .._core.tensor import Tensor, _wrap, tensor_method
from ._family import (_as_tensor, linear_jvp, move_bdim, normalize_axis, shape_of,
                      sum_to_shape)

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
    """Like :func:`reshape` (lucid arrays are always viewable or copied transparently)."""
    if len(shape) == 1 and not isinstance(shape[0], (tuple, list, int)):
        return input.to(shape[0])
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
    """Reorder dimensions: ``out.shape[i] == input.shape[dims[i]]``."""
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
    """Swap two dimensions."""
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
    """Transpose of a tensor with at most 2 dims."""
    if input.ndim > 2:
        raise RuntimeError(f"t: expects a tensor with <= 2 dimensions, but got {input.ndim}")
    return input if input.ndim < 2 else transpose(input, 0, 1)


Tensor.T = property(lambda self: permute(self, tuple(range(self.ndim))[::-1]))
Tensor.mT = property(lambda self: transpose(self, -2, -1))


@tensor_method("moveaxis", "movedim")
def moveaxis(input, source, destination):
    """Move dimension(s) ``source`` to position(s) ``destination``."""
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
    """View of ``input`` broadcast to ``shape``."""
    input = _as_tensor(input)
    shape = tuple(shape)
    if shape == tuple(input.shape):
        return input
    try:
        np.broadcast_shapes(tuple(input.shape), shape)
    except ValueError:
        raise RuntimeError(
            f"broadcast_to: the shape {tuple(input.shape)} can't be broadcast to {shape}"
        ) from None
    return bind(broadcast_to_p, (input,), {"shape": shape})


@tensor_method("expand")
def expand(input, *sizes):
    """Broadcast to ``sizes``; ``-1`` keeps a dimension."""
    sizes = _shape_args(sizes)
    lead = len(sizes) - input.ndim
    shape = tuple(input.shape[i - lead] if s == -1 else s for i, s in enumerate(sizes))
    return broadcast_to(input, shape)


@tensor_method("expand_as")
def expand_as(input, other):
    return broadcast_to(input, other.shape)


# ----------------------------------------------------------- squeeze/unsqueeze


@tensor_method("unsqueeze")
def unsqueeze(input, dim):
    """Insert a size-1 dimension at ``dim``."""
    input = _as_tensor(input)
    nd = input.ndim + 1
    dim = normalize_axis(dim, nd, "unsqueeze")
    shape = list(input.shape)
    shape.insert(dim, 1)
    return bind(reshape_p, (input,), {"shape": tuple(shape)})


@tensor_method("squeeze")
def squeeze(input, dim=None):
    """Remove size-1 dimensions (all, or those in ``dim``)."""
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
    """Merge dimensions ``start_dim..end_dim`` into one."""
    input = _as_tensor(input)
    nd = input.ndim
    if nd == 0:
        return reshape(input, 1)
    s, e = normalize_axis(start_dim, nd, "flatten"), normalize_axis(end_dim, nd, "flatten")
    shape = input.shape
    return reshape(input, shape[:s] + (math.prod(shape[s:e + 1]),) + shape[e + 1:])


@tensor_method("unflatten")
def unflatten(input, dim, sizes):
    """Split dimension ``dim`` into ``sizes``."""
    nd = input.ndim
    d = normalize_axis(dim, nd, "unflatten")
    shape = input.shape
    sizes = tuple(sizes)
    if -1 in sizes:
        sizes = _infer_shape(sizes, shape[d], "unflatten")
    return reshape(input, shape[:d] + sizes + shape[d + 1:])


@tensor_method("contiguous")
def contiguous(input, memory_format=None):
    """This tensor (lucid does not expose strides)."""
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

    Examples
    --------
    >>> import lucid
    >>> lucid.cat([lucid.zeros(2), lucid.ones(1)]).tolist()
    [0.0, 0.0, 1.0]
    """
    from .elementwise import promote  # noqa: F401

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
    """Stack tensors of equal shape along a new dimension."""
    tensors = [_as_tensor(t) for t in tensors]
    if not tensors:
        raise RuntimeError("stack: expected a non-empty list of Tensors")
    shape = tensors[0].shape
    for t in tensors:
        if t.shape != shape:
            raise RuntimeError(f"stack: expects each tensor to be equal size, got {[tuple(x.shape) for x in tensors]}")
    dim = normalize_axis(dim, len(shape) + 1, "stack")
    return cat([unsqueeze(t, dim) for t in tensors], dim) if len(tensors) > 1 else unsqueeze(tensors[0], dim)


__all__ = ['broadcast_to', 'cat', 'concat', 'concatenate', 'contiguous', 'expand', 'expand_as', 'flatten', 'moveaxis', 'movedim', 'permute', 'reshape', 'squeeze', 'stack', 'swapaxes', 'swapdims', 't', 'transpose', 'unflatten', 'unsqueeze', 'view']
