"""What FX graph mode quantization knows about each node: PyTorch's native backend config
(``torch.ao.quantization.backend_config.native``) cut down to the ops Lucid has quantized
kernels for, and the module fusions ``fuse_fx`` performs.

NOTE [FX quantization patterns]
A node is one of:
- WEIGHTED: a Linear / Conv module (plain, fused with ReLU / BatchNorm, or its QAT form) or
  ``F.linear`` / ``F.conv{1,2,3}d`` (the weight argument gets the qconfig's weight observer),
  optionally followed by a ReLU (module, ``F.relu``, ``lucid.relu`` or ``.relu()``) that
  becomes part of it: input and output observed, lowered to a quantized module or function;
- BINARY: ``add`` / ``mul`` (operator or ``lucid.``), optionally + ReLU: both tensor inputs and
  the output observed, lowered to a quantized add / mul; with a number operand it is SHARE
  (PyTorch's ``quantized.add(x, 1.0)`` picks its own output parameters);
- REQUANT: modules with their own quantized form (Hardswish, LeakyReLU, ELU, PReLU, BatchNorm2d/3d,
  LayerNorm, InstanceNorm1d/2d/3d, Softmax):
  input and output observed; ``nn.Upsample`` is observed so too but runs in float;
- SHARE: ops that keep their input's scale and zero point (pooling, ReLU, clamp, flatten,
  reshapes, ``cat``): the output observer IS the input observer (one module called at both
  places, so it sees both tensors, as PyTorch's does), and after conversion the op runs on
  the quantized tensor; ``cat`` makes all its inputs share the first input's observer;
- REUSE: ``reshape`` (PyTorch's ``default_reuse_input_qconfig``): shares an observer only when
  its input already has one;
- FIXED: sigmoid / tanh / hardsigmoid (functions, methods, modules), whose quantized kernels
  have fixed output parameters: quantized only when the qconfig's activation is a
  ``FixedQParamsObserver`` (or its fake quantize) with the kernel's parameters (PyTorch's
  default mappings give them one), then the op runs on the quantized tensor;
- anything else runs in floating point, with a ``dequantize`` in front after conversion.
"""
from __future__ import annotations

import operator

import lucid
import lucid.nn.functional as F
from lucid import nn

from ..fuse_modules import BNReLU2d, BNReLU3d, fuse_known_modules
from ..qconfig_mapping import _hashable  # noqa: F401  (shared with prepare)

WEIGHTED, BINARY, REQUANT, SHARE, REUSE, FIXED = "weighted", "binary", "requant", "share", "reuse", "fixed"



def orig(fn):
    """The function a traced node records: once the dispatch protocol is on, ``lucid.add`` is
    a wrapper whose ``_lucid_original`` the tracer records (NOTE [Tracing without
    __torch_function__])."""
    return getattr(fn, "_lucid_original", fn)


def public(fn):
    """The dispatching form of a recorded function, which quantized tensors reach."""
    from lucid import overrides

    overrides._activate()
    return overrides._wrap_function(orig(fn))


_RELU_FUNCS = {orig(F.relu), orig(lucid.relu)}
WEIGHTED_FUNCS = {orig(F.linear): "linear", orig(F.conv1d): "conv1d", orig(F.conv2d): "conv2d",
                  orig(F.conv3d): "conv3d"}
BINARY_FUNCS = {operator.add: "add", orig(lucid.add): "add", operator.mul: "mul", orig(lucid.mul): "mul"}
SHARE_MODULES = (nn.AdaptiveAvgPool1d, nn.AdaptiveAvgPool2d, nn.AdaptiveAvgPool3d, nn.MaxPool1d, nn.MaxPool2d,
                 nn.MaxPool3d, nn.ReLU, nn.ReLU6, nn.Hardtanh, nn.Identity, nn.AvgPool1d, nn.AvgPool2d, nn.AvgPool3d,
                 nn.Dropout)
# observed like REQUANT ops but run in float between a dequantize and a quantize (PyTorch's x86
# config does that with nn.Upsample, while F.interpolate shares its input's parameters)
FLOAT_REQUANT_MODULES = (nn.Upsample,)
SHARE_FUNCS = {orig(f) for f in (F.adaptive_avg_pool1d, F.adaptive_avg_pool2d, F.adaptive_avg_pool3d, F.max_pool1d,
                                 F.max_pool2d, F.max_pool3d, F.relu, F.relu6, F.hardtanh, lucid.relu, lucid.clamp,
                                 lucid.flatten, lucid.transpose, lucid.squeeze, lucid.unsqueeze, lucid.narrow,
                                 lucid.cat, F.avg_pool1d, F.avg_pool2d, F.avg_pool3d, lucid.mean)} | \
    {orig(F.interpolate)}
CAT = orig(lucid.cat)
SHARE_METHODS = {"contiguous", "clamp", "detach", "detach_", "narrow", "permute", "relu", "relu_", "repeat",
                 "squeeze", "transpose", "unsqueeze", "view", "mean"}
# the fixed-qparams ops: the public function each runs as after conversion
FIXED_FUNCS = {orig(lucid.sigmoid): "sigmoid", orig(F.sigmoid): "sigmoid", orig(lucid.tanh): "tanh",
               orig(F.tanh): "tanh", orig(F.hardsigmoid): "hardsigmoid"}
FIXED_METHODS = {"sigmoid": "sigmoid", "sigmoid_": "sigmoid", "tanh": "tanh", "tanh_": "tanh"}
FIXED_MODULES = {nn.Sigmoid: "sigmoid", nn.Tanh: "tanh", nn.Hardsigmoid: "hardsigmoid"}


def fixed_name(node, modules):
    """``"sigmoid"``/``"tanh"``/``"hardsigmoid"`` for a fixed-qparams node, else None."""
    if node.op == "call_module":
        return FIXED_MODULES.get(type(modules.get(node.target)))
    if node.op == "call_function":
        return FIXED_FUNCS.get(orig(node.target)) if _hashable(node.target) else None
    return FIXED_METHODS.get(node.target) if node.op == "call_method" else None


def fixed_observer_ok(obs, name, dtype=None):
    """Whether ``obs`` (an observer or fake quantize) carries the fixed parameters of ``name``'s
    kernel (PyTorch ignores the qconfig of a fixed-qparams op otherwise)."""
    from lucid.ao.nn.quantized._qops import FIXED_QPARAMS

    from ..fake_quantize import FixedQParamsFakeQuantize
    from ..observer import FixedQParamsObserver

    if not isinstance(obs, (FixedQParamsObserver, FixedQParamsFakeQuantize)):
        return False
    dt = str(obs.dtype).split(".")[-1]
    if dt not in FIXED_QPARAMS[name]:
        return False
    scale, zp = FIXED_QPARAMS[name][dt]
    return float(obs.scale[0]) == scale and int(obs.zero_point[0]) == zp
REUSE_METHODS = {"reshape"}


def _static_mapping():
    from lucid.ao.nn import quantized as nnq

    from ..quantize import get_default_static_quant_module_mappings

    # PyTorch's FX config also lowers nn.Softmax, which its eager mapping leaves out
    return {**get_default_static_quant_module_mappings(), nn.Softmax: nnq.Softmax}


def _weighted_quantized_classes():
    from lucid.ao.nn import quantized as nnq

    return {nnq.Linear, nnq.LinearReLU, nnq.Conv1d, nnq.Conv2d, nnq.Conv3d, nnq.ConvReLU1d, nnq.ConvReLU2d,
            nnq.ConvReLU3d}


def is_relu(node, modules):
    if node.op == "call_function":
        return orig(node.target) in _RELU_FUNCS
    if node.op == "call_method":
        return node.target in ("relu", "relu_")
    return node.op == "call_module" and type(modules.get(node.target)) is nn.ReLU


def _single_user(node):
    users = list(node.users)
    return users[0] if len(users) == 1 else None


def classify(node, modules):
    """``(kind, relu_tail)`` of a node (see NOTE [FX quantization patterns]); kind None: float."""
    kind = _kind(node, modules)
    tail = None
    if kind in (WEIGHTED, BINARY) and node.op != "call_module":
        if kind == BINARY and not _two_tensors(node):
            return SHARE, None
        user = _single_user(node)
        if user is not None and is_relu(user, modules) and user.args and user.args[0] is node:
            tail = user
    return kind, tail


def _kind(node, modules):
    if fixed_name(node, modules) is not None:
        return FIXED
    if node.op == "call_module":
        mod = modules.get(node.target)
        if isinstance(mod, SHARE_MODULES) and type(mod) in (*SHARE_MODULES,):
            return SHARE
        if type(mod) in FLOAT_REQUANT_MODULES:
            return REQUANT
        qcls = _static_mapping().get(type(mod))
        if qcls is None:
            return None
        if qcls in _weighted_quantized_classes():
            return WEIGHTED
        return REQUANT if type(mod) in _REQUANT_MODULES else None
    if node.op == "call_function":
        target = orig(node.target)
        if target in WEIGHTED_FUNCS:
            return WEIGHTED
        if target in BINARY_FUNCS:
            return BINARY
        return SHARE if target in SHARE_FUNCS else None
    if node.op == "call_method":
        if node.target in SHARE_METHODS:
            return SHARE
        return REUSE if node.target in REUSE_METHODS else None
    return None


# PyTorch's x86 config lowers layer and instance norm but leaves GroupNorm in floating point
_REQUANT_MODULES = (nn.Hardswish, nn.LeakyReLU, nn.ELU, nn.BatchNorm2d, nn.BatchNorm3d, BNReLU2d, BNReLU3d,
                    nn.LayerNorm, nn.InstanceNorm1d, nn.InstanceNorm2d, nn.InstanceNorm3d, nn.Softmax, nn.PReLU)


def _is_tensor_arg(a):
    from lucid.fx import Node

    return isinstance(a, Node)


def _two_tensors(node):
    return len(node.args) >= 2 and _is_tensor_arg(node.args[0]) and _is_tensor_arg(node.args[1])


def get_arg(node, pos):
    i, j = pos
    return node.args[i] if j is None else node.args[i][j]


def activation_inputs(node, kind):
    """The argument positions (``(index, None)`` or, for ``cat``'s list, ``(0, i)``) whose
    values an activation observer watches."""
    if node.op == "call_function" and orig(node.target) is CAT:
        seq = node.args[0] if node.args else node.kwargs.get("tensors", ())
        return [(0, i) for i, a in enumerate(seq) if _is_tensor_arg(a)]
    if kind == BINARY:
        return [(i, None) for i in (0, 1) if _is_tensor_arg(node.args[i])]
    if kind == SHARE and node.op == "call_function" and orig(node.target) in BINARY_FUNCS:
        return [(i, None) for i in (0, 1) if i < len(node.args) and _is_tensor_arg(node.args[i])][:1]
    return [(0, None)] if node.args and _is_tensor_arg(node.args[0]) else []


# ---------------------------------------------------------------------------- fusion
_CONVS = (nn.Conv1d, nn.Conv2d, nn.Conv3d)
_BNS = {nn.Conv1d: nn.BatchNorm1d, nn.Conv2d: nn.BatchNorm2d, nn.Conv3d: nn.BatchNorm3d}


def fusion_chain(node, modules, is_qat=False):
    """The nodes ``fuse_fx`` folds into ``node``'s module: conv (+ bn) (+ relu), linear (+ relu
    or + bn1d: ``LinearBn1d`` for QAT), bn2d/3d + relu; ``[node]`` when nothing follows it."""
    if node.op != "call_module":
        return [node]
    mod = modules.get(node.target)
    chain = [node]
    nxt = _single_user(node)
    bn_type = _BNS.get(type(mod)) or (nn.BatchNorm1d if type(mod) is nn.Linear else None)
    if bn_type is not None and nxt is not None and nxt.op == "call_module" and \
            type(modules.get(nxt.target)) is bn_type:
        chain.append(nxt)
        nxt = _single_user(nxt)
        if type(mod) is nn.Linear:
            return chain
    can_relu = isinstance(mod, _CONVS) or type(mod) is nn.Linear or type(mod) in (nn.BatchNorm2d, nn.BatchNorm3d)
    if can_relu and nxt is not None and is_relu(nxt, modules) and nxt.args and nxt.args[0] is chain[-1]:
        chain.append(nxt)
    return chain


def fused_module(chain, modules, is_qat):
    """The fused module for a chain of nodes (a ReLU function becomes an ``nn.ReLU``)."""
    mods = [modules[n.target] if n.op == "call_module" else nn.ReLU() for n in chain]
    return fuse_known_modules(mods, is_qat=is_qat)[0]
