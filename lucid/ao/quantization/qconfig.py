"""Quantization configurations (PyTorch's ``torch.ao.quantization.qconfig``): which observer
(or fake-quantize) factory watches activations and which weights."""
from __future__ import annotations

from collections import namedtuple

import lucid

from .fake_quantize import (FakeQuantize, default_embedding_fake_quant, default_fake_quant,
                            default_per_channel_weight_fake_quant, default_weight_fake_quant)
from .observer import (MinMaxObserver, MovingAverageMinMaxObserver, NoopObserver, PlaceholderObserver,
                       default_dynamic_quant_observer,
                       default_float_qparams_observer, default_observer, default_per_channel_weight_observer,
                       default_placeholder_observer, default_weight_observer)

__all__ = ["QConfig", "QConfigDynamic", "default_qconfig", "default_dynamic_qconfig", "float16_dynamic_qconfig",
           "per_channel_dynamic_qconfig", "float_qparams_weight_only_qconfig", "default_qat_qconfig",
           "default_per_channel_qconfig", "default_embedding_qat_qconfig", "get_default_qconfig",
           "get_default_qat_qconfig"]


class QConfig(namedtuple("QConfig", ["activation", "weight"])):
    """``(activation, weight)`` observer factories (classes or ``with_args`` results, never
    instances: each module gets fresh observers).

    Examples
    --------
    >>> from lucid.ao.quantization import QConfig, MinMaxObserver
    >>> QConfig(activation=MinMaxObserver, weight=MinMaxObserver).activation().quant_max
    255
    """

    __slots__ = ()

    def __new__(cls, activation, weight):
        if isinstance(activation, lucid.nn.Module) or isinstance(weight, lucid.nn.Module):
            raise ValueError("QConfig received observer instance, please pass observer class instead. "
                             "Use MyObserver.with_args(x=1) to override arguments to constructor if needed")
        return super().__new__(cls, activation, weight)


QConfigDynamic = QConfig

default_qconfig = QConfig(activation=default_observer, weight=default_weight_observer)
default_per_channel_qconfig = QConfig(activation=default_observer, weight=default_per_channel_weight_observer)
default_dynamic_qconfig = QConfig(activation=default_dynamic_quant_observer, weight=default_weight_observer)
float16_dynamic_qconfig = QConfig(activation=PlaceholderObserver.with_args(
    dtype=lucid.float16, is_dynamic=True), weight=PlaceholderObserver.with_args(
    dtype=lucid.float16))
per_channel_dynamic_qconfig = QConfig(activation=default_dynamic_quant_observer,
                                      weight=default_per_channel_weight_observer)
float_qparams_weight_only_qconfig = QConfig(activation=default_placeholder_observer,
                                            weight=default_float_qparams_observer)
default_qat_qconfig = QConfig(activation=default_fake_quant, weight=default_weight_fake_quant)
# quantization-aware training of embedding tables (lucid.ao.nn.qat.Embedding / EmbeddingBag): float outputs
default_embedding_qat_qconfig = QConfig(activation=NoopObserver.with_args(dtype=lucid.float32),
                                        weight=default_embedding_fake_quant)


def get_default_qconfig(backend="x86", version=0):
    """PyTorch's per-backend post-training qconfig: a HistogramObserver on activations
    (``reduce_range`` for 'x86'/'fbgemm', whose kernels want 7-bit activations), per-channel
    weights except for 'qnnpack'.

    Examples
    --------
    >>> from lucid.ao.quantization import get_default_qconfig
    >>> obs = get_default_qconfig("x86").activation()
    >>> type(obs).__name__, obs.quant_max
    ('HistogramObserver', 127)
    """
    from .histogram_observer import HistogramObserver

    if backend in ("x86", "fbgemm"):
        return QConfig(activation=HistogramObserver.with_args(reduce_range=True),
                       weight=default_per_channel_weight_observer)
    if backend in ("qnnpack", "onednn"):
        return QConfig(activation=HistogramObserver.with_args(reduce_range=False),
                       weight=default_per_channel_weight_observer if backend == "onednn"
                       else default_weight_observer)
    raise AssertionError(f"get_default_qconfig: backend {backend} not supported. backend must be one of "
                         "['fbgemm', 'x86', 'qnnpack', 'onednn']")


def get_default_qat_qconfig(backend="x86", version=1):
    """PyTorch's per-backend quantization-aware-training qconfig, in its ``version=0`` form
    (``FakeQuantize`` modules) whatever ``version`` says: PyTorch's ``version=1`` default uses
    ``FusedMovingAvgObsFakeQuantize`` (``default_fused_act_fake_quant`` ...; build that
    QConfig by hand), whose per-step qparams differ slightly, and
    tests/regressions/test_quant_sweep.py pins the FakeQuantize numerics.

    Examples
    --------
    >>> from lucid.ao.quantization import get_default_qat_qconfig
    >>> type(get_default_qat_qconfig("x86").activation()).__name__
    'FakeQuantize'
    """
    if backend in ("x86", "fbgemm"):
        return QConfig(activation=FakeQuantize.with_args(observer=MovingAverageMinMaxObserver, quant_min=0,
                                                         quant_max=255, reduce_range=True),
                       weight=default_per_channel_weight_fake_quant)
    if backend in ("qnnpack", "onednn"):
        return QConfig(activation=FakeQuantize.with_args(observer=MovingAverageMinMaxObserver, quant_min=0,
                                                         quant_max=255, reduce_range=False),
                       weight=default_per_channel_weight_fake_quant if backend == "onednn"
                       else default_weight_fake_quant)
    raise AssertionError(f"get_default_qat_qconfig: backend {backend} not supported. backend must be one of "
                         "['fbgemm', 'x86', 'qnnpack', 'onednn']")
