"""Op database entries for the fused primitives of lucid.nn.functional (added for speed):
``linear`` (x @ W.T + b) and the class-index cross-entropy fast path."""
import numpy as np

import lucid.nn.functional as F
from opinfo import OpInfo, Sample, floats


def _linear_ref(x, w, b=None):
    out = x @ w.T
    return out if b is None else out + b


def _linear_samples(rng):
    return [
        Sample((floats(rng, 2, 3), floats(rng, 4, 3), floats(rng, 4))),
        Sample((floats(rng, 2, 2, 3), floats(rng, 4, 3), floats(rng, 4)), name="3-D input"),
        Sample((floats(rng, 3, 2), floats(rng, 2, 2)), name="no bias"),
        Sample((floats(rng, 0, 3), floats(rng, 2, 3), floats(rng, 2)), name="empty batch"),
        Sample((floats(rng, 3), floats(rng, 2, 3), floats(rng, 2)), name="1-D input (composite)"),
    ]


def _ce_ref(x, t, reduction="mean", ignore_index=-100):
    x2, t1 = np.atleast_2d(x), np.atleast_1d(t)
    m = x2.max(-1, keepdims=True)
    logp = x2 - m - np.log(np.exp(x2 - m).sum(-1, keepdims=True))
    valid = t1 != ignore_index
    rows = np.where(valid, -logp[np.arange(len(t1)), np.where(valid, t1, 0)], 0.0)
    if reduction == "none":
        return rows.reshape(np.shape(t))
    return rows.sum() if reduction == "sum" else rows.sum() / valid.sum()


def _ce_samples(rng):
    return [
        Sample((floats(rng, 4, 3), rng.integers(0, 3, size=4))),
        Sample((floats(rng, 4, 3), rng.integers(0, 3, size=4)), {"reduction": "sum"}),
        Sample((floats(rng, 3, 4), rng.integers(0, 4, size=3)), {"reduction": "none"}),
        Sample((floats(rng, 4, 3), np.array([0, 2, 1, 2])), {"ignore_index": 2}, name="ignore_index"),
        Sample((floats(rng, 4, 3), np.array([0, 2, 1, 2])), {"ignore_index": 2, "reduction": "none"},
               name="ignore_index none"),
        Sample((floats(rng, 3), np.array(1)), name="unbatched"),
    ]


OPS = [
    OpInfo("fused.linear", F.linear, _linear_ref, _linear_samples),
    OpInfo("fused.cross_entropy", F.cross_entropy, _ce_ref, _ce_samples),
]
