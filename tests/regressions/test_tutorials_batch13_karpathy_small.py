"""Andrej Karpathy's smaller educational code run on Lucid (``import lucid as torch``), batch 13b:

- ``karpathy/makemore``'s ``makemore.py``: ``CharDataset`` (``x[1:1+len(ix)] = ix``, ``y[len(ix)+1:] = -1``),
  ``create_datasets`` on a ``torch.randperm`` split, the six models (``Transformer`` with its
  ``CausalSelfAttention`` and ``NewGELU``, ``Bigram``, the Bengio ``MLP`` with ``torch.roll``, ``RNN`` with
  the hand-written ``RNNCell``/``GRUCell``, the causal ``BoW``), ``cross_entropy(ignore_index=-1)``,
  ``generate`` (``topk`` cropping by ``logits[logits < v[:, [-1]]] = -inf``, ``multinomial``), ``print_samples``,
  ``evaluate`` under ``inference_mode``, and the ``InfiniteDataLoader`` (``RandomSampler(replacement=True,
  num_samples=int(1e10))``) feeding ``AdamW``.
- ``karpathy/nn-zero-to-hero``, makemore part 4 "becoming a backprop ninja": the chunked forward pass of the
  2-layer MLP with batchnorm, ``retain_grad`` on every intermediate, the manual backward of exercise 1 checked
  with the notebook's ``cmp``, the one-line cross-entropy (exercise 2) and batchnorm (exercise 3) backward, and
  the exercise 4 training loop under ``no_grad`` with the manual gradients only; in float32 (as the notebook)
  and again in float64; all against a NumPy float64 recomputation of the loss and gradients.
  Part 3's "PyTorch-ifying" ``Linear``/``BatchNorm1d``/``Tanh`` classes with the Kaiming gain 5/3: the printed
  activation and gradient statistics (``layer %d (%10s): mean %+.2f, std %.2f, saturated: %.2f%%``),
  ``torch.histogram(t, density=True)`` and the update-to-data ratios.
- ``karpathy/lecun1989-repro``'s ``repro.py``: the 1989 ConvNet (``F.pad`` with -1 background, hand-made
  weight sharing of H2 through three sliced ``conv2d``s, tanh, MSE on +-1 targets, one-example SGD).
- ``karpathy/pytorch-made``'s ``made.py``: ``MaskedLinear`` (``mask.data.copy_(torch.from_numpy(uint8 mask.T))``),
  ``MADE`` with order/connectivity sampling from ``np.random.RandomState`` and the script's own check of the
  autoregressive property by backpropagation.
- ``karpathy/pytorch-normalizing-flows``'s ``nflib``: ``AffineConstantFlow``, ``ActNorm``, ``AffineHalfFlow``
  (RealNVP/NICE), ``SlowMAF``, ``MAF``/``IAF`` over the ``ARMLP`` MADE, ``Invertible1x1Conv``
  (``torch.lu_unpack(*Q.lu())``, ``nn.init.orthogonal_``), the neural spline flows ``NSF_AR``/``NSF_CL`` with
  the rational-quadratic spline ``RQS``, ``NormalizingFlowModel`` with the notebook's logistic prior
  ``TransformedDistribution(Uniform(0, 1), SigmoidTransform().inv)``, trained a few Adam steps.
- ``karpathy/deep-vector-quantization``: ``dvq/model/quantize.py``'s ``VQVAEQuantize`` (nearest code by the
  expanded distance, the commitment cost times ``kld_scale``, the straight-through estimator) and
  ``GumbelQuantize`` (``F.gumbel_softmax(hard=...)``, ``einsum('b n h w, n d -> b d h w', ...)``, the KL to the
  uniform prior); ``dvq/model/deepmind_enc_dec.py``'s encoder/decoder (``ResBlock`` with ``nn.ReLU(inplace=True)``
  and ``out += x``, strided ``Conv2d``/``ConvTranspose2d``), ``dvq/model/loss.py``'s ``Normal`` and
  ``dvq/vqvae.py``'s ``VQVAE`` (``training_step``, ``validation_step`` with the code perplexity,
  ``configure_optimizers``' decay/no-decay split over ``named_modules``/``named_parameters`` into ``AdamW``
  groups, ``cos_anneal``).

Data are synthetic and sizes tiny. Each page is a function of the module it is handed as ``torch``; the
parity tests run the same text on PyTorch where it is installed. The tests without PyTorch check against
NumPy recomputations, closed forms and float64 finite differences.

Adapted: makemore's ``create_datasets`` takes the text instead of a file name, ``print_samples`` takes
``top_k``/``do_sample``, the ``InfiniteDataLoader`` runs with ``num_workers=0`` and ``pin_memory=False``, the
checkpoint goes to a buffer, and the configs are tiny; the notebooks and scripts run with smaller sizes and
steps (MADE's check with D=6 and hidden layers of 20-23, the 1989 ConvNet on 16 synthetic images), and take
optional fixed weights/batches so that the parity tests feed both libraries the same numbers (their generators'
streams differ); part 4's exercise 4 records its first step's manual gradients; the flows run in float64
through ``set_default_dtype`` (their ``torch.zeros(...)`` buffers follow the default dtype), with weights filled
from NumPy (``LeafParam``/``NSF_AR`` start from ``torch.Tensor(...)``, uninitialised memory) and
``Invertible1x1Conv``'s fixed permutation ``P`` set from a seeded one; ``VQVAEQuantize``'s k-means
initialisation (SciPy's ``kmeans2``) is replaced by setting ``data_initialized`` and the codebook by hand;
``VQVAE`` is a ``nn.Module`` with a ``log`` stub in place of the ``pl.LightningModule``, and its
``configure_optimizers`` also returns the two name sets. Lucid's ``autograd.grad(y, x)`` with a bare ``x``
returns a bare gradient (README "Differences from PyTorch"): the tests write ``grad(y, [x])[0]``.

Fixed on the way: ``RandomSampler(replacement=True, num_samples=int(1e10))`` drew every index up front
(``MemoryError: Unable to allocate 74.5 GiB``) — makemore's ``InfiniteDataLoader`` could not start; it now
draws lazily, 32 at a time, as PyTorch (the same stream as one draw; with no generator, from a private one
seeded from the global one when iteration starts, so draws between batches do not shift it).
"""
import io
import math
import re
import zlib
from contextlib import redirect_stdout
from dataclasses import dataclass
from importlib import import_module
from types import SimpleNamespace

import numpy as np
import pytest

import lucid
import lucid.distributions  # noqa: F401
import lucid.nn  # noqa: F401
import lucid.optim  # noqa: F401
import lucid.utils.data  # noqa: F401


# -----------------------------------------------------------------------------
# karpathy/makemore: makemore.py


def makemore_page(torch, words, seed_weights=None, steps=0, args_device=None):
    nn = torch.nn
    F = torch.nn.functional
    Dataset = torch.utils.data.Dataset
    DataLoader = import_module(torch.__name__ + ".utils.data.dataloader").DataLoader
    args = SimpleNamespace(device=args_device or str(torch.empty(0).device), top_k=-1)
    out = {}

    @dataclass
    class ModelConfig:
        block_size: int = None # length of the input sequences of integers
        vocab_size: int = None # the input integers are in range [0 .. vocab_size -1]
        # parameters below control the sizes of each model slightly differently
        n_layer: int = 4
        n_embd: int = 64
        n_embd2: int = 64
        n_head: int = 4

    class NewGELU(nn.Module):
        def forward(self, x):
            return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))

    class CausalSelfAttention(nn.Module):
        def __init__(self, config):
            super().__init__()
            assert config.n_embd % config.n_head == 0
            # key, query, value projections for all heads, but in a batch
            self.c_attn = nn.Linear(config.n_embd, 3 * config.n_embd)
            # output projection
            self.c_proj = nn.Linear(config.n_embd, config.n_embd)
            # causal mask to ensure that attention is only applied to the left in the input sequence
            self.register_buffer("bias", torch.tril(torch.ones(config.block_size, config.block_size))
                                         .view(1, 1, config.block_size, config.block_size))
            self.n_head = config.n_head
            self.n_embd = config.n_embd

        def forward(self, x):
            B, T, C = x.size() # batch size, sequence length, embedding dimensionality (n_embd)

            # calculate query, key, values for all heads in batch and move head forward to be the batch dim
            q, k ,v  = self.c_attn(x).split(self.n_embd, dim=2)
            k = k.view(B, T, self.n_head, C // self.n_head).transpose(1, 2) # (B, nh, T, hs)
            q = q.view(B, T, self.n_head, C // self.n_head).transpose(1, 2) # (B, nh, T, hs)
            v = v.view(B, T, self.n_head, C // self.n_head).transpose(1, 2) # (B, nh, T, hs)

            # causal self-attention; Self-attend: (B, nh, T, hs) x (B, nh, hs, T) -> (B, nh, T, T)
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
            att = att.masked_fill(self.bias[:,:,:T,:T] == 0, float('-inf'))
            att = F.softmax(att, dim=-1)
            y = att @ v # (B, nh, T, T) x (B, nh, T, hs) -> (B, nh, T, hs)
            y = y.transpose(1, 2).contiguous().view(B, T, C) # re-assemble all head outputs side by side

            # output projection
            y = self.c_proj(y)
            return y

    class Block(nn.Module):
        """ an unassuming Transformer block """

        def __init__(self, config):
            super().__init__()
            self.ln_1 = nn.LayerNorm(config.n_embd)
            self.attn = CausalSelfAttention(config)
            self.ln_2 = nn.LayerNorm(config.n_embd)
            self.mlp = nn.ModuleDict(dict(
                c_fc    = nn.Linear(config.n_embd, 4 * config.n_embd),
                c_proj  = nn.Linear(4 * config.n_embd, config.n_embd),
                act     = NewGELU(),
            ))
            m = self.mlp
            self.mlpf = lambda x: m.c_proj(m.act(m.c_fc(x))) # MLP forward

        def forward(self, x):
            x = x + self.attn(self.ln_1(x))
            x = x + self.mlpf(self.ln_2(x))
            return x

    class Transformer(nn.Module):
        """ Transformer Language Model, exactly as seen in GPT-2 """

        def __init__(self, config):
            super().__init__()
            self.block_size = config.block_size

            self.transformer = nn.ModuleDict(dict(
                wte = nn.Embedding(config.vocab_size, config.n_embd),
                wpe = nn.Embedding(config.block_size, config.n_embd),
                h = nn.ModuleList([Block(config) for _ in range(config.n_layer)]),
                ln_f = nn.LayerNorm(config.n_embd),
            ))
            self.lm_head = nn.Linear(config.n_embd, config.vocab_size, bias=False)

            # report number of parameters (note we don't count the decoder parameters in lm_head)
            n_params = sum(p.numel() for p in self.transformer.parameters())
            print("number of parameters: %.2fM" % (n_params/1e6,))

        def get_block_size(self):
            return self.block_size

        def forward(self, idx, targets=None):
            device = idx.device
            b, t = idx.size()
            assert t <= self.block_size, f"Cannot forward sequence of length {t}, block size is only {self.block_size}"
            pos = torch.arange(0, t, dtype=torch.long, device=device).unsqueeze(0) # shape (1, t)

            # forward the GPT model itself
            tok_emb = self.transformer.wte(idx) # token embeddings of shape (b, t, n_embd)
            pos_emb = self.transformer.wpe(pos) # position embeddings of shape (1, t, n_embd)
            x = tok_emb + pos_emb
            for block in self.transformer.h:
                x = block(x)
            x = self.transformer.ln_f(x)
            logits = self.lm_head(x)

            # if we are given some desired targets also calculate the loss
            loss = None
            if targets is not None:
                loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1), ignore_index=-1)

            return logits, loss

    class CausalBoW(nn.Module):
        def __init__(self, config):
            super().__init__()

            # used to mask out vectors and preserve autoregressive property
            self.block_size = config.block_size
            self.register_buffer("bias", torch.tril(torch.ones(config.block_size, config.block_size))
                                .view(1, config.block_size, config.block_size))

        def forward(self, x):
            B, T, C = x.size() # batch size, sequence length, n_embd

            # do the weighted average of all preceeding token features
            att = torch.zeros((B, T, T), device=x.device)
            att = att.masked_fill(self.bias[:,:T,:T] == 0, float('-inf'))
            att = F.softmax(att, dim=-1)
            y = att @ x # (B, T, T) x (B, T, C) -> (B, T, C)

            return y

    class BoWBlock(nn.Module):
        """ collects BoW features and adds an MLP """

        def __init__(self, config):
            super().__init__()

            # Causal BoW module
            self.cbow = CausalBoW(config)
            # MLP assembler
            self.mlp = nn.ModuleDict(dict(
                c_fc    = nn.Linear(config.n_embd, config.n_embd2),
                c_proj  = nn.Linear(config.n_embd2, config.n_embd),
            ))
            m = self.mlp
            self.mlpf = lambda x: m.c_proj(F.tanh(m.c_fc(x))) # MLP forward

        def forward(self, x):
            x = x + self.cbow(x)
            x = x + self.mlpf(x)
            return x

    class BoW(nn.Module):
        def __init__(self, config):
            super().__init__()
            self.block_size = config.block_size
            self.vocab_size = config.vocab_size
            # token embedding
            self.wte = nn.Embedding(config.vocab_size, config.n_embd)
            # position embedding
            self.wpe = nn.Embedding(config.block_size, config.n_embd)
            # context block
            self.context_block = BoWBlock(config)
            # language model head decoder layer
            self.lm_head = nn.Linear(config.n_embd, self.vocab_size)

        def get_block_size(self):
            return self.block_size

        def forward(self, idx, targets=None):

            device = idx.device
            b, t = idx.size()
            assert t <= self.block_size, f"Cannot forward sequence of length {t}, block size is only {self.block_size}"
            pos = torch.arange(0, t, dtype=torch.long, device=device).unsqueeze(0) # shape (1, t)

            # forward the token and position embedding layers
            tok_emb = self.wte(idx) # token embeddings of shape (b, t, n_embd)
            pos_emb = self.wpe(pos) # position embeddings of shape (1, t, n_embd)
            # add and run through the decoder MLP
            x = tok_emb + pos_emb
            # run the bag of words context module
            x = self.context_block(x)
            # decode to next token probability
            logits = self.lm_head(x)

            # if we are given some desired targets also calculate the loss
            loss = None
            if targets is not None:
                loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1), ignore_index=-1)

            return logits, loss

    class RNNCell(nn.Module):
        def __init__(self, config):
            super().__init__()
            self.xh_to_h = nn.Linear(config.n_embd + config.n_embd2, config.n_embd2)

        def forward(self, xt, hprev):
            xh = torch.cat([xt, hprev], dim=1)
            ht = F.tanh(self.xh_to_h(xh))
            return ht

    class GRUCell(nn.Module):
        def __init__(self, config):
            super().__init__()
            # input, forget, output, gate
            self.xh_to_z = nn.Linear(config.n_embd + config.n_embd2, config.n_embd2)
            self.xh_to_r = nn.Linear(config.n_embd + config.n_embd2, config.n_embd2)
            self.xh_to_hbar = nn.Linear(config.n_embd + config.n_embd2, config.n_embd2)

        def forward(self, xt, hprev):
            # first use the reset gate to wipe some channels of the hidden state to zero
            xh = torch.cat([xt, hprev], dim=1)
            r = F.sigmoid(self.xh_to_r(xh))
            hprev_reset = r * hprev
            # calculate the candidate new hidden state hbar
            xhr = torch.cat([xt, hprev_reset], dim=1)
            hbar = F.tanh(self.xh_to_hbar(xhr))
            # calculate the switch gate that determines if each channel should be updated at all
            z = F.sigmoid(self.xh_to_z(xh))
            # blend the previous hidden state and the new candidate hidden state
            ht = (1 - z) * hprev + z * hbar
            return ht

    class RNN(nn.Module):

        def __init__(self, config, cell_type):
            super().__init__()
            self.block_size = config.block_size
            self.vocab_size = config.vocab_size
            self.start = nn.Parameter(torch.zeros(1, config.n_embd2)) # the starting hidden state
            self.wte = nn.Embedding(config.vocab_size, config.n_embd) # token embeddings table
            if cell_type == 'rnn':
                self.cell = RNNCell(config)
            elif cell_type == 'gru':
                self.cell = GRUCell(config)
            self.lm_head = nn.Linear(config.n_embd2, self.vocab_size)

        def get_block_size(self):
            return self.block_size

        def forward(self, idx, targets=None):
            device = idx.device
            b, t = idx.size()

            # embed all the integers up front and all at once for efficiency
            emb = self.wte(idx) # (b, t, n_embd)

            # sequentially iterate over the inputs and update the RNN state each tick
            hprev = self.start.expand((b, -1)) # expand out the batch dimension
            hiddens = []
            for i in range(t):
                xt = emb[:, i, :] # (b, n_embd)
                ht = self.cell(xt, hprev) # (b, n_embd2)
                hprev = ht
                hiddens.append(ht)

            # decode the outputs
            hidden = torch.stack(hiddens, 1) # (b, t, n_embd2)
            logits = self.lm_head(hidden)

            # if we are given some desired targets also calculate the loss
            loss = None
            if targets is not None:
                loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1), ignore_index=-1)

            return logits, loss

    class MLP(nn.Module):
        def __init__(self, config):
            super().__init__()
            self.block_size = config.block_size
            self.vocab_size = config.vocab_size
            self.wte = nn.Embedding(config.vocab_size + 1, config.n_embd) # token embeddings table
            # +1 in the line above for a special <BLANK> token that gets inserted if encoding a token
            # before the beginning of the input sequence
            self.mlp = nn.Sequential(
                nn.Linear(self.block_size * config.n_embd, config.n_embd2),
                nn.Tanh(),
                nn.Linear(config.n_embd2, self.vocab_size)
            )

        def get_block_size(self):
            return self.block_size

        def forward(self, idx, targets=None):

            # gather the word embeddings of the previous 3 words
            embs = []
            for k in range(self.block_size):
                tok_emb = self.wte(idx) # token embeddings of shape (b, t, n_embd)
                idx = torch.roll(idx, 1, 1)
                idx[:, 0] = self.vocab_size # special <BLANK> token
                embs.append(tok_emb)

            # concat all of the embeddings together and pass through an MLP
            x = torch.cat(embs, -1) # (b, t, n_embd * block_size)
            logits = self.mlp(x)

            # if we are given some desired targets also calculate the loss
            loss = None
            if targets is not None:
                loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1), ignore_index=-1)

            return logits, loss

    class Bigram(nn.Module):
        def __init__(self, config):
            super().__init__()
            n = config.vocab_size
            self.logits = nn.Parameter(torch.zeros((n, n)))

        def get_block_size(self):
            return 1 # this model only needs one previous character to predict the next

        def forward(self, idx, targets=None):

             # 'forward pass', lol
            logits = self.logits[idx]

            # if we are given some desired targets also calculate the loss
            loss = None
            if targets is not None:
                loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1), ignore_index=-1)

            return logits, loss

    @torch.no_grad()
    def generate(model, idx, max_new_tokens, temperature=1.0, do_sample=False, top_k=None):
        block_size = model.get_block_size()
        for _ in range(max_new_tokens):
            # if the sequence context is growing too long we must crop it at block_size
            idx_cond = idx if idx.size(1) <= block_size else idx[:, -block_size:]
            # forward the model to get the logits for the index in the sequence
            logits, _ = model(idx_cond)
            # pluck the logits at the final step and scale by desired temperature
            logits = logits[:, -1, :] / temperature
            # optionally crop the logits to only the top k options
            if top_k is not None:
                v, _ = torch.topk(logits, top_k)
                logits[logits < v[:, [-1]]] = -float('Inf')
            # apply softmax to convert logits to (normalized) probabilities
            probs = F.softmax(logits, dim=-1)
            # either sample from the distribution or take the most likely element
            if do_sample:
                idx_next = torch.multinomial(probs, num_samples=1)
            else:
                _, idx_next = torch.topk(probs, k=1, dim=-1)
            # append sampled index to the running sequence and continue
            idx = torch.cat((idx, idx_next), dim=1)

        return idx

    def print_samples(num=10, top_k=None, do_sample=True):
        """ samples from the model and pretty prints the decoded samples """
        X_init = torch.zeros(num, 1, dtype=torch.long).to(args.device)
        steps = train_dataset.get_output_length() - 1 # -1 because we already start with <START> token (index 0)
        X_samp = generate(model, X_init, steps, top_k=top_k, do_sample=do_sample).to('cpu')
        train_samples, test_samples, new_samples = [], [], []
        for i in range(X_samp.size(0)):
            # get the i'th row of sampled integers, as python list
            row = X_samp[i, 1:].tolist() # note: we need to crop out the first <START> token
            # token 0 is the <STOP> token, so we crop the output sequence at that point
            crop_index = row.index(0) if 0 in row else len(row)
            row = row[:crop_index]
            word_samp = train_dataset.decode(row)
            # separately track samples that we have and have not seen before
            if train_dataset.contains(word_samp):
                train_samples.append(word_samp)
            elif test_dataset.contains(word_samp):
                test_samples.append(word_samp)
            else:
                new_samples.append(word_samp)
        print('-'*80)
        for lst, desc in [(train_samples, 'in train'), (test_samples, 'in test'), (new_samples, 'new')]:
            print(f"{len(lst)} samples that are {desc}:")
            for word in lst:
                print(word)
        print('-'*80)

    @torch.inference_mode()
    def evaluate(model, dataset, batch_size=50, max_batches=None):
        model.eval()
        loader = DataLoader(dataset, shuffle=True, batch_size=batch_size, num_workers=0)
        losses = []
        for i, batch in enumerate(loader):
            batch = [t.to(args.device) for t in batch]
            X, Y = batch
            logits, loss = model(X, Y)
            losses.append(loss.item())
            if max_batches is not None and i >= max_batches:
                break
        mean_loss = torch.tensor(losses).mean().item()
        model.train() # reset model back to training mode
        return mean_loss

    class CharDataset(Dataset):

        def __init__(self, words, chars, max_word_length):
            self.words = words
            self.chars = chars
            self.max_word_length = max_word_length
            self.stoi = {ch:i+1 for i,ch in enumerate(chars)}
            self.itos = {i:s for s,i in self.stoi.items()} # inverse mapping

        def __len__(self):
            return len(self.words)

        def contains(self, word):
            return word in self.words

        def get_vocab_size(self):
            return len(self.chars) + 1 # all the possible characters and special 0 token

        def get_output_length(self):
            return self.max_word_length + 1 # <START> token followed by words

        def encode(self, word):
            ix = torch.tensor([self.stoi[w] for w in word], dtype=torch.long)
            return ix

        def decode(self, ix):
            word = ''.join(self.itos[i] for i in ix)
            return word

        def __getitem__(self, idx):
            word = self.words[idx]
            ix = self.encode(word)
            x = torch.zeros(self.max_word_length + 1, dtype=torch.long)
            y = torch.zeros(self.max_word_length + 1, dtype=torch.long)
            x[1:1+len(ix)] = ix
            y[:len(ix)] = ix
            y[len(ix)+1:] = -1 # index -1 will mask the loss at the inactive locations
            return x, y

    def create_datasets(data):

        # preprocessing of the input text file
        words = data.splitlines()
        words = [w.strip() for w in words] # get rid of any leading or trailing white space
        words = [w for w in words if w] # get rid of any empty strings
        chars = sorted(list(set(''.join(words)))) # all the possible characters
        max_word_length = max(len(w) for w in words)
        print(f"number of examples in the dataset: {len(words)}")
        print(f"max word length: {max_word_length}")
        print(f"number of unique characters in the vocabulary: {len(chars)}")
        print("vocabulary:")
        print(''.join(chars))

        # partition the input data into a training and the test set
        test_set_size = min(1000, int(len(words) * 0.1)) # 10% of the training set, or up to 1000 examples
        rp = torch.randperm(len(words)).tolist()
        train_words = [words[i] for i in rp[:-test_set_size]]
        test_words = [words[i] for i in rp[-test_set_size:]]
        print(f"split up the dataset into {len(train_words)} training examples and {len(test_words)} test examples")

        # wrap in dataset objects
        train_dataset = CharDataset(train_words, chars, max_word_length)
        test_dataset = CharDataset(test_words, chars, max_word_length)

        return train_dataset, test_dataset

    class InfiniteDataLoader:
        def __init__(self, dataset, **kwargs):
            train_sampler = torch.utils.data.RandomSampler(dataset, replacement=True, num_samples=int(1e10))
            self.train_loader = DataLoader(dataset, sampler=train_sampler, **kwargs)
            self.data_iter = iter(self.train_loader)

        def next(self):
            try:
                batch = next(self.data_iter)
            except StopIteration: # this will technically only happen after 1e10 samples... (i.e. basically never)
                self.data_iter = iter(self.train_loader)
                batch = next(self.data_iter)
            return batch

    # the __main__ part, with a words "file", a tiny config and a few steps
    buf = io.StringIO()
    with redirect_stdout(buf):
        torch.manual_seed(3407)
        train_dataset, test_dataset = create_datasets(words)
        vocab_size = train_dataset.get_vocab_size()
        block_size = train_dataset.get_output_length()
        print(f"dataset determined that: {vocab_size=}, {block_size=}")
    out["dataset_text"] = buf.getvalue()
    out["train_words"], out["test_words"] = train_dataset.words, test_dataset.words
    out["item0"] = [t.tolist() for t in train_dataset[0]]
    config = ModelConfig(vocab_size=vocab_size, block_size=block_size, n_layer=1, n_head=2, n_embd=8, n_embd2=8)
    out["models"] = {}
    for kind in ("transformer", "bigram", "mlp", "rnn", "gru", "bow"):
        with redirect_stdout(io.StringIO()):
            model = {"transformer": lambda: Transformer(config), "bigram": lambda: Bigram(config),
                     "mlp": lambda: MLP(config), "rnn": lambda: RNN(config, cell_type='rnn'),
                     "gru": lambda: RNN(config, cell_type='gru'), "bow": lambda: BoW(config)}[kind]()
        if seed_weights is not None:  # the same weights in both libraries
            with torch.no_grad():
                for name, p in model.named_parameters():
                    p.copy_(torch.tensor(seed_weights(kind, name, tuple(p.shape))))
        model.to(args.device)
        r = {"n_params": sum(p.numel() for p in model.parameters()),
             "state": {k: v.detach().cpu().numpy().copy() for k, v in model.state_dict().items()}}
        X, Y = (torch.stack(t).to(args.device) for t in zip(*[train_dataset[i] for i in range(4)]))
        logits, loss = model(X, Y)
        r["logits"], r["loss0"] = logits.detach().cpu().numpy(), loss.item()
        loss.backward()
        r["grads"] = {k: p.grad.cpu().numpy().copy() for k, p in model.named_parameters()}
        model.zero_grad(set_to_none=True)
        r["X"], r["Y"] = X.cpu().numpy(), Y.cpu().numpy()
        # greedy completion from <START>
        r["greedy"] = generate(model, torch.zeros(2, 1, dtype=torch.long).to(args.device),
                               block_size - 1).cpu().tolist()
        # sampling from the top 1 only (the others cropped to -inf, multinomial over zeros) is greedy
        r["top1"] = generate(model, torch.zeros(2, 1, dtype=torch.long).to(args.device), block_size - 1,
                             temperature=0.5, do_sample=True, top_k=1).cpu().tolist()
        optimizer = torch.optim.AdamW(model.parameters(), lr=3e-2, weight_decay=0.01, betas=(0.9, 0.99), eps=1e-8)
        torch.manual_seed(0)
        batch_loader = InfiniteDataLoader(train_dataset, batch_size=8, pin_memory=False, num_workers=0)
        losses = []
        for step in range(steps):
            batch = batch_loader.next()
            batch = [t.to(args.device) for t in batch]
            X, Y = batch
            logits, loss = model(X, Y)
            model.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
        r["losses"] = losses
        r["eval"] = (evaluate(model, train_dataset, batch_size=100, max_batches=10),
                     evaluate(model, test_dataset, batch_size=100, max_batches=10))
        buf = io.StringIO()
        with redirect_stdout(buf):
            print_samples(num=3, do_sample=False)
            torch.manual_seed(1)
            print_samples(num=4, top_k=2)
        r["samples_text"] = buf.getvalue()
        # save the model to disk if it has improved (to a buffer here), and resume from it
        buf = io.BytesIO()
        torch.save(model.state_dict(), buf)
        buf.seek(0)
        with redirect_stdout(io.StringIO()):
            resumed = {"transformer": lambda: Transformer(config), "bigram": lambda: Bigram(config),
                       "mlp": lambda: MLP(config), "rnn": lambda: RNN(config, cell_type='rnn'),
                       "gru": lambda: RNN(config, cell_type='gru'), "bow": lambda: BoW(config)}[kind]()
        resumed.load_state_dict(torch.load(buf))
        resumed.to(args.device)
        X = torch.stack([train_dataset[i][0] for i in range(3)]).to(args.device)
        r["resumed_same"] = bool(torch.equal(resumed(X)[0], model(X)[0]))
        r["model"] = model
        out["models"][kind] = r
    return out


# -----------------------------------------------------------------------------
# karpathy/nn-zero-to-hero: lectures/makemore/makemore_part4_backprop.ipynb


def _names(n=60, seed=0):
    rng = np.random.default_rng(seed)
    return ["".join(rng.choice(list("abcdefgh"), rng.integers(2, 7))) for _ in range(n)]


def backprop_ninja_page(torch, words, dtype=None, max_steps=25, W=None):
    F = torch.nn.functional
    prev = torch.get_default_dtype()
    if dtype is not None:
        torch.set_default_dtype(dtype)
    try:
        return _backprop_ninja(torch, F, words, max_steps, W)
    finally:
        torch.set_default_dtype(prev)


def _backprop_ninja(torch, F, words, max_steps, W):
    res = {}
    buf = io.StringIO()
    # build the vocabulary of characters and mappings to/from integers
    chars = sorted(list(set(''.join(words))))
    stoi = {s:i+1 for i,s in enumerate(chars)}
    stoi['.'] = 0
    itos = {i:s for s,i in stoi.items()}
    vocab_size = len(itos)

    # build the dataset
    block_size = 3 # context length: how many characters do we take to predict the next one?

    def build_dataset(words):
        X, Y = [], []

        for w in words:
            context = [0] * block_size
            for ch in w + '.':
                ix = stoi[ch]
                X.append(context)
                Y.append(ix)
                context = context[1:] + [ix] # crop and append

        X = torch.tensor(X)
        Y = torch.tensor(Y)
        return X, Y

    Xtr,  Ytr  = build_dataset(words)

    # utility function we will use later when comparing manual gradients to PyTorch gradients
    def cmp(s, dt, t):
        ex = torch.all(dt == t.grad).item()
        app = torch.allclose(dt, t.grad)
        maxdiff = (dt - t.grad).abs().max().item()
        shape_ok = dt.shape == t.shape
        print(f'{s:15s} | exact: {str(ex):5s} | approximate: {str(app):5s} | maxdiff: {maxdiff} | shape is correct: {shape_ok}')

    n_embd = 4 # the dimensionality of the character embedding vectors
    n_hidden = 16 # the number of neurons in the hidden layer of the MLP

    g = torch.Generator().manual_seed(2147483647) # for reproducibility
    C  = torch.randn((vocab_size, n_embd),            generator=g)
    # Layer 1
    W1 = torch.randn((n_embd * block_size, n_hidden), generator=g) * (5/3)/((n_embd * block_size)**0.5)
    b1 = torch.randn(n_hidden,                        generator=g) * 0.1 # using b1 just for fun, it's useless because of BN
    # Layer 2
    W2 = torch.randn((n_hidden, vocab_size),          generator=g) * 0.1
    b2 = torch.randn(vocab_size,                      generator=g) * 0.1
    # BatchNorm parameters
    bngain = torch.randn((1, n_hidden))*0.1 + 1.0
    bnbias = torch.randn((1, n_hidden))*0.1

    parameters = [C, W1, b1, W2, b2, bngain, bnbias]
    if W is not None:  # the parity test's: the same numbers in both libraries
        for p, a in zip(parameters, W):
            p.copy_(torch.tensor(a))
    res["n_params"] = sum(p.nelement() for p in parameters) # number of parameters in total
    for p in parameters:
        p.requires_grad = True

    batch_size = 8
    n = batch_size # a shorter variable also, for convenience
    # construct a minibatch
    ix = torch.randint(0, Xtr.shape[0], (batch_size,), generator=g)
    if W is not None:
        ix = torch.tensor(W[-1])
    Xb, Yb = Xtr[ix], Ytr[ix] # batch X,Y

    # forward pass, "chunkated" into smaller steps that are possible to backward one at a time

    emb = C[Xb] # embed the characters into vectors
    embcat = emb.view(emb.shape[0], -1) # concatenate the vectors
    # Linear layer 1
    hprebn = embcat @ W1 + b1 # hidden layer pre-activation
    # BatchNorm layer
    bnmeani = 1/n*hprebn.sum(0, keepdim=True)
    bndiff = hprebn - bnmeani
    bndiff2 = bndiff**2
    bnvar = 1/(n-1)*(bndiff2).sum(0, keepdim=True) # note: Bessel's correction (dividing by n-1, not n)
    bnvar_inv = (bnvar + 1e-5)**-0.5
    bnraw = bndiff * bnvar_inv
    hpreact = bngain * bnraw + bnbias
    # Non-linearity
    h = torch.tanh(hpreact) # hidden layer
    # Linear layer 2
    logits = h @ W2 + b2 # output layer
    # cross entropy loss (same as F.cross_entropy(logits, Yb))
    logit_maxes = logits.max(1, keepdim=True).values
    norm_logits = logits - logit_maxes # subtract max for numerical stability
    counts = norm_logits.exp()
    counts_sum = counts.sum(1, keepdims=True)
    counts_sum_inv = counts_sum**-1 # if I use (1.0 / counts_sum) instead then I can't get backprop to be bit exact...
    probs = counts * counts_sum_inv
    logprobs = probs.log()
    loss = -logprobs[range(n), Yb].mean()

    # PyTorch backward pass
    for p in parameters:
        p.grad = None
    for t in [logprobs, probs, counts, counts_sum, counts_sum_inv, # afaik there is no cleaner way
              norm_logits, logit_maxes, logits, h, hpreact, bnraw,
             bnvar_inv, bnvar, bndiff2, bndiff, hprebn, bnmeani,
             embcat, emb]:
        t.retain_grad()
    loss.backward()
    res["loss"] = loss.item()
    res["batch"] = (Xb.cpu().numpy(), Yb.cpu().numpy())
    res["params"] = [p.detach().cpu().numpy().copy() for p in parameters]
    res["autograd"] = {name: t.grad.cpu().numpy().copy() for name, t in
                       [("C", C), ("W1", W1), ("b1", b1), ("W2", W2), ("b2", b2), ("bngain", bngain),
                        ("bnbias", bnbias), ("logits", logits), ("hprebn", hprebn)]}

    # Exercise 1: backprop through the whole thing manually,
    # backpropagating through exactly all of the variables
    # as they are defined in the forward pass above, one by one

    dlogprobs = torch.zeros_like(logprobs)
    dlogprobs[range(n), Yb] = -1.0/n
    dprobs = (1.0 / probs) * dlogprobs
    dcounts_sum_inv = (counts * dprobs).sum(1, keepdim=True)
    dcounts = counts_sum_inv * dprobs
    dcounts_sum = (-counts_sum**-2) * dcounts_sum_inv
    dcounts += torch.ones_like(counts) * dcounts_sum
    dnorm_logits = counts * dcounts
    dlogits = dnorm_logits.clone()
    dlogit_maxes = (-dnorm_logits).sum(1, keepdim=True)
    dlogits += F.one_hot(logits.max(1).indices, num_classes=logits.shape[1]) * dlogit_maxes
    dh = dlogits @ W2.T
    dW2 = h.T @ dlogits
    db2 = dlogits.sum(0)
    dhpreact = (1.0 - h**2) * dh
    dbngain = (bnraw * dhpreact).sum(0, keepdim=True)
    dbnraw = bngain * dhpreact
    dbnbias = dhpreact.sum(0, keepdim=True)
    dbndiff = bnvar_inv * dbnraw
    dbnvar_inv = (bndiff * dbnraw).sum(0, keepdim=True)
    dbnvar = (-0.5*(bnvar + 1e-5)**-1.5) * dbnvar_inv
    dbndiff2 = (1.0/(n-1))*torch.ones_like(bndiff2) * dbnvar
    dbndiff += (2*bndiff) * dbndiff2
    dhprebn = dbndiff.clone()
    dbnmeani = (-dbndiff).sum(0)
    dhprebn += 1.0/n * (torch.ones_like(hprebn) * dbnmeani)
    dembcat = dhprebn @ W1.T
    dW1 = embcat.T @ dhprebn
    db1 = dhprebn.sum(0)
    demb = dembcat.view(emb.shape)
    dC = torch.zeros_like(C)
    for k in range(Xb.shape[0]):
        for j in range(Xb.shape[1]):
            ix = Xb[k,j]
            dC[ix] += demb[k,j]

    with redirect_stdout(buf):
        cmp('logprobs', dlogprobs, logprobs)
        cmp('probs', dprobs, probs)
        cmp('counts_sum_inv', dcounts_sum_inv, counts_sum_inv)
        cmp('counts_sum', dcounts_sum, counts_sum)
        cmp('counts', dcounts, counts)
        cmp('norm_logits', dnorm_logits, norm_logits)
        cmp('logit_maxes', dlogit_maxes, logit_maxes)
        cmp('logits', dlogits, logits)
        cmp('h', dh, h)
        cmp('W2', dW2, W2)
        cmp('b2', db2, b2)
        cmp('hpreact', dhpreact, hpreact)
        cmp('bngain', dbngain, bngain)
        cmp('bnbias', dbnbias, bnbias)
        cmp('bnraw', dbnraw, bnraw)
        cmp('bnvar_inv', dbnvar_inv, bnvar_inv)
        cmp('bnvar', dbnvar, bnvar)
        cmp('bndiff2', dbndiff2, bndiff2)
        cmp('bndiff', dbndiff, bndiff)
        cmp('bnmeani', dbnmeani, bnmeani)
        cmp('hprebn', dhprebn, hprebn)
        cmp('embcat', dembcat, embcat)
        cmp('W1', dW1, W1)
        cmp('b1', db1, b1)
        cmp('emb', demb, emb)
        cmp('C', dC, C)

        # Exercise 2: backprop through cross_entropy but all in one go
        loss_fast = F.cross_entropy(logits, Yb)
        print(loss_fast.item(), 'diff:', (loss_fast - loss).item())

        # backward pass
        dlogits = F.softmax(logits, 1)
        dlogits[range(n), Yb] -= 1
        dlogits /= n

        cmp('logits', dlogits, logits) # I can only get approximate to be true, my maxdiff is 6e-9

        # Exercise 3: backprop through batchnorm but all in one go
        hpreact_fast = bngain * (hprebn - hprebn.mean(0, keepdim=True)) / torch.sqrt(hprebn.var(0, keepdim=True, unbiased=True) + 1e-5) + bnbias
        print('max diff:', (hpreact_fast - hpreact).abs().max())

        dhprebn = bngain*bnvar_inv/n * (n*dhpreact - dhpreact.sum(0) - n/(n-1)*bnraw*(dhpreact*bnraw).sum(0))

        cmp('hprebn', dhprebn, hprebn) # I can only get approximate to be true, my maxdiff is 9e-10
    res["cmp_text"] = buf.getvalue()

    # Exercise 4: putting it all together!
    # Train the MLP neural net with your own backward pass

    # init
    n_hidden = 16 # the number of neurons in the hidden layer of the MLP

    g = torch.Generator().manual_seed(2147483647) # for reproducibility
    C  = torch.randn((vocab_size, n_embd),            generator=g)
    # Layer 1
    W1 = torch.randn((n_embd * block_size, n_hidden), generator=g) * (5/3)/((n_embd * block_size)**0.5)
    b1 = torch.randn(n_hidden,                        generator=g) * 0.1
    # Layer 2
    W2 = torch.randn((n_hidden, vocab_size),          generator=g) * 0.1
    b2 = torch.randn(vocab_size,                      generator=g) * 0.1
    # BatchNorm parameters
    bngain = torch.randn((1, n_hidden))*0.1 + 1.0
    bnbias = torch.randn((1, n_hidden))*0.1

    parameters = [C, W1, b1, W2, b2, bngain, bnbias]
    for p in parameters:
        p.requires_grad = True

    # same optimization as last time
    batch_size = 32
    n = batch_size # convenience
    lossi = []

    # use this context manager for efficiency once your backward pass is written (TODO)
    with torch.no_grad():

        # kick off optimization
        for i in range(max_steps):

            # minibatch construct
            ix = torch.randint(0, Xtr.shape[0], (batch_size,), generator=g)
            Xb, Yb = Xtr[ix], Ytr[ix] # batch X,Y

            # forward pass
            emb = C[Xb] # embed the characters into vectors
            embcat = emb.view(emb.shape[0], -1) # concatenate the vectors
            # Linear layer
            hprebn = embcat @ W1 + b1 # hidden layer pre-activation
            # BatchNorm layer
            # -------------------------------------------------------------
            bnmean = hprebn.mean(0, keepdim=True)
            bnvar = hprebn.var(0, keepdim=True, unbiased=True)
            bnvar_inv = (bnvar + 1e-5)**-0.5
            bnraw = (hprebn - bnmean) * bnvar_inv
            hpreact = bngain * bnraw + bnbias
            # -------------------------------------------------------------
            # Non-linearity
            h = torch.tanh(hpreact) # hidden layer
            logits = h @ W2 + b2 # output layer
            loss = F.cross_entropy(logits, Yb) # loss function

            # backward pass
            for p in parameters:
                p.grad = None
            #loss.backward() # use this for correctness comparisons, delete it later!

            # manual backprop! #swole_doge_meme
            # -----------------
            dlogits = F.softmax(logits, 1)
            dlogits[range(n), Yb] -= 1
            dlogits /= n
            # 2nd layer backprop
            dh = dlogits @ W2.T
            dW2 = h.T @ dlogits
            db2 = dlogits.sum(0)
            # tanh
            dhpreact = (1.0 - h**2) * dh
            # batchnorm backprop
            dbngain = (bnraw * dhpreact).sum(0, keepdim=True)
            dbnbias = dhpreact.sum(0, keepdim=True)
            dhprebn = bngain*bnvar_inv/n * (n*dhpreact - dhpreact.sum(0) - n/(n-1)*bnraw*(dhpreact*bnraw).sum(0))
            # 1st layer
            dembcat = dhprebn @ W1.T
            dW1 = embcat.T @ dhprebn
            db1 = dhprebn.sum(0)
            # embedding
            demb = dembcat.view(emb.shape)
            dC = torch.zeros_like(C)
            for k in range(Xb.shape[0]):
                for j in range(Xb.shape[1]):
                    ix = Xb[k,j]
                    dC[ix] += demb[k,j]
            grads = [dC, dW1, db1, dW2, db2, dbngain, dbnbias]
            # -----------------
            if i == 0:  # useful for checking your gradients
                res["step0"] = (Xb.cpu().numpy(), Yb.cpu().numpy(), [p.detach().cpu().numpy().copy() for p in parameters],
                                [d.cpu().numpy().copy() for d in grads])

            # update
            lr = 0.1 if i < 100000 else 0.01 # step learning rate decay
            for p, grad in zip(parameters, grads):
                #p.data += -lr * p.grad # old way of cheems doge (using PyTorch grad from .backward())
                p.data += -lr * grad # new way of swole doge TODO: enable

            # track stats
            lossi.append(loss.log10().item())
    res["lossi"] = lossi

    # calibrate the batch norm at the end of training

    with torch.no_grad():
        # pass the training set through
        emb = C[Xtr]
        embcat = emb.view(emb.shape[0], -1)
        hpreact = embcat @ W1 + b1
        # measure the mean/std over the entire training set
        bnmean = hpreact.mean(0, keepdim=True)
        bnvar = hpreact.var(0, keepdim=True, unbiased=True)

    # evaluate train and val loss

    @torch.no_grad() # this decorator disables gradient tracking
    def split_loss(split):
        x,y = {
          'train': (Xtr, Ytr),
        }[split]
        emb = C[x] # (N, block_size, n_embd)
        embcat = emb.view(emb.shape[0], -1) # concat into (N, block_size * n_embd)
        hpreact = embcat @ W1 + b1
        hpreact = bngain * (hpreact - bnmean) * (bnvar + 1e-5)**-0.5 + bnbias
        h = torch.tanh(hpreact) # (N, n_hidden)
        logits = h @ W2 + b2 # (N, vocab_size)
        loss = F.cross_entropy(logits, y)
        return loss.item()

    res["train_loss"] = split_loss('train')
    res["final_params"] = [p.detach().cpu().numpy().copy() for p in parameters]
    res["data"] = (Xtr.cpu().numpy(), Ytr.cpu().numpy())
    return res


# -----------------------------------------------------------------------------
# karpathy/nn-zero-to-hero: lectures/makemore/makemore_part3_bn.ipynb, "PyTorch-ifying the code"


def bn_stats_page(torch, words, max_steps=3, W=None):
    F = torch.nn.functional
    res = {}
    chars = sorted(list(set(''.join(words))))
    stoi = {s:i+1 for i,s in enumerate(chars)}
    stoi['.'] = 0
    vocab_size = len(stoi)
    block_size = 3
    X, Y = [], []
    for w in words:
        context = [0] * block_size
        for ch in w + '.':
            ix = stoi[ch]
            X.append(context)
            Y.append(ix)
            context = context[1:] + [ix] # crop and append
    Xtr, Ytr = torch.tensor(X), torch.tensor(Y)

    # Let's train a deeper network
    # The classes we create here are the same API as nn.Module in PyTorch

    class Linear:

        def __init__(self, fan_in, fan_out, bias=True):
            self.weight = torch.randn((fan_in, fan_out), generator=g) / fan_in**0.5
            self.bias = torch.zeros(fan_out) if bias else None

        def __call__(self, x):
            self.out = x @ self.weight
            if self.bias is not None:
                self.out += self.bias
            return self.out

        def parameters(self):
            return [self.weight] + ([] if self.bias is None else [self.bias])


    class BatchNorm1d:

        def __init__(self, dim, eps=1e-5, momentum=0.1):
            self.eps = eps
            self.momentum = momentum
            self.training = True
            # parameters (trained with backprop)
            self.gamma = torch.ones(dim)
            self.beta = torch.zeros(dim)
            # buffers (trained with a running 'momentum update')
            self.running_mean = torch.zeros(dim)
            self.running_var = torch.ones(dim)

        def __call__(self, x):
            # calculate the forward pass
            if self.training:
                xmean = x.mean(0, keepdim=True) # batch mean
                xvar = x.var(0, keepdim=True) # batch variance
            else:
                xmean = self.running_mean
                xvar = self.running_var
            xhat = (x - xmean) / torch.sqrt(xvar + self.eps) # normalize to unit variance
            self.out = self.gamma * xhat + self.beta
            # update the buffers
            if self.training:
                with torch.no_grad():
                    self.running_mean = (1 - self.momentum) * self.running_mean + self.momentum * xmean
                    self.running_var = (1 - self.momentum) * self.running_var + self.momentum * xvar
            return self.out

        def parameters(self):
            return [self.gamma, self.beta]

    class Tanh:
        def __call__(self, x):
            self.out = torch.tanh(x)
            return self.out
        def parameters(self):
            return []

    n_embd = 6 # the dimensionality of the character embedding vectors
    n_hidden = 24 # the number of neurons in the hidden layer of the MLP
    g = torch.Generator().manual_seed(2147483647) # for reproducibility

    C = torch.randn((vocab_size, n_embd),            generator=g)
    layers = [
      Linear(n_embd * block_size, n_hidden, bias=False), BatchNorm1d(n_hidden), Tanh(),
      Linear(           n_hidden, n_hidden, bias=False), BatchNorm1d(n_hidden), Tanh(),
      Linear(           n_hidden, vocab_size, bias=False), BatchNorm1d(vocab_size),
    ]

    with torch.no_grad():
        # last layer: make less confident
        layers[-1].gamma *= 0.1
        # all other layers: apply gain
        for layer in layers[:-1]:
            if isinstance(layer, Linear):
                layer.weight *= 5/3

    parameters = [C] + [p for layer in layers for p in layer.parameters()]
    if W is not None:  # the parity test's: the same numbers in both libraries
        with torch.no_grad():
            for p, a in zip(parameters, W):
                p.copy_(torch.tensor(a))
    res["n_params"] = sum(p.nelement() for p in parameters) # number of parameters in total
    for p in parameters:
        p.requires_grad = True

    # same optimization as last time
    batch_size = 32
    lossi = []
    ud = []

    buf = io.StringIO()
    for i in range(max_steps):

        # minibatch construct
        ix = torch.randint(0, Xtr.shape[0], (batch_size,), generator=g)
        if W is not None:
            ix = torch.tensor(W[-1][i])
        Xb, Yb = Xtr[ix], Ytr[ix] # batch X,Y

        # forward pass
        emb = C[Xb] # embed the characters into vectors
        x = emb.view(emb.shape[0], -1) # concatenate the vectors
        for layer in layers:
            x = layer(x)
        loss = F.cross_entropy(x, Yb) # loss function

        # backward pass
        for layer in layers:
            layer.out.retain_grad() # AFTER_DEBUG: would take out retain_graph
        for p in parameters:
            p.grad = None
        loss.backward()

        # update
        lr = 0.1 if i < 150000 else 0.01 # step learning rate decay
        for p in parameters:
            p.data += -lr * p.grad

        # track stats
        if i % 10000 == 0: # print every once in a while
            print(f'{i:7d}/{max_steps:7d}: {loss.item():.4f}', file=buf)
        lossi.append(loss.log10().item())
        with torch.no_grad():
            ud.append([((lr*p.grad).std() / p.data.std()).log10().item() for p in parameters])

    # visualize histograms
    hists = []
    for i, layer in enumerate(layers[:-1]): # note: exclude the output layer
        if isinstance(layer, Tanh):
            t = layer.out
            print('layer %d (%10s): mean %+.2f, std %.2f, saturated: %.2f%%' % (i, layer.__class__.__name__, t.mean(), t.std(), (t.abs() > 0.97).float().mean()*100), file=buf)
            hy, hx = torch.histogram(t, density=True)
            hists.append((hx[:-1].detach().cpu().numpy(), hy.detach().cpu().numpy()))
    # visualize histograms
    for i, layer in enumerate(layers[:-1]): # note: exclude the output layer
        if isinstance(layer, Tanh):
            t = layer.out.grad
            print('layer %d (%10s): mean %+f, std %e' % (i, layer.__class__.__name__, t.mean(), t.std()), file=buf)
    # visualize histograms
    for i,p in enumerate(parameters):
        t = p.grad
        if p.ndim == 2:
            print('weight %10s | mean %+f | std %e | grad:data ratio %e' % (tuple(p.shape), t.mean(), t.std(), t.std() / p.std()), file=buf)
    res["text"] = buf.getvalue()
    res["lossi"], res["ud"], res["hists"], res["Yb"] = lossi, ud, hists, Yb.cpu().numpy()
    res["outs"] = [layer.out.detach().cpu().numpy() for layer in layers]
    res["out_grads"] = [layer.out.grad.cpu().numpy() for layer in layers]
    res["params"] = [(p.detach().cpu().numpy(), p.grad.cpu().numpy()) for p in parameters]
    res["bn"] = [(l.running_mean.cpu().numpy(), l.running_var.cpu().numpy()) for l in layers if isinstance(l, BatchNorm1d)]
    return res


# -----------------------------------------------------------------------------
# karpathy/lecun1989-repro: repro.py


def lecun1989_page(torch, Xtr, Ytr, Xte, Yte, passes=2, init=None):
    nn = torch.nn
    F = torch.nn.functional
    optim = torch.optim

    class Net(nn.Module):
        """ 1989 LeCun ConvNet per description in the paper """

        def __init__(self):
            super().__init__()

            # initialization as described in the paper to my best ability, but it doesn't look right...
            winit = lambda fan_in, *shape: (torch.rand(*shape) - 0.5) * 2 * 2.4 / fan_in**0.5
            macs = 0 # keep track of MACs (multiply accumulates)
            acts = 0 # keep track of number of activations

            # H1 layer parameters and their initialization
            self.H1w = nn.Parameter(winit(5*5*1, 12, 1, 5, 5))
            self.H1b = nn.Parameter(torch.zeros(12, 8, 8)) # presumably init to zero for biases
            assert self.H1w.nelement() + self.H1b.nelement() == 1068
            macs += (5*5*1) * (8*8) * 12
            acts += (8*8) * 12

            # H2 layer parameters and their initialization
            self.H2w = nn.Parameter(winit(5*5*8, 12, 8, 5, 5))
            self.H2b = nn.Parameter(torch.zeros(12, 4, 4)) # presumably init to zero for biases
            assert self.H2w.nelement() + self.H2b.nelement() == 2592
            macs += (5*5*8) * (4*4) * 12
            acts += (4*4) * 12

            # H3 is a fully connected layer
            self.H3w = nn.Parameter(winit(4*4*12, 4*4*12, 30))
            self.H3b = nn.Parameter(torch.zeros(30))
            assert self.H3w.nelement() + self.H3b.nelement() == 5790
            macs += (4*4*12) * 30
            acts += 30

            # output layer is also fully connected layer
            self.outw = nn.Parameter(winit(30, 30, 10))
            self.outb = nn.Parameter(-torch.ones(10)) # 9/10 targets are -1, so makes sense to init slightly towards it
            assert self.outw.nelement() + self.outb.nelement() == 310
            macs += 30 * 10
            acts += 10

            self.macs = macs
            self.acts = acts

        def forward(self, x):

            # x has shape (1, 1, 16, 16)
            x = F.pad(x, (2, 2, 2, 2), 'constant', -1.0) # pad by two using constant -1 for background
            x = F.conv2d(x, self.H1w, stride=2) + self.H1b
            x = torch.tanh(x)

            # x is now shape (1, 12, 8, 8)
            x = F.pad(x, (2, 2, 2, 2), 'constant', -1.0) # pad by two using constant -1 for background
            slice1 = F.conv2d(x[:, 0:8], self.H2w[0:4], stride=2) # first 4 planes look at first 8 input planes
            slice2 = F.conv2d(x[:, 4:12], self.H2w[4:8], stride=2) # next 4 planes look at last 8 input planes
            slice3 = F.conv2d(torch.cat((x[:, 0:4], x[:, 8:12]), dim=1), self.H2w[8:12], stride=2) # last 4 planes are cross
            x = torch.cat((slice1, slice2, slice3), dim=1) + self.H2b
            x = torch.tanh(x)

            # x is now shape (1, 12, 4, 4)
            x = x.flatten(start_dim=1) # (1, 12*4*4)
            x = x @ self.H3w + self.H3b
            x = torch.tanh(x)

            # x is now shape (1, 30)
            x = x @ self.outw + self.outb
            x = torch.tanh(x)

             # x is finally shape (1, 10)
            return x

    buf = io.StringIO()
    res = {}
    # init rng
    np_state = np.random.get_state()
    torch.manual_seed(1337)
    np.random.seed(1337)
    torch.use_deterministic_algorithms(True)
    try:
        with redirect_stdout(buf):
            # init a model
            model = Net()
            if init is not None:
                model.load_state_dict({k: torch.tensor(v) for k, v in init.items()})
            print("model stats:")
            print("# params:      ", sum(p.numel() for p in model.parameters())) # in paper total is 9,760
            print("# MACs:        ", model.macs)
            print("# activations: ", model.acts)
            res["init"] = {k: v.detach().cpu().numpy().copy() for k, v in model.state_dict().items()}

            # init data
            Xtr, Ytr, Xte, Yte = (torch.tensor(a) for a in (Xtr, Ytr, Xte, Yte))

            # init optimizer
            optimizer = optim.SGD(model.parameters(), lr=0.03)

            def eval_split(split):
                # eval the full train/test set, batched implementation for efficiency
                model.eval()
                X, Y = (Xtr, Ytr) if split == 'train' else (Xte, Yte)
                Yhat = model(X)
                loss = torch.mean((Y - Yhat)**2)
                err = torch.mean((Y.argmax(dim=1) != Yhat.argmax(dim=1)).float())
                print(f"eval: split {split:5s}. loss {loss.item():e}. error {err.item()*100:.2f}%. misses: {int(err.item()*Y.size(0))}")

            res["out0"] = model(Xte).detach().cpu().numpy()
            # train
            for pass_num in range(passes):

                # perform one epoch of training
                model.train()
                for step_num in range(Xtr.size(0)):

                    # fetch a single example into a batch of 1
                    x, y = Xtr[[step_num]], Ytr[[step_num]]

                    # forward the model and the loss
                    yhat = model(x)
                    loss = torch.mean((y - yhat)**2)

                    # calculate the gradient and update the parameters
                    optimizer.zero_grad(set_to_none=True)
                    loss.backward()
                    optimizer.step()
                    if pass_num == 0 and step_num == 0:
                        res["grads0"] = {k: p.grad.cpu().numpy().copy() for k, p in model.named_parameters()}

                # after epoch epoch evaluate the train and test error / metrics
                print(pass_num + 1)
                eval_split('train')
                eval_split('test')
    finally:
        torch.use_deterministic_algorithms(False)
        np.random.set_state(np_state)
    res["text"] = buf.getvalue()
    res["final"] = {k: v.detach().cpu().numpy().copy() for k, v in model.state_dict().items()}
    return res


def _lecun_data(n_train=16, n_test=10, seed=0):
    """Synthetic 16x16 "digits" in [-1, 1] with one-hot +-1 targets: class k lights stripe k."""
    rng = np.random.default_rng(seed)

    def make(n):
        y = rng.integers(0, 10, n)
        X = np.full((n, 1, 16, 16), -1.0)
        for i, k in enumerate(y):
            X[i, 0, k + 3, 2:14] = 1.0
            X[i, 0, 2:14, 15 - k - 3] = 1.0 if k % 2 else -1.0
        X += rng.normal(0, 0.1, X.shape)
        Y = -np.ones((n, 10))
        Y[np.arange(n), y] = 1.0
        return X.astype(np.float32), Y.astype(np.float32)

    return make(n_train) + make(n_test)


# -----------------------------------------------------------------------------
# karpathy/pytorch-made: made.py (nflib/made.py is the same file)


def made_classes(torch):
    nn = torch.nn
    F = torch.nn.functional

    class MaskedLinear(nn.Linear):
        """ same as Linear except has a configurable mask on the weights """

        def __init__(self, in_features, out_features, bias=True):
            super().__init__(in_features, out_features, bias)
            self.register_buffer('mask', torch.ones(out_features, in_features))

        def set_mask(self, mask):
            self.mask.data.copy_(torch.from_numpy(mask.astype(np.uint8).T))

        def forward(self, input):
            return F.linear(input, self.mask * self.weight, self.bias)

    class MADE(nn.Module):
        def __init__(self, nin, hidden_sizes, nout, num_masks=1, natural_ordering=False):
            super().__init__()
            self.nin = nin
            self.nout = nout
            self.hidden_sizes = hidden_sizes
            assert self.nout % self.nin == 0, "nout must be integer multiple of nin"

            # define a simple MLP neural net
            self.net = []
            hs = [nin] + hidden_sizes + [nout]
            for h0,h1 in zip(hs, hs[1:]):
                self.net.extend([
                        MaskedLinear(h0, h1),
                        nn.ReLU(),
                    ])
            self.net.pop() # pop the last ReLU for the output layer
            self.net = nn.Sequential(*self.net)

            # seeds for orders/connectivities of the model ensemble
            self.natural_ordering = natural_ordering
            self.num_masks = num_masks
            self.seed = 0 # for cycling through num_masks orderings

            self.m = {}
            self.update_masks() # builds the initial self.m connectivity
            # note, we could also precompute the masks and cache them, but this
            # could get memory expensive for large number of masks.

        def update_masks(self):
            if self.m and self.num_masks == 1: return # only a single seed, skip for efficiency
            L = len(self.hidden_sizes)

            # fetch the next seed and construct a random stream
            rng = np.random.RandomState(self.seed)
            self.seed = (self.seed + 1) % self.num_masks

            # sample the order of the inputs and the connectivity of all neurons
            self.m[-1] = np.arange(self.nin) if self.natural_ordering else rng.permutation(self.nin)
            for l in range(L):
                self.m[l] = rng.randint(self.m[l-1].min(), self.nin-1, size=self.hidden_sizes[l])

            # construct the mask matrices
            masks = [self.m[l-1][:,None] <= self.m[l][None,:] for l in range(L)]
            masks.append(self.m[L-1][:,None] < self.m[-1][None,:])

            # handle the case where nout = nin * k, for integer k > 1
            if self.nout > self.nin:
                k = int(self.nout / self.nin)
                # replicate the mask across the other outputs
                masks[-1] = np.concatenate([masks[-1]]*k, axis=1)

            # set the masks in all MaskedLinear layers
            layers = [l for l in self.net.modules() if isinstance(l, MaskedLinear)]
            for l,m in zip(layers, masks):
                l.set_mask(m)

        def forward(self, x):
            return self.net(x)

    return MaskedLinear, MADE


def made_check_page(torch, D=6, nout_mult=1):
    """made.py's __main__: backpropagate from each output to find the inputs it depends on."""
    Variable = torch.autograd.Variable
    _, MADE = made_classes(torch)
    rng = np.random.RandomState(14)
    x = (rng.rand(1, D) > 0.5).astype(np.float32)
    report = []
    for natural in [True, False]:
        for hiddens in [[20], [20, 22], [20, 22, 23]]:
            torch.manual_seed(0)
            model = MADE(D, hiddens, D * nout_mult, natural_ordering=natural)
            res = []
            for k in range(D * nout_mult):
                xtr = Variable(torch.from_numpy(x), requires_grad=True)
                xtrhat = model(xtr)
                loss = xtrhat[0,k]
                loss.backward()

                depends = (xtr.grad[0].numpy() != 0).astype(np.uint8)
                depends_ix = list(np.where(depends)[0])
                isok = k % D not in depends_ix

                res.append((len(depends_ix), k, depends_ix, isok))
            report.append((natural, hiddens, model.m[-1].copy(), sorted(res),
                           [l.mask.cpu().numpy().copy() for l in model.net if hasattr(l, "mask")]))
    return report


# -----------------------------------------------------------------------------
# karpathy/pytorch-normalizing-flows: nflib/nets.py, nflib/flows.py, nflib/spline_flows.py


def nflib(torch):
    nn = torch.nn
    F = torch.nn.functional
    init = torch.nn.init
    _, MADE = made_classes(torch)

    # nflib/nets.py

    class LeafParam(nn.Module):
        """
        just ignores the input and outputs a parameter tensor, lol
        todo maybe this exists in PyTorch somewhere?
        """
        def __init__(self, n):
            super().__init__()
            self.p = nn.Parameter(torch.Tensor(1,n))

        def forward(self, x):
            return self.p.expand(x.size(0), self.p.size(1))

    class MLP(nn.Module):
        """ a simple 4-layer MLP """

        def __init__(self, nin, nout, nh):
            super().__init__()
            self.net = nn.Sequential(
                nn.Linear(nin, nh),
                nn.LeakyReLU(0.2),
                nn.Linear(nh, nh),
                nn.LeakyReLU(0.2),
                nn.Linear(nh, nh),
                nn.LeakyReLU(0.2),
                nn.Linear(nh, nout),
            )
        def forward(self, x):
            return self.net(x)

    class ARMLP(nn.Module):
        """ a 4-layer auto-regressive MLP, wrapper around MADE net """

        def __init__(self, nin, nout, nh):
            super().__init__()
            self.net = MADE(nin, [nh, nh, nh], nout, num_masks=1, natural_ordering=True)

        def forward(self, x):
            return self.net(x)

    # nflib/flows.py

    class AffineConstantFlow(nn.Module):
        """
        Scales + Shifts the flow by (learned) constants per dimension.
        In NICE paper there is a Scaling layer which is a special case of this where t is None
        """
        def __init__(self, dim, scale=True, shift=True):
            super().__init__()
            self.s = nn.Parameter(torch.randn(1, dim, requires_grad=True)) if scale else None
            self.t = nn.Parameter(torch.randn(1, dim, requires_grad=True)) if shift else None

        def forward(self, x):
            s = self.s if self.s is not None else x.new_zeros(x.size())
            t = self.t if self.t is not None else x.new_zeros(x.size())
            z = x * torch.exp(s) + t
            log_det = torch.sum(s, dim=1)
            return z, log_det

        def backward(self, z):
            s = self.s if self.s is not None else z.new_zeros(z.size())
            t = self.t if self.t is not None else z.new_zeros(z.size())
            x = (z - t) * torch.exp(-s)
            log_det = torch.sum(-s, dim=1)
            return x, log_det

    class ActNorm(AffineConstantFlow):
        """
        Really an AffineConstantFlow but with a data-dependent initialization,
        where on the very first batch we clever initialize the s,t so that the output
        is unit gaussian. As described in Glow paper.
        """
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            self.data_dep_init_done = False

        def forward(self, x):
            # first batch is used for init
            if not self.data_dep_init_done:
                assert self.s is not None and self.t is not None # for now
                self.s.data = (-torch.log(x.std(dim=0, keepdim=True))).detach()
                self.t.data = (-(x * torch.exp(self.s)).mean(dim=0, keepdim=True)).detach()
                self.data_dep_init_done = True
            return super().forward(x)

    class AffineHalfFlow(nn.Module):
        """
        As seen in RealNVP, affine autoregressive flow (z = x * exp(s) + t), where half of the
        dimensions in x are linearly scaled/transfromed as a function of the other half.
        Which half is which is determined by the parity bit.
        - RealNVP both scales and shifts (default)
        - NICE only shifts
        """
        def __init__(self, dim, parity, net_class=MLP, nh=24, scale=True, shift=True):
            super().__init__()
            self.dim = dim
            self.parity = parity
            self.s_cond = lambda x: x.new_zeros(x.size(0), self.dim // 2)
            self.t_cond = lambda x: x.new_zeros(x.size(0), self.dim // 2)
            if scale:
                self.s_cond = net_class(self.dim // 2, self.dim // 2, nh)
            if shift:
                self.t_cond = net_class(self.dim // 2, self.dim // 2, nh)

        def forward(self, x):
            x0, x1 = x[:,::2], x[:,1::2]
            if self.parity:
                x0, x1 = x1, x0
            s = self.s_cond(x0)
            t = self.t_cond(x0)
            z0 = x0 # untouched half
            z1 = torch.exp(s) * x1 + t # transform this half as a function of the other
            if self.parity:
                z0, z1 = z1, z0
            z = torch.zeros((x.shape[0], self.dim))
            z[:,::2] = z0
            z[:,1::2] = z1
            log_det = torch.sum(s, dim=1)
            return z, log_det

        def backward(self, z):
            z0, z1 = z[:,::2], z[:,1::2]
            if self.parity:
                z0, z1 = z1, z0
            s = self.s_cond(z0)
            t = self.t_cond(z0)
            x0 = z0 # this was the same
            x1 = (z1 - t) * torch.exp(-s) # reverse the transform on this half
            if self.parity:
                x0, x1 = x1, x0
            x = torch.zeros((z.shape[0], self.dim))
            x[:,::2] = x0
            x[:,1::2] = x1
            log_det = torch.sum(-s, dim=1)
            return x, log_det

    class SlowMAF(nn.Module):
        """
        Masked Autoregressive Flow, slow version with explicit networks per dim
        """
        def __init__(self, dim, parity, net_class=MLP, nh=24):
            super().__init__()
            self.dim = dim
            self.layers = nn.ModuleDict()
            self.layers[str(0)] = LeafParam(2)
            for i in range(1, dim):
                self.layers[str(i)] = net_class(i, 2, nh)
            self.order = list(range(dim)) if parity else list(range(dim))[::-1]

        def forward(self, x):
            z = torch.zeros_like(x)
            log_det = torch.zeros(x.size(0))
            for i in range(self.dim):
                st = self.layers[str(i)](x[:, :i])
                s, t = st[:, 0], st[:, 1]
                z[:, self.order[i]] = x[:, i] * torch.exp(s) + t
                log_det += s
            return z, log_det

        def backward(self, z):
            x = torch.zeros_like(z)
            log_det = torch.zeros(z.size(0))
            for i in range(self.dim):
                st = self.layers[str(i)](x[:, :i])
                s, t = st[:, 0], st[:, 1]
                x[:, i] = (z[:, self.order[i]] - t) * torch.exp(-s)
                log_det += -s
            return x, log_det

    class MAF(nn.Module):
        """ Masked Autoregressive Flow that uses a MADE-style network for fast forward """

        def __init__(self, dim, parity, net_class=ARMLP, nh=24):
            super().__init__()
            self.dim = dim
            self.net = net_class(dim, dim*2, nh)
            self.parity = parity

        def forward(self, x):
            # here we see that we are evaluating all of z in parallel, so density estimation will be fast
            st = self.net(x)
            s, t = st.split(self.dim, dim=1)
            z = x * torch.exp(s) + t
            # reverse order, so if we stack MAFs correct things happen
            z = z.flip(dims=(1,)) if self.parity else z
            log_det = torch.sum(s, dim=1)
            return z, log_det

        def backward(self, z):
            # we have to decode the x one at a time, sequentially
            x = torch.zeros_like(z)
            log_det = torch.zeros(z.size(0))
            z = z.flip(dims=(1,)) if self.parity else z
            for i in range(self.dim):
                st = self.net(x.clone()) # clone to avoid in-place op errors if using IAF
                s, t = st.split(self.dim, dim=1)
                x[:, i] = (z[:, i] - t[:, i]) * torch.exp(-s[:, i])
                log_det += -s[:, i]
            return x, log_det

    class IAF(MAF):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            """
            reverse the flow, giving an Inverse Autoregressive Flow (IAF) instead,
            where sampling will be fast but density estimation slow
            """
            self.forward, self.backward = self.backward, self.forward

    class Invertible1x1Conv(nn.Module):
        """
        As introduced in Glow paper.
        """

        def __init__(self, dim):
            super().__init__()
            self.dim = dim
            Q = torch.nn.init.orthogonal_(torch.randn(dim, dim))
            P, L, U = torch.lu_unpack(*Q.lu())
            self.P = P # remains fixed during optimization
            self.L = nn.Parameter(L) # lower triangular portion
            self.S = nn.Parameter(U.diag()) # "crop out" the diagonal to its own parameter
            self.U = nn.Parameter(torch.triu(U, diagonal=1)) # "crop out" diagonal, stored in S

        def _assemble_W(self):
            """ assemble W from its pieces (P, L, U, S) """
            L = torch.tril(self.L, diagonal=-1) + torch.diag(torch.ones(self.dim))
            U = torch.triu(self.U, diagonal=1)
            W = self.P @ L @ (U + torch.diag(self.S))
            return W

        def forward(self, x):
            W = self._assemble_W()
            z = x @ W
            log_det = torch.sum(torch.log(torch.abs(self.S)))
            return z, log_det

        def backward(self, z):
            W = self._assemble_W()
            W_inv = torch.inverse(W)
            x = z @ W_inv
            log_det = -torch.sum(torch.log(torch.abs(self.S)))
            return x, log_det

    class NormalizingFlow(nn.Module):
        """ A sequence of Normalizing Flows is a Normalizing Flow """

        def __init__(self, flows):
            super().__init__()
            self.flows = nn.ModuleList(flows)

        def forward(self, x):
            m, _ = x.shape
            log_det = torch.zeros(m)
            zs = [x]
            for flow in self.flows:
                x, ld = flow.forward(x)
                log_det += ld
                zs.append(x)
            return zs, log_det

        def backward(self, z):
            m, _ = z.shape
            log_det = torch.zeros(m)
            xs = [z]
            for flow in self.flows[::-1]:
                z, ld = flow.backward(z)
                log_det += ld
                xs.append(z)
            return xs, log_det

    class NormalizingFlowModel(nn.Module):
        """ A Normalizing Flow Model is a (prior, flow) pair """

        def __init__(self, prior, flows):
            super().__init__()
            self.prior = prior
            self.flow = NormalizingFlow(flows)

        def forward(self, x):
            zs, log_det = self.flow.forward(x)
            prior_logprob = self.prior.log_prob(zs[-1]).view(x.size(0), -1).sum(1)
            return zs, prior_logprob, log_det

        def backward(self, z):
            xs, log_det = self.flow.backward(z)
            return xs, log_det

        def sample(self, num_samples):
            z = self.prior.sample((num_samples,))
            xs, _ = self.flow.backward(z)
            return xs

    # nflib/spline_flows.py

    DEFAULT_MIN_BIN_WIDTH = 1e-3
    DEFAULT_MIN_BIN_HEIGHT = 1e-3
    DEFAULT_MIN_DERIVATIVE = 1e-3

    def searchsorted(bin_locations, inputs, eps=1e-6):
        bin_locations[..., -1] += eps
        return torch.sum(
            inputs[..., None] >= bin_locations,
            dim=-1
        ) - 1

    def unconstrained_RQS(inputs, unnormalized_widths, unnormalized_heights,
                          unnormalized_derivatives, inverse=False,
                          tail_bound=1., min_bin_width=DEFAULT_MIN_BIN_WIDTH,
                          min_bin_height=DEFAULT_MIN_BIN_HEIGHT,
                          min_derivative=DEFAULT_MIN_DERIVATIVE):
        inside_intvl_mask = (inputs >= -tail_bound) & (inputs <= tail_bound)
        outside_interval_mask = ~inside_intvl_mask

        outputs = torch.zeros_like(inputs)
        logabsdet = torch.zeros_like(inputs)

        unnormalized_derivatives = F.pad(unnormalized_derivatives, pad=(1, 1))
        constant = np.log(np.exp(1 - min_derivative) - 1)
        unnormalized_derivatives[..., 0] = constant
        unnormalized_derivatives[..., -1] = constant

        outputs[outside_interval_mask] = inputs[outside_interval_mask]
        logabsdet[outside_interval_mask] = 0

        outputs[inside_intvl_mask], logabsdet[inside_intvl_mask] = RQS(
            inputs=inputs[inside_intvl_mask],
            unnormalized_widths=unnormalized_widths[inside_intvl_mask, :],
            unnormalized_heights=unnormalized_heights[inside_intvl_mask, :],
            unnormalized_derivatives=unnormalized_derivatives[inside_intvl_mask, :],
            inverse=inverse,
            left=-tail_bound, right=tail_bound, bottom=-tail_bound, top=tail_bound,
            min_bin_width=min_bin_width,
            min_bin_height=min_bin_height,
            min_derivative=min_derivative
        )
        return outputs, logabsdet

    def RQS(inputs, unnormalized_widths, unnormalized_heights,
            unnormalized_derivatives, inverse=False, left=0., right=1.,
            bottom=0., top=1., min_bin_width=DEFAULT_MIN_BIN_WIDTH,
            min_bin_height=DEFAULT_MIN_BIN_HEIGHT,
            min_derivative=DEFAULT_MIN_DERIVATIVE):
        if torch.min(inputs) < left or torch.max(inputs) > right:
            raise ValueError("Input outside domain")

        num_bins = unnormalized_widths.shape[-1]

        if min_bin_width * num_bins > 1.0:
            raise ValueError('Minimal bin width too large for the number of bins')
        if min_bin_height * num_bins > 1.0:
            raise ValueError('Minimal bin height too large for the number of bins')

        widths = F.softmax(unnormalized_widths, dim=-1)
        widths = min_bin_width + (1 - min_bin_width * num_bins) * widths
        cumwidths = torch.cumsum(widths, dim=-1)
        cumwidths = F.pad(cumwidths, pad=(1, 0), mode='constant', value=0.0)
        cumwidths = (right - left) * cumwidths + left
        cumwidths[..., 0] = left
        cumwidths[..., -1] = right
        widths = cumwidths[..., 1:] - cumwidths[..., :-1]

        derivatives = min_derivative + F.softplus(unnormalized_derivatives)

        heights = F.softmax(unnormalized_heights, dim=-1)
        heights = min_bin_height + (1 - min_bin_height * num_bins) * heights
        cumheights = torch.cumsum(heights, dim=-1)
        cumheights = F.pad(cumheights, pad=(1, 0), mode='constant', value=0.0)
        cumheights = (top - bottom) * cumheights + bottom
        cumheights[..., 0] = bottom
        cumheights[..., -1] = top
        heights = cumheights[..., 1:] - cumheights[..., :-1]

        if inverse:
            bin_idx = searchsorted(cumheights, inputs)[..., None]
        else:
            bin_idx = searchsorted(cumwidths, inputs)[..., None]

        input_cumwidths = cumwidths.gather(-1, bin_idx)[..., 0]
        input_bin_widths = widths.gather(-1, bin_idx)[..., 0]

        input_cumheights = cumheights.gather(-1, bin_idx)[..., 0]
        delta = heights / widths
        input_delta = delta.gather(-1, bin_idx)[..., 0]

        input_derivatives = derivatives.gather(-1, bin_idx)[..., 0]
        input_derivatives_plus_one = derivatives[..., 1:].gather(-1, bin_idx)
        input_derivatives_plus_one = input_derivatives_plus_one[..., 0]

        input_heights = heights.gather(-1, bin_idx)[..., 0]

        if inverse:
            a = (((inputs - input_cumheights) * (input_derivatives \
                + input_derivatives_plus_one - 2 * input_delta) \
                + input_heights * (input_delta - input_derivatives)))
            b = (input_heights * input_derivatives - (inputs - input_cumheights) \
                * (input_derivatives + input_derivatives_plus_one \
                - 2 * input_delta))
            c = - input_delta * (inputs - input_cumheights)

            discriminant = b.pow(2) - 4 * a * c
            assert (discriminant >= 0).all()

            root = (2 * c) / (-b - torch.sqrt(discriminant))
            outputs = root * input_bin_widths + input_cumwidths

            theta_one_minus_theta = root * (1 - root)
            denominator = input_delta \
                          + ((input_derivatives + input_derivatives_plus_one \
                          - 2 * input_delta) * theta_one_minus_theta)
            derivative_numerator = input_delta.pow(2) \
                                   * (input_derivatives_plus_one * root.pow(2) \
                                    + 2 * input_delta * theta_one_minus_theta \
                                    + input_derivatives * (1 - root).pow(2))
            logabsdet = torch.log(derivative_numerator) - 2 * torch.log(denominator)
            return outputs, -logabsdet
        else:
            theta = (inputs - input_cumwidths) / input_bin_widths
            theta_one_minus_theta = theta * (1 - theta)

            numerator = input_heights * (input_delta * theta.pow(2) \
                        + input_derivatives * theta_one_minus_theta)
            denominator = input_delta + ((input_derivatives \
                          + input_derivatives_plus_one - 2 * input_delta) \
                          * theta_one_minus_theta)
            outputs = input_cumheights + numerator / denominator

            derivative_numerator = input_delta.pow(2) \
                                   * (input_derivatives_plus_one * theta.pow(2) \
                                    + 2 * input_delta * theta_one_minus_theta \
                                    + input_derivatives * (1 - theta).pow(2))
            logabsdet = torch.log(derivative_numerator) - 2 * torch.log(denominator)
            return outputs, logabsdet

    class NSF_AR(nn.Module):
        """ Neural spline flow, coupling layer, [Durkan et al. 2019] """

        def __init__(self, dim, K=5, B=3, hidden_dim=8, base_network=MLP):
            super().__init__()
            self.dim = dim
            self.K = K
            self.B = B
            self.layers = nn.ModuleList()
            self.init_param = nn.Parameter(torch.Tensor(3 * K - 1))
            for i in range(1, dim):
                self.layers += [base_network(i, 3 * K - 1, hidden_dim)]
            self.reset_parameters()

        def reset_parameters(self):
            init.uniform_(self.init_param, - 1 / 2, 1 / 2)

        def forward(self, x):
            z = torch.zeros_like(x)
            log_det = torch.zeros(z.shape[0])
            for i in range(self.dim):
                if i == 0:
                    init_param = self.init_param.expand(x.shape[0], 3 * self.K - 1)
                    W, H, D = torch.split(init_param, self.K, dim = 1)
                else:
                    out = self.layers[i - 1](x[:, :i])
                    W, H, D = torch.split(out, self.K, dim = 1)
                W, H = torch.softmax(W, dim = 1), torch.softmax(H, dim = 1)
                W, H = 2 * self.B * W, 2 * self.B * H
                D = F.softplus(D)
                z[:, i], ld = unconstrained_RQS(x[:, i], W, H, D, inverse=False, tail_bound=self.B)
                log_det += ld
            return z, log_det

        def backward(self, z):
            x = torch.zeros_like(z)
            log_det = torch.zeros(x.shape[0])
            for i in range(self.dim):
                if i == 0:
                    init_param = self.init_param.expand(x.shape[0], 3 * self.K - 1)
                    W, H, D = torch.split(init_param, self.K, dim = 1)
                else:
                    out = self.layers[i - 1](x[:, :i])
                    W, H, D = torch.split(out, self.K, dim = 1)
                W, H = torch.softmax(W, dim = 1), torch.softmax(H, dim = 1)
                W, H = 2 * self.B * W, 2 * self.B * H
                D = F.softplus(D)
                x[:, i], ld = unconstrained_RQS(z[:, i], W, H, D, inverse = True, tail_bound = self.B)
                log_det += ld
            return x, log_det

    class NSF_CL(nn.Module):
        """ Neural spline flow, coupling layer, [Durkan et al. 2019] """

        def __init__(self, dim, K=5, B=3, hidden_dim=8, base_network=MLP):
            super().__init__()
            self.dim = dim
            self.K = K
            self.B = B
            self.f1 = base_network(dim // 2, (3 * K - 1) * dim // 2, hidden_dim)
            self.f2 = base_network(dim // 2, (3 * K - 1) * dim // 2, hidden_dim)

        def forward(self, x):
            log_det = torch.zeros(x.shape[0])
            lower, upper = x[:, :self.dim // 2], x[:, self.dim // 2:]
            out = self.f1(lower).reshape(-1, self.dim // 2, 3 * self.K - 1)
            W, H, D = torch.split(out, self.K, dim = 2)
            W, H = torch.softmax(W, dim = 2), torch.softmax(H, dim = 2)
            W, H = 2 * self.B * W, 2 * self.B * H
            D = F.softplus(D)
            upper, ld = unconstrained_RQS(upper, W, H, D, inverse=False, tail_bound=self.B)
            log_det += torch.sum(ld, dim = 1)
            out = self.f2(upper).reshape(-1, self.dim // 2, 3 * self.K - 1)
            W, H, D = torch.split(out, self.K, dim = 2)
            W, H = torch.softmax(W, dim = 2), torch.softmax(H, dim = 2)
            W, H = 2 * self.B * W, 2 * self.B * H
            D = F.softplus(D)
            lower, ld = unconstrained_RQS(lower, W, H, D, inverse=False, tail_bound=self.B)
            log_det += torch.sum(ld, dim = 1)
            return torch.cat([lower, upper], dim = 1), log_det

        def backward(self, z):
            log_det = torch.zeros(z.shape[0])
            lower, upper = z[:, :self.dim // 2], z[:, self.dim // 2:]
            out = self.f2(upper).reshape(-1, self.dim // 2, 3 * self.K - 1)
            W, H, D = torch.split(out, self.K, dim = 2)
            W, H = torch.softmax(W, dim = 2), torch.softmax(H, dim = 2)
            W, H = 2 * self.B * W, 2 * self.B * H
            D = F.softplus(D)
            lower, ld = unconstrained_RQS(lower, W, H, D, inverse=True, tail_bound=self.B)
            log_det += torch.sum(ld, dim = 1)
            out = self.f1(lower).reshape(-1, self.dim // 2, 3 * self.K - 1)
            W, H, D = torch.split(out, self.K, dim = 2)
            W, H = torch.softmax(W, dim = 2), torch.softmax(H, dim = 2)
            W, H = 2 * self.B * W, 2 * self.B * H
            D = F.softplus(D)
            upper, ld = unconstrained_RQS(upper, W, H, D, inverse = True, tail_bound = self.B)
            log_det += torch.sum(ld, dim = 1)
            return torch.cat([lower, upper], dim = 1), log_det

    return SimpleNamespace(**{k: v for k, v in locals().items() if isinstance(v, type) or callable(v)})


def _flow_fill(torch, module, seed):
    """Deterministic weights (torch.Tensor(1, n) leaves memory uninitialised; both libraries alike)."""
    with torch.no_grad():
        for name, p in module.named_parameters():
            rng = np.random.default_rng(zlib.crc32(f"{seed}.{name}".encode()))
            a = rng.standard_normal(tuple(p.shape)) * 0.3
            if name.endswith(".S") or name == "S":
                a = np.sign(a) * (0.7 + np.abs(a))  # the LU diagonal stays away from 0
            p.copy_(torch.tensor(a))
        for m in module.modules():  # Invertible1x1Conv's fixed permutation, from the LU of a random Q
            if isinstance(getattr(m, "P", None), torch.Tensor):
                perm = np.random.default_rng(zlib.crc32(f"{seed}.P".encode())).permutation(m.dim)
                m.P = torch.tensor(np.eye(m.dim)[perm])


def _in64(torch, f):
    def call(*args):
        prev = torch.get_default_dtype()
        torch.set_default_dtype(torch.float64)
        try:
            return f(*args)
        finally:
            torch.set_default_dtype(prev)
    return call


def flows_page(torch, x_np, data_np, steps=5):
    prev = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        return _flows(torch, x_np, data_np, steps)
    finally:
        torch.set_default_dtype(prev)


def _flows(torch, x_np, data_np, steps):
    import itertools
    nf = nflib(torch)
    distributions = torch.distributions
    MultivariateNormal, Uniform = distributions.MultivariateNormal, distributions.Uniform
    TransformedDistribution, SigmoidTransform = distributions.TransformedDistribution, distributions.SigmoidTransform
    torch.manual_seed(0)
    makers = {
        "affine_const": lambda: nf.AffineConstantFlow(dim=2),
        "nice": lambda: nf.AffineConstantFlow(dim=2, shift=False),
        "realnvp0": lambda: nf.AffineHalfFlow(dim=2, parity=0, nh=8),
        "realnvp1": lambda: nf.AffineHalfFlow(dim=2, parity=1, nh=8),
        "nice_half": lambda: nf.AffineHalfFlow(dim=2, parity=1, nh=8, scale=False),
        "slowmaf0": lambda: nf.SlowMAF(dim=2, parity=0, nh=8),
        "slowmaf1": lambda: nf.SlowMAF(dim=2, parity=1, nh=8),
        "maf0": lambda: nf.MAF(dim=3, parity=0, nh=8),
        "maf1": lambda: nf.MAF(dim=3, parity=1, nh=8),
        "iaf": lambda: nf.IAF(dim=3, parity=1, nh=8),
        "conv": lambda: nf.Invertible1x1Conv(dim=3),
        "nsf_ar": lambda: nf.NSF_AR(dim=2, K=4, B=3, hidden_dim=8),
        "nsf_cl": lambda: nf.NSF_CL(dim=2, K=4, B=3, hidden_dim=8),
    }
    res = {}
    for name, make in makers.items():
        flow = make()
        _flow_fill(torch, flow, name)
        dim = 3 if name in ("maf0", "maf1", "iaf", "conv") else 2
        x = torch.tensor(x_np[:, :dim])
        z, ld = flow.forward(x)
        x2, ld2 = flow.backward(z)
        res[name] = {"z": z.detach().cpu().numpy(), "ld": ld.detach().cpu().numpy(),
                     "x2": x2.detach().cpu().numpy(), "ld2": ld2.detach().cpu().numpy(),
                     "fwd": _in64(torch, lambda a, f=flow: f.forward(torch.tensor(a))[0].detach().cpu().numpy())}
        if name == "conv":
            res[name]["W"] = flow._assemble_W().detach().cpu().numpy()
        # the gradient reaches every parameter through forward and log-det
        (z.sum() + ld.sum()).backward()
        res[name]["grad_ok"] = all(p.grad is not None and bool(torch.isfinite(p.grad).all()) for p in flow.parameters())
    # ActNorm's data-dependent init: the first batch comes out standardised
    an = nf.ActNorm(dim=2)
    z, ld = an.forward(torch.tensor(x_np[:, :2]))
    res["actnorm"] = {"z": z.detach().cpu().numpy(), "ld": ld.detach().cpu().numpy(),
                      "s": an.s.detach().cpu().numpy()}
    # the notebook: prior, NSF coupling + 1x1 conv + ActNorm stacks, Adam on the NLL
    prior = TransformedDistribution(Uniform(torch.zeros(2), torch.ones(2)), SigmoidTransform().inv) # Logistic distribution
    res["prior_lp"] = prior.log_prob(torch.tensor(x_np[:, :2])).cpu().numpy()
    torch.manual_seed(5)
    res["prior_samples"] = prior.sample((4000,)).cpu().numpy()
    res["mvn_lp"] = MultivariateNormal(torch.zeros(2), torch.eye(2)).log_prob(torch.tensor(x_np[:, :2])).cpu().numpy()
    nfs_flow = nf.NSF_CL if True else nf.NSF_AR
    flows = [nfs_flow(dim=2, K=4, B=3, hidden_dim=8) for _ in range(2)]
    convs = [nf.Invertible1x1Conv(dim=2) for _ in flows]
    norms = [nf.ActNorm(dim=2) for _ in flows]
    flows = list(itertools.chain(*zip(norms, convs, flows)))
    model = nf.NormalizingFlowModel(prior, flows)
    _flow_fill(torch, model, "model")
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2, weight_decay=1e-5) # todo tune WD
    res["n_params"] = sum(p.numel() for p in model.parameters())
    model.train()
    losses = []
    for k in range(steps):
        x = torch.tensor(data_np)

        zs, prior_logprob, log_det = model(x)
        logprob = prior_logprob + log_det
        loss = -torch.sum(logprob) # NLL

        model.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    res["losses"] = losses
    model.eval()
    zs, prior_logprob, log_det = model(torch.tensor(data_np))
    xs, ld_back = model.backward(zs[-1])
    res["model_roundtrip"] = (xs[-1].detach().cpu().numpy(), (log_det + ld_back).detach().cpu().numpy())
    res["model_fwd"] = _in64(torch, lambda a: model.flow.forward(torch.tensor(a))[0][-1].detach().cpu().numpy())
    res["model_ld"] = log_det.detach().cpu().numpy()
    torch.manual_seed(0)
    res["samples"] = model.sample(16)[-1].detach().cpu().numpy()
    return res


# -----------------------------------------------------------------------------
# karpathy/deep-vector-quantization: dvq/model/quantize.py


def quantize_classes(torch):
    nn = torch.nn
    F = torch.nn.functional
    einsum = torch.einsum

    def kmeans2(*args, **kwargs):  # from scipy.cluster.vq import kmeans2 (the pages set data_initialized)
        raise RuntimeError("kmeans2: SciPy's k-means initialisation is not run by these pages")

    class VQVAEQuantize(nn.Module):
        """
        Neural Discrete Representation Learning, van den Oord et al. 2017
        https://arxiv.org/abs/1711.00937

        Follows the original DeepMind implementation
        https://github.com/deepmind/sonnet/blob/v2/sonnet/src/nets/vqvae.py
        https://github.com/deepmind/sonnet/blob/v2/examples/vqvae_example.ipynb
        """
        def __init__(self, num_hiddens, n_embed, embedding_dim):
            super().__init__()

            self.embedding_dim = embedding_dim
            self.n_embed = n_embed

            self.kld_scale = 10.0

            self.proj = nn.Conv2d(num_hiddens, embedding_dim, 1)
            self.embed = nn.Embedding(n_embed, embedding_dim)

            self.register_buffer('data_initialized', torch.zeros(1))

        def forward(self, z):
            B, C, H, W = z.size()

            # project and flatten out space, so (B, C, H, W) -> (B*H*W, C)
            z_e = self.proj(z)
            z_e = z_e.permute(0, 2, 3, 1) # make (B, H, W, C)
            flatten = z_e.reshape(-1, self.embedding_dim)

            # DeepMind def does not do this but I find I have to... ;\
            # (``kmeans2`` is SciPy's ``scipy.cluster.vq.kmeans2``: the pages set ``data_initialized`` instead)
            if self.training and self.data_initialized.item() == 0:
                print('running kmeans!!') # data driven initialization for the embeddings
                rp = torch.randperm(flatten.size(0))
                kd = kmeans2(flatten[rp[:20000]].data.cpu().numpy(), self.n_embed, minit='points')
                self.embed.weight.data.copy_(torch.from_numpy(kd[0]))
                self.data_initialized.fill_(1)
                # TODO: this won't work in multi-GPU setups

            dist = (
                flatten.pow(2).sum(1, keepdim=True)
                - 2 * flatten @ self.embed.weight.t()
                + self.embed.weight.pow(2).sum(1, keepdim=True).t()
            )
            _, ind = (-dist).max(1)
            ind = ind.view(B, H, W)

            # vector quantization cost that trains the embedding vectors
            z_q = self.embed_code(ind) # (B, H, W, C)
            commitment_cost = 0.25
            diff = commitment_cost * (z_q.detach() - z_e).pow(2).mean() + (z_q - z_e.detach()).pow(2).mean()
            diff *= self.kld_scale

            z_q = z_e + (z_q - z_e).detach() # noop in forward pass, straight-through gradient estimator in backward pass
            z_q = z_q.permute(0, 3, 1, 2) # stack encodings into channels again: (B, C, H, W)
            return z_q, diff, ind

        def embed_code(self, embed_id):
            return F.embedding(embed_id, self.embed.weight)

    class GumbelQuantize(nn.Module):
        """
        Gumbel Softmax trick quantizer
        Categorical Reparameterization with Gumbel-Softmax, Jang et al. 2016
        https://arxiv.org/abs/1611.01144
        """
        def __init__(self, num_hiddens, n_embed, embedding_dim, straight_through=False):
            super().__init__()

            self.embedding_dim = embedding_dim
            self.n_embed = n_embed

            self.straight_through = straight_through
            self.temperature = 1.0
            self.kld_scale = 5e-4

            self.proj = nn.Conv2d(num_hiddens, n_embed, 1)
            self.embed = nn.Embedding(n_embed, embedding_dim)

        def forward(self, z):

            # force hard = True when we are in eval mode, as we must quantize
            hard = self.straight_through if self.training else True

            logits = self.proj(z)
            soft_one_hot = F.gumbel_softmax(logits, tau=self.temperature, dim=1, hard=hard)
            z_q = einsum('b n h w, n d -> b d h w', soft_one_hot, self.embed.weight)

            # + kl divergence to the prior loss
            qy = F.softmax(logits, dim=1)
            diff = self.kld_scale * torch.sum(qy * torch.log(qy * self.n_embed + 1e-10), dim=1).mean()

            ind = soft_one_hot.argmax(dim=1)
            return z_q, diff, ind

    return VQVAEQuantize, GumbelQuantize


def quantize_page(torch, W):
    VQVAEQuantize, GumbelQuantize = quantize_classes(torch)
    res = {}
    z = torch.tensor(W["z"], requires_grad=True)
    vq = VQVAEQuantize(num_hiddens=4, n_embed=5, embedding_dim=3)
    with torch.no_grad():
        vq.proj.weight.copy_(torch.tensor(W["proj_w"]))
        vq.proj.bias.copy_(torch.tensor(W["proj_b"]))
        vq.embed.weight.copy_(torch.tensor(W["codebook"]))  # in place of the k-means init
        vq.data_initialized.fill_(1)
    z_q, diff, ind = vq(z)
    (z_q * torch.tensor(W["upstream"])).sum().backward(retain_graph=True)
    res["vq"] = {"z_q": z_q.detach().cpu().numpy(), "diff": diff.item(), "ind": ind.cpu().numpy(),
                 "gz_st": z.grad.cpu().numpy().copy(), "gproj_st": vq.proj.weight.grad.cpu().numpy().copy(),
                 "gembed_st": None if vq.embed.weight.grad is None else vq.embed.weight.grad.cpu().numpy().copy()}
    vq.zero_grad()
    z.grad = None
    diff.backward()
    res["vq"].update(gproj_diff=vq.proj.weight.grad.cpu().numpy(), gembed_diff=vq.embed.weight.grad.cpu().numpy())
    # a few SGD steps on the commitment loss pull codes and encodings together
    opt = torch.optim.SGD(vq.parameters(), lr=0.05)
    ds = []
    for _ in range(5):
        z_q, diff, ind = vq(z.detach())
        opt.zero_grad()
        diff.backward()
        opt.step()
        ds.append(diff.item())
    res["vq"]["diffs"] = ds

    gq = GumbelQuantize(num_hiddens=4, n_embed=5, embedding_dim=3, straight_through=True)
    with torch.no_grad():
        gq.proj.weight.copy_(torch.tensor(W["gproj_w"]))
        gq.proj.bias.copy_(torch.tensor(W["proj_b"][:1].repeat(5)))
        gq.embed.weight.copy_(torch.tensor(W["codebook"]))
    z.grad = None
    torch.manual_seed(0)
    z_q, diff, ind = gq(z)
    (z_q * torch.tensor(W["upstream"])).sum().backward()
    res["gumbel_train"] = {"z_q": z_q.detach().cpu().numpy(), "diff": diff.item(), "ind": ind.cpu().numpy(),
                           "gz": z.grad.cpu().numpy().copy(), "gproj": gq.proj.weight.grad.cpu().numpy().copy()}
    gq.straight_through = False
    z_q, diff, ind = gq(z)
    res["gumbel_soft"] = {"z_q": z_q.detach().cpu().numpy(), "ind": ind.cpu().numpy()}
    gq.eval()
    z_q, diff, ind = gq(z)
    res["gumbel_eval"] = {"z_q": z_q.detach().cpu().numpy(), "ind": ind.cpu().numpy(), "diff": diff.item()}
    return res


def _vq_weights():
    rng = np.random.default_rng(11)
    return {"z": rng.standard_normal((2, 4, 3, 3)).astype(np.float32),
            "proj_w": (rng.standard_normal((3, 4, 1, 1)) * 0.5).astype(np.float32),
            "proj_b": (rng.standard_normal(3) * 0.1).astype(np.float32),
            "gproj_w": (rng.standard_normal((5, 4, 1, 1)) * 0.8).astype(np.float32),
            "codebook": rng.standard_normal((5, 3)).astype(np.float32),
            "upstream": rng.standard_normal((2, 3, 3, 3)).astype(np.float32)}


# dvq/model/deepmind_enc_dec.py, dvq/model/loss.py and dvq/vqvae.py (the LightningModule as a Module)


def vqvae_page(torch, W, steps=6):
    nn = torch.nn
    F = torch.nn.functional
    VQVAEQuantize, GumbelQuantize = quantize_classes(torch)

    class ResBlock(nn.Module):
        def __init__(self, input_channels, channel):
            super().__init__()

            self.conv = nn.Sequential(
                nn.Conv2d(input_channels, channel, 3, padding=1),
                nn.ReLU(inplace=True),
                nn.Conv2d(channel, input_channels, 1),
            )

        def forward(self, x):
            out = self.conv(x)
            out += x
            out = F.relu(out)
            return out

    class DeepMindEncoder(nn.Module):

        def __init__(self, input_channels=3, n_hid=64):
            super().__init__()

            self.net = nn.Sequential(
                nn.Conv2d(input_channels, n_hid, 4, stride=2, padding=1),
                nn.ReLU(inplace=True),
                nn.Conv2d(n_hid, 2*n_hid, 4, stride=2, padding=1),
                nn.ReLU(inplace=True),
                nn.Conv2d(2*n_hid, 2*n_hid, 3, padding=1),
                nn.ReLU(),
                ResBlock(2*n_hid, 2*n_hid//4),
                ResBlock(2*n_hid, 2*n_hid//4),
            )

            self.output_channels = 2 * n_hid
            self.output_stide = 4

        def forward(self, x):
            return self.net(x)

    class DeepMindDecoder(nn.Module):

        def __init__(self, n_init=32, n_hid=64, output_channels=3):
            super().__init__()

            self.net = nn.Sequential(
                nn.Conv2d(n_init, 2*n_hid, 3, padding=1),
                nn.ReLU(),
                ResBlock(2*n_hid, 2*n_hid//4),
                ResBlock(2*n_hid, 2*n_hid//4),
                nn.ConvTranspose2d(2*n_hid, n_hid, 4, stride=2, padding=1),
                nn.ReLU(inplace=True),
                nn.ConvTranspose2d(n_hid, output_channels, 4, stride=2, padding=1),
            )

        def forward(self, x):
            return self.net(x)

    class Normal:
        data_variance = 0.06327039811675479 # cifar-10 data variance, from deepmind sonnet code

        @classmethod
        def inmap(cls, x):
            return x - 0.5 # map [0,1] range to [-0.5, 0.5]

        @classmethod
        def unmap(cls, x):
            return torch.clamp(x + 0.5, 0, 1)

        @classmethod
        def nll(cls, x, mu):
            return (x - mu)**2 / (2 * cls.data_variance) #+ math.log(math.sqrt(2 * math.pi * cls.data_variance))

    class VQVAE(nn.Module):  # pl.LightningModule

        def __init__(
            self,
            args,
            input_channels=3,   # number of channels at the input (for images typically 3 = RGB)
            n_hid=64,           # controls the size of the model
            embedding_dim=32,   # the embedding size for each vocabulary element
            num_embeddings=512, # size of the vocabulary at the middle
        ):
            super().__init__()

            # encoder/decoder module pair
            Encoder, Decoder = {
                'deepmind': (DeepMindEncoder, DeepMindDecoder),
            }[args.enc_dec_flavor]
            self.encoder = Encoder(input_channels=input_channels, n_hid=n_hid)
            self.decoder = Decoder(n_init=embedding_dim, n_hid=n_hid, output_channels=input_channels)

            # the quantizer module sandwiched between them, +contributes a KL(posterior || prior) loss to ELBO
            QuantizerModule = {
                'vqvae': VQVAEQuantize,
                'gumbel': GumbelQuantize,
            }[args.vq_flavor]
            self.quantizer = QuantizerModule(self.encoder.output_channels, num_embeddings, embedding_dim)

            # the data reconstruction loss in the ELBO
            ReconLoss = {
                'l2': Normal,
                # todo: add vqgan
            }[args.loss_flavor]
            self.recon_loss = ReconLoss
            self.logged = {}

        def log(self, name, value, prog_bar=False):  # pl.LightningModule.log
            self.logged[name] = value.item()

        def forward(self, x):
            z = self.encoder(x)
            z_q, latent_loss, ind = self.quantizer(z)
            x_hat = self.decoder(z_q)
            return x_hat, latent_loss, ind

        def training_step(self, batch, batch_idx):
            x, y = batch # hate that i have to do this here in the model
            x = self.recon_loss.inmap(x)
            x_hat, latent_loss, ind = self.forward(x)
            recon_loss = self.recon_loss.nll(x, x_hat).mean()
            loss = recon_loss + latent_loss
            return loss

        def validation_step(self, batch, batch_idx):
            x, y = batch # hate that i have to do this here in the model
            x = self.recon_loss.inmap(x)
            x_hat, latent_loss, ind = self.forward(x)
            recon_loss = self.recon_loss.nll(x, x_hat).mean()
            self.log('val_recon_loss', recon_loss, prog_bar=True)

            # debugging: cluster perplexity. when perplexity == num_embeddings then all clusters are used exactly equally
            encodings = F.one_hot(ind, self.quantizer.n_embed).float().reshape(-1, self.quantizer.n_embed)
            avg_probs = encodings.mean(0)
            perplexity = (-(avg_probs * torch.log(avg_probs + 1e-10)).sum()).exp()
            cluster_use = torch.sum(avg_probs > 0)
            self.log('val_perplexity', perplexity, prog_bar=True)
            self.log('val_cluster_use', cluster_use, prog_bar=True)
            return ind

        def configure_optimizers(self):

            # separate out all parameters to those that will and won't experience regularizing weight decay
            decay = set()
            no_decay = set()
            whitelist_weight_modules = (torch.nn.Linear, torch.nn.Conv2d, torch.nn.ConvTranspose2d)
            blacklist_weight_modules = (torch.nn.LayerNorm, torch.nn.BatchNorm2d, torch.nn.Embedding)
            for mn, m in self.named_modules():
                for pn, p in m.named_parameters():
                    fpn = '%s.%s' % (mn, pn) if mn else pn # full param name

                    if pn.endswith('bias'):
                        # all biases will not be decayed
                        no_decay.add(fpn)
                    elif pn.endswith('weight') and isinstance(m, whitelist_weight_modules):
                        # weights of whitelist modules will be weight decayed
                        decay.add(fpn)
                    elif pn.endswith('weight') and isinstance(m, blacklist_weight_modules):
                        # weights of blacklist modules will NOT be weight decayed
                        no_decay.add(fpn)

            # validate that we considered every parameter
            param_dict = {pn: p for pn, p in self.named_parameters()}
            inter_params = decay & no_decay
            union_params = decay | no_decay
            assert len(inter_params) == 0, "parameters %s made it into both decay/no_decay sets!" % (str(inter_params), )
            assert len(param_dict.keys() - union_params) == 0, "parameters %s were not separated into either decay/no_decay set!" \
                                                        % (str(param_dict.keys() - union_params), )

            # create the pytorch optimizer object
            optim_groups = [
                {"params": [param_dict[pn] for pn in sorted(list(decay))], "weight_decay": 1e-5},
                {"params": [param_dict[pn] for pn in sorted(list(no_decay))], "weight_decay": 0.0},
            ]
            optimizer = torch.optim.AdamW(optim_groups, lr=3e-4, betas=(0.9, 0.999), eps=1e-08, weight_decay=1e-4)
            self.optimizer = optimizer

            return optimizer, sorted(decay), sorted(no_decay)

    def cos_anneal(e0, e1, t0, t1, e):
        """ ramp from (e0, t0) -> (e1, t1) through a cosine schedule based on e \\in [e0, e1] """
        alpha = max(0, min(1, (e - e0) / (e1 - e0))) # what fraction of the way through are we
        alpha = 1.0 - math.cos(alpha * math.pi/2) # warp through cosine
        t = alpha * t1 + (1 - alpha) * t0 # interpolate accordingly
        return t

    res = {"anneal": [cos_anneal(0, 190, 3e-4, 1e-5, e) for e in (0, 95, 190, 300)]}
    args = SimpleNamespace(enc_dec_flavor='deepmind', vq_flavor='vqvae', loss_flavor='l2')
    torch.manual_seed(1337)
    model = VQVAE(args, input_channels=3, n_hid=4, embedding_dim=4, num_embeddings=6)
    if W.get("state") is not None:
        model.load_state_dict({k: torch.tensor(v) for k, v in W["state"].items()})
    with torch.no_grad():
        model.quantizer.embed.weight.copy_(torch.tensor(W["codebook"]))  # in place of the k-means init
        model.quantizer.data_initialized.fill_(1)
    res["state"] = {k: v.detach().cpu().numpy().copy() for k, v in model.state_dict().items()}
    optimizer, decay, no_decay = model.configure_optimizers()
    res["decay"], res["no_decay"] = decay, no_decay
    batch = (torch.tensor(W["x"]), torch.zeros(len(W["x"]), dtype=torch.long))
    losses = []
    for batch_idx in range(steps):
        for g in optimizer.param_groups:  # the DecayLR callback, sped up
            g['lr'] = cos_anneal(0, steps, 3e-2, 1e-3, batch_idx)
        loss = model.training_step(batch, batch_idx)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    res["losses"] = losses
    model.eval()
    with torch.no_grad():
        res["ind"] = model.validation_step(batch, 0).cpu().numpy()
        x_hat, latent_loss, _ = model(model.recon_loss.inmap(batch[0]))
        res["x_hat"] = model.recon_loss.unmap(x_hat).cpu().numpy()
        res["x_hat_raw"] = x_hat.cpu().numpy()
    res["logged"] = dict(model.logged)
    # the residual block's in-place ``out += x`` after an in-place ReLU: gradcheck in float64
    rb = ResBlock(3, 2).double()
    xin = torch.tensor(W["x"][:1, :, :4, :4].astype(np.float64) - 0.5, requires_grad=True)
    res["gradcheck"] = torch.autograd.gradcheck(rb, (xin,))
    return res


def _vqvae_weights():
    rng = np.random.default_rng(21)
    return {"x": rng.random((2, 3, 8, 8)).astype(np.float32), "codebook": rng.standard_normal((6, 4)).astype(np.float32)}


_WORDS = "\n".join(["ab", "abc", "abcd", "bcd", "bcde", "cde", "de", "ea", "eab", "dab", "bca", "cab",
                    "abe", "bad", "dec", "ace", "bed", "cede", "dead", "abba"]) + "\n\n  \n"


def _mm_weights(kind, name, shape):
    rng = np.random.default_rng(zlib.crc32(f"{kind}.{name}".encode()))
    w = rng.standard_normal(shape) * 0.3
    if name.endswith(("ln_1.weight", "ln_2.weight", "ln_f.weight")):
        w = 1.0 + 0.3 * w
    return w.astype(np.float32)


def _np_ce(logits, y):
    lg = logits.reshape(-1, logits.shape[-1]).astype(np.float64)
    y = y.reshape(-1)
    keep = y != -1
    lp = lg - lg.max(1, keepdims=True)
    lp = lp - np.log(np.exp(lp).sum(1, keepdims=True))
    return -lp[keep, y[keep]].mean()


def _np_ln(x, w, b):
    mu = x.mean(-1, keepdims=True)
    var = x.var(-1, keepdims=True)
    return (x - mu) / np.sqrt(var + 1e-5) * w + b


def _np_lin(x, S, name, bias=True):
    y = x @ S[name + ".weight"].T
    return y + S[name + ".bias"] if bias else y


def _np_makemore_forward(kind, S, idx, n_head=2, vocab_size=None):
    """NumPy forward of each makemore model, from its state dict."""
    S = {k: v.astype(np.float64) for k, v in S.items()}
    b, t = idx.shape
    if kind == "bigram":
        return S["logits"][idx]
    if kind == "mlp":
        embs = []
        for _ in range(S["mlp.0.weight"].shape[1] // S["wte.weight"].shape[1]):
            embs.append(S["wte.weight"][idx])
            idx = np.roll(idx, 1, 1)
            idx[:, 0] = vocab_size
        h = np.tanh(_np_lin(np.concatenate(embs, -1), S, "mlp.0"))
        return _np_lin(h, S, "mlp.2")
    if kind in ("rnn", "gru"):
        emb, h, hs = S["wte.weight"][idx], np.repeat(S["start"], b, 0), []
        sig = lambda v: 1 / (1 + np.exp(-v))
        for i in range(t):
            xh = np.concatenate([emb[:, i], h], 1)
            if kind == "rnn":
                h = np.tanh(_np_lin(xh, S, "cell.xh_to_h"))
            else:
                r = sig(_np_lin(xh, S, "cell.xh_to_r"))
                hbar = np.tanh(_np_lin(np.concatenate([emb[:, i], r * h], 1), S, "cell.xh_to_hbar"))
                z = sig(_np_lin(xh, S, "cell.xh_to_z"))
                h = (1 - z) * h + z * hbar
            hs.append(h)
        return _np_lin(np.stack(hs, 1), S, "lm_head")
    if kind == "bow":
        x = S["wte.weight"][idx] + S["wpe.weight"][np.arange(t)][None]
        avg = np.tril(np.ones((t, t))) / np.arange(1, t + 1)[:, None]
        x = x + avg @ x
        x = x + _np_lin(np.tanh(_np_lin(x, S, "context_block.mlp.c_fc")), S, "context_block.mlp.c_proj")
        return _np_lin(x, S, "lm_head")
    # transformer
    x = S["transformer.wte.weight"][idx] + S["transformer.wpe.weight"][np.arange(t)][None]
    C = x.shape[-1]
    hs = C // n_head
    gelu = lambda v: 0.5 * v * (1 + np.tanh(math.sqrt(2 / math.pi) * (v + 0.044715 * v ** 3)))
    i = 0
    while f"transformer.h.{i}.ln_1.weight" in S:
        p = f"transformer.h.{i}."
        a = _np_ln(x, S[p + "ln_1.weight"], S[p + "ln_1.bias"])
        q, k, v = np.split(_np_lin(a, S, p + "attn.c_attn"), 3, -1)
        q, k, v = (m.reshape(b, t, n_head, hs).transpose(0, 2, 1, 3) for m in (q, k, v))
        att = q @ k.transpose(0, 1, 3, 2) / math.sqrt(hs)
        att = np.where(np.tril(np.ones((t, t))) == 0, -np.inf, att)
        att = np.exp(att - att.max(-1, keepdims=True))
        att = att / att.sum(-1, keepdims=True)
        y = (att @ v).transpose(0, 2, 1, 3).reshape(b, t, C)
        x = x + _np_lin(y, S, p + "attn.c_proj")
        m = _np_ln(x, S[p + "ln_2.weight"], S[p + "ln_2.bias"])
        x = x + _np_lin(gelu(_np_lin(m, S, p + "mlp.c_fc")), S, p + "mlp.c_proj")
        i += 1
    x = _np_ln(x, S["transformer.ln_f.weight"], S["transformer.ln_f.bias"])
    return _np_lin(x, S, "lm_head", bias=False)


_MAKEMORE = {}


def _makemore_lucid():
    if "r" not in _MAKEMORE:  # one run shared by the tests below (the page trains six models)
        _MAKEMORE["r"] = makemore_page(lucid, _WORDS, _mm_weights, steps=15)
    return _MAKEMORE["r"]


def test_makemore_datasets():
    r = _makemore_lucid()
    lines = r["dataset_text"].splitlines()
    assert lines[:5] == ["number of examples in the dataset: 20", "max word length: 4",
                         "number of unique characters in the vocabulary: 5", "vocabulary:", "abcde"]
    assert lines[5] == "split up the dataset into 18 training examples and 2 test examples"
    assert lines[6] == "dataset determined that: vocab_size=6, block_size=5"
    words = [w for w in _WORDS.split()]
    assert sorted(r["train_words"] + r["test_words"]) == sorted(words)
    w = r["train_words"][0]
    ix = ["abcde".index(c) + 1 for c in w]
    x, y = r["item0"]
    assert x == [0] + ix + [0] * (4 - len(ix)) and y == ix + [0] + [-1] * (4 - len(ix))


@pytest.mark.parametrize("kind", ["transformer", "bigram", "mlp", "rnn", "gru", "bow"])
def test_makemore_models_against_numpy(kind):
    r = _makemore_lucid()["models"][kind]
    # the forward of every model recomputed in NumPy from its (initial) state dict
    ref = _np_makemore_forward(kind, r["state"], r["X"].copy(), vocab_size=6)
    np.testing.assert_allclose(r["logits"], ref, rtol=1e-4, atol=1e-5)
    # cross_entropy(..., ignore_index=-1) is the mean over the unmasked positions
    assert (r["Y"] == -1).any()
    assert r["loss0"] == pytest.approx(_np_ce(ref, r["Y"]), rel=1e-5)
    # greedy generate: each next token is the argmax of the NumPy logits of the prefix
    g = np.array(r["greedy"])
    assert g.shape == (2, 5) and (g[:, 0] == 0).all() and r["top1"] == r["greedy"]
    for t in range(1, 5):
        ctx = g[:, :t] if kind != "bigram" else g[:, t - 1:t]
        assert (g[:, t] == _np_makemore_forward(kind, r["state"], ctx.copy(), vocab_size=6)[:, -1].argmax(-1)).all()
    # AdamW on the infinite loader learns: the last 5 losses well below the first 5
    assert r["n_params"] == {"transformer": 1024, "bigram": 36, "mlp": 438, "rnn": 246, "gru": 518, "bow": 286}[kind]
    assert r["resumed_same"]  # torch.save / torch.load of the state dict
    ls = r["losses"]
    assert len(ls) == 15 and np.mean(ls[-5:]) < np.mean(ls[:5]) - 0.12
    assert all(np.isfinite(r["eval"])) and r["eval"][0] < r["loss0"]


@pytest.mark.parametrize("kind", ["transformer", "mlp", "rnn", "gru", "bow"])
def test_makemore_models_are_causal(kind):
    model = _makemore_lucid()["models"][kind]["model"]
    dev = next(model.parameters()).device
    idx = lucid.tensor([[0, 1, 2, 3, 4], [0, 2, 2, 5, 1]], device=dev)
    base, _ = model(idx)
    for t in range(4):
        idx2 = idx.clone()
        idx2[:, t + 1:] = (idx2[:, t + 1:] + 1) % 6
        out, _ = model(idx2)
        # positions up to t do not see the changed future, bit for bit
        assert lucid.equal(out[:, :t + 1], base[:, :t + 1])
        assert not lucid.equal(out[:, t + 1:], base[:, t + 1:])


def test_makemore_samples_report():
    for kind, r in _makemore_lucid()["models"].items():
        lines = r["samples_text"].splitlines()
        assert lines.count("-" * 80) == 4
        heads = [ln for ln in lines if " samples that are " in ln]
        assert [h.split(" samples that are ")[1] for h in heads] == ["in train:", "in test:", "new:"] * 2
        n = [int(h.split()[0]) for h in heads]
        assert sum(n[:3]) == 3 and sum(n[3:]) == 4
        # do_sample=False: the three samples are one and the same word
        first = lines[1:lines.index("-" * 80, 1)]
        words = [ln for ln in first if " samples that are " not in ln]
        assert len(words) == 3 and len(set(words)) == 1
        assert set("".join(words)) <= set("abcde")


def test_random_sampler_with_replacement_is_lazy():
    g = lucid.Generator().manual_seed(5)
    s = lucid.utils.data.RandomSampler(range(7), replacement=True, num_samples=int(1e10), generator=g)
    assert len(s) == int(1e10)
    it = iter(s)
    head = [next(it) for _ in range(70)]
    # the same stream as a short sampler's: chunks of 32 draw what one call draws
    g2 = lucid.Generator().manual_seed(5)
    assert head == list(lucid.utils.data.RandomSampler(range(7), True, 70, generator=g2))
    assert set(head) <= set(range(7)) and len(set(head)) == 7
    # no generator: a private stream seeded at the start, not shifted by draws in between
    lucid.manual_seed(3)
    a = iter(lucid.utils.data.RandomSampler(range(50), replacement=True, num_samples=100))
    first = [next(a) for _ in range(40)]
    lucid.manual_seed(3)
    b = iter(lucid.utils.data.RandomSampler(range(50), replacement=True, num_samples=100))
    b0 = [next(b) for _ in range(20)]
    lucid.rand(5)
    assert b0 + [next(b) for _ in range(20)] == first
    assert len(list(a)) == 60


def test_makemore_torch_parity():
    torch = pytest.importorskip("torch")
    r = _makemore_lucid()
    t = makemore_page(torch, _WORDS, _mm_weights, steps=0, args_device="cpu")
    for kind in r["models"]:
        a, b = r["models"][kind], t["models"][kind]
        assert a["n_params"] == b["n_params"]
        for k in b["state"]:
            if k.endswith("bias") and b["state"][k].ndim == 4:
                np.testing.assert_array_equal(a["state"][k], b["state"][k])  # the causal mask buffer
        # the same batch is not drawn (randperm streams differ): recompute both on Lucid's batch
        np.testing.assert_allclose(_np_makemore_forward(kind, b["state"], a["X"].copy(), vocab_size=6),
                                   a["logits"], rtol=1e-4, atol=1e-5)
        tm = b["model"]
        logits, loss = tm(torch.tensor(a["X"]), torch.tensor(a["Y"]))
        np.testing.assert_allclose(logits.detach().numpy(), a["logits"], rtol=1e-5, atol=1e-5)
        assert loss.item() == pytest.approx(a["loss0"], rel=1e-5)
        loss.backward()
        for k, p in tm.named_parameters():
            np.testing.assert_allclose(a["grads"][k], p.grad.numpy(), rtol=1e-4, atol=1e-6)
        assert a["greedy"] == b["greedy"]


_NAMES = _names()


def _np_ninja(params, Xb, Yb):
    """Loss and gradients of the part 4 MLP (float64 NumPy, the compact formulas)."""
    C, W1, b1, W2, b2, g, b = (p.astype(np.float64) for p in params)
    n = len(Yb)
    emb = C[Xb].reshape(n, -1)
    hpre = emb @ W1 + b1
    mu, var = hpre.mean(0, keepdims=True), hpre.var(0, ddof=1, keepdims=True)
    raw = (hpre - mu) / np.sqrt(var + 1e-5)
    h = np.tanh(g * raw + b)
    logits = h @ W2 + b2
    p = np.exp(logits - logits.max(1, keepdims=True))
    p /= p.sum(1, keepdims=True)
    loss = -np.log(p[np.arange(n), Yb]).mean()
    dl = p.copy()
    dl[np.arange(n), Yb] -= 1
    dl /= n
    dhp = (1 - h ** 2) * (dl @ W2.T)
    dpre = g / np.sqrt(var + 1e-5) / n * (n * dhp - dhp.sum(0) - n / (n - 1) * raw * (dhp * raw).sum(0))
    dC = np.zeros_like(C)
    np.add.at(dC, Xb, (dpre @ W1.T).reshape(Xb.shape + (-1,)))
    return loss, [dC, emb.T @ dpre, dpre.sum(0), h.T @ dl, dl.sum(0), (raw * dhp).sum(0, keepdims=True),
                  dhp.sum(0, keepdims=True)], dl, dpre


def _cmp_lines(text):
    rows = re.findall(r"^(\S+) +\| exact: (\w+) +\| approximate: (\w+) +\| maxdiff: (\S+) \| shape is correct: (\w+)$",
                      text, re.M)
    return [(name, ex == "True", app == "True", float(md), ok == "True") for name, ex, app, md, ok in rows]


@pytest.mark.parametrize("dtype,tol", [("float32", 1e-4), ("float64", 1e-10)])
def test_backprop_ninja(dtype, tol):
    steps = 25 if dtype == "float32" else 1  # (float64: the first step's gradients only, for time)
    r = backprop_ninja_page(lucid, _NAMES, dtype=getattr(lucid, dtype), max_steps=steps)
    rows = _cmp_lines(r["cmp_text"])
    assert len(rows) == 28 and [x[0] for x in rows[:3]] == ["logprobs", "probs", "counts_sum_inv"]
    # every manual gradient of exercise 1 agrees with autograd (PyTorch: all but the batchnorm part bit
    # for bit; Lucid's rules happen to compute the same formulas throughout) ...
    assert all(app for _, _, app, _, _ in rows)
    assert all(md <= (1e-7 if dtype == "float32" else 1e-15) for _, _, _, md, _ in rows[:26])
    assert all(ex for _, ex, _, _, _ in rows[:11])  # logprobs .. b2: the same float operations
    # ... and has its tensor's shape, but for the notebook's (-dbndiff).sum(0) that drops the kept dim
    assert [name for name, *_, ok in rows if not ok] == ["bnmeani"]
    # exercises 2 and 3: the one-line backward of cross_entropy and of batchnorm, to rounding
    assert rows[26][0] == "logits" and rows[26][3] < (1e-7 if dtype == "float32" else 1e-15)
    assert rows[27][0] == "hprebn" and rows[27][3] < (1e-7 if dtype == "float32" else 1e-15)
    diff = float(re.search(r"^\S+ diff: (\S+)$", r["cmp_text"], re.M).group(1))
    assert abs(diff) < (1e-6 if dtype == "float32" else 1e-14)
    md = float(re.search(r"max diff: tensor\((\S+?),", r["cmp_text"]).group(1))
    assert md < (1e-5 if dtype == "float32" else 1e-13)
    # the loss and autograd's gradients against NumPy's float64 recomputation
    loss, grads, dl, dpre = _np_ninja(r["params"], *r["batch"])
    assert r["loss"] == pytest.approx(loss, rel=tol)
    names = ["C", "W1", "b1", "W2", "b2", "bngain", "bnbias"]
    for name, gr in zip(names, grads):
        np.testing.assert_allclose(r["autograd"][name], gr, rtol=tol, atol=tol * 1e-2)
    np.testing.assert_allclose(r["autograd"]["logits"], dl, rtol=tol, atol=tol * 1e-2)
    np.testing.assert_allclose(r["autograd"]["hprebn"], dpre, rtol=tol, atol=tol * 1e-2)
    # exercise 4: the manual gradients of the first step are NumPy's; training with them only learns
    Xb, Yb, params, manual = r["step0"]
    for m, gr in zip(manual, _np_ninja(params, Xb, Yb)[1]):
        np.testing.assert_allclose(m, gr.reshape(m.shape), rtol=tol, atol=tol * 1e-2)
    lossi = r["lossi"]
    assert len(lossi) == steps
    if steps > 1:
        assert np.mean(lossi[-5:]) < np.mean(lossi[:5]) - 0.015
    # the calibrated batchnorm's train loss: NumPy with the full-set statistics
    C, W1, b1, W2, b2, g, b = (p.astype(np.float64) for p in r["final_params"])
    X, Y = r["data"]
    hpre = C[X].reshape(len(X), -1) @ W1 + b1
    h = np.tanh(g * (hpre - hpre.mean(0)) / np.sqrt(hpre.var(0, ddof=1) + 1e-5) + b)
    assert r["train_loss"] == pytest.approx(_np_ce(h @ W2 + b2, Y), rel=tol)
    if steps > 1:
        assert r["train_loss"] < 10 ** lossi[0]


def test_backprop_ninja_torch_parity():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(7)
    shapes = [(9, 4), (12, 16), (16,), (16, 9), (9,), (1, 16), (1, 16)]
    W = [rng.standard_normal(s) * 0.5 + (1.0 if i == 5 else 0.0) for i, s in enumerate(shapes)]
    W.append(rng.integers(0, 100, 8))
    for dt in ("float32", "float64"):
        Wd = [w.astype(dt) for w in W[:-1]] + [W[-1]]
        r = backprop_ninja_page(lucid, _NAMES, getattr(lucid, dt), max_steps=0, W=Wd)
        t = backprop_ninja_page(torch, _NAMES, getattr(torch, dt), max_steps=0, W=Wd)
        tol = 1e-5 if dt == "float32" else 1e-12
        assert r["loss"] == pytest.approx(t["loss"], rel=tol)
        for k in r["autograd"]:
            # (b1's gradient is rounding noise: batchnorm removes it)
            np.testing.assert_allclose(r["autograd"][k], t["autograd"][k], rtol=tol * 10, atol=tol * 0.1)
        a, b = _cmp_lines(r["cmp_text"]), _cmp_lines(t["cmp_text"])
        assert [(x[0], x[4]) for x in a] == [(x[0], x[4]) for x in b]
        assert all(x[2] for x in a if x[0] != "b1")  # b1: rounding noise against rounding noise


def test_bn_stats_pytorchified():
    r = bn_stats_page(lucid, _NAMES)
    lines = r["text"].splitlines()
    assert lines[0] == f"      0/      3: {10 ** r['lossi'][0]:.4f}"
    outs, grads = r["outs"], r["out_grads"]
    lr = 0.1
    params = r["params"]
    # the Tanh statistics lines, recomputed in NumPy (std unbiased, as torch's)
    for line, i in zip(lines[1:3], (2, 5)):
        t = outs[i].astype(np.float64)
        m = re.match(r"layer (\d) \(      Tanh\): mean ([+-][\d.]+), std ([\d.]+), saturated: ([\d.]+)%$", line)
        assert m and int(m.group(1)) == i
        assert float(m.group(2)) == pytest.approx(t.mean(), abs=0.0051)
        assert float(m.group(3)) == pytest.approx(t.std(ddof=1), abs=0.0051)
        assert float(m.group(4)) == pytest.approx((np.abs(t) > 0.97).mean() * 100, abs=0.0051)
        # Kaiming's 5/3 with batchnorm: a tanh neither collapsed nor saturated
        assert 0.5 < t.std() < 0.8 and (np.abs(t) > 0.97).mean() < 0.1
    for line, i in zip(lines[3:5], (2, 5)):
        m = re.match(r"layer (\d) \(      Tanh\): mean ([+-][\d.]+), std (\S+)$", line)
        assert int(m.group(1)) == i and float(m.group(3)) == pytest.approx(grads[i].std(ddof=1), rel=1e-5)
        assert abs(float(m.group(2))) < 1e-5
    ws = [(p, g) for p, g in params if p.ndim == 2]
    assert len(lines) == 5 + len(ws)
    for line, (p, g) in zip(lines[5:], ws):
        m = re.match(r"weight +(\(.*\)) \| mean ([+-][\d.]+) \| std (\S+) \| grad:data ratio (\S+)$", line)
        assert m.group(1) == str(p.shape)
        assert float(m.group(3)) == pytest.approx(g.std(ddof=1), rel=1e-5)
        assert float(m.group(4)) == pytest.approx(g.std(ddof=1) / p.std(ddof=1), rel=1e-4)
    # torch.histogram(t, density=True): NumPy's 100-bin density histogram
    for (hx, hy), i in zip(r["hists"], (2, 5)):
        ny, nx = np.histogram(outs[i], bins=100, density=True)
        np.testing.assert_allclose(hx, nx[:-1], rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(hy, ny, rtol=1e-4, atol=1e-4)
    # update:data ratios, after the update
    np.testing.assert_allclose(r["ud"][-1], [np.log10((lr * g).std(ddof=1) / p.std(ddof=1)) for p, g in params],
                               rtol=1e-4, atol=1e-5)
    # the hand-made BatchNorm1d's output, from its input and the pre-update gamma/beta
    for k, (i, gamma_i) in enumerate([(1, 2), (4, 5), (7, 8)]):
        x = outs[i - 1].astype(np.float64)
        gamma = params[gamma_i][0] + lr * params[gamma_i][1]
        beta = params[gamma_i + 1][0] + lr * params[gamma_i + 1][1]
        xhat = (x - x.mean(0)) / np.sqrt(x.var(0, ddof=1) + 1e-5)
        np.testing.assert_allclose(outs[i], gamma * xhat + beta, rtol=1e-4, atol=1e-5)
        assert r["bn"][k][0].shape == (1, x.shape[1])  # the running buffers take the kept dim
    # retain_grad on the logits: (softmax - onehot) / n
    p = np.exp(outs[-1] - outs[-1].max(1, keepdims=True))
    p /= p.sum(1, keepdims=True)
    p[np.arange(32), r["Yb"]] -= 1
    np.testing.assert_allclose(grads[-1], p / 32, rtol=1e-4, atol=1e-7)


def test_bn_stats_pytorchified_torch_parity():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(3)
    shapes = [(9, 6), (18, 24), (24,), (24,), (24, 24), (24,), (24,), (24, 9), (9,), (9,)]
    W = [(rng.standard_normal(s) * (0.3 if len(s) == 2 else 0.1) + (1.0 if i in (2, 5, 8) else 0.0)).astype(np.float32)
         for i, s in enumerate(shapes)]
    W.append(rng.integers(0, 100, (3, 32)))
    r, t = bn_stats_page(lucid, _NAMES, W=W), bn_stats_page(torch, _NAMES, W=W)
    np.testing.assert_allclose(r["lossi"], t["lossi"], rtol=1e-5)
    np.testing.assert_allclose(r["ud"], t["ud"], rtol=1e-3, atol=1e-4)
    for a, b in zip(r["outs"] + r["out_grads"], t["outs"] + t["out_grads"]):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6)
    for (a, b), (c, d) in zip(r["hists"], t["hists"]):
        np.testing.assert_allclose(a, c, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(b, d, rtol=1e-3, atol=1e-3)
    assert _numbers_only(r["text"]) == pytest.approx(_numbers_only(t["text"]), rel=1e-3, abs=1e-6)


def _numbers_only(text):
    return [float(x) for x in re.findall(r"[-+]?\d+\.\d+(?:e[-+]\d+)?", text)]


def _np_conv(x, w, stride):
    win = np.lib.stride_tricks.sliding_window_view(x, w.shape[-2:], axis=(2, 3))[:, :, ::stride, ::stride]
    return np.einsum("nchwij,ocij->nohw", win, w)


def _np_lecun(S, x):
    S = {k: v.astype(np.float64) for k, v in S.items()}
    pad = lambda a: np.pad(a, ((0, 0), (0, 0), (2, 2), (2, 2)), constant_values=-1.0)
    x = np.tanh(_np_conv(pad(x), S["H1w"], 2) + S["H1b"])
    x = pad(x)
    w = S["H2w"]
    x = np.concatenate([_np_conv(x[:, 0:8], w[0:4], 2), _np_conv(x[:, 4:12], w[4:8], 2),
                        _np_conv(np.concatenate([x[:, 0:4], x[:, 8:12]], 1), w[8:12], 2)], 1) + S["H2b"]
    x = np.tanh(x).reshape(len(x), -1)
    x = np.tanh(x @ S["H3w"] + S["H3b"])
    return np.tanh(x @ S["outw"] + S["outb"])


def test_lecun1989_convnet():
    Xtr, Ytr, Xte, Yte = _lecun_data()
    r = lecun1989_page(lucid, Xtr, Ytr, Xte, Yte)
    lines = r["text"].splitlines()
    assert lines[:4] == ["model stats:", "# params:       9760", "# MACs:         63660", "# activations:  1000"]
    S = r["init"]
    # the paper's init: uniform in +-2.4/sqrt(fan_in), zero biases, -1 output bias
    assert np.abs(S["H1w"]).max() <= 2.4 / 5 and np.abs(S["H2w"]).max() <= 2.4 / math.sqrt(200)
    assert np.abs(S["H1w"]).max() > 0.9 * 2.4 / 5 and (S["outb"] == -1).all() and (S["H3b"] == 0).all()
    np.testing.assert_allclose(r["out0"], _np_lecun(S, Xte), rtol=1e-4, atol=1e-5)
    # the first SGD step's gradients (the shared H2 kernels included): float64 central differences
    x, y = Xtr[:1].astype(np.float64), Ytr[:1]
    loss = lambda S2: np.mean((y - _np_lecun(S2, x)) ** 2)
    for name, idx in [("H1w", (3, 0, 2, 1)), ("H1b", (5, 4, 4)), ("H2w", (1, 6, 2, 2)), ("H2w", (5, 0, 1, 3)),
                      ("H2w", (9, 5, 2, 2)), ("H2w", (10, 2, 0, 4)), ("H2b", (11, 1, 2)), ("H3w", (40, 7)),
                      ("outw", (3, 2)), ("outb", (4,))]:
        Sp = {k: v.astype(np.float64).copy() for k, v in S.items()}
        Sm = {k: v.astype(np.float64).copy() for k, v in S.items()}
        Sp[name][idx] += 1e-6
        Sm[name][idx] -= 1e-6
        fd = (loss(Sp) - loss(Sm)) / 2e-6
        assert r["grads0"][name][idx] == pytest.approx(fd, rel=1e-3, abs=1e-7), (name, idx)
    # two passes of one-example SGD on MSE: the train loss falls, the printed metrics are consistent
    evals = [re.match(r"eval: split (train|test ). loss (\S+). error ([\d.]+)%. misses: (\d+)$", ln) for ln in lines[4:]
             if ln.startswith("eval")]
    assert [m.group(1) for m in evals] == ["train", "test ", "train", "test "] and lines[4] == "1" and lines[7] == "2"
    init_loss = np.mean((Ytr - _np_lecun(S, Xtr)) ** 2)
    tr = [float(m.group(2)) for m in evals[::2]]
    assert tr[1] < tr[0] < init_loss
    assert tr[1] == pytest.approx(np.mean((Ytr - _np_lecun(r["final"], Xtr)) ** 2), rel=1e-4)
    for m, n in zip(evals, (16, 10, 16, 10)):
        assert int(m.group(4)) == round(float(m.group(3)) / 100 * n)


def test_lecun1989_convnet_torch_parity():
    torch = pytest.importorskip("torch")
    Xtr, Ytr, Xte, Yte = _lecun_data()
    r = lecun1989_page(lucid, Xtr, Ytr, Xte, Yte)
    t = lecun1989_page(torch, Xtr, Ytr, Xte, Yte, init=r["init"])
    np.testing.assert_allclose(r["out0"], t["out0"], rtol=1e-5, atol=1e-6)
    for k in r["grads0"]:
        np.testing.assert_allclose(r["grads0"][k], t["grads0"][k], rtol=1e-4, atol=5e-7)
    for k in r["final"]:
        np.testing.assert_allclose(r["final"][k], t["final"][k], rtol=1e-3, atol=1e-5)
    assert r["text"].splitlines()[:4] == t["text"].splitlines()[:4]


def _needs_cpu_default():
    if lucid.get_default_device().type != "cpu":
        pytest.skip("made.py's check feeds torch.from_numpy(x) to the model and reads xtr.grad[0].numpy(): "
                    "a CPU script (the flows below run MADE on every device)")


def test_made_autoregressive_property():
    _needs_cpu_default()
    for natural, hiddens, order, res, masks in made_check_page(lucid):
        assert sorted(order) == list(range(6)) and (natural == (list(order) == list(range(6))))
        for nl, k, ix, isok in res:
            assert isok  # the script's "OK": output k never sees input k
            # exactly the inputs earlier in the order (zero gradient elsewhere, bit for bit)
            assert set(ix) <= {j for j in range(6) if order[j] < order[k]}
        # output 0 in the order depends on nothing; the masks are the connectivity products
        assert [nl for nl, k, ix, _ in res if order[k] == 0] == [0]
        conn = masks[0].T.astype(bool)
        for m in masks[1:]:
            conn = (conn.astype(int) @ m.T.astype(int)) > 0
        assert not any(conn[j, k] for j in range(6) for k in range(6) if order[j] >= order[k])
    # nout = 2 * nin (the flows' ARMLP): the second chunk has the first's dependencies
    for natural, hiddens, order, res, _ in made_check_page(lucid, D=4, nout_mult=2):
        dep = {k: ix for _, k, ix, _ in res}
        assert all(dep[k] == dep[k + 4] for k in range(4))
        assert all(set(dep[k]) <= {j for j in range(4) if order[j] < order[k]} for k in range(4))


def test_made_masks_cycle_through_seeds():
    _, MADE = made_classes(lucid)
    lucid.manual_seed(0)
    model = MADE(5, [9, 9], 5, num_masks=3)
    orders = []
    for _ in range(4):
        orders.append(model.m[-1].tolist())
        model.update_masks()
    assert orders[3] == orders[0] and orders[0] == np.random.RandomState(0).permutation(5).tolist()
    assert orders[1] == np.random.RandomState(1).permutation(5).tolist()
    mask = model.net[0].mask
    assert mask.dtype == lucid.float32 and set(np.unique(mask.cpu().numpy())) <= {0.0, 1.0}


def test_made_torch_parity():
    torch = pytest.importorskip("torch")
    _needs_cpu_default()
    r, t = made_check_page(lucid), made_check_page(torch)
    for a, b in zip(r, t):
        assert a[0] == b[0] and a[1] == b[1] and list(a[2]) == list(b[2])
        assert all(x[3] for x in b[3])  # (which inputs reach an output also depends on the random weights)
        for m1, m2 in zip(a[4], b[4]):
            np.testing.assert_array_equal(m1, m2)


_FLOW_X = np.random.default_rng(0).standard_normal((6, 3))
_FLOW_X[0, 0] = 3.5  # outside the splines' [-3, 3]: the identity tails
_FLOW_DATA = np.random.default_rng(1).standard_normal((32, 2)) * np.array([0.6, 1.2]) + np.array([0.3, -0.2])
_FLOWS = {}


def _flows_lucid():
    if "r" not in _FLOWS:
        _FLOWS["r"] = flows_page(lucid, _FLOW_X, _FLOW_DATA)
    return _FLOWS["r"]


def _fd_logdet(fwd, x, h=1e-6):
    """log |det dz/dx| per row by float64 central differences (one batch: the splines refuse
    an empty inside-the-bound set)."""
    n, d = x.shape
    pts = np.concatenate([np.concatenate([row + h * np.eye(d), row - h * np.eye(d)]) for row in x])
    z = fwd(pts).reshape(n, 2 * d, d)
    J = (z[:, :d] - z[:, d:]).transpose(0, 2, 1) / (2 * h)
    return np.linalg.slogdet(J)[1]


@pytest.mark.parametrize("name", ["affine_const", "nice", "realnvp0", "realnvp1", "nice_half", "slowmaf0",
                                  "slowmaf1", "maf0", "maf1", "iaf", "conv", "nsf_ar", "nsf_cl"])
def test_flows_invert_and_log_det(name):
    r = _flows_lucid()[name]
    dim = r["z"].shape[1]
    x = _FLOW_X[:, :dim]
    np.testing.assert_allclose(r["x2"], x, rtol=0, atol=1e-11)  # backward(forward(x)) == x
    np.testing.assert_allclose(r["ld2"], -r["ld"], rtol=0, atol=1e-11)
    ld = np.broadcast_to(r["ld"], (len(x),))
    np.testing.assert_allclose(ld, _fd_logdet(r["fwd"], x), rtol=1e-6, atol=1e-7)
    assert r["grad_ok"]
    if name == "conv":
        assert r["ld"].shape == () and r["ld"] == pytest.approx(np.linalg.slogdet(r["W"])[1], abs=1e-12)
        np.testing.assert_allclose(r["z"], x @ r["W"], rtol=1e-12, atol=1e-12)
    if name == "nice":
        assert (r["ld"] == r["ld"][0]).all()
    if name == "nice_half":
        assert (r["ld"] == 0).all()  # NICE: shifts only, volume preserving
    if name in ("maf0", "slowmaf1", "nsf_ar"):  # autoregressive: z_i does not see x_j, j > i (bit for bit)
        for j in range(1, dim):
            zs = r["fwd"](np.stack([x[1], x[1] + np.eye(dim)[j] * 1e-3]))
            assert (zs[0, :j] == zs[1, :j]).all() and (zs[0, j:] != zs[1, j:]).any()
    if name == "nsf_ar":
        assert r["z"][0, 0] == 3.5  # outside the tail bound: left alone, log-det 0 for that dimension


def test_flows_actnorm_priors_and_training():
    r = _flows_lucid()
    a = r["actnorm"]
    np.testing.assert_allclose(a["z"].mean(0), 0, atol=1e-12)
    np.testing.assert_allclose(a["z"].std(0, ddof=1), 1, rtol=1e-12)
    np.testing.assert_allclose(a["ld"], -np.log(_FLOW_X[:, :2].std(0, ddof=1)).sum(), rtol=1e-12)
    x = _FLOW_X[:, :2]
    # the logistic prior (sigmoid-inverse of a uniform) and the standard normal, closed forms
    np.testing.assert_allclose(r["prior_lp"], -x - 2 * np.log1p(np.exp(-x)), rtol=1e-12)
    np.testing.assert_allclose(r["mvn_lp"], -0.5 * (x ** 2).sum(1) - np.log(2 * np.pi), rtol=1e-12)
    s = r["prior_samples"]  # logistic: mean 0, variance pi^2 / 3
    assert s.shape == (4000, 2) and np.abs(s.mean(0)).max() < 0.1 and np.abs(s.var(0) - np.pi ** 2 / 3).max() < 0.3
    # Adam on the NLL of the ActNorm / 1x1 conv / spline-coupling stack
    ls = r["losses"]
    assert len(ls) == 5 and all(b < a for a, b in zip(ls, ls[1:])) and ls[-1] < 0.8 * ls[0]
    xs, ld0 = r["model_roundtrip"]
    np.testing.assert_allclose(xs, _FLOW_DATA, atol=1e-10)
    np.testing.assert_allclose(ld0, 0, atol=1e-10)
    np.testing.assert_allclose(r["model_ld"][:4], _fd_logdet(r["model_fwd"], _FLOW_DATA[:4]), rtol=1e-6, atol=1e-7)
    assert r["samples"].shape == (16, 2) and np.isfinite(r["samples"]).all()


def test_flows_torch_parity():
    torch = pytest.importorskip("torch")
    r, t = _flows_lucid(), flows_page(torch, _FLOW_X, _FLOW_DATA)
    for name in r:
        if isinstance(r[name], dict):
            for k in ("z", "ld", "x2", "ld2", "s"):
                if k in r[name]:
                    np.testing.assert_allclose(r[name][k], t[name][k], rtol=1e-10, atol=1e-12, err_msg=f"{name}.{k}")
    np.testing.assert_allclose(r["prior_lp"], t["prior_lp"], rtol=1e-12)
    np.testing.assert_allclose(r["mvn_lp"], t["mvn_lp"], rtol=1e-12)
    assert r["n_params"] == t["n_params"]
    np.testing.assert_allclose(r["losses"], t["losses"], rtol=1e-9)
    np.testing.assert_allclose(r["model_ld"], t["model_ld"], rtol=1e-9, atol=1e-10)


def _np_vq(W):
    z = W["z"].astype(np.float64)
    z_e = np.einsum("bchw,dc->bhwd", z, W["proj_w"][:, :, 0, 0].astype(np.float64)) + W["proj_b"]
    flat = z_e.reshape(-1, 3)
    cb = W["codebook"].astype(np.float64)
    ind = ((flat[:, None, :] - cb[None]) ** 2).sum(-1).argmin(1)
    return z, z_e, ind, cb


def test_vqvae_quantizer_straight_through():
    W = _vq_weights()
    r = quantize_page(lucid, W)["vq"]
    z, z_e, ind, cb = _np_vq(W)
    assert (r["ind"].reshape(-1) == ind).all() and r["ind"].shape == (2, 3, 3)
    zq = cb[ind].reshape(2, 3, 3, 3)
    np.testing.assert_allclose(r["z_q"], zq.transpose(0, 3, 1, 2), rtol=1e-5, atol=1e-6)
    # the commitment cost: 0.25 |sg(z_q) - z_e|^2 + |z_q - sg(z_e)|^2, means over every element
    assert r["diff"] == pytest.approx(10.0 * 1.25 * ((zq - z_e) ** 2).mean(), rel=1e-5)  # kld_scale 10
    # straight-through: the upstream gradient passes to z_e unchanged; none reaches the codebook
    up = W["upstream"].astype(np.float64)
    np.testing.assert_allclose(r["gz_st"], np.einsum("bdhw,dc->bchw", up, W["proj_w"][:, :, 0, 0]), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(r["gproj_st"][:, :, 0, 0], np.einsum("bchw,bdhw->dc", z, up), rtol=1e-5, atol=1e-5)
    assert r["gembed_st"] is None
    # the loss's gradients: the codebook is pulled by the codebook term, the encoder by 0.25 of it
    N = zq.size
    gcode = np.zeros_like(cb)
    np.add.at(gcode, ind, 10.0 * 2 * (zq - z_e).reshape(-1, 3) / N)
    np.testing.assert_allclose(r["gembed_diff"], gcode, rtol=1e-5, atol=1e-7)
    dze = 10.0 * 0.25 * 2 * (z_e - zq) / N
    np.testing.assert_allclose(r["gproj_diff"][:, :, 0, 0], np.einsum("bhwd,bchw->dc", dze, z), rtol=1e-5, atol=1e-7)
    ds = r["diffs"]
    assert all(b < a for a, b in zip(ds, ds[1:])) and ds[-1] < 0.5 * ds[0]


def test_gumbel_quantizer():
    W = _vq_weights()
    r = quantize_page(lucid, W)
    z = W["z"].astype(np.float64)
    logits = np.einsum("bchw,nc->bnhw", z, W["gproj_w"][:, :, 0, 0]) + W["proj_b"][0]
    qy = np.exp(logits - logits.max(1, keepdims=True))
    qy /= qy.sum(1, keepdims=True)
    kl = 5e-4 * (qy * np.log(qy * 5 + 1e-10)).sum(1).mean()
    cb = W["codebook"]
    for key in ("gumbel_train", "gumbel_eval"):  # hard: each position is one codebook row
        g = r[key]
        assert g["diff"] == pytest.approx(kl, rel=1e-5)
        np.testing.assert_allclose(g["z_q"], cb[g["ind"]].transpose(0, 3, 1, 2), rtol=1e-6, atol=1e-6)
    # the straight-through hard sample still passes gradients to the logits (the soft sample's)
    assert np.isfinite(r["gumbel_train"]["gz"]).all() and np.abs(r["gumbel_train"]["gproj"]).min() > 0
    # soft: a convex combination of the codes, not one of them
    soft = r["gumbel_soft"]["z_q"].transpose(0, 2, 3, 1).reshape(-1, 3)
    assert (soft >= cb.min(0) - 1e-6).all() and (soft <= cb.max(0) + 1e-6).all()
    assert np.abs(soft[:, None, :] - cb[None]).sum(-1).min(1).max() > 1e-3
    # straight-through: with the same noise, hard=True is the one-hot of the soft sample and has its gradient
    lg = lucid.tensor(np.random.default_rng(2).standard_normal((4, 5)), requires_grad=True)
    w = lucid.tensor(np.random.default_rng(3).standard_normal((4, 5)))
    out = []
    for hard in (False, True):
        lucid.manual_seed(7)
        y = lucid.nn.functional.gumbel_softmax(lg, tau=0.7, hard=hard)
        g = lucid.autograd.grad((y * w).sum(), [lg])[0]  # (a bare input: a bare gradient, README)
        out.append((y.detach().cpu().numpy(), g.cpu().numpy()))
    (soft, g_soft), (hard, g_hard) = out
    np.testing.assert_array_equal(hard, np.eye(5)[soft.argmax(1)])
    np.testing.assert_allclose(g_hard, g_soft, rtol=1e-12, atol=1e-12)
    # ... and the soft sample's gradient is softmax's: y (w - <y, w>) / tau
    np.testing.assert_allclose(g_soft, soft * (w.cpu().numpy() - (soft * w.cpu().numpy()).sum(1, keepdims=True)) / 0.7,
                               rtol=1e-10, atol=1e-12)
    # gumbel_softmax(hard=True) samples the softmax's categorical distribution
    lucid.manual_seed(1)
    lg = lucid.tensor([[1.0, 0.0, -1.0, 0.5, 2.0]]).repeat(4000, 1)
    oh = lucid.nn.functional.gumbel_softmax(lg, tau=1.0, hard=True).cpu().numpy()
    assert set(np.unique(oh)) == {0.0, 1.0} and (oh.sum(1) == 1).all()
    p = np.exp([1.0, 0.0, -1.0, 0.5, 2.0])
    np.testing.assert_allclose(oh.mean(0), p / p.sum(), atol=0.03)


def test_quantizers_torch_parity():
    torch = pytest.importorskip("torch")
    W = _vq_weights()
    r, t = quantize_page(lucid, W), quantize_page(torch, W)
    for k in ("z_q", "ind", "gz_st", "gproj_st", "gproj_diff", "gembed_diff"):
        np.testing.assert_allclose(r["vq"][k], t["vq"][k], rtol=1e-5, atol=1e-6)
    assert r["vq"]["gembed_st"] is None and t["vq"]["gembed_st"] is None
    np.testing.assert_allclose(r["vq"]["diffs"], t["vq"]["diffs"], rtol=1e-5)
    for k in ("gumbel_train", "gumbel_eval"):  # the noise differs: the KL term does not
        assert r[k]["diff"] == pytest.approx(t[k]["diff"], rel=1e-5)


def test_vqvae_deepmind_model():
    W = _vqvae_weights()
    r = vqvae_page(lucid, W)
    # DecayLR's cosine ramp: t0 at e0, the cosine midpoint, t1 from e1 on
    np.testing.assert_allclose(r["anneal"], [3e-4, (1 - math.cos(math.pi / 4)) * 1e-5 + math.cos(math.pi / 4) * 3e-4,
                                             1e-5, 1e-5], rtol=1e-12)
    # configure_optimizers: every conv weight decays; biases and the codebook do not
    names = set(r["state"]) - {"quantizer.data_initialized"}
    assert set(r["decay"]) | set(r["no_decay"]) == names and not set(r["decay"]) & set(r["no_decay"])
    assert set(r["decay"]) == {n for n in names if n.endswith("weight") and n != "quantizer.embed.weight"}
    assert len(r["decay"]) == 15 and "quantizer.embed.weight" in r["no_decay"]
    assert r["gradcheck"] is True  # ResBlock: ``out += x`` after ReLU(inplace=True)
    ls = r["losses"]
    assert len(ls) == 6 and ls[-1] < 0.5 * ls[0]
    # validation_step's logs against NumPy: the reconstruction NLL and the code perplexity
    x = W["x"] - 0.5
    lg = r["logged"]
    assert lg["val_recon_loss"] == pytest.approx(((x - r["x_hat_raw"]) ** 2 / (2 * 0.06327039811675479)).mean(), rel=1e-5)
    p = np.bincount(r["ind"].reshape(-1), minlength=6) / r["ind"].size
    assert lg["val_perplexity"] == pytest.approx(np.exp(-(p * np.log(p + 1e-10)).sum()), rel=1e-5)
    assert lg["val_cluster_use"] == (p > 0).sum() and r["ind"].shape == (2, 2, 2)
    np.testing.assert_allclose(r["x_hat"], np.clip(r["x_hat_raw"] + 0.5, 0, 1))


def test_vqvae_deepmind_model_torch_parity():
    torch = pytest.importorskip("torch")
    W = _vqvae_weights()
    r = vqvae_page(lucid, W)
    t = vqvae_page(torch, dict(W, state=r["state"]))
    assert r["decay"] == t["decay"] and r["no_decay"] == t["no_decay"]
    np.testing.assert_allclose(r["losses"], t["losses"], rtol=1e-4)
    np.testing.assert_allclose(r["x_hat_raw"], t["x_hat_raw"], rtol=1e-4, atol=1e-5)
    assert (r["ind"] == t["ind"]).all()
    for k in r["logged"]:
        assert r["logged"][k] == pytest.approx(t["logged"][k], rel=1e-4)
