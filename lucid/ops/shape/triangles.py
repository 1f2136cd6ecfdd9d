"""Triangles and diagonals: tril, triu, diag, diagonal, diag_embed, meshgrid.
"""
from __future__ import annotations

import numpy as np
from ..._core.backend import as_strided, namespace_of, writeable

from ..._core.primitive import bind, defprim
from ..._core.tensor import _wrap, tensor_method
from .._family import _as_tensor, normalize_axis
from .views import broadcast_to, moveaxis, reshape


# ------------------------------------------------------- triangles and diagonals


def _tri(op, input, diagonal, lower):
    from ..elementwise import where

    input = _as_tensor(input)
    if input.ndim < 2:
        raise RuntimeError(f"{op}: input tensor must have at least 2 dimensions, got shape {tuple(input.shape)}")
    n, m = input.shape[-2:]
    xp_ = namespace_of(input)
    # through the namespace, never a raw ``~``: it runs on the input's device (NOTE [Several devices])
    mask = xp_.tri(n, m, k=diagonal, dtype=bool) if lower else xp_.logical_not(xp_.tri(n, m, k=diagonal - 1, dtype=bool))
    return where(_wrap(mask), input, _wrap(xp_.zeros((), input.dtype)))


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


def _diagonal_view_impl(x, rows, cols, key):
    """``x[..., rows, cols]`` for the positions of one diagonal, as a strided *view* of x."""
    n = len(rows)
    if n == 0:
        return as_strided(x, shape=x.shape[:-2] + (0,), strides=x.strides[:-2] + (0,))
    sub = x[..., int(rows[0]):, int(cols[0]):]
    return as_strided(sub, shape=sub.shape[:-2] + (n,), strides=sub.strides[:-2] + (sub.strides[-2] + sub.strides[-1],),
                      writeable=writeable(x))


def _diagonal_prim():
    # Same value as getitem(x, ..., rows, cols), so getitem's rules apply unchanged; only the
    # forward differs: a writable strided view instead of an advanced-indexing copy, so
    # x.diagonal().fill_(1) and .copy_(d) write through, as in PyTorch.
    from ..indexing import getitem_p

    prim = defprim("diagonal", _diagonal_view_impl, vjp=getitem_p.vjp, jvp=getitem_p.jvp,
                   batch=getitem_p.batch, save_inputs=1, is_view=True)
    return prim


diagonal_p = _diagonal_prim()


@tensor_method("diagonal")
def diagonal(input, offset=0, dim1=0, dim2=1):
    """The diagonal of the ``(dim1, dim2)`` planes, appended as the last dim (a view).

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
    from ..indexing import IDX

    input = _as_tensor(input)
    # a 1-d input fails here with PyTorch's IndexError ("Dimension out of range")
    d1, d2 = normalize_axis(dim1, input.ndim, "diagonal"), normalize_axis(dim2, input.ndim, "diagonal")
    if d1 == d2:
        raise RuntimeError(f"diagonal: dimensions cannot be identical {dim1}, {dim2}")
    x = moveaxis(input, (d1, d2), (-2, -1))
    rows, cols = _diag_positions(x.shape[-2], x.shape[-1], int(offset))
    return bind(diagonal_p, (x, _wrap(rows), _wrap(cols)), {"key": (Ellipsis, IDX, IDX)})


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
    from ..indexing import IDX, index_scatter_p

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


def meshgrid(*tensors, indexing=None):
    """Coordinate grids from 1-D tensors; ``indexing="xy"`` swaps the first two output dims.

    Parameters
    ----------
    *tensors : Tensor
        1-D coordinate vectors.
    indexing : {'ij', 'xy'}, optional
        Matrix or Cartesian indexing. Omitted: 'ij' with PyTorch's UserWarning that it will be
        required.

    Examples
    --------
    >>> import lucid
    >>> a, b = lucid.meshgrid(lucid.tensor([1, 2]), lucid.tensor([3, 4, 5]), indexing="ij")
    >>> a.shape, b.shape
    ((2, 3), (2, 3))
    """
    if len(tensors) == 1 and isinstance(tensors[0], (list, tuple)):
        tensors = tuple(tensors[0])
    if indexing is None:
        import warnings

        warnings.warn("torch.meshgrid: in an upcoming release, it will be required to pass the indexing "
                      "argument.", UserWarning, stacklevel=2)
        indexing = "ij"
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


__all__ = ['diag', 'diag_embed', 'diagonal', 'meshgrid', 'tril', 'triu']
