"""The generic join context manager (PyTorch's ``torch.distributed.algorithms.join``): training
on uneven inputs, where ranks run out of data at different iterations.

NOTE [Generic join]
Every iteration of a rank that still has data starts with the first joinable's
:meth:`Join.notify_join_context`: a SUM all-reduce of one ``1`` (non-blocking on both sides,
since MPI never matches a blocking collective with a non-blocking one). A rank whose data ran
out leaves the ``with`` body; :meth:`Join.__exit__` then loops: it all-reduces a ``0`` (the
matching call), and while the sum is not zero it runs every joinable's ``main_hook`` -- the
same collectives, in the same order, that the active ranks' iteration makes. When the sum is
zero every rank has joined and each ``post_hook(is_last_joiner)`` runs once.
With ``throw_on_early_termination=True`` the active ranks' notification also all-reduces a
``0``, which a joined rank answers with a ``1`` before raising: every rank raises in the same
iteration.

A :class:`~lucid.nn.parallel.DistributedDataParallel` is a Joinable that joins through its own
protocol (NOTE [DDP join] in ``lucid/nn/parallel/_ddp_join.py``): its forward's flags all-reduce
already tells every rank who is active. So when DDP is the first joinable, that all-reduce *is*
the iteration's notification (its hook counts the ranks, ``_count_nonjoined``), and the throw
check is DDP's own. DDP is a Joinable by registration (``Joinable.register`` below), not by
inheritance, so that ``import lucid.nn`` does not load ``lucid.distributed``; ``_as_joinable``
therefore checks DDP before the ``Joinable`` base, which it does not need to have inherited.
"""
from __future__ import annotations

import warnings
from abc import ABC, abstractmethod
from typing import NamedTuple

import numpy as np

__all__ = ["JoinHook", "Joinable", "Join"]

_SKEW_WARNING = 1000  # PyTorch warns once a joined rank has shadowed this many iterations


class JoinHook:
    """What a joined rank runs: ``main_hook`` once per iteration that another rank still runs,
    ``post_hook(is_last_joiner)`` once when every rank has joined. Both do nothing by default.

    Examples
    --------
    >>> from lucid.distributed.algorithms.join import JoinHook
    >>> class Shadow(JoinHook):
    ...     def main_hook(self):
    ...         pass  # the collectives of one iteration, with neutral values
    >>> Shadow().post_hook(True)
    """

    def main_hook(self) -> None:
        """Shadow the collectives of one training iteration of the ranks still active."""

    def post_hook(self, is_last_joiner: bool) -> None:
        """Run once after every rank joined; ``is_last_joiner`` is True on the ranks that joined last."""


class _JoinConfig(NamedTuple):
    enable: bool
    throw_on_early_termination: bool
    is_first_joinable: bool

    @staticmethod
    def construct_disabled_join_config():
        return _JoinConfig(enable=False, throw_on_early_termination=False, is_first_joinable=False)


class Joinable(ABC):
    """A class that can take part in :class:`Join`: it gives a :class:`JoinHook`
    (:meth:`join_hook`), the device and the process group of the join's own collectives, and
    calls :meth:`Join.notify_join_context` before its per-iteration collectives.

    Examples
    --------
    >>> from lucid.distributed.algorithms.join import Joinable, JoinHook
    >>> class Quiet(Joinable):
    ...     def __init__(self):
    ...         super().__init__()
    ...     def join_hook(self, **kwargs):
    ...         return JoinHook()
    ...     join_device = "cpu"
    ...     join_process_group = None
    >>> Quiet()._join_config.enable
    False
    """

    @abstractmethod
    def __init__(self):
        super().__init__()
        self._join_config = _JoinConfig.construct_disabled_join_config()

    @abstractmethod
    def join_hook(self, **kwargs) -> JoinHook:
        """The hook for one :class:`Join`; ``kwargs`` are the ``Join``'s extra keyword arguments."""

    @property
    @abstractmethod
    def join_device(self):
        """The device of the join's own collectives."""

    @property
    @abstractmethod
    def join_process_group(self):
        """The process group of the join's own collectives."""


def _dist():
    from .. import collectives, process_group

    return collectives, process_group


def _flag_all_reduce(value, group, async_op=False, op=None):
    """SUM (or ``op``) all-reduce of one int64 ``value``; returns ``(work or None, tensor)``."""
    from ..._core.tensor import _wrap

    coll, _ = _dist()
    t = _wrap(np.array([value], np.int64))
    kwargs = {} if op is None else {"op": op}
    return coll.all_reduce(t, group=group, async_op=async_op, **kwargs), t


class Join:
    """Run ``joinables``' hooks on the ranks whose inputs ran out until every rank is done
    (NOTE [Generic join]).

    Parameters
    ----------
    joinables : list of Joinable
        Their hooks run in this order, which must be the order of their collectives in one
        iteration (for DDP with ZeRO: ``[model, optimizer]``). A
        ``DistributedDataParallel`` is accepted as it is.
    enable : bool
        ``False``: a plain context (no extra communication).
    throw_on_early_termination : bool
        Raise ``RuntimeError`` on every rank in the iteration where the first rank ran out.
    **kwargs
        Passed to every ``join_hook`` (DDP's ``divide_by_initial_world_size``, default True).

    Examples
    --------
    >>> from lucid.distributed.algorithms.join import Join
    >>> with Join([model, zero_optimizer]):                    # doctest: +SKIP
    ...     for x in my_uneven_batches:
    ...         model(x).sum().backward(); zero_optimizer.step(); zero_optimizer.zero_grad()
    """

    def __init__(self, joinables, enable=True, throw_on_early_termination=False, **kwargs):
        joinables = [_as_joinable(j) for j in joinables]
        if len(joinables) == 0:
            raise ValueError("The join context manager requires at least one joinable")
        self._joinables = joinables
        self._join_hooks = [j.join_hook(**kwargs) for j in joinables]
        self._enable = bool(enable)
        self._throw_on_early_termination = bool(throw_on_early_termination)
        self._process_group = joinables[0].join_process_group
        if any(j.join_process_group is not self._process_group for j in joinables[1:]):
            raise ValueError("Using join context manager with multiple process groups")
        self._device = joinables[0].join_device
        for i, j in enumerate(joinables):
            j._join_config = _JoinConfig(self._enable, self._throw_on_early_termination, i == 0)

    def __enter__(self):
        for j in self._joinables:
            enter = getattr(j, "_join_enter", None)
            if enter is not None and self._enable:
                enter(self._throw_on_early_termination)
        return self

    def __exit__(self, exc_type, exc, tb):
        try:
            if self._enable and exc_type is None:
                self._shadow_until_all_joined()
        finally:
            for j in self._joinables:
                j._join_config = _JoinConfig.construct_disabled_join_config()
                leave = getattr(j, "_join_exit", None)
                if leave is not None:
                    leave()
        return False  # an exception from the body propagates as it is

    def _shadow_until_all_joined(self):
        is_last_joiner, rounds = True, 0
        while self._get_num_nonjoined_procs():
            if rounds == _SKEW_WARNING:
                from .. import process_group as pg

                warnings.warn(f"Detected uneven input skew of greater than {_SKEW_WARNING}: rank "
                              f"{pg.get_rank(self._process_group)} has at least {_SKEW_WARNING} fewer inputs than "
                              "other currently-active ranks. This level of skew could lead to performance "
                              "degradation during training.", stacklevel=3)
            if self._throw_on_early_termination and not self._counts_itself():
                self._notify_procs_to_terminate()
            for hook in self._join_hooks:
                hook.main_hook()
            is_last_joiner, rounds = False, rounds + 1
        for hook in self._join_hooks:
            hook.post_hook(is_last_joiner)

    def _counts_itself(self):
        return getattr(self._join_hooks[0], "_count_nonjoined", None) is not None

    def _get_num_nonjoined_procs(self):
        """The number of ranks still active: the zero matching their notification's one."""
        if self._counts_itself():
            return self._join_hooks[0]._count_nonjoined()
        work, t = _flag_all_reduce(0, self._process_group, async_op=True)
        work.wait()
        return int(t._data[0])

    def _notify_procs_to_terminate(self):
        from .. import process_group as pg

        _flag_all_reduce(1, self._process_group)
        raise RuntimeError(f"Rank {pg.get_rank(self._process_group)} exhausted all inputs.")

    @staticmethod
    def notify_join_context(joinable):
        """Tell the join context that this rank has not joined yet (NOTE [Generic join]).

        Call it in a :class:`Joinable` before its per-iteration collectives; only the first
        joinable of the context communicates. With ``throw_on_early_termination=True`` it
        raises ``RuntimeError`` once any rank has joined.

        Returns
        -------
        Work or None
            The handle of the notification's all-reduce (first joinable only).
        """
        config = getattr(joinable, "_join_config", None)
        if config is None:
            raise RuntimeError(f"Join.notify_join_context: {type(joinable).__name__} has no join configuration; "
                               "check that its constructor calls the Joinable constructor")
        if not config.is_first_joinable or not config.enable:
            return None
        group = joinable.join_process_group
        work, _ = _flag_all_reduce(1, group, async_op=True)
        if config.throw_on_early_termination:
            work.wait()
            _, joined = _flag_all_reduce(0, group)
            if int(joined._data[0]):
                raise RuntimeError("Detected at least one rank that exhausted inputs. Throwing across all ranks.")
        return work


# ------------------------------------------------------------------ DistributedDataParallel


def _as_joinable(obj):
    """``obj`` as a member of a :class:`Join`: a DDP model (checked first: see NOTE [Generic join]) or
    any :class:`Joinable`."""
    from ...nn.parallel.distributed import DistributedDataParallel

    if isinstance(obj, DistributedDataParallel) or isinstance(obj, Joinable):
        return obj
    raise TypeError(f"Join: expected Joinable objects (or a DistributedDataParallel), got {type(obj).__name__}")


def _register_ddp():
    """Make ``isinstance(ddp, Joinable)`` true: DDP implements the interface (``join_hook``,
    ``join_device``, ``join_process_group``) without inheriting it (NOTE [Generic join])."""
    from ...nn.parallel.distributed import DistributedDataParallel

    Joinable.register(DistributedDataParallel)


_register_ddp()


class _DDPJoinHook(JoinHook):
    """A joined rank's side of DDP's join rounds (NOTE [DDP join])."""

    def __init__(self, ddp):
        self.ddp, self._round = ddp, None

    def _exchange(self):
        from ...nn.parallel._ddp_join import exchange

        ddp = self.ddp
        flags, alive = exchange(ddp, False)
        if alive and ddp._join["throw"]:
            from .. import process_group as pg

            raise RuntimeError(f"DistributedDataParallel.join: rank {pg.get_rank()} exhausted all inputs "
                               "(throw_on_early_termination=True)")
        if alive:
            ddp._join["last"] = alive
        return flags, alive

    def _count_nonjoined(self):
        """DDP first: its flags all-reduce is the iteration's notification."""
        self._round = self._exchange()
        return len(self._round[1])

    def main_hook(self):
        flags, alive = self._round if self._round is not None else self._exchange()
        self._round = None
        if not alive:
            return
        ddp = self.ddp
        if flags[2]:
            ddp._sync_states(include_params=False, src=max(alive))
        if flags[1]:
            ddp._shadow_backward()

    def post_hook(self, is_last_joiner):
        ddp = self.ddp
        last = ddp._join["last"]
        if last:  # every rank takes the model of the highest rank among the last joiners
            ddp._sync_states(include_params=True, src=max(last), buffers=ddp.forward_sync_buffers)
