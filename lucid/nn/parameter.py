"""``Parameter``: a Tensor that a Module registers as one of its learnable weights."""
from __future__ import annotations

import numpy as np

from .._core.tensor import Tensor, _to_array

__all__ = ["Parameter", "Buffer"]


class Parameter(Tensor):
    """A Tensor that is a module parameter (``requires_grad=True`` by default).

    Assigning a ``Parameter`` as a Module attribute registers it, so it appears in
    ``parameters()`` and ``state_dict()``. The parameter shares memory with ``data``
    when ``data`` is a Tensor (like PyTorch).

    Parameters
    ----------
    data : Tensor or array_like, optional
        Initial values (an empty float tensor when omitted).
    requires_grad : bool
        Whether the parameter is trainable.

    Examples
    --------
    >>> import lucid
    >>> p = lucid.nn.Parameter(lucid.zeros(2))
    >>> p.requires_grad
    True
    """

    def __init__(self, data=None, requires_grad=True):
        if isinstance(data, Tensor):
            arr = data._data  # share storage (and the version counter) with ``data``
            version = data._version
        else:
            arr = _to_array(np.zeros(0, np.float32) if data is None else data, None)
            version = [0]
        Tensor.__init__(self, None)
        self._data = arr
        self._version = version
        if requires_grad:
            self.requires_grad = True

    def __repr__(self):
        return "Parameter containing:\n" + Tensor.__repr__(self)

    def __reduce_ex__(self, protocol):
        return (_rebuild_parameter, (self._data, self._rg))

    def __deepcopy__(self, memo):
        if id(self) in memo:
            return memo[id(self)]
        p = Parameter(self._data.copy(), self._rg)
        memo[id(self)] = p
        return p


def _rebuild_parameter(data, requires_grad):
    return Parameter(np.array(data), requires_grad)


class Buffer(Tensor):
    """Marker for a module buffer (``nn.Buffer`` in recent PyTorch); ``persistent`` flag.

    Parameters
    ----------
    data : Tensor
        The buffer's value.
    persistent : bool
        Whether it is saved in ``state_dict``.

    Examples
    --------
    >>> import lucid, lucid.nn as nn
    >>> m = nn.Module()
    >>> m.scale = nn.Buffer(lucid.ones(2))
    >>> list(m.state_dict())
    ['scale']
    """

    def __init__(self, data=None, *, persistent=True):
        Tensor.__init__(self, None)
        self._data = data._data if isinstance(data, Tensor) else _to_array(data if data is not None else [], None)
        self.persistent = persistent
