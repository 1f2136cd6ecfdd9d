"""``lucid.multiprocessing.reductions`` (``torch.multiprocessing.reductions``): how tensors are
pickled between processes (NOTE [Shared memory] in ``lucid/_core/shared_memory.py``).

:func:`reduce_tensor` is the reduction :mod:`lucid.multiprocessing` registers with
``ForkingPickler`` for ``Tensor`` and ``Parameter``: a CPU tensor moves to shared memory and the
receiver maps it; :func:`init_reductions` registers it again (idempotent). PyTorch's
storage-level and CUDA-IPC reductions (``reduce_storage``, ``rebuild_cuda_tensor`` ...) have no
Lucid counterpart: Lucid shares a tensor's buffer, and device tensors travel as values.

Examples
--------
>>> import pickle
>>> import lucid
>>> from lucid.multiprocessing.reductions import reduce_tensor
>>> t = lucid.tensor([1.0, 2.0])
>>> rebuild, args = reduce_tensor(t)
>>> t.is_shared()   # reducing a tensor moved it to shared memory, as in PyTorch
True
"""
from __future__ import annotations

from multiprocessing.util import register_after_fork

from . import ForkingPickler, _rebuild_shared as rebuild_tensor, _reduce_tensor as reduce_tensor, \
    _register as init_reductions

__all__ = ["ForkingPickler", "init_reductions", "rebuild_tensor", "reduce_tensor", "register_after_fork"]
