"""More pooling: ``adaptive_avg_pool3d``, ``adaptive_max_pool3d``, ``lp_pool1d/2d/3d``,
``max_unpool1d/2d/3d`` and ``fractional_max_pool2d/3d``. All are composites: average
pools, a gather of window elements (``take_last``) followed by ``amax``, or a ``scatter``.
"""
from __future__ import annotations

import math

import numpy as np

from ..._core.backend import array_cls_of, namespace_of, on_device_of, runs_on_operands_device, xp
from ..._core.primitive import autocast_composite
from ..._core.tensor import _wrap
from .pooling import (_adaptive_avg, _adaptive_max, _batched, _window_max, avg_pool1d, avg_pool2d, avg_pool3d,
                      max_pool1d, max_pool2d, max_pool3d)
from ._complex import refuse_complex as _refuse_complex

__all__ = ["adaptive_avg_pool3d", "adaptive_max_pool3d", "lp_pool1d", "lp_pool2d", "lp_pool3d", "max_unpool1d",
           "max_unpool2d", "max_unpool3d", "fractional_max_pool2d", "fractional_max_pool3d",
           "adaptive_max_pool3d_with_indices", "fractional_max_pool2d_with_indices",
           "fractional_max_pool3d_with_indices"]


def _lucid():
    import lucid

    return lucid


def _tuple(v, n):
    """``v`` repeated ``n`` times if it is a number, else as a tuple of length ``n``."""
    if isinstance(v, (int, float)):
        return (v,) * n
    v = tuple(v)
    if len(v) == 1:
        return v * n
    if len(v) != n:
        raise ValueError(f"expected a number or a tuple of {n} numbers, got {v}")
    return v


@autocast_composite("adaptive_avg_pool3d")  # NOTE [Autocast]
def adaptive_avg_pool3d(input, output_size):
    """Average pooling of (N, C, D, H, W) to a fixed output size (PyTorch's windows).

    Examples
    --------
    >>> import lucid, lucid.nn.functional as F
    >>> F.adaptive_avg_pool3d(lucid.ones(1, 2, 3, 4, 5), 1).shape
    (1, 2, 1, 1, 1)
    """
    _refuse_complex("adaptive_avg_pool3d", input)
    return _adaptive_avg(input, output_size, 3, "adaptive_avg_pool3d")


@autocast_composite("adaptive_max_pool3d")  # NOTE [Autocast]
def adaptive_max_pool3d(input, output_size, return_indices=False):
    """Max pooling of (N, C, D, H, W) to a fixed output size.

    Examples
    --------
    >>> import lucid, lucid.nn.functional as F
    >>> F.adaptive_max_pool3d(lucid.arange(8.0).reshape(1, 1, 2, 2, 2), 1).reshape(-1).tolist()
    [7.0]
    """
    return _adaptive_max(input, output_size, return_indices, 3, "adaptive_max_pool3d")


def adaptive_max_pool3d_with_indices(input, output_size, return_indices=False):
    """:func:`adaptive_max_pool3d` returning ``(values, indices)`` (``return_indices`` is ignored).

    Examples
    --------
    >>> import lucid, lucid.nn.functional as F
    >>> v, i = F.adaptive_max_pool3d_with_indices(lucid.arange(8.0).reshape(1, 1, 2, 2, 2), 1)
    >>> v.reshape(-1).tolist(), i.reshape(-1).tolist()
    ([7.0], [7])
    """
    return _adaptive_max(input, output_size, True, 3, "adaptive_max_pool3d_with_indices")


def _lp_pool(input, norm_type, kernel_size, stride, ceil_mode, nsp, avg, maxpool):
    """PyTorch's formula: ``(sign(a) relu(|a|) * prod(k)) ** (1/p)`` with ``a = avg_pool(x**p)``;
    ``p = +-inf`` is the limit, the window's largest (smallest) ``|x|``, as PyTorch special-cases it
    (the formula would give ``inf ** 0 = 1``)."""
    lucid = _lucid()
    k = _tuple(kernel_size, nsp)
    if isinstance(norm_type, (int, float)) and math.isinf(norm_type):
        if norm_type > 0:
            return maxpool(input.abs(), k, stride, 0, 1, ceil_mode)
        return -maxpool(-input.abs(), k, stride, 0, 1, ceil_mode)
    out = avg(input ** norm_type, k, stride if stride is not None else k, 0, ceil_mode)
    if not (isinstance(norm_type, (int, float)) and norm_type > 0):
        return (lucid.sign(out) * lucid.relu(lucid.abs(out)) * math.prod(k)) ** (1.0 / norm_type)
    # sign(a) * relu(|a|) is ``a`` itself; PyTorch's gradient at an all-zero window is 0 only
    # because its relu backward selects rather than multiplies (inf * 0). Select here too.
    s = out * math.prod(k)
    nz = s != 0
    return lucid.where(nz, lucid.where(nz, s, 1.0) ** (1.0 / norm_type), 0.0)


def lp_pool1d(input, norm_type, kernel_size, stride=None, ceil_mode=False):
    """Power-average pooling ``(sum over the window of x**p) ** (1/p)`` over (N, C, L).

    Examples
    --------
    >>> import lucid, lucid.nn.functional as F
    >>> F.lp_pool1d(lucid.tensor([[[3.0, 4.0]]]), 2, 2).tolist()
    [[[5.0]]]
    """
    return _lp_pool(input, norm_type, kernel_size, stride, ceil_mode, 1, avg_pool1d, max_pool1d)


def lp_pool2d(input, norm_type, kernel_size, stride=None, ceil_mode=False):
    """Power-average pooling over (N, C, H, W); see :func:`lp_pool1d`.

    Examples
    --------
    >>> import lucid, lucid.nn.functional as F
    >>> F.lp_pool2d(lucid.ones(1, 1, 2, 2), 1, 2).tolist()
    [[[[4.0]]]]
    """
    return _lp_pool(input, norm_type, kernel_size, stride, ceil_mode, 2, avg_pool2d, max_pool2d)


def lp_pool3d(input, norm_type, kernel_size, stride=None, ceil_mode=False):
    """Power-average pooling over (N, C, D, H, W); see :func:`lp_pool1d`.

    Examples
    --------
    >>> import lucid, lucid.nn.functional as F
    >>> F.lp_pool3d(lucid.ones(1, 1, 2, 2, 2), 1, 2).reshape(-1).tolist()
    [8.0]
    """
    return _lp_pool(input, norm_type, kernel_size, stride, ceil_mode, 3, avg_pool3d, max_pool3d)


def _max_unpool(input, indices, kernel_size, stride, padding, output_size, nsp, op):
    x, unbatched = _batched(input, nsp, op)
    idx = indices.unsqueeze(0) if unbatched else indices
    if tuple(idx.shape) != tuple(x.shape) or idx.dtype.kind not in "iu":
        raise RuntimeError(f"{op}: expected integer indices of the input's shape {tuple(x.shape)}, got "
                           f"{tuple(indices.shape)} {indices.dtype}")
    k = _tuple(kernel_size, nsp)
    s = _tuple(stride if stride is not None else kernel_size, nsp)
    p = _tuple(padding, nsp)
    out_sp = tuple((n - 1) * si - 2 * pi + ki for n, si, pi, ki in zip(x.shape[2:], s, p, k))
    if output_size is not None:
        out_sp = _unpool_size(out_sp, s, output_size, op)
    n, c = x.shape[:2]
    size = math.prod(out_sp)
    flat = idx.reshape(n, c, -1)
    # The bounds check reads values: CPU only (on a device it would read back every call;
    # PyTorch's CUDA kernel checks with a device-side assert), and plain tensors only (a
    # transform's tracer has no values to read: vmap batches max_unpool as PyTorch's does).
    if flat.__class__ is _lucid().Tensor and array_cls_of(flat) is np.ndarray and flat.numel() and (
            int(flat.min().item()) < 0 or int(flat.max().item()) >= size):
        raise RuntimeError(f"{op}: found an index out of bounds for an output of size {out_sp}")
    out = _lucid().zeros(n, c, size, dtype=x.dtype, device=x.device).scatter(2, flat, x.reshape(n, c, -1))
    out = out.reshape((n, c) + out_sp)
    return out.squeeze(0) if unbatched else out


def _unpool_size(default, stride, output_size, op):
    """PyTorch's check: ``output_size`` (spatial, or with the batch and channel dims) must lie
    strictly within one stride of the default size in every dim."""
    size = tuple(int(o) for o in output_size)
    if len(size) == len(default) + 2:
        size = size[2:]
    if len(size) != len(default):
        raise ValueError(f"{op}: output_size should be a sequence containing {len(default)} or "
                         f"{len(default) + 2} elements, but it has a length of {len(size)}")
    for d, (o, df, st) in enumerate(zip(size, default, stride)):
        if not df - st < o < df + st:
            raise ValueError(f'{op}: invalid output_size "{list(size)}" (dim {d} must be between '
                             f"{df - st} and {df + st})")
    return size


# PyTorch's CPU autocast runs max_unpool2d/3d (and max_unpool1d, which calls the 2-d kernel) in
# float32 and leaves them alone on CUDA: the lists of max_pool3d exactly, so the three unpools are
# cast as that name says (lucid/amp/autocast_mode.py's lists do not name the unpools).
_UNPOOL_AUTOCAST_LISTS = "max_pool3d"


@autocast_composite(_UNPOOL_AUTOCAST_LISTS)  # NOTE [Autocast]
def max_unpool1d(input, indices, kernel_size, stride=None, padding=0, output_size=None):
    """Partial inverse of ``max_pool1d``: each value goes back to the position its index
    names, zeros elsewhere.

    Examples
    --------
    >>> import lucid, lucid.nn.functional as F
    >>> v, i = F.max_pool1d(lucid.tensor([[[1.0, 3.0, 2.0, 0.0]]]), 2, return_indices=True)
    >>> F.max_unpool1d(v, i, 2).tolist()
    [[[0.0, 3.0, 2.0, 0.0]]]
    """
    return _max_unpool(input, indices, kernel_size, stride, padding, output_size, 1, "max_unpool1d")


@autocast_composite(_UNPOOL_AUTOCAST_LISTS)  # NOTE [Autocast]
def max_unpool2d(input, indices, kernel_size, stride=None, padding=0, output_size=None):
    """Partial inverse of ``max_pool2d`` (see :func:`max_unpool1d`).

    Examples
    --------
    >>> import lucid, lucid.nn.functional as F
    >>> v, i = F.max_pool2d(lucid.arange(4.0).reshape(1, 1, 2, 2), 2, return_indices=True)
    >>> F.max_unpool2d(v, i, 2).tolist()
    [[[[0.0, 0.0], [0.0, 3.0]]]]
    """
    return _max_unpool(input, indices, kernel_size, stride, padding, output_size, 2, "max_unpool2d")


@autocast_composite(_UNPOOL_AUTOCAST_LISTS)  # NOTE [Autocast]
def max_unpool3d(input, indices, kernel_size, stride=None, padding=0, output_size=None):
    """Partial inverse of ``max_pool3d`` (see :func:`max_unpool1d`).

    Examples
    --------
    >>> import lucid, lucid.nn.functional as F
    >>> v, i = F.max_pool3d(lucid.arange(8.0).reshape(1, 1, 2, 2, 2), 2, return_indices=True)
    >>> F.max_unpool3d(v, i, 2).reshape(-1).tolist()[-1]
    7.0
    """
    return _max_unpool(input, indices, kernel_size, stride, padding, output_size, 3, "max_unpool3d")


def _starts(u, n, o, k):
    """PyTorch's pseudo-random window starts along one dim, for every sample ``u`` (an array
    of any shape, float64) at once: ``int((i + u) a) - int(u a)``, ``a = (n-k)/(o-1)``, the
    last window flush with the end. Shape ``u.shape + (o,)``, on ``u``'s device."""
    last = xp.full_like(u, n - k, dtype=np.int64)[..., None]
    if o == 1:
        return last
    alpha = (n - k) / (o - 1)
    i = namespace_of(u).arange(o - 1)
    # u and alpha are >= 0, so astype's truncation is int()'s
    first = ((i + u[..., None]) * alpha).astype(np.int64) - (u * alpha).astype(np.int64)[..., None]
    return xp.concatenate([first, last], -1)


@runs_on_operands_device  # its array code runs on the input's device (NOTE [Several devices])
def _fractional(input, kernel_size, output_size, output_ratio, return_indices, samples, nsp, op):
    x, unbatched = _batched(input, nsp, op)
    n, c = x.shape[:2]
    sp = tuple(x.shape[2:])
    k = _tuple(kernel_size, nsp)
    if output_size is None:
        if output_ratio is None:
            raise ValueError(f"{op}: fractional_max_pool requires specifying either an output_size or an "
                             "output_ratio")
        ratio = _tuple(output_ratio, nsp)
        output_size = tuple(int(m * r) for m, r in zip(sp, ratio))
    osz = _tuple(output_size, nsp)
    if any(o + ki - 1 > m for o, ki, m in zip(osz, k, sp)):
        raise RuntimeError(f"{op}: output size {osz} + kernel {k} - 1 is too large for the input {sp}")
    if samples is None:
        samples = _lucid().rand(n, c, nsp, dtype=x.dtype, device=x.device)
    # The window starts are computed from the samples where they are (on a device, there: no
    # read back), all examples and channels at once.
    # PyTorch reads the rows of the first n examples only (more rows may be given, e.g. one
    # sample tensor reused for an unbatched input)
    u = samples.detach()._data[:n].astype(np.float64).reshape(n, c, nsp)
    # PyTorch's sample order: 2-d uses [W, H], 3-d [T, H, W]
    order = (1, 0) if nsp == 2 else (0, 1, 2)
    # flat input position of (example, channel, output point, kernel offset): the sum over dims
    # of (window start + offset) * stride, broadcast as (n, c, *osz, *k)
    flat, stride = 0, 1
    for d in reversed(range(nsp)):
        st = _starts(u[:, :, order[d]], sp[d], osz[d], k[d])  # (n, c, osz[d])
        st = st.reshape((n, c) + tuple(osz[d] if j == d else 1 for j in range(nsp)) + (1,) * nsp)
        off = np.arange(k[d]).reshape((1, 1) + (1,) * nsp + tuple(k[d] if j == d else 1 for j in range(nsp)))
        flat = flat + (st + on_device_of(off, st)) * stride
        stride *= sp[d]
    flat = flat.reshape(n, c, math.prod(osz), math.prod(k))
    # the first maximum, as PyTorch's scan, carries the value and the gradient; with tensor
    # ops, so it also runs inside vmap
    out, idx = _window_max(x, _wrap(flat), osz)
    if unbatched:
        out = out.squeeze(0)
        idx = idx.squeeze(0) if idx is not None else None
    return (out, idx) if return_indices else out


@autocast_composite("fractional_max_pool2d")  # NOTE [Autocast]
def fractional_max_pool2d(input, kernel_size, output_size=None, output_ratio=None, return_indices=False,
                          _random_samples=None):
    """Fractional max pooling (Graham, 2014) over (N, C, H, W): windows of ``kernel_size``
    at pseudo-random starts so that the output has ``output_size`` (or ``output_ratio`` of
    the input). ``_random_samples`` (N, C, 2) in [0, 1) fixes the starts (as in PyTorch);
    otherwise they are drawn from the global generator.

    Examples
    --------
    >>> import lucid, lucid.nn.functional as F
    >>> F.fractional_max_pool2d(lucid.ones(1, 2, 7, 7), 2, output_size=3).shape
    (1, 2, 3, 3)
    """
    return _fractional(input, kernel_size, output_size, output_ratio, return_indices, _random_samples, 2,
                       "fractional_max_pool2d")


@autocast_composite("fractional_max_pool3d")  # NOTE [Autocast]
def fractional_max_pool3d(input, kernel_size, output_size=None, output_ratio=None, return_indices=False,
                          _random_samples=None):
    """Fractional max pooling over (N, C, D, H, W); see :func:`fractional_max_pool2d`
    (``_random_samples`` is (N, C, 3)).

    Examples
    --------
    >>> import lucid, lucid.nn.functional as F
    >>> F.fractional_max_pool3d(lucid.ones(1, 1, 5, 5, 5), 2, output_ratio=0.5).shape
    (1, 1, 2, 2, 2)
    """
    return _fractional(input, kernel_size, output_size, output_ratio, return_indices, _random_samples, 3,
                       "fractional_max_pool3d")


def fractional_max_pool2d_with_indices(input, kernel_size, output_size=None, output_ratio=None,
                                       return_indices=False, _random_samples=None):
    """:func:`fractional_max_pool2d` returning ``(values, indices)`` (``return_indices`` is ignored).

    Examples
    --------
    >>> import lucid, lucid.nn.functional as F
    >>> x = lucid.arange(16.0).reshape(1, 1, 4, 4)
    >>> v, i = F.fractional_max_pool2d_with_indices(x, 2, output_size=1)
    >>> v.reshape(-1).tolist(), i.reshape(-1).tolist()
    ([15.0], [15])
    """
    return _fractional(input, kernel_size, output_size, output_ratio, True, _random_samples, 2,
                       "fractional_max_pool2d_with_indices")


def fractional_max_pool3d_with_indices(input, kernel_size, output_size=None, output_ratio=None,
                                       return_indices=False, _random_samples=None):
    """:func:`fractional_max_pool3d` returning ``(values, indices)`` (``return_indices`` is ignored).

    Examples
    --------
    >>> import lucid, lucid.nn.functional as F
    >>> x = lucid.arange(8.0).reshape(1, 1, 2, 2, 2)
    >>> v, i = F.fractional_max_pool3d_with_indices(x, 2, output_size=1)
    >>> v.reshape(-1).tolist(), i.reshape(-1).tolist()
    ([7.0], [7])
    """
    return _fractional(input, kernel_size, output_size, output_ratio, True, _random_samples, 3,
                       "fractional_max_pool3d_with_indices")
