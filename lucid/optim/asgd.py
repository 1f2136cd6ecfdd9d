"""``lucid.optim.asgd`` (``torch.optim.asgd``): :class:`ASGD` and its functional form :func:`asgd`.

Examples
--------
>>> import lucid
>>> from lucid.optim.asgd import ASGD
>>> ASGD is lucid.optim.ASGD
True
"""
from __future__ import annotations

from ._functional_form import functional_step
from .classic import ASGD

__all__ = ["ASGD", "asgd"]


def asgd(params, grads, axs, mus, etas, state_steps, foreach=None, maximize=False, differentiable=False,
         capturable=False, has_complex=False, *, lambd, lr, t0, alpha, weight_decay):
    """One ASGD step on caller-held state (``torch.optim.asgd.asgd``): ``axs`` (averages),
    ``mus``/``etas`` (one-element Tensors; start at 1 and ``lr``) change in place. The rule is :class:`ASGD`'s.

    Examples
    --------
    >>> import lucid
    >>> from lucid.optim.asgd import asgd
    >>> p = lucid.tensor([1.0], dtype=lucid.float64); g = lucid.tensor([2.0], dtype=lucid.float64)
    >>> ax, mu, eta, step = lucid.zeros_like(p), lucid.tensor(1.0), lucid.tensor(0.1), lucid.tensor(0.0)
    >>> asgd([p], [g], [ax], [mu], [eta], [step], lambd=0.0, lr=0.1, t0=1e6, alpha=0.75, weight_decay=0.0)
    >>> round(p.item(), 6), round(ax.item(), 6)
    (0.8, 0.8)
    """
    functional_step(ASGD, "asgd", dict(lr=lr, lambd=lambd, alpha=alpha, t0=t0, weight_decay=weight_decay,
                                       differentiable=differentiable),
                    params, grads, dict(ax=axs), dict(mu=mus, eta=etas), state_steps, maximize)
