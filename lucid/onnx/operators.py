"""``lucid.onnx.operators``: ``torch.onnx.operators``' shape helpers, usable eagerly.

``shape_as_tensor(x)`` is ``x``'s shape as a 1-D int64 tensor (``torch._shape_as_tensor``);
``reshape_from_tensor_shape(x, shape)`` reshapes ``x`` to the sizes held in the 1-D tensor
``shape`` (``torch._reshape_from_tensor``).
"""
from __future__ import annotations

__all__ = ["reshape_from_tensor_shape", "shape_as_tensor"]


def shape_as_tensor(x):
    """``x``'s shape as a 1-D int64 tensor on the CPU, as ``torch.onnx.operators.shape_as_tensor``."""
    import lucid

    return lucid._shape_as_tensor(x)


def reshape_from_tensor_shape(x, shape):
    """``x`` reshaped to the sizes in the 1-D integer tensor ``shape`` (-1 allowed)."""
    if getattr(shape, "dim", lambda: 1)() != 1:
        raise RuntimeError(f"reshape_from_tensor_shape: shape must be a 1-D tensor, got shape {tuple(shape.shape)}")
    return x.reshape([int(s) for s in shape.tolist()])
