"""``lucid.nn.modules``: PyTorch's module path for ``Module`` and the global module hooks."""
from . import module  # noqa: F401
from .module import Module  # noqa: F401
