"""``LambdaSL`` (PyTorch's ``torch.ao.pruning.LambdaSL``)."""
from __future__ import annotations

import warnings

from .base_scheduler import BaseScheduler, check_sparsifier

__all__ = ["LambdaSL"]


class LambdaSL(BaseScheduler):
    """Set each group's sparsity level to its base level times ``sl_lambda(epoch)`` (one
    function, or one per group).

    Examples
    --------
    >>> import lucid.nn as nn
    >>> from lucid.ao.pruning import LambdaSL, WeightNormSparsifier
    >>> sparsifier = WeightNormSparsifier(sparsity_level=0.8)
    >>> sparsifier.prepare(nn.Sequential(nn.Linear(4, 4)), None)
    >>> scheduler = LambdaSL(sparsifier, sl_lambda=lambda epoch: epoch / 4)
    >>> scheduler.get_last_sl()
    [0.0]
    >>> sparsifier.step(); scheduler.step()
    >>> scheduler.get_last_sl()
    [0.2]
    """

    def __init__(self, sparsifier, sl_lambda, last_epoch=-1, verbose=False):
        check_sparsifier(sparsifier)
        self.sparsifier = sparsifier
        if not isinstance(sl_lambda, (list, tuple)):
            self.sl_lambdas = [sl_lambda] * len(sparsifier.groups)
        else:
            if len(sl_lambda) != len(sparsifier.groups):
                raise ValueError(f"Expected {len(sparsifier.groups)} lr_lambdas, but got {len(sl_lambda)}")
            self.sl_lambdas = list(sl_lambda)
        super().__init__(sparsifier, last_epoch, verbose)

    def get_sl(self):
        if not self._get_sl_called_within_step:
            warnings.warn("To get the last sparsity level computed by the scheduler, please use `get_last_sl()`.",
                          stacklevel=2)
        return [base_sl * fn(self.last_epoch) for fn, base_sl in zip(self.sl_lambdas, self.base_sl)]
