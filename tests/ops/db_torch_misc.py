"""Op database entries for lucid/ops/torch_misc.py: fill, vander, the low-rank SVD, cond."""
import numpy as np

import lucid
from opinfo import OpInfo, Sample, floats


def _s(*args, name=""):
    return Sample(tuple(args), {}, name)


def _rank2(rng, m, n):
    return rng.normal(size=(m, 2)) @ rng.normal(size=(2, n))


def _seeded_singular_values(a):
    lucid.manual_seed(0)  # the same random range finder at every evaluation
    return lucid.svd_lowrank(a, q=2, niter=2)[1]


def _branchy(x):
    # each example of a vmap takes its own branch (the where path); eagerly one branch runs
    return lucid.cond(x.sum() > 0, lambda a: a * a, lambda a: a.sin() * 3, (x,))


OPS = [
    # a 0-d tensor value broadcasts (no read-back) and gets the sum of the gradient, as in PyTorch
    OpInfo("torch.fill_tensor_value", lambda x, v: lucid.fill(x, v), lambda x, v: np.full_like(x, v),
           lambda rng: [_s(floats(rng, 3), floats(rng)), _s(floats(rng, 2, 2), floats(rng), name="2-d")]),
    OpInfo("torch.vander", lambda x: lucid.vander(x, N=4), lambda x: np.vander(x, 4),
           lambda rng: [_s(floats(rng, 3)), _s(floats(rng, 2), name="N > len")]),
    OpInfo("torch.vander_increasing", lambda x: lucid.vander(x, N=3, increasing=True),
           lambda x: np.vander(x, 3, increasing=True), lambda rng: [_s(floats(rng, 4))]),
    # a rank-2 matrix: the randomized SVD is exact, so S equals LAPACK's leading singular values
    OpInfo("torch.svd_lowrank_S", _seeded_singular_values, lambda a: np.linalg.svd(a)[1][:2],
           lambda rng: [_s(_rank2(rng, 4, 3)), _s(_rank2(rng, 3, 5), name="wide")], vmap=False,
           atol=1e-10, rtol=1e-8),
    OpInfo("torch.cond", _branchy, lambda x: x * x if x.sum() > 0 else np.sin(x) * 3,
           lambda rng: [_s(np.abs(floats(rng, 3)) + 0.1, name="true branch"),
                        _s(-np.abs(floats(rng, 2, 2)) - 0.1, name="false branch")]),
]
