"""A character-level Transformer language model trained on the Python standard library's source.

The corpus is a few hundred KB of ``.py`` files read at run time from this Python's own
standard library (``sysconfig.get_paths()["stdlib"]``), so every machine has it. The model
is what a PyTorch user would write: token and position embeddings, an
``nn.TransformerEncoder`` (pre-norm layers) under a causal mask, a linear head. The run
shows a progress bar, the validation perplexity after each epoch, a checkpoint of model
and optimizer saved and reloaded to the same loss, and text sampled from the model.

Run: ``bash scripts/run_main.sh charlm`` (or ``python examples/train_charlm.py --epochs 4``).
"""
from __future__ import annotations

import argparse
import glob
import math
import os
import sys
import sysconfig
import time

# One BLAS thread (unless the caller chose): the matrices here are small, and on a busy
# 2-core machine OpenBLAS's spinning worker threads made each step ~9x slower (measured:
# 2.25 s -> 0.25 s per step). Must be set before NumPy loads OpenBLAS.
for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import numpy as np  # noqa: E402

import lucid  # noqa: E402
import lucid.nn as nn  # noqa: E402
import lucid.nn.functional as Fn  # noqa: E402

# Printable ASCII, newline and tab; anything else becomes "?" (the stdlib is mostly ASCII).
VOCAB = ["\n", "\t"] + [chr(c) for c in range(32, 127)]
STOI = {c: i for i, c in enumerate(VOCAB)}
UNKNOWN = STOI["?"]


def progress(it, total, prefix, width=28, extra=None):
    """A dependency-free progress bar; ``extra()`` adds text (e.g. the running loss)."""
    start = time.perf_counter()
    for i, item in enumerate(it, 1):
        yield item
        if i == total or i % max(total // 20, 1) == 0:
            done = int(width * i / total)
            rate = i / max(time.perf_counter() - start, 1e-9)
            tail = f" {extra()}" if extra else ""
            sys.stdout.write(f"\r{prefix} [{'#' * done}{'.' * (width - done)}] {i}/{total} {rate:5.1f} it/s{tail}")
            sys.stdout.write("\n" if i == total else "")
            sys.stdout.flush()


def load_corpus(kilobytes):
    """About ``kilobytes`` KB of the stdlib's top-level ``.py`` files, in a fixed (sorted) order."""
    root = sysconfig.get_paths()["stdlib"]
    files = sorted(glob.glob(os.path.join(root, "*.py")))
    if not files:
        raise SystemExit(f"no .py files under the stdlib path {root!r}")
    parts, size = [], 0
    for path in files:
        try:
            with open(path, encoding="utf-8", errors="replace") as f:
                text = f.read()
        except OSError:
            continue
        parts.append(f"# file: {os.path.basename(path)}\n{text}\n")
        size += len(parts[-1])
        if size >= kilobytes * 1024:
            break
    text = "".join(parts)[: kilobytes * 1024]
    return np.array([STOI.get(c, UNKNOWN) for c in text], dtype=np.int64), len(parts), root


class CharTransformer(nn.Module):
    """Embeddings -> TransformerEncoder (causal, pre-norm) -> LayerNorm -> linear head."""

    def __init__(self, vocab, block, d_model, nhead, layers, ff):
        super().__init__()
        self.block = block
        self.tok = nn.Embedding(vocab, d_model)
        self.pos = nn.Embedding(block, d_model)
        layer = nn.TransformerEncoderLayer(d_model, nhead, dim_feedforward=ff, dropout=0.0, batch_first=True,
                                           norm_first=True, activation="gelu")
        self.encoder = nn.TransformerEncoder(layer, layers)
        self.norm = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, vocab)
        self.register_buffer("mask", nn.Transformer.generate_square_subsequent_mask(block), persistent=False)

    def forward(self, idx):
        t = idx.shape[1]
        x = self.tok(idx) + self.pos(lucid.arange(t))
        x = self.encoder(x, mask=self.mask[:t, :t], is_causal=True)
        return self.head(self.norm(x))


def batches(data, n, batch_size, block, rng):
    """``n`` batches of random windows: inputs and the next characters."""
    for _ in range(n):
        starts = rng.integers(0, len(data) - block - 1, size=batch_size)
        rows = np.stack([data[s:s + block + 1] for s in starts])
        yield lucid.tensor(rows[:, :-1]), lucid.tensor(rows[:, 1:])


def lm_loss(model, x, y):
    logits = model(x)
    return Fn.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))


def evaluate(model, val_batches):
    """Mean cross-entropy (nats per character) over fixed validation batches."""
    model.eval()
    with lucid.no_grad():
        loss = float(np.mean([lm_loss(model, x, y).item() for x, y in val_batches]))
    model.train()
    return loss


def sample(model, prompt, n, temperature, rng):
    """Generate ``n`` characters after ``prompt`` (temperature sampling)."""
    model.eval()
    idx = [STOI.get(c, UNKNOWN) for c in prompt]
    with lucid.no_grad():
        for _ in range(n):
            ctx = lucid.tensor(np.array([idx[-model.block:]], dtype=np.int64))
            logits = model(ctx)[0, -1].numpy().astype(np.float64) / temperature
            p = np.exp(logits - logits.max())
            idx.append(int(rng.choice(len(p), p=p / p.sum())))
    model.train()
    return "".join(VOCAB[i] for i in idx)


def make_model(args):
    return CharTransformer(len(VOCAB), args.block, args.d_model, args.nhead, args.layers, args.ff)


def train(args):
    t_start = time.perf_counter()
    lucid.manual_seed(args.seed)
    rng = np.random.default_rng(args.seed)
    data, n_files, root = load_corpus(args.corpus_kb)
    split = int(0.9 * len(data))
    train_data, val_data = data[:split], data[split:]
    print(f"corpus: {len(data) / 1024:.0f} KB from {n_files} stdlib files under {root}")
    print(f"        {len(train_data)} training / {len(val_data)} validation characters, vocabulary {len(VOCAB)}")
    model = make_model(args)
    print(f"model: {args.layers} pre-norm Transformer layers, d_model {args.d_model}, {args.nhead} heads, "
          f"context {args.block}; parameters: {sum(p.numel() for p in model.parameters())}")
    opt = lucid.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.01)
    total_steps = args.epochs * args.steps
    sched = lucid.optim.lr_scheduler.OneCycleLR(opt, max_lr=args.lr, total_steps=total_steps, pct_start=0.1)
    val_batches = list(batches(val_data, args.val_batches, args.batch_size, args.block, np.random.default_rng(1)))
    print(f"before training: validation perplexity {math.exp(evaluate(model, val_batches)):.1f} "
          f"(uniform guessing: {len(VOCAB)})")
    history = []
    deadline = t_start + args.time_budget
    for epoch in range(1, args.epochs + 1):
        running = []
        bar = progress(batches(train_data, args.steps, args.batch_size, args.block, rng), args.steps,
                       f"epoch {epoch}/{args.epochs}", extra=lambda: f"loss {np.mean(running[-20:]):.3f}")
        for x, y in bar:
            if time.perf_counter() > deadline:  # a busy machine: keep the promised run time
                print(f"\n  time budget of {args.time_budget:.0f} s reached after {len(running)} steps")
                break
            loss = lm_loss(model, x, y)
            opt.zero_grad()
            loss.backward()
            nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            sched.step()
            running.append(loss.item())
        val = evaluate(model, val_batches)
        history.append(val)
        print(f"  train loss {np.mean(running):.3f}  validation loss {val:.3f}  "
              f"perplexity {math.exp(val):.2f}  ({val / math.log(2):.2f} bits/char)")
        if time.perf_counter() > deadline:
            break
    print(f"training took {time.perf_counter() - t_start:.1f} s")
    return model, opt, val_batches, history


def checkpoint_roundtrip(model, opt, val_batches, args):
    """Save model and optimizer, reload into fresh objects: the same loss, and the same next step."""
    os.makedirs(args.out_dir, exist_ok=True)
    path = os.path.join(args.out_dir, "charlm.safetensors")
    lucid.save({"model": model.state_dict(), "optimizer": opt.state_dict(), "args": vars(args)}, path)
    ckpt = lucid.load(path)
    restored = make_model(args)
    restored.load_state_dict(ckpt["model"])
    opt2 = lucid.optim.AdamW(restored.parameters(), lr=args.lr, weight_decay=0.01)
    opt2.load_state_dict(ckpt["optimizer"])
    before, after = evaluate(model, val_batches), evaluate(restored, val_batches)
    print(f"checkpoint {path} ({os.path.getsize(path) / 1024:.0f} KB): validation loss {before:.6f} before "
          f"saving, {after:.6f} after reloading")
    if before != after:
        raise SystemExit("the reloaded checkpoint does not reproduce the validation loss")
    return path, after


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--epochs", type=int, default=4)
    ap.add_argument("--steps", type=int, default=100, help="training steps per epoch")
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--block", type=int, default=64, help="context length in characters")
    ap.add_argument("--d-model", type=int, default=96)
    ap.add_argument("--nhead", type=int, default=4)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--ff", type=int, default=256)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--corpus-kb", type=int, default=400)
    ap.add_argument("--val-batches", type=int, default=8)
    ap.add_argument("--sample-chars", type=int, default=400)
    ap.add_argument("--temperature", type=float, default=0.7)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--time-budget", type=float, default=140.0,
                    help="seconds for data loading and training; later epochs are cut short past it")
    ap.add_argument("--out-dir", default="runs")
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    model, opt, val_batches, history = train(args)
    checkpoint_roundtrip(model, opt, val_batches, args)
    text = sample(model, "def ", args.sample_chars, args.temperature, np.random.default_rng(args.seed))
    print("--- sampled from the model (prompt 'def ') ---")
    print(text)
    print("---")
    print(f"total time {time.perf_counter() - t0:.1f} s")
    return history


if __name__ == "__main__":
    main()
