"""``FPGMPruner`` (PyTorch's ``torch.ao.pruning._experimental.pruner.FPGMPruner``): Filter
Pruning via Geometric Median (He et al., arXiv:1811.00250)."""
from __future__ import annotations

from .base_structured_sparsifier import BaseStructuredSparsifier

__all__ = ["FPGMPruner"]


def _cdist(p):
    def dist(x):
        import lucid

        return lucid.cdist(x, x, p=p)

    return dist


class FPGMPruner(BaseStructuredSparsifier):
    """Prune the ``sparsity_level`` fraction of filters (rows) closest to the others: the
    rows of smallest summed distance to all rows (the most replaceable, near the geometric
    median), rather than those of smallest norm.

    Parameters
    ----------
    sparsity_level : float
        Fraction of rows pruned, ``round(level * rows)``.
    dist : {1, 2} or callable, optional
        ``cdist`` with ``p=1`` or ``p=2`` (default), or ``dist(rows) -> (n, n)`` distances.

    Examples
    --------
    >>> import lucid, lucid.nn as nn
    >>> from lucid.ao.pruning._experimental.pruner import FPGMPruner
    >>> conv = nn.Conv2d(1, 3, 3, padding=1, bias=False)
    >>> with lucid.no_grad():
    ...     _ = conv.weight.copy_(lucid.tensor([3.0, 2.0, 0.1]).reshape(3, 1, 1, 1).expand(3, 1, 3, 3))
    >>> model = nn.Sequential(conv)
    >>> pruner = FPGMPruner(sparsity_level=1 / 3)
    >>> pruner.prepare(model, None)
    >>> pruner.step()
    >>> model[0].parametrizations.weight[0].mask
    tensor([ True, False,  True])
    """

    def __init__(self, sparsity_level=0.5, dist=None):
        if dist is None:
            dist = 2
        if callable(dist):
            self.dist_fn = dist
        elif dist in (1, 2):
            self.dist_fn = _cdist(dist)
        else:
            raise NotImplementedError(f"FPGMPruner: distance function {dist!r} is not yet implemented.")
        super().__init__(defaults={"sparsity_level": sparsity_level})

    def _compute_distance(self, t):
        """The summed distance of each row (filter) of ``t`` to all rows."""
        return self.dist_fn(t.reshape(t.shape[0], -1)).abs().sum(dim=1)

    def update_mask(self, module, tensor_name, sparsity_level, **kwargs):
        import lucid

        weight = getattr(module, tensor_name)
        mask = module.parametrizations[tensor_name][0].mask
        if sparsity_level <= 0:
            mask.data = lucid.ones_like(mask).bool()
        elif sparsity_level >= 1.0:
            mask.data = lucid.zeros_like(mask).bool()
        else:
            rows = weight.shape[0]
            k = min(max(round(sparsity_level * rows), 0), rows)
            if k:
                mask[lucid.topk(self._compute_distance(weight), k, largest=False).indices] = False
