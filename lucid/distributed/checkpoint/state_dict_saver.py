"""``lucid.distributed.checkpoint.state_dict_saver`` (PyTorch's module of the same name):
:func:`save`, :func:`async_save` and :class:`AsyncCheckpointerType`.

Examples
--------
>>> from lucid.distributed.checkpoint.state_dict_saver import AsyncCheckpointerType
>>> AsyncCheckpointerType.PROCESS.value
'process'
"""
from enum import Enum

from ._save_load import Stateful, async_save, save, save_state_dict


class AsyncCheckpointerType(Enum):
    """How :func:`async_save` runs in PyTorch: a background thread or process. Lucid's
    ``async_save`` writes before it returns whichever is chosen (see its docstring)."""

    THREAD = "thread"
    PROCESS = "process"


__all__ = ["AsyncCheckpointerType", "Stateful", "async_save", "save", "save_state_dict"]
