"""Quantized tensors, PyTorch's ``torch.quantize_per_tensor`` family: integers plus the affine
map (scale, zero point) that turns them back into real numbers.

Examples
--------
>>> import lucid
>>> q = lucid.quantize_per_tensor(lucid.tensor([-1.0, 0.05, 0.25, 30.0]), 0.1, 10, lucid.quint8)
>>> q.int_repr()
tensor([  0,  10,  12, 255], dtype=lucid.uint8)
>>> q.dequantize()
tensor([-1. ,  0. ,  0.2, 24.5])
"""
# NOTE [Quantized tensors]
# A quantized tensor is a ``Tensor`` subclass (``QuantizedTensor``) holding a dense integer
# tensor (int8 for qint8, uint8 for quint8, int32 for qint32: what ``int_repr()`` returns) and
# its quantizer: a Python (scale, zero_point) for the per-tensor schemes, or float64 scales,
# int64 zero points and an axis for the per-channel ones. As for sparse tensors (NOTE [Sparse
# tensors]) its ``_data`` is a ``NoValues`` stand-in, so a dense op given a quantized tensor
# fails inside its impl with NotImplementedError, named by ``bind`` (PyTorch raises the same
# type: no kernel for the QuantizedCPU backend). Nothing in ``_core``, the engine or the ops
# knows about it, so the eager path pays nothing; a subclass rather than a ``_data`` array
# type keeps ``q.dtype`` (a quantized dtype no array has, NOTE [Quantized dtypes]) and the
# q_* methods off ``Tensor``.
# Quantizing and dequantizing are Lucid ops on the integer tensor (any device, no host
# arrays), with no gradient (PyTorch's quantized tensors never require grad). The rounding is
# the one PyTorch's CPU kernels do, bit for bit (checked against torch in
# tests/quantization):
# - per tensor, qint8/quint8 (fbgemm's vectorised quantizer): ``rint(fma(x, 1/scale, zp))``
#   in float32, the fused multiply-add emulated in float64 (the product of two floats is
#   exact there, and the sum rounds once more only in cases far below a float32 ulp);
# - per tensor, qint32: ``rint(zp + x * (1/scale))`` with each step rounded to float32;
# - per channel: ``rint(x * (1/scale) + zp)``, product and sum each rounded to float32 (so a
#   tie with an odd zero point rounds the other way than ``zp + rint(x / scale)`` would);
# - ``1/scale`` is the float32 reciprocal of the float32 scale; results clamp to the dtype's
#   range, rint rounds half to even; NaN becomes what PyTorch's kernels give (``_nan_int``).
# Dequantizing: ``(q - zp) * scale`` in float32 per tensor, in float64 then rounded to float32
# per channel. Views (indexing, reshape, transpose ...) and flip/repeat/index_select of
# per-tensor quantized tensors act on the integer tensor; per-channel ones support only
# clone/detach/contiguous/to(device). The dense functions PyTorch's QuantizedCPU kernels run
# (relu, pooling, cat, clamp ...) come through ``__torch_function__``: NOTE [Ops on quantized
# tensors] in lucid/ao/nn/quantized/_qops.py.
from __future__ import annotations

import numpy as np

from . import backend
from . import tensor as _tensor_module
from .dtypes import _QuantizedDtype, qint8, qint32, quint8
from .no_values import NoValues
from .tensor import Tensor

__all__ = ["qscheme", "per_tensor_affine", "per_channel_affine", "per_tensor_symmetric",
           "per_channel_symmetric", "per_channel_affine_float_qparams", "QuantizedTensor",
           "quantize_per_tensor", "quantize_per_channel", "quantize_per_tensor_dynamic", "dequantize",
           "choose_qparams"]

NOT_HERE = "quantized tensors are not supported here; call .dequantize() first"


class qscheme:
    """A quantization scheme, PyTorch's ``torch.qscheme`` (``lucid.per_tensor_affine`` ...).

    Examples
    --------
    >>> import lucid
    >>> lucid.per_tensor_affine, lucid.per_channel_symmetric.name
    (lucid.per_tensor_affine, 'per_channel_symmetric')
    """

    __slots__ = ("name",)

    def __init__(self, name):
        self.name = name

    def __repr__(self):
        return f"lucid.{self.name}"

    __str__ = __repr__

    def __reduce__(self):
        return (_scheme, (self.name,))


per_tensor_affine = qscheme("per_tensor_affine")
per_channel_affine = qscheme("per_channel_affine")
per_tensor_symmetric = qscheme("per_tensor_symmetric")
per_channel_symmetric = qscheme("per_channel_symmetric")
per_channel_affine_float_qparams = qscheme("per_channel_affine_float_qparams")
_SCHEMES = {s.name: s for s in (per_tensor_affine, per_channel_affine, per_tensor_symmetric,
                                per_channel_symmetric, per_channel_affine_float_qparams)}
PER_TENSOR = (per_tensor_affine, per_tensor_symmetric)


def _scheme(name):
    return _SCHEMES[name]


# dtype -> (lowest, highest) integer
RANGE = {qint8: (-128, 127), quint8: (0, 255), qint32: (-2 ** 31, 2 ** 31 - 1)}


def check_qdtype(dtype, name):
    if dtype.__class__ is not _QuantizedDtype:
        raise RuntimeError(f"{name}: expected a quantized dtype (lucid.qint8, lucid.quint8, lucid.qint32), "
                           f"got {dtype}")
    return dtype


class _QuantizedData(NoValues):
    """What a quantized tensor holds as ``_data``: a shape and a dtype, and no values."""

    __slots__ = ()
    message = NOT_HERE
    kind = "quantized tensor"


def _lucid():
    import lucid

    return lucid


# ------------------------------------------------------------------ the integer arithmetic


def _quantize_ints(x, inv, zp, dtype, per_tensor, per_channel=False):
    """The integer tensor of float32 ``x`` (see NOTE [Quantized tensors] for the rounding);
    ``per_channel`` (a tensor ``zp``) rounds after adding the zero point, fbgemm's dynamic
    quantizer (neither flag) before."""
    L = _lucid()
    lo, hi = RANGE[dtype]
    if per_tensor and dtype is not qint32:  # fused multiply-add, one rounding to float32
        r = L.round((x.double() * inv + zp).float()).double()
    elif per_tensor:
        r = L.round(x * inv + float(zp)).double()
    elif per_channel:
        r = L.round(x * inv + zp.float()).double()
    else:
        r = L.round(x * inv).double() + zp
    r = L.where(L.isnan(r), float(_nan_int(dtype, per_tensor)), r.clamp(lo, hi))
    return r.to(L.int64).to(dtype.storage)


def _nan_int(dtype, per_tensor):
    """The integer PyTorch's x86 kernels give NaN: the 8-bit per-tensor quantizer clamps with
    max-then-min (NaN falls through to the top), the per-channel one converts NaN to 0 before
    clamping, and qint32 takes the float-to-int conversion's INT_MIN."""
    if dtype is qint32:
        return RANGE[dtype][0]
    return RANGE[dtype][1] if per_tensor else 0


def _dequantize_ints(ints, scale, zp, per_tensor):
    L = _lucid()
    d = ints.to(L.int64) - zp
    if per_tensor:
        return d.float() * float(np.float32(scale))
    return (d.double() * scale).float()


def _f32_inverse(scale):
    """``1/scale`` as float32 computes it from the float32 scale (a Python float, exactly)."""
    with np.errstate(divide="ignore", over="ignore"):
        return float(np.float32(1.0) / np.float32(scale))


def _channel_shape(ndim, axis, n):
    shape = [1] * ndim
    shape[axis] = n
    return tuple(shape)


# ------------------------------------------------------------------ the tensor


class QuantizedTensor(Tensor):
    """A quantized tensor: integers and their quantizer (NOTE [Quantized tensors]).

    Made by :func:`lucid.quantize_per_tensor`, :func:`lucid.quantize_per_channel` or
    :func:`lucid.quantize_per_tensor_dynamic`; never constructed directly. Dense ops refuse
    it (NotImplementedError): call :meth:`dequantize` first.
    """

    is_quantized = True
    _ints = None
    _qdtype = None
    _qscheme = per_tensor_affine
    _scale = 1.0
    _zp = 0
    _scales = None
    _zps = None
    _axis = None
    if hasattr(_tensor_module, "_disabled_torch_function_impl"):
        __torch_function__ = _tensor_module._disabled_torch_function_impl

    # ----------------------------------------------------------- metadata
    @property
    def shape(self):
        return self._ints.shape

    @property
    def dtype(self):
        return self._qdtype

    @property
    def device(self):
        return self._ints.device

    @property
    def is_cpu(self):
        return self._ints.is_cpu

    def element_size(self):
        return self._qdtype.itemsize

    def is_floating_point(self):
        return False

    def is_complex(self):
        return False

    def contiguous(self, memory_format=None):
        return self if self._ints.is_contiguous() else self._like(self._ints.contiguous())

    def is_contiguous(self, memory_format=None):
        return self._ints.is_contiguous()

    def stride(self, *dim):
        return self._ints.stride(*dim)

    # ----------------------------------------------------------- the quantizer
    def int_repr(self):
        """The integers (int8, uint8 or int32), a new tensor."""
        return self._ints.clone()

    def qscheme(self):
        return self._qscheme

    def _need(self, per_tensor, name):
        if (self._qscheme in PER_TENSOR) != per_tensor:
            want = "a per-tensor" if per_tensor else "a per-channel"
            raise RuntimeError(f"{name}: expected {want} quantized tensor, got quantization scheme "
                               f"{self._qscheme}")

    def q_scale(self):
        self._need(True, "q_scale")
        return self._scale

    def q_zero_point(self):
        self._need(True, "q_zero_point")
        return self._zp

    def q_per_channel_scales(self):
        self._need(False, "q_per_channel_scales")
        return self._scales.clone()

    def q_per_channel_zero_points(self):
        self._need(False, "q_per_channel_zero_points")
        return self._zps.clone()

    def q_per_channel_axis(self):
        self._need(False, "q_per_channel_axis")
        return self._axis

    def dequantize(self):
        """The real values: ``(int_repr() - zero_point) * scale`` as float32."""
        if self._qscheme in PER_TENSOR:
            return _dequantize_ints(self._ints, self._scale, self._zp, True)
        shape = _channel_shape(self._ints.ndim, self._axis, self._scales.shape[0])
        return _dequantize_ints(self._ints, self._scales.reshape(shape), self._zps.reshape(shape), False)

    # ----------------------------------------------------------- copies and views
    def _like(self, ints, axis=None):
        return make_quantized(ints, self._qdtype, self._qscheme, self._scale, self._zp, self._scales,
                              self._zps, self._axis if axis is None else axis)

    def clone(self, *, memory_format=None):
        return self._like(self._ints.clone())

    def detach(self):
        return self

    def to(self, *args, **kwargs):
        """Move to a device (``q.to("cpu")``); quantized tensors convert to no other dtype."""
        dev = kwargs.pop("device", None)
        rest = [a for a in args if not (isinstance(a, str) or a.__class__.__name__ == "device")]
        if rest or kwargs.get("dtype") is not None:
            raise RuntimeError("to: a quantized tensor converts to no other dtype; call .dequantize() first")
        dev = dev if dev is not None else next((a for a in args if a not in rest), None)
        if dev is None or backend.check_device(dev) == self.device:
            return self
        moved = make_quantized(self._ints.to(dev), self._qdtype, self._qscheme, self._scale, self._zp,
                               None if self._scales is None else self._scales.to(dev),
                               None if self._zps is None else self._zps.to(dev), self._axis)
        return moved

    def cpu(self):
        return self.to("cpu")

    def _view(self, name, *args, **kwargs):
        if self._qscheme not in PER_TENSOR:
            raise NotImplementedError(f"{name}: views of per-channel quantized tensors are not supported; "
                                      "call .dequantize() first")
        out = getattr(self._ints, name)(*args, **kwargs)
        if isinstance(out, tuple):
            return tuple(self._like(o) for o in out)
        return self._like(out)

    def __getitem__(self, key):
        return self._view("__getitem__", key)

    def __setitem__(self, key, value):
        raise NotImplementedError("setitem: " + NOT_HERE)

    def __len__(self):
        if not self.shape:
            raise TypeError("len() of a 0-d tensor")
        return self.shape[0]

    def item(self):
        return self.dequantize().item()

    def tolist(self):
        raise RuntimeError("tolist: " + NOT_HERE)

    def numpy(self, *, force=False):
        raise TypeError(f"numpy: can't convert a quantized tensor ({self._qdtype}) to numpy; "
                        "call .dequantize() or .int_repr() first")

    def __array__(self, dtype=None, copy=None):
        self.numpy()

    def __reduce_ex__(self, protocol):
        return (make_quantized, (self._ints, self._qdtype, self._qscheme, self._scale, self._zp, self._scales,
                                 self._zps, self._axis))

    def __deepcopy__(self, memo):
        return self.clone()

    # ----------------------------------------------------------- printing
    def __repr__(self):
        from .printing import array_str
        from ..sparse._base import add_suffixes

        body = array_str(backend.host(self.dequantize()._data), prefix="tensor(")
        suffixes = [] if self.device.type == "cpu" else [f"device='{self.device}'"]
        suffixes += [f"size={tuple(self.shape)}", f"dtype={self._qdtype}",
                     f"quantization_scheme={self._qscheme}"]
        if self._qscheme in PER_TENSOR:
            suffixes += [f"scale={self._scale!r}", f"zero_point={self._zp}"]
        else:
            suffixes += [f"scale={self._scales!r}", f"zero_point={self._zps!r}", f"axis={self._axis}"]
        return add_suffixes("tensor(" + body, suffixes, 7, False)

    __str__ = __repr__


# views, and the copies PyTorch's QuantizedCPU kernels make with the quantizer kept
for _name in ("reshape", "view", "flatten", "unflatten", "squeeze", "unsqueeze", "transpose", "permute", "t",
              "select", "narrow", "split", "chunk", "unbind", "expand", "movedim", "swapaxes", "unfold", "flip",
              "repeat", "index_select"):
    setattr(QuantizedTensor, _name, (lambda n: lambda self, *a, **k: self._view(n, *a, **k))(_name))


def _refuse_operator(op):
    def method(self, *args, **kwargs):
        raise NotImplementedError(f"{op}: " + NOT_HERE)
    return method


# ``dense * q`` reaches the subclass's reflected operator first, so every arithmetic operator
# fails naming itself (a dense function given a quantized tensor fails in promotion or bind).
for _op in ("add", "sub", "mul", "truediv", "floordiv", "mod", "pow", "matmul", "and", "or", "xor",
            "lshift", "rshift"):
    for _form in (f"__{_op}__", f"__r{_op}__", f"__i{_op}__"):
        setattr(QuantizedTensor, _form, _refuse_operator(_op))
for _op in ("neg", "abs", "invert", "lt", "le", "gt", "ge"):
    setattr(QuantizedTensor, f"__{_op}__", _refuse_operator(_op))
QuantizedTensor.view_as = lambda self, other: self._view("reshape", tuple(other.shape))
QuantizedTensor.reshape_as = QuantizedTensor.view_as
QuantizedTensor.T = property(lambda self: self._view("permute", *reversed(range(self._ints.ndim))))


def _torch_function(cls, func, types, args=(), kwargs=None):
    from lucid.ao.nn.quantized._qops import dispatch

    return dispatch(func, args, kwargs or {})


# set after the class exists: defining it in the body would switch the protocol on at import
QuantizedTensor.__torch_function__ = classmethod(_torch_function)
_PROTOCOL = []


def make_quantized(ints, dtype, scheme, scale=1.0, zero_point=0, scales=None, zero_points=None, axis=None):
    """A :class:`QuantizedTensor` over the integer tensor ``ints`` (no checks)."""
    if not _PROTOCOL or not _PROTOCOL[0].active:  # the functions PyTorch runs on quantized tensors
        from .. import overrides

        _PROTOCOL[:] = [overrides._STATE]
        overrides._activate()
    q = object.__new__(QuantizedTensor)
    q._ints, q._qdtype, q._qscheme = ints, dtype, scheme
    if scheme in PER_TENSOR:
        q._scale, q._zp = float(scale), int(zero_point)
    else:
        q._scales, q._zps, q._axis = scales, zero_points, int(axis)
    q._data = _QuantizedData(tuple(ints.shape), ints._data.dtype)
    q._version = [0]
    return q


# ------------------------------------------------------------------ public functions


def _check_float_input(x, name):
    if not isinstance(x, Tensor):
        raise TypeError(f"{name}: expected a Tensor, got {type(x).__name__}")
    if x.dtype != np.float32:
        raise RuntimeError(f"{name}: Quantize only works on Float Tensor, got {x.dtype}")


def _number(v, kind):
    return kind(v.item()) if isinstance(v, Tensor) else kind(v)


def quantize_per_tensor(input, scale, zero_point, dtype):
    """Quantize a float32 tensor with one scale and zero point (PyTorch's rounding, NOTE
    [Quantized tensors]): ``clamp(round(x / scale) + zero_point)`` in the dtype's range.

    Parameters
    ----------
    input : Tensor or list of Tensor
        float32 values; a list quantizes each with the matching entry of ``scale`` and
        ``zero_point`` (then 1-D tensors) and returns a tuple.
    scale : float or Tensor
    zero_point : int or Tensor
    dtype : lucid.qint8, lucid.quint8 or lucid.qint32

    Examples
    --------
    >>> import lucid
    >>> lucid.quantize_per_tensor(lucid.tensor([0.0, 0.3, 1.0]), 0.1, 10, lucid.quint8)
    tensor([0. , 0.3, 1. ], size=(3,), dtype=lucid.quint8,
           quantization_scheme=lucid.per_tensor_affine, scale=0.1, zero_point=10)
    """
    if isinstance(input, (list, tuple)):
        return tuple(quantize_per_tensor(t, s, z, dtype) for t, s, z in zip(input, scale, zero_point))
    name = "quantize_per_tensor"
    check_qdtype(dtype, name)
    _check_float_input(input, name)
    scale, zero_point = _number(scale, float), _number(zero_point, int)
    lo, hi = RANGE[dtype]
    if not lo <= zero_point <= hi:
        where = "above upper" if zero_point > hi else "below lower"
        raise RuntimeError(f"{name}: zero_point {zero_point} is {where} bound.")
    from .grad_mode import no_grad

    with no_grad():
        ints = _quantize_ints(input.detach(), _f32_inverse(scale), zero_point, dtype, True)
    return make_quantized(ints, dtype, per_tensor_affine, scale, zero_point)


def quantize_per_channel(input, scales, zero_points, axis, dtype):
    """Quantize a float32 tensor with one scale and zero point per slice along ``axis``.

    Parameters
    ----------
    input : Tensor
        float32 values.
    scales : Tensor
        1-D, one per slice (kept as float64, used as float32 as PyTorch does).
    zero_points : Tensor
        1-D integers, one per slice (kept as int64).
    axis : int
        The channel dimension, in ``[0, input.dim())``.
    dtype : lucid.qint8, lucid.quint8 or lucid.qint32

    Examples
    --------
    >>> import lucid
    >>> x = lucid.tensor([[1.0, 2.0], [4.0, 5.0]])
    >>> q = lucid.quantize_per_channel(x, lucid.tensor([0.1, 0.5]), lucid.tensor([0, 3]), 0, lucid.qint8)
    >>> q.int_repr()
    tensor([[10, 20],
            [11, 13]], dtype=lucid.int8)
    >>> q.q_per_channel_axis(), q.qscheme()
    (0, lucid.per_channel_affine)
    """
    name = "quantize_per_channel"
    check_qdtype(dtype, name)
    _check_float_input(input, name)
    L = _lucid()
    if not 0 <= axis < input.ndim:
        raise RuntimeError(f"{name}: Channel axis out of range in per channel affine quantization. "
                           f"Got: {axis} Expected: [0, {input.ndim})")
    zp = L.as_tensor(zero_points)
    scales = L.as_tensor(scales).detach().to(device=input.device, dtype=L.float64)
    zero_points = zp.detach().to(device=input.device, dtype=L.int64)
    n = input.shape[axis]
    if scales.shape != (n,) or zero_points.shape != (n,):
        raise RuntimeError(f"{name}: length of scales and zero_points must equal the channel count {n}, "
                           f"got {tuple(scales.shape)} and {tuple(zero_points.shape)}")
    if zp.dtype.is_floating_point and dtype == L.quint8:
        # float zero points make PyTorch's per_channel_affine_float_qparams tensor (embedding
        # weights): x / scale + zero_point rounded, not the zero point rounded first
        from ..ao.nn.quantized.embedding_ops import quantize_float_qparams

        return quantize_float_qparams(input, scales, zp, axis, dtype)
    lo, hi = RANGE[dtype]
    if input.device.type == "cpu" and n and not (lo <= int(zero_points.min()) and int(zero_points.max()) <= hi):
        raise RuntimeError(f"{name}: zero_points must lie in [{lo}, {hi}] for {dtype}")
    shape = _channel_shape(input.ndim, axis, n)
    from .grad_mode import no_grad

    with no_grad():
        inv = 1.0 / scales.float().reshape(shape)  # float32 reciprocal of the float32 scales
        ints = _quantize_ints(input.detach(), inv, zero_points.reshape(shape), dtype, False, per_channel=True)
    return make_quantized(ints, dtype, per_channel_affine, scales=scales, zero_points=zero_points, axis=axis)


_SMALL_SCALE = np.float32(6.1e-5)


def choose_qparams(min_val, max_val, qmin, qmax, reduce_range=False, preserve_sparsity=False):
    """``(scale, zero_point)`` covering ``[min_val, max_val]`` and 0, as PyTorch's (and fbgemm's)
    ``ChooseQuantizationParams``: the range of dynamic quantization.

    Float32 bounds, a float64 scale, a zero point nudged to the nearest integer in range;
    ``reduce_range`` halves ``qmin``/``qmax`` (the x86/fbgemm rule for activations);
    ``preserve_sparsity`` (symmetric quantization) widens a range that straddles 0 to a
    symmetric one and puts the zero point in the middle.

    Examples
    --------
    >>> from lucid._core.quantized import choose_qparams
    >>> choose_qparams(-2.0, 3.5, 0, 255)
    (0.021568627450980392, 93)
    """
    f32 = np.float32
    lo, hi = f32(min_val), f32(max_val)
    if not lo <= hi:
        raise RuntimeError("choose_qparams: In ChooseQuantizationParams, min should be less than or equal to max")
    if reduce_range:
        qmin, qmax = int(qmin / 2), int(qmax / 2)  # C++ division truncates toward zero
    symmetric = preserve_sparsity and lo < 0 < hi
    if symmetric:
        sym_min, sym_max = -((qmax - qmin) // 2 + 1), (qmax - qmin) // 2
        widest = max(abs(float(lo) / sym_min), abs(float(hi) / sym_max))
        lo, hi = f32(widest * sym_min), f32(widest * sym_max)
    lo, hi = min(lo, f32(0)), max(hi, f32(0))
    scale = (float(hi) - float(lo)) / (qmax - qmin)
    with np.errstate(divide="ignore", over="ignore"):
        if f32(scale) == 0 or np.isinf(f32(1) / f32(scale)):
            scale = 0.1
    if scale < _SMALL_SCALE:
        org = f32(scale)
        scale = float(_SMALL_SCALE)
        if lo == 0:
            hi = f32(_SMALL_SCALE * f32(qmax - qmin))
        elif hi == 0:
            lo = f32(-_SMALL_SCALE * f32(qmax - qmin))
        else:
            amp = f32(_SMALL_SCALE / org)
            lo, hi = f32(lo * amp), f32(hi * amp)
    from_min, from_max = qmin - float(lo) / scale, qmax - float(hi) / scale
    err_min = abs(qmin) - abs(float(lo) / scale)
    err_max = abs(qmax) - abs(float(hi) / scale)
    initial = from_min if err_min < err_max else from_max
    if symmetric:
        initial = (qmin + qmax) / 2 + 1
    zp = qmin if initial < qmin else qmax if initial > qmax else int(np.rint(initial))
    return scale, zp


def quantize_per_tensor_dynamic(input, dtype, reduce_range):
    """Quantize with the scale and zero point :func:`choose_qparams` picks from the input's
    range (PyTorch's ``torch.quantize_per_tensor_dynamic``).

    Examples
    --------
    >>> import lucid
    >>> q = lucid.quantize_per_tensor_dynamic(lucid.tensor([1.0, -2.0, 3.5]), lucid.quint8, False)
    >>> q.q_scale(), q.q_zero_point()
    (0.021568627450980392, 93)
    """
    name = "quantize_per_tensor_dynamic"
    check_qdtype(dtype, name)
    if dtype is qint32:
        raise RuntimeError(f"{name}: expected lucid.qint8 or lucid.quint8, got {dtype}")
    _check_float_input(input, name)
    lo, hi = (float(v) for v in input.detach().aminmax()) if input.numel() else (0.0, 0.0)
    qmin, qmax = RANGE[dtype]
    scale, zp = choose_qparams(lo, hi, qmin, qmax, reduce_range)
    return quantize_per_tensor(input, scale, zp, dtype)


def dequantize(tensor):
    """The float32 values of a quantized tensor (a list of them gives a tuple); a dense
    tensor comes back as float (itself if it is float already), as PyTorch's.

    Examples
    --------
    >>> import lucid
    >>> q = lucid.quantize_per_tensor(lucid.tensor([0.5, 1.0]), 0.25, 0, lucid.qint8)
    >>> lucid.dequantize(q)
    tensor([0.5, 1. ])
    """
    if isinstance(tensor, (list, tuple)):
        return tuple(dequantize(t) for t in tensor)
    return tensor.dequantize()
