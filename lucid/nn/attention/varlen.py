"""``lucid.nn.attention.varlen`` (``torch.nn.attention.varlen``): attention over packed sequences.

``varlen_attn`` takes the tokens of a batch of sequences of different lengths packed along one
dimension, ``(total_tokens, heads, head_dim)``, with the cumulative sequence boundaries
``cu_seq`` (``[0, len_0, len_0 + len_1, ...]``), and attends within each sequence only. PyTorch
runs it on its flash-attention kernel (CUDA); Lucid composes it from
:func:`lucid.nn.functional.scaled_dot_product_attention` once per sequence, so autograd, forward
mode and ``vmap`` (over the heads/features, not the packed boundaries) come from those ops.
"""
from __future__ import annotations

import math
from typing import NamedTuple

__all__ = ["AuxRequest", "varlen_attn"]


class AuxRequest(NamedTuple):
    """Which auxiliary outputs :func:`varlen_attn` returns (``lse``: the log-sum-exp of the scores)."""

    lse: bool = False


def _boundaries(name, cu, total, limit, which):
    import lucid

    if not isinstance(cu, lucid.Tensor) or cu.ndim != 1 or cu.dtype.is_floating_point or cu.shape[0] < 1:
        raise ValueError(f"varlen_attn: {name} must be a 1-D integer tensor of cumulative sequence lengths, got "
                         f"{cu!r}" if not isinstance(cu, lucid.Tensor) else
                         f"varlen_attn: {name} must be a 1-D integer tensor of cumulative sequence lengths, got "
                         f"shape {tuple(cu.shape)} and dtype {cu.dtype}")
    b = [int(v) for v in cu.tolist()]
    if b[0] != 0 or any(e < s for s, e in zip(b, b[1:])) or b[-1] > total:
        raise ValueError(f"varlen_attn: {name} must start at 0, not decrease and end at most at the {total} "
                         f"packed {which} tokens, got {b}")
    longest = max((e - s for s, e in zip(b, b[1:])), default=0)
    if longest > limit:
        raise ValueError(f"varlen_attn: a sequence of {longest} {which} tokens is longer than max_{which[0]}={limit}")
    return b


def varlen_attn(query, key, value, cu_seq_q, cu_seq_k, max_q, max_k, *, return_aux=None, scale=None,
                window_size=(-1, -1), enable_gqa=False, seqused_k=None, block_table=None, num_splits=None):
    """Attention within each of the packed sequences, as ``torch.nn.attention.varlen.varlen_attn``.

    Sequence ``i`` is the query rows ``cu_seq_q[i]:cu_seq_q[i+1]`` attending to the key/value rows
    ``cu_seq_k[i]:cu_seq_k[i+1]``. ``window_size=(left, right)`` limits query ``t`` (of ``Lq``) to
    the keys ``s`` (of ``Lk``) with ``t + Lk - Lq - left <= s <= t + Lk - Lq + right`` (a negative
    bound is unlimited): ``(-1, -1)`` is full attention, ``(-1, 0)`` causal (aligned to the bottom
    right, as flash attention), ``(W, 0)`` a causal sliding window. A query with no key to attend
    to gives 0 (its ``lse`` is ``-inf``). Rows past ``cu_seq_q[-1]`` are 0.

    Parameters
    ----------
    query : Tensor
        ``(T_q, H_q, D)``.
    key, value : Tensor
        ``(T_k, H_kv, D)`` and ``(T_k, H_kv, D_v)``; ``H_kv == H_q`` unless ``enable_gqa``.
    cu_seq_q, cu_seq_k : Tensor
        ``(N + 1,)`` integer cumulative lengths.
    max_q, max_k : int
        Upper bounds on the sequence lengths (checked).
    return_aux : AuxRequest, optional
        ``AuxRequest(lse=True)`` also returns the log-sum-exp of the scaled, masked scores, ``(T_q, H_q)``.
    scale : float, optional
        Default ``1 / sqrt(D)``.
    window_size : tuple of int
        ``(left, right)``, see above.
    enable_gqa : bool
        Allow ``H_q`` to be a multiple of ``H_kv`` (each key/value head serves ``H_q / H_kv`` query heads).
    seqused_k, block_table, num_splits
        PyTorch's paged-KV-cache and kernel options; Lucid has no paged cache and refuses
        ``seqused_k``/``block_table`` (``NotImplementedError``); ``num_splits`` is accepted and unused.

    Returns
    -------
    Tensor or (Tensor, Tensor)
        ``(T_q, H_q, D_v)``, and the ``lse`` when asked for.

    Examples
    --------
    >>> import lucid
    >>> from lucid.nn.attention.varlen import varlen_attn
    >>> q = lucid.ones(5, 2, 4)
    >>> cu = lucid.tensor([0, 2, 5], dtype=lucid.int32)
    >>> varlen_attn(q, q, q, cu, cu, 3, 3, window_size=(-1, 0)).shape
    (5, 2, 4)
    """
    import lucid
    import lucid.nn.functional as F

    if seqused_k is not None or block_table is not None:
        raise NotImplementedError("varlen_attn: seqused_k and block_table (a paged KV cache) are not supported in "
                                  "Lucid")
    if cu_seq_k is None:
        raise ValueError("varlen_attn: cu_seq_k is required when block_table is not given")
    for nm, t in (("query", query), ("key", key), ("value", value)):
        if not isinstance(t, lucid.Tensor) or t.ndim != 3:
            raise ValueError(f"varlen_attn: {nm} must be a 3-D tensor (tokens, heads, head_dim), got "
                             f"{tuple(t.shape) if isinstance(t, lucid.Tensor) else type(t).__name__}")
    if query.shape[2] != key.shape[2] or key.shape[:2] != value.shape[:2]:
        raise ValueError(f"varlen_attn: incompatible shapes query {tuple(query.shape)}, key {tuple(key.shape)}, "
                         f"value {tuple(value.shape)} (expected (T_q, H, D), (T_k, H_kv, D), (T_k, H_kv, D_v))")
    hq, hk = query.shape[1], key.shape[1]
    if hq != hk and not (enable_gqa and hq % hk == 0):
        raise ValueError(f"varlen_attn: {hq} query heads and {hk} key/value heads need enable_gqa=True and a "
                         f"multiple" if hq % hk == 0 else
                         f"varlen_attn: {hq} query heads are not a multiple of {hk} key/value heads")
    window_size = tuple(window_size)
    if len(window_size) != 2:
        raise ValueError(f"window_size must have length 2, got {len(window_size)}")
    left, right = (int(w) for w in window_size)
    bq = _boundaries("cu_seq_q", cu_seq_q, query.shape[0], max_q, "query")
    bk = _boundaries("cu_seq_k", cu_seq_k, key.shape[0], max_k, "key")
    if len(bq) != len(bk):
        raise ValueError(f"varlen_attn: cu_seq_q and cu_seq_k must describe as many sequences, got {len(bq) - 1} "
                         f"and {len(bk) - 1}")
    scale = 1.0 / math.sqrt(query.shape[2]) if scale is None else scale
    want_lse = return_aux is not None and return_aux.lse
    dev = query.device
    outs, lses = [], []
    for (sq, eq), (sk, ek) in zip(zip(bq, bq[1:]), zip(bk, bk[1:])):
        lq, lk = eq - sq, ek - sk
        q = query[sq:eq].transpose(0, 1)  # (H, Lq, D)
        k, v = key[sk:ek].transpose(0, 1), value[sk:ek].transpose(0, 1)
        t = lucid.arange(lq, device=dev).reshape(lq, 1) + (lk - lq)
        s = lucid.arange(lk, device=dev).reshape(1, lk)
        allowed = lucid.ones(lq, lk, dtype=lucid.bool, device=dev)
        if left >= 0:
            allowed = allowed & (s >= t - left)
        if right >= 0:
            allowed = allowed & (s <= t + right)
        outs.append(F.scaled_dot_product_attention(q, k, v, attn_mask=allowed, scale=scale,
                                                   enable_gqa=enable_gqa).transpose(0, 1))
        if want_lse:
            if hq != hk:
                k = k.repeat_interleave(hq // hk, dim=0)
            scores = (q @ k.transpose(-2, -1)) * scale
            scores = scores.masked_fill(~allowed, -math.inf)
            lses.append(lucid.logsumexp(scores, dim=-1).transpose(0, 1))  # (Lq, H)
    tail = query.shape[0] - bq[-1]
    if tail or not outs:
        outs.append(lucid.zeros(tail, hq, value.shape[2], dtype=query.dtype, device=dev))
        lses.append(lucid.full((tail, hq), -math.inf, dtype=query.dtype, device=dev))
    out = lucid.cat(outs, dim=0) if len(outs) > 1 else outs[0]
    if want_lse:
        return out, (lucid.cat(lses, dim=0) if len(lses) > 1 else lses[0])
    return out
