"""PyTorch's batch-norm building blocks: the kernels ``SyncBatchNorm`` is made of
(``batch_norm_stats``, ``batch_norm_gather_stats[_with_counts]``, ``batch_norm_elemt``,
``batch_norm_backward_reduce``, ``batch_norm_backward_elemt``) and ``batch_norm_update_stats``.

# NOTE [Batch-norm kernels]
Channels are dim 1; the statistics reduce every other dim. A process computes its local
``(mean, invstd)`` (``invstd = 1 / sqrt(biased var + eps)``), the ranks' pairs are gathered and
merged with their element counts (each rank's biased variance is ``invstd**-2 - eps``; the
merge is the parallel-variance formula), the running statistics move by ``momentum`` towards
the merged mean and the *unbiased* merged variance, and ``batch_norm_elemt`` normalizes. The
backward pair reduces ``sum(dy)`` and ``sum(dy * (x - mean))`` per channel (all-reduced by the
caller) and applies ``dx = (dy - sum_dy / N - (x - mean) invstd^2 sum_dy_xmu / N) invstd w``.
PyTorch runs all but ``batch_norm_update_stats`` on CUDA only; here each is a composite of
Lucid ops on any device, so every one is differentiable and batchable through its ops.
Running statistics are written in place, outside the graph. Half-precision inputs keep their
statistics in float32, as PyTorch's accumulate type.
"""
from __future__ import annotations

import collections

from .._core.grad_mode import no_grad
from ._family import _as_tensor

__all__ = ["batch_norm_stats", "batch_norm_elemt", "batch_norm_gather_stats", "batch_norm_gather_stats_with_counts",
           "batch_norm_backward_reduce", "batch_norm_backward_elemt", "batch_norm_update_stats"]


def _L():
    import lucid

    return lucid


def _input(input, op):
    x = _as_tensor(input)
    if x.ndim < 2:
        raise RuntimeError(f"{op}: expected an input with a channel dim (at least 2-D), got shape {tuple(x.shape)}")
    if x.dtype.kind != "f":
        raise RuntimeError(f"{op}: expected a floating point input, got {x.dtype}")
    return x


def _stat_dtype(x):
    return _L().float32 if x.dtype.itemsize < 4 else x.dtype


def _reduced(x):
    return (0,) + tuple(range(2, x.ndim))


def _per_channel(v, x):
    """A (C,) vector shaped to broadcast against ``x`` along dim 1."""
    return v.reshape((1, -1) + (1,) * (x.ndim - 2))


def batch_norm_stats(input, eps):
    """Per-channel ``(mean, invstd)`` of ``input``, ``invstd = 1 / sqrt(biased var + eps)``.

    Examples
    --------
    >>> import lucid
    >>> mean, invstd = lucid.batch_norm_stats(lucid.tensor([[1.0], [3.0]]), 0.0)
    >>> mean.tolist(), invstd.tolist()
    ([2.0], [1.0])
    """
    x = _input(input, "batch_norm_stats")
    xs = x.to(_stat_dtype(x))
    dims = _reduced(x)
    mean = xs.mean(dims)
    var = ((xs - _per_channel(mean, x)) ** 2).mean(dims)
    return mean, (var + float(eps)).rsqrt()


def batch_norm_elemt(input, weight, bias, mean, invstd, eps):
    """``(input - mean) * invstd * weight + bias`` per channel (``weight``/``bias`` may be None).

    Examples
    --------
    >>> import lucid
    >>> lucid.batch_norm_elemt(lucid.tensor([[1.0], [3.0]]), None, None, lucid.tensor([2.0]),
    ...                        lucid.tensor([1.0]), 0.0).tolist()
    [[-1.0], [1.0]]
    """
    x = _input(input, "batch_norm_elemt")
    scale = _as_tensor(invstd)
    if weight is not None:
        scale = scale * _as_tensor(weight)
    out = (x - _per_channel(_as_tensor(mean), x)) * _per_channel(scale, x)
    if bias is not None:
        out = out + _per_channel(_as_tensor(bias), x)
    return out.to(x.dtype)


def batch_norm_gather_stats_with_counts(input, mean, invstd, running_mean, running_var, momentum, eps, counts):
    """Merge the ranks' ``(mean, invstd)`` rows (shape ``(world, C)``), weighted by ``counts``
    (elements per channel on each rank), into the global ``(mean, invstd)``; ``running_mean`` /
    ``running_var`` (if given) move by ``momentum`` towards the mean and the unbiased variance.

    Examples
    --------
    >>> import lucid
    >>> m, s = lucid.batch_norm_gather_stats_with_counts(
    ...     lucid.zeros(1, 1), lucid.tensor([[0.0], [2.0]]), lucid.tensor([[1.0], [1.0]]), None, None, 0.1, 0.0,
    ...     lucid.tensor([1.0, 1.0]))
    >>> m.tolist(), s.tolist()
    ([1.0], [0.7071067690849304])
    """
    op = "batch_norm_gather_stats_with_counts"
    mean, invstd = _as_tensor(mean), _as_tensor(invstd)
    if mean.ndim != 2 or tuple(invstd.shape) != tuple(mean.shape):
        raise RuntimeError(f"{op}: expected mean and invstd of shape (world_size, C), got {tuple(mean.shape)} "
                           f"and {tuple(invstd.shape)}")
    counts = _as_tensor(counts).to(mean.dtype).reshape(-1, 1)
    if counts.shape[0] != mean.shape[0]:
        raise RuntimeError(f"{op}: expected {mean.shape[0]} counts, got {counts.shape[0]}")
    total = counts.sum(0)
    var = invstd ** -2 - float(eps)
    global_mean = (counts * mean).sum(0) / total
    global_var = (counts * (var + (mean - global_mean) ** 2)).sum(0) / total
    with no_grad():
        c = float(momentum)
        if running_mean is not None:
            running_mean.copy_((running_mean * (1 - c) + global_mean.detach() * c).to(running_mean.dtype))
        if running_var is not None:
            unbiased = global_var.detach() * total / (total - 1)
            running_var.copy_((running_var * (1 - c) + unbiased * c).to(running_var.dtype))
    return global_mean, (global_var + float(eps)).rsqrt()


def batch_norm_gather_stats(input, mean, invstd, running_mean, running_var, momentum, eps, count):
    """:func:`batch_norm_gather_stats_with_counts` with the same ``count`` on every rank.

    Examples
    --------
    >>> import lucid
    >>> m, _ = lucid.batch_norm_gather_stats(lucid.zeros(1, 1), lucid.tensor([[0.0], [2.0]]),
    ...                                      lucid.tensor([[1.0], [1.0]]), None, None, 0.1, 0.0, 4)
    >>> m.tolist()
    [1.0]
    """
    mean = _as_tensor(mean)
    counts = _L().full((mean.shape[0],), float(count), dtype=mean.dtype, device=mean.device)
    return batch_norm_gather_stats_with_counts(input, mean, invstd, running_mean, running_var, momentum, eps, counts)


_Reduced = collections.namedtuple("batch_norm_backward_reduce", ["sum_dy", "sum_dy_xmu", "grad_weight", "grad_bias"])


def batch_norm_backward_reduce(grad_out, input, mean, invstd, weight, input_g, weight_g, bias_g):
    """Per-channel ``(sum_dy, sum_dy_xmu, grad_weight, grad_bias)`` of a batch norm's backward:
    ``sum(dy)``, ``sum(dy * (x - mean))``, ``sum_dy_xmu * invstd`` and ``sum_dy``; an entry that
    its flag (``input_g``, ``weight_g``, ``bias_g``) does not ask for is None.

    Examples
    --------
    >>> import lucid
    >>> r = lucid.batch_norm_backward_reduce(lucid.ones(2, 1), lucid.tensor([[1.0], [3.0]]), lucid.tensor([2.0]),
    ...                                      lucid.tensor([1.0]), None, True, True, True)
    >>> r.sum_dy.tolist(), r.sum_dy_xmu.tolist(), r.grad_weight.tolist()
    ([2.0], [0.0], [0.0])
    """
    x = _input(input, "batch_norm_backward_reduce")
    dy = _as_tensor(grad_out).to(_stat_dtype(x))
    dims = _reduced(x)
    sum_dy = dy.sum(dims)
    sum_dy_xmu = (dy * (x.to(dy.dtype) - _per_channel(_as_tensor(mean), x))).sum(dims)
    grad_weight = (sum_dy_xmu * _as_tensor(invstd)).to(x.dtype if weight is None else _as_tensor(weight).dtype) \
        if weight_g else None
    grad_bias = sum_dy.to(x.dtype if weight is None else _as_tensor(weight).dtype) if bias_g else None
    return _Reduced(sum_dy if input_g else None, sum_dy_xmu if input_g else None, grad_weight, grad_bias)


def batch_norm_backward_elemt(grad_out, input, mean, invstd, weight, sum_dy, sum_dy_xmu, count):
    """The input gradient of a (synchronized) batch norm from the all-reduced sums:
    ``(dy - sum_dy / N - (x - mean) invstd^2 sum_dy_xmu / N) * invstd * weight`` with
    ``N = count.sum()`` (``count``: elements per channel on each rank).

    Examples
    --------
    >>> import lucid
    >>> lucid.batch_norm_backward_elemt(lucid.tensor([[1.0], [1.0]]), lucid.tensor([[1.0], [3.0]]),
    ...                                 lucid.tensor([2.0]), lucid.tensor([1.0]), None, lucid.tensor([2.0]),
    ...                                 lucid.tensor([0.0]), lucid.tensor([2])).tolist()
    [[0.0], [0.0]]
    """
    x = _input(input, "batch_norm_backward_elemt")
    dy = _as_tensor(grad_out)
    invstd = _as_tensor(invstd)
    n = _as_tensor(count).to(invstd.dtype).sum()
    xmu = x.to(invstd.dtype) - _per_channel(_as_tensor(mean), x)
    scale = invstd if weight is None else invstd * _as_tensor(weight)
    grad = (dy - _per_channel(_as_tensor(sum_dy) / n, x)
            - xmu * _per_channel(invstd ** 2 * _as_tensor(sum_dy_xmu) / n, x)) * _per_channel(scale, x)
    return grad.to(x.dtype)


def batch_norm_update_stats(input, running_mean, running_var, momentum):
    """Per-channel ``(mean, biased var)`` of ``input``; ``running_mean`` / ``running_var`` (if
    given) move by ``momentum`` towards the mean and the unbiased variance, in place.

    Examples
    --------
    >>> import lucid
    >>> rm, rv = lucid.zeros(1), lucid.ones(1)
    >>> mean, var = lucid.batch_norm_update_stats(lucid.tensor([[1.0], [3.0]]), rm, rv, 0.5)
    >>> mean.tolist(), var.tolist(), rm.tolist(), rv.tolist()
    ([2.0], [1.0], [1.0], [1.5])
    """
    x = _input(input, "batch_norm_update_stats")
    xs = x.to(_stat_dtype(x))
    dims = _reduced(x)
    mean = xs.mean(dims)
    var = ((xs - _per_channel(mean, x)) ** 2).mean(dims)
    n = x.numel() // x.shape[1] if x.shape[1] else 0
    with no_grad():
        c = float(momentum)
        if running_mean is not None:
            running_mean.copy_((running_mean * (1 - c) + mean.detach() * c).to(running_mean.dtype))
        if running_var is not None:
            unbiased = var.detach() * (n / (n - 1) if n > 1 else float("nan"))
            running_var.copy_((running_var * (1 - c) + unbiased * c).to(running_var.dtype))
    return mean, var
