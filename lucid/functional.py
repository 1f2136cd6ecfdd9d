"""``lucid.functional`` (``torch.functional``): the functions PyTorch defines in Python.

Every name is Lucid's own function (``lucid.functional.einsum is lucid.einsum``).

Examples
--------
>>> import lucid
>>> from lucid.functional import broadcast_shapes
>>> tuple(broadcast_shapes((2, 1), (3,)))
(2, 3)
"""
from __future__ import annotations

from ._core.tensor import Tensor  # noqa: F401  (torch.functional has it too)

__all__ = ["atleast_1d", "atleast_2d", "atleast_3d", "block_diag", "broadcast_shapes", "broadcast_tensors",
           "cartesian_prod", "cdist", "chain_matmul", "einsum", "istft", "lu", "meshgrid", "norm", "pca_lowrank",
           "split", "stft", "svd_lowrank", "tensordot", "unique", "unique_consecutive", "unravel_index"]


def __getattr__(name):
    # looked up in ``lucid`` on each access, not copied at import: a test harness (the strict
    # device's checks) or a user may rebind ``lucid.einsum``, and this module names the same object
    if name in __all__:
        import lucid

        return getattr(lucid, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(__all__))
