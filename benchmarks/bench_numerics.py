"""Numerics benchmarks (issue 9), run by hand: ``python benchmarks/bench_numerics.py``.

N1  rfft + irfft round trip, forward + backward, on a (64, 4096) float32 batch (complex64 spectrum)
N2  256x256 complex64 matmul, forward + backward (both operands require grad)

Each workload is timed in this one process against hand-written NumPy (the same transforms
and the adjoints of NOTE [FFT adjoints] / NOTE [Holomorphic vjp] written out by hand) and,
when installed, PyTorch CPU (threads = cores). The sides take turns so that a burst of load
on a shared machine hits them alike. Prints a table of ratios (lucid / reference; < 1 is faster).
"""
from __future__ import annotations

import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import lucid  # noqa: E402
from bench_core import interleaved  # noqa: E402

try:
    import torch

    torch.set_num_threads(os.cpu_count() or 1)
except ImportError:  # optional reference
    torch = None

B, N = 64, 4096
M = 256
rng = np.random.default_rng(0)
X = rng.standard_normal((B, N)).astype(np.float32)
G = rng.standard_normal((B, N)).astype(np.float32)
CA, CB, CG = ((rng.standard_normal((M, M)) + 1j * rng.standard_normal((M, M))).astype(np.complex64)
              for _ in range(3))


# ----------------------------------------------------------------------------- N1


def n1_lucid():
    x = lucid.tensor(X, requires_grad=True)
    g = lucid.tensor(G)

    def run():
        lucid.fft.irfft(lucid.fft.rfft(x), n=N).backward(g)
        x.grad = None

    return run


def n1_numpy():
    w_half = np.full(N // 2 + 1, 0.5, np.float32)
    w_half[[0, -1]] = 1
    w_two = 1 / w_half

    def run():
        y = np.fft.irfft(np.fft.rfft(X), n=N)
        gy = np.fft.rfft(G, norm="forward") * w_two       # vjp of irfft: r2c, interior doubled
        return y, np.fft.irfft(gy * w_half, n=N, norm="forward")  # vjp of rfft: c2r, interior halved

    return run


def n1_torch():
    x = torch.tensor(X, requires_grad=True)
    g = torch.tensor(G)

    def run():
        torch.fft.irfft(torch.fft.rfft(x), n=N).backward(g)
        x.grad = None

    return run


# ----------------------------------------------------------------------------- N2


def n2_lucid():
    a = lucid.tensor(CA, requires_grad=True)
    b = lucid.tensor(CB, requires_grad=True)
    g = lucid.tensor(CG)

    def run():
        (a @ b).backward(g)
        a.grad = b.grad = None

    return run


def n2_numpy():
    def run():
        c = CA @ CB
        return c, CG @ CB.conj().T, CA.conj().T @ CG

    return run


def n2_torch():
    a = torch.tensor(CA, requires_grad=True)
    b = torch.tensor(CB, requires_grad=True)
    g = torch.tensor(CG)

    def run():
        (a @ b).backward(g)
        a.grad = b.grad = None

    return run


def main():
    rows = []
    t_l, t_n, t_t = interleaved((n1_lucid, n1_numpy, torch and n1_torch), rounds=5, repeat=5, number=5)
    rows.append(("N1 rfft+irfft fwd+bwd (ms)", t_l * 1e3, t_n * 1e3, t_t * 1e3 if t_t else None))
    t_l, t_n, t_t = interleaved((n2_lucid, n2_numpy, torch and n2_torch), rounds=5, repeat=5, number=5)
    rows.append(("N2 c64 matmul fwd+bwd (ms)", t_l * 1e3, t_n * 1e3, t_t * 1e3 if t_t else None))
    print(f"{'workload':28s} {'lucid':>10s} {'numpy':>10s} {'torch':>10s} {'vs numpy':>9s} {'vs torch':>9s}")
    for name, l, n, t in rows:
        fmt = lambda v: f"{v:10.3f}" if v is not None else f"{'-':>10s}"  # noqa: E731
        ratio = lambda a, b: f"{a / b:9.2f}" if b else f"{'-':>9s}"  # noqa: E731
        print(f"{name:28s} {fmt(l)} {fmt(n)} {fmt(t)} {ratio(l, n)} {ratio(l, t)}")


if __name__ == "__main__":
    main()
