"""Normalisation layers (functional): ``layer_norm``, ``group_norm``, ``batch_norm``,
``instance_norm``, ``normalize``. All are composites of primitives.
"""
from __future__ import annotations

import math

import numpy as np

from ..._core import dtypes
from ..._core.backend import runs_on_operands_device
from ..._core.grad_mode import no_grad
from ..._core.primitive import OpError, autocast_composite, autocast_float32
from ._complex import refuse_complex as _refuse_complex
from ...ops.elementwise.arithmetic import _is_half as _half_input
from ._opmath import in_float32 as _in_float32, is_bf16 as _bf16_input, is_half as _is_half
from ._opmath import norm_in_float32 as _norm_in_float32

__all__ = ["layer_norm", "group_norm", "batch_norm", "instance_norm", "normalize", "rms_norm", "local_response_norm"]


def _lucid():
    import lucid

    return lucid


def _standardize(x, axes, eps):
    """``(x - mean) / sqrt(var + eps)`` over ``axes`` with the biased variance."""
    lucid = _lucid()
    mean = lucid.mean(x, axes, keepdim=True)
    xc = x - mean
    var = lucid.mean(xc * xc, axes, keepdim=True)
    return xc / lucid.sqrt(var + eps)


def _vector_norm(x, p, dim):
    """``||x||_p`` along ``dim`` (kept) whose gradient at the zero vector is 0, not NaN: the
    ``1/p``-th root's infinite derivative at 0 is masked (as PyTorch's norm backward does), so
    a clamp that follows (``normalize``'s eps) makes the whole gradient finite."""
    lucid = _lucid()
    if p == 2:
        return lucid.norm(x, 2, dim, keepdim=True)  # sqrt with derivative 0 at 0
    a = lucid.abs(x)
    if p == 1:
        return lucid.sum(a, dim, keepdim=True)
    if p == float("inf"):
        return lucid.amax(a, dim, keepdim=True)
    if p > 0:
        s = lucid.sum(a ** p, dim, keepdim=True)
        pos = s > 0
        return lucid.where(pos, lucid.where(pos, s, 1.0) ** (1.0 / p), 0.0)
    # p = 0 (a count), -inf and negative p: linalg's norm has PyTorch's values and zero-safe
    # gradients there; a 0-d input (dim 0 or -1) reduces over everything
    return lucid.linalg.vector_norm(x, p, None if x.ndim == 0 and dim in (0, -1) else dim, keepdim=True)


@autocast_float32("layer_norm")  # NOTE [Autocast]
def layer_norm(input, normalized_shape, weight=None, bias=None, eps=1e-5):
    """Normalise over the last ``len(normalized_shape)`` dims, then scale and shift.

    Parameters
    ----------
    input : Tensor
        Of shape (*, *normalized_shape).
    normalized_shape : tuple of int
        The trailing dims to normalise over.
    weight, bias : Tensor, optional
        Affine parameters of shape ``normalized_shape``.
    eps : float
        Added to the variance for stability.

    Examples
    --------
    >>> import lucid, lucid.nn.functional as F
    >>> F.layer_norm(lucid.tensor([[1.0, 3.0]]), (2,), eps=0.0)
    tensor([[-1.,  1.]])
    """
    _refuse_complex("layer_norm", input)
    if _half_input(input) or _bf16_input(input):  # See NOTE [Half composites]; also beside float32 parameters
        return _norm_in_float32(layer_norm, input, normalized_shape, weight, bias, eps)
    if isinstance(normalized_shape, int):
        normalized_shape = (normalized_shape,)
    normalized_shape = tuple(normalized_shape)
    k = len(normalized_shape)
    if k == 0:
        raise RuntimeError(f"layer_norm: expected normalized_shape to be at least 1-dimensional, "
                           f"got {normalized_shape}")
    if tuple(input.shape[input.ndim - k:]) != normalized_shape or input.ndim < k:
        raise RuntimeError(
            f"layer_norm: input of shape {tuple(input.shape)} does not end with normalized_shape "
            f"{normalized_shape}"
        )
    out = _standardize(input, tuple(range(input.ndim - k, input.ndim)), eps)
    if weight is not None:
        out = out * weight
    if bias is not None:
        out = out + bias
    return out


@autocast_composite("rms_norm")  # NOTE [Autocast]
def rms_norm(input, normalized_shape, weight=None, eps=None):
    """``x / sqrt(mean(x^2) + eps)`` over the last dims, times ``weight``.

    Parameters
    ----------
    input : Tensor
        Of shape (*, *normalized_shape).
    normalized_shape : tuple of int
        The trailing dims.
    weight : Tensor, optional
        Scale of shape ``normalized_shape``.
    eps : float, optional
        Added under the root (default: the dtype's machine epsilon).

    Examples
    --------
    >>> import lucid, lucid.nn.functional as F
    >>> F.rms_norm(lucid.tensor([[3.0, 3.0]]), (2,)).tolist()
    [[1.0, 1.0]]
    """
    lucid = _lucid()
    if isinstance(normalized_shape, int):
        normalized_shape = (normalized_shape,)
    normalized_shape = tuple(normalized_shape)
    k = len(normalized_shape)
    if k == 0:
        raise RuntimeError(f"rms_norm: expected normalized_shape to be at least 1-dimensional, "
                           f"got {normalized_shape}")
    if input.ndim < k or tuple(input.shape[input.ndim - k:]) != normalized_shape:
        raise RuntimeError(f"rms_norm: input of shape {tuple(input.shape)} does not end with normalized_shape "
                           f"{normalized_shape}")
    if _half_input(input) or _bf16_input(input):  # See NOTE [Half composites]; float32's default eps
        return _norm_in_float32(rms_norm, input, normalized_shape, weight, eps)
    eps = float(dtypes.np_finfo(input.dtype).eps) if eps is None else eps
    axes = tuple(range(input.ndim - k, input.ndim))
    out = input / lucid.sqrt(lucid.mean(input * input, axes, keepdim=True) + eps)
    return out if weight is None else out * weight


def _channel_shape(input):
    return (1, input.shape[1]) + (1,) * (input.ndim - 2)


@autocast_float32("group_norm")  # NOTE [Autocast]
def group_norm(input, num_groups, weight=None, bias=None, eps=1e-5):
    """Normalise (N, C, *) inputs over groups of ``C // num_groups`` channels and space.

    Parameters
    ----------
    input : Tensor
        Of shape (N, C, *).
    num_groups : int
        Number of channel groups (must divide C).
    weight, bias : Tensor, optional
        Per-channel affine parameters.
    eps : float
        Added to the variance for stability.

    Examples
    --------
    >>> import lucid, lucid.nn.functional as F
    >>> F.group_norm(lucid.tensor([[1.0, 3.0]]), 1, eps=0.0)
    tensor([[-1.,  1.]])
    """
    _refuse_complex("group_norm", input)
    if _half_input(input) or _bf16_input(input):  # See NOTE [Half composites]
        return _norm_in_float32(group_norm, input, num_groups, weight, bias, eps)
    if input.ndim < 2:
        raise RuntimeError(f"group_norm: expected an input of shape (N, C, *), got {tuple(input.shape)}")
    n, c = input.shape[:2]
    if c % num_groups:
        raise RuntimeError(f"group_norm: number of channels {c} must be divisible by num_groups {num_groups}")
    # the group size spelled out: -1 is ambiguous for an empty batch
    x = input.reshape(n, num_groups, (c // num_groups) * math.prod(input.shape[2:]))
    out = _standardize(x, (2,), eps).reshape(tuple(input.shape))
    if weight is not None:
        out = out * weight.reshape(_channel_shape(input))
    if bias is not None:
        out = out + bias.reshape(_channel_shape(input))
    return out


def batch_norm(input, running_mean, running_var, weight=None, bias=None, training=False,
               momentum=0.1, eps=1e-5):
    """Batch normalisation over all dims but the channel dim (dim 1).

    In training the batch statistics are used (biased variance) and, when given,
    ``running_mean``/``running_var`` are updated in place with
    ``(1 - momentum) * running + momentum * batch`` (unbiased variance), outside the graph.
    In evaluation the running statistics are used. An empty input (1-d ``(0,)`` included) gives
    an empty output and leaves the statistics alone (NOTE [Empty batch norm]).

    Parameters
    ----------
    input : Tensor
        Of shape (N, C, *).
    running_mean, running_var : Tensor or None
        Running statistics (updated in place when ``training``; used when not).
    weight, bias : Tensor, optional
        Per-channel affine parameters.
    training : bool
        Use batch statistics (and update the running ones).
    momentum : float
        Weight of the newest batch in the running statistics.
    eps : float
        Added to the variance for stability.

    Examples
    --------
    >>> import lucid, lucid.nn.functional as F
    >>> F.batch_norm(lucid.tensor([[1.0], [3.0]]), None, None, training=True, eps=1e-12)
    tensor([[-1.],
           [ 1.]])
    """
    _refuse_complex("batch_norm", input)
    if _half_input(input):  # See NOTE [Half composites]; running statistics updated in place stay as they are
        if training:
            return _norm_in_float32(lambda x, w, b: batch_norm(x, running_mean, running_var, w, b, True, momentum,
                                                               eps), input, weight, bias)
        return _norm_in_float32(batch_norm, input, running_mean, running_var, weight, bias, False, momentum, eps)
    lucid = _lucid()
    if input.numel() == 0 and input.ndim:
        if training and input.ndim >= 2:  # PyTorch counts N * spatial values per channel first: (1, 0) raises
            check_batch_count(input.shape[0] * math.prod(input.shape[2:]), tuple(input.shape))
        return _empty_batch_norm(input, weight, bias)
    _check_batch_norm_input(input, running_mean, training)
    cshape = _channel_shape(input)
    axes = (0,) + tuple(range(2, input.ndim))
    if training:
        count = input.numel() // input.shape[1]
        check_batch_count(count, tuple(input.shape))
        mean = lucid.mean(input, axes, keepdim=True)
        xc = input - mean
        var = lucid.mean(xc * xc, axes, keepdim=True)
        if running_mean is not None or running_var is not None:
            _update_running(running_mean, running_var, mean, var, count, momentum)
        out = xc / lucid.sqrt(var + eps)
    else:
        if running_mean is None or running_var is None:
            raise OpError("batch_norm: running_mean and running_var are required when training=False")
        rm = running_mean.reshape(cshape)
        rv = running_var.reshape(cshape)
        out = (input - rm) / lucid.sqrt(rv + eps)
    if weight is not None:
        out = out * weight.reshape(cshape)
    if bias is not None:
        out = out + bias.reshape(cshape)
    return out


# NOTE [Empty batch norm]
# PyTorch answers an empty input (any shape of at least one dim, 1-d ``(0,)`` included, in
# training or not, with or without running statistics) before it looks at the channel dim or
# checks a statistic's size: the output is a copy of the input, scaled by ``weight[0]`` and
# shifted by ``bias[0]`` so that the parameters stay in the graph (their gradients are zeros),
# and the running statistics are left as they were. Only a non-empty input needs a channel dim.


def _empty_batch_norm(input, weight, bias):
    """The output for an empty input. See NOTE [Empty batch norm]."""
    out = input.clone()
    if weight is not None:
        out = out * weight[0]
    if bias is not None:
        out = out + bias[0]
    return out


def _check_batch_norm_input(input, running_mean, training):
    """A non-empty input must be (N, C, *) of a floating dtype (PyTorch's kernel errors).

    PyTorch reads a 1-d or 0-d input's channel count past the end of its shape: with no
    running statistics in training it raises IndexError ("dimension out of range"), otherwise a
    RuntimeError about the statistics' size; Lucid raises those types with a clear message."""
    if input.ndim < 2:
        if training and input.ndim == 1:  # F.batch_norm's own check comes first
            check_batch_count(input.shape[0], tuple(input.shape))
        err = IndexError if training and (running_mean is None or input.ndim == 0) else RuntimeError
        raise err(f"batch_norm: expected an input of shape (N, C, *) or an empty input, got shape "
                  f"{tuple(input.shape)}")
    if input.dtype.kind in "biu":
        raise NotImplementedError(f"batch_norm: not implemented for {input.dtype} inputs")


def check_batch_eps(eps, training):
    """PyTorch's ``F.batch_norm`` wrapper refuses ``eps <= 0`` in training (a constant channel would
    divide by zero) and ``eps < 0`` otherwise. Checked by the BatchNorm layers only: the functional
    form also serves ``lucid.batch_norm``, whose ATen counterpart takes any eps."""
    if eps <= 0.0 and (training or eps < 0.0):
        raise ValueError(f"batch_norm: eps must be {'positive during training' if training else 'non-negative'}, "
                         f"got {eps}")


def check_batch_count(count, size, op="batch_norm"):
    """Training statistics need more than one value per channel (PyTorch's error; an empty
    batch passes: it gives an empty output)."""
    if count == 1:
        raise ValueError(f"{op}: expected more than 1 value per channel when training, got input size {size}")


@runs_on_operands_device
def _update_running(running_mean, running_var, mean, var, count, momentum):
    with no_grad():
        mean, var = mean.detach(), var.detach()
        if _is_batch_tracer(mean):  # under vmap: each example updates its own running statistics
            return _update_running_batched(running_mean, running_var, mean, var, count, momentum)
        m = mean._data.reshape(-1)
        v = var._data.reshape(-1) * (count / (count - 1))
        if running_mean is not None:
            rm = running_mean._data
            rm[...] = ((1 - momentum) * rm + momentum * m).astype(rm.dtype, copy=False)
            running_mean._version[0] += 1
        if running_var is not None:
            rv = running_var._data
            rv[...] = ((1 - momentum) * rv + momentum * v).astype(rv.dtype, copy=False)
            running_var._version[0] += 1


def _is_batch_tracer(t):
    from ...func._traces import BatchTracer

    return isinstance(t, BatchTracer)


def _update_running_batched(running_mean, running_var, mean, var, count, momentum):
    """The running-statistics update of ``batch_norm`` under ``vmap``, composed from in-place ops
    so it lands in each example's slice of batched statistics (``vmap`` over stacked buffers, as
    ``functional_call`` with ``stack_module_state`` gives them); unbatched statistics can't take
    a per-example update: PyTorch's error."""
    stats = ((running_mean, mean.reshape(-1)), (running_var, var.reshape(-1) * (count / (count - 1))))
    for run, stat in stats:
        if run is not None and not _is_batch_tracer(run):
            raise RuntimeError(
                "batch_norm: Batch norm got a batched tensor as input while the running_mean or running_var, "
                "which will be updated in place, were not batched. If you are using a module and do not need "
                "eval mode, set `track_running_stats` to False, or patch it with "
                "lucid.func.replace_all_batch_norm_modules_.")
    for run, stat in stats:
        if run is not None:
            run.copy_(run * (1 - momentum) + stat.to(run.dtype) * momentum)


def instance_norm(input, running_mean=None, running_var=None, weight=None, bias=None,
                  use_input_stats=True, momentum=0.1, eps=1e-5):
    """Normalise each (example, channel) over its spatial dims.

    Parameters
    ----------
    input : Tensor
        Of shape (N, C, *).
    running_mean, running_var : Tensor, optional
        Running statistics: used when ``use_input_stats`` is False, else updated in place
        with the batch's average instance statistics (unbiased variance), as in PyTorch.
    weight, bias : Tensor, optional
        Per-channel affine parameters.
    use_input_stats : bool
        Normalise with each instance's own statistics.
    momentum : float
        For the running statistics.
    eps : float
        Added to the variance for stability.

    Examples
    --------
    >>> import lucid, lucid.nn.functional as F
    >>> F.instance_norm(lucid.tensor([[[1.0, 3.0]]]), eps=0.0).tolist()
    [[[-1.0, 1.0]]]
    """
    _refuse_complex("instance_norm", input)
    if not use_input_stats:
        return batch_norm(input, running_mean, running_var, weight, bias, False, momentum, eps)
    if _half_input(input):  # See NOTE [Half composites]; the running statistics are updated in place
        return _norm_in_float32(lambda x, w, b: instance_norm(x, running_mean, running_var, w, b, True, momentum,
                                                              eps), input, weight, bias)
    axes = tuple(range(2, input.ndim))
    count = math.prod(input.shape[2:])
    if count <= 1:  # one element has no spread: PyTorch refuses rather than return zeros
        raise ValueError(f"instance_norm: expected more than 1 spatial element when training, got input "
                         f"size {tuple(input.shape)}")
    if running_mean is None and running_var is None:
        out = _standardize(input, axes, eps)
    else:  # PyTorch's: the running statistics move towards the instances' average statistics
        lucid = _lucid()
        mean = lucid.mean(input, axes, keepdim=True)
        xc = input - mean
        var = lucid.mean(xc * xc, axes, keepdim=True)
        _update_running(running_mean, running_var, mean.mean(0), var.mean(0), count, momentum)
        out = xc / lucid.sqrt(var + eps)
    cshape = _channel_shape(input)
    if weight is not None:
        out = out * weight.reshape(cshape)
    if bias is not None:
        out = out + bias.reshape(cshape)
    return out


def normalize(input, p=2.0, dim=1, eps=1e-12, out=None):
    """``x / max(||x||_p, eps)`` along ``dim``.

    Parameters
    ----------
    input : Tensor
        Any shape.
    p : float
        The norm's order.
    dim : int
        The dimension to normalise along.
    eps : float
        Lower bound of the norm (avoids division by zero).
    out : Tensor, optional
        Written with the result and returned (no autograd, as PyTorch's ``out=``).

    Examples
    --------
    >>> import lucid, lucid.nn.functional as F
    >>> F.normalize(lucid.tensor([[3.0, 4.0]]))
    tensor([[0.6, 0.8]])
    """
    lucid = _lucid()
    if _is_half(input):  # PyTorch's composite: a float16 norm (accumulated in float32), then float16 ops
        norm = _in_float32(_vector_norm, input, p, dim)
    else:
        norm = _vector_norm(input, p, dim)
    if out is not None:  # PyTorch's ``div(..., out=out)``: its resize rules and its refusal under autograd
        return lucid.div(input, lucid.clamp(norm, min=eps), out=out)
    return input / lucid.clamp(norm, min=eps)


def _channel_mix(x, m):
    """``sum_c' m[c, c'] x[:, c', ...]``: a constant (C, C) matrix applied over dim 1."""
    from ._device import const_like

    # ``m`` is made from shapes alone: one explicit copy to x's device
    return (x.movedim(1, -1) @ const_like(m.T.astype(x.dtype), x)).movedim(-1, 1)


def _lrn_matrix(c, size):
    """Window of ``local_response_norm``: channels ``c - size//2 .. c + (size-1)//2``, / size
    (PyTorch's zero-padded average pool over channels)."""
    i = np.arange(c)
    d = i[None, :] - i[:, None]
    return ((d >= -(size // 2)) & (d <= (size - 1) // 2)) / float(size)


def local_response_norm(input, size, alpha=1e-4, beta=0.75, k=1.0):
    """``x / (k + alpha * mean of x**2 over a window of `size` channels) ** beta``.

    Parameters
    ----------
    input : Tensor
        Of shape (N, C, *), at least 3 dims.
    size : int
        Channels in the window.
    alpha, beta, k : float
        The constants of the formula.

    Examples
    --------
    >>> import lucid, lucid.nn.functional as F
    >>> F.local_response_norm(lucid.ones(1, 3, 2), 1, alpha=1.0, beta=1.0).tolist()
    [[[0.5, 0.5], [0.5, 0.5], [0.5, 0.5]]]
    """
    _refuse_complex("local_response_norm", input)
    if input.ndim < 3:
        raise ValueError(f"local_response_norm: expected 3D or higher dimensionality input (got {input.ndim} "
                         "dimensions)")
    if input.numel() == 0:  # PyTorch returns an empty input itself, before any dtype change
        return input
    if input.dtype.kind in "biu":  # PyTorch computes an integer input in the default float dtype
        input = input.to(dtypes.get_default_dtype())
    if _is_half(input):  # See NOTE [Half composites]
        return _in_float32(local_response_norm, input, size, alpha, beta, k)
    div = _channel_mix(input * input, _lrn_matrix(input.shape[1], size))
    return input / (div * alpha + k) ** beta
