"""Strided views: ``Tensor.unfold`` (sliding windows) and ``as_strided``.

NOTE [Strided views]
Both are real views: the output aliases the input's memory (``is_view``), so writes through
it reach the input, as in PyTorch. Each is a primitive paired with its adjoint, which
scatter-adds a cotangent back into the input's shape; the two are each other's vjp (and,
being linear, their own jvp), so derivatives of any order work. ``as_strided`` reads the
input as its contiguous row-major layout, offsets and strides counted in elements from its
first element (PyTorch counts from the start of the storage: equal for a tensor that owns
its storage). A non-contiguous input is made contiguous first, so the result then is a
copy, not a view — as ``reshape`` does.
"""
from __future__ import annotations

import numpy as np

from ..._core.backend import xp
from ..._core.primitive import TN, bind, defprim
from ..._core.tensor import tensor_method
from .._family import _as_tensor, linear_jvp, move_bdim, normalize_axis

# ------------------------------------------------------------------------ unfold


def _unfold_impl(x, dim, size, step):
    win = np.lib.stride_tricks.sliding_window_view(x, size, axis=dim, writeable=x.flags.writeable)
    return win[(slice(None),) * dim + (slice(None, None, step),)]


def _unfold_adjoint_impl(g, shape, dim, size, step):
    out = xp.zeros(shape, g.dtype)
    n = g.shape[dim]
    for k in range(size):  # window position k of window i sits at k + i * step
        dst = (slice(None),) * dim + (slice(k, k + (n - 1) * step + 1, step),)
        out[dst] += g[..., k]
    return out


unfold_p = defprim(
    "unfold", _unfold_impl,
    vjp=(lambda ns, g, out, x, dim, size, step: ns.unfold_adjoint(g, shape=tuple(x.shape), dim=dim,
                                                                  size=size, step=step),),
    save_inputs=False, is_view=True,
)
unfold_p.jvp = linear_jvp(unfold_p)

unfold_adjoint_p = defprim(
    "unfold_adjoint", _unfold_adjoint_impl,
    vjp=(lambda ns, g, out, gy, shape, dim, size, step: ns.unfold(g, dim=dim, size=size, step=step),),
    save_inputs=None,
)
unfold_adjoint_p.jvp = linear_jvp(unfold_adjoint_p)


def _unfold_batch(vals, bdims, dim, size, step):
    v = move_bdim(vals[0], bdims[0], 0)
    return bind(unfold_p, (v,), {"dim": dim + 1, "size": size, "step": step}), 0


def _unfold_adjoint_batch(vals, bdims, shape, dim, size, step):
    v = move_bdim(vals[0], bdims[0], 0)
    params = {"shape": (v.shape[0],) + tuple(shape), "dim": dim + 1, "size": size, "step": step}
    return bind(unfold_adjoint_p, (v,), params), 0


unfold_p.batch = _unfold_batch
unfold_adjoint_p.batch = _unfold_adjoint_batch


@tensor_method("unfold")
def unfold(input, dimension, size, step):
    """A view of all windows of length ``size`` along ``dimension``, ``step`` apart.

    The windows' dimension replaces ``dimension``; a new last dimension of length ``size``
    holds each window. Writes through the result reach ``input``. See NOTE [Strided views].

    Parameters
    ----------
    input : Tensor
    dimension : int
    size : int
        Window length (at most the dimension's length).
    step : int
        Distance between window starts (positive).

    Examples
    --------
    >>> import lucid
    >>> lucid.arange(5.0).unfold(0, 2, 2)
    tensor([[0., 1.],
            [2., 3.]])
    """
    input = _as_tensor(input)
    nd = input.ndim
    d = normalize_axis(dimension, nd, "unfold")
    length = input.shape[d] if nd else 1
    if size < 0 or size > length:
        raise RuntimeError(f"unfold: size {size} must be between 0 and the size of dimension {dimension} "
                           f"({length}) of a tensor of shape {tuple(input.shape)}")
    if step <= 0:
        raise RuntimeError(f"unfold: step must be positive, got {step}")
    if nd == 0:
        return TN.reshape(input, shape=(1,))
    return bind(unfold_p, (input,), {"dim": d, "size": int(size), "step": int(step)})


# -------------------------------------------------------------------- as_strided


def _strided_index(n, size, stride, offset):
    """Flat positions (in a contiguous input of ``n`` elements) of an as_strided result."""
    base = np.arange(n, dtype=np.intp)
    return np.lib.stride_tricks.as_strided(base[offset:], size, tuple(s * base.itemsize for s in stride))


def _as_strided_impl(x, size, stride, offset):
    flat = xp.ascontiguousarray(x).reshape(-1)
    return np.lib.stride_tricks.as_strided(flat[offset:], size, tuple(s * flat.itemsize for s in stride),
                                           writeable=flat.flags.writeable)


def _as_strided_adjoint_impl(g, shape, size, stride, offset):
    n = int(np.prod(shape, dtype=np.int64))
    out = xp.zeros(n, g.dtype)
    np.add.at(out, _strided_index(n, size, stride, offset), g)
    return out.reshape(shape)


as_strided_p = defprim(
    "as_strided", _as_strided_impl,
    vjp=(lambda ns, g, out, x, size, stride, offset: ns.as_strided_adjoint(
        g, shape=tuple(x.shape), size=size, stride=stride, offset=offset),),
    save_inputs=False, is_view=True,
)
as_strided_p.jvp = linear_jvp(as_strided_p)

as_strided_adjoint_p = defprim(
    "as_strided_adjoint", _as_strided_adjoint_impl,
    vjp=(lambda ns, g, out, gy, shape, size, stride, offset: ns.as_strided(g, size=size, stride=stride,
                                                                           offset=offset),),
    save_inputs=None,
)
as_strided_adjoint_p.jvp = linear_jvp(as_strided_adjoint_p)


def _as_strided_batch(vals, bdims, size, stride, offset):
    # Example b of the contiguous batched input starts b * n elements in: one more leading dim.
    v = move_bdim(vals[0], bdims[0], 0)
    n = int(np.prod(v.shape[1:], dtype=np.int64))
    return bind(as_strided_p, (v,), {"size": (v.shape[0],) + size, "stride": (n,) + stride,
                                     "offset": offset}), 0


def _as_strided_adjoint_batch(vals, bdims, shape, size, stride, offset):
    v = move_bdim(vals[0], bdims[0], 0)
    n = int(np.prod(shape, dtype=np.int64))
    params = {"shape": (v.shape[0],) + tuple(shape), "size": (v.shape[0],) + size,
              "stride": (n,) + stride, "offset": offset}
    return bind(as_strided_adjoint_p, (v,), params), 0


as_strided_p.batch = _as_strided_batch
as_strided_adjoint_p.batch = _as_strided_adjoint_batch


@tensor_method("as_strided")
def as_strided(input, size, stride, storage_offset=0):
    """A view with the given ``size`` and ``stride`` (in elements) into ``input``'s elements.

    Offsets count from ``input``'s first element in its row-major layout; elements may repeat
    (overlapping windows), and writes through the view reach ``input`` (for a contiguous
    input). See NOTE [Strided views].

    Examples
    --------
    >>> import lucid
    >>> lucid.arange(6.0).as_strided((2, 3), (1, 1))
    tensor([[0., 1., 2.],
            [1., 2., 3.]])
    """
    input = _as_tensor(input)
    size, stride = tuple(int(s) for s in size), tuple(int(s) for s in stride)
    if len(size) != len(stride):
        raise RuntimeError(f"as_strided: size {size} and stride {stride} must have the same length")
    if any(s < 0 for s in size) or any(s < 0 for s in stride) or storage_offset < 0:
        raise RuntimeError(f"as_strided: size, stride and storage_offset must be non-negative, got "
                           f"size {size}, stride {stride}, storage_offset {storage_offset}")
    n = input.numel()
    last = storage_offset + sum((sz - 1) * st for sz, st in zip(size, stride)) if all(size) else -1
    if last >= n or (storage_offset > n):
        raise RuntimeError(f"as_strided: size {size}, stride {stride} and storage_offset {storage_offset} "
                           f"reach element {last}, out of bounds for a tensor of {n} elements")
    return bind(as_strided_p, (input,), {"size": size, "stride": stride, "offset": int(storage_offset)})


__all__ = ["as_strided"]
