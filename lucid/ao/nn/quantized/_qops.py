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
- ``cat`` keeps the first tensor's quantizer and requantizes the others to it.
"""
from __future__ import annotations

import inspect

import numpy as np

from lucid._core.quantized import PER_TENSOR, RANGE, QuantizedTensor, make_quantized


def _L():
    import lucid

    return lucid


def _original(func):
    return getattr(func, "_lucid_original", func)


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


_SIMPLE = {"relu": relu, "hardtanh": hardtanh, "relu6": relu6, "clamp": clamp, "clip": clamp}
_BOUND = {"max_pool1d": _max_pool, "max_pool2d": _max_pool, "max_pool3d": _max_pool,
          "adaptive_avg_pool1d": _adaptive_avg, "adaptive_avg_pool2d": _adaptive_avg,
          "adaptive_avg_pool3d": _adaptive_avg, "flatten": _flatten, "sort": _sort, "dropout": _dropout,
          "max": lambda f, a: _reduce_values(f, a, "max"), "min": lambda f, a: _reduce_values(f, a, "min")}


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
            return cat(a["tensors"], a.get("dim", 0))
        if name in _SIMPLE and isinstance(args[0] if args else None, QuantizedTensor):
            a = _bind(func, args, kwargs)
            return _SIMPLE[name](**a)
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
