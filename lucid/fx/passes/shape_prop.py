"""``ShapeProp``: run a GraphModule and record each node's output shape and dtype."""
from __future__ import annotations

from typing import NamedTuple

from ..interpreter import Interpreter
from ..node import map_aggregate

__all__ = ["ShapeProp", "TensorMetadata"]


class TensorMetadata(NamedTuple):
    """What ``ShapeProp`` stores in ``node.meta["tensor_meta"]`` for a tensor value."""

    shape: tuple
    dtype: object
    requires_grad: bool
    stride: tuple
    memory_format: object
    is_quantized: bool
    qparams: dict


def _memory_format(t):
    """The first layout ``t`` is contiguous in (plain contiguity first), None for a strided view."""
    import lucid

    for fmt in (lucid.contiguous_format, lucid.channels_last, lucid.channels_last_3d):
        try:
            if t.is_contiguous(memory_format=fmt):
                return fmt
        except (RuntimeError, ValueError):  # a layout that needs another rank
            continue
    return None


def _extract_tensor_metadata(t):
    return TensorMetadata(t.shape, t.dtype, t.requires_grad, tuple(t.stride()), _memory_format(t),
                          bool(getattr(t, "is_quantized", False)), {})


class ShapeProp(Interpreter):
    """Run the module on example inputs, filling ``node.meta["tensor_meta"]`` (a
    ``TensorMetadata``, or the same structure of them for a tuple/list of tensors) and
    ``node.meta["type"]`` for every node.

    Examples
    --------
    >>> import lucid
    >>> from lucid.fx import symbolic_trace
    >>> from lucid.fx.passes.shape_prop import ShapeProp
    >>> gm = symbolic_trace(lambda x: x.sum(0))
    >>> _ = ShapeProp(gm).propagate(lucid.ones(3, 4))
    >>> [(n.name, tuple(n.meta["tensor_meta"].shape)) for n in gm.graph.nodes]
    [('x', (3, 4)), ('sum_1', (4,)), ('output', (4,))]
    """

    def run_node(self, n):
        import lucid

        result = super().run_node(n)
        found = []

        def meta(x):
            if isinstance(x, lucid.Tensor):
                found.append(True)
                return _extract_tensor_metadata(x)
            return x

        tensor_meta = map_aggregate(result, meta)
        if found:
            n.meta["tensor_meta"] = tensor_meta
        n.meta["type"] = type(result)
        return result

    def propagate(self, *args):
        """Run the graph on ``args`` (recording metadata); returns the result."""
        return super().run(*args)
