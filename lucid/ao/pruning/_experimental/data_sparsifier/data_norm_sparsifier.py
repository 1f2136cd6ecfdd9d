"""``DataNormSparsifier`` (PyTorch's ``torch.ao.pruning._experimental.data_sparsifier``)."""
from __future__ import annotations

import math

from ...sparsifier._block_masks import block_level_mask, tensor_level_mask
from .base_data_sparsifier import BaseDataSparsifier

__all__ = ["DataNormSparsifier"]


class DataNormSparsifier(BaseDataSparsifier):
    """Zero the ``sparsity_level`` fraction of ``sparse_block_shape`` blocks of smallest L1
    (``|x|``) or L2 (``x * x``) mean; inside each zeroed block only its ``zeros_per_block``
    smallest entries are zeroed (default: all). See NOTE [Block masks].

    The data is squeezed and taken as 2-D (1-D data as one row); more dimensions are refused.
    ``round(sparsity_level * n_blocks)`` blocks are zeroed (all of them at a level of 1).
    Masks are int8, as PyTorch's. Every argument is a default that ``add_data`` may override.

    Examples
    --------
    >>> import lucid
    >>> from lucid.ao.pruning._experimental.data_sparsifier import DataNormSparsifier
    >>> x = lucid.tensor([[4., 3., 1., 2.], [0., 1., 5., 6.]])
    >>> sparsifier = DataNormSparsifier([("x", x)], sparsity_level=0.5, sparse_block_shape=(1, 2))
    >>> sparsifier.step()
    >>> sparsifier.get_mask("x")
    tensor([[1, 1, 0, 0],
            [0, 0, 1, 1]], dtype=lucid.int8)
    """

    def __init__(self, data_list=None, sparsity_level=0.5, sparse_block_shape=(1, 4), zeros_per_block=None,
                 norm="L1"):
        if zeros_per_block is None:
            zeros_per_block = math.prod(sparse_block_shape)
        if norm not in ("L1", "L2"):
            raise AssertionError(f"DataNormSparsifier: only L1 and L2 norm supported at the moment, got {norm!r}")
        self.norm = norm
        super().__init__(data_list=data_list, sparsity_level=sparsity_level, sparse_block_shape=sparse_block_shape,
                         zeros_per_block=zeros_per_block)

    def update_mask(self, name, data, sparsity_level, sparse_block_shape, zeros_per_block, **kwargs):
        import lucid

        block_shape = tuple(sparse_block_shape)
        values_per_block = math.prod(block_shape)
        if zeros_per_block > values_per_block:
            raise ValueError("DataNormSparsifier: number of zeros per block cannot be more than the total number of "
                             f"elements in that block ({zeros_per_block} > {values_per_block})")
        if zeros_per_block < 0:
            raise ValueError(f"DataNormSparsifier: number of zeros per block should be positive, got {zeros_per_block}")
        scores = (data.abs() if self.norm == "L1" else data * data).squeeze()
        if scores.ndim > 2:
            raise ValueError(f"DataNormSparsifier: only supports 2-D data at the moment, got '{name}' of shape "
                             f"{tuple(data.shape)}")
        if scores.ndim < 2:
            scores = scores.reshape(1, -1)
        n_blocks = math.prod(-(-n // b) for n, b in zip(scores.shape, block_shape))
        # PyTorch slices its sorted blocks with round(level * n_blocks): clamped here, so a
        # level below 0 zeroes nothing (PyTorch's negative slice zeroes some) and above 1 all.
        n_zero = max(0, min(n_blocks, round(sparsity_level * n_blocks)))
        data_mask = tensor_level_mask(scores, n_zero, block_shape, dtype=lucid.int8, use_sort=True)
        if zeros_per_block == values_per_block:
            block_mask = lucid.zeros_like(data_mask)
        else:
            block_mask = block_level_mask(scores, zeros_per_block, block_shape, dtype=lucid.int8, use_sort=True)
        mask = self.get_mask(name)
        mask.data = lucid.where(data_mask == 1, data_mask, block_mask).reshape(tuple(mask.shape))
