"""``lucid.onnx``: the parts of ``torch.onnx`` that model code calls outside an export.

Lucid has no ONNX exporter: ``is_in_onnx_export()`` is always False (code such as fairseq's
takes its eager branch), and ``export`` raises. ``lucid.onnx.operators`` holds the shape helpers
(``shape_as_tensor``, ``reshape_from_tensor_shape``) that fairseq's positional embeddings call.

Examples
--------
>>> import lucid
>>> lucid.onnx.is_in_onnx_export()
False
>>> lucid.onnx.operators.shape_as_tensor(lucid.zeros(2, 3)).tolist()
[2, 3]
"""
from __future__ import annotations

from . import operators

__all__ = ["export", "is_in_onnx_export", "operators"]


def is_in_onnx_export() -> bool:
    """False: Lucid never traces for an ONNX export."""
    return False


def export(*args, **kwargs):
    """Refused: Lucid has no ONNX exporter."""
    raise RuntimeError("lucid.onnx.export: Lucid has no ONNX exporter (lucid.export.export gives an ExportedProgram, "
                       "saved with lucid.export.save)")
