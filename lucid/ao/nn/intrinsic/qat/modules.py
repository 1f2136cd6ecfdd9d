"""Quantization-aware-training convolutions (PyTorch's ``torch.ao.nn.qat.Conv1d/2d/3d`` and
``torch.ao.nn.intrinsic.qat`` ConvReLU / ConvBn / ConvBnReLU): float layers whose weight goes
through the qconfig's weight fake-quantize on every forward.

NOTE [QAT conv + batch norm]
PyTorch's ``_forward_approximate``: the batch norm's running statistics scale the weight
before fake quantization (``w * gamma / sqrt(running_var + eps)``), the conv runs without
bias, its output is divided back by that factor, the conv bias is added and the real batch
norm follows (batch statistics in training, updating the running ones). So the quantized
weight is the folded one ``convert`` will produce, while batch norm still trains.
``freeze_bn_stats`` puts the batch norm in eval mode (running statistics only).
"""
from __future__ import annotations

import lucid
from lucid import nn
from lucid.nn import functional as F

import importlib

_fm = importlib.import_module("lucid.ao.quantization.fuse_modules")  # the package exports a function by that name

__all__ = ["Conv1d", "Conv2d", "Conv3d", "ConvReLU1d", "ConvReLU2d", "ConvReLU3d", "ConvBn1d", "ConvBn2d",
           "ConvBn3d", "ConvBnReLU1d", "ConvBnReLU2d", "ConvBnReLU3d", "LinearBn1d", "update_bn_stats",
           "freeze_bn_stats"]

_CONV_FN = {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}
_BN = {1: nn.BatchNorm1d, 2: nn.BatchNorm2d, 3: nn.BatchNorm3d}
_CONV = {1: nn.Conv1d, 2: nn.Conv2d, 3: nn.Conv3d}


def _conv_with(mod, input, weight, bias):
    fn = _CONV_FN[mod._nsp]
    if mod.padding_mode != "zeros":
        input = F.pad(input, mod._reversed_padding_repeated_twice, mode=mod.padding_mode)
        return fn(input, weight, bias, mod.stride, 0, mod.dilation, mod.groups)
    return fn(input, weight, bias, mod.stride, mod.padding, mod.dilation, mod.groups)


def _conv_args(conv):
    return (conv.in_channels, conv.out_channels, conv.kernel_size, conv.stride, conv.padding, conv.dilation,
            conv.groups, conv.bias is not None, conv.padding_mode)


class _QATConv:
    """What the QAT convs share: the qconfig and the weight fake-quantize."""

    _FLOAT_MODULE = None
    _relu = False

    def _setup(self, qconfig):
        if not qconfig:
            raise AssertionError("qconfig must be provided for QAT module")
        self.qconfig = qconfig
        self.weight_fake_quant = qconfig.weight()

    def forward(self, input):
        out = _conv_with(self, input, self.weight_fake_quant(self.weight), self.bias)
        return F.relu(out) if self._relu else out

    @classmethod
    def from_float(cls, mod, use_precomputed_fake_quant=False):
        """The QAT form of a float conv (or fused conv + ReLU) that has a ``qconfig``."""
        if type(mod) is not cls._FLOAT_MODULE:
            raise AssertionError(f"qat.{cls.__name__}.from_float only works for {cls._FLOAT_MODULE.__name__}")
        if not getattr(mod, "qconfig", None):
            raise AssertionError("Input float module must have a valid qconfig")
        qconfig = mod.qconfig
        conv = mod[0] if isinstance(mod, _fm._FusedModule) else mod
        q = cls(*_conv_args(conv), qconfig=qconfig)
        q.weight, q.bias = conv.weight, conv.bias
        return q

    def to_float(self):
        conv = _CONV[self._nsp](*_conv_args(self))
        conv.weight = nn.Parameter(self.weight.detach())
        if self.bias is not None:
            conv.bias = nn.Parameter(self.bias.detach())
        if self._relu:
            return getattr(_fm, f"ConvReLU{self._nsp}d")(conv, nn.ReLU())
        return conv


def _qat_conv(n, relu):
    base = _CONV[n]

    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0, dilation=1, groups=1,
                 bias=True, padding_mode="zeros", qconfig=None, device=None, dtype=None):
        base.__init__(self, in_channels, out_channels, kernel_size, stride=stride, padding=padding,
                      dilation=dilation, groups=groups, bias=bias, padding_mode=padding_mode, device=device,
                      dtype=dtype)
        self._setup(qconfig)

    name = f"ConvReLU{n}d" if relu else f"Conv{n}d"
    doc = (f"A {n}-D conv{' + ReLU' if relu else ''} whose weight is fake-quantized on every forward "
           "(quantization-aware training; made by ``prepare_qat``).")
    float_module = getattr(_fm, f"ConvReLU{n}d") if relu else base
    return type(name, (_QATConv, base), {"__init__": __init__, "__doc__": doc, "_relu": relu,
                                         "_FLOAT_MODULE": float_module, "__module__": __name__})


Conv1d, Conv2d, Conv3d = (_qat_conv(n, False) for n in (1, 2, 3))
ConvReLU1d, ConvReLU2d, ConvReLU3d = (_qat_conv(n, True) for n in (1, 2, 3))


class _ConvBn(_QATConv):
    """Conv + batch norm (+ ReLU) for QAT (NOTE [QAT conv + batch norm])."""

    def _setup_bn(self, out_channels, eps, momentum, freeze_bn, qconfig):
        self._setup(qconfig)
        self.freeze_bn = freeze_bn if self.training else True
        self.bn = _BN[self._nsp](out_channels, eps, momentum, True, True)
        if self.training and not freeze_bn:
            self.update_bn_stats()
        else:
            self.freeze_bn_stats()

    def reset_running_stats(self):
        self.bn.reset_running_stats()

    def update_bn_stats(self):
        self.freeze_bn = False
        self.bn.training = True
        return self

    def freeze_bn_stats(self):
        self.freeze_bn = True
        self.bn.training = False
        return self

    def train(self, mode=True):
        # a frozen batch norm stays in eval mode when the model trains
        self.training = mode
        if not self.freeze_bn:
            for m in self.children():
                m.train(mode)
        return self

    def forward(self, input):
        bn = self.bn
        running_std = lucid.sqrt(bn.running_var + bn.eps)
        scale_factor = bn.weight / running_std
        w_shape = (-1,) + (1,) * (self.weight.ndim - 1)
        b_shape = (1, -1) + (1,) * (self.weight.ndim - 2)
        scaled_weight = self.weight_fake_quant(self.weight * scale_factor.reshape(w_shape))
        zero_bias = lucid.zeros(self.out_channels, dtype=input.dtype, device=input.device)
        conv = _conv_with(self, input, scaled_weight, zero_bias) / scale_factor.reshape(b_shape)
        if self.bias is not None:
            conv = conv + self.bias.reshape(b_shape)
        out = bn(conv)
        return F.relu(out) if self._relu else out

    @classmethod
    def from_float(cls, mod, use_precomputed_fake_quant=False):
        """The QAT form of a fused ``ConvBn`` / ``ConvBnReLU`` (from ``fuse_modules_qat``)."""
        if type(mod) is not cls._FLOAT_MODULE:
            raise AssertionError(f"qat.{cls.__name__}.from_float only works for {cls._FLOAT_MODULE.__name__}")
        if not getattr(mod, "qconfig", None):
            raise AssertionError("Input float module must have a valid qconfig")
        conv, bn = mod[0], mod[1]
        q = cls(*_conv_args(conv), eps=bn.eps, momentum=bn.momentum, freeze_bn=False, qconfig=mod.qconfig)
        q.weight, q.bias = conv.weight, conv.bias
        q.bn.weight, q.bn.bias = bn.weight, bn.bias
        q.bn.running_mean, q.bn.running_var = bn.running_mean, bn.running_var
        q.bn.num_batches_tracked = bn.num_batches_tracked
        return q

    def fold_into_weights(self):
        """``(weight, bias)`` with the batch norm's running statistics folded in (what
        ``convert`` quantizes)."""
        bn = self.bn
        return nn.utils.fuse_conv_bn_weights(self.weight, self.bias, bn.running_mean, bn.running_var, bn.eps,
                                             bn.weight, bn.bias)

    def to_float(self):
        conv = _CONV[self._nsp](*_conv_args(self))
        conv.weight, conv.bias = self.fold_into_weights()
        if self._relu:
            return getattr(_fm, f"ConvReLU{self._nsp}d")(conv, nn.ReLU())
        return conv


def _conv_bn(n, relu):
    base = _CONV[n]

    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0, dilation=1, groups=1,
                 bias=None, padding_mode="zeros", eps=1e-05, momentum=0.1, freeze_bn=False, qconfig=None):
        base.__init__(self, in_channels, out_channels, kernel_size, stride=stride, padding=padding,
                      dilation=dilation, groups=groups, bias=bool(bias), padding_mode=padding_mode)
        self._setup_bn(out_channels, eps, momentum, freeze_bn, qconfig)

    name = f"ConvBnReLU{n}d" if relu else f"ConvBn{n}d"
    doc = (f"A {n}-D conv + batch norm{' + ReLU' if relu else ''} for quantization-aware training "
           "(NOTE [QAT conv + batch norm]; made by ``prepare_qat`` from ``fuse_modules_qat``'s output).")
    return type(name, (_ConvBn, base), {"__init__": __init__, "__doc__": doc, "_relu": relu,
                                        "_FLOAT_MODULE": getattr(_fm, name), "__module__": __name__})


ConvBn1d, ConvBn2d, ConvBn3d = (_conv_bn(n, False) for n in (1, 2, 3))
ConvBnReLU1d, ConvBnReLU2d, ConvBnReLU3d = (_conv_bn(n, True) for n in (1, 2, 3))


class LinearBn1d(nn.Linear):
    """Linear + BatchNorm1d for quantization-aware training (PyTorch's ``nniqat.LinearBn1d``):
    the batch norm's running statistics scale the weight before fake quantization, as NOTE
    [QAT conv + batch norm] describes for convs; ``convert`` quantizes the folded weight.

    Examples
    --------
    >>> import lucid, lucid.nn as nn
    >>> from lucid.ao.quantization import fuse_modules_qat, get_default_qat_qconfig
    >>> from lucid.ao.nn.intrinsic.qat import LinearBn1d
    >>> fused = fuse_modules_qat(nn.Sequential(nn.Linear(3, 2), nn.BatchNorm1d(2)), ["0", "1"])
    >>> fused[0].qconfig = get_default_qat_qconfig("x86")
    >>> m = LinearBn1d.from_float(fused[0])
    >>> m(lucid.randn(4, 3)).shape
    (4, 2)
    """

    _FLOAT_MODULE = _fm.LinearBn1d

    def __init__(self, in_features, out_features, bias=True, eps=1e-05, momentum=0.1, freeze_bn=False,
                 qconfig=None):
        nn.Linear.__init__(self, in_features, out_features, bias)
        if not qconfig:
            raise AssertionError("qconfig must be provided for QAT module")
        self.qconfig = qconfig
        self.freeze_bn = freeze_bn if self.training else True
        self.bn = nn.BatchNorm1d(out_features, eps, momentum, True, True)
        self.weight_fake_quant = qconfig.weight()
        self.reset_bn_parameters()
        if self.training and not freeze_bn:
            self.update_bn_stats()
        else:
            self.freeze_bn_stats()

    def reset_running_stats(self):
        self.bn.reset_running_stats()

    def reset_bn_parameters(self):
        self.bn.reset_running_stats()
        nn.init.uniform_(self.bn.weight)
        nn.init.zeros_(self.bn.bias)

    update_bn_stats = _ConvBn.update_bn_stats
    freeze_bn_stats = _ConvBn.freeze_bn_stats
    train = _ConvBn.train

    def forward(self, input):
        bn = self.bn
        scale_factor = bn.weight / lucid.sqrt(bn.running_var + bn.eps)
        scaled_weight = self.weight_fake_quant(self.weight * scale_factor.reshape(-1, 1))
        zero_bias = lucid.zeros(self.out_features, dtype=scaled_weight.dtype, device=scaled_weight.device)
        out = F.linear(input, scaled_weight, zero_bias) / scale_factor.reshape(1, -1)
        if self.bias is not None:
            out = out + self.bias.reshape(1, -1)
        return bn(out)

    @classmethod
    def from_float(cls, mod, use_precomputed_fake_quant=False):
        """The QAT form of a fused ``LinearBn1d`` (from ``fuse_modules_qat``)."""
        if type(mod) is not cls._FLOAT_MODULE:
            raise AssertionError("qat.LinearBn1d.from_float only works for LinearBn1d")
        if not getattr(mod, "qconfig", None):
            raise AssertionError("Input float module must have a valid qconfig")
        linear, bn = mod[0], mod[1]
        q = cls(linear.in_features, linear.out_features, linear.bias is not None, bn.eps, bn.momentum, False,
                mod.qconfig)
        q.weight, q.bias = linear.weight, linear.bias
        q.bn.weight, q.bn.bias = bn.weight, bn.bias
        q.bn.running_mean, q.bn.running_var = bn.running_mean, bn.running_var
        q.bn.num_batches_tracked = bn.num_batches_tracked
        return q

    def fold_into_weights(self):
        """``(weight, bias)`` with the batch norm's running statistics folded in."""
        bn = self.bn
        return nn.utils.fuse_linear_bn_weights(self.weight, self.bias, bn.running_mean, bn.running_var, bn.eps,
                                               bn.weight, bn.bias)

    def to_float(self):
        linear = nn.Linear(self.in_features, self.out_features)
        linear.weight, linear.bias = self.fold_into_weights()
        return linear


def update_bn_stats(mod):
    """For ``model.apply``: let the QAT batch norms update their running statistics."""
    if isinstance(mod, _ConvBn):
        mod.update_bn_stats()


def freeze_bn_stats(mod):
    """For ``model.apply``: freeze the QAT batch norms (running statistics only)."""
    if isinstance(mod, _ConvBn):
        mod.freeze_bn_stats()
