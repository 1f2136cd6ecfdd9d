"""``F.linear`` on 3-D inputs, run by hand: ``python benchmarks/bench_linear3d.py``.

For each (batch, seq, in) -> out shape it prints the best time of NumPy's stacked
``x @ W.T`` (B small GEMMs, what ``_linear_impl`` used to run), of the folded
``x.reshape(-1, in) @ W.T`` (one GEMM, what it runs now: see NOTE [Fused linear]), and of one
lucid ``F.linear`` forward + backward. BLAS threads are pinned to 1 (like the test runner) so a
loaded machine times the GEMMs rather than thread contention; pass ``--threads N`` to change it.
"""
from __future__ import annotations

import os
import sys
import time

if "--threads" in sys.argv:
    _n = sys.argv[sys.argv.index("--threads") + 1]
else:
    _n = "1"
for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_var] = _n

import numpy as np  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import lucid  # noqa: E402
import lucid.nn.functional as F  # noqa: E402

SHAPES = [((64, 32, 64), 64), ((256, 8, 32), 32), ((16, 128, 256), 256), ((32, 16, 512), 128)]


def best(fn, repeat=7, number=10):
    fn()
    out = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        for _ in range(number):
            fn()
        out = min(out, (time.perf_counter() - t0) / number)
    return out


def main():
    rng = np.random.default_rng(0)
    print(f"F.linear on 3-D float32 inputs (BLAS threads {_n}); times in microseconds")
    print(f"{'shape -> out':<22}{'stacked':>10}{'folded':>10}{'ratio':>8}{'lucid f+b':>12}")
    for shape, n_out in SHAPES:
        x = rng.normal(size=shape).astype(np.float32)
        w = rng.normal(size=(n_out, shape[-1])).astype(np.float32)
        stacked = best(lambda: np.matmul(x, w.T))
        folded = best(lambda: np.matmul(x.reshape(-1, shape[-1]), w.T).reshape(shape[:-1] + (n_out,)))
        xt, wt = lucid.tensor(x, requires_grad=True), lucid.tensor(w, requires_grad=True)
        bt = lucid.zeros(n_out, requires_grad=True)
        step = best(lambda: F.linear(xt, wt, bt).sum().backward(), repeat=5, number=3)
        print(f"{str(shape) + ' -> ' + str(n_out):<22}{stacked * 1e6:>10.0f}{folded * 1e6:>10.0f}"
              f"{stacked / folded:>7.2f}x{step * 1e6:>12.0f}")


if __name__ == "__main__":
    main()
