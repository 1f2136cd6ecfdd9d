"""Core benchmarks (issue 2), run by hand: ``python benchmarks/bench_core.py``.

W1  eager per-op overhead: forward+backward of a 200-op elementwise chain on a (16,) tensor
W2  forward+backward+SGD step of a 784-512-512-10 ReLU MLP, softmax cross-entropy, batch 128
W6  peak RSS growth of one W2 step at batch 4096 (each side in a fresh subprocess)
    import time of ``import lucid`` (fresh subprocess)

Each workload is timed in this one process against hand-written NumPy and, when installed,
PyTorch CPU (threads = cores). Prints a table of ratios (lucid / reference; < 1 is faster).
"""
from __future__ import annotations

import os
import subprocess
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import lucid  # noqa: E402

try:
    import torch

    torch.set_num_threads(os.cpu_count() or 1)
except ImportError:  # optional reference
    torch = None


def best_of(fn, repeat=5, number=10, warmup=5):
    """Best mean seconds per call over ``repeat`` rounds of ``number`` calls (after a warm-up;
    the first calls of a fresh process are markedly slower for every library)."""
    for _ in range(warmup):
        fn()
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        for _ in range(number):
            fn()
        best = min(best, (time.perf_counter() - t0) / number)
    return best


# ----------------------------------------------------------------------------- W1

CHAIN = 200


def w1_lucid():
    x = lucid.tensor(np.linspace(0.1, 0.9, 16, dtype=np.float32), requires_grad=True)
    w = lucid.tensor(np.linspace(0.95, 1.05, 16, dtype=np.float32))

    def run():
        y = x
        for i in range(CHAIN // 5):
            y = (y * w + w).tanh().exp().sin()
        y.sum().backward()
        x.grad = None

    return run


def w1_numpy():
    x = np.linspace(0.1, 0.9, 16, dtype=np.float32)
    w = np.linspace(0.95, 1.05, 16, dtype=np.float32)

    def run():
        saved = []
        y = x
        for i in range(CHAIN // 5):
            a = y * w + w
            t = np.tanh(a)
            e = np.exp(t)
            s = np.sin(e)
            saved.append((t, e))
            y = s
        g = np.ones_like(y)
        for t, e in reversed(saved):
            g = g * np.cos(e)
            g = g * e
            g = g * (1 - t * t)
            g = g * w
        return g

    return run


def w1_torch():
    x = torch.linspace(0.1, 0.9, 16, requires_grad=True)
    w = torch.linspace(0.95, 1.05, 16)

    def run():
        y = x
        for i in range(CHAIN // 5):
            y = (y * w + w).tanh().exp().sin()
        y.sum().backward()
        x.grad = None

    return run


# ----------------------------------------------------------------------------- W2

SIZES = (784, 512, 512, 10)


def _mlp_data(batch, seed=0):
    rng = np.random.default_rng(seed)
    xs = rng.standard_normal((batch, SIZES[0])).astype(np.float32)
    ys = rng.integers(0, SIZES[-1], batch)
    ws = [(rng.standard_normal((i, o)) / np.sqrt(i)).astype(np.float32) for i, o in zip(SIZES[:-1], SIZES[1:])]
    bs = [np.zeros(o, np.float32) for o in SIZES[1:]]
    return xs, ys, ws, bs


def _lucid_cross_entropy(logits, target):
    fn = getattr(getattr(lucid.nn, "functional", None), "cross_entropy", None)
    if fn is not None:
        return fn(logits, target)
    m = logits.amax(dim=1, keepdim=True).detach()
    z = logits - m
    logp = z - z.exp().sum(dim=1, keepdim=True).log()
    return -logp[lucid.arange(logits.shape[0]), target].mean()


def w2_lucid(batch=128, lr=0.01):
    xs, ys, ws, bs = _mlp_data(batch)
    x, y = lucid.tensor(xs), lucid.tensor(ys)
    params = [lucid.tensor(a, requires_grad=True) for pair in zip(ws, bs) for a in pair]

    def run():
        h = x
        for i in range(0, len(params), 2):
            h = h @ params[i] + params[i + 1]
            if i < len(params) - 2:
                h = h.relu()
        loss = _lucid_cross_entropy(h, y)
        loss.backward()
        with lucid.no_grad():
            for p in reversed(params):  # last layer first, the order of the NumPy step's updates
                p._data -= lr * p.grad._data
                p.grad = None

    return run


def w2_numpy(batch=128, lr=0.01):
    xs, ys, ws, bs = _mlp_data(batch)
    ws = [w.copy() for w in ws]
    bs = [b.copy() for b in bs]

    def run():
        acts, h = [xs], xs
        for i, (w, b) in enumerate(zip(ws, bs)):
            h = h @ w + b
            if i < len(ws) - 1:
                h = np.maximum(h, 0)
            acts.append(h)
        m = h.max(axis=1, keepdims=True)
        z = h - m
        e = np.exp(z)
        s = e.sum(axis=1, keepdims=True)
        loss = (np.log(s[:, 0]) - z[np.arange(batch), ys]).mean()  # the forward's value, as in every step
        p = e / s
        g = p
        g[np.arange(batch), ys] -= 1
        g /= batch
        for i in range(len(ws) - 1, -1, -1):
            gw = acts[i].T @ g
            gb = g.sum(axis=0)
            if i > 0:
                g = (g @ ws[i].T) * (acts[i] > 0)
            ws[i] -= lr * gw
            bs[i] -= lr * gb
        return loss

    return run


def w2_torch(batch=128, lr=0.01):
    xs, ys, ws, bs = _mlp_data(batch)
    x, y = torch.from_numpy(xs), torch.from_numpy(ys)
    params = [torch.tensor(a, requires_grad=True) for pair in zip(ws, bs) for a in pair]

    def run():
        h = x
        for i in range(0, len(params), 2):
            h = h @ params[i] + params[i + 1]
            if i < len(params) - 2:
                h = h.relu()
        loss = torch.nn.functional.cross_entropy(h, y)
        loss.backward()
        with torch.no_grad():
            for p in params:
                p -= lr * p.grad
                p.grad = None

    return run


# ------------------------------------------------------------------ W6 and import

_RSS_SNIPPET = r"""
import resource, sys
sys.path.insert(0, {root!r})
sys.path.insert(0, {here!r})
import bench_core as b
run = b.w2_{side}(batch=4096)
import gc; gc.collect()
def rss():
    with open('/proc/self/status') as f:
        for line in f:
            if line.startswith('VmRSS'):
                return int(line.split()[1])
base = rss()
run()
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(peak - base)
"""


def peak_rss_growth_kib(side):
    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
    code = _RSS_SNIPPET.format(root=root, here=os.path.dirname(os.path.abspath(__file__)), side=side)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return int(out.stdout.strip().splitlines()[-1])


def import_time():
    """Best of 3 fresh interpreters, after one warm-up run that writes the bytecode cache
    (some shells set PYTHONDONTWRITEBYTECODE, which would time compilation instead)."""
    code = "import time; t=time.perf_counter(); import lucid; print(time.perf_counter()-t)"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    cwd = os.path.join(os.path.dirname(__file__), "..")

    def once():
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                             check=True, cwd=cwd, env=env)
        return float(out.stdout)

    once()
    return min(once() for _ in range(3))


def interleaved(makers, rounds=3, **kw):
    """``best_of`` for each side, the sides taking turns for ``rounds`` rounds (best kept),
    so that a burst of load on this shared machine hits them alike."""
    fns = [mk() if mk else None for mk in makers]
    best = [float("inf") if fn else None for fn in fns]
    for _ in range(rounds):
        for i, fn in enumerate(fns):
            if fn:
                best[i] = min(best[i], best_of(fn, **kw))
    return best


def main():
    rows = []
    t_l, t_n, t_t = interleaved((w1_lucid, w1_numpy, torch and w1_torch), rounds=5, repeat=5, number=20)
    per_op = 1e6 / (CHAIN + 1)
    rows.append(("W1 per-op fwd+bwd (us)", t_l * per_op, t_n * per_op, t_t * per_op if t_t else None))
    t_l, t_n, t_t = interleaved((w2_lucid, w2_numpy, torch and w2_torch), rounds=8, repeat=5, number=5)
    rows.append(("W2 MLP step (ms)", t_l * 1e3, t_n * 1e3, t_t * 1e3 if t_t else None))
    r_l, r_n = peak_rss_growth_kib("lucid"), peak_rss_growth_kib("numpy")
    r_t = peak_rss_growth_kib("torch") if torch else None
    rows.append(("W6 peak RSS growth (MiB)", r_l / 1024, r_n / 1024, r_t / 1024 if r_t else None))
    rows.append(("import lucid (s)", import_time(), None, None))
    print(f"{'workload':28s} {'lucid':>10s} {'numpy':>10s} {'torch':>10s} {'vs numpy':>9s} {'vs torch':>9s}")
    for name, l, n, t in rows:
        fmt = lambda v: f"{v:10.3f}" if v is not None else f"{'-':>10s}"  # noqa: E731
        ratio = lambda a, b: f"{a / b:9.2f}" if b else f"{'-':>9s}"  # noqa: E731
        print(f"{name:28s} {fmt(l)} {fmt(n)} {fmt(t)} {ratio(l, n)} {ratio(l, t)}")


if __name__ == "__main__":
    main()
