"""The quantized multi-head attention (PyTorch's ``torch.ao.nn.quantized.MultiheadAttention``):
a converted :class:`lucid.ao.nn.quantizable.MultiheadAttention`."""
from __future__ import annotations

import lucid
from lucid._core.quantized import quantize_per_tensor
from lucid.ao.nn.quantizable import MultiheadAttention as _QuantizableMHA

from ._dynamic_ops import input_qparams

__all__ = ["MultiheadAttention"]


class MultiheadAttention(_QuantizableMHA):
    """A quantized multi-head attention, made by ``convert`` from an observed quantizable one
    (quantized projections; the softmax runs in float between quantize/dequantize steps).

    Examples
    --------
    >>> import lucid, lucid.nn as nn
    >>> from lucid.ao import quantization as tq
    >>> m = tq.QuantWrapper(nn.MultiheadAttention(4, 2)).eval()
    >>> m.qconfig = tq.default_qconfig
    >>> p = tq.prepare(m)
    >>> type(tq.convert(p).module).__name__
    'MultiheadAttention'
    """

    _FLOAT_MODULE = _QuantizableMHA

    def _get_name(self):
        return "QuantizedMultiheadAttention"

    @classmethod
    def from_float(cls, other):
        raise NotImplementedError("It looks like you are trying to convert a non-observed MHA module. Please, see "
                                  "the examples on quantizable MHAs.")

    @classmethod
    def from_observed(cls, other):
        from lucid.ao.quantization import convert

        converted = convert(other, mapping=None, inplace=False, remove_qconfig=True, convert_custom_config_dict=None)
        converted.__class__ = cls
        # PyTorch picks both biases' quint8 parameters from bias_k's range (dynamic quantization's rule)
        if converted.bias_k is not None:
            bias_k = converted._parameters.pop("bias_k").detach()
            scale, zp = input_qparams(bias_k, reduce_range=False)
            object.__setattr__(converted, "bias_k", quantize_per_tensor(bias_k, scale, zp, lucid.quint8))
            if converted.bias_v is not None:
                bias_v = converted._parameters.pop("bias_v").detach()
                object.__setattr__(converted, "bias_v", quantize_per_tensor(bias_v, scale, zp, lucid.quint8))
        for name in ("in_proj_weight", "in_proj_bias"):
            converted._parameters.pop(name, None)
        return converted
