"""The ``_data`` of a tensor that holds no dense array of its own (sparse and nested tensors)."""
from __future__ import annotations

import numpy as np


class NoValues:
    """A shape and a dtype standing where a tensor's array would be, for tensor kinds whose
    values live elsewhere (a sparse tensor's ``values()``, a nested tensor's packed values).

    Dense ops reach a tensor's array through ``_data``; NumPy ufuncs, array functions,
    conversions, indexing and array methods all raise NotImplementedError with ``message`` on
    this object, which ``bind`` re-raises prefixed with the op's name (NOTE [Errors name the
    op]). A subclass sets ``message`` and ``kind``.

    Examples
    --------
    >>> import numpy as np
    >>> from lucid._core.no_values import NoValues
    >>> stand_in = NoValues((2, 3), np.dtype(np.float32))
    >>> stand_in.ndim, stand_in.size
    (2, 6)
    """

    __slots__ = ("shape", "dtype")
    message = "this tensor has no dense values here"
    kind = "tensor without values"

    def __init__(self, shape, dtype):
        self.shape = tuple(shape)
        self.dtype = dtype

    @property
    def ndim(self):
        return len(self.shape)

    @property
    def size(self):
        return int(np.prod(self.shape, dtype=np.int64))

    def _refuse(self, *args, **kwargs):
        raise NotImplementedError(self.message)

    __array_ufunc__ = __array_function__ = __array__ = __getitem__ = _refuse

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        raise NotImplementedError(self.message)

    def __repr__(self):
        return f"<{self.kind} data, shape={self.shape}, dtype={self.dtype}>"
