"""NaN-aware and order statistics (issue 10): nansum, nanmean, count_nonzero, aminmax,
logcumsumexp, cov, corrcoef, median, nanmedian, quantile, nanquantile, kthvalue, mode;
counting and searching: histc, histogram, bincount, unique, unique_consecutive, searchsorted,
bucketize, isin.

Differentiable ones are composites of sort/gather/where/sum/logaddexp... so their rules come
from those primitives. ``searchsorted`` is a gradient-free primitive. The ops whose *output
shape* depends on the values (unique, unique_consecutive, bincount, histogram/histc with
data-derived ranges) run eagerly on concrete values and refuse tracers, as PyTorch's do.
"""
from __future__ import annotations

import collections

import numpy as np

from ..._core import dtypes
from ..._core.backend import has_values, host_fallback, is_array, runs_on_operands_device, xp
from ..._core.primitive import autocast_composite, bind, defprim
from ..._core.tensor import Tensor, _wrap, tensor_method
from ..elementwise.arithmetic import _F16, _F32, cast as _cast
from .._family import _as_tensor, move_bdim, normalize_axis
from ._common import EmptyReductionError, norm_axes
from ..numpy_aliases import REQUIRED, numpy_axis, numpy_keepdims


def _L():
    import lucid

    return lucid


_aminmax = collections.namedtuple("aminmax", ["min", "max"])
_values_indices = {n: collections.namedtuple(n, ["values", "indices"])
                   for n in ("median", "nanmedian", "kthvalue", "mode")}


def _float_input(x, op):
    x = _as_tensor(x)
    if x.dtype.kind not in "fc":
        raise RuntimeError(f"{op}: expected a floating point input, got {x.dtype}")
    return x


# ------------------------------------------------------------------------ nan-aware sums


@tensor_method("nansum")
def nansum(input, dim=None, keepdim=False, *, dtype=None, axis=None, keepdims=None):
    """Sum treating NaN as zero.

    Examples
    --------
    >>> import lucid
    >>> lucid.nansum(lucid.tensor([1.0, float("nan"), 2.0])).item()
    3.0
    """
    if axis is not None:  # See NOTE [NumPy keyword aliases]
        dim = numpy_axis("nansum", dim, axis, None)
    if keepdims is not None:
        keepdim = numpy_keepdims("nansum", keepdim, keepdims)
    L = _L()
    x = _as_tensor(input)
    if x.dtype.kind in "fc":
        x = L.where(x.isnan(), 0.0, x)
    return L.sum(x, dim, keepdim=keepdim, dtype=dtype)


@tensor_method("nanmean")
def nanmean(input, dim=None, keepdim=False, *, dtype=None, axis=None, keepdims=None):
    """Mean over the non-NaN elements (NaN where all are NaN).

    Examples
    --------
    >>> import lucid
    >>> lucid.nanmean(lucid.tensor([1.0, float("nan"), 2.0])).item()
    1.5
    """
    if axis is not None:  # See NOTE [NumPy keyword aliases]
        dim = numpy_axis("nanmean", dim, axis, None)
    if keepdims is not None:
        keepdim = numpy_keepdims("nanmean", keepdim, keepdims)
    L = _L()
    x = _float_input(input, "nanmean")
    if dtype is not None:
        if dtypes.to_dtype(dtype).kind not in "fc":
            raise RuntimeError(f"nanmean: could not infer output dtype; dtype must be floating point or complex, "
                               f"got {dtype}")
        x = x.to(dtype)
    count = (~x.isnan()).sum(dim, keepdim=keepdim).to(x.dtype)
    return nansum(x, dim, keepdim) / count


@tensor_method("count_nonzero")
def count_nonzero(input, dim=None, *, axis=None):
    """Number of non-zero elements over ``dim`` (int64).

    Examples
    --------
    >>> import lucid
    >>> lucid.count_nonzero(lucid.tensor([[0, 1], [2, 0]]), dim=0).tolist()
    [1, 1]
    """
    if axis is not None:  # See NOTE [NumPy keyword aliases]
        dim = numpy_axis("count_nonzero", dim, axis, None)
    return (_as_tensor(input) != 0).sum(dim)


@tensor_method("aminmax")
def aminmax(input, *, dim=None, keepdim=False, axis=None, keepdims=None):
    """``(min, max)`` over ``dim`` (all elements when None).

    Examples
    --------
    >>> import lucid
    >>> lucid.aminmax(lucid.tensor([3, 1, 2]))
    aminmax(min=tensor(1), max=tensor(3))
    """
    if axis is not None:  # See NOTE [NumPy keyword aliases]
        dim = numpy_axis("aminmax", dim, axis, None)
    if keepdims is not None:
        keepdim = numpy_keepdims("aminmax", keepdim, keepdims)
    x = _as_tensor(input)
    # Only an empty reduced dim has no extreme: (2, 0) reduced over dim 0 is simply empty.
    if x.numel() == 0 and (dim is None or x.ndim == 0 or x.shape[normalize_axis(dim, x.ndim, "aminmax")] == 0):
        raise EmptyReductionError(f"aminmax: cannot compute aminmax of an empty tensor (shape {tuple(x.shape)}, "
                                  f"dim {dim}): the operation has no identity")
    d = () if dim is None else dim
    L = _L()
    if dim is None:
        return _aminmax(L.amin(x, keepdim=keepdim) if keepdim else L.amin(x),
                        L.amax(x, keepdim=keepdim) if keepdim else L.amax(x))
    return _aminmax(L.amin(x, d, keepdim), L.amax(x, d, keepdim))


@tensor_method("logcumsumexp")
def logcumsumexp(input, dim=REQUIRED, *, axis=None):
    """``log(cumsum(exp(input)))`` along ``dim``, computed stably.

    A log-space prefix scan (``logaddexp`` of the running result with itself shifted by
    1, 2, 4, ... positions), so no element under- or overflows whatever the range.

    Examples
    --------
    >>> import lucid
    >>> lucid.logcumsumexp(lucid.tensor([-1000.0, 0.0]), 0).tolist()
    [-1000.0, 0.0]
    """
    if axis is not None or dim is REQUIRED:  # See NOTE [NumPy keyword aliases]
        dim = numpy_axis("logcumsumexp", dim, axis, REQUIRED)
    L = _L()
    x = _as_tensor(input)
    if x.dtype.kind not in "fc":  # NotImplementedError (a RuntimeError), as PyTorch's kernel table says
        raise NotImplementedError(f"logcumsumexp: not implemented for {x.dtype} input (use a floating point one)")
    if x.ndim == 0:
        return x.clone()
    if x.dtype == _F16:  # the scan in float32, rounded once (NOTE [Half primitives])
        return _cast(logcumsumexp(_cast(x, _F32), dim), _F16)
    d = normalize_axis(dim, x.ndim, "logcumsumexp")
    n = x.shape[d]
    add = _complex_logaddexp if x.dtype.kind == "c" else L.logaddexp
    y, k = x, 1
    while k < n:
        pad = [0, 0] * (x.ndim - 1 - d) + [k, 0]
        shifted = L.pad(y, tuple(pad), value=float("-inf"))[(slice(None),) * d + (slice(0, n),)]
        y = add(y, shifted)
        k *= 2
    return y


def _complex_logaddexp(a, b):
    """``log(exp(a) + exp(b))`` for complex tensors, PyTorch's way: the operand with the larger
    real part plus ``log1p(exp(min - max))`` (so nothing overflows, and the imaginary part is
    the larger operand's, adjusted by less than pi/2); ``-inf`` (the scan's padding) stays ``-inf``.
    Composed of holomorphic ops and selections, so its gradients follow NOTE [Complex gradients].
    (``logaddexp`` itself refuses complex input, as PyTorch's does.)"""
    L = _L()
    a_big = a.real >= b.real
    mx, mn = L.where(a_big, a, b), L.where(a_big, b, a)
    rmx = mx.real
    empty = L.isinf(rmx) & (rmx < 0)  # both -inf: exp(-inf) + exp(-inf) = 0, and mn - mx would be nan
    zero = L.zeros_like(mx)
    safe_mx, safe_mn = L.where(empty, zero, mx), L.where(empty, zero, mn)
    return L.where(empty, mx, safe_mx + L.log1p(L.exp(safe_mn - safe_mx)))


# ------------------------------------------------------------------------- covariance


def cov(input, *, correction=1, fweights=None, aweights=None):
    """Covariance of the rows (variables) of ``input`` over its columns (observations).

    ``fweights`` (integer repeat counts) and ``aweights`` (observation weights) are 1-d with one
    entry per column; as in PyTorch, a single variable gives a 0-d result, and float64
    ``aweights`` promote a float32 input. Negative weights are refused where their values are
    on the host (reading a device tensor back would cost a transfer every call).

    Examples
    --------
    >>> import lucid
    >>> lucid.cov(lucid.tensor([[0.0, 1.0, 2.0], [2.0, 1.0, 0.0]])).tolist()
    [[1.0, -1.0], [-1.0, 1.0]]
    >>> lucid.cov(lucid.tensor([0.0, 1.0, 3.0]), fweights=lucid.tensor([1, 1, 2])).item()
    2.25
    """
    x = _as_tensor(input)
    if x.ndim > 2:
        raise RuntimeError(f"cov: expected a 1-d or 2-d input, got shape {tuple(x.shape)}")
    x = x if x.dtype.kind in "fc" else x.to(dtypes.get_default_dtype())
    x2 = x.reshape(1, -1) if x.ndim < 2 else x
    n = x2.shape[1]
    fw = _cov_weights("fweights", fweights, n, "iu")
    aw = _cov_weights("aweights", aweights, n, "f")
    if aw is not None and dtypes.result_type(x, aw) != x.dtype:  # float64 aweights promote float32 x
        x2 = x2.to(dtypes.as_lucid(dtypes.result_type(x, aw)))
    w = fw if aw is None else aw if fw is None else fw * aw
    if w is None:
        mean = x2.mean(1, keepdim=True)
        norm = max(n - correction, 0)
        xw = x2 - mean
    else:
        # the weights stay real (a complex input's normaliser is real, and clamp refuses complex)
        w = w.to(x2.real.dtype if x2.dtype.kind == "c" else x2.dtype)
        wsum = w.sum()
        mean = (x2 * w).sum(1, keepdim=True) / wsum
        if aw is None:
            norm = wsum - correction
        else:
            norm = wsum - correction * (w * aw.to(w.dtype)).sum() / wsum
        norm = norm.clamp(min=0)
        xw = (x2 - mean) * w
    xc = x2 - mean
    c = (xw @ xc.conj().t() if x2.dtype.kind == "c" else xw @ xc.t()) / norm
    return c.squeeze()


def _cov_weights(name, wt, n, kinds):
    if wt is None:
        return None
    wt = _as_tensor(wt)
    if wt.ndim > 1 or (wt.numel() != n):
        raise RuntimeError(f"cov: {name} must be 1-d with {n} elements, got shape {tuple(wt.shape)}")
    if wt.dtype.kind not in kinds:
        what = "an integral" if kinds == "iu" else "a floating point"
        raise RuntimeError(f"cov: expected {name} to have {what} dtype, got {wt.dtype}")
    if type(wt) is Tensor and wt._data.__class__ is np.ndarray and (wt._data < 0).any():
        raise RuntimeError(f"cov: {name} cannot be negative")
    return wt.reshape(-1)


def corrcoef(input):
    """Pearson correlation coefficients of the rows of ``input`` (clipped to [-1, 1]).

    Examples
    --------
    >>> import lucid
    >>> lucid.corrcoef(lucid.tensor([[0.0, 1.0, 2.0], [0.0, 2.0, 4.0]])).tolist()
    [[1.0, 1.0], [1.0, 1.0]]
    """
    L = _L()
    c = cov(input)
    if c.ndim == 0:
        return c / c
    s = L.diagonal(c).sqrt()
    r = c / s[:, None] / s[None, :]
    return r.clamp(-1, 1) if r.dtype.kind == "f" else r


# ----------------------------------------------------------------- order statistics


def _move_last(x, dim, op):
    """``(x with dim last, dim)``; dim None flattens."""
    if dim is None:
        return x.reshape(-1), None
    d = normalize_axis(dim, x.ndim, op)
    return x.movedim(d, -1) if x.ndim else x.reshape(1), d


def _restore(v, x, d, keepdim):
    """A result computed over the last dim (removed) back in place of ``d``."""
    if d is None:
        return v.reshape((1,) * x.ndim) if keepdim else v.reshape(())
    if keepdim and x.ndim:
        return v.unsqueeze(d)
    return v


def _select_sorted(op, input, dim, keepdim, pick, nan_skip):
    L = _L()
    x = _as_tensor(input)
    xs, d = _move_last(x, dim, op)
    n = xs.shape[-1]
    if n == 0:
        raise EmptyReductionError(f"{op}: can't compute it over an empty dimension (shape {tuple(x.shape)}, dim {dim})")
    vals, idx = L.sort(xs, -1)
    if x.dtype.kind in "fc":
        nan = xs.isnan()
        cnt = (~nan).sum(-1, keepdim=True)
    else:
        nan, cnt = None, None
    k = pick(n, cnt, x.device)  # int64 positions in the sorted order, (..., 1) or (1,)
    k = k.reshape((1,) * (vals.ndim - k.ndim) + tuple(k.shape)).expand(*(tuple(vals.shape[:-1]) + (1,)))
    v, i = L.gather(vals, -1, k).squeeze(-1), L.gather(idx, -1, k).squeeze(-1)
    if nan is not None and not nan_skip:  # a NaN anywhere makes the result NaN, at the first NaN's index
        has = nan.any(-1)
        first = L.gather(idx, -1, cnt.clamp(max=n - 1)).squeeze(-1)
        i = L.where(has, first, i)
        # selected at that index (not a NaN constant), so the gradient reaches it, as in PyTorch
        v = L.gather(xs, -1, i.unsqueeze(-1)).squeeze(-1)
    return _restore(v, x, d, keepdim), _restore(i, x, d, keepdim)


def _lower_middle(n, cnt, device):
    L = _L()
    if cnt is None:
        return L.full((1,), (n - 1) // 2, dtype=L.int64, device=device)
    return L.clamp(L.floor_divide(cnt - 1, 2), min=0)


@tensor_method("median")
def median(input, dim=None, keepdim=False, *, axis=None, keepdims=None):
    """The lower median (not the mean of the two middle values) and, with ``dim``, its index.

    NaN anywhere in a slice gives NaN (``nanmedian`` skips them).

    Examples
    --------
    >>> import lucid
    >>> lucid.median(lucid.tensor([3.0, 1.0, 2.0, 4.0])).item()
    2.0
    >>> lucid.median(lucid.tensor([[3.0, 1.0, 2.0]]), dim=1)
    median(values=tensor([2.]), indices=tensor([2]))
    """
    if axis is not None:  # See NOTE [NumPy keyword aliases]
        dim = numpy_axis("median", dim, axis, None)
    if keepdims is not None:
        keepdim = numpy_keepdims("median", keepdim, keepdims)
    if dim is None and _empty_float(input):  # PyTorch: the median of no elements is nan
        return _nan_of_empty(input, keepdim)
    v, i = _select_sorted("median", input, dim, keepdim, lambda n, c, dev: _lower_middle(n, None, dev), False)
    return _evenly(input, v) if dim is None else _values_indices["median"](v, i)


@tensor_method("nanmedian")
def nanmedian(input, dim=None, keepdim=False, *, axis=None, keepdims=None):
    """The lower median of the non-NaN values (NaN only for an all-NaN slice)."""
    if axis is not None:  # See NOTE [NumPy keyword aliases]
        dim = numpy_axis("nanmedian", dim, axis, None)
    if keepdims is not None:
        keepdim = numpy_keepdims("nanmedian", keepdim, keepdims)
    if dim is None and _empty_float(input):
        return _nan_of_empty(input, keepdim)
    v, i = _select_sorted("nanmedian", input, dim, keepdim, _lower_middle, True)
    return _evenly(input, v) if dim is None else _values_indices["nanmedian"](v, i)


def _evenly(x, v):
    """The median ``v`` of all of ``x`` with PyTorch's gradient: split evenly among the elements
    equal to it (the NaNs when it is NaN), where the selection gave it all to one of them.
    The value is ``v`` exactly: the masked differences are zeros (or NaN when ``v`` is)."""
    x = _as_tensor(x)
    if x.dtype.kind != "f":
        return v
    L = _L()
    vd = v.detach()
    mask = L.where(L.isnan(vd), L.isnan(x), x == vd)
    out = vd + L.where(mask, x - vd, 0.0).sum() / mask.sum()
    return out.reshape(tuple(v.shape))


def _empty_float(x):
    return isinstance(x, Tensor) and x.numel() == 0 and x.dtype.kind == "f"


def _nan_of_empty(x, keepdim):
    # the sum of no elements (0) times nan: nan in x's dtype, still in x's graph (an empty gradient)
    r = x.sum() * float("nan")
    return r.reshape((1,) * x.ndim) if keepdim else r


@tensor_method("kthvalue")
def kthvalue(input, k, dim=-1, keepdim=False, *, axis=None, keepdims=None):
    """The ``k``-th smallest value along ``dim`` (1-based) and its index.

    Examples
    --------
    >>> import lucid
    >>> lucid.kthvalue(lucid.tensor([5.0, 1.0, 3.0]), 2)
    kthvalue(values=tensor(3.), indices=tensor(2))
    """
    if axis is not None:  # See NOTE [NumPy keyword aliases]
        dim = numpy_axis("kthvalue", dim, axis, -1)
    if keepdims is not None:
        keepdim = numpy_keepdims("kthvalue", keepdim, keepdims)
    L = _L()
    x = _as_tensor(input)
    n = x.shape[normalize_axis(dim, x.ndim, "kthvalue")] if x.ndim else 1
    if n == 0:
        raise EmptyReductionError(f"kthvalue: expected reduction dim {dim} to have non-zero size "
                                  f"(shape {tuple(x.shape)})")
    if not 1 <= k <= n:
        raise RuntimeError(f"kthvalue: k ({k}) must be between 1 and the size of dimension {dim} ({n})")
    v, i = _select_sorted("kthvalue", x, dim, keepdim,
                          lambda n_, c, dev: L.full((1,), k - 1, dtype=L.int64, device=dev), True)
    return _values_indices["kthvalue"](v, i)


@tensor_method("mode")
def mode(input, dim=-1, keepdim=False, *, axis=None, keepdims=None):
    """The most frequent value along ``dim`` (the smallest of equally frequent ones) and the
    index of its last occurrence.

    Examples
    --------
    >>> import lucid
    >>> lucid.mode(lucid.tensor([1, 2, 2, 3, 3, 2]))
    mode(values=tensor(2), indices=tensor(5))
    """
    if axis is not None:  # See NOTE [NumPy keyword aliases]
        dim = numpy_axis("mode", dim, axis, -1)
    if keepdims is not None:
        keepdim = numpy_keepdims("mode", keepdim, keepdims)
    L = _L()
    x = _as_tensor(input)
    xs, d = _move_last(x, dim, "mode")
    n = xs.shape[-1]
    if n == 0:
        raise EmptyReductionError(f"mode: can't compute it over an empty dimension (shape {tuple(x.shape)}, dim {dim})")
    eq = xs[..., :, None] == xs[..., None, :]
    counts = eq.to(L.int64).sum(-1)
    best = counts == counts.amax(-1, keepdim=True)
    big = float("inf") if x.dtype.kind == "f" else int(np.iinfo(x.dtype).max) if x.dtype.kind in "iu" else True
    value = L.where(best, xs, big).amin(-1, keepdim=True)
    pos = L.arange(n, device=x.device).expand(*xs.shape)
    same = xs == value
    if x.dtype.kind == "f":  # a nan mode (nan never equals itself) is at the last nan
        same = same | (xs.isnan() & value.isnan())
    idx = L.where(same, pos, -1).amax(-1, keepdim=True)
    v = L.gather(xs, -1, idx).squeeze(-1)
    return _values_indices["mode"](_restore(v, x, d, keepdim), _restore(idx.squeeze(-1), x, d, keepdim))


_INTERPOLATIONS = ("linear", "lower", "higher", "midpoint", "nearest")


def _quantile(op, input, q, dim, keepdim, interpolation, nan_skip):
    L = _L()
    x = _float_input(input, op)
    if interpolation not in _INTERPOLATIONS:
        raise RuntimeError(f"{op}: interpolation must be one of {_INTERPOLATIONS}, got {interpolation!r}")
    scalar_q = np.ndim(q) == 0 if not isinstance(q, Tensor) else q.ndim == 0
    # A number or list q is made beside x. A tensor q receives gradient through the linear
    # interpolation weight (PyTorch's too); floor/ceil/round of it carry none.
    qt = (q if isinstance(q, Tensor) else L.tensor(q, dtype=x.dtype, device=x.device)).to(x.dtype).reshape(-1)
    if qt.ndim > 1 or (isinstance(q, Tensor) and q.ndim > 1):
        raise RuntimeError(f"{op}: q must be a scalar or a 1-d tensor, got shape {tuple(q.shape)}")
    # q's range is checked where its values are on the host (as PyTorch, which checks a CPU q
    # only): on a device it would be a hidden device-to-host read.
    if isinstance(q, Tensor):
        qa = q._data if type(q) is Tensor else None  # a traced q has no values to check
    else:
        qa = q if is_array(q) else np.asarray(q)
    if qa.__class__ is np.ndarray and ((qa < 0) | (qa > 1)).any():
        raise RuntimeError(f"{op}: q values must be in the range [0, 1]")
    xs, d = _move_last(x, dim, op)
    n = xs.shape[-1]
    if x.numel() == 0:  # PyTorch's type and words (median and mode raise IndexError, quantile this)
        raise RuntimeError(f"{op}: input tensor must be non-empty (shape {tuple(x.shape)}, dim {dim})")
    vals = L.sort(xs, -1).values
    nan = xs.isnan()
    cnt = ((~nan).sum(-1, keepdim=True).to(x.dtype) if nan_skip
           else L.full((1,), float(n), dtype=x.dtype, device=x.device))
    pos = qt * (cnt - 1).clamp(min=0)  # (..., Q)
    if not nan_skip:  # a NaN makes the quantile the last sorted value (a NaN): PyTorch's rank, and its gradient
        pos = L.where(nan.any(-1, keepdim=True), float(n - 1), pos)
    lo, hi = pos.floor(), pos.ceil()
    if interpolation == "nearest":
        lo = hi = pos.round()
    vlo = L.gather(vals, -1, lo.to(L.int64).expand(*(tuple(vals.shape[:-1]) + (qt.shape[0],))))
    vhi = L.gather(vals, -1, hi.to(L.int64).expand(*(tuple(vals.shape[:-1]) + (qt.shape[0],))))
    res = {"linear": lambda: L.lerp(vlo, vhi, (pos - lo).expand(*vlo.shape)), "lower": lambda: vlo,
           "higher": lambda: vhi, "nearest": lambda: vlo, "midpoint": lambda: (vlo + vhi) * 0.5}[interpolation]()
    res = res.movedim(-1, 0)  # (Q, ...)
    if d is None:
        res = res.reshape((qt.shape[0],) + ((1,) * x.ndim if keepdim else ()))
    elif keepdim and x.ndim:
        res = res.unsqueeze(d + 1)
    return res[0] if scalar_q else res


@tensor_method("quantile")
@autocast_composite("quantile")  # NOTE [Autocast]
def quantile(input, q, dim=None, keepdim=False, *, interpolation='linear', axis=None, keepdims=None):
    """The ``q``-th quantiles along ``dim`` (flattened when None); a 1-d ``q`` adds a leading dim.

    Examples
    --------
    >>> import lucid
    >>> lucid.quantile(lucid.tensor([0.0, 1.0, 2.0, 3.0]), 0.5).item()
    1.5
    """
    if axis is not None:  # See NOTE [NumPy keyword aliases]
        dim = numpy_axis("quantile", dim, axis, None)
    if keepdims is not None:
        keepdim = numpy_keepdims("quantile", keepdim, keepdims)
    return _quantile("quantile", input, q, dim, keepdim, interpolation, False)


@tensor_method("nanquantile")
@autocast_composite("nanquantile")  # NOTE [Autocast]
def nanquantile(input, q, dim=None, keepdim=False, *, interpolation='linear', axis=None, keepdims=None):
    """``quantile`` of the non-NaN values (NaN only for an all-NaN slice)."""
    if axis is not None:  # See NOTE [NumPy keyword aliases]
        dim = numpy_axis("nanquantile", dim, axis, None)
    if keepdims is not None:
        keepdim = numpy_keepdims("nanquantile", keepdim, keepdims)
    return _quantile("nanquantile", input, q, dim, keepdim, interpolation, True)


# ------------------------------------------------------------------ searching


def _searchsorted_impl(seq, vals, right):
    side = "right" if right else "left"
    if seq.ndim == 1:
        return xp.searchsorted(seq, vals, side=side).astype(np.int64)
    lead = seq.shape[:-1]
    rows = int(np.prod(lead))  # not reshape(-1, m): that is ambiguous when a row is empty
    s2, v2 = seq.reshape(rows, seq.shape[-1]), vals.reshape(rows, vals.shape[-1])
    out = np.stack([xp.searchsorted(s, v, side=side) for s, v in zip(s2, v2)]) if s2.shape[0] else \
        np.zeros(v2.shape, np.int64)
    return out.reshape(lead + vals.shape[-1:]).astype(np.int64)


def _searchsorted_batch(vals, bdims, right):
    seq, v = vals
    bs, bv = bdims
    if bs is None:  # one sorted sequence for every example
        if seq.ndim == 1:
            return bind(searchsorted_p, (seq, v), {"right": right}), bv
        v = move_bdim(v, bv, 0)
        seq = seq.expand(*((v.shape[0],) + tuple(seq.shape)))
    else:
        seq = move_bdim(seq, bs, 0)
        size = seq.shape[0]
        if seq.ndim == 2 and (bv is None or v.ndim == 2) and bv is not None:
            v = move_bdim(v, bv, 0)
        elif bv is None:
            v = v.expand(*((size,) + tuple(v.shape)))
        else:
            v = move_bdim(v, bv, 0)
        if seq.ndim == 2 and v.ndim != 2:  # a 1-d sequence per example: values of any shape
            flat = v.reshape(size, -1)
            out = bind(searchsorted_p, (seq, flat), {"right": right})
            return out.reshape(tuple(v.shape)), 0
    return bind(searchsorted_p, (seq, v), {"right": right}), 0


searchsorted_p = defprim("searchsorted", _searchsorted_impl, vjp=None,
                         jvp=lambda ns, primals, tangents, out, **p: None, differentiable=False,
                         save_inputs=False)
searchsorted_p.batch = _searchsorted_batch


def _no_complex(op, *tensors):
    """Ops built on an order refuse complex input, as PyTorch does (NOTE [No order on complex
    numbers]); NumPy would order complex numbers lexicographically."""
    for t in tensors:
        if isinstance(t, Tensor) and t.dtype.kind == "c":
            raise TypeError(f"{op}: not supported for complex tensors (complex numbers have no order; compare "
                            f".abs() or .real instead)")


def searchsorted(sorted_sequence, input, *, out_int32=False, right=False, side=None, sorter=None):
    """Indices where ``input``'s values would be inserted to keep ``sorted_sequence`` sorted.

    ``sorted_sequence`` is 1-d, or has ``input``'s leading dims (one sorted row each).

    Examples
    --------
    >>> import lucid
    >>> lucid.searchsorted(lucid.tensor([1, 3, 5]), lucid.tensor([3, 6])).tolist()
    [1, 3]
    >>> lucid.searchsorted(lucid.tensor([1, 3, 5]), lucid.tensor([3]), right=True).tolist()
    [2]
    """
    L = _L()
    seq = _as_tensor(sorted_sequence)
    _no_complex("searchsorted", seq, input)
    scalar = not isinstance(input, Tensor)
    v = _as_tensor(input)
    if scalar and v.device != seq.device:  # a Python number goes where the sequence is, as in PyTorch
        v = v.to(seq.device)
    if side is not None:
        if side not in ("left", "right") or (right and side == "left"):
            raise RuntimeError(f"searchsorted: side must be 'left' or 'right' and agree with right=, got {side!r}")
        right = side == "right"
    if sorter is not None:
        seq = L.take_along_dim(seq, _as_tensor(sorter), -1)
    if seq.ndim == 0:
        raise RuntimeError("searchsorted: sorted_sequence must have at least one dimension")
    if seq.ndim > 1 and (v.ndim != seq.ndim or tuple(v.shape[:-1]) != tuple(seq.shape[:-1])):
        raise RuntimeError(f"searchsorted: sorted_sequence {tuple(seq.shape)} and input {tuple(v.shape)} "
                           "must have the same leading dims (or sorted_sequence must be 1-d)")
    if seq.dtype != v.dtype:
        dt = dtypes.as_lucid(dtypes.result_type(seq, v))
        seq, v = seq.to(dt), v.to(dt)
    out = bind(searchsorted_p, (seq, v.reshape(1) if scalar else v), {"right": bool(right)})
    out = out.reshape(()) if scalar else out
    return out.to(L.int32) if out_int32 else out


def bucketize(input, boundaries, *, out_int32=False, right=False):
    """Bucket index of each element of ``input`` for the sorted 1-d ``boundaries``.

    ``right=False``: ``boundaries[i-1] < x <= boundaries[i]``; ``right=True``: ``<= x <``.

    Examples
    --------
    >>> import lucid
    >>> lucid.bucketize(lucid.tensor([0.5, 1.0, 4.0]), lucid.tensor([1.0, 3.0])).tolist()
    [0, 0, 2]
    """
    b = _as_tensor(boundaries)
    _no_complex("bucketize", b, input)
    if b.ndim != 1:
        raise RuntimeError(f"bucketize: boundaries must be 1-d, got shape {tuple(b.shape)}")
    return searchsorted(b, input, out_int32=out_int32, right=right)


def isin(elements, test_elements, *, assume_unique=False, invert=False):
    """Whether each element of ``elements`` is in ``test_elements`` (bool, ``elements``' shape).

    Examples
    --------
    >>> import lucid
    >>> lucid.isin(lucid.tensor([1, 2, 3]), lucid.tensor([2, 5])).tolist()
    [False, True, False]
    """
    L = _L()
    e = _as_tensor(elements)
    t = _as_tensor(test_elements).reshape(-1)
    hit = (e[..., None] == t).any(-1) if t.shape[0] else L.zeros(tuple(e.shape), dtype=L.bool, device=e.device)
    return ~hit if invert else hit


# ------------------------------------------------------------- value-shaped results


def _concrete(op, t):
    from ..indexing import concrete

    arr = concrete(t)
    if arr is None:
        raise RuntimeError(f"{op}: the output's shape depends on the values, so it can't run under a "
                           "transform (vmap/grad/jvp); call it outside the transform")
    if not has_values(arr):
        raise NotImplementedError(f"{op}: the output's shape depends on the input's values, which meta "
                                  "tensors do not have (as PyTorch's meta kernels)")
    return arr


@runs_on_operands_device  # its array code runs on the input's device (NOTE [Several devices])
def histc(input, bins=100, min=0, max=0):
    """Histogram of ``input`` with ``bins`` equal-width bins over ``[min, max]`` (the data's range
    when both are 0); elements outside, and NaN, are ignored. No gradient.

    Composed from Lucid ops, so it runs under ``vmap`` (the output always has ``bins`` entries;
    each example takes its own data range). An element's bin is
    ``trunc((x - min) * bins / (max - min))`` in the input's dtype, as PyTorch computes it.
    Limitation: a non-finite data range is reported only outside a transform.

    Examples
    --------
    >>> import lucid
    >>> lucid.histc(lucid.tensor([1.0, 2.0, 1.0]), bins=4, min=0, max=3).tolist()
    [0.0, 2.0, 1.0, 0.0]
    """
    L = _L()
    _no_complex("histc", input)
    if _as_tensor(input).dtype.kind not in "fc":  # PyTorch: no kernel (NotImplementedError, a RuntimeError)
        raise NotImplementedError(f"histc: expected a floating point input, got {_as_tensor(input).dtype}")
    x = _float_input(input, "histc").detach().reshape(-1)
    bins = int(bins)
    if bins <= 0:
        raise RuntimeError(f"histc: bins must be > 0, got {bins}")
    lo, hi = float(min), float(max)
    if lo > hi:
        raise RuntimeError(f"histc: max ({max}) must be larger than min ({min})")
    if lo == hi and x.shape[0]:  # the data's range, per example under vmap
        lo, hi = x.amin(), x.amax()
        same = lo == hi
        lo, hi = L.where(same, lo - 1, lo), L.where(same, hi + 1, hi)
        _finite_range(lo, hi)
    elif lo == hi:
        lo, hi = lo - 1, hi + 1
    elif not (np.isfinite(lo) and np.isfinite(hi)):
        raise RuntimeError(f"histc: range of [{lo:g}, {hi:g}] is not finite")
    inside = (x >= lo) & (x <= hi)
    # outside values (NaN included) go to an extra bin that is cut off; the where keeps the
    # integer cast away from inf and NaN
    pos = ((L.where(inside, x, lo) - lo) * bins / (hi - lo)).to(L.int64).clamp(max=bins - 1)
    pos = L.where(inside, pos, bins)
    counts = L.zeros(bins + 1, dtype=x.dtype, device=x.device).scatter_add(0, pos, L.ones_like(x))
    return counts[:bins]


def _finite_range(lo, hi):
    from ..indexing import concrete

    la, ha = concrete(lo), concrete(hi)
    if la is None or ha is None or not has_values(la):  # batched under vmap, or meta: no single value
        return
    a, b = lo.item(), hi.item()
    if not (np.isfinite(a) and np.isfinite(b)):
        raise RuntimeError(f"histc: range of [{a:g}, {b:g}] is not finite")


_histogram = collections.namedtuple("histogram", ["hist", "bin_edges"])


@runs_on_operands_device
def histogram(input, bins=100, *, range=None, weight=None, density=False):  # noqa: A002
    """``(hist, bin_edges)``: counts (or weighted sums, or densities) of ``input`` in ``bins``
    (a count or a 1-d tensor of edges). No gradient.

    Examples
    --------
    >>> import lucid
    >>> h = lucid.histogram(lucid.tensor([1.0, 2.0, 1.0]), bins=2, range=(0.0, 2.0))
    >>> h.hist.tolist(), h.bin_edges.tolist()
    ([0.0, 3.0], [0.0, 1.0, 2.0])
    """
    from ..indexing import concrete

    _no_complex("histogram", input)
    x = _float_input(input, "histogram")
    traced = concrete(x) is None or (weight is not None and concrete(_as_tensor(weight)) is None)
    if isinstance(bins, Tensor) and (traced or concrete(bins) is None):  # the edges fix the shape
        return _histogram_edges_composed(x, bins, weight, density)
    if traced:  # a bin count fixes the output's shape
        return _histogram_composed(x, int(bins), range, weight, density)
    arr = _concrete("histogram", x)
    b = _concrete("histogram", bins) if isinstance(bins, Tensor) else int(bins)
    w = None if weight is None else _concrete("histogram", _as_tensor(weight))
    hist, edges = np.histogram(arr, bins=b, range=range, weights=w, density=density)
    return _histogram(_wrap(hist.astype(x.dtype.dtype)), _wrap(edges.astype(x.dtype.dtype)))


def _histogram_composed(x, bins, range, weight, density):  # noqa: A002
    """``histogram`` with a bin count, in lucid ops so that it runs under transforms (vmap: each
    example its own data range): PyTorch's bin search (a linear guess corrected by one step
    against the edges; the last bin closed), values outside the range and NaN dropped."""
    L = _L()
    if bins <= 0:
        raise RuntimeError(f"histogram: bins must be > 0, got {bins}")
    x = x.detach().reshape(-1)
    if range is not None:
        lo, hi = float(range[0]), float(range[1])
        if lo > hi:
            raise RuntimeError(f"histogram: min ({lo}) should not be larger than max ({hi})")
        lo, hi = (lo - 0.5, hi + 0.5) if lo == hi else (lo, hi)
    else:  # the data's range, per example under vmap; one point widens it by 1/2 each side
        lo, hi = x.amin(), x.amax()
        same = lo == hi
        lo, hi = L.where(same, lo - 0.5, lo), L.where(same, hi + 0.5, hi)
    edges = L.linspace(lo, hi, bins + 1, dtype=x.dtype)
    inside = (x >= lo) & (x <= hi)
    guess = (L.where(inside, x, lo) - lo) * bins / (hi - lo)  # the where keeps the int cast finite
    pos = guess.to(L.int64).clamp(0, bins - 1)
    pos = L.where(x < edges[pos], pos - 1, L.where((x >= edges[pos + 1]) & (pos < bins - 1), pos + 1, pos))
    pos = L.where(inside, pos.clamp(0, bins - 1), bins)
    w = L.ones_like(x) if weight is None else _as_tensor(weight).detach().reshape(-1).to(x.dtype)
    hist = L.zeros(bins + 1, dtype=x.dtype, device=x.device).scatter_add(0, pos, w)[:bins]
    if density:
        hist = hist / (hist.sum() * (edges[1:] - edges[:-1]))
    return _histogram(hist, edges)


def _histogram_edges_composed(x, edges, weight, density):
    """``histogram`` with a tensor of edges, in lucid ops so that it runs under transforms (vmap:
    the data, the edges and the weights may each be batched). Bin ``i`` is ``[e_i, e_{i+1})``, the
    last one closed; a value's bin is the count of left edges at or below it, minus one."""
    L = _L()
    edges = _as_tensor(edges).detach().to(x.dtype)
    if edges.ndim != 1 or edges.shape[0] < 2:
        raise RuntimeError(f"histogram: bins must be a 1-d tensor of at least 2 edges, got shape {tuple(edges.shape)}")
    bins = edges.shape[0] - 1
    x = x.detach().reshape(-1)
    inside = (x >= edges[0]) & (x <= edges[-1])
    pos = (x[:, None] >= edges[None, :-1]).sum(-1).clamp(1, bins) - 1
    pos = L.where(inside, pos, bins)
    w = L.ones_like(x) if weight is None else _as_tensor(weight).detach().reshape(-1).to(x.dtype)
    hist = L.zeros(bins + 1, dtype=x.dtype, device=x.device).scatter_add(0, pos, w)[:bins]
    if density:
        hist = hist / (hist.sum() * (edges[1:] - edges[:-1]))
    return _histogram(hist, edges)


@runs_on_operands_device
def bincount(input, weights=None, minlength=0):
    """Count of each non-negative integer in a 1-d ``input`` (weighted sums with ``weights``,
    differentiable in them).

    Examples
    --------
    >>> import lucid
    >>> lucid.bincount(lucid.tensor([0, 2, 2])).tolist()
    [1, 0, 2]
    """
    L = _L()
    x = _as_tensor(input)
    if x.ndim != 1:
        raise RuntimeError(f"bincount: expected a 1-d integer tensor, got shape {tuple(x.shape)} and {x.dtype}")
    if x.dtype.kind not in "iu":  # PyTorch: no kernel for the dtype (NotImplementedError, a RuntimeError)
        raise NotImplementedError(f"bincount: expected a 1-d integer tensor, got {x.dtype}")
    if int(minlength) < 0:
        raise RuntimeError(f"bincount: minlength should be >= 0, got {minlength}")
    if weights is not None and (_as_tensor(weights).ndim != 1 or _as_tensor(weights).shape[0] != x.shape[0]):
        raise RuntimeError(f"bincount: weights should be 1-d and have the same length as input ({x.shape[0]}), got "
                           f"shape {tuple(_as_tensor(weights).shape)}")
    arr = _concrete("bincount", x)
    if arr.size and arr.min() < 0:
        raise RuntimeError("bincount: input must contain only non-negative integers")
    n = builtins_max(int(arr.max()) + 1 if arr.size else 0, int(minlength))
    if weights is None:
        return _wrap(np.bincount(arr, minlength=n).astype(np.int64))
    w = _as_tensor(weights)
    w = w if w.dtype.kind in "fc" else w.to(L.float64)
    return L.zeros(n, dtype=w.dtype, device=w.device).scatter_add(0, x, w)


def builtins_max(a, b):
    return a if a > b else b


# The output's size depends on the values: on a device the whole computation runs on a host
# copy and comes back (NOTE [Host fallback]); PyTorch's CUDA unique synchronises too.
@host_fallback
def _unique_dim(arr, dim, sorted_, return_inverse, return_counts, consecutive):
    if consecutive:
        moved = np.moveaxis(arr, dim, 0) if dim is not None else arr.reshape(-1)
        if moved.shape[0] == 0:
            keep = np.zeros(0, bool)
        else:
            change = np.ones(moved.shape[0], bool)
            flat = moved.reshape(moved.shape[0], -1)
            change[1:] = (flat[1:] != flat[:-1]).any(axis=1)
            keep = change
        starts = np.flatnonzero(keep)
        out = moved[starts]
        inverse = np.cumsum(keep) - 1
        counts = np.diff(np.append(starts, moved.shape[0]))
        return (np.moveaxis(out, 0, dim) if dim is not None else out), inverse, counts
    # nan equals nothing, itself included: each nan is a distinct value, as in PyTorch
    extra = {"equal_nan": False} if dim is None else {}
    out, inverse, counts = np.unique(arr, return_inverse=True, return_counts=True, axis=dim, **extra)
    return out, inverse.reshape(-1) if dim is not None else inverse.reshape(arr.shape), counts


def _unique(op, input, sorted_, return_inverse, return_counts, dim, consecutive):
    x = _as_tensor(input)
    _no_complex(op, x)
    arr = _concrete(op, x)
    d = None if dim is None else normalize_axis(dim, x.ndim, op)
    out, inverse, counts = _unique_dim(arr, d, sorted_, return_inverse, return_counts, consecutive)
    if consecutive and d is None:
        inverse = inverse.reshape(arr.shape)
    res = (_wrap(xp.ascontiguousarray(out)),)  # xp: on the input's device
    if return_inverse:
        res += (_wrap(xp.asarray(inverse, np.int64)),)
    if return_counts:
        res += (_wrap(xp.asarray(counts, np.int64)),)
    return res[0] if len(res) == 1 else res


@tensor_method("unique")
def unique(input, sorted=True, return_inverse=False, return_counts=False, dim=None):  # noqa: A002
    """The distinct values (sorted), optionally the inverse indices and counts; ``dim`` makes
    the distinct slices along it. No gradient; not under transforms (value-shaped output).

    Examples
    --------
    >>> import lucid
    >>> lucid.unique(lucid.tensor([3, 1, 3, 2]), return_counts=True)
    (tensor([1, 2, 3]), tensor([1, 1, 2]))
    """
    return _unique("unique", input, sorted, return_inverse, return_counts, dim, False)


@tensor_method("unique_consecutive")
def unique_consecutive(input, return_inverse=False, return_counts=False, dim=None):
    """Collapse runs of equal consecutive values (or slices along ``dim``).

    Examples
    --------
    >>> import lucid
    >>> lucid.unique_consecutive(lucid.tensor([1, 1, 2, 1]), return_counts=True)
    (tensor([1, 2, 1]), tensor([2, 1, 1]))
    """
    return _unique("unique_consecutive", input, True, return_inverse, return_counts, dim, True)


__all__ = ["aminmax", "bincount", "bucketize", "corrcoef", "count_nonzero", "cov", "histc", "histogram", "isin",
           "kthvalue", "logcumsumexp", "median", "mode", "nanmean", "nanmedian", "nanquantile", "nansum",
           "quantile", "searchsorted", "unique", "unique_consecutive"]
