"""pytorch/opacus's self-contained pure-PyTorch pieces run on Lucid (``import lucid as torch``):

- ``opacus/grad_sample/grad_sample_module.py`` ``GradSampleModule``: forward hooks capturing the
  activations, backward hooks turning the captured backprops into per-sample gradients
  (``create_or_accumulate_grad_sample`` summing the uses of a tied parameter within one pass,
  ``promote_current_grad_sample`` stacking passes into a list), ``rearrange_grad_samples`` (loss
  reduction ``mean``/``sum``, ``batch_first=False`` permuting the batch dimension first) and
  ``_get_batch_size``; ``utils/module_utils.py``'s ``trainable_modules``/``requires_grad`` and
  ``grad_sample/utils.py``'s ``register_grad_sampler``.
- The grad samplers ``linear.py``, ``conv.py`` (Conv1d through ``F.unfold``, Conv2d through
  ``unfold2d``'s ``as_strided``, Conv3d through ``unfold3d``'s ``Tensor.unfold``, groups by the
  einsum diagonal), ``embedding.py`` (``scatter_add_``), ``layer_norm.py``, ``group_norm.py`` and
  ``instance_norm.py``; ``utils/tensor_utils.py`` (``unfold2d``, ``unfold3d`` with
  ``filter_dilated_rows``, ``sum_over_all_but_batch_and_last_n``).
- ``grad_sample/functorch.py``: ``make_functional`` (a ``meta`` copy called through
  ``torch.func.functional_call``), ``prepare_layer``'s ``vmap(grad(...), in_dims=(None, 0, 0))``
  and ``ft_compute_per_sample_gradient``.
- ``optimizers/optimizer.py`` ``DPOptimizer``: ``clip_and_accumulate`` (per-sample norms over all
  parameters, clip factor ``max_grad_norm / (norm + 1e-6)`` clamped at 1), ``add_noise`` through
  ``_generate_noise`` with a seeded ``torch.Generator`` (plain and ``secure_mode``), ``scale_grad``,
  ``pre_step`` with ``signal_skip_step`` (virtual steps), gradient accumulation over several
  backward passes, and the ``_mark_as_processed``/``_check_processed_flag`` guard against a second
  step without ``zero_grad``; a frozen layer (``requires_grad_(False)``) is neither hooked nor updated.
- ``accountants/analysis/rdp.py`` (``compute_rdp``/``get_privacy_spent``, NumPy/SciPy only) and
  ``accountants/rdp.py``'s ``RDPAccountant``; ``privacy_engine.py``'s ``make_private`` flow at its
  core (wrap the model, wrap the optimizer with ``expected_batch_size = sample_rate * len(dataset)``,
  attach the accountant as the optimizer's step hook) trained a few steps.

Sizes are tiny and data synthetic; each page is a function of the module handed to it as ``torch``.
Checks without PyTorch: per-sample gradients equal to a Python loop of single-sample backward passes
(float64), ``unfold2d``/``unfold3d`` against NumPy loops, the DP step against a float64 NumPy
recomputation (noise 0, or replayed from a fresh generator with the same seed), hooks counted,
RDP against its closed forms (``q = 1``: ``alpha / (2 sigma^2)``; ``alpha = 2``:
``log(1 + q^2 (exp(1/sigma^2) - 1))``; fractional ``alpha``: a NumPy quadrature of
``E[(mu/mu0)^alpha]``) and the docstring's ``(0.336, 23)``. The ``*_torch_parity`` tests run the
same text on PyTorch with the same weights and data.

Adapted: ``opt_einsum.contract`` (linear.py) is ``torch.einsum``, which opacus used before it; the
samplers take the activation tensor itself (the ``GradSampleModule`` of this era), so ``embedding.py``
and ``functorch.py``'s ``activations[0]`` read the single tensor; ``layer_norm.py`` is its
dictionary-returning version; the backward hooks are ``register_full_backward_hook`` (current
opacus), and the stored text's non-full ``register_backward_hook`` is run too (a flag of the page);
``torch.backends.cudnn.deterministic`` toggling in ``embedding.py`` is dropped.
``make_private`` keeps only the wrapping and accounting (no Poisson ``DPDataLoader``, no
``secure_rng``).
"""
import logging
import math
import warnings
from collections.abc import Sequence
from functools import partial

import numpy as np
import pytest
from scipy import special

import lucid
import lucid.func  # noqa: F401
import lucid.nn  # noqa: F401
import lucid.nn.functional  # noqa: F401


def _np(t):
    return np.array(t.detach().cpu().numpy(), dtype=np.float64)  # a copy: parameters change in place


def _needs_cpu_default():
    if lucid.get_default_device().type != "cpu":
        pytest.skip("filter_dilated_rows reads the tensor through .numpy() by design")


# --------------------------------------------------------------------------- grad sample module

def gsm_page(torch, full_backward_hook=True):
    nn = torch.nn
    F = torch.nn.functional
    logger = logging.getLogger(__name__)

    # ---- opacus/utils/module_utils.py
    def parametrized_modules(module):
        yield from (
            (m_name, m)
            for (m_name, m) in module.named_modules()
            if any(p is not None for p in m.parameters(recurse=False))
        )

    def trainable_modules(module):
        yield from (
            (m_name, m)
            for (m_name, m) in parametrized_modules(module)
            if any(p.requires_grad for p in m.parameters(recurse=False))
        )

    def requires_grad(module, *, recurse: bool = False) -> bool:
        return any(p.requires_grad for p in module.parameters(recurse))

    # ---- opacus/utils/tensor_utils.py
    def sum_over_all_but_batch_and_last_n(tensor, n_dims: int):
        if tensor.dim() == n_dims + 1:
            return tensor
        else:
            dims = list(range(1, tensor.dim() - n_dims))
            return tensor.sum(dim=dims)

    def unfold2d(input, *, kernel_size, padding, stride, dilation):
        """
        See :meth:`~torch.nn.functional.unfold`
        """
        *shape, H, W = input.shape
        H_effective = (
            H + 2 * padding[0] - (kernel_size[0] + (kernel_size[0] - 1) * (dilation[0] - 1))
        ) // stride[0] + 1
        W_effective = (
            W + 2 * padding[1] - (kernel_size[1] + (kernel_size[1] - 1) * (dilation[1] - 1))
        ) // stride[1] + 1
        # F.pad's first argument is the padding of the *last* dimension
        input = F.pad(input, (padding[1], padding[1], padding[0], padding[0]))
        *shape_pad, H_pad, W_pad = input.shape
        strides = list(input.stride())
        strides = strides[:-2] + [
            W_pad * dilation[0],
            dilation[1],
            W_pad * stride[0],
            stride[1],
        ]
        out = input.as_strided(
            shape + [kernel_size[0], kernel_size[1], H_effective, W_effective], strides
        )

        return out.reshape(input.size(0), -1, H_effective * W_effective)

    def unfold3d(tensor, *, kernel_size, padding=0, stride=1, dilation=1):
        if len(tensor.shape) != 5:
            raise ValueError(
                f"Input tensor must be of the shape [B, C, D, H, W]. Got{tensor.shape}"
            )

        if isinstance(kernel_size, int):
            kernel_size = (kernel_size, kernel_size, kernel_size)

        if isinstance(padding, int):
            padding = (padding, padding, padding)

        if isinstance(stride, int):
            stride = (stride, stride, stride)

        if isinstance(dilation, int):
            dilation = (dilation, dilation, dilation)

        batch_size, channels, _, _, _ = tensor.shape

        # Input shape: (B, C, D, H, W)
        tensor = F.pad(
            tensor, (padding[2], padding[2], padding[1], padding[1], padding[0], padding[0])
        )
        # Output shape: (B, C, D+2*padding[2], H+2*padding[1], W+2*padding[0])

        dilated_kernel_size = (
            kernel_size[0] + (kernel_size[0] - 1) * (dilation[0] - 1),
            kernel_size[1] + (kernel_size[1] - 1) * (dilation[1] - 1),
            kernel_size[2] + (kernel_size[2] - 1) * (dilation[2] - 1),
        )

        tensor = tensor.unfold(dimension=2, size=dilated_kernel_size[0], step=stride[0])
        tensor = tensor.unfold(dimension=3, size=dilated_kernel_size[1], step=stride[1])
        tensor = tensor.unfold(dimension=4, size=dilated_kernel_size[2], step=stride[2])

        if dilation != (1, 1, 1):
            tensor = filter_dilated_rows(tensor, dilation, dilated_kernel_size, kernel_size)

        # Output shape: (B, C, D_out, H_out, W_out, kernel_size[0], kernel_size[1], kernel_size[2])
        # For D_out, H_out, W_out definitions see :class:`torch.nn.Unfold`

        tensor = tensor.permute(0, 2, 3, 4, 1, 5, 6, 7)
        # Output shape: (B, D_out, H_out, W_out, C, kernel_size[0], kernel_size[1], kernel_size[2])

        tensor = tensor.reshape(batch_size, -1, channels * np.prod(kernel_size)).transpose(
            1, 2
        )
        # Output shape: (B, D_out * H_out * W_out, C * kernel_size[0] * kernel_size[1] * kernel_size[2]

        return tensor

    def filter_dilated_rows(tensor, dilation, dilated_kernel_size, kernel_size):
        kernel_rank = len(kernel_size)

        indices_to_keep = [
            list(range(0, dilated_kernel_size[i], dilation[i])) for i in range(kernel_rank)
        ]

        tensor_np = tensor.numpy()

        axis_offset = len(tensor.shape) - kernel_rank

        for dim in range(kernel_rank):
            tensor_np = np.take(tensor_np, indices_to_keep[dim], axis=axis_offset + dim)

        return torch.Tensor(tensor_np)

    # ---- opacus/grad_sample/grad_sample_module.py
    OPACUS_PARAM_MONKEYPATCH_ATTRS = ["_forward_counter", "_current_grad_sample"]

    def create_or_accumulate_grad_sample(*, param, grad_sample, max_batch_len: int) -> None:
        if hasattr(param, "_current_grad_sample"):
            param._current_grad_sample[: grad_sample.shape[0]] += grad_sample
        else:
            param._current_grad_sample = torch.zeros(
                torch.Size([max_batch_len]) + grad_sample.shape[1:],
                device=grad_sample.device,
                dtype=grad_sample.dtype,
            )
            param._current_grad_sample[: grad_sample.shape[0]] = grad_sample

    def promote_current_grad_sample(p) -> None:
        if p.requires_grad:
            if p.grad_sample is not None:
                if isinstance(p.grad_sample, list):
                    p.grad_sample.append(p._current_grad_sample)
                else:
                    p.grad_sample = [p.grad_sample, p._current_grad_sample]
            else:
                p.grad_sample = p._current_grad_sample

            del p._current_grad_sample

    class GradSampleModule(nn.Module):
        r"""
        Extends nn.Module so that its parameter tensors have an extra field called .grad_sample.
        """
        GRAD_SAMPLERS = {}

        def __init__(self, m, *, batch_first=True, loss_reduction="mean", strict: bool = True):
            super().__init__()

            errors = self.validate(module=m, strict=strict)
            if errors and not strict:
                logger.info(
                    f"GradSampleModule found the following errors: {errors}."
                    "Using non-strict mode, continuing"
                )

            self._module = m
            self.hooks_enabled = False
            self.batch_first = batch_first
            self.loss_reduction = loss_reduction
            self.add_hooks(loss_reduction=loss_reduction, batch_first=batch_first)

            for p in self.parameters():
                p.grad_sample = None
                p._forward_counter = 0

        def __getattr__(self, item):
            try:
                return super().__getattr__(item)
            except AttributeError as e:
                submodules = dict(self._module.named_modules())
                if item and item in submodules:
                    return submodules[item]
                raise e

        def forward(self, *args, **kwargs):
            return self._module(*args, **kwargs)

        def zero_grad(self, set_to_none: bool = False):
            self.set_grad_sample_to_none()
            super().zero_grad(set_to_none)

        def set_grad_sample_to_none(self):
            for p in self.parameters():
                p.grad_sample = None

        def del_grad_sample(self):
            for p in self.parameters():
                del p.grad_sample

        def to_standard_module(self):
            self._close()
            return self._module

        def add_hooks(self, *, loss_reduction: str = "mean", batch_first: bool = True) -> None:
            if hasattr(self._module, "autograd_grad_sample_hooks"):
                raise ValueError("Trying to add hooks twice to the same model")
            else:
                self._module.autograd_grad_sample_hooks = []
                self.autograd_grad_sample_hooks = self._module.autograd_grad_sample_hooks

            for _module_name, module in trainable_modules(self._module):
                if type(module) in self.GRAD_SAMPLERS:
                    self.autograd_grad_sample_hooks.append(
                        module.register_forward_hook(self.capture_activations_hook)
                    )

                    register_backward_hook = (
                        module.register_full_backward_hook if full_backward_hook
                        else module.register_backward_hook  # the stored text's non-full hook
                    )
                    self.autograd_grad_sample_hooks.append(
                        register_backward_hook(
                            partial(
                                self.capture_backprops_hook,
                                loss_reduction=loss_reduction,
                                batch_first=batch_first,
                            )
                        )
                    )
            self.enable_hooks()

        def remove_hooks(self) -> None:
            self.disable_hooks()

            if not hasattr(self, "autograd_grad_sample_hooks"):
                raise ValueError("Asked to remove hooks, but no hooks found")
            else:
                while self.autograd_grad_sample_hooks:
                    handle = self.autograd_grad_sample_hooks.pop()
                    handle.remove()
                delattr(self, "autograd_grad_sample_hooks")
                delattr(self._module, "autograd_grad_sample_hooks")

        def disable_hooks(self) -> None:
            self.hooks_enabled = False

        def enable_hooks(self) -> None:
            self.hooks_enabled = True

        def __repr__(self):
            return f"GradSampleModule({self._module.__repr__()})"

        def _close(self):
            self.del_grad_sample()
            self.remove_hooks()
            self._clean_up_attributes()

        def _clean_up_attributes(self):
            for attr in OPACUS_PARAM_MONKEYPATCH_ATTRS:
                for p in self.parameters():
                    if hasattr(p, attr):
                        delattr(p, attr)

        def capture_activations_hook(self, module, forward_input, _forward_output):
            if (
                not requires_grad(module)
                or not module.training
                or not torch.is_grad_enabled()
            ):
                return

            if not self.hooks_enabled:
                return

            if not hasattr(module, "activations"):
                module.activations = []
            module.activations.append(forward_input[0].detach())  # pyre-ignore

            for p in module.parameters():
                p._forward_counter += 1

        def capture_backprops_hook(
            self, module, _forward_input, forward_output, loss_reduction: str, batch_first: bool
        ):
            if not self.hooks_enabled:
                return

            backprops = forward_output[0].detach()
            activations, backprops = self.rearrange_grad_samples(
                module=module,
                backprops=backprops,
                loss_reduction=loss_reduction,
                batch_first=batch_first,
            )
            grad_sampler_fn = self.GRAD_SAMPLERS[type(module)]
            grad_samples = grad_sampler_fn(module, activations, backprops)
            for param, gs in grad_samples.items():
                create_or_accumulate_grad_sample(
                    param=param, grad_sample=gs, max_batch_len=module.max_batch_len
                )

            # Detect end of current batch processing and switch accumulation
            # mode from sum to stacking. Used for RNNs and tied parameters
            # (See #417 for details)
            for p in module.parameters():
                p._forward_counter -= 1
                if p._forward_counter == 0:
                    promote_current_grad_sample(p)

            if len(module.activations) == 0:
                if hasattr(module, "max_batch_len"):
                    del module.max_batch_len

        def rearrange_grad_samples(self, *, module, backprops, loss_reduction: str, batch_first: bool):
            if not hasattr(module, "activations"):
                raise ValueError(
                    f"No activations detected for {type(module)},"
                    " run forward after add_hooks(model)"
                )

            batch_dim = 0 if batch_first else 1

            activations = module.activations.pop()

            if not hasattr(module, "max_batch_len"):
                # For packed sequences, max_batch_len is set in the forward of the model (e.g. the LSTM)
                # Otherwise we infer it here
                module.max_batch_len = _get_batch_size(
                    module=module,
                    grad_sample=activations,
                    batch_dim=batch_dim,
                )

            n = module.max_batch_len
            if loss_reduction == "mean":
                backprops = backprops * n
            elif loss_reduction == "sum":
                backprops = backprops
            else:
                raise ValueError(
                    f"loss_reduction = {loss_reduction}. Only 'sum' and 'mean' losses are supported"
                )

            # No matter where the batch dimension was, .grad_samples will *always* put it in the first dim
            if batch_dim != 0:
                activations = activations.permute(
                    [batch_dim] + [x for x in range(activations.dim()) if x != batch_dim]
                )
                backprops = backprops.permute(
                    [batch_dim] + [x for x in range(backprops.dim()) if x != batch_dim]
                )

            return activations, backprops

        def state_dict(self, *args, **kwargs):
            ret_state_dict = {
                f"_module.{key}": value
                for key, value in self._module.state_dict(*args, **kwargs).items()
            }
            return ret_state_dict

        @classmethod
        def is_supported(cls, module) -> bool:
            return type(module) in cls.GRAD_SAMPLERS

        @classmethod
        def validate(cls, module, *, strict: bool = False):
            errors = []
            errors.extend(
                [
                    NotImplementedError(
                        f"Model contains a trainable layer "
                        f"that Opacus doesn't currently support({m_name}:{m}). "
                        f"Please implement and register grad sampler for this layer. "
                        f"(See opacus.grad_sample.utils.register_grad_sampler)"
                    )
                    for m_name, m in trainable_modules(module)
                    if not GradSampleModule.is_supported(m)
                ]
            )
            # raise or return errors as needed
            if strict and len(errors) > 0:
                raise NotImplementedError(errors)
            else:
                return errors

    def _get_batch_size(*, module, grad_sample, batch_dim: int) -> int:
        max_batch_len = 0
        for out in module.activations:
            if out.shape[batch_dim] > max_batch_len:
                max_batch_len = out.shape[batch_dim]

        max_batch_len = max(max_batch_len, grad_sample.shape[batch_dim])
        return max_batch_len

    # ---- opacus/grad_sample/utils.py
    def register_grad_sampler(target_class_or_classes):
        def decorator(f):
            target_classes = (
                target_class_or_classes
                if isinstance(target_class_or_classes, Sequence)
                else [target_class_or_classes]
            )
            for target_class in target_classes:
                GradSampleModule.GRAD_SAMPLERS[target_class] = f
            return f

        return decorator

    # ---- opacus/grad_sample/linear.py
    @register_grad_sampler(nn.Linear)
    def compute_linear_grad_sample(layer, activations, backprops):
        ret = {}
        if layer.weight.requires_grad:
            gs = torch.einsum("n...i,n...j->nij", backprops, activations)
            ret[layer.weight] = gs
        if layer.bias is not None and layer.bias.requires_grad:
            ret[layer.bias] = torch.einsum("n...k->nk", backprops)
        return ret

    # ---- opacus/grad_sample/conv.py
    @register_grad_sampler([nn.Conv1d, nn.Conv2d, nn.Conv3d])
    def compute_conv_grad_sample(layer, activations, backprops):
        n = activations.shape[0]
        # get A and B in shape depending on the Conv layer
        if type(layer) == nn.Conv2d:
            activations = unfold2d(
                activations,
                kernel_size=layer.kernel_size,
                padding=layer.padding,
                stride=layer.stride,
                dilation=layer.dilation,
            )
            backprops = backprops.reshape(n, -1, activations.shape[-1])
        elif type(layer) == nn.Conv1d:
            # unfold doesn't work for 3D tensors; so force it to be 4D
            activations = activations.unsqueeze(-2)  # add the H dimension
            # set arguments to tuples with appropriate second element
            activations = torch.nn.functional.unfold(
                activations,
                (1, layer.kernel_size[0]),
                padding=(0, layer.padding[0]),
                stride=(1, layer.stride[0]),
                dilation=(1, layer.dilation[0]),
            )
            backprops = backprops.reshape(n, -1, activations.shape[-1])
        elif type(layer) == nn.Conv3d:
            activations = unfold3d(
                activations,
                kernel_size=layer.kernel_size,
                padding=layer.padding,
                stride=layer.stride,
                dilation=layer.dilation,
            )
            backprops = backprops.reshape(n, -1, activations.shape[-1])

        # n=batch_sz; o=num_out_channels; p=(num_in_channels/groups)*kernel_sz
        grad_sample = torch.einsum("noq,npq->nop", backprops, activations)
        # rearrange the above tensor and extract diagonals.
        grad_sample = grad_sample.view(
            n,
            layer.groups,
            -1,
            layer.groups,
            int(layer.in_channels / layer.groups),
            np.prod(layer.kernel_size),
        )
        grad_sample = torch.einsum("ngrg...->ngr...", grad_sample).contiguous()
        shape = [n] + list(layer.weight.shape)

        ret = {layer.weight: grad_sample.view(shape)}
        if layer.bias is not None:
            ret[layer.bias] = torch.sum(backprops, dim=2)

        return ret

    # ---- opacus/grad_sample/embedding.py
    @register_grad_sampler(nn.Embedding)
    def compute_embedding_grad_sample(layer, activations, backprops):
        ret = {}
        if layer.weight.requires_grad:
            batch_size = activations.shape[0]
            if batch_size == 0:
                ret[layer.weight] = torch.zeros_like(layer.weight).unsqueeze(0)
                return ret

            index = (
                activations.unsqueeze(-1)
                .expand(*activations.shape, layer.embedding_dim)
                .reshape(batch_size, -1, layer.embedding_dim)
            )
            grad_sample = torch.zeros(
                batch_size, *layer.weight.shape, device=layer.weight.device,
                dtype=layer.weight.dtype,
            )
            grad_sample.scatter_add_(
                1, index, backprops.reshape(batch_size, -1, layer.embedding_dim)
            )
            ret[layer.weight] = grad_sample
        return ret

    # ---- opacus/grad_sample/layer_norm.py
    @register_grad_sampler(nn.LayerNorm)
    def compute_layer_norm_grad_sample(layer, activations, backprops):
        ret = {}
        if layer.weight.requires_grad:
            ret[layer.weight] = sum_over_all_but_batch_and_last_n(
                F.layer_norm(activations, layer.normalized_shape, eps=layer.eps)
                * backprops,
                layer.weight.dim(),
            )
        if layer.bias.requires_grad:
            ret[layer.bias] = sum_over_all_but_batch_and_last_n(backprops, layer.bias.dim())
        return ret

    # ---- opacus/grad_sample/group_norm.py
    @register_grad_sampler(nn.GroupNorm)
    def compute_group_norm_grad_sample(layer, activations, backprops):
        ret = {}
        if layer.weight.requires_grad:
            gs = F.group_norm(activations, layer.num_groups, eps=layer.eps) * backprops
            ret[layer.weight] = torch.einsum("ni...->ni", gs)
        if layer.bias is not None and layer.bias.requires_grad:
            ret[layer.bias] = torch.einsum("ni...->ni", backprops)
        return ret

    # ---- opacus/grad_sample/instance_norm.py
    @register_grad_sampler([nn.InstanceNorm1d, nn.InstanceNorm2d, nn.InstanceNorm3d])
    def compute_instance_norm_grad_sample(layer, activations, backprops):
        ret = {}
        if layer.weight.requires_grad:
            gs = F.instance_norm(activations, eps=layer.eps) * backprops
            ret[layer.weight] = torch.einsum("ni...->ni", gs)
        if layer.bias is not None and layer.bias.requires_grad:
            ret[layer.bias] = torch.einsum("ni...->ni", backprops)
        return ret

    return dict(
        GradSampleModule=GradSampleModule,
        unfold2d=unfold2d,
        unfold3d=unfold3d,
        sum_over_all_but_batch_and_last_n=sum_over_all_but_batch_and_last_n,
        compute_linear_grad_sample=compute_linear_grad_sample,
        compute_layer_norm_grad_sample=compute_layer_norm_grad_sample,
        trainable_modules=trainable_modules,
    )


# --------------------------------------------------------------------------- functorch

def functorch_page(torch):
    import copy

    from lucid.func import grad, vmap  # ``from torch.func import functional_call, grad, vmap``

    if torch.__name__ == "torch":
        from torch.func import grad, vmap  # noqa: F811
    nn = torch.nn

    # https://gist.github.com/zou3519/7769506acc899d83ef1464e28f22e6cf
    def make_functional(mod, disable_autograd_tracking=False):
        params_dict = dict(mod.named_parameters())
        params_names = params_dict.keys()
        params_values = tuple(params_dict.values())

        stateless_mod = copy.deepcopy(mod)
        stateless_mod.to("meta")

        def fmodel(new_params_values, *args, **kwargs):
            new_params_dict = {
                name: value for name, value in zip(params_names, new_params_values)
            }
            return torch.func.functional_call(stateless_mod, new_params_dict, args, kwargs)

        if disable_autograd_tracking:
            params_values = tuple(p.detach() for p in params_values)
        return fmodel, params_values

    def prepare_layer(layer, batch_first=True):
        if len(list(layer.buffers())) > 0:
            raise NotImplementedError(
                "This layer has buffers and is not supported by Opacus"
            )
        if type(layer) is nn.EmbeddingBag:
            raise NotImplementedError("Functorch does not support EmbeddingBag yet")

        flayer, _ = make_functional(layer)

        def compute_loss_stateless_model(params, activations, backprops):
            if batch_first:
                batched_activations = activations.unsqueeze(0)
                batched_backprops = backprops.unsqueeze(0)
            else:
                # If batch_first is False, the batch dimension is the second dimension
                batched_activations = activations.unsqueeze(1)
                batched_backprops = backprops.unsqueeze(1)

            output = flayer(params, batched_activations)
            loss = (output * batched_backprops).sum()

            return loss

        ft_compute_grad = grad(compute_loss_stateless_model)
        # Note that the vmap is done on the first dimension, regardless of batch_first
        # This is because the activations and backprops given by the GradSampleModule
        # are always batch_first=True
        layer.ft_compute_sample_grad = vmap(ft_compute_grad, in_dims=(None, 0, 0))

    def ft_compute_per_sample_gradient(layer, activations, backprops):
        parameters = list(layer.parameters(recurse=True))
        if not hasattr(layer, "ft_compute_sample_grad"):
            prepare_layer(layer)

        per_sample_grads = layer.ft_compute_sample_grad(
            parameters, activations, backprops
        )

        ret = {}
        for i_p, p in enumerate(parameters):
            ret[p] = per_sample_grads[i_p]

        return ret

    return ft_compute_per_sample_gradient


# --------------------------------------------------------------------------- DP optimizer

def optimizer_page(torch):
    from typing import Callable, List, Optional

    Optimizer = torch.optim.Optimizer

    # ---- opacus/optimizers/utils.py
    def params(optimizer):
        ret = []
        for param_group in optimizer.param_groups:
            ret += [p for p in param_group["params"] if p.requires_grad]
        return ret

    def _generate_noise(std: float, reference, generator=None, secure_mode: bool = False):
        zeros = torch.zeros(reference.shape, device=reference.device)
        if std == 0:
            return zeros
        # TODO: handle device transfers: generator and reference tensor
        # could be on different devices
        if secure_mode:
            torch.normal(
                mean=0,
                std=std,
                size=(1, 1),
                device=reference.device,
                generator=generator,
            )  # generate, but throw away first generated Gaussian sample
            sum = zeros
            for i in range(4):
                sum += torch.normal(
                    mean=0,
                    std=std,
                    size=reference.shape,
                    device=reference.device,
                    generator=generator,
                )
            return sum / 2
        else:
            return torch.normal(
                mean=0,
                std=std,
                size=reference.shape,
                device=reference.device,
                generator=generator,
            )

    def _get_flat_grad_sample(p):
        if not hasattr(p, "grad_sample"):
            raise ValueError(
                "Per sample gradient not found. Are you using GradSampleModule?"
            )
        if isinstance(p.grad_sample, torch.Tensor):
            return p.grad_sample
        elif isinstance(p.grad_sample, list):
            return torch.cat(p.grad_sample, dim=0)
        else:
            raise ValueError(f"Unexpected grad_sample type: {type(p.grad_sample)}")

    def _mark_as_processed(obj):
        if isinstance(obj, torch.Tensor):
            obj._processed = True
        elif isinstance(obj, list):
            for x in obj:
                x._processed = True

    def _check_processed_flag_tensor(x):
        if hasattr(x, "_processed"):
            raise ValueError(
                "Gradients haven't been cleared since the last optimizer step. "
                "In order to obtain privacy guarantees you must call optimizer.zero_grad()"
                "on each step"
            )

    def _check_processed_flag(obj):
        if isinstance(obj, torch.Tensor):
            _check_processed_flag_tensor(obj)
        elif isinstance(obj, list):
            for x in obj:
                _check_processed_flag_tensor(x)

    class DPOptimizer(Optimizer):
        def __init__(
            self,
            optimizer,
            *,
            noise_multiplier: float,
            max_grad_norm: float,
            expected_batch_size: Optional[int],
            loss_reduction: str = "mean",
            generator=None,
            secure_mode=False,
        ):
            if loss_reduction not in ("mean", "sum"):
                raise ValueError(f"Unexpected value for loss_reduction: {loss_reduction}")

            if loss_reduction == "mean" and expected_batch_size is None:
                raise ValueError(
                    "You must provide expected batch size of the loss reduction is mean"
                )

            self.optimizer = optimizer
            self.noise_multiplier = noise_multiplier
            self.max_grad_norm = max_grad_norm
            self.loss_reduction = loss_reduction
            self.expected_batch_size = expected_batch_size
            self.step_hook = None
            self.generator = generator
            self.secure_mode = secure_mode

            self.param_groups = optimizer.param_groups
            self.state = optimizer.state
            self._step_skip_queue = []
            self._is_last_step_skipped = False

            for p in self.params:
                p.summed_grad = None

        def signal_skip_step(self, do_skip=True):
            self._step_skip_queue.append(do_skip)

        def _check_skip_next_step(self):
            if self._step_skip_queue:
                return self._step_skip_queue.pop(0)
            else:
                return False

        @property
        def params(self) -> List:
            return params(self)

        @property
        def grad_samples(self) -> List:
            ret = []
            for p in self.params:
                ret.append(_get_flat_grad_sample(p))
            return ret

        @property
        def accumulated_iterations(self) -> int:
            vals = []
            for p in self.params:
                if not hasattr(p, "grad_sample"):
                    raise ValueError(
                        "Per sample gradient not found. Are you using GradSampleModule?"
                    )
                if isinstance(p.grad_sample, torch.Tensor):
                    vals.append(1)
                elif isinstance(p.grad_sample, list):
                    vals.append(len(p.grad_sample))
                else:
                    raise ValueError(f"Unexpected grad_sample type: {type(p.grad_sample)}")

            if len(set(vals)) > 1:
                raise ValueError(
                    "Number of accumulated steps is inconsistent across parameters"
                )
            return vals[0]

        def attach_step_hook(self, fn: Callable):
            self.step_hook = fn

        def clip_and_accumulate(self):
            per_param_norms = [
                g.view(len(g), -1).norm(2, dim=-1) for g in self.grad_samples
            ]
            per_sample_norms = torch.stack(per_param_norms, dim=1).norm(2, dim=1)
            per_sample_clip_factor = (self.max_grad_norm / (per_sample_norms + 1e-6)).clamp(
                max=1.0
            )

            for p in self.params:
                _check_processed_flag(p.grad_sample)

                grad_sample = _get_flat_grad_sample(p)
                grad = torch.einsum("i,i...", per_sample_clip_factor, grad_sample)

                if p.summed_grad is not None:
                    p.summed_grad += grad
                else:
                    p.summed_grad = grad

                _mark_as_processed(p.grad_sample)

        def add_noise(self):
            for p in self.params:
                _check_processed_flag(p.summed_grad)

                noise = _generate_noise(
                    std=self.noise_multiplier * self.max_grad_norm,
                    reference=p.summed_grad,
                    generator=self.generator,
                    secure_mode=self.secure_mode,
                )
                p.grad = p.summed_grad + noise

                _mark_as_processed(p.summed_grad)

        def scale_grad(self):
            if self.loss_reduction == "mean":
                for p in self.params:
                    p.grad /= self.expected_batch_size * self.accumulated_iterations

        def zero_grad(self, set_to_none: bool = False):
            for p in self.params:
                p.grad_sample = None

                if not self._is_last_step_skipped:
                    p.summed_grad = None

            self.optimizer.zero_grad(set_to_none)

        def pre_step(self, closure=None):
            self.clip_and_accumulate()
            if self._check_skip_next_step():
                self._is_last_step_skipped = True
                return False

            self.add_noise()
            self.scale_grad()

            if self.step_hook:
                self.step_hook(self)

            self._is_last_step_skipped = False
            return True

        def step(self, closure=None):
            # TODO: handle closure call - we should do it before pre_step()
            if self.pre_step():
                return self.optimizer.step(closure)
            else:
                return None

    return dict(DPOptimizer=DPOptimizer, _generate_noise=_generate_noise, params=params)


# --------------------------------------------------------------------------- RDP (NumPy / SciPy only)

def _log_add(logx: float, logy: float) -> float:
    a, b = min(logx, logy), max(logx, logy)
    if a == -np.inf:  # adding 0
        return b
    # Use exp(a) + exp(b) = (exp(a - b) + 1) * exp(b)
    return math.log1p(math.exp(a - b)) + b  # log1p(x) = log(x + 1)


def _log_sub(logx: float, logy: float) -> float:
    if logx < logy:
        raise ValueError("The result of subtraction must be non-negative.")
    if logy == -np.inf:  # subtracting 0
        return logx
    if logx == logy:
        return -np.inf  # 0 is represented as -np.inf in the log space.

    try:
        # Use exp(x) - exp(y) = (exp(x - y) - 1) * exp(y).
        return math.log(math.expm1(logx - logy)) + logy  # expm1(x) = exp(x) - 1
    except OverflowError:
        return logx


def _compute_log_a_for_int_alpha(q: float, sigma: float, alpha: int) -> float:
    # Initialize with 0 in the log space.
    log_a = -np.inf

    for i in range(alpha + 1):
        log_coef_i = (
            math.log(special.binom(alpha, i))
            + i * math.log(q)
            + (alpha - i) * math.log(1 - q)
        )

        s = log_coef_i + (i * i - i) / (2 * (sigma**2))
        log_a = _log_add(log_a, s)

    return float(log_a)


def _compute_log_a_for_frac_alpha(q: float, sigma: float, alpha: float) -> float:
    # The two parts of A_alpha, integrals over (-inf,z0] and [z0, +inf), are
    # initialized to 0 in the log space:
    log_a0, log_a1 = -np.inf, -np.inf
    i = 0

    z0 = sigma**2 * math.log(1 / q - 1) + 0.5

    while True:  # do ... until loop
        coef = special.binom(alpha, i)
        log_coef = math.log(abs(coef))
        j = alpha - i

        log_t0 = log_coef + i * math.log(q) + j * math.log(1 - q)
        log_t1 = log_coef + j * math.log(q) + i * math.log(1 - q)

        log_e0 = math.log(0.5) + _log_erfc((i - z0) / (math.sqrt(2) * sigma))
        log_e1 = math.log(0.5) + _log_erfc((z0 - j) / (math.sqrt(2) * sigma))

        log_s0 = log_t0 + (i * i - i) / (2 * (sigma**2)) + log_e0
        log_s1 = log_t1 + (j * j - j) / (2 * (sigma**2)) + log_e1

        if coef > 0:
            log_a0 = _log_add(log_a0, log_s0)
            log_a1 = _log_add(log_a1, log_s1)
        else:
            log_a0 = _log_sub(log_a0, log_s0)
            log_a1 = _log_sub(log_a1, log_s1)

        i += 1
        if max(log_s0, log_s1) < -30:
            break

    return _log_add(log_a0, log_a1)


def _compute_log_a(q: float, sigma: float, alpha: float) -> float:
    if float(alpha).is_integer():
        return _compute_log_a_for_int_alpha(q, sigma, int(alpha))
    else:
        return _compute_log_a_for_frac_alpha(q, sigma, alpha)


def _log_erfc(x: float) -> float:
    return math.log(2) + special.log_ndtr(-x * 2**0.5)


def _compute_rdp(q: float, sigma: float, alpha: float) -> float:
    if q == 0:
        return 0

    # no privacy
    if sigma == 0:
        return np.inf

    if q == 1.0:
        return alpha / (2 * sigma**2)

    if np.isinf(alpha):
        return np.inf

    return _compute_log_a(q, sigma, alpha) / (alpha - 1)


def compute_rdp(*, q, noise_multiplier, steps, orders):
    if isinstance(orders, float):
        rdp = _compute_rdp(q, noise_multiplier, orders)
    else:
        rdp = np.array([_compute_rdp(q, noise_multiplier, order) for order in orders])

    return rdp * steps


def get_privacy_spent(*, orders, rdp, delta):
    orders_vec = np.atleast_1d(orders)
    rdp_vec = np.atleast_1d(rdp)

    if len(orders_vec) != len(rdp_vec):
        raise ValueError(
            f"Input lists must have the same length.\n"
            f"\torders_vec = {orders_vec}\n"
            f"\trdp_vec = {rdp_vec}\n"
        )

    eps = (
        rdp_vec
        - (np.log(delta) + np.log(orders_vec)) / (orders_vec - 1)
        + np.log((orders_vec - 1) / orders_vec)
    )

    # special case when there is no privacy
    if np.isnan(eps).all():
        return np.inf, np.nan

    idx_opt = np.nanargmin(eps)  # Ignore NaNs
    if idx_opt == 0 or idx_opt == len(eps) - 1:
        extreme = "smallest" if idx_opt == 0 else "largest"
        warnings.warn(
            f"Optimal order is the {extreme} alpha. Please consider expanding the range of alphas to get a tighter privacy bound."
        )
    return eps[idx_opt], orders_vec[idx_opt]


class RDPAccountant:
    DEFAULT_ALPHAS = [1 + x / 10.0 for x in range(1, 100)] + list(range(12, 64))

    def __init__(self):
        self.steps = []

    def step(self, noise_multiplier: float, sample_rate: float):
        if len(self.steps) >= 1:
            last_noise_multiplier, last_sample_rate, num_steps = self.steps.pop()
            if (
                last_noise_multiplier == noise_multiplier
                and last_sample_rate == sample_rate
            ):
                self.steps.append(
                    (last_noise_multiplier, last_sample_rate, num_steps + 1)
                )
            else:
                self.steps.append((last_noise_multiplier, last_sample_rate, num_steps))
                self.steps.append((noise_multiplier, sample_rate, 1))

        else:
            self.steps.append((noise_multiplier, sample_rate, 1))

    def get_privacy_spent(self, delta: float, alphas=None):
        if alphas is None:
            alphas = self.DEFAULT_ALPHAS

        rdp = sum(
            [
                compute_rdp(q=sample_rate, noise_multiplier=noise_multiplier, steps=num_steps, orders=alphas)
                for (noise_multiplier, sample_rate, num_steps) in self.steps
            ]
        )

        eps, best_alpha = get_privacy_spent(orders=alphas, rdp=rdp, delta=delta)

        return float(eps), float(best_alpha)

    def get_epsilon(self, delta: float, alphas=None):
        eps, _ = self.get_privacy_spent(delta, alphas)
        return eps


# --------------------------------------------------------------------------- helpers for the checks

def _loop_grads(torch, model, x, y, loss_fn):
    """Per-sample gradients by a Python loop of single-sample backward passes."""
    out = []
    for i in range(x.shape[0]):
        for p in model.parameters():
            p.grad = None
        loss_fn(model(x[i:i + 1]), y[i:i + 1]).backward()
        out.append([_np(p.grad) for p in model.parameters()])
    return [np.stack([o[k] for o in out]) for k in range(len(out[0]))]


def _conv_model(torch):
    nn = torch.nn
    return nn.Sequential(
        nn.Conv2d(2, 4, 3, padding=1, stride=2, groups=2),
        nn.GroupNorm(2, 4),
        nn.ReLU(),
        nn.Flatten(),
        nn.Linear(16, 5),
        nn.LayerNorm(5),
        nn.Linear(5, 3),
    ).double()


def _run_gsm_models(torch, reduction, full_backward_hook=True):
    """The same per-sample-gradient runs on ``torch``; returns numpy results."""
    torch.manual_seed(0)
    nn = torch.nn
    page = gsm_page(torch, full_backward_hook)
    GSM = page["GradSampleModule"]
    res = {}
    rng = np.random.default_rng(0)

    def put(model, seed):
        r = np.random.default_rng(seed)
        with torch.no_grad():
            for p in model.parameters():
                p.copy_(torch.tensor(r.standard_normal(tuple(p.shape)) * 0.5, dtype=p.dtype))
        return model

    ce = nn.CrossEntropyLoss(reduction=reduction)
    # conv / group norm / linear / layer norm
    model = put(_conv_model(torch), 1)
    x = torch.tensor(rng.standard_normal((3, 2, 4, 4)))
    y = torch.tensor([0, 2, 1])
    gsm = GSM(model, loss_reduction=reduction)
    ce(gsm(x), y).backward()
    res["conv"] = [_np(p.grad_sample) for p in model.parameters()]
    res["conv_grad"] = [_np(p.grad) for p in model.parameters()]
    gsm.to_standard_module()
    res["conv_loop"] = _loop_grads(torch, model, x, y, nn.CrossEntropyLoss())

    # conv1d / conv3d / instance norm
    m1 = put(nn.Sequential(nn.Conv1d(2, 3, 2, stride=1, padding=1, dilation=2), nn.InstanceNorm1d(3, affine=True),
                           nn.Flatten(), nn.Linear(15, 2)).double(), 2)
    x1 = torch.tensor(rng.standard_normal((3, 2, 5)))
    y1 = torch.tensor([1, 0, 1])
    m3 = put(nn.Sequential(nn.Conv3d(1, 2, 2, padding=(0, 1, 0)), nn.Flatten(), nn.Linear(36, 2)).double(), 3)
    x3 = torch.tensor(rng.standard_normal((2, 1, 3, 2, 4)))
    y3 = torch.tensor([1, 0])
    for name, m, xx, yy in (("c1", m1, x1, y1), ("c3", m3, x3, y3)):
        g = GSM(m, loss_reduction=reduction)
        ce(g(xx), yy).backward()
        res[name] = [_np(p.grad_sample) for p in m.parameters()]
        g.to_standard_module()
        res[name + "_loop"] = _loop_grads(torch, m, xx, yy, nn.CrossEntropyLoss())

    # embedding (a repeated index in one sample), a tied Linear used twice
    class Tied(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = nn.Embedding(6, 3)
            self.fc = nn.Linear(3, 3)

        def forward(self, t):
            return self.fc(torch.tanh(self.fc(self.emb(t)))).sum(dim=1)

    te = put(Tied().double(), 4)
    xt = torch.tensor([[1, 4, 1], [0, 5, 2], [3, 3, 3], [2, 1, 0]])
    yt = torch.tensor([0, 1, 2, 1])
    g = GSM(te, loss_reduction=reduction)
    ce(g(xt), yt).backward()
    res["tied_counter"] = [p._forward_counter for p in te.parameters()]
    res["tied"] = [_np(p.grad_sample) for p in te.parameters()]
    g.to_standard_module()
    res["tied_loop"] = _loop_grads(torch, te, xt, yt, nn.CrossEntropyLoss())
    return res


def _check_per_sample(res, reduction):
    for name in ("conv", "c1", "c3", "tied"):
        for got, want in zip(res[name], res[name + "_loop"]):
            # a mean loss over n samples: per-sample gradients rescaled by n are the single-sample ones
            np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-11)


@pytest.mark.parametrize("full_backward_hook", [True, False])
@pytest.mark.parametrize("reduction", ["mean", "sum"])
def test_grad_sample_module_per_sample_gradients(reduction, full_backward_hook):
    with warnings.catch_warnings():
        # non-full hooks on multi-node forwards warn (FutureWarning), as PyTorch's
        warnings.simplefilter("ignore", FutureWarning)
        res = _run_gsm_models(lucid, reduction, full_backward_hook)
    _check_per_sample(res, reduction)
    # the summed per-sample gradients are the batch gradient (divided by n for a mean loss)
    n = 3
    for gs, g in zip(res["conv"], res["conv_grad"]):
        np.testing.assert_allclose(gs.sum(0) / (n if reduction == "mean" else 1), g, rtol=1e-9, atol=1e-12)
    assert res["tied_counter"] == [0, 0, 0]
    # the embedding's per-sample gradient touches only the rows the sample used
    emb = res["tied"][0]
    assert np.all(emb[0, [0, 2, 3, 5]] == 0) and np.all(emb[0, [1, 4]] != 0)


def test_grad_sample_module_torch_parity():
    torch = pytest.importorskip("torch")
    for reduction in ("mean", "sum"):
        a = _run_gsm_models(lucid, reduction)
        b = _run_gsm_models(torch, reduction)
        for k in a:
            if k == "tied_counter":
                assert a[k] == b[k]
                continue
            for u, v in zip(a[k], b[k]):
                np.testing.assert_allclose(u, v, rtol=1e-9, atol=1e-11)


def _hooks_and_accumulation(torch):
    nn = torch.nn
    page = gsm_page(torch)
    GSM = page["GradSampleModule"]
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 2)).double()
    calls = {"fwd": 0, "bwd": 0}
    gsm = GSM(model, loss_reduction="sum")
    hooked = [m for _, m in page["trainable_modules"](model)]
    for m in hooked:
        m.register_forward_hook(lambda *a: calls.__setitem__("fwd", calls["fwd"] + 1))
        m.register_full_backward_hook(lambda *a: calls.__setitem__("bwd", calls["bwd"] + 1))
    x1 = torch.randn(4, 3, dtype=torch.float64)
    x2 = torch.randn(2, 3, dtype=torch.float64)
    out = gsm(x1)
    n_act = [len(m.activations) for m in hooked]
    counters = [p._forward_counter for p in model.parameters()]
    out.sum().backward()
    after = [len(m.activations) for m in hooked]
    gsm(x2).sum().backward()  # a second pass without zero_grad: the grad samples stack into a list
    snap = dict(calls)
    kinds = [type(p.grad_sample).__name__ for p in model.parameters()]
    shapes = [[tuple(t.shape) for t in p.grad_sample] for p in model.parameters()]
    w0 = model[0].weight
    flat = np.concatenate([_np(t) for t in w0.grad_sample])
    grad = _np(w0.grad)
    # no hooks while evaluating: nothing captured
    model.eval()
    with torch.no_grad():
        gsm(x1)
    no_grad_acts = [len(m.activations) for m in hooked]
    model.train()
    # batch_first=False: [T, B, F] inputs
    lin = nn.Linear(3, 2).double()
    g2 = GSM(lin, batch_first=False, loss_reduction="sum")
    xs = torch.randn(5, 2, 3, dtype=torch.float64)
    (g2(xs) ** 2).sum().backward()
    bf = [_np(lin.weight.grad_sample), _np(lin.bias.grad_sample)]
    g2.to_standard_module()
    loop = []
    for b in range(2):
        lin.zero_grad()
        (lin(xs[:, b:b + 1]) ** 2).sum().backward()
        loop.append([_np(lin.weight.grad), _np(lin.bias.grad)])
    sd = sorted(gsm.state_dict())
    with pytest.raises(NotImplementedError):
        GSM(nn.Sequential(nn.Linear(2, 2), nn.BatchNorm1d(2)))
    return dict(calls=snap, n_act=n_act, counters=counters, after=after, kinds=kinds, shapes=shapes,
                flat=flat, grad=grad, no_grad_acts=no_grad_acts, bf=bf, loop=loop, sd=sd)


def test_grad_sample_module_hooks_accumulation_batch_first():
    r = _hooks_and_accumulation(lucid)
    assert r["calls"] == {"fwd": 4, "bwd": 4}  # 2 hooked Linear layers x 2 passes
    assert r["n_act"] == [1, 1] and r["counters"] == [1, 1, 1, 1] and r["after"] == [0, 0]
    assert r["kinds"] == ["list"] * 4
    assert r["shapes"][0] == [(4, 4, 3), (2, 4, 3)] and r["shapes"][3] == [(4, 2), (2, 2)]
    np.testing.assert_allclose(r["flat"].sum(0), r["grad"], rtol=1e-10)
    assert r["no_grad_acts"] == [0, 0]
    for b in range(2):
        np.testing.assert_allclose(r["bf"][0][b], r["loop"][b][0], rtol=1e-10)
        np.testing.assert_allclose(r["bf"][1][b], r["loop"][b][1], rtol=1e-10)
    assert r["sd"] == ["_module.0.bias", "_module.0.weight", "_module.2.bias", "_module.2.weight"]


def test_grad_sample_module_hooks_torch_parity():
    torch = pytest.importorskip("torch")
    a = _hooks_and_accumulation(lucid)
    b = _hooks_and_accumulation(torch)
    for k in ("calls", "n_act", "counters", "after", "kinds", "shapes", "no_grad_acts", "sd"):
        assert a[k] == b[k], k


# --------------------------------------------------------------------------- tensor utils

def _np_unfold2d(x, k, p, s, d):
    n, c, h, w = x.shape
    xp = np.pad(x, ((0, 0), (0, 0), (p[0], p[0]), (p[1], p[1])))
    ho = (h + 2 * p[0] - d[0] * (k[0] - 1) - 1) // s[0] + 1
    wo = (w + 2 * p[1] - d[1] * (k[1] - 1) - 1) // s[1] + 1
    out = np.zeros((n, c * k[0] * k[1], ho * wo))
    for ci in range(c):
        for a in range(k[0]):
            for b in range(k[1]):
                row = (ci * k[0] + a) * k[1] + b
                for i in range(ho):
                    for j in range(wo):
                        out[:, row, i * wo + j] = xp[:, ci, i * s[0] + a * d[0], j * s[1] + b * d[1]]
    return out


def _np_unfold3d(x, k, p, s, d):
    n, c = x.shape[:2]
    xp = np.pad(x, ((0, 0), (0, 0)) + tuple((q, q) for q in p))
    outs = [(xp.shape[2 + i] - d[i] * (k[i] - 1) - 1) // s[i] + 1 for i in range(3)]
    cols = []
    for i in range(outs[0]):
        for j in range(outs[1]):
            for m in range(outs[2]):
                patch = xp[:, :, i * s[0]:i * s[0] + d[0] * (k[0] - 1) + 1:d[0],
                           j * s[1]:j * s[1] + d[1] * (k[1] - 1) + 1:d[1],
                           m * s[2]:m * s[2] + d[2] * (k[2] - 1) + 1:d[2]]
                cols.append(patch.reshape(n, -1))
    return np.stack(cols, axis=2)


def test_tensor_utils_unfold_and_sum():
    page = gsm_page(lucid)
    rng = np.random.default_rng(3)
    x = rng.standard_normal((2, 3, 5, 6))
    for k, p, s, d in (((2, 3), (1, 0), (1, 2), (1, 1)), ((3, 2), (1, 1), (2, 1), (2, 1))):
        got = page["unfold2d"](lucid.tensor(x), kernel_size=k, padding=p, stride=s, dilation=d)
        np.testing.assert_allclose(_np(got), _np_unfold2d(x, k, p, s, d), rtol=0, atol=0)
        ref = lucid.nn.functional.unfold(lucid.tensor(x), k, dilation=d, padding=p, stride=s)
        np.testing.assert_allclose(_np(got), _np(ref), rtol=0, atol=0)
    v = rng.standard_normal((2, 2, 3, 4, 5))
    got = page["unfold3d"](lucid.tensor(v), kernel_size=2, padding=(1, 0, 1), stride=(1, 2, 2))
    np.testing.assert_allclose(_np(got), _np_unfold3d(v, (2, 2, 2), (1, 0, 1), (1, 2, 2), (1, 1, 1)), atol=0)
    with pytest.raises(ValueError, match="B, C, D, H, W"):
        page["unfold3d"](lucid.tensor(x), kernel_size=2)
    t = lucid.ones(1, 2, 3, 4, 5)
    r = page["sum_over_all_but_batch_and_last_n"](t, n_dims=2)
    assert tuple(r.shape) == (1, 4, 5) and float(r.sum().item()) == 120.0
    assert page["sum_over_all_but_batch_and_last_n"](t, n_dims=4) is t


def test_tensor_utils_unfold3d_dilated():
    _needs_cpu_default()
    page = gsm_page(lucid)
    v = np.random.default_rng(4).standard_normal((1, 2, 5, 5, 5))
    got = page["unfold3d"](lucid.tensor(v), kernel_size=(2, 3, 2), dilation=(2, 1, 2))
    np.testing.assert_allclose(_np(got), _np_unfold3d(v, (2, 3, 2), (0, 0, 0), (1, 1, 1), (2, 1, 2)), atol=0)


def test_tensor_utils_torch_parity():
    torch = pytest.importorskip("torch")
    x = np.random.default_rng(5).standard_normal((2, 2, 3, 4, 5))
    a = gsm_page(lucid)["unfold3d"](lucid.tensor(x), kernel_size=2, padding=1, stride=(2, 1, 1))
    b = gsm_page(torch)["unfold3d"](torch.tensor(x), kernel_size=2, padding=1, stride=(2, 1, 1))
    np.testing.assert_array_equal(_np(a), b.numpy())
    a = gsm_page(lucid)["unfold2d"](lucid.tensor(x[:, 0]), kernel_size=(2, 2), padding=(1, 0),
                                     stride=(1, 2), dilation=(2, 1))
    b = gsm_page(torch)["unfold2d"](torch.tensor(x[:, 0]), kernel_size=(2, 2), padding=(1, 0),
                                     stride=(1, 2), dilation=(2, 1))
    np.testing.assert_array_equal(_np(a), b.numpy())


# --------------------------------------------------------------------------- functorch

def _functorch_run(torch):
    nn = torch.nn
    ft = functorch_page(torch)
    page = gsm_page(torch)
    rng = np.random.default_rng(6)
    lin = nn.Linear(3, 2).double()
    ln = nn.LayerNorm(4).double()
    with torch.no_grad():
        for p in list(lin.parameters()) + list(ln.parameters()):
            p.copy_(torch.tensor(rng.standard_normal(tuple(p.shape))))
    A = torch.tensor(rng.standard_normal((5, 3)))
    B = torch.tensor(rng.standard_normal((5, 2)))
    A2 = torch.tensor(rng.standard_normal((5, 2, 4)))
    B2 = torch.tensor(rng.standard_normal((5, 2, 4)))
    out = {}
    for name, layer, a, b, hand in (("lin", lin, A, B, page["compute_linear_grad_sample"]),
                                    ("ln", ln, A2, B2, page["compute_layer_norm_grad_sample"])):
        got = ft(layer, a, b)
        ref = hand(layer, a, b)
        out[name] = [_np(got[p]) for p in layer.parameters()]
        out[name + "_hand"] = [_np(ref[p]) for p in layer.parameters()]
    with pytest.raises(NotImplementedError, match="buffers"):
        ft(nn.BatchNorm1d(2), A, B)
    return out


def test_functorch_vmap_grad_per_sample():
    out = _functorch_run(lucid)
    for name in ("lin", "ln"):
        for u, v in zip(out[name], out[name + "_hand"]):
            np.testing.assert_allclose(u, v, rtol=1e-10, atol=1e-12)
    # the Linear closed form: grad_w[n] = B[n]^T A[n], grad_b[n] = B[n]
    rng = np.random.default_rng(6)
    rng.standard_normal((2, 3)), rng.standard_normal(2), rng.standard_normal(4), rng.standard_normal(4)
    A, B = rng.standard_normal((5, 3)), rng.standard_normal((5, 2))
    np.testing.assert_allclose(out["lin"][0], np.einsum("ni,nj->nij", B, A), rtol=1e-12)
    np.testing.assert_allclose(out["lin"][1], B, rtol=1e-12)


def test_functorch_torch_parity():
    torch = pytest.importorskip("torch")
    a, b = _functorch_run(lucid), _functorch_run(torch)
    for k in a:
        for u, v in zip(a[k], b[k]):
            np.testing.assert_allclose(u, v, rtol=1e-10, atol=1e-12)


# --------------------------------------------------------------------------- DP optimizer

def _dp_setup(torch, seed=0):
    nn = torch.nn
    GSM = gsm_page(torch)["GradSampleModule"]
    model = nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 2)).double()
    r = np.random.default_rng(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.tensor(r.standard_normal(tuple(p.shape))))
    X = torch.tensor(r.standard_normal((4, 3)))
    Y = torch.tensor([0, 1, 1, 0])
    return model, GSM(model), X, Y


def _np_clip_sum(gs, C):
    flat = np.concatenate([g.reshape(len(g), -1) for g in gs], axis=1)
    norms = np.sqrt((flat ** 2).sum(1))
    f = np.minimum(C / (norms + 1e-6), 1.0)
    return [np.einsum("i,i...->...", f, g) for g in gs], norms


def _dp_runs(torch):
    DPO = optimizer_page(torch)["DPOptimizer"]
    ce = torch.nn.CrossEntropyLoss()
    out = {}
    # noise 0: one step
    model, gsm, X, Y = _dp_setup(torch)
    opt = DPO(torch.optim.SGD(model.parameters(), lr=0.5), noise_multiplier=0.0, max_grad_norm=0.7,
              expected_batch_size=4)
    w0 = [_np(p) for p in model.parameters()]
    ce(gsm(X), Y).backward()
    out["gs"] = [_np(p.grad_sample) for p in model.parameters()]
    opt.step()
    out["w0"], out["w1"] = w0, [_np(p) for p in model.parameters()]
    # virtual step: skip then step; and accumulation of two backward passes
    model, gsm, X, Y = _dp_setup(torch, 1)
    opt = DPO(torch.optim.SGD(model.parameters(), lr=0.5), noise_multiplier=0.0, max_grad_norm=0.7,
              expected_batch_size=2)
    w0 = [_np(p) for p in model.parameters()]
    ce(gsm(X[:2]), Y[:2]).backward()
    gsA = [_np(p.grad_sample) for p in model.parameters()]
    opt.signal_skip_step(do_skip=True)
    out["skip_ret"] = opt.step()
    out["skip_same"] = all(np.array_equal(a, _np(p)) for a, p in zip(w0, model.parameters()))
    opt.zero_grad()
    out["kept_summed"] = all(p.summed_grad is not None for p in model.parameters())
    ce(gsm(X[2:]), Y[2:]).backward()
    gsB = [_np(p.grad_sample) for p in model.parameters()]
    opt.step()
    out["virt"] = (w0, gsA, gsB, [_np(p) for p in model.parameters()])
    opt.zero_grad()
    out["virt_cleared"] = all(p.summed_grad is None for p in model.parameters())
    model, gsm, X, Y = _dp_setup(torch, 2)
    opt = DPO(torch.optim.SGD(model.parameters(), lr=0.5), noise_multiplier=0.0, max_grad_norm=0.7,
              expected_batch_size=2)
    w0 = [_np(p) for p in model.parameters()]
    ce(gsm(X[:2]), Y[:2]).backward()
    ce(gsm(X[2:]), Y[2:]).backward()
    out["acc_iters"] = opt.accumulated_iterations
    gs = [np.concatenate([_np(t) for t in p.grad_sample]) for p in model.parameters()]
    opt.step()
    out["acc"] = (w0, gs, [_np(p) for p in model.parameters()])
    try:  # a second step without zero_grad: the processed flags refuse it
        opt.step()
    except ValueError as e:
        out["twice"] = str(e)
    # a frozen first layer: no hooks on it, no DP update of it
    model, gsm, X, Y = _dp_setup(torch, 4)
    model[0].requires_grad_(False)
    frozen = [_np(p) for p in model[0].parameters()]
    gsm.to_standard_module()
    gsm = gsm_page(torch)["GradSampleModule"](model)
    opt = DPO(torch.optim.SGD(model.parameters(), lr=0.5), noise_multiplier=0.0, max_grad_norm=0.7,
              expected_batch_size=4)
    ce(gsm(X), Y).backward()
    out["frozen_gs"] = [getattr(p, "grad_sample", "absent") is None for p in model[0].parameters()]
    out["n_params"] = len(opt.params)
    w0 = [_np(p) for p in model[2].parameters()]
    gs = [_np(p.grad_sample) for p in model[2].parameters()]
    opt.step()
    out["frozen"] = (frozen, [_np(p) for p in model[0].parameters()], w0, gs,
                     [_np(p) for p in model[2].parameters()])
    return out


def test_dp_optimizer_clip_accumulate_virtual_steps():
    out = _dp_runs(lucid)
    C, lr = 0.7, 0.5
    summed, norms = _np_clip_sum(out["gs"], C)
    assert np.all(norms > C)  # every sample is clipped: the check is not vacuous
    for w0, w1, s in zip(out["w0"], out["w1"], summed):
        np.testing.assert_allclose(w1, w0 - lr * s / 4, rtol=1e-10, atol=1e-13)
    assert out["skip_ret"] is None and out["skip_same"] and out["kept_summed"]
    w0, gsA, gsB, w1 = out["virt"]
    sA, _ = _np_clip_sum(gsA, C)
    sB, _ = _np_clip_sum(gsB, C)
    for a, b, u, v in zip(w0, w1, sA, sB):
        # both batches' clipped sums, scaled by expected_batch_size * 1 accumulated iteration
        np.testing.assert_allclose(b, a - lr * (u + v) / 2, rtol=1e-10, atol=1e-13)
    assert out["virt_cleared"]
    assert out["acc_iters"] == 2
    w0, gs, w1 = out["acc"]
    s, _ = _np_clip_sum(gs, C)
    for a, b, u in zip(w0, w1, s):
        np.testing.assert_allclose(b, a - lr * u / (2 * 2), rtol=1e-10, atol=1e-13)
    assert out["twice"].startswith("Gradients haven't been cleared since the last optimizer step")
    assert out["frozen_gs"] == [True, True] and out["n_params"] == 2
    frozen, after, w0, gs, w1 = out["frozen"]
    for a, b in zip(frozen, after):
        np.testing.assert_array_equal(a, b)
    s, _ = _np_clip_sum(gs, C)
    for a, b, u in zip(w0, w1, s):
        np.testing.assert_allclose(b, a - lr * u / 4, rtol=1e-10, atol=1e-13)


def _noise_run(torch, secure):
    pg = optimizer_page(torch)
    DPO = pg["DPOptimizer"]
    model, gsm, X, Y = _dp_setup(torch, 3)
    gen = torch.Generator().manual_seed(123)
    opt = DPO(torch.optim.SGD(model.parameters(), lr=1.0), noise_multiplier=1.3, max_grad_norm=0.5,
              expected_batch_size=4, generator=gen, secure_mode=secure)
    torch.nn.CrossEntropyLoss()(gsm(X), Y).backward()
    gs = [_np(p.grad_sample) for p in model.parameters()]
    seen = []
    opt.attach_step_hook(lambda o: seen.append([_np(p.grad) for p in o.params]))
    opt.step()
    replay_gen = torch.Generator().manual_seed(123)
    noise = [_np(pg["_generate_noise"](1.3 * 0.5, p, replay_gen, secure)) for p in model.parameters()]
    big = _np(pg["_generate_noise"](2.0, torch.zeros(4000), torch.Generator().manual_seed(7), secure))
    return gs, seen, noise, big


@pytest.mark.parametrize("secure", [False, True])
def test_dp_optimizer_noise_from_generator(secure):
    gs, seen, noise, big = _noise_run(lucid, secure)
    s, _ = _np_clip_sum(gs, 0.5)
    assert len(seen) == 1
    for g, u, z in zip(seen[0], s, noise):
        np.testing.assert_allclose(g, (u + z) / 4, rtol=1e-6, atol=1e-7)
        assert np.abs(z).max() > 0
    # the noise has std noise_multiplier * max_grad_norm (secure mode: four draws summed, halved)
    assert abs(big.std() - 2.0) < 0.15 and abs(big.mean()) < 0.15


def test_dp_optimizer_torch_parity():
    torch = pytest.importorskip("torch")
    a, b = _dp_runs(lucid), _dp_runs(torch)
    for u, v in zip(a["w1"], b["w1"]):
        np.testing.assert_allclose(u, v, rtol=1e-10, atol=1e-13)
    for u, v in zip(a["virt"][3] + a["acc"][2] + a["frozen"][4], b["virt"][3] + b["acc"][2] + b["frozen"][4]):
        np.testing.assert_allclose(u, v, rtol=1e-10, atol=1e-13)
    assert a["twice"] == b["twice"] and a["frozen_gs"] == b["frozen_gs"]


# --------------------------------------------------------------------------- RDP

def _np_log_a(q, sigma, alpha):
    # A_alpha = E_{z ~ N(0, sigma^2)} [((1 - q) + q exp((2z - 1) / (2 sigma^2)))^alpha]
    z = np.linspace(-12 * sigma, 12 * sigma + 1, 400001)
    mu0 = np.exp(-z ** 2 / (2 * sigma ** 2)) / (sigma * np.sqrt(2 * np.pi))
    ratio = (1 - q) + q * np.exp((2 * z - 1) / (2 * sigma ** 2))
    f = mu0 * ratio ** alpha
    return math.log(float(np.sum((f[1:] + f[:-1]) / 2 * np.diff(z))))


def test_rdp_closed_forms_and_privacy_spent():
    sigma, steps = 1.5, 7
    orders = [1.5, 2, 3.25, 8]
    np.testing.assert_allclose(compute_rdp(q=1.0, noise_multiplier=sigma, steps=steps, orders=orders),
                               [steps * a / (2 * sigma ** 2) for a in orders], rtol=1e-15)
    q = 0.05
    r2 = compute_rdp(q=q, noise_multiplier=sigma, steps=steps, orders=[2])[0]
    np.testing.assert_allclose(r2, steps * math.log(1 + q * q * math.expm1(1 / sigma ** 2)), rtol=1e-12)
    for a in (2.5, 3.75, 5):
        np.testing.assert_allclose(compute_rdp(q=q, noise_multiplier=sigma, steps=1, orders=float(a)),
                                   _np_log_a(q, sigma, a) / (a - 1), rtol=1e-6)
    assert compute_rdp(q=0.0, noise_multiplier=sigma, steps=3, orders=[2])[0] == 0
    assert np.isinf(compute_rdp(q=q, noise_multiplier=0.0, steps=3, orders=[2])[0])
    # get_privacy_spent: eps(alpha) = rdp - (log delta + log alpha)/(alpha - 1) + log((alpha - 1)/alpha)
    rdp = np.array([0.5, 0.3, 0.4])
    al = np.array([2.0, 4.0, 8.0])
    eps, order = get_privacy_spent(orders=al, rdp=rdp, delta=1e-5)
    direct = [r - (math.log(1e-5) + math.log(a)) / (a - 1) + math.log((a - 1) / a) for r, a in zip(rdp, al)]
    assert eps == pytest.approx(min(direct), rel=1e-12) and order == al[int(np.argmin(direct))]
    with pytest.raises(ValueError, match="same length"):
        get_privacy_spent(orders=[2, 3], rdp=[1.0], delta=1e-5)
    # the module docstring's example
    parameters = [(1e-5, 1.0, 10), (1e-4, 3.0, 4)]
    orders = range(2, 32 + 1)
    rdp = np.zeros_like(orders, dtype=float)
    for q, sigma, steps in parameters:
        rdp += compute_rdp(q=q, noise_multiplier=sigma, steps=steps, orders=orders)
    epsilon, opt_order = get_privacy_spent(orders=orders, rdp=rdp, delta=1e-5)
    assert round(float(epsilon), 3) == 0.336 and int(opt_order) == 23
    acc = RDPAccountant()
    for nm, sr in ((1.0, 0.1), (1.0, 0.1), (2.0, 0.1)):
        acc.step(noise_multiplier=nm, sample_rate=sr)
    assert acc.steps == [(1.0, 0.1, 2), (2.0, 0.1, 1)]


# --------------------------------------------------------------------------- make_private flow

def make_private_page(torch):
    """privacy_engine.PrivacyEngine.make_private at its core: wrap the module, the optimizer
    (``expected_batch_size = int(len(dataset) * sample_rate)``) and hook the accountant."""
    pg = optimizer_page(torch)
    GradSampleModule = gsm_page(torch)["GradSampleModule"]

    class PrivacyEngine:
        def __init__(self):
            self.accountant = RDPAccountant()

        def make_private(self, *, module, optimizer, data_loader, noise_multiplier, max_grad_norm,
                         loss_reduction="mean", generator=None):
            module = GradSampleModule(module, batch_first=True, loss_reduction=loss_reduction)
            sample_rate = 1 / len(data_loader)
            expected_batch_size = int(len(data_loader.dataset) * sample_rate)
            optimizer = pg["DPOptimizer"](
                optimizer, noise_multiplier=noise_multiplier, max_grad_norm=max_grad_norm,
                expected_batch_size=expected_batch_size, loss_reduction=loss_reduction,
                generator=generator,
            )

            def accountant_hook(optim):
                self.accountant.step(noise_multiplier=optim.noise_multiplier, sample_rate=sample_rate)

            optimizer.attach_step_hook(accountant_hook)
            return module, optimizer, data_loader

        def get_epsilon(self, delta):
            return self.accountant.get_epsilon(delta)

    return PrivacyEngine


def _train_private(torch, noise):
    nn = torch.nn
    from lucid.utils.data import DataLoader, TensorDataset

    if torch.__name__ == "torch":
        from torch.utils.data import DataLoader, TensorDataset  # noqa: F811
    r = np.random.default_rng(8)
    X = r.standard_normal((16, 4))
    Y = (X[:, 0] + X[:, 1] > 0).astype(np.int64)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2)).double()
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.tensor(r.standard_normal(tuple(p.shape)) * 0.3))
    loader = DataLoader(TensorDataset(torch.tensor(X), torch.tensor(Y)), batch_size=4, shuffle=False)
    engine = make_private_page(torch)()
    model, optimizer, loader = engine.make_private(
        module=model, optimizer=torch.optim.SGD(model.parameters(), lr=0.5), data_loader=loader,
        noise_multiplier=noise, max_grad_norm=1.0, generator=torch.Generator().manual_seed(0))
    crit = nn.CrossEntropyLoss()
    losses = []
    for epoch in range(3):
        tot = 0.0
        for xb, yb in loader:
            optimizer.zero_grad()
            loss = crit(model(xb), yb)
            loss.backward()
            optimizer.step()
            tot += loss.item()
        losses.append(tot / len(loader))
    return losses, engine.accountant.steps, engine.get_epsilon(1e-5), [_np(p) for p in model.parameters()]


def test_make_private_flow_trains_and_accounts():
    losses, steps, eps, _ = _train_private(lucid, 0.0)
    assert losses[-1] < 0.8 * losses[0], losses
    assert steps == [(0.0, 0.25, 12)] and np.isinf(eps)
    losses, steps, eps, _ = _train_private(lucid, 1.0)
    assert steps == [(1.0, 0.25, 12)]
    ref = RDPAccountant.DEFAULT_ALPHAS
    want = get_privacy_spent(orders=ref, rdp=compute_rdp(q=0.25, noise_multiplier=1.0, steps=12, orders=ref),
                             delta=1e-5)[0]
    assert eps == pytest.approx(want, rel=1e-12) and 1 < eps < 100


def test_make_private_flow_torch_parity():
    torch = pytest.importorskip("torch")
    a, b = _train_private(lucid, 0.0), _train_private(torch, 0.0)
    np.testing.assert_allclose(a[0], b[0], rtol=1e-10)
    for u, v in zip(a[3], b[3]):
        np.testing.assert_allclose(u, v, rtol=1e-9, atol=1e-12)
