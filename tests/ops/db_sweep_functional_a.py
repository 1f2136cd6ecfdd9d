"""Op database entries from the sweep of ``torch.nn.functional`` options against PyTorch 2.13
(losses, activations, normalisation, distances; tests/regressions/test_functional_options_sweep_a.py
holds the error and dtype checks).

- ``mse_loss``/``l1_loss`` with ``weight``: 'mean' divides by ``weight.sum()``; ``huber_loss``
  with ``weight`` by the element count;
- ``normalize`` and ``pairwise_distance`` with p = -inf, 0 and negative p;
- ``hinge_embedding_loss`` with a target outside {1, -1} (both terms apply);
- ``triplet_margin_loss`` on inputs of more than two dims (the distance over the last one);
- ``multi_margin_loss`` on a 1-D input with a (1,) target (the loss keeps the target's shape).
"""
import numpy as np

import lucid.nn.functional as F
from opinfo import OpInfo, Sample, floats, positive


def _reduce(loss, reduction):
    return {"none": loss, "sum": np.sum(loss), "mean": np.mean(loss)}[reduction]


def _weighted_samples(rng):
    return [Sample((floats(rng, 2, 3), floats(rng, 2, 3), positive(rng, 2, 3)), {"reduction": r}, name=r)
            for r in ("mean", "sum", "none")]


def _np_weighted(loss, w, reduction, by_weight):
    if reduction == "mean" and by_weight:
        return np.sum(loss * w) / np.sum(w)
    return _reduce(loss * w, reduction)


def _np_huber(d, delta=1.0):
    a = np.abs(d)
    return np.where(a <= delta, 0.5 * d * d, delta * (a - 0.5 * delta))


def _np_pnorm(x, p, axis, keepdims):
    a = np.abs(x)
    if p == 0:
        return np.sum(a != 0, axis=axis, keepdims=keepdims).astype(x.dtype)
    if p == -np.inf:
        return np.min(a, axis=axis, keepdims=keepdims)
    return np.sum(a ** p, axis=axis, keepdims=keepdims) ** (1.0 / p)


def _np_normalize(x, p=2.0, dim=1, eps=1e-12):
    return x / np.maximum(_np_pnorm(x, p, dim, True), eps)


def _normalize_samples(rng):
    # entries kept away from 0 so |x|^p (p < 0) and the -inf norm's argmin are smooth
    x = lambda *s: np.sign(floats(rng, *s)) * positive(rng, *s)  # noqa: E731
    return [Sample((x(2, 3),), {"p": float("-inf")}, name="-inf"),
            Sample((x(2, 3),), {"p": -1.0, "dim": 0}, name="p=-1"),
            Sample((x(3, 4),), {"p": -2.5, "dim": -1}, name="p=-2.5"),
            Sample((x(2, 3),), {"p": float("-inf"), "eps": 0.6}, name="-inf eps")]


def _np_pairwise(a, b, p=2.0, eps=1e-6, keepdim=False):
    return _np_pnorm(a - b + eps, p, -1, keepdim)


def _np_hinge(x, t, margin=1.0):
    return np.mean(np.where(t != -1, x, 0.0) + np.where(t != 1, np.maximum(margin - x, 0.0), 0.0))


def _np_triplet(a, p, n, margin=1.0):
    d = lambda u, v: np.sqrt(np.sum((u - v + 1e-6) ** 2, -1))  # noqa: E731
    return np.mean(np.maximum(margin + d(a, p) - d(a, n), 0.0))


def _np_multi_margin(x, t, reduction="none"):
    h = np.maximum(1.0 - x[t[0]] + x, 0.0)
    h[t[0]] = 0.0
    return np.array([h.sum() / x.shape[0]])


OPS = [
    OpInfo("sweep_fa.mse_loss_weight", lambda a, b, w, reduction: F.mse_loss(a, b, reduction=reduction, weight=w),
           lambda a, b, w, reduction: _np_weighted((a - b) ** 2, w, reduction, True), _weighted_samples),
    OpInfo("sweep_fa.l1_loss_weight", lambda a, b, w, reduction: F.l1_loss(a, b, reduction=reduction, weight=w),
           lambda a, b, w, reduction: _np_weighted(np.abs(a - b), w, reduction, True), _weighted_samples),
    OpInfo("sweep_fa.huber_loss_weight", lambda a, b, w, reduction: F.huber_loss(a, b, reduction, 0.5, w),
           lambda a, b, w, reduction: _np_weighted(_np_huber(a - b, 0.5), w, reduction, False), _weighted_samples),
    OpInfo("sweep_fa.normalize_neg_p", F.normalize, _np_normalize, _normalize_samples),
    OpInfo("sweep_fa.pairwise_distance_neg_inf", F.pairwise_distance, _np_pairwise,
           lambda rng: [Sample((floats(rng, 3, 4), floats(rng, 3, 4)), {"p": float("-inf")}),
                        Sample((floats(rng, 2, 4), floats(rng, 4)), {"p": float("-inf"), "keepdim": True},
                               name="broadcast keepdim")]),
    OpInfo("sweep_fa.hinge_embedding_odd_target", F.hinge_embedding_loss, _np_hinge,
           lambda rng: [Sample((floats(rng, 2, 3), np.array([[1, -1, 0], [3, 1, 2]])))],
           vmap=False),
    OpInfo("sweep_fa.triplet_margin_3d", F.triplet_margin_loss, _np_triplet,
           lambda rng: [Sample((floats(rng, 2, 2, 3), floats(rng, 2, 2, 3), floats(rng, 2, 2, 3)),
                               {"margin": 2.0})]),
    OpInfo("sweep_fa.multi_margin_1d_target", lambda x, t: F.multi_margin_loss(x, t, reduction="none"),
           _np_multi_margin, lambda rng: [Sample((floats(rng, 4), np.array([2])))], vmap=False),
]
