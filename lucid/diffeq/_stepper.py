"""One explicit Runge-Kutta step and the interpolants (See NOTE [ODE solvers]).

Everything here is written in Lucid ops on tensors (no host reads), so a step is
differentiable by ordinary backprop, batches under ``vmap`` and runs on any device.
"""
from __future__ import annotations

import numpy as np


def combine(y, h, weights, ks):
    """``y + h * sum_i weights[i] * ks[i]``, skipping zero weights."""
    acc = None
    for w, k in zip(weights, ks):
        if w != 0.0:
            term = k * w
            acc = term if acc is None else acc + term
    return y if acc is None else y + h * acc


def rk_step(func, tab, t, y, h, k0=None):
    """One step of ``tab`` from ``(t, y)`` with tensor step ``h``; returns ``(y1, ks)``.

    ``k0`` is ``func(t, y)`` when the caller already has it (FSAL reuse). For an FSAL tableau
    the new state is the last stage's input, so ``ks[-1] == func(t + h, y1)``.
    """
    ks, y1 = [], None
    for i, (row, ci) in enumerate(zip(tab.a, tab.c)):
        if i == 0 and k0 is not None:
            ks.append(k0)
            continue
        yi = combine(y, h, row, ks)
        ks.append(func(t if ci == 0.0 else t + h * ci, yi))
        y1 = yi
    if not tab.is_fsal:
        y1 = combine(y, h, tab.b, ks)
    return y1, ks


# Quartic p(s), s in [0, 1], with p(0)=y0, p'(0)=h f0, p(1)=y1, p'(1)=h f1, p(1/2)=y_mid.
# Writing p = y0 + h f0 s + C s^2 + B s^3 + A s^4 leaves a 3x3 system for (C, B, A) whose
# right-hand sides are r1 = y1-y0-h f0, r2 = h(f1-f0), r3 = 16(y_mid-y0-h f0/2).
_QUARTIC = np.linalg.inv(np.array([[1.0, 1.0, 1.0], [2.0, 3.0, 4.0], [4.0, 2.0, 1.0]])).tolist()


def quartic_fit(y0, y1, y_mid, f0, f1, h):
    """Coefficients ``(y0, h f0, C, B, A)`` of the dense-output quartic of one step."""
    hf0 = h * f0
    r = (y1 - y0 - hf0, h * (f1 - f0), (y_mid - y0 - hf0 * 0.5) * 16.0)
    cba = [r[0] * m[0] + r[1] * m[1] + r[2] * m[2] for m in _QUARTIC]
    return (y0, hf0, *cba)


def hermite_fit(y0, y1, f0, f1, h):
    """Coefficients of the cubic Hermite interpolant of one step (same form as ``quartic_fit``)."""
    hf0, hf1 = h * f0, h * f1
    d = y1 - y0
    return (y0, hf0, d * 3.0 - hf0 * 2.0 - hf1, hf0 + hf1 - d * 2.0)


def poly_eval(coeffs, s):
    """Evaluate ``sum_i coeffs[i] * s**i`` by Horner's rule (``s`` a 0-D tensor)."""
    acc = coeffs[-1]
    for c in reversed(coeffs[:-1]):
        acc = acc * s + c
    return acc
