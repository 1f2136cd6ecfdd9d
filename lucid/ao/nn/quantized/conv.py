"""Statically quantized convolutions (PyTorch's ``torch.ao.nn.quantized.Conv1d/2d/3d``, the
fused ``ConvReLU1d/2d/3d`` and the transposed ``ConvTranspose1d/2d/3d``).

NOTE [Static quantized conv]
As fbgemm's quantized conv: the integer sum ``acc = sum (xq - xz)(wq - wz)`` over each window
(zero padding is padding with the input's zero point, so it adds nothing; exact in float64),
plus the float bias divided by ``x_scale * w_scale`` (float32, per output channel for a
per-channel weight), times the float32 multiplier ``x_scale * w_scale / out_scale``, rounded
half to even, shifted by the output zero point and clamped to quint8 (to
``[zero_point, 255]`` with a fused ReLU), the requantization of NOTE [Static quantized linear].
The transposed convolutions do the same around the integer transposed convolution (fbgemm's
``conv_transpose``; PyTorch's onednn kernel, which the x86 engine picks for some shapes, gives
other integers), with a per-tensor weight only, as PyTorch.
"""
from __future__ import annotations

import numpy as np

import lucid
from lucid import nn
from lucid._core.quantized import PER_TENSOR, QuantizedTensor, make_quantized, quantize_per_tensor

from .._nn_utils import observed_qparams
from .dynamic.modules import _load_packed, _save_packed

__all__ = ["Conv1d", "Conv2d", "Conv3d", "ConvReLU1d", "ConvReLU2d", "ConvReLU3d", "ConvTranspose1d",
           "ConvTranspose2d", "ConvTranspose3d"]


def _ntuple(v, n):
    return tuple(v) if isinstance(v, (tuple, list)) else (v,) * n


class _ConvNd(nn.Module):
    _N = 2
    _relu = False
    _NAME = "QuantizedConv2d"

    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0, dilation=1, groups=1,
                 bias=True, padding_mode="zeros", device=None, dtype=None):
        super().__init__()
        n = self._N
        if in_channels % groups or out_channels % groups:
            raise ValueError(f"{self._NAME}: in_channels and out_channels must be divisible by groups")
        if padding_mode != "zeros":
            raise NotImplementedError(f"{self._NAME}: only padding_mode='zeros' is supported")
        self.in_channels, self.out_channels = in_channels, out_channels
        self.kernel_size, self.stride = _ntuple(kernel_size, n), _ntuple(stride, n)
        self.padding = padding if isinstance(padding, str) else _ntuple(padding, n)
        self.dilation, self.groups, self.padding_mode = _ntuple(dilation, n), groups, padding_mode
        w = quantize_per_tensor(lucid.zeros(*self._weight_shape()), 1.0, 0, lucid.qint8)
        self.set_weight_bias(w, lucid.zeros(out_channels) if bias else None)
        self.scale, self.zero_point = 1.0, 0
        self.register_state_dict_post_hook(_save_packed)
        self.register_load_state_dict_pre_hook(_load_packed)

    def _get_name(self):
        return self._NAME

    def _weight_shape(self):
        return (self.out_channels, self.in_channels // self.groups, *self.kernel_size)

    def extra_repr(self):
        s = (f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, stride={self.stride}, "
             f"scale={self.scale}, zero_point={self.zero_point}")
        if self.padding != (0,) * self._N:
            s += f", padding={self.padding}"
        if self.dilation != (1,) * self._N:
            s += f", dilation={self.dilation}"
        if self.groups != 1:
            s += f", groups={self.groups}"
        if self._bias is None:
            s += ", bias=False"
        return s

    def weight(self):
        return self._weight

    def bias(self):
        return self._bias

    def set_weight_bias(self, w, b):
        if not isinstance(w, QuantizedTensor) or w.dtype != lucid.qint8:
            raise TypeError(f"set_weight_bias: {self._NAME} takes a qint8 quantized weight, got {w.dtype}")
        want = self._weight_shape()
        if tuple(w.shape) != want:
            raise ValueError(f"set_weight_bias: expected a weight of shape {want}, got {tuple(w.shape)}")
        self._weight, self._bias = w, (None if b is None else b.detach().float())

    # PyTorch's quantized conv saves its weight (quantized), bias, scale and zero point; the
    # state-dict hooks are the dynamic modules' (_save_packed/_load_packed)
    def _packed_state(self):
        return {"weight": self._weight, "bias": self._bias, "scale": lucid.tensor(self.scale),
                "zero_point": lucid.tensor(self.zero_point)}

    def _unpack_state(self, found):
        if "weight" in found:
            self.set_weight_bias(found["weight"], found.get("bias"))
        if "scale" in found:
            self.scale = float(found["scale"])
        if "zero_point" in found:
            self.zero_point = int(found["zero_point"])

    def _conv(self, x, w):
        f = (None, nn.functional.conv1d, nn.functional.conv2d, nn.functional.conv3d)[self._N]
        return f(x, w, None, self.stride, self.padding, self.dilation, self.groups)

    def forward(self, input):
        name = self._NAME
        if not isinstance(input, QuantizedTensor):
            raise RuntimeError(f"{name}: expected a quantized input tensor (put a QuantStub before it), "
                               f"got a {input.dtype} tensor")
        if input.ndim != self._N + 2:
            raise ValueError(f"{name}: expected a {self._N + 2}-D input (N, C, *spatial), got {input.ndim}-D")
        if input.qscheme() not in PER_TENSOR or input.dtype != lucid.quint8:
            raise RuntimeError(f"{name}: expected a per-tensor quint8 input, got {input.dtype}, {input.qscheme()}")
        w = self._weight
        shape = (-1,) + (1,) * (self._N + 1)
        if w.qscheme() in PER_TENSOR:
            wi, ws = w._ints.double() - w.q_zero_point(), lucid.tensor(np.float32(w.q_scale()))
        else:
            wi, ws = w._ints.double() - w._zps.double().reshape(shape), w._scales.float()
        acc = self._conv(input._ints.double() - input.q_zero_point(), wi.to(input.device))
        act_w = (ws * float(np.float32(input.q_scale()))).to(input.device).reshape(-1, *(1,) * self._N)
        if self._bias is None:
            raw = acc.float()
        else:  # (a loaded state dict may leave the bias on the host)
            raw = acc.float() + self._bias.to(input.device).reshape(-1, *(1,) * self._N) / act_w
        out_scale = float(np.float32(self.scale))
        rounded = lucid.round(raw * (act_w / out_scale)).double() + self.zero_point
        ints = rounded.clamp(self.zero_point if self._relu else 0, 255).to(lucid.uint8)
        return make_quantized(ints, lucid.quint8, lucid.per_tensor_affine, out_scale, self.zero_point)

    @classmethod
    def from_float(cls, mod, use_precomputed_fake_quant=False):
        """The quantized form of an observed float conv (after ``prepare`` and calibration), of a
        fused conv + ReLU, or of a QAT conv (its weight fake-quantize gives the qparams)."""
        from lucid.ao.nn.quantized.dynamic.modules import _quantize_weight

        if not hasattr(mod, "activation_post_process"):
            raise AssertionError("Input float module must have activation_post_process attached (run prepare)")
        base = mod
        if hasattr(mod, "weight_fake_quant"):  # a QAT conv: its weight fake-quantize gives the qparams
            if hasattr(mod, "fold_into_weights"):  # ConvBn: fold the running statistics in, as PyTorch does
                mod.weight, mod.bias = mod.fold_into_weights()
            wobs = mod.weight_fake_quant
        else:
            base = mod[0] if isinstance(mod, nn.Sequential) else mod
            wobs = mod.qconfig.weight()
        wobs(base.weight)
        q = cls(base.in_channels, base.out_channels, base.kernel_size, base.stride, base.padding, base.dilation,
                base.groups, base.bias is not None, base.padding_mode)
        q.set_weight_bias(_quantize_weight(base.weight, wobs), base.bias)
        q.scale, q.zero_point = observed_qparams(mod.activation_post_process)
        return q


class Conv1d(_ConvNd):
    """A 1-D convolution on quantized tensors (NOTE [Static quantized conv]).

    Examples
    --------
    >>> import lucid
    >>> from lucid.ao.nn.quantized import Conv1d
    >>> c = Conv1d(1, 1, 1)
    >>> c.set_weight_bias(lucid.quantize_per_tensor(lucid.ones(1, 1, 1), 0.5, 0, lucid.qint8), None)
    >>> c.scale, c.zero_point = 0.5, 0
    >>> c(lucid.quantize_per_tensor(lucid.tensor([[[1.0, 2.0]]]), 0.5, 0, lucid.quint8)).int_repr()
    tensor([[[2, 4]]], dtype=lucid.uint8)
    """

    _N = 1
    _NAME = "QuantizedConv1d"


class Conv2d(_ConvNd):
    """A 2-D convolution on quantized tensors (NOTE [Static quantized conv])."""

    _N = 2
    _NAME = "QuantizedConv2d"


class Conv3d(_ConvNd):
    """A 3-D convolution on quantized tensors (NOTE [Static quantized conv])."""

    _N = 3
    _NAME = "QuantizedConv3d"


class ConvReLU1d(Conv1d):
    """``Conv1d`` then ReLU in one requantization."""

    _relu = True
    _NAME = "QuantizedConvReLU1d"


class ConvReLU2d(Conv2d):
    """``Conv2d`` then ReLU in one requantization."""

    _relu = True
    _NAME = "QuantizedConvReLU2d"


class ConvReLU3d(Conv3d):
    """``Conv3d`` then ReLU in one requantization."""

    _relu = True
    _NAME = "QuantizedConvReLU3d"


class _ConvTransposeNd(_ConvNd):
    """The transposed convolutions: PyTorch's argument order (``output_padding`` before
    ``groups``, ``dilation`` after ``bias``), a weight of shape ``(in, out // groups, *kernel)``
    quantized per tensor (PyTorch refuses a per-channel one)."""

    _NAME = "QuantizedConvTranspose2d"

    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0, output_padding=0, groups=1,
                 bias=True, dilation=1, padding_mode="zeros", device=None, dtype=None):
        if padding_mode != "zeros":
            raise ValueError(f'Only "zeros" padding mode is supported for {self._FLOAT_NAME}')
        if in_channels % groups:
            raise ValueError("in_channels must be divisible by groups")
        if out_channels % groups:
            raise ValueError("out_channels must be divisible by groups")
        self.output_padding = _ntuple(output_padding, self._N)
        super().__init__(in_channels, out_channels, kernel_size, stride, padding, dilation, groups, bias)

    @property
    def _FLOAT_NAME(self):
        return f"ConvTranspose{self._N}d"

    def extra_repr(self):
        s = super().extra_repr()
        if self.output_padding != (0,) * self._N:
            head, sep, tail = s.partition(", groups=") if ", groups=" in s else s.partition(", bias=")
            s = f"{head}, output_padding={self.output_padding}{sep}{tail}"
        return s

    def set_weight_bias(self, w, b):
        if not isinstance(w, QuantizedTensor) or w.dtype != lucid.qint8:
            raise TypeError(f"set_weight_bias: {self._NAME} takes a qint8 quantized weight, got {w.dtype}")
        if w.qscheme() not in PER_TENSOR:
            raise RuntimeError(f"set_weight_bias: {self._NAME}: Per Channel Quantization is currently disabled "
                               "for transposed conv")
        super().set_weight_bias(w, b)

    def _weight_shape(self):
        return (self.in_channels, self.out_channels // self.groups, *self.kernel_size)

    def _conv(self, x, w):
        f = (None, nn.functional.conv_transpose1d, nn.functional.conv_transpose2d,
             nn.functional.conv_transpose3d)[self._N]
        return f(x, w, None, self.stride, self.padding, self.output_padding, self.groups, self.dilation)

    @classmethod
    def from_float(cls, mod, use_precomputed_fake_quant=False):
        """The quantized form of a float ``ConvTranspose{1,2,3}d`` with a qconfig (observed by
        ``prepare`` for the output scale and zero point; without an observer, or with a float
        one, the output qparams stay 1.0 and 0, as PyTorch)."""
        from lucid.ao.nn.quantized.dynamic.modules import _quantize_weight

        float_cls = getattr(nn, f"ConvTranspose{cls._N}d")
        if type(mod) is not float_cls:
            raise AssertionError(f" nnq.{cls.__name__}.from_float only works for {float_cls.__name__}")
        if not hasattr(mod, "qconfig"):
            raise AssertionError("Input float module must have qconfig defined.")
        wobs = mod.qconfig.weight()
        wobs(mod.weight)
        if wobs.dtype != lucid.qint8:
            raise AssertionError(f"Weight observer must have a dtype of qint8, got {wobs.dtype}")
        q = cls(mod.in_channels, mod.out_channels, mod.kernel_size, mod.stride, mod.padding, mod.output_padding,
                mod.groups, mod.bias is not None, mod.dilation, mod.padding_mode)
        q.set_weight_bias(_quantize_weight(mod.weight.float(), wobs), mod.bias)
        post = getattr(mod, "activation_post_process", None)
        if post is not None and post.dtype != lucid.float32:
            q.scale, q.zero_point = observed_qparams(post)
        return q


class ConvTranspose1d(_ConvTransposeNd):
    """A 1-D transposed convolution on quantized tensors (NOTE [Static quantized conv]).

    Examples
    --------
    >>> import lucid
    >>> from lucid.ao.nn.quantized import ConvTranspose1d
    >>> c = ConvTranspose1d(1, 1, 2, bias=False)
    >>> c.set_weight_bias(lucid.quantize_per_tensor(lucid.ones(1, 1, 2), 0.5, 0, lucid.qint8), None)
    >>> c.scale, c.zero_point = 0.5, 0
    >>> c(lucid.quantize_per_tensor(lucid.tensor([[[1.0, 2.0]]]), 0.5, 0, lucid.quint8)).int_repr()
    tensor([[[2, 6, 4]]], dtype=lucid.uint8)
    """

    _N = 1
    _NAME = "QuantizedConvTranspose1d"


class ConvTranspose2d(_ConvTransposeNd):
    """A 2-D transposed convolution on quantized tensors (NOTE [Static quantized conv])."""

    _N = 2
    _NAME = "QuantizedConvTranspose2d"


class ConvTranspose3d(_ConvTransposeNd):
    """A 3-D transposed convolution on quantized tensors (NOTE [Static quantized conv])."""

    _N = 3
    _NAME = "QuantizedConvTranspose3d"
