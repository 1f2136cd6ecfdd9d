"""The quantizable multi-head attention (PyTorch's
``torch.ao.nn.quantizable.MultiheadAttention``): separate ``linear_Q``/``linear_K``/``linear_V``
projections and stubs around the float softmax so that eager ``prepare`` can observe them;
``convert`` makes ``lucid.ao.nn.quantized.MultiheadAttention``."""
from __future__ import annotations

import warnings

import lucid
from lucid import nn
from lucid._core.quantized import QuantizedTensor, quantize_per_tensor
from lucid.nn import functional as F

__all__ = ["MultiheadAttention"]


class MultiheadAttention(nn.MultiheadAttention):
    """A quantizable ``nn.MultiheadAttention`` (same arguments). The attention itself runs in
    float between ``dequant_*`` and ``quant_attn_output*`` stubs; ``is_causal`` is not
    supported (PyTorch's limitation).

    Examples
    --------
    >>> import lucid
    >>> from lucid.ao.nn.quantizable import MultiheadAttention
    >>> mha = MultiheadAttention(4, 2)
    >>> out, w = mha(lucid.randn(3, 2, 4), lucid.randn(5, 2, 4), lucid.randn(5, 2, 4))
    >>> tuple(out.shape), tuple(w.shape)
    ((3, 2, 4), (2, 3, 5))
    """

    _FLOAT_MODULE = nn.MultiheadAttention

    def __init__(self, embed_dim, num_heads, dropout=0.0, bias=True, add_bias_kv=False, add_zero_attn=False,
                 kdim=None, vdim=None, batch_first=False, device=None, dtype=None):
        from lucid.ao.nn.quantized import FloatFunctional
        from lucid.ao.quantization.stubs import DeQuantStub, QuantStub

        kw = {"device": device, "dtype": dtype}
        super().__init__(embed_dim, num_heads, dropout, bias, add_bias_kv, add_zero_attn, kdim, vdim, batch_first,
                         **kw)
        self.linear_Q = nn.Linear(self.embed_dim, self.embed_dim, bias=bias, **kw)
        self.linear_K = nn.Linear(self.kdim, self.embed_dim, bias=bias, **kw)
        self.linear_V = nn.Linear(self.vdim, self.embed_dim, bias=bias, **kw)
        self.out_proj = nn.Linear(self.embed_dim, self.embed_dim, bias=bias, **kw)
        self.q_scaling_product = FloatFunctional()
        self.quant_attn_output = QuantStub()
        self.quant_attn_output_weights = QuantStub()
        self.dequant_q, self.dequant_k, self.dequant_v = DeQuantStub(), DeQuantStub(), DeQuantStub()

    def _get_name(self):
        return "QuantizableMultiheadAttention"

    @classmethod
    def from_float(cls, other):
        """The observed (prepared) form of the float ``nn.MultiheadAttention`` ``other``."""
        from lucid.ao.quantization import prepare

        if type(other) is not cls._FLOAT_MODULE:
            raise AssertionError(f"Expected type {cls._FLOAT_MODULE}, got {type(other)}")
        if not hasattr(other, "qconfig"):
            raise AssertionError("The float module must have 'qconfig'")
        observed = cls(other.embed_dim, other.num_heads, other.dropout, other.in_proj_bias is not None,
                       other.bias_k is not None, other.add_zero_attn, other.kdim, other.vdim, other.batch_first)
        observed.bias_k, observed.bias_v = other.bias_k, other.bias_v
        observed.qconfig = other.qconfig
        observed.out_proj.weight, observed.out_proj.bias = other.out_proj.weight, other.out_proj.bias
        e, bias = other.embed_dim, other.in_proj_bias
        if other._qkv_same_embed_dim:
            weights = [other.in_proj_weight[i * e:(i + 1) * e, :] for i in range(3)]
        else:
            weights = [other.q_proj_weight, other.k_proj_weight, other.v_proj_weight]
        for i, (lin, w) in enumerate(zip((observed.linear_Q, observed.linear_K, observed.linear_V), weights)):
            lin.weight = nn.Parameter(w.detach(), w.requires_grad)
            lin.bias = None if bias is None else nn.Parameter(bias[i * e:(i + 1) * e].detach(), bias.requires_grad)
        observed.eval()
        return prepare(observed, inplace=True)

    def dequantize(self):
        """The float ``nn.MultiheadAttention`` with this module's (dequantized) weights.

        PyTorch 2.13's method raises (it writes in place into a leaf that requires grad, and
        its quantized class would build the quantizable module); this one returns the float
        module it describes."""
        fp = nn.MultiheadAttention(self.embed_dim, self.num_heads, self.dropout, _weight_bias(self.linear_Q)[1] is not None,
                                self.bias_k is not None, self.add_zero_attn, self.kdim, self.vdim, self.batch_first)
        if self.bias_k is not None:
            fp.bias_k = nn.Parameter(_float(self.bias_k))
        if self.bias_v is not None:
            fp.bias_v = nn.Parameter(_float(self.bias_v))
        w, b = _weight_bias(self.out_proj)
        fp.out_proj.weight = nn.Parameter(_float(w))
        if b is not None:
            fp.out_proj.bias = nn.Parameter(b.detach())
        (wq, bq), (wk, bk), (wv, bv) = (_weight_bias(m) for m in (self.linear_Q, self.linear_K, self.linear_V))
        with lucid.no_grad():
            if fp._qkv_same_embed_dim:
                fp.in_proj_weight.copy_(lucid.cat([_float(wq), _float(wk), _float(wv)], 0))
            else:
                fp.q_proj_weight = nn.Parameter(_float(wq))
                fp.k_proj_weight = nn.Parameter(_float(wk))
                fp.v_proj_weight = nn.Parameter(_float(wv))
            if fp.in_proj_bias is not None:
                fp.in_proj_bias.copy_(lucid.cat([bq.detach(), bk.detach(), bv.detach()], 0))
        return fp

    @classmethod
    def from_observed(cls, other):
        raise NotImplementedError("It looks like you are trying to prepare an MHA module. Please, see the examples "
                                  "on quantizable MHAs.")

    def forward(self, query, key, value, key_padding_mask=None, need_weights=True, attn_mask=None,
                average_attn_weights=True, is_causal=False):
        if attn_mask is not None and is_causal:
            raise AssertionError("Only allow causal mask or attn_mask")
        if is_causal:
            raise AssertionError("causal mask not supported by AO MHA module")
        if self.batch_first:
            query, key, value = (x.transpose(0, 1) for x in (query, key, value))
        tgt_len, bsz, embed_dim = query.size()
        if self.embed_dim != embed_dim:
            raise AssertionError(f"embed_dim mismatch: {self.embed_dim} != {embed_dim}")
        if key.size(0) != value.size(0) or key.size(1) != value.size(1):
            raise AssertionError(f"key and value size mismatch: key.size()={key.size()}, value.size()={value.size()}")
        head_dim = self.embed_dim // self.num_heads
        if head_dim * self.num_heads != self.embed_dim:
            raise AssertionError("embed_dim must be divisible by num_heads")
        q = self.q_scaling_product.mul_scalar(self.linear_Q(query), float(head_dim) ** -0.5)
        k, v = self.linear_K(key), self.linear_V(value)
        attn_mask = _check_attn_mask(attn_mask, query, key, bsz * self.num_heads)
        if key_padding_mask is not None and key_padding_mask.dtype == lucid.uint8:
            warnings.warn("Byte tensor for `key_padding_mask` in `nn.MultiheadAttention` is deprecated. Use bool "
                          "tensor instead.", stacklevel=3)
            key_padding_mask = key_padding_mask.to(lucid.bool)
        if (self.bias_k is None) != (self.bias_v is None):
            raise AssertionError("bias_k and bias_v must both be set or both be None")
        if self.bias_k is not None:
            k = lucid.cat([k, self.bias_k.repeat(1, bsz, 1)])
            v = lucid.cat([v, self.bias_v.repeat(1, bsz, 1)])
            attn_mask = None if attn_mask is None else F.pad(attn_mask, (0, 1))
            key_padding_mask = None if key_padding_mask is None else F.pad(key_padding_mask, (0, 1))
        q = q.contiguous().view(tgt_len, bsz * self.num_heads, head_dim).transpose(0, 1)
        k = k.contiguous().view(-1, bsz * self.num_heads, head_dim).transpose(0, 1)
        v = v.contiguous().view(-1, bsz * self.num_heads, head_dim).transpose(0, 1)
        src_len = k.size(1)
        if key_padding_mask is not None:
            if key_padding_mask.size(0) != bsz:
                raise AssertionError(f"key_padding_mask.size(0) must be {bsz}, got {key_padding_mask.size(0)}")
            if key_padding_mask.size(1) != src_len:
                raise AssertionError(f"key_padding_mask.size(1) must be {src_len}, got {key_padding_mask.size(1)}")
        if self.add_zero_attn:
            src_len += 1
            k, v = _append_zero(k), _append_zero(v)
            attn_mask = None if attn_mask is None else F.pad(attn_mask, (0, 1))
            key_padding_mask = None if key_padding_mask is None else F.pad(key_padding_mask, (0, 1))
        q, k, v = self.dequant_q(q), self.dequant_k(k), self.dequant_v(v)
        weights = lucid.bmm(q, k.transpose(1, 2))
        if attn_mask is not None:
            if attn_mask.dtype == lucid.bool:
                weights = weights.masked_fill(attn_mask, float("-inf"))
            else:
                weights = weights + attn_mask
        if key_padding_mask is not None:
            weights = weights.view(bsz, self.num_heads, tgt_len, src_len)
            weights = weights.masked_fill(key_padding_mask.unsqueeze(1).unsqueeze(2), float("-inf"))
            weights = weights.view(bsz * self.num_heads, tgt_len, src_len)
        weights = F.dropout(F.softmax(weights, dim=-1), p=self.dropout, training=self.training)
        out = lucid.bmm(weights, v)
        if self.batch_first:
            out = out.view(bsz, tgt_len, self.embed_dim)  # PyTorch's layout, kept for parity
        else:
            out = out.transpose(0, 1).contiguous().view(tgt_len, bsz, self.embed_dim)
        out = self.out_proj(self.quant_attn_output(out))
        weights = self.quant_attn_output_weights(weights)
        if not need_weights:
            return out, None
        weights = weights.view(bsz, self.num_heads, tgt_len, src_len)
        return out, (weights.mean(dim=1) if average_attn_weights else weights)


def _check_attn_mask(attn_mask, query, key, batch_heads):
    if attn_mask is None:
        return None
    if attn_mask.dtype == lucid.uint8:
        warnings.warn("Byte tensor for `attn_mask` in `nn.MultiheadAttention` is deprecated. Use bool tensor "
                      "instead.", stacklevel=4)
        attn_mask = attn_mask.to(lucid.bool)
    if not attn_mask.is_floating_point() and attn_mask.dtype != lucid.bool:
        raise AssertionError(f"Only float and bool types are supported for attn_mask, not {attn_mask.dtype}")
    if attn_mask.dim() == 2:
        attn_mask = attn_mask.unsqueeze(0)
        if list(attn_mask.size()) != [1, query.size(0), key.size(0)]:
            raise RuntimeError("The size of the 2D attn_mask is not correct.")
    elif attn_mask.dim() == 3:
        if list(attn_mask.size()) != [batch_heads, query.size(0), key.size(0)]:
            raise RuntimeError("The size of the 3D attn_mask is not correct.")
    else:
        raise RuntimeError(f"attn_mask's dimension {attn_mask.dim()} is not supported")
    return attn_mask


def _append_zero(t):
    zeros = lucid.zeros((t.size(0), 1) + tuple(t.shape[2:]))
    if isinstance(t, QuantizedTensor):  # zeros in t's own quantization, as PyTorch builds them
        zeros = quantize_per_tensor(zeros, t.q_scale(), t.q_zero_point(), t.dtype)
    return lucid.cat([t, zeros], dim=1)


def _weight_bias(linear):
    if callable(linear.weight):  # a quantized Linear keeps them packed
        return linear.weight(), linear.bias()
    return linear.weight, linear.bias


def _float(t):
    return (t.dequantize() if isinstance(t, QuantizedTensor) else t).detach()
