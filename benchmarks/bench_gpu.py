"""GPU benchmarks (issue 13): Lucid on CUDA (CuPy) against PyTorch on the same GPU.

W2   one SGD step of the MLP 784-512-512-10 (ReLU, cross-entropy), float32, batch 128 and 4096
W5   one SGD step of the small CNN of benchmarks/bench_nn.py (Conv 1->16, Conv 16->32, 3x3,
     padding 1, ReLU, global average pool, Linear 32->10), 28x28 inputs, batch 64 and 512
MM   one 4096x4096 float32 matmul: the ceiling both libraries share (cuBLAS)

Each row: median of ``rounds`` timed repeats of ``steps`` steps, synchronised (CUDA events
would give the same; kernels are queued asynchronously, so the device is synchronised before
the clock stops). Prints milliseconds per step and the ratio Lucid / PyTorch. Run by hand on a
GPU machine:  pip install -e '.[gpu]' torch  &&  python benchmarks/bench_gpu.py
Targets: W2 and W5 at batch >= 512 within 1.5x of PyTorch CUDA.
"""
from __future__ import annotations

import contextlib
import statistics
import sys
import time

import numpy as np

import lucid
from lucid import nn

try:
    import torch
except ImportError:  # the Lucid column still prints
    torch = None


def _sync_lucid():
    lucid.cuda.synchronize()


def _sync_torch():
    torch.cuda.synchronize()


def _time(step, sync, steps=20, rounds=5, warmup=3):
    for _ in range(warmup):
        step()
    sync()
    runs = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        for _ in range(steps):
            step()
        sync()
        runs.append((time.perf_counter() - t0) / steps * 1e3)
    return statistics.median(runs)


def _mlp(mod, sizes=(784, 512, 512, 10)):
    layers = []
    for i, (a, b) in enumerate(zip(sizes[:-1], sizes[1:])):
        layers.append(mod.Linear(a, b))
        if i < len(sizes) - 2:
            layers.append(mod.ReLU())
    return mod.Sequential(*layers)


def _cnn(mod):
    return mod.Sequential(mod.Conv2d(1, 16, 3, padding=1), mod.ReLU(), mod.Conv2d(16, 32, 3, padding=1),
                          mod.ReLU(), mod.AdaptiveAvgPool2d(1), mod.Flatten(), mod.Linear(32, 10))


def _data(shape, n_cls=10, seed=0):
    rng = np.random.default_rng(seed)
    return rng.standard_normal(shape).astype(np.float32), rng.integers(0, n_cls, shape[0])


def _lucid_step(net, xs, ys, device="cuda"):
    net.to(device)
    opt = lucid.optim.SGD(net.parameters(), lr=0.01)
    x, y = lucid.tensor(xs, device=device), lucid.tensor(ys, device=device)

    def step():
        opt.zero_grad()
        nn.functional.cross_entropy(net(x), y).backward()
        opt.step()

    return step


@contextlib.contextmanager
def _no_fused_kernels():
    from lucid._core import backend

    cuda = backend._BACKENDS["cuda"]
    saved = cuda.kernels, cuda.kernel_cache
    cuda.kernels, cuda.kernel_cache = None, {}
    try:
        yield
    finally:
        cuda.kernels, cuda.kernel_cache = saved


def _torch_step(net, xs, ys):
    net.to("cuda")
    opt = torch.optim.SGD(net.parameters(), lr=0.01)
    x, y = torch.from_numpy(xs).cuda(), torch.from_numpy(ys).cuda()

    def step():
        opt.zero_grad()
        torch.nn.functional.cross_entropy(net(x), y).backward()
        opt.step()

    return step


def main():
    if not lucid.cuda.is_available():
        print("bench_gpu: no CUDA device (lucid.cuda.is_available() is False); nothing to time")
        return 0
    have_torch = torch is not None and torch.cuda.is_available()
    print(f"GPU: {lucid.cuda.get_device_name()}   PyTorch: {torch.__version__ if have_torch else 'absent'}   "
          f"cuDNN: {lucid.backends.cudnn.version()} (Lucid), "
          f"{torch.backends.cudnn.version() if have_torch else 'absent'} (PyTorch)")
    # "no fused" times Lucid with its fused device kernels off (NOTE [Fused device kernels]):
    # every op's generic CuPy code, to measure what the kernels save; "no cuDNN" its
    # convolutions through im2col and cuBLAS (NOTE [cuDNN convolutions]).
    print(f"{'workload':<22}{'lucid ms':>10}{'torch ms':>10}{'lucid/torch':>13}{'no fused ms':>13}{'no cuDNN ms':>13}")
    rows = [("W2 MLP batch 128", lambda m: _mlp(m), (128, 784)), ("W2 MLP batch 4096", lambda m: _mlp(m), (4096, 784)),
            ("W5 CNN batch 64", lambda m: _cnn(m), (64, 1, 28, 28)), ("W5 CNN batch 512", lambda m: _cnn(m), (512, 1, 28, 28))]
    for name, make, shape in rows:
        xs, ys = _data(shape)
        lt = _time(_lucid_step(make(nn), xs, ys), _sync_lucid)
        tt = _time(_torch_step(make(torch.nn), xs, ys), _sync_torch) if have_torch else float("nan")
        with _no_fused_kernels():
            gt = _time(_lucid_step(make(nn), xs, ys), _sync_lucid)
        nt = float("nan")
        if name.startswith("W5"):
            with lucid.backends.cudnn.flags(enabled=False):
                nt = _time(_lucid_step(make(nn), xs, ys), _sync_lucid)
        print(f"{name:<22}{lt:>10.3f}{tt:>10.3f}{lt / tt:>13.2f}{gt:>13.3f}{nt:>13.3f}")
    a = np.random.default_rng(0).standard_normal((4096, 4096)).astype(np.float32)
    la = lucid.tensor(a, device="cuda")
    lt = _time(lambda: la @ la, _sync_lucid)
    if have_torch:
        ta = torch.from_numpy(a).cuda()
        tt = _time(lambda: ta @ ta, _sync_torch)
    else:
        tt = float("nan")
    print(f"{'MM 4096x4096 f32':<22}{lt:>10.3f}{tt:>10.3f}{lt / tt:>13.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
