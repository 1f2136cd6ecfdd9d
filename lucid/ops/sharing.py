"""``Tensor.share_memory_`` and ``Tensor.is_shared`` (see NOTE [Shared memory] in
``lucid/_core/shared_memory.py``, imported on first use)."""
from __future__ import annotations

import numpy as np

from .._core.tensor import Tensor, tensor_method


@tensor_method("share_memory_")
def share_memory_(self):
    """Move a CPU tensor's values to shared memory (a no-op on a device or if already there).

    Processes forked afterwards, and those the tensor is sent to through
    ``lucid.multiprocessing``, see its in-place changes. Returns ``self``.

    Examples
    --------
    >>> import lucid
    >>> w = lucid.zeros(3)
    >>> w.share_memory_().is_shared()
    True
    """
    from .._core.shared_memory import buffer_of, move_to_shared

    data = self._data
    if data.__class__ is not np.ndarray or buffer_of(data) is not None:
        return self
    root = self if self._base is None else self._base
    # the base's memory moves, with every live view of it that shares that memory
    views = [r() for r in (root._views or ())]
    tensors = [root] + [v for v in views if v is not None and v is not root and v._data.__class__ is np.ndarray
                        and np.may_share_memory(v._data, root._data)]
    if not any(t is self for t in tensors):
        tensors.append(self)
    for t, arr in zip(tensors, move_to_shared([t._data for t in tensors])):
        t._data = arr
    return self


@tensor_method("is_shared")
def is_shared(self):
    """Whether the tensor's values are in shared memory (``share_memory_``).

    Examples
    --------
    >>> import lucid
    >>> lucid.ones(2).is_shared()
    False
    """
    data = self._data
    if data.__class__ is not np.ndarray:
        return False
    from .._core.shared_memory import buffer_of

    return buffer_of(data) is not None
