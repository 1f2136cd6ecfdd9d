"""PyTorch's ``torch.ao.quantization`` (eager mode): observers, fake quantization, qconfigs,
stubs, module fusion and the dynamic / static / quantization-aware workflows.

Examples
--------
>>> import lucid, lucid.nn as nn
>>> from lucid.ao.quantization import quantize_dynamic
>>> q = quantize_dynamic(nn.Sequential(nn.Linear(4, 2)), {nn.Linear}, dtype=lucid.qint8)
>>> type(q[0]).__name__
'Linear'
"""
from lucid._core.fake_quantize import fake_quantize_per_channel_affine, fake_quantize_per_tensor_affine
from lucid._core.quantized import (dequantize, per_channel_affine, per_channel_symmetric, per_tensor_affine,
                                   per_tensor_symmetric, quantize_per_channel, quantize_per_tensor)

from .fake_quantize import (FakeQuantize, FakeQuantizeBase, FixedQParamsFakeQuantize, FusedMovingAvgObsFakeQuantize,
                            default_fixed_qparams_range_0to1_fake_quant,
                            default_fixed_qparams_range_neg1to1_fake_quant, default_dynamic_fake_quant,
                            default_embedding_fake_quant,
                            default_fake_quant, default_fused_act_fake_quant, default_fused_per_channel_wt_fake_quant,
                            default_fused_wt_fake_quant,
                            default_per_channel_weight_fake_quant, default_weight_fake_quant, disable_fake_quant,
                            disable_observer, enable_fake_quant, enable_observer)
from .fuse_modules import fuse_modules, fuse_modules_qat
from .histogram_observer import HistogramObserver, default_histogram_observer
from .observer import (FixedQParamsObserver, MinMaxObserver, default_fixed_qparams_range_0to1_observer,
                       default_fixed_qparams_range_neg1to1_observer, MovingAverageMinMaxObserver, MovingAveragePerChannelMinMaxObserver,
                       NoopObserver, ObserverBase, PerChannelMinMaxObserver, PlaceholderObserver,
                       UniformQuantizationObserverBase, default_dynamic_quant_observer,
                       default_float_qparams_observer, default_observer, default_per_channel_weight_observer,
                       default_placeholder_observer, default_weight_observer)
from .observer import (RecordingObserver, ReuseInputObserver, default_affine_fixed_qparams_observer,
                       default_debug_observer, default_reuse_input_observer, default_symmetric_fixed_qparams_observer,
                       get_observer_state_dict, load_observer_state_dict, per_channel_weight_observer_range_neg_127_to_127,
                       weight_observer_range_neg_127_to_127)
from .fake_quantize import (default_affine_fixed_qparams_fake_quant, default_histogram_fake_quant,
                            default_symmetric_fixed_qparams_fake_quant,
                            fused_per_channel_wt_fake_quant_range_neg_127_to_127,
                            fused_wt_fake_quant_range_neg_127_to_127)
from .qconfig import (default_activation_only_qconfig, default_debug_qconfig, default_dynamic_qat_qconfig,
                      default_per_channel_symmetric_qnnpack_qat_qconfig, default_per_channel_symmetric_qnnpack_qconfig,
                      default_qat_qconfig_v2, default_quint8_weight_qconfig, default_reuse_input_qconfig,
                      default_symmetric_qnnpack_qat_qconfig, default_symmetric_qnnpack_qconfig,
                      default_weight_only_qconfig, float16_static_qconfig, get_default_qat_qconfig_dict,
                      get_default_qconfig_dict, qconfig_equals)
from .qconfig import (QConfig, QConfigDynamic, default_dynamic_qconfig, default_embedding_qat_qconfig,
                      default_per_channel_qconfig,
                      default_qat_qconfig, default_qconfig, float16_dynamic_qconfig, float_qparams_weight_only_qconfig,
                      get_default_qat_qconfig, get_default_qconfig, per_channel_dynamic_qconfig)
from .qconfig_mapping import QConfigMapping, get_default_qat_qconfig_mapping, get_default_qconfig_mapping
from .quantize import (add_quant_dequant, convert, get_default_compare_output_module_list,
                       get_default_custom_config_dict, get_default_qconfig_propagation_list, no_observer_set,
                       quantize_qat, get_static_quant_module_class, get_dynamic_quant_module_class,
                       default_eval_fn, get_default_dynamic_quant_module_mappings, get_default_qat_module_mappings,
                       get_embedding_qat_module_mappings, get_embedding_static_quant_module_mappings,
                       get_default_static_quant_module_mappings, prepare, prepare_qat, propagate_qconfig_, quantize,
                       quantize_dynamic, swap_module)
from .stubs import DeQuantStub, QuantStub, QuantWrapper

from . import quantize_fx  # noqa: E402  (FX graph mode: fuse_fx, prepare_fx, convert_fx ...)

__all__ = [name for name in dir() if not name.startswith("_")]
