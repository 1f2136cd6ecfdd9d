"""Gradient clipping, in place on ``.grad`` (outside the graph)."""
from __future__ import annotations

import functools
import math

import numpy as np

from ..._core import dtypes as _dtypes
from ..._core.backend import device_of_array, namespace_of, on_device, to_device
from ..._core.tensor import Tensor, _wrap

__all__ = ["clip_grad_norm_", "clip_grad_value_", "clip_grad_norm", "get_total_norm", "clip_grads_with_norm_"]


class _ComplexClampError(TypeError, NotImplementedError):
    """PyTorch raises NotImplementedError (no complex clamp) where Lucid raised TypeError: both keep
    callers working."""


def _grads(parameters):
    if isinstance(parameters, Tensor):
        parameters = [parameters]
    return [p._grad for p in parameters if p._grad is not None]


def get_total_norm(tensors, norm_type=2.0, error_if_nonfinite=False, foreach=None):
    """The ``norm_type``-norm of all ``tensors`` viewed as one vector (floating or complex
    tensors only, as PyTorch's).

    Examples
    --------
    >>> import lucid
    >>> from lucid.nn.utils import get_total_norm
    >>> get_total_norm([lucid.tensor([3.0]), lucid.tensor([4.0])]).item()
    5.0
    """
    if isinstance(tensors, Tensor):
        tensors = [tensors]
    norm_type = float(norm_type)
    # a DTensor's ``_data`` is this rank's piece: its norm is that of the whole value, gathered
    # (a collective: every rank clips, as in PyTorch)
    arrays = [(t.full_tensor().detach() if getattr(t, "_spec", None) is not None else t)._data
              if type(t) is not Tensor else t._data for t in tensors]
    if not arrays:
        return _wrap(np.array(0.0, np.float32))
    for a in arrays:
        if _dtypes.kind_of(a.dtype) not in "fc":  # as PyTorch's vector_norm (NumPy would count ints and bools)
            raise RuntimeError(f"get_total_norm: expected floating point or complex tensors, got {a.dtype} "
                               f"(shape {tuple(a.shape)})")
    dtype = functools.reduce(_dtypes._promote_np, [a.dtype for a in arrays])  # PyTorch's (bfloat16 too)
    if _dtypes.BF16 is not None:  # bfloat16 is summed in float32, its total rounded once (NOTE [bfloat16])
        arrays = [a.astype(np.float32) if a.dtype == _dtypes.BF16 else a for a in arrays]
    if dtype.kind == "c":  # the norm of complex gradients is real (|g|), as in PyTorch
        dtype = _dtypes.np_finfo(dtype).dtype
    if any(a.__class__ is not np.ndarray for a in arrays):  # See NOTE [Clipping on a device]
        total = _device_total(arrays, norm_type, dtype)
        if error_if_nonfinite and not math.isfinite(float(total)):  # PyTorch reads it back here too
            raise RuntimeError(_NONFINITE.format(norm_type=norm_type))
        return _wrap(total)
    if norm_type == math.inf:
        total = max(float(np.max(np.abs(a))) if a.size else 0.0 for a in arrays)
    elif norm_type == 2.0:
        total = math.sqrt(sum(float(np.vdot(a.ravel(), a.ravel()).real) for a in arrays))
    else:  # See NOTE [Norm of norms]
        with np.errstate(divide="ignore"):
            total = _host_norm(np.array([_host_norm(np.abs(a), norm_type) for a in arrays]), norm_type)
    if error_if_nonfinite and not math.isfinite(total):
        raise RuntimeError(_NONFINITE.format(norm_type=norm_type))
    return _wrap(np.array(total, dtype=dtype))


# NOTE [Norm of norms]
# As PyTorch, the total is the norm of the per-tensor norms. For p > 0 (and p < 0) that is the
# norm of all entries as one vector, but not for p = 0 (the count of tensors with a nonzero entry)
# or p = -inf (the smallest entry in absolute value), which PyTorch computes this way too.
def _host_norm(a, p):
    """``vector_norm(a, p)`` of a host array of absolute values, as a Python float."""
    if p == -math.inf:
        return float(a.min()) if a.size else math.inf
    if p == 0:
        return float(np.count_nonzero(a))
    return float(np.sum(a ** p)) ** (1.0 / p)


_NONFINITE = ("The total norm of order {norm_type} for gradients from `parameters` is non-finite, so it "
              "cannot be clipped. To disable this error and scale the gradients by the non-finite norm "
              "anyway, set `error_if_nonfinite=False`")


# NOTE [Clipping on a device]
# On the CPU the norm is a Python float and the gradients are scaled only when the factor is
# below 1. On a device that test would read the norm back every step, so, as PyTorch does, the
# norm stays a 0-d device array and every gradient is multiplied by min(1, max_norm / (norm +
# 1e-6)) there (a factor of 1 changes nothing; a NaN norm gives NaN gradients either way).
# Gradients on several devices (model parallelism) are normed per device, on that device, and
# the partial norms combined on the first one's, as PyTorch groups them.
def _device_total(arrays, norm_type, dtype):
    """The joint norm of ``arrays`` as a 0-d array of ``dtype`` on the first device array's device."""
    groups = {}
    for a in arrays:
        groups.setdefault(device_of_array(a), []).append(a)
    totals = []
    for group in groups.values():
        with on_device(group[0]):  # NOTE [Several devices]
            totals.append(_device_total_here(group, norm_type, dtype))
    first = next(d for d in groups if d.type != "cpu")
    if len(totals) == 1:
        return totals[0]
    parts = [to_device(t, first) for t in totals]
    with on_device(parts[0]):
        ns = namespace_of(parts[0])
        return _device_norm(ns, ns.stack(parts), norm_type)


def _device_total_here(arrays, norm_type, dtype):
    ns = namespace_of(arrays[0])
    arrays = [a for a in arrays if a.size]
    if not arrays:
        return ns.zeros((), dtype=dtype)
    if norm_type == 2.0:
        total = ns.sqrt(ns.stack([ns.vdot(a.ravel(), a.ravel()).real for a in arrays]).sum())
    else:  # See NOTE [Norm of norms]
        total = _device_norm(ns, ns.stack([_device_norm(ns, ns.abs(a), norm_type) for a in arrays]), norm_type)
    return total.astype(dtype, copy=False)


def _device_norm(ns, a, p):
    """``vector_norm(a, p)`` of a device array of absolute values, as a 0-d device array."""
    if p == math.inf:
        return a.max()
    if p == -math.inf:
        return a.min()
    if p == 0:
        return (a != 0).sum().astype(a.dtype)
    return (a ** p).sum() ** (1.0 / p)


def _scale_on_device(grads, max_norm, total):
    with on_device(total):
        coef = namespace_of(total).minimum(float(max_norm) / (total + 1e-6), 1.0)
    coefs = {device_of_array(coef): coef}  # the factor, copied once to each gradient's device
    for g in grads:
        dev = device_of_array(g._data)
        factor = coefs.get(dev)
        if factor is None:
            factor = coefs[dev] = to_device(coef, dev)
        with np.errstate(invalid="ignore"), on_device(g):  # inf * 0 is nan, silently (as PyTorch)
            g._data = (g._data * factor).astype(g.dtype, copy=False)
        g._version[0] += 1


def clip_grad_norm_(parameters, max_norm, norm_type=2.0, error_if_nonfinite=False, foreach=None):
    """Scale all gradients so their joint ``norm_type``-norm is at most ``max_norm``.

    Returns
    -------
    Tensor
        The total norm of the gradients before clipping.

    Examples
    --------
    >>> import lucid
    >>> from lucid.nn.utils import clip_grad_norm_
    >>> p = lucid.tensor([3.0, 4.0], requires_grad=True)
    >>> (p * lucid.tensor([3.0, 4.0])).sum().backward()
    >>> clip_grad_norm_([p], 1.0).item(), [round(v, 2) for v in p.grad.tolist()]
    (5.0, [0.6, 0.8])
    """
    grads = _grads(parameters)
    total = get_total_norm(grads, norm_type, error_if_nonfinite)
    if grads and total._data.__class__ is not np.ndarray:  # See NOTE [Clipping on a device]
        _scale_on_device(grads, max_norm, total._data)
        return total
    coef = float(max_norm) / (float(total.item()) + 1e-6)
    if coef < 1.0 or math.isnan(coef):
        for g in grads:
            with np.errstate(invalid="ignore"):  # an inf gradient times 0 is nan, silently (as PyTorch)
                g._data = (g._data * coef).astype(g.dtype, copy=False)
            g._version[0] += 1
    return total


def clip_grad_norm(parameters, max_norm, norm_type=2.0, error_if_nonfinite=False, foreach=None):
    """Deprecated alias of :func:`clip_grad_norm_`; warns (``FutureWarning``) as PyTorch's does."""
    from ..._runtime import warn_at_caller

    warn_at_caller("`lucid.nn.utils.clip_grad_norm` is now deprecated in favor of "
                   "`lucid.nn.utils.clip_grad_norm_`.", FutureWarning)
    return clip_grad_norm_(parameters, max_norm, norm_type, error_if_nonfinite, foreach)


def clip_grad_value_(parameters, clip_value, foreach=None):
    """Clamp every gradient entry to ``[-clip_value, clip_value]`` in place.

    Examples
    --------
    >>> import lucid
    >>> from lucid.nn.utils import clip_grad_value_
    >>> p = lucid.zeros(3, requires_grad=True)
    >>> p.grad = lucid.tensor([-3.0, 0.5, 2.0])
    >>> clip_grad_value_([p], 1.0)
    >>> p.grad.tolist()
    [-1.0, 0.5, 1.0]
    """
    clip_value = float(clip_value)
    grads = _grads(parameters)
    for g in grads:  # all checked before any is changed
        if g.dtype.kind == "c":
            raise _ComplexClampError(f"clip_grad_value_: complex gradients (dtype {g.dtype}, shape "
                                     f"{tuple(g.shape)}) are not supported, as in PyTorch (clamping has no "
                                     "meaning for complex numbers; clip_grad_norm_ works)")
    for g in grads:
        with on_device(g):
            g._data = np.clip(g._data, -clip_value, clip_value)  # dispatches to the gradient's device
        g._version[0] += 1


def clip_grads_with_norm_(parameters, max_norm, total_norm, foreach=None):
    """Scale every gradient by ``min(1, max_norm / (total_norm + 1e-6))`` in place (the second
    half of :func:`clip_grad_norm_`, with a norm from :func:`get_total_norm`).

    Examples
    --------
    >>> import lucid
    >>> from lucid.nn.utils import clip_grads_with_norm_, get_total_norm
    >>> p = lucid.tensor([3.0, 4.0], requires_grad=True)
    >>> (p * lucid.tensor([3.0, 4.0])).sum().backward()
    >>> clip_grads_with_norm_([p], 1.0, get_total_norm([p.grad]))
    >>> [round(v, 2) for v in p.grad.tolist()]
    [0.6, 0.8]
    """
    grads = _grads(parameters)
    if isinstance(total_norm, Tensor) and total_norm._data.__class__ is not np.ndarray:
        _scale_on_device(grads, max_norm, total_norm._data)  # See NOTE [Clipping on a device]
        return
    total = float(total_norm.item() if isinstance(total_norm, Tensor) else total_norm)
    coef = float(max_norm) / (total + 1e-6)
    if coef < 1.0 or math.isnan(coef):
        for g in grads:
            with np.errstate(invalid="ignore"):  # an inf gradient times 0 is nan, silently (as PyTorch)
                g._data = (g._data * coef).astype(g.dtype, copy=False)
            g._version[0] += 1
