"""Distributed benchmarks (issue 12), run by hand: ``python benchmarks/bench_distributed.py``.

A1  all_reduce latency and throughput, float32, 8 B .. 64 MB, 2 ranks: lucid.distributed vs
    raw mpi4py ``Allreduce`` on the same ndarray, and PyTorch's gloo when torch is installed
D1  DDP step (forward + backward + SGD) of the W2 MLP (784-512-512-10, batch 128 per rank) at
    1 and 2 ranks, and the share of the gradient all-reduce time hidden behind backward:
    1 - (DDP step - local step) / (blocking all-reduce of the same buckets)

Run without a launcher it starts itself under ``lucid-run`` (``-n 2``, then ``-n 1`` for D1)
and prints the tables; ``--quick`` uses fewer repetitions.
"""
from __future__ import annotations

import os
import subprocess
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

SIZES = [8, 1 << 10, 64 << 10, 1 << 20, 4 << 20, 16 << 20, 64 << 20]


def _launched():
    return "PMI_RANK" in os.environ or "OMPI_COMM_WORLD_RANK" in os.environ


def _best(fn, repeat, comm, number=3):
    """Best over ``repeat`` rounds of the slowest rank's mean time per call over ``number`` calls."""
    best = float("inf")
    for _ in range(repeat):
        comm.Barrier()
        t0 = time.perf_counter()
        for _ in range(number):
            fn()
        dt = comm.allreduce((time.perf_counter() - t0) / number, op=_MPI.MAX)
        best = min(best, dt)
    return best


def bench_allreduce(quick):
    import lucid
    import lucid.distributed as dist

    comm = _MPI.COMM_WORLD
    torch_dist = _gloo()
    rows = []
    for nbytes in SIZES:
        n = max(1, nbytes // 4)
        repeat = (5 if quick else 20) if nbytes >= (16 << 20) else (20 if quick else 100)
        raw = np.ones(n, np.float32)
        t = lucid.tensor(np.ones(n, np.float32))
        for _ in range(3):  # warm-up: MPI sets up its buffers on first use
            comm.Allreduce(_MPI.IN_PLACE, raw)
            dist.all_reduce(t)
        t_raw = t_lucid = float("inf")
        for _ in range(3 if quick else 6):  # interleaved rounds: the machine may be shared
            t_raw = min(t_raw, _best(lambda: comm.Allreduce(_MPI.IN_PLACE, raw), repeat, comm))
            t_lucid = min(t_lucid, _best(lambda: dist.all_reduce(t), repeat, comm))
        t_gloo = None
        if torch_dist is not None:
            import torch

            tt = torch.ones(n)
            torch_dist.all_reduce(tt)
            t_gloo = _best(lambda: torch_dist.all_reduce(tt), repeat, comm)
        rows.append((nbytes, t_raw, t_lucid, t_gloo))
    return rows


def _gloo():
    try:
        import torch
        import torch.distributed as td
    except ImportError:
        return None
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29517")
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    torch.set_num_threads(1)
    td.init_process_group("gloo", rank=_MPI.COMM_WORLD.rank, world_size=_MPI.COMM_WORLD.size)
    return td


def _w2(batch, seed):
    import lucid
    import lucid.nn as nn

    lucid.manual_seed(seed)
    model = nn.Sequential(nn.Linear(784, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 10))
    rng = np.random.default_rng(seed)
    x = lucid.tensor(rng.standard_normal((batch, 784)).astype(np.float32))
    y = lucid.tensor(rng.integers(0, 10, batch))
    return model, x, y


def bench_ddp(quick):
    import lucid
    import lucid.distributed as dist
    import lucid.nn.functional as Fn
    from lucid.nn.parallel import DistributedDataParallel as DDP

    comm = _MPI.COMM_WORLD
    repeat = 5 if quick else 10
    local, x, y = _w2(128, comm.rank)
    ddp = DDP(_w2(128, 0)[0])

    def step(model, opt):
        opt.zero_grad()
        Fn.cross_entropy(model(x), y).backward()
        opt.step()

    opt_l = lucid.optim.SGD(local.parameters(), lr=0.01)
    opt_d = lucid.optim.SGD(ddp.parameters(), lr=0.01)
    bufs = [lucid.tensor(b.buf.copy()) for b in ddp._buckets]

    def comm_only():
        for b in bufs:
            dist.all_reduce(b)

    for _ in range(3):
        step(local, opt_l)
        step(ddp, opt_d)
        comm_only()
    t_local = t_ddp = t_comm = float("inf")
    for _ in range(3 if quick else 8):  # interleaved rounds
        t_local = min(t_local, _best(lambda: step(local, opt_l), repeat, comm))
        t_ddp = min(t_ddp, _best(lambda: step(ddp, opt_d), repeat, comm))
        t_comm = min(t_comm, _best(comm_only, repeat, comm))
    return t_local, t_ddp, t_comm, len(ddp._buckets)


def _fmt_bytes(n):
    for unit, k in (("MB", 1 << 20), ("KB", 1 << 10)):
        if n >= k:
            return f"{n // k} {unit}"
    return f"{n} B"


def _fmt_t(s):
    return "-" if s is None else (f"{s * 1e6:8.1f} us" if s < 1e-3 else f"{s * 1e3:8.2f} ms")


def rank_main(quick, what):
    global _MPI
    import lucid.distributed as dist

    dist.init_process_group("mpi")
    from mpi4py import MPI

    _MPI = MPI
    me, size = MPI.COMM_WORLD.rank, MPI.COMM_WORLD.size
    if "allreduce" in what and size > 1:
        rows = bench_allreduce(quick)
        if me == 0:
            print(f"\nA1  all_reduce, float32, {size} ranks (best of the slowest rank per call)")
            print(f"{'size':>8} | {'mpi4py':>11} | {'lucid':>11} | lucid/mpi4py | {'lucid GB/s':>10} | {'gloo':>11}")
            for nbytes, t_raw, t_lucid, t_gloo in rows:
                print(f"{_fmt_bytes(nbytes):>8} | {_fmt_t(t_raw)} | {_fmt_t(t_lucid)} | {t_lucid / t_raw:12.3f} | "
                      f"{nbytes / t_lucid / 1e9:10.3f} | {_fmt_t(t_gloo)}")
    if "ddp" in what:
        t_local, t_ddp, t_comm, nb = bench_ddp(quick)
        if me == 0:
            hidden = 1 - (t_ddp - t_local) / t_comm if size > 1 else float("nan")
            print(f"\nD1  W2 MLP step, batch 128 per rank, {size} rank(s), {nb} bucket(s)")
            print(f"    local step {_fmt_t(t_local)} | DDP step {_fmt_t(t_ddp)} | all-reduce alone "
                  f"{_fmt_t(t_comm)} | hidden behind backward: "
                  f"{'-' if size == 1 else f'{100 * min(max(hidden, 0.0), 1.0):.0f}%'}")


def main():
    quick = "--quick" in sys.argv
    if _launched():
        what = [a for a in sys.argv[1:] if not a.startswith("--")] or ["allreduce", "ddp"]
        rank_main(quick, what)
        return
    from lucid.distributed.run import main as lucid_run

    flags = ["--quick"] if quick else []
    # One BLAS thread per rank at every world size, so 1 and 2 ranks compare like for like.
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    os.environ.setdefault("OPENBLAS_NUM_THREADS", os.environ["OMP_NUM_THREADS"])
    print(f"lucid-run benchmarks ({os.cpu_count()} cores, OMP_NUM_THREADS={os.environ['OMP_NUM_THREADS']} per rank)")
    for n, what in ((2, ["allreduce", "ddp"]), (1, ["ddp"])):
        rc = lucid_run(["-n", str(n), __file__, *what, *flags])
        if rc:
            sys.exit(rc)


_MPI = None

if __name__ == "__main__":
    main()
