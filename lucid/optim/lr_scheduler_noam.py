"""``NoamScheduler``: the Transformer schedule of "Attention Is All You Need", from upstream
Lucid 3 (See NOTE [Lucid 3 names]); PyTorch has no such class."""
from __future__ import annotations

from .lr_scheduler import LRScheduler


class NoamScheduler(LRScheduler):
    """``lr = d_model ** -0.5 * min(s ** -0.5, s * warmup_steps ** -1.5)`` with ``s = max(1, epoch)``.

    The rate rises linearly for ``warmup_steps`` steps, then decays as ``1 / sqrt(step)``. As in
    Lucid 3 it replaces the optimizer's lr (it does not scale it). Unlike Lucid 3, whose
    constructor leaves the lr alone until the first ``step()``, it writes the step-0 value at
    construction, as every PyTorch scheduler does; from the first ``step()`` on both agree.

    Parameters
    ----------
    optimizer : Optimizer
        Whose learning rates are scheduled.
    d_model : int
        Model width (the rate scales with ``d_model ** -0.5``).
    warmup_steps : int
        Steps of linear warm-up; the peak rate is at ``step == warmup_steps``.
    last_epoch : int
        The index of the last epoch (-1: start fresh).

    Examples
    --------
    >>> import lucid
    >>> opt = lucid.optim.SGD([lucid.zeros(1, requires_grad=True)], lr=1.0)
    >>> sched = lucid.optim.lr_scheduler.NoamScheduler(opt, d_model=4, warmup_steps=4)
    >>> lrs = []
    >>> for _ in range(6):
    ...     opt.step(); sched.step(); lrs.append(round(sched.get_last_lr()[0], 4))
    >>> lrs
    [0.0625, 0.125, 0.1875, 0.25, 0.2236, 0.2041]
    """

    def __init__(self, optimizer, d_model, warmup_steps, last_epoch=-1):
        if warmup_steps <= 0 or d_model <= 0:
            raise ValueError(f"NoamScheduler: d_model and warmup_steps must be positive, got d_model={d_model}, "
                             f"warmup_steps={warmup_steps}")
        self.d_model, self.warmup_steps = d_model, warmup_steps
        super().__init__(optimizer, last_epoch)

    def _lr_at(self, epoch, base, i):
        s = max(1, epoch)
        return self.d_model ** -0.5 * min(s ** -0.5, s * self.warmup_steps ** -1.5)
