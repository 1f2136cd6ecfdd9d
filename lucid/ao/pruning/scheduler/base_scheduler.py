"""``BaseScheduler`` (PyTorch's ``torch.ao.pruning.BaseScheduler``): changes the
``sparsity_level`` of a sparsifier's groups from step to step, as an LR scheduler changes an
optimizer's learning rates.

NOTE [Scheduler step counting]
As ``optim.lr_scheduler``, the scheduler wraps the sparsifier's ``step`` in a counter (once,
holding only a weak reference to the sparsifier) so that its own second ``step`` can warn
when ``scheduler.step()`` was called before any ``sparsifier.step()``. The constructor takes
the first step (``last_epoch`` -1 -> 0). Each step sets ``group["sparsity_level"]`` from
``get_sl()`` and turns ``enable_mask_update`` back on.
"""
from __future__ import annotations

import warnings
import weakref
from functools import wraps

from ..sparsifier.base_sparsifier import BaseSparsifier

__all__ = ["BaseScheduler"]


def counting_step(method):
    """``method`` (a bound ``step``) wrapped to count calls in ``instance._step_count``; a
    method already wrapped is returned as it is. See NOTE [Scheduler step counting]."""
    if getattr(method, "_with_counter", False):
        return method
    instance_ref = weakref.ref(method.__self__)
    func, cls = method.__func__, type(method.__self__)
    del method

    @wraps(func)
    def wrapper(*args, **kwargs):
        instance = instance_ref()
        instance._step_count += 1
        return func.__get__(instance, cls)(*args, **kwargs)

    wrapper._with_counter = True
    return wrapper


def warn_if_stepped_first(owner_step, owner_step_count, owner_name):
    """The warnings PyTorch gives on a scheduler's second step (NOTE [Scheduler step counting])."""
    if not hasattr(owner_step, "_with_counter"):
        warnings.warn(f"Seems like `{owner_name}.step()` has been overridden after sparsity scheduler "
                      f"initialization. Please, make sure to call `{owner_name}.step()` before `scheduler.step()`.",
                      UserWarning, stacklevel=3)
    elif owner_step_count < 1:
        warnings.warn(f"Detected call of `scheduler.step()` before `{owner_name}.step()`. You have to make sure "
                      f"you run the {owner_name}.step() BEFORE any calls to the scheduler.step().",
                      UserWarning, stacklevel=3)


def check_sparsifier(sparsifier):
    """Refuse anything but a ``BaseSparsifier`` (before a subclass reads its groups)."""
    if not isinstance(sparsifier, BaseSparsifier):
        raise TypeError(f"{type(sparsifier).__name__} is not an instance of lucid.ao.pruning.BaseSparsifier")


class BaseScheduler:
    """Base class of the sparsity-level schedulers: subclasses implement ``get_sl()``, the
    list of new levels, one per group, at epoch ``self.last_epoch``.

    Parameters
    ----------
    sparsifier : BaseSparsifier
        A prepared sparsifier; its groups' current ``sparsity_level`` are the base levels.
    last_epoch : int
        The index of the last epoch (default -1: start from the beginning).
    verbose : bool
        Print each new level.

    Examples
    --------
    >>> import lucid.nn as nn
    >>> from lucid.ao.pruning import BaseScheduler, WeightNormSparsifier
    >>> class Halving(BaseScheduler):
    ...     def get_sl(self):
    ...         return [sl * 0.5 ** self.last_epoch for sl in self.base_sl]
    >>> sparsifier = WeightNormSparsifier(sparsity_level=0.8)
    >>> sparsifier.prepare(nn.Sequential(nn.Linear(4, 4)), None)
    >>> scheduler = Halving(sparsifier)
    >>> sparsifier.step(); scheduler.step()
    >>> scheduler.get_last_sl()
    [0.4]
    """

    def __init__(self, sparsifier, last_epoch=-1, verbose=False):
        check_sparsifier(sparsifier)
        self.sparsifier = sparsifier
        self.base_sl = [group["sparsity_level"] for group in sparsifier.groups]
        self.last_epoch = last_epoch
        self.sparsifier.step = counting_step(self.sparsifier.step)
        self.sparsifier._step_count = 0
        self._step_count = 0
        self.verbose = verbose
        self._get_sl_called_within_step = False
        self.step()

    def state_dict(self):
        """Every attribute but the sparsifier."""
        return {key: value for key, value in self.__dict__.items() if key != "sparsifier"}

    def load_state_dict(self, state_dict):
        """Take back the attributes of :meth:`state_dict`."""
        self.__dict__.update(state_dict)

    def get_last_sl(self):
        """The sparsity levels the last ``step`` set, one per group."""
        return self._last_sl

    def get_sl(self):
        """The new levels (called by ``step``; use :meth:`get_last_sl` to read them)."""
        if not self._get_sl_called_within_step:
            warnings.warn("To get the last sparsity level computed by the scheduler, please use `get_last_sl()`.",
                          stacklevel=2)
        raise NotImplementedError(f"{type(self).__name__}.get_sl is not implemented")

    def print_sl(self, is_verbose, group, sl, epoch=None):
        """Print the new level of ``group`` when ``is_verbose``."""
        if is_verbose:
            message = f"sparsity level of group {group} to {sl:.4e}."
            print(f"Adjusting {message}" if epoch is None else f"Epoch {epoch:5d}: adjusting {message}")

    def __repr__(self):
        return f"{self.__class__.__name__} (\nSparsifier {self.sparsifier}\n    base_sl: {self.base_sl}\n)"

    def step(self, epoch=None):
        """Advance ``last_epoch`` and set each group's ``sparsity_level`` to ``get_sl()``."""
        if self._step_count == 1:
            warn_if_stepped_first(self.sparsifier.step, self.sparsifier._step_count, "sparsifier")
        self._step_count += 1
        self._get_sl_called_within_step = True
        try:
            self.last_epoch += 1
            values = self.get_sl()
        finally:
            self._get_sl_called_within_step = False
        for i, (group, sl) in enumerate(zip(self.sparsifier.groups, values)):
            group["sparsity_level"] = sl
            self.print_sl(self.verbose, i, sl, epoch)
        self._last_sl = [group["sparsity_level"] for group in self.sparsifier.groups]
        self.sparsifier.enable_mask_update = True

    def _make_sure_a_list(self, var):
        """``var`` repeated once per group, or checked to have one entry per group."""
        n = len(self.sparsifier.groups)
        if not isinstance(var, (list, tuple)):
            return [var] * n
        if len(var) != n:
            raise ValueError(f"Expected variable of length {n}, but got {len(var)}")
        return list(var)
