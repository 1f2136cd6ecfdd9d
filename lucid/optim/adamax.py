"""``lucid.optim.adamax`` (``torch.optim.adamax``): :class:`Adamax` and its functional form :func:`adamax`.

Examples
--------
>>> import lucid
>>> from lucid.optim.adamax import Adamax
>>> Adamax is lucid.optim.Adamax
True
"""
from __future__ import annotations

from ._functional_form import functional_step
from .adam import Adamax

__all__ = ["Adamax", "adamax"]


def adamax(params, grads, exp_avgs, exp_infs, state_steps, foreach=None, maximize=False, differentiable=False,
           capturable=False, has_complex=False, *, eps, beta1, beta2, lr, weight_decay):
    """One Adamax step on caller-held state (``torch.optim.adamax.adamax``); the rule is
    :class:`Adamax`'s (NOTE [Functional optimizer forms]).

    Examples
    --------
    >>> import lucid
    >>> from lucid.optim.adamax import adamax
    >>> p = lucid.tensor([1.0], dtype=lucid.float64); g = lucid.tensor([2.0], dtype=lucid.float64)
    >>> m, u, step = lucid.zeros_like(p), lucid.zeros_like(p), lucid.tensor(0.0)
    >>> adamax([p], [g], [m], [u], [step], eps=1e-8, beta1=0.9, beta2=0.999, lr=0.1, weight_decay=0.0)
    >>> round(p.item(), 6)
    0.9
    """
    functional_step(Adamax, "adamax", dict(lr=lr, betas=(beta1, beta2), eps=eps, weight_decay=weight_decay,
                                           differentiable=differentiable),
                    params, grads, dict(exp_avg=exp_avgs, exp_inf=exp_infs), {}, state_steps, maximize)
