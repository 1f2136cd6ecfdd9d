"""bfloat16 and float8 arithmetic: ops on such tensors compute in float32 (NOTE [bfloat16],
NOTE [float8] in ``lucid/_core/dtypes.py``).

``install()`` (called by ``lucid._core.dtypes.enable_bfloat16`` on the first use of
``lucid.bfloat16``) puts :func:`compute_in_float32` into ``bind``'s slow branch. A program that
never touches bfloat16 never loads this module and pays nothing; one that does pays one scan of
the arguments per op.

Why float32: ml_dtypes' NumPy loops compute element by element without BLAS and round every
partial sum to 8 bits of mantissa (a sum of 1024 ones in bfloat16 stops at 256). PyTorch's CPU
kernels load bfloat16, compute and accumulate in float32 ("opmath") and round the result once;
running the float32 op between two casts gives the same numbers, and the casts carry the
gradients: the graph records cast(bf16 -> f32), the op, cast(f32 -> bf16), so gradients of
bfloat16 tensors are bfloat16, as in PyTorch, and every transform sees ordinary float32 ops.

Examples
--------
>>> import lucid
>>> x = lucid.ones(1024, dtype=lucid.bfloat16)
>>> x.sum()  # accumulated in float32, then rounded once
tensor(1024., dtype=lucid.bfloat16)
"""
from __future__ import annotations

import numpy as np

from ._core import dtypes, primitive
from ._core.grad_mode import ACTIVE_TRACES
from ._core.tensor import Tensor

_FLOAT32 = np.dtype(np.float32)
# Ops that move or reinterpret bfloat16 elements without computing: they run on the bfloat16
# arrays as they are (a view must stay a view of its base; a cast is the conversion itself).
_NATIVE = frozenset({"cast"})


def _upcast(a, low):
    if isinstance(a, Tensor):
        if a._data.dtype is low:
            return _cast(a, _FLOAT32)
        return a
    if a.__class__ is np.ndarray and a.dtype is low:
        return a.astype(np.float32)
    return a


def _round_back(out, low):
    if isinstance(out, Tensor):
        return _cast(out, low) if out._data.dtype is _FLOAT32 else out
    if out.__class__ is tuple:
        return tuple(_round_back(o, low) for o in out)
    return out


def compute_in_float32(prim, args, params):
    """``prim`` on ``args`` computed in float32 where an operand is bfloat16 or float8 (the
    first such operand's dtype is the one results round back to: ops promote their operands
    before binding, so they share it); None otherwise."""
    low_dtypes = dtypes.ML_FLOATS
    for a in args:
        arr = a._data if isinstance(a, Tensor) else a
        dt = getattr(arr, "dtype", None)
        if dt is not None and dt in low_dtypes:
            low = dt
            break
    else:
        return None
    if prim.is_view or prim.name in _NATIVE:
        return None
    upcast = tuple(_upcast(a, low) for a in args)
    autocast = primitive.AUTOCAST_HOOK[0]
    if autocast is None:
        out = primitive.bind(prim, upcast, params)
    else:  # inside an autocast region, whose bfloat16 casts this computes: not cast down again
        with autocast.suspended():
            out = primitive.bind(prim, upcast, params)
    wanted = params.get("dtype")
    if wanted is not None and wanted is not low:  # the op was asked for a dtype: it keeps it
        return out
    return _round_back(out, low)


_cast = None


def install():
    """Put the hook in bind (once; it holds one permanent count in ACTIVE_TRACES)."""
    global _cast
    if primitive.BFLOAT16_HOOK[0] is not None:
        return
    from .ops.elementwise.arithmetic import cast

    _cast = cast
    primitive.BFLOAT16_HOOK[0] = compute_in_float32
    ACTIVE_TRACES[0] += 1
