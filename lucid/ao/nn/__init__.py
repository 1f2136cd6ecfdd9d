"""PyTorch's ``torch.ao.nn``: quantized modules (``lucid.ao.nn.quantized`` and its ``dynamic``
package), fused modules (``intrinsic``, with ``intrinsic.qat``) and quantization-aware-training
layers (``qat``), each loaded on first use."""
import importlib

_SUBMODULES = ("quantized", "quantizable", "intrinsic", "qat")


def __getattr__(name):
    if name in _SUBMODULES:
        return importlib.import_module(f".{name}", __name__)
    raise AttributeError(f"module 'lucid.ao.nn' has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(_SUBMODULES))
