"""``lucid.optim.rprop`` (``torch.optim.rprop``): :class:`Rprop` and its functional form :func:`rprop`.

Examples
--------
>>> import lucid
>>> from lucid.optim.rprop import Rprop
>>> Rprop is lucid.optim.Rprop
True
"""
from __future__ import annotations

from ._functional_form import functional_step
from .classic import Rprop

__all__ = ["Rprop", "rprop"]


def rprop(params, grads, prevs, step_sizes, state_steps, foreach=None, capturable=False, maximize=False,
          differentiable=False, has_complex=False, *, step_size_min, step_size_max, etaminus, etaplus):
    """One Rprop step on caller-held state (``torch.optim.rprop.rprop``): ``prevs`` (last
    gradients) and ``step_sizes`` (start at ``lr``) change in place. The rule is :class:`Rprop`'s.

    Examples
    --------
    >>> import lucid
    >>> from lucid.optim.rprop import rprop
    >>> p = lucid.tensor([1.0], dtype=lucid.float64); g = lucid.tensor([2.0], dtype=lucid.float64)
    >>> prev, size, step = lucid.zeros_like(p), lucid.full_like(p, 0.1), lucid.tensor(0.0)
    >>> rprop([p], [g], [prev], [size], [step], step_size_min=1e-6, step_size_max=50.0, etaminus=0.5,
    ...       etaplus=1.2)
    >>> round(p.item(), 6), prev.item()
    (0.9, 2.0)
    """
    functional_step(Rprop, "rprop", dict(etas=(etaminus, etaplus), step_sizes=(step_size_min, step_size_max),
                                         differentiable=differentiable),
                    params, grads, dict(prev=prevs, step_size=step_sizes), {}, state_steps, maximize)
