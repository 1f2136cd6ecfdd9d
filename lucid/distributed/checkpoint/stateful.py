"""``lucid.distributed.checkpoint.stateful`` (PyTorch's module of the same name): the
:class:`Stateful` protocol that :func:`~lucid.distributed.checkpoint.save` and
:func:`~lucid.distributed.checkpoint.load` go through.

Examples
--------
>>> from lucid.distributed.checkpoint.stateful import Stateful
>>> class Counter(Stateful):
...     def __init__(self):
...         self.n = 0
...     def state_dict(self):
...         return {"n": self.n}
...     def load_state_dict(self, state_dict):
...         self.n = state_dict["n"]
>>> isinstance(Counter(), Stateful)
True
"""
from ._save_load import Stateful

__all__ = ["Stateful"]
