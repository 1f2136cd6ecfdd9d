"""``lucid.multiprocessing.spawn`` (``torch.multiprocessing.spawn``): starting ``nprocs``
processes and reporting their failures.

Every name is :mod:`lucid.multiprocessing`'s own object; ``SpawnContext`` is PyTorch's
deprecated alias of ``ProcessContext``.

NOTE [spawn, the module and the function]
Python's import sets ``lucid.multiprocessing.spawn`` to this module the first time it is
imported, replacing the *function* of that name (PyTorch avoids it by importing the module
inside its package first). So that ``mp.spawn(fn, nprocs=2)`` keeps working after
``import lucid.multiprocessing.spawn``, this module is callable: calling it calls :func:`spawn`.

Examples
--------
>>> import lucid.multiprocessing as mp
>>> from lucid.multiprocessing.spawn import ProcessRaisedException, spawn
>>> ProcessRaisedException is mp.ProcessRaisedException
True
>>> callable(mp.spawn)   # the function, or this (callable) module once it was imported
True
"""
from __future__ import annotations

import sys
import types

from . import ProcessContext, ProcessExitedException, ProcessRaisedException, spawn, start_processes

SpawnContext = ProcessContext

__all__ = ["ProcessContext", "ProcessExitedException", "ProcessRaisedException", "SpawnContext", "spawn",
           "start_processes"]


class _CallableModule(types.ModuleType):
    """This module's class: calling it runs :func:`spawn`. See NOTE [spawn, the module and the function]."""

    def __call__(self, fn, args=(), nprocs=1, join=True, daemon=False, start_method="spawn"):
        return spawn(fn, args, nprocs, join, daemon, start_method)


sys.modules[__name__].__class__ = _CallableModule
