"""``lucid.utils._pytree`` (``torch.utils._pytree``, which libraries built on PyTorch import):
the pytree functions of ``lucid.func`` (tuples, lists, dicts, named tuples)."""
from ..func.pytree import tree_flatten, tree_map, tree_unflatten  # noqa: F401

__all__ = ["tree_flatten", "tree_map", "tree_unflatten"]
