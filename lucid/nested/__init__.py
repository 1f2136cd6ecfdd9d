"""Nested tensors, PyTorch's ``torch.nested`` in the strided (default) and jagged layouts,
composed from dense ops.

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
>>> st = lucid.nested.nested_tensor([lucid.ones(1, 2), lucid.ones(2, 1)])
>>> st
nested_tensor([
  tensor([[1., 1.]]),
  tensor([[1.],
          [1.]])
])
>>> st.to_padded_tensor(0.0).shape
(2, 2, 2)
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
# - Also as PyTorch's (``_ops_more.py``): ``select`` along the batch dim is that component
#   (dense); ``bmm``/``matmul`` of a ``(B, j, D)`` tensor and a dense ``(B, D, E)`` batch, or of
#   a dense ``(B, F, D)`` batch and a ``(B, D, j)`` tensor, gather each row's matrix by its
#   sequence; ``contiguous()``/``clone(memory_format=contiguous_format)`` of a tensor with
#   holes packs it on new offsets; ``embedding``/``embedding_bag`` take nested indices (a bag
#   per sequence) and ``masked_select`` a nested mask of a 2-D tensor (new offsets);
#   ``permute`` keeping the batch dim first; ``expand_as`` a tensor of the same structure;
#   ``index_put`` with the ragged dim among the indices puts into rows of the values (offset
#   plus position), without it into the padded tensor, gathered back.
# - Differences from PyTorch: ``to_padded_tensor``, reductions and attention also take
#   nested tensors with holes (a full reduction skips the holes, where PyTorch 2.13 reduces
#   the whole values buffer, holes included); ``is_causal`` attention is accepted (causal
#   within each sequence); log_softmax over the ragged dim, and softmax over it when it is not
#   dim 1, are accepted (PyTorch 2.13 refuses them); so are ``split``/``split_with_sizes``
#   along the batch dim, ``select`` of a normal dim with holes, ``where`` with a dense
#   condition, ``nt @ vector`` and ``masked_select`` with holes; ``grad_fn`` prints as Lucid's
#   dense tensors print it (``<MulBackward0>``). Refusals on the ragged dim (narrow, chunk,
#   split) raise ``OpError``, both PyTorch's RuntimeError and the ValueError it raises when
#   there are holes.
#
# NOTE [Strided nested tensors]
# PyTorch's default layout (``layout=None`` means it): B components of one rank whose sizes
# may differ in every dim. ``StridedNestedTensor`` (``_strided.py``) keeps one flat
# ``buffer`` (the components' row-major values one after another, as PyTorch's contiguous
# NT) and the components' sizes as Python ints; like the jagged class it takes part in
# ``__torch_function__`` (``_strided_ops.dispatch``) and its autograd state is the buffer's.
# - Pointwise ops (unary, with Python scalars or 0-d tensors, and between nested tensors of
#   the same sizes: PyTorch broadcasts nothing else) run once on the buffer.
# - Everything else runs on each component (``unbind`` gives views of the buffer) and
#   reassembles: softmax/log_softmax, reductions over non-batch dims, transpose/permute,
#   (un)squeeze, select, narrow, reshape/view with PyTorch's -1 rule (a -1 keeps a
#   component's own size; a new dim can't be inferred), flatten, cat, chunk/split, matmul/bmm,
#   linear, layer_norm, scaled_dot_product_attention (each component attends alone).
# - ``to_padded_tensor`` is one gather from the buffer plus a padding element; its index is
#   structure (sizes), built on the host and moved once; ``output_size`` may pad, never cut.
# - ``nested_tensor`` copies (no graph to its inputs); ``as_nested_tensor`` keeps the graph
#   (a dense ``(B, ...)`` input's buffer is a view of it), as PyTorch's.
# - ``size(d)`` answers only for the batch dim and dims where all components agree (else
#   RuntimeError, as PyTorch's); ``shape``/``size()`` raise unless every dim is regular.
# - Differences from PyTorch (which refuses these, often with NotImplementedError for want of
#   a kernel): every pointwise op of the jagged table is accepted (exp, log, pow ...);
#   reductions over any non-batch dims with either keepdim, and full reductions (a dense
#   0-d result); permute/flatten/narrow/chunk/split of non-batch dims; nested @ dense;
#   layer_norm without weight; is_causal attention per component; gradients through
#   to_padded_tensor; cat along dim 1 concatenates each component (PyTorch 2.13 returns
#   wrong sizes there); ``len(nt)`` is the batch size.
import lucid as _lucid

from ._create import (as_nested_tensor, masked_select, narrow, nested_tensor, nested_tensor_from_jagged,
                      to_padded_tensor)
from ._strided import StridedNestedTensor
from ._tensor import NestedInt, NestedTensor, jagged

# ``lucid.jagged`` (torch.jagged) beside lucid.strided and lucid.sparse_coo
_lucid.jagged = jagged

__all__ = ["NestedTensor", "StridedNestedTensor", "NestedInt", "jagged", "nested_tensor", "as_nested_tensor",
           "nested_tensor_from_jagged", "narrow", "masked_select", "to_padded_tensor"]
