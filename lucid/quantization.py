"""``lucid.quantization``: the old import path PyTorch keeps (``torch.quantization``), the same
objects as :mod:`lucid.ao.quantization`.

Examples
--------
>>> import lucid
>>> lucid.quantization.quantize_dynamic is lucid.ao.quantization.quantize_dynamic
True
"""
from .ao.quantization import *  # noqa: F401,F403
from .ao.quantization import __all__  # noqa: F401
