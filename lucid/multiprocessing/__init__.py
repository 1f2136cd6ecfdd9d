"""``lucid.multiprocessing`` (``torch.multiprocessing``): Python's ``multiprocessing`` that shares tensors.

Everything of :mod:`multiprocessing` is here (``Process``, ``Queue``, ``get_context`` ...).
Importing this module registers how tensors travel between processes: a CPU tensor sent
through a ``Queue``, a ``Pipe`` or as a ``Process`` argument under ``spawn`` moves to shared
memory (``share_memory_``) and the receiver maps the same memory (NOTE [Shared memory] in
``lucid/_core/shared_memory.py``), so in-place updates are seen on both sides. Device tensors
travel as values. :func:`spawn` starts ``nprocs`` processes running ``fn(i, *args)`` and
raises in the parent when one fails.

Examples
--------
>>> import lucid, lucid.multiprocessing as mp
>>> model = lucid.nn.Linear(2, 1)
>>> _ = model.share_memory()   # then: mp.Process(target=train, args=(model,)) ... (Hogwild)
>>> model.weight.is_shared()
True
"""
from __future__ import annotations

import multiprocessing
from multiprocessing import *  # noqa: F401,F403
from multiprocessing.reduction import ForkingPickler

import numpy as np

from .._core.shared_memory import SharedBuffer, buffer_of
from .._core.tensor import Tensor

# Importing the submodule first binds ``spawn`` to the module; the names imported from it then
# rebind ``spawn`` to the function, and a later ``import lucid.multiprocessing.spawn`` finds the
# module in ``sys.modules`` and leaves this attribute alone (PyTorch's layout).
from .spawn import (ProcessContext, ProcessException, ProcessExitedException, ProcessRaisedException, spawn,
                    start_processes)

__all__ = list(multiprocessing.__all__) + [
    "spawn", "start_processes", "ProcessContext", "ProcessException", "ProcessRaisedException",
    "ProcessExitedException",
    "get_sharing_strategy", "set_sharing_strategy", "get_all_sharing_strategies"]

_STRATEGIES = {"file_descriptor"}
_strategy = ["file_descriptor"]


def get_all_sharing_strategies():
    """The ways tensors can be shared: ``{"file_descriptor"}`` (descriptors passed over sockets)."""
    return set(_STRATEGIES)


def get_sharing_strategy():
    """The current sharing strategy."""
    return _strategy[0]


def set_sharing_strategy(new_strategy):
    """Choose how tensors are shared; Lucid has one strategy, ``"file_descriptor"``."""
    if new_strategy not in _STRATEGIES:
        raise ValueError(f"set_sharing_strategy: unknown strategy {new_strategy!r}; "
                         f"available: {sorted(_STRATEGIES)}")
    _strategy[0] = new_strategy


# ----------------------------------------------------------------- reductions


def _rebuild_shared(dupfd, size, offset, shape, strides, dtype, requires_grad, parameter):
    buf = SharedBuffer.from_fd(dupfd.detach(), size)
    arr = np.ndarray(shape, np.dtype(dtype), buffer=buf, offset=offset, strides=strides)
    from .._core.tensor import _wrap

    if parameter:
        from ..nn.parameter import Parameter

        return Parameter(_wrap(arr), requires_grad=requires_grad)
    t = _wrap(arr)
    t.requires_grad_(requires_grad)
    return t


def _reduce_tensor(t):
    from multiprocessing.reduction import DupFd

    if t.requires_grad and t.grad_fn is not None:
        raise RuntimeError("lucid.multiprocessing: cowardly refusing to send a non-leaf tensor that requires grad "
                           "to another process (its graph can't go along); detach() it first")
    data = t._data
    if data.__class__ is not np.ndarray:  # a device or meta tensor: its own pickling (values)
        return t.__reduce_ex__(2)
    if buffer_of(data) is None:
        if t._base is not None:  # a view of unshared memory: share its values, not its base's
            return t.__reduce_ex__(2)
        t.share_memory_()
        data = t._data
    buf = buffer_of(data)
    offset = data.__array_interface__["data"][0] - buf.address
    from ..nn.parameter import Parameter

    return (_rebuild_shared, (DupFd(buf.fd), len(buf), offset, data.shape, data.strides, data.dtype.str,
                              t.requires_grad, isinstance(t, Parameter)))


def _register():
    from ..nn.parameter import Parameter

    for cls in (Tensor, Parameter):
        ForkingPickler.register(cls, _reduce_tensor)


_register()
