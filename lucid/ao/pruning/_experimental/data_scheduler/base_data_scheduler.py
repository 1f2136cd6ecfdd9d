"""``BaseDataScheduler`` (PyTorch's ``torch.ao.pruning._experimental.data_scheduler``)."""
from __future__ import annotations

import abc

from ...scheduler.base_scheduler import counting_step, warn_if_stepped_first
from ..data_sparsifier import BaseDataSparsifier

__all__ = ["BaseDataScheduler"]


class BaseDataScheduler:
    """Base class of the schedulers of one config entry (``schedule_param``) of a data
    sparsifier: subclasses implement ``get_schedule_param()``, a dict ``{name: new value}``.
    Steps are counted as NOTE [Scheduler step counting] says; the constructor takes the
    first step.

    Parameters
    ----------
    data_sparsifier : BaseDataSparsifier
    schedule_param : str
        The config key scheduled (e.g. ``"sparsity_level"``); its values at construction are
        ``base_param``.
    last_epoch : int
    verbose : bool

    Examples
    --------
    >>> import lucid
    >>> from lucid.ao.pruning._experimental.data_sparsifier import DataNormSparsifier
    >>> from lucid.ao.pruning._experimental.data_scheduler import BaseDataScheduler
    >>> class Linear(BaseDataScheduler):
    ...     def get_schedule_param(self):
    ...         return {name: base * min(1.0, self.last_epoch / 4) for name, base in self.base_param.items()}
    >>> sparsifier = DataNormSparsifier([("x", lucid.randn(4, 4))], sparsity_level=0.8)
    >>> scheduler = Linear(sparsifier, "sparsity_level")
    >>> sparsifier.step(); scheduler.step()
    >>> scheduler.get_last_param()
    {'x': 0.2}
    """

    def __init__(self, data_sparsifier, schedule_param, last_epoch=-1, verbose=False):
        if not isinstance(data_sparsifier, BaseDataSparsifier):
            raise TypeError(f"{type(data_sparsifier).__name__} is not an instance of "
                            "lucid.ao.pruning._experimental.data_sparsifier.BaseDataSparsifier")
        self.data_sparsifier = data_sparsifier
        self.schedule_param = schedule_param
        self.base_param = {name: config.get(schedule_param, None)
                           for name, config in self.data_sparsifier.data_groups.items()}
        self.last_epoch = last_epoch
        self.data_sparsifier.step = counting_step(self.data_sparsifier.step)
        self.data_sparsifier._step_count = 0
        self._step_count = 0
        self.verbose = verbose
        self._get_sp_called_within_step = False
        self.step()

    @abc.abstractmethod
    def get_schedule_param(self):
        """``{name: new value of schedule_param}`` at epoch ``self.last_epoch``."""
        raise NotImplementedError(f"{type(self).__name__}.get_schedule_param is not implemented")

    def __repr__(self):
        return (f"{self.__class__.__name__} (\nData Sparsifier {self.data_sparsifier}\n"
                f"    {self.schedule_param}: {self.base_param}\n)")

    def state_dict(self):
        """Every attribute but the data sparsifier (save the sparsifier's state separately)."""
        return {key: value for key, value in self.__dict__.items() if key != "data_sparsifier"}

    def load_state_dict(self, state_dict):
        """Take back the attributes of :meth:`state_dict` (restore the sparsifier first)."""
        self.__dict__.update(state_dict)

    def get_last_param(self):
        """``{name: value}`` of ``schedule_param`` after the last step."""
        return self._last_param

    def step(self):
        """Advance ``last_epoch`` and write ``get_schedule_param()`` into the sparsifier's configs."""
        if self._step_count == 1:
            warn_if_stepped_first(self.data_sparsifier.step, self.data_sparsifier._step_count, "data_sparsifier")
        self._step_count += 1
        self._get_sp_called_within_step = True
        try:
            self.last_epoch += 1
            updated = self.get_schedule_param()
        finally:
            self._get_sp_called_within_step = False
        for name, param in updated.items():
            self.data_sparsifier.data_groups[name][self.schedule_param] = param
            if self.verbose:
                print(f"Adjusting {self.schedule_param} for group {name} to {param}")
        self._last_param = {name: config.get(self.schedule_param, None)
                            for name, config in self.data_sparsifier.data_groups.items()}
        self.data_sparsifier.enable_mask_update = True
