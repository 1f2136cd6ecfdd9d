"""Fake-quantize modules (PyTorch's ``torch.ao.quantization.fake_quantize``): an observer plus
:func:`lucid.fake_quantize_per_tensor_affine` (or the per-channel one), for quantization-aware
training; the gradient is the straight-through estimator (NOTE [Straight-through fake
quantization] in ``lucid/_core/fake_quantize.py``).

Examples
--------
>>> import lucid
>>> from lucid.ao.quantization import FakeQuantize
>>> fq = FakeQuantize(quant_min=0, quant_max=255)
>>> fq(lucid.tensor([0.0, 0.5, 1.0]))
tensor([0.        , 0.49803925, 1.        ])
"""
from __future__ import annotations

import lucid
from lucid import nn
from lucid._core.quantized import per_channel_affine_float_qparams

from .observer import (FixedQParamsObserver, MovingAverageMinMaxObserver, MovingAveragePerChannelMinMaxObserver,
                       _resize_buffers, _with_args, _with_callable_args, default_fixed_qparams_range_0to1_observer,
                       default_fixed_qparams_range_neg1to1_observer)
from .histogram_observer import HistogramObserver
from .utils import is_per_channel

__all__ = ["FakeQuantizeBase", "FakeQuantize", "FusedMovingAvgObsFakeQuantize", "FixedQParamsFakeQuantize",
           "default_fixed_qparams_range_0to1_fake_quant", "default_fixed_qparams_range_neg1to1_fake_quant", "default_fused_act_fake_quant",
           "default_fused_wt_fake_quant", "default_fused_per_channel_wt_fake_quant", "default_fake_quant", "default_weight_fake_quant",
           "default_per_channel_weight_fake_quant", "default_dynamic_fake_quant", "default_embedding_fake_quant",
           "disable_fake_quant",
           "enable_fake_quant", "disable_observer", "enable_observer"]

_INT_RANGE = {lucid.qint8: (-128, 127), lucid.quint8: (0, 255), lucid.qint32: (-2 ** 31, 2 ** 31 - 1),
              lucid.int8: (-128, 127), lucid.uint8: (0, 255), lucid.int32: (-2 ** 31, 2 ** 31 - 1)}


def fake_quantize_float_qparams(input, scale, zero_point, axis, quant_min, quant_max):
    """Per-channel fake quantization with float zero points (the embedding tables' scheme):
    ``lucid.fake_quantize_per_channel_affine`` given float32 scales and zero points, which
    follows PyTorch's kernel for them (zero point added before rounding, allowed outside
    ``[quant_min, quant_max]``; straight-through gradient inside the range).

    Examples
    --------
    >>> import lucid
    >>> from lucid.ao.quantization.fake_quantize import fake_quantize_float_qparams
    >>> x = lucid.tensor([[0.26, 3.0], [0.26, -3.0]])
    >>> fake_quantize_float_qparams(x, lucid.tensor([0.1, 0.5]), lucid.tensor([-5.5, 300.25]), 0, 0, 255)
    tensor([[  0.55 ,   2.95 ],
            [-22.625, -22.625]])
    """
    return lucid.fake_quantize_per_channel_affine(input, scale.detach().float(), zero_point.detach().float(), axis,
                                                  quant_min, quant_max)


class FakeQuantizeBase(nn.Module):
    """The switches every fake-quantize module has: fake quantization and observation, each
    on or off (uint8 buffers, as PyTorch keeps them)."""

    def __init__(self):
        super().__init__()
        self.register_buffer("fake_quant_enabled", lucid.tensor([1], dtype=lucid.uint8))
        self.register_buffer("observer_enabled", lucid.tensor([1], dtype=lucid.uint8))

    def forward(self, x):
        raise NotImplementedError

    def calculate_qparams(self, **kwargs):
        raise NotImplementedError

    def enable_fake_quant(self, enabled=True):
        self.fake_quant_enabled[0] = 1 if enabled else 0

    def disable_fake_quant(self):
        self.enable_fake_quant(False)

    def enable_observer(self, enabled=True):
        self.observer_enabled[0] = 1 if enabled else 0

    def disable_observer(self):
        self.enable_observer(False)

    with_args = classmethod(_with_args)
    with_callable_args = classmethod(_with_callable_args)


class FakeQuantize(FakeQuantizeBase):
    """Observe (while ``observer_enabled``), then fake-quantize with the observer's scale and
    zero point (while ``fake_quant_enabled``): PyTorch's ``FakeQuantize``.

    Parameters
    ----------
    observer : observer class or ``with_args`` factory
        MovingAverageMinMaxObserver unless given.
    quant_min, quant_max : int, optional
        The integer range (passed to the observer).
    **observer_kwargs
        More observer arguments (``dtype``, ``qscheme``, ``reduce_range``, ``ch_axis`` ...).
    """

    def __init__(self, observer=MovingAverageMinMaxObserver, quant_min=None, quant_max=None, is_dynamic=False,
                 **observer_kwargs):
        super().__init__()
        if quant_min is not None and quant_max is not None:
            if quant_min > quant_max:
                raise AssertionError("quant_min must be less than or equal to quant_max")
            dtype = observer_kwargs.get("dtype", lucid.quint8)
            if hasattr(observer, "p"):  # a with_args factory may carry the dtype
                dtype = getattr(observer.p, "keywords", {}).get("dtype", dtype)
            lo, hi = _INT_RANGE.get(dtype, (quant_min, quant_max))
            if not (lo <= quant_min and quant_max <= hi):
                raise AssertionError("quant_min and quant_max out of the dtype's range")
            observer_kwargs.update({"quant_min": quant_min, "quant_max": quant_max})
        observer_kwargs["is_dynamic"] = is_dynamic
        self.activation_post_process = observer(**observer_kwargs)
        app = self.activation_post_process
        self.quant_min, self.quant_max = app.quant_min, app.quant_max
        self.is_dynamic = app.is_dynamic
        zp_dtype = lucid.float32 if app.qscheme == per_channel_affine_float_qparams else lucid.int32
        self.register_buffer("scale", lucid.tensor([1.0], dtype=lucid.float32))
        self.register_buffer("zero_point", lucid.tensor([0], dtype=zp_dtype))
        self.dtype = app.dtype
        self.qscheme = app.qscheme
        self.ch_axis = getattr(app, "ch_axis", -1)
        if not (is_per_channel(self.qscheme) or self.qscheme in (lucid.per_tensor_affine,
                                                                  lucid.per_tensor_symmetric)):
            raise AssertionError(f"Only per channel and per tensor quantization are supported in fake quantize, "
                                 f"got qscheme: {self.qscheme}")
        self.is_per_channel = is_per_channel(self.qscheme)
        # a per-channel checkpoint holds one scale per channel: PyTorch resizes before loading
        self.register_load_state_dict_pre_hook(_resize_buffers("scale", "zero_point"))

    def calculate_qparams(self):
        return self.activation_post_process.calculate_qparams()

    def forward(self, X):
        if int(self.observer_enabled[0]) == 1:
            self.activation_post_process(X.detach())
            scale, zero_point = self.calculate_qparams()
            self.scale = scale.to(device=self.scale.device, dtype=lucid.float32)
            self.zero_point = zero_point.to(device=self.zero_point.device, dtype=self.zero_point.dtype)
        if int(self.fake_quant_enabled[0]) == 1:
            app = self.activation_post_process
            if self.qscheme == per_channel_affine_float_qparams:
                X = fake_quantize_float_qparams(X, self.scale, self.zero_point, self.ch_axis, app.quant_min,
                                                app.quant_max)
            elif self.is_per_channel:
                X = lucid.fake_quantize_per_channel_affine(X, self.scale, self.zero_point, self.ch_axis,
                                                           app.quant_min, app.quant_max)
            else:
                X = lucid.fake_quantize_per_tensor_affine(X, self.scale, self.zero_point, app.quant_min,
                                                          app.quant_max)
        return X

    def extra_repr(self):
        app = self.activation_post_process
        return (f"fake_quant_enabled={self.fake_quant_enabled}, observer_enabled={self.observer_enabled}, "
                f"quant_min={app.quant_min}, quant_max={app.quant_max}, dtype={self.dtype}, "
                f"qscheme={self.qscheme}, ch_axis={self.ch_axis}, scale={self.scale}, zero_point={self.zero_point}")


class FusedMovingAvgObsFakeQuantize(FakeQuantize):
    """Observe, choose the qparams and fake-quantize in one step, PyTorch's fused module (the
    default of its version-1 QAT qconfigs): a moving-average min/max as
    ``MovingAverageMinMaxObserver``'s, but the scale and zero point of each training step come
    from fbgemm's ``ChooseQuantizationParams`` (``preserve_sparsity`` for the symmetric
    schemes), as ``torch.fused_moving_avg_obs_fake_quant`` computes them; ``calculate_qparams``
    (what ``convert`` uses) is the observer's.

    Examples
    --------
    >>> import lucid
    >>> from lucid.ao.quantization import FusedMovingAvgObsFakeQuantize
    >>> fq = FusedMovingAvgObsFakeQuantize()
    >>> fq(lucid.tensor([-1.0, 0.3, 2.0]))
    tensor([-1.        ,  0.30588236,  2.        ])
    >>> fq.zero_point
    tensor([85], dtype=lucid.int32)
    """

    def __init__(self, observer=MovingAverageMinMaxObserver, quant_min=0, quant_max=255, **observer_kwargs):
        super().__init__(observer, quant_min, quant_max, **observer_kwargs)
        if not isinstance(self.activation_post_process,
                          (MovingAverageMinMaxObserver, MovingAveragePerChannelMinMaxObserver)):
            raise AssertionError("Fused observer+fake_quant module only works with MovingAverageMinMaxObserver")
        self.register_buffer("fake_quant_enabled", lucid.tensor([1], dtype=lucid.int64))
        self.register_buffer("observer_enabled", lucid.tensor([1], dtype=lucid.int64))
        self.is_symmetric_quant = self.qscheme in (lucid.per_tensor_symmetric, lucid.per_channel_symmetric)

    def _choose(self):
        from lucid._core.quantized import choose_qparams

        app = self.activation_post_process
        lows, highs = app.min_val.reshape(-1).tolist(), app.max_val.reshape(-1).tolist()
        chosen = [choose_qparams(lo, hi, app.quant_min, app.quant_max, preserve_sparsity=self.is_symmetric_quant)
                  for lo, hi in zip(lows, highs)]
        dev = self.scale.device
        self.scale = lucid.tensor([c[0] for c in chosen], dtype=lucid.float32, device=dev)
        self.zero_point = lucid.tensor([c[1] for c in chosen], dtype=self.zero_point.dtype, device=dev)

    def forward(self, X):
        if int(self.observer_enabled[0]) == 1:
            self.activation_post_process(X.detach())
            self._choose()
        if int(self.fake_quant_enabled[0]) == 1:
            app = self.activation_post_process
            if self.is_per_channel:
                return lucid.fake_quantize_per_channel_affine(X, self.scale, self.zero_point, self.ch_axis,
                                                              app.quant_min, app.quant_max)
            return lucid.fake_quantize_per_tensor_affine(X, self.scale, self.zero_point, app.quant_min,
                                                         app.quant_max)
        return X

    def extra_repr(self):
        app = self.activation_post_process
        return (f"fake_quant_enabled={self.fake_quant_enabled}, observer_enabled={self.observer_enabled}, "
                f"scale={self.scale}, zero_point={self.zero_point}, dtype={self.dtype}, "
                f"quant_min={app.quant_min}, quant_max={app.quant_max}, qscheme={self.qscheme}, "
                f"reduce_range={app.reduce_range}")


class FixedQParamsFakeQuantize(FakeQuantize):
    """Fake quantization with the fixed parameters of a :class:`FixedQParamsObserver`
    (PyTorch's): the QAT form of the fixed-qparams ops (sigmoid, tanh, hardsigmoid).

    Examples
    --------
    >>> import lucid
    >>> from lucid.ao.quantization.fake_quantize import default_fixed_qparams_range_neg1to1_fake_quant
    >>> default_fixed_qparams_range_neg1to1_fake_quant()(lucid.tensor([-2.0, 0.3, 1.0]))
    tensor([-1.       ,  0.296875 ,  0.9921875])
    """

    def __init__(self, observer):
        super().__init__(observer=observer)
        if type(self.activation_post_process) is not FixedQParamsObserver:
            raise AssertionError(f"{type(self).__name__}'s observer must be a FixedQParamsObserver")
        self._observer_ctr = observer
        self.scale = self.activation_post_process.scale
        self.zero_point = self.activation_post_process.zero_point
        if self.qscheme not in (lucid.per_tensor_affine, lucid.per_tensor_symmetric):
            raise AssertionError(f"Only per tensor quantization is supported FixedQParamsFakeQuantize module, "
                                 f"got qscheme: {self.qscheme}")

    def calculate_qparams(self):
        return self.scale, self.zero_point

    def extra_repr(self):
        app = self.activation_post_process
        return (f"fake_quant_enabled={self.fake_quant_enabled}, observer_enabled={self.observer_enabled}, "
                f"scale={self.scale}, zero_point={self.zero_point}, dtype={self.dtype}, "
                f"quant_min={app.quant_min}, quant_max={app.quant_max}, qscheme={self.qscheme}")


default_fake_quant = FakeQuantize.with_args(observer=MovingAverageMinMaxObserver, quant_min=0, quant_max=255,
                                            dtype=lucid.quint8, qscheme=lucid.per_tensor_affine, reduce_range=True)
default_weight_fake_quant = FakeQuantize.with_args(observer=MovingAverageMinMaxObserver, quant_min=-128,
                                                   quant_max=127, dtype=lucid.qint8,
                                                   qscheme=lucid.per_tensor_symmetric, reduce_range=False)
default_dynamic_fake_quant = FakeQuantize.with_args(observer=MovingAverageMinMaxObserver, quant_min=0,
                                                    quant_max=255, is_dynamic=True, dtype=lucid.quint8,
                                                    averaging_constant=1)
default_per_channel_weight_fake_quant = FakeQuantize.with_args(
    observer=MovingAveragePerChannelMinMaxObserver, quant_min=-128, quant_max=127, dtype=lucid.qint8,
    qscheme=lucid.per_channel_symmetric, reduce_range=False, ch_axis=0)

default_fused_act_fake_quant = FusedMovingAvgObsFakeQuantize.with_args(
    observer=MovingAverageMinMaxObserver, quant_min=0, quant_max=255, dtype=lucid.quint8)
# embedding tables: each row its own float scale and float zero point, from the current weight only
default_embedding_fake_quant = FakeQuantize.with_args(
    observer=MovingAveragePerChannelMinMaxObserver, qscheme=lucid.per_channel_affine_float_qparams,
    dtype=lucid.quint8, quant_min=0, quant_max=255, ch_axis=0, averaging_constant=1)
default_fused_wt_fake_quant = FusedMovingAvgObsFakeQuantize.with_args(
    observer=MovingAverageMinMaxObserver, quant_min=-128, quant_max=127, dtype=lucid.qint8,
    qscheme=lucid.per_tensor_symmetric)
default_fused_per_channel_wt_fake_quant = FusedMovingAvgObsFakeQuantize.with_args(
    observer=MovingAveragePerChannelMinMaxObserver, quant_min=-128, quant_max=127, dtype=lucid.qint8,
    qscheme=lucid.per_channel_symmetric)


default_fixed_qparams_range_0to1_fake_quant = FixedQParamsFakeQuantize.with_args(
    observer=default_fixed_qparams_range_0to1_observer)
default_fixed_qparams_range_neg1to1_fake_quant = FixedQParamsFakeQuantize.with_args(
    observer=default_fixed_qparams_range_neg1to1_observer)


default_symmetric_fixed_qparams_fake_quant = default_fixed_qparams_range_neg1to1_fake_quant
default_affine_fixed_qparams_fake_quant = default_fixed_qparams_range_0to1_fake_quant
fused_wt_fake_quant_range_neg_127_to_127 = FusedMovingAvgObsFakeQuantize.with_args(
    observer=MovingAverageMinMaxObserver, quant_min=-127, quant_max=127, dtype=lucid.qint8,
    qscheme=lucid.per_tensor_symmetric, eps=2 ** -12)
fused_per_channel_wt_fake_quant_range_neg_127_to_127 = FusedMovingAvgObsFakeQuantize.with_args(
    observer=MovingAveragePerChannelMinMaxObserver, quant_min=-127, quant_max=127, dtype=lucid.qint8,
    qscheme=lucid.per_channel_symmetric, eps=2 ** -12)


default_histogram_fake_quant = FakeQuantize.with_args(observer=HistogramObserver, quant_min=0, quant_max=255,
                                                     dtype=lucid.quint8, qscheme=lucid.per_tensor_affine,
                                                     reduce_range=True)


def _is_fake_quant(mod):
    return isinstance(mod, FakeQuantizeBase)


def disable_fake_quant(mod):
    """For ``model.apply``: switch fake quantization off in every FakeQuantize module."""
    if _is_fake_quant(mod):
        mod.disable_fake_quant()


def enable_fake_quant(mod):
    if _is_fake_quant(mod):
        mod.enable_fake_quant()


def disable_observer(mod):
    if _is_fake_quant(mod):
        mod.disable_observer()


def enable_observer(mod):
    if _is_fake_quant(mod):
        mod.enable_observer()
