"""A DTensor that is a module parameter (PyTorch: ``nn.Parameter(dtensor)`` keeps the subclass)."""
from __future__ import annotations

from ...nn.parameter import Parameter
from ._api import DTensor


class DTensorParameter(DTensor, Parameter):
    """A :class:`DTensor` that modules register as a parameter (``isinstance(p, nn.Parameter)``).

    Examples
    --------
    >>> from lucid.distributed.tensor.parameter import DTensorParameter
    >>> issubclass(DTensorParameter, lucid.nn.Parameter)
    True
    """

    def __repr__(self):
        return "Parameter containing:\n" + DTensor.__repr__(self)

    __str__ = __repr__
