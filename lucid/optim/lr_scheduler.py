"""Learning-rate schedulers (PyTorch's ``torch.optim.lr_scheduler`` semantics).

Each scheduler knows the learning rate of epoch ``last_epoch`` as a closed form of its
base rate (``_lr_at``), and ``step()`` advances one epoch and writes the rates into the
optimizer's parameter groups.

NOTE [Chainable schedulers]
In PyTorch, StepLR, MultiStepLR, ExponentialLR, LinearLR and CosineAnnealingLR update the
*current* rate recursively, so several of them can be chained on one optimizer (their
effects compose) and a rate changed by hand is respected. Here every closed form is affine
in the base rate, ``lr(e) = A(e) + B(e) * base``, so ``step()`` recovers the effective base
from the current rate, ``(lr - A(e-1)) / B(e-1)``, and applies epoch ``e`` to it — the same
recursion as PyTorch's. Where ``B(e-1) = 0`` it adds ``lr(e) - lr(e-1)`` instead (PyTorch's
special case for the cosine). ``step(epoch)`` with an explicit epoch uses the closed form.
The schedulers whose PyTorch recursion is a simple update of the current rate (a factor, the
cosine's ratio) apply that update itself (``_recursive_lr``): it is the same value in exact
arithmetic, and in floating point it is PyTorch's to the last bit (``0.001 * 0.1`` is
``0.0001``, where ``0.001 * (0.1 ** 2 / 0.1)`` is ``0.00010000000000000002``).
"""
from __future__ import annotations

import bisect
import functools
import math
import types
import warnings
import weakref

from .._core.tensor import Tensor
from .optimizer import Optimizer


def _set_lr(group, value):
    """Write a rate: a Tensor ``lr`` is filled in place (as PyTorch's schedulers do, so the
    Tensor an optimizer was given keeps following the schedule), a number replaced."""
    cur = group["lr"]
    if isinstance(cur, Tensor):
        from .._core.grad_mode import no_grad

        with no_grad():
            cur.fill_(value.detach().item() if isinstance(value, Tensor) else value)
    else:
        group["lr"] = value


def _current_lrs(optimizer):
    """The groups' rates, Tensors copied (``get_last_lr`` never aliases a group's Tensor)."""
    return [g["lr"].clone() if isinstance(g["lr"], Tensor) else g["lr"] for g in optimizer.param_groups]


class LRScheduler:
    """Base class. Subclasses implement ``_lr_at(epoch, base_lr, group_index)``.

    Parameters
    ----------
    optimizer : Optimizer
        Whose learning rates are scheduled.
    last_epoch : int
        The index of the last epoch (-1: start fresh).

    Examples
    --------
    >>> import lucid
    >>> opt = lucid.optim.SGD([lucid.zeros(1, requires_grad=True)], lr=1.0)
    >>> sched = lucid.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)
    >>> lrs = []
    >>> for _ in range(2):
    ...     opt.step(); sched.step(); lrs.append(round(sched.get_last_lr()[0], 4))
    >>> lrs
    [0.5, 0.25]
    """

    def __init__(self, optimizer, last_epoch=-1):
        if not isinstance(optimizer, Optimizer):
            raise TypeError(f"{type(self).__name__}: {type(optimizer).__name__} is not an Optimizer")
        self.optimizer = optimizer
        if last_epoch == -1:
            for g in optimizer.param_groups:
                # a Tensor rate is changed in place by the steps, so the initial one is a copy
                g.setdefault("initial_lr", g["lr"].clone() if isinstance(g["lr"], Tensor) else g["lr"])
        else:
            for i, g in enumerate(optimizer.param_groups):
                if "initial_lr" not in g:
                    raise KeyError(f"param 'initial_lr' is not specified in param_groups[{i}] when resuming an optimizer")
        self.base_lrs = [g["initial_lr"] for g in optimizer.param_groups]
        self.last_epoch = last_epoch
        _track_optimizer_steps(optimizer)
        self._initial_step()

    def _initial_step(self):
        """The constructor's step. See NOTE [Initial step]."""
        self._step_count = 0
        self._is_initial = True
        try:
            self.step()
        finally:
            self._is_initial = False

    def get_last_lr(self):
        """The learning rates set by the last ``step``."""
        return list(self._last_lr)

    def get_lr(self):
        return [self._lr_at(self.last_epoch, b, i) for i, b in enumerate(self.base_lrs)]

    _chainable = False  # See NOTE [Chainable schedulers]
    _is_initial = False

    # NOTE [Initial step]
    # The constructor steps once (epoch ``last_epoch + 1``). PyTorch's recursive schedulers
    # (ExponentialLR, CosineAnnealingLR, PolynomialLR, MultiplicativeLR, and LinearLR past
    # epoch 0) leave the rates as they are in that step, so that resuming with
    # ``last_epoch=k`` keeps the restored rates instead of moving one epoch ahead of them; the
    # others (StepLR, MultiStepLR, ConstantLR) apply their rule. SequentialLR's first
    # scheduler takes its initial step the same way.
    def _initial_keeps_lr(self, epoch):
        return False

    def _recursive_lr(self, e, cur, base, i):
        """PyTorch's update of the current rate at epoch ``e >= 1``; None: use the affine form."""
        return None

    def _chained_lr(self, e, cur, base, i):
        if e > 0:
            lr = self._recursive_lr(e, cur, base, i)
            if lr is not None:
                return lr
        a1 = self._lr_at(e, 0.0, i)
        b1 = self._lr_at(e, 1.0, i) - a1
        if e == 0:
            return a1 + b1 * cur
        a0 = self._lr_at(e - 1, 0.0, i)
        b0 = self._lr_at(e - 1, 1.0, i) - a0
        if b0 != 0:
            return a1 + b1 / b0 * (cur - a0)
        return cur + self._lr_at(e, base, i) - self._lr_at(e - 1, base, i)

    def _count_step(self):
        """PyTorch's check of the call order on the first step after construction."""
        if getattr(self, "_step_count", None) == 1:
            if not hasattr(self.optimizer.step, "_wrapped_by_lr_sched"):
                warnings.warn("Seems like `optimizer.step()` has been overridden after learning rate scheduler "
                              "initialization. Please, make sure to call `optimizer.step()` before "
                              "`lr_scheduler.step()`.", UserWarning, stacklevel=3)
            elif not getattr(self.optimizer, "_opt_called", False):
                warnings.warn("Detected call of `lr_scheduler.step()` before `optimizer.step()`. You should call "
                              "them in that order: otherwise the first value of the learning rate schedule is "
                              "skipped.", UserWarning, stacklevel=3)
        self._step_count = getattr(self, "_step_count", 0) + 1

    def step(self, epoch=None):
        """Advance one epoch (or jump to ``epoch``) and update the optimizer's rates."""
        self._count_step()
        if epoch is not None:
            warnings.warn(_EPOCH_DEPRECATION, UserWarning, stacklevel=2)
        if epoch is None and self._chainable:
            self.last_epoch += 1
            if self._is_initial and self._initial_keeps_lr(self.last_epoch):  # See NOTE [Initial step]
                lrs = [g["lr"] for g in self.optimizer.param_groups]
            else:
                lrs = [self._chained_lr(self.last_epoch, g["lr"], b, i)
                       for i, (g, b) in enumerate(zip(self.optimizer.param_groups, self.base_lrs))]
        else:
            self.last_epoch = self.last_epoch + 1 if epoch is None else epoch
            lrs = self.get_lr()
        self._write_lrs(lrs)

    def _write_lrs(self, lrs):
        for g, lr in zip(self.optimizer.param_groups, lrs):
            _set_lr(g, lr)
        self._last_lr = _current_lrs(self.optimizer)

    def state_dict(self):
        return {k: v for k, v in self.__dict__.items() if k != "optimizer" and not callable(v)}

    def load_state_dict(self, state_dict):
        self.__dict__.update(state_dict)


_LRScheduler = LRScheduler

# PyTorch's text (filters written for it match)
_EPOCH_DEPRECATION = (
    "The epoch parameter in `scheduler.step()` was not necessary and is being deprecated where possible. "
    "Please use `scheduler.step()` to step the scheduler. During the deprecation, if epoch is different from "
    "None, the closed form is used instead of the new chainable form, where available.")


def _track_optimizer_steps(optimizer):
    """Wrap ``optimizer.step`` (once) so that it records that it ran, as PyTorch's schedulers do
    to warn about ``lr_scheduler.step()`` called before ``optimizer.step()``."""
    if hasattr(optimizer.step, "_wrapped_by_lr_sched"):
        return
    opt_ref, func = weakref.ref(optimizer), optimizer.step.__func__

    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        opt = opt_ref()
        opt._opt_called = True
        return func.__get__(opt, opt.__class__)(*args, **kwargs)

    wrapper._wrapped_by_lr_sched = True
    optimizer.step = wrapper


class LambdaLR(LRScheduler):
    """``lr = base_lr * lr_lambda(epoch)`` (one lambda, or one per group).

    Parameters
    ----------
    optimizer : Optimizer
        Whose learning rates are scheduled.
    lr_lambda : callable or list of callables
        ``epoch -> factor`` of the initial lr (one per group).
    last_epoch : int
        The index of the last epoch (-1: start fresh).

    Examples
    --------
    >>> import lucid
    >>> opt = lucid.optim.SGD([lucid.zeros(1, requires_grad=True)], lr=1.0)
    >>> sched = lucid.optim.lr_scheduler.LambdaLR(opt, lambda e: 1 / (e + 1))
    >>> lrs = []
    >>> for _ in range(2):
    ...     opt.step(); sched.step(); lrs.append(round(sched.get_last_lr()[0], 4))
    >>> lrs
    [0.5, 0.3333]
    """

    def __init__(self, optimizer, lr_lambda, last_epoch=-1):
        n = len(optimizer.param_groups)
        self.lr_lambdas = list(lr_lambda) if isinstance(lr_lambda, (list, tuple)) else [lr_lambda] * n
        if len(self.lr_lambdas) != n:
            raise ValueError(f"LambdaLR: expected {n} lr_lambdas, got {len(self.lr_lambdas)}")
        super().__init__(optimizer, last_epoch)

    def _lr_at(self, epoch, base, i):
        return base * self.lr_lambdas[i](epoch)

    def state_dict(self):
        return _lambdas_state_dict(self)

    def load_state_dict(self, state_dict):
        _lambdas_load_state_dict(self, state_dict)


def _lambdas_state_dict(sched):
    """PyTorch's state of a scheduler driven by lambdas: plain functions are not saved (None),
    a callable object's ``__dict__`` is, so a stateful factor resumes where it was."""
    state = {k: v for k, v in sched.__dict__.items() if k not in ("optimizer", "lr_lambdas")}
    state["lr_lambdas"] = [None if isinstance(fn, types.FunctionType) else fn.__dict__.copy()
                           for fn in sched.lr_lambdas]
    return state


def _lambdas_load_state_dict(sched, state_dict):
    saved = state_dict.get("lr_lambdas")
    sched.__dict__.update({k: v for k, v in state_dict.items() if k != "lr_lambdas"})
    for fn, fn_state in zip(sched.lr_lambdas, saved or ()):
        if fn_state is not None:
            fn.__dict__.update(fn_state)


class StepLR(LRScheduler):
    """``lr = base_lr * gamma ** (epoch // step_size)``.

    Parameters
    ----------
    optimizer : Optimizer
        Whose learning rates are scheduled.
    step_size : int
        Epochs between decays.
    gamma : float
        Decay factor.
    last_epoch : int
        The index of the last epoch (-1: start fresh).

    Examples
    --------
    >>> import lucid
    >>> opt = lucid.optim.SGD([lucid.zeros(1, requires_grad=True)], lr=1.0)
    >>> sched = lucid.optim.lr_scheduler.StepLR(opt, step_size=2, gamma=0.5)
    >>> lrs = []
    >>> for epoch in range(5):
    ...     lrs.append(sched.get_last_lr()[0]); opt.step(); sched.step()
    >>> lrs
    [1.0, 1.0, 0.5, 0.5, 0.25]
    """

    _chainable = True

    def __init__(self, optimizer, step_size, gamma=0.1, last_epoch=-1):
        self.step_size, self.gamma = step_size, gamma
        super().__init__(optimizer, last_epoch)

    def _lr_at(self, epoch, base, i):
        return base * self.gamma ** (epoch // self.step_size)

    def _recursive_lr(self, e, cur, base, i):  # See NOTE [Chainable schedulers]
        return cur * self.gamma if e % self.step_size == 0 else cur


class MultiStepLR(LRScheduler):
    """``lr = base_lr * gamma ** (number of milestones <= epoch)``.

    Parameters
    ----------
    optimizer : Optimizer
        Whose learning rates are scheduled.
    milestones : list of int
        Epochs at which to decay.
    gamma : float
        Decay factor.
    last_epoch : int
        The index of the last epoch (-1: start fresh).

    Examples
    --------
    >>> import lucid
    >>> opt = lucid.optim.SGD([lucid.zeros(1, requires_grad=True)], lr=1.0)
    >>> sched = lucid.optim.lr_scheduler.MultiStepLR(opt, milestones=[2], gamma=0.1)
    >>> lrs = []
    >>> for _ in range(3):
    ...     opt.step(); sched.step(); lrs.append(round(sched.get_last_lr()[0], 4))
    >>> lrs
    [1.0, 0.1, 0.1]
    """

    _chainable = True

    def __init__(self, optimizer, milestones, gamma=0.1, last_epoch=-1):
        self.milestones, self.gamma = sorted(milestones), gamma
        super().__init__(optimizer, last_epoch)

    def _lr_at(self, epoch, base, i):
        return base * self.gamma ** bisect.bisect_right(self.milestones, epoch)

    def _recursive_lr(self, e, cur, base, i):  # See NOTE [Chainable schedulers]
        hits = self.milestones.count(e)  # a repeated milestone decays once per repetition
        return cur * self.gamma ** hits if hits else cur


class ExponentialLR(LRScheduler):
    """``lr = base_lr * gamma ** epoch``.

    Parameters
    ----------
    optimizer : Optimizer
        Whose learning rates are scheduled.
    gamma : float
        Decay factor per epoch.
    last_epoch : int
        The index of the last epoch (-1: start fresh).

    Examples
    --------
    >>> import lucid
    >>> opt = lucid.optim.SGD([lucid.zeros(1, requires_grad=True)], lr=1.0)
    >>> sched = lucid.optim.lr_scheduler.ExponentialLR(opt, gamma=0.5)
    >>> lrs = []
    >>> for _ in range(2):
    ...     opt.step(); sched.step(); lrs.append(round(sched.get_last_lr()[0], 4))
    >>> lrs
    [0.5, 0.25]
    """

    _chainable = True

    def __init__(self, optimizer, gamma, last_epoch=-1):
        self.gamma = gamma
        super().__init__(optimizer, last_epoch)

    def _initial_keeps_lr(self, epoch):  # See NOTE [Initial step]
        return True

    def _lr_at(self, epoch, base, i):
        return base * self.gamma ** epoch

    def _recursive_lr(self, e, cur, base, i):  # See NOTE [Chainable schedulers]
        return cur * self.gamma


class LinearLR(LRScheduler):
    """Factor moves linearly from ``start_factor`` to ``end_factor`` over ``total_iters`` epochs.

    Parameters
    ----------
    optimizer : Optimizer
        Whose learning rates are scheduled.
    start_factor, end_factor : float
        Multipliers of the initial lr at the start and the end.
    total_iters : int
        Steps to go from one to the other.
    last_epoch : int
        The index of the last epoch (-1: start fresh).

    Examples
    --------
    >>> import lucid
    >>> opt = lucid.optim.SGD([lucid.zeros(1, requires_grad=True)], lr=1.0)
    >>> sched = lucid.optim.lr_scheduler.LinearLR(opt, start_factor=0.5, total_iters=2)
    >>> lrs = []
    >>> for _ in range(3):
    ...     opt.step(); sched.step(); lrs.append(round(sched.get_last_lr()[0], 4))
    >>> lrs
    [0.75, 1.0, 1.0]
    """

    _chainable = True

    def __init__(self, optimizer, start_factor=1.0 / 3, end_factor=1.0, total_iters=5, last_epoch=-1):
        if not 0 < start_factor <= 1 or not 0 <= end_factor <= 1:
            raise ValueError("LinearLR: start_factor must be in (0, 1] and end_factor in [0, 1]")
        self.start_factor, self.end_factor, self.total_iters = start_factor, end_factor, total_iters
        super().__init__(optimizer, last_epoch)

    def _initial_keeps_lr(self, epoch):  # See NOTE [Initial step]
        return epoch != 0

    def _lr_at(self, epoch, base, i):
        # total_iters=0: the end factor at once (PyTorch's recursion keeps the start factor
        # forever there, against its documentation; its closed form divides by zero)
        frac = min(epoch, self.total_iters) / self.total_iters if self.total_iters else 1.0
        return base * (self.start_factor + (self.end_factor - self.start_factor) * frac)

    def _recursive_lr(self, e, cur, base, i):  # See NOTE [Chainable schedulers]
        if not self.total_iters:
            return None
        if e > self.total_iters:
            return cur
        delta = self.end_factor - self.start_factor
        return cur * (1.0 + delta / (self.total_iters * self.start_factor + (e - 1) * delta))


class CosineAnnealingLR(LRScheduler):
    """``lr = eta_min + (base_lr - eta_min) * (1 + cos(pi * epoch / T_max)) / 2``.

    Parameters
    ----------
    optimizer : Optimizer
        Whose learning rates are scheduled.
    T_max : int
        Half period, in epochs.
    eta_min : float
        Minimum lr.
    last_epoch : int
        The index of the last epoch (-1: start fresh).

    Examples
    --------
    >>> import lucid
    >>> opt = lucid.optim.SGD([lucid.zeros(1, requires_grad=True)], lr=1.0)
    >>> sched = lucid.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=2)
    >>> lrs = []
    >>> for _ in range(2):
    ...     opt.step(); sched.step(); lrs.append(round(sched.get_last_lr()[0], 4))
    >>> lrs
    [0.5, 0.0]
    """

    _chainable = True

    def __init__(self, optimizer, T_max, eta_min=0.0, last_epoch=-1):
        self.T_max, self.eta_min = T_max, eta_min
        super().__init__(optimizer, last_epoch)

    def _initial_keeps_lr(self, epoch):  # See NOTE [Initial step]
        return True

    def _lr_at(self, epoch, base, i):
        return self.eta_min + (base - self.eta_min) * (1 + math.cos(math.pi * epoch / self.T_max)) / 2

    def _recursive_lr(self, e, cur, base, i):  # See NOTE [Chainable schedulers]
        if (e - 1 - self.T_max) % (2 * self.T_max) == 0:  # leaving the trough: the ratio is 0/0
            return cur + (base - self.eta_min) * (1 - math.cos(math.pi / self.T_max)) / 2
        ratio = (1 + math.cos(math.pi * e / self.T_max)) / (1 + math.cos(math.pi * (e - 1) / self.T_max))
        return ratio * (cur - self.eta_min) + self.eta_min


class CosineAnnealingWarmRestarts(LRScheduler):
    """Cosine annealing restarted every ``T_i`` epochs, ``T_i`` growing by ``T_mult``.

    Parameters
    ----------
    optimizer : Optimizer
        Whose learning rates are scheduled.
    T_0 : int
        Epochs to the first restart.
    T_mult : int
        Period growth factor after each restart.
    eta_min : float
        Minimum lr.
    last_epoch : int
        The index of the last epoch (-1: start fresh).

    Examples
    --------
    >>> import lucid
    >>> opt = lucid.optim.SGD([lucid.zeros(1, requires_grad=True)], lr=1.0)
    >>> sched = lucid.optim.lr_scheduler.CosineAnnealingWarmRestarts(opt, T_0=2)
    >>> lrs = []
    >>> for _ in range(3):
    ...     opt.step(); sched.step(); lrs.append(round(sched.get_last_lr()[0], 4))
    >>> lrs
    [0.5, 1.0, 0.5]
    """

    def __init__(self, optimizer, T_0, T_mult=1, eta_min=0.0, last_epoch=-1):
        if T_0 <= 0 or not isinstance(T_0, int):
            raise ValueError(f"CosineAnnealingWarmRestarts: expected positive integer T_0, got {T_0}")
        if T_mult < 1 or not isinstance(T_mult, int):
            raise ValueError(f"CosineAnnealingWarmRestarts: expected integer T_mult >= 1, got {T_mult}")
        if isinstance(eta_min, bool) or not isinstance(eta_min, (float, int)):
            raise ValueError(f"CosineAnnealingWarmRestarts: expected float or int eta_min, got {eta_min!r}")
        self.T_0, self.T_i, self.T_mult, self.eta_min = T_0, T_0, T_mult, eta_min
        self.T_cur = last_epoch
        super().__init__(optimizer, last_epoch)

    def step(self, epoch=None):
        """Advance one epoch, or go to ``epoch`` (fractional epochs allowed: ``epoch + i / iters``).

        As PyTorch's: ``T_cur`` advances by one per plain step (so a plain step after a
        fractional one keeps the fraction) and ``last_epoch`` is the epoch's floor."""
        self._count_step()
        if epoch is None and self.last_epoch < 0:
            epoch = 0
        if epoch is None:
            epoch = self.last_epoch + 1
            self.T_cur = self.T_cur + 1
            if self.T_cur >= self.T_i:
                self.T_cur = self.T_cur % self.T_i
                self.T_i = self.T_i * self.T_mult
        else:
            if epoch < 0:
                raise ValueError(f"CosineAnnealingWarmRestarts.step: expected a non-negative epoch, got {epoch}")
            self.T_cur, self.T_i = self._cycle(epoch)
        self.last_epoch = math.floor(epoch)
        lrs = self.get_lr()
        self._write_lrs(lrs)

    def _cycle(self, epoch):
        """(T_cur, T_i) at a possibly fractional epoch >= 0."""
        if epoch < self.T_0:
            return epoch, self.T_0
        if self.T_mult == 1:
            return epoch % self.T_0, self.T_0
        n = int(math.log(epoch / self.T_0 * (self.T_mult - 1) + 1, self.T_mult))
        return epoch - self.T_0 * (self.T_mult ** n - 1) / (self.T_mult - 1), self.T_0 * self.T_mult ** n

    def get_lr(self):
        return [self.eta_min + (base - self.eta_min) * (1 + math.cos(math.pi * self.T_cur / self.T_i)) / 2
                for base in self.base_lrs]


def _positive_int(name, value):
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ValueError(f"OneCycleLR: expected a positive integer {name}, got {value!r}")


def _per_group_values(owner, name, optimizer, value):
    """``value`` for each parameter group: a list or tuple must have one per group."""
    n = len(optimizer.param_groups)
    if isinstance(value, (list, tuple)):
        if len(value) != n:
            raise ValueError(f"{owner}: {name} must have one value per parameter group: got {len(value)} values "
                             f"for {n} groups")
        return list(value)
    return [value] * n


_PHASE_KEYS = ("end_step", "start_lr", "end_lr", "start_momentum", "end_momentum")  # PyTorch's


class OneCycleLR(LRScheduler):
    """The 1cycle policy: warm up to ``max_lr`` then anneal (cos or linear), per batch step.

    Parameters
    ----------
    optimizer : Optimizer
        Whose learning rates are scheduled.
    max_lr : float or list of float
        Peak lr.
    total_steps : int, optional
        Length of the cycle (or give ``epochs`` and ``steps_per_epoch``).
    pct_start : float
        Fraction of the cycle spent increasing the lr.
    anneal_strategy : {'cos', 'linear'}
        Shape of the curve.
    div_factor, final_div_factor : float
        Initial lr = ``max_lr / div_factor``; final = initial / ``final_div_factor``.

    Examples
    --------
    >>> import lucid
    >>> opt = lucid.optim.SGD([lucid.zeros(1, requires_grad=True)], lr=1.0)
    >>> sched = lucid.optim.lr_scheduler.OneCycleLR(opt, max_lr=1.0, total_steps=4)
    >>> round(opt.param_groups[0]['lr'], 4)
    0.04
    """

    def __init__(self, optimizer, max_lr, total_steps=None, epochs=None, steps_per_epoch=None,
                 pct_start=0.3, anneal_strategy="cos", cycle_momentum=True, base_momentum=0.85,
                 max_momentum=0.95, div_factor=25.0, final_div_factor=1e4, three_phase=False, last_epoch=-1):
        if not isinstance(optimizer, Optimizer):
            raise TypeError(f"OneCycleLR: {type(optimizer).__name__} is not an Optimizer")
        if total_steps is not None:
            _positive_int("total_steps", total_steps)
        elif epochs is not None and steps_per_epoch is not None:
            _positive_int("epochs", epochs)
            _positive_int("steps_per_epoch", steps_per_epoch)
            total_steps = epochs * steps_per_epoch
        else:
            raise ValueError("OneCycleLR: you must define either total_steps OR (epochs AND steps_per_epoch)")
        if not isinstance(pct_start, float) or not 0 <= pct_start <= 1:
            raise ValueError(f"OneCycleLR: expected a float between 0 and 1 for pct_start, got {pct_start!r}")
        if anneal_strategy not in ("cos", "linear"):
            raise ValueError(f"OneCycleLR: anneal_strategy must be 'cos' or 'linear', got {anneal_strategy!r}")
        self.total_steps = total_steps
        max_lrs = _per_group_values("OneCycleLR", "max_lr", optimizer, max_lr)
        for g, m in zip(optimizer.param_groups, max_lrs):
            if last_epoch == -1:
                g["initial_lr"] = m / div_factor
                g["max_lr"] = m
                g["min_lr"] = g["initial_lr"] / final_div_factor
        # State as PyTorch's (keys and layout), so a state_dict moves between the two libraries
        if three_phase:
            phases = [(float(pct_start * total_steps) - 1, "initial_lr", "max_lr", "max_momentum", "base_momentum"),
                      (float(2 * pct_start * total_steps) - 2, "max_lr", "initial_lr", "base_momentum", "max_momentum"),
                      (total_steps - 1, "initial_lr", "min_lr", "max_momentum", "max_momentum")]
        else:
            phases = [(float(pct_start * total_steps) - 1, "initial_lr", "max_lr", "max_momentum", "base_momentum"),
                      (total_steps - 1, "max_lr", "min_lr", "base_momentum", "max_momentum")]
        self._schedule_phases = [dict(zip(_PHASE_KEYS, phase)) for phase in phases]
        self._anneal_func_type = anneal_strategy
        self.cycle_momentum = cycle_momentum
        self.use_beta1 = cycle_momentum and "betas" in optimizer.defaults
        if cycle_momentum:
            if "momentum" not in optimizer.defaults and "betas" not in optimizer.defaults:
                raise ValueError("OneCycleLR: optimizer must support momentum or betas with cycle_momentum enabled")
            # per group, as max_lr (a list gives one value to each group)
            max_ms = _per_group_values("OneCycleLR", "max_momentum", optimizer, max_momentum)
            base_ms = _per_group_values("OneCycleLR", "base_momentum", optimizer, base_momentum)
            if last_epoch == -1:
                for g, m, b in zip(optimizer.param_groups, max_ms, base_ms):
                    g["max_momentum"], g["base_momentum"] = m, b
        super().__init__(optimizer, last_epoch)

    @property
    def anneal_strategy(self):
        """'cos' or 'linear' (stored as PyTorch's ``_anneal_func_type``)."""
        return self._anneal_func_type

    def load_state_dict(self, state_dict):
        state = dict(state_dict)
        if "_phases" in state:  # a state saved by Lucid before it kept PyTorch's layout
            state["_schedule_phases"] = [dict(zip(_PHASE_KEYS, phase)) for phase in state.pop("_phases")]
        if "anneal_strategy" in state:
            state["_anneal_func_type"] = state.pop("anneal_strategy")
        if state.get("_anneal_func_type") not in ("cos", "linear"):
            raise ValueError(f"OneCycleLR.load_state_dict: unknown anneal function {state.get('_anneal_func_type')!r}")
        self.__dict__.update(state)

    def _anneal(self, start, end, pct):
        if self._anneal_func_type == "cos":
            return end + (start - end) / 2 * (math.cos(math.pi * pct) + 1)
        return (end - start) * pct + start

    def get_lr(self):
        step = self.last_epoch
        if step > self.total_steps:
            raise ValueError(
                f"OneCycleLR: tried to step {step} times; the specified number of total steps is {self.total_steps}"
            )
        lrs = []
        for g in self.optimizer.param_groups:
            start = 0.0
            for i, phase in enumerate(self._schedule_phases):
                end, lr_a, lr_b, m_a, m_b = (phase[k] for k in _PHASE_KEYS)
                if step <= end or i == len(self._schedule_phases) - 1:
                    pct = (step - start) / (end - start) if end != start else 0.0
                    lr = self._anneal(g[lr_a], g[lr_b], pct)
                    if self.cycle_momentum:
                        mom = self._anneal(g[m_a], g[m_b], pct)
                        if "betas" in g:
                            g["betas"] = (mom,) + tuple(g["betas"][1:])
                        else:
                            g["momentum"] = mom
                    break
                start = end
            lrs.append(lr)
        return lrs


def _undo_step(sched):
    """One epoch back for ``sched``, or for each scheduler it holds (PyTorch's recursive_undo)."""
    if hasattr(sched, "_schedulers"):
        for s in sched._schedulers:
            _undo_step(s)
    elif hasattr(sched, "last_epoch"):
        sched.last_epoch -= 1


class SequentialLR(LRScheduler):
    """Run ``schedulers`` one after another, switching at ``milestones``.

    Parameters
    ----------
    optimizer : Optimizer
        Whose learning rates are scheduled.
    schedulers : list of LRScheduler
        Run one after the other.
    milestones : list of int
        Epochs at which to switch to the next scheduler.

    Examples
    --------
    >>> import lucid
    >>> opt = lucid.optim.SGD([lucid.zeros(1, requires_grad=True)], lr=1.0)
    >>> sl = lucid.optim.lr_scheduler
    >>> sched = sl.SequentialLR(opt, [sl.LinearLR(opt, start_factor=0.5, total_iters=1), sl.ExponentialLR(opt, gamma=0.5)], milestones=[1])
    >>> lrs = []
    >>> for _ in range(2):
    ...     opt.step(); sched.step(); lrs.append(sched.get_last_lr()[0])
    >>> lrs
    [1.0, 0.5]
    """

    def __init__(self, optimizer, schedulers, milestones, last_epoch=-1):
        schedulers = list(schedulers)
        if not schedulers:
            raise ValueError("SequentialLR: expects at least one scheduler, but got none")
        for i, sched in enumerate(schedulers):
            if not hasattr(sched, "optimizer"):
                raise TypeError(f"SequentialLR: the scheduler at index {i} should have `optimizer` as its attribute")
            if isinstance(sched, ReduceLROnPlateau):
                raise ValueError(f"SequentialLR: does not support ReduceLROnPlateau (at index {i}): its step "
                                 "needs a metric")
            if sched.optimizer is not optimizer:
                raise ValueError(f"SequentialLR: expects all schedulers to belong to the same optimizer, but the "
                                 f"one at index {i} ({type(sched).__name__}) does not")
        if len(milestones) != len(schedulers) - 1:
            raise ValueError(
                f"SequentialLR: expects len(milestones) == len(schedulers) - 1, got {len(milestones)} and {len(schedulers)}"
            )
        self.optimizer = optimizer
        self._schedulers, self._milestones = schedulers, list(milestones)
        self.last_epoch = last_epoch + 1
        for g in optimizer.param_groups:
            _set_lr(g, g["initial_lr"])
        # Undo the steps the sub-schedulers took at construction, then start the one that runs
        # at epoch 0 (the second with a milestone at 0), as its constructor would.
        _undo_step(self)
        first = self._schedulers[bisect.bisect_right(self._milestones, 0)]
        first._initial_step()
        self._last_lr = first.get_last_lr()

    def step(self):
        self.last_epoch += 1
        idx = bisect.bisect_right(self._milestones, self.last_epoch)
        sched = self._schedulers[idx]
        if idx > 0 and self._milestones[idx - 1] == self.last_epoch:
            with warnings.catch_warnings():  # the switch is SequentialLR's own use of step(epoch)
                warnings.filterwarnings("ignore", message="The epoch parameter in", category=UserWarning)
                sched.step(0)
        else:
            sched.step()
        self._last_lr = sched.get_last_lr()

    def state_dict(self):
        return {"last_epoch": self.last_epoch, "_schedulers": [s.state_dict() for s in self._schedulers],
                "_milestones": self._milestones, "_last_lr": self._last_lr}

    def load_state_dict(self, state_dict):
        for s, sd in zip(self._schedulers, state_dict["_schedulers"]):
            s.load_state_dict(sd)
        self.last_epoch, self._milestones, self._last_lr = (
            state_dict["last_epoch"], state_dict["_milestones"], state_dict["_last_lr"])


class ReduceLROnPlateau(LRScheduler):  # an LRScheduler, as PyTorch's (its own __init__)
    """Reduce the learning rate by ``factor`` when a metric stops improving for ``patience`` epochs.

    Parameters
    ----------
    optimizer : Optimizer
        Whose learning rates are scheduled.
    mode : {'min', 'max'}
        Whether the metric should go down or up.
    factor : float
        Multiplier of the lr on a plateau.
    patience : int
        Epochs without improvement before reducing.
    threshold : float
        What counts as an improvement.
    cooldown : int
        Epochs to wait after a reduction.
    min_lr : float or list of float
        Lower bound.

    Examples
    --------
    >>> import lucid
    >>> opt = lucid.optim.SGD([lucid.zeros(1, requires_grad=True)], lr=1.0)
    >>> sched = lucid.optim.lr_scheduler.ReduceLROnPlateau(opt, patience=0)
    >>> sched.step(1.0); sched.step(1.0)
    >>> opt.param_groups[0]['lr']
    0.1
    """

    def __init__(self, optimizer, mode="min", factor=0.1, patience=10, threshold=1e-4,
                 threshold_mode="rel", cooldown=0, min_lr=0, eps=1e-8):
        if factor >= 1.0:
            raise ValueError("ReduceLROnPlateau: factor should be < 1.0")
        self._check_modes(mode, threshold_mode)
        if not isinstance(optimizer, Optimizer):
            raise TypeError(f"ReduceLROnPlateau: {type(optimizer).__name__} is not an Optimizer")
        self.optimizer = optimizer
        n = len(optimizer.param_groups)
        if isinstance(min_lr, (list, tuple)) and len(min_lr) != n:
            raise ValueError(f"ReduceLROnPlateau: expected {n} min_lrs, got {len(min_lr)}")
        # a scalar min_lr also bounds param groups added later (PyTorch's default_min_lr)
        self.default_min_lr = None if isinstance(min_lr, (list, tuple)) else min_lr
        self.min_lrs = list(min_lr) if isinstance(min_lr, (list, tuple)) else [min_lr] * n
        self.mode, self.factor, self.patience = mode, factor, patience
        self.threshold, self.threshold_mode = threshold, threshold_mode
        self.mode_worse = math.inf if mode == "min" else -math.inf
        self.cooldown, self.eps = cooldown, eps
        self.last_epoch = 0
        self._last_lr = _current_lrs(optimizer)
        self._reset()

    @staticmethod
    def _check_modes(mode, threshold_mode):
        if mode not in ("min", "max") or threshold_mode not in ("rel", "abs"):
            raise ValueError(f"ReduceLROnPlateau: bad mode {mode!r} or threshold_mode {threshold_mode!r}")

    def _reset(self):
        """Forget the best metric, the bad epochs and the cooldown (PyTorch's ``_reset``)."""
        self.best = self.mode_worse
        self.cooldown_counter = 0
        self.num_bad_epochs = 0

    @property
    def in_cooldown(self):
        return self.cooldown_counter > 0

    def _is_better(self, a, best):
        if self.mode == "min":
            return a < (best * (1 - self.threshold) if self.threshold_mode == "rel" else best - self.threshold)
        return a > (best * (1 + self.threshold) if self.threshold_mode == "rel" else best + self.threshold)

    def step(self, metrics, epoch=None):
        current = float(metrics)
        if epoch is not None:
            warnings.warn(_EPOCH_DEPRECATION, UserWarning, stacklevel=2)
        # the new counters are worked out first and kept only once the step can't fail (a
        # refused reduction leaves the scheduler as it was; PyTorch's has counted the epoch)
        best, bad, cooldown = self.best, self.num_bad_epochs, self.cooldown_counter
        if self._is_better(current, best):
            best, bad = current, 0
        else:
            bad += 1
        if cooldown > 0:
            cooldown, bad = cooldown - 1, 0
        reduce = bad > self.patience
        if reduce:
            self._group_min_lrs()  # raises here, before anything changes, if it can't reduce
        self.last_epoch = self.last_epoch + 1 if epoch is None else epoch
        self.best, self.num_bad_epochs, self.cooldown_counter = best, bad, cooldown
        if reduce:
            self._reduce_lr()
            self.cooldown_counter = self.cooldown
            self.num_bad_epochs = 0
        self._last_lr = _current_lrs(self.optimizer)

    def _group_min_lrs(self):
        """One ``min_lr`` per param group, also for groups added since (``default_min_lr``)."""
        groups = self.optimizer.param_groups
        if len(groups) == len(self.min_lrs):
            return self.min_lrs
        if self.default_min_lr is None:  # a group was added since (add_param_group)
            raise RuntimeError(
                f"ReduceLROnPlateau: the optimizer has {len(groups)} param groups, {len(self.min_lrs)} when the "
                "scheduler was made (a param group was added?): set its min_lrs to one per group")
        return [self.default_min_lr] * len(groups)

    def _reduce_lr(self):
        groups = self.optimizer.param_groups
        self.min_lrs = self._group_min_lrs()
        for g, min_lr in zip(groups, self.min_lrs):
            new = max(float(g["lr"]) * self.factor, min_lr)
            if float(g["lr"]) - new > self.eps:
                _set_lr(g, new)

    def get_last_lr(self):
        return list(self._last_lr)

    def state_dict(self):
        return {k: v for k, v in self.__dict__.items() if k != "optimizer"}

    def load_state_dict(self, state_dict):
        self.__dict__.update(state_dict)
        # an older state without these: derived again from the loaded mode, as PyTorch's _init_is_better
        self._check_modes(self.mode, self.threshold_mode)
        self.mode_worse = math.inf if self.mode == "min" else -math.inf
        if "default_min_lr" not in state_dict:
            self.default_min_lr = None


# (at the bottom: these subclass LRScheduler from this module)
from .lr_scheduler_more import (ChainedScheduler, ConstantLR, CyclicLR, MultiplicativeLR,  # noqa: E402
                                PolynomialLR)
from .lr_scheduler_noam import NoamScheduler  # noqa: E402  (Lucid 3's Transformer schedule)

__all__ = ["LRScheduler", "LambdaLR", "MultiplicativeLR", "StepLR", "MultiStepLR", "ConstantLR", "LinearLR",
           "ExponentialLR", "PolynomialLR", "CosineAnnealingLR", "CosineAnnealingWarmRestarts", "CyclicLR",
           "OneCycleLR", "SequentialLR", "ChainedScheduler", "ReduceLROnPlateau", "NoamScheduler"]
