"""The quantized LSTM (PyTorch's ``torch.ao.nn.quantized.LSTM``): a converted
:class:`lucid.ao.nn.quantizable.LSTM` (quantized gate projections and ``QFunctional``
arithmetic, sigmoid/tanh on quantized tensors)."""
from __future__ import annotations

from lucid.ao.nn.quantizable import LSTM as _QuantizableLSTM

__all__ = ["LSTM"]


class LSTM(_QuantizableLSTM):
    """A quantized LSTM, made by ``convert`` from an observed quantizable LSTM (the whole
    flow is float -> observed -> quantized; this class does the last step only).

    Examples
    --------
    >>> import lucid, lucid.nn as nn
    >>> from lucid.ao import quantization as tq
    >>> m = nn.Sequential(tq.QuantStub(), nn.LSTM(4, 3)).eval()
    >>> m.qconfig = tq.default_qconfig
    >>> p = tq.prepare(m)
    >>> _ = p(lucid.randn(5, 2, 4))
    >>> type(tq.convert(p)[1]).__name__
    'LSTM'
    """

    _FLOAT_MODULE = _QuantizableLSTM

    def _get_name(self):
        return "QuantizedLSTM"

    @classmethod
    def from_float(cls, *args, **kwargs):
        raise NotImplementedError("It looks like you are trying to convert a non-observed LSTM module. Please, see "
                                  "the examples on quantizable LSTMs.")

    @classmethod
    def from_observed(cls, other):
        from lucid.ao.quantization import convert

        if not isinstance(other, cls._FLOAT_MODULE):
            raise AssertionError(f"Expected module type {cls._FLOAT_MODULE}, got {type(other)}")
        converted = convert(other, inplace=False, remove_qconfig=True)
        converted.__class__ = cls
        return converted
