"""The functions that physically shrink the layers of a matched pattern (PyTorch's
``torch.ao.pruning._experimental.pruner.prune_functions``).

NOTE [Structured pruning shrinks layers]
For a pattern ``A -> (activation, pool, flatten ...) -> B``, ``A``'s row mask (its
``FakeStructuredSparsity``) selects the output channels ``A`` keeps: ``A``'s weight (and
bias) lose the other rows and ``B``'s weight loses the matching input columns. A pruned
channel of ``A`` is not silent in the masked model: it outputs its bias (through the
activation), a constant that ``B`` multiplied by its weights. Unless ``prune_bias``, that
constant is folded into ``B``'s bias (``b_B += W_B[:, pruned] @ act(b_A[pruned])``, summed
over the kernel for a convolution), so the pruned model computes what the masked one did. A
convolution followed by a *padded* one cannot fold a constant (the padding's zeros break it),
so there ``A`` keeps its channels, with zero weights and their bias.
"""
from __future__ import annotations

from ....._core.grad_mode import no_grad
from .....nn.conv import Conv2d
from .....nn.linear import Linear
from .....nn.parameter import Parameter
from .....nn.utils import parametrize
from .parametrization import BiasHook, FakeStructuredSparsity

__all__ = ["prune_linear", "prune_linear_linear", "prune_linear_activation_linear", "prune_conv2d",
           "prune_conv2d_padded", "prune_conv2d_conv2d", "prune_conv2d_activation_conv2d",
           "prune_conv2d_pool_activation_conv2d", "prune_conv2d_activation_pool_conv2d",
           "prune_conv2d_pool_flatten_linear", "prune_lstm_output_linear", "prune_lstm_output_layernorm_linear"]


def _lucid():
    import lucid

    return lucid


def _remove_bias_handles(module):
    for key in [k for k, hook in module._forward_hooks.items() if isinstance(hook, BiasHook)]:
        del module._forward_hooks[key]


def _structured_mask(module, name="weight"):
    for p in module.parametrizations[name]:
        if isinstance(p, FakeStructuredSparsity):
            return p.mask
    raise RuntimeError(f"prune: {type(module).__name__}.{name} has no FakeStructuredSparsity")


def _weight_of(module):
    """The unmasked weight: the parametrization's ``original`` when there is one."""
    if parametrize.is_parametrized(module, "weight"):
        return module.parametrizations.weight.original
    return module.weight


def _keep_input_columns(module, mask):
    """Drop the input columns (dim 1) of ``module``'s weight where ``mask`` is False."""
    with no_grad():
        if parametrize.is_parametrized(module, "weight"):
            plist = module.parametrizations.weight
            plist.original = Parameter(plist.original[:, mask])
            width = plist.original.shape[1]
        else:
            module.weight = Parameter(module.weight[:, mask])
            width = module.weight.shape[1]
    if isinstance(module, Conv2d):
        module.in_channels = width
    else:
        module.in_features = width


def _get_adjusted_next_layer_bias(next_layer, pruned_biases, mask):
    """``next_layer``'s bias plus the contribution of the pruned channels' constant outputs
    ``pruned_biases`` (NOTE [Structured pruning shrinks layers])."""
    scaling_weight = _weight_of(next_layer)[:, ~mask]
    if isinstance(next_layer, Conv2d):
        scaled = (scaling_weight * pruned_biases.reshape(1, -1, 1, 1)).sum(dim=(1, 2, 3))
    elif isinstance(next_layer, Linear):
        scaled = pruned_biases @ scaling_weight.transpose(0, 1)
    else:
        raise NotImplementedError(f"prune: type {type(next_layer).__name__} not supported yet.")
    own = getattr(next_layer, "_bias", None) if parametrize.is_parametrized(next_layer) else next_layer.bias
    return Parameter((scaled if own is None else scaled + own).detach())


def _prune_module_bias(module, mask):
    """Keep the bias entries of the kept channels."""
    original = getattr(module, "_bias", None)
    if original is None:
        original = module.bias
    if original is not None:
        module.bias = Parameter(original.detach()[mask])
    if hasattr(module, "_bias"):
        delattr(module, "_bias")


def _propagate_module_bias(module, mask):
    """Keep the kept channels' bias; return the pruned channels' (None without a bias)."""
    if module.bias is not None:
        module.bias = Parameter(module.bias.detach()[mask])
    elif getattr(module, "_bias", None) is not None:
        module.bias = Parameter(module._bias.detach()[mask])
    pruned = module._bias.detach()[~mask] if getattr(module, "_bias", None) is not None else None
    if hasattr(module, "_bias"):
        delattr(module, "_bias")
    return pruned


def _keep_output_rows(module):
    """Bake the mask into ``module.weight`` and drop the pruned rows; returns the mask."""
    mask = _structured_mask(module)
    with no_grad():
        parametrize.remove_parametrizations(module, "weight", leave_parametrized=True)
        module.weight = Parameter(module.weight[mask])
    if isinstance(module, Conv2d):
        module.out_channels = module.weight.shape[0]
    else:
        module.out_features = module.weight.shape[0]
    _remove_bias_handles(module)
    return mask


def _fold_or_prune_bias(first, mask, activation, next_layer):
    if getattr(first, "prune_bias", False):
        _prune_module_bias(first, mask)
        return
    pruned_biases = _propagate_module_bias(first, mask)
    if pruned_biases is not None and next_layer is not None:
        if activation is not None:
            pruned_biases = activation(pruned_biases)
        next_layer.bias = _get_adjusted_next_layer_bias(next_layer, pruned_biases, mask)


def prune_linear(linear):
    """A last Linear (followed by the output): drop its pruned rows."""
    mask = _keep_output_rows(linear)
    if getattr(linear, "prune_bias", False):
        _prune_module_bias(linear, mask)


def prune_linear_linear(linear1, linear2):
    prune_linear_activation_linear(linear1, None, linear2)


def prune_linear_activation_linear(linear1, activation, linear2):
    """Drop ``linear1``'s pruned rows and ``linear2``'s matching columns, folding the pruned
    biases into ``linear2`` (NOTE [Structured pruning shrinks layers])."""
    mask = _keep_output_rows(linear1)
    _fold_or_prune_bias(linear1, mask, activation, linear2)
    _keep_input_columns(linear2, mask)


def prune_conv2d(conv2d):
    """A last Conv2d: drop its pruned output channels."""
    mask = _keep_output_rows(conv2d)
    if getattr(conv2d, "prune_bias", False):
        _prune_module_bias(conv2d, mask)


def _is_padded(conv):
    padding = getattr(conv, "padding", 0)
    if isinstance(padding, str):
        return padding != "valid"
    return any(p > 0 for p in (padding if isinstance(padding, (tuple, list)) else (padding,)))


def prune_conv2d_padded(conv2d_1):
    """Before a padded conv: keep every channel (zero weights) and give the pruned channels
    their own bias back (NOTE [Structured pruning shrinks layers])."""
    mask = _structured_mask(conv2d_1)
    with no_grad():
        parametrize.remove_parametrizations(conv2d_1, "weight", leave_parametrized=True)
        own = getattr(conv2d_1, "_bias", None)
        if own is not None:
            own = own.detach()
            if getattr(conv2d_1, "prune_bias", False):  # as the BiasHook added it: pruned channels get none
                own = own * mask.to(dtype=own.dtype)
            if conv2d_1.bias is not None:  # a bias folded in from the layer before, plus its own
                conv2d_1.bias = Parameter(_lucid().where(mask, conv2d_1.bias.detach(), own))
            else:
                conv2d_1.bias = Parameter(own)
        elif conv2d_1.bias is not None:
            conv2d_1.bias = Parameter(conv2d_1.bias.detach() * mask.to(dtype=conv2d_1.bias.dtype))
    if hasattr(conv2d_1, "_bias"):
        delattr(conv2d_1, "_bias")
    _remove_bias_handles(conv2d_1)


def prune_conv2d_conv2d(conv2d_1, conv2d_2):
    prune_conv2d_activation_conv2d(conv2d_1, None, conv2d_2)


def prune_conv2d_activation_conv2d(conv2d_1, activation, conv2d_2):
    """Drop ``conv2d_1``'s pruned output channels and ``conv2d_2``'s matching input channels,
    unless ``conv2d_2`` is padded and ``conv2d_1`` has a bias (then see ``prune_conv2d_padded``)."""
    mask = _structured_mask(conv2d_1)
    has_bias = conv2d_1.bias is not None or getattr(conv2d_1, "_bias", None) is not None
    if _is_padded(conv2d_2) and has_bias:
        prune_conv2d_padded(conv2d_1)
        return
    mask = _keep_output_rows(conv2d_1)
    _fold_or_prune_bias(conv2d_1, mask, activation, conv2d_2)
    _keep_input_columns(conv2d_2, mask)


def prune_conv2d_pool_activation_conv2d(c1, pool, activation, c2):
    prune_conv2d_activation_conv2d(c1, activation, c2)


def prune_conv2d_activation_pool_conv2d(c1, activation, pool, c2):
    prune_conv2d_activation_conv2d(c1, activation, c2)


def prune_conv2d_pool_flatten_linear(conv2d, pool, flatten, linear):
    """Conv2d -> adaptive pool -> flatten -> Linear: each conv channel is ``linear_in /
    channels`` consecutive Linear inputs."""
    mask = _keep_output_rows(conv2d)
    linear_ic, conv2d_oc = _weight_of(linear).shape[1], mask.shape[0]
    if linear_ic % conv2d_oc != 0:
        raise AssertionError(f"prune: flattening from dimensions {conv2d_oc} to {linear_ic} not supported")
    scale = linear_ic // conv2d_oc
    flat_mask = mask.repeat_interleave(scale)
    if getattr(conv2d, "prune_bias", False):
        _prune_module_bias(conv2d, mask)
    else:
        pruned_biases = _propagate_module_bias(conv2d, mask)
        if pruned_biases is not None:
            linear.bias = _get_adjusted_next_layer_bias(linear, pruned_biases.repeat_interleave(scale), flat_mask)
    _keep_input_columns(linear, flat_mask)


def prune_lstm_output_linear(lstm, getitem, linear):
    prune_lstm_output_layernorm_linear(lstm, getitem, None, linear)


def _keep_gate_rows(lstm, name, mask):
    """Bake the mask into ``lstm.<name>`` and drop its pruned rows (and the bias rows)."""
    with no_grad():
        parametrize.remove_parametrizations(lstm, name, leave_parametrized=True)
        setattr(lstm, name, Parameter(getattr(lstm, name)[mask]))
        bias_name = name.replace("weight", "bias")
        if getattr(lstm, bias_name, None) is not None:
            setattr(lstm, bias_name, Parameter(getattr(lstm, bias_name)[mask]))


def prune_lstm_output_layernorm_linear(lstm, getitem, layernorm, linear):
    """LSTM -> output[0] -> (LayerNorm) -> Linear: per layer, the masked gate rows of
    ``weight_ih``/``weight_hh`` go; ``weight_hh`` loses the matching hidden columns of each
    gate, the next layer's ``weight_ih`` (or the Linear and LayerNorm) the output-gate ones."""
    hidden = lstm.hidden_size
    for i in range(lstm.num_layers):
        if parametrize.is_parametrized(lstm, f"weight_ih_l{i}"):
            _keep_gate_rows(lstm, f"weight_ih_l{i}", lstm.parametrizations[f"weight_ih_l{i}"][0].mask)
        if not parametrize.is_parametrized(lstm, f"weight_hh_l{i}"):
            continue
        mask = lstm.parametrizations[f"weight_hh_l{i}"][0].mask
        gate_masks = [mask[g * hidden:(g + 1) * hidden] for g in range(4)]
        with no_grad():
            parametrize.remove_parametrizations(lstm, f"weight_hh_l{i}", leave_parametrized=True)
            weight = getattr(lstm, f"weight_hh_l{i}")
            blocks = [weight[g * hidden:(g + 1) * hidden][m][:, m] for g, m in enumerate(gate_masks)]
            setattr(lstm, f"weight_hh_l{i}", Parameter(_lucid().cat(blocks)))
            if getattr(lstm, f"bias_hh_l{i}", None) is not None:
                setattr(lstm, f"bias_hh_l{i}", Parameter(getattr(lstm, f"bias_hh_l{i}")[mask]))
        out_gate = gate_masks[3]
        if i + 1 == lstm.num_layers:
            lstm.hidden_size = int(gate_masks[0].sum())
            _keep_input_columns(linear, out_gate)
            if layernorm is not None:
                with no_grad():
                    layernorm.normalized_shape = (linear.in_features,)
                    layernorm.weight = Parameter(layernorm.weight[out_gate])
                    layernorm.bias = Parameter(layernorm.bias[out_gate])
        else:
            with no_grad():
                name = f"weight_ih_l{i + 1}"
                if parametrize.is_parametrized(lstm, name):
                    plist = lstm.parametrizations[name]
                    plist.original = Parameter(plist.original[:, out_gate])
                else:
                    setattr(lstm, name, Parameter(getattr(lstm, name)[:, out_gate]))
