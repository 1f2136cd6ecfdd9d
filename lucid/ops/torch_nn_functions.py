"""The ``nn.functional`` spellings PyTorch exposes at top level, with its top-level signatures.

They differ from ``torch.nn.functional``'s: ``embedding(weight, indices, padding_idx=-1,
...)`` takes the weight first, ``batch_norm``/``instance_norm`` take every argument
positionally in ATen's order, dropouts take ``(input, p, train)``, and losses take
``reduction`` as an int (0 none, 1 mean, 2 sum). As in the installed PyTorch, those losses
default to 0: its Python binding cannot parse the schema's ``at::Reduction::Mean`` and falls
back to 0. Each wrapper imports ``lucid.nn.functional`` inside the call, so ``import lucid``
does not load nn; the work, and every gradient rule, is F's.
"""
from __future__ import annotations

from .._core.tensor import Tensor
from ._family import _as_tensor
from .numpy_aliases import numpy_keepdims

_REDUCTIONS = {0: "none", 1: "mean", 2: "sum"}


def _F():
    import lucid.nn.functional as F

    return F


def _reduction(reduction, op):
    if isinstance(reduction, bool) or not isinstance(reduction, int):
        raise TypeError(f"{op}: reduction must be an int (0 none, 1 mean, 2 sum), got {reduction!r}")
    if reduction not in _REDUCTIONS:
        raise ValueError(f"{op}: reduction must be 0 (none), 1 (mean) or 2 (sum), got {reduction}")
    return _REDUCTIONS[reduction]


def _stride(stride):
    """ATen's pooling default ``stride=[]`` means the kernel size (F's ``None``)."""
    return None if stride is None or (not isinstance(stride, int) and len(stride) == 0) else stride


# ------------------------------------------------------------------ activations


def celu(input, alpha=1.0):
    """``max(0, x) + min(0, alpha * (exp(x / alpha) - 1))`` (:func:`lucid.nn.functional.celu`).

    Examples
    --------
    >>> import lucid
    >>> lucid.celu(lucid.tensor([1.0, 0.0]))
    tensor([1., 0.])
    """
    return _F().celu(input, alpha)


def selu(input):
    """The scaled ELU (:func:`lucid.nn.functional.selu`).

    Examples
    --------
    >>> import lucid
    >>> lucid.selu(lucid.tensor([0.0]))
    tensor([0.])
    """
    return _F().selu(input)


def rrelu(input, lower=1.0 / 8, upper=1.0 / 3, training=False, generator=None):
    """Randomized leaky ReLU: negative inputs scaled by a slope drawn from ``U(lower, upper)``
    per element in training (from ``generator`` if given), by ``(lower + upper) / 2`` otherwise.

    Examples
    --------
    >>> import lucid
    >>> lucid.rrelu(lucid.tensor([-8.0, 1.0]), 0.25, 0.25)
    tensor([-2.,  1.])
    """
    if generator is None or not training:
        return _F().rrelu(input, lower, upper, training)
    import lucid

    if lower > upper:
        raise ValueError(f"rrelu: lower bound {lower} must be <= upper bound {upper}")
    x = _as_tensor(input)
    slope = lucid.rand(tuple(x.shape), dtype=x.dtype, device=x.device, generator=generator) * (upper - lower) + lower
    return lucid.where(x >= 0, x, x * slope)


def hardshrink(input, lambd=0.5):
    """``x`` where ``|x| > lambd``, else 0 (:func:`lucid.nn.functional.hardshrink`).

    Examples
    --------
    >>> import lucid
    >>> lucid.hardshrink(lucid.tensor([-1.0, 0.3, 2.0]))
    tensor([-1.,  0.,  2.])
    """
    return _F().hardshrink(input, lambd)


def threshold(input, threshold, value):
    """``x`` where ``x > threshold``, else ``value`` (:func:`lucid.nn.functional.threshold`).

    Examples
    --------
    >>> import lucid
    >>> lucid.threshold(lucid.tensor([-1.0, 0.5, 2.0]), 0.5, 9.0)
    tensor([9., 9., 2.])
    """
    return _F().threshold(input, threshold, value)


def conv_tbc(input, weight, bias, pad=0):
    """1-D convolution in (time, batch, channel) layout: weight (K, C_in, C_out), bias (C_out,).

    Examples
    --------
    >>> import lucid
    >>> x = lucid.arange(4.0).reshape(4, 1, 1)  # 4 steps, 1 batch, 1 channel
    >>> lucid.conv_tbc(x, lucid.ones(2, 1, 1), lucid.zeros(1)).flatten().tolist()
    [1.0, 3.0, 5.0]
    """
    return _F().conv_tbc(input, weight, bias, pad)


def prelu(input, weight):
    """``x`` for ``x >= 0`` else ``weight * x``, one weight or one per channel (dim 1).

    Examples
    --------
    >>> import lucid
    >>> lucid.prelu(lucid.tensor([[-1.0, 2.0]]), lucid.tensor([0.5]))
    tensor([[-0.5,  2. ]])
    """
    return _F().prelu(input, weight)


# ------------------------------------------------------------------ dropout


def dropout(input, p, train):
    """Zero elements with probability ``p`` and scale the rest by ``1 / (1 - p)`` when
    ``train`` (:func:`lucid.nn.functional.dropout`).

    Examples
    --------
    >>> import lucid
    >>> lucid.dropout(lucid.ones(3), 0.5, False)
    tensor([1., 1., 1.])
    """
    _check_p(p, "dropout")
    return _F().dropout(input, p, bool(train))


def _check_p(p, op):
    if not 0.0 <= p <= 1.0:
        raise RuntimeError(f"{op}: dropout probability has to be between 0 and 1, but got {p}")


def alpha_dropout(input, p, train):
    """Alpha dropout for SELU networks (:func:`lucid.nn.functional.alpha_dropout`).

    Examples
    --------
    >>> import lucid
    >>> lucid.alpha_dropout(lucid.ones(2), 0.5, False)
    tensor([1., 1.])
    """
    _check_p(p, "alpha_dropout")
    return _F().alpha_dropout(input, p, bool(train))


def feature_dropout(input, p, train):
    """Dropout of whole channels: each ``input[n, c]`` slice is zeroed with probability ``p``
    (the rest scaled by ``1 / (1 - p)``) when ``train``; at least 2 dims (N, C, ...).

    Examples
    --------
    >>> import lucid
    >>> lucid.feature_dropout(lucid.ones(1, 2, 2), 0.5, False).shape
    (1, 2, 2)
    """
    _check_p(p, "feature_dropout")
    x = _as_tensor(input)
    if not train or p == 0 or x.numel() == 0:
        return x
    if x.ndim < 2:
        raise RuntimeError(f"feature_dropout: requires at least 2 dimensions in the input, got shape {tuple(x.shape)}")
    from .random import dropout_mask

    shape = tuple(x.shape[:2]) + (1,) * (x.ndim - 2)
    return x * dropout_mask(shape, p, x.dtype, device=x.device)


def feature_alpha_dropout(input, p, train):
    """Alpha dropout of whole channels (:func:`lucid.nn.functional.feature_alpha_dropout`).

    Examples
    --------
    >>> import lucid
    >>> lucid.feature_alpha_dropout(lucid.ones(1, 2, 2), 0.5, False).shape
    (1, 2, 2)
    """
    _check_p(p, "feature_alpha_dropout")
    x = _as_tensor(input)
    if train and p and x.numel() and x.ndim < 2:
        raise RuntimeError(f"feature_alpha_dropout: requires at least 2 dimensions in the input, got shape "
                           f"{tuple(x.shape)}")
    return _F().feature_alpha_dropout(x, p, bool(train))


# ------------------------------------------------------------------ normalization


def batch_norm(input, weight, bias, running_mean, running_var, training, momentum, eps, cudnn_enabled):
    """Batch normalization in ATen's argument order (:func:`lucid.nn.functional.batch_norm`;
    ``cudnn_enabled`` is accepted and ignored).

    Examples
    --------
    >>> import lucid
    >>> lucid.batch_norm(lucid.tensor([[1.0], [3.0]]), None, None, None, None, True, 0.1, 0.0, False)
    tensor([[-1.],
            [ 1.]])
    """
    return _F().batch_norm(input, running_mean, running_var, weight, bias, bool(training), momentum, eps)


def instance_norm(input, weight, bias, running_mean, running_var, use_input_stats, momentum, eps, cudnn_enabled):
    """Instance normalization in ATen's argument order (:func:`lucid.nn.functional.instance_norm`).

    Examples
    --------
    >>> import lucid
    >>> lucid.instance_norm(lucid.tensor([[[1.0, 3.0]]]), None, None, None, None, True, 0.1, 0.0, False)
    tensor([[[-1.,  1.]]])
    """
    return _F().instance_norm(input, running_mean, running_var, weight, bias, bool(use_input_stats), momentum, eps)


def layer_norm(input, normalized_shape, weight=None, bias=None, eps=1e-5, cudnn_enable=True):
    """Layer normalization over the trailing ``normalized_shape`` (:func:`lucid.nn.functional.layer_norm`).

    Examples
    --------
    >>> import lucid
    >>> lucid.layer_norm(lucid.tensor([[1.0, 3.0]]), [2], eps=0.0)
    tensor([[-1.,  1.]])
    """
    return _F().layer_norm(input, normalized_shape, weight, bias, eps)


def group_norm(input, num_groups, weight=None, bias=None, eps=1e-5, cudnn_enabled=True):
    """Group normalization (:func:`lucid.nn.functional.group_norm`).

    Examples
    --------
    >>> import lucid
    >>> lucid.group_norm(lucid.tensor([[[1.0], [3.0]]]), 1, eps=0.0)
    tensor([[[-1.],
             [ 1.]]])
    """
    return _F().group_norm(input, num_groups, weight, bias, eps)


def rms_norm(input, normalized_shape, weight=None, eps=None):
    """RMS normalization over the trailing ``normalized_shape`` (:func:`lucid.nn.functional.rms_norm`).

    Examples
    --------
    >>> import lucid
    >>> lucid.rms_norm(lucid.tensor([[1.0, 7.0]]), [2], eps=0.0)
    tensor([[0.2, 1.4]])
    """
    return _F().rms_norm(input, normalized_shape, weight, eps)


# ------------------------------------------------------------------ pooling and layout


def avg_pool1d(input, kernel_size, stride=(), padding=0, ceil_mode=False, count_include_pad=True):
    """1-d average pooling; an empty ``stride`` means the kernel size (:func:`lucid.nn.functional.avg_pool1d`).

    Examples
    --------
    >>> import lucid
    >>> lucid.avg_pool1d(lucid.tensor([[[1.0, 3.0, 2.0, 6.0]]]), 2)
    tensor([[[2., 4.]]])
    """
    return _F().avg_pool1d(input, kernel_size, _stride(stride), padding, ceil_mode, count_include_pad)


def adaptive_avg_pool1d(input, output_size):
    """1-d adaptive average pooling (:func:`lucid.nn.functional.adaptive_avg_pool1d`).

    Examples
    --------
    >>> import lucid
    >>> lucid.adaptive_avg_pool1d(lucid.tensor([[[1.0, 3.0, 2.0, 6.0]]]), 1)
    tensor([[[3.]]])
    """
    return _F().adaptive_avg_pool1d(input, output_size)


def adaptive_max_pool1d(input, output_size):
    """``(output, indices)`` of 1-d adaptive max pooling (PyTorch's top-level form always
    returns the indices).

    Examples
    --------
    >>> import lucid
    >>> lucid.adaptive_max_pool1d(lucid.tensor([[[1.0, 3.0, 2.0, 6.0]]]), 2)
    (tensor([[[3., 6.]]]), tensor([[[1, 3]]]))
    """
    return tuple(_F().adaptive_max_pool1d(input, output_size, return_indices=True))


def max_pool1d(input, kernel_size, stride=(), padding=0, dilation=1, ceil_mode=False):
    """1-d max pooling (:func:`lucid.nn.functional.max_pool1d`); an empty ``stride`` means the kernel size.

    Examples
    --------
    >>> import lucid
    >>> lucid.max_pool1d(lucid.tensor([[[1.0, 3.0, 2.0, 5.0]]]), 2, 1)
    tensor([[[3., 3., 5.]]])
    """
    return _F().max_pool1d(input, kernel_size, _stride(stride), padding, dilation, ceil_mode)


def max_pool1d_with_indices(input, kernel_size, stride=(), padding=0, dilation=1, ceil_mode=False):
    """``(output, indices)`` of 1-d max pooling.

    Examples
    --------
    >>> import lucid
    >>> lucid.max_pool1d_with_indices(lucid.tensor([[[1.0, 3.0, 2.0, 5.0]]]), 2)
    (tensor([[[3., 5.]]]), tensor([[[1, 3]]]))
    """
    return tuple(_F().max_pool1d(input, kernel_size, _stride(stride), padding, dilation, ceil_mode,
                                 return_indices=True))


def max_pool2d(input, kernel_size, stride=(), padding=0, dilation=1, ceil_mode=False):
    """2-d max pooling (:func:`lucid.nn.functional.max_pool2d`); an empty ``stride`` means the kernel size.

    Examples
    --------
    >>> import lucid
    >>> lucid.max_pool2d(lucid.arange(16.0).reshape(1, 1, 4, 4), 2)
    tensor([[[[ 5.,  7.],
              [13., 15.]]]])
    """
    return _F().max_pool2d(input, kernel_size, _stride(stride), padding, dilation, ceil_mode)


def max_pool3d(input, kernel_size, stride=(), padding=0, dilation=1, ceil_mode=False):
    """3-d max pooling (:func:`lucid.nn.functional.max_pool3d`); an empty ``stride`` means the kernel size.

    Examples
    --------
    >>> import lucid
    >>> lucid.max_pool3d(lucid.arange(8.0).reshape(1, 1, 2, 2, 2), 2)
    tensor([[[[[7.]]]]])
    """
    return _F().max_pool3d(input, kernel_size, _stride(stride), padding, dilation, ceil_mode)


def pixel_shuffle(input, upscale_factor):
    """``(*, C r^2, H, W) -> (*, C, H r, W r)`` (:func:`lucid.nn.functional.pixel_shuffle`).

    Examples
    --------
    >>> import lucid
    >>> lucid.pixel_shuffle(lucid.arange(4.0).reshape(1, 4, 1, 1), 2)
    tensor([[[[0., 1.],
              [2., 3.]]]])
    """
    return _F().pixel_shuffle(input, upscale_factor)


def pixel_unshuffle(input, downscale_factor):
    """``(*, C, H r, W r) -> (*, C r^2, H, W)``, the inverse of :func:`pixel_shuffle`.

    Examples
    --------
    >>> import lucid
    >>> lucid.pixel_unshuffle(lucid.arange(4.0).reshape(1, 1, 2, 2), 2).flatten()
    tensor([0., 1., 2., 3.])
    """
    return _F().pixel_unshuffle(input, downscale_factor)


def channel_shuffle(input, groups):
    """Interleave the channels (dim 1) of ``groups`` groups (:func:`lucid.nn.functional.channel_shuffle`).

    Examples
    --------
    >>> import lucid
    >>> lucid.channel_shuffle(lucid.arange(4.0).reshape(1, 4, 1), 2).flatten()
    tensor([0., 2., 1., 3.])
    """
    return _F().channel_shuffle(input, groups)


# ------------------------------------------------------------------ linear and embeddings


def bilinear(input1, input2, weight, bias=None):
    """``x1^T W x2 + b`` per output feature (:func:`lucid.nn.functional.bilinear`).

    Examples
    --------
    >>> import lucid
    >>> lucid.bilinear(lucid.ones(1, 2), lucid.ones(1, 3), lucid.ones(4, 2, 3))
    tensor([[6., 6., 6., 6.]])
    """
    return _F().bilinear(input1, input2, weight, bias)


def pairwise_distance(x1, x2, p=2.0, eps=1e-06, keepdim=False, *, keepdims=None):
    """``||x1 - x2 + eps||_p`` over the last dim (:func:`lucid.nn.functional.pairwise_distance`).

    Examples
    --------
    >>> import lucid
    >>> lucid.pairwise_distance(lucid.tensor([[3.0, 4.0]]), lucid.zeros(1, 2), eps=0.0)
    tensor([5.])
    """
    if keepdims is not None:  # See NOTE [NumPy keyword aliases]
        keepdim = numpy_keepdims("pairwise_distance", keepdim, keepdims)
    return _F().pairwise_distance(x1, x2, p, eps, keepdim)


def embedding(weight, indices, padding_idx=-1, scale_grad_by_freq=False, sparse=False):
    """Rows of ``weight`` at ``indices`` (weight first: the top-level order). A negative
    ``padding_idx`` means none; that row gets no gradient.

    Examples
    --------
    >>> import lucid
    >>> lucid.embedding(lucid.arange(6.0).reshape(3, 2), lucid.tensor([2, 0]))
    tensor([[4., 5.],
            [0., 1.]])
    """
    pad = None if padding_idx is None or padding_idx < 0 else int(padding_idx)
    return _F().embedding(indices, weight, padding_idx=pad, scale_grad_by_freq=scale_grad_by_freq, sparse=sparse)


_BAG_MODES = {0: "sum", 1: "mean", 2: "max"}


def embedding_bag(weight, indices, offsets, scale_grad_by_freq=False, mode=0, sparse=False,
                  per_sample_weights=None, include_last_offset=False, padding_idx=None):
    """``(output, offset2bag, bag_size, max_indices)``: sums (``mode`` 0), means (1) or
    maxima (2) of bags of ``weight``'s rows, bag ``b`` holding ``indices[offsets[b]:
    offsets[b + 1]]`` (:func:`lucid.nn.functional.embedding_bag`). ``offset2bag`` is each
    index's bag, ``bag_size`` the non-padding indices per bag, and ``max_indices`` the row
    each maximum came from (mode 2; else ``bag_size``). PyTorch's CPU kernel leaves the
    last three empty or zero for mode 0 (they serve its backward only); here they are the
    same in every mode.

    Examples
    --------
    >>> import lucid
    >>> w = lucid.arange(6.0).reshape(3, 2)
    >>> out, bags, sizes, _ = lucid.embedding_bag(w, lucid.tensor([0, 2, 1]), lucid.tensor([0, 2]))
    >>> out
    tensor([[4., 6.],
            [2., 3.]])
    >>> bags, sizes
    (tensor([0, 0, 1]), tensor([2, 1]))
    """
    import lucid

    if mode not in _BAG_MODES:
        raise ValueError(f"embedding_bag: mode must be 0 (sum), 1 (mean) or 2 (max), got {mode!r}")
    idx, off = _as_tensor(indices), offsets
    if not isinstance(off, Tensor) or off.ndim != 1 or idx.ndim != 1:
        raise ValueError("embedding_bag: expected 1-d indices and a 1-d offsets tensor (the top-level form takes "
                         "no 2-d indices)")
    w = _as_tensor(weight)
    out = _F().embedding_bag(idx, w, off, scale_grad_by_freq=scale_grad_by_freq, mode=_BAG_MODES[mode],
                             sparse=sparse, per_sample_weights=per_sample_weights,
                             include_last_offset=include_last_offset, padding_idx=padding_idx)
    starts = off[:-1] if include_last_offset else off
    nbags, n = starts.shape[0], idx.shape[0]
    pos = lucid.arange(n, device=idx.device)
    bag = lucid.searchsorted(starts.to(lucid.int64), pos, right=True) - 1
    pad = None if padding_idx is None else padding_idx % w.shape[0]
    keep = lucid.ones(n, dtype=lucid.int64, device=idx.device) if pad is None else (idx != pad).to(lucid.int64)
    size = lucid.zeros(nbags, dtype=lucid.int64, device=idx.device).scatter_add(0, bag.clamp(min=0), keep)
    if mode != 2 or n == 0 or nbags == 0:
        return out, bag, size, size.clone()
    member = (bag.unsqueeze(0) == lucid.arange(nbags, device=idx.device).unsqueeze(1)) & (keep > 0).unsqueeze(0)
    rows = w.detach()[idx]  # (n, D)
    vals = lucid.where(member.unsqueeze(-1), rows.unsqueeze(0), -float("inf"))
    first = vals.argmax(1)  # the first maximum of each bag, as PyTorch's kernel keeps
    return out, bag, size, lucid.where(size.unsqueeze(-1) > 0, idx[first], 0)


# ------------------------------------------------------------------ losses (reduction as an int)


def binary_cross_entropy_with_logits(input, target, weight=None, pos_weight=None, reduction=0):
    """BCE of ``sigmoid(input)`` against ``target`` (:func:`lucid.nn.functional.
    binary_cross_entropy_with_logits`); ``reduction`` 0 none (the default here, as in
    PyTorch's binding), 1 mean, 2 sum.

    Examples
    --------
    >>> import lucid
    >>> lucid.binary_cross_entropy_with_logits(lucid.tensor([0.0]), lucid.tensor([1.0]), reduction=2)
    tensor(0.6931472)
    """
    r = _reduction(reduction, "binary_cross_entropy_with_logits")
    return _F().binary_cross_entropy_with_logits(input, target, weight, reduction=r, pos_weight=pos_weight)


def kl_div(input, target, reduction=0, *, log_target=False):
    """``target * (log target - input)`` (:func:`lucid.nn.functional.kl_div`); ``reduction``
    0 none (default), 1 mean over all elements, 2 sum.

    Examples
    --------
    >>> import lucid
    >>> lucid.kl_div(lucid.tensor([0.0]), lucid.tensor([1.0]))
    tensor([0.])
    """
    r = _reduction(reduction, "kl_div")
    # 1 is the mean over all elements, without the warning F gives for 'mean' (PyTorch's top level gives none)
    out = _F().kl_div(input, target, reduction="none" if r == "mean" else r, log_target=log_target)
    return out.mean() if r == "mean" else out


def poisson_nll_loss(input, target, log_input, full, eps, reduction):
    """Poisson negative log-likelihood (:func:`lucid.nn.functional.poisson_nll_loss`), every
    argument required as in ATen; ``reduction`` 0 none, 1 mean, 2 sum.

    Examples
    --------
    >>> import lucid
    >>> lucid.poisson_nll_loss(lucid.tensor([0.0]), lucid.tensor([2.0]), True, False, 1e-8, 0)
    tensor([1.])
    """
    r = _reduction(reduction, "poisson_nll_loss")
    return _F().poisson_nll_loss(input, target, log_input=log_input, full=full, eps=eps, reduction=r)


def hinge_embedding_loss(input, target, margin=1.0, reduction=0):
    """``x`` where ``target == 1``, ``max(0, margin - x)`` where ``-1``; ``reduction`` 0 none (default).

    Examples
    --------
    >>> import lucid
    >>> lucid.hinge_embedding_loss(lucid.tensor([1.0, 2.0]), lucid.tensor([1.0, -1.0]))
    tensor([1., 0.])
    """
    r = _reduction(reduction, "hinge_embedding_loss")
    return _F().hinge_embedding_loss(input, target, margin=margin, reduction=r)


def margin_ranking_loss(input1, input2, target, margin=0.0, reduction=0):
    """``max(0, -target * (x1 - x2) + margin)``; ``reduction`` 0 none (default), 1 mean, 2 sum.

    Examples
    --------
    >>> import lucid
    >>> lucid.margin_ranking_loss(lucid.tensor([1.0, 2.0]), lucid.tensor([2.0, 1.0]), lucid.tensor([1.0, 1.0]))
    tensor([1., 0.])
    """
    r = _reduction(reduction, "margin_ranking_loss")
    return _F().margin_ranking_loss(input1, input2, target, margin=margin, reduction=r)


def cosine_embedding_loss(input1, input2, target, margin=0.0, reduction=0):
    """``1 - cos(x1, x2)`` where ``target == 1``, ``max(0, cos - margin)`` where ``-1``;
    ``reduction`` 0 none (default), 1 mean, 2 sum.

    Examples
    --------
    >>> import lucid
    >>> lucid.cosine_embedding_loss(lucid.ones(2, 3), lucid.ones(2, 3), lucid.tensor([1.0, -1.0]))
    tensor([0., 1.])
    """
    r = _reduction(reduction, "cosine_embedding_loss")
    return _F().cosine_embedding_loss(input1, input2, target, margin=margin, reduction=r)


def triplet_margin_loss(anchor, positive, negative, margin=1.0, p=2.0, eps=1e-6, swap=False, reduction=0):
    """``max(d(a, p) - d(a, n) + margin, 0)`` with the ``p``-norm distance; ``reduction``
    0 none (default), 1 mean, 2 sum.

    Examples
    --------
    >>> import lucid
    >>> a = lucid.tensor([[0.0, 0.0]])
    >>> lucid.triplet_margin_loss(a, lucid.tensor([[3.0, 4.0]]), a, eps=0.0)
    tensor([6.])
    """
    r = _reduction(reduction, "triplet_margin_loss")
    return _F().triplet_margin_loss(anchor, positive, negative, margin=margin, p=p, eps=eps, swap=swap, reduction=r)


def ctc_loss(log_probs, targets, input_lengths, target_lengths, blank=0, reduction=0, zero_infinity=False):
    """Connectionist temporal classification loss (:func:`lucid.nn.functional.ctc_loss`);
    ``reduction`` 0 none (default: per sequence), 1 mean (of losses divided by target
    lengths), 2 sum.

    Examples
    --------
    >>> import lucid
    >>> lp = lucid.zeros(1, 1, 2).log_softmax(-1)
    >>> lucid.ctc_loss(lp, lucid.tensor([[1]]), [1], [1])
    tensor([0.6931472])
    """
    r = _reduction(reduction, "ctc_loss")
    return _F().ctc_loss(log_probs, targets, input_lengths, target_lengths, blank=blank, reduction=r,
                         zero_infinity=zero_infinity)


__all__ = ["adaptive_avg_pool1d", "adaptive_max_pool1d", "alpha_dropout", "avg_pool1d", "batch_norm", "bilinear",
           "binary_cross_entropy_with_logits", "celu", "channel_shuffle", "conv_tbc", "cosine_embedding_loss", "ctc_loss",
           "dropout", "embedding", "embedding_bag", "feature_alpha_dropout", "feature_dropout", "group_norm",
           "hardshrink", "hinge_embedding_loss", "instance_norm", "kl_div", "layer_norm", "margin_ranking_loss",
           "max_pool1d", "max_pool1d_with_indices", "max_pool2d", "max_pool3d", "pairwise_distance",
           "pixel_shuffle", "pixel_unshuffle", "poisson_nll_loss", "prelu", "rms_norm", "rrelu", "selu",
           "threshold", "triplet_margin_loss"]
