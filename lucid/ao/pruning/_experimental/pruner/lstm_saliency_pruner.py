"""``LSTMSaliencyPruner`` (PyTorch's ``torch.ao.pruning._experimental.pruner.LSTMSaliencyPruner``)."""
from __future__ import annotations

from .base_structured_sparsifier import BaseStructuredSparsifier
from .parametrization import FakeStructuredSparsity
from .saliency_pruner import row_l1_norms

__all__ = ["LSTMSaliencyPruner"]


class LSTMSaliencyPruner(BaseStructuredSparsifier):
    """Saliency pruning of packed LSTM weights: ``weight_ih_l{k}``/``weight_hh_l{k}`` stack
    the four gates' rows, so each gate loses its own ``int(hidden * sparsity_level)`` rows of
    smallest L1 norm (pruning the stack as one would misalign the gates).

    Examples
    --------
    >>> import lucid, lucid.nn as nn
    >>> from lucid.ao.pruning._experimental.pruner import LSTMSaliencyPruner
    >>> lstm = nn.LSTM(2, 2)
    >>> with lucid.no_grad():
    ...     _ = lstm.weight_ih_l0.copy_(lucid.tensor([[1., 1], [2, 2], [2, 2], [1, 1], [-1, -1], [-2, -2], [-2, -2],
    ...                                               [-1, -1]]))
    >>> pruner = LSTMSaliencyPruner({"sparsity_level": 0.5})
    >>> pruner.prepare(nn.Sequential(lstm), [{"tensor_fqn": "0.weight_ih_l0"}])
    >>> pruner.step()
    >>> lstm.parametrizations.weight_ih_l0[0].mask
    tensor([False,  True,  True, False, False,  True,  True, False])
    """

    def update_mask(self, module, tensor_name, **kwargs):
        import lucid

        weights = getattr(module, tensor_name)
        for p in module.parametrizations[tensor_name]:
            if not isinstance(p, FakeStructuredSparsity):
                continue
            saliency = row_l1_norms(weights, "LSTMSaliencyPruner")
            gate = p.mask.shape[0] // 4
            k = int(gate * kwargs["sparsity_level"])
            for g in range(4):
                if k:
                    smallest = lucid.topk(saliency[g * gate:(g + 1) * gate], k, largest=False).indices
                    p.mask[smallest + g * gate] = False
