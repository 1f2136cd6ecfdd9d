"""``lucid.types`` (``torch.types``): type aliases for annotations.

``Number``, ``Device``, ``FileLike`` and the ``*LikeType`` unions are plain ``typing`` unions
(for annotations and ``isinstance`` checks through ``typing.get_args``); ``Storage`` is the
union of Lucid's storage classes.

Examples
--------
>>> import lucid, typing
>>> from lucid.types import Number
>>> typing.get_args(Number)
(<class 'int'>, <class 'float'>, <class 'bool'>)
"""
from __future__ import annotations

import os
from typing import IO, Union

from ._core.backend import device as _device
from ._core.dtypes import dtype as _dtype  # noqa: F401  (torch.types' private alias)
from ._core.size import Size
from ._core.tensor import Tensor  # noqa: F401  (torch.types has it too)
from .ops.storage import TypedStorage, UntypedStorage
from .ops.torch_misc import SymBool, SymFloat, SymInt

__all__ = ["Device", "FileLike", "Number", "Storage"]

Number = Union[int, float, bool]
Device = Union[_device, str, int, None]
FileLike = Union[str, os.PathLike, IO[bytes]]
Storage = Union[UntypedStorage, TypedStorage]

IntLikeType = Union[int, SymInt]
FloatLikeType = Union[float, SymFloat]
BoolLikeType = Union[bool, SymBool]
py_sym_types = (SymInt, SymFloat, SymBool)
PySymType = Union[SymInt, SymFloat, SymBool]

_int = int
_float = float
_bool = bool
_complex = complex
_size = Union[Size, list, tuple]  # torch.types' private aliases, which some annotations import
