"""facebookresearch/fairseq's self-contained pieces run on Lucid (``import lucid as torch``):

- ``fairseq/utils.py`` ``make_positions`` (padding-aware positions: ``cumsum`` of the non-pad mask
  times the mask, plus ``padding_idx``), ``modules/sinusoidal_positional_embedding.py`` (the
  tensor2tensor sine/cosine table, its shape read through ``torch.onnx.operators.shape_as_tensor``
  as 0-dim tensors that then size ``view``), ``modules/learned_positional_embedding.py`` (an
  ``nn.Embedding`` indexed by those positions, and the single-step position while decoding) and
  ``modules/positional_embedding.py``'s ``PositionalEmbedding`` factory.
- ``modules/multihead_attention.py`` ``MultiheadAttention``: the ``F.multi_head_attention_forward``
  path (separate q/k/v projection weights, ``key_padding_mask``, additive ``attn_mask``,
  ``add_bias_kv``/``add_zero_attn``, head-averaged weights) and its own bmm path for incremental
  decoding (``_get_input_buffer``/``_set_input_buffer``, ``_append_prev_key_padding_mask``,
  ``reorder_incremental_state`` for beam search). fairseq's ``@with_incremental_state`` machinery
  (``fairseq/incremental_decoding_utils.py``) is kept at its minimum: the decorator splicing
  ``FairseqIncrementalState`` into the bases, a per-module uuid, and ``get_incremental_state``/
  ``set_incremental_state`` as dictionary lookups under ``"{id}.{key}"``. ``FairseqDropout`` and
  ``quant_noise`` are cut to what they do at ``p=0``; ``utils.softmax`` and ``fill_with_neg_inf``
  are fairseq's; ``buffered_future_mask`` is ``TransformerDecoder``'s without its cache.
- ``modules/transformer_layer.py`` ``TransformerEncoderLayerBase``/``TransformerDecoderLayerBase``,
  post-norm and pre-norm (``normalize_before``), the decoder with encoder-decoder attention
  (``static_kv`` caching) decoded step by step with a beam reorder. Left out: the pruning helpers
  (``_get_fc_rank``, ``_prune_fc_layer``), ``upgrade_state_dict_named``, the experimental adapter
  block and the ``xformers_att_config`` argument (this ``MultiheadAttention`` predates it);
  ``LayerNorm`` is fairseq's fallback ``torch.nn.LayerNorm`` (no apex) and the config a namespace.
- ``criterions/label_smoothed_cross_entropy.py`` ``label_smoothed_nll_loss`` (``gather``,
  ``masked_fill_`` of the pad positions, ``reduce``).
- ``search.py`` ``BeamSearch.step`` (``topk`` over the flattened beams, ``torch.div(...,
  rounding_mode='trunc')`` and ``fmod`` to split the flat index).
- ``checkpoint_utils.load_checkpoint_to_cpu``'s load idiom ``torch.load(f, map_location=lambda s, l:
  default_restore_location(s, "cpu"))`` on a fairseq-shaped checkpoint (``args``, ``model``,
  ``optimizer_history``, ``extra_state``) written with ``lucid.save`` and with
  ``lucid.serialization.save_for_torch``.

Sizes are tiny and data synthetic; each page is a function of the module handed to it as ``torch``.
Checks without PyTorch: NumPy recomputations (the sinusoidal closed form, positions by a Python loop
for left and right padding, softmax attention with masks, bias_kv and zero attention, the
label-smoothed closed form and its gradient, the beam step by ``argsort``), incremental decoding
equal to full causal decoding of the same prefix (also after a beam reorder), and float64 finite
differences. The ``*_torch_parity`` tests run the same text on PyTorch with the same weights.

Adapted: ``LearnedPositionalEmbedding`` is the current fairseq text (the stored copy is the 2018 one
with ``left_pad``); ``PathManager.open`` is ``open`` and ``_upgrade_state_dict`` (pre-2019 upgrades)
is the identity. The sinusoidal module is moved with ``.to(device)`` as fairseq's trainer moves the
model (its ``torch.FloatTensor(1)`` buffer is made on the CPU), and its ONNX branch runs under
``torch.device("cpu")`` on CPU copies (it concatenates the CPU shape tensor with a new tensor).
A Lucid checkpoint's ``argparse.Namespace`` args load inside ``safe_globals([Namespace])``, as under
PyTorch >= 2.6 (weights-only by default); ``save_for_torch`` writes weights-only objects only, so its
checkpoint has ``args=None``, as fairseq's since its move to dataclass configs.

Fixed on the way: ``torch.onnx`` did not exist (``torch.onnx.operators.shape_as_tensor`` raised
``AttributeError``; now ``lucid.onnx`` with ``operators.shape_as_tensor``/``reshape_from_tensor_shape``,
``is_in_onnx_export`` and a refusing ``export``).
"""
import math
import uuid
from types import SimpleNamespace

import numpy as np
import pytest

import lucid
import lucid.nn  # noqa: F401
import lucid.nn.functional  # noqa: F401
import lucid.serialization  # noqa: F401


def _np(t):
    return np.asarray(t.detach().cpu().numpy())


# --------------------------------------------------------------------------- positions

def positions_page(torch):
    nn = torch.nn
    F = torch.nn.functional
    # the module's ``import torch.onnx.operators`` is done by the caller (``import torch`` names PyTorch)
    Tensor = torch.Tensor
    from typing import Any, Optional

    def make_positions(tensor, padding_idx: int, onnx_trace: bool = False):
        """Replace non-padding symbols with their position numbers.

        Position numbers begin at padding_idx+1. Padding symbols are ignored.
        """
        # The series of casts and type-conversions here are carefully
        # balanced to both work with ONNX export and XLA. In particular XLA
        # prefers ints, cumsum defaults to output longs, and ONNX doesn't know
        # how to handle the dtype kwarg in cumsum.
        mask = tensor.ne(padding_idx).int()
        return (torch.cumsum(mask, dim=1).type_as(mask) * mask).long() + padding_idx

    utils = SimpleNamespace(make_positions=make_positions)

    class SinusoidalPositionalEmbedding(nn.Module):
        """This module produces sinusoidal positional embeddings of any length.

        Padding symbols are ignored.
        """

        def __init__(self, embedding_dim, padding_idx, init_size=1024):
            super().__init__()
            self.embedding_dim = embedding_dim
            self.padding_idx = padding_idx if padding_idx is not None else 0
            self.weights = SinusoidalPositionalEmbedding.get_embedding(
                init_size, embedding_dim, padding_idx
            )
            self.onnx_trace = False
            self.register_buffer("_float_tensor", torch.FloatTensor(1))
            self.max_positions = int(1e5)

        def prepare_for_onnx_export_(self):
            self.onnx_trace = True

        @staticmethod
        def get_embedding(
            num_embeddings: int, embedding_dim: int, padding_idx: Optional[int] = None
        ):
            """Build sinusoidal embeddings.

            This matches the implementation in tensor2tensor, but differs slightly
            from the description in Section 3.5 of "Attention Is All You Need".
            """
            half_dim = embedding_dim // 2
            emb = math.log(10000) / (half_dim - 1)
            emb = torch.exp(torch.arange(half_dim, dtype=torch.float) * -emb)
            emb = torch.arange(num_embeddings, dtype=torch.float).unsqueeze(
                1
            ) * emb.unsqueeze(0)
            emb = torch.cat([torch.sin(emb), torch.cos(emb)], dim=1).view(
                num_embeddings, -1
            )
            if embedding_dim % 2 == 1:
                # zero pad
                emb = torch.cat([emb, torch.zeros(num_embeddings, 1)], dim=1)
            if padding_idx is not None:
                emb[padding_idx, :] = 0
            return emb

        def forward(
            self,
            input,
            incremental_state: Optional[Any] = None,
            timestep: Optional[Tensor] = None,
            positions: Optional[Tensor] = None,
        ):
            """Input is expected to be of size [bsz x seqlen]."""
            assert (positions is None) or (
                self.padding_idx is None
            ), "If positions is pre-computed then padding_idx should not be set."

            bspair = torch.onnx.operators.shape_as_tensor(input)
            bsz, seq_len = bspair[0], bspair[1]
            max_pos = self.padding_idx + 1 + seq_len
            if self.weights is None or max_pos > self.weights.size(0):
                # recompute/expand embeddings if needed
                self.weights = SinusoidalPositionalEmbedding.get_embedding(
                    max_pos, self.embedding_dim, self.padding_idx
                )
            self.weights = self.weights.to(self._float_tensor)

            if incremental_state is not None:
                # positions is the same for every token when decoding a single step
                pos = timestep.view(-1)[0] + 1 if timestep is not None else seq_len
                if self.onnx_trace:
                    return (
                        self.weights.index_select(index=self.padding_idx + pos, dim=0)
                        .unsqueeze(1)
                        .repeat(bsz, 1, 1)
                    )
                return self.weights[self.padding_idx + pos, :].expand(bsz, 1, -1)

            if positions is None:
                positions = utils.make_positions(
                    input, self.padding_idx, onnx_trace=self.onnx_trace
                )
            if self.onnx_trace:
                flat_embeddings = self.weights.detach().index_select(0, positions.view(-1))
                embedding_shape = torch.cat(
                    (bsz.view(1), seq_len.view(1), torch.tensor([-1], dtype=torch.long))
                )
                embeddings = torch.onnx.operators.reshape_from_tensor_shape(
                    flat_embeddings, embedding_shape
                )
                return embeddings
            return (
                self.weights.index_select(0, positions.view(-1))
                .view(bsz, seq_len, -1)
                .detach()
            )

    class LearnedPositionalEmbedding(nn.Embedding):
        """
        This module learns positional embeddings up to a fixed maximum size.
        Padding ids are ignored by either offsetting based on padding_idx
        or by setting padding_idx to None and ensuring that the appropriate
        position ids are passed to the forward function.
        """

        def __init__(self, num_embeddings: int, embedding_dim: int, padding_idx: int):
            super().__init__(num_embeddings, embedding_dim, padding_idx)
            self.onnx_trace = False
            if self.padding_idx is not None:
                self.max_positions = self.num_embeddings - self.padding_idx - 1
            else:
                self.max_positions = self.num_embeddings

        def forward(
            self,
            input: Tensor,
            incremental_state=None,
            positions: Optional[Tensor] = None,
        ):
            """Input is expected to be of size [bsz x seqlen]."""
            assert (positions is None) or (
                self.padding_idx is None
            ), "If positions is pre-computed then padding_idx should not be set."

            if positions is None:
                if incremental_state is not None:
                    # positions is the same for every token when decoding a single step
                    # Without the int() cast, it doesn't work in some cases when exporting to ONNX
                    positions = torch.zeros(
                        (1, 1), device=input.device, dtype=input.dtype
                    ).fill_(int(self.padding_idx + input.size(1)))
                else:
                    positions = utils.make_positions(
                        input, self.padding_idx, onnx_trace=self.onnx_trace
                    )
            return F.embedding(
                positions,
                self.weight,
                self.padding_idx,
                self.max_norm,
                self.norm_type,
                self.scale_grad_by_freq,
                self.sparse,
            )

    def PositionalEmbedding(num_embeddings, embedding_dim, padding_idx, learned=False):
        if learned:
            m = LearnedPositionalEmbedding(
                num_embeddings + padding_idx + 1, embedding_dim, padding_idx,
            )
            nn.init.normal_(m.weight, mean=0, std=embedding_dim ** -0.5)
            nn.init.constant_(m.weight[padding_idx], 0)
        else:
            m = SinusoidalPositionalEmbedding(
                embedding_dim, padding_idx, init_size=num_embeddings + padding_idx + 1,
            )
        return m

    return SimpleNamespace(make_positions=make_positions, SinusoidalPositionalEmbedding=SinusoidalPositionalEmbedding,
                           LearnedPositionalEmbedding=LearnedPositionalEmbedding,
                           PositionalEmbedding=PositionalEmbedding)


PAD = 1
# right padding (rows 0, 1) and left padding (row 2), as fairseq's source side may be
TOKENS = [[5, 6, 7, 8, 9], [4, 7, 2, PAD, PAD], [PAD, PAD, 3, 9, 4]]


def _positions_loop(tokens, pad):
    out = []
    for row in tokens:
        k, r = 0, []
        for t in row:
            if t == pad:
                r.append(pad)
            else:
                k += 1
                r.append(pad + k)
        out.append(r)
    return out


def _sinusoid_np(n, d, pad):
    half = d // 2
    freq = np.exp(np.arange(half) * -(math.log(10000) / (half - 1)))
    ang = np.arange(n)[:, None] * freq[None, :]
    emb = np.concatenate([np.sin(ang), np.cos(ang)], axis=1)
    if d % 2 == 1:
        emb = np.concatenate([emb, np.zeros((n, 1))], axis=1)
    if pad is not None:
        emb[pad] = 0
    return emb


def _positions_run(torch):
    p = positions_page(torch)
    tokens = torch.tensor(TOKENS)
    pos = p.make_positions(tokens, PAD)
    # odd dim: the zero-pad column; moved with the model, as fairseq's trainer does (the legacy
    # ``torch.FloatTensor(1)`` buffer is made on the CPU)
    sin = p.PositionalEmbedding(6, 7, PAD, learned=False).to(tokens.device)
    sin_out = sin(tokens)
    sin_table = sin.weights
    sin_inc = sin(tokens[:, :3], incremental_state={})  # single step: position padding_idx + seq_len
    torch.manual_seed(0)
    learned = p.PositionalEmbedding(6, 4, PAD, learned=True)
    learned_out = learned(tokens)
    learned_inc = learned(tokens[:, :3], incremental_state={})
    learned_out.pow(2).sum().backward()
    # a longer input than init_size: the table is rebuilt to padding_idx + 1 + seq_len rows
    long_tokens = torch.full((1, 10), 3, dtype=torch.long)
    long_out = sin(long_tokens)
    # the ONNX-export branches: index_select with a 0-dim index, repeat by a 0-dim size, and the
    # shape rebuilt with torch.onnx.operators.reshape_from_tensor_shape; an export traces on the
    # CPU (the CPU shape tensor meets a ``torch.tensor([-1])`` made on the default device)
    sin.prepare_for_onnx_export_()
    with torch.device("cpu"):
        sin_cpu, tokens_cpu = sin.cpu(), tokens.cpu()
        onnx_out = sin_cpu(tokens_cpu)
        onnx_inc = sin_cpu(tokens_cpu[:, :3], incremental_state={})
    return SimpleNamespace(pos=pos, sin=sin, sin_table=sin_table, sin_out=sin_out, sin_inc=sin_inc, learned=learned,
                           learned_out=learned_out, learned_inc=learned_inc, long_out=long_out,
                           onnx_out=onnx_out, onnx_inc=onnx_inc)


def test_fairseq_positions():
    r = _positions_run(lucid)
    assert r.pos.dtype == lucid.int64
    assert r.pos.tolist() == _positions_loop(TOKENS, PAD)
    assert r.pos.tolist()[2] == [1, 1, 2, 3, 4]  # left padding starts counting at the first token
    table = _sinusoid_np(6 + PAD + 1, 7, PAD)
    assert r.sin_table.shape == (8, 7)
    np.testing.assert_allclose(_np(r.sin_table), table, atol=1e-6)
    assert tuple(r.sin_out.shape) == (3, 5, 7) and r.sin_out.dtype == lucid.float32
    want = table[np.array(_positions_loop(TOKENS, PAD))]
    np.testing.assert_allclose(_np(r.sin_out), want, atol=1e-6)
    assert np.all(_np(r.sin_out)[1, 3:] == 0) and np.all(_np(r.sin_out)[2, :2] == 0)  # pads embed to 0
    np.testing.assert_allclose(_np(r.sin_inc), np.broadcast_to(table[PAD + 3], (3, 1, 7)), atol=1e-6)
    assert tuple(r.long_out.shape) == (1, 10, 7) and r.sin.weights.shape == (12, 7)
    np.testing.assert_allclose(_np(r.long_out)[0], _sinusoid_np(12, 7, PAD)[2:12], atol=1e-5)
    np.testing.assert_allclose(_np(r.onnx_out), want, atol=1e-6)
    np.testing.assert_allclose(_np(r.onnx_inc), np.broadcast_to(table[PAD + 3], (3, 1, 7)), atol=1e-6)
    w = _np(r.learned.weight)
    assert w.shape == (8, 4) and np.all(w[PAD] == 0) and 0.2 < w[2:].std() < 0.9  # std 4 ** -0.5
    np.testing.assert_array_equal(_np(r.learned_out), w[np.array(_positions_loop(TOKENS, PAD))])
    np.testing.assert_array_equal(_np(r.learned_inc), w[PAD + 3][None, None, :])
    # d/dW of sum(E[pos]^2) is 2 W[p] times the count of p, and zero on the padding row
    counts = np.bincount(np.array(_positions_loop(TOKENS, PAD)).ravel(), minlength=8).astype(float)
    counts[PAD] = 0
    np.testing.assert_allclose(_np(r.learned.weight.grad), 2 * w * counts[:, None], rtol=1e-6)


def test_fairseq_positions_torch_parity():
    torch = pytest.importorskip("torch")
    import torch.onnx.operators  # noqa: F401

    a, b = _positions_run(lucid), _positions_run(torch)
    assert a.pos.tolist() == b.pos.tolist()
    for name in ("sin_out", "sin_inc", "long_out", "onnx_out", "onnx_inc"):
        np.testing.assert_allclose(_np(getattr(a, name)), getattr(b, name).numpy(), atol=1e-6)
    # same weights: copy PyTorch's learned table into Lucid's, compare outputs and gradients
    a.learned.weight.data.copy_(lucid.tensor(b.learned.weight.detach().numpy()))
    a.learned.weight.grad = None
    out = a.learned(lucid.tensor(TOKENS))
    out.pow(2).sum().backward()
    np.testing.assert_allclose(_np(out), b.learned_out.detach().numpy(), rtol=1e-6)
    np.testing.assert_allclose(_np(a.learned.weight.grad), b.learned.weight.grad.numpy(), rtol=1e-6)


# --------------------------------------------------------------------------- multihead attention

def mha_page(torch):
    nn = torch.nn
    F = torch.nn.functional
    Tensor = torch.Tensor
    Parameter = torch.nn.Parameter
    from typing import Dict, Optional, Tuple

    def softmax(x, dim: int, onnx_trace: bool = False):  # fairseq/utils.py
        if onnx_trace:
            return F.softmax(x.float(), dim=dim)
        else:
            return F.softmax(x, dim=dim, dtype=torch.float32)

    utils = SimpleNamespace(softmax=softmax)

    class FairseqDropout(nn.Module):  # fairseq/modules/fairseq_dropout.py, without its inference option
        def __init__(self, p, module_name=None):
            super().__init__()
            self.p = p
            self.module_name = module_name
            self.apply_during_inference = False

        def forward(self, x, inplace: bool = False):
            if self.p > 0 and (self.training or self.apply_during_inference):
                return F.dropout(x, p=self.p, training=True, inplace=inplace)
            else:
                return x

    def quant_noise(module, p, block_size):  # fairseq/modules/quant_noise.py at p=0
        # if no quantization noise, don't register hook
        if p <= 0:
            return module
        raise NotImplementedError("quant_noise with p > 0 is not ported")

    class FairseqIncrementalState(object):
        # fairseq/incremental_decoding_utils.py, reduced to what MultiheadAttention uses: a
        # per-instance id and the two lookups of its entries in the shared incremental_state dict
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            self.init_incremental_state()

        def init_incremental_state(self):
            self._incremental_state_id = str(uuid.uuid4())

        def _get_full_incremental_state_key(self, key: str) -> str:
            return "{}.{}".format(self._incremental_state_id, key)

        def get_incremental_state(
            self,
            incremental_state: Optional[Dict[str, Dict[str, Optional[Tensor]]]],
            key: str,
        ) -> Optional[Dict[str, Optional[Tensor]]]:
            """Helper for getting incremental state for an nn.Module."""
            full_key = self._get_full_incremental_state_key(key)
            if incremental_state is None or full_key not in incremental_state:
                return None
            return incremental_state[full_key]

        def set_incremental_state(
            self,
            incremental_state: Optional[Dict[str, Dict[str, Optional[Tensor]]]],
            key: str,
            value: Dict[str, Optional[Tensor]],
        ) -> Optional[Dict[str, Dict[str, Optional[Tensor]]]]:
            """Helper for setting incremental state for an nn.Module."""
            if incremental_state is not None:
                full_key = self._get_full_incremental_state_key(key)
                incremental_state[full_key] = value
            return incremental_state

    def with_incremental_state(cls):
        cls.__bases__ = (FairseqIncrementalState,) + tuple(
            b for b in cls.__bases__ if b != FairseqIncrementalState
        )
        return cls

    @with_incremental_state
    class MultiheadAttention(nn.Module):
        """Multi-headed attention.

        See "Attention Is All You Need" for more details.
        """

        def __init__(
            self,
            embed_dim,
            num_heads,
            kdim=None,
            vdim=None,
            dropout=0.0,
            bias=True,
            add_bias_kv=False,
            add_zero_attn=False,
            self_attention=False,
            encoder_decoder_attention=False,
            q_noise=0.0,
            qn_block_size=8,
        ):
            super().__init__()
            self.embed_dim = embed_dim
            self.kdim = kdim if kdim is not None else embed_dim
            self.vdim = vdim if vdim is not None else embed_dim
            self.qkv_same_dim = self.kdim == embed_dim and self.vdim == embed_dim

            self.num_heads = num_heads
            self.dropout_module = FairseqDropout(
                dropout, module_name=self.__class__.__name__
            )

            self.head_dim = embed_dim // num_heads
            assert (
                self.head_dim * num_heads == self.embed_dim
            ), "embed_dim must be divisible by num_heads"
            self.scaling = self.head_dim ** -0.5

            self.self_attention = self_attention
            self.encoder_decoder_attention = encoder_decoder_attention

            assert not self.self_attention or self.qkv_same_dim, (
                "Self-attention requires query, key and " "value to be of the same size"
            )

            self.k_proj = quant_noise(
                nn.Linear(self.kdim, embed_dim, bias=bias), q_noise, qn_block_size
            )
            self.v_proj = quant_noise(
                nn.Linear(self.vdim, embed_dim, bias=bias), q_noise, qn_block_size
            )
            self.q_proj = quant_noise(
                nn.Linear(embed_dim, embed_dim, bias=bias), q_noise, qn_block_size
            )

            self.out_proj = quant_noise(
                nn.Linear(embed_dim, embed_dim, bias=bias), q_noise, qn_block_size
            )

            if add_bias_kv:
                self.bias_k = Parameter(torch.Tensor(1, 1, embed_dim))
                self.bias_v = Parameter(torch.Tensor(1, 1, embed_dim))
            else:
                self.bias_k = self.bias_v = None

            self.add_zero_attn = add_zero_attn

            self.reset_parameters()

            self.onnx_trace = False
            self.tpu = False

        def prepare_for_onnx_export_(self):
            self.onnx_trace = True

        def prepare_for_tpu_(self, **kwargs):
            self.tpu = True

        def reset_parameters(self):
            if self.qkv_same_dim:
                # Empirically observed the convergence to be much better with
                # the scaled initialization
                nn.init.xavier_uniform_(self.k_proj.weight, gain=1 / math.sqrt(2))
                nn.init.xavier_uniform_(self.v_proj.weight, gain=1 / math.sqrt(2))
                nn.init.xavier_uniform_(self.q_proj.weight, gain=1 / math.sqrt(2))
            else:
                nn.init.xavier_uniform_(self.k_proj.weight)
                nn.init.xavier_uniform_(self.v_proj.weight)
                nn.init.xavier_uniform_(self.q_proj.weight)

            nn.init.xavier_uniform_(self.out_proj.weight)
            if self.out_proj.bias is not None:
                nn.init.constant_(self.out_proj.bias, 0.0)
            if self.bias_k is not None:
                nn.init.xavier_normal_(self.bias_k)
            if self.bias_v is not None:
                nn.init.xavier_normal_(self.bias_v)

        def forward(
            self,
            query,
            key: Optional[Tensor],
            value: Optional[Tensor],
            key_padding_mask: Optional[Tensor] = None,
            incremental_state: Optional[Dict[str, Dict[str, Optional[Tensor]]]] = None,
            need_weights: bool = True,
            static_kv: bool = False,
            attn_mask: Optional[Tensor] = None,
            before_softmax: bool = False,
            need_head_weights: bool = False,
        ) -> Tuple[Tensor, Optional[Tensor]]:
            """Input shape: Time x Batch x Channel"""
            if need_head_weights:
                need_weights = True

            tgt_len, bsz, embed_dim = query.size()
            assert embed_dim == self.embed_dim
            assert list(query.size()) == [tgt_len, bsz, embed_dim]

            if (
                not self.onnx_trace
                and not self.tpu  # don't use PyTorch version on TPUs
                and incremental_state is None
                and not static_kv
                # A workaround for quantization to work. Otherwise JIT compilation
                # treats bias in linear module as method.
                and not torch.jit.is_scripting()
            ):
                assert key is not None and value is not None
                return F.multi_head_attention_forward(
                    query,
                    key,
                    value,
                    self.embed_dim,
                    self.num_heads,
                    torch.empty([0]),
                    torch.cat((self.q_proj.bias, self.k_proj.bias, self.v_proj.bias)),
                    self.bias_k,
                    self.bias_v,
                    self.add_zero_attn,
                    self.dropout_module.p,
                    self.out_proj.weight,
                    self.out_proj.bias,
                    self.training or self.dropout_module.apply_during_inference,
                    key_padding_mask,
                    need_weights,
                    attn_mask,
                    use_separate_proj_weight=True,
                    q_proj_weight=self.q_proj.weight,
                    k_proj_weight=self.k_proj.weight,
                    v_proj_weight=self.v_proj.weight,
                )

            if incremental_state is not None:
                saved_state = self._get_input_buffer(incremental_state)
                if saved_state is not None and "prev_key" in saved_state:
                    # previous time steps are cached - no need to recompute
                    # key and value if they are static
                    if static_kv:
                        assert self.encoder_decoder_attention and not self.self_attention
                        key = value = None
            else:
                saved_state = None

            if self.self_attention:
                q = self.q_proj(query)
                k = self.k_proj(query)
                v = self.v_proj(query)
            elif self.encoder_decoder_attention:
                # encoder-decoder attention
                q = self.q_proj(query)
                if key is None:
                    assert value is None
                    k = v = None
                else:
                    k = self.k_proj(key)
                    v = self.v_proj(key)

            else:
                assert key is not None and value is not None
                q = self.q_proj(query)
                k = self.k_proj(key)
                v = self.v_proj(value)
            q *= self.scaling

            if self.bias_k is not None:
                assert self.bias_v is not None
                k = torch.cat([k, self.bias_k.repeat(1, bsz, 1)])
                v = torch.cat([v, self.bias_v.repeat(1, bsz, 1)])
                if attn_mask is not None:
                    attn_mask = torch.cat(
                        [attn_mask, attn_mask.new_zeros(attn_mask.size(0), 1)], dim=1
                    )
                if key_padding_mask is not None:
                    key_padding_mask = torch.cat(
                        [
                            key_padding_mask,
                            key_padding_mask.new_zeros(key_padding_mask.size(0), 1),
                        ],
                        dim=1,
                    )

            q = (
                q.contiguous()
                .view(tgt_len, bsz * self.num_heads, self.head_dim)
                .transpose(0, 1)
            )
            if k is not None:
                k = (
                    k.contiguous()
                    .view(-1, bsz * self.num_heads, self.head_dim)
                    .transpose(0, 1)
                )
            if v is not None:
                v = (
                    v.contiguous()
                    .view(-1, bsz * self.num_heads, self.head_dim)
                    .transpose(0, 1)
                )

            if saved_state is not None:
                # saved states are stored with shape (bsz, num_heads, seq_len, head_dim)
                if "prev_key" in saved_state:
                    _prev_key = saved_state["prev_key"]
                    assert _prev_key is not None
                    prev_key = _prev_key.view(bsz * self.num_heads, -1, self.head_dim)
                    if static_kv:
                        k = prev_key
                    else:
                        assert k is not None
                        k = torch.cat([prev_key, k], dim=1)
                if "prev_value" in saved_state:
                    _prev_value = saved_state["prev_value"]
                    assert _prev_value is not None
                    prev_value = _prev_value.view(bsz * self.num_heads, -1, self.head_dim)
                    if static_kv:
                        v = prev_value
                    else:
                        assert v is not None
                        v = torch.cat([prev_value, v], dim=1)
                prev_key_padding_mask: Optional[Tensor] = None
                if "prev_key_padding_mask" in saved_state:
                    prev_key_padding_mask = saved_state["prev_key_padding_mask"]
                assert k is not None and v is not None
                key_padding_mask = MultiheadAttention._append_prev_key_padding_mask(
                    key_padding_mask=key_padding_mask,
                    prev_key_padding_mask=prev_key_padding_mask,
                    batch_size=bsz,
                    src_len=k.size(1),
                    static_kv=static_kv,
                )

                saved_state["prev_key"] = k.view(bsz, self.num_heads, -1, self.head_dim)
                saved_state["prev_value"] = v.view(bsz, self.num_heads, -1, self.head_dim)
                saved_state["prev_key_padding_mask"] = key_padding_mask
                # In this branch incremental_state is never None
                assert incremental_state is not None
                incremental_state = self._set_input_buffer(incremental_state, saved_state)
            assert k is not None
            src_len = k.size(1)

            # This is part of a workaround to get around fork/join parallelism
            # not supporting Optional types.
            if key_padding_mask is not None and key_padding_mask.dim() == 0:
                key_padding_mask = None

            if key_padding_mask is not None:
                assert key_padding_mask.size(0) == bsz
                assert key_padding_mask.size(1) == src_len

            if self.add_zero_attn:
                assert v is not None
                src_len += 1
                k = torch.cat([k, k.new_zeros((k.size(0), 1) + k.size()[2:])], dim=1)
                v = torch.cat([v, v.new_zeros((v.size(0), 1) + v.size()[2:])], dim=1)
                if attn_mask is not None:
                    attn_mask = torch.cat(
                        [attn_mask, attn_mask.new_zeros(attn_mask.size(0), 1)], dim=1
                    )
                if key_padding_mask is not None:
                    key_padding_mask = torch.cat(
                        [
                            key_padding_mask,
                            torch.zeros(key_padding_mask.size(0), 1).type_as(
                                key_padding_mask
                            ),
                        ],
                        dim=1,
                    )

            attn_weights = torch.bmm(q, k.transpose(1, 2))
            attn_weights = self.apply_sparse_mask(attn_weights, tgt_len, src_len, bsz)

            assert list(attn_weights.size()) == [bsz * self.num_heads, tgt_len, src_len]

            if attn_mask is not None:
                attn_mask = attn_mask.unsqueeze(0)
                if self.onnx_trace:
                    attn_mask = attn_mask.repeat(attn_weights.size(0), 1, 1)
                attn_weights += attn_mask

            if key_padding_mask is not None:
                # don't attend to padding symbols
                attn_weights = attn_weights.view(bsz, self.num_heads, tgt_len, src_len)
                if not self.tpu:
                    attn_weights = attn_weights.masked_fill(
                        key_padding_mask.unsqueeze(1).unsqueeze(2).to(torch.bool),
                        float("-inf"),
                    )
                else:
                    attn_weights = attn_weights.transpose(0, 2)
                    attn_weights = attn_weights.masked_fill(key_padding_mask, float("-inf"))
                    attn_weights = attn_weights.transpose(0, 2)
                attn_weights = attn_weights.view(bsz * self.num_heads, tgt_len, src_len)

            if before_softmax:
                return attn_weights, v

            attn_weights_float = utils.softmax(
                attn_weights, dim=-1, onnx_trace=self.onnx_trace
            )
            attn_weights = attn_weights_float.type_as(attn_weights)
            attn_probs = self.dropout_module(attn_weights)

            assert v is not None
            attn = torch.bmm(attn_probs, v)
            assert list(attn.size()) == [bsz * self.num_heads, tgt_len, self.head_dim]
            if self.onnx_trace and attn.size(1) == 1:
                # when ONNX tracing a single decoder step (sequence length == 1)
                # the transpose is a no-op copy before view, thus unnecessary
                attn = attn.contiguous().view(tgt_len, bsz, embed_dim)
            else:
                attn = attn.transpose(0, 1).contiguous().view(tgt_len, bsz, embed_dim)
            attn = self.out_proj(attn)
            attn_weights: Optional[Tensor] = None
            if need_weights:
                attn_weights = attn_weights_float.view(
                    bsz, self.num_heads, tgt_len, src_len
                ).transpose(1, 0)
                if not need_head_weights:
                    # average attention weights over heads
                    attn_weights = attn_weights.mean(dim=0)

            return attn, attn_weights

        @staticmethod
        def _append_prev_key_padding_mask(
            key_padding_mask: Optional[Tensor],
            prev_key_padding_mask: Optional[Tensor],
            batch_size: int,
            src_len: int,
            static_kv: bool,
        ) -> Optional[Tensor]:
            # saved key padding masks have shape (bsz, seq_len)
            if prev_key_padding_mask is not None and static_kv:
                new_key_padding_mask = prev_key_padding_mask
            elif prev_key_padding_mask is not None and key_padding_mask is not None:
                new_key_padding_mask = torch.cat(
                    [prev_key_padding_mask.float(), key_padding_mask.float()], dim=1
                )
            # During incremental decoding, as the padding token enters and
            # leaves the frame, there will be a time when prev or current
            # is None
            elif prev_key_padding_mask is not None:
                filler = torch.zeros(
                    (batch_size, src_len - prev_key_padding_mask.size(1)),
                    device=prev_key_padding_mask.device,
                )
                new_key_padding_mask = torch.cat(
                    [prev_key_padding_mask.float(), filler.float()], dim=1
                )
            elif key_padding_mask is not None:
                filler = torch.zeros(
                    (batch_size, src_len - key_padding_mask.size(1)),
                    device=key_padding_mask.device,
                )
                new_key_padding_mask = torch.cat(
                    [filler.float(), key_padding_mask.float()], dim=1
                )
            else:
                new_key_padding_mask = prev_key_padding_mask
            return new_key_padding_mask

        def reorder_incremental_state(
            self,
            incremental_state: Dict[str, Dict[str, Optional[Tensor]]],
            new_order: Tensor,
        ):
            """Reorder buffered internal state (for incremental generation)."""
            input_buffer = self._get_input_buffer(incremental_state)
            if input_buffer is not None:
                for k in input_buffer.keys():
                    input_buffer_k = input_buffer[k]
                    if input_buffer_k is not None:
                        if self.encoder_decoder_attention and input_buffer_k.size(
                            0
                        ) == new_order.size(0):
                            break
                        input_buffer[k] = input_buffer_k.index_select(0, new_order)
                incremental_state = self._set_input_buffer(incremental_state, input_buffer)
            return incremental_state

        def _get_input_buffer(
            self, incremental_state: Optional[Dict[str, Dict[str, Optional[Tensor]]]]
        ) -> Dict[str, Optional[Tensor]]:
            result = self.get_incremental_state(incremental_state, "attn_state")
            if result is not None:
                return result
            else:
                empty_result: Dict[str, Optional[Tensor]] = {}
                return empty_result

        def _set_input_buffer(
            self,
            incremental_state: Dict[str, Dict[str, Optional[Tensor]]],
            buffer: Dict[str, Optional[Tensor]],
        ):
            return self.set_incremental_state(incremental_state, "attn_state", buffer)

        def apply_sparse_mask(self, attn_weights, tgt_len: int, src_len: int, bsz: int):
            return attn_weights

    def fill_with_neg_inf(t):  # fairseq/utils.py
        """FP16-compatible function that fills a tensor with -inf."""
        return t.float().fill_(float("-inf")).type_as(t)

    def buffered_future_mask(tensor):  # TransformerDecoder.buffered_future_mask, without the buffer
        dim = tensor.size(0)
        return torch.triu(fill_with_neg_inf(torch.zeros([dim, dim])), 1).to(tensor)

    return SimpleNamespace(MultiheadAttention=MultiheadAttention, buffered_future_mask=buffered_future_mask,
                           FairseqDropout=FairseqDropout, quant_noise=quant_noise)


def _np_mha(xq, xk, xv, P, H, kpm=None, attn_mask=None, add_zero_attn=False):
    """Softmax attention in NumPy (float64): fairseq's layout Time x Batch x Channel."""
    T, B, E = xq.shape
    d = E // H
    q = xq @ P["q_proj.weight"].T + P["q_proj.bias"]
    k = xk @ P["k_proj.weight"].T + P["k_proj.bias"]
    v = xv @ P["v_proj.weight"].T + P["v_proj.bias"]
    kpm = np.zeros((B, k.shape[0]), bool) if kpm is None else np.asarray(kpm, bool)
    am = np.zeros((T, k.shape[0])) if attn_mask is None else np.asarray(attn_mask, float)
    if "bias_k" in P:
        k = np.concatenate([k, np.broadcast_to(P["bias_k"], (1, B, E))])
        v = np.concatenate([v, np.broadcast_to(P["bias_v"], (1, B, E))])
        kpm = np.concatenate([kpm, np.zeros((B, 1), bool)], 1)
        am = np.concatenate([am, np.zeros((T, 1))], 1)
    heads = lambda a: a.reshape(a.shape[0], B, H, d).transpose(1, 2, 0, 3)  # (B, H, len, d)
    q, k, v = heads(q) * d ** -0.5, heads(k), heads(v)
    if add_zero_attn:
        k = np.concatenate([k, np.zeros((B, H, 1, d))], 2)
        v = np.concatenate([v, np.zeros((B, H, 1, d))], 2)
        kpm = np.concatenate([kpm, np.zeros((B, 1), bool)], 1)
        am = np.concatenate([am, np.zeros((T, 1))], 1)
    s = q @ k.transpose(0, 1, 3, 2) + am
    s = np.where(kpm[:, None, None, :], -np.inf, s)
    p = np.exp(s - s.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    o = (p @ v).transpose(2, 0, 1, 3).reshape(T, B, E)
    return o @ P["out_proj.weight"].T + P["out_proj.bias"], p.mean(1)


T_, S_, B_, E_, H_ = 3, 4, 2, 8, 2
KPM = [[False, False, False, False], [False, False, True, True]]
ORDER = [2, 0, 0]  # a beam reorder: hypothesis 0 continues twice, 2 moves first


def _mha_data():
    rs = np.random.RandomState(0)
    return SimpleNamespace(q=rs.randn(T_, B_, E_), k=rs.randn(S_, B_, E_), am=rs.randn(T_, S_),
                           x=rs.randn(4, 3, E_), r=rs.randn(T_, B_, E_))


def _mha_run(torch, states=None):
    p = mha_page(torch)
    D = _mha_data()
    t = lambda a, dt=torch.float32: torch.tensor(np.asarray(a), dtype=dt)
    torch.manual_seed(0)
    cross = p.MultiheadAttention(E_, H_)
    kv = p.MultiheadAttention(E_, H_, add_bias_kv=True, add_zero_attn=True)
    selfa = p.MultiheadAttention(E_, H_, self_attention=True)
    mods = dict(cross=cross, kv=kv, selfa=selfa)
    if states is not None:  # the same weights as the other library's run
        for name, m in mods.items():
            m.load_state_dict({k: torch.tensor(v) for k, v in states[name].items()})
    out = {}
    q, k, kpm, am = t(D.q), t(D.k), torch.tensor(KPM), t(D.am)
    # the F.multi_head_attention_forward path: key_padding_mask and an additive float attn_mask
    o, w = cross(q, k, k, key_padding_mask=kpm, attn_mask=am)
    out["cross"], out["cross_w"] = o, w
    (o * t(D.r)).sum().backward()
    out["cross_gq"], out["cross_gb"] = cross.q_proj.weight.grad, cross.k_proj.bias.grad
    # bias_kv and zero attention, on both paths (an empty incremental_state takes fairseq's own bmm path)
    o, w = kv(q, k, k, key_padding_mask=kpm)
    out["kv"], out["kv_w"] = o, w
    (o * t(D.r)).sum().backward()
    out["kv_gbk"] = kv.bias_k.grad
    kv.zero_grad()
    o2, w2 = kv(q, k, k, key_padding_mask=kpm, incremental_state={})
    out["kv_manual"], out["kv_manual_w"] = o2, w2
    (o2 * t(D.r)).sum().backward()
    out["kv_manual_gbk"] = kv.bias_k.grad
    # causal self-attention: full decoding, then one step at a time through incremental_state
    x = t(D.x)
    full, full_w = selfa(x, x, x, attn_mask=p.buffered_future_mask(x))
    out["full"], out["full_w"] = full, full_w
    state, steps = {}, []
    for i in range(2):
        steps.append(selfa(x[i:i + 1], x[i:i + 1], x[i:i + 1], incremental_state=state)[0])
    new_order = torch.tensor(ORDER)
    selfa.reorder_incremental_state(state, new_order)
    xr = x.index_select(1, new_order)
    for i in range(2, 4):
        steps.append(selfa(xr[i:i + 1], xr[i:i + 1], xr[i:i + 1], incremental_state=state)[0])
    out["steps"] = steps
    buf = selfa._get_input_buffer(state)
    out["prev_key_shape"] = tuple(buf["prev_key"].shape)
    out["full_reordered"] = selfa(xr, xr, xr, attn_mask=p.buffered_future_mask(xr))[0]
    out = {k: (_np(v) if hasattr(v, "detach") else ([_np(s) for s in v] if isinstance(v, list) else v))
           for k, v in out.items()}
    out["states"] = {name: {k: _np(v) for k, v in m.state_dict().items()} for name, m in mods.items()}
    out["p"], out["mods"], out["t"] = p, mods, t
    return out


def test_fairseq_multihead_attention():
    r = _mha_run(lucid)
    D, S = _mha_data(), r["states"]
    f = lambda a: np.asarray(a, np.float32).astype(np.float64)  # the float32 inputs Lucid saw
    o, w = _np_mha(f(D.q), f(D.k), f(D.k), S["cross"], H_, kpm=KPM, attn_mask=f(D.am))
    np.testing.assert_allclose(r["cross"], o, atol=2e-5)
    np.testing.assert_allclose(r["cross_w"], w, atol=2e-6)
    assert r["cross_w"].shape == (B_, T_, S_) and np.all(r["cross_w"][1, :, 2:] == 0)
    o, w = _np_mha(f(D.q), f(D.k), f(D.k), S["kv"], H_, kpm=KPM, add_zero_attn=True)
    for name in ("kv", "kv_manual"):
        np.testing.assert_allclose(r[name], o, atol=2e-5)
        np.testing.assert_allclose(r[name + "_w"], w, atol=2e-6)
    assert r["kv_w"].shape == (B_, T_, S_ + 2)
    # the two paths give the same gradient for bias_k
    np.testing.assert_allclose(r["kv_manual_gbk"], r["kv_gbk"], atol=1e-5)
    assert np.abs(r["kv_gbk"]).max() > 1e-3
    # causal full decoding against NumPy, and step-by-step decoding against full decoding
    x = f(D.x)
    causal = np.triu(np.full((4, 4), -np.inf), 1)
    o, w = _np_mha(x, x, x, S["selfa"], H_, attn_mask=causal)
    np.testing.assert_allclose(r["full"], o, atol=2e-5)
    np.testing.assert_allclose(r["full_w"], w, atol=2e-6)
    assert np.all(np.triu(r["full_w"][0], 1) == 0)
    for i in range(2):
        np.testing.assert_allclose(r["steps"][i], r["full"][i:i + 1], atol=2e-5)
    o_r = _np_mha(x[:, ORDER], x[:, ORDER], x[:, ORDER], S["selfa"], H_, attn_mask=causal)[0]
    np.testing.assert_allclose(r["full_reordered"], o_r, atol=2e-5)
    for i in range(2, 4):  # after reorder_incremental_state the cache follows the beams
        np.testing.assert_allclose(r["steps"][i], o_r[i:i + 1], atol=2e-5)
    assert r["prev_key_shape"] == (3, H_, 4, E_ // H_)


def test_fairseq_multihead_attention_float64_gradients():
    p, t = mha_page(lucid), lambda a: lucid.tensor(np.asarray(a), dtype=lucid.float64)
    D = _mha_data()
    lucid.manual_seed(1)
    m = p.MultiheadAttention(E_, H_, add_bias_kv=True).double()
    q, k, kpm, am, R = t(D.q), t(D.k), lucid.tensor(KPM), t(D.am), t(D.r)

    def loss():
        return (m(q, k, k, key_padding_mask=kpm, attn_mask=am)[0] * R).sum()

    loss().backward()
    for param, idx in ((m.q_proj.weight, (0, 1)), (m.k_proj.weight, (3, 5)), (m.v_proj.bias, (2,)),
                       (m.bias_k, (0, 0, 4)), (m.out_proj.weight, (6, 7))):
        h, g = 1e-6, float(param.grad[idx])
        with lucid.no_grad():
            old = float(param[idx])
            param[idx] = old + h
            up = float(loss())
            param[idx] = old - h
            down = float(loss())
            param[idx] = old
        assert abs(g) > 1e-4
        assert abs((up - down) / (2 * h) - g) < 1e-7 * max(1.0, abs(g))


def test_fairseq_multihead_attention_torch_parity():
    torch = pytest.importorskip("torch")
    a = _mha_run(lucid)
    b = _mha_run(torch, states=a["states"])
    for key in ("cross", "cross_w", "cross_gq", "cross_gb", "kv", "kv_w", "kv_gbk", "kv_manual",
                "kv_manual_w", "kv_manual_gbk", "full", "full_w", "full_reordered"):
        np.testing.assert_allclose(a[key], b[key], atol=1e-5, err_msg=key)
    for sa, sb in zip(a["steps"], b["steps"]):
        np.testing.assert_allclose(sa, sb, atol=1e-5)
    assert a["prev_key_shape"] == b["prev_key_shape"]


# --------------------------------------------------------------------------- label-smoothed loss, beam step

def criterion_search_page(torch):
    nn = torch.nn
    Tensor = torch.Tensor
    from typing import Optional

    def label_smoothed_nll_loss(lprobs, target, epsilon, ignore_index=None, reduce=True):
        if target.dim() == lprobs.dim() - 1:
            target = target.unsqueeze(-1)
        nll_loss = -lprobs.gather(dim=-1, index=target)
        smooth_loss = -lprobs.sum(dim=-1, keepdim=True)
        if ignore_index is not None:
            pad_mask = target.eq(ignore_index)
            nll_loss.masked_fill_(pad_mask, 0.0)
            smooth_loss.masked_fill_(pad_mask, 0.0)
        else:
            nll_loss = nll_loss.squeeze(-1)
            smooth_loss = smooth_loss.squeeze(-1)
        if reduce:
            nll_loss = nll_loss.sum()
            smooth_loss = smooth_loss.sum()
        eps_i = epsilon / lprobs.size(-1)
        loss = (1.0 - epsilon) * nll_loss + eps_i * smooth_loss
        return loss, nll_loss

    class Search(nn.Module):
        def __init__(self, tgt_dict):
            super().__init__()
            self.pad = tgt_dict.pad()
            self.unk = tgt_dict.unk()
            self.eos = tgt_dict.eos()
            self.vocab_size = len(tgt_dict)
            self.src_lengths = torch.tensor(-1)
            self.supports_constraints = False
            self.stop_on_max_len = False

    class BeamSearch(Search):
        def __init__(self, tgt_dict):
            super().__init__(tgt_dict)
            self.constraint_states = None

        def step(
            self,
            step: int,
            lprobs,
            scores: Optional[Tensor],
            prev_output_tokens: Optional[Tensor] = None,
            original_batch_idxs: Optional[Tensor] = None,
        ):
            bsz, beam_size, vocab_size = lprobs.size()

            if step == 0:
                # at the first step all hypotheses are equally likely, so use
                # only the first beam
                lprobs = lprobs[:, ::beam_size, :].contiguous()
            else:
                # make probs contain cumulative scores for each hypothesis
                assert scores is not None
                lprobs = lprobs + scores[:, :, step - 1].unsqueeze(-1)

            top_prediction = torch.topk(
                lprobs.view(bsz, -1),
                k=min(
                    # Take the best 2 x beam_size predictions. We'll choose the first
                    # beam_size of these which don't predict eos to continue with.
                    beam_size * 2,
                    lprobs.view(bsz, -1).size(1) - 1,  # -1 so we never select pad
                ),
            )
            scores_buf = top_prediction[0]
            indices_buf = top_prediction[1]
            # Project back into relative indices and beams
            beams_buf = torch.div(indices_buf, vocab_size, rounding_mode='trunc')
            indices_buf = indices_buf.fmod(vocab_size)

            # At this point, beams_buf and indices_buf are single-dim and contain relative indices
            return scores_buf, indices_buf, beams_buf

    return SimpleNamespace(label_smoothed_nll_loss=label_smoothed_nll_loss, BeamSearch=BeamSearch)


class _Dict:  # the four methods of fairseq.data.Dictionary that Search reads
    def __init__(self, n):
        self.n = n

    def pad(self):
        return 1

    def unk(self):
        return 3

    def eos(self):
        return 2

    def __len__(self):
        return self.n


V_, EPS = 6, 0.1


def _crit_data():
    rs = np.random.RandomState(3)
    logits = rs.randn(5, V_)
    target = np.array([0, 4, 1, 5, 1])  # 1 is the pad index
    beam_lp = rs.randn(2, 3, V_)  # bsz 2, beam 3: distinct values, no ties
    beam_scores = rs.randn(2, 3, 2)
    return logits, target, beam_lp, beam_scores


def _crit_run(torch):
    p = criterion_search_page(torch)
    logits, target, beam_lp, beam_scores = _crit_data()
    x = torch.tensor(logits, requires_grad=True)
    lprobs = torch.log_softmax(x, dim=-1)
    out = {}
    loss, nll = p.label_smoothed_nll_loss(lprobs, torch.tensor(target), EPS, ignore_index=1)
    loss.backward()
    out["loss"], out["nll"], out["grad"] = loss, nll, x.grad
    l2, n2 = p.label_smoothed_nll_loss(lprobs.detach(), torch.tensor(target), EPS, reduce=False)
    out["loss_rows"], out["nll_rows"] = l2, n2
    search = p.BeamSearch(_Dict(V_))
    lp = torch.tensor(beam_lp, dtype=torch.float32)
    sc = torch.tensor(beam_scores, dtype=torch.float32)
    for step in (0, 2):
        s, i, b = search.step(step, lp, sc)
        out[f"s{step}"], out[f"i{step}"], out[f"b{step}"] = s, i, b
    return {k: _np(v) for k, v in out.items()}


def test_fairseq_label_smoothed_loss_and_beam_step():
    r = _crit_run(lucid)
    logits, target, beam_lp, beam_scores = _crit_data()
    lp = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    keep = target != 1
    nll_rows = -lp[np.arange(5), target]
    smooth_rows = -lp.sum(-1)
    want_rows = (1 - EPS) * nll_rows + EPS / V_ * smooth_rows
    np.testing.assert_allclose(r["nll"], nll_rows[keep].sum(), rtol=1e-12)
    np.testing.assert_allclose(r["loss"], want_rows[keep].sum(), rtol=1e-12)
    assert r["loss_rows"].shape == (5,) and r["nll_rows"].shape == (5,)  # no ignore_index: squeezed
    np.testing.assert_allclose(r["loss_rows"], want_rows, rtol=1e-12)
    # d loss / d logits = (softmax - (1 - eps) onehot - eps / V) on kept rows (the smoothing sums to 1)
    onehot = np.eye(V_)[target]
    grad = (np.exp(lp) - (1 - EPS) * onehot - EPS / V_) * keep[:, None]
    np.testing.assert_allclose(r["grad"], grad, atol=1e-12)
    # beam step 0: only beam 0, top min(2 * beam, V - 1) of the vocabulary
    f = beam_lp.astype(np.float32)
    assert r["i0"].shape == (2, V_ - 1)
    for bi in range(2):
        order = np.argsort(-f[bi, 0])[:V_ - 1]
        np.testing.assert_array_equal(r["i0"][bi], order)
        np.testing.assert_array_equal(r["b0"][bi], np.zeros(V_ - 1))
        np.testing.assert_allclose(r["s0"][bi], f[bi, 0, order])
    # step 2: cumulative scores (scores[:, :, 1]) over all beams, flattened then split
    cum = (f + beam_scores.astype(np.float32)[:, :, 1:2]).reshape(2, -1)
    for bi in range(2):
        order = np.argsort(-cum[bi])[:6]
        np.testing.assert_array_equal(r["b2"][bi], order // V_)
        np.testing.assert_array_equal(r["i2"][bi], order % V_)
        np.testing.assert_allclose(r["s2"][bi], cum[bi, order], rtol=1e-6)
    assert r["b2"].dtype == np.int64 and len(set(r["b2"].ravel().tolist())) > 1


def test_fairseq_label_smoothed_loss_and_beam_step_torch_parity():
    torch = pytest.importorskip("torch")
    a, b = _crit_run(lucid), _crit_run(torch)
    for key in a:
        assert a[key].dtype == b[key].dtype, key
        np.testing.assert_allclose(a[key], b[key], rtol=1e-6, atol=1e-12, err_msg=key)


# --------------------------------------------------------------------------- checkpoint loading

def checkpoint_page(torch):
    # the module's ``from torch.serialization import default_restore_location``
    default_restore_location = torch.serialization.default_restore_location

    PathManager = SimpleNamespace(open=open)  # fairseq/file_io.py's PathManager on a local file

    def _upgrade_state_dict(state):  # fairseq's upgrades of pre-2019 checkpoints: none apply here
        return state

    def load_checkpoint_to_cpu(path, arg_overrides=None):
        """Loads a checkpoint to CPU (with upgrading for backward compatibility)."""
        with PathManager.open(path, "rb") as f:
            state = torch.load(
                f, map_location=lambda s, l: default_restore_location(s, "cpu")
            )

        args = state["args"]
        if arg_overrides is not None:
            for arg_name, arg_val in arg_overrides.items():
                setattr(args, arg_name, arg_val)
        state = _upgrade_state_dict(state)
        return state

    return SimpleNamespace(load_checkpoint_to_cpu=load_checkpoint_to_cpu)


def _fairseq_state(torch, args):
    # the keys of fairseq's checkpoint_utils.save_state, with a tiny model and optimizer state
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Embedding(5, 4, padding_idx=1), torch.nn.Linear(4, 3))
    opt = torch.optim.Adam(model.parameters(), lr=0.25)
    model(torch.tensor([[0, 2, 1]])).sum().backward()
    opt.step()
    return model, {
        "args": args,
        "model": model.state_dict(),
        "optimizer_history": [{"criterion_name": "LabelSmoothedCrossEntropyCriterion",
                               "optimizer_name": "Adam", "lr_scheduler_state": {"best": 1.5},
                               "num_updates": 1}],
        "last_optimizer_state": opt.state_dict(),
        "extra_state": {"epoch": 2, "train_iterator": {"epoch": 2, "iterations_in_epoch": 7}},
    }


def _check_loaded(state, model, args_want):
    assert state["args"] == args_want
    assert list(state["model"]) == ["0.weight", "1.weight", "1.bias"] == list(model.state_dict())
    for k, v in model.state_dict().items():
        got = state["model"][k]
        assert got.device.type == "cpu" and tuple(got.shape) == tuple(v.shape)
        assert str(got.dtype).split(".")[-1] == str(v.dtype).split(".")[-1]
        np.testing.assert_array_equal(_np(got), _np(v))
    assert state["optimizer_history"][-1]["num_updates"] == 1
    assert state["optimizer_history"][-1]["lr_scheduler_state"] == {"best": 1.5}
    assert state["extra_state"]["train_iterator"] == {"epoch": 2, "iterations_in_epoch": 7}
    opt = state["last_optimizer_state"]
    assert opt["param_groups"][0]["lr"] == 0.25 and sorted(opt["state"]) == [0, 1, 2]
    assert int(opt["state"][2]["step"]) == 1
    emb = _np(state["model"]["0.weight"])
    assert emb.shape == (5, 4) and np.all(emb[1] == 0)  # the padding row stays 0 after the step


def test_fairseq_load_checkpoint_to_cpu(tmp_path):
    import argparse

    p = checkpoint_page(lucid)
    args = argparse.Namespace(arch="transformer_iwslt_de_en", lr=[0.25], max_tokens=4096)
    model, state = _fairseq_state(lucid, args)
    lucid.save(state, str(tmp_path / "checkpoint_last.pt"))
    # an argparse.Namespace is not a weights-only global: allowlisted, as under PyTorch >= 2.6
    with pytest.raises(Exception, match="Namespace"):
        p.load_checkpoint_to_cpu(str(tmp_path / "checkpoint_last.pt"))
    with lucid.serialization.safe_globals([argparse.Namespace]):
        loaded = p.load_checkpoint_to_cpu(str(tmp_path / "checkpoint_last.pt"), arg_overrides={"max_tokens": 512})
    _check_loaded(loaded, model, argparse.Namespace(arch="transformer_iwslt_de_en", lr=[0.25], max_tokens=512))
    # a file for PyTorch holds weights-only objects only: newer fairseq checkpoints have args None
    state["args"] = None
    lucid.serialization.save_for_torch(state, str(tmp_path / "checkpoint_torch.pt"))
    _check_loaded(p.load_checkpoint_to_cpu(str(tmp_path / "checkpoint_torch.pt")), model, None)


def test_fairseq_load_checkpoint_to_cpu_torch_parity(tmp_path):
    torch = pytest.importorskip("torch")
    import argparse

    model, state = _fairseq_state(lucid, None)
    lucid.serialization.save_for_torch(state, str(tmp_path / "from_lucid.pt"))
    loaded = checkpoint_page(torch).load_checkpoint_to_cpu(str(tmp_path / "from_lucid.pt"))
    _check_loaded(loaded, model, None)
    # and a checkpoint PyTorch wrote, with its Namespace args, read by Lucid with the same idiom
    args = argparse.Namespace(arch="lstm", lr=[0.25])
    tmodel, tstate = _fairseq_state(torch, args)
    torch.save(tstate, str(tmp_path / "from_torch.pt"))
    with lucid.serialization.safe_globals([argparse.Namespace]):
        loaded = checkpoint_page(lucid).load_checkpoint_to_cpu(str(tmp_path / "from_torch.pt"))
    for k, v in tmodel.state_dict().items():
        np.testing.assert_array_equal(_np(loaded["model"][k]), v.numpy())
        assert isinstance(loaded["model"][k], lucid.Tensor)
    assert loaded["args"] == args and int(loaded["last_optimizer_state"]["state"][2]["step"]) == 1


# --------------------------------------------------------------------------- transformer layers

def transformer_layer_page(torch):
    nn = torch.nn
    F = torch.nn.functional
    Tensor = torch.Tensor
    from typing import Dict, List, Optional

    mha = mha_page(torch)
    MultiheadAttention = mha.MultiheadAttention
    FairseqDropout = mha.FairseqDropout
    quant_noise = mha.quant_noise

    def LayerNorm(normalized_shape, eps=1e-5, elementwise_affine=True, export=False):
        # fairseq/modules/layer_norm.py without apex's FusedLayerNorm
        return torch.nn.LayerNorm(normalized_shape, eps, elementwise_affine)

    def get_activation_fn(activation: str):  # fairseq/utils.py, its "relu" entry
        """Returns the activation function corresponding to `activation`"""
        if activation == "relu":
            return F.relu
        raise RuntimeError("--activation-fn {} not supported".format(activation))

    utils = SimpleNamespace(get_activation_fn=get_activation_fn,
                            safe_getattr=lambda obj, k, default=None: getattr(obj, k, default))

    class TransformerEncoderLayerBase(nn.Module):
        """Encoder layer block.

        In the original paper each operation (multi-head attention or FFN) is
        postprocessed with: `dropout -> add residual -> layernorm`. In the
        tensor2tensor code they suggest that learning is more robust when
        preprocessing each layer with layernorm and postprocessing with:
        `dropout -> add residual`. We default to the approach in the paper, but the
        tensor2tensor approach can be enabled by setting
        *cfg.encoder.normalize_before* to ``True``.
        """

        def __init__(self, cfg, return_fc=False):
            super().__init__()
            self.cfg = cfg
            self.return_fc = return_fc
            self.embed_dim = cfg.encoder.embed_dim
            self.quant_noise = cfg.quant_noise.pq
            self.quant_noise_block_size = cfg.quant_noise.pq_block_size
            self.self_attn = self.build_self_attention(self.embed_dim, cfg)
            self.self_attn_layer_norm = LayerNorm(self.embed_dim, export=cfg.export)
            self.dropout_module = FairseqDropout(
                cfg.dropout, module_name=self.__class__.__name__
            )
            self.activation_fn = utils.get_activation_fn(activation=cfg.activation_fn)
            activation_dropout_p = cfg.activation_dropout
            if activation_dropout_p == 0:
                # for backwards compatibility with models that use cfg.relu_dropout
                activation_dropout_p = cfg.relu_dropout or 0
            self.activation_dropout_module = FairseqDropout(
                float(activation_dropout_p), module_name=self.__class__.__name__
            )
            self.normalize_before = cfg.encoder.normalize_before
            self.fc1 = self.build_fc1(
                self.embed_dim,
                cfg.encoder.ffn_embed_dim,
                self.quant_noise,
                self.quant_noise_block_size,
            )
            self.fc2 = self.build_fc2(
                cfg.encoder.ffn_embed_dim,
                self.embed_dim,
                self.quant_noise,
                self.quant_noise_block_size,
            )

            self.final_layer_norm = LayerNorm(self.embed_dim, export=cfg.export)
            # (the experimental adapter block is left out: cfg.encoder.add_adapters is False)
            self.add_adapters = False

        def build_fc1(self, input_dim, output_dim, q_noise, qn_block_size):
            return quant_noise(
                nn.Linear(input_dim, output_dim), p=q_noise, block_size=qn_block_size
            )

        def build_fc2(self, input_dim, output_dim, q_noise, qn_block_size):
            return quant_noise(
                nn.Linear(input_dim, output_dim), p=q_noise, block_size=qn_block_size
            )

        def build_self_attention(self, embed_dim, cfg):
            return MultiheadAttention(
                embed_dim,
                cfg.encoder.attention_heads,
                dropout=cfg.attention_dropout,
                self_attention=True,
                q_noise=self.quant_noise,
                qn_block_size=self.quant_noise_block_size,
            )

        def residual_connection(self, x, residual):
            return residual + x

        def forward(
            self,
            x,
            encoder_padding_mask: Optional[Tensor],
            attn_mask: Optional[Tensor] = None,
        ):
            # anything in original attn_mask = 1, becomes -1e8
            # anything in original attn_mask = 0, becomes 0
            # Note that we cannot use -inf here, because at some edge cases,
            # the attention weight (before softmax) for some padded element in query
            # will become -inf, which results in NaN in model parameters
            if attn_mask is not None:
                attn_mask = attn_mask.masked_fill(
                    attn_mask.to(torch.bool), -1e8 if x.dtype == torch.float32 else -1e4
                )

            residual = x
            if self.normalize_before:
                x = self.self_attn_layer_norm(x)
            x, _ = self.self_attn(
                query=x,
                key=x,
                value=x,
                key_padding_mask=encoder_padding_mask,
                need_weights=False,
                attn_mask=attn_mask,
            )
            x = self.dropout_module(x)
            x = self.residual_connection(x, residual)
            if not self.normalize_before:
                x = self.self_attn_layer_norm(x)

            residual = x
            if self.normalize_before:
                x = self.final_layer_norm(x)
            x = self.activation_fn(self.fc1(x))
            x = self.activation_dropout_module(x)
            x = self.fc2(x)

            fc_result = x

            x = self.dropout_module(x)
            x = self.residual_connection(x, residual)

            if not self.normalize_before:
                x = self.final_layer_norm(x)

            if self.return_fc and not torch.jit.is_scripting():
                return x, fc_result
            return x

    class TransformerDecoderLayerBase(nn.Module):
        """Decoder layer block (post-norm as in the paper, pre-norm with
        *cfg.decoder.normalize_before*)."""

        def __init__(
            self, cfg, no_encoder_attn=False, add_bias_kv=False, add_zero_attn=False
        ):
            super().__init__()
            self.embed_dim = cfg.decoder.embed_dim
            self.dropout_module = FairseqDropout(
                cfg.dropout, module_name=self.__class__.__name__
            )
            self.quant_noise = cfg.quant_noise.pq
            self.quant_noise_block_size = cfg.quant_noise.pq_block_size

            self.cross_self_attention = cfg.cross_self_attention

            self.self_attn = self.build_self_attention(
                self.embed_dim,
                cfg,
                add_bias_kv=add_bias_kv,
                add_zero_attn=add_zero_attn,
            )
            self.attn_ln = (
                LayerNorm(self.embed_dim)
                if utils.safe_getattr(cfg, "scale_attn", False)
                else None
            )
            self.nh = self.self_attn.num_heads
            self.head_dim = self.self_attn.head_dim
            scale_heads = utils.safe_getattr(cfg, "scale_heads", False)
            self.c_attn = (
                nn.Parameter(torch.ones((self.nh,)), requires_grad=True)
                if scale_heads
                else None
            )

            self.activation_fn = utils.get_activation_fn(activation=cfg.activation_fn)
            activation_dropout_p = cfg.activation_dropout
            if activation_dropout_p == 0:
                # for backwards compatibility with models that use cfg.relu_dropout
                activation_dropout_p = cfg.relu_dropout or 0
            self.activation_dropout_module = FairseqDropout(
                float(activation_dropout_p), module_name=self.__class__.__name__
            )
            self.normalize_before = cfg.decoder.normalize_before

            self.self_attn_layer_norm = LayerNorm(self.embed_dim, export=cfg.export)

            if no_encoder_attn:
                self.encoder_attn = None
                self.encoder_attn_layer_norm = None
            else:
                self.encoder_attn = self.build_encoder_attention(self.embed_dim, cfg)
                self.encoder_attn_layer_norm = LayerNorm(self.embed_dim, export=cfg.export)

            self.ffn_layernorm = (
                LayerNorm(cfg.decoder.ffn_embed_dim)
                if utils.safe_getattr(cfg, "scale_fc", False)
                else None
            )
            self.w_resid = (
                nn.Parameter(
                    torch.ones(
                        self.embed_dim,
                    ),
                    requires_grad=True,
                )
                if utils.safe_getattr(cfg, "scale_resids", False)
                else None
            )

            self.fc1 = self.build_fc1(
                self.embed_dim,
                cfg.decoder.ffn_embed_dim,
                self.quant_noise,
                self.quant_noise_block_size,
            )
            self.fc2 = self.build_fc2(
                cfg.decoder.ffn_embed_dim,
                self.embed_dim,
                self.quant_noise,
                self.quant_noise_block_size,
            )

            self.final_layer_norm = LayerNorm(self.embed_dim, export=cfg.export)
            # (the experimental adapter block is left out: cfg.decoder.add_adapters is False)
            self.add_adapters = False

            self.need_attn = True
            self.onnx_trace = False

        def build_fc1(self, input_dim, output_dim, q_noise, qn_block_size):
            return quant_noise(nn.Linear(input_dim, output_dim), q_noise, qn_block_size)

        def build_fc2(self, input_dim, output_dim, q_noise, qn_block_size):
            return quant_noise(nn.Linear(input_dim, output_dim), q_noise, qn_block_size)

        def build_self_attention(
            self, embed_dim, cfg, add_bias_kv=False, add_zero_attn=False
        ):
            return MultiheadAttention(
                embed_dim,
                cfg.decoder.attention_heads,
                dropout=cfg.attention_dropout,
                add_bias_kv=add_bias_kv,
                add_zero_attn=add_zero_attn,
                self_attention=not cfg.cross_self_attention,
                q_noise=self.quant_noise,
                qn_block_size=self.quant_noise_block_size,
            )

        def build_encoder_attention(self, embed_dim, cfg):
            return MultiheadAttention(
                embed_dim,
                cfg.decoder.attention_heads,
                kdim=cfg.encoder.embed_dim,
                vdim=cfg.encoder.embed_dim,
                dropout=cfg.attention_dropout,
                encoder_decoder_attention=True,
                q_noise=self.quant_noise,
                qn_block_size=self.quant_noise_block_size,
            )

        def prepare_for_onnx_export_(self):
            self.onnx_trace = True

        def residual_connection(self, x, residual):
            return residual + x

        def forward(
            self,
            x,
            encoder_out: Optional[torch.Tensor] = None,
            encoder_padding_mask: Optional[torch.Tensor] = None,
            incremental_state: Optional[Dict[str, Dict[str, Optional[Tensor]]]] = None,
            prev_self_attn_state: Optional[List[torch.Tensor]] = None,
            prev_attn_state: Optional[List[torch.Tensor]] = None,
            self_attn_mask: Optional[torch.Tensor] = None,
            self_attn_padding_mask: Optional[torch.Tensor] = None,
            need_attn: bool = False,
            need_head_weights: bool = False,
        ):
            if need_head_weights:
                need_attn = True

            residual = x
            if self.normalize_before:
                x = self.self_attn_layer_norm(x)
            if prev_self_attn_state is not None:
                prev_key, prev_value = prev_self_attn_state[:2]
                saved_state: Dict[str, Optional[Tensor]] = {
                    "prev_key": prev_key,
                    "prev_value": prev_value,
                }
                if len(prev_self_attn_state) >= 3:
                    saved_state["prev_key_padding_mask"] = prev_self_attn_state[2]
                assert incremental_state is not None
                self.self_attn._set_input_buffer(incremental_state, saved_state)
            _self_attn_input_buffer = self.self_attn._get_input_buffer(incremental_state)
            if self.cross_self_attention and not (
                incremental_state is not None
                and _self_attn_input_buffer is not None
                and "prev_key" in _self_attn_input_buffer
            ):
                if self_attn_mask is not None:
                    assert encoder_out is not None
                    self_attn_mask = torch.cat(
                        (x.new_zeros(x.size(0), encoder_out.size(0)), self_attn_mask), dim=1
                    )
                if self_attn_padding_mask is not None:
                    if encoder_padding_mask is None:
                        assert encoder_out is not None
                        encoder_padding_mask = self_attn_padding_mask.new_zeros(
                            encoder_out.size(1), encoder_out.size(0)
                        )
                    self_attn_padding_mask = torch.cat(
                        (encoder_padding_mask, self_attn_padding_mask), dim=1
                    )
                assert encoder_out is not None
                y = torch.cat((encoder_out, x), dim=0)
            else:
                y = x

            x, attn = self.self_attn(
                query=x,
                key=y,
                value=y,
                key_padding_mask=self_attn_padding_mask,
                incremental_state=incremental_state,
                need_weights=False,
                attn_mask=self_attn_mask,
            )
            if self.c_attn is not None:
                tgt_len, bsz = x.size(0), x.size(1)
                x = x.view(tgt_len, bsz, self.nh, self.head_dim)
                x = torch.einsum("tbhd,h->tbhd", x, self.c_attn)
                x = x.reshape(tgt_len, bsz, self.embed_dim)
            if self.attn_ln is not None:
                x = self.attn_ln(x)
            x = self.dropout_module(x)
            x = self.residual_connection(x, residual)
            if not self.normalize_before:
                x = self.self_attn_layer_norm(x)

            if self.encoder_attn is not None and encoder_out is not None:
                residual = x
                if self.normalize_before:
                    x = self.encoder_attn_layer_norm(x)
                if prev_attn_state is not None:
                    prev_key, prev_value = prev_attn_state[:2]
                    saved_state: Dict[str, Optional[Tensor]] = {
                        "prev_key": prev_key,
                        "prev_value": prev_value,
                    }
                    if len(prev_attn_state) >= 3:
                        saved_state["prev_key_padding_mask"] = prev_attn_state[2]
                    assert incremental_state is not None
                    self.encoder_attn._set_input_buffer(incremental_state, saved_state)

                x, attn = self.encoder_attn(
                    query=x,
                    key=encoder_out,
                    value=encoder_out,
                    key_padding_mask=encoder_padding_mask,
                    incremental_state=incremental_state,
                    static_kv=True,
                    need_weights=need_attn or (not self.training and self.need_attn),
                    need_head_weights=need_head_weights,
                )
                x = self.dropout_module(x)
                x = self.residual_connection(x, residual)
                if not self.normalize_before:
                    x = self.encoder_attn_layer_norm(x)

            residual = x
            if self.normalize_before:
                x = self.final_layer_norm(x)

            x = self.activation_fn(self.fc1(x))
            x = self.activation_dropout_module(x)
            if self.ffn_layernorm is not None:
                x = self.ffn_layernorm(x)
            x = self.fc2(x)
            x = self.dropout_module(x)
            if self.w_resid is not None:
                residual = torch.mul(self.w_resid, residual)
            x = self.residual_connection(x, residual)

            if not self.normalize_before:
                x = self.final_layer_norm(x)
            if self.onnx_trace and incremental_state is not None:
                saved_state = self.self_attn._get_input_buffer(incremental_state)
                assert saved_state is not None
                if self_attn_padding_mask is not None:
                    self_attn_state = [
                        saved_state["prev_key"],
                        saved_state["prev_value"],
                        saved_state["prev_key_padding_mask"],
                    ]
                else:
                    self_attn_state = [saved_state["prev_key"], saved_state["prev_value"]]
                return x, attn, self_attn_state
            return x, attn, None

        def make_generation_fast_(self, need_attn: bool = False, **kwargs):
            self.need_attn = need_attn

    return SimpleNamespace(TransformerEncoderLayerBase=TransformerEncoderLayerBase,
                           TransformerDecoderLayerBase=TransformerDecoderLayerBase,
                           buffered_future_mask=mha.buffered_future_mask)


def _cfg(normalize_before):
    side = lambda: SimpleNamespace(embed_dim=E_, attention_heads=H_, ffn_embed_dim=12,
                                   normalize_before=normalize_before)
    return SimpleNamespace(encoder=side(), decoder=side(), quant_noise=SimpleNamespace(pq=0.0, pq_block_size=8),
                           export=False, dropout=0.0, attention_dropout=0.0, activation_dropout=0.0,
                           relu_dropout=0.0, activation_fn="relu", cross_self_attention=False)


def _ln(x, P, name):
    mu, var = x.mean(-1, keepdims=True), x.var(-1, keepdims=True)
    return (x - mu) / np.sqrt(var + 1e-5) * P[name + ".weight"] + P[name + ".bias"]


def _sub(P, prefix):
    return {k[len(prefix):]: v for k, v in P.items() if k.startswith(prefix)}


def _ffn(x, P):
    h = np.maximum(x @ P["fc1.weight"].T + P["fc1.bias"], 0)
    return h @ P["fc2.weight"].T + P["fc2.bias"]


def _np_encoder_layer(x, P, pre, kpm):
    a = lambda y: _np_mha(y, y, y, _sub(P, "self_attn."), H_, kpm=kpm)[0]
    if pre:
        x = x + a(_ln(x, P, "self_attn_layer_norm"))
        return x + _ffn(_ln(x, P, "final_layer_norm"), P)
    x = _ln(x + a(x), P, "self_attn_layer_norm")
    return _ln(x + _ffn(x, P), P, "final_layer_norm")


def _np_decoder_layer(x, enc, P, pre, enc_kpm):
    T = x.shape[0]
    causal = np.triu(np.full((T, T), -np.inf), 1)
    sa = lambda y: _np_mha(y, y, y, _sub(P, "self_attn."), H_, attn_mask=causal)[0]
    ea = lambda y: _np_mha(y, enc, enc, _sub(P, "encoder_attn."), H_, kpm=enc_kpm)
    if pre:
        x = x + sa(_ln(x, P, "self_attn_layer_norm"))
        o, w = ea(_ln(x, P, "encoder_attn_layer_norm"))
        x = x + o
        return x + _ffn(_ln(x, P, "final_layer_norm"), P), w
    x = _ln(x + sa(x), P, "self_attn_layer_norm")
    o, w = ea(x)
    x = _ln(x + o, P, "encoder_attn_layer_norm")
    return _ln(x + _ffn(x, P), P, "final_layer_norm"), w


def _layers_data():
    rs = np.random.RandomState(5)
    return SimpleNamespace(src=rs.randn(S_, B_, E_), tgt=rs.randn(T_, 3, E_), enc=rs.randn(S_, 1, E_),
                           r=rs.randn(S_, B_, E_))


def _layers_run(torch, states=None):
    p = transformer_layer_page(torch)
    D = _layers_data()
    t = lambda a: torch.tensor(np.asarray(a), dtype=torch.float32)
    out, mods = {}, {}
    torch.manual_seed(0)
    for pre in (False, True):
        enc_layer = p.TransformerEncoderLayerBase(_cfg(pre))
        dec_layer = p.TransformerDecoderLayerBase(_cfg(pre))
        mods[f"enc{pre:d}"], mods[f"dec{pre:d}"] = enc_layer, dec_layer
    if states is not None:
        for name, m in mods.items():
            m.load_state_dict({k: torch.tensor(v) for k, v in states[name].items()})
    kpm = torch.tensor(KPM)
    for pre in (False, True):
        enc_layer, dec_layer = mods[f"enc{pre:d}"], mods[f"dec{pre:d}"]
        src = t(D.src)
        y = enc_layer(src, kpm)
        (y * t(D.r)).sum().backward()
        out[f"enc{pre:d}"], out[f"enc{pre:d}_gfc1"] = y, enc_layer.fc1.weight.grad
        out[f"enc{pre:d}_gq"] = enc_layer.self_attn.q_proj.weight.grad
        # decoding three beams of one sentence: the encoder output repeated per beam, as
        # SequenceGenerator does, so the encoder-attention cache need not be reordered
        dec_layer.eval()
        enc = t(D.enc).repeat(1, 3, 1)
        enc_kpm = torch.tensor([[False, False, False, True]] * 3)
        x = t(D.tgt)
        full, attn, _ = dec_layer(x, enc, enc_kpm, self_attn_mask=p.buffered_future_mask(x))
        out[f"dec{pre:d}"], out[f"dec{pre:d}_attn"] = full, attn
        state, steps = {}, []
        for i in range(T_):
            if i == 2:
                new_order = torch.tensor(ORDER)
                dec_layer.self_attn.reorder_incremental_state(state, new_order)
                dec_layer.encoder_attn.reorder_incremental_state(state, new_order)
                x = x.index_select(1, new_order)
            steps.append(dec_layer(x[i:i + 1], enc, enc_kpm, incremental_state=state)[0])
        out[f"dec{pre:d}_steps"] = torch.cat(steps)
        out[f"dec{pre:d}_reordered"] = dec_layer(x, enc, enc_kpm, self_attn_mask=p.buffered_future_mask(x))[0]
    res = {k: _np(v) for k, v in out.items()}
    res["states"] = {name: {k: _np(v) for k, v in m.state_dict().items()} for name, m in mods.items()}
    return res


def test_fairseq_transformer_layers():
    r = _layers_run(lucid)
    D = _layers_data()
    f = lambda a: np.asarray(a, np.float32).astype(np.float64)
    enc = np.repeat(f(D.enc), 3, axis=1)
    enc_kpm = np.array([[False, False, False, True]] * 3)
    for pre in (0, 1):
        P = r["states"][f"enc{pre}"]
        np.testing.assert_allclose(r[f"enc{pre}"], _np_encoder_layer(f(D.src), P, pre, KPM), atol=5e-5)
        assert np.abs(r[f"enc{pre}_gfc1"]).max() > 1e-3 and np.abs(r[f"enc{pre}_gq"]).max() > 1e-4
        P = r["states"][f"dec{pre}"]
        o, w = _np_decoder_layer(f(D.tgt), enc, P, pre, enc_kpm)
        np.testing.assert_allclose(r[f"dec{pre}"], o, atol=5e-5)
        np.testing.assert_allclose(r[f"dec{pre}_attn"], w, atol=5e-6)  # eval: need_attn weights
        assert np.all(r[f"dec{pre}_attn"][:, :, 3] == 0)
        # step-by-step == full decoding: steps 0, 1 before the beam reorder, step 2 after it
        np.testing.assert_allclose(r[f"dec{pre}_steps"][:2], o[:2], atol=5e-5)
        o_r = _np_decoder_layer(f(D.tgt)[:, ORDER], enc, P, pre, enc_kpm)[0]
        np.testing.assert_allclose(r[f"dec{pre}_reordered"], o_r, atol=5e-5)
        np.testing.assert_allclose(r[f"dec{pre}_steps"][2], o_r[2], atol=5e-5)
    assert not np.allclose(r["enc0"], r["enc1"], atol=1e-2)  # pre- and post-norm differ


def test_fairseq_transformer_layers_torch_parity():
    torch = pytest.importorskip("torch")
    a = _layers_run(lucid)
    b = _layers_run(torch, states=a["states"])
    for key in a:
        if key != "states":
            np.testing.assert_allclose(a[key], b[key], atol=2e-5, err_msg=key)


def test_lucid_onnx_module():
    # the torch.onnx surface the pages above use, and what Lucid refuses
    assert lucid.onnx.is_in_onnx_export() is False
    shape = lucid.onnx.operators.shape_as_tensor(lucid.zeros(2, 3, 4))
    assert shape.dtype == lucid.int64 and shape.tolist() == [2, 3, 4] and shape.device.type == "cpu"
    x = lucid.arange(24.0)
    y = lucid.onnx.operators.reshape_from_tensor_shape(x, lucid.tensor([4, -1]))
    assert tuple(y.shape) == (4, 6) and y.tolist()[1][:2] == [6.0, 7.0]
    with pytest.raises(RuntimeError, match="reshape_from_tensor_shape.*1-D.*\\(2, 1\\)"):
        lucid.onnx.operators.reshape_from_tensor_shape(x, lucid.tensor([[4], [6]]))
    with pytest.raises(RuntimeError, match="no ONNX exporter"):
        lucid.onnx.export(lucid.nn.Linear(2, 2), (lucid.zeros(1, 2),), "m.onnx")
