"""``CubicSL`` (PyTorch's ``torch.ao.pruning.CubicSL``): the gradual pruning schedule of Zhu
and Gupta, "To prune, or not to prune" (arXiv:1710.01878)."""
from __future__ import annotations

import warnings

from .base_scheduler import BaseScheduler, check_sparsifier

__all__ = ["CubicSL"]


def _clamp(x, lo, hi):
    return max(lo, min(hi, x))


class CubicSL(BaseScheduler):
    r"""Move each group's sparsity level from ``init_sl`` (:math:`s_0`) to its base level
    (:math:`s_f`) along

    .. math:: s_t = s_f + (s_0 - s_f) \left(1 - \frac{t - t_0}{n \Delta t}\right)^3,

    clamped to :math:`[s_0, s_f]`; before ``init_t`` the level is ``init_sl``, or 0 when
    ``initially_zero``. Every argument but ``sparsifier`` may be one value or one per group.

    Parameters
    ----------
    sparsifier : BaseSparsifier
    init_sl : float
        Initial level :math:`s_0` (default 0).
    init_t : int
        Step :math:`t_0` at which pruning starts (default 0).
    delta_t : int
        Pruning frequency :math:`\Delta t` (default 10).
    total_t : int
        Number of pruning steps :math:`n` (default 100).
    initially_zero : bool
    last_epoch : int
    verbose : bool

    Examples
    --------
    >>> from lucid.ao.pruning import CubicSL
    >>> CubicSL.sparsity_compute_fn(s_0=0.0, s_f=1.0, t=5, t_0=0, dt=1, n=10)
    0.875
    """

    def __init__(self, sparsifier, init_sl=0.0, init_t=0, delta_t=10, total_t=100, initially_zero=False,
                 last_epoch=-1, verbose=False):
        check_sparsifier(sparsifier)
        self.sparsifier = sparsifier
        self.init_sl = self._make_sure_a_list(init_sl)
        self.init_t = self._make_sure_a_list(init_t)
        self.delta_t = self._make_sure_a_list(delta_t)
        self.total_t = self._make_sure_a_list(total_t)
        self.initially_zero = self._make_sure_a_list(initially_zero)
        super().__init__(sparsifier, last_epoch, verbose)

    @staticmethod
    def sparsity_compute_fn(s_0, s_f, t, t_0, dt, n, initially_zero=False):
        """The sparsity level at step ``t`` (see the class formula)."""
        if initially_zero and t < t_0:
            return 0
        s_t = s_f + (s_0 - s_f) * (1.0 - (t - t_0) / (dt * n)) ** 3
        return _clamp(s_t, s_0, s_f)

    def get_sl(self):
        if not self._get_sl_called_within_step:
            warnings.warn("To get the last sparsity level computed by the scheduler, please use `get_last_sl()`.",
                          stacklevel=2)
        return [self.sparsity_compute_fn(s_0=s_0, s_f=s_f, t=self.last_epoch, t_0=t_0, dt=dt, n=n,
                                         initially_zero=zero)
                for s_0, s_f, t_0, dt, n, zero in zip(self.init_sl, self.base_sl, self.init_t, self.delta_t,
                                                      self.total_t, self.initially_zero)]
