"""Op database entries for behaviour fixed by the OpInfo/ModuleInfo sweep of nn.functional and nn
modules (tests/regressions/test_opinfo_sweep_nn.py): ``threshold`` tests ``x <= threshold`` as
PyTorch (a nan passes through), ``group_norm`` of an empty batch, ``multi_margin_loss`` and
``multilabel_margin_loss`` of a 0-d input (one class).
"""
import numpy as np

import lucid.nn.functional as F
from opinfo import OpInfo, Sample, floats


def _np_group_norm(x, g, eps=1e-5):
    n, c = x.shape[:2]
    y = x.reshape(n, g, c // g * int(np.prod(x.shape[2:])))
    if y.size:
        y = (y - y.mean(-1, keepdims=True)) / np.sqrt(y.var(-1, keepdims=True) + eps)
    return y.reshape(x.shape)


OPS = [
    OpInfo("opinfo_nn.threshold_le", lambda x: F.threshold(x, 0.25, -3.0),
           lambda x: np.where(x <= 0.25, -3.0, x),
           lambda rng: [Sample((np.array([-0.5, 0.1, 0.6, 0.9]),)), Sample((floats(rng, 2, 3) * 0.2 + 0.6,))]),
    OpInfo("opinfo_nn.group_norm_empty_batch", lambda x: F.group_norm(x, 2),
           lambda x: _np_group_norm(x, 2),
           lambda rng: [Sample((np.zeros((0, 4, 3)),)), Sample((floats(rng, 2, 4, 3),))], vmap=False),
    OpInfo("opinfo_nn.multi_margin_loss_0d", lambda x, t: F.multi_margin_loss(x, t, reduction="none"),
           lambda x, t: np.zeros((), dtype=x.dtype),
           lambda rng: [Sample((np.array(0.3), np.array(0)))], vmap=False),
    OpInfo("opinfo_nn.multilabel_margin_loss_0d", lambda x, t: F.multilabel_margin_loss(x, t, reduction="sum"),
           lambda x, t: np.zeros((), dtype=x.dtype),
           lambda rng: [Sample((np.array(-0.7), np.array(0)))], vmap=False),
]
