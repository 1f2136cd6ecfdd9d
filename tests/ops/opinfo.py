"""The op database: one ``OpInfo`` per op with sample inputs and a NumPy reference.

Family files (``db_*.py``) each define ``OPS = [OpInfo(...), ...]``; ``test_opdb.py``
runs every generic check over all of them. Adding an op = adding one entry.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable

import numpy as np


@dataclasses.dataclass
class Sample:
    """Positional args (ndarrays become Tensors, anything else passes through) and kwargs."""

    args: tuple
    kwargs: dict = dataclasses.field(default_factory=dict)
    name: str = ""

    def __repr__(self):
        shapes = [a.shape if isinstance(a, np.ndarray) else a for a in self.args]
        return f"Sample({self.name or shapes}, {self.kwargs})"


@dataclasses.dataclass
class OpInfo:
    """How to call, check and sample one op.

    ``op(*tensors, **kwargs)`` is the lucid call; ``ref(*arrays, **kwargs)`` the NumPy
    reference (None: the forward check is skipped for this op, e.g. random ops).
    ``samples(rng)`` returns a list of :class:`Sample` in float64.
    """

    name: str
    op: Callable
    ref: Callable | None
    samples: Callable[[np.random.Generator], list]
    grad: bool = True          # gradcheck / gradgradcheck / jvp checks apply
    gradgrad: bool = True
    vmap: bool = True
    out_index: int | None = None  # for multi-output ops: which output to check for grads
    atol: float = 1e-6
    rtol: float = 1e-5
    grad_atol: float = 1e-5
    grad_rtol: float = 1e-3
    vmap_in_dims: tuple = (0, 1, -1)
    # For ops whose outputs are defined only up to a sign or phase per vector (eigenvectors,
    # singular vectors): maps the outputs (NumPy arrays, in order, any leading batch dims) to
    # a gauge-fixed tuple before values are compared. LAPACK and cuSOLVER, or one matrix and a
    # batch on a GPU, fix the gauge differently; both are right.
    gauge: Callable | None = None
    extra: dict = dataclasses.field(default_factory=dict)


def floats(rng, *shape, low=-1.0, high=1.0):
    """A float64 array; shapes are kept tiny so the whole database stays fast."""
    return rng.uniform(low, high, size=shape).astype(np.float64)


def positive(rng, *shape, low=0.5, high=2.0):
    return rng.uniform(low, high, size=shape).astype(np.float64)


def away_from_ties(rng, *shape):
    """Distinct values (for max/sort-like ops whose derivative jumps at ties)."""
    n = int(np.prod(shape)) if shape else 1
    vals = rng.permutation(n).astype(np.float64) / max(n, 1) + rng.uniform(0, 0.01, n)
    return vals.reshape(shape)


def unary_samples(make=floats):
    """Scalar, vector, matrix and empty inputs for an elementwise unary op."""

    def samples(rng):
        mk = lambda *s: np.asarray(make(rng, *s), dtype=np.float64)  # noqa: E731
        return [Sample((mk(),)), Sample((mk(3),)), Sample((mk(2, 3),)), Sample((mk(0, 2),), name="empty")]

    return samples


def binary_samples(make_x=floats, make_y=floats, scalar_left=False):
    """Same-shape, broadcasting and scalar-operand cases for a binary elementwise op
    (``scalar_left``: also a Python number as the first operand)."""

    def samples(rng):
        cases = [
            Sample((make_x(rng, 2, 3), make_y(rng, 2, 3))),
            Sample((make_x(rng, 2, 3), make_y(rng, 3)), name="broadcast"),
            Sample((make_x(rng, 3, 1), make_y(rng, 1, 2)), name="outer broadcast"),
            Sample((make_x(rng), make_y(rng, 2)), name="scalar tensor"),
            Sample((make_x(rng, 2, 2), 0.7), name="python scalar"),
        ]
        if scalar_left:
            cases.append(Sample((-1.3, make_y(rng, 3, 2)), name="python scalar left"))
        return cases

    return samples


def unit_phases(v):
    """(..., 1, k): per column of ``v`` (..., m, k), the unit sign or phase of its entry of
    largest magnitude (1 for a zero column). Dividing the column by it fixes the gauge."""
    lead = np.take_along_axis(v, np.argmax(np.abs(v), axis=-2)[..., None, :], axis=-2)
    mag = np.abs(lead)
    return np.where(mag > 0, lead / np.where(mag > 0, mag, 1), 1)


def eigh_gauge(w, v):
    """Eigenvalues and eigenvectors with each vector's largest entry made real positive."""
    return w, v / unit_phases(v)


def svd_gauge(u, s, vh):
    """``U S Vh`` with each left vector's largest entry made real positive, and the matching
    row of ``Vh`` turned the other way so the product is unchanged."""
    ph = unit_phases(u)
    return u / ph, s, vh * np.swapaxes(ph, -1, -2)

