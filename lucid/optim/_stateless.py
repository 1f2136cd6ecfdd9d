"""``swap_in_optimizer_params_and_state``: run an optimizer on other parameters and state for a while.

NOTE [Swapped-in optimizer state]
The context installs, on the live optimizer, the parameters a caller gives (in the order of
``optimizer.param_groups``, usually ``model.named_parameters()``'s) and an
``optimizer.state_dict()``-shaped dict: each group's options replace the live group's, and the
per-parameter state (keyed by packed ids) is re-keyed by the swapped-in tensors, each entry a
shallow copy of its dict. So ``step()`` updates the given tensors and the given state Tensors
in place (Lucid's rules change state arrays in place), while entries a rule replaces (a new
Tensor, a step count, which Lucid keeps as a Python number where PyTorch has a tensor) stay
inside the context. On exit every live group gets back its exact former contents (the same
``params`` list object) and the optimizer its former ``state`` mapping. Everything is checked
before anything is installed, so a bad argument changes nothing.
"""
from __future__ import annotations

import collections
import contextlib

from .._core.tensor import Tensor

__all__ = ["swap_in_optimizer_params_and_state"]

_API = "swap_in_optimizer_params_and_state"


def _checked_state(state):
    if not isinstance(state, dict):
        raise RuntimeError(f"{_API} requires swapin_optim_state['state'] to be a dict mapping packed parameter "
                           f"ids to per-param state dicts, got {type(state).__name__}.")
    if any(isinstance(k, Tensor) for k in state):
        raise RuntimeError(f"{_API} requires optimizer.state_dict()-style state keyed by packed parameter ids.")
    if any(isinstance(k, int) and not isinstance(v, dict) for k, v in state.items()):
        raise RuntimeError(f"{_API} requires per-parameter optimizer state entries to be dictionaries.")
    return state


def _checked_group(index, live, given):
    """The packed ids of swap-in group ``index`` after checking it against the live group."""
    if not isinstance(given, dict):
        raise RuntimeError(f"{_API} requires each optimizer param group to be a dictionary.")
    ids = given.get("params")
    if not isinstance(ids, list) or not all(isinstance(i, int) and not isinstance(i, bool) for i in ids):
        raise RuntimeError(f"{_API} requires optimizer.state_dict()-style param_groups[*]['params'] entries keyed "
                           "by packed parameter ids.")
    if len(ids) != len(live["params"]):
        raise RuntimeError(f"swapin_optim_state param group {index} has a different number of params than the "
                           "live optimizer param group.")
    only_given = [k for k in given if k not in live]
    only_live = [k for k in live if k not in given]
    if only_given or only_live:
        raise RuntimeError(f"{_API} requires optimizer.state_dict()-style param group keys to exactly match the "
                           f"live optimizer group keys for group {index}. Keys only in swap-in: {only_given}. "
                           f"Keys only in live: {only_live}.")
    return ids


def _plan(optimizer, parameters, optim_state):
    """``(state by id, [(live group, given group, its tensors)])``, or a RuntimeError."""
    if not optimizer.state:
        raise RuntimeError(f"{_API} requires initialized optimizer state.")
    if not isinstance(optim_state, dict):
        raise RuntimeError(f"{_API} requires a DCP-style optimizer state_dict.")
    state = _checked_state(optim_state.get("state"))
    groups = optim_state.get("param_groups")
    if not isinstance(groups, list):
        raise RuntimeError(f"{_API} requires swapin_optim_state['param_groups'] to be a list of param-group "
                           f"dicts, got {type(groups).__name__}.")
    if len(groups) != len(optimizer.param_groups):
        raise RuntimeError("swapin_optim_state has a different number of parameter groups than the live optimizer.")
    tensors = list(parameters.values())
    plan, used, start = [], set(), 0
    for index, (live, given) in enumerate(zip(optimizer.param_groups, groups)):
        ids = _checked_group(index, live, given)
        if start + len(ids) > len(tensors):
            raise RuntimeError(f"{_API} requires the explicit parameter state to match optimizer.param_groups "
                               "ordering.")
        plan.append((live, given, tensors[start:start + len(ids)]))
        used.update(ids)
        start += len(ids)
    extra = [k for k in state if k not in used]
    if extra:
        raise RuntimeError(f"{_API} requires swapin_optim_state['state'] to be keyed only by packed parameter ids "
                           f"from param_groups[*]['params']; got extra keys {extra!r}.")
    return state, plan


@contextlib.contextmanager
def swap_in_optimizer_params_and_state(optimizer, swapin_parameters, swapin_optim_state):
    """Within the block, ``optimizer`` works on ``swapin_parameters`` and the state and options of
    ``swapin_optim_state``; its own come back on exit (NOTE [Swapped-in optimizer state]).

    Parameters
    ----------
    optimizer : Optimizer
        The live optimizer; its state must already exist (one ``step()`` made it).
    swapin_parameters : dict of str to Tensor
        The tensors to update, in the order of the optimizer's parameters (as
        ``model.named_parameters()`` gives them).
    swapin_optim_state : dict
        ``optimizer.state_dict()``-shaped: ``"state"`` keyed by packed ids, ``"param_groups"``
        with each group's options and ``"params"`` ids. In-place changes to its Tensors are
        seen by the caller; replaced entries are not.

    Examples
    --------
    >>> import lucid
    >>> w = lucid.tensor([1.0, 2.0], dtype=lucid.float64, requires_grad=True)
    >>> opt = lucid.optim.SGD([w], lr=0.1, momentum=0.9)
    >>> w.grad = lucid.ones(2, dtype=lucid.float64); opt.step()
    >>> other = lucid.tensor([5.0, 5.0], dtype=lucid.float64); other.grad = lucid.ones(2, dtype=lucid.float64)
    >>> saved = opt.state_dict()
    >>> with lucid.optim.swap_in_optimizer_params_and_state(opt, {"w": other}, saved):
    ...     opt.step()
    >>> [round(v, 6) for v in other.tolist()], w.tolist()  # momentum 0.9 * 1 + 1: 0.19; w as it was
    ([4.81, 4.81], [0.9, 1.9])
    """
    state, plan = _plan(optimizer, swapin_parameters, swapin_optim_state)
    saved_state = optimizer.state
    saved_groups = [dict(g) for g in optimizer.param_groups]
    try:
        swapped = collections.defaultdict(dict)
        for live, given, tensors in plan:
            live["params"] = tensors
            live.update((k, v) for k, v in given.items() if k != "params")
            for t, packed in zip(tensors, given["params"]):
                swapped[t] = dict(state.get(packed, {}))
        optimizer.state = swapped
        yield
    finally:
        for live, before in zip(optimizer.param_groups, saved_groups):
            live.clear()
            live.update(before)
        optimizer.state = saved_state
