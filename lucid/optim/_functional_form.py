"""The functional forms of the optimizers (``lucid.optim.adamw.adamw`` ...), PyTorch's
``torch.optim.<name>.<name>(params, grads, <state lists>, state_steps, *, <options>)``.

NOTE [Functional optimizer forms]
A functional form is one step of its optimizer class on state the caller holds: lists of
buffers (Tensors, changed in place) and ``state_steps`` (one-element Tensors, incremented in
place). Rather than a second copy of every update formula, it runs the class's own rule: a
throw-away optimizer over the parameters, whose ``state[p]`` is filled with the caller's
buffers (the very Tensors, so a rule's in-place update reaches them) and the step counts as
numbers (NOTE [Optimizer updates]); after ``_step_one``, a buffer the rule replaced by a new
array is copied back into the caller's Tensor, and numbers (step, NAdam's ``mu_product``,
ASGD's ``eta``/``mu``) are written into theirs. So the functional form and the class can never
disagree. All arguments are checked before any parameter or buffer changes.
"""
from __future__ import annotations

from .._core import backend
from .._core.tensor import Tensor


# state key -> the functional form's parameter name (for errors)
_ARG_NAMES = {"exp_avg": "exp_avgs", "exp_avg_sq": "exp_avg_sqs", "max_exp_avg_sq": "max_exp_avg_sqs",
              "exp_inf": "exp_infs", "mu_product": "mu_products", "square_avg": "square_avgs",
              "grad_avg": "grad_avgs", "momentum_buffer": "momentum_buffer_list", "sum": "state_sums",
              "acc_delta": "acc_deltas", "ax": "axs", "mu": "mus", "eta": "etas", "prev": "prevs",
              "step_size": "step_sizes"}


def _check_lists(api, params, lists):
    """Every state list has one entry per parameter (``None`` allowed where unused)."""
    if not isinstance(params, (list, tuple)):
        raise TypeError(f"{api}: params must be a list of Tensors, got {type(params).__name__}")
    for key, values in lists.items():
        name = _ARG_NAMES.get(key, key)
        if values is None:
            continue
        if len(values) != len(params):
            raise ValueError(f"{api}: {name} has {len(values)} entries for {len(params)} params")
        for v in values:
            if v is not None and not isinstance(v, Tensor):
                raise TypeError(f"{api}: {name} must hold Tensors, got {type(v).__name__}")


def _number(t):
    return t.item() if isinstance(t, Tensor) else t


def _write_number(target, value):
    """Store ``value`` into the caller's one-element Tensor ``target`` in place."""
    from .._core.grad_mode import no_grad

    with no_grad():
        target.fill_(value)


def functional_step(cls, api, options, params, grads, buffers, numbers, state_steps, maximize=False):
    """Run one ``cls`` update over ``params`` with the caller's state.

    Parameters
    ----------
    cls : type
        The optimizer class whose ``_update`` rule runs.
    api : str
        The public name, for errors (``"adamw"``).
    options : dict
        Constructor keywords of ``cls`` (``lr``, ``betas`` ...).
    params, grads : list of Tensor
        Parameters (updated in place) and their gradients.
    buffers : dict
        ``state key -> list of Tensor`` (or None when unused): updated in place.
    numbers : dict
        ``state key -> list of one-element Tensor``: state the rule keeps as numbers.
    state_steps : list of Tensor
        Step counts, incremented in place.
    maximize : bool
        Ascend instead.
    """
    lists = dict(grads=grads, state_steps=state_steps, **buffers, **numbers)
    _check_lists(api, params, lists)
    if grads is None or state_steps is None:
        raise TypeError(f"{api}: grads and state_steps are required")
    if not params:
        return
    opt = cls(list(params), maximize=maximize, **options)
    group = opt.param_groups[0]
    for i, (p, g) in enumerate(zip(params, grads)):
        state = {"step": int(_number(state_steps[i]))}
        for key, values in buffers.items():
            if values is not None and values[i] is not None:
                state[key] = values[i]
        for key, values in numbers.items():
            if values is not None:
                state[key] = _number(values[i])
        opt.state[p] = state
        with backend.on_device(p):  # as Optimizer.step (NOTE [Several devices])
            opt._step_one(p, g, group)
            _copy_back(state, i, buffers, numbers, state_steps)


def _copy_back(state, i, buffers, numbers, state_steps):
    from .._core.grad_mode import no_grad

    with no_grad():
        for key, values in buffers.items():
            if values is None or values[i] is None:
                continue
            new = state.get(key)
            if new is not None and new is not values[i]:  # the rule made a new array (a replaced buffer)
                values[i].copy_(new)
    for key, values in numbers.items():
        if values is not None:
            _write_number(values[i], state[key])
    _write_number(state_steps[i], state["step"])
