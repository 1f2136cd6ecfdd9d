"""Rearranging: flip, roll, repeat, tile, repeat_interleave.
"""
from __future__ import annotations

import numpy as np

from ..._core import backend
from ..._core.backend import on_device, xp
from ..._core.primitive import bind, defprim
from ..._core.tensor import Tensor, _wrap, tensor_method
from .._family import _as_tensor, batch_unary_axis, linear_jvp, normalize_axis
from .slicing import _clone
from .views import _kw_shape, _shape_args, broadcast_to, flatten, reshape
from ..numpy_aliases import numpy_axis


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
def flip(input, dims, *more_dims):
    """Reverse the order of elements along ``dims`` (a copy).

    Parameters
    ----------
    input : Tensor
        The tensor.
    dims : int or tuple of int
        The dims to reverse (the method also takes them one by one: ``x.flip(0, 1)``).

    Examples
    --------
    >>> import lucid
    >>> lucid.tensor([[1, 2], [3, 4]]).flip(1).tolist()
    [[2, 1], [4, 3]]
    """
    input = _as_tensor(input)
    if more_dims:
        dims = (dims,) + more_dims
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
def repeat(input, *sizes, **kwargs):
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
    sizes = tuple(int(s) for s in _shape_args(_kw_shape(sizes, kwargs, "repeat", "repeats")))
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
    # a copy, always (PyTorch's): where the reshape could keep the broadcast as a (read-only,
    # stride-0) view of the input, as for repeats along a new leading dim, copy it
    return _clone(out) if out._base is not None or all(r == 1 for r in sizes) else out


@tensor_method("tile")
def tile(input, dims, *more_dims):
    """Like :func:`repeat`, with ``dims`` padded with leading 1s to ``input.ndim``.

    Parameters
    ----------
    input : Tensor
        The tensor.
    dims : tuple of int
        Repetitions per dim (the method also takes them one by one: ``x.tile(2, 2)``).

    Examples
    --------
    >>> import lucid
    >>> lucid.tensor([1, 2]).tile((2,)).tolist()
    [1, 2, 1, 2]
    """
    input = _as_tensor(input)
    dims = (dims,) + more_dims if more_dims else (dims,) if isinstance(dims, int) else tuple(dims)
    return repeat(input, (1,) * (input.ndim - len(dims)) + dims)


def _interleave_int(input, r, d):
    shape = tuple(input.shape)
    out = reshape(input, shape[:d + 1] + (1,) + shape[d + 1:])
    out = broadcast_to(out, shape[:d + 1] + (r,) + shape[d + 1:])
    return reshape(out, shape[:d] + (shape[d] * r,) + shape[d + 1:])


@tensor_method("repeat_interleave")
def repeat_interleave(input, repeats=None, dim=None, *, output_size=None, axis=None):
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
    if axis is not None:  # See NOTE [NumPy keyword aliases]
        dim = numpy_axis("repeat_interleave", dim, axis, None)
    from ..indexing import concrete, index_select

    input = _as_tensor(input)
    if repeats is None:
        from ..creation import arange

        return repeat_interleave(arange(input.shape[0] if input.ndim else 1, device=input.device), input, 0)
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
            with on_device(reps):
                negative = (reps < 0).any()
            if negative:
                raise RuntimeError("repeat_interleave: repeats can not be negative")
            # The output's length depends on the repeats' values: read them (one explicit host copy,
            # as PyTorch syncs here too unless given output_size).
            idx = np.repeat(np.arange(input.shape[d]), backend.host(reps))
            return index_select(input, d, _wrap(backend.on_device_of(idx, reps)))
    if repeats < 0:
        raise RuntimeError(f"repeat_interleave: repeats can not be negative, got {repeats}")
    return _interleave_int(input, int(repeats), d)


__all__ = ['flip', 'repeat', 'repeat_interleave', 'roll', 'tile']
