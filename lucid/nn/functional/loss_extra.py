"""More losses (functional): Gaussian NLL, triplet margin (with a distance function), cosine
embedding, multi-class / multi-label margins, multi-label soft margin and CTC. All are
composites of primitives, following PyTorch's formulas (including where they clamp values
but let the gradient through, e.g. the variance of ``gaussian_nll_loss``).
"""
from __future__ import annotations

import math

import numpy as np

from ..._core.backend import host, runs_on_operands_device
from ..._core.primitive import autocast_composite
from ..._core.tensor import Tensor, _wrap
from ...ops._family import _as_tensor
from ._device import const_like
from ._per_example import call_per_example, is_tracer, looping_trace
from .activation import logsigmoid
from .distance import pairwise_distance
from .loss import _checked_reduction, _legacy_reduction, _lucid, _reduce, _refuse_complex

__all__ = ["gaussian_nll_loss", "triplet_margin_loss", "triplet_margin_with_distance_loss",
           "cosine_embedding_loss", "multi_margin_loss", "multilabel_margin_loss", "multilabel_soft_margin_loss",
           "ctc_loss"]


def _value_clamped(x, lo):
    """``x`` with its value clamped below at ``lo`` and the gradient of ``x`` itself (PyTorch
    clamps such values in place under ``no_grad``)."""
    return x + (_lucid().clamp(x, min=lo) - x).detach()


def gaussian_nll_loss(input, target, var, full=False, eps=1e-6, reduction="mean"):
    """``0.5 (log var + (input - target)^2 / var)`` (+ ``0.5 log 2 pi`` with ``full``).

    ``var`` has the input's shape, or one dim less, or a last dim of 1 (one variance per
    sample); its value is clamped at ``eps`` (the gradient is var's own, as PyTorch).

    Examples
    --------
    >>> import lucid, lucid.nn.functional as F
    >>> F.gaussian_nll_loss(lucid.tensor([1.0]), lucid.tensor([3.0]), lucid.tensor([2.0])).item() > 0
    True
    """
    input, target = _as_tensor(input), _as_tensor(target)
    if isinstance(var, (int, float)):  # PyTorch: a number is a variance of the input's shape and dtype
        if var < 0:
            raise ValueError("gaussian_nll_loss: var has negative entry/entries")
        var = _lucid().full_like(input, float(var))
    var = _as_tensor(var)
    if tuple(var.shape) != tuple(input.shape):
        if tuple(input.shape[:-1]) == tuple(var.shape):
            var = var.unsqueeze(-1)
        # PyTorch 2.13's rule: broadcastable with a single mismatched dim, of size 1 in var
        # (e.g. (4, 1, 32, 32) for (4, 3, 32, 32)); not only the last dim
        elif not (var.ndim == input.ndim
                  and sum(v for i, v in zip(input.shape, var.shape) if i != v) == 1):
            raise ValueError(f"gaussian_nll_loss: var is of incorrect size {tuple(var.shape)} for input "
                             f"{tuple(input.shape)}")
    if reduction not in ("none", "mean", "sum"):
        raise ValueError(f"gaussian_nll_loss: {reduction} is not a valid value for reduction")
    # Concrete CPU values only: on a device the check would read back every call.
    if var._level == 0 and var._data.__class__ is np.ndarray and bool((var._data < 0).any()):
        raise ValueError("gaussian_nll_loss: var has negative entry/entries")
    var = _value_clamped(var, eps)
    lucid = _lucid()
    loss = 0.5 * (lucid.log(var) + (input - target) ** 2 / var)
    if full:
        loss = loss + 0.5 * math.log(2 * math.pi)
    return _reduce(loss, reduction, "gaussian_nll_loss")


@autocast_composite("triplet_margin_loss")  # NOTE [Autocast]
def triplet_margin_loss(anchor, positive, negative, margin=1.0, p=2, eps=1e-6, swap=False, size_average=None,
                        reduce=None, reduction="mean"):
    """``max(d(a, p) - d(a, n) + margin, 0)`` with ``d`` the pairwise p-norm distance.

    Examples
    --------
    >>> import lucid, lucid.nn.functional as F
    >>> a, p, n = lucid.zeros(1, 2), lucid.zeros(1, 2), lucid.ones(1, 2)
    >>> F.triplet_margin_loss(a, p, n, margin=2.0, eps=0.0).item() > 0
    True
    """
    reduction = _legacy_reduction(size_average, reduce, reduction)
    if margin <= 0:
        raise ValueError(f"triplet_margin_loss: margin must be greater than 0, got {margin}")
    dist = lambda x, y: pairwise_distance(x, y, p, eps)  # noqa: E731
    return _triplet(anchor, positive, negative, dist, margin, swap, reduction, "triplet_margin_loss")


def _triplet(anchor, positive, negative, dist, margin, swap, reduction, name):
    # Any number of dims, the distance over the last one (PyTorch: only the counts must agree)
    if not anchor.ndim == positive.ndim == negative.ndim:
        raise RuntimeError(f"{name}: expected anchor, positive and negative of one dimensionality, "
                           f"got {tuple(anchor.shape)}, {tuple(positive.shape)}, {tuple(negative.shape)}")
    lucid = _lucid()
    d_ap, d_an = dist(anchor, positive), dist(anchor, negative)
    if swap:
        d_an = lucid.minimum(d_an, dist(positive, negative))
    return _reduce(lucid.clamp(margin + d_ap - d_an, min=0.0), reduction, name)


def triplet_margin_with_distance_loss(anchor, positive, negative, *, distance_function=None, margin=1.0,
                                      swap=False, reduction="mean"):
    """:func:`triplet_margin_loss` with any ``distance_function(x, y)`` (default pairwise L2).

    Examples
    --------
    >>> import lucid, lucid.nn.functional as F
    >>> a, p, n = lucid.zeros(1, 2), lucid.zeros(1, 2), lucid.ones(1, 2)
    >>> d = lambda x, y: ((x - y) ** 2).sum(-1)
    >>> F.triplet_margin_with_distance_loss(a, p, n, distance_function=d, margin=3.0).item()
    1.0
    """
    if margin <= 0:
        raise ValueError(f"triplet_margin_with_distance_loss: margin must be greater than 0, got {margin}")
    dist = distance_function if distance_function is not None else pairwise_distance
    return _triplet(anchor, positive, negative, dist, margin, swap, reduction, "triplet_margin_with_distance_loss")


@autocast_composite("cosine_embedding_loss")  # NOTE [Autocast]
def cosine_embedding_loss(input1, input2, target, margin=0.0, size_average=None, reduce=None, reduction="mean"):
    """``1 - cos(x1, x2)`` where ``y = 1``, ``max(0, cos(x1, x2) - margin)`` where ``y = -1``.

    Examples
    --------
    >>> import lucid, lucid.nn.functional as F
    >>> x = lucid.tensor([[1.0, 0.0]])
    >>> F.cosine_embedding_loss(x, x, lucid.tensor([1])).item()
    0.0
    """
    _refuse_complex("cosine_embedding_loss", input1, input2, target)
    reduction = _legacy_reduction(size_average, reduce, reduction)
    if input1.ndim not in (1, 2) or tuple(input1.shape) != tuple(input2.shape):
        raise RuntimeError(f"cosine_embedding_loss: expected 1-D or 2-D inputs of one shape, got "
                           f"{tuple(input1.shape)} and {tuple(input2.shape)}")
    lucid = _lucid()
    dim = input1.ndim - 1
    target = _as_tensor(target)
    if target.ndim != input1.ndim - 1:
        raise RuntimeError(f"cosine_embedding_loss: a {input1.ndim}-D input expects a {input1.ndim - 1}-D target "
                           f"(multi-target not supported), got shape {tuple(target.shape)}")
    prod = (input1 * input2).sum(dim)
    m1 = (input1 * input1).sum(dim) + 1e-12  # PyTorch's EPSILON
    m2 = (input2 * input2).sum(dim) + 1e-12
    cos = prod / lucid.sqrt(m1 * m2)
    out = lucid.where(target == 1, 1.0 - cos, 0.0) + lucid.where(target == -1, lucid.clamp(cos - margin, min=0.0), 0.0)
    return _reduce(out, reduction, "cosine_embedding_loss")


def _class_targets(input, target, name):
    if input.ndim not in (1, 2):
        raise RuntimeError(f"{name}: expected a 1-D or 2-D input, got shape {tuple(input.shape)}")
    target = _as_tensor(target)
    if target.dtype.kind not in "iu":
        raise RuntimeError(f"{name}: expected integer class targets, got {target.dtype}")
    return target


@autocast_composite("multi_margin_loss")  # NOTE [Autocast]
def multi_margin_loss(input, target, p=1, margin=1.0, weight=None, size_average=None, reduce=None,
                      reduction="mean"):
    """Multi-class hinge: ``sum_{i != y} max(0, margin - x[y] + x[i])^p / C`` (times ``weight[y]``).

    Examples
    --------
    >>> import lucid, lucid.nn.functional as F
    >>> round(F.multi_margin_loss(lucid.tensor([[0.1, 0.2, 0.4, 0.8]]), lucid.tensor([3])).item(), 4)
    0.325
    """
    _refuse_complex("multi_margin_loss", input)
    reduction = _checked_reduction(_legacy_reduction(size_average, reduce, reduction), "multi_margin_loss")
    if p not in (1, 2):
        raise ValueError(f"multi_margin_loss: only p == 1 and p == 2 supported, got {p}")
    if weight is not None and weight.ndim != 1:  # checked before the targets, as PyTorch's wrapper
        raise ValueError(f"multi_margin_loss: weight must be one-dimensional, got shape {tuple(weight.shape)}")
    if input.ndim == 0:  # one class, as PyTorch reads a 0-d input
        input = input.reshape(1)
    target = _class_targets(input, target, "multi_margin_loss")
    lucid = _lucid()
    x = input if input.ndim == 2 else input.unsqueeze(0)
    t = target.reshape(-1, 1)
    c = x.shape[1]
    if t.shape[0] != x.shape[0]:
        raise RuntimeError(f"multi_margin_loss: expected {x.shape[0]} targets, got shape {tuple(target.shape)}")
    if weight is not None and weight.shape[0] != c:
        raise RuntimeError(f"multi_margin_loss: inconsistent weight size, expected {c} but got {tuple(weight.shape)}")
    xy = x.gather(1, t)
    h = lucid.clamp(margin - xy + x, min=0.0)
    if p == 2:
        h = h * h
    if weight is not None:
        h = h * weight[t.reshape(-1)].reshape(-1, 1).to(x.dtype)
    not_y = (lucid.arange(c, device=x.device).reshape(1, c) != t).to(x.dtype)
    loss = (h * not_y).sum(1) / c
    # A 1-D input keeps its target's shape: () or (1,), as PyTorch
    return _reduce(loss if input.ndim == 2 else loss.reshape(tuple(target.shape)), reduction, "multi_margin_loss")


@runs_on_operands_device
@autocast_composite("multilabel_margin_loss")  # NOTE [Autocast]
def multilabel_margin_loss(input, target, size_average=None, reduce=None, reduction="mean"):
    """``sum_{j in targets} sum_{i not in targets} max(0, 1 - (x[j] - x[i])) / C``; the targets
    of a sample are its ``target`` entries before the first -1.

    Examples
    --------
    >>> import lucid, lucid.nn.functional as F
    >>> round(F.multilabel_margin_loss(lucid.tensor([[0.1, 0.2, 0.4, 0.8]]), lucid.tensor([[3, 0, -1, 1]])).item(), 4)
    0.85
    """
    _refuse_complex("multilabel_margin_loss", input)
    reduction = _checked_reduction(_legacy_reduction(size_average, reduce, reduction), "multilabel_margin_loss")
    if input.ndim == 0:  # one class, as PyTorch reads a 0-d input (and its 0-d target)
        input, target = input.reshape(1), _as_tensor(target).reshape(-1)
    target = _class_targets(input, target, "multilabel_margin_loss")
    if tuple(target.shape) != tuple(input.shape):
        raise RuntimeError(f"multilabel_margin_loss: target {tuple(target.shape)} must have the input's shape "
                           f"{tuple(input.shape)}")
    lucid = _lucid()
    x = input if input.ndim == 2 else input.unsqueeze(0)
    t = target.detach().reshape(tuple(x.shape))
    c = x.shape[1]
    _check_multilabel_targets(t, c)
    # Lucid ops, not the target's values, so vmap batches the targets too: a target entry counts
    # until the first negative one (``listed``); how often each class is listed (a repeated
    # target counts again, as PyTorch; an entry >= C, unchecked on a device or under a
    # transform, counts for no class).
    listed = ((t < 0).cumsum(1) == 0) & (t < c)
    slot = lucid.where(listed, t, c)  # unlisted entries land in an extra column, dropped
    count = lucid.zeros(x.shape[0], c + 1, dtype=lucid.int64, device=x.device)
    count = count.scatter_add(1, slot, listed.to(lucid.int64))[:, :c]  # (n, c)
    pair = (count.unsqueeze(2) * (count.unsqueeze(1) == 0)).to(x.dtype)  # (n, j, i)
    h = lucid.clamp(1.0 - (x.unsqueeze(2) - x.unsqueeze(1)), min=0.0)
    loss = (h * pair).sum((1, 2)) / c
    return _reduce(loss if input.ndim == 2 else loss.reshape(()), reduction, "multilabel_margin_loss")


def _check_multilabel_targets(t, c):
    """A listed target must name a class. Reads values: plain CPU tensors only (on a device it
    would read back every call; a transform's tracer has no single value)."""
    if type(t) is not Tensor or t._data.__class__ is not np.ndarray:
        return
    t = t._data
    bad = (np.cumsum(t < 0, axis=1) == 0) & (t >= c)
    if bad.any():
        raise RuntimeError(f"multilabel_margin_loss: target index {t[bad][0]} out of range for {c} classes")


def multilabel_soft_margin_loss(input, target, weight=None, size_average=None, reduce=None, reduction="mean"):
    """``-mean_c [y log sigmoid(x) + (1 - y) log sigmoid(-x)]`` (times ``weight[c]``) per sample.

    Examples
    --------
    >>> import lucid, lucid.nn.functional as F
    >>> round(F.multilabel_soft_margin_loss(lucid.zeros(1, 2), lucid.tensor([[1.0, 0.0]])).item(), 4)
    0.6931
    """
    _refuse_complex("multilabel_soft_margin_loss", input, target)
    reduction = _legacy_reduction(size_average, reduce, reduction)
    target = _as_tensor(target)
    if not target.is_floating_point():  # a float target promotes, as PyTorch's (float64 target: float64 loss)
        target = target.to(input.dtype)
    loss = -(target * logsigmoid(input) + (1.0 - target) * logsigmoid(-input))
    if weight is not None:
        loss = loss * weight
    loss = loss.sum(input.ndim - 1) / input.shape[-1]
    return _reduce(loss, reduction, "multilabel_soft_margin_loss")


# A finite stand-in for log(0) in the CTC recursion: exp(NEG - finite) is 0 and, unlike -inf,
# logsumexp's derivative at all-NEG arguments is finite, so unreachable states give zero
# gradient instead of NaN.
_NEG = -1e30


# NOTE [CTC on the host]
# The targets and lengths are read and checked on the host (1-D concatenated targets are split
# into padded rows there), as PyTorch's CUDA ctc_loss also takes the lengths on the host. Given
# device tensors, those values are copied to the host explicitly (``_host_values``: one
# synchronous read per call); the padded targets and the lengths then go to the device of
# ``log_probs`` once, and the alignment tables (the blank-extended targets, which states may
# skip, where each sample ends), the recursion and its gradient are Lucid ops there. The same
# ops build the tables from tracers when the values are out of reach (``vmap(grad(f))``, NOTE
# [Per-example functions under vmap]): then nothing is read or checked.
def _host_values(v):
    """The values of ``v`` (a Tensor, array, list or number) as a host NumPy array."""
    return host(_as_tensor(v)._data)


def _ctc_traced_inputs(lp, targets, input_lengths, target_lengths, n):
    """``(targets (N, S), target_lengths, input_lengths)`` as Tensors on ``lp``'s device, read from
    no value: some are a transform's tracers (NOTE [Per-example functions under vmap]). 1-D
    concatenated targets are padded to S = their total length (each sample's own labels first:
    the states past a sample's end reach neither its end nor its gradient). Not validated."""
    import lucid

    tg = _as_tensor(targets).long().to(lp.device)
    tlens = _as_tensor(target_lengths).reshape(-1).long().to(lp.device)
    ilens = _as_tensor(input_lengths).reshape(-1).long().to(lp.device)
    if tlens.shape[0] != n or ilens.shape[0] != n:
        raise RuntimeError(f"ctc_loss: expected {n} input and target lengths, got {ilens.shape[0]} and "
                           f"{tlens.shape[0]}")
    if tg.ndim == 1:
        total = tg.shape[0]
        start = tlens.cumsum(0) - tlens
        pos = start.unsqueeze(1) + lucid.arange(total, device=lp.device).unsqueeze(0)  # (N, total)
        tg = tg[pos.clamp(max=max(total - 1, 0))] if total else lucid.zeros(n, 0, dtype=lucid.int64, device=lp.device)
    elif tg.ndim != 2:
        raise RuntimeError(f"ctc_loss: expected targets of shape (N, S) or (sum(target_lengths),), got "
                           f"{tuple(tg.shape)}")
    return tg, tlens, ilens


def _ctc_targets(targets, target_lengths, n):
    """(N, S) padded int array of the targets (1-D concatenated targets are split by length)."""
    t = _host_values(targets)
    lens = _host_values(target_lengths).astype(np.int64).reshape(-1)
    if len(lens) != n:
        raise RuntimeError(f"ctc_loss: expected {n} target lengths, got {len(lens)}")
    if n and lens.min() < 0:
        raise RuntimeError(f"ctc_loss: expected target_lengths to have value at least 0, got {lens.tolist()}")
    if t.ndim == 2:
        if n and lens.max() > t.shape[1]:  # else the padded targets would be read past their end
            raise RuntimeError(f"ctc_loss: expected targets to have size at least {lens.max()} at dimension 1, "
                               f"got shape {t.shape}")
        return t.astype(np.int64), lens
    if t.shape[0] != lens.sum():
        raise RuntimeError(f"ctc_loss: expected 1-D targets of size {lens.sum()} (the sum of target_lengths), got "
                           f"size {t.shape[0]}")
    s = int(lens.max()) if n else 0
    out = np.zeros((n, s), np.int64)
    offs = np.concatenate([[0], np.cumsum(lens)])
    for b in range(n):
        out[b, :lens[b]] = t[offs[b]:offs[b + 1]]
    return out, lens


@autocast_composite("ctc_loss")  # NOTE [Autocast]
def ctc_loss(log_probs, targets, input_lengths, target_lengths, blank=0, reduction="mean", zero_infinity=False):
    """Connectionist temporal classification loss (Graves et al., 2006).

    The forward (alpha) recursion in log space over the blank-extended targets, vectorised
    over the batch, one step per time frame; its gradient is autograd's. ``log_probs`` is
    (T, N, C) (or (T, C)) log-softmax output; ``targets`` is (N, S) padded or the 1-D
    concatenation; impossible alignments give ``inf`` (0 with ``zero_infinity``, which also
    zeroes their gradient). 'mean' divides each loss by its target length, then averages.
    Targets and lengths are read on the host (NOTE [CTC on the host]); batched by a ``vmap`` with
    a transform inside (per-example gradients) they are neither read nor checked.

    Examples
    --------
    >>> import lucid, lucid.nn.functional as F
    >>> lp = lucid.log(lucid.full((1, 1, 2), 0.5))  # T=1, one frame, uniform over {blank, a}
    >>> round(F.ctc_loss(lp, lucid.tensor([[1]]), [1], [1], reduction="sum").item(), 4)
    0.6931
    """
    _refuse_complex("ctc_loss", log_probs)
    trace = looping_trace((targets, input_lengths, target_lengths), (log_probs,))
    if trace is not None:  # the tables are built from these values: NOTE [Per-example functions under vmap]
        return call_per_example(trace, ctc_loss, "ctc_loss", (log_probs, targets, input_lengths, target_lengths),
                                dict(blank=blank, reduction=reduction, zero_infinity=zero_infinity))
    lucid = _lucid()
    unbatched = log_probs.ndim == 2
    lp = log_probs.unsqueeze(1) if unbatched else log_probs
    if lp.ndim != 3:
        raise RuntimeError(f"ctc_loss: expected log_probs of shape (T, N, C) or (T, C), got {tuple(log_probs.shape)}")
    T, n, c = lp.shape
    if not 0 <= blank < c:
        raise RuntimeError(f"ctc_loss: blank must be in label range [0, {c}), got {blank}")
    if unbatched:
        targets = _as_tensor(targets).reshape(1, -1)
    if is_tracer(targets, input_lengths, target_lengths):  # NOTE [Per-example functions under vmap]
        tg, tlens, ilens = _ctc_traced_inputs(lp, targets, input_lengths, target_lengths, n)
    else:  # read and checked on the host (NOTE [CTC on the host]), then on log_probs' device
        tg, tlens = _ctc_targets(targets, target_lengths, n)
        ilens = _host_values(input_lengths).astype(np.int64).reshape(-1)
        if len(ilens) != n or (n and ilens.max() > T):
            raise RuntimeError(f"ctc_loss: input_lengths must have {n} entries of at most T = {T}, got {ilens}")
        tg, tlens, ilens = const_like(tg, lp), const_like(tlens, lp), const_like(ilens, lp)
    s = tg.shape[1]
    dtype = lp.dtype
    # The tables, Lucid ops on the target and length tensors (a vmap batches them).
    blanks = lucid.full((n, s + 1), blank, dtype=lucid.int64, device=tg.device)
    ext = lucid.stack([blanks[:, :s], tg], 2).reshape(n, 2 * s)  # blank, l1, blank, l2, ..., blank
    ext = lucid.cat([ext, blanks[:, s:]], 1)
    # may jump from s - 2 (different non-blank labels)
    skip = (ext[:, 2:] != blank) & (ext[:, 2:] != ext[:, :-2])
    zero, neg1 = const_like(np.zeros((), dtype), lp), const_like(np.full((), _NEG, dtype), lp)
    skip_mask = lucid.where(lucid.cat([lucid.zeros(n, 2, dtype=lucid.bool, device=tg.device), skip], 1), zero, neg1)
    lpe = lp.gather(2, ext.unsqueeze(0).expand(T, n, 2 * s + 1))  # (T, N, 2S+1)
    neg = const_like(np.full((n, 1), _NEG).astype(dtype), lp)
    init = np.full((n, 2 * s + 1), _NEG)
    init[:, :2] = 0.0
    alpha = lpe[0] + const_like(init.astype(dtype), lp)
    running = (lucid.arange(T, device=ilens.device).unsqueeze(1) < ilens.unsqueeze(0)).unsqueeze(2)  # frame t is inside
    for t in range(1, T):
        a1 = lucid.cat([neg, alpha[:, :-1]], 1)
        a2 = lucid.cat([neg, neg, alpha[:, :-2]], 1)[:, : 2 * s + 1] + skip_mask
        new = lucid.logsumexp(lucid.stack([alpha, a1, a2], 0), 0) + lpe[t]
        alpha = lucid.where(running[t], new, alpha)
    ends = alpha.gather(1, lucid.stack([2 * tlens, (2 * tlens - 1).clamp(min=0)], 1))
    if s:  # a target of length 0 ends only on the blank state
        ends = ends + lucid.stack([lucid.zeros_like(ends[:, 0]), lucid.where(tlens > 0, zero, neg1)], 1)
    loss = -lucid.logsumexp(ends, 1)
    impossible = const_like(np.zeros(n, bool), lp) if n == 0 else (loss.detach() > -_NEG / 2)
    loss = lucid.where(impossible, 0.0 if zero_infinity else float("inf"), loss)
    if reduction == "mean":
        loss = (loss / tlens.clamp(min=1).to(dtype)).mean()
    elif reduction == "sum":
        loss = loss.sum()
    elif reduction != "none":
        raise ValueError(f"ctc_loss: {reduction!r} is not a valid value for reduction")
    return loss.reshape(()) if unbatched and reduction == "none" else loss
