"""Observers (PyTorch's ``torch.ao.quantization.observer``): modules that watch the values
flowing through them and compute the scale and zero point that would quantize them.

``calculate_qparams`` follows PyTorch's formulas step for step in float32 Lucid ops, so the
parameters agree with PyTorch's bit for bit (tests/quantization/test_observers.py).

Examples
--------
>>> import lucid
>>> from lucid.ao.quantization import MinMaxObserver
>>> obs = MinMaxObserver()
>>> _ = obs(lucid.tensor([-1.0, 2.0, 3.0]))
>>> obs.calculate_qparams()
(tensor([0.01568628]), tensor([64], dtype=lucid.int32))
"""
from __future__ import annotations

import functools
import warnings

import numpy as np

import lucid
from lucid import nn
from lucid._core.quantized import per_channel_affine, per_channel_affine_float_qparams, per_tensor_affine, \
    per_tensor_symmetric, per_channel_symmetric

from .utils import calculate_qmin_qmax, check_min_max_valid, is_per_channel, is_per_tensor, validate_qmin_qmax

__all__ = ["ObserverBase", "UniformQuantizationObserverBase", "MinMaxObserver", "MovingAverageMinMaxObserver",
           "PerChannelMinMaxObserver", "MovingAveragePerChannelMinMaxObserver", "PlaceholderObserver",
           "FixedQParamsObserver", "default_fixed_qparams_range_0to1_observer",
           "default_fixed_qparams_range_neg1to1_observer",
           "NoopObserver", "default_observer", "default_weight_observer", "default_per_channel_weight_observer",
           "default_dynamic_quant_observer", "default_placeholder_observer", "default_float_qparams_observer",
           "weight_observer_range_neg_127_to_127", "per_channel_weight_observer_range_neg_127_to_127",
           "RecordingObserver", "ReuseInputObserver", "get_observer_state_dict", "load_observer_state_dict",
           "default_debug_observer", "default_reuse_input_observer", "default_symmetric_fixed_qparams_observer",
           "default_affine_fixed_qparams_observer"]

_EPS = float(np.finfo(np.float32).eps)


class _PartialWrapper:
    """A constructor with some arguments bound (``Observer.with_args(...)``); calling it makes a
    new observer each time."""

    def __init__(self, p):
        self.p = p
        self.callable_args = {}

    def __call__(self, *args, **keywords):
        for name, make in self.callable_args.items():
            keywords.setdefault(name, make())
        return self.p(*args, **keywords)

    def __repr__(self):
        return self.p.__repr__() + self.callable_args.__repr__()

    def with_args(self, **kwargs):
        return _with_args(self, **kwargs)

    def with_callable_args(self, **kwargs):
        out = _PartialWrapper(self.p)
        out.callable_args = {**self.callable_args, **kwargs}
        return out


def _with_args(cls_or_self, **kwargs):
    """A factory of ``cls_or_self`` with ``kwargs`` bound (PyTorch's ``with_args``).

    Examples
    --------
    >>> import lucid
    >>> from lucid.ao.quantization import MinMaxObserver
    >>> MinMaxObserver.with_args(dtype=lucid.qint8)().dtype
    lucid.qint8
    """
    return _PartialWrapper(functools.partial(cls_or_self, **kwargs))


def _with_callable_args(cls_or_self, **kwargs):
    return _PartialWrapper(functools.partial(cls_or_self)).with_callable_args(**kwargs)


class ObserverBase(nn.Module):
    """The base of observers: ``forward`` records, ``calculate_qparams`` answers."""

    def __init__(self, dtype, is_dynamic=False):
        super().__init__()
        self.dtype = dtype
        self.is_dynamic = is_dynamic

    def forward(self, x):
        raise NotImplementedError

    def calculate_qparams(self, **kwargs):
        raise NotImplementedError

    with_args = classmethod(_with_args)
    with_callable_args = classmethod(_with_callable_args)


_SCHEMES = (per_tensor_affine, per_tensor_symmetric, per_channel_affine, per_channel_symmetric,
            per_channel_affine_float_qparams)
_DTYPES = (lucid.qint8, lucid.quint8, lucid.qint32, lucid.int8, lucid.uint8, lucid.int16, lucid.int32, lucid.uint16)


class UniformQuantizationObserverBase(ObserverBase):
    """Observers whose parameters come from a min and a max: the shared ``_calculate_qparams``."""

    _version = 3

    def __init__(self, dtype=lucid.quint8, qscheme=per_tensor_affine, reduce_range=False, quant_min=None,
                 quant_max=None, factory_kwargs=None, eps=_EPS, is_dynamic=False, **kwargs):
        super().__init__(dtype=dtype, is_dynamic=is_dynamic, **kwargs)
        self.qscheme = qscheme
        if reduce_range:
            warnings.warn("Please use quant_min and quant_max to specify the range for observers. reduce_range "
                          "will be deprecated in a future release of PyTorch.", stacklevel=2)
        self.reduce_range = reduce_range
        self.register_buffer("eps", lucid.tensor([eps], dtype=lucid.float32))
        if qscheme not in _SCHEMES:
            raise AssertionError("Default Observer only works for per_tensor_affine, per_tensor_symmetric, "
                                 "per_channel_affine, per_channel_symmetric and per_channel_float_qparams "
                                 "quantization scheme")
        if dtype not in _DTYPES:
            raise AssertionError(f"Default Observer only works for {_DTYPES} data type")
        self.has_customized_qrange = quant_min is not None and quant_max is not None
        if self.has_customized_qrange:
            validate_qmin_qmax(quant_min, quant_max)
        self.quant_min, self.quant_max = calculate_qmin_qmax(quant_min, quant_max, self.has_customized_qrange,
                                                             dtype, reduce_range)

    def _calculate_qparams(self, min_val, max_val):
        """``(scale, zero_point)`` for the observed range, PyTorch's formulas in float32."""
        if not check_min_max_valid(min_val, max_val):
            return lucid.tensor([1.0], device=min_val.device), lucid.tensor([0], device=min_val.device)
        qmin, qmax = self.quant_min, self.quant_max
        min_neg = lucid.minimum(min_val, lucid.zeros_like(min_val))
        max_pos = lucid.maximum(max_val, lucid.zeros_like(max_val))
        zero_point = lucid.zeros(tuple(min_neg.shape), dtype=lucid.int64, device=min_neg.device)
        if self.qscheme in (per_tensor_symmetric, per_channel_symmetric):
            max_pos = lucid.maximum(-min_neg, max_pos)
            scale = lucid.maximum(max_pos / (float(qmax - qmin) / 2), self.eps.to(max_pos.device))
            if self.dtype in (lucid.quint8, lucid.uint8):
                zero_point = zero_point + ((qmin + qmax) // 2 if self.has_customized_qrange else 128)
            elif self.dtype == lucid.uint16:
                zero_point = zero_point + 2 ** 15
        elif self.qscheme == per_channel_affine_float_qparams:
            scale = (max_val - min_val) / float(qmax - qmin)
            scale = lucid.where(scale > self.eps.to(scale.device), scale, lucid.ones_like(scale))
            zero_point = -1 * min_val / scale
        else:
            scale = lucid.maximum((max_pos - min_neg) / float(qmax - qmin), self.eps.to(max_pos.device))
            zero_point = qmin - lucid.round(min_neg / scale).to(lucid.int32)
            zero_point = lucid.clamp(zero_point, qmin, qmax)
        if scale.ndim == 0:
            scale = scale.reshape(1)
        if zero_point.ndim == 0:
            zero_point = zero_point.reshape(1)
        return scale, zero_point

    def reset_min_max_vals(self):
        raise NotImplementedError("Cannot reset min/max values in the given observer.")


_ObserverBase = UniformQuantizationObserverBase


def _observed(x):
    return x.detach().to(lucid.float32)


class MinMaxObserver(UniformQuantizationObserverBase):
    """Track the running min and max of everything seen (PyTorch's ``MinMaxObserver``).

    Examples
    --------
    >>> import lucid
    >>> from lucid.ao.quantization import MinMaxObserver
    >>> obs = MinMaxObserver(dtype=lucid.qint8, qscheme=lucid.per_tensor_symmetric)
    >>> _ = obs(lucid.tensor([-2.0, 1.0]))
    >>> obs.min_val, obs.max_val
    (tensor(-2.), tensor(1.))
    """

    def __init__(self, dtype=lucid.quint8, qscheme=per_tensor_affine, reduce_range=False, quant_min=None,
                 quant_max=None, factory_kwargs=None, eps=_EPS, is_dynamic=False, **kwargs):
        if not is_per_tensor(qscheme):
            raise NotImplementedError("MinMaxObserver's qscheme only support torch.per_tensor_symmetric and "
                                      "torch.per_tensor_affine.")
        super().__init__(dtype=dtype, qscheme=qscheme, reduce_range=reduce_range, quant_min=quant_min,
                         quant_max=quant_max, factory_kwargs=factory_kwargs, eps=eps, is_dynamic=is_dynamic,
                         **kwargs)
        self.register_buffer("min_val", lucid.tensor(float("inf")))
        self.register_buffer("max_val", lucid.tensor(float("-inf")))
        if qscheme == per_tensor_symmetric and reduce_range and dtype == lucid.quint8:
            raise NotImplementedError("Cannot reduce range for symmetric quantization for quint8")

    def forward(self, x_orig):
        if x_orig.numel() == 0:
            return x_orig
        lo, hi = lucid.aminmax(_observed(x_orig))
        self._follow(lo.device)
        self.min_val = lucid.minimum(lo, self.min_val)
        self.max_val = lucid.maximum(hi, self.max_val)
        return x_orig

    def _follow(self, device):
        """Keep the statistics beside the observed values (a fresh observer is made on the
        default device, the values may live elsewhere)."""
        if self.min_val.device != device:
            self.min_val, self.max_val = self.min_val.to(device), self.max_val.to(device)

    def calculate_qparams(self):
        return self._calculate_qparams(self.min_val, self.max_val)

    def extra_repr(self):
        return f"min_val={self.min_val}, max_val={self.max_val}"

    def reset_min_max_vals(self):
        self.min_val = lucid.tensor(float("inf"), device=self.min_val.device)
        self.max_val = lucid.tensor(float("-inf"), device=self.max_val.device)


class MovingAverageMinMaxObserver(MinMaxObserver):
    """Track exponential moving averages of the min and max (weight ``averaging_constant``).

    Examples
    --------
    >>> import lucid
    >>> from lucid.ao.quantization import MovingAverageMinMaxObserver
    >>> obs = MovingAverageMinMaxObserver(averaging_constant=0.5)
    >>> _ = obs(lucid.tensor([0.0, 4.0])); _ = obs(lucid.tensor([0.0, 2.0]))
    >>> obs.max_val
    tensor(3.)
    """

    def __init__(self, averaging_constant=0.01, dtype=lucid.quint8, qscheme=per_tensor_affine, reduce_range=False,
                 quant_min=None, quant_max=None, eps=_EPS, is_dynamic=False, **kwargs):
        if not is_per_tensor(qscheme):
            raise NotImplementedError(f"MovingAverageMinMaxObserver's qscheme only support "
                                      f"torch.per_tensor_symmetric and torch.per_tensor_affine. but got: {qscheme}")
        self.averaging_constant = averaging_constant
        if is_dynamic and averaging_constant != 1:
            raise NotImplementedError("MovingAverageMinMaxObserver doesn't support dynamic quantization for "
                                      f"averaging constant of {averaging_constant}")
        super().__init__(dtype=dtype, qscheme=qscheme, reduce_range=reduce_range, quant_min=quant_min,
                         quant_max=quant_max, eps=eps, is_dynamic=is_dynamic, **kwargs)

    def forward(self, x_orig):
        if x_orig.numel() == 0:
            return x_orig
        lo, hi = lucid.aminmax(_observed(x_orig))
        self._follow(lo.device)
        if float(self.min_val) == float("inf") and float(self.max_val) == float("-inf"):
            self.min_val, self.max_val = lo, hi
        else:
            c = self.averaging_constant
            self.min_val = self.min_val + c * (lo - self.min_val)
            self.max_val = self.max_val + c * (hi - self.max_val)
        return x_orig


class PerChannelMinMaxObserver(UniformQuantizationObserverBase):
    """Track the min and max of each slice along ``ch_axis`` (weights, per output channel).

    Examples
    --------
    >>> import lucid
    >>> from lucid.ao.quantization import PerChannelMinMaxObserver
    >>> obs = PerChannelMinMaxObserver(ch_axis=0, dtype=lucid.qint8, qscheme=lucid.per_channel_symmetric)
    >>> _ = obs(lucid.tensor([[1.0, -2.0], [0.5, 0.25]]))
    >>> obs.calculate_qparams()[0]
    tensor([0.01568628, 0.00392157])
    """

    def __init__(self, ch_axis=0, dtype=lucid.quint8, qscheme=per_channel_affine, reduce_range=False,
                 quant_min=None, quant_max=None, factory_kwargs=None, eps=_EPS, is_dynamic=False, **kwargs):
        if not is_per_channel(qscheme):
            raise NotImplementedError("PerChannelMinMaxObserver's qscheme only support torch.per_channel_symmetric, "
                                      "torch.per_channel_affine and torch.per_channel_affine_float_qparams.")
        if is_dynamic:
            raise NotImplementedError("PerChannelMinMaxObserver doesn't support dynamic quantization")
        super().__init__(dtype=dtype, qscheme=qscheme, reduce_range=reduce_range, quant_min=quant_min,
                         quant_max=quant_max, factory_kwargs=factory_kwargs, eps=eps, is_dynamic=is_dynamic,
                         **kwargs)
        self.ch_axis = ch_axis
        self.register_buffer("min_val", lucid.tensor([]))
        self.register_buffer("max_val", lucid.tensor([]))
        if qscheme == per_channel_symmetric and reduce_range and dtype == lucid.quint8:
            raise NotImplementedError("Cannot reduce range for symmetric quantization for quint8")
        # PyTorch resizes the buffers to the checkpoint's shape before loading
        self.register_load_state_dict_pre_hook(_resize_buffers("min_val", "max_val"))

    def _channel_minmax(self, x_orig):
        y = _observed(x_orig).movedim(self.ch_axis, 0) if self.ch_axis else _observed(x_orig)
        return lucid.aminmax(y.reshape(y.shape[0], -1), dim=1)

    def forward(self, x_orig):
        if x_orig.numel() == 0:
            return x_orig
        lo, hi = self._channel_minmax(x_orig)
        if self.min_val.numel() == 0 or self.max_val.numel() == 0:
            self.min_val, self.max_val = lo, hi
        else:
            MinMaxObserver._follow(self, lo.device)
            self.min_val, self.max_val = self._update(lo, hi)
        return x_orig

    def _update(self, lo, hi):
        return lucid.minimum(lo, self.min_val), lucid.maximum(hi, self.max_val)

    def calculate_qparams(self):
        return self._calculate_qparams(self.min_val, self.max_val)

    def extra_repr(self):
        return f"min_val={self.min_val}, max_val={self.max_val}"

    def reset_min_max_vals(self):
        self.min_val = lucid.tensor([], device=self.min_val.device)
        self.max_val = lucid.tensor([], device=self.max_val.device)


def _resize_buffers(*names):
    """A load_state_dict pre-hook giving the buffers ``names`` the checkpoint's shapes (dtype and
    device kept), as PyTorch's observers and fake-quantize modules do before copying."""
    def hook(module, state_dict, prefix, local_metadata, strict, missing, unexpected, errors):
        for name in names:
            value, old = state_dict.get(prefix + name), getattr(module, name)
            if value is not None and tuple(value.shape) != tuple(old.shape):
                setattr(module, name, lucid.zeros(tuple(value.shape), dtype=old.dtype, device=old.device))
    return hook


class MovingAveragePerChannelMinMaxObserver(PerChannelMinMaxObserver):
    """Per-channel moving averages of the min and max."""

    def __init__(self, averaging_constant=0.01, ch_axis=0, dtype=lucid.quint8, qscheme=per_channel_affine,
                 reduce_range=False, quant_min=None, quant_max=None, eps=_EPS, is_dynamic=False, **kwargs):
        if not is_per_channel(qscheme):
            raise NotImplementedError("MovingAveragePerChannelMinMaxObserver's qscheme only support "
                                      "torch.per_channel_symmetric, torch.per_channel_affine and "
                                      "torch.per_channel_affine_float_qparams.")
        super().__init__(ch_axis=ch_axis, dtype=dtype, qscheme=qscheme, reduce_range=reduce_range,
                         quant_min=quant_min, quant_max=quant_max, eps=eps, is_dynamic=is_dynamic, **kwargs)
        self.averaging_constant = averaging_constant

    def _update(self, lo, hi):
        c = self.averaging_constant
        return self.min_val + c * (lo - self.min_val), self.max_val + c * (hi - self.max_val)


class PlaceholderObserver(ObserverBase):
    """Records nothing; carries the dtype (and for dynamic quantization ``is_dynamic``)."""

    def __init__(self, dtype=lucid.float32, custom_op_name="", compute_dtype=None, quant_min=None, quant_max=None,
                 qscheme=None, eps=None, is_dynamic=False):
        super().__init__(dtype=dtype, is_dynamic=is_dynamic)
        self.qscheme = per_tensor_affine if qscheme is None else qscheme
        self.quant_min, self.quant_max = quant_min, quant_max
        self.eps = _EPS if eps is None else eps
        self.custom_op = custom_op_name
        if compute_dtype:
            warnings.warn("Please use `is_dynamic` instead of `compute_dtype`.", stacklevel=2)

    def forward(self, x):
        return x

    def extra_repr(self):
        return f"dtype={self.dtype}, is_dynamic={self.is_dynamic}"

    def calculate_qparams(self):
        raise Exception("calculate_qparams should not be called for PlaceholderObserver")  # noqa: TRY002


class FixedQParamsObserver(ObserverBase):
    """Records nothing and answers a fixed ``(scale, zero_point)`` (PyTorch's): the observer of
    the ops whose quantized kernels have fixed output parameters (sigmoid, tanh, hardsigmoid).

    Examples
    --------
    >>> from lucid.ao.quantization.observer import default_fixed_qparams_range_0to1_observer
    >>> default_fixed_qparams_range_0to1_observer().calculate_qparams()
    (tensor([0.00390625]), tensor([0], dtype=lucid.int32))
    """

    def __init__(self, scale, zero_point, dtype=lucid.quint8, qscheme=per_tensor_affine, quant_min=0,
                 quant_max=255, is_dynamic=False, **kwargs):
        if is_dynamic:
            raise NotImplementedError("FixedQParamsObserver doesn't support dynamic quantization")
        super().__init__(dtype=dtype, is_dynamic=is_dynamic)
        self.quant_min, self.quant_max = quant_min, quant_max
        self.register_buffer("scale", lucid.tensor([float(scale)], dtype=lucid.float32))
        self.register_buffer("zero_point", lucid.tensor([int(zero_point)], dtype=lucid.int32))
        self.qscheme = qscheme

    def forward(self, X):
        return X

    def calculate_qparams(self):
        return self.scale, self.zero_point


class NoopObserver(ObserverBase):
    """Does nothing (float16 and custom ops)."""

    def __init__(self, dtype=lucid.float16, custom_op_name=""):
        super().__init__(dtype=dtype)
        self.dtype = dtype
        self.custom_op = custom_op_name

    def forward(self, x):
        return x

    def calculate_qparams(self):
        raise Exception("calculate_qparams should not be called for NoopObserver")  # noqa: TRY002


class RecordingObserver(ObserverBase):
    """Keeps a copy of every tensor it sees (``get_tensor_value``), for debugging; it has no
    quantization parameters.

    Examples
    --------
    >>> import lucid
    >>> from lucid.ao.quantization import RecordingObserver
    >>> obs = RecordingObserver()
    >>> _ = obs(lucid.tensor([1.0, 2.0]))
    >>> obs.get_tensor_value()
    [tensor([1., 2.])]
    """

    def __init__(self, dtype=lucid.quint8):
        super().__init__(dtype=dtype, is_dynamic=False)
        self.tensor_val = []

    def forward(self, x):
        self.tensor_val.append(x.clone())
        return x

    def calculate_qparams(self):
        raise Exception("calculate_qparams should not be called for RecordingObserver")  # noqa: TRY002

    def get_tensor_value(self):
        return self.tensor_val


class ReuseInputObserver(ObserverBase):
    """Marks an op whose output reuses its input's observer (FX graph mode): an identity with
    no quantization parameters of its own.

    Examples
    --------
    >>> import lucid
    >>> from lucid.ao.quantization import ReuseInputObserver
    >>> ReuseInputObserver()(lucid.tensor([1.5]))
    tensor([1.5])
    """

    def __init__(self):
        super().__init__(lucid.quint8, is_dynamic=False)

    def forward(self, x):
        return x

    def calculate_qparams(self):
        raise Exception("calculate_qparams should not be called for ReuseInputObserver")  # noqa: TRY002


def _is_observer_or_fake_quant(module):
    from .fake_quantize import FakeQuantizeBase

    return isinstance(module, (ObserverBase, FakeQuantizeBase))


def get_observer_state_dict(mod):
    """The entries of ``mod.state_dict()`` that belong to its observers / fake-quantize
    modules (those under an ``activation_post_process``), to save calibration statistics.

    Examples
    --------
    >>> import lucid, lucid.nn as nn
    >>> from lucid.ao import quantization as tq
    >>> m = tq.QuantWrapper(nn.Linear(2, 2)).eval()
    >>> m.qconfig = tq.default_qconfig
    >>> p = tq.prepare(m)
    >>> list(tq.get_observer_state_dict(p))[:3]
    ['quant.activation_post_process.eps', 'quant.activation_post_process.min_val', 'quant.activation_post_process.max_val']
    """
    from collections import OrderedDict

    full = mod.state_dict()
    od = OrderedDict((k, v) for k, v in full.items() if "activation_post_process" in k)
    od._metadata = getattr(full, "_metadata", None)
    return od


def load_observer_state_dict(mod, obs_dict):
    """Load statistics saved by :func:`get_observer_state_dict` into the observers of ``mod``
    (non-strict per module, as PyTorch loads them: an absent entry leaves that statistic as is).

    Examples
    --------
    >>> import lucid, lucid.nn as nn
    >>> from lucid.ao import quantization as tq
    >>> m = tq.QuantWrapper(nn.Linear(2, 2)).eval()
    >>> m.qconfig = tq.default_qconfig
    >>> p, q = tq.prepare(m), tq.prepare(m)
    >>> _ = p(lucid.tensor([[1.0, -3.0]]))
    >>> tq.load_observer_state_dict(q, tq.get_observer_state_dict(p))
    >>> float(q.quant.activation_post_process.min_val)
    -3.0
    """
    missing, unexpected = [], []
    for name, module in mod.named_modules():
        if _is_observer_or_fake_quant(module):
            module._load_from_state_dict(obs_dict, name + ".", {}, False, missing, unexpected, [])
    for k in missing:
        if "observer" in k or "activation_post_process" in k:
            raise Exception(f"Missing keys for observer {k} in state_dict")  # noqa: TRY002
    for k in unexpected:
        if "observer" in k or "activation_post_process" in k:
            raise Exception(f"Unexpected keys for observer {k} in state_dict")  # noqa: TRY002


default_observer = MinMaxObserver.with_args(quant_min=0, quant_max=127)
default_placeholder_observer = PlaceholderObserver
default_weight_observer = MinMaxObserver.with_args(dtype=lucid.qint8, qscheme=per_tensor_symmetric)
weight_observer_range_neg_127_to_127 = MinMaxObserver.with_args(
    dtype=lucid.qint8, qscheme=per_tensor_symmetric, quant_min=-127, quant_max=127, eps=2 ** -12)
default_per_channel_weight_observer = PerChannelMinMaxObserver.with_args(dtype=lucid.qint8,
                                                                         qscheme=per_channel_symmetric)
per_channel_weight_observer_range_neg_127_to_127 = PerChannelMinMaxObserver.with_args(
    dtype=lucid.qint8, qscheme=per_channel_symmetric, quant_min=-127, quant_max=127, eps=2 ** -12)
default_dynamic_quant_observer = PlaceholderObserver.with_args(dtype=lucid.quint8, quant_min=0, quant_max=255,
                                                               is_dynamic=True)
default_fixed_qparams_range_0to1_observer = FixedQParamsObserver.with_args(
    scale=1.0 / 256.0, zero_point=0, dtype=lucid.quint8, quant_min=0, quant_max=255)
default_fixed_qparams_range_neg1to1_observer = FixedQParamsObserver.with_args(
    scale=2.0 / 256.0, zero_point=128, dtype=lucid.quint8, quant_min=0, quant_max=255)
default_float_qparams_observer = PerChannelMinMaxObserver.with_args(
    dtype=lucid.quint8, qscheme=per_channel_affine_float_qparams, ch_axis=0)
default_debug_observer = RecordingObserver
default_reuse_input_observer = ReuseInputObserver
default_symmetric_fixed_qparams_observer = default_fixed_qparams_range_neg1to1_observer
default_affine_fixed_qparams_observer = default_fixed_qparams_range_0to1_observer
