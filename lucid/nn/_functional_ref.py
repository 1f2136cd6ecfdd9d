"""``_fn = functional_ref("max_pool2d")``: a layer's functional, looked up when it is called.

A ``staticmethod(F.max_pool2d)`` class attribute keeps the function object the class saw at
import, so a ``__torch_function__`` dispatcher installed later (a Tensor subclass, quantized
or nested tensors) never saw the layer's calls: ``nn.MaxPool2d(2)(q)`` failed where
``F.max_pool2d(q, 2)`` worked. Reading ``lucid.nn.functional`` at call time costs one lookup.
"""
from __future__ import annotations


class functional_ref:  # noqa: N801 (used like staticmethod)
    """A class attribute that reads ``lucid.nn.functional.<name>`` on every access.

    Examples
    --------
    >>> from lucid.nn._functional_ref import functional_ref
    >>> class Layer:
    ...     _fn = functional_ref("relu")
    >>> Layer._fn.__name__
    'relu'
    """

    __slots__ = ("name",)

    def __init__(self, name):
        self.name = name

    def __get__(self, obj, owner=None):
        from . import functional

        return getattr(functional, self.name)
