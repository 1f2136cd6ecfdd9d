"""Views built on indexing: narrow, select, split, chunk, unbind, ...
"""
from __future__ import annotations

from ..._core.tensor import tensor_method
from .._family import _as_tensor, normalize_axis
from .views import reshape
from ..numpy_aliases import REQUIRED, numpy_axis


# ------------------------------------------------------ views built on indexing


def _clone(x):
    from ..elementwise import clone

    return clone(x)


def _getitem(input, key):
    from ..indexing import getitem

    return getitem(input, key)


@tensor_method("narrow")
def narrow(input, dim=REQUIRED, start=REQUIRED, length=REQUIRED, *, axis=None):
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
    if axis is not None or dim is REQUIRED or start is REQUIRED or length is REQUIRED:  # See NOTE [NumPy keyword aliases]
        dim = numpy_axis("narrow", dim, axis, REQUIRED, start=start, length=length)
    input = _as_tensor(input)
    if input.ndim == 0:
        raise RuntimeError("narrow: cannot be applied to a 0-dim tensor")
    d = normalize_axis(dim, input.ndim, "narrow")
    n = input.shape[d]
    if hasattr(start, "ndim") and (start.ndim != 0 or start.dtype.kind not in "iu"):
        raise RuntimeError("narrow: start must be an 0-dim integral Tensor.")
    start = int(start)
    if not -n <= start <= n:
        raise IndexError(f"narrow: start {start} is out of range for dimension {d} of size {n}")
    start = start % n if start < 0 else start
    if length < 0 or start + length > n:
        raise RuntimeError(f"narrow: start ({start}) + length ({length}) exceeds dimension size ({n})")
    return _getitem(input, (slice(None),) * d + (slice(start, start + length),))


@tensor_method("select")
def select(input, dim=REQUIRED, index=REQUIRED, *, axis=None):
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
    if axis is not None or dim is REQUIRED or index is REQUIRED:  # See NOTE [NumPy keyword aliases]
        dim = numpy_axis("select", dim, axis, REQUIRED, index=index)
    input = _as_tensor(input)
    if input.ndim == 0:
        raise IndexError("select: cannot be applied to a 0-dim tensor")
    d = normalize_axis(dim, input.ndim, "select")
    n = input.shape[d]
    if not -n <= index < n:
        raise IndexError(f"select: index {index} out of range for tensor of size {list(input.shape)} at dimension {d}")
    return _getitem(input, (slice(None),) * d + (int(index),))


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
    return _multi_output(out, "split" if isinstance(split_size_or_sections, int) else "split_with_sizes")


@tensor_method("split")
def _split_method(self, split_size, dim=0):
    """``Tensor.split(split_size, dim=0)``: :func:`split`, with the keyword PyTorch's method takes.

    Examples
    --------
    >>> import lucid
    >>> [t.shape for t in lucid.zeros(2, 5).split(split_size=[1, 4], dim=-1)]
    [(2, 1), (2, 4)]
    """
    return split(self, split_size, dim)


_split_method.__name__ = _split_method.__qualname__ = "split"


@tensor_method("chunk")
def chunk(input, chunks, dim=0, *, axis=None):
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
    if axis is not None:  # See NOTE [NumPy keyword aliases]
        dim = numpy_axis("chunk", dim, axis, 0)
    if chunks <= 0:
        raise RuntimeError(f"chunk: number of chunks must be greater than 0, got {chunks}")
    input = _as_tensor(input)
    if input.ndim == 0:
        raise RuntimeError("chunk: expected a tensor with at least 1 dimension")
    n = input.shape[normalize_axis(dim, input.ndim, "chunk")]
    size = -(-n // chunks)
    return split(input, [0] * chunks if n == 0 else size, dim)


@tensor_method("unbind")
def unbind(input, dim=0, *, axis=None):
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
    if axis is not None:  # See NOTE [NumPy keyword aliases]
        dim = numpy_axis("unbind", dim, axis, 0)
    input = _as_tensor(input)
    if input.ndim == 0:
        raise IndexError("unbind: dimension specified as 0 but tensor has no dimensions")
    d = normalize_axis(dim, input.ndim, "unbind")
    return _multi_output([_getitem(input, (slice(None),) * d + (i,)) for i in range(input.shape[d])], "unbind")


# NOTE [Multi-output views]
# PyTorch computes split/chunk/split_with_sizes/unbind as one node with several view outputs, so
# it can't rebase one of them after an in-place change: it refuses in-place changes that need a
# graph on those outputs and on views of them (tensor_split/hsplit/vsplit/dsplit are slices
# there, so theirs are allowed), and under ``func.grad`` (not under vmap or jvp). Each output
# remembers which function made it; ``inplace._check_leaf`` (graph path) and ``inplace.
# _inplace_traced`` walk a view's ``_view_src`` chain looking for the mark.
def _multi_output(outs, name):
    for i, t in enumerate(outs):
        t._multi_out = (name, i)
    return tuple(outs)


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
    return input.view(tuple(other.shape))  # a view or an error, never a silent copy (PyTorch)


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


__all__ = ['chunk', 'narrow', 'reshape_as', 'select', 'split', 'unbind', 'view_as']
