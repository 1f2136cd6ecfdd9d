"""``one_hot`` (a non-differentiable primitive, batchable) and ``embedding``."""
from __future__ import annotations

import numpy as np

from ..._core.backend import xp
from ..._core.grad_mode import no_grad
from ..._core.primitive import bind, defprim
from ...ops._family import _as_tensor, move_bdim

__all__ = ["one_hot", "embedding"]


def _one_hot_impl(t, *, num_classes):
    if t.size and (t.min() < 0 or t.max() >= num_classes):
        raise ValueError(f"one_hot: class values must be in [0, {num_classes}), got range "
                         f"[{t.min()}, {t.max()}] for indices of shape {t.shape}")
    return (t[..., None] == xp.arange(num_classes)).astype(np.int64)


def _one_hot_batch(vals, bdims, num_classes):
    (t,), (b,) = vals, bdims
    return bind(one_hot_p, (move_bdim(t, b, 0),), {"num_classes": num_classes}), 0


# No gradient: the output is an integer encoding of the (integer) input.
one_hot_p = defprim("one_hot", _one_hot_impl, vjp=None, batch=_one_hot_batch,
                    jvp=lambda ns, primals, tangents, out, **p: None,
                    differentiable=False, save_inputs=False)


def one_hot(tensor, num_classes=-1):
    """One-hot encoding of integer class indices (new last dim of size ``num_classes``).

    ``num_classes=-1`` infers ``max + 1`` (needs concrete values: not inside ``vmap``).

    Parameters
    ----------
    tensor : Tensor
        Integer class indices.
    num_classes : int
        Number of classes (-1: the largest index + 1).

    Examples
    --------
    >>> import lucid, lucid.nn.functional as F
    >>> F.one_hot(lucid.tensor([0, 2]), 3)
    tensor([[1, 0, 0],
           [0, 0, 1]])
    """
    t = _as_tensor(tensor)
    if t.dtype.kind not in "iu":
        raise RuntimeError(f"one_hot: expected an integer (long) tensor of class indices, got {t.dtype}")
    if num_classes == -1:
        arr = t._data
        num_classes = int(arr.max()) + 1 if arr.size else 0
    return bind(one_hot_p, (t,), {"num_classes": int(num_classes)})


def embedding(input, weight, padding_idx=None, max_norm=None, norm_type=2.0,
              scale_grad_by_freq=False, sparse=False):
    """Look up rows of ``weight`` (``weight[input]``).

    The row at ``padding_idx`` is returned as is but receives no gradient. With
    ``max_norm``, the referenced rows are renormalised in place first (as PyTorch does).

    Parameters
    ----------
    input : Tensor
        Integer indices.
    weight : Tensor
        The table, (num_embeddings, embedding_dim).
    padding_idx : int, optional
        This row gets no gradient.
    max_norm : float, optional
        Renormalise looked-up rows (in place) to at most this norm.
    norm_type : float
        The p of that norm.

    Examples
    --------
    >>> import lucid, lucid.nn.functional as F
    >>> w = lucid.tensor([[0.0, 0.0], [1.0, 2.0]])
    >>> F.embedding(lucid.tensor([1, 1]), w)
    tensor([[1., 2.],
           [1., 2.]])
    """
    idx = _as_tensor(input)
    if idx.dtype.kind not in "iu":
        raise RuntimeError(f"embedding: indices must be an integer (long) tensor, got {idx.dtype}")
    if weight.ndim != 2:
        raise RuntimeError(f"embedding: weight must be 2-D, got shape {tuple(weight.shape)}")
    if scale_grad_by_freq or sparse:
        raise NotImplementedError("embedding: scale_grad_by_freq and sparse are not supported")
    if padding_idx is not None and padding_idx < 0:
        padding_idx += weight.shape[0]
    if max_norm is not None:
        _renorm_rows(weight, idx._data, max_norm, norm_type)
    out = weight[idx]
    if padding_idx is not None and weight.requires_grad:
        import lucid

        keep = (idx != padding_idx).unsqueeze(-1)
        out = lucid.where(keep, out, out.detach())
    return out


def _renorm_rows(weight, idx, max_norm, norm_type):
    with no_grad():
        rows = np.unique(idx)
        w = weight._data
        norms = np.linalg.norm(w[rows], ord=norm_type, axis=1)
        scale = np.where(norms > max_norm, max_norm / (norms + 1e-7), 1.0)
        w[rows] = w[rows] * scale[:, None].astype(w.dtype)
        weight._version[0] += 1
