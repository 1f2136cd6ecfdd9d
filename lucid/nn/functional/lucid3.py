"""``nn.functional`` names of upstream Lucid 3 that PyTorch lacks (See NOTE [Lucid 3 names]).

Fused linear + activation (upstream fuses the forward on its CPU engine in inference; here it is
the plain composition, the same values), the positional encodings upstream centralises
(sinusoidal 1-D / 2-D tables, rotary embedding) and two classification metrics. All are
composites of existing ops, so gradients, jvp and vmap come from the primitives they call.
"""
from __future__ import annotations

__all__ = ["fused_linear_relu", "fused_linear_gelu", "sinusoidal_embedding", "sinusoidal_embedding_2d",
           "apply_rotary_emb", "accuracy", "correct_count"]


def _L():
    import lucid

    return lucid


def fused_linear_relu(x, weight, bias):
    """``relu(x @ weight.T + bias)`` (Lucid 3's fused layer; computed as the composition).

    Examples
    --------
    >>> import lucid, lucid.nn.functional as F
    >>> F.fused_linear_relu(lucid.ones(1, 2), lucid.tensor([[1.0, -2.0]]), lucid.zeros(1)).tolist()
    [[0.0]]
    """
    from . import linear, relu

    return relu(linear(x, weight, bias))


def fused_linear_gelu(x, weight, bias, approximate="tanh"):
    """``gelu(x @ weight.T + bias, approximate)``; upstream's default is the tanh form.

    Examples
    --------
    >>> import lucid, lucid.nn.functional as F
    >>> F.fused_linear_gelu(lucid.ones(1, 2), lucid.zeros(1, 2), lucid.zeros(1)).tolist()
    [[0.0]]
    """
    from . import gelu, linear

    return gelu(linear(x, weight, bias), approximate=approximate)


def _angles(count, dim, base, device):
    """``p * base ** (-2 i / dim)`` for positions ``p < count`` and ``i < dim // 2``, float64."""
    L = _L()
    pos = L.arange(count, dtype=L.float64, device=device)
    omega = L.pow(float(base), L.arange(0, dim, 2, dtype=L.float64, device=device) * (-1.0 / dim))
    return pos[:, None] * omega[None, :]


def _interleaved(angles):
    """``[sin a_0, cos a_0, sin a_1, cos a_1, ...]`` along the last dim."""
    L = _L()
    return L.stack([L.sin(angles), L.cos(angles)], dim=-1).flatten(-2)


def sinusoidal_embedding(num_positions, embedding_dim, *, base=10_000.0, device=None, dtype=None):
    """The sinusoidal position table of "Attention Is All You Need".

    ``out[p, 2i] = sin(p / base**(2i/d))`` and ``out[p, 2i+1] = cos(p / base**(2i/d))``.

    Parameters
    ----------
    num_positions : int
        Rows (positions ``0 .. num_positions - 1``).
    embedding_dim : int
        Columns ``d``; must be even.
    base : float
        Frequency base (10 000 in the paper).
    device, dtype : optional
        Of the result (default device and dtype); computed in float64 and cast once.

    Examples
    --------
    >>> import lucid.nn.functional as F
    >>> [round(v, 4) for v in F.sinusoidal_embedding(2, 2).tolist()[1]]
    [0.8415, 0.5403]
    """
    if embedding_dim % 2:
        raise ValueError(f"sinusoidal_embedding requires an even embedding_dim, got {embedding_dim}")
    L = _L()
    table = _interleaved(_angles(num_positions, embedding_dim, base, device))
    return table.to(dtype if dtype is not None else L.get_default_dtype())


def sinusoidal_embedding_2d(height, width, embedding_dim, *, base=10_000.0, device=None, dtype=None):
    """DETR's 2-D sinusoidal table, ``(height * width, embedding_dim)`` in row-major order.

    The first half of each row encodes the column index ``c``, the second half the row index
    ``r``, each as the 1-D table of :func:`sinusoidal_embedding` at dim ``embedding_dim // 2``.

    Examples
    --------
    >>> import lucid.nn.functional as F
    >>> F.sinusoidal_embedding_2d(2, 3, 8).shape
    (6, 8)
    """
    if embedding_dim % 4:
        raise ValueError(f"sinusoidal_embedding_2d requires embedding_dim divisible by 4, got {embedding_dim}")
    L = _L()
    half = embedding_dim // 2
    cols = _interleaved(_angles(width, half, base, device))   # (W, half)
    rows = _interleaved(_angles(height, half, base, device))  # (H, half)
    grid = L.cat([cols[None, :, :].expand(height, width, half), rows[:, None, :].expand(height, width, half)],
                 dim=-1)
    return grid.reshape(height * width, embedding_dim).to(dtype if dtype is not None else L.get_default_dtype())


def _rotate_half(x):
    half = x.shape[-1] // 2
    return _L().cat([-x[..., half:], x[..., :half]], dim=-1)


def apply_rotary_emb(q, k, cos, sin, position_ids=None):
    """Rotary position embedding (RoPE, half-rotation layout of LLaMA / HF).

    ``x' = x * cos + rotate_half(x) * sin`` with ``rotate_half([a, b]) = [-b, a]`` over the last
    dim's two halves, for ``x`` in ``(q, k)``.

    Parameters
    ----------
    q, k : Tensor
        ``(*, seq_len, d_head)``.
    cos, sin : Tensor
        ``(max_pos, d_head)`` tables (:class:`lucid.nn.RotaryEmbedding`).
    position_ids : Tensor, optional
        Rows of the tables to use; default the first ``seq_len``.

    Returns
    -------
    (Tensor, Tensor)
        The rotated ``q`` and ``k``.

    Examples
    --------
    >>> import lucid, lucid.nn.functional as F
    >>> q = lucid.ones(1, 2, 4)
    >>> qr, kr = F.apply_rotary_emb(q, q, lucid.ones(3, 4), lucid.zeros(3, 4))
    >>> qr.tolist() == q.tolist()
    True
    """
    if cos.ndim != 2 or sin.ndim != 2 or q.shape[-1] % 2:
        raise ValueError(f"apply_rotary_emb: expected 2-D cos/sin and an even head dim, got q {tuple(q.shape)}, "
                         f"cos {tuple(cos.shape)}, sin {tuple(sin.shape)}")
    if position_ids is None:
        seq_len = q.shape[-2]
        cos_e, sin_e = cos[:seq_len], sin[:seq_len]
    else:
        cos_e, sin_e = cos[position_ids], sin[position_ids]
    return q * cos_e + _rotate_half(q) * sin_e, k * cos_e + _rotate_half(k) * sin_e


def accuracy(logits, target, *, dim=-1):
    """Mean top-1 accuracy ``(logits.argmax(dim) == target).float().mean()``, a 0-d tensor.

    Examples
    --------
    >>> import lucid, lucid.nn.functional as F
    >>> F.accuracy(lucid.tensor([[2.0, 1.0], [0.0, 1.0]]), lucid.tensor([0, 0])).item()
    0.5
    """
    return (logits.argmax(dim=dim) == target).float().mean()


def correct_count(logits, target, *, dim=-1):
    """Number of correct top-1 predictions as a 0-d int64 tensor.

    Examples
    --------
    >>> import lucid, lucid.nn.functional as F
    >>> F.correct_count(lucid.tensor([[2.0, 1.0], [0.0, 1.0]]), lucid.tensor([0, 0])).item()
    1
    """
    return (logits.argmax(dim=dim) == target).long().sum()

