"""Public functions given a quantized tensor (NOTE [Ops on quantized tensors]).

NOTE [Ops on quantized tensors]
PyTorch runs a few dense functions on quantized tensors through its QuantizedCPU kernels, which
an eager static model needs between its quantized layers (``F.relu``, ``max_pool2d``,
``adaptive_avg_pool2d``, ``flatten``, ``cat`` ...). A ``QuantizedTensor`` takes part in the
``__torch_function__`` protocol (NOTE [Torch function]) only once one exists (``make_quantized``
switches it on, as nested tensors do), and :func:`dispatch` maps each such function to its
integer form here; any other function runs as it did, failing with NotImplementedError.
Requantization rules (checked against PyTorch 2.13's x86 kernels):
- order-preserving ops (relu, clamp, hardtanh, max pooling, max/min, sort, views) act on the
  integers and keep the input's scale and zero point; bounds are quantized with them;
- adaptive average pooling rounds the mean of the stored integers half to even, keeping the
  scale and zero point;
- ``cat`` keeps the first tensor's quantizer and requantizes the others to it;
- average pooling keeps the scale and zero point: the window sum of ``q - zero_point`` times
  the float32 ``1 / divisor``, plus the zero point, rounded half to even in float32 (the zero
  point is added before rounding); ``mean`` over the innermost dims rounds the mean of the
  stored integers, over other dims it quantizes the mean of the dequantized values back with
  the input's parameters (there PyTorch's float32 summation order can round an exact
  half-step tie the other way);
- bilinear ``interpolate`` keeps the scale and zero point: float32 weights and source indices
  as PyTorch's quantized kernel computes them, applied to the stored integers and rounded half
  to even there (nearest modes select integers).
- ``sigmoid``/``hardsigmoid``/``tanh`` have fixed output parameters (1/256 with zero point 0
  for quint8 or -128 for qint8; tanh 2/256 with 128 or 0): the input dequantized, the float
  function, then quantized with them (bit for bit PyTorch's ``qsigmoid``/``qtanh``/``qhardsigmoid``).
"""
from __future__ import annotations

import inspect

import numpy as np

from lucid._core.quantized import PER_TENSOR, RANGE, QuantizedTensor, make_quantized
from ....overrides import original


def _L():
    import lucid

    return lucid


_original = original  # lucid.overrides: the wrapped function, the tables' key


def _bind(func, args, kwargs):
    sig = inspect.signature(_original(func))
    b = sig.bind(*args, **kwargs)
    b.apply_defaults()
    return b.arguments


def _per_tensor(q, name):
    if not isinstance(q, QuantizedTensor):
        raise RuntimeError(f"{name}: expected a quantized tensor, got {q.dtype}")
    if q.qscheme() not in PER_TENSOR:
        raise NotImplementedError(f"{name}: per-channel quantized input is not supported")
    return q


def _like(q, ints):
    return make_quantized(ints, q.dtype, q.qscheme(), q.q_scale(), q.q_zero_point())


def _q_bound(q, value):
    """A float bound as an integer of ``q``'s quantizer (PyTorch's ``quantize_val``)."""
    lo, hi = RANGE[q.dtype]
    inv = np.float32(1.0) / np.float32(q.q_scale())
    r = float(np.rint(np.float32(np.float32(value) * inv))) + q.q_zero_point()
    return int(min(max(r, lo), hi))


def _clamp_ints(q, lo=None, hi=None):
    ints = q._ints
    if lo is not None:
        ints = _L().maximum(ints, _L().tensor(lo, dtype=ints.dtype, device=ints.device))
    if hi is not None:
        ints = _L().minimum(ints, _L().tensor(hi, dtype=ints.dtype, device=ints.device))
    return ints


def _inplace(q, out, inplace):
    if inplace:
        q._ints = out._ints
        return q
    return out


def relu(input, inplace=False):
    """ReLU: the integers below the zero point become it."""
    q = _per_tensor(input, "relu")
    return _inplace(q, _like(q, _clamp_ints(q, lo=q.q_zero_point())), inplace)


def hardtanh(input, min_val=-1.0, max_val=1.0, inplace=False):
    q = _per_tensor(input, "hardtanh")
    out = _like(q, _clamp_ints(q, _q_bound(q, min_val), _q_bound(q, max_val)))
    return _inplace(q, out, inplace)


def relu6(input, inplace=False):
    return hardtanh(input, 0.0, 6.0, inplace)


def clamp(input, min=None, max=None):
    q = _per_tensor(input, "clamp")
    lo = None if min is None else _q_bound(q, float(min))
    hi = None if max is None else _q_bound(q, float(max))
    return _like(q, _clamp_ints(q, lo, hi))


def _on_ints_as_float(func, q, **kw):
    """Run a float function on the integers (exact in float64) and keep the quantizer."""
    out = _original(func)(q._ints.double(), **kw)
    if isinstance(out, tuple):
        return (_like(q, out[0].round().to(q._ints.dtype)),) + tuple(out[1:])
    return _like(q, out.round().to(q._ints.dtype))


def _max_pool(func, args):
    q = _per_tensor(args.pop("input"), "max_pool")
    return _on_ints_as_float(func, q, **args)


def _avg_from_sums(q, sums, counts):
    """PyTorch's quantized average: ``rint(sum / n)`` of the raw integers (the zero point is
    not taken off first, so ties round to even on the stored integers)."""
    lo, hi = RANGE[q.dtype]
    return _like(q, _L().round(sums / counts).clamp(lo, hi).to(q._ints.dtype))


def _adaptive_avg(func, args):
    q = _per_tensor(args.pop("input"), "adaptive_avg_pool")
    means = _original(func)(q._ints.double(), **args)
    sizes = _window_sizes(q._ints.shape, means.shape, q.device)
    return _avg_from_sums(q, (means * sizes).round(), sizes)


def _window_sizes(in_shape, out_shape, device):
    """How many inputs each adaptive window averages: output index ``i`` of a dim of length
    ``I`` pooled to ``O`` covers ``[floor(i I / O), ceil((i + 1) I / O))``."""
    L = _L()
    counts = None
    for d, (I, O) in enumerate(zip(in_shape, out_shape)):
        if I == O:
            continue
        lens = [-(-((i + 1) * I) // O) - (i * I) // O for i in range(O)]
        shape = [1] * len(out_shape)
        shape[d] = O
        t = L.tensor(lens, dtype=L.float64, device=device).reshape(*shape)
        counts = t if counts is None else counts * t
    return L.ones((), dtype=L.float64, device=device) if counts is None else counts


def cat(tensors, dim=0):
    """Concatenate with the first tensor's quantizer, the others requantized to it."""
    L = _L()
    first = _per_tensor(tensors[0], "cat")
    ints = []
    for t in tensors:
        t = _per_tensor(t, "cat")
        if t.dtype != first.dtype:
            raise RuntimeError(f"cat: expected quantized tensors of one dtype, got {first.dtype} and {t.dtype}")
        if (t.q_scale(), t.q_zero_point()) != (first.q_scale(), first.q_zero_point()):
            t = L.quantize_per_tensor(t.dequantize(), first.q_scale(), first.q_zero_point(), first.dtype)
        ints.append(t._ints)
    return _like(first, _original(L.cat)(ints, dim))


def _reduce_values(func, args, name):
    q = _per_tensor(args.pop("input"), name)
    if args.pop("other", None) is not None:
        raise NotImplementedError(f"{name}: the elementwise form is not supported on quantized tensors")
    if args.get("dim") is None:
        return _like(q, _original(func)(q._ints))
    out = _original(func)(q._ints, **args)
    return type(out)(_like(q, out[0]), out[1])


def _sort(func, args):
    q = _per_tensor(args.pop("input"), "sort")
    out = _original(func)(q._ints, **args)
    return type(out)(_like(q, out[0]), out[1])


def _flatten(func, args):
    return args.pop("input").flatten(**args)


def _dropout(func, args):
    if args.get("training"):
        raise NotImplementedError("dropout: quantized tensors are not supported in training mode")
    return args["input"]


# (scale, zero point) of the fixed-qparams activations, PyTorch's, by output dtype
FIXED_QPARAMS = {"sigmoid": {"quint8": (1.0 / 256, 0), "qint8": (1.0 / 256, -128)},
                 "hardsigmoid": {"quint8": (1.0 / 256, 0), "qint8": (1.0 / 256, -128)},
                 "tanh": {"quint8": (2.0 / 256, 128), "qint8": (2.0 / 256, 0)}}


def _fixed_qparams(name, float_fn):
    def op(input, *args, **kwargs):
        q = _per_tensor(input, name)
        kwargs.pop("inplace", None)
        if q.dtype not in (_L().quint8, _L().qint8):
            raise RuntimeError(f"{name}: expected a quint8 or qint8 input, got {q.dtype}")
        scale, zp = FIXED_QPARAMS[name][str(q.dtype).split(".")[-1]]
        return _L().quantize_per_tensor(float_fn(q.dequantize()), scale, zp, q.dtype)

    op.__name__ = name
    return op


def _float_fns():
    import lucid.nn.functional as F

    L = _L()
    return {"sigmoid": L.sigmoid, "tanh": L.tanh, "hardsigmoid": F.hardsigmoid}


def _requant_sum(q, sums, divisors):
    """``rint(sum * f32(1/divisor) + zp)`` in float32 (PyTorch's quantized average)."""
    L = _L()
    lo, hi = RANGE[q.dtype]
    mult = (1.0 / divisors).float() if isinstance(divisors, L.Tensor) else float(np.float32(1.0 / divisors))
    raw = sums.float() * mult + L.tensor(float(q.q_zero_point()), dtype=L.float32, device=q.device)
    return _like(q, L.round(raw).clamp(lo, hi).to(q._ints.dtype))


def _avg_pool(func, args):
    q = _per_tensor(args.pop("input"), "avg_pool")
    L = _L()
    centered = q._ints.double() - q.q_zero_point()
    override = args.pop("divisor_override", None)
    fn = _original(func)
    if func.__name__ == "avg_pool1d":  # no divisor_override there: pool a height-1 image
        import lucid.nn.functional as F

        pair = (lambda v, d: (d, (v if isinstance(v, int) else v[0])))
        k = args["kernel_size"]
        stride = args.get("stride") if args.get("stride") not in (None, ()) else k
        args.update(kernel_size=pair(k, 1), stride=pair(stride, 1), padding=pair(args.get("padding", 0), 0))
        q = _like(q, q._ints.unsqueeze(-2))
        out = _avg_pool(F.avg_pool2d, dict(args, input=q, divisor_override=override))
        return _like(out, out._ints.squeeze(-2))
    sums = fn(centered, divisor_override=1, **args)
    if override is not None:
        return _requant_sum(q, sums, float(override))
    ones = L.ones(tuple(q.shape), dtype=L.float64, device=q.device)
    counts = fn(ones, divisor_override=1, **args)  # the real elements of each window
    if args.get("count_include_pad", True):
        counts = counts / fn(ones, **args)  # the window clipped to the padded input
    return _requant_sum(q, sums, counts.round())


def _mean(func, args):
    """PyTorch's ``mean_quantized_cpu``: over the innermost dims, the mean of the stored
    integers rounded half to even; otherwise the mean of the dequantized values quantized back
    with the input's scale and zero point."""
    q = _per_tensor(args.pop("input"), "mean")
    L = _L()
    if args.pop("dtype", None) is not None:
        raise NotImplementedError("mean: dtype is not supported for quantized tensors")
    if args.get("axis") is not None:
        args["dim"] = args.pop("axis")
    args.pop("axis", None)
    dim, nd = args.get("dim"), q.ndim
    dims = range(nd) if dim is None or dim == () else ([dim] if isinstance(dim, int) else list(dim))
    dims = sorted(d % nd if nd else 0 for d in dims)
    if nd and dims == list(range(nd - len(dims), nd)):
        lo, hi = RANGE[q.dtype]
        means = _original(func)(q._ints.double(), **args)
        return _like(q, L.round(means).clamp(lo, hi).to(q._ints.dtype))
    # float64 then one rounding: PyTorch's float32 sum order decides only exact half-step ties
    out = _original(func)(q.dequantize().double(), **args).float()
    return L.quantize_per_tensor(out, q.q_scale(), q.q_zero_point(), q.dtype)


def _source_table(n_in, n_out, align_corners, scale):
    """PyTorch's bilinear source index, lower index, step to the next and the two weights, all
    float32 as its quantized kernel computes them (host work on sizes only)."""
    f32 = np.float32
    if align_corners:
        ratio = f32(n_in - 1) / f32(n_out - 1) if n_out > 1 else f32(0)
    else:
        ratio = f32(1.0 / scale) if scale is not None and scale > 0 else f32(n_in) / f32(n_out)
    dst = np.arange(n_out, dtype=f32)
    src = ratio * dst if align_corners else np.maximum(ratio * (dst + f32(0.5)) - f32(0.5), f32(0))
    src = src.astype(f32)
    lo = src.astype(np.int64)
    step = (lo < n_in - 1).astype(np.int64)
    lam1 = (src - lo.astype(f32)).astype(f32)
    return lo, lo + step, (f32(1) - lam1).astype(f32), lam1


def _interpolate(func, args):
    q = args["input"]
    if args.get("mode", "nearest") != "bilinear":
        return _original(func)(**args)
    q = _per_tensor(q, "interpolate")
    L = _L()
    if q.ndim != 4:
        raise NotImplementedError(f"interpolate: quantized bilinear takes a 4-D input, got {q.ndim}-D")
    if args.get("antialias"):
        raise NotImplementedError("interpolate: antialias is not supported for quantized tensors")
    H, W = q.shape[-2:]
    size, factor = args.get("size"), args.get("scale_factor")
    if (size is None) == (factor is None):
        raise ValueError("interpolate: only one of size or scale_factor should be defined")
    scales = (None, None)
    if size is not None:
        out = (size, size) if isinstance(size, int) else tuple(size)
    else:
        factors = (factor, factor) if isinstance(factor, (int, float)) else tuple(factor)
        out = tuple(int(np.floor(n * float(f))) for n, f in zip((H, W), factors))
        if not args.get("recompute_scale_factor"):
            scales = tuple(float(f) for f in factors)
    ac = bool(args.get("align_corners"))
    h0, h1, hl0, hl1 = _source_table(H, out[0], ac, scales[0])
    w0, w1, wl0, wl1 = _source_table(W, out[1], ac, scales[1])
    dev = q.device
    idx = (lambda a: L.tensor(a, dtype=L.int64, device=dev))
    lam = (lambda a, shape: L.tensor(a, dtype=L.float32, device=dev).reshape(*shape))
    x = q._ints.float()
    rows = [x.index_select(2, idx(h)) for h in (h0, h1)]
    p00, p01, p10, p11 = (r.index_select(3, idx(w)) for r in rows for w in (w0, w1))
    wa, wb = lam(wl0, (1, 1, 1, -1)), lam(wl1, (1, 1, 1, -1))
    ha, hb = lam(hl0, (1, 1, -1, 1)), lam(hl1, (1, 1, -1, 1))
    # rounded on the stored integers (the zero point is not taken off first, so ties round to
    # even there), as PyTorch's kernel does
    result = ha * (wa * p00 + wb * p01) + hb * (wa * p10 + wb * p11)
    lo, hi = RANGE[q.dtype]
    return _like(q, L.round(result).clamp(lo, hi).to(q._ints.dtype))


_SIMPLE = {"relu": relu, "hardtanh": hardtanh, "relu6": relu6, "clamp": clamp, "clip": clamp}
_BOUND = {"max_pool1d": _max_pool, "max_pool2d": _max_pool, "max_pool3d": _max_pool,
          "adaptive_avg_pool1d": _adaptive_avg, "adaptive_avg_pool2d": _adaptive_avg,
          "adaptive_avg_pool3d": _adaptive_avg, "flatten": _flatten, "sort": _sort, "dropout": _dropout,
          "max": lambda f, a: _reduce_values(f, a, "max"), "min": lambda f, a: _reduce_values(f, a, "min"),
          "avg_pool1d": _avg_pool, "avg_pool2d": _avg_pool, "avg_pool3d": _avg_pool, "mean": _mean, "interpolate": _interpolate}


_VIEW_FUNCTIONS = frozenset(("reshape", "squeeze", "unsqueeze", "transpose", "permute", "t", "unflatten",
                             "swapaxes", "swapdims", "narrow"))


def dispatch(func, args, kwargs):
    """``func(*args, **kwargs)`` with a quantized tensor among the arguments."""
    from lucid.overrides import DisableTorchFunctionSubclass

    name = getattr(func, "__name__", "")
    with DisableTorchFunctionSubclass():
        if name in ("cat", "concat", "concatenate") and isinstance(args[0] if args else kwargs.get("tensors"),
                                                                    (list, tuple)):
            a = _bind(func, args, kwargs)
            dim = a.get("dim", 0) if a.get("axis") is None else a["axis"]  # NOTE [NumPy keyword aliases]
            return cat(a["tensors"], dim)
        if name in _SIMPLE and isinstance(args[0] if args else None, QuantizedTensor):
            a = _bind(func, args, kwargs)
            return _SIMPLE[name](**a)
        if name in FIXED_QPARAMS and isinstance(args[0] if args else kwargs.get("input"), QuantizedTensor):
            a = _bind(func, args, kwargs)
            return _fixed_qparams(name, _float_fns()[name])(a.pop("input"))
        if name == "relu_" and args and isinstance(args[0], QuantizedTensor):
            return relu(args[0], inplace=True)
        if name in _VIEW_FUNCTIONS and args and isinstance(args[0], QuantizedTensor):
            # ``lucid.transpose(q, 0, 1)`` is ``q.transpose(0, 1)``: the tensor's own view method
            return getattr(args[0], name)(*args[1:], **kwargs)
        handler = _BOUND.get(name)
        if handler is not None and isinstance(args[0] if args else kwargs.get("input"), QuantizedTensor):
            a = _bind(func, args, kwargs)
            return handler(func, dict(a))
        return func(*args, **kwargs)
