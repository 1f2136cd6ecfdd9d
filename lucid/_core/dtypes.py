"""Dtypes and PyTorch's type-promotion rule, in one table.

Lucid's dtypes *are* NumPy dtype objects (``lucid.float32 is np.dtype("float32")``),
so no conversion is ever paid on the hot path.
"""
from __future__ import annotations

import builtins

import numpy as np

float16 = half = np.dtype("float16")
float32 = float = np.dtype("float32")
float64 = double = np.dtype("float64")
int8 = np.dtype("int8")
int16 = short = np.dtype("int16")
int32 = int = np.dtype("int32")
int64 = long = np.dtype("int64")
uint8 = np.dtype("uint8")
bool_ = np.dtype("bool")
complex64 = np.dtype("complex64")
complex128 = np.dtype("complex128")

_SUPPORTED = {float16, float32, float64, int8, int16, int32, int64, uint8, bool_, complex64, complex128}

_default_float = float32


def get_default_dtype() -> np.dtype:
    """The dtype Python floats become (float32 unless changed)."""
    return _default_float


def set_default_dtype(dtype) -> None:
    """Set the dtype Python floats and ``float``-producing ops default to."""
    global _default_float
    dtype = np.dtype(dtype)
    if dtype.kind != "f":
        raise TypeError(f"set_default_dtype: expected a floating dtype, got {dtype}")
    _default_float = dtype


def to_dtype(dtype) -> np.dtype:
    """Normalise ``dtype`` (lucid/NumPy dtype, type, or string) to a supported dtype."""
    if dtype is None:
        return None
    if dtype is builtins.bool:
        return bool_
    if dtype is builtins.float:
        return float64
    if dtype is builtins.int:
        return int64
    d = np.dtype(dtype)
    if d not in _SUPPORTED:
        raise TypeError(f"dtype {d} is not supported by lucid")
    return d


def category(dtype: np.dtype) -> int:
    """0 bool, 1 integer, 2 floating, 3 complex: the order of PyTorch's promotion categories."""
    k = dtype.kind
    return 0 if k == "b" else 1 if k in "iu" else 2 if k == "f" else 3


def is_floating(dtype: np.dtype) -> bool:
    return dtype.kind == "f"


def is_differentiable(dtype: np.dtype) -> bool:
    return dtype.kind in "fc"


_SCALAR_CATEGORY = {builtins.bool: 0, builtins.int: 1, builtins.float: 2, builtins.complex: 3}


def scalar_category(value) -> int:
    """Category of a Python scalar (bool, int, float, complex); -1 for anything else."""
    return _SCALAR_CATEGORY.get(type(value), -1)


# NOTE [Type promotion]
# PyTorch's rule, which Lucid follows: operands fall in three priority groups —
# tensors with dims, zero-dim tensors, Python scalars. The result category (bool <
# int < float < complex) is the highest over all operands; within the winning
# category, the dtype comes from the highest-priority group that reaches it, and a
# Python scalar that alone reaches it yields the default dtype (float32, int64;
# complex64, or complex128 when the default float is float64).
# Complex keeps the *width* of a higher-priority float (c10's combine_categories):
# float64 tensor + complex64 0-dim tensor or 1j -> complex128; float32 tensor +
# complex128 0-dim -> complex64; within one group float64 + complex64 -> complex128
# and int + complex64 -> complex64 (NumPy would widen to complex128).
# NumPy differs (int64 + float16 -> float64; int / int -> float64), so binary ops
# call ``result_type`` instead of trusting NumPy.
def _complex_of(dt):
    """The complex dtype as wide as the floating dtype ``dt`` (float16 -> complex64)."""
    return complex128 if dt == float64 else complex64


def default_complex():
    """The dtype Python complex scalars become: complex64, complex128 if the default float is float64."""
    return complex128 if _default_float == float64 else complex64


def _same_group(cur, cat, dt):
    """Combine two operands of one priority group (PyTorch's promoteTypes)."""
    if cat > cur[0]:
        if cat == 3 and cur[0] == 2 and cur[1] is not None and dt is not None:
            return (3, np.promote_types(cur[1], dt))
        return (cat, dt)
    if cat == cur[0] and dt is not None and cur[1] is not None:
        return (cat, np.promote_types(cur[1], dt))
    if cat == 2 and cur[0] == 3 and dt is not None and cur[1] is not None:
        return (3, np.promote_types(cur[1], dt))
    return cur


def result_type(*operands) -> np.dtype:
    """PyTorch-style promoted dtype of tensors (objects with ``dtype``/``ndim``) and scalars."""
    best = [None, None, None]  # per group: (category, dtype)
    for op in operands:
        dt = getattr(op, "dtype", None)
        if dt is None:
            cat = scalar_category(op)
            if cat < 0:
                raise TypeError(f"unsupported operand type {type(op).__name__}")
            group, dt = 2, None
        else:
            cat = category(dt)
            group = 0 if op.ndim else 1
        cur = best[group]
        best[group] = (cat, dt) if cur is None else _same_group(cur, cat, dt)
    top = max(b[0] for b in best if b is not None)
    for b in best:
        if b is not None and b[0] == top and b[1] is not None:
            res = b[1]
            break
    else:
        res = (bool_, int64, _default_float, default_complex())[top]
    if top == 3:  # a float of a higher-priority group keeps its width. See NOTE [Type promotion]
        for b in best:
            if b is not None and b[0] == 3 and b[1] is not None:
                break
            if b is not None and b[0] == 2 and b[1] is not None:
                return _complex_of(b[1])
    return res
