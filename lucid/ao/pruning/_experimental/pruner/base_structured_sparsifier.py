"""``BaseStructuredSparsifier`` (PyTorch's ``torch.ao.pruning._experimental.pruner``):
row (output channel) masks during training, then ``prune()`` makes the layers smaller.

NOTE [Structured pruning flow]
``prepare`` puts a ``FakeStructuredSparsity`` (a bool mask of rows, all True) on each
configured weight; on a Linear or Conv2d the bias moves to ``module._bias`` and a
``BiasHook`` adds it back after the forward, so the bias of a pruned channel is still
known when ``prune()`` folds it into the next layer. ``step()`` sets masks (subclasses'
``update_mask``). ``prune()`` traces the model with ``lucid.fx.symbolic_trace``, finds each
parametrized layer's pattern (NOTE [Pruning patterns]) and calls its function (NOTE
[Structured pruning shrinks layers]); every mask must have been consumed, and the traced
GraphModule is returned (its submodules are the model's, pruned in place).
"""
from __future__ import annotations

from itertools import chain
from operator import getitem

from .....nn.utils import parametrize
from ...sparsifier.base_sparsifier import BaseSparsifier
from .match_utils import apply_match
from .parametrization import BiasHook, FakeStructuredSparsity, module_contains_param
from .prune_functions import (prune_conv2d, prune_conv2d_activation_conv2d, prune_conv2d_activation_pool_conv2d,
                              prune_conv2d_conv2d, prune_conv2d_pool_activation_conv2d,
                              prune_conv2d_pool_flatten_linear, prune_linear, prune_linear_activation_linear,
                              prune_linear_linear, prune_lstm_output_layernorm_linear, prune_lstm_output_linear)

__all__ = ["BaseStructuredSparsifier"]

_ACTIVATION_NAMES = ("relu", "rrelu", "hardtanh", "relu6", "sigmoid", "hardsigmoid", "tanh", "silu", "mish",
                     "hardswish", "elu", "celu", "selu", "hardshrink", "leaky_relu", "logsigmoid", "softplus",
                     "prelu", "softsign", "tanhshrink", "gelu")
_ACTIVATION_MODULE_NAMES = ("ReLU", "RReLU", "Hardtanh", "ReLU6", "Sigmoid", "Hardsigmoid", "Tanh", "SiLU", "Mish",
                            "Hardswish", "ELU", "CELU", "SELU", "Hardshrink", "LeakyReLU", "LogSigmoid", "Softplus",
                            "PReLU", "Softsign", "Tanhshrink", "GELU")


def _nn():
    import lucid.nn as nn

    return nn


def _get_supported_structured_pruning_modules():
    nn = _nn()
    return {nn.Linear, nn.Conv2d, nn.LSTM}


def _get_supported_activation_functions():
    import lucid.nn.functional as F

    return [getattr(F, name) for name in _ACTIVATION_NAMES]


def _get_supported_activation_modules():
    nn = _nn()
    return [getattr(nn, name) for name in _ACTIVATION_MODULE_NAMES]


def _get_default_structured_pruning_patterns():
    """PyTorch's default patterns, in its order (NOTE [Pruning patterns])."""
    import lucid
    import lucid.nn.functional as F

    nn = _nn()
    patterns = {
        (nn.Linear, "output"): prune_linear,
        (nn.Linear, nn.Linear): prune_linear_linear,
        (nn.Conv2d, "output"): prune_conv2d,
        (nn.Conv2d, nn.Conv2d): prune_conv2d_conv2d,
        (nn.LSTM, getitem, nn.Linear): prune_lstm_output_linear,
        (nn.LSTM, getitem, nn.LayerNorm, nn.Linear): prune_lstm_output_layernorm_linear,
    }
    pools = (nn.AvgPool2d, F.avg_pool2d, nn.MaxPool2d, F.max_pool2d)
    for act in chain(_get_supported_activation_functions(), _get_supported_activation_modules()):
        patterns[(nn.Linear, act, nn.Linear)] = prune_linear_activation_linear
        patterns[(nn.Conv2d, act, nn.Conv2d)] = prune_conv2d_activation_conv2d
        for pool in pools:
            patterns[(nn.Conv2d, act, pool, nn.Conv2d)] = prune_conv2d_activation_pool_conv2d
        for pool in pools:
            patterns[(nn.Conv2d, pool, act, nn.Conv2d)] = prune_conv2d_pool_activation_conv2d
        for pool in (nn.AdaptiveAvgPool2d, nn.AdaptiveMaxPool2d):
            for flatten in (nn.Flatten, lucid.flatten):
                patterns[(nn.Conv2d, pool, flatten, nn.Linear)] = prune_conv2d_pool_flatten_linear
    return patterns


class BaseStructuredSparsifier(BaseSparsifier):
    """Base class of the structured pruners: subclasses implement ``update_mask``, setting
    rows of the bool ``FakeStructuredSparsity`` mask to False; ``prune()`` then removes
    those rows (See NOTE [Structured pruning flow]).

    Parameters
    ----------
    defaults : dict or None
        Group defaults; ``prune_bias`` (default True) drops the pruned channels' bias
        instead of folding it into the next layer.
    patterns : dict, optional
        ``{pattern: function}`` (default: PyTorch's Linear/Conv2d/LSTM patterns).

    Examples
    --------
    >>> import lucid, lucid.nn as nn
    >>> from lucid.ao.pruning._experimental.pruner import BaseStructuredSparsifier
    >>> class DropRow1(BaseStructuredSparsifier):
    ...     def update_mask(self, module, tensor_name, **kwargs):
    ...         module.parametrizations[tensor_name][0].mask[1] = False
    >>> model = nn.Sequential(nn.Linear(4, 3), nn.ReLU(), nn.Linear(3, 2))
    >>> pruner = DropRow1({"prune_bias": False})
    >>> pruner.prepare(model, [{"tensor_fqn": "0.weight"}])
    >>> pruner.step()
    >>> x = lucid.randn(5, 4)
    >>> before = model(x)
    >>> pruned = pruner.prune()
    >>> tuple(model[0].weight.shape), tuple(model[2].weight.shape), bool(lucid.allclose(pruned(x), before))
    ((2, 4), (2, 2), True)
    """

    def __init__(self, defaults, patterns=None):
        super().__init__(defaults)
        self.patterns = _get_default_structured_pruning_patterns() if patterns is None else patterns

    def make_config_from_model(self, model, SUPPORTED_MODULES=None):
        """Every Linear, Conv2d and LSTM weight (in PyTorch's order)."""
        if SUPPORTED_MODULES is None:
            SUPPORTED_MODULES = _get_supported_structured_pruning_modules()
        super().make_config_from_model(model, SUPPORTED_MODULES=SUPPORTED_MODULES)

    def _prepare(self, *args, **kwargs):
        """Row masks on every group's tensor, and the bias hooks of Linear/Conv2d layers."""
        import lucid

        nn = _nn()
        for group in self.groups:
            module, name = group["module"], group["tensor_name"]
            parametrization = group.get("parametrization", FakeStructuredSparsity)
            if parametrize.is_parametrized(module, name) and any(
                    isinstance(p, parametrization) for p in module.parametrizations[name]):
                continue
            tensor = getattr(module, name)
            mask = group.get("mask", None)
            if mask is None:
                mask = lucid.ones(tensor.shape[0], dtype=lucid.bool, device=tensor.device)
            self.state[group["tensor_fqn"]]["mask"] = mask
            parametrize.register_parametrization(module, name, parametrization(mask))
            if isinstance(module, (nn.Linear, nn.Conv2d)):
                prune_bias = group.get("prune_bias", True)
                if module.bias is not None:
                    module.register_parameter("_bias", nn.Parameter(module.bias.detach()))
                    module.bias = None
                    module.prune_bias = prune_bias
                module.register_forward_hook(BiasHook(module.parametrizations.weight[0], prune_bias))

    def prune(self):
        """Trace the model, shrink every matched layer and return the traced GraphModule."""
        from lucid.fx import symbolic_trace

        self.traced = symbolic_trace(self.model)
        modules = dict(self.traced.named_modules())
        for node in list(self.traced.graph.nodes):
            first = modules.get(node.target) if isinstance(node.target, str) else None
            if first is None or not module_contains_param(first, FakeStructuredSparsity):
                continue
            for pattern, convert_fn in self.patterns.items():
                matched = apply_match(modules, pattern, node, [])
                if matched is None:
                    continue
                block = [modules.get(n.target) if n.op == "call_module" else n.target for n in matched
                         if n.op in ("call_module", "call_function")]
                convert_fn(*block)
                break
        left = [name for name, module in self.traced.named_modules()
                if module_contains_param(module, FakeStructuredSparsity)]
        if left:
            raise RuntimeError(f"prune: {left} still contain FakeStructuredSparsity parametrizations: no pruning "
                               "pattern matched them")
        self.traced.graph.lint()
        self.traced.recompile()
        return self.traced
