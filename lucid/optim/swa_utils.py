"""Stochastic weight averaging and EMA of weights: ``AveragedModel``, ``SWALR``, ``update_bn``
and the averaging functions (PyTorch's ``torch.optim.swa_utils``)."""
from __future__ import annotations

import copy
import itertools
import math

import numpy as np

from .._core import backend
from ..nn.module import Module
from .lr_scheduler import LRScheduler
from .lr_scheduler_more import _per_group

__all__ = ["AveragedModel", "update_bn", "SWALR", "get_ema_multi_avg_fn", "get_swa_multi_avg_fn",
           "get_ema_avg_fn", "get_swa_avg_fn"]


def _check_decay(decay):
    if not 0.0 <= decay <= 1.0:
        raise ValueError(f"Invalid decay value {decay} provided. Please provide a value in [0,1] range.")


def get_ema_multi_avg_fn(decay=0.999):
    """An in-place exponential moving average over lists of tensors, for ``AveragedModel``.

    ``ema = decay * ema + (1 - decay) * current``.

    Parameters
    ----------
    decay : float
        In ``[0, 1]``.

    Returns
    -------
    callable ``(ema_params, current_params, num_averaged) -> None``

    Examples
    --------
    >>> import lucid
    >>> from lucid.optim.swa_utils import get_ema_multi_avg_fn
    >>> ema, cur = [lucid.zeros(2)], [lucid.ones(2)]
    >>> get_ema_multi_avg_fn(0.75)(ema, cur, 1)
    >>> ema[0].tolist()
    [0.25, 0.25]
    """
    _check_decay(decay)

    @backend.runs_on_operands_device
    def ema_update(ema_params, current_params, _):
        for e, c in zip(ema_params, current_params):
            _assign(e, e._data * decay + c._data * (1 - decay))

    return ema_update


def get_swa_multi_avg_fn():
    """An in-place running mean over lists of tensors: ``avg += (current - avg) / (n + 1)``.

    Returns
    -------
    callable ``(averaged_params, current_params, num_averaged) -> None``

    Examples
    --------
    >>> import lucid
    >>> from lucid.optim.swa_utils import get_swa_multi_avg_fn
    >>> avg, cur = [lucid.ones(2)], [lucid.full((2,), 4.0)]
    >>> get_swa_multi_avg_fn()(avg, cur, 2)
    >>> avg[0].tolist()
    [2.0, 2.0]
    """

    @backend.runs_on_operands_device
    def swa_update(averaged_params, current_params, num_averaged):
        n = _count(num_averaged)
        for a, c in zip(averaged_params, current_params):
            _assign(a, a._data + (c._data - a._data) / (n + 1))

    return swa_update


def get_ema_avg_fn(decay=0.999):
    """Per-tensor EMA ``(ema, current, n) -> decay * ema + (1 - decay) * current``.

    Parameters
    ----------
    decay : float
        In ``[0, 1]``.

    Examples
    --------
    >>> import lucid
    >>> from lucid.optim.swa_utils import get_ema_avg_fn
    >>> get_ema_avg_fn(0.5)(lucid.zeros(1), lucid.ones(1), 1).tolist()
    [0.5]
    """
    _check_decay(decay)

    def ema_update(ema_param, current_param, num_averaged):
        from .._core.grad_mode import no_grad

        with no_grad():
            return decay * ema_param + (1 - decay) * current_param

    return ema_update


def get_swa_avg_fn():
    """Per-tensor running mean ``(avg, current, n) -> avg + (current - avg) / (n + 1)``.

    Examples
    --------
    >>> import lucid
    >>> from lucid.optim.swa_utils import get_swa_avg_fn
    >>> get_swa_avg_fn()(lucid.ones(1), lucid.full((1,), 3.0), 1).tolist()
    [2.0]
    """

    def swa_update(averaged_param, current_param, num_averaged):
        from .._core.grad_mode import no_grad

        with no_grad():
            return averaged_param + (current_param - averaged_param) / (_count(num_averaged) + 1)

    return swa_update


def _count(n):
    return int(n.item()) if hasattr(n, "item") else int(n)


def _assign(t, value):
    """Write ``value`` into tensor ``t`` in place, outside any graph (bumps its version)."""
    value = value._data if hasattr(value, "_data") else value
    # a host value (the average count, a buffer of a CPU model) written into a device tensor
    # is copied there explicitly, as PyTorch's copy_ does
    with backend.on_device(t):
        np.copyto(t._data, backend.on_device_of(value, t._data), casting="unsafe")
    t._version[0] += 1


class AveragedModel(Module):
    """Keeps an average (SWA by default, or an EMA) of a model's parameters.

    ``AveragedModel(model)`` deep-copies ``model``; each ``update_parameters(model)`` folds
    the model's current parameters into the average (the first call copies them) and, unless
    ``use_buffers``, copies the buffers. Calling it runs the averaged copy.

    Parameters
    ----------
    model : Module
        The model to average.
    device : None or str
        Only the CPU exists; accepted for PyTorch compatibility.
    avg_fn : callable, optional
        ``(averaged, current, num_averaged) -> new averaged`` per tensor.
    multi_avg_fn : callable, optional
        ``(averaged_list, current_list, num_averaged) -> None``, updating in place
        (e.g. :func:`get_ema_multi_avg_fn`). At most one of the two.
    use_buffers : bool
        Average the buffers too (e.g. BatchNorm statistics) instead of copying them.

    Examples
    --------
    >>> import lucid
    >>> from lucid.optim.swa_utils import AveragedModel
    >>> net = lucid.nn.Linear(1, 1, bias=False)
    >>> swa = AveragedModel(net)
    >>> for w in (1.0, 2.0, 6.0):
    ...     with lucid.no_grad():
    ...         _ = net.weight.fill_(w)
    ...     swa.update_parameters(net)
    >>> swa.module.weight.item(), swa.n_averaged.item()
    (3.0, 3)
    """

    def __init__(self, model, device=None, avg_fn=None, multi_avg_fn=None, use_buffers=False):
        from .._core.backend import check_device
        from ..ops.creation import tensor

        if avg_fn is not None and multi_avg_fn is not None:
            raise ValueError("AveragedModel: only one of avg_fn and multi_avg_fn should be provided")
        if device is not None:
            check_device(device)
        super().__init__()
        self.module = copy.deepcopy(model)
        self.register_buffer("n_averaged", tensor(0))
        self.avg_fn, self.multi_avg_fn, self.use_buffers = avg_fn, multi_avg_fn, use_buffers

    def forward(self, *args, **kwargs):
        return self.module(*args, **kwargs)

    def _tensors(self, model):
        if self.use_buffers:
            return list(itertools.chain(model.parameters(), model.buffers()))
        return list(model.parameters())

    def update_parameters(self, model):
        """Fold ``model``'s current parameters (and buffers) into the average."""
        mine, theirs = self._tensors(self.module), self._tensors(model)
        if len(mine) != len(theirs):
            raise ValueError(f"AveragedModel.update_parameters: the model has {len(theirs)} tensors to "
                             f"average, the averaged copy {len(mine)}")
        theirs = [t.detach() for t in theirs]
        n = _count(self.n_averaged)
        if n == 0:
            for a, c in zip(mine, theirs):
                _assign(a, c)
        elif self.avg_fn is not None:
            for a, c in zip(mine, theirs):
                _assign(a, self.avg_fn(a.detach(), c, self.n_averaged))
        else:
            (self.multi_avg_fn or get_swa_multi_avg_fn())([a.detach() for a in mine], theirs, self.n_averaged)
        if not self.use_buffers:
            for b_avg, b_model in zip(self.module.buffers(), model.buffers()):
                _assign(b_avg, b_model.detach())
        _assign(self.n_averaged, np.asarray(n + 1))


def update_bn(loader, model, device=None):
    """Recompute BatchNorm running statistics with one pass over ``loader``.

    Each BatchNorm's statistics are reset and then accumulated as a cumulative average
    (``momentum=None``) over the batches, in training mode; afterwards the momenta and the
    model's mode are restored. A batch that is a list or tuple passes its first element.

    Parameters
    ----------
    loader : iterable
        Batches of inputs.
    model : Module
        The model (e.g. ``AveragedModel``) whose BatchNorm statistics to update.
    device : None or str
        Accepted for PyTorch compatibility (CPU only).

    Examples
    --------
    >>> import lucid
    >>> from lucid.optim.swa_utils import update_bn
    >>> bn = lucid.nn.BatchNorm1d(1)
    >>> update_bn([lucid.tensor([[1.0], [3.0]]), lucid.tensor([[5.0], [7.0]])], bn)
    >>> bn.running_mean.tolist()
    [4.0]
    """
    from .._core.grad_mode import no_grad
    from ..nn.normalization import _BatchNorm

    momenta = {}
    for m in model.modules():
        if isinstance(m, _BatchNorm):
            m.reset_running_stats()
            momenta[m] = m.momentum
    if not momenta:
        return
    was_training = model.training
    model.train()
    for m in momenta:
        m.momentum = None
    try:
        with no_grad():
            for batch in loader:
                if isinstance(batch, (list, tuple)):
                    batch = batch[0]
                model(batch)
    finally:
        for m, momentum in momenta.items():
            m.momentum = momentum
        model.train(was_training)


class SWALR(LRScheduler):
    """Anneal each group's rate to ``swa_lr`` over ``anneal_epochs`` (cosine or linear), then hold it.

    Parameters
    ----------
    optimizer : Optimizer
        Whose learning rates are scheduled.
    swa_lr : float or list of float
        The target rate (per group).
    anneal_epochs : int
        Epochs of annealing (0: jump to ``swa_lr`` at once).
    anneal_strategy : {'cos', 'linear'}
    last_epoch : int
        The index of the last epoch (-1: start fresh).

    Examples
    --------
    >>> import lucid
    >>> from lucid.optim.swa_utils import SWALR
    >>> opt = lucid.optim.SGD([lucid.zeros(1, requires_grad=True)], lr=1.0)
    >>> sched = SWALR(opt, swa_lr=0.1, anneal_epochs=2, anneal_strategy="linear")
    >>> lrs = []
    >>> for _ in range(4):
    ...     lrs.append(round(sched.get_last_lr()[0], 4)); opt.step(); sched.step()
    >>> lrs
    [1.0, 0.55, 0.1, 0.1]
    """

    def __init__(self, optimizer, swa_lr, anneal_epochs=10, anneal_strategy="cos", last_epoch=-1):
        for lr, g in zip(_per_group("swa_lr", optimizer, swa_lr), optimizer.param_groups):
            g["swa_lr"] = lr
        if anneal_strategy not in ("cos", "linear"):
            raise ValueError(f"SWALR: anneal_strategy must be one of 'cos' or 'linear', instead got {anneal_strategy!r}")
        if not isinstance(anneal_epochs, int) or anneal_epochs < 0:
            raise ValueError(f"SWALR: anneal_epochs must be equal or greater than 0, got {anneal_epochs!r}")
        self._anneal_strategy, self.anneal_epochs = anneal_strategy, anneal_epochs
        super().__init__(optimizer, last_epoch)

    def anneal_func(self, t):
        return t if self._anneal_strategy == "linear" else (1 - math.cos(math.pi * t)) / 2

    def get_lr(self):
        # PyTorch's recursion: recover the rate the annealing started from, then move on.
        step = self.last_epoch
        if self.anneal_epochs == 0:
            step = max(1, step)
        prev_alpha = self.anneal_func(max(0, min(1, (step - 1) / max(1, self.anneal_epochs))))
        alpha = self.anneal_func(max(0, min(1, step / max(1, self.anneal_epochs))))
        out = []
        for g in self.optimizer.param_groups:
            start = g["swa_lr"] if prev_alpha == 1 else (g["lr"] - prev_alpha * g["swa_lr"]) / (1 - prev_alpha)
            out.append(g["swa_lr"] * alpha + start * (1 - alpha))
        return out
