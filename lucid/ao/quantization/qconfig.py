"""Quantization configurations (PyTorch's ``torch.ao.quantization.qconfig``): which observer
(or fake-quantize) factory watches activations and which weights."""
from __future__ import annotations

from collections import namedtuple

import lucid

from lucid import nn

from .fake_quantize import (FakeQuantize, FusedMovingAvgObsFakeQuantize, default_embedding_fake_quant, default_fake_quant,
                            default_per_channel_weight_fake_quant, default_weight_fake_quant)
from .histogram_observer import HistogramObserver
from .observer import (MinMaxObserver, MovingAverageMinMaxObserver, MovingAveragePerChannelMinMaxObserver,
                       NoopObserver, PerChannelMinMaxObserver, PlaceholderObserver, RecordingObserver,
                       ReuseInputObserver,
                       default_dynamic_quant_observer,
                       default_float_qparams_observer, default_observer, default_per_channel_weight_observer,
                       default_placeholder_observer, default_weight_observer)

__all__ = ["QConfig", "QConfigDynamic", "default_qconfig", "default_dynamic_qconfig", "float16_dynamic_qconfig",
           "per_channel_dynamic_qconfig", "float_qparams_weight_only_qconfig", "default_qat_qconfig",
           "default_per_channel_qconfig", "default_embedding_qat_qconfig", "get_default_qconfig",
           "get_default_qat_qconfig", "default_debug_qconfig", "default_weight_only_qconfig",
           "default_activation_only_qconfig", "float16_static_qconfig", "default_quint8_weight_qconfig",
           "default_reuse_input_qconfig", "default_dynamic_qat_qconfig", "default_qat_qconfig_v2",
           "default_symmetric_qnnpack_qconfig", "default_per_channel_symmetric_qnnpack_qconfig",
           "default_symmetric_qnnpack_qat_qconfig", "default_per_channel_symmetric_qnnpack_qat_qconfig",
           "qconfig_equals", "get_default_qconfig_dict", "get_default_qat_qconfig_dict"]


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


# PyTorch's remaining named qconfigs, from the same observer / fake-quantize factories
_EPS = 2 ** -12
_SYM = {"dtype": lucid.qint8, "qscheme": lucid.per_tensor_symmetric}
_ACT_QNNPACK = HistogramObserver.with_args(dtype=lucid.qint8, reduce_range=False, eps=_EPS)
_ACT_QNNPACK_QAT = FusedMovingAvgObsFakeQuantize.with_args(
    observer=MovingAverageMinMaxObserver, quant_min=-128, quant_max=127, dtype=lucid.qint8, reduce_range=False,
    eps=_EPS)
_WEIGHT_MA_FQ = FakeQuantize.with_args(observer=MovingAverageMinMaxObserver, quant_min=-128, quant_max=127,
                                       **_SYM, reduce_range=False)

default_debug_qconfig = QConfig(activation=RecordingObserver, weight=default_weight_observer)
default_weight_only_qconfig = QConfig(activation=nn.Identity, weight=_WEIGHT_MA_FQ)
default_activation_only_qconfig = QConfig(activation=FakeQuantize.with_args(
    observer=MovingAverageMinMaxObserver, quant_min=0, quant_max=255, dtype=lucid.quint8,
    qscheme=lucid.per_tensor_affine, reduce_range=True), weight=nn.Identity)
float16_static_qconfig = QConfig(activation=PlaceholderObserver.with_args(dtype=lucid.float16),
                                 weight=PlaceholderObserver.with_args(dtype=lucid.float16))
default_quint8_weight_qconfig = QConfig(activation=HistogramObserver, weight=MinMaxObserver)
default_reuse_input_qconfig = QConfig(activation=ReuseInputObserver, weight=NoopObserver)
default_dynamic_qat_qconfig = QConfig(activation=FakeQuantize.with_args(
    observer=MovingAverageMinMaxObserver, quant_min=0, quant_max=255, is_dynamic=True, dtype=lucid.quint8,
    averaging_constant=1), weight=_WEIGHT_MA_FQ)
default_qat_qconfig_v2 = QConfig(
    activation=FusedMovingAvgObsFakeQuantize.with_args(observer=MovingAverageMinMaxObserver, quant_min=0,
                                                       quant_max=255, dtype=lucid.quint8),
    weight=FusedMovingAvgObsFakeQuantize.with_args(observer=MovingAverageMinMaxObserver, quant_min=-128,
                                                   quant_max=127, **_SYM))
default_symmetric_qnnpack_qconfig = QConfig(activation=_ACT_QNNPACK, weight=MinMaxObserver.with_args(
    **_SYM, quant_min=-127, quant_max=127, eps=_EPS))
default_per_channel_symmetric_qnnpack_qconfig = QConfig(activation=_ACT_QNNPACK, weight=PerChannelMinMaxObserver.with_args(
    dtype=lucid.qint8, qscheme=lucid.per_channel_symmetric, quant_min=-127, quant_max=127, eps=_EPS))
default_symmetric_qnnpack_qat_qconfig = QConfig(activation=_ACT_QNNPACK_QAT, weight=FusedMovingAvgObsFakeQuantize.with_args(
    observer=MovingAverageMinMaxObserver, quant_min=-127, quant_max=127, **_SYM, eps=_EPS))
default_per_channel_symmetric_qnnpack_qat_qconfig = QConfig(
    activation=_ACT_QNNPACK_QAT, weight=FusedMovingAvgObsFakeQuantize.with_args(
        observer=MovingAveragePerChannelMinMaxObserver, quant_min=-127, quant_max=127, dtype=lucid.qint8,
        qscheme=lucid.per_channel_symmetric, eps=_EPS))


def _ctor_key(ctor):
    # a with_args factory compares by its class and bound arguments (PyTorch's _partial_wrapper_equals)
    p = getattr(ctor, "p", None)
    if p is None:
        return ctor
    extra = tuple(sorted((k, _ctor_key(v)) for k, v in getattr(ctor, "callable_args", {}).items()))
    return (_ctor_key(p.func), p.args, tuple(sorted((k, _ctor_key(v)) for k, v in p.keywords.items())), extra)


def qconfig_equals(q1, q2):
    """Whether two qconfigs build the same observers: equal factories (classes, or
    ``with_args`` results with the same class and arguments).

    Examples
    --------
    >>> import lucid
    >>> from lucid.ao.quantization import MinMaxObserver, QConfig, qconfig_equals
    >>> a = QConfig(activation=MinMaxObserver.with_args(dtype=lucid.quint8), weight=MinMaxObserver)
    >>> b = QConfig(activation=MinMaxObserver.with_args(dtype=lucid.quint8), weight=MinMaxObserver)
    >>> a == b, qconfig_equals(a, b)
    (False, True)
    """
    if q1 is None or q2 is None:
        return q1 == q2
    try:
        return _ctor_key(q1.activation) == _ctor_key(q2.activation) and _ctor_key(q1.weight) == _ctor_key(q2.weight)
    except (AttributeError, TypeError):
        return q1 == q2


def get_default_qconfig_dict(backend="x86", version=0):
    """``get_default_qconfig_mapping(backend, version).to_dict()`` (PyTorch's deprecated form).

    Examples
    --------
    >>> from lucid.ao.quantization import get_default_qconfig_dict
    >>> sorted(get_default_qconfig_dict())[:2]
    ['', 'module_name']
    """
    from .qconfig_mapping import get_default_qconfig_mapping

    return get_default_qconfig_mapping(backend, version).to_dict()


def get_default_qat_qconfig_dict(backend="x86", version=1):
    """``get_default_qat_qconfig_mapping(backend, version).to_dict()`` (PyTorch's deprecated form).

    Examples
    --------
    >>> from lucid.ao.quantization import get_default_qat_qconfig_dict
    >>> "object_type" in get_default_qat_qconfig_dict()
    True
    """
    from .qconfig_mapping import get_default_qat_qconfig_mapping

    return get_default_qat_qconfig_mapping(backend, version).to_dict()
