"""``lucid.distributed.algorithms``: DDP communication hooks and the generic join context manager
(PyTorch's ``torch.distributed.algorithms``)."""
from .join import Join, Joinable, JoinHook

__all__ = ["Join", "Joinable", "JoinHook"]
