"""The eager-mode quantization workflows (PyTorch's ``torch.ao.quantization.quantize``):
``quantize_dynamic``; ``prepare`` / calibrate / ``convert`` (post-training static); and
``prepare_qat`` / train / ``convert`` (quantization-aware training)."""
from __future__ import annotations

import copy
import itertools

import lucid
from lucid import nn

from lucid.nn.modules.linear import NonDynamicallyQuantizableLinear

from .fuse_modules import LinearReLU, _FusedModule
from .qconfig import default_dynamic_qconfig, float16_dynamic_qconfig, float_qparams_weight_only_qconfig
from .stubs import DeQuantStub, QuantStub

__all__ = ["quantize_dynamic", "propagate_qconfig_", "prepare", "convert", "prepare_qat", "quantize",
           "swap_module", "get_default_dynamic_quant_module_mappings", "get_default_static_quant_module_mappings",
           "get_default_qat_module_mappings", "get_embedding_qat_module_mappings",
           "get_embedding_static_quant_module_mappings", "get_default_custom_config_dict", "no_observer_set",
           "add_quant_dequant", "quantize_qat", "get_default_qconfig_propagation_list",
           "get_default_compare_output_module_list", "get_static_quant_module_class",
           "get_dynamic_quant_module_class", "default_eval_fn"]


def _lookup(mapping, float_module_class, extra):
    found = {**mapping, **(extra or {})}.get(float_module_class)
    if found is None:
        raise AssertionError(f"Floating point module class {float_module_class} does not have a corresponding "
                             "quantized module class")
    return copy.deepcopy(found)


def get_static_quant_module_class(float_module_class, additional_static_quant_mapping=None, is_reference=False):
    """The statically quantized class of ``float_module_class`` (``AssertionError`` if none).

    Examples
    --------
    >>> import lucid.nn as nn
    >>> from lucid.ao.quantization import get_static_quant_module_class
    >>> get_static_quant_module_class(nn.Conv2d).__name__
    'Conv2d'
    """
    if is_reference:
        raise NotImplementedError("get_static_quant_module_class: reference quantized modules are not available")
    return _lookup(get_default_static_quant_module_mappings(), float_module_class, additional_static_quant_mapping)


def get_dynamic_quant_module_class(float_module_class, additional_dynamic_quant_mapping=None):
    """The dynamically quantized class of ``float_module_class`` (``AssertionError`` if none).

    Examples
    --------
    >>> import lucid.nn as nn
    >>> from lucid.ao.quantization import get_dynamic_quant_module_class
    >>> get_dynamic_quant_module_class(nn.GRU).__name__
    'GRU'
    """
    return _lookup(get_default_dynamic_quant_module_mappings(), float_module_class, additional_dynamic_quant_mapping)


def default_eval_fn(model, calib_data):
    """Run ``model`` on the data of each ``(data, target)`` pair of ``calib_data``.

    Examples
    --------
    >>> import lucid, lucid.nn as nn
    >>> from lucid.ao.quantization import default_eval_fn
    >>> default_eval_fn(nn.Linear(2, 1), [(lucid.randn(3, 2), None)])
    """
    for data, _target in calib_data:
        model(data)


def get_default_qconfig_propagation_list():
    """The module types PyTorch's ``propagate_qconfig_`` / ``prepare`` treat as quantizable: the
    keys of the static, QAT and dynamic mappings, and ``nn.Sequential``.

    Examples
    --------
    >>> import lucid.nn as nn
    >>> from lucid.ao.quantization import get_default_qconfig_propagation_list
    >>> nn.Conv2d in get_default_qconfig_propagation_list()
    True
    """
    return (set(get_default_static_quant_module_mappings()) | set(get_default_qat_module_mappings())
            | set(get_default_dynamic_quant_module_mappings()) | {nn.Sequential})


def get_default_compare_output_module_list():
    """The module types whose outputs the numeric suite compares: both sides of the static,
    QAT and dynamic mappings, and ``nn.Sequential``.

    Examples
    --------
    >>> import lucid.nn as nn
    >>> from lucid.ao import nn as aonn
    >>> from lucid.ao.quantization import get_default_compare_output_module_list
    >>> aonn.quantized.Linear in get_default_compare_output_module_list()
    True
    """
    out = {nn.Sequential}
    for mapping in (get_default_static_quant_module_mappings(), get_default_qat_module_mappings(),
                    get_default_dynamic_quant_module_mappings()):
        out |= set(mapping) | set(mapping.values())
    return out


def add_quant_dequant(module):
    """Wrap every leaf submodule that has a qconfig in a :class:`QuantWrapper` (``module``
    itself when it is such a leaf: the wrapper is returned).

    Examples
    --------
    >>> import lucid.nn as nn
    >>> from lucid.ao import quantization as tq
    >>> m = nn.Sequential(nn.Linear(2, 2), nn.ReLU())
    >>> m[0].qconfig = tq.default_qconfig
    >>> type(tq.add_quant_dequant(m)[0]).__name__
    'QuantWrapper'
    """
    from .stubs import QuantWrapper

    if not any(True for _ in module.children()) and getattr(module, "qconfig", None):
        return QuantWrapper(module)
    for name, child in module.named_children():
        module._modules[name] = add_quant_dequant(child)
    return module


def get_default_custom_config_dict():
    """PyTorch's default custom module config: ``nn.LSTM`` and ``nn.MultiheadAttention`` are
    observed as their quantizable forms and converted to the quantized ones (``prepare`` /
    ``convert`` use it when given none).

    Examples
    --------
    >>> import lucid.nn as nn
    >>> from lucid.ao.quantization import get_default_custom_config_dict
    >>> get_default_custom_config_dict()["float_to_observed_custom_module_class"][nn.LSTM].__name__
    'LSTM'
    """
    from lucid.ao.nn import quantizable as nnqa, quantized as nnq

    return {"float_to_observed_custom_module_class": {nn.LSTM: nnqa.LSTM,
                                                      nn.MultiheadAttention: nnqa.MultiheadAttention},
            "observed_to_quantized_custom_module_class": {nnqa.LSTM: nnq.LSTM,
                                                          nnqa.MultiheadAttention: nnq.MultiheadAttention}}


def no_observer_set():
    """Module classes that get no output observer (their outputs are observed inside)."""
    from lucid.ao.nn import quantizable as nnqa

    return {nnqa.LSTM, nnqa.MultiheadAttention}


def get_default_dynamic_quant_module_mappings():
    from lucid.ao.nn.quantized import dynamic as nnqd

    from lucid.ao.nn import quantized as nnq

    # embeddings are quantized weight-only, by the static modules (PyTorch maps them so too)
    return {nn.Linear: nnqd.Linear, nn.LSTM: nnqd.LSTM, nn.GRU: nnqd.GRU, nn.LSTMCell: nnqd.LSTMCell,
            nn.RNNCell: nnqd.RNNCell, nn.GRUCell: nnqd.GRUCell, LinearReLU: nnqd.LinearReLU,
            nn.EmbeddingBag: nnq.EmbeddingBag, nn.Embedding: nnq.Embedding}


def get_default_static_quant_module_mappings():
    from lucid.ao.nn import quantized as nnq

    from .qat import Linear as QATLinear, LinearReLU as QATLinearReLU

    from lucid.ao.nn.intrinsic import qat as nniqat
    from lucid.ao.nn import qat as nnqat

    from .fuse_modules import ConvReLU1d, ConvReLU2d, ConvReLU3d

    mapping = {QuantStub: nnq.Quantize, DeQuantStub: nnq.DeQuantize, nn.Linear: nnq.Linear, nn.ReLU: nnq.ReLU,
               LinearReLU: nnq.LinearReLU, QATLinear: nnq.Linear, QATLinearReLU: nnq.LinearReLU,
            nn.Conv1d: nnq.Conv1d, nn.Conv2d: nnq.Conv2d, nn.Conv3d: nnq.Conv3d, ConvReLU1d: nnq.ConvReLU1d,
            ConvReLU2d: nnq.ConvReLU2d, ConvReLU3d: nnq.ConvReLU3d, nnq.FloatFunctional: nnq.QFunctional,
            nniqat.LinearBn1d: nnq.Linear, nn.Embedding: nnq.Embedding, nn.EmbeddingBag: nnq.EmbeddingBag}
    from lucid.ao.nn.quantized.activation import BNReLU2d as QBNReLU2d, BNReLU3d as QBNReLU3d

    from .fuse_modules import BNReLU2d, BNReLU3d

    mapping.update({nn.ReLU6: nnq.ReLU6, nn.Hardswish: nnq.Hardswish, nn.LeakyReLU: nnq.LeakyReLU, nn.ELU: nnq.ELU,
                    nn.BatchNorm2d: nnq.BatchNorm2d, nn.BatchNorm3d: nnq.BatchNorm3d, BNReLU2d: QBNReLU2d,
                    BNReLU3d: QBNReLU3d, nn.Dropout: nnq.Dropout, nn.PReLU: nnq.PReLU, nn.LayerNorm: nnq.LayerNorm,
                    nn.GroupNorm: nnq.GroupNorm, nn.InstanceNorm1d: nnq.InstanceNorm1d,
                    nn.InstanceNorm2d: nnq.InstanceNorm2d, nn.InstanceNorm3d: nnq.InstanceNorm3d,
                    NonDynamicallyQuantizableLinear: nnq.Linear})
    for n in (1, 2, 3):
        mapping[getattr(nn, f"ConvTranspose{n}d")] = getattr(nnq, f"ConvTranspose{n}d")
        conv, conv_relu = getattr(nnq, f"Conv{n}d"), getattr(nnq, f"ConvReLU{n}d")
        mapping.update({getattr(nnqat, f"Conv{n}d"): conv, getattr(nniqat, f"ConvReLU{n}d"): conv_relu,
                        getattr(nniqat, f"ConvBn{n}d"): conv, getattr(nniqat, f"ConvBnReLU{n}d"): conv_relu})
    return mapping


def get_default_qat_module_mappings():
    from lucid.ao.nn.intrinsic import qat as nniqat
    from lucid.ao.nn import qat as nnqat

    import importlib

    fm = importlib.import_module("lucid.ao.quantization.fuse_modules")  # the package's name is the function
    from .qat import Linear as QATLinear, LinearReLU as QATLinearReLU

    mapping = {nn.Linear: QATLinear, LinearReLU: QATLinearReLU, fm.LinearBn1d: nniqat.LinearBn1d,
               NonDynamicallyQuantizableLinear: QATLinear}
    for n in (1, 2, 3):
        mapping.update({getattr(nn, f"Conv{n}d"): getattr(nnqat, f"Conv{n}d"),
                        getattr(fm, f"ConvReLU{n}d"): getattr(nniqat, f"ConvReLU{n}d"),
                        getattr(fm, f"ConvBn{n}d"): getattr(nniqat, f"ConvBn{n}d"),
                        getattr(fm, f"ConvBnReLU{n}d"): getattr(nniqat, f"ConvBnReLU{n}d")})
    return mapping


def get_embedding_qat_module_mappings():
    """The default QAT mapping plus ``nn.Embedding`` / ``nn.EmbeddingBag`` to their QAT forms
    (use with ``default_embedding_qat_qconfig``)."""
    from lucid.ao.nn import qat as nnqat

    mapping = get_default_qat_module_mappings()
    mapping.update({nn.EmbeddingBag: nnqat.EmbeddingBag, nn.Embedding: nnqat.Embedding})
    return mapping


def get_embedding_static_quant_module_mappings():
    """The default static mapping plus the QAT embeddings to the quantized ones."""
    from lucid.ao.nn import qat as nnqat
    from lucid.ao.nn import quantized as nnq

    mapping = get_default_static_quant_module_mappings()
    mapping.update({nnqat.EmbeddingBag: nnq.EmbeddingBag, nnqat.Embedding: nnq.Embedding})
    return mapping


def propagate_qconfig_(module, qconfig_dict=None, prepare_custom_config_dict=None):
    """Give every submodule a ``qconfig``: its own, else its type's or its name's entry of
    ``qconfig_dict``, else its parent's (PyTorch's rule)."""
    qconfig_dict = {} if qconfig_dict is None else qconfig_dict

    def visit(mod, parent, prefix):
        qconfig = qconfig_dict.get(type(mod), parent)
        qconfig = qconfig_dict.get(prefix, qconfig)
        qconfig = getattr(mod, "qconfig", qconfig)
        _check_qconfig(qconfig, mod)
        mod.qconfig = qconfig
        for name, child in mod.named_children():
            visit(child, qconfig, f"{prefix}.{name}" if prefix else name)

    visit(module, None, "")


def _check_qconfig(qconfig, mod):
    """PyTorch's ``_assert_valid_qconfig``: its transposed convolutions take no per-channel weight."""
    if qconfig is None or qconfig.weight is None:
        return
    if isinstance(mod, (nn.ConvTranspose1d, nn.ConvTranspose2d, nn.ConvTranspose3d)):
        from .observer import MovingAveragePerChannelMinMaxObserver, PerChannelMinMaxObserver

        if isinstance(qconfig.weight(), (PerChannelMinMaxObserver, MovingAveragePerChannelMinMaxObserver)):
            raise AssertionError("Per channel weight observer is not supported yet for ConvTranspose{n}d.")


def quantize_dynamic(model, qconfig_spec=None, dtype=lucid.qint8, mapping=None, inplace=False):
    """Replace the layers named by ``qconfig_spec`` with dynamically quantized ones: int8
    weights, activations quantized per call (PyTorch's ``quantize_dynamic``).

    Parameters
    ----------
    model : nn.Module
    qconfig_spec : set of module types, or dict of type/name -> QConfig, optional
        Linear, LSTM, GRU and the three RNN cells by default (PyTorch's default).
    dtype : lucid.qint8, lucid.float16 or lucid.quint8
        quint8 quantizes ``nn.Embedding``/``nn.EmbeddingBag`` weights per row (by default those
        two; PyTorch's quint4x2 has no Lucid dtype yet).
    mapping : dict, optional
        Float module type -> dynamic module class.
    inplace : bool
        Change ``model`` itself instead of a deep copy.

    Examples
    --------
    >>> import lucid, lucid.nn as nn
    >>> from lucid.ao.quantization import quantize_dynamic
    >>> q = quantize_dynamic(nn.Sequential(nn.Linear(4, 3), nn.ReLU()), {nn.Linear}, dtype=lucid.qint8)
    >>> print(q)
    Sequential(
      (0): DynamicQuantizedLinear(in_features=4, out_features=3, dtype=lucid.qint8, qscheme=lucid.per_tensor_affine)
      (1): ReLU()
    )
    """
    if qconfig_spec is None:
        recurrent = (nn.Linear, nn.LSTM, nn.GRU, nn.LSTMCell, nn.RNNCell, nn.GRUCell)
        if dtype == lucid.qint8:
            qconfig_spec = dict.fromkeys(recurrent, default_dynamic_qconfig)
        elif dtype == lucid.float16:
            qconfig_spec = dict.fromkeys(recurrent, float16_dynamic_qconfig)
        elif dtype == lucid.quint8:
            qconfig_spec = dict.fromkeys((nn.EmbeddingBag, nn.Embedding), float_qparams_weight_only_qconfig)
        else:
            raise ValueError(f"Don't know how to quantize with default settings for {dtype}. Provide full "
                             "qconfig please")
    elif isinstance(qconfig_spec, set):
        if dtype == lucid.qint8:
            default = default_dynamic_qconfig
        elif dtype == lucid.float16:
            default = float16_dynamic_qconfig
        elif dtype == lucid.quint8:
            default = float_qparams_weight_only_qconfig
        else:
            raise RuntimeError(f"Unknown dtype specified for quantize_dynamic: {dtype}")
        qconfig_spec = dict(zip(qconfig_spec, itertools.repeat(default)))
    if mapping is None:
        mapping = get_default_dynamic_quant_module_mappings()
    if not inplace:
        model = copy.deepcopy(model)
    model.eval()
    propagate_qconfig_(model, qconfig_spec)
    convert(model, mapping, inplace=True)
    return model


def swap_module(mod, mapping, custom_module_class_mapping=None, use_precomputed_fake_quant=False):
    """``mod`` swapped for its quantized form when it has a qconfig: an observed custom module
    by ``custom_module_class_mapping[type(mod)].from_observed``, others by
    ``mapping[type(mod)].from_float``; else ``mod`` itself. Forward hooks other than the
    observer's move to the new module.

    Examples
    --------
    >>> import lucid.nn as nn
    >>> from lucid.ao.quantization import swap_module
    >>> swap_module(nn.ReLU(), {}, {}) is not None
    True
    """
    custom = custom_module_class_mapping or {}
    if getattr(mod, "qconfig", None) is None:
        return mod
    if type(mod) in custom:
        new = custom[type(mod)].from_observed(mod)
    elif type(mod) in mapping:
        new = mapping[type(mod)].from_float(mod)
    else:
        return mod
    for hook in mod._forward_pre_hooks.values():
        new.register_forward_pre_hook(hook)
    for hook in mod._forward_hooks.values():
        if hook is not _observe_output:
            new.register_forward_hook(hook)
    return new


def convert(module, mapping=None, inplace=False, remove_qconfig=True, is_reference=False,
            convert_custom_config_dict=None, use_precomputed_fake_quant=False):
    """Swap each module that has a ``qconfig`` and a type in ``mapping`` (the static one by
    default) for its quantized form, using its observers' statistics."""
    if mapping is None:
        mapping = get_default_static_quant_module_mappings()
    if convert_custom_config_dict is None:
        convert_custom_config_dict = get_default_custom_config_dict()
    custom = convert_custom_config_dict.get("observed_to_quantized_custom_module_class", {})
    if not inplace:
        module = copy.deepcopy(module)
    _convert(module, mapping, custom)
    if remove_qconfig:
        _remove_qconfig(module)
    return module


def _convert(module, mapping, custom=None):
    custom = custom or {}
    swaps = {}
    for name, child in module.named_children():
        # fused and observed custom modules are swapped whole
        if type(child) not in mapping and type(child) not in custom and not isinstance(child, _FusedModule):
            _convert(child, mapping, custom)
        swaps[name] = swap_module(child, mapping, custom)
    for name, new in swaps.items():
        if new is not module._modules[name]:
            module._modules[name] = new


def _remove_qconfig(module):
    for child in module.children():
        _remove_qconfig(child)
    if "qconfig" in module.__dict__:
        del module.__dict__["qconfig"]
    post = module._modules.get("activation_post_process")
    if post is not None and getattr(module, "_observer_hook", None) is not None:
        module._observer_hook.remove()
        del module._modules["activation_post_process"]
        del module.__dict__["_observer_hook"]


def _observe_output(module, args, output):
    return module.activation_post_process(output)


def _propagation_types():
    # nn.ReLU and nn.Dropout keep their input's scale and zero point, so PyTorch gives them no
    # observer (one would add a fake quantization step in QAT); convert still swaps them
    types = set(get_default_static_quant_module_mappings()) | set(get_default_qat_module_mappings().values())
    return types - {nn.ReLU, nn.Dropout}


def _add_observers(module, allowed, custom=None):
    from lucid.ao.nn.quantized import FloatFunctional

    custom = custom or {}
    if isinstance(module, FloatFunctional):  # its ops call activation_post_process themselves
        if getattr(module, "qconfig", None) is not None:
            module.activation_post_process = module.qconfig.activation()
        return
    for name, child in list(module.named_children()):
        if (type(child) in custom and getattr(child, "qconfig", None) is not None
                and not isinstance(child, FloatFunctional)):
            observed = custom[type(child)].from_float(child)
            module._modules[name] = observed
            if not isinstance(observed, tuple(no_observer_set())):
                _insert_observer(observed)
        elif child.training and type(child) in _special_act_post_process():
            _insert_observer(child, _special_act_post_process()[type(child)])
        elif isinstance(child, _FusedModule) or (hasattr(child, "weight_fake_quant") and type(child) in allowed):
            _insert_observer(child)  # a QAT layer is observed as one unit (not its batch norm)
        else:
            _add_observers(child, allowed, custom)
    leaf = not any(True for _ in module.children()) or hasattr(module, "weight_fake_quant")
    if leaf and type(module) in allowed and not isinstance(module, DeQuantStub):
        _insert_observer(module)


def _special_act_post_process():
    # PyTorch's DEFAULT_MODULE_TO_ACT_POST_PROCESS: in training these outputs get their fixed
    # quantization parameters' fake quantization, not the qconfig's observer
    from .fake_quantize import (default_fixed_qparams_range_0to1_fake_quant as zero_one,
                                default_fixed_qparams_range_neg1to1_fake_quant as neg_one)

    return {nn.Hardsigmoid: zero_one, nn.Sigmoid: zero_one, nn.Softmax: zero_one, nn.Tanh: neg_one}


def _insert_observer(module, factory=None):
    if getattr(module, "qconfig", None) is None or "activation_post_process" in module._modules:
        return
    module.add_module("activation_post_process", (factory or module.qconfig.activation)())
    module.__dict__["_observer_hook"] = module.register_forward_hook(_observe_output)


def prepare(model, inplace=False, allow_list=None, observer_non_leaf_module_list=None,
            prepare_custom_config_dict=None):
    """Attach an observer (the qconfig's activation factory) to the output of every module
    that ``convert`` will quantize; run calibration data through the result, then ``convert``."""
    if prepare_custom_config_dict is None:
        prepare_custom_config_dict = get_default_custom_config_dict()
    custom = prepare_custom_config_dict.get("float_to_observed_custom_module_class", {})
    if not inplace:
        model = copy.deepcopy(model)
    propagate_qconfig_(model, qconfig_dict=None)
    allowed = set(allow_list) if allow_list is not None else _propagation_types()
    _add_observers(model, allowed | set(observer_non_leaf_module_list or ()), custom)
    return model


def prepare_qat(model, mapping=None, inplace=False):
    """Swap layers for their fake-quantizing training forms (weights through the qconfig's
    weight fake-quantize) and observe activations with fake quantization: train, then
    ``convert``."""
    if not model.training:
        raise AssertionError("prepare_qat only works on models in training mode")
    if mapping is None:
        mapping = get_default_qat_module_mappings()
    if not inplace:
        model = copy.deepcopy(model)
    propagate_qconfig_(model)
    convert(model, mapping=mapping, inplace=True, remove_qconfig=False)
    # PyTorch observes every module the mapping made (the QAT embeddings' NoopObserver included)
    prepare(model, inplace=True, observer_non_leaf_module_list=set(mapping.values()))
    return model


def quantize_qat(model, run_fn, run_args, inplace=False):
    """``prepare_qat`` (in training mode), ``run_fn(model, *run_args)`` to train, ``convert``.

    Examples
    --------
    >>> import lucid, lucid.nn as nn
    >>> from lucid.ao import quantization as tq
    >>> m = tq.QuantWrapper(nn.Linear(2, 2))
    >>> m.qconfig = tq.default_qat_qconfig
    >>> q = tq.quantize_qat(m, lambda mod, x: mod(x), [lucid.randn(4, 2)])
    >>> type(q.module).__name__
    'Linear'
    """
    if not inplace:
        model = copy.deepcopy(model)
    model.train()
    prepare_qat(model, inplace=True)
    run_fn(model, *run_args)
    convert(model, inplace=True)
    return model


def quantize(model, run_fn, run_args, mapping=None, inplace=False):
    """``prepare``, ``run_fn(model, *run_args)`` to calibrate, ``convert``."""
    if not inplace:
        model = copy.deepcopy(model)
    model.eval()
    prepare(model, inplace=True)
    run_fn(model, *run_args)
    convert(model, mapping, inplace=True)
    return model
