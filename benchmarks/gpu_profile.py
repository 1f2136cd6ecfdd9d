"""Where a Lucid training step on CUDA spends its time (issue 13), run by hand on a GPU machine.

1. Per-op overhead: one small elementwise op (``a + b`` on 16 floats) through Lucid on CUDA,
   raw CuPy, PyTorch CUDA and Lucid on the CPU, and W1's 200-op chain (forward + backward) on
   CUDA against PyTorch. Small ops measure the host-side cost of a launch, not the GPU.
2. A cProfile of ``steps`` W2 steps (MLP 784-512-512-10, batch 4096) and W5 steps (small CNN,
   batch 512) on CUDA, top functions by own time, so the host-side overhead can be cut on a
   machine without a GPU.

    python benchmarks/gpu_profile.py [--steps 20]
"""
from __future__ import annotations

import argparse
import cProfile
import io
import os
import pstats
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import lucid  # noqa: E402
from bench_gpu import _cnn, _data, _lucid_step, _mlp, torch  # noqa: E402
from lucid import nn  # noqa: E402


def _per_call_us(fn, sync, number=2000):
    for _ in range(50):
        fn()
    sync()
    t0 = time.perf_counter()
    for _ in range(number):
        fn()
    sync()
    return (time.perf_counter() - t0) / number * 1e6


def overhead_table():
    import cupy

    host = np.linspace(0.1, 0.9, 16, dtype=np.float32)
    la, lb = lucid.tensor(host, device="cuda"), lucid.tensor(host, device="cuda")
    ca, cb = cupy.asarray(host), cupy.asarray(host)
    pa, pb = lucid.tensor(host), lucid.tensor(host)
    rows = [("lucid cuda a+b", lambda: la + lb, lucid.cuda.synchronize),
            ("cupy a+b", lambda: ca + cb, lucid.cuda.synchronize),
            ("lucid cpu a+b", lambda: pa + pb, lambda: None)]
    if torch is not None and torch.cuda.is_available():
        ta, tb = torch.from_numpy(host).cuda(), torch.from_numpy(host).cuda()
        rows.append(("torch cuda a+b", lambda: ta + tb, torch.cuda.synchronize))
    rows.append(("numpy-dispatched add", lambda: np.add(ca, cb), lucid.cuda.synchronize))
    rows.append(("cupy.add", lambda: cupy.add(ca, cb), lucid.cuda.synchronize))
    ga, gb = cupy.ones((128, 784), np.float32), cupy.ones((512, 784), np.float32)
    rows.append(("cupy.matmul x @ W.T", lambda: cupy.matmul(ga, gb.T), lucid.cuda.synchronize))
    rows.append(("x.dot(W.T)", lambda: ga.dot(gb.T), lucid.cuda.synchronize))
    rows.append(("sum over batch", lambda: ga.sum(axis=0), lucid.cuda.synchronize))
    for name, fn, sync in rows:
        print(f"{name:<24}{_per_call_us(fn, sync):>10.2f} us/op")

    def chain(x, w, sync):
        def run():
            y = x
            for _ in range(40):
                y = (y * w + w).tanh().exp().sin()
            y.sum().backward()
            x.grad = None
        return _per_call_us(run, sync, number=20) / 200

    lx = lucid.tensor(host, device="cuda", requires_grad=True)
    print(f"{'lucid cuda W1 chain':<24}{chain(lx, la, lucid.cuda.synchronize):>10.2f} us/op")
    if torch is not None and torch.cuda.is_available():
        tx = torch.from_numpy(host).cuda().requires_grad_()
        print(f"{'torch cuda W1 chain':<24}{chain(tx, ta, torch.cuda.synchronize):>10.2f} us/op")


def profile(name, make, shape, steps):
    xs, ys = _data(shape)
    step = _lucid_step(make(nn), xs, ys)
    for _ in range(3):
        step()
    lucid.cuda.synchronize()
    prof = cProfile.Profile()
    t0 = time.perf_counter()
    prof.enable()
    for _ in range(steps):
        step()
    lucid.cuda.synchronize()
    prof.disable()
    ms = (time.perf_counter() - t0) / steps * 1e3
    buf = io.StringIO()
    pstats.Stats(prof, stream=buf).sort_stats("tottime").print_stats(40)
    print(f"\n==== {name}: {ms:.3f} ms/step under cProfile, {steps} steps ====")
    print(buf.getvalue())


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=20)
    args = ap.parse_args()
    if not lucid.cuda.is_available():
        print("gpu_profile: no CUDA device; nothing to profile")
        return 0
    overhead_table()
    profile("W2 MLP batch 4096", _mlp, (4096, 784), args.steps)
    profile("W5 CNN batch 512", _cnn, (512, 1, 28, 28), args.steps)
    return 0


if __name__ == "__main__":
    sys.exit(main())
