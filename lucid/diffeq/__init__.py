"""lucid.diffeq: ordinary differential equation solvers (torchdiffeq-shaped; Lucid 3's API).

``odeint(func, y0, t)`` integrates ``dy/dt = func(t, y)`` and returns ``y`` at each time of
``t``; ``odeint_adjoint`` does the same but computes gradients with the adjoint method
(constant memory); ``odeint_dense`` returns a continuous solution; ``ButcherTableau`` and
the tableau constants name the methods (``method=`` also takes their names).

# NOTE [ODE solvers]
# Every Runge-Kutta method is an explicit tableau run by one stepper (_stepper.rk_step); the
# Adams methods (_multistep) combine remembered derivatives. All arithmetic is plain Lucid
# ops: a solve is differentiable by ordinary backprop (w.r.t. y0, t and whatever func closes
# over) and device-agnostic. Fixed-step methods step once per interval of t (or on
# options["step_size"] / grid_constructor's grid, interpolated back to t) and make no host
# reads (so they also run under vmap), except the convergence tests of implicit Adams'
# corrector and of the implicit tableaux' Newton iteration (explicit ``.item()`` reads).
# Adaptive methods (tableaux with b_error) control the local error with torchdiffeq's rms norm
# (max of per-element rms for tuple states) and controller, and interpolate to t with the
# quartic anchored on the step's midpoint (tableau ``mid``). Their host reads are the step-size
# decisions, each an explicit ``.item()``; event location reads the event value the same way.
# Step times are host floats; as tensors they are ``t[0] + offset`` so d/dt[0] still flows,
# and outputs are interpolated at the tensor t[j] so d/dt[j] flows too. Tuple states are
# flattened into one 1-D state (_flatten) and split back on return.
# ``lucid.diffeq`` is imported lazily (lucid._LAZY_MODULES), never by ``import lucid``.

``odeint_event`` (or ``odeint(..., event_fn=...)``) integrates until an event function changes
sign.

The fixed-step Adams methods are reached by name: ``method="explicit_adams"``,
``"implicit_adams"`` (alias ``"fixed_adams"``).

Implicit Runge-Kutta tableaux (``IMPLICIT_EULER``, ``IMPLICIT_MIDPOINT``, ``TRAPEZOID``,
``RADAU_IIA3``, ``RADAU_IIA5``, ``GL4``, ``GL6``, ``SDIRK2``, ``TRBDF2``) are fixed-step methods
whose stages are solved by Newton's method (``_implicit``), for stiff problems.

Not implemented (the names do not exist): ``dopri8``, ``perturb=True``/``jump_t``, events
through the adjoint, dense output or events with Adams/implicit methods, SDEs.
"""
from ._adjoint import odeint_adjoint
from ._solvers import odeint, odeint_dense, odeint_event
from ._tableau import (ADAPTIVE_HEUN, BOSH3, DOPRI5, EULER, FEHLBERG2, GL4, GL6, HEUN2, HEUN3,
                       IMPLICIT_EULER, IMPLICIT_MIDPOINT, MIDPOINT, RADAU_IIA3, RADAU_IIA5, RK4,
                       RK4_CLASSIC, SDIRK2, TRAPEZOID, TRBDF2, TSIT5, ButcherTableau)

__all__ = ["odeint", "odeint_adjoint", "odeint_dense", "odeint_event", "ButcherTableau",
           "DOPRI5", "TSIT5", "BOSH3", "FEHLBERG2", "ADAPTIVE_HEUN", "EULER", "MIDPOINT", "HEUN2",
           "HEUN3", "RK4", "RK4_CLASSIC", "IMPLICIT_EULER", "IMPLICIT_MIDPOINT", "TRAPEZOID",
           "RADAU_IIA3", "RADAU_IIA5", "GL4", "GL6", "SDIRK2", "TRBDF2"]
