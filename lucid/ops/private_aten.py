"""PyTorch's private ``torch._*`` functions that real code calls (custom Functions written against
ATen's backward helpers, decompositions, layers ported from PyTorch), by their ATen schemas.

NOTE [Private ATen functions]
Each function here is a composition of existing Lucid ops, so it inherits their vjp, jvp and
batching rules: gradients, ``jvp`` and ``vmap`` work with no rule of its own. The signatures,
defaults and returned tuples follow ``torch.ops.aten.<name>``'s schema; where a schema has several
overloads (``_native_batch_norm_legit`` with and without running statistics, ``_aminmax`` with and
without ``dim``) one function takes them all. Outputs PyTorch marks non-differentiable (saved
statistics, masks, ``logsumexp``) are detached. This module holds the softmax family, the norms,
dropout, the fused element-wise ops and the nn kernels; views, indexing, reductions, linear algebra
and casts are in ``private_aten_more.py``; random draws, dual tensors, copies and the
``torch._check*`` family in ``private_aten_runtime.py``.
"""
from __future__ import annotations

import math

from ._family import _as_tensor
from .private_aten_more import *  # noqa: F401,F403
from .private_aten_more import __all__ as _more_all
from .private_aten_runtime import *  # noqa: F401,F403
from .private_aten_runtime import __all__ as _runtime_all

__all__ = ["_softmax", "_log_softmax", "_softmax_backward_data", "_log_softmax_backward_data", "_safe_softmax",
           "_masked_softmax", "_native_batch_norm_legit", "_native_batch_norm_legit_no_training",
           "_batch_norm_impl_index", "native_dropout_backward", "_masked_scale", "_fused_dropout", "_add_relu",
           "_add_relu_", "_addmm_activation", "_prelu_kernel", "_euclidean_dist", "_trilinear", "_weight_norm",
           "_weight_norm_interface", "_fused_rms_norm", "_convolution", "_convolution_mode",
           "_adaptive_avg_pool2d", "_adaptive_avg_pool3d", "_embedding_bag", "_embedding_bag_forward_only",
           "_scaled_dot_product_attention_math",
           "_scaled_dot_product_flash_attention_for_cpu", "_pack_padded_sequence", "_pad_packed_sequence"]
__all__ += _more_all + _runtime_all


def _L():
    import lucid

    return lucid


def _F():
    import lucid.nn.functional as F

    return F


# ------------------------------------------------------------------ softmax family


def _half_to_float(op, x, half_to_float):
    if not half_to_float:
        return None
    if x.dtype != _L().float16:
        raise RuntimeError(f"{op}: conversion is supported for Half type only, got an input of dtype {x.dtype}")
    return _L().float32


def _softmax(input, dim, half_to_float):
    """``softmax(input, dim)``, as ``torch._softmax``; ``half_to_float=True`` takes a float16 input
    and returns float32 (PyTorch's CUDA kernel; its CPU kernel refuses the flag).

    Examples
    --------
    >>> import lucid
    >>> lucid._softmax(lucid.tensor([0.0, 0.0]), 0, False)
    tensor([0.5, 0.5])
    """
    x = _as_tensor(input)
    return _L().softmax(x, dim, dtype=_half_to_float("_softmax", x, half_to_float))


def _log_softmax(input, dim, half_to_float):
    """``log_softmax(input, dim)``, as ``torch._log_softmax`` (``half_to_float`` as in :func:`_softmax`).

    Examples
    --------
    >>> import lucid
    >>> lucid._log_softmax(lucid.tensor([0.0, 0.0]), 0, False).exp()
    tensor([0.5, 0.5])
    """
    x = _as_tensor(input)
    return _L().log_softmax(x, dim, dtype=_half_to_float("_log_softmax", x, half_to_float))


def _backward_args(op, grad_output, output):
    g, y = _as_tensor(grad_output), _as_tensor(output)
    if tuple(g.shape) != tuple(y.shape):
        raise RuntimeError(f"{op}: grad_output of shape {tuple(g.shape)} does not match output of shape "
                           f"{tuple(y.shape)}")
    return g, y


def _softmax_backward_data(grad_output, output, dim, input_dtype):
    """The input gradient of ``y = softmax(x, dim)`` from ``y`` itself: ``y * (g - sum(g * y, dim))``,
    in ``input_dtype``, as ``torch._softmax_backward_data`` (what custom Functions call in
    ``backward``). Differentiable again, in both ``grad_output`` and ``output``.

    Examples
    --------
    >>> import lucid
    >>> y = lucid.tensor([0.5, 0.5])
    >>> lucid._softmax_backward_data(lucid.tensor([1.0, 0.0]), y, 0, lucid.float32)
    tensor([ 0.25, -0.25])
    """
    g, y = _backward_args("_softmax_backward_data", grad_output, output)
    return (y * (g - (g * y).sum(dim, keepdim=True))).to(input_dtype)


def _log_softmax_backward_data(grad_output, output, dim, input_dtype):
    """The input gradient of ``y = log_softmax(x, dim)`` from ``y``: ``g - exp(y) * sum(g, dim)``, in
    ``input_dtype``, as ``torch._log_softmax_backward_data``.

    Examples
    --------
    >>> import lucid
    >>> y = lucid.tensor([0.5, 0.5]).log()
    >>> lucid._log_softmax_backward_data(lucid.tensor([1.0, 0.0]), y, 0, lucid.float32)
    tensor([ 0.5, -0.5])
    """
    g, y = _backward_args("_log_softmax_backward_data", grad_output, output)
    return (g - _L().exp(y) * g.sum(dim, keepdim=True)).to(input_dtype)


def _safe_softmax(input, dim, dtype=None):
    """``softmax`` that gives 0 (not nan) on a slice along ``dim`` that is all ``-inf`` (a fully
    masked attention row), as ``torch._safe_softmax``; such slices get a zero gradient.

    Examples
    --------
    >>> import lucid
    >>> lucid._safe_softmax(lucid.tensor([[0.0, 0.0], [-float("inf"), -float("inf")]]), 1)
    tensor([[0.5, 0.5],
            [0. , 0. ]])
    """
    x = _as_tensor(input)
    dead = (x == -math.inf).all(dim=dim, keepdim=True)
    out = _L().softmax(x.masked_fill(dead, 0.0), dim, dtype=dtype)  # no nan, so no nan gradient either
    return out.masked_fill(dead, 0.0)


def _masked_softmax(input, mask, dim=None, mask_type=None):
    """``softmax`` along ``dim`` (default: the last) with the elements where ``mask`` is True left out,
    as ``torch._masked_softmax`` (PyTorch's transformer kernel). ``mask_type`` 0: an (L, L) mask of
    the last two dims; 1: a (B, L) key-padding mask of a (B, H, L, L) input; 2: the input's shape;
    None: broadcastable. A slice with every element masked is nan, as PyTorch's CPU kernel gives.

    Examples
    --------
    >>> import lucid
    >>> lucid._masked_softmax(lucid.tensor([1.0, 2.0, 1.0]), lucid.tensor([False, True, False]))
    tensor([0.5, 0. , 0.5])
    """
    L = _L()
    x, m = _as_tensor(input), _as_tensor(mask)
    if m.dtype != L.bool:
        raise RuntimeError(f"_masked_softmax: expected a bool mask, got dtype {m.dtype}")
    xs, ms = tuple(x.shape), tuple(m.shape)
    if mask_type == 0 and ms != xs[-2:]:
        raise RuntimeError(f"_masked_softmax: for mask_type == 0 the mask shape should be (L, L) = {xs[-2:]}, "
                           f"got {ms}")
    if mask_type == 1:
        if x.ndim != 4 or ms != (xs[0], xs[-1]):
            raise RuntimeError(f"_masked_softmax: for mask_type == 1 the mask shape should be (B, L) of a (B, H, L, L) "
                               f"input, got mask {ms} and input {xs}")
        m = m.reshape(ms[0], 1, 1, ms[1])
    if mask_type == 2 and ms != xs:
        raise RuntimeError(f"_masked_softmax: for mask_type == 2 the mask shape should match the input's {xs}, "
                           f"got {ms}")
    if mask_type not in (None, 0, 1, 2):
        raise RuntimeError(f"_masked_softmax: mask_type must be 0, 1, 2 or None, got {mask_type!r}")
    return L.softmax(x.masked_fill(m, -math.inf), x.ndim - 1 if dim is None else dim)


# ------------------------------------------------------------------ batch norm


def _native_batch_norm_legit(input, weight, bias, running_mean=None, running_var=None, training=None,
                             momentum=None, eps=None):
    """Batch norm returning ``(out, save_mean, save_rstd)``, as ``torch._native_batch_norm_legit``
    (what ``torch.export`` and decompositions lower ``batch_norm`` to); see
    :func:`lucid.native_batch_norm`. The ``no_stats`` overload
    ``(input, weight, bias, training, momentum, eps)`` is taken too, positionally or by keyword; it
    must be training (PyTorch crashes without running statistics in evaluation, Lucid raises).

    Examples
    --------
    >>> import lucid
    >>> out, mean, rstd = lucid._native_batch_norm_legit(lucid.tensor([[1.0], [3.0]]), None, None, True, 0.1, 0.0)
    >>> out.flatten(), mean, rstd
    (tensor([-1.,  1.]), tensor([2.]), tensor([1.]))
    """
    if isinstance(running_mean, bool):  # the no_stats overload: (input, weight, bias, training, momentum, eps)
        if eps is not None:
            raise TypeError("_native_batch_norm_legit: the no_stats form takes (input, weight, bias, training, "
                            "momentum, eps)")
        training, momentum, eps, running_mean, running_var = running_mean, running_var, training, None, None
    if training is False and (running_mean is None or running_var is None):
        raise RuntimeError("_native_batch_norm_legit: evaluation mode needs running_mean and running_var")
    if training is None or momentum is None or eps is None:
        raise TypeError("_native_batch_norm_legit: missing training, momentum or eps")
    return tuple(_L().native_batch_norm(input, weight, bias, running_mean, running_var, training, momentum, eps))


def _native_batch_norm_legit_no_training(input, weight, bias, running_mean, running_var, momentum, eps):
    """Batch norm with the running statistics, returning ``(out, empty, empty)``, as
    ``torch._native_batch_norm_legit_no_training``.

    Examples
    --------
    >>> import lucid
    >>> out, _, _ = lucid._native_batch_norm_legit_no_training(
    ...     lucid.tensor([[1.0], [3.0]]), None, None, lucid.tensor([1.0]), lucid.tensor([4.0]), 0.1, 0.0)
    >>> out.flatten()
    tensor([0., 1.])
    """
    return tuple(_L().native_batch_norm(input, weight, bias, running_mean, running_var, False, momentum, eps))


def _batch_norm_impl_index(input, weight, bias, running_mean, running_var, training, momentum, eps, cudnn_enabled):
    """Batch norm returning ``(out, save_mean, save_invstd, reserve, 0)``, as
    ``torch._batch_norm_impl_index`` on the CPU (``reserve`` an empty uint8 tensor, ``0`` the
    native backend's index; ``cudnn_enabled`` is ignored).

    Examples
    --------
    >>> import lucid
    >>> out, mean, invstd, reserve, index = lucid._batch_norm_impl_index(
    ...     lucid.tensor([[1.0], [3.0]]), None, None, None, None, True, 0.1, 0.0, False)
    >>> mean, invstd, reserve.dtype, index
    (tensor([2.]), tensor([1.]), lucid.uint8, 0)
    """
    L = _L()
    out, mean, invstd = L.native_batch_norm(input, weight, bias, running_mean, running_var, training, momentum, eps)
    return out, mean, invstd, L.empty(0, dtype=L.uint8, device=out.device), 0


# ------------------------------------------------------------------ dropout


def native_dropout_backward(grad_output, mask, scale):
    """``grad_output * mask * scale``, the input gradient of :func:`lucid.native_dropout`, as
    ``torch.ops.aten.native_dropout_backward`` (not a ``torch.*`` name in PyTorch).

    Examples
    --------
    >>> import lucid
    >>> lucid.native_dropout_backward(lucid.tensor([1.0, 1.0]), lucid.tensor([True, False]), 2.0)
    tensor([2., 0.])
    """
    g = _as_tensor(grad_output)
    return g * _as_tensor(mask).to(g.dtype) * scale


def _masked_scale(input, mask, scale):
    """``input * mask * scale``, as ``torch._masked_scale`` (a CUDA-only kernel in PyTorch).

    Examples
    --------
    >>> import lucid
    >>> lucid._masked_scale(lucid.tensor([1.0, 3.0]), lucid.tensor([True, False]), 2.0)
    tensor([2., 0.])
    """
    return native_dropout_backward(input, mask, scale)


def _fused_dropout(input, p, generator=None):
    """Dropout where ``p`` is the probability to *keep*, returning ``(out, mask)`` with a uint8
    ``mask``, as ``torch._fused_dropout`` (a CUDA-only kernel in PyTorch).

    Examples
    --------
    >>> import lucid
    >>> out, mask = lucid._fused_dropout(lucid.tensor([1.0, 2.0]), 1.0)
    >>> out, mask
    (tensor([1., 2.]), tensor([1, 1], dtype=lucid.uint8))
    """
    L = _L()
    x = _as_tensor(input)
    if not 0 <= p <= 1:
        raise RuntimeError(f"_fused_dropout: keep probability has to be between 0 and 1, but got {p}")
    keep = L.bernoulli(L.full(tuple(x.shape), float(p), dtype=x.dtype, device=x.device), generator=generator)
    return x * keep * (0.0 if p == 0 else 1.0 / p), keep.to(L.uint8)


# ------------------------------------------------------------------ fused element-wise ops


def _add_relu(input, other, alpha=1):
    """``relu(input + alpha * other)``, as ``torch._add_relu`` (both its Tensor and Scalar forms).

    Examples
    --------
    >>> import lucid
    >>> lucid._add_relu(lucid.tensor([1.0, -2.0]), lucid.tensor([1.0, 1.0]), alpha=2)
    tensor([3., 0.])
    """
    L = _L()
    return L.relu(L.add(_as_tensor(input), other, alpha=alpha))


def _add_relu_(input, other, alpha=1):
    """In-place :func:`_add_relu`, as ``torch._add_relu_``; returns ``input``.

    Examples
    --------
    >>> import lucid
    >>> x = lucid.tensor([1.0, -2.0])
    >>> lucid._add_relu_(x, 1.0) is x, x
    (True, tensor([2., 0.]))
    """
    return input.add_(other, alpha=alpha).relu_()


def _addmm_activation(input, mat1, mat2, *, beta=1, alpha=1, use_gelu=False):
    """``relu(addmm(...))``, or the exact (erf) ``gelu`` with ``use_gelu=True``, as
    ``torch._addmm_activation`` on the CPU.

    Examples
    --------
    >>> import lucid
    >>> lucid._addmm_activation(lucid.tensor([-10.0, 0.0]), lucid.eye(2), lucid.eye(2), beta=2, alpha=3)
    tensor([[0., 0.],
            [0., 3.]])
    """
    y = _L().addmm(input, mat1, mat2, beta=beta, alpha=alpha)
    return _F().gelu(y) if use_gelu else _L().relu(y)


def _prelu_kernel(input, weight):
    """``where(input > 0, input, weight * input)`` with plain broadcasting (``weight`` already shaped
    for ``input``), as ``torch._prelu_kernel``.

    Examples
    --------
    >>> import lucid
    >>> lucid._prelu_kernel(lucid.tensor([[1.0, -2.0]]), lucid.tensor([0.5]))
    tensor([[ 1., -1.]])
    """
    x, w = _as_tensor(input), _as_tensor(weight)
    return _L().where(x > 0, x, w * x)


def _euclidean_dist(x1, x2):
    """Pairwise distances ``sqrt(max(|a|^2 + |b|^2 - 2 a.b, 1e-30))`` of the rows of ``x1`` (..., P, M)
    and ``x2`` (..., R, M), as ``torch._euclidean_dist`` (``cdist``'s matrix-product path).

    Examples
    --------
    >>> import lucid
    >>> lucid._euclidean_dist(lucid.tensor([[0.0, 0.0]]), lucid.tensor([[3.0, 4.0], [0.0, 1.0]]))
    tensor([[5., 1.]])
    """
    a, b = _as_tensor(x1), _as_tensor(x2)
    if a.ndim < 2 or b.ndim < 2 or a.shape[-1] != b.shape[-1]:
        raise RuntimeError(f"_euclidean_dist: expected x1 (..., P, M) and x2 (..., R, M), got shapes "
                           f"{tuple(a.shape)} and {tuple(b.shape)}")
    sq = (a * a).sum(-1, keepdim=True) + (b * b).sum(-1).unsqueeze(-2) - 2 * _L().matmul(a, b.transpose(-1, -2))
    return sq.clamp_min(1e-30).sqrt()


def _trilinear(i1, i2, i3, expand1, expand2, expand3, sumdim, unroll_dim=1):
    """``(i1' * i2' * i3').sum(sumdim)``, each ``ik'`` being ``ik`` with size-1 dims inserted at
    ``expandk``, as ``torch._trilinear`` (``bilinear``'s kernel; ``unroll_dim`` only steers
    PyTorch's loop and is ignored).

    Examples
    --------
    >>> import lucid
    >>> x = lucid.ones(2, 3)
    >>> lucid._trilinear(x, x, x, [], [], [], [1])
    tensor([3., 3.])
    """
    parts = []
    for k, (t, dims) in enumerate(((i1, expand1), (i2, expand2), (i3, expand3)), 1):
        t = _as_tensor(t)
        for d in sorted(dims):
            t = t.unsqueeze(d)
        parts.append(t)
    if len({p.ndim for p in parts}) != 1:
        raise RuntimeError(f"_trilinear: the expanded inputs have different ranks: {[tuple(p.shape) for p in parts]}")
    out = parts[0] * parts[1] * parts[2]
    return out.sum(dim=tuple(sumdim)) if len(sumdim) else out


def _weight_norm(v, g, dim=0):
    """``v * (g / norm_except_dim(v, 2, dim))``, weight normalisation's weight, as
    ``torch._weight_norm`` (``dim=-1``: the norm of the whole ``v``).

    Examples
    --------
    >>> import lucid
    >>> lucid._weight_norm(lucid.tensor([[3.0, 4.0]]), lucid.tensor([[10.0]]))
    tensor([[6., 8.]])
    """
    v = _as_tensor(v)
    return v * (g / _L().norm_except_dim(v, 2, dim))


def _weight_norm_interface(v, g, dim=0):
    """``(w, norms)``: :func:`_weight_norm`'s weight and ``norm_except_dim(v, 2, dim)``, as
    ``torch._weight_norm_interface``.

    Examples
    --------
    >>> import lucid
    >>> lucid._weight_norm_interface(lucid.tensor([[3.0, 4.0]]), lucid.tensor([[10.0]]))
    (tensor([[6., 8.]]), tensor([[5.]]))
    """
    v = _as_tensor(v)
    norms = _L().norm_except_dim(v, 2, dim)
    return v * (g / norms), norms


def _fused_rms_norm(input, normalized_shape, weight, eps):
    """RMS norm returning ``(out, rstd)``, ``rstd = rsqrt(mean(x^2) + eps)`` over the trailing
    ``normalized_shape`` dims (kept, size 1), as ``torch._fused_rms_norm``; ``eps=None`` is the
    dtype's machine epsilon. ``rstd`` is detached, as in PyTorch.

    Examples
    --------
    >>> import lucid
    >>> lucid._fused_rms_norm(lucid.tensor([[2.0, -2.0]]), [2], None, 0.0)
    (tensor([[ 1., -1.]]), tensor([[0.5]]))
    """
    L = _L()
    x = _as_tensor(input)
    shape = tuple(normalized_shape)
    if not shape or tuple(x.shape[x.ndim - len(shape):]) != shape or len(shape) > x.ndim:
        raise RuntimeError(f"_fused_rms_norm: normalized_shape {list(shape)} does not match the trailing dims of "
                           f"an input of shape {tuple(x.shape)}")
    eps = float(L.finfo(x.dtype).eps) if eps is None else eps
    rstd = L.rsqrt((x * x).mean(dim=tuple(range(x.ndim - len(shape), x.ndim)), keepdim=True) + eps)
    out = x * rstd
    return (out if weight is None else out * weight), rstd.detach()


# ------------------------------------------------------------------ convolution, pooling


def _convolution(input, weight, bias, stride, padding, dilation, transposed, output_padding, groups, benchmark,
                 deterministic, cudnn_enabled, allow_tf32=True):
    """:func:`lucid.convolution` with PyTorch's backend flags (``benchmark``, ``deterministic``,
    ``cudnn_enabled``, ``allow_tf32``, all ignored), as ``torch._convolution`` (both overloads).

    Examples
    --------
    >>> import lucid
    >>> lucid._convolution(lucid.ones(1, 1, 3), lucid.ones(1, 1, 2), None, [1], [0], [1], False, [0], 1,
    ...                    False, False, True, True)
    tensor([[[2., 2.]]])
    """
    return _L().convolution(input, weight, bias, stride, padding, dilation, transposed, output_padding, groups)


def _convolution_mode(input, weight, bias, stride, padding, dilation, groups):
    """Convolution with a string ``padding`` ('valid' or 'same'), the dimension from ``weight``, as
    ``torch._convolution_mode``.

    Examples
    --------
    >>> import lucid
    >>> lucid._convolution_mode(lucid.ones(1, 1, 3), lucid.ones(1, 1, 3), None, [1], "same", [1], 1)
    tensor([[[2., 3., 2.]]])
    """
    w = _as_tensor(weight)
    if w.ndim not in (3, 4, 5):
        raise RuntimeError(f"_convolution_mode: expected a 3-D, 4-D or 5-D weight, got shape {tuple(w.shape)}")
    conv = getattr(_F(), f"conv{w.ndim - 2}d")
    return conv(input, w, bias, stride, padding, dilation, groups)


def _adaptive_avg_pool2d(input, output_size):
    """:func:`lucid.nn.functional.adaptive_avg_pool2d`, as ``torch._adaptive_avg_pool2d``.

    Examples
    --------
    >>> import lucid
    >>> lucid._adaptive_avg_pool2d(lucid.arange(4.0).reshape(1, 2, 2), [1, 1])
    tensor([[[1.5]]])
    """
    return _F().adaptive_avg_pool2d(input, tuple(output_size))


def _adaptive_avg_pool3d(input, output_size):
    """:func:`lucid.nn.functional.adaptive_avg_pool3d`, as ``torch._adaptive_avg_pool3d``.

    Examples
    --------
    >>> import lucid
    >>> lucid._adaptive_avg_pool3d(lucid.arange(8.0).reshape(1, 2, 2, 2), [1, 1, 1])
    tensor([[[[3.5]]]])
    """
    return _F().adaptive_avg_pool3d(input, tuple(output_size))


def _embedding_bag(weight, indices, offsets, scale_grad_by_freq=False, mode=0, sparse=False, per_sample_weights=None,
                   include_last_offset=False, padding_idx=-1):
    """:func:`lucid.embedding_bag`'s ``(output, offset2bag, bag_size, max_indices)``, as
    ``torch._embedding_bag`` (``padding_idx=-1``: no padding index). The last three follow
    :func:`lucid.embedding_bag` (filled in every mode; PyTorch's CPU kernel leaves some empty
    in mode 0).

    Examples
    --------
    >>> import lucid
    >>> w = lucid.arange(8.0).reshape(4, 2)
    >>> lucid._embedding_bag(w, lucid.tensor([0, 1, 2, 3]), lucid.tensor([0, 1]), False, 0)[0]
    tensor([[ 0.,  1.],
            [12., 15.]])
    """
    pad = None if padding_idx is None or padding_idx < 0 else padding_idx
    return tuple(_L().embedding_bag(weight, indices, offsets, scale_grad_by_freq, mode, sparse, per_sample_weights,
                                    include_last_offset, pad))


def _embedding_bag_forward_only(weight, indices, offsets, scale_grad_by_freq=False, mode=0, sparse=False,
                                per_sample_weights=None, include_last_offset=False, padding_idx=-1):
    """:func:`_embedding_bag`, as ``torch._embedding_bag_forward_only`` (differentiable here too).

    Examples
    --------
    >>> import lucid
    >>> w = lucid.arange(8.0).reshape(4, 2)
    >>> lucid._embedding_bag_forward_only(w, lucid.tensor([0, 3]), lucid.tensor([0]), False, 2)[0]
    tensor([[6., 7.]])
    """
    return _embedding_bag(weight, indices, offsets, scale_grad_by_freq, mode, sparse, per_sample_weights,
                          include_last_offset, padding_idx)


# ------------------------------------------------------------------ attention


def _attention_scores(op, query, key, value, is_causal, scale, enable_gqa):
    L = _L()
    q, k, v = _as_tensor(query), _as_tensor(key), _as_tensor(value)
    if q.ndim < 2 or k.ndim != q.ndim or v.ndim != q.ndim or q.shape[-1] != k.shape[-1] or k.shape[-2] != v.shape[-2]:
        raise RuntimeError(f"{op}: expected query (..., L, E), key (..., S, E) and value (..., S, Ev), got "
                           f"{tuple(q.shape)}, {tuple(k.shape)} and {tuple(v.shape)}")
    if enable_gqa and q.ndim >= 3 and k.shape[-3] != q.shape[-3]:
        k = k.repeat_interleave(q.shape[-3] // k.shape[-3], dim=-3)
        v = v.repeat_interleave(q.shape[-3] // v.shape[-3], dim=-3)
    root = math.sqrt(1.0 / math.sqrt(q.shape[-1]) if scale is None else scale)  # both sides, as PyTorch's math
    scores = L.matmul(q * root, (k * root).transpose(-1, -2))
    if is_causal:
        keep = L.ones(q.shape[-2], k.shape[-2], dtype=L.bool, device=q.device).tril()
        scores = scores.masked_fill(keep.logical_not(), -math.inf)
    return scores, v


def _scaled_dot_product_attention_math(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False,
                                       dropout_mask=None, *, scale=None, enable_gqa=False):
    """Attention returning ``(out, attn)``, the weights after dropout, as
    ``torch._scaled_dot_product_attention_math``. ``attn_mask`` is *added* to the scores (the
    public ``scaled_dot_product_attention`` turns a bool mask into -inf/0 before calling it, so a
    bool mask adds 1 where True, as in PyTorch); a row whose scores are all -inf gets zero weights
    (:func:`_safe_softmax`). With ``dropout_mask`` the dropout keeps its True elements and the
    returned weights are left unscaled (the values are scaled by ``1 / (1 - dropout_p)``), as in PyTorch.

    Examples
    --------
    >>> import lucid
    >>> q = lucid.ones(1, 2, 4)
    >>> out, attn = lucid._scaled_dot_product_attention_math(q, q, lucid.arange(8.0).reshape(1, 2, 4), is_causal=True)
    >>> attn
    tensor([[[1. , 0. ],
             [0.5, 0.5]]])
    """
    L = _L()
    if is_causal and attn_mask is not None:
        raise RuntimeError("_scaled_dot_product_attention_math: Explicit attn_mask should not be set when "
                           "is_causal=True")
    scores, v = _attention_scores("_scaled_dot_product_attention_math", query, key, value, is_causal, scale,
                                  enable_gqa)
    if attn_mask is not None:
        scores = scores + _as_tensor(attn_mask)
    attn = _safe_softmax(scores, -1)
    if dropout_p > 0:
        if dropout_mask is not None:  # PyTorch returns these weights unscaled and scales the values
            attn = attn.masked_fill(_as_tensor(dropout_mask).logical_not(), 0.0)
            return L.matmul(attn, v * (1.0 / (1 - dropout_p))), attn
        attn = _F().dropout(attn, dropout_p)
    return L.matmul(attn, v), attn


def _scaled_dot_product_flash_attention_for_cpu(query, key, value, dropout_p=0.0, is_causal=False, *,
                                                attn_mask=None, scale=None):
    """Attention returning ``(output, logsumexp)``, the log-sum-exp of each row's scaled (masked)
    scores (..., L), as ``torch._scaled_dot_product_flash_attention_for_cpu``. ``attn_mask`` is an
    additive mask of the query's dtype; a fully masked row gives output 0 and logsumexp 0, as in
    PyTorch. ``logsumexp`` is detached (PyTorch's is not differentiable).

    Examples
    --------
    >>> import lucid
    >>> q = lucid.zeros(1, 1, 2)
    >>> out, lse = lucid._scaled_dot_product_flash_attention_for_cpu(q, q, lucid.tensor([[[1.0, 3.0]]]))
    >>> out, lse
    (tensor([[[1., 3.]]]), tensor([[0.]]))
    """
    L = _L()
    op = "_scaled_dot_product_flash_attention_for_cpu"
    scores, v = _attention_scores(op, query, key, value, is_causal, scale, False)
    if attn_mask is not None:
        mask = _as_tensor(attn_mask)
        if mask.dtype != scores.dtype:
            raise RuntimeError(f"{op}: Attention mask must have the query's dtype {scores.dtype}, got {mask.dtype}")
        scores = scores + mask
    dead = (scores == -math.inf).all(dim=-1, keepdim=True)
    scores = scores.masked_fill(dead, 0.0)  # no nan anywhere, so none in the gradient either
    lse = L.logsumexp(scores, -1, keepdim=True)
    attn = L.exp(scores - lse).masked_fill(dead, 0.0)
    if dropout_p > 0:
        attn = _F().dropout(attn, dropout_p)
    return L.matmul(attn, v), lse.masked_fill(dead, 0.0).squeeze(-1).detach()


# ------------------------------------------------------------------ packed sequences


def _pack_padded_sequence(input, lengths, batch_first):
    """``(data, batch_sizes)`` of a padded batch, as ``torch._pack_padded_sequence``: the rows of each
    time step that are within their sequence's length, time-major, and how many there are per
    step (int64, on the CPU). ``lengths`` (CPU tensor or list) must be sorted in decreasing order.

    Examples
    --------
    >>> import lucid
    >>> data, sizes = lucid._pack_padded_sequence(lucid.tensor([[1.0, 2.0], [3.0, 0.0]]), [2, 1], True)
    >>> data, sizes
    (tensor([1., 3., 2.]), tensor([2, 1]))
    """
    from ..nn.utils.rnn import _lengths_array

    x = _as_tensor(input)
    if x.ndim < 2:
        raise RuntimeError(f"_pack_padded_sequence: expected an input of at least 2 dims, got shape {tuple(x.shape)}")
    if batch_first:
        x = x.transpose(0, 1)
    lens = [int(n) for n in _lengths_array(lengths, x.shape[1], "_pack_padded_sequence", host_only=True)]
    if any(a < b for a, b in zip(lens, lens[1:])):
        raise RuntimeError("_pack_padded_sequence: `lengths` array must be sorted in decreasing order")
    if lens and lens[0] > x.shape[0]:
        raise RuntimeError(f"_pack_padded_sequence: the longest length {lens[0]} exceeds the {x.shape[0]} time steps "
                           "of the input")
    from ..nn.utils.rnn import pack_padded_sequence  # checked above with this op's messages

    packed = pack_padded_sequence(x, lens, batch_first=False, enforce_sorted=True)
    return packed.data, packed.batch_sizes


def _pad_packed_sequence(data, batch_sizes, batch_first, padding_value, total_length):
    """``(padded, lengths)``: the inverse of :func:`_pack_padded_sequence`, padded with
    ``padding_value`` to ``total_length`` steps (-1 or 0: the longest sequence), as
    ``torch._pad_packed_sequence``; ``lengths`` is int64 on the CPU.

    Examples
    --------
    >>> import lucid
    >>> padded, lengths = lucid._pad_packed_sequence(lucid.tensor([1.0, 3.0, 2.0]), lucid.tensor([2, 1]),
    ...                                               True, 0.0, -1)
    >>> padded, lengths
    (tensor([[1., 2.],
            [3., 0.]]), tensor([2, 1]))
    """
    from .._core.backend import host

    L = _L()
    d = _as_tensor(data)
    sizes = [int(s) for s in host(_as_tensor(batch_sizes)._data).reshape(-1)]
    if not sizes or sum(sizes) != d.shape[0] or any(a < b for a, b in zip(sizes, sizes[1:])):
        raise RuntimeError(f"_pad_packed_sequence: batch_sizes {sizes} do not describe packed data of "
                           f"{d.shape[0] if d.ndim else 0} rows")
    steps = len(sizes)
    if total_length > 0 and total_length < steps:
        raise RuntimeError(f"_pad_packed_sequence: Expected total_length to be at least {steps} (the length of the "
                           f"longest sequence), got {total_length}")
    from ..nn.utils.rnn import PackedSequence, pad_packed_sequence  # checked above with this op's messages

    return pad_packed_sequence(PackedSequence(d, L.tensor(sizes, dtype=L.int64, device="cpu")), batch_first,
                               padding_value, total_length if total_length > 0 else None)
