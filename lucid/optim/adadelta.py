"""``lucid.optim.adadelta`` (``torch.optim.adadelta``): :class:`Adadelta` and its functional form :func:`adadelta`.

Examples
--------
>>> import lucid
>>> from lucid.optim.adadelta import Adadelta
>>> Adadelta is lucid.optim.Adadelta
True
"""
from __future__ import annotations

from ._functional_form import functional_step
from .adaptive import Adadelta

__all__ = ["Adadelta", "adadelta"]


def adadelta(params, grads, square_avgs, acc_deltas, state_steps, capturable=False, foreach=None,
             differentiable=False, has_complex=False, *, lr, rho, eps, weight_decay, maximize):
    """One Adadelta step on caller-held state (``torch.optim.adadelta.adadelta``); the rule is :class:`Adadelta`'s.

    Examples
    --------
    >>> import lucid
    >>> from lucid.optim.adadelta import adadelta
    >>> p = lucid.tensor([1.0], dtype=lucid.float64); g = lucid.tensor([2.0], dtype=lucid.float64)
    >>> s, d, step = lucid.zeros_like(p), lucid.zeros_like(p), lucid.tensor(0.0)
    >>> adadelta([p], [g], [s], [d], [step], lr=1.0, rho=0.9, eps=1e-6, weight_decay=0.0, maximize=False)
    >>> p.item() < 1.0
    True
    """
    functional_step(Adadelta, "adadelta", dict(lr=lr, rho=rho, eps=eps, weight_decay=weight_decay,
                                               differentiable=differentiable),
                    params, grads, dict(square_avg=square_avgs, acc_delta=acc_deltas), {}, state_steps, maximize)
