"""Elementwise primitives, by family.

- ``arithmetic``: casting, type promotion (NOTE [Type promotion]), + - * / **, clone,
  integer division;
- ``transcendental``: exp/log, trig and hyperbolic, sigmoid, erf, rounding, hypot, lerp,
  nan_to_num;
- ``comparison``: where, maximum/minimum, comparisons, clamp, value tests (isnan, isclose...);
- ``logical``: logic and bitwise ops (no gradients);
- ``extra``: addmm-style fused forms, copysign, fmax/fmin, trapezoid, distances, gcd/shifts (issue 10).

Each primitive is one ``unary``/``binary``/``defprim`` call holding its forward and its
rules; see ``_family.py`` for how the vjp, jvp and batching rules are derived.
"""
from . import arithmetic, comparison, extra, logical, transcendental
from .arithmetic import *  # noqa: F401,F403
from .arithmetic import _scalar_ok, cast, promote  # noqa: F401  (used across lucid.ops)
from .comparison import *  # noqa: F401,F403
from .logical import *  # noqa: F401,F403
from .transcendental import *  # noqa: F401,F403
from .extra import *  # noqa: F401,F403
from .transcendental import _erf_numpy, _erfc_numpy  # noqa: F401  (references in tests)

__all__ = arithmetic.__all__ + transcendental.__all__ + comparison.__all__ + logical.__all__ + extra.__all__
