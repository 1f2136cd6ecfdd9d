"""FX graph mode quantization (PyTorch's ``torch.ao.quantization.quantize_fx``): trace the
model, then fuse, observe and convert on its graph, so no ``QuantStub`` or hand-written
fusion list is needed.

Post-training static quantization::

    prepared = prepare_fx(model.eval(), get_default_qconfig_mapping("x86"), example_inputs)
    for x in calibration_data:
        prepared(x)
    quantized = convert_fx(prepared)

Which ops become quantized kernels, which keep their input's quantization and which stay in
floating point: NOTE [FX quantization patterns] (``fx/_patterns.py``); how the observed graph
is lowered: NOTE [Lowering an observed graph] (``fx/convert.py``).

Differences from PyTorch: the fixed-range ops (sigmoid, tanh, hardsigmoid, softmax), average
pooling, ``mean``, transposed convolutions, embeddings and RNN cells stay in floating point;
``convert_to_reference_fx`` keeps the float modules with quantized-then-dequantized weights
instead of PyTorch's reference module classes; a functional op's qconfig comes from the
global and object-type entries only (Lucid's tracer records no module stack).
"""
from __future__ import annotations

import copy

from .fx import convert as _convert, fuse as _fuse, prepare as _prepare

__all__ = ["fuse_fx", "prepare_fx", "prepare_qat_fx", "convert_fx", "convert_to_reference_fx"]


def _unsupported(fn, **options):
    # custom configs and backend configs would change what gets quantized: refuse them rather
    # than quietly quantize by the defaults
    for name, value in options.items():
        if value:
            raise NotImplementedError(f"{fn}: {name} is not supported in Lucid (only the default native "
                                      "backend patterns; see lucid.ao.quantization.quantize_fx)")


def fuse_fx(model, fuse_custom_config=None, backend_config=None):
    """Trace ``model`` and fuse its conv (+ bn) (+ relu), linear (+ relu), bn + relu chains
    (eval mode: batch norm folded into the conv).

    Examples
    --------
    >>> from lucid import nn
    >>> from lucid.ao.quantization.quantize_fx import fuse_fx
    >>> m = nn.Sequential(nn.Conv2d(1, 2, 3), nn.BatchNorm2d(2), nn.ReLU()).eval()
    >>> type(fuse_fx(m).get_submodule("0")).__name__
    'ConvReLU2d'
    """
    _unsupported("fuse_fx", fuse_custom_config=fuse_custom_config, backend_config=backend_config)
    return _fuse(copy.deepcopy(model), is_qat=False)


def prepare_fx(model, qconfig_mapping, example_inputs, prepare_custom_config=None, _equalization_config=None,
               backend_config=None):
    """Trace and fuse an eval-mode ``model`` and insert observers (``activation_post_process_N``
    modules) where ``qconfig_mapping`` asks for quantization; run calibration data through the
    result, then call :func:`convert_fx`.

    Parameters
    ----------
    model : nn.Module
    qconfig_mapping : QConfigMapping or dict
        ``get_default_qconfig_mapping(backend)``, or a mapping whose ``None`` entries keep parts of
        the model in floating point; a dynamic qconfig (``default_dynamic_qconfig``) asks for
        dynamic quantization of Linear layers.
    example_inputs : tuple
        Accepted for PyTorch compatibility (tracing is symbolic).

    Examples
    --------
    >>> import lucid
    >>> from lucid import nn
    >>> from lucid.ao.quantization import get_default_qconfig_mapping
    >>> from lucid.ao.quantization.quantize_fx import prepare_fx, convert_fx
    >>> _ = lucid.manual_seed(0)
    >>> m = nn.Sequential(nn.Linear(4, 3), nn.ReLU()).eval()
    >>> p = prepare_fx(m, get_default_qconfig_mapping("x86"), (lucid.randn(2, 4),))
    >>> _ = p(lucid.randn(8, 4))
    >>> q = convert_fx(p)
    >>> type(q.get_submodule("0")).__name__, q(lucid.randn(2, 4)).dtype
    ('LinearReLU', lucid.float32)
    """
    _unsupported("prepare_fx", prepare_custom_config=prepare_custom_config, _equalization_config=_equalization_config,
                 backend_config=backend_config)
    return _prepare(model, qconfig_mapping, False, example_inputs)


def prepare_qat_fx(model, qconfig_mapping, example_inputs, prepare_custom_config=None, backend_config=None):
    """``prepare_fx`` for quantization-aware training: a training-mode ``model``; conv + bn
    (+ relu) become QAT ConvBn modules, Linear / Conv their QAT forms with fake-quantized
    weights, and activations get the qconfig's fake quantization. Train, then ``convert_fx``.

    Examples
    --------
    >>> import lucid
    >>> from lucid import nn
    >>> from lucid.ao.quantization import get_default_qat_qconfig_mapping
    >>> from lucid.ao.quantization.quantize_fx import prepare_qat_fx
    >>> m = nn.Sequential(nn.Conv2d(1, 2, 3), nn.BatchNorm2d(2), nn.ReLU()).train()
    >>> p = prepare_qat_fx(m, get_default_qat_qconfig_mapping(), (lucid.randn(1, 1, 5, 5),))
    >>> type(p.get_submodule("0")).__name__
    'ConvBnReLU2d'
    """
    if not model.training:
        raise AssertionError("prepare_qat_fx: the model must be in training mode (call model.train())")
    _unsupported("prepare_qat_fx", prepare_custom_config=prepare_custom_config, backend_config=backend_config)
    return _prepare(model, qconfig_mapping, True, example_inputs)


def convert_fx(graph_module, convert_custom_config=None, _remove_qconfig=True, qconfig_mapping=None,
               backend_config=None, keep_original_weights=False):
    """Turn a prepared and calibrated (or trained) GraphModule into a quantized one:
    ``quantize_per_tensor`` where float values enter quantized ops, quantized modules and
    functions, ``dequantize`` where quantized values leave them.

    Examples
    --------
    >>> import lucid
    >>> from lucid import nn
    >>> from lucid.ao.quantization import get_default_qconfig_mapping
    >>> from lucid.ao.quantization.quantize_fx import prepare_fx, convert_fx
    >>> p = prepare_fx(nn.Sequential(nn.Linear(2, 2)).eval(), get_default_qconfig_mapping(), (lucid.ones(1, 2),))
    >>> _ = p(lucid.randn(4, 2))
    >>> [n.op for n in convert_fx(p).graph.nodes]
    ['placeholder', 'get_attr', 'get_attr', 'call_function', 'call_module', 'call_method', 'output']
    """
    _unsupported("convert_fx", convert_custom_config=convert_custom_config, qconfig_mapping=qconfig_mapping,
                 backend_config=backend_config, keep_original_weights=keep_original_weights)
    return _convert(copy.deepcopy(graph_module), reference=False)


def convert_to_reference_fx(graph_module, convert_custom_config=None, _remove_qconfig=True, qconfig_mapping=None,
                            backend_config=None):
    """The reference quantized model: every observed value goes through ``quantize_per_tensor``
    then ``dequantize`` and the ops stay in floating point, with quantized-then-dequantized
    weights (what a backend would pattern-match).

    Examples
    --------
    >>> import lucid
    >>> from lucid import nn
    >>> from lucid.ao.quantization import get_default_qconfig_mapping
    >>> from lucid.ao.quantization.quantize_fx import prepare_fx, convert_to_reference_fx
    >>> p = prepare_fx(nn.Sequential(nn.Linear(2, 2)).eval(), get_default_qconfig_mapping(), (lucid.ones(1, 2),))
    >>> _ = p(lucid.randn(4, 2))
    >>> [n.target for n in convert_to_reference_fx(p).graph.nodes if n.op == "call_method"]
    ['dequantize', 'dequantize']
    """
    _unsupported("convert_to_reference_fx", convert_custom_config=convert_custom_config,
                 qconfig_mapping=qconfig_mapping, backend_config=backend_config)
    return _convert(copy.deepcopy(graph_module), reference=True)
