"""Adaptive (embedded-pair) Runge-Kutta integration (See NOTE [ODE solvers]).

The step-size decisions are the only host reads of a solve: each attempted step reads its
error ratio with an explicit ``.item()`` (and the initial-step heuristic reads three norms).
"""
from __future__ import annotations

import math

import lucid
from ._problem import options_of
from ._stepper import combine, poly_eval, quartic_fit, rk_step

# "dtype" is accepted and unused: torchdiffeq's option sets the dtype of its time tensors,
# while step times here are host floats (and tensors of y0's dtype).
_OPTIONS = ("first_step", "min_step", "max_step", "safety", "ifactor", "dfactor",
            "max_num_steps", "step_t", "norm", "dtype")


def rms_norm(x):
    """The default error norm of a tensor state: root mean square."""
    return (x * x).mean().sqrt()


def mixed_norm(shapes):
    """torchdiffeq's default for a tuple state: the max over its elements of each one's rms."""
    sizes = [math.prod(s) for s in shapes]

    def norm(x):
        parts, start = [], 0
        for n in sizes:
            if n:
                parts.append(rms_norm(x[..., start:start + n]))
            start += n
        return lucid.stack(parts).max()

    return norm


def _initial_step(prob, tab, y0, f0, rtol, atol, norm):
    """Hairer, Norsett & Wanner's starting-step heuristic (as torchdiffeq)."""
    t0 = prob.grid[0]
    with lucid.no_grad():
        y0, f0 = y0.detach(), f0.detach()
        scale = y0.abs() * rtol + atol
        d0, d1 = norm(y0 / scale), norm(f0 / scale)
        h0 = 1e-6 if d0 < 1e-5 or d1 < 1e-5 else 0.01 * d0 / d1
        y1 = y0 + f0 * (prob.direction * h0)
        f1 = prob.f(prob.time(t0 + prob.direction * h0), y1)
        d2 = norm((f1 - f0) / scale) / h0
    if d1 <= 1e-15 and d2 <= 1e-15:
        h1 = max(1e-6, h0 * 1e-3)
    else:
        h1 = (0.01 / max(d1, d2)) ** (1.0 / (tab.order + 1))
    return min(100 * h0, h1)


def _error_ratio(tab, h, ks, y0, y1, rtol, atol, norm):
    """``norm(err / tol)`` of the embedded estimate ``err = h sum(b_error k)`` (no graph)."""
    with lucid.no_grad():
        y0, y1 = y0.detach(), y1.detach()
        err = combine(y0 * 0.0, h.detach(), tab.b_error, [k.detach() for k in ks])
        tol = lucid.maximum(y0.abs(), y1.abs()) * rtol + atol
        return norm(err / tol)


def _next_step(h, ratio, opts, order):
    """torchdiffeq's controller: ``h * clamp(safety / ratio**(1/order), dfactor, ifactor)``."""
    if ratio == 0.0:
        return h * opts["ifactor"]
    if not math.isfinite(ratio):
        return h * opts["dfactor"]
    dfactor = 1.0 if ratio < 1.0 else opts["dfactor"]
    return h * min(opts["ifactor"], max(opts["safety"] / ratio ** (1.0 / order), dfactor))


class _Segment:
    """One accepted step; its quartic interpolant is built only when something asks."""

    def __init__(self, t0, t1, start, h, y0, y1, f0, f1, ks, tab):
        self.t0, self.t1, self.start, self.h, self.y1 = t0, t1, start, h, y1
        self._parts, self._coeffs = (y0, y1, f0, f1, ks, tab), None

    @property
    def coeffs(self):
        if self._coeffs is None:
            y0, y1, f0, f1, ks, tab = self._parts
            y_mid = combine(y0, self.h, tab.mid, ks)
            self._coeffs, self._parts = quartic_fit(y0, y1, y_mid, f0, f1, self.h), None
        return self._coeffs

    def at(self, t):
        return poly_eval(self.coeffs, (t - self.start) / self.h)


def _settings(prob, tab, options, unbounded):
    opts = options_of(prob.api, tab.name, options, _OPTIONS)
    out = {"first_step": opts.get("first_step"), "min_step": float(opts.get("min_step", 0.0)),
           "max_step": float(opts.get("max_step", math.inf)),
           "safety": float(opts.get("safety", 0.9)), "ifactor": float(opts.get("ifactor", 10.0)),
           "dfactor": float(opts.get("dfactor", 0.2)),
           "max_num_steps": int(opts.get("max_num_steps", 2 ** 31 - 1))}
    user_norm = opts.get("norm")
    if user_norm is not None and not callable(user_norm):
        raise ValueError(f"{prob.api}: options['norm'] must be a callable (Tensor -> 0-D Tensor), "
                         f"got {user_norm!r}")
    norm = prob.norm if user_norm is None else user_norm
    out["norm"] = lambda x: float(norm(x).item())  # host read: a step-size decision
    d, lo = prob.direction, prob.grid[0]
    hi = d * math.inf if unbounded else prob.grid[-1]
    step_t = opts.get("step_t")
    step_t = [] if step_t is None else [float(v) for v in (
        step_t.detach().tolist() if hasattr(step_t, "detach") else step_t)]
    out["stops"] = sorted({v for v in step_t if (v - lo) * d > 0 and (hi - v) * d > 0} | {hi},
                          key=lambda v: v * d)
    return out


def _host_read(prob, tab, fn, *args):
    try:
        return fn(*args)
    except RuntimeError as e:
        if "vmap" not in str(e):
            raise
        raise RuntimeError(f"{prob.api}: the adaptive method {tab.name!r} reads each step's error "
                           "ratio to the host (.item()), which vmap refuses; use a fixed-step "
                           "method (e.g. 'rk4') under vmap") from e


def steps(prob, tab, rtol, atol, options, unbounded=False):
    """Yield accepted ``_Segment`` s from ``t[0]`` to ``t[-1]`` (the last ends exactly there),
    or without end when ``unbounded`` (event detection)."""
    o = _settings(prob, tab, options, unbounded)
    d, t, y = prob.direction, prob.grid[0], prob.y0
    f0 = prob.f(prob.time(t), y)
    h = abs(float(o["first_step"])) if o["first_step"] is not None else \
        _host_read(prob, tab, _initial_step, prob, tab, y, f0, rtol, atol, o["norm"])
    stops, n_steps = list(o["stops"]), 0
    while stops:
        n_steps += 1
        if n_steps > o["max_num_steps"]:
            raise RuntimeError(f"{prob.api}: max_num_steps={o['max_num_steps']} exceeded at "
                               f"t={t!r}")
        h = min(max(h, o["min_step"]), o["max_step"])
        t1 = t + d * h
        if (t1 - stops[0]) * d >= 0:
            t1 = stops[0]
        if t1 == t:
            raise RuntimeError(f"{prob.api}: step size underflow (h={h!r}) at t={t!r}")
        h_try = abs(t1 - t)
        start, h_t = prob.time(t), prob.const(t1 - t)
        y1, ks = rk_step(prob.f, tab, start, y, h_t, k0=f0)
        ratio = _host_read(prob, tab, _error_ratio, tab, h_t, ks, y, y1, rtol, atol, o["norm"])
        h = _next_step(h_try, ratio, o, tab.order)
        if not (ratio <= 1.0 or h_try <= o["min_step"]):
            continue
        f1 = ks[-1] if tab.is_fsal else prob.f(prob.time(t1), y1)
        yield _Segment(t, t1, start, h_t, y, y1, f0, f1, ks, tab)
        t, y, f0 = t1, y1, f1
        if t1 == stops[0]:
            stops.pop(0)


def integrate(prob, tab, rtol, atol, options):
    """States at every time of ``prob.tt``, interpolated inside the accepted steps."""
    traj, seg = [prob.y0], None
    it = steps(prob, tab, rtol, atol, options)
    for j in range(1, len(prob.grid)):
        while seg is None or (seg.t1 - prob.grid[j]) * prob.direction < 0:
            seg = next(it)
        prob.record(traj, seg.at(prob.tt[j]))
    for _ in it:  # finish the generator (nothing left: the last stop is t[-1])
        pass
    return traj
