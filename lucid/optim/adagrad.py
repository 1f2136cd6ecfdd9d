"""``lucid.optim.adagrad`` (``torch.optim.adagrad``): :class:`Adagrad` and its functional form :func:`adagrad`.

Examples
--------
>>> import lucid
>>> from lucid.optim.adagrad import Adagrad
>>> Adagrad is lucid.optim.Adagrad
True
"""
from __future__ import annotations

from ._functional_form import functional_step
from .adaptive import Adagrad

__all__ = ["Adagrad", "adagrad"]


def adagrad(params, grads, state_sums, state_steps, fused=None, grad_scale=None, found_inf=None,
            has_sparse_grad=False, foreach=None, differentiable=False, has_complex=False, *, lr, weight_decay,
            lr_decay, eps, maximize):
    """One Adagrad step on caller-held state (``torch.optim.adagrad.adagrad``); the rule is :class:`Adagrad`'s.

    Examples
    --------
    >>> import lucid
    >>> from lucid.optim.adagrad import adagrad
    >>> p = lucid.tensor([1.0], dtype=lucid.float64); g = lucid.tensor([2.0], dtype=lucid.float64)
    >>> s, step = lucid.zeros_like(p), lucid.tensor(0.0)
    >>> adagrad([p], [g], [s], [step], lr=0.1, weight_decay=0.0, lr_decay=0.0, eps=1e-10, maximize=False)
    >>> round(p.item(), 6), s.item()
    (0.9, 4.0)
    """
    if grad_scale is not None or found_inf is not None:
        raise NotImplementedError("adagrad: grad_scale/found_inf (fused AMP steps) are not supported")
    functional_step(Adagrad, "adagrad", dict(lr=lr, lr_decay=lr_decay, weight_decay=weight_decay, eps=eps,
                                             differentiable=differentiable),
                    params, grads, dict(sum=state_sums), {}, state_steps, maximize)
