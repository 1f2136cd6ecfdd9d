"""lucid.linalg: linear algebra (inv, det, solve, cholesky, qr, eigh, svd, norms ...)."""
from __future__ import annotations

__all__ = []
