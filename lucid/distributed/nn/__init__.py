"""Differentiable collectives (``torch.distributed.nn``): see :mod:`lucid.distributed.nn.functional`."""
from . import functional  # noqa: F401
