"""``lucid.nn.attention.bias`` (``torch.nn.attention.bias``): causal biases for attention.

A :class:`CausalBias` is passed as ``attn_mask`` to
:func:`lucid.nn.functional.scaled_dot_product_attention`, which hands the call to
:meth:`CausalBias._dispatch`: the upper-left variant (and either variant when the query and
key lengths agree) is ``is_causal=True``; the lower-right variant is the materialized boolean
mask whose diagonal ends in the bottom-right corner, what PyTorch does on a CPU.

Unlike PyTorch's, Lucid's ``CausalBias`` is a plain object, not an empty ``Tensor``
subclass taking over ``scaled_dot_product_attention`` through ``__torch_function__``: that
function checks for it directly (so the protocol stays off for programs that use it), and no
other function accepts it as a tensor.
"""
from __future__ import annotations

import enum
import warnings

__all__ = ["causal_upper_left", "causal_lower_right", "CausalVariant", "CausalBias"]


class CausalVariant(enum.IntEnum):
    """Which corner a causal bias's diagonal is aligned to.

    ``UPPER_LEFT``: ``tril(ones(L, S))``, the ``is_causal=True`` mask. ``LOWER_RIGHT``:
    ``tril(ones(L, S), diagonal=S - L)``, the last query sees every key (decoding with a
    cache). The two agree when ``L == S``.

    Examples
    --------
    >>> from lucid.nn.attention.bias import CausalVariant
    >>> int(CausalVariant.UPPER_LEFT), int(CausalVariant.LOWER_RIGHT)
    (1, 2)
    """

    UPPER_LEFT = enum.auto()
    LOWER_RIGHT = enum.auto()


class CausalBias:
    """A causal (triangular) attention bias of ``seq_len_q`` queries by ``seq_len_kv`` keys.

    Made by :func:`causal_upper_left` or :func:`causal_lower_right`; see
    :class:`CausalVariant`. A lower-right bias with more queries than keys leaves the
    first ``seq_len_q - seq_len_kv`` rows with nothing to attend to (a warning says so).

    Examples
    --------
    >>> from lucid.nn.attention.bias import causal_lower_right
    >>> causal_lower_right(2, 3)
    tensor([[ True,  True, False],
            [ True,  True,  True]])
    """

    def __init__(self, variant, seq_len_q, seq_len_kv):
        if not isinstance(variant, CausalVariant):
            raise AssertionError(f"CausalBias: variant must be a CausalVariant, got {type(variant).__name__}")
        self.variant = variant
        self.seq_len_q = int(seq_len_q)
        self.seq_len_kv = int(seq_len_kv)
        if self.seq_len_q > self.seq_len_kv and variant == CausalVariant.LOWER_RIGHT:
            warnings.warn("Lower right causal bias will produce NaNs in the output when seq_len_q > seq_len_kv!",
                          stacklevel=2)

    def _materialize(self, device=None):
        """The boolean (seq_len_q, seq_len_kv) mask, True where attention is allowed (on the CPU by default)."""
        import lucid

        ones = lucid.ones(self.seq_len_q, self.seq_len_kv, dtype=lucid.bool, device=device or "cpu")
        if self.variant == CausalVariant.UPPER_LEFT:
            return lucid.tril(ones)
        return lucid.tril(ones, diagonal=self.seq_len_kv - self.seq_len_q)

    @staticmethod
    def _dispatch(query, key, value, attn_mask, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
        """``scaled_dot_product_attention`` with ``attn_mask`` a :class:`CausalBias`."""
        from ..functional.attention import scaled_dot_product_attention as sdpa

        if is_causal:
            raise ValueError("CausalBias should not be used with causal=True")
        if attn_mask.seq_len_q == attn_mask.seq_len_kv or attn_mask.variant == CausalVariant.UPPER_LEFT:
            return sdpa(query, key, value, attn_mask=None, dropout_p=dropout_p, is_causal=True, scale=scale,
                        enable_gqa=enable_gqa)
        if attn_mask.variant == CausalVariant.LOWER_RIGHT:
            import lucid

            mask = attn_mask._materialize(lucid.as_tensor(query).device)
            return sdpa(query, key, value, attn_mask=mask, dropout_p=dropout_p, is_causal=False, scale=scale,
                        enable_gqa=enable_gqa)
        raise ValueError(f"CausalBias.variant must be a CausalVariant type, but found: {attn_mask.variant}")

    def __repr__(self):
        return repr(self._materialize())


def causal_upper_left(*size):
    """The upper-left causal bias of ``size = (seq_len_q, seq_len_kv)``: ``is_causal=True``.

    Examples
    --------
    >>> from lucid.nn.attention.bias import causal_upper_left
    >>> causal_upper_left(2, 3)._materialize()
    tensor([[ True, False, False],
            [ True,  True, False]])
    """
    if len(size) != 2:
        raise AssertionError("causal_upper_left only supports 2D tensors")
    return CausalBias(CausalVariant.UPPER_LEFT, *size)


def causal_lower_right(*size):
    """The lower-right causal bias of ``size = (seq_len_q, seq_len_kv)``: diagonal offset ``S - L``.

    Examples
    --------
    >>> import lucid, lucid.nn.functional as F
    >>> from lucid.nn.attention.bias import causal_lower_right
    >>> q, kv = lucid.zeros(1, 2, 1), lucid.arange(3.).reshape(1, 3, 1)
    >>> F.scaled_dot_product_attention(q, kv, kv, attn_mask=causal_lower_right(2, 3))
    tensor([[[0.5],
             [1. ]]])
    """
    if len(size) != 2:
        raise AssertionError("causal_lower_right only supports 2D tensors")
    return CausalBias(CausalVariant.LOWER_RIGHT, *size)
