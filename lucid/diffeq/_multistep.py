"""Fixed-grid Adams multistep methods (See NOTE [ODE solvers]).

``explicit_adams`` (Adams-Bashforth) and ``implicit_adams`` / ``fixed_adams`` (Bashforth
predictor, Adams-Moulton corrector iterated up to ``max_iters`` times) reuse the derivatives
of earlier steps, so a step costs one evaluation (plus the corrector's). The order ramps up
with the history: while fewer than 4 derivatives are remembered (and on a non-uniform grid,
where the weights do not hold) a step is an RK4 (3/8 rule) step. Weights are derived in exact
rationals from the Lagrange interpolant through the remembered nodes.
"""
from __future__ import annotations

from fractions import Fraction
from functools import lru_cache

import lucid
from . import _fixed
from ._stepper import combine, rk_step
from ._tableau import RK4

METHODS = {"explicit_adams": False, "implicit_adams": True, "fixed_adams": True}
_EXTRA = ("max_order", "max_iters")
_MIN_ORDER, _MAX_ORDER = 4, 12


@lru_cache(maxsize=None)
def weights(order, implicit):
    """``b_j`` of ``y_{n+1} = y_n + h sum_j b_j f_{n+1-j}`` (implicit) or ``f_{n-j}``, newest
    first: the integrals over ``[0, 1]`` of the Lagrange basis through the nodes."""
    nodes = [Fraction(1 - j) if implicit else Fraction(-j) for j in range(order)]
    out = []
    for j, xj in enumerate(nodes):
        poly = [Fraction(1)]  # ascending coefficients of prod_{i != j} (s - x_i) / (x_j - x_i)
        for i, xi in enumerate(nodes):
            if i != j:
                poly = [a * -xi / (xj - xi) + b / (xj - xi)
                        for a, b in zip(poly + [Fraction(0)], [Fraction(0)] + poly)]
        out.append(sum(c / (p + 1) for p, c in enumerate(poly)))
    assert sum(out) == 1
    return tuple(float(w) for w in out)


def _converged(old, new, rtol, atol):
    with lucid.no_grad():
        old, new = old.detach(), new.detach()
        tol = lucid.maximum(old.abs(), new.abs()) * rtol + atol
        err = (new - old) / tol
        return float((err * err).mean().sqrt().item()) <= 1.0  # host read: a decision


def _settings(api, opts):
    max_order, max_iters = opts.get("max_order", _MAX_ORDER), opts.get("max_iters", 4)
    for key, value, lo, hi in (("max_order", max_order, 1, _MAX_ORDER),
                               ("max_iters", max_iters, 1, None)):
        if isinstance(value, bool) or not isinstance(value, int) or value < lo or \
                (hi is not None and value > hi):
            raise ValueError(f"{api}: options[{key!r}] must be an int in [{lo}, "
                             f"{hi if hi is not None else 'inf'}], got {value!r}")
    return max_order, max_iters


def adams_stepper(prob, implicit, rtol, atol):
    """``make_step`` (see ``_fixed.integrate``) for an Adams method."""

    def make_step(opts, floats, times):
        max_order, max_iters = _settings(prob.api, opts)
        gaps = [b - a for a, b in zip(floats, floats[1:])]
        uniform = all(abs(g - gaps[0]) <= 1e-12 * abs(gaps[0]) for g in gaps)
        history = []

        def step(k, y):
            h, f0 = times[k + 1] - times[k], prob.f(times[k], y)
            history.insert(0, f0)
            del history[max_order:]
            order = len(history)
            if not uniform or order < _MIN_ORDER:
                return rk_step(prob.f, RK4, times[k], y, h, k0=f0)[0], f0
            y1 = combine(y, h, weights(order, False), history)
            if implicit:
                am = weights(order, True)
                for _ in range(max_iters):
                    f1 = prob.f(times[k + 1], y1)
                    y_new = combine(y, h, am, [f1] + history[:order - 1])
                    done = _converged(y1, y_new, rtol, atol)
                    y1 = y_new
                    if done:
                        break
            return y1, f0

        return step

    return make_step


def integrate(prob, name, rtol, atol, options):
    return _fixed.integrate(prob, name, options, adams_stepper(prob, METHODS[name], rtol, atol),
                            _EXTRA)
