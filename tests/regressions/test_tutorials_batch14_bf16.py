"""Real PyTorch code that uses bfloat16, run on Lucid (``import lucid as torch``), batch 14:

- karpathy/llm.c ``train_gpt2.py`` (the PyTorch reference): ``NewGELU``, ``CausalSelfAttention`` (the
  manual path: ``masked_fill`` with the ``tril`` buffer, softmax, ``att @ v``), ``MLP``, ``Block`` and
  ``GPT`` with its tied ``wte``/``lm_head``, ``_init_weights`` through a seeded ``torch.Generator``,
  ``configure_optimizers`` (AdamW groups, ``inspect.signature(torch.optim.AdamW)``), the
  ``DistributedDataLoader`` over ``.bin`` shards (header of 256 int32, uint16 tokens),
  ``write_fp32``/``write_bf16`` (``t.to(torch.bfloat16).view(torch.int16)`` -> bytes),
  ``pad_vocab``, ``write_model``/``write_state``/``write_tokenizer``, then the training loop with
  gradient accumulation, ``clip_grad_norm_`` and the cosine ``get_lr`` under
  ``torch.autocast(device_type, dtype=torch.bfloat16)`` on the CPU, and one run of the model cast
  whole with ``model.to(ptdtype)`` for ``ptdtype = torch.bfloat16`` (forward, backward, the loop's
  ``clip_grad_norm_`` on bfloat16 gradients and one AdamW step on bfloat16 parameters).
- KellerJordan/Muon ``muon.py``: ``zeropower_via_newtonschulz5`` (``G.bfloat16()``, ``.mT``,
  ``norm(dim=(-2, -1))``, the quintic iteration in bfloat16), ``muon_update`` (``lerp_``) and
  ``SingleDeviceMuonWithAuxAdam`` (a float32 parameter updated by ``p.add_(bf16_update, alpha=-lr)``),
  training a tiny two-layer net.
- karpathy/nano-llama31 ``llama31.py``: ``ModelArgs``, ``RMSNorm`` (``self._norm(x.float()).type_as(x)``),
  ``apply_scaling``, ``precompute_freqs_cis`` (``torch.polar``), ``apply_rotary_emb``
  (``view_as_complex`` of ``xq.float()``, ``view_as_real``, ``type_as``), ``repeat_kv`` (grouped
  keys), ``Attention`` with its key-value cache (``self.cache_k.to(xq)``), ``FeedForward`` (SwiGLU),
  ``TransformerBlock`` and ``Transformer`` under ``inference_mode``, built as ``Llama.build`` does after
  ``torch.set_default_tensor_type(torch.BFloat16Tensor)`` (the script names the cuda one).

Sizes are tiny (vocab 32, 2 layers of width 16, sequences of 8). Each page is a function of the
module handed to it as ``torch``; the parity tests run the same text on PyTorch (bfloat16 on both sides).

Checks without torch: the bytes written are NumPy's (bfloat16 = the upper 16 bits of the float32,
rounded to nearest even, computed here by hand), the headers and the shards' batches exact, the
float32 logits and loss those of a float64 NumPy GPT-2, the bfloat16 model's logits those of the
NumPy model on bfloat16-rounded weights to bfloat16 precision, losses falling; Newton-Schulz
against a NumPy emulation that rounds each op's result to bfloat16; the clipped bfloat16 gradients
against their float64 norm; llama's RMSNorm bit for bit, ``freqs_cis`` in closed form, the cached
step against the full forward.

Adapted: ``pad_vocab``'s ``assert V == 50257`` is dropped (the vocab is 32); the tokenizer is a
stand-in with tiktoken's three members used (``max_token_value``, ``eot_token``, ``decode_bytes``);
the ``__main__`` block is a function with its argparse defaults as arguments, ``device = "cpu"``,
and the ``ctx`` of the loop is autocast on the CPU (the script opens it only on cuda); no DDP or
ZeRO (one process). Muon's ``SingleDeviceMuonWithAuxAdam`` is the stored text. Only the float32 run of
the llm.c page (the script's default ``--dtype``) runs on a non-CPU default device: CuPy and the strict
stand-in have no bfloat16 (``write_bf16`` moves to the host first, so the bfloat16 file is written there too).

Fixed on the way (NOTE [Half composites] now covers bfloat16): ``nn.functional`` composites rounded
to bfloat16 after every primitive, where PyTorch's CPU kernels compute in float32 and round once:
bfloat16 ``F.layer_norm`` (the GPT's ``ln_1``/``ln_2``/``ln_f``) differed from torch 2.13 in 37% of
the elements, ``gelu`` 40%, ``silu`` 28%, ``rms_norm`` 71%, ``group_norm`` 52%, ``mish``/``elu``/
``hardswish``/``glu``/SDPA 20-37%, and ``var``/``std`` 17-33% (the mean was rounded first); the
GPT's bfloat16 logits were 4 bfloat16 ulps off PyTorch's. A bfloat16 activation through a
``LayerNorm`` kept in float32 now stays bfloat16 (PyTorch's mixed-dtype kernel).
``clip_grad_norm_`` refused bfloat16 gradients ("expected floating point or complex tensors, got
bfloat16": NumPy's kind of ml_dtypes' bfloat16 is "V"); ``torch.BFloat16Tensor`` did not exist
(``set_default_tensor_type(torch.BFloat16Tensor)`` raised ``AttributeError``); it is made on first use.
Kept on purpose (Lucid is the exactly rounded one): PyTorch's bfloat16 ``pow(x, 3.0)`` is
``x * x * x`` rounded twice, its ``cross_entropy``/``log_softmax``/``logsumexp``/``prod``/
``huber_loss`` round an intermediate; these differ by 1 ulp in some elements, hence the stated
bfloat16 tolerances of the parity tests.
"""
import glob
import inspect
import io
import math
import os
import struct
import warnings
from contextlib import nullcontext, redirect_stdout
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any, Callable, Iterable, Optional

import numpy as np
import pytest

import lucid
import lucid.nn  # noqa: F401
import lucid.optim  # noqa: F401


def _needs_cpu_default():
    if lucid.get_default_device().type != "cpu":
        pytest.skip("bfloat16 runs on the CPU only (CuPy and the strict stand-in have none)")


def bf16_round(x):
    """float32 -> bfloat16 bits by hand: the upper 16 bits rounded to nearest, ties to even."""
    bits = np.ascontiguousarray(x, np.float32).view(np.uint32).astype(np.uint64)
    return ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)


def bf16_value(x):
    return (bf16_round(x).astype(np.uint32) << 16).view(np.float32).astype(np.float64)


# ---------------------------------------------------------------------------------------------
# karpathy/llm.c train_gpt2.py

def llmc_page(torch, W, tmp, tokens_shards, num_iterations=4, dtype="bfloat16"):
    nn = torch.nn
    F = torch.nn.functional
    out = {}

    class NewGELU(nn.Module):
        """Careful there are a few versions of GeLU, this one is the exact one used by OpenAI"""
        def forward(self, input):
            return 0.5 * input * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (input + 0.044715 * torch.pow(input, 3.0))))

    FLASH = 0

    class CausalSelfAttention(nn.Module):

        def __init__(self, config):
            super().__init__()
            assert config.n_embd % config.n_head == 0
            # key, query, value projections for all heads, but in a batch
            self.c_attn = nn.Linear(config.n_embd, 3 * config.n_embd)
            # output projection
            self.c_proj = nn.Linear(config.n_embd, config.n_embd)
            self.c_proj.LLMC_RESIDUAL_SCALE_FLAG = 1
            # regularization
            self.n_head = config.n_head
            self.n_embd = config.n_embd
            # not really a 'bias', more of a mask, but following the OpenAI/HF naming though
            self.register_buffer("bias", torch.tril(torch.ones(config.block_size, config.block_size))
                                         .view(1, 1, config.block_size, config.block_size))

        def forward(self, x):
            B, T, C = x.size() # batch size, sequence length, embedding dimensionality (n_embd)
            # calculate query, key, values for all heads in batch and move head forward to be the batch dim
            qkv = self.c_attn(x)
            q, k, v = qkv.split(self.n_embd, dim=2)
            k = k.view(B, T, self.n_head, C // self.n_head).transpose(1, 2) # (B, nh, T, hs)
            q = q.view(B, T, self.n_head, C // self.n_head).transpose(1, 2) # (B, nh, T, hs)
            v = v.view(B, T, self.n_head, C // self.n_head).transpose(1, 2) # (B, nh, T, hs)
            if FLASH:
                # flashattention
                y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            else:
                # manual implementation of attention
                # this materializes the large (T,T) matrix for all the queries and keys
                att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
                att = att.masked_fill(self.bias[:,:,:T,:T] == 0, float('-inf'))
                att = F.softmax(att, dim=-1)
                y = att @ v # (B, nh, T, T) x (B, nh, T, hs) -> (B, nh, T, hs)
            y = y.transpose(1, 2).contiguous().view(B, T, C) # re-assemble all head outputs side by side
            # output projection
            y = self.c_proj(y)
            return y

    class MLP(nn.Module):

        def __init__(self, config):
            super().__init__()
            self.c_fc    = nn.Linear(config.n_embd, 4 * config.n_embd)
            self.gelu    = NewGELU()
            self.c_proj  = nn.Linear(4 * config.n_embd, config.n_embd)
            self.c_proj.LLMC_RESIDUAL_SCALE_FLAG = 1

        def forward(self, x):
            x = self.c_fc(x)
            x = self.gelu(x)
            x = self.c_proj(x)
            return x

    class Block(nn.Module):

        def __init__(self, config):
            super().__init__()
            self.ln_1 = nn.LayerNorm(config.n_embd)
            self.attn = CausalSelfAttention(config)
            self.ln_2 = nn.LayerNorm(config.n_embd)
            self.mlp = MLP(config)

        def forward(self, x):
            x = x + self.attn(self.ln_1(x))
            x = x + self.mlp(self.ln_2(x))
            return x

    @dataclass
    class GPTConfig:
        block_size: int = 1024
        vocab_size: int = 50257
        n_layer: int = 12
        n_head: int = 12
        n_embd: int = 768

    class GPT(nn.Module):

        def __init__(self, config):
            super().__init__()
            self.config = config

            self.transformer = nn.ModuleDict(dict(
                wte = nn.Embedding(config.vocab_size, config.n_embd),
                wpe = nn.Embedding(config.block_size, config.n_embd),
                h = nn.ModuleList([Block(config) for _ in range(config.n_layer)]),
                ln_f = nn.LayerNorm(config.n_embd),
            ))
            self.lm_head = nn.Linear(config.n_embd, config.vocab_size, bias=False)
            self.lm_head.LLMC_SKIP_INIT = 1 # don't init this one, we will tie weights
            self.transformer.wte.weight = self.lm_head.weight # https://paperswithcode.com/method/weight-tying

            # init all weights, use a torch rng object to be very careful
            self.init_rng = torch.Generator()
            self.init_rng.manual_seed(42)
            self.apply(self._init_weights)

        def _init_weights(self, module):
            if isinstance(module, nn.Linear):
                # apply special scaled init to the residual projections, per GPT-2 paper
                std = 0.02 if not hasattr(module, 'LLMC_RESIDUAL_SCALE_FLAG') else 0.02/math.sqrt(2 * self.config.n_layer)
                # we want to skip initializing lm_head, which shares parameters with wte
                # and wte was already initialized down below during the Embedding init
                if not hasattr(module, 'LLMC_SKIP_INIT'):
                    torch.nn.init.normal_(module.weight, mean=0.0, std=std, generator=self.init_rng)
                if module.bias is not None:
                    torch.nn.init.zeros_(module.bias)
            elif isinstance(module, nn.Embedding):
                torch.nn.init.normal_(module.weight, mean=0.0, std=0.02, generator=self.init_rng)

        def forward(self, idx, targets=None, return_logits=True):
            device = idx.device
            b, t = idx.size()
            assert t <= self.config.block_size, f"Cannot forward sequence of length {t}, block size is only {self.config.block_size}"
            pos = torch.arange(0, t, dtype=torch.long, device=device) # shape (t)

            # forward the GPT model itself
            tok_emb = self.transformer.wte(idx) # token embeddings of shape (b, t, n_embd)
            pos_emb = self.transformer.wpe(pos) # position embeddings of shape (t, n_embd)
            x = tok_emb + pos_emb

            for block in self.transformer.h:
                x = block(x)
            x = self.transformer.ln_f(x)

            if targets is not None:
                # if we are given some desired targets also calculate the loss
                logits = self.lm_head(x)
                loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1), ignore_index=-1)
            else:
                # inference-time mini-optimization: only forward the lm_head on the very last position
                logits = self.lm_head(x[:, [-1], :]) # note: using list [-1] to preserve the time dim
                loss = None

            # there are performance reasons why not returning logits is prudent, if not needed
            if not return_logits:
                logits = None

            return logits, loss

        def configure_optimizers(self, weight_decay, learning_rate, betas, device_type, zero_stage):
            # start with all of the candidate parameters
            param_dict = {pn: p for pn, p in self.named_parameters()}
            # filter out those that do not require grad
            param_dict = {pn: p for pn, p in param_dict.items() if p.requires_grad}
            # create optim groups. Any parameters that is 2D will be weight decayed, otherwise no.
            # i.e. all weight tensors in matmuls + embeddings decay, all biases and layernorms don't.
            decay_params = [p for n, p in param_dict.items() if p.dim() >= 2]
            nodecay_params = [p for n, p in param_dict.items() if p.dim() < 2]
            optim_groups = [
                {'params': decay_params, 'weight_decay': weight_decay},
                {'params': nodecay_params, 'weight_decay': 0.0}
            ]
            num_decay_params = sum(p.numel() for p in decay_params)
            num_nodecay_params = sum(p.numel() for p in nodecay_params)
            print0(f"num decayed parameter tensors: {len(decay_params)}, with {num_decay_params:,} parameters")
            print0(f"num non-decayed parameter tensors: {len(nodecay_params)}, with {num_nodecay_params:,} parameters")
            # Create AdamW optimizer and use the fused version if it is available
            fused_available = 'fused' in inspect.signature(torch.optim.AdamW).parameters
            use_fused = fused_available and device_type == 'cuda'
            print0(f"using fused AdamW: {use_fused}")
            print0("using regular AdamW")
            optimizer = torch.optim.AdamW(optim_groups, lr=learning_rate, betas=betas, fused=use_fused)
            return optimizer

    def _peek_data_shard(filename):
        # only reads the header, returns header data
        with open(filename, "rb") as f:
            # first read the header, which is 256 int32 integers (4 bytes each)
            header = np.frombuffer(f.read(256*4), dtype=np.int32)
        if header[0] != 20240520:
            print("ERROR: magic number mismatch in the data .bin file!")
            exit(1)
        assert header[1] == 1, "unsupported version"
        ntok = header[2] # number of tokens (claimed)
        return ntok # for now just return the number of tokens

    def _load_data_shard(filename):
        with open(filename, "rb") as f:
            # first read the header, which is 256 int32 integers (4 bytes each)
            header = np.frombuffer(f.read(256*4), dtype=np.int32)
            assert header[0] == 20240520, "magic number mismatch in the data .bin file"
            assert header[1] == 1, "unsupported version"
            ntok = header[2] # number of tokens (claimed)
            # the rest of it are tokens, stored as uint16
            tokens = np.frombuffer(f.read(), dtype=np.uint16)
        assert len(tokens) == ntok, "number of tokens read does not match header?"
        return tokens

    class DistributedDataLoader:
        def __init__(self, filename_pattern, B, T, process_rank, num_processes):
            self.process_rank = process_rank
            self.num_processes = num_processes
            self.B = B
            self.T = T

            # glob files that match the pattern
            self.files = sorted(glob.glob(filename_pattern))
            assert len(self.files) > 0, f"did not find any files that match the pattern {filename_pattern}"

            # load and validate all data shards, count number of tokens in total
            ntok_total = 0
            for fname in self.files:
                shard_ntok = _peek_data_shard(fname)
                assert shard_ntok >= num_processes * B * T + 1
                ntok_total += shard_ntok
            self.ntok_total = ntok_total
            print0(f"DataLoader: total number of tokens: {ntok_total:,} across {len(self.files)} files")

            # kick things off
            self.current_shard = None
            self.reset()

        def reset(self):
            # we're being a bit clever here: if we already had shard 0 loaded,
            # then don't do the work to reload it, just reset the pointer
            if self.current_shard != 0:
                self.current_shard = 0
                self.tokens = _load_data_shard(self.files[self.current_shard])
            self.current_position = self.process_rank * self.B * self.T

        def advance(self): # advance to next data shard
            self.current_shard = (self.current_shard + 1) % len(self.files)
            self.current_position = self.process_rank * self.B * self.T
            self.tokens = _load_data_shard(self.files[self.current_shard])

        def next_batch(self):
            B = self.B
            T = self.T
            buf = self.tokens[self.current_position : self.current_position+B*T+1]
            buf = torch.tensor(buf.astype(np.int32), dtype=torch.long)
            x = (buf[:-1]).view(B, T) # inputs
            y = (buf[1:]).view(B, T) # targets
            # advance the start pointer in current shard
            self.current_position += B * T * self.num_processes
            # if loading the next batch would be out of bounds advance the shard
            if self.current_position + (B * T * self.num_processes + 1) > len(self.tokens):
                self.advance()
            return x, y

    def write_fp32(tensor, file):
        t = tensor.detach().cpu().to(torch.float32)
        b = t.numpy().tobytes()
        file.write(b)

    def write_bf16(tensor, file):
        t = tensor.detach().cpu().to(torch.bfloat16)
        # numpy doesn't have bf16 datatype so we have to trick it
        t = t.view(torch.int16) # trick: reinterpret as int16
        b = t.numpy().tobytes()
        file.write(b)

    def write_tensors(model_tensors, L, file, dtype):
        # writes the GPT-2 model's weights to a binary file
        assert dtype in {"float32", "bfloat16"}
        write_fun = write_fp32 if dtype == "float32" else write_bf16
        write_fun(model_tensors["transformer.wte.weight"], file) # (V, C)
        write_fun(model_tensors["transformer.wpe.weight"], file) # (T, C)
        for i in range(L): # (L, C)
            write_fun(model_tensors[f"transformer.h.{i}.ln_1.weight"], file)
        for i in range(L): # (L, C)
            write_fun(model_tensors[f"transformer.h.{i}.ln_1.bias"], file)
        for i in range(L): # (L, 3C, C)
            write_fun(model_tensors[f"transformer.h.{i}.attn.c_attn.weight"], file)
        for i in range(L): # (L, 3C)
            write_fun(model_tensors[f"transformer.h.{i}.attn.c_attn.bias"], file)
        for i in range(L): # (L, C, C)
            write_fun(model_tensors[f"transformer.h.{i}.attn.c_proj.weight"], file)
        for i in range(L): # (L, C)
            write_fun(model_tensors[f"transformer.h.{i}.attn.c_proj.bias"], file)
        for i in range(L): # (L, C)
            write_fun(model_tensors[f"transformer.h.{i}.ln_2.weight"], file)
        for i in range(L): # (L, C)
            write_fun(model_tensors[f"transformer.h.{i}.ln_2.bias"], file)
        for i in range(L): # (L, 4C, C)
            write_fun(model_tensors[f"transformer.h.{i}.mlp.c_fc.weight"], file)
        for i in range(L): # (L, 4C)
            write_fun(model_tensors[f"transformer.h.{i}.mlp.c_fc.bias"], file)
        for i in range(L): # (L, C, 4C)
            write_fun(model_tensors[f"transformer.h.{i}.mlp.c_proj.weight"], file)
        for i in range(L): # (L, C)
            write_fun(model_tensors[f"transformer.h.{i}.mlp.c_proj.bias"], file)
        write_fun(model_tensors["transformer.ln_f.weight"], file) # (C, )
        write_fun(model_tensors["transformer.ln_f.bias"], file) # (C, )

    @torch.no_grad()
    def pad_vocab(tensor, multiple=128, value=0):
        assert tensor.ndim == 2
        V, C = tensor.shape
        # calculate padded vocab size by rounding up to nearest multiple
        Vp = ((V + multiple - 1) // multiple) * multiple
        # pad the tensor
        pad_rows = Vp - V
        padded = tensor if pad_rows == 0 else F.pad(tensor, (0, 0, 0, pad_rows), value=value)
        assert padded.shape == (Vp, C)
        return padded

    def write_model(model, filename, dtype):
        # everything we need to instantiate the model
        # 1) header is: version int, GPTConfig ints, padding to 1024 bytes
        assert dtype in {"float32", "bfloat16"} # float16 todo maybe later
        version = {
            "float32": 3, # 3: all tensors are fp32, padded vocab
            "bfloat16": 5, # 5: all tensors are bf16, padded vocab
        }[dtype]
        header = torch.zeros(256, dtype=torch.int32)
        header[0] = 20240326 # magic
        header[1] = version # checkpoint version
        header[2] = model.config.block_size
        header[3] = model.config.vocab_size
        header[4] = model.config.n_layer
        header[5] = model.config.n_head
        header[6] = model.config.n_embd
        # 2) the parameters follow the header
        params = {name: param.cpu() for name, param in model.named_parameters()}
        # pad the vocab to a multiple of 128 here at export, for efficiency in C
        wte = params["transformer.wte.weight"] # (V, C)
        wte_padded = pad_vocab(wte) # (Vp, C)
        params["transformer.wte.weight"] = wte_padded # (Vp, C)
        print(f"padded vocab size from {wte.size(0)} to {wte_padded.size(0)}")
        header[7] = wte_padded.size(0) # padded vocab size store in header
        # now write to file
        with open(filename, "wb") as file:
            file.write(header.numpy().tobytes()) # header
            write_tensors(params, model.config.n_layer, file, dtype) # params
        print(f"wrote {filename}")

    def write_state(model, x, y, logits, loss, filename):
        # the state is used for debugging.
        # it contains information about the input, logits, loss, and the parameter gradients
        # this can be used for checking the computation correctness in C
        header = torch.zeros(256, dtype=torch.int32)
        header[0] = 20240327 # magic
        header[1] = 2 # run state version = 2 (1 -> 2 for padded vocab changes)
        header[2] = x.size(0) # batch size of the batch, B
        header[3] = x.size(1) # temporal extent of the batch, T
        grads = {name: param.grad.cpu() for name, param in model.named_parameters()}
        # pad the vocab grads here as well, to mirror write_model
        wte_grad = grads["transformer.wte.weight"] # (V, C)
        wte_grad_padded = pad_vocab(wte_grad, value=0) # (Vp, C) # TODO later maybe pad with nan?
        grads["transformer.wte.weight"] = wte_grad_padded # (Vp, C)
        print(f"padded vocab size in reference grads from {wte_grad.size(0)} to {wte_grad_padded.size(0)}")
        with open(filename, "wb") as file:
            # header
            file.write(header.numpy().tobytes())
            # input x
            file.write(x.cpu().numpy().astype("int32").tobytes()) # (B, T)
            # targets y
            file.write(y.cpu().numpy().astype("int32").tobytes()) # (B, T)
            # logits (result of the model forward pass)
            write_fp32(logits.cpu(), file)
            # loss (single float, result of the cross entropy loss)
            write_fp32(loss.cpu(), file)
            # gradients
            write_tensors(grads, model.config.n_layer, file, "float32")
        print(f"wrote {filename}")

    def write_tokenizer(enc, filename):
        n = enc.max_token_value + 1
        header = torch.zeros(256, dtype=torch.int32)
        header[0] = 20240328 # magic
        header[1] = 2 # tokenizer version = 2 (1 -> 2: includes EOT token)
        header[2] = n # number of tokens
        header[3] = enc.eot_token # EOT token
        with open(filename, "wb") as file:
            file.write(header.numpy().tobytes())
            for i in range(n):
                b = enc.decode_bytes([i])
                length = len(b)
                assert length < 256, f"Token length exceeds 255: {length}"
                file.write(struct.pack("<B", length))  # Write the length as a 1-byte unsigned integer
                file.write(b)  # Write the actual bytes
        print(f"wrote {filename}")

    def print0(*args, **kwargs):
        # modified print that only prints from the master process
        # if this is not a distributed run, it's just a print
        if int(os.environ.get("RANK", 0)) == 0:
            print(*args, **kwargs)

    # the shards the page's prepro scripts would write (header of 256 int32, then uint16 tokens)
    for k, toks in enumerate(tokens_shards):
        header = np.zeros(256, dtype=np.int32)
        header[0], header[1], header[2] = 20240520, 1, len(toks)
        with open(os.path.join(tmp, f"shard_{k:02d}.bin"), "wb") as f:
            f.write(header.tobytes())
            f.write(np.asarray(toks, np.uint16).tobytes())

    # ---- int main, with the argparse defaults shrunk ----
    B, T = 2, 8
    total_batch_size = 32
    learning_rate, warmup_iters, learning_rate_decay_frac = 3e-3, 1, 0.1
    weight_decay, grad_clip = 0.1, 1.0
    ddp_rank, ddp_world_size, zero_stage = 0, 1, 0
    device = "cpu"
    device_type = 'cuda' if 'cuda' in device else 'cpu'
    tokens_per_fwdbwd = B * T * ddp_world_size
    assert total_batch_size % tokens_per_fwdbwd == 0
    grad_accum_steps = total_batch_size // tokens_per_fwdbwd
    ptdtype = {'float32': torch.float32, 'bfloat16': torch.bfloat16, 'float16': torch.float16}[dtype]
    # the script opens autocast only on cuda; on this CPU page it is the CPU's bfloat16 autocast
    ctx = torch.amp.autocast(device_type=device_type, dtype=ptdtype) if dtype != "float32" else nullcontext()
    torch.manual_seed(42)

    enc = SimpleNamespace(max_token_value=W["wte"].shape[0] - 1, eot_token=W["wte"].shape[0] - 1,
                          decode_bytes=lambda ids: ("<|endoftext|>" if ids[0] == W["wte"].shape[0] - 1
                                                    else chr(97 + ids[0] % 26) * (1 + ids[0] // 26)).encode())
    log = io.StringIO()
    with redirect_stdout(log):
        write_tokenizer(enc, os.path.join(tmp, "gpt2_tokenizer.bin"))

        model_config = GPTConfig(block_size=16, vocab_size=W["wte"].shape[0], n_layer=2, n_head=2, n_embd=16)
        model = GPT(model_config)
        out["init_std"] = float(model.transformer.wte.weight.detach().std())
        with torch.no_grad():  # the same weights on both sides
            for name, p in model.named_parameters():
                p.copy_(torch.tensor(W[name]))
        model.train()
        model.to(device)

        train_loader = DistributedDataLoader(os.path.join(tmp, "shard_*.bin"), B, T, ddp_rank, ddp_world_size)
        out["ntok_total"] = train_loader.ntok_total

        x, y = train_loader.next_batch()
        x, y = x.to(device), y.to(device)
        logits, loss = model(x, y)
        loss.backward()
        write_model(model, os.path.join(tmp, "gpt2_d2.bin"), dtype="float32")
        write_model(model, os.path.join(tmp, "gpt2_d2_bf16.bin"), dtype="bfloat16")
        write_state(model, x, y, logits, loss, os.path.join(tmp, "gpt2_d2_debug_state.bin"))
        out["x"], out["y"] = x.tolist(), y.tolist()
        out["logits"] = logits.detach().cpu().numpy()
        out["loss"] = loss.item()
        train_loader.reset()

        raw_model = model
        optimizer = raw_model.configure_optimizers(weight_decay=weight_decay,
                                                   learning_rate=learning_rate, betas=(0.9, 0.95),
                                                   device_type=device, zero_stage=zero_stage)

        def get_lr(it):
            min_lr = learning_rate * learning_rate_decay_frac
            # 1) linear warmup for warmup_iters steps
            if it < warmup_iters:
                return learning_rate * (it+1) / warmup_iters
            # 2) if it > lr_decay_iters, return min learning rate
            if it > num_iterations:
                return min_lr
            # 3) in between, use cosine decay down to min learning rate
            decay_ratio = (it - warmup_iters) / (num_iterations - warmup_iters)
            assert 0 <= decay_ratio <= 1
            coeff = 0.5 * (1.0 + math.cos(math.pi * decay_ratio)) # coeff starts at 1 and goes to 0
            return min_lr + coeff * (learning_rate - min_lr)

        out["losses"], out["norms"], out["lrs"], out["loss_dtypes"] = [], [], [], []
        for step in range(num_iterations):
            model.train()
            optimizer.zero_grad(set_to_none=True)
            train_loader.reset()  # overfit_single_batch
            lossf = 0.0
            for micro_step in range(grad_accum_steps):
                x, y = train_loader.next_batch()
                x, y = x.to(device), y.to(device)
                with ctx:
                    logits, loss = model(x, y, return_logits=True)
                    out["loss_dtypes"].append((str(logits.dtype), str(loss.dtype)))
                    loss = loss / grad_accum_steps
                    lossf += loss.detach()
                loss.backward()
            lossf = lossf.item()
            norm = torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
            lr = get_lr(step)
            for param_group in optimizer.param_groups:
                param_group['lr'] = lr
            optimizer.step()
            print0(f"step {step+1:4d}/{num_iterations} | train loss {lossf:.6f} | norm {norm:.4f} | lr {lr:.2e}")
            out["losses"].append(lossf)
            out["norms"].append(float(norm))
            out["lrs"].append(lr)
        out["grad_dtype"] = str(model.lm_head.weight.grad.dtype)

        # the model cast whole: model.to(ptdtype), a bfloat16 forward and backward
        if ptdtype != torch.bfloat16:
            out["log"] = log.getvalue()
            return out
        model_bf = GPT(model_config)
        with torch.no_grad():
            for name, p in model_bf.named_parameters():
                p.copy_(torch.tensor(W[name]))
        model_bf.to(ptdtype)
        train_loader.reset()
        x, y = train_loader.next_batch()
        logits, loss = model_bf(x, y)
        loss.backward()
        out["bf_dtypes"] = (str(logits.dtype), str(loss.dtype), str(model_bf.lm_head.weight.grad.dtype),
                            str(model_bf.transformer.h[0].attn.bias.dtype))
        out["bf_logits"] = logits.detach().float().numpy()
        out["bf_loss"] = loss.float().item()
        out["bf_wte_grad"] = model_bf.lm_head.weight.grad.float().numpy()
        # the bfloat16 model's own weights written as bfloat16: the identity on their bits
        buf = io.BytesIO()
        write_bf16(model_bf.lm_head.weight, buf)
        out["bf_self_bytes"] = buf.getvalue()
        out["bf_grads"] = [p.grad.float().numpy() for p in model_bf.parameters()]
        # one step of the loop's tail on the bfloat16 model: bfloat16 gradients clipped, AdamW
        norm = torch.nn.utils.clip_grad_norm_(model_bf.parameters(), 0.5)
        out["bf_norm"] = (str(norm.dtype), norm.float().item())
        out["bf_clipped"] = [p.grad.float().numpy() for p in model_bf.parameters()]
        optimizer = model_bf.configure_optimizers(weight_decay=weight_decay, learning_rate=learning_rate,
                                                  betas=(0.9, 0.95), device_type=device, zero_stage=zero_stage)
        optimizer.step()
        out["bf_step_dtypes"] = sorted({str(p.dtype) for p in model_bf.parameters()})
        out["bf_after"] = model_bf.lm_head.weight.detach().float().numpy()
    out["log"] = log.getvalue()
    return out


def _llmc_files(tmp):
    return {os.path.basename(p): open(p, "rb").read() for p in sorted(glob.glob(os.path.join(tmp, "gpt2_*")))}
    return out


def gpt_weights(V=32, C=16, L=2, block=16, seed=0):
    rng = np.random.default_rng(seed)
    W = {"wte": None}
    w = lambda *s, std=0.2: (rng.standard_normal(s) * std).astype(np.float32)
    W["transformer.wte.weight"] = W["lm_head.weight"] = w(V, C, std=0.5)
    W["transformer.wpe.weight"] = w(block, C)
    for i in range(L):
        p = f"transformer.h.{i}."
        W[p + "ln_1.weight"] = (1 + w(C, std=0.1)).astype(np.float32)
        W[p + "ln_1.bias"] = w(C, std=0.1)
        W[p + "attn.c_attn.weight"], W[p + "attn.c_attn.bias"] = w(3 * C, C), w(3 * C, std=0.1)
        W[p + "attn.c_proj.weight"], W[p + "attn.c_proj.bias"] = w(C, C), w(C, std=0.1)
        W[p + "ln_2.weight"] = (1 + w(C, std=0.1)).astype(np.float32)
        W[p + "ln_2.bias"] = w(C, std=0.1)
        W[p + "mlp.c_fc.weight"], W[p + "mlp.c_fc.bias"] = w(4 * C, C), w(4 * C, std=0.1)
        W[p + "mlp.c_proj.weight"], W[p + "mlp.c_proj.bias"] = w(C, 4 * C), w(C, std=0.1)
    W["transformer.ln_f.weight"] = (1 + w(C, std=0.1)).astype(np.float32)
    W["transformer.ln_f.bias"] = w(C, std=0.1)
    W["wte"] = W["lm_head.weight"]
    return W


def gpt_shards():
    rng = np.random.default_rng(1)
    pattern = np.tile(rng.integers(0, 31, 9), 4)  # a repeating text the model can learn
    return [pattern[:33], rng.integers(0, 32, 40)]


def numpy_gpt(W, x, y, L=2, H=2, rnd=lambda a: a):
    """GPT-2 forward in float64 NumPy; ``rnd`` rounds each weight (to bfloat16 for the cast model)."""
    g = lambda k: rnd(W[k]).astype(np.float64)

    def ln(h, p):
        mu, var = h.mean(-1, keepdims=True), h.var(-1, keepdims=True)
        return (h - mu) / np.sqrt(var + 1e-5) * g(p + ".weight") + g(p + ".bias")

    Bn, Tn = x.shape
    h = g("transformer.wte.weight")[x] + g("transformer.wpe.weight")[:Tn]
    C = h.shape[-1]
    for i in range(L):
        p = f"transformer.h.{i}."
        a = ln(h, p + "ln_1") @ g(p + "attn.c_attn.weight").T + g(p + "attn.c_attn.bias")
        q, k, v = (a[..., j * C:(j + 1) * C].reshape(Bn, Tn, H, C // H).transpose(0, 2, 1, 3) for j in range(3))
        att = q @ k.transpose(0, 1, 3, 2) / math.sqrt(C // H)
        att = np.where(np.tril(np.ones((Tn, Tn))) == 0, -np.inf, att)
        att = np.exp(att - att.max(-1, keepdims=True))
        att /= att.sum(-1, keepdims=True)
        o = (att @ v).transpose(0, 2, 1, 3).reshape(Bn, Tn, C)
        h = h + o @ g(p + "attn.c_proj.weight").T + g(p + "attn.c_proj.bias")
        m = ln(h, p + "ln_2") @ g(p + "mlp.c_fc.weight").T + g(p + "mlp.c_fc.bias")
        m = 0.5 * m * (1 + np.tanh(math.sqrt(2 / math.pi) * (m + 0.044715 * m ** 3)))
        h = h + m @ g(p + "mlp.c_proj.weight").T + g(p + "mlp.c_proj.bias")
    logits = ln(h, "transformer.ln_f") @ g("transformer.wte.weight").T
    z = logits.reshape(-1, logits.shape[-1])
    lse = np.log(np.exp(z - z.max(1, keepdims=True)).sum(1)) + z.max(1)
    return logits, float(np.mean(lse - z[np.arange(len(z)), y.reshape(-1)]))


def _expected_params(W, as_bf16):
    order = []
    for n in ("ln_1.weight", "ln_1.bias", "attn.c_attn.weight", "attn.c_attn.bias", "attn.c_proj.weight",
              "attn.c_proj.bias", "ln_2.weight", "ln_2.bias", "mlp.c_fc.weight", "mlp.c_fc.bias",
              "mlp.c_proj.weight", "mlp.c_proj.bias"):
        order += [f"transformer.h.{i}.{n}" for i in range(2)]
    order = ["transformer.wte.weight", "transformer.wpe.weight"] + order + ["transformer.ln_f.weight",
                                                                             "transformer.ln_f.bias"]
    chunks = []
    for name in order:
        a = W[name]
        if name == "transformer.wte.weight":  # padded to a multiple of 128 rows with zeros
            a = np.concatenate([a, np.zeros((128 - a.shape[0], a.shape[1]), np.float32)])
        chunks.append(bf16_round(a).tobytes() if as_bf16 else np.ascontiguousarray(a, np.float32).tobytes())
    return b"".join(chunks)


def _run_llmc(torch, tmp_path, name, dtype="bfloat16"):
    d = tmp_path / name
    d.mkdir()
    out = llmc_page(torch, gpt_weights(), str(d), gpt_shards(), dtype=dtype)
    out["files"] = _llmc_files(str(d))
    return out


def _check_llmc_files(r, tmp_dir):
    """The bytes written, without torch: headers, NumPy's float32 and bfloat16 encodings, the state."""
    W, files, sh = gpt_weights(), r["files"], gpt_shards()
    # model files: header, then every tensor in write_tensors' order; bfloat16 = NumPy's rounding
    for fname, version, as_bf16 in (("gpt2_d2.bin", 3, False), ("gpt2_d2_bf16.bin", 5, True)):
        header = np.frombuffer(files[fname][:1024], np.int32)
        assert header[:8].tolist() == [20240326, version, 16, 32, 2, 2, 16, 128] and not header[8:].any()
        assert files[fname][1024:] == _expected_params(W, as_bf16)
    # the tokenizer file: header, then (length byte, bytes) per token
    tok = open(os.path.join(tmp_dir, "gpt2_tokenizer.bin"), "rb").read()
    assert np.frombuffer(tok[:1024], np.int32)[:4].tolist() == [20240328, 2, 32, 31]
    assert tok[1024:1030] == b"\x01a\x01b\x01c" and tok.endswith(b"\x0d<|endoftext|>")
    # the loader: 33 + 40 tokens in two shards; the first batch is the first shard's 17 tokens
    assert r["ntok_total"] == 73
    x, y = sh[0][:16].reshape(2, 8), sh[0][1:17].reshape(2, 8)
    np.testing.assert_array_equal(r["x"], x)
    np.testing.assert_array_equal(r["y"], y)
    # float32 logits and loss against a float64 NumPy GPT-2
    logits, loss = numpy_gpt(W, x, y)
    np.testing.assert_allclose(r["logits"], logits, rtol=1e-4, atol=1e-4)
    assert r["loss"] == pytest.approx(loss, rel=1e-5)
    # the state file: header, x, y, logits and loss as written
    st = files["gpt2_d2_debug_state.bin"]
    assert np.frombuffer(st[:1024], np.int32)[:4].tolist() == [20240327, 2, 2, 8]
    body = np.frombuffer(st[1024:1024 + 2 * 64], np.int32)
    np.testing.assert_array_equal(body[:16], x.reshape(-1))
    np.testing.assert_array_equal(body[16:], y.reshape(-1))
    lg = np.frombuffer(st[1152:1152 + 2 * 8 * 32 * 4], np.float32)
    np.testing.assert_allclose(lg, logits.reshape(-1), rtol=1e-4, atol=1e-4)
    assert np.frombuffer(st[1152 + 2048:1152 + 2052], np.float32)[0] == pytest.approx(loss, rel=1e-5)
    # grads follow in float32: the padded wte rows are zeros
    g = np.frombuffer(st[1152 + 2052:1152 + 2052 + 128 * 16 * 4], np.float32).reshape(128, 16)
    assert np.abs(g[:32]).sum() > 0 and not g[32:].any()
    lr = [3e-3, 3e-3, 3e-4 + 0.5 * (1 + math.cos(math.pi / 3)) * 2.7e-3,
          3e-4 + 0.5 * (1 + math.cos(2 * math.pi / 3)) * 2.7e-3]
    np.testing.assert_allclose(r["lrs"], lr, rtol=1e-12)
    _, loss2 = numpy_gpt(W, sh[0][16:32].reshape(2, 8), sh[0][17:33].reshape(2, 8))
    return (loss + loss2) / 2  # the first step's loss: the mean over the two micro-batches


def test_llmc_train_gpt2_float32_any_device(tmp_path):
    """The script's default ``--dtype float32`` (no autocast); ``write_bf16`` moves to the host first,
    so this runs on every device."""
    r = _run_llmc(lucid, tmp_path, "lucid", dtype="float32")
    first = _check_llmc_files(r, str(tmp_path / "lucid"))
    assert r["losses"][0] == pytest.approx(first, rel=1e-5)
    assert set(r["loss_dtypes"]) == {("lucid.float32", "lucid.float32")}
    assert r["losses"][-1] < r["losses"][0] - 0.1


def test_llmc_train_gpt2_bfloat16(tmp_path):
    _needs_cpu_default()
    W = gpt_weights()
    r = _run_llmc(lucid, tmp_path, "lucid")
    first = _check_llmc_files(r, str(tmp_path / "lucid"))
    sh = gpt_shards()
    x, y = sh[0][:16].reshape(2, 8), sh[0][1:17].reshape(2, 8)
    # training under CPU autocast to bfloat16: logits bfloat16, loss float32 (cross_entropy's list)
    assert set(r["loss_dtypes"]) == {("lucid.bfloat16", "lucid.float32")}
    assert r["grad_dtype"] == "lucid.float32"  # the parameters stay float32
    assert r["losses"][0] == pytest.approx(first, abs=0.03)  # to bfloat16 precision
    assert r["losses"][-1] < r["losses"][0] - 0.1  # the batch is being overfit
    # the model cast whole to bfloat16: everything bfloat16, logits those of the rounded weights
    assert r["bf_dtypes"] == ("lucid.bfloat16",) * 4
    bf_logits, bf_loss = numpy_gpt(W, x, y, rnd=bf16_value)
    # each op rounds to bfloat16 (relative 2^-9): a few ulps of the logits' scale
    np.testing.assert_allclose(r["bf_logits"], bf_logits, atol=0.06 * np.abs(bf_logits).max())
    assert r["bf_loss"] == pytest.approx(bf_loss, abs=0.05)
    assert r["bf_self_bytes"] == bf16_round(bf16_value(W["lm_head.weight"]).astype(np.float32)).tobytes()
    # clip_grad_norm_ on bfloat16 gradients: the total (bfloat16) is the norm of all of them, each
    # gradient scaled by 0.5 / total (to a bfloat16 ulp); AdamW keeps the parameters bfloat16
    total = math.sqrt(sum((g.astype(np.float64) ** 2).sum() for g in r["bf_grads"]))
    assert r["bf_norm"][0] == "lucid.bfloat16" and r["bf_norm"][1] == pytest.approx(total, rel=2.0 ** -8)
    assert total > 0.5
    for g, c in zip(r["bf_grads"], r["bf_clipped"]):
        np.testing.assert_allclose(c, g * 0.5 / total, rtol=2.0 ** -7, atol=1e-30)
    assert r["bf_step_dtypes"] == ["lucid.bfloat16"]
    # the first AdamW step moves each weight by about lr (sign of its gradient), decay aside
    moved = bf16_value(W["lm_head.weight"]) - r["bf_after"]
    big = np.abs(r["bf_wte_grad"]) > 1e-3
    np.testing.assert_allclose(moved[big], 3e-3 * np.sign(r["bf_wte_grad"][big]), atol=2.0 ** -6)
    assert "padded vocab size from 32 to 128" in r["log"] and "using fused AdamW: False" in r["log"]


def test_llmc_train_gpt2_bfloat16_torch_parity(tmp_path):
    torch = pytest.importorskip("torch")
    _needs_cpu_default()
    r, t = _run_llmc(lucid, tmp_path, "lucid"), _run_llmc(torch, tmp_path, "torch")
    assert r["files"]["gpt2_d2_bf16.bin"] == t["files"]["gpt2_d2_bf16.bin"]  # the same bits
    a, b = (np.frombuffer(f["gpt2_d2.bin"], np.float32) for f in (r["files"], t["files"]))
    np.testing.assert_array_equal(a, b)
    a, b = (np.frombuffer(f["gpt2_d2_debug_state.bin"][1152:], np.float32) for f in (r["files"], t["files"]))
    np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6)  # logits, loss, float32 grads
    names = lambda ds: [tuple(s.split(".")[1] for s in d) for d in ds]
    assert names(r["loss_dtypes"]) == names(t["loss_dtypes"]) == [("bfloat16", "float32")] * 8  # autocast's lists
    # bfloat16 on both sides: losses and norms to bfloat16's precision
    np.testing.assert_allclose(r["losses"], t["losses"], rtol=2e-2, atol=2e-2)
    np.testing.assert_allclose(r["norms"], t["norms"], rtol=5e-2)
    np.testing.assert_allclose(r["bf_logits"], t["bf_logits"], atol=0.05)
    assert r["bf_loss"] == pytest.approx(t["bf_loss"], abs=0.02)
    np.testing.assert_allclose(r["bf_wte_grad"], t["bf_wte_grad"], atol=0.02 * np.abs(t["bf_wte_grad"]).max())
    assert r["bf_self_bytes"] == t["bf_self_bytes"]
    assert r["bf_norm"][1] == pytest.approx(t["bf_norm"][1], rel=2.0 ** -7)  # one bfloat16 ulp
    for a, b in zip(r["bf_clipped"], t["bf_clipped"]):
        np.testing.assert_allclose(a, b, atol=0.05 * np.abs(b).max() + 1e-30)  # a bfloat16 backward
    np.testing.assert_allclose(r["bf_after"], t["bf_after"], atol=2.0 ** -6)
    assert r["bf_dtypes"] == tuple(s.replace("torch", "lucid") for s in t["bf_dtypes"])


# ---------------------------------------------------------------------------------------------
# KellerJordan/Muon muon.py

def muon_page(torch, G_np, W, data, steps=12):
    out = {}

    def zeropower_via_newtonschulz5(G, steps: int):
        """
        Newton-Schulz iteration to compute the zeroth power / orthogonalization of G. We opt to use a
        quintic iteration whose coefficients are selected to maximize the slope at zero.
        """
        assert (
            G.ndim >= 2
        )  # batched Muon implementation by @scottjmaddox, and put into practice in the record by @YouJiacheng
        a, b, c = (3.4445, -4.7750, 2.0315)
        X = G.bfloat16()
        if G.size(-2) > G.size(-1):
            X = X.mT

        # Ensure spectral norm is at most 1
        X = X / (X.norm(dim=(-2, -1), keepdim=True) + 1e-7)
        # Perform the NS iterations
        for _ in range(steps):
            A = X @ X.mT
            B = (
                b * A + c * A @ A
            )  # quintic computation strategy adapted from suggestion by @jxbz, @leloykun, and @YouJiacheng
            X = a * X + B @ X

        if G.size(-2) > G.size(-1):
            X = X.mT
        return X

    def muon_update(grad, momentum, beta: float = 0.95, ns_steps: int = 5, nesterov: bool = True):
        momentum.lerp_(grad, 1 - beta)
        update = grad.lerp_(momentum, beta) if nesterov else momentum
        if update.ndim == 4:  # for the case of conv filters
            update = update.view(len(update), -1)
        update = zeropower_via_newtonschulz5(update, steps=ns_steps)
        update *= max(1, grad.size(-2) / grad.size(-1)) ** 0.5
        return update

    def adam_update(grad, buf1, buf2, step: int, betas: tuple[float, float], eps: float):
        buf1.lerp_(grad, 1 - betas[0])
        buf2.lerp_(grad.square(), 1 - betas[1])
        buf1c = buf1 / (1 - betas[0] ** step)
        buf2c = buf2 / (1 - betas[1] ** step)
        return buf1c / (buf2c.sqrt() + eps)

    class SingleDeviceMuonWithAuxAdam(torch.optim.Optimizer):
        """
        Non-distributed variant of MuonWithAuxAdam.
        """

        def __init__(self, param_groups: Iterable[dict[str, Any]]) -> None:
            for group in param_groups:
                assert "use_muon" in group
                if group["use_muon"]:
                    # defaults
                    group["lr"] = group.get("lr", 0.02)
                    group["momentum"] = group.get("momentum", 0.95)
                    group["weight_decay"] = group.get("weight_decay", 0)
                    assert set(group.keys()) == {"params", "lr", "momentum", "weight_decay", "use_muon"}
                else:
                    # defaults
                    group["lr"] = group.get("lr", 3e-4)
                    group["betas"] = group.get("betas", (0.9, 0.95))
                    group["eps"] = group.get("eps", 1e-10)
                    group["weight_decay"] = group.get("weight_decay", 0)
                    assert set(group.keys()) == {"params", "lr", "betas", "eps", "weight_decay", "use_muon"}
            super().__init__(param_groups, dict())

        @torch.no_grad()
        def step(self, closure: Optional[Callable[[], float]] = None) -> Optional[float]:
            loss: Optional[float] = None
            if closure is not None:
                with torch.enable_grad():
                    loss = closure()

            for group in self.param_groups:
                if group["use_muon"]:
                    for p in group["params"]:
                        if p.grad is None:
                            # continue
                            p.grad = torch.zeros_like(p)  # Force synchronization
                        state = self.state[p]
                        if len(state) == 0:
                            state["momentum_buffer"] = torch.zeros_like(p)
                        update = muon_update(p.grad, state["momentum_buffer"], beta=group["momentum"])
                        p.mul_(1 - group["lr"] * group["weight_decay"])
                        p.add_(update.reshape(p.shape), alpha=-group["lr"])
                else:
                    for p in group["params"]:
                        if p.grad is None:
                            # continue
                            p.grad = torch.zeros_like(p)  # Force synchronization
                        state = self.state[p]
                        if len(state) == 0:
                            state["exp_avg"] = torch.zeros_like(p)
                            state["exp_avg_sq"] = torch.zeros_like(p)
                            state["step"] = 0
                        state["step"] += 1
                        update = adam_update(p.grad, state["exp_avg"], state["exp_avg_sq"], state["step"],
                                             group["betas"], group["eps"])
                        p.mul_(1 - group["lr"] * group["weight_decay"])
                        p.add_(update, alpha=-group["lr"])

            return loss

    # the orthogonalization alone, on a tall and a batched input
    X = zeropower_via_newtonschulz5(torch.tensor(G_np), steps=5)
    out["ns_dtype"] = str(X.dtype)
    out["ns"] = X.float().numpy()
    Xb = zeropower_via_newtonschulz5(torch.tensor(np.stack([G_np.T, 2 * G_np.T])), steps=5)
    out["ns_batched"] = Xb.float().numpy()
    out["eps"] = torch.finfo(torch.bfloat16).eps

    # a tiny regression net: the hidden matrices by Muon, the rest by the auxiliary Adam
    nn = torch.nn
    model = nn.Sequential(nn.Linear(4, 16), nn.Tanh(), nn.Linear(16, 12), nn.Tanh(), nn.Linear(12, 1))
    with torch.no_grad():
        for p, w in zip(model.parameters(), W):
            p.copy_(torch.tensor(w))
    hidden_matrix_params = [model[0].weight, model[2].weight]
    adam_params = [model[0].bias, model[2].bias, model[4].weight, model[4].bias]
    adam_groups = [dict(params=adam_params, lr=0.02, betas=(0.8, 0.95), eps=1e-10, use_muon=False)]
    muon_group = dict(params=hidden_matrix_params, lr=0.05, momentum=0.95, use_muon=True)
    optimizer = SingleDeviceMuonWithAuxAdam([*adam_groups, muon_group])
    x, y = torch.tensor(data[0]), torch.tensor(data[1])
    out["losses"] = []
    for _ in range(steps):
        optimizer.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        optimizer.step()
        out["losses"].append(loss.item())
    out["param_dtypes"] = sorted({str(p.dtype) for p in model.parameters()})
    out["buf_dtype"] = str(optimizer.state[model[2].weight]["momentum_buffer"].dtype)
    out["params"] = [p.detach().numpy().copy() for p in model.parameters()]
    return out


def _muon_inputs():
    rng = np.random.default_rng(7)
    G = rng.standard_normal((6, 4)).astype(np.float32)
    W = [rng.standard_normal(s).astype(np.float32) * 0.5 for s in ((16, 4), (16,), (12, 16), (12,), (1, 12), (1,))]
    x = rng.standard_normal((32, 4)).astype(np.float32)
    y = (np.sin(x[:, :1] * 2) + x[:, 1:2] * x[:, 2:3]).astype(np.float32)
    return G, W, (x, y)


def numpy_newtonschulz5_bf16(G, steps=5):
    """The same iteration in NumPy, every op's result rounded to bfloat16 (float64 inside)."""
    r = lambda v: bf16_value(np.asarray(v, np.float32))
    a, b, c = (3.4445, -4.7750, 2.0315)
    X = r(G)
    tall = X.shape[-2] > X.shape[-1]
    if tall:
        X = np.swapaxes(X, -1, -2)
    X = r(X / r(r(np.sqrt((X * X).sum(axis=(-2, -1), keepdims=True))) + 1e-7))
    for _ in range(steps):
        A = r(X @ np.swapaxes(X, -1, -2))
        B = r(r(b * A) + r(r(c * A) @ A))  # ``c * A @ A`` is ``(c * A) @ A``
        X = r(r(a * X) + r(B @ X))
    return np.swapaxes(X, -1, -2) if tall else X


def test_muon_newtonschulz_in_bfloat16():
    _needs_cpu_default()
    G, W, data = _muon_inputs()
    r = muon_page(lucid, G, W, data)
    assert r["ns_dtype"] == "lucid.bfloat16" and r["eps"] == 2.0 ** -7
    ref = numpy_newtonschulz5_bf16(G)
    # every value a bfloat16 number; against the per-op-rounded emulation to a few bfloat16 ulps
    np.testing.assert_array_equal(bf16_value(r["ns"]), r["ns"])
    np.testing.assert_allclose(r["ns"], ref, atol=4 * 2.0 ** -8)
    # not U V^T but U S' V^T with S' roughly in (0.5, 1.5), as the docstring says
    s = np.linalg.svd(r["ns"].astype(np.float64), compute_uv=False)
    assert s.min() > 0.5 and s.max() < 1.5
    # the batched, wide input: each matrix its own norm, so 2 G gives what G gives
    np.testing.assert_allclose(r["ns_batched"][0], r["ns"].T, atol=4 * 2.0 ** -8)
    np.testing.assert_allclose(r["ns_batched"][1], r["ns_batched"][0], atol=4 * 2.0 ** -8)
    # training: float32 parameters and momentum, bfloat16 updates added in; the loss falls
    assert r["param_dtypes"] == ["lucid.float32"] and r["buf_dtype"] == "lucid.float32"
    ls = r["losses"]
    assert ls[-1] < 0.5 * ls[0] and np.isfinite(ls).all()


def test_muon_newtonschulz_in_bfloat16_torch_parity():
    torch = pytest.importorskip("torch")
    _needs_cpu_default()
    G, W, data = _muon_inputs()
    r, t = muon_page(lucid, G, W, data), muon_page(torch, G, W, data)
    # bfloat16 on both sides: the orthogonalization to two bfloat16 ulps at 1
    np.testing.assert_allclose(r["ns"], t["ns"], atol=2 * 2.0 ** -8)
    np.testing.assert_allclose(r["ns_batched"], t["ns_batched"], atol=2 * 2.0 ** -8)
    assert r["eps"] == t["eps"] and t["buf_dtype"] == "torch.float32"
    np.testing.assert_allclose(r["losses"], t["losses"], rtol=2e-2)
    for a, b in zip(r["params"], t["params"]):
        np.testing.assert_allclose(a, b, atol=2e-2)


# ---------------------------------------------------------------------------------------------
# What the GPT-2 page found: bfloat16 composites rounded after each primitive

def test_bfloat16_composites_round_once():
    """F.layer_norm (the GPT's ln_1/ln_2/ln_f), gelu, silu, rms_norm and group_norm on bfloat16 are
    PyTorch's float32 kernels rounded once: the float64 NumPy value rounded to bfloat16, exactly."""
    _needs_cpu_default()
    F = lucid.nn.functional
    rng = np.random.default_rng(3)
    x = bf16_value(rng.standard_normal((6, 16)).astype(np.float32) * 3)
    w, b = bf16_value(1 + rng.standard_normal(16).astype(np.float32) * 0.3), bf16_value(rng.standard_normal(16) * 0.3)
    t = lambda a: lucid.tensor(a.astype(np.float32)).bfloat16()
    got = lambda y: (str(y.dtype), y.float().cpu().numpy().astype(np.float64))
    mu, var = x.mean(-1, keepdims=True), x.var(-1, keepdims=True)
    ln = (x - mu) / np.sqrt(var + 1e-5)
    assert F.layer_norm(t(x), (16,), t(w), t(b)).dtype == lucid.bfloat16
    np.testing.assert_array_equal(got(F.layer_norm(t(x), (16,), t(w), t(b)))[1], bf16_value(ln * w + b))
    # a bfloat16 activation through float32 parameters stays bfloat16, as PyTorch's mixed-dtype kernel
    y = F.layer_norm(t(x), (16,), lucid.tensor(w.astype(np.float32)), lucid.tensor(b.astype(np.float32)))
    assert y.dtype == lucid.bfloat16
    np.testing.assert_array_equal(got(y)[1], bf16_value(ln * w + b))
    erf = np.vectorize(math.erf)
    # gelu's far tail (|gelu| < 1e-3) is float32 erf's precision, not bfloat16's: 1 ulp there
    gl, ref = got(F.gelu(t(x)))[1], bf16_value(0.5 * x * (1 + erf(x / math.sqrt(2))))
    np.testing.assert_array_equal(gl[np.abs(ref) > 1e-3], ref[np.abs(ref) > 1e-3])
    np.testing.assert_allclose(gl, ref, rtol=0, atol=1e-5)  # float32 cancels 1 + erf(x) there
    np.testing.assert_array_equal(got(F.silu(t(x)))[1], bf16_value(x / (1 + np.exp(-x))))
    rms = x / np.sqrt((x * x).mean(-1, keepdims=True) + np.finfo(np.float32).eps)
    np.testing.assert_array_equal(got(F.rms_norm(t(x), (16,)))[1], bf16_value(rms))
    g = x.reshape(6, 2, 8)
    gn = ((g - g.mean(-1, keepdims=True)) / np.sqrt(g.var(-1, keepdims=True) + 1e-5)).reshape(6, 16)
    np.testing.assert_array_equal(got(F.group_norm(t(x).view(6, 16, 1), 2))[1].reshape(6, 16), bf16_value(gn))
    # var and std accumulate in float32 and round once, as PyTorch's (they rounded the mean before)
    np.testing.assert_array_equal(got(t(x).var(1))[1], bf16_value(x.var(1, ddof=1)))
    np.testing.assert_array_equal(got(t(x).std(1))[1], bf16_value(x.std(1, ddof=1)))
    # the backward runs in float32 from the bfloat16 cotangent and returns bfloat16 gradients
    xt = t(x).requires_grad_()
    F.layer_norm(xt, (16,)).sum().backward()
    assert xt.grad.dtype == lucid.bfloat16 and np.abs(xt.grad.float().numpy()).max() < 2.0 ** -6  # d/dx sum(ln) = 0


def test_bfloat16_composites_round_once_torch_parity():
    torch = pytest.importorskip("torch")
    _needs_cpu_default()
    rng = np.random.default_rng(4)
    x = rng.standard_normal((5, 3, 8)).astype(np.float32) * 2
    w = rng.standard_normal(8).astype(np.float32)
    for name, f in (("layer_norm", lambda F, v, W: F.layer_norm(v, (8,), W, W)),
                    ("layer_norm_f32_params", lambda F, v, W: F.layer_norm(v, (8,), W.float(), W.float())),
                    ("gelu", lambda F, v, W: F.gelu(v)), ("gelu_tanh", lambda F, v, W: F.gelu(v, approximate="tanh")),
                    ("silu", lambda F, v, W: F.silu(v)), ("rms_norm", lambda F, v, W: F.rms_norm(v, (8,), W)),
                    ("group_norm", lambda F, v, W: F.group_norm(v, 1)), ("softmax", lambda F, v, W: F.softmax(v, -1)),
                    ("mish", lambda F, v, W: F.mish(v)), ("hardswish", lambda F, v, W: F.hardswish(v)),
                    ("selu", lambda F, v, W: F.selu(v)), ("glu", lambda F, v, W: F.glu(v)),
                    ("sdpa", lambda F, v, W: F.scaled_dot_product_attention(v, v * 0.5, v, is_causal=True)),
                    ("var", lambda F, v, W: v.var(-1)), ("std", lambda F, v, W: v.std(1))):
        a = f(lucid.nn.functional, lucid.tensor(x).bfloat16(), lucid.tensor(w).bfloat16())
        b = f(torch.nn.functional, torch.tensor(x).bfloat16(), torch.tensor(w).bfloat16())
        assert str(a.dtype).split(".")[1] == str(b.dtype).split(".")[1], name
        a, b = a.float().numpy(), b.float().numpy()
        # bit for bit but for float32-level differences in gelu's far tail (before: 37-71% differed)
        assert (a != b).mean() <= 0.02, name
        np.testing.assert_allclose(a, b, rtol=2.0 ** -7, atol=1e-30, err_msg=name)


# ---------------------------------------------------------------------------------------------
# karpathy/nano-llama31 llama31.py, built as Llama.build does: under torch.set_default_tensor_type
# of the bfloat16 tensor type (the CPU's ``torch.BFloat16Tensor`` for the script's cuda one)

def llama31_page(torch, W, tokens):
    nn = torch.nn
    F = torch.nn.functional
    from typing import Tuple

    @dataclass
    class ModelArgs:
        dim: int = 4096
        n_layers: int = 32
        n_heads: int = 32
        n_kv_heads: Optional[int] = None
        vocab_size: int = -1
        multiple_of: int = 256  # make SwiGLU hidden layer size multiple of large power of 2
        ffn_dim_multiplier: Optional[float] = None
        norm_eps: float = 1e-5
        rope_theta: float = 500000
        use_scaled_rope: bool = False
        max_batch_size: int = 32
        max_seq_len: int = 2048

        def __init__(self, **kwargs):
            for k, v in kwargs.items():
                if hasattr(self, k):
                    setattr(self, k, v)
            if self.n_kv_heads is None:
                self.n_kv_heads = self.n_heads
            assert self.n_kv_heads <= self.n_heads
            assert self.n_heads % self.n_kv_heads == 0
            assert self.dim % self.n_heads == 0

    class RMSNorm(torch.nn.Module):
        def __init__(self, dim: int, eps: float = 1e-6):
            super().__init__()
            self.eps = eps
            self.weight = nn.Parameter(torch.ones(dim))

        def _norm(self, x):
            return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)

        def forward(self, x):
            output = self._norm(x.float()).type_as(x)
            return output * self.weight

    def apply_scaling(freqs):
        # Values obtained from grid search
        scale_factor = 8
        low_freq_factor = 1
        high_freq_factor = 4
        old_context_len = 8192  # original llama3 length

        low_freq_wavelen = old_context_len / low_freq_factor
        high_freq_wavelen = old_context_len / high_freq_factor
        new_freqs = []
        for freq in freqs:
            wavelen = 2 * math.pi / freq
            if wavelen < high_freq_wavelen:
                new_freqs.append(freq)
            elif wavelen > low_freq_wavelen:
                new_freqs.append(freq / scale_factor)
            else:
                assert low_freq_wavelen != high_freq_wavelen
                smooth = (old_context_len / wavelen - low_freq_factor) / (
                    high_freq_factor - low_freq_factor
                )
                new_freqs.append((1 - smooth) * freq / scale_factor + smooth * freq)
        return torch.tensor(new_freqs, dtype=freqs.dtype, device=freqs.device)

    def precompute_freqs_cis(dim: int, end: int, theta: float = 10000.0, use_scaled: bool = False):
        freqs = 1.0 / (theta ** (torch.arange(0, dim, 2)[: (dim // 2)].float() / dim))
        t = torch.arange(end, device=freqs.device, dtype=torch.float32)
        if use_scaled:
            freqs = apply_scaling(freqs)
        freqs = torch.outer(t, freqs)
        freqs_cis = torch.polar(torch.ones_like(freqs), freqs)  # complex64
        return freqs_cis

    def reshape_for_broadcast(freqs_cis, x):
        ndim = x.ndim
        assert 0 <= 1 < ndim
        assert freqs_cis.shape == (x.shape[1], x.shape[-1])
        shape = [d if i == 1 or i == ndim - 1 else 1 for i, d in enumerate(x.shape)]
        return freqs_cis.view(*shape)

    def apply_rotary_emb(xq, xk, freqs_cis) -> Tuple[Any, Any]:
        xq_ = torch.view_as_complex(xq.float().reshape(*xq.shape[:-1], -1, 2))
        xk_ = torch.view_as_complex(xk.float().reshape(*xk.shape[:-1], -1, 2))
        freqs_cis = reshape_for_broadcast(freqs_cis, xq_)
        xq_out = torch.view_as_real(xq_ * freqs_cis).flatten(3)
        xk_out = torch.view_as_real(xk_ * freqs_cis).flatten(3)
        return xq_out.type_as(xq), xk_out.type_as(xk)

    def repeat_kv(x, n_rep: int):
        """torch.repeat_interleave(x, dim=2, repeats=n_rep)"""
        bs, slen, n_kv_heads, head_dim = x.shape
        if n_rep == 1:
            return x
        return (
            x[:, :, :, None, :]
            .expand(bs, slen, n_kv_heads, n_rep, head_dim)
            .reshape(bs, slen, n_kv_heads * n_rep, head_dim)
        )

    class Attention(nn.Module):
        def __init__(self, args: ModelArgs):
            super().__init__()
            self.n_kv_heads = args.n_heads if args.n_kv_heads is None else args.n_kv_heads
            model_parallel_size = 1 # AK: model parallel size is 1 for 1 GPU
            self.n_local_heads = args.n_heads // model_parallel_size
            self.n_local_kv_heads = self.n_kv_heads // model_parallel_size
            self.n_rep = self.n_local_heads // self.n_local_kv_heads
            self.head_dim = args.dim // args.n_heads

            self.wq = nn.Linear(args.dim, args.n_heads * self.head_dim, bias=False )
            self.wk = nn.Linear(args.dim, self.n_kv_heads * self.head_dim, bias=False)
            self.wv = nn.Linear(args.dim, self.n_kv_heads * self.head_dim, bias=False)
            self.wo = nn.Linear(args.n_heads * self.head_dim, args.dim, bias=False)

            self.cache_k = torch.zeros(
                (args.max_batch_size, args.max_seq_len, self.n_local_kv_heads, self.head_dim)
            )  # .cuda() on the CPU page
            self.cache_v = torch.zeros(
                (args.max_batch_size, args.max_seq_len, self.n_local_kv_heads, self.head_dim)
            )

        def forward(self, x, start_pos: int, freqs_cis, mask):
            bsz, seqlen, _ = x.shape
            xq, xk, xv = self.wq(x), self.wk(x), self.wv(x)

            xq = xq.view(bsz, seqlen, self.n_local_heads, self.head_dim)
            xk = xk.view(bsz, seqlen, self.n_local_kv_heads, self.head_dim)
            xv = xv.view(bsz, seqlen, self.n_local_kv_heads, self.head_dim)

            xq, xk = apply_rotary_emb(xq, xk, freqs_cis=freqs_cis)

            self.cache_k = self.cache_k.to(xq)
            self.cache_v = self.cache_v.to(xq)

            self.cache_k[:bsz, start_pos : start_pos + seqlen] = xk
            self.cache_v[:bsz, start_pos : start_pos + seqlen] = xv

            keys = self.cache_k[:bsz, : start_pos + seqlen]
            values = self.cache_v[:bsz, : start_pos + seqlen]

            # repeat k/v heads if n_kv_heads < n_heads
            keys = repeat_kv(keys, self.n_rep)  # (bs, cache_len + seqlen, n_local_heads, head_dim)
            values = repeat_kv(values, self.n_rep)  # (bs, cache_len + seqlen, n_local_heads, head_dim)

            xq = xq.transpose(1, 2)  # (bs, n_local_heads, seqlen, head_dim)
            keys = keys.transpose(1, 2)  # (bs, n_local_heads, cache_len + seqlen, head_dim)
            values = values.transpose(
                1, 2
            )  # (bs, n_local_heads, cache_len + seqlen, head_dim)
            scores = torch.matmul(xq, keys.transpose(2, 3)) / math.sqrt(self.head_dim)
            if mask is not None:
                scores = scores + mask  # (bs, n_local_heads, seqlen, cache_len + seqlen)
            scores = F.softmax(scores.float(), dim=-1).type_as(xq)
            output = torch.matmul(scores, values)  # (bs, n_local_heads, seqlen, head_dim)
            output = output.transpose(1, 2).contiguous().view(bsz, seqlen, -1)
            return self.wo(output)

    class FeedForward(nn.Module):
        def __init__(self, dim: int, hidden_dim: int, multiple_of: int, ffn_dim_multiplier: Optional[float]):
            super().__init__()
            hidden_dim = int(2 * hidden_dim / 3)
            # custom dim factor multiplier
            if ffn_dim_multiplier is not None:
                hidden_dim = int(ffn_dim_multiplier * hidden_dim)
            hidden_dim = multiple_of * ((hidden_dim + multiple_of - 1) // multiple_of)
            self.w1 = nn.Linear(dim, hidden_dim, bias=False)
            self.w2 = nn.Linear(hidden_dim, dim, bias=False)
            self.w3 = nn.Linear(dim, hidden_dim, bias=False)

        def forward(self, x):
            return self.w2(F.silu(self.w1(x)) * self.w3(x))

    class TransformerBlock(nn.Module):
        def __init__(self, layer_id: int, args: ModelArgs):
            super().__init__()
            self.n_heads = args.n_heads
            self.dim = args.dim
            self.head_dim = args.dim // args.n_heads
            self.attention = Attention(args)
            self.feed_forward = FeedForward(
                dim=args.dim,
                hidden_dim=4 * args.dim,
                multiple_of=args.multiple_of,
                ffn_dim_multiplier=args.ffn_dim_multiplier,
            )
            self.layer_id = layer_id
            self.attention_norm = RMSNorm(args.dim, eps=args.norm_eps)
            self.ffn_norm = RMSNorm(args.dim, eps=args.norm_eps)

        def forward(self, x, start_pos: int, freqs_cis, mask):
            h = x + self.attention(self.attention_norm(x), start_pos, freqs_cis, mask)
            out = h + self.feed_forward(self.ffn_norm(h))
            return out

    class Transformer(nn.Module):
        def __init__(self, params: ModelArgs):
            super().__init__()
            self.params = params
            self.vocab_size = params.vocab_size
            self.n_layers = params.n_layers

            self.tok_embeddings = nn.Embedding(params.vocab_size, params.dim)

            self.layers = torch.nn.ModuleList()
            for layer_id in range(params.n_layers):
                self.layers.append(TransformerBlock(layer_id, params))

            self.norm = RMSNorm(params.dim, eps=params.norm_eps)
            self.output = nn.Linear(params.dim, params.vocab_size, bias=False)

            self.freqs_cis = precompute_freqs_cis(
                params.dim // params.n_heads,
                params.max_seq_len * 2,
                params.rope_theta,
                params.use_scaled_rope,
            )

        @torch.inference_mode()
        def forward(self, tokens, start_pos: int):
            _bsz, seqlen = tokens.shape
            h = self.tok_embeddings(tokens)
            self.freqs_cis = self.freqs_cis.to(h.device)
            freqs_cis = self.freqs_cis[start_pos : start_pos + seqlen]

            mask = None
            if seqlen > 1:
                mask = torch.full((seqlen, seqlen), float("-inf"), device=tokens.device)
                mask = torch.triu(mask, diagonal=1)
                mask = torch.hstack(
                    [torch.zeros((seqlen, start_pos), device=tokens.device), mask]
                ).type_as(h)

            for layer in self.layers:
                h = layer(h, start_pos, freqs_cis, mask)
            h = self.norm(h)
            output = self.output(h).float()
            return output

    out = {}
    model_args = ModelArgs(dim=16, n_layers=2, n_heads=4, n_kv_heads=2, vocab_size=32, multiple_of=8,
                           use_scaled_rope=True, max_batch_size=2, max_seq_len=8)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # set_default_tensor_type is deprecated (in both)
        torch.set_default_tensor_type(torch.BFloat16Tensor)
        try:
            model = Transformer(model_args)
            model.load_state_dict({k: torch.tensor(v) for k, v in W.items()}, strict=False)
            out["default_type"] = torch.tensor([], dtype=torch.get_default_dtype(), device="cpu").type()
        finally:
            torch.set_default_tensor_type(torch.tensor([], dtype=torch.float32, device="cpu").type())
    out["param_dtypes"] = sorted({str(p.dtype).split(".")[1] for p in model.parameters()})
    out["freqs_cis"] = (str(model.freqs_cis.dtype).split(".")[1], model.freqs_cis[:4].numpy())
    toks = torch.tensor(tokens, dtype=torch.long)
    full = model.forward(toks, 0)
    out["full"] = full.numpy()
    out["full_dtype"] = str(full.dtype).split(".")[1]
    out["cache_dtype"] = str(model.layers[0].attention.cache_k.dtype).split(".")[1]
    # the key-value cache: the prompt, then the last token alone at start_pos
    model.forward(toks[:, :4], 0)
    out["step"] = model.forward(toks[:, 4:5], 4).numpy()
    x = torch.tensor(W["tok_embeddings.weight"][tokens]).bfloat16()
    out["rms"] = model.layers[0].attention_norm(x).detach().float().numpy()
    return out


def _llama_weights():
    rng = np.random.default_rng(11)
    w = lambda *s: (rng.standard_normal(s) * 0.3).astype(np.float32)
    W = {"tok_embeddings.weight": w(32, 16), "norm.weight": 1 + w(16), "output.weight": w(32, 16)}
    for i in range(2):
        p = f"layers.{i}."
        W.update({p + "attention.wq.weight": w(16, 16), p + "attention.wk.weight": w(8, 16),
                  p + "attention.wv.weight": w(8, 16), p + "attention.wo.weight": w(16, 16),
                  p + "feed_forward.w1.weight": w(48, 16), p + "feed_forward.w2.weight": w(16, 48),
                  p + "feed_forward.w3.weight": w(48, 16), p + "attention_norm.weight": 1 + w(16),
                  p + "ffn_norm.weight": 1 + w(16)})
    return W, np.array([[1, 5, 9, 3, 7], [2, 2, 8, 30, 4]])


def test_nano_llama31_built_in_bfloat16():
    _needs_cpu_default()
    W, tokens = _llama_weights()
    r = llama31_page(lucid, W, tokens)
    assert r["default_type"] == "lucid.BFloat16Tensor" and lucid.get_default_dtype() == lucid.float32
    assert r["param_dtypes"] == ["bfloat16"] and r["cache_dtype"] == "bfloat16" and r["full_dtype"] == "float32"
    # freqs_cis stays complex64 (arange(...).float()); head_dim 4 gives two frequencies, both
    # in apply_scaling's smoothing band (wavelength between 2048 and 8192)
    freqs = 1.0 / 500000 ** (np.arange(0, 4, 2) / 4)
    wl = 2 * np.pi / freqs
    smooth = (8192 / wl - 1) / 3
    assert ((wl >= 2048) & (wl <= 8192)).sum() == 1 and wl[0] < 2048  # one kept, one smoothed
    scaled = np.where(wl < 2048, freqs, (1 - smooth) * freqs / 8 + smooth * freqs)
    assert r["freqs_cis"][0] == "complex64"
    np.testing.assert_allclose(r["freqs_cis"][1], np.exp(1j * np.outer(np.arange(4), scaled)), atol=1e-6)
    # RMSNorm: x.float() normalised, rounded back to bfloat16 (type_as), times the bfloat16 weight
    x = bf16_value(W["tok_embeddings.weight"][tokens])
    n = bf16_value(x / np.sqrt((x * x).mean(-1, keepdims=True) + 1e-5))
    np.testing.assert_array_equal(r["rms"], bf16_value(n * bf16_value(W["layers.0.attention_norm.weight"])))
    # the cached step gives the full forward's last logits, to bfloat16 precision
    np.testing.assert_allclose(r["step"][:, 0], r["full"][:, -1], atol=0.05 * np.abs(r["full"]).max())
    assert np.isfinite(r["full"]).all() and np.abs(r["full"]).max() > 0.1


def test_nano_llama31_built_in_bfloat16_torch_parity():
    torch = pytest.importorskip("torch")
    _needs_cpu_default()
    W, tokens = _llama_weights()
    r, t = llama31_page(lucid, W, tokens), llama31_page(torch, W, tokens)
    assert t["default_type"] == "torch.BFloat16Tensor" and t["param_dtypes"] == r["param_dtypes"]
    np.testing.assert_allclose(r["freqs_cis"][1], t["freqs_cis"][1], atol=1e-6)
    np.testing.assert_array_equal(r["rms"], t["rms"])
    scale = np.abs(t["full"]).max()  # bfloat16 through two layers: a few ulps of the logits' scale
    np.testing.assert_allclose(r["full"], t["full"], atol=0.03 * scale)
    np.testing.assert_allclose(r["step"], t["step"], atol=0.03 * scale)
