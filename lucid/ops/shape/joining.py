"""Joining: cat/concatenate, stack.
"""
from __future__ import annotations

from ..._core import dtypes
from ..._core.backend import xp
from ..._core.primitive import TN, OpError, bind, defprim
from .._family import _as_tensor, move_bdim, normalize_axis
from .views import broadcast_to_p, unsqueeze
from ..numpy_aliases import numpy_axis
from ..._core.quantized import per_tensor_affine, per_tensor_symmetric

_PER_TENSOR = (per_tensor_affine, per_tensor_symmetric)


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


def _channels_last(a):
    return a.ndim in (4, 5) and a.transpose(0, *range(2, a.ndim), 1).flags["C_CONTIGUOUS"]


def _concat_impl(*xs, axis):
    # NumPy lays the result out as its inputs (a transposed input gives a transposed result);
    # PyTorch's is row-major unless every input is channels-last, so ``.view`` works on it.
    out = xp.concatenate(xs, axis=axis)
    if out.flags["C_CONTIGUOUS"] or all(_channels_last(x) for x in xs):
        return out
    return xp.ascontiguousarray(out)


concat_p = defprim("concat", _concat_impl, vjp=_concat_vjp, jvp=_concat_jvp, save_inputs=False)
concat_p.batch = _concat_batch


def cat(tensors, dim=0, *, axis=None):
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
    if axis is not None:  # See NOTE [NumPy keyword aliases]
        dim = numpy_axis("cat", dim, axis, 0)
    tensors = [_as_tensor(t) for t in tensors]
    if not tensors:
        raise OpError("cat: expected a non-empty list of Tensors")  # PyTorch: ValueError
    # The result dtype promotes over every input, empty ones included (as PyTorch). Legacy
    # empty 1-D tensors beside tensors of another rank are skipped, as PyTorch does; among
    # tensors of one rank they stay (and get their empty gradient).
    try:
        dt = dtypes.result_type(*tensors)
    except NotImplementedError:  # quantized inputs are refused by promotion: the eager path pays nothing
        if _any_quantized(tensors):
            return _quantized_cat(tensors, dim, "cat")
        raise
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


# NOTE [Joining quantized tensors]
# As PyTorch's ``cat`` (which its ``stack``, ``hstack`` ... reach): per-tensor quantized inputs of
# one dtype join into a tensor with the *first* input's scale and zero point, the others
# requantized to it (``lucid.ao.nn.quantized._qops.cat``); per-channel ones are refused. Dense
# ``cat`` only finds out in its failure path (promotion refuses quantized dtypes), so it pays
# nothing for this; ``stack`` adds its new dim as a view of each input first.


def _any_quantized(tensors):
    return any(t.is_quantized for t in tensors)


def _quantized_cat(tensors, dim, op):
    from ...ao.nn.quantized._qops import cat as quantized_cat

    for t in tensors:
        if not t.is_quantized:
            raise RuntimeError(f"{op}: expected all tensors quantized or none, got {t.dtype} beside "
                               f"{tensors[0].dtype}")
        if t.qscheme() not in _PER_TENSOR:
            raise RuntimeError(f"{op}: only per-tensor quantization is supported (as PyTorch's cat)")
    if op == "stack":
        tensors = [t.unsqueeze(dim) for t in tensors]
    else:
        dim = normalize_axis(dim, tensors[0].ndim, op)
    return quantized_cat(tensors, dim)


def stack(tensors, dim=0, *, axis=None):
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
    if axis is not None:  # See NOTE [NumPy keyword aliases]
        dim = numpy_axis("stack", dim, axis, 0)
    tensors = [_as_tensor(t) for t in tensors]
    if not tensors:
        raise RuntimeError("stack: expected a non-empty list of Tensors")
    shape = tensors[0].shape
    for t in tensors:
        if t.shape != shape:
            raise RuntimeError(f"stack: expects each tensor to be equal size, got {[tuple(x.shape) for x in tensors]}")
    dim = normalize_axis(dim, len(shape) + 1, "stack")
    if tensors[0].is_quantized:
        return _quantized_cat(tensors, dim, "stack")
    # through cat even for one input: a new tensor, never a view of the input (as PyTorch)
    return cat([unsqueeze(t, dim) for t in tensors], dim)


__all__ = ['cat', 'concat', 'concatenate', 'stack']
