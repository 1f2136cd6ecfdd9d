"""``lucid.nn.modules.linear_cross_entropy``: PyTorch's module path for ``LinearCrossEntropyLoss``
(PyTorch exports nothing from this path; the class is in ``loss``)."""
from ..linear_cross_entropy import LinearCrossEntropyLoss  # noqa: F401

__all__ = []
