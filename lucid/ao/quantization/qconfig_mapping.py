"""``QConfigMapping``: which qconfig each part of a model gets in FX graph mode quantization
(PyTorch's ``torch.ao.quantization.qconfig_mapping``), and the per-backend defaults."""
from __future__ import annotations

import re
from collections import OrderedDict

from .qconfig import get_default_qat_qconfig, get_default_qconfig

__all__ = ["QConfigMapping", "get_default_qconfig_mapping", "get_default_qat_qconfig_mapping"]

_GLOBAL, _TYPE, _REGEX, _NAME, _ORDER = ("", "object_type", "module_name_regex", "module_name",
                                         "module_name_object_type_order")


class QConfigMapping:
    """Qconfigs by scope, most specific winning: global, then object type (a module class, a
    function, or a method name such as ``"reshape"``), then module-name regex, then module name
    (which also covers the module's children), then (module name, object type, index). A
    ``None`` qconfig leaves that part in floating point.

    Examples
    --------
    >>> from lucid import nn
    >>> from lucid.ao.quantization import QConfigMapping, default_qconfig
    >>> m = QConfigMapping().set_global(default_qconfig).set_object_type(nn.Linear, None)
    >>> m.object_type_qconfigs[nn.Linear] is None
    True
    """

    def __init__(self):
        self.global_qconfig = None
        self.object_type_qconfigs = OrderedDict()
        self.module_name_regex_qconfigs = OrderedDict()
        self.module_name_qconfigs = OrderedDict()
        self.module_name_object_type_order_qconfigs = OrderedDict()

    def set_global(self, global_qconfig):
        """The qconfig of everything no other entry names."""
        self.global_qconfig = global_qconfig
        return self

    def set_object_type(self, object_type, qconfig):
        """The qconfig of a module class, a function, or a method name."""
        self.object_type_qconfigs[object_type] = qconfig
        return self

    def set_module_name_regex(self, module_name_regex, qconfig):
        """The qconfig of modules whose qualified name matches (``re.match``); the first set wins."""
        self.module_name_regex_qconfigs[module_name_regex] = qconfig
        return self

    def set_module_name(self, module_name, qconfig):
        """The qconfig of the module with this qualified name and its children."""
        self.module_name_qconfigs[module_name] = qconfig
        return self

    def set_module_name_object_type_order(self, module_name, object_type, index, qconfig):
        """The qconfig of the ``index``-th call of ``object_type`` directly inside ``module_name``."""
        self.module_name_object_type_order_qconfigs[(module_name, object_type, index)] = qconfig
        return self

    def __repr__(self):
        parts = [f"\n {_GLOBAL or 'global'}: {self.global_qconfig!r}"]
        for key, table in ((_TYPE, self.object_type_qconfigs), (_REGEX, self.module_name_regex_qconfigs),
                           (_NAME, self.module_name_qconfigs), (_ORDER, self.module_name_object_type_order_qconfigs)):
            parts += [f"\n {key}: {k!r}: {v!r}" for k, v in table.items()]
        return f"{type(self).__name__} ({''.join(parts)}\n)"

    def to_dict(self):
        """The mapping in the old ``qconfig_dict`` form."""
        return {"": self.global_qconfig,
                _TYPE: list(self.object_type_qconfigs.items()),
                _REGEX: list(self.module_name_regex_qconfigs.items()),
                _NAME: list(self.module_name_qconfigs.items()),
                _ORDER: [(*k, v) for k, v in self.module_name_object_type_order_qconfigs.items()]}

    @classmethod
    def from_dict(cls, qconfig_dict):
        """A mapping from the old ``qconfig_dict`` form."""
        m = cls()
        if "" in qconfig_dict:
            m.set_global(qconfig_dict[""])
        for k, v in qconfig_dict.get(_TYPE, []):
            m.set_object_type(k, v)
        for k, v in qconfig_dict.get(_REGEX, []):
            m.set_module_name_regex(k, v)
        for k, v in qconfig_dict.get(_NAME, []):
            m.set_module_name(k, v)
        for name, obj, idx, v in qconfig_dict.get(_ORDER, []):
            m.set_module_name_object_type_order(name, obj, idx, v)
        return m

    # ------------------------------------------------------------------ resolution
    def _for_module_name(self, name, fallback):
        """The qconfig a module name (or its closest named ancestor) sets, else ``fallback``."""
        for regex, qconfig in self.module_name_regex_qconfigs.items():
            if re.match(regex, name):
                fallback = qconfig
                break
        parts = name.split(".") if name else []
        for i in range(len(parts), 0, -1):
            prefix = ".".join(parts[:i])
            if prefix in self.module_name_qconfigs:
                return self.module_name_qconfigs[prefix]
        return fallback

    def _qconfig_for(self, object_type, module_name=None, parent_name=None, index=None):
        """The qconfig of one module (``module_name`` given) or one function / method call
        (``parent_name``: the module whose ``forward`` made it; ``index``: its order there)."""
        qconfig = self.object_type_qconfigs.get(object_type, self.global_qconfig) \
            if _hashable(object_type) else self.global_qconfig
        if module_name is not None:
            return self._for_module_name(module_name, qconfig)
        if parent_name is not None:
            qconfig = self._for_module_name(parent_name, qconfig) if parent_name else qconfig
            key = (parent_name, object_type, index)
            if _hashable(object_type) and key in self.module_name_object_type_order_qconfigs:
                qconfig = self.module_name_object_type_order_qconfigs[key]
        return qconfig


def _hashable(x):
    try:
        hash(x)
    except TypeError:
        return False
    return True


def _fixed_qparams_ops():
    """PyTorch's ``_FIXED_QPARAMS_OP_TO_OBSERVER``: op -> the observer of its fixed range."""
    import lucid
    import lucid.nn.functional as F
    from lucid import nn

    from .observer import default_fixed_qparams_range_0to1_observer as zero_one
    from .observer import default_fixed_qparams_range_neg1to1_observer as neg_one

    ops = {nn.Hardsigmoid: zero_one, F.hardsigmoid: zero_one, "hardsigmoid": zero_one, "hardsigmoid_": zero_one,
           nn.Sigmoid: zero_one, lucid.sigmoid: zero_one, F.sigmoid: zero_one, "sigmoid": zero_one,
           "sigmoid_": zero_one, nn.Softmax: zero_one, nn.Tanh: neg_one, lucid.tanh: neg_one, F.tanh: neg_one,
           "tanh": neg_one, "tanh_": neg_one}
    # a traced node records the undecorated function (NOTE [Tracing without __torch_function__])
    ops.update({getattr(k, "_lucid_original", k): v for k, v in ops.items()})
    return ops


def _default_mapping(qconfig, is_qat=False):
    from .fake_quantize import FixedQParamsFakeQuantize, default_weight_fake_quant
    from .observer import default_weight_observer
    from .qconfig import QConfig

    from lucid import nn

    from .qconfig import default_quint8_weight_qconfig

    # PReLU's quantized kernel takes a quint8 weight: PyTorch's mapping gives it per-tensor quint8
    mapping = QConfigMapping().set_global(qconfig).set_object_type(nn.PReLU, default_quint8_weight_qconfig)
    for op, observer in _fixed_qparams_ops().items():
        if is_qat:
            fixed = QConfig(activation=FixedQParamsFakeQuantize.with_args(observer=observer),
                            weight=default_weight_fake_quant)
        else:
            fixed = QConfig(activation=observer, weight=default_weight_observer)
        mapping.set_object_type(op, fixed)
    return mapping


def get_default_qconfig_mapping(backend="x86", version=0):
    """PyTorch's post-training mapping for ``backend``: ``get_default_qconfig(backend)`` everywhere
    but for the fixed-range ops (sigmoid, tanh, hardsigmoid, softmax), which get fixed-qparams
    observers (1/256 from 0, 2/256 from 128 for tanh) with the default weight observer.

    ``reshape`` follows its input (PyTorch's reuse-input qconfig; see ``quantize_fx``).

    Examples
    --------
    >>> from lucid.ao.quantization import get_default_qconfig_mapping
    >>> type(get_default_qconfig_mapping("x86").global_qconfig.activation()).__name__
    'HistogramObserver'
    >>> type(get_default_qconfig_mapping("x86").object_type_qconfigs["sigmoid"].activation()).__name__
    'FixedQParamsObserver'
    """
    return _default_mapping(get_default_qconfig(backend, version))


def get_default_qat_qconfig_mapping(backend="x86", version=1):
    """PyTorch's quantization-aware-training mapping: ``get_default_qat_qconfig(backend)``
    everywhere, ``FixedQParamsFakeQuantize`` for the fixed-range ops.

    Examples
    --------
    >>> from lucid.ao.quantization import get_default_qat_qconfig_mapping
    >>> type(get_default_qat_qconfig_mapping().global_qconfig.activation()).__name__
    'FakeQuantize'
    """
    return _default_mapping(get_default_qat_qconfig(backend, version), is_qat=True)
