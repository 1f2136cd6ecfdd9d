"""``lucid.backends.mkldnn`` (``torch.backends.mkldnn``): oneDNN, which lucid does not use (its
convolutions are NumPy/BLAS). The flags can be read and set, without effect."""
from __future__ import annotations

enabled = True
deterministic = False
allow_tf32 = True


def is_available() -> bool:
    """False: lucid has no oneDNN kernels."""
    return False
