"""``lucid.nn.modules.container``: PyTorch's module path for containers: ``Sequential``,
``ModuleList``, ``ModuleDict``, ``ParameterList``, ``ParameterDict``."""
from ..containers import Container, Sequential, ModuleList, ModuleDict, ParameterList, ParameterDict  # noqa: F401
from ..module import _addindent  # noqa: F401

__all__ = ["Container", "Sequential", "ModuleList", "ModuleDict", "ParameterList", "ParameterDict"]
