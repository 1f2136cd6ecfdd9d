"""A DTensor that is a module parameter (PyTorch: ``nn.Parameter(dtensor)`` keeps the subclass)."""
from __future__ import annotations

from ...nn.parameter import Parameter
from ._api import DTensor


class DTensorParameter(DTensor, Parameter):
    """A :class:`DTensor` that modules register as a parameter (``isinstance(p, nn.Parameter)``).

    ``nn.Parameter(dtensor, requires_grad)`` makes one: a new leaf whose local piece shares
    storage (and the version counter) with ``dtensor``'s, with the same mesh and placements.

    Examples
    --------
    >>> from lucid.distributed.tensor.parameter import DTensorParameter
    >>> issubclass(DTensorParameter, lucid.nn.Parameter)
    True
    """

    def __init__(self, *args, **kwargs):
        pass  # made by ``_make`` or ``Parameter.__new__``: nothing left to set

    def __repr__(self):
        return "Parameter containing:\n" + DTensor.__repr__(self)

    __str__ = __repr__


def as_parameter(dt, requires_grad=True):
    """``nn.Parameter(dt, requires_grad)``: a leaf DTensor parameter sharing ``dt``'s local storage."""
    local = dt._local_tensor.detach()
    if requires_grad:
        local.requires_grad_(True)
    return DTensor._make(local, *dt._spec, cls=DTensorParameter)
