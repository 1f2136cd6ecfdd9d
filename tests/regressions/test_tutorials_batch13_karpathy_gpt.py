"""Andrej Karpathy's GPT code run on Lucid (``import lucid as torch``), thirteenth batch:

- ``karpathy/nanoGPT`` ``model.py``: ``LayerNorm`` with an optional bias, ``CausalSelfAttention``
  through ``F.scaled_dot_product_attention(..., is_causal=True)`` and its manual masked fallback
  (``register_buffer("bias", torch.tril(...))``, ``masked_fill(... == 0, float('-inf'))``), ``GPT``
  with weight tying, the scaled ``c_proj`` init, ``get_num_params``, ``crop_block_size``,
  ``configure_optimizers`` (decay by ``p.dim() >= 2``, the
  ``inspect.signature(torch.optim.AdamW).parameters`` fused check), ``estimate_mfu`` and
  ``generate`` (temperature, top-k by ``logits[logits < v[:, [-1]]] = -float('Inf')``,
  ``torch.multinomial``); ``train.py``'s loop: ``get_batch`` from an ``np.memmap`` of uint16 tokens
  with ``torch.from_numpy(...astype(np.int64))``, ``nullcontext`` on the CPU,
  ``torch.cuda.amp.GradScaler(enabled=False)``, gradient accumulation, ``clip_grad_norm_``, cosine
  learning rate with warmup, ``estimate_loss`` under ``@torch.no_grad()``, the checkpoint dict
  saved and resumed (``_orig_mod.`` prefix, ``optimizer.load_state_dict``).
- ``karpathy/build-nanogpt`` ``train_gpt2.py``: ``NANOGPT_SCALE_INIT``, ``nn.GELU(approximate='tanh')``,
  ``DataLoaderLite``, ``torch.set_float32_matmul_precision('high')``, AdamW with ``fused=False``,
  gradient accumulation under ``torch.autocast``, the step report, and top-k 50 sampling through
  ``torch.topk``/``torch.multinomial``/``torch.gather``.
- ``karpathy/ng-video-lecture``: ``bigram.py`` (an ``Embedding`` as the logit table) and ``gpt.py``
  (``Head``/``MultiHeadAttention``/``FeedFoward``/``Block``, ``estimate_loss``, ``generate``).
- ``karpathy/minGPT``: ``mingpt/model.py`` (``NewGELU``, ``c_attn`` attention, the ``mlpf`` lambda
  over an ``nn.ModuleDict``, ``configure_optimizers`` splitting parameters by module type,
  ``generate`` with ``do_sample``), ``mingpt/utils.py``'s ``CfgNode`` and ``mingpt/trainer.py`` (an
  infinite ``RandomSampler``, ``on_batch_end`` callbacks) on the ``SortDataset`` of the demo notebook.
- ``karpathy/nano-llama31`` ``llama31.py``: ``RMSNorm``, RoPE both as the real ``freqs_cis_real``
  stack of ``torch.polar`` and as Meta's complex ``view_as_complex``/``view_as_real`` form,
  ``apply_scaling``, GQA through ``repeat_kv``, the ``KVCache`` module, SwiGLU ``FeedForward``,
  ``forward_inference``/``forward_loss``, ``sample_top_p`` with a ``torch.Generator`` and the
  ``Llama.generate`` decode loop.

Sizes are tiny (2 layers, 16-32 channels, blocks of 8-16, vocabularies of 3-64) and data synthetic.
Each page is a function of the module it is handed as ``torch``; the checks run without PyTorch
(NumPy forwards from the same weights, closed forms, float64 finite differences, cached decoding
against the full forward, losses falling by stated margins) and the parity tests run the same text
on PyTorch with identical weights.

Adapted where the original does not run on a CPU or where Lucid differs on purpose: ``device`` is
the default device (so the strict stand-in runs the pages) and ``torch.cuda.synchronize()`` is left out;
tiktoken's encoding is replaced by synthetic token lists; nanoGPT's slow-attention branch is
chosen by a flag instead of by a PyTorch older than 2.0; build-nanogpt's sampling unpacks
``logits, _ = model(x)`` (its ``model(x)`` returns a pair since the loss was added); the parity
tests draw ``get_batch``'s offsets with NumPy, so the two libraries' random streams do not enter;
``estimate_mfu``/``tok/sec`` divide by ``max(dt, 1e-9)`` (a coarse clock can give 0); the sort
task's train/test split hashes ``pickle.dumps`` bytes, so its losses change with PYTHONHASHSEED
and the test states a margin that held over 35 seeds. The final build-nanogpt ``train_gpt2.py``
pieces (validation loss, ``hellaswag.py``'s ``render_example``/``get_most_likely_row`` on
synthetic items, the ``{'model', 'config', 'step', 'val_loss'}`` checkpoint, a seeded
``torch.Generator`` for sampling) run on the trained model; its ``torch.load`` needs
``add_safe_globals([GPTConfig])`` on PyTorch 2.13 as on Lucid.

Fixed on the way: ``lucid.save`` refused a checkpoint holding a dataclass config (build-nanogpt's
``'config': raw_model.config``; ``TypeError: lucid.save: can't save an object of type
GPTConfig``), even with the class allowlisted: dataclass, ``argparse.Namespace`` and
``SimpleNamespace`` instances are now saved as their class name and attributes, and loading
rebuilds them only from a class passed to ``add_safe_globals`` (NOTE [Config objects]); and
``cross_entropy``/``nll_loss`` with ``reduction='none'`` gave ``-0.`` (not PyTorch's ``0.``) at
``ignore_index`` entries when the classes are on dim 1 or a class weight is given (reference.py's
prompt log-probabilities).
"""
import inspect
import io
import math
import os
import pickle
import time
import warnings
from collections import defaultdict
from contextlib import nullcontext, redirect_stdout
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Optional

import numpy as np
import pytest

import lucid
import lucid.nn  # noqa: F401
import lucid.optim  # noqa: F401
import lucid.utils.data  # noqa: F401


def _dev(torch):
    return str(torch.get_default_device()) if torch is lucid else "cpu"


def _np(t):
    return t.detach().cpu().numpy()


# ------------------------------------------------------------------ NumPy references
_erf = np.vectorize(math.erf)


def _np_ln(x, w, b, eps=1e-5):
    mu = x.mean(-1, keepdims=True)
    y = (x - mu) / np.sqrt(((x - mu) ** 2).mean(-1, keepdims=True) + eps) * w
    return y if b is None else y + b


def _np_gelu(x, approx="none"):
    if approx == "tanh":
        return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))
    return 0.5 * x * (1.0 + _erf(x / math.sqrt(2.0)))


def _np_softmax(a):
    e = np.exp(a - a.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def _np_gpt(sd, idx, n_head, gelu="none", wpe=True):
    """One GPT-2 forward (nanoGPT, build-nanogpt and minGPT share the state-dict names)."""
    B, T = idx.shape
    x = sd["transformer.wte.weight"][idx] + (sd["transformer.wpe.weight"][:T] if wpe else 0)
    C = x.shape[-1]
    hs = C // n_head
    L = len({k.split(".")[2] for k in sd if k.startswith("transformer.h.")})
    causal = np.tril(np.ones((T, T), bool))
    for layer in range(L):
        p = f"transformer.h.{layer}."
        lin = lambda h, name: h @ sd[p + name + ".weight"].T + sd.get(p + name + ".bias", 0.0)  # noqa: E731
        h = _np_ln(x, sd[p + "ln_1.weight"], sd.get(p + "ln_1.bias"))
        q, k, v = np.split(lin(h, "attn.c_attn"), 3, axis=-1)
        q, k, v = (a.reshape(B, T, n_head, hs).transpose(0, 2, 1, 3) for a in (q, k, v))
        att = _np_softmax(np.where(causal, q @ k.transpose(0, 1, 3, 2) / math.sqrt(hs), -np.inf))
        x = x + lin((att @ v).transpose(0, 2, 1, 3).reshape(B, T, C), "attn.c_proj")
        h = _np_ln(x, sd[p + "ln_2.weight"], sd.get(p + "ln_2.bias"))
        x = x + lin(_np_gelu(lin(h, "mlp.c_fc"), gelu), "mlp.c_proj")
    x = _np_ln(x, sd["transformer.ln_f.weight"], sd.get("transformer.ln_f.bias"))
    return x @ sd["lm_head.weight"].T


def _np_ce(logits, targets, ignore_index=-100):
    logits = logits.reshape(-1, logits.shape[-1])
    targets = targets.reshape(-1)
    keep = targets != ignore_index
    lse = np.log(np.exp(logits - logits.max(-1, keepdims=True)).sum(-1)) + logits.max(-1)
    return float((lse - logits[np.arange(len(targets)), np.where(keep, targets, 0)])[keep].mean())


def _weights(sd, seed, std=0.3):
    """NumPy weights for every entry of a state dict (mask buffers kept), tied entries equal."""
    rng = np.random.default_rng(seed)
    out = {}
    for k, v in sd.items():
        a = _np(v)
        if k.endswith("attn.bias") and a.ndim == 4:  # the causal mask buffer
            out[k] = a
        elif a.ndim == 1 and ("ln" in k or "norm" in k) and k.endswith("weight"):
            out[k] = 1.0 + 0.1 * rng.standard_normal(a.shape)
        else:
            out[k] = std * rng.standard_normal(a.shape)
    if "lm_head.weight" in out and "transformer.wte.weight" in out:
        out["lm_head.weight"] = out["transformer.wte.weight"]
    return out


def _load(torch, model, W, dtype=None):
    dtype = dtype or next(model.parameters()).dtype
    model.load_state_dict({k: torch.tensor(v, dtype=dtype if v.dtype.kind == "f" else None)
                           for k, v in W.items()})


# ------------------------------------------------------------------ nanoGPT model.py
def nanogpt_model(torch, slow_attention=False):
    nn = torch.nn
    F = torch.nn.functional

    class LayerNorm(nn.Module):
        """ LayerNorm but with an optional bias. PyTorch doesn't support simply bias=False """

        def __init__(self, ndim, bias):
            super().__init__()
            self.weight = nn.Parameter(torch.ones(ndim))
            self.bias = nn.Parameter(torch.zeros(ndim)) if bias else None

        def forward(self, input):
            return F.layer_norm(input, self.weight.shape, self.weight, self.bias, 1e-5)

    class CausalSelfAttention(nn.Module):

        def __init__(self, config):
            super().__init__()
            assert config.n_embd % config.n_head == 0
            self.c_attn = nn.Linear(config.n_embd, 3 * config.n_embd, bias=config.bias)
            self.c_proj = nn.Linear(config.n_embd, config.n_embd, bias=config.bias)
            self.attn_dropout = nn.Dropout(config.dropout)
            self.resid_dropout = nn.Dropout(config.dropout)
            self.n_head = config.n_head
            self.n_embd = config.n_embd
            self.dropout = config.dropout
            # flash attention make GPU go brrrrr but support is only in PyTorch >= 2.0
            self.flash = hasattr(torch.nn.functional, 'scaled_dot_product_attention') and not slow_attention
            if not self.flash:
                print("WARNING: using slow attention. Flash Attention requires PyTorch >= 2.0")
                # causal mask to ensure that attention is only applied to the left in the input sequence
                self.register_buffer("bias", torch.tril(torch.ones(config.block_size, config.block_size))
                                            .view(1, 1, config.block_size, config.block_size))

        def forward(self, x):
            B, T, C = x.size()
            q, k, v = self.c_attn(x).split(self.n_embd, dim=2)
            k = k.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)  # (B, nh, T, hs)
            q = q.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)  # (B, nh, T, hs)
            v = v.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)  # (B, nh, T, hs)
            if self.flash:
                y = torch.nn.functional.scaled_dot_product_attention(
                    q, k, v, attn_mask=None, dropout_p=self.dropout if self.training else 0, is_causal=True)
            else:
                att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
                att = att.masked_fill(self.bias[:, :, :T, :T] == 0, float('-inf'))
                att = F.softmax(att, dim=-1)
                att = self.attn_dropout(att)
                y = att @ v  # (B, nh, T, T) x (B, nh, T, hs) -> (B, nh, T, hs)
            y = y.transpose(1, 2).contiguous().view(B, T, C)  # re-assemble all head outputs side by side
            y = self.resid_dropout(self.c_proj(y))
            return y

    class MLP(nn.Module):

        def __init__(self, config):
            super().__init__()
            self.c_fc = nn.Linear(config.n_embd, 4 * config.n_embd, bias=config.bias)
            self.gelu = nn.GELU()
            self.c_proj = nn.Linear(4 * config.n_embd, config.n_embd, bias=config.bias)
            self.dropout = nn.Dropout(config.dropout)

        def forward(self, x):
            x = self.c_fc(x)
            x = self.gelu(x)
            x = self.c_proj(x)
            x = self.dropout(x)
            return x

    class Block(nn.Module):

        def __init__(self, config):
            super().__init__()
            self.ln_1 = LayerNorm(config.n_embd, bias=config.bias)
            self.attn = CausalSelfAttention(config)
            self.ln_2 = LayerNorm(config.n_embd, bias=config.bias)
            self.mlp = MLP(config)

        def forward(self, x):
            x = x + self.attn(self.ln_1(x))
            x = x + self.mlp(self.ln_2(x))
            return x

    @dataclass
    class GPTConfig:
        block_size: int = 1024
        vocab_size: int = 50304
        n_layer: int = 12
        n_head: int = 12
        n_embd: int = 768
        dropout: float = 0.0
        bias: bool = True

    class GPT(nn.Module):

        def __init__(self, config):
            super().__init__()
            assert config.vocab_size is not None
            assert config.block_size is not None
            self.config = config

            self.transformer = nn.ModuleDict(dict(
                wte=nn.Embedding(config.vocab_size, config.n_embd),
                wpe=nn.Embedding(config.block_size, config.n_embd),
                drop=nn.Dropout(config.dropout),
                h=nn.ModuleList([Block(config) for _ in range(config.n_layer)]),
                ln_f=LayerNorm(config.n_embd, bias=config.bias),
            ))
            self.lm_head = nn.Linear(config.n_embd, config.vocab_size, bias=False)
            self.transformer.wte.weight = self.lm_head.weight  # https://paperswithcode.com/method/weight-tying

            self.apply(self._init_weights)
            for pn, p in self.named_parameters():
                if pn.endswith('c_proj.weight'):
                    torch.nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * config.n_layer))

            print("number of parameters: %.2fM" % (self.get_num_params() / 1e6,))

        def get_num_params(self, non_embedding=True):
            n_params = sum(p.numel() for p in self.parameters())
            if non_embedding:
                n_params -= self.transformer.wpe.weight.numel()
            return n_params

        def _init_weights(self, module):
            if isinstance(module, nn.Linear):
                torch.nn.init.normal_(module.weight, mean=0.0, std=0.02)
                if module.bias is not None:
                    torch.nn.init.zeros_(module.bias)
            elif isinstance(module, nn.Embedding):
                torch.nn.init.normal_(module.weight, mean=0.0, std=0.02)

        def forward(self, idx, targets=None):
            device = idx.device
            b, t = idx.size()
            assert t <= self.config.block_size, f"Cannot forward sequence of length {t}, block size is only {self.config.block_size}"
            pos = torch.arange(0, t, dtype=torch.long, device=device)  # shape (t)

            tok_emb = self.transformer.wte(idx)  # token embeddings of shape (b, t, n_embd)
            pos_emb = self.transformer.wpe(pos)  # position embeddings of shape (t, n_embd)
            x = self.transformer.drop(tok_emb + pos_emb)
            for block in self.transformer.h:
                x = block(x)
            x = self.transformer.ln_f(x)

            if targets is not None:
                logits = self.lm_head(x)
                loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1), ignore_index=-1)
            else:
                logits = self.lm_head(x[:, [-1], :])  # note: using list [-1] to preserve the time dim
                loss = None

            return logits, loss

        def crop_block_size(self, block_size):
            assert block_size <= self.config.block_size
            self.config.block_size = block_size
            self.transformer.wpe.weight = nn.Parameter(self.transformer.wpe.weight[:block_size])
            for block in self.transformer.h:
                if hasattr(block.attn, 'bias'):
                    block.attn.bias = block.attn.bias[:, :, :block_size, :block_size]

        def configure_optimizers(self, weight_decay, learning_rate, betas, device_type):
            param_dict = {pn: p for pn, p in self.named_parameters()}
            param_dict = {pn: p for pn, p in param_dict.items() if p.requires_grad}
            decay_params = [p for n, p in param_dict.items() if p.dim() >= 2]
            nodecay_params = [p for n, p in param_dict.items() if p.dim() < 2]
            optim_groups = [
                {'params': decay_params, 'weight_decay': weight_decay},
                {'params': nodecay_params, 'weight_decay': 0.0}
            ]
            num_decay_params = sum(p.numel() for p in decay_params)
            num_nodecay_params = sum(p.numel() for p in nodecay_params)
            print(f"num decayed parameter tensors: {len(decay_params)}, with {num_decay_params:,} parameters")
            print(f"num non-decayed parameter tensors: {len(nodecay_params)}, with {num_nodecay_params:,} parameters")
            fused_available = 'fused' in inspect.signature(torch.optim.AdamW).parameters
            use_fused = fused_available and device_type == 'cuda'
            extra_args = dict(fused=True) if use_fused else dict()
            optimizer = torch.optim.AdamW(optim_groups, lr=learning_rate, betas=betas, **extra_args)
            print(f"using fused AdamW: {use_fused}")

            return optimizer

        def estimate_mfu(self, fwdbwd_per_iter, dt):
            """ estimate model flops utilization (MFU) in units of A100 bfloat16 peak FLOPS """
            N = self.get_num_params()
            cfg = self.config
            L, H, Q, T = cfg.n_layer, cfg.n_head, cfg.n_embd // cfg.n_head, cfg.block_size
            flops_per_token = 6 * N + 12 * L * H * Q * T
            flops_per_fwdbwd = flops_per_token * T
            flops_per_iter = flops_per_fwdbwd * fwdbwd_per_iter
            flops_achieved = flops_per_iter * (1.0 / dt)  # per second
            flops_promised = 312e12  # A100 GPU bfloat16 peak flops is 312 TFLOPS
            mfu = flops_achieved / flops_promised
            return mfu

        @torch.no_grad()
        def generate(self, idx, max_new_tokens, temperature=1.0, top_k=None):
            for _ in range(max_new_tokens):
                idx_cond = idx if idx.size(1) <= self.config.block_size else idx[:, -self.config.block_size:]
                logits, _ = self(idx_cond)
                logits = logits[:, -1, :] / temperature
                if top_k is not None:
                    v, _ = torch.topk(logits, min(top_k, logits.size(-1)))
                    logits[logits < v[:, [-1]]] = -float('Inf')
                probs = F.softmax(logits, dim=-1)
                idx_next = torch.multinomial(probs, num_samples=1)
                idx = torch.cat((idx, idx_next), dim=1)
            return idx

    return SimpleNamespace(GPTConfig=GPTConfig, GPT=GPT, LayerNorm=LayerNorm)


_TINY = dict(n_layer=2, n_head=2, n_embd=16, block_size=8, vocab_size=20, dropout=0.0, bias=True)


def _nanogpt(torch, slow=False, seed=0, double=True, **over):
    M = nanogpt_model(torch, slow_attention=slow)
    with redirect_stdout(io.StringIO()) as out:
        model = M.GPT(M.GPTConfig(**{**_TINY, **over}))
    if double:
        model.double()
    if seed is not None:
        _load(torch, model, _weights(model.state_dict(), seed))
    return M, model, out.getvalue()


def _idx(seed, shape, vocab):
    return np.random.default_rng(seed).integers(0, vocab, shape)


@pytest.fixture(autouse=True)
def _keep_matmul_precision():
    """nanoGPT's and build-nanogpt's pages set process-wide flags (the float32 matmul precision,
    ``allow_tf32``); give them back, Lucid's and PyTorch's, so later tests in this worker (the runtime
    doctests, the performance-tuning page's parity test) see the defaults."""
    import sys

    saved = []
    for mod in (lucid, sys.modules.get("torch")):
        if mod is not None:
            saved.append((mod, mod.get_float32_matmul_precision(), mod.backends.cuda.matmul.allow_tf32,
                          mod.backends.cudnn.allow_tf32))
    yield
    for mod, precision, matmul_tf32, cudnn_tf32 in saved:
        mod.set_float32_matmul_precision(precision)
        mod.backends.cuda.matmul.allow_tf32 = matmul_tf32
        mod.backends.cudnn.allow_tf32 = cudnn_tf32


def test_nanogpt_forward_matches_numpy_both_attention_paths():
    for slow in (False, True):
        M, model, printed = _nanogpt(lucid, slow=slow)
        assert ("WARNING: using slow attention" in printed) is slow
        W = _weights(model.state_dict(), 0)
        idx, tg = _idx(1, (3, 8), 20), _idx(2, (3, 8), 20)
        tg[0, :3] = -1  # ignore_index=-1
        logits, loss = model(lucid.tensor(idx), lucid.tensor(tg))
        ref = _np_gpt(W, idx, n_head=2)
        np.testing.assert_allclose(_np(logits), ref, rtol=1e-10, atol=1e-12)
        assert abs(loss.item() - _np_ce(ref, tg, ignore_index=-1)) < 1e-10
        last, none = model(lucid.tensor(idx))  # inference: lm_head on the last position only
        assert none is None and tuple(last.shape) == (3, 1, 20)
        np.testing.assert_allclose(_np(last)[:, 0], ref[:, -1], rtol=1e-10, atol=1e-12)


def test_nanogpt_init_report_optimizer_groups_and_mfu():
    lucid.manual_seed(1337)
    M, model, printed = _nanogpt(lucid, seed=None, double=False)
    C, V, bs, L = 16, 20, 8, 2
    per_block_w = 3 * C * C + C * C + 4 * C * C + 4 * C * C
    per_block_b = 2 * C + 3 * C + C + 2 * C + 4 * C + C  # ln_1, c_attn, c_proj, ln_2, c_fc, c_proj
    total = V * C + bs * C + L * (per_block_w + per_block_b) + 2 * C  # lm_head tied to wte
    assert model.get_num_params(non_embedding=False) == total
    assert printed == "number of parameters: %.2fM\n" % ((total - bs * C) / 1e6)
    assert model.transformer.wte.weight is model.lm_head.weight
    # GPT-2's scaled init on the residual projections: std 0.02 / sqrt(2 n_layer) = 0.01
    cproj = np.concatenate([_np(p).ravel() for n, p in model.named_parameters() if n.endswith("c_proj.weight")])
    others = np.concatenate([_np(p).ravel() for n, p in model.named_parameters() if n.endswith("c_fc.weight")])
    assert 0.008 < cproj.std() < 0.012 and 0.017 < others.std() < 0.023
    idx = lucid.tensor(_idx(3, (4, 8), V))
    _, loss = model(idx, lucid.tensor(_idx(4, (4, 8), V)))
    assert abs(loss.item() - math.log(V)) < 0.05  # tiny logits at init: a uniform guess
    with redirect_stdout(io.StringIO()) as out:
        opt = model.configure_optimizers(0.1, 1e-3, (0.9, 0.95), "cpu")
    dec_n, nodec_n = 2 + 4 * L, 2 + 8 * L  # wte, wpe + 4 matrices a block; ln_f + 8 vectors a block
    dec = V * C + bs * C + L * per_block_w
    assert out.getvalue().splitlines() == [
        f"num decayed parameter tensors: {dec_n}, with {dec:,} parameters",
        f"num non-decayed parameter tensors: {nodec_n}, with {total - dec:,} parameters",
        "using fused AdamW: False"]
    assert [g["weight_decay"] for g in opt.param_groups] == [0.1, 0.0]
    assert [len(g["params"]) for g in opt.param_groups] == [dec_n, nodec_n]
    assert opt.param_groups[0]["betas"] == (0.9, 0.95)
    N = total - bs * C
    flops = (6 * N + 12 * L * 2 * 8 * bs) * bs * 12
    assert model.estimate_mfu(12, 0.5) == pytest.approx(flops / 0.5 / 312e12, rel=1e-12)


def test_nanogpt_gradients_match_float64_finite_differences():
    M, model, _ = _nanogpt(lucid, seed=5)
    idx, tg = lucid.tensor(_idx(6, (2, 6), 20)), lucid.tensor(_idx(7, (2, 6), 20))
    _, loss = model(idx, tg)
    loss.backward()
    params = dict(model.named_parameters())
    checks = [("transformer.wte.weight", (3, 1)), ("transformer.wpe.weight", (2, 5)),
              ("transformer.h.0.attn.c_attn.weight", (20, 3)), ("transformer.h.1.mlp.c_fc.bias", (7,)),
              ("transformer.h.1.ln_2.weight", (4,)), ("transformer.ln_f.bias", (0,))]
    eps = 1e-6
    for name, ix in checks:
        p = params[name]
        g = _np(p.grad)[ix]
        with lucid.no_grad():
            old = p[ix].item()
            p[ix] = old + eps
            up = model(idx, tg)[1].item()
            p[ix] = old - eps
            down = model(idx, tg)[1].item()
            p[ix] = old
        assert abs(g - (up - down) / (2 * eps)) < 1e-7 * max(1.0, abs(g)), name


def test_nanogpt_generate_top_k_crop_and_block_size_surgery():
    M, model, _ = _nanogpt(lucid, seed=8)
    model.eval()
    start = lucid.tensor(_idx(9, (2, 3), 20))
    runs = []
    for _ in range(2):
        lucid.manual_seed(42)
        runs.append(model.generate(start, 10, temperature=0.8, top_k=3).tolist())
    assert runs[0] == runs[1] and np.array(runs[0]).shape == (2, 13)  # 13 > block_size 8: cropped
    out = np.array(runs[0])
    assert (out[:, :3] == _np(start)).all()
    W = _weights(model.state_dict(), 8)
    for t in range(3, 13):  # each sampled token is among the 3 best of the (cropped) context
        ctx = out[:, max(0, t - 8):t]
        top3 = np.argsort(-_np_gpt(W, ctx, n_head=2)[:, -1], axis=-1)[:, :3]
        assert all(out[b, t] in top3[b] for b in range(2))
    greedy = model.generate(start, 6, top_k=1).tolist()  # top-1 leaves one token: greedy decoding
    seq = _np(start)
    for _ in range(6):
        seq = np.concatenate([seq, _np_gpt(W, seq[:, -8:], n_head=2)[:, -1].argmax(-1)[:, None]], 1)
    assert greedy == seq.tolist()
    for slow in (False, True):  # model surgery: a shorter block keeps the first positions' logits
        _, m2, _ = _nanogpt(lucid, slow=slow, seed=8)
        m2.crop_block_size(4)
        assert tuple(m2.transformer.wpe.weight.shape) == (4, 16) and m2.config.block_size == 4
        if slow:  # the cropped mask is still the registered buffer
            assert tuple(m2.state_dict()["transformer.h.0.attn.bias"].shape) == (1, 1, 4, 4)
        x = _idx(10, (2, 4), 20)
        np.testing.assert_allclose(_np(m2(lucid.tensor(x), lucid.tensor(x))[0]), _np_gpt(W, x, 2), rtol=1e-10)
        with pytest.raises(AssertionError, match="block size is only 4"):
            m2(lucid.tensor(_idx(10, (1, 5), 20)))


# ------------------------------------------------------------------ nanoGPT train.py
def nanogpt_train_page(torch, M, out_dir, data_dir, device, max_iters, init_from='scratch', randint=None,
                       eval_interval=4, eval_iters=2, W=None):
    GPTConfig, GPT = M.GPTConfig, M.GPT
    randint = randint or torch.randint
    log_interval = 1
    eval_only = False
    always_save_checkpoint = False
    gradient_accumulation_steps = 2
    batch_size = 4
    block_size = 8
    n_layer, n_head, n_embd, dropout, bias = 2, 2, 16, 0.0, True
    learning_rate = 1e-2
    weight_decay = 1e-1
    beta1, beta2 = 0.9, 0.95
    grad_clip = 1.0
    decay_lr = True
    warmup_iters = 3
    lr_decay_iters = 16
    min_lr = 1e-3
    dtype = 'float32'
    config_keys = ['eval_interval', 'eval_iters', 'batch_size', 'block_size', 'learning_rate', 'dtype']
    config = {k: v for k, v in locals().items() if k in config_keys}  # globals() in the original
    master_process = True
    seed_offset = 0
    ddp_world_size = 1
    tokens_per_iter = gradient_accumulation_steps * ddp_world_size * batch_size * block_size
    print(f"tokens per iteration will be: {tokens_per_iter:,}")
    os.makedirs(out_dir, exist_ok=True)
    torch.manual_seed(1337 + seed_offset)
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    device_type = 'cuda' if 'cuda' in device else 'cpu'
    ptdtype = {'float32': torch.float32, 'bfloat16': torch.bfloat16, 'float16': torch.float16}[dtype]
    ctx = nullcontext() if device_type == 'cpu' else torch.amp.autocast(device_type=device_type, dtype=ptdtype)

    def get_batch(split):
        if split == 'train':
            data = np.memmap(os.path.join(data_dir, 'train.bin'), dtype=np.uint16, mode='r')
        else:
            data = np.memmap(os.path.join(data_dir, 'val.bin'), dtype=np.uint16, mode='r')
        ix = randint(len(data) - block_size, (batch_size,))
        x = torch.stack([torch.from_numpy((data[i:i+block_size]).astype(np.int64)) for i in ix])
        y = torch.stack([torch.from_numpy((data[i+1:i+1+block_size]).astype(np.int64)) for i in ix])
        if device_type == 'cuda':
            x, y = x.pin_memory().to(device, non_blocking=True), y.pin_memory().to(device, non_blocking=True)
        else:
            x, y = x.to(device), y.to(device)
        return x, y

    iter_num = 0
    best_val_loss = 1e9
    meta_path = os.path.join(data_dir, 'meta.pkl')
    meta_vocab_size = None
    if os.path.exists(meta_path):
        with open(meta_path, 'rb') as f:
            meta = pickle.load(f)
        meta_vocab_size = meta['vocab_size']
        print(f"found vocab_size = {meta_vocab_size} (inside {meta_path})")

    model_args = dict(n_layer=n_layer, n_head=n_head, n_embd=n_embd, block_size=block_size,
                      bias=bias, vocab_size=None, dropout=dropout)
    if init_from == 'scratch':
        print("Initializing a new model from scratch")
        model_args['vocab_size'] = meta_vocab_size if meta_vocab_size is not None else 50304
        gptconf = GPTConfig(**model_args)
        model = GPT(gptconf)
        if W is not None:  # the parity test starts both libraries from the same weights
            _load(torch, model, W)
    elif init_from == 'resume':
        print(f"Resuming training from {out_dir}")
        ckpt_path = os.path.join(out_dir, 'ckpt.pt')
        checkpoint = torch.load(ckpt_path, map_location=device)
        checkpoint_model_args = checkpoint['model_args']
        for k in ['n_layer', 'n_head', 'n_embd', 'block_size', 'bias', 'vocab_size']:
            model_args[k] = checkpoint_model_args[k]
        gptconf = GPTConfig(**model_args)
        model = GPT(gptconf)
        state_dict = checkpoint['model']
        unwanted_prefix = '_orig_mod.'
        for k, v in list(state_dict.items()):
            if k.startswith(unwanted_prefix):
                state_dict[k[len(unwanted_prefix):]] = state_dict.pop(k)
        model.load_state_dict(state_dict)
        iter_num = checkpoint['iter_num']
        best_val_loss = checkpoint['best_val_loss']
    if block_size < model.config.block_size:
        model.crop_block_size(block_size)
        model_args['block_size'] = block_size
    model.to(device)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # torch.cuda.amp.GradScaler is deprecated
        scaler = torch.cuda.amp.GradScaler(enabled=(dtype == 'float16'))
    optimizer = model.configure_optimizers(weight_decay, learning_rate, (beta1, beta2), device_type)
    if init_from == 'resume':
        optimizer.load_state_dict(checkpoint['optimizer'])
    checkpoint = None
    raw_model = model

    @torch.no_grad()
    def estimate_loss():
        out = {}
        model.eval()
        for split in ['train', 'val']:
            losses = torch.zeros(eval_iters)
            for k in range(eval_iters):
                X, Y = get_batch(split)
                with ctx:
                    logits, loss = model(X, Y)
                losses[k] = loss.item()
            out[split] = losses.mean()
        model.train()
        return out

    def get_lr(it):
        if it < warmup_iters:
            return learning_rate * (it + 1) / (warmup_iters + 1)
        if it > lr_decay_iters:
            return min_lr
        decay_ratio = (it - warmup_iters) / (lr_decay_iters - warmup_iters)
        assert 0 <= decay_ratio <= 1
        coeff = 0.5 * (1.0 + math.cos(math.pi * decay_ratio))
        return min_lr + coeff * (learning_rate - min_lr)

    lrs = []
    X, Y = get_batch('train')
    t0 = time.time()
    local_iter_num = 0
    running_mfu = -1.0
    while True:
        lr = get_lr(iter_num) if decay_lr else learning_rate
        for param_group in optimizer.param_groups:
            param_group['lr'] = lr
        lrs.append(lr)

        if iter_num % eval_interval == 0 and master_process:
            losses = estimate_loss()
            print(f"step {iter_num}: train loss {losses['train']:.4f}, val loss {losses['val']:.4f}")
            if losses['val'] < best_val_loss or always_save_checkpoint:
                best_val_loss = losses['val']
                if iter_num > 0:
                    checkpoint = {
                        'model': raw_model.state_dict(),
                        'optimizer': optimizer.state_dict(),
                        'model_args': model_args,
                        'iter_num': iter_num,
                        'best_val_loss': best_val_loss,
                        'config': config,
                    }
                    print(f"saving checkpoint to {out_dir}")
                    torch.save(checkpoint, os.path.join(out_dir, 'ckpt.pt'))
        if iter_num == 0 and eval_only:
            break

        for micro_step in range(gradient_accumulation_steps):
            with ctx:
                logits, loss = model(X, Y)
                loss = loss / gradient_accumulation_steps
            X, Y = get_batch('train')
            scaler.scale(loss).backward()
        if grad_clip != 0.0:
            scaler.unscale_(optimizer)
            torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad(set_to_none=True)

        t1 = time.time()
        dt = t1 - t0
        t0 = t1
        if iter_num % log_interval == 0 and master_process:
            lossf = loss.item() * gradient_accumulation_steps
            if local_iter_num >= 5:
                mfu = raw_model.estimate_mfu(batch_size * gradient_accumulation_steps, max(dt, 1e-9))
                running_mfu = mfu if running_mfu == -1.0 else 0.9 * running_mfu + 0.1 * mfu
            print(f"iter {iter_num}: loss {lossf:.4f}, time {dt*1000:.2f}ms, mfu {running_mfu*100:.2f}%")
        iter_num += 1
        local_iter_num += 1

        if iter_num > max_iters:
            break
    return SimpleNamespace(model=model, optimizer=optimizer, lrs=lrs, iter_num=iter_num, get_lr=get_lr,
                           best_val_loss=best_val_loss, scaler=scaler)


def _write_data(data_dir, vocab=12, n=400, seed=0):
    """A memorisable token stream: a fixed random cycle through the vocabulary."""
    os.makedirs(data_dir, exist_ok=True)
    cycle = np.random.default_rng(seed).permutation(vocab)
    stream = np.tile(cycle, n // vocab + 1)[:n].astype(np.uint16)
    stream.tofile(os.path.join(data_dir, 'train.bin'))
    stream[: n // 4].tofile(os.path.join(data_dir, 'val.bin'))
    with open(os.path.join(data_dir, 'meta.pkl'), 'wb') as f:
        pickle.dump({'vocab_size': vocab}, f)


def _parse(text, pat):
    import re
    return [tuple(float(g) for g in m.groups()) for m in re.finditer(pat, text)]


def test_nanogpt_train_loop_memorises_and_resumes(tmp_path):
    data_dir, out_dir = str(tmp_path / "data"), str(tmp_path / "out")
    _write_data(data_dir)
    M = nanogpt_model(lucid)
    dev = _dev(lucid)
    with redirect_stdout(io.StringIO()) as out:
        r = nanogpt_train_page(lucid, M, out_dir, data_dir, dev, max_iters=16)
    text = out.getvalue()
    assert "tokens per iteration will be: 64" in text and "found vocab_size = 12" in text
    evals = _parse(text, r"step (\d+): train loss ([\d.]+), val loss ([\d.]+)")
    iters = _parse(text, r"iter (\d+): loss ([\d.]+), time")
    assert [e[0] for e in evals] == [0, 4, 8, 12, 16] and len(iters) == 17
    assert abs(evals[0][1] - math.log(12)) < 0.05  # init: a uniform guess over 12 tokens
    assert evals[-1][2] < evals[0][2] - 0.8  # the cycle is being learned
    assert text.count("saving checkpoint to") >= 2
    # the schedule: linear warmup to 1e-2 over 3 iterations, cosine down to 1e-3 at 16
    assert r.lrs[:4] == pytest.approx([0.01 / 4, 0.02 / 4, 0.03 / 4, 0.01])
    assert r.lrs[16] == pytest.approx(1e-3) and r.get_lr(17) == 1e-3
    assert r.lrs[9] == pytest.approx(1e-3 + 0.5 * (1 + math.cos(math.pi * 6 / 13)) * 9e-3)
    assert r.scaler.is_enabled() is False
    ck = lucid.load(os.path.join(out_dir, 'ckpt.pt'))
    assert ck['model_args'] == dict(n_layer=2, n_head=2, n_embd=16, block_size=8, bias=True, vocab_size=12,
                                    dropout=0.0)
    assert ck['config']['dtype'] == 'float32' and ck['iter_num'] in (4, 8, 12, 16)
    assert float(ck['best_val_loss']) == pytest.approx(min(e[2] for e in evals[1:]), abs=1e-4)
    # a compiled model's prefix is stripped on resume
    ck['model'] = {('_orig_mod.' + k): v for k, v in ck['model'].items()}
    lucid.save(ck, os.path.join(out_dir, 'ckpt.pt'))
    with redirect_stdout(io.StringIO()) as out2:
        r2 = nanogpt_train_page(lucid, M, out_dir, data_dir, dev, max_iters=ck['iter_num'], init_from='resume')
    assert f"Resuming training from {out_dir}" in out2.getvalue()
    assert r2.iter_num == ck['iter_num'] + 1 and r2.lrs[0] == r.get_lr(ck['iter_num'])
    st = r2.optimizer.state_dict()['state']
    assert all(int(s['step']) == ck['iter_num'] + 1 for s in st.values())  # loaded state stepped once more


# ------------------------------------------------------------------ build-nanogpt train_gpt2.py
def build_nanogpt_page(torch, tokens, device, W=None, autocast_dtype=None, max_steps=12):
    nn = torch.nn
    F = torch.nn.functional

    class CausalSelfAttention(nn.Module):

        def __init__(self, config):
            super().__init__()
            assert config.n_embd % config.n_head == 0
            self.c_attn = nn.Linear(config.n_embd, 3 * config.n_embd)
            self.c_proj = nn.Linear(config.n_embd, config.n_embd)
            self.c_proj.NANOGPT_SCALE_INIT = 1
            self.n_head = config.n_head
            self.n_embd = config.n_embd
            self.register_buffer("bias", torch.tril(torch.ones(config.block_size, config.block_size))
                                 .view(1, 1, config.block_size, config.block_size))

        def forward(self, x):
            B, T, C = x.size()
            qkv = self.c_attn(x)
            q, k, v = qkv.split(self.n_embd, dim=2)
            k = k.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)  # (B, nh, T, hs)
            q = q.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)  # (B, nh, T, hs)
            v = v.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)  # (B, nh, T, hs)
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)  # flash attention
            y = y.transpose(1, 2).contiguous().view(B, T, C)
            y = self.c_proj(y)
            return y

    class MLP(nn.Module):

        def __init__(self, config):
            super().__init__()
            self.c_fc = nn.Linear(config.n_embd, 4 * config.n_embd)
            self.gelu = nn.GELU(approximate='tanh')
            self.c_proj = nn.Linear(4 * config.n_embd, config.n_embd)
            self.c_proj.NANOGPT_SCALE_INIT = 1

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
                wte=nn.Embedding(config.vocab_size, config.n_embd),
                wpe=nn.Embedding(config.block_size, config.n_embd),
                h=nn.ModuleList([Block(config) for _ in range(config.n_layer)]),
                ln_f=nn.LayerNorm(config.n_embd),
            ))
            self.lm_head = nn.Linear(config.n_embd, config.vocab_size, bias=False)
            self.transformer.wte.weight = self.lm_head.weight
            self.apply(self._init_weights)

        def _init_weights(self, module):
            if isinstance(module, nn.Linear):
                std = 0.02
                if hasattr(module, 'NANOGPT_SCALE_INIT'):
                    std *= (2 * self.config.n_layer) ** -0.5
                torch.nn.init.normal_(module.weight, mean=0.0, std=std)
                if module.bias is not None:
                    torch.nn.init.zeros_(module.bias)
            elif isinstance(module, nn.Embedding):
                torch.nn.init.normal_(module.weight, mean=0.0, std=0.02)

        def forward(self, idx, targets=None):
            B, T = idx.size()
            assert T <= self.config.block_size, f"Cannot forward sequence of length {T}, block size is only {self.config.block_size}"
            pos = torch.arange(0, T, dtype=torch.long, device=idx.device)  # shape (T)
            pos_emb = self.transformer.wpe(pos)  # position embeddings of shape (T, n_embd)
            tok_emb = self.transformer.wte(idx)  # token embeddings of shape (B, T, n_embd)
            x = tok_emb + pos_emb
            for block in self.transformer.h:
                x = block(x)
            x = self.transformer.ln_f(x)
            logits = self.lm_head(x)  # (B, T, vocab_size)
            loss = None
            if targets is not None:
                loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))
            return logits, loss

        def configure_optimizers(self, weight_decay, learning_rate, device):
            param_dict = {pn: p for pn, p in self.named_parameters()}
            param_dict = {pn: p for pn, p in param_dict.items() if p.requires_grad}
            decay_params = [p for n, p in param_dict.items() if p.dim() >= 2]
            nodecay_params = [p for n, p in param_dict.items() if p.dim() < 2]
            optim_groups = [
                {'params': decay_params, 'weight_decay': weight_decay},
                {'params': nodecay_params, 'weight_decay': 0.0}
            ]
            num_decay_params = sum(p.numel() for p in decay_params)
            num_nodecay_params = sum(p.numel() for p in nodecay_params)
            print(f"num decayed parameter tensors: {len(decay_params)}, with {num_decay_params:,} parameters")
            print(f"num non-decayed parameter tensors: {len(nodecay_params)}, with {num_nodecay_params:,} parameters")
            fused_available = 'fused' in inspect.signature(torch.optim.AdamW).parameters
            use_fused = fused_available and 'cuda' in device
            print(f"using fused AdamW: {use_fused}")
            optimizer = torch.optim.AdamW(optim_groups, lr=learning_rate, betas=(0.9, 0.95), eps=1e-8, fused=use_fused)
            return optimizer

    class DataLoaderLite:
        def __init__(self, B, T):
            self.B = B
            self.T = T
            self.tokens = torch.tensor(tokens)  # tiktoken's encoding of input.txt in the original
            print(f"loaded {len(self.tokens)} tokens")
            print(f"1 epoch = {len(self.tokens) // (B * T)} batches")
            self.current_position = 0

        def next_batch(self):
            B, T = self.B, self.T
            buf = self.tokens[self.current_position: self.current_position+B*T+1]
            x = (buf[:-1]).view(B, T)  # inputs
            y = (buf[1:]).view(B, T)  # targets
            self.current_position += B * T
            if self.current_position + (B * T + 1) > len(self.tokens):
                self.current_position = 0
            return x, y

    torch.manual_seed(1337)
    if torch.cuda.is_available():
        torch.cuda.manual_seed(1337)

    total_batch_size = 64
    B = 4
    T = 8
    assert total_batch_size % (B * T) == 0, "make sure total_batch_size is divisible by B * T"
    grad_accum_steps = total_batch_size // (B * T)
    print(f"total desired batch size: {total_batch_size}")
    print(f"=> calculated gradient accumulation steps: {grad_accum_steps}")

    train_loader = DataLoaderLite(B=B, T=T)
    torch.set_float32_matmul_precision('high')

    model = GPT(GPTConfig(vocab_size=64, block_size=8, n_layer=2, n_head=2, n_embd=16))
    if W is not None:
        _load(torch, model, W)
    model.to(device)
    init_state = {k: _np(v).copy() for k, v in model.state_dict().items()}

    max_lr = 6e-3
    min_lr = max_lr * 0.1
    warmup_steps = 3
    def get_lr(it):
        if it < warmup_steps:
            return max_lr * (it+1) / warmup_steps
        if it > max_steps:
            return min_lr
        decay_ratio = (it - warmup_steps) / (max_steps - warmup_steps)
        assert 0 <= decay_ratio <= 1
        coeff = 0.5 * (1.0 + math.cos(math.pi * decay_ratio))
        return min_lr + coeff * (max_lr - min_lr)

    optimizer = model.configure_optimizers(weight_decay=0.1, learning_rate=6e-4, device=device)
    norms, clipped = [], []
    logits_dtype = None
    for step in range(max_steps):
        t0 = time.time()
        optimizer.zero_grad()
        loss_accum = 0.0
        for micro_step in range(grad_accum_steps):
            x, y = train_loader.next_batch()
            x, y = x.to(device), y.to(device)
            with torch.autocast(device_type=device.split(":")[0], dtype=autocast_dtype or torch.bfloat16,
                                enabled=autocast_dtype is not None):
                logits, loss = model(x, y)
            logits_dtype = logits.dtype  # (the harness's: what autocast made of the lm_head)
            loss = loss / grad_accum_steps
            loss_accum += loss.detach()
            loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        norms.append(float(norm))
        clipped.append(math.sqrt(sum(float((p.grad.double() ** 2).sum()) for p in model.parameters())))
        lr = get_lr(step)
        for param_group in optimizer.param_groups:
            param_group['lr'] = lr
        optimizer.step()
        t1 = time.time()
        dt = t1 - t0
        tokens_processed = train_loader.B * train_loader.T * grad_accum_steps
        tokens_per_sec = tokens_processed / max(dt, 1e-9)
        print(f"step {step:4d} | loss: {loss_accum.item():.6f} | lr {lr:.4e} | norm: {norm:.4f} | dt: {dt*1000:.2f}ms | tok/sec: {tokens_per_sec:.2f}")

    model.eval()
    num_return_sequences = 3
    max_length = 14
    tokens = torch.tensor(tokens[:5], dtype=torch.long)  # (5,)
    tokens = tokens.unsqueeze(0).repeat(num_return_sequences, 1)  # (3, 5)
    x = tokens.to(device)
    torch.manual_seed(42)
    sampled = []
    while x.size(1) < max_length:
        with torch.no_grad():
            logits, _ = model(x[:, -8:])  # (B, T, vocab_size); the original's blocks are 1024 long
            logits = logits[:, -1, :]  # (B, vocab_size)
            probs = F.softmax(logits, dim=-1)
            topk_probs, topk_indices = torch.topk(probs, 50, dim=-1)
            ix = torch.multinomial(topk_probs, 1)  # (B, 1)
            xcol = torch.gather(topk_indices, -1, ix)  # (B, 1)
            sampled.append((_np(probs), _np(ix)))
            x = torch.cat((x, xcol), dim=1)
    final = {k: _np(v).copy() for k, v in model.state_dict().items()}
    return SimpleNamespace(logits_dtype=logits_dtype, model=model, norms=norms, clipped=clipped, x=x.tolist(), sampled=sampled, init=init_state,
                           final=final, get_lr=get_lr, GPTConfig=GPTConfig, DataLoaderLite=DataLoaderLite)


def build_nanogpt_final_page(torch, b, tokens, examples, log_dir, device, step=10, last_step=True):
    """The final ``train_gpt2.py``'s evaluation pieces (validation loss, HellaSwag scoring from
    ``hellaswag.py``, the checkpoint with its config, sampling with a ``torch.Generator``), run on
    the model ``b`` of :func:`build_nanogpt_page`; ``enc.encode`` is replaced by token lists."""
    F = torch.nn.functional
    model, raw_model = b.model, b.model
    device_type = "cuda" if device.startswith("cuda") else "cpu"
    ddp, ddp_rank, master_process = False, 0, True
    out = SimpleNamespace(lines=[])

    def render_example(example):
        ctx = example["ctx"]
        label = example["label"]
        endings = example["endings"]
        data = {"label": label, "ctx_tokens": None, "ending_tokens": []}
        ctx_tokens = ctx  # enc.encode(ctx)
        data["ctx_tokens"] = ctx_tokens
        tok_rows = []
        mask_rows = []
        for end in endings:
            end_tokens = end  # enc.encode(" " + end)
            tok_rows.append(ctx_tokens + end_tokens)
            mask_rows.append([0]*len(ctx_tokens) + [1]*len(end_tokens))
            data["ending_tokens"].append(end_tokens)
        max_len = max(len(row) for row in tok_rows)
        tokens = torch.zeros((4, max_len), dtype=torch.long)
        mask = torch.zeros((4, max_len), dtype=torch.long)
        for i, (tok_row, mask_row) in enumerate(zip(tok_rows, mask_rows)):
            tokens[i, :len(tok_row)] = torch.tensor(tok_row)
            mask[i, :len(mask_row)] = torch.tensor(mask_row)
        return data, tokens, mask, label

    def get_most_likely_row(tokens, mask, logits):
        shift_logits = (logits[..., :-1, :]).contiguous()
        shift_tokens = (tokens[..., 1:]).contiguous()
        flat_shift_logits = shift_logits.view(-1, shift_logits.size(-1))
        flat_shift_tokens = shift_tokens.view(-1)
        shift_losses = F.cross_entropy(flat_shift_logits, flat_shift_tokens, reduction='none')
        shift_losses = shift_losses.view(tokens.size(0), -1)
        shift_mask = (mask[..., 1:]).contiguous()
        masked_shift_losses = shift_losses * shift_mask
        sum_loss = masked_shift_losses.sum(dim=1)
        avg_loss = sum_loss / shift_mask.sum(dim=1)
        pred_norm = avg_loss.argmin().item()
        out.avg_losses.append(_np(avg_loss))
        return pred_norm

    val_loader = b.DataLoaderLite(B=4, T=8)
    val_loader.tokens = torch.tensor(tokens)
    val_loader.reset = lambda: setattr(val_loader, "current_position", 0)
    model.eval()
    val_loader.reset()
    with torch.no_grad():
        val_loss_accum = 0.0
        val_loss_steps = 3
        for _ in range(val_loss_steps):
            x, y = val_loader.next_batch()
            x, y = x.to(device), y.to(device)
            logits, loss = model(x, y)  # under autocast to bfloat16 in the original
            loss = loss / val_loss_steps
            val_loss_accum += loss.detach()
    out.val_loss = val_loss_accum.item()
    print(f"validation loss: {val_loss_accum.item():.4f}")
    if step > 0 and (step % 5000 == 0 or last_step):
        checkpoint_path = os.path.join(log_dir, f"model_{step:05d}.pt")
        checkpoint = {
            'model': raw_model.state_dict(),
            'config': raw_model.config,
            'step': step,
            'val_loss': val_loss_accum.item()
        }
        torch.save(checkpoint, checkpoint_path)
        out.checkpoint_path = checkpoint_path

    num_correct_norm = 0
    num_total = 0
    out.avg_losses, out.rows = [], []
    for i, example in enumerate(examples):
        _, tokens, mask, label = render_example(example)
        tokens = tokens.to(device)
        mask = mask.to(device)
        with torch.no_grad():
            logits, loss = model(tokens)
            pred_norm = get_most_likely_row(tokens, mask, logits)
        out.rows.append((_np(tokens), _np(mask), _np(logits)))
        num_total += 1
        num_correct_norm += int(pred_norm == label)
    acc_norm = num_correct_norm / num_total
    print(f"HellaSwag accuracy: {num_correct_norm}/{num_total}={acc_norm:.4f}")

    num_return_sequences = 2
    max_length = 12
    tokens = torch.tensor(tokens_prefix := [int(t) for t in b.x[0][:4]], dtype=torch.long)
    tokens = tokens.unsqueeze(0).repeat(num_return_sequences, 1)
    xgen = tokens.to(device)
    sample_rng = torch.Generator(device=device)
    sample_rng.manual_seed(42 + ddp_rank)
    while xgen.size(1) < max_length:
        with torch.no_grad():
            logits, loss = model(xgen[:, -8:])  # (B, T, vocab_size)
            logits = logits[:, -1, :]  # (B, vocab_size)
            probs = F.softmax(logits, dim=-1)
            topk_probs, topk_indices = torch.topk(probs, 50, dim=-1)
            ix = torch.multinomial(topk_probs, 1, generator=sample_rng)  # (B, 1)
            xcol = torch.gather(topk_indices, -1, ix)  # (B, 1)
            xgen = torch.cat((xgen, xcol), dim=1)
    out.xgen, out.prefix, out.acc_norm = xgen.tolist(), tokens_prefix, acc_norm
    return out


def _build_tokens(n=200, vocab=64, seed=1):
    cycle = np.random.default_rng(seed).permutation(vocab)[:16]  # a 16-token cycle over a 64 vocabulary
    return np.tile(cycle, n // 16 + 1)[:n].tolist()


_BUILD_RUN = []


def _build_run():
    """build-nanogpt trained once per process (bfloat16 autocast, as the original), shared by two tests."""
    if not _BUILD_RUN:
        before = lucid.get_float32_matmul_precision()
        try:
            with redirect_stdout(io.StringIO()) as out, warnings.catch_warnings():
                warnings.simplefilter("ignore")
                r = build_nanogpt_page(lucid, _build_tokens(), _dev(lucid), autocast_dtype=lucid.bfloat16)
            _BUILD_RUN.append((r, out.getvalue(), lucid.get_float32_matmul_precision()))
        finally:
            lucid.set_float32_matmul_precision(before)
    return _BUILD_RUN[0]


def test_build_nanogpt_training_and_top50_sampling():
    r, text, precision = _build_run()
    assert precision == "high"
    assert "=> calculated gradient accumulation steps: 2" in text and "loaded 200 tokens" in text
    assert "1 epoch = 6 batches" in text and "using fused AdamW: False" in text
    steps = _parse(text, r"step +(\d+) \| loss: ([\d.]+) \| lr ([\d.e+-]+) \| norm: ([\d.]+)")
    assert len(steps) == 12
    assert abs(steps[0][1] - math.log(64)) < 0.05  # std 0.02 init: a uniform guess over 64 tokens
    assert steps[-1][1] < steps[0][1] - 0.6  # the 16-token cycle is being learned (bfloat16 autocast)
    # the lm_head's matmul ran in the region's dtype; a GPU region (CuPy has no bfloat16) warns and stays off
    assert r.logits_dtype == (lucid.bfloat16 if lucid.get_default_device().type == "cpu" else lucid.float32)
    assert [s[2] for s in steps] == pytest.approx([float(f"{r.get_lr(i):.4e}") for i in range(12)])
    # clip_grad_norm_ returns the norm before clipping and leaves at most 1.0
    for n, c in zip(r.norms, r.clipped):
        assert c == pytest.approx(min(n, 1.0), rel=1e-3)
    cproj = np.concatenate([v.ravel() for k, v in r.init.items() if k.endswith("c_proj.weight")])
    assert 0.008 < cproj.std() < 0.012  # NANOGPT_SCALE_INIT: 0.02 / sqrt(2 * n_layer)
    x = np.array(r.x)
    assert x.shape == (3, 14) and (x[:, :5] == np.array(_build_tokens()[:5])).all()
    for t, (probs, ix) in enumerate(r.sampled):  # each token is the ix-th most probable one
        order = np.argsort(-probs, axis=-1, kind="stable")
        assert (ix < 50).all()
        assert all(probs[b, x[b, 5 + t]] == pytest.approx(probs[b, order[b, ix[b, 0]]]) for b in range(3))


def _hellaswag_examples(cycle_tokens, n=4, seed=3):
    """Synthetic HellaSwag items: a context from the token cycle, the true continuation and three
    endings of random tokens (of other lengths, so the rows are padded)."""
    rng = np.random.default_rng(seed)
    out = []
    for k in range(n):
        s = int(rng.integers(0, 40))
        ctx, true = cycle_tokens[s:s + 4], cycle_tokens[s + 4:s + 7]
        ends = [rng.integers(0, 64, int(rng.integers(1, 4))).tolist() for _ in range(3)]
        label = int(rng.integers(0, 4))
        ends.insert(label, true)
        out.append({"ctx": ctx, "label": label, "endings": ends})
    return out


def test_build_nanogpt_validation_hellaswag_and_config_checkpoint(tmp_path):
    dev = _dev(lucid)
    toks = _build_tokens()
    b, _, _ = _build_run()
    with redirect_stdout(io.StringIO()):
        examples = _hellaswag_examples(toks)
        r = build_nanogpt_final_page(lucid, b, toks[100:], examples, str(tmp_path), dev)
    # validation loss: the mean of three batches' losses, against NumPy on the trained weights
    W = {k: v.astype(np.float64) for k, v in b.final.items()}
    val = np.array(toks[100:100 + 97])
    ref = np.mean([_np_ce(_np_gpt(W, val[i * 32:i * 32 + 32].reshape(4, 8), 2, gelu="tanh"),
                          val[i * 32 + 1:i * 32 + 33].reshape(4, 8)) for i in range(3)])
    assert abs(r.val_loss - ref) < 1e-5
    # HellaSwag scoring: mean loss over each ending's tokens, padded rows masked out
    for (tokens, mask, logits), avg, ex in zip(r.rows, r.avg_losses, examples):
        lp = logits[:, :-1] - np.log(np.exp(logits[:, :-1]).sum(-1, keepdims=True))
        nll = -np.take_along_axis(lp, tokens[:, 1:, None], -1)[..., 0]
        np.testing.assert_allclose(avg, (nll * mask[:, 1:]).sum(1) / mask[:, 1:].sum(1), rtol=1e-5)
        assert [len(e) for e in ex["endings"]] == mask.sum(1).tolist()
    assert r.acc_norm == np.mean([a.argmin() == ex["label"] for a, ex in zip(r.avg_losses, examples)])
    # the checkpoint keeps the dataclass config; loading rebuilds it only once it is allowlisted
    with pytest.raises(pickle.UnpicklingError, match="add_safe_globals"):
        lucid.load(r.checkpoint_path)
    with lucid.serialization.safe_globals([b.GPTConfig]):
        ck = lucid.load(r.checkpoint_path)
    assert type(ck["config"]) is b.GPTConfig and ck["config"] == b.model.config and ck["step"] == 10
    assert ck["val_loss"] == r.val_loss and ck["config"] is not b.model.config
    assert all((_np(v) == b.final[k]).all() for k, v in ck["model"].items())
    # sampling with a seeded Generator is reproducible
    again = build_nanogpt_final_page(lucid, b, toks[100:], examples[:1], str(tmp_path), dev, step=0)
    assert again.xgen == r.xgen and np.array(r.xgen).shape == (2, 12) and r.xgen[0][:4] == r.prefix


@dataclass(frozen=True)
class _FrozenCfg:
    lr: float = 1e-3
    sizes: tuple = (2, 3)


@dataclass(slots=True, frozen=True)
class _SlotCfg:
    n: int = 1
    w: Optional[object] = None


def test_save_load_config_objects(tmp_path):
    import argparse
    path = str(tmp_path / "ckpt.pt")
    w = lucid.tensor([1.0, 2.0], requires_grad=True)
    obj = {"args": argparse.Namespace(lr=0.1, betas=(0.9, 0.95), dev=None), "frozen": _FrozenCfg(),
           "slots": _SlotCfg(n=3, w=w), "ns": SimpleNamespace(inner=_FrozenCfg(lr=2.0), xs=[w, 1])}
    lucid.save(obj, path)
    with pytest.raises(pickle.UnpicklingError, match=r"class '.*_FrozenCfg'.*add_safe_globals\(\[_FrozenCfg\]\)"):
        with lucid.serialization.safe_globals([argparse.Namespace]):
            lucid.load(path)
    with lucid.serialization.safe_globals([argparse.Namespace, _FrozenCfg, _SlotCfg, SimpleNamespace]):
        for kw in ({}, {"mmap": True}, {"weights_only": False}):
            got = lucid.load(path, **kw)
            assert type(got["args"]) is argparse.Namespace and vars(got["args"]) == vars(obj["args"])
            assert got["frozen"] == _FrozenCfg() and got["ns"].inner == _FrozenCfg(lr=2.0)
            assert type(got["slots"]) is _SlotCfg and got["slots"].n == 3
            assert got["slots"].w is got["ns"].xs[0] and got["slots"].w.requires_grad  # one tensor, stored once
            assert got["slots"].w.tolist() == [1.0, 2.0] and got["ns"].xs[1] == 1
    with pytest.raises(TypeError, match="can't save an object of type Linear at 'm'"):
        lucid.save({"m": lucid.nn.Linear(1, 1)}, path)  # modules stay refused
    with pytest.raises(TypeError, match="can't save an object of type object at 'cfg.x'"):
        lucid.save({"cfg": SimpleNamespace(x=object())}, path)
    # a registered function is no class: the object node is refused
    with lucid.serialization.safe_globals([(len, f"{_FrozenCfg.__module__}._FrozenCfg")]):
        lucid.save({"c": _FrozenCfg()}, path)
        with pytest.raises(pickle.UnpicklingError, match="add_safe_globals"):
            lucid.load(path)


def test_build_nanogpt_forward_matches_numpy():
    lucid.manual_seed(0)
    with redirect_stdout(io.StringIO()):
        r = build_nanogpt_page(lucid, _build_tokens(), _dev(lucid), max_steps=0)
    model = r.model.double()
    W = _weights(model.state_dict(), 11)
    _load(lucid, model, W)
    idx = _idx(12, (2, 8), 64)
    np.testing.assert_allclose(_np(model(lucid.tensor(idx))[0]), _np_gpt(W, idx, 2, gelu="tanh"), rtol=1e-10, atol=1e-12)


# ------------------------------------------------------------------ ng-video-lecture
def ng_lecture_page(torch, text, gpt=True, max_iters=40, device="cpu", learning_rate=1e-2):
    nn = torch.nn
    F = torch.nn.functional
    batch_size = 8
    block_size = 8
    eval_interval = 20
    eval_iters = 4
    n_embd = 16
    n_head = 2
    n_layer = 2
    dropout = 0.2
    torch.manual_seed(1337)
    chars = sorted(list(set(text)))
    vocab_size = len(chars)
    stoi = {ch: i for i, ch in enumerate(chars)}
    itos = {i: ch for i, ch in enumerate(chars)}
    encode = lambda s: [stoi[c] for c in s]  # noqa: E731
    decode = lambda l: ''.join([itos[i] for i in l])  # noqa: E731,E741
    data = torch.tensor(encode(text), dtype=torch.long)
    n = int(0.9*len(data))
    train_data = data[:n]
    val_data = data[n:]

    def get_batch(split):
        data = train_data if split == 'train' else val_data
        ix = torch.randint(len(data) - block_size, (batch_size,))
        x = torch.stack([data[i:i+block_size] for i in ix])
        y = torch.stack([data[i+1:i+block_size+1] for i in ix])
        x, y = x.to(device), y.to(device)
        return x, y

    @torch.no_grad()
    def estimate_loss():
        out = {}
        model.eval()
        for split in ['train', 'val']:
            losses = torch.zeros(eval_iters)
            for k in range(eval_iters):
                X, Y = get_batch(split)
                logits, loss = model(X, Y)
                losses[k] = loss.item()
            out[split] = losses.mean()
        model.train()
        return out

    class Head(nn.Module):
        """ one head of self-attention """

        def __init__(self, head_size):
            super().__init__()
            self.key = nn.Linear(n_embd, head_size, bias=False)
            self.query = nn.Linear(n_embd, head_size, bias=False)
            self.value = nn.Linear(n_embd, head_size, bias=False)
            self.register_buffer('tril', torch.tril(torch.ones(block_size, block_size)))
            self.dropout = nn.Dropout(dropout)

        def forward(self, x):
            B, T, C = x.shape
            k = self.key(x)   # (B,T,C)
            q = self.query(x)  # (B,T,C)
            wei = q @ k.transpose(-2, -1) * C**-0.5  # (B, T, C) @ (B, C, T) -> (B, T, T)
            wei = wei.masked_fill(self.tril[:T, :T] == 0, float('-inf'))  # (B, T, T)
            wei = F.softmax(wei, dim=-1)  # (B, T, T)
            wei = self.dropout(wei)
            v = self.value(x)  # (B,T,C)
            out = wei @ v  # (B, T, T) @ (B, T, C) -> (B, T, C)
            return out

    class MultiHeadAttention(nn.Module):
        """ multiple heads of self-attention in parallel """

        def __init__(self, num_heads, head_size):
            super().__init__()
            self.heads = nn.ModuleList([Head(head_size) for _ in range(num_heads)])
            self.proj = nn.Linear(n_embd, n_embd)
            self.dropout = nn.Dropout(dropout)

        def forward(self, x):
            out = torch.cat([h(x) for h in self.heads], dim=-1)
            out = self.dropout(self.proj(out))
            return out

    class FeedFoward(nn.Module):
        """ a simple linear layer followed by a non-linearity """

        def __init__(self, n_embd):
            super().__init__()
            self.net = nn.Sequential(
                nn.Linear(n_embd, 4 * n_embd),
                nn.ReLU(),
                nn.Linear(4 * n_embd, n_embd),
                nn.Dropout(dropout),
            )

        def forward(self, x):
            return self.net(x)

    class Block(nn.Module):
        """ Transformer block: communication followed by computation """

        def __init__(self, n_embd, n_head):
            super().__init__()
            head_size = n_embd // n_head
            self.sa = MultiHeadAttention(n_head, head_size)
            self.ffwd = FeedFoward(n_embd)
            self.ln1 = nn.LayerNorm(n_embd)
            self.ln2 = nn.LayerNorm(n_embd)

        def forward(self, x):
            x = x + self.sa(self.ln1(x))
            x = x + self.ffwd(self.ln2(x))
            return x

    class GPTLanguageModel(nn.Module):  # gpt.py's BigramLanguageModel

        def __init__(self):
            super().__init__()
            self.token_embedding_table = nn.Embedding(vocab_size, n_embd)
            self.position_embedding_table = nn.Embedding(block_size, n_embd)
            self.blocks = nn.Sequential(*[Block(n_embd, n_head=n_head) for _ in range(n_layer)])
            self.ln_f = nn.LayerNorm(n_embd)  # final layer norm
            self.lm_head = nn.Linear(n_embd, vocab_size)

        def forward(self, idx, targets=None):
            B, T = idx.shape
            tok_emb = self.token_embedding_table(idx)  # (B,T,C)
            pos_emb = self.position_embedding_table(torch.arange(T, device=device))  # (T,C)
            x = tok_emb + pos_emb  # (B,T,C)
            x = self.blocks(x)  # (B,T,C)
            x = self.ln_f(x)  # (B,T,C)
            logits = self.lm_head(x)  # (B,T,vocab_size)
            if targets is None:
                loss = None
            else:
                B, T, C = logits.shape
                logits = logits.view(B*T, C)
                targets = targets.view(B*T)
                loss = F.cross_entropy(logits, targets)
            return logits, loss

        def generate(self, idx, max_new_tokens):
            for _ in range(max_new_tokens):
                idx_cond = idx[:, -block_size:]
                logits, loss = self(idx_cond)
                logits = logits[:, -1, :]  # becomes (B, C)
                probs = F.softmax(logits, dim=-1)  # (B, C)
                idx_next = torch.multinomial(probs, num_samples=1)  # (B, 1)
                idx = torch.cat((idx, idx_next), dim=1)  # (B, T+1)
            return idx

    class BigramLanguageModel(nn.Module):  # bigram.py

        def __init__(self, vocab_size):
            super().__init__()
            self.token_embedding_table = nn.Embedding(vocab_size, vocab_size)

        def forward(self, idx, targets=None):
            logits = self.token_embedding_table(idx)  # (B,T,C)
            if targets is None:
                loss = None
            else:
                B, T, C = logits.shape
                loss = F.cross_entropy(logits.view(B*T, C), targets.view(B*T))
            return logits, loss

        def generate(self, idx, max_new_tokens):
            for _ in range(max_new_tokens):
                logits, loss = self(idx)
                logits = logits[:, -1, :]  # becomes (B, C)
                probs = F.softmax(logits, dim=-1)  # (B, C)
                idx_next = torch.multinomial(probs, num_samples=1)  # (B, 1)
                idx = torch.cat((idx, idx_next), dim=1)  # (B, T+1)
            return idx

    model = GPTLanguageModel() if gpt else BigramLanguageModel(vocab_size)
    m = model.to(device)
    print(sum(p.numel() for p in m.parameters())/1e6, 'M parameters')
    optimizer = torch.optim.AdamW(model.parameters(), lr=learning_rate)
    evals = []
    for iter in range(max_iters):
        if iter % eval_interval == 0 or iter == max_iters - 1:
            losses = estimate_loss()
            evals.append((float(losses['train']), float(losses['val'])))
            print(f"step {iter}: train loss {losses['train']:.4f}, val loss {losses['val']:.4f}")
        xb, yb = get_batch('train')
        logits, loss = model(xb, yb)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
    torch.manual_seed(7)
    context = torch.zeros((1, 1), dtype=torch.long, device=device)
    sample = decode(m.generate(context, max_new_tokens=20)[0].tolist())
    return SimpleNamespace(model=m, evals=evals, sample=sample, stoi=stoi, decode=decode)


_TEXT = "to be or not to be that is the question " * 12


def _bigram_entropy(text):
    """H(next char | char) of the text's bigram counts: the best loss a bigram table can reach."""
    pairs = defaultdict(lambda: defaultdict(int))
    for a, b in zip(text, text[1:]):
        pairs[a][b] += 1
    n = len(text) - 1
    return -sum(c / n * math.log(c / sum(nx.values())) for nx in pairs.values() for c in nx.values())


def test_ng_video_lecture_bigram_reaches_the_bigram_entropy():
    with redirect_stdout(io.StringIO()) as out:
        r = ng_lecture_page(lucid, _TEXT, gpt=False, max_iters=100, device=_dev(lucid), learning_rate=1e-1)
    vocab = len(set(_TEXT))
    assert out.getvalue().startswith(f"{vocab * vocab / 1e6} M parameters")
    H = _bigram_entropy(_TEXT)
    assert r.evals[0][0] > H + 1.5  # N(0, 1) logits at init
    assert abs(r.evals[-1][0] - H) < 0.1  # the table converges to the text's bigram statistics
    assert len(r.sample) == 21 and set(r.sample) <= set(_TEXT)
    # every generated bigram occurs in the text (the table's other entries are pushed far down)
    pairs = {a + b for a, b in zip(_TEXT, _TEXT[1:])}
    assert sum(a + b in pairs for a, b in zip(r.sample[1:], r.sample[2:])) >= 17


def test_ng_video_lecture_gpt_learns_and_generates():
    dev = _dev(lucid)
    with redirect_stdout(io.StringIO()):
        r = ng_lecture_page(lucid, _TEXT, gpt=True, max_iters=41, device=dev)
        r2 = ng_lecture_page(lucid, _TEXT, gpt=True, max_iters=1, device=dev)
    assert len(r.evals) == 3  # steps 0, 20 and 40 (the last iteration)
    assert r.evals[-1][1] < r.evals[0][1] - 0.8
    assert len(r.sample) == 21 and set(r.sample) <= set(_TEXT)  # 20 > block_size: context cropped
    assert r2.evals[0] == r.evals[0]  # same seed, same init, same batches
    # one Head against NumPy: causal softmax(q k^T / sqrt(C)) v with the block's input width C
    head = r.model.blocks[0].sa.heads[0].eval()
    x = np.random.default_rng(0).standard_normal((2, 5, 16)).astype(np.float32)
    Wk, Wq, Wv = (_np(getattr(head, n).weight).astype(np.float64) for n in ("key", "query", "value"))
    att = _np_softmax(np.where(np.tril(np.ones((5, 5), bool)), (x @ Wq.T) @ (x @ Wk.T).transpose(0, 2, 1) * 16 ** -0.5,
                               -np.inf))
    np.testing.assert_allclose(_np(head(lucid.tensor(x))), att @ (x @ Wv.T), rtol=1e-4, atol=1e-5)


# ------------------------------------------------------------------ minGPT
def mingpt_page(torch):
    nn = torch.nn
    F = torch.nn.functional
    DataLoader = torch.utils.data.DataLoader
    Dataset = torch.utils.data.Dataset

    class CfgNode:
        """ a lightweight configuration class inspired by yacs """

        def __init__(self, **kwargs):
            self.__dict__.update(kwargs)

        def to_dict(self):
            return {k: v.to_dict() if isinstance(v, CfgNode) else v for k, v in self.__dict__.items()}

        def merge_from_dict(self, d):
            self.__dict__.update(d)

    CN = CfgNode

    class NewGELU(nn.Module):
        """
        Implementation of the GELU activation function currently in Google BERT repo (identical to OpenAI GPT).
        Reference: Gaussian Error Linear Units (GELU) paper: https://arxiv.org/abs/1606.08415
        """
        def forward(self, x):
            return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))

    class CausalSelfAttention(nn.Module):

        def __init__(self, config):
            super().__init__()
            assert config.n_embd % config.n_head == 0
            self.c_attn = nn.Linear(config.n_embd, 3 * config.n_embd)
            self.c_proj = nn.Linear(config.n_embd, config.n_embd)
            self.attn_dropout = nn.Dropout(config.attn_pdrop)
            self.resid_dropout = nn.Dropout(config.resid_pdrop)
            self.register_buffer("bias", torch.tril(torch.ones(config.block_size, config.block_size))
                                 .view(1, 1, config.block_size, config.block_size))
            self.n_head = config.n_head
            self.n_embd = config.n_embd

        def forward(self, x):
            B, T, C = x.size()
            q, k, v = self.c_attn(x).split(self.n_embd, dim=2)
            k = k.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)  # (B, nh, T, hs)
            q = q.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)  # (B, nh, T, hs)
            v = v.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)  # (B, nh, T, hs)
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
            att = att.masked_fill(self.bias[:, :, :T, :T] == 0, float('-inf'))
            att = F.softmax(att, dim=-1)
            att = self.attn_dropout(att)
            y = att @ v  # (B, nh, T, T) x (B, nh, T, hs) -> (B, nh, T, hs)
            y = y.transpose(1, 2).contiguous().view(B, T, C)
            y = self.resid_dropout(self.c_proj(y))
            return y

    class Block(nn.Module):
        """ an unassuming Transformer block """

        def __init__(self, config):
            super().__init__()
            self.ln_1 = nn.LayerNorm(config.n_embd)
            self.attn = CausalSelfAttention(config)
            self.ln_2 = nn.LayerNorm(config.n_embd)
            self.mlp = nn.ModuleDict(dict(
                c_fc=nn.Linear(config.n_embd, 4 * config.n_embd),
                c_proj=nn.Linear(4 * config.n_embd, config.n_embd),
                act=NewGELU(),
                dropout=nn.Dropout(config.resid_pdrop),
            ))
            m = self.mlp
            self.mlpf = lambda x: m.dropout(m.c_proj(m.act(m.c_fc(x))))  # MLP forward

        def forward(self, x):
            x = x + self.attn(self.ln_1(x))
            x = x + self.mlpf(self.ln_2(x))
            return x

    class GPT(nn.Module):
        """ GPT Language Model """

        @staticmethod
        def get_default_config():
            C = CN()
            C.model_type = 'gpt'
            C.n_layer = None
            C.n_head = None
            C.n_embd = None
            C.vocab_size = None
            C.block_size = None
            C.embd_pdrop = 0.1
            C.resid_pdrop = 0.1
            C.attn_pdrop = 0.1
            return C

        def __init__(self, config):
            super().__init__()
            assert config.vocab_size is not None
            assert config.block_size is not None
            self.block_size = config.block_size

            type_given = config.model_type is not None
            params_given = all([config.n_layer is not None, config.n_head is not None, config.n_embd is not None])
            assert type_given ^ params_given  # exactly one of these (XOR)
            if type_given:
                config.merge_from_dict({
                    'gpt-nano': dict(n_layer=3, n_head=3, n_embd=48),
                    'gpt-pico': dict(n_layer=2, n_head=2, n_embd=16),  # smaller than the original's
                }[config.model_type])

            self.transformer = nn.ModuleDict(dict(
                wte=nn.Embedding(config.vocab_size, config.n_embd),
                wpe=nn.Embedding(config.block_size, config.n_embd),
                drop=nn.Dropout(config.embd_pdrop),
                h=nn.ModuleList([Block(config) for _ in range(config.n_layer)]),
                ln_f=nn.LayerNorm(config.n_embd),
            ))
            self.lm_head = nn.Linear(config.n_embd, config.vocab_size, bias=False)

            self.apply(self._init_weights)
            for pn, p in self.named_parameters():
                if pn.endswith('c_proj.weight'):
                    torch.nn.init.normal_(p, mean=0.0, std=0.02/math.sqrt(2 * config.n_layer))

            n_params = sum(p.numel() for p in self.transformer.parameters())
            print("number of parameters: %.2fM" % (n_params/1e6,))

        def _init_weights(self, module):
            if isinstance(module, nn.Linear):
                torch.nn.init.normal_(module.weight, mean=0.0, std=0.02)
                if module.bias is not None:
                    torch.nn.init.zeros_(module.bias)
            elif isinstance(module, nn.Embedding):
                torch.nn.init.normal_(module.weight, mean=0.0, std=0.02)
            elif isinstance(module, nn.LayerNorm):
                torch.nn.init.zeros_(module.bias)
                torch.nn.init.ones_(module.weight)

        def configure_optimizers(self, train_config):
            decay = set()
            no_decay = set()
            whitelist_weight_modules = (torch.nn.Linear, )
            blacklist_weight_modules = (torch.nn.LayerNorm, torch.nn.Embedding)
            for mn, m in self.named_modules():
                for pn, p in m.named_parameters():
                    fpn = '%s.%s' % (mn, pn) if mn else pn  # full param name
                    if pn.endswith('bias'):
                        no_decay.add(fpn)
                    elif pn.endswith('weight') and isinstance(m, whitelist_weight_modules):
                        decay.add(fpn)
                    elif pn.endswith('weight') and isinstance(m, blacklist_weight_modules):
                        no_decay.add(fpn)

            param_dict = {pn: p for pn, p in self.named_parameters()}
            inter_params = decay & no_decay
            union_params = decay | no_decay
            assert len(inter_params) == 0, "parameters %s made it into both decay/no_decay sets!" % (str(inter_params), )
            assert len(param_dict.keys() - union_params) == 0, "parameters %s were not separated into either decay/no_decay set!" \
                % (str(param_dict.keys() - union_params), )

            optim_groups = [
                {"params": [param_dict[pn] for pn in sorted(list(decay))], "weight_decay": train_config.weight_decay},
                {"params": [param_dict[pn] for pn in sorted(list(no_decay))], "weight_decay": 0.0},
            ]
            optimizer = torch.optim.AdamW(optim_groups, lr=train_config.learning_rate, betas=train_config.betas)
            return optimizer

        def forward(self, idx, targets=None):
            device = idx.device
            b, t = idx.size()
            assert t <= self.block_size, f"Cannot forward sequence of length {t}, block size is only {self.block_size}"
            pos = torch.arange(0, t, dtype=torch.long, device=device).unsqueeze(0)  # shape (1, t)

            tok_emb = self.transformer.wte(idx)  # token embeddings of shape (b, t, n_embd)
            pos_emb = self.transformer.wpe(pos)  # position embeddings of shape (1, t, n_embd)
            x = self.transformer.drop(tok_emb + pos_emb)
            for block in self.transformer.h:
                x = block(x)
            x = self.transformer.ln_f(x)
            logits = self.lm_head(x)

            loss = None
            if targets is not None:
                loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1), ignore_index=-1)

            return logits, loss

        @torch.no_grad()
        def generate(self, idx, max_new_tokens, temperature=1.0, do_sample=False, top_k=None):
            for _ in range(max_new_tokens):
                idx_cond = idx if idx.size(1) <= self.block_size else idx[:, -self.block_size:]
                logits, _ = self(idx_cond)
                logits = logits[:, -1, :] / temperature
                if top_k is not None:
                    v, _ = torch.topk(logits, top_k)
                    logits[logits < v[:, [-1]]] = -float('Inf')
                probs = F.softmax(logits, dim=-1)
                if do_sample:
                    idx_next = torch.multinomial(probs, num_samples=1)
                else:
                    _, idx_next = torch.topk(probs, k=1, dim=-1)
                idx = torch.cat((idx, idx_next), dim=1)

            return idx

    class Trainer:

        @staticmethod
        def get_default_config():
            C = CN()
            C.device = 'auto'
            C.num_workers = 4
            C.max_iters = None
            C.batch_size = 64
            C.learning_rate = 3e-4
            C.betas = (0.9, 0.95)
            C.weight_decay = 0.1  # only applied on matmul weights
            C.grad_norm_clip = 1.0
            return C

        def __init__(self, config, model, train_dataset):
            self.config = config
            self.model = model
            self.optimizer = None
            self.train_dataset = train_dataset
            self.callbacks = defaultdict(list)

            if config.device == 'auto':
                self.device = 'cuda' if torch.cuda.is_available() else 'cpu'
            else:
                self.device = config.device
            self.model = self.model.to(self.device)
            print("running on device", self.device)

            self.iter_num = 0
            self.iter_time = 0.0
            self.iter_dt = 0.0

        def add_callback(self, onevent: str, callback):
            self.callbacks[onevent].append(callback)

        def set_callback(self, onevent: str, callback):
            self.callbacks[onevent] = [callback]

        def trigger_callback(self, onevent: str):
            for callback in self.callbacks.get(onevent, []):
                callback(self)

        def run(self):
            model, config = self.model, self.config
            self.optimizer = model.configure_optimizers(config)
            train_loader = DataLoader(
                self.train_dataset,
                sampler=torch.utils.data.RandomSampler(self.train_dataset, replacement=True, num_samples=int(1e10)),
                shuffle=False,
                pin_memory=True,
                batch_size=config.batch_size,
                num_workers=config.num_workers,
            )

            model.train()
            self.iter_num = 0
            self.iter_time = time.time()
            data_iter = iter(train_loader)
            while True:
                try:
                    batch = next(data_iter)
                except StopIteration:
                    data_iter = iter(train_loader)
                    batch = next(data_iter)
                batch = [t.to(self.device) for t in batch]
                x, y = batch

                logits, self.loss = model(x, y)

                model.zero_grad(set_to_none=True)
                self.loss.backward()
                torch.nn.utils.clip_grad_norm_(model.parameters(), config.grad_norm_clip)
                self.optimizer.step()

                self.trigger_callback('on_batch_end')
                self.iter_num += 1
                tnow = time.time()
                self.iter_dt = tnow - self.iter_time
                self.iter_time = tnow

                if config.max_iters is not None and self.iter_num >= config.max_iters:
                    break

    class SortDataset(Dataset):
        """ Dataset for the Sort problem. E.g. for problem length 6: Input: 0 0 2 1 0 1 -> Output: 0 0 0 1 1 2 """

        def __init__(self, split, length=6, num_digits=3):
            assert split in {'train', 'test'}
            self.split = split
            self.length = length
            self.num_digits = num_digits

        def __len__(self):
            return 10000  # ...

        def get_vocab_size(self):
            return self.num_digits

        def get_block_size(self):
            return self.length * 2 - 1

        def __getitem__(self, idx):
            while True:
                inp = torch.randint(self.num_digits, size=(self.length,), dtype=torch.long)
                if torch.rand(1).item() < 0.5:
                    if inp.unique().nelement() > self.length // 2:
                        continue
                h = hash(pickle.dumps(inp.tolist()))
                inp_split = 'test' if h % 4 == 0 else 'train'
                if inp_split == self.split:
                    break
            sol = torch.sort(inp)[0]
            cat = torch.cat((inp, sol), dim=0)
            x = cat[:-1].clone()
            y = cat[1:].clone()
            y[:self.length-1] = -1
            return x, y

    return SimpleNamespace(CN=CN, NewGELU=NewGELU, GPT=GPT, Trainer=Trainer, SortDataset=SortDataset)


def _mingpt_model(torch, M, vocab=3, block=5, pdrop=0.1):
    cfg = M.GPT.get_default_config()
    cfg.model_type = 'gpt-pico'
    cfg.vocab_size = vocab
    cfg.block_size = block
    cfg.embd_pdrop = cfg.resid_pdrop = cfg.attn_pdrop = pdrop
    with redirect_stdout(io.StringIO()) as out:
        model = M.GPT(cfg)
    return model, cfg, out.getvalue()


def test_mingpt_newgelu_groups_and_forward():
    M = mingpt_page(lucid)
    x = np.linspace(-4, 4, 17)
    np.testing.assert_allclose(_np(M.NewGELU()(lucid.tensor(x))), _np_gelu(x, "tanh"), rtol=1e-12, atol=1e-15)
    model, cfg, printed = _mingpt_model(lucid, M, vocab=7, block=6, pdrop=0.0)
    C = 16
    n_transformer = 7 * C + 6 * C + 2 * (2 * C + 3 * C * C + 3 * C + C * C + C + 2 * C + 8 * C * C + 5 * C) + 2 * C
    assert printed == "number of parameters: %.2fM\n" % (n_transformer / 1e6,) and cfg.n_embd == 16
    tc = SimpleNamespace(weight_decay=0.1, learning_rate=5e-4, betas=(0.9, 0.95))
    opt = model.configure_optimizers(tc)
    names = {id(p): n for n, p in model.named_parameters()}
    dec = sorted(names[id(p)] for p in opt.param_groups[0]["params"])
    nodec = sorted(names[id(p)] for p in opt.param_groups[1]["params"])
    assert dec == sorted(n for n in names.values() if n.endswith("weight") and (".c_" in n or n.startswith("lm_head")))
    assert len(dec) == 1 + 4 * 2 and len(nodec) == 2 + 2 + 2 * (4 + 4)  # wte, wpe, ln_f; ln_1, ln_2, 4 biases
    assert "transformer.wte.weight" in nodec and "transformer.ln_f.weight" in nodec
    model.double()
    W = _weights(model.state_dict(), 21)
    _load(lucid, model, W)
    idx, tg = _idx(22, (2, 6), 7), _idx(23, (2, 6), 7)
    tg[:, :2] = -1
    logits, loss = model(lucid.tensor(idx), lucid.tensor(tg))
    ref = _np_gpt(W, idx, 2, gelu="tanh")
    np.testing.assert_allclose(_np(logits), ref, rtol=1e-10, atol=1e-12)
    assert abs(loss.item() - _np_ce(ref, tg, ignore_index=-1)) < 1e-10
    model.eval()
    greedy = model.generate(lucid.tensor(idx[:, :2]), 6).tolist()  # 8 > block 6: cropped context
    seq = idx[:, :2]
    for _ in range(6):
        seq = np.concatenate([seq, _np_gpt(W, seq[:, -6:], 2, gelu="tanh")[:, -1].argmax(-1)[:, None]], 1)
    assert greedy == seq.tolist()
    lucid.manual_seed(3)
    s1 = model.generate(lucid.tensor(idx[:, :2]), 5, do_sample=True, top_k=2).tolist()
    lucid.manual_seed(3)
    assert model.generate(lucid.tensor(idx[:, :2]), 5, do_sample=True, top_k=2).tolist() == s1


def test_mingpt_trainer_callbacks_on_the_sort_task():
    M = mingpt_page(lucid)
    lucid.manual_seed(0)
    train_dataset = M.SortDataset('train', length=3, num_digits=3)
    x, y = train_dataset[0]
    xs, ys = x.tolist(), y.tolist()
    assert ys[:2] == [-1, -1] and xs[3:] == ys[2:-1] and ys[2:] == sorted(xs[:3])
    model, cfg, _ = _mingpt_model(lucid, M, train_dataset.get_vocab_size(), train_dataset.get_block_size(), pdrop=0.0)
    tc = M.Trainer.get_default_config()
    tc.device = _dev(lucid)
    tc.learning_rate = 1e-2
    tc.max_iters = 60
    tc.batch_size = 8
    tc.num_workers = 0
    with redirect_stdout(io.StringIO()) as out:
        trainer = M.Trainer(tc, model, train_dataset)
    assert out.getvalue() == f"running on device {tc.device}\n"
    log = []
    trainer.add_callback('on_batch_end', lambda t: log.append((t.iter_num, t.loss.item())))
    trainer.add_callback('on_batch_end', lambda t: log.append("second"))
    trainer.set_callback('on_batch_end', lambda t: log.append((t.iter_num, t.loss.item())))  # replaces both
    trainer.run()
    assert [i for i, _ in log] == list(range(60))
    last = np.mean([v for _, v in log[-5:]])
    # the split by hash(pickle.dumps(...)) changes with PYTHONHASHSEED: over 35 seeds the mean of the
    # last 5 of 60 losses was at most 0.42 (0.6 after 40 steps), under the margin below
    assert abs(log[0][1] - math.log(3)) < 0.08 and last < 0.65 * math.log(3)  # sorting 3 digits is learned
    model.eval()
    inp = lucid.tensor([[2, 0, 1], [1, 1, 0]])
    cat = model.generate(inp, 3, do_sample=False)
    assert tuple(cat.shape) == (2, 6) and cat[:, :3].tolist() == inp.tolist()


# ------------------------------------------------------------------ nano-llama31
def llama_page(torch):
    nn = torch.nn
    F = torch.nn.functional

    class ModelArgs:
        dim: int = 4096
        n_layers: int = 32
        n_heads: int = 32
        n_kv_heads: Optional[int] = None
        vocab_size: int = -1
        multiple_of: int = 256
        ffn_dim_multiplier: Optional[float] = None
        norm_eps: float = 1e-5
        rope_theta: float = 500000
        use_scaled_rope: bool = False
        max_batch_size: int = 32
        max_seq_len: int = 2048
        flash: bool = False

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
                smooth = (old_context_len / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor)
                new_freqs.append((1 - smooth) * freq / scale_factor + smooth * freq)
        return torch.tensor(new_freqs, dtype=freqs.dtype, device=freqs.device)

    def precompute_freqs_cis(dim: int, end: int, theta: float = 10000.0, use_scaled: bool = False):
        freqs = 1.0 / (theta ** (torch.arange(0, dim, 2)[: (dim // 2)].float() / dim))
        t = torch.arange(end, device=freqs.device, dtype=torch.float32)
        if use_scaled:
            freqs = apply_scaling(freqs)
        freqs = torch.outer(t, freqs)
        freqs_cis = torch.polar(torch.ones_like(freqs), freqs)  # complex64
        freqs_cis_real = torch.stack([freqs_cis.real, freqs_cis.imag], dim=-1)
        return freqs_cis_real

    def apply_rotary_emb(x, freqs_cis):
        xshaped = x.float().reshape(*x.shape[:-1], -1, 2)
        freqs_cis = freqs_cis.view(1, xshaped.size(1), 1, xshaped.size(3), 2)
        x_out2 = torch.stack(
            [
                xshaped[..., 0] * freqs_cis[..., 0] - xshaped[..., 1] * freqs_cis[..., 1],
                xshaped[..., 1] * freqs_cis[..., 0] + xshaped[..., 0] * freqs_cis[..., 1],
            ],
            -1,
        )
        x_out2 = x_out2.flatten(3)
        return x_out2.type_as(x)

    # Meta's complex form (llama/model.py, the first nano-llama31 commit)
    def precompute_freqs_cis_complex(dim: int, end: int, theta: float = 10000.0):
        freqs = 1.0 / (theta ** (torch.arange(0, dim, 2)[: (dim // 2)].float() / dim))
        t = torch.arange(end, device=freqs.device, dtype=torch.float32)
        freqs = torch.outer(t, freqs)
        freqs_cis = torch.polar(torch.ones_like(freqs), freqs)  # complex64
        return freqs_cis

    def reshape_for_broadcast(freqs_cis, x):
        ndim = x.ndim
        assert 0 <= 1 < ndim
        assert freqs_cis.shape == (x.shape[1], x.shape[-1])
        shape = [d if i == 1 or i == ndim - 1 else 1 for i, d in enumerate(x.shape)]
        return freqs_cis.view(*shape)

    def apply_rotary_emb_complex(xq, xk, freqs_cis):
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

    class KVCache(nn.Module):
        def __init__(self, batch_size, seq_length, n_kv_heads, head_dim, dtype, device):
            super().__init__()
            cache_shape = (batch_size, seq_length, n_kv_heads, head_dim)
            self.register_buffer("cache_k", torch.zeros(cache_shape, dtype=dtype, device=device))
            self.register_buffer("cache_v", torch.zeros(cache_shape, dtype=dtype, device=device))

        def update(self, start_pos, xk, xv):
            seqlen = xk.size(1)
            self.cache_k[:, start_pos: start_pos + seqlen] = xk
            self.cache_v[:, start_pos: start_pos + seqlen] = xv
            xk = self.cache_k[:, : start_pos + seqlen]
            xv = self.cache_v[:, : start_pos + seqlen]
            return xk, xv

    class Attention(nn.Module):
        def __init__(self, args: ModelArgs):
            super().__init__()
            self.flash = args.flash
            self.n_kv_heads = args.n_heads if args.n_kv_heads is None else args.n_kv_heads
            model_parallel_size = 1
            self.n_local_heads = args.n_heads // model_parallel_size
            self.n_local_kv_heads = self.n_kv_heads // model_parallel_size
            self.n_rep = self.n_local_heads // self.n_local_kv_heads
            self.head_dim = args.dim // args.n_heads
            self.wq = nn.Linear(args.dim, args.n_heads * self.head_dim, bias=False)
            self.wk = nn.Linear(args.dim, self.n_kv_heads * self.head_dim, bias=False)
            self.wv = nn.Linear(args.dim, self.n_kv_heads * self.head_dim, bias=False)
            self.wo = nn.Linear(args.n_heads * self.head_dim, args.dim, bias=False)
            self.cache = None

        def forward(self, x, start_pos: int, freqs_cis, mask):
            bsz, seqlen, _ = x.shape
            xq, xk, xv = self.wq(x), self.wk(x), self.wv(x)
            xq = xq.view(bsz, seqlen, self.n_local_heads, self.head_dim)
            xk = xk.view(bsz, seqlen, self.n_local_kv_heads, self.head_dim)
            xv = xv.view(bsz, seqlen, self.n_local_kv_heads, self.head_dim)
            xq = apply_rotary_emb(xq, freqs_cis)
            xk = apply_rotary_emb(xk, freqs_cis)
            if self.cache is not None:
                xk, xv = self.cache.update(start_pos, xk, xv)
            xk = repeat_kv(xk, self.n_rep)  # (bs, cache_len + seqlen, n_local_heads, head_dim)
            xv = repeat_kv(xv, self.n_rep)  # (bs, cache_len + seqlen, n_local_heads, head_dim)
            xq, xk, xv = (x.transpose(1, 2) for x in (xq, xk, xv))
            if self.flash:
                output = F.scaled_dot_product_attention(xq, xk, xv, mask)
            else:
                scores = torch.matmul(xq, xk.transpose(2, 3)) / math.sqrt(self.head_dim)
                if mask is not None:
                    scores = scores + mask  # (bs, n_local_heads, seqlen, cache_len + seqlen)
                scores = F.softmax(scores.float(), dim=-1).type_as(xq)
                output = torch.matmul(scores, xv)  # (bs, n_local_heads, seqlen, head_dim)
            output = output.transpose(1, 2).contiguous().view(bsz, seqlen, -1)
            proj = self.wo(output)
            return proj

    class FeedForward(nn.Module):
        def __init__(self, dim: int, hidden_dim: int, multiple_of: int, ffn_dim_multiplier: Optional[float]):
            super().__init__()
            hidden_dim = int(2 * hidden_dim / 3)
            if ffn_dim_multiplier is not None:
                hidden_dim = int(ffn_dim_multiplier * hidden_dim)
            hidden_dim = multiple_of * ((hidden_dim + multiple_of - 1) // multiple_of)
            self.w1 = nn.Linear(dim, hidden_dim, bias=False)
            self.w2 = nn.Linear(hidden_dim, dim, bias=False)
            self.w3 = nn.Linear(dim, hidden_dim, bias=False)

        def forward(self, x):
            return self.w2(F.silu(self.w1(x)) * self.w3(x))

    class TransformerBlock(nn.Module):
        def __init__(self, args: ModelArgs):
            super().__init__()
            self.n_heads = args.n_heads
            self.dim = args.dim
            self.head_dim = args.dim // args.n_heads
            self.attention = Attention(args)
            self.feed_forward = FeedForward(dim=args.dim, hidden_dim=4 * args.dim, multiple_of=args.multiple_of,
                                            ffn_dim_multiplier=args.ffn_dim_multiplier)
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
            self.layers = nn.ModuleList(TransformerBlock(params) for _ in range(params.n_layers))
            self.norm = RMSNorm(params.dim, eps=params.norm_eps)
            self.output = nn.Linear(params.dim, params.vocab_size, bias=False)
            self.freqs_cis = precompute_freqs_cis(params.dim // params.n_heads, params.max_seq_len * 2,
                                                  params.rope_theta, params.use_scaled_rope)

        def forward_inference(self, tokens, start_pos: int):
            _bsz, seqlen = tokens.shape
            h = self.tok_embeddings(tokens)
            self.freqs_cis = self.freqs_cis.to(h.device)
            freqs_cis = self.freqs_cis[start_pos: start_pos + seqlen]
            mask = None
            if seqlen > 1:
                mask = torch.full((seqlen, seqlen), float("-inf"), device=tokens.device)
                mask = torch.triu(mask, diagonal=1)
                mask = torch.hstack([torch.zeros((seqlen, start_pos), device=tokens.device), mask]).type_as(h)
            for layer in self.layers:
                h = layer(h, start_pos, freqs_cis, mask)
            h = self.norm(h)
            output = self.output(h).float()
            return output

        def forward_loss(self, inputs, targets, ignore_index=-100):
            _bsz, seqlen = inputs.shape
            h = self.tok_embeddings(inputs)
            self.freqs_cis = self.freqs_cis.to(h.device)
            freqs_cis = self.freqs_cis[:seqlen]
            mask = torch.full((seqlen, seqlen), float("-inf"), device=inputs.device)
            mask = torch.triu(mask, diagonal=1)
            mask = mask.type_as(h)
            start_pos = -1  # -1 disables KV caching logic
            for layer in self.layers:
                h = layer(h, start_pos, freqs_cis, mask)
            h = self.norm(h)
            logits = self.output(h).float()
            loss = F.cross_entropy(input=logits.transpose(1, 2), target=targets, reduction="mean",
                                   ignore_index=ignore_index)
            return loss

        def configure_optimizers(self, learning_rate, weight_decay=0.0, betas=(0.9, 0.97), device_type='cuda'):
            train_params = []
            for param in self.parameters():
                train_params.append(param)
            print("number of parameters: ", sum(p.numel() for p in self.parameters()))
            print("number of trainable parameters: ", sum(p.numel() for p in train_params))
            fused_available = 'fused' in inspect.signature(torch.optim.AdamW).parameters
            use_fused = fused_available and device_type == 'cuda'
            extra_args = dict(fused=True) if use_fused else dict()
            optimizer = torch.optim.AdamW(train_params, lr=learning_rate, betas=betas, **extra_args)
            return optimizer

    def sample_top_p(probs, p, generator):
        probs_sort, probs_idx = torch.sort(probs, dim=-1, descending=True)
        probs_sum = torch.cumsum(probs_sort, dim=-1)
        mask = probs_sum - probs_sort > p
        probs_sort[mask] = 0.0
        probs_sort.div_(probs_sort.sum(dim=-1, keepdim=True))
        next_token = torch.multinomial(probs_sort, num_samples=1, generator=generator)
        next_token = torch.gather(probs_idx, -1, next_token)
        return next_token

    @torch.inference_mode()
    def generate(model, prompt_tokens, sample_rng, max_gen_len, temperature=0.6, top_p=0.9, echo=False,
                 pad_id=-1, stop_tokens=(), device="cpu"):
        """``Llama.generate`` (the tokenizer's ``pad_id``/``stop_tokens`` passed in)."""
        params = model.params
        bsz = len(prompt_tokens)
        assert bsz <= params.max_batch_size, (bsz, params.max_batch_size)
        min_prompt_len = min(len(t) for t in prompt_tokens)
        max_prompt_len = max(len(t) for t in prompt_tokens)
        assert max_prompt_len <= params.max_seq_len
        total_len = min(params.max_seq_len, max_gen_len + max_prompt_len)
        for block in model.layers:
            layer_dtype = block.attention.wq.weight.dtype
            layer_device = block.attention.wq.weight.device
            block.attention.cache = KVCache(batch_size=bsz, seq_length=total_len, n_kv_heads=params.n_kv_heads,
                                            head_dim=params.dim // params.n_heads, dtype=layer_dtype,
                                            device=layer_device)
        tokens = torch.full((bsz, total_len), pad_id, dtype=torch.long, device=device)
        for k, t in enumerate(prompt_tokens):
            tokens[k, : len(t)] = torch.tensor(t, dtype=torch.long, device=device)
        prev_pos = 0
        eos_reached = torch.tensor([False] * bsz, device=device)
        input_text_mask = tokens != pad_id
        if min_prompt_len == total_len:
            logits = model.forward_inference(tokens, prev_pos)
        stop_tokens = torch.tensor(list(stop_tokens))
        all_logits = []
        for cur_pos in range(min_prompt_len, total_len):
            logits = model.forward_inference(tokens[:, prev_pos:cur_pos], prev_pos)
            all_logits.append(logits[:, -1].clone())
            if temperature > 0:
                probs = torch.softmax(logits[:, -1] / temperature, dim=-1)
                next_token = sample_top_p(probs, top_p, sample_rng)
            else:
                next_token = torch.argmax(logits[:, -1], dim=-1)
            next_token = next_token.reshape(-1)
            next_token = torch.where(input_text_mask[:, cur_pos], tokens[:, cur_pos], next_token)
            tokens[:, cur_pos] = next_token
            eos_reached |= (~input_text_mask[:, cur_pos]) & (torch.isin(next_token, stop_tokens))
            prev_pos = cur_pos
            if all(eos_reached):
                break
        out_tokens = []
        for i, toks in enumerate(tokens.tolist()):
            start = 0 if echo else len(prompt_tokens[i])
            toks = toks[start: len(prompt_tokens[i]) + max_gen_len]
            for stop_token in stop_tokens.tolist():
                try:
                    eos_idx = toks.index(stop_token)
                    toks = toks[:eos_idx]
                except ValueError:
                    pass
            out_tokens.append(toks)
        for block in model.layers:
            block.attention.cache = None
        return out_tokens, all_logits, tokens

    return SimpleNamespace(**{k: v for k, v in locals().items() if not k.startswith("_")})


_LARGS = dict(dim=16, n_layers=2, n_heads=4, n_kv_heads=2, vocab_size=20, multiple_of=8, norm_eps=1e-5,
              rope_theta=10000.0, max_batch_size=3, max_seq_len=12)


def _llama(torch, L, seed=30, **over):
    torch.manual_seed(0)
    model = L.Transformer(L.ModelArgs(**{**_LARGS, **over}))
    if seed is not None:
        rng = np.random.default_rng(seed)
        sd = model.state_dict()
        model.load_state_dict({k: torch.tensor((1 + 0.1 * rng.standard_normal(v.shape)) if "norm" in k
                                               else 0.3 * rng.standard_normal(v.shape), dtype=v.dtype)
                               for k, v in sd.items()})
    return model.to(_dev(torch) if torch is lucid else "cpu")


def test_llama_rope_rmsnorm_repeat_kv_against_numpy():
    L = llama_page(lucid)
    fr = _np(L.precompute_freqs_cis(4, 6, theta=10000.0))
    ang = np.arange(6)[:, None] * (1.0 / 10000.0 ** (np.arange(0, 4, 2) / 4))[None]
    np.testing.assert_allclose(fr, np.stack([np.cos(ang), np.sin(ang)], -1), rtol=1e-5, atol=1e-6)
    xq = np.random.default_rng(0).standard_normal((2, 6, 4, 4)).astype(np.float32)
    xk = np.random.default_rng(1).standard_normal((2, 6, 2, 4)).astype(np.float32)
    real_q = _np(L.apply_rotary_emb(lucid.tensor(xq), L.precompute_freqs_cis(4, 6)))
    cq, ck = L.apply_rotary_emb_complex(lucid.tensor(xq), lucid.tensor(xk), L.precompute_freqs_cis_complex(4, 6))
    zq = (xq[..., 0::2] + 1j * xq[..., 1::2]) * np.exp(1j * ang)[None, :, None]
    ref = np.stack([zq.real, zq.imag], -1).reshape(xq.shape)
    np.testing.assert_allclose(real_q, ref, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(_np(cq), ref, rtol=1e-5, atol=1e-5)
    assert cq.dtype == lucid.float32 and tuple(ck.shape) == xk.shape
    # apply_scaling (use_scaled_rope): theta 5e5, head_dim 4: freqs 1 (kept) and 1/707.1 (smoothed)
    f = _np(L.apply_scaling(lucid.tensor([1.0, 500000.0 ** -0.5, 1e-4])))
    wl = 2 * math.pi / (500000.0 ** -0.5)
    smooth = (8192 / wl - 1) / 3
    np.testing.assert_allclose(f, [1.0, (1 - smooth) * 500000.0 ** -0.5 / 8 + smooth * 500000.0 ** -0.5, 1e-4 / 8],
                               rtol=1e-6)
    x = lucid.tensor(xk)
    np.testing.assert_array_equal(_np(L.repeat_kv(x, 2)), np.repeat(xk, 2, axis=2))
    np.testing.assert_array_equal(_np(L.repeat_kv(x, 2)), _np(lucid.repeat_interleave(x, dim=2, repeats=2)))
    norm = L.RMSNorm(4, eps=1e-5)
    with lucid.no_grad():
        norm.weight.copy_(lucid.tensor([1.0, 2.0, 0.5, -1.0]))
    out = norm(lucid.tensor(xq, dtype=lucid.float64))
    assert out.dtype == lucid.float64
    np.testing.assert_allclose(_np(out), xq / np.sqrt((xq.astype(np.float64) ** 2).mean(-1, keepdims=True) + 1e-5)
                               * [1.0, 2.0, 0.5, -1.0], rtol=1e-6)


def test_llama_kv_cache_decode_equals_full_forward_and_loss():
    L = llama_page(lucid)
    for flash in (False, True):
        model = _llama(lucid, L, flash=flash)
        toks = lucid.tensor(_idx(31, (3, 9), 20))
        full = model.forward_inference(toks, 0)  # (3, 9, 20), no cache
        loss = model.forward_loss(toks[:, :-1], toks[:, 1:])
        ref = _np_ce(_np(full)[:, :-1].astype(np.float64), _np(toks)[:, 1:])
        assert abs(loss.item() - ref) < 1e-5
        # decode with the cache: a 4-token prompt, then one token at a time, equals the full forward
        for block in model.layers:
            block.attention.cache = L.KVCache(3, 9, 2, 4, lucid.float32, model.output.weight.device)
        with lucid.no_grad():
            steps = [model.forward_inference(toks[:, :4], 0)]
            steps += [model.forward_inference(toks[:, p:p + 1], p) for p in range(4, 9)]
        np.testing.assert_allclose(np.concatenate([_np(s) for s in steps], 1), _np(full), rtol=1e-4, atol=2e-5)
        k0 = _np(model.layers[0].attention.cache.cache_k)
        assert k0.shape == (3, 9, 2, 4) and np.abs(k0).min() > 0  # every slot written once
    # the generation loop with temperature 0 is greedy decoding of the full forward
    out, logits, tokens = L.generate(model, [[1, 2, 3], [4, 5], [6, 7, 8, 9]], None, max_gen_len=4, temperature=0.0,
                                     device=_dev(lucid))
    assert [len(o) for o in out] == [4, 4, 4] and tuple(tokens.shape) == (3, 8)
    t = _np(tokens)
    with lucid.no_grad():
        f = _np(model.forward_inference(tokens, 0))
    assert (t[0, 3:7] == f[0, 2:6].argmax(-1)).all() and (t[1, 2:6] == f[1, 1:5].argmax(-1)).all()
    assert t[2, :4].tolist() == [6, 7, 8, 9]  # a prompt's own tokens are kept (input_text_mask)
    # reference.py's prompt log-probabilities (logprobs=True): padding is ignore_index
    pad_id = -1
    tk = lucid.tensor([[1, 2, 3, pad_id], [4, 5, 6, 7]])
    with lucid.no_grad():
        logits = model.forward_inference(tk.clamp(min=0), 0)
    ce = lucid.nn.functional.cross_entropy(input=logits.transpose(1, 2), target=tk, reduction="none",
                                           ignore_index=pad_id)
    token_logprobs = -ce
    lg = _np(logits).astype(np.float64)
    lp = lg - np.log(np.exp(lg).sum(-1, keepdims=True))
    ref = np.take_along_axis(lp, np.maximum(_np(tk), 0)[..., None], -1)[..., 0] * (_np(tk) != pad_id)
    np.testing.assert_allclose(_np(token_logprobs), ref, rtol=1e-5, atol=1e-6)
    assert _np(ce)[0, 3] == 0 and not np.signbit(_np(ce)[0, 3])  # +0.0 where ignored, as PyTorch's
    assert all(b.attention.cache is None for b in model.layers)


def test_llama_sample_top_p_and_training():
    L = llama_page(lucid)
    probs = lucid.tensor([[0.5, 0.05, 0.3, 0.15], [0.1, 0.1, 0.1, 0.7]])
    g = lucid.Generator(device=_dev(lucid))
    draws = []
    for seed in (1337, 1337):
        g.manual_seed(seed)
        draws.append([L.sample_top_p(probs.clone(), 0.65, g).view(-1).tolist() for _ in range(40)])
    assert draws[0] == draws[1]
    # p=0.65: row 0 keeps {0, 2} (the mass before 0.3 is 0.5, before 0.15 it is 0.8), row 1 keeps {3}
    assert {d[0] for d in draws[0]} == {0, 2} and {d[1] for d in draws[0]} == {3}
    model = _llama(lucid, L, seed=None)
    with redirect_stdout(io.StringIO()) as out:
        opt = model.configure_optimizers(learning_rate=1e-2, device_type="cpu")
    n = sum(p.numel() for p in model.parameters())
    hidden = 8 * ((int(2 * 64 / 3) + 7) // 8)  # SwiGLU hidden size rounded to multiple_of=8: 48
    assert n == 20 * 16 * 2 + 16 + 2 * (16 * 16 * 2 + 16 * 8 * 2 + 3 * 16 * hidden + 2 * 16)
    assert out.getvalue() == f"number of parameters:  {n}\nnumber of trainable parameters:  {n}\n"
    seq = lucid.tensor(np.tile(np.arange(5), 4)[None, :9].repeat(2, 0))
    losses = []
    for step in range(12):
        opt.zero_grad()
        loss = model.forward_loss(seq[:, :-1], seq[:, 1:])
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < 0.3 * losses[0]


# ------------------------------------------------------------------ parity with PyTorch
def test_nanogpt_torch_parity(tmp_path):
    torch = pytest.importorskip("torch")
    for slow in (False, True):
        _, lm, _ = _nanogpt(lucid, slow=slow, seed=40, double=False)
        _, tm, _ = _nanogpt(torch, slow=slow, seed=40, double=False)
        idx, tg = _idx(41, (3, 8), 20), _idx(42, (3, 8), 20)
        tg[1, 2:5] = -1
        ll, lloss = lm(lucid.tensor(idx), lucid.tensor(tg))
        tl, tloss = tm(torch.tensor(idx), torch.tensor(tg))
        np.testing.assert_allclose(_np(ll), _np(tl), rtol=1e-5, atol=1e-5)
        lloss.backward()
        tloss.backward()
        for (n, p), (_, q) in zip(lm.named_parameters(), tm.named_parameters()):
            np.testing.assert_allclose(_np(p.grad), _np(q.grad), rtol=1e-4, atol=1e-6, err_msg=n)
        lm.eval(), tm.eval()
        start = _idx(43, (2, 2), 20)
        assert lm.generate(lucid.tensor(start), 9, top_k=1).tolist() == tm.generate(torch.tensor(start), 9, top_k=1).tolist()


def _no_key_bias(k, a, b):
    """The key part of ``c_attn.bias`` gets a zero gradient in exact arithmetic (a constant added to
    every score of a softmax row): AdamW normalises the rounding noise into full-size steps of
    either sign, so the two libraries' values there are not comparable."""
    if k.endswith("attn.c_attn.bias"):
        n = a.shape[0] // 3
        return np.delete(a, np.s_[n:2 * n]), np.delete(b, np.s_[n:2 * n])
    return a, b


def test_nanogpt_train_loop_torch_parity(tmp_path):
    torch = pytest.importorskip("torch")
    data_dir = str(tmp_path / "data")
    _write_data(data_dir)
    rng = np.random.default_rng(44)
    offsets = [rng.integers(0, 392, 4) for _ in range(80)]
    M = nanogpt_model(lucid)
    with redirect_stdout(io.StringIO()):
        W = _weights(M.GPT(M.GPTConfig(**{**_TINY, "vocab_size": 12})).state_dict(), 45, std=0.1)
    res = {}
    for mod in (lucid, torch):
        it = iter(offsets)
        with redirect_stdout(io.StringIO()) as out:
            r = nanogpt_train_page(mod, nanogpt_model(mod), str(tmp_path / mod.__name__), data_dir, _dev(mod),
                                   max_iters=8, randint=lambda hi, size: (next(it) % hi).tolist(), W=W)
        res[mod.__name__] = (out.getvalue(), r)
    pat = r"(?:step|iter) (\d+): (?:train )?loss ([\d.]+)"
    le, te = _parse(res["lucid"][0], pat), _parse(res["torch"][0], pat)
    assert len(le) == len(te) == 12
    np.testing.assert_allclose(le, te, atol=2e-4)  # printed with 4 decimals
    np.testing.assert_allclose(res["lucid"][1].lrs, res["torch"][1].lrs, rtol=1e-15)
    for (k, a), b in zip(res["lucid"][1].model.state_dict().items(), res["torch"][1].model.state_dict().values()):
        np.testing.assert_allclose(*_no_key_bias(k, _np(a), _np(b)), rtol=1e-3, atol=2e-5, err_msg=k)


def test_build_nanogpt_torch_parity():
    torch = pytest.importorskip("torch")
    lucid.manual_seed(0)
    with redirect_stdout(io.StringIO()):
        W = _weights(build_nanogpt_page(lucid, _build_tokens(), "cpu", max_steps=0).model.state_dict(), 46, std=0.1)
    before = (lucid.get_float32_matmul_precision(), torch.get_float32_matmul_precision())
    try:
        res = []
        for mod in (lucid, torch):
            with redirect_stdout(io.StringIO()) as out:
                r = build_nanogpt_page(mod, _build_tokens(), _dev(mod), W=W, max_steps=8)
            res.append((_parse(out.getvalue(), r"step +(\d+) \| loss: ([\d.]+) \| lr ([\d.e+-]+) \| norm: ([\d.]+)"), r))
    finally:
        lucid.set_float32_matmul_precision(before[0])
        torch.set_float32_matmul_precision(before[1])
    (ls, lr_), (ts, tr) = res
    np.testing.assert_allclose(ls, ts, rtol=1e-4, atol=2e-6)
    np.testing.assert_allclose(lr_.norms, tr.norms, rtol=1e-4)
    for k in lr_.final:
        np.testing.assert_allclose(*_no_key_bias(k, lr_.final[k], tr.final[k]), rtol=1e-3, atol=2e-5, err_msg=k)


def test_ng_video_lecture_torch_parity():
    torch = pytest.importorskip("torch")
    outs = []
    for mod in (lucid, torch):
        with redirect_stdout(io.StringIO()):
            r = ng_lecture_page(mod, _TEXT, gpt=True, max_iters=0, device=_dev(mod))
        model = r.model.eval()
        if not outs:
            W = {k: 0.3 * np.random.default_rng(47).standard_normal(tuple(v.shape)) for k, v in model.state_dict().items()}
        model.load_state_dict({k: mod.tensor(v, dtype=mod.float32) for k, v in W.items()})
        idx, tg = _idx(48, (3, 8), len(set(_TEXT))), _idx(49, (3, 8), len(set(_TEXT)))
        logits, loss = model(mod.tensor(idx), mod.tensor(tg))
        loss.backward()
        outs.append((_np(logits), loss.item(), [_np(p.grad) for p in model.parameters()]))
    np.testing.assert_allclose(outs[0][0], outs[1][0], rtol=1e-5, atol=1e-5)
    assert abs(outs[0][1] - outs[1][1]) < 1e-5
    for a, b in zip(outs[0][2], outs[1][2]):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6)


def test_mingpt_torch_parity():
    torch = pytest.importorskip("torch")
    outs = []
    for mod in (lucid, torch):
        model, _, _ = _mingpt_model(mod, mingpt_page(mod), vocab=7, block=6, pdrop=0.0)
        if not outs:
            W = _weights(model.state_dict(), 50, std=0.2)
        _load(mod, model, W)
        idx, tg = _idx(51, (2, 6), 7), _idx(52, (2, 6), 7)
        tg[:, :2] = -1
        logits, loss = model(mod.tensor(idx), mod.tensor(tg))
        loss.backward()
        model.eval()
        outs.append((_np(logits), loss.item(), [_np(p.grad) for p in model.parameters()],
                     model.generate(mod.tensor(idx[:, :2]), 7).tolist()))
    np.testing.assert_allclose(outs[0][0], outs[1][0], rtol=1e-5, atol=1e-5)
    assert abs(outs[0][1] - outs[1][1]) < 1e-5 and outs[0][3] == outs[1][3]
    for a, b in zip(outs[0][2], outs[1][2]):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6)


def test_llama_torch_parity():
    torch = pytest.importorskip("torch")
    outs = []
    for mod in (lucid, torch):
        L = llama_page(mod)
        model = _llama(mod, L, seed=53, flash=True)
        toks = mod.tensor(_idx(54, (3, 9), 20))
        full = model.forward_inference(toks, 0)
        loss = model.forward_loss(toks[:, :-1], toks[:, 1:])
        loss.backward()
        out, _, _ = L.generate(model, [[1, 2, 3], [4, 5], [6, 7, 8, 9]], None, max_gen_len=5, temperature=0.0,
                               device=_dev(mod))
        xq = mod.tensor(np.random.default_rng(55).standard_normal((3, 9, 2, 4)), dtype=mod.float32)
        cq, _ = L.apply_rotary_emb_complex(xq, xq, L.precompute_freqs_cis_complex(4, 9))
        outs.append((_np(full), loss.item(), [_np(p.grad) for p in model.parameters()], out, _np(cq)))
    np.testing.assert_allclose(outs[0][0], outs[1][0], rtol=1e-5, atol=1e-5)
    assert abs(outs[0][1] - outs[1][1]) < 1e-5 and outs[0][3] == outs[1][3]
    for a, b in zip(outs[0][2], outs[1][2]):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(outs[0][4], outs[1][4], rtol=1e-6, atol=1e-5)
