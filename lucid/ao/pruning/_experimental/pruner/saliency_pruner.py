"""``SaliencyPruner`` (PyTorch's ``torch.ao.pruning._experimental.pruner.SaliencyPruner``)."""
from __future__ import annotations

from .base_structured_sparsifier import BaseStructuredSparsifier

__all__ = ["SaliencyPruner"]


def row_l1_norms(weights, who):
    if weights.ndim <= 1:
        raise ValueError(f"{who}: structured pruning can only be applied to a 2+dim weight tensor, got shape "
                         f"{tuple(weights.shape)}")
    return weights.abs().sum(dim=tuple(range(1, weights.ndim)))


class SaliencyPruner(BaseStructuredSparsifier):
    """Prune the ``int(rows * sparsity_level)`` rows of smallest L1 norm (saliency); masks
    only lose rows from step to step, as PyTorch's.

    Examples
    --------
    >>> import lucid, lucid.nn as nn
    >>> from lucid.ao.pruning._experimental.pruner import SaliencyPruner
    >>> model = nn.Sequential(nn.Linear(4, 4, bias=False))
    >>> with lucid.no_grad():
    ...     _ = model[0].weight.copy_(lucid.tensor([[1.0], [2.0], [3.0], [4.0]]).expand(4, 4))
    >>> pruner = SaliencyPruner({})
    >>> pruner.prepare(model, [{"tensor_fqn": "0.weight", "sparsity_level": 0.5}])
    >>> pruner.step()
    >>> _ = pruner.prune()
    >>> model[0].weight
    Parameter containing:
    tensor([[3., 3., 3., 3.],
            [4., 4., 4., 4.]], requires_grad=True)
    """

    def update_mask(self, module, tensor_name, **kwargs):
        import lucid

        weights = getattr(module, tensor_name)
        mask = module.parametrizations[tensor_name][0].mask
        saliency = row_l1_norms(weights, "SaliencyPruner")
        if tuple(saliency.shape) != tuple(mask.shape):
            raise AssertionError(f"SaliencyPruner: saliency shape ({tuple(saliency.shape)}) must match mask shape "
                                 f"({tuple(mask.shape)})")
        k = int(mask.shape[0] * kwargs["sparsity_level"])
        if k:
            mask[lucid.topk(saliency, k, largest=False).indices] = False
