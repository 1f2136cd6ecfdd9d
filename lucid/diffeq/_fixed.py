"""Fixed-grid explicit Runge-Kutta integration (See NOTE [ODE solvers])."""
from __future__ import annotations

import math

from .._core.tensor import Tensor
from ._problem import options_of
from ._stepper import hermite_fit, poly_eval, rk_step

_OPTIONS = ("step_size", "grid_constructor", "interp", "perturb")


def _fixed_options(prob, name, options, extra=()):
    opts = options_of(prob.api, name, options, _OPTIONS + tuple(extra))
    if opts.pop("perturb", False):
        raise ValueError(f"{prob.api}: options['perturb']=True is not supported (func is never "
                         "called with a perturb argument); only the default False is")
    return opts


def _integration_grid(prob, opts):
    """``(host floats, time tensors)`` of the grid the solver steps on."""
    grid, tt, api = prob.grid, prob.tt, prob.api
    if opts.get("step_size") is not None and opts.get("grid_constructor") is not None:
        raise ValueError(f"{api}: give step_size or grid_constructor, not both")
    if opts.get("grid_constructor") is not None:
        g = opts["grid_constructor"](prob._func, prob.y0, tt)
        if not isinstance(g, Tensor) or g.dim() != 1 or g.shape[0] < 2:
            raise ValueError(f"{api}: grid_constructor must return a 1-D Tensor of >= 2 times")
        floats = [float(v) for v in g.detach().tolist()]
        if floats[0] != grid[0] or floats[-1] != grid[-1]:
            raise ValueError(f"{api}: grid_constructor's grid must start at t[0]={grid[0]} "
                             f"and end at t[-1]={grid[-1]}, got {floats[0]} .. {floats[-1]}")
        if any((b - a) * prob.direction <= 0 for a, b in zip(floats, floats[1:])):
            raise ValueError(f"{api}: grid_constructor's grid must be strictly monotone in "
                             "the direction of t")
        g = g.to(tt.dtype)
        return floats, [g[i] for i in range(len(floats))]
    step = float(opts["step_size"])
    if not step > 0 or not math.isfinite(step):
        raise ValueError(f"{api}: step_size must be a positive finite float, got {step}")
    span = abs(grid[-1] - grid[0])
    n = max(1, math.ceil(span / step - 1e-9))
    floats = [grid[0] + prob.direction * step * k for k in range(n)] + [grid[-1]]
    return floats, [prob.time(x) for x in floats[:-1]] + [tt[-1]]


def rk_stepper(prob, tab):
    """``make_step`` for a tableau: ``step(k, y) -> (y_{k+1}, f(t_k, y))``."""

    def make_step(opts, floats, times):
        def step(k, y):
            y1, ks = rk_step(prob.f, tab, times[k], y, times[k + 1] - times[k])
            return y1, ks[0]

        return step

    return make_step


def integrate(prob, name, options, make_step, extra=()):
    """States at every time of ``prob.tt``: one step per interval of ``t``, or steps on the
    ``step_size`` / ``grid_constructor`` grid interpolated back to ``t``."""
    opts = _fixed_options(prob, name, options, extra)
    tt, y = prob.tt, prob.y0
    if opts.get("step_size") is None and opts.get("grid_constructor") is None:
        times = [tt[i] for i in range(len(prob.grid))]
        step, traj = make_step(opts, list(prob.grid), times), [y]
        for k in range(len(prob.grid) - 1):
            y, _ = step(k, y)
            prob.record(traj, y)
        return traj
    interp = opts.get("interp", "linear")
    if interp not in ("linear", "cubic"):
        raise ValueError(f"{prob.api}: interp must be 'linear' or 'cubic', got {interp!r}")
    floats, times = _integration_grid(prob, opts)
    step, traj, k, y1 = make_step(opts, floats, times), [y], 0, None
    for j in range(1, len(prob.grid)):
        target = prob.grid[j]
        while y1 is None or (floats[k + 1] - target) * prob.direction < 0:
            if y1 is not None:
                k, y = k + 1, y1
            y1, f0 = step(k, y)
        h = times[k + 1] - times[k]
        s = (tt[j] - times[k]) / h
        if interp == "linear":
            prob.record(traj, y + (y1 - y) * s)
        else:
            f1 = prob.f(times[k + 1], y1)
            prob.record(traj, poly_eval(hermite_fit(y, y1, f0, f1, h), s))
    return traj


def segments(prob, tab, options):
    """Dense output: one ``(t_start, t_end, start tensor, h tensor, coeffs)`` per grid step."""
    opts = _fixed_options(prob, tab.name, options)
    if opts.get("step_size") is None and opts.get("grid_constructor") is None:
        floats, times = list(prob.grid), [prob.tt[i] for i in range(len(prob.grid))]
    else:
        floats, times = _integration_grid(prob, opts)
    if opts.get("interp", "linear") not in ("linear", "cubic"):
        raise ValueError(f"{prob.api}: interp must be 'linear' or 'cubic', got {opts['interp']!r}")
    out, y = [], prob.y0
    for k in range(len(floats) - 1):
        h = times[k + 1] - times[k]
        y1, ks = rk_step(prob.f, tab, times[k], y, h)
        if opts.get("interp", "linear") == "linear":
            coeffs = (y, y1 - y)
        else:
            coeffs = hermite_fit(y, y1, ks[0], prob.f(times[k + 1], y1), h)
        out.append((floats[k], floats[k + 1], times[k], h, coeffs))
        y = y1
    return out


class _Step:
    """One fixed step, with the interface of ``_adaptive._Segment`` (for event detection)."""

    def __init__(self, t0, t1, start, h, y1, coeffs):
        self.t0, self.t1, self.start, self.h, self.y1, self.coeffs = t0, t1, start, h, y1, coeffs

    def at(self, t):
        return poly_eval(self.coeffs, (t - self.start) / self.h)


def unbounded_steps(prob, tab, options):
    """Steps of ``options["step_size"]`` from ``t[0]`` without end (event detection)."""
    opts = _fixed_options(prob, tab.name, options)
    step = opts.get("step_size")
    if step is None or not float(step) > 0 or not math.isfinite(float(step)):
        raise ValueError(f"{prob.api}: event detection with the fixed-step method {tab.name!r} "
                         f"needs options['step_size'] > 0, got {step!r}")
    interp = opts.get("interp", "linear")
    if interp not in ("linear", "cubic") or opts.get("grid_constructor") is not None:
        raise ValueError(f"{prob.api}: event detection takes step_size and interp "
                         "('linear' or 'cubic') only")
    y, k, h = prob.y0, 0, prob.const(prob.direction * float(step))
    while True:
        t0, t1 = (prob.grid[0] + prob.direction * float(step) * i for i in (k, k + 1))
        start = prob.time(t0)
        y1, ks = rk_step(prob.f, tab, start, y, h)
        if interp == "linear":
            coeffs = (y, y1 - y)
        else:
            coeffs = hermite_fit(y, y1, ks[0], prob.f(prob.time(t1), y1), h)
        yield _Step(t0, t1, start, h, y1, coeffs)
        y, k = y1, k + 1
