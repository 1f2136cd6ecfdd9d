"""Convolutions on a device: im2col and col2im as fused kernels, and the generic strided path.

See NOTE [Conv on a device] below, and NOTE [Conv as three bilinear primitives] in conv.py,
whose impls call these on device arrays. ``_pad_crop`` is shared with the CPU path.
"""
from __future__ import annotations

import math

import numpy as np

from .. import _runtime
from .._core import backend as _backend
from .._core.backend import as_strided, namespace_of, xp
from .._core.cudnn import DATA_TYPE, CudnnError, CudnnUnusable, conv_geometry_ok
from .._core.kernels import Kernel, kernel_for


def conv_out_size(in_sp, ksize, stride, padding, dilation):
    """Spatial output size of a convolution with ``(lo, hi)`` padding pairs."""
    return tuple((n + lo + hi - d * (k - 1) - 1) // s + 1
                 for n, k, s, (lo, hi), d in zip(in_sp, ksize, stride, padding, dilation))


def _pad_crop(x, padding, value=0.0):
    """Pad the spatial dims of ``x`` (N, C, *S) by ``(lo, hi)`` pairs; negative pads crop."""
    if all(lo == 0 and hi == 0 for lo, hi in padding):
        return x
    crop = (slice(None), slice(None)) + tuple(
        slice(max(-lo, 0), n - max(-hi, 0)) for (lo, hi), n in zip(padding, x.shape[2:]))
    x = x[crop]
    pos = [(max(lo, 0), max(hi, 0)) for lo, hi in padding]
    if not any(lo or hi for lo, hi in pos):
        return x
    shape = x.shape[:2] + tuple(n + lo + hi for (lo, hi), n in zip(pos, x.shape[2:]))
    out = namespace_of(x).full(shape, value, dtype=x.dtype)
    out[(slice(None), slice(None)) + tuple(slice(lo, lo + n) for (lo, _), n in zip(pos, x.shape[2:]))] = x
    return out


# NOTE [Conv on a device]
# On a device (CuPy; cuDNN is not in CuPy 14) a conv is an im2col into (N, G, Cg*K, P) columns
# and one batched matmul (cuBLAS); its weight gradient one im2col in the GEMM's layout
# (C, *K, N, *out) and one GEMM; a transposed conv (a conv's input gradient) one batched
# GEMM to columns (N, Cout, *K, *in) and a col2im that gathers them. For 1-D and 2-D convs in
# float32/float64, im2col and col2im are fused kernels (NOTE [Fused device kernels]: padding
# and cropping included, one launch each). Otherwise im2col is one strided view of the padded
# input copied once, a stride-1 transposed conv is the conv of its input with the flipped
# kernel, and other strides scatter the GEMM's columns back one kernel offset at a time. The
# CPU path's machinery (scratch pools, column cache, flat shifts) exists to save host memory
# traffic and page faults; CuPy's memory pool already reuses blocks, and its arrays need not
# support weak references, so the device path keeps none of it.
_IM2COL = Kernel("lucid_im2col", "const T* x, long long N, long long C, long long H, long long W, long long KH, "
                 "long long KW, long long OH, long long OW, long long sh, long long sw, long long ph, "
                 "long long pw, long long dh, long long dw, int channel_major, T* cols", """
    // cols is (N, C, KH, KW, OH, OW), or with channel_major (C, KH, KW, N, OH, OW). The index
    // arithmetic is in Z: int where every index fits (a GPU divides 32-bit integers several
    // times faster than 64-bit ones), else long long.
    Z r = (Z)i;
    const Z ow = r % (Z)OW; r /= (Z)OW;
    const Z oh = r % (Z)OH; r /= (Z)OH;
    Z n = 0;
    if (channel_major) { n = r % (Z)N; r /= (Z)N; }
    const Z kw = r % (Z)KW; r /= (Z)KW;
    const Z kh = r % (Z)KH; r /= (Z)KH;
    const Z c = channel_major ? r : r % (Z)C;
    if (!channel_major) n = r / (Z)C;
    const Z h = oh * (Z)sh + kh * (Z)dh - (Z)ph, w = ow * (Z)sw + kw * (Z)dw - (Z)pw;
    cols[i] = (h >= 0 && h < (Z)H && w >= 0 && w < (Z)W) ? x[((n * (Z)C + c) * (Z)H + h) * (Z)W + w] : (T)0;
""", types=("T", "Z"))


def _plane(nd, seq, fill=1):
    """A 1-D conv's sizes as those of a 2-D conv of height 1 (``fill`` for the height)."""
    return (fill,) * (2 - nd) + tuple(seq)


def _index_dtype(largest):
    """The kernels' index type: int32 where every index is below ``largest`` < 2**31 (a GPU
    divides 32-bit integers several times faster than 64-bit ones), else int64."""
    return np.dtype(np.int32 if largest < 2 ** 31 else np.int64)


def _fused_cols(x, ksize, stride, padding, dilation, out_sp, channel_major=False):
    """im2col of a 1-D or 2-D conv as one kernel, padding and cropping included (the generic
    path pads with a fill and a copy first: three launches): (N, C, *K, *out), or with
    ``channel_major`` (C, *K, N, *out), the layout of the weight gradient's GEMM. None where
    it does not apply. See NOTE [Fused device kernels]."""
    if len(ksize) > 2 or x.dtype not in (np.float32, np.float64) or not x.flags["C_CONTIGUOUS"]:
        return None
    n, c = x.shape[:2]
    size = n * c * math.prod(ksize) * math.prod(out_sp)  # of the columns; every index is below it or x.size
    launch = kernel_for(x, _IM2COL, x.dtype, _index_dtype(max(size, x.size)))
    if launch is None:
        return None
    nd = len(ksize)
    (h, w), (kh, kw), (oh, ow) = _plane(nd, x.shape[2:]), _plane(nd, ksize), _plane(nd, out_sp)
    (sh, sw), (dh, dw) = _plane(nd, stride), _plane(nd, dilation)
    ph, pw = _plane(nd, (lo for lo, _ in padding), fill=0)
    shape = (c, kh, kw, n, oh, ow) if channel_major else (n, c, kh, kw, oh, ow)
    cols = namespace_of(x).empty(shape, dtype=x.dtype)
    launch(cols.size, x, n, c, h, w, kh, kw, oh, ow, sh, sw, ph, pw, dh, dw, int(channel_major), cols)
    return cols


def _device_cols(x, ksize, stride, padding, dilation, groups, out_sp):
    """im2col of a device array: columns (N, G, Cg*K, prod(out_sp))."""
    n, c = x.shape[:2]
    cols = _fused_cols(x, ksize, stride, padding, dilation, out_sp)
    if cols is not None:
        return cols.reshape(n, groups, (c // groups) * math.prod(ksize), math.prod(out_sp))
    xpd = _pad_crop(x, padding)
    # One strided view (N, C, *K, *out) of the padded input, copied once: a single kernel,
    # where stacking one slice per kernel offset cost a launch each plus CuPy's concatenate.
    sp = xpd.strides[2:]
    view = as_strided(xpd, (n, c) + tuple(ksize) + tuple(out_sp),
                      xpd.strides[:2] + tuple(st * d for st, d in zip(sp, dilation))
                      + tuple(st * s for st, s in zip(sp, stride)))
    cols = xp.ascontiguousarray(view)
    return cols.reshape(n, groups, (c // groups) * math.prod(ksize), math.prod(out_sp))


_COL2IM = Kernel("lucid_col2im", "const T* cols, long long C, long long OH, long long OW, long long KH, "
                 "long long KW, long long IH, long long IW, long long sh, long long sw, long long ph, "
                 "long long pw, long long dh, long long dw, T* y", """
    // y (N, C, OH, OW) gathers the columns (N, C, KH, KW, IH, IW) that land on it: input
    // position ih meets output oh through offset kh where ih * sh + kh * dh == oh + ph. One
    // thread per output element sums its terms in offset order (no atomics: deterministic).
    // Z is the index type, as in lucid_im2col.
    Z r = (Z)i;
    const Z ow = r % (Z)OW; r /= (Z)OW;
    const Z oh = r % (Z)OH; r /= (Z)OH;  // r is now n * C + c
    T acc = 0;
    for (Z kh = 0; kh < (Z)KH; ++kh) {
        const Z th = oh + (Z)ph - kh * (Z)dh;
        if (th < 0 || th % (Z)sh) continue;
        const Z ih = th / (Z)sh;
        if (ih >= (Z)IH) continue;
        for (Z kw = 0; kw < (Z)KW; ++kw) {
            const Z tw = ow + (Z)pw - kw * (Z)dw;
            if (tw < 0 || tw % (Z)sw) continue;
            const Z iw = tw / (Z)sw;
            if (iw >= (Z)IW) continue;
            acc += cols[(((r * (Z)KH + kh) * (Z)KW + kw) * (Z)IH + ih) * (Z)IW + iw];
        }
    }
    y[i] = acc;
""", types=("T", "Z"))


def _fused_transpose(x, w, stride, padding, dilation, groups, out_size):
    """A 1-D or 2-D transposed conv (the input gradient of a conv) on a device: one batched GEMM
    to columns (N, Cout, *K, *in) and one gathering col2im kernel, for any stride (the generic
    path adds one kernel offset at a time). None where the kernel does not apply.
    See NOTE [Fused device kernels]."""
    ksize = tuple(w.shape[2:])
    if len(ksize) > 2 or x.dtype not in (np.float32, np.float64) or w.dtype != x.dtype or x.size == 0:
        return None
    n, cin = x.shape[:2]
    cout = groups * w.shape[1]
    size = n * cout * math.prod(ksize) * math.prod(x.shape[2:])  # of the columns
    launch = kernel_for(x, _COL2IM, x.dtype, _index_dtype(size))
    if launch is None:
        return None
    w2 = w.reshape(groups, cin // groups, -1).transpose(0, 2, 1)  # (G, Coutg*K, Cing)
    cols = xp.matmul(w2, x.reshape(n, groups, cin // groups, -1))  # (N, G, Coutg*K, P): (N, Cout, *K, *in)
    nd = len(ksize)
    (ih, iw), (kh, kw), (oh, ow) = _plane(nd, x.shape[2:]), _plane(nd, ksize), _plane(nd, out_size)
    (sh, sw), (dh, dw) = _plane(nd, stride), _plane(nd, dilation)
    ph, pw = _plane(nd, padding, fill=0)
    y = namespace_of(x).empty((n, cout) + tuple(out_size), dtype=x.dtype)
    cols = cols if cols.flags["C_CONTIGUOUS"] else xp.ascontiguousarray(cols)  # a GEMM's product already is
    launch(y.size, cols, cout, oh, ow, kh, kw, ih, iw, sh, sw, ph, pw, dh, dw, y)
    return y


# ------------------------------------------------------------------------- cuDNN
# NOTE [cuDNN convolutions] in lucid/_core/cudnn.py: where the device has cuDNN and the flags
# allow it, the three conv primitives are one cuDNN call each; None sends them to the paths above.

_WARNED = set()


def _cudnn_of(x):
    """``(cudnn, device index, flags)`` for a conv on ``x``'s device, or None."""
    b = _backend._BY_TYPE.get(x.__class__)
    dnn = b.cudnn() if b is not None else None
    if dnn is None:
        return None
    from ..backends import cudnn as settings  # here: ``import lucid`` does not load lucid.backends

    if not settings.enabled:
        return None
    flags = (bool(settings.benchmark), bool(settings.deterministic or _runtime.are_deterministic_algorithms_enabled()),
             bool(settings.allow_tf32))
    return dnn, b.index_of(x), flags


def _lift(shape_or_seq, nd, fill):
    """A 1-D conv's sizes as a 2-D conv's (cuDNN takes 4-D and 5-D tensors): height ``fill``."""
    return (fill,) + tuple(shape_or_seq) if nd == 1 else tuple(shape_or_seq)


def _cudnn_call(kind, first, second, out_shape, x_shape, w_shape, y_shape, stride, pad, dilation, groups,
                bias=None):
    """One cuDNN convolution call on device arrays, or None (not applicable, or cuDNN failed:
    warned once, the im2col path runs)."""
    dtype = first.dtype
    if dtype not in DATA_TYPE or second.dtype != dtype or (bias is not None and bias.dtype != dtype):
        return None
    if min(x_shape) == 0 or min(w_shape) == 0 or min(y_shape) == 0 or len(stride) > 3:
        return None
    if max(math.prod(x_shape), math.prod(y_shape)) >= 2 ** 31:  # the legacy API counts elements in int
        return None
    found = _cudnn_of(first)
    if found is None:
        return None
    dnn, index, flags = found
    nd = len(stride)
    x_shape, y_shape = x_shape[:2] + _lift(x_shape[2:], nd, 1), y_shape[:2] + _lift(y_shape[2:], nd, 1)
    w_shape = w_shape[:2] + _lift(w_shape[2:], nd, 1)
    stride, pad, dilation = _lift(stride, nd, 1), _lift(pad, nd, 0), _lift(dilation, nd, 1)
    try:
        geom = dnn.geometry(index, dtype, x_shape, w_shape, y_shape, stride, pad, dilation, groups, flags[2])
        if geom is None:
            return None
        ns = namespace_of(first)
        out = ns.empty(out_shape, dtype=dtype)
        dnn.run(kind, index, geom, DATA_TYPE[dtype], flags, _packed(ns, first), _packed(ns, second), out)
        if bias is not None:
            dnn.add_bias(index, geom, DATA_TYPE[dtype], _packed(ns, bias), out)
        return out
    except CudnnError as e:
        unusable = isinstance(e, CudnnUnusable)
        if unusable:  # no handle: not worth a try per call. The device's convs run without it from now on
            _backend._BY_TYPE[first.__class__]._cudnn = False
        if str(e) not in _WARNED:
            _WARNED.add(str(e))
            import warnings

            where = "convolutions on this device run" if unusable else "this convolution runs"
            warnings.warn(f"{e}; {where} without cuDNN (im2col and GEMM)", RuntimeWarning, stacklevel=2)
        return None


def _packed(ns, a):
    """``a`` in C order (cuDNN's descriptors here are packed), copied only where it is not."""
    return a if a.flags["C_CONTIGUOUS"] else ns.ascontiguousarray(a)


def cudnn_conv(x, w, bias, stride, padding, dilation, groups, out_sp):
    """``conv`` (cross-correlation plus bias) through cuDNN, or None."""
    if not _conv_fits(x.shape[2:], w.shape[2:], stride, padding, dilation):
        return None
    n, o = x.shape[0], w.shape[0]
    out_shape = (n, o) + tuple(out_sp)
    return _cudnn_call("forward", x, w, out_shape, tuple(x.shape), tuple(w.shape), out_shape, stride,
                       tuple(lo for lo, _ in padding), dilation, groups, bias)


def cudnn_conv_transpose(x, w, stride, padding, dilation, groups, out_size):
    """``conv_transpose`` (a conv's input gradient: cuDNN's backward data) through cuDNN, or None.
    ``x`` (N, Cin, *in), ``w`` (Cin, Cout/G, *K); ``padding`` the ``lo`` pads."""
    ksize = tuple(w.shape[2:])
    pairs = tuple((lo, lo) for lo in padding)
    if not conv_geometry_ok(out_size, ksize, stride, pairs, dilation) or \
            conv_out_size(out_size, ksize, stride, pairs, dilation) != tuple(x.shape[2:]):
        return None
    dx_shape = (x.shape[0], groups * w.shape[1]) + tuple(out_size)
    return _cudnn_call("backward_data", w, x, dx_shape, dx_shape, tuple(w.shape), tuple(x.shape), stride,
                       tuple(padding), dilation, groups)


def cudnn_conv_weight(x, g, stride, padding, dilation, groups, ksize):
    """``conv_weight`` (a conv's weight gradient: cuDNN's backward filter) through cuDNN, or None."""
    if not _conv_fits(x.shape[2:], ksize, stride, padding, dilation) or \
            conv_out_size(x.shape[2:], ksize, stride, padding, dilation) != tuple(g.shape[2:]):
        return None
    w_shape = (g.shape[1], x.shape[1] // groups) + tuple(ksize)
    return _cudnn_call("backward_filter", x, g, w_shape, tuple(x.shape), w_shape, tuple(g.shape), stride,
                       tuple(lo for lo, _ in padding), dilation, groups)


def _conv_fits(in_sp, ksize, stride, padding, dilation):
    return conv_geometry_ok(tuple(in_sp), tuple(ksize), stride, padding, dilation)



# ---------------------------------------------------------------------- pooling
# NOTE [Max pooling on a device]
# Max pooling is pool_argmax (each window's winner) and take_last (gather the winners), whose
# adjoint is scatter_last (NOTE [Conv as three bilinear primitives] in conv.py). The generic
# device code makes about six array calls per kernel offset for the arg-max, and a gather and a
# bincount of several calls each; PyTorch runs one CUDA kernel for each of the three (max
# pooling is its own kernels there, not cuDNN's). These are those kernels
# (NOTE [Fused device kernels]): one thread per window (arg-max, gather) or per gradient
# element (scatter; atomic adds where windows overlap, as CuPy's bincount does).
_POOL_ARGMAX = Kernel("lucid_pool_argmax", "const T* x, long long H, long long W, long long OH, long long OW, "
                      "long long KH, long long KW, long long sh, long long sw, long long ph, long long pw, "
                      "long long dh, long long dw, long long* idx", """
    // idx (N, C, OH, OW): the flat index (h * W + w, in the unpadded input) of the window's
    // maximum: its first real tap, replaced by each later tap that is larger or NaN (so ties
    // go to the first, and NaN wins), as the generic code; padding never wins. Z is the index
    // type, as in lucid_im2col.
    Z r = (Z)i;
    const Z ow = r % (Z)OW; r /= (Z)OW;
    const Z oh = r % (Z)OH; r /= (Z)OH;  // r is now n * C + c
    const T* plane = x + r * (Z)H * (Z)W;
    T best = 0;
    Z bi = -1;
    for (Z kh = 0; kh < (Z)KH; ++kh) {
        const Z h = oh * (Z)sh - (Z)ph + kh * (Z)dh;
        if (h < 0 || h >= (Z)H) continue;
        for (Z kw = 0; kw < (Z)KW; ++kw) {
            const Z w = ow * (Z)sw - (Z)pw + kw * (Z)dw;
            if (w < 0 || w >= (Z)W) continue;
            const T v = plane[h * (Z)W + w];
            if (bi < 0 || v > best || isnan(v)) { best = v; bi = h * (Z)W + w; }
        }
    }
    idx[i] = bi < 0 ? 0 : (long long)bi;  // every window holds a real tap (the geometry's rule)
""", types=("T", "Z"))

_TAKE_LAST = Kernel("lucid_take_last", "const T* x, const long long* idx, long long L, long long M, T* out", """
    // out (..., M) = x (..., L) gathered along the last axis; a negative index counts from the end
    long long j = idx[i];
    if (j < 0) j += L;
    out[i] = (j >= 0 && j < L) ? x[(i / M) * L + j] : (T)0;
""")

_SCATTER_LAST = Kernel("lucid_scatter_last", "const T* g, const long long* idx, long long size, long long M, T* out",
                       """
    // out (..., size), zeroed, gathers g (..., M) at idx along the last axis, repeats summed
    long long j = idx[i];
    if (j < 0) j += size;
    if (j >= 0 && j < size) atomicAdd(out + (i / M) * size + j, g[i]);
""")


def fused_pool_argmax(x, ksize, stride, padding, dilation, out_sp):
    """pool_argmax of a 1-D or 2-D max pool as one kernel (NOTE [Max pooling on a device]), or None."""
    if len(ksize) > 2 or x.dtype not in (np.float32, np.float64) or not x.flags["C_CONTIGUOUS"] or x.size == 0:
        return None
    launch = kernel_for(x, _POOL_ARGMAX, x.dtype, _index_dtype(x.size))
    if launch is None:
        return None
    nd = len(ksize)
    (h, w), (kh, kw), (oh, ow) = _plane(nd, x.shape[2:]), _plane(nd, ksize), _plane(nd, out_sp)
    (sh, sw), (dh, dw) = _plane(nd, stride), _plane(nd, dilation)
    ph, pw = _plane(nd, (lo for lo, _ in padding), fill=0)
    idx = namespace_of(x).empty(x.shape[:2] + tuple(out_sp), dtype=np.int64)
    launch(idx.size, x, h, w, oh, ow, kh, kw, sh, sw, ph, pw, dh, dw, idx)
    return idx


def fused_take_last(x, idx):
    """take_last as one kernel where ``x`` and ``idx`` share their leading shape, or None."""
    if x.shape[:-1] != idx.shape[:-1] or idx.dtype != np.int64 or x.dtype not in (np.float32, np.float64) \
            or not (x.flags["C_CONTIGUOUS"] and idx.flags["C_CONTIGUOUS"]) or idx.size == 0 or x.shape[-1] == 0:
        return None
    launch = kernel_for(x, _TAKE_LAST, x.dtype)
    if launch is None:
        return None
    out = namespace_of(x).empty(idx.shape, dtype=x.dtype)
    launch(out.size, x, idx, x.shape[-1], idx.shape[-1], out)
    return out


def fused_scatter_last(g, idx, size):
    """scatter_last as one kernel (after a zero fill) where ``g`` broadcasts to ``idx``'s shape, or None."""
    if idx.dtype != np.int64 or g.dtype not in (np.float32, np.float64) or not idx.flags["C_CONTIGUOUS"] \
            or idx.size == 0 or g.ndim != idx.ndim or any(a not in (1, b) for a, b in zip(g.shape, idx.shape)):
        return None
    launch = kernel_for(g, _SCATTER_LAST, g.dtype)
    if launch is None:
        return None
    ns = namespace_of(g)
    if g.shape != idx.shape:  # a broadcast gradient (of a sum, say): one copy
        g = ns.broadcast_to(g, idx.shape)
    if not g.flags["C_CONTIGUOUS"]:
        g = ns.ascontiguousarray(g)
    out = ns.zeros(g.shape[:-1] + (size,), dtype=g.dtype)
    launch(g.size, g, idx, size, g.shape[-1], out)
    return out
