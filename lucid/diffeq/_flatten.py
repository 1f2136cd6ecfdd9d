"""Tuple states: flatten to one 1-D tensor for the solvers, and back (See NOTE [ODE solvers])."""
from __future__ import annotations

import math

import lucid
from .._core.tensor import Tensor


def check_state(api, y0):
    """Return ``y0`` as a tuple of floating tensors, or raise naming ``api``."""
    parts = tuple(y0)
    if not parts:
        raise ValueError(f"{api}: y0 must be a Tensor or a non-empty tuple of Tensors")
    for i, p in enumerate(parts):
        if not isinstance(p, Tensor):
            raise TypeError(f"{api}: y0[{i}] must be a Tensor, got {type(p).__name__}")
    return parts


def flatten(parts):
    """Concatenate tensors into one 1-D tensor (dtypes promoted, as ``lucid.cat`` does)."""
    return lucid.cat([p.reshape(-1) for p in parts], dim=0)


def unflatten(flat, shapes, lead=()):
    """Split the last axis of ``flat`` into tensors of ``lead + shape`` for each shape."""
    out, start = [], 0
    for shape in shapes:
        size = math.prod(shape)
        out.append(flat[..., start:start + size].reshape(*lead, *shape))
        start += size
    return tuple(out)


def wrap_rhs(api, func, shapes):
    """Turn ``func(t, tuple) -> tuple`` into ``func(t, flat) -> flat``, checking the output."""

    def flat_func(t, y):
        out = func(t, unflatten(y, shapes))
        if not isinstance(out, (tuple, list)) or len(out) != len(shapes):
            got = f"{len(out)} elements" if isinstance(out, (tuple, list)) else type(out).__name__
            raise ValueError(f"{api}: func must return a tuple of {len(shapes)} Tensors for a "
                             f"tuple state, got {got}")
        for i, (o, shape) in enumerate(zip(out, shapes)):
            if not isinstance(o, Tensor) or tuple(o.shape) != tuple(shape):
                got = tuple(o.shape) if isinstance(o, Tensor) else type(o).__name__
                raise ValueError(f"{api}: func returned {got} for state element {i}, expected "
                                 f"shape {tuple(shape)}")
        return flatten(out)

    return flat_func
