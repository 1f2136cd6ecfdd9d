"""``linear_cross_entropy``: the cross-entropy of a linear layer's logits, optionally computed a
chunk of rows at a time so the ``(N, C)`` logits never exist at once (PyTorch 2.13's
``torch.nn.functional.linear_cross_entropy`` and ``LinearCrossEntropyOptions``).
"""
from __future__ import annotations

import dataclasses
import math
import warnings

from ..._core import dtypes as _dtypes
from ..._core.grad_mode import STATE
from ..._core.tensor import Tensor
from ...autograd.function import Function, once_differentiable

__all__ = ["linear_cross_entropy"]

_POLICIES = ("auto", "accurate", "balanced", "compact")
# PyTorch's per-(device type, input dtype) picks for the "auto" sentinels; other pairs fall back.
_AUTO_DEFAULTS = {("cpu", "float16"): ("accurate", "aspect_ratio")}
_AUTO_FALLBACK = ("compact", "aspect_ratio:2")


def _lucid():
    import lucid

    return lucid


def _dtype_name(dt):
    return None if dt is None else str(_dtypes.to_dtype(dt))


@dataclasses.dataclass(frozen=True)
class LinearCrossEntropyOptions:
    """How :func:`linear_cross_entropy` chunks its rows (``torch.nn.LinearCrossEntropyOptions``).

    Passing an instance (or ``chunk_size=``) selects the chunked path: the batch is cut into
    ``batch_chunk_size`` rows, each chunk's logits are computed, used and dropped, and the
    backward recomputes them chunk by chunk. ``options=None`` is the reference composition
    ``cross_entropy(linear(...))``.

    Parameters
    ----------
    allow_retain_graph : bool
        Accepted for PyTorch compatibility. Lucid's backward recomputes from the saved inputs
        (it consumes no precomputed buffer), so ``retain_graph=True`` always works.
    batch_chunk_size : int, optional
        Rows per chunk (None: one chunk, unless ``chunking_method`` picks a size).
    chunking_method : str, optional
        ``"auto"`` (default), ``"aspect_ratio"`` or ``"aspect_ratio:N"`` (chunk logits about as
        large as the input, divided by ``N``; rounded to a power of two), or None to use
        ``batch_chunk_size``. An explicit ``batch_chunk_size`` disables ``"auto"``.
    acc_policy : {'auto', 'accurate', 'balanced', 'compact'}
        'compact' accumulates the weight gradient in the weight's dtype; the others keep that
        accumulator in ``acc_dtype``. Logits, softmax and the other gradients are always
        computed in ``acc_dtype``.
    acc_dtype : dtype, optional
        Accumulation dtype (None: float32 for float16 inputs under 'auto', else the input's).

    Examples
    --------
    >>> from lucid.nn import LinearCrossEntropyOptions
    >>> LinearCrossEntropyOptions(batch_chunk_size=64).batch_chunk_size
    64
    """

    allow_retain_graph: bool = False
    batch_chunk_size: int | None = None
    chunking_method: str | None = "auto"
    acc_policy: str = "auto"
    acc_dtype: object = None

    def __post_init__(self):
        name = "LinearCrossEntropyOptions"
        if self.acc_policy not in _POLICIES:
            raise ValueError(f"{name}: invalid acc_policy: {self.acc_policy!r}")
        if self.chunking_method is not None and self.chunking_method != "auto":
            method, sep, factor = str(self.chunking_method).partition(":")
            factor = factor if sep else "1"
            if not (method == "aspect_ratio" and factor.isdigit() and int(factor) > 0):
                raise ValueError(f"{name}: invalid chunking_method: {self.chunking_method!r}")
        size = self.batch_chunk_size
        if not (size is None or (isinstance(size, int) and not isinstance(size, bool) and size > 0)):
            raise ValueError(f"{name}: batch_chunk_size must be positive int or None, got {size!r}")
        if self.acc_dtype is not None:
            try:
                ok = _dtype_name(self.acc_dtype) in ("float16", "float32", "float64")
            except (TypeError, ValueError):
                ok = False
            if not ok:
                raise ValueError(f"{name}: acc_dtype must be one of {{None, lucid.float16, lucid.float32, "
                                 f"lucid.float64}}, got {self.acc_dtype!r}. Pass acc_dtype=None to let the op "
                                 "pick automatically.")

    @staticmethod
    def _chunk_for(method, num_batches, in_features, num_classes):
        """PyTorch's aspect-ratio rule: chunk logits about the size of the input, over ``factor``."""
        factor = int(method.split(":", 1)[1]) if ":" in method else 1
        target = -(-num_batches // -(-num_classes // max(in_features, 1)))
        return min((1 << (target - 1).bit_length()) // factor, num_batches)

    def _adjust(self, num_batches, in_features, num_classes, dtype, device=None):
        """The options resolved for one call: concrete policy, chunk size and ``acc_dtype``."""
        policy, method = self.acc_policy, self.chunking_method
        if method == "auto" and self.batch_chunk_size is not None:
            method = None  # an explicit size wins over the heuristic
        if policy == "auto" or method == "auto":
            key = (getattr(device, "type", None), _dtype_name(dtype))
            ap, cm = _AUTO_DEFAULTS.get(key, _AUTO_FALLBACK)
            policy = ap if policy == "auto" else policy
            method = cm if method == "auto" else method
        size = num_batches if self.batch_chunk_size is None else min(self.batch_chunk_size, num_batches)
        if method is not None:
            size = self._chunk_for(method, num_batches, in_features, num_classes)
            if self.batch_chunk_size is not None and self.batch_chunk_size != size:
                raise ValueError(
                    f"LinearCrossEntropyOptions: batch_chunk_size (={self.batch_chunk_size}) and chunking_method "
                    f"('{method}') give different chunk sizes ({self.batch_chunk_size} vs {size}); pass only one.")
        acc = self.acc_dtype
        if acc is None:
            half = _dtype_name(dtype) == "float16" and self.acc_policy == "auto"
            acc = _lucid().float32 if half else dtype
        return dataclasses.replace(self, acc_policy=policy, chunking_method=method,
                                   batch_chunk_size=max(1, size), acc_dtype=acc)


# NOTE [Chunked linear cross-entropy]
# Every supported case is one formula per row: with logits z = x W^T + b, lse = logsumexp(z)
# and a per-row coefficient vector a (A = sum_c a_c),
#   loss_n = -sum_c a_c (z_c - lse) = A lse - a . z,      d loss_n / d z = A softmax(z) - a,
# where for a class-index target t (valid = t != ignore_index, w the class weights or ones,
# eps the label smoothing) a = (1 - eps) w_t valid onehot(t) + (eps / C) valid w, and for
# probability targets p, a = w ((1 - eps) p + eps / C). 'mean' divides by sum_n w_t valid
# (class indices) or N (probabilities), as cross_entropy does (NOTE [Nothing to average] for a
# zero total). The forward keeps only the per-row losses; the backward recomputes each chunk's
# logits from the saved inputs and accumulates grad_input, grad_weight and grad_bias, so no
# array larger than a chunk's (rows, C) is ever made, forward or backward. Class-index rows
# never build ``a``: a gather picks z_t in the loss, a comparison with arange(C) marks t in
# the gradient.
class _Setup:
    """The resolved, non-tensor arguments of one chunked call."""

    __slots__ = ("reduction", "ignore_index", "eps", "chunk", "acc", "probs", "compact")

    def __init__(self, reduction, ignore_index, eps, chunk, acc, probs, compact):
        self.reduction, self.ignore_index, self.eps, self.chunk = reduction, ignore_index, eps, chunk
        self.acc, self.probs, self.compact = acc, probs, compact


def _row_weights(target, class_weight, s, acc):
    """``(safe targets, valid rows as acc, w_t * valid)`` of a class-index target."""
    lucid = _lucid()
    valid = target != s.ignore_index
    safe = lucid.where(valid, target, 0)
    valid = valid.to(acc)
    wt = valid if class_weight is None else class_weight.to(acc)[safe] * valid
    return safe, valid, wt


def _prob_coefficients(target, class_weight, s, ncls):
    """``a = w ((1 - eps) p + eps / C)`` of probability targets (NOTE [Chunked linear cross-entropy])."""
    p = target.to(s.acc)
    if s.eps:
        p = p * (1.0 - s.eps) + s.eps / ncls
    return p if class_weight is None else p * class_weight.to(s.acc)


def _smoothing(class_weight, s, ncls):
    """``sum_c w_c`` and ``w`` (1.0 without class weights) of the smoothing term."""
    if class_weight is None:
        return float(ncls), 1.0
    w = class_weight.to(s.acc)
    return w.sum(), w


def _loss_rows(z, target, class_weight, s):
    """Each row's loss ``A lse - a . z``; for class indices without making ``a``."""
    lucid = _lucid()
    ncls = z.shape[1]
    lse = lucid.logsumexp(z, 1)
    if s.probs:
        a = _prob_coefficients(target, class_weight, s, ncls)
        return a.sum(1) * lse - (a * z).sum(1)
    safe, valid, wt = _row_weights(target, class_weight, s, s.acc)
    out = (wt * (1.0 - s.eps)) * (lse - z.gather(1, safe.unsqueeze(1)).squeeze(1))
    if s.eps:
        total_w, w = _smoothing(class_weight, s, ncls)
        zw = z.sum(1) if class_weight is None else z @ w
        out = out + valid * (s.eps / ncls) * (total_w * lse - zw)
    return out


def _dlogits(z, target, class_weight, s):
    """``d loss_n / d z = A softmax(z) - a`` for the chunk's rows."""
    lucid = _lucid()
    ncls = z.shape[1]
    p = z.softmax(1)
    if s.probs:
        a = _prob_coefficients(target, class_weight, s, ncls)
        return p * a.sum(1, keepdim=True) - a
    safe, valid, wt = _row_weights(target, class_weight, s, s.acc)
    pick = wt * (1.0 - s.eps)
    big_a = pick
    if s.eps:
        total_w, w = _smoothing(class_weight, s, ncls)
        big_a = big_a + valid * (total_w * (s.eps / ncls))
    hit = safe.unsqueeze(1) == lucid.arange(ncls, device=z.device)
    dz = p * big_a.unsqueeze(1) - hit * pick.unsqueeze(1)
    if s.eps:
        dz = dz - (valid * (s.eps / ncls)).unsqueeze(1) * w
    return dz


def _logits(x, w, b, s):
    from .linear import linear

    return linear(x.to(s.acc), w, b)


def _chunks(n, size):
    return ((i, min(i + size, n)) for i in range(0, n, size))


def _denominator(target, class_weight, s, like):
    """What 'mean' divides by, and a NaN-or-zero constant for an empty total."""
    lucid = _lucid()
    if s.probs:
        total = lucid.tensor(float(target.shape[0]), dtype=s.acc, device=like.device)
    else:
        total = _row_weights(target, class_weight, s, s.acc)[2].sum()
    zero = total == 0
    return lucid.where(zero, 1.0, total), lucid.where(zero, float("nan"), 0.0).to(s.acc)


class _ChunkedLinearCrossEntropy(Function):
    """The chunked path; see NOTE [Chunked linear cross-entropy]. Arguments: input (N, in),
    weight (C, in), bias (C,) or None, target (N,) or (N, C), class weight (C,) or None, setup."""

    @staticmethod
    def forward(ctx, input, weight, bias, target, class_weight, s):
        lucid = _lucid()
        wa = weight.to(s.acc)
        ba = None if bias is None else bias.to(s.acc)
        rows, total = [], lucid.zeros((), dtype=s.acc, device=input.device)
        for i, j in _chunks(input.shape[0], s.chunk):
            loss = _loss_rows(_logits(input[i:j], wa, ba, s), target[i:j], class_weight, s)
            if s.reduction == "none":
                rows.append(loss)
            else:
                total = total + loss.sum()
        ctx.save_for_backward(input, weight, bias, target, class_weight)
        ctx.setup = s
        if s.reduction == "none":
            out = lucid.cat(rows) if rows else lucid.zeros(0, dtype=s.acc, device=input.device)
        elif s.reduction == "sum":
            out = total
        else:
            denom, nan = _denominator(target, class_weight, s, input)
            ctx.denominator = denom
            out = total / denom + nan
        return out.to(input.dtype)

    @staticmethod
    @once_differentiable
    def backward(ctx, grad):
        lucid = _lucid()
        input, weight, bias, target, class_weight = ctx.saved_tensors
        s = ctx.setup
        need_x, need_w, need_b, need_t = ctx.needs_input_grad[:4]
        wa = weight.to(s.acc)
        ba = None if bias is None else bias.to(s.acc)
        grad = grad.to(s.acc)
        if s.reduction == "mean":
            grad = grad / ctx.denominator
        gw = lucid.zeros(tuple(weight.shape), dtype=weight.dtype if s.compact else s.acc,
                         device=weight.device) if need_w else None
        gb = lucid.zeros(tuple(bias.shape), dtype=s.acc, device=bias.device) if need_b else None
        gxs, gts = [], []
        for i, j in _chunks(input.shape[0], s.chunk):
            x = input[i:j].to(s.acc)
            z = _logits(x, wa, ba, s)
            scale = grad[i:j].unsqueeze(1) if s.reduction == "none" else grad
            dz = _dlogits(z, target[i:j], class_weight, s) * scale
            if need_x:
                gxs.append(dz @ wa)
            if need_w:
                gw.add_((dz.t() @ x).to(gw.dtype))
            if need_b:
                gb.add_(dz.sum(0))
            if need_t:  # d loss / d p = -(1 - eps) w (z - lse), probability targets only
                logp = z - lucid.logsumexp(z, 1, keepdim=True)
                wvec = 1.0 if class_weight is None else class_weight.to(s.acc)
                gts.append(-(1.0 - s.eps) * wvec * logp * scale)
        gx = _joined(gxs, input) if need_x else None
        gt = _joined(gts, target) if need_t else None
        return (gx, None if gw is None else gw.to(weight.dtype),
                None if gb is None else gb.to(bias.dtype), gt, None, None)


def _joined(parts, like):
    lucid = _lucid()
    if not parts:
        return lucid.zeros(tuple(like.shape), dtype=like.dtype, device=like.device)
    return lucid.cat(parts).to(like.dtype)


def _under_value_transform(args):
    """True inside ``func.jvp``/``vmap`` (the custom backward serves reverse mode only)."""
    if not STATE.traces:
        return False
    from ..._core.primitive import _owning_trace
    from ...func._traces import GradTrace

    trace = _owning_trace([a for a in args if a is not None])
    return trace is not None and not isinstance(trace, GradTrace)


def _check_shapes(input, linear_weight, linear_bias):
    name = "linear_cross_entropy"
    if not 1 <= input.ndim <= 2:
        raise RuntimeError(f"{name}: expected input with dimensionality 1 or 2, got {input.ndim}")
    if linear_weight.ndim < 2:
        raise RuntimeError(f"{name}: expected linear_weight with dimensionality at least 2, got {linear_weight.ndim}")
    if input.shape[-1] != linear_weight.shape[-1]:
        raise RuntimeError(f"{name}: expected equal input and linear_weight last dimensions (in_features), "
                           f"got {input.shape[-1]} and {linear_weight.shape[-1]}, respectively")
    want = tuple(linear_weight.shape[:-1])
    if linear_bias is not None and tuple(linear_bias.shape) != want:
        raise RuntimeError(f"{name}: expected linear_bias shape {want}, got {tuple(linear_bias.shape)}")
    if len(want) > 1 and input.ndim == 1:
        raise RuntimeError(f"{name}: K-dimensional loss defined by linear_weight shape {tuple(linear_weight.shape)} "
                           f"requires batched input, (N, {input.shape[-1]}), got unbatched input with shape "
                           f"{tuple(input.shape)}")


def _resolve_options(options, chunk_size):
    if options is not None and not isinstance(options, LinearCrossEntropyOptions):
        raise TypeError(f"linear_cross_entropy: options must be a LinearCrossEntropyOptions or None, "
                        f"got {type(options).__name__}")
    if chunk_size is None:
        return options
    return dataclasses.replace(options or LinearCrossEntropyOptions(), batch_chunk_size=chunk_size)


def linear_cross_entropy(input, linear_weight, target, *, linear_bias=None, weight=None, reduction="mean",
                         ignore_index=None, label_smoothing=0.0, options=None, chunk_size=None):
    """``cross_entropy(linear(input, linear_weight, linear_bias), target, ...)``, chunked on request.

    With ``options`` (a :class:`~lucid.nn.LinearCrossEntropyOptions`) or ``chunk_size`` the
    rows are processed ``batch_chunk_size`` at a time in the forward *and* the backward (which
    recomputes each chunk's logits), so the ``(N, C)`` logits, softmax and their gradient never
    exist whole: memory is O(chunk * C + C * in_features) instead of O(N * C). With neither,
    it is the reference composition (differentiable to any order, under every transform).

    Parameters
    ----------
    input : Tensor of shape (in_features,) or (N, in_features)
    linear_weight : Tensor of shape (C, in_features) or (C, d1, ..., dK, in_features)
    target : Tensor
        Class indices of shape (), (N,) or (N, d1, ..., dK), or class probabilities with the
        logits' shape.
    linear_bias : Tensor of shape (C,) or (C, d1, ..., dK), optional
    weight : Tensor of shape (C,), optional
        Per-class rescaling.
    reduction : {'mean', 'sum', 'none'}
    ignore_index : int, optional
        A target value that contributes nothing (class indices only; default -100).
    label_smoothing : float in [0, 1]
    options : LinearCrossEntropyOptions, optional
        Chunking options (None: the reference path).
    chunk_size : int, optional
        Lucid shorthand for ``options=LinearCrossEntropyOptions(batch_chunk_size=chunk_size)``.

    Examples
    --------
    >>> import lucid, lucid.nn.functional as F
    >>> x, w = lucid.tensor([[1.0, 0.0], [0.0, 1.0]]), lucid.tensor([[1.0, 0.0], [0.0, 1.0], [0.0, 0.0]])
    >>> t = lucid.tensor([0, 2])
    >>> round(F.linear_cross_entropy(x, w, t, chunk_size=1).item(), 4)
    1.0514
    >>> round(F.cross_entropy(F.linear(x, w), t).item(), 4)
    1.0514

    Limitations
    -----------
    The chunked path differentiates once (``once_differentiable``: no double backward, as in
    PyTorch); under ``func.jvp``/``func.vmap`` it runs the reference composition instead;
    class weights get no gradient there. A K-dimensional ``linear_weight`` falls back to the
    reference path with a warning, as in PyTorch. Unlike PyTorch's chunked op, label
    smoothing and probability targets are chunked too.
    """
    name = "linear_cross_entropy"
    _check_shapes(input, linear_weight, linear_bias)
    if reduction not in ("none", "mean", "sum"):
        raise ValueError(f"{name}: {reduction!r} is not a valid value for reduction (expected 'none', 'mean' or 'sum')")
    if not 0.0 <= label_smoothing <= 1.0:
        raise ValueError(f"{name}: label_smoothing must be between 0.0 and 1.0, got {label_smoothing}")
    options = _resolve_options(options, chunk_size)
    num_batches, num_classes = tuple(input.shape[:-1]), linear_weight.shape[0]
    out_features = tuple(linear_weight.shape[1:-1])
    logits_shape = (*num_batches, num_classes, *out_features)
    probs = tuple(target.shape) == logits_shape
    if probs and ignore_index is not None:
        raise RuntimeError(f"{name}: ignore_index cannot be specified when target contains probabilities")
    ignore_index = -100 if ignore_index is None else ignore_index
    if options is not None and out_features:
        warnings.warn(f"{name}: ``options`` ignored; the chunked path needs out_features == (). Got "
                      f"out_features={out_features}.", stacklevel=2)
    kind = target.dtype.kind if isinstance(target, Tensor) else ""
    chunked = (options is not None and not out_features
               and ((probs and kind == "f") or (kind in ("i", "u") and tuple(target.shape) == num_batches))
               and not (probs and weight is not None and weight.requires_grad)
               and not _under_value_transform((input, linear_weight, linear_bias, target, weight)))
    if chunked:
        return _chunked(input, linear_weight, target, linear_bias, weight, reduction, ignore_index,
                        label_smoothing, options, probs)
    return _reference(input, linear_weight, target, linear_bias, weight, reduction, ignore_index,
                      label_smoothing, logits_shape, out_features)


def _reference(input, linear_weight, target, bias, weight, reduction, ignore_index, eps, logits_shape,
               out_features):
    from .linear import linear
    from .loss import cross_entropy

    if out_features:
        flat = math.prod(out_features) * linear_weight.shape[0]
        linear_weight = linear_weight.reshape(flat, linear_weight.shape[-1])
        bias = None if bias is None else bias.reshape(flat)
    logits = linear(input, linear_weight, bias).reshape(logits_shape)
    return cross_entropy(logits, target, weight=weight, reduction=reduction, ignore_index=ignore_index,
                         label_smoothing=eps)


def _check_targets(t, num_classes, ignore_index):
    # Concrete CPU values only: on a device the check would read back every call (see
    # _check_classes in loss.py; PyTorch's CUDA kernels assert on the device instead).
    if getattr(t, "_level", 0) != 0 or t.device.type != "cpu" or t.numel() == 0:
        return
    valid = t != ignore_index
    if bool(((t < 0) | (t >= num_classes))[valid].any()):
        live = t[valid]
        from .loss import TargetOutOfBoundsError  # PyTorch: IndexError; still a ValueError

        raise TargetOutOfBoundsError(f"linear_cross_entropy: target class values must be in [0, {num_classes}) (or "
                                     f"be ignore_index), got range [{live.min().item()}, {live.max().item()}] for "
                                     f"target of shape {tuple(t.shape)}")


def _chunked(input, linear_weight, target, bias, weight, reduction, ignore_index, eps, options, probs):
    batched = input.ndim == 2
    x = input if batched else input.unsqueeze(0)
    t = target if batched else target.unsqueeze(0)
    num_classes = linear_weight.shape[0]
    if weight is not None and tuple(weight.shape) != (num_classes,):
        raise RuntimeError(f"linear_cross_entropy: weight should have shape ({num_classes},), got {tuple(weight.shape)}")
    if not probs:
        _check_targets(t, num_classes, ignore_index)
    if weight is not None and not probs:
        weight = weight.detach()  # class weights of index targets are constants, as in cross_entropy
    opts = options._adjust(num_batches=x.shape[0], in_features=x.shape[1], num_classes=num_classes,
                           dtype=input.dtype, device=input.device)
    s = _Setup(reduction, ignore_index, float(eps), opts.batch_chunk_size, opts.acc_dtype, probs,
               opts.acc_policy == "compact")
    out = _ChunkedLinearCrossEntropy.apply(x, linear_weight, bias, t, weight, s)
    return out if batched or reduction != "none" else out.squeeze(0)
