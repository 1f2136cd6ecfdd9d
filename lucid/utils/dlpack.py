"""``lucid.utils.dlpack`` (``torch.utils.dlpack``): tensors exchanged with other libraries
(NumPy, PyTorch, CuPy, JAX) through DLPack, sharing memory."""
from ..ops.meta import from_dlpack, to_dlpack  # noqa: F401

__all__ = ["from_dlpack", "to_dlpack"]
