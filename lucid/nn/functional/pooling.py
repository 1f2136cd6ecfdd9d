"""Functional pooling: max, average and adaptive pools over 1-d, 2-d (and 3-d) inputs.

* max pooling: ``pool_argmax`` (not differentiable) picks each window's winner, whose
  value is gathered with ``take_last`` (adjoint: ``scatter_last``). See
  ``lucid/ops/conv.py``.
* average pooling: a single-channel convolution with a ones kernel over (N*C, 1, ...)
  divided by a constant count map, so it is a composite of the conv primitives.
* adaptive average pooling: a block mean when the sizes divide, otherwise a product with
  per-dimension averaging matrices; adaptive max: a max over gathered windows.
"""
from __future__ import annotations

import functools
import math

import numpy as np

from ..._core.primitive import OpError, autocast_composite, bind
from ..._core.tensor import _wrap
from ._device import const_like
from ...ops._family import _as_tensor
from ...ops.elementwise.comparison import where
from ...ops.conv import _tuple, conv_p, pool_argmax_p, take_last_p
from ._complex import refuse_complex as _refuse_complex

__all__ = ["max_pool1d", "max_pool2d", "max_pool3d", "avg_pool1d", "avg_pool2d", "avg_pool3d",
           "adaptive_avg_pool1d", "adaptive_avg_pool2d", "adaptive_max_pool1d", "adaptive_max_pool2d",
           "max_pool1d_with_indices", "max_pool2d_with_indices", "max_pool3d_with_indices",
           "adaptive_max_pool1d_with_indices", "adaptive_max_pool2d_with_indices"]


def _batched(input, nsp, op):
    input = _as_tensor(input)
    if input.ndim not in (nsp + 1, nsp + 2):
        # too few dims: PyTorch's Python wrappers raise ValueError, its kernels RuntimeError
        err = OpError if input.ndim < nsp + 1 else RuntimeError
        raise err(f"{op}: expected a {nsp + 1}-D (unbatched) or {nsp + 2}-D (batched) input, "
                  f"got shape {tuple(input.shape)}")
    if input.ndim == nsp + 1:
        return input.unsqueeze(0), True
    return input, False


def _pool_geometry(sp, kernel_size, stride, padding, dilation, ceil_mode, op):
    """(kernel, stride, dilation, (lo, hi) pads, output size) with PyTorch's ceil_mode rule."""
    nsp = len(sp)
    k = _tuple(kernel_size, nsp, "kernel_size", op)
    s = k if stride is None or (not isinstance(stride, int) and len(stride) == 0) else \
        _tuple(stride, nsp, "stride", op)
    p = _tuple(padding, nsp, "padding", op)
    d = _tuple(dilation, nsp, "dilation", op)
    for name, v in (("kernel_size", k), ("stride", s), ("dilation", d)):
        if any(vv <= 0 for vv in v):
            raise RuntimeError(f"{op}: {name} must be greater than zero, got {name}={v}")
    if any(pp < 0 for pp in p):
        raise RuntimeError(f"{op}: padding must be non-negative, got padding={p}")
    if any(pp * 2 > kk for pp, kk in zip(p, k)):
        raise RuntimeError(f"{op}: pad should be at most half of effective kernel size, got padding={p} "
                           f"and kernel_size={k}")
    out = []
    for n, kk, ss, pp, dd in zip(sp, k, s, p, d):
        num = n + 2 * pp - dd * (kk - 1) - 1 + (ss - 1 if ceil_mode else 0)
        o = num // ss + 1
        if ceil_mode and (o - 1) * ss >= n + pp:
            o -= 1
        if o <= 0:
            raise RuntimeError(f"{op}: output size is too small for input spatial size {tuple(sp)} and "
                               f"kernel_size={k} (padding={p}, dilation={d})")
        out.append(o)
    pads = tuple((pp, (o - 1) * ss + dd * (kk - 1) + 1 - n - pp) for n, kk, ss, pp, dd, o in zip(sp, k, s, p, d, out))
    return k, s, d, pads, tuple(out)


def _max_pool(input, kernel_size, stride, padding, dilation, ceil_mode, return_indices, nsp, op):
    _refuse_complex(op, input)  # complex numbers have no order (pool_argmax refuses them too)
    x, unbatched = _batched(input, nsp, op)
    n, c = x.shape[:2]
    sp = tuple(x.shape[2:])
    k, s, d, pads, out_sp = _pool_geometry(sp, kernel_size, stride, padding, dilation, ceil_mode, op)
    idx = bind(pool_argmax_p, (x,), dict(ksize=k, stride=s, padding=pads, dilation=d))
    vals = bind(take_last_p, (x.reshape(n, c, -1), idx.reshape(n, c, -1)), {})
    vals = vals.reshape((n, c) + out_sp)
    if unbatched:
        vals, idx = vals.squeeze(0), idx.squeeze(0)
    return (vals, idx) if return_indices else vals


def max_pool1d(input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False, return_indices=False):
    """1-D max pooling over (N, C, L); see :func:`max_pool2d`."""
    return _max_pool(input, kernel_size, stride, padding, dilation, ceil_mode, return_indices, 1, "max_pool1d")


def max_pool2d(input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False, return_indices=False):
    """2-D max pooling over (N, C, H, W).

    ``stride`` defaults to ``kernel_size``; padding is ``-inf``. With ``return_indices``
    also returns the flat index (into H*W) of each maximum, as PyTorch does. Ties go to
    the first element of the window; its gradient goes to that element only.

    Examples
    --------
    >>> import lucid
    >>> import lucid.nn.functional as F
    >>> F.max_pool2d(lucid.arange(16.0).reshape(1, 1, 4, 4), 2).tolist()
    [[[[5.0, 7.0], [13.0, 15.0]]]]
    """
    return _max_pool(input, kernel_size, stride, padding, dilation, ceil_mode, return_indices, 2, "max_pool2d")


@autocast_composite("max_pool3d")  # NOTE [Autocast]
def max_pool3d(input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False, return_indices=False):
    """3-D max pooling over (N, C, D, H, W)."""
    return _max_pool(input, kernel_size, stride, padding, dilation, ceil_mode, return_indices, 3, "max_pool3d")


# The ``*_with_indices`` spellings always return ``(values, indices)``; their ``return_indices``
# is accepted and ignored, as in PyTorch.
def max_pool1d_with_indices(input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False,
                            return_indices=False):
    """:func:`max_pool1d` returning ``(values, indices)``."""
    return max_pool1d(input, kernel_size, stride, padding, dilation, ceil_mode, True)


def max_pool2d_with_indices(input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False,
                            return_indices=False):
    """:func:`max_pool2d` returning ``(values, indices)``."""
    return max_pool2d(input, kernel_size, stride, padding, dilation, ceil_mode, True)


def max_pool3d_with_indices(input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False,
                            return_indices=False):
    """:func:`max_pool3d` returning ``(values, indices)``; an index is the winner's flat
    position in its channel's (D, H, W) volume.

    Examples
    --------
    >>> import lucid, lucid.nn.functional as F
    >>> v, i = F.max_pool3d_with_indices(lucid.arange(8.0).reshape(1, 1, 2, 2, 2), 2)
    >>> v.reshape(-1).tolist(), i.reshape(-1).tolist()
    ([7.0], [7])
    """
    return max_pool3d(input, kernel_size, stride, padding, dilation, ceil_mode, True)


def _avg_divisor(sp, k, s, pads, out_sp, count_include_pad):
    """Per-window element counts (PyTorch's rule), as an outer product over the dims."""
    per_dim = []
    for n, kk, ss, (lo, _), o in zip(sp, k, s, pads, out_sp):
        start = np.arange(o) * ss - lo
        end = np.minimum(start + kk, n + lo)
        if count_include_pad:
            cnt = end - start
        else:
            cnt = np.minimum(end, n) - np.maximum(start, 0)
        per_dim.append(cnt.astype(np.float64))
    return functools.reduce(np.multiply.outer, per_dim)


# NOTE [Integer average pooling]
# As PyTorch's CPU kernels, average pooling takes int64 inputs (no other integer type, no bool,
# no complex): the window sum is exact in int64 (wrapping on overflow) and the division by the
# count or ``divisor_override`` truncates toward zero, as C's integer division (-5 / 4 is -1, not
# -2). The result is int64; there is no gradient to take.


def _avg_pool(input, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override, nsp, op):
    x, unbatched = _batched(input, nsp, op)
    integral = x.dtype == np.int64  # See NOTE [Integer average pooling]
    if x.dtype.kind != "f" and not integral:
        raise NotImplementedError(f"{op}: not implemented for {x.dtype} inputs (floating point or int64 only)")
    n, c = x.shape[:2]
    sp = tuple(x.shape[2:])
    k, s, d, pads, out_sp = _pool_geometry(sp, kernel_size, stride, padding, 1, ceil_mode, op)
    ones = const_like(np.ones((1, 1) + k, dtype=x.dtype), x)
    summed = bind(conv_p, (x.reshape((n * c, 1) + sp), ones), dict(stride=s, padding=pads, dilation=d, groups=1))
    summed = summed.reshape((n, c) + out_sp)
    if divisor_override is not None:
        if divisor_override == 0:  # PyTorch refuses 0 rather than treating it as "no override"
            raise RuntimeError(f"{op}: divisor_override must not be zero")
        out = summed.div(int(divisor_override), rounding_mode="trunc") if integral else \
            summed / float(divisor_override)
    else:
        div = _avg_divisor(sp, k, s, pads, out_sp, count_include_pad)
        if integral:
            out = summed.div(const_like(div.astype(np.int64), x), rounding_mode="trunc")
        else:
            out = summed * const_like((1.0 / div).astype(x.dtype), x)
    return out.squeeze(0) if unbatched else out


def avg_pool1d(input, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True):
    """1-D average pooling over (N, C, L); see :func:`avg_pool2d`."""
    return _avg_pool(input, kernel_size, stride, padding, ceil_mode, count_include_pad, None, 1, "avg_pool1d")


def avg_pool2d(input, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True,
               divisor_override=None):
    """2-D average pooling over (N, C, H, W) (zero padding; ``count_include_pad`` as in PyTorch).

    An int64 input gives int64 averages, truncated toward zero as PyTorch's kernels do (NOTE
    [Integer average pooling]); other integer, bool and complex inputs raise NotImplementedError.

    Examples
    --------
    >>> import lucid
    >>> import lucid.nn.functional as F
    >>> F.avg_pool2d(lucid.arange(16.0).reshape(1, 1, 4, 4), 2).tolist()
    [[[[2.5, 4.5], [10.5, 12.5]]]]
    """
    return _avg_pool(input, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override, 2,
                     "avg_pool2d")


@autocast_composite("avg_pool3d")  # NOTE [Autocast]
def avg_pool3d(input, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True,
               divisor_override=None):
    """3-D average pooling over (N, C, D, H, W)."""
    return _avg_pool(input, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override, 3,
                     "avg_pool3d")


# ----------------------------------------------------------------- adaptive


def _adaptive_bounds(n, o):
    i = np.arange(o)
    return (i * n) // o, -((-(i + 1) * n) // o)  # floor(i*n/o), ceil((i+1)*n/o)


def _adaptive_sizes(x, output_size, nsp, op):
    osz = (output_size,) * nsp if isinstance(output_size, int) or output_size is None else tuple(output_size)
    if len(osz) != nsp:
        raise OpError(f"{op}: output_size must have {nsp} elements, got {output_size}")
    osz = tuple(n if o is None else int(o) for n, o in zip(x.shape[2:], osz))
    if 0 in x.shape[1:]:
        raise RuntimeError(f"{op}: expected input to have non-zero size for non-batch dimensions, got shape "
                           f"{tuple(x.shape)}")
    if any(o < 0 for o in osz):
        raise RuntimeError(f"{op}: elements of output_size must be greater than or equal to 0, got {osz}")
    return osz


def _adaptive_avg(input, output_size, nsp, op):
    x, unbatched = _batched(input, nsp, op)
    n, c = x.shape[:2]
    sp = tuple(x.shape[2:])
    osz = _adaptive_sizes(x, output_size, nsp, op)
    if all(o and m % o == 0 for m, o in zip(sp, osz)):
        blocks = sum(((o, m // o) for m, o in zip(sp, osz)), ())
        out = x.reshape((n, c) + blocks).mean(dim=tuple(3 + 2 * i for i in range(nsp)))
    else:
        out = x
        for i, (m, o) in enumerate(zip(sp, osz)):  # one gathered window mean per spatial dim
            # a gather, not a product with an averaging matrix: 0 * NaN would leak a NaN into
            # every output window of its row
            lo, hi = _adaptive_bounds(m, o)
            kmax = int((hi - lo).max()) if o else 0
            cols = lo[:, None] + np.arange(kmax)
            inside = cols < hi[:, None]
            cols = const_like(np.minimum(cols, m - 1).ravel(), x)
            win = out.movedim(2 + i, -1).index_select(-1, cols)
            win = win.reshape(tuple(win.shape[:-1]) + (o, kmax))
            win = win.masked_fill(const_like(~inside, x), 0)
            out = win.sum(-1) * const_like((1.0 / np.maximum(hi - lo, 1)).astype(x.dtype), x)
            out = out.movedim(-1, 2 + i)
        out = out.contiguous()  # PyTorch's result is contiguous: `.view(...)` of it must work
    return out.squeeze(0) if unbatched else out


def adaptive_avg_pool1d(input, output_size):
    """Average pooling to a fixed output length (windows ``[floor(i*L/o), ceil((i+1)*L/o))``)."""
    _refuse_complex("adaptive_avg_pool1d", input)
    return _adaptive_avg(input, output_size, 1, "adaptive_avg_pool1d")


def adaptive_avg_pool2d(input, output_size):
    """Average pooling to a fixed output size, as PyTorch's ``adaptive_avg_pool2d``.

    Examples
    --------
    >>> import lucid
    >>> import lucid.nn.functional as F
    >>> F.adaptive_avg_pool2d(lucid.ones(2, 3, 5, 7), 1).shape
    (2, 3, 1, 1)
    """
    _refuse_complex("adaptive_avg_pool2d", input)
    return _adaptive_avg(input, output_size, 2, "adaptive_avg_pool2d")


def _adaptive_max(input, output_size, return_indices, nsp, op):
    x, unbatched = _batched(input, nsp, op)
    n, c = x.shape[:2]
    sp = tuple(x.shape[2:])
    osz = _adaptive_sizes(x, output_size, nsp, op)
    if 0 in osz:  # an empty output: no windows to gather from
        out = x.sum(dim=tuple(range(2, 2 + nsp)), keepdim=True).expand((n, c) + osz)
        idx = const_like(np.zeros((n, c) + osz, dtype=np.int64), x)
        out, idx = (out.squeeze(0), idx.squeeze(0)) if unbatched else (out, idx)
        return (out, idx) if return_indices else out
    per_dim = []
    for m, o in zip(sp, osz):
        lo, hi = _adaptive_bounds(m, o)
        kmax = int((hi - lo).max())
        per_dim.append(np.minimum(lo[:, None] + np.arange(kmax), hi[:, None] - 1))  # (o, kmax), last repeated
    # flat input index of every (output position, window element) pair
    grids = np.meshgrid(*[np.arange(o) for o in osz], *[np.arange(p.shape[1]) for p in per_dim], indexing="ij")
    coords = [per_dim[i][grids[i], grids[nsp + i]] for i in range(nsp)]
    flat = np.ravel_multi_index(coords, sp).reshape(1, 1, math.prod(osz), -1)
    out, idx = _window_max(x, const_like(flat, x), osz)
    if unbatched:
        out, idx = out.squeeze(0), idx.squeeze(0)
    return (out, idx) if return_indices else out


def _window_max(x, flat, osz):
    """Max of ``x`` (N, C, *sp) over windows given by flat spatial indices ``flat`` (broadcast
    to (N, C, prod(osz), K)); returns values and indices of shape (N, C, *osz).

    As PyTorch, the value and its whole gradient come from the window's first maximum (a tie
    is not shared; NaN wins), so the gradient matches ``return_indices``."""
    n, c = x.shape[:2]
    xf = x.reshape(n, c, math.prod(x.shape[2:]))
    p, kk = flat.shape[-2:]
    flat = flat.expand(n, c, p, kk)
    win = bind(take_last_p, (xf.detach(), flat.reshape(n, c, p * kk)), {}).reshape(n, c, p, kk)
    arg = win.argmax(dim=-1, keepdim=True)  # on the device: no host round trip
    # PyTorch's scan takes ``val > best or isnan(val)``: the last NaN wins (no branch on a
    # device value, which would read it back)
    nan = win.isnan()
    last = (kk - 1) - nan.flip(-1).to(win.dtype).argmax(dim=-1, keepdim=True)
    arg = where(nan.any(dim=-1, keepdim=True), last, arg)
    idx = flat.gather(-1, arg).reshape(n, c, p)
    out = bind(take_last_p, (xf, idx), {})
    return out.reshape((n, c) + tuple(osz)), idx.reshape((n, c) + tuple(osz))


def adaptive_max_pool1d(input, output_size, return_indices=False):
    """Max pooling to a fixed output length."""
    return _adaptive_max(input, output_size, return_indices, 1, "adaptive_max_pool1d")


def adaptive_max_pool2d(input, output_size, return_indices=False):
    """Max pooling to a fixed output size (windows as in :func:`adaptive_avg_pool2d`)."""
    return _adaptive_max(input, output_size, return_indices, 2, "adaptive_max_pool2d")


def adaptive_max_pool1d_with_indices(input, output_size, return_indices=False):
    """:func:`adaptive_max_pool1d` returning ``(values, indices)`` (``return_indices`` is ignored).

    Examples
    --------
    >>> import lucid, lucid.nn.functional as F
    >>> v, i = F.adaptive_max_pool1d_with_indices(lucid.tensor([[[1.0, 5.0, 2.0, 3.0]]]), 2)
    >>> v.tolist(), i.tolist()
    ([[[5.0, 3.0]]], [[[1, 3]]])
    """
    return _adaptive_max(input, output_size, True, 1, "adaptive_max_pool1d_with_indices")


def adaptive_max_pool2d_with_indices(input, output_size, return_indices=False):
    """:func:`adaptive_max_pool2d` returning ``(values, indices)`` (``return_indices`` is ignored);
    an index is the winner's flat position in its channel's (H, W) plane.

    Examples
    --------
    >>> import lucid, lucid.nn.functional as F
    >>> v, i = F.adaptive_max_pool2d_with_indices(lucid.arange(4.0).reshape(1, 1, 2, 2), 1)
    >>> v.reshape(-1).tolist(), i.reshape(-1).tolist()
    ([3.0], [3])
    """
    return _adaptive_max(input, output_size, True, 2, "adaptive_max_pool2d_with_indices")
