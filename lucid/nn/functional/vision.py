"""Resampling: ``interpolate`` (nearest, linear, bilinear, trilinear) and the ``upsample`` aliases.

Nearest resampling is a gather with constant indices (``getitem``); (bi/tri)linear
resampling is separable and linear, so it is one matmul per spatial dim with a constant
interpolation matrix. Both are composites: every rule comes from ``getitem``/``matmul``.
"""
from __future__ import annotations

import math

import numpy as np

from ..._core.primitive import autocast_composite
from ..._core.tensor import _wrap
from ._device import const_like
from ...ops._family import _as_tensor
from ._complex import refuse_complex as _refuse_complex
from .pooling import _adaptive_avg

__all__ = ["interpolate", "upsample", "upsample_nearest", "upsample_bilinear", "pixel_shuffle", "pixel_unshuffle",
           "channel_shuffle"]

_LINEAR = {"linear": 1, "bilinear": 2, "trilinear": 3}


def _out_sizes(sp, size, scale_factor, op):
    nsp = len(sp)
    if (size is None) == (scale_factor is None):
        raise ValueError(f"{op}: exactly one of size or scale_factor must be given")
    if size is not None:
        size = (size,) * nsp if isinstance(size, int) else tuple(int(s) for s in size)
        if len(size) != nsp:
            raise ValueError(f"{op}: size {size} must have {nsp} elements for an input with {nsp} spatial dims")
        if any(o <= 0 for o in size):
            raise RuntimeError(f"{op}: input and output sizes should be greater than 0, got input {tuple(sp)} and "
                               f"output {size}")
        return size, [n / o for n, o in zip(sp, size)]
    sf = (scale_factor,) * nsp if isinstance(scale_factor, (int, float)) else tuple(scale_factor)
    if len(sf) != nsp:
        raise ValueError(f"{op}: scale_factor {sf} must have {nsp} elements")
    return tuple(int(math.floor(n * f)) for n, f in zip(sp, sf)), [1.0 / f for f in sf]


def _nearest_index(n, o, scale, exact):
    i = np.arange(o, dtype=np.float64)
    src = np.floor((i + 0.5) * scale) if exact else np.floor(i * scale)
    return np.minimum(src.astype(np.int64), n - 1)


def _linear_matrix(n, o, scale, align_corners):
    """(o, n) interpolation matrix for one dim (PyTorch's source-index rule)."""
    i = np.arange(o, dtype=np.float64)
    if align_corners:
        src = i * ((n - 1) / (o - 1)) if o > 1 else np.zeros(o)
    else:
        src = np.maximum((i + 0.5) * scale - 0.5, 0.0)
    i0 = np.minimum(np.floor(src).astype(np.int64), n - 1)
    i1 = np.minimum(i0 + 1, n - 1)
    lam = src - i0
    a = np.zeros((o, n))
    np.add.at(a, (np.arange(o), i0), 1.0 - lam)
    np.add.at(a, (np.arange(o), i1), lam)
    return a


def _cubic_matrix(n, o, scale, align_corners, a=-0.75):
    """(o, n) bicubic interpolation matrix for one dim: Keys' cubic convolution with
    ``a = -0.75`` on the taps ``floor(src) - 1 .. floor(src) + 2`` clamped to the border
    (PyTorch's rule; the source index is not clamped at 0, unlike the linear modes)."""
    i = np.arange(o, dtype=np.float64)
    if align_corners:
        src = i * ((n - 1) / (o - 1)) if o > 1 else np.zeros(o)
    else:
        src = (i + 0.5) * scale - 0.5
    i0 = np.floor(src).astype(np.int64)
    t = src - i0
    near = lambda d: ((a + 2) * d - (a + 3)) * d * d + 1  # noqa: E731  (|d| <= 1)
    far = lambda d: ((a * d - 5 * a) * d + 8 * a) * d - 4 * a  # noqa: E731  (1 < |d| < 2)
    m = np.zeros((o, n))
    for k, w in zip((-1, 0, 1, 2), (far(t + 1), near(t), near(1 - t), far(2 - t))):
        np.add.at(m, (np.arange(o), np.clip(i0 + k, 0, n - 1)), w)
    return m


def _aa_filter(x, cubic):
    x = np.abs(x)
    if not cubic:
        return np.maximum(1.0 - x, 0.0)
    a = -0.5  # Keys' (PIL's) kernel, not the -0.75 of plain bicubic
    return np.where(x < 1, ((a + 2) * x - (a + 3)) * x * x + 1,
                    np.where(x < 2, ((a * x - 5 * a) * x + 8 * a) * x - 4 * a, 0.0))


def _antialias_matrix(n, o, scale, align_corners, cubic):
    """(o, n) matrix of PyTorch's ``antialias=True`` resampling (PIL's): when shrinking, the
    filter is stretched by the scale so each output averages all the inputs it covers;
    each row is normalized to sum 1."""
    if align_corners:
        scale = (n - 1) / (o - 1) if o > 1 else 0.0
    support = (2.0 if cubic else 1.0) * max(scale, 1.0)
    invscale = 1.0 / scale if scale >= 1.0 else 1.0
    m = np.zeros((o, n))
    for i in range(o):
        center = scale * (i + 0.5)
        lo, hi = max(int(center - support + 0.5), 0), min(int(center + support + 0.5), n)
        w = _aa_filter((np.arange(lo, hi) - center + 0.5) * invscale, cubic)
        m[i, lo:hi] = w / w.sum() if w.sum() != 0 else w
    return m


def _separable(x, sp, osz, matrix):
    """Apply one (o, n) matrix per spatial dim (a composite of movedim and matmul); a
    ``None`` matrix leaves its dim as it is."""
    out = x
    for i, (n, o) in enumerate(zip(sp, osz)):
        a = matrix(i, n, o)
        if a is None:
            continue
        out = (out.movedim(2 + i, -1) @ const_like(a.T.astype(x.dtype), x)).movedim(-1, 2 + i)
    return out


@autocast_composite("interpolate")  # NOTE [Autocast]
def interpolate(input, size=None, scale_factor=None, mode="nearest", align_corners=None,
                recompute_scale_factor=None, antialias=False):
    """Resize the spatial dims of an (N, C, *S) tensor.

    Modes: ``'nearest'``, ``'nearest-exact'``, ``'linear'`` (3-D input), ``'bilinear'``
    and ``'bicubic'`` (4-D), ``'trilinear'`` (5-D), ``'area'`` (adaptive average pooling,
    any number of spatial dims). ``align_corners`` as in PyTorch (interpolating modes only).
    ``antialias=True`` (bilinear and bicubic) filters as PyTorch (and PIL) when shrinking.
    Bilinear and bicubic also take ``uint8`` images, resampled in PyTorch's fixed point
    (rounded and saturated, bit for bit; NOTE [uint8 resampling]); other modes need floats.

    Parameters
    ----------
    input : Tensor
        Of shape (N, C, *spatial).
    size : int or tuple of int, optional
        The output spatial size.
    scale_factor : float or tuple of float, optional
        Multiplier of the spatial size (give ``size`` or this).
    mode : str
        'nearest', 'nearest-exact', 'linear', 'bilinear', 'bicubic', 'trilinear' or 'area'.
    align_corners : bool, optional
        For the linear modes: align the corner pixels' centres.

    Examples
    --------
    >>> import lucid
    >>> import lucid.nn.functional as F
    >>> F.interpolate(lucid.tensor([[[1.0, 2.0]]]), scale_factor=2).tolist()
    [[[1.0, 1.0, 2.0, 2.0]]]
    >>> img = lucid.tensor([[[[0, 255]]]], dtype=lucid.uint8)
    >>> F.interpolate(img, size=(1, 3), mode="bilinear", align_corners=True).tolist()
    [[[[0, 128, 255]]]]
    """
    _refuse_complex("interpolate", input)
    x = _as_tensor(input)
    nsp = x.ndim - 2
    if nsp < 1:
        raise _ModeError(f"interpolate: expected an input with at least 3 dims (N, C, ...), got shape {tuple(x.shape)}")
    sp = tuple(x.shape[2:])
    if recompute_scale_factor and size is not None:
        raise ValueError("interpolate: recompute_scale_factor is not meaningful with an explicit size")
    if recompute_scale_factor and scale_factor is not None:
        size, scale_factor = _out_sizes(sp, None, scale_factor, "interpolate")[0], None
    osz, scales = _out_sizes(sp, size, scale_factor, "interpolate")
    if any(o <= 0 for o in osz):
        raise RuntimeError(f"interpolate: input and output sizes should be greater than 0, got input {sp} and "
                           f"output {osz}")
    if antialias and (mode not in ("bilinear", "bicubic") or nsp != 2):
        raise ValueError("interpolate: the anti-alias option is restricted to the bilinear and bicubic modes and "
                         "requires a 4-D input")
    if mode in ("nearest", "nearest-exact", "area"):
        if align_corners is not None:
            raise ValueError("interpolate: align_corners option can only be set with the interpolating modes: "
                             "linear | bilinear | bicubic | trilinear")
        if mode == "area":  # PyTorch's area mode is adaptive average pooling
            _check_float(x, mode)
            return _adaptive_avg(x, osz, nsp, "interpolate")
        out = x
        for i, (n, o, s) in enumerate(zip(sp, osz, scales)):
            idx = _nearest_index(n, o, s, mode == "nearest-exact")
            out = out[(slice(None),) * (2 + i) + (idx,)]
        return out
    if mode in _LINEAR or mode == "bicubic":
        want = 2 if mode == "bicubic" else _LINEAR[mode]
        if want != nsp:
            raise _ModeError(f"interpolate: mode {mode!r} expects a {want + 2}-D input, "
                             f"got shape {tuple(x.shape)}")
        cubic, ac = mode == "bicubic", bool(align_corners)
        if x.dtype == np.uint8 and nsp == 2:  # bilinear, bicubic: NOTE [uint8 resampling]
            return _resample_uint8(x, sp, osz, scales, ac, cubic, antialias)
        _check_float(x, mode)

        def build(i, n, o):
            if antialias:  # PyTorch skips a dim whose size does not change
                return None if n == o else _antialias_matrix(n, o, scales[i], ac, cubic)
            if cubic:
                return _cubic_matrix(n, o, scales[i], ac)
            # PyTorch's linear kernels copy a dim whose size does not change, whatever the scale
            return None if n == o else _linear_matrix(n, o, scales[i], ac)

        return _separable(x, sp, osz, build)
    raise ValueError(f"interpolate: mode {mode!r} is not supported (nearest, nearest-exact, linear, "
                     "bilinear, bicubic, trilinear, area)")


class _ModeError(NotImplementedError, ValueError):
    """A mode given an input of the wrong rank (PyTorch: NotImplementedError; ValueError kept
    for earlier callers)."""


def _check_float(x, mode):
    if x.dtype.kind != "f":
        # PyTorch has no integer kernels for these modes: NotImplementedError, a RuntimeError
        extra = " (uint8 images: modes 'bilinear' and 'bicubic')" if x.dtype == np.uint8 else ""
        raise NotImplementedError(f"interpolate: mode {mode!r} needs a floating point input, got {x.dtype}{extra}")


# NOTE [uint8 resampling]
# PyTorch (CPU) resizes uint8 images in bilinear and bicubic modes (antialias or not) in
# fixed point, one spatial dim at a time (width, then height; a dim whose size does not
# change is skipped), each pass rounded and saturated to uint8:
# - the weights of a dim are computed in float64 (without antialias the taps beyond the
#   border fold into the edge tap; the source index is floored in float32, PyTorch's
#   ``floorf``), scaled by 2**p and rounded half away from zero, p being the largest
#   precision (< 22) that keeps the largest weight of the dim below 2**15;
# - out = clamp((sum(pixel * weight) + 2**(p - 1)) >> p, 0, 255).
# The sums are integers below 2**53, so a float64 matmul computes them exactly and
# ``floor(. / 2**p)`` is the shift: the result is PyTorch's bit for bit. Integer outputs have
# no gradient, so the composite (movedim, matmul, floor, clamp) needs no rules of its own.
def _u8_filter(cubic, aa):
    a = -0.5 if aa else -0.75  # Keys' (PIL's) cubic with antialias, OpenCV's without

    def f(x):
        x = abs(x)
        if not cubic:
            return 1.0 - x if x < 1.0 else 0.0
        if x < 1.0:
            return ((a + 2) * x - (a + 3)) * x * x + 1
        return ((a * x - 5 * a) * x + 8 * a) * x - 4 * a if x < 2.0 else 0.0

    return f


def _u8_taps_aa(n, o, scale, cubic):
    """PyTorch's antialias taps: (first index, float64 weights) per output, and the largest."""
    f, half = _u8_filter(cubic, True), 2.0 if cubic else 1.0
    support = half * scale if scale >= 1.0 else half
    most, invscale = int(math.ceil(support)) * 2 + 1, 1.0 / scale if scale >= 1.0 else 1.0
    rows, wmax = [], 0.0
    for i in range(o):
        center = scale * (i + 0.5)
        lo = max(int(center - support + 0.5), 0)
        size = min(max(min(int(center + support + 0.5), n) - lo, 0), most)
        w = [f((j + lo - center + 0.5) * invscale) for j in range(size)]
        total = 0.0
        for v in w:  # in order, as PyTorch sums them
            total += v
        if total != 0.0:
            w = [v / total for v in w]
            wmax = max([wmax] + w)
        rows.append((lo, w))
    return rows, wmax


def _u8_taps(n, o, scale, ac, cubic):
    """PyTorch's taps without antialias: those beyond the border fold into the edge tap."""
    f, taps = _u8_filter(cubic, False), 4 if cubic else 2
    support = taps // 2
    rows, wmax = [], 0.0
    for i in range(o):
        src = scale * i if ac else scale * (i + 0.5) - 0.5
        src = 0.0 if not (ac or cubic) and src < 0 else src
        i0 = min(int(math.floor(np.float32(src))), n - 1)
        lam = min(max(src - i0, 0.0), 1.0)
        first = i0 - support + 1
        lo = max(first, 0)
        size = min(max(min(i0 + support + 1, n) - lo, 0), taps)
        w, k = [0.0] * taps, 0
        for j in range(taps):
            k = 0 if first + j <= 0 else size - 1 if first + j >= n - 1 else k
            w[k] += f(float(j + 1 - support) - lam)
            wmax = max(wmax, w[k])
            k += 1
        rows.append((lo, w[:size]))
    return rows, wmax


def _u8_matrix(n, o, scale, ac, cubic, aa):
    """The (o, n) integer weights of one dim (as float64) and their precision p."""
    if ac:
        scale = (n - 1) / (o - 1) if o > 1 else 0.0
    rows, wmax = _u8_taps_aa(n, o, scale, cubic) if aa else _u8_taps(n, o, scale, ac, cubic)
    p = 0
    while p < 22 and int(0.5 + wmax * (1 << (p + 1))) < (1 << 15):
        p += 1
    m = np.zeros((o, n))
    for i, (lo, w) in enumerate(rows):
        for j, v in enumerate(w):
            v *= 1 << p
            m[i, lo + j] = int(v - 0.5) if v < 0 else int(v + 0.5)
    return m, p


def _resample_uint8(x, sp, osz, scales, ac, cubic, aa):
    """Bilinear/bicubic resampling of a uint8 (N, C, H, W) tensor. See NOTE [uint8 resampling]."""
    import lucid

    out = x
    for d in (1, 0):  # width first, as PyTorch
        n, o = sp[d], osz[d]
        if n == o:
            continue
        m, p = _u8_matrix(n, o, scales[d], ac, cubic, aa)
        acc = out.movedim(2 + d, -1).to(lucid.float64) @ const_like(m.T, x)
        acc = lucid.floor((acc + float(1 << (p - 1))) / float(1 << p)).clamp(0, 255)
        out = acc.to(lucid.uint8).movedim(-1, 2 + d)
    return out if out is not x else x.clone()


def upsample(input, size=None, scale_factor=None, mode="nearest", align_corners=None):
    """Deprecated alias of :func:`interpolate`.

    Parameters
    ----------
    input : Tensor
        Of shape (N, C, *spatial).
    size : int or tuple of int, optional
        The output spatial size.
    scale_factor : float or tuple of float, optional
        Multiplier of the spatial size (give ``size`` or this).
    mode : str
        As for :func:`interpolate`.
    align_corners : bool, optional
        As for :func:`interpolate`.

    Examples
    --------
    >>> import lucid, lucid.nn.functional as F
    >>> F.upsample(lucid.ones(1, 1, 2), scale_factor=2).shape
    (1, 1, 4)
    """
    return interpolate(input, size, scale_factor, mode, align_corners)


def upsample_nearest(input, size=None, scale_factor=None):
    """Nearest-neighbour upsampling (deprecated alias of ``interpolate(mode='nearest')``).

    Parameters
    ----------
    input : Tensor
        Of shape (N, C, *spatial).
    size : int or tuple of int, optional
        The output spatial size.
    scale_factor : float or tuple of float, optional
        Multiplier of the spatial size (give ``size`` or this).

    Examples
    --------
    >>> import lucid, lucid.nn.functional as F
    >>> F.upsample_nearest(lucid.tensor([[[1.0, 2.0]]]), scale_factor=2).tolist()
    [[[1.0, 1.0, 2.0, 2.0]]]
    """
    return interpolate(input, size, scale_factor, mode="nearest")


def upsample_bilinear(input, size=None, scale_factor=None):
    """Bilinear upsampling with ``align_corners=True`` (deprecated alias of :func:`interpolate`).

    Parameters
    ----------
    input : Tensor
        Of shape (N, C, *spatial).
    size : int or tuple of int, optional
        The output spatial size.
    scale_factor : float or tuple of float, optional
        Multiplier of the spatial size (give ``size`` or this).

    Examples
    --------
    >>> import lucid, lucid.nn.functional as F
    >>> F.upsample_bilinear(lucid.tensor([[[[0.0, 3.0]]]]), size=(1, 4)).tolist()
    [[[[0.0, 1.0, 2.0, 3.0]]]]
    """
    return interpolate(input, size, scale_factor, mode="bilinear", align_corners=True)


def pixel_shuffle(input, upscale_factor):
    """Rearrange ``(*, C r^2, H, W)`` into ``(*, C, H r, W r)`` (sub-pixel convolution).

    Examples
    --------
    >>> import lucid, lucid.nn.functional as F
    >>> F.pixel_shuffle(lucid.arange(4.0).reshape(1, 4, 1, 1), 2).tolist()
    [[[[0.0, 1.0], [2.0, 3.0]]]]
    """
    r = int(upscale_factor)
    if input.ndim < 3 or r <= 0 or input.shape[-3] % (r * r):
        raise RuntimeError(f"pixel_shuffle: expected an input of at least 3 dims whose channels are divisible "
                           f"by upscale_factor^2 = {r * r}, got shape {tuple(input.shape)}")
    *lead, c, h, w = input.shape
    n = len(lead)
    x = input.reshape(tuple(lead) + (c // (r * r), r, r, h, w))
    x = x.permute(*range(n), n, n + 3, n + 1, n + 4, n + 2)
    return x.reshape(tuple(lead) + (c // (r * r), h * r, w * r))


def pixel_unshuffle(input, downscale_factor):
    """The inverse of :func:`pixel_shuffle`: ``(*, C, H r, W r)`` into ``(*, C r^2, H, W)``.

    Examples
    --------
    >>> import lucid, lucid.nn.functional as F
    >>> F.pixel_unshuffle(lucid.arange(4.0).reshape(1, 1, 2, 2), 2).reshape(-1).tolist()
    [0.0, 1.0, 2.0, 3.0]
    """
    r = int(downscale_factor)
    if input.ndim < 3 or r <= 0 or input.shape[-1] % r or input.shape[-2] % r:
        raise RuntimeError(f"pixel_unshuffle: expected an input of at least 3 dims whose height and width are "
                           f"divisible by downscale_factor = {r}, got shape {tuple(input.shape)}")
    *lead, c, h, w = input.shape
    n = len(lead)
    x = input.reshape(tuple(lead) + (c, h // r, r, w // r, r))
    x = x.permute(*range(n), n, n + 2, n + 4, n + 1, n + 3)
    return x.reshape(tuple(lead) + (c * r * r, h // r, w // r))


def channel_shuffle(input, groups):
    """Interleave the channels (dim 1) of ``groups`` groups: ``(N, g, C/g, *) -> (N, C/g, g, *)``.

    Examples
    --------
    >>> import lucid, lucid.nn.functional as F
    >>> F.channel_shuffle(lucid.arange(4.0).reshape(1, 4, 1), 2).reshape(-1).tolist()
    [0.0, 2.0, 1.0, 3.0]
    """
    g = int(groups)
    if input.ndim < 3 or g <= 0 or input.shape[1] % g:
        raise RuntimeError(f"channel_shuffle: expected an input of at least 3 dims whose channels are divisible "
                           f"by groups = {g}, got shape {tuple(input.shape)}")
    n, c, *rest = input.shape
    x = input.reshape((n, g, c // g) + tuple(rest)).transpose(1, 2)
    return x.reshape((n, c) + tuple(rest))
