"""``lucid.optim.nadam`` (``torch.optim.nadam``): :class:`NAdam` and its functional form :func:`nadam`.

Examples
--------
>>> import lucid
>>> from lucid.optim.nadam import NAdam
>>> NAdam is lucid.optim.NAdam
True
"""
from __future__ import annotations

from ._functional_form import functional_step
from .adam import NAdam

__all__ = ["NAdam", "nadam"]


def nadam(params, grads, exp_avgs, exp_avg_sqs, mu_products, state_steps, decoupled_weight_decay=False,
          foreach=None, capturable=False, differentiable=False, has_complex=False, maximize=False, *, beta1, beta2,
          lr, weight_decay, momentum_decay, eps):
    """One NAdam step on caller-held state (``torch.optim.nadam.nadam``); ``mu_products`` are
    one-element Tensors (start at 1), changed in place. The rule is :class:`NAdam`'s.

    Examples
    --------
    >>> import lucid
    >>> from lucid.optim.nadam import nadam
    >>> p = lucid.tensor([1.0], dtype=lucid.float64); g = lucid.tensor([2.0], dtype=lucid.float64)
    >>> m, v, mu, step = lucid.zeros_like(p), lucid.zeros_like(p), lucid.tensor(1.0), lucid.tensor(0.0)
    >>> nadam([p], [g], [m], [v], [mu], [step], beta1=0.9, beta2=0.999, lr=0.1, weight_decay=0.0,
    ...       momentum_decay=4e-3, eps=1e-8)
    >>> p.item() < 1.0
    True
    """
    functional_step(NAdam, "nadam", dict(lr=lr, betas=(beta1, beta2), eps=eps, weight_decay=weight_decay,
                                         momentum_decay=momentum_decay, decoupled_weight_decay=decoupled_weight_decay,
                                         differentiable=differentiable),
                    params, grads, dict(exp_avg=exp_avgs, exp_avg_sq=exp_avg_sqs), dict(mu_product=mu_products),
                    state_steps, maximize)
