"""Per-coordinate adaptive methods: RMSprop, Adagrad, Adadelta (PyTorch's formulas)."""
from __future__ import annotations

from .._core import backend
from .optimizer import Optimizer, _decay_add, _ops, _real_view, _store_state, _sub, check_options


class RMSprop(Optimizer):
    """RMSprop: ``s = a s + (1-a) g^2``; ``p -= lr g / (sqrt(s) + eps)`` (centered, momentum optional).

    Parameters
    ----------
    params : iterable of Tensor or dict
        Parameters or parameter groups.
    lr : float
        Learning rate.
    alpha : float
        Decay of the squared-gradient average.
    eps : float
        Added to the denominator.
    weight_decay : float
        L2 penalty.
    momentum : float
        Momentum factor.
    centered : bool
        Normalise by the gradient's estimated variance instead.

    Examples
    --------
    >>> import lucid
    >>> w = lucid.tensor([1.0, -1.0], dtype=lucid.float64, requires_grad=True)
    >>> opt = lucid.optim.RMSprop([w], lr=0.01)
    >>> (w * w).sum().backward(); opt.step()
    >>> [round(v, 2) for v in w.tolist()]
    [0.9, -0.9]
    """

    def __init__(self, params, lr=1e-2, alpha=0.99, eps=1e-8, weight_decay=0, momentum=0,
                 centered=False, capturable=False, foreach=None, maximize=False, differentiable=False):
        check_options("RMSprop", lr=lr, alpha=alpha, eps=eps, weight_decay=weight_decay, momentum=momentum)
        super().__init__(params, dict(lr=lr, alpha=alpha, eps=eps, weight_decay=weight_decay,
                                      momentum=momentum, centered=centered,
                                      maximize=maximize, foreach=foreach, capturable=capturable,
                                      differentiable=differentiable))

    def _update(self, p, g, state, group):
        a, eps, wd, mu = group["alpha"], group["eps"], group["weight_decay"], group["momentum"]
        if wd:
            g = g + wd * p
        if "step" not in state:
            state.update(step=0, square_avg=_ops(p).zeros_like(p))
            if mu > 0:
                state["momentum_buffer"] = _ops(p).zeros_like(p)
            if group["centered"]:
                state["grad_avg"] = _ops(p).zeros_like(p)
        state["step"] += 1
        s = _decay_add(state, "square_avg", a, (1 - a) * g * g)
        if group["centered"]:
            ga = _decay_add(state, "grad_avg", a, (1 - a) * g)
            avg = _ops(p).sqrt(s - ga * ga) + eps
        else:
            avg = _ops(p).sqrt(s) + eps
        if mu > 0:
            buf = _decay_add(state, "momentum_buffer", mu, g / avg)
            return _sub(p, group["lr"] * buf)
        return _sub(p, group["lr"] * g / avg)


class Adagrad(Optimizer):
    """Adagrad: ``S += g^2``; ``p -= lr / (1 + (t-1) lr_decay) * g / (sqrt(S) + eps)``.

    Parameters
    ----------
    params : iterable of Tensor or dict
        Parameters or parameter groups.
    lr : float
        Learning rate.
    lr_decay : float
        Learning-rate decay per step.
    weight_decay : float
        L2 penalty.
    initial_accumulator_value : float
        Start of the squared-gradient sum.
    eps : float
        Added to the denominator.

    Examples
    --------
    >>> import lucid
    >>> w = lucid.tensor([1.0, -1.0], dtype=lucid.float64, requires_grad=True)
    >>> opt = lucid.optim.Adagrad([w], lr=0.1)
    >>> (w * w).sum().backward(); opt.step()
    >>> [round(v, 4) for v in w.tolist()]
    [0.9, -0.9]
    """

    _takes_sparse = True  # entries a sparse gradient lacks change neither the sum nor the parameter

    def __init__(self, params, lr=1e-2, lr_decay=0, weight_decay=0, initial_accumulator_value=0,
                 eps=1e-10, foreach=None, *, maximize=False, differentiable=False, fused=None):
        check_options("Adagrad", lr=lr, lr_decay=lr_decay, weight_decay=weight_decay,
                      initial_accumulator_value=initial_accumulator_value, eps=eps)
        super().__init__(params, dict(lr=lr, lr_decay=lr_decay, weight_decay=weight_decay,
                                      initial_accumulator_value=initial_accumulator_value, eps=eps,
                                      maximize=maximize, foreach=foreach, differentiable=differentiable,
                                      fused=fused))
        # PyTorch makes the state of the constructor's parameters at once (so it is in
        # state_dict before the first step); parameters added later get it on their first step
        for group in self.param_groups:
            for p in group["params"]:
                with backend.on_device(p):
                    arrays = {}
                    self._init_state(arrays, _real_view(p._data), group)
                    _store_state(p, self.state[p], arrays, {})

    @staticmethod
    def _init_state(state, p, group):
        state.update(step=0, sum=_ops(p).full_like(p, group["initial_accumulator_value"]))

    def _update(self, p, g, state, group):
        if "step" not in state:
            self._init_state(state, p, group)
        state["step"] += 1
        if group["weight_decay"]:
            g = g + group["weight_decay"] * p
        clr = group["lr"] / (1 + (state["step"] - 1) * group["lr_decay"])
        _decay_add(state, "sum", 1, g * g)
        return _sub(p, clr * g / (_ops(p).sqrt(state["sum"]) + group["eps"]))


class Adadelta(Optimizer):
    """Adadelta: ``d = sqrt(acc_delta + eps) / sqrt(s + eps) * g``; ``p -= lr * d``.

    Parameters
    ----------
    params : iterable of Tensor or dict
        Parameters or parameter groups.
    lr : float
        Learning rate.
    rho : float
        Decay of the running averages.
    eps : float
        Added inside the roots.
    weight_decay : float
        L2 penalty.

    Examples
    --------
    >>> import lucid
    >>> w = lucid.tensor([1.0, -1.0], dtype=lucid.float64, requires_grad=True)
    >>> opt = lucid.optim.Adadelta([w])
    >>> (w * w).sum().backward(); opt.step()
    >>> w.tolist()[0] < 1.0
    True
    """

    def __init__(self, params, lr=1.0, rho=0.9, eps=1e-6, weight_decay=0, foreach=None, *, capturable=False,
                 maximize=False, differentiable=False):
        check_options("Adadelta", lr=lr, eps=eps, weight_decay=weight_decay)
        if not 0 <= rho <= 1:
            raise ValueError(f"Adadelta: invalid rho {rho!r} (expected a number in [0, 1])")
        super().__init__(params, dict(lr=lr, rho=rho, eps=eps, weight_decay=weight_decay,
                                      maximize=maximize, foreach=foreach, capturable=capturable,
                                      differentiable=differentiable))

    def _update(self, p, g, state, group):
        rho, eps = group["rho"], group["eps"]
        if group["weight_decay"]:
            g = g + group["weight_decay"] * p
        if "step" not in state:
            state.update(step=0, square_avg=_ops(p).zeros_like(p), acc_delta=_ops(p).zeros_like(p))
        state["step"] += 1
        s = _decay_add(state, "square_avg", rho, (1 - rho) * g * g)
        delta = _ops(p).sqrt(state["acc_delta"] + eps) / _ops(p).sqrt(s + eps) * g
        _decay_add(state, "acc_delta", rho, (1 - rho) * delta * delta)
        return _sub(p, group["lr"] * delta)
