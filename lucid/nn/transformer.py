"""``MultiheadAttention``, the Transformer encoder and decoder (layers and stacks) and
``Transformer``.

Parameter names follow PyTorch (``in_proj_weight``, ``in_proj_bias``, ``out_proj.weight``,
``self_attn.*``, ``multihead_attn.*``, ``linear1``, ``linear2``, ``norm1``..``norm3``,
``encoder.layers.0.*``, ``decoder.norm``), so a PyTorch state dict loads as is.
"""
from __future__ import annotations

import copy

from . import functional as F
from . import init
from .containers import ModuleList
from .dropout import Dropout
from .linear import Linear
from .module import Module
from .normalization import LayerNorm
from .functional.attention import _MHAAssertion
from .parameter import Parameter

__all__ = ["MultiheadAttention", "TransformerEncoderLayer", "TransformerEncoder", "TransformerDecoderLayer",
           "TransformerDecoder", "Transformer"]


class _MHAValueError(ValueError, AssertionError):
    """PyTorch asserts the head split; ValueError kept for earlier callers."""


def _lucid():
    import lucid

    return lucid


class MultiheadAttention(Module):
    """Multi-head attention ``softmax(QK^T/sqrt(d)) V`` over ``num_heads`` heads.

    ``forward(query, key, value, key_padding_mask=None, need_weights=True, attn_mask=None,
    average_attn_weights=True, is_causal=False)`` returns ``(output, weights)``. Inputs are
    (L, N, E), or (N, L, E) with ``batch_first=True``, or unbatched (L, E). Boolean masks are
    True where attention is *not* allowed; float masks are added to the scores. ``is_causal``
    is a hint that ``attn_mask`` is causal: as in PyTorch it needs ``attn_mask`` (else raises).
    ``add_bias_kv`` learns one more key and value (``bias_k``, ``bias_v``, (1, 1, E)) appended to
    every sequence; ``add_zero_attn`` appends an all-zero key and value.

    Parameters
    ----------
    embed_dim : int
        Model width E (split across the heads).
    num_heads : int
        Number of heads (must divide ``embed_dim``).
    dropout : float
        Dropout on the attention weights (training only).
    bias : bool
        Learn projection biases.
    kdim, vdim : int, optional
        Widths of key and value when they differ from ``embed_dim``.
    add_bias_kv, add_zero_attn : bool
        Append a learned, or a zero, key/value to every sequence.
    batch_first : bool
        Inputs are (N, L, E).

    Examples
    --------
    >>> import lucid, lucid.nn as nn
    >>> mha = nn.MultiheadAttention(8, 2, batch_first=True)
    >>> x = lucid.zeros(3, 5, 8)
    >>> out, w = mha(x, x, x)
    >>> out.shape, w.shape
    ((3, 5, 8), (3, 5, 5))
    """

    def __init__(self, embed_dim, num_heads, dropout=0.0, bias=True, add_bias_kv=False, add_zero_attn=False,
                 kdim=None, vdim=None, batch_first=False, device=None, dtype=None):
        super().__init__()
        if embed_dim <= 0 or num_heads <= 0 or embed_dim % num_heads:
            raise _MHAValueError(f"MultiheadAttention: embed_dim ({embed_dim}) must be divisible by num_heads "
                             f"({num_heads}) and both positive")
        lucid = _lucid()
        self.embed_dim, self.num_heads, self.dropout, self.batch_first = embed_dim, num_heads, dropout, batch_first
        self.kdim = kdim if kdim is not None else embed_dim
        self.vdim = vdim if vdim is not None else embed_dim
        self.head_dim = embed_dim // num_heads
        self._qkv_same_embed_dim = self.kdim == embed_dim and self.vdim == embed_dim
        if self._qkv_same_embed_dim:
            self.in_proj_weight = Parameter(lucid.empty(3 * embed_dim, embed_dim, dtype=dtype))
            self.register_parameter("q_proj_weight", None)
            self.register_parameter("k_proj_weight", None)
            self.register_parameter("v_proj_weight", None)
        else:
            self.register_parameter("in_proj_weight", None)
            self.q_proj_weight = Parameter(lucid.empty(embed_dim, embed_dim, dtype=dtype))
            self.k_proj_weight = Parameter(lucid.empty(embed_dim, self.kdim, dtype=dtype))
            self.v_proj_weight = Parameter(lucid.empty(embed_dim, self.vdim, dtype=dtype))
        if bias:
            self.in_proj_bias = Parameter(lucid.empty(3 * embed_dim, dtype=dtype))
        else:
            self.register_parameter("in_proj_bias", None)
        # PyTorch's class: quantize_dynamic leaves it alone (this module reads its weight directly)
        from .modules.linear import NonDynamicallyQuantizableLinear

        self.out_proj = NonDynamicallyQuantizableLinear(embed_dim, embed_dim, bias=bias, dtype=dtype)
        if add_bias_kv:
            self.bias_k = Parameter(lucid.empty(1, 1, embed_dim, dtype=dtype))
            self.bias_v = Parameter(lucid.empty(1, 1, embed_dim, dtype=dtype))
        else:
            self.bias_k = self.bias_v = None
        self.add_zero_attn = add_zero_attn
        self._reset_parameters()

    def _reset_parameters(self):
        if self._qkv_same_embed_dim:
            init.xavier_uniform_(self.in_proj_weight)
        else:
            for w in (self.q_proj_weight, self.k_proj_weight, self.v_proj_weight):
                init.xavier_uniform_(w)
        if self.in_proj_bias is not None:
            init.constant_(self.in_proj_bias, 0.0)
            init.constant_(self.out_proj.bias, 0.0)
        if self.bias_k is not None:
            init.xavier_normal_(self.bias_k)
            init.xavier_normal_(self.bias_v)

    def forward(self, query, key, value, key_padding_mask=None, need_weights=True, attn_mask=None,
                average_attn_weights=True, is_causal=False):
        if query.ndim not in (2, 3):
            raise _MHAAssertion(f"MultiheadAttention: query should be unbatched 2D or batched 3D tensor but "
                                f"received {query.ndim}-D query tensor")
        unbatched = query.ndim == 2
        if key.ndim != query.ndim or value.ndim != query.ndim:
            raise _MHAAssertion(f"MultiheadAttention: for {query.ndim}-D `query`, expected `key` and `value` to be "
                                f"{query.ndim}-D but found {key.ndim}-D and {value.ndim}-D tensors respectively")
        if unbatched:
            query, key, value = query.unsqueeze(1), key.unsqueeze(1), value.unsqueeze(1)
            if key_padding_mask is not None:
                key_padding_mask = key_padding_mask.unsqueeze(0)
        elif self.batch_first:
            query, key, value = (t.transpose(0, 1) for t in (query, key, value))
        if query.ndim != 3 or query.shape[-1] != self.embed_dim:
            raise _MHAAssertion(f"MultiheadAttention: expected query of shape (L, N, {self.embed_dim}), got "
                               f"{tuple(query.shape)}")
        out, weights = F.multi_head_attention_forward(
            query, key, value, self.num_heads, self.in_proj_weight, self.in_proj_bias, self.out_proj.weight,
            self.out_proj.bias, key_padding_mask=key_padding_mask, need_weights=need_weights,
            attn_mask=attn_mask, average_attn_weights=average_attn_weights, is_causal=is_causal,
            dropout_p=self.dropout, training=self.training, q_proj_weight=self.q_proj_weight,
            k_proj_weight=self.k_proj_weight, v_proj_weight=self.v_proj_weight, bias_k=self.bias_k,
            bias_v=self.bias_v, add_zero_attn=self.add_zero_attn)
        if unbatched:
            return out.squeeze(1), (weights.squeeze(0) if weights is not None else None)
        if self.batch_first:
            out = out.transpose(0, 1)
        return out, weights


def _activation(act):
    if callable(act):
        return act
    if act == "relu":
        return F.relu
    if act == "gelu":
        return F.gelu
    raise RuntimeError(f"Transformer layer: activation should be relu/gelu, not {act!r}")


class TransformerEncoderLayer(Module):
    """Self-attention + feed-forward block (post-norm by default, pre-norm with ``norm_first``).

    Parameters
    ----------
    d_model : int
        Model width.
    nhead : int
        Attention heads.
    dim_feedforward : int
        Hidden width of the feed-forward block.
    dropout : float
        Dropout rate (training only).
    activation : str or callable
        'relu', 'gelu' or a function.
    layer_norm_eps : float
        LayerNorm epsilon.
    batch_first : bool
        Inputs are (N, L, E).
    norm_first : bool
        Pre-norm instead of post-norm.

    Examples
    --------
    >>> import lucid, lucid.nn as nn
    >>> layer = nn.TransformerEncoderLayer(8, 2, dim_feedforward=16, batch_first=True)
    >>> layer(lucid.zeros(3, 5, 8)).shape
    (3, 5, 8)
    """

    def __init__(self, d_model, nhead, dim_feedforward=2048, dropout=0.1, activation="relu", layer_norm_eps=1e-5,
                 batch_first=False, norm_first=False, bias=True, device=None, dtype=None):
        super().__init__()
        self.self_attn = MultiheadAttention(d_model, nhead, dropout=dropout, bias=bias, batch_first=batch_first,
                                            dtype=dtype)
        self.linear1 = Linear(d_model, dim_feedforward, bias=bias, dtype=dtype)
        self.dropout = Dropout(dropout)
        self.linear2 = Linear(dim_feedforward, d_model, bias=bias, dtype=dtype)
        self.norm_first = norm_first
        self.norm1 = LayerNorm(d_model, eps=layer_norm_eps, bias=bias, dtype=dtype)
        self.norm2 = LayerNorm(d_model, eps=layer_norm_eps, bias=bias, dtype=dtype)
        self.dropout1 = Dropout(dropout)
        self.dropout2 = Dropout(dropout)
        self.activation = _activation(activation)
        # PyTorch's flag (1 relu, 2 gelu, 0 other), read by TransformerEncoder's nested-tensor check
        from .activation import GELU, ReLU

        act = self.activation
        self.activation_relu_or_gelu = (1 if act is F.relu or isinstance(act, ReLU)
                                        else 2 if act is F.gelu or isinstance(act, GELU) else 0)

    def forward(self, src, src_mask=None, src_key_padding_mask=None, is_causal=False):
        x = src
        if self.norm_first:
            x = x + self._sa_block(self.norm1(x), src_mask, src_key_padding_mask, is_causal)
            return x + self._ff_block(self.norm2(x))
        x = self.norm1(x + self._sa_block(x, src_mask, src_key_padding_mask, is_causal))
        return self.norm2(x + self._ff_block(x))

    def _sa_block(self, x, attn_mask, key_padding_mask, is_causal):
        x = self.self_attn(x, x, x, attn_mask=attn_mask, key_padding_mask=key_padding_mask, need_weights=False,
                           is_causal=is_causal)[0]
        return self.dropout1(x)

    def _ff_block(self, x):
        return self.dropout2(self.linear2(self.dropout(self.activation(self.linear1(x)))))


def _why_no_nested_fast_path(layer):
    """PyTorch's reasons, checked in its order ('' when none applies)."""
    name = "encoder_layer"
    if not isinstance(layer, TransformerEncoderLayer):
        return f"{name} was not TransformerEncoderLayer"
    if layer.norm_first:
        return f"{name}.norm_first was True"
    if not layer.self_attn.batch_first:
        return f"{name}.self_attn.batch_first was not True(use batch_first for better inference performance)"
    if not layer.self_attn._qkv_same_embed_dim:
        return f"{name}.self_attn._qkv_same_embed_dim was not True"
    if layer.self_attn.in_proj_bias is None:
        return f"{name}.self_attn was passed bias=False"
    if not layer.activation_relu_or_gelu:
        return f"{name}.activation_relu_or_gelu was not True"
    if layer.norm1.eps != layer.norm2.eps:
        return f"{name}.norm1.eps was not equal to {name}.norm2.eps"
    if layer.self_attn.num_heads % 2 == 1:
        return f"{name}.self_attn.num_heads is odd"
    return ""


class TransformerEncoder(Module):
    """A stack of ``num_layers`` deep copies of ``encoder_layer``, then an optional ``norm``.

    Parameters
    ----------
    encoder_layer : TransformerEncoderLayer
        The layer to copy.
    num_layers : int
        How many copies to stack.
    norm : Module, optional
        Applied to the output.

    Examples
    --------
    >>> import lucid, lucid.nn as nn
    >>> layer = nn.TransformerEncoderLayer(8, 2, dim_feedforward=16, batch_first=True)
    >>> nn.TransformerEncoder(layer, 2)(lucid.zeros(3, 5, 8)).shape
    (3, 5, 8)
    """

    def __init__(self, encoder_layer, num_layers, norm=None, enable_nested_tensor=True, mask_check=True):
        super().__init__()
        self.layers = ModuleList([copy.deepcopy(encoder_layer) for _ in range(num_layers)])
        self.num_layers = num_layers
        self.norm = norm
        # PyTorch's attributes and its warning when its nested-tensor fast path can't apply. Lucid
        # has no such fast path (padding masks are applied as masks), so they change nothing else.
        self.enable_nested_tensor = self.use_nested_tensor = enable_nested_tensor
        self.mask_check = mask_check
        why = _why_no_nested_fast_path(encoder_layer)
        if enable_nested_tensor and why:
            import warnings

            warnings.warn(f"enable_nested_tensor is True, but self.use_nested_tensor is False because {why}",
                          UserWarning, stacklevel=2)
            self.use_nested_tensor = False

    def forward(self, src, mask=None, src_key_padding_mask=None, is_causal=None):
        x = src
        seq_dim = 1 if self.layers and self.layers[0].self_attn.batch_first and src.ndim == 3 else 0
        is_causal = _detect_is_causal_mask(mask, is_causal, src.shape[seq_dim])
        for layer in self.layers:
            x = layer(x, src_mask=mask, src_key_padding_mask=src_key_padding_mask, is_causal=is_causal)
        return self.norm(x) if self.norm is not None else x


def generate_square_subsequent_mask(sz, device=None, dtype=None):
    """A float (sz, sz) causal mask: ``-inf`` above the diagonal, 0 elsewhere.

    Examples
    --------
    >>> import lucid.nn as nn
    >>> nn.Transformer.generate_square_subsequent_mask(2).tolist()
    [[0.0, -inf], [0.0, 0.0]]
    """
    lucid = _lucid()
    dtype = dtype if dtype is not None else lucid.float32
    return lucid.triu(lucid.full((sz, sz), float("-inf"), dtype=dtype, device=device), diagonal=1)


def _detect_is_causal_mask(mask, is_causal=None, size=None):
    """PyTorch's rule: ``is_causal`` if given, else whether ``mask`` equals the causal mask."""
    if is_causal is not None:
        return bool(is_causal)
    if mask is None:
        return False
    sz = size if size is not None else mask.shape[-2]
    if tuple(mask.shape) != (sz, sz):
        return False
    causal = generate_square_subsequent_mask(sz, device=mask.device, dtype=mask.dtype if mask.dtype.kind == "f" else None)
    if mask.dtype.kind == "b":
        causal = causal != 0
    return bool((mask.detach() == causal).all().item())  # a read back, as PyTorch's torch.equal


class TransformerDecoderLayer(Module):
    """Self-attention, cross-attention over ``memory`` and a feed-forward block, each with a
    residual connection (post-norm by default, pre-norm with ``norm_first``), as PyTorch's.

    ``forward(tgt, memory, tgt_mask=None, memory_mask=None, tgt_key_padding_mask=None,
    memory_key_padding_mask=None, tgt_is_causal=False, memory_is_causal=False)``.

    Parameters
    ----------
    d_model : int
        Model width.
    nhead : int
        Attention heads.
    dim_feedforward : int
        Hidden width of the feed-forward block.
    dropout : float
        Dropout rate (training only).
    activation : str or callable
        'relu', 'gelu' or a function.
    layer_norm_eps : float
        LayerNorm epsilon.
    batch_first : bool
        Inputs are (N, L, E).
    norm_first : bool
        Pre-norm instead of post-norm.

    Examples
    --------
    >>> import lucid, lucid.nn as nn
    >>> layer = nn.TransformerDecoderLayer(8, 2, dim_feedforward=16, batch_first=True)
    >>> layer(lucid.zeros(3, 4, 8), lucid.zeros(3, 6, 8)).shape
    (3, 4, 8)
    """

    def __init__(self, d_model, nhead, dim_feedforward=2048, dropout=0.1, activation="relu", layer_norm_eps=1e-5,
                 batch_first=False, norm_first=False, bias=True, device=None, dtype=None):
        super().__init__()
        self.self_attn = MultiheadAttention(d_model, nhead, dropout=dropout, bias=bias, batch_first=batch_first,
                                            dtype=dtype)
        self.multihead_attn = MultiheadAttention(d_model, nhead, dropout=dropout, bias=bias,
                                                 batch_first=batch_first, dtype=dtype)
        self.linear1 = Linear(d_model, dim_feedforward, bias=bias, dtype=dtype)
        self.dropout = Dropout(dropout)
        self.linear2 = Linear(dim_feedforward, d_model, bias=bias, dtype=dtype)
        self.norm_first = norm_first
        self.norm1 = LayerNorm(d_model, eps=layer_norm_eps, bias=bias, dtype=dtype)
        self.norm2 = LayerNorm(d_model, eps=layer_norm_eps, bias=bias, dtype=dtype)
        self.norm3 = LayerNorm(d_model, eps=layer_norm_eps, bias=bias, dtype=dtype)
        self.dropout1 = Dropout(dropout)
        self.dropout2 = Dropout(dropout)
        self.dropout3 = Dropout(dropout)
        self.activation = _activation(activation)

    def forward(self, tgt, memory, tgt_mask=None, memory_mask=None, tgt_key_padding_mask=None,
                memory_key_padding_mask=None, tgt_is_causal=False, memory_is_causal=False):
        x = tgt
        if self.norm_first:
            x = x + self._sa_block(self.norm1(x), tgt_mask, tgt_key_padding_mask, tgt_is_causal)
            x = x + self._mha_block(self.norm2(x), memory, memory_mask, memory_key_padding_mask,
                                    memory_is_causal)
            return x + self._ff_block(self.norm3(x))
        x = self.norm1(x + self._sa_block(x, tgt_mask, tgt_key_padding_mask, tgt_is_causal))
        x = self.norm2(x + self._mha_block(x, memory, memory_mask, memory_key_padding_mask, memory_is_causal))
        return self.norm3(x + self._ff_block(x))

    def _sa_block(self, x, attn_mask, key_padding_mask, is_causal):
        x = self.self_attn(x, x, x, attn_mask=attn_mask, key_padding_mask=key_padding_mask, need_weights=False,
                           is_causal=bool(is_causal))[0]
        return self.dropout1(x)

    def _mha_block(self, x, mem, attn_mask, key_padding_mask, is_causal):
        x = self.multihead_attn(x, mem, mem, attn_mask=attn_mask, key_padding_mask=key_padding_mask,
                                need_weights=False, is_causal=bool(is_causal))[0]
        return self.dropout2(x)

    def _ff_block(self, x):
        return self.dropout3(self.linear2(self.dropout(self.activation(self.linear1(x)))))


class TransformerDecoder(Module):
    """A stack of ``num_layers`` deep copies of ``decoder_layer``, then an optional ``norm``.

    Parameters
    ----------
    decoder_layer : TransformerDecoderLayer
        The layer to copy.
    num_layers : int
        How many copies to stack.
    norm : Module, optional
        Applied to the output.

    Examples
    --------
    >>> import lucid, lucid.nn as nn
    >>> layer = nn.TransformerDecoderLayer(8, 2, dim_feedforward=16)
    >>> nn.TransformerDecoder(layer, 2)(lucid.zeros(4, 3, 8), lucid.zeros(6, 3, 8)).shape
    (4, 3, 8)
    """

    def __init__(self, decoder_layer, num_layers, norm=None):
        super().__init__()
        self.layers = ModuleList([copy.deepcopy(decoder_layer) for _ in range(num_layers)])
        self.num_layers = num_layers
        self.norm = norm

    def forward(self, tgt, memory, tgt_mask=None, memory_mask=None, tgt_key_padding_mask=None,
                memory_key_padding_mask=None, tgt_is_causal=None, memory_is_causal=False):
        seq_dim = 1 if self.layers and self.layers[0].self_attn.batch_first and tgt.ndim == 3 else 0
        tgt_is_causal = _detect_is_causal_mask(tgt_mask, tgt_is_causal, tgt.shape[seq_dim])
        x = tgt
        for layer in self.layers:
            x = layer(x, memory, tgt_mask=tgt_mask, memory_mask=memory_mask,
                      tgt_key_padding_mask=tgt_key_padding_mask, memory_key_padding_mask=memory_key_padding_mask,
                      tgt_is_causal=tgt_is_causal, memory_is_causal=memory_is_causal)
        return self.norm(x) if self.norm is not None else x


class Transformer(Module):
    """The encoder-decoder Transformer of "Attention Is All You Need", laid out as PyTorch's
    (``encoder.layers.i.*``, ``encoder.norm``, ``decoder.layers.i.*``, ``decoder.norm``).

    ``forward(src, tgt, src_mask=None, tgt_mask=None, memory_mask=None,
    src_key_padding_mask=None, tgt_key_padding_mask=None, memory_key_padding_mask=None,
    src_is_causal=None, tgt_is_causal=None, memory_is_causal=False)``; inputs are (S, N, E)
    and (T, N, E), or batch first, or unbatched (S, E). Matrices are initialised with
    ``xavier_uniform_``.

    Parameters
    ----------
    d_model, nhead : int
        Model width and attention heads.
    num_encoder_layers, num_decoder_layers : int
        Depths of the two stacks.
    dim_feedforward : int
        Hidden width of the feed-forward blocks.
    dropout : float
        Dropout rate (training only).
    activation : str or callable
        'relu', 'gelu' or a function.
    custom_encoder, custom_decoder : Module, optional
        Used instead of the default stacks.
    layer_norm_eps : float
        LayerNorm epsilon.
    batch_first, norm_first, bias : bool
        As for the layers.

    Examples
    --------
    >>> import lucid, lucid.nn as nn
    >>> model = nn.Transformer(8, 2, 1, 1, dim_feedforward=16, batch_first=True)
    >>> tgt_mask = nn.Transformer.generate_square_subsequent_mask(4)
    >>> model(lucid.zeros(3, 5, 8), lucid.zeros(3, 4, 8), tgt_mask=tgt_mask).shape
    (3, 4, 8)
    """

    def __init__(self, d_model=512, nhead=8, num_encoder_layers=6, num_decoder_layers=6, dim_feedforward=2048,
                 dropout=0.1, activation="relu", custom_encoder=None, custom_decoder=None, layer_norm_eps=1e-5,
                 batch_first=False, norm_first=False, bias=True, device=None, dtype=None):
        super().__init__()
        if custom_encoder is not None:
            self.encoder = custom_encoder
        else:
            layer = TransformerEncoderLayer(d_model, nhead, dim_feedforward, dropout, activation, layer_norm_eps,
                                            batch_first, norm_first, bias, dtype=dtype)
            self.encoder = TransformerEncoder(layer, num_encoder_layers,
                                              LayerNorm(d_model, eps=layer_norm_eps, bias=bias, dtype=dtype))
        if custom_decoder is not None:
            self.decoder = custom_decoder
        else:
            layer = TransformerDecoderLayer(d_model, nhead, dim_feedforward, dropout, activation, layer_norm_eps,
                                            batch_first, norm_first, bias, dtype=dtype)
            self.decoder = TransformerDecoder(layer, num_decoder_layers,
                                              LayerNorm(d_model, eps=layer_norm_eps, bias=bias, dtype=dtype))
        self.d_model, self.nhead, self.batch_first = d_model, nhead, batch_first
        for p in self.parameters():
            if p.ndim > 1:
                init.xavier_uniform_(p)

    generate_square_subsequent_mask = staticmethod(generate_square_subsequent_mask)

    def forward(self, src, tgt, src_mask=None, tgt_mask=None, memory_mask=None, src_key_padding_mask=None,
                tgt_key_padding_mask=None, memory_key_padding_mask=None, src_is_causal=None, tgt_is_causal=None,
                memory_is_causal=False):
        batched = src.ndim == 3
        bdim = 0 if self.batch_first else 1
        if batched and (tgt.ndim != 3 or src.shape[bdim] != tgt.shape[bdim]):
            raise RuntimeError(f"Transformer: the batch number of src and tgt must be equal, got src "
                               f"{tuple(src.shape)} and tgt {tuple(tgt.shape)} (batch_first={self.batch_first})")
        if src.shape[-1] != self.d_model or tgt.shape[-1] != self.d_model:
            raise RuntimeError(f"Transformer: the feature number of src and tgt must be equal to d_model "
                               f"({self.d_model}), got {src.shape[-1]} and {tgt.shape[-1]}")
        memory = self.encoder(src, mask=src_mask, src_key_padding_mask=src_key_padding_mask, is_causal=src_is_causal)
        return self.decoder(tgt, memory, tgt_mask=tgt_mask, memory_mask=memory_mask,
                            tgt_key_padding_mask=tgt_key_padding_mask,
                            memory_key_padding_mask=memory_key_padding_mask, tgt_is_causal=tgt_is_causal,
                            memory_is_causal=memory_is_causal)
