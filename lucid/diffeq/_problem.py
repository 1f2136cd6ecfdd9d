"""The validated problem every solver works on (See NOTE [ODE solvers])."""
from __future__ import annotations

import math

import lucid
from .._core.tensor import Tensor


class Problem:
    """``dy/dt = func(t, y)`` from ``y0`` over the output times ``tt`` (host copy ``grid``).

    ``f`` calls ``func`` and checks what it returns, so a wrong right-hand side is reported
    against ``func`` (naming the public API) rather than deep inside a stage combination.
    """

    def __init__(self, api, func, y0, tt, grid):
        self.api, self._func, self.y0, self.tt, self.grid = api, func, y0, tt, grid
        self.shape, self.device = tuple(y0.shape), y0.device
        self.direction = 1.0 if grid[-1] > grid[0] else -1.0
        self.nfe = 0
        self.norm = None  # the adaptive error norm; None: rms (set by the caller for tuples)
        self.keep_all = True  # False: keep only the latest output state (return_trajectory=False)

    def record(self, traj, y):
        """Append the output state ``y``, or replace the last one when not keeping them all."""
        if self.keep_all:
            traj.append(y)
        else:
            traj[-1:] = [y]

    def f(self, t, y):
        out = self._func(t, y)
        self.nfe += 1
        if not isinstance(out, Tensor):
            raise TypeError(f"{self.api}: func must return a Tensor, got {type(out).__name__}")
        if tuple(out.shape) != self.shape:
            raise ValueError(f"{self.api}: func returned shape {tuple(out.shape)} but y0 has "
                             f"shape {self.shape}")
        if out.device != self.device:
            raise ValueError(f"{self.api}: func returned a tensor on {out.device} but y0 is on "
                             f"{self.device}")
        return out

    def time(self, x):
        """The time ``x`` (a host float) as a tensor tied to ``t[0]`` (so ``d/dt[0]`` flows)."""
        return self.tt[0] + (x - self.grid[0])

    def const(self, x):
        return lucid.tensor(float(x), dtype=self.tt.dtype, device=self.device)


def options_of(api, method, options, accepted):
    """``options`` as a dict, rejecting keys the method does not take."""
    opts = dict(options or {})
    unknown = sorted(set(opts) - set(accepted))
    if unknown:
        raise ValueError(f"{api}: unknown option(s) {unknown} for method {method!r}; "
                         f"accepted: {sorted(accepted)}")
    return opts


def resolve_grid(api, t):
    """Host floats of ``t``, read once (``tolist``); checks 1-D, finite, strictly monotone."""
    if isinstance(t, Tensor):
        if t.dim() != 1:
            raise ValueError(f"{api}: t must be 1-D, got shape {tuple(t.shape)}")
        grid = [float(v) for v in t.detach().tolist()]
    else:
        grid = [float(v) for v in t]
    if len(grid) < 2:
        raise ValueError(f"{api}: t must hold at least 2 time points, got {len(grid)}")
    if not all(math.isfinite(v) for v in grid):
        raise ValueError(f"{api}: t must be finite, got {grid}")
    up = grid[1] > grid[0]
    for i, (a, b) in enumerate(zip(grid, grid[1:])):
        if a == b or (b > a) != up:
            raise ValueError(f"{api}: t must be strictly increasing or strictly decreasing; "
                             f"t[{i}]={a!r}, t[{i + 1}]={b!r}")
    return grid
