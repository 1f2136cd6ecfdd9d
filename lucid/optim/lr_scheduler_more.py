"""More learning-rate schedulers: ConstantLR, PolynomialLR, MultiplicativeLR, CyclicLR and
ChainedScheduler (PyTorch's semantics). Re-exported from ``lucid.optim.lr_scheduler``."""
from __future__ import annotations

import math

from .lr_scheduler import LRScheduler, ReduceLROnPlateau, _current_lrs, _lambdas_load_state_dict, _lambdas_state_dict, _set_lr
from .optimizer import Optimizer


class ConstantLR(LRScheduler):
    """``lr = base_lr * factor`` for the first ``total_iters`` epochs, then ``base_lr``.

    Parameters
    ----------
    optimizer : Optimizer
        Whose learning rates are scheduled.
    factor : float
        Multiplier in ``(0, 1]`` until ``total_iters``.
    total_iters : int
        Number of epochs with the reduced rate.
    last_epoch : int
        The index of the last epoch (-1: start fresh).

    Examples
    --------
    >>> import lucid
    >>> opt = lucid.optim.SGD([lucid.zeros(1, requires_grad=True)], lr=1.0)
    >>> sched = lucid.optim.lr_scheduler.ConstantLR(opt, factor=0.5, total_iters=2)
    >>> lrs = []
    >>> for _ in range(4):
    ...     lrs.append(sched.get_last_lr()[0]); opt.step(); sched.step()
    >>> lrs
    [0.5, 0.5, 1.0, 1.0]
    """

    _chainable = True  # See NOTE [Chainable schedulers]

    def __init__(self, optimizer, factor=1.0 / 3, total_iters=5, last_epoch=-1):
        if not 0 < factor <= 1:
            raise ValueError(f"ConstantLR: constant factor expected to be between 0 and 1, got {factor!r}")
        self.factor, self.total_iters = factor, total_iters
        super().__init__(optimizer, last_epoch)

    def _lr_at(self, epoch, base, i):
        return base * (self.factor if epoch < self.total_iters else 1.0)

    def _recursive_lr(self, e, cur, base, i):  # See NOTE [Chainable schedulers]
        return cur * (1.0 / self.factor) if e == self.total_iters else cur


class PolynomialLR(LRScheduler):
    """``lr = base_lr * (1 - min(epoch, total_iters) / total_iters) ** power``.

    Parameters
    ----------
    optimizer : Optimizer
        Whose learning rates are scheduled.
    total_iters : int
        Epochs until the rate reaches 0.
    power : float
        Power of the polynomial.
    last_epoch : int
        The index of the last epoch (-1: start fresh).

    Examples
    --------
    >>> import lucid
    >>> opt = lucid.optim.SGD([lucid.zeros(1, requires_grad=True)], lr=1.0)
    >>> sched = lucid.optim.lr_scheduler.PolynomialLR(opt, total_iters=4, power=2.0)
    >>> lrs = []
    >>> for _ in range(5):
    ...     lrs.append(sched.get_last_lr()[0]); opt.step(); sched.step()
    >>> lrs
    [1.0, 0.5625, 0.25, 0.0625, 0.0]
    """

    _chainable = True

    def __init__(self, optimizer, total_iters=5, power=1.0, last_epoch=-1):
        if not isinstance(total_iters, int) or total_iters <= 0:
            raise ValueError(f"PolynomialLR: total_iters must be a positive integer, got {total_iters!r}")
        self.total_iters, self.power = total_iters, power
        super().__init__(optimizer, last_epoch)

    def _initial_keeps_lr(self, epoch):  # See NOTE [Initial step]
        return True

    def _lr_at(self, epoch, base, i):
        return base * (1.0 - min(self.total_iters, epoch) / self.total_iters) ** self.power

    def _recursive_lr(self, e, cur, base, i):  # See NOTE [Chainable schedulers]
        if e > self.total_iters:
            return cur
        return cur * ((1.0 - e / self.total_iters) / (1.0 - (e - 1) / self.total_iters)) ** self.power


class MultiplicativeLR(LRScheduler):
    """Each epoch multiplies the current rate by ``lr_lambda(epoch)``.

    Parameters
    ----------
    optimizer : Optimizer
        Whose learning rates are scheduled.
    lr_lambda : callable or list of callables
        ``epoch -> factor`` (one per group).
    last_epoch : int
        The index of the last epoch (-1: start fresh).

    Examples
    --------
    >>> import lucid
    >>> opt = lucid.optim.SGD([lucid.zeros(1, requires_grad=True)], lr=1.0)
    >>> sched = lucid.optim.lr_scheduler.MultiplicativeLR(opt, lambda e: 0.5)
    >>> lrs = []
    >>> for _ in range(3):
    ...     opt.step(); sched.step(); lrs.append(sched.get_last_lr()[0])
    >>> lrs
    [0.5, 0.25, 0.125]
    """

    _chainable = True

    def __init__(self, optimizer, lr_lambda, last_epoch=-1):
        n = len(optimizer.param_groups)
        self.lr_lambdas = list(lr_lambda) if isinstance(lr_lambda, (list, tuple)) else [lr_lambda] * n
        if len(self.lr_lambdas) != n:
            raise ValueError(f"MultiplicativeLR: expected {n} lr_lambdas, got {len(self.lr_lambdas)}")
        super().__init__(optimizer, last_epoch)

    def _initial_keeps_lr(self, epoch):  # See NOTE [Initial step]
        return True

    def _chained_lr(self, e, cur, base, i):
        return cur * self.lr_lambdas[i](e)

    def get_lr(self):
        # step(epoch) (and SequentialLR's switch to it, step(0)) multiplies the current rates by
        # the factor of that epoch, as PyTorch's (it has no closed form)
        return [self._chained_lr(self.last_epoch, g["lr"], None, i) for i, g in enumerate(self.optimizer.param_groups)]

    def state_dict(self):
        return _lambdas_state_dict(self)

    def load_state_dict(self, state_dict):
        _lambdas_load_state_dict(self, state_dict)


def _per_group(name, optimizer, value):
    n = len(optimizer.param_groups)
    if isinstance(value, (list, tuple)):
        if len(value) != n:
            raise ValueError(f"CyclicLR: expected {n} values for {name}, got {len(value)}")
        return list(value)
    return [value] * n


class CyclicLR(LRScheduler):
    """Cycle the rate between ``base_lr`` and ``max_lr`` (Smith's cyclical learning rates),
    stepped once per batch; momentum (or Adam's ``beta1``) cycles the opposite way.

    Parameters
    ----------
    optimizer : Optimizer
        Whose learning rates are scheduled.
    base_lr, max_lr : float or list of float
        Bounds of the cycle (per group).
    step_size_up, step_size_down : int
        Iterations in the rising and falling half (``step_size_down`` defaults to up).
    mode : {'triangular', 'triangular2', 'exp_range'}
        Amplitude policy (ignored when ``scale_fn`` is given).
    gamma : float
        ``exp_range`` decay per iteration.
    scale_fn : callable, optional
        Custom amplitude ``x -> factor``; ``scale_mode`` says whether ``x`` counts cycles
        or iterations.
    scale_mode : {'cycle', 'iterations'}
    cycle_momentum : bool
        Also cycle momentum between ``base_momentum`` and ``max_momentum``.
    base_momentum, max_momentum : float or list of float
    last_epoch : int
        The index of the last batch (-1: start fresh).

    Examples
    --------
    >>> import lucid
    >>> opt = lucid.optim.SGD([lucid.zeros(1, requires_grad=True)], lr=0.1, momentum=0.9)
    >>> sched = lucid.optim.lr_scheduler.CyclicLR(opt, base_lr=0.0, max_lr=1.0, step_size_up=2)
    >>> lrs = []
    >>> for _ in range(5):
    ...     lrs.append(sched.get_last_lr()[0]); opt.step(); sched.step()
    >>> lrs
    [0.0, 0.5, 1.0, 0.5, 0.0]
    """

    def __init__(self, optimizer, base_lr, max_lr, step_size_up=2000, step_size_down=None, mode="triangular",
                 gamma=1.0, scale_fn=None, scale_mode="cycle", cycle_momentum=True, base_momentum=0.8,
                 max_momentum=0.9, last_epoch=-1):
        if not isinstance(optimizer, Optimizer):
            raise TypeError(f"CyclicLR: {type(optimizer).__name__} is not an Optimizer")
        base_lrs = _per_group("base_lr", optimizer, base_lr)
        if last_epoch == -1:
            for lr, g in zip(base_lrs, optimizer.param_groups):
                _set_lr(g, lr)
        self.max_lrs = _per_group("max_lr", optimizer, max_lr)
        up = float(step_size_up)
        down = float(step_size_down) if step_size_down is not None else up
        if up <= 0 or down < 0:
            raise ValueError(f"CyclicLR: step sizes must be positive, got {step_size_up!r}, {step_size_down!r}")
        self.total_size, self.step_ratio = up + down, up / (up + down)
        if mode not in ("triangular", "triangular2", "exp_range") and scale_fn is None:
            raise ValueError(f"CyclicLR: mode {mode!r} is invalid and scale_fn is None")
        if scale_mode not in ("cycle", "iterations"):
            raise ValueError(f"CyclicLR: scale_mode must be 'cycle' or 'iterations', got {scale_mode!r}")
        self.mode, self.gamma, self._scale_fn_custom = mode, gamma, scale_fn
        self.scale_mode = scale_mode if scale_fn is not None else ("iterations" if mode == "exp_range" else "cycle")
        self.cycle_momentum = cycle_momentum
        if cycle_momentum:
            if "momentum" not in optimizer.defaults and "betas" not in optimizer.defaults:
                raise ValueError("CyclicLR: optimizer must support momentum or beta1 with `cycle_momentum` "
                                 "option enabled")
            self.use_beta1 = "betas" in optimizer.defaults
            self.base_momentums = _per_group("base_momentum", optimizer, base_momentum)
            self.max_momentums = _per_group("max_momentum", optimizer, max_momentum)
            if last_epoch == -1:
                for m, b, g in zip(self.max_momentums, self.base_momentums, optimizer.param_groups):
                    self._set_momentum(g, m)
                    g["max_momentum"], g["base_momentum"] = m, b
        super().__init__(optimizer, last_epoch)
        self.base_lrs = base_lrs

    def _set_momentum(self, group, m):
        if self.use_beta1:
            group["betas"] = (m, *group["betas"][1:])
        else:
            group["momentum"] = m

    def scale_fn(self, x):
        """The amplitude factor at ``x`` (cycles or iterations)."""
        if self._scale_fn_custom is not None:
            return self._scale_fn_custom(x)
        if self.mode == "triangular":
            return 1.0
        if self.mode == "triangular2":
            return 1 / (2.0 ** (x - 1))
        return self.gamma ** x

    def get_lr(self):
        cycle = math.floor(1 + self.last_epoch / self.total_size)
        x = 1.0 + self.last_epoch / self.total_size - cycle
        scale = x / self.step_ratio if x <= self.step_ratio else (x - 1) / (self.step_ratio - 1)
        amp = self.scale_fn(cycle if self.scale_mode == "cycle" else self.last_epoch)
        lrs = [b + (m - b) * scale * amp for b, m in zip(self.base_lrs, self.max_lrs)]
        if self.cycle_momentum:
            for g, b, m in zip(self.optimizer.param_groups, self.base_momentums, self.max_momentums):
                self._set_momentum(g, m - (m - b) * scale * amp)
        return lrs

    def state_dict(self):
        return {k: v for k, v in self.__dict__.items() if k not in ("optimizer", "_scale_fn_custom")}


class ChainedScheduler(LRScheduler):
    """Step several schedulers of one optimizer together; their effects compose.

    Parameters
    ----------
    schedulers : list of LRScheduler
        Chainable schedulers of the same optimizer.
    optimizer : Optimizer, optional
        Defaults to the first scheduler's.

    Examples
    --------
    >>> import lucid
    >>> opt = lucid.optim.SGD([lucid.zeros(1, requires_grad=True)], lr=1.0)
    >>> sl = lucid.optim.lr_scheduler
    >>> sched = sl.ChainedScheduler([sl.ConstantLR(opt, factor=0.5, total_iters=2),
    ...                              sl.ExponentialLR(opt, gamma=0.5)])
    >>> lrs = []
    >>> for _ in range(4):
    ...     lrs.append(sched.get_last_lr()[0]); opt.step(); sched.step()
    >>> lrs
    [0.5, 0.25, 0.25, 0.125]
    """

    def __init__(self, schedulers, optimizer=None):
        schedulers = list(schedulers)
        if not schedulers:
            raise ValueError("ChainedScheduler: expects at least one scheduler to be chained")
        optimizer = optimizer or schedulers[0].optimizer
        for i, s in enumerate(schedulers):
            if isinstance(s, ReduceLROnPlateau):
                raise ValueError(f"ChainedScheduler: does not support ReduceLROnPlateau (at index {i}): its "
                                 "step needs a metric")
            if getattr(s, "optimizer", None) is not optimizer:
                raise ValueError(f"ChainedScheduler: expects all schedulers to belong to the same optimizer, "
                                 f"but the one at index {i} ({type(s).__name__}) does not")
        self._schedulers, self.optimizer = schedulers, optimizer
        self._last_lr = _current_lrs(optimizer)

    def step(self):
        for s in self._schedulers:
            s.step()
        self._last_lr = _current_lrs(self.optimizer)

    def state_dict(self):
        sd = {k: v for k, v in self.__dict__.items() if k not in ("optimizer", "_schedulers")}
        sd["_schedulers"] = [s.state_dict() for s in self._schedulers]
        return sd

    def load_state_dict(self, state_dict):
        state_dict = dict(state_dict)
        subs = state_dict.pop("_schedulers")
        self.__dict__.update(state_dict)
        for s, sd in zip(self._schedulers, subs):
            s.load_state_dict(sd)

