"""Block masks shared by ``WeightNormSparsifier`` and ``DataNormSparsifier``.

NOTE [Block masks]
A 2-D score tensor (``|w|`` or ``w * w``) of shape ``(h, w)`` is cut into blocks of
``block_shape = (bh, bw)`` starting at index 0; the last row/column of blocks is padded to
full size. The blocks are numbered row-major (PyTorch's ``unfold``/``avg_pool2d`` order).
- The *tensor-level* mask zeroes the ``k`` whole blocks of smallest mean score, the mean
  taken over the block's real (unpadded) entries as PyTorch's ``avg_pool2d(ceil_mode=True)``.
- The *block-level* mask zeroes, inside every block, its ``zeros_per_block`` smallest
  entries; padding is NaN, which sorts above every number, so it is chosen last.
PyTorch builds both with ``scatter_`` and ``fold``; here the blocks are a reshape/permute of
the padded tensor, so both masks are a few Lucid ops on the scores' device, cropped back to
``(h, w)``.
"""
from __future__ import annotations


def _lucid():
    import lucid

    return lucid


def _padded_shape(shape, block_shape):
    (h, w), (bh, bw) = shape, block_shape
    return -(-h // bh) * bh, -(-w // bw) * bw


def to_blocks(x, block_shape, fill):
    """``(h, w) -> (n_blocks, bh * bw)``: ``x`` padded with ``fill``, one row per block."""
    lucid = _lucid()
    (bh, bw), (H, W) = block_shape, _padded_shape(tuple(x.shape), block_shape)
    padded = lucid.full((H, W), fill, dtype=x.dtype, device=x.device)
    padded[: x.shape[0], : x.shape[1]] = x
    return padded.reshape(H // bh, bh, W // bw, bw).permute(0, 2, 1, 3).reshape(-1, bh * bw)


def from_blocks(blocks, shape, block_shape):
    """The inverse of :func:`to_blocks`, cropped to ``shape``."""
    (bh, bw), (H, W) = block_shape, _padded_shape(shape, block_shape)
    full = blocks.reshape(H // bh, W // bw, bh, bw).permute(0, 2, 1, 3).reshape(H, W)
    return full[: shape[0], : shape[1]].contiguous()


def block_means(scores, block_shape):
    """The mean score of each block over its real entries, shape ``(n_blocks,)``."""
    sums = to_blocks(scores, block_shape, 0).sum(dim=1)
    counts = to_blocks(_lucid().ones_like(scores), block_shape, 0).sum(dim=1)
    return sums / counts


def smallest(values, k, dim, use_sort):
    """Indices of the ``k`` smallest entries along ``dim`` (``topk`` as WeightNormSparsifier
    does, or the head of a stable ``sort`` as DataNormSparsifier does; NaN counts as largest)."""
    lucid = _lucid()
    if use_sort:
        return lucid.sort(values, dim=dim, stable=True).indices.narrow(dim, 0, k)
    return lucid.topk(values, k, dim=dim, largest=False).indices


def tensor_level_mask(scores, n_zero_blocks, block_shape, dtype=None, use_sort=False):
    """Ones, with the ``n_zero_blocks`` blocks of smallest mean score zeroed (NOTE [Block masks])."""
    lucid = _lucid()
    means = block_means(scores, block_shape)
    keep = lucid.ones(means.shape[0], dtype=dtype, device=scores.device)
    if n_zero_blocks > 0:
        keep[smallest(means, n_zero_blocks, 0, use_sort)] = 0
    per_entry = keep[:, None].expand(means.shape[0], block_shape[0] * block_shape[1])
    return from_blocks(per_entry, tuple(scores.shape), block_shape)


def block_level_mask(scores, zeros_per_block, block_shape, dtype=None, use_sort=False):
    """Ones, with the ``zeros_per_block`` smallest entries of every block zeroed (NOTE [Block masks])."""
    lucid = _lucid()
    blocks = to_blocks(scores, block_shape, float("nan"))
    mask = lucid.ones(blocks.shape, dtype=dtype, device=scores.device)
    if zeros_per_block > 0:
        mask.scatter_(1, smallest(blocks, zeros_per_block, 1, use_sort), 0)
    return from_blocks(mask, tuple(scores.shape), block_shape)
