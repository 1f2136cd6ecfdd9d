"""``NearlyDiagonalSparsifier`` (PyTorch's ``torch.ao.pruning.NearlyDiagonalSparsifier``):
keep a band around the main diagonal."""
from __future__ import annotations

from .base_sparsifier import BaseSparsifier

__all__ = ["NearlyDiagonalSparsifier"]


class NearlyDiagonalSparsifier(BaseSparsifier):
    """Keep the ``nearliness`` diagonals closest to the main one (``|row - col| <=
    nearliness // 2``); ``nearliness`` must be odd, and 0 or less zeroes everything.

    Examples
    --------
    >>> import lucid.nn as nn
    >>> from lucid.ao.pruning import NearlyDiagonalSparsifier
    >>> model = nn.Sequential(nn.Linear(4, 4))
    >>> sparsifier = NearlyDiagonalSparsifier(nearliness=3)
    >>> sparsifier.prepare(model, None)
    >>> sparsifier.step()
    >>> model[0].parametrizations.weight[0].mask
    tensor([[1., 1., 0., 0.],
            [1., 1., 1., 0.],
            [0., 1., 1., 1.],
            [0., 0., 1., 1.]])
    """

    def __init__(self, nearliness=1):
        super().__init__(defaults={"nearliness": nearliness})

    def update_mask(self, module, tensor_name, nearliness, **kwargs):
        import lucid

        mask = module.parametrizations[tensor_name][0].mask
        if nearliness <= 0:
            mask.data = lucid.zeros_like(mask)
            return
        tensor = getattr(module, tensor_name)
        if tensor.ndim != 2:
            raise ValueError(f"NearlyDiagonalSparsifier: only 2-D tensors can be sparsified, got {tensor_name} of "
                             f"shape {tuple(tensor.shape)}")
        height, width = tensor.shape
        if nearliness % 2 == 0:
            raise ValueError(f"NearlyDiagonalSparsifier: nearliness can only be an odd number, got {nearliness}")
        if nearliness // 2 >= min(height, width):
            raise ValueError(f"NearlyDiagonalSparsifier: nearliness cannot be larger than the dimensions of tensor "
                             f"(nearliness {nearliness}, shape {(height, width)})")
        rows = lucid.arange(height, device=mask.device)[:, None]
        cols = lucid.arange(width, device=mask.device)[None, :]
        mask.data = ((rows - cols).abs() <= nearliness // 2).to(dtype=mask.dtype)
