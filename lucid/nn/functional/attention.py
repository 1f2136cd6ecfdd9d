"""Attention: ``scaled_dot_product_attention`` and the multi-head attention forward.

Both are composites of ``matmul``, ``softmax`` and masking, so gradients, jvp and vmap come
from those primitives. Mask conventions follow PyTorch, which differ between the two:
in ``scaled_dot_product_attention`` a boolean ``attn_mask`` is True where attention is
*allowed*; in ``multi_head_attention_forward`` (``nn.MultiheadAttention``) boolean
``attn_mask``/``key_padding_mask`` are True where attention is *forbidden*. Float masks
are added to the scores in both.
"""
from __future__ import annotations

import math

import numpy as np

from .activation import softmax
from .dropout import dropout
from .linear import linear
from ._opmath import in_float32 as _in_float32, is_half as _is_half

__all__ = ["scaled_dot_product_attention", "multi_head_attention_forward"]

# The SDPA backends ``lucid.nn.attention.sdpa_kernel`` allows (None: any); Lucid has the math one.
ALLOWED_BACKENDS = [None]


def _lucid():
    import lucid

    return lucid


def _neg_inf_where(mask, dtype):
    """Additive mask: ``-inf`` where the boolean ``mask`` is True, else 0 (on the mask's device)."""
    return _lucid().where(mask, -np.inf, 0.0).to(dtype)


def _causal(L, S, dtype, device):
    """Additive causal mask (-inf above the diagonal), on ``device``."""
    return _lucid().tensor(np.where(np.tri(L, S, dtype=bool), 0.0, -np.inf).astype(dtype), device=device)


def _additive(mask, dtype, forbid_when_true, op):
    if mask is None:
        return None
    if mask.dtype == np.bool_:
        return _neg_inf_where(mask if forbid_when_true else _lucid().logical_not(mask), dtype)
    if mask.dtype.kind != "f":
        raise RuntimeError(f"{op}: only bool and floating types of masks are supported, got {mask.dtype}")
    return mask.to(dtype)


def _repeat_heads(t, r):
    """(..., Hk, S, E) -> (..., Hk*r, S, E), each head repeated r times (grouped-query attention)."""
    if r == 1:
        return t
    s = tuple(t.shape)
    t = t.unsqueeze(-3).expand(*s[:-2], r, *s[-2:])
    return t.reshape(*s[:-3], s[-3] * r, *s[-2:])


def _check_backends():
    from ..attention import SDPBackend

    if SDPBackend.MATH not in ALLOWED_BACKENDS[0]:
        names = ", ".join(sorted(b.name for b in ALLOWED_BACKENDS[0])) or "none"
        raise RuntimeError(f"scaled_dot_product_attention: no available kernel: sdpa_kernel allows {names}, and "
                           "Lucid has the math implementation only (SDPBackend.MATH)")


def scaled_dot_product_attention(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None,
                                 enable_gqa=False):
    """``softmax(q k^T * scale + mask) v`` over the last two dims, as PyTorch's function.

    ``attn_mask`` is boolean (True = may attend), float (added to the scores) or a
    :class:`lucid.nn.attention.bias.CausalBias`; ``is_causal`` masks out the upper triangle;
    ``scale`` defaults to ``1/sqrt(E)``.
    Rows whose every score is masked give 0 (and a zero gradient), as PyTorch's does.

    Parameters
    ----------
    query : Tensor
        (..., L, E).
    key, value : Tensor
        (..., S, E) and (..., S, Ev).
    attn_mask : Tensor or CausalBias, optional
        Bool (True = may attend), float (added to the scores), or a causal bias
        (``causal_upper_left`` / ``causal_lower_right``).
    dropout_p : float
        Dropout on the weights.
    is_causal : bool
        Apply a causal mask.
    scale : float, optional
        Default ``1 / sqrt(E)``.

    Examples
    --------
    >>> import lucid, lucid.nn.functional as F
    >>> q = k = v = lucid.ones(2, 3, 4)
    >>> F.scaled_dot_product_attention(q, k, v, is_causal=True).shape
    (2, 3, 4)
    """
    lucid = _lucid()
    if attn_mask is not None and not isinstance(attn_mask, lucid.Tensor):
        from ..attention.bias import CausalBias  # lazily: the bias module is only needed for its masks

        if isinstance(attn_mask, CausalBias):
            return attn_mask._dispatch(query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa)
    if ALLOWED_BACKENDS[0] is not None:
        _check_backends()
    q, k, v = (lucid.as_tensor(t) for t in (query, key, value))
    if _is_half(q):  # See NOTE [Half composites]
        return _in_float32(lambda q, k, v, m: scaled_dot_product_attention(q, k, v, m, dropout_p, is_causal, scale,
                                                                           enable_gqa), q, k, v, attn_mask)
    if q.ndim < 2 or k.ndim < 2 or v.ndim < 2 or q.shape[-1] != k.shape[-1] or k.shape[-2] != v.shape[-2]:
        raise RuntimeError(f"scaled_dot_product_attention: incompatible shapes query {tuple(q.shape)}, key "
                           f"{tuple(k.shape)}, value {tuple(v.shape)} (expected (..., L, E), (..., S, E), (..., S, Ev))")
    if enable_gqa and q.ndim >= 3 and k.shape[-3] != q.shape[-3]:
        if q.shape[-3] % k.shape[-3]:
            raise RuntimeError(f"scaled_dot_product_attention: {q.shape[-3]} query heads are not a multiple of "
                               f"{k.shape[-3]} key/value heads")
        r = q.shape[-3] // k.shape[-3]
        k, v = _repeat_heads(k, r), _repeat_heads(v, r)
    L, S = q.shape[-2], k.shape[-2]
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    scores = (q @ k.transpose(-2, -1)) * scale
    if is_causal:
        if attn_mask is not None:
            raise RuntimeError("scaled_dot_product_attention: explicit attn_mask should not be set when is_causal=True")
        scores = scores + _causal(L, S, scores.dtype, scores.device)
    mask = _additive(attn_mask, scores.dtype, False, "scaled_dot_product_attention")
    if mask is not None:
        scores = scores + mask
        # A row whose every score is -inf attends to nothing: its output is 0, as PyTorch's
        # (2.5+) safe softmax gives, with a zero gradient; a plain softmax gives NaN there. Its
        # scores become 0 first so that no NaN enters the softmax or its backward.
        dead = lucid.isneginf(scores).all(dim=-1, keepdim=True)
        scores = lucid.where(dead, 0.0, scores)
        attn = lucid.where(dead, 0.0, softmax(scores, dim=-1))
    else:
        attn = softmax(scores, dim=-1)
    if dropout_p > 0.0:
        attn = dropout(attn, dropout_p, True)
    return _in_query_layout(attn @ v, q)


def _in_query_layout(out, q):
    """``out`` laid out in memory as ``q`` is (PyTorch's kernels write the output in the query's
    dim order): a query made as ``x.view(B, L, H, E).transpose(1, 2)`` gives an output whose
    ``.transpose(1, 2).view(B, L, H * E)`` works, as the SDPA tutorial does."""
    if q.ndim < 3 or q._level or q.is_contiguous():
        return out
    strides = q.stride()
    order = sorted(range(q.ndim), key=lambda d: -strides[d])  # stable: ties keep their order
    if order == list(range(q.ndim)):
        return out
    inverse = sorted(range(q.ndim), key=lambda d: order[d])
    return out.permute(order).contiguous().permute(inverse)


def multi_head_attention_forward(query, key, value, *args, **kwargs):
    """Multi-head attention on (L, N, E) query and (S, N, E) key/value (sequence first), or
    unbatched (L, E) and (S, E).

    Takes PyTorch's signature ``(query, key, value, embed_dim_to_check, num_heads, in_proj_weight,
    in_proj_bias, bias_k, bias_v, add_zero_attn, dropout_p, out_proj_weight, out_proj_bias,
    training=True, key_padding_mask=None, need_weights=True, attn_mask=None,
    use_separate_proj_weight=False, q_proj_weight=None, k_proj_weight=None, v_proj_weight=None,
    static_k=None, static_v=None, average_attn_weights=True, is_causal=False)`` and Lucid's shorter
    one ``(query, key, value, num_heads, in_proj_weight=None, in_proj_bias=None, out_proj_weight=None,
    out_proj_bias=None, ...)`` (keywords as PyTorch's), told apart by the type of the fifth argument
    (PyTorch's ``num_heads``, an int) or an ``embed_dim_to_check`` keyword.

    Returns ``(output (L, N, E), weights)`` with weights (N, L, S) averaged over heads,
    (N, heads, L, S) if ``average_attn_weights=False``, or None if ``need_weights=False``.
    Boolean masks are True where attention is *not* allowed; float masks are added to the scores.
    ``bias_k``/``bias_v`` (1, 1, E) append one learned key/value, ``add_zero_attn`` one zero
    key/value, and the masks grow by one allowed column for each. As in PyTorch, with
    ``need_weights=False`` the attention runs through :func:`scaled_dot_product_attention`, so a
    query whose every key is masked gives 0; with ``need_weights=True`` it gives NaN.
    ``is_causal`` is a hint that ``attn_mask`` is causal (without ``attn_mask`` it raises); with
    ``need_weights=False`` and no ``key_padding_mask`` the causal mask replaces ``attn_mask``.

    Examples
    --------
    >>> import lucid, lucid.nn.functional as F
    >>> x = lucid.zeros(3, 1, 4)
    >>> out, w = F.multi_head_attention_forward(x, x, x, 2, lucid.zeros(12, 4), lucid.zeros(12), lucid.zeros(4, 4), lucid.zeros(4))
    >>> out.shape, w.shape
    ((3, 1, 4), (1, 3, 3))
    """
    if "embed_dim_to_check" in kwargs or (len(args) >= 2 and type(args[1]) is int):
        return _mha_torch_form(query, key, value, *args, **kwargs)
    return _mha_lucid_form(query, key, value, *args, **kwargs)


class _MHAAssertion(AssertionError, RuntimeError):
    """PyTorch checks these shapes with ``assert``; RuntimeError kept for earlier callers."""


def _mha_torch_form(query, key, value, embed_dim_to_check, num_heads, in_proj_weight, in_proj_bias, bias_k, bias_v,
                    add_zero_attn, dropout_p, out_proj_weight, out_proj_bias, training=True, key_padding_mask=None,
                    need_weights=True, attn_mask=None, use_separate_proj_weight=False, q_proj_weight=None,
                    k_proj_weight=None, v_proj_weight=None, static_k=None, static_v=None, average_attn_weights=True,
                    is_causal=False):
    if query.shape[-1] != embed_dim_to_check:
        raise _MHAAssertion(f"multi_head_attention_forward: was expecting embedding dimension of {embed_dim_to_check}, "
                            f"but got {query.shape[-1]}")
    if use_separate_proj_weight:
        in_proj_weight = None
    else:
        q_proj_weight = k_proj_weight = v_proj_weight = None
    return _mha(query, key, value, num_heads, in_proj_weight, in_proj_bias, out_proj_weight, out_proj_bias,
                key_padding_mask, need_weights, attn_mask, average_attn_weights, is_causal, dropout_p, training,
                q_proj_weight, k_proj_weight, v_proj_weight, bias_k, bias_v, add_zero_attn, static_k, static_v)


def _mha_lucid_form(query, key, value, num_heads, in_proj_weight=None, in_proj_bias=None, out_proj_weight=None,
                    out_proj_bias=None, key_padding_mask=None, need_weights=True, attn_mask=None,
                    average_attn_weights=True, is_causal=False, dropout_p=0.0, training=True, q_proj_weight=None,
                    k_proj_weight=None, v_proj_weight=None, bias_k=None, bias_v=None, add_zero_attn=False,
                    static_k=None, static_v=None):
    return _mha(query, key, value, num_heads, in_proj_weight, in_proj_bias, out_proj_weight, out_proj_bias,
                key_padding_mask, need_weights, attn_mask, average_attn_weights, is_causal, dropout_p, training,
                q_proj_weight, k_proj_weight, v_proj_weight, bias_k, bias_v, add_zero_attn, static_k, static_v)


def _check_kv(op, key, value, separate):
    """PyTorch asserts these; unchecked, a mismatch surfaces as a matmul error deep inside."""
    if separate:
        if tuple(key.shape[:2]) != tuple(value.shape[:2]):
            raise _MHAAssertion(f"{op}: key's sequence and batch dims {tuple(key.shape[:2])} do not match "
                                f"value's {tuple(value.shape[:2])}")
    elif tuple(key.shape) != tuple(value.shape):
        raise _MHAAssertion(f"{op}: key shape {tuple(key.shape)} does not match value shape {tuple(value.shape)}")


def _warn_mixed_masks(key_padding_mask, attn_mask):
    if key_padding_mask is None or attn_mask is None:
        return
    if (key_padding_mask.dtype == np.bool_) != (attn_mask.dtype == np.bool_):
        import warnings

        warnings.warn("Support for mismatched key_padding_mask and attn_mask is deprecated. Use same type for both "
                      "instead.", stacklevel=4)


def _append_column(mask):
    """One more allowed key (an additive 0) at the end of the last dim."""
    if mask is None:
        return None
    return _lucid().cat([mask, _lucid().zeros(*mask.shape[:-1], 1, dtype=mask.dtype, device=mask.device)], -1)


def _mha(query, key, value, num_heads, in_proj_weight, in_proj_bias, out_proj_weight, out_proj_bias,
         key_padding_mask, need_weights, attn_mask, average_attn_weights, is_causal, dropout_p, training,
         q_proj_weight, k_proj_weight, v_proj_weight, bias_k, bias_v, add_zero_attn, static_k, static_v):
    lucid = _lucid()
    op = "multi_head_attention_forward"
    unbatched = query.ndim == 2
    if unbatched:
        query, key, value = query.unsqueeze(1), key.unsqueeze(1), value.unsqueeze(1)
        if key_padding_mask is not None:
            key_padding_mask = key_padding_mask.unsqueeze(0)
    if query.ndim != 3 or key.ndim != 3 or value.ndim != 3:
        raise RuntimeError(f"{op}: expected query, key and value of 2 or 3 dims (all alike), got shapes "
                           f"{tuple(query.shape)}, {tuple(key.shape)}, {tuple(value.shape)}")
    _check_kv(op, key, value, in_proj_weight is None)
    L, N, E = query.shape
    S = key.shape[0]
    if attn_mask is not None and attn_mask.ndim not in (2, 3):
        raise _MHAAssertion(f"{op}: expected `attn_mask` to be `None`, 2-D or 3-D but found {attn_mask.ndim}-D "
                            "tensor instead")
    _warn_mixed_masks(key_padding_mask, attn_mask)
    if E % num_heads:
        raise _MHAAssertion(f"{op}: embed_dim {E} is not divisible by num_heads {num_heads}")
    hd = E // num_heads
    if is_causal and attn_mask is None:  # PyTorch's rule: is_causal is only a hint about attn_mask
        raise RuntimeError(f"{op}: Need attn_mask if specifying the is_causal hint. You may "
                           "use the Transformer module method `generate_square_subsequent_mask` to create this mask.")
    if (bias_k is None) != (bias_v is None):
        raise RuntimeError(f"{op}: bias_k and bias_v must be given together")
    # PyTorch's SDPA route trusts the hint (its own causal mask); elsewhere the mask is used as given
    causal_sdpa = is_causal and key_padding_mask is None and not need_weights
    mask = None if causal_sdpa else _additive(attn_mask, query.dtype, True, op)
    if mask is not None:
        expect = (N * num_heads, L, S) if mask.ndim == 3 else (L, S)
        if tuple(mask.shape) != expect:
            raise RuntimeError(f"{op}: the shape of the {mask.ndim}D attn_mask is {tuple(mask.shape)}, but should "
                               f"be {expect}")
        mask = mask.reshape(N, num_heads, L, S) if mask.ndim == 3 else mask
    kpm = _additive(key_padding_mask, query.dtype, True, op)
    if kpm is not None and tuple(kpm.shape) != (N, S):
        raise _MHAAssertion(f"{op}: expected key_padding_mask of shape {(N, S)}, got {tuple(kpm.shape)}")
    if in_proj_weight is not None:
        wq, wk, wv = in_proj_weight.chunk(3, 0)
    else:
        wq, wk, wv = q_proj_weight, k_proj_weight, v_proj_weight
    bq, bk, bv = in_proj_bias.chunk(3, 0) if in_proj_bias is not None else (None, None, None)
    q, k, v = linear(query, wq, bq), linear(key, wk, bk), linear(value, wv, bv)
    if bias_k is not None:  # one more (learned) key and value per example
        k = lucid.cat([k, bias_k.reshape(1, 1, E).expand(1, N, E)], 0)
        v = lucid.cat([v, bias_v.reshape(1, 1, E).expand(1, N, E)], 0)
        mask, kpm = _append_column(mask), _append_column(kpm)
    heads = lambda t: t.reshape(t.shape[0], N, num_heads, hd).permute(1, 2, 0, 3)  # noqa: E731  (N, h, n, hd)
    q, k, v = heads(q), heads(k), heads(v)
    if static_k is not None:
        k = static_k.reshape(N, num_heads, -1, hd)
    if static_v is not None:
        v = static_v.reshape(N, num_heads, -1, hd)
    if add_zero_attn:  # one more all-zero key and value
        zero = lucid.zeros(N, num_heads, 1, hd, dtype=k.dtype, device=k.device)
        k, v = lucid.cat([k, zero], 2), lucid.cat([v, zero], 2)
        mask, kpm = _append_column(mask), _append_column(kpm)
    if kpm is not None:
        kpm = kpm.reshape(N, 1, 1, kpm.shape[-1])
        mask = kpm if mask is None else mask + kpm
    p = dropout_p if training else 0.0
    if need_weights:
        scores = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hd))
        attn = softmax(scores if mask is None else scores + mask, dim=-1)
        out = (dropout(attn, p, True) if p > 0.0 else attn) @ v
    else:
        attn = None
        out = scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=p, is_causal=causal_sdpa)
    out = linear(out.permute(2, 0, 1, 3).reshape(L, N, E), out_proj_weight, out_proj_bias)
    if attn is not None and average_attn_weights:
        attn = attn.mean(dim=1)
    if unbatched:
        return out.squeeze(1), (attn.squeeze(0) if attn is not None else None)
    return out, attn
