"""Op database entries for the losses touched by the common_nn sweep
(tests/regressions/test_common_nn_sweep.py): ``soft_margin_loss`` and
``multilabel_soft_margin_loss`` (a float target now promotes instead of being cast to the input's
dtype, as PyTorch; the float64 samples pin the values and every derivative, the target's too).
"""
import numpy as np

import lucid.nn.functional as F
from opinfo import OpInfo, Sample, floats


def _np_reduce(loss, reduction):
    return {"none": loss, "mean": loss.mean(), "sum": loss.sum()}[reduction]


def _np_logsigmoid(x):
    return -np.logaddexp(0.0, -x)


def _np_multilabel_soft_margin(x, t, w=None, reduction="mean"):
    loss = -(t * _np_logsigmoid(x) + (1.0 - t) * _np_logsigmoid(-x))
    if w is not None:
        loss = loss * w
    return _np_reduce(loss.sum(-1) / x.shape[-1], reduction)


def _soft_margin_samples(rng):
    t = np.sign(floats(rng, 2, 3)) + (np.sign(floats(rng, 2, 3)) == 0)
    return [Sample((floats(rng, 2, 3), t), {"reduction": r}) for r in ("none", "mean", "sum")] + [
        Sample((floats(rng, 4), np.array([1.0, -1.0, -1.0, 1.0])), {"reduction": "mean"}, name="1d")]


def _multilabel_samples(rng):
    out = [Sample((floats(rng, 3, 4), rng.uniform(0, 1, (3, 4))), {"reduction": r}) for r in ("none", "mean", "sum")]
    out.append(Sample((floats(rng, 3, 4), rng.uniform(0, 1, (3, 4)), rng.uniform(0.5, 2, 4)), {"reduction": "sum"},
                      name="weight"))
    return out


OPS = [
    OpInfo("common_nn.soft_margin_loss", lambda x, t, reduction: F.soft_margin_loss(x, t, reduction=reduction),
           lambda x, t, reduction: _np_reduce(np.log1p(np.exp(-t * x)), reduction), _soft_margin_samples),
    OpInfo("common_nn.multilabel_soft_margin_loss",
           lambda x, t, w=None, reduction="mean": F.multilabel_soft_margin_loss(x, t, weight=w, reduction=reduction),
           _np_multilabel_soft_margin, _multilabel_samples),
]
