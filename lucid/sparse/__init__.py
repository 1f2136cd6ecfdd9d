"""Sparse tensors, PyTorch's ``torch.sparse``: COO and the compressed layouts (CSR, CSC, BSR,
BSC; batched and hybrid) composed from dense ops.

Examples
--------
>>> import lucid
>>> s = lucid.tensor([[0.0, 2.0], [3.0, 0.0]]).to_sparse()
>>> s.is_sparse, s.layout, s._nnz()
(True, lucid.sparse_coo, 2)
>>> lucid.sparse.mm(s, lucid.ones(2, 1))
tensor([[2.],
        [3.]])
"""
# NOTE [Sparse tensors]
# A sparse tensor is a ``Tensor`` subclass (SparseCOOTensor, SparseCSRTensor) that holds
# dense tensors: int64 ``indices`` (sparse_dim, nnz) and ``values`` (nnz, *dense_dims) for
# COO; compressed/plain indices and values for CSR, CSC, BSR and BSC (NOTE [Compressed
# layouts] in _compressed.py: each is computed on through its COO form). Nothing in _core,
# the engine or the op families knows about it:
# - Every sparse operation is composed from dense Lucid ops on those components (coalesce
#   = ``unique`` + ``index_add``; to_dense = ``index_add`` into a flat buffer; sparse @ dense
#   = ``index_select`` of the dense rows, scaled by the values, ``index_add``-ed into the
#   output rows; softmax = per-group ``scatter_reduce``/``index_add``). So gradients, double
#   backward, the strict/CUDA devices and the func transforms come from those ops.
# - Autograd identity: a sparse tensor's ``requires_grad``/``grad_fn``/``is_leaf`` are its
#   values'. A sparse leaf owns a leaf values tensor (``requires_grad_`` swaps in a detached
#   copy so the caller's tensor is never flipped), the engine writes that tensor's ``.grad``
#   and ``s.grad`` rebuilds it as a sparse tensor with ``s``'s indices. For an uncoalesced
#   leaf the duplicates are averaged (each saw the same dense gradient), which gives
#   PyTorch's coalesced gradient. Every product with a sparse operand thus gives it a
#   sparse gradient on its pattern (PyTorch does so for ``torch.sparse.mm``; its
#   ``torch.mm``/``@`` give a dense one). As an output of ``autograd.grad``/``backward`` a
#   sparse tensor is differentiated through its values too, unless it was converted from a
#   dense tensor (by the linear ops that keep PyTorch's gradient dense): then through that
#   dense tensor, whose every entry the gradient reaches. NOTE [Sparse outputs] (_base.py).
# - Being a ``Tensor`` subclass keeps ``isinstance(s, lucid.Tensor)`` true (as in PyTorch)
#   and lets ``dense + s``, ``dense @ s`` reach the subclass's reflected operators first.
#   Its ``_data`` is a ``_SparseData`` stand-in with a shape and dtype only: a dense op
#   that reaches it (``lucid.exp(s)``, ``s.cumsum(0)``) fails inside its impl with
#   NotImplementedError, which ``bind`` names ("exp: sparse tensors are not supported here;
#   call .to_dense() first"). The dense fast path pays nothing.
# - ``lucid.mm``/``matmul``/``addmm`` are wrapped (``sparse_aware``) to route sparse
#   operands here: two class checks on a dense call.
# - Reductions keep PyTorch's layouts: ``csr.sum(dim, keepdim=True)`` is CSR (computed on
#   the COO form and converted back); other compressed layouts, and ``keepdim=False``, which
#   PyTorch refuses for them, give the COO (or dense) result.
# - Not done: ``lucid.save`` of a sparse tensor (serialization.py stores dense arrays only;
#   it raises the stand-in's error), products of batched or hybrid compressed tensors, indexing
#   (``index_select`` and ``narrow_copy`` of COO tensors excepted), and the function forms of
#   methods (``lucid.sum(s)``, ``lucid.t(s)``, ``lucid.index_select(s, ...)``: only
#   mm/matmul/addmm are routed; call the method or ``lucid.sparse.sum``).
from ._base import SparseTensor, check_sparse_tensor_invariants, sparse_bsc, sparse_bsr, sparse_coo, sparse_csc, sparse_csr
from ._coo import SparseCOOTensor, sparse_coo_tensor
from ._compressed import (SparseBSCTensor, SparseBSRTensor, SparseCompressedTensor, SparseCSCTensor,
                          SparseCSRTensor)
from ._csr import (sparse_bsc_tensor, sparse_bsr_tensor, sparse_compressed_tensor, sparse_csc_tensor,
                   sparse_csr_tensor)
from ._ops import (add, addmm, hspmm, log_softmax, mm, mul, sampled_addmm, smm, softmax, spdiags,
                   sum)
from ._legacy import (ByteTensor, CharTensor, DoubleTensor, FloatTensor, HalfTensor, IntTensor, LongTensor,
                      ShortTensor)

__all__ = ["SparseTensor", "check_sparse_tensor_invariants", "SparseCOOTensor", "SparseCompressedTensor", "SparseCSRTensor", "SparseCSCTensor",
           "SparseBSRTensor", "SparseBSCTensor", "sparse_coo", "sparse_csr", "sparse_csc", "sparse_bsr",
           "sparse_bsc", "sparse_coo_tensor", "sparse_csr_tensor", "sparse_csc_tensor", "sparse_bsr_tensor",
           "sparse_bsc_tensor", "sparse_compressed_tensor", "mm", "addmm", "sum", "softmax", "log_softmax",
           "add", "mul", "sampled_addmm", "hspmm", "smm", "spdiags", "FloatTensor", "DoubleTensor",
           "HalfTensor", "LongTensor", "IntTensor", "ShortTensor", "CharTensor", "ByteTensor"]
