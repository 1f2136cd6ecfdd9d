"""Functional-transform benchmarks (issue 3), run by hand: ``python benchmarks/bench_func.py``.

W3  per-sample gradients: ``vmap(grad(loss))`` of a 32-64-10 tanh MLP's softmax
    cross-entropy over 256 examples, gradients for every parameter (a dict of params,
    examples batched), vs hand-vectorized NumPy (einsum) and ``torch.func.vmap(grad)``
W4  full Hessian of ``sum(tanh(W @ x) ** 2)`` w.r.t. ``x`` (size 128, float64) via
    ``lucid.func.hessian`` vs the closed form in NumPy and ``torch.func.hessian``
    wrapper overhead: ``grad(f)`` and ``vmap(f)`` around a tiny function, relative to
    the plain eager call of the same function (forward + backward for ``grad``; a
    batch of 4 for ``vmap``); target <= 2x.

Each workload is timed in this one process: best of several rounds, the sides taking turns
round by round (the machine may be shared; rerun when the numbers look noisy). Prints a
table of ratios (lucid / reference; < 1 is faster). Flags: ``--threads N`` pins BLAS and
torch threads (default: every core; on a loaded machine multithreaded BLAS stalls, so also
compare ``--threads 1``), ``--cpu`` times with ``time.process_time``, ``--profile W3|W4``
prints a cProfile of the lucid side.
"""
from __future__ import annotations

import os
import sys
import time

# ``--threads N`` pins BLAS / torch threads (default: every core). On a loaded machine
# multithreaded BLAS stalls, so compare ``--threads 1`` runs too.
THREADS = int(sys.argv[sys.argv.index("--threads") + 1]) if "--threads" in sys.argv else (os.cpu_count() or 1)
for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, str(THREADS))

import numpy as np  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import lucid  # noqa: E402
import lucid.func as F  # noqa: E402

try:
    import torch
    import torch.func as TF

    torch.set_num_threads(THREADS)
except ImportError:  # optional reference
    torch = TF = None


# ``--cpu`` times with time.process_time (CPU seconds of this process: steadier on a shared
# machine, but it also counts every BLAS/torch worker thread, so use it with --threads 1).
CLOCK = time.process_time if "--cpu" in sys.argv else time.perf_counter


def best_of(fns, rounds=15, number=20):
    """Best mean seconds per call of each function in ``fns`` (a dict), over ``rounds`` rounds
    of ``number`` calls each. The functions take turns round by round, so a burst of load on a
    shared machine hits all of them alike."""
    for fn in fns.values():
        fn()  # warm-up
    best = dict.fromkeys(fns, float("inf"))
    for _ in range(rounds):
        for k, fn in fns.items():
            t0 = CLOCK()
            for _ in range(number):
                fn()
            best[k] = min(best[k], (CLOCK() - t0) / number)
    return best


# ----------------------------------------------------------------------------- W3

SIZES = (32, 64, 10)
BATCH = 256


def _w3_data(seed=0):
    rng = np.random.default_rng(seed)
    xs = rng.standard_normal((BATCH, SIZES[0])).astype(np.float32)
    ys = np.eye(SIZES[2], dtype=np.float32)[rng.integers(0, SIZES[2], BATCH)]  # one-hot targets
    params = {
        "w1": (rng.standard_normal(SIZES[:2]) / np.sqrt(SIZES[0])).astype(np.float32),
        "b1": np.zeros(SIZES[1], np.float32),
        "w2": (rng.standard_normal(SIZES[1:]) / np.sqrt(SIZES[1])).astype(np.float32),
        "b2": np.zeros(SIZES[2], np.float32),
    }
    return xs, ys, params


def w3_lucid():
    xs, ys, params = _w3_data()
    x, y = lucid.tensor(xs), lucid.tensor(ys)
    p = {k: lucid.tensor(v) for k, v in params.items()}

    def loss(p, x, y):  # one example: x (32,), y one-hot (10,)
        h = (x @ p["w1"] + p["b1"]).tanh()
        logits = h @ p["w2"] + p["b2"]
        return logits.logsumexp(0) - (logits * y).sum()

    per_sample = F.vmap(F.grad(loss), in_dims=(None, 0, 0))
    return lambda: per_sample(p, x, y)


def w3_numpy():
    xs, ys, p = _w3_data()

    def run():
        h = np.tanh(xs @ p["w1"] + p["b1"])
        z = h @ p["w2"] + p["b2"]
        e = np.exp(z - z.max(axis=1, keepdims=True))
        g2 = e / e.sum(axis=1, keepdims=True) - ys  # d loss / d logits, per example
        g1 = (g2 @ p["w2"].T) * (1 - h * h)
        return {"w1": np.einsum("bi,bj->bij", xs, g1), "b1": g1,
                "w2": np.einsum("bi,bj->bij", h, g2), "b2": g2}

    return run


def w3_torch():
    xs, ys, params = _w3_data()
    x, y = torch.from_numpy(xs), torch.from_numpy(ys)
    p = {k: torch.from_numpy(v) for k, v in params.items()}

    def loss(p, x, y):
        h = (x @ p["w1"] + p["b1"]).tanh()
        logits = h @ p["w2"] + p["b2"]
        return logits.logsumexp(0) - (logits * y).sum()

    per_sample = TF.vmap(TF.grad(loss), in_dims=(None, 0, 0))
    return lambda: per_sample(p, x, y)


def check_w3():
    got = w3_lucid()()
    want = w3_numpy()()
    for k in want:
        np.testing.assert_allclose(got[k].numpy(), want[k], rtol=1e-4, atol=1e-5)


# ----------------------------------------------------------------------------- W4

N4 = 128


def _w4_data(seed=1):
    rng = np.random.default_rng(seed)
    return rng.standard_normal((N4, N4)) / np.sqrt(N4), rng.standard_normal(N4)


def w4_lucid():
    w_, x_ = _w4_data()
    w, x = lucid.tensor(w_), lucid.tensor(x_)
    h = F.hessian(lambda x: ((w @ x).tanh() ** 2).sum())
    return lambda: h(x)


def w4_numpy():
    w, x = _w4_data()

    def run():  # H = W^T diag((2 - 6 t^2)(1 - t^2)) W with t = tanh(W x)
        t = np.tanh(w @ x)
        c = (2 - 6 * t * t) * (1 - t * t)
        return w.T @ (c[:, None] * w)

    return run


def w4_torch():
    w_, x_ = _w4_data()
    w, x = torch.from_numpy(w_), torch.from_numpy(x_)
    h = TF.hessian(lambda x: ((w @ x).tanh() ** 2).sum())
    return lambda: h(x)


def check_w4():
    np.testing.assert_allclose(w4_lucid()().numpy(), w4_numpy()(), rtol=1e-10, atol=1e-12)


# ------------------------------------------------------------------ wrappers


def _tiny(x):
    return (x * x).sin().sum()


def overhead_grad():
    x = lucid.tensor(np.linspace(0.1, 0.9, 8, dtype=np.float32))
    xr = lucid.tensor(x.numpy(), requires_grad=True)
    g = F.grad(_tiny)

    def eager():
        _tiny(xr).backward()
        xr.grad = None

    return eager, lambda: g(x)


def overhead_vmap():
    x = lucid.tensor(np.linspace(0.1, 0.9, 32, dtype=np.float32).reshape(4, 8))
    v = F.vmap(_tiny)
    return (lambda: _tiny(x)), (lambda: v(x))


# ---------------------------------------------------------------------- main


def _profile(which):
    import cProfile
    import pstats

    run = {"W3": w3_lucid, "W4": w4_lucid}[which]()
    run()
    pr = cProfile.Profile()
    pr.enable()
    for _ in range(50):
        run()
    pr.disable()
    pstats.Stats(pr).sort_stats("tottime").print_stats(30)


def main():
    if "--profile" in sys.argv:
        return _profile(sys.argv[sys.argv.index("--profile") + 1])
    print(f"threads={THREADS} clock={CLOCK.__name__}  load average: {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f}")
    check_w3()
    check_w4()
    rows = []
    for name, side in (("W3 per-sample grads (ms)", "w3"), ("W4 hessian n=128 (ms)", "w4")):
        fns = {"lucid": globals()[side + "_lucid"](), "numpy": globals()[side + "_numpy"]()}
        if torch:
            fns["torch"] = globals()[side + "_torch"]()
        t = best_of(fns)
        rows.append((name, t["lucid"] * 1e3, t["numpy"] * 1e3, t["torch"] * 1e3 if torch else None))
    print(f"{'workload':28s} {'lucid':>10s} {'numpy':>10s} {'torch':>10s} {'vs numpy':>9s} {'vs torch':>9s}")
    for name, l, n, t in rows:
        fmt = lambda v: f"{v:10.3f}" if v is not None else f"{'-':>10s}"  # noqa: E731
        ratio = lambda a, b: f"{a / b:9.2f}" if b else f"{'-':>9s}"  # noqa: E731
        print(f"{name:28s} {fmt(l)} {fmt(n)} {fmt(t)} {ratio(l, n)} {ratio(l, t)}")
    print()
    print(f"{'wrapper overhead':28s} {'wrapped':>10s} {'eager':>10s} {'ratio':>9s}  (target <= 2)")
    for name, make in (("grad(f) vs fwd+backward (us)", overhead_grad), ("vmap(f) vs f on batch (us)", overhead_vmap)):
        eager, wrapped = make()
        t = best_of({"eager": eager, "wrapped": wrapped}, rounds=25, number=100)
        print(f"{name:28s} {t['wrapped'] * 1e6:10.1f} {t['eager'] * 1e6:10.1f} {t['wrapped'] / t['eager']:9.2f}")


if __name__ == "__main__":
    main()
