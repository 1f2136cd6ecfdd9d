"""Op database entries for the Lucid 3 names (NOTE [Lucid 3 names]): the top-level activations,
``expand_dims``, the free ``repeat``, ``lucid.einops.reduce`` / ``repeat``, ``apply_rotary_emb``,
the fused linear layers and a metric. All are composites, so the generic checks exercise the rules
of the primitives they are made of. ``histogram2d`` is not here: it reads its data's span on the host
(as ``histogramdd``), so the meta-device sweep would refuse it; tests/regressions/test_lucid3_parity.py
checks it against ``np.histogram2d``."""
import math

import numpy as np

import lucid
import lucid.nn.functional as F
from opinfo import OpInfo, Sample, away_from_ties, floats

_SQ2PI = math.sqrt(2 / math.pi)


def _sig(x):
    return 1 / (1 + np.exp(-x))


def _gelu_ref(x, approximate="none"):
    if approximate == "tanh":
        return 0.5 * x * (1 + np.tanh(_SQ2PI * (x + 0.044715 * x ** 3)))
    return 0.5 * x * (1 + np.vectorize(math.erf, otypes=[np.float64])(x / math.sqrt(2)))


def _one(make=floats):
    """One 2-D sample: the activations are aliases of nn.functional ones, which have full entries."""
    return lambda rng: [Sample((np.asarray(make(rng, 2, 3), dtype=np.float64),))]


def _gelu_samples(rng):
    return [Sample((floats(rng, 2, 3),)), Sample((floats(rng, 2, 3),), {"approximate": "tanh"}, name="tanh")]


def _expand_dims_samples(rng):
    return [Sample((floats(rng, 2, 3), 0)), Sample((floats(rng, 2, 3), (0, -1)), name="two axes"),
            Sample((floats(rng), 0), name="0-d")]


def _repeat_ref(x, repeats, dim=None):
    return np.repeat(x, repeats, axis=0 if dim is None else dim)


def _repeat_samples(rng):
    return [Sample((floats(rng, 2, 3), 2)), Sample((floats(rng, 2, 3), 3), {"dim": 1}, name="dim 1")]


def _einops_reduce(x, pattern, reduction, **lengths):
    return lucid.einops.reduce(x, pattern, reduction, **lengths)


def _einops_reduce_ref(x, pattern, reduction, **lengths):
    f = {"sum": np.sum, "mean": np.mean, "max": np.max, "min": np.min, "prod": np.prod}[reduction]
    if pattern == "a b c -> a c":
        return f(x, axis=1)
    if pattern == "a b c -> c a":
        return f(x, axis=1).T
    return f(x.reshape(x.shape[0], 2, -1), axis=2)  # "a (h w) -> a h", h=2


def _einops_reduce_samples(rng):
    return [Sample((floats(rng, 2, 3, 4), "a b c -> a c", "sum")),
            Sample((floats(rng, 2, 3, 4), "a b c -> c a", "mean"), name="mean, transposed"),
            Sample((away_from_ties(rng, 3, 4), "a (h w) -> a h", "max"), {"h": 2}, name="max over a split axis"),
            ]


def _einops_repeat(x, pattern, **lengths):
    return lucid.einops.repeat(x, pattern, **lengths)


def _einops_repeat_ref(x, pattern, **lengths):
    if pattern == "a b -> a (b r)":
        return np.repeat(x, lengths["r"], axis=1)
    return np.broadcast_to(x[None], (lengths["c"],) + x.shape).copy()  # "a b -> c a b"


def _einops_repeat_samples(rng):
    return [Sample((floats(rng, 2, 3), "a b -> a (b r)"), {"r": 2}),
            Sample((floats(rng, 2, 3), "a b -> c a b"), {"c": 3}, name="new leading axis")]


def _rope_ref(q, k, cos, sin):
    s = q.shape[-2]

    def rot(x):
        h = x.shape[-1] // 2
        return x * cos[:s] + np.concatenate([-x[..., h:], x[..., :h]], -1) * sin[:s]

    return rot(q), rot(k)


def _rope_samples(rng):
    return [Sample((floats(rng, 2, 2, 4), floats(rng, 2, 2, 4), floats(rng, 3, 4), floats(rng, 3, 4)))]


def _fused_samples(rng):
    return [Sample((floats(rng, 2, 2, 3), floats(rng, 2, 3), floats(rng, 2)))]


def _metric_samples(rng):
    return [Sample((away_from_ties(rng, 5, 3), rng.integers(0, 3, size=5)))]


OPS = [
    OpInfo("lucid3.silu", lucid.silu, lambda x: x * _sig(x), _one()),
    OpInfo("lucid3.gelu", lucid.gelu, _gelu_ref, _gelu_samples),
    OpInfo("lucid3.mish", lucid.mish, lambda x: x * np.tanh(np.log1p(np.exp(x))), _one()),
    OpInfo("lucid3.softplus", lucid.softplus, lambda x, beta=1.0, threshold=20.0: np.log1p(np.exp(x)),
           _one()),
    OpInfo("lucid3.relu6", lucid.relu6, lambda x: np.clip(x, 0, 6), _one(lambda rng, *s: rng.uniform(-2, 8, size=s))),
    OpInfo("lucid3.hard_sigmoid", lucid.hard_sigmoid, lambda x: np.clip(x + 3, 0, 6) / 6, _one()),
    OpInfo("lucid3.hard_swish", lucid.hard_swish, lambda x: x * np.clip(x + 3, 0, 6) / 6, _one()),
    OpInfo("lucid3.expand_dims", lucid.expand_dims, np.expand_dims, _expand_dims_samples),
    OpInfo("lucid3.repeat", lucid.repeat, _repeat_ref, _repeat_samples),
    OpInfo("lucid3.einops.reduce", _einops_reduce, _einops_reduce_ref, _einops_reduce_samples),
    OpInfo("lucid3.einops.repeat", _einops_repeat, _einops_repeat_ref, _einops_repeat_samples),
    OpInfo("lucid3.apply_rotary_emb", F.apply_rotary_emb, _rope_ref, _rope_samples, out_index=0),
    OpInfo("lucid3.fused_linear_relu", F.fused_linear_relu, lambda x, w, b: np.maximum(x @ w.T + b, 0),
           _fused_samples),
    OpInfo("lucid3.fused_linear_gelu", F.fused_linear_gelu, lambda x, w, b: _gelu_ref(x @ w.T + b, "tanh"),
           _fused_samples),
    OpInfo("lucid3.correct_count", F.correct_count,
           lambda x, t: np.asarray((x.argmax(-1) == t).sum()), _metric_samples, grad=False, gradgrad=False),
]
