"""Joining: cat/concatenate, stack.
"""
from __future__ import annotations

from ..._core import dtypes
from ..._core.backend import xp
from ..._core.primitive import TN, OpError, bind, defprim
from .._family import _as_tensor, move_bdim, normalize_axis
from .views import broadcast_to_p, unsqueeze


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
        raise OpError("cat: expected a non-empty list of Tensors")  # PyTorch: ValueError
    # The result dtype promotes over every input, empty ones included (as PyTorch). Legacy
    # empty 1-D tensors beside tensors of another rank are skipped, as PyTorch does; among
    # tensors of one rank they stay (and get their empty gradient).
    dt = dtypes.result_type(*tensors)
    if len({t.ndim for t in tensors}) > 1:
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
    tensors = [t if t.dtype == dt else t.to(dt) for t in tensors]
    # Always a new tensor, even from one input: never the input itself (a later in-place
    # change of the result must not reach it).
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


__all__ = ['cat', 'concat', 'concatenate', 'stack']
