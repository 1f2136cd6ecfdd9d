"""Integration until an event function changes sign (See NOTE [ODE solvers]).

The solver steps until ``event_fn(t, y)`` changes sign over a step, then bisects the step's
interpolant on the host (``.item()`` of the event value: a decision, like step-size control).
The event time is then made differentiable by the implicit function theorem: with ``t*`` the
root of ``g(t, y(t)) = 0``, ``dt* = -(dg along the solution's parameters) / (g_t + g_y . f)``,
and the returned state is ``y(t*)`` with its total derivative ``dy + f dt*``.
"""
from __future__ import annotations

import lucid
from . import _adaptive, _fixed

_MAX_STEPS = 1_000_000


def _value(api, event_fn, t, y):
    with lucid.no_grad():
        g = event_fn(t, y)
    if not hasattr(g, "numel") or g.numel() != 1:
        shape = tuple(g.shape) if hasattr(g, "shape") else type(g).__name__
        raise ValueError(f"{api}: event_fn must return a single-element Tensor, got {shape}")
    return float(g.item())  # host read: the event decision


def _bisect(prob, seg, event_fn, g0):
    seg.coeffs  # built (and cached) with the graph, before the no_grad probes below
    lo, hi = seg.t0, seg.t1
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if mid in (lo, hi):
            break
        with lucid.no_grad():
            g = _value(prob.api, event_fn, prob.const(mid), seg.at(prob.const(mid)))
        if (g > 0) == (g0 > 0) and g != 0.0:
            lo = mid
        else:
            hi = mid
    return hi


def _locate(prob, tab, event_fn, rtol, atol, options):
    """``(t*, segment containing it)``; the segment is None for an event at ``t[0]``."""
    g0 = _value(prob.api, event_fn, prob.time(prob.grid[0]), prob.y0)
    if g0 == 0.0:
        return prob.grid[0], None
    if tab.is_adaptive:
        it = _adaptive.steps(prob, tab, rtol, atol, options, unbounded=True)
    else:
        it = _fixed.unbounded_steps(prob, tab, options)
    for n, seg in enumerate(it):
        if n >= _MAX_STEPS:
            break
        g1 = _value(prob.api, event_fn, prob.time(seg.t1), seg.y1)
        if g1 == 0.0 or (g1 > 0) != (g0 > 0):
            return (seg.t1 if g1 == 0.0 else _bisect(prob, seg, event_fn, g0)), seg
    raise RuntimeError(f"{prob.api}: event_fn did not change sign within {_MAX_STEPS} steps")


def integrate_until_event(prob, tab, event_fn, rtol, atol, options):
    """``(event_t, y at the event)``, both differentiable (see the module docstring)."""
    t_star, seg = _locate(prob, tab, event_fn, rtol, atol, options)
    tau = prob.time(t_star)
    y_star = prob.y0 if seg is None else seg.at(tau)
    with lucid.enable_grad():
        t_leaf, y_leaf = tau.detach().requires_grad_(True), y_star.detach().requires_grad_(True)
        g_t, g_y = lucid.autograd.grad(event_fn(t_leaf, y_leaf).sum(), [t_leaf, y_leaf],
                                       allow_unused=True)
    f_star = prob.f(tau.detach(), y_star.detach()).detach()
    denom = (g_y.detach() * f_star).sum() if g_y is not None else lucid.zeros_like(tau)
    if g_t is not None:
        denom = denom + g_t.detach()
    g = event_fn(tau, y_star).sum()
    event_t = tau - (g - g.detach()) / denom if g.requires_grad else tau
    return event_t, y_star + f_star * (event_t - tau)
