"""Nested tensors, PyTorch's ``torch.nested`` in the jagged layout, composed from dense ops.

Examples
--------
>>> import lucid
>>> nt = lucid.nested.nested_tensor([lucid.ones(2, 3), lucid.ones(4, 3)], layout=lucid.jagged)
>>> nt
NestedTensor(size=(2, j..., 3), offsets=tensor([0, 2, 6]), contiguous=True)
>>> nt.is_nested, nt.layout, nt.values().shape
(True, lucid.jagged, (6, 3))
>>> [tuple(t.shape) for t in (nt * 2).relu().unbind()]
[(2, 3), (4, 3)]
"""
# NOTE [Nested tensors]
# A batch of B tensors that differ in one dim (the ragged dim, dim 1 unless built otherwise)
# is stored as PyTorch's NJT stores it: ``values`` (the components concatenated along the
# ragged dim: ``(sum of lengths, *rest)``) and int64 ``offsets`` (B + 1 row boundaries),
# plus ``lengths`` when the rows have holes (``narrow``, ``nested_tensor_from_jagged(...,
# lengths=)``). Nothing in _core, the engine or the op families knows about it:
# - ``NestedTensor`` is a ``Tensor`` subclass that overrides ``__torch_function__`` (NOTE
#   [Torch function] in lucid/overrides.py), as PyTorch's Python NJT does: every public call
#   with a nested argument comes to ``_ops.dispatch``, which maps it onto dense ops on the
#   values (pointwise ops; reductions, linear, matmul, layer_norm and shape ops on the
#   non-ragged dims) and rebuilds a nested tensor on the same structure. A function without
#   a handler raises NotImplementedError naming it. Defining the class switches the protocol
#   on process-wide, which is why ``import lucid`` does not import this package (lazy), and
#   every nested tensor made switches it on again if a test harness turned it off.
# - Autograd, devices and transforms: the values tensor is a plain dense tensor and carries
#   the graph; ``nt.requires_grad``/``grad_fn``/``is_leaf`` are its values', and ``nt.grad``
#   is the values' gradient on the same structure. Per-sequence work (to_padded_tensor,
#   segment sums, attention) is one index gather on the device (``index_select`` of the
#   values plus a padding row; ``index_add`` by the row's sequence index), so gradients,
#   the strict/CUDA devices and ``lucid.func`` come from those ops. The only host reads are
#   the lengths as Python ints, read once per structure (for the padded length and
#   ``unbind``), as PyTorch caches its max sequence length.
# - The ragged size is a symbol (``NestedInt``, printed ``j1``), one per offsets tensor:
#   two nested tensors combine only when built on the same offsets (``nt + nt.relu()``), as
#   PyTorch's nested ints; ``nt.shape`` is a ``lucid.Size`` holding it.
# - Its ``_data`` is a stand-in (shape and dtype, no values) whose NumPy protocols raise, so
#   a dense primitive that reaches a nested tensor outside the protocol fails naming itself.
# - Attention: ``scaled_dot_product_attention`` on (B, H, j, D) nested q/k/v pads them, masks
#   each sequence's keys past its length (and, with ``is_causal``, the upper triangle within
#   each sequence, which PyTorch refuses for nested inputs) and gathers the rows back: equal
#   to attending each sequence alone.
# - Reductions over the ragged dim (sum, mean, amax, amin, prod, any, all; max/min/argmax/
#   argmin with the first extremum's index, whose element alone gets max's gradient) are one
#   ``index_add``/``scatter_reduce`` of the rows by their sequence; softmax and log_softmax over
#   it subtract each sequence's max the same way.
# - Differences from PyTorch: only the jagged layout exists (``layout=None`` means it; the
#   strided nested layout raises); ``to_padded_tensor``, reductions and attention also take
#   nested tensors with holes; ``is_causal`` attention is accepted (causal within each
#   sequence); log_softmax over the ragged dim, and softmax over it when it is not dim 1, are
#   accepted (PyTorch 2.13 refuses them); ``grad_fn`` prints as Lucid's dense tensors print it
#   (``<MulBackward0>``).
import lucid as _lucid

from ._create import (as_nested_tensor, masked_select, narrow, nested_tensor, nested_tensor_from_jagged,
                      to_padded_tensor)
from ._tensor import NestedInt, NestedTensor, jagged

# ``lucid.jagged`` (torch.jagged) beside lucid.strided and lucid.sparse_coo
_lucid.jagged = jagged

__all__ = ["NestedTensor", "NestedInt", "jagged", "nested_tensor", "as_nested_tensor", "nested_tensor_from_jagged",
           "narrow", "masked_select", "to_padded_tensor"]
