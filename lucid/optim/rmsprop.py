"""``lucid.optim.rmsprop`` (``torch.optim.rmsprop``): :class:`RMSprop` and its functional form :func:`rmsprop`.

Examples
--------
>>> import lucid
>>> from lucid.optim.rmsprop import RMSprop
>>> RMSprop is lucid.optim.RMSprop
True
"""
from __future__ import annotations

from ._functional_form import functional_step
from .adaptive import RMSprop

__all__ = ["RMSprop", "rmsprop"]


def rmsprop(params, grads, square_avgs, grad_avgs, momentum_buffer_list, state_steps, foreach=None, maximize=False,
            differentiable=False, capturable=False, has_complex=False, *, lr, alpha, eps, weight_decay, momentum,
            centered):
    """One RMSprop step on caller-held state (``torch.optim.rmsprop.rmsprop``); ``grad_avgs`` is
    used with ``centered``, ``momentum_buffer_list`` with ``momentum > 0``. The rule is :class:`RMSprop`'s.

    Examples
    --------
    >>> import lucid
    >>> from lucid.optim.rmsprop import rmsprop
    >>> p = lucid.tensor([1.0], dtype=lucid.float64); g = lucid.tensor([2.0], dtype=lucid.float64)
    >>> s, step = lucid.zeros_like(p), lucid.tensor(0.0)
    >>> rmsprop([p], [g], [s], [], [], [step], lr=0.01, alpha=0.99, eps=1e-8, weight_decay=0.0,
    ...         momentum=0.0, centered=False)
    >>> round(p.item(), 4)  # 1 - 0.01 * 2 / sqrt(0.01 * 4)
    0.9
    """
    buffers = dict(square_avg=square_avgs, grad_avg=grad_avgs if centered else None,
                   momentum_buffer=momentum_buffer_list if momentum > 0 else None)
    for name, key in (("grad_avgs", "grad_avg"), ("momentum_buffer_list", "momentum_buffer")):
        if buffers[key] is not None and len(buffers[key]) != len(params):
            raise ValueError(f"rmsprop: {name} must have one buffer per parameter "
                             f"({'centered' if key == 'grad_avg' else 'momentum > 0'}), "
                             f"got {len(buffers[key])} for {len(params)} params")
    functional_step(RMSprop, "rmsprop", dict(lr=lr, alpha=alpha, eps=eps, weight_decay=weight_decay,
                                             momentum=momentum, centered=centered, differentiable=differentiable),
                    params, grads, buffers, {}, state_steps, maximize)
