"""Op database entries for behaviour fixed by the OpInfo sweep of tensor ops
(tests/regressions/test_opinfo_sweep_ops.py): quantile's gradient to a tensor ``q``;
gather/scatter_add/scatter_reduce of a 0-d input (read as 1-d); ``diff`` with ``n=0``
ignoring ``prepend``; hsplit at a negative index.
"""
import numpy as np

import lucid
from opinfo import OpInfo, Sample, floats


def _idx(x, values):
    return lucid.tensor(values, dtype=lucid.int64, device=x.device)


def _distinct(rng, *shape):
    # well separated values: the sort inside quantile has no near-ties for finite differences
    return (rng.permutation(int(np.prod(shape))).reshape(shape) + floats(rng, *shape) * 0.2).astype(np.float64)


OPS = [
    OpInfo("quantile_tensor_q", lambda x, q: lucid.quantile(x, q, dim=-1),
           lambda x, q: np.quantile(x, q, axis=-1),
           # q * (n - 1) stays away from whole numbers, where the interpolation weight jumps
           lambda rng: [Sample((_distinct(rng, 2, 4), np.array([0.3, 0.55]))),
                        Sample((_distinct(rng, 5), np.array([0.1, 0.45, 0.9])))]),
    OpInfo("nanquantile_tensor_q", lambda x, q: lucid.nanquantile(x, q, dim=0, keepdim=True),
           lambda x, q: np.nanquantile(x, q, axis=0, keepdims=True),
           lambda rng: [Sample((_distinct(rng, 4, 2), np.array([0.2, 0.7])))]),
    OpInfo("gather_0d_input", lambda x: lucid.gather(x, 0, _idx(x, [0, 0, 0])),
           lambda x: np.full(3, x), lambda rng: [Sample((floats(rng),))]),
    OpInfo("scatter_add_0d_input", lambda x, s: lucid.scatter_add(x, 0, _idx(x, [0, 0]), s),
           lambda x, s: x + s[:2].sum(), lambda rng: [Sample((floats(rng), floats(rng, 3)))]),
    OpInfo("scatter_reduce_0d_input", lambda x, s: lucid.scatter_reduce(x, 0, _idx(x, [0, 0]), s, "prod"),
           lambda x, s: x * s[0] * s[1], lambda rng: [Sample((floats(rng), floats(rng, 2)))]),
    OpInfo("diff_n0_prepend", lambda x, p: lucid.diff(x, 0, -1, p), lambda x, p: x.copy(),
           lambda rng: [Sample((floats(rng, 2, 3), floats(rng, 2, 1)))]),
    OpInfo("hsplit_negative_index", lambda x: lucid.hsplit(x, [1, -1])[1], lambda x: x[:, 1:-1],
           lambda rng: [Sample((floats(rng, 2, 5),)), Sample((floats(rng, 3, 3),))]),
]
