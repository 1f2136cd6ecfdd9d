"""Quantized normalization layers (PyTorch's ``torch.ao.nn.quantized`` LayerNorm, GroupNorm and
InstanceNorm1d/2d/3d): a quantized tensor in, one quantized with the module's ``scale`` and
``zero_point`` out.

NOTE [Quantized normalization]
PyTorch's ``quantized_normalize_kernel`` (one kernel for the three layers), reproduced in its
float32 steps: the input is seen as ``M`` groups of ``N`` stored integers ``q``. The exact
integer sums ``S = sum q`` and ``S2 = sum q^2`` give ``m = f32(S) / N`` (the mean of the stored
integers), ``mean = m - x_zp`` and ``var = max(f32(S2) / N - m * m, 0)`` (one fused
multiply-add: x86 builds contract it), and the multiplier
``k = x_scale / sqrt(var * x_scale * x_scale + eps)`` (the square root and the division in
float64, rounded to float32). Each output is ``rint(y * f32(1 / out_scale)) + out_zp`` where
``y = ((q - x_zp) - mean) * k * gamma + beta`` per element for LayerNorm and
``y = ((q - x_zp) - mean) * f32(k * gamma_c) + beta_c`` per channel for GroupNorm and
InstanceNorm, every product and sum rounded to float32.
"""
from __future__ import annotations

import math

import numpy as np

import lucid
from lucid import nn
from lucid._core.quantized import PER_TENSOR, RANGE, QuantizedTensor, make_quantized

from .._nn_utils import observed_qparams

__all__ = ["LayerNorm", "GroupNorm", "InstanceNorm1d", "InstanceNorm2d", "InstanceNorm3d", "normalize"]


def _f32(v):
    return float(np.float32(v))


def normalize(input, view, stat_dims, weight, bias, eps, scale, zero_point, per_channel):
    """See NOTE [Quantized normalization]: ``input``'s integers seen as ``view``, normalized over
    its last ``stat_dims`` dims; ``weight`` / ``bias`` (float, shaped to broadcast against
    ``view``, or None) apply per element, or per channel (``per_channel``: folded into the
    multiplier first, as PyTorch's kernel does)."""
    L = lucid
    x, dev = input, input.device
    q = x._ints.reshape(*view).double()
    dims = tuple(range(len(view) - stat_dims, len(view)))
    n = _f32(math.prod(q.shape[len(view) - stat_dims:]))
    m = q.sum(dims, keepdim=True).float() / n
    mean = m - _f32(x.q_zero_point())
    # x86 builds contract this to one fused multiply-add: emulated in float64, where m * m is exact
    mean_sq = (L.square(q).sum(dims, keepdim=True).float() / n).double()
    var = L.maximum((mean_sq - L.square(m.double())).float(), L.zeros((), dtype=L.float32, device=dev))
    xs = _f32(x.q_scale())
    k = (xs / L.sqrt(((var * xs) * xs).double() + float(eps))).float()
    centered = (q - x.q_zero_point()).float() - mean
    gamma, beta = (None if t is None else t.detach().float().to(dev) for t in (weight, bias))
    if per_channel:
        y = centered * (k if gamma is None else k * gamma)
    else:
        y = centered * k if gamma is None else (centered * k) * gamma
    if beta is not None:
        y = y + beta
    lo, hi = RANGE[x.dtype]
    inv = _f32(np.float32(1.0) / np.float32(scale))
    ints = (L.round(y * inv) + float(int(zero_point))).clamp(lo, hi).to(x._ints.dtype)
    return make_quantized(ints.reshape(tuple(x.shape)), x.dtype, lucid.per_tensor_affine, float(scale),
                          int(zero_point))


def _need_q(x, name):
    """PyTorch's types: no QuantizedCPU kernel for a float input, a failed check for a per-channel one."""
    if not isinstance(x, QuantizedTensor):
        raise NotImplementedError(f"{name}: expected a quantized input tensor (no kernel for a {x.dtype} tensor)")
    if x.qscheme() not in PER_TENSOR:
        raise RuntimeError(f"{name}: expected a per-tensor quantized input, got {x.qscheme()}")
    return x


def _as_parameter(t):
    return t if t is None or isinstance(t, nn.Parameter) else nn.Parameter(t.detach())


class _Requantized:
    """The output ``scale`` / ``zero_point`` as 0-d buffers (float32 / int64, as PyTorch keeps them)."""

    def _set_qparams(self, scale, zero_point):
        self.register_buffer("scale", lucid.tensor(float(scale), dtype=lucid.float32))
        self.register_buffer("zero_point", lucid.tensor(int(zero_point), dtype=lucid.int64))

    def _out_qparams(self):
        return float(self.scale), int(self.zero_point)


class LayerNorm(_Requantized, nn.LayerNorm):
    """Layer norm of a quantized tensor, quantized with ``scale`` / ``zero_point`` (NOTE
    [Quantized normalization]; PyTorch's ``QuantizedLayerNorm``).

    Examples
    --------
    >>> import lucid
    >>> from lucid.ao.nn.quantized import LayerNorm
    >>> q = lucid.quantize_per_tensor(lucid.tensor([[0.0, 1.0, 2.0, 3.0]]), 0.1, 0, lucid.quint8)
    >>> LayerNorm([4], None, None, 0.05, 128, elementwise_affine=False)(q).int_repr()
    tensor([[101, 119, 137, 155]], dtype=lucid.uint8)
    """

    def __init__(self, normalized_shape, weight, bias, scale, zero_point, eps=1e-5, elementwise_affine=True,
                 device=None, dtype=None):
        super().__init__(normalized_shape, eps=eps, elementwise_affine=elementwise_affine)
        self.weight, self.bias = _as_parameter(weight), _as_parameter(bias)
        self._set_qparams(scale, zero_point)

    def _get_name(self):
        return "QuantizedLayerNorm"

    def forward(self, input):
        x = _need_q(input, "QuantizedLayerNorm")
        k = len(self.normalized_shape)
        if tuple(x.shape[x.ndim - k:]) != self.normalized_shape or x.ndim < k:
            raise RuntimeError(f"QuantizedLayerNorm: given normalized_shape={list(self.normalized_shape)}, expected "
                               f"input with shape [*, {', '.join(map(str, self.normalized_shape))}], but got input "
                               f"of size {list(x.shape)}")
        n = math.prod(self.normalized_shape)
        affine = [None if t is None else t.reshape(1, n) for t in (self.weight, self.bias)]
        return normalize(x, (-1, n), 1, *affine, self.eps, *self._out_qparams(), per_channel=False)

    @classmethod
    def from_float(cls, mod, use_precomputed_fake_quant=False):
        scale, zero_point = observed_qparams(mod.activation_post_process)
        return cls(mod.normalized_shape, mod.weight, mod.bias, scale, zero_point, mod.eps, mod.elementwise_affine)

    @classmethod
    def from_reference(cls, mod, scale, zero_point):
        return cls(mod.normalized_shape, mod.weight, mod.bias, float(scale), int(zero_point), mod.eps,
                   mod.elementwise_affine)


def _group_norm(name, x, groups, channels, weight, bias, eps, qparams):
    x = _need_q(x, name)
    if x.ndim < 3:
        raise RuntimeError(f"{name}: expected an input of at least 3 dims (N, C, *), got {x.ndim}-D")
    C = x.shape[1]
    if C % groups:
        raise RuntimeError(f"{name}: expected channels ({C}) to be divisible by groups ({groups})")
    for t in (weight, bias):
        if t is not None and t.numel() != C:
            raise RuntimeError(f"{name}: expected a weight and bias of {C} elements, got {t.numel()}")
    cpg = C // groups
    affine = [None if t is None else t.reshape(1, groups, cpg, 1) for t in (weight, bias)]
    return normalize(x, (x.shape[0], groups, cpg, -1), 2, *affine, eps, *qparams, per_channel=True)


class GroupNorm(_Requantized, nn.GroupNorm):
    """Group norm of a quantized (N, C, *) tensor, quantized with ``scale`` / ``zero_point``
    (NOTE [Quantized normalization]; PyTorch's ``QuantizedGroupNorm``).

    Examples
    --------
    >>> import lucid
    >>> from lucid.ao.nn.quantized import GroupNorm
    >>> q = lucid.quantize_per_tensor(lucid.tensor([[[0.0, 1.0], [2.0, 3.0]]]), 0.1, 0, lucid.quint8)
    >>> GroupNorm(1, 2, None, None, 0.05, 128, affine=False)(q).int_repr()
    tensor([[[101, 119],
             [137, 155]]], dtype=lucid.uint8)
    """

    def __init__(self, num_groups, num_channels, weight, bias, scale, zero_point, eps=1e-5, affine=True, device=None,
                 dtype=None):
        super().__init__(num_groups, num_channels, eps, affine)
        self.weight, self.bias = _as_parameter(weight), _as_parameter(bias)
        self._set_qparams(scale, zero_point)

    def _get_name(self):
        return "QuantizedGroupNorm"

    def forward(self, input):
        return _group_norm("QuantizedGroupNorm", input, self.num_groups, self.num_channels, self.weight, self.bias,
                           self.eps, self._out_qparams())

    @classmethod
    def from_float(cls, mod, use_precomputed_fake_quant=False):
        scale, zero_point = observed_qparams(mod.activation_post_process)
        return cls(mod.num_groups, mod.num_channels, mod.weight, mod.bias, scale, zero_point, mod.eps, mod.affine)


class _QInstanceNorm(_Requantized):
    """Instance norm: group norm with one group per channel, as PyTorch's ``quantized::instance_norm``
    (which, like it, takes any (N, C, *) input whatever ``num_features`` says)."""

    def __init__(self, num_features, weight, bias, scale, zero_point, eps=1e-5, momentum=0.1, affine=False,
                 track_running_stats=False, device=None, dtype=None):
        super().__init__(num_features, eps, momentum, affine, track_running_stats)
        self.weight, self.bias = _as_parameter(weight), _as_parameter(bias)
        self._set_qparams(scale, zero_point)

    def _get_name(self):
        return f"Quantized{self._FLOAT.__name__}"

    def forward(self, input):
        name = self._get_name()
        C = _need_q(input, name).shape[1] if input.ndim >= 3 else 1
        return _group_norm(name, input, C, C, self.weight, self.bias, self.eps, self._out_qparams())

    @classmethod
    def from_float(cls, mod, use_precomputed_fake_quant=False):
        scale, zero_point = observed_qparams(mod.activation_post_process)
        return cls(mod.num_features, mod.weight, mod.bias, scale, zero_point, mod.eps, mod.affine)

    @classmethod
    def from_reference(cls, mod, scale, zero_point):
        return cls(mod.num_features, mod.weight, mod.bias, float(scale), int(zero_point), mod.eps, mod.affine)


class InstanceNorm1d(_QInstanceNorm, nn.InstanceNorm1d):
    """Instance norm of a quantized (N, C, L) tensor (PyTorch's ``QuantizedInstanceNorm1d``)."""

    _FLOAT = nn.InstanceNorm1d


class InstanceNorm2d(_QInstanceNorm, nn.InstanceNorm2d):
    """Instance norm of a quantized (N, C, H, W) tensor (PyTorch's ``QuantizedInstanceNorm2d``)."""

    _FLOAT = nn.InstanceNorm2d


class InstanceNorm3d(_QInstanceNorm, nn.InstanceNorm3d):
    """Instance norm of a quantized (N, C, D, H, W) tensor (PyTorch's ``QuantizedInstanceNorm3d``)."""

    _FLOAT = nn.InstanceNorm3d
