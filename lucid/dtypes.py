"""``lucid.dtypes``: the dtype objects in one namespace, as upstream Lucid 3 has it
(See NOTE [Lucid 3 names]); ``float``, ``int`` and ``bool`` are ``float32``, ``int32`` and
``bool_`` here (PyTorch's ``torch.float`` / ``torch.int`` / ``torch.bool``), never the builtins.

Examples
--------
>>> import lucid.dtypes as dt
>>> dt.float is dt.float32, dt.int is dt.int32, dt.bool is dt.bool_
(True, True, True)
"""
from __future__ import annotations

import lucid as _lucid

_NAMES = ("float16", "float32", "float64", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32",
          "uint64", "complex64", "complex128", "half", "double", "short", "long", "cfloat", "cdouble", "dtype")
globals().update({n: getattr(_lucid, n) for n in _NAMES if hasattr(_lucid, n)})
bool_ = _lucid.bool
bool = _lucid.bool  # noqa: A001  (a dtype, as lucid.bool)
float = _lucid.float32  # noqa: A001
int = _lucid.int32  # noqa: A001
__all__ = [n for n in _NAMES if n in globals()] + ["bool_"]  # not float/int/bool: `import *` keeps the builtins


def __getattr__(name):
    if name == "bfloat16":  # loads ml_dtypes on first use, as lucid.bfloat16 (NOTE [bfloat16])
        return _lucid.bfloat16
    raise AttributeError(f"module 'lucid.dtypes' has no attribute {name!r}")
