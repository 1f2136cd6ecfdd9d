"""``lucid.optim.radam`` (``torch.optim.radam``): :class:`RAdam` and its functional form :func:`radam`.

Examples
--------
>>> import lucid
>>> from lucid.optim.radam import RAdam
>>> RAdam is lucid.optim.RAdam
True
"""
from __future__ import annotations

from ._functional_form import functional_step
from .adam import RAdam

__all__ = ["RAdam", "radam"]


def radam(params, grads, exp_avgs, exp_avg_sqs, state_steps, decoupled_weight_decay=False, foreach=None,
          differentiable=False, capturable=False, has_complex=False, maximize=False, *, beta1, beta2, lr,
          weight_decay, eps):
    """One RAdam step on caller-held state (``torch.optim.radam.radam``); the rule is :class:`RAdam`'s.

    Examples
    --------
    >>> import lucid
    >>> from lucid.optim.radam import radam
    >>> p = lucid.tensor([1.0], dtype=lucid.float64); g = lucid.tensor([2.0], dtype=lucid.float64)
    >>> m, v, step = lucid.zeros_like(p), lucid.zeros_like(p), lucid.tensor(0.0)
    >>> radam([p], [g], [m], [v], [step], beta1=0.9, beta2=0.999, lr=0.1, weight_decay=0.0, eps=1e-8)
    >>> round(p.item(), 6)  # the first steps are plain momentum SGD: 1 - 0.1 * 2
    0.8
    """
    functional_step(RAdam, "radam", dict(lr=lr, betas=(beta1, beta2), eps=eps, weight_decay=weight_decay,
                                         decoupled_weight_decay=decoupled_weight_decay,
                                         differentiable=differentiable),
                    params, grads, dict(exp_avg=exp_avgs, exp_avg_sq=exp_avg_sqs), {}, state_steps, maximize)
