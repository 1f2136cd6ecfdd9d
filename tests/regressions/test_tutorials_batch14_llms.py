"""Sebastian Raschka's "Build a Large Language Model (From Scratch)" (``rasbt/LLMs-from-scratch``) run on
Lucid (``import lucid as torch``), batch 14. The chapter code comes from ``pkg/llms_from_scratch/*.py``,
the rest from the notebooks and scripts named below.

- appendix A: tensor basics (dtypes, ``reshape``/``view``/``.T``/``matmul`` printed), ``autograd.grad``
  on the logistic-regression example, ``NeuralNetwork`` (its printed repr, 2,213 parameters),
  ``ToyDataset``, the ``DataLoader`` training loop with ``SGD`` and its ``f"{loss:.2f}"`` log,
  ``compute_accuracy``, ``torch.save``/``load_state_dict``.
- ch02: the book's ``SimpleTokenizerV2`` (regex split, ``<|unk|>``/``<|endoftext|>``), ``GPTDatasetV1``
  (sliding windows of ``torch.tensor(input_chunk)``) and ``create_dataloader_v1``, token plus absolute
  position embeddings; ``03_bonus_embedding-vs-matmul`` (``one_hot`` times a ``Linear`` is an ``Embedding``).
- ch03: the naive attention loops (``torch.empty``, ``torch.dot`` written into a tensor, ``softmax_naive``),
  the simplified attention of "Your journey starts with one step", ``SelfAttention_v1`` (``nn.Parameter
  (torch.rand(...))``, ``keys.T``) and ``_v2`` with exercise 3.1's weight transfer, the causal mask both
  ways, ``Dropout(0.5)`` on ones, ``CausalAttention`` (``register_buffer('mask', torch.triu(...))``,
  ``masked_fill_``), ``MultiHeadAttentionWrapper`` and ``MultiHeadAttention``.
- ch04: ``LayerNorm`` (``var(unbiased=False)``), the tanh ``GELU``, the shortcut demo
  (``ExampleDeepNeuralNetwork``, ``print_gradients``), ``FeedForward``, ``TransformerBlock``,
  ``GPTModel``, the parameter and size report, ``generate_text_simple``; the bonus
  ``PyTorchMultiHeadAttention`` (SDPA, ``queries, keys, values = qkv`` unpacking) and ``GPTModelFast``.
- ch05: ``calc_loss_batch``/``calc_loss_loader``, ``train_model_simple`` with ``evaluate_model`` and
  ``generate_and_print_sample``, the temperature and top-k demo (``torch.multinomial`` 1000 times,
  ``torch.bincount``, ``torch.where(condition=..., input=..., other=...)``), ``generate`` with temperature,
  top-k and ``eos_id``, and ``torch.save``/``torch.load(weights_only=True)`` of model and AdamW state.
- ch06: the classifier (``requires_grad = False`` everywhere, a new ``out_head``, the last block and final
  norm unfrozen), ``SpamDataset`` padding, last-token ``calc_loss_batch``/``calc_loss_loader``,
  ``calc_accuracy_loader``, ``train_classifier_simple``, ``classify_review``; ``02_bonus_additional-
  experiments/additional_experiments.py``: the ``"flexible"`` token position (``logits[torch.arange(b),
  last_token_pos]``), ``average_embeddings``, gradient accumulation (``loss /= accumulation_steps``),
  ``@torch.no_grad()`` on ``calc_accuracy_loader``, ``LinearWithLoRAMerged`` (``F.linear`` with the merged
  weight) against ``LinearWithLoRA``.
- ch07: ``format_input``, ``InstructionDataset`` and ``custom_collate_fn`` (``<|endoftext|>`` padding,
  ``torch.nonzero(mask).squeeze()``, ``targets[indices[1:]] = -100``, ``allowed_max_length``) through
  ``functools.partial`` in a ``DataLoader``, and the ``cross_entropy`` ``ignore_index=-100`` demo;
  ``04_preference-tuning-with-dpo/dpo-from-scratch.ipynb``: ``PreferenceDataset``, its
  ``custom_collate_fn`` (boolean masks written by slices), ``compute_logprobs`` (``torch.gather``),
  ``compute_dpo_loss`` (``F.logsigmoid``), the batch/loader helpers and ``train_model_dpo_simple``.
- appendix D: ``find_highest_gradient``, ``clip_grad_norm_`` and ``train_model`` (linear warmup, cosine
  decay written into ``param_group["lr"]``, clipping from the end of the warmup on); appendix E:
  ``LoRALayer`` (``kaiming_uniform_(a=math.sqrt(5))``), ``LinearWithLoRA``, ``replace_linear_with_lora``
  on the ch06 classifier.
- ch04/03_kv-cache: ``gpt_with_kv_cache.py`` (``register_buffer("cache_k", None, persistent=False)``,
  ``generate_text_simple_cached``) and ``gpt_with_kv_cache_optimized.py`` (a preallocated cache written
  by slice assignment, shifted left past its window, the offset causal mask).
- ``pkg/llms_from_scratch/llama3.py``: ``compute_rope_params`` with the Llama 3.1 frequency smoothing and
  ``rescale_theta``, ``apply_rope``, ``GroupedQueryAttention`` (``repeat_interleave``), SwiGLU
  ``FeedForward``, ``nn.RMSNorm``, ``Llama3Model`` and ``Llama3ModelFast`` (SDPA); ``qwen3.py``'s
  ``RMSNorm`` (``qwen3_compatible``), QK-norm ``GroupedQueryAttention`` with a separate ``head_dim``,
  ``Qwen3Model``; ``kv_cache_batched/{qwen3,utils,generate}.py`` (per-row ``KVCache``, RoPE gathered at
  per-row offsets ``cos[0, 0, position_ids, :]``, masks written row by row); ``ch05/12_gemma3``'s
  standalone ``Gemma3Model`` (zero-centred ``RMSNorm``, GELU-tanh SwiGLU, sliding-window and global
  layers with their own RoPE bases, ``query_pre_attn_scalar``, the grouped ``ModuleList`` repr,
  ``model_memory_size``).

Sizes are tiny (embeddings of 16-32, 2-3 layers, contexts of 8-16 (64 for the instruction data),
vocabularies under 64) and data synthetic. Each page is a function of the module it is handed as
``torch``; the checks run without PyTorch (NumPy float64 forwards from the same weights, float64 finite
differences, closed forms such as the parameter counts, the masks and the learning-rate schedule, an
SGD loop replayed in NumPy, losses falling by stated margins) and the parity tests run the same text on
PyTorch with Lucid's initial weights loaded.

Adapted: tiktoken is not available, so the pages use the book's own ch02 ``SimpleTokenizerV2`` (its
``encode`` also takes tiktoken's ``allowed_special``, ignored) over a synthetic text, and
``create_dataloader_v1``/``text_to_token_ids`` take that tokenizer; the padding id is that tokenizer's
``<|endoftext|>`` (tiktoken's 50256 in the book); ``SpamDataset`` reads a dict of columns (pandas is not
available: ``self.data["Label"][index]`` for ``self.data.iloc[index]["Label"]``); learning rates are
larger than the book's (a tiny model, few steps); ``generate_and_print_sample`` generates 8 tokens, not
50; ``device`` is the default device, so the strict stand-in device runs every page; the Llama 3, Qwen3
and Gemma 3 configs use ``torch.float32`` where the originals have ``torch.bfloat16`` (float64 NumPy
checks to float32's precision; one test runs the Llama 3 and Qwen3 pages in bfloat16, as the book
configures them, on the CPU), and ``model_memory_size`` reports ``float16`` for ``bfloat16`` (the
page runs on the default device, and a GPU one has no bfloat16: CuPy lacks it); qwen3.py's and gemma3's
``compute_rope_params`` (llama3.py's without ``freq_config``) call llama3.py's; appendix A calls
``grad(loss, [w1])`` (README "Differences from PyTorch": ``grad(loss, w1)`` with a bare tensor returns a
bare gradient in Lucid) and compares shapes as tuples (a ``lucid.Size`` prints as a tuple); the DPO
notebook's ``train_model_dpo_simple`` reads a global ``model`` (the policy model), bound here; the
additional-experiments ``train_classifier_simple`` keeps its update and accuracy steps (its printed
loss report is left out) and takes the stand-in tokenizer's padding id for the hard-coded 50256. The
parity tests load Lucid's initial weights into PyTorch's modules, run the loaders unshuffled and leave
out the sampled tokens (the two libraries' random streams differ).
"""
import functools
import io
import math
import os
import re
from contextlib import redirect_stdout
from types import SimpleNamespace

import numpy as np
import pytest

import lucid
import lucid.nn  # noqa: F401
import lucid.optim  # noqa: F401
import lucid.utils.data  # noqa: F401


def _dev(torch):
    return torch.get_default_device() if torch is lucid else "cpu"


def _np(t):
    return t.detach().cpu().numpy()


def _sd(model):
    return {k: _np(v).copy() for k, v in model.state_dict().items()}


def _load(torch, module, W):
    if W is not None:
        module.load_state_dict({k: torch.tensor(v) for k, v in W.items()})


# ------------------------------------------------------------------ the book's code, per chapter
def appendix_a_code(torch):
    Dataset = torch.utils.data.Dataset

    class NeuralNetwork(torch.nn.Module):
        def __init__(self, num_inputs, num_outputs):
            super().__init__()

            self.layers = torch.nn.Sequential(

                # 1st hidden layer
                torch.nn.Linear(num_inputs, 30),
                torch.nn.ReLU(),

                # 2nd hidden layer
                torch.nn.Linear(30, 20),
                torch.nn.ReLU(),

                # output layer
                torch.nn.Linear(20, num_outputs),
            )

        def forward(self, x):
            logits = self.layers(x)
            return logits

    class ToyDataset(Dataset):
        def __init__(self, X, y):
            self.features = X
            self.labels = y

        def __getitem__(self, index):
            one_x = self.features[index]
            one_y = self.labels[index]
            return one_x, one_y

        def __len__(self):
            return self.labels.shape[0]

    def compute_accuracy(model, dataloader):

        model = model.eval()
        correct = 0.0
        total_examples = 0

        for idx, (features, labels) in enumerate(dataloader):

            with torch.no_grad():
                logits = model(features)

            predictions = torch.argmax(logits, dim=1)
            compare = labels == predictions
            correct += torch.sum(compare)
            total_examples += len(compare)

        return (correct / total_examples).item()

    return SimpleNamespace(**locals())


def ch02_code(torch):
    Dataset, DataLoader = torch.utils.data.Dataset, torch.utils.data.DataLoader

    class SimpleTokenizerV2:
        def __init__(self, vocab):
            self.str_to_int = vocab
            self.int_to_str = {i: s for s, i in vocab.items()}

        def encode(self, text, allowed_special=None):  # allowed_special: tiktoken's signature
            preprocessed = re.split(r'([,.:;?_!"()\']|--|\s)', text)
            preprocessed = [item.strip() for item in preprocessed if item.strip()]
            preprocessed = [item if item in self.str_to_int
                            else "<|unk|>" for item in preprocessed]
            ids = [self.str_to_int[s] for s in preprocessed]
            return ids

        def decode(self, ids):
            text = " ".join([self.int_to_str[i] for i in ids])
            # Replace spaces before the specified punctuations
            text = re.sub(r'\s+([,.:;?!"()\'])', r'\1', text)
            return text

    def build_tokenizer(raw_text):
        preprocessed = re.split(r'([,.:;?_!"()\']|--|\s)', raw_text)
        preprocessed = [item.strip() for item in preprocessed if item.strip()]
        all_tokens = sorted(list(set(preprocessed)))
        all_tokens.extend(["<|endoftext|>", "<|unk|>"])
        vocab = {token: integer for integer, token in enumerate(all_tokens)}
        return SimpleTokenizerV2(vocab)

    class GPTDatasetV1(Dataset):
        def __init__(self, txt, tokenizer, max_length, stride):
            self.tokenizer = tokenizer
            self.input_ids = []
            self.target_ids = []

            # Tokenize the entire text
            token_ids = tokenizer.encode(txt, allowed_special={"<|endoftext|>"})

            # Use a sliding window to chunk the book into overlapping sequences of max_length
            for i in range(0, len(token_ids) - max_length, stride):
                input_chunk = token_ids[i:i + max_length]
                target_chunk = token_ids[i + 1: i + max_length + 1]
                self.input_ids.append(torch.tensor(input_chunk))
                self.target_ids.append(torch.tensor(target_chunk))

        def __len__(self):
            return len(self.input_ids)

        def __getitem__(self, idx):
            return self.input_ids[idx], self.target_ids[idx]

    def create_dataloader_v1(txt, batch_size=4, max_length=256,
                             stride=128, shuffle=True, drop_last=True, num_workers=0, tokenizer=None):
        # Initialize the tokenizer (tiktoken.get_encoding("gpt2") in the book; a stand-in here)
        tokenizer = tokenizer

        # Create dataset
        dataset = GPTDatasetV1(txt, tokenizer, max_length, stride)

        # Create dataloader
        dataloader = DataLoader(
            dataset, batch_size=batch_size, shuffle=shuffle, drop_last=drop_last, num_workers=num_workers)

        return dataloader

    return SimpleNamespace(**locals())


def ch03_code(torch):
    nn = torch.nn

    class SelfAttention_v1(nn.Module):

        def __init__(self, d_in, d_out):
            super().__init__()
            self.W_query = nn.Parameter(torch.rand(d_in, d_out))
            self.W_key = nn.Parameter(torch.rand(d_in, d_out))
            self.W_value = nn.Parameter(torch.rand(d_in, d_out))

        def forward(self, x):
            keys = x @ self.W_key
            queries = x @ self.W_query
            values = x @ self.W_value

            attn_scores = queries @ keys.T  # omega
            attn_weights = torch.softmax(
                attn_scores / keys.shape[-1]**0.5, dim=-1
            )

            context_vec = attn_weights @ values
            return context_vec

    class SelfAttention_v2(nn.Module):

        def __init__(self, d_in, d_out, qkv_bias=False):
            super().__init__()
            self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)
            self.W_key = nn.Linear(d_in, d_out, bias=qkv_bias)
            self.W_value = nn.Linear(d_in, d_out, bias=qkv_bias)

        def forward(self, x):
            keys = self.W_key(x)
            queries = self.W_query(x)
            values = self.W_value(x)

            attn_scores = queries @ keys.T
            attn_weights = torch.softmax(attn_scores / keys.shape[-1]**0.5, dim=-1)

            context_vec = attn_weights @ values
            return context_vec

    class CausalAttention(nn.Module):

        def __init__(self, d_in, d_out, context_length,
                     dropout, qkv_bias=False):
            super().__init__()
            self.d_out = d_out
            self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)
            self.W_key = nn.Linear(d_in, d_out, bias=qkv_bias)
            self.W_value = nn.Linear(d_in, d_out, bias=qkv_bias)
            self.dropout = nn.Dropout(dropout)  # New
            self.register_buffer('mask', torch.triu(torch.ones(context_length, context_length), diagonal=1))  # New

        def forward(self, x):
            b, num_tokens, d_in = x.shape  # New batch dimension b
            keys = self.W_key(x)
            queries = self.W_query(x)
            values = self.W_value(x)

            attn_scores = queries @ keys.transpose(1, 2)  # Changed transpose
            attn_scores.masked_fill_(  # New, _ ops are in-place
                self.mask.bool()[:num_tokens, :num_tokens], -torch.inf)
            attn_weights = torch.softmax(
                attn_scores / keys.shape[-1]**0.5, dim=-1
            )
            attn_weights = self.dropout(attn_weights)  # New

            context_vec = attn_weights @ values
            return context_vec

    class MultiHeadAttentionWrapper(nn.Module):
        def __init__(self, d_in, d_out, context_length, dropout, num_heads, qkv_bias=False):
            super().__init__()
            self.heads = nn.ModuleList(
                [CausalAttention(d_in, d_out, context_length, dropout, qkv_bias)
                 for _ in range(num_heads)]
            )

        def forward(self, x):
            return torch.cat([head(x) for head in self.heads], dim=-1)

    class MultiHeadAttention(nn.Module):
        def __init__(self, d_in, d_out, context_length, dropout, num_heads, qkv_bias=False):
            super().__init__()
            assert d_out % num_heads == 0, "d_out must be divisible by n_heads"

            self.d_out = d_out
            self.num_heads = num_heads
            self.head_dim = d_out // num_heads  # Reduce the projection dim to match desired output dim

            self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)
            self.W_key = nn.Linear(d_in, d_out, bias=qkv_bias)
            self.W_value = nn.Linear(d_in, d_out, bias=qkv_bias)
            self.out_proj = nn.Linear(d_out, d_out)  # Linear layer to combine head outputs
            self.dropout = nn.Dropout(dropout)
            self.register_buffer('mask', torch.triu(torch.ones(context_length, context_length), diagonal=1))

        def forward(self, x):
            b, num_tokens, d_in = x.shape

            keys = self.W_key(x)  # Shape: (b, num_tokens, d_out)
            queries = self.W_query(x)
            values = self.W_value(x)

            # Unroll last dim: (b, num_tokens, d_out) -> (b, num_tokens, num_heads, head_dim)
            keys = keys.view(b, num_tokens, self.num_heads, self.head_dim)
            values = values.view(b, num_tokens, self.num_heads, self.head_dim)
            queries = queries.view(b, num_tokens, self.num_heads, self.head_dim)

            # Transpose: (b, num_tokens, num_heads, head_dim) -> (b, num_heads, num_tokens, head_dim)
            keys = keys.transpose(1, 2)
            queries = queries.transpose(1, 2)
            values = values.transpose(1, 2)

            # Compute scaled dot-product attention (aka self-attention) with a causal mask
            attn_scores = queries @ keys.transpose(2, 3)  # Dot product for each head

            # Original mask truncated to the number of tokens and converted to boolean
            mask_bool = self.mask.bool()[:num_tokens, :num_tokens]

            # Use the mask to fill attention scores
            attn_scores.masked_fill_(mask_bool, -torch.inf)

            attn_weights = torch.softmax(attn_scores / keys.shape[-1]**0.5, dim=-1)
            attn_weights = self.dropout(attn_weights)

            # Shape: (b, num_tokens, num_heads, head_dim)
            context_vec = (attn_weights @ values).transpose(1, 2)

            # Combine heads, where self.d_out = self.num_heads * self.head_dim
            context_vec = context_vec.reshape(b, num_tokens, self.d_out)
            context_vec = self.out_proj(context_vec)  # optional projection

            return context_vec

    return SimpleNamespace(**locals())


def ch04_code(torch):
    nn = torch.nn
    MultiHeadAttention = ch03_code(torch).MultiHeadAttention

    class LayerNorm(nn.Module):
        def __init__(self, emb_dim):
            super().__init__()
            self.eps = 1e-5
            self.scale = nn.Parameter(torch.ones(emb_dim))
            self.shift = nn.Parameter(torch.zeros(emb_dim))

        def forward(self, x):
            mean = x.mean(dim=-1, keepdim=True)
            var = x.var(dim=-1, keepdim=True, unbiased=False)
            norm_x = (x - mean) / torch.sqrt(var + self.eps)
            return self.scale * norm_x + self.shift

    class GELU(nn.Module):
        def __init__(self):
            super().__init__()

        def forward(self, x):
            return 0.5 * x * (1 + torch.tanh(
                torch.sqrt(torch.tensor(2.0 / torch.pi)) *
                (x + 0.044715 * torch.pow(x, 3))
            ))

    class FeedForward(nn.Module):
        def __init__(self, cfg):
            super().__init__()
            self.layers = nn.Sequential(
                nn.Linear(cfg["emb_dim"], 4 * cfg["emb_dim"]),
                GELU(),
                nn.Linear(4 * cfg["emb_dim"], cfg["emb_dim"]),
            )

        def forward(self, x):
            return self.layers(x)

    class TransformerBlock(nn.Module):
        def __init__(self, cfg):
            super().__init__()
            self.att = MultiHeadAttention(
                d_in=cfg["emb_dim"],
                d_out=cfg["emb_dim"],
                context_length=cfg["context_length"],
                num_heads=cfg["n_heads"],
                dropout=cfg["drop_rate"],
                qkv_bias=cfg["qkv_bias"])
            self.ff = FeedForward(cfg)
            self.norm1 = LayerNorm(cfg["emb_dim"])
            self.norm2 = LayerNorm(cfg["emb_dim"])
            self.drop_resid = nn.Dropout(cfg["drop_rate"])

        def forward(self, x):
            # Shortcut connection for attention block
            shortcut = x
            x = self.norm1(x)
            x = self.att(x)   # Shape [batch_size, num_tokens, emb_size]
            x = self.drop_resid(x)
            x = x + shortcut  # Add the original input back

            # Shortcut connection for feed-forward block
            shortcut = x
            x = self.norm2(x)
            x = self.ff(x)
            x = self.drop_resid(x)
            x = x + shortcut  # Add the original input back

            return x

    class GPTModel(nn.Module):
        def __init__(self, cfg):
            super().__init__()
            self.tok_emb = nn.Embedding(cfg["vocab_size"], cfg["emb_dim"])
            self.pos_emb = nn.Embedding(cfg["context_length"], cfg["emb_dim"])
            self.drop_emb = nn.Dropout(cfg["drop_rate"])

            self.trf_blocks = nn.Sequential(
                *[TransformerBlock(cfg) for _ in range(cfg["n_layers"])])

            self.final_norm = LayerNorm(cfg["emb_dim"])
            self.out_head = nn.Linear(cfg["emb_dim"], cfg["vocab_size"], bias=False)

        def forward(self, in_idx):
            batch_size, seq_len = in_idx.shape
            tok_embeds = self.tok_emb(in_idx)
            pos_embeds = self.pos_emb(torch.arange(seq_len, device=in_idx.device))
            x = tok_embeds + pos_embeds  # Shape [batch_size, num_tokens, emb_size]
            x = self.drop_emb(x)
            x = self.trf_blocks(x)
            x = self.final_norm(x)
            logits = self.out_head(x)
            return logits

    def generate_text_simple(model, idx, max_new_tokens, context_size):
        # idx is (B, T) array of indices in the current context
        for _ in range(max_new_tokens):

            # Crop current context if it exceeds the supported context size
            idx_cond = idx[:, -context_size:]

            # Get the predictions
            with torch.no_grad():
                logits = model(idx_cond)

            # Focus only on the last time step
            # (batch, n_token, vocab_size) becomes (batch, vocab_size)
            logits = logits[:, -1, :]

            # Get the idx of the vocab entry with the highest logits value
            idx_next = torch.argmax(logits, dim=-1, keepdim=True)  # (batch, 1)

            # Append sampled index to the running sequence
            idx = torch.cat((idx, idx_next), dim=1)  # (batch, n_tokens+1)

        return idx

    ######################
    # Bonus (ch03.py's PyTorchMultiHeadAttention, ch04.py's GPTModelFast)
    ######################

    class PyTorchMultiHeadAttention(nn.Module):
        def __init__(self, d_in, d_out, num_heads, dropout=0.0, qkv_bias=False):
            super().__init__()

            assert d_out % num_heads == 0, "d_out is indivisible by num_heads"

            self.num_heads = num_heads
            self.head_dim = d_out // num_heads
            self.d_out = d_out

            self.qkv = nn.Linear(d_in, 3 * d_out, bias=qkv_bias)
            self.proj = nn.Linear(d_out, d_out)
            self.dropout = dropout

        def forward(self, x):
            batch_size, num_tokens, embed_dim = x.shape

            # (b, num_tokens, embed_dim) --> (b, num_tokens, 3 * embed_dim)
            qkv = self.qkv(x)

            # (b, num_tokens, 3 * embed_dim) --> (b, num_tokens, 3, num_heads, head_dim)
            qkv = qkv.view(batch_size, num_tokens, 3, self.num_heads, self.head_dim)

            # (b, num_tokens, 3, num_heads, head_dim) --> (3, b, num_heads, num_tokens, head_dim)
            qkv = qkv.permute(2, 0, 3, 1, 4)

            # (3, b, num_heads, num_tokens, head_dim) -> 3 times (b, num_heads, num_tokens, head_dim)
            queries, keys, values = qkv

            use_dropout = 0. if not self.training else self.dropout

            context_vec = nn.functional.scaled_dot_product_attention(
                queries, keys, values, attn_mask=None, dropout_p=use_dropout, is_causal=True)

            # Combine heads, where self.d_out = self.num_heads * self.head_dim
            context_vec = context_vec.transpose(1, 2).contiguous().view(batch_size, num_tokens, self.d_out)

            context_vec = self.proj(context_vec)

            return context_vec

    class FeedForwardFast(nn.Module):
        def __init__(self, cfg):
            super().__init__()
            self.layers = nn.Sequential(
                nn.Linear(cfg["emb_dim"], 4 * cfg["emb_dim"]),
                nn.GELU(approximate="tanh"),
                nn.Linear(4 * cfg["emb_dim"], cfg["emb_dim"]),
            )

        def forward(self, x):
            return self.layers(x)

    class TransformerBlockFast(nn.Module):
        def __init__(self, cfg):
            super().__init__()
            self.att = PyTorchMultiHeadAttention(
                d_in=cfg["emb_dim"],
                d_out=cfg["emb_dim"],
                num_heads=cfg["n_heads"],
                dropout=cfg["drop_rate"],
                qkv_bias=cfg["qkv_bias"])
            self.ff = FeedForwardFast(cfg)
            self.norm1 = nn.LayerNorm(cfg["emb_dim"])
            self.norm2 = nn.LayerNorm(cfg["emb_dim"])
            self.drop_shortcut = nn.Dropout(cfg["drop_rate"])

        def forward(self, x):
            # Shortcut connection for attention block
            shortcut = x
            x = self.norm1(x)
            x = self.att(x)   # Shape [batch_size, num_tokens, emb_size]
            x = self.drop_shortcut(x)
            x = x + shortcut  # Add the original input back

            # Shortcut connection for feed-forward block
            shortcut = x
            x = self.norm2(x)
            x = self.ff(x)
            x = self.drop_shortcut(x)
            x = x + shortcut  # Add the original input back

            return x

    class GPTModelFast(nn.Module):
        def __init__(self, cfg):
            super().__init__()
            self.tok_emb = nn.Embedding(cfg["vocab_size"], cfg["emb_dim"])
            self.pos_emb = nn.Embedding(cfg["context_length"], cfg["emb_dim"])
            self.drop_emb = nn.Dropout(cfg["drop_rate"])

            self.trf_blocks = nn.Sequential(
                *[TransformerBlockFast(cfg) for _ in range(cfg["n_layers"])])

            self.final_norm = nn.LayerNorm(cfg["emb_dim"])
            self.out_head = nn.Linear(cfg["emb_dim"], cfg["vocab_size"], bias=False)

        def forward(self, in_idx):
            batch_size, seq_len = in_idx.shape
            tok_embeds = self.tok_emb(in_idx)
            pos_embeds = self.pos_emb(torch.arange(seq_len, device=in_idx.device))
            x = tok_embeds + pos_embeds
            x = self.drop_emb(x)
            x = self.trf_blocks(x)
            x = self.final_norm(x)
            logits = self.out_head(x)
            return logits

    return SimpleNamespace(**locals())


def ch05_code(torch):
    generate_text_simple = ch04_code(torch).generate_text_simple

    def generate(model, idx, max_new_tokens, context_size, temperature=0.0, top_k=None, eos_id=None):

        # For-loop is the same as before: Get logits, and only focus on last time step
        for _ in range(max_new_tokens):
            idx_cond = idx[:, -context_size:]
            with torch.no_grad():
                logits = model(idx_cond)
            logits = logits[:, -1, :]

            # New: Filter logits with top_k sampling
            if top_k is not None:
                # Keep only top_k values
                top_logits, _ = torch.topk(logits, top_k)
                min_val = top_logits[:, -1]
                logits = torch.where(logits < min_val, torch.tensor(float("-inf")).to(logits.device), logits)

            # New: Apply temperature scaling
            if temperature > 0.0:
                logits = logits / temperature

                # New (not in book): numerical stability tip to get equivalent results on mps device
                # subtract rowwise max before softmax
                logits = logits - logits.max(dim=-1, keepdim=True).values

                # Apply softmax to get probabilities
                probs = torch.softmax(logits, dim=-1)  # (batch_size, context_len)

                # Sample from the distribution
                idx_next = torch.multinomial(probs, num_samples=1)  # (batch_size, 1)

            # Otherwise same as before: get idx of the vocab entry with the highest logits value
            else:
                idx_next = torch.argmax(logits, dim=-1, keepdim=True)  # (batch_size, 1)

            if idx_next == eos_id:  # Stop generating early if end-of-sequence token is encountered
                break

            # Same as before: append sampled index to the running sequence
            idx = torch.cat((idx, idx_next), dim=1)  # (batch_size, num_tokens+1)

        return idx

    def train_model_simple(model, train_loader, val_loader, optimizer, device, num_epochs,
                           eval_freq, eval_iter, start_context, tokenizer):
        # Initialize lists to track losses and tokens seen
        train_losses, val_losses, track_tokens_seen = [], [], []
        tokens_seen, global_step = 0, -1

        # Main training loop
        for epoch in range(num_epochs):
            model.train()  # Set model to training mode

            for input_batch, target_batch in train_loader:
                optimizer.zero_grad()  # Reset loss gradients from previous batch iteration
                loss = calc_loss_batch(input_batch, target_batch, model, device)
                loss.backward()  # Calculate loss gradients
                optimizer.step()  # Update model weights using loss gradients
                tokens_seen += input_batch.numel()
                global_step += 1

                # Optional evaluation step
                if global_step % eval_freq == 0:
                    train_loss, val_loss = evaluate_model(
                        model, train_loader, val_loader, device, eval_iter)
                    train_losses.append(train_loss)
                    val_losses.append(val_loss)
                    track_tokens_seen.append(tokens_seen)
                    print(f"Ep {epoch+1} (Step {global_step:06d}): "
                          f"Train loss {train_loss:.3f}, Val loss {val_loss:.3f}")

            # Print a sample text after each epoch
            generate_and_print_sample(
                model, tokenizer, device, start_context
            )

        return train_losses, val_losses, track_tokens_seen

    def evaluate_model(model, train_loader, val_loader, device, eval_iter):
        model.eval()
        with torch.no_grad():
            train_loss = calc_loss_loader(train_loader, model, device, num_batches=eval_iter)
            val_loss = calc_loss_loader(val_loader, model, device, num_batches=eval_iter)
        model.train()
        return train_loss, val_loss

    def generate_and_print_sample(model, tokenizer, device, start_context):
        model.eval()
        context_size = model.pos_emb.weight.shape[0]
        encoded = text_to_token_ids(start_context, tokenizer).to(device)
        with torch.no_grad():
            token_ids = generate_text_simple(
                model=model, idx=encoded,
                max_new_tokens=8, context_size=context_size  # 50 in the book
            )
            decoded_text = token_ids_to_text(token_ids, tokenizer)
            print(decoded_text.replace("\n", " "))  # Compact print format
        model.train()

    def text_to_token_ids(text, tokenizer):
        encoded = tokenizer.encode(text, allowed_special={"<|endoftext|>"})
        encoded_tensor = torch.tensor(encoded).unsqueeze(0)  # add batch dimension
        return encoded_tensor

    def token_ids_to_text(token_ids, tokenizer):
        flat = token_ids.squeeze(0)  # remove batch dimension
        return tokenizer.decode(flat.tolist())

    def calc_loss_batch(input_batch, target_batch, model, device):
        input_batch, target_batch = input_batch.to(device), target_batch.to(device)
        logits = model(input_batch)
        loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1), target_batch.flatten())
        return loss

    def calc_loss_loader(data_loader, model, device, num_batches=None):
        total_loss = 0.
        if len(data_loader) == 0:
            return float("nan")
        elif num_batches is None:
            num_batches = len(data_loader)
        else:
            # Reduce the number of batches to match the total number of batches in the data loader
            num_batches = min(num_batches, len(data_loader))
        for i, (input_batch, target_batch) in enumerate(data_loader):
            if i < num_batches:
                loss = calc_loss_batch(input_batch, target_batch, model, device)
                total_loss += loss.item()
            else:
                break
        return total_loss / num_batches

    return SimpleNamespace(**locals())


def ch06_code(torch):
    Dataset = torch.utils.data.Dataset

    class SpamDataset(Dataset):
        def __init__(self, csv_file, tokenizer, max_length=None, pad_token_id=50256):
            self.data = csv_file  # pd.read_csv(csv_file) in the book: a dict of columns here

            # Pre-tokenize texts
            self.encoded_texts = [
                tokenizer.encode(text) for text in self.data["Text"]
            ]

            if max_length is None:
                self.max_length = self._longest_encoded_length()
            else:
                self.max_length = max_length
                # Truncate sequences if they are longer than max_length
                self.encoded_texts = [
                    encoded_text[:self.max_length]
                    for encoded_text in self.encoded_texts
                ]

            # Pad sequences to the longest sequence
            self.encoded_texts = [
                encoded_text + [pad_token_id] * (self.max_length - len(encoded_text))
                for encoded_text in self.encoded_texts
            ]

        def __getitem__(self, index):
            encoded = self.encoded_texts[index]
            label = self.data["Label"][index]  # self.data.iloc[index]["Label"]
            return (
                torch.tensor(encoded, dtype=torch.long),
                torch.tensor(label, dtype=torch.long)
            )

        def __len__(self):
            return len(self.data["Label"])

        def _longest_encoded_length(self):
            max_length = 0
            for encoded_text in self.encoded_texts:
                encoded_length = len(encoded_text)
                if encoded_length > max_length:
                    max_length = encoded_length
            return max_length

    def calc_accuracy_loader(data_loader, model, device, num_batches=None):
        model.eval()
        correct_predictions, num_examples = 0, 0

        if num_batches is None:
            num_batches = len(data_loader)
        else:
            num_batches = min(num_batches, len(data_loader))
        for i, (input_batch, target_batch) in enumerate(data_loader):
            if i < num_batches:
                input_batch, target_batch = input_batch.to(device), target_batch.to(device)

                with torch.no_grad():
                    logits = model(input_batch)[:, -1, :]  # Logits of last output token
                predicted_labels = torch.argmax(logits, dim=-1)

                num_examples += predicted_labels.shape[0]
                correct_predictions += (predicted_labels == target_batch).sum().item()
            else:
                break
        return correct_predictions / num_examples

    def calc_loss_batch(input_batch, target_batch, model, device):
        input_batch, target_batch = input_batch.to(device), target_batch.to(device)
        logits = model(input_batch)[:, -1, :]  # Logits of last output token
        loss = torch.nn.functional.cross_entropy(logits, target_batch)
        return loss

    def calc_loss_loader(data_loader, model, device, num_batches=None):
        total_loss = 0.
        if len(data_loader) == 0:
            return float("nan")
        elif num_batches is None:
            num_batches = len(data_loader)
        else:
            num_batches = min(num_batches, len(data_loader))
        for i, (input_batch, target_batch) in enumerate(data_loader):
            if i < num_batches:
                loss = calc_loss_batch(input_batch, target_batch, model, device)
                total_loss += loss.item()
            else:
                break
        return total_loss / num_batches

    def evaluate_model(model, train_loader, val_loader, device, eval_iter):
        model.eval()
        with torch.no_grad():
            train_loss = calc_loss_loader(train_loader, model, device, num_batches=eval_iter)
            val_loss = calc_loss_loader(val_loader, model, device, num_batches=eval_iter)
        model.train()
        return train_loss, val_loss

    def train_classifier_simple(model, train_loader, val_loader, optimizer, device, num_epochs,
                                eval_freq, eval_iter):
        # Initialize lists to track losses and examples seen
        train_losses, val_losses, train_accs, val_accs = [], [], [], []
        examples_seen, global_step = 0, -1

        # Main training loop
        for epoch in range(num_epochs):
            model.train()  # Set model to training mode

            for input_batch, target_batch in train_loader:
                optimizer.zero_grad()  # Reset loss gradients from previous batch iteration
                loss = calc_loss_batch(input_batch, target_batch, model, device)
                loss.backward()  # Calculate loss gradients
                optimizer.step()  # Update model weights using loss gradients
                examples_seen += input_batch.shape[0]  # New: track examples instead of tokens
                global_step += 1

                # Optional evaluation step
                if global_step % eval_freq == 0:
                    train_loss, val_loss = evaluate_model(
                        model, train_loader, val_loader, device, eval_iter)
                    train_losses.append(train_loss)
                    val_losses.append(val_loss)
                    print(f"Ep {epoch+1} (Step {global_step:06d}): "
                          f"Train loss {train_loss:.3f}, Val loss {val_loss:.3f}")

            # Calculate accuracy after each epoch
            train_accuracy = calc_accuracy_loader(train_loader, model, device, num_batches=eval_iter)
            val_accuracy = calc_accuracy_loader(val_loader, model, device, num_batches=eval_iter)
            print(f"Training accuracy: {train_accuracy*100:.2f}% | ", end="")
            print(f"Validation accuracy: {val_accuracy*100:.2f}%")
            train_accs.append(train_accuracy)
            val_accs.append(val_accuracy)

        return train_losses, val_losses, train_accs, val_accs, examples_seen

    def classify_review(text, model, tokenizer, device, max_length=None, pad_token_id=50256):
        model.eval()

        # Prepare inputs to the model
        input_ids = tokenizer.encode(text)
        supported_context_length = model.pos_emb.weight.shape[0]

        # Truncate sequences if they too long
        input_ids = input_ids[:min(max_length, supported_context_length)]

        # Pad sequences to the longest sequence
        input_ids += [pad_token_id] * (max_length - len(input_ids))
        input_tensor = torch.tensor(input_ids, device=device).unsqueeze(0)  # add batch dimension

        # Model inference
        with torch.no_grad():
            logits = model(input_tensor)[:, -1, :]  # Logits of the last output token
        predicted_label = torch.argmax(logits, dim=-1).item()

        # Return the classified result
        return "spam" if predicted_label == 1 else "not spam"

    return SimpleNamespace(**locals())


def ch07_code(torch):
    Dataset = torch.utils.data.Dataset

    def format_input(entry):
        instruction_text = (
            f"Below is an instruction that describes a task. "
            f"Write a response that appropriately completes the request."
            f"\n\n### Instruction:\n{entry['instruction']}"
        )

        input_text = f"\n\n### Input:\n{entry['input']}" if entry["input"] else ""

        return instruction_text + input_text

    class InstructionDataset(Dataset):
        def __init__(self, data, tokenizer):
            self.data = data

            # Pre-tokenize texts
            self.encoded_texts = []
            for entry in data:
                instruction_plus_input = format_input(entry)
                response_text = f"\n\n### Response:\n{entry['output']}"
                full_text = instruction_plus_input + response_text
                self.encoded_texts.append(
                    tokenizer.encode(full_text)
                )

        def __getitem__(self, index):
            return self.encoded_texts[index]

        def __len__(self):
            return len(self.data)

    def custom_collate_fn(
        batch,
        pad_token_id=50256,
        ignore_index=-100,
        allowed_max_length=None,
        device="cpu"
    ):
        # Find the longest sequence in the batch
        batch_max_length = max(len(item)+1 for item in batch)

        # Pad and prepare inputs and targets
        inputs_lst, targets_lst = [], []

        for item in batch:
            new_item = item.copy()
            # Add an <|endoftext|> token
            new_item += [pad_token_id]
            # Pad sequences to max_length
            padded = (
                new_item + [pad_token_id] *
                (batch_max_length - len(new_item))
            )
            inputs = torch.tensor(padded[:-1])  # Truncate the last token for inputs
            targets = torch.tensor(padded[1:])  # Shift +1 to the right for targets

            # New: Replace all but the first padding tokens in targets by ignore_index
            mask = targets == pad_token_id
            indices = torch.nonzero(mask).squeeze()
            if indices.numel() > 1:
                targets[indices[1:]] = ignore_index

            # New: Optionally truncate to maximum sequence length
            if allowed_max_length is not None:
                inputs = inputs[:allowed_max_length]
                targets = targets[:allowed_max_length]

            inputs_lst.append(inputs)
            targets_lst.append(targets)

        # Convert list of inputs and targets to tensors and transfer to target device
        inputs_tensor = torch.stack(inputs_lst).to(device)
        targets_tensor = torch.stack(targets_lst).to(device)

        return inputs_tensor, targets_tensor

    return SimpleNamespace(**locals())


def ch06_bonus_code(torch, pad_token_id):
    """ch06/02_bonus_additional-experiments/additional_experiments.py (``pad_token_id``: 50256 there)."""
    F = torch.nn.functional

    class LoRALayer(torch.nn.Module):
        def __init__(self, in_dim, out_dim, rank, alpha):
            super().__init__()
            self.A = torch.nn.Parameter(torch.empty(in_dim, rank))
            torch.nn.init.kaiming_uniform_(self.A, a=math.sqrt(5))
            self.B = torch.nn.Parameter(torch.zeros(rank, out_dim))
            self.alpha = alpha

        def forward(self, x):
            x = self.alpha * (x @ self.A @ self.B)
            return x

    class LinearWithLoRA(torch.nn.Module):
        def __init__(self, linear, rank, alpha):
            super().__init__()
            self.linear = linear
            self.lora = LoRALayer(
                linear.in_features, linear.out_features, rank, alpha
            )

        def forward(self, x):
            return self.linear(x) + self.lora(x)

    # This LoRA code is equivalent to LinearWithLoRA
    class LinearWithLoRAMerged(torch.nn.Module):
        def __init__(self, linear, rank, alpha):
            super().__init__()
            self.linear = linear
            self.lora = LoRALayer(
                linear.in_features, linear.out_features, rank, alpha
            )

        def forward(self, x):
            lora = self.lora.A @ self.lora.B
            combined_weight = self.linear.weight + self.lora.alpha*lora.T
            return F.linear(x, combined_weight, self.linear.bias)

    def replace_linear_with_lora(model, rank, alpha, alternative=False):
        for name, module in model.named_children():
            if isinstance(module, torch.nn.Linear):
                # Replace the Linear layer with LinearWithLoRA
                if alternative:
                    setattr(model, name, LinearWithLoRAMerged(module, rank, alpha))
                else:
                    setattr(model, name, LinearWithLoRA(module, rank, alpha))
            else:
                # Recursively apply the same function to child modules
                replace_linear_with_lora(module, rank, alpha)

    def calc_loss_batch(input_batch, target_batch, model, device,
                        trainable_token_pos=-1, ignore_index=-100, average_embeddings=False):
        input_batch, target_batch = input_batch.to(device), target_batch.to(device)

        if trainable_token_pos == "flexible":  # Selects the last tokens before the padding tokens
            # Find the last non-padding token for each sequence in the batch
            mask = input_batch != pad_token_id
            last_token_pos = mask.sum(dim=1) - 1  # Get position of last real token

            # Get model outputs
            logits = model(input_batch)  # shape: [batch_size, seq_len, num_classes]

            # Select the logits corresponding to the last real token of each sequence
            batch_size = logits.size(0)
            selected_logits = logits[torch.arange(batch_size), last_token_pos]

            loss = torch.nn.functional.cross_entropy(selected_logits, target_batch)
            return loss

        else:
            model_output = model(input_batch)
            if average_embeddings:
                # Average over the sequence dimension (dim=1)
                logits = model_output.mean(dim=1)
            else:
                # Select embeddings at the specified token position
                logits = model_output[:, trainable_token_pos, :]

            loss = torch.nn.functional.cross_entropy(logits, target_batch, ignore_index=ignore_index)
            return loss

    @torch.no_grad()  # Disable gradient tracking for efficiency
    def calc_accuracy_loader(data_loader, model, device, num_batches=None,
                             trainable_token_pos=-1, average_embeddings=False):
        model.eval()
        correct_predictions, num_examples = 0, 0

        if num_batches is None:
            num_batches = len(data_loader)
        else:
            num_batches = min(num_batches, len(data_loader))

        if trainable_token_pos == "flexible":
            for i, (input_batch, target_batch) in enumerate(data_loader):
                if i < num_batches:
                    input_batch, target_batch = input_batch.to(device), target_batch.to(device)

                    # Find the last non-padding token for each sequence in the batch
                    mask = input_batch != pad_token_id
                    last_token_pos = mask.sum(dim=1) - 1  # Get position of last real token

                    logits = model(input_batch)  # Logits of last output token
                    # Select the logits corresponding to the last real token of each sequence
                    batch_size = logits.size(0)
                    selected_logits = logits[torch.arange(batch_size), last_token_pos]
                    predicted_labels = torch.argmax(selected_logits, dim=-1)

                    num_examples += predicted_labels.shape[0]
                    correct_predictions += (predicted_labels == target_batch).sum().item()
                else:
                    break

        else:
            for i, (input_batch, target_batch) in enumerate(data_loader):
                if i < num_batches:
                    input_batch, target_batch = input_batch.to(device), target_batch.to(device)

                    model_output = model(input_batch)
                    if average_embeddings:
                        # Average over the sequence dimension (dim=1)
                        logits = model_output.mean(dim=1)
                    else:
                        # Select embeddings at the specified token position
                        logits = model_output[:, trainable_token_pos, :]

                    predicted_labels = torch.argmax(logits, dim=-1)

                    num_examples += predicted_labels.shape[0]
                    correct_predictions += (predicted_labels == target_batch).sum().item()
                else:
                    break
        return correct_predictions / num_examples

    def train_classifier_simple(model, train_loader, val_loader, optimizer, device, num_epochs,
                                eval_freq, eval_iter, max_steps=None, trainable_token_pos=-1,
                                accumulation_steps=1, ignore_index=-100, average_embeddings=False):
        # (the script's evaluate_model/calc_loss_loader reporting is left out: it only prints)
        train_accs, examples_seen, global_step = [], 0, -1

        # Main training loop
        for epoch in range(num_epochs):
            model.train()  # Set model to training mode

            for batch_idx, (input_batch, target_batch) in enumerate(train_loader):
                loss = calc_loss_batch(
                    input_batch, target_batch, model, device,
                    trainable_token_pos=trainable_token_pos, ignore_index=ignore_index,
                    average_embeddings=average_embeddings
                )

                # Use gradient accumulation if accumulation_steps > 1
                loss /= accumulation_steps

                loss.backward()  # Calculate loss gradients

                # Use gradient accumulation if accumulation_steps > 1
                is_update_step = ((batch_idx + 1) % accumulation_steps == 0) or ((batch_idx + 1) == len(train_loader))
                if is_update_step:
                    optimizer.step()  # Update model weights using loss gradients
                    optimizer.zero_grad()  # Reset loss gradients from previous batch iteration

                examples_seen += input_batch.shape[0]  # New: track examples instead of tokens
                global_step += 1

                if max_steps is not None and global_step > max_steps:
                    break

            train_accs.append(calc_accuracy_loader(
                train_loader, model, device, num_batches=eval_iter,
                trainable_token_pos=trainable_token_pos, average_embeddings=average_embeddings
            ))

        return train_accs, examples_seen

    return SimpleNamespace(**locals())


def dpo_code(torch):
    """ch07/04_preference-tuning-with-dpo/dpo-from-scratch.ipynb."""
    Dataset = torch.utils.data.Dataset
    F = torch.nn.functional
    format_input = ch07_code(torch).format_input

    class PreferenceDataset(Dataset):
        def __init__(self, data, tokenizer):
            self.data = data

            # Pre-tokenize texts
            self.encoded_texts = []
            for entry in data:
                prompt = format_input(entry)
                rejected_response = entry["rejected"]
                chosen_response = entry["chosen"]

                prompt_tokens = tokenizer.encode(prompt)
                chosen_full_text = f"{prompt}\n\n### Response:\n{chosen_response}"
                rejected_full_text = f"{prompt}\n\n### Response:\n{rejected_response}"
                chosen_full_tokens = tokenizer.encode(chosen_full_text)
                rejected_full_tokens = tokenizer.encode(rejected_full_text)

                self.encoded_texts.append({
                    "prompt": prompt_tokens,
                    "chosen": chosen_full_tokens,
                    "rejected": rejected_full_tokens,
                })

        def __getitem__(self, index):
            return self.encoded_texts[index]

        def __len__(self):
            return len(self.data)

    def custom_collate_fn(
        batch,
        pad_token_id=50256,
        allowed_max_length=None,
        mask_prompt_tokens=True,
        device="cpu"
    ):
        # Initialize lists to hold batch data
        batch_data = {
            "prompt": [],
            "chosen": [],
            "rejected": [],
            "rejected_mask": [],
            "chosen_mask": []

        }

        # Determine the longest sequence to set a common padding length
        max_length_common = 0
        if batch:
            for key in ["chosen", "rejected"]:
                current_max = max(len(item[key])+1 for item in batch)
                max_length_common = max(max_length_common, current_max)

        # Process each item in the batch
        for item in batch:
            prompt = torch.tensor(item["prompt"])
            batch_data["prompt"].append(prompt)

            for key in ["chosen", "rejected"]:
                # Adjust padding according to the common maximum length
                sequence = item[key]
                padded = sequence + [pad_token_id] * (max_length_common - len(sequence))
                mask = torch.ones(len(padded)).bool()

                # Set mask for all padding tokens to False
                mask[len(sequence):] = False

                # Set mask for all input tokens to False
                # +2 sets the 2 newline ("\n") tokens before "### Response" to False
                if mask_prompt_tokens:
                    mask[:prompt.shape[0]+2] = False

                batch_data[key].append(torch.tensor(padded))
                batch_data[f"{key}_mask"].append(mask)

        # Final processing
        for key in ["chosen", "rejected", "chosen_mask", "rejected_mask"]:
            # Stack all sequences into a tensor for the given key
            tensor_stack = torch.stack(batch_data[key])

            # Optionally truncate to maximum sequence length
            if allowed_max_length is not None:
                tensor_stack = tensor_stack[:, :allowed_max_length]

            # Move to the specified device
            batch_data[key] = tensor_stack.to(device)

        return batch_data

    def compute_dpo_loss(
          model_chosen_logprobs,
          model_rejected_logprobs,
          reference_chosen_logprobs,
          reference_rejected_logprobs,
          beta=0.1,
        ):
        model_logratios = model_chosen_logprobs - model_rejected_logprobs
        reference_logratios = reference_chosen_logprobs - reference_rejected_logprobs
        logits = model_logratios - reference_logratios

        # DPO (Eq. 7 of https://arxiv.org/pdf/2305.18290.pdf)
        losses = -F.logsigmoid(beta * logits)

        # Optional values to track progress during training
        chosen_rewards = (model_chosen_logprobs - reference_chosen_logprobs).detach()
        rejected_rewards = (model_rejected_logprobs - reference_rejected_logprobs).detach()

        # .mean() to average over the samples in the batch
        return losses.mean(), chosen_rewards.mean(), rejected_rewards.mean()

    def compute_logprobs(logits, labels, selection_mask=None):
        # Labels are the inputs shifted by one
        labels = labels[:, 1:].clone()

        # Truncate logits to match the labels num_tokens
        logits = logits[:, :-1, :]

        log_probs = F.log_softmax(logits, dim=-1)

        # Gather the log probabilities for the actual labels
        selected_log_probs = torch.gather(
            input=log_probs,
            dim=-1,
            index=labels.unsqueeze(-1)
        ).squeeze(-1)

        if selection_mask is not None:
            mask = selection_mask[:, 1:].clone()

            # Apply the mask to filter out padding tokens
            selected_log_probs = selected_log_probs * mask

            # Calculate the average log probability excluding padding tokens
            # This averages over the tokens, so the shape is (batch_size,)
            avg_log_prob = selected_log_probs.sum(-1) / mask.sum(-1)

            return avg_log_prob

        else:
            return selected_log_probs.mean(-1)

    def compute_dpo_loss_batch(batch, policy_model, reference_model, beta):
        """Compute the DPO loss on an input batch"""

        # where policy_model(batch["chosen"]) are the logits
        policy_chosen_log_probas = compute_logprobs(
            logits=policy_model(batch["chosen"]),
            labels=batch["chosen"],
            selection_mask=batch["chosen_mask"]
        )
        policy_rejected_log_probas = compute_logprobs(
            logits=policy_model(batch["rejected"]),
            labels=batch["rejected"],
            selection_mask=batch["rejected_mask"]
        )

        with torch.no_grad():
            ref_chosen_log_probas = compute_logprobs(
                logits=reference_model(batch["chosen"]),
                labels=batch["chosen"],
                selection_mask=batch["chosen_mask"]
            )
            ref_rejected_log_probas = compute_logprobs(
                logits=reference_model(batch["rejected"]),
                labels=batch["rejected"],
                selection_mask=batch["rejected_mask"]
            )
        loss, chosen_rewards, rejected_rewards = compute_dpo_loss(
            model_chosen_logprobs=policy_chosen_log_probas,
            model_rejected_logprobs=policy_rejected_log_probas,
            reference_chosen_logprobs=ref_chosen_log_probas,
            reference_rejected_logprobs=ref_rejected_log_probas,
            beta=beta
        )
        return loss, chosen_rewards, rejected_rewards

    def compute_dpo_loss_loader(data_loader, policy_model, reference_model, beta, num_batches=None):
        """Apply compute_dpo_loss_batch to a whole data loader"""

        total_loss, total_chosen_rewards, total_rejected_rewards = 0., 0., 0.
        if len(data_loader) == 0:
            return float("nan")

        elif num_batches is None:
            num_batches = len(data_loader)
        else:
            num_batches = min(num_batches, len(data_loader))
        for i, batch in enumerate(data_loader):
            if i < num_batches:
                loss, chosen_rewards, rejected_rewards = compute_dpo_loss_batch(
                    batch=batch,
                    policy_model=policy_model,
                    reference_model=reference_model,
                    beta=beta
                )
                total_loss += loss.item()
                total_chosen_rewards += chosen_rewards.item()
                total_rejected_rewards += rejected_rewards.item()

            else:
                break

        # calculate average
        total_loss /= num_batches
        total_chosen_rewards /= num_batches
        total_rejected_rewards /= num_batches
        return total_loss, total_chosen_rewards, total_rejected_rewards

    def evaluate_dpo_loss_loader(policy_model, reference_model, train_loader, val_loader, beta, eval_iter):
        """Compute the DPO loss for the training and validation dataset"""

        policy_model.eval()
        with torch.no_grad():
            train_loss, train_chosen_rewards, train_rejected_rewards = compute_dpo_loss_loader(
                data_loader=train_loader,
                policy_model=policy_model,
                reference_model=reference_model,
                beta=beta,
                num_batches=eval_iter
            )

            val_loss, val_chosen_rewards, val_rejected_rewards = compute_dpo_loss_loader(
                data_loader=val_loader,
                policy_model=policy_model,
                reference_model=reference_model,
                beta=beta,
                num_batches=eval_iter
            )

        res = {
            "train_loss": train_loss,
            "train_chosen_reward": train_chosen_rewards,
            "train_rejected_reward": train_rejected_rewards,
            "val_loss": val_loss,
            "val_chosen_reward": val_chosen_rewards,
            "val_rejected_reward": val_rejected_rewards
        }

        policy_model.train()
        return res

    generate_and_print_sample = ch05_code(torch).generate_and_print_sample

    def train_model_dpo_simple(
        policy_model, reference_model, train_loader, val_loader,
        optimizer, num_epochs, beta,
        eval_freq, eval_iter, start_context, tokenizer
    ):
        model = policy_model  # the notebook's global `model` is the policy model

        # Initialize lists to track losses and tokens seen
        tracking = {
            "train_losses": [],
            "train_chosen_rewards": [],
            "train_rejected_rewards": [],
            "val_losses": [],
            "val_chosen_rewards": [],
            "val_rejected_rewards": [],
            "tokens_seen": []
        }
        tokens_seen, global_step = 0, -1

        # Main training loop
        for epoch in range(num_epochs):
            policy_model.train()  # Set model to training mode

            for batch in train_loader:

                optimizer.zero_grad()  # Reset loss gradients from previous batch iteration

                loss, chosen_rewards, rejected_rewards = compute_dpo_loss_batch(
                    batch=batch,
                    policy_model=policy_model,
                    reference_model=reference_model,
                    beta=beta
                )

                loss.backward()  # Calculate loss gradients
                optimizer.step()  # Update model weights using loss gradients

                tokens_seen += batch["chosen"].numel()
                global_step += 1

                # Optional evaluation step
                if global_step % eval_freq == 0:
                    res = evaluate_dpo_loss_loader(
                        policy_model=policy_model,
                        reference_model=reference_model,
                        train_loader=train_loader,
                        val_loader=val_loader,
                        beta=beta,
                        eval_iter=eval_iter
                    )
                    tracking["train_losses"].append(res["train_loss"])
                    tracking["train_chosen_rewards"].append(res["train_chosen_reward"])
                    tracking["train_rejected_rewards"].append(res["train_rejected_reward"])
                    tracking["val_losses"].append(res["val_loss"])
                    tracking["val_chosen_rewards"].append(res["val_chosen_reward"])
                    tracking["val_rejected_rewards"].append(res["val_rejected_reward"])
                    tracking["tokens_seen"].append(tokens_seen)
                    train_reward_margin = res["train_chosen_reward"] - res["train_rejected_reward"]
                    val_reward_margin = res["val_chosen_reward"] - res["val_rejected_reward"]

                    print(
                        f"Ep {epoch+1} (Step {global_step:06d}): "
                        f"Train loss {res['train_loss']:.3f}, Val loss {res['val_loss']:.3f}, "
                        f"Train reward margins {train_reward_margin:.3f}, "
                        f"Val reward margins {val_reward_margin:.3f}"
                    )

            # Print a sample text after each epoch
            generate_and_print_sample(
                model=model,
                tokenizer=tokenizer,
                device=loss.device,
                start_context=start_context
            )

        return tracking

    return SimpleNamespace(**locals())


def appendix_d_code(torch):
    c5 = ch05_code(torch)
    calc_loss_batch, evaluate_model, generate_and_print_sample = (
        c5.calc_loss_batch, c5.evaluate_model, c5.generate_and_print_sample)

    def find_highest_gradient(model):
        max_grad = None
        for param in model.parameters():
            if param.grad is not None:
                grad_values = param.grad.data.flatten()
                max_grad_param = grad_values.max()
                if max_grad is None or max_grad_param > max_grad:
                    max_grad = max_grad_param
        return max_grad

    def train_model(model, train_loader, val_loader, optimizer, device,
                    n_epochs, eval_freq, eval_iter, start_context, tokenizer,
                    warmup_steps, initial_lr=3e-05, min_lr=1e-6, orig_book_version=False):

        train_losses, val_losses, track_tokens_seen, track_lrs = [], [], [], []
        tokens_seen, global_step = 0, -1

        # Retrieve the maximum learning rate from the optimizer
        peak_lr = optimizer.param_groups[0]["lr"]

        # Calculate the total number of iterations in the training process
        total_training_steps = len(train_loader) * n_epochs

        # Calculate the learning rate increment during the warmup phase
        lr_increment = (peak_lr - initial_lr) / warmup_steps

        for epoch in range(n_epochs):
            model.train()
            for input_batch, target_batch in train_loader:
                optimizer.zero_grad()
                global_step += 1

                # Adjust the learning rate based on the current phase (warmup or cosine annealing)
                if global_step < warmup_steps:
                    # Linear warmup
                    lr = initial_lr + global_step * lr_increment
                else:
                    # Cosine annealing after warmup
                    progress = ((global_step - warmup_steps) /
                                (total_training_steps - warmup_steps))
                    lr = min_lr + (peak_lr - min_lr) * 0.5 * (1 + math.cos(math.pi * progress))

                # Apply the calculated learning rate to the optimizer
                for param_group in optimizer.param_groups:
                    param_group["lr"] = lr
                track_lrs.append(lr)  # Store the current learning rate

                # Calculate and backpropagate the loss
                loss = calc_loss_batch(input_batch, target_batch, model, device)
                loss.backward()

                # Apply gradient clipping after the warmup phase to avoid exploding gradients
                if orig_book_version:
                    if global_step > warmup_steps:
                        torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=1.0)
                else:
                    if global_step >= warmup_steps:  # the book originally used global_step > warmup_steps
                        torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=1.0)

                optimizer.step()
                tokens_seen += input_batch.numel()

                # Periodically evaluate the model on the training and validation sets
                if global_step % eval_freq == 0:
                    train_loss, val_loss = evaluate_model(
                        model, train_loader, val_loader,
                        device, eval_iter
                    )
                    train_losses.append(train_loss)
                    val_losses.append(val_loss)
                    track_tokens_seen.append(tokens_seen)
                    # Print the current losses
                    print(f"Ep {epoch+1} (Iter {global_step:06d}): "
                          f"Train loss {train_loss:.3f}, "
                          f"Val loss {val_loss:.3f}")

            # Generate and print a sample from the model to monitor progress
            generate_and_print_sample(
                model, tokenizer, device, start_context
            )

        return train_losses, val_losses, track_tokens_seen, track_lrs

    return SimpleNamespace(**locals())


def appendix_e_code(torch):
    class LoRALayer(torch.nn.Module):
        def __init__(self, in_dim, out_dim, rank, alpha):
            super().__init__()
            self.A = torch.nn.Parameter(torch.empty(in_dim, rank))
            torch.nn.init.kaiming_uniform_(self.A, a=math.sqrt(5))  # similar to standard weight initialization
            self.B = torch.nn.Parameter(torch.zeros(rank, out_dim))
            self.alpha = alpha
            self.rank = rank

        def forward(self, x):

            x = (self.alpha / self.rank) * (x @ self.A @ self.B)
            return x

    class LinearWithLoRA(torch.nn.Module):
        def __init__(self, linear, rank, alpha):
            super().__init__()
            self.linear = linear
            self.lora = LoRALayer(
                linear.in_features, linear.out_features, rank, alpha
            )

        def forward(self, x):
            return self.linear(x) + self.lora(x)

    def replace_linear_with_lora(model, rank, alpha):
        for name, module in model.named_children():
            if isinstance(module, torch.nn.Linear):
                # Replace the Linear layer with LinearWithLoRA
                setattr(model, name, LinearWithLoRA(module, rank, alpha))
            else:
                # Recursively apply the same function to child modules
                replace_linear_with_lora(module, rank, alpha)

    return SimpleNamespace(**locals())


def kv_cache_code(torch):
    """ch04/03_kv-cache/gpt_with_kv_cache.py (LayerNorm, GELU and FeedForward as in ch04)."""
    nn = torch.nn
    c4 = ch04_code(torch)
    LayerNorm, FeedForward = c4.LayerNorm, c4.FeedForward
    generate_text_simple = c4.generate_text_simple

    class MultiHeadAttention(nn.Module):
        def __init__(self, d_in, d_out, context_length, dropout, num_heads, qkv_bias=False):
            super().__init__()
            assert d_out % num_heads == 0, "d_out must be divisible by num_heads"

            self.d_out = d_out
            self.num_heads = num_heads
            self.head_dim = d_out // num_heads  # Reduce the projection dim to match desired output dim

            self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)
            self.W_key = nn.Linear(d_in, d_out, bias=qkv_bias)
            self.W_value = nn.Linear(d_in, d_out, bias=qkv_bias)
            self.out_proj = nn.Linear(d_out, d_out)  # Linear layer to combine head outputs
            self.dropout = nn.Dropout(dropout)
            self.register_buffer(
                "mask",
                torch.triu(torch.ones(context_length, context_length), diagonal=1),
                persistent=False
            )

            ####################################################
            # NEW
            self.register_buffer("cache_k", None, persistent=False)
            self.register_buffer("cache_v", None, persistent=False)
            ####################################################

        def forward(self, x, use_cache=False):
            b, num_tokens, d_in = x.shape

            keys_new = self.W_key(x)  # Shape: (b, num_tokens, d_out)
            values_new = self.W_value(x)
            queries = self.W_query(x)

            keys_new = keys_new.view(b, num_tokens, self.num_heads, self.head_dim)
            values_new = values_new.view(b, num_tokens, self.num_heads, self.head_dim)
            queries = queries.view(b, num_tokens, self.num_heads, self.head_dim)

            ####################################################
            # NEW
            if use_cache:
                if self.cache_k is None:
                    self.cache_k, self.cache_v = keys_new, values_new
                else:
                    self.cache_k = torch.cat([self.cache_k, keys_new], dim=1)
                    self.cache_v = torch.cat([self.cache_v, values_new], dim=1)
                keys, values = self.cache_k, self.cache_v
            else:
                keys, values = keys_new, values_new
            ####################################################

            keys = keys.transpose(1, 2)
            queries = queries.transpose(1, 2)
            values = values.transpose(1, 2)

            attn_scores = queries @ keys.transpose(2, 3)  # Dot product for each head

            # Original mask truncated to the number of tokens and converted to boolean
            mask_bool = self.mask.bool()[:num_tokens, :num_tokens]

            # Use the mask to fill attention scores
            attn_scores.masked_fill_(mask_bool, -torch.inf)

            attn_weights = torch.softmax(attn_scores / keys.shape[-1]**0.5, dim=-1)
            attn_weights = self.dropout(attn_weights)

            context_vec = (attn_weights @ values).transpose(1, 2)

            context_vec = context_vec.contiguous().view(b, num_tokens, self.d_out)
            context_vec = self.out_proj(context_vec)  # optional projection

            return context_vec

        ####################################################
        # NEW
        def reset_cache(self):
            self.cache_k, self.cache_v = None, None
        ####################################################

    class TransformerBlock(nn.Module):
        def __init__(self, cfg):
            super().__init__()
            self.att = MultiHeadAttention(
                d_in=cfg["emb_dim"],
                d_out=cfg["emb_dim"],
                context_length=cfg["context_length"],
                num_heads=cfg["n_heads"],
                dropout=cfg["drop_rate"],
                qkv_bias=cfg["qkv_bias"])
            self.ff = FeedForward(cfg)
            self.norm1 = LayerNorm(cfg["emb_dim"])
            self.norm2 = LayerNorm(cfg["emb_dim"])
            self.drop_shortcut = nn.Dropout(cfg["drop_rate"])

        def forward(self, x, use_cache=False):
            # Shortcut connection for attention block
            shortcut = x
            x = self.norm1(x)

            ####################################################
            # NEW
            x = self.att(x, use_cache=use_cache)
            ####################################################

            x = self.drop_shortcut(x)
            x = x + shortcut  # Add the original input back

            # Shortcut connection for feed-forward block
            shortcut = x
            x = self.norm2(x)
            x = self.ff(x)
            x = self.drop_shortcut(x)
            x = x + shortcut  # Add the original input back

            return x

    class GPTModel(nn.Module):
        def __init__(self, cfg):
            super().__init__()
            self.tok_emb = nn.Embedding(cfg["vocab_size"], cfg["emb_dim"])
            self.pos_emb = nn.Embedding(cfg["context_length"], cfg["emb_dim"])
            self.drop_emb = nn.Dropout(cfg["drop_rate"])

            ####################################################
            # NEW
            self.trf_blocks = nn.ModuleList(
                [TransformerBlock(cfg) for _ in range(cfg["n_layers"])])

            self.current_pos = 0
            ####################################################

            self.final_norm = LayerNorm(cfg["emb_dim"])
            self.out_head = nn.Linear(cfg["emb_dim"], cfg["vocab_size"], bias=False)

        def forward(self, in_idx, use_cache=False):
            batch_size, seq_len = in_idx.shape
            tok_embeds = self.tok_emb(in_idx)

            ####################################################
            # NEW

            if use_cache:
                pos_ids = torch.arange(self.current_pos, self.current_pos + seq_len, device=in_idx.device,
                                       dtype=torch.long)
                self.current_pos += seq_len
            else:
                pos_ids = torch.arange(0, seq_len, device=in_idx.device, dtype=torch.long)
            pos_embeds = self.pos_emb(pos_ids).unsqueeze(0)
            ####################################################

            x = tok_embeds + pos_embeds  # Shape [batch_size, num_tokens, emb_size]
            x = self.drop_emb(x)

            ####################################################
            # NEW
            for blk in self.trf_blocks:
                x = blk(x, use_cache=use_cache)
            ####################################################

            x = self.final_norm(x)
            logits = self.out_head(x)
            return logits

        ####################################################
        # NEW
        def reset_kv_cache(self):
            for blk in self.trf_blocks:
                blk.att.reset_cache()
            self.current_pos = 0
        ####################################################

    ####################################################
    # NEW
    def generate_text_simple_cached(model, idx, max_new_tokens):
        model.eval()
        model.reset_kv_cache()

        # Init cache with full prompt
        logits = model(idx, use_cache=True)

        for _ in range(max_new_tokens):
            last_logits = logits[:, -1]
            next_idx = last_logits.argmax(dim=-1, keepdim=True)
            idx = torch.cat([idx, next_idx], dim=1)

            logits = model(next_idx, use_cache=True)

        return idx
    ####################################################

    return SimpleNamespace(**locals())


def kv_cache_optimized_code(torch):
    """ch04/03_kv-cache/gpt_with_kv_cache_optimized.py: a preallocated cache written in place, a sliding window."""
    nn = torch.nn
    c4 = ch04_code(torch)
    LayerNorm, FeedForward = c4.LayerNorm, c4.FeedForward

    class MultiHeadAttention(nn.Module):
        def __init__(self, d_in, d_out, context_length, dropout, num_heads, qkv_bias=False, max_seq_len=None,
                     window_size=None):
            super().__init__()
            assert d_out % num_heads == 0, "d_out must be divisible by num_heads"

            self.d_out = d_out
            self.num_heads = num_heads
            self.head_dim = d_out // num_heads  # Reduce the projection dim to match desired output dim

            self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)
            self.W_key = nn.Linear(d_in, d_out, bias=qkv_bias)
            self.W_value = nn.Linear(d_in, d_out, bias=qkv_bias)
            self.out_proj = nn.Linear(d_out, d_out)  # Linear layer to combine head outputs
            self.dropout = nn.Dropout(dropout)

            ####################################################
            # NEW
            self.max_seq_len = max_seq_len or context_length
            self.window_size = window_size or self.max_seq_len
            self.register_buffer("cache_k", None, persistent=False)
            self.register_buffer("cache_v", None, persistent=False)
            ####################################################

        def forward(self, x, use_cache=False):
            b, num_tokens, d_in = x.shape

            keys_new = self.W_key(x)  # Shape: (b, num_tokens, d_out)
            values_new = self.W_value(x)
            queries = self.W_query(x)

            keys_new = keys_new.view(b, num_tokens, self.num_heads, self.head_dim)
            values_new = values_new.view(b, num_tokens, self.num_heads, self.head_dim)
            queries = queries.view(b, num_tokens, self.num_heads, self.head_dim)

            keys_new = keys_new.transpose(1, 2)
            values_new = values_new.transpose(1, 2)
            queries = queries.transpose(1, 2)

            ####################################################
            # NEW
            if use_cache:
                if self.cache_k is None or self.cache_k.size(0) != b:
                    self.cache_k = torch.zeros(b, self.num_heads,
                                               self.window_size, self.head_dim,
                                               device=x.device)
                    self.cache_v = torch.zeros_like(self.cache_k)
                    self.ptr_cur = 0  # pointer to next free slot

                # if incoming chunk would overflow discard oldest tokens
                if self.ptr_cur + num_tokens > self.window_size:
                    overflow = self.ptr_cur + num_tokens - self.window_size
                    # shift everything left by `overflow` (cheap view-copy)
                    self.cache_k[:, :, :-overflow, :] = self.cache_k[:, :, overflow:, :].clone()
                    self.cache_v[:, :, :-overflow, :] = self.cache_v[:, :, overflow:, :].clone()
                    self.ptr_cur -= overflow  # pointer after shift

                self.cache_k[:, :, self.ptr_cur:self.ptr_cur + num_tokens, :] = keys_new
                self.cache_v[:, :, self.ptr_cur:self.ptr_cur + num_tokens, :] = values_new
                self.ptr_cur += num_tokens

                keys = self.cache_k[:, :, :self.ptr_cur, :]
                values = self.cache_v[:, :, :self.ptr_cur, :]
            else:
                keys, values = keys_new, values_new
                self.ptr_cur = 0  # keep pointer sane if you interleave modes
            ####################################################

            attn_scores = queries @ keys.transpose(2, 3)  # Dot product for each head

            ####################################################
            # NEW
            K = attn_scores.size(-1)

            if num_tokens == K:
                # No cache → use the pre-baked triangular mask slice
                causal_mask = torch.triu(torch.ones(num_tokens, K, device=x.device, dtype=torch.bool), diagonal=1)
            else:
                # Cached: need to offset the diagonal by (K − num_tokens)
                offset = K - num_tokens  # number of tokens already in cache before this chunk
                row_idx = torch.arange(num_tokens, device=x.device).unsqueeze(1)  # (num_tokens, 1)
                col_idx = torch.arange(K, device=x.device).unsqueeze(0)           # (1, K)
                causal_mask = row_idx + offset < col_idx                          # True where j > i+offset
            ####################################################

            # Use the mask to fill attention scores
            attn_scores.masked_fill_(causal_mask.unsqueeze(0).unsqueeze(0), -torch.inf)

            attn_weights = torch.softmax(attn_scores / keys.shape[-1]**0.5, dim=-1)
            attn_weights = self.dropout(attn_weights)

            context_vec = (attn_weights @ values).transpose(1, 2)

            context_vec = context_vec.contiguous().view(b, num_tokens, self.d_out)
            context_vec = self.out_proj(context_vec)  # optional projection

            return context_vec

        ####################################################
        # NEW
        def reset_cache(self):
            self.cache_k, self.cache_v = None, None
        ####################################################

    class TransformerBlock(nn.Module):
        def __init__(self, cfg):
            super().__init__()
            self.att = MultiHeadAttention(
                d_in=cfg["emb_dim"],
                d_out=cfg["emb_dim"],
                context_length=cfg["context_length"],
                num_heads=cfg["n_heads"],
                dropout=cfg["drop_rate"],
                qkv_bias=cfg["qkv_bias"],
                window_size=cfg["kv_window_size"])  # NEW
            self.ff = FeedForward(cfg)
            self.norm1 = LayerNorm(cfg["emb_dim"])
            self.norm2 = LayerNorm(cfg["emb_dim"])
            self.drop_shortcut = nn.Dropout(cfg["drop_rate"])

        def forward(self, x, use_cache=False):
            shortcut = x
            x = self.norm1(x)
            x = self.att(x, use_cache=use_cache)
            x = self.drop_shortcut(x)
            x = x + shortcut  # Add the original input back

            shortcut = x
            x = self.norm2(x)
            x = self.ff(x)
            x = self.drop_shortcut(x)
            x = x + shortcut  # Add the original input back

            return x

    class GPTModel(nn.Module):
        def __init__(self, cfg):
            super().__init__()
            self.tok_emb = nn.Embedding(cfg["vocab_size"], cfg["emb_dim"])
            self.pos_emb = nn.Embedding(cfg["context_length"], cfg["emb_dim"])
            self.drop_emb = nn.Dropout(cfg["drop_rate"])

            self.trf_blocks = nn.ModuleList(
                [TransformerBlock(cfg) for _ in range(cfg["n_layers"])])

            self.ptr_current_pos = 0

            self.final_norm = LayerNorm(cfg["emb_dim"])
            self.out_head = nn.Linear(cfg["emb_dim"], cfg["vocab_size"], bias=False)

        def forward(self, in_idx, use_cache=False):
            batch_size, seq_len = in_idx.shape
            tok_embeds = self.tok_emb(in_idx)

            if use_cache:
                pos_ids = torch.arange(self.ptr_current_pos, self.ptr_current_pos + seq_len, device=in_idx.device,
                                       dtype=torch.long)
                self.ptr_current_pos += seq_len
            else:
                pos_ids = torch.arange(0, seq_len, device=in_idx.device, dtype=torch.long)
            pos_embeds = self.pos_emb(pos_ids).unsqueeze(0)

            x = tok_embeds + pos_embeds  # Shape [batch_size, num_tokens, emb_size]
            x = self.drop_emb(x)

            for blk in self.trf_blocks:
                x = blk(x, use_cache=use_cache)

            x = self.final_norm(x)
            logits = self.out_head(x)
            return logits

        def reset_kv_cache(self):
            for blk in self.trf_blocks:
                blk.att.reset_cache()
            self.ptr_current_pos = 0

    def generate_text_simple_cached(model, idx, max_new_tokens, use_cache=True):
        model.eval()

        if use_cache:
            # Init cache with full prompt
            model.reset_kv_cache()
            with torch.no_grad():
                logits = model(idx, use_cache=True)

            for _ in range(max_new_tokens):
                # a) pick the token with the highest log-probability (greedy sampling)
                next_idx = logits[:, -1].argmax(dim=-1, keepdim=True)
                # b) append it to the running sequence
                idx = torch.cat([idx, next_idx], dim=1)
                # c) feed model only the new token
                with torch.no_grad():
                    logits = model(next_idx, use_cache=True)
        else:
            ctx_len = model.pos_emb.num_embeddings  # e.g. 1024
            for _ in range(max_new_tokens):
                with torch.no_grad():
                    logits = model(idx[:, -ctx_len:], use_cache=False)
                next_idx = logits[:, -1].argmax(dim=-1, keepdim=True)
                idx = torch.cat([idx, next_idx], dim=1)

        return idx

    return SimpleNamespace(**locals())


def _rope_code(torch):
    """compute_rope_params (llama3.py's, with freq_config) and apply_rope, shared by llama3.py and qwen3.py."""

    def compute_rope_params(head_dim, theta_base=10_000, context_length=4096, freq_config=None,
                            dtype=torch.float32):
        assert head_dim % 2 == 0, "Embedding dimension must be even"

        # Compute the inverse frequencies
        inv_freq = 1.0 / (theta_base ** (torch.arange(0, head_dim, 2, dtype=dtype)[: (head_dim // 2)].float()
                                         / head_dim))

        # Frequency adjustments
        if freq_config is not None:
            low_freq_wavelen = freq_config["original_context_length"] / freq_config["low_freq_factor"]
            high_freq_wavelen = freq_config["original_context_length"] / freq_config["high_freq_factor"]

            wavelen = 2 * torch.pi / inv_freq

            inv_freq_llama = torch.where(
                wavelen > low_freq_wavelen, inv_freq / freq_config["factor"], inv_freq
            )

            smooth_factor = (freq_config["original_context_length"] / wavelen - freq_config["low_freq_factor"]) / (
                freq_config["high_freq_factor"] - freq_config["low_freq_factor"]
            )

            smoothed_inv_freq = (
                (1 - smooth_factor) * (inv_freq / freq_config["factor"]) + smooth_factor * inv_freq
            )

            is_medium_freq = (wavelen <= low_freq_wavelen) & (wavelen >= high_freq_wavelen)
            inv_freq_llama = torch.where(is_medium_freq, smoothed_inv_freq, inv_freq_llama)
            inv_freq = inv_freq_llama

        # Generate position indices
        positions = torch.arange(context_length, dtype=dtype)

        # Compute the angles
        angles = positions[:, None] * inv_freq[None, :]  # Shape: (context_length, head_dim // 2)

        # Expand angles to match the head_dim
        angles = torch.cat([angles, angles], dim=1)  # Shape: (context_length, head_dim)

        # Precompute sine and cosine
        cos = torch.cos(angles)
        sin = torch.sin(angles)

        return cos, sin

    def apply_rope(x, cos, sin):
        # x: (batch_size, num_heads, seq_len, head_dim)
        batch_size, num_heads, seq_len, head_dim = x.shape
        assert head_dim % 2 == 0, "Head dimension must be even"

        # Split x into first half and second half
        x1 = x[..., : head_dim // 2]  # First half
        x2 = x[..., head_dim // 2:]  # Second half

        # Adjust sin and cos shapes
        cos = cos[:seq_len, :].unsqueeze(0).unsqueeze(0)  # Shape: (1, 1, seq_len, head_dim)
        sin = sin[:seq_len, :].unsqueeze(0).unsqueeze(0)

        # Apply the rotary transformation
        rotated = torch.cat((-x2, x1), dim=-1)
        x_rotated = (x * cos) + (rotated * sin)

        # It's ok to use lower-precision after applying cos and sin rotation
        return x_rotated.to(dtype=x.dtype)

    def rescale_theta(theta_old, context_length_old, context_length_new):
        scaling_factor = context_length_new / context_length_old
        theta_new = theta_old * scaling_factor
        return theta_new

    return SimpleNamespace(**locals())


def llama3_code(torch):
    nn = torch.nn
    r = _rope_code(torch)
    compute_rope_params, apply_rope, rescale_theta = r.compute_rope_params, r.apply_rope, r.rescale_theta

    class Llama3Model(nn.Module):
        def __init__(self, cfg):
            super().__init__()

            # Main model parameters
            self.tok_emb = nn.Embedding(cfg["vocab_size"], cfg["emb_dim"], dtype=cfg["dtype"])

            self.trf_blocks = nn.ModuleList(  # ModuleList since Sequential can only accept one input
                [TransformerBlock(cfg) for _ in range(cfg["n_layers"])]
            )

            self.final_norm = nn.RMSNorm(cfg["emb_dim"], eps=1e-5, dtype=cfg["dtype"])
            self.out_head = nn.Linear(cfg["emb_dim"], cfg["vocab_size"], bias=False, dtype=cfg["dtype"])

            # Reusuable utilities
            self.register_buffer(
                "mask", torch.triu(torch.ones(cfg["context_length"], cfg["context_length"]), diagonal=1).bool(),
                persistent=False
            )

            if cfg["orig_context_length"] != cfg["context_length"]:
                cfg["rope_base"] = rescale_theta(
                                cfg["rope_base"],
                                cfg["orig_context_length"],
                                cfg["context_length"]
                            )
            cos, sin = compute_rope_params(
                head_dim=cfg["emb_dim"] // cfg["n_heads"],
                theta_base=cfg["rope_base"],
                context_length=cfg["context_length"],
                freq_config=cfg["rope_freq"]
            )
            self.register_buffer("cos", cos, persistent=False)
            self.register_buffer("sin", sin, persistent=False)
            self.cfg = cfg

        def forward(self, in_idx):
            tok_embeds = self.tok_emb(in_idx)
            x = tok_embeds

            for block in self.trf_blocks:
                x = block(x, self.mask, self.cos, self.sin)
            x = self.final_norm(x)
            logits = self.out_head(x.to(self.cfg["dtype"]))
            return logits

    class TransformerBlock(nn.Module):
        def __init__(self, cfg):
            super().__init__()
            self.att = GroupedQueryAttention(
                d_in=cfg["emb_dim"],
                d_out=cfg["emb_dim"],
                num_heads=cfg["n_heads"],
                num_kv_groups=cfg["n_kv_groups"],
                dtype=cfg["dtype"]
            )
            self.ff = FeedForward(cfg)
            self.norm1 = nn.RMSNorm(cfg["emb_dim"], eps=1e-5, dtype=cfg["dtype"])
            self.norm2 = nn.RMSNorm(cfg["emb_dim"], eps=1e-5, dtype=cfg["dtype"])

        def forward(self, x, mask, cos, sin):
            # Shortcut connection for attention block
            shortcut = x
            x = self.norm1(x)
            x = self.att(x, mask, cos, sin)  # Shape [batch_size, num_tokens, emb_size]
            x = x + shortcut  # Add the original input back

            # Shortcut connection for feed-forward block
            shortcut = x
            x = self.norm2(x)
            x = self.ff(x)
            x = x + shortcut  # Add the original input back

            return x

    class FeedForward(nn.Module):
        def __init__(self, cfg):
            super().__init__()
            self.fc1 = nn.Linear(cfg["emb_dim"], cfg["hidden_dim"], dtype=cfg["dtype"], bias=False)
            self.fc2 = nn.Linear(cfg["emb_dim"], cfg["hidden_dim"], dtype=cfg["dtype"], bias=False)
            self.fc3 = nn.Linear(cfg["hidden_dim"], cfg["emb_dim"], dtype=cfg["dtype"], bias=False)

        def forward(self, x):
            x_fc1 = self.fc1(x)
            x_fc2 = self.fc2(x)
            x = nn.functional.silu(x_fc1) * x_fc2
            return self.fc3(x)

    class GroupedQueryAttention(nn.Module):
        def __init__(
                self, d_in, d_out, num_heads, num_kv_groups, dtype=None
        ):
            super().__init__()
            assert d_out % num_heads == 0, "d_out must be divisible by num_heads"
            assert num_heads % num_kv_groups == 0, "num_heads must be divisible by num_kv_groups"

            self.d_out = d_out
            self.num_heads = num_heads
            self.head_dim = d_out // num_heads

            self.W_key = nn.Linear(d_in, num_kv_groups * self.head_dim, bias=False, dtype=dtype)
            self.W_value = nn.Linear(d_in, num_kv_groups * self.head_dim, bias=False, dtype=dtype)
            self.num_kv_groups = num_kv_groups
            self.group_size = num_heads // num_kv_groups

            self.W_query = nn.Linear(d_in, d_out, bias=False, dtype=dtype)
            self.out_proj = nn.Linear(d_out, d_out, bias=False, dtype=dtype)

        def forward(self, x, mask, cos, sin):
            b, num_tokens, d_in = x.shape

            queries = self.W_query(x)  # Shape: (b, num_tokens, d_out)
            keys = self.W_key(x)  # Shape: (b, num_tokens, num_kv_groups * head_dim)
            values = self.W_value(x)  # Shape: (b, num_tokens, num_kv_groups * head_dim)

            # Reshape queries, keys, and values
            queries = queries.view(b, num_tokens, self.num_heads, self.head_dim)
            keys = keys.view(b, num_tokens, self.num_kv_groups, self.head_dim)
            values = values.view(b, num_tokens, self.num_kv_groups, self.head_dim)

            # Transpose keys, values, and queries
            keys = keys.transpose(1, 2)  # Shape: (b, num_heads, num_tokens, head_dim)
            values = values.transpose(1, 2)  # Shape: (b, num_heads, num_tokens, head_dim)
            queries = queries.transpose(1, 2)  # Shape: (b, num_query_groups, num_tokens, head_dim)

            # Apply RoPE
            keys = apply_rope(keys, cos, sin)
            queries = apply_rope(queries, cos, sin)

            # Expand keys and values to match the number of heads
            keys = keys.repeat_interleave(self.group_size, dim=1)  # Shape: (b, num_heads, num_tokens, head_dim)
            values = values.repeat_interleave(self.group_size, dim=1)

            # Compute scaled dot-product attention (aka self-attention) with a causal mask
            attn_scores = queries @ keys.transpose(2, 3)  # Dot product for each head

            # Use the mask to fill attention scores
            attn_scores = attn_scores.masked_fill(mask[:num_tokens, :num_tokens], -torch.inf)

            attn_weights = torch.softmax(attn_scores / keys.shape[-1]**0.5, dim=-1)
            assert keys.shape[-1] == self.head_dim

            # Shape: (b, num_tokens, num_heads, head_dim)
            context_vec = (attn_weights @ values).transpose(1, 2)

            # Combine heads, where self.d_out = self.num_heads * self.head_dim
            context_vec = context_vec.reshape(b, num_tokens, self.d_out)
            context_vec = self.out_proj(context_vec)  # optional projection

            return context_vec

    ######################################################################
    # Llama 3 fast (alternative code geared towards efficiency)
    ######################################################################

    class GroupedQueryAttentionFast(nn.Module):
        """
        Drop-in replacement for GroupedQueryAttention but using PyTorch's
        scaled_dot_product_attention.
        """
        def __init__(self, d_in, d_out, num_heads, num_kv_groups, dtype=None):
            super().__init__()
            assert d_out % num_heads == 0, "d_out must be divisible by num_heads"
            assert num_heads % num_kv_groups == 0, "num_heads must be divisible by num_kv_groups"

            self.d_out = d_out
            self.num_heads = num_heads
            self.head_dim = d_out // num_heads
            self.num_kv_groups = num_kv_groups
            self.group_size = num_heads // num_kv_groups

            self.W_key = nn.Linear(d_in, num_kv_groups * self.head_dim, bias=False, dtype=dtype)
            self.W_value = nn.Linear(d_in, num_kv_groups * self.head_dim, bias=False, dtype=dtype)
            self.W_query = nn.Linear(d_in, d_out, bias=False, dtype=dtype)
            self.out_proj = nn.Linear(d_out, d_out, bias=False, dtype=dtype)

        def forward(self, x, cos, sin):
            b, num_tokens, _ = x.shape

            # Project to queries, keys, values
            q = self.W_query(x).view(b, num_tokens, self.num_heads, self.head_dim).transpose(1, 2)
            k = self.W_key(x).view(b, num_tokens, self.num_kv_groups, self.head_dim).transpose(1, 2)
            v = self.W_value(x).view(b, num_tokens, self.num_kv_groups, self.head_dim).transpose(1, 2)

            # Apply Rotary Positional Embedding
            q = apply_rope(q, cos, sin)
            k = apply_rope(k, cos, sin)

            # Expand key/value groups to full head count
            k = k.repeat_interleave(self.group_size, dim=1)
            v = v.repeat_interleave(self.group_size, dim=1)

            # Efficient scaled dot-product attention
            attn_output = torch.nn.functional.scaled_dot_product_attention(
                q, k, v,
                is_causal=True  # Enables Flash/FlexAttention kernels
            )

            # Combine heads and project
            attn_output = attn_output.transpose(1, 2).reshape(b, num_tokens, self.d_out)
            return self.out_proj(attn_output)

    class TransformerBlockFast(nn.Module):
        def __init__(self, cfg):
            super().__init__()
            self.att = GroupedQueryAttentionFast(
                d_in=cfg["emb_dim"],
                d_out=cfg["emb_dim"],
                num_heads=cfg["n_heads"],
                num_kv_groups=cfg["n_kv_groups"],
                dtype=cfg["dtype"]
            )
            self.ff = FeedForward(cfg)
            self.norm1 = nn.RMSNorm(cfg["emb_dim"], eps=1e-5, dtype=cfg["dtype"])
            self.norm2 = nn.RMSNorm(cfg["emb_dim"], eps=1e-5, dtype=cfg["dtype"])

        def forward(self, x, cos, sin):
            # Shortcut connection for attention block
            shortcut = x
            x = self.norm1(x)
            x = self.att(x, cos, sin)  # Shape [batch_size, num_tokens, emb_size]
            x = x + shortcut  # Add the original input back

            # Shortcut connection for feed-forward block
            shortcut = x
            x = self.norm2(x)
            x = self.ff(x)
            x = x + shortcut  # Add the original input back

            return x

    class Llama3ModelFast(nn.Module):
        def __init__(self, cfg):
            super().__init__()

            # Main model parameters
            self.tok_emb = nn.Embedding(cfg["vocab_size"], cfg["emb_dim"], dtype=cfg["dtype"])

            self.trf_blocks = nn.ModuleList(
                [TransformerBlockFast(cfg) for _ in range(cfg["n_layers"])]
            )

            self.final_norm = nn.RMSNorm(cfg["emb_dim"], eps=1e-5, dtype=cfg["dtype"])
            self.out_head = nn.Linear(cfg["emb_dim"], cfg["vocab_size"], bias=False, dtype=cfg["dtype"])

            if cfg["orig_context_length"] != cfg["context_length"]:
                cfg["rope_base"] = rescale_theta(
                                cfg["rope_base"],
                                cfg["orig_context_length"],
                                cfg["context_length"]
                            )
            cos, sin = compute_rope_params(
                head_dim=cfg["emb_dim"] // cfg["n_heads"],
                theta_base=cfg["rope_base"],
                context_length=cfg["context_length"],
                freq_config=cfg["rope_freq"]
            )
            self.register_buffer("cos", cos, persistent=False)
            self.register_buffer("sin", sin, persistent=False)
            self.cfg = cfg

        def forward(self, in_idx):
            tok_embeds = self.tok_emb(in_idx)
            x = tok_embeds

            for block in self.trf_blocks:
                x = block(x, self.cos, self.sin)
            x = self.final_norm(x)
            logits = self.out_head(x.to(self.cfg["dtype"]))
            return logits

    return SimpleNamespace(**locals())


def qwen3_code(torch):
    nn = torch.nn
    r = _rope_code(torch)
    apply_rope = r.apply_rope

    def compute_rope_params(head_dim, theta_base=10_000, context_length=4096, dtype=torch.float32):
        return r.compute_rope_params(head_dim, theta_base, context_length, None, dtype)  # qwen3.py: no freq_config

    class Qwen3Model(nn.Module):
        def __init__(self, cfg):
            super().__init__()

            # Main model parameters
            self.tok_emb = nn.Embedding(cfg["vocab_size"], cfg["emb_dim"], dtype=cfg["dtype"])

            self.trf_blocks = nn.ModuleList(
                [TransformerBlock(cfg) for _ in range(cfg["n_layers"])]
            )
            self.final_norm = RMSNorm(cfg["emb_dim"])
            self.out_head = nn.Linear(cfg["emb_dim"], cfg["vocab_size"], bias=False, dtype=cfg["dtype"])

            # Reusuable utilities
            if cfg["head_dim"] is None:
                head_dim = cfg["emb_dim"] // cfg["n_heads"]
            else:
                head_dim = cfg["head_dim"]
            cos, sin = compute_rope_params(
                head_dim=head_dim,
                theta_base=cfg["rope_base"],
                context_length=cfg["context_length"]
            )
            self.register_buffer("cos", cos, persistent=False)
            self.register_buffer("sin", sin, persistent=False)
            self.cfg = cfg

        def forward(self, in_idx):
            # Forward pass
            tok_embeds = self.tok_emb(in_idx)
            x = tok_embeds

            num_tokens = x.shape[1]
            mask = torch.triu(torch.ones(num_tokens, num_tokens, device=x.device, dtype=torch.bool), diagonal=1)

            for block in self.trf_blocks:
                x = block(x, mask, self.cos, self.sin)
            x = self.final_norm(x)
            logits = self.out_head(x.to(self.cfg["dtype"]))
            return logits

    class TransformerBlock(nn.Module):
        def __init__(self, cfg):
            super().__init__()
            self.att = GroupedQueryAttention(
                d_in=cfg["emb_dim"],
                num_heads=cfg["n_heads"],
                head_dim=cfg["head_dim"],
                num_kv_groups=cfg["n_kv_groups"],
                qk_norm=cfg["qk_norm"],
                dtype=cfg["dtype"]
            )
            self.ff = FeedForward(cfg)
            self.norm1 = RMSNorm(cfg["emb_dim"], eps=1e-6)
            self.norm2 = RMSNorm(cfg["emb_dim"], eps=1e-6)

        def forward(self, x, mask, cos, sin):
            # Shortcut connection for attention block
            shortcut = x
            x = self.norm1(x)
            x = self.att(x, mask, cos, sin,)  # Shape [batch_size, num_tokens, emb_size]
            x = x + shortcut  # Add the original input back

            # Shortcut connection for feed-forward block
            shortcut = x
            x = self.norm2(x)
            x = self.ff(x)
            x = x + shortcut  # Add the original input back

            return x

    FeedForward = llama3_code(torch).FeedForward  # the same SwiGLU class in qwen3.py

    class GroupedQueryAttention(nn.Module):
        def __init__(
            self, d_in, num_heads, num_kv_groups, head_dim=None, qk_norm=False, dtype=None
        ):
            super().__init__()
            assert num_heads % num_kv_groups == 0, "num_heads must be divisible by num_kv_groups"

            self.num_heads = num_heads
            self.num_kv_groups = num_kv_groups
            self.group_size = num_heads // num_kv_groups

            if head_dim is None:
                assert d_in % num_heads == 0, "`d_in` must be divisible by `num_heads` if `head_dim` is not set"
                head_dim = d_in // num_heads

            self.head_dim = head_dim
            self.d_out = num_heads * head_dim

            self.W_query = nn.Linear(d_in, self.d_out, bias=False, dtype=dtype)
            self.W_key = nn.Linear(d_in, num_kv_groups * head_dim, bias=False, dtype=dtype)
            self.W_value = nn.Linear(d_in, num_kv_groups * head_dim, bias=False, dtype=dtype)

            self.out_proj = nn.Linear(self.d_out, d_in, bias=False, dtype=dtype)

            if qk_norm:
                self.q_norm = RMSNorm(head_dim, eps=1e-6)
                self.k_norm = RMSNorm(head_dim, eps=1e-6)
            else:
                self.q_norm = self.k_norm = None

        def forward(self, x, mask, cos, sin):
            b, num_tokens, _ = x.shape

            # Apply projections
            queries = self.W_query(x)  # (b, num_tokens, num_heads * head_dim)
            keys = self.W_key(x)       # (b, num_tokens, num_kv_groups * head_dim)
            values = self.W_value(x)   # (b, num_tokens, num_kv_groups * head_dim)

            # Reshape
            queries = queries.view(b, num_tokens, self.num_heads, self.head_dim).transpose(1, 2)
            keys = keys.view(b, num_tokens, self.num_kv_groups, self.head_dim).transpose(1, 2)
            values = values.view(b, num_tokens, self.num_kv_groups, self.head_dim).transpose(1, 2)

            # Optional normalization
            if self.q_norm:
                queries = self.q_norm(queries)
            if self.k_norm:
                keys = self.k_norm(keys)

            # Apply RoPE
            queries = apply_rope(queries, cos, sin)
            keys = apply_rope(keys, cos, sin)

            # Expand K and V to match number of heads
            keys = keys.repeat_interleave(self.group_size, dim=1)
            values = values.repeat_interleave(self.group_size, dim=1)

            # Attention
            attn_scores = queries @ keys.transpose(2, 3)
            attn_scores = attn_scores.masked_fill(mask, -torch.inf)
            attn_weights = torch.softmax(attn_scores / self.head_dim**0.5, dim=-1)

            context = (attn_weights @ values).transpose(1, 2).reshape(b, num_tokens, self.d_out)
            return self.out_proj(context)

    class RMSNorm(nn.Module):
        def __init__(self, emb_dim, eps=1e-6, bias=False, qwen3_compatible=True):
            super().__init__()
            self.eps = eps
            self.qwen3_compatible = qwen3_compatible
            self.scale = nn.Parameter(torch.ones(emb_dim))
            self.shift = nn.Parameter(torch.zeros(emb_dim)) if bias else None

        def forward(self, x):
            input_dtype = x.dtype

            if self.qwen3_compatible:
                x = x.to(torch.float32)

            variance = x.pow(2).mean(dim=-1, keepdim=True)
            norm_x = x * torch.rsqrt(variance + self.eps)
            norm_x = norm_x * self.scale

            if self.shift is not None:
                norm_x = norm_x + self.shift

            return norm_x.to(input_dtype)

    return SimpleNamespace(**locals())


def qwen3_batched_code(torch):
    """pkg/llms_from_scratch/kv_cache_batched/{qwen3,utils,generate}.py (RMSNorm, FeedForward as in qwen3.py)."""
    nn = torch.nn
    q = qwen3_code(torch)
    RMSNorm, FeedForward = q.RMSNorm, q.FeedForward

    class KVCache:
        def __init__(self, n_layers, batch_size):
            self.cache = [
                [None for _ in range(batch_size)] for _ in range(n_layers)
            ]

        def get(self, layer_idx, batch_idx):
            return self.cache[layer_idx][batch_idx]

        def update(self, layer_idx, batch_idx, value):
            self.cache[layer_idx][batch_idx] = value

        def get_layer(self, layer_idx):
            return self.cache[layer_idx]

        def reset(self):
            for layer in self.cache:
                for i in range(len(layer)):
                    layer[i] = None

    class Qwen3Model(nn.Module):
        def __init__(self, cfg):
            super().__init__()

            # Main model parameters
            self.tok_emb = nn.Embedding(cfg["vocab_size"], cfg["emb_dim"], dtype=cfg["dtype"])

            self.trf_blocks = nn.ModuleList(
                [TransformerBlock(cfg) for _ in range(cfg["n_layers"])]
            )
            self.final_norm = RMSNorm(cfg["emb_dim"])
            self.out_head = nn.Linear(cfg["emb_dim"], cfg["vocab_size"], bias=False, dtype=cfg["dtype"])

            # Reusable utilities
            if cfg["head_dim"] is None:
                head_dim = cfg["emb_dim"] // cfg["n_heads"]
            else:
                head_dim = cfg["head_dim"]
            cos, sin = compute_rope_params(
                head_dim=head_dim,
                theta_base=cfg["rope_base"],
                context_length=cfg["context_length"]
            )
            self.register_buffer("cos", cos, persistent=False)
            self.register_buffer("sin", sin, persistent=False)
            self.cfg = cfg
            self.current_pos = None  # Batched version tracks positions per sample

        def forward(self, in_idx, cache=None, start_pos=None):
            B, num_tokens = in_idx.size()
            tok_embeds = self.tok_emb(in_idx)
            x = tok_embeds
            device = x.device

            if cache is not None:
                pos_start = start_pos
                pos_end = pos_start + num_tokens
                max_len = pos_end.max().item()
            else:
                pos_start = torch.zeros(B, dtype=torch.long, device=device)
                max_len = num_tokens
            if max_len > self.cfg["context_length"]:
                raise ValueError(
                    f"Sequence length {max_len} exceeds the model's context length "
                    f"of {self.cfg['context_length']} tokens."
                )

            if cache is not None:
                full_mask = torch.triu(
                    torch.ones(max_len, max_len, device=device, dtype=torch.bool), diagonal=1
                )
                mask = torch.zeros(B, 1, num_tokens, max_len, device=device, dtype=torch.bool)
                for i in range(B):
                    ps, pe = pos_start[i].item(), pos_end[i].item()
                    mask[i, 0] = full_mask[ps:pe, :pe]
            else:
                mask = torch.triu(
                    torch.ones(num_tokens, num_tokens, device=device, dtype=torch.bool), diagonal=1
                )[None, None, :, :]

            for i, block in enumerate(self.trf_blocks):
                blk_cache = [cache.get(i, b_idx) for b_idx in range(B)] if cache is not None else None
                x, new_blk_cache = block(x, mask, self.cos, self.sin, start_pos=pos_start, cache=blk_cache)
                if cache is not None:
                    for b_idx in range(B):
                        cache.update(i, b_idx, new_blk_cache[b_idx])
            x = self.final_norm(x)
            logits = self.out_head(x.to(self.cfg["dtype"]))
            return logits

        def reset_kv_cache(self, batch_size, device=None):
            device = device or next(self.parameters()).device
            self.current_pos = torch.zeros(batch_size, dtype=torch.long, device=device)

    class TransformerBlock(nn.Module):
        def __init__(self, cfg):
            super().__init__()
            self.att = GroupedQueryAttention(
                d_in=cfg["emb_dim"],
                num_heads=cfg["n_heads"],
                head_dim=cfg["head_dim"],
                num_kv_groups=cfg["n_kv_groups"],
                qk_norm=cfg["qk_norm"],
                dtype=cfg["dtype"]
            )
            self.ff = FeedForward(cfg)
            self.norm1 = RMSNorm(cfg["emb_dim"], eps=1e-6)
            self.norm2 = RMSNorm(cfg["emb_dim"], eps=1e-6)

        def forward(self, x, mask, cos, sin, start_pos=0, cache=None):
            # Shortcut connection for attention block
            shortcut = x
            x = self.norm1(x)
            x, next_cache = self.att(x, mask, cos, sin, start_pos=start_pos, cache=cache)
            x = x + shortcut  # Add the original input back

            # Shortcut connection for feed-forward block
            shortcut = x
            x = self.norm2(x)
            x = self.ff(x)
            x = x + shortcut  # Add the original input back

            return x, next_cache

    class GroupedQueryAttention(nn.Module):
        def __init__(self, d_in, num_heads, num_kv_groups, head_dim=None, qk_norm=False, dtype=None):
            super().__init__()
            assert num_heads % num_kv_groups == 0, "num_heads must be divisible by num_kv_groups"

            self.num_heads = num_heads
            self.num_kv_groups = num_kv_groups
            self.group_size = num_heads // num_kv_groups

            if head_dim is None:
                assert d_in % num_heads == 0, "`d_in` must be divisible by `num_heads` if `head_dim` is not set"
                head_dim = d_in // num_heads

            self.head_dim = head_dim
            self.d_out = num_heads * head_dim

            self.W_query = nn.Linear(d_in, self.d_out, bias=False, dtype=dtype)
            self.W_key = nn.Linear(d_in, num_kv_groups * head_dim, bias=False, dtype=dtype)
            self.W_value = nn.Linear(d_in, num_kv_groups * head_dim, bias=False, dtype=dtype)

            self.out_proj = nn.Linear(self.d_out, d_in, bias=False, dtype=dtype)

            if qk_norm:
                self.q_norm = RMSNorm(head_dim, eps=1e-6)
                self.k_norm = RMSNorm(head_dim, eps=1e-6)
            else:
                self.q_norm = self.k_norm = None

        def forward(self, x, mask, cos, sin, start_pos=0, cache=None):
            b, num_tokens, _ = x.shape

            # Apply projections
            queries = self.W_query(x)  # (b, num_tokens, num_heads * head_dim)
            keys = self.W_key(x)       # (b, num_tokens, num_kv_groups * head_dim)
            values = self.W_value(x)   # (b, num_tokens, num_kv_groups * head_dim)

            # Reshape
            queries = queries.view(b, num_tokens, self.num_heads, self.head_dim).transpose(1, 2)
            keys = keys.view(b, num_tokens, self.num_kv_groups, self.head_dim).transpose(1, 2)
            values = values.view(b, num_tokens, self.num_kv_groups, self.head_dim).transpose(1, 2)

            # Optional normalization
            if self.q_norm:
                queries = self.q_norm(queries)
            if self.k_norm:
                keys = self.k_norm(keys)

            # Apply RoPE
            queries = apply_rope(queries, cos, sin, offset=start_pos)
            keys = apply_rope(keys, cos, sin, offset=start_pos)

            # KV caching
            next_cache = []
            for i in range(b):
                prev = cache[i] if cache else None
                if prev is None:
                    k_cat = keys[i:i+1]
                    v_cat = values[i:i+1]
                else:
                    prev_k, prev_v = prev
                    k_cat = torch.cat([prev_k, keys[i:i+1]], dim=2)
                    v_cat = torch.cat([prev_v, values[i:i+1]], dim=2)
                next_cache.append((k_cat, v_cat))

            keys = torch.cat([k for k, _ in next_cache], dim=0)
            values = torch.cat([v for _, v in next_cache], dim=0)

            # Expand K and V to match number of heads
            keys = keys.repeat_interleave(self.group_size, dim=1)
            values = values.repeat_interleave(self.group_size, dim=1)

            # Attention
            attn_scores = queries @ keys.transpose(2, 3)
            attn_scores = attn_scores.masked_fill(mask, -torch.inf)

            # PyTorch fails to do the implicit casting, so we have to be intentional with the types
            scale = torch.tensor(self.head_dim**0.5, dtype=queries.dtype, device=queries.device)
            attn_weights = torch.softmax(attn_scores / scale, dim=-1).to(values.dtype)

            context = (attn_weights @ values).transpose(1, 2).reshape(b, num_tokens, self.d_out)
            return self.out_proj(context), next_cache

    compute_rope_params = q.compute_rope_params  # the same function in kv_cache_batched/qwen3.py

    def apply_rope(x, cos, sin, offset):
        # x: (batch_size, num_heads, seq_len, head_dim)
        bsz, n_heads, seq_len, head_dim = x.shape
        assert head_dim % 2 == 0, "Head dimension must be even"
        assert offset.shape[0] == bsz, "Offset must have one value per batch item"

        # Prepare cos/sin: (seq_len, head_dim)
        cos = cos[:cos.shape[0], :].unsqueeze(0).unsqueeze(0)  # (1, 1, total_seq_len, head_dim)
        sin = sin[:sin.shape[0], :].unsqueeze(0).unsqueeze(0)

        # Build position indices per batch item
        position_ids = torch.arange(seq_len, device=offset.device).unsqueeze(0) + offset.unsqueeze(1)  # (bsz, seq_len)
        position_ids = position_ids.clamp(max=cos.shape[2] - 1)

        # Gather cos/sin for each position
        cos = cos[0, 0, position_ids, :]  # (bsz, seq_len, head_dim)
        sin = sin[0, 0, position_ids, :]

        # Expand for multi-heads
        cos = cos.unsqueeze(1)  # (bsz, 1, seq_len, head_dim)
        sin = sin.unsqueeze(1)

        x1 = x[..., :head_dim // 2]
        x2 = x[..., head_dim // 2:]

        rotated = torch.cat((-x2, x1), dim=-1)
        x_rotated = (x * cos) + (rotated * sin)
        return x_rotated

    def generate_text_simple(model, idx, max_new_tokens, context_size=None, use_cache=True):
        model.eval()
        ctx_len = context_size or model.cfg["context_length"]
        batch_size = idx.size(0)

        with torch.no_grad():
            if use_cache:
                # initialize cache and positions
                cache = KVCache(n_layers=model.cfg["n_layers"], batch_size=batch_size)
                model.reset_kv_cache(batch_size=batch_size, device=idx.device)

                # initial full-context pass
                input_ids = idx[:, -ctx_len:]
                seq_len = input_ids.size(1)
                start_pos = model.current_pos.clone()
                logits = model(
                    input_ids,
                    cache=cache,
                    start_pos=start_pos
                )
                model.current_pos += seq_len

                # iterative generation
                for step in range(max_new_tokens):
                    next_token = logits[:, -1].argmax(dim=-1, keepdim=True)  # (B, 1)
                    if step + 1 < max_new_tokens:  # Skips the forward pass after the last token is generated
                        logits = model(
                            next_token,
                            cache=cache,
                            start_pos=model.current_pos.clone()
                        )
                        model.current_pos += 1
                    idx = torch.cat([idx, next_token], dim=1)
            else:
                # no cache
                for _ in range(max_new_tokens):
                    input_ids = idx[:, -ctx_len:]
                    logits = model(input_ids, cache=None, start_pos=None)
                    next_token = logits[:, -1].argmax(dim=-1, keepdim=True)
                    idx = torch.cat([idx, next_token], dim=1)

        return idx

    return SimpleNamespace(**locals())


def gemma3_code(torch):
    """ch05/12_gemma3/standalone-gemma3.ipynb's architecture code."""
    nn = torch.nn
    r = _rope_code(torch)
    apply_rope = r.apply_rope

    def compute_rope_params(head_dim, theta_base=10_000, context_length=4096, dtype=torch.float32):
        return r.compute_rope_params(head_dim, theta_base, context_length, None, dtype)  # no freq_config

    class FeedForward(nn.Module):
        def __init__(self, cfg):
            super().__init__()
            self.fc1 = nn.Linear(cfg["emb_dim"], cfg["hidden_dim"], dtype=cfg["dtype"], bias=False)
            self.fc2 = nn.Linear(cfg["emb_dim"], cfg["hidden_dim"], dtype=cfg["dtype"], bias=False)
            self.fc3 = nn.Linear(cfg["hidden_dim"], cfg["emb_dim"], dtype=cfg["dtype"], bias=False)

        def forward(self, x):
            x_fc1 = self.fc1(x)
            x_fc2 = self.fc2(x)
            x = nn.functional.gelu(x_fc1, approximate="tanh") * x_fc2
            return self.fc3(x)

    class RMSNorm(nn.Module):
        def __init__(self, emb_dim, eps=1e-6, bias=False):
            super().__init__()
            self.eps = eps
            # Gemma3 stores zero-centered weights and uses (1 + weight) during forward
            self.scale = nn.Parameter(torch.zeros(emb_dim))
            self.shift = nn.Parameter(torch.zeros(emb_dim)) if bias else None

        def forward(self, x):
            # Match HF Gemma3: compute norm in float32, then scale by (1 + w)
            input_dtype = x.dtype
            x_f = x.float()
            var = x_f.pow(2).mean(dim=-1, keepdim=True)
            x_norm = x_f * torch.rsqrt(var + self.eps)
            out = x_norm * (1.0 + self.scale.float())

            if self.shift is not None:
                out = out + self.shift.float()

            return out.to(input_dtype)

    class GroupedQueryAttention(nn.Module):
        def __init__(
            self, d_in, num_heads, num_kv_groups, head_dim=None, qk_norm=False,
            query_pre_attn_scalar=None, dtype=None,
        ):
            super().__init__()
            assert num_heads % num_kv_groups == 0, "num_heads must be divisible by num_kv_groups"

            self.num_heads = num_heads
            self.num_kv_groups = num_kv_groups
            self.group_size = num_heads // num_kv_groups

            if head_dim is None:
                assert d_in % num_heads == 0, "`d_in` must be divisible by `num_heads` if `head_dim` is not set"
                head_dim = d_in // num_heads

            self.head_dim = head_dim
            self.d_out = num_heads * head_dim

            self.W_query = nn.Linear(d_in, self.d_out, bias=False, dtype=dtype)
            self.W_key = nn.Linear(d_in, num_kv_groups * head_dim, bias=False, dtype=dtype)
            self.W_value = nn.Linear(d_in, num_kv_groups * head_dim, bias=False, dtype=dtype)

            self.out_proj = nn.Linear(self.d_out, d_in, bias=False, dtype=dtype)

            if qk_norm:
                self.q_norm = RMSNorm(head_dim, eps=1e-6)
                self.k_norm = RMSNorm(head_dim, eps=1e-6)
            else:
                self.q_norm = self.k_norm = None

            if query_pre_attn_scalar is not None:
                self.scaling = (query_pre_attn_scalar) ** -0.5
            else:
                self.scaling = (head_dim) ** -0.5

        def forward(self, x, mask, cos, sin):
            b, num_tokens, _ = x.shape

            # Apply projections
            queries = self.W_query(x)  # (b, num_tokens, num_heads * head_dim)
            keys = self.W_key(x)       # (b, num_tokens, num_kv_groups * head_dim)
            values = self.W_value(x)   # (b, num_tokens, num_kv_groups * head_dim)

            # Reshape
            queries = queries.view(b, num_tokens, self.num_heads, self.head_dim).transpose(1, 2)
            keys = keys.view(b, num_tokens, self.num_kv_groups, self.head_dim).transpose(1, 2)
            values = values.view(b, num_tokens, self.num_kv_groups, self.head_dim).transpose(1, 2)

            # Optional normalization
            if self.q_norm:
                queries = self.q_norm(queries)
            if self.k_norm:
                keys = self.k_norm(keys)

            # Apply RoPE
            queries = apply_rope(queries, cos, sin)
            keys = apply_rope(keys, cos, sin)

            # Expand K and V to match number of heads
            keys = keys.repeat_interleave(self.group_size, dim=1)
            values = values.repeat_interleave(self.group_size, dim=1)

            # Scale queries
            queries = queries * self.scaling

            # Attention
            attn_scores = queries @ keys.transpose(2, 3)
            attn_scores = attn_scores.masked_fill(mask, -torch.inf)
            attn_weights = torch.softmax(attn_scores, dim=-1)

            context = (attn_weights @ values).transpose(1, 2).reshape(b, num_tokens, self.d_out)
            return self.out_proj(context)

    class TransformerBlock(nn.Module):

        def __init__(self, cfg: dict, attn_type: str):
            super().__init__()
            self.attn_type = attn_type

            self.att = GroupedQueryAttention(
                d_in=cfg["emb_dim"],
                num_heads=cfg["n_heads"],
                num_kv_groups=cfg["n_kv_groups"],
                head_dim=cfg["head_dim"],
                qk_norm=cfg["qk_norm"],
                query_pre_attn_scalar=cfg["query_pre_attn_scalar"],
                dtype=cfg["dtype"],
            )
            self.ff = FeedForward(cfg)
            self.input_layernorm = RMSNorm(cfg["emb_dim"], eps=1e-6)
            self.post_attention_layernorm = RMSNorm(cfg["emb_dim"], eps=1e-6)
            self.pre_feedforward_layernorm = RMSNorm(cfg["emb_dim"], eps=1e-6)
            self.post_feedforward_layernorm = RMSNorm(cfg["emb_dim"], eps=1e-6)

        def forward(
            self,
            x,
            mask_global,
            mask_local,
            cos_global,
            sin_global,
            cos_local,
            sin_local,
        ):
            # Shortcut connection for attention block
            shortcut = x
            x = self.input_layernorm(x)

            if self.attn_type == "sliding_attention":
                attn_mask = mask_local
                cos = cos_local
                sin = sin_local
            else:
                attn_mask = mask_global
                cos = cos_global
                sin = sin_global

            x_attn = self.att(x, attn_mask, cos, sin)
            x_attn = self.post_attention_layernorm(x_attn)
            x = shortcut + x_attn

            # Shortcut connection for feed forward block
            shortcut = x
            x_ffn = self.pre_feedforward_layernorm(x)
            x_ffn = self.ff(x_ffn)
            x_ffn = self.post_feedforward_layernorm(x_ffn)
            x = shortcut + x_ffn
            return x

    class Gemma3Model(nn.Module):
        def __init__(self, cfg):
            super().__init__()
            assert cfg["layer_types"] is not None and len(cfg["layer_types"]) == cfg["n_layers"]

            # Main model parameters
            self.tok_emb = nn.Embedding(cfg["vocab_size"], cfg["emb_dim"], dtype=cfg["dtype"])

            self.blocks = nn.ModuleList([
                TransformerBlock(cfg, attn_type)for attn_type in cfg["layer_types"]
            ])

            self.final_norm = RMSNorm(cfg["emb_dim"], eps=1e-6)
            self.out_head = nn.Linear(cfg["emb_dim"], cfg["vocab_size"], bias=False, dtype=cfg["dtype"])
            self.cfg = cfg

            # Reusuable utilities
            cos_local, sin_local = compute_rope_params(
                head_dim=cfg["head_dim"],
                theta_base=cfg["rope_local_base"],
                context_length=cfg["context_length"],
                dtype=torch.float32,
            )
            cos_global, sin_global = compute_rope_params(
                head_dim=cfg["head_dim"],
                theta_base=cfg["rope_base"],
                context_length=cfg["context_length"],
                dtype=torch.float32,
            )
            self.register_buffer("cos_local", cos_local, persistent=False)
            self.register_buffer("sin_local", sin_local, persistent=False)
            self.register_buffer("cos_global", cos_global, persistent=False)
            self.register_buffer("sin_global", sin_global, persistent=False)

        def _create_masks(self, seq_len, device):
            ones = torch.ones((seq_len, seq_len), dtype=torch.bool, device=device)

            # mask_global (future is masked: j > i)
            mask_global = torch.triu(ones, diagonal=1)

            # far_past (too far back is masked: i - j >= sliding_window)
            far_past = torch.triu(ones, diagonal=self.cfg["sliding_window"]).T

            # Local (sliding_window) = future OR far-past
            mask_local = mask_global | far_past
            return mask_global, mask_local

        def forward(self, input_ids):
            # Forward pass
            b, seq_len = input_ids.shape
            x = self.tok_emb(input_ids) * (self.cfg["emb_dim"] ** 0.5)
            mask_global, mask_local = self._create_masks(seq_len, x.device)

            for block in self.blocks:
                x = block(
                    x,
                    mask_global=mask_global,
                    mask_local=mask_local,
                    cos_global=self.cos_global,
                    sin_global=self.sin_global,
                    cos_local=self.cos_local,
                    sin_local=self.sin_local,
                )

            x = self.final_norm(x)
            logits = self.out_head(x.to(self.cfg["dtype"]))
            return logits

    def model_memory_size(model, input_dtype=torch.float32):
        total_params = 0
        total_grads = 0
        for param in model.parameters():
            # Calculate total number of elements per parameter
            param_size = param.numel()
            total_params += param_size
            # Check if gradients are stored for this parameter
            if param.requires_grad:
                total_grads += param_size

        # Calculate buffer size (non-parameters that require memory)
        total_buffers = sum(buf.numel() for buf in model.buffers())

        # Size in bytes = (Number of elements) * (Size of each element in bytes)
        # We assume parameters and gradients are stored in the same type as input dtype
        element_size = torch.tensor(0, dtype=input_dtype).element_size()
        total_memory_bytes = (total_params + total_grads + total_buffers) * element_size

        # Convert bytes to gigabytes
        total_memory_gb = total_memory_bytes / (1024**3)

        return total_memory_gb

    return SimpleNamespace(**locals())


# ------------------------------------------------------------------ data and NumPy references
_SENTENCES = [
    "Every effort moves you forward, step by step.",
    "I had always thought Jack was a cheap genius.",
    "The painter sat in the garden -- quiet and still.",
    "A dog ran to the house; the cat slept on the mat.",
    "Every effort moves the painter to the garden.",
    "Jack sat by the house and thought of the dog.",
]


def _text(n=44, seed=0):
    rng = np.random.default_rng(seed)
    return " ".join(_SENTENCES[i] for i in rng.integers(0, len(_SENTENCES), n))


def _np_softmax(a):
    e = np.exp(a - a.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def _np_ln(x, scale, shift, eps=1e-5):
    mu = x.mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(((x - mu) ** 2).mean(-1, keepdims=True) + eps) * scale + shift


def _np_gelu(x):
    return 0.5 * x * (1.0 + np.tanh(np.sqrt(2.0 / np.pi) * (x + 0.044715 * x ** 3)))


def _np_lin(sd, p, x):
    y = x @ sd[p + ".weight"].T
    return y + sd[p + ".bias"] if p + ".bias" in sd else y


def _np_mha(sd, p, x, nh, out_proj=True, window=None):
    """ch03 MultiHeadAttention (dropout 0) from a float64 state dict, prefix ``p`` (``window``: the last keys only)."""
    B, T, _ = x.shape
    q, k, v = (_np_lin(sd, p + n, x) for n in ("W_query", "W_key", "W_value"))
    d_out = q.shape[-1]
    q, k, v = (a.reshape(B, T, nh, d_out // nh).transpose(0, 2, 1, 3) for a in (q, k, v))
    causal = np.tril(np.ones((T, T), bool))
    if window is not None:
        causal &= np.triu(np.ones((T, T), bool), 1 - window)
    att = _np_softmax(np.where(causal, q @ k.transpose(0, 1, 3, 2), -np.inf) / math.sqrt(d_out // nh))
    ctx = (att @ v).transpose(0, 2, 1, 3).reshape(B, T, d_out)
    return _np_lin(sd, p + "out_proj", ctx) if out_proj else ctx


def _np_gpt(sd, idx, nh, hidden=False, window=None):
    """ch04 GPTModel in float64 (also gpt_with_kv_cache.py's: the same state-dict names)."""
    idx = np.asarray(idx)
    T = idx.shape[1]
    x = sd["tok_emb.weight"][idx] + sd["pos_emb.weight"][:T]
    L = len({k.split(".")[1] for k in sd if k.startswith("trf_blocks.")})
    for i in range(L):
        p = f"trf_blocks.{i}."
        x = x + _np_mha(sd, p + "att.", _np_ln(x, sd[p + "norm1.scale"], sd[p + "norm1.shift"]), nh, window=window)
        h = _np_ln(x, sd[p + "norm2.scale"], sd[p + "norm2.shift"])
        x = x + _np_lin(sd, p + "ff.layers.2", _np_gelu(_np_lin(sd, p + "ff.layers.0", h)))
    x = _np_ln(x, sd["final_norm.scale"], sd["final_norm.shift"])
    return x if hidden else _np_lin(sd, "out_head", x)


def _np_ce(logits, targets, ignore_index=-100):
    logits = logits.reshape(-1, logits.shape[-1])
    targets = np.asarray(targets).reshape(-1)
    keep = targets != ignore_index
    m = logits.max(-1)
    lse = np.log(np.exp(logits - m[:, None]).sum(-1)) + m
    return float((lse - logits[np.arange(len(targets)), np.where(keep, targets, 0)])[keep].mean())


def _np_greedy(sd, idx, nh, n_new, context_size):
    idx = np.asarray(idx)
    for _ in range(n_new):
        logits = _np_gpt(sd, idx[:, -context_size:], nh)[:, -1]
        idx = np.concatenate([idx, logits.argmax(-1)[:, None]], 1)
    return idx


def _f64(sd):
    return {k: np.asarray(v, np.float64) if np.asarray(v).dtype.kind == "f" else v for k, v in sd.items()}


GPT_CONFIG = {
    "vocab_size": 41,        # Vocabulary size (50257 in the book; the stand-in tokenizer's for _text())
    "context_length": 8,     # Context length
    "emb_dim": 16,           # Embedding dimension
    "n_heads": 2,            # Number of attention heads
    "n_layers": 2,           # Number of layers
    "drop_rate": 0.0,        # Dropout rate
    "qkv_bias": False        # Query-Key-Value bias
}


# ------------------------------------------------------------------ pages
def appendix_a_page(torch, tmp, W=None, shuffle=True):
    a = appendix_a_code(torch)
    F = torch.nn.functional
    grad = torch.autograd.grad
    out = {}
    buf = io.StringIO()
    with redirect_stdout(buf):
        # A.2 understanding tensors
        tensor1d = torch.tensor([1, 2, 3])
        print(tensor1d.dtype)
        floatvec = torch.tensor([1.0, 2.0, 3.0])
        print(floatvec.dtype)
        floatvec = tensor1d.to(torch.float32)
        print(floatvec.dtype)
        tensor2d = torch.tensor([[1, 2, 3], [4, 5, 6]])
        print(tensor2d.reshape(3, 2))
        print(tensor2d.view(3, 2))
        print(tensor2d.T)
        print(tensor2d.matmul(tensor2d.T))
        print(tensor2d @ tensor2d.T)
    out["a2"] = re.sub(r", device='[^']*'", "", buf.getvalue())  # the strict stand-in device's suffix
    out["shapes"] = (tuple(tensor2d.shape), tuple(tensor2d.reshape(3, 2).shape))

    # A.4 automatic differentiation made easy
    y = torch.tensor([1.0])  # true label
    x1 = torch.tensor([1.1])  # input feature
    w1 = torch.tensor([2.2], requires_grad=True)  # weight parameter
    b = torch.tensor([0.0], requires_grad=True)  # bias unit
    z = x1 * w1 + b  # net input
    a_ = torch.sigmoid(z)  # activation & output
    loss = F.binary_cross_entropy(a_, y)
    grad_L_w1 = grad(loss, [w1], retain_graph=True)  # grad(loss, w1, ...) in the book: a 1-tuple here too
    grad_L_b = grad(loss, [b], retain_graph=True)
    loss.backward()
    out["a4"] = (grad_L_w1[0].item(), grad_L_b[0].item(), w1.grad.item(), b.grad.item(), loss.item())

    # A.5 implementing multilayer neural networks
    model = a.NeuralNetwork(50, 3)
    out["repr"] = str(model)
    out["num_params"] = sum(p.numel() for p in model.parameters() if p.requires_grad)
    out["w0_shape"] = tuple(model.layers[0].weight.shape)
    torch.manual_seed(123)
    X = torch.rand((1, 50))
    with torch.no_grad():
        out["softmax_sum"] = torch.softmax(model(X), dim=1).sum().item()

    # A.6 setting up efficient data loaders, A.7 a typical training loop
    X_train = torch.tensor([
        [-1.2, 3.1],
        [-0.9, 2.9],
        [-0.5, 2.6],
        [2.3, -1.1],
        [2.7, -1.5]
    ])
    y_train = torch.tensor([0, 0, 0, 1, 1])
    X_test = torch.tensor([
        [-0.8, 2.8],
        [2.6, -1.6],
    ])
    y_test = torch.tensor([0, 1])
    train_ds = a.ToyDataset(X_train, y_train)
    test_ds = a.ToyDataset(X_test, y_test)
    out["len"] = len(train_ds)
    DataLoader = torch.utils.data.DataLoader
    torch.manual_seed(123)
    train_loader = DataLoader(
        dataset=train_ds,
        batch_size=2,
        shuffle=shuffle,
        num_workers=0,
        drop_last=True
    )
    test_loader = DataLoader(
        dataset=test_ds,
        batch_size=2,
        shuffle=False,
        num_workers=0
    )
    torch.manual_seed(123)
    model = a.NeuralNetwork(num_inputs=2, num_outputs=2)
    _load(torch, model, W)
    out["W0"] = _sd(model)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    num_epochs = 3
    buf = io.StringIO()
    with redirect_stdout(buf):
        for epoch in range(num_epochs):

            model.train()
            for batch_idx, (features, labels) in enumerate(train_loader):

                logits = model(features)

                loss = F.cross_entropy(logits, labels)  # Loss function

                optimizer.zero_grad()
                loss.backward()
                optimizer.step()

                ### LOGGING
                print(f"Epoch: {epoch+1:03d}/{num_epochs:03d}"
                      f" | Batch {batch_idx:03d}/{len(train_loader):03d}"
                      f" | Train/Val Loss: {loss:.2f}")

            model.eval()
            # Optional model evaluation
    out["log"] = buf.getvalue()
    model.eval()
    with torch.no_grad():
        outputs = model(X_train)
    saved = torch.get_printoptions() if hasattr(torch, "get_printoptions") else {"profile": "default"}
    torch.set_printoptions(sci_mode=False)
    try:
        probas = torch.softmax(outputs, dim=1)
        out["probas_text"] = str(probas.cpu())
    finally:
        torch.set_printoptions(**saved)
    predictions = torch.argmax(probas, dim=1)
    out["pred"] = (predictions == y_train).tolist()
    out["n_correct"] = torch.sum(predictions == y_train).item()
    out["acc"] = (a.compute_accuracy(model, train_loader), a.compute_accuracy(model, test_loader))
    out["outputs"], out["W1"] = _np(outputs), _sd(model)

    # A.8 saving and loading models
    path = os.path.join(tmp, "model.pth")
    torch.save(model.state_dict(), path)
    model = a.NeuralNetwork(2, 2)  # needs to match the original model exactly
    model.load_state_dict(torch.load(path, weights_only=True))
    with torch.no_grad():
        out["reloaded"] = bool(torch.equal(model(X_train), outputs))
    return out


def ch02_page(torch, raw_text, W=None, shuffle=False):
    c = ch02_code(torch)
    out = {}
    tokenizer = c.build_tokenizer(raw_text)
    out["vocab"] = dict(tokenizer.str_to_int)
    text1 = "Hello, do you like tea?"
    text2 = "In the sunlit terraces of the palace."
    text = " <|endoftext|> ".join((text1, text2))
    out["roundtrip"] = tokenizer.decode(tokenizer.encode(text))

    dataloader = c.create_dataloader_v1(
        raw_text, batch_size=1, max_length=4, stride=1, shuffle=False, tokenizer=tokenizer)
    data_iter = iter(dataloader)
    first_batch = next(data_iter)
    second_batch = next(data_iter)
    out["first_two"] = [[b.tolist() for b in first_batch], [b.tolist() for b in second_batch]]
    out["n_windows"] = len(dataloader)

    torch.manual_seed(123)
    vocab_size = len(tokenizer.str_to_int)
    output_dim = 16
    token_embedding_layer = torch.nn.Embedding(vocab_size, output_dim)
    max_length = 4
    dataloader = c.create_dataloader_v1(
        raw_text, batch_size=8, max_length=max_length,
        stride=max_length, shuffle=shuffle, tokenizer=tokenizer
    )
    data_iter = iter(dataloader)
    inputs, targets = next(data_iter)
    token_embeddings = token_embedding_layer(inputs)
    context_length = max_length
    pos_embedding_layer = torch.nn.Embedding(context_length, output_dim)
    if W is not None:
        with torch.no_grad():
            token_embedding_layer.weight.copy_(torch.tensor(W["tok"]))
            pos_embedding_layer.weight.copy_(torch.tensor(W["pos"]))
        token_embeddings = token_embedding_layer(inputs)
    pos_embeddings = pos_embedding_layer(torch.arange(max_length))
    input_embeddings = token_embeddings + pos_embeddings
    # ch02/03_bonus_embedding-vs-matmul: an embedding is a one-hot matrix product
    idx = torch.tensor([2, 3, 1])
    num_idx = max(idx)+1
    out_dim = 5
    torch.manual_seed(123)
    embedding = torch.nn.Embedding(num_idx, out_dim)
    onehot = torch.nn.functional.one_hot(idx)
    torch.manual_seed(123)
    linear = torch.nn.Linear(num_idx, out_dim, bias=False)
    linear.weight = torch.nn.Parameter(embedding.weight.T)
    out["onehot"] = onehot.tolist()
    out["emb_vs_linear"] = (_np(linear(onehot.float())), _np(embedding(idx)), _np(embedding.weight))
    out.update(inputs=inputs.tolist(), targets=targets.tolist(), n_batches=len(dataloader),
               shapes=[tuple(token_embeddings.shape), tuple(pos_embeddings.shape), tuple(input_embeddings.shape)],
               W={"tok": _np(token_embedding_layer.weight).copy(), "pos": _np(pos_embedding_layer.weight).copy()},
               emb=_np(input_embeddings))
    return out


def ch03_page(torch, W=None):
    c = ch03_code(torch)
    out = {}
    inputs = torch.tensor(
        [[0.43, 0.15, 0.89],  # Your     (x^1)
         [0.55, 0.87, 0.66],  # journey  (x^2)
         [0.57, 0.85, 0.64],  # starts   (x^3)
         [0.22, 0.58, 0.33],  # with     (x^4)
         [0.77, 0.25, 0.10],  # one      (x^5)
         [0.05, 0.80, 0.55]]  # step     (x^6)
    )
    # 3.3.1 the naive version: dot products in a loop, softmax_naive, a weighted sum
    query = inputs[1]  # 2nd input token is the query
    attn_scores_2 = torch.empty(inputs.shape[0])
    for i, x_i in enumerate(inputs):
        attn_scores_2[i] = torch.dot(x_i, query)  # dot product (transpose not necessary here: 1-dim vectors)

    def softmax_naive(x):
        return torch.exp(x) / torch.exp(x).sum(dim=0)

    attn_weights_2_naive = softmax_naive(attn_scores_2)
    attn_weights_2_tmp = attn_scores_2 / attn_scores_2.sum()
    context_vec_2 = torch.zeros(query.shape)
    for i, x_i in enumerate(inputs):
        context_vec_2 += attn_weights_2_naive[i]*x_i
    attn_scores = torch.empty(6, 6)
    for i, x_i in enumerate(inputs):
        for j, x_j in enumerate(inputs):
            attn_scores[i, j] = torch.dot(x_i, x_j)
    out["naive"] = (_np(attn_scores_2), _np(attn_weights_2_naive), _np(attn_weights_2_tmp), _np(context_vec_2),
                    _np(attn_scores))

    # 3.3 a simple self-attention mechanism without trainable weights
    attn_scores = inputs @ inputs.T
    attn_weights = torch.softmax(attn_scores, dim=-1)
    all_context_vecs = attn_weights @ inputs
    out["simple"] = _np(all_context_vecs)
    out["row_sums"] = attn_weights.sum(dim=-1).tolist()

    d_in = inputs.shape[1]  # the input embedding size, d=3
    d_out = 2  # the output embedding size, d=2
    torch.manual_seed(123)
    sa_v1 = c.SelfAttention_v1(d_in, d_out)
    torch.manual_seed(789)
    sa_v2 = c.SelfAttention_v2(d_in, d_out)
    mods = {"sa_v1": sa_v1, "sa_v2": sa_v2}
    if W is not None:
        for k, m in mods.items():
            _load(torch, m, W[k])
    out["sa_v1"], out["sa_v2"] = _np(sa_v1(inputs)), _np(sa_v2(inputs))
    # Exercise 3.1: sa_v1 with sa_v2's weights gives sa_v2's output
    sa_v1_t = c.SelfAttention_v1(d_in, d_out)
    sa_v1_t.W_query = torch.nn.Parameter(sa_v2.W_query.weight.T)
    sa_v1_t.W_key = torch.nn.Parameter(sa_v2.W_key.weight.T)
    sa_v1_t.W_value = torch.nn.Parameter(sa_v2.W_value.weight.T)
    out["ex31"] = _np(sa_v1_t(inputs))

    # 3.5.1 the causal mask, two ways
    queries = sa_v2.W_query(inputs)
    keys = sa_v2.W_key(inputs)
    attn_scores = queries @ keys.T
    attn_weights = torch.softmax(attn_scores / keys.shape[-1]**0.5, dim=-1)
    context_length = attn_scores.shape[0]
    mask_simple = torch.tril(torch.ones(context_length, context_length))
    masked_simple = attn_weights*mask_simple
    row_sums = masked_simple.sum(dim=-1, keepdim=True)
    masked_simple_norm = masked_simple / row_sums
    mask = torch.triu(torch.ones(context_length, context_length), diagonal=1)
    masked = attn_scores.masked_fill(mask.bool(), -torch.inf)
    attn_weights = torch.softmax(masked / keys.shape[-1]**0.5, dim=-1)
    out["masked_simple_norm"], out["masked_softmax"] = _np(masked_simple_norm), _np(attn_weights)

    # 3.5.2 dropout
    torch.manual_seed(123)
    dropout = torch.nn.Dropout(0.5)  # dropout rate of 50%
    example = torch.ones(6, 6)  # create a matrix of ones
    out["dropout"] = _np(dropout(example))

    # 3.5.3 CausalAttention, 3.6 multi-head attention
    batch = torch.stack((inputs, inputs), dim=0)
    torch.manual_seed(123)
    context_length = batch.shape[1]
    ca = c.CausalAttention(d_in, d_out, context_length, 0.0)
    torch.manual_seed(123)
    mha_wrapper = c.MultiHeadAttentionWrapper(d_in, d_out, context_length, 0.0, num_heads=2)
    torch.manual_seed(123)
    mha = c.MultiHeadAttention(d_in, d_out, context_length, 0.0, num_heads=2)
    mods.update(ca=ca, mha_wrapper=mha_wrapper, mha=mha)
    if W is not None:
        for k in ("ca", "mha_wrapper", "mha"):
            _load(torch, mods[k], W[k])
    out["ca"], out["mha_wrapper"], out["mha"] = _np(ca(batch)), _np(mha_wrapper(batch)), _np(mha(batch))
    out["W"] = {k: _sd(m) for k, m in mods.items()}
    out["inputs"] = _np(inputs)
    return out


def ch04_page(torch, cfg, W=None, prompt=((3, 7, 11, 2),)):
    c = ch04_code(torch)
    out = {}
    torch.manual_seed(123)
    batch_example = torch.randn(2, 5)  # create 2 training examples with 5 dimensions (features) each
    ln = c.LayerNorm(emb_dim=5)
    out_ln = ln(batch_example)
    mean = out_ln.mean(dim=-1, keepdim=True)
    var = out_ln.var(dim=-1, unbiased=False, keepdim=True)
    out["ln"] = (_np(batch_example), _np(out_ln), _np(mean), _np(var))
    nn = torch.nn

    class ExampleDeepNeuralNetwork(nn.Module):
        def __init__(self, layer_sizes, use_shortcut):
            super().__init__()
            self.use_shortcut = use_shortcut
            self.layers = nn.ModuleList([
                nn.Sequential(nn.Linear(layer_sizes[0], layer_sizes[1]), c.GELU()),
                nn.Sequential(nn.Linear(layer_sizes[1], layer_sizes[2]), c.GELU()),
                nn.Sequential(nn.Linear(layer_sizes[2], layer_sizes[3]), c.GELU()),
                nn.Sequential(nn.Linear(layer_sizes[3], layer_sizes[4]), c.GELU()),
                nn.Sequential(nn.Linear(layer_sizes[4], layer_sizes[5]), c.GELU())
            ])

        def forward(self, x):
            for layer in self.layers:
                # Compute the output of the current layer
                layer_output = layer(x)
                # Check if shortcut can be applied
                if self.use_shortcut and x.shape == layer_output.shape:
                    x = x + layer_output
                else:
                    x = layer_output
            return x

    def print_gradients(model, x):
        # Forward pass
        output = model(x)
        target = torch.tensor([[0.]])

        # Calculate loss based on how close the target
        # and output are
        loss = nn.MSELoss()
        loss = loss(output, target)

        # Backward pass to calculate the gradients
        loss.backward()

        for name, param in model.named_parameters():
            if 'weight' in name:
                # Print the mean absolute gradient of the weights
                print(f"{name} has gradient mean of {param.grad.abs().mean().item()}")

    layer_sizes = [3, 3, 3, 3, 3, 1]
    sample_input = torch.tensor([[1., 0., -1.]])
    out["shortcut"] = {}
    for use_shortcut in (False, True):
        torch.manual_seed(123)
        m = ExampleDeepNeuralNetwork(layer_sizes, use_shortcut=use_shortcut)
        if W is not None:
            _load(torch, m, W["shortcut"][use_shortcut][0])
        buf = io.StringIO()
        with redirect_stdout(buf):
            print_gradients(m, sample_input)
        out["shortcut"][use_shortcut] = (_sd(m), buf.getvalue())

    gelu = c.GELU()
    x = torch.linspace(-3, 3, 100)
    out["gelu"] = (_np(x), _np(gelu(x)))

    torch.manual_seed(123)
    model = c.GPTModel(cfg)
    _load(torch, model, None if W is None else W["gpt"])
    total_params = sum(p.numel() for p in model.parameters())
    total_params_gpt2 = total_params - sum(p.numel() for p in model.out_head.parameters())
    total_size_bytes = total_params * 4
    total_size_mb = total_size_bytes / (1024 * 1024)
    buf = io.StringIO()
    with redirect_stdout(buf):
        print(f"Total number of parameters: {total_params:,}")
        print(f"Number of trainable parameters considering weight tying: {total_params_gpt2:,}")
        print(f"Total size of the model: {total_size_mb:.2f} MB")
    out["report"] = buf.getvalue()
    out["ff_params"] = sum(p.numel() for p in model.trf_blocks[0].ff.parameters())
    out["att_params"] = sum(p.numel() for p in model.trf_blocks[0].att.parameters())

    device = _dev(torch)
    model.to(device)
    batch = torch.tensor([[6, 1, 5, 9, 0, 2, 4, 8], [1, 1, 3, 3, 5, 7, 0, 2]])
    out["logits"] = _np(model(batch))
    out["batch"] = batch.tolist()

    model.eval()  # disable dropout
    encoded_tensor = torch.tensor(prompt)
    token_ids = c.generate_text_simple(
        model=model,
        idx=encoded_tensor,
        max_new_tokens=6,
        context_size=cfg["context_length"]
    )
    out["generated"] = token_ids.tolist()
    out["W"] = _sd(model)

    # the bonus GPTModelFast (nn.LayerNorm, nn.GELU(approximate="tanh"), SDPA) with the same weights
    fast = c.GPTModelFast(cfg)
    with torch.no_grad():
        for name, p in fast.named_parameters():
            src = _fast_to_gpt(name)
            p.copy_(torch.cat([model.get_parameter(n) for n in src]) if isinstance(src, list)
                    else model.get_parameter(src))
    fast.to(device)
    out["fast"] = _np(fast(batch))
    out["fast_n"] = sum(p.numel() for p in fast.parameters())
    return out


def _fast_to_gpt(name):
    """GPTModelFast's parameter name -> GPTModel's (a list: rows stacked)."""
    if name.endswith("att.qkv.weight"):
        p = name[:-len("qkv.weight")]
        return [p + "W_query.weight", p + "W_key.weight", p + "W_value.weight"]
    name = name.replace("att.proj.", "att.out_proj.")
    if "norm" in name:
        name = name.replace(".weight", ".scale").replace(".bias", ".shift")
    return name


def ch05_sampling_page(torch, n=1_000):
    out = {}
    vocab = {
        "closer": 0, "every": 1, "effort": 2, "forward": 3, "inches": 4,
        "moves": 5, "pizza": 6, "toward": 7, "you": 8,
    }
    inverse_vocab = {v: k for k, v in vocab.items()}
    next_token_logits = torch.tensor(
        [4.51, 0.89, -1.90, 6.75, 1.63, -1.62, -1.89, 6.28, 1.79]
    )
    probas = torch.softmax(next_token_logits, dim=0)
    next_token_id = torch.argmax(probas).item()
    out["argmax"] = inverse_vocab[next_token_id]

    def print_sampled_tokens(probas):
        torch.manual_seed(123)  # Manual seed for reproducibility
        sample = [torch.multinomial(probas, num_samples=1).item() for i in range(n)]
        sampled_ids = torch.bincount(torch.tensor(sample), minlength=len(probas))
        for i, freq in enumerate(sampled_ids):
            print(f"{freq} x {inverse_vocab[i]}")

    def softmax_with_temperature(logits, temperature):
        scaled_logits = logits / temperature
        return torch.softmax(scaled_logits, dim=0)

    temperatures = [1, 0.1, 5]  # Original, higher confidence, and lower confidence
    scaled_probas = [softmax_with_temperature(next_token_logits, T) for T in temperatures]
    out["scaled"] = [_np(p) for p in scaled_probas]
    buf = io.StringIO()
    with redirect_stdout(buf):
        print_sampled_tokens(probas)
    out["printed"] = buf.getvalue()

    top_k = 3
    top_logits, top_pos = torch.topk(next_token_logits, top_k)
    out["top"] = (top_logits.tolist(), top_pos.tolist())
    new_logits = torch.where(
        condition=next_token_logits < top_logits[-1],
        input=torch.tensor(float("-inf")),
        other=next_token_logits
    )
    topk_probas = torch.softmax(new_logits, dim=0)
    out["new_logits"], out["topk_probas"] = new_logits.tolist(), _np(topk_probas)
    return out


def ch05_page(torch, raw_text, cfg, tmp, W=None, shuffle=True, num_epochs=2, lr=5e-3):
    c2, c4, c5 = ch02_code(torch), ch04_code(torch), ch05_code(torch)
    out = {}
    tokenizer = c2.build_tokenizer(raw_text)
    text_data = raw_text
    # Train/validation ratio
    train_ratio = 0.90
    split_idx = int(train_ratio * len(text_data))
    train_data = text_data[:split_idx]
    val_data = text_data[split_idx:]
    out["ids"] = (tokenizer.encode(train_data), tokenizer.encode(val_data))

    torch.manual_seed(123)
    train_loader = c2.create_dataloader_v1(
        train_data, batch_size=2, max_length=cfg["context_length"], stride=cfg["context_length"],
        drop_last=True, shuffle=shuffle, num_workers=0, tokenizer=tokenizer)
    val_loader = c2.create_dataloader_v1(
        val_data, batch_size=2, max_length=cfg["context_length"], stride=cfg["context_length"],
        drop_last=False, shuffle=False, num_workers=0, tokenizer=tokenizer)
    out["n_batches"] = (len(train_loader), len(val_loader))

    device = _dev(torch)
    torch.manual_seed(123)
    model = c4.GPTModel(cfg)
    _load(torch, model, W)
    model.to(device)  # no assignment model = model.to(device) necessary for nn.Module classes
    out["W0"] = _sd(model)
    with torch.no_grad():  # Disable gradient tracking for efficiency because we are not training, yet
        train_loss = c5.calc_loss_loader(train_loader, model, device)
        val_loss = c5.calc_loss_loader(val_loader, model, device)
    out["initial"] = (train_loss, val_loss)

    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.1)
    buf = io.StringIO()
    with redirect_stdout(buf):
        train_losses, val_losses, tokens_seen = c5.train_model_simple(
            model, train_loader, val_loader, optimizer, device,
            num_epochs=num_epochs, eval_freq=5, eval_iter=5,
            start_context="Every effort moves you", tokenizer=tokenizer
        )
    out.update(log=buf.getvalue(), train_losses=train_losses, val_losses=val_losses, tokens_seen=tokens_seen)
    out["W1"] = _sd(model)

    model.eval()
    start = c5.text_to_token_ids("Every effort moves you", tokenizer).to(device)
    greedy = c5.generate_text_simple(model=model, idx=start, max_new_tokens=6,
                                     context_size=cfg["context_length"])
    out["greedy"] = greedy.tolist()
    out["greedy_text"] = c5.token_ids_to_text(greedy, tokenizer)
    out["generate_t0"] = c5.generate(model=model, idx=start, max_new_tokens=6,
                                     context_size=cfg["context_length"]).tolist()
    torch.manual_seed(123)
    token_ids = c5.generate(
        model=model,
        idx=start,
        max_new_tokens=10,
        context_size=cfg["context_length"],
        top_k=3,
        temperature=1.4
    )
    out["sampled"] = token_ids.tolist()
    out["eos_stop"] = c5.generate(model=model, idx=start, max_new_tokens=6, context_size=cfg["context_length"],
                                  eos_id=out["greedy"][0][start.shape[1] + 2]).tolist()

    # 5.4 loading and saving model weights
    path = os.path.join(tmp, "model.pth")
    torch.save(model.state_dict(), path)
    model2 = c4.GPTModel(cfg)
    model2.load_state_dict(torch.load(path, map_location=device, weights_only=True))
    model2.eval()
    out["reload_same"] = bool(torch.equal(model2(start), model(start)))

    path = os.path.join(tmp, "model_and_optimizer.pth")
    torch.save({
        "model_state_dict": model.state_dict(),
        "optimizer_state_dict": optimizer.state_dict(),
        },
        path
    )
    checkpoint = torch.load(path, weights_only=True)
    model3 = c4.GPTModel(cfg)
    model3.load_state_dict(checkpoint["model_state_dict"])
    optimizer3 = torch.optim.AdamW(model3.parameters(), lr=0.0005, weight_decay=0.1)
    optimizer3.load_state_dict(checkpoint["optimizer_state_dict"])
    model3.train()
    model.train()
    out["lr3"] = optimizer3.param_groups[0]["lr"]
    # one more step on the original and on the restored pair, and on a fresh AdamW
    model4 = c4.GPTModel(cfg)
    model4.load_state_dict(checkpoint["model_state_dict"])
    optimizer4 = torch.optim.AdamW(model4.parameters(), lr=lr, weight_decay=0.1)
    input_batch, target_batch = next(iter(val_loader))
    for m, opt in ((model, optimizer), (model3, optimizer3), (model4, optimizer4)):
        opt.zero_grad()
        c5.calc_loss_batch(input_batch, target_batch, m, device).backward()
        opt.step()
    out["after_step"] = [_sd(m) for m in (model, model3, model4)]
    return out


def _spam_data(n=64, seed=3):
    """Synthetic messages over _text()'s words; "spam" (label 1) iff the word "cheap" occurs."""
    rng = np.random.default_rng(seed)
    words = [w for w in ch02_code(lucid).build_tokenizer(_text()).str_to_int
             if w.isalpha() and w != "cheap"]
    texts, labels = [], []
    for i in range(n):
        msg = list(rng.choice(words, rng.integers(3, 7)))
        if i % 2:
            msg.insert(int(rng.integers(0, len(msg) + 1)), "cheap")
        texts.append(" ".join(msg))
        labels.append(i % 2)
    return texts, labels


def _ch06_loaders(torch, c6, tokenizer, shuffle):
    DataLoader = torch.utils.data.DataLoader
    texts, labels = _spam_data()
    pad = tokenizer.str_to_int["<|endoftext|>"]  # 50256 for tiktoken's GPT-2 encoding
    train_dataset = c6.SpamDataset(
        csv_file={"Text": texts[:48], "Label": labels[:48]},
        max_length=None,
        tokenizer=tokenizer,
        pad_token_id=pad
    )
    val_dataset = c6.SpamDataset(
        csv_file={"Text": texts[48:], "Label": labels[48:]},
        max_length=train_dataset.max_length,
        tokenizer=tokenizer,
        pad_token_id=pad
    )
    num_workers = 0
    batch_size = 8
    torch.manual_seed(123)
    train_loader = DataLoader(
        dataset=train_dataset,
        batch_size=batch_size,
        shuffle=shuffle,
        num_workers=num_workers,
        drop_last=True,
    )
    val_loader = DataLoader(
        dataset=val_dataset,
        batch_size=batch_size,
        num_workers=num_workers,
        drop_last=False,
    )
    return train_dataset, val_dataset, train_loader, val_loader


def _classifier(torch, c4, cfg, W):
    model = c4.GPTModel(cfg)  # the "pretrained" base (random weights at this size)
    model.eval()
    for param in model.parameters():
        param.requires_grad = False
    torch.manual_seed(123)
    num_classes = 2
    model.out_head = torch.nn.Linear(in_features=cfg["emb_dim"], out_features=num_classes)
    for param in model.trf_blocks[-1].parameters():
        param.requires_grad = True
    for param in model.final_norm.parameters():
        param.requires_grad = True
    _load(torch, model, W)
    return model


def ch06_page(torch, cfg, W=None, shuffle=True, num_epochs=6, lr=1e-2):
    c2, c4, c6 = ch02_code(torch), ch04_code(torch), ch06_code(torch)
    out = {}
    tokenizer = c2.build_tokenizer(_text())
    train_dataset, val_dataset, train_loader, val_loader = _ch06_loaders(torch, c6, tokenizer, shuffle)
    out["max_length"] = train_dataset.max_length
    out["encoded"] = (train_dataset.encoded_texts, val_dataset.encoded_texts)
    device = _dev(torch)
    torch.manual_seed(123)
    model = _classifier(torch, c4, cfg, W)
    model.to(device)
    out["W0"] = _sd(model)
    out["trainable"] = sum(p.numel() for p in model.parameters() if p.requires_grad)
    out["trainable_names"] = [n for n, p in model.named_parameters() if p.requires_grad]

    inputs = torch.tensor(tokenizer.encode("Every effort moves you")).unsqueeze(0)
    with torch.no_grad():
        outputs = model(inputs)
    out["outputs_shape"] = tuple(outputs.shape)
    out["last"] = _np(outputs[:, -1, :])
    out["inputs"] = inputs.tolist()

    torch.manual_seed(123)  # For reproducibility due to the shuffling in the training data loader
    out["acc0"] = [c6.calc_accuracy_loader(ld, model, device, num_batches=10) for ld in (train_loader, val_loader)]
    with torch.no_grad():  # Disable gradient tracking for efficiency because we are not training, yet
        out["loss0"] = [c6.calc_loss_loader(ld, model, device, num_batches=5) for ld in (train_loader, val_loader)]

    torch.manual_seed(123)
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.1)
    buf = io.StringIO()
    with redirect_stdout(buf):
        train_losses, val_losses, train_accs, val_accs, examples_seen = c6.train_classifier_simple(
            model, train_loader, val_loader, optimizer, device,
            num_epochs=num_epochs, eval_freq=5, eval_iter=5,
        )
    out.update(log=buf.getvalue(), train_losses=train_losses, val_losses=val_losses, train_accs=train_accs,
               val_accs=val_accs, examples_seen=examples_seen)
    out["W1"] = _sd(model)
    out["grads_none"] = [n for n, p in model.named_parameters() if p.grad is None]
    out["acc1"] = [c6.calc_accuracy_loader(ld, model, device) for ld in (train_loader, val_loader)]
    pad = tokenizer.str_to_int["<|endoftext|>"]
    out["reviews"] = [c6.classify_review(text, model, tokenizer, device, max_length=train_dataset.max_length,
                                         pad_token_id=pad) for text in _REVIEWS]
    return out


_REVIEWS = ["the dog ran to the cheap house", "Jack thought of the painter", "cheap genius", "you sat in the garden"]


def ch07_page(torch, cfg, W=None):
    c2, c4, c5, c7 = ch02_code(torch), ch04_code(torch), ch05_code(torch), ch07_code(torch)
    custom_collate_fn = c7.custom_collate_fn
    out = {}
    inputs_1 = [0, 1, 2, 3, 4]
    inputs_2 = [5, 6]
    inputs_3 = [7, 8, 9]
    batch = (
        inputs_1,
        inputs_2,
        inputs_3
    )
    inputs, targets = custom_collate_fn(batch)
    out["collated"] = (inputs.tolist(), targets.tolist())
    inputs, targets = custom_collate_fn(batch, allowed_max_length=3)
    out["truncated"] = (inputs.tolist(), targets.tolist())

    logits_1 = torch.tensor(
        [[-1.0, 1.0],  # 1st training example
         [-0.5, 1.5]]  # 2nd training example
    )
    targets_1 = torch.tensor([0, 1])
    loss_1 = torch.nn.functional.cross_entropy(logits_1, targets_1)
    logits_2 = torch.tensor(
        [[-1.0, 1.0],
         [-0.5, 1.5],
         [-0.5, 1.5]]  # New 3rd training example
    )
    targets_2 = torch.tensor([0, 1, 1])
    loss_2 = torch.nn.functional.cross_entropy(logits_2, targets_2)
    targets_3 = torch.tensor([0, 1, -100])
    loss_3 = torch.nn.functional.cross_entropy(logits_2, targets_3)
    out["losses"] = [loss_1.item(), loss_2.item(), loss_3.item()]
    out["loss_1_equals_loss_3"] = bool(loss_1 == loss_3)

    data = [
        {"instruction": "Rewrite the sentence.", "input": "The cat slept.", "output": "The cat was asleep."},
        {"instruction": "Name the painter.", "input": "", "output": "Jack."},
        {"instruction": "Where did the dog run?", "input": "A dog ran to the house.", "output": "To the house."},
        {"instruction": "Say it again.", "input": "Every effort moves you.", "output": "Every effort moves you."},
    ]
    out["formatted"] = c7.format_input(data[1])
    tokenizer = c2.build_tokenizer(" ".join(c7.format_input(e) + f"\n\n### Response:\n{e['output']}" for e in data))
    pad = tokenizer.str_to_int["<|endoftext|>"]
    device = _dev(torch)
    customized_collate_fn = functools.partial(
        custom_collate_fn,
        pad_token_id=pad,  # 50256 (the default) for tiktoken's GPT-2 encoding
        device=device,
        allowed_max_length=cfg["context_length"]
    )
    train_dataset = c7.InstructionDataset(data, tokenizer)
    out["encoded"] = train_dataset.encoded_texts
    out["pad"] = pad
    train_loader = torch.utils.data.DataLoader(
        train_dataset,
        batch_size=2,
        collate_fn=customized_collate_fn,
        shuffle=False,
        drop_last=True,
        num_workers=0
    )
    out["batches"] = [(x.tolist(), y.tolist()) for x, y in train_loader]
    cfg = dict(cfg, vocab_size=len(tokenizer.str_to_int))
    torch.manual_seed(123)
    model = c4.GPTModel(cfg)
    _load(torch, model, W)
    model.to(device)
    x, y = next(iter(train_loader))
    with torch.no_grad():
        out["loss"] = c5.calc_loss_batch(x, y, model, device).item()
    out["W"] = _sd(model)
    return out


def ch06_bonus_page(torch, cfg, W=None, trainable_layers="last_block", trainable_token_pos=-1,
                    average_embeddings=False, batch_size=8, accumulation_steps=1, num_epochs=1):
    c2, c4, c6 = ch02_code(torch), ch04_code(torch), ch06_code(torch)
    tokenizer = c2.build_tokenizer(_text())
    pad = tokenizer.str_to_int["<|endoftext|>"]
    b = ch06_bonus_code(torch, pad)
    texts, labels = _spam_data()
    train_dataset = c6.SpamDataset({"Text": texts[:48], "Label": labels[:48]}, tokenizer, pad_token_id=pad)
    train_loader = torch.utils.data.DataLoader(dataset=train_dataset, batch_size=batch_size, shuffle=False,
                                               num_workers=0, drop_last=True)
    device = _dev(torch)
    torch.manual_seed(123)
    model = c4.GPTModel(cfg)
    model.eval()
    for param in model.parameters():
        param.requires_grad = False
    torch.manual_seed(123)
    model.out_head = torch.nn.Linear(in_features=cfg["emb_dim"], out_features=2)
    if trainable_layers == "all":
        for param in model.parameters():
            param.requires_grad = True
    elif trainable_layers == "last_block":
        for param in model.trf_blocks[-1].parameters():
            param.requires_grad = True
        for param in model.final_norm.parameters():
            param.requires_grad = True
    elif trainable_layers in ("lora", "lora_alternative"):
        b.replace_linear_with_lora(model, rank=4, alpha=8, alternative=trainable_layers == "lora_alternative")
    _load(torch, model, W)
    model.to(device)
    out = {"W0": _sd(model)}
    xb, yb = next(iter(train_loader))
    with torch.no_grad():
        out["loss0"] = b.calc_loss_batch(xb, yb, model, device, trainable_token_pos=trainable_token_pos,
                                         average_embeddings=average_embeddings).item()
    torch.manual_seed(123)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.1)
    out["accs"], out["examples_seen"] = b.train_classifier_simple(
        model, train_loader, None, optimizer, device, num_epochs=num_epochs, eval_freq=50, eval_iter=5,
        trainable_token_pos=trainable_token_pos, accumulation_steps=accumulation_steps,
        average_embeddings=average_embeddings)
    out["W1"] = _sd(model)
    out["pad"] = pad
    out["batch"] = (xb.tolist(), yb.tolist())
    return out


_DPO_DATA = [
    {"instruction": "Rewrite the sentence.", "input": "The cat slept.",
     "chosen": "The cat was asleep.", "rejected": "cat cat the the."},
    {"instruction": "Name the painter.", "input": "", "chosen": "It was Jack.", "rejected": "A dog ran."},
    {"instruction": "Where did the dog run?", "input": "A dog ran to the house.",
     "chosen": "To the house.", "rejected": "The dog was a cheap genius."},
    {"instruction": "Say it again.", "input": "Every effort moves you.",
     "chosen": "Every effort moves you.", "rejected": "Moves effort every."},
    {"instruction": "What did Jack think?", "input": "", "chosen": "Jack thought of the dog.",
     "rejected": "the the the."},
    {"instruction": "Where was the painter?", "input": "The painter sat in the garden.",
     "chosen": "In the garden.", "rejected": "On the cheap mat."},
]


def dpo_page(torch, cfg, W=None, num_epochs=3, lr=2e-2):
    c2, c4, c7, d = ch02_code(torch), ch04_code(torch), ch07_code(torch), dpo_code(torch)
    F = torch.nn.functional
    out = {}
    # the gather demo
    logits = torch.tensor(
        [[2.0, 1.0, 0.1],
         [0.5, 2.5, 0.3]])  # Shape: (2, 3)
    targets = torch.tensor([0, 2])  # Shape: (2,)
    log_softmax_logits = F.log_softmax(logits, dim=1)  # Shape: (2, 3)
    selected_log_probs = torch.gather(
        input=log_softmax_logits,
        dim=1,
        index=targets.unsqueeze(1),  # Shape 2, 1
    ).squeeze(1)  # Shape: (2,)
    manual_loss = -selected_log_probs.mean()  # Averaging over the batch
    cross_entropy_loss = F.cross_entropy(logits, targets)
    out["gather_demo"] = (manual_loss.item(), cross_entropy_loss.item())

    texts = []
    for e in _DPO_DATA:
        texts += [c7.format_input(e) + f"\n\n### Response:\n{e[k]}" for k in ("chosen", "rejected")]
    tokenizer = c2.build_tokenizer(" ".join(texts))
    device = _dev(torch)
    customized_collate_fn = functools.partial(
        d.custom_collate_fn,
        pad_token_id=tokenizer.str_to_int["<|endoftext|>"],  # 50256 (the default) for tiktoken's GPT-2
        device=device,            # Put the data directly on a GPU if available
        mask_prompt_tokens=True,  # This is optional
        allowed_max_length=cfg["context_length"]  # The supported context length of the model
    )
    DataLoader = torch.utils.data.DataLoader
    torch.manual_seed(123)
    train_dataset = d.PreferenceDataset(_DPO_DATA[:4], tokenizer)
    train_loader = DataLoader(train_dataset, batch_size=2, collate_fn=customized_collate_fn, shuffle=False,
                              drop_last=True, num_workers=0)
    val_dataset = d.PreferenceDataset(_DPO_DATA[4:], tokenizer)
    val_loader = DataLoader(val_dataset, batch_size=2, collate_fn=customized_collate_fn, shuffle=False,
                            drop_last=False, num_workers=0)
    out["encoded"] = train_dataset.encoded_texts + val_dataset.encoded_texts
    out["pad"] = tokenizer.str_to_int["<|endoftext|>"]
    batch = next(iter(train_loader))
    out["batch"] = {k: v.tolist() for k, v in batch.items() if k != "prompt"}
    out["batch_prompt"] = [p.tolist() for p in batch["prompt"]]

    cfg = dict(cfg, vocab_size=len(tokenizer.str_to_int))
    torch.manual_seed(123)
    policy_model = c4.GPTModel(cfg)
    _load(torch, policy_model, W)
    reference_model = c4.GPTModel(cfg)
    reference_model.load_state_dict(policy_model.state_dict())
    reference_model.eval()
    policy_model.to(device)
    reference_model.to(device)
    out["W0"] = _sd(policy_model)
    with torch.no_grad():
        out["loss0"] = [v.item() for v in d.compute_dpo_loss_batch(batch, policy_model, reference_model, beta=0.1)]
        out["logprobs0"] = _np(d.compute_logprobs(policy_model(batch["chosen"]), batch["chosen"],
                                                  batch["chosen_mask"]))
        out["logprobs0_nomask"] = _np(d.compute_logprobs(policy_model(batch["chosen"]), batch["chosen"]))

    torch.manual_seed(123)
    optimizer = torch.optim.AdamW(policy_model.parameters(), lr=lr, weight_decay=0.01)
    buf = io.StringIO()
    with redirect_stdout(buf):
        tracking = d.train_model_dpo_simple(
            policy_model=policy_model,
            reference_model=reference_model,
            train_loader=train_loader,
            val_loader=val_loader,
            optimizer=optimizer,
            num_epochs=num_epochs,
            beta=0.1,  # value between 0.1 and 0.5
            eval_freq=1,
            eval_iter=5,
            start_context=c7.format_input(_DPO_DATA[4]),
            tokenizer=tokenizer
        )
    out.update(log=buf.getvalue(), tracking=tracking, W1=_sd(policy_model), Wref=_sd(reference_model))
    with torch.no_grad():
        out["loss1"] = [v.item() for v in d.compute_dpo_loss_batch(batch, policy_model, reference_model, beta=0.1)]
    return out


def _ch05_loaders(torch, c2, raw_text, cfg, shuffle):
    tokenizer = c2.build_tokenizer(raw_text)
    split_idx = int(0.90 * len(raw_text))
    torch.manual_seed(123)
    train_loader = c2.create_dataloader_v1(
        raw_text[:split_idx], batch_size=2, max_length=cfg["context_length"], stride=cfg["context_length"],
        drop_last=True, shuffle=shuffle, num_workers=0, tokenizer=tokenizer)
    val_loader = c2.create_dataloader_v1(
        raw_text[split_idx:], batch_size=2, max_length=cfg["context_length"], stride=cfg["context_length"],
        drop_last=False, shuffle=False, num_workers=0, tokenizer=tokenizer)
    return tokenizer, train_loader, val_loader


def appendix_d_page(torch, raw_text, cfg, W=None, shuffle=True, n_epochs=2, peak_lr=0.01):
    c2, c4, d = ch02_code(torch), ch04_code(torch), appendix_d_code(torch)
    out = {}
    tokenizer, train_loader, val_loader = _ch05_loaders(torch, c2, raw_text, cfg, shuffle)
    device = _dev(torch)
    torch.manual_seed(123)
    model = c4.GPTModel(cfg)
    _load(torch, model, W)
    model.to(device)
    out["W0"] = _sd(model)

    # D.3 gradient clipping
    input_batch, target_batch = next(iter(val_loader))
    loss = d.calc_loss_batch(input_batch, target_batch, model, device)
    loss.backward()
    out["max_before"] = d.find_highest_gradient(model).item()
    out["grads_before"] = {n: _np(p.grad).copy() for n, p in model.named_parameters()}
    out["norm"] = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=1.0).item()
    out["max_after"] = d.find_highest_gradient(model).item()
    out["grads_after"] = {n: _np(p.grad).copy() for n, p in model.named_parameters()}

    # D.4 the modified training function
    torch.manual_seed(123)
    model = c4.GPTModel(cfg)
    _load(torch, model, out["W0"])
    model.to(device)
    weight_decay = 0.1
    optimizer = torch.optim.AdamW(model.parameters(), lr=peak_lr, weight_decay=weight_decay)
    total_steps = len(train_loader) * n_epochs
    warmup_steps = int(0.2 * total_steps)  # 20% warmup
    buf = io.StringIO()
    with redirect_stdout(buf):
        train_losses, val_losses, tokens_seen, lrs = d.train_model(
            model, train_loader, val_loader, optimizer, device, n_epochs=n_epochs,
            eval_freq=5, eval_iter=1, start_context="Every effort moves you",
            tokenizer=tokenizer, warmup_steps=warmup_steps,
            initial_lr=1e-5, min_lr=1e-5
        )
    out.update(log=buf.getvalue(), train_losses=train_losses, val_losses=val_losses, tokens_seen=tokens_seen,
               lrs=lrs, warmup_steps=warmup_steps, total_steps=total_steps,
               final_lr=optimizer.param_groups[0]["lr"], W1=_sd(model))
    return out


def appendix_e_page(torch, cfg, W=None, shuffle=True, num_epochs=3, lr=1e-2):
    c2, c4, c6, e = ch02_code(torch), ch04_code(torch), ch06_code(torch), appendix_e_code(torch)
    out = {}
    # E.4 the LoRA layers on their own
    torch.manual_seed(123)
    layer = torch.nn.Linear(10, 2)
    x = torch.randn((1, 10))
    layer_lora = e.LinearWithLoRA(layer, rank=2, alpha=4)
    if W is not None:
        x = torch.tensor(W["x"])
        _load(torch, layer_lora, W["layer"])
    out["base_equal"] = bool(torch.equal(layer_lora(x), layer(x)))  # B starts at zero
    out["layer_W"] = (_np(x), _sd(layer_lora))
    with torch.no_grad():
        layer_lora.lora.B.copy_(torch.tensor(np.linspace(-1, 1, 4, dtype=np.float32).reshape(2, 2)))
    out["lora_layer"] = (_np(x), _sd(layer_lora), _np(layer_lora(x)))
    bound = 1 / math.sqrt(2)  # kaiming_uniform_(a=sqrt(5)) on a (10, 2) matrix: fan_in = 2
    a_max = layer_lora.lora.A.abs().max().item()
    out["A_in_bound"] = 1 / math.sqrt(10) < a_max <= bound  # fan_in is A's dim 1 (rank), not in_dim

    # E.5 finetuning the ch06 classifier with LoRA
    tokenizer = c2.build_tokenizer(_text())
    train_dataset, val_dataset, train_loader, val_loader = _ch06_loaders(torch, c6, tokenizer, shuffle)
    device = _dev(torch)
    torch.manual_seed(123)
    model = _classifier(torch, c4, cfg, None if W is None else W["classifier"])
    xb, _ = next(iter(val_loader))
    with torch.no_grad():
        logits_before = model(xb)
    total_params = sum(p.numel() for p in model.parameters() if p.requires_grad)
    out["trainable_before"] = total_params
    for param in model.parameters():
        param.requires_grad = False
    out["trainable_frozen"] = sum(p.numel() for p in model.parameters() if p.requires_grad)
    torch.manual_seed(123)
    replace_linear_with_lora = e.replace_linear_with_lora
    replace_linear_with_lora(model, rank=16, alpha=16)
    if W is not None:
        _load(torch, model, W["lora"])
    out["trainable_lora"] = sum(p.numel() for p in model.parameters() if p.requires_grad)
    out["n_lora"] = sum(isinstance(m, e.LinearWithLoRA) for m in model.modules())
    model.to(device)
    with torch.no_grad():
        out["same_logits"] = bool(torch.equal(model(xb), logits_before))
    out["classifier_W"] = {k[:-len(".linear.weight")] + ".weight" if k.endswith(".linear.weight") else
                           k[:-len(".linear.bias")] + ".bias" if k.endswith(".linear.bias") else k: v
                           for k, v in _sd(model).items() if ".lora." not in k}
    out["W0"] = _sd(model)
    torch.manual_seed(123)
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.1)
    buf = io.StringIO()
    with redirect_stdout(buf):
        train_losses, val_losses, train_accs, val_accs, examples_seen = c6.train_classifier_simple(
            model, train_loader, val_loader, optimizer, device,
            num_epochs=num_epochs, eval_freq=5, eval_iter=5,
        )
    out.update(log=buf.getvalue(), train_losses=train_losses, val_losses=val_losses, train_accs=train_accs,
               val_accs=val_accs, W1=_sd(model))
    return out


def kv_cache_page(torch, cfg, W=None, prompt=((3, 7, 11), (1, 2, 30)), max_new_tokens=5):
    c = kv_cache_code(torch)
    out = {}
    device = _dev(torch)
    torch.manual_seed(123)
    model = c.GPTModel(cfg)
    if W is not None:
        _load(torch, model, {k: v for k, v in W.items() if not k.endswith(".mask")})
    model.to(device)
    model.eval()  # disable dropout
    out["keys"] = list(model.state_dict())
    encoded_tensor = torch.tensor(prompt, device=device)
    token_ids = c.generate_text_simple_cached(
        model=model,
        idx=encoded_tensor,
        max_new_tokens=max_new_tokens,
    )
    out["cached"] = token_ids.tolist()
    out["cache_shape"] = tuple(model.trf_blocks[0].att.cache_k.shape)
    out["current_pos"] = model.current_pos
    out["uncached"] = c.generate_text_simple(model=model, idx=encoded_tensor, max_new_tokens=max_new_tokens,
                                             context_size=cfg["context_length"]).tolist()
    # the cached step's logits against the full forward
    model.reset_kv_cache()
    with torch.no_grad():
        model(token_ids[:, :-1], use_cache=True)
        step = model(token_ids[:, -1:], use_cache=True)
        full = model(token_ids)
    out["step"], out["full"] = _np(step[:, -1]), _np(full[:, -1])
    out["reset"] = (model.trf_blocks[1].att.cache_v is not None, model.current_pos)
    model.reset_kv_cache()
    out["after_reset"] = (model.trf_blocks[1].att.cache_v is None, model.current_pos)
    out["W"] = _sd(model)
    return out


def kv_cache_optimized_page(torch, cfg, W, window, prompt=((3, 7, 11), (1, 2, 30)), max_new_tokens=5):
    c = kv_cache_optimized_code(torch)
    device = _dev(torch)
    model = c.GPTModel(dict(cfg, kv_window_size=window))
    _load(torch, model, {k: v for k, v in W.items() if not k.endswith(".mask")})
    model.to(device)
    encoded_tensor = torch.tensor(prompt, device=device)
    cached = c.generate_text_simple_cached(model, encoded_tensor, max_new_tokens)
    cache = model.trf_blocks[0].att
    shape = tuple(cache.cache_k.shape)
    uncached = c.generate_text_simple_cached(model, encoded_tensor, max_new_tokens, use_cache=False)
    ptr = (cache.ptr_cur, model.ptr_current_pos)
    # the logits of each cached step, fed the generated sequence token by token
    model.reset_kv_cache()
    n = len(prompt[0])
    with torch.no_grad():
        steps = [model(cached[:, :n], use_cache=True)[:, -1]]
        for t in range(n, cached.shape[1]):
            steps.append(model(cached[:, t:t + 1], use_cache=True)[:, -1])
    return {"cached": cached.tolist(), "uncached": uncached.tolist(), "ptr": ptr, "cache_shape": shape,
            "steps": _np(torch.stack(steps, dim=1))}


LLAMA_CONFIG = {
    "vocab_size": 48,                # Vocabulary size (128_256 in Llama 3.2)
    "context_length": 16,            # Maximum context length to use
    "orig_context_length": 32,       # Context length that was used to train the model
    "emb_dim": 32,                   # Embedding dimension
    "n_heads": 4,                    # Number of attention heads
    "n_layers": 2,                   # Number of layers
    "hidden_dim": 48,                # Size of the intermediate dimension in FeedForward
    "n_kv_groups": 2,                # Key-Value groups for grouped-query attention
    "rope_base": 100.0,              # The base in RoPE's "theta" (500_000.0 in Llama 3.2)
    "dtype": "float32",              # torch.bfloat16 in the book
    "rope_freq": {                   # RoPE frequency scaling
        "factor": 4.0,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
        "original_context_length": 32,
    }
}

QWEN_CONFIG = {
    "vocab_size": 48,
    "context_length": 16,
    "emb_dim": 16,
    "n_heads": 4,
    "n_layers": 2,
    "hidden_dim": 32,
    "head_dim": 8,                   # 4 heads of 8: d_out 32 is not emb_dim
    "qk_norm": True,
    "n_kv_groups": 2,
    "rope_base": 1_000_000.0,
    "dtype": "float32",              # torch.bfloat16 in the book
}


def _rand_weights(sd, seed, std=0.3):
    rng = np.random.default_rng(seed)
    return {k: ((1.0 + 0.1 * rng.standard_normal(v.shape)) if ("norm" in k and v.ndim == 1)
                else std * rng.standard_normal(v.shape)).astype(np.float32) for k, v in sd.items()}


def qwen3_batched_page(torch, W, prompt=((5, 9, 1, 33, 47), (0, 12, 40, 3, 21)), max_new_tokens=6):
    b = qwen3_batched_code(torch)
    cfg = dict(QWEN_CONFIG, dtype=getattr(torch, QWEN_CONFIG["dtype"]))
    model = b.Qwen3Model(cfg)
    _load(torch, model, W)
    device = _dev(torch)
    model.to(device)
    idx = torch.tensor(prompt, device=device)
    cached = b.generate_text_simple(model, idx, max_new_tokens)
    out = {"cached": cached.tolist(), "current_pos": model.current_pos.tolist()}
    out["uncached"] = b.generate_text_simple(model, idx, max_new_tokens, use_cache=False).tolist()
    with torch.no_grad():
        out["logits"] = _np(model(idx))
    try:
        model(torch.zeros(1, 17, dtype=torch.long, device=device))
    except ValueError as e:
        out["too_long"] = str(e)
    return out


GEMMA3_CONFIG = {
    "vocab_size": 48,                # 262_144 in Gemma 3 270M
    "context_length": 16,
    "emb_dim": 16,
    "n_heads": 4,
    "n_layers": 3,
    "hidden_dim": 32,
    "head_dim": 8,
    "qk_norm": True,
    "n_kv_groups": 1,
    "rope_local_base": 10_000.0,
    "rope_base": 1_000_000.0,
    "sliding_window": 3,
    "layer_types": ["sliding_attention", "sliding_attention", "full_attention"],
    "dtype": "float32",              # torch.bfloat16 in the notebook
    "query_pre_attn_scalar": 6,      # 256 (= head_dim) in the notebook
}


def gemma3_page(torch, W=None, idx=((5, 9, 1, 33, 47, 2, 8), (0, 0, 12, 40, 3, 3, 21))):
    g = gemma3_code(torch)
    out = {}
    cfg = dict(GEMMA3_CONFIG, dtype=getattr(torch, GEMMA3_CONFIG["dtype"]))
    torch.manual_seed(123)
    model = g.Gemma3Model(cfg)
    _load(torch, model, W)
    out["repr"] = repr(model)
    total_params = sum(p.numel() for p in model.parameters())
    buf = io.StringIO()
    with redirect_stdout(buf):
        print(f"Total number of parameters: {total_params:,}")
        # Account for weight tying
        total_params_normalized = total_params - model.tok_emb.weight.numel()
        print(f"\nTotal number of unique parameters: {total_params_normalized:,}")
        print(f"float32 (PyTorch default): {g.model_memory_size(model, input_dtype=torch.float32) * 2**20:.4f} MB")
        print(f"float16: {g.model_memory_size(model, input_dtype=torch.float16) * 2**20:.4f} MB")  # bfloat16
    out["report"] = buf.getvalue()
    device = _dev(torch)
    model.to(device)
    out["masks"] = [m.tolist() for m in model._create_masks(6, device)]
    out["W"] = _sd(model)
    out["logits"] = _np(model(torch.tensor(idx)))
    return out


def llama_qwen_page(torch, W=None, idx=((5, 9, 1, 33, 47, 2, 8), (0, 0, 12, 40, 3, 3, 21)), dtype=None):
    """``dtype``: the configs' dtype (the book's ``torch.bfloat16``; float32 by default here)."""
    out = {}
    L, Q = llama3_code(torch), qwen3_code(torch)
    device = _dev(torch)
    # RoPE on its own, with the Llama 3.1 frequency smoothing
    cos, sin = L.compute_rope_params(head_dim=8, theta_base=100.0, context_length=16,
                                     freq_config=LLAMA_CONFIG["rope_freq"])
    torch.manual_seed(123)
    batch_size, num_heads, context_len, head_dim = 2, 3, 5, 8
    queries = torch.randn(batch_size, num_heads, context_len, head_dim)
    if W is not None:
        queries = torch.tensor(W["queries"])
    out["rope"] = (_np(cos), _np(sin), _np(queries), _np(L.apply_rope(queries, cos, sin)))

    cfg = dict(LLAMA_CONFIG, dtype=getattr(torch, dtype or LLAMA_CONFIG["dtype"]))
    torch.manual_seed(123)
    model = L.Llama3Model(cfg)
    if W is not None:
        _load(torch, model, W["llama"])
    model.to(device)
    out["llama_rope_base"] = cfg["rope_base"]  # rescaled by rescale_theta
    out["llama_W"] = _sd(model)
    out["llama_n"] = sum(p.numel() for p in model.parameters())
    x = torch.tensor(idx)
    out["llama"] = _np(model(x))
    fast = L.Llama3ModelFast(dict(LLAMA_CONFIG, dtype=getattr(torch, dtype or LLAMA_CONFIG["dtype"])))
    fast.load_state_dict(model.state_dict())
    fast.to(device)
    out["llama_fast"] = _np(fast(x))

    cfg = dict(QWEN_CONFIG, dtype=getattr(torch, dtype or QWEN_CONFIG["dtype"]))
    torch.manual_seed(123)
    model = Q.Qwen3Model(cfg)
    if W is not None:
        _load(torch, model, W["qwen"])
    model.to(device)
    out["qwen_W"] = _sd(model)
    out["qwen"] = _np(model(x))
    out["qwen_n"] = sum(p.numel() for p in model.parameters())

    norm = Q.RMSNorm(8, eps=1e-6)
    x64 = queries.double()
    y = norm(x64)
    out["rmsnorm"] = (y.dtype == torch.float64, _np(y))
    return out


# ------------------------------------------------------------------ tests
def _np_mlp(sd, x):
    for i in (0, 2, 4):
        x = _np_lin(sd, f"layers.{i}", x)
        x = np.maximum(x, 0) if i < 4 else x
    return x


def test_appendix_a_tensors_autograd_mlp_and_loader(tmp_path):
    r = appendix_a_page(lucid, str(tmp_path))
    assert r["a2"] == ("lucid.int64\nlucid.float32\nlucid.float32\n"
                       "tensor([[1, 2],\n        [3, 4],\n        [5, 6]])\n"
                       "tensor([[1, 2],\n        [3, 4],\n        [5, 6]])\n"
                       "tensor([[1, 4],\n        [2, 5],\n        [3, 6]])\n"
                       + "tensor([[14, 32],\n        [32, 77]])\n" * 2)
    assert r["shapes"] == ((2, 3), (3, 2))
    # the logistic regression gradient: dL/dz = sigmoid(z) - y
    g = 1 / (1 + math.exp(-2.42)) - 1.0
    np.testing.assert_allclose(r["a4"], [1.1 * g, g, 1.1 * g, g, -math.log(1 + g)], rtol=1e-6)
    assert round(r["a4"][0], 4) == -0.0898 and round(r["a4"][1], 4) == -0.0817  # the book's
    assert r["repr"] == ("NeuralNetwork(\n  (layers): Sequential(\n"
                         "    (0): Linear(in_features=50, out_features=30, bias=True)\n    (1): ReLU()\n"
                         "    (2): Linear(in_features=30, out_features=20, bias=True)\n    (3): ReLU()\n"
                         "    (4): Linear(in_features=20, out_features=3, bias=True)\n  )\n)")
    assert r["num_params"] == 2213 and r["w0_shape"] == (30, 50) and r["len"] == 5
    assert abs(r["softmax_sum"] - 1) < 1e-6
    lines = re.findall(r"Epoch: (\d{3})/003 \| Batch (\d{3})/002 \| Train/Val Loss: (\d+\.\d\d)$", r["log"], re.M)
    assert [(e, b_) for e, b_, _ in lines] == [(f"{e:03d}", f"{b_:03d}") for e in (1, 2, 3) for b_ in (0, 1)]
    assert r["pred"] == [True] * 5 and r["n_correct"] == 5 and r["acc"] == (1.0, 1.0)
    assert "e-" not in r["probas_text"] and "e+" not in r["probas_text"]  # sci_mode=False: fixed notation
    assert lucid.get_printoptions()["sci_mode"] is None  # restored
    X = np.array([[-1.2, 3.1], [-0.9, 2.9], [-0.5, 2.6], [2.3, -1.1], [2.7, -1.5]])
    np.testing.assert_allclose(r["outputs"], _np_mlp(_f64(r["W1"]), X), rtol=1e-5, atol=1e-6)
    assert r["reloaded"]
    # the unshuffled loop replayed in NumPy: SGD(lr=0.5) on mean cross-entropy, batches [0, 1], [2, 3]
    r = appendix_a_page(lucid, str(tmp_path), shuffle=False)
    sd = {k: v.astype(np.float64) for k, v in r["W0"].items()}
    y = np.array([0, 0, 0, 1, 1])
    losses = []
    for _ in range(3):
        for idx in ([0, 1], [2, 3]):
            losses.append(_np_ce(_np_mlp(sd, X[idx]), y[idx]))
            g = _np_mlp_grads(sd, X[idx], y[idx])
            sd = {k: sd[k] - 0.5 * g[k] for k in sd}
    assert [float(v) for *_, v in re.findall(r"(Loss: )(\d+\.\d\d)", r["log"])] == [round(v, 2) for v in losses]
    for k in sd:
        np.testing.assert_allclose(r["W1"][k], sd[k], rtol=1e-4, atol=1e-6)


def _np_mlp_grads(sd, x, y):
    hs = [x]
    for i in (0, 2):
        hs.append(np.maximum(_np_lin(sd, f"layers.{i}", hs[-1]), 0))
    logits = _np_lin(sd, "layers.4", hs[-1])
    d = _np_softmax(logits)
    d[np.arange(len(y)), y] -= 1
    d /= len(y)
    g = {}
    for i, h in zip((4, 2, 0), (hs[2], hs[1], hs[0])):
        g[f"layers.{i}.weight"], g[f"layers.{i}.bias"] = d.T @ h, d.sum(0)
        d = (d @ sd[f"layers.{i}.weight"]) * (h > 0)
    return g


def _windows(ids, max_length, stride):
    starts = range(0, len(ids) - max_length, stride)
    return ([ids[i:i + max_length] for i in starts], [ids[i + 1:i + max_length + 1] for i in starts])


def test_ch02_tokenizer_dataset_loader_and_embeddings():
    text = _text()
    r = ch02_page(lucid, text, shuffle=True)
    vocab = r["vocab"]
    assert len(vocab) == GPT_CONFIG["vocab_size"] and list(vocab)[-2:] == ["<|endoftext|>", "<|unk|>"]
    # words outside the vocabulary come back as <|unk|>, punctuation re-attached
    # words (and "?") outside the vocabulary come back as <|unk|>, punctuation re-attached
    assert all(w in vocab for w in ("you", "the", "of", ",", ".")) and "?" not in vocab
    assert r["roundtrip"] == ("<|unk|>, <|unk|> you <|unk|> <|unk|> <|unk|> <|endoftext|> <|unk|> the <|unk|> "
                              "<|unk|> of the <|unk|>.")
    ids = ch02_code(lucid).build_tokenizer(text).encode(text)
    assert r["n_windows"] == len(ids) - 4
    assert r["first_two"] == [[[ids[0:4]], [ids[1:5]]], [[ids[1:5]], [ids[2:6]]]]
    X, Y = _windows(ids, 4, 4)
    assert r["n_batches"] == len(X) // 8
    # shuffled: eight distinct windows of the dataset, each with its shifted target
    rows = [X.index(row) for row in r["inputs"]]
    assert len(set(rows)) == 8 and [Y[i] for i in rows] == r["targets"]
    assert r["shapes"] == [(8, 4, 16), (4, 16), (8, 4, 16)]
    np.testing.assert_allclose(r["emb"], r["W"]["tok"][np.array(r["inputs"])] + r["W"]["pos"], rtol=1e-6, atol=1e-7)
    assert r["onehot"] == [[0, 0, 1, 0], [0, 0, 0, 1], [0, 1, 0, 0]]
    lin, emb, w = r["emb_vs_linear"]
    np.testing.assert_array_equal(emb, w[[2, 3, 1]])
    np.testing.assert_allclose(lin, emb, rtol=1e-6, atol=1e-7)


def _ch03_numpy(r):
    x = r["inputs"].astype(np.float64)
    W = {k: _f64(v) for k, v in r["W"].items()}
    ref = {"simple": _np_softmax(x @ x.T) @ x}
    w1 = W["sa_v1"]
    ref["sa_v1"] = _np_softmax((x @ w1["W_query"]) @ (x @ w1["W_key"]).T / math.sqrt(2)) @ (x @ w1["W_value"])
    w2 = W["sa_v2"]
    q, k, v = (x @ w2[n + ".weight"].T for n in ("W_query", "W_key", "W_value"))
    s = q @ k.T / math.sqrt(2)
    ref["sa_v2"] = _np_softmax(s) @ v
    ref["masked"] = _np_softmax(np.where(np.tril(np.ones((6, 6), bool)), s, -np.inf))
    b = np.stack([x, x])
    ref["ca"] = _np_mha(W["ca"], "", b, 1, out_proj=False)
    ref["mha_wrapper"] = np.concatenate([_np_mha(W["mha_wrapper"], f"heads.{i}.", b, 1, out_proj=False)
                                         for i in range(2)], -1)
    ref["mha"] = _np_mha(W["mha"], "", b, 2)
    return ref


def test_ch03_attention_against_numpy():
    r = ch03_page(lucid)
    ref = _ch03_numpy(r)
    for k in ("simple", "sa_v1", "sa_v2", "ca", "mha_wrapper", "mha"):
        np.testing.assert_allclose(r[k], ref[k], rtol=1e-5, atol=1e-6, err_msg=k)
    np.testing.assert_allclose(r["row_sums"], 1.0, rtol=1e-6)
    np.testing.assert_allclose(r["ex31"], r["sa_v2"], rtol=1e-6, atol=1e-7)  # exercise 3.1
    np.testing.assert_allclose(r["masked_simple_norm"], ref["masked"], rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(r["masked_softmax"], ref["masked"], rtol=1e-5, atol=1e-7)
    x = r["inputs"].astype(np.float64)
    s2, w2, tmp, c2, S = r["naive"]
    np.testing.assert_allclose(s2, x @ x[1], rtol=1e-6)
    np.testing.assert_allclose(w2, _np_softmax(x @ x[1]), rtol=1e-6)
    np.testing.assert_allclose(tmp, (x @ x[1]) / (x @ x[1]).sum(), rtol=1e-6)
    np.testing.assert_allclose(c2, ref["simple"][1], rtol=1e-6)
    np.testing.assert_allclose(S, x @ x.T, rtol=1e-6)
    np.testing.assert_allclose(s2, [0.9544, 1.4950, 1.4754, 0.8434, 0.7070, 1.0865], atol=5e-5)  # the book's
    # the book's first context vector: the weighted sum of the inputs, computed by hand
    np.testing.assert_allclose(r["simple"][1], [0.4419, 0.6515, 0.5683], atol=5e-5)
    # Dropout(0.5) in training mode: each one either dropped or scaled by 1 / (1 - 0.5)
    d = r["dropout"]
    assert set(np.unique(d).tolist()) == {0.0, 2.0} and 6 < (d == 0).sum() < 30
    assert r["ca"].shape == (2, 6, 2) and r["mha_wrapper"].shape == (2, 6, 4) and r["mha"].shape == (2, 6, 2)
    # the first token only attends to itself: its context vector is its value vector
    w = _f64(r["W"]["ca"])
    np.testing.assert_allclose(r["ca"][0, 0], r["inputs"][0] @ w["W_value.weight"].T, rtol=1e-5)
    assert "mask" in r["W"]["mha"] and np.array_equal(r["W"]["mha"]["mask"], np.triu(np.ones((6, 6)), 1))


def _gpt_param_count(cfg):
    E, V, T, H = cfg["emb_dim"], cfg["vocab_size"], cfg["context_length"], 4 * cfg["emb_dim"]
    att = 3 * E * E + (3 * E if cfg["qkv_bias"] else 0) + E * E + E
    ff = E * H + H + H * E + E
    block = att + ff + 4 * E
    return V * E + T * E + cfg["n_layers"] * block + 2 * E + E * V, att, ff


def test_ch04_gpt_model_counts_generation_and_finite_differences():
    cfg = dict(GPT_CONFIG)
    r = ch04_page(lucid, cfg)
    bx, y, mean, var = r["ln"]
    np.testing.assert_allclose(y, _np_ln(bx.astype(np.float64), 1.0, 0.0), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(mean, 0.0, atol=1e-6)
    np.testing.assert_allclose(var, 1.0, rtol=1e-4)
    x, g = r["gelu"]
    np.testing.assert_allclose(g, _np_gelu(x.astype(np.float64)), rtol=1e-5, atol=1e-6)
    total, att, ff = _gpt_param_count(cfg)
    assert (r["att_params"], r["ff_params"]) == (att, ff)
    size = total * 4 / (1024 * 1024)
    assert r["report"] == (f"Total number of parameters: {total:,}\n"
                           f"Number of trainable parameters considering weight tying: "
                           f"{total - cfg['emb_dim'] * cfg['vocab_size']:,}\n"
                           f"Total size of the model: {size:.2f} MB\n")
    sd = _f64(r["W"])
    np.testing.assert_allclose(r["logits"], _np_gpt(sd, r["batch"], cfg["n_heads"]), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(r["fast"], _np_gpt(sd, r["batch"], cfg["n_heads"]), rtol=1e-4, atol=1e-5)
    assert r["fast_n"] == total
    # greedy decoding with the context cropped to the last 8 tokens (4 + 6 > 8)
    assert r["generated"][0][:4] == [3, 7, 11, 2]
    assert r["generated"] == _np_greedy(sd, [[3, 7, 11, 2]], cfg["n_heads"], 6, cfg["context_length"]).tolist()


def _numbers_at_end(text):
    return [float(line.rsplit(" ", 1)[1]) for line in text.splitlines()]


def _np_deep(sd, x, shortcut):
    for i in range(5):
        y = _np_gelu(_np_lin(sd, f"layers.{i}.0", x))
        x = x + y if shortcut and x.shape == y.shape else y
    return x


def test_ch04_shortcut_gradients_against_finite_differences():
    r = ch04_page(lucid, dict(GPT_CONFIG))
    x = np.array([[1.0, 0.0, -1.0]])
    means = {}
    for sc in (False, True):
        sd, text = r["shortcut"][sc]
        sd = _f64(sd)
        names = [f"layers.{i}.0.weight" for i in range(5)]
        assert [line.split(" has gradient mean of ")[0] for line in text.splitlines()] == names
        fd_means = []
        for n in names:
            g = np.zeros_like(sd[n])
            for i in np.ndindex(g.shape):
                plus, minus = dict(sd), dict(sd)
                plus[n], minus[n] = sd[n].copy(), sd[n].copy()
                plus[n][i] += 1e-6
                minus[n][i] -= 1e-6
                g[i] = (_np_deep(plus, x, sc)[0, 0] ** 2 - _np_deep(minus, x, sc)[0, 0] ** 2) / 2e-6
            fd_means.append(np.abs(g).mean())
        np.testing.assert_allclose(_numbers_at_end(text), fd_means, rtol=1e-4, atol=1e-9)
        means[sc] = fd_means
    # the book's point: without shortcuts the gradients vanish towards the first layer
    assert means[False][0] < 0.1 * means[False][4] and means[True][0] > 0.1 * means[True][4]


def test_ch04_gpt_gradients_match_float64_finite_differences():
    cfg = dict(GPT_CONFIG)
    c4, c5 = ch04_code(lucid), ch05_code(lucid)
    lucid.manual_seed(0)
    model = c4.GPTModel(cfg).double()
    x = lucid.tensor([[3, 1, 4, 1, 5, 9, 2, 6]])
    y = lucid.tensor([[1, 4, 1, 5, 9, 2, 6, 5]])
    model.zero_grad()
    c5.calc_loss_batch(x, y, model, _dev(lucid)).backward()
    sd = _sd(model)
    names = ["tok_emb.weight", "pos_emb.weight", "trf_blocks.0.att.W_query.weight", "trf_blocks.1.att.out_proj.bias",
             "trf_blocks.0.ff.layers.0.weight", "trf_blocks.1.norm2.scale", "final_norm.shift", "out_head.weight"]
    grads = dict(model.named_parameters())
    rng = np.random.default_rng(1)
    eps = 1e-6
    for name in names:
        for _ in range(2):
            i = tuple(rng.integers(0, s) for s in sd[name].shape)
            if name == "tok_emb.weight":
                i = (int(x[0, rng.integers(0, 8)]),) + i[1:]  # a row that is used
            plus, minus = dict(sd), dict(sd)
            plus[name], minus[name] = sd[name].copy(), sd[name].copy()
            plus[name][i] += eps
            minus[name][i] -= eps
            fd = (_np_ce(_np_gpt(plus, x.tolist(), 2), y.tolist()) - _np_ce(_np_gpt(minus, x.tolist(), 2), y.tolist()))
            fd /= 2 * eps
            got = float(grads[name].grad.cpu()[i])
            assert abs(got - fd) <= 1e-6 + 1e-5 * abs(fd), (name, i, got, fd)


def test_ch05_temperature_and_top_k_demo():
    r = ch05_sampling_page(lucid)
    logits = np.array([4.51, 0.89, -1.90, 6.75, 1.63, -1.62, -1.89, 6.28, 1.79])
    assert r["argmax"] == "forward"
    for T, p in zip([1, 0.1, 5], r["scaled"]):
        np.testing.assert_allclose(p, _np_softmax(logits / T), rtol=1e-5, atol=1e-7)
    counts = [int(line.split(" x ")[0]) for line in r["printed"].splitlines()]
    names = [line.split(" x ")[1] for line in r["printed"].splitlines()]
    assert names == ["closer", "every", "effort", "forward", "inches", "moves", "pizza", "toward", "you"]
    p = _np_softmax(logits)
    assert sum(counts) == 1000
    assert all(abs(c - 1000 * q) <= 5 * math.sqrt(1000 * q * (1 - q)) + 1 for c, q in zip(counts, p))
    np.testing.assert_allclose(r["top"][0], [6.75, 6.28, 4.51], rtol=1e-6)
    assert r["top"][1] == [3, 7, 0]
    keep = logits >= 4.51
    assert r["new_logits"] == pytest.approx(np.where(keep, logits, -np.inf).tolist())
    np.testing.assert_allclose(r["topk_probas"], np.where(keep, _np_softmax(np.where(keep, logits, -np.inf)), 0),
                               rtol=1e-5, atol=1e-8)
    np.testing.assert_allclose(r["topk_probas"][[0, 3, 7]], [0.0615, 0.5775, 0.3610], atol=5e-5)  # the book's


def _loader_loss(sd, ids, nh, batch_size, max_length, num_batches=None):
    X, Y = _windows(ids, max_length, max_length)
    batches = [(X[i:i + batch_size], Y[i:i + batch_size]) for i in range(0, len(X), batch_size)]
    batches = batches[:num_batches] if num_batches else batches
    return float(np.mean([_np_ce(_np_gpt(sd, x, nh), y) for x, y in batches]))


def test_ch05_pretraining_loop_generation_and_checkpoints(tmp_path):
    cfg = dict(GPT_CONFIG)
    r = ch05_page(lucid, _text(), cfg, str(tmp_path))
    train_ids, val_ids = r["ids"]
    n_train = len(_windows(train_ids, 8, 8)[0])
    assert n_train % 2 == 0 and r["n_batches"] == (n_train // 2, math.ceil(len(_windows(val_ids, 8, 8)[0]) / 2))
    sd0 = _f64(r["W0"])
    # the shuffled loader sees every window once (the count is even, so drop_last drops none)
    np.testing.assert_allclose(r["initial"][0], np.mean([_np_ce(_np_gpt(sd0, [x], 2), [y])
                                                         for x, y in zip(*_windows(train_ids, 8, 8))]), rtol=1e-5)
    np.testing.assert_allclose(r["initial"][1], _loader_loss(sd0, val_ids, 2, 2, 8), rtol=1e-5)
    assert abs(r["initial"][1] - math.log(cfg["vocab_size"])) < 0.5  # near uniform before training
    # log lines every 5 steps, tokens seen 16 per step
    steps = list(range(0, 2 * r["n_batches"][0], 5))
    lines = re.findall(r"Ep (\d) \(Step (\d{6})\): Train loss (\d\.\d{3}), Val loss (\d\.\d{3})", r["log"])
    assert [int(s) for _, s, _, _ in lines] == steps and r["tokens_seen"] == [16 * (s + 1) for s in steps]
    assert [float(v) for *_, v in lines] == [round(v, 3) for v in r["val_losses"]]
    samples = [ln for ln in r["log"].splitlines() if ln.startswith("Every effort moves you")]
    assert len(samples) == 2 and all(len(s.split()) >= 4 + 6 for s in samples)
    assert r["train_losses"][-1] < r["train_losses"][0] - 1.0 and r["val_losses"][-1] < r["val_losses"][0] - 1.0
    sd1 = _f64(r["W1"])
    # generation: greedy against NumPy, temperature 0 is greedy, top-k samples stay in the top 3
    prompt = [r["greedy"][0][:4]]
    assert r["greedy"] == _np_greedy(sd1, prompt, 2, 6, 8).tolist() == r["generate_t0"]
    seq = r["sampled"][0]
    assert len(seq) == 14 and seq[:4] == prompt[0]
    for t in range(4, 14):
        top3 = np.argsort(_np_gpt(sd1, [seq[max(0, t - 8):t]], 2)[0, -1])[-3:]
        assert seq[t] in top3
    assert r["eos_stop"] == [r["greedy"][0][:6]]  # stops before appending eos_id
    # checkpoints
    assert r["reload_same"] and r["lr3"] == 5e-3
    a, b, fresh = r["after_step"]
    for k in a:
        np.testing.assert_array_equal(a[k], b[k])
    assert max(np.abs(a[k] - fresh[k]).max() for k in a) > 1e-4  # the restored AdamW state mattered


def _classifier_trainable(cfg):
    _, att, ff = _gpt_param_count(cfg)
    E = cfg["emb_dim"]
    return att + ff + 4 * E + 2 * E + 2 * E + 2


def _np_accuracy(sd, X, y):
    return float(np.mean(_np_gpt(sd, X, 2)[:, -1].argmax(-1) == np.asarray(y)))


def test_ch06_classification_finetuning():
    cfg = dict(GPT_CONFIG)
    r = ch06_page(lucid, cfg)
    texts, labels = _spam_data()
    tok = ch02_code(lucid).build_tokenizer(_text())
    pad = tok.str_to_int["<|endoftext|>"]
    enc = [tok.encode(t) for t in texts]
    L = max(len(e) for e in enc[:48])
    assert r["max_length"] == L
    padded = [e[:L] + [pad] * (L - len(e[:L])) for e in enc]
    assert r["encoded"] == (padded[:48], padded[48:])
    Xtr, Xva = np.array(padded[:48]), np.array(padded[48:])
    # the frozen base, the new head and the unfrozen last block and final norm
    assert r["trainable"] == _classifier_trainable(cfg)
    assert all(n.startswith(("trf_blocks.1.", "final_norm.", "out_head.")) for n in r["trainable_names"])
    assert "out_head.bias" in r["trainable_names"] and len(r["trainable_names"]) == 13 + 2 + 2
    sd0 = _f64(r["W0"])
    assert r["outputs_shape"] == (1, 4, 2)
    np.testing.assert_allclose(r["last"], _np_gpt(sd0, r["inputs"], 2)[:, -1], rtol=1e-4, atol=1e-5)
    # accuracies over every example (6 train batches <= 10), the val loss over both val batches
    assert r["acc0"] == [_np_accuracy(sd0, Xtr, labels[:48]), _np_accuracy(sd0, Xva, labels[48:])]
    val_loss = np.mean([_np_ce(_np_gpt(sd0, Xva[i:i + 8], 2)[:, -1], labels[48 + i:56 + i]) for i in (0, 8)])
    np.testing.assert_allclose(r["loss0"][1], val_loss, rtol=1e-5)
    sd1 = _f64(r["W1"])
    assert r["acc1"] == [_np_accuracy(sd1, Xtr, labels[:48]), _np_accuracy(sd1, Xva, labels[48:])]
    assert r["acc1"][0] >= 0.9 and r["acc1"][1] >= 0.85 and r["acc0"][1] <= 0.6
    assert r["train_losses"][-1] < r["train_losses"][0] - 0.4
    assert r["examples_seen"] == 6 * 48 and r["log"].count("Validation accuracy: ") == 6
    # frozen parameters got no gradient and did not move
    frozen = [k for k in r["W0"] if k not in r["trainable_names"] and not k.endswith(".mask")]
    assert sorted(r["grads_none"]) == sorted(frozen)
    assert all(np.array_equal(r["W0"][k], r["W1"][k]) for k in frozen)
    assert all(not np.array_equal(r["W0"][k], r["W1"][k]) for k in r["trainable_names"])
    # classify_review: truncate/pad to the training length, last-token argmax
    for text, got in zip(_REVIEWS, r["reviews"]):
        ids = tok.encode(text)[:L]
        pred = _np_gpt(sd1, [ids + [pad] * (L - len(ids))], 2)[0, -1].argmax()
        assert got == ("spam" if pred == 1 else "not spam")
    assert r["reviews"] == ["spam", "not spam", "spam", "not spam"]


def test_ch06_bonus_token_positions_accumulation_and_merged_lora():
    cfg = dict(GPT_CONFIG)
    # the loss at the last real token ("flexible"), averaged over positions, at the first position
    W = ch06_bonus_page(lucid, cfg, trainable_layers="all", num_epochs=0)["W0"]
    sd = _f64(W)
    for kw, pick in (({"trainable_token_pos": "flexible"}, "flex"), ({"average_embeddings": True}, "mean"),
                     ({"trainable_token_pos": 0}, "first")):
        r = ch06_bonus_page(lucid, cfg, W=W, trainable_layers="all", num_epochs=0, **kw)
        x, y = r["batch"]
        logits = _np_gpt(sd, x, 2)
        last = [sum(t != r["pad"] for t in row) - 1 for row in x]
        sel = {"flex": logits[np.arange(8), last], "mean": logits.mean(1), "first": logits[:, 0]}[pick]
        np.testing.assert_allclose(r["loss0"], _np_ce(sel, y), rtol=1e-5, err_msg=pick)
    # gradient accumulation: 4 x 2 steps take the steps of batches of 8 (loss /= accumulation_steps)
    a = ch06_bonus_page(lucid, cfg, W=W, trainable_layers="all", batch_size=4, accumulation_steps=2)
    b_ = ch06_bonus_page(lucid, cfg, W=W, trainable_layers="all", batch_size=8)
    assert a["examples_seen"] == b_["examples_seen"] == 48
    moved = 0.0
    for k in a["W1"]:
        np.testing.assert_allclose(a["W1"][k], b_["W1"][k], rtol=1e-4, atol=1e-5, err_msg=k)
        moved = max(moved, np.abs(a["W1"][k] - W[k]).max())
    assert moved > 1e-3
    c = ch06_bonus_page(lucid, cfg, W=W, trainable_layers="all", batch_size=4)  # no accumulation: other steps
    assert max(np.abs(c["W1"][k] - b_["W1"][k]).max() for k in W) > 1e-3
    # LinearWithLoRAMerged trains exactly as LinearWithLoRA (the same A, B)
    lo = ch06_bonus_page(lucid, cfg, trainable_layers="lora")
    alt = ch06_bonus_page(lucid, cfg, W=lo["W0"], trainable_layers="lora_alternative")
    np.testing.assert_allclose(alt["loss0"], lo["loss0"], rtol=1e-6)
    for k in lo["W1"]:
        np.testing.assert_allclose(alt["W1"][k], lo["W1"][k], rtol=1e-4, atol=1e-5, err_msg=k)
    # A and B move, and the new head's own Linear (created after the freezing, so trainable)
    assert {k for k in lo["W0"] if not np.array_equal(lo["W0"][k], lo["W1"][k])} == \
        {k for k in lo["W0"] if ".lora." in k} | {"out_head.linear.weight", "out_head.linear.bias"}


def test_ch07_custom_collate_fn_and_ignore_index():
    cfg = dict(GPT_CONFIG, context_length=64)
    r = ch07_page(lucid, cfg)
    P = 50256
    assert r["collated"] == ([[0, 1, 2, 3, 4], [5, 6, P, P, P], [7, 8, 9, P, P]],
                             [[1, 2, 3, 4, P], [6, P, -100, -100, -100], [8, 9, P, -100, -100]])
    assert r["truncated"] == ([[0, 1, 2], [5, 6, P], [7, 8, 9]], [[1, 2, 3], [6, P, -100], [8, 9, P]])
    l1 = _np_ce(np.array([[-1.0, 1.0], [-0.5, 1.5]]), [0, 1])
    l2 = _np_ce(np.array([[-1.0, 1.0], [-0.5, 1.5], [-0.5, 1.5]]), [0, 1, 1])
    np.testing.assert_allclose(r["losses"], [l1, l2, l1], rtol=1e-6)
    assert r["loss_1_equals_loss_3"] and round(l1, 4) == 1.1269 and round(l2, 4) == 0.7936  # the book's
    assert r["formatted"] == ("Below is an instruction that describes a task. Write a response that appropriately "
                              "completes the request.\n\n### Instruction:\nName the painter.")
    pad, enc = r["pad"], r["encoded"]
    for b, (x, y) in enumerate(r["batches"]):
        items = enc[2 * b:2 * b + 2]
        n = max(len(e) for e in items) + 1
        for e, xi, yi in zip(items, x, y):
            full = e + [pad] * (n - len(e))
            tgt = full[1:]
            assert xi == full[:-1] and yi == tgt[:len(e)] + [-100] * (n - 1 - len(e))
    x, y = r["batches"][0]
    np.testing.assert_allclose(r["loss"], _np_ce(_np_gpt(_f64(r["W"]), x, 2), y), rtol=1e-5)
    assert -100 in y[0] + y[1]  # the shorter example has ignored targets


def _np_logprobs(logits, labels, mask=None):
    labels = np.asarray(labels)[:, 1:]
    lp = logits[:, :-1] - np.log(np.exp(logits[:, :-1]).sum(-1, keepdims=True))
    sel = np.take_along_axis(lp, labels[..., None], -1)[..., 0]
    if mask is None:
        return sel.mean(-1)
    m = np.asarray(mask)[:, 1:]
    return (sel * m).sum(-1) / m.sum(-1)


def test_dpo_collate_logprobs_loss_and_training():
    cfg = dict(GPT_CONFIG, context_length=64)
    r = dpo_page(lucid, cfg)
    lse = np.log(np.exp([2.0, 1.0, 0.1]).sum()), np.log(np.exp([0.5, 2.5, 0.3]).sum())
    np.testing.assert_allclose(r["gather_demo"], [((lse[0] - 2.0) + (lse[1] - 0.3)) / 2] * 2, rtol=1e-6)
    # the collated batch: common padding length, masks off the prompt (+2 newlines) and the padding
    pad, enc, b = r["pad"], r["encoded"], r["batch"]
    n = max(len(e[k]) + 1 for e in enc[:2] for k in ("chosen", "rejected"))
    assert r["batch_prompt"] == [enc[0]["prompt"], enc[1]["prompt"]]
    for key in ("chosen", "rejected"):
        for i in range(2):
            seq, p = enc[i][key], len(enc[i]["prompt"])
            assert b[key][i] == seq + [pad] * (n - len(seq))
            assert b[key + "_mask"][i] == [p + 2 <= j < len(seq) for j in range(n)]
            assert seq[:p] == enc[i]["prompt"]
    # the reference model is the policy model: the loss is log 2, the rewards 0
    np.testing.assert_allclose(r["loss0"], [math.log(2), 0.0, 0.0], atol=1e-6)
    sd0 = _f64(r["W0"])
    logits = _np_gpt(sd0, b["chosen"], 2)
    np.testing.assert_allclose(r["logprobs0"], _np_logprobs(logits, b["chosen"], b["chosen_mask"]), rtol=1e-5)
    np.testing.assert_allclose(r["logprobs0_nomask"], _np_logprobs(logits, b["chosen"]), rtol=1e-5)
    # after training: the loss against NumPy, below log 2, the chosen answers preferred
    sd1, ref = _f64(r["W1"]), _f64(r["Wref"])
    assert all(np.array_equal(ref[k], sd0[k]) for k in ref)  # the reference model did not move
    lp = {(m, k): _np_logprobs(_np_gpt(w, b[k], 2), b[k], b[k + "_mask"])
          for m, w in (("pol", sd1), ("ref", ref)) for k in ("chosen", "rejected")}
    z = 0.1 * ((lp["pol", "chosen"] - lp["pol", "rejected"]) - (lp["ref", "chosen"] - lp["ref", "rejected"]))
    np.testing.assert_allclose(r["loss1"], [np.mean(np.log1p(np.exp(-z))),
                                            np.mean(lp["pol", "chosen"] - lp["ref", "chosen"]),
                                            np.mean(lp["pol", "rejected"] - lp["ref", "rejected"])],
                               rtol=1e-4, atol=1e-6)
    t = r["tracking"]
    assert len(t["train_losses"]) == 6 and t["tokens_seen"][0] == 2 * n
    assert t["train_losses"][-1] < math.log(2) - 0.1 and t["train_losses"] == sorted(t["train_losses"], reverse=True)
    assert t["train_chosen_rewards"][-1] - t["train_rejected_rewards"][-1] > 1.0
    assert r["log"].count("Train reward margins") == 6 and r["log"].count("Below is an instruction") == 3


def test_appendix_d_clipping_warmup_and_cosine_decay():
    cfg = dict(GPT_CONFIG)
    r = appendix_d_page(lucid, _text(), cfg)
    gb, ga = r["grads_before"], r["grads_after"]
    norm = math.sqrt(sum(float((g.astype(np.float64) ** 2).sum()) for g in gb.values()))
    assert norm > 1.0
    np.testing.assert_allclose(r["norm"], norm, rtol=1e-5)
    assert r["max_before"] == max(float(g.max()) for g in gb.values())
    assert r["max_after"] == max(float(g.max()) for g in ga.values())
    for k in gb:
        np.testing.assert_allclose(ga[k], gb[k] / (norm + 1e-6), rtol=1e-5, atol=1e-9)
    np.testing.assert_allclose(math.sqrt(sum(float((g.astype(np.float64) ** 2).sum()) for g in ga.values())),
                               1.0, rtol=1e-5)
    # the schedule: linear warmup from 1e-5, then cosine from the peak down to min_lr
    total, warm, peak, init, low = r["total_steps"], r["warmup_steps"], 0.01, 1e-5, 1e-5
    expect = [init + s * (peak - init) / warm if s < warm
              else low + (peak - low) * 0.5 * (1 + math.cos(math.pi * (s - warm) / (total - warm)))
              for s in range(total)]
    assert len(r["lrs"]) == total == 54 and warm == 10
    np.testing.assert_allclose(r["lrs"], expect, rtol=1e-12)
    assert r["lrs"][warm] == peak and r["final_lr"] == r["lrs"][-1]
    lines = re.findall(r"Ep (\d) \(Iter (\d{6})\): Train loss (\d\.\d{3}), Val loss (\d\.\d{3})", r["log"])
    assert [int(s) for _, s, _, _ in lines] == list(range(0, total, 5))
    assert r["train_losses"][-1] < r["train_losses"][0] - 1.0


def test_appendix_e_lora():
    cfg = dict(GPT_CONFIG)
    r = appendix_e_page(lucid, cfg)
    assert r["base_equal"] and r["A_in_bound"]
    x, sd, y = r["lora_layer"]
    sd = _f64(sd)
    x = x.astype(np.float64)
    ref = x @ sd["linear.weight"].T + sd["linear.bias"] + (4 / 2) * (x @ sd["lora.A"] @ sd["lora.B"])
    np.testing.assert_allclose(y, ref, rtol=1e-5, atol=1e-6)
    E = cfg["emb_dim"]
    assert r["trainable_before"] == _classifier_trainable(cfg) and r["trainable_frozen"] == 0
    shapes = [(E, E)] * 4 + [(E, 4 * E), (4 * E, E)]
    lora = cfg["n_layers"] * sum(16 * (i + o) for i, o in shapes) + 16 * (E + 2)
    assert r["trainable_lora"] == lora and r["n_lora"] == 6 * cfg["n_layers"] + 1
    assert r["same_logits"]  # B = 0: the LoRA model is the base model
    moved = {k for k in r["W0"] if not np.array_equal(r["W0"][k], r["W1"][k])}
    assert moved == {k for k in r["W0"] if ".lora." in k}  # only A and B trained
    assert r["train_accs"][-1] >= 0.9 and r["val_accs"][-1] >= 0.85
    assert r["train_losses"][-1] < r["train_losses"][0] - 0.3


def test_kv_cache_generation_equals_uncached():
    cfg = dict(GPT_CONFIG)
    W = ch04_page(lucid, cfg)["W"]
    r = kv_cache_page(lucid, cfg, W)
    assert not any(k.endswith((".mask", "cache_k", "cache_v")) for k in r["keys"])  # persistent=False buffers
    assert len(r["keys"]) == len(W) - cfg["n_layers"]
    sd = _f64(r["W"])
    ref = _np_greedy(sd, [[3, 7, 11], [1, 2, 30]], cfg["n_heads"], 5, cfg["context_length"]).tolist()
    assert r["cached"] == r["uncached"] == ref
    assert r["cache_shape"] == (2, 8, 2, 8) and r["current_pos"] == 8  # (b, tokens, heads, head_dim)
    np.testing.assert_allclose(r["step"], r["full"], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(r["step"], _np_gpt(sd, r["cached"], 2)[:, -1], rtol=1e-4, atol=1e-5)
    assert r["reset"] == (True, 8) and r["after_reset"] == (True, 0)


def test_kv_cache_optimized_preallocated_and_sliding_window():
    cfg = dict(GPT_CONFIG)
    W = ch04_page(lucid, cfg)["W"]
    sd = _f64({k: v for k, v in W.items() if not k.endswith(".mask")})
    prompt = [[3, 7, 11], [1, 2, 30]]
    r = kv_cache_optimized_page(lucid, cfg, W, window=8)
    assert r["cached"] == r["uncached"] == _np_greedy(sd, prompt, 2, 5, 8).tolist()
    assert r["cache_shape"] == (2, 2, 8, 8) and r["ptr"] == (0, 8)  # the uncached run reset ptr_cur only
    # a window of 4: the cache keeps the last 4 keys, so each new token attends to itself and 3 before it
    r = kv_cache_optimized_page(lucid, cfg, W, window=4)
    seq = np.array(prompt)
    for _ in range(5):
        seq = np.concatenate([seq, _np_gpt(sd, seq, 2, window=4)[:, -1].argmax(-1)[:, None]], 1)
    assert r["cached"] == seq.tolist() and r["cache_shape"] == (2, 2, 4, 8)
    ref = _np_gpt(sd, seq, 2, window=4)[:, 2:]
    np.testing.assert_allclose(r["steps"], ref, rtol=1e-4, atol=1e-5)
    assert np.abs(ref - _np_gpt(sd, seq, 2)[:, 2:]).max() > 1e-2  # the window changes the logits


def _np_rope_params(head_dim, theta_base, context_length, freq_config=None):
    inv = 1.0 / theta_base ** (np.arange(0, head_dim, 2) / head_dim)
    if freq_config is not None:
        f = freq_config
        n, lo, hi = f["original_context_length"], f["low_freq_factor"], f["high_freq_factor"]
        low, high = n / lo, n / hi
        wl = 2 * np.pi / inv
        smooth = (n / wl - lo) / (hi - lo)
        inv = np.where(wl > low, inv / f["factor"],
                       np.where(wl < high, inv, (1 - smooth) * inv / f["factor"] + smooth * inv))
    ang = np.arange(context_length)[:, None] * inv[None]
    ang = np.concatenate([ang, ang], 1)
    return np.cos(ang), np.sin(ang)


def _np_rope(x, cos, sin):
    T, d = x.shape[2], x.shape[3]
    rot = np.concatenate([-x[..., d // 2:], x[..., :d // 2]], -1)
    return x * cos[:T] + rot * sin[:T]


def _np_rms(x, w, eps):
    return x / np.sqrt((x ** 2).mean(-1, keepdims=True) + eps) * w


def _np_llama(sd, idx, cfg, qwen=False):
    nh, G = cfg["n_heads"], cfg["n_kv_groups"]
    hd = cfg["head_dim"] if qwen else cfg["emb_dim"] // nh
    if qwen:
        cos, sin = _np_rope_params(hd, cfg["rope_base"], cfg["context_length"])
    else:
        theta = cfg["rope_base"] * cfg["context_length"] / cfg["orig_context_length"]
        cos, sin = _np_rope_params(hd, theta, cfg["context_length"], cfg["rope_freq"])
    nw, eps = ("scale", 1e-6) if qwen else ("weight", 1e-5)
    x = sd["tok_emb.weight"][np.asarray(idx)]
    B, T, _ = x.shape
    causal = np.tril(np.ones((T, T), bool))
    for i in range(cfg["n_layers"]):
        p = f"trf_blocks.{i}."
        h = _np_rms(x, sd[p + "norm1." + nw], eps)
        q = _np_lin(sd, p + "att.W_query", h).reshape(B, T, nh, hd).transpose(0, 2, 1, 3)
        k = _np_lin(sd, p + "att.W_key", h).reshape(B, T, G, hd).transpose(0, 2, 1, 3)
        v = _np_lin(sd, p + "att.W_value", h).reshape(B, T, G, hd).transpose(0, 2, 1, 3)
        if qwen:
            q, k = _np_rms(q, sd[p + "att.q_norm.scale"], 1e-6), _np_rms(k, sd[p + "att.k_norm.scale"], 1e-6)
        q, k = _np_rope(q, cos, sin), _np_rope(k, cos, sin)
        k, v = np.repeat(k, nh // G, axis=1), np.repeat(v, nh // G, axis=1)  # K1 K1 K2 K2
        att = _np_softmax(np.where(causal, q @ k.transpose(0, 1, 3, 2), -np.inf) / math.sqrt(hd))
        x = x + _np_lin(sd, p + "att.out_proj", (att @ v).transpose(0, 2, 1, 3).reshape(B, T, nh * hd))
        h = _np_rms(x, sd[p + "norm2." + nw], eps)
        a = _np_lin(sd, p + "ff.fc1", h)
        x = x + _np_lin(sd, p + "ff.fc3", a / (1 + np.exp(-a)) * _np_lin(sd, p + "ff.fc2", h))
    return _np_lin(sd, "out_head", _np_rms(x, sd["final_norm." + nw], eps))


def _np_gemma3(sd, idx, cfg):
    E, nh, G, hd = cfg["emb_dim"], cfg["n_heads"], cfg["n_kv_groups"], cfg["head_dim"]
    rope = {"sliding_attention": _np_rope_params(hd, cfg["rope_local_base"], cfg["context_length"]),
            "full_attention": _np_rope_params(hd, cfg["rope_base"], cfg["context_length"])}
    x = sd["tok_emb.weight"][np.asarray(idx)] * math.sqrt(E)
    B, T, _ = x.shape
    i, j = np.arange(T)[:, None], np.arange(T)[None]
    allowed = {"full_attention": j <= i, "sliding_attention": (j <= i) & (i - j < cfg["sliding_window"])}
    norm = lambda h, k: _np_rms(h, 1.0 + sd[k + ".scale"], 1e-6)  # noqa: E731
    gelu = lambda a: 0.5 * a * (1 + np.tanh(math.sqrt(2 / math.pi) * (a + 0.044715 * a ** 3)))  # noqa: E731
    for li, kind in enumerate(cfg["layer_types"]):
        p = f"blocks.{li}."
        h = norm(x, p + "input_layernorm")
        q = _np_lin(sd, p + "att.W_query", h).reshape(B, T, nh, hd).transpose(0, 2, 1, 3)
        k = _np_lin(sd, p + "att.W_key", h).reshape(B, T, G, hd).transpose(0, 2, 1, 3)
        v = _np_lin(sd, p + "att.W_value", h).reshape(B, T, G, hd).transpose(0, 2, 1, 3)
        q, k = norm(q, p + "att.q_norm"), norm(k, p + "att.k_norm")
        q, k = _np_rope(q, *rope[kind]), _np_rope(k, *rope[kind])
        k, v = np.repeat(k, nh // G, axis=1), np.repeat(v, nh // G, axis=1)
        att = _np_softmax(np.where(allowed[kind], (q * cfg["query_pre_attn_scalar"] ** -0.5) @ k.transpose(0, 1, 3, 2),
                                   -np.inf))
        a = _np_lin(sd, p + "att.out_proj", (att @ v).transpose(0, 2, 1, 3).reshape(B, T, nh * hd))
        x = x + norm(a, p + "post_attention_layernorm")
        h = norm(x, p + "pre_feedforward_layernorm")
        f = _np_lin(sd, p + "ff.fc3", gelu(_np_lin(sd, p + "ff.fc1", h)) * _np_lin(sd, p + "ff.fc2", h))
        x = x + norm(f, p + "post_feedforward_layernorm")
    return _np_lin(sd, "out_head", norm(x, "final_norm"))


def _gemma3_weights():
    sd = gemma3_page(lucid)["W"]
    rng = np.random.default_rng(11)
    return {k: (0.2 * rng.standard_normal(v.shape) if k.endswith(".scale") else 0.3 * rng.standard_normal(v.shape))
            .astype(np.float32) for k, v in sd.items()}


def test_qwen3_batched_kv_cache_generation():
    W = _llama_weights()["qwen"]
    r = qwen3_batched_page(lucid, W)
    sd = _f64(W)
    prompt = [[5, 9, 1, 33, 47], [0, 12, 40, 3, 21]]
    np.testing.assert_allclose(r["logits"], _np_llama(sd, prompt, QWEN_CONFIG, qwen=True), rtol=1e-4, atol=2e-5)
    seq = np.array(prompt)
    for _ in range(6):
        seq = np.concatenate([seq, _np_llama(sd, seq, QWEN_CONFIG, qwen=True)[:, -1].argmax(-1)[:, None]], 1)
    assert r["cached"] == r["uncached"] == seq.tolist()
    assert r["current_pos"] == [10, 10]  # 5 prompt tokens + 5 cached steps (the last token is not fed back)
    assert r["too_long"] == "Sequence length 17 exceeds the model's context length of 16 tokens."


def test_gemma3_sliding_window_masks_norms_and_forward():
    r0 = gemma3_page(lucid)
    assert all(not v.any() for k, v in r0["W"].items() if k.endswith(".scale"))  # zero-centred norms
    r = gemma3_page(lucid, _gemma3_weights())
    E, V, L, d_out, kv, Hd = 16, 48, 3, 32, 8, 32
    block = E * d_out + 2 * E * kv + d_out * E + 2 * 8 + 3 * E * Hd + 4 * E
    total = V * E + L * block + E + E * V
    n_buf = 4 * 16 * 8  # cos/sin, local and global
    assert r["report"] == (f"Total number of parameters: {total:,}\n\nTotal number of unique parameters: "
                           f"{total - V * E:,}\n"
                           f"float32 (PyTorch default): {(2 * total + n_buf) * 4 / 1024:.4f} MB\n"
                           f"float16: {(2 * total + n_buf) * 2 / 1024:.4f} MB\n")
    assert "(blocks): ModuleList(\n    (0-2): 3 x TransformerBlock(\n      (att): GroupedQueryAttention(" in r["repr"]
    assert "(q_norm): RMSNorm()" in r["repr"] and "(out_proj): Linear(in_features=32, out_features=16, bias=False)" \
        in r["repr"]
    i, j = np.arange(6)[:, None], np.arange(6)[None]
    assert r["masks"] == [(j > i).tolist(), ((j > i) | (i - j >= 3)).tolist()]
    idx = [(5, 9, 1, 33, 47, 2, 8), (0, 0, 12, 40, 3, 3, 21)]
    ref = _np_gemma3(_f64(r["W"]), idx, GEMMA3_CONFIG)
    np.testing.assert_allclose(r["logits"], ref, rtol=1e-4, atol=1e-4)
    # the window matters: with a full window the logits change
    far = _np_gemma3(_f64(r["W"]), idx, dict(GEMMA3_CONFIG, sliding_window=16))
    assert np.abs(far - ref).max() > 1e-2


def _llama_weights():
    r = llama_qwen_page(lucid)
    rng = np.random.default_rng(7)
    return {"queries": rng.standard_normal(r["rope"][2].shape).astype(np.float32),
            "llama": _rand_weights(r["llama_W"], 8), "qwen": _rand_weights(r["qwen_W"], 9)}


def test_llama3_qwen3_in_bfloat16_as_the_book_configures_them():
    pytest.importorskip("ml_dtypes")  # lucid.bfloat16 (the bfloat16 extra)
    if lucid.get_default_device().type != "cpu":
        pytest.skip("bfloat16 lives on the CPU: CuPy (and its strict stand-in) has no bfloat16")
    r = llama_qwen_page(lucid, _llama_weights(), dtype="bfloat16")
    idx = [(5, 9, 1, 33, 47, 2, 8), (0, 0, 12, 40, 3, 3, 21)]
    for name, cfg, qwen in (("llama", LLAMA_CONFIG, False), ("llama_fast", LLAMA_CONFIG, False),
                            ("qwen", QWEN_CONFIG, True)):
        assert r[name].dtype == np.dtype("bfloat16"), name  # out_head(x.to(cfg["dtype"]))
        weights = {k: np.asarray(v).astype(np.float64) for k, v in r["qwen_W" if qwen else "llama_W"].items()}
        want = _np_llama(weights, idx, cfg, qwen=qwen)  # float64, from the bfloat16-rounded weights
        got = r[name].astype(np.float64)
        # bfloat16 keeps 8 significant bits: each of the ~20 rounded intermediate results adds 2^-9
        np.testing.assert_allclose(got, want, rtol=5e-2, atol=5e-2 * np.abs(want).max(), err_msg=name)
        assert np.corrcoef(got.ravel(), want.ravel())[0, 1] > 0.999, name


def test_llama3_qwen3_rope_gqa_rmsnorm_swiglu_against_numpy():
    W = _llama_weights()
    r = llama_qwen_page(lucid, W)
    cos, sin, q, rot = r["rope"]
    rc, rs = _np_rope_params(8, 100.0, 16, LLAMA_CONFIG["rope_freq"])
    np.testing.assert_allclose(cos, rc, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(sin, rs, rtol=1e-5, atol=1e-6)
    # the three frequency bands of the smoothing all occur: wavelengths 2*pi (kept), 19.9 (smoothed), 63 and 199
    wl = 2 * np.pi * 100.0 ** (np.arange(0, 8, 2) / 8)
    assert wl[0] < 8 < wl[1] < 32 < wl[2]
    np.testing.assert_allclose(rot, _np_rope(q.astype(np.float64), rc, rs), rtol=1e-5, atol=1e-6)
    assert r["llama_rope_base"] == 50.0  # rescale_theta(100, 32, 16)
    sd = _f64(r["llama_W"])
    idx = [(5, 9, 1, 33, 47, 2, 8), (0, 0, 12, 40, 3, 3, 21)]
    np.testing.assert_allclose(r["llama"], _np_llama(sd, idx, LLAMA_CONFIG), rtol=1e-4, atol=2e-5)
    np.testing.assert_allclose(r["llama_fast"], _np_llama(sd, idx, LLAMA_CONFIG), rtol=1e-4, atol=2e-5)
    np.testing.assert_allclose(r["qwen"], _np_llama(_f64(r["qwen_W"]), idx, QWEN_CONFIG, qwen=True),
                               rtol=1e-4, atol=2e-5)
    E, V, Hd, L = 32, 48, 48, 2
    assert r["llama_n"] == V * E + L * (2 * E * E + 2 * E * 2 * 8 + 3 * E * Hd + 2 * E) + E + E * V
    E, Hd, d_out = 16, 32, 32
    assert r["qwen_n"] == V * E + L * (2 * E * d_out + 2 * E * 2 * 8 + 2 * 8 + 3 * E * Hd + 2 * E) + E + E * V
    # qwen3_compatible RMSNorm computes in float32 and hands back the input's float64
    is64, y = r["rmsnorm"]
    assert is64
    np.testing.assert_allclose(y, _np_rms(q.astype(np.float64), 1.0, 1e-6), rtol=1e-6, atol=1e-7)


# ------------------------------------------------------------------ parity with PyTorch (same weights)
def _reference_torch():
    """PyTorch for the parity runs, on one thread: the models are tiny, and PyTorch's thread pool only
    contends with the other processes on a shared machine."""
    torch = pytest.importorskip("torch")
    torch.set_num_threads(1)
    return torch


def _close_sd(a, b, **tol):
    assert list(a) == list(b)
    for k in a:
        np.testing.assert_allclose(a[k], b[k], err_msg=k, **tol)


def test_appendix_a_torch_parity(tmp_path):
    torch = _reference_torch()
    (tmp_path / "l").mkdir()
    (tmp_path / "t").mkdir()
    r = appendix_a_page(lucid, str(tmp_path / "l"), shuffle=False)
    t = appendix_a_page(torch, str(tmp_path / "t"), W=r["W0"], shuffle=False)
    assert r["a2"].replace("lucid.", "torch.") == t["a2"]
    for k in ("shapes", "repr", "num_params", "w0_shape", "len", "log", "pred", "n_correct", "acc", "reloaded"):
        assert r[k] == t[k], k
    np.testing.assert_allclose(r["a4"], t["a4"], rtol=1e-6)
    np.testing.assert_allclose(r["outputs"], t["outputs"], rtol=1e-5, atol=1e-6)


def test_ch02_torch_parity():
    torch = _reference_torch()
    r = ch02_page(lucid, _text())
    t = ch02_page(torch, _text(), W=r["W"])
    for k in ("vocab", "roundtrip", "first_two", "n_windows", "inputs", "targets", "n_batches", "shapes"):
        assert r[k] == t[k], k
    np.testing.assert_allclose(r["emb"], t["emb"], rtol=1e-6)


def test_ch03_torch_parity():
    torch = _reference_torch()
    r = ch03_page(lucid)
    t = ch03_page(torch, W=r["W"])
    for k in ("simple", "sa_v1", "sa_v2", "ex31", "masked_simple_norm", "masked_softmax", "ca", "mha_wrapper", "mha"):
        np.testing.assert_allclose(r[k], t[k], rtol=1e-5, atol=1e-6, err_msg=k)
    for a, b in zip(r["naive"], t["naive"]):
        np.testing.assert_allclose(a, b, rtol=1e-6)
    assert set(np.unique(t["dropout"]).tolist()) == set(np.unique(r["dropout"]).tolist()) == {0.0, 2.0}


def test_ch04_torch_parity():
    torch = _reference_torch()
    r = ch04_page(lucid, dict(GPT_CONFIG))
    t = ch04_page(torch, dict(GPT_CONFIG), W={"gpt": r["W"], "shortcut": r["shortcut"]})
    for sc in (False, True):
        assert re.sub(r"[-\d.e]+$", "", r["shortcut"][sc][1], flags=re.M) == \
            re.sub(r"[-\d.e]+$", "", t["shortcut"][sc][1], flags=re.M)
        np.testing.assert_allclose(_numbers_at_end(r["shortcut"][sc][1]), _numbers_at_end(t["shortcut"][sc][1]),
                                   rtol=1e-5)
    assert (r["report"], r["ff_params"], r["att_params"], r["generated"]) == \
        (t["report"], t["ff_params"], t["att_params"], t["generated"])
    np.testing.assert_allclose(r["gelu"][1], t["gelu"][1], rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(r["logits"], t["logits"], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(r["fast"], t["fast"], rtol=1e-5, atol=1e-5)


def test_ch05_torch_parity(tmp_path):
    torch = _reference_torch()
    s, u = ch05_sampling_page(lucid), ch05_sampling_page(torch)
    assert s["argmax"] == u["argmax"] and s["top"][1] == u["top"][1]
    assert s["new_logits"] == pytest.approx(u["new_logits"])
    for a, b in zip(s["scaled"] + [s["topk_probas"]], u["scaled"] + [u["topk_probas"]]):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-8)
    cfg = dict(GPT_CONFIG)
    (tmp_path / "l").mkdir()
    (tmp_path / "t").mkdir()
    r = ch05_page(lucid, _text(), cfg, str(tmp_path / "l"), shuffle=False)
    t = ch05_page(torch, _text(), cfg, str(tmp_path / "t"), W=r["W0"], shuffle=False)
    assert r["ids"] == t["ids"] and r["n_batches"] == t["n_batches"] and r["tokens_seen"] == t["tokens_seen"]
    np.testing.assert_allclose(r["initial"], t["initial"], rtol=1e-6)
    np.testing.assert_allclose(r["train_losses"], t["train_losses"], rtol=2e-4)
    np.testing.assert_allclose(r["val_losses"], t["val_losses"], rtol=2e-4)
    _close_sd(r["W1"], t["W1"], rtol=1e-3, atol=2e-4)
    for k in ("greedy", "generate_t0", "eos_stop", "reload_same", "lr3"):
        assert r[k] == t[k], k
    for a, b in zip(r["after_step"], t["after_step"]):
        _close_sd(a, b, rtol=1e-3, atol=2e-4)


def test_ch06_ch07_torch_parity():
    torch = _reference_torch()
    cfg = dict(GPT_CONFIG)
    r = ch06_page(lucid, cfg, shuffle=False)
    t = ch06_page(torch, cfg, W=r["W0"], shuffle=False)
    for k in ("max_length", "encoded", "trainable", "trainable_names", "acc0", "examples_seen", "grads_none",
              "reviews"):
        assert r[k] == t[k], k
    np.testing.assert_allclose(r["last"], t["last"], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(r["loss0"], t["loss0"], rtol=1e-6)
    np.testing.assert_allclose(r["train_losses"], t["train_losses"], rtol=1e-3, atol=1e-4)
    np.testing.assert_allclose(r["val_losses"], t["val_losses"], rtol=1e-3, atol=1e-4)
    _close_sd(r["W1"], t["W1"], rtol=1e-3, atol=2e-4)
    cfg = dict(GPT_CONFIG, context_length=64)
    r = ch07_page(lucid, cfg)
    t = ch07_page(torch, cfg, W=r["W"])
    for k in ("collated", "truncated", "formatted", "encoded", "batches", "loss_1_equals_loss_3"):
        assert r[k] == t[k], k
    np.testing.assert_allclose(r["losses"], t["losses"], rtol=1e-6)
    np.testing.assert_allclose(r["loss"], t["loss"], rtol=1e-5)


def test_ch06_bonus_torch_parity():
    torch = _reference_torch()
    cfg = dict(GPT_CONFIG)
    for kw in ({"trainable_token_pos": "flexible", "batch_size": 4, "accumulation_steps": 2},
               {"average_embeddings": True, "trainable_layers": "lora_alternative"}):
        r = ch06_bonus_page(lucid, cfg, **kw)
        t = ch06_bonus_page(torch, cfg, W=r["W0"], **kw)
        assert r["accs"] == t["accs"] and r["batch"] == t["batch"]
        np.testing.assert_allclose(r["loss0"], t["loss0"], rtol=1e-6)
        _close_sd(r["W1"], t["W1"], rtol=1e-3, atol=2e-4)


def test_dpo_torch_parity():
    torch = _reference_torch()
    cfg = dict(GPT_CONFIG, context_length=64)
    r = dpo_page(lucid, cfg)
    t = dpo_page(torch, cfg, W=r["W0"])
    for k in ("encoded", "batch", "batch_prompt", "pad"):
        assert r[k] == t[k], k
    np.testing.assert_allclose(r["gather_demo"], t["gather_demo"], rtol=1e-6)
    np.testing.assert_allclose(r["loss0"], t["loss0"], atol=1e-6)
    np.testing.assert_allclose(r["logprobs0"], t["logprobs0"], rtol=1e-5)
    for k in r["tracking"]:
        np.testing.assert_allclose(r["tracking"][k], t["tracking"][k], rtol=2e-3, atol=2e-4, err_msg=k)
    np.testing.assert_allclose(r["loss1"], t["loss1"], rtol=2e-3, atol=2e-4)


def test_appendix_d_e_torch_parity():
    torch = _reference_torch()
    cfg = dict(GPT_CONFIG)
    r = appendix_d_page(lucid, _text(), cfg, shuffle=False)
    t = appendix_d_page(torch, _text(), cfg, W=r["W0"], shuffle=False)
    _close_sd(r["grads_before"], t["grads_before"], rtol=1e-4, atol=1e-6)
    _close_sd(r["grads_after"], t["grads_after"], rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose([r["norm"], r["max_before"], r["max_after"]],
                               [t["norm"], t["max_before"], t["max_after"]], rtol=1e-5)
    assert r["lrs"] == t["lrs"] and r["final_lr"] == t["final_lr"]
    np.testing.assert_allclose(r["train_losses"], t["train_losses"], rtol=1e-3)
    _close_sd(r["W1"], t["W1"], rtol=1e-3, atol=2e-4)
    r = appendix_e_page(lucid, cfg, shuffle=False)
    W = {"x": r["layer_W"][0], "layer": r["layer_W"][1], "classifier": r["classifier_W"], "lora": r["W0"]}
    t = appendix_e_page(torch, cfg, W=W, shuffle=False)
    for k in ("base_equal", "trainable_before", "trainable_frozen", "trainable_lora", "n_lora", "same_logits"):
        assert r[k] == t[k], k
    np.testing.assert_allclose(r["lora_layer"][2], t["lora_layer"][2], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(r["train_losses"], t["train_losses"], rtol=1e-3, atol=1e-4)
    _close_sd(r["W1"], t["W1"], rtol=1e-3, atol=2e-4)


def test_qwen3_batched_kv_cache_torch_parity():
    torch = _reference_torch()
    W = _llama_weights()["qwen"]
    r, t = qwen3_batched_page(lucid, W), qwen3_batched_page(torch, W)
    np.testing.assert_allclose(r.pop("logits"), t.pop("logits"), rtol=1e-4, atol=1e-5)
    assert r == t


def test_gemma3_torch_parity():
    torch = _reference_torch()
    W = _gemma3_weights()
    r, t = gemma3_page(lucid, W), gemma3_page(torch, W)
    assert r["repr"] == t["repr"] and r["report"] == t["report"] and r["masks"] == t["masks"]
    np.testing.assert_allclose(r["logits"], t["logits"], rtol=1e-4, atol=1e-5)


def test_kv_cache_llama_qwen_torch_parity():
    torch = _reference_torch()
    cfg = dict(GPT_CONFIG)
    W = ch04_page(lucid, cfg)["W"]
    r, t = kv_cache_page(lucid, cfg, W), kv_cache_page(torch, cfg, W)
    for k in ("keys", "cached", "uncached", "cache_shape", "current_pos", "reset", "after_reset"):
        assert r[k] == t[k], k
    np.testing.assert_allclose(r["step"], t["step"], rtol=1e-5, atol=1e-5)
    for window in (8, 4):
        a, b = kv_cache_optimized_page(lucid, cfg, W, window), kv_cache_optimized_page(torch, cfg, W, window)
        np.testing.assert_allclose(a.pop("steps"), b.pop("steps"), rtol=1e-5, atol=1e-5)
        assert a == b
    W = _llama_weights()
    r, t = llama_qwen_page(lucid, W), llama_qwen_page(torch, W)
    for a, b in zip(r["rope"], t["rope"]):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    assert r["llama_rope_base"] == t["llama_rope_base"] and (r["llama_n"], r["qwen_n"]) == (t["llama_n"], t["qwen_n"])
    np.testing.assert_allclose(r["llama"], t["llama"], rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(r["llama_fast"], t["llama_fast"], rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(r["qwen"], t["qwen"], rtol=1e-4, atol=1e-5)
    assert r["rmsnorm"][0] and t["rmsnorm"][0]
    np.testing.assert_allclose(r["rmsnorm"][1], t["rmsnorm"][1], rtol=1e-6)
