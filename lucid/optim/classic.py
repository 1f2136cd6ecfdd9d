"""Averaged SGD (ASGD) and resilient backpropagation (Rprop), PyTorch's formulas."""
from __future__ import annotations

import numbers

from .optimizer import Optimizer, _ops, _scale, _sub, check_options

_FLAGS_DOC = """    maximize : bool
        Maximise the objective instead.
    foreach, capturable : bool, optional
        Accepted for PyTorch compatibility; no effect (see NOTE [Differentiable steps]).
    differentiable : bool
        Run the update inside the autograd graph (for meta-learning); the parameters must
        then be non-leaf tensors."""


class ASGD(Optimizer):
    """Averaged SGD: ``p *= 1 - lambd * eta``; ``p -= eta * g``; ``ax`` averages ``p`` from step ``t0``.

    After step ``t``, ``eta = lr / (1 + lambd * lr * t) ** alpha`` and ``mu = 1 / max(1, t - t0)``;
    the average is ``ax += mu * (p - ax)`` (a copy of ``p`` while ``mu == 1``) and is kept in
    ``optimizer.state[p]["ax"]``.

    Parameters
    ----------
    params : iterable of Tensor or dict
        Parameters or parameter groups.
    lr : float
        Learning rate.
    lambd : float
        Decay term.
    alpha : float
        Power of the eta update.
    t0 : float
        Step at which averaging starts.
    weight_decay : float
        L2 penalty.
{flags}

    Examples
    --------
    >>> import lucid
    >>> w = lucid.tensor([1.0], dtype=lucid.float64, requires_grad=True)
    >>> opt = lucid.optim.ASGD([w], lr=0.1, lambd=0.0)
    >>> (w * w).sum().backward(); opt.step()
    >>> w.tolist()
    [0.8]
    """

    def __init__(self, params, lr=1e-2, lambd=1e-4, alpha=0.75, t0=1e6, weight_decay=0, foreach=None,
                 maximize=False, differentiable=False, capturable=False):
        check_options("ASGD", lr=lr, lambd=lambd, alpha=alpha, t0=t0, weight_decay=weight_decay)
        super().__init__(params, dict(lr=lr, lambd=lambd, alpha=alpha, t0=t0, weight_decay=weight_decay,
                                      maximize=maximize, foreach=foreach, capturable=capturable,
                                      differentiable=differentiable))

    def _update(self, p, g, state, group):
        lr, lambd, alpha, t0, wd = (group[k] for k in ("lr", "lambd", "alpha", "t0", "weight_decay"))
        if "step" not in state:
            state.update(step=0, eta=lr, mu=1.0, ax=_ops(p).zeros_like(p))
        state["step"] += 1
        if wd:
            g = g + wd * p
        eta = state["eta"]
        p = _sub(_scale(p, 1 - lambd * eta), eta * g)
        ax = state["ax"]
        state["ax"] = ax + (p - ax) * state["mu"] if state["mu"] != 1 else _ops(p).copy(p)
        t = state["step"]
        state["eta"] = lr / ((1 + lambd * lr * t) ** alpha)
        state["mu"] = 1 / max(1, t - t0)
        return p


class Rprop(Optimizer):
    """Rprop: per-coordinate step sizes that grow by ``etas[1]`` while the gradient keeps its
    sign and shrink by ``etas[0]`` when it flips (that step is then skipped); ``p -= sign(g) * step``.

    Parameters
    ----------
    params : iterable of Tensor or dict
        Parameters or parameter groups.
    lr : float
        Initial step size.
    etas : tuple of float
        ``(etaminus, etaplus)``, with ``0 < etaminus < 1 < etaplus``.
    step_sizes : tuple of float
        ``(min, max)`` step size.
{flags}

    Examples
    --------
    >>> import lucid
    >>> w = lucid.tensor([1.0, -1.0], dtype=lucid.float64, requires_grad=True)
    >>> opt = lucid.optim.Rprop([w], lr=0.1)
    >>> (w * w).sum().backward(); opt.step()
    >>> w.tolist()
    [0.9, -0.9]
    """

    def __init__(self, params, lr=1e-2, etas=(0.5, 1.2), step_sizes=(1e-6, 50), *, capturable=False,
                 foreach=None, maximize=False, differentiable=False):
        check_options("Rprop", lr=lr)
        if (not isinstance(etas, (tuple, list)) or len(etas) != 2
                or not all(isinstance(e, numbers.Real) for e in etas) or not 0.0 < etas[0] < 1.0 < etas[1]):
            raise ValueError(f"Rprop: invalid etas {etas!r} (expected 0 < etaminus < 1 < etaplus)")
        if (not isinstance(step_sizes, (tuple, list)) or len(step_sizes) != 2
                or not all(isinstance(e, numbers.Real) for e in step_sizes)
                or not 0.0 <= step_sizes[0] <= step_sizes[1]):
            raise ValueError(f"Rprop: invalid step_sizes {step_sizes!r} (expected 0 <= min <= max)")
        super().__init__(params, dict(lr=lr, etas=tuple(etas), step_sizes=tuple(step_sizes), maximize=maximize,
                                      foreach=foreach, capturable=capturable, differentiable=differentiable))

    def _update(self, p, g, state, group):
        ops = _ops(p)
        (etaminus, etaplus), (smin, smax) = group["etas"], group["step_sizes"]
        if "step" not in state:
            state.update(step=0, prev=ops.zeros_like(p), step_size=ops.full_like(p, group["lr"]))
        state["step"] += 1
        sign = ops.sign(g * state["prev"])
        # (full_like: the factors take the parameter's dtype, not the default one)
        factor = ops.where(sign > 0, ops.full_like(p, etaplus),
                           ops.where(sign < 0, ops.full_like(p, etaminus), ops.full_like(p, 1.0)))
        step_size = state["step_size"] = ops.clip(state["step_size"] * factor, smin, smax)
        g = ops.where(sign < 0, ops.zeros_like(g), g)  # after a sign flip: no step, and no flip next time
        state["prev"] = ops.copy(g)
        return _sub(p, ops.sign(g) * step_size)


for _cls in (ASGD, Rprop):
    if _cls.__doc__:  # (None under python -OO)
        _cls.__doc__ = _cls.__doc__.format(flags=_FLAGS_DOC)
