"""The dense -> sparse quantized module mappings of ``BaseSparsifier.convert``.

PyTorch maps ``nn.Linear`` to ``torch.ao.nn.sparse.quantized.Linear`` (and its ``dynamic``
form): block-sparse int8 kernels (QNNPACK). Lucid has no ``lucid.ao.nn.sparse`` yet, so both
functions raise ``NotImplementedError`` naming what is missing; ``convert`` works with any
user mapping whose targets have a ``from_dense`` classmethod.
"""
from __future__ import annotations

import importlib

__all__ = ["get_static_sparse_quantized_mapping", "get_dynamic_sparse_quantized_mapping"]


def _sparse_quantized(kind):
    try:
        sparse = importlib.import_module("lucid.ao.nn.sparse")
    except ImportError:
        raise NotImplementedError(
            f"get_{kind}_sparse_quantized_mapping: lucid has no sparse quantized modules (lucid.ao.nn.sparse, "
            "PyTorch's torch.ao.nn.sparse) yet; pass your own mapping to BaseSparsifier.convert") from None
    import lucid.nn as nn

    target = sparse.quantized.Linear if kind == "static" else sparse.quantized.dynamic.Linear
    return {nn.Linear: target}


def get_static_sparse_quantized_mapping():
    """``{nn.Linear: lucid.ao.nn.sparse.quantized.Linear}`` (raises NotImplementedError while
    that module does not exist)."""
    return _sparse_quantized("static")


def get_dynamic_sparse_quantized_mapping():
    """``{nn.Linear: lucid.ao.nn.sparse.quantized.dynamic.Linear}`` (raises
    NotImplementedError while that module does not exist)."""
    return _sparse_quantized("dynamic")
