"""Loss functions (functional), with ``reduction`` in {'none', 'mean', 'sum'}.

All losses are composites of primitives. NOTE [Class picks]: the class of each example
is picked with a one-hot mask — ``-(logp * onehot(target) * w).sum(class_dim)`` — so the
pick is one multiply and one sum (its backward is ``g * mask``, elementwise), and it works
unchanged inside ``vmap`` (``one_hot`` is a batchable primitive).
"""
from __future__ import annotations

import threading
import weakref

import numpy as np

from ..._core import backend
from ..._core.backend import namespace_of, runs_on_operands_device, xp
from ..._core.kernels import Kernel, kernel_for
from ..._core.primitive import AUTOCAST_HOOK, TN, OpError, autocast_composite, autocast_float32, bind, defprim
from ..._core.tensor import Tensor, _wrap
from ..._runtime import warn_at_caller
from ...ops._family import _as_tensor, binary as _binary, move_bdim, quiet
from .activation import _softplus, log_softmax
from ._complex import refuse_complex as _refuse_complex
from ._opmath import in_float32 as _in_float32, is_half as _is_half
from .sparse import one_hot

__all__ = [
    "mse_loss", "l1_loss", "smooth_l1_loss", "huber_loss", "cross_entropy", "nll_loss",
    "binary_cross_entropy", "binary_cross_entropy_with_logits", "kl_div", "soft_margin_loss",
    "poisson_nll_loss", "cosine_similarity", "margin_ranking_loss", "hinge_embedding_loss",
]


def _lucid():
    import lucid

    return lucid


def _legacy_reduction(size_average, reduce, reduction):
    if size_average is None and reduce is None:
        return reduction
    size_average = True if size_average is None else size_average
    reduce = True if reduce is None else reduce
    reduction = "mean" if reduce and size_average else "sum" if reduce else "none"
    # PyTorch's message names the replacement
    warn_at_caller(f"size_average and reduce args will be deprecated, please use reduction='{reduction}' instead.")
    return reduction


def _checked_reduction(reduction, name):
    """``reduction`` if valid: for losses whose later checks would otherwise hide a bad one."""
    if reduction not in ("none", "mean", "sum"):
        raise ValueError(f"{name}: {reduction!r} is not a valid value for reduction "
                         "(expected 'none', 'mean' or 'sum')")
    return reduction


def _reduce(loss, reduction, name):
    if reduction == "none":
        return loss
    if reduction == "mean":
        return loss.mean()
    if reduction == "sum":
        return loss.sum()
    raise ValueError(f"{name}: {reduction!r} is not a valid value for reduction "
                     "(expected 'none', 'mean' or 'sum')")


def _weighted(loss, weight, input, reduction, name, by_weight=True):
    """``loss * weight`` reduced as PyTorch's weighted regression losses: the weight must have
    the input's shape, and 'mean' divides by ``weight.sum()`` (mse/l1) or by the element count
    (huber, ``by_weight=False``)."""
    if tuple(weight.shape) != tuple(input.shape):
        raise ValueError(f"{name}: weights and input must have the same size, got {tuple(weight.shape)} "
                         f"and {tuple(input.shape)}")
    loss = loss * weight
    if reduction == "mean" and by_weight:
        return loss.sum() / weight.sum()
    return _reduce(loss, reduction, name)


def _check_same_shape(input, target, name):
    if tuple(input.shape) != tuple(target.shape):
        warn_at_caller(
            f"{name}: using a target size ({tuple(target.shape)}) that is different to the input size "
            f"({tuple(input.shape)}). This will likely lead to incorrect results due to broadcasting.")


# ---------------------------------------------------------------- regression
@autocast_float32("mse_loss")  # NOTE [Autocast]
def mse_loss(input, target, size_average=None, reduce=None, reduction="mean", weight=None):
    """Mean squared error ``(input - target)^2``.

    Examples
    --------
    >>> import lucid, lucid.nn.functional as F
    >>> F.mse_loss(lucid.tensor([1.0, 2.0]), lucid.tensor([0.0, 0.0]))
    tensor(2.5)
    """
    _refuse_complex("mse_loss", input, target)
    reduction = _legacy_reduction(size_average, reduce, reduction)
    _check_same_shape(input, target, "mse_loss")
    d = input - target
    loss = d * d
    if weight is not None:
        return _weighted(loss, weight, input, reduction, "mse_loss")
    return _reduce(loss, reduction, "mse_loss")


@autocast_float32("l1_loss")  # NOTE [Autocast]
def l1_loss(input, target, size_average=None, reduce=None, reduction="mean", weight=None):
    """Mean absolute error ``|input - target|``."""
    reduction = _legacy_reduction(size_average, reduce, reduction)
    _check_same_shape(input, target, "l1_loss")
    loss = _lucid().abs(input - target)
    if weight is not None:
        return _weighted(loss, weight, input, reduction, "l1_loss")
    return _reduce(loss, reduction, "l1_loss")


@autocast_float32("smooth_l1_loss")  # NOTE [Autocast]
def smooth_l1_loss(input, target, size_average=None, reduce=None, reduction="mean", beta=1.0):
    """``0.5 d^2 / beta`` where ``|d| < beta``, else ``|d| - 0.5 beta``."""
    _refuse_complex("smooth_l1_loss", input, target)
    reduction = _legacy_reduction(size_average, reduce, reduction)
    if beta < 0:
        raise RuntimeError("smooth_l1_loss: beta must be non-negative")
    _check_same_shape(input, target, "smooth_l1_loss")
    lucid = _lucid()
    d = input - target
    ad = lucid.abs(d)
    if beta == 0.0:
        return _reduce(ad, reduction, "smooth_l1_loss")
    loss = lucid.where(ad < beta, (0.5 / beta) * d * d, ad - 0.5 * beta)
    return _reduce(loss, reduction, "smooth_l1_loss")


@autocast_float32("huber_loss")  # NOTE [Autocast]
def _in_input_dtype(target, input):
    # PyTorch's huber_loss and soft_margin_loss answer in the input's dtype (a float64 target
    # does not promote a float32 input), unlike mse_loss or smooth_l1_loss
    if isinstance(target, Tensor) and target.dtype != input.dtype and target.is_floating_point():
        return target.to(input.dtype)
    return target


def huber_loss(input, target, reduction="mean", delta=1.0, weight=None):
    """``0.5 d^2`` where ``|d| <= delta``, else ``delta (|d| - 0.5 delta)``."""
    _refuse_complex("huber_loss", input, target)
    target = _in_input_dtype(target, input)
    if _is_half(input):  # See NOTE [Half composites]
        return _in_float32(huber_loss, input, target, reduction, delta, weight)
    if delta <= 0:
        raise RuntimeError("huber_loss: delta must be positive")
    _check_same_shape(input, target, "huber_loss")
    lucid = _lucid()
    d = input - target
    ad = lucid.abs(d)
    loss = lucid.where(ad <= delta, 0.5 * d * d, delta * (ad - 0.5 * delta))
    if weight is not None:
        return _weighted(loss, weight, input, reduction, "huber_loss", by_weight=False)
    return _reduce(loss, reduction, "huber_loss")


# ------------------------------------------------------------ classification
def _concrete(*ts):
    """True when every tensor has concrete values (plain eager tensors, no transform)."""
    return all(t is None or (isinstance(t, Tensor) and t._level == 0) for t in ts)


class TargetOutOfBoundsError(IndexError, ValueError):
    """A class-index target outside ``[0, C)`` (PyTorch's cross_entropy/nll_loss: IndexError);
    still a ValueError, as Lucid raised before."""


def _class_mask(target, input, weight, ignore_index, name):
    """``onehot(target) * weight * (target != ignore_index)`` laid out like ``input``
    (classes at dim 1). See NOTE [Class picks]."""
    ncls = input.shape[1] if input.ndim > 1 else input.shape[0]
    if target.dtype.kind not in "iu":
        raise RuntimeError(f"{name}: expected target of integer (long) class indices, got {target.dtype}")
    batch_shape = (tuple(input.shape[:1]) + tuple(input.shape[2:])) if input.ndim > 1 else ()
    if tuple(target.shape) != batch_shape:  # PyTorch: ValueError for the batch size, else RuntimeError
        raise OpError(
            f"{name}: expected target of shape {batch_shape} for input of shape {tuple(input.shape)}, "
            f"got {tuple(target.shape)}"
        )
    if weight is not None and tuple(weight.shape) != (ncls,):
        raise RuntimeError(f"{name}: weight should have shape ({ncls},), got {tuple(weight.shape)}")
    if weight is not None and weight.dtype != input.dtype:  # PyTorch: "expected scalar type ..."
        raise RuntimeError(f"{name}: expected a weight of the input's dtype {input.dtype}, got {weight.dtype} "
                           f"(input of shape {tuple(input.shape)}, weight of shape {tuple(weight.shape)})")
    if _concrete(target, weight):
        with backend.on_device(target):  # array code: on the target's device (NOTE [Several devices])
            return _class_mask_numpy(target._data, input, weight, ignore_index, ncls, name)
    lucid = _lucid()
    valid = target != ignore_index
    safe = lucid.where(valid, target, 0)
    mask = one_hot(safe, ncls).to(input.dtype) * valid.unsqueeze(-1).to(input.dtype)
    if weight is not None:
        mask = mask * weight.detach().to(input.dtype)
    if input.ndim > 2:
        mask = lucid.moveaxis(mask, -1, 1)
    return mask


def _class_mask_numpy(t, input, weight, ignore_index, ncls, name):
    """The eager fast path of :func:`_class_mask`: one array expression, a constant tensor
    (on the target's device: NOTE [Backends])."""
    valid = t != ignore_index
    safe = np.where(valid, t, 0)
    if t.__class__ is np.ndarray:
        classes = np.arange(ncls)
        if safe.size and (safe.min() < 0 or safe.max() >= ncls):
            raise TargetOutOfBoundsError(f"{name}: target class values must be in [0, {ncls}), got range "
                             f"[{safe.min()}, {safe.max()}] for target of shape {t.shape}")
    else:  # no range check on a device: it would read back every call (see _check_classes)
        classes = namespace_of(t).arange(ncls)
    dtype = input.dtype
    mask = (safe[..., None] == classes) & valid[..., None]
    mask = mask.astype(dtype)
    if weight is not None:
        mask *= weight._data.astype(dtype, copy=False)
    if input.ndim > 2:
        mask = np.moveaxis(mask, -1, 1)
    return _wrap(mask)


@runs_on_operands_device
def _pick(logp, mask, reduction, name):
    """``-sum_c mask * logp`` reduced; 'mean' divides by ``mask.sum()`` (the total weight).

    With a concrete mask the division is folded into the constant, so the mean is one
    multiply and one full sum."""
    class_dim = 1 if logp.ndim > 1 else 0
    if reduction == "mean":
        if mask._level == 0:
            m = mask._data
            total = m.sum()
            if m.__class__ is not np.ndarray:  # a device: the same constants, no read of total
                zero = total == 0  # See NOTE [Nothing to average]
                scaled = m * (-1.0 / xp.where(zero, 1.0, total))
                nan = xp.where(zero, float("nan"), 0.0).astype(m.dtype)
                return (logp * _wrap(scaled.astype(m.dtype, copy=False))).sum() + _wrap(nan)
            scaled = m * (-1.0 / total) if total != 0 else np.zeros_like(m)
            out = (logp * _wrap(scaled.astype(mask.dtype, copy=False))).sum()
            return out if total != 0 else out + float("nan")  # See NOTE [Nothing to average]
        total = mask.sum()
        lucid = _lucid()
        return -(logp * mask).sum() / lucid.where(total == 0, 1.0, total) + _nan_if_zero(TN, total)
    if reduction == "sum":
        return -(logp * mask).sum()
    # logp * -mask, not -(logp * mask): an ignored entry is then +0.0 as in PyTorch (-0.0 times a
    # log-probability, summed from +0.0), where the negated sum would print as -0.
    return _reduce((logp * -mask).sum(class_dim), reduction, name)


# NOTE [Nothing to average]
# A 'mean' over zero weight (every target equal to ignore_index, or zero class weights) is
# NaN in the forward, as in PyTorch, but its gradient is 0, as in PyTorch (whose backward
# only scales the rows it picked): the division uses a denominator of 1 where the total is
# 0 (the numerator's derivative is exactly 0 there) and a constant NaN is added to the value.
def _nan_if_zero(ns, total):
    """A constant: NaN where ``total`` (no gradient) is 0, else 0."""
    return ns.cast(ns.where(total == 0, float("nan"), 0.0), dtype=total.dtype)


def _safe_count(ns, count):
    """The number of valid rows, 1 where there are none. See NOTE [Nothing to average]."""
    return ns.maximum(count, 1.0)


# NOTE [Fused cross-entropy]
# For the common case — class-index targets, classes on the last dim of an (N, C) or (C,)
# input, no class weights, no label smoothing — cross-entropy is one primitive (for speed:
# one pass forward, no one-hot mask built per call, one node in the tape):
#   loss_n = logsumexp(x_n) - x_n[t_n]   (0 where t_n == ignore_index), then reduced;
#   vjp    = (softmax(x) * valid - onehot(t)) * g   (g / number of valid rows for 'mean').
# ``ce_target_mask`` (no gradient) gives ``onehot(t) * valid`` in the input's dtype, so the
# rules stay written in ``ns`` ops and differentiate again. Every other case is the
# composite below (NOTE [Class picks]). The plain eager backward (``ns`` is the array
# namespace, nothing differentiates it again) takes the same formula in a handful of in-place
# array calls (``_ce_vjp_arrays``, NOTE [Cross-entropy residual]).
def _ce_mask_impl(t, *, num_classes, ignore_index, dtype):
    valid = t != ignore_index
    safe = xp.where(valid, t, 0)
    _check_classes(safe, num_classes)
    return ((safe[..., None] == namespace_of(t).arange(num_classes)) & valid[..., None]).astype(dtype)


def _check_classes(safe, num_classes):
    # one reduction: negative values wrap to huge unsigned ones. On a device the check would
    # read back to the host every step, so it is skipped there (PyTorch's CUDA kernels check
    # asynchronously with a device-side assert); see README "Differences from PyTorch".
    if safe.__class__ is not np.ndarray:
        return
    if safe.size and xp.max(safe.astype(np.uint64, copy=False)) >= num_classes:
        raise TargetOutOfBoundsError(f"target class values must be in [0, {num_classes}) (or be ignore_index) to "
                                     f"one_hot encode them, got range [{safe.min()}, {safe.max()}] for target of "
                                     f"shape {safe.shape}")


def _ce_mask_batch(vals, bdims, **params):
    return bind(ce_target_mask_p, (move_bdim(vals[0], bdims[0], 0),), params), 0


ce_target_mask_p = defprim("ce_target_mask", _ce_mask_impl, vjp=None, batch=_ce_mask_batch,
                           jvp=lambda ns, primals, tangents, out, **p: None,
                           differentiable=False, save_inputs=False)


def _shifted_exp(x):
    """``(s, exp(s), sum of exp(s) over the last dim, kept)`` with ``s = x - max(x)`` (rows)."""
    # A method, not np.maximum.reduce: CuPy's ufuncs reduce only for add and multiply.
    s = x - (x.max(axis=-1, keepdims=True) if x.shape[-1] else 0)
    e = xp.exp(s)
    return s, e, xp.add.reduce(e, axis=-1, keepdims=True)


def _ce_impl(x, t, *, ignore_index, reduction):
    # Plain NumPy on purpose, in as few calls as possible: this forward is on the hot path
    # of every classifier step.
    if x.__class__ is not np.ndarray:  # See NOTE [Fused cross-entropy on a device]
        out = _ce_fused_forward(x, t, ignore_index, reduction)
        if out is not None:
            return out
    c = x.shape[-1]
    s, e, sums = _shifted_exp(x)
    lse = xp.log(sums)[..., 0]
    every = _targets_are_classes(t, c, ignore_index)
    if every:
        valid = safe = t
    else:
        valid = t != ignore_index
        every = t.__class__ is np.ndarray and bool(valid.all())  # no host read on a device
        safe = t if every else xp.where(valid, t, 0)
        _check_classes(safe, c)
    if s.ndim == 2:
        picked = s[namespace_of(s).arange(len(safe)), safe]
    else:  # (C,) or, under vmap, (B, N, C)
        picked = xp.take_along_axis(s, safe[..., None], axis=-1)[..., 0]
    loss = lse - picked
    if not every:
        loss = xp.where(valid, loss, x.dtype.type(0))  # a scalar: no host array beside device ones
    count = None
    if reduction == "none":
        out = loss
    else:
        total = xp.add.reduce(loss, axis=None)
        if reduction == "mean":
            if every:
                total = total / valid.size
            else:
                count = xp.count_nonzero(valid)
                with np.errstate(divide="ignore", invalid="ignore"):  # all ignored: nan, like PyTorch
                    total = total / count
        out = xp.asarray(total, dtype=x.dtype)
    if x.ndim <= 2:  # See NOTE [Cross-entropy residual]
        _CE_LAST.value = (_ref(x), _ref(t), e, sums, None if every else (valid, safe, count))
    return out


def _ref(a):
    """A weak reference to ``a``; a strong one for an array type without weak references
    (held until the backward takes the residual or the next call replaces it)."""
    try:
        return weakref.ref(a)
    except TypeError:
        return lambda: a


# NOTE [Fused cross-entropy on a device]
# On a device the generic forward and backward above are 16 and 11 launches; there they are
# kernels (NOTE [Fused device kernels]): the forward is one thread per row (max, sum of exps,
# the row's loss and whether it counts; one pass per row suits the C <= 1024 classes it is
# used for), then one sum over the rows (loss total and count together) and, for 'mean', one
# divide: 3 launches. The backward is one thread per element, softmax from the saved row
# log-sum-exp: ``(exp(x - lse) - onehot) * scale``, 1 launch. A target outside [0, C) that is
# not ignore_index gives a NaN loss (a GPU can't raise without reading back; PyTorch's CUDA
# kernels assert on the device instead). Everything else (vmap's 3-D inputs, other dtypes,
# many classes, the CPU) takes the generic code, with the same values to rounding.
_CE_FUSED_MAX_CLASSES = 1024
_FUSED = object()

_CE_ROWS = Kernel("lucid_ce_rows", "const T* x, const I* t, long long C, long long ignore_index, T* lse, "
                  "T* loss, T* counted", """
    const T* row = x + i * C;
    T m = row[0];
    for (long long c = 1; c < C; ++c) m = row[c] > m ? row[c] : m;
    T s = 0;
    for (long long c = 0; c < C; ++c) s += exp(row[c] - m);
    const long long target = (long long)t[i];
    lse[i] = m + log(s);
    if (target == ignore_index) { loss[i] = 0; counted[i] = 0; return; }
    counted[i] = 1;
    loss[i] = (target < 0 || target >= C) ? (T)LUCID_NAN : log(s) - (row[target] - m);
""", types=("T", "I"))

_CE_GRAD = Kernel("lucid_ce_grad", "const T* x, const I* t, const T* lse, const T* g, const T* count, "
                  "long long C, long long ignore_index, int mode, T* out", """
    const long long n = i / C;
    const long long target = (long long)t[n];
    if (target == ignore_index) { out[i] = 0; return; }
    T scale = g[mode == 0 ? n : 0];  // mode 0: 'none' (a cotangent per row), 1: 'sum', 2: 'mean'
    if (mode == 2) { const T k = count[0]; scale = scale / (k > 1 ? k : (T)1); }
    out[i] = (exp(x[i] - lse[n]) - (i - n * C == target ? (T)1 : (T)0)) * scale;
""", types=("T", "I"))

_FLOATS = (np.dtype(np.float32), np.dtype(np.float64))
_INDICES = (np.dtype(np.int32), np.dtype(np.int64))


def _ce_fused_rows(x, t, ignore_index):
    """``(lse, rows)`` of the row kernel: rows[0] the losses, rows[1] 1 where a row counts;
    None where the kernel does not apply. See NOTE [Fused cross-entropy on a device]."""
    c = x.shape[-1]
    if x.ndim not in (1, 2) or not 0 < c <= _CE_FUSED_MAX_CLASSES or x.size == 0 or x.dtype not in _FLOATS \
            or t.dtype not in _INDICES or not (x.flags["C_CONTIGUOUS"] and t.flags["C_CONTIGUOUS"]):
        return None
    launch = kernel_for(x, _CE_ROWS, x.dtype, t.dtype)
    if launch is None:
        return None
    n = x.size // c
    ns = namespace_of(x)
    lse, rows = ns.empty(n, dtype=x.dtype), ns.empty((2, n), dtype=x.dtype)
    launch(n, x, t, c, ignore_index, lse, rows[0], rows[1])
    return lse, rows


def _ce_fused_forward(x, t, ignore_index, reduction):
    fused = _ce_fused_rows(x, t, ignore_index)
    if fused is None:
        return None
    lse, rows = fused
    if reduction == "none":
        out, totals = rows[0].reshape(t.shape), None
    else:
        totals = rows.sum(axis=1)  # (loss total, count): one launch
        out = totals[:1] if reduction == "sum" else totals[:1] / totals[1:]  # 0/0: NaN, as PyTorch
        out = out.reshape(())
    _CE_LAST.value = (_ref(x), _ref(t), _FUSED, lse, totals)
    return out


def _ce_fused_backward(g, x, t, lse, totals, ignore_index, reduction):
    """The cross-entropy vjp as one kernel, or None where it does not apply."""
    if g.dtype != x.dtype:
        return None
    if not g.flags["C_CONTIGUOUS"]:  # e.g. 'none' under a sum: the cotangent is a broadcast
        g = xp.ascontiguousarray(g)
    launch = kernel_for(x, _CE_GRAD, x.dtype, t.dtype)
    if launch is None:
        return None
    mode = {"none": 0, "sum": 1, "mean": 2}[reduction]
    out = namespace_of(x).empty(x.shape, dtype=x.dtype)
    launch(x.size, x, t, lse, g, g if totals is None else totals[1:], x.shape[-1], ignore_index, mode, out)
    return out


def _ce_dlogits(ns, x, t, ignore_index):
    """``(softmax(x) * valid - onehot(t), onehot(t) * valid)``: the per-row derivative and the mask."""
    mask = ns.ce_target_mask(t, num_classes=x.shape[-1], ignore_index=ignore_index, dtype=x.dtype)
    axis = len(tuple(x.shape)) - 1
    return ns.softmax(x, axis=axis) * ns.sum(mask, axis=(axis,), keepdims=True) - mask, mask


def _ce_scale(ns, g, mask, reduction):
    """The cotangent ``g`` laid out to multiply the per-class derivative."""
    if reduction == "none":
        return ns.reshape(g, shape=tuple(g.shape) + (1,))
    return g if reduction == "sum" else g / _safe_count(ns, ns.sum(mask, axis=None, keepdims=False))


def _targets_are_classes(t, c, ignore_index):
    """One reduction proving every target is a class in [0, C) (hence none is ignored).

    On a device the proof would be a device-to-host read every step: the general (masked)
    path runs instead, as fast there."""
    return t.size > 0 and t.__class__ is np.ndarray and not 0 <= ignore_index < c and \
        int(t.astype(np.uint64, copy=False).max()) < c  # negatives wrap


# NOTE [Cross-entropy residual]
# The eager backward needs softmax(x) = exp(s) / sum(exp(s)), which the forward has just
# computed. The forward leaves (x, t, exp(s), row sums, and where some target may be
# ignored its valid mask, safe targets and count) of its last call on this thread here; the
# array backward of the same x and t objects takes them (once: it divides in place) instead
# of recomputing. A saved x or t changed in place fails the engine's version check before any
# rule runs, so identity is enough. With ignored targets (always on a device, where proving
# there are none would read back to the host) the same in-place formula runs with the rows
# scaled by the mask: about a third of the device calls of the generic rule.
_CE_LAST = threading.local()


def _ce_vjp_arrays(g, x, t, ignore_index, reduction):
    """``_ce_vjp`` on arrays: (softmax(x) - onehot(t)) * valid, scaled; ``None`` where the
    generic rule must run (a CPU call whose targets were not proven classes and left no
    residual)."""
    last, _CE_LAST.value = getattr(_CE_LAST, "value", None), None
    if x.__class__ is not np.ndarray:  # See NOTE [Fused cross-entropy on a device]
        if last is None or last[2] is not _FUSED or last[0]() is not x or last[1]() is not t:
            fused = _ce_fused_rows(x, t, ignore_index)
            last = None if fused is None else (None, None, _FUSED, fused[0], fused[1].sum(axis=1))
        if last is not None:
            d = _ce_fused_backward(g, x, t, last[3], last[4], ignore_index, reduction)
            if d is not None:
                return d
            last = None
    if last is not None and last[0]() is x and last[1]() is t:
        e, sums, masked = last[2], last[3], last[4]
    elif _targets_are_classes(t, x.shape[-1], ignore_index):
        (_, e, sums), masked = _shifted_exp(x), None
    elif x.__class__ is not np.ndarray:
        valid = t != ignore_index
        (_, e, sums), masked = _shifted_exp(x), (valid, xp.where(valid, t, 0), None)
    else:
        return None
    e /= sums
    safe = t if masked is None else masked[1]
    if e.ndim == 2:
        e[namespace_of(e).arange(len(t)), safe] -= 1
    else:
        e[..., safe] -= 1
    if masked is not None:  # ignored rows get 0; 'mean' divides by the valid ones (NOTE [Nothing to average])
        valid, count = masked[0], masked[2]
        if reduction == "mean":
            count = xp.count_nonzero(valid) if count is None else count
            g = g / xp.maximum(count, 1)
        e *= (valid * g)[..., None]
    elif reduction == "none":
        e *= g[..., None]
    else:
        e *= g / t.size if reduction == "mean" else g
    return e


def _ce_vjp(ns, g, out, x, t, ignore_index, reduction):
    if not ns.is_tensor_ns and x.ndim <= 2:
        d = _ce_vjp_arrays(g, x, t, ignore_index, reduction)
        if d is not None:
            return d
    d, mask = _ce_dlogits(ns, x, t, ignore_index)
    return d * _ce_scale(ns, g, mask, reduction)


def _ce_jvp(ns, primals, tangents, out, ignore_index, reduction):
    x, t = primals
    d, mask = _ce_dlogits(ns, x, t, ignore_index)
    per_row = ns.sum(d * tangents[0], axis=(len(tuple(x.shape)) - 1,), keepdims=False)
    if reduction == "none":
        return per_row
    total = ns.sum(per_row, axis=None, keepdims=False)
    return total if reduction == "sum" else total / _safe_count(ns, ns.sum(mask, axis=None, keepdims=False))


def _ce_batch(vals, bdims, ignore_index, reduction):
    """Per-row losses of the whole batch (batch dim first), then reduced per example."""
    size = next(v.shape[b] for v, b in zip(vals, bdims) if b is not None)
    x, t = (TN.broadcast_to(v, shape=(size,) + tuple(v.shape)) if b is None else move_bdim(v, b, 0)
            for v, b in zip(vals, bdims))
    rows = bind(cross_entropy_p, (x, t), {"ignore_index": ignore_index, "reduction": "none"})
    if reduction == "none" or rows.ndim == 1:  # one row per example: nothing left to reduce
        if reduction == "mean" and rows.ndim == 1:
            mask = TN.ce_target_mask(t, num_classes=x.shape[-1], ignore_index=ignore_index, dtype=x.dtype)
            count = TN.sum(mask, axis=(1,), keepdims=False)  # an ignored example: nan
            rows = rows / _safe_count(TN, count) + _nan_if_zero(TN, count)
        return rows, 0
    total = TN.sum(rows, axis=(1,), keepdims=False)
    if reduction == "sum":
        return total, 0
    mask = TN.ce_target_mask(t, num_classes=x.shape[-1], ignore_index=ignore_index, dtype=x.dtype)
    count = TN.sum(mask, axis=(1, 2), keepdims=False)
    return total / _safe_count(TN, count) + _nan_if_zero(TN, count), 0


cross_entropy_p = defprim("cross_entropy", quiet(_ce_impl), vjp=(_ce_vjp, None), jvp=_ce_jvp, batch=_ce_batch)


def _fused_ce(input, target, weight, reduction, label_smoothing):
    """True when the fused primitive covers the call. See NOTE [Fused cross-entropy]."""
    return (weight is None and label_smoothing == 0.0 and reduction in ("none", "sum", "mean")
            and isinstance(input, Tensor) and input.ndim in (1, 2) and input.dtype.kind == "f"
            and target.dtype.kind in "iu" and tuple(target.shape) == tuple(input.shape[:-1]))


def _refuse_integer(name, input):
    """Integer or bool scores have no kernel in PyTorch (NotImplementedError); Lucid's class
    pick would truncate and give 0 silently."""
    dtype = getattr(input, "dtype", None)
    if dtype is not None and not (dtype.is_floating_point or dtype.is_complex):
        raise NotImplementedError(f"{name}: not implemented for an input of dtype {dtype} (shape "
                                  f"{tuple(input.shape)}); the scores must be floating point")


@autocast_composite("nll_loss")  # NOTE [Autocast]
def nll_loss(input, target, weight=None, size_average=None, ignore_index=-100, reduce=None,
             reduction="mean"):
    """Negative log likelihood: ``-w[t] * input[n, t]``; 'mean' divides by ``sum(w[t])``.

    ``input`` is (C,), (N, C) or (N, C, d1, ...) log-probabilities; ``target`` holds class
    indices; entries equal to ``ignore_index`` contribute nothing.

    Examples
    --------
    >>> import lucid, lucid.nn.functional as F
    >>> F.nll_loss(lucid.tensor([[-1.0, -2.0]]), lucid.tensor([1]))
    tensor(2.)
    """
    _refuse_complex("nll_loss", input)
    _refuse_integer("nll_loss", input)
    reduction = _legacy_reduction(size_average, reduce, reduction)
    target = _as_tensor(target)
    if input.ndim == 0:
        raise ValueError("nll_loss: expected an input of 1 or more dimensions (classes), got a 0-d tensor")
    if _is_half(input):  # See NOTE [Half composites]
        return _in_float32(nll_loss, input, target, weight, None, ignore_index, None, reduction)
    mask = _class_mask(target, input, weight, ignore_index, "nll_loss")
    return _pick(input, mask, reduction, "nll_loss")


@autocast_composite("cross_entropy")  # NOTE [Autocast]
def cross_entropy(input, target, weight=None, size_average=None, ignore_index=-100, reduce=None,
                  reduction="mean", label_smoothing=0.0):
    """Cross entropy between logits ``input`` and class indices or class probabilities.

    Parameters
    ----------
    input : Tensor of shape (C,), (N, C) or (N, C, d1, ...)
        Unnormalised logits.
    target : Tensor
        Integer class indices of shape (), (N,) or (N, d1, ...), or probabilities with the
        shape of ``input``.
    weight : Tensor of shape (C,), optional
        Per-class rescaling.
    ignore_index : int
        Target value that contributes nothing (class indices only).
    label_smoothing : float in [0, 1]
        Mix the target with the uniform distribution.

    Examples
    --------
    >>> import lucid, lucid.nn.functional as F
    >>> round(F.cross_entropy(lucid.tensor([[0.0, 0.0]]), lucid.tensor([0])).item(), 4)
    0.6931
    """
    _refuse_complex("cross_entropy", input, target)
    _refuse_integer("cross_entropy", input)
    reduction = _legacy_reduction(size_average, reduce, reduction)
    if not 0.0 <= label_smoothing <= 1.0:
        raise OpError(f"cross_entropy: label_smoothing must be between 0.0 and 1.0, got {label_smoothing}")
    target = _as_tensor(target)
    if input.ndim == 0:
        raise OpError("cross_entropy: expected an input of 1 or more dimensions (classes), got a 0-d tensor")
    if _is_half(input):  # See NOTE [Half composites]; the composite, as PyTorch's float16 path
        return _in_float32(_cross_entropy, input, target, weight, ignore_index, reduction, label_smoothing)
    if _fused_ce(input, target, weight, reduction, label_smoothing):  # See NOTE [Fused cross-entropy]
        return bind(cross_entropy_p, (input, target), {"ignore_index": ignore_index, "reduction": reduction})
    return _cross_entropy(input, target, weight, ignore_index, reduction, label_smoothing)


def _cross_entropy(input, target, weight, ignore_index, reduction, label_smoothing):
    class_dim = 1 if input.ndim > 1 else 0
    logp = log_softmax(input, class_dim)
    if target.dtype.kind == "f":
        if ignore_index != -100:
            raise OpError("cross_entropy: ignore_index is not supported for floating point target")
        return _soft_cross_entropy(logp, target, weight, reduction, label_smoothing, class_dim)
    mask = _class_mask(target, input, weight, ignore_index, "cross_entropy")
    out = _pick(logp, mask, reduction, "cross_entropy")
    if label_smoothing == 0.0:
        return out
    return _smoothed(out, logp, target, weight, ignore_index, reduction, label_smoothing, class_dim, mask)


def _smoothed(nll_out, logp, target, weight, ignore_index, reduction, eps, class_dim, mask):
    """PyTorch's label smoothing for class-index targets: mixes in ``-sum_c w_c logp_c / C``."""
    ncls = logp.shape[class_dim]
    valid = (target != ignore_index).to(logp.dtype)
    wl = logp
    if weight is not None:
        shape = [1] * logp.ndim
        shape[class_dim] = ncls
        wl = logp * weight.detach().to(logp.dtype).reshape(tuple(shape))
    smooth = -wl.sum(class_dim) * valid
    if reduction == "mean":
        total = mask.sum() if weight is not None else valid.sum()
        smooth = smooth.sum() / _lucid().where(total == 0, 1.0, total)  # See NOTE [Nothing to average]
    else:
        smooth = _reduce(smooth, reduction, "cross_entropy")
    return (1.0 - eps) * nll_out + smooth * (eps / ncls)


def _soft_cross_entropy(logp, target, weight, reduction, eps, class_dim):
    if tuple(target.shape) != tuple(logp.shape):
        raise OpError(
            f"cross_entropy: probability targets must have the input's shape {tuple(logp.shape)}, "
            f"got {tuple(target.shape)}"
        )
    ncls = logp.shape[class_dim]
    if eps > 0:
        target = target * (1.0 - eps) + eps / ncls
    prod = logp * target
    if weight is not None:
        shape = [1] * logp.ndim
        shape[class_dim] = ncls
        prod = prod * weight.reshape(tuple(shape))
    loss = -prod.sum(class_dim)
    return _reduce(loss, reduction, "cross_entropy")


_BCE_UNSAFE = (
    "binary_cross_entropy and BCELoss are unsafe to autocast. Many models use a sigmoid layer right before "
    "the binary cross entropy layer; in this case, combine the two layers using binary_cross_entropy_with_logits "
    "or BCEWithLogitsLoss, which are safe to autocast.")


def _clamped_logs(ns, p):
    """``log p`` and ``log(1 - p)``, each at least -100 (PyTorch's clamp: finite at 0 and 1)."""
    lp, l1mp = ns.log(p), ns.log(1 - p)
    return ns.where(lp < -100, -100.0, lp), ns.where(l1mp < -100, -100.0, l1mp)


def _bce_impl(p, t):
    lp, l1mp = xp.log(p), xp.log(1 - p)
    lp, l1mp = xp.where(lp < -100, -100.0, lp), xp.where(l1mp < -100, -100.0, l1mp)
    return (-(t * lp + (1 - t) * l1mp)).astype(p.dtype, copy=False)


def _bce_dp(ns, p, t, out):
    # PyTorch's ``(p - t) / max((1 - p) p, 1e-12)``: 0 at p == t == 0 or 1, where the clamped
    # logs' own derivative is 0 * inf = nan; equal to t/p - ... (and its derivative) inside (0, 1).
    d = (1 - p) * p
    return (p - t) / ns.where(d < _BCE_EPS, _BCE_EPS, d)


def _bce_dt(ns, p, t, out):
    lp, l1mp = _clamped_logs(ns, p)
    return l1mp - lp


_BCE_EPS = float(np.float32(1e-12))  # PyTorch's EPSILON, a C++ float
# A primitive so the gradient is PyTorch's at the boundary (a composite of clamped logs gives nan).
_bce_p = _binary("binary_cross_entropy", quiet(_bce_impl, 2), _bce_dp, _bce_dt)


@autocast_composite("binary_cross_entropy")  # NOTE [Autocast]
def binary_cross_entropy(input, target, weight=None, size_average=None, reduce=None,
                         reduction="mean"):
    """``-(t log p + (1 - t) log(1 - p))`` with the logs clamped at -100 (as PyTorch does).

    Examples
    --------
    >>> import lucid, lucid.nn.functional as F
    >>> round(F.binary_cross_entropy(lucid.tensor([0.5]), lucid.tensor([1.0])).item(), 4)
    0.6931
    """
    _refuse_complex("binary_cross_entropy", input, target)
    if AUTOCAST_HOOK[0] is not None:  # PyTorch refuses it in a region (NOTE [Autocast])
        from ...amp.autocast_mode import refuse_if_autocast

        refuse_if_autocast(input, _BCE_UNSAFE)
    reduction = _legacy_reduction(size_average, reduce, reduction)
    if _is_half(input):  # See NOTE [Half composites]
        return _in_float32(binary_cross_entropy, input, target, weight, reduction=reduction)
    if tuple(target.shape) != tuple(input.shape):
        raise ValueError(
            f"binary_cross_entropy: using a target size ({tuple(target.shape)}) that is different to "
            f"the input size ({tuple(input.shape)}) is not supported"
        )
    # Concrete CPU values only (not in a transform; on a device the check would read back every
    # call: PyTorch's CUDA kernel asserts on the device instead).
    if isinstance(input, Tensor) and input._level == 0 and input._data.__class__ is np.ndarray:
        arr = input._data
        if arr.size and (arr.min() < 0 or arr.max() > 1):
            raise RuntimeError("binary_cross_entropy: all elements of input should be between 0 and 1")
    loss = bind(_bce_p, (input, _as_tensor(target, like=input)), {})
    if weight is not None:
        loss = loss * weight
    return _reduce(loss, reduction, "binary_cross_entropy")


@autocast_composite("binary_cross_entropy_with_logits")  # NOTE [Autocast]
def binary_cross_entropy_with_logits(input, target, weight=None, size_average=None, reduce=None,
                                     reduction="mean", pos_weight=None):
    """Sigmoid + binary cross entropy in one stable formula.

    ``loss = (1 - t) x + (1 + (pos_weight - 1) t) softplus(-x)``, which never overflows.

    Examples
    --------
    >>> import lucid, lucid.nn.functional as F
    >>> round(F.binary_cross_entropy_with_logits(lucid.tensor([0.0]), lucid.tensor([1.0])).item(), 4)
    0.6931
    """
    _refuse_complex("binary_cross_entropy_with_logits", input, target)
    reduction = _legacy_reduction(size_average, reduce, reduction)
    if tuple(target.shape) != tuple(input.shape):
        raise ValueError(
            f"binary_cross_entropy_with_logits: target size ({tuple(target.shape)}) must be the same as "
            f"input size ({tuple(input.shape)})"
        )
    # PyTorch's float16 composite: ``-logsigmoid(x)`` rounded once, the rest float16 ops
    sp = _in_float32(_softplus, -input) if _is_half(input) else _softplus(-input)
    if pos_weight is not None:
        loss = (1.0 - target) * input + (1.0 + (pos_weight - 1.0) * target) * sp
    else:
        loss = (1.0 - target) * input + sp
    if weight is not None:
        loss = loss * weight
    return _reduce(loss, reduction, "binary_cross_entropy_with_logits")


@autocast_composite("kl_div")  # NOTE [Autocast]
def kl_div(input, target, size_average=None, reduce=None, reduction="mean", log_target=False):
    """KL divergence with ``input`` given as log-probabilities: ``t (log t - input)``.

    ``reduction='batchmean'`` divides the sum by the batch size (the mathematically
    correct KL); 'mean' divides by the number of elements (PyTorch's default, with a warning).
    """
    _refuse_complex("kl_div", input, target)
    reduction = _legacy_reduction(size_average, reduce, reduction)
    lucid = _lucid()
    if log_target:
        loss = lucid.exp(target) * (target - input)
    else:
        # PyTorch's xlogy(t, t): 0 at t == 0 only; a negative or nan target gives nan (it gave
        # a finite loss silently)
        zero = target == 0
        safe = lucid.where(zero, 1.0, target)
        loss = lucid.where(zero, 0.0, target * lucid.log(safe)) - target * input
    if reduction == "batchmean":
        return loss.sum() / (input.shape[0] if input.ndim else 1)
    if reduction == "mean":
        warn_at_caller("reduction: 'mean' divides the total loss by both the batch size and the support "
                       "size. 'batchmean' divides only by the batch size, and aligns with the KL div math "
                       "definition.")
    return _reduce(loss, reduction, "kl_div")


@autocast_composite("soft_margin_loss")  # NOTE [Autocast]
def soft_margin_loss(input, target, size_average=None, reduce=None, reduction="mean"):
    """``log(1 + exp(-t x))``."""
    _refuse_complex("soft_margin_loss", input, target)
    target = _in_input_dtype(target, input)
    if _is_half(input):  # PyTorch's float16 composite ``log1p(exp(-t x))``: one rounding per op
        lucid = _lucid()
        return _reduce(lucid.log1p(lucid.exp(-target * input)), _legacy_reduction(size_average, reduce, reduction),
                       "soft_margin_loss")
    return _reduce(_softplus(-target * input),
                   _legacy_reduction(size_average, reduce, reduction), "soft_margin_loss")


@autocast_composite("poisson_nll_loss")  # NOTE [Autocast]
def poisson_nll_loss(input, target, log_input=True, full=False, size_average=None, eps=1e-8,
                     reduce=None, reduction="mean"):
    """Poisson negative log likelihood (``full`` adds the Stirling term)."""
    lucid = _lucid()
    if log_input:
        loss = lucid.exp(input) - target * input
    else:
        loss = input - target * lucid.log(input + eps)
    if full:
        safe = lucid.where(target > 1, target, 2.0)
        stirling = safe * lucid.log(safe) - safe + 0.5 * lucid.log(2 * 3.141592653589793 * safe)
        loss = loss + lucid.where(target > 1, stirling, 0.0)
    return _reduce(loss, _legacy_reduction(size_average, reduce, reduction), "poisson_nll_loss")


@autocast_float32("cosine_similarity")  # NOTE [Autocast]
def cosine_similarity(x1, x2, dim=1, eps=1e-8):
    """``sum(x1 / max(||x1||, eps) * x2 / max(||x2||, eps))`` along ``dim``, after broadcasting
    ``x1`` and ``x2`` to one shape (as PyTorch).

    The clamps act on the values only; the gradient is that of the unclamped norms (PyTorch's
    convention), and it is finite at a zero vector (the norm's derivative is 0 there).

    Examples
    --------
    >>> import lucid, lucid.nn.functional as F
    >>> round(F.cosine_similarity(lucid.tensor([[1.0, 0.0]]), lucid.tensor([[1.0, 1.0]])).item(), 4)
    0.7071
    """
    _refuse_complex("cosine_similarity", x1, x2)
    lucid = _lucid()
    x1, x2 = _as_tensor(x1), _as_tensor(x2)
    try:
        shape = tuple(np.broadcast_shapes(tuple(x1.shape), tuple(x2.shape)))
    except ValueError:
        raise RuntimeError(f"cosine_similarity: the shapes {tuple(x1.shape)} and {tuple(x2.shape)} "
                           "can't be broadcast together") from None
    x1, x2 = lucid.broadcast_to(x1, shape), lucid.broadcast_to(x2, shape)
    return ((x1 / _clamp_value(x1, dim, eps)) * (x2 / _clamp_value(x2, dim, eps))).sum(dim)


def _clamp_value(x, dim, eps):
    """``||x||`` along ``dim`` (kept), its value clamped below at ``eps``, its gradient the norm's.
    A float16 norm is accumulated in float32 and rounded once (PyTorch's composite divides by
    that float16 norm); See NOTE [Half composites]."""
    if _is_half(x):
        return _in_float32(_clamp_value, x, dim, eps)
    n = _lucid().norm(x, 2, dim, keepdim=True)
    return n + (_lucid().clamp(n, min=eps) - n).detach()


@autocast_composite("margin_ranking_loss")  # NOTE [Autocast]
def margin_ranking_loss(input1, input2, target, margin=0.0, size_average=None, reduce=None,
                        reduction="mean"):
    _refuse_complex("margin_ranking_loss", input1, input2, target)
    if not input1.ndim == input2.ndim == _as_tensor(target).ndim:
        raise RuntimeError(f"margin_ranking_loss: all input tensors should have the same dimension, got sizes "
                           f"{tuple(input1.shape)}, {tuple(input2.shape)} and {tuple(_as_tensor(target).shape)}")
    loss = _lucid().relu(-target * (input1 - input2) + margin)
    return _reduce(loss, _legacy_reduction(size_average, reduce, reduction), "margin_ranking_loss")


@autocast_composite("hinge_embedding_loss")  # NOTE [Autocast]
def hinge_embedding_loss(input, target, margin=1.0, size_average=None, reduce=None, reduction="mean"):
    _refuse_complex("hinge_embedding_loss", input, target)
    lucid = _lucid()
    # PyTorch's two terms: ``x`` where the target is not -1, the margin term where it is not 1
    # (a target outside {1, -1} gets both)
    loss = lucid.where(target != -1, input, 0.0) + lucid.where(target != 1, lucid.relu(margin - input), 0.0)
    return _reduce(loss, _legacy_reduction(size_average, reduce, reduction), "hinge_embedding_loss")
