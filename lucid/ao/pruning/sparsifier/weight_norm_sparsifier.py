"""``WeightNormSparsifier`` (PyTorch's ``torch.ao.pruning.WeightNormSparsifier``): zero the
blocks of smallest norm, and optionally only some entries inside each chosen block."""
from __future__ import annotations

import math

from .base_sparsifier import BaseSparsifier
from ._block_masks import block_level_mask, tensor_level_mask

__all__ = ["WeightNormSparsifier"]


def _lucid():
    import lucid

    return lucid


def _abs(t):
    return t.abs()


def _square(t):
    return t * t


class WeightNormSparsifier(BaseSparsifier):
    """Zero the ``sparsity_level`` fraction of ``sparse_block_shape`` blocks with the smallest
    norm; inside a zeroed block only its ``zeros_per_block`` smallest entries are zeroed
    (default: the whole block). See NOTE [Block masks].

    Parameters
    ----------
    sparsity_level : float
        Fraction of blocks to zero (default 0.5); ``round(level * n_blocks)`` blocks, at most
        ``n_blocks - 1`` unless ``level >= 1`` (then all, as PyTorch).
    sparse_block_shape : tuple of int
        ``(block_rows, block_cols)`` of the 2-D tensor (default ``(1, 4)``).
    zeros_per_block : int, optional
        Entries zeroed in each chosen block (default: all of them).
    norm : {1, 2} or callable, optional
        Entry scores: 1 is ``|w|``, 2 (default) is ``w * w``, or ``norm(w)``; a block's
        score is the mean of its entries'.

    Every argument is a default that a ``prepare`` config entry may override. The mask is
    float (the default dtype) when whole blocks are zeroed and bool when ``zeros_per_block``
    is less than the block size, as PyTorch's.

    Examples
    --------
    >>> import lucid, lucid.nn as nn
    >>> from lucid.ao.pruning import WeightNormSparsifier
    >>> model = nn.Sequential(nn.Linear(4, 2, bias=False))
    >>> with lucid.no_grad():
    ...     _ = model[0].weight.copy_(lucid.tensor([[2., 2., 2., 2.], [0., 1., 1., 1.]]))
    >>> sparsifier = WeightNormSparsifier(sparsity_level=0.25, sparse_block_shape=(1, 2))
    >>> sparsifier.prepare(model, None)
    >>> sparsifier.step()
    >>> model[0].parametrizations.weight[0].mask
    tensor([[1., 1., 1., 1.],
            [0., 0., 1., 1.]])
    """

    def __init__(self, sparsity_level=0.5, sparse_block_shape=(1, 4), zeros_per_block=None, norm=None):
        if zeros_per_block is None:
            zeros_per_block = math.prod(sparse_block_shape)
        if norm is None:
            norm = 2
        if callable(norm):
            self.norm_fn = norm
        elif norm == 1:
            self.norm_fn = _abs
        elif norm == 2:
            self.norm_fn = _square
        else:
            raise NotImplementedError(f"WeightNormSparsifier: L-{norm} is not yet implemented.")
        super().__init__(defaults={"sparsity_level": sparsity_level, "sparse_block_shape": sparse_block_shape,
                                   "zeros_per_block": zeros_per_block})

    def update_mask(self, module, tensor_name, sparsity_level, sparse_block_shape, zeros_per_block, **kwargs):
        values_per_block = math.prod(sparse_block_shape)
        if zeros_per_block > values_per_block:
            raise ValueError("WeightNormSparsifier: number of zeros per block cannot be more than the total number "
                             f"of elements in that block ({zeros_per_block} > {values_per_block})")
        if zeros_per_block < 0:
            raise ValueError(f"WeightNormSparsifier: number of zeros per block should be positive, got "
                             f"{zeros_per_block}")
        lucid = _lucid()
        mask = module.parametrizations[tensor_name][0].mask
        if sparsity_level <= 0 or zeros_per_block == 0:
            mask.data = lucid.ones_like(mask)
            return
        if sparsity_level >= 1.0 and zeros_per_block == values_per_block:
            mask.data = lucid.zeros_like(mask)
            return
        scores = self.norm_fn(getattr(module, tensor_name))
        if scores.ndim != 2:
            raise ValueError(f"WeightNormSparsifier: only 2-D tensors can be sparsified, got {tensor_name} of shape "
                             f"{tuple(scores.shape)} in {type(module).__name__}")
        mask.data = self._new_mask(scores, sparsity_level, tuple(sparse_block_shape), zeros_per_block)

    @staticmethod
    def _new_mask(scores, sparsity_level, block_shape, zeros_per_block):
        lucid = _lucid()
        n_blocks = math.prod(-(-n // b) for n, b in zip(scores.shape, block_shape))
        if sparsity_level >= 1.0:
            tensor_mask = lucid.zeros(tuple(scores.shape), device=scores.device)
        else:  # PyTorch keeps at least one block below a level of 1
            n_zero = max(0, min(n_blocks - 1, round(sparsity_level * n_blocks)))
            tensor_mask = tensor_level_mask(scores, n_zero, block_shape)
        if zeros_per_block == math.prod(block_shape):
            return tensor_mask
        return lucid.logical_or(tensor_mask, block_level_mask(scores, zeros_per_block, block_shape))
