"""PyTorch's ``torch.ao``: ``lucid.ao.quantization`` (observers, fake quantization, the eager
quantization workflows), ``lucid.ao.nn`` (quantized modules) and ``lucid.ao.pruning``
(sparsifiers and their schedulers), each loaded on first use.

Examples
--------
>>> import lucid
>>> lucid.ao.quantization.default_dynamic_qconfig.weight().dtype
lucid.qint8
"""
import importlib

_SUBMODULES = ("quantization", "nn", "pruning")


def __getattr__(name):
    if name in _SUBMODULES:
        return importlib.import_module(f".{name}", __name__)
    raise AttributeError(f"module 'lucid.ao' has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(_SUBMODULES))
