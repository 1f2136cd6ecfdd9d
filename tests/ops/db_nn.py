"""Op database entries for lucid.nn.functional: its primitives (sigmoid, erf, softplus,
one_hot — unless the core families define them) and the main composites."""
import math

import numpy as np

import lucid
import lucid.nn.functional as F
from opinfo import OpInfo, Sample, floats, unary_samples

_erf = np.vectorize(math.erf, otypes=[np.float64])


def _logsm(x, axis):
    m = x.max(axis, keepdims=True)
    return x - m - np.log(np.exp(x - m).sum(axis, keepdims=True))


def _wide(rng, *s):
    return floats(rng, *s) * 4.0


def _ce_ref(x, t):
    return -np.take_along_axis(_logsm(x, 1), t[:, None], 1)[:, 0].mean()


def _ce_samples(rng):
    return [Sample((floats(rng, 4, 3), rng.integers(0, 3, size=4)))]


def _ln_ref(x, w, b):
    mu = x.mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(x.var(-1, keepdims=True) + 1e-5) * w + b


OPS = [
    OpInfo("nn.sigmoid", F.sigmoid, lambda x: 1 / (1 + np.exp(-x)), unary_samples(_wide)),
    OpInfo("nn.erf", F.erf, _erf, unary_samples()),
    OpInfo("nn.softplus", lambda x: F.softplus(x), lambda x: np.log1p(np.exp(x)), unary_samples(_wide)),
    OpInfo("nn.one_hot", lambda t: F.one_hot(t, 4), lambda t: np.eye(4, dtype=np.int64)[t],
           lambda rng: [Sample((rng.integers(0, 4, size=(3,)),)), Sample((rng.integers(0, 4, size=(2, 2)),))],
           grad=False),
    OpInfo("nn.gelu", F.gelu, lambda x: 0.5 * x * (1 + _erf(x / np.sqrt(2))), unary_samples(_wide)),
    OpInfo("nn.silu", F.silu, lambda x: x / (1 + np.exp(-x)), unary_samples(_wide)),
    OpInfo("nn.log_softmax", lambda x: F.log_softmax(x, dim=-1), lambda x: _logsm(x, -1),
           lambda rng: [Sample((floats(rng, 2, 3),)), Sample((floats(rng, 4),))]),
    OpInfo("nn.softmax", lambda x: F.softmax(x, dim=0), lambda x: np.exp(_logsm(x, 0)),
           lambda rng: [Sample((floats(rng, 3, 2),))]),
    OpInfo("nn.linear", F.linear, lambda x, w, b: x @ w.T + b,
           lambda rng: [Sample((floats(rng, 2, 3), floats(rng, 4, 3), floats(rng, 4)))]),
    OpInfo("nn.layer_norm", lambda x, w, b: F.layer_norm(x, (3,), w, b), _ln_ref,
           lambda rng: [Sample((floats(rng, 2, 3), floats(rng, 3), floats(rng, 3)))]),
    OpInfo("nn.mse_loss", F.mse_loss, lambda a, b: np.mean((a - b) ** 2),
           lambda rng: [Sample((floats(rng, 2, 3), floats(rng, 2, 3)))]),
    OpInfo("nn.cross_entropy", F.cross_entropy, _ce_ref, _ce_samples),
    OpInfo("nn.bce_with_logits", F.binary_cross_entropy_with_logits,
           lambda x, t: np.mean(np.log1p(np.exp(x)) - t * x),
           lambda rng: [Sample((_wide(rng, 2, 3), rng.uniform(size=(2, 3))))]),
    # the primitive behind F.binary_cross_entropy (PyTorch's gradient at the boundary)
    OpInfo("nn.binary_cross_entropy", lambda p, t: F.binary_cross_entropy(p, t, reduction="none"),
           lambda p, t: -(t * np.log(p) + (1 - t) * np.log1p(-p)),
           lambda rng: [Sample((rng.uniform(0.05, 0.95, size=(2, 3)), rng.uniform(size=(2, 3)))),
                        Sample((rng.uniform(0.05, 0.95, size=(4,)), rng.uniform(size=(4,))))]),
]
