"""pytorch/captum's pure-PyTorch attribution code run on Lucid (``import lucid as torch``), batch 19:

- ``captum/_utils/gradient.py``: ``apply_gradient_requirements``/``undo_gradient_requirements``
  (warnings, ``requires_grad_``, ``grad.zero_()``/``grad.detach_()``), ``compute_gradients``
  (``torch.autograd.grad(torch.unbind(outputs), inputs)`` under ``set_grad_enabled``) and
  ``compute_layer_gradients_and_eval`` with ``_forward_layer_distributed_eval``'s forward hook that
  returns a clone of the layer output (``forward_hook_with_return``), ``_sort_key_list``, ``_reduce_list``,
  ``_extract_device_ids`` keyed by the tensors' ``device``.
- ``captum/_utils/common.py``: ``_format_*`` helpers, ``_expand_additional_forward_args``/``_expand_target``
  (``cat`` and ``repeat_interleave``), ``_expand_and_update_*`` (baselines drawn by ``np.random.choice``),
  ``_run_forward`` (``inspect.signature`` of the forward), ``_select_targets`` (``gather``, tuple targets,
  ``torch.stack``), ``_register_backward_hook`` (a forward pre-hook that hooks the input tensor and hands
  the module a ``clone``, a forward hook that hooks the output tensor).
- ``captum/attr``: ``approximation_methods.py`` (Riemann left/right/middle/trapezoid, Gauss-Legendre through
  ``np.polynomial.legendre.leggauss``), ``attribution.py`` (``GradientAttribution.compute_convergence_delta``,
  the completeness axiom; ``LayerAttribution.interpolate``), ``Saliency``, ``InputXGradient``,
  ``IntegratedGradients`` (with ``multiply_by_inputs``), ``NoiseTunnel`` (smoothgrad, smoothgrad_sq, vargrad;
  ``torch.normal`` noise, ``nt_samples_batch_size`` partitions, expanded targets/baselines/feature masks),
  ``DeepLift`` (forward/pre-forward hooks saving ``module.input``/``module.output`` and the Rescale rule as a
  tensor backward hook on ReLU/Sigmoid/Tanh/Softmax, in-place ReLU included; the main model's pre-hook that
  stacks inputs and baselines and forward hook that splits them; the error for a reused module) and
  ``DeepLiftShap``, ``GradientShap`` (``InputBaselineXGradient`` under ``NoiseTunnel`` with baselines drawn from
  a distribution), ``GuidedBackprop``/``Deconvolution`` (the ReLU gradient clamped by a backward hook; also
  captum 0.2's ``module.register_backward_hook`` form), ``LayerConductance``, ``LayerIntegratedGradients``
  (the layer's output, or input through a pre-hook, replaced along the path), ``LayerGradCam`` (upsampled
  nearest and bilinear), ``FeatureAblation`` (feature masks shared or per example, ``perturbations_per_eval``,
  aggregated outputs, ``_strict_run_forward``) and ``Occlusion`` (sliding windows padded into masks with
  ``F.pad`` of NumPy integers, overlap weights).

Every check recomputes its numbers without torch: the closed-form gradients of a two-layer ReLU
network, the Rescale multipliers of DeepLift in NumPy (and DeepLift's summation-to-delta, exact on
ReLU/Sigmoid/Tanh networks), the completeness axiom of Integrated Gradients (exact for a quadratic model
under Gauss-Legendre), each quadrature rule from its definition, the noise tunnel's statistics from the noisy
inputs the model saw, GradientShap replayed from its NumPy draws, the clamped backward of guided
backprop/deconvolution, the telescoping sum of layer conductance, GradCAM and its upsampling, and
ablation/occlusion against NumPy loops. The parity tests run the same text on PyTorch with the same weights
and data (float64; 1e-10).

Faithful quirks kept (they are captum's, and PyTorch gives the same): the trapezoid rule's weights are the
1/n step of n points with the ends halved, adding up to (n - 1) / n; Riemann step sizes are a list of Python
floats, so ``torch.tensor(step_sizes)`` is float32; ``Occlusion`` divides by float32 counts and returns
float32; at this commit ``NoiseTunnel`` with a tuple of ``stdevs`` fails (``stdevs_`` unset), so it is not used.

Adapted: captum's ``log_usage`` is its no-logging fallback (a ``functools.wraps`` wrapper, so
``attribute.__wrapped__`` exists as in captum); ``internal_batch_size`` (``_batch_attribution``),
``show_progress``, neuron selectors and DataParallel scattering are left out (their branches raise);
``LayerIntegratedGradients``' era-specific ``_forward_layer_eval`` (which also returned whether the layer
output is a tuple) is gradient.py's, for a single-tensor layer. The files come from several captum commits
(``integrated_gradients``/``noise_tunnel``/``feature_ablation``/``guided_backprop_deconvnet`` at 99d5b00,
``deep_lift`` at 642a8fc, ``gradient_shap`` at e099e9a, ``layer_conductance`` at 042b8a9, ``gradient.py`` and
``grad_cam`` at 02104e9, ``occlusion`` at 00cea47, ``layer_integrated_gradients`` at 0032cbd).

No Lucid fix was needed: every piece agreed with PyTorch 2.13 to rounding on the first run.
"""
import functools
import math
import typing
import warnings
from collections import defaultdict
from enum import Enum
from inspect import signature
from types import SimpleNamespace

import numpy as np
import pytest

import lucid
import lucid.nn  # noqa: F401


def _np(t):
    return np.array(t.detach().cpu().numpy(), dtype=np.float64)


# ---------------------------------------------------------------- the captum port
def captum_lib(torch):
    """captum's text, with ``torch`` the module handed in."""
    nn = torch.nn
    F = torch.nn.functional
    Tensor = torch.Tensor
    Module = torch.nn.Module
    threading = __import__("threading")

    # ------------------------------------------------ captum/log/__init__.py (no-logging fallback)
    def log_usage(*log_args, **log_kwargs):
        def _log_usage(func):
            @functools.wraps(func)
            def wrapper(*args, **kwargs):
                return func(*args, **kwargs)

            return wrapper

        return _log_usage

    # ------------------------------------------------ captum/_utils/common.py
    class ExpansionTypes(Enum):
        repeat = 1
        repeat_interleave = 2

    def safe_div(numerator, denom, default_value):
        if isinstance(denom, float):
            return numerator / denom if denom != 0.0 else default_value
        return numerator / torch.where(denom != 0.0, denom, default_value)

    def _is_tuple(inputs):
        return isinstance(inputs, tuple)

    def _validate_target(num_samples, target):
        if isinstance(target, list) or (isinstance(target, torch.Tensor) and torch.numel(target) > 1):
            assert num_samples == len(target), (
                "The number of samples provied in the"
                "input {} does not match with the number of targets. {}".format(num_samples, len(target))
            )

    def _zeros(inputs):
        return tuple(0 for input in inputs)

    def _format_baseline(baselines, inputs):
        if baselines is None:
            return _zeros(inputs)
        if not isinstance(baselines, tuple):
            baselines = (baselines,)
        for baseline in baselines:
            assert isinstance(baseline, (torch.Tensor, int, float)), (
                "baseline input argument must be either a torch.Tensor or a number \
            however {} detected".format(type(baseline))
            )
        return baselines

    def _format_tensor_into_tuples(inputs):
        if inputs is None:
            return None
        if not isinstance(inputs, tuple):
            assert isinstance(inputs, torch.Tensor), "`inputs` must have type " "torch.Tensor but {} found: ".format(
                type(inputs)
            )
            inputs = (inputs,)
        return inputs

    def _format_input(inputs):
        return _format_tensor_into_tuples(inputs)

    def _format_additional_forward_args(additional_forward_args):
        if additional_forward_args is not None and not isinstance(additional_forward_args, tuple):
            additional_forward_args = (additional_forward_args,)
        return additional_forward_args

    def _expand_additional_forward_args(additional_forward_args, n_steps, expansion_type=ExpansionTypes.repeat):
        def _expand_tensor_forward_arg(additional_forward_arg, n_steps, expansion_type=ExpansionTypes.repeat):
            if len(additional_forward_arg.size()) == 0:
                return additional_forward_arg
            if expansion_type == ExpansionTypes.repeat:
                return torch.cat([additional_forward_arg] * n_steps, dim=0)
            elif expansion_type == ExpansionTypes.repeat_interleave:
                return additional_forward_arg.repeat_interleave(n_steps, dim=0)
            else:
                raise NotImplementedError(
                    "Currently only `repeat` and `repeat_interleave`" " expansion_types are supported"
                )

        if additional_forward_args is None:
            return None
        return tuple(
            _expand_tensor_forward_arg(additional_forward_arg, n_steps, expansion_type)
            if isinstance(additional_forward_arg, torch.Tensor)
            else additional_forward_arg
            for additional_forward_arg in additional_forward_args
        )

    def _expand_target(target, n_steps, expansion_type=ExpansionTypes.repeat):
        if isinstance(target, list):
            if expansion_type == ExpansionTypes.repeat:
                return target * n_steps
            elif expansion_type == ExpansionTypes.repeat_interleave:
                expanded_target = []
                for i in target:
                    expanded_target.extend([i] * n_steps)
                return expanded_target
            else:
                raise NotImplementedError(
                    "Currently only `repeat` and `repeat_interleave`" " expansion_types are supported"
                )
        elif isinstance(target, torch.Tensor) and torch.numel(target) > 1:
            if expansion_type == ExpansionTypes.repeat:
                return torch.cat([target] * n_steps, dim=0)
            elif expansion_type == ExpansionTypes.repeat_interleave:
                return target.repeat_interleave(n_steps, dim=0)
            else:
                raise NotImplementedError(
                    "Currently only `repeat` and `repeat_interleave`" " expansion_types are supported"
                )
        return target

    def _expand_feature_mask(feature_mask, n_samples):
        is_feature_mask_tuple = _is_tuple(feature_mask)
        feature_mask = _format_tensor_into_tuples(feature_mask)
        feature_mask_new = tuple(
            feature_mask_elem.repeat_interleave(n_samples, dim=0) if feature_mask_elem.size(0) > 1 else feature_mask_elem
            for feature_mask_elem in feature_mask
        )
        return feature_mask_new if is_feature_mask_tuple else feature_mask_new[0]

    def _expand_and_update_baselines(inputs, n_samples, kwargs, draw_baseline_from_distrib=False):
        def get_random_baseline_indices(bsz, baseline):
            num_ref_samples = baseline.shape[0]
            return np.random.choice(num_ref_samples, n_samples * bsz).tolist()

        # expand baselines to match the sizes of input
        if "baselines" not in kwargs:
            return

        baselines = kwargs["baselines"]
        baselines = _format_baseline(baselines, inputs)
        _validate_input(inputs, baselines, draw_baseline_from_distrib=draw_baseline_from_distrib)

        if draw_baseline_from_distrib:
            bsz = inputs[0].shape[0]
            baselines = tuple(
                baseline[get_random_baseline_indices(bsz, baseline)] if isinstance(baseline, torch.Tensor) else baseline
                for baseline in baselines
            )
        else:
            baselines = tuple(
                baseline.repeat_interleave(n_samples, dim=0)
                if isinstance(baseline, torch.Tensor) and baseline.shape[0] == input.shape[0] and baseline.shape[0] > 1
                else baseline
                for input, baseline in zip(inputs, baselines)
            )
        # update kwargs with expanded baseline
        kwargs["baselines"] = baselines

    def _expand_and_update_additional_forward_args(n_samples, kwargs):
        if "additional_forward_args" not in kwargs:
            return
        additional_forward_args = kwargs["additional_forward_args"]
        additional_forward_args = _format_additional_forward_args(additional_forward_args)
        if additional_forward_args is None:
            return
        additional_forward_args = _expand_additional_forward_args(
            additional_forward_args,
            n_samples,
            expansion_type=ExpansionTypes.repeat_interleave,
        )
        # update kwargs with expanded baseline
        kwargs["additional_forward_args"] = additional_forward_args

    def _expand_and_update_target(n_samples, kwargs):
        if "target" not in kwargs:
            return
        target = kwargs["target"]
        target = _expand_target(target, n_samples, expansion_type=ExpansionTypes.repeat_interleave)
        # update kwargs with expanded baseline
        kwargs["target"] = target

    def _expand_and_update_feature_mask(n_samples, kwargs):
        if "feature_mask" not in kwargs:
            return

        feature_mask = kwargs["feature_mask"]
        if feature_mask is None:
            return

        feature_mask = _expand_feature_mask(feature_mask, n_samples)
        kwargs["feature_mask"] = feature_mask

    def _format_output(is_inputs_tuple, output):
        assert isinstance(output, tuple), "Output must be in shape of a tuple"
        assert is_inputs_tuple or len(output) == 1, (
            "The input is a single tensor however the output isn't."
            "The number of output tensors is: {}".format(len(output))
        )
        return output if is_inputs_tuple else output[0]

    def _run_forward(forward_func, inputs, target=None, additional_forward_args=None):
        forward_func_args = signature(forward_func).parameters
        if len(forward_func_args) == 0:
            output = forward_func()
            return output if target is None else _select_targets(output, target)

        # make everything a tuple so that it is easy to unpack without
        # using if-statements
        inputs = _format_input(inputs)
        additional_forward_args = _format_additional_forward_args(additional_forward_args)

        output = forward_func(*(*inputs, *additional_forward_args) if additional_forward_args is not None else inputs)
        return _select_targets(output, target)

    def _select_targets(output, target):
        if target is None:
            return output

        num_examples = output.shape[0]
        dims = len(output.shape)
        device = output.device
        if isinstance(target, (int, tuple)):
            return _verify_select_column(output, target)
        elif isinstance(target, torch.Tensor):
            if torch.numel(target) == 1 and isinstance(target.item(), int):
                return _verify_select_column(output, target.item())
            elif len(target.shape) == 1 and torch.numel(target) == num_examples:
                assert dims == 2, "Output must be 2D to select tensor of targets."
                return torch.gather(output, 1, target.reshape(len(output), 1))
            else:
                raise AssertionError("Tensor target dimension %r is not valid. %r" % (target.shape, output.shape))
        elif isinstance(target, list):
            assert len(target) == num_examples, "Target list length does not match output!"
            if isinstance(target[0], int):
                assert dims == 2, "Output must be 2D to select tensor of targets."
                return torch.gather(output, 1, torch.tensor(target, device=device).reshape(len(output), 1))
            elif isinstance(target[0], tuple):
                return torch.stack([output[(i,) + targ_elem] for i, targ_elem in enumerate(target)])
            else:
                raise AssertionError("Target element type in list is not valid.")
        else:
            raise AssertionError("Target type %r is not valid." % target)

    def _verify_select_column(output, target):
        target = (target,) if isinstance(target, int) else target
        assert len(target) <= len(output.shape) - 1, "Cannot choose target column with output shape %r." % (
            output.shape,
        )
        return output[(slice(None), *target)]

    def _reduce_list(val_list, red_func=torch.cat):
        assert len(val_list) > 0, "Cannot reduce empty list!"
        if isinstance(val_list[0], torch.Tensor):
            first_device = val_list[0].device
            return red_func([elem.to(first_device) for elem in val_list])
        elif isinstance(val_list[0], bool):
            return any(val_list)
        elif isinstance(val_list[0], tuple):
            final_out = []
            for i in range(len(val_list[0])):
                final_out.append(_reduce_list([val_elem[i] for val_elem in val_list], red_func))
        else:
            raise AssertionError(
                "Elements to be reduced can only be" "either Tensors or tuples containing Tensors."
            )
        return tuple(final_out)

    def _sort_key_list(keys, device_ids=None):
        if len(keys) == 1:
            return keys
        id_dict = {}
        assert device_ids is not None, "Device IDs must be provided with multiple devices."
        for key in keys:
            if key.index in id_dict:
                raise AssertionError("Duplicate CUDA Device ID identified in device list.")
            id_dict[key.index] = key

        out_list = [id_dict[device_id] for device_id in filter(lambda device_id: device_id in id_dict, device_ids)]

        assert len(out_list) == len(keys), "Given Device ID List does not match"
        "devices with computed tensors."

        return out_list

    def _register_backward_hook(module, hook, attr_obj):
        grad_out = {}

        def forward_hook(module, inp, out):
            nonlocal grad_out
            grad_out = {}

            def output_tensor_hook(output_grad):
                grad_out[output_grad.device] = output_grad

            if isinstance(out, tuple):
                assert len(out) == 1, "Backward hooks not supported for module with >1 output"
                out[0].register_hook(output_tensor_hook)
            else:
                out.register_hook(output_tensor_hook)

        def pre_hook(module, inp):
            def input_tensor_hook(input_grad):
                if len(grad_out) == 0:
                    return
                hook_out = hook(module, input_grad, grad_out[input_grad.device])

                if hook_out is not None:
                    return hook_out[0] if isinstance(hook_out, tuple) else hook_out

            if isinstance(inp, tuple):
                assert len(inp) == 1, "Backward hooks not supported for module with >1 input"
                inp[0].register_hook(input_tensor_hook)
                return inp[0].clone()
            else:
                inp.register_hook(input_tensor_hook)
                return inp.clone()

        return [
            module.register_forward_pre_hook(pre_hook),
            module.register_forward_hook(forward_hook),
        ]

    # ------------------------------------------------ captum/_utils/gradient.py
    def apply_gradient_requirements(inputs):
        assert isinstance(inputs, tuple), "Inputs should be wrapped in a tuple prior to preparing for gradients"
        grad_required = []
        for index, input in enumerate(inputs):
            assert isinstance(input, torch.Tensor), "Given input is not a torch.Tensor"
            grad_required.append(input.requires_grad)
            inputs_dtype = input.dtype
            # Note: torch 1.2 doesn't support is_complex for dtype that's why we check
            # on the existance of is_complex method.
            if not inputs_dtype.is_floating_point and not (
                hasattr(inputs_dtype, "is_complex") and inputs_dtype.is_complex
            ):
                warnings.warn(
                    """Input Tensor %d has a dtype of %s.
                Gradients cannot be activated
                for these data types."""
                    % (index, str(inputs_dtype))
                )
            elif not input.requires_grad:
                warnings.warn(
                    "Input Tensor %d did not already require gradients, "
                    "required_grads has been set automatically." % index
                )
                input.requires_grad_()
            if input.grad is not None:
                if torch.sum(torch.abs(input.grad)).item() > 1e-7:
                    warnings.warn(
                        "Input Tensor %d had a non-zero gradient tensor, " "which is being reset to 0." % index
                    )
                input.grad.zero_()
        return grad_required

    def undo_gradient_requirements(inputs, grad_required):
        assert isinstance(inputs, tuple), "Inputs should be wrapped in a tuple prior to preparing for gradients."
        assert len(inputs) == len(grad_required), "Input tuple length should match gradient mask."
        for index, input in enumerate(inputs):
            assert isinstance(input, torch.Tensor), "Given input is not a torch.Tensor"
            if input.grad is not None:
                input.grad.detach_()
                input.grad.zero_()
            if not grad_required[index]:
                input.requires_grad_(False)

    def compute_gradients(forward_fn, inputs, target_ind=None, additional_forward_args=None):
        with torch.autograd.set_grad_enabled(True):
            # runs forward pass
            outputs = _run_forward(forward_fn, inputs, target_ind, additional_forward_args)
            assert outputs[0].numel() == 1, (
                "Target not provided when necessary, cannot" " take gradient with respect to multiple outputs."
            )
            # torch.unbind(forward_out) is a list of scalar tensor tuples and
            # contains batch_size * #steps elements
            grads = torch.autograd.grad(torch.unbind(outputs), inputs)
        return grads

    def _forward_layer_distributed_eval(
        forward_fn,
        inputs,
        layer,
        target_ind=None,
        additional_forward_args=None,
        attribute_to_layer_input=False,
        forward_hook_with_return=False,
    ):
        saved_layer = defaultdict(dict)
        lock = threading.Lock()
        all_layers = [layer] if isinstance(layer, Module) else layer

        # Set a forward hook on specified module and run forward pass to
        # get layer output tensor(s).
        # For DataParallel models, each partition adds entry to dictionary
        # with key as device and value as corresponding Tensor.
        def hook_wrapper(original_module):
            def forward_hook(module, inp, out=None):
                eval_tsrs = inp if attribute_to_layer_input else out
                is_eval_tuple = isinstance(eval_tsrs, tuple)

                if not is_eval_tuple:
                    eval_tsrs = (eval_tsrs,)
                with lock:
                    nonlocal saved_layer
                    # Note that cloning behaviour of `eval_tsr` is different
                    # when `forward_hook_with_return` is set to True. This is because
                    # otherwise `backward()` on the last output layer won't execute.
                    if forward_hook_with_return:
                        saved_layer[original_module][eval_tsrs[0].device] = eval_tsrs
                        eval_tsrs_to_return = tuple(eval_tsr.clone() for eval_tsr in eval_tsrs)
                        if not is_eval_tuple:
                            eval_tsrs_to_return = eval_tsrs_to_return[0]
                        return eval_tsrs_to_return
                    else:
                        saved_layer[original_module][eval_tsrs[0].device] = tuple(
                            eval_tsr.clone() for eval_tsr in eval_tsrs
                        )

            return forward_hook

        all_hooks = []
        try:
            for single_layer in all_layers:
                if attribute_to_layer_input:
                    all_hooks.append(single_layer.register_forward_pre_hook(hook_wrapper(single_layer)))
                else:
                    all_hooks.append(single_layer.register_forward_hook(hook_wrapper(single_layer)))
            output = _run_forward(
                forward_fn,
                inputs,
                target=target_ind,
                additional_forward_args=additional_forward_args,
            )
        finally:
            for hook in all_hooks:
                hook.remove()

        if len(saved_layer) == 0:
            raise AssertionError("Forward hook did not obtain any outputs for given layer")

        if forward_hook_with_return:
            return saved_layer, output
        return saved_layer

    def _extract_device_ids(forward_fn, saved_layer, device_ids):
        # Multiple devices / keys implies a DataParallel model, so we look for
        # device IDs if given or available from forward function
        # (DataParallel model object).
        if max(len(saved_layer[single_layer]) for single_layer in saved_layer) > 1 and device_ids is None:
            if hasattr(forward_fn, "device_ids") and forward_fn.device_ids is not None:
                device_ids = forward_fn.device_ids
            else:
                raise AssertionError(
                    "Layer tensors are saved on multiple devices, however unable to access"
                    " device ID list from the `forward_fn`."
                )
        return device_ids

    def compute_layer_gradients_and_eval(
        forward_fn,
        layer,
        inputs,
        target_ind=None,
        additional_forward_args=None,
        gradient_neuron_selector=None,
        device_ids=None,
        attribute_to_layer_input=False,
        output_fn=None,
    ):
        with torch.autograd.set_grad_enabled(True):
            # saved_layer is a dictionary mapping device to a tuple of
            # layer evaluations on that device.
            saved_layer, output = _forward_layer_distributed_eval(
                forward_fn,
                inputs,
                layer,
                target_ind=target_ind,
                additional_forward_args=additional_forward_args,
                attribute_to_layer_input=attribute_to_layer_input,
                forward_hook_with_return=True,
            )
            assert output[0].numel() == 1, (
                "Target not provided when necessary, cannot" " take gradient with respect to multiple outputs."
            )

            device_ids = _extract_device_ids(forward_fn, saved_layer, device_ids)

            # Identifies correct device ordering based on device ids.
            # key_list is a list of devices in appropriate ordering for concatenation.
            # If only one key exists (standard model), key list simply has one element.
            key_list = _sort_key_list(list(next(iter(saved_layer.values())).keys()), device_ids)
            if isinstance(layer, Module):
                all_outputs = _reduce_list(
                    [
                        saved_layer[layer][device_id]
                        if output_fn is None
                        else output_fn(saved_layer[layer][device_id])
                        for device_id in key_list
                    ]
                )
            else:
                all_outputs = [
                    _reduce_list(
                        [
                            saved_layer[single_layer][device_id]
                            if output_fn is None
                            else output_fn(saved_layer[single_layer][device_id])
                            for device_id in key_list
                        ]
                    )
                    for single_layer in layer
                ]
            all_layers = [layer] if isinstance(layer, Module) else layer
            grad_inputs = tuple(
                layer_tensor
                for single_layer in all_layers
                for device_id in key_list
                for layer_tensor in saved_layer[single_layer][device_id]
            )
            saved_grads = torch.autograd.grad(torch.unbind(output), grad_inputs)

            offset = 0
            all_grads = []
            for single_layer in all_layers:
                num_tensors = len(next(iter(saved_layer[single_layer].values())))
                curr_saved_grads = [
                    saved_grads[i : i + num_tensors]
                    for i in range(offset, offset + len(key_list) * num_tensors, num_tensors)
                ]
                offset += len(key_list) * num_tensors
                if output_fn is not None:
                    curr_saved_grads = [output_fn(curr_saved_grad) for curr_saved_grad in curr_saved_grads]

                all_grads.append(_reduce_list(curr_saved_grads))

            layer_grads = all_grads
            if isinstance(layer, Module):
                layer_grads = all_grads[0]

            assert gradient_neuron_selector is None, "neuron gradients are left out of this port"
        return layer_grads, all_outputs

    # ------------------------------------------------ captum/attr/_utils/approximation_methods.py
    class Riemann(Enum):
        left = 1
        right = 2
        middle = 3
        trapezoid = 4

    SUPPORTED_RIEMANN_METHODS = [
        "riemann_left",
        "riemann_right",
        "riemann_middle",
        "riemann_trapezoid",
    ]

    SUPPORTED_METHODS = SUPPORTED_RIEMANN_METHODS + ["gausslegendre"]

    def approximation_parameters(method):
        if method in SUPPORTED_RIEMANN_METHODS:
            return riemann_builders(method=Riemann[method.split("_")[-1]])
        if method == "gausslegendre":
            return gauss_legendre_builders()
        raise ValueError("Invalid integral approximation method name: {}".format(method))

    def riemann_builders(method=Riemann.trapezoid):
        def step_sizes(n):
            assert n > 1, "The number of steps has to be larger than one"
            deltas = [1 / n] * n
            if method == Riemann.trapezoid:
                deltas[0] /= 2
                deltas[-1] /= 2
            return deltas

        def alphas(n):
            assert n > 1, "The number of steps has to be larger than one"
            if method == Riemann.trapezoid:
                return list(np.linspace(0, 1, n))
            elif method == Riemann.left:
                return list(np.linspace(0, 1 - 1 / n, n))
            elif method == Riemann.middle:
                return list(np.linspace(1 / (2 * n), 1 - 1 / (2 * n), n))
            elif method == Riemann.right:
                return list(np.linspace(1 / n, 1, n))
            else:
                raise AssertionError("Provided Reimann approximation method is not valid.")

        return step_sizes, alphas

    def gauss_legendre_builders():
        def step_sizes(n):
            assert n > 0, "The number of steps has to be larger than zero"
            # Scaling from 2 to 1
            return list(0.5 * np.polynomial.legendre.leggauss(n)[1])

        def alphas(n):
            assert n > 0, "The number of steps has to be larger than zero"
            # Scaling from [-1, 1] to [0, 1]
            return list(0.5 * (1 + np.polynomial.legendre.leggauss(n)[0]))

        return step_sizes, alphas

    # ------------------------------------------------ captum/attr/_utils/common.py
    def _validate_input(inputs, baselines, n_steps=50, method="riemann_trapezoid", draw_baseline_from_distrib=False):
        assert len(inputs) == len(baselines), (
            "Input and baseline must have the same "
            "dimensions, baseline has {} features whereas input has {}.".format(len(baselines), len(inputs))
        )

        for input, baseline in zip(inputs, baselines):
            if draw_baseline_from_distrib:
                assert isinstance(baseline, (int, float)) or input.shape[1:] == baseline.shape[1:], (
                    "The samples in input and baseline batches must have"
                    " the same shape or the baseline corresponding to the"
                    " input tensor must be a scalar."
                    " Found baseline: {} and input: {} ".format(baseline, input)
                )
            else:
                assert (
                    isinstance(baseline, (int, float)) or input.shape == baseline.shape or baseline.shape[0] == 1
                ), (
                    "Baseline can be provided as a tensor for just one input and"
                    " broadcasted to the batch or input and baseline must have the"
                    " same shape or the baseline corresponding to each input tensor"
                    " must be a scalar. Found baseline: {} and input: {}".format(baseline, input)
                )

        assert n_steps >= 0, "The number of steps must be a positive integer. " "Given: {}".format(n_steps)

        assert method in SUPPORTED_METHODS, (
            "Approximation method must be one for the following {}. " "Given {}".format(SUPPORTED_METHODS, method)
        )

    def _validate_noise_tunnel_type(nt_type, supported_noise_tunnel_types):
        assert nt_type in supported_noise_tunnel_types, (
            "Noise types must be either `smoothgrad`, `smoothgrad_sq` or `vargrad`. " "Given {}".format(nt_type)
        )

    def _format_input_baseline(inputs, baselines):
        inputs = _format_input(inputs)
        baselines = _format_baseline(baselines, inputs)
        return inputs, baselines

    def _format_callable_baseline(baselines, inputs):
        if callable(baselines):
            # Note: this assumes that if baselines is a function and if it takes
            # arguments, then the first argument is the `inputs`.
            # This can be expanded in the future with better type checks
            baseline_parameters = signature(baselines).parameters
            if len(baseline_parameters) == 0:
                baselines = baselines()
            else:
                baselines = baselines(inputs)
        return _format_baseline(baselines, _format_input(inputs))

    def _compute_conv_delta_and_format_attrs(
        attr_algo,
        return_convergence_delta,
        attributions,
        start_point,
        end_point,
        additional_forward_args,
        target,
        is_inputs_tuple=False,
    ):
        if return_convergence_delta:
            # computes convergence error
            delta = attr_algo.compute_convergence_delta(
                attributions,
                start_point,
                end_point,
                additional_forward_args=additional_forward_args,
                target=target,
            )
            return _format_output(is_inputs_tuple, attributions), delta
        else:
            return _format_output(is_inputs_tuple, attributions)

    def _tensorize_baseline(inputs, baselines):
        def _tensorize_single_baseline(baseline, input):
            if isinstance(baseline, (int, float)):
                return torch.full_like(input, baseline)
            if input.shape[0] > baseline.shape[0] and baseline.shape[0] == 1:
                return torch.cat([baseline] * input.shape[0])
            return baseline

        assert isinstance(inputs, tuple) and isinstance(baselines, tuple), (
            "inputs and baselines must"
            "have tuple type but found baselines: {} and inputs: {}".format(type(baselines), type(inputs))
        )
        return tuple(_tensorize_single_baseline(baseline, input) for baseline, input in zip(baselines, inputs))

    def _reshape_and_sum(tensor_input, num_steps, num_examples, layer_size):
        # Used for attribution methods which perform integration
        # Sums across integration steps by reshaping tensor to
        # (num_steps, num_examples, (layer_size)) and summing over
        # dimension 0. Returns a tensor of size (num_examples, (layer_size))
        return torch.sum(tensor_input.reshape((num_steps, num_examples) + layer_size), dim=0)

    def _call_custom_attribution_func(custom_attribution_func, multipliers, inputs, baselines):
        assert callable(custom_attribution_func), (
            "`custom_attribution_func`"
            " must be a callable function but {} provided".format(type(custom_attribution_func))
        )
        custom_attr_func_params = signature(custom_attribution_func).parameters

        if len(custom_attr_func_params) == 1:
            return custom_attribution_func(multipliers)
        elif len(custom_attr_func_params) == 2:
            return custom_attribution_func(multipliers, inputs)
        elif len(custom_attr_func_params) == 3:
            return custom_attribution_func(multipliers, inputs, baselines)
        else:
            raise AssertionError(
                "`custom_attribution_func` must take at least one and at most 3 arguments."
            )

    # ------------------------------------------------ captum/attr/_utils/attribution.py
    class Attribution:
        def __init__(self, forward_func):
            self.forward_func = forward_func

        attribute: typing.Callable

        @property
        def multiplies_by_inputs(self):
            return False

        def has_convergence_delta(self):
            return False

        @classmethod
        def get_name(cls):
            return "".join([char if char.islower() or idx == 0 else " " + char for idx, char in enumerate(cls.__name__)])

    class GradientAttribution(Attribution):
        def __init__(self, forward_func):
            Attribution.__init__(self, forward_func)
            self.gradient_func = compute_gradients

        @log_usage()
        def compute_convergence_delta(
            self,
            attributions,
            start_point,
            end_point,
            target=None,
            additional_forward_args=None,
        ):
            end_point, start_point = _format_input_baseline(end_point, start_point)
            additional_forward_args = _format_additional_forward_args(additional_forward_args)
            # tensorizing start_point in case it is a scalar or one example baseline
            # If the batch size is large we could potentially also tensorize only one
            # sample and expand the output to the rest of the elements in the batch
            start_point = _tensorize_baseline(end_point, start_point)

            attributions = _format_tensor_into_tuples(attributions)

            # verify that the attributions and end_point match on 1st dimension
            for attribution, end_point_tnsr in zip(attributions, end_point):
                assert end_point_tnsr.shape[0] == attribution.shape[0], (
                    "Attributions tensor and the end_point must match on the first"
                    " dimension but found attribution: {} and end_point: {}".format(
                        attribution.shape[0], end_point_tnsr.shape[0]
                    )
                )

            num_samples = end_point[0].shape[0]
            _validate_input(end_point, start_point)
            _validate_target(num_samples, target)

            with torch.no_grad():
                start_out_eval = _run_forward(self.forward_func, start_point, target, additional_forward_args)
                # _run_forward may return future of Tensor,
                # but we don't support it here now
                # And it will fail before here.
                start_out_sum = _sum_rows(start_out_eval)

                end_out_eval = _run_forward(self.forward_func, end_point, target, additional_forward_args)
                end_out_sum = _sum_rows(end_out_eval)

                row_sums = [_sum_rows(attribution) for attribution in attributions]
                attr_sum = torch.stack([sum(row_sum) for row_sum in zip(*row_sums)])
                _delta = attr_sum - (end_out_sum - start_out_sum)
            return _delta

    def _sum_rows(input):
        return input.reshape(input.shape[0], -1).sum(1)

    class PerturbationAttribution(Attribution):
        def __init__(self, forward_func):
            Attribution.__init__(self, forward_func)

        @property
        def multiplies_by_inputs(self):
            return True

    class InternalAttribution(Attribution):
        def __init__(self, forward_func, layer, device_ids=None):
            Attribution.__init__(self, forward_func)
            self.layer = layer
            self.device_ids = device_ids

    class LayerAttribution(InternalAttribution):
        def __init__(self, forward_func, layer, device_ids=None):
            InternalAttribution.__init__(self, forward_func, layer, device_ids)

        @staticmethod
        def interpolate(layer_attribution, interpolate_dims, interpolate_mode="nearest"):
            return F.interpolate(layer_attribution, interpolate_dims, mode=interpolate_mode)

    # ------------------------------------------------ captum/attr/_core/saliency.py
    class Saliency(GradientAttribution):
        def __init__(self, forward_func):
            GradientAttribution.__init__(self, forward_func)

        @log_usage()
        def attribute(self, inputs, target=None, abs=True, additional_forward_args=None):
            # Keeps track whether original input is a tuple or not before
            # converting it into a tuple.
            is_inputs_tuple = _is_tuple(inputs)

            inputs = _format_tensor_into_tuples(inputs)
            gradient_mask = apply_gradient_requirements(inputs)

            # No need to format additional_forward_args here.
            # They are being formated in the `_run_forward` function in `common.py`
            gradients = self.gradient_func(self.forward_func, inputs, target, additional_forward_args)
            if abs:
                attributions = tuple(torch.abs(gradient) for gradient in gradients)
            else:
                attributions = gradients
            undo_gradient_requirements(inputs, gradient_mask)
            return _format_output(is_inputs_tuple, attributions)

    # ------------------------------------------------ captum/attr/_core/input_x_gradient.py
    class InputXGradient(GradientAttribution):
        def __init__(self, forward_func):
            GradientAttribution.__init__(self, forward_func)

        @log_usage()
        def attribute(self, inputs, target=None, additional_forward_args=None):
            # Keeps track whether original input is a tuple or not before
            # converting it into a tuple.
            is_inputs_tuple = _is_tuple(inputs)

            inputs = _format_tensor_into_tuples(inputs)
            gradient_mask = apply_gradient_requirements(inputs)

            gradients = self.gradient_func(self.forward_func, inputs, target, additional_forward_args)

            attributions = tuple(input * gradient for input, gradient in zip(inputs, gradients))

            undo_gradient_requirements(inputs, gradient_mask)
            return _format_output(is_inputs_tuple, attributions)

        @property
        def multiplies_by_inputs(self):
            return True

    # ------------------------------------------------ captum/attr/_core/integrated_gradients.py
    class IntegratedGradients(GradientAttribution):
        def __init__(self, forward_func, multiply_by_inputs=True):
            GradientAttribution.__init__(self, forward_func)
            self._multiply_by_inputs = multiply_by_inputs

        @log_usage()
        def attribute(
            self,
            inputs,
            baselines=None,
            target=None,
            additional_forward_args=None,
            n_steps=50,
            method="gausslegendre",
            internal_batch_size=None,
            return_convergence_delta=False,
        ):
            # Keeps track whether original input is a tuple or not before
            # converting it into a tuple.
            is_inputs_tuple = _is_tuple(inputs)

            inputs, baselines = _format_input_baseline(inputs, baselines)

            _validate_input(inputs, baselines, n_steps, method)

            if internal_batch_size is not None:
                raise NotImplementedError("_batch_attribution is left out of this port")
            else:
                attributions = self._attribute(
                    inputs=inputs,
                    baselines=baselines,
                    target=target,
                    additional_forward_args=additional_forward_args,
                    n_steps=n_steps,
                    method=method,
                )

            if return_convergence_delta:
                start_point, end_point = baselines, inputs
                # computes approximation error based on the completeness axiom
                delta = self.compute_convergence_delta(
                    attributions,
                    start_point,
                    end_point,
                    additional_forward_args=additional_forward_args,
                    target=target,
                )
                return _format_output(is_inputs_tuple, attributions), delta
            return _format_output(is_inputs_tuple, attributions)

        def _attribute(
            self,
            inputs,
            baselines,
            target=None,
            additional_forward_args=None,
            n_steps=50,
            method="gausslegendre",
            step_sizes_and_alphas=None,
        ):
            if step_sizes_and_alphas is None:
                # retrieve step size and scaling factor for specified
                # approximation method
                step_sizes_func, alphas_func = approximation_parameters(method)
                step_sizes, alphas = step_sizes_func(n_steps), alphas_func(n_steps)
            else:
                step_sizes, alphas = step_sizes_and_alphas

            # scale features and compute gradients. (batch size is abbreviated as bsz)
            # scaled_features' dim -> (bsz * #steps x inputs[0].shape[1:], ...)
            scaled_features_tpl = tuple(
                torch.cat([baseline + alpha * (input - baseline) for alpha in alphas], dim=0).requires_grad_()
                for input, baseline in zip(inputs, baselines)
            )

            additional_forward_args = _format_additional_forward_args(additional_forward_args)
            # apply number of steps to additional forward args
            # currently, number of steps is applied only to additional forward arguments
            # that are nd-tensors. It is assumed that the first dimension is
            # the number of batches.
            # dim -> (bsz * #steps x additional_forward_args[0].shape[1:], ...)
            input_additional_args = (
                _expand_additional_forward_args(additional_forward_args, n_steps)
                if additional_forward_args is not None
                else None
            )
            expanded_target = _expand_target(target, n_steps)

            # grads: dim -> (bsz * #steps x inputs[0].shape[1:], ...)
            grads = self.gradient_func(
                forward_fn=self.forward_func,
                inputs=scaled_features_tpl,
                target_ind=expanded_target,
                additional_forward_args=input_additional_args,
            )

            # flattening grads so that we can multilpy it with step-size
            # calling contiguous to avoid `memory whole` problems
            scaled_grads = [
                grad.contiguous().view(n_steps, -1) * torch.tensor(step_sizes).view(n_steps, 1).to(grad.device)
                for grad in grads
            ]

            # aggregates across all steps for each tensor in the input tuple
            # total_grads has the same dimensionality as inputs
            total_grads = tuple(
                _reshape_and_sum(scaled_grad, n_steps, grad.shape[0] // n_steps, grad.shape[1:])
                for (scaled_grad, grad) in zip(scaled_grads, grads)
            )

            # computes attribution for each tensor in input tuple
            # attributions has the same dimensionality as inputs
            if not self.multiplies_by_inputs:
                attributions = total_grads
            else:
                attributions = tuple(
                    total_grad * (input - baseline)
                    for total_grad, input, baseline in zip(total_grads, inputs, baselines)
                )
            return attributions

        def has_convergence_delta(self):
            return True

        @property
        def multiplies_by_inputs(self):
            return self._multiply_by_inputs

    # ------------------------------------------------ captum/attr/_core/noise_tunnel.py
    class NoiseTunnelType(Enum):
        smoothgrad = 1
        smoothgrad_sq = 2
        vargrad = 3

    SUPPORTED_NOISE_TUNNEL_TYPES = list(NoiseTunnelType.__members__.keys())

    class NoiseTunnel(Attribution):
        def __init__(self, attribution_method):
            self.attribution_method = attribution_method
            self.is_delta_supported = self.attribution_method.has_convergence_delta()
            self._multiply_by_inputs = self.attribution_method.multiplies_by_inputs
            self.is_gradient_method = isinstance(self.attribution_method, GradientAttribution)
            Attribution.__init__(self, self.attribution_method.forward_func)

        @property
        def multiplies_by_inputs(self):
            return self._multiply_by_inputs

        @log_usage()
        def attribute(
            self,
            inputs,
            nt_type="smoothgrad",
            nt_samples=5,
            nt_samples_batch_size=None,
            stdevs=1.0,
            draw_baseline_from_distrib=False,
            **kwargs,
        ):
            def add_noise_to_inputs(nt_samples_partition):
                if isinstance(stdevs, tuple):
                    assert len(stdevs) == len(inputs), (
                        "The number of input tensors "
                        "in {} must be equal to the number of stdevs values {}".format(len(inputs), len(stdevs))
                    )
                else:
                    assert isinstance(stdevs, float), "stdevs must be type float. " "Given: {}".format(type(stdevs))
                    stdevs_ = (stdevs,) * len(inputs)
                return tuple(
                    add_noise_to_input(input, stdev, nt_samples_partition).requires_grad_()
                    if self.is_gradient_method
                    else add_noise_to_input(input, stdev, nt_samples_partition)
                    for (input, stdev) in zip(inputs, stdevs_)
                )

            def add_noise_to_input(input, stdev, nt_samples_partition):
                # batch size
                bsz = input.shape[0]

                # expand input size by the number of drawn samples
                input_expanded_size = (bsz * nt_samples_partition,) + input.shape[1:]

                # expand stdev for the shape of the input and number of drawn samples
                stdev_expanded = torch.tensor(stdev, device=input.device).repeat(input_expanded_size)

                # draws `np.prod(input_expanded_size)` samples from normal distribution
                # with given input parametrization
                # FIXME it look like it is very difficult to make torch.normal
                # deterministic this needs an investigation
                noise = torch.normal(0, stdev_expanded)
                return input.repeat_interleave(nt_samples_partition, dim=0) + noise

            def update_sum_attribution_and_sq(
                sum_attribution, sum_attribution_sq, attribution, i, nt_samples_batch_size_inter
            ):
                bsz = attribution.shape[0] // nt_samples_batch_size_inter
                attribution_shape = (bsz, nt_samples_batch_size_inter)
                if len(attribution.shape) > 1:
                    attribution_shape += tuple(attribution.shape[1:])

                attribution = attribution.view(attribution_shape)
                current_attribution_sum = attribution.sum(dim=1, keepdim=False)
                current_attribution_sq = torch.sum(attribution**2, dim=1, keepdim=False)

                sum_attribution[i] = (
                    current_attribution_sum
                    if not isinstance(sum_attribution[i], torch.Tensor)
                    else sum_attribution[i] + current_attribution_sum
                )
                sum_attribution_sq[i] = (
                    current_attribution_sq
                    if not isinstance(sum_attribution_sq[i], torch.Tensor)
                    else sum_attribution_sq[i] + current_attribution_sq
                )

            def compute_partial_attribution(inputs_with_noise_partition, kwargs_partition):
                # smoothgrad_Attr(x) = 1 / n * sum(Attr(x + N(0, sigma^2))
                # NOTE: using __wrapped__ such that it does not log the inner logs

                attributions = attr_func.__wrapped__(  # type: ignore
                    self.attribution_method,  # self
                    inputs_with_noise_partition if is_inputs_tuple else inputs_with_noise_partition[0],
                    **kwargs_partition,
                )
                delta = None

                if self.is_delta_supported and return_convergence_delta:
                    attributions, delta = attributions

                is_attrib_tuple = _is_tuple(attributions)
                attributions = _format_tensor_into_tuples(attributions)

                return attributions, is_attrib_tuple, delta

            def expand_partial(nt_samples_partition, kwargs_partial):
                # if the algorithm supports targets, baselines and/or
                # additional_forward_args they will be expanded based
                # on the nt_samples_partition and corresponding kwargs
                # variables will be updated accordingly
                _expand_and_update_additional_forward_args(nt_samples_partition, kwargs_partial)
                _expand_and_update_target(nt_samples_partition, kwargs_partial)
                _expand_and_update_baselines(
                    inputs,
                    nt_samples_partition,
                    kwargs_partial,
                    draw_baseline_from_distrib=draw_baseline_from_distrib,
                )
                _expand_and_update_feature_mask(nt_samples_partition, kwargs_partial)

            def compute_smoothing(expected_attributions, expected_attributions_sq):
                if NoiseTunnelType[nt_type] == NoiseTunnelType.smoothgrad:
                    return expected_attributions

                if NoiseTunnelType[nt_type] == NoiseTunnelType.smoothgrad_sq:
                    return expected_attributions_sq

                vargrad = tuple(
                    expected_attribution_sq - expected_attribution * expected_attribution
                    for expected_attribution, expected_attribution_sq in zip(
                        expected_attributions, expected_attributions_sq
                    )
                )

                return vargrad

            def update_partial_attribution_and_delta(
                attributions_partial,
                delta_partial,
                sum_attributions,
                sum_attributions_sq,
                delta_partial_list,
                nt_samples_partial,
            ):
                for i, attribution_partial in enumerate(attributions_partial):
                    update_sum_attribution_and_sq(
                        sum_attributions,
                        sum_attributions_sq,
                        attribution_partial,
                        i,
                        nt_samples_partial,
                    )
                if self.is_delta_supported and return_convergence_delta:
                    delta_partial_list.append(delta_partial)

            return_convergence_delta = "return_convergence_delta" in kwargs and kwargs["return_convergence_delta"]
            with torch.no_grad():
                nt_samples_batch_size = (
                    nt_samples if nt_samples_batch_size is None else min(nt_samples, nt_samples_batch_size)
                )

                nt_samples_partition = nt_samples // nt_samples_batch_size

                # Keeps track whether original input is a tuple or not before
                # converting it into a tuple.
                is_inputs_tuple = isinstance(inputs, tuple)

                inputs = _format_tensor_into_tuples(inputs)  # type: ignore

                _validate_noise_tunnel_type(nt_type, SUPPORTED_NOISE_TUNNEL_TYPES)

                kwargs_copy = kwargs.copy()
                expand_partial(nt_samples_batch_size, kwargs_copy)

                attr_func = self.attribution_method.attribute

                sum_attributions = []
                sum_attributions_sq = []
                delta_partial_list = []

                for _ in range(nt_samples_partition):
                    inputs_with_noise = add_noise_to_inputs(nt_samples_batch_size)
                    (
                        attributions_partial,
                        is_attrib_tuple,
                        delta_partial,
                    ) = compute_partial_attribution(inputs_with_noise, kwargs_copy)

                    if len(sum_attributions) == 0:
                        sum_attributions = [None] * len(attributions_partial)
                        sum_attributions_sq = [None] * len(attributions_partial)

                    update_partial_attribution_and_delta(
                        attributions_partial,
                        delta_partial,
                        sum_attributions,
                        sum_attributions_sq,
                        delta_partial_list,
                        nt_samples_batch_size,
                    )

                nt_samples_remaining = nt_samples - nt_samples_partition * nt_samples_batch_size
                if nt_samples_remaining > 0:
                    inputs_with_noise = add_noise_to_inputs(nt_samples_remaining)
                    expand_partial(nt_samples_remaining, kwargs)
                    (
                        attributions_partial,
                        is_attrib_tuple,
                        delta_partial,
                    ) = compute_partial_attribution(inputs_with_noise, kwargs)

                    update_partial_attribution_and_delta(
                        attributions_partial,
                        delta_partial,
                        sum_attributions,
                        sum_attributions_sq,
                        delta_partial_list,
                        nt_samples_remaining,
                    )

                expected_attributions = tuple(
                    [sum_attribution * 1 / nt_samples for sum_attribution in sum_attributions]
                )
                expected_attributions_sq = tuple(
                    [sum_attribution_sq * 1 / nt_samples for sum_attribution_sq in sum_attributions_sq]
                )
                attributions = compute_smoothing(expected_attributions, expected_attributions_sq)

                delta = None
                if self.is_delta_supported and return_convergence_delta:
                    delta = torch.cat(delta_partial_list, dim=0)

            return self._apply_checks_and_return_attributions(
                attributions, is_attrib_tuple, return_convergence_delta, delta
            )

        def _apply_checks_and_return_attributions(self, attributions, is_attrib_tuple, return_convergence_delta, delta):
            attributions = _format_output(is_attrib_tuple, attributions)

            ret = (attributions, delta) if self.is_delta_supported and return_convergence_delta else attributions
            return ret

        def has_convergence_delta(self):
            return self.is_delta_supported

    # ------------------------------------------------ captum/attr/_core/deep_lift.py
    class DeepLift(GradientAttribution):
        def __init__(self, model, multiply_by_inputs=True, eps=1e-10):
            GradientAttribution.__init__(self, model)
            self.model = model
            self.eps = eps
            self.forward_handles = []
            self.backward_handles = []
            self._multiply_by_inputs = multiply_by_inputs

        @log_usage()
        def attribute(
            self,
            inputs,
            baselines=None,
            target=None,
            additional_forward_args=None,
            return_convergence_delta=False,
            custom_attribution_func=None,
        ):
            # Keeps track whether original input is a tuple or not before
            # converting it into a tuple.
            is_inputs_tuple = _is_tuple(inputs)

            inputs = _format_tensor_into_tuples(inputs)
            baselines = _format_baseline(baselines, inputs)

            gradient_mask = apply_gradient_requirements(inputs)

            _validate_input(inputs, baselines)

            # set hooks for baselines
            warnings.warn(
                """Setting forward, backward hooks and attributes on non-linear
               activations. The hooks and attributes will be removed
            after the attribution is finished"""
            )
            baselines = _tensorize_baseline(inputs, baselines)
            main_model_hooks = []
            try:
                main_model_hooks = self._hook_main_model()

                self.model.apply(self._register_hooks)

                additional_forward_args = _format_additional_forward_args(additional_forward_args)

                expanded_target = _expand_target(target, 2, expansion_type=ExpansionTypes.repeat)

                wrapped_forward_func = self._construct_forward_func(
                    self.model,
                    (inputs, baselines),
                    expanded_target,
                    additional_forward_args,
                )
                gradients = self.gradient_func(wrapped_forward_func, inputs)
                if custom_attribution_func is None:
                    if self.multiplies_by_inputs:
                        attributions = tuple(
                            (input - baseline) * gradient
                            for input, baseline, gradient in zip(inputs, baselines, gradients)
                        )
                    else:
                        attributions = gradients
                else:
                    attributions = _call_custom_attribution_func(custom_attribution_func, gradients, inputs, baselines)
            finally:
                # Even if any error is raised, remove all hooks before raising
                self._remove_hooks(main_model_hooks)

            undo_gradient_requirements(inputs, gradient_mask)
            return _compute_conv_delta_and_format_attrs(
                self,
                return_convergence_delta,
                attributions,
                baselines,
                inputs,
                additional_forward_args,
                target,
                is_inputs_tuple,
            )

        def _construct_forward_func(self, forward_func, inputs, target=None, additional_forward_args=None):
            def forward_fn():
                model_out = _run_forward(forward_func, inputs, None, additional_forward_args)
                return _select_targets(torch.cat((model_out[:, 0], model_out[:, 1])), target)

            if hasattr(forward_func, "device_ids"):
                forward_fn.device_ids = forward_func.device_ids  # type: ignore
            return forward_fn

        def _is_non_linear(self, module):
            return type(module) in SUPPORTED_NON_LINEAR.keys()

        def _forward_pre_hook_ref(self, module, inputs):
            inputs = _format_tensor_into_tuples(inputs)
            module.input_ref = tuple(input.clone().detach() for input in inputs)  # type: ignore

        def _forward_pre_hook(self, module, inputs):
            """
            For the modules that perform in-place operations such as ReLUs, we cannot
            use inputs from forward hooks. This is because in that case inputs
            and outputs are the same. We need access the inputs in pre-hooks and
            set necessary hooks on inputs there.
            """
            inputs = _format_tensor_into_tuples(inputs)
            module.input = inputs[0].clone().detach()

        def _forward_hook(self, module, inputs, outputs):
            r"""
            we need forward hook to access and detach the inputs and
            outputs of a neuron
            """
            outputs = _format_tensor_into_tuples(outputs)
            module.output = outputs[0].clone().detach()

        def _backward_hook(self, module, grad_input, grad_output):
            # before accessing the attributes from the module we want
            # to ensure that the properties exist, if not, then it is
            # likely that the module is being reused.
            attr_criteria = self.satisfies_attribute_criteria(module)
            if not attr_criteria:
                raise RuntimeError(
                    "A Module {} was detected that does not contain some of "
                    "the input/output attributes that are required for DeepLift "
                    "computations. This can occur, for example, if "
                    "your module is being used more than once in the network."
                    "Please, ensure that module is being used only once in the "
                    "network.".format(module)
                )

            multipliers = SUPPORTED_NON_LINEAR[type(module)](
                module,
                module.input,
                module.output,
                grad_input,
                grad_output,
                eps=self.eps,
            )
            # remove all the properies that we set for the inputs and output
            del module.input
            del module.output

            return multipliers

        def satisfies_attribute_criteria(self, module):
            return hasattr(module, "input") and hasattr(module, "output")

        def _can_register_hook(self, module):
            # TODO find a better way of checking if a module is a container or not
            module_fullname = str(type(module))
            has_already_hooks = len(module._backward_hooks) > 0  # type: ignore
            return not (
                "nn.modules.container" in module_fullname or has_already_hooks or not self._is_non_linear(module)
            )

        def _register_hooks(self, module, attribute_to_layer_input=True):
            if not self._can_register_hook(module) or (
                not attribute_to_layer_input and module is self.layer  # type: ignore
            ):
                return
            # adds forward hook to leaf nodes that are non-linear
            forward_handle = module.register_forward_hook(self._forward_hook)
            pre_forward_handle = module.register_forward_pre_hook(self._forward_pre_hook)
            backward_handles = _register_backward_hook(module, self._backward_hook, self)
            self.forward_handles.append(forward_handle)
            self.forward_handles.append(pre_forward_handle)
            self.backward_handles.extend(backward_handles)

        def _remove_hooks(self, extra_hooks_to_remove):
            for handle in extra_hooks_to_remove:
                handle.remove()
            for forward_handle in self.forward_handles:
                forward_handle.remove()
            for backward_handle in self.backward_handles:
                backward_handle.remove()

        def _hook_main_model(self):
            def pre_hook(module, baseline_inputs_add_args):
                inputs = baseline_inputs_add_args[0]
                baselines = baseline_inputs_add_args[1]
                additional_args = None
                if len(baseline_inputs_add_args) > 2:
                    additional_args = baseline_inputs_add_args[2:]

                baseline_input_tsr = tuple(torch.cat([input, baseline]) for input, baseline in zip(inputs, baselines))
                if additional_args is not None:
                    expanded_additional_args = _expand_additional_forward_args(
                        additional_args, 2, ExpansionTypes.repeat
                    )
                    return (*baseline_input_tsr, *expanded_additional_args)
                return baseline_input_tsr

            def forward_hook(module, inputs, outputs):
                return torch.stack(torch.chunk(outputs, 2), dim=1)

            if isinstance(self.model, (nn.DataParallel, nn.parallel.DistributedDataParallel)):
                return [
                    self.model.module.register_forward_pre_hook(pre_hook),  # type: ignore
                    self.model.module.register_forward_hook(forward_hook),
                ]  # type: ignore
            else:
                return [
                    self.model.register_forward_pre_hook(pre_hook),  # type: ignore
                    self.model.register_forward_hook(forward_hook),
                ]  # type: ignore

        def has_convergence_delta(self):
            return True

        @property
        def multiplies_by_inputs(self):
            return self._multiply_by_inputs

    class DeepLiftShap(DeepLift):
        def __init__(self, model, multiply_by_inputs=True):
            DeepLift.__init__(self, model, multiply_by_inputs=multiply_by_inputs)

        @log_usage()
        def attribute(
            self,
            inputs,
            baselines,
            target=None,
            additional_forward_args=None,
            return_convergence_delta=False,
            custom_attribution_func=None,
        ):
            baselines = _format_callable_baseline(baselines, inputs)

            assert isinstance(baselines[0], torch.Tensor) and baselines[0].shape[0] > 1, (
                "Baselines distribution has to be provided in form of a torch.Tensor"
                " with more than one example but found: {}."
                " If baselines are provided in shape of scalars or with a single"
                " baseline example, `DeepLift`"
                " approach can be used instead.".format(baselines[0])
            )

            # Keeps track whether original input is a tuple or not before
            # converting it into a tuple.
            is_inputs_tuple = _is_tuple(inputs)

            inputs = _format_tensor_into_tuples(inputs)

            # batch sizes
            inp_bsz = inputs[0].shape[0]
            base_bsz = baselines[0].shape[0]

            (
                exp_inp,
                exp_base,
                exp_tgt,
                exp_addit_args,
            ) = self._expand_inputs_baselines_targets(baselines, inputs, target, additional_forward_args)
            attributions = super().attribute.__wrapped__(  # type: ignore
                self,
                exp_inp,
                exp_base,
                target=exp_tgt,
                additional_forward_args=exp_addit_args,
                return_convergence_delta=return_convergence_delta,
                custom_attribution_func=custom_attribution_func,
            )
            if return_convergence_delta:
                attributions, delta = attributions

            attributions = tuple(
                self._compute_mean_across_baselines(inp_bsz, base_bsz, attribution) for attribution in attributions
            )

            if return_convergence_delta:
                return _format_output(is_inputs_tuple, attributions), delta
            else:
                return _format_output(is_inputs_tuple, attributions)

        def _expand_inputs_baselines_targets(self, baselines, inputs, target, additional_forward_args):
            inp_bsz = inputs[0].shape[0]
            base_bsz = baselines[0].shape[0]

            expanded_inputs = tuple([input.repeat_interleave(base_bsz, dim=0).requires_grad_() for input in inputs])
            expanded_baselines = tuple(
                [
                    baseline.repeat((inp_bsz,) + tuple([1] * (len(baseline.shape) - 1))).requires_grad_()
                    for baseline in baselines
                ]
            )
            expanded_target = _expand_target(target, base_bsz, expansion_type=ExpansionTypes.repeat_interleave)
            input_additional_args = (
                _expand_additional_forward_args(
                    additional_forward_args,
                    base_bsz,
                    expansion_type=ExpansionTypes.repeat_interleave,
                )
                if additional_forward_args is not None
                else None
            )
            return (
                expanded_inputs,
                expanded_baselines,
                expanded_target,
                input_additional_args,
            )

        def _compute_mean_across_baselines(self, inp_bsz, base_bsz, attribution):
            # Average for multiple references
            attr_shape = (inp_bsz, base_bsz)
            if len(attribution.shape) > 1:
                attr_shape += attribution.shape[1:]
            return torch.mean(attribution.view(attr_shape), dim=1, keepdim=False)

    def nonlinear(module, inputs, outputs, grad_input, grad_output, eps=1e-10):
        r"""
        grad_input: (dLoss / dprev_layer_out, dLoss / wij, dLoss / bij)
        grad_output: (dLoss / dlayer_out)
        https://github.com/pytorch/pytorch/issues/12331
        """
        delta_in, delta_out = _compute_diffs(inputs, outputs)

        new_grad_inp = torch.where(abs(delta_in) < eps, grad_input, grad_output * delta_out / delta_in)

        return new_grad_inp

    def softmax(module, inputs, outputs, grad_input, grad_output, eps=1e-10):
        delta_in, delta_out = _compute_diffs(inputs, outputs)

        grad_input_unnorm = torch.where(abs(delta_in) < eps, grad_input, grad_output * delta_out / delta_in)
        # normalizing
        n = grad_input.numel()

        # updating only the first half
        new_grad_inp = grad_input_unnorm - grad_input_unnorm.sum() * 1 / n
        return new_grad_inp

    def _compute_diffs(inputs, outputs):
        input, input_ref = inputs.chunk(2)
        # if the model is a single non-linear module and we apply Rescale rule on it
        # we might not be able to perform chunk-ing because the output of the module is
        # usually being replaced by model output.
        output, output_ref = outputs.chunk(2)
        delta_in = input - input_ref
        delta_out = output - output_ref

        return torch.cat(2 * [delta_in]), torch.cat(2 * [delta_out])

    SUPPORTED_NON_LINEAR = {
        nn.ReLU: nonlinear,
        nn.ELU: nonlinear,
        nn.LeakyReLU: nonlinear,
        nn.Sigmoid: nonlinear,
        nn.Tanh: nonlinear,
        nn.Softplus: nonlinear,
        nn.Softmax: softmax,
    }

    # ------------------------------------------------ captum/attr/_core/gradient_shap.py
    class GradientShap(GradientAttribution):
        def __init__(self, forward_func, multiply_by_inputs=True):
            GradientAttribution.__init__(self, forward_func)
            self._multiply_by_inputs = multiply_by_inputs

        @log_usage()
        def attribute(
            self,
            inputs,
            baselines,
            n_samples=5,
            stdevs=0.0,
            target=None,
            additional_forward_args=None,
            return_convergence_delta=False,
        ):
            # since `baselines` is a distribution, we can generate it using a function
            # rather than passing it as an input argument
            baselines = _format_callable_baseline(baselines, inputs)
            assert isinstance(baselines[0], torch.Tensor), (
                "Baselines distribution has to be provided in a form " "of a torch.Tensor {}.".format(baselines[0])
            )

            input_min_baseline_x_grad = InputBaselineXGradient(self.forward_func, self.multiplies_by_inputs)
            input_min_baseline_x_grad.gradient_func = self.gradient_func

            nt = NoiseTunnel(input_min_baseline_x_grad)

            # NOTE: using attribute.__wrapped__ to not log
            attributions = nt.attribute.__wrapped__(
                nt,  # self
                inputs,
                nt_type="smoothgrad",
                nt_samples=n_samples,
                stdevs=stdevs,
                draw_baseline_from_distrib=True,
                baselines=baselines,
                target=target,
                additional_forward_args=additional_forward_args,
                return_convergence_delta=return_convergence_delta,
            )

            return attributions

        def has_convergence_delta(self):
            return True

        @property
        def multiplies_by_inputs(self):
            return self._multiply_by_inputs

    class InputBaselineXGradient(GradientAttribution):
        def __init__(self, forward_func, multiply_by_inputs=True):
            GradientAttribution.__init__(self, forward_func)
            self._multiply_by_inputs = multiply_by_inputs

        @log_usage()
        def attribute(
            self,
            inputs,
            baselines=None,
            target=None,
            additional_forward_args=None,
            return_convergence_delta=False,
        ):
            # Keeps track whether original input is a tuple or not before
            # converting it into a tuple.
            is_inputs_tuple = _is_tuple(inputs)
            inputs, baselines = _format_input_baseline(inputs, baselines)

            rand_coefficient = torch.tensor(
                np.random.uniform(0.0, 1.0, inputs[0].shape[0]),
                device=inputs[0].device,
                dtype=inputs[0].dtype,
            )

            input_baseline_scaled = tuple(
                _scale_input(input, baseline, rand_coefficient) for input, baseline in zip(inputs, baselines)
            )
            grads = self.gradient_func(self.forward_func, input_baseline_scaled, target, additional_forward_args)

            if self.multiplies_by_inputs:
                input_baseline_diffs = tuple(input - baseline for input, baseline in zip(inputs, baselines))
                attributions = tuple(
                    input_baseline_diff * grad for input_baseline_diff, grad in zip(input_baseline_diffs, grads)
                )
            else:
                attributions = grads

            return _compute_conv_delta_and_format_attrs(
                self,
                return_convergence_delta,
                attributions,
                baselines,
                inputs,
                additional_forward_args,
                target,
                is_inputs_tuple,
            )

        def has_convergence_delta(self):
            return True

        @property
        def multiplies_by_inputs(self):
            return self._multiply_by_inputs

    def _scale_input(input, baseline, rand_coefficient):
        # batch size
        bsz = input.shape[0]
        inp_shape_wo_bsz = input.shape[1:]
        inp_shape = (bsz,) + tuple([1] * len(inp_shape_wo_bsz))

        # expand and reshape the indices
        rand_coefficient = rand_coefficient.view(inp_shape)

        input_baseline_scaled = (rand_coefficient * input + (1.0 - rand_coefficient) * baseline).requires_grad_()
        return input_baseline_scaled

    # ------------------------------------------------ captum/attr/_core/guided_backprop_deconvnet.py
    class ModifiedReluGradientAttribution(GradientAttribution):
        def __init__(self, model, use_relu_grad_output=False):
            GradientAttribution.__init__(self, model)
            self.model = model
            self.backward_hooks = []
            self.use_relu_grad_output = use_relu_grad_output
            assert isinstance(self.model, torch.nn.Module), (
                "Given model must be an instance of torch.nn.Module to properly hook" " ReLU layers."
            )

        @log_usage()
        def attribute(self, inputs, target=None, additional_forward_args=None):
            # Keeps track whether original input is a tuple or not before
            # converting it into a tuple.
            is_inputs_tuple = _is_tuple(inputs)

            inputs = _format_tensor_into_tuples(inputs)
            gradient_mask = apply_gradient_requirements(inputs)

            # set hooks for overriding ReLU gradients
            warnings.warn(
                "Setting backward hooks on ReLU activations." "The hooks will be removed after the attribution is finished"
            )
            try:
                self.model.apply(self._register_hooks)

                gradients = self.gradient_func(self.forward_func, inputs, target, additional_forward_args)
            finally:
                self._remove_hooks()

            undo_gradient_requirements(inputs, gradient_mask)
            return _format_output(is_inputs_tuple, gradients)

        def _register_hooks(self, module):
            if isinstance(module, torch.nn.ReLU):
                hooks = _register_backward_hook(module, self._backward_hook, self)
                self.backward_hooks.extend(hooks)

        def _backward_hook(self, module, grad_input, grad_output):
            to_override_grads = grad_output if self.use_relu_grad_output else grad_input
            if isinstance(to_override_grads, tuple):
                return tuple(F.relu(to_override_grad) for to_override_grad in to_override_grads)
            else:
                return F.relu(to_override_grads)

        def _remove_hooks(self):
            for hook in self.backward_hooks:
                hook.remove()

    class GuidedBackprop(ModifiedReluGradientAttribution):
        def __init__(self, model):
            ModifiedReluGradientAttribution.__init__(self, model, use_relu_grad_output=False)

        @log_usage()
        def attribute(self, inputs, target=None, additional_forward_args=None):
            return super().attribute.__wrapped__(self, inputs, target, additional_forward_args)

    class Deconvolution(ModifiedReluGradientAttribution):
        def __init__(self, model):
            ModifiedReluGradientAttribution.__init__(self, model, use_relu_grad_output=True)

        @log_usage()
        def attribute(self, inputs, target=None, additional_forward_args=None):
            return super().attribute.__wrapped__(self, inputs, target, additional_forward_args)

    class LegacyModifiedReluGradientAttribution(ModifiedReluGradientAttribution):
        """captum 0.2's hooks (03225008): ``module.register_backward_hook`` on each ReLU."""

        def _register_hooks(self, module):
            if isinstance(module, torch.nn.ReLU):
                hook = module.register_backward_hook(self._backward_hook)
                self.backward_hooks.append(hook)

    # ------------------------------------------------ captum/attr/_core/layer/layer_integrated_gradients.py (0032cbd)
    def _extract_device(module, hook_inputs, hook_outputs):
        params = list(module.parameters())
        if (
            (hook_inputs is None or len(hook_inputs) == 0)
            and (hook_outputs is None or len(hook_outputs) == 0)
            and len(params) == 0
        ):
            raise RuntimeError("Unable to extract device information for the module {}.".format(module))
        if hook_inputs is not None and len(hook_inputs) > 0:
            return hook_inputs[0].device
        if hook_outputs is not None and len(hook_outputs) > 0:
            return hook_outputs[0].device

        return params[0].device

    def _forward_layer_eval(forward_fn, inputs, layer, additional_forward_args=None, device_ids=None,
                            attribute_to_layer_input=False, grad_enabled=False):
        # gradient.py's _forward_layer_eval_with_neuron_grads without a neuron selector
        with torch.autograd.set_grad_enabled(grad_enabled):
            saved_layer = _forward_layer_distributed_eval(
                forward_fn,
                inputs,
                layer,
                additional_forward_args=additional_forward_args,
                attribute_to_layer_input=attribute_to_layer_input,
            )
        device_ids = _extract_device_ids(forward_fn, saved_layer, device_ids)
        key_list = _sort_key_list(list(next(iter(saved_layer.values())).keys()), device_ids)
        return _reduce_list([saved_layer[layer][device_id] for device_id in key_list])

    class LayerIntegratedGradients(LayerAttribution, GradientAttribution):
        def __init__(self, forward_func, layer, device_ids=None):
            LayerAttribution.__init__(self, forward_func, layer, device_ids=device_ids)
            GradientAttribution.__init__(self, forward_func)
            self.ig = IntegratedGradients(forward_func)

        def attribute(
            self,
            inputs,
            baselines=None,
            target=None,
            additional_forward_args=None,
            n_steps=50,
            method="gausslegendre",
            internal_batch_size=None,
            return_convergence_delta=False,
            attribute_to_layer_input=False,
        ):
            inps, baselines = _format_input_baseline(inputs, baselines)
            _validate_input(inps, baselines, n_steps, method)

            baselines = _tensorize_baseline(inps, baselines)
            additional_forward_args = _format_additional_forward_args(additional_forward_args)

            if self.device_ids is None:
                self.device_ids = getattr(self.forward_func, "device_ids", None)
            inputs_layer = _forward_layer_eval(
                self.forward_func,
                inps,
                self.layer,
                device_ids=self.device_ids,
                additional_forward_args=additional_forward_args,
                attribute_to_layer_input=attribute_to_layer_input,
            )
            is_layer_tuple = False  # the era's _forward_layer_eval also returned it: one tensor here

            baselines_layer = _forward_layer_eval(
                self.forward_func,
                baselines,
                self.layer,
                device_ids=self.device_ids,
                additional_forward_args=additional_forward_args,
                attribute_to_layer_input=attribute_to_layer_input,
            )

            # inputs -> these inputs are scaled
            def gradient_func(forward_fn, inputs, target_ind=None, additional_forward_args=None):
                if self.device_ids is None:
                    scattered_inputs = (inputs,)
                else:
                    raise NotImplementedError("scatter over devices is left out of this port")

                scattered_inputs_dict = {scattered_input[0].device: scattered_input for scattered_input in scattered_inputs}

                with torch.autograd.set_grad_enabled(True):

                    def layer_forward_hook(module, hook_inputs, hook_outputs=None):
                        device = _extract_device(module, hook_inputs, hook_outputs)
                        if is_layer_tuple:
                            return scattered_inputs_dict[device]
                        return scattered_inputs_dict[device][0]

                    if attribute_to_layer_input:
                        hook = self.layer.register_forward_pre_hook(layer_forward_hook)
                    else:
                        hook = self.layer.register_forward_hook(layer_forward_hook)

                    output = _run_forward(self.forward_func, tuple(), target_ind, additional_forward_args)
                    hook.remove()
                    assert output[0].numel() == 1, (
                        "Target not provided when necessary, cannot" " take gradient with respect to multiple outputs."
                    )
                    # torch.unbind(forward_out) is a list of scalar tensor tuples and
                    # contains batch_size * #steps elements
                    grads = torch.autograd.grad(torch.unbind(output), inputs)
                return grads

            self.ig.gradient_func = gradient_func
            all_inputs = (inps + additional_forward_args) if additional_forward_args is not None else inps
            attributions = self.ig.attribute(
                inputs_layer,
                baselines=baselines_layer,
                target=target,
                additional_forward_args=all_inputs,
                n_steps=n_steps,
                method=method,
                internal_batch_size=internal_batch_size,
                return_convergence_delta=False,
            )

            if return_convergence_delta:
                start_point, end_point = baselines, inps
                # computes approximation error based on the completeness axiom
                delta = self.compute_convergence_delta(
                    attributions,
                    start_point,
                    end_point,
                    additional_forward_args=additional_forward_args,
                    target=target,
                )
                return _format_output(is_layer_tuple, attributions), delta
            return _format_output(is_layer_tuple, attributions)

        def has_convergence_delta(self):
            return True

    # ------------------------------------------------ captum/attr/_core/layer/grad_cam.py (02104e9)
    class LayerGradCam(LayerAttribution, GradientAttribution):
        def __init__(self, forward_func, layer, device_ids=None):
            LayerAttribution.__init__(self, forward_func, layer, device_ids)
            GradientAttribution.__init__(self, forward_func)

        @log_usage()
        def attribute(self, inputs, target=None, additional_forward_args=None, attribute_to_layer_input=False,
                      relu_attributions=False):
            inputs = _format_input(inputs)
            additional_forward_args = _format_additional_forward_args(additional_forward_args)
            gradient_mask = apply_gradient_requirements(inputs)
            # Returns gradient of output with respect to
            # hidden layer and hidden layer evaluated at each input.
            layer_gradients, layer_evals = compute_layer_gradients_and_eval(
                self.forward_func,
                self.layer,
                inputs,
                target,
                additional_forward_args,
                device_ids=self.device_ids,
                attribute_to_layer_input=attribute_to_layer_input,
            )
            undo_gradient_requirements(inputs, gradient_mask)

            summed_grads = tuple(
                torch.mean(
                    layer_grad,
                    dim=tuple(x for x in range(2, len(layer_grad.shape))),
                    keepdim=True,
                )
                if len(layer_grad.shape) > 2
                else layer_grad
                for layer_grad in layer_gradients
            )

            scaled_acts = tuple(
                torch.sum(summed_grad * layer_eval, dim=1, keepdim=True)
                for summed_grad, layer_eval in zip(summed_grads, layer_evals)
            )
            if relu_attributions:
                scaled_acts = tuple(F.relu(scaled_act) for scaled_act in scaled_acts)
            return _format_output(len(scaled_acts) > 1, scaled_acts)

    # ------------------------------------------------ captum/attr/_core/layer/layer_conductance.py
    class LayerConductance(LayerAttribution, GradientAttribution):
        def __init__(self, forward_func, layer, device_ids=None):
            LayerAttribution.__init__(self, forward_func, layer, device_ids)
            GradientAttribution.__init__(self, forward_func)

        def has_convergence_delta(self):
            return True

        @log_usage()
        def attribute(
            self,
            inputs,
            baselines=None,
            target=None,
            additional_forward_args=None,
            n_steps=50,
            method="gausslegendre",
            internal_batch_size=None,
            return_convergence_delta=False,
            attribute_to_layer_input=False,
        ):
            inputs, baselines = _format_input_baseline(inputs, baselines)
            _validate_input(inputs, baselines, n_steps, method)

            num_examples = inputs[0].shape[0]
            if internal_batch_size is not None:
                raise NotImplementedError("_batch_attribution is left out of this port")
            else:
                attrs = self._attribute(
                    inputs=inputs,
                    baselines=baselines,
                    target=target,
                    additional_forward_args=additional_forward_args,
                    n_steps=n_steps,
                    method=method,
                    attribute_to_layer_input=attribute_to_layer_input,
                )

            is_layer_tuple = isinstance(attrs, tuple)
            attributions = attrs if is_layer_tuple else (attrs,)

            if return_convergence_delta:
                start_point, end_point = baselines, inputs
                delta = self.compute_convergence_delta(
                    attributions,
                    start_point,
                    end_point,
                    target=target,
                    additional_forward_args=additional_forward_args,
                )
                return _format_output(is_layer_tuple, attributions), delta
            return _format_output(is_layer_tuple, attributions)

        def _attribute(
            self,
            inputs,
            baselines,
            target=None,
            additional_forward_args=None,
            n_steps=50,
            method="gausslegendre",
            attribute_to_layer_input=False,
            step_sizes_and_alphas=None,
        ):
            num_examples = inputs[0].shape[0]
            if step_sizes_and_alphas is None:
                # Retrieve scaling factors for specified approximation method
                step_sizes_func, alphas_func = approximation_parameters(method)
                alphas = alphas_func(n_steps + 1)
            else:
                _, alphas = step_sizes_and_alphas
            # Compute scaled inputs from baseline to final input.
            scaled_features_tpl = tuple(
                torch.cat([baseline + alpha * (input - baseline) for alpha in alphas], dim=0).requires_grad_()
                for input, baseline in zip(inputs, baselines)
            )

            additional_forward_args = _format_additional_forward_args(additional_forward_args)
            # apply number of steps to additional forward args
            # currently, number of steps is applied only to additional forward arguments
            # that are nd-tensors. It is assumed that the first dimension is
            # the number of batches.
            # dim -> (#examples * #steps x additional_forward_args[0].shape[1:], ...)
            input_additional_args = (
                _expand_additional_forward_args(additional_forward_args, n_steps + 1)
                if additional_forward_args is not None
                else None
            )
            expanded_target = _expand_target(target, n_steps + 1)

            # Conductance Gradients - Returns gradient of output with respect to
            # hidden layer and hidden layer evaluated at each input.
            (
                layer_gradients,
                layer_evals,
            ) = compute_layer_gradients_and_eval(
                forward_fn=self.forward_func,
                layer=self.layer,
                inputs=scaled_features_tpl,
                additional_forward_args=input_additional_args,
                target_ind=expanded_target,
                device_ids=self.device_ids,
                attribute_to_layer_input=attribute_to_layer_input,
            )

            # Compute differences between consecutive evaluations of layer_eval.
            # This approximates the total input gradient of each step multiplied
            # by the step size.
            grad_diffs = tuple(layer_eval[num_examples:] - layer_eval[:-num_examples] for layer_eval in layer_evals)

            # Element-wise multiply gradient of output with respect to hidden layer
            # and summed gradients with respect to input (chain rule) and sum
            # across stepped inputs.
            attributions = tuple(
                _reshape_and_sum(
                    grad_diff * layer_gradient[:-num_examples],
                    n_steps,
                    num_examples,
                    layer_eval.shape[1:],
                )
                for layer_gradient, layer_eval, grad_diff in zip(layer_gradients, layer_evals, grad_diffs)
            )
            return _format_output(len(attributions) > 1, attributions)

        @property
        def multiplies_by_inputs(self):
            return True

    # ------------------------------------------------ captum/attr/_core/feature_ablation.py
    class FeatureAblation(PerturbationAttribution):
        def __init__(self, forward_func):
            PerturbationAttribution.__init__(self, forward_func)
            self.use_weights = False
            self._is_output_shape_valid = False

        @log_usage()
        def attribute(
            self,
            inputs,
            baselines=None,
            target=None,
            additional_forward_args=None,
            feature_mask=None,
            perturbations_per_eval=1,
            show_progress=False,
            **kwargs,
        ):
            # Keeps track whether original input is a tuple or not before
            # converting it into a tuple.
            is_inputs_tuple = _is_tuple(inputs)
            inputs, baselines = _format_input_baseline(inputs, baselines)
            additional_forward_args = _format_additional_forward_args(additional_forward_args)
            num_examples = inputs[0].shape[0]
            feature_mask = _format_tensor_into_tuples(feature_mask) if feature_mask is not None else None
            assert (
                isinstance(perturbations_per_eval, int) and perturbations_per_eval >= 1
            ), "Perturbations per evaluation must be an integer and at least 1."
            assert not show_progress, "show_progress is left out of this port"
            with torch.no_grad():
                # Computes initial evaluation with all features, which is compared
                # to each ablated result.
                initial_eval = self._strict_run_forward(self.forward_func, inputs, target, additional_forward_args)

                # number of elements in the output of forward_func
                n_outputs = initial_eval.numel() if isinstance(initial_eval, Tensor) else 1

                # flatten eval outputs into 1D (n_outputs)
                # add the leading dim for n_feature_perturbed
                flattened_initial_eval = initial_eval.reshape(1, -1)

                # Initialize attribution totals and counts
                attrib_type = flattened_initial_eval.dtype

                total_attrib = [
                    # attribute w.r.t each output element
                    torch.zeros(
                        (n_outputs,) + input.shape[1:],
                        dtype=attrib_type,
                        device=input.device,
                    )
                    for input in inputs
                ]

                # Weights are used in cases where ablations may be overlapping.
                if self.use_weights:
                    weights = [
                        torch.zeros((n_outputs,) + input.shape[1:], device=input.device).float() for input in inputs
                    ]

                # Iterate through each feature tensor for ablation
                for i in range(len(inputs)):
                    # Skip any empty input tensors
                    if torch.numel(inputs[i]) == 0:
                        continue

                    for (
                        current_inputs,
                        current_add_args,
                        current_target,
                        current_mask,
                    ) in self._ith_input_ablation_generator(
                        i,
                        inputs,
                        additional_forward_args,
                        target,
                        baselines,
                        feature_mask,
                        perturbations_per_eval,
                        **kwargs,
                    ):
                        # modified_eval has (n_feature_perturbed * n_outputs) elements
                        # shape:
                        #   agg mode: (*initial_eval.shape)
                        #   non-agg mode:
                        #     (feature_perturbed * batch_size, *initial_eval.shape[1:])
                        modified_eval = self._strict_run_forward(
                            self.forward_func,
                            current_inputs,
                            current_target,
                            current_add_args,
                        )

                        # if perturbations_per_eval > 1, the output shape must grow with
                        # input and not be aggregated
                        if perturbations_per_eval > 1 and not self._is_output_shape_valid:
                            current_batch_size = current_inputs[0].shape[0]

                            # number of perturbation, which is not the same as
                            # perturbations_per_eval when not enough features to perturb
                            n_perturb = current_batch_size / num_examples

                            current_output_shape = modified_eval.shape

                            # use initial_eval as the forward of perturbations_per_eval = 1
                            initial_output_shape = initial_eval.shape

                            assert (
                                # check if the output is not a scalar
                                current_output_shape
                                and initial_output_shape
                                # check if the output grow in same ratio, i.e., not agg
                                and current_output_shape[0] == n_perturb * initial_output_shape[0]
                            ), (
                                "When perturbations_per_eval > 1, forward_func's output "
                                "should be a tensor whose 1st dim grow with the input "
                                f"batch size: when input batch size is {num_examples}, "
                                f"the output shape is {initial_output_shape}; "
                                f"when input batch size is {current_batch_size}, "
                                f"the output shape is {current_output_shape}"
                            )

                            self._is_output_shape_valid = True

                        # reshape the leading dim for n_feature_perturbed
                        # flatten each feature's eval outputs into 1D of (n_outputs)
                        modified_eval = modified_eval.reshape(-1, n_outputs)
                        # eval_diff in shape (n_feature_perturbed, n_outputs)
                        eval_diff = flattened_initial_eval - modified_eval

                        # append the shape of one input example
                        # to make it broadcastable to mask
                        eval_diff = eval_diff.reshape(eval_diff.shape + (inputs[i].dim() - 1) * (1,))
                        eval_diff = eval_diff.to(total_attrib[i].device)

                        if self.use_weights:
                            weights[i] += current_mask.float().sum(dim=0)

                        total_attrib[i] += (eval_diff * current_mask.to(attrib_type)).sum(dim=0)

                # Divide total attributions by counts and return formatted attributions
                if self.use_weights:
                    attrib = tuple(single_attrib.float() / weight for single_attrib, weight in zip(total_attrib, weights))
                else:
                    attrib = tuple(total_attrib)
                _result = _format_output(is_inputs_tuple, attrib)
            return _result

        def _ith_input_ablation_generator(
            self,
            i,
            inputs,
            additional_args,
            target,
            baselines,
            input_mask,
            perturbations_per_eval,
            **kwargs,
        ):
            extra_args = {}
            for key, value in kwargs.items():
                # For any tuple argument in kwargs, we choose index i of the tuple.
                if isinstance(value, tuple):
                    extra_args[key] = value[i]
                else:
                    extra_args[key] = value

            input_mask = input_mask[i] if input_mask is not None else None
            min_feature, num_features, input_mask = self._get_feature_range_and_mask(inputs[i], input_mask, **extra_args)
            num_examples = inputs[0].shape[0]
            perturbations_per_eval = min(perturbations_per_eval, num_features)
            baseline = baselines[i] if isinstance(baselines, tuple) else baselines
            if isinstance(baseline, torch.Tensor):
                baseline = baseline.reshape((1,) + baseline.shape)

            if perturbations_per_eval > 1:
                # Repeat features and additional args for batch size.
                all_features_repeated = [
                    torch.cat([inputs[j]] * perturbations_per_eval, dim=0) for j in range(len(inputs))
                ]
                additional_args_repeated = (
                    _expand_additional_forward_args(additional_args, perturbations_per_eval)
                    if additional_args is not None
                    else None
                )
                target_repeated = _expand_target(target, perturbations_per_eval)
            else:
                all_features_repeated = list(inputs)
                additional_args_repeated = additional_args
                target_repeated = target

            num_features_processed = min_feature
            while num_features_processed < num_features:
                current_num_ablated_features = min(perturbations_per_eval, num_features - num_features_processed)

                # Store appropriate inputs and additional args based on batch size.
                if current_num_ablated_features != perturbations_per_eval:
                    current_features = [
                        feature_repeated[0 : current_num_ablated_features * num_examples]
                        for feature_repeated in all_features_repeated
                    ]
                    current_additional_args = (
                        _expand_additional_forward_args(additional_args, current_num_ablated_features)
                        if additional_args is not None
                        else None
                    )
                    current_target = _expand_target(target, current_num_ablated_features)
                else:
                    current_features = all_features_repeated
                    current_additional_args = additional_args_repeated
                    current_target = target_repeated

                # Store existing tensor before modifying
                original_tensor = current_features[i]
                # Construct ablated batch for features in range num_features_processed
                # to num_features_processed + current_num_ablated_features and return
                # mask with same size as ablated batch. ablated_features has dimension
                # (current_num_ablated_features, num_examples, inputs[i].shape[1:])
                # Note that in the case of sparse tensors, the second dimension
                # may not necessarilly be num_examples and will match the first
                # dimension of this tensor.
                current_reshaped = current_features[i].reshape(
                    (current_num_ablated_features, -1) + current_features[i].shape[1:]
                )

                ablated_features, current_mask = self._construct_ablated_input(
                    current_reshaped,
                    input_mask,
                    baseline,
                    num_features_processed,
                    num_features_processed + current_num_ablated_features,
                    **extra_args,
                )

                # current_features[i] has dimension
                # (current_num_ablated_features * num_examples, inputs[i].shape[1:]),
                # which can be provided to the model as input.
                current_features[i] = ablated_features.reshape((-1,) + ablated_features.shape[2:])
                yield tuple(current_features), current_additional_args, current_target, current_mask
                # Replace existing tensor at index i.
                current_features[i] = original_tensor
                num_features_processed += current_num_ablated_features

        def _construct_ablated_input(self, expanded_input, input_mask, baseline, start_feature, end_feature, **kwargs):
            current_mask = torch.stack([input_mask == j for j in range(start_feature, end_feature)], dim=0).long()
            ablated_tensor = (expanded_input * (1 - current_mask).to(expanded_input.dtype)) + (
                baseline * current_mask.to(expanded_input.dtype)
            )
            return ablated_tensor, current_mask

        def _get_feature_range_and_mask(self, input, input_mask, **kwargs):
            if input_mask is None:
                # Obtain feature mask for selected input tensor, matches size of
                # 1 input example, (1 x inputs[i].shape[1:])
                input_mask = torch.reshape(
                    torch.arange(torch.numel(input[0]), device=input.device),
                    input[0:1].shape,
                ).long()
            return (
                torch.min(input_mask).item(),
                torch.max(input_mask).item() + 1,
                input_mask,
            )

        def _strict_run_forward(self, *args, **kwargs):
            forward_output = _run_forward(*args, **kwargs)
            if isinstance(forward_output, Tensor):
                return forward_output

            output_type = type(forward_output)
            assert output_type is int or output_type is float, (
                "the return of forward_func must be a tensor, int, or float," f" received: {forward_output}"
            )

            # using python built-in type as torch dtype
            # int -> torch.int64, float -> torch.float64
            # ref: https://github.com/pytorch/pytorch/pull/21215
            return torch.tensor(forward_output, dtype=output_type)

    # ------------------------------------------------ captum/attr/_utils/common.py (occlusion helpers)
    def _format_and_verify_strides(strides, inputs):
        # Formats strides, which are necessary for occlusion
        # Assumes inputs are already formatted (in tuple)
        if strides is None:
            strides = tuple(1 for input in inputs)
        if len(inputs) == 1 and not (isinstance(strides, tuple) and len(strides) == 1):
            strides = (strides,)  # type: ignore
        assert isinstance(strides, tuple) and len(strides) == len(inputs), "Strides must be provided for each input tensor."
        for i in range(len(inputs)):
            assert isinstance(strides[i], int) or (
                isinstance(strides[i], tuple) and len(strides[i]) == len(inputs[i].shape) - 1  # type: ignore
            ), (
                "Stride for input index {} is {}, which is invalid for input with "
                "shape {}. It must be either an int or a tuple with length equal to "
                "len(input_shape) - 1."
            ).format(i, strides[i], inputs[i].shape)

        return strides

    def _format_and_verify_sliding_window_shapes(sliding_window_shapes, inputs):
        # Formats shapes of sliding windows, which is necessary for occlusion
        # Assumes inputs is already formatted (in tuple)
        if isinstance(sliding_window_shapes[0], int):
            sliding_window_shapes = (sliding_window_shapes,)  # type: ignore
        assert len(sliding_window_shapes) == len(inputs), "Must provide sliding window dimensions for each input tensor."
        for i in range(len(inputs)):
            assert isinstance(sliding_window_shapes[i], tuple) and len(sliding_window_shapes[i]) == len(inputs[i].shape) - 1, (
                "Occlusion shape for input index {} is {} but should be a tuple with " "{} dimensions."
            ).format(i, sliding_window_shapes[i], len(inputs[i].shape) - 1)
        return sliding_window_shapes

    # ------------------------------------------------ captum/attr/_core/occlusion.py (00cea47)
    class Occlusion(FeatureAblation):
        def __init__(self, forward_func):
            FeatureAblation.__init__(self, forward_func)
            self.use_weights = True

        @log_usage()
        def attribute(
            self,
            inputs,
            sliding_window_shapes,
            strides=None,
            baselines=None,
            target=None,
            additional_forward_args=None,
            perturbations_per_eval=1,
        ):
            formatted_inputs = _format_input(inputs)

            # Formatting strides
            strides = _format_and_verify_strides(strides, formatted_inputs)

            # Formatting sliding window shapes
            sliding_window_shapes = _format_and_verify_sliding_window_shapes(sliding_window_shapes, formatted_inputs)

            # Construct tensors from sliding window shapes
            sliding_window_tensors = tuple(
                torch.ones(window_shape, device=formatted_inputs[i].device)
                for i, window_shape in enumerate(sliding_window_shapes)
            )

            # Construct counts, defining number of steps to make of occlusion block in
            # each dimension.
            shift_counts = []
            for i, inp in enumerate(formatted_inputs):
                current_shape = np.subtract(inp.shape[1:], sliding_window_shapes[i])
                # Verify sliding window doesn't exceed input dimensions.
                assert (np.array(current_shape) >= 0).all(), (
                    "Sliding window dimensions {} cannot exceed input dimensions" "{}."
                ).format(sliding_window_shapes[i], tuple(inp.shape[1:]))
                # Stride cannot be larger than sliding window for any dimension where
                # the sliding window doesn't cover the entire input.
                assert np.logical_or(
                    np.array(current_shape) == 0,
                    np.array(strides[i]) <= sliding_window_shapes[i],
                ).all(), ("Stride dimension {} cannot be larger than sliding window " "shape dimension {}.").format(
                    strides[i], sliding_window_shapes[i]
                )
                shift_counts.append(tuple(np.add(np.ceil(np.divide(current_shape, strides[i])).astype(int), 1)))

            # Use ablation attribute method
            return super().attribute.__wrapped__(
                self,
                inputs,
                baselines=baselines,
                target=target,
                additional_forward_args=additional_forward_args,
                perturbations_per_eval=perturbations_per_eval,
                sliding_window_tensors=sliding_window_tensors,
                shift_counts=tuple(shift_counts),
                strides=strides,
            )

        def _construct_ablated_input(self, expanded_input, input_mask, baseline, start_feature, end_feature, **kwargs):
            input_mask = torch.stack(
                [
                    self._occlusion_mask(
                        expanded_input,
                        j,
                        kwargs["sliding_window_tensors"],
                        kwargs["strides"],
                        kwargs["shift_counts"],
                    )
                    for j in range(start_feature, end_feature)
                ],
                dim=0,
            ).long()
            ablated_tensor = (
                expanded_input
                * (torch.ones(1, dtype=torch.long, device=expanded_input.device) - input_mask).to(expanded_input.dtype)
            ) + (baseline * input_mask.to(expanded_input.dtype))
            return ablated_tensor, input_mask

        def _occlusion_mask(self, expanded_input, ablated_feature_num, sliding_window_tsr, strides, shift_counts):
            remaining_total = ablated_feature_num
            current_index = []
            for i, shift_count in enumerate(shift_counts):
                stride = strides[i] if isinstance(strides, tuple) else strides
                current_index.append((remaining_total % shift_count) * stride)
                remaining_total = remaining_total // shift_count

            remaining_padding = np.subtract(expanded_input.shape[2:], np.add(current_index, sliding_window_tsr.shape))
            pad_values = [val for pair in zip(remaining_padding, current_index) for val in pair]
            pad_values.reverse()
            padded_tensor = torch.nn.functional.pad(sliding_window_tsr, tuple(pad_values))  # type: ignore
            return padded_tensor.reshape((1,) + padded_tensor.shape)

        def _get_feature_range_and_mask(self, input, input_mask, **kwargs):
            feature_max = np.prod(kwargs["shift_counts"])
            return 0, feature_max, None

    return SimpleNamespace(**{k: v for k, v in locals().items() if not k.startswith("__")})


_LIBS = {}


def _lib(torch):
    if torch.__name__ not in _LIBS:
        _LIBS[torch.__name__] = captum_lib(torch)
    return _LIBS[torch.__name__]


# ---------------------------------------------------------------- tiny models with seeded NumPy weights
W = {}
_rng = np.random.default_rng(19)
W["mlp"] = [_rng.uniform(-0.8, 0.8, (5, 4)), _rng.uniform(-0.3, 0.3, 5), _rng.uniform(-0.8, 0.8, (3, 5)), _rng.uniform(-0.3, 0.3, 3)]
W["mlp3"] = [_rng.uniform(-0.8, 0.8, (6, 4)), _rng.uniform(-0.3, 0.3, 6), _rng.uniform(-0.8, 0.8, (5, 6)),
             _rng.uniform(-0.3, 0.3, 5), _rng.uniform(-0.8, 0.8, (3, 5)), _rng.uniform(-0.3, 0.3, 3)]
W["st"] = [_rng.uniform(-0.8, 0.8, (5, 4)), _rng.uniform(-0.3, 0.3, 5), _rng.uniform(-0.8, 0.8, (4, 5)),
           _rng.uniform(-0.3, 0.3, 4), _rng.uniform(-0.8, 0.8, (2, 4)), _rng.uniform(-0.3, 0.3, 2)]
W["sm"] = [_rng.uniform(-0.8, 0.8, (3, 4)), _rng.uniform(-0.3, 0.3, 3)]
W["quad"] = _rng.uniform(-0.7, 0.7, (4, 3))
W["conv"] = [_rng.uniform(-0.5, 0.5, (2, 1, 3, 3)), _rng.uniform(-0.2, 0.2, 2), _rng.uniform(-0.3, 0.3, (3, 32)),
             _rng.uniform(-0.2, 0.2, 3)]
X = _rng.uniform(-1.0, 1.0, (3, 4))
XB = _rng.uniform(-0.5, 0.5, (3, 4))  # per-example baselines
BDIST = _rng.uniform(-0.5, 0.5, (4, 4))  # a baseline distribution (DeepLiftShap, GradientShap)
SCALE = np.array([1.0, 0.5, 2.0])
IMG = _rng.uniform(-1.0, 1.0, (2, 1, 4, 4))


def _seq(torch, ws, acts):
    nn = torch.nn
    layers = []
    for i in range(0, len(ws), 2):
        lin = nn.Linear(ws[i].shape[1], ws[i].shape[0]).double()
        with torch.no_grad():
            lin.weight.copy_(torch.tensor(ws[i]))
            lin.bias.copy_(torch.tensor(ws[i + 1]))
        layers.append(lin)
        if i // 2 < len(acts):
            layers.append(acts[i // 2])
    return nn.Sequential(*layers)


def models(torch):
    nn = torch.nn

    class Quad(nn.Module):
        """f(x, s) = s * |x A|^2 per example (one output per example: no target)."""

        def __init__(self):
            super().__init__()
            self.A = nn.Parameter(torch.tensor(W["quad"]))

        def forward(self, x, scale):
            return scale * ((x @ self.A) ** 2).sum(1)

    class CNN(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(1, 2, 3, padding=1).double()
            self.relu = nn.ReLU()
            self.fc = nn.Linear(32, 3).double()
            with torch.no_grad():
                self.conv.weight.copy_(torch.tensor(W["conv"][0]))
                self.conv.bias.copy_(torch.tensor(W["conv"][1]))
                self.fc.weight.copy_(torch.tensor(W["conv"][2]))
                self.fc.bias.copy_(torch.tensor(W["conv"][3]))

        def forward(self, x):
            return self.fc(self.relu(self.conv(x)).flatten(1))

    return SimpleNamespace(
        mlp=_seq(torch, W["mlp"], [nn.ReLU()]),
        mlp_inplace=_seq(torch, W["mlp"], [nn.ReLU(inplace=True)]),
        mlp3=_seq(torch, W["mlp3"], [nn.ReLU(), nn.ReLU()]),
        st=_seq(torch, W["st"], [nn.Sigmoid(), nn.Tanh()]),
        sm=_seq(torch, W["sm"], [nn.Softmax(dim=1)]),
        quad=Quad().double(),
        cnn=CNN(),
    )


# ---------------------------------------------------------------- NumPy references
def np_relu(z):
    return np.maximum(z, 0.0)


def np_mlp(x, ws=None):
    w1, b1, w2, b2 = W["mlp"] if ws is None else ws
    return np_relu(x @ w1.T + b1) @ w2.T + b2


def np_mlp_grad(x, t):
    """d f_t / d x of the two-layer ReLU network, closed form: W1^T (1[z > 0] * W2[t])."""
    w1, b1, w2, b2 = W["mlp"]
    z = x @ w1.T + b1
    return ((z > 0) * w2[t]) @ w1


def np_quad(x, s):
    return s * ((x @ W["quad"]) ** 2).sum(1)


def np_cnn(img):
    w, b, fw, fb = W["conv"]
    n = img.shape[0]
    pad = np.pad(img, ((0, 0), (0, 0), (1, 1), (1, 1)))
    out = np.zeros((n, 2, 4, 4))
    for o in range(2):
        for i in range(4):
            for j in range(4):
                out[:, o, i, j] = (pad[:, 0, i:i + 3, j:j + 3] * w[o, 0]).sum((1, 2)) + b[o]
    return np_relu(out).reshape(n, 32) @ fw.T + fb


def leggauss01(n):
    x, w = np.polynomial.legendre.leggauss(n)
    return 0.5 * (1 + x), 0.5 * w


# ---------------------------------------------------------------- pages
def gradient_page(torch):
    """Saliency, InputXGradient, IntegratedGradients (+ delta), gradient requirements, compute_layer_gradients_and_eval."""
    C = _lib(torch)
    M = models(torch)
    out = {}
    x = torch.tensor(X)
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        out["sal_abs"] = _np(C.Saliency(M.mlp).attribute(x, target=1))
        out["sal"] = _np(C.Saliency(M.mlp).attribute(x, target=torch.tensor([0, 2, 1]), abs=False))
        out["sal_list"] = _np(C.Saliency(M.mlp).attribute(x, target=[2, 1, 0], abs=False))
    out["n_auto_warnings"] = sum("did not already require gradients" in str(m.message) for m in w)
    out["x_requires_grad_after"] = x.requires_grad
    out["ixg"] = _np(C.InputXGradient(M.mlp).attribute(x, target=2))

    def out3d(inp):  # (N, 3, 2) outputs: targets are tuples of two indices
        return M.mlp(inp).reshape(3, 3, 1) * torch.tensor([1.0, 2.0], dtype=torch.float64)

    out["sal_tuple"] = _np(C.Saliency(out3d).attribute(x, target=(1, 1), abs=False))
    out["sal_tuples"] = _np(C.Saliency(out3d).attribute(x, target=[(0, 1), (2, 0), (1, 1)], abs=False))
    # tuple inputs and an additional forward argument
    x2 = (torch.tensor(X), torch.tensor(XB))

    def two_inputs(a, b, s):
        return M.mlp(a * s[:, None] - b)

    sal2 = C.Saliency(two_inputs).attribute(x2, target=0, abs=False, additional_forward_args=torch.tensor(SCALE))
    out["sal2_a"], out["sal2_b"] = _np(sal2[0]), _np(sal2[1])
    # apply/undo gradient requirements: leaf with a stale non-zero gradient, integer input
    g = torch.tensor(X, requires_grad=True)
    g.grad = torch.ones_like(g)
    ii = torch.tensor([[1, 2]])
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        mask = C.apply_gradient_requirements((g, ii))
    out["req_mask"] = mask
    out["req_msgs"] = sorted(str(m.message).split(".")[0].split(" has ")[0].split(" had ")[0] for m in w)
    out["grad_zeroed"] = _np(g.grad)
    C.undo_gradient_requirements((g, ii), mask)
    out["still_requires"] = g.requires_grad
    # IntegratedGradients: quadratic model, exact under Gauss-Legendre and the trapezoid
    s = torch.tensor(SCALE)
    for method, n in (("gausslegendre", 4), ("riemann_trapezoid", 5), ("riemann_left", 6), ("riemann_middle", 3)):
        ig = C.IntegratedGradients(M.quad)
        a, d = ig.attribute(x, baselines=torch.tensor(XB), additional_forward_args=s, n_steps=n, method=method,
                            return_convergence_delta=True)
        out["ig_" + method], out["igd_" + method] = _np(a), _np(d)
    a = C.IntegratedGradients(M.quad, multiply_by_inputs=False).attribute(x, 0.25, additional_forward_args=(s,), n_steps=3)
    out["ig_local"] = _np(a)
    # MLP, list target, scalar baseline, Gauss-Legendre with 7 points
    a, d = C.IntegratedGradients(M.mlp).attribute(x, baselines=0.1, target=[1, 0, 2], n_steps=7, return_convergence_delta=True)
    out["ig_mlp"], out["igd_mlp"] = _np(a), _np(d)
    out["steps"] = {m: (C.approximation_parameters(m)[0](4), C.approximation_parameters(m)[1](4)) for m in C.SUPPORTED_METHODS}
    # compute_layer_gradients_and_eval on the hidden Linear (output) and on its input
    grads, evals = C.compute_layer_gradients_and_eval(M.mlp, M.mlp[0], (torch.tensor(X, requires_grad=True),), target_ind=1)
    out["lg"], out["le"] = _np(grads[0]), _np(evals[0])
    grads, evals = C.compute_layer_gradients_and_eval(M.mlp, M.mlp[2], (torch.tensor(X, requires_grad=True),), target_ind=1,
                                                      attribute_to_layer_input=True)
    out["lg_in"], out["le_in"] = _np(grads[0]), _np(evals[0])
    # LayerConductance on the ReLU (a Linear follows: exact telescoping under the trapezoid) and on the first Linear
    a, d = C.LayerConductance(M.mlp, M.mlp[1]).attribute(x, baselines=torch.tensor(XB), target=2, n_steps=4,
                                                         method="riemann_trapezoid", return_convergence_delta=True)
    out["cond_relu"], out["condd_relu"] = _np(a), _np(d)
    out["cond_lin"] = _np(C.LayerConductance(M.mlp, M.mlp[0]).attribute(x, target=0, n_steps=5))
    # LayerIntegratedGradients: the first Linear's output replaced along the path by a forward hook,
    # and the second Linear's input by a forward pre-hook
    a, d = C.LayerIntegratedGradients(M.mlp, M.mlp[0]).attribute(x, baselines=torch.tensor(XB), target=[2, 0, 1],
                                                                 n_steps=6, return_convergence_delta=True)
    out["lig"], out["ligd"] = _np(a), _np(d)
    out["lig_in"] = _np(C.LayerIntegratedGradients(M.mlp, M.mlp[2]).attribute(x, target=1, n_steps=3,
                                                                                attribute_to_layer_input=True))
    return out


def deeplift_page(torch):
    C = _lib(torch)
    M = models(torch)
    out = {}
    x = torch.tensor(X)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        a, d = C.DeepLift(M.mlp).attribute(x, baselines=torch.tensor(XB), target=1, return_convergence_delta=True)
        out["dl_relu"], out["dld_relu"] = _np(a), _np(d)
        a, d = C.DeepLift(M.st).attribute(x, baselines=torch.tensor(XB[:1]), target=[0, 1, 0], return_convergence_delta=True)
        out["dl_st"], out["dld_st"] = _np(a), _np(d)
        out["dl_sm"] = _np(C.DeepLift(M.sm).attribute(x, baselines=torch.tensor(XB), target=2))
        # an in-place ReLU: the pre-hooks hand it a clone (captum's reason for them)
        out["dl_inplace"] = _np(C.DeepLift(M.mlp_inplace).attribute(x, baselines=torch.tensor(XB), target=1))
        out["gbp_inplace"] = _np(C.GuidedBackprop(M.mlp_inplace).attribute(x, target=1))
        out["dl_local"] = _np(C.DeepLift(M.mlp, multiply_by_inputs=False).attribute(x, baselines=0.2, target=0))
        a, d = C.DeepLiftShap(M.mlp).attribute(x, baselines=torch.tensor(BDIST), target=2, return_convergence_delta=True)
        out["dls"], out["dlsd"] = _np(a), _np(d)
        # a ReLU used twice: the second backward hook finds its saved input/output gone
        twice = torch.nn.Sequential(M.mlp[0], M.mlp[1], torch.nn.Linear(5, 5).double(), M.mlp[1], M.mlp[2])
        try:
            C.DeepLift(twice).attribute(x, target=0)
            out["reuse_error"] = ""
        except RuntimeError as e:
            out["reuse_error"] = str(e).split(" was detected")[0]
        out["hooks_left"] = sum(len(m._forward_hooks) + len(m._forward_pre_hooks) for m in twice.modules())
        out["hooks_left"] += sum(len(m._forward_hooks) + len(m._forward_pre_hooks) for m in M.mlp.modules())
        out["gbp"] = _np(C.GuidedBackprop(M.mlp3).attribute(x, target=1))
        out["deconv"] = _np(C.Deconvolution(M.mlp3).attribute(x, target=1))
        out["plain_after"] = _np(C.Saliency(M.mlp3).attribute(x, target=1, abs=False))
        out["gbp_legacy"] = _np(C.LegacyModifiedReluGradientAttribution(M.mlp3).attribute(x, target=1))
        out["deconv_legacy"] = _np(C.LegacyModifiedReluGradientAttribution(M.mlp3, True).attribute(x, target=1))
        out["hooks_left3"] = sum(len(m._forward_hooks) + len(m._forward_pre_hooks) for m in M.mlp3.modules())
    return out


def shap_page(torch):
    C = _lib(torch)
    M = models(torch)
    out = {}
    x = torch.tensor(X)
    np.random.seed(5)
    a, d = C.GradientShap(M.mlp).attribute(x, baselines=torch.tensor(BDIST), n_samples=4, target=0,
                                           return_convergence_delta=True)
    out["gs"], out["gsd"] = _np(a), _np(d)
    np.random.seed(6)
    out["gs_fn"] = _np(C.GradientShap(M.mlp, multiply_by_inputs=False).attribute(
        x, baselines=lambda inp: torch.tensor(BDIST), n_samples=3, target=2))
    # noise tunnel with no noise: every sample is the input itself
    out["nt0"] = _np(C.NoiseTunnel(C.Saliency(M.mlp)).attribute(x, nt_samples=3, stdevs=0.0, target=1, abs=False))
    out["nt0_vg"] = _np(C.NoiseTunnel(C.Saliency(M.mlp)).attribute(x, nt_type="vargrad", nt_samples=3, stdevs=0.0,
                                                                     target=1, abs=False))
    return out


def ablation_page(torch):
    C = _lib(torch)
    M = models(torch)
    out = {}
    x = torch.tensor(X)
    fa = C.FeatureAblation(M.mlp)
    out["fa"] = _np(fa.attribute(x, target=1))
    out["fa_grouped"] = _np(fa.attribute(x, baselines=0.5, target=[0, 1, 2], feature_mask=torch.tensor([[0, 0, 1, 2]]),
                                         perturbations_per_eval=2))
    out["fa_tensor_base"] = _np(fa.attribute(x, baselines=torch.tensor(XB[0]), target=2, perturbations_per_eval=3))

    def agg(inp):
        return M.mlp(inp)[:, 0].sum()

    out["fa_agg"] = _np(C.FeatureAblation(agg).attribute(x))
    # one mask per example
    mask = torch.tensor([[0, 0, 1, 1], [0, 1, 1, 2], [2, 1, 0, 0]])
    out["fa_mask_ex"] = _np(fa.attribute(x, target=1, feature_mask=mask, perturbations_per_eval=2))
    # ... under a noise tunnel without noise: the mask is repeated per sample (_expand_feature_mask)
    out["nt_fa"] = _np(C.NoiseTunnel(C.FeatureAblation(M.mlp)).attribute(x, nt_samples=2, stdevs=0.0, target=1,
                                                                          feature_mask=mask))
    img = torch.tensor(IMG)
    mask = torch.tensor([[[[0, 0, 1, 1], [0, 0, 1, 1], [2, 2, 3, 3], [2, 2, 3, 3]]]])
    out["fa_cnn"] = _np(C.FeatureAblation(M.cnn).attribute(img, target=2, feature_mask=mask, perturbations_per_eval=3))
    out["cnn"] = _np(M.cnn(img))
    # GradCAM on the convolution, upsampled to the input grid twice over
    cam = C.LayerGradCam(M.cnn, M.cnn.conv).attribute(img, target=0)
    out["cam"] = _np(cam)
    out["cam_relu"] = _np(C.LayerGradCam(M.cnn, M.cnn.conv).attribute(img, target=0, relu_attributions=True))
    out["cam_nearest"] = _np(C.LayerAttribution.interpolate(cam, (8, 8)))
    out["cam_bilinear"] = _np(C.LayerAttribution.interpolate(cam, (8, 8), "bilinear"))
    # occlusion: overlapping 3x3 windows (stride 1) and disjoint 2x2 ones (stride 2), and 2-wide windows on rows
    occ = C.Occlusion(M.cnn).attribute(img, sliding_window_shapes=(1, 3, 3), target=1, perturbations_per_eval=2)
    out["occ_3x3"], out["occ_dtype"] = _np(occ), str(occ.dtype).split(".")[-1]
    out["occ_2x2"] = _np(C.Occlusion(M.cnn).attribute(img, sliding_window_shapes=(1, 2, 2), strides=(1, 2, 2), target=2))
    out["occ_rows"] = _np(C.Occlusion(M.mlp).attribute(x, sliding_window_shapes=(2,), baselines=0.3, target=[0, 1, 2]))
    # two inputs, an additional argument, a per-input mask tuple
    x2 = (torch.tensor(X), torch.tensor(XB))

    def two_inputs(a, b, s):
        return M.mlp(a * s[:, None] - b)

    out["fa_two"] = [_np(t) for t in C.FeatureAblation(two_inputs).attribute(
        x2, target=0, additional_forward_args=(torch.tensor(SCALE),),
        feature_mask=(torch.tensor([[0, 1, 1, 0]]), torch.tensor([[0, 0, 0, 1]])), perturbations_per_eval=2)]
    return out


_PAGES = {}


def _page(page, torch=lucid):
    key = (page.__name__, torch.__name__)
    if key not in _PAGES:
        _PAGES[key] = page(torch)
    return _PAGES[key]


# ---------------------------------------------------------------- checks without torch
def test_saliency_input_x_gradient_and_gradient_requirements():
    out = _page(gradient_page)
    g1 = np_mlp_grad(X, 1)
    np.testing.assert_allclose(out["sal_abs"], np.abs(g1), rtol=1e-12, atol=1e-15)
    for k, t in (("sal", [0, 2, 1]), ("sal_list", [2, 1, 0])):
        want = np.stack([np_mlp_grad(X[i:i + 1], t[i])[0] for i in range(3)])
        np.testing.assert_allclose(out[k], want, rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(out["ixg"], X * np_mlp_grad(X, 2), rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(out["sal_tuple"], 2 * np_mlp_grad(X, 1), rtol=1e-12, atol=1e-15)
    want = np.stack([c * np_mlp_grad(X[i:i + 1], t)[0] for i, (t, c) in enumerate(((0, 2), (2, 1), (1, 2)))])
    np.testing.assert_allclose(out["sal_tuples"], want, rtol=1e-12, atol=1e-15)
    # f(a * s - b): d/da = s * g, d/db = -g with g the gradient at a * s - b
    z = X * SCALE[:, None] - XB
    np.testing.assert_allclose(out["sal2_a"], SCALE[:, None] * np_mlp_grad(z, 0), rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(out["sal2_b"], -np_mlp_grad(z, 0), rtol=1e-12, atol=1e-15)
    # one warning per Saliency call, and the input is handed back without requires_grad
    assert out["n_auto_warnings"] == 3 and out["x_requires_grad_after"] is False
    assert out["req_mask"] == [True, False]
    assert out["req_msgs"] == ["Input Tensor 0", "Input Tensor 1"], out["req_msgs"]
    np.testing.assert_array_equal(out["grad_zeroed"], np.zeros((3, 4)))
    assert out["still_requires"] is True


def test_approximation_methods_against_their_definitions():
    steps = _page(gradient_page)["steps"]
    n = 4
    np.testing.assert_allclose(steps["riemann_left"][1], [0, 0.25, 0.5, 0.75])
    np.testing.assert_allclose(steps["riemann_right"][1], [0.25, 0.5, 0.75, 1])
    np.testing.assert_allclose(steps["riemann_middle"][1], [0.125, 0.375, 0.625, 0.875])
    np.testing.assert_allclose(steps["riemann_trapezoid"][1], [0, 1 / 3, 2 / 3, 1])
    np.testing.assert_allclose(steps["riemann_trapezoid"][0], [1 / 8, 1 / 4, 1 / 4, 1 / 8])
    a, w = steps["gausslegendre"][1], steps["gausslegendre"][0]
    assert abs(sum(w) - 1) < 1e-14
    # a 4-point Gauss-Legendre rule integrates polynomials up to degree 7 exactly on [0, 1]
    for deg in range(8):
        assert abs(sum(wi * ai ** deg for wi, ai in zip(w, a)) - 1 / (deg + 1)) < 1e-14, deg
    assert abs(sum(wi * ai ** 8 for wi, ai in zip(w, a)) - 1 / 9) > 1e-6


def test_integrated_gradients_completeness_and_closed_form():
    out = _page(gradient_page)
    M = W["quad"] @ W["quad"].T
    fx, fb = np_quad(X, SCALE), np_quad(XB, SCALE)
    # the gradient 2 s M y is linear along the path: IG = (x - b) * s M (x + b) for exact rules
    exact = (X - XB) * SCALE[:, None] * ((X + XB) @ M)
    # each rule's weights and points from its definition; captum's trapezoid keeps the 1/n step of n points
    # with the two ends halved, so its weights add up to (n - 1) / n, not 1. The Riemann step sizes are a
    # list of Python floats, so ``torch.tensor(step_sizes)`` is float32 (Gauss-Legendre's are NumPy float64)
    f32 = lambda v: np.asarray(v, dtype=np.float32).astype(np.float64)  # noqa: E731
    rules = {"gausslegendre": leggauss01(4)[::-1],
             "riemann_trapezoid": (f32([1 / 10, 1 / 5, 1 / 5, 1 / 5, 1 / 10]), np.linspace(0, 1, 5)),
             "riemann_left": (f32([1 / 6] * 6), np.arange(6) / 6),
             "riemann_middle": (f32([1 / 3] * 3), (2 * np.arange(3) + 1) / 6)}
    for method, (wts, alphas) in rules.items():
        wsum, walpha = wts.sum(), (wts * alphas).sum()
        a, d = out["ig_" + method], out["igd_" + method]
        want = (X - XB) * 2 * SCALE[:, None] * ((wsum * XB + walpha * (X - XB)) @ M)
        np.testing.assert_allclose(a, want, rtol=1e-12, atol=1e-14, err_msg=method)
        # the returned delta is the completeness residual, recomputed here
        np.testing.assert_allclose(d, a.sum(1) - (fx - fb), rtol=1e-10, atol=1e-13, err_msg=method)
        if method in ("gausslegendre", "riemann_middle"):  # exact rules for a linear integrand (float32 steps: 1e-7)
            tol = 1e-12 if method == "gausslegendre" else 1e-7
            np.testing.assert_allclose(a, exact, rtol=tol, atol=1e-14)
            assert np.all(np.abs(d) < tol), (method, d)
        else:
            assert np.all(np.abs(d) > 1e-3), (method, d)
    # multiply_by_inputs=False: the path integral of the gradient only (baseline 0.25)
    np.testing.assert_allclose(out["ig_local"], SCALE[:, None] * ((X + 0.25) @ M), rtol=1e-12)
    # the ReLU MLP: a 7-point Gauss-Legendre sum of closed-form gradients along the path
    al, wt = leggauss01(7)
    t = [1, 0, 2]
    want = np.zeros((3, 4))
    for i in range(3):
        for alpha, w in zip(al, wt):
            want[i] += w * np_mlp_grad((0.1 + alpha * (X[i] - 0.1))[None], t[i])[0]
    want *= X - 0.1
    np.testing.assert_allclose(out["ig_mlp"], want, rtol=1e-12, atol=1e-14)
    fx = np_mlp(X)[np.arange(3), t]
    fb = np_mlp(np.full((3, 4), 0.1))[np.arange(3), t]
    np.testing.assert_allclose(out["igd_mlp"], want.sum(1) - (fx - fb), rtol=1e-10, atol=1e-13)


def test_layer_gradients_and_conductance():
    out = _page(gradient_page)
    w1, b1, w2, b2 = W["mlp"]
    z = X @ w1.T + b1
    # gradient of f_1 with respect to the first Linear's output: 1[z > 0] * W2[1]; eval is z
    np.testing.assert_allclose(out["lg"], (z > 0) * w2[1], rtol=0, atol=0)
    np.testing.assert_allclose(out["le"], z, rtol=1e-13)
    # with respect to the second Linear's input (the ReLU output): W2[1], eval relu(z)
    np.testing.assert_allclose(out["lg_in"], np.broadcast_to(w2[1], (3, 5)), rtol=0, atol=0)
    np.testing.assert_allclose(out["le_in"], np_relu(z), rtol=1e-13)
    # conductance of the ReLU output under the trapezoid telescopes exactly: W2[t] * (h(x) - h(b))
    zb = XB @ w1.T + b1
    np.testing.assert_allclose(out["cond_relu"], w2[2] * (np_relu(z) - np_relu(zb)), rtol=1e-12, atol=1e-14)
    fx, fb = np_mlp(X)[:, 2], np_mlp(XB)[:, 2]
    np.testing.assert_allclose(out["condd_relu"], out["cond_relu"].sum(1) - (fx - fb), atol=1e-13)
    assert np.all(np.abs(out["condd_relu"]) < 1e-12)
    # conductance of the first Linear, baseline 0, 6 Gauss-Legendre points: sum_k g(a_k) (z(a_{k+1}) - z(a_k))
    al, _ = leggauss01(6)
    want = np.zeros((3, 5))
    for k in range(5):
        za, zb_ = al[k] * X @ w1.T + b1, al[k + 1] * X @ w1.T + b1
        want += (za > 0) * w2[0] * (zb_ - za)
    np.testing.assert_allclose(out["cond_lin"], want, rtol=1e-12, atol=1e-14)
    # layer integrated gradients over z = x W1^T + b1: (z - zb) * sum_k w_k 1[zb + a_k (z - zb) > 0] W2[t]
    al, wt = leggauss01(6)
    t = np.array([2, 0, 1])
    want = sum(w * ((zb + a * (z - zb)) > 0) for a, w in zip(al, wt)) * w2[t] * (z - zb)
    np.testing.assert_allclose(out["lig"], want, rtol=1e-12, atol=1e-14)
    fx, fb = np_mlp(X)[np.arange(3), t], np_mlp(XB)[np.arange(3), t]
    np.testing.assert_allclose(out["ligd"], want.sum(1) - (fx - fb), atol=1e-13)
    # the second Linear is linear in its input h = relu(z): IG there is W2[1] * (h - hb) exactly, hb = relu(b1)
    # the layer input at the input baseline 0
    np.testing.assert_allclose(out["lig_in"], w2[1] * (np_relu(z) - np_relu(b1)), rtol=1e-12, atol=1e-14)


def _rescale_grad(x, b, t):
    """DeepLift's Rescale multipliers of the two-layer ReLU net, back to the input."""
    w1, b1, w2, b2 = W["mlp"]
    z, zb = x @ w1.T + b1, b @ w1.T + b1
    m = (np_relu(z) - np_relu(zb)) / (z - zb)
    return (m * w2[t]) @ w1


def test_deeplift_rescale_rule_and_summation_to_delta():
    out = _page(deeplift_page)
    np.testing.assert_allclose(out["dl_relu"], (X - XB) * _rescale_grad(X, XB, 1), rtol=1e-12, atol=1e-14)
    # summation-to-delta holds exactly for the Rescale rule on a ReLU network
    fx, fb = np_mlp(X)[:, 1], np_mlp(XB)[:, 1]
    np.testing.assert_allclose(out["dl_relu"].sum(1), fx - fb, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(out["dld_relu"], out["dl_relu"].sum(1) - (fx - fb), atol=1e-14)
    assert np.all(np.abs(out["dld_relu"]) < 1e-13)
    np.testing.assert_allclose(out["dl_local"], _rescale_grad(X, np.full((3, 4), 0.2), 0), rtol=1e-12, atol=1e-14)
    # Sigmoid then Tanh: secant slopes of each nonlinearity, chained through the Linears
    w1, b1, w2, b2, w3, b3 = W["st"]
    b = np.broadcast_to(XB[:1], (3, 4))
    sig = lambda v: 1 / (1 + np.exp(-v))  # noqa: E731
    z1, z1b = X @ w1.T + b1, b @ w1.T + b1
    h1, h1b = sig(z1), sig(z1b)
    z2, z2b = h1 @ w2.T + b2, h1b @ w2.T + b2
    m1, m2 = (h1 - h1b) / (z1 - z1b), (np.tanh(z2) - np.tanh(z2b)) / (z2 - z2b)
    t = [0, 1, 0]
    g = np.stack([((m2[i] * w3[t[i]]) @ w2 * m1[i]) @ w1 for i in range(3)])
    np.testing.assert_allclose(out["dl_st"], (X - b) * g, rtol=1e-11, atol=1e-13)
    f = lambda v: np.tanh(sig(v @ w1.T + b1) @ w2.T + b2) @ w3.T + b3  # noqa: E731
    delta = out["dl_st"].sum(1) - (f(X)[np.arange(3), t] - f(b)[np.arange(3), t])
    np.testing.assert_allclose(out["dld_st"], delta, atol=1e-13)
    assert np.all(np.abs(delta) < 1e-12)
    # Softmax: secant multipliers on the one-hot output gradient, less their mean over the whole
    # (input, baseline) batch, captum's normalisation
    ws, bs = W["sm"]
    z, zb = X @ ws.T + bs, XB @ ws.T + bs
    sm = lambda v: np.exp(v) / np.exp(v).sum(1, keepdims=True)  # noqa: E731
    unnorm = np.zeros((6, 3))
    unnorm[:, 2] = 1.0
    unnorm *= np.concatenate([(sm(z) - sm(zb)) / (z - zb)] * 2)
    new = unnorm - unnorm.sum() / unnorm.size
    np.testing.assert_allclose(out["dl_sm"], (X - XB) * (new[:3] @ ws), rtol=1e-11, atol=1e-13)
    # DeepLiftShap: the mean over the baseline distribution, deltas ordered input-major
    want = np.stack([np.mean([(X[i] - bb) * _rescale_grad(X[i:i + 1], bb[None], 2)[0] for bb in BDIST], 0)
                     for i in range(3)])
    np.testing.assert_allclose(out["dls"], want, rtol=1e-12, atol=1e-14)
    assert out["dlsd"].shape == (12,) and np.all(np.abs(out["dlsd"]) < 1e-13)
    assert out["hooks_left"] == 0 and out["hooks_left3"] == 0
    np.testing.assert_allclose(out["dl_inplace"], out["dl_relu"], rtol=1e-14, atol=1e-16)
    assert out["reuse_error"] == "A Module ReLU()", out["reuse_error"]


def test_guided_backprop_and_deconvolution_clamp_the_relu_gradient():
    out = _page(deeplift_page)
    w1, b1, w2, b2, w3, b3 = W["mlp3"]
    z1 = X @ w1.T + b1
    z2 = np_relu(z1) @ w2.T + b2
    g = np.broadcast_to(w3[1], (3, 5))
    # guided: the ReLU's own input gradient, then clamped at 0
    gz2 = np_relu(g * (z2 > 0))
    gz1 = np_relu((gz2 @ w2) * (z1 > 0))
    np.testing.assert_allclose(out["gbp"], gz1 @ w1, rtol=1e-12, atol=1e-15)
    # deconvolution: the output gradient clamped at 0, whatever the sign of the input
    dz2 = np_relu(g)
    dz1 = np_relu(dz2 @ w2)
    np.testing.assert_allclose(out["deconv"], dz1 @ w1, rtol=1e-12, atol=1e-15)
    # the hooks are gone afterwards: a plain gradient again
    plain = ((((g * (z2 > 0)) @ w2) * (z1 > 0)) @ w1)
    np.testing.assert_allclose(out["plain_after"], plain, rtol=1e-12, atol=1e-15)
    assert not np.allclose(out["gbp"], plain) and not np.allclose(out["deconv"], plain)
    # the two-layer net with an in-place ReLU: relu(1[z > 0] * W2[1]) @ W1
    v1, c1, v2, _ = W["mlp"]
    zz = X @ v1.T + c1
    np.testing.assert_allclose(out["gbp_inplace"], np_relu((zz > 0) * v2[1]) @ v1, rtol=1e-12, atol=1e-15)
    # captum 0.2's module backward hooks give the same clamps
    np.testing.assert_allclose(out["gbp_legacy"], out["gbp"], rtol=1e-14, atol=1e-16)
    np.testing.assert_allclose(out["deconv_legacy"], out["deconv"], rtol=1e-14, atol=1e-16)


def test_gradient_shap_replays_its_numpy_draws():
    out = _page(shap_page)

    def replay(seed, n, t, multiply):
        rs = np.random.RandomState(seed)
        idx = rs.choice(4, n * 3)
        u = rs.uniform(0.0, 1.0, n * 3)
        xs = np.repeat(X, n, axis=0)
        bs = BDIST[idx]
        scaled = u[:, None] * xs + (1 - u[:, None]) * bs
        g = np_mlp_grad(scaled, t)
        attr = (xs - bs) * g if multiply else g
        return attr, xs, bs

    attr, xs, bs = replay(5, 4, 0, True)
    np.testing.assert_allclose(out["gs"], attr.reshape(3, 4, 4).mean(1), rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(out["gsd"], attr.sum(1) - (np_mlp(xs)[:, 0] - np_mlp(bs)[:, 0]), atol=1e-13)
    attr, _, _ = replay(6, 3, 2, False)
    np.testing.assert_allclose(out["gs_fn"], attr.reshape(3, 3, 4).mean(1), rtol=1e-12, atol=1e-14)
    # a noise tunnel without noise: smoothgrad is the gradient, vargrad 0 (up to rounding)
    np.testing.assert_allclose(out["nt0"], np_mlp_grad(X, 1), rtol=1e-12, atol=1e-15)
    assert np.all(np.abs(out["nt0_vg"]) < 1e-15)


def test_noise_tunnel_statistics_from_the_noisy_inputs_seen():
    C = _lib(lucid)
    nn = lucid.nn

    class Recorder(nn.Module):
        def __init__(self):
            super().__init__()
            self.quad = models(lucid).quad
            self.seen = []

        def forward(self, x, s):
            self.seen.append(_np(x))
            return self.quad(x, s)

    x, s = lucid.tensor(X[:2]), lucid.tensor(SCALE[:2])
    M = W["quad"] @ W["quad"].T
    lucid.manual_seed(0)
    for nt_type in ("smoothgrad", "smoothgrad_sq", "vargrad"):
        rec = Recorder()
        nt = C.NoiseTunnel(C.Saliency(rec))
        a = _np(nt.attribute(x, nt_type=nt_type, nt_samples=5, nt_samples_batch_size=2, stdevs=0.3, abs=False,
                             additional_forward_args=s))
        # calls of 2, 2 and 1 samples per example, each laid out example-major (repeat_interleave)
        assert [v.shape[0] for v in rec.seen] == [4, 4, 2]
        noisy = np.concatenate([v.reshape(2, -1, 4) for v in rec.seen], axis=1)  # (example, sample, feature)
        g = 2 * SCALE[:2, None, None] * (noisy @ M)
        want = {"smoothgrad": g.mean(1), "smoothgrad_sq": (g ** 2).mean(1),
                "vargrad": (g ** 2).mean(1) - g.mean(1) ** 2}[nt_type]
        np.testing.assert_allclose(a, want, rtol=1e-10, atol=1e-13)
        assert np.all(np.abs(noisy - X[:2, None]) > 0)
    # the noise is N(0, 0.3^2): many samples of one example
    rec = Recorder()
    C.NoiseTunnel(C.Saliency(rec)).attribute(x[:1], nt_samples=400, stdevs=0.3, additional_forward_args=s[:1])
    noise = rec.seen[0] - X[:1]
    assert abs(noise.std() - 0.3) < 0.03 and abs(noise.mean()) < 0.03
    # integrated gradients under the tunnel: one exact completeness residual per noisy sample
    ig = C.IntegratedGradients(models(lucid).quad)
    a, d = C.NoiseTunnel(ig).attribute(x, nt_samples=3, stdevs=0.2, additional_forward_args=s, n_steps=2,
                                       return_convergence_delta=True)
    assert tuple(a.shape) == (2, 4) and tuple(d.shape) == (6,)
    assert np.all(np.abs(_np(d)) < 1e-12)


def test_feature_ablation_against_a_numpy_loop():
    out = _page(ablation_page)

    def ablate(f, x, groups, base, t):
        want = np.zeros_like(x)
        f0 = f(x)[np.arange(len(x)), t]
        for grp in groups:
            xa = x.copy()
            xa[:, grp] = base[grp] if np.ndim(base) else base
            want[:, grp] = (f0 - f(xa)[np.arange(len(x)), t])[:, None]
        return want

    singles = [[j] for j in range(4)]
    np.testing.assert_allclose(out["fa"], ablate(np_mlp, X, singles, 0.0, 1), rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(out["fa_grouped"], ablate(np_mlp, X, [[0, 1], [2], [3]], 0.5, [0, 1, 2]),
                               rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(out["fa_tensor_base"], ablate(np_mlp, X, singles, XB[0], 2), rtol=1e-12, atol=1e-14)
    for i, groups in enumerate(([[0, 1], [2, 3]], [[0], [1, 2], [3]], [[2, 3], [1], [0]])):
        np.testing.assert_allclose(out["fa_mask_ex"][i], ablate(np_mlp, X[i:i + 1], groups, 0.0, 1)[0],
                                   rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(out["nt_fa"], out["fa_mask_ex"], rtol=1e-14, atol=1e-16)
    # an aggregated output: one attribution row for the batch
    want = np.zeros((1, 4))
    for j in range(4):
        xa = X.copy()
        xa[:, j] = 0
        want[0, j] = np_mlp(X)[:, 0].sum() - np_mlp(xa)[:, 0].sum()
    np.testing.assert_allclose(out["fa_agg"], want, rtol=1e-12, atol=1e-14)
    # the CNN with 2x2 blocks ablated together
    np.testing.assert_allclose(out["cnn"], np_cnn(IMG), rtol=1e-12)
    want = np.zeros_like(IMG)
    f0 = np_cnn(IMG)[:, 2]
    for bi in range(2):
        for bj in range(2):
            ia = IMG.copy()
            ia[:, :, 2 * bi:2 * bi + 2, 2 * bj:2 * bj + 2] = 0
            want[:, :, 2 * bi:2 * bi + 2, 2 * bj:2 * bj + 2] = (f0 - np_cnn(ia)[:, 2])[:, None, None, None]
    np.testing.assert_allclose(out["fa_cnn"], want, rtol=1e-12, atol=1e-14)
    # GradCAM: spatial mean of the gradient at the convolution output, weighted sum of its channels
    w, b, fw, fb = W["conv"]
    pad = np.pad(IMG, ((0, 0), (0, 0), (1, 1), (1, 1)))
    conv = np.zeros((2, 2, 4, 4))
    for o in range(2):
        for i in range(4):
            for j in range(4):
                conv[:, o, i, j] = (pad[:, 0, i:i + 3, j:j + 3] * w[o, 0]).sum((1, 2)) + b[o]
    grad = (conv > 0) * fw[0].reshape(2, 4, 4)
    cam = (grad.mean((2, 3), keepdims=True) * conv).sum(1, keepdims=True)
    np.testing.assert_allclose(out["cam"], cam, rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(out["cam_relu"], np_relu(cam), rtol=1e-12, atol=1e-15)
    assert (cam < 0).any() and (cam > 0).any()
    cam = out["cam"]  # the upsampling checks start from the library's own map
    np.testing.assert_array_equal(out["cam_nearest"], cam.repeat(2, 2).repeat(2, 3))
    # bilinear, half-pixel centres (align_corners=False): source coordinate (i + 0.5) / 2 - 0.5, clamped at 0
    src = np.clip((np.arange(8) + 0.5) / 2 - 0.5, 0, None)
    i0 = np.floor(src).astype(int)
    i1 = np.minimum(i0 + 1, 3)
    lam = src - i0
    rows = cam[:, :, i0] * (1 - lam)[:, None] + cam[:, :, i1] * lam[:, None]
    bil = rows[:, :, :, i0] * (1 - lam) + rows[:, :, :, i1] * lam
    np.testing.assert_allclose(out["cam_bilinear"], bil, rtol=1e-12, atol=1e-15)
    # occlusion windows in NumPy: the mean of the output drops of the windows covering each position
    # (captum divides by float32 counts: float32 results)
    def occlude(f, x, windows, base, t):
        total, count = np.zeros_like(x), np.zeros_like(x)
        f0 = f(x)[np.arange(len(x)), t]
        for win in windows:
            xa = x.copy()
            xa[(slice(None),) + win] = base
            total[(slice(None),) + win] += (f0 - f(xa)[np.arange(len(x)), t]).reshape((-1,) + (1,) * (x.ndim - 1))
            count[(slice(None),) + win] += 1
        return total / count

    win = lambda r, c, k: (slice(0, 1), slice(r, r + k), slice(c, c + k))  # noqa: E731
    want = occlude(np_cnn, IMG, [win(r, c, 3) for r in range(2) for c in range(2)], 0.0, 1)
    np.testing.assert_allclose(out["occ_3x3"], want, rtol=1e-6, atol=1e-7)
    assert out["occ_dtype"] == "float32"
    np.testing.assert_allclose(out["occ_2x2"], out["fa_cnn"], rtol=1e-6, atol=1e-7)
    want = occlude(np_mlp, X, [(slice(j, j + 2),) for j in range(3)], 0.3, [0, 1, 2])
    np.testing.assert_allclose(out["occ_rows"], want, rtol=1e-6, atol=1e-7)
    # two inputs, each ablated group by group on its own
    f = lambda a, b: np_mlp(a * SCALE[:, None] - b)  # noqa: E731
    f0 = f(X, XB)[:, 0]
    for which, groups, tgt in ((0, [[0, 3], [1, 2]], out["fa_two"][0]), (1, [[0, 1, 2], [3]], out["fa_two"][1])):
        want = np.zeros((3, 4))
        for grp in groups:
            a, b = X.copy(), XB.copy()
            (a if which == 0 else b)[:, grp] = 0
            want[:, grp] = (f0 - f(a, b)[:, 0])[:, None]
        np.testing.assert_allclose(tgt, want, rtol=1e-12, atol=1e-14)


# ---------------------------------------------------------------- parity with PyTorch
def _assert_same(a, b, key):
    if isinstance(a, dict):
        for k in a:
            _assert_same(a[k], b[k], f"{key}.{k}")
    elif isinstance(a, str) or (isinstance(a, (list, tuple)) and a and isinstance(a[0], str)):
        assert a == b, key
    elif isinstance(a, (list, tuple)) and a and isinstance(a[0], (list, tuple)):
        for i, (u, v) in enumerate(zip(a, b)):
            _assert_same(u, v, f"{key}[{i}]")
    else:
        np.testing.assert_allclose(np.asarray(a, dtype=float), np.asarray(b, dtype=float), rtol=1e-10, atol=1e-12,
                                   err_msg=key)


@pytest.mark.parametrize("page", [gradient_page, deeplift_page, shap_page, ablation_page], ids=lambda p: p.__name__)
def test_captum_torch_parity(page):
    torch = pytest.importorskip("torch")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        a, b = _page(page), _page(page, torch)
    assert a.keys() == b.keys()
    for k in a:
        _assert_same(a[k], b[k], k)
