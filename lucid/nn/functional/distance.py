"""Distances: ``pairwise_distance`` and ``pdist`` (``cosine_similarity`` lives with the losses).
Composites; norms use a square root whose derivative is 0 at 0, so equal points give a zero
gradient (as in PyTorch) rather than NaN."""
from __future__ import annotations

import numpy as np

from ..._core.tensor import _wrap
from ...ops._family import _as_tensor
from ._opmath import in_float32 as _in_float32, is_half as _is_half

__all__ = ["pairwise_distance", "pdist"]


def _lucid():
    import lucid

    return lucid


def _pnorm(d, p, dim, keepdim):
    """``||d||_p`` along ``dim`` with finite gradients at 0 (p >= 1 or inf). A float16 ``d`` is
    reduced in float32 and rounded once, as PyTorch's norm kernel (``d`` itself is float16 there
    too: PyTorch's composite rounds ``x1 - x2 + eps``). See NOTE [Half composites]."""
    if _is_half(d):
        return _in_float32(_pnorm, d, p, dim, keepdim)
    lucid = _lucid()
    if p == 2:
        return lucid.norm(d, 2, dim, keepdim)
    a = lucid.abs(d)
    if p == 1:
        return a.sum(dim, keepdim=keepdim)
    if p == float("inf"):
        return lucid.amax(a, dim, keepdim=keepdim)
    if p == -float("inf"):
        return lucid.amin(a, dim, keepdim=keepdim)
    if p == 0:  # a count: its gradient is 0, but it stays in the graph (PyTorch's backward gives zeros)
        zero = lucid.where(lucid.zeros_like(d, dtype=lucid.bool), d, 0.0)  # 0 (not d * 0: inf * 0 is NaN)
        return (d != 0).to(d.dtype).sum(dim, keepdim=keepdim) + zero.sum(dim, keepdim=keepdim)
    s = (a ** p).sum(dim, keepdim=keepdim)
    pos = s > 0
    return lucid.where(pos, lucid.where(pos, s, 1.0) ** (1.0 / p), 0.0)


def pairwise_distance(x1, x2, p=2.0, eps=1e-6, keepdim=False):
    """``||x1 - x2 + eps||_p`` over the last dim (inputs broadcast).

    Examples
    --------
    >>> import lucid, lucid.nn.functional as F
    >>> F.pairwise_distance(lucid.tensor([[3.0, 0.0]]), lucid.tensor([[0.0, 4.0]]), eps=0.0).tolist()
    [5.0]
    """
    x1, x2 = _as_tensor(x1), _as_tensor(x2)
    if x1.ndim == 0 or x2.ndim == 0:
        return _pnorm((x1 - x2 + eps).reshape(-1), p, -1, keepdim).reshape(())
    return _pnorm(x1 - x2 + eps, p, -1, keepdim)


def pdist(input, p=2.0):
    """Distances between every pair of rows of an (N, M) tensor: the upper triangle
    ``i < j`` of the distance matrix, row by row, shape ``(N (N - 1) / 2,)``.

    Examples
    --------
    >>> import lucid, lucid.nn.functional as F
    >>> F.pdist(lucid.tensor([[0.0, 0.0], [3.0, 4.0], [0.0, 1.0]], dtype=lucid.float64)).tolist()
    [5.0, 1.0, 4.242640687119285]
    """
    if input.ndim != 2:
        raise RuntimeError(f"pdist: only supports 2D tensors, got shape {tuple(input.shape)}")
    if p < 0:
        raise RuntimeError(f"pdist: only supports non-negative p values, got {p}")
    i, j = np.triu_indices(input.shape[0], 1)
    return _pnorm(input[_wrap(i)] - input[_wrap(j)], p, -1, False)
