"""Lucid: a small, readable deep learning framework on NumPy with composable autograd.

Examples
--------
>>> import lucid
>>> x = lucid.tensor([2.0, 3.0], requires_grad=True)
>>> (x ** 2).sum().backward()
>>> x.grad
tensor([4., 6.])
"""
import math as _math

from ._core.backend import device, get_default_device, set_default_device
from ._core import dtypes as _dtypes_module
from ._core.dtypes import (bool_ as bool, can_cast, cdouble, cfloat, complex64, complex128, double,
                           dtype, finfo, float, float16, float32, float64, get_default_dtype, half,
                           iinfo, int, int8, int16, int32, int64, long, promote_types,
                           public_result_type as result_type, qint8, qint32, quint8, set_default_dtype,
                           short, uint8, uint16, uint32, uint64)
from ._core.size import Size
from ._core.grad_mode import (enable_grad, inference_mode, is_grad_enabled,
                              is_inference_mode_enabled, no_grad, set_grad_enabled)
from ._core.tensor import Tensor
from .ops.elementwise import *  # noqa: F401,F403
from .ops.reduce import *  # noqa: F401,F403
from .ops.shape import *  # noqa: F401,F403
from .ops.indexing import *  # noqa: F401,F403
from .ops.linalg import *  # noqa: F401,F403
from .ops.creation import *  # noqa: F401,F403
from .ops.random import *  # noqa: F401,F403
from .ops.inplace import *  # noqa: F401,F403
from .ops.conv import *  # noqa: F401,F403
from .ops.complex import *  # noqa: F401,F403
from .ops.special import *  # noqa: F401,F403
from .ops.meta import *  # noqa: F401,F403
from .ops.scatter_extra import *  # noqa: F401,F403
from .ops import inplace_more as _inplace_more  # noqa: F401
from .ops.random_inplace import *  # noqa: F401,F403
from .ops.legacy import *  # noqa: F401,F403
from .ops import misc as _misc  # noqa: F401
from .ops import sharing as _sharing  # noqa: F401
from .ops.torch_functions import *  # noqa: F401,F403
from .ops.spectral import *  # noqa: F401,F403
from .ops.tensor_surface import *  # noqa: F401,F403
from .ops.tensor_surface_more import layout, strided  # noqa: F401  (torch.strided)
from .ops.storage import *  # noqa: F401,F403  (UntypedStorage, TypedStorage, FloatStorage ...)
from .ops.memory_format import *  # noqa: F401,F403  (torch.channels_last ...)
from .ops.torch_misc import *  # noqa: F401,F403
from .ops.torch_more import *  # noqa: F401,F403
from .ops.torch_extra_linalg import *  # noqa: F401,F403
from .ops.private_aten import *  # noqa: F401,F403  (torch._softmax, torch._native_batch_norm_legit ...)
from .ops.lucid3_surface import *  # noqa: F401,F403  (Lucid 3 names: lucid.silu, expand_dims ...)
from ._runtime import (_assert, are_deterministic_algorithms_enabled, get_deterministic_debug_mode,
                       get_float32_matmul_precision, get_num_interop_threads, get_num_threads,
                       init_num_threads, is_anomaly_check_nan_enabled, is_anomaly_enabled,
                       is_deterministic_algorithms_warn_only_enabled, is_storage, is_warn_always_enabled,
                       set_anomaly_enabled, set_deterministic_debug_mode, set_float32_matmul_precision,
                       set_flush_denormal, set_num_interop_threads, set_num_threads, set_warn_always,
                       typename, use_deterministic_algorithms)
from ._core.printing import get_printoptions, set_printoptions
from . import autograd, fft, func, linalg, special  # noqa: E402,F401
from .linalg import matrix_exp  # noqa: E402,F401  (torch.matrix_exp)
from .func import vmap  # noqa: E402,F401  (torch.vmap)
from .ops.out_arguments import TOP_LEVEL as _OUT_NAMES, accept_out as _accept_out  # noqa: E402

_accept_out(globals(), _OUT_NAMES)  # PyTorch's out= (NOTE [Out arguments])

# Sparse tensors (NOTE [Sparse tensors]); mm/matmul/addmm also take a sparse operand.
from . import sparse  # noqa: E402,F401
from .sparse import sparse_coo, sparse_coo_tensor, sparse_csr, sparse_csr_tensor  # noqa: E402,F401
from .sparse import (sparse_bsc, sparse_bsc_tensor, sparse_bsr, sparse_bsr_tensor,  # noqa: E402,F401
                     sparse_compressed_tensor, sparse_csc, sparse_csc_tensor)
from .sparse._ops import hspmm, smm, spmm, sparse_aware as _sparse_aware  # noqa: E402,F401
mm, matmul, addmm = (_sparse_aware(mm, "mm"), _sparse_aware(matmul, "matmul"),  # noqa: F405
                     _sparse_aware(addmm, "addmm"))  # noqa: F405
sum, t, transpose, index_select, narrow_copy = (  # noqa: A001
    _sparse_aware(sum, "sum"), _sparse_aware(t, "t"), _sparse_aware(transpose, "transpose"),  # noqa: F405
    _sparse_aware(index_select, "index_select"), _sparse_aware(narrow_copy, "narrow_copy"))  # noqa: F405

__version__ = "0.1.0"

pi, e, inf, nan = _math.pi, _math.e, _math.inf, _math.nan
newaxis = None

# The training stack (nn, optim, utils, distributions, save/load) loads on first use, so `import lucid`
# stays fast for users of the core alone; `import lucid.nn` works as usual.
_LAZY_MODULES = {"nn", "optim", "utils", "serialization", "distributions", "distributed", "cuda", "backends",
                 "profiler", "amp", "signal", "testing", "random", "compiler", "quasirandom", "multiprocessing", "cpu", "accelerator", "jit", "library", "futures", "fx", "export",
                 "hub", "version", "mps", "xpu", "overrides", "_C", "__future__", "nested", "ao", "quantization", "masked",
                 "__config__", "_dynamo", "_logging", "onnx",
                 "einops", "dtypes", "diffeq"}  # einops, dtypes, diffeq: Lucid 3 modules (See NOTE [Lucid 3 names])
_LAZY_ATTRS = {"save": "serialization", "load": "serialization", "autocast": "amp", "_scaled_mm": "ops.scaled_mm",
               "OutOfMemoryError": "cuda", "jagged": "nested",
               "is_autocast_enabled": "amp", "is_autocast_available": "amp", "get_autocast_dtype": "amp", "compile": "compiler",
               "GradScaler": "amp", "Event": "accelerator", "Stream": "accelerator",
               # quantized tensors (NOTE [Quantized tensors]), loaded on first use
               **dict.fromkeys(("qscheme", "per_tensor_affine", "per_channel_affine", "per_tensor_symmetric",
                                "per_channel_symmetric", "per_channel_affine_float_qparams", "quantize_per_tensor",
                                "quantize_per_channel", "quantize_per_tensor_dynamic", "dequantize"), "_core.quantized"),
               **dict.fromkeys(("fake_quantize_per_tensor_affine", "fake_quantize_per_channel_affine"),
                               "_core.fake_quantize"),
               **dict.fromkeys(("set_autocast_enabled", "is_autocast_cpu_enabled", "set_autocast_cpu_enabled",
                                "get_autocast_cpu_dtype", "set_autocast_cpu_dtype", "get_autocast_gpu_dtype",
                                "set_autocast_gpu_dtype", "set_autocast_dtype", "is_autocast_cache_enabled",
                                "set_autocast_cache_enabled", "clear_autocast_cache", "autocast_increment_nesting",
                                "autocast_decrement_nesting"), "amp")}


def __getattr__(name):
    import importlib

    if name in _LAZY_MODULES:
        return importlib.import_module(f".{name}", __name__)
    if name in _LAZY_ATTRS:
        return getattr(importlib.import_module(f".{_LAZY_ATTRS[name]}", __name__), name)
    if name in _dtypes_module._ML_FLOAT_NAMES:  # loads ml_dtypes on first use: NOTE [bfloat16], NOTE [float8]
        return _dtypes_module.enable_ml_float(name)
    if name == "BFloat16Tensor":  # the legacy constructor, made on first use too
        from .ops.legacy import bfloat16_tensor

        return bfloat16_tensor()
    raise AttributeError(f"module 'lucid' has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | _LAZY_MODULES | set(_LAZY_ATTRS))
