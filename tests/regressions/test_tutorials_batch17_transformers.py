"""huggingface/transformers' self-contained PyTorch pieces run on Lucid (``import lucid as torch``):

- ``activations.py``: ``NewGELUActivation`` (the tanh form with ``torch.pow(input, 3.0)``),
  ``GELUActivation`` (``nn.functional.gelu`` and the ``erf`` Python form), ``FastGELUActivation``,
  ``QuickGELUActivation``, ``ClippedGELUActivation``, ``SiLUActivation``, ``MishActivation``,
  ``LinearActivation`` and the ``ClassInstantier`` that builds ``ACT2FN`` from ``ACT2CLS``.
- ``modeling_attn_mask_utils.py``: ``AttentionMaskConverter`` (``to_causal_4d``, ``to_4d``,
  ``_make_causal_mask`` with ``torch.full(..., torch.finfo(dtype).min)``, ``masked_fill_`` by
  ``mask_cond < (mask_cond + 1).view(...)``, the past-key columns and the sliding window by ``tril``,
  ``_expand_mask``, ``_unmask_unattended``) and ``_prepare_4d_causal_attention_mask``.
- ``models/llama/modeling_llama.py`` (v4.38): ``LlamaRMSNorm``, ``LlamaRotaryEmbedding`` (``inv_freq``
  buffer, the cos/sin cache, the forward under ``torch.autocast(enabled=False)``), the linear-scaling
  variant, ``rotate_half``, ``apply_rotary_pos_emb``, ``LlamaMLP`` (also its ``pretraining_tp``
  split), ``repeat_kv``, the eager ``LlamaAttention`` (grouped key/value heads, the ``cache_position``
  slice of the 4-D mask), ``LlamaDecoderLayer``, ``LlamaModel`` with its ``causal_mask`` buffer and
  ``_update_causal_mask``, ``LlamaForCausalLM`` (shifted cross-entropy, ``prepare_inputs_for_generation``
  with left padding, ``_reorder_cache``) and ``cache_utils.DynamicCache`` (legacy-cache round trip).
- ``models/gpt2/modeling_gpt2.py``: ``GPT2Attention`` (the boolean ``bias`` buffer and ``masked_bias``,
  ``_attn`` with ``torch.where(causal_mask, ..., torch.full([], finfo.min))``,
  ``_upcast_and_reordered_attn`` with ``torch.baddbmm(torch.empty(...), ..., beta=0, alpha=...)``,
  ``layer_past``, ``prune_heads``), ``GPT2MLP``, ``GPT2Block``; ``pytorch_utils.py``'s ``Conv1D``
  (``torch.addmm``), ``prune_linear_layer``, ``prune_conv1d_layer``, ``prune_layer``,
  ``find_pruneable_heads_and_indices`` and ``apply_chunking_to_forward``.
- ``models/t5/modeling_t5.py``: ``T5LayerNorm`` (also in float16), ``T5Attention`` with
  ``_relative_position_bucket`` (bidirectional and causal), ``compute_bias``, the bias handed on with the
  mask in it, the decoder's key/value cache, cross attention and ``prune_heads`` (``position_bias[:,
  mask.bool()]``).
- ``models/bert/modeling_bert.py``: ``BertEmbeddings`` (the ``position_ids`` buffer made by ``expand``, the
  non-persistent ``token_type_ids`` buffer), ``BertSelfAttention`` (absolute, ``relative_key`` and
  ``relative_key_query`` by ``einsum``, the decoder's key/value cache), ``BertSelfOutput``,
  ``BertAttention.prune_heads``, ``BertIntermediate``, ``BertOutput``, ``BertLayer`` (feed-forward through
  ``apply_chunking_to_forward``), ``BertEncoder``, ``BertPooler``, ``BertModel`` with
  ``modeling_utils.ModuleUtilsMixin``'s ``get_extended_attention_mask`` (``(1.0 - mask) *
  torch.finfo(dtype).min``, the decoder's causal mask with a cached prefix), ``invert_attention_mask`` and
  ``get_head_mask``.
- ``generation/logits_process.py``: ``LogitsProcessorList``, ``MinLengthLogitsProcessor``
  (``torch.isin``), ``TemperatureLogitsWarper``, ``RepetitionPenaltyLogitsProcessor`` (``gather``/
  ``scatter``), ``TopPLogitsWarper`` (``sort``, ``softmax().cumsum``, ``scatter`` back),
  ``TopKLogitsWarper``, ``NoRepeatNGramLogitsProcessor``; and the greedy/sampling loop of
  ``generation/utils.py``'s ``_sample`` (``unfinished_sequences``, ``multinomial``, padding of the
  finished rows, the attention mask grown by ``new_ones``) on the tiny Llama with its key/value cache.

Sizes are tiny and data synthetic; each page is a function of the module handed to it as ``torch``.
Checks without PyTorch: NumPy recomputations (GELU/erf closed forms, RMSNorm, rotary embedding, grouped
attention with masks, the whole Llama and GPT-2 forwards, the processors), a pure-Python T5 bucket
loop, causality (changing later tokens leaves earlier outputs alone), cached incremental decoding equal
to the full forward, left-padded rows equal to their unpadded forward, pruned heads equal to the
unpruned layer with those heads zeroed, float64 finite differences and training loss going down.
The ``*_torch_parity`` tests run the same text on PyTorch with the same weights.

Adapted: the library's configuration classes are small dataclasses; ``PreTrainedModel`` is reduced
to ``post_init`` applying ``_init_weights``; ``ModelOutput`` to an ordered dictionary with attribute
and integer access; ``logger`` to a stub; ``add_start_docstrings`` decorators are dropped; the
``cache_utils.DynamicCache`` kept is its v4.38 legacy-cache subset; the decoding loop keeps
``_sample``'s body without its streamer, stopping-criteria and output-dictionary plumbing (stopping at
``max_length``). ``ACT2FN`` is built by ``ClassInstantier`` from a ``ACT2CLS`` holding the classes of
the older ``activations.py`` kept here. Gradients are taken with ``torch.autograd.grad(y, [x])``
(README "Differences from PyTorch": a bare ``x`` gives Lucid's bare gradient). ``BertModel`` (v4.4 text) calls the newer mixin's
``get_extended_attention_mask`` without its deprecated ``device`` argument. Where the stored versions
differ from what one might expect, the test follows the source: this ``_make_causal_mask``'s sliding
window lets a query see ``window`` earlier tokens besides itself; this ``BertEmbeddings.forward`` always
takes its ``position_ids`` from the buffer; Llama's softmax (``dtype=torch.float32``) and ``logits.float()``
keep float32 roundings in a float64 model, so its finite differences take a wide step.

Fixed on the way: an ``expand`` that only adds size-1 dims (``torch.arange(n).expand((1, -1))``, BERT's
``position_ids`` buffer) was a read-only view, so ``load_state_dict`` into such a buffer (and ``copy_``)
raised; as in PyTorch, it is now a writable view (one that repeats elements still refuses writes).
"""
import inspect
import math
import warnings
from collections import OrderedDict
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Optional

import numpy as np
import pytest

import lucid
import lucid.nn  # noqa: F401
import lucid.nn.functional  # noqa: F401
import lucid.optim  # noqa: F401


def _np(t):
    return np.asarray(t.detach().cpu().numpy())


class _Logger:  # ``logging.get_logger(__name__)``, silenced
    def warning_once(self, *a, **k):
        pass

    warning = info = warning_once


logger = _Logger()


class ModelOutput(OrderedDict):  # ``utils.ModelOutput`` reduced: the fields set, by name or position
    def __init__(self, **kwargs):
        super().__init__((k, v) for k, v in kwargs.items() if v is not None)

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return self.get(name)

    def __getitem__(self, k):
        if isinstance(k, str):
            return OrderedDict.__getitem__(self, k)
        return tuple(self.values())[k]


# --------------------------------------------------------------------------- activations.py

def activations_page(torch):
    nn = torch.nn
    Tensor = torch.Tensor

    class NewGELUActivation(nn.Module):
        """
        Implementation of the GELU activation function currently in Google BERT repo (identical to OpenAI GPT). Also see
        the Gaussian Error Linear Units paper: https://arxiv.org/abs/1606.08415
        """

        def forward(self, input: Tensor) -> Tensor:
            return 0.5 * input * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (input + 0.044715 * torch.pow(input, 3.0))))

    class GELUActivation(nn.Module):
        def __init__(self, use_gelu_python: bool = False):
            super().__init__()
            if use_gelu_python:
                self.act = self._gelu_python
            else:
                self.act = nn.functional.gelu

        def _gelu_python(self, input: Tensor) -> Tensor:
            return input * 0.5 * (1.0 + torch.erf(input / math.sqrt(2.0)))

        def forward(self, input: Tensor) -> Tensor:
            return self.act(input)

    class FastGELUActivation(nn.Module):
        def forward(self, input: Tensor) -> Tensor:
            return 0.5 * input * (1.0 + torch.tanh(input * 0.7978845608 * (1.0 + 0.044715 * input * input)))

    class QuickGELUActivation(nn.Module):
        def forward(self, input: Tensor) -> Tensor:
            return input * torch.sigmoid(1.702 * input)

    class ClippedGELUActivation(nn.Module):
        def __init__(self, min: float, max: float):
            if min > max:
                raise ValueError(f"min should be < max (got min: {min}, max: {max})")

            super().__init__()
            self.min = min
            self.max = max

        def forward(self, x: Tensor) -> Tensor:
            return torch.clip(gelu(x), self.min, self.max)

    class SiLUActivation(nn.Module):
        def __init__(self):
            super().__init__()
            self.act = nn.functional.silu

        def _silu_python(self, input: Tensor) -> Tensor:
            return input * torch.sigmoid(input)

        def forward(self, input: Tensor) -> Tensor:
            return self.act(input)

    class MishActivation(nn.Module):
        def __init__(self):
            super().__init__()
            self.act = nn.functional.mish

        def _mish_python(self, input: Tensor) -> Tensor:
            return input * torch.tanh(nn.functional.softplus(input))

        def forward(self, input: Tensor) -> Tensor:
            return self.act(input)

    class LinearActivation(nn.Module):
        def forward(self, input: Tensor) -> Tensor:
            return input

    class ClassInstantier(OrderedDict):
        def __getitem__(self, key):
            content = super().__getitem__(key)
            cls, kwargs = content if isinstance(content, tuple) else (content, {})
            return cls(**kwargs)

    ACT2CLS = {
        "gelu": GELUActivation,
        "gelu_10": (ClippedGELUActivation, {"min": -10, "max": 10}),
        "gelu_fast": FastGELUActivation,
        "gelu_new": NewGELUActivation,
        "gelu_python": (GELUActivation, {"use_gelu_python": True}),
        "linear": LinearActivation,
        "mish": MishActivation,
        "quick_gelu": QuickGELUActivation,
        "relu": nn.ReLU,
        "sigmoid": nn.Sigmoid,
        "silu": SiLUActivation,
        "swish": SiLUActivation,
        "tanh": nn.Tanh,
    }
    ACT2FN = ClassInstantier(ACT2CLS)

    def get_activation(activation_string):
        if activation_string in ACT2FN:
            return ACT2FN[activation_string]
        else:
            raise KeyError(f"function {activation_string} not found in ACT2FN mapping {list(ACT2FN.keys())}")

    gelu = get_activation("gelu")
    return SimpleNamespace(ACT2FN=ACT2FN, get_activation=get_activation, SiLUActivation=SiLUActivation,
                           MishActivation=MishActivation)


def _erf(x):
    return np.vectorize(math.erf)(x)


def _act_np(name, x):
    gelu = 0.5 * x * (1 + _erf(x / math.sqrt(2)))
    return {
        "gelu": gelu,
        "gelu_python": gelu,
        "gelu_10": np.clip(gelu, -10, 10),
        "gelu_new": 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3))),
        "gelu_fast": 0.5 * x * (1 + np.tanh(x * 0.7978845608 * (1 + 0.044715 * x * x))),
        "quick_gelu": x / (1 + np.exp(-1.702 * x)),
        "silu": x / (1 + np.exp(-x)),
        "swish": x / (1 + np.exp(-x)),
        "mish": x * np.tanh(np.log1p(np.exp(x))),
        "linear": x,
        "relu": np.maximum(x, 0),
        "sigmoid": 1 / (1 + np.exp(-x)),
        "tanh": np.tanh(x),
    }[name]


ACT_X = np.array([-12.0, -3.1, -1.0, -0.4, 0.0, 0.3, 1.7, 4.2, 11.5])


def _activations_run(torch):
    p = activations_page(torch)
    x = torch.tensor(ACT_X, dtype=torch.float64, requires_grad=True)
    out, grads = {}, {}
    for name in p.ACT2FN:
        act = p.ACT2FN[name]
        y = act(x)
        (g,) = torch.autograd.grad(y.sum(), [x])  # a list: Lucid returns a bare gradient for a bare input
        out[name], grads[name] = y, g
    fresh = p.ACT2FN["gelu_10"] is not p.ACT2FN["gelu_10"]
    try:
        p.get_activation("nope")
        missing = None
    except KeyError as e:
        missing = str(e)
    return SimpleNamespace(out=out, grads=grads, fresh=fresh, missing=missing,
                           silu_python=p.SiLUActivation()._silu_python(x.detach()),
                           mish_python=p.MishActivation()._mish_python(x.detach()))


def test_transformers_activations():
    r = _activations_run(lucid)
    assert r.fresh  # ClassInstantier makes a new module at each lookup
    assert "function nope not found in ACT2FN mapping" in r.missing
    assert set(r.out) == {"gelu", "gelu_10", "gelu_fast", "gelu_new", "gelu_python", "linear", "mish",
                          "quick_gelu", "relu", "sigmoid", "silu", "swish", "tanh"}
    h = 1e-6
    for name, y in r.out.items():
        assert y.dtype == lucid.float64
        np.testing.assert_allclose(_np(y), _act_np(name, ACT_X), rtol=1e-12, atol=1e-12, err_msg=name)
        fd = (_act_np(name, ACT_X + h) - _act_np(name, ACT_X - h)) / (2 * h)
        keep = ACT_X != 0 if name == "relu" else slice(None)  # relu's kink: PyTorch's convention, 0
        np.testing.assert_allclose(_np(r.grads[name])[keep], fd[keep], rtol=1e-6, atol=1e-8, err_msg=name)
    assert _np(r.grads["relu"])[4] == 0.0
    assert _np(r.out["gelu_10"])[-1] == 10.0 and _np(r.grads["gelu_10"])[-1] == 0.0  # clipped
    np.testing.assert_allclose(_np(r.silu_python), _np(r.out["silu"]), rtol=1e-14)
    np.testing.assert_allclose(_np(r.mish_python), _np(r.out["mish"]), rtol=1e-12)


def test_transformers_activations_torch_parity():
    torch = pytest.importorskip("torch")
    a, b = _activations_run(lucid), _activations_run(torch)
    for name in a.out:
        np.testing.assert_allclose(_np(a.out[name]), b.out[name].detach().numpy(), rtol=1e-13, atol=1e-15,
                                   err_msg=name)
        np.testing.assert_allclose(_np(a.grads[name]), b.grads[name].numpy(), rtol=1e-12, atol=1e-15,
                                   err_msg=name)


# --------------------------------------------------------------------------- modeling_attn_mask_utils.py

def mask_utils_page(torch):
    from typing import List, Tuple, Union

    @dataclass
    class AttentionMaskConverter:
        is_causal: bool
        sliding_window: int

        def __init__(self, is_causal: bool, sliding_window: Optional[int] = None):
            self.is_causal = is_causal
            self.sliding_window = sliding_window

            if self.sliding_window is not None and self.sliding_window <= 0:
                raise ValueError(
                    f"Make sure that when passing `sliding_window` that its value is a strictly positive integer, not `{self.sliding_window}`"
                )

        def to_causal_4d(
            self,
            batch_size: int,
            query_length: int,
            key_value_length: int,
            dtype: torch.dtype,
            device: Union[torch.device, "str"] = "cpu",
        ) -> Optional[torch.Tensor]:
            if not self.is_causal:
                raise ValueError(f"Please use `to_causal_4d` only if {self.__class__} has `is_causal` set to True.")

            # If shape is not cached, create a new causal mask and cache it
            input_shape = (batch_size, query_length)
            past_key_values_length = key_value_length - query_length

            # create causal mask
            # [bsz, seq_len] -> [bsz, 1, tgt_seq_len, src_seq_len]
            causal_4d_mask = None
            if input_shape[-1] > 1 or self.sliding_window is not None:
                causal_4d_mask = self._make_causal_mask(
                    input_shape,
                    dtype,
                    device=device,
                    past_key_values_length=past_key_values_length,
                    sliding_window=self.sliding_window,
                )

            return causal_4d_mask

        def to_4d(
            self,
            attention_mask_2d: torch.Tensor,
            query_length: int,
            dtype: torch.dtype,
            key_value_length: Optional[int] = None,
        ) -> torch.Tensor:
            input_shape = (attention_mask_2d.shape[0], query_length)

            # create causal mask
            # [bsz, seq_len] -> [bsz, 1, tgt_seq_len, src_seq_len]
            causal_4d_mask = None
            if (input_shape[-1] > 1 or self.sliding_window is not None) and self.is_causal:
                if key_value_length is None:
                    raise ValueError(
                        "This attention mask converter is causal. Make sure to pass `key_value_length` to correctly create a causal mask."
                    )

                past_key_values_length = key_value_length - query_length
                causal_4d_mask = self._make_causal_mask(
                    input_shape,
                    dtype,
                    device=attention_mask_2d.device,
                    past_key_values_length=past_key_values_length,
                    sliding_window=self.sliding_window,
                )
            elif self.sliding_window is not None:
                raise NotImplementedError("Sliding window is currently only implemented for causal masking")

            # [bsz, seq_len] -> [bsz, 1, tgt_seq_len, src_seq_len]
            expanded_attn_mask = self._expand_mask(attention_mask_2d, dtype, tgt_len=input_shape[-1]).to(
                attention_mask_2d.device
            )

            if causal_4d_mask is not None:
                expanded_attn_mask = causal_4d_mask.masked_fill(expanded_attn_mask.bool(), torch.finfo(dtype).min)

            # expanded_attn_mask + causal_4d_mask can cause some overflow
            expanded_4d_mask = expanded_attn_mask

            return expanded_4d_mask

        @staticmethod
        def _make_causal_mask(
            input_ids_shape,
            dtype: torch.dtype,
            device: torch.device,
            past_key_values_length: int = 0,
            sliding_window: Optional[int] = None,
        ):
            """
            Make causal mask used for bi-directional self-attention.
            """
            bsz, tgt_len = input_ids_shape
            mask = torch.full((tgt_len, tgt_len), torch.finfo(dtype).min, device=device)
            mask_cond = torch.arange(mask.size(-1), device=device)
            mask.masked_fill_(mask_cond < (mask_cond + 1).view(mask.size(-1), 1), 0)

            mask = mask.to(dtype)

            if past_key_values_length > 0:
                mask = torch.cat([torch.zeros(tgt_len, past_key_values_length, dtype=dtype, device=device), mask], dim=-1)

            # add lower triangular sliding window mask if necessary
            if sliding_window is not None:
                diagonal = past_key_values_length - sliding_window - 1

                context_mask = torch.tril(torch.ones_like(mask, dtype=torch.bool), diagonal=diagonal)
                mask.masked_fill_(context_mask, torch.finfo(dtype).min)

            return mask[None, None, :, :].expand(bsz, 1, tgt_len, tgt_len + past_key_values_length)

        @staticmethod
        def _expand_mask(mask: torch.Tensor, dtype: torch.dtype, tgt_len: Optional[int] = None):
            """
            Expands attention_mask from `[bsz, seq_len]` to `[bsz, 1, tgt_seq_len, src_seq_len]`.
            """
            bsz, src_len = mask.size()
            tgt_len = tgt_len if tgt_len is not None else src_len

            expanded_mask = mask[:, None, None, :].expand(bsz, 1, tgt_len, src_len).to(dtype)

            inverted_mask = 1.0 - expanded_mask

            return inverted_mask.masked_fill(inverted_mask.to(torch.bool), torch.finfo(dtype).min)

        @staticmethod
        def _unmask_unattended(
            expanded_mask,
            min_dtype: float,
        ):
            if expanded_mask.dtype == torch.bool:
                raise ValueError(
                    "AttentionMaskConverter._unmask_unattended expects a float `expanded_mask`, got a BoolTensor."
                )

            return expanded_mask.mul(~torch.all(expanded_mask == min_dtype, dim=-1, keepdim=True))

    def _prepare_4d_causal_attention_mask(
        attention_mask: Optional[torch.Tensor],
        input_shape: Union[torch.Size, Tuple, List],
        inputs_embeds: torch.Tensor,
        past_key_values_length: int,
        sliding_window: Optional[int] = None,
    ):
        attn_mask_converter = AttentionMaskConverter(is_causal=True, sliding_window=sliding_window)

        key_value_length = input_shape[-1] + past_key_values_length

        # 4d mask is passed through the layers
        if attention_mask is not None and len(attention_mask.shape) == 2:
            attention_mask = attn_mask_converter.to_4d(
                attention_mask, input_shape[-1], key_value_length=key_value_length, dtype=inputs_embeds.dtype
            )
        elif attention_mask is not None and len(attention_mask.shape) == 4:
            expected_shape = (input_shape[0], 1, input_shape[1], key_value_length)
            if tuple(attention_mask.shape) != expected_shape:
                raise ValueError(
                    f"Incorrect 4D attention_mask shape: {tuple(attention_mask.shape)}; expected: {expected_shape}."
                )
            else:
                # if the 4D mask has correct shape - invert it and fill with negative infinity
                inverted_mask = 1.0 - attention_mask
                attention_mask = inverted_mask.masked_fill(
                    inverted_mask.to(torch.bool), torch.finfo(inputs_embeds.dtype).min
                )
        else:
            attention_mask = attn_mask_converter.to_causal_4d(
                input_shape[0], input_shape[-1], key_value_length, dtype=inputs_embeds.dtype, device=inputs_embeds.device
            )

        return attention_mask

    return SimpleNamespace(AttentionMaskConverter=AttentionMaskConverter,
                           _prepare_4d_causal_attention_mask=_prepare_4d_causal_attention_mask)


MASK_2D = [[0, 0, 1, 1, 1], [1, 1, 1, 1, 1], [0, 1, 1, 0, 1]]


def _mask_np(mask2d, q_len, past, lo):
    """Allowed (query i, key j): j <= past + i and key j not padded."""
    m = np.asarray(mask2d)
    b, kv = m.shape
    i = np.arange(q_len)[:, None] + past
    j = np.arange(kv)[None, :]
    ok = j <= i
    out = np.where(ok[None, None] & (m[:, None, None, :] == 1), 0.0, lo)
    return out


def _mask_run(torch):
    p = mask_utils_page(torch)
    C = p.AttentionMaskConverter
    m2 = torch.tensor(MASK_2D)
    emb = torch.zeros(3, 5, 4)
    emb3 = torch.zeros(3, 3, 4)
    r = SimpleNamespace()
    r.causal = C(True).to_causal_4d(2, 4, 4, dtype=torch.float32, device=emb.device)
    r.causal_past = C(True).to_causal_4d(2, 3, 5, dtype=torch.float16, device=emb.device)
    r.one_token = C(True).to_causal_4d(2, 1, 5, dtype=torch.float32, device=emb.device)
    r.window = C(True, sliding_window=2).to_causal_4d(1, 5, 5, dtype=torch.float32, device=emb.device)
    r.to4d = C(True).to_4d(m2, 5, dtype=torch.float32, key_value_length=5)
    r.to4d_bidir = C(False).to_4d(m2, 5, dtype=torch.float32)
    r.prep = p._prepare_4d_causal_attention_mask(m2, (3, 3), emb3, past_key_values_length=2)
    r.prep_none = p._prepare_4d_causal_attention_mask(None, (3, 5), emb, 0)
    m4 = torch.tensor(MASK_2D, dtype=torch.float32)[:, None, None, :].expand(3, 1, 5, 5).tril()
    r.prep_4d = p._prepare_4d_causal_attention_mask(m4, (3, 5), emb, 0)
    r.unmasked = C._unmask_unattended(r.to4d, torch.finfo(torch.float32).min)
    r.errors = []
    for fn in (lambda: C(True, sliding_window=0), lambda: C(False).to_causal_4d(1, 2, 2, torch.float32),
               lambda: C(True).to_4d(m2, 5, dtype=torch.float32),
               lambda: p._prepare_4d_causal_attention_mask(m4[:, :, :4], (3, 5), emb, 0),
               lambda: C._unmask_unattended(m4.bool(), 0.0),
               # float64's min does not fit the float32 ``torch.full`` the mask starts from (PyTorch too)
               lambda: C(True).to_causal_4d(1, 2, 2, dtype=torch.float64)):
        try:
            fn()
            r.errors.append(None)
        except (ValueError, NotImplementedError, RuntimeError) as e:
            r.errors.append(str(e))
    return r


def test_transformers_attention_masks():
    r = _mask_run(lucid)
    lo32, lo16 = float(np.finfo(np.float32).min), float(np.finfo(np.float16).min)
    ones = np.ones((2, 5))
    assert r.causal.shape == (2, 1, 4, 4) and r.causal.dtype == lucid.float32
    np.testing.assert_array_equal(_np(r.causal), _mask_np(ones[:, :4], 4, 0, lo32))
    assert r.causal_past.shape == (2, 1, 3, 5) and r.causal_past.dtype == lucid.float16
    np.testing.assert_array_equal(_np(r.causal_past), _mask_np(ones, 3, 2, lo16))
    assert r.one_token is None  # one query token, no window: nothing to mask
    # sliding window 2: ``tril(diagonal=past - window - 1)`` masks keys j <= i - 3, so this version's
    # window lets a query see itself and the two tokens before it
    want = np.where((np.arange(5)[None, :] <= np.arange(5)[:, None])
                    & (np.arange(5)[None, :] >= np.arange(5)[:, None] - 2), 0.0, lo32)
    np.testing.assert_array_equal(_np(r.window)[0, 0], want)
    np.testing.assert_array_equal(_np(r.to4d), _mask_np(MASK_2D, 5, 0, lo32))
    bidir = np.where(np.asarray(MASK_2D)[:, None, None, :] == 1, 0.0, lo32) * np.ones((1, 1, 5, 1))
    np.testing.assert_array_equal(_np(r.to4d_bidir), bidir)
    np.testing.assert_array_equal(_np(r.prep), _mask_np(MASK_2D, 3, 2, lo32))
    np.testing.assert_array_equal(_np(r.prep_none), _mask_np(np.ones((3, 5)), 5, 0, lo32))
    np.testing.assert_array_equal(_np(r.prep_4d), _mask_np(MASK_2D, 5, 0, lo32))
    # rows with every key masked (row 0's first two queries under left padding) become all-attend
    um = _np(r.unmasked)
    full = (_mask_np(MASK_2D, 5, 0, lo32) == lo32).all(-1, keepdims=True)
    np.testing.assert_array_equal(um, np.where(full, 0.0, _mask_np(MASK_2D, 5, 0, lo32)))
    assert full[0, 0, :2].all() and full.sum() == 3
    e = r.errors
    assert "strictly positive integer, not `0`" in e[0]
    assert "only if" in e[1] and "is_causal" in e[1]
    assert "pass `key_value_length`" in e[2]
    assert "Incorrect 4D attention_mask shape: (3, 1, 4, 5); expected: (3, 1, 5, 5)." == e[3]
    assert "expects a float `expanded_mask`" in e[4]
    assert "value cannot be converted to type float" in e[5] and "without overflow" in e[5]


def test_transformers_attention_masks_torch_parity():
    torch = pytest.importorskip("torch")
    a, b = _mask_run(lucid), _mask_run(torch)
    for name in ("causal", "causal_past", "window", "to4d", "to4d_bidir", "prep", "prep_none", "prep_4d",
                 "unmasked"):
        np.testing.assert_array_equal(_np(getattr(a, name)), getattr(b, name).numpy(), err_msg=name)
    assert b.one_token is None
    assert [x is None for x in a.errors] == [x is None for x in b.errors]
    assert a.errors[3] == b.errors[3]


# --------------------------------------------------------------------------- models/llama/modeling_llama.py

@dataclass
class LlamaConfig:  # configuration_llama.LlamaConfig, tiny
    vocab_size: int = 14  # even: pretraining_tp=2 splits lm_head in two
    hidden_size: int = 16
    intermediate_size: int = 24
    num_hidden_layers: int = 2
    num_attention_heads: int = 4
    num_key_value_heads: int = 2
    hidden_act: str = "silu"
    max_position_embeddings: int = 16
    initializer_range: float = 0.2
    rms_norm_eps: float = 1e-6
    pad_token_id: int = 0
    pretraining_tp: int = 1
    rope_theta: float = 10000.0
    rope_scaling: Optional[dict] = None
    attention_bias: bool = False
    attention_dropout: float = 0.0
    _attn_implementation: str = "eager"
    output_attentions: bool = False
    output_hidden_states: bool = False
    use_cache: bool = False
    use_return_dict: bool = True


def llama_page(torch, ACT2FN):
    nn = torch.nn
    F = torch.nn.functional
    from typing import List, Tuple
    CrossEntropyLoss = nn.CrossEntropyLoss  # ``from torch.nn import CrossEntropyLoss``

    class Cache:  # cache_utils.Cache, the abstract base
        pass

    class DynamicCache(Cache):  # cache_utils.DynamicCache (v4.38), its legacy-cache subset
        def __init__(self) -> None:
            self.key_cache: List[torch.Tensor] = []
            self.value_cache: List[torch.Tensor] = []
            self.seen_tokens = 0  # Used in `generate` to keep tally of how many tokens the cache has seen

        def __len__(self):
            return len(self.key_cache)

        def update(self, key_states, value_states, layer_idx, cache_kwargs=None):
            # Update the number of seen tokens
            if layer_idx == 0:
                self.seen_tokens += key_states.shape[-2]

            # Update the cache
            if len(self.key_cache) <= layer_idx:
                self.key_cache.append(key_states)
                self.value_cache.append(value_states)
            else:
                self.key_cache[layer_idx] = torch.cat([self.key_cache[layer_idx], key_states], dim=-2)
                self.value_cache[layer_idx] = torch.cat([self.value_cache[layer_idx], value_states], dim=-2)

            return self.key_cache[layer_idx], self.value_cache[layer_idx]

        def get_seq_length(self, layer_idx: Optional[int] = 0) -> int:
            """Returns the sequence length of the cached states. A layer index can be optionally passed."""
            if len(self.key_cache) <= layer_idx:
                return 0
            return self.key_cache[layer_idx].shape[-2]

        def to_legacy_cache(self):
            """Converts the `DynamicCache` instance into the its equivalent in the legacy cache format."""
            legacy_cache = ()
            for layer_idx in range(len(self)):
                legacy_cache += ((self.key_cache[layer_idx], self.value_cache[layer_idx]),)
            return legacy_cache

        @classmethod
        def from_legacy_cache(cls, past_key_values=None):
            """Converts a cache in the legacy cache format into an equivalent `DynamicCache`."""
            cache = cls()
            if past_key_values is not None:
                for layer_idx in range(len(past_key_values)):
                    key_states, value_states = past_key_values[layer_idx]
                    cache.update(key_states, value_states, layer_idx)
            return cache

    class StaticCache(Cache):  # only tested against
        pass

    class LlamaRMSNorm(nn.Module):
        def __init__(self, hidden_size, eps=1e-6):
            """
            LlamaRMSNorm is equivalent to T5LayerNorm
            """
            super().__init__()
            self.weight = nn.Parameter(torch.ones(hidden_size))
            self.variance_epsilon = eps

        def forward(self, hidden_states):
            input_dtype = hidden_states.dtype
            hidden_states = hidden_states.to(torch.float32)
            variance = hidden_states.pow(2).mean(-1, keepdim=True)
            hidden_states = hidden_states * torch.rsqrt(variance + self.variance_epsilon)
            return self.weight * hidden_states.to(input_dtype)

    class LlamaRotaryEmbedding(nn.Module):
        def __init__(self, dim, max_position_embeddings=2048, base=10000, device=None, scaling_factor=1.0):
            super().__init__()
            self.scaling_factor = scaling_factor
            self.dim = dim
            self.max_position_embeddings = max_position_embeddings
            self.base = base
            inv_freq = 1.0 / (self.base ** (torch.arange(0, self.dim, 2, dtype=torch.int64).float().to(device) / self.dim))
            self.register_buffer("inv_freq", inv_freq, persistent=False)
            # For BC we register cos and sin cached
            self.max_seq_len_cached = max_position_embeddings
            t = torch.arange(self.max_seq_len_cached, device=device, dtype=torch.int64).type_as(self.inv_freq)
            t = t / self.scaling_factor
            freqs = torch.outer(t, self.inv_freq)
            # Different from paper, but it uses a different permutation in order to obtain the same calculation
            emb = torch.cat((freqs, freqs), dim=-1)
            self.register_buffer("_cos_cached", emb.cos().to(torch.get_default_dtype()), persistent=False)
            self.register_buffer("_sin_cached", emb.sin().to(torch.get_default_dtype()), persistent=False)

        @torch.no_grad()
        def forward(self, x, position_ids):
            # x: [bs, num_attention_heads, seq_len, head_size]
            inv_freq_expanded = self.inv_freq[None, :, None].float().expand(position_ids.shape[0], -1, 1)
            position_ids_expanded = position_ids[:, None, :].float()
            # Force float32 since bfloat16 loses precision on long contexts
            # See https://github.com/huggingface/transformers/pull/29285
            device_type = x.device.type
            device_type = device_type if isinstance(device_type, str) else "cpu"
            with torch.autocast(device_type=device_type, enabled=False):
                freqs = (inv_freq_expanded.float() @ position_ids_expanded.float()).transpose(1, 2)
                emb = torch.cat((freqs, freqs), dim=-1)
                cos = emb.cos()
                sin = emb.sin()
            return cos.to(dtype=x.dtype), sin.to(dtype=x.dtype)

    class LlamaLinearScalingRotaryEmbedding(LlamaRotaryEmbedding):
        """LlamaRotaryEmbedding extended with linear scaling. Credits to the Reddit user /u/kaiokendev"""

        def forward(self, x, position_ids):
            # difference to the original RoPE: a scaling factor is aplied to the position ids
            position_ids = position_ids.float() / self.scaling_factor
            cos, sin = super().forward(x, position_ids)
            return cos, sin

    def rotate_half(x):
        """Rotates half the hidden dims of the input."""
        x1 = x[..., : x.shape[-1] // 2]
        x2 = x[..., x.shape[-1] // 2 :]
        return torch.cat((-x2, x1), dim=-1)

    def apply_rotary_pos_emb(q, k, cos, sin, position_ids=None, unsqueeze_dim=1):
        cos = cos.unsqueeze(unsqueeze_dim)
        sin = sin.unsqueeze(unsqueeze_dim)
        q_embed = (q * cos) + (rotate_half(q) * sin)
        k_embed = (k * cos) + (rotate_half(k) * sin)
        return q_embed, k_embed

    class LlamaMLP(nn.Module):
        def __init__(self, config):
            super().__init__()
            self.config = config
            self.hidden_size = config.hidden_size
            self.intermediate_size = config.intermediate_size
            self.gate_proj = nn.Linear(self.hidden_size, self.intermediate_size, bias=False)
            self.up_proj = nn.Linear(self.hidden_size, self.intermediate_size, bias=False)
            self.down_proj = nn.Linear(self.intermediate_size, self.hidden_size, bias=False)
            self.act_fn = ACT2FN[config.hidden_act]

        def forward(self, x):
            if self.config.pretraining_tp > 1:
                slice = self.intermediate_size // self.config.pretraining_tp
                gate_proj_slices = self.gate_proj.weight.split(slice, dim=0)
                up_proj_slices = self.up_proj.weight.split(slice, dim=0)
                down_proj_slices = self.down_proj.weight.split(slice, dim=1)

                gate_proj = torch.cat(
                    [F.linear(x, gate_proj_slices[i]) for i in range(self.config.pretraining_tp)], dim=-1
                )
                up_proj = torch.cat([F.linear(x, up_proj_slices[i]) for i in range(self.config.pretraining_tp)], dim=-1)

                intermediate_states = (self.act_fn(gate_proj) * up_proj).split(slice, dim=2)
                down_proj = [
                    F.linear(intermediate_states[i], down_proj_slices[i]) for i in range(self.config.pretraining_tp)
                ]
                down_proj = sum(down_proj)
            else:
                down_proj = self.down_proj(self.act_fn(self.gate_proj(x)) * self.up_proj(x))

            return down_proj

    def repeat_kv(hidden_states: torch.Tensor, n_rep: int) -> torch.Tensor:
        """
        This is the equivalent of torch.repeat_interleave(x, dim=1, repeats=n_rep). The hidden states go from (batch,
        num_key_value_heads, seqlen, head_dim) to (batch, num_attention_heads, seqlen, head_dim)
        """
        batch, num_key_value_heads, slen, head_dim = hidden_states.shape
        if n_rep == 1:
            return hidden_states
        hidden_states = hidden_states[:, :, None, :, :].expand(batch, num_key_value_heads, n_rep, slen, head_dim)
        return hidden_states.reshape(batch, num_key_value_heads * n_rep, slen, head_dim)

    class LlamaAttention(nn.Module):
        """Multi-headed attention from 'Attention Is All You Need' paper"""

        def __init__(self, config: LlamaConfig, layer_idx: Optional[int] = None):
            super().__init__()
            self.config = config
            self.layer_idx = layer_idx

            self.attention_dropout = config.attention_dropout
            self.hidden_size = config.hidden_size
            self.num_heads = config.num_attention_heads
            self.head_dim = self.hidden_size // self.num_heads
            self.num_key_value_heads = config.num_key_value_heads
            self.num_key_value_groups = self.num_heads // self.num_key_value_heads
            self.max_position_embeddings = config.max_position_embeddings
            self.rope_theta = config.rope_theta
            self.is_causal = True

            if (self.head_dim * self.num_heads) != self.hidden_size:
                raise ValueError(
                    f"hidden_size must be divisible by num_heads (got `hidden_size`: {self.hidden_size}"
                    f" and `num_heads`: {self.num_heads})."
                )

            self.q_proj = nn.Linear(self.hidden_size, self.num_heads * self.head_dim, bias=config.attention_bias)
            self.k_proj = nn.Linear(self.hidden_size, self.num_key_value_heads * self.head_dim, bias=config.attention_bias)
            self.v_proj = nn.Linear(self.hidden_size, self.num_key_value_heads * self.head_dim, bias=config.attention_bias)
            self.o_proj = nn.Linear(self.hidden_size, self.hidden_size, bias=config.attention_bias)
            self._init_rope()

        def _init_rope(self):
            if self.config.rope_scaling is None:
                self.rotary_emb = LlamaRotaryEmbedding(
                    self.head_dim,
                    max_position_embeddings=self.max_position_embeddings,
                    base=self.rope_theta,
                )
            else:
                scaling_type = self.config.rope_scaling["type"]
                scaling_factor = self.config.rope_scaling["factor"]
                if scaling_type == "linear":
                    self.rotary_emb = LlamaLinearScalingRotaryEmbedding(
                        self.head_dim,
                        max_position_embeddings=self.max_position_embeddings,
                        scaling_factor=scaling_factor,
                        base=self.rope_theta,
                    )
                else:
                    raise ValueError(f"Unknown RoPE scaling type {scaling_type}")

        def forward(
            self,
            hidden_states: torch.Tensor,
            attention_mask: Optional[torch.Tensor] = None,
            position_ids: Optional[torch.LongTensor] = None,
            past_key_value: Optional[Cache] = None,
            output_attentions: bool = False,
            use_cache: bool = False,
            cache_position: Optional[torch.LongTensor] = None,
            **kwargs,
        ):
            bsz, q_len, _ = hidden_states.size()

            if self.config.pretraining_tp > 1:
                key_value_slicing = (self.num_key_value_heads * self.head_dim) // self.config.pretraining_tp
                query_slices = self.q_proj.weight.split(
                    (self.num_heads * self.head_dim) // self.config.pretraining_tp, dim=0
                )
                key_slices = self.k_proj.weight.split(key_value_slicing, dim=0)
                value_slices = self.v_proj.weight.split(key_value_slicing, dim=0)

                query_states = [F.linear(hidden_states, query_slices[i]) for i in range(self.config.pretraining_tp)]
                query_states = torch.cat(query_states, dim=-1)

                key_states = [F.linear(hidden_states, key_slices[i]) for i in range(self.config.pretraining_tp)]
                key_states = torch.cat(key_states, dim=-1)

                value_states = [F.linear(hidden_states, value_slices[i]) for i in range(self.config.pretraining_tp)]
                value_states = torch.cat(value_states, dim=-1)

            else:
                query_states = self.q_proj(hidden_states)
                key_states = self.k_proj(hidden_states)
                value_states = self.v_proj(hidden_states)

            query_states = query_states.view(bsz, q_len, self.num_heads, self.head_dim).transpose(1, 2)
            key_states = key_states.view(bsz, q_len, self.num_key_value_heads, self.head_dim).transpose(1, 2)
            value_states = value_states.view(bsz, q_len, self.num_key_value_heads, self.head_dim).transpose(1, 2)

            past_key_value = getattr(self, "past_key_value", past_key_value)
            cos, sin = self.rotary_emb(value_states, position_ids)
            query_states, key_states = apply_rotary_pos_emb(query_states, key_states, cos, sin)

            if past_key_value is not None:
                # sin and cos are specific to RoPE models; position_ids needed for the static cache
                cache_kwargs = {"sin": sin, "cos": cos, "cache_position": cache_position}
                key_states, value_states = past_key_value.update(key_states, value_states, self.layer_idx, cache_kwargs)

            key_states = repeat_kv(key_states, self.num_key_value_groups)
            value_states = repeat_kv(value_states, self.num_key_value_groups)

            attn_weights = torch.matmul(query_states, key_states.transpose(2, 3)) / math.sqrt(self.head_dim)

            if attention_mask is not None:  # no matter the length, we just slice it
                causal_mask = attention_mask
                if cache_position is not None:
                    causal_mask = attention_mask[:, :, cache_position, : key_states.shape[-2]]
                attn_weights = attn_weights + causal_mask

            # upcast attention to fp32
            attn_weights = nn.functional.softmax(attn_weights, dim=-1, dtype=torch.float32).to(query_states.dtype)
            attn_weights = nn.functional.dropout(attn_weights, p=self.attention_dropout, training=self.training)
            attn_output = torch.matmul(attn_weights, value_states)

            if attn_output.size() != (bsz, self.num_heads, q_len, self.head_dim):
                raise ValueError(
                    f"`attn_output` should be of size {(bsz, self.num_heads, q_len, self.head_dim)}, but is"
                    f" {attn_output.size()}"
                )

            attn_output = attn_output.transpose(1, 2).contiguous()

            attn_output = attn_output.reshape(bsz, q_len, self.hidden_size)

            if self.config.pretraining_tp > 1:
                attn_output = attn_output.split(self.hidden_size // self.config.pretraining_tp, dim=2)
                o_proj_slices = self.o_proj.weight.split(self.hidden_size // self.config.pretraining_tp, dim=1)
                attn_output = sum([F.linear(attn_output[i], o_proj_slices[i]) for i in range(self.config.pretraining_tp)])
            else:
                attn_output = self.o_proj(attn_output)

            if not output_attentions:
                attn_weights = None

            return attn_output, attn_weights, past_key_value

    LLAMA_ATTENTION_CLASSES = {
        "eager": LlamaAttention,
    }

    class LlamaDecoderLayer(nn.Module):
        def __init__(self, config: LlamaConfig, layer_idx: int):
            super().__init__()
            self.hidden_size = config.hidden_size

            self.self_attn = LLAMA_ATTENTION_CLASSES[config._attn_implementation](config=config, layer_idx=layer_idx)

            self.mlp = LlamaMLP(config)
            self.input_layernorm = LlamaRMSNorm(config.hidden_size, eps=config.rms_norm_eps)
            self.post_attention_layernorm = LlamaRMSNorm(config.hidden_size, eps=config.rms_norm_eps)

        def forward(
            self,
            hidden_states: torch.Tensor,
            attention_mask: Optional[torch.Tensor] = None,
            position_ids: Optional[torch.LongTensor] = None,
            past_key_value: Optional[Tuple[torch.Tensor]] = None,
            output_attentions: Optional[bool] = False,
            use_cache: Optional[bool] = False,
            cache_position: Optional[torch.LongTensor] = None,
            **kwargs,
        ):
            residual = hidden_states

            hidden_states = self.input_layernorm(hidden_states)

            # Self Attention
            hidden_states, self_attn_weights, present_key_value = self.self_attn(
                hidden_states=hidden_states,
                attention_mask=attention_mask,
                position_ids=position_ids,
                past_key_value=past_key_value,
                output_attentions=output_attentions,
                use_cache=use_cache,
                cache_position=cache_position,
                **kwargs,
            )
            hidden_states = residual + hidden_states

            # Fully Connected
            residual = hidden_states
            hidden_states = self.post_attention_layernorm(hidden_states)
            hidden_states = self.mlp(hidden_states)
            hidden_states = residual + hidden_states

            outputs = (hidden_states,)

            if output_attentions:
                outputs += (self_attn_weights,)

            if use_cache:
                outputs += (present_key_value,)

            return outputs

    class LlamaPreTrainedModel(nn.Module):  # PreTrainedModel reduced to config and post_init
        config_class = LlamaConfig
        base_model_prefix = "model"

        def __init__(self, config):
            super().__init__()
            self.config = config
            self.generation_config = SimpleNamespace(cache_implementation=None)

        def post_init(self):
            self.apply(self._init_weights)

        def _init_weights(self, module):
            std = self.config.initializer_range
            if isinstance(module, nn.Linear):
                module.weight.data.normal_(mean=0.0, std=std)
                if module.bias is not None:
                    module.bias.data.zero_()
            elif isinstance(module, nn.Embedding):
                module.weight.data.normal_(mean=0.0, std=std)
                if module.padding_idx is not None:
                    module.weight.data[module.padding_idx].zero_()

    class LlamaModel(LlamaPreTrainedModel):
        def __init__(self, config: LlamaConfig):
            super().__init__(config)
            self.padding_idx = config.pad_token_id
            self.vocab_size = config.vocab_size

            self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size, self.padding_idx)
            self.layers = nn.ModuleList(
                [LlamaDecoderLayer(config, layer_idx) for layer_idx in range(config.num_hidden_layers)]
            )
            self.norm = LlamaRMSNorm(config.hidden_size, eps=config.rms_norm_eps)
            self.gradient_checkpointing = False

            # Register a causal mask to separate causal and padding mask creation. Merging happens in the attention class.
            # NOTE: This is not friendly with TorchScript, ONNX, ExportedProgram serialization for very large `max_position_embeddings`.
            causal_mask = torch.full(
                (config.max_position_embeddings, config.max_position_embeddings), fill_value=True, dtype=torch.bool
            )
            self.register_buffer("causal_mask", torch.triu(causal_mask, diagonal=1), persistent=False)
            # Initialize weights and apply final processing
            self.post_init()

        def forward(
            self,
            input_ids: torch.LongTensor = None,
            attention_mask: Optional[torch.Tensor] = None,
            position_ids: Optional[torch.LongTensor] = None,
            past_key_values: Optional[List[torch.FloatTensor]] = None,
            inputs_embeds: Optional[torch.FloatTensor] = None,
            use_cache: Optional[bool] = None,
            output_attentions: Optional[bool] = None,
            output_hidden_states: Optional[bool] = None,
            return_dict: Optional[bool] = None,
            cache_position: Optional[torch.LongTensor] = None,
        ):
            output_attentions = output_attentions if output_attentions is not None else self.config.output_attentions
            output_hidden_states = (
                output_hidden_states if output_hidden_states is not None else self.config.output_hidden_states
            )
            use_cache = use_cache if use_cache is not None else self.config.use_cache
            return_dict = return_dict if return_dict is not None else self.config.use_return_dict

            if (input_ids is None) ^ (inputs_embeds is not None):
                raise ValueError(
                    "You cannot specify both input_ids and inputs_embeds at the same time, and must specify either one"
                )

            if inputs_embeds is None:
                inputs_embeds = self.embed_tokens(input_ids)

            past_seen_tokens = 0
            if use_cache:  # kept for BC (cache positions)
                if not isinstance(past_key_values, StaticCache):
                    past_key_values = DynamicCache.from_legacy_cache(past_key_values)
                    past_seen_tokens = past_key_values.get_seq_length()

            if cache_position is None:
                if isinstance(past_key_values, StaticCache):
                    raise ValueError("cache_position is a required argument when using StaticCache.")
                cache_position = torch.arange(
                    past_seen_tokens, past_seen_tokens + inputs_embeds.shape[1], device=inputs_embeds.device
                )

            if position_ids is None:
                position_ids = cache_position.unsqueeze(0)

            causal_mask = self._update_causal_mask(attention_mask, inputs_embeds)

            # embed positions
            hidden_states = inputs_embeds

            # decoder layers
            all_hidden_states = () if output_hidden_states else None
            all_self_attns = () if output_attentions else None
            next_decoder_cache = None

            for decoder_layer in self.layers:
                if output_hidden_states:
                    all_hidden_states += (hidden_states,)

                layer_outputs = decoder_layer(
                    hidden_states,
                    attention_mask=causal_mask,
                    position_ids=position_ids,
                    past_key_value=past_key_values,
                    output_attentions=output_attentions,
                    use_cache=use_cache,
                    cache_position=cache_position,
                )

                hidden_states = layer_outputs[0]

                if use_cache:
                    next_decoder_cache = layer_outputs[2 if output_attentions else 1]

                if output_attentions:
                    all_self_attns += (layer_outputs[1],)

            hidden_states = self.norm(hidden_states)

            # add hidden states from the last decoder layer
            if output_hidden_states:
                all_hidden_states += (hidden_states,)

            next_cache = None
            if use_cache:
                next_cache = (
                    next_decoder_cache.to_legacy_cache() if isinstance(next_decoder_cache, Cache) else next_decoder_cache
                )
            if not return_dict:
                return tuple(v for v in [hidden_states, next_cache, all_hidden_states, all_self_attns] if v is not None)
            return ModelOutput(
                last_hidden_state=hidden_states,
                past_key_values=next_cache,
                hidden_states=all_hidden_states,
                attentions=all_self_attns,
            )

        def _update_causal_mask(self, attention_mask, input_tensor):
            batch_size, seq_length = input_tensor.shape[:2]
            dtype = input_tensor.dtype
            device = input_tensor.device

            # support going beyond cached `max_position_embedding`
            if seq_length > self.causal_mask.shape[-1]:
                causal_mask = torch.full((2 * self.causal_mask.shape[-1], 2 * self.causal_mask.shape[-1]), fill_value=1)
                self.register_buffer("causal_mask", torch.triu(causal_mask, diagonal=1), persistent=False)

            # We use the current dtype to avoid any overflows
            min_dtype = torch.finfo(dtype).min
            causal_mask = self.causal_mask[None, None, :, :].repeat(batch_size, 1, 1, 1).to(dtype) * min_dtype

            causal_mask = causal_mask.to(dtype=dtype, device=device)
            if attention_mask is not None and attention_mask.dim() == 2:
                mask_length = attention_mask.shape[-1]
                padding_mask = causal_mask[..., :mask_length].eq(0.0) * attention_mask[:, None, None, :].eq(0.0)
                causal_mask[..., :mask_length] = causal_mask[..., :mask_length].masked_fill(padding_mask, min_dtype)

            return causal_mask

    class LlamaForCausalLM(LlamaPreTrainedModel):
        _tied_weights_keys = ["lm_head.weight"]

        def __init__(self, config):
            super().__init__(config)
            self.model = LlamaModel(config)
            self.vocab_size = config.vocab_size
            self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)

            # Initialize weights and apply final processing
            self.post_init()

        def forward(
            self,
            input_ids: torch.LongTensor = None,
            attention_mask: Optional[torch.Tensor] = None,
            position_ids: Optional[torch.LongTensor] = None,
            past_key_values: Optional[List[torch.FloatTensor]] = None,
            inputs_embeds: Optional[torch.FloatTensor] = None,
            labels: Optional[torch.LongTensor] = None,
            use_cache: Optional[bool] = None,
            output_attentions: Optional[bool] = None,
            output_hidden_states: Optional[bool] = None,
            return_dict: Optional[bool] = None,
            cache_position: Optional[torch.LongTensor] = None,
        ):
            output_attentions = output_attentions if output_attentions is not None else self.config.output_attentions
            output_hidden_states = (
                output_hidden_states if output_hidden_states is not None else self.config.output_hidden_states
            )
            return_dict = return_dict if return_dict is not None else self.config.use_return_dict

            # decoder outputs consists of (dec_features, layer_state, dec_hidden, dec_attn)
            outputs = self.model(
                input_ids=input_ids,
                attention_mask=attention_mask,
                position_ids=position_ids,
                past_key_values=past_key_values,
                inputs_embeds=inputs_embeds,
                use_cache=use_cache,
                output_attentions=output_attentions,
                output_hidden_states=output_hidden_states,
                return_dict=return_dict,
                cache_position=cache_position,
            )

            hidden_states = outputs[0]
            if self.config.pretraining_tp > 1:
                lm_head_slices = self.lm_head.weight.split(self.vocab_size // self.config.pretraining_tp, dim=0)
                logits = [F.linear(hidden_states, lm_head_slices[i]) for i in range(self.config.pretraining_tp)]
                logits = torch.cat(logits, dim=-1)
            else:
                logits = self.lm_head(hidden_states)
            logits = logits.float()

            loss = None
            if labels is not None:
                # Shift so that tokens < n predict n
                shift_logits = logits[..., :-1, :].contiguous()
                shift_labels = labels[..., 1:].contiguous()
                # Flatten the tokens
                loss_fct = CrossEntropyLoss()
                shift_logits = shift_logits.view(-1, self.config.vocab_size)
                shift_labels = shift_labels.view(-1)
                # Enable model parallelism
                shift_labels = shift_labels.to(shift_logits.device)
                loss = loss_fct(shift_logits, shift_labels)

            if not return_dict:
                output = (logits,) + outputs[1:]
                return (loss,) + output if loss is not None else output

            return ModelOutput(
                loss=loss,
                logits=logits,
                past_key_values=outputs.past_key_values,
                hidden_states=outputs.hidden_states,
                attentions=outputs.attentions,
            )

        def prepare_inputs_for_generation(
            self, input_ids, past_key_values=None, attention_mask=None, inputs_embeds=None, **kwargs
        ):
            past_length = 0
            if past_key_values is not None:
                if isinstance(past_key_values, Cache):
                    cache_length = past_key_values.get_seq_length()
                    past_length = past_key_values.seen_tokens
                    max_cache_length = past_key_values.get_max_length()
                else:
                    cache_length = past_length = past_key_values[0][0].shape[2]
                    max_cache_length = None

                # Keep only the unprocessed tokens:
                # 1 - If the length of the attention_mask exceeds the length of input_ids, then we are in a setting where
                # some of the inputs are exclusively passed as part of the cache (e.g. when passing input_embeds as
                # input)
                if attention_mask is not None and attention_mask.shape[1] > input_ids.shape[1]:
                    input_ids = input_ids[:, -(attention_mask.shape[1] - past_length) :]
                # 2 - If the past_length is smaller than input_ids', then input_ids holds all input tokens. We can discard
                # input_ids based on the past_length.
                elif past_length < input_ids.shape[1]:
                    input_ids = input_ids[:, past_length:]
                # 3 - Otherwise (past_length >= input_ids.shape[1]), let's assume input_ids only has unprocessed tokens.

                # If we are about to go beyond the maximum cache length, we need to crop the input attention mask.
                if (
                    max_cache_length is not None
                    and attention_mask is not None
                    and cache_length + input_ids.shape[1] > max_cache_length
                ):
                    attention_mask = attention_mask[:, -max_cache_length:]

            position_ids = kwargs.get("position_ids", None)
            if attention_mask is not None and position_ids is None:
                # create position_ids on the fly for batch generation
                position_ids = attention_mask.long().cumsum(-1) - 1
                position_ids.masked_fill_(attention_mask == 0, 1)
                if past_key_values:
                    position_ids = position_ids[:, -input_ids.shape[1] :]

            if self.generation_config.cache_implementation == "static":
                raise NotImplementedError("the static cache is not ported")

            # TODO @gante we should only keep a `cache_position` in generate, and do +=1.
            # same goes for position ids. Could also help with continued generation.
            input_length = position_ids.shape[-1] if position_ids is not None else input_ids.shape[-1]
            cache_position = torch.arange(past_length, past_length + input_length, device=input_ids.device)
            position_ids = position_ids.contiguous() if position_ids is not None else None

            # if `inputs_embeds` are passed, we only want to use them in the 1st generation step
            if inputs_embeds is not None and past_key_values is None:
                model_inputs = {"inputs_embeds": inputs_embeds}
            else:
                # The `contiguous()` here is necessary to have a static stride during decoding. torchdynamo otherwise
                # recompiles graphs as the stride of the inputs is a guard. Ref: https://github.com/huggingface/transformers/pull/29114
                # TODO: use `next_tokens` directly instead.
                model_inputs = {"input_ids": input_ids.contiguous()}

            model_inputs.update(
                {
                    "position_ids": position_ids,
                    "cache_position": cache_position,
                    "past_key_values": past_key_values,
                    "use_cache": kwargs.get("use_cache"),
                    "attention_mask": attention_mask,
                }
            )
            return model_inputs

        @staticmethod
        def _reorder_cache(past_key_values, beam_idx):
            reordered_past = ()
            for layer_past in past_key_values:
                reordered_past += (
                    tuple(past_state.index_select(0, beam_idx.to(past_state.device)) for past_state in layer_past),
                )
            return reordered_past

    return SimpleNamespace(LlamaRMSNorm=LlamaRMSNorm, LlamaRotaryEmbedding=LlamaRotaryEmbedding,
                           LlamaLinearScalingRotaryEmbedding=LlamaLinearScalingRotaryEmbedding,
                           rotate_half=rotate_half, apply_rotary_pos_emb=apply_rotary_pos_emb, repeat_kv=repeat_kv,
                           LlamaMLP=LlamaMLP, LlamaAttention=LlamaAttention, LlamaModel=LlamaModel,
                           LlamaForCausalLM=LlamaForCausalLM, DynamicCache=DynamicCache)


def _rope_np(pos, hd, base=10000.0):
    inv = 1.0 / base ** (np.arange(0, hd, 2) / hd)
    f = pos[..., None] * inv
    emb = np.concatenate([f, f], -1)
    return np.cos(emb), np.sin(emb)


def _rot_np(x):
    h = x.shape[-1] // 2
    return np.concatenate([-x[..., h:], x[..., :h]], -1)


def _rms_np(x, w, eps):
    return w * (x / np.sqrt((x ** 2).mean(-1, keepdims=True) + eps))


def _silu_np(x):
    return x / (1 + np.exp(-x))


def _softmax_masked_np(s, allowed):
    """Softmax over the allowed keys; a row with none allowed is uniform over all keys, as adding
    ``finfo.min`` to every score makes it."""
    s = np.where(allowed, s, -np.inf)
    m = np.max(s, -1, keepdims=True)
    none = ~allowed.any(-1, keepdims=True)
    e = np.where(allowed, np.exp(s - np.where(none, 0.0, m)), 0.0)
    w = e / np.where(none, 1.0, e.sum(-1, keepdims=True))
    return np.where(none, 1.0 / s.shape[-1], w)


def _llama_np(sd, cfg, ids, mask2d=None, position_ids=None):
    ids = np.asarray(ids)
    B, T = ids.shape
    H, KVH = cfg.num_attention_heads, cfg.num_key_value_heads
    hd = cfg.hidden_size // H
    position_ids = np.broadcast_to(np.arange(T), (B, T)) if position_ids is None else np.asarray(position_ids)
    mask2d = np.ones((B, T)) if mask2d is None else np.asarray(mask2d)
    allowed = (np.arange(T)[None, :] <= np.arange(T)[:, None])[None, None] & (mask2d[:, None, None, :] == 1)
    cos, sin = _rope_np(position_ids.astype(np.float64), hd, cfg.rope_theta)
    cos, sin = cos[:, None], sin[:, None]
    h = sd["model.embed_tokens.weight"][ids]
    for layer in range(cfg.num_hidden_layers):
        p = f"model.layers.{layer}."
        x = _rms_np(h, sd[p + "input_layernorm.weight"], cfg.rms_norm_eps)
        q = (x @ sd[p + "self_attn.q_proj.weight"].T).reshape(B, T, H, hd).transpose(0, 2, 1, 3)
        k = (x @ sd[p + "self_attn.k_proj.weight"].T).reshape(B, T, KVH, hd).transpose(0, 2, 1, 3)
        v = (x @ sd[p + "self_attn.v_proj.weight"].T).reshape(B, T, KVH, hd).transpose(0, 2, 1, 3)
        q, k = q * cos + _rot_np(q) * sin, k * cos + _rot_np(k) * sin
        k, v = np.repeat(k, H // KVH, axis=1), np.repeat(v, H // KVH, axis=1)
        w = _softmax_masked_np(q @ k.transpose(0, 1, 3, 2) / math.sqrt(hd), allowed)
        a = (w @ v).transpose(0, 2, 1, 3).reshape(B, T, H * hd)
        h = h + a @ sd[p + "self_attn.o_proj.weight"].T
        x = _rms_np(h, sd[p + "post_attention_layernorm.weight"], cfg.rms_norm_eps)
        m = _silu_np(x @ sd[p + "mlp.gate_proj.weight"].T) * (x @ sd[p + "mlp.up_proj.weight"].T)
        h = h + m @ sd[p + "mlp.down_proj.weight"].T
    h = _rms_np(h, sd["model.norm.weight"], cfg.rms_norm_eps)
    return h @ sd["lm_head.weight"].T


LLAMA_IDS = [[3, 5, 7, 2, 9, 4], [1, 12, 6, 6, 8, 2]]


def _llama_model(torch, weights=None, **cfg_kw):
    acts = activations_page(torch)
    p = llama_page(torch, acts.ACT2FN)
    torch.manual_seed(0)
    cfg = LlamaConfig(**cfg_kw)
    model = p.LlamaForCausalLM(cfg)
    if weights is not None:
        model.load_state_dict({k: torch.tensor(v) for k, v in weights.items()})
    return p, cfg, model


def _llama_run(torch, weights=None):
    p, cfg, model = _llama_model(torch, weights)
    r = SimpleNamespace(cfg=cfg, model=model)
    r.sd = {k: _np(v) for k, v in model.state_dict().items()}
    ids = torch.tensor(LLAMA_IDS)
    with torch.no_grad():
        r.full = model(ids).logits
        r.full_tuple = model(ids, return_dict=False)
        changed = ids.clone()
        changed[:, 4] = 11
        r.changed = model(changed).logits
        # key/value cache: the prompt of 4, then the last two tokens one by one
        out = model(ids[:, :4], use_cache=True)
        steps = [out.logits[:, -1]]
        past = out.past_key_values
        r.past_shapes = [tuple(t.shape) for t in past[0]]
        for t in (4, 5):
            out = model(ids[:, t:t + 1], past_key_values=past, use_cache=True,
                        attention_mask=torch.ones(2, t + 1, dtype=torch.long))
            steps.append(out.logits[:, -1])
            past = out.past_key_values
        r.steps = torch.stack(steps, 1)
        r.reordered = model._reorder_cache(past, torch.tensor([1, 0]))
        r.past_final = past
        # left padding: row 0 is the first four tokens of LLAMA_IDS[0] after two pads
        padded = torch.tensor([[0, 0] + LLAMA_IDS[0][:4], LLAMA_IDS[1]])
        mask = torch.tensor([[0, 0, 1, 1, 1, 1], [1] * 6])
        inputs = model.prepare_inputs_for_generation(padded, attention_mask=mask)
        r.position_ids = inputs["position_ids"]
        r.padded = model(**inputs).logits
        r.alone = model(ids[:1, :4]).logits
        r.mask4d = model.model._update_causal_mask(mask, torch.zeros(2, 6, 3))
    # the rotary pieces
    rope = p.LlamaRotaryEmbedding(4, max_position_embeddings=8)
    r.inv_freq, r.cos_cached = rope.inv_freq, rope._cos_cached
    r.rope_buffers = sorted(name for name, _ in rope.named_buffers())
    r.rope_state = list(rope.state_dict())
    pos = torch.tensor([[0, 1, 2, 5], [3, 3, 7, 1]])
    x = torch.zeros(2, 3, 4, 4)
    r.cos, r.sin = rope(x, pos)
    scaled = p.LlamaLinearScalingRotaryEmbedding(4, max_position_embeddings=8, scaling_factor=2.0)
    r.cos_scaled, r.sin_scaled = scaled(x, pos)
    r.cos_half, _ = rope(x, pos.float() / 2.0)
    torch.manual_seed(1)
    q, k = torch.randn(2, 3, 4, 4), torch.randn(2, 1, 4, 4)
    r.q, r.k = q, k
    r.q_emb, r.k_emb = p.apply_rotary_pos_emb(q, k, r.cos, r.sin)
    r.kv = p.repeat_kv(torch.arange(24.0).view(1, 2, 3, 4), 3)
    r.kv_interleave = torch.arange(24.0).view(1, 2, 3, 4).repeat_interleave(3, dim=1)
    return r


def test_transformers_llama_forward():
    r = _llama_run(lucid)
    cfg, sd = r.cfg, r.sd
    assert sorted(k for k in sd if "layers.0" in k) == sorted(
        "model.layers.0." + k for k in ("self_attn.q_proj.weight", "self_attn.k_proj.weight", "self_attn.v_proj.weight",
                                        "self_attn.o_proj.weight", "mlp.gate_proj.weight", "mlp.up_proj.weight",
                                        "mlp.down_proj.weight", "input_layernorm.weight",
                                        "post_attention_layernorm.weight"))
    assert sd["model.layers.0.self_attn.k_proj.weight"].shape == (8, 16)  # 2 key/value heads of 4
    assert np.all(sd["model.embed_tokens.weight"][0] == 0)  # padding_idx row zeroed by _init_weights
    assert 0.15 < sd["lm_head.weight"].std() < 0.25  # normal_(std=initializer_range)
    want = _llama_np(sd, cfg, LLAMA_IDS)
    assert r.full.shape == (2, 6, 14) and r.full.dtype == lucid.float32
    np.testing.assert_allclose(_np(r.full), want, rtol=1e-4, atol=1e-5)
    assert len(r.full_tuple) == 1
    np.testing.assert_array_equal(_np(r.full_tuple[0]), _np(r.full))
    # causal: a change at position 4 leaves positions 0..3 alone and changes 4 and 5
    np.testing.assert_array_equal(_np(r.changed)[:, :4], _np(r.full)[:, :4])
    assert np.abs(_np(r.changed)[:, 4:] - _np(r.full)[:, 4:]).min() > 0
    # cached decoding equals the full forward
    assert r.past_shapes == [(2, 2, 4, 4), (2, 2, 4, 4)]
    assert [tuple(t.shape) for t in r.past_final[1]] == [(2, 2, 6, 4), (2, 2, 6, 4)]
    np.testing.assert_allclose(_np(r.steps), _np(r.full)[:, 3:], rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(_np(r.reordered[1][0]), _np(r.past_final[1][0])[::-1])
    # left padding: positions from the mask's cumsum, and the padded row equals its unpadded forward
    assert r.position_ids.tolist() == [[1, 1, 0, 1, 2, 3], [0, 1, 2, 3, 4, 5]]
    np.testing.assert_allclose(_np(r.padded)[0, 2:], _np(r.alone)[0], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(_np(r.padded)[1], _np(r.full)[1], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(_np(r.padded), _llama_np(sd, cfg, [[0, 0] + LLAMA_IDS[0][:4], LLAMA_IDS[1]],
                                                      [[0, 0, 1, 1, 1, 1], [1] * 6], _np(r.position_ids)),
                               rtol=1e-4, atol=1e-5)
    lo = np.finfo(np.float32).min
    m4 = _np(r.mask4d)
    assert m4.shape == (2, 1, 16, 16)
    allowed = (np.arange(16)[None, :] <= np.arange(16)[:, None])[None, None] & \
        np.concatenate([np.array([[0, 0, 1, 1, 1, 1], [1] * 6]), np.ones((2, 10))], 1)[:, None, None, :].astype(bool)
    np.testing.assert_array_equal(m4, np.where(allowed, 0.0, lo))
    # rotary embedding
    inv = 1.0 / 10000 ** (np.arange(0, 4, 2) / 4)
    np.testing.assert_allclose(_np(r.inv_freq), inv, rtol=1e-6)
    assert r.rope_buffers == ["_cos_cached", "_sin_cached", "inv_freq"] and r.rope_state == []  # persistent=False
    np.testing.assert_allclose(_np(r.cos_cached), _rope_np(np.arange(8.0), 4)[0], rtol=1e-6, atol=1e-7)
    pos = np.array([[0, 1, 2, 5], [3, 3, 7, 1]], dtype=np.float64)
    cos, sin = _rope_np(pos, 4)
    np.testing.assert_allclose(_np(r.cos), cos, atol=1e-6)
    np.testing.assert_allclose(_np(r.sin), sin, atol=1e-6)
    np.testing.assert_allclose(_np(r.cos_scaled), _rope_np(pos / 2, 4)[0], atol=1e-6)
    np.testing.assert_array_equal(_np(r.cos_scaled), _np(r.cos_half))
    q, k = _np(r.q), _np(r.k)
    np.testing.assert_allclose(_np(r.q_emb), q * cos[:, None] + _rot_np(q) * sin[:, None], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(_np(r.k_emb), k * cos[:, None] + _rot_np(k) * sin[:, None], rtol=1e-5, atol=1e-6)
    # a rotation: each (x_i, x_{i+d/2}) pair keeps its norm
    np.testing.assert_allclose(np.linalg.norm(_np(r.q_emb), axis=-1), np.linalg.norm(q, axis=-1), rtol=1e-5)
    np.testing.assert_array_equal(_np(r.kv), _np(r.kv_interleave))
    assert r.kv.shape == (1, 6, 3, 4)


def test_transformers_llama_forward_torch_parity():
    torch = pytest.importorskip("torch")
    a = _llama_run(lucid)
    b = _llama_run(torch, weights=a.sd)
    for name in ("full", "changed", "steps", "padded", "alone", "mask4d", "inv_freq", "cos_cached", "cos", "sin",
                 "cos_scaled"):
        np.testing.assert_allclose(_np(getattr(a, name)), getattr(b, name).detach().numpy(), rtol=1e-5, atol=1e-6,
                                   err_msg=name)
    assert a.position_ids.tolist() == b.position_ids.tolist()
    assert a.rope_buffers == b.rope_buffers and a.rope_state == b.rope_state == []


def _llama_train_run(torch, weights=None):
    p, cfg, model = _llama_model(torch, weights)
    r = SimpleNamespace(sd={k: _np(v) for k, v in model.state_dict().items()})
    ids = torch.tensor(LLAMA_IDS)
    # pretraining_tp=2: the sliced projections give the same logits with the same weights
    tp_cfg = LlamaConfig(pretraining_tp=2)
    tp = p.LlamaForCausalLM(tp_cfg)
    tp.load_state_dict(model.state_dict())
    with torch.no_grad():
        r.tp, r.plain = tp(ids).logits, model(ids).logits
    # float64: the loss's gradient against central differences on a few weights
    model.double()
    out = model(ids, labels=ids)
    out.loss.backward()
    r.loss64 = out.loss.detach()
    names = ("model.layers.0.self_attn.k_proj.weight", "model.layers.1.mlp.gate_proj.weight", "model.norm.weight")
    params = dict(model.named_parameters())
    r.grads = {n: params[n].grad[1].clone() if params[n].dim() == 2 else params[n].grad.clone() for n in names}
    r.fd = {}
    # the attention's softmax runs in float32 (``dtype=torch.float32``, the source's upcast) and the
    # logits are cast ``.float()`` even in a float64 model, so the loss carries float32 rounding (~3e-7):
    # a wide step keeps it small against the differences
    h = 1e-2
    with torch.no_grad():
        for n in names:
            w = params[n]
            row = w[1] if w.dim() == 2 else w
            fd = []
            for j in (0, 3):
                old = row[j].item()
                row[j] = old + h
                up = model(ids, labels=ids).loss.item()
                row[j] = old - h
                down = model(ids, labels=ids).loss.item()
                row[j] = old
                fd.append((up - down) / (2 * h))
            r.fd[n] = fd
    # a few AdamW steps in float32 on the two sequences
    model.float()
    model.zero_grad()
    opt = torch.optim.AdamW(model.parameters(), lr=0.02)
    losses = []
    for _ in range(8):
        opt.zero_grad()
        loss = model(ids, labels=ids, return_dict=False)[0]
        loss.backward()
        opt.step()
        losses.append(loss.item())
    r.losses = losses
    return r


def test_transformers_llama_train():
    r = _llama_train_run(lucid)
    np.testing.assert_allclose(_np(r.tp), _np(r.plain), rtol=1e-5, atol=1e-6)
    # the shifted cross-entropy, recomputed
    logits = _llama_np(r.sd, LlamaConfig(), LLAMA_IDS)[:, :-1].reshape(-1, 14)
    labels = np.asarray(LLAMA_IDS)[:, 1:].reshape(-1)
    lse = np.log(np.exp(logits - logits.max(-1, keepdims=True)).sum(-1)) + logits.max(-1)
    np.testing.assert_allclose(r.loss64.item(), (lse - logits[np.arange(10), labels]).mean(), rtol=1e-5)
    for n, fd in r.fd.items():
        g = _np(r.grads[n])
        np.testing.assert_allclose([g[0], g[3]], fd, rtol=5e-3, atol=5e-5, err_msg=n)
        assert np.abs(fd).max() > 1e-4, n
    assert r.losses[-1] < 0.6 * r.losses[0], r.losses
    assert all(b < a for a, b in zip(r.losses, r.losses[1:])), r.losses


def test_transformers_llama_train_torch_parity():
    torch = pytest.importorskip("torch")
    a = _llama_train_run(lucid)
    b = _llama_train_run(torch, weights=a.sd)
    np.testing.assert_allclose(_np(a.tp), b.tp.numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(a.loss64.item(), b.loss64.item(), rtol=1e-6)  # float32 logits
    for n in a.grads:  # the float32 softmax inside: float32-level agreement
        np.testing.assert_allclose(_np(a.grads[n]), b.grads[n].numpy(), rtol=1e-5, atol=2e-7, err_msg=n)
    np.testing.assert_allclose(a.losses, b.losses, rtol=1e-4)


# --------------------------------------------------------------------------- gpt2 + pytorch_utils.py

@dataclass
class GPT2Config:  # configuration_gpt2.GPT2Config, tiny
    hidden_size: int = 12
    num_attention_heads: int = 3
    max_position_embeddings: int = 8
    n_inner: Optional[int] = None
    activation_function: str = "gelu_new"
    resid_pdrop: float = 0.0
    attn_pdrop: float = 0.0
    layer_norm_epsilon: float = 1e-5
    scale_attn_weights: bool = True
    scale_attn_by_inverse_layer_idx: bool = False
    reorder_and_upcast_attn: bool = False
    add_cross_attention: bool = False


def gpt2_page(torch, ACT2FN):
    nn = torch.nn
    from typing import Callable, List, Set, Tuple, Union
    autocast = torch.cuda.amp.autocast  # ``from torch.cuda.amp import autocast``

    # pytorch_utils.py
    def prune_linear_layer(layer: nn.Linear, index: torch.LongTensor, dim: int = 0) -> nn.Linear:
        index = index.to(layer.weight.device)
        W = layer.weight.index_select(dim, index).clone().detach()
        if layer.bias is not None:
            if dim == 1:
                b = layer.bias.clone().detach()
            else:
                b = layer.bias[index].clone().detach()
        new_size = list(layer.weight.size())
        new_size[dim] = len(index)
        new_layer = nn.Linear(new_size[1], new_size[0], bias=layer.bias is not None).to(layer.weight.device)
        new_layer.weight.requires_grad = False
        new_layer.weight.copy_(W.contiguous())
        new_layer.weight.requires_grad = True
        if layer.bias is not None:
            new_layer.bias.requires_grad = False
            new_layer.bias.copy_(b.contiguous())
            new_layer.bias.requires_grad = True
        return new_layer

    class Conv1D(nn.Module):
        """
        1D-convolutional layer as defined by Radford et al. for OpenAI GPT (and also used in GPT-2).

        Basically works like a linear layer but the weights are transposed.
        """

        def __init__(self, nf, nx):
            super().__init__()
            self.nf = nf
            w = torch.empty(nx, nf)
            nn.init.normal_(w, std=0.02)
            self.weight = nn.Parameter(w)
            self.bias = nn.Parameter(torch.zeros(nf))

        def forward(self, x):
            size_out = x.size()[:-1] + (self.nf,)
            x = torch.addmm(self.bias, x.view(-1, x.size(-1)), self.weight)
            x = x.view(size_out)
            return x

    def prune_conv1d_layer(layer: Conv1D, index: torch.LongTensor, dim: int = 1) -> Conv1D:
        index = index.to(layer.weight.device)
        W = layer.weight.index_select(dim, index).clone().detach()
        if dim == 0:
            b = layer.bias.clone().detach()
        else:
            b = layer.bias[index].clone().detach()
        new_size = list(layer.weight.size())
        new_size[dim] = len(index)
        new_layer = Conv1D(new_size[1], new_size[0]).to(layer.weight.device)
        new_layer.weight.requires_grad = False
        new_layer.weight.copy_(W.contiguous())
        new_layer.weight.requires_grad = True
        new_layer.bias.requires_grad = False
        new_layer.bias.copy_(b.contiguous())
        new_layer.bias.requires_grad = True
        return new_layer

    def prune_layer(layer, index, dim=None):
        if isinstance(layer, nn.Linear):
            return prune_linear_layer(layer, index, dim=0 if dim is None else dim)
        elif isinstance(layer, Conv1D):
            return prune_conv1d_layer(layer, index, dim=1 if dim is None else dim)
        else:
            raise ValueError(f"Can't prune layer of class {layer.__class__}")

    def apply_chunking_to_forward(
        forward_fn: Callable[..., torch.Tensor], chunk_size: int, chunk_dim: int, *input_tensors
    ) -> torch.Tensor:
        assert len(input_tensors) > 0, f"{input_tensors} has to be a tuple/list of tensors"

        # inspect.signature exist since python 3.5 and is a python method -> no problem with backward compatibility
        num_args_in_forward_chunk_fn = len(inspect.signature(forward_fn).parameters)
        if num_args_in_forward_chunk_fn != len(input_tensors):
            raise ValueError(
                f"forward_chunk_fn expects {num_args_in_forward_chunk_fn} arguments, but only {len(input_tensors)} input "
                "tensors are given"
            )

        if chunk_size > 0:
            tensor_shape = input_tensors[0].shape[chunk_dim]
            for input_tensor in input_tensors:
                if input_tensor.shape[chunk_dim] != tensor_shape:
                    raise ValueError(
                        f"All input tenors have to be of the same shape: {tensor_shape}, "
                        f"found shape {input_tensor.shape[chunk_dim]}"
                    )

            if input_tensors[0].shape[chunk_dim] % chunk_size != 0:
                raise ValueError(
                    f"The dimension to be chunked {input_tensors[0].shape[chunk_dim]} has to be a multiple of the chunk "
                    f"size {chunk_size}"
                )

            num_chunks = input_tensors[0].shape[chunk_dim] // chunk_size

            # chunk input tensor into tuples
            input_tensors_chunks = tuple(input_tensor.chunk(num_chunks, dim=chunk_dim) for input_tensor in input_tensors)
            # apply forward fn to every tuple
            output_chunks = tuple(forward_fn(*input_tensors_chunk) for input_tensors_chunk in zip(*input_tensors_chunks))
            # concatenate output at same dimension
            return torch.cat(output_chunks, dim=chunk_dim)

        return forward_fn(*input_tensors)

    def find_pruneable_heads_and_indices(
        heads: List[int], n_heads: int, head_size: int, already_pruned_heads: Set[int]
    ) -> Tuple[Set[int], torch.LongTensor]:
        mask = torch.ones(n_heads, head_size)
        heads = set(heads) - already_pruned_heads  # Convert to set and remove already pruned heads
        for head in heads:
            # Compute how many pruned heads are before the head and move the index accordingly
            head = head - sum(1 if h < head else 0 for h in already_pruned_heads)
            mask[head] = 0
        mask = mask.view(-1).contiguous().eq(1)
        index: torch.LongTensor = torch.arange(len(mask))[mask].long()
        return heads, index

    # models/gpt2/modeling_gpt2.py
    class GPT2Attention(nn.Module):
        def __init__(self, config, is_cross_attention=False, layer_idx=None):
            super().__init__()

            max_positions = config.max_position_embeddings
            self.register_buffer(
                "bias",
                torch.tril(torch.ones((max_positions, max_positions), dtype=torch.bool)).view(
                    1, 1, max_positions, max_positions
                ),
                persistent=False,
            )
            self.register_buffer("masked_bias", torch.tensor(-1e4), persistent=False)

            self.embed_dim = config.hidden_size
            self.num_heads = config.num_attention_heads
            self.head_dim = self.embed_dim // self.num_heads
            self.split_size = self.embed_dim
            if self.head_dim * self.num_heads != self.embed_dim:
                raise ValueError(
                    f"`embed_dim` must be divisible by num_heads (got `embed_dim`: {self.embed_dim} and `num_heads`:"
                    f" {self.num_heads})."
                )

            self.scale_attn_weights = config.scale_attn_weights
            self.is_cross_attention = is_cross_attention

            # Layer-wise attention scaling, reordering, and upcasting
            self.scale_attn_by_inverse_layer_idx = config.scale_attn_by_inverse_layer_idx
            self.layer_idx = layer_idx
            self.reorder_and_upcast_attn = config.reorder_and_upcast_attn

            if self.is_cross_attention:
                self.c_attn = Conv1D(2 * self.embed_dim, self.embed_dim)
                self.q_attn = Conv1D(self.embed_dim, self.embed_dim)
            else:
                self.c_attn = Conv1D(3 * self.embed_dim, self.embed_dim)
            self.c_proj = Conv1D(self.embed_dim, self.embed_dim)

            self.attn_dropout = nn.Dropout(config.attn_pdrop)
            self.resid_dropout = nn.Dropout(config.resid_pdrop)

            self.pruned_heads = set()

        def prune_heads(self, heads):
            if len(heads) == 0:
                return
            heads, index = find_pruneable_heads_and_indices(heads, self.num_heads, self.head_dim, self.pruned_heads)
            index_attn = torch.cat([index, index + self.split_size, index + (2 * self.split_size)])

            # Prune conv1d layers
            self.c_attn = prune_conv1d_layer(self.c_attn, index_attn, dim=1)
            self.c_proj = prune_conv1d_layer(self.c_proj, index, dim=0)

            # Update hyper params
            self.split_size = (self.split_size // self.num_heads) * (self.num_heads - len(heads))
            self.num_heads = self.num_heads - len(heads)
            self.pruned_heads = self.pruned_heads.union(heads)

        def _attn(self, query, key, value, attention_mask=None, head_mask=None):
            attn_weights = torch.matmul(query, key.transpose(-1, -2))

            if self.scale_attn_weights:
                attn_weights = attn_weights / torch.full(
                    [], value.size(-1) ** 0.5, dtype=attn_weights.dtype, device=attn_weights.device
                )

            # Layer-wise attention scaling
            if self.scale_attn_by_inverse_layer_idx:
                attn_weights = attn_weights / float(self.layer_idx + 1)

            if not self.is_cross_attention:
                # if only "normal" attention layer implements causal mask
                query_length, key_length = query.size(-2), key.size(-2)
                causal_mask = self.bias[:, :, key_length - query_length : key_length, :key_length]
                mask_value = torch.finfo(attn_weights.dtype).min
                # Need to be a tensor, otherwise we get error: `RuntimeError: expected scalar type float but found double`.
                # Need to be on the same device, otherwise `RuntimeError: ..., x and y to be on the same device`
                mask_value = torch.full([], mask_value, dtype=attn_weights.dtype).to(attn_weights.device)
                attn_weights = torch.where(causal_mask, attn_weights.to(attn_weights.dtype), mask_value)

            if attention_mask is not None:
                # Apply the attention mask
                attn_weights = attn_weights + attention_mask

            attn_weights = nn.functional.softmax(attn_weights, dim=-1)

            # Downcast (if necessary) back to V's dtype (if in mixed-precision) -- No-Op otherwise
            attn_weights = attn_weights.type(value.dtype)
            attn_weights = self.attn_dropout(attn_weights)

            # Mask heads if we want to
            if head_mask is not None:
                attn_weights = attn_weights * head_mask

            attn_output = torch.matmul(attn_weights, value)

            return attn_output, attn_weights

        def _upcast_and_reordered_attn(self, query, key, value, attention_mask=None, head_mask=None):
            # Use `torch.baddbmm` (a bit more efficient w/ alpha param for scaling -- from Megatron-LM)
            bsz, num_heads, q_seq_len, dk = query.size()
            _, _, k_seq_len, _ = key.size()

            # Preallocate attn_weights for `baddbmm`
            attn_weights = torch.empty(bsz * num_heads, q_seq_len, k_seq_len, dtype=torch.float32, device=query.device)

            # Compute Scale Factor
            scale_factor = 1.0
            if self.scale_attn_weights:
                scale_factor /= float(value.size(-1)) ** 0.5

            if self.scale_attn_by_inverse_layer_idx:
                scale_factor /= float(self.layer_idx + 1)

            # Upcast (turn off autocast) and reorder (Scale K by 1 / root(dk))
            with autocast(enabled=False):
                q, k = query.reshape(-1, q_seq_len, dk), key.transpose(-1, -2).reshape(-1, dk, k_seq_len)
                attn_weights = torch.baddbmm(attn_weights, q.float(), k.float(), beta=0, alpha=scale_factor)
                attn_weights = attn_weights.reshape(bsz, num_heads, q_seq_len, k_seq_len)

            if not self.is_cross_attention:
                # if only "normal" attention layer implements causal mask
                query_length, key_length = query.size(-2), key.size(-2)
                causal_mask = self.bias[:, :, key_length - query_length : key_length, :key_length]
                mask_value = torch.finfo(attn_weights.dtype).min
                # Need to be a tensor, otherwise we get error: `RuntimeError: expected scalar type float but found double`.
                # Need to be on the same device, otherwise `RuntimeError: ..., x and y to be on the same device`
                mask_value = torch.tensor(mask_value, dtype=attn_weights.dtype).to(attn_weights.device)
                attn_weights = torch.where(causal_mask, attn_weights, mask_value)

            if attention_mask is not None:
                # Apply the attention mask
                attn_weights = attn_weights + attention_mask

            attn_weights = nn.functional.softmax(attn_weights, dim=-1)

            # Downcast (if necessary) back to V's dtype (if in mixed-precision) -- No-Op if otherwise
            if attn_weights.dtype != torch.float32:
                raise RuntimeError("Error with upcasting, attn_weights does not have dtype torch.float32")
            attn_weights = attn_weights.type(value.dtype)
            attn_weights = self.attn_dropout(attn_weights)

            # Mask heads if we want to
            if head_mask is not None:
                attn_weights = attn_weights * head_mask

            attn_output = torch.matmul(attn_weights, value)

            return attn_output, attn_weights

        def _split_heads(self, tensor, num_heads, attn_head_size):
            """
            Splits hidden_size dim into attn_head_size and num_heads
            """
            new_shape = tensor.size()[:-1] + (num_heads, attn_head_size)
            tensor = tensor.view(new_shape)
            return tensor.permute(0, 2, 1, 3)  # (batch, head, seq_length, head_features)

        def _merge_heads(self, tensor, num_heads, attn_head_size):
            """
            Merges attn_head_size dim and num_attn_heads dim into hidden_size
            """
            tensor = tensor.permute(0, 2, 1, 3).contiguous()
            new_shape = tensor.size()[:-2] + (num_heads * attn_head_size,)
            return tensor.view(new_shape)

        def forward(
            self,
            hidden_states,
            layer_past=None,
            attention_mask=None,
            head_mask=None,
            encoder_hidden_states=None,
            encoder_attention_mask=None,
            use_cache=False,
            output_attentions=False,
        ):
            if encoder_hidden_states is not None:
                if not hasattr(self, "q_attn"):
                    raise ValueError(
                        "If class is used as cross attention, the weights `q_attn` have to be defined. "
                        "Please make sure to instantiate class with `GPT2Attention(..., is_cross_attention=True)`."
                    )

                query = self.q_attn(hidden_states)
                key, value = self.c_attn(encoder_hidden_states).split(self.split_size, dim=2)
                attention_mask = encoder_attention_mask
            else:
                query, key, value = self.c_attn(hidden_states).split(self.split_size, dim=2)

            query = self._split_heads(query, self.num_heads, self.head_dim)
            key = self._split_heads(key, self.num_heads, self.head_dim)
            value = self._split_heads(value, self.num_heads, self.head_dim)

            if layer_past is not None:
                past_key, past_value = layer_past
                key = torch.cat((past_key, key), dim=-2)
                value = torch.cat((past_value, value), dim=-2)

            if use_cache is True:
                present = (key, value)
            else:
                present = None

            if self.reorder_and_upcast_attn:
                attn_output, attn_weights = self._upcast_and_reordered_attn(query, key, value, attention_mask, head_mask)
            else:
                attn_output, attn_weights = self._attn(query, key, value, attention_mask, head_mask)

            attn_output = self._merge_heads(attn_output, self.num_heads, self.head_dim)
            attn_output = self.c_proj(attn_output)
            attn_output = self.resid_dropout(attn_output)

            outputs = (attn_output, present)
            if output_attentions:
                outputs += (attn_weights,)

            return outputs  # a, present, (attentions)

    class GPT2MLP(nn.Module):
        def __init__(self, intermediate_size, config):
            super().__init__()
            embed_dim = config.hidden_size
            self.c_fc = Conv1D(intermediate_size, embed_dim)
            self.c_proj = Conv1D(embed_dim, intermediate_size)
            self.act = ACT2FN[config.activation_function]
            self.dropout = nn.Dropout(config.resid_pdrop)

        def forward(self, hidden_states):
            hidden_states = self.c_fc(hidden_states)
            hidden_states = self.act(hidden_states)
            hidden_states = self.c_proj(hidden_states)
            hidden_states = self.dropout(hidden_states)
            return hidden_states

    class GPT2Block(nn.Module):
        def __init__(self, config, layer_idx=None):
            super().__init__()
            hidden_size = config.hidden_size
            inner_dim = config.n_inner if config.n_inner is not None else 4 * hidden_size

            self.ln_1 = nn.LayerNorm(hidden_size, eps=config.layer_norm_epsilon)
            self.attn = GPT2Attention(config, layer_idx=layer_idx)
            self.ln_2 = nn.LayerNorm(hidden_size, eps=config.layer_norm_epsilon)

            if config.add_cross_attention:
                self.crossattention = GPT2Attention(config, is_cross_attention=True, layer_idx=layer_idx)
                self.ln_cross_attn = nn.LayerNorm(hidden_size, eps=config.layer_norm_epsilon)

            self.mlp = GPT2MLP(inner_dim, config)

        def forward(
            self,
            hidden_states,
            layer_past=None,
            attention_mask=None,
            head_mask=None,
            encoder_hidden_states=None,
            encoder_attention_mask=None,
            use_cache=False,
            output_attentions=False,
        ):
            residual = hidden_states
            hidden_states = self.ln_1(hidden_states)
            attn_outputs = self.attn(
                hidden_states,
                layer_past=layer_past,
                attention_mask=attention_mask,
                head_mask=head_mask,
                use_cache=use_cache,
                output_attentions=output_attentions,
            )
            attn_output = attn_outputs[0]  # output_attn: a, present, (attentions)
            outputs = attn_outputs[1:]
            # residual connection
            hidden_states = attn_output + residual

            if encoder_hidden_states is not None:
                # add one self-attention block for cross-attention
                if not hasattr(self, "crossattention"):
                    raise ValueError(
                        f"If `encoder_hidden_states` are passed, {self} has to be instantiated with "
                        "cross-attention layers by setting `config.add_cross_attention=True`"
                    )
                residual = hidden_states
                hidden_states = self.ln_cross_attn(hidden_states)
                cross_attn_outputs = self.crossattention(
                    hidden_states,
                    attention_mask=attention_mask,
                    head_mask=head_mask,
                    encoder_hidden_states=encoder_hidden_states,
                    encoder_attention_mask=encoder_attention_mask,
                    output_attentions=output_attentions,
                )
                attn_output = cross_attn_outputs[0]
                # residual connection
                hidden_states = residual + attn_output
                outputs = outputs + cross_attn_outputs[2:]  # add cross attentions if we output attention weights

            residual = hidden_states
            hidden_states = self.ln_2(hidden_states)
            feed_forward_hidden_states = self.mlp(hidden_states)
            # residual connection
            hidden_states = residual + feed_forward_hidden_states

            if use_cache:
                outputs = (hidden_states,) + outputs
            else:
                outputs = (hidden_states,) + outputs[1:]

            return outputs  # hidden_states, present, (attentions, cross_attentions)

    return SimpleNamespace(Conv1D=Conv1D, prune_linear_layer=prune_linear_layer, prune_conv1d_layer=prune_conv1d_layer,
                           prune_layer=prune_layer, apply_chunking_to_forward=apply_chunking_to_forward,
                           find_pruneable_heads_and_indices=find_pruneable_heads_and_indices,
                           GPT2Attention=GPT2Attention, GPT2MLP=GPT2MLP, GPT2Block=GPT2Block)


def _ln_np(x, w, b, eps=1e-5):
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(var + eps) * w + b


def _heads_attn_np(q, k, v, H, causal, add_mask=None, head_mask=None):
    B, Tq, E = q.shape
    Tk, hd = k.shape[1], E // H
    q, k, v = (t.reshape(B, -1, H, hd).transpose(0, 2, 1, 3) for t in (q, k, v))
    s = q @ k.transpose(0, 1, 3, 2) / math.sqrt(hd)
    if causal:
        ok = np.arange(Tk)[None, :] <= np.arange(Tq)[:, None] + (Tk - Tq)
        s = np.where(ok, s, np.finfo(s.dtype).min)
    if add_mask is not None:
        s = s + add_mask
    w = np.exp(s - s.max(-1, keepdims=True))
    w = w / w.sum(-1, keepdims=True)
    if head_mask is not None:
        w = w * head_mask
    return (w @ v).transpose(0, 2, 1, 3).reshape(B, Tq, E)


def _gpt2_block_np(sd, x, H, add_mask=None, head_mask=None, enc=None):
    h = _ln_np(x, sd["ln_1.weight"], sd["ln_1.bias"])
    q, k, v = np.split(h @ sd["attn.c_attn.weight"] + sd["attn.c_attn.bias"], 3, axis=-1)
    a = _heads_attn_np(q, k, v, H, True, add_mask, head_mask)
    x = x + a @ sd["attn.c_proj.weight"] + sd["attn.c_proj.bias"]
    if enc is not None:
        h = _ln_np(x, sd["ln_cross_attn.weight"], sd["ln_cross_attn.bias"])
        q = h @ sd["crossattention.q_attn.weight"] + sd["crossattention.q_attn.bias"]
        k, v = np.split(enc @ sd["crossattention.c_attn.weight"] + sd["crossattention.c_attn.bias"], 2, axis=-1)
        x = x + _heads_attn_np(q, k, v, H, False) @ sd["crossattention.c_proj.weight"] + sd["crossattention.c_proj.bias"]
    h = _ln_np(x, sd["ln_2.weight"], sd["ln_2.bias"])
    m = _act_np("gelu_new", h @ sd["mlp.c_fc.weight"] + sd["mlp.c_fc.bias"])
    return x + m @ sd["mlp.c_proj.weight"] + sd["mlp.c_proj.bias"]


def _gpt2_run(torch, weights=None, x_np=None):
    acts = activations_page(torch)
    p = gpt2_page(torch, acts.ACT2FN)
    torch.manual_seed(0)
    cfg = GPT2Config(add_cross_attention=True)
    block = p.GPT2Block(cfg, layer_idx=0)
    with torch.no_grad():
        for prm in block.parameters():
            prm.normal_(0.0, 0.4)
    if weights is not None:
        block.load_state_dict({k: torch.tensor(v) for k, v in weights.items()})
    r = SimpleNamespace(cfg=cfg, sd={k: _np(v) for k, v in block.state_dict().items()})
    if x_np is None:
        x_np = np.random.default_rng(0).normal(size=(2, 5, 12)).astype(np.float32)
    r.x_np = x_np
    x = torch.tensor(x_np)
    enc = torch.tensor(x_np[:, :4, ::-1].copy())
    r.enc = _np(enc)
    r.buffers = {n: b for n, b in block.attn.named_buffers()}
    r.state_keys = sorted(block.attn.state_dict())
    with torch.no_grad():
        r.out, r.present = block(x, use_cache=True)
        r.out_attn = block(x, output_attentions=True)
        # the cache: 3 tokens, then the next 2 at once against the cached keys
        h3, past = block(x[:, :3], use_cache=True)
        r.h_next, r.present2 = block(x[:, 3:], layer_past=past, use_cache=True)
        # additive padding mask (key 1 of row 0 masked) and a head mask
        add = torch.zeros(2, 1, 1, 5)
        add[0, 0, 0, 1] = -1e4
        r.masked = block(x, attention_mask=add)[0]
        hm = torch.tensor([1.0, 0.0, 1.0]).view(1, 3, 1, 1)
        r.head_masked = block(x, head_mask=hm)[0]
        r.cross = block(x, encoder_hidden_states=enc)[0]
        # the upcast-and-reorder path (baddbmm into an uninitialised buffer with beta=0)
        block.attn.reorder_and_upcast_attn = True
        r.reordered = block(x)[0]
        block.attn.reorder_and_upcast_attn = False
        # chunked feed-forward
        ln = block.ln_2(x)
        r.mlp_full = block.mlp(ln)
        r.mlp_chunked = p.apply_chunking_to_forward(block.mlp.forward, 1, 1, ln)
        r.mlp_chunk0 = p.apply_chunking_to_forward(block.mlp.forward, 0, 1, ln)
    r.errors = []
    for fn in (lambda: p.apply_chunking_to_forward(block.mlp.forward, 2, 1, ln),
               lambda: p.apply_chunking_to_forward(block.mlp.forward, 1, 1, ln, ln),
               lambda: p.apply_chunking_to_forward(lambda a, b: a + b, 1, 1, ln, ln[:, :4]),
               lambda: p.prune_layer(block.ln_1, torch.tensor([0])),
               lambda: p.GPT2Attention(GPT2Config(hidden_size=10))):
        try:
            fn()
            r.errors.append(None)
        except ValueError as e:
            r.errors.append(str(e))
    # head pruning
    r.heads_idx = p.find_pruneable_heads_and_indices([1, 3], 4, 2, {1})
    block.attn.prune_heads([1])
    r.pruned_shapes = (tuple(block.attn.c_attn.weight.shape), tuple(block.attn.c_proj.weight.shape),
                       block.attn.num_heads, block.attn.split_size, block.attn.pruned_heads)
    with torch.no_grad():
        r.pruned = block(x)[0]
    lin = torch.nn.Linear(4, 3)
    r.lin_w, r.lin_b = lin.weight.detach().clone(), lin.bias.detach().clone()
    r.lin0 = p.prune_layer(lin, torch.tensor([2, 0]))
    r.lin1 = p.prune_linear_layer(lin, torch.tensor([1, 3]), dim=1)
    conv = p.Conv1D(3, 4)
    r.conv_w = conv.weight.detach().clone()
    r.conv0 = p.prune_layer(conv, torch.tensor([3, 1]), dim=0)
    # float64 gradient of the block against central differences
    b64 = p.GPT2Block(cfg, layer_idx=0)
    b64.load_state_dict({k: torch.tensor(v) for k, v in r.sd.items()})
    b64.double()
    x64 = torch.tensor(x_np.astype(np.float64))

    def loss_fn():
        return (b64(x64)[0] ** 2).sum()

    loss_fn().backward()
    r.grad = b64.attn.c_attn.weight.grad.clone()
    r.fd = []
    w = b64.attn.c_attn.weight
    with torch.no_grad():
        for i, j in ((0, 0), (3, 5), (7, 20), (11, 33)):
            old = w[i, j].item()
            w[i, j] = old + 1e-6
            up = loss_fn().item()
            w[i, j] = old - 1e-6
            down = loss_fn().item()
            w[i, j] = old
            r.fd.append((up - down) / 2e-6)
    return r


_AUTOCAST_WARNING = pytest.mark.filterwarnings("ignore:.*cuda.amp.autocast.*:FutureWarning")  # the source's import


@_AUTOCAST_WARNING
def test_transformers_gpt2_block():
    r = _gpt2_run(lucid)
    sd, x = r.sd, r.x_np.astype(np.float64)
    assert r.buffers["bias"].dtype == lucid.bool and r.buffers["bias"].shape == (1, 1, 8, 8)
    np.testing.assert_array_equal(_np(r.buffers["bias"])[0, 0], np.tril(np.ones((8, 8), bool)))
    assert r.buffers["masked_bias"].item() == -1e4
    assert "bias" not in r.state_keys and "masked_bias" not in r.state_keys  # persistent=False
    want = _gpt2_block_np(sd, x, 3)
    np.testing.assert_allclose(_np(r.out), want, rtol=1e-4, atol=1e-5)
    assert [tuple(t.shape) for t in r.present] == [(2, 3, 5, 4), (2, 3, 5, 4)]
    assert len(r.out_attn) == 2 and r.out_attn[1].shape == (2, 3, 5, 5)
    aw = _np(r.out_attn[1])
    assert np.all(np.triu(aw, 1) == 0)  # causal
    np.testing.assert_allclose(aw.sum(-1), 1.0, rtol=1e-6)
    np.testing.assert_allclose(_np(r.h_next), _np(r.out)[:, 3:], rtol=1e-5, atol=1e-6)
    assert r.present2[0].shape == (2, 3, 5, 4)
    add = np.zeros((2, 1, 1, 5))
    add[0, 0, 0, 1] = -1e4
    np.testing.assert_allclose(_np(r.masked), _gpt2_block_np(sd, x, 3, add_mask=add), rtol=1e-4, atol=1e-5)
    hm = np.array([1.0, 0.0, 1.0]).reshape(1, 3, 1, 1)
    np.testing.assert_allclose(_np(r.head_masked), _gpt2_block_np(sd, x, 3, head_mask=hm), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(_np(r.cross), _gpt2_block_np(sd, x, 3, enc=r.enc.astype(np.float64)),
                               rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(_np(r.reordered), _np(r.out), rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(_np(r.mlp_chunked), _np(r.mlp_full))
    np.testing.assert_array_equal(_np(r.mlp_chunk0), _np(r.mlp_full))
    e = r.errors
    assert e[0] == "The dimension to be chunked 5 has to be a multiple of the chunk size 2"
    assert e[1] == "forward_chunk_fn expects 1 arguments, but only 2 input tensors are given"
    assert e[2] == "All input tenors have to be of the same shape: 5, found shape 4"
    assert e[3].startswith("Can't prune layer of class") and "LayerNorm" in e[3]
    assert "`embed_dim` must be divisible by num_heads (got `embed_dim`: 10 and `num_heads`: 3)" in e[4]
    heads, index = r.heads_idx
    assert heads == {3} and index.tolist() == [0, 1, 2, 3, 6, 7] and index.dtype == lucid.int64
    # pruning head 1 equals masking it
    assert r.pruned_shapes == ((12, 24), (8, 12), 2, 8, {1})
    np.testing.assert_allclose(_np(r.pruned), _np(r.head_masked), rtol=1e-5, atol=1e-6)
    w, b = _np(r.lin_w), _np(r.lin_b)
    np.testing.assert_array_equal(_np(r.lin0.weight), w[[2, 0]])
    np.testing.assert_array_equal(_np(r.lin0.bias), b[[2, 0]])
    np.testing.assert_array_equal(_np(r.lin1.weight), w[:, [1, 3]])
    np.testing.assert_array_equal(_np(r.lin1.bias), b)
    assert r.lin0.weight.requires_grad and r.lin1.bias.requires_grad
    np.testing.assert_array_equal(_np(r.conv0.weight), _np(r.conv_w)[[3, 1]])
    assert r.conv0.nf == 3 and r.conv0.weight.shape == (2, 3)
    g = _np(r.grad)
    np.testing.assert_allclose([g[0, 0], g[3, 5], g[7, 20], g[11, 33]], r.fd, rtol=1e-5, atol=1e-7)
    assert np.abs(r.fd).min() > 1e-3


@_AUTOCAST_WARNING
def test_transformers_gpt2_block_torch_parity():
    torch = pytest.importorskip("torch")
    a = _gpt2_run(lucid)
    b = _gpt2_run(torch, weights=a.sd, x_np=a.x_np)
    for name in ("out", "h_next", "masked", "head_masked", "cross", "reordered", "mlp_chunked", "pruned", "grad"):
        np.testing.assert_allclose(_np(getattr(a, name)), getattr(b, name).detach().numpy(), rtol=1e-5, atol=1e-6,
                                   err_msg=name)
    np.testing.assert_allclose(_np(a.out_attn[1]), b.out_attn[1].numpy(), rtol=1e-5, atol=1e-6)
    assert a.errors == b.errors[:3] + [a.errors[3]] + [b.errors[4]] and b.errors[3].startswith("Can't prune")
    assert a.heads_idx[0] == b.heads_idx[0] and a.heads_idx[1].tolist() == b.heads_idx[1].tolist()
    assert a.pruned_shapes == b.pruned_shapes


# --------------------------------------------------------------------------- models/t5/modeling_t5.py

@dataclass
class T5Config:  # configuration_t5.T5Config, tiny
    d_model: int = 12
    d_kv: int = 4
    num_heads: int = 3
    relative_attention_num_buckets: int = 8
    relative_attention_max_distance: int = 12
    dropout_rate: float = 0.0
    layer_norm_epsilon: float = 1e-6
    is_decoder: bool = False


def t5_page(torch, find_pruneable_heads_and_indices, prune_linear_layer):
    nn = torch.nn

    class T5LayerNorm(nn.Module):
        def __init__(self, hidden_size, eps=1e-6):
            """
            Construct a layernorm module in the T5 style. No bias and no subtraction of mean.
            """
            super().__init__()
            self.weight = nn.Parameter(torch.ones(hidden_size))
            self.variance_epsilon = eps

        def forward(self, hidden_states):
            # T5 uses a layer_norm which only scales and doesn't shift, which is also known as Root Mean
            # Square Layer Normalization https://arxiv.org/abs/1910.07467 thus varience is calculated
            # w/o mean and there is no bias. Additionally we want to make sure that the accumulation for
            # half-precision inputs is done in fp32

            variance = hidden_states.to(torch.float32).pow(2).mean(-1, keepdim=True)
            hidden_states = hidden_states * torch.rsqrt(variance + self.variance_epsilon)

            # convert into half-precision if necessary
            if self.weight.dtype in [torch.float16, torch.bfloat16]:
                hidden_states = hidden_states.to(self.weight.dtype)

            return self.weight * hidden_states

    class T5Attention(nn.Module):
        def __init__(self, config: T5Config, has_relative_attention_bias=False):
            super().__init__()
            self.is_decoder = config.is_decoder
            self.has_relative_attention_bias = has_relative_attention_bias
            self.relative_attention_num_buckets = config.relative_attention_num_buckets
            self.relative_attention_max_distance = config.relative_attention_max_distance
            self.d_model = config.d_model
            self.key_value_proj_dim = config.d_kv
            self.n_heads = config.num_heads
            self.dropout = config.dropout_rate
            self.inner_dim = self.n_heads * self.key_value_proj_dim

            # Mesh TensorFlow initialization to avoid scaling before softmax
            self.q = nn.Linear(self.d_model, self.inner_dim, bias=False)
            self.k = nn.Linear(self.d_model, self.inner_dim, bias=False)
            self.v = nn.Linear(self.d_model, self.inner_dim, bias=False)
            self.o = nn.Linear(self.inner_dim, self.d_model, bias=False)

            if self.has_relative_attention_bias:
                self.relative_attention_bias = nn.Embedding(self.relative_attention_num_buckets, self.n_heads)
            self.pruned_heads = set()
            self.gradient_checkpointing = False

        def prune_heads(self, heads):
            if len(heads) == 0:
                return
            heads, index = find_pruneable_heads_and_indices(
                heads, self.n_heads, self.key_value_proj_dim, self.pruned_heads
            )
            # Prune linear layers
            self.q = prune_linear_layer(self.q, index)
            self.k = prune_linear_layer(self.k, index)
            self.v = prune_linear_layer(self.v, index)
            self.o = prune_linear_layer(self.o, index, dim=1)
            # Update hyper params
            self.n_heads = self.n_heads - len(heads)
            self.inner_dim = self.key_value_proj_dim * self.n_heads
            self.pruned_heads = self.pruned_heads.union(heads)

        @staticmethod
        def _relative_position_bucket(relative_position, bidirectional=True, num_buckets=32, max_distance=128):
            relative_buckets = 0
            if bidirectional:
                num_buckets //= 2
                relative_buckets += (relative_position > 0).to(torch.long) * num_buckets
                relative_position = torch.abs(relative_position)
            else:
                relative_position = -torch.min(relative_position, torch.zeros_like(relative_position))
            # now relative_position is in the range [0, inf)

            # half of the buckets are for exact increments in positions
            max_exact = num_buckets // 2
            is_small = relative_position < max_exact

            # The other half of the buckets are for logarithmically bigger bins in positions up to max_distance
            relative_position_if_large = max_exact + (
                torch.log(relative_position.float() / max_exact)
                / math.log(max_distance / max_exact)
                * (num_buckets - max_exact)
            ).to(torch.long)
            relative_position_if_large = torch.min(
                relative_position_if_large, torch.full_like(relative_position_if_large, num_buckets - 1)
            )

            relative_buckets += torch.where(is_small, relative_position, relative_position_if_large)
            return relative_buckets

        def compute_bias(self, query_length, key_length, device=None):
            """Compute binned relative position bias"""
            if device is None:
                device = self.relative_attention_bias.weight.device
            context_position = torch.arange(query_length, dtype=torch.long, device=device)[:, None]
            memory_position = torch.arange(key_length, dtype=torch.long, device=device)[None, :]
            relative_position = memory_position - context_position  # shape (query_length, key_length)
            relative_position_bucket = self._relative_position_bucket(
                relative_position,  # shape (query_length, key_length)
                bidirectional=(not self.is_decoder),
                num_buckets=self.relative_attention_num_buckets,
                max_distance=self.relative_attention_max_distance,
            )
            values = self.relative_attention_bias(relative_position_bucket)  # shape (query_length, key_length, num_heads)
            values = values.permute([2, 0, 1]).unsqueeze(0)  # shape (1, num_heads, query_length, key_length)
            return values

        def forward(
            self,
            hidden_states,
            mask=None,
            key_value_states=None,
            position_bias=None,
            past_key_value=None,
            layer_head_mask=None,
            query_length=None,
            use_cache=False,
            output_attentions=False,
        ):
            """
            Self-attention (if key_value_states is None) or attention over source sentence (provided by key_value_states).
            """
            # Input is (batch_size, seq_length, dim)
            # Mask is (batch_size, key_length) (non-causal) or (batch_size, key_length, key_length)
            # past_key_value[0] is (batch_size, n_heads, q_len - 1, dim_per_head)
            batch_size, seq_length = hidden_states.shape[:2]

            real_seq_length = seq_length

            if past_key_value is not None:
                if len(past_key_value) != 2:
                    raise ValueError(
                        f"past_key_value should have 2 past states: keys and values. Got { len(past_key_value)} past states"
                    )
                real_seq_length += past_key_value[0].shape[2] if query_length is None else query_length

            key_length = real_seq_length if key_value_states is None else key_value_states.shape[1]

            def shape(states):
                """projection"""
                return states.view(batch_size, -1, self.n_heads, self.key_value_proj_dim).transpose(1, 2)

            def unshape(states):
                """reshape"""
                return states.transpose(1, 2).contiguous().view(batch_size, -1, self.inner_dim)

            def project(hidden_states, proj_layer, key_value_states, past_key_value):
                """projects hidden states correctly to key/query states"""
                if key_value_states is None:
                    # self-attn
                    # (batch_size, n_heads, seq_length, dim_per_head)
                    hidden_states = shape(proj_layer(hidden_states))
                elif past_key_value is None:
                    # cross-attn
                    # (batch_size, n_heads, seq_length, dim_per_head)
                    hidden_states = shape(proj_layer(key_value_states))

                if past_key_value is not None:
                    if key_value_states is None:
                        # self-attn
                        # (batch_size, n_heads, key_length, dim_per_head)
                        hidden_states = torch.cat([past_key_value, hidden_states], dim=2)
                    elif past_key_value.shape[2] != key_value_states.shape[1]:
                        # checking that the `sequence_length` of the `past_key_value` is the same as
                        # the provided `key_value_states` to support prefix tuning
                        # cross-attn
                        # (batch_size, n_heads, seq_length, dim_per_head)
                        hidden_states = shape(proj_layer(key_value_states))
                    else:
                        # cross-attn
                        hidden_states = past_key_value
                return hidden_states

            # get query states
            query_states = shape(self.q(hidden_states))  # (batch_size, n_heads, seq_length, dim_per_head)

            # get key/value states
            key_states = project(
                hidden_states, self.k, key_value_states, past_key_value[0] if past_key_value is not None else None
            )
            value_states = project(
                hidden_states, self.v, key_value_states, past_key_value[1] if past_key_value is not None else None
            )

            # compute scores
            scores = torch.matmul(
                query_states, key_states.transpose(3, 2)
            )  # equivalent of torch.einsum("bnqd,bnkd->bnqk", query_states, key_states), compatible with onnx op>9

            if position_bias is None:
                if not self.has_relative_attention_bias:
                    position_bias = torch.zeros(
                        (1, self.n_heads, real_seq_length, key_length), device=scores.device, dtype=scores.dtype
                    )
                    if self.gradient_checkpointing and self.training:
                        position_bias.requires_grad = True
                else:
                    position_bias = self.compute_bias(real_seq_length, key_length, device=scores.device)

                # if key and values are already calculated
                # we want only the last query position bias
                if past_key_value is not None:
                    position_bias = position_bias[:, :, -hidden_states.size(1) :, :]

                if mask is not None:
                    position_bias = position_bias + mask  # (batch_size, n_heads, seq_length, key_length)

            if self.pruned_heads:
                mask = torch.ones(position_bias.shape[1])
                mask[list(self.pruned_heads)] = 0
                position_bias_masked = position_bias[:, mask.bool()]
            else:
                position_bias_masked = position_bias

            scores += position_bias_masked
            attn_weights = nn.functional.softmax(scores.float(), dim=-1).type_as(
                scores
            )  # (batch_size, n_heads, seq_length, key_length)
            attn_weights = nn.functional.dropout(
                attn_weights, p=self.dropout, training=self.training
            )  # (batch_size, n_heads, seq_length, key_length)

            # Mask heads if we want to
            if layer_head_mask is not None:
                attn_weights = attn_weights * layer_head_mask

            attn_output = unshape(torch.matmul(attn_weights, value_states))  # (batch_size, seq_length, dim)
            attn_output = self.o(attn_output)

            present_key_value_state = (key_states, value_states) if (self.is_decoder and use_cache) else None
            outputs = (attn_output,) + (present_key_value_state,) + (position_bias,)

            if output_attentions:
                outputs = outputs + (attn_weights,)
            return outputs

    return SimpleNamespace(T5LayerNorm=T5LayerNorm, T5Attention=T5Attention)


def _bucket_py(rp, bidirectional, num_buckets, max_distance):
    """Mesh TensorFlow's bucket, one position at a time; the log term in float32 as the tensor code has it."""
    ret = 0
    if bidirectional:
        num_buckets //= 2
        ret += num_buckets if rp > 0 else 0
        n = abs(rp)
    else:
        n = max(-rp, 0)
    max_exact = num_buckets // 2
    if n < max_exact:
        return ret + n
    v = np.log(np.float32(n) / np.float32(max_exact))
    v = np.float32(v / np.float32(math.log(max_distance / max_exact)))
    v = np.float32(v * np.float32(num_buckets - max_exact))
    return ret + min(max_exact + int(v), num_buckets - 1)


def _t5_run(torch, weights=None, x_np=None):
    g = gpt2_page(torch, activations_page(torch).ACT2FN)
    p = t5_page(torch, g.find_pruneable_heads_and_indices, g.prune_linear_layer)
    r = SimpleNamespace()
    rel = torch.arange(-40, 41)
    r.rel = rel.tolist()
    r.buckets = {(bi, nb, md): p.T5Attention._relative_position_bucket(rel, bidirectional=bi, num_buckets=nb,
                                                                       max_distance=md)
                 for bi in (True, False) for nb, md in ((32, 128), (8, 12), (10, 20))}
    torch.manual_seed(0)
    enc_attn = p.T5Attention(T5Config(), has_relative_attention_bias=True)
    dec_attn = p.T5Attention(T5Config(is_decoder=True), has_relative_attention_bias=True)
    norm = p.T5LayerNorm(12)
    with torch.no_grad():
        for m in (enc_attn, dec_attn, norm):
            for prm in m.parameters():
                prm.normal_(0.0, 0.5)
    if weights is not None:
        for name, m in (("enc", enc_attn), ("dec", dec_attn), ("norm", norm)):
            m.load_state_dict({k: torch.tensor(v) for k, v in weights[name].items()})
    r.weights = {name: {k: _np(v) for k, v in m.state_dict().items()}
                 for name, m in (("enc", enc_attn), ("dec", dec_attn), ("norm", norm))}
    if x_np is None:
        x_np = np.random.default_rng(1).normal(size=(2, 5, 12)).astype(np.float32)
    r.x_np = x_np
    x = torch.tensor(x_np)
    with torch.no_grad():
        r.enc_bias = enc_attn.compute_bias(5, 5)
        r.dec_bias = dec_attn.compute_bias(5, 5)
        r.norm = norm(x)
        r.norm16 = norm.half()(x.half())
        pad = torch.zeros(2, 1, 1, 5)
        pad[1, ..., 3:] = torch.finfo(torch.float32).min  # row 1: its last two keys are padding
        r.enc_out, _, r.enc_pb = enc_attn(x, mask=pad)[:3]
        # the bias is computed once and handed to the next layer with the mask already in it
        r.enc_again = enc_attn(x, position_bias=r.enc_pb)[0]
        r.enc_weights = enc_attn(x, mask=pad, output_attentions=True)[3]
        r.enc_head_masked = enc_attn(x, mask=pad, layer_head_mask=torch.tensor([1.0, 0.0, 1.0]).view(1, 3, 1, 1))[0]
        causal = torch.triu(torch.full((5, 5), torch.finfo(torch.float32).min), diagonal=1)[None, None]
        r.dec_full = dec_attn(x, mask=causal, use_cache=True)[0]
        out, past, _ = dec_attn(x[:, :3], mask=causal[:, :, :3, :3], use_cache=True)
        steps = [out]
        for t in (3, 4):
            out, past, pb = dec_attn(x[:, t:t + 1], past_key_value=past, use_cache=True)
            steps.append(out)
        r.dec_steps = torch.cat(steps, 1)
        r.dec_step_bias = pb
        # cross attention over another sequence
        r.cross = enc_attn(x[:, :2], key_value_states=x)[0]
        enc_attn.prune_heads([1])
        r.pruned = enc_attn(x, mask=pad)[0]
        r.pruned_n = (enc_attn.n_heads, enc_attn.inner_dim, tuple(enc_attn.q.weight.shape),
                      tuple(enc_attn.o.weight.shape))
    try:
        dec_attn(x, past_key_value=(past[0],))
        r.error = None
    except ValueError as e:
        r.error = str(e)
    return r


def _t5_attn_np(sd, x, bias, kv=None, head_mask=None):
    H, dk = 3, 4
    kv = x if kv is None else kv
    B, Tq, _ = x.shape
    q = (x @ sd["q.weight"].T).reshape(B, Tq, H, dk).transpose(0, 2, 1, 3)
    k = (kv @ sd["k.weight"].T).reshape(B, -1, H, dk).transpose(0, 2, 1, 3)
    v = (kv @ sd["v.weight"].T).reshape(B, -1, H, dk).transpose(0, 2, 1, 3)
    s = q @ k.transpose(0, 1, 3, 2) + bias  # no 1/sqrt(d): Mesh TensorFlow's initialisation
    w = np.exp(s - s.max(-1, keepdims=True))
    w = w / w.sum(-1, keepdims=True)
    if head_mask is not None:
        w = w * head_mask
    return (w @ v).transpose(0, 2, 1, 3).reshape(B, Tq, H * dk) @ sd["o.weight"].T, w


def test_transformers_t5():
    r = _t5_run(lucid)
    for (bi, nb, md), got in r.buckets.items():
        assert got.dtype == lucid.int64
        assert got.tolist() == [_bucket_py(rp, bi, nb, md) for rp in r.rel], (bi, nb, md)
    b = r.buckets[(True, 32, 128)].tolist()
    # T5 table: +1 -> 17, -1 -> 1; |40| -> 8 + int(log(40 / 8) / log(128 / 8) * 8) = 12
    assert b[40] == 0 and b[41] == 17 and b[39] == 1 and b[0] == 12 and b[80] == 28
    assert set(r.buckets[(False, 8, 12)].tolist()[41:]) == {0}  # causal: later keys share bucket 0
    sd = r.weights["enc"]
    table = sd["relative_attention_bias.weight"]
    rel = np.arange(5)[None, :] - np.arange(5)[:, None]
    bk = np.vectorize(lambda v: _bucket_py(v, True, 8, 12))(rel)
    np.testing.assert_array_equal(_np(r.enc_bias), table[bk].transpose(2, 0, 1)[None])
    bk_dec = np.vectorize(lambda v: _bucket_py(v, False, 8, 12))(rel)
    np.testing.assert_array_equal(_np(r.dec_bias), r.weights["dec"]["relative_attention_bias.weight"][bk_dec]
                                  .transpose(2, 0, 1)[None])
    x = r.x_np.astype(np.float64)
    w_norm = r.weights["norm"]["weight"]
    np.testing.assert_allclose(_np(r.norm), _rms_np(x, w_norm, 1e-6), rtol=1e-5, atol=1e-6)
    assert r.norm16.dtype == lucid.float16
    np.testing.assert_allclose(_np(r.norm16).astype(np.float64), _rms_np(x.astype(np.float16), w_norm.astype(
        np.float16), 1e-6), rtol=4e-3, atol=4e-3)
    pad = np.zeros((2, 1, 1, 5))
    pad[1, ..., 3:] = np.finfo(np.float32).min
    bias = table[bk].transpose(2, 0, 1)[None] + pad
    want, w = _t5_attn_np(sd, x, bias)
    np.testing.assert_allclose(_np(r.enc_out), want, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(_np(r.enc_pb), bias, rtol=1e-6)
    np.testing.assert_array_equal(_np(r.enc_again), _np(r.enc_out))
    np.testing.assert_allclose(_np(r.enc_weights), w, rtol=1e-4, atol=1e-6)
    assert np.all(_np(r.enc_weights)[1, ..., 3:] == 0)
    hm = np.array([1.0, 0.0, 1.0]).reshape(1, 3, 1, 1)
    np.testing.assert_allclose(_np(r.enc_head_masked), _t5_attn_np(sd, x, bias, head_mask=hm)[0], rtol=1e-4,
                               atol=1e-5)
    np.testing.assert_allclose(_np(r.pruned), _np(r.enc_head_masked), rtol=1e-5, atol=1e-6)
    assert r.pruned_n == (2, 8, (8, 12), (12, 8))
    np.testing.assert_allclose(_np(r.cross), _t5_attn_np(sd, x[:, :2], table[np.vectorize(
        lambda v: _bucket_py(v, True, 8, 12))(np.arange(5)[None, :] - np.arange(2)[:, None])].transpose(2, 0, 1)[None],
        kv=x)[0], rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(_np(r.dec_steps), _np(r.dec_full), rtol=1e-5, atol=1e-6)
    assert r.dec_step_bias.shape == (1, 3, 1, 5)
    assert r.error == "past_key_value should have 2 past states: keys and values. Got 1 past states"


def test_transformers_t5_torch_parity():
    torch = pytest.importorskip("torch")
    a = _t5_run(lucid)
    b = _t5_run(torch, weights=a.weights, x_np=a.x_np)
    for k in a.buckets:
        assert a.buckets[k].tolist() == b.buckets[k].tolist(), k
    for name in ("enc_bias", "dec_bias", "norm", "norm16", "enc_out", "enc_weights", "enc_head_masked", "dec_full",
                 "dec_steps", "cross", "pruned"):
        np.testing.assert_allclose(_np(getattr(a, name)).astype(np.float64),
                                   getattr(b, name).numpy().astype(np.float64), rtol=1e-5, atol=1e-6, err_msg=name)
    assert a.error == b.error and a.pruned_n == b.pruned_n


# --------------------------------------------------------------------------- generation/logits_process.py

def logits_page(torch):
    nn = torch.nn
    from typing import Iterable

    class LogitsProcessor:
        """Abstract base class for all logit processors that can be applied during generation."""

        def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
            raise NotImplementedError(
                f"{self.__class__} is an abstract class. Only classes inheriting this class can be called."
            )

    class LogitsProcessorList(list):
        def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor, **kwargs) -> torch.FloatTensor:
            for processor in self:
                function_args = inspect.signature(processor.__call__).parameters
                if len(function_args) > 2:
                    if not all(arg in kwargs for arg in list(function_args.keys())[2:]):
                        raise ValueError(
                            f"Make sure that all the required parameters: {list(function_args.keys())} for "
                            f"{processor.__class__} are passed to the logits processor."
                        )
                    scores = processor(input_ids, scores, **kwargs)
                else:
                    scores = processor(input_ids, scores)

            return scores

    class MinLengthLogitsProcessor(LogitsProcessor):
        def __init__(self, min_length: int, eos_token_id, device: str = "cpu"):
            if not isinstance(min_length, int) or min_length < 0:
                raise ValueError(f"`min_length` has to be a non-negative integer, but is {min_length}")

            if not isinstance(eos_token_id, torch.Tensor):
                if isinstance(eos_token_id, int):
                    eos_token_id = [eos_token_id]
                eos_token_id = torch.tensor(eos_token_id, device=device)

            self.min_length = min_length
            self.eos_token_id = eos_token_id

        def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
            vocab_tensor = torch.arange(scores.shape[-1], device=scores.device)
            eos_token_mask = torch.isin(vocab_tensor, self.eos_token_id)
            scores_processed = scores.clone()
            if input_ids.shape[-1] < self.min_length:
                scores_processed = torch.where(eos_token_mask, -math.inf, scores)
            return scores_processed

    class TemperatureLogitsWarper(LogitsProcessor):
        def __init__(self, temperature: float):
            if not isinstance(temperature, float) or not (temperature > 0):
                except_msg = (
                    f"`temperature` (={temperature}) has to be a strictly positive float, otherwise your next token "
                    "scores will be invalid."
                )
                if isinstance(temperature, float) and temperature == 0.0:
                    except_msg += " If you're looking for greedy decoding strategies, set `do_sample=False`."
                raise ValueError(except_msg)

            self.temperature = temperature

        def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
            scores_processed = scores / self.temperature
            return scores_processed

    def _apply_penalty(score: torch.FloatTensor, penalty: float, normalize: bool) -> torch.FloatTensor:
        if normalize:
            # score is log-probs, always negative
            return score * penalty
        else:
            # score is raw logits, positive values have to be divided to move them the right direction
            return torch.where(score < 0, score * penalty, score / penalty)

    class RepetitionPenaltyLogitsProcessor(LogitsProcessor):
        def __init__(self, penalty: float, prompt_ignore_length: Optional[int] = None, normalize: bool = False):
            if not isinstance(penalty, float) or not (penalty > 0):
                raise ValueError(f"`penalty` has to be a strictly positive float, but is {penalty}")

            if prompt_ignore_length is not None and (
                not isinstance(prompt_ignore_length, int) or prompt_ignore_length < 0
            ):
                raise ValueError(f"`prompt_ignore_length` has to be a positive integer, but is {prompt_ignore_length}")

            self.penalty = penalty
            self.prompt_ignore_length = prompt_ignore_length
            self.normalize = normalize
            self.logits_indices = None
            self.cu_seq_lens_q = None

        def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
            if self.prompt_ignore_length:
                input_ids = input_ids[:, self.prompt_ignore_length :]

            if scores.dim() == 3:
                batch_size, seq_len, vocab_size = scores.shape
                last_scores = scores[:, -1, :]
                if self.normalize:
                    last_scores = torch.log_softmax(last_scores, dim=-1)
                token_mask = torch.zeros_like(last_scores, dtype=torch.bool)
                if input_ids.dim() == 1:
                    unique_tokens = torch.unique(input_ids)
                    token_mask.scatter_(1, unique_tokens.unsqueeze(0), True)
                else:
                    token_mask.scatter_(1, input_ids, True)
                penalty_scores = _apply_penalty(last_scores, self.penalty, self.normalize)
                scores[:, -1, :] = torch.where(token_mask, penalty_scores, last_scores)
                return scores

            if input_ids.dim() == 1:
                input_ids = input_ids.unsqueeze(1)

            if self.normalize:
                scores = torch.log_softmax(scores, dim=-1)
            score = torch.gather(scores, 1, input_ids)
            score = _apply_penalty(score, self.penalty, self.normalize)

            scores_processed = scores.scatter(1, input_ids, score)
            return scores_processed

    class TopPLogitsWarper(LogitsProcessor):
        def __init__(self, top_p: float, filter_value: float = -float("Inf"), min_tokens_to_keep: int = 1):
            top_p = float(top_p)
            if top_p < 0 or top_p > 1.0:
                raise ValueError(f"`top_p` has to be a float > 0 and < 1, but is {top_p}")
            if not isinstance(min_tokens_to_keep, int) or (min_tokens_to_keep < 1):
                raise ValueError(f"`min_tokens_to_keep` has to be a positive integer, but is {min_tokens_to_keep}")

            self.top_p = top_p
            self.filter_value = filter_value
            self.min_tokens_to_keep = min_tokens_to_keep

        def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
            sorted_logits, sorted_indices = torch.sort(scores, descending=False)
            cumulative_probs = sorted_logits.softmax(dim=-1).cumsum(dim=-1)

            # Remove tokens with cumulative top_p above the threshold (token with 0 are kept)
            sorted_indices_to_remove = cumulative_probs <= (1 - self.top_p)
            # Keep at least min_tokens_to_keep
            sorted_indices_to_remove[..., -self.min_tokens_to_keep :] = 0

            # scatter sorted tensors to original indexing
            indices_to_remove = sorted_indices_to_remove.scatter(1, sorted_indices, sorted_indices_to_remove)
            scores_processed = scores.masked_fill(indices_to_remove, self.filter_value)
            return scores_processed

    class TopKLogitsWarper(LogitsProcessor):
        def __init__(self, top_k: int, filter_value: float = -float("Inf"), min_tokens_to_keep: int = 1):
            if not isinstance(top_k, int) or top_k <= 0:
                raise ValueError(f"`top_k` has to be a strictly positive integer, but is {top_k}")

            self.top_k = max(top_k, min_tokens_to_keep)
            self.filter_value = filter_value
            self.min_tokens_to_keep = min_tokens_to_keep  # used for CB processor initialization

        def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
            top_k = min(self.top_k, scores.size(-1))  # Safety check
            # Remove all tokens with a probability less than the last token of the top-k
            indices_to_remove = scores < torch.topk(scores, top_k)[0][..., -1, None]
            scores_processed = scores.masked_fill(indices_to_remove, self.filter_value)
            return scores_processed

    def _get_ngrams(ngram_size: int, prev_input_ids: torch.Tensor, num_hypos: int):
        # Initialize an empty list of dictionaries, one for each hypothesis (index) in the range of num_hypos
        generated_ngrams = [{} for _ in range(num_hypos)]
        for idx in range(num_hypos):
            gen_tokens = prev_input_ids[idx].tolist()
            generated_ngram = generated_ngrams[idx]
            # Loop through each n-gram of size ngram_size in the list of tokens (gen_tokens)
            for ngram in zip(*[gen_tokens[i:] for i in range(ngram_size)]):
                prev_ngram_tuple = tuple(ngram[:-1])
                generated_ngram[prev_ngram_tuple] = generated_ngram.get(prev_ngram_tuple, []) + [ngram[-1]]
        return generated_ngrams

    def _get_generated_ngrams(banned_ngrams, prev_input_ids, ngram_size, cur_len):
        # Before decoding the next token, prevent decoding of ngrams that have already appeared
        start_idx = cur_len + 1 - ngram_size
        ngram_idx = tuple(prev_input_ids[start_idx:cur_len].tolist())
        return banned_ngrams.get(ngram_idx, [])

    def _calc_banned_ngram_tokens(
        ngram_size: int, prev_input_ids: torch.Tensor, num_hypos: int, cur_len: int
    ) -> list[Iterable[int]]:
        """Copied from fairseq for no_repeat_ngram in beam_search"""
        if cur_len + 1 < ngram_size:
            # return no banned tokens if we haven't generated no_repeat_ngram_size tokens yet
            return [[] for _ in range(num_hypos)]
        generated_ngrams = _get_ngrams(ngram_size, prev_input_ids, num_hypos)
        banned_tokens = [
            _get_generated_ngrams(generated_ngrams[hypo_idx], prev_input_ids[hypo_idx], ngram_size, cur_len)
            for hypo_idx in range(num_hypos)
        ]
        return banned_tokens

    class NoRepeatNGramLogitsProcessor(LogitsProcessor):
        def __init__(self, ngram_size: int):
            if not isinstance(ngram_size, int) or ngram_size <= 0:
                raise ValueError(f"`ngram_size` has to be a strictly positive integer, but is {ngram_size}")
            self.ngram_size = ngram_size

        def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
            num_batch_hypotheses = scores.shape[0]
            cur_len = input_ids.shape[-1]
            scores_processed = scores.clone()
            banned_batch_tokens = _calc_banned_ngram_tokens(self.ngram_size, input_ids, num_batch_hypotheses, cur_len)
            for i, banned_tokens in enumerate(banned_batch_tokens):
                scores_processed[i, banned_tokens] = -float("inf")

            return scores_processed

    def sample(model, input_ids, logits_processor, logits_warper, max_length, pad_token_id, eos_token_id,
               do_sample, **model_kwargs):
        """``GenerationMixin._sample``'s loop (v4.38) without streamer, stopping-criteria and output plumbing."""
        eos_token_id_tensor = torch.tensor(eos_token_id).to(input_ids.device) if eos_token_id is not None else None
        # keep track of which sequences are already finished
        unfinished_sequences = torch.ones(input_ids.shape[0], dtype=torch.long, device=input_ids.device)
        all_scores = []
        while True:
            # prepare model inputs
            model_inputs = model.prepare_inputs_for_generation(input_ids, **model_kwargs)

            # forward pass to get next token
            outputs = model(**model_inputs, return_dict=True)

            next_token_logits = outputs.logits[:, -1, :]

            # pre-process distribution
            next_token_scores = logits_processor(input_ids, next_token_logits)
            next_token_scores = logits_warper(input_ids, next_token_scores)
            all_scores.append(next_token_scores)

            # sample
            if do_sample:
                probs = nn.functional.softmax(next_token_scores, dim=-1)
                next_tokens = torch.multinomial(probs, num_samples=1).squeeze(1)
            else:
                next_tokens = torch.argmax(next_token_scores, dim=-1)

            # finished sentences should have their next token be a padding token
            if eos_token_id is not None:
                next_tokens = next_tokens * unfinished_sequences + pad_token_id * (1 - unfinished_sequences)

            # update generated ids, model inputs, and length for next step
            input_ids = torch.cat([input_ids, next_tokens[:, None]], dim=-1)
            # _update_model_kwargs_for_generation
            model_kwargs["past_key_values"] = outputs.past_key_values
            attention_mask = model_kwargs["attention_mask"]
            model_kwargs["attention_mask"] = torch.cat(
                [attention_mask, attention_mask.new_ones((attention_mask.shape[0], 1))], dim=-1
            )

            # if eos_token was found in one sentence, set sentence to finished
            if eos_token_id_tensor is not None:
                unfinished_sequences = unfinished_sequences.mul(
                    next_tokens.tile(eos_token_id_tensor.shape[0], 1).ne(eos_token_id_tensor.unsqueeze(1)).prod(dim=0)
                )

            # stop when each sentence is finished
            if unfinished_sequences.max() == 0:
                break
            # stop if we exceed the maximum length (MaxLengthCriteria)
            if input_ids.shape[-1] >= max_length:
                break
        return input_ids, all_scores

    return SimpleNamespace(**{k: v for k, v in locals().items() if not k.startswith("_") and k not in ("nn", "torch")},
                           _calc_banned_ngram_tokens=_calc_banned_ngram_tokens)


def _rep_np(ids, s, penalty, normalize=False):
    s = s.copy()
    if normalize:
        s = s - (np.log(np.exp(s - s.max(-1, keepdims=True)).sum(-1, keepdims=True)) + s.max(-1, keepdims=True))
    for b in range(s.shape[0]):
        for t in set(ids[b].tolist()):
            v = s[b, t]
            s[b, t] = v * penalty if (normalize or v < 0) else v / penalty
    return s


def _topk_np(s, k):
    kth = np.sort(s, -1)[:, -k][:, None]
    return np.where(s < kth, -np.inf, s)


def _topp_np(s, top_p, keep):
    out = s.copy()
    for b in range(s.shape[0]):
        order = np.argsort(s[b], kind="stable")
        p = np.exp(s[b][order] - s[b].max())
        cum = np.cumsum(p / p.sum())
        remove = cum <= 1 - top_p
        remove[-keep:] = False
        out[b, order[remove]] = -np.inf
    return out


def _ngram_np(ids, s, n):
    s = s.copy()
    cur = ids.shape[1]
    for b in range(s.shape[0]):
        row = ids[b].tolist()
        prefix = tuple(row[cur - n + 1:]) if n > 1 else ()
        for i in range(cur - n + 1):
            if tuple(row[i:i + n - 1]) == prefix:
                s[b, row[i + n - 1]] = -np.inf
    return s


PROC_IDS = [[1, 4, 4, 7, 1, 4], [9, 9, 9, 9, 9, 9], [0, 3, 6, 2, 3, 8]]


def _procs_run(torch, scores_np=None):
    p = logits_page(torch)
    if scores_np is None:
        scores_np = np.random.default_rng(3).normal(scale=2.0, size=(3, 10)).astype(np.float32)
    r = SimpleNamespace(scores_np=scores_np)
    s = torch.tensor(scores_np)
    ids = torch.tensor(PROC_IDS)
    r.minlen = p.MinLengthLogitsProcessor(8, [2, 5], device=s.device)(ids, s)
    r.minlen_done = p.MinLengthLogitsProcessor(5, 2, device=s.device)(ids, s)
    r.temp = p.TemperatureLogitsWarper(0.7)(ids, s)
    r.rep = p.RepetitionPenaltyLogitsProcessor(1.5)(ids, s)
    r.rep_norm = p.RepetitionPenaltyLogitsProcessor(1.5, normalize=True)(ids, s)
    r.rep_ignore = p.RepetitionPenaltyLogitsProcessor(1.5, prompt_ignore_length=3)(ids, s)
    r.rep_1d = p.RepetitionPenaltyLogitsProcessor(0.5)(ids[:, -1], s)
    s3 = torch.stack([s * 0.5, s], 1)
    r.rep_3d = p.RepetitionPenaltyLogitsProcessor(1.5)(ids, s3.clone())
    r.topk = p.TopKLogitsWarper(3)(ids, s)
    r.topk_min = p.TopKLogitsWarper(1, min_tokens_to_keep=4)(ids, s)
    r.topp = p.TopPLogitsWarper(0.7)(ids, s)
    r.topp_keep = p.TopPLogitsWarper(0.05, min_tokens_to_keep=2)(ids, s)
    r.ngram2 = p.NoRepeatNGramLogitsProcessor(2)(ids, s)
    r.ngram3 = p.NoRepeatNGramLogitsProcessor(3)(ids, s)
    r.ngram_short = p.NoRepeatNGramLogitsProcessor(8)(ids, s)
    chain = p.LogitsProcessorList([p.MinLengthLogitsProcessor(8, 2, device=s.device),
                                   p.RepetitionPenaltyLogitsProcessor(1.5), p.TemperatureLogitsWarper(0.5),
                                   p.TopKLogitsWarper(5)])
    r.chain = chain(ids, s)

    class NeedsCurLen(p.LogitsProcessor):
        def __call__(self, input_ids, scores, cur_len):
            return scores + cur_len

    r.with_kwarg = p.LogitsProcessorList([NeedsCurLen()])(ids, s, cur_len=2.0)
    r.errors = []
    for fn in (lambda: p.LogitsProcessorList([NeedsCurLen()])(ids, s), lambda: p.TemperatureLogitsWarper(0.0),
               lambda: p.TopKLogitsWarper(0), lambda: p.TopPLogitsWarper(1.5),
               lambda: p.RepetitionPenaltyLogitsProcessor(1), lambda: p.NoRepeatNGramLogitsProcessor(0),
               lambda: p.MinLengthLogitsProcessor(-1, 2), lambda: p.LogitsProcessor()(ids, s)):
        try:
            fn()
            r.errors.append(None)
        except (ValueError, NotImplementedError) as e:
            r.errors.append(str(e))
    return r


def test_transformers_logits_processors():
    r = _procs_run(lucid)
    s, ids = r.scores_np.astype(np.float64), np.asarray(PROC_IDS)
    ninf = -np.inf
    m = s.copy()
    m[:, [2, 5]] = ninf
    np.testing.assert_array_equal(_np(r.minlen), m.astype(np.float32))
    np.testing.assert_array_equal(_np(r.minlen_done), r.scores_np)
    np.testing.assert_allclose(_np(r.temp), s / 0.7, rtol=1e-6)
    np.testing.assert_allclose(_np(r.rep), _rep_np(ids, s, 1.5), rtol=1e-6)
    np.testing.assert_allclose(_np(r.rep_norm), _rep_np(ids, s, 1.5, normalize=True), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(_np(r.rep_ignore), _rep_np(ids[:, 3:], s, 1.5), rtol=1e-6)
    np.testing.assert_allclose(_np(r.rep_1d), _rep_np(ids[:, -1:], s, 0.5), rtol=1e-6)
    np.testing.assert_allclose(_np(r.rep_3d)[:, 0], 0.5 * s, rtol=1e-6)  # only the last position
    np.testing.assert_allclose(_np(r.rep_3d)[:, 1], _rep_np(ids, s, 1.5), rtol=1e-6)
    np.testing.assert_array_equal(_np(r.topk), _topk_np(s, 3).astype(np.float32))
    assert (np.isfinite(_np(r.topk)).sum(-1) == 3).all()
    np.testing.assert_array_equal(_np(r.topk_min), _topk_np(s, 4).astype(np.float32))
    np.testing.assert_array_equal(_np(r.topp), _topp_np(s, 0.7, 1).astype(np.float32))
    kept = np.isfinite(_np(r.topp)).sum(-1)
    assert (kept >= 1).all() and (kept < 10).all()
    np.testing.assert_array_equal(_np(r.topp_keep), _topp_np(s, 0.05, 2).astype(np.float32))
    assert (np.isfinite(_np(r.topp_keep)).sum(-1) == 2).all()
    ng2 = _ngram_np(ids, s, 2)
    np.testing.assert_array_equal(_np(r.ngram2), ng2.astype(np.float32))
    # row 0 ends in 4: "4 4" and "4 7" were seen; row 1 repeats 9; row 2 ends in 8, new
    assert np.isinf(_np(r.ngram2)[0, [4, 7]]).all() and np.isinf(_np(r.ngram2)[1, 9])
    assert np.isfinite(_np(r.ngram2)[2]).all() and np.isinf(_np(r.ngram2)).sum() == 3
    np.testing.assert_array_equal(_np(r.ngram3), _ngram_np(ids, s, 3).astype(np.float32))
    np.testing.assert_array_equal(_np(r.ngram_short), r.scores_np)
    c = s.copy()
    c[:, 2] = ninf
    c = _topk_np(_rep_np(ids, c, 1.5) / 0.5, 5)
    np.testing.assert_allclose(_np(r.chain), c, rtol=1e-6)
    np.testing.assert_allclose(_np(r.with_kwarg), s + 2, rtol=1e-6)
    e = r.errors
    assert e[0].startswith("Make sure that all the required parameters: ['input_ids', 'scores', 'cur_len'] for ")
    assert e[1] == ("`temperature` (=0.0) has to be a strictly positive float, otherwise your next token scores will "
                    "be invalid. If you're looking for greedy decoding strategies, set `do_sample=False`.")
    assert e[2] == "`top_k` has to be a strictly positive integer, but is 0"
    assert e[3] == "`top_p` has to be a float > 0 and < 1, but is 1.5"
    assert e[4] == "`penalty` has to be a strictly positive float, but is 1"
    assert e[5] == "`ngram_size` has to be a strictly positive integer, but is 0"
    assert e[6] == "`min_length` has to be a non-negative integer, but is -1"
    assert "is an abstract class" in e[7]


def test_transformers_logits_processors_torch_parity():
    torch = pytest.importorskip("torch")
    a = _procs_run(lucid)
    b = _procs_run(torch, a.scores_np)
    for name in ("minlen", "minlen_done", "temp", "rep", "rep_norm", "rep_ignore", "rep_1d", "rep_3d", "topk",
                 "topk_min", "topp", "topp_keep", "ngram2", "ngram3", "ngram_short", "chain", "with_kwarg"):
        np.testing.assert_allclose(_np(getattr(a, name)), getattr(b, name).numpy(), rtol=1e-6, err_msg=name)
    assert a.errors[1:7] == b.errors[1:7]
    assert a.errors[0].split(" for ")[0] == b.errors[0].split(" for ")[0]


# the generation loop on the tiny Llama

GEN_PROMPT = [[0, 0, 3, 5, 7], [4, 9, 11, 8, 1]]
GEN_MASK = [[0, 0, 1, 1, 1], [1, 1, 1, 1, 1]]
GEN_EOS, GEN_PAD, GEN_MAX = 2, 0, 10


def _gen_processors(p, device):
    procs = p.LogitsProcessorList([p.MinLengthLogitsProcessor(7, GEN_EOS, device=device),
                                   p.RepetitionPenaltyLogitsProcessor(1.3), p.NoRepeatNGramLogitsProcessor(2)])
    warpers = p.LogitsProcessorList([p.TemperatureLogitsWarper(0.8), p.TopKLogitsWarper(5), p.TopPLogitsWarper(0.9)])
    return procs, warpers


def _gen_np_scores(sd, cfg, ids, mask, sample):
    """One step of the loop recomputed: the full forward on all tokens so far, then the processors."""
    ids, mask = np.asarray(ids), np.asarray(mask)
    pos = np.cumsum(mask, -1) - 1
    pos = np.where(mask == 0, 1, pos)
    s = _llama_np(sd, cfg, ids, mask, pos)[:, -1]
    if ids.shape[1] < 7:
        s[:, GEN_EOS] = -np.inf
    s = _ngram_np(ids, _rep_np(ids, s, 1.3), 2)
    if sample:
        s = _topp_np(_topk_np(s / 0.8, 5), 0.9, 1)
    return s


def _gen_run(torch, weights=None):
    lp = logits_page(torch)
    _, cfg, model = _llama_model(torch, weights)
    r = SimpleNamespace(sd={k: _np(v) for k, v in model.state_dict().items()}, cfg=cfg)
    prompt = torch.tensor(GEN_PROMPT)
    procs, warpers = _gen_processors(lp, prompt.device)
    with torch.no_grad():
        r.greedy, r.greedy_scores = lp.sample(model, prompt, procs, lp.LogitsProcessorList(), GEN_MAX, GEN_PAD,
                                              [GEN_EOS], False, attention_mask=torch.tensor(GEN_MASK), use_cache=True)
        torch.manual_seed(5)
        r.sampled, r.sampled_scores = lp.sample(model, prompt, procs, warpers, GEN_MAX, GEN_PAD, [GEN_EOS], True,
                                                attention_mask=torch.tensor(GEN_MASK), use_cache=True)
    return r


def test_transformers_generation_loop():
    r = _gen_run(lucid)
    for tokens, scores, sample in ((r.greedy, r.greedy_scores, False), (r.sampled, r.sampled_scores, True)):
        tokens = tokens.tolist()
        assert [t[:5] for t in tokens] == GEN_PROMPT and 6 <= len(tokens[0]) <= GEN_MAX
        finished = [False, False]
        for step, sc in enumerate(scores):
            n = 5 + step
            mask = np.concatenate([np.asarray(GEN_MASK), np.ones((2, step), int)], 1)
            want = _gen_np_scores(r.sd, r.cfg, [t[:n] for t in tokens], mask, sample)
            got = _np(sc)
            for b in range(2):
                if finished[b]:  # a finished row keeps being scored; its token is the pad
                    assert tokens[b][n] == GEN_PAD
                    continue
                np.testing.assert_array_equal(np.isinf(got[b]), np.isinf(want[b]))
                fin = np.isfinite(want[b])
                np.testing.assert_allclose(got[b][fin], want[b][fin], rtol=1e-4, atol=1e-4)
                if sample:
                    assert np.isfinite(want[b][tokens[b][n]])  # sampled inside the warped support
                else:
                    top2 = np.sort(want[b][fin])[-2:] if fin.sum() > 1 else None
                    assert top2 is None or top2[1] - top2[0] > 1e-3  # no near-tie for float32 to break
                    assert tokens[b][n] == int(np.argmax(want[b]))
                finished[b] = finished[b] or tokens[b][n] == GEN_EOS
            if n < 7:
                assert GEN_EOS not in [t[n] for t in tokens]  # MinLength(7) kept EOS out
        # NoRepeatNGram(2): each generated token (until EOS) makes a bigram not seen before in its row
        for t in tokens:
            for i in range(4, len(t) - 1):
                assert tuple(t[i:i + 2]) not in {tuple(t[j:j + 2]) for j in range(i)}, t
                if t[i + 1] == GEN_EOS:
                    break
    # these weights make row 1 stop (each token checked above): EOS, then the pad for the finished row
    assert r.greedy.tolist()[1][7:] == [GEN_EOS, GEN_PAD, GEN_PAD]


def test_transformers_generation_loop_torch_parity():
    torch = pytest.importorskip("torch")
    a = _gen_run(lucid)
    b = _gen_run(torch, weights=a.sd)
    assert a.greedy.tolist() == b.greedy.tolist()
    for x, y in zip(a.greedy_scores, b.greedy_scores):
        np.testing.assert_allclose(_np(x), y.numpy(), rtol=1e-5, atol=1e-5)
    # the sampled paths differ (separate random streams); the first step's warped scores do not
    np.testing.assert_allclose(_np(a.sampled_scores[0]), b.sampled_scores[0].numpy(), rtol=1e-5, atol=1e-5)


# --------------------------------------------------------------------------- models/bert/modeling_bert.py

@dataclass
class BertConfig:  # configuration_bert.BertConfig, tiny
    vocab_size: int = 20
    hidden_size: int = 12
    num_hidden_layers: int = 2
    num_attention_heads: int = 3
    intermediate_size: int = 20
    hidden_act: str = "gelu"
    hidden_dropout_prob: float = 0.0
    attention_probs_dropout_prob: float = 0.0
    max_position_embeddings: int = 10
    type_vocab_size: int = 2
    initializer_range: float = 0.3
    layer_norm_eps: float = 1e-12
    pad_token_id: int = 0
    position_embedding_type: str = "absolute"
    is_decoder: bool = False
    add_cross_attention: bool = False
    chunk_size_feed_forward: int = 0
    use_cache: bool = True
    output_attentions: bool = False
    output_hidden_states: bool = False
    use_return_dict: bool = True


def bert_page(torch, ACT2FN, find_pruneable_heads_and_indices, prune_linear_layer, apply_chunking_to_forward):
    nn = torch.nn
    from typing import Tuple
    Tensor = torch.Tensor
    CrossEntropyLoss = nn.CrossEntropyLoss

    class ModuleUtilsMixin:  # modeling_utils.ModuleUtilsMixin, the mask helpers
        @property
        def dtype(self):  # get_parameter_dtype: the first floating parameter's
            return next(p.dtype for p in self.parameters() if p.is_floating_point())

        def invert_attention_mask(self, encoder_attention_mask: Tensor) -> Tensor:
            if encoder_attention_mask.dim() == 3:
                encoder_extended_attention_mask = encoder_attention_mask[:, None, :, :]
            if encoder_attention_mask.dim() == 2:
                encoder_extended_attention_mask = encoder_attention_mask[:, None, None, :]
            encoder_extended_attention_mask = encoder_extended_attention_mask.to(dtype=self.dtype)  # fp16 compatibility
            encoder_extended_attention_mask = (1.0 - encoder_extended_attention_mask) * torch.finfo(self.dtype).min

            return encoder_extended_attention_mask

        @staticmethod
        def create_extended_attention_mask_for_decoder(input_shape, attention_mask, device=None):
            if device is not None:
                warnings.warn(
                    "The `device` argument is deprecated and will be removed in v5 of Transformers.", FutureWarning
                )
            else:
                device = attention_mask.device
            batch_size, seq_length = input_shape
            seq_ids = torch.arange(seq_length, device=device)
            causal_mask = seq_ids[None, None, :].repeat(batch_size, seq_length, 1) <= seq_ids[None, :, None]
            # in case past_key_values are used we need to add a prefix ones mask to the causal mask
            # causal and attention masks must have same type with pytorch version < 1.3
            causal_mask = causal_mask.to(attention_mask.dtype)

            if causal_mask.shape[1] < attention_mask.shape[1]:
                prefix_seq_len = attention_mask.shape[1] - causal_mask.shape[1]
                causal_mask = torch.cat(
                    [
                        torch.ones((batch_size, seq_length, prefix_seq_len), device=device, dtype=causal_mask.dtype),
                        causal_mask,
                    ],
                    axis=-1,
                )

            extended_attention_mask = causal_mask[:, None, :, :] * attention_mask[:, None, None, :]
            return extended_attention_mask

        def get_extended_attention_mask(
            self, attention_mask: Tensor, input_shape: Tuple[int], device=None, dtype=None
        ) -> Tensor:
            if dtype is None:
                dtype = self.dtype

            if not (attention_mask.dim() == 2 and self.config.is_decoder):
                # show warning only if it won't be shown in `create_extended_attention_mask_for_decoder`
                if device is not None:
                    warnings.warn(
                        "The `device` argument is deprecated and will be removed in v5 of Transformers.", FutureWarning
                    )
            # We can provide a self-attention mask of dimensions [batch_size, from_seq_length, to_seq_length]
            # ourselves in which case we just need to make it broadcastable to all heads.
            if attention_mask.dim() == 3:
                extended_attention_mask = attention_mask[:, None, :, :]
            elif attention_mask.dim() == 2:
                # Provided a padding mask of dimensions [batch_size, seq_length]
                # - if the model is a decoder, apply a causal mask in addition to the padding mask
                # - if the model is an encoder, make the mask broadcastable to [batch_size, num_heads, seq_length, seq_length]
                if self.config.is_decoder:
                    extended_attention_mask = ModuleUtilsMixin.create_extended_attention_mask_for_decoder(
                        input_shape, attention_mask, device
                    )
                else:
                    extended_attention_mask = attention_mask[:, None, None, :]
            else:
                raise ValueError(
                    f"Wrong shape for input_ids (shape {input_shape}) or attention_mask (shape {attention_mask.shape})"
                )

            # Since attention_mask is 1.0 for positions we want to attend and 0.0 for
            # masked positions, this operation will create a tensor which is 0.0 for
            # positions we want to attend and the dtype's smallest value for masked positions.
            # Since we are adding it to the raw scores before the softmax, this is
            # effectively the same as removing these entirely.
            extended_attention_mask = extended_attention_mask.to(dtype=dtype)  # fp16 compatibility
            extended_attention_mask = (1.0 - extended_attention_mask) * torch.finfo(dtype).min
            return extended_attention_mask

        def get_head_mask(self, head_mask, num_hidden_layers: int, is_attention_chunked: bool = False):
            if head_mask is not None:
                head_mask = self._convert_head_mask_to_5d(head_mask, num_hidden_layers)
                if is_attention_chunked is True:
                    head_mask = head_mask.unsqueeze(-1)
            else:
                head_mask = [None] * num_hidden_layers

            return head_mask

        def _convert_head_mask_to_5d(self, head_mask, num_hidden_layers):
            """-> [num_hidden_layers x batch x num_heads x seq_length x seq_length]"""
            if head_mask.dim() == 1:
                head_mask = head_mask.unsqueeze(0).unsqueeze(0).unsqueeze(-1).unsqueeze(-1)
                head_mask = head_mask.expand(num_hidden_layers, -1, -1, -1, -1)
            elif head_mask.dim() == 2:
                head_mask = head_mask.unsqueeze(1).unsqueeze(-1).unsqueeze(-1)  # We can specify head_mask for each layer
            assert head_mask.dim() == 5, f"head_mask.dim != 5, instead {head_mask.dim()}"
            head_mask = head_mask.to(dtype=self.dtype)  # switch to float if need + fp16 compatibility
            return head_mask

    class BertEmbeddings(nn.Module):
        """Construct the embeddings from word, position and token_type embeddings."""

        def __init__(self, config):
            super().__init__()
            self.word_embeddings = nn.Embedding(config.vocab_size, config.hidden_size, padding_idx=config.pad_token_id)
            self.position_embeddings = nn.Embedding(config.max_position_embeddings, config.hidden_size)
            self.token_type_embeddings = nn.Embedding(config.type_vocab_size, config.hidden_size)

            # self.LayerNorm is not snake-cased to stick with TensorFlow model variable name and be able to load
            # any TensorFlow checkpoint file
            self.LayerNorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
            self.dropout = nn.Dropout(config.hidden_dropout_prob)
            # position_ids (1, len position emb) is contiguous in memory and exported when serialized
            self.position_embedding_type = getattr(config, "position_embedding_type", "absolute")
            self.register_buffer("position_ids", torch.arange(config.max_position_embeddings).expand((1, -1)))
            self.register_buffer(
                "token_type_ids",
                torch.zeros(self.position_ids.size(), dtype=torch.long, device=self.position_ids.device),
                persistent=False,
            )

        def forward(
            self, input_ids=None, token_type_ids=None, position_ids=None, inputs_embeds=None, past_key_values_length=0
        ):
            if input_ids is not None:
                input_shape = input_ids.size()
            else:
                input_shape = inputs_embeds.size()[:-1]

            seq_length = input_shape[1]

            position_ids = self.position_ids[:, past_key_values_length : seq_length + past_key_values_length]

            # Setting the token_type_ids to the registered buffer in constructor where it is all zeros, which usually occurs
            # when its auto-generated, registered buffer helps users when tracing the model without passing token_type_ids, solves
            # issue #5664

            if token_type_ids is None:
                if hasattr(self, "token_type_ids"):
                    self.token_type_ids = self.token_type_ids[:, :seq_length]
                    self.token_type_ids = self.token_type_ids.expand(input_shape[0], seq_length)
                    token_type_ids = self.token_type_ids
                else:
                    token_type_ids = torch.zeros(input_shape, dtype=torch.long, device=self.position_ids.device)

            if inputs_embeds is None:
                inputs_embeds = self.word_embeddings(input_ids)
            token_type_embeddings = self.token_type_embeddings(token_type_ids)

            embeddings = inputs_embeds + token_type_embeddings
            if self.position_embedding_type == "absolute":
                position_embeddings = self.position_embeddings(position_ids)
                embeddings += position_embeddings
            embeddings = self.LayerNorm(embeddings)
            embeddings = self.dropout(embeddings)
            return embeddings

    class BertSelfAttention(nn.Module):
        def __init__(self, config):
            super().__init__()
            if config.hidden_size % config.num_attention_heads != 0 and not hasattr(config, "embedding_size"):
                raise ValueError(
                    f"The hidden size ({config.hidden_size}) is not a multiple of the number of attention "
                    f"heads ({config.num_attention_heads})"
                )

            self.num_attention_heads = config.num_attention_heads
            self.attention_head_size = int(config.hidden_size / config.num_attention_heads)
            self.all_head_size = self.num_attention_heads * self.attention_head_size

            self.query = nn.Linear(config.hidden_size, self.all_head_size)
            self.key = nn.Linear(config.hidden_size, self.all_head_size)
            self.value = nn.Linear(config.hidden_size, self.all_head_size)

            self.dropout = nn.Dropout(config.attention_probs_dropout_prob)
            self.position_embedding_type = getattr(config, "position_embedding_type", "absolute")
            if self.position_embedding_type == "relative_key" or self.position_embedding_type == "relative_key_query":
                self.max_position_embeddings = config.max_position_embeddings
                self.distance_embedding = nn.Embedding(2 * config.max_position_embeddings - 1, self.attention_head_size)

            self.is_decoder = config.is_decoder

        def transpose_for_scores(self, x):
            new_x_shape = x.size()[:-1] + (self.num_attention_heads, self.attention_head_size)
            x = x.view(*new_x_shape)
            return x.permute(0, 2, 1, 3)

        def forward(
            self,
            hidden_states,
            attention_mask=None,
            head_mask=None,
            encoder_hidden_states=None,
            encoder_attention_mask=None,
            past_key_value=None,
            output_attentions=False,
        ):
            mixed_query_layer = self.query(hidden_states)

            # If this is instantiated as a cross-attention module, the keys
            # and values come from an encoder; the attention mask needs to be
            # such that the encoder's padding tokens are not attended to.
            is_cross_attention = encoder_hidden_states is not None

            if is_cross_attention and past_key_value is not None:
                # reuse k,v, cross_attentions
                key_layer = past_key_value[0]
                value_layer = past_key_value[1]
                attention_mask = encoder_attention_mask
            elif is_cross_attention:
                key_layer = self.transpose_for_scores(self.key(encoder_hidden_states))
                value_layer = self.transpose_for_scores(self.value(encoder_hidden_states))
                attention_mask = encoder_attention_mask
            elif past_key_value is not None:
                key_layer = self.transpose_for_scores(self.key(hidden_states))
                value_layer = self.transpose_for_scores(self.value(hidden_states))
                key_layer = torch.cat([past_key_value[0], key_layer], dim=2)
                value_layer = torch.cat([past_key_value[1], value_layer], dim=2)
            else:
                key_layer = self.transpose_for_scores(self.key(hidden_states))
                value_layer = self.transpose_for_scores(self.value(hidden_states))

            query_layer = self.transpose_for_scores(mixed_query_layer)

            if self.is_decoder:
                past_key_value = (key_layer, value_layer)

            # Take the dot product between "query" and "key" to get the raw attention scores.
            attention_scores = torch.matmul(query_layer, key_layer.transpose(-1, -2))

            if self.position_embedding_type == "relative_key" or self.position_embedding_type == "relative_key_query":
                seq_length = hidden_states.size()[1]
                position_ids_l = torch.arange(seq_length, dtype=torch.long, device=hidden_states.device).view(-1, 1)
                position_ids_r = torch.arange(seq_length, dtype=torch.long, device=hidden_states.device).view(1, -1)
                distance = position_ids_l - position_ids_r
                positional_embedding = self.distance_embedding(distance + self.max_position_embeddings - 1)
                positional_embedding = positional_embedding.to(dtype=query_layer.dtype)  # fp16 compatibility

                if self.position_embedding_type == "relative_key":
                    relative_position_scores = torch.einsum("bhld,lrd->bhlr", query_layer, positional_embedding)
                    attention_scores = attention_scores + relative_position_scores
                elif self.position_embedding_type == "relative_key_query":
                    relative_position_scores_query = torch.einsum("bhld,lrd->bhlr", query_layer, positional_embedding)
                    relative_position_scores_key = torch.einsum("bhrd,lrd->bhlr", key_layer, positional_embedding)
                    attention_scores = attention_scores + relative_position_scores_query + relative_position_scores_key

            attention_scores = attention_scores / math.sqrt(self.attention_head_size)
            if attention_mask is not None:
                # Apply the attention mask is (precomputed for all layers in BertModel forward() function)
                attention_scores = attention_scores + attention_mask

            # Normalize the attention scores to probabilities.
            attention_probs = nn.Softmax(dim=-1)(attention_scores)

            # This is actually dropping out entire tokens to attend to, which might
            # seem a bit unusual, but is taken from the original Transformer paper.
            attention_probs = self.dropout(attention_probs)

            # Mask heads if we want to
            if head_mask is not None:
                attention_probs = attention_probs * head_mask

            context_layer = torch.matmul(attention_probs, value_layer)

            context_layer = context_layer.permute(0, 2, 1, 3).contiguous()
            new_context_layer_shape = context_layer.size()[:-2] + (self.all_head_size,)
            context_layer = context_layer.view(*new_context_layer_shape)

            outputs = (context_layer, attention_probs) if output_attentions else (context_layer,)

            if self.is_decoder:
                outputs = outputs + (past_key_value,)
            return outputs

    class BertSelfOutput(nn.Module):
        def __init__(self, config):
            super().__init__()
            self.dense = nn.Linear(config.hidden_size, config.hidden_size)
            self.LayerNorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
            self.dropout = nn.Dropout(config.hidden_dropout_prob)

        def forward(self, hidden_states, input_tensor):
            hidden_states = self.dense(hidden_states)
            hidden_states = self.dropout(hidden_states)
            hidden_states = self.LayerNorm(hidden_states + input_tensor)
            return hidden_states

    class BertAttention(nn.Module):
        def __init__(self, config):
            super().__init__()
            self.self = BertSelfAttention(config)
            self.output = BertSelfOutput(config)
            self.pruned_heads = set()

        def prune_heads(self, heads):
            if len(heads) == 0:
                return
            heads, index = find_pruneable_heads_and_indices(
                heads, self.self.num_attention_heads, self.self.attention_head_size, self.pruned_heads
            )

            # Prune linear layers
            self.self.query = prune_linear_layer(self.self.query, index)
            self.self.key = prune_linear_layer(self.self.key, index)
            self.self.value = prune_linear_layer(self.self.value, index)
            self.output.dense = prune_linear_layer(self.output.dense, index, dim=1)

            # Update hyper params and store pruned heads
            self.self.num_attention_heads = self.self.num_attention_heads - len(heads)
            self.self.all_head_size = self.self.attention_head_size * self.self.num_attention_heads
            self.pruned_heads = self.pruned_heads.union(heads)

        def forward(
            self,
            hidden_states,
            attention_mask=None,
            head_mask=None,
            encoder_hidden_states=None,
            encoder_attention_mask=None,
            past_key_value=None,
            output_attentions=False,
        ):
            self_outputs = self.self(
                hidden_states,
                attention_mask,
                head_mask,
                encoder_hidden_states,
                encoder_attention_mask,
                past_key_value,
                output_attentions,
            )
            attention_output = self.output(self_outputs[0], hidden_states)
            outputs = (attention_output,) + self_outputs[1:]  # add attentions if we output them
            return outputs

    class BertIntermediate(nn.Module):
        def __init__(self, config):
            super().__init__()
            self.dense = nn.Linear(config.hidden_size, config.intermediate_size)
            if isinstance(config.hidden_act, str):
                self.intermediate_act_fn = ACT2FN[config.hidden_act]
            else:
                self.intermediate_act_fn = config.hidden_act

        def forward(self, hidden_states):
            hidden_states = self.dense(hidden_states)
            hidden_states = self.intermediate_act_fn(hidden_states)
            return hidden_states

    class BertOutput(nn.Module):
        def __init__(self, config):
            super().__init__()
            self.dense = nn.Linear(config.intermediate_size, config.hidden_size)
            self.LayerNorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
            self.dropout = nn.Dropout(config.hidden_dropout_prob)

        def forward(self, hidden_states, input_tensor):
            hidden_states = self.dense(hidden_states)
            hidden_states = self.dropout(hidden_states)
            hidden_states = self.LayerNorm(hidden_states + input_tensor)
            return hidden_states

    class BertLayer(nn.Module):
        def __init__(self, config):
            super().__init__()
            self.chunk_size_feed_forward = config.chunk_size_feed_forward
            self.seq_len_dim = 1
            self.attention = BertAttention(config)
            self.is_decoder = config.is_decoder
            self.add_cross_attention = config.add_cross_attention
            if self.add_cross_attention:
                assert self.is_decoder, f"{self} should be used as a decoder model if cross attention is added"
                self.crossattention = BertAttention(config)
            self.intermediate = BertIntermediate(config)
            self.output = BertOutput(config)

        def forward(
            self,
            hidden_states,
            attention_mask=None,
            head_mask=None,
            encoder_hidden_states=None,
            encoder_attention_mask=None,
            past_key_value=None,
            output_attentions=False,
        ):
            # decoder uni-directional self-attention cached key/values tuple is at positions 1,2
            self_attn_past_key_value = past_key_value[:2] if past_key_value is not None else None
            self_attention_outputs = self.attention(
                hidden_states,
                attention_mask,
                head_mask,
                output_attentions=output_attentions,
                past_key_value=self_attn_past_key_value,
            )
            attention_output = self_attention_outputs[0]

            # if decoder, the last output is tuple of self-attn cache
            if self.is_decoder:
                outputs = self_attention_outputs[1:-1]
                present_key_value = self_attention_outputs[-1]
            else:
                outputs = self_attention_outputs[1:]  # add self attentions if we output attention weights

            cross_attn_present_key_value = None
            if self.is_decoder and encoder_hidden_states is not None:
                assert hasattr(
                    self, "crossattention"
                ), f"If `encoder_hidden_states` are passed, {self} has to be instantiated with cross-attention layers by setting `config.add_cross_attention=True`"

                # cross_attn cached key/values tuple is at positions 3,4 of past_key_value tuple
                cross_attn_past_key_value = past_key_value[-2:] if past_key_value is not None else None
                cross_attention_outputs = self.crossattention(
                    attention_output,
                    attention_mask,
                    head_mask,
                    encoder_hidden_states,
                    encoder_attention_mask,
                    cross_attn_past_key_value,
                    output_attentions,
                )
                attention_output = cross_attention_outputs[0]
                outputs = outputs + cross_attention_outputs[1:-1]  # add cross attentions if we output attention weights

                # add cross-attn cache to positions 3,4 of present_key_value tuple
                cross_attn_present_key_value = cross_attention_outputs[-1]
                present_key_value = present_key_value + cross_attn_present_key_value

            layer_output = apply_chunking_to_forward(
                self.feed_forward_chunk, self.chunk_size_feed_forward, self.seq_len_dim, attention_output
            )
            outputs = (layer_output,) + outputs

            # if decoder, return the attn key/values as the last output
            if self.is_decoder:
                outputs = outputs + (present_key_value,)

            return outputs

        def feed_forward_chunk(self, attention_output):
            intermediate_output = self.intermediate(attention_output)
            layer_output = self.output(intermediate_output, attention_output)
            return layer_output

    class BertEncoder(nn.Module):
        def __init__(self, config):
            super().__init__()
            self.config = config
            self.layer = nn.ModuleList([BertLayer(config) for _ in range(config.num_hidden_layers)])

        def forward(
            self,
            hidden_states,
            attention_mask=None,
            head_mask=None,
            encoder_hidden_states=None,
            encoder_attention_mask=None,
            past_key_values=None,
            use_cache=None,
            output_attentions=False,
            output_hidden_states=False,
            return_dict=True,
        ):
            all_hidden_states = () if output_hidden_states else None
            all_self_attentions = () if output_attentions else None
            all_cross_attentions = () if output_attentions and self.config.add_cross_attention else None

            next_decoder_cache = () if use_cache else None
            for i, layer_module in enumerate(self.layer):
                if output_hidden_states:
                    all_hidden_states = all_hidden_states + (hidden_states,)

                layer_head_mask = head_mask[i] if head_mask is not None else None
                past_key_value = past_key_values[i] if past_key_values is not None else None

                layer_outputs = layer_module(
                    hidden_states,
                    attention_mask,
                    layer_head_mask,
                    encoder_hidden_states,
                    encoder_attention_mask,
                    past_key_value,
                    output_attentions,
                )

                hidden_states = layer_outputs[0]
                if use_cache:
                    next_decoder_cache += (layer_outputs[-1],)
                if output_attentions:
                    all_self_attentions = all_self_attentions + (layer_outputs[1],)
                    if self.config.add_cross_attention:
                        all_cross_attentions = all_cross_attentions + (layer_outputs[2],)

            if output_hidden_states:
                all_hidden_states = all_hidden_states + (hidden_states,)

            if not return_dict:
                return tuple(
                    v
                    for v in [
                        hidden_states,
                        next_decoder_cache,
                        all_hidden_states,
                        all_self_attentions,
                        all_cross_attentions,
                    ]
                    if v is not None
                )
            return ModelOutput(
                last_hidden_state=hidden_states,
                past_key_values=next_decoder_cache,
                hidden_states=all_hidden_states,
                attentions=all_self_attentions,
                cross_attentions=all_cross_attentions,
            )

    class BertPooler(nn.Module):
        def __init__(self, config):
            super().__init__()
            self.dense = nn.Linear(config.hidden_size, config.hidden_size)
            self.activation = nn.Tanh()

        def forward(self, hidden_states):
            # We "pool" the model by simply taking the hidden state corresponding
            # to the first token.
            first_token_tensor = hidden_states[:, 0]
            pooled_output = self.dense(first_token_tensor)
            pooled_output = self.activation(pooled_output)
            return pooled_output

    class BertPreTrainedModel(nn.Module, ModuleUtilsMixin):  # PreTrainedModel reduced to init_weights
        base_model_prefix = "bert"

        def __init__(self, config):
            super().__init__()
            self.config = config

        def init_weights(self):
            self.apply(self._init_weights)

        def _init_weights(self, module):
            """Initialize the weights"""
            if isinstance(module, nn.Linear):
                # Slightly different from the TF version which uses truncated_normal for initialization
                # cf https://github.com/pytorch/pytorch/pull/5617
                module.weight.data.normal_(mean=0.0, std=self.config.initializer_range)
                if module.bias is not None:
                    module.bias.data.zero_()
            elif isinstance(module, nn.Embedding):
                module.weight.data.normal_(mean=0.0, std=self.config.initializer_range)
                if module.padding_idx is not None:
                    module.weight.data[module.padding_idx].zero_()
            elif isinstance(module, nn.LayerNorm):
                module.bias.data.zero_()
                module.weight.data.fill_(1.0)

    class BertModel(BertPreTrainedModel):
        def __init__(self, config, add_pooling_layer=True):
            super().__init__(config)
            self.config = config

            self.embeddings = BertEmbeddings(config)
            self.encoder = BertEncoder(config)

            self.pooler = BertPooler(config) if add_pooling_layer else None

            self.init_weights()

        def _prune_heads(self, heads_to_prune):
            for layer, heads in heads_to_prune.items():
                self.encoder.layer[layer].attention.prune_heads(heads)

        def forward(
            self,
            input_ids=None,
            attention_mask=None,
            token_type_ids=None,
            position_ids=None,
            head_mask=None,
            inputs_embeds=None,
            encoder_hidden_states=None,
            encoder_attention_mask=None,
            past_key_values=None,
            use_cache=None,
            output_attentions=None,
            output_hidden_states=None,
            return_dict=None,
        ):
            output_attentions = output_attentions if output_attentions is not None else self.config.output_attentions
            output_hidden_states = (
                output_hidden_states if output_hidden_states is not None else self.config.output_hidden_states
            )
            return_dict = return_dict if return_dict is not None else self.config.use_return_dict

            if self.config.is_decoder:
                use_cache = use_cache if use_cache is not None else self.config.use_cache
            else:
                use_cache = False

            if input_ids is not None and inputs_embeds is not None:
                raise ValueError("You cannot specify both input_ids and inputs_embeds at the same time")
            elif input_ids is not None:
                input_shape = input_ids.size()
                batch_size, seq_length = input_shape
            elif inputs_embeds is not None:
                input_shape = inputs_embeds.size()[:-1]
                batch_size, seq_length = input_shape
            else:
                raise ValueError("You have to specify either input_ids or inputs_embeds")

            device = input_ids.device if input_ids is not None else inputs_embeds.device

            # past_key_values_length
            past_key_values_length = past_key_values[0][0].shape[2] if past_key_values is not None else 0

            if attention_mask is None:
                attention_mask = torch.ones(((batch_size, seq_length + past_key_values_length)), device=device)

            if token_type_ids is None:
                if hasattr(self.embeddings, "token_type_ids"):
                    self.embeddings.token_type_ids = self.embeddings.token_type_ids[:, :seq_length]
                    self.embeddings.token_type_ids = self.embeddings.token_type_ids.expand(batch_size, seq_length)
                    token_type_ids = self.embeddings.token_type_ids
                else:
                    token_type_ids = torch.zeros(input_shape, dtype=torch.long, device=device)

            # We can provide a self-attention mask of dimensions [batch_size, from_seq_length, to_seq_length]
            # ourselves in which case we just need to make it broadcastable to all heads.
            extended_attention_mask: torch.Tensor = self.get_extended_attention_mask(attention_mask, input_shape)

            # If a 2D or 3D attention mask is provided for the cross-attention
            # we need to make broadcastable to [batch_size, num_heads, seq_length, seq_length]
            if self.config.is_decoder and encoder_hidden_states is not None:
                encoder_batch_size, encoder_sequence_length, _ = encoder_hidden_states.size()
                encoder_hidden_shape = (encoder_batch_size, encoder_sequence_length)
                if encoder_attention_mask is None:
                    encoder_attention_mask = torch.ones(encoder_hidden_shape, device=device)
                encoder_extended_attention_mask = self.invert_attention_mask(encoder_attention_mask)
            else:
                encoder_extended_attention_mask = None

            # Prepare head mask if needed
            # 1.0 in head_mask indicate we keep the head
            # attention_probs has shape bsz x n_heads x N x N
            # input head_mask has shape [num_heads] or [num_hidden_layers x num_heads]
            # and head_mask is converted to shape [num_hidden_layers x batch x num_heads x seq_length x seq_length]
            head_mask = self.get_head_mask(head_mask, self.config.num_hidden_layers)

            embedding_output = self.embeddings(
                input_ids=input_ids,
                position_ids=position_ids,
                token_type_ids=token_type_ids,
                inputs_embeds=inputs_embeds,
                past_key_values_length=past_key_values_length,
            )
            encoder_outputs = self.encoder(
                embedding_output,
                attention_mask=extended_attention_mask,
                head_mask=head_mask,
                encoder_hidden_states=encoder_hidden_states,
                encoder_attention_mask=encoder_extended_attention_mask,
                past_key_values=past_key_values,
                use_cache=use_cache,
                output_attentions=output_attentions,
                output_hidden_states=output_hidden_states,
                return_dict=return_dict,
            )
            sequence_output = encoder_outputs[0]
            pooled_output = self.pooler(sequence_output) if self.pooler is not None else None

            if not return_dict:
                return (sequence_output, pooled_output) + encoder_outputs[1:]

            return ModelOutput(
                last_hidden_state=sequence_output,
                pooler_output=pooled_output,
                past_key_values=encoder_outputs.past_key_values,
                hidden_states=encoder_outputs.hidden_states,
                attentions=encoder_outputs.attentions,
                cross_attentions=encoder_outputs.cross_attentions,
            )

    return SimpleNamespace(BertModel=BertModel, BertEmbeddings=BertEmbeddings, BertSelfAttention=BertSelfAttention,
                           CrossEntropyLoss=CrossEntropyLoss)


def _bert_np(sd, cfg, ids, tt, mask2d, head_mask=None, causal=False):
    ids, tt, mask2d = np.asarray(ids), np.asarray(tt), np.asarray(mask2d, dtype=np.float64)
    B, T = ids.shape
    H, hd = cfg.num_attention_heads, cfg.hidden_size // cfg.num_attention_heads
    x = sd["embeddings.word_embeddings.weight"][ids] + sd["embeddings.token_type_embeddings.weight"][tt]
    if cfg.position_embedding_type == "absolute":
        x = x + sd["embeddings.position_embeddings.weight"][np.arange(T)]
    x = _ln_np(x, sd["embeddings.LayerNorm.weight"], sd["embeddings.LayerNorm.bias"], cfg.layer_norm_eps)
    keep = mask2d[:, None, None, :]
    if causal:
        keep = keep * (np.arange(T)[None, :] <= np.arange(T)[:, None])[None, None]
    allowed = np.broadcast_to(keep == 1, (B, H, T, T))
    dist = np.arange(T)[:, None] - np.arange(T)[None, :] + cfg.max_position_embeddings - 1
    for layer in range(cfg.num_hidden_layers):
        p = f"encoder.layer.{layer}."

        def lin(name, v):
            return v @ sd[p + name + ".weight"].T + sd[p + name + ".bias"]

        q, k, v = (lin("attention.self." + n, x).reshape(B, T, H, hd).transpose(0, 2, 1, 3)
                   for n in ("query", "key", "value"))
        s = q @ k.transpose(0, 1, 3, 2)
        if cfg.position_embedding_type != "absolute":
            pe = sd[p + "attention.self.distance_embedding.weight"][dist]
            s = s + np.einsum("bhld,lrd->bhlr", q, pe)
            if cfg.position_embedding_type == "relative_key_query":
                s = s + np.einsum("bhrd,lrd->bhlr", k, pe)
        s = np.where(allowed, s / math.sqrt(hd), -np.inf)
        w = np.exp(s - s.max(-1, keepdims=True))
        w = w / w.sum(-1, keepdims=True)
        if head_mask is not None:
            w = w * np.asarray(head_mask)[layer][None, :, None, None]
        ctx = (w @ v).transpose(0, 2, 1, 3).reshape(B, T, H * hd)
        x = _ln_np(lin("attention.output.dense", ctx) + x, sd[p + "attention.output.LayerNorm.weight"],
                   sd[p + "attention.output.LayerNorm.bias"], cfg.layer_norm_eps)
        inter = _act_np("gelu", lin("intermediate.dense", x))
        x = _ln_np(lin("output.dense", inter) + x, sd[p + "output.LayerNorm.weight"], sd[p + "output.LayerNorm.bias"],
                   cfg.layer_norm_eps)
    pooled = np.tanh(x[:, 0] @ sd["pooler.dense.weight"].T + sd["pooler.dense.bias"])
    return x, pooled


BERT_IDS = [[2, 7, 5, 9, 3, 11], [4, 4, 8, 1, 0, 0]]
BERT_TT = [[0, 0, 0, 1, 1, 1], [0, 0, 1, 1, 1, 1]]
BERT_MASK = [[1, 1, 1, 1, 1, 1], [1, 1, 1, 1, 0, 0]]


def _bert_run(torch, weights=None):
    g = gpt2_page(torch, activations_page(torch).ACT2FN)
    p = bert_page(torch, activations_page(torch).ACT2FN, g.find_pruneable_heads_and_indices, g.prune_linear_layer,
                  g.apply_chunking_to_forward)
    r = SimpleNamespace(sd={})
    ids, tt, mask = torch.tensor(BERT_IDS), torch.tensor(BERT_TT), torch.tensor(BERT_MASK)
    models = {}
    for i, (name, kw) in enumerate((("abs", {}), ("rel", {"position_embedding_type": "relative_key"}),
                                    ("relkq", {"position_embedding_type": "relative_key_query"}),
                                    ("dec", {"is_decoder": True}), ("chunked", {"chunk_size_feed_forward": 2}),
                                    ("pruned", {}))):
        torch.manual_seed(i)
        m = p.BertModel(BertConfig(**kw))
        if name in ("chunked", "pruned"):
            m.load_state_dict(models["abs"].state_dict())
        if weights is not None:
            m.load_state_dict({k: torch.tensor(v) for k, v in weights[name].items()})
        m.eval()
        models[name] = m
        r.sd[name] = {k: _np(v) for k, v in m.state_dict().items()}
    abs_ = models["abs"]
    r.buffers = sorted(abs_.embeddings.state_dict())
    with torch.no_grad():
        out = abs_(ids, attention_mask=mask, token_type_ids=tt, output_hidden_states=True, output_attentions=True)
        r.last, r.pooled = out.last_hidden_state, out.pooler_output
        r.n_hidden, r.attn0 = len(out.hidden_states), out.attentions[0]
        r.tuple_out = abs_(ids, attention_mask=mask, token_type_ids=tt, return_dict=False)
        r.no_tt = abs_(ids, attention_mask=mask).last_hidden_state
        r.head_masked = abs_(ids, attention_mask=mask, token_type_ids=tt,
                             head_mask=torch.tensor([[1.0, 0.0, 1.0], [1.0, 1.0, 1.0]])).last_hidden_state
        r.head_mask5d = abs_.get_head_mask(torch.tensor([1.0, 0.0, 1.0]), 2)
        r.ext3 = abs_.get_extended_attention_mask(torch.tensor([[[1, 0], [1, 1]]]), (1, 2))
        r.inverted = abs_.invert_attention_mask(torch.tensor([[1, 0, 1]]))
        r.dec_ext = models["dec"].get_extended_attention_mask(torch.tensor([[1, 1, 1, 0, 1]]), (1, 3))
        r.rel = models["rel"](ids, attention_mask=mask, token_type_ids=tt).last_hidden_state
        r.relkq = models["relkq"](ids, attention_mask=mask, token_type_ids=tt).last_hidden_state
        r.chunked = models["chunked"](ids, attention_mask=mask, token_type_ids=tt).last_hidden_state
        models["pruned"]._prune_heads({0: [1]})
        r.pruned = models["pruned"](ids, attention_mask=mask, token_type_ids=tt).last_hidden_state
        r.pruned_sizes = (models["pruned"].encoder.layer[0].attention.self.all_head_size,
                          tuple(models["pruned"].encoder.layer[0].attention.output.dense.weight.shape))
        # the decoder: causal mask, and cached decoding (prefix of 4, then one token at a time)
        dec = models["dec"]
        r.dec_full = dec(ids[:1], token_type_ids=tt[:1]).last_hidden_state
        out = dec(ids[:1, :4], token_type_ids=tt[:1, :4])
        past, steps = out.past_key_values, [out.last_hidden_state]
        for t in (4, 5):
            out = dec(ids[:1, t:t + 1], token_type_ids=tt[:1, t:t + 1], past_key_values=past)
            past = out.past_key_values
            steps.append(out.last_hidden_state)
        r.dec_steps = torch.cat(steps, 1)
    try:
        abs_.get_extended_attention_mask(torch.ones(3), (1, 3))
        r.error = None
    except ValueError as e:
        r.error = str(e)
    # float64: gradient of a scalar of both outputs against central differences
    m64 = models["abs"].double()
    coef = torch.tensor(np.random.default_rng(2).normal(size=(2, 6, 12)))

    def loss_fn():
        o = m64(ids, attention_mask=mask, token_type_ids=tt)
        return (o.last_hidden_state * coef).sum() + o.pooler_output.sum()

    loss_fn().backward()
    names = ("encoder.layer.0.attention.self.key.weight", "encoder.layer.1.intermediate.dense.bias",
             "embeddings.token_type_embeddings.weight")
    params = dict(m64.named_parameters())
    r.grads = {n: params[n].grad.clone() for n in names}
    r.fd = {}
    with torch.no_grad():
        for n in names:
            flat = params[n].view(-1)
            fd = []
            for j in (1, 7):
                old = flat[j].item()
                flat[j] = old + 1e-6
                up = loss_fn().item()
                flat[j] = old - 1e-6
                down = loss_fn().item()
                flat[j] = old
                fd.append((up - down) / 2e-6)
            r.fd[n] = fd
    return r


def test_transformers_bert():
    r = _bert_run(lucid)
    assert "embeddings.position_ids" in r.sd["abs"] and "embeddings.token_type_ids" not in r.sd["abs"]
    assert r.buffers == sorted(k[len("embeddings."):] for k in r.sd["abs"] if k.startswith("embeddings."))
    cfg = BertConfig()
    last, pooled = _bert_np(r.sd["abs"], cfg, BERT_IDS, BERT_TT, BERT_MASK)
    np.testing.assert_allclose(_np(r.last), last, rtol=1e-4, atol=2e-5)
    np.testing.assert_allclose(_np(r.pooled), pooled, rtol=1e-4, atol=2e-5)
    assert r.n_hidden == 3 and r.attn0.shape == (2, 3, 6, 6)
    assert np.all(_np(r.attn0)[1, :, :, 4:] == 0)  # padded keys get no weight
    assert len(r.tuple_out) == 2
    np.testing.assert_array_equal(_np(r.tuple_out[0]), _np(r.last))
    np.testing.assert_allclose(_np(r.no_tt), _bert_np(r.sd["abs"], cfg, BERT_IDS, np.zeros((2, 6), int), BERT_MASK)[0],
                               rtol=1e-4, atol=2e-5)
    hm = [[1.0, 0.0, 1.0], [1.0, 1.0, 1.0]]
    np.testing.assert_allclose(_np(r.head_masked), _bert_np(r.sd["abs"], cfg, BERT_IDS, BERT_TT, BERT_MASK, hm)[0],
                               rtol=1e-4, atol=2e-5)
    np.testing.assert_allclose(_np(r.pruned), _np(r.head_masked), rtol=1e-5, atol=1e-6)
    assert r.pruned_sizes == (8, (12, 8))
    assert r.head_mask5d.shape == (2, 1, 3, 1, 1) and r.head_mask5d.dtype == lucid.float32
    np.testing.assert_array_equal(_np(r.head_mask5d).reshape(2, 3), [[1, 0, 1], [1, 0, 1]])
    lo = float(np.finfo(np.float32).min)
    np.testing.assert_array_equal(_np(r.ext3), [[[[0, lo], [0, 0]]]])
    np.testing.assert_array_equal(_np(r.inverted), [[[[0, lo, 0]]]])
    # decoder: 3 queries after a 2-token prefix, key 3 padded
    want = np.array([[1, 1, 1, 0, 0], [1, 1, 1, 0, 0], [1, 1, 1, 0, 1]], dtype=float)
    np.testing.assert_array_equal(_np(r.dec_ext), np.where(want == 1, 0.0, lo)[None, None])
    assert r.error == "Wrong shape for input_ids (shape (1, 3)) or attention_mask (shape (3,))"
    for name in ("rel", "relkq"):
        c = BertConfig(position_embedding_type={"rel": "relative_key", "relkq": "relative_key_query"}[name])
        np.testing.assert_allclose(_np(getattr(r, name)), _bert_np(r.sd[name], c, BERT_IDS, BERT_TT, BERT_MASK)[0],
                                   rtol=1e-4, atol=2e-5, err_msg=name)
    np.testing.assert_allclose(_np(r.chunked), _np(r.last), rtol=1e-6, atol=1e-6)
    dec_want = _bert_np(r.sd["dec"], BertConfig(is_decoder=True), BERT_IDS[:1], BERT_TT[:1], [[1] * 6], causal=True)[0]
    np.testing.assert_allclose(_np(r.dec_full), dec_want, rtol=1e-4, atol=2e-5)
    np.testing.assert_allclose(_np(r.dec_steps), _np(r.dec_full), rtol=1e-5, atol=1e-5)
    for n, fd in r.fd.items():
        g = _np(r.grads[n]).reshape(-1)
        np.testing.assert_allclose([g[1], g[7]], fd, rtol=1e-5, atol=1e-7, err_msg=n)
        assert np.abs(fd).max() > 1e-3, n


def test_transformers_bert_torch_parity():
    torch = pytest.importorskip("torch")
    a = _bert_run(lucid)
    b = _bert_run(torch, weights=a.sd)
    for name in ("last", "pooled", "attn0", "no_tt", "head_masked", "pruned", "head_mask5d", "ext3", "inverted",
                 "dec_ext", "rel", "relkq", "chunked", "dec_full", "dec_steps"):
        np.testing.assert_allclose(_np(getattr(a, name)), getattr(b, name).numpy(), rtol=1e-5, atol=1e-5,
                                   err_msg=name)
    for n in a.grads:
        np.testing.assert_allclose(_np(a.grads[n]), b.grads[n].numpy(), rtol=1e-10, atol=1e-12, err_msg=n)
    assert a.error == b.error.replace("torch.Size([3])", "(3,)") or a.error == b.error


# --------------------------------------------------------------------------- fixed on the way

def _expand_write_run(torch):
    # BertEmbeddings' ``register_buffer("position_ids", torch.arange(n).expand((1, -1)))`` is loaded
    # by ``load_state_dict``'s ``copy_``: an expand that repeats no element is a writable view
    base = torch.arange(5)
    e = base.expand((1, -1))
    e.copy_(torch.tensor([[4, 3, 2, 1, 0]]))
    m = torch.nn.Module()
    m.register_buffer("position_ids", torch.arange(4).expand((1, -1)))
    m.load_state_dict({"position_ids": torch.tensor([[7, 6, 5, 4]])})
    x = torch.tensor([1.0, 2.0, 3.0], requires_grad=True)
    y = x.expand(1, 1, 3)
    (y * torch.tensor([2.0, 3.0, 4.0])).sum().backward()
    try:  # one that does repeat elements still refuses a write
        torch.arange(3).expand(2, -1).copy_(torch.zeros(2, 3, dtype=torch.long))
        refused = False
    except RuntimeError:
        refused = True
    return base.tolist(), m.position_ids.tolist(), x.grad.tolist(), refused


def test_expand_without_repeats_is_writable():
    assert _expand_write_run(lucid) == ([4, 3, 2, 1, 0], [[7, 6, 5, 4]], [2.0, 3.0, 4.0], True)


def test_expand_without_repeats_is_writable_torch_parity():
    torch = pytest.importorskip("torch")
    assert _expand_write_run(lucid) == _expand_write_run(torch)
