"""Convolution and pooling primitives: conv, conv_transpose, conv_weight, pool_argmax,
take_last and scatter_last.

NOTE [Conv as three bilinear primitives]
A convolution ``y = conv(x, w)`` is bilinear, and its two partial adjoints are
themselves convolutions of the same family:

* ``conv(x, w)``            -> ``y``   (N, O, *out) from (N, C, *in) and (O, C/G, *k)
* ``conv_transpose(y, w)``  -> ``x``   the adjoint in ``x`` (the "transposed conv")
* ``conv_weight(x, y)``     -> ``w``   the adjoint in ``w`` (a correlation of x with y)

Each of the three is the vjp of the other two, so every rule below is one call of a
sibling primitive and derivatives of any order stay inside the family (and at BLAS
speed). For complex tensors the adjoint is the conjugate transpose (NOTE [Holomorphic
vjp]): each vjp conjugates the saved primal operand, ``conv_transpose(g, conj(w))``. All three run, a batch chunk at a time, as an ``im2col`` (a copy per kernel
offset, never per pixel) and a batched matmul over the groups, or for the transposed conv
a matmul and a ``col2im`` (NOTE [Chunked columns], [Flat shifts]). See NOTE [Conv layout]
for why the channel-major results are copied to row-major outputs.

Pooling: ``pool_argmax`` (not differentiable) finds each window's arg-max as a flat
index into the input's spatial dims (PyTorch's ``return_indices``); the values are then
gathered with ``take_last``, whose adjoint is ``scatter_last`` and vice versa.
"""
from __future__ import annotations

import itertools
import math
import threading
import weakref

import numpy as np

from .._core.backend import namespace_of, xp
from .._core.grad_mode import STATE
from .._core.primitive import TN, OpError, autocast_composite, bind, defprim
from ._family import _as_tensor, conj_if_complex, move_bdim, quiet
from .conv_device import _device_cols, _fused_cols, _fused_transpose, _pad_crop  # See NOTE [Conv on a device]
from .conv_device import conv_out_size
from .conv_device import cudnn_conv, cudnn_conv_transpose, cudnn_conv_weight  # NOTE [cuDNN convolutions]
from .conv_device import fused_pool_argmax, fused_scatter_last, fused_take_last  # NOTE [Max pooling on a device]

# ----------------------------------------------------------------- array helpers


def _window(off, stride, dilation, out_sp):
    """Slices picking, for kernel offset ``off``, the input element of every output position."""
    return tuple(slice(o * d, o * d + s * (n - 1) + 1, s) for o, d, s, n in zip(off, dilation, stride, out_sp))


def _offsets(ksize):
    return itertools.product(*[range(k) for k in ksize])


def _channel_major(a):
    """(N, C, *S) -> (C, N, *S) view."""
    return a.transpose((1, 0) + tuple(range(2, a.ndim)))


def _padded_channel_major(x, padding, margin=0):
    """(N, C, *S) -> padded channel-major copy, returned as (C, N, *S') and as its flat
    (C, N*prod(S') + margin) storage (the ``margin`` zeros let flat shifts read past the
    last image, see NOTE [Flat shifts]). Scratch: valid until the next call."""
    x = _pad_crop(x, tuple((min(lo, 0), min(hi, 0)) for lo, hi in padding))  # crops only (a view)
    pos = [(max(lo, 0), max(hi, 0)) for lo, hi in padding]
    sp = tuple(m + lo + hi for m, (lo, hi) in zip(x.shape[2:], pos))
    c, n = x.shape[1], x.shape[0]
    size = n * math.prod(sp)
    flat = _zeroed_scratch("input", (c, size + margin), x.dtype, (n, sp, tuple(pos)))
    xc = flat[:, :size].reshape((c, n) + sp)
    xc[(slice(None), slice(None)) + tuple(slice(lo, lo + m) for m, (lo, _) in zip(x.shape[2:], pos))] = \
        _channel_major(x)
    return xc, flat


def _im2col(xc, ksize, stride, dilation, out_sp, cols):
    """Columns (C, *k, N, *out) of a padded channel-major input, written into ``cols``:
    one copy per kernel offset."""
    cols = cols.reshape(xc.shape[:1] + tuple(ksize) + xc.shape[1:2] + tuple(out_sp))
    lead = (slice(None), slice(None))
    for off in _offsets(ksize):
        cols[(slice(None),) + off] = xc[lead + _window(off, stride, dilation, out_sp)]
    return cols


# NOTE [Flat shifts]
# With stride 1, the input element a kernel offset reads is a fixed *flat* shift away from
# the output position, when output positions are numbered on the padded input's grid:
# image n's position (o_1, o_2, ...) is p = n*S + sum(o_i * st_i), S and st being the size
# and row-major strides of one padded image. Then im2col is one 2-D slice copy per kernel
# offset and col2im one *1-D contiguous* add per offset over all channels at once (NumPy
# adds strided arrays 4-5x slower than contiguous ones). The positions off the valid grid
# are computed and dropped (forward) or hold zeros (backward); a shift never leaves an
# image's block for a valid position, so images and channels don't mix.
# NOTE [Scratch buffers]
# im2col columns and other temporaries are large and live only inside one impl call.
# Fresh allocations of that size are page-faulted in by the OS on every call, which costs
# as much as the copy itself, so each temporary role reuses one growing buffer. Nothing
# returned to the caller ever points into a scratch buffer. Buffers whose padding must be
# zero are refilled only when their layout changes (_zeroed_scratch). The pool is a
# thread-local dict keyed by role; the few other per-thread entries (the cache slots, the
# placed gradient) use keys that are not role names.
_SCRATCH = threading.local()


def _scratch(role, shape, dtype):
    """A (shape, dtype) view of the reused buffer of ``role`` (contents undefined)."""
    dtype = np.dtype(dtype)
    n = math.prod(shape) * dtype.itemsize
    pool = _SCRATCH.__dict__
    buf = pool.get(role)
    if buf is None or buf.size < n:
        buf = pool[role] = xp.empty(max(n, 1), dtype=np.uint8)
        pool.pop(role + " layout", None)  # see _zeroed_scratch
    return buf[:n].view(dtype).reshape(shape)


def _zeroed_scratch(role, shape, dtype, layout):
    """``_scratch`` whose elements outside the ones the caller writes are zero. A caller
    that writes the same positions whenever it passes the same ``layout`` (which must
    determine them completely, with ``shape``) leaves the others zero, so the buffer is
    refilled only when the layout or the memory changed (saves a full pass)."""
    buf = _scratch(role, shape, dtype)
    tag = (buf.shape, buf.dtype, layout)
    state = _SCRATCH.__dict__
    if state.get(role + " layout") != tag:
        buf.fill(0)
        state[role + " layout"] = tag
    return buf


def _flat_geometry(padded_sp, ksize, stride, dilation):
    """``(st, shifts, S)`` of the flat-shift layout (NOTE [Flat shifts]) of images of
    spatial size ``padded_sp``, or ``None`` for strided convs (compact im2col instead)."""
    if any(s != 1 for s in stride):
        return None
    st = tuple(math.prod(padded_sp[i + 1:]) for i in range(len(padded_sp)))
    shifts = [sum(o * d * t for o, d, t in zip(off, dilation, st)) for off in _offsets(ksize)]
    return st, shifts, math.prod(padded_sp)


def _column_geometry(x, ksize, stride, padding, dilation, out_sp):
    """``(flat, P)`` of the im2col of ``x``: the flat-shift layout of its padded images
    (``None`` for strided convs) and the number of column positions per image."""
    sp = tuple(m + lo + hi for m, (lo, hi) in zip(x.shape[2:], padding))
    flat = _flat_geometry(sp, ksize, stride, dilation)
    return flat, (math.prod(out_sp) if flat is None else flat[2])


def _grid(buf, out_sp, st):
    """(A, B, S) flat buffer -> (A, B, *out_sp) view of the valid grid positions."""
    item = buf.strides[-1]
    return xp.lib.stride_tricks.as_strided(buf, buf.shape[:2] + tuple(out_sp),
                                           buf.strides[:2] + tuple(t * item for t in st))


# NOTE [Chunked columns]
# im2col columns are K times the activation (9x for a 3x3 kernel: 31 MB for W5's second
# conv). Building all of them and then running one GEMM streams them through memory twice,
# and memory traffic, not arithmetic, dominated. So all three convs work a batch chunk at
# a time: about _CHUNK_BYTES of columns are built into one reused scratch buffer and
# consumed by the chunk's GEMM (or, in the transposed conv, produced by it and summed by
# col2im) while still in cache. A forward under grad mode writes its chunks side by side
# into a cache slot instead, for the weight gradient (NOTE [Column cache]); each chunk is
# still consumed right after it is built.
_CHUNK_BYTES = 8 << 20


def _gemm(a, b, out=None):
    """``matmul`` of (G, M, K) by (G, K, N); with one group as a 2-D product, which NumPy
    hands to BLAS without its batched loop (about 15% faster for W5's GEMMs)."""
    if a.shape[0] != 1:
        return xp.matmul(a, b, out=out)
    res = xp.matmul(a[0], b[0], out=None if out is None else out[0])
    return res[None]


def _batch_chunks(n, per_image_bytes):
    """``(start, stop)`` ranges over the batch holding about ``_CHUNK_BYTES`` each."""
    m = max(1, _CHUNK_BYTES // max(per_image_bytes, 1))
    return [(a, min(a + m, n)) for a in range(0, n, m)]


def _column_chunks(x, ksize, stride, padding, dilation, groups, out_sp, columns, role="cols"):
    """Yield ``(start, stop, cols)``: the im2col columns (G, Cg*K, m*P) of images
    ``start:stop`` of ``x`` (N, C, *S), one chunk at a time (NOTE [Chunked columns]).
    ``columns`` is ``(flat, P)`` from :func:`_column_geometry`. With the default role the
    chunks share one scratch buffer (use each before taking the next); with a cache slot's
    role they lie side by side in it."""
    n, c = x.shape[:2]
    k = math.prod(ksize)
    flat, per_image = columns
    if flat is None:
        xc, _ = _padded_channel_major(x, padding)
    else:
        shifts = flat[1]
        _, xf = _padded_channel_major(x, padding, margin=shifts[-1])
    chunks = _batch_chunks(n, c * k * per_image * x.dtype.itemsize)
    if not chunks:  # an empty batch
        return
    rows = c * k
    if role == "cols":
        buf = _scratch(role, (rows * (chunks[0][1] - chunks[0][0]) * per_image,), x.dtype)
    else:
        buf = _scratch(role, (rows * n * per_image,), x.dtype)
    for a, b in chunks:
        size = rows * (b - a) * per_image
        cols = buf[:size] if role == "cols" else buf[rows * a * per_image:rows * a * per_image + size]
        if flat is None:
            _im2col(xc[:, a:b], ksize, stride, dilation, out_sp, cols)
        else:
            cols = cols.reshape(c, k, (b - a) * per_image)
            for j, sh in enumerate(shifts):
                cols[:, j] = xf[:, a * per_image + sh:b * per_image + sh]
        yield a, b, cols.reshape(groups, -1, (b - a) * per_image)


# NOTE [Column cache]
# A training step runs conv(x, w) forward and, in its backward, conv_weight(x, g) on the
# same array x with the same geometry: both need the same im2col columns. Rebuilding them
# costs as much again as building them (W5: ~4 ms of copies plus the padding), so a
# forward run with grad mode on writes its chunks side by side into one of a few cache
# slots tagged with a weak reference to x and the geometry, and conv_weight reuses a
# matching slot. Each chunk is still consumed by its GEMM right after it is built (NOTE
# [Chunked columns]). Identity of x is enough: an input saved for backward that is changed
# in place fails the engine's version check before any rule runs, and the forward never
# reads a slot. A forward takes a free slot (preferably the one of the same layer in the
# previous step, whose buffer is warm), else the slots are reused round-robin (a backward
# visits the latest forwards first); columns over _CACHE_MAX bytes are not kept.
_SLOTS = 3
_CACHE_MAX = 96 << 20


def _free_slot(slots, x, geom):
    """A slot no longer needed: one of the same layer in an earlier step (same geometry,
    its input gone or this very ``x``), whose buffer is warm and of the right size; else
    an empty one."""
    free = None
    for i, sl in enumerate(slots):
        if sl is None or sl[0]() is None or sl[0]() is x:
            if sl is not None and sl[1] == geom and sl[3] == x.shape:
                return i
            free = i if free is None else free
    return free


def _claim_slot(x, geom, per_image):
    """Index of the cache slot the forward of ``x`` should fill, or ``None`` (not kept)."""
    size = x.dtype.itemsize * x.shape[1] * math.prod(geom[0]) * x.shape[0] * per_image
    if not STATE.grad_enabled or size > _CACHE_MAX:  # no backward will want them, or too big
        return None
    state = _SCRATCH.__dict__
    slots = state.setdefault("slots", [None] * _SLOTS)
    i = _free_slot(slots, x, geom)
    if i is None:
        i = state["next_slot"] = (state.get("next_slot", -1) + 1) % _SLOTS
    slots[i] = None
    return i


def _cached_chunks(x, geom):
    """The forward's column chunks of ``x`` with ``geom`` when still cached, else ``None``."""
    for slot in _SCRATCH.__dict__.get("slots", ()):
        if slot is not None and slot[0]() is x and slot[1] == geom:
            return slot[2]
    return None


def _place_grad(g, st, size, keep):
    """Channel-major ``g`` (N, O, *out) on the zero flat grid (O, N*size) of strides ``st``
    (NOTE [Flat shifts]). With ``keep`` the grid is handed to the next :func:`_placed_grad`
    call for the same ``g``: the two backward rules of one conv, ``conv_transpose`` for x
    and ``conv_weight`` for w, are called with the same ``g``."""
    state = _SCRATCH.__dict__
    state["placed grad"] = None
    role = "placed" if keep else "grid"
    gb = _zeroed_scratch(role, (g.shape[1], g.shape[0] * size), g.dtype,
                         (g.shape[0], size, tuple(g.shape[2:]), st))
    _grid(gb.reshape(g.shape[1], g.shape[0], size), g.shape[2:], st)[...] = _channel_major(g)
    if keep:
        state["placed grad"] = (weakref.ref(g), st, size, gb)
    return gb


def _placed_grad(g, st, size):
    """The grid :func:`_place_grad` left for this ``g`` (used once), else a new one."""
    state = _SCRATCH.__dict__
    hit, state["placed grad"] = state.get("placed grad"), None
    if hit is not None and hit[0]() is g and hit[1] == st and hit[2] == size:
        return hit[3]
    return _place_grad(g, st, size, keep=False)


# NOTE [Conv layout]
# The GEMMs produce (O, N*P) — channel-major. The result is copied once to the row-major
# (N, O, *out) layout PyTorch's convolutions return: a channel-major view had other strides,
# so ``out.view(out.size(0), -1)`` after a conv (and the BatchNorm/ReLU in between, which keep
# their input's order) raised where PyTorch's works. The copy costs little next to the GEMM
# (the W5 step of benchmarks/bench_nn.py measured the same, one thread, 43 ms either way); the
# next conv's padded channel-major copy of its input still reads contiguous rows.
def _row_major(a):
    return xp.ascontiguousarray(a)


def _conv_impl(x, w, *bias, stride, padding, dilation, groups):
    ksize = w.shape[2:]
    out_sp = conv_out_size(x.shape[2:], ksize, stride, padding, dilation)
    if min(out_sp) <= 0:
        raise ValueError(f"the kernel {tuple(ksize)} (dilation {dilation}) does not fit the padded input")
    n, c = x.shape[:2]
    o = w.shape[0]
    if c != w.shape[1] * groups:
        raise ValueError(f"expected input with {w.shape[1] * groups} channels (weight {tuple(w.shape)}, "
                         f"groups={groups}), got {c} channels")
    if x.__class__ is not np.ndarray:  # See NOTE [Conv on a device]
        out = cudnn_conv(x, w, bias[0] if bias else None, stride, padding, dilation, groups, out_sp)
        if out is not None:
            return out
        cols = _device_cols(x, ksize, stride, padding, dilation, groups, out_sp)
        out = xp.matmul(w.reshape(groups, o // groups, -1), cols)
        out = out.reshape((n, o) + tuple(out_sp))
        return out + bias[0].reshape((o,) + (1,) * len(out_sp)) if bias else out
    wg = w.reshape(groups, o // groups, -1)
    out = xp.empty((o, n) + tuple(out_sp), dtype=xp.result_type(x.dtype, w.dtype))
    bias = bias[0].reshape((o,) + (1,) * (len(out_sp) + 1)) if bias else None  # (O, 1, *1): channel-major
    columns = _column_geometry(x, ksize, stride, padding, dilation, out_sp)
    flat = columns[0]
    geom = (tuple(ksize), stride, padding, dilation, groups, tuple(out_sp))
    slot = _claim_slot(x, geom, columns[1])
    kept = []
    role = "cols" if slot is None else f"slot{slot}"
    for start, stop, cols in _column_chunks(x, ksize, stride, padding, dilation, groups, out_sp, columns, role):
        if slot is not None:
            kept.append((start, stop, cols))
        if flat is None:  # positions are compact: the GEMM writes straight into the output
            _gemm(wg, cols, out=out[:, start:stop].reshape(groups, o // groups, -1))
            continue
        res = _scratch("res", (groups, o // groups, cols.shape[2]), out.dtype)
        _gemm(wg, cols, out=res)
        valid = _grid(res.reshape(o, stop - start, -1), out_sp, flat[0])
        if bias is None:
            out[:, start:stop] = valid
        else:  # the bias rides along the copy that drops the off-grid positions
            xp.add(valid, bias, out=out[:, start:stop])
    if bias is not None and flat is None:
        out += bias
    if slot is not None:
        _SCRATCH.slots[slot] = (weakref.ref(x), geom, kept, x.shape)
    return _row_major(_channel_major(out))


def _conv_transpose_impl(x, w, stride, padding, dilation, groups, out_size):
    n, cin = x.shape[:2]
    in_sp = x.shape[2:]
    ksize = w.shape[2:]
    coutg = w.shape[1]
    cout = groups * coutg
    if cin != w.shape[0]:
        raise ValueError(f"expected input with {w.shape[0]} channels (weight {tuple(w.shape)}), got {cin}")
    full = [(m - 1) * s + d * (k - 1) + 1 for m, s, d, k in zip(in_sp, stride, dilation, ksize)]
    alloc = tuple(max(f, lo + o) for f, lo, o in zip(full, padding, out_size))
    crop = (slice(None), slice(None)) + tuple(slice(lo, lo + o) for lo, o in zip(padding, out_size))
    if x.__class__ is not np.ndarray:  # See NOTE [Conv on a device]
        y = cudnn_conv_transpose(x, w, stride, padding, dilation, groups, out_size)
        if y is None:
            y = _fused_transpose(x, w, stride, padding, dilation, groups, out_size)
        if y is not None:
            return y
        if all(s == 1 for s in stride):
            return _transpose_as_conv(x, w, padding, dilation, groups, out_size)
    flat = _flat_geometry(alloc, ksize, stride, dilation)
    if flat is not None and x.__class__ is np.ndarray:  # See NOTE [Conv on a device]
        return _row_major(_channel_major(_flat_transpose(x, w, groups, flat, alloc, crop, out_size)))
    w2 = w.reshape(groups, cin // groups, -1).transpose(0, 2, 1)
    x2 = _channel_major(x).reshape(groups, cin // groups, -1)
    cg = xp.matmul(w2, x2).reshape((cout,) + tuple(ksize) + (n,) + tuple(in_sp))
    y = namespace_of(cg).zeros((cout, n) + alloc, dtype=cg.dtype)
    lead = (slice(None), slice(None))
    for off in _offsets(ksize):
        y[lead + _window(off, stride, dilation, in_sp)] += cg[(slice(None),) + off]
    return _row_major(_channel_major(y[crop]))


def _transpose_as_conv(x, w, padding, dilation, groups, out_size):
    """A stride-1 transposed conv as a conv (one im2col and one GEMM, NOTE [Conv on a device]):
    of ``x`` padded by ``d (k - 1) - lo`` before (negative: cropped), with the kernel flipped
    in space and its in/out channels swapped within each group."""
    cing, coutg, ksize = x.shape[1] // groups, w.shape[1], tuple(w.shape[2:])
    wc = w.reshape((groups, cing, coutg) + ksize).swapaxes(1, 2).reshape((groups * coutg, cing) + ksize)
    wc = wc[(Ellipsis,) + (slice(None, None, -1),) * len(ksize)]
    pads = []
    for n_in, k, d, lo, o in zip(x.shape[2:], ksize, dilation, padding, out_size):
        before = d * (k - 1) - lo
        pads.append((before, o - n_in - before + d * (k - 1)))
    return _conv_impl(x, wc, stride=(1,) * len(ksize), padding=tuple(pads), dilation=dilation, groups=groups)


def _flat_transpose(x, w, groups, flat, alloc, crop, out_size):
    """Stride-1 transposed conv (NOTE [Flat shifts]): per batch chunk one GEMM to columns
    ordered (offset, channel, position), then col2im as one contiguous 1-D add per kernel
    offset; the chunk's crop is copied into the (Cout, N, *out) result."""
    st, shifts, size = flat
    n, cin = x.shape[:2]
    cing, coutg, k = cin // groups, w.shape[1], len(shifts)
    cout = groups * coutg
    # rows ordered (offset, out channel) so that each offset's columns are contiguous
    w2 = w.reshape((groups, cing, coutg, k)).transpose(0, 3, 2, 1).reshape(groups, k * coutg, cing)
    gb = _place_grad(x, st, size, keep=True).reshape(groups, cing, n * size)
    y = xp.empty((cout, n) + tuple(out_size), dtype=xp.result_type(x.dtype, w.dtype))
    for a, b in _batch_chunks(n, k * cout * size * y.dtype.itemsize):
        m = (b - a) * size
        cg = _scratch("cols", (groups, k * coutg, m), y.dtype)
        _gemm(w2, gb[:, :, a * size:b * size], out=cg)
        if groups > 1:  # (G, K, Cg, m) -> (K, G*Cg, m): offset-major over all channels
            cg = xp.ascontiguousarray(cg.reshape(groups, k, coutg, m).transpose(1, 0, 2, 3))
        cg = cg.reshape(k, cout * m)
        acc = _scratch("col2im", (cout * m,), y.dtype)
        acc[:] = cg[0]  # shifts[0] == 0
        for j in range(1, k):
            sh = shifts[j]
            tail = acc[sh:]
            xp.add(tail, cg[j, :cout * m - sh], out=tail)
        y[:, a:b] = acc.reshape((cout, b - a) + tuple(alloc))[crop]
    return y


def _conv_weight_impl(x, g, stride, padding, dilation, groups, ksize):
    n, c = x.shape[:2]
    o = g.shape[1]
    if n == 0:  # an empty batch contributes nothing
        return namespace_of(x, g).zeros((o, c // groups) + tuple(ksize), dtype=xp.result_type(x.dtype, g.dtype))
    out_sp = tuple(g.shape[2:])
    if x.__class__ is not np.ndarray:  # See NOTE [Conv on a device]
        dw = cudnn_conv_weight(x, g, stride, padding, dilation, groups, ksize)
        if dw is not None:
            return dw
        cols = _fused_cols(x, ksize, stride, padding, dilation, out_sp, channel_major=True)
        if cols is not None:  # (C, *K, N, *out): dw = g (G, O/G, N*P) times cols (G, Cg*K, N*P) transposed
            g2 = g.reshape(n, groups, o // groups, -1).transpose(1, 2, 0, 3).reshape(groups, o // groups, -1)
            cols = cols.reshape(groups, -1, g2.shape[2])
            if groups == 1:  # into an array of the weight's shape: the gradient owns its memory, so
                # the engine stores it as .grad without a copy (a reshaped product is a view)
                dw = namespace_of(x).empty((o, c) + tuple(ksize), dtype=xp.result_type(g2.dtype, cols.dtype))
                g2[0].dot(cols[0].T, out=dw.reshape(o, -1))  # NOTE [Device GEMM]
                return dw
            dw = xp.matmul(g2, cols.swapaxes(1, 2))
            return dw.reshape((o, c // groups) + tuple(ksize))
        cols = _device_cols(x, ksize, stride, padding, dilation, groups, out_sp)  # (N, G, Cg*K, P)
        g2 = g.reshape(n, groups, o // groups, -1)
        dw = xp.matmul(g2.transpose(1, 2, 0, 3).reshape(groups, o // groups, -1),
                       cols.transpose(1, 0, 3, 2).reshape(groups, -1, cols.shape[2]))
        return dw.reshape((o, c // groups) + tuple(ksize))
    columns = _column_geometry(x, ksize, stride, padding, dilation, out_sp)
    flat, per_image = columns
    if flat is not None:  # See NOTE [Flat shifts]
        g2 = _placed_grad(g, flat[0], flat[2])
    else:
        g2 = xp.ascontiguousarray(_channel_major(g))
    g2 = g2.reshape(groups, o // groups, -1)
    dw = None
    chunks = _cached_chunks(x, (tuple(ksize), stride, padding, dilation, groups, out_sp))
    if chunks is None:
        chunks = _column_chunks(x, ksize, stride, padding, dilation, groups, out_sp, columns)
    for a, b, cols in chunks:
        part = _gemm(cols, g2[:, :, a * per_image:b * per_image].transpose(0, 2, 1))  # the faster BLAS order
        if dw is None:
            dw = part
        else:
            dw += part
    return dw.transpose(0, 2, 1).reshape((o, c // groups) + tuple(ksize))


# ----------------------------------------------------------------- the rules


def _hi_for(in_n, out_n, k, s, d, lo):
    """``hi`` padding making a conv of an ``out_n`` input return exactly ``in_n`` positions."""
    return (in_n - 1) * s + d * (k - 1) + 1 - out_n - lo


def _pairs_for(x_sp, y_sp, ksize, stride, dilation, lo):
    return tuple((l, _hi_for(m, n, k, s, d, l))
                 for m, n, k, s, d, l in zip(y_sp, x_sp, ksize, stride, dilation, lo))


def _lo(padding):
    return tuple(lo for lo, _ in padding)


def _conv_vjp_x(ns, g, out, x, w, *b, stride, padding, dilation, groups):
    return ns.conv_transpose(g, conj_if_complex(ns, w), stride=stride, padding=_lo(padding), dilation=dilation,
                             groups=groups, out_size=tuple(x.shape[2:]))


def _conv_vjp_w(ns, g, out, x, w, *b, stride, padding, dilation, groups):
    return ns.conv_weight(conj_if_complex(ns, x), g, stride=stride, padding=padding, dilation=dilation,
                          groups=groups, ksize=tuple(w.shape[2:]))


def _conv_vjp_b(ns, g, out, x, w, b, stride, padding, dilation, groups):
    return ns.sum(g, axis=(0,) + tuple(range(2, len(tuple(g.shape)))), keepdims=False)


def _convt_pairs(out_shape, x, w, stride, padding, dilation):
    return _pairs_for(tuple(out_shape[2:]), tuple(x.shape[2:]), tuple(w.shape[2:]), stride, dilation, padding)


def _convt_vjp_x(ns, g, out, x, w, stride, padding, dilation, groups, out_size):
    pairs = _convt_pairs((0, 0) + tuple(out_size), x, w, stride, padding, dilation)
    return ns.conv(g, conj_if_complex(ns, w), stride=stride, padding=pairs, dilation=dilation, groups=groups)


def _convt_vjp_w(ns, g, out, x, w, stride, padding, dilation, groups, out_size):
    pairs = _convt_pairs((0, 0) + tuple(out_size), x, w, stride, padding, dilation)
    return ns.conv_weight(g, conj_if_complex(ns, x), stride=stride, padding=pairs, dilation=dilation,
                          groups=groups, ksize=tuple(w.shape[2:]))


def _convw_vjp_x(ns, c, out, x, g, stride, padding, dilation, groups, ksize):
    return ns.conv_transpose(conj_if_complex(ns, g), c, stride=stride, padding=_lo(padding), dilation=dilation,
                             groups=groups, out_size=tuple(x.shape[2:]))


def _convw_vjp_g(ns, c, out, x, g, stride, padding, dilation, groups, ksize):
    return ns.conv(conj_if_complex(ns, x), c, stride=stride, padding=padding, dilation=dilation, groups=groups)


def _bilinear_jvp(name):
    def jvp(ns, primals, tangents, out, **params):
        a, b = primals
        ta, tb = tangents
        f = getattr(ns, name)
        res = None if ta is None else f(ta, b, **params)
        if tb is not None:
            term = f(a, tb, **params)
            res = term if res is None else res + term
        return res

    return jvp


_conv_xw_jvp = _bilinear_jvp("conv")


def _conv_jvp(ns, primals, tangents, out, **params):
    """Bilinear in (x, w) (NOTE [Conv as three bilinear primitives]) plus the bias, linear."""
    res = _conv_xw_jvp(ns, primals[:2], tangents[:2], out, **params)
    if len(tangents) == 3 and tangents[2] is not None:
        tb = ns.reshape(tangents[2], shape=(1, -1) + (1,) * (len(tuple(out.shape)) - 2))
        res = ns.broadcast_to(tb, shape=tuple(out.shape)) if res is None else res + tb
    return res


# ---------------------------------------------------------------- batching
# See NOTE [Conv as three bilinear primitives]. The vmap batch dim is folded into the
# batch dim N (only the input batched) or into the groups (both batched: example b's
# channels form groups b*G..b*G+G-1), so a batched conv is still one conv.


def _fold(v, bdim, to):
    """Move the batch dim to ``to`` and merge it with the following dim."""
    v = move_bdim(v, bdim, to)
    s = tuple(v.shape)
    return TN.reshape(v, shape=s[:to] + (s[to] * s[to + 1],) + s[to + 2:]), s[to]


def _split(v, dim, b):
    s = tuple(v.shape)
    return TN.reshape(v, shape=s[:dim] + (b, s[dim] // b) + s[dim + 1:])


def _materialize(v, bdim, size):
    """An unbatched operand given a real batch dim at 0 (used only when both must be batched)."""
    if bdim is not None:
        return move_bdim(v, bdim, 0)
    s = tuple(v.shape)
    return TN.broadcast_to(TN.reshape(v, shape=(1,) + s), shape=(size,) + s)


def _batch_size(vals, bdims):
    return next(v.shape[b] for v, b in zip(vals, bdims) if b is not None)


def _conv_batch(vals, bdims, stride, padding, dilation, groups):
    if len(vals) == 3:  # batch the conv without its bias, then add the (batched) bias
        params = dict(stride=stride, padding=padding, dilation=dilation, groups=groups)
        if bdims[0] is None and bdims[1] is None:  # only the bias is batched
            y = bind(conv_p, vals[:2], params)
            y, by = TN.reshape(y, shape=(1,) + tuple(y.shape)), 0
        else:
            y, by = _conv_batch(vals[:2], bdims[:2], **params)
        # y is (B, N, O, *sp) (by == 0) or (N, B, O, *sp) (by == 1)
        ones = (1,) * (y.ndim - 3)
        if bdims[2] is None:
            bias = TN.reshape(vals[2], shape=(-1,) + ones)
        else:
            bias = move_bdim(vals[2], bdims[2], 0)  # (B, O)
            lead = (bias.shape[0], 1) if by == 0 else (bias.shape[0],)
            bias = TN.reshape(bias, shape=lead + (-1,) + ones)
        return TN.add(y, bias), by
    (x, w), (bx, bw) = vals, bdims
    params = dict(stride=stride, padding=padding, dilation=dilation)
    if bw is None:
        xf, b = _fold(x, bx, 0)
        return _split(bind(conv_p, (xf, w), dict(params, groups=groups)), 0, b), 0
    if bx is None:  # fold the batch into each group's output channels
        w = move_bdim(w, bw, 0)
        b, o = w.shape[:2]
        rest = tuple(w.shape[2:])
        w = TN.reshape(w, shape=(b, groups, o // groups) + rest)
        w = TN.transpose(w, axes=(1, 0) + tuple(range(2, w.ndim)))
        w = TN.reshape(w, shape=(b * o,) + rest)
        y = bind(conv_p, (x, w), dict(params, groups=groups))
        s = tuple(y.shape)
        y = TN.reshape(y, shape=(s[0], groups, b, o // groups) + s[2:])
        y = TN.transpose(y, axes=(0, 2, 1) + tuple(range(3, y.ndim)))
        return TN.reshape(y, shape=(s[0], b, o) + s[2:]), 1
    xf, b = _fold(x, bx, 1)
    wf, _ = _fold(w, bw, 0)
    return _split(bind(conv_p, (xf, wf), dict(params, groups=groups * b)), 1, b), 1


def _convt_batch(vals, bdims, stride, padding, dilation, groups, out_size):
    (x, w), (bx, bw) = vals, bdims
    params = dict(stride=stride, padding=padding, dilation=dilation, out_size=out_size)
    if bw is None:
        xf, b = _fold(x, bx, 0)
        return _split(bind(conv_transpose_p, (xf, w), dict(params, groups=groups)), 0, b), 0
    if bx is None:  # fold the batch into each group's output channels
        w = move_bdim(w, bw, 1)  # (Cin, B, Coutg, *k)
        cin, b, coutg = w.shape[:3]
        w = TN.reshape(w, shape=(cin, b * coutg) + tuple(w.shape[3:]))
        y = bind(conv_transpose_p, (x, w), dict(params, groups=groups))
        s = tuple(y.shape)
        y = TN.reshape(y, shape=(s[0], groups, b, coutg) + s[2:])
        y = TN.transpose(y, axes=(0, 2, 1) + tuple(range(3, y.ndim)))
        return TN.reshape(y, shape=(s[0], b, groups * coutg) + s[2:]), 1
    xf, b = _fold(x, bx, 1)
    wf, _ = _fold(w, bw, 0)
    return _split(bind(conv_transpose_p, (xf, wf), dict(params, groups=groups * b)), 1, b), 1


def _convw_batch(vals, bdims, stride, padding, dilation, groups, ksize):
    size = _batch_size(vals, bdims)
    x, g = (_materialize(v, b, size) for v, b in zip(vals, bdims))
    xf, b = _fold(x, 0, 1)
    gf, _ = _fold(g, 0, 1)
    dw = bind(conv_weight_p, (xf, gf), dict(stride=stride, padding=padding, dilation=dilation,
                                              groups=groups * b, ksize=ksize))
    return _split(dw, 0, b), 0


conv_p = defprim("conv", quiet(_conv_impl), vjp=(_conv_vjp_x, _conv_vjp_w, _conv_vjp_b), jvp=_conv_jvp,
                 batch=_conv_batch)
conv_transpose_p = defprim("conv_transpose", quiet(_conv_transpose_impl), vjp=(_convt_vjp_x, _convt_vjp_w),
                           jvp=_bilinear_jvp("conv_transpose"), batch=_convt_batch)
conv_weight_p = defprim("conv_weight", quiet(_conv_weight_impl), vjp=(_convw_vjp_x, _convw_vjp_g),
                        jvp=_bilinear_jvp("conv_weight"), batch=_convw_batch)

# ------------------------------------------------------------------ pooling


def _first_inside(ns, out_sp, sp, stride, padding, dilation):
    """Flat index (unpadded input) of each output window's first element inside the input."""
    flat = 0
    for i, (o, n, s, (lo, _), d) in enumerate(zip(out_sp, sp, stride, padding, dilation)):
        start = ns.arange(o) * s - lo
        pos = start + (-start).clip(0, None) // d * d  # first tap at or after 0 ...
        pos = pos + (pos < 0) * d  # ... rounding the division up
        flat = flat + pos.reshape((o,) + (1,) * (len(sp) - i - 1)) * math.prod(sp[i + 1:])
    return flat


def _pool_argmax_impl(x, ksize, stride, padding, dilation):
    """Flat spatial index (into the unpadded input) of each window's maximum (first on ties, NaN wins)."""
    # the padding value loses to every element: -inf, or an integer dtype's minimum (-inf cast
    # into int8 is undefined; a tie with a real minimum is resolved by the pass after the loop)
    out_sp = conv_out_size(x.shape[2:], ksize, stride, padding, dilation)
    if x.__class__ is not np.ndarray:  # NOTE [Max pooling on a device]
        idx = fused_pool_argmax(x, ksize, stride, padding, dilation, out_sp)
        if idx is not None:
            return idx
    low = -xp.inf if x.dtype.kind == "f" else (False if x.dtype.kind == "b" else int(np.iinfo(x.dtype).min))
    xpd = _pad_crop(x, padding, value=low)
    sp = x.shape[2:]
    # flat index of each output window's first element, in unpadded input coordinates
    ns = namespace_of(x)
    coords = xp.meshgrid(*[ns.arange(n) * s - lo for n, s, (lo, _) in zip(out_sp, stride, padding)], indexing="ij")
    base = sum(c * math.prod(sp[i + 1:]) for i, c in enumerate(coords))
    best = bidx = None
    for off in _offsets(ksize):
        v = xpd[(slice(None), slice(None)) + _window(off, stride, dilation, out_sp)]
        shift = sum(o * d * math.prod(sp[i + 1:]) for i, (o, d) in enumerate(zip(off, dilation)))
        if best is None:
            best, bidx = v.copy(), xp.broadcast_to(base + shift, v.shape).copy()
            continue
        m = (v > best) | xp.isnan(v)
        xp.copyto(best, v, where=m)
        xp.copyto(bidx, xp.broadcast_to(base + shift, v.shape), where=m)
    if any(lo or hi for lo, hi in padding):
        # A window still at -inf (``low``) kept its first tap, which may be padding (a negative index, or
        # one aliasing the row above); PyTorch returns the window's first real position. Where
        # that first tap is real it is the same index, so one pass after the loop fixes both.
        first = xp.broadcast_to(_first_inside(ns, out_sp, sp, stride, padding, dilation), bidx.shape)
        xp.copyto(bidx, first, where=best == low)
    return bidx.astype(np.int64, copy=False)


def _fold_batch(prim):
    """Batching rule for a one-input prim over (N, C, ...): merge the batch dim into N."""

    def rule(vals, bdims, **params):
        xf, b = _fold(vals[0], bdims[0], 0)
        return _split(bind(prim, (xf,), params), 0, b), 0

    return rule


pool_argmax_p = defprim("pool_argmax", _pool_argmax_impl, vjp=None,
                        jvp=lambda ns, primals, tangents, out, **p: None, differentiable=False,
                        save_inputs=False)
pool_argmax_p.batch = _fold_batch(pool_argmax_p)


def _take_last_impl(x, idx):
    if x.__class__ is not np.ndarray:  # NOTE [Max pooling on a device]
        out = fused_take_last(x, idx)
        if out is not None:
            return out
    return xp.take_along_axis(x, idx, axis=-1)


def _scatter_last_impl(g, idx, size):
    if g.__class__ is not np.ndarray:  # NOTE [Max pooling on a device]
        out = fused_scatter_last(g, idx, size)
        if out is not None:
            return out
    lead = np.broadcast_shapes(g.shape[:-1], idx.shape[:-1])
    g = xp.broadcast_to(g, lead + g.shape[-1:])
    idx = xp.broadcast_to(idx, lead + idx.shape[-1:])
    rows = math.prod(lead)
    flat = (namespace_of(g, idx).arange(rows).reshape(lead + (1,)) * size + idx).ravel()
    out = xp.bincount(flat, weights=g.ravel(), minlength=rows * size)
    return out.astype(g.dtype, copy=False).reshape(lead + (size,))


def _gather_batch(vals, bdims, **params):
    """Move every batched operand's batch dim to the front; unbatched ones get a broadcast 1."""
    new = []
    for v, b in zip(vals, bdims):
        new.append(TN.reshape(v, shape=(1,) + tuple(v.shape)) if b is None else move_bdim(v, b, 0))
    return new


def _take_batch(vals, bdims):
    x, idx = _gather_batch(vals, bdims)
    size = _batch_size(vals, bdims)
    if x.shape[0] != size:
        x = TN.broadcast_to(x, shape=(size,) + tuple(x.shape[1:]))
    if idx.shape[0] != size:
        idx = TN.broadcast_to(idx, shape=(size,) + tuple(idx.shape[1:]))
    return bind(take_last_p, (x, idx), {}), 0


def _scatter_batch(vals, bdims, size):
    g, idx = _gather_batch(vals, bdims)
    return bind(scatter_last_p, (g, idx), {"size": size}), 0


take_last_p = defprim(
    "take_last", _take_last_impl,
    vjp=(lambda ns, g, out, x, idx: ns.scatter_last(g, idx, size=x.shape[-1]), None),
    jvp=lambda ns, primals, tangents, out: ns.take_last(tangents[0], primals[1]),
    batch=_take_batch, save_inputs=1,
)
scatter_last_p = defprim(
    "scatter_last", _scatter_last_impl,
    vjp=(lambda ns, c, out, g, idx, size: ns.take_last(c, idx), None),
    jvp=lambda ns, primals, tangents, out, size: ns.scatter_last(tangents[0], primals[1], size=size),
    batch=_scatter_batch, save_inputs=1,
)

# ------------------------------------------------------------- public functions


def _tuple(v, n, name, op):
    if isinstance(v, int):
        return (v,) * n
    v = tuple(int(a) for a in v)
    if len(v) == 1:
        return v * n
    if len(v) != n:
        raise ValueError(f"{op}: expected {name} to be an int or a tuple of {n} ints, got {v}")
    return v


def _conv_padding(padding, nsp, ksize, dilation, stride, op):
    if isinstance(padding, str):
        if padding == "valid":
            return ((0, 0),) * nsp
        if padding == "same":
            if any(s != 1 for s in stride):
                raise OpError(f"{op}: padding='same' is not supported for strided convolutions")
            tot = [d * (k - 1) for d, k in zip(dilation, ksize)]
            return tuple((t // 2, t - t // 2) for t in tot)
        raise OpError(f"{op}: invalid padding string {padding!r}, expected 'valid' or 'same'")
    pads = _tuple(padding, nsp, "padding", op)
    if any(p < 0 for p in pads):  # NumPy's slicing would crop the input instead
        raise RuntimeError(f"{op}: negative padding is not supported (got padding={padding})")
    return tuple((p, p) for p in pads)


def _check_input(input, weight, nsp, op):
    input, weight = _as_tensor(input), _as_tensor(weight)
    if weight.ndim != nsp + 2:
        raise RuntimeError(f"{op}: expected a {nsp + 2}-D weight, got shape {tuple(weight.shape)}")
    if input.ndim not in (nsp + 1, nsp + 2):
        raise RuntimeError(f"{op}: expected a {nsp + 1}-D (unbatched) or {nsp + 2}-D (batched) input, "
                           f"got shape {tuple(input.shape)}")
    if input.dtype != weight.dtype:
        raise RuntimeError(f"{op}: input type ({input.dtype}) and weight type ({weight.dtype}) should be the same")
    return input, weight


def _add_bias(out, bias, op):
    if bias is None:
        return out
    bias = _as_tensor(bias)
    if bias.shape != (out.shape[1],):
        raise RuntimeError(f"{op}: expected bias of shape ({out.shape[1]},), got {tuple(bias.shape)}")
    return out + bias.reshape((-1,) + (1,) * (out.ndim - 2))


@autocast_composite("conv")  # NOTE [Autocast]: cast before the dtype checks, the bias too
def convolution(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1, *, nsp, op="conv"):
    """N-d convolution (cross-correlation, as in PyTorch); see :func:`conv2d`."""
    input, weight = _check_input(input, weight, nsp, op)
    if bias is not None and _as_tensor(bias).dtype != input.dtype:
        # The generic (aten) convolution casts the bias; F.conv*d refuse a bias of another dtype,
        # but Lucid's still promotes two floating dtypes (tests/surface/test_torch_functions.py
        # relies on it) and refuses only the integer/floating mix, which had silently gone float.
        if op == "convolution":
            bias = _as_tensor(bias).to(input.dtype)
        elif (_as_tensor(bias).dtype.kind in "fc") != (input.dtype.kind in "fc"):
            raise RuntimeError(f"{op}: Input type ({input.dtype}) and bias type ({_as_tensor(bias).dtype}) "
                               "should be the same")
    unbatched = input.ndim == nsp + 1
    if unbatched:
        input = input.unsqueeze(0)
    stride = _tuple(stride, nsp, "stride", op)
    dilation = _tuple(dilation, nsp, "dilation", op)
    ksize = tuple(weight.shape[2:])
    pads = _conv_padding(padding, nsp, ksize, dilation, stride, op)
    c = input.shape[1]
    if groups < 1 or c % groups or weight.shape[0] % groups or weight.shape[1] * groups != c:
        raise RuntimeError(f"{op}: input of shape {tuple(input.shape)} (channels {c}) does not match weight of "
                           f"shape {tuple(weight.shape)} with groups={groups}")
    avail = [n + lo + hi for n, (lo, hi) in zip(input.shape[2:], pads)]
    if any(a < d * (k - 1) + 1 for a, d, k in zip(avail, dilation, ksize)):
        raise RuntimeError(f"{op}: kernel size {ksize} (dilation {dilation}) can't be greater than the padded "
                           f"input size {tuple(avail)} (input shape {tuple(input.shape)})")
    operands = (input, weight)
    if bias is not None:
        bias = _as_tensor(bias)
        if bias.shape != (weight.shape[0],):
            raise RuntimeError(f"{op}: expected bias of shape ({weight.shape[0]},), got {tuple(bias.shape)}")
        if bias.dtype == input.dtype:  # fused into the conv (one pass less); else promoted by `+`
            operands, bias = operands + (bias,), None
    out = bind(conv_p, operands, dict(stride=stride, padding=pads, dilation=dilation, groups=int(groups)))
    out = _add_bias(out, bias, op)
    return out.squeeze(0) if unbatched else out


def conv1d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    """1-D convolution over (N, C, L) inputs; weight (O, C/groups, k)."""
    return convolution(input, weight, bias, stride, padding, dilation, groups, nsp=1, op="conv1d")


def conv2d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    """2-D convolution (cross-correlation) of (N, C, H, W) inputs with (O, C/groups, kh, kw) weights.

    ``padding`` is an int, a tuple, ``'valid'`` or ``'same'``. Vectorized: one im2col
    copy per kernel offset and one matmul (see NOTE [Conv as three bilinear primitives]).

    Examples
    --------
    >>> import lucid
    >>> x = lucid.ones(1, 1, 4, 4)
    >>> lucid.conv2d(x, lucid.ones(2, 1, 3, 3), padding=1).shape
    (1, 2, 4, 4)
    """
    return convolution(input, weight, bias, stride, padding, dilation, groups, nsp=2, op="conv2d")


def conv3d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    """3-D convolution over (N, C, D, H, W) inputs."""
    return convolution(input, weight, bias, stride, padding, dilation, groups, nsp=3, op="conv3d")


@autocast_composite("conv_transpose")  # NOTE [Autocast]
def conv_transpose(input, weight, bias=None, stride=1, padding=0, output_padding=0, groups=1, dilation=1,
                   *, nsp, op="conv_transpose", output_size=None):
    """N-d transposed convolution (the adjoint of :func:`convolution`); see :func:`conv_transpose2d`."""
    input, weight = _check_input(input, weight, nsp, op)
    if bias is not None and _as_tensor(bias).dtype != input.dtype:  # PyTorch casts the bias to the input's
        bias = _as_tensor(bias)
        if bias.dtype.kind in "fc" and input.dtype.kind not in "fc" and op != "convolution":
            raise RuntimeError(f"{op}: result type {bias.dtype} can't be cast to the desired output type {input.dtype}")
        bias = bias.to(input.dtype)
    unbatched = input.ndim == nsp + 1
    if unbatched:
        input = input.unsqueeze(0)
    stride = _tuple(stride, nsp, "stride", op)
    dilation = _tuple(dilation, nsp, "dilation", op)
    if isinstance(padding, str):  # no 'same' / 'valid' for transposed convs in PyTorch either
        raise TypeError(f"{op}: argument 'padding' must be an int or a tuple of ints, not str")
    pad = _tuple(padding, nsp, "padding", op)
    opad = _tuple(output_padding, nsp, "output_padding", op)
    ksize = tuple(weight.shape[2:])
    if input.shape[1] != weight.shape[0] or input.shape[1] % groups:
        raise RuntimeError(f"{op}: input of shape {tuple(input.shape)} does not match weight of shape "
                           f"{tuple(weight.shape)} (expected {weight.shape[0]} input channels, groups={groups})")
    if any(op_ >= max(s, d) for op_, s, d in zip(opad, stride, dilation)):
        raise RuntimeError(f"{op}: output_padding {opad} must be smaller than stride {stride} or dilation {dilation}")
    out_size = tuple((n - 1) * s - 2 * p + d * (k - 1) + o + 1
                     for n, s, p, d, k, o in zip(input.shape[2:], stride, pad, dilation, ksize, opad))
    if output_size is not None:
        out_size = tuple(output_size)[-nsp:]
    if min(out_size) <= 0:
        raise RuntimeError(f"{op}: output size {out_size} is too small (input shape {tuple(input.shape)})")
    out = bind(conv_transpose_p, (input, weight), dict(stride=stride, padding=pad, dilation=dilation,
                                                       groups=int(groups), out_size=out_size))
    out = _add_bias(out, bias, op)
    return out.squeeze(0) if unbatched else out


def conv_transpose1d(input, weight, bias=None, stride=1, padding=0, output_padding=0, groups=1, dilation=1):
    """1-D transposed convolution; weight (C_in, C_out/groups, k)."""
    return conv_transpose(input, weight, bias, stride, padding, output_padding, groups, dilation, nsp=1,
                          op="conv_transpose1d")


def conv_transpose2d(input, weight, bias=None, stride=1, padding=0, output_padding=0, groups=1, dilation=1):
    """2-D transposed convolution ("deconvolution"), the adjoint of :func:`conv2d`.

    Weight shape ``(C_in, C_out/groups, kh, kw)``; the output size is
    ``(H-1)*stride - 2*padding + dilation*(k-1) + output_padding + 1``.

    Examples
    --------
    >>> import lucid
    >>> lucid.conv_transpose2d(lucid.ones(1, 2, 3, 3), lucid.ones(2, 1, 2, 2), stride=2).shape
    (1, 1, 6, 6)
    """
    return conv_transpose(input, weight, bias, stride, padding, output_padding, groups, dilation, nsp=2,
                          op="conv_transpose2d")


def conv_transpose3d(input, weight, bias=None, stride=1, padding=0, output_padding=0, groups=1, dilation=1):
    """3-D transposed convolution."""
    return conv_transpose(input, weight, bias, stride, padding, output_padding, groups, dilation, nsp=3,
                          op="conv_transpose3d")


__all__ = ["conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d", "conv_transpose3d"]
