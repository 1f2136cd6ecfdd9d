"""``lucid.utils.checkpoint`` (``torch.utils.checkpoint``): see :mod:`lucid.autograd.checkpoint`."""
from ..autograd.checkpoint import checkpoint

__all__ = ["checkpoint"]
