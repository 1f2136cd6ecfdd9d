"""Training-step benchmarks (issue 4), run by hand: ``python benchmarks/bench_nn.py``.

W5     one SGD training step of a small CNN: input 64x1x28x28 float32, Conv2d(1, 16, 3, padding=1)
       + ReLU, Conv2d(16, 32, 3, padding=1) + ReLU, global average pool, Linear(32, 10),
       cross-entropy — written with ``lucid.nn`` + ``lucid.optim`` — against hand-written NumPy
       (im2col + BLAS, with its backward) and PyTorch CPU.
W2-nn  the W2 MLP step (784-512-512-10 ReLU, batch 128, softmax cross-entropy, SGD) written with
       ``nn.Linear`` + ``nn.CrossEntropyLoss`` + ``optim.SGD``, against the hand-written NumPy of
       ``bench_core.py`` and PyTorch CPU.

Everything is timed in this one process: best mean over several rounds (after a warm-up), so a
loaded machine inflates the numbers less. ``--cpu`` times with ``time.process_time`` instead (CPU
seconds of this process, all threads summed), ``--profile`` prints a cProfile of the lucid steps and
``--layers`` the per-layer / per-backward-rule times of the lucid CNN step (its hot spots).
Targets (issue 4): W5 within 2x of PyTorch, W2-nn within 1.1x of NumPy.
"""
from __future__ import annotations

import os
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))
sys.path.insert(0, HERE)
import lucid  # noqa: E402
import lucid.nn as nn  # noqa: E402
from bench_core import _mlp_data, w2_numpy  # noqa: E402

try:
    import torch

    # the cores this process may run on (``taskset`` is honoured), as many as PyTorch gets threads
    torch.set_num_threads(len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1)
except ImportError:  # optional reference
    torch = None

CLOCK = time.perf_counter


def best_of(fn, repeat=7, number=5):
    """Best mean seconds per call over ``repeat`` rounds of ``number`` calls (after a warm-up)."""
    fn()
    fn()
    best = float("inf")
    for _ in range(repeat):
        t0 = CLOCK()
        for _ in range(number):
            fn()
        best = min(best, (CLOCK() - t0) / number)
    return best


# ----------------------------------------------------------------------------- W5 (CNN)

N, H, W, C1, C2, K, NCLS = 64, 28, 28, 16, 32, 3, 10
LR = 0.01


def _cnn_data(seed=0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((N, 1, H, W)).astype(np.float32)
    y = rng.integers(0, NCLS, N)
    w1 = (rng.standard_normal((C1, 1, K, K)) / 3.0).astype(np.float32)
    b1 = np.zeros(C1, np.float32)
    w2 = (rng.standard_normal((C2, C1, K, K)) / np.sqrt(C1 * K * K)).astype(np.float32)
    b2 = np.zeros(C2, np.float32)
    w3 = (rng.standard_normal((NCLS, C2)) / np.sqrt(C2)).astype(np.float32)
    b3 = np.zeros(NCLS, np.float32)
    return x, y, [w1, b1, w2, b2, w3, b3]


def _cnn_modules(mod, params):
    net = mod.Sequential(
        mod.Conv2d(1, C1, K, padding=1), mod.ReLU(),
        mod.Conv2d(C1, C2, K, padding=1), mod.ReLU(),
        mod.AdaptiveAvgPool2d(1), mod.Flatten(),
        mod.Linear(C2, NCLS),
    )
    conv = lucid.tensor if mod is nn else torch.from_numpy
    for p, a in zip(net.parameters(), params):
        p.data.copy_(conv(a))
    return net


def w5_lucid():
    xs, ys, params = _cnn_data()
    net = _cnn_modules(nn, params)
    opt = lucid.optim.SGD(net.parameters(), lr=LR)
    crit = nn.CrossEntropyLoss()
    x, y = lucid.tensor(xs), lucid.tensor(ys)

    def run():
        opt.zero_grad()
        loss = crit(net(x), y)
        loss.backward()
        opt.step()
        return loss

    return run


def w5_torch():
    xs, ys, params = _cnn_data()
    net = _cnn_modules(torch.nn, params)
    opt = torch.optim.SGD(net.parameters(), lr=LR)
    crit = torch.nn.CrossEntropyLoss()
    x, y = torch.from_numpy(xs), torch.from_numpy(ys)

    def run():
        opt.zero_grad()
        loss = crit(net(x), y)
        loss.backward()
        opt.step()
        return loss

    return run


# The hand-written NumPy keeps activations channel-major (C, N, H, W): im2col is k*k slice
# copies of rows, col2im k*k slice adds, and each conv is one GEMM whose (O, N*H*W) result is
# already the next layer's layout.
def _im2col(xp_, k):
    """(C, N, Hp, Wp) padded -> (C*k*k, N*H*W) columns."""
    c, n, hp, wp = xp_.shape
    h, w = hp - k + 1, wp - k + 1
    cols = np.empty((c, k, k, n, h, w), xp_.dtype)
    for i in range(k):
        for j in range(k):
            cols[:, i, j] = xp_[:, :, i:i + h, j:j + w]
    return cols.reshape(c * k * k, n * h * w)


def _col2im(cols, shape, k):
    """Adjoint of :func:`_im2col`: (C*k*k, N*H*W) -> (C, N, Hp, Wp), overlapping windows summed."""
    c, n, hp, wp = shape
    h, w = hp - k + 1, wp - k + 1
    cols = cols.reshape(c, k, k, n, h, w)
    out = np.zeros(shape, cols.dtype)
    for i in range(k):
        for j in range(k):
            out[:, :, i:i + h, j:j + w] += cols[:, i, j]
    return out


def _conv_np(x, w, b):
    xp_ = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    cols = _im2col(xp_, K)
    return w.reshape(w.shape[0], -1) @ cols + b[:, None], cols, xp_.shape  # (O, N*H*W)


def w5_numpy_grads(xs, ys, w1, b1, w2, b2, w3, b3):
    """Forward + hand-written backward of the W5 CNN; returns the six gradients."""
    o1, cols1, _ = _conv_np(xs.reshape(1, N, H, W), w1, b1)
    o2, cols2, s2 = _conv_np(np.maximum(o1, 0).reshape(C1, N, H, W), w2, b2)
    pooled = np.maximum(o2, 0).reshape(C2, N, H * W).mean(axis=2).T  # (N, C2)
    logits = pooled @ w3.T + b3
    e = np.exp(logits - logits.max(axis=1, keepdims=True))
    g = e / e.sum(axis=1, keepdims=True)
    g[np.arange(N), ys] -= 1
    g /= N
    gw3, gb3 = g.T @ pooled, g.sum(0)
    gp = (g @ w3).T * np.float32(1.0 / (H * W))  # (C2, N)
    go2 = ((o2.reshape(C2, N, H * W) > 0) * gp[:, :, None]).reshape(C2, N * H * W)
    gw2, gb2 = (cols2 @ go2.T).T.reshape(w2.shape), go2.sum(1)
    ga1 = _col2im(w2.reshape(C2, -1).T @ go2, s2, K)[:, :, 1:-1, 1:-1]  # (C1, N, H, W)
    go1 = ga1.reshape(C1, N * H * W) * (o1 > 0)
    gw1, gb1 = (cols1 @ go1.T).T.reshape(w1.shape), go1.sum(1)
    return gw1, gb1, gw2, gb2, gw3, gb3


def w5_numpy():
    xs, ys, params = _cnn_data()
    params = [p.copy() for p in params]

    def run():
        for prm, gr in zip(params, w5_numpy_grads(xs, ys, *params)):
            prm -= LR * gr

    return run


def check_w5_numpy():
    """The hand-written NumPy gradients match lucid's (so the reference does the same work)."""
    xs, ys, params = _cnn_data()
    net = _cnn_modules(nn, params)
    nn.CrossEntropyLoss()(net(lucid.tensor(xs)), lucid.tensor(ys)).backward()
    for p, g in zip(net.parameters(), w5_numpy_grads(xs, ys, *params)):
        assert g.dtype == np.float32 and p.grad.dtype == lucid.float32
        np.testing.assert_allclose(p.grad.numpy(), g, rtol=1e-3, atol=1e-5)


# ----------------------------------------------------------------------------- W2-nn (MLP)

def _mlp_nn(mod, batch):
    xs, ys, ws, bs = _mlp_data(batch)
    net = mod.Sequential(mod.Linear(784, 512), mod.ReLU(), mod.Linear(512, 512), mod.ReLU(),
                         mod.Linear(512, 10))
    arrays = [a for w, b in zip(ws, bs) for a in (np.ascontiguousarray(w.T), b)]
    conv = (lambda a: lucid.tensor(a)) if mod is nn else torch.from_numpy
    for p, a in zip(net.parameters(), arrays):
        p.data.copy_(conv(a))
    return net, xs, ys


def w2nn_lucid(batch=128, lr=0.01):
    net, xs, ys = _mlp_nn(nn, batch)
    opt = lucid.optim.SGD(net.parameters(), lr=lr)
    crit = nn.CrossEntropyLoss()
    x, y = lucid.tensor(xs), lucid.tensor(ys)

    def run():
        opt.zero_grad()
        loss = crit(net(x), y)
        loss.backward()
        opt.step()
        return loss

    return run


def w2nn_torch(batch=128, lr=0.01):
    net, xs, ys = _mlp_nn(torch.nn, batch)
    opt = torch.optim.SGD(net.parameters(), lr=lr)
    crit = torch.nn.CrossEntropyLoss()
    x, y = torch.from_numpy(xs), torch.from_numpy(ys)

    def run():
        opt.zero_grad()
        loss = crit(net(x), y)
        loss.backward()
        opt.step()
        return loss

    return run


# ----------------------------------------------------------------------------- main

def _losses_agree():
    """Sanity: lucid and torch give the same first loss on both workloads."""
    if torch is None:
        return
    for mk_l, mk_t in ((w5_lucid, w5_torch), (w2nn_lucid, w2nn_torch)):
        fl, ft = mk_l(), mk_t()
        a, b = [float(fl().item()) for _ in range(3)], [float(ft().item()) for _ in range(3)]
        if not np.allclose(a, b, rtol=1e-3, atol=1e-4):
            print(f"warning: lucid and torch losses differ: {a} vs {b}")


def _profile(fn, n=20):
    import cProfile
    import pstats

    fn()
    pr = cProfile.Profile()
    pr.enable()
    for _ in range(n):
        fn()
    pr.disable()
    pstats.Stats(pr).sort_stats("tottime").print_stats(25)


def _layers(rounds=10):
    """Per-layer forward and per-rule backward times of the W5 step (min over ``rounds``).

    Wraps every primitive's vjp rules with a timer (in this process only), so the conv
    family's hot spots show up by name: ``conv[0]`` is the input gradient, ``conv[1]`` the
    weight gradient."""
    import collections

    from lucid._core.primitive import REGISTRY

    times = collections.defaultdict(list)

    def timed(rule, key):
        def run(*a, **k):
            t0 = time.perf_counter()
            r = rule(*a, **k)
            times[key].append(time.perf_counter() - t0)
            return r

        return run

    for name, prim in REGISTRY.items():
        if isinstance(prim.vjp, tuple):
            prim.vjp = tuple(r and timed(r, f"bwd {name}[{i}]") for i, r in enumerate(prim.vjp))
    xs, ys, params = _cnn_data()
    net = _cnn_modules(nn, params)
    opt, crit = lucid.optim.SGD(net.parameters(), lr=LR), nn.CrossEntropyLoss()
    x, y = lucid.tensor(xs), lucid.tensor(ys)
    def cross_entropy(h):
        return crit(h, y)

    for _ in range(rounds):
        h = x
        for i, m in enumerate(list(net) + [cross_entropy]):
            t0 = time.perf_counter()
            h = m(h)
            times[f"fwd {i} {getattr(m, '__name__', type(m).__name__)}"].append(time.perf_counter() - t0)
        for key, fn in (("backward (all)", h.backward), ("SGD step", opt.step), ("zero_grad", opt.zero_grad)):
            t0 = time.perf_counter()
            fn()
            times[key].append(time.perf_counter() - t0)
    for key, v in times.items():
        per = np.array(v).reshape(rounds, -1).min(0) * 1e3
        print(f"{key:26s} {per.sum():8.2f} ms" + (f"  ({' + '.join(f'{t:.2f}' for t in per)})" if len(per) > 1 else ""))


def main(argv=sys.argv[1:]):
    global CLOCK
    if "--cpu" in argv:
        CLOCK = time.process_time
    if "--layers" in argv:
        return _layers()
    if "--profile" in argv:
        for mk in (w2nn_lucid, w5_lucid):
            print(f"== {mk.__name__}")
            _profile(mk())
        return
    check_w5_numpy()
    _losses_agree()
    rows = []
    for name, ml, mn, mt, rounds in (("W5 CNN step (ms)", w5_lucid, w5_numpy, w5_torch, 4),
                                     ("W2-nn MLP step (ms)", w2nn_lucid, w2_numpy, w2nn_torch, 8)):
        # interleave the three sides so a burst of load hits them alike
        fl, fn_, ft = ml(), mn(), (mt() if torch else None)
        tl = tn = tt = float("inf")
        for _ in range(rounds):
            tl = min(tl, best_of(fl))
            tn = min(tn, best_of(fn_))
            tt = min(tt, best_of(ft)) if ft else None
        rows.append((name, tl * 1e3, tn * 1e3, tt * 1e3 if tt else None))
    print(f"clock: {CLOCK.__name__}; load average: {os.getloadavg()[0]:.2f}")
    print(f"{'workload':24s} {'lucid':>10s} {'numpy':>10s} {'torch':>10s} {'vs numpy':>9s} {'vs torch':>9s}")
    for name, l, n, t in rows:
        fmt = lambda v: f"{v:10.3f}" if v is not None else f"{'-':>10s}"  # noqa: E731
        ratio = lambda a, b: f"{a / b:9.2f}" if b else f"{'-':>9s}"  # noqa: E731
        print(f"{name:24s} {fmt(l)} {fmt(n)} {fmt(t)} {ratio(l, n)} {ratio(l, t)}")


if __name__ == "__main__":
    main()
