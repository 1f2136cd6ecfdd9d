"""Names of upstream Lucid 3 (``ChanLumerico/lucid``) that PyTorch does not spell.

# NOTE [Lucid 3 names]
Lucid re-implements Lucid 3's API, which mirrors PyTorch's and adds a few spellings of its own:
top-level activations (``lucid.silu``, ``lucid.hard_swish`` ...) and the same names as Tensor
methods, NumPy's ``expand_dims`` and ``histogram2d``, ``Tensor.squeeze_all`` / ``cube_`` /
``pad`` / ``eval``. Each is a composite of existing public functions (so vjp, jvp and vmap come
from the primitives they call); where PyTorch has the same operation, the PyTorch function is
the one called, so the two spellings agree by construction. Names whose upstream meaning differs
from PyTorch's keep PyTorch's (``lucid.sort`` and ``max(dim=)`` return named tuples, ``argmax()``
flattens). The free ``lucid.repeat(x, repeats, dim=None)``, which PyTorch does not have, is
upstream's: NumPy's ``repeat`` along ``dim`` (0 when None), while ``Tensor.repeat`` tiles, as in
both PyTorch and Lucid 3.
"""
from __future__ import annotations

import operator

from .._core.tensor import Tensor, tensor_method
from ._family import _as_tensor

__all__ = ["silu", "gelu", "mish", "softplus", "relu6", "hard_sigmoid", "hard_swish", "expand_dims",
           "histogram2d", "repeat"]


def _F():
    import lucid.nn.functional as F

    return F


# ----------------------------------------------------------------------------- activations


@tensor_method("silu")
def silu(input):
    """SiLU ``x * sigmoid(x)`` (Lucid 3's top-level spelling of :func:`lucid.nn.functional.silu`).

    Examples
    --------
    >>> import lucid
    >>> lucid.silu(lucid.tensor([0.0])).tolist()
    [0.0]
    """
    return _F().silu(input)


@tensor_method("gelu")
def gelu(input, approximate="none"):
    """GELU (Lucid 3's top-level spelling of :func:`lucid.nn.functional.gelu`).

    Examples
    --------
    >>> import lucid
    >>> lucid.gelu(lucid.tensor([0.0])).tolist()
    [0.0]
    """
    return _F().gelu(input, approximate=approximate)


@tensor_method("mish")
def mish(input):
    """Mish ``x * tanh(softplus(x))`` (Lucid 3's spelling of :func:`lucid.nn.functional.mish`).

    Examples
    --------
    >>> import lucid
    >>> lucid.mish(lucid.tensor([0.0])).tolist()
    [0.0]
    """
    return _F().mish(input)


@tensor_method("softplus")
def softplus(input, beta=1.0, threshold=20.0):
    """Softplus ``log(1 + exp(beta x)) / beta`` (Lucid 3's spelling of
    :func:`lucid.nn.functional.softplus`; linear above ``threshold``).

    Examples
    --------
    >>> import lucid
    >>> round(lucid.softplus(lucid.tensor([0.0])).item(), 6)
    0.693147
    """
    return _F().softplus(input, beta=beta, threshold=threshold)


@tensor_method("relu6")
def relu6(input):
    """``min(max(x, 0), 6)`` (Lucid 3's spelling of :func:`lucid.nn.functional.relu6`).

    Examples
    --------
    >>> import lucid
    >>> lucid.relu6(lucid.tensor([-1.0, 7.0])).tolist()
    [0.0, 6.0]
    """
    return _F().relu6(input)


@tensor_method("hard_sigmoid")
def hard_sigmoid(input):
    """``relu6(x + 3) / 6`` (Lucid 3's spelling of :func:`lucid.nn.functional.hardsigmoid`).

    Examples
    --------
    >>> import lucid
    >>> lucid.hard_sigmoid(lucid.tensor([0.0, 3.0])).tolist()
    [0.5, 1.0]
    """
    return _F().hardsigmoid(input)


@tensor_method("hard_swish")
def hard_swish(input):
    """``x * relu6(x + 3) / 6`` (Lucid 3's spelling of :func:`lucid.nn.functional.hardswish`).

    Examples
    --------
    >>> import lucid
    >>> lucid.hard_swish(lucid.tensor([3.0])).tolist()
    [3.0]
    """
    return _F().hardswish(input)


@tensor_method("selu")
def _selu_method(self):
    """``Tensor.selu()``: :func:`lucid.selu` as a method (Lucid 3 has it)."""
    import lucid

    return lucid.selu(self)


# ----------------------------------------------------------------------------- shapes


@tensor_method("expand_dims")
def expand_dims(input, axis):
    """Insert size-1 dims at the positions ``axis`` of the result (NumPy's ``expand_dims``).

    Parameters
    ----------
    input : Tensor
        The tensor.
    axis : int or tuple of int
        Positions in the *output* (negative ones count from its end); a view, as ``unsqueeze``.

    Examples
    --------
    >>> import lucid
    >>> lucid.expand_dims(lucid.zeros(2, 3), (0, -1)).shape
    (1, 2, 3, 1)
    """
    input = _as_tensor(input)
    axes = (axis,) if not isinstance(axis, (tuple, list)) else tuple(axis)
    out_ndim = input.ndim + len(axes)
    norm = []
    for a in axes:
        a = operator.index(a)
        if not -out_ndim <= a < out_ndim:
            raise IndexError(f"expand_dims: axis {a} is out of bounds for a result of {out_ndim} dims "
                             f"(input shape {tuple(input.shape)})")
        norm.append(a % out_ndim)
    if len(set(norm)) != len(norm):
        raise ValueError(f"expand_dims: repeated axis in {axes}")
    out = input
    for a in sorted(norm):
        out = out.unsqueeze(a)
    return out


def repeat(input, repeats, dim=None):
    """Each element ``repeats`` times along ``dim`` (0 when None): Lucid 3's free ``repeat``.

    NumPy's ``repeat`` along an axis, i.e. ``repeat_interleave(input, repeats, dim)`` except that
    ``dim=None`` means dim 0 (not the flattened input). PyTorch has no free ``repeat``;
    ``Tensor.repeat(*sizes)`` tiles, as in PyTorch and Lucid 3 (NOTE [Lucid 3 names]).

    Examples
    --------
    >>> import lucid
    >>> x = lucid.tensor([[1, 2], [3, 4]])
    >>> lucid.repeat(x, 2).tolist()
    [[1, 2], [1, 2], [3, 4], [3, 4]]
    >>> lucid.repeat(x, 2, dim=1).tolist()
    [[1, 1, 2, 2], [3, 3, 4, 4]]
    >>> x.repeat(1, 2).tolist()
    [[1, 2, 1, 2], [3, 4, 3, 4]]
    """
    import lucid

    input = _as_tensor(input)
    if input.ndim == 0:
        raise RuntimeError("repeat: expected a tensor with at least 1 dim, got a 0-d tensor (use Tensor.repeat "
                           "to tile, or repeat_interleave)")
    return lucid.repeat_interleave(input, repeats, dim=0 if dim is None else dim)


@tensor_method("squeeze_all")
def _squeeze_all(self):
    """``Tensor.squeeze_all()``: every size-1 dim removed (``squeeze()`` with no dim)."""
    return self.squeeze()


@tensor_method("cube_")
def _cube_(self):
    """``Tensor.cube_()``: ``self ** 3`` in place (an in-place op: PyTorch's rules for leaves)."""
    return self.pow_(3)


@tensor_method("pad")
def _pad_method(self, pad, mode="constant", value=None):
    """``Tensor.pad(pad, mode, value)``: :func:`lucid.pad` as a method (Lucid 3 has it)."""
    import lucid

    return lucid.pad(self, pad, mode=mode, value=value)


@tensor_method("eval")
def _eval(self):
    """``Tensor.eval()``: ``self``. Lucid 3 forces its lazy Metal graph here; NumPy and CuPy
    compute eagerly, so there is nothing to force."""
    return self


# ----------------------------------------------------------------------------- statistics


def histogram2d(x, y, bins=10, range=None, density=False, weights=None):
    """2-D histogram of the pairs ``(x[i], y[i])`` (NumPy's ``histogram2d``, through
    :func:`lucid.histogramdd`).

    Parameters
    ----------
    x, y : Tensor
        1-D samples of the same length (floating point).
    bins : int or (int, int) or (Tensor, Tensor)
        Bin counts per axis, or the bin edges of each axis.
    range : ((float, float), (float, float)), optional
        ``((xmin, xmax), (ymin, ymax))``; default: each sample's span.
    density : bool
        Normalise to a density (integral 1).
    weights : Tensor, optional
        A weight per sample (NumPy's parameter order: ``density`` comes first, as in Lucid 3).

    Returns
    -------
    (Tensor, Tensor, Tensor)
        ``(hist, xedges, yedges)``; ``hist[i, j]`` counts samples in x-bin ``i`` and y-bin ``j``.

    Examples
    --------
    >>> import lucid
    >>> h, xe, ye = lucid.histogram2d(lucid.tensor([0.0, 1.0]), lucid.tensor([0.0, 1.0]), bins=2)
    >>> h.tolist()
    [[1.0, 0.0], [0.0, 1.0]]
    """
    import lucid

    x, y = _as_tensor(x), _as_tensor(y)
    if x.ndim != 1 or y.ndim != 1 or x.shape[0] != y.shape[0]:
        raise ValueError(f"histogram2d: x and y must be 1-D and of one length, got shapes "
                         f"{tuple(x.shape)} and {tuple(y.shape)}")
    flat_range = None if range is None else [float(v) for pair in range for v in pair]
    if isinstance(bins, (tuple, list)) and len(bins) == 2 and all(isinstance(b, Tensor) for b in bins):
        bins = list(bins)
    hist, edges = lucid.histogramdd(lucid.stack([x, y], dim=-1), bins, range=flat_range, weight=weights,
                                    density=density)
    return hist, edges[0], edges[1]
