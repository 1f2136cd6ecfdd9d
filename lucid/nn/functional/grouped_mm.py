"""``grouped_mm``: the grouped (jagged) matrix product of Mixture-of-Experts layers.

A composite: every group's product is taken over the whole operand and a mask keeps, for each
output element, the one group it belongs to. That costs ``G`` times the FLOPs of one product
(fine on the CPU for the small expert counts it is used with here) and gives gradients, jvp and
vmap through ``matmul`` and ``where``.
"""
from __future__ import annotations

__all__ = ["grouped_mm"]


def _lucid():
    import lucid

    return lucid


def _group_mask(offs, n):
    """(G, n) bool: position ``i`` is in group ``g`` iff ``offs[g-1] <= i < offs[g]`` (``offs[-1]``
    = 0). Positions from ``offs[-1]`` on are in no group."""
    lucid = _lucid()
    ends = offs.unsqueeze(-1)
    starts = lucid.cat([offs[:1] * 0, offs[:-1]]).unsqueeze(-1)  # an op, not zeros_like: runs inside vmap
    pos = lucid.arange(n, device=offs.device)
    return (pos >= starts) & (pos < ends)


def _check(mat_a, mat_b, offs, bias):
    lucid = _lucid()
    if not isinstance(mat_a, lucid.Tensor) or not isinstance(mat_b, lucid.Tensor):
        raise TypeError("grouped_mm: mat_a and mat_b must be Tensors")
    if mat_a.ndim not in (2, 3) or mat_b.ndim not in (2, 3):
        raise RuntimeError(f"grouped_mm: mat_a and mat_b must be 2-D or 3-D, got shapes {tuple(mat_a.shape)} "
                           f"and {tuple(mat_b.shape)}")
    if mat_a.dtype != mat_b.dtype or not mat_a.is_floating_point():
        raise RuntimeError(f"grouped_mm: expected mat_a and mat_b of one floating dtype, got {mat_a.dtype} and "
                           f"{mat_b.dtype}")
    if (offs is None) != (mat_a.ndim == 3 and mat_b.ndim == 3):
        raise RuntimeError("grouped_mm: have to provide offsets if there is a 2d matrix, or no offset if both "
                           "matrices are 3d")
    if offs is not None and (offs.ndim != 1 or offs.is_floating_point() or offs.dtype == lucid.bool
                             or offs.is_complex()):
        raise RuntimeError(f"grouped_mm: offs must be a 1-D integer tensor, got {offs.dtype} of shape "
                           f"{tuple(offs.shape)}")
    if bias is not None:
        raise RuntimeError("grouped_mm: bias is not supported (as in PyTorch's kernels)")
    k_a = mat_a.shape[-1]
    k_b = mat_b.shape[-2] if mat_b.ndim == 3 else mat_b.shape[0]
    if k_a != k_b:
        raise RuntimeError(f"grouped_mm: contraction dimension of mat_a and mat_b must match, got shapes "
                           f"{tuple(mat_a.shape)} and {tuple(mat_b.shape)}")
    groups = [t.shape[0] for t in (mat_a, mat_b) if t.ndim == 3] + ([offs.shape[0]] if offs is not None else [])
    if len(set(groups)) > 1:
        raise RuntimeError(f"grouped_mm: matrix batch sizes have to match, got shapes {tuple(mat_a.shape)}, "
                           f"{tuple(mat_b.shape)} and {len(groups) and groups[-1]} offsets")


def grouped_mm(mat_a, mat_b, *, offs=None, bias=None, out_dtype=None):
    """Grouped matrix product (PyTorch 2.8+'s ``F.grouped_mm``), one product per group ``g``.

    With ``offs`` (1-D integers, group ``g`` spans ``[offs[g-1], offs[g])``, ``offs[-1]`` = 0):

    * ``mat_a`` (M, K), ``mat_b`` (G, K, N) -> (M, N): rows of ``mat_a`` in group ``g`` times
      ``mat_b[g]`` (the MoE forward, ``tokens @ expert_weight``);
    * ``mat_a`` (G, M, K), ``mat_b`` (K, N) -> (M, N): ``mat_a[g]`` times the columns of
      ``mat_b`` in group ``g``;
    * ``mat_a`` (M, K), ``mat_b`` (K, N) -> (G, M, N): the jagged K is split (the MoE weight
      gradient), ``mat_a[:, group g] @ mat_b[group g]``.

    Without ``offs`` both are 3-D: the batched product ``mat_a @ mat_b``, (G, M, N).

    Parameters
    ----------
    mat_a, mat_b : Tensor
        Operands of one floating dtype (2-D or 3-D, see above).
    offs : Tensor, optional
        Non-decreasing group ends. Rows (columns) from ``offs[-1]`` on belong to no group and
        their outputs are 0 (PyTorch leaves them unwritten).
    bias : None
        Not supported, as in PyTorch's kernels.
    out_dtype : dtype, optional
        The operands are cast to it before the products (PyTorch: accumulate in it).

    Limitations
    -----------
    Every product is computed over the whole operand and masked: ``G`` times the work of one
    matmul. Any integer dtype is accepted for ``offs`` (PyTorch requires int32), and float64
    operands are allowed (PyTorch's kernels take float32/bfloat16/float16).

    Examples
    --------
    >>> import lucid, lucid.nn.functional as F
    >>> a = lucid.ones(3, 2)
    >>> b = lucid.stack([lucid.ones(2, 1), 2 * lucid.ones(2, 1)])
    >>> F.grouped_mm(a, b, offs=lucid.tensor([1, 3], dtype=lucid.int32)).reshape(-1).tolist()
    [2.0, 4.0, 4.0]
    """
    lucid = _lucid()
    _check(mat_a, mat_b, offs, bias)
    if out_dtype is not None:
        mat_a, mat_b = mat_a.to(out_dtype), mat_b.to(out_dtype)
    if offs is None:
        return lucid.matmul(mat_a, mat_b)
    if mat_a.ndim == 2 and mat_b.ndim == 3:
        mask = _group_mask(offs, mat_a.shape[0])  # (G, M): the rows of each group
        return lucid.where(mask.unsqueeze(-1), lucid.matmul(mat_a, mat_b), 0.0).sum(0)
    if mat_a.ndim == 3:
        mask = _group_mask(offs, mat_b.shape[1])  # (G, N): the columns of each group
        return lucid.where(mask.unsqueeze(-2), lucid.matmul(mat_a, mat_b), 0.0).sum(0)
    mask = _group_mask(offs, mat_a.shape[1])  # (G, K): the contraction slice of each group
    return lucid.matmul(lucid.where(mask.unsqueeze(-2), mat_a, 0.0), mat_b)
