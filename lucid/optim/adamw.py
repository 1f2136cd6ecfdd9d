"""``lucid.optim.adamw`` (``torch.optim.adamw``): :class:`AdamW` and its functional form :func:`adamw`.

Examples
--------
>>> import lucid
>>> from lucid.optim.adamw import AdamW, adamw
>>> AdamW is lucid.optim.AdamW
True
"""
from __future__ import annotations

from ._functional_form import functional_step
from .adam import Adam, AdamW  # noqa: F401  (torch.optim.adamw has Adam too)

__all__ = ["AdamW", "adamw"]


def adamw(params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, state_steps, foreach=None, capturable=False,
          differentiable=False, fused=None, grad_scale=None, found_inf=None, has_complex=False, *, amsgrad,
          beta1, beta2, lr, weight_decay, eps, maximize):
    """One AdamW step on caller-held state (PyTorch's ``torch.optim.adamw.adamw``).

    ``params``, the moment buffers and ``state_steps`` (one-element Tensors) change in place;
    the update is :class:`AdamW`'s (NOTE [Functional optimizer forms]).

    Examples
    --------
    >>> import lucid
    >>> from lucid.optim.adamw import adamw
    >>> p = lucid.tensor([1.0], dtype=lucid.float64); g = lucid.tensor([2.0], dtype=lucid.float64)
    >>> m, v, step = lucid.zeros_like(p), lucid.zeros_like(p), lucid.tensor(0.0)
    >>> adamw([p], [g], [m], [v], [], [step], amsgrad=False, beta1=0.9, beta2=0.999, lr=0.1,
    ...       weight_decay=0.0, eps=1e-8, maximize=False)
    >>> round(p.item(), 6), step.item()
    (0.9, 1.0)
    """
    if grad_scale is not None or found_inf is not None:
        raise NotImplementedError("adamw: grad_scale/found_inf (fused AMP steps) are not supported")
    buffers = dict(exp_avg=exp_avgs, exp_avg_sq=exp_avg_sqs, max_exp_avg_sq=max_exp_avg_sqs if amsgrad else None)
    functional_step(AdamW, "adamw", dict(lr=lr, betas=(beta1, beta2), eps=eps, weight_decay=weight_decay,
                                         amsgrad=amsgrad, differentiable=differentiable),
                    params, grads, buffers, {}, state_steps, maximize)
